/* attention.c — MLA attention in the absorbed form (include/qmla/attention.h,
 * docs/math.md §1). Block-causal CBLAS products, OpenMP over heads, a
 * vectorisable exp for the softmax, double accumulation of norms. */
#include "qmla/attention.h"
#include "core/alloc.h"
#include "qmla_config.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if QMLA_HAVE_OPENMP
#include <omp.h>
#endif

#if QMLA_HAVE_OPENMP
#define QMLA_OMP_FOR(ex) _Pragma("omp parallel for schedule(dynamic, 1) num_threads(qmla_exec_threads(ex))")
#else
#define QMLA_OMP_FOR(ex)
#endif

/* Rows of queries per causal block: about 512 GEMM rows (block x heads),
 * a multiple of 8 tokens. */
static size_t block_tokens(size_t H)
{
    size_t b = (512 + H - 1) / H;
    b = (b + 7) / 8 * 8;
    return b < 8 ? 8 : b;
}

void qmla_attn_absorb(const qmla_exec *ex, const qmla_mla_dims *d, size_t T, const float *q_nope,
                      const float *w_uk, float *q_lat)
{
    const size_t H = d->H, dn = d->d_n, dc = d->d_c;
    QMLA_OMP_FOR(ex)
    for (size_t h = 0; h < H; h++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)dc,
                    (int)dn, 1.0f, q_nope + h * T * dn, (int)dn,
                    w_uk + h * dn * dc, (int)dc, 0.0f, q_lat + h * dc,
                    (int)(H * dc));
}

void qmla_attn_tokens_major(size_t H, size_t T, size_t w, const float *in,
                            float *out)
{
    for (size_t h = 0; h < H; h++)
        for (size_t t = 0; t < T; t++)
            memcpy(out + (t * H + h) * w, in + (h * T + t) * w, w * sizeof *in);
}

/* Causal row block k of nb (largest first): tokens [r0, r0 + rows), which
 * see keys [0, r0 + rows). */
static void causal_block(size_t k, size_t nb, size_t B, size_t T, size_t *r0,
                         size_t *rows)
{
    *r0 = (nb - 1 - k) * B;
    *rows = (*r0 + B <= T) ? B : T - *r0;
}

/* Work items are causal row blocks of B tokens x H heads (one GEMM each,
 * M = B*H), largest first; each touches a disjoint slab of Z / U. */
void qmla_attn_logits_acc(const qmla_exec *ex, size_t H, size_t T, size_t w, float alpha,
                          const float *Q, const float *X, float beta, float *Z)
{
    const size_t B = block_tokens(H), nb = (T + B - 1) / B;
    QMLA_OMP_FOR(ex)
    for (size_t k = 0; k < nb; k++) {
        size_t r0, rows;
        causal_block(k, nb, B, T, &r0, &rows);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(rows * H),
                    (int)(r0 + rows), (int)w, alpha, Q + r0 * H * w, (int)w, X,
                    (int)w, beta, Z + r0 * H * T, (int)T);
    }
}

void qmla_attn_aggregate(const qmla_exec *ex, size_t H, size_t T, size_t w, const float *A,
                         const float *X, float beta, float *U)
{
    const size_t B = block_tokens(H), nb = (T + B - 1) / B;
    QMLA_OMP_FOR(ex)
    for (size_t k = 0; k < nb; k++) {
        size_t r0, rows;
        causal_block(k, nb, B, T, &r0, &rows);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(rows * H),
                    (int)w, (int)(r0 + rows), 1.0f, A + r0 * H * T, (int)T, X,
                    (int)w, beta, U + r0 * H * w, (int)w);
    }
}

/* GCC: the softmax loops' comparisons may be if-converted (vectorised)
 * only when floating-point traps are not modelled; values are unchanged. */
#if defined(__GNUC__) && !defined(__clang__)
#define QMLA_NO_TRAPPING __attribute__((optimize("no-trapping-math")))
#else
#define QMLA_NO_TRAPPING
#endif

