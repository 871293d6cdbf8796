/* learn.c — function-aligned learning of the content and RoPE transforms:
 * objectives, hand-derived gradients (attention backward, Cayley backward,
 * straight-through quantizer), AdamW with warm-up and cosine decay, best
 * step on a held-out bank (qmla/learn.h, docs/math.md §8). */
#include "qmla/learn.h"

#include <cblas.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "transform/learn_int.h"

/* LAPACK from OpenBLAS (column-major). */
extern void dgetrf_(const int *m, const int *n, double *a, const int *lda,
                    int *ipiv, int *info);
extern void dgetrs_(const char *trans, const int *n, const int *nrhs,
                    const double *a, const int *lda, const int *ipiv,
                    double *b, const int *ldb, int *info);

qmla_learn_opts qmla_learn_defaults(void)
{
    qmla_learn_opts o;
    memset(&o, 0, sizeof o);
    o.quant = qmla_quant_defaults();
    o.steps = 300;
    o.lr = 5e-3;
    o.warmup = 0.1;
    o.seed = 0;
    o.threads = 1;
    return o;
}

/* Per-sequence precomputation (one bank). */
typedef struct seqws {
    size_t T;
    const float *C, *K; /* views [T, d_c], [T, d_r] */
    const float *qn, *qr; /* views [H, T, d_n], [H, T, d_r] (head-major) */
    float *Cg;          /* [T, d_c] C diag(1/γ) (content) */
    float *q_lat;       /* [T, H, d_c] absorbed queries (content) */
    float *q_rope_t;    /* [T, H, d_r] */
    float *Y;           /* [T, D] clean output (content) */
    double yden;        /* max(‖Y‖², N_Y 1e-8) */
    double *Gam;        /* [T, d_r, d_r] suffix sums Γ_s (RoPE) */
    double pden;        /* max(Σ_s k_s^T Γ_s k_s, 1e-8) */
    float *rfz;         /* [T, width] frozen residuals, or NULL */
    int bank;           /* its bank and index there */
    size_t idx;
} seqws;

/* Per-thread scratch, sized for the longest sequence. */
typedef struct scratch {
    float *V, *W, *Wh, *Ws, *Ct, *A, *GA, *U, *O, *Yt, *GY, *GO, *GU, *GC, *GW, *r;
    float *Kc, *Vc, *GK, *GV; /* fast path: [T, H d_n], [T, H d_v] and gradients */
    int *imin, *imax;
    double *gs;  /* [d_c] or [d_r] */
    float *gR;   /* [d_c, d_c] */
    /* attn_f64: the per-head form's buffers in double and the sequence's
     * inputs widened (allocated at the first use of the CPU's double
     * attention: an engine's attention does not need them), and the
     * backward to the parameters in double: G_C~, G_W, Ws, Cg [T, d_c] and
     * gR [d_c, d_c] (allocated with the learner) */
    double *Ct64, *Kc64, *Vc64, *A64, *GA64, *O64, *Yt64, *GY64, *GO64, *GK64, *GV64;
    double *qn64, *qr64, *K64, *Y64;
    double *GC64, *GW64, *GX64, *Ws64, *Cg64, *gR64;
} scratch;

struct qmla_learner {
    qmla_learn_path path;
    qmla_mla_dims d;
    qmla_mla_weights w;
    const float *gamma;
    qmla_rope_pairing pairing;
    qmla_learn_opts o;
    size_t width, n_params, n_pairs, Tmax;
    int nth;
    seqws *bank[2];
    size_t nseq[2];
    scratch *sc;
    /* per-sequence gradient slots [nseq_max][n_grad] */
    double *gslot;
    size_t n_grad;
    double *fslot;
    int *stslot;
    double *tslot; /* [nseq_max][3] forward, backward, qdq seconds */
    /* parameters and optimiser */
    double *p, *best, *m, *v, *grad;
    /* Cayley */
    double *Sfull, *LU, *Cay, *Z;
    int *ipiv;
    double *pcay; /* the S parameters LU and Cay belong to (when cay_ok) */
    int cay_ok;
    float *Rf; /* [d_c, d_c] R as float */
    double *wuk64, *wuv64, *wo64; /* attn_f64: w_uk, w_uv, w_o in double (first use) */
    double *Rf64;                 /* attn_f64: Rf widened [d_c, d_c] */
    qmla_learn_state st;
    qmla_calib cal;
    qmla_learn_attn attn; /* an engine's content attention (attn.content NULL: attn_fast) */
};

/* ---- straight-through quantizer ------------------------------------------ */

/* Wh = QDQ(W) (true quantizer) and r = (Wh - W)/scale_f, or with frozen
 * residuals rin: Wh = W + rin·scale_f. Group extrema indices and
 * scale_f = (max - min)/L (double) per group. */
static int ste_fwd(const qmla_quant_params *p, const float *W, size_t T,
                   size_t width, const float *rin, float *r, float *Wh,
                   int *imin, int *imax, qmla_error *err)
{
    size_t G = qmla_quant_group_size(p, width), ng = width / G;
    double L = (double)((1 << p->bits) - 1);
    if (!rin) {
        int st = qmla_quant_qdq(p, W, T, width, NULL, NULL, NULL, Wh, err);
        if (st)
            return st;
    }
    for (size_t t = 0; t < T; t++)
        for (size_t g = 0; g < ng; g++) {
            const float *x = W + t * width + g * G;
            size_t a = 0, b = 0;
            for (size_t j = 1; j < G; j++) {
                if (x[j] < x[a]) a = j;
                if (x[j] > x[b]) b = j;
            }
            imin[t * ng + g] = (int)a;
            imax[t * ng + g] = (int)b;
            double sc = ((double)x[b] - x[a]) / L;
            for (size_t j = 0; j < G; j++) {
                size_t i = t * width + g * G + j;
                if (rin) {
                    r[i] = rin[i];
                    Wh[i] = (float)(W[i] + (double)rin[i] * sc);
                } else {
                    r[i] = sc > 0 ? (float)(((double)Wh[i] - W[i]) / sc) : 0.0f;
                }
            }
        }
    return QMLA_OK;
}

static void ste_bwd(const qmla_quant_params *p, size_t T, size_t width,
                    const float *GWh, const float *r, const int *imin,
                    const int *imax, float *GW)
{
    size_t G = qmla_quant_group_size(p, width), ng = width / G;
    double L = (double)((1 << p->bits) - 1);
    memcpy(GW, GWh, T * width * sizeof(float));
    for (size_t t = 0; t < T; t++)
        for (size_t g = 0; g < ng; g++) {
            size_t o = t * width + g * G;
            double c = 0;
            for (size_t j = 0; j < G; j++)
                c += (double)GWh[o + j] * r[o + j];
            c /= L;
            GW[o + imax[t * ng + g]] += (float)c;
            GW[o + imin[t * ng + g]] -= (float)c;
        }
}

/* ste_bwd in double: GW = GWh plus the group scale's and minimum's terms. */
static void ste_bwd64(const qmla_quant_params *p, size_t T, size_t width, const double *GWh,
                      const float *r, const int *imin, const int *imax, double *GW)
{
    size_t G = qmla_quant_group_size(p, width), ng = width / G;
    double L = (double)((1 << p->bits) - 1);
    memcpy(GW, GWh, T * width * sizeof(double));
    for (size_t t = 0; t < T; t++)
        for (size_t g = 0; g < ng; g++) {
            size_t o = t * width + g * G;
            double c = 0;
            for (size_t j = 0; j < G; j++)
                c += GWh[o + j] * r[o + j];
            c /= L;
            GW[o + imax[t * ng + g]] += c;
            GW[o + imin[t * ng + g]] -= c;
        }
}

/* ---- content path: the attention part ------------------------------------ */

/* Reference (absorbed form, as in qmla/attention.h): logits and aggregation
 * through the d_c-wide latents, the backward's A_hᵀ G_U,h, G_U,h C̃ᵀ and
 * G_Z,hᵀ Q_C,h per head on full T×T blocks. Kept as the oracle of the fast
 * path (tests/transform/test_learn.c) and its benchmark baseline (bench/bench_learn.c).
 * Ct [T, d_c] -> *f; with want_grad, GC = ∂f/∂Ct. */

/* The output objective ||Yt - Y||^2 / yden, and its gradient with respect to
 * Yt into GY (float). */
static double out_loss(const float *Yt, const float *Y, double yden, size_t n, float *GY)
{
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        const double v = (double)Yt[i] - Y[i];
        e += v * v;
        GY[i] = (float)(2.0 * v / yden);
    }
    return e / yden;
}

/* The common tail of both attention paths' forward: the objective into *f,
 * the forward time (since a0) into tm[0]; with want_grad, GO = GY w_o
 * [T, H d_v] and 1 (the backward goes on), else 0. */
