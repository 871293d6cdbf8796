/* cmd_sweep.c — `qmla sweep`: the matched-NMSE study (paper §2.2, App. B.1,
 * Table 4) on a capture, with resume and an atomic results file. */
#include "cli.h"
#include "cli_safe.h"
#include "qmla/capture.h"
#include "qmla/outpath.h"
#include "qmla/results.h"
#include "qmla/sweep.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static void help(FILE *f)
{
    fprintf(f,
        "usage: qmla sweep CAPTURE.h5 -o RESULTS.h5 [--bits 4] [--group 64]\n"
        "                  [--nmse 0.01] [--meta f16|f32|q8] [--layers 0-3,7]\n"
        "                  [--cells a,b] [--threads N] [-v] [--verify] [--force]\n"
        "                  [--shard I/N [--balance]] [--engine cuda [--device N]]\n"
        "       mpirun -n K qmla sweep ... (built with MPI: ranks share the work)\n"
        "\n"
        "Matched-NMSE perturbation study (docs/math.md §3-4): for every layer,\n"
        "cell and sequence, quantize one cache path at a time (content latent or\n"
        "RoPE key), rescale the quantization error to cache NMSE --nmse, and\n"
        "measure the attention-output NMSE, the response R = NMSE_out/NMSE_cache\n"
        "and the output NMSE of each finite error route (matching, aggregation,\n"
        "interaction). Writes qmla-results v1 (docs/results-format.md) and prints\n"
        "a Table-4-style summary (per layer with -v).\n"
        "\n"
        "  -o RESULTS.h5   output (written atomically at the end); refused before\n"
        "                  any work if it is the input capture (even with\n"
        "                  --force), a directory, a device or a FIFO\n"
        "  --bits B        2, 3, 4 or 8 (default 4)\n"
        "  --group G       channels per quantization group (default 64)\n"
        "  --nmse NU       target cache NMSE, 2^-30 (9.31e-10) .. 1e6 (default\n"
        "                  0.01). The floor is float32's: the perturbation has\n"
        "                  relative size sqrt(NU) and float32 rounds at 2^-24\n"
        "                  relative, so below sqrt(NU) = 2^9 x 2^-24 rounding\n"
        "                  exceeds 1/512 of the perturbation and the responses\n"
        "                  turn into rounding noise (include/qmla/sweep.h)\n"
        "  --meta M        scale/minimum metadata: f16 (default), f32, or q8\n"
        "                  (compact: per-token float16 super-scales, 8-bit\n"
        "                  per-group codes; docs/quantizer.md)\n"
        "  --layers LIST   layer indices, e.g. 0-3,7 (default all)\n"
        "  --cells LIST    cell names, e.g. prose-s0,code-s1 (default all)\n"
        "  --threads N     threads (default: all online processors; results do\n"
        "                  not depend on it)\n"
        "  -v              per-layer summary rows\n"
        "  --verify        also recompute every perturbed output with a full\n"
        "                  forward and report the worst route-identity residual\n"
        "  --force         discard a journal or results file of other parameters\n"
        "  --shard I/N     compute only shard I (0-based) of N and write a part\n"
        "                  file to -o (items round robin, or by cost T^2 with\n"
        "                  --balance); combine the N parts with qmla merge\n"
        "\n"
        "Resume: finished items are journaled in RESULTS.h5.journal; interrupt\n"
        "(Ctrl-C or SIGTERM: exit 130 after the current item; a second one stops\n"
        "at once) and rerun the same command to continue. An existing RESULTS.h5\n"
        "of the same capture and parameters is extended, not recomputed.\n"
        "Temporary files RESULTS.h5.tmp.PID of processes that no longer run\n"
        "are removed.\n"
        CLI_ENGINE_HELP
        "example: qmla sweep data/tiny-mla-default.h5 -o results.h5 --threads 2 -v\n");
}

