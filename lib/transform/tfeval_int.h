/* transform/tfeval_int.h (private) — the effective-cache evaluation of one
 * (layer, cell), qmla_tf_eval_cell, with its attention work supplied by an
 * engine: the CPU's in tfeval.c, the GPU's in kernels/engine_cuda.cu. The
 * shared part (loading, the kv_norm check, the effective caches through
 * qmla_transform_effective_*, the bound, the means over sequences) is
 * qmla_tf_eval_cell_impl; the engine computes per sequence the sums below
 * and per layer the head norms. */
#ifndef QMLA_TRANSFORM_TFEVAL_INT_H
#define QMLA_TRANSFORM_TFEVAL_INT_H

#include "qmla/tfeval.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One sequence's sums, every one in double. */
typedef struct qmla_tf_eval_sums {
    double yy;    /* ||Y||^2 of the clean output */
    double dd[3]; /* ||Y(C~, K~) - Y||^2, ||Y(C~, K) - Y||^2, ||Y(C, K~) - Y||^2 */
    double den;   /* sum_h ||M (.) Q_P,h K^T||^2 (no tau) */
    double *nh;   /* [H] (the caller's array): ||M (.) Q_P,h (K~ - K)^T||^2 (no tau) */
    double cn;    /* ||C||_2 (the spectral norm, before the 1e-5 inflation) */
} qmla_tf_eval_sums;

typedef struct qmla_tf_eval_impl {
    void *ctx;
    /* ||P_h||_2 of every head into pn [H] (before the 1e-5 inflation),
     * P_h^T = W_O,h W_UV,h [D, d_c] stored as float (as the CPU does) */
    int (*head_norms)(void *ctx, const qmla_mla_dims *d, const qmla_mla_weights *w,
                      double *pn, qmla_error *err);
    /* the cell's workspace for sequences of T tokens; end frees it */
    int (*begin)(void *ctx, const qmla_mla_dims *d, size_t T, qmla_error *err);
    void (*end)(void *ctx);
    int (*sequence)(void *ctx, const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                    const qmla_mla_weights *w, const float *q_nope, const float *q_rope,
                    const float *C, const float *K, const float *Ce, const float *Ke,
                    qmla_tf_eval_sums *s, qmla_error *err);
} qmla_tf_eval_impl;

/* qmla_tf_eval_cell with im's attention work. */
int qmla_tf_eval_cell_impl(const qmla_tf_eval_impl *im, const qmla_exec *ex,
                           qmla_capture *cap, size_t li, size_t ci, const qmla_transform *t,
                           const float *gamma, const qmla_tf_eval_opts *o,
                           qmla_tf_eval_row *row, qmla_error *err);

/* lambda_max of the symmetric d x d matrix G (GSL's eigensolver, double);
 * NaN when out of memory. */
double qmla_lambda_max_sym(const double *G, size_t d);
/* out[k] = qmla_lambda_max_sym of the k-th of n d x d matrices of G, on
 * `threads` threads. */
void qmla_lambda_max_sym_batch(const double *G, size_t n, size_t d, int threads, double *out);

/* lambda_max(G1 G2) of two symmetric positive semi-definite d x d matrices,
 * as lambda_max(R G2 R) with R = G1^(1/2) (GSL's eigensolvers, double): the
 * largest eigenvalue of B^T A^T A B = (AB)^T (AB) from G1 = A^T A and
 * G2 = B B^T, a d x d problem instead of one of B's width (the CUDA
 * engine's head norms ||W_O,h W_UV,h||_2, d = d_v). NaN when out of
 * memory. The batch: n pairs, `threads` threads. */
double qmla_lambda_max_psd_prod(const double *G1, const double *G2, size_t d);
void qmla_lambda_max_psd_prod_batch(const double *G1, const double *G2, size_t n, size_t d,
                                    int threads, double *out);

#ifdef __cplusplus
}
#endif
#endif
