/* cmd_predict.c — `qmla predict` (and the shared body of `qmla jvp`,
 * cmd_jvp.c): the operator–error model of docs/math.md §5 on a capture.
 *
 *   qmla jvp     CAPTURE -o RESULTS.h5   local (JVP) versus finite gains of
 *                the QDQ directions INT2/3/4/8 at nu (default 1e-3) -> /jvp
 *   qmla predict CAPTURE -o RESULTS.h5   + exact token sensitivities, error
 *                allocations, the three predictors and the frozen
 *                validation on held-out configurations -> /predict
 * Both resume from RESULTS.h5.<group>.journal and add their group to
 * RESULTS.h5 (docs/results-format.md). */
#include "cli.h"
#include "cli_safe.h"
#include "qmla/capture.h"
#include "qmla/predict.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void help(FILE *f, const void *ctx)
{
    const int pred = *(const int *)ctx;
    const char *name = pred ? "predict" : "jvp";
    fprintf(f,
        "usage: qmla %s CAPTURE.h5 -o RESULTS.h5 [--nmse 1e-3] [--bits LIST]\n"
        "                 [--group 64] [--layers 0-3,7] [--cells a,b] [--threads N]\n"
        "                 [--force] [--engine cuda [--device N]] [--shard I/N]\n"
        "       qmla %s CAPTURE.h5 PART... --merge -o RESULTS.h5 [same options]\n"
        "       mpirun -n K qmla %s ... (built with MPI: rank r is shard r,\n"
        "       rank 0 merges)\n"
        "\n", name, name, name);
    if (!pred)
        fprintf(f,
            "Local versus finite gains (docs/math.md §5): for every layer, cell and\n"
            "sequence and each QDQ direction (--bits, default 2,3,4,8) rescaled to\n"
            "cache NMSE --nmse (default 1e-3), the JVP gain\n"
            "g = (||J E||^2/||Y||^2)/(||E||^2/||X||^2) and the finite response at the\n"
            "same E, both paths. Prints their Spearman correlation (paper: 0.986 over\n"
            "24 points). Writes group /jvp of RESULTS.h5.\n");
    else
        fprintf(f,
            "The operator-error model (docs/math.md §5): exact sensitivities sigma_t of\n"
            "every token (both paths), error allocations w_t, and three predictors of\n"
            "the gain (cache only; operator trace (1/T) sum sigma_t; operator +\n"
            "allocation sum w_t sigma_t), against the finite gains. Configurations:\n"
            "the development direction INT4 (--group, --nmse) and the held-out ones\n"
            "(INT2, INT3, INT8; INT4 at nu/10 and 10 nu; INT4 at group/2). Prints the\n"
            "RoPE/content log-ratio MAE of each predictor (paper, DeepSeek-V2-Lite:\n"
            "1.57 / 0.91 / 0.11) and the frozen predictor's held-out Spearman and\n"
            "median |log error| (0.99 / 0.11). Writes group /predict of RESULTS.h5.\n");
    fprintf(f,
        "\n"
        "  -o RESULTS.h5   results file (created, or the group added/replaced)\n"
        "  --nmse NU       cache NMSE of the directions (default 1e-3)\n"
        "  --bits LIST     (jvp) bit widths, default 2,3,4,8\n"
        "  --group G       quantizer group size (default 64)\n"
        "  --layers LIST   --cells LIST   --threads N   as for qmla sweep\n"
        "  --force         discard a journal of other options\n"
        "  --shard I/N     compute only shard I (0-based) of N (the sweep's plan,\n"
        "                  balanced by cost T^2: a shard reads only its part of the\n"
        "                  capture) and write a part file to -o\n"
        "  --merge         the arguments after CAPTURE are the N parts: check them\n"
        "                  (same capture, options, plan and engine; every shard\n"
        "                  once; no item missing or twice) and write the group,\n"
        "                  identical to a one-process run; nothing is computed\n"
        "  -v              per-layer table (development direction for predict,\n"
        "                  the last --bits for jvp; means over cells and sequences)\n"
        "Resume: interrupt and rerun the same command (RESULTS.h5.%s.journal).\n"
        CLI_ENGINE_HELP
        "example: qmla %s data/tiny-mla-default.h5 -o op.h5 --threads 2\n",
        name, name);
}

/* Per layer, means over cells and sequences of the points of configuration
 * c: finite and local gains per path, and (pred) the predicted RoPE/content
 * log-ratio of the operator+allocation predictor against the measured one. */
