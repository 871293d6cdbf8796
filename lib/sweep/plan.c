/* sweep_plan.c — the work list of a sweep (lib/sweep/plan.h). */
#include "sweep/plan.h"
#include "qmla/part.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void qmla_plan_free(qmla_plan *p)
{
    if (!p)
        return;
    free(p->items);
    free(p->wanted);
    free(p->rows);
    free(p->have);
    free(p->cells);
    free(p->li_of_layer);
    free(p->first_item);
    free(p->n_seq);
    free(p->cell_order);
    memset(p, 0, sizeof *p);
}

static const qmla_plan *sort_ctx; /* qsort has no context argument in C11 */

static int cmp_cell(const void *a, const void *b)
{
    return strcmp(sort_ctx->cells[*(const size_t *)a],
                  sort_ctx->cells[*(const size_t *)b]);
}

/* Cell-set index of `name`, or -1. */
static long cell_index(const qmla_plan *p, const char *name)
{
    size_t lo = 0, hi = p->n_cells;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        const int c = strcmp(p->cells[p->cell_order[mid]], name);
        if (c == 0)
            return (long)p->cell_order[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

qmla_plan_selection qmla_plan_selection_of(const qmla_sweep_selection *sel)
{
    qmla_plan_selection ps;
    memset(&ps, 0, sizeof ps);
    if (sel) {
        ps.layers = sel->layers;
        ps.n_layers = sel->n_layers;
        ps.cells = sel->cells;
        ps.n_cells = sel->n_cells;
    }
    return ps;
}

static int layer_wanted(const qmla_plan_selection *sel, int layer)
{
    if (!sel || !sel->layers)
        return 1;
    for (size_t k = 0; k < sel->n_layers; k++)
        if (sel->layers[k] == layer)
            return 1;
    return 0;
}

/* The cell set: the selected names (checked against the capture) in
 * capture order, or every cell name of the capture in order of first
 * appearance. */
static int build_cell_set(const qmla_capture *cap, const qmla_plan_selection *sel,
                          qmla_plan *p, qmla_error *err)
{
    const size_t NL = qmla_capture_n_layers(cap);
    size_t cap_names = 0;
    for (size_t li = 0; li < NL; li++)
        cap_names += qmla_capture_n_cells(cap, li);
    p->cells = malloc((cap_names ? cap_names : 1) * sizeof *p->cells);
    if (!p->cells)
        return qmla_error_set(err, QMLA_ENOMEM, "sweep plan: out of memory");
    if (sel && sel->cells) {
        for (size_t k = 0; k < sel->n_cells; k++) {
            size_t li = 0, ci = 0;
            int found = 0;
            for (li = 0; li < NL && !found; li++)
                found = qmla_capture_find_cell(cap, li, sel->cells[k], &ci);
            if (!found)
                return qmla_error_set(err, QMLA_EINVAL,
                                      "%s: cell \"%s\" requested but not in the "
                                      "capture (first layer has \"%s\"...)",
                                      qmla_capture_path(cap), sel->cells[k],
                                      NL ? qmla_capture_cell_name(cap, 0, 0) : "");
        }
    }
    p->n_cells = 0;
    for (size_t li = 0; li < NL; li++)
        for (size_t ci = 0; ci < qmla_capture_n_cells(cap, li); ci++) {
            const char *name = qmla_capture_cell_name(cap, li, ci);
            int chosen = !(sel && sel->cells);
            for (size_t k = 0; !chosen && k < sel->n_cells; k++)
                chosen = strcmp(sel->cells[k], name) == 0;
            int dup = 0;
            for (size_t k = 0; chosen && !dup && k < p->n_cells; k++)
                dup = strcmp(p->cells[k], name) == 0;
            if (chosen && !dup)
                p->cells[p->n_cells++] = name;
        }
    p->cell_order = malloc((p->n_cells ? p->n_cells : 1) * sizeof *p->cell_order);
    if (!p->cell_order)
        return qmla_error_set(err, QMLA_ENOMEM, "sweep plan: out of memory");
    for (size_t k = 0; k < p->n_cells; k++)
        p->cell_order[k] = k;
    sort_ctx = p;
    qsort(p->cell_order, p->n_cells, sizeof *p->cell_order, cmp_cell);
    sort_ctx = NULL;
    return QMLA_OK;
}

int qmla_plan_build(const qmla_capture *cap, const qmla_plan_selection *sel,
                    qmla_plan *p, qmla_error *err)
{
    memset(p, 0, sizeof *p);
    const size_t NL = qmla_capture_n_layers(cap);
    int st = QMLA_OK;
    if (sel && sel->layers)
        for (size_t k = 0; k < sel->n_layers; k++) {
            size_t li;
            if (!qmla_capture_find_layer(cap, sel->layers[k], &li))
                return qmla_error_set(
                    err, QMLA_EINVAL,
                    "%s: layer %d requested but not in the capture (it holds "
                    "%zu layers, %d..%d)",
                    qmla_capture_path(cap), sel->layers[k], NL,
                    NL ? qmla_capture_layer_index(cap, 0) : 0,
                    NL ? qmla_capture_layer_index(cap, NL - 1) : 0);
        }
    if ((st = build_cell_set(cap, sel, p, err)))
        goto fail;
    p->n_layers = NL;
    p->layer_min = NL ? qmla_capture_layer_index(cap, 0) : 0;
    p->layer_max = p->layer_min;
    for (size_t li = 0; li < NL; li++) {
        const int l = qmla_capture_layer_index(cap, li);
        p->layer_min = l < p->layer_min ? l : p->layer_min;
        p->layer_max = l > p->layer_max ? l : p->layer_max;
    }
    const size_t span = (size_t)(p->layer_max - p->layer_min) + 1;
    const size_t slots = NL * p->n_cells;
    p->li_of_layer = malloc(span * sizeof *p->li_of_layer);
    p->first_item = malloc((slots ? slots : 1) * sizeof *p->first_item);
    p->n_seq = calloc(slots ? slots : 1, sizeof *p->n_seq);
    if (!p->li_of_layer || !p->first_item || !p->n_seq) {
        st = qmla_error_set(err, QMLA_ENOMEM, "sweep plan: out of memory");
        goto fail;
    }
    for (size_t k = 0; k < span; k++)
        p->li_of_layer[k] = -1;
    /* count, then fill */
    size_t n = 0;
    for (size_t li = 0; li < NL; li++) {
        p->li_of_layer[qmla_capture_layer_index(cap, li) - p->layer_min] = (long)li;
        for (size_t k = 0; k < p->n_cells; k++) {
            size_t ci;
            p->first_item[li * p->n_cells + k] = SIZE_MAX;
            if (!qmla_capture_find_cell(cap, li, p->cells[k], &ci))
                continue;
            p->first_item[li * p->n_cells + k] = n;
            p->n_seq[li * p->n_cells + k] = qmla_capture_cell_n(cap, li, ci);
            n += qmla_capture_cell_n(cap, li, ci);
        }
    }
    p->n_items = n;
    p->items = malloc((n ? n : 1) * sizeof *p->items);
    p->wanted = calloc(n ? n : 1, 1);
    p->rows = calloc(2 * (n ? n : 1), sizeof *p->rows);
    p->have = calloc(2 * (n ? n : 1), 1);
    if (!p->items || !p->wanted || !p->rows || !p->have) {
        st = qmla_error_set(err, QMLA_ENOMEM, "sweep plan: out of memory for "
                            "%zu items", n);
        goto fail;
    }
    const size_t shards = sel && sel->n_shards > 1 ? sel->n_shards : 1;
    const size_t shard = sel && sel->n_shards > 1 ? sel->shard : 0;
    double *cost = malloc((n ? n : 1) * sizeof *cost);
    size_t *owner = malloc((n ? n : 1) * sizeof *owner);
    if (!cost || !owner) {
        free(cost);
        free(owner);
        st = qmla_error_set(err, QMLA_ENOMEM, "sweep plan: out of memory for "
                            "%zu items", n);
        goto fail;
    }
    size_t k = 0;
    for (size_t li = 0; li < NL; li++) {
        const int layer = qmla_capture_layer_index(cap, li);
        const int lw = layer_wanted(sel, layer);
        for (size_t c = 0; c < p->n_cells; c++) {
            size_t ci;
            if (!qmla_capture_find_cell(cap, li, p->cells[c], &ci))
                continue;
            const size_t N = qmla_capture_cell_n(cap, li, ci);
            const size_t T = qmla_capture_cell_t(cap, li, ci);
            for (size_t s = 0; s < N; s++, k++) {
                p->items[k] = (qmla_plan_item){li, ci, s, layer};
                p->wanted[k] = (unsigned char)lw;
                cost[k] = (double)T * (double)T;
            }
        }
    }
    st = qmla_shard_assign(cost, p->wanted, n, shards, sel ? sel->balance : 0,
                           owner, err);
    for (k = 0; !st && k < n; k++) {
        p->wanted[k] = (unsigned char)(p->wanted[k] && owner[k] == shard);
        if (p->wanted[k]) {
            const size_t T = qmla_capture_cell_t(cap, p->items[k].li, p->items[k].ci);
            p->n_wanted++;
            p->T_max = T > p->T_max ? T : p->T_max;
        }
    }
    free(cost);
    free(owner);
    if (st)
        goto fail;
    if (p->n_wanted == 0 && shards == 1) { /* a shard may be empty */
        st = qmla_error_set(err, QMLA_EINVAL,
                            "%s: the selection holds no (layer, cell) items",
                            qmla_capture_path(cap));
        goto fail;
    }
    return QMLA_OK;
fail:
    qmla_plan_free(p);
    return st;
}

size_t qmla_plan_find(const qmla_plan *p, int layer, const char *cell, int seq)
{
    if (layer < p->layer_min || layer > p->layer_max || seq < 0)
        return SIZE_MAX;
    const long li = p->li_of_layer[layer - p->layer_min];
    const long c = cell_index(p, cell);
    if (li < 0 || c < 0)
        return SIZE_MAX;
    const size_t slot = (size_t)li * p->n_cells + (size_t)c;
    if (p->first_item[slot] == SIZE_MAX || (size_t)seq >= p->n_seq[slot])
        return SIZE_MAX;
    return p->first_item[slot] + (size_t)seq;
}

int qmla_plan_add(qmla_plan *p, const qmla_response *r, size_t n,
                  const char *source, qmla_error *err)
{
    for (size_t k = 0; k < n; k++) {
        int st = qmla_response_validate(&r[k], err);
        if (st)
            return qmla_error_prefix(err, "%s: row %zu (layer %d, seq %d): ",
                                     source, k, r[k].layer, r[k].seq);
        const size_t it = qmla_plan_find(p, r[k].layer, r[k].cell, r[k].seq);
        if (it == SIZE_MAX)
            return qmla_error_set(err, QMLA_EFORMAT,
                                  "%s: row %zu names layer %d, cell \"%s\", "
                                  "sequence %d: expected a layer, cell and "
                                  "sequence of the capture in this sweep's cell "
                                  "set, found none",
                                  source, k, r[k].layer, r[k].cell, r[k].seq);
        const size_t slot = 2 * it + (size_t)r[k].path;
        const int was_done = qmla_plan_item_done(p, it);
        p->rows[slot] = r[k];
        p->have[slot] = 1;
        if (p->wanted[it] && !was_done && qmla_plan_item_done(p, it))
            p->n_wanted_done++;
    }
    return QMLA_OK;
}

int qmla_plan_rows(const qmla_plan *p, qmla_response **out, size_t *n,
                   qmla_error *err)
{
    size_t cnt = 0;
    for (size_t k = 0; k < 2 * p->n_items; k++)
        cnt += p->have[k];
    qmla_response *r = malloc((cnt ? cnt : 1) * sizeof *r);
    if (!r)
        return qmla_error_set(err, QMLA_ENOMEM, "sweep plan: out of memory");
    cnt = 0;
    for (size_t k = 0; k < 2 * p->n_items; k++)
        if (p->have[k])
            r[cnt++] = p->rows[k];
    *out = r;
    *n = cnt;
    return QMLA_OK;
}
