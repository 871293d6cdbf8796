/* allocate_run.c — the allocate driver (include/qmla/allocate.h, `qmla
 * allocate`, docs/allocate.md): per layer, the measured cache error of every
 * candidate width of each path on the capture and its predicted output
 * NMSE through the exact token sensitivities of the operator model
 * (lib/operator/jvp.c), then the exact knapsack (solve.c) and group
 * /allocate (lib/cache/allocation.c). */
#include "qmla/allocate.h"
#include "qmla/attention.h"
#include "qmla/capture.h"
#include "qmla/exec.h"
#include "qmla/hash.h"
#include "qmla/jvp.h"
#include "qmla/norms.h"
#include "qmla/outpath.h"
#include "qmla/quant.h"
#include "qmla/text.h"
#include "qmla/tfeval.h"
#include "qmla/transform.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NW 4 /* widths of the quantizer: 2, 3, 4, 8 */
static const int widths[NW] = {2, 3, 4, 8};
static int width_index(int b)
{
    for (int i = 0; i < NW; i++)
        if (widths[i] == b)
            return i;
    return -1;
}

void qmla_alloc_result_free(qmla_alloc_result *r)
{
    if (!r)
        return;
    qmla_allocation_free(&r->a);
    free(r->cand);
    memset(r, 0, sizeof *r);
}

/* Per-layer measurement: for each path and width, the cache NMSE and the
 * predicted output NMSE, means over cells of the means over sequences. */
typedef struct layer_meas {
    double nu[2][NW], pred[2][NW];
} layer_meas;

typedef struct seq_ws {
    qmla_attn_state s0;
    qmla_sens_ws sens;
    double *trc, *trr; /* [T] */
    float *Xe, *work;  /* [T, max(d_c, d_r)] */
} seq_ws;

static void seq_ws_free(seq_ws *w)
{
    qmla_attn_state_free(&w->s0);
    qmla_sens_ws_free(&w->sens);
    free(w->trc);
    free(w->trr);
    free(w->Xe);
    free(w->work);
    memset(w, 0, sizeof *w);
}

static int seq_ws_alloc(const qmla_mla_dims *d, size_t T, int threads, seq_ws *w,
                        qmla_error *err)
{
    memset(w, 0, sizeof *w);
    const size_t wd = d->d_c > d->d_r ? d->d_c : d->d_r;
    int st = qmla_attn_state_alloc(d, T, 0, &w->s0, err);
    if (!st)
        st = qmla_sens_ws_alloc(d, T, threads, &w->sens, err);
    if (st) {
        seq_ws_free(w);
        return st;
    }
    w->trc = malloc(T * sizeof *w->trc);
    w->trr = malloc(T * sizeof *w->trr);
    w->Xe = malloc(T * wd * sizeof *w->Xe);
    w->work = malloc(T * wd * sizeof *w->work);
    if (!w->trc || !w->trr || !w->Xe || !w->work) {
        seq_ws_free(w);
        return qmla_error_set(err, QMLA_ENOMEM, "allocate: out of memory (T %zu)", T);
    }
    return QMLA_OK;
}

/* sum_t ||Xe_t - X_t||^2 tr_t and ||Xe - X||^2 */
static void path_error(const float *X, const float *Xe, size_t T, size_t width,
                       const double *tr, double *weighted, double *ee)
{
    double a = 0.0, b = 0.0;
    for (size_t t = 0; t < T; t++) {
        double e = 0.0;
        for (size_t j = 0; j < width; j++) {
            const double d = (double)Xe[t * width + j] - (double)X[t * width + j];
            e += d * d;
        }
        a += e * tr[t];
        b += e;
    }
    *weighted = a;
    *ee = b;
}

typedef struct run_ctx {
    const qmla_alloc_opts *o;
    qmla_capture *cap;
    qmla_mla_dims d;
    const qmla_capture_config *cf;
    qmla_exec ex;
    size_t sink, local;
    int want[2][NW]; /* widths some candidate uses, per path */
} run_ctx;