static int out_loss_go(const qmla_learner *l, const seqws *q, scratch *s, int want_grad,
                       double *f, double *tm, double a0)
{
    const size_t T = q->T, D = l->d.D, HV = l->d.H * l->d.d_v;
    *f = out_loss(s->Yt, q->Y, q->yden, T * D, s->GY);
    tm[0] += omp_get_wtime() - a0;
    if (!want_grad)
        return 0;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)HV, (int)D, 1.0f, s->GY,
                (int)D, l->w.w_o, (int)HV, 0.0f, s->GO, (int)HV);
    return 1;
}

static void attn_ref(qmla_learner *l, seqws *q, scratch *s, int want_grad, double *f, double *tm)
{
    double a0 = omp_get_wtime();
    const qmla_mla_dims *d = &l->d;
    size_t T = q->T, dc = d->d_c, H = d->H, HV = d->H * d->d_v;
    qmla_exec ex1 = qmla_exec_cpu(1);
    float tau = (float)d->tau;
    qmla_attn_logits_acc(&ex1, H, T, dc, tau, q->q_lat, s->Ct, 0.0f, s->A);
    qmla_attn_logits_acc(&ex1, H, T, d->d_r, tau, q->q_rope_t, q->K, 1.0f, s->A);
    qmla_attn_softmax(&ex1, H, T, s->A, s->A);
    qmla_attn_aggregate(&ex1, H, T, dc, s->A, s->Ct, 0.0f, s->U);
    qmla_attn_project(&ex1, d, T, 1, &l->w, s->U, s->O, s->Yt);
    if (!out_loss_go(l, q, s, want_grad, f, tm, a0))
        return;
    double a1 = omp_get_wtime();
    /* GU_h = GO_h w_uv[h] */
    for (size_t h = 0; h < H; h++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)dc, (int)d->d_v, 1.0f,
                    s->GO + h * d->d_v, (int)HV, l->w.w_uv + h * d->d_v * dc, (int)dc, 0.0f,
                    s->GU + h * dc, (int)(H * dc));
    /* GC = Σ_h A_h^T GU_h; GA_h = GU_h Ct^T */
    memset(s->GC, 0, T * dc * sizeof(float));
    for (size_t h = 0; h < H; h++) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)T, (int)dc, (int)T, 1.0f,
                    s->A + h * T, (int)(H * T), s->GU + h * dc, (int)(H * dc), 1.0f, s->GC, (int)dc);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)T, (int)dc, 1.0f,
                    s->GU + h * dc, (int)(H * dc), s->Ct, (int)dc, 0.0f, s->GA + h * T, (int)(H * T));
    }
    /* GZ = A ⊙ (GA − rowsum(A ⊙ GA)), causal */
    for (size_t i = 0; i < T; i++)
        for (size_t h = 0; h < H; h++) {
            const float *a = s->A + (i * H + h) * T;
            float *g = s->GA + (i * H + h) * T;
            double rs = 0;
            for (size_t k = 0; k <= i; k++)
                rs += (double)a[k] * g[k];
            for (size_t k = 0; k <= i; k++)
                g[k] = (float)(a[k] * (g[k] - rs));
            for (size_t k = i + 1; k < T; k++)
                g[k] = 0.0f;
        }
    /* GC += τ Σ_h GZ_h^T Q_C,h */
    for (size_t h = 0; h < H; h++)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)T, (int)dc, (int)T, tau,
                    s->GA + h * T, (int)(H * T), q->q_lat + h * dc, (int)(H * dc), 1.0f, s->GC, (int)dc);
    tm[1] += omp_get_wtime() - a1;
}

/* Query rows per causal block of the fast path (one head at a time). */
#ifndef LEARN_BLOCK
#define LEARN_BLOCK 64
#endif

/* Fast path: the same function in the per-head (unabsorbed) form. With
 * K_h = C̃ w_uk[h]ᵀ [T, d_n] and V_h = C̃ w_uv[h]ᵀ [T, d_v] (two GEMMs over all
 * heads), Q_C,h C̃ᵀ = q_nope,h K_hᵀ and A_h C̃ w_uv[h]ᵀ = A_h V_h, so every T×T
 * product is d_n or d_v wide instead of d_c wide:
 *   Z_h = τ (q_nope,h K_hᵀ + Q_P,h Kᵀ),  A_h = softmax,  O_h = A_h V_h,
 *   Y = O w_oᵀ;
 *   G_O = G_Y w_o,  G_A,h = G_O,h V_hᵀ,  G_V,h = A_hᵀ G_O,h,
 *   G_Z,h = A_h ⊙ (G_A,h − rowsum(A_h ⊙ G_A,h)),  G_K,h = τ G_Z,hᵀ q_nope,h,
 *   G_C̃ = G_K w_uk + G_V w_uv    (w_uk as [H d_n, d_c], w_uv as [H d_v, d_c]).
 * The T×T products are computed on causal row blocks of LEARN_BLOCK query
 * tokens against the keys they see, per head (A and G_A head-major
 * [H, T, T]). Heads run on `inner` threads; each head's work is done by one
 * thread and the heads are combined by one GEMM, so the result does not
 * depend on the thread count. */
static void attn_fast(qmla_learner *l, seqws *q, scratch *s, int want_grad, int inner, double *f,
                      double *tm)
{
    double a0 = omp_get_wtime();
    const qmla_mla_dims *d = &l->d;
    const size_t T = q->T, dc = d->d_c, H = d->H, D = d->D, dn = d->d_n, dv = d->d_v, dr = d->d_r;
    const size_t HN = H * dn, HV = H * dv, B = LEARN_BLOCK, nb = (T + B - 1) / B;
    qmla_exec ex1 = qmla_exec_cpu(1);
    const float tau = (float)d->tau;
    /* K_all = Ct w_uk^T, V_all = Ct w_uv^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)HN, (int)dc, 1.0f, s->Ct,
                (int)dc, l->w.w_uk, (int)dc, 0.0f, s->Kc, (int)HN);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)HV, (int)dc, 1.0f, s->Ct,
                (int)dc, l->w.w_uv, (int)dc, 0.0f, s->Vc, (int)HV);
    long Hl = (long)H;
#pragma omp parallel for schedule(static) num_threads(inner) if (inner > 1)
    for (long hh = 0; hh < Hl; hh++) {
        size_t h = (size_t)hh;
        float *Z = s->A + h * T * T;
        const float *qn = q->qn + h * T * dn, *qr = q->qr + h * T * dr;
        for (size_t b = 0; b < nb; b++) {
            size_t r0 = b * B, rows = r0 + B <= T ? B : T - r0, e = r0 + rows;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)e, (int)dn, tau,
                        qn + r0 * dn, (int)dn, s->Kc + h * dn, (int)HN, 0.0f, Z + r0 * T, (int)T);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)e, (int)dr, tau,
                        qr + r0 * dr, (int)dr, q->K, (int)dr, 1.0f, Z + r0 * T, (int)T);
        }
        qmla_attn_softmax(&ex1, 1, T, Z, Z);
        for (size_t b = 0; b < nb; b++) {
            size_t r0 = b * B, rows = r0 + B <= T ? B : T - r0, e = r0 + rows;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)dv, (int)e, 1.0f,
                        Z + r0 * T, (int)T, s->Vc + h * dv, (int)HV, 0.0f, s->O + r0 * HV + h * dv,
                        (int)HV);
        }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)D, (int)HV, 1.0f, s->O,
                (int)HV, l->w.w_o, (int)HV, 0.0f, s->Yt, (int)D);
    if (!out_loss_go(l, q, s, want_grad, f, tm, a0))
        return;
    double a1 = omp_get_wtime();
    memset(s->GK, 0, T * HN * sizeof(float));
    memset(s->GV, 0, T * HV * sizeof(float));
#pragma omp parallel for schedule(static) num_threads(inner) if (inner > 1)
    for (long hh = 0; hh < Hl; hh++) {
        size_t h = (size_t)hh;
        const float *A = s->A + h * T * T;
        float *GA = s->GA + h * T * T;
        const float *qn = q->qn + h * T * dn;
        for (size_t b = 0; b < nb; b++) {
            size_t r0 = b * B, rows = r0 + B <= T ? B : T - r0, e = r0 + rows;
            /* GA_h = GO_h V_h^T; GV_h += A_h^T GO_h */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)e, (int)dv, 1.0f,
                        s->GO + r0 * HV + h * dv, (int)HV, s->Vc + h * dv, (int)HV, 0.0f, GA + r0 * T,
                        (int)T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)e, (int)dv, (int)rows, 1.0f,
                        A + r0 * T, (int)T, s->GO + r0 * HV + h * dv, (int)HV, 1.0f, s->GV + h * dv,
                        (int)HV);
        }
        qmla_attn_softmax_jvp(&ex1, 1, T, A, GA, GA);
        for (size_t b = 0; b < nb; b++) {
            size_t r0 = b * B, rows = r0 + B <= T ? B : T - r0, e = r0 + rows;
            /* GK_h += τ GZ_h^T q_nope,h */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)e, (int)dn, (int)rows, tau,
                        GA + r0 * T, (int)T, qn + r0 * dn, (int)dn, 1.0f, s->GK + h * dn, (int)HN);
        }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)dc, (int)HN, 1.0f, s->GK,
                (int)HN, l->w.w_uk, (int)dc, 0.0f, s->GC, (int)dc);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)dc, (int)HV, 1.0f, s->GV,
                (int)HV, l->w.w_uv, (int)dc, 1.0f, s->GC, (int)dc);
    tm[1] += omp_get_wtime() - a1;
}