/* exp for x <= 0 (after max subtraction): Cody-Waite reduction by ln 2 and
 * a degree-6 polynomial, ~2 ulp; straight-line float code so that the
 * compiler vectorises the softmax loop. Inputs below -87 clamp to -87
 * (result ~1.6e-38, negligible against the row maximum's 1). */
QMLA_NO_TRAPPING static inline float exp_neg(float x)
{
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
    /* Clamp to [-87, 88] so that the exponent n below is a small integer on
     * any input: the conversion of a NaN or out-of-range float to int is
     * undefined behaviour. NaN (e.g. inf - inf of overflowed logits) takes
     * the clamp's -87 here and is passed through as NaN at the end, so a
     * non-finite logit stays visible in the attention. */
    const float x_in = x;
    x = isgreaterequal(x, -87.0f) ? (islessequal(x, 88.0f) ? x : 88.0f) : -87.0f;
    float n = floorf(x * log2e + 0.5f);
    float r = x - n * ln2_hi;
    r = r - n * ln2_lo;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { float f; int32_t i; } u;
    u.i = ((int32_t)n + 127) << 23;
    return x_in == x_in ? p * u.f : x_in;
}

/* One causal softmax row: a[s] = softmax_{s<=i} z[s] (minus ref[s] when
 * ref is not NULL), zeros for s > i. Compiled for AVX-512, AVX2 and
 * baseline x86-64, picked at load time. The maximum runs in 16 lanes and
 * the exponentials in chunks of 16 (element s adds to part[s % 16] in
 * increasing s, as a plain loop would), with quiet comparisons and
 * no-trapping-math so that GCC vectorises both loops: the same values, bit
 * for bit, as the scalar loops (NaN, ±inf and ±0 included). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
QMLA_NO_TRAPPING static void softmax_row(const float *z, const float *ref, float *a, size_t i,
                                         size_t T)
{
    const size_t n = i + 1, n16 = n / 16 * 16;
    float mv[16];
    for (int k = 0; k < 16; k++)
        mv[k] = z[0];
    for (size_t s = 0; s < n16; s += 16)
        for (int k = 0; k < 16; k++)
            mv[k] = isgreater(z[s + k], mv[k]) ? z[s + k] : mv[k];
    float m = mv[0];
    for (int k = 1; k < 16; k++)
        m = isgreater(mv[k], m) ? mv[k] : m;
    for (size_t s = n16; s < n; s++)
        m = isgreater(z[s], m) ? z[s] : m;
    float part[16] = {0};
    for (size_t s = 0; s < n16; s += 16)
        for (int k = 0; k < 16; k++) {
            const float e = exp_neg(z[s + k] - m);
            a[s + k] = e;
            part[k] += e;
        }
    for (size_t s = n16; s < n; s++) {
        const float e = exp_neg(z[s] - m);
        a[s] = e;
        part[s % 16] += e;
    }
    double sum = 0.0;
    for (int k = 0; k < 16; k++)
        sum += part[k];
    const float inv = (float)(1.0 / sum);
    if (ref)
        for (size_t s = 0; s <= i; s++)
            a[s] = a[s] * inv - ref[s];
    else
        for (size_t s = 0; s <= i; s++)
            a[s] *= inv;
    if (i + 1 < T)
        memset(a + i + 1, 0, (T - i - 1) * sizeof *a);
}

void qmla_attn_softmax(const qmla_exec *ex, size_t H, size_t T, const float *Z, float *A)
{
    const size_t n = H * T;
    QMLA_OMP_FOR(ex)
    for (size_t k = 0; k < n; k++)
        softmax_row(Z + k * T, NULL, A + k * T, k / H, T); /* token k/H, head k%H */
}

