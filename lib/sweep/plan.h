/* plan.h (private) — the work of a sweep over a capture, separate from its
 * execution: the list of (layer, cell, sequence) items, which of them the
 * selection wants, and which rows (per item, per path) are already done.
 *
 * Universe: every layer of the capture x the cell set (the selected cells,
 * in capture order) x every sequence, in a fixed order (capture layer order,
 * then cell-set order, then sequence): the items a results file of this cell
 * set may hold. `wanted` marks the items of the selected layers and of shard
 * `shard` of `n_shards` (items split round-robin by index, or balanced by
 * cost T^2 with `balance`: qmla_shard_assign; 0 of 1 = all).
 * Rows are looked up in O(log cells) through a layer map and a sorted cell
 * index, never by scanning the items.
 *
 * Drivers (the CPU sweep in lib/sweep/sweep_run.c, and engines to come) iterate
 * the wanted items that are not done, compute both paths, and hand the rows
 * back with qmla_plan_add. */
#ifndef QMLA_PLAN_H
#define QMLA_PLAN_H

#include <stddef.h>

#include "qmla/capture.h"
#include "qmla/response.h"
#include "qmla/sweep.h"
#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qmla_plan_item {
    size_t li, ci; /* capture layer / cell indices */
    size_t seq;    /* sequence within the cell */
    int layer;     /* layer index as captured */
} qmla_plan_item;

typedef struct qmla_plan {
    size_t n_items;
    qmla_plan_item *items;   /* [n_items] the universe, in order */
    unsigned char *wanted;   /* [n_items] selected (layers, shard) */
    qmla_response *rows;     /* [2 n_items] item-major, path-minor */
    unsigned char *have;     /* [2 n_items] row present */
    size_t n_wanted;         /* wanted items */
    size_t n_wanted_done;    /* wanted items with both rows */
    size_t T_max;            /* longest sequence of a wanted item */
    /* the cell set */
    size_t n_cells;
    const char **cells;      /* [n_cells] names (owned by the capture) */
    /* look-up: layer number -> li, (li, cell-set index) -> first item */
    int layer_min, layer_max;
    long *li_of_layer;       /* [layer_max - layer_min + 1], -1 if absent */
    size_t *first_item;      /* [n_layers * n_cells], SIZE_MAX if absent */
    size_t *n_seq;           /* [n_layers * n_cells] */
    size_t *cell_order;      /* [n_cells] cell-set indices sorted by name */
    size_t n_layers;
} qmla_plan;

typedef struct qmla_plan_selection {
    const int *layers;        /* layer indices, or NULL for all */
    size_t n_layers;
    const char *const *cells; /* cell names, or NULL for every cell of the
                                 capture */
    size_t n_cells;
    size_t shard, n_shards;   /* 0 and 0 (or 1): everything */
    int balance;              /* 0: shards round robin by item index;
                                 1: by cost (qmla_shard_assign, qmla/part.h) */
} qmla_plan_selection;

/* The plan of a sweep selection (NULL: everything), unsharded. */
qmla_plan_selection qmla_plan_selection_of(const qmla_sweep_selection *sel);

/* Build the plan. QMLA_EINVAL naming the capture for a layer or cell the
 * capture lacks, or an empty selection; QMLA_ENOMEM. */
int qmla_plan_build(const qmla_capture *cap, const qmla_plan_selection *sel,
                    qmla_plan *plan, qmla_error *err);
void qmla_plan_free(qmla_plan *plan);

/* Item index of (layer, cell, seq), or SIZE_MAX when the universe lacks it. */
size_t qmla_plan_find(const qmla_plan *plan, int layer, const char *cell,
                      int seq);

/* Record finished rows (later rows replace earlier ones of the same item
 * and path). Each row is validated (qmla_response_validate) and must belong
 * to the universe: QMLA_EFORMAT naming `source` and the row otherwise. */
int qmla_plan_add(qmla_plan *plan, const qmla_response *r, size_t n,
                  const char *source, qmla_error *err);

/* 1 when both rows of item k are present. */
static inline int qmla_plan_item_done(const qmla_plan *p, size_t k)
{
    return p->have[2 * k] && p->have[2 * k + 1];
}

/* The present rows, in plan order (caller frees *out). */
int qmla_plan_rows(const qmla_plan *plan, qmla_response **out, size_t *n,
                   qmla_error *err);

#ifdef __cplusplus
}
#endif
#endif