int cmd_sweep(int argc, char **argv)
{
    static const struct option lo[] = {
        {"output", required_argument, 0, 'o'}, {"bits", required_argument, 0, 'b'},
        {"group", required_argument, 0, 'g'},  {"nmse", required_argument, 0, 'n'},
        {"meta", required_argument, 0, 'm'},   {"layers", required_argument, 0, 'L'},
        {"cells", required_argument, 0, 'c'},  {"threads", required_argument, 0, 'j'},
        {"verify", no_argument, 0, 'V'},       {"force", no_argument, 0, 'f'},
        {"help", no_argument, 0, 'h'},         {"version", no_argument, 0, 'v' + 256},
        {"shard", required_argument, 0, 's' + 256}, {"balance", no_argument, 0, 'B'},
        {"engine", required_argument, 0, 'E' + 256},
        {"device", required_argument, 0, 'D' + 256},
        {0, 0, 0, 0}};
    long device = -1; /* --device N */
    qmla_sweep_opts o;
    memset(&o, 0, sizeof o);
    o.params = qmla_sweep_defaults();
    o.threads = cli_default_threads();
    const char *out = NULL, *layers_arg = NULL, *cells_arg = NULL;
    int verbose = 0, ch;
    const qmla_engine *engine = NULL; /* --engine (NULL: cpu) */
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:vh", lo, NULL)) != -1) {
        switch (ch) {
        case 'o': out = optarg; break;
        case 'b':
            if (cli_opt_bits("sweep", optarg, &o.params.quant.bits))
                return QMLA_EXIT_USAGE;
            break;
        case 'g':
            if (cli_opt_group("sweep", optarg, &o.params.quant.group))
                return QMLA_EXIT_USAGE;
            break;
        case 'n':
            if (cli_opt_nmse("sweep", optarg, &o.params.nmse))
                return QMLA_EXIT_USAGE;
            break;
        case 'm':
            if (cli_opt_meta("sweep", optarg, &o.params.quant.meta))
                return QMLA_EXIT_USAGE;
            break;
        case 'L': layers_arg = optarg; break;
        case 'c': cells_arg = optarg; break;
        case 'j':
            if (cli_opt_threads("sweep", optarg, &o.threads))
                return QMLA_EXIT_USAGE;
            break;
        case 'v': verbose = 1; break;
        case 'V': o.verify = 1; break;
        case 'f': o.force = 1; break;
        case 'B': o.balance = 1; break;
        case 's' + 256: {
            unsigned long i, n;
            char tail;
            if (sscanf(optarg, "%lu/%lu%c", &i, &n, &tail) != 2 || n < 1 || i >= n ||
                n > 1000000)
                return cli_fail("sweep", "--shard: expected I/N with 0 <= I < N, "
                                "found \"%s\"", optarg);
            o.shard = i;
            o.n_shards = n;
            break;
        }
        case 'E' + 256:
            if (cli_opt_engine("sweep", optarg, &engine))
                return QMLA_EXIT_USAGE;
            break;
        case 'D' + 256: {
            char *end = NULL;
            device = strtol(optarg, &end, 10);
            if (!*optarg || *end || device < 0 || device > 1000000)
                return cli_fail("sweep", "--device: expected a device index >= 0, found "
                                "\"%s\"", optarg);
            break;
        }
        case 'h': help(stdout); return QMLA_EXIT_OK;
        case 'v' + 256: printf("qmla %s\n", qmla_version()); return QMLA_EXIT_OK;
        default: help(stderr); return QMLA_EXIT_USAGE;
        }
    }
    if (cli_require_args("sweep", argc, "CAPTURE.h5", out, "-o RESULTS.h5"))
        return QMLA_EXIT_USAGE;
    if (cli_engine_device("sweep", engine, device))
        return QMLA_EXIT_USAGE;
    const char *path = argv[optind];
    /* Before any work: signals, the paths this sweep will write, and the
     * temporaries of earlier runs that died (include/qmla/outpath.h). */
    cli_signals_install();
    {
        qmla_error perr;
        qmla_error_clear(&perr);
        char jpath[4096];
        snprintf(jpath, sizeof jpath, "%s.journal", out);
        if (qmla_output_path_check(out, "output file (-o)", &path, 1, &perr) ||
            qmla_output_path_check(jpath, "journal", &path, 1, &perr) ||
            qmla_stale_tmp_remove(out, NULL, &perr))
            return cli_lib_error("sweep", &perr);
    }

    cli_selection cs;
    if (cli_selection_parse("sweep", layers_arg, cells_arg, NULL, &cs))
        return QMLA_EXIT_USAGE;

    qmla_error err;
    qmla_error_clear(&err);
    qmla_capture *cap = NULL;
    int rc = QMLA_EXIT_OK;
    if (qmla_capture_open(path, &cap, &err) && !cli_interrupted()) {
        rc = cli_lib_error("sweep", &err);
        goto out;
    }
    if (cli_interrupted()) {
        fprintf(stderr, "qmla sweep: interrupted (%s) before the sweep began; nothing "
                        "was written\n", cli_signal_name());
        rc = QMLA_EXIT_INTERRUPTED;
        goto out;
    }
    o.engine = engine;
