/* qmla/attention.h — MLA attention in the absorbed form (docs/math.md §1).
 *
 * One layer, one sequence of T tokens, causal (query i sees keys s <= i).
 * Storage float32 row-major; products through CBLAS (OpenBLAS), computed
 * block-causally (row blocks of about 512/H query tokens, all heads, against
 * the keys they can see, so the masked half of T×T is not computed); norms
 * in double. Large workspaces sit on transparent huge pages.
 *
 *   Q_C[:,h] = q_nope[h] @ w_uk[h]                    [T, H, d_c]
 *   Z[:,h]   = tau (Q_C[:,h] C^T + Q_P[:,h] K^T)      [T, H, T]
 *   A        = softmax over s <= i of Z[i][h][s]      (0 for s > i)
 *   U[:,h]   = A[:,h] C                               [T, H, d_c]
 *   O        = [U[:,h] w_uv[h]^T]_h                   [T, H*d_v]
 *   Y        = O w_o^T                                [T, D]
 *
 * Internal tensors are token-major ([T, H, ...]) so that one causal row
 * block of B tokens covers all heads and is a single GEMM of B*H rows.
 * Inputs as captured (q_nope, q_rope: [H, T, ...]) are head-major.
 *
 * Threading: the block, head and row loops run under OpenMP with the
 * context's thread count (qmla/exec.h); each BLAS call inside runs on the
 * calling thread (the program sets BLAS to one thread once,
 * qmla_blas_set_threads). Results do not depend on the thread count (the
 * work split is fixed; each block is computed by one thread).
 *
 * Two levels: the primitives (absorb, logits, softmax, aggregate, project)
 * that the sweep and the coming JVP code combine, and one clean forward pass
 * (qmla_attn_state) that keeps every intermediate a later analysis needs.
 */
#ifndef QMLA_ATTENTION_H
#define QMLA_ATTENTION_H

#include <stddef.h>

#include "qmla/engine.h"
#include "qmla/exec.h"
#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif


typedef struct qmla_mla_dims {
    size_t H, D, d_c, d_n, d_r, d_v;
    double tau; /* softmax_scale */
} qmla_mla_dims;

/* The weights of one layer (views, not owned). */
typedef struct qmla_mla_weights {
    const float *w_uk; /* [H, d_n, d_c] */
    const float *w_uv; /* [H, d_v, d_c] */
    const float *w_o;  /* [D, H*d_v] */
} qmla_mla_weights;

/* Q_C = absorb(q_nope): q_nope [H, T, d_n], w_uk [H, d_n, d_c] -> q_lat
 * [T, H, d_c] (token-major). */
void qmla_attn_absorb(const qmla_exec *ex, const qmla_mla_dims *d, size_t T, const float *q_nope,
                      const float *w_uk, float *q_lat);

/* Head-major [H, T, w] -> token-major [T, H, w]. */
void qmla_attn_tokens_major(size_t H, size_t T, size_t w, const float *in,
                            float *out);

/* Z (+)= alpha * Q X^T on the causal blocks, Q [T, H, w], X [T, w],
 * Z [T, H, T]. beta 0 overwrites, 1 accumulates. Entries above the diagonal
 * inside diagonal blocks are written too (and ignored by the softmax). */
void qmla_attn_logits_acc(const qmla_exec *ex, size_t H, size_t T, size_t w, float alpha,
                          const float *Q, const float *X, float beta, float *Z);

/* Causal row softmax: A[i][h][s] = softmax_{s<=i} Z[i][h][s], zeros above
 * the diagonal. A may alias Z. */
void qmla_attn_softmax(const qmla_exec *ex, size_t H, size_t T, const float *Z, float *A);
/* The same for the query rows t0..t1-1 only (the other rows untouched). */
void qmla_attn_softmax_rows(const qmla_exec *ex, size_t H, size_t T, size_t t0, size_t t1,
                            const float *Z, float *A);

/* D = softmax(Z) - Aref in one pass (causal; zeros above the diagonal),
 * the attention change of a perturbation. D may alias Z. */