/* ---- content path: the attention in double (attn_f64) -------------------- */

/* Causal softmax of row i (keys 0..i) in double, in place; zero beyond. */
static void softmax_row64(double *z, size_t i, size_t T)
{
    double m = z[0];
    for (size_t s = 1; s <= i; s++)
        m = z[s] > m ? z[s] : m;
    double sum = 0.0;
    for (size_t s = 0; s <= i; s++) {
        z[s] = exp(z[s] - m);
        sum += z[s];
    }
    const double inv = 1.0 / sum;
    for (size_t s = 0; s <= i; s++)
        z[s] *= inv;
    for (size_t s = i + 1; s < T; s++)
        z[s] = 0.0;
}

/* G_Z = A (.) (G_A - rowsum(A (.) G_A)) of row i, in place; zero beyond. */
static void softmax_jvp_row64(const double *a, double *g, size_t i, size_t T)
{
    double m = 0.0;
    for (size_t s = 0; s <= i; s++)
        m += a[s] * g[s];
    for (size_t s = 0; s <= i; s++)
        g[s] = a[s] * (g[s] - m);
    for (size_t s = i + 1; s < T; s++)
        g[s] = 0.0;
}

static void to_f64(const float *x, size_t n, double *y)
{
    for (size_t i = 0; i < n; i++)
        y[i] = (double)x[i];
}

#define ALLOC(ptr, n) ((ptr) = calloc((size_t)(n) > 0 ? (size_t)(n) : 1u, sizeof *(ptr)), (ptr) != NULL)

/* The CPU double attention's buffers (per thread) and the widened weights
 * (shared; made once under a lock), at their first use. */
static int attn64_buffers(qmla_learner *l, scratch *s, qmla_error *err)
{
    const qmla_mla_dims *d = &l->d;
    const size_t T = l->Tmax, H = d->H, dc = d->d_c, HN = H * d->d_n, HV = H * d->d_v;
    int ok = 1;
#pragma omp critical(qmla_learn_w64)
    if (!l->wo64) {
        ok = ALLOC(l->wuk64, HN * dc) && ALLOC(l->wuv64, HV * dc) && ALLOC(l->wo64, d->D * HV);
        if (ok) {
            to_f64(l->w.w_uk, HN * dc, l->wuk64);
            to_f64(l->w.w_uv, HV * dc, l->wuv64);
            to_f64(l->w.w_o, d->D * HV, l->wo64);
        } else {
            free(l->wuk64); free(l->wuv64); free(l->wo64);
            l->wuk64 = l->wuv64 = l->wo64 = NULL;
        }
    }
    if (ok && !s->Y64)
        ok = ALLOC(s->Ct64, T * dc) && ALLOC(s->Kc64, T * HN) && ALLOC(s->Vc64, T * HV) &&
             ALLOC(s->A64, T * H * T) && ALLOC(s->GA64, T * H * T) && ALLOC(s->O64, T * HV) &&
             ALLOC(s->Yt64, T * d->D) && ALLOC(s->GY64, T * d->D) && ALLOC(s->GO64, T * HV) &&
             ALLOC(s->GK64, T * HN) && ALLOC(s->GV64, T * HV) && ALLOC(s->qn64, T * HN) &&
             ALLOC(s->qr64, T * H * d->d_r) && ALLOC(s->K64, T * d->d_r) &&
             ALLOC(s->Y64, T * d->D);
    if (!ok)
        return qmla_error_set(err, QMLA_ENOMEM,
                              "learn: out of memory for the attention in double (T %zu, H %zu: "
                              "%.3g GB per thread)",
                              T, H, 16.0 * (double)(T * H * T) / 1e9);
    return QMLA_OK;
}

/* attn_fast's function with every product, the softmax and its backward in
 * double (qmla_learn_opts.attn_f64): Ct and the sequence's queries, k_rope
 * and Y are widened exactly; G_C~ stays double (s->GC64) and the backward
 * to the parameters goes on in double (content_seq). Two
 * engines that both compute this (the CUDA engine's learn_content64) agree to
 * double rounding instead of float32's, so that their learning trajectories,
 * which the quantizer's rounding and AdamW's per-entry normalisation make
 * chaotic, stay together (docs/cuda-engine.md, "Learning in double"). Heads
 * on `inner` threads as attn_fast, the result independent of the count. */
static int attn_fast64(qmla_learner *l, seqws *q, scratch *s, int want_grad, int inner, double *f,
                       double *tm, qmla_error *err)
{
    double a0 = omp_get_wtime();
    const qmla_mla_dims *d = &l->d;
    const size_t T = q->T, dc = d->d_c, H = d->H, D = d->D, dn = d->d_n, dv = d->d_v, dr = d->d_r;
    const size_t HN = H * dn, HV = H * dv, B = LEARN_BLOCK, nb = (T + B - 1) / B;
    const double tau = d->tau;
    const int sb = attn64_buffers(l, s, err);
    if (sb)
        return sb;
    to_f64(s->Ct, T * dc, s->Ct64);
    to_f64(q->qn, H * T * dn, s->qn64);
    to_f64(q->qr, H * T * dr, s->qr64);
    to_f64(q->K, T * dr, s->K64);
    to_f64(q->Y, T * D, s->Y64);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)HN, (int)dc, 1.0, s->Ct64,
                (int)dc, l->wuk64, (int)dc, 0.0, s->Kc64, (int)HN);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)HV, (int)dc, 1.0, s->Ct64,
                (int)dc, l->wuv64, (int)dc, 0.0, s->Vc64, (int)HV);
    long Hl = (long)H;
#pragma omp parallel for schedule(static) num_threads(inner) if (inner > 1)
    for (long hh = 0; hh < Hl; hh++) {
        size_t h = (size_t)hh;
        double *Z = s->A64 + h * T * T;
        const double *qn = s->qn64 + h * T * dn, *qr = s->qr64 + h * T * dr;
        for (size_t b = 0; b < nb; b++) {
            size_t r0 = b * B, rows = r0 + B <= T ? B : T - r0, e = r0 + rows;
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)e, (int)dn, tau,
                        qn + r0 * dn, (int)dn, s->Kc64 + h * dn, (int)HN, 0.0, Z + r0 * T, (int)T);
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)e, (int)dr, tau,
                        qr + r0 * dr, (int)dr, s->K64, (int)dr, 1.0, Z + r0 * T, (int)T);
        }
        for (size_t i = 0; i < T; i++)
            softmax_row64(Z + i * T, i, T);
        for (size_t b = 0; b < nb; b++) {
            size_t r0 = b * B, rows = r0 + B <= T ? B : T - r0, e = r0 + rows;
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)dv, (int)e, 1.0,
                        Z + r0 * T, (int)T, s->Vc64 + h * dv, (int)HV, 0.0,
                        s->O64 + r0 * HV + h * dv, (int)HV);
        }
    }
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)D, (int)HV, 1.0, s->O64,
                (int)HV, l->wo64, (int)HV, 0.0, s->Yt64, (int)D);
    {
        double e = 0.0;
        for (size_t i = 0; i < T * D; i++) {
            const double v = s->Yt64[i] - s->Y64[i];
            e += v * v;
            s->GY64[i] = 2.0 * v / q->yden;
        }
        *f = e / q->yden;
    }
    tm[0] += omp_get_wtime() - a0;
    if (!want_grad)
        return QMLA_OK;
    double a1 = omp_get_wtime();
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)HV, (int)D, 1.0, s->GY64,
                (int)D, l->wo64, (int)HV, 0.0, s->GO64, (int)HV);
    memset(s->GK64, 0, T * HN * sizeof(double));
    memset(s->GV64, 0, T * HV * sizeof(double));
