/* op_part.h (private) — shards and merges of `qmla jvp|predict|intervene`
 * (docs/results-format.md, "Operator parts"; docs/cuda-engine.md, "Several
 * GPUs"). The sweep's plan decides the items (sweep/plan.h: the universe of
 * (layer, cell, sequence) items, the cost-balanced assignment
 * qmla_shard_assign by T^2, so a shard's items are consecutive and it reads
 * only its part of the capture). A shard run computes its own items and
 * writes a part file: a journal (io/journal.h) of kind "<group>-part" whose
 * key is the run's own resume key (capture hash, parameters, cell set), and
 * whose records are
 *   P <shard> <n_shards> <plan hash, 16 hex> <engine> <device ordinal>
 *     <device, escaped (qmla_jnl_escape); "-" for none>
 * then the item records of the run's resume journal, one per item of the
 * shard. A merge (the same command with the same options and the parts)
 * reads them through the same replay as a resume, checks them (below),
 * computes nothing and writes the group through the same writer as a run of
 * the whole plan in one process: the group's datasets and statistics are
 * the one-process run's bit for bit. */
#ifndef QMLA_OP_PART_H
#define QMLA_OP_PART_H

#include <stddef.h>
#include <stdint.h>

#include "io/journal.h"
#include "qmla/engine.h"
#include "qmla/status.h"
#include "sweep/plan.h"

/* FNV-1a 64 over the unsharded plan: n_items, then per item (layer, cell-set
 * index, sequence, T, wanted). Another layer or cell selection, capture
 * layout or sequence count gives another hash. */
uint64_t qmla_oppart_plan_hash(const qmla_capture *cap, const qmla_plan *full);

/* Before a shard run replaces `path`: QMLA_OK when it is absent, empty or a
 * part file of `kind` (first line "qmla-journal 1 <kind> "); otherwise
 * QMLA_EINVAL naming it (a results file or anything else is not replaced). */
int qmla_oppart_check_target(const char *path, const char *kind, qmla_error *err);

/* The plan of a run of `what` ("operator", "interventions"; named in the
 * messages): with n_shards > 1 a shard run — refused with merging set or a
 * shard >= n_shards, and when results_path exists and is not a part of
 * `kind` — whose plan is shard `shard`'s of the cost-balanced assignment,
 * *plan_hash the unsharded plan's fingerprint (qmla_oppart_plan_hash);
 * otherwise the whole plan and *plan_hash 0. The caller frees *plan. */
int qmla_oppart_plan(const qmla_capture *cap, const qmla_sweep_selection *sel, const char *what,
                     size_t shard, size_t n_shards, int merging, const char *results_path,
                     const char *kind, qmla_plan *plan, uint64_t *plan_hash, qmla_error *err);

/* Emits the item records (each built with qmla_jnl_printf and committed). */
typedef int (*qmla_oppart_emit_fn)(void *ctx, qmla_jnl *j, qmla_error *err);

/* Write the part file `path` atomically (path.tmp.PID, then rename): header
 * kind/key, the P record of (shard, n_shards, plan hash, engine), then
 * emit's records. */
int qmla_oppart_write(const char *path, const char *kind, const char *key, size_t shard,
                      size_t n_shards, uint64_t plan_hash, const qmla_engine *engine,
                      const char *engines, qmla_oppart_emit_fn emit, void *ctx,
                      qmla_error *err);
/* (engines: the engines of the part's items, '+'-joined, when a resume
 * across engines made them; NULL or "" for the engine's own name.) */

/* The item of one record of the resume journal's format: its plan index
 * (SIZE_MAX: not in the plan), or QMLA_EFORMAT. */
typedef int (*qmla_oppart_item_fn)(void *ctx, const char *rec, size_t len, size_t *item);

/* Replay, read only, files of earlier runs into a shard's run (the MPI
 * driver's resume with any rank count): part files of part_kind (their P
 * record skipped) and resume journals of kind, both with this key; files of
 * another kind or key, or unreadable, are left out. replay must ignore the
 * items this shard does not own (the caller's plan). QMLA_ENOMEM only. */
int qmla_oppart_replay_files(const char *const *files, size_t n, const char *kind,
                             const char *part_kind, const char *key, qmla_jnl_replay_fn replay,
                             void *ctx, char *engines, size_t elen, qmla_error *err);
/* (engines, when not NULL: the engines of the files replayed with items,
 * added to the '+'-joined set engines[elen]; journal.h "Engine marks".) */

/* A part file's P record, parsed. */
typedef struct qmla_oppart_hdr {
    int have;
    size_t shard, n_shards;
    unsigned long long hash;
    char engine[64];
    int ordinal;
    char device[QMLA_ENGINE_DEVICE_MAX]; /* every device string fits (qmla/engine.h) */
} qmla_oppart_hdr;

/* Parse the P record rec of the part file path into *h (have set):
 * QMLA_EMISMATCH naming path when it is no part header or its device is
 * malformed or longer than QMLA_ENGINE_DEVICE_MAX - 1 bytes. */
int qmla_oppart_parse_header(const char *path, const char *rec, qmla_oppart_hdr *h,
                             qmla_error *err);

/* The engine and devices of the merged parts, for the provenance. */
typedef struct qmla_oppart_prov {
    char engine[64]; /* an engine set, "+"-joined (journal.h engines[64]) */
    char device[QMLA_ENGINE_DEVICE_MAX]; /* "" (none), the one device, or "K devices:
                                          * ..." (qmla_devices_format) */
} qmla_oppart_prov;

/* Read and check the parts against the plan `full` (unsharded) of the
 * capture and selection ps, replaying every item record through replay
 * (the resume journal's replay: it marks the item done in its context).
 * Refused, nothing written:
 *   - a part of another run (capture hash, options or cell set: the key),
 *     a file that is no part of this kind (QMLA_EMISMATCH / QMLA_EFORMAT,
 *     naming the file);
 *   - a part of another plan (plan hash, shard count) than the first;
 *     two parts of one shard; an item in two parts; an item its part's
 *     shard does not own (QMLA_EMISMATCH naming the files and the item);
 *   - parts computed by different engines (QMLA_EMISMATCH naming both:
 *     the engines agree within a tolerance, not bit for bit, so a merged
 *     file is one engine's); parts of one engine on different devices are
 *     merged and every device is recorded;
 *   - incomplete coverage (QMLA_EINVAL: the number of missing items, the
 *     shards without a part and the first missing items).
 * On success *prov is the parts' engine and devices. */
int qmla_oppart_merge_read(const char *const *parts, size_t n_parts, const char *kind,
                           const char *key, const qmla_capture *cap,
                           const qmla_plan_selection *ps, const qmla_plan *full,
                           qmla_oppart_item_fn item_of, qmla_jnl_replay_fn replay, void *ctx,
                           qmla_oppart_prov *prov, qmla_error *err);

#endif
