/* qmla/predict.h — local gains, operator sensitivities, error allocation
 * and the three predictors of the operator–error model (docs/math.md §5),
 * per sequence and over a whole capture (`qmla jvp`, `qmla predict`).
 *
 * One point = (layer, cell, sequence, path, configuration), a configuration
 * being a quantizer direction (bits, group) rescaled to cache NMSE nu:
 *   E        = alpha (QDQ(X_b) - X_b), ||E||^2 = nu ||X_b||^2 (as the sweep)
 *   g_jvp    = (||J_b E||^2 / ||Y||^2) / (||E||^2 / ||X_b||^2)
 *   g_finite = the sweep's response R_b at the same E (finite perturbation)
 *   sigma_t  = tr(J_b,t^T J_b,t)/d_b * ||X_b||^2/||Y||^2   (exact, per token)
 *   w_t      = ||e_t||^2 / ||E||^2
 *   predictors: cache only (one constant: log-ratio 0), operator trace
 *   (1/T) sum_t sigma_t, operator + allocation sum_t w_t sigma_t.
 * Nothing is fitted: the operator+allocation predictor is "frozen" by
 * construction and is validated on configurations marked held out.
 */
#ifndef QMLA_PREDICT_H
#define QMLA_PREDICT_H

#include <stddef.h>
#include <stdint.h>

#include "qmla/attention.h"
#include "qmla/capture.h"
#include "qmla/jvp.h"
#include "qmla/response.h"
#include "qmla/status.h"
#include "qmla/sweep.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One error configuration. */
typedef struct qmla_op_config {
    int bits, group;  /* quantizer of the direction */
    double nmse;      /* cache NMSE nu the direction is rescaled to */
    int heldout;      /* 1: a validation point of the frozen predictor */
} qmla_op_config;

/* One point (see above). Per-token allocations are stored flat: w_t of this
 * point is alloc[alloc_offset + t], t < T. */
typedef struct qmla_op_point {
    int layer;
    char cell[QMLA_CELL_NAME_MAX];
    int seq, path;          /* path: QMLA_PATH_CONTENT / QMLA_PATH_ROPE */
    int bits, group;
    double nmse;
    int heldout, degenerate;
    double g_jvp, g_finite; /* local and finite gains */
    double pred_trace;      /* (1/T) sum sigma_t (0 without sensitivities) */
    double pred_alloc;      /* sum w_t sigma_t   (0 without sensitivities) */
    size_t T, alloc_offset;
} qmla_op_point;

/* Workspace of one sequence (caller-owned). */
typedef struct qmla_op_ws {
    qmla_sweep_ws sweep;  /* finite responses; its clean pass is reused */
    qmla_jvp_ws jvp;
    qmla_sens_ws sens;    /* allocated only with sensitivities */
    float *E;             /* [T, max(d_c, d_r)] error direction */
    double *tr;           /* [2, T] raw traces (content, rope) */
    size_t T_max;
    int with_sens;
} qmla_op_ws;

int qmla_op_ws_alloc(const qmla_mla_dims *d, size_t T_max, int with_sens,
                     int threads, qmla_op_ws *ws, qmla_error *err);
void qmla_op_ws_free(qmla_op_ws *ws);

/* All points of one sequence: for each configuration k and path b,
 * pts[2k + b] (layer/cell/seq left to the caller), alloc [2*nconf, T] the
 * allocations, and, when L != NULL (sensitivities on), sigma [2, T] the
 * normalised sensitivities (content, then RoPE) and the predictors. q_nope
 * [H,T,d_n], q_rope [H,T,d_r], C [T,d_c], K [T,d_r]. */
int qmla_op_sequence(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                     const qmla_mla_weights *w, const qmla_sens_layer *L,
                     const float *q_nope, const float *q_rope, const float *C,
                     const float *K, const qmla_op_config *conf, size_t nconf,
                     qmla_op_ws *ws, qmla_op_point *pts, double *alloc,
                     double *sigma, qmla_error *err);

/* ---- statistics --------------------------------------------------------- */

