/* tfeval.c — baseline calibration on a capture and evaluation of transforms
 * (qmla/tfeval.h, docs/math.md §7–9). */
#include "qmla/tfeval.h"

#include <gsl/gsl_eigen.h>
#include <gsl/gsl_matrix.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qmla/attention.h"
#include "qmla/tmethod.h"
#include "transform/tfeval_int.h"

static qmla_mla_dims dims_of(const qmla_capture_config *c)
{
    qmla_mla_dims d = {(size_t)c->H, (size_t)c->D, (size_t)c->d_c, (size_t)c->d_n,
                       (size_t)c->d_r, (size_t)c->d_v, c->softmax_scale};
    return d;
}

int qmla_tf_baseline(const qmla_exec *ex, qmla_capture *cap, size_t li,
                     const size_t *cells, size_t n_cells, qmla_tmethod method,
                     double alpha, qmla_transform *t, float *gamma_out,
                     qmla_error *err)
{
    const qmla_capture_config *cf = qmla_capture_get_config(cap);
    qmla_mla_dims d = dims_of(cf);
    qmla_layer L;
    memset(&L, 0, sizeof L);
    int st = qmla_capture_load_layer(cap, li, &L, err);
    if (st)
        return st;
    memcpy(gamma_out, L.kv_norm, d.d_c * sizeof(float));
    t->layer = L.layer;
    const qmla_tmethod_type *mt = qmla_tmethod_of(method);
    if (!mt || !mt->calibrate) {
        st = qmla_error_set(err, QMLA_EINVAL, "baseline: method %s is learned, not calibrated",
                            qmla_tmethod_name(method));
    } else if (!mt->needs_calib) {
        st = mt->calibrate(t, L.kv_norm, NULL, alpha, err);
    } else {
        qmla_calib cal;
        st = qmla_calib_alloc(d.d_c, d.d_r, &cal, err);
        for (size_t k = 0; k < n_cells && !st; k++) {
            qmla_cell cell;
            memset(&cell, 0, sizeof cell);
            st = qmla_capture_load_cell_parts(cap, li, cells[k], 0, &cell, err);
            if (st)
                break;
            size_t T = cell.T;
            float *ql = malloc(T * d.H * d.d_c * sizeof(float));
            float *qr = malloc(T * d.H * d.d_r * sizeof(float));
            if (!ql || !qr)
                st = qmla_error_set(err, QMLA_ENOMEM, "%s calibration: out of memory", mt->name);
            for (size_t n = 0; n < cell.N && !st; n++) {
                qmla_attn_absorb(ex, &d, T, cell.q_nope + n * d.H * T * d.d_n, L.w_uk, ql);
                qmla_attn_tokens_major(d.H, T, d.d_r, cell.q_rope + n * d.H * T * d.d_r, qr);
                qmla_calib_add(&cal, T, d.H, cell.c_kv + n * T * d.d_c,
                               cell.k_rope + n * T * d.d_r, ql, qr);
            }
            free(ql);
            free(qr);
            qmla_cell_free(&cell);
        }
        if (!st)
            st = mt->calibrate(t, L.kv_norm, &cal, alpha, err);
        qmla_calib_free(&cal);
    }
    qmla_layer_free(&L);
    return st;
}

double qmla_lambda_max_sym(const double *G, size_t d)
{
    gsl_matrix *m = gsl_matrix_alloc(d, d);
    gsl_vector *ev = gsl_vector_alloc(d);
    gsl_eigen_symm_workspace *w = gsl_eigen_symm_alloc(d);
    double r = NAN;
    if (m && ev && w) {
        memcpy(m->data, G, d * d * sizeof(double)); /* tda == d for a fresh matrix */
        gsl_eigen_symm(m, ev, w);
        r = gsl_vector_max(ev);
    }
    if (w) gsl_eigen_symm_free(w);
    if (ev) gsl_vector_free(ev);
    if (m) gsl_matrix_free(m);
    return r;
}