static int measure_layer(run_ctx *c, size_t li, const qmla_transform *t, const float *gamma,
                         layer_meas *m, int *refusal, qmla_error *err)
{
    const qmla_mla_dims *d = &c->d;
    memset(m, 0, sizeof *m);
    qmla_layer L;
    memset(&L, 0, sizeof L);
    qmla_sens_layer SL;
    memset(&SL, 0, sizeof SL);
    int st = qmla_capture_load_layer(c->cap, li, &L, err);
    if (st)
        return st;
    for (size_t j = 0; j < d->d_c; j++)
        if (fabs((double)gamma[j] - L.kv_norm[j]) > 1e-6 * fabs((double)L.kv_norm[j]) + 1e-30) {
            st = qmla_refuse(refusal, err, "layer %d: the transform's content/gamma[%zu] = %.9g, "
                             "expected the capture's kv_norm %.9g (transforms made for another "
                             "model?)", L.layer, j, (double)gamma[j], (double)L.kv_norm[j]);
            qmla_layer_free(&L);
            return st;
        }
    const qmla_mla_weights w = {L.w_uk, L.w_uv, L.w_o};
    st = qmla_sens_layer_init(&c->ex, d, &w, &SL, err);
    const qmla_attn_ops *attn = qmla_engine_attn(c->o->engine);
    const qmla_jvp_ops *jvp = qmla_engine_jvp(c->o->engine);
    const size_t nc = qmla_capture_n_cells(c->cap, li);
    size_t used = 0;
    for (size_t ci = 0; ci < nc && !st; ci++) {
        const char *cn = qmla_capture_cell_name(c->cap, li, ci);
        if (c->o->cells) {
            int want = 0;
            for (size_t k = 0; k < c->o->n_cells; k++)
                want |= !strcmp(c->o->cells[k], cn);
            if (!want)
                continue;
        }
        qmla_cell cell;
        memset(&cell, 0, sizeof cell);
        seq_ws ws;
        memset(&ws, 0, sizeof ws);
        st = qmla_capture_load_cell_parts(c->cap, li, ci, 0, &cell, err);
        if (!st)
            st = seq_ws_alloc(d, cell.T, qmla_exec_threads(&c->ex), &ws, err);
        layer_meas cm;
        memset(&cm, 0, sizeof cm);
        const size_t T = cell.T;
        for (size_t n = 0; n < cell.N && !st; n++) {
            const float *C = cell.c_kv + n * T * d->d_c, *K = cell.k_rope + n * T * d->d_r;
            st = attn->state_forward(&c->ex, d, T, &w, cell.q_nope + n * d->H * T * d->d_n,
                                     cell.q_rope + n * d->H * T * d->d_r, C, K, &ws.s0, err);
            if (!st)
                st = jvp->sens_exact(&c->ex, d, T, &w, &SL, &ws.s0, C, &ws.sens, ws.trc, ws.trr,
                                     err);
            if (st)
                break;
            const double yy = qmla_sumsq(ws.s0.Y, T * d->D);
            const double xx[2] = {qmla_sumsq(C, T * d->d_c), qmla_sumsq(K, T * d->d_r)};
            for (int path = 0; path < 2 && !st; path++)
                for (int k = 0; k < NW && !st; k++) {
                    if (!c->want[path][k])
                        continue;
                    qmla_quant_params p = qmla_quant_defaults();
                    p.bits = widths[k];
                    p.group = 64;
                    if (path == 0)
                        st = qmla_transform_effective_content(&c->ex, t, gamma, &p, C, T, c->sink,
                                                              c->local, ws.work, ws.Xe, err);
                    else
                        st = qmla_transform_effective_rope(t, &p, K, T, c->sink, c->local,
                                                           ws.work, ws.Xe, err);
                    if (st)
                        break;
                    double wsum, ee;
                    path_error(path ? K : C, ws.Xe, T, path ? d->d_r : d->d_c,
                               path ? ws.trr : ws.trc, &wsum, &ee);
                    cm.nu[path][k] += xx[path] > 0 ? ee / xx[path] : 0.0;
                    cm.pred[path][k] += yy > 0 ? wsum / yy : 0.0;
                }
        }
        if (st)
            qmla_error_prefix(err, "%s: layer %d, cell %s: ", qmla_capture_path(c->cap), L.layer,
                              cn);
        else if (cell.N) {
            for (int path = 0; path < 2; path++)
                for (int k = 0; k < NW; k++) {
                    m->nu[path][k] += cm.nu[path][k] / (double)cell.N;
                    m->pred[path][k] += cm.pred[path][k] / (double)cell.N;
                }
            used++;
        }
        seq_ws_free(&ws);
        qmla_cell_free(&cell);
    }
    if (!st && !used)
        st = qmla_refuse(refusal, err, "layer %d: no cell selected (--cells)", L.layer);
    if (!st)
        for (int path = 0; path < 2; path++)
            for (int k = 0; k < NW; k++) {
                m->nu[path][k] /= (double)used;
                m->pred[path][k] /= (double)used;
            }
    qmla_sens_layer_free(&SL);
    qmla_layer_free(&L);
    return st;
}

