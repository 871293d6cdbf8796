/* jvp.c — exact JVP of the MLA attention output in the caches, single-token
 * JVPs, and exact / Hutchinson token sensitivities (include/qmla/jvp.h,
 * docs/math.md §5). Float32 products through CBLAS on the clean pass of
 * lib/attention/attention.c; traces and norms accumulated in double.
 *
 * Exact sensitivities, the algebra the code follows (one query row i, one
 * key token t <= i, a_h = A_h[i,t], y_th = c_t W_UV,h^T, O_hi the head
 * output, δ_h = y_th − O_hi, K_hh' = W_O,h^T W_O,h', x_{h,h'} = q_hi
 * W_UV,h'^T):
 *   ||M_i||^2 = Σ_{h,h'} a_h a_h' [ τ² (q_h·q_h') δ_h K_hh' δ_h'^T
 *                                  + 2τ x_{h,h'} K_h'h δ_h^T + <P_h,P_h'> ]
 * (the cross term doubled by the symmetry of a_h a_h'). Expanding δ:
 *   δ_h K_hh' δ_h'^T = yy_t[h,h'] − 2·(y_th·(O_h'i K_h'h)) + oo_i[h,h']
 * under the symmetric weights, and x K δ^T = x K y^T − x K O^T. The only
 * terms that need both i and t are y_tg·(O_ki K_kg) and y_tg·(x_{g,k} K_kg):
 * for a block of query rows and one head g, one GEMM of the key tokens'
 * y_tg [t, d_v] against those 2·H·Bi vectors. RoPE: q from Q_P, no P_h and
 * no cross term. */
#include "qmla/jvp.h"
#include "core/alloc.h"
#include "qmla_config.h"

#include <cblas.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if QMLA_HAVE_OPENMP
#include <omp.h>
/* num_threads from a local `nt` */
#define JVP_OMP_FOR(n) _Pragma("omp parallel for schedule(dynamic, 1) num_threads(nt)")
static int thread_id(void) { return omp_get_thread_num(); }
#else
#define JVP_OMP_FOR(n)
static int thread_id(void) { return 0; }
#endif

static float *falloc(size_t n, qmla_error *err, const char *what)
{
    return qmla_alloc_big((n ? n : 1) * sizeof(float), err, what);
}

/* ---- JVP ---------------------------------------------------------------- */

int qmla_jvp_ws_alloc(const qmla_mla_dims *d, size_t T, qmla_jvp_ws *ws,
                      qmla_error *err)
{
    memset(ws, 0, sizeof *ws);
    ws->T_max = T;
    const size_t H = d->H;
    if (!(ws->dZ = falloc(H * T * T, err, "JVP logit change")) ||
        !(ws->dU = falloc(T * H * d->d_c, err, "JVP latent change")) ||
        !(ws->dO = falloc(T * H * d->d_v, err, "JVP head outputs")) ||
        !(ws->dY = falloc(T * d->D, err, "JVP output change"))) {
        qmla_jvp_ws_free(ws);
        return err ? err->status : QMLA_ENOMEM;
    }
    return QMLA_OK;
}

double qmla_jvp_ws_bytes(const qmla_mla_dims *d, size_t T)
{
    const double t = (double)T, H = (double)d->H;
    return 4.0 * (H * t * t + t * H * (double)d->d_c + t * H * (double)d->d_v +
                  t * (double)d->D);
}

void qmla_jvp_ws_free(qmla_jvp_ws *ws)
{
    if (!ws)
        return;
    free(ws->dZ);
    free(ws->dU);
    free(ws->dO);
    free(ws->dY);
    memset(ws, 0, sizeof *ws);
}

int qmla_jvp_apply(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                   const qmla_mla_weights *w, const qmla_attn_state *st,
                   const float *C, const float *dC, const float *dK,
                   qmla_jvp_ws *ws, qmla_error *err)
{
    if (T == 0 || T > st->T_max || T > ws->T_max)
        return qmla_error_set(err, QMLA_EINVAL,
                              "JVP: T = %zu outside [1, %zu]", T,
                              st->T_max < ws->T_max ? st->T_max : ws->T_max);
    if (!dC && !dK)
        return qmla_error_set(err, QMLA_EINVAL,
                              "JVP: expected a content or RoPE direction, found neither");
    const size_t H = d->H;
    const float tau = (float)d->tau;
    if (dC)
        qmla_attn_logits_acc(ex, H, T, d->d_c, tau, st->q_lat, dC, 0.0f, ws->dZ);
    if (dK)
        qmla_attn_logits_acc(ex, H, T, d->d_r, tau, st->q_rope_t, dK,
                             dC ? 1.0f : 0.0f, ws->dZ);
    qmla_attn_softmax_jvp(ex, H, T, st->A, ws->dZ, ws->dZ);
    qmla_attn_aggregate(ex, H, T, d->d_c, ws->dZ, C, 0.0f, ws->dU);
    if (dC)
        qmla_attn_aggregate(ex, H, T, d->d_c, st->A, dC, 1.0f, ws->dU);
    qmla_attn_project(ex, d, T, 1, w, ws->dU, ws->dO, ws->dY);
    return QMLA_OK;
}

