/* lib/attention/expanded.c — the expanded (non-absorbed) MLA attention form
 * and the sink/local policy's mixed forms (lib/attention/attention_int.h):
 * per-head keys and values from the latent cache, causal-block logits and
 * aggregation, the policy's logit mix and attention split over the whole
 * square (absorbed form), and the banded form that computes each key column
 * only from the representation some query of the block reads it in. The
 * engine's forward pass (lib/engine/forward.c) chooses between these and the
 * absorbed primitives of lib/attention/attention.c. */
#include "attention/attention_int.h"
#include "qmla/attention.h"

#include <cblas.h>
#include <string.h>
/* Causal row blocks of the expanded form. */
enum { XB = 128 };

/* Per-head keys and values of one cache representation X [T, d_c] for the
 * tokens t0..t1-1: kc [H, T, d_n + d_r] = [X w_uk[h]^T | K],
 * vn [T, H*d_v] = X w_uv^T (rows t0..t1-1 written; kn is scratch). */
void qmla_attn_expand_kv(size_t H, size_t d_c, size_t d_n, size_t d_r, size_t d_v,
                         const float *w_uk, const float *w_uv, size_t T, size_t t0, size_t t1,
                         const float *X, const float *K, float *kn, float *kc, float *vn)
{
    const size_t dn = d_n, dr = d_r, qk = dn + dr;
    if (t1 <= t0)
        return;
    qmla_linear(t1 - t0, d_c, H * dn, X + t0 * d_c, w_uk, kn);
    qmla_linear(t1 - t0, d_c, H * d_v, X + t0 * d_c, w_uv, vn + t0 * H * d_v);
    for (size_t h = 0; h < H; h++)
        for (size_t t = t0; t < t1; t++) {
            float *dst = kc + (h * T + t) * qk;
            memcpy(dst, kn + ((t - t0) * H + h) * dn, dn * sizeof(float));
            memcpy(dst + dn, K + t * dr, dr * sizeof(float));
        }
}

/* Z[i][h][s] = tau q_h[i] . k_h[s] for s in the causal blocks ([T, H, T]). */
void qmla_attn_expand_logits(size_t H, size_t T, size_t qk, float tau, const float *qc,
                             const float *kc, float *Z)
{
    for (size_t h = 0; h < H; h++)
        for (size_t r0 = 0; r0 < T; r0 += XB) {
            const size_t r1 = r0 + XB < T ? r0 + XB : T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(r1 - r0), (int)r1,
                        (int)qk, tau, qc + (h * T + r0) * qk, (int)qk, kc + h * T * qk,
                        (int)qk, 0.0f, Z + (r0 * H + h) * T, (int)(H * T));
        }
}

/* O[:, h] (+)= A[:, h] V[:, h] on the causal blocks: A [T, H, T], V and O
 * [T, H*d_v]. */
void qmla_attn_expand_aggregate(size_t H, size_t T, size_t dv, const float *A, const float *V,
                                float beta, float *O)
{
    for (size_t h = 0; h < H; h++)
        for (size_t r0 = 0; r0 < T; r0 += XB) {
            const size_t r1 = r0 + XB < T ? r0 + XB : T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(r1 - r0), (int)dv,
                        (int)r1, 1.0f, A + (r0 * H + h) * T, (int)(H * T), V + h * dv,
                        (int)(H * dv), beta, O + r0 * H * dv + h * dv, (int)(H * dv));
        }
}

/* Policy: key s is read from its protected value by query i when s < S or
 * i - s < W. Z keeps the protected logits, Z2 the packed ones: Z takes Z2's
 * value where the packed copy is read. */
void qmla_attn_mix_logits(size_t H, size_t T, size_t S, size_t W, float *Z, const float *Z2)
{
    for (size_t i = 0; i < T; i++)
        for (size_t h = 0; h < H; h++) {
            float *zp = Z + (i * H + h) * T;
            const float *zq = Z2 + (i * H + h) * T;
            for (size_t s = 0; s <= i; s++)
                if (!(s < S || i - s < W))
                    zp[s] = zq[s];
        }
}

/* Split the attention A (in Z): Z keeps the weights of protected keys, Z2
 * receives those of packed ones. */
void qmla_attn_split(size_t H, size_t T, size_t S, size_t W, float *Z, float *Z2)
{
    for (size_t i = 0; i < T; i++)
        for (size_t h = 0; h < H; h++) {
            float *ap = Z + (i * H + h) * T, *aq = Z2 + (i * H + h) * T;
            for (size_t s = 0; s < T; s++) {
                if (s <= i && !(s < S || i - s < W)) {
                    aq[s] = ap[s];
                    ap[s] = 0.0f;
                } else {
                    aq[s] = 0.0f;
                }
            }
        }
}

/* The sink/local policy in the expanded form, by causal row blocks: only the
 * key columns some query of the block reads from a representation are
 * computed from it. For rows r0..r1-1 (query i reads key s protected when
 * s < S or i - s < W, packed otherwise):
 *   sinks [0, min(S, r1))  protected for every row;
 *   band  [b0, r1)         b0 = max(S, r0 + 1 - W): protected for some rows
 *                          (empty when W = 0);
 *   packed [S, q1)         q1 = r1 - W: packed for some rows;
 *   [S, min(b0, q1))       packed for every row of the block;
 *   [b0, q1)               the overlap, both computed, one taken per row.
 * One softmax over each row as before; the aggregation sums the protected
 * weights against the protected values and the packed weights against the
 * packed values, so each (query, key) pair is read in exactly one
 * representation, as qmla_attn_mix_logits / qmla_attn_split do over the
 * whole square. The packed keys and values are needed only for tokens
 * S..T-W-1 (qmla_attn_band_packed_rows). Z [T, H, T] holds the logits, then
 * the weights; Z2 the overlap's packed logits, then its packed weights. */