/* The candidates: names, bits and which widths each path needs. */
static int parse_candidates(const char *list, char names[][16], int *cb, int *rb, size_t *n,
                            int want[2][NW], int *refusal, qmla_error *err)
{
    char **items = NULL, *buf = NULL;
    size_t ni = 0;
    int st = QMLA_OK;
    if (qmla_split_list(list, &items, &ni, &buf))
        st = qmla_refuse(refusal, err, "--candidates \"%s\": expected a comma-separated list of "
                         "C<c>R<r>", list);
    if (!st && ni > QMLA_ALLOC_MAX_CANDIDATES)
        st = qmla_refuse(refusal, err, "--candidates: %zu configs, expected at most %d (each "
                         "once)", ni, QMLA_ALLOC_MAX_CANDIDATES);
    for (size_t k = 0; k < ni && !st; k++) {
        qmla_error e2;
        if (qmla_alloc_parse_config(items[k], &cb[k], &rb[k], &e2)) {
            st = qmla_refuse(refusal, err, "--candidates: %s", e2.msg);
            break;
        }
        for (size_t j = 0; j < k; j++)
            if (cb[j] == cb[k] && rb[j] == rb[k])
                st = qmla_refuse(refusal, err, "--candidates: %s given twice", items[k]);
        snprintf(names[k], 16, "C%dR%d", cb[k], rb[k]);
        want[0][width_index(cb[k])] = 1;
        want[1][width_index(rb[k])] = 1;
    }
    *n = ni;
    free(items);
    free(buf);
    return st;
}

static double cpu_s(void) { return (double)clock() / CLOCKS_PER_SEC; }

