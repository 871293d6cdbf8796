/* cmd_learn.c — `qmla learn`: per-layer cache transforms written in the
 * transforms format (docs/transforms-format.md). The baselines of
 * docs/math.md §7 (RTN, SmoothQuant†, QuaRot†) are calibrated on the
 * train cells:
 *
 *   qmla learn data/tiny-mla-default.h5 -o sq.h5 --method smoothquant \
 *        --train-cells prose-s0
 *
 * and the learned QuantMLA transforms of §8 (qmla/learn.h), one path at a
 * time, on a train bank with the best step chosen on a disjoint held-out
 * bank:
 *
 *   qmla learn data/tiny-mla-default.h5 -o qm.h5 --train-cells prose-s0 \
 *        --heldout-cells code-s0 --path both --steps 300
 *
 * Learning is resumable per layer: the file is rewritten after every layer
 * (attribute complete = 0 until the last), and a rerun of the same command
 * keeps the layers already there. */
#include "cli.h"
#include "qmla/capture.h"
#include "qmla/learn.h"
#include "qmla/outpath.h"
#include "qmla/tfeval.h"

#include <getopt.h>
#include <unistd.h>
#include "cli_safe.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void help(FILE *f)
{
    fprintf(f,
        "usage: qmla learn CAPTURE.h5 -o TRANSFORMS.h5 [--method quantmla|rtn|smoothquant|quarot]\n"
        "                  [--path content|rope|both] [--config C4R4|C2R4] [--steps 300]\n"
        "                  [--lr 5e-3] [--seed 0] [--objective function|recon] [--alpha 0.5]\n"
        "                  [--layers LIST]\n"
        "                  [--train-cells LIST] [--heldout-cells LIST] [--threads N] [--force]\n"
        "                  [--also-content CONTENT.h5]\n"
        "\n"
        "Per-layer cache transforms (docs/math.md §7) in the transforms format\n"
        "(docs/transforms-format.md): RTN (T = I), SmoothQuant† (T = diag(σ)^-1,\n"
        "σ_j = max|X_j|^α / max|Q_j|^(1-α) over the train cells, one scale per\n"
        "RoPE pair), QuaRot† (T_C = diag(γ)^-1 H, T_P = I). --train-cells\n"
        "defaults to the first cell of each layer.\n"
        "QuantMLA (the default method, docs/math.md §8): content = Cayley rotation +\n"
        "log-scales against attention-output reconstruction (content cache only\n"
        "quantized, C bits of --config); RoPE = pair angles + log-scales against the\n"
        "complete positional-score reconstruction (R bits); AdamW, --steps with 10 %%\n"
        "warm-up then cosine, scales initialised by a held-out search over α; the\n"
        "best step on --heldout-cells (default: every cell not in --train-cells;\n"
        "none left: the last quarter of the train sequences; --heldout-cells none:\n"
        "the train objective selects). A path not learned stays the\n"
        "identity. --objective recon replaces both objectives by plain cache\n"
        "reconstruction ‖X~ - X‖²/‖X‖² (the paper's Table 7 ablation).\n"
        "--also-content (with --path both) also writes CONTENT.h5: the same run's\n"
        "content transform with the RoPE path the identity, which is what --path\n"
        "content with the same settings writes (the paths are learned\n"
        "independently), without learning the content path twice.\n"
        "One progress line per layer and path. Resume: rerun the same\n"
        "command (--force starts over).\n"
        "example: qmla learn data/tiny-mla-default.h5 -o qm.h5 --train-cells prose-s0\n");
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

/* Sequences of the named cells of layer li, loaded (cells[] owns them). */
typedef struct bank_data {
    qmla_cell *cells;
    size_t n_cells;
    size_t *T;
    const float **C, **K, **qn, **qr;
    qmla_learn_bank bank;
} bank_data;

static void bank_free(bank_data *b)
{
    for (size_t k = 0; b->cells && k < b->n_cells; k++)
        qmla_cell_free(&b->cells[k]);
    free(b->cells);
    free(b->T);
    free(b->C);
    free(b->K);
    free(b->qn);
    free(b->qr);
    memset(b, 0, sizeof *b);
}

/* seq_lo/seq_hi: the sequences of every cell taken (fractions of N). */
static int bank_load(qmla_capture *cap, size_t li, const size_t *ci, size_t nc, int part,
                     bank_data *b, qmla_error *err)
{
    memset(b, 0, sizeof *b);
    b->cells = calloc(nc + 1, sizeof *b->cells);
    if (!b->cells)
        return qmla_error_set(err, QMLA_ENOMEM, "out of memory");
    b->n_cells = nc;
    size_t total = 0;
    for (size_t k = 0; k < nc; k++) {
        int st = qmla_capture_load_cell_parts(cap, li, ci[k], 0, &b->cells[k], err);
        if (st)
            return st;
        total += b->cells[k].N;
    }
    b->T = calloc(total + 1, sizeof *b->T);
    b->C = calloc(total + 1, sizeof *b->C);
    b->K = calloc(total + 1, sizeof *b->K);
    b->qn = calloc(total + 1, sizeof *b->qn);
    b->qr = calloc(total + 1, sizeof *b->qr);
    if (!b->T || !b->C || !b->K || !b->qn || !b->qr)
        return qmla_error_set(err, QMLA_ENOMEM, "out of memory");
    const qmla_capture_config *cf = qmla_capture_get_config(cap);
    size_t n = 0;
    for (size_t k = 0; k < nc; k++) {
        qmla_cell *c = &b->cells[k];
        size_t lo = 0, hi = c->N;
        if (part == 1) /* train part of a split: all but the last quarter */
            hi = c->N - (c->N + 3) / 4;
        else if (part == 2)
            lo = c->N - (c->N + 3) / 4;
        for (size_t s = lo; s < hi; s++, n++) {
            size_t T = c->T;
            b->T[n] = T;
            b->C[n] = c->c_kv + s * T * cf->d_c;
            b->K[n] = c->k_rope + s * T * cf->d_r;
            b->qn[n] = c->q_nope + s * cf->H * T * cf->d_n;
            b->qr[n] = c->q_rope + s * cf->H * T * cf->d_r;
        }
    }
    b->bank.n = n;
    b->bank.T = b->T;
    b->bank.C = b->C;
    b->bank.K = b->K;
    b->bank.q_nope = b->qn;
    b->bank.q_rope = b->qr;
    return QMLA_OK;
}

typedef struct learn_cfg {
    int do_content, do_rope;
    qmla_learn_opts oc, orope;
} learn_cfg;

static int run_path(qmla_learn_path path, const qmla_learn_opts *o, const qmla_mla_dims *d,
                    const qmla_mla_weights *w, const float *gamma, qmla_rope_pairing pp,
                    const qmla_learn_bank *tr, const qmla_learn_bank *he, int layer,
                    qmla_transform *t, double *obj, qmla_error *err)
{
    qmla_learner *l = NULL;
    double t0 = cli_now();
    int st = qmla_learner_alloc(path, d, w, gamma, pp, tr, he, o, &l, err);
    double alpha = 0;
    if (!st)
        st = qmla_learner_init(l, &alpha, err);
    for (size_t k = 0; !st && k < o->steps; k++) {
        if (cli_interrupted()) {
            st = qmla_error_set(err, QMLA_EINVAL, "interrupted by %s (layers done so far are kept)",
                                cli_signal_name());
            break;
        }
        st = qmla_learner_iterate(l, err);
    }
    if (!st)
        st = qmla_learner_finish(l, err);
    if (!st)
        st = qmla_learner_get(l, t, err);
    if (!st) {
        qmla_learn_state s = qmla_learner_state(l);
        const char *nm = path == QMLA_LEARN_CONTENT ? "content" : "rope";
        fprintf(stderr,
                "qmla learn: layer %d %-7s steps %zu  init α %-4g  %s %.4e -> best %.4e (step %zu)  train %.4e  %.1f s "
                "(fwd %.1f, bwd %.1f, qdq %.1f, cayley %.1f)\n",
                layer, nm, s.step, alpha, he && he->n ? "held-out" : "selected on train", s.init_obj, s.best_held, s.best_step, s.train_obj, cli_now() - t0,
                s.t_forward, s.t_backward, s.t_qdq, s.t_cayley);
        obj[path == QMLA_LEARN_CONTENT ? QMLA_TOBJ_C_INIT : QMLA_TOBJ_P_INIT] = s.init_obj;
        obj[path == QMLA_LEARN_CONTENT ? QMLA_TOBJ_C_BEST : QMLA_TOBJ_P_BEST] = s.best_held;
    }
    qmla_learner_free(l);
    return st;
}

int cmd_learn(int argc, char **argv)
{
    static const struct option lo[] = {
        {"output", required_argument, 0, 'o'}, {"method", required_argument, 0, 'm'},
        {"alpha", required_argument, 0, 'a'},  {"config", required_argument, 0, 'c'},
        {"layers", required_argument, 0, 'L'}, {"train-cells", required_argument, 0, 't'},
        {"heldout-cells", required_argument, 0, 'H'}, {"path", required_argument, 0, 'P'},
        {"steps", required_argument, 0, 'S'},  {"lr", required_argument, 0, 'r'},
        {"seed", required_argument, 0, 's'},   {"force", no_argument, 0, 'f'},
        {"objective", required_argument, 0, 'O'}, {"also-content", required_argument, 0, 'A'},
        {"threads", required_argument, 0, 'j'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *out = NULL, *layers_arg = NULL, *train_arg = NULL, *held_arg = NULL, *also = NULL;
    const char *config = "C4R4", *path_arg = "both";
    qmla_tmethod method = QMLA_TM_QUANTMLA;
    int threads = cli_default_threads(), force = 0;
    double alpha = 0.5;
    qmla_learn_opts lo_ = qmla_learn_defaults();
    long v;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
        switch (ch) {
        case 'o': out = optarg; break;
        case 'm':
            if (parse_method(optarg, &method))
                return cli_fail("learn", "--method: expected quantmla, rtn, smoothquant or quarot, found \"%s\"", optarg);
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
        case 'P':
            if (strcmp(optarg, "content") && strcmp(optarg, "rope") && strcmp(optarg, "both"))
                return cli_fail("learn", "--path: expected content, rope or both, found \"%s\"", optarg);
            path_arg = optarg;
            break;
        case 'S':
            if (cli_parse_long(optarg, 1, 1000000, &v))
                return cli_fail("learn", "--steps: expected 1..1000000, found \"%s\"", optarg);
            lo_.steps = (size_t)v;
            break;
        case 'r':
            if (cli_parse_double(optarg, &lo_.lr) || !(lo_.lr > 0 && lo_.lr < 10))
                return cli_fail("learn", "--lr: expected a number in (0, 10), found \"%s\"", optarg);
            break;
        case 's':
            if (cli_parse_long(optarg, 0, 0x7fffffffL, &v))
                return cli_fail("learn", "--seed: expected 0..2^31-1, found \"%s\"", optarg);
            lo_.seed = (unsigned long)v;
            break;
        case 'O':
            if (strcmp(optarg, "function") && strcmp(optarg, "recon"))
                return cli_fail("learn", "--objective: expected function or recon, found \"%s\"", optarg);
            lo_.recon = !strcmp(optarg, "recon");
            break;
        case 'L': layers_arg = optarg; break;
        case 't': train_arg = optarg; break;
        case 'H': held_arg = optarg; break;
        case 'A': also = optarg; break;
        case 'f': force = 1; break;
        case 'j':
            if (cli_opt_threads("learn", optarg, &threads))
                return QMLA_EXIT_USAGE;
            break;
        case 'h': help(stdout); return QMLA_EXIT_OK;
        default: help(stderr); return QMLA_EXIT_USAGE;
        }
    }
    if (cli_require_args("learn", argc, "CAPTURE.h5", out, "-o TRANSFORMS.h5"))
        return QMLA_EXIT_USAGE;
    const char *capture = argv[optind];
    if (also && (method != QMLA_TM_QUANTMLA || strcmp(path_arg, "both")))
        return cli_fail("learn", "--also-content needs --method quantmla and --path both");
    if (also && !strcmp(also, out))
        return cli_fail("learn", "--also-content: \"%s\" is also the output (-o)", also);
    qmla_error err;
    qmla_error_clear(&err);
    if (qmla_output_path_check(out, "output file (-o)", &capture, 1, &err))
        return cli_lib_error("learn", &err);
    if (also && qmla_output_path_check(also, "output file (--also-content)", &capture, 1, &err))
        return cli_lib_error("learn", &err);
    /* a file of another kind at -o is refused now, not after the learning */
    if (qmla_transform_file_check_output(out, &err) ||
        (also && qmla_transform_file_check_output(also, &err)))
        return cli_lib_error("learn", &err);
    int *layers = NULL;
    size_t n_layers_sel = 0, n_train = 0, n_held = 0;
    char **train = NULL, *trainbuf = NULL, **held = NULL, *heldbuf = NULL, msg[256];
    if (layers_arg && cli_parse_int_list(layers_arg, &layers, &n_layers_sel, msg, sizeof msg))
        return cli_fail("learn", "--layers: %s", msg);
    if (train_arg && cli_split_list(train_arg, &train, &n_train, &trainbuf)) {
        free(layers);
        return cli_fail("learn", "--train-cells: empty list \"%s\"", train_arg);
    }
    int no_held = held_arg && !strcmp(held_arg, "none");
    if (held_arg && !no_held && cli_split_list(held_arg, &held, &n_held, &heldbuf)) {
        free(layers);
        free(train);
        free(trainbuf);
        return cli_fail("learn", "--heldout-cells: empty list \"%s\"", held_arg);
    }
    for (size_t a = 0; a < n_train; a++)
        for (size_t b = 0; b < n_held; b++)
            if (!strcmp(train[a], held[b])) {
                int r = cli_fail("learn", "cell \"%s\" is in both --train-cells and --heldout-cells", train[a]);
                free(layers); free(train); free(trainbuf); free(held); free(heldbuf);
                return r;
            }
    cli_signals_install();
    qmla_exec ex = qmla_exec_cpu(threads);
    qmla_capture *cap = NULL;
    qmla_transform *ts = NULL, *ts2 = NULL;
    float **gam = NULL;
    double *obj = NULL, *obj2 = NULL;
    size_t nt = 0;
    int rc = QMLA_EXIT_OK;
    qmla_transform_file prev;
    memset(&prev, 0, sizeof prev);
    if (qmla_capture_open(capture, &cap, &err)) {
        rc = cli_lib_error("learn", &err);
        goto done;
    }
    const qmla_capture_config *cf = qmla_capture_get_config(cap);
    qmla_mla_dims d = {(size_t)cf->H, (size_t)cf->D, (size_t)cf->d_c, (size_t)cf->d_n,
                       (size_t)cf->d_r, (size_t)cf->d_v, cf->softmax_scale};
    size_t NL = qmla_capture_n_layers(cap);
    ts = calloc(NL, sizeof *ts);
    gam = calloc(NL, sizeof *gam);
    obj = malloc((NL + 1) * QMLA_TOBJ_N * sizeof *obj);
    if (!ts || !gam || !obj) {
        rc = cli_fail("learn", "out of memory");
        goto done;
    }
    for (size_t i = 0; i < NL * QMLA_TOBJ_N; i++)
        obj[i] = NAN;
    learn_cfg lc;
    memset(&lc, 0, sizeof lc);
    lc.do_content = strcmp(path_arg, "rope") != 0;
    lc.do_rope = strcmp(path_arg, "content") != 0;
    lo_.threads = threads;
    lc.oc = lo_;
    lc.orope = lo_;
    lc.oc.quant.bits = config[1] - '0';
    lc.orope.quant.bits = config[3] - '0';
    qmla_transform_meta m;
    memset(&m, 0, sizeof m);
    m.method = method;
    snprintf(m.config, sizeof m.config, "%s", config);
    m.alpha = method == QMLA_TM_SMOOTHQUANT ? alpha : NAN;
    snprintf(m.capture, sizeof m.capture, "%s", capture);
    snprintf(m.command, sizeof m.command, "%s", cli_command_line());
    snprintf(m.settings, sizeof m.settings,
             "method=%s path=%s objective=%s config=%s steps=%zu lr=%.17g warmup=%.17g seed=%lu alpha=%.17g train=%s heldout=%s layers=%s",
             qmla_tmethod_name(method), path_arg, lo_.recon ? "recon" : "function", config, lo_.steps, lo_.lr, lo_.warmup, lo_.seed, alpha,
             train_arg ? train_arg : "-", held_arg ? held_arg : "-", layers_arg ? layers_arg : "-");
    /* --also-content: the settings --path content would record */
    qmla_transform_meta m2 = m;
    if (also) {
        snprintf(m2.settings, sizeof m2.settings,
                 "method=%s path=content objective=%s config=%s steps=%zu lr=%.17g warmup=%.17g seed=%lu alpha=%.17g train=%s heldout=%s layers=%s",
                 qmla_tmethod_name(method), lo_.recon ? "recon" : "function", config, lo_.steps, lo_.lr, lo_.warmup, lo_.seed, alpha,
                 train_arg ? train_arg : "-", held_arg ? held_arg : "-", layers_arg ? layers_arg : "-");
        ts2 = calloc(NL, sizeof *ts2);
        obj2 = malloc((NL + 1) * QMLA_TOBJ_N * sizeof *obj2);
        if (!ts2 || !obj2) {
            rc = cli_fail("learn", "out of memory");
            goto done;
        }
    }
    /* resume: an incomplete file of the same settings keeps its layers */
    if (method == QMLA_TM_QUANTMLA && !force && access(out, F_OK) == 0) {
        qmla_error e2;
        if (qmla_transform_file_read(out, &prev, &e2) == QMLA_OK) {
            if (strcmp(prev.meta.settings, m.settings)) {
                rc = cli_fail("learn", "%s exists with other settings (%s); --force starts over", out,
                              prev.meta.settings);
                goto done;
            }
            fprintf(stderr, "qmla learn: resuming %s (%zu layers done)\n", out, prev.n);
        }
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
        size_t nc = qmla_capture_n_cells(cap, li), *cidx = calloc(nc + 1, sizeof *cidx),
               *hidx = calloc(nc + 1, sizeof *hidx), ncs = 0, nhs = 0;
        if (!cidx || !hidx) {
            free(cidx);
            free(hidx);
            rc = cli_fail("learn", "out of memory");
            goto done;
        }
        if (!train) {
            cidx[ncs++] = 0;
        } else {
            for (size_t k = 0; k < n_train; k++) {
                size_t ci;
                if (!qmla_capture_find_cell(cap, li, train[k], &ci)) {
                    free(cidx);
                    free(hidx);
                    rc = cli_fail("learn", "--train-cells: layer %d has no cell \"%s\"", layer, train[k]);
                    goto done;
                }
                cidx[ncs++] = ci;
            }
        }
        if (held) {
            for (size_t k = 0; k < n_held; k++) {
                size_t ci;
                if (!qmla_capture_find_cell(cap, li, held[k], &ci)) {
                    free(cidx);
                    free(hidx);
                    rc = cli_fail("learn", "--heldout-cells: layer %d has no cell \"%s\"", layer, held[k]);
                    goto done;
                }
                hidx[nhs++] = ci;
            }
        } else {
            for (size_t ci = 0; ci < nc; ci++) {
                int in = 0;
                for (size_t k = 0; k < ncs; k++)
                    in |= cidx[k] == ci;
                if (!in)
                    hidx[nhs++] = ci;
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
        const float *pg = NULL;
        const qmla_transform *pt = prev.n ? qmla_transform_file_layer(&prev, layer, &pg) : NULL;
        if (!st && pt && pt->d_c == ts[nt].d_c && pt->d_r == ts[nt].d_r) {
            /* resumed layer */
            size_t pi = (size_t)(pt - prev.t);
            memcpy(ts[nt].rot, pt->rot, pt->d_c * pt->d_c * sizeof(double));
            memcpy(ts[nt].cscale, pt->cscale, pt->d_c * sizeof(double));
            memcpy(ts[nt].angle, pt->angle, pt->d_r / 2 * sizeof(double));
            memcpy(ts[nt].rscale, pt->rscale, pt->d_r / 2 * sizeof(double));
            memcpy(gam[nt], pg, pt->d_c * sizeof(float));
            memcpy(obj + nt * QMLA_TOBJ_N, prev.obj + pi * QMLA_TOBJ_N, QMLA_TOBJ_N * sizeof(double));
            ts[nt].layer = layer;
            fprintf(stderr, "qmla learn: layer %d: kept from %s\n", layer, out);
        } else if (!st && method != QMLA_TM_QUANTMLA) {
            st = qmla_tf_baseline(&ex, cap, li, cidx, ncs, method, alpha, &ts[nt], gam[nt], &err);
            if (!st)
                fprintf(stderr, "qmla learn: layer %d: %s calibrated on %s\n", layer,
                        qmla_tmethod_name(method), cells_used);
        } else if (!st) {
            qmla_layer L;
            memset(&L, 0, sizeof L);
            bank_data tb, hb;
            memset(&tb, 0, sizeof tb);
            memset(&hb, 0, sizeof hb);
            st = qmla_capture_load_layer(cap, li, &L, &err);
            if (no_held)
                nhs = 0;
            int split = nhs == 0 && !no_held; /* no other cells: split the sequences */
            if (!st)
                st = bank_load(cap, li, cidx, ncs, split ? 1 : 0, &tb, &err);
            if (!st && (split || nhs))
                st = bank_load(cap, li, split ? cidx : hidx, split ? ncs : nhs, split ? 2 : 0, &hb, &err);
            if (!st && tb.bank.n == 0)
                st = qmla_error_set(&err, QMLA_EINVAL, "layer %d: the train bank has no sequence", layer);
            if (!st) {
                memcpy(gam[nt], L.kv_norm, (size_t)cf->d_c * sizeof(float));
                ts[nt].layer = layer;
                st = qmla_transform_set_identity(&ts[nt], L.kv_norm, &err);
            }
            qmla_mla_weights w = {L.w_uk, L.w_uv, L.w_o};
            if (!st && lc.do_content)
                st = run_path(QMLA_LEARN_CONTENT, &lc.oc, &d, &w, L.kv_norm, cf->rope_pairing, &tb.bank,
                              &hb.bank, layer, &ts[nt], obj + nt * QMLA_TOBJ_N, &err);
            if (!st && lc.do_rope)
                st = run_path(QMLA_LEARN_ROPE, &lc.orope, &d, &w, L.kv_norm, cf->rope_pairing, &tb.bank,
                              &hb.bank, layer, &ts[nt], obj + nt * QMLA_TOBJ_N, &err);
            bank_free(&tb);
            bank_free(&hb);
            qmla_layer_free(&L);
        }
        free(cidx);
        free(hidx);
        if (!st && also) { /* the content path of this layer, RoPE identity */
            st = qmla_transform_alloc((size_t)cf->d_c, (size_t)cf->d_r, cf->rope_pairing, &ts2[nt], &err);
            if (!st) {
                memcpy(ts2[nt].rot, ts[nt].rot, (size_t)cf->d_c * cf->d_c * sizeof(double));
                memcpy(ts2[nt].cscale, ts[nt].cscale, (size_t)cf->d_c * sizeof(double));
                for (size_t i = 0; i < (size_t)cf->d_r / 2; i++) {
                    ts2[nt].angle[i] = 0.0;
                    ts2[nt].rscale[i] = 1.0;
                }
                ts2[nt].layer = ts[nt].layer;
                memcpy(obj2 + nt * QMLA_TOBJ_N, obj + nt * QMLA_TOBJ_N, QMLA_TOBJ_N * sizeof(double));
                obj2[nt * QMLA_TOBJ_N + QMLA_TOBJ_P_INIT] = NAN;
                obj2[nt * QMLA_TOBJ_N + QMLA_TOBJ_P_BEST] = NAN;
            }
        }
        nt++;
        if (st) {
            rc = cli_lib_error("learn", &err);
            goto done;
        }
        if (method == QMLA_TM_QUANTMLA) { /* checkpoint after every layer */
            snprintf(m.train_cells, sizeof m.train_cells, "%s", cells_used);
            m.complete = 0;
            if (qmla_transform_file_write(out, &m, ts, (const float *const *)gam, obj, nt, &err)) {
                rc = cli_lib_error("learn", &err);
                goto done;
            }
            snprintf(m2.train_cells, sizeof m2.train_cells, "%s", cells_used);
            m2.complete = 0;
            if (also && qmla_transform_file_write(also, &m2, ts2, (const float *const *)gam, obj2, nt, &err)) {
                rc = cli_lib_error("learn", &err);
                goto done;
            }
        }
    }
    if (nt == 0) {
        rc = cli_fail("learn", "--layers: no selected layer is in the capture");
        goto done;
    }
    snprintf(m.train_cells, sizeof m.train_cells, "%s", cells_used);
    m.complete = 1;
    if (qmla_transform_file_write(out, &m, ts, (const float *const *)gam, obj, nt, &err)) {
        rc = cli_lib_error("learn", &err);
        goto done;
    }
    printf("wrote %s: %s, %zu layers\n", out, qmla_tmethod_name(method), nt);
    if (also) {
        snprintf(m2.train_cells, sizeof m2.train_cells, "%s", cells_used);
        m2.complete = 1;
        if (qmla_transform_file_write(also, &m2, ts2, (const float *const *)gam, obj2, nt, &err)) {
            rc = cli_lib_error("learn", &err);
            goto done;
        }
        printf("wrote %s: %s (content path only), %zu layers\n", also, qmla_tmethod_name(method), nt);
    }
done:
    for (size_t i = 0; ts && i < NL; i++) {
        qmla_transform_free(&ts[i]);
        if (ts2)
            qmla_transform_free(&ts2[i]);
    }
    free(ts2);
    free(obj2);
    for (size_t i = 0; gam && i < NL; i++)
        free(gam[i]);
    free(ts);
    free(gam);
    free(obj);
    free(layers);
    free(train);
    free(trainbuf);
    free(held);
    free(heldbuf);
    qmla_transform_file_free(&prev);
    qmla_capture_close(cap);
    if (rc == QMLA_EXIT_USAGE && cli_interrupted())
        rc = QMLA_EXIT_INTERRUPTED;
    return rc;
}
