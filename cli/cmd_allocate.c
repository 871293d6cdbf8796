/* cmd_allocate.c — `qmla allocate`: per-layer cache precision under a byte
 * budget from the operator model (docs/allocate.md) -> group /allocate of a
 * results file, which `--config ALLOC.h5` of qmla storage, eval and ppl
 * take. The driver is the library's (qmla_alloc_run,
 * lib/allocate/allocate_run.c); this file parses the options and prints
 * what it returns.
 *
 *   qmla allocate data/tiny-mla-default.h5 --budget C4R4 --context 512 -o alloc.h5
 */
#include "cli.h"
#include "qmla/allocate.h"
#include "qmla/outpath.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static void help(FILE *f, const void *ctx)
{
    (void)ctx;
    fprintf(f,
        "usage: qmla allocate CAPTURE.h5 --budget B -o ALLOC.h5\n"
        "                     [--candidates C2R2,C2R4,C3R4,C4R4,...] [--policy none|sinkS/localW]\n"
        "                     [--context T] [--transforms T.h5] [--cells LIST] [--threads N]\n"
        "\n"
        "Chooses one cache configuration C<c>R<r> (content bits c, RoPE bits r;\n"
        "group 64, f16 metadata) per layer so that the predicted model-level output\n"
        "error is smallest while the mean storage per token over the layers stays\n"
        "within the budget. For every layer and candidate it measures, on the\n"
        "capture, each path's cache error (policy tokens kept clean, the transform\n"
        "applied where given) and predicts the attention-output NMSE it causes from\n"
        "the operator model's exact token sensitivities (qmla predict's machinery):\n"
        "sum_t ||e_t||^2 tr_t / ||Y||^2 per path. The model-level error is the sum\n"
        "over layers. The budget is met exactly: a dynamic program over layers on\n"
        "the integer byte costs of `qmla storage` (codes, metadata, sink/window\n"
        "buffers, page table) at --context tokens. docs/allocate.md explains.\n"
        "\n"
        "  --budget B        mean bytes per token over the layers, as one of\n"
        "                    180.5       bytes per token\n"
        "                    C4R4        the bytes of that uniform configuration\n"
        "                    3.5bits     bits per cached value equivalent: C4R4's bytes\n"
        "                                plus (b-4)(d_c+d_r)/8 per token (3bits = C3R3)\n"
        "  --candidates L    comma-separated C<c>R<r>, c and r in 2, 3, 4, 8 (default:\n"
        "                    all 16)\n"
        "  --policy P        none (default) or sinkS/localW: the first S and last W\n"
        "                    tokens of each sequence stay BF16 (counted in the bytes)\n"
        "  --context T       tokens per sequence of the byte accounting (default 4096)\n"
        "  --transforms F    a transforms file (qmla learn): caches quantized as\n"
        "                    QDQ(X T) T^-1; default none (plain round-to-nearest)\n"
        "  --cells LIST      measure on these cells only (default all)\n"
        "  --threads N       threads of the measurement\n"
        "  -o ALLOC.h5       the results file (group /allocate; other groups kept)\n"
        "\n"
        "Prints the chosen configuration per layer with its bytes and predicted\n"
        "error, and the totals. Use the file as --config of qmla storage, qmla eval\n"
        "and qmla ppl (one configuration per layer).\n"
        "example: qmla allocate data/tiny-mla-default.h5 --budget 3.5bits --context 512 \\\n"
        "           -o alloc.h5 && qmla ppl models/tiny-mla --text data/heldout/prose.txt.gz \\\n"
        "           --config alloc.h5 --tokens 4096 -o ppl.h5\n");
}

