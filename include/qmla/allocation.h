/* qmla/allocation.h — a per-layer cache configuration (a mixed pool: one
 * (content bits, RoPE bits) per layer, group 64, f16 metadata) and its
 * results group /allocate (docs/allocate.md, docs/results-format.md),
 * written by `qmla allocate` and read wherever a cache configuration is
 * taken (`--config ALLOC.h5` of qmla storage, qmla eval, qmla ppl).
 *
 * Group /allocate of a qmla-results file (a table, one row per layer):
 *   layer [n] int, config [n] str "C4R4", c_bits [n], r_bits [n],
 *   bytes_per_token [n] (the layer's storage at `context`, qmla/decode.h),
 *   pred_nmse [n] (predicted attention-output NMSE of the layer),
 *   attributes: budget (as given), budget_bytes_per_token, bytes_per_token
 *   (reached: the mean over layers), pred_total (sum of pred_nmse),
 *   pred_mean, context, group, d_c, d_r, sink, window, policy, meta,
 *   candidates, and the provenance block (lib/io/group.c).
 * Group /allocate/candidates (a table, one row per (layer, candidate)):
 *   layer, config, c_bits, r_bits, bytes_per_token, nmse_c, nmse_r (cache
 *   NMSE measured on the capture), pred_c, pred_r, pred_nmse, chosen.
 */
#ifndef QMLA_ALLOCATION_H
#define QMLA_ALLOCATION_H

#include <stddef.h>

#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "C<c>R<r>" with c, r in {2, 3, 4, 8} (the quantizer's widths) into the
 * bits; QMLA_EINVAL naming the value and what was expected otherwise. */
int qmla_alloc_parse_config(const char *name, int *c_bits, int *r_bits, qmla_error *err);

typedef struct qmla_allocation {
    size_t n;              /* layers */
    int *layer;            /* [n] layer indices, capture order */
    int *c_bits, *r_bits;  /* [n] */
    double *bytes;         /* [n] bytes per token of each layer */
    double *pred;          /* [n] predicted output NMSE of each layer */
    int group, d_c, d_r, sink, window;
    long context;          /* tokens per sequence of the accounting */
    double budget_bytes;   /* budget, bytes per token (mean over layers) */
    double bytes_per_token; /* reached, mean over layers */
    double pred_total;     /* sum of pred */
    char policy[32];       /* "none" or "sinkS/localW" */
} qmla_allocation;

/* One candidate of one layer, as the allocator measured it. */
typedef struct qmla_alloc_cand {
    int layer;
    char config[16];
    int c_bits, r_bits;
    double bytes;          /* bytes per token */
    double nmse_c, nmse_r; /* measured cache NMSE per path */
    double pred_c, pred_r; /* predicted output NMSE of each path's error */
    double pred;           /* pred_c + pred_r */
    int chosen;
} qmla_alloc_cand;

/* What the writer records besides the allocation. */
typedef struct qmla_alloc_record {
    const char *budget;       /* as given */
    const char *candidates;   /* comma list */
    const char *capture, *capture_sha256;
    const char *transforms, *transforms_sha256; /* NULL: none */
    const char *command_line;
    const char *engine;       /* NULL: cpu */
    const qmla_alloc_cand *cand; /* [n_cand] (may be 0) */
    size_t n_cand;
} qmla_alloc_record;

/* Group /allocate (and /allocate/candidates) of results file `path`
 * (created when absent; other groups kept), atomically. */
int qmla_allocation_write(const char *path, const qmla_allocation *a,
                          const qmla_alloc_record *rec, qmla_error *err);

/* Read group /allocate of `path` into *a (free with qmla_allocation_free):
 * QMLA_ENOENT / QMLA_EIO for a missing or unreadable file, QMLA_EFORMAT
 * naming the dataset or attribute and what was expected (bits outside
 * 2, 3, 4, 8, repeated layers, columns of other lengths). */
int qmla_allocation_read(const char *path, qmla_allocation *a, qmla_error *err);
void qmla_allocation_free(qmla_allocation *a);

/* Index of `layer` in a, or -1. */
long qmla_allocation_find(const qmla_allocation *a, int layer);

/* 1 when `s` names an allocation file rather than a configuration: it ends
 * in ".h5" (a configuration name never does). */
int qmla_alloc_is_file(const char *s);

#ifdef __cplusplus
}
#endif
#endif
