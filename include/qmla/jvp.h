/* qmla/jvp.h — forward-mode derivatives of the attention output in the
 * caches (docs/math.md §5): the exact JVP on the one clean pass, the
 * single-token JVP, and the operator sensitivities σ_b,t of every token,
 * exact (pairwise Gram route) and by Hutchinson's estimator.
 *
 * One layer, one sequence of T tokens, token-major as qmla/attention.h:
 *   dZ[:,h] = tau (Q_C[:,h] dC^T + Q_P[:,h] dK^T)          [T, H, T]
 *   dA      = A ⊙ (dZ − rowsum(A ⊙ dZ))  (causal)           [T, H, T]
 *   dU[:,h] = dA[:,h] C + A[:,h] dC                         [T, H, d_c]
 *   dY      = project(dU)                                   [T, D]
 *
 * Token sensitivities: J_b,t is the Jacobian of Y in row t of cache b
 * (d_b = d_c or d_r columns). The library returns the raw
 *   tr(J_b,t^T J_b,t) / d_b
 * and a caller normalises like a gain, multiplying by ||X_b||^2 / ||Y||^2
 * (qmla/predict.h does). Exact route: row i >= t of J_t e is e^T M_i with
 *   M_i = sum_h a_hi (tau q_hi ⊗ v_hi + P_h)      (content; RoPE: no P_h,
 *                                                  q from Q_P)
 *   a_hi = A_h[i,t],  v_hi = (c_t − U_h,i) P_h,  P_h = W_UV,h^T W_O,h^T,
 * and ||M_i||_F^2 expands into H x H Gram terms; every D-dimensional inner
 * product <x P_h, y P_h'> becomes a d_v one through K_hh' = W_O,h^T W_O,h'.
 * The pairwise work runs as GEMMs over causal pairs (cost ~ 2 T^2 H^2 d_v
 * per sequence), never as T separate JVPs. Derivation: docs/math.md §5.
 *
 * Threading: qmla_exec; results bit-identical for any thread count (fixed
 * work split, fixed reduction order). */
#ifndef QMLA_JVP_H
#define QMLA_JVP_H

#include <stddef.h>
#include <stdint.h>

#include "qmla/attention.h"
#include "qmla/engine.h"
#include "qmla/exec.h"
#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Workspace of the JVP for sequences of up to T_max tokens (caller-owned). */
typedef struct qmla_jvp_ws {
    size_t T_max;
    float *dZ; /* [T, H, T] logit change, then attention change dA */
    float *dU; /* [T, H, d_c] latent change */
    float *dO; /* [T, H*d_v] head-output change */
    float *dY; /* [T, D] output change (the result) */
} qmla_jvp_ws;

int qmla_jvp_ws_alloc(const qmla_mla_dims *d, size_t T_max, qmla_jvp_ws *ws,
                      qmla_error *err);
double qmla_jvp_ws_bytes(const qmla_mla_dims *d, size_t T_max);
void qmla_jvp_ws_free(qmla_jvp_ws *ws);

/* dY = J_C dC + J_K dK into ws->dY [T, D], at the clean pass st (its A, U
 * and queries; st from qmla_attn_state_forward on the same T, C, K).
 * dC [T, d_c] and dK [T, d_r] may each be NULL (a zero direction), not
 * both. C [T, d_c] is the clean content cache. QMLA_EINVAL for T outside
 * [1, min(T_max of st, ws)] or both directions NULL. */
int qmla_jvp_apply(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                   const qmla_mla_weights *w, const qmla_attn_state *st,
                   const float *C, const float *dC, const float *dK,
                   qmla_jvp_ws *ws, qmla_error *err);

enum { QMLA_JVP_CONTENT = 0, QMLA_JVP_ROPE = 1 };

/* Single-token JVP: J_b,t e for a direction e [d_b] in row t of cache b
 * (path QMLA_JVP_CONTENT or QMLA_JVP_ROPE), through math.md §5's column-t
 * formula (rows i < t of dY are zero). Writes rows t..T-1 of ws->dY and
 * returns ||J_b,t e||^2 (double), or a negative value for bad arguments. */
double qmla_jvp_token(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                      const qmla_mla_weights *w, const qmla_attn_state *st,
                      const float *C, int path, size_t t, const float *e,
                      qmla_jvp_ws *ws);

/* ---- exact token sensitivities ---------------------------------------- */

/* Per-layer constants of the exact route (caller-owned):
 *   K  [H*d_v, H*d_v]  W_O^T W_O (block (h,h') = K_hh')
 *   G  [H, H]          <P_h, P_h'> (Frobenius), double */