double qmla_lambda_max_psd_prod(const double *G1, const double *G2, size_t d)
{
    /* G1 = V diag(l) V^T, R = G1^(1/2) = V diag(sqrt(max(l, 0))) V^T; the
     * eigenvalues of G1 G2 are those of the symmetric R G2 R */
    gsl_matrix *m = gsl_matrix_alloc(d, d), *v = gsl_matrix_alloc(d, d);
    gsl_vector *ev = gsl_vector_alloc(d);
    gsl_eigen_symmv_workspace *w = gsl_eigen_symmv_alloc(d);
    double *R = malloc(d * d * sizeof *R), *P = malloc(d * d * sizeof *P);
    double r = NAN;
    if (m && v && ev && w && R && P) {
        memcpy(m->data, G1, d * d * sizeof(double));
        gsl_eigen_symmv(m, ev, v, w);
        for (size_t i = 0; i < d; i++)
            for (size_t j = 0; j < d; j++) {
                double acc = 0.0;
                for (size_t k = 0; k < d; k++) {
                    const double l = gsl_vector_get(ev, k);
                    acc += gsl_matrix_get(v, i, k) * (l > 0 ? sqrt(l) : 0.0) *
                           gsl_matrix_get(v, j, k);
                }
                R[i * d + j] = acc;
            }
        for (size_t i = 0; i < d; i++) /* P = R G2 */
            for (size_t j = 0; j < d; j++) {
                double acc = 0.0;
                for (size_t k = 0; k < d; k++)
                    acc += R[i * d + k] * G2[k * d + j];
                P[i * d + j] = acc;
            }
        for (size_t i = 0; i < d; i++) /* S = P R, symmetrised, in m */
            for (size_t j = 0; j <= i; j++) {
                double a = 0.0, b = 0.0;
                for (size_t k = 0; k < d; k++) {
                    a += P[i * d + k] * R[k * d + j];
                    b += P[j * d + k] * R[k * d + i];
                }
                gsl_matrix_set(m, i, j, 0.5 * (a + b));
                gsl_matrix_set(m, j, i, 0.5 * (a + b));
            }
        r = qmla_lambda_max_sym(m->data, d);
    }
    free(R);
    free(P);
    if (w) gsl_eigen_symmv_free(w);
    if (ev) gsl_vector_free(ev);
    if (v) gsl_matrix_free(v);
    if (m) gsl_matrix_free(m);
    return r;
}

void qmla_lambda_max_psd_prod_batch(const double *G1, const double *G2, size_t n, size_t d,
                                    int threads, double *out)
{
    long nl = (long)n;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
    for (long k = 0; k < nl; k++)
        out[k] = qmla_lambda_max_psd_prod(G1 + (size_t)k * d * d, G2 + (size_t)k * d * d, d);
}

void qmla_lambda_max_sym_batch(const double *G, size_t n, size_t d, int threads, double *out)
{
    long nl = (long)n;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
    for (long k = 0; k < nl; k++)
        out[k] = qmla_lambda_max_sym(G + (size_t)k * d * d, d);
}

double qmla_spectral_norm(const float *X, size_t n, size_t d)
{
    double *G = calloc(d * d, sizeof *G);
    if (!G)
        return NAN;
    for (size_t r = 0; r < n; r++) {
        const float *x = X + r * d;
        for (size_t j = 0; j < d; j++) {
            double v = x[j];
            for (size_t k = j; k < d; k++)
                G[j * d + k] += v * x[k];
        }
    }
    for (size_t j = 0; j < d; j++)
        for (size_t k = 0; k < j; k++)
            G[j * d + k] = G[k * d + j];
    double l = qmla_lambda_max_sym(G, d);
    free(G);
    if (isnan(l)) /* out of memory, or non-finite X: never a norm of 0 */
        return NAN;
    return sqrt(l > 0 ? l : 0);
}

/* ---- the CPU engine's attention work (transform/tfeval_int.h) ------------- */

