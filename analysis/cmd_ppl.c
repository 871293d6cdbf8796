/* analysis/cmd_ppl.c — `qmla ppl`: bits per byte of an MLA checkpoint over
 * texts with cache configurations and policies (qmla/model.h, issue 11).
 * Every (text, policy, config) combination is one row of the printed table
 * and of /ppl in the results file. */
#include "cli.h"
#include "qmla/model.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
        "usage: qmla ppl MODEL_DIR --text FILE[.gz] [--text FILE2 ...] -o RESULTS.h5\n"
        "                [--config LIST] [--policy LIST] [--transforms T.h5]\n"
        "                [--tokens N] [--context T] [--threads N]\n"
        "\n"
        "Bits per byte and mean NLL of the checkpoint in MODEL_DIR (config.json +\n"
        "safetensors; DeepseekV2/V3 dense blocks) over each text, as the training\n"
        "run measured them: non-overlapping windows of T bytes from the start of\n"
        "the text, each scored as [BOS] + window[0..T-1) against window[0..T).\n"
        "\n"
        "  --text FILE      text (gzip or plain), repeatable\n"
        "  --config LIST    comma-separated cache configurations (default bf16):\n"
        "                   fp32, bf16, C{x}R{y} with x, y in {2,3,4,8}, optionally\n"
        "                   -f16 (default) or -q8 metadata, e.g. C4R4,C2R4-q8\n"
        "  --policy LIST    comma-separated: none (default) or sink<S>/local<W>,\n"
        "                   e.g. none,sink4/local128 (quantized configs only)\n"
        "  --transforms F   per-path cache transforms (issue 10): not available in\n"
        "                   this build; refused\n"
        "  --tokens N       score the first ceil(N/T) windows (default: all)\n"
        "  --context T      window length (default 512)\n"
        "  --threads N      windows scored in parallel (default: online CPUs)\n"
        "  -o FILE          results file; group /ppl is replaced, others kept\n"
        "\n"
        "example: qmla ppl models/tiny-mla --text data/heldout/prose.txt.gz \\\n"
        "           --config bf16,C4R4 --policy none,sink4/local128 --tokens 20480 -o ppl.h5\n");
}