#pragma omp parallel for schedule(static) num_threads(inner) if (inner > 1)
    for (long hh = 0; hh < Hl; hh++) {
        size_t h = (size_t)hh;
        const double *A = s->A64 + h * T * T;
        double *GA = s->GA64 + h * T * T;
        const double *qn = s->qn64 + h * T * dn;
        for (size_t b = 0; b < nb; b++) {
            size_t r0 = b * B, rows = r0 + B <= T ? B : T - r0, e = r0 + rows;
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)e, (int)dv, 1.0,
                        s->GO64 + r0 * HV + h * dv, (int)HV, s->Vc64 + h * dv, (int)HV, 0.0,
                        GA + r0 * T, (int)T);
            cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)e, (int)dv, (int)rows, 1.0,
                        A + r0 * T, (int)T, s->GO64 + r0 * HV + h * dv, (int)HV, 1.0,
                        s->GV64 + h * dv, (int)HV);
        }
        for (size_t i = 0; i < T; i++)
            softmax_jvp_row64(A + i * T, GA + i * T, i, T);
        for (size_t b = 0; b < nb; b++) {
            size_t r0 = b * B, rows = r0 + B <= T ? B : T - r0, e = r0 + rows;
            cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)e, (int)dn, (int)rows, tau,
                        GA + r0 * T, (int)T, qn + r0 * dn, (int)dn, 1.0, s->GK64 + h * dn,
                        (int)HN);
        }
    }
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)dc, (int)HN, 1.0, s->GK64,
                (int)HN, l->wuk64, (int)dc, 0.0, s->GC64, (int)dc);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)dc, (int)HV, 1.0, s->GV64,
                (int)HV, l->wuv64, (int)dc, 1.0, s->GC64, (int)dc);
    tm[1] += omp_get_wtime() - a1;
    return QMLA_OK;
}

/* ---- content path: one sequence ------------------------------------------ */

/* attn_f64: the parameter gradient handed to AdamW, rounded to this many
 * significant bits (relative rounding <= 2^-17 = 7.6e-6, below the 1e-5 by
 * which the float32 forms' gradients differ). Two engines whose double
 * arithmetic differs in the last digits (1e-14 relative) then hand AdamW
 * the same gradient unless an entry lies within 1e-14 of a rounding
 * boundary (about 1e-9 per entry and step), and their parameters stay
 * bit-identical: without it the 1e-14 differences persist in the
 * parameters and grow into percents once a rounding of the float forward
 * (R to float, a quantizer code) flips (docs/cuda-engine.md, "Learning in
 * double"). */
#define LEARN64_GRAD_BITS 16

static double round_sig(double x, int bits)
{
    if (x == 0.0 || !isfinite(x))
        return x;
    int e;
    const double m = frexp(x, &e); /* x = m 2^e, 0.5 <= |m| < 1 */
    return ldexp(nearbyint(ldexp(m, bits)), e - bits);
}

/* The backward from G_C~ (s->GC64) to gR (s->gR64) and gs in double: the
 * float32 path's steps below in content_seq with every product a dgemm on
 * the widened float values the forward used (Rf, Ws, Cg, V, Wh), so that
 * with the attention in double nothing on the way to the parameters is
 * rounded to float (attn_f64). */
static int content_bwd64(qmla_learner *l, const seqws *q, scratch *s, const double *sc,
                         double *gs_out, double *tm)
{
    const size_t T = q->T, dc = l->d.d_c;
    double t3 = omp_get_wtime();
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < dc; j++) {
            s->GC64[t * dc + j] *= (double)l->gamma[j];
            s->Ws64[t * dc + j] = (double)s->Ws[t * dc + j];
            s->Cg64[t * dc + j] = (double)q->Cg[t * dc + j];
        }
    /* GWs = GCg R; gR = GCg^T Ws */
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)dc, (int)dc, 1.0, s->GC64,
                (int)dc, l->Rf64, (int)dc, 0.0, s->GW64, (int)dc);
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)dc, (int)dc, (int)T, 1.0, s->GC64,
                (int)dc, s->Ws64, (int)dc, 0.0, s->gR64, (int)dc);
    /* GWh = GWs / s; gs -= Σ_t Wh GWs / s² */
    for (size_t j = 0; j < dc; j++)
        gs_out[j] = 0;
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < dc; j++) {
            const double g = s->GW64[t * dc + j];
            gs_out[j] -= (double)s->Wh[t * dc + j] * g / (sc[j] * sc[j]);
            s->GW64[t * dc + j] = g / sc[j];
        }
    double t4 = omp_get_wtime();
    ste_bwd64(&l->o.quant, T, dc, s->GW64, s->r, s->imin, s->imax, s->GX64);
    double t5 = omp_get_wtime();
    /* GV = GW diag(s); gs += Σ_t V GW; gR += Cg^T GV */
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < dc; j++) {
            const double g = s->GX64[t * dc + j];
            gs_out[j] += (double)s->V[t * dc + j] * g;
            s->GW64[t * dc + j] = g * sc[j];
        }
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)dc, (int)dc, (int)T, 1.0, s->Cg64,
                (int)dc, s->GW64, (int)dc, 1.0, s->gR64, (int)dc);
    double t6 = omp_get_wtime();
    tm[1] += (t4 - t3) + (t6 - t5);
    tm[2] += t5 - t4;
    return QMLA_OK;
}


/* inner: threads over heads inside the sequence (fast path only). */
static int content_seq(qmla_learner *l, seqws *q, scratch *s, const double *sc,
                       int frozen, int want_grad, int inner, double *f, double *gs_out,
                       double *tm, qmla_error *err)
{
    const qmla_mla_dims *d = &l->d;
    size_t T = q->T, dc = d->d_c;
    double t0 = omp_get_wtime();
    /* V = Cg R, W = V diag(s) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)dc, (int)dc, 1.0f, q->Cg,
                (int)dc, l->Rf, (int)dc, 0.0f, s->V, (int)dc);
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < dc; j++)
            s->W[t * dc + j] = (float)(s->V[t * dc + j] * sc[j]);
    double t1 = omp_get_wtime();
    if (frozen && !q->rfz)
        return qmla_error_set(err, QMLA_EINVAL, "learn: objective with frozen residuals before freeze");
    int st = ste_fwd(&l->o.quant, s->W, T, dc, frozen ? q->rfz : NULL, s->r, s->Wh, s->imin, s->imax, err);
    if (st)
        return st;
    double t2 = omp_get_wtime();
    /* Ws = Wh diag(1/s); Ct = Ws R^T diag(γ) */
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < dc; j++)
            s->Ws[t * dc + j] = (float)(s->Wh[t * dc + j] / sc[j]);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)dc, (int)dc, 1.0f, s->Ws,
                (int)dc, l->Rf, (int)dc, 0.0f, s->Ct, (int)dc);
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < dc; j++)
            s->Ct[t * dc + j] *= l->gamma[j];
    double t2b = omp_get_wtime();
    tm[0] += (t1 - t0) + (t2b - t2);
    tm[2] += t2 - t1;
    if (l->o.recon) { /* plain reconstruction: G_C̃ = 2 (C̃ − C) / den */
        double e = 0, den = 0;
        for (size_t i = 0; i < T * dc; i++) {
            double v = (double)s->Ct[i] - q->C[i];
            e += v * v;
            den += (double)q->C[i] * q->C[i];
        }
        den = den > 1e-8 ? den : 1e-8;
        *f = e / den;
        if (want_grad)
            for (size_t i = 0; i < T * dc; i++)
                s->GC[i] = (float)(2.0 * ((double)s->Ct[i] - q->C[i]) / den);
        tm[0] += omp_get_wtime() - t2b;
    } else if (l->attn.content || l->attn.content64) {
        /* the engine's attention: one sequence at a time */
        int sa;
        if (l->o.attn_f64 && !l->attn.content64)
            return qmla_error_set(err, QMLA_EINVAL,
                                  "learn: the engine's attention has no double form (attn_f64)");
        if (!l->o.attn_f64 && !l->attn.content)
            return qmla_error_set(err, QMLA_EINVAL,
                                  "learn: the engine's attention has no float32 form");
#pragma omp critical(qmla_learn_attn)
        sa = l->o.attn_f64 ? l->attn.content64(l->attn.ctx, q->bank, q->idx, s->Ct, want_grad, f,
                                               s->GC64, tm, err)
                           : l->attn.content(l->attn.ctx, q->bank, q->idx, s->Ct, want_grad, f,
                                             s->GC, tm, err);
        if (sa)
            return sa;
    } else if (l->o.attn_reference) {
        attn_ref(l, q, s, want_grad, f, tm);
    } else if (l->o.attn_f64) {
        const int sa = attn_fast64(l, q, s, want_grad, inner, f, tm, err);
        if (sa)
            return sa;
    } else {
        attn_fast(l, q, s, want_grad, inner, f, tm);
    }
    if (!want_grad)
        return QMLA_OK;
    if (l->o.attn_f64)
        return content_bwd64(l, q, s, sc, gs_out, tm);
    double t3 = omp_get_wtime();
    /* GCg = GC diag(γ); GWs = GCg R; gR += GCg^T Ws */
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < dc; j++)
            s->GC[t * dc + j] *= l->gamma[j];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)dc, (int)dc, 1.0f, s->GC,
                (int)dc, l->Rf, (int)dc, 0.0f, s->GW, (int)dc);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)dc, (int)dc, (int)T, 1.0f, s->GC,
                (int)dc, s->Ws, (int)dc, 0.0f, s->gR, (int)dc);
    /* GWh = GWs / s; gs -= Σ_t Wh GWs / s² */
    for (size_t j = 0; j < dc; j++)
        gs_out[j] = 0;
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < dc; j++) {
            double g = s->GW[t * dc + j];
            gs_out[j] -= (double)s->Wh[t * dc + j] * g / (sc[j] * sc[j]);
            s->GW[t * dc + j] = (float)(g / sc[j]);
        }
    double t4 = omp_get_wtime();
    /* straight-through: GW (into Ws, reused) */
    ste_bwd(&l->o.quant, T, dc, s->GW, s->r, s->imin, s->imax, s->Ws);
    double t5 = omp_get_wtime();
    /* GV = GW diag(s); gs += Σ_t V GW; gR += Cg^T GV */
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < dc; j++) {
            double g = s->Ws[t * dc + j];
            gs_out[j] += (double)s->V[t * dc + j] * g;
            s->GW[t * dc + j] = (float)(g * sc[j]);
        }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)dc, (int)dc, (int)T, 1.0f, q->Cg,
                (int)dc, s->GW, (int)dc, 1.0f, s->gR, (int)dc);
    double t6 = omp_get_wtime();
    tm[1] += (t4 - t3) + (t6 - t5);
    tm[2] += t5 - t4;
    return QMLA_OK;
}

