/* cmd_learn.c — `qmla learn`: per-layer cache transforms written in the
 * transforms format (docs/transforms-format.md). The baselines of
 * docs/math.md §7 (RTN, SmoothQuant†, QuaRot†) are calibrated on the
 * train cells:
 *
 *   qmla learn data/tiny-mla-default.h5 -o sq.h5 --method smoothquant \
 *        --train-cells prose-s0
 *
 * (The learned QuantMLA method of §8 is not built yet: --method quantmla is
 * refused with a message.) */
#include "cli.h"
#include "qmla/capture.h"
#include "qmla/outpath.h"
#include "qmla/tfeval.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void help(FILE *f)
{
    fprintf(f,
        "usage: qmla learn CAPTURE.h5 -o TRANSFORMS.h5 --method rtn|smoothquant|quarot\n"
        "                  [--alpha 0.5] [--config C4R4|C2R4] [--layers LIST]\n"
        "                  [--train-cells LIST] [--threads N]\n"
        "\n"
        "Per-layer cache transforms (docs/math.md §7) in the transforms format\n"
        "(docs/transforms-format.md): RTN (T = I), SmoothQuant† (T = diag(σ)^-1,\n"
        "σ_j = max|X_j|^α / max|Q_j|^(1-α) over the train cells, one scale per\n"
        "RoPE pair), QuaRot† (T_C = diag(γ)^-1 H, T_P = I). --train-cells\n"
        "defaults to the first cell of each layer; --config is recorded.\n"
        "The learned QuantMLA transforms (--method quantmla) are not built yet.\n"
        "example: qmla learn data/tiny-mla-default.h5 -o sq.h5 --method smoothquant\n");
}

static int parse_method(const char *s, qmla_tmethod *m)
{
    for (int k = 0; k <= QMLA_TM_QUANTMLA; k++)
        if (!strcmp(s, qmla_tmethod_name((qmla_tmethod)k))) {
            *m = (qmla_tmethod)k;
            return 0;
        }
    return -1;
}

