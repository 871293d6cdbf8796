/* qmla/learn.h — function-aligned learning of the cache transforms
 * (docs/math.md §8, paper §3.2, App. C.3–C.4), one path at a time, the
 * other path exact. GSL's shape: _alloc, _init (scale search), _iterate
 * (one AdamW step), _get (best step on the held-out bank), _free.
 *
 * Content path: parameters S (skew-symmetric d_c×d_c, its strict upper
 * triangle row by row) and u = log s (d_c);
 *   R = D_γ Cay(S),  Cay(S) = (I − S)^-1 (I + S),  D_γ = diag(sign γ),
 *   T_C = diag(γ)^-1 R diag(e^u).
 * Objective per sequence: L_C = ‖Ỹ − Y‖² / max(‖Y‖², N_Y 1e-8), Ỹ the output
 * with the content cache QDQ(C T_C) T_C^-1 and the RoPE cache exact.
 * RoPE path: θ (d_r/2) and v = log s_i (d_r/2), T_P = blockdiag(e^v_i R(θ_i));
 * L_P = Σ_h ‖M ⊙ Q_P,h (K̃ − K)^T‖² / max(Σ_h ‖M ⊙ Q_P,h K^T‖², 1e-8),
 * computed exactly as Σ_s e_s^T Γ_s e_s with Γ_s = Σ_{i ≥ s} Σ_h q_h,i q_h,i^T
 * (the complete positional score matrix over all causal pairs and heads).
 * A bank's objective is the mean over its sequences.
 *
 * Gradients by hand: attention backward (softmax, aggregation, logits,
 * projection), the Cayley backward G_S = B^T G_R (R + I)^T with B = (I−S)^-1
 * (one LU factorisation of I + S per step, LAPACK dgetrf/dgetrs from
 * OpenBLAS, two solves), and the straight-through rule of §8: with
 * r = (QDQ(x) − x)/scale held constant, QDQ(x) = x + r·scale and
 * scale = (max − min)/L, so ∂/∂x_j adds (Σ_i g_i r_i)/L at the group's
 * argmax and subtracts it at its argmin.
 *
 * Optimiser: AdamW (β 0.9/0.999, ε 1e-8, weight decay 0), linear warm-up
 * over the first 10 % of the steps then cosine decay to 0; the held-out
 * objective is evaluated before every step and after the last, and the best
 * parameters kept. Deterministic: per-sequence gradients are summed in
 * sequence order, whatever the thread count. */
#ifndef QMLA_LEARN_H
#define QMLA_LEARN_H

#include <stddef.h>

#include "qmla/attention.h"
#include "qmla/quant.h"
#include "qmla/rope.h"
#include "qmla/engine.h"
#include "qmla/exec.h"
#include "qmla/tmethod.h"
#include "qmla/transform.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sequences of one layer (views, not owned). */
typedef struct qmla_learn_bank {
    size_t n;              /* sequences */
    const size_t *T;       /* [n] tokens */
    const float **C;       /* [n] -> [T, d_c] */
    const float **K;       /* [n] -> [T, d_r] */
    const float **q_nope;  /* [n] -> [H, T, d_n] */
    const float **q_rope;  /* [n] -> [H, T, d_r] */
} qmla_learn_bank;

typedef enum qmla_learn_path {
    QMLA_LEARN_CONTENT = 0,
    QMLA_LEARN_ROPE = 1
} qmla_learn_path;

typedef struct qmla_learn_opts {
    qmla_quant_params quant; /* the path's quantizer */
    size_t steps;            /* 300 */
    double lr;               /* peak learning rate */
    double warmup;           /* fraction of steps, 0.1 */
    unsigned long seed;      /* initial S ~ N(0, (1e-4)^2) (content) */
    int threads;
    int recon;               /* 1: plain cache reconstruction objective
                                ‖X̃ − X‖² / max(‖X‖², 1e-8) instead of the
                                function-aligned one (paper Table 7 ablation) */
    int attn_reference;      /* content path: 1 computes the attention in the
                                absorbed form with full T×T backward products
                                (the reference the default per-head causal
                                path is tested and benchmarked against); same
                                function, other rounding */
    int attn_f64;            /* content path: 1 computes the per-head form's
                                attention, its backward, the objective and
                                the backward to the parameters in double and
                                rounds the parameter gradient to 16
                                significant bits: somewhat slower, and two
                                engines that both do it follow the same
                                trajectory (qmla learn --attn-precision f64;
                                docs/cuda-engine.md "Learning in double").
                                Not with attn_reference. */
} qmla_learn_opts;