void qmla_attn_softmax_rows(const qmla_exec *ex, size_t H, size_t T, size_t t0, size_t t1,
                            const float *Z, float *A)
{
    const size_t k0 = t0 * H, k1 = t1 * H;
    QMLA_OMP_FOR(ex)
    for (size_t k = k0; k < k1; k++)
        softmax_row(Z + k * T, NULL, A + k * T, k / H, T);
}

void qmla_attn_softmax_delta(const qmla_exec *ex, size_t H, size_t T, const float *Z,
                             const float *Aref, float *D)
{
    const size_t n = H * T;
    QMLA_OMP_FOR(ex)
    for (size_t k = 0; k < n; k++)
        softmax_row(Z + k * T, Aref + k * T, D + k * T, k / H, T);
}

void qmla_attn_softmax_jvp(const qmla_exec *ex, size_t H, size_t T,
                           const float *A, const float *dZ, float *dA)
{
    const size_t n = H * T;
    QMLA_OMP_FOR(ex)
    for (size_t k = 0; k < n; k++) {
        const size_t i = k / H; /* token k/H, head k%H */
        const float *a = A + k * T, *dz = dZ + k * T;
        float *da = dA + k * T;
        double m = 0.0;
        for (size_t s = 0; s <= i; s++)
            m += (double)a[s] * (double)dz[s];
        const float mf = (float)m;
        for (size_t s = 0; s <= i; s++)
            da[s] = a[s] * (dz[s] - mf);
        if (i + 1 < T)
            memset(da + i + 1, 0, (T - i - 1) * sizeof *da);
    }
}

void qmla_attn_project(const qmla_exec *ex, const qmla_mla_dims *d, size_t T, size_t S,
                       const qmla_mla_weights *w, const float *U, float *O,
                       float *Y)
{
    const size_t H = d->H, dc = d->d_c, dv = d->d_v, D = d->D, HV = H * dv;
    /* O[r, h*dv + v] = sum_c U[r][h][c] w_uv[h][v][c] for all S*T rows r:
     * one GEMM per head over every stacked row (U row stride H*dc). */
    const size_t rows = S * T;
    QMLA_OMP_FOR(ex)
    for (size_t h = 0; h < H; h++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)dv,
                    (int)dc, 1.0f, U + h * dc, (int)(H * dc), w->w_uv + h * dv * dc,
                    (int)dc, 0.0f, O + h * dv, (int)HV);
    /* Y = O w_o^T, split into row panels so every thread gets work. */
    const size_t P = 256, np = (rows + P - 1) / P;
    QMLA_OMP_FOR(ex)
    for (size_t p = 0; p < np; p++) {
        const size_t r0 = p * P, nr = (r0 + P <= rows) ? P : rows - r0;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, (int)D,
                    (int)HV, 1.0f, O + r0 * HV, (int)HV, w->w_o, (int)HV, 0.0f,
                    Y + r0 * D, (int)D);
    }
}

int qmla_attn_state_alloc(const qmla_mla_dims *d, size_t T_max,
                          int keep_logits, qmla_attn_state *st,
                          qmla_error *err)
{
    memset(st, 0, sizeof *st);
    st->T_max = T_max;
    const size_t H = d->H, TT = H * T_max * T_max;
    if (!(st->q_lat = qmla_alloc_big(H * T_max * d->d_c * sizeof(float), err, "absorbed queries")) ||
        !(st->q_rope_t = qmla_alloc_big(H * T_max * d->d_r * sizeof(float), err, "positional queries")) ||
        (keep_logits && !(st->Z = qmla_alloc_big(TT * sizeof(float), err, "logits"))) ||
        !(st->A = qmla_alloc_big(TT * sizeof(float), err, "attention")) ||
        !(st->U = qmla_alloc_big(H * T_max * d->d_c * sizeof(float), err, "aggregated latents")) ||
        !(st->O = qmla_alloc_big(T_max * H * d->d_v * sizeof(float), err, "head outputs")) ||
        !(st->Y = qmla_alloc_big(T_max * d->D * sizeof(float), err, "output"))) {
        qmla_attn_state_free(st);
        return err ? err->status : QMLA_ENOMEM;
    }
    return QMLA_OK;
}

