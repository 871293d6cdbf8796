/* cli/cmd_ppl.c — `qmla ppl`: bits per byte of an MLA checkpoint over
 * texts with cache configurations and policies (qmla/model.h, issue 11).
 * Every (text, policy, config) combination is one row of the printed table
 * and of /ppl in the results file. */
#include <sys/resource.h>
#include "cli.h"
#include "cli_safe.h"
#include "qmla/model.h"
#include "qmla/ppl.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
        "usage: qmla ppl MODEL_DIR --text FILE[.gz] [--text FILE2 ...] -o RESULTS.h5\n"
        "                [--config LIST] [--policy LIST] [--transforms T.h5]\n"
        "                [--transforms-only] [--tokens N] [--context T] [--threads N]\n"
        "                [--kl-ref fp32|bf16|none] [--force]\n"
        "\n"
        "Bits per byte and mean NLL of the checkpoint in MODEL_DIR (config.json +\n"
        "safetensors; DeepseekV2/V3, dense or MoE) over each text, as the training\n"
        "run measured them: non-overlapping windows of T bytes from the start of\n"
        "the text, each scored as [BOS] + window[0..T-1) against window[0..T).\n"
        "\n"
        "  --text FILE      text (gzip or plain), repeatable\n"
        "  --config LIST    comma-separated cache configurations (default bf16):\n"
        "                   fp32, bf16, C{x}R{y} with x, y in {2,3,4,8}, optionally\n"
        "                   -f16 (default) or -q8 metadata, e.g. C4R4,C2R4-q8\n"
        "                   or ALLOC.h5 (qmla allocate): one C{x}R{y} per layer\n"
        "  --policy LIST    comma-separated: none (default) or sink<S>/local<W>,\n"
        "                   e.g. none,sink4/local128 (quantized configs only)\n"
        "  --transforms F   a transforms file (qmla learn; docs/transforms-format.md),\n"
        "                   repeatable: its content and RoPE transforms are folded\n"
        "                   into the weights (the cache stores X T, the consumers\n"
        "                   are compensated: docs/math.md section 7), one more row\n"
        "                   per config with the file's method. A QuantMLA file is\n"
        "                   used for the config it was learned for, a baseline\n"
        "                   (rtn, smoothquant, quarot) for every quantized config;\n"
        "                   fp32/bf16 get transformed rows only when --config holds\n"
        "                   no quantized config (the fusion check)\n"
        "  --transforms-only  only the rows of the --transforms files\n"
        "  --tokens N       score the first ceil(N/T) windows (default: all)\n"
        "  --context T      window length (default 512)\n"
        "  --threads N      windows scored in parallel (default: online CPUs)\n"
        "  -o FILE          results file; groups /ppl and /ppl_table (the rows as\n"
        "                   a table, for qmla export / figures) are replaced,\n"
        "                   others kept (an existing file must be a results\n"
        "                   file: a capture or transforms file is refused)\n"
        "  --kl-ref R       the reference of the KL columns (default fp32 when a\n"
        "                   config is quantized, else none): every row gets the\n"
        "                   mean per-token KL(P_R || P_row) in nats with its 95 %%\n"
        "                   t interval over windows, the 99th percentile of the\n"
        "                   per-token KL and the top-1 agreement with R (R is\n"
        "                   scored in the same windows; a row only if --config\n"
        "                   holds it; docs/results-format.md, /ppl_table)\n"
        "  --force          discard a journal of other inputs or options\n"
        "\n"
        "The configurations of one text and model (or transforms file) are scored\n"
        "together, window by window: quantized ones under a sink/local policy share\n"
        "the tokens that read only BF16 keys (the first S + W of each window), with\n"
        "the same results as alone. s(grp): seconds for the whole group.\n"
        "Progress (windows of the group) goes to stderr: a bar on a terminal, else\n"
        "a line every 30 s.\n"
        "\n"
        "Resume: every finished window is kept in RESULTS.h5.journal (its NLL sums,\n"
        "exactly); SIGINT or SIGTERM stops after the windows in flight (exit 130),\n"
        "and after that or a crash the same command scores only the windows the\n"
        "journal lacks, with results bit for bit those of an uninterrupted run.\n"
        "The results are written once, at the end, atomically; then the journal is\n"
        "removed. A journal of other inputs or options is refused (exit 2) unless\n"
        "--force.\n"
        "\n"
        "example: qmla ppl models/tiny-mla --text data/heldout/prose.txt.gz \\\n"
        "           --config bf16,C4R4 --policy none,sink4/local128 --tokens 20480 -o ppl.h5\n");
}