qmla_learn_opts qmla_learn_defaults(void);

typedef struct qmla_learner qmla_learner;

/* w, gamma [d_c] and the banks are views that must outlive the learner.
 * held may have n == 0 (then the train objective selects the step). */
int qmla_learner_alloc(qmla_learn_path path, const qmla_mla_dims *d,
                       const qmla_mla_weights *w, const float *gamma,
                       qmla_rope_pairing pairing, const qmla_learn_bank *train,
                       const qmla_learn_bank *held, const qmla_learn_opts *o,
                       qmla_learner **out, qmla_error *err);
void qmla_learner_free(qmla_learner *l);

size_t qmla_learner_n_params(const qmla_learner *l);
/* Current parameters (read/write view, n_params doubles). */
double *qmla_learner_params(qmla_learner *l);

/* Objective on bank 0 (train) or 1 (held-out) at parameters p; grad
 * (n_params) may be NULL. frozen != 0 uses the rounding residuals recorded
 * by qmla_learner_freeze (for finite-difference tests), else the residuals
 * of the true quantizer at p. */
int qmla_learner_objective(qmla_learner *l, int bank, const double *p,
                           double *grad, int frozen, double *f,
                           qmla_error *err);
int qmla_learner_freeze(qmla_learner *l, int bank, const double *p,
                        qmla_error *err);

/* Scale initialisation: S = 0 (plus the seed's jitter), θ = 0, and the
 * scales of SmoothQuant† for α in {0, 0.25, 0.5, 0.75, 1} or the identity,
 * whichever has the lowest held-out objective (train when no held-out
 * bank). *alpha_out (may be NULL) = the α chosen, -1 for the identity. */
int qmla_learner_init(qmla_learner *l, double *alpha_out, qmla_error *err);
/* One AdamW step (after evaluating the held-out objective at the current
 * parameters). */
int qmla_learner_iterate(qmla_learner *l, qmla_error *err);
/* Evaluate the held-out objective of the final parameters (call once after
 * the last iterate). */
int qmla_learner_finish(qmla_learner *l, qmla_error *err);

typedef struct qmla_learn_state {
    size_t step;          /* steps done */
    double train_obj;     /* train objective at the last step's parameters */
    double held_obj;      /* held-out objective of the last evaluation */
    double best_held;     /* best held-out objective so far */
    size_t best_step;     /* the step whose parameters are best */
    double init_obj;      /* held-out objective after init */
    /* seconds spent so far */
    double t_forward, t_backward, t_qdq, t_cayley;
} qmla_learn_state;
qmla_learn_state qmla_learner_state(const qmla_learner *l);

/* Write the best parameters into t's content (rot, cscale) or RoPE (angle,
 * rscale) fields. */
int qmla_learner_get(qmla_learner *l, qmla_transform *t, qmla_error *err);

/* ---- the engine seam (qmla/engine.h) ---------------------------------- */

/* The learner of an engine (qmla_learn_run), one per layer and path; the
 * learner is the engine's workspace (its banks' passes, the objective and
 * gradient, AdamW). The CPU engine: qmla_learner_alloc, _free, _init,
 * _iterate, _finish, _get and _state on a qmla_learner. */