void qmla_attn_softmax_delta(const qmla_exec *ex, size_t H, size_t T, const float *Z,
                             const float *Aref, float *D);

/* Softmax JVP (docs/math.md §5), causal: for each row,
 * dA[s] = A[s] (dZ[s] - sum_{s'<=i} A[s'] dZ[s']) for s <= i, 0 above the
 * diagonal (sums in double). A, dZ, dA [T, H, T]; dA may alias dZ. */
void qmla_attn_softmax_jvp(const qmla_exec *ex, size_t H, size_t T,
                           const float *A, const float *dZ, float *dA);

/* U[:,h] = A[:,h] X on the causal blocks (A zero above the diagonal):
 * A [T, H, T], X [T, w] -> U [T, H, w]. beta as in sgemm. */
void qmla_attn_aggregate(const qmla_exec *ex, size_t H, size_t T, size_t w, const float *A,
                         const float *X, float beta, float *U);

/* Y = sum_h U[:,h] w_uv[h]^T w_o[:, h]^T for S row-stacked inputs:
 * U [S*T, H, d_c], O workspace [S*T, H*d_v], Y [S*T, D]. */
void qmla_attn_project(const qmla_exec *ex, const qmla_mla_dims *d, size_t T, size_t S,
                       const qmla_mla_weights *w, const float *U, float *O,
                       float *Y);

/* ---- the clean forward pass ------------------------------------------- */

/* Every intermediate of one clean forward pass over a sequence of up to
 * T_max tokens (caller-owned; all token-major):
 *   q_lat    [T, H, d_c]  absorbed content queries Q_C
 *   q_rope_t [T, H, d_r]  positional queries Q_P
 *   Z        [T, H, T]    logits, kept only when allocated with keep_logits
 *                         (else NULL and the logits are overwritten by A)
 *   A        [T, H, T]    causal attention (zeros above the diagonal)
 *   U        [T, H, d_c]  aggregated latents A C
 *   O        [T, H*d_v]   head outputs
 *   Y        [T, D]       attention output */
typedef struct qmla_attn_state {
    size_t T_max;
    float *q_lat, *q_rope_t, *Z, *A, *U, *O, *Y;
} qmla_attn_state;

int qmla_attn_state_alloc(const qmla_mla_dims *d, size_t T_max,
                          int keep_logits, qmla_attn_state *st,
                          qmla_error *err);
/* Bytes qmla_attn_state_alloc takes. */
double qmla_attn_state_bytes(const qmla_mla_dims *d, size_t T_max,
                             int keep_logits);
void qmla_attn_state_free(qmla_attn_state *st);

/* The clean pass: q_nope [H,T,d_n], q_rope [H,T,d_r] (head-major, as
 * captured), C [T,d_c], K [T,d_r] -> every field of st. QMLA_EINVAL for T
 * outside [1, T_max]. */
int qmla_attn_state_forward(const qmla_exec *ex, const qmla_mla_dims *d,
                            size_t T, const qmla_mla_weights *w,
                            const float *q_nope, const float *q_rope,
                            const float *C, const float *K, qmla_attn_state *st,
                            qmla_error *err);

/* The pass after absorption, on given caches (clean or perturbed): logits
 * into Z, attention into A (A may alias Z), U, O, Y. */
void qmla_attn_from_queries(const qmla_exec *ex, const qmla_mla_dims *d,
                            size_t T, const qmla_mla_weights *w,
                            const float *q_lat, const float *q_rope_t,
                            const float *C, const float *K, float *Z, float *A,
                            float *U, float *O, float *Y);

/* ---- the engine seam (qmla/engine.h) ---------------------------------- */

/* The clean pass of an engine. The CPU engine: qmla_attn_state_forward. */
typedef struct qmla_attn_ops {
    int (*state_forward)(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                         const qmla_mla_weights *w, const float *q_nope,
                         const float *q_rope, const float *C, const float *K,
                         qmla_attn_state *st, qmla_error *err);
} qmla_attn_ops;

const qmla_attn_ops *qmla_engine_attn(const qmla_engine *e);

#ifdef __cplusplus
}
#endif
#endif
