/* cmd_serve_sim.c — `qmla serve-sim SCENARIO [-o RESULTS.h5]`: the
 * cache-pressure serving model of lib/serve/serve_sim.c (include/qmla/serve_sim.h)
 * for every configuration of a scenario file; prints preemptions,
 * recomputed tokens, elapsed time and output throughput, and the throughput
 * of each configuration relative to the first. The paper's scenario:
 * experiments/serving/paper-table10.scn (experiments/serving/README.md). */
#include "cli.h"
#include "qmla/outpath.h"
#include "qmla/serve_sim.h"

#include <getopt.h>
#include <string.h>

static void help(FILE *f)
{
    fprintf(f,
        "usage: qmla serve-sim SCENARIO [-o RESULTS.h5]\n"
        "\n"
        "Discrete-event model of vLLM-style serving under KV-cache pressure:\n"
        "paged blocks with a slot capacity per configuration, FCFS admission,\n"
        "at most max_seqs sequences, chunked prefill with a token budget per\n"
        "step, preemption by recompute when blocks run out (the scheduler of\n"
        "vLLM V1), step times from a cost model whose decode attention can be\n"
        "calibrated from the CUDA benchmark (docs/evidence/*.tsv). The format of\n"
        "SCENARIO is in include/qmla/serve_sim.h.\n"
        "\n"
        "  -o RESULTS.h5   also write the results (HDF5, /serve_sim)\n"
        "example: qmla serve-sim experiments/serving/paper-table10.scn\n");
}

/* Progress of one configuration's run, shown once it has taken a second
 * (short runs print nothing more than before). */
typedef struct serve_prog {
    cli_progress p;
    int shown;
} serve_prog;

static int serve_progress(void *ctx, size_t done, size_t total, size_t resumed)
{
    serve_prog *sp = ctx;
    (void)resumed;
    if (!sp->shown && cli_now() - sp->p.t0 < 1.0)
        return 0;
    sp->shown = 1;
    cli_progress_update(&sp->p, done, total);
    return 0;
}

int cmd_serve_sim(int argc, char **argv)
{
    static const struct option lo[] = {{"output", required_argument, 0, 'o'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    const char *out = NULL;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
        switch (ch) {
        case 'o': out = optarg; break;
        case 'h': help(stdout); return QMLA_EXIT_OK;
        default: help(stderr); return QMLA_EXIT_USAGE;
        }
    }
    if (cli_require_args("serve-sim", argc, "SCENARIO", NULL, NULL))
        return QMLA_EXIT_USAGE;
    const char *path = argv[optind];
    qmla_error err;
    qmla_error_clear(&err);
    qmla_serve_scenario s;
    if (out && (qmla_output_path_check(out, "output file (-o)", &path, 1, &err) ||
                qmla_serve_check_output(out, &err)))
        return cli_lib_error("serve-sim", &err);
    if (qmla_serve_scenario_read(path, &s, &err))
        return cli_lib_error("serve-sim", &err);
    qmla_serve_result r[QMLA_SERVE_MAX_CONFIGS];
    for (size_t k = 0; k < s.n_configs; k++) {
        /* progress on stderr (a bar on a terminal, else a line every 30 s) */
        char label[64];
        snprintf(label, sizeof label, "serve-sim %s", s.cfg[k].name);
        serve_prog prog = {.shown = 0};
        cli_progress_init(&prog.p, label);
        prog.p.resumed = 0;
        const int st = qmla_serve_simulate_progress(&s, k, &r[k], serve_progress, &prog, &err);
        if (prog.shown)
            cli_progress_end(&prog.p);
        if (st)
            return cli_lib_error("serve-sim", &err);
    }
    printf("scenario %s: %lld requests x (%lld input + %lld output) tokens, "
           "%lld-token pages, <= %lld sequences, %lld-token steps\n",
           path, s.requests, s.input_tokens, s.output_tokens, s.page_tokens,
           s.max_seqs, s.max_batched_tokens);
    if (s.calibrated_from[0])
        printf("decode attention calibrated from %s\n", s.calibrated_from);
    for (size_t k = 0; k < s.n_configs; k++) {
        const qmla_serve_config *c = &s.cfg[k];
        printf("  %-6s attention per layer and step: %.2f us + %.3f us per 1e6 "
               "context tokens", c->name, c->attn_base_us, c->attn_per_mtok_us);
        if (c->fit_rows)
            printf(" (fit to %d rows, worst residual %.1f%%)", c->fit_rows,
                   100.0 * c->fit_worst_rel);
        printf("\n");
    }
    printf("\n%-8s %10s %8s %11s %14s %10s %10s %9s %9s\n", "config", "slots",
           "peak", "preemptions", "recomputed", "prefill", "elapsed_s", "tok/s",
           "vs first");
    for (size_t k = 0; k < s.n_configs; k++)
        printf("%-8s %10lld %8lld %11lld %14lld %10lld %10.1f %9.3f %8.3fx\n",
               s.cfg[k].name, s.cfg[k].slots, r[k].max_used_blocks, r[k].preemptions,
               r[k].recomputed_tokens, r[k].prefill_tokens, r[k].elapsed_s,
               r[k].throughput_tok_s, r[k].throughput_tok_s / r[0].throughput_tok_s);
    printf("(peak: KV blocks in use at most; prefill: prefill tokens computed, "
           "recomputation included)\n");
    if (out) {
        if (qmla_serve_write(out, path, &s, r, &err))
            return cli_lib_error("serve-sim", &err);
        printf("results  %s\n", out);
    }
    return QMLA_EXIT_OK;
}
