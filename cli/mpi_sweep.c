/* mpi_sweep.c — `mpirun -n K qmla sweep CAPTURE -o RESULTS.h5 ...`: the sweep
 * distributed over MPI ranks (built with -Dmpi, Open MPI). The library knows
 * nothing of MPI; this file only assigns shards and gathers:
 *   - rank r of K runs the ordinary sweep driver on shard r of K with the
 *     cost-balanced assignment (qmla_shard_assign: consecutive runs of the
 *     plan of equal total T^2, so a rank reads only its part of the
 *     capture; deterministic), journaling to
 *     RESULTS.h5.part-r-of-K.journal and writing the part file
 *     RESULTS.h5.part-r-of-K (qmla/part.h);
 *   - every rank first replays, read only, every RESULTS.h5.part-* file and
 *     journal left by earlier runs with any K (and RESULTS.h5.journal of an
 *     interrupted serial run), so a rerun with any number of ranks resumes;
 *   - the ranks agree on success (MPI_Allgather of each status); a failed
 *     rank prints its own message, rank 0 names the failed ranks, every rank
 *     exits non-zero and the journals and finished parts stay;
 *   - rank 0 merges the K parts (qmla_merge: the rows in plan order, the
 *     single-run file bit for bit in /responses and /summary), then removes
 *     the parts and journals.
 * Launch: Open MPI's mpirun (or srun) sets OMPI_COMM_WORLD_SIZE / PMIX_RANK /
 * PMI_RANK; without them `qmla sweep` runs serially and never calls MPI.
 * Example (experiments/cluster/sweep-mpi.sbatch):
 *   mpirun -n 4 qmla sweep data/tiny-mla-default.h5 -o r.h5 --threads 1 */
#include "cli.h"
#include "cli_safe.h"
#include "qmla/part.h"

#include <glob.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cli_mpi_launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") ||
           getenv("PMI_RANK") || getenv("PMI_SIZE");
}

typedef struct rank_progress {
    cli_progress p;
    int rank;
    size_t resumed; /* items done before this run computed any */
    int first;
} rank_progress;

static int progress(void *ctx, size_t done, size_t total, size_t resumed)
{
    rank_progress *rp = ctx;
    if (rp->first) {
        rp->resumed = resumed;
        rp->first = 0;
    }
    if (rp->rank == 0)
        cli_progress_update(&rp->p, done, total);
    return cli_interrupted() != 0;
}

/* RESULTS.h5.part-* (parts and journals of any K). */
static int list_parts(const char *out, glob_t *g)
{
    char pat[4200];
    size_t o = 0;
    for (const char *c = out; *c && o + 3 < sizeof pat - 16; c++) {
        if (strchr("*?[\\", *c))
            pat[o++] = '\\';
        pat[o++] = *c;
    }
    snprintf(pat + o, sizeof pat - o, ".part-*");
    memset(g, 0, sizeof *g);
    const int rc = glob(pat, 0, NULL, g);
    return rc == 0 || rc == GLOB_NOMATCH ? 0 : -1;
}