int cmd_allocate(int argc, char **argv)
{
    const char *out = NULL, *budget = NULL, *cands = NULL, *policy = "none", *tf = NULL;
    const char *cells_arg = NULL;
    long context = 4096;
    int threads = cli_default_threads();
    const qmla_engine *engine = NULL;
    const cli_opt opts[] = {
        {.name = "output", .shrt = 'o', .kind = CLI_STR, .dst = &out},
        {.name = "budget", .shrt = 0, .kind = CLI_STR, .dst = &budget},
        {.name = "candidates", .shrt = 0, .kind = CLI_STR, .dst = &cands},
        {.name = "policy", .shrt = 0, .kind = CLI_STR, .dst = &policy},
        {.name = "context", .shrt = 0, .kind = CLI_LONG, .dst = &context, .lo = 1,
         .hi = 1L << 30, .expected = "tokens, 1..2^30"},
        {.name = "transforms", .shrt = 0, .kind = CLI_STR, .dst = &tf},
        {.name = "cells", .shrt = 0, .kind = CLI_STR, .dst = &cells_arg},
        {.name = "threads", .shrt = 0, .kind = CLI_THREADS, .dst = &threads},
        {.name = "engine", .shrt = 0, .kind = CLI_ENGINE, .dst = &engine},
        {.name = "help", .shrt = 'h', .kind = CLI_HELP, .dst = NULL},
        {0}};
    const int prc = cli_getopt("allocate", argc, argv, opts, help, NULL);
    if (prc >= 0)
        return prc;
    if (cli_require_args("allocate", argc, "CAPTURE.h5", out, "-o ALLOC.h5"))
        return QMLA_EXIT_USAGE;
    if (!budget)
        return cli_fail("allocate", "missing --budget B (bytes per token, a config such as "
                        "C4R4, or <b>bits such as 3.5bits)");
    if (cli_engine_device("allocate", engine, -1))
        return QMLA_EXIT_USAGE;
    char **cells = NULL, *cellbuf = NULL;
    size_t n_cells = 0;
    if (cells_arg && cli_split_list(cells_arg, &cells, &n_cells, &cellbuf)) {
        free(cells);
        free(cellbuf);
        return cli_fail("allocate", "--cells: empty list \"%s\"", cells_arg);
    }
    /* every field not named is zero */
    const qmla_alloc_opts o = {.budget = budget, .candidates = cands, .policy = policy,
                               .context = context, .transforms = tf,
                               .cells = (const char *const *)cells, .n_cells = n_cells,
                               .threads = threads, .command_line = cli_command_line(),
                               .engine = engine};
    qmla_error err;
    qmla_error_clear(&err);
    qmla_alloc_result r;
    const int st = qmla_alloc_run(argv[optind], out, &o, &r, &err);
    int rc = QMLA_EXIT_OK;
    if (st) {
        rc = r.refusal ? cli_fail("allocate", "%s", err.msg) : cli_lib_error("allocate", &err);
    } else {
        const qmla_allocation *a = &r.a;
        printf("qmla allocate %s: budget %s = %.4f bytes/token (mean over %zu layers, context "
               "%ld, policy %s)\n", argv[optind], budget, a->budget_bytes, a->n, a->context,
               a->policy);
        printf("%6s %8s %12s %14s\n", "layer", "config", "bytes/token", "pred NMSE");
        for (size_t i = 0; i < a->n; i++) {
            char cfg[16];
            snprintf(cfg, sizeof cfg, "C%dR%d", a->c_bits[i], a->r_bits[i]);
            printf("%6d %8s %12.4f %14.4e\n", a->layer[i], cfg, a->bytes[i], a->pred[i]);
        }
        printf("%6s %8s %12.4f %14.4e  (sum over layers)\n", "total", "", a->bytes_per_token,
               a->pred_total);
        printf("measured %zu candidates x %zu layers in %.2f CPU s, knapsack %.4f CPU s\n",
               r.n_cand / a->n, a->n, r.measure_cpu_s, r.solve_cpu_s);
        printf("wrote /allocate of %s\n", out);
    }
    qmla_alloc_result_free(&r);
    free(cells);
    free(cellbuf);
    return rc;
}
