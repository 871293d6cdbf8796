/* qmla/sweep.h — matched-NMSE perturbations, path responses (docs/math.md §3)
 * and the finite error routes (§4).
 *
 * One item = (layer, cell, sequence). For each path b in {content, rope}:
 *   Delta = QDQ(X_b) - X_b,  E = alpha Delta,  alpha = sqrt(nu ||X||^2/||Delta||^2)
 *   perturb one path (the other exact), Y~ from the routes:
 *     content: dU = (A~ - A) C  +  A E  +  (A~ - A) E   (matching, aggregation,
 *              interaction);   rope: dU = (A~ - A) C   (matching only)
 *   nmse_out = ||Y~ - Y||^2/||Y||^2, response = nmse_out / nmse_cache.
 * Degenerate items (Delta = 0, ||X|| = 0, ||Y|| = 0) carry zeros and the
 * flag, and are left out of every mean.
 */
#ifndef QMLA_SWEEP_H
#define QMLA_SWEEP_H

#include <stddef.h>

#include "qmla/attention.h"
#include "qmla/capture.h"
#include "qmla/engine.h"
#include "qmla/exec.h"
#include "qmla/quant.h"
#include "qmla/response.h"
#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qmla_sweep_params {
    qmla_quant_params quant; /* default INT4, G 64, f16 metadata */
    double nmse;             /* target cache NMSE nu (default 0.01) */
} qmla_sweep_params;

qmla_sweep_params qmla_sweep_defaults(void);

/* Accepted target cache NMSE nu: [QMLA_NMSE_MIN, QMLA_NMSE_MAX].
 * The floor is where float32 stops measuring. The perturbation E has
 * relative RMS size sqrt(nu) against the cache, and it reaches the output
 * through float32 quantities (logits Z + tau Q E^T, the attention change
 * softmax(Z~) - A, the route products) whose rounding error is the unit
 * roundoff u = 2^-24 relative to their own size. The relative error of the
 * perturbed quantities is therefore about u / sqrt(nu). We require it to be
 * at most 2^-9 (1/512): sqrt(nu) >= 2^9 u = 2^-15, i.e. nu >= 2^-30
 * (9.31e-10). Measured: the mean responses at 2^-30 agree with those at
 * 1e-8 to about 1e-4 relative; at 1e-12 they are off by 5%, at 1e-16 by
 * 100%, and below about 1e-18 the RoPE response reads 0 (E rounds away
 * entirely). The ceiling (1e6) keeps alpha^2 = nu ||X||^2/||Delta||^2 and
 * the perturbed logits far from float32 overflow for any sane cache. */
#define QMLA_NMSE_MIN 0x1p-30
#define QMLA_NMSE_MAX 1e6

/* QMLA_EINVAL naming the parameter, the accepted range and the value found
 * for nu outside [QMLA_NMSE_MIN, QMLA_NMSE_MAX] or a quantizer
 * that does not fit d_c or d_r. */
int qmla_sweep_params_check(const qmla_sweep_params *p,
                            const qmla_capture_config *cfg, qmla_error *err);

/* Workspace for one sequence of up to T_max tokens (caller-owned). */
typedef struct qmla_sweep_ws {
    qmla_attn_state clean; /* the clean pass, logits kept */
    float *At;         /* [T, H, T] perturbed attention, then A~ - A */
    float *E;          /* [T, d_c] error of the perturbed path */
    float *dU;         /* [3, T, H, d_c] route deltas */
    float *O3;         /* [3, T, H*d_v] */
    float *Y3;         /* [3, T, D] route outputs */
    float *Yv;         /* [T, D] verification output (verify only) */
    size_t T_max;
} qmla_sweep_ws;

int qmla_sweep_ws_alloc(const qmla_mla_dims *d, size_t T_max, int verify,
                        qmla_sweep_ws *ws, qmla_error *err);
/* Bytes qmla_sweep_ws_alloc takes for these dims (three H x T x T float
 * arrays dominate: 12 H T^2 bytes). */
double qmla_sweep_ws_bytes(const qmla_mla_dims *d, size_t T_max, int verify);
void qmla_sweep_ws_free(qmla_sweep_ws *ws);

/* The matched-NMSE error direction of one path (math.md §3), as the sweep
 * uses it: E [T, width] = alpha (QDQ(X) - X) with ||E||^2 = nu ||X||^2;
 * *xx = ||X||^2, *nmse_qdq the raw NMSE of QDQ, *nmse_cache that of E;
 * *degenerate = 1 (E left as QDQ(X), not rescaled) when X or Delta has no
 * energy. The quantizer's error otherwise. */
int qmla_sweep_error_direction(const qmla_sweep_params *p, const float *X,
                               size_t T, size_t width, float *E, double *xx,
                               double *nmse_qdq, double *nmse_cache,
                               int *degenerate, qmla_error *err);