double qmla_jvp_token(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                      const qmla_mla_weights *w, const qmla_attn_state *st,
                      const float *C, int path, size_t t, const float *e,
                      qmla_jvp_ws *ws)
{
    if (T == 0 || T > st->T_max || T > ws->T_max || t >= T ||
        (path != QMLA_JVP_CONTENT && path != QMLA_JVP_ROPE))
        return -1.0;
    const size_t H = d->H, dc = d->d_c, D = d->D, n = T - t;
    const int content = path == QMLA_JVP_CONTENT;
    const size_t wd = content ? dc : d->d_r;
    const float *Q = content ? st->q_lat : st->q_rope_t;
    const double tau = d->tau;
    const float *ct = C + t * dc;
    for (size_t i = t; i < T; i++)
        for (size_t h = 0; h < H; h++) {
            const float a = st->A[(i * H + h) * T + t];
            const float *q = Q + (i * H + h) * wd, *u = st->U + (i * H + h) * dc;
            float *du = ws->dU + ((i - t) * H + h) * dc;
            double s = 0.0;
            for (size_t j = 0; j < wd; j++)
                s += (double)q[j] * (double)e[j];
            const float as = (float)(a * tau * s);
            for (size_t j = 0; j < dc; j++)
                du[j] = as * (ct[j] - u[j]);
            if (content)
                for (size_t j = 0; j < dc; j++)
                    du[j] += a * e[j];
        }
    memset(ws->dY, 0, t * D * sizeof(float));
    qmla_attn_project(ex, d, n, 1, w, ws->dU, ws->dO, ws->dY + t * D);
    double ss = 0.0;
    for (size_t k = t * D; k < T * D; k++)
        ss += (double)ws->dY[k] * (double)ws->dY[k];
    return ss;
}

/* ---- exact sensitivities ------------------------------------------------- */

int qmla_sens_layer_init(const qmla_exec *ex, const qmla_mla_dims *d,
                         const qmla_mla_weights *w, qmla_sens_layer *L,
                         qmla_error *err)
{
    memset(L, 0, sizeof *L);
    const size_t H = d->H, dv = d->d_v, dc = d->d_c, D = d->D, HV = H * dv;
    L->H = H;
    L->d_v = dv;
    float *M = NULL;
    if (!(L->K = falloc(HV * HV, err, "W_O^T W_O")) ||
        !(M = falloc(HV * HV, err, "W_UV Gram")) ||
        !(L->G = malloc(H * H * sizeof *L->G))) {
        free(M);
        qmla_sens_layer_free(L);
        return qmla_error_set(err, QMLA_ENOMEM, "sensitivities: out of memory "
                              "for the layer constants (%zu x %zu floats)", HV, HV);
    }
    const int nt = qmla_exec_threads(ex);
    /* K = w_o^T w_o in row panels of one head. */
    JVP_OMP_FOR(nt)
    for (size_t h = 0; h < H; h++)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)dv, (int)HV,
                    (int)D, 1.0f, w->w_o + h * dv, (int)HV, w->w_o, (int)HV,
                    0.0f, L->K + h * dv * HV, (int)HV);
    /* M[h] = w_uv[h] w_uv_all^T, G[h][h'] = <M block (h,h'), K_hh'>. */
    JVP_OMP_FOR(nt)
    for (size_t h = 0; h < H; h++) {
        float *Mh = M + h * dv * HV;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)dv, (int)HV,
                    (int)dc, 1.0f, w->w_uv + h * dv * dc, (int)dc, w->w_uv,
                    (int)dc, 0.0f, Mh, (int)HV);
        for (size_t h2 = 0; h2 < H; h2++) {
            double g = 0.0;
            for (size_t a = 0; a < dv; a++) {
                const float *m = Mh + a * HV + h2 * dv;
                const float *k = L->K + (h * dv + a) * HV + h2 * dv;
                for (size_t b = 0; b < dv; b++)
                    g += (double)m[b] * (double)k[b];
            }
            L->G[h * H + h2] = g;
        }
    }
    free(M);
    return QMLA_OK;
}