typedef struct band_blk {
    size_t r0, r1, s1, b0, q1, p1; /* p1 = min(b0, q1): end of all-packed cols */
} band_blk;

static band_blk band_block(size_t r0, size_t r1, size_t S, size_t W)
{
    band_blk b = {r0, r1, S < r1 ? S : r1, r1, S, S};
    if (W > 0) {
        size_t lo = r0 + 1 > W ? r0 + 1 - W : 0;
        b.b0 = lo > b.s1 ? lo : b.s1;
    }
    if (r1 > W && r1 - W > S)
        b.q1 = r1 - W;
    /* no row of the block reads a packed key at or beyond r1: with S > r1
     * the range [b0, q1) would otherwise run past the window (S > T wrote
     * past the end of Z2) */
    if (b.q1 > r1)
        b.q1 = r1;
    b.p1 = b.b0 < b.q1 ? b.b0 : b.q1;
    if (b.p1 < S)
        b.p1 = S;
    return b;
}

void qmla_attn_band_packed_rows(size_t T, size_t S, size_t W, size_t *t0, size_t *t1)
{
    *t0 = S < T ? S : T;
    *t1 = T > W && T - W > *t0 ? T - W : *t0;
}

/* Z[rows, c0..c1) = tau q . k over columns c0..c1 (one head's block). */
static void band_gemm_logits(size_t H, size_t T, size_t qk, float tau, const float *qc,
                             const float *kc, size_t h, size_t r0, size_t r1, size_t c0,
                             size_t c1, float *Z)
{
    if (c1 <= c0)
        return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(r1 - r0), (int)(c1 - c0),
                (int)qk, tau, qc + (h * T + r0) * qk, (int)qk, kc + (h * T + c0) * qk,
                (int)qk, 0.0f, Z + (r0 * H + h) * T + c0, (int)(H * T));
}

/* O[rows, h] (+)= A[rows, c0..c1) V[c0..c1, h]; *beta turns 1 after a call. */
static void band_gemm_agg(size_t H, size_t T, size_t dv, const float *A, const float *V,
                          size_t h, size_t r0, size_t r1, size_t c0, size_t c1, float *beta,
                          float *O)
{
    if (c1 <= c0)
        return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(r1 - r0), (int)dv,
                (int)(c1 - c0), 1.0f, A + (r0 * H + h) * T + c0, (int)(H * T),
                V + c0 * H * dv + h * dv, (int)(H * dv), *beta, O + r0 * H * dv + h * dv,
                (int)(H * dv));
    *beta = 1.0f;
}

void qmla_attn_expand_band(const qmla_exec *ex1, size_t H, size_t T, size_t t0, size_t qk,
                           size_t dv, float tau, size_t S, size_t W, const float *qc,
                           const float *kc, const float *vn, const float *kc2,
                           const float *vn2, float *Z, float *Z2, float *O)
{
    for (size_t h = 0; h < H; h++)
        for (size_t r0 = t0; r0 < T; r0 += XB) {
            const band_blk b = band_block(r0, r0 + XB < T ? r0 + XB : T, S, W);
            band_gemm_logits(H, T, qk, tau, qc, kc, h, b.r0, b.r1, 0, b.s1, Z);
            band_gemm_logits(H, T, qk, tau, qc, kc, h, b.r0, b.r1, b.b0, b.r1, Z);
            band_gemm_logits(H, T, qk, tau, qc, kc2, h, b.r0, b.r1, S, b.p1, Z);
            band_gemm_logits(H, T, qk, tau, qc, kc2, h, b.r0, b.r1, b.b0, b.q1, Z2);
            for (size_t i = b.r0; i < b.r1; i++) {
                float *zp = Z + (i * H + h) * T;
                const float *zq = Z2 + (i * H + h) * T;
                for (size_t s = b.b0; s < b.q1 && s + W <= i; s++)
                    zp[s] = zq[s];
            }
        }
    if (t0)
        qmla_attn_softmax_rows(ex1, H, T, t0, T, Z, Z);
    else
        qmla_attn_softmax(ex1, H, T, Z, Z);
    for (size_t h = 0; h < H; h++)
        for (size_t r0 = t0; r0 < T; r0 += XB) {
            const band_blk b = band_block(r0, r0 + XB < T ? r0 + XB : T, S, W);
            for (size_t i = b.r0; i < b.r1; i++) {
                float *ap = Z + (i * H + h) * T, *aq = Z2 + (i * H + h) * T;
                for (size_t s = S; s < b.q1; s++) {
                    if (s + W <= i) {
                        aq[s] = ap[s];
                        ap[s] = 0.0f;
                    } else {
                        aq[s] = 0.0f;
                    }
                }
            }
            float beta = 0.0f;
            band_gemm_agg(H, T, dv, Z, vn, h, b.r0, b.r1, 0, b.r1, &beta, O);
            band_gemm_agg(H, T, dv, Z2, vn2, h, b.r0, b.r1, S, b.q1, &beta, O);
        }
}