/* qmla_sweep_error_direction with the quantization and the rescaling on
 * ex's threads (token blocks; each element computed as the serial form
 * does, the sums of squares in the same serial order): the same E, *xx,
 * *nmse_qdq, *nmse_cache and *degenerate bit for bit, and the same status
 * and message on error, whatever the thread count. */
int qmla_sweep_error_direction_par(const qmla_exec *ex, const qmla_sweep_params *p,
                                   const float *X, size_t T, size_t width, float *E,
                                   double *xx, double *nmse_qdq, double *nmse_cache,
                                   int *degenerate, qmla_error *err);

/* Compute both paths of one sequence (threads from ex). q_nope [H,T,d_n], q_rope [H,T,d_r],
 * C [T,d_c], K [T,d_r]. out[0] = content, out[1] = rope (layer/cell/seq
 * fields are left for the caller). verify != 0 also recomputes Y~ with a
 * full forward on the perturbed cache and stores the relative residual of
 * the route identity in route_residual. */
int qmla_sweep_sequence(const qmla_exec *ex, const qmla_sweep_params *p,
                        const qmla_mla_dims *d,
                        size_t T, const qmla_mla_weights *w,
                        const float *q_nope, const float *q_rope,
                        const float *C, const float *K, int verify,
                        qmla_sweep_ws *ws, qmla_response out[2],
                        qmla_error *err);

/* Useful floating-point operations of qmla_sweep_sequence for one sequence
 * of T tokens (both paths, verify off), counting only the causal half of
 * the attention products (T(T+1)/2 query-key pairs): absorption, clean
 * logits/aggregation/projection, content logits + 3 route aggregations + 3
 * projections, RoPE logits + 1 aggregation + 1 projection. Used by the
 * benchmark to report GFLOP/s. */
double qmla_sweep_flops(const qmla_mla_dims *d, size_t T);

/* ---- aggregation (math.md §3) ----------------------------------------- */

typedef struct qmla_summary {
    size_t n_layers;
    int *layer;              /* [n_layers] ascending */
    double *response_content;/* [n_layers] mean over cells of the mean over
                                non-degenerate sequences; NaN when none */
    double *response_rope;   /* [n_layers] likewise */
    double *ratio;           /* [n_layers] rope / content; NaN when the layer
                                is degenerate */
    int *degenerate;         /* [n_layers] 1: a path has no non-degenerate
                                item (or a zero content mean) */
    /* means over the same set of layers: the non-degenerate ones */
    size_t n_layers_in_model;
    double model_response_content, model_response_rope, model_ratio;
    size_t n_rows;           /* rows summarised */
    size_t n_degenerate;     /* degenerate rows */
    size_t n_verified;       /* rows with the route identity checked */
    double worst_route_residual; /* over the verified rows; 0 when none */

    /* ---- dispersion over sequences and cells (math.md §3.1) ----
     * A quantity has a dispersion only where every (layer, path, cell) that
     * enters its point estimate holds >= 2 non-degenerate sequences; NaN
     * otherwise (e.g. one sequence per cell), and NaN everywhere when
     * bootstrap_replicates is 0. The point estimates above never change. */
    double *response_content_se; /* [n_layers] two-stage standard error:
                                    sqrt(sum_k s_k^2/n_k) / K over the K cells */
    double *response_rope_se;    /* [n_layers] likewise */
    double *ratio_se;            /* [n_layers] bootstrap sd of R_P/R_C */
    /* [n_layers] 95 % percentile-bootstrap intervals (2.5 % and 97.5 %
     * quantiles of the replicates) */
    double *response_content_lo, *response_content_hi;
    double *response_rope_lo, *response_rope_hi;
    double *ratio_lo, *ratio_hi;
    /* model-level: bootstrap sd and 95 % percentile intervals of the model
     * means and ratio (layers share sequences: one draw for all of them) */
    double model_response_content_se, model_response_content_lo,
        model_response_content_hi;
    double model_response_rope_se, model_response_rope_lo, model_response_rope_hi;
    double model_ratio_se, model_ratio_lo, model_ratio_hi;
    size_t bootstrap_replicates;  /* B */
    unsigned long bootstrap_seed; /* GSL mt19937 seed */
} qmla_summary;

/* The bootstrap of qmla_summary_compute: B replicates, mt19937 seed. */
#define QMLA_SUMMARY_BOOTSTRAP_B 2000
#define QMLA_SUMMARY_BOOTSTRAP_SEED 26UL

/* Means of math.md §3 over rows in any order (O(n log n)), with their
 * dispersion (§3.1) from QMLA_SUMMARY_BOOTSTRAP_B replicates drawn with
 * QMLA_SUMMARY_BOOTSTRAP_SEED. */
int qmla_summary_compute(const qmla_response *r, size_t n, qmla_summary *s,
                         qmla_error *err);
/* The same with B replicates (0: no bootstrap; the bootstrap fields NaN)
 * and another seed. The point estimates do not depend on B or seed. */
