/* sweep.c — matched-NMSE path responses and finite error routes for one
 * sequence, and their aggregation (include/qmla/sweep.h, docs/math.md §3–4).
 * The sweep driver over a whole capture lives in sweep_run.c. */
#include "qmla/sweep.h"
#include "core/alloc.h"
#include "qmla/norms.h"

#include <gsl/gsl_rng.h>
#include <gsl/gsl_statistics_double.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

qmla_sweep_params qmla_sweep_defaults(void)
{
    qmla_sweep_params p;
    p.quant = qmla_quant_defaults();
    p.nmse = 0.01;
    return p;
}

int qmla_sweep_params_check(const qmla_sweep_params *p,
                            const qmla_capture_config *cfg, qmla_error *err)
{
    if (!(p->nmse >= QMLA_NMSE_MIN && p->nmse <= QMLA_NMSE_MAX))
        return qmla_error_set(err, QMLA_EINVAL,
                              "target cache NMSE: expected %.3g (2^-30, the "
                              "float32 floor; docs/analysis.md) .. %g, found %g",
                              QMLA_NMSE_MIN, QMLA_NMSE_MAX, p->nmse);
    if (qmla_quant_check(&p->quant, (size_t)cfg->d_c, err))
        return qmla_error_prefix(err, "content cache (d_c = %d): ", cfg->d_c);
    if (qmla_quant_check(&p->quant, (size_t)cfg->d_r, err))
        return qmla_error_prefix(err, "RoPE cache (d_r = %d): ", cfg->d_r);
    return QMLA_OK;
}

static float *falloc(size_t n, qmla_error *err, const char *what)
{
    return qmla_alloc_big(n * sizeof(float), err, what);
}

/* Route deltas [3, T, H, d_c]; verify_routes also keeps the perturbed
 * caches after the first slab. */
static size_t dU_floats(const qmla_mla_dims *d, size_t T)
{
    const size_t routes = 3 * d->H * T * d->d_c;
    const size_t verify = d->H * T * d->d_c + T * (d->d_c + d->d_r);
    return routes > verify ? routes : verify;
}

int qmla_sweep_ws_alloc(const qmla_mla_dims *d, size_t T, int verify,
                        qmla_sweep_ws *ws, qmla_error *err)
{
    memset(ws, 0, sizeof *ws);
    int st = qmla_attn_state_alloc(d, T, 1, &ws->clean, err);
    if (st)
        return st;
    ws->T_max = T;
    const size_t H = d->H, wmax = d->d_c > d->d_r ? d->d_c : d->d_r;
    if (!(ws->At = falloc(H * T * T, err, "perturbed attention")) ||
        !(ws->E = falloc(T * wmax, err, "cache error")) ||
        !(ws->dU = falloc(dU_floats(d, T), err, "route deltas")) ||
        !(ws->O3 = falloc(3 * T * H * d->d_v, err, "route values")) ||
        !(ws->Y3 = falloc(3 * T * d->D, err, "route outputs")) ||
        (verify && !(ws->Yv = falloc(T * d->D, err, "verification output")))) {
        qmla_sweep_ws_free(ws);
        return err ? err->status : QMLA_ENOMEM;
    }
    return QMLA_OK;
}

double qmla_sweep_ws_bytes(const qmla_mla_dims *d, size_t T, int verify)
{
    const double H = (double)d->H, t = (double)T, dc = (double)d->d_c;
    const double dr = (double)d->d_r, dv = (double)d->d_v, D = (double)d->D;
    const double wmax = dc > dr ? dc : dr;
    const double floats = H * t * t + t * wmax + (double)dU_floats(d, T) +
                          3 * t * H * dv + 3 * t * D + (verify ? t * D : 0.0);
    return qmla_attn_state_bytes(d, T, 1) + 4.0 * floats;
}

void qmla_sweep_ws_free(qmla_sweep_ws *ws)
{
    if (!ws)
        return;
    qmla_attn_state_free(&ws->clean);
    free(ws->At);
    free(ws->E);
    free(ws->dU);
    free(ws->O3);
    free(ws->Y3);
    free(ws->Yv);
    memset(ws, 0, sizeof *ws);
}

