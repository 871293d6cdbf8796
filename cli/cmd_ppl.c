/* cli/cmd_ppl.c — `qmla ppl`: bits per byte of an MLA checkpoint over
 * texts with cache configurations and policies (qmla/model.h, issue 11).
 * Every (text, policy, config) combination is one row of the printed table
 * and of /ppl in the results file. */
#include "cli.h"
#include "cli_safe.h"
#include "qmla/model.h"
#include "qmla/outpath.h"
#include "qmla/tmethod.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
        "usage: qmla ppl MODEL_DIR --text FILE[.gz] [--text FILE2 ...] -o RESULTS.h5\n"
        "                [--config LIST] [--policy LIST] [--transforms T.h5]\n"
        "                [--transforms-only] [--tokens N] [--context T] [--threads N]\n"
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
        "\n"
        "The configurations of one text and model (or transforms file) are scored\n"
        "together, window by window: quantized ones under a sink/local policy share\n"
        "the tokens that read only BF16 keys (the first S + W of each window), with\n"
        "the same results as alone. s(grp): seconds for the whole group.\n"
        "Progress (windows of the group) goes to stderr: a bar on a terminal, else\n"
        "a line every 30 s. SIGINT or SIGTERM stops after the windows in flight:\n"
        "exit 130, nothing written (the results are written once, at the end).\n"
        "\n"
        "example: qmla ppl models/tiny-mla --text data/heldout/prose.txt.gz \\\n"
        "           --config bf16,C4R4 --policy none,sink4/local128 --tokens 20480 -o ppl.h5\n");
}

/* The row label of a transforms file: its method, and the learned path of a
 * QuantMLA file learned on one path only. */
static void tf_label(const qmla_transform_file *f, char *out, size_t n)
{
    qmla_tmethod_of(f->meta.method)->ppl_label(&f->meta, out, n);
}

/* SIGINT/SIGTERM arrived: say so; nothing is written. */
static int ppl_interrupted(const char *out)
{
    fprintf(stderr, "qmla ppl: interrupted (%s); nothing written to %s\n", cli_signal_name(),
            out);
    return QMLA_EXIT_INTERRUPTED;
}