/* ---- RoPE path: one sequence --------------------------------------------- */

static int rope_seq(qmla_learner *l, seqws *q, scratch *s, const double *th,
                    const double *vs, int frozen, int want_grad, double *f,
                    double *g, double *tm, qmla_error *err)
{
    size_t T = q->T, dr = l->d.d_r, P = dr / 2;
    double t0 = omp_get_wtime();
    double *sc = s->gs; /* e^v */
    for (size_t i = 0; i < P; i++)
        sc[i] = exp(vs[i]);
    qmla_transform t;
    memset(&t, 0, sizeof t);
    t.d_r = dr;
    t.pairing = l->pairing;
    t.angle = (double *)th;
    t.rscale = sc;
    /* K' = K T_P (V), K^ (Wh), K~ = K^ T_P^-1 (Ct) */
    qmla_transform_rope_apply(&t, QMLA_TMAP_FWD, q->K, T, s->V);
    double t1 = omp_get_wtime();
    if (frozen && !q->rfz)
        return qmla_error_set(err, QMLA_EINVAL, "learn: objective with frozen residuals before freeze");
    int st = ste_fwd(&l->o.quant, s->V, T, dr, frozen ? q->rfz : NULL, s->r, s->Wh, s->imin, s->imax, err);
    if (st)
        return st;
    double t2 = omp_get_wtime();
    qmla_transform_rope_apply(&t, QMLA_TMAP_INV, s->Wh, T, s->Ct);
    double num = 0;
    double *ge = want_grad ? calloc(T * dr, sizeof(double)) : NULL;
    if (want_grad && !ge)
        return qmla_error_set(err, QMLA_ENOMEM, "learn: out of memory");
    double *e = malloc(dr * sizeof(double));
    if (!e) {
        free(ge);
        return qmla_error_set(err, QMLA_ENOMEM, "learn: out of memory");
    }
    for (size_t tt = 0; tt < T; tt++) {
        const double *Gm = q->Gam + tt * dr * dr;
        for (size_t j = 0; j < dr; j++)
            e[j] = (double)s->Ct[tt * dr + j] - q->K[tt * dr + j];
        for (size_t j = 0; j < dr; j++) {
            double a = 0;
            for (size_t k = 0; k < dr; k++)
                a += Gm[j * dr + k] * e[k];
            num += e[j] * a;
            if (ge)
                ge[tt * dr + j] = 2.0 * a / q->pden;
        }
    }
    free(e);
    *f = num / q->pden;
    double t3 = omp_get_wtime();
    tm[0] += (t1 - t0) + (t3 - t2);
    tm[2] += t2 - t1;
    if (!want_grad)
        return QMLA_OK;
    for (size_t i = 0; i < 2 * P; i++)
        g[i] = 0;
    /* direct terms of K~ and G_K^ = G_K~ (T_P^-1)^T = apply INVT */
    for (size_t tt = 0; tt < T; tt++)
        for (size_t i = 0; i < P; i++) {
            size_t a, b;
            qmla_rope_pair(dr, l->pairing, i, &a, &b);
            double ga = ge[tt * dr + a], gb = ge[tt * dr + b];
            double ka = s->Ct[tt * dr + a], kb = s->Ct[tt * dr + b];
            g[i] += -ga * kb + gb * ka;
            g[P + i] += -(ga * ka + gb * kb);
            s->GY[tt * dr + a] = (float)ga;
            s->GY[tt * dr + b] = (float)gb;
        }
    qmla_transform_rope_apply(&t, QMLA_TMAP_INVT, s->GY, T, s->GO);
    double t4 = omp_get_wtime();
    ste_bwd(&l->o.quant, T, dr, s->GO, s->r, s->imin, s->imax, s->GW);
    double t5 = omp_get_wtime();
    for (size_t tt = 0; tt < T; tt++)
        for (size_t i = 0; i < P; i++) {
            size_t a, b;
            qmla_rope_pair(dr, l->pairing, i, &a, &b);
            double ga = s->GW[tt * dr + a], gb = s->GW[tt * dr + b];
            double ka = s->V[tt * dr + a], kb = s->V[tt * dr + b];
            g[i] += ga * kb - gb * ka;
            g[P + i] += ga * ka + gb * kb;
        }
    free(ge);
    double t6 = omp_get_wtime();
    tm[1] += (t4 - t3) + (t6 - t5);
    tm[2] += t5 - t4;
    return QMLA_OK;
}

/* ---- Cayley --------------------------------------------------------------- */

/* From parameters p (strict upper triangle of S) build S, LU(I + S) and
 * Cay(S) = (I − S)^-1 (I + S); R = D_γ Cay as float into Rf. */
static int cayley_fwd(qmla_learner *l, const double *p, qmla_error *err)
{
    int n = (int)l->d.d_c, info = 0;
    size_t d = l->d.d_c, k = 0;
    memset(l->Sfull, 0, d * d * sizeof(double));
    for (size_t i = 0; i < d; i++)
        for (size_t j = i + 1; j < d; j++, k++) {
            l->Sfull[i * d + j] = p[k];
            l->Sfull[j * d + i] = -p[k];
        }
    /* row-major buffer of I − S = column-major I + S */
    for (size_t i = 0; i < d; i++)
        for (size_t j = 0; j < d; j++) {
            l->LU[i * d + j] = (i == j) - l->Sfull[i * d + j];
            l->Cay[i * d + j] = (i == j) + l->Sfull[i * d + j]; /* col-major I − S */
        }
    l->cay_ok = 0;
    dgetrf_(&n, &n, l->LU, &n, l->ipiv, &info);
    if (info != 0)
        return qmla_error_set(err, QMLA_EINTERNAL, "learn: Cayley: I + S singular (dgetrf info %d)", info);
    /* column-major X = (I + S)^-1 (I − S) = Cay^T: row-major buffer = Cay */
    dgetrs_("N", &n, &n, l->LU, &n, l->ipiv, l->Cay, &n, &info);
    if (info != 0)
        return qmla_error_set(err, QMLA_EINTERNAL, "learn: Cayley: dgetrs info %d", info);
    for (size_t i = 0; i < d; i++) {
        double sg = l->gamma[i] < 0 ? -1.0 : 1.0;
        for (size_t j = 0; j < d; j++)
            l->Rf[i * d + j] = (float)(sg * l->Cay[i * d + j]);
    }
    if (l->Rf64) /* attn_f64: the R the forward used, for the double backward */
        for (size_t i = 0; i < d * d; i++)
            l->Rf64[i] = (double)l->Rf[i];
    memcpy(l->pcay, p, (l->n_params - d) * sizeof(double));
    l->cay_ok = 1;
    return QMLA_OK;
}

/* gR (double, d×d, gradient w.r.t. R) -> gradient of the upper-triangle
 * parameters: G_Cay = D_γ G_R; G_S = (I + S)^-1 G_Cay (Cay + I)^T;
 * g_ij = G_S[i][j] − G_S[j][i]. */
static int cayley_bwd(qmla_learner *l, const double *gR, double *gp, qmla_error *err)
{
    int n = (int)l->d.d_c, info = 0;
    size_t d = l->d.d_c;
    double *GC = l->Sfull; /* reuse as scratch: S no longer needed */
    for (size_t i = 0; i < d; i++) {
        double sg = l->gamma[i] < 0 ? -1.0 : 1.0;
        for (size_t j = 0; j < d; j++)
            GC[i * d + j] = sg * gR[i * d + j];
    }
    /* Z^T = (Cay + I) G_Cay^T = Cay G_Cay^T + G_Cay^T, row-major: its
     * column-major view is Z (Cay is left as cayley_fwd made it) */
    for (size_t i = 0; i < d; i++)
        for (size_t j = 0; j < d; j++)
            l->Z[i * d + j] = GC[j * d + i];
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0, l->Cay, n, GC, n, 1.0, l->Z, n);
    dgetrs_("N", &n, &n, l->LU, &n, l->ipiv, l->Z, &n, &info);
    if (info != 0)
        return qmla_error_set(err, QMLA_EINTERNAL, "learn: Cayley backward: dgetrs info %d", info);
    /* column-major result Y = (I+S)^-1 Z: row-major buffer holds Y^T */
    size_t k = 0;
    for (size_t i = 0; i < d; i++)
        for (size_t j = i + 1; j < d; j++, k++)
            gp[k] = l->Z[j * d + i] - l->Z[i * d + j];
    return QMLA_OK;
}