int cmd_learn(int argc, char **argv)
{
    static const struct option lo[] = {
        {"output", required_argument, 0, 'o'}, {"method", required_argument, 0, 'm'},
        {"alpha", required_argument, 0, 'a'},  {"config", required_argument, 0, 'c'},
        {"layers", required_argument, 0, 'L'}, {"train-cells", required_argument, 0, 't'},
        {"threads", required_argument, 0, 'j'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *out = NULL, *layers_arg = NULL, *train_arg = NULL, *config = "C4R4";
    qmla_tmethod method = QMLA_TM_RTN;
    int have_method = 0, threads = cli_default_threads();
    double alpha = 0.5;
    long v;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
        switch (ch) {
        case 'o': out = optarg; break;
        case 'm':
            if (parse_method(optarg, &method))
                return cli_fail("learn", "--method: expected rtn, smoothquant, quarot or quantmla, found \"%s\"", optarg);
            have_method = 1;
            break;
        case 'a':
            if (cli_parse_double(optarg, &alpha) || !(alpha >= 0 && alpha <= 1))
                return cli_fail("learn", "--alpha: expected a number in [0, 1], found \"%s\"", optarg);
            break;
        case 'c':
            if (strcmp(optarg, "C4R4") && strcmp(optarg, "C2R4"))
                return cli_fail("learn", "--config: expected C4R4 or C2R4, found \"%s\"", optarg);
            config = optarg;
            break;
        case 'L': layers_arg = optarg; break;
        case 't': train_arg = optarg; break;
        case 'j':
            if (cli_parse_long(optarg, 1, 1024, &v))
                return cli_fail("learn", "--threads: expected 1..1024, found \"%s\"", optarg);
            threads = (int)v;
            break;
        case 'h': help(stdout); return QMLA_EXIT_OK;
        default: help(stderr); return QMLA_EXIT_USAGE;
        }
    }
    if (optind != argc - 1)
        return cli_fail("learn", "expected exactly one CAPTURE.h5 (see qmla learn --help)");
    if (!out)
        return cli_fail("learn", "missing -o TRANSFORMS.h5");
    if (!have_method)
        return cli_fail("learn", "missing --method (rtn, smoothquant or quarot)");
    if (method == QMLA_TM_QUANTMLA)
        return cli_fail("learn", "--method quantmla: the learned transforms (docs/math.md §8) are not built yet; use rtn, smoothquant or quarot");
    const char *capture = argv[optind];
    qmla_error err;
    qmla_error_clear(&err);
    if (qmla_output_path_check(out, "output file (-o)", &capture, 1, &err))
        return cli_lib_error("learn", &err);
    int *layers = NULL;
    size_t n_layers_sel = 0, n_train = 0;
    char **train = NULL, *trainbuf = NULL, msg[256];
    if (layers_arg && cli_parse_int_list(layers_arg, &layers, &n_layers_sel, msg, sizeof msg))
        return cli_fail("learn", "--layers: %s", msg);
    if (train_arg && cli_split_list(train_arg, &train, &n_train, &trainbuf)) {
        free(layers);
        return cli_fail("learn", "--train-cells: empty list \"%s\"", train_arg);
    }
    qmla_exec ex = qmla_exec_cpu(threads);
    qmla_capture *cap = NULL;
    qmla_transform *ts = NULL;
    float **gam = NULL;
    size_t nt = 0;
    int rc = QMLA_EXIT_OK;
    if (qmla_capture_open(capture, &cap, &err)) {
        rc = cli_lib_error("learn", &err);
        goto done;
    }
    const qmla_capture_config *cf = qmla_capture_get_config(cap);
    size_t NL = qmla_capture_n_layers(cap);
    ts = calloc(NL, sizeof *ts);
    gam = calloc(NL, sizeof *gam);
    if (!ts || !gam) {
        rc = cli_fail("learn", "out of memory");
        goto done;
    }
    char cells_used[256] = "";
    for (size_t li = 0; li < NL; li++) {
        int layer = qmla_capture_layer_index(cap, li);
        if (layers) {
            int want = 0;
            for (size_t k = 0; k < n_layers_sel; k++)
                want |= layers[k] == layer;
            if (!want)
                continue;
        }
        size_t nc = qmla_capture_n_cells(cap, li), *cidx = calloc(nc + 1, sizeof *cidx), ncs = 0;
        if (!train) {
            cidx[ncs++] = 0;
        } else {
            for (size_t k = 0; k < n_train; k++) {
                size_t ci;
                if (!qmla_capture_find_cell(cap, li, train[k], &ci)) {
                    free(cidx);
                    rc = cli_fail("learn", "--train-cells: layer %d has no cell \"%s\"", layer, train[k]);
                    goto done;
                }
                cidx[ncs++] = ci;
            }
        }
        if (!cells_used[0])
            for (size_t k = 0; k < ncs; k++) {
                size_t l = strlen(cells_used);
                snprintf(cells_used + l, sizeof cells_used - l, "%s%s", k ? "," : "",
                         qmla_capture_cell_name(cap, li, cidx[k]));
            }
        gam[nt] = malloc((size_t)cf->d_c * sizeof(float));
        int st = gam[nt] ? qmla_transform_alloc((size_t)cf->d_c, (size_t)cf->d_r, cf->rope_pairing,
                                                &ts[nt], &err)
                         : qmla_error_set(&err, QMLA_ENOMEM, "out of memory");
        if (!st)
            st = qmla_tf_baseline(&ex, cap, li, cidx, ncs, method, alpha, &ts[nt], gam[nt], &err);
        free(cidx);
        nt++;
        if (st) {
            rc = cli_lib_error("learn", &err);
            goto done;
        }
        fprintf(stderr, "qmla learn: layer %d: %s calibrated on %s\n", layer,
                qmla_tmethod_name(method), cells_used);
    }
    if (nt == 0) {
        rc = cli_fail("learn", "--layers: no selected layer is in the capture");
        goto done;
    }
    qmla_transform_meta m;
    memset(&m, 0, sizeof m);
    m.method = method;
    snprintf(m.config, sizeof m.config, "%s", config);
    m.alpha = method == QMLA_TM_SMOOTHQUANT ? alpha : NAN;
    snprintf(m.train_cells, sizeof m.train_cells, "%s", cells_used);
    snprintf(m.capture, sizeof m.capture, "%s", capture);
    snprintf(m.command, sizeof m.command, "%s", cli_command_line());
    if (qmla_transform_file_write(out, &m, ts, (const float *const *)gam, NULL, NULL, nt, &err)) {
        rc = cli_lib_error("learn", &err);
        goto done;
    }
    printf("wrote %s: %s, %zu layers\n", out, qmla_tmethod_name(method), nt);
done:
    for (size_t i = 0; ts && i < NL; i++)
        qmla_transform_free(&ts[i]);
    for (size_t i = 0; gam && i < NL; i++)
        free(gam[i]);
    free(ts);
    free(gam);
    free(layers);
    free(train);
    free(trainbuf);
    qmla_capture_close(cap);
    return rc;
}
