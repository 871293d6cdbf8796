/* qmla/part.h — sharded sweeps: the assignment of plan items to shards,
 * part files, and their merge into the results file a single run writes.
 *
 * A part file is a qmla-results v1 file (docs/results-format.md) holding
 * only the rows of one shard, plus a /part group describing the whole plan,
 * so that a merge can check coverage without the capture:
 *   /part attrs  shard, n_shards, balance (0 round robin, 1 by cost)
 *   /part/layer    [n_slots] int32   layer of each (layer, cell) slot of the
 *   /part/cell     [n_slots] int32   universe, in plan order; cell = index in
 *   /part/n_seq    [n_slots] int64   the cell set; n_seq sequences, T tokens;
 *   /part/T        [n_slots] int64   selected = 1 for the slots of the
 *   /part/selected [n_slots] uint8   selected layers.
 * Item k of the universe is (slot, seq) in slot order then sequence order,
 * exactly the order of sweep/plan.h, and its shard is qmla_shard_assign's.
 *
 * Used by `qmla sweep --shard i/n`, `qmla merge` and the MPI driver of
 * `qmla sweep` (cli/mpi_sweep.c): every rank writes a part, rank 0
 * merges. */
#ifndef QMLA_PART_H
#define QMLA_PART_H

#include <stddef.h>

#include "qmla/results.h"
#include "qmla/status.h"
#include "qmla/sweep.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Shard of each of n_items items: owner[k] in [0, n_shards).
 * balance = 0: round robin over the universe index (k mod n_shards).
 * balance = 1: contiguous runs of equal cost over the selected items
 * (sel[k] != 0; unselected items get owner k mod n_shards): in plan order,
 * item k goes to shard floor(n_shards * m_k / C), m_k the midpoint of its
 * interval of the cumulative cost and C the total, so every shard's cost is
 * within one item's cost of C / n_shards, and a shard's items are
 * consecutive (each rank reads about 1/n_shards of the capture instead of
 * every cell). Deterministic: a function of (cost, sel, n_shards) only.
 * cost[k] is the item's relative cost (the sweep uses T^2: the H x T x T
 * attention arrays dominate). Returns QMLA_OK. */
int qmla_shard_assign(const double *cost, const unsigned char *sel,
                      size_t n_items, size_t n_shards, int balance,
                      size_t *owner, qmla_error *err);

typedef struct qmla_part_slot {
    int layer;         /* layer index as captured */
    int cell;          /* index in the cell set */
    long long n_seq;   /* sequences */
    long long T;       /* tokens per sequence */
    int selected;      /* layer selected */
} qmla_part_slot;

typedef struct qmla_part_info {
    size_t shard, n_shards;
    int balance;
    size_t n_slots;
    qmla_part_slot *slots; /* [n_slots] owned; qmla_part_info_free */
} qmla_part_info;

void qmla_part_info_free(qmla_part_info *pi);

/* Write a part file: the results file of rows r (any order) with summary s
 * and meta m, plus /part from pi; atomic (temporary file, fsync, rename).
 * QMLA_EIO / QMLA_ENOMEM naming the file. */
int qmla_part_write(const char *path, const qmla_results_meta *m,
                    const qmla_response *r, size_t n, const qmla_summary *s,
                    const qmla_part_info *pi, qmla_error *err);

/* Read /part of a part file. QMLA_EFORMAT naming the file and what is
 * missing or malformed (a results file without /part: "not a part file"). */
int qmla_part_read(const char *path, qmla_part_info *pi, qmla_error *err);

/* Before `qmla sweep --shard SHARD/N_SHARDS -o path` (n_shards > 1) replaces
 * `path`: QMLA_EMISMATCH naming both shards when it is the part file of
 * another shard of N_SHARDS (or holds a /part that cannot be read), so that
 * another shard's rows are not replaced without --force; QMLA_OK when it is
 * absent, empty, not a part, this shard's own part, a part of a plan of
 * another shard count (rewritten: the plan changed), or n_shards < 2. */
int qmla_part_check_target(const char *path, size_t shard, size_t n_shards,
                           qmla_error *err);

/* Merge part files into `out` (qmla-results v1), refusing:
 *   - parts of another capture, parameters or cell set than the first part
 *     (QMLA_EMISMATCH naming both files and both keys), or of another plan
 *     (slots, n_shards, balance);
 *   - two parts of the same shard, or a row present in two parts
 *     (QMLA_EMISMATCH naming the files and the item);
 *   - a row of an item its part's shard does not own (QMLA_EFORMAT);
 *   - incomplete coverage (QMLA_EINVAL: the number of missing items, the
 *     shards without a part, and the first missing items by layer, cell and
 *     sequence).
 * The rows are handed to the summary and the writer in plan order, as a
 * single run does: /responses and /summary equal the single run's bit for
 * bit. Provenance: the first part's, with command_line and created_utc of
 * this merge. `out` is refused (QMLA_EINVAL) when it exists and is not a
 * results file (a capture, transforms or serve-sim file would be replaced).
 * *summary (caller frees) on success. */
int qmla_merge(const char *const *parts, size_t n_parts, const char *out,
               const char *command_line, qmla_summary *summary,
               qmla_error *err);

#ifdef __cplusplus
}
#endif
#endif