/* ---- objective over a bank ------------------------------------------------ */

static int bank_objective(qmla_learner *l, int bank, const double *p, double *grad,
                          int frozen, double *fout, qmla_error *err)
{
    size_t n = l->nseq[bank];
    if (!n)
        return qmla_error_set(err, QMLA_EINVAL, "learn: empty bank %d", bank);
    seqws *B = l->bank[bank];
    int want = grad != NULL;
    size_t dc = l->d.d_c, P = l->n_pairs;
    const double *sc = NULL;
    double *expu = NULL;
    if (l->path == QMLA_LEARN_CONTENT) {
        double t0 = omp_get_wtime();
        /* the held-out and train objectives of a step share p: one LU */
        if (!l->cay_ok || memcmp(l->pcay, p, (l->n_params - dc) * sizeof(double))) {
            int st = cayley_fwd(l, p, err);
            l->st.t_cayley += omp_get_wtime() - t0;
            if (st)
                return st;
        }
        expu = malloc(dc * sizeof(double));
        if (!expu)
            return qmla_error_set(err, QMLA_ENOMEM, "learn: out of memory");
        for (size_t j = 0; j < dc; j++)
            expu[j] = exp(p[l->n_params - dc + j]);
        sc = expu;
    }
    long nn = (long)n;
    memset(l->tslot, 0, n * 3 * sizeof(double));
    /* threads over sequences; with fewer sequences than threads (content),
     * over the heads inside each sequence instead */
    int outer = l->path == QMLA_LEARN_CONTENT && n < (size_t)l->nth && !l->attn.content &&
                        !l->attn.content64
                    ? 1
                    : l->nth;
    int inner = outer == 1 ? l->nth : 1;
#pragma omp parallel for schedule(dynamic, 1) num_threads(outer) if (outer > 1)
    for (long k = 0; k < nn; k++) {
        scratch *s = &l->sc[omp_get_thread_num()];
        double *g = l->gslot + (size_t)k * l->n_grad;
        qmla_error e;
        qmla_error_clear(&e);
        int st;
        if (l->path == QMLA_LEARN_CONTENT) {
            st = content_seq(l, &B[k], s, sc, frozen, want, inner, &l->fslot[k], g + dc * dc,
                             l->tslot + 3 * k, &e);
            if (!st && want && l->o.attn_f64)
                memcpy(g, s->gR64, dc * dc * sizeof(double));
            else if (!st && want)
                for (size_t i = 0; i < dc * dc; i++)
                    g[i] = s->gR[i];
        } else {
            st = rope_seq(l, &B[k], s, p, p + P, frozen, want, &l->fslot[k], g, l->tslot + 3 * k, &e);
        }
        l->stslot[k] = st;
        if (st && err) {
#pragma omp critical
            if (!err->status)
                *err = e;
        }
    }
    free(expu);
    for (size_t k = 0; k < n; k++) {
        if (l->stslot[k])
            return l->stslot[k];
        l->st.t_forward += l->tslot[3 * k];
        l->st.t_backward += l->tslot[3 * k + 1];
        l->st.t_qdq += l->tslot[3 * k + 2];
    }
    double f = 0;
    for (size_t k = 0; k < n; k++)
        f += l->fslot[k];
    *fout = f / (double)n;
    if (!want)
        return QMLA_OK;
    /* sum per-sequence gradients in sequence order */
    double *G = l->gslot; /* slot 0 accumulates */
    for (size_t k = 1; k < n; k++) {
        const double *gk = l->gslot + k * l->n_grad;
        for (size_t i = 0; i < l->n_grad; i++)
            G[i] += gk[i];
    }
    for (size_t i = 0; i < l->n_grad; i++)
        G[i] /= (double)n;
    if (l->path == QMLA_LEARN_CONTENT) {
        double t0 = omp_get_wtime();
        int st = cayley_bwd(l, G, grad, err);
        l->st.t_cayley += omp_get_wtime() - t0;
        if (st)
            return st;
        size_t off = l->n_params - dc;
        for (size_t j = 0; j < dc; j++)
            grad[off + j] = G[dc * dc + j] * exp(p[off + j]); /* d/du = s d/ds */
        if (l->o.attn_f64)
            for (size_t i = 0; i < l->n_params; i++)
                grad[i] = round_sig(grad[i], LEARN64_GRAD_BITS);
    } else {
        memcpy(grad, G, 2 * P * sizeof(double));
    }
    return QMLA_OK;
}

int qmla_learner_objective(qmla_learner *l, int bank, const double *p,
                           double *grad, int frozen, double *f,
                           qmla_error *err)
{
    if (bank < 0 || bank > 1)
        return qmla_error_set(err, QMLA_EINVAL, "learn: bank must be 0 or 1, found %d", bank);
    return bank_objective(l, bank, p, grad, frozen, f, err);
}

int qmla_learner_freeze(qmla_learner *l, int bank, const double *p,
                        qmla_error *err)
{
    double f;
    seqws *B = l->bank[bank];
    for (size_t k = 0; k < l->nseq[bank]; k++) {
        free(B[k].rfz);
        B[k].rfz = NULL;
    }
    /* one sequence at a time on thread 0's scratch so r is kept */
    for (size_t k = 0; k < l->nseq[bank]; k++) {
        double tm[3] = {0, 0, 0};
        int st;
        if (l->path == QMLA_LEARN_CONTENT) {
            st = cayley_fwd(l, p, err);
            double *sc = malloc(l->d.d_c * sizeof(double));
            if (!sc)
                return qmla_error_set(err, QMLA_ENOMEM, "learn: out of memory");
            for (size_t j = 0; j < l->d.d_c; j++)
                sc[j] = exp(p[l->n_params - l->d.d_c + j]);
            if (!st)
                st = content_seq(l, &B[k], &l->sc[0], sc, 0, 0, 1, &f, NULL, tm, err);
            free(sc);
        } else {
            st = rope_seq(l, &B[k], &l->sc[0], p, p + l->n_pairs, 0, 0, &f, NULL, tm, err);
        }
        if (st)
            return st;
        B[k].rfz = malloc(B[k].T * l->width * sizeof(float));
        if (!B[k].rfz)
            return qmla_error_set(err, QMLA_ENOMEM, "learn: out of memory");
        memcpy(B[k].rfz, l->sc[0].r, B[k].T * l->width * sizeof(float));
    }
    return QMLA_OK;
}

/* ---- allocation ----------------------------------------------------------- */

static void seqws_free(seqws *q)
{
    free(q->Cg);
    free(q->q_lat);
    free(q->q_rope_t);
    free(q->Y);
    free(q->Gam);
    free(q->rfz);
}

static void scratch_free(scratch *s)
{
    free(s->V); free(s->W); free(s->Wh); free(s->Ws); free(s->Ct); free(s->A); free(s->GA);
    free(s->U); free(s->O); free(s->Yt); free(s->GY); free(s->GO); free(s->GU); free(s->GC);
    free(s->GW); free(s->r); free(s->imin); free(s->imax); free(s->gs); free(s->gR);
    free(s->Kc); free(s->Vc); free(s->GK); free(s->GV);
    free(s->Ct64); free(s->Kc64); free(s->Vc64); free(s->A64); free(s->GA64); free(s->O64);
    free(s->Yt64); free(s->GY64); free(s->GO64); free(s->GK64); free(s->GV64); free(s->GC64);
    free(s->qn64); free(s->qr64); free(s->K64); free(s->Y64);
    free(s->GW64); free(s->GX64); free(s->Ws64); free(s->Cg64); free(s->gR64);
}

void qmla_learner_free(qmla_learner *l)
{
    if (!l)
        return;
    for (int b = 0; b < 2; b++) {
        for (size_t k = 0; l->bank[b] && k < l->nseq[b]; k++)
            seqws_free(&l->bank[b][k]);
        free(l->bank[b]);
    }
    for (int t = 0; l->sc && t < l->nth; t++)
        scratch_free(&l->sc[t]);
    free(l->sc);
    free(l->gslot); free(l->fslot); free(l->stslot); free(l->tslot);
    free(l->p); free(l->best); free(l->m); free(l->v); free(l->grad);
    free(l->Sfull); free(l->LU); free(l->Cay); free(l->Z); free(l->ipiv); free(l->Rf);
    free(l->pcay);
    free(l->wuk64); free(l->wuv64); free(l->wo64); free(l->Rf64);
    qmla_calib_free(&l->cal);
    if (l->attn.free)
        l->attn.free(l->attn.ctx);
    free(l);
}

