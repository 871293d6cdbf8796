/* op_shared.h — private: the pieces of a predict / interventions sequence
 * that the CPU code (lib/operator/predict.c, intervene.c) and the CUDA
 * engine (kernels/engine_cuda.cu) share, so that both assemble points and
 * draw controls the same way (same fields, same random draws). */
#ifndef QMLA_OP_SHARED_H
#define QMLA_OP_SHARED_H

#include "qmla/intervene.h"
#include "qmla/predict.h"
#include "qmla/response.h"
#include "qmla/sweep.h"

#include <gsl/gsl_rng.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The sweep parameters of configuration c: the defaults with c's bits,
 * group and cache NMSE. */
qmla_sweep_params qmla_op_config_sweep(const qmla_op_config *c);

/* The start of point p (path `path` under configuration c): p zeroed and
 * filled from c and T; the QDQ direction E [T x width] of the path under sp
 * (qmla_op_path_direction) with *xx = ||X||^2; then p->degenerate (the
 * direction's, the path's finite response fin's, or yy == 0), wt [T] the
 * per-token shares of ||E||^2 and *ee = ||E||^2 (wt zero and *skip = 1
 * where degenerate). Returns the status of the direction. */
int qmla_op_point_begin(qmla_op_point *p, int path, const qmla_op_config *c,
                        const qmla_sweep_params *sp, const float *C, const float *K, size_t T,
                        size_t dc, size_t dr, const qmla_response *fin, double yy, float *E,
                        double *wt, double *xx, double *ee, int *skip, qmla_error *err);

/* qmla_op_point_begin for a direction already drawn: E [T x width] the
 * path's QDQ direction under c (qmla_op_path_direction's, e.g. the one the
 * sweep of the same configuration drew: the same function of the same
 * arguments) and degen its degenerate flag; p, wt and *ee as
 * qmla_op_point_begin. Returns its *skip. */
int qmla_op_point_begin_dir(qmla_op_point *p, int path, const qmla_op_config *c, size_t T,
                            size_t width, const float *E, int degen,
                            const qmla_response *fin, double yy, double *wt, double *ee);

/* sigma[t] = tr[t] cc / yy, sigma[T + t] = tr[T + t] kk / yy (0 where
 * yy <= 0), t < T; tr may be sigma. */
void qmla_op_sigma_scale(double *sigma, const double *tr, size_t T, double cc, double kk,
                         double yy);

/* p->pred_trace = (1/T) sum sg_t and p->pred_alloc = sum wt_t sg_t. */
void qmla_op_point_pred(qmla_op_point *p, const double *sg, const double *wt, size_t T);

/* The QDQ direction E [T x width] of path (content: C, width dc; RoPE: K,
 * width dr) under p; *width, *xx = ||X||^2 and *degen as
 * qmla_sweep_error_direction. */
int qmla_op_path_direction(const qmla_sweep_params *p, int path, const float *C, const float *K,
                           size_t T, size_t dc, size_t dr, float *E, size_t *width, double *xx,
                           int *degen, qmla_error *err);

/* The joint perturbation's fields of out from its output NMSE oj, the
 * paths' finite responses fin[2] and the cache NMSE nmse. */
void qmla_iv_joint(qmla_iv_item *out, double oj, const qmla_response fin[2], double nmse);

/* Start of one sequence's controls: rng seeded with seed, the
 * 2 QMLA_N_CTRL reps ratios NaN, out->degenerate set from the finite
 * responses fin[2] and ||Y||^2 = yy; returns out->degenerate. */
int qmla_iv_begin(gsl_rng *rng, uint64_t seed, size_t reps, const qmla_response fin[2],
                  double yy, qmla_iv_item *out, double *ratio);

/* One control direction E1 [T x width] from the QDQ direction E0 (e0 =
 * ||E0||): QMLA_CTRL_SIGN random signs, QMLA_CTRL_PERMUTE a random token
 * permutation (perm [T] scratch), otherwise a Gaussian direction scaled to
 * norm e0. */
void qmla_iv_control(gsl_rng *rng, int c, const float *E0, float *E1, size_t T,
                     size_t width, double e0, size_t *perm);

#ifdef __cplusplus
}
#endif

#endif