/* ‖P_h‖₂ for every head: P_h^T = W_O,h W_UV,h [D, d_c]. */
static int cpu_head_norms(void *ctx, const qmla_mla_dims *d, const qmla_mla_weights *w,
                          double *pn, qmla_error *err)
{
    (void)ctx;
    float *X = malloc(d->D * d->d_c * sizeof(float));
    double *row = malloc(d->d_c * sizeof(double));
    if (!X || !row) {
        free(X);
        free(row);
        return qmla_error_set(err, QMLA_ENOMEM, "bound: out of memory");
    }
    size_t HV = d->H * d->d_v;
    for (size_t h = 0; h < d->H; h++) {
        const float *wuv = w->w_uv + h * d->d_v * d->d_c;
        for (size_t o = 0; o < d->D; o++) {
            memset(row, 0, d->d_c * sizeof(double));
            for (size_t v = 0; v < d->d_v; v++) {
                double a = w->w_o[o * HV + h * d->d_v + v];
                const float *u = wuv + v * d->d_c;
                for (size_t j = 0; j < d->d_c; j++)
                    row[j] += a * u[j];
            }
            for (size_t j = 0; j < d->d_c; j++)
                X[o * d->d_c + j] = (float)row[j];
        }
        /* float storage of P_h^T loses ~1e-7 relative: the caller inflates
         * by 1e-5 so the bound stays an upper bound */
        pn[h] = qmla_spectral_norm(X, d->D, d->d_c);
    }
    free(X);
    free(row);
    return QMLA_OK;
}

static double sq_diff(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        double v = (double)a[i] - b[i];
        s += v * v;
    }
    return s;
}

typedef struct cpu_eval_ws {
    qmla_attn_state s0, s1;
} cpu_eval_ws;

static int cpu_eval_begin(void *ctx, const qmla_mla_dims *d, size_t T, qmla_error *err)
{
    cpu_eval_ws *w = ctx;
    int st = qmla_attn_state_alloc(d, T, 0, &w->s0, err);
    if (!st)
        st = qmla_attn_state_alloc(d, T, 0, &w->s1, err);
    return st;
}

static void cpu_eval_end(void *ctx)
{
    cpu_eval_ws *w = ctx;
    qmla_attn_state_free(&w->s0);
    qmla_attn_state_free(&w->s1);
}

static int cpu_eval_sequence(void *ctx, const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                             const qmla_mla_weights *w, const float *q_nope,
                             const float *q_rope, const float *C, const float *K,
                             const float *Ce, const float *Ke, qmla_tf_eval_sums *s,
                             qmla_error *err)
{
    cpu_eval_ws *ws = ctx;
    qmla_attn_state *s0 = &ws->s0, *s1 = &ws->s1;
    int st = qmla_attn_state_forward(ex, d, T, w, q_nope, q_rope, C, K, s0, err);
    if (st)
        return st;
    double yy = 0;
    for (size_t i = 0; i < T * d->D; i++)
        yy += (double)s0->Y[i] * s0->Y[i];
    s->yy = yy;
    const float *Cs[3] = {Ce, Ce, C}, *Ks[3] = {Ke, K, Ke};
    for (int k = 0; k < 3; k++) {
        qmla_attn_from_queries(ex, d, T, w, s0->q_lat, s0->q_rope_t, Cs[k], Ks[k], s1->A, s1->A,
                               s1->U, s1->O, s1->Y);
        s->dd[k] = sq_diff(s1->Y, s0->Y, T * d->D);
    }
    /* positional scores, masked (τ is the caller's) */
    double den = 0;
    for (size_t h = 0; h < d->H; h++) {
        double nh = 0;
        for (size_t i = 0; i < T; i++) {
            const float *q = s0->q_rope_t + (i * d->H + h) * d->d_r;
            for (size_t t = 0; t <= i; t++) {
                double z = 0, dz = 0;
                for (size_t j = 0; j < d->d_r; j++) {
                    z += (double)q[j] * K[t * d->d_r + j];
                    dz += (double)q[j] * ((double)Ke[t * d->d_r + j] - K[t * d->d_r + j]);
                }
                den += z * z;
                nh += dz * dz;
            }
        }
        s->nh[h] = nh;
    }
    s->den = den;
    s->cn = qmla_spectral_norm(C, T, d->d_c);
    return QMLA_OK;
}