void qmla_learner_set_attn(qmla_learner *l, const qmla_learn_attn *a)
{
    if (l->attn.free)
        l->attn.free(l->attn.ctx);
    l->attn = *a;
}

size_t qmla_learner_n_seq(const qmla_learner *l, int bank) { return l->nseq[bank]; }

void qmla_learner_seq(const qmla_learner *l, int bank, size_t k, size_t *T,
                      const float **q_nope, const float **q_rope, const float **K,
                      const float **Y, double *yden)
{
    const seqws *q = &l->bank[bank][k];
    *T = q->T;
    *q_nope = q->qn;
    *q_rope = q->qr;
    *K = q->K;
    *Y = q->Y;
    *yden = q->yden;
}


static int prep_bank(qmla_learner *l, int b, const qmla_learn_bank *bk, qmla_error *err)
{
    const qmla_mla_dims *d = &l->d;
    l->nseq[b] = bk ? bk->n : 0;
    if (!ALLOC(l->bank[b], l->nseq[b]))
        return qmla_error_set(err, QMLA_ENOMEM, "learn: out of memory");
    qmla_exec ex = qmla_exec_cpu(l->nth);
    for (size_t k = 0; k < l->nseq[b]; k++) {
        seqws *q = &l->bank[b][k];
        size_t T = bk->T[k];
        q->T = T;
        q->bank = b;
        q->idx = k;
        q->C = bk->C[k];
        q->K = bk->K[k];
        q->qn = bk->q_nope[k];
        q->qr = bk->q_rope[k];
        if (T > l->Tmax)
            l->Tmax = T;
        if (!ALLOC(q->q_rope_t, T * d->H * d->d_r))
            return qmla_error_set(err, QMLA_ENOMEM, "learn: out of memory");
        qmla_attn_tokens_major(d->H, T, d->d_r, bk->q_rope[k], q->q_rope_t);
        if (l->path == QMLA_LEARN_CONTENT) {
            qmla_attn_state st;
            if (!ALLOC(q->Cg, T * d->d_c) || !ALLOC(q->q_lat, T * d->H * d->d_c) ||
                !ALLOC(q->Y, T * d->D))
                return qmla_error_set(err, QMLA_ENOMEM, "learn: out of memory");
            int s = qmla_attn_state_alloc(d, T, 0, &st, err);
            if (s)
                return s;
            s = qmla_attn_state_forward(&ex, d, T, &l->w, bk->q_nope[k], bk->q_rope[k], q->C, q->K,
                                        &st, err);
            if (!s) {
                memcpy(q->q_lat, st.q_lat, T * d->H * d->d_c * sizeof(float));
                memcpy(q->Y, st.Y, T * d->D * sizeof(float));
            }
            qmla_attn_state_free(&st);
            if (s)
                return s;
            double yy = 0;
            for (size_t i = 0; i < T * d->D; i++)
                yy += (double)q->Y[i] * q->Y[i];
            double floor_ = (double)(T * d->D) * 1e-8;
            q->yden = yy > floor_ ? yy : floor_;
            for (size_t t = 0; t < T; t++)
                for (size_t j = 0; j < d->d_c; j++)
                    q->Cg[t * d->d_c + j] = (float)((double)q->C[t * d->d_c + j] / l->gamma[j]);
        } else {
            size_t dr = d->d_r;
            if (!ALLOC(q->Gam, T * dr * dr))
                return qmla_error_set(err, QMLA_ENOMEM, "learn: out of memory (Γ, T %zu)", T);
            for (size_t tt = T; tt-- > 0;) {
                double *G = q->Gam + tt * dr * dr;
                if (l->o.recon) { /* plain reconstruction: Γ_s = I */
                    for (size_t j = 0; j < dr; j++)
                        G[j * dr + j] = 1.0;
                    continue;
                }
                if (tt + 1 < T)
                    memcpy(G, G + dr * dr, dr * dr * sizeof(double));
                for (size_t h = 0; h < d->H; h++) {
                    const float *qq = q->q_rope_t + (tt * d->H + h) * dr;
                    for (size_t j = 0; j < dr; j++)
                        for (size_t m = 0; m < dr; m++)
                            G[j * dr + m] += (double)qq[j] * qq[m];
                }
            }
            double den = 0;
            for (size_t tt = 0; tt < T; tt++) {
                const double *G = q->Gam + tt * dr * dr;
                const float *kk = q->K + tt * dr;
                for (size_t j = 0; j < dr; j++)
                    for (size_t m = 0; m < dr; m++)
                        den += kk[j] * G[j * dr + m] * kk[m];
            }
            q->pden = den > 1e-8 ? den : 1e-8;
        }
        if (b == 0)
            qmla_calib_add(&l->cal, T, d->H, q->C, q->K,
                           l->path == QMLA_LEARN_CONTENT ? q->q_lat : NULL, q->q_rope_t);
    }
    return QMLA_OK;
}

int qmla_learner_alloc(qmla_learn_path path, const qmla_mla_dims *d,
                       const qmla_mla_weights *w, const float *gamma,
                       qmla_rope_pairing pairing, const qmla_learn_bank *train,
                       const qmla_learn_bank *held, const qmla_learn_opts *o,
                       qmla_learner **out, qmla_error *err)
{
    *out = NULL;
    if (!train || train->n == 0)
        return qmla_error_set(err, QMLA_EINVAL, "learn: the train bank is empty");
    if (o->steps == 0 || !(o->lr > 0) || !(o->warmup >= 0 && o->warmup < 1))
        return qmla_error_set(err, QMLA_EINVAL, "learn: expected steps > 0, lr > 0, warm-up in [0, 1), found %zu, %g, %g",
                              o->steps, o->lr, o->warmup);
    if (o->attn_f64 && o->attn_reference)
        return qmla_error_set(err, QMLA_EINVAL,
                              "learn: attention in double (attn_f64) is the per-head form's; "
                              "expected it without attn_reference, found both");
    size_t width = path == QMLA_LEARN_CONTENT ? d->d_c : d->d_r;
    int st = qmla_quant_check(&o->quant, width, err);
    if (st)
        return st;
    qmla_learner *l = calloc(1, sizeof *l);
    if (!l)
        return qmla_error_set(err, QMLA_ENOMEM, "learn: out of memory");
    l->path = path;
    l->d = *d;
    l->w = *w;
    l->gamma = gamma;
    l->pairing = pairing;
    l->o = *o;
    l->width = width;
    l->n_pairs = d->d_r / 2;
    l->nth = o->threads < 1 ? 1 : o->threads;
    size_t dc = d->d_c;
    if (path == QMLA_LEARN_CONTENT) {
        for (size_t j = 0; j < dc; j++)
            if (!(gamma[j] != 0.0f)) {
                free(l);
                return qmla_error_set(err, QMLA_EINVAL, "learn: kv_norm γ[%zu] = 0", j);
            }
        l->n_params = dc * (dc - 1) / 2 + dc;
        l->n_grad = dc * dc + dc;
    } else {
        l->n_params = 2 * l->n_pairs;
        l->n_grad = 2 * l->n_pairs;
    }
    st = qmla_calib_alloc(dc, d->d_r, &l->cal, err);
    if (!st)
        st = prep_bank(l, 0, train, err);
    if (!st)
        st = prep_bank(l, 1, held, err);
    if (st) {
        qmla_learner_free(l);
        return st;
    }
    size_t nmax = l->nseq[0] > l->nseq[1] ? l->nseq[0] : l->nseq[1];
    size_t T = l->Tmax, H = d->H;
    int ok = ALLOC(l->sc, l->nth) && ALLOC(l->gslot, nmax * l->n_grad) && ALLOC(l->fslot, nmax) &&
             ALLOC(l->stslot, nmax) && ALLOC(l->tslot, 3 * nmax) && ALLOC(l->p, l->n_params) &&
             ALLOC(l->best, l->n_params) && ALLOC(l->m, l->n_params) && ALLOC(l->v, l->n_params) &&
             ALLOC(l->grad, l->n_params);
    if (ok && path == QMLA_LEARN_CONTENT)
        ok = ALLOC(l->Sfull, dc * dc) && ALLOC(l->LU, dc * dc) && ALLOC(l->Cay, dc * dc) &&
             ALLOC(l->Z, dc * dc) && ALLOC(l->ipiv, dc) && ALLOC(l->Rf, dc * dc) &&
             ALLOC(l->pcay, l->n_params);
    size_t wmax = width > d->D ? width : d->D;
    size_t ng = qmla_quant_n_groups(&o->quant, width);
    for (int t = 0; ok && t < l->nth; t++) {
        scratch *s = &l->sc[t];
        ok = ALLOC(s->V, T * width) && ALLOC(s->W, T * width) && ALLOC(s->Wh, T * width) &&
             ALLOC(s->Ws, T * width) && ALLOC(s->Ct, T * width) && ALLOC(s->GW, T * width) &&
             ALLOC(s->r, T * width) && ALLOC(s->imin, T * ng) && ALLOC(s->imax, T * ng) &&
             ALLOC(s->gs, width) && ALLOC(s->GY, T * wmax);
        if (ok && path == QMLA_LEARN_CONTENT)
            ok = ALLOC(s->A, T * H * T) && ALLOC(s->GA, T * H * T) && ALLOC(s->O, T * H * d->d_v) &&
                 ALLOC(s->Yt, T * d->D) && ALLOC(s->GO, T * H * d->d_v) && ALLOC(s->GC, T * dc) &&
                 ALLOC(s->gR, dc * dc);
        if (ok && path == QMLA_LEARN_CONTENT && o->attn_reference)
            ok = ALLOC(s->U, T * H * dc) && ALLOC(s->GU, T * H * dc);
        if (ok && path == QMLA_LEARN_CONTENT && !o->attn_reference)
            ok = ALLOC(s->Kc, T * H * d->d_n) && ALLOC(s->Vc, T * H * d->d_v) &&
                 ALLOC(s->GK, T * H * d->d_n) && ALLOC(s->GV, T * H * d->d_v);
        if (ok && path == QMLA_LEARN_CONTENT && o->attn_f64 && !o->recon)
            ok = ALLOC(s->GC64, T * dc) && ALLOC(s->GW64, T * dc) && ALLOC(s->GX64, T * dc) &&
                 ALLOC(s->Ws64, T * dc) && ALLOC(s->Cg64, T * dc) && ALLOC(s->gR64, dc * dc);
        if (ok && path == QMLA_LEARN_ROPE)
            ok = ALLOC(s->GO, T * width);
    }
    if (ok && path == QMLA_LEARN_CONTENT && o->attn_f64 && !o->recon)
        ok = ALLOC(l->Rf64, dc * dc);
    if (!ok) {
        qmla_learner_free(l);
        return qmla_error_set(err, QMLA_ENOMEM, "learn: out of memory (T %zu, d_c %zu)", T, dc);
    }
    /* default parameters: S = 0, s = |γ| (T_C = I); θ = 0, s_i = 1 */
    if (path == QMLA_LEARN_CONTENT)
        for (size_t j = 0; j < dc; j++)
            l->p[l->n_params - dc + j] = log(fabs((double)gamma[j]));
    memcpy(l->best, l->p, l->n_params * sizeof(double));
    l->st.best_held = INFINITY;
    l->st.init_obj = NAN;
    *out = l;
    return QMLA_OK;
}