int cmd_ppl(int argc, char **argv)
{
    static const struct option lo[] = {
        {"text", required_argument, 0, 't'},     {"config", required_argument, 0, 'c'},
        {"policy", required_argument, 0, 'p'},   {"transforms", required_argument, 0, 'x'},
        {"tokens", required_argument, 0, 'n'},   {"context", required_argument, 0, 'T'},
        {"threads", required_argument, 0, 'j'},  {"output", required_argument, 0, 'o'},
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    const char *texts[16];
    size_t n_texts = 0;
    const char *configs = "bf16", *policies = "none", *out = NULL, *transforms = NULL;
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
        case 'x': transforms = optarg; break;
        case 'o': out = optarg; break;
        case 'n':
            if (cli_parse_long(optarg, 1, 1L << 40, &v))
                return cli_fail("ppl", "--tokens: expected a positive integer, found \"%s\"",
                                optarg);
            tokens = v;
            break;
        case 'T':
            if (cli_parse_long(optarg, 1, 1L << 20, &v))
                return cli_fail("ppl", "--context: expected a positive integer, found \"%s\"",
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
    if (transforms)
        return cli_fail("ppl", "--transforms %s: the transforms file format (issue 10, "
                        "docs/transforms-format.md) is not available in this build; the "
                        "engine's hook (qmla_cache_hook in qmla/model.h) is where its reader "
                        "will plug in. Run without --transforms for the RTN rows.",
                        transforms);
    const char *dir = argv[optind];
    char **cl = NULL, **pl = NULL, *cbuf = NULL, *pbuf = NULL;
    size_t nc = 0, np = 0;
    if (cli_split_list(configs, &cl, &nc, &cbuf) || !nc ||
        cli_split_list(policies, &pl, &np, &pbuf) || !np)
        return cli_fail("ppl", "--config / --policy: expected comma-separated lists");
    int rc = QMLA_EXIT_OK;
    qmla_error err;
    qmla_error_clear(&err);
    size_t n_spec = 0, n_rows = 0;
    qmla_cache_spec *specs = calloc(nc * np, sizeof *specs);
    qmla_ppl_row *rows = calloc(nc * np * n_texts, sizeof *rows);
    uint8_t *buf = NULL;
    qmla_model *m = NULL;
    if (!specs || !rows) {
        rc = cli_fail("ppl", "out of memory");
        goto done;
    }
    for (size_t p = 0; p < np; p++)
        for (size_t c = 0; c < nc; c++) {
            qmla_cache_spec s;
            if (qmla_cache_spec_parse(cl[c], pl[p], &s, &err)) {
                rc = cli_lib_error("ppl", &err);
                goto done;
            }
            /* a policy changes nothing for unquantized caches: one row */
            if ((s.c_bits == QMLA_CACHE_FP32 || s.c_bits == QMLA_CACHE_BF16) && p > 0 &&
                strcmp(s.policy, "none"))
                continue;
            if (s.c_bits == QMLA_CACHE_FP32 || s.c_bits == QMLA_CACHE_BF16)
                snprintf(s.policy, sizeof s.policy, "none"), s.sink = s.window = 0;
            specs[n_spec++] = s;
        }
    qmla_blas_set_threads(1);
    double t0 = cli_now();
    if (qmla_model_load(dir, &m, &err)) {
        rc = cli_lib_error("ppl", &err);
        goto done;
    }
    const qmla_model_config *mc = qmla_model_cfg(m);
    fprintf(stderr, "qmla ppl: %s: %s, %zu parameters, %zu layers, d_c %zu, d_r %zu "
            "(loaded in %.2f s)\n", dir, mc->arch, qmla_model_n_params(m), mc->L, mc->d_c,
            mc->d_r, cli_now() - t0);
    const qmla_exec ex = qmla_exec_cpu((int)threads);
    printf("%-28s %-10s %-6s %-16s %9s %9s %12s %8s\n", "text", "config", "method", "policy",
           "bits/byte", "nats/tok", "tokens", "s");
    for (size_t k = 0; k < n_texts; k++) {
        size_t nb = 0;
        char msg[512];
        free(buf);
        buf = NULL;
        if (cli_read_text(texts[k], &buf, &nb, msg, sizeof msg)) {
            rc = cli_fail("ppl", "%s", msg);
            goto done;
        }
        size_t maxw = tokens ? (size_t)((tokens + context - 1) / context) : 0;
        for (size_t s = 0; s < n_spec; s++) {
            qmla_ppl_row *r = &rows[n_rows];
            double t1 = cli_now();
            if (qmla_model_ppl(m, &ex, &specs[s], buf, nb, (size_t)context, maxw, &r->r,
                               &err)) {
                qmla_error_prefix(&err, "%s, %s, %s: ", texts[k], specs[s].name,
                                  specs[s].policy);
                rc = cli_lib_error("ppl", &err);
                goto done;
            }
            r->text = texts[k];
            r->config = specs[s].name;
            r->policy = specs[s].policy;
            r->method = (specs[s].c_bits == QMLA_CACHE_FP32 ||
                         specs[s].c_bits == QMLA_CACHE_BF16) ? "none" : "RTN";
            r->context = (size_t)context;
            n_rows++;
            printf("%-28s %-10s %-6s %-16s %9.4f %9.5f %12zu %8.1f\n", texts[k], r->config,
                   r->method, r->policy, r->r.bits_per_byte, r->r.nll_nats_per_token,
                   r->r.tokens, cli_now() - t1);
            fflush(stdout);
        }
    }
    if (qmla_ppl_save(out, dir, cli_command_line(), rows, n_rows, &err))
        rc = cli_lib_error("ppl", &err);
done:
    qmla_model_free(m);
    free(buf);
    free(specs);
    free(rows);
    free(cl);
    free(cbuf);
    free(pl);
    free(pbuf);
    return rc;
}
