/* qmla/tfeval.h — calibration of the baselines on a capture and the
 * evaluation of transforms (docs/math.md §7–9): per (layer, cell) the output
 * NMSE with both caches quantized in their transformed coordinates, with
 * only the content or only the RoPE cache quantized, the positional-score
 * error of the RoPE path, and the App. C.3 bound next to the RoPE-only
 * distortion.
 *
 * Per sequence of T tokens (one layer):
 *   C~ = QDQ_c(C T_C) T_C^-1, K~ = QDQ_r(K T_P) T_P^-1 (sink/local rows clean)
 *   nmse_out   = ‖Y(C~, K~) − Y‖² / ‖Y‖²
 *   nmse_c     = ‖Y(C~, K) − Y‖² / ‖Y‖²,  nmse_p = ‖Y(C, K~) − Y‖² / ‖Y‖²
 *   pos_err    = Σ_h ‖M ⊙ (Z~_P,h − Z_P,h)‖² / Σ_h ‖M ⊙ Z_P,h‖²   (L_P of §8)
 *   bound_p    = (½ Σ_h ‖P_h‖₂ ‖C‖₂ ‖M ⊙ ΔZ_P,h‖)² / ‖Y‖²  (Z with τ)
 * A (layer, cell) value is the mean over the cell's sequences (bound: the
 * mean of the per-sequence bounds, and `bound_ok` says that every sequence
 * had nmse_p <= bound_p). Spectral norms through GSL's symmetric
 * eigensolver in double. */
#ifndef QMLA_TFEVAL_H
#define QMLA_TFEVAL_H

#include <stddef.h>

#include "qmla/capture.h"
#include "qmla/exec.h"
#include "qmla/quant.h"
#include "qmla/transform.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Baseline transform of present layer li, calibrated on the cells named
 * (indices into the layer's cells, n_cells of them; every sequence).
 * t must be allocated with the capture's d_c, d_r and pairing; t->layer is
 * set. gamma_out [d_c] receives the layer's kv_norm. method RTN,
 * SMOOTHQUANT (alpha) or QUAROT; QMLA_EINVAL for QUANTMLA. */
int qmla_tf_baseline(const qmla_exec *ex, qmla_capture *cap, size_t li,
                     const size_t *cells, size_t n_cells, qmla_tmethod method,
                     double alpha, qmla_transform *t, float *gamma_out,
                     qmla_error *err);

typedef struct qmla_tf_eval_opts {
    qmla_quant_params qc, qr; /* content / RoPE quantizer (bits per path) */
    size_t sink, local;       /* protected tokens (0/0: none) */
} qmla_tf_eval_opts;

typedef struct qmla_tf_eval_row {
    double nmse_out, nmse_c, nmse_p, pos_err, bound_p;
    int bound_ok;
    size_t n_seq;
} qmla_tf_eval_row;

/* Evaluate transform t (for present layer li; gamma the one it was made
 * with, checked against the capture's kv_norm to 1e-6 relative:
 * QMLA_EMISMATCH naming the layer otherwise) on cell ci. */
int qmla_tf_eval_cell(const qmla_exec *ex, qmla_capture *cap, size_t li,
                      size_t ci, const qmla_transform *t, const float *gamma,
                      const qmla_tf_eval_opts *o, qmla_tf_eval_row *row,
                      qmla_error *err);

/* One row of the /eval group (docs/results-format.md). */
typedef struct qmla_tf_eval_rec {
    const char *method;     /* label: rtn, smoothquant, quarot, quantmla (#k) */
    const char *transforms; /* the transforms file */
    int layer;
    const char *cell;
    qmla_tf_eval_row r;
} qmla_tf_eval_rec;

/* Add (or replace) group /eval of results file `path` (created when absent;
 * other groups kept), written atomically. Root attributes of the group:
 * config, policy, command. */
int qmla_tf_eval_write(const char *path, const char *config,
                       const char *policy, const char *command,
                       const qmla_tf_eval_rec *rows, size_t n,
                       qmla_error *err);

/* λ_max(X^T X)^(1/2) of X [n, d] (double, GSL). */
double qmla_spectral_norm(const float *X, size_t n, size_t d);

#ifdef __cplusplus
}
#endif
#endif