/* The rest of path_error after E = QDQ(X): the sums of squares in double
 * in index order (serial, so the parallel form gives the same bits), then
 * E = alpha (E - X) on `threads` threads (each element on its own: the
 * same value whatever the thread count) and ||E||^2 in index order. */
static void path_error_finish(const qmla_sweep_params *p, const float *X, size_t n,
                              float *E, double *xx, double *nmse_qdq, double *nmse_cache,
                              int *degenerate, int threads)
{
    double dd = 0.0, x2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double x = X[i], e = (double)E[i] - x;
        dd += e * e;
        x2 += x * x;
    }
    *xx = x2;
    *degenerate = 0;
    *nmse_qdq = 0.0;
    *nmse_cache = 0.0;
    if (x2 == 0.0 || dd == 0.0) {
        *degenerate = 1;
        return;
    }
    const double alpha = sqrt(p->nmse * x2 / dd);
    double ee = 0.0;
    if (threads > 1) {
        const long nl = (long)n;
        (void)nl;
#pragma omp parallel for schedule(static) num_threads(threads)
        for (long i = 0; i < nl; i++)
            E[i] = (float)(alpha * ((double)E[i] - (double)X[i]));
        for (size_t i = 0; i < n; i++)
            ee += (double)E[i] * (double)E[i];
    } else
        for (size_t i = 0; i < n; i++) {
            E[i] = (float)(alpha * ((double)E[i] - (double)X[i]));
            ee += (double)E[i] * (double)E[i];
        }
    *nmse_qdq = dd / x2;
    *nmse_cache = ee / x2;
}

/* E = alpha (QDQ(X) - X) scaled to cache NMSE nu. Returns the raw NMSE of
 * Delta in *nmse_qdq and sets *degenerate when Delta or X has no energy. */
static int path_error(const qmla_sweep_params *p, const float *X, size_t T,
                      size_t width, float *E, double *xx, double *nmse_qdq,
                      double *nmse_cache, int *degenerate, qmla_error *err)
{
    int st = qmla_quant_qdq(&p->quant, X, T, width, NULL, NULL, NULL, E, err);
    if (st)
        return st;
    path_error_finish(p, X, T * width, E, xx, nmse_qdq, nmse_cache, degenerate, 1);
    return QMLA_OK;
}

int qmla_sweep_error_direction(const qmla_sweep_params *p, const float *X,
                               size_t T, size_t width, float *E, double *xx,
                               double *nmse_qdq, double *nmse_cache,
                               int *degenerate, qmla_error *err)
{
    return path_error(p, X, T, width, E, xx, nmse_qdq, nmse_cache, degenerate,
                      err);
}

int qmla_sweep_error_direction_par(const qmla_exec *ex, const qmla_sweep_params *p,
                                   const float *X, size_t T, size_t width, float *E,
                                   double *xx, double *nmse_qdq, double *nmse_cache,
                                   int *degenerate, qmla_error *err)
{
    const int threads = qmla_exec_threads(ex);
    if (threads < 2 || T < 2)
        return path_error(p, X, T, width, E, xx, nmse_qdq, nmse_cache, degenerate, err);
    int st = qmla_quant_check(&p->quant, width, err);
    if (st)
        return st;
    /* QDQ is per token: blocks of tokens on the threads give the serial
     * call's values; a block's error is reported by the serial call, whose
     * message names the first failing token of the whole sequence */
    const long nb = (long)(T < (size_t)threads * 4 ? T : (size_t)threads * 4);
    int bad = 0;
#pragma omp parallel for schedule(static) num_threads(threads) reduction(| : bad)
    for (long b = 0; b < nb; b++) {
        const size_t t0 = T * (size_t)b / (size_t)nb, t1 = T * (size_t)(b + 1) / (size_t)nb;
        if (t1 > t0 && qmla_quant_qdq(&p->quant, X + t0 * width, t1 - t0, width, NULL, NULL,
                                      NULL, E + t0 * width, NULL))
            bad |= 1;
    }
    if (bad)
        return path_error(p, X, T, width, E, xx, nmse_qdq, nmse_cache, degenerate, err);
    path_error_finish(p, X, T * width, E, xx, nmse_qdq, nmse_cache, degenerate, threads);
    return QMLA_OK;
}