void qmla_sens_layer_free(qmla_sens_layer *L)
{
    if (!L)
        return;
    free(L->K);
    free(L->G);
    memset(L, 0, sizeof *L);
}

/* Query rows per block: about 256 GEMM rows (block x heads). */
static size_t sens_block(size_t H)
{
    size_t b = (256 + H - 1) / H;
    return b < 1 ? 1 : b;
}

/* Per-thread float scratch: xq, OK and X2 [Bi, H, H*d_v] each, W [2 Bi H,
 * d_v], Rm [T, 2 Bi H], At [Bi, T, H]. */
static size_t sens_scratch_floats(const qmla_mla_dims *d, size_t T, size_t Bi)
{
    const size_t H = d->H, HV = H * d->d_v;
    return 3 * Bi * H * HV + 2 * Bi * H * d->d_v + T * 2 * Bi * H + Bi * T * H;
}

int qmla_sens_ws_alloc(const qmla_mla_dims *d, size_t T, int threads,
                       qmla_sens_ws *ws, qmla_error *err)
{
    memset(ws, 0, sizeof *ws);
    const size_t H = d->H, HV = H * d->d_v;
    ws->T_max = T;
    ws->Bi = sens_block(H);
    ws->nthreads = threads < 1 ? 1 : (size_t)threads;
    const size_t nb = (T + ws->Bi - 1) / ws->Bi;
    const size_t per = sens_scratch_floats(d, T, ws->Bi);
    if (!(ws->Yc = falloc(T * HV, err, "sensitivity values")) ||
        !(ws->yy = qmla_alloc_big(T * H * H * sizeof(double), err, "sensitivity Gram yy")) ||
        !(ws->oo = qmla_alloc_big(T * H * H * sizeof(double), err, "sensitivity Gram oo")) ||
        !(ws->qc = qmla_alloc_big(T * H * H * sizeof(double), err, "content query Gram")) ||
        !(ws->qr = qmla_alloc_big(T * H * H * sizeof(double), err, "positional query Gram")) ||
        !(ws->part = qmla_alloc_big(2 * nb * T * sizeof(double), err, "sensitivity partial traces")) ||
        !(ws->scratch = falloc(ws->nthreads * per, err, "sensitivity scratch")) ||
        !(ws->dscratch = qmla_alloc_big(ws->nthreads * 2 * ws->Bi * H * H * sizeof(double),
                                        err, "sensitivity pair constants"))) {
        qmla_sens_ws_free(ws);
        return err ? err->status : QMLA_ENOMEM;
    }
    return QMLA_OK;
}

double qmla_sens_ws_bytes(const qmla_mla_dims *d, size_t T, int threads)
{
    const size_t H = d->H, HV = H * d->d_v, Bi = sens_block(H);
    const double nt = threads < 1 ? 1.0 : (double)threads, t = (double)T;
    const double nb = (double)((T + Bi - 1) / Bi);
    return 4.0 * (t * (double)HV + nt * (double)sens_scratch_floats(d, T, Bi)) +
           8.0 * (4.0 * t * (double)(H * H) + 2.0 * nb * t +
                  nt * 2.0 * (double)(Bi * H * H));
}

void qmla_sens_ws_free(qmla_sens_ws *ws)
{
    if (!ws)
        return;
    free(ws->Yc);
    free(ws->yy);
    free(ws->oo);
    free(ws->qc);
    free(ws->qr);
    free(ws->part);
    free(ws->scratch);
    free(ws->dscratch);
    memset(ws, 0, sizeof *ws);
}

static double ddot(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t k = 0; k < n; k++)
        s += (double)a[k] * (double)b[k];
    return s;
}

/* G[t][h][h'] = (X_th K_hh') · X_th' for rows [t0, t0+nt) of X [T, H*d_v];
 * S scratch [nt, H*d_v]. */