static void print_layers(const qmla_op_point *p, size_t n, const qmla_op_config *c,
                         int pred)
{
    printf("\nper layer, INT%d/G%d/nu %g (means over cells and sequences)\n", c->bits,
           c->group, c->nmse);
    printf("%6s %10s %10s %10s %10s %10s", "layer", "R_C", "g_C(JVP)", "R_P", "g_P(JVP)",
           "R_P/R_C");
    if (pred)
        printf(" %13s %15s", "log(R_P/R_C)", "pred op+alloc");
    printf("\n");
    for (size_t k = 0; k < n;) {
        size_t j = k;
        double a[6] = {0}, cnt[2] = {0};
        for (; j < n && p[j].layer == p[k].layer; j++) {
            const qmla_op_point *q = &p[j];
            if (q->degenerate || q->bits != c->bits || q->group != c->group ||
                q->nmse != c->nmse)
                continue;
            a[q->path * 2] += q->g_finite;
            a[q->path * 2 + 1] += q->g_jvp;
            a[4 + q->path] += log(q->pred_alloc);
            cnt[q->path]++;
        }
        if (cnt[0] > 0 && cnt[1] > 0) {
            const double rc = a[0] / cnt[0], rp = a[2] / cnt[1];
            printf("%6d %10.4g %10.4g %10.4g %10.4g %9.3fx", p[k].layer, rc, a[1] / cnt[0],
                   rp, a[3] / cnt[1], rp / rc);
            if (pred)
                printf(" %+13.3f %+15.3f", log(rp / rc), a[5] / cnt[1] - a[4] / cnt[0]);
            printf("\n");
        } else {
            printf("%6d  degenerate\n", p[k].layer);
        }
        k = j;
    }
}

/* The frozen operator+allocation predictor by cell and by direction (also
 * in /predict as by_cell_* and by_direction_*). */
static int print_splits(const qmla_op_point *p, size_t n, qmla_error *err)
{
    for (int by = 0; by < 2; by++) {
        qmla_op_split *r = NULL;
        size_t nr = 0;
        if (qmla_op_split_compute(p, n, by, &r, &nr, err))
            return -1;
        printf("\nfrozen operator+allocation predictor by %s\n", by ? "direction" : "cell");
        printf("%-22s %8s %9s %9s   %6s %9s %9s   %6s %9s\n", by ? "direction" : "cell",
               "heldout", "Spearman", "med|err|", "all", "Spearman", "med|err|", "pairs",
               "MAE");
        for (size_t k = 0; k < nr; k++) {
            char key[160], v[5][16];
            const double x[5] = {r[k].spearman_heldout, r[k].median_heldout, r[k].spearman_all,
                                 r[k].median_all, r[k].mae_alloc};
            snprintf(key, sizeof key, "%s%s", r[k].key, r[k].heldout == 1 ? "*" : "");
            for (int i = 0; i < 5; i++) /* undefined (no points): "-", not "nan" */
                if (isfinite(x[i]))
                    snprintf(v[i], sizeof v[i], "%.3f", x[i]);
                else
                    snprintf(v[i], sizeof v[i], "-");
            printf("%-22s %8zu %9s %9s   %6zu %9s %9s   %6zu %9s\n", key, r[k].n_heldout, v[0],
                   v[1], r[k].n_all, v[2], v[3], r[k].n_pairs, v[4]);
        }
        free(r);
    }
    printf("(heldout: points of held-out directions; all: every direction; MAE: the\n"
           " operator+allocation RoPE/content log-ratio MAE over the row's pairs;\n"
           " -: undefined, no points)\n");
    return 0;
}

#if QMLA_HAVE_MPI
/* One rank's shard under mpirun (cli_mpi_op_shards). */
typedef struct op_mpi {
    qmla_capture *cap;
    const qmla_sweep_selection *sel;
    qmla_op_opts o;
} op_mpi;

static int op_mpi_part(void *ctx, const char *part, size_t shard, size_t n, int rank,
                       const cli_mpi_replay *replay, int *stopped, qmla_error *err)
{
    op_mpi *m = ctx;
    qmla_op_opts o = m->o;
    o.shard = shard;
    o.n_shards = n;
    o.replay = replay->files;
    o.n_replay = replay->n;
    if (rank != 0) /* rank 0's progress line only */
        o.progress = cli_quiet_poll;
    qmla_op_stats s;
    return qmla_op_run_points(m->cap, m->sel, &o, part, &s, NULL, NULL, stopped, err);
}
#endif