/* At = softmax(Z + tau Q E^T) - A, causal; Q [H,T,w], E [T,w]. */
static void perturbed_attention_delta(const qmla_exec *ex,
                                      const qmla_mla_dims *d, size_t T,
                                      size_t w, const float *Q,
                                      qmla_sweep_ws *ws)
{
    const size_t n = d->H * T * T;
    memcpy(ws->At, ws->clean.Z, n * sizeof(float));
    qmla_attn_logits_acc(ex, d->H, T, w, (float)d->tau, Q, ws->E, 1.0f, ws->At);
    qmla_attn_softmax_delta(ex, d->H, T, ws->At, ws->clean.A, ws->At);
}

static void zero_response(qmla_response *r)
{
    r->nmse_cache = r->nmse_out = r->response = 0.0;
    r->nmse_out_matching = r->nmse_out_aggregation = 0.0;
    r->nmse_out_interaction = r->nmse_qdq = r->route_residual = 0.0;
    r->verified = 0;
}

/* Sum of squares of a + b + c (each n long), in double. */
static double sumsq3(const float *a, const float *b, const float *c, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double v = (double)a[i] + (double)b[i] + (double)c[i];
        s += v * v;
    }
    return s;
}

/* Full forward of the perturbed cache into ws->Yv and the relative residual
 * of the route sum (ws->Y3) against it. It recomputes logits, softmax and
 * aggregation independently of the routes, in workspace the routes no
 * longer need: At (logits), the first slab of dU (latent aggregation), the
 * second slab of dU (perturbed caches), O3 (values). */
static double verify_routes(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                            const qmla_mla_weights *w, const float *C,
                            const float *K, int path, size_t nroutes,
                            qmla_sweep_ws *ws)
{
    const size_t H = d->H, dc = d->d_c, dr = d->d_r, D = d->D;
    const size_t nC = T * dc, nK = T * dr;
    float *Zv = ws->At, *Uv = ws->dU, *Cp = ws->dU + H * T * dc, *Kp = Cp + nC;
    for (size_t i = 0; i < nC; i++)
        Cp[i] = C[i] + (path == QMLA_PATH_CONTENT ? ws->E[i] : 0.0f);
    for (size_t i = 0; i < nK; i++)
        Kp[i] = K[i] + (path == QMLA_PATH_ROPE ? ws->E[i] : 0.0f);
    qmla_attn_from_queries(ex, d, T, w, ws->clean.q_lat, ws->clean.q_rope_t, Cp,
                           Kp, Zv, Zv, Uv, ws->O3, ws->Yv);
    /* residual = ||(Yv - Y) - sum routes|| / ||Yv - Y|| */
    double num = 0.0, den = 0.0;
    const size_t n = T * D;
    for (size_t i = 0; i < n; i++) {
        const double diff = (double)ws->Yv[i] - (double)ws->clean.Y[i];
        double route = 0.0;
        for (size_t r = 0; r < nroutes; r++)
            route += ws->Y3[r * n + i];
        num += (diff - route) * (diff - route);
        den += diff * diff;
    }
    return den > 0.0 ? sqrt(num / den) : (num > 0.0 ? INFINITY : 0.0);
}