int qmla_tf_eval_cell(const qmla_exec *ex, qmla_capture *cap, size_t li,
                      size_t ci, const qmla_transform *t, const float *gamma,
                      const qmla_tf_eval_opts *o, qmla_tf_eval_row *row,
                      qmla_error *err)
{
    cpu_eval_ws ws;
    memset(&ws, 0, sizeof ws);
    const qmla_tf_eval_impl im = {&ws, cpu_head_norms, cpu_eval_begin, cpu_eval_end,
                                  cpu_eval_sequence};
    return qmla_tf_eval_cell_impl(&im, ex, cap, li, ci, t, gamma, o, row, err);
}

/* ---- the cell, whichever engine --------------------------------------------- */

int qmla_tf_eval_cell_impl(const qmla_tf_eval_impl *im, const qmla_exec *ex,
                           qmla_capture *cap, size_t li, size_t ci, const qmla_transform *t,
                           const float *gamma, const qmla_tf_eval_opts *o,
                           qmla_tf_eval_row *row, qmla_error *err)
{
    const qmla_capture_config *cf = qmla_capture_get_config(cap);
    qmla_mla_dims d = dims_of(cf);
    memset(row, 0, sizeof *row);
    row->bound_ok = 1;
    if (t->d_c != d.d_c || t->d_r != d.d_r || t->pairing != cf->rope_pairing)
        return qmla_error_set(err, QMLA_EMISMATCH,
                              "transform of layer %d: expected d_c %zu, d_r %zu, %s pairing (the capture), found %zu, %zu, %s",
                              t->layer, d.d_c, d.d_r, qmla_rope_pairing_name(cf->rope_pairing), t->d_c,
                              t->d_r, qmla_rope_pairing_name(t->pairing));
    qmla_layer L;
    memset(&L, 0, sizeof L);
    qmla_cell cell;
    memset(&cell, 0, sizeof cell);
    float *Ce = NULL, *Ke = NULL, *work = NULL;
    double *pn = NULL, *nh = NULL;
    int begun = 0;
    int st = qmla_capture_load_layer(cap, li, &L, err);
    if (st)
        goto out;
    for (size_t j = 0; j < d.d_c; j++)
        if (fabs((double)gamma[j] - L.kv_norm[j]) > 1e-6 * fabs((double)L.kv_norm[j]) + 1e-30) {
            st = qmla_error_set(err, QMLA_EMISMATCH,
                                "layer %d: the transform's content/gamma[%zu] = %.9g, expected the capture's kv_norm %.9g (transforms made for another model?)",
                                L.layer, j, (double)gamma[j], (double)L.kv_norm[j]);
            goto out;
        }
    st = qmla_capture_load_cell_parts(cap, li, ci, 0, &cell, err);
    if (st)
        goto out;
    size_t T = cell.T;
    st = im->begin(im->ctx, &d, T, err);
    if (st)
        goto out;
    begun = 1;
    Ce = malloc(T * d.d_c * sizeof(float));
    Ke = malloc(T * d.d_r * sizeof(float));
    work = malloc(T * (d.d_c > d.d_r ? d.d_c : d.d_r) * sizeof(float));
    pn = malloc(d.H * sizeof(double));
    nh = malloc(d.H * sizeof(double));
    if (!Ce || !Ke || !work || !pn || !nh) {
        st = qmla_error_set(err, QMLA_ENOMEM, "eval: out of memory (T %zu)", T);
        goto out;
    }
    qmla_mla_weights w = {L.w_uk, L.w_uv, L.w_o};
    st = im->head_norms(im->ctx, &d, &w, pn, err);
    if (st)
        goto out;
    for (size_t h = 0; h < d.H; h++) {
        if (!isfinite(pn[h])) { /* an eigensolve that failed is no norm of 0 */
            st = qmla_error_set(err, QMLA_ENONFINITE,
                                "%s: layer %d: the bound's head norm ||P_h||_2 (W_O,h W_UV,h) of "
                                "head %zu is %g, expected a finite value (non-finite w_o/w_uv "
                                "weights, or the eigensolve ran out of memory)",
                                qmla_capture_path(cap), L.layer, h, pn[h]);
            goto out;
        }
        pn[h] *= 1.0 + 1e-5;
    }
    for (size_t n = 0; n < cell.N; n++) {
        const float *C = cell.c_kv + n * T * d.d_c, *K = cell.k_rope + n * T * d.d_r;
        qmla_tf_eval_sums s;
        memset(&s, 0, sizeof s);
        s.nh = nh;
        st = qmla_transform_effective_content(ex, t, gamma, &o->qc, C, T, o->sink, o->local,
                                              work, Ce, err);
        if (!st)
            st = qmla_transform_effective_rope(t, &o->qr, K, T, o->sink, o->local, work, Ke, err);
        if (!st)
            st = im->sequence(im->ctx, ex, &d, T, &w, cell.q_nope + n * d.H * T * d.d_n,
                              cell.q_rope + n * d.H * T * d.d_r, C, K, Ce, Ke, &s, err);
        if (!st && !isfinite(s.cn))
            st = qmla_error_set(err, QMLA_ENONFINITE,
                                "the bound's ||C||_2 of the cached latents is %g, expected a "
                                "finite value (non-finite c_kv, or the eigensolve ran out of "
                                "memory)", s.cn);
        if (st) {
            qmla_error_prefix(err, "%s: layer %d, cell %s, sequence %zu: ", qmla_capture_path(cap),
                              L.layer, cell.name, n);
            goto out;
        }
        double yy = s.yy;
        if (!(yy > 0))
            yy = 1e-30;
        double r[3];
        for (int k = 0; k < 3; k++)
            r[k] = s.dd[k] / yy;
        double num = 0, bsum = 0;
        for (size_t h = 0; h < d.H; h++) {
            num += nh[h];
            bsum += pn[h] * d.tau * sqrt(nh[h]);
        }
        double cn = s.cn * (1.0 + 1e-5);
        double bound = 0.5 * bsum * cn;
        double bnmse = bound * bound / yy;
        row->nmse_out += r[0];
        row->nmse_c += r[1];
        row->nmse_p += r[2];
        row->pos_err += num / (s.den > 1e-8 ? s.den : 1e-8);
        row->bound_p += bnmse;
        if (r[2] > bnmse)
            row->bound_ok = 0;
        row->n_seq++;
    }
    if (row->n_seq) {
        double k = (double)row->n_seq;
        row->nmse_out /= k;
        row->nmse_c /= k;
        row->nmse_p /= k;
        row->pos_err /= k;
        row->bound_p /= k;
    }
out:
    free(Ce);
    free(Ke);
    free(work);
    free(pn);
    free(nh);
    if (begun)
        im->end(im->ctx);
    qmla_cell_free(&cell);
    qmla_layer_free(&L);
    return st;
}

