/* transform/learn_int.h (private) — an engine's content-path attention in
 * the CPU learner (lib/transform/learn.c): the CUDA engine's learner
 * (kernels/engine_cuda.cu) is the CPU learner with the attention forward
 * and backward of the content objective (the per-head form of learn.c's
 * attn_fast: K_h, V_h, logits, softmax, aggregation, projection, the
 * objective and G_C~) on the device; the transform maps, the
 * straight-through quantizer, the Cayley map and AdamW stay the CPU's. */
#ifndef QMLA_TRANSFORM_LEARN_INT_H
#define QMLA_TRANSFORM_LEARN_INT_H

#include "qmla/learn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qmla_learn_attn {
    void *ctx;
    /* L_C of sequence k of bank b (0 train, 1 held-out) at the effective
     * cache Ct [T, d_c] into *f; with want_grad, GC [T, d_c] = dL_C/dCt.
     * tm[0] += forward seconds, tm[1] += backward seconds. Called for one
     * sequence at a time (the learner serialises the calls). */
    int (*content)(void *ctx, int bank, size_t k, const float *Ct, int want_grad, double *f,
                   float *GC, double *tm, qmla_error *err);
    void (*free)(void *ctx);
    /* The same in double (qmla_learn_opts.attn_f64): GC [T, d_c] double, the
     * learner's backward to the parameters continuing in double. An engine
     * sets content or content64 for the precision its learner was made
     * with (the other NULL). */
    int (*content64)(void *ctx, int bank, size_t k, const float *Ct, int want_grad, double *f,
                     double *GC, double *tm, qmla_error *err);
} qmla_learn_attn;

/* From now on l's content objective calls a->content instead of its own
 * attention (the learner owns a->ctx: freed with it by a->free). */
void qmla_learner_set_attn(qmla_learner *l, const qmla_learn_attn *a);

/* Sequences of bank b (0 train, 1 held-out). */
size_t qmla_learner_n_seq(const qmla_learner *l, int bank);
/* Views of sequence k of bank b: its tokens, q_nope and q_rope
 * (head-major), k_rope, the clean output Y [T, D] and the objective's
 * denominator max(||Y||^2, N_Y 1e-8) (content path). */
void qmla_learner_seq(const qmla_learner *l, int bank, size_t k, size_t *T,
                      const float **q_nope, const float **q_rope, const float **K,
                      const float **Y, double *yden);

#ifdef __cplusplus
}
#endif
#endif
