/* qmla/allocate.h — bit allocation from the operator model (`qmla allocate`,
 * docs/allocate.md): per layer, the (content bits, RoPE bits) among the
 * candidates that minimise the predicted model-level output error at a
 * mean storage per token within a budget.
 *
 * Model (docs/allocate.md): for layer l and candidate k = C<c>R<r>,
 *   pred_l(k) = P_C,l(c) + P_R,l(r),
 *   P_b,l(bits) = mean over cells, sequences of sum_t ||e_t||^2 tr_b,t / ||Y||^2
 * where e_t is token t's cache error of path b at that width (policy rows
 * clean, the transform applied where given: QDQ(X T) T^-1 - X) and
 * tr_b,t = tr(J_b,t^T J_b,t)/d_b the exact token sensitivity
 * (qmla_sens_exact): the local gain sum_t w_t sigma_t of math.md §5 times
 * the measured cache NMSE nu. The model-level error is sum_l pred_l.
 *
 * Knapsack: costs are each layer's exact integer bytes at `context`
 * (qmla_storage_account_dims), the budget an integer total; solved exactly
 * by a dynamic program over layers (qmla_alloc_solve).
 */
#ifndef QMLA_ALLOCATE_H
#define QMLA_ALLOCATE_H

#include <stddef.h>

#include "qmla/allocation.h"
#include "qmla/engine.h"
#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The exact grouped knapsack: choose one of K items for each of L groups
 * minimising the sum of value[l*K + k] (added in layer order, as doubles)
 * subject to the sum of cost[l*K + k] <= cap (integers >= 0). choice[l]
 * receives the item, *total the minimum, *used the cost reached. Ties (equal
 * sums) go to the smaller cost, then to the lexicographically smallest
 * choice vector read from the last layer. The DP runs on costs reduced by
 * each group's minimum and divided by the gcd of every difference, so its
 * table has L x (cap' + 1) entries, cap' <= sum of the reduced ranges;
 * QMLA_ERANGE when that exceeds 2^28 entries. Infeasible (cap below the sum
 * of the minima): QMLA_EINVAL naming both. Non-finite values: QMLA_EINVAL. */
int qmla_alloc_solve(size_t L, size_t K, const long long *cost, const double *value,
                     long long cap, int *choice, double *total, long long *used,
                     qmla_error *err);

/* Budget `s` for n_layers layers of d_c + d_r values at `context` tokens and
 * policy (sink, window), f16 metadata, group 64, as a total byte cap and its
 * bytes per token (mean over layers):
 *   a number           bytes per token (cap = floor(B n_layers context));
 *   a config C<c>R<r>  its bytes (cap = n_layers x its integer bytes);
 *   "<b>bits"          b bits per cached value equivalent: C4R4's bytes plus
 *                      (b - 4)(d_c + d_r)/8 per token (b = 3: C3R3's bytes),
 *                      b in [2, 16].
 * QMLA_EINVAL naming the value otherwise. */
int qmla_alloc_budget(const char *s, int d_c, int d_r, int sink, int window, long context,
                      size_t n_layers, long long *cap, double *bytes_per_token,
                      qmla_error *err);

/* One layer's bytes per sequence of `context` tokens at C<c_bits>R<r_bits>
 * (group 64, f16 metadata, policy sink/window): qmla_storage_account_dims,
 * checked to be an integer. */
int qmla_alloc_layer_bytes(int c_bits, int r_bits, int d_c, int d_r, int sink, int window,
                           long context, long long *bytes, qmla_error *err);

/* The default candidates: every C<c>R<r> with c, r in 2, 3, 4, 8. */
#define QMLA_ALLOC_DEFAULT_CANDIDATES                                          \
    "C2R2,C2R3,C2R4,C2R8,C3R2,C3R3,C3R4,C3R8,C4R2,C4R3,C4R4,C4R8,C8R2,C8R3,C8R4,C8R8"
#define QMLA_ALLOC_MAX_CANDIDATES 16

typedef struct qmla_alloc_opts {
    const char *budget;       /* required (qmla_alloc_budget) */
    const char *candidates;   /* comma list (NULL: the default) */
    const char *policy;       /* "none" (default) or "sinkS/localW" */
    long context;             /* tokens per sequence of the accounting (0: 4096) */
    const char *transforms;   /* a transforms file (NULL: none, plain RTN) */
    const char *const *cells; /* NULL: every cell */
    size_t n_cells;
    int threads;
    const char *command_line; /* recorded (may be NULL) */
    const qmla_engine *engine; /* clean pass and sensitivities (NULL: CPU) */
} qmla_alloc_opts;

typedef struct qmla_alloc_result {
    qmla_allocation a;        /* the allocation (owned) */
    qmla_alloc_cand *cand;    /* [n_cand] every (layer, candidate) (owned) */
    size_t n_cand;
    double measure_cpu_s;     /* CPU seconds of the measurement */
    double solve_cpu_s;       /* CPU seconds of the knapsack */
    int refusal;              /* the error is worded for the command line */
    int wrote;
} qmla_alloc_result;

/* Measure every candidate on every layer of `capture`, solve, and write
 * group /allocate of `out` (qmla_allocation_write). r is filled as far as
 * the run got; free it with qmla_alloc_result_free. */
int qmla_alloc_run(const char *capture, const char *out, const qmla_alloc_opts *o,
                   qmla_alloc_result *r, qmla_error *err);
void qmla_alloc_result_free(qmla_alloc_result *r);

#ifdef __cplusplus
}
#endif
#endif