static void head_gram(const qmla_mla_dims *d, const float *K, const float *X,
                      size_t t0, size_t nt, float *S, double *G)
{
    const size_t H = d->H, dv = d->d_v, HV = H * dv;
    for (size_t h = 0; h < H; h++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nt, (int)HV,
                    (int)dv, 1.0f, X + t0 * HV + h * dv, (int)HV, K + h * dv * HV,
                    (int)HV, 0.0f, S, (int)HV);
        for (size_t tl = 0; tl < nt; tl++)
            for (size_t h2 = 0; h2 < H; h2++)
                G[((t0 + tl) * H + h) * H + h2] =
                    ddot(S + tl * HV + h2 * dv, X + (t0 + tl) * HV + h2 * dv, dv);
    }
}

/* One block of query rows [i0, i0+ni): adds every pair (i, t <= i) into
 * part_c / part_r [T] (this block's rows of ws->part). */
static void sens_block_rows(const qmla_mla_dims *d, size_t T,
                            const qmla_mla_weights *w, const qmla_sens_layer *L,
                            const qmla_attn_state *st, const qmla_sens_ws *ws,
                            size_t i0, size_t ni, float *sc, double *dsc,
                            double *part_c, double *part_r)
{
    const size_t H = d->H, dv = d->d_v, dc = d->d_c, HV = H * dv, Bi = ws->Bi;
    const size_t i1 = i0 + ni, HH = H * H, W2 = 2 * ni * H;
    const double tau = d->tau, tau2 = tau * tau;
    const float *K = L->K, *O = st->O;
    float *xq = sc, *OKb = xq + Bi * H * HV, *X2 = OKb + Bi * H * HV;
    float *Wg = X2 + Bi * H * HV, *Rm = Wg + 2 * Bi * H * dv;
    float *At = Rm + T * 2 * Bi * H;
    double *Cc = dsc, *Cr = dsc + Bi * HH;

    /* xq[il][g][k dv + j] = q_g,i · w_uv[k][j] */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(ni * H), (int)HV,
                (int)dc, 1.0f, st->q_lat + i0 * H * dc, (int)dc, w->w_uv, (int)dc,
                0.0f, xq, (int)HV);
    /* OKb[il][k][g dv + j] = (O_k,i K_kg)_j */
    for (size_t k = 0; k < H; k++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)ni, (int)HV,
                    (int)dv, 1.0f, O + i0 * HV + k * dv, (int)HV, K + k * dv * HV,
                    (int)HV, 0.0f, OKb + k * HV, (int)(H * HV));
    /* X2[il][g][k] = x_{g,k,i} K_kg */
    for (size_t g = 0; g < H; g++)
        for (size_t k = 0; k < H; k++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)ni, (int)dv,
                        (int)dv, 1.0f, xq + g * HV + k * dv, (int)(H * HV),
                        K + k * dv * HV + g * dv, (int)HV, 0.0f,
                        X2 + g * HV + k * dv, (int)(H * HV));
    /* Pair constants of each query row, and the attention columns. */
    for (size_t il = 0; il < ni; il++) {
        const size_t i = i0 + il;
        const double *qc = ws->qc + i * HH, *qr = ws->qr + i * HH,
                     *oo = ws->oo + i * HH;
        for (size_t g = 0; g < H; g++)
            for (size_t k = 0; k < H; k++) {
                const double xo = ddot(X2 + (il * H + g) * HV + k * dv,
                                       O + i * HV + g * dv, dv);
                Cc[il * HH + g * H + k] = tau2 * qc[g * H + k] * oo[g * H + k] -
                                          2.0 * tau * xo + L->G[g * H + k];
                Cr[il * HH + g * H + k] = tau2 * qr[g * H + k] * oo[g * H + k];
            }
        for (size_t k = 0; k < H; k++) {
            const float *arow = st->A + (i * H + k) * T;
            for (size_t t = 0; t <= i; t++)
                At[(il * T + t) * H + k] = arow[t];
        }
    }
    /* Terms of one pair that need no GEMM. */
    for (size_t il = 0; il < ni; il++) {
        const size_t i = i0 + il;
        const double *qc = ws->qc + i * HH, *qr = ws->qr + i * HH;
        for (size_t t = 0; t <= i; t++) {
            const float *a = At + (il * T + t) * H;
            const double *yy = ws->yy + t * HH;
            double sc_ = 0.0, sr_ = 0.0;
            for (size_t g = 0; g < H; g++) {
                double rc = 0.0, rr = 0.0;
                for (size_t k = 0; k < H; k++) {
                    const size_t gk = g * H + k;
                    rc += a[k] * (Cc[il * HH + gk] + tau2 * qc[gk] * yy[gk]);
                    rr += a[k] * (Cr[il * HH + gk] + tau2 * qr[gk] * yy[gk]);
                }
                sc_ += a[g] * rc;
                sr_ += a[g] * rr;
            }
            part_c[t] += sc_;
            part_r[t] += sr_;
        }
    }
    /* The pairwise GEMM terms, one value head g at a time. */
    for (size_t g = 0; g < H; g++) {
        for (size_t il = 0; il < ni; il++)
            for (size_t k = 0; k < H; k++) {
                memcpy(Wg + (il * 2 * H + k) * dv, OKb + (il * H + k) * HV + g * dv,
                       dv * sizeof(float));
                memcpy(Wg + (il * 2 * H + H + k) * dv, X2 + (il * H + g) * HV + k * dv,
                       dv * sizeof(float));
            }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)i1, (int)W2,
                    (int)dv, 1.0f, ws->Yc + g * dv, (int)HV, Wg, (int)dv, 0.0f, Rm,
                    (int)W2);
        for (size_t il = 0; il < ni; il++) {
            const size_t i = i0 + il;
            const double *qc = ws->qc + i * HH + g * H, *qr = ws->qr + i * HH + g * H;
            for (size_t t = 0; t <= i; t++) {
                const float *a = At + (il * T + t) * H;
                if (a[g] == 0.0f)
                    continue;
                const float *r0 = Rm + t * W2 + il * 2 * H, *r1 = r0 + H;
                double s0 = 0.0, s1 = 0.0, sr0 = 0.0;
                for (size_t k = 0; k < H; k++) {
                    s0 += a[k] * qc[k] * r0[k];
                    sr0 += a[k] * qr[k] * r0[k];
                    s1 += a[k] * r1[k];
                }
                part_c[t] += a[g] * (2.0 * tau * s1 - 2.0 * tau2 * s0);
                part_r[t] += a[g] * (-2.0 * tau2 * sr0);
            }
        }
    }
}