typedef struct qmla_op_stats {
    size_t n_points;             /* non-degenerate points */
    double spearman_jvp_vs_finite;
    /* RoPE/content log-ratio, over (layer, cell, seq, configuration) pairs
     * with both paths non-degenerate: mean |predicted - log(gP/gC)|, the
     * measured ratio from the finite gains */
    size_t n_pairs;
    double mae_log_ratio_cache_only, mae_log_ratio_operator_only,
        mae_log_ratio_operator_allocation;
    /* frozen validation on held-out points (both paths pooled) */
    size_t n_heldout;
    double spearman, median_abs_log_error;
} qmla_op_stats;

/* Statistics of n points (any order; pairs found by their keys). Entries
 * that have no points are NaN. with_pred 0: only the JVP statistics. */
int qmla_op_stats_compute(const qmla_op_point *p, size_t n, int with_pred,
                          qmla_op_stats *s, qmla_error *err);

/* The frozen operator+allocation predictor split by cell or by direction
 * (one row per distinct key, cells by name, directions in first-appearance
 * order): over the row's non-degenerate points, held-out directions only
 * (n_heldout, spearman_heldout, median_heldout: Spearman of pred_alloc
 * against g_finite and the median |log(pred_alloc/g_finite)|) and all
 * directions (n_all, spearman_all, median_all), and the operator+allocation
 * RoPE/content log-ratio MAE over the row's pairs (n_pairs, mae_alloc).
 * The predictor has no fitted parameter, so a cell's row is its held-out
 * validation: the predictor applied to that cell alone. NaN where a row has
 * no points (Spearman: fewer than 2). */
enum { QMLA_OP_SPLIT_CELL = 0, QMLA_OP_SPLIT_DIRECTION = 1 };
typedef struct qmla_op_split {
    char key[QMLA_CELL_NAME_MAX]; /* cell name, or "INT4/G64/nu0.001" */
    int heldout;                  /* direction rows: 1 when held out; cells: -1 */
    size_t n_heldout, n_all, n_pairs;
    double spearman_heldout, median_heldout, spearman_all, median_all, mae_alloc;
} qmla_op_split;

/* Rows of the split `by` of n points into *rows (caller frees), *n_rows. */
int qmla_op_split_compute(const qmla_op_point *p, size_t n, int by, qmla_op_split **rows,
                          size_t *n_rows, qmla_error *err);

/* Spearman rank correlation of x and y (GSL), NaN for n < 2. */
double qmla_spearman(const double *x, const double *y, size_t n);

/* The derived table predict_pairs of a /predict table (lib/operator/optables.c;
 * `qmla export --table predict_pairs`, figure fig7-validation): one row per
 * RoPE/content pair of non-degenerate points of one item and direction (the
 * pairs of the mae_log_ratio_* attributes), columns layer, cell, seq, bits,
 * group, nmse, heldout, direction ("INT4/G64/nu0.001"), direction_index,
 * log_ratio_measured, log_ratio_pred_alloc, log_ratio_pred_trace,
 * abs_error_alloc and the average ranks rank_measured, rank_pred_alloc.
 * QMLA_EFORMAT naming a missing column. *out owned by the caller. */
struct qmla_table;
int qmla_op_pairs_table(const struct qmla_table *predict, struct qmla_table **out,
                        qmla_error *err);

/* ---- over a capture ------------------------------------------------------ */

typedef struct qmla_op_opts {
    const qmla_op_config *conf;
    size_t nconf;
    int sensitivities;        /* 1: `qmla predict` (sensitivities, predictors) */
    int threads;
    int force;                /* discard a journal of other options */
    const char *command_line; /* recorded (may be NULL) */
    qmla_progress_fn progress;
    void *progress_ctx;
    const qmla_engine *engine; /* per-sequence work (NULL: the CPU engine) */
    /* Shards and merges (docs/results-format.md "Operator parts"), as
     * qmla_iv_opts': n_shards > 1 computes shard `shard` of the plan's
     * cost-balanced assignment and writes a part file to results_path;
     * n_parts > 0 computes nothing and merges parts[n_parts] into the group,
     * the one-process run's bit for bit. Zero (qmla_op_opts_make): neither. */
    size_t shard, n_shards;
    const char *const *parts;
    size_t n_parts;
    /* With n_shards > 1: files of earlier runs replayed read only before
     * the work (part files and resume journals of any shard count, this
     * key; others left out), so a rerun with another N resumes. */
    const char *const *replay;
    size_t n_replay;
} qmla_op_opts;

