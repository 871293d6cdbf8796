/* qmla/results.h — qmla-results v1 files (docs/results-format.md): the
 * per-item responses of a matched-NMSE sweep and their summary, in HDF5,
 * readable with h5py / h5dump without this project. Written atomically
 * (temporary file, fsync, rename): a reader never sees a half-written file. */
#ifndef QMLA_RESULTS_H
#define QMLA_RESULTS_H

#include <stddef.h>

#include "qmla/status.h"
#include "qmla/sweep.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QMLA_RESULTS_FORMAT "qmla-results"
#define QMLA_RESULTS_VERSION 1

typedef struct qmla_results_meta {
    char capture_file[512];   /* base name of the capture */
    char capture_path[1024];  /* path as given */
    char capture_sha256[65];
    char model[256];
    int bits, group;
    char meta[8];             /* "f16" / "f32" */
    double nmse;              /* target nu */
    char layers[256];         /* selection as given ("all" when none) */
    char cells[256];
    char tool_version[32];
} qmla_results_meta;

/* Write responses (n rows, any order: written sorted by layer, cell, seq,
 * path) and the summary to path, atomically. */
int qmla_results_write(const char *path, const qmla_results_meta *m,
                       const qmla_response *r, size_t n,
                       const qmla_summary *s, qmla_error *err);

/* Read a results file: meta and the responses (caller frees *r). */
int qmla_results_read(const char *path, qmla_results_meta *m,
                      qmla_response **r, size_t *n, qmla_error *err);

/* Sort responses by (layer, cell, seq, path). */
void qmla_responses_sort(qmla_response *r, size_t n);

/* The resume key: capture hash + parameters ("sha256=... bits=4 ..."). */
void qmla_results_key(const qmla_results_meta *m, char *key, size_t len);

#ifdef __cplusplus
}
#endif
#endif