int qmla_sens_exact(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                    const qmla_mla_weights *w, const qmla_sens_layer *L,
                    const qmla_attn_state *st, const float *C,
                    qmla_sens_ws *ws, double *trc, double *trr,
                    qmla_error *err)
{
    const int nt = qmla_exec_threads(ex);
    if (T == 0 || T > ws->T_max || T > st->T_max)
        return qmla_error_set(err, QMLA_EINVAL, "sensitivities: T = %zu outside [1, %zu]",
                              T, ws->T_max);
    if ((size_t)nt > ws->nthreads)
        return qmla_error_set(err, QMLA_EINVAL,
                              "sensitivities: %d threads, workspace sized for %zu", nt,
                              ws->nthreads);
    if (L->H != d->H || L->d_v != d->d_v)
        return qmla_error_set(err, QMLA_EINVAL,
                              "sensitivities: layer constants for H = %zu, d_v = %zu, "
                              "found H = %zu, d_v = %zu", d->H, d->d_v, L->H, L->d_v);
    const size_t H = d->H, dv = d->d_v, dc = d->d_c, dr = d->d_r, HV = H * dv;
    const size_t Bi = ws->Bi, nb = (T + Bi - 1) / Bi, HH = H * H;
    const size_t per = sens_scratch_floats(d, ws->T_max, Bi);

    /* y_th = c_t W_UV,h^T for all heads: [T, H*d_v]. */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)HV, (int)dc,
                1.0f, C, (int)dc, w->w_uv, (int)dc, 0.0f, ws->Yc, (int)HV);
    /* Per-token Grams (blocks of Bi tokens). */
    JVP_OMP_FOR(nt)
    for (size_t b = 0; b < nb; b++) {
        const size_t t0 = b * Bi, n = t0 + Bi <= T ? Bi : T - t0;
        float *S = ws->scratch + (size_t)thread_id() * per;
        head_gram(d, L->K, ws->Yc, t0, n, S, ws->yy);
        head_gram(d, L->K, st->O, t0, n, S, ws->oo);
        for (size_t t = t0; t < t0 + n; t++)
            for (size_t g = 0; g < H; g++)
                for (size_t k = g; k < H; k++) {
                    const double c = ddot(st->q_lat + (t * H + g) * dc,
                                          st->q_lat + (t * H + k) * dc, dc);
                    const double r = ddot(st->q_rope_t + (t * H + g) * dr,
                                          st->q_rope_t + (t * H + k) * dr, dr);
                    ws->qc[t * HH + g * H + k] = ws->qc[t * HH + k * H + g] = c;
                    ws->qr[t * HH + g * H + k] = ws->qr[t * HH + k * H + g] = r;
                }
    }
    memset(ws->part, 0, 2 * nb * T * sizeof(double));
    /* Query-row blocks, largest (latest) first. */
    JVP_OMP_FOR(nt)
    for (size_t k = 0; k < nb; k++) {
        const size_t b = nb - 1 - k, i0 = b * Bi, ni = i0 + Bi <= T ? Bi : T - i0;
        const int id = thread_id();
        sens_block_rows(d, T, w, L, st, ws, i0, ni, ws->scratch + (size_t)id * per,
                        ws->dscratch + (size_t)id * 2 * Bi * HH, ws->part + b * T,
                        ws->part + (nb + b) * T);
    }
    for (size_t t = 0; t < T; t++) {
        double c = 0.0, r = 0.0;
        for (size_t b = t / Bi; b < nb; b++) {
            c += ws->part[b * T + t];
            r += ws->part[(nb + b) * T + t];
        }
        trc[t] = c / (double)dc;
        trr[t] = r / (double)dr;
    }
    return QMLA_OK;
}

