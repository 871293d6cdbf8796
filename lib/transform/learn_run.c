/* learn_run.c — the learn driver (qmla/learn.h, `qmla learn`): per-layer
 * cache transforms in the transforms format (docs/transforms-format.md).
 * The baselines of docs/math.md §7 are calibrated on the train cells
 * (qmla_tf_baseline, the method table of qmla/tmethod.h); QuantMLA (§8) is
 * learned one path at a time on a train bank with the best step chosen on a
 * disjoint held-out bank, the file rewritten after every layer so that a
 * rerun of the same settings resumes. */
#define _POSIX_C_SOURCE 200809L
#include "qmla/learn.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qmla/capture.h"
#include "qmla/hash.h"
#include "qmla/outpath.h"
#include "qmla/tfeval.h"
#include "transform/run.h"

qmla_learn_run_opts qmla_learn_run_defaults(void)
{
    qmla_learn_run_opts o;
    memset(&o, 0, sizeof o);
    o.method = qmla_tmethod_quantmla;
    o.path = "both";
    o.config = "C4R4";
    o.learn = qmla_learn_defaults();
    o.alpha = 0.5;
    return o;
}

static void note(const qmla_learn_run_opts *o, const char *fmt, ...)
{
    if (!o->note)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    o->note(o->note_ctx, line);
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

/* The clean attention pass of every sequence of b (the learner's reference):
 * a float32 overflow is refused naming the capture, layer, cell, sequence. */
static int bank_check_clean(qmla_capture *cap, size_t li, const qmla_mla_dims *d,
                            const qmla_mla_weights *w, const bank_data *b, qmla_error *err)
{
    qmla_exec ex = qmla_exec_cpu(1);
    for (size_t k = 0, n = 0; k < b->n_cells; k++) {
        const qmla_cell *c = &b->cells[k];
        qmla_attn_state as;
        int st = qmla_attn_state_alloc(d, c->T, 0, &as, err);
        for (size_t s = 0; !st && s < c->N; s++, n++)
            if ((st = qmla_attn_state_forward(&ex, d, c->T, w, c->q_nope + s * d->H * c->T * d->d_n,
                                              c->q_rope + s * d->H * c->T * d->d_r,
                                              c->c_kv + s * c->T * d->d_c, c->k_rope + s * c->T * d->d_r,
                                              &as, err)))
                qmla_error_prefix(err, "%s: layer %d, cell %s, sequence %zu: ", qmla_capture_path(cap),
                                  qmla_capture_layer_index(cap, li), c->name, s);
        qmla_attn_state_free(&as);
        if (st)
            return st;
    }
    return QMLA_OK;
}

/* part 1: the train part of a split (all but the last quarter of every
 * cell's sequences), 2: the held-out part, 0: every sequence. */
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
        if (part == 1)
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

static int run_path(qmla_learn_path path, const qmla_learn_opts *lo, const qmla_mla_dims *d,
                    const qmla_mla_weights *w, const float *gamma, qmla_rope_pairing pp,
                    const qmla_learn_bank *tr, const qmla_learn_bank *he, int layer,
                    qmla_transform *t, double *obj, const qmla_learn_run_opts *o,
                    qmla_learn_run_result *r, qmla_error *err)
{
    /* the learner is the engine's (qmla/engine.h) */
    const qmla_learn_ops *eng = qmla_engine_learn(o->engine);
    void *l = NULL;
    double t0 = qmla_monotonic_s();
    int st = eng->alloc(path, d, w, gamma, pp, tr, he, lo, &l, err);
    double alpha = 0;
    if (!st)
        st = eng->init(l, &alpha, err);
    for (size_t k = 0; !st && k < lo->steps; k++) {
        if (o->progress && o->progress(o->progress_ctx, k, lo->steps, 0)) {
            r->stopped = 1;
            st = qmla_error_set(err, QMLA_EINVAL, "stopped (layers done so far are kept)");
            break;
        }
        st = eng->iterate(l, err);
    }
    if (!st)
        st = eng->finish(l, err);
    if (!st)
        st = eng->get(l, t, err);
    if (!st) {
        qmla_learn_state s = eng->state(l);
        const char *nm = path == QMLA_LEARN_CONTENT ? "content" : "rope";
        note(o,
             "layer %d %-7s steps %zu  init α %-4g  %s %.4e -> best %.4e (step %zu)  train %.4e  %.1f s "
             "(fwd %.1f, bwd %.1f, qdq %.1f, cayley %.1f)",
             layer, nm, s.step, alpha, he && he->n ? "held-out" : "selected on train", s.init_obj,
             s.best_held, s.best_step, s.train_obj, qmla_monotonic_s() - t0, s.t_forward, s.t_backward,
             s.t_qdq, s.t_cayley);
        obj[path == QMLA_LEARN_CONTENT ? QMLA_TOBJ_C_INIT : QMLA_TOBJ_P_INIT] = s.init_obj;
        obj[path == QMLA_LEARN_CONTENT ? QMLA_TOBJ_C_BEST : QMLA_TOBJ_P_BEST] = s.best_held;
    }
    eng->free(l);
    return st;
}

static const qmla_tmethod_type *method_of(const qmla_learn_run_opts *o)
{
    return o->method ? o->method : qmla_tmethod_quantmla;
}

int qmla_learn_run_check(const char *capture, const char *out,
                         const qmla_learn_run_opts *o, qmla_learn_run_result *r,
                         qmla_error *err)
{
    qmla_learn_run_result dummy;
    if (!r)
        r = &dummy;
    memset(r, 0, sizeof *r);
    const char *also = o->also_content;
    const char *path = o->path ? o->path : "both";
    if (!out || !capture)
        return qmla_refuse(&r->refusal, err, "expected a capture and an output file");
    if (also && (!method_of(o)->learned || strcmp(path, "both")))
        return qmla_refuse(&r->refusal, err, "--also-content needs --method quantmla and --path both");
    if (also && !strcmp(also, out))
        return qmla_refuse(&r->refusal, err, "--also-content: \"%s\" is also the output (-o)", also);
    if (o->learn.attn_f64 && (!method_of(o)->learned || o->learn.recon))
        return qmla_refuse(&r->refusal, err,
                           "--attn-precision f64: expected --method quantmla with --objective "
                           "function (the attention it computes), found --method %s%s",
                           method_of(o)->name, o->learn.recon ? " --objective recon" : "");
    if (qmla_output_path_check(out, "output file (-o)", &capture, 1, err))
        return err->status;
    if (also && qmla_output_path_check(also, "output file (--also-content)", &capture, 1, err))
        return err->status;
    /* a file of another kind at -o is refused now, not after the learning */
    if (qmla_transform_file_check_output(out, err) ||
        (also && qmla_transform_file_check_output(also, err)))
        return err->status;
    return QMLA_OK;
}

int qmla_learn_run(const char *capture, const char *out, const qmla_learn_run_opts *o,
                   qmla_learn_run_result *r, qmla_error *err)
{
    qmla_learn_run_result dummy;
    if (!r)
        r = &dummy;
    int st = qmla_learn_run_check(capture, out, o, r, err);
    if (st)
        return st;
    const qmla_tmethod_type *method = method_of(o);
    const char *path_arg = o->path ? o->path : "both", *config = o->config ? o->config : "C4R4";
    const char *also = o->also_content;
    if (strcmp(path_arg, "content") && strcmp(path_arg, "rope") && strcmp(path_arg, "both"))
        return qmla_refuse(&r->refusal, err, "--path: expected content, rope or both, found \"%s\"", path_arg);
    if (strcmp(config, "C4R4") && strcmp(config, "C2R4"))
        return qmla_refuse(&r->refusal, err, "--config: expected C4R4 or C2R4, found \"%s\"", config);
    if (!(o->alpha >= 0 && o->alpha <= 1))
        return qmla_refuse(&r->refusal, err, "--alpha: expected a number in [0, 1], found %g", o->alpha);
    const char *const *train = o->train, *const *held = o->no_held ? NULL : o->held;
    size_t n_train = train ? o->n_train : 0, n_held = held ? o->n_held : 0;
    const int no_held = o->no_held;
    for (size_t a = 0; a < n_train; a++)
        for (size_t b = 0; b < n_held; b++)
            if (!strcmp(train[a], held[b]))
                return qmla_refuse(&r->refusal, err, "cell \"%s\" is in both --train-cells and --heldout-cells",
                              train[a]);
    const int threads = o->learn.threads;
    const double alpha = o->alpha;
    qmla_learn_opts lo_ = o->learn;
    qmla_exec ex = qmla_exec_cpu(threads);
    qmla_capture *cap = NULL;
    qmla_transform *ts = NULL, *ts2 = NULL;
    float **gam = NULL;
    double *obj = NULL, *obj2 = NULL;
    size_t nt = 0, NL = 0;
    qmla_transform_file prev;
    memset(&prev, 0, sizeof prev);
    st = qmla_capture_open(capture, &cap, err);
    if (st)
        goto done;
    const qmla_capture_config *cf = qmla_capture_get_config(cap);
    qmla_mla_dims d = {(size_t)cf->H, (size_t)cf->D, (size_t)cf->d_c, (size_t)cf->d_n,
                       (size_t)cf->d_r, (size_t)cf->d_v, cf->softmax_scale};
    NL = qmla_capture_n_layers(cap);
    ts = calloc(NL, sizeof *ts);
    gam = calloc(NL, sizeof *gam);
    obj = malloc((NL + 1) * QMLA_TOBJ_N * sizeof *obj);
    if (!ts || !gam || !obj) {
        st = qmla_refuse(&r->refusal, err, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < NL * QMLA_TOBJ_N; i++)
        obj[i] = NAN;
    const int do_content = strcmp(path_arg, "rope") != 0;
    const int do_rope = strcmp(path_arg, "content") != 0;
    qmla_learn_opts oc = lo_, orope = lo_;
    oc.quant.bits = config[1] - '0';
    orope.quant.bits = config[3] - '0';
    qmla_transform_meta m;
    memset(&m, 0, sizeof m);
    m.method = method->id;
    snprintf(m.config, sizeof m.config, "%s", config);
    m.alpha = method->uses_alpha ? alpha : NAN;
    snprintf(m.capture, sizeof m.capture, "%s", capture);
    if ((st = qmla_sha256_file(capture, m.capture_sha256, err))) /* the capture's identity */
        goto done;
    snprintf(m.command, sizeof m.command, "%s", o->command_line ? o->command_line : "");
    const char *tt = o->train_text ? o->train_text : "-", *ht = o->held_text ? o->held_text : "-",
               *lt = o->layers_text ? o->layers_text : "-";
    /* attn_f64 is a setting (another trajectory); f32 adds nothing, so the
     * files of float32 runs keep their settings string */
    const char *prec = lo_.attn_f64 ? " attn_precision=f64" : "";
    snprintf(m.settings, sizeof m.settings,
             "method=%s path=%s objective=%s config=%s steps=%zu lr=%.17g warmup=%.17g seed=%lu alpha=%.17g train=%s heldout=%s layers=%s%s",
             method->name, path_arg, lo_.recon ? "recon" : "function", config, lo_.steps, lo_.lr,
             lo_.warmup, lo_.seed, alpha, tt, ht, lt, prec);
    /* --also-content: the settings --path content would record */
    qmla_transform_meta m2 = m;
    if (also) {
        snprintf(m2.settings, sizeof m2.settings,
                 "method=%s path=content objective=%s config=%s steps=%zu lr=%.17g warmup=%.17g seed=%lu alpha=%.17g train=%s heldout=%s layers=%s%s",
                 method->name, lo_.recon ? "recon" : "function", config, lo_.steps, lo_.lr,
                 lo_.warmup, lo_.seed, alpha, tt, ht, lt, prec);
        ts2 = calloc(NL, sizeof *ts2);
        obj2 = malloc((NL + 1) * QMLA_TOBJ_N * sizeof *obj2);
        if (!ts2 || !obj2) {
            st = qmla_refuse(&r->refusal, err, "out of memory");
            goto done;
        }
    }
    /* resume: an incomplete file of the same settings keeps its layers */
    if (method->learned && !o->force && access(out, F_OK) == 0) {
        qmla_error e2;
        if (qmla_transform_file_read(out, &prev, &e2) == QMLA_OK) {
            if (strcmp(prev.meta.settings, m.settings)) {
                st = qmla_refuse(&r->refusal, err, "%s exists with other settings (%s); --force starts over", out,
                            prev.meta.settings);
                goto done;
            }
            if (strcmp(prev.meta.capture_sha256, m.capture_sha256)) {
                st = qmla_refuse(&r->refusal, err, "%s was learned on another capture (capture_sha256 %s), "
                                 "expected this capture's %s (%s); --force starts over", out,
                                 prev.meta.capture_sha256[0] ? prev.meta.capture_sha256 : "not recorded",
                                 m.capture_sha256, capture);
                goto done;
            }
            if (prev.meta.complete) { /* the same key, whole: kept as it is */
                for (size_t i = 0; i < prev.n; i++)
                    note(o, "layer %d: kept from %s", prev.t[i].layer, out);
                note(o, "%s is complete for this capture and settings: kept as it is", out);
                r->n_layers = prev.n;
                goto done;
            }
            note(o, "resuming %s (%zu layers done)", out, prev.n);
        }
    }
    char cells_used[256] = "";
    for (size_t li = 0; li < NL; li++) {
        int layer = qmla_capture_layer_index(cap, li);
        if (!qmla_tf_layer_wanted(o->layers, o->n_layers, layer))
            continue;
        size_t nc = qmla_capture_n_cells(cap, li), *cidx = calloc(nc + 1, sizeof *cidx),
               *hidx = calloc(nc + 1, sizeof *hidx), ncs = 0, nhs = 0;
        if (!cidx || !hidx) {
            free(cidx);
            free(hidx);
            st = qmla_refuse(&r->refusal, err, "out of memory");
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
                    st = qmla_refuse(&r->refusal, err, "--train-cells: layer %d has no cell \"%s\"", layer, train[k]);
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
                    st = qmla_refuse(&r->refusal, err, "--heldout-cells: layer %d has no cell \"%s\"", layer, held[k]);
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
        st = gam[nt] ? qmla_transform_alloc((size_t)cf->d_c, (size_t)cf->d_r, cf->rope_pairing,
                                            &ts[nt], err)
                     : qmla_error_set(err, QMLA_ENOMEM, "out of memory");
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
            note(o, "layer %d: kept from %s", layer, out);
        } else if (!st && !method->learned) {
            st = qmla_tf_baseline(&ex, cap, li, cidx, ncs, method->id, alpha, &ts[nt], gam[nt], err);
            if (!st)
                note(o, "layer %d: %s calibrated on %s", layer, method->name, cells_used);
        } else if (!st) {
            qmla_layer L;
            memset(&L, 0, sizeof L);
            bank_data tb, hb;
            memset(&tb, 0, sizeof tb);
            memset(&hb, 0, sizeof hb);
            st = qmla_capture_load_layer(cap, li, &L, err);
            if (no_held)
                nhs = 0;
            int split = nhs == 0 && !no_held; /* no other cells: split the sequences */
            if (!st)
                st = bank_load(cap, li, cidx, ncs, split ? 1 : 0, &tb, err);
            if (!st && (split || nhs))
                st = bank_load(cap, li, split ? cidx : hidx, split ? ncs : nhs, split ? 2 : 0, &hb, err);
            qmla_mla_weights w = {L.w_uk, L.w_uv, L.w_o};
            if (!st)
                st = bank_check_clean(cap, li, &d, &w, &tb, err);
            if (!st && hb.n_cells && !split) /* a split holds the train cells */
                st = bank_check_clean(cap, li, &d, &w, &hb, err);
            if (!st && tb.bank.n == 0)
                st = qmla_error_set(err, QMLA_EINVAL, "layer %d: the train bank has no sequence", layer);
            if (!st) {
                memcpy(gam[nt], L.kv_norm, (size_t)cf->d_c * sizeof(float));
                ts[nt].layer = layer;
                st = qmla_transform_set_identity(&ts[nt], L.kv_norm, err);
            }
            if (!st && do_content)
                st = run_path(QMLA_LEARN_CONTENT, &oc, &d, &w, L.kv_norm, cf->rope_pairing, &tb.bank,
                              &hb.bank, layer, &ts[nt], obj + nt * QMLA_TOBJ_N, o, r, err);
            if (!st && do_rope)
                st = run_path(QMLA_LEARN_ROPE, &orope, &d, &w, L.kv_norm, cf->rope_pairing, &tb.bank,
                              &hb.bank, layer, &ts[nt], obj + nt * QMLA_TOBJ_N, o, r, err);
            bank_free(&tb);
            bank_free(&hb);
            qmla_layer_free(&L);
        }
        free(cidx);
        free(hidx);
        if (!st && also) { /* the content path of this layer, RoPE identity */
            st = qmla_transform_alloc((size_t)cf->d_c, (size_t)cf->d_r, cf->rope_pairing, &ts2[nt], err);
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
        if (st)
            goto done;
        if (method->learned) { /* checkpoint after every layer */
            snprintf(m.train_cells, sizeof m.train_cells, "%s", cells_used);
            m.complete = 0;
            st = qmla_transform_file_write_engine(out, &m, o->engine, ts, (const float *const *)gam, obj, nt, err);
            if (st)
                goto done;
            snprintf(m2.train_cells, sizeof m2.train_cells, "%s", cells_used);
            m2.complete = 0;
            if (also) {
                st = qmla_transform_file_write_engine(also, &m2, o->engine, ts2, (const float *const *)gam, obj2, nt, err);
                if (st)
                    goto done;
            }
        }
    }
    if (nt == 0) {
        st = qmla_refuse(&r->refusal, err, "--layers: no selected layer is in the capture");
        goto done;
    }
    snprintf(m.train_cells, sizeof m.train_cells, "%s", cells_used);
    m.complete = 1;
    st = qmla_transform_file_write_engine(out, &m, o->engine, ts, (const float *const *)gam, obj, nt, err);
    if (st)
        goto done;
    r->wrote = 1;
    r->n_layers = nt;
    if (also) {
        snprintf(m2.train_cells, sizeof m2.train_cells, "%s", cells_used);
        m2.complete = 1;
        st = qmla_transform_file_write_engine(also, &m2, o->engine, ts2, (const float *const *)gam, obj2, nt, err);
        if (st)
            goto done;
        r->wrote_also = 1;
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
    qmla_transform_file_free(&prev);
    qmla_capture_close(cap);
    return st;
}