int cmd_ppl(int argc, char **argv)
{
    static const struct option lo[] = {
        {"text", required_argument, 0, 't'},     {"config", required_argument, 0, 'c'},
        {"policy", required_argument, 0, 'p'},   {"transforms", required_argument, 0, 'x'},
        {"tokens", required_argument, 0, 'n'},   {"context", required_argument, 0, 'T'},
        {"threads", required_argument, 0, 'j'},  {"output", required_argument, 0, 'o'},
        {"transforms-only", no_argument, 0, 'X'}, {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    const char *texts[16];
    size_t n_texts = 0;
    const char *configs = "bf16", *policies = "none", *out = NULL, *tfp[16];
    size_t n_tf = 0;
    int tf_only = 0;
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
    char **cl = NULL, **pl = NULL, *cbuf = NULL, *pbuf = NULL;
    size_t nc = 0, np = 0;
    if (cli_split_list(configs, &cl, &nc, &cbuf) || !nc ||
        cli_split_list(policies, &pl, &np, &pbuf) || !np)
        return cli_fail("ppl", "--config / --policy: expected comma-separated lists");
    int rc = QMLA_EXIT_OK;
    qmla_error err;
    qmla_error_clear(&err);
    {
        /* before any work (a full text takes minutes): -o must be a regular
         * file or a new name, and none of the inputs */
        const char *in[32];
        size_t n_in = 0;
        for (size_t k = 0; k < n_texts; k++)
            in[n_in++] = texts[k];
        for (size_t k = 0; k < n_tf; k++)
            in[n_in++] = tfp[k];
        if (qmla_output_path_check(out, "output file (-o)", in, n_in, &err)) {
            free(cl);
            free(cbuf);
            free(pl);
            free(pbuf);
            return cli_lib_error("ppl", &err);
        }
    }
    size_t n_spec = 0, n_rows = 0;
    qmla_cache_spec *specs = calloc(nc * np, sizeof *specs);
    /* variant 0: the checkpoint as it is; 1..n_tf: with the file's transforms */
    qmla_model *mv[17] = {0};
    qmla_transform_file tf[16];
    char labels[17][32];
    memset(tf, 0, sizeof tf);
    qmla_ppl_row *rows = calloc(nc * np * n_texts * (n_tf + 1), sizeof *rows);
    qmla_cache_spec *grp = calloc(nc * np, sizeof *grp);
    qmla_ppl_result *res = calloc(nc * np, sizeof *res);
    uint8_t *buf = NULL;
    if (!specs || !rows || !grp || !res) {
        rc = cli_fail("ppl", "out of memory");
        goto done;
    }
    int any_quant = 0;
    for (size_t p = 0; p < np; p++)
        for (size_t c = 0; c < nc; c++) {
            qmla_cache_spec s;
            if (qmla_cache_spec_parse(cl[c], pl[p], &s, &err)) {
                rc = cli_lib_error("ppl", &err);
                goto done;
            }
            const int plain = s.c_bits == QMLA_CACHE_FP32 || s.c_bits == QMLA_CACHE_BF16;
            /* a policy changes nothing for unquantized caches: one row */
            if (plain && p > 0 && strcmp(s.policy, "none"))
                continue;
            if (plain)
                snprintf(s.policy, sizeof s.policy, "none"), s.sink = s.window = 0;
            any_quant |= !plain;
            specs[n_spec++] = s;
        }
    int any_policy = 0;
    for (size_t p = 0; p < np; p++)
        any_policy |= strcmp(pl[p], "none") != 0;
    if (any_policy && !any_quant)
        fprintf(stderr, "qmla ppl: note: --policy applies to quantized configs only; the "
                        "fp32/bf16 rows are scored without one (policy none)\n");
    for (size_t i = 0; i < n_tf; i++) {
        if (qmla_transform_file_read(tfp[i], &tf[i], &err)) {
            rc = cli_lib_error("ppl", &err);
            goto done;
        }
        tf_label(&tf[i], labels[i + 1], sizeof labels[i + 1]);
    }
    qmla_blas_set_threads(1);
    cli_signals_install(); /* polled after each window (and before the write) */
    for (size_t v = 0; v <= n_tf; v++) {
        double t0 = cli_now();
        if (qmla_model_load(dir, &mv[v], &err)) {
            rc = cli_lib_error("ppl", &err);
            goto done;
        }
        if (v && qmla_model_apply_transforms(mv[v], tf[v - 1].t,
                                             (const float *const *)tf[v - 1].gamma,
                                             tf[v - 1].n, &err)) {
            qmla_error_prefix(&err, "%s: ", tfp[v - 1]);
            rc = cli_lib_error("ppl", &err);
            goto done;
        }
        const qmla_model_config *mc = qmla_model_cfg(mv[v]);
        if (!v)
            fprintf(stderr, "qmla ppl: %s: %s, %zu parameters, %zu layers, d_c %zu, d_r %zu "
                    "(loaded in %.2f s)\n", dir, mc->arch, qmla_model_n_params(mv[v]), mc->L,
                    mc->d_c, mc->d_r, cli_now() - t0);
        else if (qmla_tmethod_of(tf[v - 1].meta.method)->learned)
            fprintf(stderr, "qmla ppl: %s: %s transforms (%s, learned for %s) of %zu layers "
                    "folded into the weights\n", tfp[v - 1], labels[v],
                    qmla_tmethod_name(tf[v - 1].meta.method), tf[v - 1].meta.config,
                    tf[v - 1].n);
        else
            fprintf(stderr, "qmla ppl: %s: %s transforms (a baseline, used for every quantized "
                    "config) of %zu layers folded into the weights\n", tfp[v - 1], labels[v],
                    tf[v - 1].n);
    }
    const qmla_exec ex = qmla_exec_cpu((int)threads);
    printf("%-28s %-10s %-16s %-16s %9s %9s %12s %8s\n", "text", "config", "method", "policy",
           "bits/byte", "nats/tok", "tokens", "s(grp)");
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
        /* the configurations of one text and one model variant are scored
         * together: protected ones share the clean prefix (qmla/model.h) */
        for (size_t v = 0; v <= n_tf; v++) {
            size_t n_grp = 0;
            for (size_t s = 0; s < n_spec; s++) {
                const qmla_cache_spec *sp = &specs[s];
                const int plain = sp->c_bits == QMLA_CACHE_FP32 ||
                                  sp->c_bits == QMLA_CACHE_BF16;
                if (!v && tf_only)
                    continue;
                if (v) {
                    const qmla_transform_meta *tm = &tf[v - 1].meta;
                    if (plain && any_quant)
                        continue;
                    /* a learned file serves the configuration it was learned for */
                    if (!plain && qmla_tmethod_of(tm->method)->learned &&
                        strncmp(sp->name, tm->config, strlen(tm->config)))
                        continue;
                }
                grp[n_grp] = *sp;
                qmla_ppl_row *r = &rows[n_rows + n_grp];
                r->text = texts[k];
                r->config = sp->name;
                r->policy = sp->policy;
                r->method = v ? labels[v] : plain ? "none" : "RTN";
                r->transforms = v ? tfp[v - 1] : "";
                r->context = (size_t)context;
                n_grp++;
            }
            if (!n_grp)
                continue;
            double t1 = cli_now();
            /* windows done, on stderr (a bar on a terminal, else a line every
             * 30 s); SIGINT/SIGTERM stop at the next window: exit 130 */
            char label[600];
            const char *base = strrchr(texts[k], '/');
            snprintf(label, sizeof label, "ppl %s%s%s", base ? base + 1 : texts[k],
                     v ? " + " : "", v ? labels[v] : "");
            cli_progress prog;
            cli_progress_init(&prog, label);
            int stopped = 0;
            const int st = qmla_model_ppl_multi_progress(mv[v], &ex, grp, n_grp, buf, nb,
                                                         (size_t)context, maxw, cli_progress_poll,
                                                         &prog, &stopped, res, &err);
            cli_progress_end(&prog);
            if (stopped || cli_interrupted()) {
                rc = ppl_interrupted(out);
                goto done;
            }
            if (st) {
                qmla_error_prefix(&err, "%s%s%s: ", texts[k], v ? ", transforms " : "",
                                  v ? tfp[v - 1] : "");
                rc = cli_lib_error("ppl", &err);
                goto done;
            }
            const double dt = cli_now() - t1;
            for (size_t j = 0; j < n_grp; j++, n_rows++) {
                qmla_ppl_row *r = &rows[n_rows];
                r->r = res[j];
                printf("%-28s %-10s %-16s %-16s %9.4f %9.5f %12zu %8.1f\n", texts[k],
                       r->config, r->method, r->policy, r->r.bits_per_byte,
                       r->r.nll_nats_per_token, r->r.tokens, dt);
            }
            fflush(stdout);
        }
    }
    if (cli_interrupted()) { /* after the last window: still nothing written */
        rc = ppl_interrupted(out);
        goto done;
    }
    if (qmla_ppl_save(out, dir, cli_command_line(), rows, n_rows, &err))
        rc = cli_lib_error("ppl", &err);
done:
    for (size_t v = 0; v <= n_tf; v++)
        qmla_model_free(mv[v]);
    for (size_t i = 0; i < n_tf; i++)
        qmla_transform_file_free(&tf[i]);
    free(buf);
    free(specs);
    free(rows);
    free(grp);
    free(res);
    free(cl);
    free(cbuf);
    free(pl);
    free(pbuf);
    return rc;
}