int qmla_summary_compute_boot(const qmla_response *r, size_t n, size_t B,
                              unsigned long seed, qmla_summary *s,
                              qmla_error *err);
void qmla_summary_free(qmla_summary *s);

/* ---- the whole sweep over a capture ----------------------------------- */

typedef struct qmla_sweep_selection {
    const int *layers; /* layer indices to run, or NULL for all */
    size_t n_layers;
    const char *const *cells; /* cell names, or NULL for all */
    size_t n_cells;
} qmla_sweep_selection;

/* Progress (qmla_progress_fn, qmla/exec.h): called after each finished
 * item (items skipped because already complete are counted in done and in
 * resumed); a non-zero return stops the sweep cleanly (finished items stay
 * in the journal). */

typedef struct qmla_sweep_opts {
    qmla_sweep_params params;
    int threads;         /* OpenMP threads (>= 1); results do not depend on it */
    int verify;          /* check the route identity on every item */
    int force;           /* overwrite results of other parameters */
    qmla_progress_fn progress;
    void *progress_ctx;
    const char *command_line; /* recorded in the results file (may be NULL) */
    /* Sharded run (qmla/part.h): n_shards > 1 computes only the items of
     * shard `shard` (round robin, or by cost with `balance`) and writes a
     * part file (those rows + /part) to results_path, for qmla_merge. */
    size_t shard, n_shards;
    int balance;
    /* Files whose rows count as done, read only (another process may be
     * appending to them): journals (names ending in ".journal") and results
     * or part files. Files of another capture, parameters or cell set are
     * skipped. The MPI driver passes the parts and journals of earlier
     * runs with any number of ranks. */
    const char *const *replay;
    size_t n_replay;
    const qmla_engine *engine; /* per-sequence work (NULL: the CPU engine) */
} qmla_sweep_opts;

/* Run the sweep and write `results_path` (qmla-results v1,
 * docs/results-format.md) atomically. The work is the plan of
 * sweep/plan.h: every selected (layer, cell, sequence) of the capture.
 * Finished items are journaled in `<results_path>.journal` as they
 * complete; a rerun with the same capture, parameters and cell set resumes
 * from the journal.
 * Extension: an existing results file of the same capture, parameters and
 * cell set keeps its rows and the run adds the selected layers it lacks (one
 * cell set per results file). A results file or journal of other parameters
 * or another cell set is refused (QMLA_EMISMATCH) unless opts->force, which
 * discards it. Every replayed row (journal or results file) must be valid
 * (qmla_response_validate) and name a layer, cell and sequence of the
 * capture in the cell set, else QMLA_EFORMAT naming the file and the row.
 * Returns QMLA_OK; QMLA_EINVAL for a selection the capture does not hold;
 * QMLA_ENOMEM when the workspace cannot fit the machine; or the reader's /
 * quantizer's / I/O error (then the journal is kept and no results file is
 * written or changed).
 * *stopped is set to 1 when the progress callback stopped the sweep (no
 * results file is written then). On success *summary (caller frees) holds
 * the summary of all rows in the results file. */
int qmla_sweep_run(qmla_capture *cap, const qmla_sweep_selection *sel,
                   const qmla_sweep_opts *opts, const char *results_path,
                   qmla_summary *summary, int *stopped, qmla_error *err);

/* ---- the engine seam (qmla/engine.h) ---------------------------------- */

/* One sequence of the sweep on an engine, with a workspace the engine owns.
 * The CPU engine: ws_alloc/ws_bytes/ws_free wrap qmla_sweep_ws_alloc/
 * _bytes/_free (ws is a qmla_sweep_ws) and sequence is qmla_sweep_sequence.
 * ws_bytes is the host memory ws_alloc takes (qmla_sweep_run refuses a
 * workspace that cannot fit the machine). layer_begin (NULL: nothing to
 * do; the CPU engine's) is called by the driver each time it loads another
 * layer, before that layer's first sequence: a device engine keeps one
 * layer's weights resident and copies them again only after it (or when
 * the weight pointers change). */
typedef struct qmla_sweep_ops {
    int (*ws_alloc)(const qmla_mla_dims *d, size_t T_max, int verify, void **ws,
                    qmla_error *err);
    double (*ws_bytes)(const qmla_mla_dims *d, size_t T_max, int verify);
    void (*ws_free)(void *ws);
    int (*sequence)(const qmla_exec *ex, const qmla_sweep_params *p,
                    const qmla_mla_dims *d, size_t T, const qmla_mla_weights *w,
                    const float *q_nope, const float *q_rope, const float *C,
                    const float *K, int verify, void *ws, qmla_response out[2],
                    qmla_error *err);
    void (*layer_begin)(void *ws);
} qmla_sweep_ops;

const qmla_sweep_ops *qmla_engine_sweep(const qmla_engine *e);

#ifdef __cplusplus
}
#endif
#endif
