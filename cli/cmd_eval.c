/* cmd_eval.c — `qmla eval`: output NMSE of one or more transforms files at
 * a cache configuration (docs/math.md §7–9) -> group /eval of a results
 * file (docs/results-format.md), with the per-layer table and the model
 * mean of every method side by side and the App. C.3 RoPE bound next to
 * the RoPE-only distortion (a measured value above the bound exits 1).
 *
 *   qmla eval data/tiny-mla-default.h5 --transforms rtn.h5 \
 *        --transforms sq.h5 --config C4R4 --cells code-s0 -o ev.h5 */
#include "cli.h"
#include "qmla/capture.h"
#include "qmla/outpath.h"
#include "qmla/tfeval.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TF 16

static void help(FILE *f)
{
    fprintf(f,
        "usage: qmla eval CAPTURE.h5 --transforms T.h5 [--transforms T2.h5 ...]\n"
        "                 --config C4R4|C2R4 [--policy sink4/local128|none]\n"
        "                 [--layers LIST] [--cells LIST] [--threads N] -o RESULTS.h5\n"
        "\n"
        "For every transforms file, layer and cell: caches quantized in the\n"
        "transformed coordinates, QDQ(X T) T^-1 (content x bits, RoPE y bits for\n"
        "C{x}R{y}, group 64, f16 metadata); output NMSE with both caches, with\n"
        "only the content cache and with only the RoPE cache quantized; the\n"
        "positional-score error; the RoPE bound of docs/math.md §8. --policy\n"
        "keeps the first S and the last W tokens of each sequence clean (default\n"
        "none). Writes group /eval (other groups of RESULTS.h5 are kept).\n"
        "Evaluate on cells the transforms were not calibrated on (--cells).\n"
        "Exit 1 when a measured RoPE-only distortion exceeds its bound.\n"
        "example: qmla eval data/tiny-mla-default.h5 --transforms rtn.h5 --transforms qm.h5 \\\n"
        "           --config C4R4 --cells code-s0 -o eval.h5\n");
}

static int parse_policy(const char *s, size_t *sink, size_t *local)
{
    if (!strcmp(s, "none")) {
        *sink = *local = 0;
        return 0;
    }
    unsigned long a, b;
    char tail;
    if (sscanf(s, "sink%lu/local%lu%c", &a, &b, &tail) != 2 || a > 1000000 || b > 1000000)
        return -1;
    *sink = a;
    *local = b;
    return 0;
}

