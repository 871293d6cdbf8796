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
#include "qmla/engine.h"
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

/* The effective-cache evaluation of an engine (qmla_tf_eval_run), one
 * (layer, cell) at a time; it holds no workspace between calls (the cell's
 * sequences are loaded and evaluated inside). The CPU engine:
 * qmla_tf_eval_cell. */
typedef struct qmla_tfeval_ops {
    int (*cell)(const qmla_exec *ex, qmla_capture *cap, size_t li, size_t ci,
                const qmla_transform *t, const float *gamma,
                const qmla_tf_eval_opts *o, qmla_tf_eval_row *row, qmla_error *err);
} qmla_tfeval_ops;

const qmla_tfeval_ops *qmla_engine_tfeval(const qmla_engine *e);

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

/* ---- the eval driver (`qmla eval`) ---------------------------------------- */

#define QMLA_TF_EVAL_MAX 16 /* transforms files of one run */

typedef struct qmla_tf_eval_run_opts {
    const char *const *transforms; /* the files (1..QMLA_TF_EVAL_MAX) */
    size_t n_transforms;
    const char *config;   /* "C4R4" or "C2R4" */
    const char *policy;   /* "none" (default) or "sinkS/localW", recorded */
    const int *layers;    /* NULL: every layer */
    size_t n_layers;
    const char *const *cells; /* NULL: every cell */
    size_t n_cells;
    int threads;
    const char *command_line; /* recorded (may be NULL) */
    const qmla_engine *engine; /* the evaluation's engine (NULL: CPU) */
} qmla_tf_eval_run_opts;

qmla_tf_eval_run_opts qmla_tf_eval_run_defaults(void);

/* sinkS/localW or none -> (sink, local); -1 when malformed. */
int qmla_tf_eval_policy_parse(const char *s, size_t *sink, size_t *local);

typedef struct qmla_tf_eval_run_result {
    size_t n_tf;
    char label[QMLA_TF_EVAL_MAX][64]; /* the files' labels (method; a
                                         repeated one gets #k) */
    int opened;           /* the capture was opened (stages: opened, then
                             computed, then wrote) */
    int computed;         /* every selected (layer, cell) evaluated */
    int wrote;            /* /eval written */
    int bound_fail;       /* some row has bound_ok == 0 */
    int refusal;          /* the error is a refusal worded for the command
                             line (a file without a selected layer, nothing
                             selected) */
    qmla_tf_eval_rec *rows; /* the rows evaluated so far (owned) */
    size_t n_rows;
    /* the layers finished so far, in capture order: index, and per file the
     * mean nmse_out over the layer's selected cells */
    int *layer;
    double *layer_mean;   /* [n_layers_done][n_tf] */
    size_t n_layers_done;
    double mean[QMLA_TF_EVAL_MAX]; /* means over the finished layers */
    /* per file, means over its rows: nmse_out_content, nmse_out_rope,
     * pos_score_err, rope_bound_nmse (set when computed) */
    double path_mean[QMLA_TF_EVAL_MAX][4];
    char *names;          /* storage of the rows' cell names */
} qmla_tf_eval_run_result;

/* Evaluate every transforms file on every selected (layer, cell) of the
 * capture at o->config and o->policy and write group /eval of `out`
 * (qmla_tf_eval_write). A RoPE-only distortion above its bound is not an
 * error: r->bound_fail says so. r is filled as far as the run got, also on
 * an error; free it with qmla_tf_eval_run_result_free. */
int qmla_tf_eval_run(const char *capture, const char *out, const qmla_tf_eval_run_opts *o,
                     qmla_tf_eval_run_result *r, qmla_error *err);
void qmla_tf_eval_run_result_free(qmla_tf_eval_run_result *r);

/* λ_max(X^T X)^(1/2) of X [n, d] (double, GSL). */
double qmla_spectral_norm(const float *X, size_t n, size_t d);

#ifdef __cplusplus
}
#endif
#endif