typedef struct qmla_learn_ops {
    int (*alloc)(qmla_learn_path path, const qmla_mla_dims *d,
                 const qmla_mla_weights *w, const float *gamma,
                 qmla_rope_pairing pairing, const qmla_learn_bank *train,
                 const qmla_learn_bank *held, const qmla_learn_opts *o,
                 void **learner, qmla_error *err);
    void (*free)(void *learner);
    int (*init)(void *learner, double *alpha_out, qmla_error *err);
    int (*iterate)(void *learner, qmla_error *err);
    int (*finish)(void *learner, qmla_error *err);
    int (*get)(void *learner, qmla_transform *t, qmla_error *err);
    qmla_learn_state (*state)(const void *learner);
} qmla_learn_ops;

const qmla_learn_ops *qmla_engine_learn(const qmla_engine *e);

/* ---- the learn driver (`qmla learn`, docs/transforms-format.md) --------- */

/* A line of the driver's log (no trailing newline): "resuming F (n layers
 * done)", "layer L: kept from F", "layer L: rtn calibrated on CELLS" and one
 * line per learned layer and path (steps, init α, objectives, seconds). */
typedef void (*qmla_note_fn)(void *ctx, const char *line);

typedef struct qmla_learn_run_opts {
    const qmla_tmethod_type *method; /* default qmla_tmethod_quantmla */
    const char *path;     /* "content", "rope" or "both" (default) */
    const char *config;   /* "C4R4" (default) or "C2R4": the paths' bits */
    qmla_learn_opts learn;/* steps, lr, warmup, seed, recon, threads (quant
                             bits are set from config) */
    double alpha;         /* SmoothQuant α (default 0.5) */
    const int *layers;    /* layer indices (NULL: every layer) */
    size_t n_layers;
    const char *const *train; /* train cell names (NULL: each layer's first) */
    size_t n_train;
    const char *const *held;  /* held-out cells (NULL: every other cell;
                                 none left: the last quarter of the train
                                 sequences) */
    size_t n_held;
    int no_held;          /* 1: no held-out bank (--heldout-cells none) */
    /* the arguments as given, recorded in the settings that resume
     * compares (NULL: "-") */
    const char *layers_text, *train_text, *held_text;
    const char *also_content; /* with path both: also write the content path
                                 only (what --path content writes) here */
    int force;            /* 1: start over instead of resuming */
    const char *command_line; /* recorded (may be NULL) */
    /* Called before every optimisation step with the steps done of the
     * current layer and path (of total); non-zero stops the run (layers
     * finished so far stay in the file). From the calling thread. */
    qmla_progress_fn progress;
    void *progress_ctx;
    qmla_note_fn note;    /* may be NULL */
    void *note_ctx;
    const qmla_engine *engine; /* the learners' engine (NULL: CPU) */
} qmla_learn_run_opts;

qmla_learn_run_opts qmla_learn_run_defaults(void);

typedef struct qmla_learn_run_result {
    size_t n_layers;      /* layers in the file(s) */
    int wrote, wrote_also;/* the complete files written */
    int stopped;          /* progress asked to stop */
    int refusal;          /* the error is a refusal of the arguments (a cell
                             or layer not in the capture, a file of other
                             settings, --also-content misused), worded for
                             the command line */
} qmla_learn_run_result;

/* Only the checks made before any work: --also-content's conditions and the
 * output paths (qmla_output_path_check, qmla_transform_file_check_output).
 * qmla_learn_run makes them too. */
int qmla_learn_run_check(const char *capture, const char *out,
                         const qmla_learn_run_opts *o, qmla_learn_run_result *r,
                         qmla_error *err);

/* Transforms of the capture's selected layers by o->method, written to `out`
 * in the transforms format: a baseline calibrated on the train cells, or
 * QuantMLA learned one path at a time (docs/math.md §8), the file rewritten
 * after every layer (attribute complete = 0 until the last). An incomplete
 * file of the same settings is resumed: its layers are kept (unless
 * o->force); other settings are refused. */
int qmla_learn_run(const char *capture, const char *out, const qmla_learn_run_opts *o,
                   qmla_learn_run_result *r, qmla_error *err);

#ifdef __cplusplus
}
#endif
#endif