double qmla_sens_flops(const qmla_mla_dims *d, size_t T)
{
    const double H = (double)d->H, dv = (double)d->d_v, dc = (double)d->d_c;
    const double dr = (double)d->d_r, HV = H * dv, t = (double)T;
    const double pairs = t * (t + 1.0) / 2.0;
    const double values = 2 * t * dc * HV;
    const double grams = 2 * (2 * t * HV * HV + 2 * t * H * HV) +
                         t * H * H * (dc + dr);
    const double rows = 2 * t * H * dc * HV + 2 * t * H * dv * HV +
                        2 * t * H * H * dv * dv + 2 * t * H * H * dv;
    const double pairwise = 2 * 2 * pairs * H * H * dv + 12 * pairs * H * H;
    return values + grams + rows + pairwise;
}

/* ---- Hutchinson ------------------------------------------------------- */

int qmla_sens_hutchinson(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                         const qmla_mla_weights *w, const qmla_attn_state *st,
                         const float *C, int path, size_t probes,
                         uint64_t seed, qmla_jvp_ws *ws, double *est,
                         double *se, qmla_error *err)
{
    if (T == 0 || T > ws->T_max || T > st->T_max)
        return qmla_error_set(err, QMLA_EINVAL, "Hutchinson: T = %zu outside [1, %zu]",
                              T, ws->T_max);
    if (probes == 0 || (path != QMLA_JVP_CONTENT && path != QMLA_JVP_ROPE))
        return qmla_error_set(err, QMLA_EINVAL,
                              "Hutchinson: expected >= 1 probe and a path 0/1, found "
                              "%zu probes, path %d", probes, path);
    const size_t wd = path == QMLA_JVP_CONTENT ? d->d_c : d->d_r;
    float *r = malloc(wd * sizeof *r);
    double *sq = calloc(T, sizeof *sq);
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    if (!r || !sq || !rng) {
        free(r);
        free(sq);
        if (rng)
            gsl_rng_free(rng);
        return qmla_error_set(err, QMLA_ENOMEM, "Hutchinson: out of memory");
    }
    gsl_rng_set(rng, (unsigned long)seed);
    for (size_t t = 0; t < T; t++)
        est[t] = 0.0;
    for (size_t p = 0; p < probes; p++)
        for (size_t t = 0; t < T; t++) {
            for (size_t j = 0; j < wd; j++)
                r[j] = (gsl_rng_get(rng) & 1u) ? 1.0f : -1.0f;
            const double v = qmla_jvp_token(ex, d, T, w, st, C, path, t, r, ws) /
                             (double)wd;
            est[t] += v;
            sq[t] += v * v;
        }
    const double m = (double)probes;
    for (size_t t = 0; t < T; t++) {
        const double mean = est[t] / m;
        const double var = probes > 1 ? (sq[t] - m * mean * mean) / (m - 1.0) : 0.0;
        est[t] = mean;
        se[t] = probes > 1 && var > 0.0 ? sqrt(var / m) : 0.0;
    }
    gsl_rng_free(rng);
    free(r);
    free(sq);
    return QMLA_OK;
}