double qmla_attn_state_bytes(const qmla_mla_dims *d, size_t T, int keep_logits)
{
    const double H = (double)d->H, t = (double)T;
    return 4.0 * (H * t * (double)d->d_c * 2 + H * t * (double)d->d_r +
                  (keep_logits ? 2.0 : 1.0) * H * t * t + t * H * (double)d->d_v +
                  t * (double)d->D);
}

void qmla_attn_state_free(qmla_attn_state *st)
{
    if (!st)
        return;
    free(st->q_lat);
    free(st->q_rope_t);
    free(st->Z);
    free(st->A);
    free(st->U);
    free(st->O);
    free(st->Y);
    memset(st, 0, sizeof *st);
}

void qmla_attn_from_queries(const qmla_exec *ex, const qmla_mla_dims *d,
                            size_t T, const qmla_mla_weights *w,
                            const float *q_lat, const float *q_rope_t,
                            const float *C, const float *K, float *Z, float *A,
                            float *U, float *O, float *Y)
{
    const float tau = (float)d->tau;
    qmla_attn_logits_acc(ex, d->H, T, d->d_c, tau, q_lat, C, 0.0f, Z);
    qmla_attn_logits_acc(ex, d->H, T, d->d_r, tau, q_rope_t, K, 1.0f, Z);
    qmla_attn_softmax(ex, d->H, T, Z, A);
    qmla_attn_aggregate(ex, d->H, T, d->d_c, A, C, 0.0f, U);
    qmla_attn_project(ex, d, T, 1, w, U, O, Y);
}

int qmla_attn_state_forward(const qmla_exec *ex, const qmla_mla_dims *d,
                            size_t T, const qmla_mla_weights *w,
                            const float *q_nope, const float *q_rope,
                            const float *C, const float *K, qmla_attn_state *st,
                            qmla_error *err)
{
    if (T == 0 || T > st->T_max)
        return qmla_error_set(err, QMLA_EINVAL,
                              "attention: T = %zu outside [1, %zu]", T,
                              st->T_max);
    qmla_attn_absorb(ex, d, T, q_nope, w->w_uk, st->q_lat);
    qmla_attn_tokens_major(d->H, T, d->d_r, q_rope, st->q_rope_t);
    qmla_attn_from_queries(ex, d, T, w, st->q_lat, st->q_rope_t, C, K,
                           st->Z ? st->Z : st->A, st->A, st->U, st->O, st->Y);
    /* Every consumer (sweep, jvp, predict, intervene, learn, eval) uses these
     * as the reference: a float32 overflow in them is an error here, once.
     * The first stage that is not finite is named (in the order computed). */
    const size_t H = d->H;
    const struct { const char *name; const float *x; size_t n; } out[] = {
        {"absorbed content queries Q_C = q_nope W_UK", st->q_lat, T * H * d->d_c},
        {"positional queries q_rope", st->q_rope_t, T * H * d->d_r},
        {"attention weights (softmax of the logits)", st->A, T * H * T},
        {"aggregated latents A C", st->U, T * H * d->d_c},
        {"head outputs (A C) W_UV", st->O, T * H * d->d_v},
        {"attention output Y = O W_O", st->Y, T * d->D}};
    for (size_t k = 0; k < sizeof out / sizeof out[0]; k++)
        for (size_t i = 0; i < out[k].n; i++)
            if (!isfinite(out[k].x[i]))
                return qmla_error_set(err, QMLA_ENONFINITE,
                                      "clean attention pass: expected finite values, found %g in "
                                      "the %s at element %zu (float32 overflow; `qmla check` "
                                      "locates it)", (double)out[k].x[i], out[k].name, i);
    return QMLA_OK;
}
