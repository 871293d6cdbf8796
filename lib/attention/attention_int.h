/* attention_int.h (private) — the expanded (non-absorbed) MLA attention form
 * and the sink/local policy's two-representation forms (lib/attention/expanded.c),
 * which the engine's forward pass (lib/engine/forward.c) walks next to the
 * absorbed primitives of qmla/attention.h.
 *
 * Layouts as in qmla/attention.h: per-head queries and keys head-major
 * qc, kc [H, T, d_n + d_r]; values vn and outputs O token-major [T, H*d_v];
 * logits and weights Z [T, H, T]. Products are computed by causal row blocks
 * of 128 queries, each on the calling thread (single-threaded BLAS). The
 * policy: query i reads key s from its protected value when s < S or
 * i - s < W, from its packed (dequantized) copy otherwise. */
#ifndef QMLA_ATTENTION_INT_H
#define QMLA_ATTENTION_INT_H

#include <stddef.h>

#include <cblas.h>

#include "qmla/exec.h"

/* y[T, out] = x[T, in] W^T, W [out, in]. */
static inline void qmla_linear(size_t T, size_t in, size_t out_n, const float *x,
                               const float *W, float *y)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)out_n, (int)in, 1.0f, x,
                (int)in, W, (int)in, 0.0f, y, (int)out_n);
}

/* Per-head keys and values of one cache representation X [T, d_c] for the
 * tokens t0..t1-1: kc [H, T, d_n + d_r] = [X w_uk[h]^T | K],
 * vn [T, H*d_v] = X w_uv^T (rows t0..t1-1 written; kn [t1 - t0, H*d_n] is
 * scratch). w_uk [H, d_n, d_c], w_uv [H, d_v, d_c]. */
void qmla_attn_expand_kv(size_t H, size_t d_c, size_t d_n, size_t d_r, size_t d_v,
                         const float *w_uk, const float *w_uv, size_t T, size_t t0, size_t t1,
                         const float *X, const float *K, float *kn, float *kc, float *vn);

/* Z[i][h][s] = tau q_h[i] . k_h[s] for s in the causal blocks; qk = d_n + d_r. */
void qmla_attn_expand_logits(size_t H, size_t T, size_t qk, float tau, const float *qc,
                             const float *kc, float *Z);

/* O[:, h] (+)= A[:, h] V[:, h] on the causal blocks: A [T, H, T], V and O
 * [T, H*d_v]; beta 0 overwrites, 1 accumulates. */
void qmla_attn_expand_aggregate(size_t H, size_t T, size_t dv, const float *A, const float *V,
                                float beta, float *O);

/* The policy over the whole square (absorbed form): Z keeps the protected
 * logits, Z2 the packed ones; Z takes Z2's value where the packed copy is
 * read. */
void qmla_attn_mix_logits(size_t H, size_t T, size_t S, size_t W, float *Z, const float *Z2);

/* Split the attention A (in Z): Z keeps the weights of protected keys, Z2
 * receives those of packed ones. */
void qmla_attn_split(size_t H, size_t T, size_t S, size_t W, float *Z, float *Z2);

/* The tokens t0..t1-1 whose packed keys and values the banded form reads. */
void qmla_attn_band_packed_rows(size_t T, size_t S, size_t W, size_t *t0, size_t *t1);

/* The policy in the expanded form, by causal row blocks, for query rows
 * t0..T-1 (rows below t0 untouched): logits of the protected keys kc / vn
 * and of the packed ones kc2 / vn2 (those of qmla_attn_band_packed_rows),
 * one softmax per row, aggregation into O. Z and Z2 [T, H, T] are
 * workspace. */
void qmla_attn_expand_band(const qmla_exec *ex1, size_t H, size_t T, size_t t0, size_t qk,
                           size_t dv, float tau, size_t S, size_t W, const float *qc,
                           const float *kc, const float *vn, const float *kc2,
                           const float *vn2, float *Z, float *Z2, float *O);

#endif
