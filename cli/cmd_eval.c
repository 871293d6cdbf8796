/* cmd_eval.c — `qmla eval`: output NMSE of one or more transforms files at
 * a cache configuration (docs/math.md §7–9) -> group /eval of a results
 * file (docs/results-format.md), with the per-layer table and the model
 * mean of every method side by side and the App. C.3 RoPE bound next to
 * the RoPE-only distortion (a measured value above the bound exits 1).
 *
 *   qmla eval data/tiny-mla-default.h5 --transforms rtn.h5 \
 *        --transforms sq.h5 --config C4R4 --cells code-s0 -o ev.h5
 *
 * The driver is the library's (qmla_tf_eval_run, lib/transform/tfeval_run.c);
 * this file parses the options and prints what it returns. */
#include "cli.h"
#include "qmla/capture.h"
#include "qmla/outpath.h"
#include "qmla/tfeval.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TF QMLA_TF_EVAL_MAX

static void help(FILE *f, const void *ctx)
{
    (void)ctx;
    fprintf(f,
        "usage: qmla eval CAPTURE.h5 --transforms T.h5 [--transforms T2.h5 ...]\n"
        "                 --config C4R4|C2R4|ALLOC.h5 [--policy sink4/local128|none]\n"
        "                 [--layers LIST] [--cells LIST] [--threads N] -o RESULTS.h5\n"
        "\n"
        "For every transforms file, layer and cell: caches quantized in the\n"
        "transformed coordinates, QDQ(X T) T^-1 (content x bits, RoPE y bits for\n"
        "C{x}R{y}, group 64, f16 metadata; ALLOC.h5 from qmla allocate: each\n"
        "layer at its own C{x}R{y}); output NMSE with both caches, with\n"
        "only the content cache and with only the RoPE cache quantized; the\n"
        "positional-score error; the RoPE bound of docs/math.md §8. --policy\n"
        "keeps the first S and the last W tokens of each sequence clean (default\n"
        "none). Writes group /eval (other groups of RESULTS.h5 are kept).\n"
        "Evaluate on cells the transforms were not calibrated on (--cells).\n"
        "Exit 1 when a measured RoPE-only distortion exceeds its bound.\n"
        CLI_ENGINE_HELP
        "example: qmla eval data/tiny-mla-default.h5 --transforms rtn.h5 --transforms qm.h5 \\\n"
        "           --config C4R4 --cells code-s0 -o eval.h5\n");
}

/* --policy sinkS/localW or none */
static int opt_policy(const char *cmd, const char *arg, void *dst)
{
    size_t sink, local;
    if (qmla_tf_eval_policy_parse(arg, &sink, &local))
        return cli_fail(cmd, "--policy: expected sinkS/localW (e.g. sink4/local128) or none, found \"%s\"", arg);
    *(const char **)dst = arg;
    return 0;
}