#if QMLA_HAVE_MPI
    if (cli_mpi_launched()) {
        o.command_line = cli_command_line();
        rc = cli_mpi_sweep(cap, &cs.sel, &o, out, verbose);
        if (rc >= 0)
            goto out;
        rc = QMLA_EXIT_OK; /* one rank: the serial sweep */
    }
#endif
    cli_progress prog;
    cli_progress_init(&prog, "sweep");
    o.progress = cli_progress_poll;
    o.progress_ctx = &prog;
    o.command_line = cli_command_line();

    const double t0 = cli_now();
    qmla_summary s;
    int stopped = 0;
    int st = qmla_sweep_run(cap, &cs.sel, &o, out, &s, &stopped, &err);
    cli_progress_end(&prog);
    if (stopped || (st && cli_interrupted())) {
        /* A failure while a signal was pending is the interruption: a
         * blocked system call returned EINTR (no SA_RESTART, cli_signal.c). */
        char escj[4096];
        fprintf(stderr, "qmla sweep: interrupted (%s); finished items are kept in %s.journal — "
                        "rerun the same command to resume\n", cli_signal_name(),
                cli_esc(out, escj, sizeof escj));
        rc = QMLA_EXIT_INTERRUPTED;
        goto out;
    }
    if (st) {
        rc = cli_lib_error("sweep", &err);
        goto out;
    }
    const qmla_capture_config *cfg = qmla_capture_get_config(cap);
    const size_t fresh = prog.resumed == (size_t)-1 ? 0 : prog.resumed;
    char escp[1024], escm[1024];
    printf("capture  %s  (%s)\n", cli_esc(path, escp, sizeof escp),
           cli_esc(cfg->model, escm, sizeof escm));
    printf("quant    INT%d, group %d, %s metadata; error rescaled to cache NMSE %g\n",
           o.params.quant.bits, o.params.quant.group,
           qmla_meta_name(o.params.quant.meta), o.params.nmse);
    printf("results  %s  (%zu layers%s; %.1f s%s)\n\n", out, s.n_layers,
           s.n_degenerate ? ", some degenerate items excluded" : "", cli_now() - t0,
           fresh ? ", resumed" : "");
    if (o.n_shards > 1)
        printf("(a part file: shard %zu of %zu; its summary covers this shard's "
               "rows only; combine the parts with qmla merge)\n\n", o.shard,
               o.n_shards);
    cli_print_summary(&s, verbose, o.verify);
    qmla_summary_free(&s);
out:
    if (cap)
        qmla_capture_close(cap);
    cli_selection_free(&cs);
    return rc;
}