int qmla_alloc_run(const char *capture, const char *out, const qmla_alloc_opts *o,
                   qmla_alloc_result *r, qmla_error *err)
{
    memset(r, 0, sizeof *r);
    if (!capture || !out)
        return qmla_refuse(&r->refusal, err, "expected a capture and an output file (-o)");
    if (!o->budget)
        return qmla_refuse(&r->refusal, err, "missing --budget B (bytes per token, a config "
                           "such as C4R4, or <b>bits)");
    const char *policy = o->policy ? o->policy : "none";
    const char *cands = o->candidates ? o->candidates : QMLA_ALLOC_DEFAULT_CANDIDATES;
    const long context = o->context > 0 ? o->context : 4096;
    run_ctx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    if (qmla_tf_eval_policy_parse(policy, &c.sink, &c.local))
        return qmla_refuse(&r->refusal, err, "--policy: expected sinkS/localW (e.g. "
                           "sink4/local128) or none, found \"%s\"", policy);
    char names[QMLA_ALLOC_MAX_CANDIDATES][16];
    int cb[QMLA_ALLOC_MAX_CANDIDATES], rb[QMLA_ALLOC_MAX_CANDIDATES];
    size_t K = 0;
    int st = parse_candidates(cands, names, cb, rb, &K, c.want, &r->refusal, err);
    if (st)
        return st;
    const char *inputs[2] = {capture, o->transforms};
    if (qmla_output_path_check(out, "output file (-o)", inputs, o->transforms ? 2 : 1, err))
        return err->status;
    qmla_transform_file tf;
    memset(&tf, 0, sizeof tf);
    char sha[65] = "", tsha[65] = "";
    if (o->transforms) {
        if ((st = qmla_transform_file_read(o->transforms, &tf, err)) ||
            (st = qmla_sha256_file(o->transforms, tsha, err)))
            goto done;
    }
    if ((st = qmla_capture_open(capture, &c.cap, err)) ||
        (st = qmla_sha256_file(capture, sha, err)))
        goto done;
    c.cf = qmla_capture_get_config(c.cap);
    c.d = (qmla_mla_dims){(size_t)c.cf->H, (size_t)c.cf->D, (size_t)c.cf->d_c,
                          (size_t)c.cf->d_n, (size_t)c.cf->d_r, (size_t)c.cf->d_v,
                          c.cf->softmax_scale};
    c.ex = qmla_exec_cpu(o->threads);
    const size_t NL = qmla_capture_n_layers(c.cap);
    if (o->transforms && (st = qmla_transform_file_check_complete(&tf, o->transforms, NL, err))) {
        r->refusal = 1;
        goto done;
    }
    const int d_c = (int)c.d.d_c, d_r = (int)c.d.d_r;
    long long capb = 0;
    double budget_bpt = 0;
    if ((st = qmla_alloc_budget(o->budget, d_c, d_r, (int)c.sink, (int)c.local, context, NL,
                                &capb, &budget_bpt, err))) {
        r->refusal = 1;
        goto done;
    }
    long long *cost = calloc(NL * K, sizeof *cost);
    double *val = calloc(NL * K, sizeof *val);
    int *choice = calloc(NL, sizeof *choice);
    layer_meas *lm = calloc(NL, sizeof *lm);
    r->cand = calloc(NL * K, sizeof *r->cand);
    qmla_allocation *a = &r->a;
    a->layer = calloc(NL, sizeof *a->layer);
    a->c_bits = calloc(NL, sizeof *a->c_bits);
    a->r_bits = calloc(NL, sizeof *a->r_bits);
    a->bytes = calloc(NL, sizeof *a->bytes);
    a->pred = calloc(NL, sizeof *a->pred);
    if (!cost || !val || !choice || !lm || !r->cand || !a->layer || !a->c_bits || !a->r_bits ||
        !a->bytes || !a->pred) {
        st = qmla_error_set(err, QMLA_ENOMEM, "allocate: out of memory");
        goto free_work;
    }
    /* the costs first: an infeasible budget is refused before any measurement */
    long long cheapest = 0;
    for (size_t li = 0; li < NL && !st; li++) {
        long long lo = 0;
        for (size_t k = 0; k < K && !st; k++) {
            st = qmla_alloc_layer_bytes(cb[k], rb[k], d_c, d_r, (int)c.sink, (int)c.local, context,
                                        &cost[li * K + k], err);
            lo = k == 0 || cost[li * K + k] < lo ? cost[li * K + k] : lo;
        }
        cheapest += lo;
    }
    if (st)
        goto free_work;
    if (cheapest > capb) {
        st = qmla_refuse(&r->refusal, err, "--budget %s = %.4f bytes per token: below the "
                         "cheapest assignment, %.4f bytes per token (every layer at its cheapest "
                         "candidate; %zu layers, context %ld, policy %s)", o->budget, budget_bpt,
                         (double)cheapest / ((double)NL * (double)context), NL, context, policy);
        goto free_work;
    }
    const double t0 = cpu_s();
    qmla_transform rtn;
    memset(&rtn, 0, sizeof rtn);
    float *rgamma = malloc(c.d.d_c * sizeof *rgamma);
    if (!rgamma) {
        st = qmla_error_set(err, QMLA_ENOMEM, "allocate: out of memory");
        goto free_work;
    }
    for (size_t li = 0; li < NL && !st; li++) {
        const int layer = qmla_capture_layer_index(c.cap, li);
        const qmla_transform *t = NULL;
        const float *gamma = NULL;
        if (o->transforms) {
            t = qmla_transform_file_layer(&tf, layer, &gamma);
            if (!t) {
                st = qmla_refuse(&r->refusal, err, "%s has no transform for layer %d",
                                 o->transforms, layer);
                break;
            }
        } else {
            /* plain RTN: the identity transform of the layer's gain */
            qmla_transform_free(&rtn);
            st = qmla_transform_alloc(c.d.d_c, c.d.d_r, c.cf->rope_pairing, &rtn, err);
            if (!st)
                st = qmla_tf_baseline(&c.ex, c.cap, li, NULL, 0, QMLA_TM_RTN, 0.0, &rtn, rgamma,
                                      err);
            t = &rtn;
            gamma = rgamma;
        }
        if (!st)
            st = measure_layer(&c, li, t, gamma, &lm[li], &r->refusal, err);
        for (size_t k = 0; k < K && !st; k++) {
            const int ic = width_index(cb[k]), ir = width_index(rb[k]);
            qmla_alloc_cand *q = &r->cand[li * K + k];
            q->layer = layer;
            snprintf(q->config, sizeof q->config, "%s", names[k]);
            q->c_bits = cb[k];
            q->r_bits = rb[k];
            q->bytes = (double)cost[li * K + k] / (double)context;
            q->nmse_c = lm[li].nu[0][ic];
            q->nmse_r = lm[li].nu[1][ir];
            q->pred_c = lm[li].pred[0][ic];
            q->pred_r = lm[li].pred[1][ir];
            q->pred = q->pred_c + q->pred_r;
            val[li * K + k] = q->pred;
        }
        a->layer[li] = layer;
    }
    qmla_transform_free(&rtn);
    free(rgamma);
    r->measure_cpu_s = cpu_s() - t0;
    if (st)
        goto free_work;
    r->n_cand = NL * K;
    const double t1 = cpu_s();
    double total = 0;
    long long used = 0;
    st = qmla_alloc_solve(NL, K, cost, val, capb, choice, &total, &used, err);
    r->solve_cpu_s = cpu_s() - t1;
    if (st) {
        r->refusal = st == QMLA_EINVAL;
        qmla_error_prefix(err, "--budget %s (%.4f bytes per token over %zu layers at context "
                          "%ld): ", o->budget, budget_bpt, NL, context);
        goto free_work;
    }
    a->n = NL;
    a->group = 64;
    a->d_c = d_c;
    a->d_r = d_r;
    a->sink = (int)c.sink;
    a->window = (int)c.local;
    a->context = context;
    a->budget_bytes = budget_bpt;
    a->bytes_per_token = (double)used / ((double)NL * (double)context);
    a->pred_total = total;
    snprintf(a->policy, sizeof a->policy, "%s", policy);
    for (size_t li = 0; li < NL; li++) {
        const size_t k = (size_t)choice[li];
        a->c_bits[li] = cb[k];
        a->r_bits[li] = rb[k];
        a->bytes[li] = r->cand[li * K + k].bytes;
        a->pred[li] = r->cand[li * K + k].pred;
        r->cand[li * K + k].chosen = 1;
    }
    {
        const qmla_alloc_record rec = {
            .budget = o->budget, .candidates = cands, .capture = capture,
            .capture_sha256 = sha, .transforms = o->transforms,
            .transforms_sha256 = o->transforms ? tsha : NULL, .command_line = o->command_line,
            .engine = qmla_engine_name(o->engine), .cand = r->cand, .n_cand = r->n_cand};
        st = qmla_allocation_write(out, a, &rec, err);
        r->wrote = st == QMLA_OK;
    }
free_work:
    free(cost);
    free(val);
    free(choice);
    free(lm);
done:
    qmla_transform_file_free(&tf);
    qmla_capture_close(c.cap);
    return st;
}