/* What the driver reports, printed as `qmla ppl` always printed it: notes
 * on stderr, the table on stdout, a progress bar per group. */
typedef struct ppl_cli {
    cli_progress prog;
    int kl; /* the table has the KL columns */
    char label[600]; /* the progress bar keeps a pointer to its label */
} ppl_cli;

static void on_event(void *ctx, const qmla_ppl_event *ev)
{
    ppl_cli *c = ctx;
    if (ev->kind == QMLA_PPL_NOTE) {
        fprintf(stderr, "qmla ppl: %s\n", ev->line);
    } else if (ev->kind == QMLA_PPL_TABLE) {
        /* the KL columns after the others (which stay as they were) */
        c->kl = ev->line && *ev->line;
        char klh[64];
        snprintf(klh, sizeof klh, "KL/%s", c->kl ? ev->line : "");
        printf("%-28s %-10s %-16s %-16s %9s %9s %12s %8s", "text", "config", "method", "policy",
               "bits/byte", "nats/tok", "tokens", "s(grp)");
        if (c->kl)
            printf(" %10s %23s %10s %7s", klh, "KL 95% CI", "KL p99", "top1");
        printf("\n");
    } else if (ev->kind == QMLA_PPL_GROUP_BEGIN) {
        /* windows done, on stderr (a bar on a terminal, else a line every
         * 30 s); SIGINT/SIGTERM stop at the next window: exit 130 */
        snprintf(c->label, sizeof c->label, "%s", ev->line);
        cli_progress_init(&c->prog, c->label);
    } else if (ev->kind == QMLA_PPL_GROUP_END) {
        cli_progress_end(&c->prog);
        for (size_t j = 0; j < ev->n_rows; j++) {
            const qmla_ppl_row *r = &ev->rows[j];
            printf("%-28s %-10s %-16s %-16s %9.4f %9.5f %12zu %8.1f", r->text, r->config,
                   r->method, r->policy, r->r.bits_per_byte, r->r.nll_nats_per_token, r->r.tokens,
                   ev->seconds);
            if (c->kl && r->r.has_kl) {
                char ci[64] = "n/a (1 window)";
                if (isfinite(r->r.kl_ci_lo))
                    snprintf(ci, sizeof ci, "[%.3e, %.3e]", r->r.kl_ci_lo, r->r.kl_ci_hi);
                printf(" %10.3e %23s %10.3e %7.4f", r->r.kl_mean, ci, r->r.kl_p99,
                       r->r.top1_agreement);
            }
            printf("\n");
        }
        fflush(stdout);
    }
}

static int should_stop(void *ctx)
{
    (void)ctx;
    return cli_interrupted() != 0;
}