int qmla_sweep_sequence(const qmla_exec *ex, const qmla_sweep_params *p,
                        const qmla_mla_dims *d,
                        size_t T, const qmla_mla_weights *w,
                        const float *q_nope, const float *q_rope,
                        const float *C, const float *K, int verify,
                        qmla_sweep_ws *ws, qmla_response out[2],
                        qmla_error *err)
{
    if (T == 0 || T > ws->T_max)
        return qmla_error_set(err, QMLA_EINVAL, "sweep: T = %zu outside [1, %zu]",
                              T, ws->T_max);
    if (verify && !ws->Yv)
        return qmla_error_set(err, QMLA_EINVAL,
                              "sweep: workspace allocated without verify");
    const size_t H = d->H, dc = d->d_c, dr = d->d_r, D = d->D;
    const size_t nY = T * D, nU = H * T * dc;
    qmla_sweep_ws *W = ws;
    out[0].path = QMLA_PATH_CONTENT;
    out[1].path = QMLA_PATH_ROPE;

    /* The clean pass, logits kept (the perturbed logits start from them). */
    int st = qmla_attn_state_forward(ex, d, T, w, q_nope, q_rope, C, K, &W->clean,
                                     err);
    if (st)
        return st;
    const double yy = qmla_sumsq(W->clean.Y, nY);

    for (int path = 0; path < 2; path++) {
        qmla_response *r = &out[path];
        const int content = path == QMLA_PATH_CONTENT;
        const float *X = content ? C : K;
        const size_t width = content ? dc : dr;
        double xx, nmse_qdq, nmse_cache;
        int degenerate;
        st = path_error(p, X, T, width, W->E, &xx, &nmse_qdq, &nmse_cache,
                            &degenerate, err);
        if (st)
            return qmla_error_prefix(err, "%s cache: ", qmla_path_name(path));
        zero_response(r);
        r->degenerate = degenerate || yy == 0.0;
        if (r->degenerate)
            continue;

        perturbed_attention_delta(ex, d, T, width,
                                  content ? W->clean.q_lat : W->clean.q_rope_t, W);
        /* Route deltas in latent space: matching (A~-A) C; for content also
         * aggregation A E and interaction (A~-A) E. */
        const size_t nroutes = content ? 3 : 1;
        qmla_attn_aggregate(ex, H, T, dc, W->At, C, 0.0f, W->dU);
        if (content) {
            qmla_attn_aggregate(ex, H, T, dc, W->clean.A, W->E, 0.0f, W->dU + nU);
            qmla_attn_aggregate(ex, H, T, dc, W->At, W->E, 0.0f, W->dU + 2 * nU);
        }
        qmla_attn_project(ex, d, T, nroutes, w, W->dU, W->O3, W->Y3);

        const double m = qmla_sumsq(W->Y3, nY);
        double a = 0.0, i = 0.0, tot = m;
        if (content) {
            a = qmla_sumsq(W->Y3 + nY, nY);
            i = qmla_sumsq(W->Y3 + 2 * nY, nY);
            tot = sumsq3(W->Y3, W->Y3 + nY, W->Y3 + 2 * nY, nY);
        }
        r->nmse_cache = nmse_cache;
        r->nmse_qdq = nmse_qdq;
        r->nmse_out = tot / yy;
        r->response = r->nmse_out / nmse_cache;
        r->nmse_out_matching = m / yy;
        r->nmse_out_aggregation = a / yy;
        r->nmse_out_interaction = i / yy;
        if (verify) {
            r->verified = 1;
            r->route_residual =
                verify_routes(ex, d, T, w, C, K, path, nroutes, W);
        }
        if (!isfinite(r->response) || !isfinite(r->nmse_out))
            return qmla_error_set(err, QMLA_ENONFINITE,
                                  "%s path: non-finite output NMSE (%g)",
                                  qmla_path_name(path), r->nmse_out);
    }
    return QMLA_OK;
}

double qmla_sweep_flops(const qmla_mla_dims *d, size_t T)
{
    const double H = (double)d->H, dc = (double)d->d_c, dr = (double)d->d_r;
    const double dn = (double)d->d_n, dv = (double)d->d_v, D = (double)d->D;
    const double t = (double)T, pairs = t * (t + 1.0) / 2.0;
    const double absorb = 2 * H * t * dn * dc;
    const double logits_c = 2 * H * pairs * dc, logits_r = 2 * H * pairs * dr;
    const double aggregate = 2 * H * pairs * dc;
    const double project = 2 * t * H * dc * dv + 2 * t * H * dv * D;
    const double clean = logits_c + logits_r + aggregate + project;
    const double content = logits_c + 3 * aggregate + 3 * project;
    const double rope = logits_r + aggregate + project;
    return absorb + clean + content + rope;
}