size_t qmla_learner_n_params(const qmla_learner *l) { return l->n_params; }
double *qmla_learner_params(qmla_learner *l) { return l->p; }
qmla_learn_state qmla_learner_state(const qmla_learner *l) { return l->st; }

static double sq_sigma(double xm, double qm, double alpha)
{
    if (!(xm > 0) || !(qm > 0))
        return 1.0;
    return pow(xm, alpha) / pow(qm, 1.0 - alpha);
}

int qmla_learner_init(qmla_learner *l, double *alpha_out, qmla_error *err)
{
    int bank = l->nseq[1] ? 1 : 0;
    size_t dc = l->d.d_c, P = l->n_pairs, np = l->n_params;
    double *cand = malloc(np * sizeof(double));
    if (!cand)
        return qmla_error_set(err, QMLA_ENOMEM, "learn: out of memory");
    memset(cand, 0, np * sizeof(double));
    if (l->path == QMLA_LEARN_CONTENT) {
        gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
        if (!r) {
            free(cand);
            return qmla_error_set(err, QMLA_ENOMEM, "learn: out of memory");
        }
        gsl_rng_set(r, l->o.seed);
        for (size_t k = 0; k < np - dc; k++)
            cand[k] = 1e-4 * sqrt(-2.0 * log(gsl_rng_uniform_pos(r))) * cos(2.0 * M_PI * gsl_rng_uniform(r));
        gsl_rng_free(r);
    }
    static const double alphas[] = {-1, 0, 0.25, 0.5, 0.75, 1};
    double best = INFINITY, best_a = -1;
    double *keep = malloc(np * sizeof(double));
    if (!keep) {
        free(cand);
        return qmla_error_set(err, QMLA_ENOMEM, "learn: out of memory");
    }
    for (size_t k = 0; k < sizeof alphas / sizeof alphas[0]; k++) {
        double a = alphas[k];
        if (l->path == QMLA_LEARN_CONTENT) {
            for (size_t j = 0; j < dc; j++) {
                double sg = a < 0 ? 1.0 : sq_sigma(l->cal.cmax[j], l->cal.qcmax[j], a);
                cand[np - dc + j] = log(fabs((double)l->gamma[j]) / sg);
            }
        } else {
            for (size_t i = 0; i < P; i++) {
                size_t ia, ib;
                qmla_rope_pair(l->d.d_r, l->pairing, i, &ia, &ib);
                double sa = a < 0 ? 1.0 : sq_sigma(l->cal.kmax[ia], l->cal.qpmax[ia], a);
                double sb = a < 0 ? 1.0 : sq_sigma(l->cal.kmax[ib], l->cal.qpmax[ib], a);
                cand[i] = 0.0;
                cand[P + i] = -log(sa > sb ? sa : sb);
            }
        }
        double f;
        int st = bank_objective(l, bank, cand, NULL, 0, &f, err);
        if (st) {
            free(cand);
            free(keep);
            return st;
        }
        if (f < best) {
            best = f;
            best_a = a;
            memcpy(keep, cand, np * sizeof(double));
        }
    }
    memcpy(l->p, keep, np * sizeof(double));
    memcpy(l->best, keep, np * sizeof(double));
    free(cand);
    free(keep);
    l->st.init_obj = best;
    l->st.best_held = INFINITY;
    if (alpha_out)
        *alpha_out = best_a;
    return QMLA_OK;
}

static void consider(qmla_learner *l, double f)
{
    l->st.held_obj = f;
    if (f < l->st.best_held) {
        l->st.best_held = f;
        l->st.best_step = l->st.step;
        memcpy(l->best, l->p, l->n_params * sizeof(double));
    }
}

int qmla_learner_iterate(qmla_learner *l, qmla_error *err)
{
    int st;
    double f = 0;
    if (l->nseq[1]) {
        st = bank_objective(l, 1, l->p, NULL, 0, &f, err);
        if (st)
            return st;
        consider(l, f);
    }
    st = bank_objective(l, 0, l->p, l->grad, 0, &f, err);
    if (st)
        return st;
    l->st.train_obj = f;
    if (!l->nseq[1])
        consider(l, f);
    size_t N = l->o.steps, k = l->st.step;
    size_t W = (size_t)ceil(l->o.warmup * (double)N);
    double lr;
    if (k < W)
        lr = l->o.lr * (double)(k + 1) / (double)W;
    else
        lr = l->o.lr * 0.5 * (1.0 + cos(M_PI * (double)(k - W) / (double)(N - W > 0 ? N - W : 1)));
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    double c1 = 1.0 - pow(b1, (double)(k + 1)), c2 = 1.0 - pow(b2, (double)(k + 1));
    for (size_t i = 0; i < l->n_params; i++) {
        double g = l->grad[i];
        l->m[i] = b1 * l->m[i] + (1 - b1) * g;
        l->v[i] = b2 * l->v[i] + (1 - b2) * g * g;
        l->p[i] -= lr * (l->m[i] / c1) / (sqrt(l->v[i] / c2) + eps); /* weight decay 0 */
    }
    l->st.step++;
    return QMLA_OK;
}

int qmla_learner_finish(qmla_learner *l, qmla_error *err)
{
    double f = 0;
    int st = bank_objective(l, l->nseq[1] ? 1 : 0, l->p, NULL, 0, &f, err);
    if (!st)
        consider(l, f);
    return st;
}

int qmla_learner_get(qmla_learner *l, qmla_transform *t, qmla_error *err)
{
    size_t dc = l->d.d_c, P = l->n_pairs;
    if (l->path == QMLA_LEARN_CONTENT) {
        if (t->d_c != dc)
            return qmla_error_set(err, QMLA_EINVAL, "learn: transform d_c %zu, expected %zu", t->d_c, dc);
        int st = cayley_fwd(l, l->best, err);
        if (st)
            return st;
        for (size_t i = 0; i < dc; i++) {
            double sg = l->gamma[i] < 0 ? -1.0 : 1.0;
            for (size_t j = 0; j < dc; j++)
                t->rot[i * dc + j] = sg * l->Cay[i * dc + j];
            t->cscale[i] = exp(l->best[l->n_params - dc + i]);
        }
    } else {
        if (t->d_r != l->d.d_r)
            return qmla_error_set(err, QMLA_EINVAL, "learn: transform d_r %zu, expected %zu", t->d_r, l->d.d_r);
        for (size_t i = 0; i < P; i++) {
            t->angle[i] = l->best[i];
            t->rscale[i] = exp(l->best[P + i]);
        }
    }
    return QMLA_OK;
}