int cli_op_main(int argc, char **argv, int pred)
{
    const char *name = pred ? "predict" : "jvp";
    const char *out = NULL, *layers_arg = NULL, *cells_arg = NULL, *bits_arg = NULL;
    int force = 0, verbose = 0;
    double nu = 1e-3;
    int group = 64;
    int threads = cli_default_threads();
    const qmla_engine *engine = NULL; /* --engine (NULL: cpu) */
    long device = -1;                 /* --device N */
    cli_shard shard = {0, 0};         /* --shard I/N */
    int merge = 0;                    /* --merge: the arguments after CAPTURE are parts */
    const cli_opt opts[] = {
        {.name = "output", .shrt = 'o', .kind = CLI_STR, .dst = &out},
        {.name = "bits", .shrt = 0, .kind = CLI_STR, .dst = &bits_arg},
        {.name = "group", .shrt = 0, .kind = CLI_GROUP, .dst = &group},
        {.name = "nmse", .shrt = 0, .kind = CLI_NMSE, .dst = &nu},
        {.name = "layers", .shrt = 0, .kind = CLI_STR, .dst = &layers_arg},
        {.name = "cells", .shrt = 0, .kind = CLI_STR, .dst = &cells_arg},
        {.name = "threads", .shrt = 0, .kind = CLI_THREADS, .dst = &threads},
        {.name = "help", .shrt = 'h', .kind = CLI_HELP, .dst = NULL},
        {.name = "force", .shrt = 0, .kind = CLI_SET, .dst = &force},
        {.name = "engine", .shrt = 0, .kind = CLI_ENGINE, .dst = &engine},
        {.name = "device", .shrt = 0, .kind = CLI_LONG, .dst = &device, .lo = 0, .hi = 1000000, .expected = "a device index 0..1000000"},
        {.name = "shard", .shrt = 0, .kind = CLI_FN, .dst = &shard, .fn = cli_opt_shard},
        {.name = "merge", .shrt = 0, .kind = CLI_SET, .dst = &merge},
        {.name = NULL, .shrt = 'v', .kind = CLI_SET, .dst = &verbose},
        {0}};
    const int prc = cli_getopt(name, argc, argv, opts, help, &pred);
    if (prc >= 0)
        return prc;
    if (merge ? cli_merge_args(name, argc, out, shard.n_shards)
              : cli_require_args(name, argc, "CAPTURE.h5", out, "-o RESULTS.h5"))
        return QMLA_EXIT_USAGE;
    if (cli_engine_device(name, engine, device))
        return QMLA_EXIT_USAGE;
    int bits[8] = {2, 3, 4, 8}, *bl = NULL;
    size_t nbits = 4;
    char msg[256];
    if (bits_arg) {
        if (pred)
            return cli_fail(name, "--bits: predict uses INT4 and the held-out INT2/3/8");
        if (cli_parse_int_list(bits_arg, &bl, &nbits, msg, sizeof msg))
            return cli_fail(name, "--bits: %s", msg);
        if (nbits > 4) {
            free(bl);
            return cli_fail(name, "--bits: at most 4 widths (2, 3, 4, 8)");
        }
        for (size_t k = 0; k < nbits; k++) {
            if (bl[k] != 2 && bl[k] != 3 && bl[k] != 4 && bl[k] != 8) {
                const int found = bl[k];
                free(bl);
                return cli_fail(name, "--bits: expected 2, 3, 4 or 8, found %d", found);
            }
            bits[k] = bl[k];
        }
        free(bl);
    }
    qmla_op_config conf[8];
    size_t nconf;
    qmla_op_configs(pred, bits, nbits, group, nu, conf, &nconf);

    cli_selection cs;
    qmla_error err;
    qmla_error_clear(&err);
    qmla_capture *cap = NULL;
    int rc = cli_open_selected(name, argv[optind], layers_arg, cells_arg, &cs, &cap, &err);
    if (rc)
        return rc;
    cli_signals_install();
    cli_progress prog;
    cli_progress_init(&prog, name);
    qmla_op_opts o = qmla_op_opts_make(conf, nconf, pred, threads, force, engine,
                                       cli_command_line(), cli_progress_poll, &prog);
    o.shard = shard.shard;
    o.n_shards = shard.n_shards;
    if (merge) {
        o.parts = (const char *const *)argv + optind + 1;
        o.n_parts = (size_t)(argc - optind - 1);
    }
    qmla_op_stats s;
    int stopped = 0;
    const double t0 = cli_now();
    qmla_op_point *pts = NULL;
    size_t npts = 0;
#if QMLA_HAVE_MPI
    char **mparts = NULL; /* mpirun: the ranks' parts, merged by rank 0 */
    size_t nmparts = 0;
    if (cli_mpi_launched()) {
        op_mpi mc = {cap, &cs.sel, o};
        const int mr = cli_mpi_op_shards(name, out, name,
                                         merge ? "--merge under mpirun: merge once, "
                                                 "without mpirun"
                                         : o.n_shards > 1 ? "--shard and mpirun do not "
                                                 "combine: under MPI the ranks are the shards"
                                                 : NULL,
                                         op_mpi_part, &mc, &mparts, &nmparts);
        if (mr >= 0) {
            rc = mr;
            goto done;
        }
        if (mr == -2) { /* rank 0: merge the ranks' parts */
            o.parts = (const char *const *)mparts;
            o.n_parts = nmparts;
        }
    }
#endif
    int st = qmla_op_run_points(cap, &cs.sel, &o, out, &s, &pts, &npts, &stopped, &err);
    cli_progress_end(&prog);
    if (stopped) {
        fprintf(stderr, "qmla %s: interrupted (%s); finished items are kept in %s.%s.journal — "
                "rerun the same command to resume\n", name, cli_signal_name(), out, name);
        rc = QMLA_EXIT_INTERRUPTED;
        goto done;
    }
    if (st) {
        rc = cli_lib_error(name, &err);
        goto done;
    }
#if QMLA_HAVE_MPI
    if (mparts) { /* merged: the parts are removed */
        cli_mpi_parts_free(mparts, nmparts, 1, out, name);
        mparts = NULL;
        printf("(%zu MPI ranks, one shard each, merged by rank 0)\n", nmparts);
    }
#endif
    printf("capture  %s  (%s)\n", argv[optind], qmla_capture_get_config(cap)->model);
    if (o.n_shards > 1) {
        printf("part     %s  (shard %zu of %zu, engine %s; %.1f s)\n(combine the %zu parts "
               "with qmla %s CAPTURE PART... --merge -o RESULTS.h5 and these options)\n",
               out, o.shard, o.n_shards, qmla_engine_name(engine), cli_now() - t0,
               o.n_shards, name);
        goto done;
    }
    printf("results  %s  group /%s  (%zu points; %.1f s%s)\n", out, name, s.n_points,
           cli_now() - t0, o.n_parts ? ", merged from parts" : "");
    printf("directions: QDQ at cache NMSE %g, group %d;", nu, group);
    for (size_t k = 0; k < nconf; k++)
        printf(" INT%d/G%d/nu%g%s", conf[k].bits, conf[k].group, conf[k].nmse,
               conf[k].heldout ? "*" : "");
    printf("%s\n\n", pred ? "  (* held out)" : "");
    printf("%-44s %10s %10s\n", "", "qmla", "paper");
    printf("%-44s %10.3f %10s\n", "Spearman JVP vs finite gain", s.spearman_jvp_vs_finite,
           "0.986");
    if (pred) {
        printf("%-44s %10.3f %10s\n", "log-ratio MAE, cache error only",
               s.mae_log_ratio_cache_only, "1.57");
        printf("%-44s %10.3f %10s\n", "log-ratio MAE, operator trace only",
               s.mae_log_ratio_operator_only, "0.91");
        printf("%-44s %10.3f %10s\n", "log-ratio MAE, operator + allocation",
               s.mae_log_ratio_operator_allocation, "0.11");
        printf("%-44s %10.3f %10s\n", "held-out Spearman (frozen predictor)", s.spearman,
               "0.99");
        printf("%-44s %10.3f %10s\n", "held-out median |log error|",
               s.median_abs_log_error, "0.11");
        printf("(%zu RoPE/content pairs, %zu held-out points)\n", s.n_pairs, s.n_heldout);
    }
    if (pred && print_splits(pts, npts, &err)) {
        free(pts);
        rc = cli_lib_error(name, &err);
        goto done;
    }
    if (verbose)
        print_layers(pts, npts, &conf[pred ? 0 : nconf - 1], pred);
    free(pts);
done:
#if QMLA_HAVE_MPI
    cli_mpi_parts_free(mparts, nmparts, 0, NULL, NULL); /* a failed merge keeps them */
#endif
    if (cap)
        qmla_capture_close(cap);
    cli_selection_free(&cs);
    return rc;
}

int cmd_predict(int argc, char **argv)
{
    return cli_op_main(argc, argv, 1);
}