/* ---- aggregation -------------------------------------------------------- */

/* Mean over the non-degenerate sequences of each cell, then over cells;
 * rows sorted by (layer, cell, seq, path). Returns NaN when no cell has a
 * non-degenerate sequence. */
static double layer_path_mean(const qmla_response *r, size_t n, int path)
{
    double cell_sum = 0.0;
    size_t cells = 0;
    for (size_t k = 0; k < n;) {
        size_t j = k;
        double seq_sum = 0.0;
        size_t seqs = 0;
        for (; j < n && strcmp(r[j].cell, r[k].cell) == 0; j++)
            if (r[j].path == path && !r[j].degenerate) {
                seq_sum += r[j].response;
                seqs++;
            }
        if (seqs) {
            cell_sum += seq_sum / (double)seqs;
            cells++;
        }
        k = j;
    }
    return cells ? cell_sum / (double)cells : NAN;
}

/* ---- dispersion (math.md §3.1) ------------------------------------------ */

/* One sequence slot: a (cell, seq) that some row names. */
typedef struct slot_key {
    const char *cell;
    int seq;
} slot_key;

static int cmp_slot(const void *a, const void *b)
{
    const slot_key *x = a, *y = b;
    const int c = strcmp(x->cell, y->cell);
    return c ? c : (x->seq > y->seq) - (x->seq < y->seq);
}

