/* qmla/intervene.h — equal-energy interventions (docs/math.md §6) and the
 * joint-path perturbation (paper App. B.2), per sequence and over a capture
 * (`qmla intervene`).
 *
 * For each path b and its QDQ direction E (rescaled to cache NMSE nu, as
 * the sweep), `reps` controls of each kind keep ||E|| and move the energy:
 *   sign:      E'_tj = ±E_tj, independent fair signs
 *   permute:   e'_t = e_pi(t), pi a uniform permutation of the tokens
 *   isotropic: E' = ||E|| G/||G||, G i.i.d. standard normal
 * and the local-gain ratio g_b(E')/g_b(E) (exact JVPs) is recorded.
 * Random draws: GSL mt19937 seeded with the item's seed (recorded), in the
 * order path, control (sign, permute, isotropic), repetition, element; the
 * JVPs do not depend on the thread count, so files are bit-identical.
 *
 * Joint path: both caches perturbed at once, each at cache NMSE nu (so the
 * joint cache NMSE (||E_C||^2+||E_K||^2)/(||C||^2+||K||^2) is nu too), a
 * full forward on the perturbed caches; joint response NMSE_out/nu and the
 * cross term NMSE_out,joint - NMSE_out,C - NMSE_out,P (= 2<dY_C, dY_P>/||Y||^2
 * plus higher order), against the two single-path responses. */
#ifndef QMLA_INTERVENE_H
#define QMLA_INTERVENE_H

#include <stddef.h>
#include <stdint.h>

#include "qmla/predict.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { QMLA_CTRL_SIGN = 0, QMLA_CTRL_PERMUTE = 1, QMLA_CTRL_ISOTROPIC = 2,
       QMLA_N_CTRL = 3 };
const char *qmla_control_name(int control); /* "sign", "permute", "isotropic" */

/* The derived table intervention_ratios of /interventions' attributes a[n]
 * (lib/operator/optables.c; figure fig7-interventions): six rows (control
 * sign, permute, isotropic x path content, rope), columns control,
 * control_index, path, path_index, gain_ratio, ci_low, ci_high, median.
 * QMLA_EFORMAT naming a missing attribute. */
struct qmla_attr;
struct qmla_table;
int qmla_intervene_ratios_table(const struct qmla_attr *a, size_t n,
                                struct qmla_table **out, qmla_error *err);

/* One item's results. ratio [2 paths][3 controls][reps] (caller-sized). */
typedef struct qmla_iv_item {
    uint64_t seed;
    int degenerate;            /* a path or the output has no energy */
    double g_jvp[2];           /* local gain of the QDQ direction, per path */
    double r_finite[2];        /* the sweep's finite responses at nu */
    double r_joint;            /* joint response NMSE_out,joint / nu */
    double cross;              /* NMSE_out,joint - NMSE_out,C - NMSE_out,P */
    double cross_rel;          /* cross / (NMSE_out,C + NMSE_out,P) */
} qmla_iv_item;

/* One sequence: ws from qmla_op_ws_alloc (sensitivities not needed). */
int qmla_intervene_sequence(const qmla_exec *ex, const qmla_mla_dims *d,
                            size_t T, const qmla_mla_weights *w,
                            const float *q_nope, const float *q_rope,
                            const float *C, const float *K,
                            const qmla_sweep_params *p, size_t reps,
                            uint64_t seed, qmla_op_ws *ws, qmla_iv_item *out,
                            double *ratio, qmla_error *err);

typedef struct qmla_iv_opts {
    qmla_sweep_params params; /* direction: bits, group, nu (default 1e-3) */
    size_t reps;              /* default 32 */
    uint64_t seed;            /* item k uses seed + k (k in plan order) */
    size_t bootstrap;         /* resamples of the CI (default 2000) */
    int threads;
    int force;                /* discard a journal of other options */
    const char *command_line;
    qmla_progress_fn progress;
    void *progress_ctx;
    const qmla_engine *engine; /* per-sequence work (NULL: the CPU engine) */
    /* Shards and merges (docs/results-format.md "Operator parts"):
     * n_shards > 1: compute only the items of shard `shard` (the plan's
     * cost-balanced assignment, qmla/part.h) and write a part file to
     * results_path instead of the group; n_parts > 0: compute nothing, merge
     * parts[n_parts] (made with these options) into the group of
     * results_path, the same as one process's run bit for bit. */
    size_t shard, n_shards;
    const char *const *parts;
    size_t n_parts;
    const char *const *replay; /* as qmla_op_opts' */
    size_t n_replay;
} qmla_iv_opts;

/* Headline: geometric-mean gain ratio per (control, path) over all items
 * and repetitions, with a 95 % percentile bootstrap interval (resampling
 * the log ratios, GSL mt19937 seeded with opts->seed); the median ratio;
 * the joint means. */
typedef struct qmla_iv_stats {
    size_t n_items;
    double gmean[3][2], ci_lo[3][2], ci_hi[3][2], median[3][2];
    double mean_r_joint, mean_r_content, mean_r_rope, mean_cross_rel;
} qmla_iv_stats;

/* Every selected item; group /interventions of results_path (created or
 * replaced, the file's other groups kept), atomically. Resume: finished
 * items are journaled in `<results_path>.interventions.journal`; a rerun
 * with the same capture, direction, reps, seed and cell set continues from
 * it (a journal of other options is QMLA_EMISMATCH unless force, which
 * discards it), and the group does not
 * depend on what was resumed. */
/* With o->n_shards > 1 the part file is written and *stats left zero; with
 * o->n_parts > 0 the parts are checked (lib/operator/op_part.h: another
 * run, plan or engine, two parts of one shard, an item twice, incomplete
 * coverage: refused, nothing written) and merged. */
int qmla_intervene_run(qmla_capture *cap, const qmla_sweep_selection *sel,
                       const qmla_iv_opts *o, const char *results_path,
                       qmla_iv_stats *stats, int *stopped, qmla_error *err);

/* ---- the engine seam (qmla/engine.h) ---------------------------------- */

/* One item of the interventions on an engine (qmla_intervene_run). The CPU
 * engine: ws is a qmla_op_ws without sensitivities (qmla_op_ws_alloc/_free)
 * and sequence is qmla_intervene_sequence. layer_begin (NULL for the CPU
 * engine): as qmla_op_ops' (qmla/predict.h), called by the driver after
 * each layer load. */
typedef struct qmla_iv_ops {
    int (*ws_alloc)(const qmla_mla_dims *d, size_t T_max, int threads, void **ws,
                    qmla_error *err);
    void (*ws_free)(void *ws);
    int (*sequence)(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                    const qmla_mla_weights *w, const float *q_nope,
                    const float *q_rope, const float *C, const float *K,
                    const qmla_sweep_params *p, size_t reps, uint64_t seed,
                    void *ws, qmla_iv_item *out, double *ratio, qmla_error *err);
    void (*layer_begin)(void *ws); /* may be NULL */
} qmla_iv_ops;

const qmla_iv_ops *qmla_engine_iv(const qmla_engine *e);

#ifdef __cplusplus
}
#endif
#endif