/* ---- /eval writer --------------------------------------------------------- */

#include "io/group.h"
#include "transform/run.h"

int qmla_tf_eval_write(const char *path, const char *config,
                       const char *policy, const char *command,
                       const qmla_tf_eval_rec *rows, size_t n,
                       qmla_error *err)
{
    return qmla_tf_eval_write_engine(path, config, policy, command, NULL, rows, n, err);
}

int qmla_tf_eval_write_engine(const char *path, const char *config, const char *policy,
                              const char *command, const qmla_engine *engine,
                              const qmla_tf_eval_rec *rows, size_t n, qmla_error *err)
{
    qmla_h5_out o;
    int st = qmla_h5_out_group(&o, path, "eval", err);
    if (st)
        return st;
    const hid_t g = o.g;
    int bad = 0;
    const char **meth = calloc(n + 1, sizeof *meth), **tf = calloc(n + 1, sizeof *tf),
               **cell = calloc(n + 1, sizeof *cell);
    int *layer = calloc(n + 1, sizeof *layer), *ok = calloc(n + 1, sizeof *ok);
    long long *ns = calloc(n + 1, sizeof *ns);
    double *col[6];
    for (int k = 0; k < 6; k++)
        col[k] = calloc(n + 1, sizeof(double));
    bad |= !meth || !tf || !cell || !layer || !ok || !ns;
    for (int k = 0; k < 6; k++)
        bad |= !col[k];
    for (size_t i = 0; i < n && !bad; i++) {
        meth[i] = rows[i].method;
        tf[i] = rows[i].transforms;
        cell[i] = rows[i].cell;
        layer[i] = rows[i].layer;
        ok[i] = rows[i].r.bound_ok;
        ns[i] = (long long)rows[i].r.n_seq;
        col[0][i] = rows[i].r.nmse_out;
        col[1][i] = rows[i].r.nmse_c;
        col[2][i] = rows[i].r.nmse_p;
        col[3][i] = rows[i].r.pos_err;
        col[4][i] = rows[i].r.bound_p;
    }
    if (!bad) {
        bad |= qmla_h5_attr_str(g, "config", config);
        bad |= qmla_h5_attr_str(g, "policy", policy);
        bad |= qmla_h5_attr_str(g, "command", command ? command : "");
        const qmla_prov p = {.tool = "qmla eval", .command_line = command,
                             .engine = qmla_engine_name(engine),
                             .engine_device = qmla_engine_device(engine)};
        if (!bad && (st = qmla_h5_prov(g, &p, path, err)))
            bad = 1;
        bad |= qmla_h5_dset_strs(g, "method", n, meth, "transform method (label)");
        bad |= qmla_h5_dset_strs(g, "transforms", n, tf, "transforms file");
        bad |= qmla_h5_dset_1d(g, "layer", H5T_STD_I32LE, H5T_NATIVE_INT, n, layer, "layer index", "");
        bad |= qmla_h5_dset_strs(g, "cell", n, cell, "cell name");
        bad |= qmla_h5_dset_1d(g, "n_seq", H5T_STD_I64LE, H5T_NATIVE_LLONG, n, ns, "sequences averaged", "");
        bad |= qmla_h5_dset_1d(g, "nmse_out", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, col[0],
                               "output NMSE, both caches quantized in transformed coordinates", "1");
        bad |= qmla_h5_dset_1d(g, "nmse_out_content", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, col[1],
                               "output NMSE, only the content cache quantized", "1");
        bad |= qmla_h5_dset_1d(g, "nmse_out_rope", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, col[2],
                               "output NMSE, only the RoPE cache quantized", "1");
        bad |= qmla_h5_dset_1d(g, "pos_score_err", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, col[3],
                               "positional-score error L_P (math.md section 8)", "1");
        bad |= qmla_h5_dset_1d(g, "rope_bound_nmse", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, col[4],
                               "App. C.3 bound on nmse_out_rope (squared, over |Y|^2)", "1");
        bad |= qmla_h5_dset_1d(g, "bound_ok", H5T_STD_I8LE, H5T_NATIVE_INT, n, ok,
                               "1 when every sequence had nmse_out_rope <= its bound", "");
    }
    free(meth); free(tf); free(cell); free(layer); free(ok); free(ns);
    for (int k = 0; k < 6; k++)
        free(col[k]);
    if (bad && !st) {
        char msg[256];
        qmla_h5_error_text(msg, sizeof msg);
        st = qmla_error_set(err, QMLA_EIO, "%s: building group /eval: %s", path, msg);
    }
    return qmla_h5_out_finish(&o, st);
}