/* The options of a run, every field from its argument (the one filling of
 * qmla_op_opts, shared by `qmla jvp|predict` and the job driver). */
qmla_op_opts qmla_op_opts_make(const qmla_op_config *conf, size_t nconf, int sensitivities,
                               int threads, int force, const qmla_engine *engine,
                               const char *command_line, qmla_progress_fn progress,
                               void *progress_ctx);

/* The directions of a run (at most QMLA_OP_CONFIGS_MAX): `qmla jvp` (0)
 * QDQ at each of bits[nbits] with `group` at nu; `qmla predict` (1) the
 * development direction INT4 and the held-out INT2, INT3, INT8, INT4 at
 * nu/10 and 10 nu and (even group) INT4 at group/2. */
#define QMLA_OP_CONFIGS_MAX 8
int qmla_op_configs(int sensitivities, const int *bits, size_t nbits, int group,
                    double nu, qmla_op_config *c, size_t *n);

/* Every point of the selected layers / cells of `cap`, written into group
 * /jvp (sensitivities off) or /predict (on) of `results_path` (created
 * when absent; an existing file keeps its other groups and the group is
 * replaced), atomically. Resume: a journal `<results_path>.<group>.journal`
 * holds finished (layer, cell, sequence) items; a rerun with the same
 * capture and options continues from it; a journal of other options is
 * QMLA_EMISMATCH unless o->force (then discarded). *stats filled on success. */
int qmla_op_run(qmla_capture *cap, const qmla_sweep_selection *sel,
                const qmla_op_opts *o, const char *results_path,
                qmla_op_stats *stats, int *stopped, qmla_error *err);

/* As qmla_op_run; on success *points (caller frees) receives the n points
 * written, in file order (alloc_offset refers to the file's flat vector). */
int qmla_op_run_points(qmla_capture *cap, const qmla_sweep_selection *sel,
                       const qmla_op_opts *o, const char *results_path,
                       qmla_op_stats *stats, qmla_op_point **points, size_t *n,
                       int *stopped, qmla_error *err);

/* ---- the engine seam (qmla/engine.h) ---------------------------------- */

/* The points of one sequence on an engine (qmla_op_run). The CPU engine:
 * ws is a qmla_op_ws (qmla_op_ws_alloc/_free), layer a qmla_sens_layer
 * (qmla_sens_layer_init/_free, made once per layer when sensitivities are
 * on) and sequence is qmla_op_sequence (layer NULL: sensitivities off).
 * layer_begin (NULL for the CPU engine) is called by the driver on ws after
 * each layer load, before that layer's first sequence: a device engine
 * keeps the layer's weights on the device from one sequence to the next
 * (while the weight pointers stay the same) until it is called, so a
 * caller passing other weights at the same addresses calls it first. */
typedef struct qmla_op_ops {
    int (*ws_alloc)(const qmla_mla_dims *d, size_t T_max, int with_sens,
                    int threads, void **ws, qmla_error *err);
    void (*ws_free)(void *ws);
    int (*layer_alloc)(const qmla_exec *ex, const qmla_mla_dims *d,
                       const qmla_mla_weights *w, void **layer, qmla_error *err);
    void (*layer_free)(void *layer);
    int (*sequence)(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                    const qmla_mla_weights *w, const void *layer,
                    const float *q_nope, const float *q_rope, const float *C,
                    const float *K, const qmla_op_config *conf, size_t nconf,
                    void *ws, qmla_op_point *pts, double *alloc, double *sigma,
                    qmla_error *err);
    void (*layer_begin)(void *ws); /* may be NULL */
} qmla_op_ops;

const qmla_op_ops *qmla_engine_op(const qmla_engine *e);

#ifdef __cplusplus
}
#endif
#endif
