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
 * Threading: the block, head and row loops run under OpenMP with `threads`
 * threads, each BLAS call single-threaded inside; qmla_attn_set_threads()
 * sets both. Results do not depend on the thread count (the work split is
 * fixed; each block is computed by one thread).
 */
#ifndef QMLA_ATTENTION_H
#define QMLA_ATTENTION_H

#include <stddef.h>

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

/* Set the number of threads used by the attention loops (>= 1). BLAS is
 * switched to one thread per call; the parallelism comes from OpenMP. */
void qmla_attn_set_threads(int threads);
int qmla_attn_get_threads(void);

/* Q_C = absorb(q_nope): q_nope [H, T, d_n], w_uk [H, d_n, d_c] -> q_lat
 * [T, H, d_c] (token-major). */
void qmla_attn_absorb(const qmla_mla_dims *d, size_t T, const float *q_nope,
                      const float *w_uk, float *q_lat);

/* Head-major [H, T, w] -> token-major [T, H, w]. */
void qmla_attn_tokens_major(size_t H, size_t T, size_t w, const float *in,
                            float *out);

/* Z (+)= alpha * Q X^T on the causal blocks, Q [T, H, w], X [T, w],
 * Z [T, H, T]. beta 0 overwrites, 1 accumulates. Entries above the diagonal
 * inside diagonal blocks are written too (and ignored by the softmax). */
void qmla_attn_logits_acc(size_t H, size_t T, size_t w, float alpha,
                          const float *Q, const float *X, float beta, float *Z);

/* Causal row softmax: A[i][h][s] = softmax_{s<=i} Z[i][h][s], zeros above
 * the diagonal. A may alias Z. */
void qmla_attn_softmax(size_t H, size_t T, const float *Z, float *A);

/* D = softmax(Z) - Aref in one pass (causal; zeros above the diagonal),
 * the attention change of a perturbation. D may alias Z. */
void qmla_attn_softmax_delta(size_t H, size_t T, const float *Z,
                             const float *Aref, float *D);

/* U[:,h] = A[:,h] X on the causal blocks (A zero above the diagonal):
 * A [T, H, T], X [T, w] -> U [T, H, w]. beta as in sgemm. */
void qmla_attn_aggregate(size_t H, size_t T, size_t w, const float *A,
                         const float *X, float beta, float *U);

/* Y = sum_h U[:,h] w_uv[h]^T w_o[:, h]^T for S row-stacked inputs:
 * U [S*T, H, d_c], O workspace [S*T, H*d_v], Y [S*T, D]. */
void qmla_attn_project(const qmla_mla_dims *d, size_t T, size_t S,
                       const qmla_mla_weights *w, const float *U, float *O,
                       float *Y);

/* Workspace for qmla_attn_forward with sequences of up to T_max tokens. */
typedef struct qmla_attn_ws {
    size_t T_max;
    float *q_lat;    /* [T, H, d_c] */
    float *Z;        /* [T, H, T] */
    float *U;        /* [T, H, d_c] */
    float *O;        /* [T, H*d_v] */
    float *q_rope_t; /* [T, H, d_r] token-major copy of q_rope */
} qmla_attn_ws;

int qmla_attn_ws_alloc(const qmla_mla_dims *d, size_t T_max, qmla_attn_ws *ws,
                       qmla_error *err);
void qmla_attn_ws_free(qmla_attn_ws *ws);

/* Full forward of one sequence: q_nope [H,T,d_n], q_rope [H,T,d_r],
 * C [T,d_c], K [T,d_r] -> Y [T, D]. On return ws->Z holds A. */
int qmla_attn_forward(const qmla_mla_dims *d, size_t T,
                      const qmla_mla_weights *w, const float *q_nope,
                      const float *q_rope, const float *C, const float *K,
                      float *Y, qmla_attn_ws *ws, qmla_error *err);

/* Aligned allocation for large float workspaces (free with free()): 64-byte
 * aligned, and on transparent huge pages (2 MiB, madvise) from 8 MiB up.
 * NULL with QMLA_ENOMEM and a message naming `what` on failure. */
void *qmla_alloc_big(size_t bytes, qmla_error *err, const char *what);

/* Helpers in double precision. */
double qmla_sumsq(const float *x, size_t n);
double qmla_diff_sumsq(const float *a, const float *b, size_t n);
/* ||a - b|| / ||b|| (0 if both zero, +inf if only b is zero). */
double qmla_rel_fro(const float *a, const float *b, size_t n);

/* Apply RoPE under a pairing: post = rotate(pre) with per-pair cos/sin
 * [T, d_r/2]; pre/post [R, T, d_r] for R rows-of-sequences (heads). */
void qmla_rope_rotate(size_t R, size_t T, size_t d_r, int pairing,
                      const float *cos_, const float *sin_, const float *pre,
                      float *post);

#ifdef __cplusplus
}
#endif
#endif