int cmd_eval(int argc, char **argv)
{
    const char *out = NULL, *tf_path[MAX_TF], *config = NULL, *policy = "none";
    const char *layers_arg = NULL, *cells_arg = NULL;
    size_t n_tf = 0;
    int threads = cli_default_threads();
    const qmla_engine *engine = NULL; /* --engine (NULL: cpu) */
    const cli_opt opts[] = {
        {.name = "output", .shrt = 'o', .kind = CLI_STR, .dst = &out},
        {.name = "transforms", .shrt = 0, .kind = CLI_REPEAT, .dst = tf_path, .hi = MAX_TF, .expected = "files",
         .count = &n_tf},
        {.name = "config", .shrt = 0, .kind = CLI_STR, .dst = &config},
        {.name = "policy", .shrt = 0, .kind = CLI_FN, .dst = &policy, .fn = opt_policy},
        {.name = "layers", .shrt = 0, .kind = CLI_STR, .dst = &layers_arg},
        {.name = "cells", .shrt = 0, .kind = CLI_STR, .dst = &cells_arg},
        {.name = "threads", .shrt = 0, .kind = CLI_THREADS, .dst = &threads},
        {.name = "help", .shrt = 'h', .kind = CLI_HELP, .dst = NULL},
        {.name = "engine", .shrt = 0, .kind = CLI_ENGINE, .dst = &engine},
        {0}};
    const int prc = cli_getopt("eval", argc, argv, opts, help, NULL);
    if (prc >= 0)
        return prc;
    if (cli_require_args("eval", argc, "CAPTURE.h5", out, "-o RESULTS.h5"))
        return QMLA_EXIT_USAGE;
    if (!n_tf)
        return cli_fail("eval", "missing --transforms T.h5");
    if (!config)
        return cli_fail("eval", "missing --config C4R4|C2R4");
    if (cli_engine_device("eval", engine, -1))
        return QMLA_EXIT_USAGE;
    const char *capture = argv[optind];
    qmla_error err;
    qmla_error_clear(&err);
    const char *inputs[MAX_TF + 1];
    inputs[0] = capture;
    for (size_t k = 0; k < n_tf; k++)
        inputs[k + 1] = tf_path[k];
    if (qmla_output_path_check(out, "output file (-o)", inputs, n_tf + 1, &err))
        return cli_lib_error("eval", &err);
    int *layers = NULL;
    size_t n_lsel = 0, n_csel = 0;
    char **cells = NULL, *cellbuf = NULL, msg[256];
    if (layers_arg && cli_parse_int_list(layers_arg, &layers, &n_lsel, msg, sizeof msg))
        return cli_fail("eval", "--layers: %s", msg);
    if (cells_arg && cli_split_list(cells_arg, &cells, &n_csel, &cellbuf)) {
        free(layers);
        return cli_fail("eval", "--cells: empty list \"%s\"", cells_arg);
    }
    qmla_tf_eval_run_opts o = qmla_tf_eval_run_defaults();
    o.transforms = tf_path;
    o.n_transforms = n_tf;
    o.config = config;
    o.policy = policy;
    o.layers = layers;
    o.n_layers = n_lsel;
    o.cells = (const char *const *)cells;
    o.n_cells = n_csel;
    o.threads = threads;
    o.command_line = cli_command_line();
    o.engine = engine;
    qmla_tf_eval_run_result r;
    int st = qmla_tf_eval_run(capture, out, &o, &r, &err);
    /* what the run got to, printed as the run went: the table header once
     * the capture is open, each finished layer's row after the bound
     * messages of its rows, then the means and the per-path block */
    size_t ri = 0;
    if (r.opened) {
        printf("qmla eval %s: %s, policy %s; output NMSE (both caches quantized), mean over cells\n",
               capture, config, policy);
        printf("%6s", "layer");
        for (size_t k = 0; k < n_tf; k++)
            printf(" %16s", r.label[k]);
        printf("\n");
    }
    for (size_t l = 0; l <= r.n_layers_done; l++) {
        for (; ri < r.n_rows && (l == r.n_layers_done || r.rows[ri].layer == r.layer[l]); ri++)
            if (!r.rows[ri].r.bound_ok)
                fprintf(stderr, "qmla eval: %s layer %d cell %s: RoPE-only NMSE %.4g above its bound %.4g\n",
                        r.rows[ri].method, r.rows[ri].layer, r.rows[ri].cell, r.rows[ri].r.nmse_p,
                        r.rows[ri].r.bound_p);
        if (l == r.n_layers_done)
            break;
        printf("%6d", r.layer[l]);
        for (size_t k = 0; k < n_tf; k++)
            printf(" %16.4e", r.layer_mean[l * n_tf + k]);
        printf("\n");
    }
    if (r.computed) {
        printf("%6s", "mean");
        for (size_t k = 0; k < n_tf; k++)
            printf(" %16.4e", r.mean[k]);
        printf("\n\nper path (mean over layers and cells): content-only, RoPE-only NMSE, positional-score error, RoPE bound\n");
        for (size_t k = 0; k < n_tf; k++)
            printf("%-16s content %.4e  rope %.4e  pos_err %.4e  bound %.4e\n", r.label[k],
                   r.path_mean[k][0], r.path_mean[k][1], r.path_mean[k][2], r.path_mean[k][3]);
    }
    int rc = QMLA_EXIT_OK;
    if (st) {
        rc = r.refusal ? cli_fail("eval", "%s", err.msg) : cli_lib_error("eval", &err);
    } else {
        printf("wrote /eval of %s (%zu rows)\n", out, r.n_rows);
        if (r.bound_fail) {
            fprintf(stderr, "qmla eval: a RoPE-only distortion exceeds the App. C.3 bound (a bug)\n");
            rc = QMLA_EXIT_FINDING;
        }
    }
    qmla_tf_eval_run_result_free(&r);
    free(layers);
    free(cells);
    free(cellbuf);
    return rc;
}