int cmd_eval(int argc, char **argv)
{
    static const struct option lo[] = {
        {"output", required_argument, 0, 'o'}, {"transforms", required_argument, 0, 'T'},
        {"config", required_argument, 0, 'c'}, {"policy", required_argument, 0, 'p'},
        {"layers", required_argument, 0, 'L'}, {"cells", required_argument, 0, 'C'},
        {"threads", required_argument, 0, 'j'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *out = NULL, *tf_path[MAX_TF], *config = NULL, *policy = "none";
    const char *layers_arg = NULL, *cells_arg = NULL;
    size_t n_tf = 0, sink = 0, local = 0;
    int threads = cli_default_threads();
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
        switch (ch) {
        case 'o': out = optarg; break;
        case 'T':
            if (n_tf == MAX_TF)
                return cli_fail("eval", "--transforms: at most %d files", MAX_TF);
            tf_path[n_tf++] = optarg;
            break;
        case 'c':
            if (strcmp(optarg, "C4R4") && strcmp(optarg, "C2R4"))
                return cli_fail("eval", "--config: expected C4R4 or C2R4, found \"%s\"", optarg);
            config = optarg;
            break;
        case 'p':
            if (parse_policy(optarg, &sink, &local))
                return cli_fail("eval", "--policy: expected sinkS/localW (e.g. sink4/local128) or none, found \"%s\"", optarg);
            policy = optarg;
            break;
        case 'L': layers_arg = optarg; break;
        case 'C': cells_arg = optarg; break;
        case 'j':
            if (cli_opt_threads("eval", optarg, &threads))
                return QMLA_EXIT_USAGE;
            break;
        case 'h': help(stdout); return QMLA_EXIT_OK;
        default: help(stderr); return QMLA_EXIT_USAGE;
        }
    }
    if (cli_require_args("eval", argc, "CAPTURE.h5", out, "-o RESULTS.h5"))
        return QMLA_EXIT_USAGE;
    if (!n_tf)
        return cli_fail("eval", "missing --transforms T.h5");
    if (!config)
        return cli_fail("eval", "missing --config C4R4|C2R4");
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
    qmla_tf_eval_opts o;
    o.qc = qmla_quant_defaults();
    o.qr = qmla_quant_defaults();
    o.qc.bits = config[1] - '0';
    o.qr.bits = config[3] - '0';
    o.sink = sink;
    o.local = local;
    qmla_exec ex = qmla_exec_cpu(threads);
    qmla_transform_file tf[MAX_TF];
    memset(tf, 0, sizeof tf);
    char label[MAX_TF][64];
    qmla_capture *cap = NULL;
    qmla_tf_eval_rec *rows = NULL;
    size_t n_rows = 0, cap_rows = 0;
    int rc = QMLA_EXIT_OK, bound_fail = 0;
    for (size_t k = 0; k < n_tf; k++) {
        if (qmla_transform_file_read(tf_path[k], &tf[k], &err)) {
            rc = cli_lib_error("eval", &err);
            goto done;
        }
        /* label: the method; a QuantMLA file that learned one path only is
         * quantmla-content / quantmla-rope; a repeated label gets #k */
        char base[40];
        snprintf(base, sizeof base, "%s", qmla_tmethod_name(tf[k].meta.method));
        if (tf[k].meta.method == QMLA_TM_QUANTMLA && strstr(tf[k].meta.settings, "path=content "))
            snprintf(base, sizeof base, "quantmla-content");
        else if (tf[k].meta.method == QMLA_TM_QUANTMLA && strstr(tf[k].meta.settings, "path=rope "))
            snprintf(base, sizeof base, "quantmla-rope");
        if (tf[k].meta.method == QMLA_TM_QUANTMLA && strstr(tf[k].meta.settings, "objective=recon ")) {
            size_t bl = strlen(base);
            snprintf(base + bl, sizeof base - bl, "-recon");
        }
        int dup = 0;
        for (size_t j = 0; j < k; j++)
            dup += !strncmp(label[j], base, strlen(base)) &&
                   (label[j][strlen(base)] == 0 || label[j][strlen(base)] == '#');
        if (dup)
            snprintf(label[k], sizeof label[k], "%s#%d", base, dup + 1);
        else
            snprintf(label[k], sizeof label[k], "%s", base);
    }
    if (qmla_capture_open(capture, &cap, &err)) {
        rc = cli_lib_error("eval", &err);
        goto done;
    }
    size_t NL = qmla_capture_n_layers(cap);
    printf("qmla eval %s: %s, policy %s; output NMSE (both caches quantized), mean over cells\n",
           capture, config, policy);
    printf("%6s", "layer");
    for (size_t k = 0; k < n_tf; k++)
        printf(" %16s", label[k]);
    printf("\n");
    double mean[MAX_TF] = {0};
    size_t n_mean = 0;
    for (size_t li = 0; li < NL; li++) {
        int layer = qmla_capture_layer_index(cap, li);
        if (layers) {
            int want = 0;
            for (size_t k = 0; k < n_lsel; k++)
                want |= layers[k] == layer;
            if (!want)
                continue;
        }
        double lay[MAX_TF] = {0};
        size_t nc = qmla_capture_n_cells(cap, li), used = 0;
        for (size_t ci = 0; ci < nc; ci++) {
            const char *cn = qmla_capture_cell_name(cap, li, ci);
            if (cells) {
                int want = 0;
                for (size_t k = 0; k < n_csel; k++)
                    want |= !strcmp(cells[k], cn);
                if (!want)
                    continue;
            }
            used++;
            for (size_t k = 0; k < n_tf; k++) {
                const float *g = NULL;
                const qmla_transform *t = qmla_transform_file_layer(&tf[k], layer, &g);
                if (!t) {
                    rc = cli_fail("eval", "%s has no transform for layer %d", tf_path[k], layer);
                    goto done;
                }
                if (n_rows == cap_rows) {
                    cap_rows = cap_rows ? 2 * cap_rows : 64;
                    qmla_tf_eval_rec *nr = realloc(rows, cap_rows * sizeof *rows);
                    if (!nr) {
                        rc = cli_fail("eval", "out of memory");
                        goto done;
                    }
                    rows = nr;
                }
                qmla_tf_eval_rec *r = &rows[n_rows];
                r->method = label[k];
                r->transforms = tf_path[k];
                r->layer = layer;
                r->cell = cn;
                if (qmla_tf_eval_cell(&ex, cap, li, ci, t, g, &o, &r->r, &err)) {
                    rc = cli_lib_error("eval", &err);
                    goto done;
                }
                n_rows++;
                lay[k] += r->r.nmse_out;
                if (!r->r.bound_ok) {
                    bound_fail = 1;
                    fprintf(stderr, "qmla eval: %s layer %d cell %s: RoPE-only NMSE %.4g above its bound %.4g\n",
                            label[k], layer, cn, r->r.nmse_p, r->r.bound_p);
                }
            }
        }
        if (!used)
            continue;
        printf("%6d", layer);
        for (size_t k = 0; k < n_tf; k++) {
            lay[k] /= (double)used;
            mean[k] += lay[k];
            printf(" %16.4e", lay[k]);
        }
        printf("\n");
        n_mean++;
    }
    if (!n_rows) {
        rc = cli_fail("eval", "no (layer, cell) selected");
        goto done;
    }
    printf("%6s", "mean");
    for (size_t k = 0; k < n_tf; k++)
        printf(" %16.4e", mean[k] / (double)n_mean);
    printf("\n\nper path (mean over layers and cells): content-only, RoPE-only NMSE, positional-score error, RoPE bound\n");
    for (size_t k = 0; k < n_tf; k++) {
        double a = 0, b = 0, c = 0, d = 0;
        size_t m = 0;
        for (size_t i = 0; i < n_rows; i++)
            if (rows[i].method == label[k]) {
                a += rows[i].r.nmse_c;
                b += rows[i].r.nmse_p;
                c += rows[i].r.pos_err;
                d += rows[i].r.bound_p;
                m++;
            }
        printf("%-16s content %.4e  rope %.4e  pos_err %.4e  bound %.4e\n", label[k], a / m,
               b / m, c / m, d / m);
    }
    if (qmla_tf_eval_write(out, config, policy, cli_command_line(), rows, n_rows, &err)) {
        rc = cli_lib_error("eval", &err);
        goto done;
    }
    printf("wrote /eval of %s (%zu rows)\n", out, n_rows);
    if (bound_fail) {
        fprintf(stderr, "qmla eval: a RoPE-only distortion exceeds the App. C.3 bound (a bug)\n");
        rc = QMLA_EXIT_FINDING;
    }
done:
    for (size_t k = 0; k < n_tf; k++)
        qmla_transform_file_free(&tf[k]);
    free(rows);
    free(layers);
    free(cells);
    free(cellbuf);
    qmla_capture_close(cap);
    return rc;
}