typedef struct qmla_sens_layer {
    size_t H, d_v;
    float *K;
    double *G;
} qmla_sens_layer;

int qmla_sens_layer_init(const qmla_exec *ex, const qmla_mla_dims *d,
                         const qmla_mla_weights *w, qmla_sens_layer *L,
                         qmla_error *err);
void qmla_sens_layer_free(qmla_sens_layer *L);

/* Workspace of the exact route for sequences of up to T_max tokens, run
 * with up to `threads` threads (the per-thread scratch is sized for it). */
typedef struct qmla_sens_ws {
    size_t T_max, Bi, nthreads;
    float *Yc;     /* [T, H*d_v]  c_t W_UV,h^T per head */
    double *yy;    /* [T, H, H]   y_th K_hh' y_th'^T */
    double *oo;    /* [T, H, H]   O_hi K_hh' O_h'i^T */
    double *qc;    /* [T, H, H]   q_hi . q_h'i (content queries) */
    double *qr;    /* [T, H, H]   likewise, positional queries */
    double *part;  /* [2, nblocks, T] per-block partial traces */
    float *scratch;   /* per thread: see jvp.c (sens_scratch_floats) */
    double *dscratch; /* per thread: [2, Bi, H, H] pair constants */
} qmla_sens_ws;

int qmla_sens_ws_alloc(const qmla_mla_dims *d, size_t T_max, int threads,
                       qmla_sens_ws *ws, qmla_error *err);
double qmla_sens_ws_bytes(const qmla_mla_dims *d, size_t T_max, int threads);
void qmla_sens_ws_free(qmla_sens_ws *ws);

/* Raw sensitivities of every token, both paths: trc[t] = tr(J_C,t^T J_C,t)
 * / d_c, trr[t] = tr(J_P,t^T J_P,t) / d_r (each [T], double), at the clean
 * pass st of content cache C [T, d_c]. QMLA_EINVAL for T or a thread count
 * beyond the workspace. */
int qmla_sens_exact(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                    const qmla_mla_weights *w, const qmla_sens_layer *L,
                    const qmla_attn_state *st, const float *C,
                    qmla_sens_ws *ws, double *trc, double *trr,
                    qmla_error *err);

/* Useful floating-point operations of qmla_sens_exact for one sequence
 * (both paths; the benchmark's GFLOP/s). */
double qmla_sens_flops(const qmla_mla_dims *d, size_t T);

/* Hutchinson's estimator of the same raw sensitivities for one path: for
 * each of `probes` Rademacher vectors r in {-1,+1}^{d_b} per token (drawn
 * from GSL's mt19937 seeded with `seed`, probe-major, then token, then
 * element), ||J_b,t r||^2 / d_b through qmla_jvp_token; est[t] the mean
 * over probes and se[t] its standard error (sample sd / sqrt(probes); 0
 * for one probe). */
int qmla_sens_hutchinson(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                         const qmla_mla_weights *w, const qmla_attn_state *st,
                         const float *C, int path, size_t probes,
                         uint64_t seed, qmla_jvp_ws *ws, double *est,
                         double *se, qmla_error *err);

/* ---- the engine seam (qmla/engine.h) ---------------------------------- */

/* The JVPs and sensitivities of an engine (ws: qmla_jvp_ws, qmla_sens_ws on
 * the CPU). The CPU engine: qmla_jvp_apply, qmla_jvp_token,
 * qmla_sens_exact, qmla_sens_hutchinson. The drivers reach them through
 * qmla_op_ops and qmla_iv_ops, whose CPU sequences call them. */
typedef struct qmla_jvp_ops {
    int (*apply)(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                 const qmla_mla_weights *w, const qmla_attn_state *st,
                 const float *C, const float *dC, const float *dK,
                 qmla_jvp_ws *ws, qmla_error *err);
    double (*token)(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                    const qmla_mla_weights *w, const qmla_attn_state *st,
                    const float *C, int path, size_t t, const float *e,
                    qmla_jvp_ws *ws);
    int (*sens_exact)(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                      const qmla_mla_weights *w, const qmla_sens_layer *L,
                      const qmla_attn_state *st, const float *C,
                      qmla_sens_ws *ws, double *trc, double *trr,
                      qmla_error *err);
    int (*sens_hutchinson)(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                           const qmla_mla_weights *w, const qmla_attn_state *st,
                           const float *C, int path, size_t probes,
                           uint64_t seed, qmla_jvp_ws *ws, double *est,
                           double *se, qmla_error *err);
} qmla_jvp_ops;

const qmla_jvp_ops *qmla_engine_jvp(const qmla_engine *e);

#ifdef __cplusplus
}
#endif
#endif