int cli_mpi_sweep(qmla_capture *cap, const qmla_sweep_selection *sel,
                  qmla_sweep_opts *o, const char *out, int verbose)
{
    int provided, rank, size;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size == 1) {
        MPI_Finalize();
        return -1; /* the caller runs the serial sweep */
    }
    int rc = QMLA_EXIT_OK;
    if (o->n_shards > 1) {
        rc = cli_fail("sweep", "--shard and mpirun do not combine: under MPI the "
                               "ranks are the shards");
        MPI_Finalize();
        return rc;
    }
    /* the merged file is new: extending an existing one is the serial
     * sweep's job (it keeps layers outside this selection) */
    struct stat sb;
    int refuse = rank == 0 && !o->force && stat(out, &sb) == 0;
    MPI_Bcast(&refuse, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (refuse) {
        if (rank == 0)
            cli_fail("sweep", "%s exists: an MPI sweep writes a new results file "
                     "(extend an existing one with a serial sweep, or use --force "
                     "to replace it, or another -o)", out);
        MPI_Finalize();
        return QMLA_EXIT_USAGE;
    }
    glob_t g;
    char jserial[4200], part[4200];
    snprintf(jserial, sizeof jserial, "%s.journal", out);
    snprintf(part, sizeof part, "%s.part-%d-of-%d", out, rank, size);
    list_parts(out, &g);
    const char **replay = calloc(g.gl_pathc + 1, sizeof *replay);
    size_t n_replay = 0;
    if (replay) {
        for (size_t k = 0; k < g.gl_pathc; k++)
            replay[n_replay++] = g.gl_pathv[k];
        if (stat(jserial, &sb) == 0)
            replay[n_replay++] = jserial;
    }
    /* every rank has listed the files of earlier runs before any writes */
    MPI_Barrier(MPI_COMM_WORLD);
    o->shard = (size_t)rank;
    o->n_shards = (size_t)size;
    o->balance = 1;
    o->replay = replay;
    o->n_replay = n_replay;
    rank_progress rp;
    memset(&rp, 0, sizeof rp);
    rp.rank = rank;
    rp.first = 1;
    cli_progress_init(&rp.p, "sweep");
    o->progress = progress;
    o->progress_ctx = &rp;
    qmla_error err;
    qmla_error_clear(&err);
    qmla_summary s;
    int stopped = 0;
    const double t0 = cli_now();
    int st = qmla_sweep_run(cap, sel, o, part, &s, &stopped, &err);
    if (rank == 0)
        cli_progress_end(&rp.p);
    if (!st && !stopped)
        qmla_summary_free(&s);
    int mine = st ? 1 : (stopped || cli_interrupted()) ? 2 : 0;
    if (st) {
        char pre[64];
        snprintf(pre, sizeof pre, "sweep (rank %d of %d)", rank, size);
        cli_lib_error(pre, &err);
    }
    int *all = calloc((size_t)size, sizeof *all);
    MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    unsigned long long resumed = rp.resumed, total_resumed = 0;
    MPI_Reduce(&resumed, &total_resumed, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0,
               MPI_COMM_WORLD);
    int failed = 0, interrupted = 0;
    for (int r = 0; r < size; r++) {
        failed += all[r] == 1;
        interrupted += all[r] == 2;
    }
    if (failed || interrupted) {
        if (rank == 0) {
            char list[512] = "";
            size_t l = 0;
            for (int r = 0; r < size && l < sizeof list - 16; r++)
                if (all[r])
                    l += (size_t)snprintf(list + l, sizeof list - l, "%s%d",
                                          l ? "," : "", r);
            fprintf(stderr, "qmla sweep: rank(s) %s of %d %s; finished items are "
                    "kept in %s.part-*.journal and finished parts in %s.part-*; "
                    "rerun (with any -n) to resume\n", list, size,
                    failed ? "failed" : "were interrupted", out, out);
        }
        rc = failed ? QMLA_EXIT_USAGE : QMLA_EXIT_INTERRUPTED;
    } else if (rank == 0) {
        char **parts = calloc((size_t)size, sizeof *parts);
        for (int r = 0; parts && r < size; r++) {
            parts[r] = malloc(4200);
            if (parts[r])
                snprintf(parts[r], 4200, "%s.part-%d-of-%d", out, r, size);
        }
        st = parts ? qmla_merge((const char *const *)parts, (size_t)size, out,
                                cli_command_line(), &s, &err)
                   : qmla_error_set(&err, QMLA_ENOMEM, "out of memory");
        if (st)
            rc = cli_lib_error("sweep", &err);
        else {
            glob_t g2;
            if (list_parts(out, &g2) == 0) {
                for (size_t k = 0; k < g2.gl_pathc; k++)
                    unlink(g2.gl_pathv[k]);
                globfree(&g2);
            }
            unlink(jserial);
            printf("results  %s  (%zu layers; %d MPI ranks; %llu items resumed; "
                   "%.1f s)\n\n", out, s.n_layers, size, total_resumed,
                   cli_now() - t0);
            cli_print_summary(&s, verbose, o->verify);
            qmla_summary_free(&s);
        }
        for (int r = 0; parts && r < size; r++)
            free(parts[r]);
        free(parts);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(all);
    free(replay);
    globfree(&g);
    MPI_Finalize();
    return rc;
}

/* ---- jvp, predict, intervene (cli.h) -------------------------------------- */

/* OUT.<group>.part-* */
static int list_op_parts(const char *out, const char *group, glob_t *g)
{
    char base[4300];
    snprintf(base, sizeof base, "%s.%s", out, group);
    return list_parts(base, g);
}

int cli_mpi_op_shards(const char *cmd, const char *out, const char *group, const char *refuse,
                      int (*run_part)(void *ctx, const char *part, size_t shard, size_t n,
                                      int rank, const cli_mpi_replay *replay, int *stopped,
                                      qmla_error *err),
                      void *ctx, char ***parts, size_t *n_parts)
{
    int provided, rank, size;
    *parts = NULL;
    *n_parts = 0;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size == 1) {
        MPI_Finalize();
        return -1;
    }
    if (refuse) {
        const int rc = rank == 0 ? cli_fail(cmd, "%s", refuse) : QMLA_EXIT_USAGE;
        MPI_Finalize();
        return rc;
    }
    char part[4200];
    snprintf(part, sizeof part, "%s.%s.part-%d-of-%d", out, group, rank, size);
    /* the files of earlier runs, listed by every rank before any writes */
    glob_t g;
    list_op_parts(out, group, &g);
    MPI_Barrier(MPI_COMM_WORLD);
    const cli_mpi_replay rpl = {(const char *const *)g.gl_pathv, g.gl_pathc};
    qmla_error err;
    qmla_error_clear(&err);
    int stopped = 0;
    const int st = run_part(ctx, part, (size_t)rank, (size_t)size, rank, &rpl, &stopped, &err);
    globfree(&g);
    int mine = st ? 1 : (stopped || cli_interrupted()) ? 2 : 0;
    if (st) {
        char pre[96];
        snprintf(pre, sizeof pre, "%s (rank %d of %d)", cmd, rank, size);
        cli_lib_error(pre, &err);
    }
    int *all = calloc((size_t)size, sizeof *all);
    if (!all) {
        fprintf(stderr, "qmla %s (rank %d of %d): out of memory\n", cmd, rank, size);
        MPI_Abort(MPI_COMM_WORLD, QMLA_EXIT_USAGE);
    }
    MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    int failed = 0, interrupted = 0;
    for (int r = 0; r < size; r++) {
        failed += all[r] == 1;
        interrupted += all[r] == 2;
    }
    int rc = QMLA_EXIT_OK;
    if (failed || interrupted) {
        if (rank == 0) {
            char list[512] = "";
            size_t l = 0;
            for (int r = 0; r < size && l < sizeof list - 16; r++)
                if (all[r])
                    l += (size_t)snprintf(list + l, sizeof list - l, "%s%d", l ? "," : "", r);
            fprintf(stderr, "qmla %s: rank(s) %s of %d %s; finished items are kept in "
                    "%s.%s.part-*-of-%d.%s.journal and finished parts in %s.%s.part-*; "
                    "rerun (with any -n) to resume\n", cmd, list, size,
                    failed ? "failed" : "were interrupted", out, group, size, group, out, group);
        }
        rc = failed ? QMLA_EXIT_USAGE : QMLA_EXIT_INTERRUPTED;
    } else if (rank == 0) {
        char **p = calloc((size_t)size, sizeof *p);
        for (int r = 0; p && r < size; r++) {
            p[r] = malloc(4200);
            if (!p[r]) {
                cli_mpi_parts_free(p, (size_t)size, 0, NULL, NULL);
                p = NULL;
                break;
            }
            snprintf(p[r], 4200, "%s.%s.part-%d-of-%d", out, group, r, size);
        }
        if (p) {
            *parts = p;
            *n_parts = (size_t)size;
            rc = -2;
        } else
            rc = cli_fail(cmd, "out of memory");
    }
    free(all);
    MPI_Finalize();
    return rc;
}

void cli_mpi_parts_free(char **parts, size_t n, int remove, const char *out,
                        const char *group)
{
    for (size_t k = 0; parts && k < n; k++) {
        if (remove && parts[k])
            unlink(parts[k]);
        free(parts[k]);
    }
    free(parts);
    glob_t g;
    if (remove && out && list_op_parts(out, group, &g) == 0) {
        for (size_t k = 0; k < g.gl_pathc; k++)
            unlink(g.gl_pathv[k]);
        globfree(&g);
    }
}