static int cmp_dbl(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* sd and 2.5 %/97.5 % quantiles (GSL's linear interpolation between order
 * statistics) of the defined (finite) replicates x[0..B); NaN when fewer
 * than half of them are defined. x is reordered. */
static void boot_stats(double *x, size_t B, double *se, double *lo, double *hi)
{
    size_t m = 0;
    for (size_t b = 0; b < B; b++)
        if (isfinite(x[b]))
            x[m++] = x[b];
    if (m < 2 || 2 * m < B) {
        *se = *lo = *hi = NAN;
        return;
    }
    qsort(x, m, sizeof *x, cmp_dbl);
    *se = gsl_stats_sd(x, 1, m);
    *lo = gsl_stats_quantile_from_sorted_data(x, 1, m, 0.025);
    *hi = gsl_stats_quantile_from_sorted_data(x, 1, m, 0.975);
}

/* Mean over cells of the mean over the (drawn) non-degenerate sequences of
 * one layer and path: v holds the response per slot, NaN where the slot is
 * absent or degenerate; draw[j] (or j itself when draw is NULL) picks the
 * slot of the j-th sequence of each cell. NaN when no cell has one, and
 * (with draw) when a cell that has one in v drew none. */
static double grid_mean(const double *v, const size_t *off, size_t n_cells,
                        const size_t *draw)
{
    double cell_sum = 0.0;
    size_t cells = 0;
    for (size_t c = 0; c < n_cells; c++) {
        double seq_sum = 0.0;
        size_t seqs = 0;
        for (size_t j = off[c]; j < off[c + 1]; j++) {
            const double y = v[draw ? draw[j] : j];
            if (!isnan(y)) {
                seq_sum += y;
                seqs++;
            }
        }
        if (seqs) {
            cell_sum += seq_sum / (double)seqs;
            cells++;
        } else if (draw) {
            /* a replicate that drew only degenerate sequences of a cell the
             * estimate holds estimates another mean: undefined */
            for (size_t j = off[c]; j < off[c + 1]; j++)
                if (!isnan(v[j]))
                    return NAN;
        }
    }
    return cells ? cell_sum / (double)cells : NAN;
}

/* Two-stage standard error of grid_mean (cells independent): sqrt(sum_k
 * s_k^2 / n_k) / K over the K cells with a non-degenerate sequence, s_k the
 * sample sd (n_k - 1) of the cell's n_k sequences. NaN when K = 0 or a cell
 * has n_k = 1 (*ok = 0 then). */
static double grid_se(const double *v, const size_t *off, size_t n_cells, int *ok)
{
    double var = 0.0;
    size_t cells = 0;
    *ok = 1;
    for (size_t c = 0; c < n_cells; c++) {
        double sum = 0.0;
        size_t k = 0;
        for (size_t j = off[c]; j < off[c + 1]; j++)
            if (!isnan(v[j])) {
                sum += v[j];
                k++;
            }
        if (!k)
            continue;
        if (k < 2) {
            *ok = 0;
            return NAN;
        }
        const double mean = sum / (double)k;
        double ss = 0.0;
        for (size_t j = off[c]; j < off[c + 1]; j++)
            if (!isnan(v[j]))
                ss += (v[j] - mean) * (v[j] - mean);
        var += ss / (double)(k - 1) / (double)k;
        cells++;
    }
    if (!cells) {
        *ok = 0;
        return NAN;
    }
    return sqrt(var) / (double)cells;
}

/* Fill the dispersion fields of s from the sorted rows r (math.md §3.1):
 * per-layer two-stage standard errors; a percentile bootstrap that draws,
 * per replicate and per cell (cells in name order), N_k of the cell's N_k
 * sequence slots with replacement (gsl_rng_uniform_int on mt19937 seeded
 * with seed), the same draw for every layer and both paths. -1 when out of
 * memory. */
static int summary_dispersion(const qmla_response *r, size_t n, size_t B,
                              unsigned long seed, qmla_summary *s)
{
    const size_t nl = s->n_layers, na = nl ? nl : 1;
    double **cols[] = {&s->response_content_se, &s->response_rope_se, &s->ratio_se,
                       &s->response_content_lo, &s->response_content_hi,
                       &s->response_rope_lo,    &s->response_rope_hi,
                       &s->ratio_lo,            &s->ratio_hi};
    for (size_t k = 0; k < sizeof cols / sizeof *cols; k++)
        if (!(*cols[k] = malloc(na * sizeof(double))))
            return -1;
    for (size_t k = 0; k < sizeof cols / sizeof *cols; k++)
        for (size_t li = 0; li < nl; li++)
            (*cols[k])[li] = NAN;
    s->model_response_content_se = s->model_response_content_lo =
        s->model_response_content_hi = NAN;
    s->model_response_rope_se = s->model_response_rope_lo = s->model_response_rope_hi = NAN;
    s->model_ratio_se = s->model_ratio_lo = s->model_ratio_hi = NAN;
    s->bootstrap_replicates = B;
    s->bootstrap_seed = seed;
    if (n == 0 || nl == 0)
        return 0;

    int st = -1;
    slot_key *key = malloc(n * sizeof *key);
    size_t *off = NULL, *draw = NULL;
    double *v = NULL, *rep = NULL;
    int *ok = NULL;
    gsl_rng *rng = NULL;
    if (!key)
        goto out;
    /* the sequence slots: every (cell, seq) named, in order */
    for (size_t k = 0; k < n; k++) {
        key[k].cell = r[k].cell;
        key[k].seq = r[k].seq;
    }
    qsort(key, n, sizeof *key, cmp_slot);
    size_t ns = 0, nc = 0;
    for (size_t k = 0; k < n; k++)
        if (ns == 0 || cmp_slot(&key[ns - 1], &key[k]))
            key[ns++] = key[k];
    off = malloc((ns + 1) * sizeof *off);
    v = malloc(nl * 2 * ns * sizeof *v);
    ok = malloc(nl * sizeof *ok);
    if (!off || !v || !ok)
        goto out;
    for (size_t k = 0; k < ns; k++)
        if (k == 0 || strcmp(key[k].cell, key[k - 1].cell))
            off[nc++] = k;
    off[nc] = ns;
    /* v[(li * 2 + path) * ns + slot]: the response, NaN absent/degenerate */
    for (size_t k = 0; k < nl * 2 * ns; k++)
        v[k] = NAN;
    for (size_t k = 0, li = 0; k < n; k++) {
        while (s->layer[li] != r[k].layer)
            li++; /* rows and layers both ascending */
        const slot_key q = {r[k].cell, r[k].seq};
        const slot_key *hit = bsearch(&q, key, ns, sizeof *key, cmp_slot);
        if (hit && !r[k].degenerate && (r[k].path == 0 || r[k].path == 1))
            v[(li * 2 + (size_t)r[k].path) * ns + (size_t)(hit - key)] = r[k].response;
    }
    /* analytic per-layer standard errors; which layers have a dispersion */
    int model_ok = s->n_layers_in_model > 0;
    for (size_t li = 0; li < nl; li++) {
        int okc, okp;
        s->response_content_se[li] = grid_se(v + li * 2 * ns, off, nc, &okc);
        s->response_rope_se[li] = grid_se(v + (li * 2 + 1) * ns, off, nc, &okp);
        ok[li] = okc && okp;
        if (!s->degenerate[li] && !ok[li])
            model_ok = 0;
    }
    if (B == 0) {
        st = 0;
        goto out;
    }
    /* the bootstrap: replicates per layer (content, rope, ratio) and model */
    draw = malloc(ns * sizeof *draw);
    rep = malloc((nl * 3 + 3) * B * sizeof *rep);
    rng = gsl_rng_alloc(gsl_rng_mt19937);
    if (!draw || !rep || !rng)
        goto out;
    gsl_rng_set(rng, seed);
    double *mrep = rep + nl * 3 * B;
    for (size_t b = 0; b < B; b++) {
        for (size_t c = 0; c < nc; c++)
            for (size_t j = off[c]; j < off[c + 1]; j++)
                draw[j] = off[c] + (size_t)gsl_rng_uniform_int(rng, off[c + 1] - off[c]);
        double msum[2] = {0.0, 0.0};
        int mdef = 1;
        for (size_t li = 0; li < nl; li++) {
            const double c = grid_mean(v + li * 2 * ns, off, nc, draw);
            const double p = grid_mean(v + (li * 2 + 1) * ns, off, nc, draw);
            rep[(li * 3 + 0) * B + b] = c;
            rep[(li * 3 + 1) * B + b] = p;
            rep[(li * 3 + 2) * B + b] = isfinite(c) && isfinite(p) && c > 0.0 ? p / c : NAN;
            if (!s->degenerate[li]) {
                mdef &= isfinite(c) && isfinite(p);
                msum[0] += c;
                msum[1] += p;
            }
        }
        const double m = (double)s->n_layers_in_model;
        mrep[0 * B + b] = mdef ? msum[0] / m : NAN;
        mrep[1 * B + b] = mdef ? msum[1] / m : NAN;
        mrep[2 * B + b] = mdef && msum[0] > 0.0 ? msum[1] / msum[0] : NAN;
    }
    for (size_t li = 0; li < nl; li++) {
        if (!ok[li])
            continue;
        double se_c, se_p;
        boot_stats(rep + (li * 3 + 0) * B, B, &se_c, &s->response_content_lo[li],
                   &s->response_content_hi[li]);
        boot_stats(rep + (li * 3 + 1) * B, B, &se_p, &s->response_rope_lo[li],
                   &s->response_rope_hi[li]);
        if (!s->degenerate[li])
            boot_stats(rep + (li * 3 + 2) * B, B, &s->ratio_se[li], &s->ratio_lo[li],
                       &s->ratio_hi[li]);
    }
    if (model_ok) {
        boot_stats(mrep, B, &s->model_response_content_se, &s->model_response_content_lo,
                   &s->model_response_content_hi);
        boot_stats(mrep + B, B, &s->model_response_rope_se, &s->model_response_rope_lo,
                   &s->model_response_rope_hi);
        boot_stats(mrep + 2 * B, B, &s->model_ratio_se, &s->model_ratio_lo,
                   &s->model_ratio_hi);
    }
    st = 0;
out:
    gsl_rng_free(rng);
    free(key);
    free(off);
    free(draw);
    free(v);
    free(rep);
    free(ok);
    return st;
}

int qmla_summary_compute_boot(const qmla_response *r_in, size_t n, size_t B,
                              unsigned long seed, qmla_summary *s, qmla_error *err)
{
    memset(s, 0, sizeof *s);
    qmla_response *r = malloc((n ? n : 1) * sizeof *r);
    size_t nl = 0;
    for (size_t k = 0; k < n; k++)
        nl += k == 0 || r_in[k].layer != r_in[k - 1].layer; /* upper bound */
    s->layer = malloc((nl ? nl : 1) * sizeof *s->layer);
    s->response_content = malloc((nl ? nl : 1) * sizeof(double));
    s->response_rope = malloc((nl ? nl : 1) * sizeof(double));
    s->ratio = malloc((nl ? nl : 1) * sizeof(double));
    s->degenerate = malloc((nl ? nl : 1) * sizeof(int));
    if (!r || !s->layer || !s->response_content || !s->response_rope ||
        !s->ratio || !s->degenerate) {
        free(r);
        qmla_summary_free(s);
        return qmla_error_set(err, QMLA_ENOMEM, "summary: out of memory");
    }
    memcpy(r, r_in, n * sizeof *r);
    qmla_responses_sort(r, n);
    double model[2] = {0.0, 0.0};
    for (size_t k = 0; k < n;) {
        size_t j = k;
        while (j < n && r[j].layer == r[k].layer)
            j++;
        const size_t li = s->n_layers++;
        const double c = layer_path_mean(r + k, j - k, QMLA_PATH_CONTENT);
        const double p = layer_path_mean(r + k, j - k, QMLA_PATH_ROPE);
        s->layer[li] = r[k].layer;
        s->response_content[li] = c;
        s->response_rope[li] = p;
        s->degenerate[li] = !(isfinite(c) && isfinite(p) && c > 0.0);
        s->ratio[li] = s->degenerate[li] ? NAN : p / c;
        if (!s->degenerate[li]) {
            model[0] += c;
            model[1] += p;
            s->n_layers_in_model++;
        }
        k = j;
    }
    s->n_rows = n;
    for (size_t k = 0; k < n; k++) {
        s->n_degenerate += r[k].degenerate != 0;
        if (r[k].verified) {
            s->n_verified++;
            if (r[k].route_residual > s->worst_route_residual)
                s->worst_route_residual = r[k].route_residual;
        }
    }
    const double m = (double)s->n_layers_in_model;
    s->model_response_content = m > 0 ? model[0] / m : NAN;
    s->model_response_rope = m > 0 ? model[1] / m : NAN;
    s->model_ratio = m > 0 ? s->model_response_rope / s->model_response_content : NAN;
    const int st = summary_dispersion(r, n, B, seed, s);
    free(r);
    if (st) {
        qmla_summary_free(s);
        return qmla_error_set(err, QMLA_ENOMEM, "summary: out of memory");
    }
    return QMLA_OK;
}

int qmla_summary_compute(const qmla_response *r, size_t n, qmla_summary *s,
                         qmla_error *err)
{
    return qmla_summary_compute_boot(r, n, QMLA_SUMMARY_BOOTSTRAP_B,
                                     QMLA_SUMMARY_BOOTSTRAP_SEED, s, err);
}

void qmla_summary_free(qmla_summary *s)
{
    if (!s)
        return;
    free(s->layer);
    free(s->response_content);
    free(s->response_rope);
    free(s->ratio);
    free(s->degenerate);
    free(s->response_content_se);
    free(s->response_rope_se);
    free(s->ratio_se);
    free(s->response_content_lo);
    free(s->response_content_hi);
    free(s->response_rope_lo);
    free(s->response_rope_hi);
    free(s->ratio_lo);
    free(s->ratio_hi);
    memset(s, 0, sizeof *s);
}