int cmd_ppl(int argc, char **argv)
{
    static const struct option lo[] = {
        {"text", required_argument, 0, 't'},     {"config", required_argument, 0, 'c'},
        {"policy", required_argument, 0, 'p'},   {"transforms", required_argument, 0, 'x'},
        {"tokens", required_argument, 0, 'n'},   {"context", required_argument, 0, 'T'},
        {"threads", required_argument, 0, 'j'},  {"output", required_argument, 0, 'o'},
        {"transforms-only", no_argument, 0, 'X'}, {"force", no_argument, 0, 'f'},
        {"kl-ref", required_argument, 0, 'K'},
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    const char *texts[16];
    size_t n_texts = 0;
    const char *configs = "bf16", *policies = "none", *out = NULL, *tfp[16], *kl_ref = NULL;
    size_t n_tf = 0;
    int tf_only = 0, force = 0;
    long tokens = 0, context = 512, threads = cli_default_threads(), v;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
        switch (ch) {
        case 't':
            if (n_texts == 16)
                return cli_fail("ppl", "--text: at most 16 texts");
            texts[n_texts++] = optarg;
            break;
        case 'c': configs = optarg; break;
        case 'p': policies = optarg; break;
        case 'x':
            if (n_tf == 16)
                return cli_fail("ppl", "--transforms: at most 16 files");
            tfp[n_tf++] = optarg;
            break;
        case 'o': out = optarg; break;
        case 'X': tf_only = 1; break;
        case 'K':
            if (strcmp(optarg, "fp32") && strcmp(optarg, "bf16") && strcmp(optarg, "none"))
                return cli_fail("ppl", "--kl-ref: expected fp32, bf16 or none, found \"%s\"",
                                optarg);
            kl_ref = optarg;
            break;
        case 'f': force = 1; break;
        case 'n':
            if (cli_parse_long(optarg, 1, 1L << 40, &v))
                return cli_fail("ppl", "--tokens: expected an integer in 1..2^40, found \"%s\"",
                                optarg);
            tokens = v;
            break;
        case 'T':
            if (cli_parse_long(optarg, 1, 1L << 20, &v))
                return cli_fail("ppl", "--context: expected an integer in 1..2^20 (and at most the "
                                "model's max_position_embeddings), found \"%s\"",
                                optarg);
            context = v;
            break;
        case 'j':
            if (cli_parse_long(optarg, 1, 1024, &v))
                return cli_fail("ppl", "--threads: expected 1..1024, found \"%s\"", optarg);
            threads = v;
            break;
        case 'h': usage(stdout); return QMLA_EXIT_OK;
        default: usage(stderr); return QMLA_EXIT_USAGE;
        }
    }
    if (optind != argc - 1)
        return cli_fail("ppl", "expected one MODEL_DIR (qmla ppl --help)");
    if (!n_texts)
        return cli_fail("ppl", "--text is required");
    if (!out)
        return cli_fail("ppl", "-o RESULTS.h5 is required");
    const char *dir = argv[optind];
    qmla_ppl_run_opts o = qmla_ppl_run_defaults();
    o.texts = texts;
    o.n_texts = n_texts;
    o.configs = configs;
    o.policies = policies;
    o.transforms = tfp;
    o.n_transforms = n_tf;
    o.transforms_only = tf_only;
    o.kl_ref = kl_ref;
    o.tokens = (size_t)tokens;
    o.context = (size_t)context;
    o.threads = (int)threads;
    o.command_line = cli_command_line();
    char jpath[4200];
    snprintf(jpath, sizeof jpath, "%s.journal", out);
    o.journal = jpath;
    o.force = force;
    ppl_cli c;
    memset(&c, 0, sizeof c);
    o.progress = cli_progress_poll;
    o.progress_ctx = &c.prog;
    o.should_stop = should_stop;
    o.event = on_event;
    o.event_ctx = &c;
    qmla_blas_set_threads(1);
    cli_signals_install(); /* polled after each window (and before the write) */
    qmla_error err;
    qmla_error_clear(&err);
    qmla_ppl_run_result r;
    int rc = QMLA_EXIT_OK;
    if (qmla_ppl_run(dir, out, &o, &r, &err)) {
        if (r.stopped) {
            /* SIGINT/SIGTERM arrived: say so; the journal keeps the windows */
            char e1[4 * sizeof jpath];
            fprintf(stderr, "qmla ppl: interrupted (%s); the finished windows are kept in %s — "
                    "rerun the same command to resume\n", cli_signal_name(),
                    cli_esc(jpath, e1, sizeof e1));
            rc = QMLA_EXIT_INTERRUPTED;
        } else {
            rc = r.refusal ? cli_fail("ppl", "%s", err.msg) : cli_lib_error("ppl", &err);
        }
    }
    qmla_ppl_run_result_free(&r);
    if (rc == QMLA_EXIT_OK) {
        /* the peak resident set of the run (the weights are held in float32) */
        struct rusage ru;
        if (getrusage(RUSAGE_SELF, &ru) == 0)
            fprintf(stderr, "qmla ppl: peak resident set %.1f MiB\n",
                    (double)ru.ru_maxrss / 1024.0);
    }
    return rc;
}
