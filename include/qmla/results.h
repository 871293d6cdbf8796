/* qmla/results.h — qmla-results v1 files (docs/results-format.md): the
 * per-item responses of a matched-NMSE sweep (one row per the table of
 * qmla/response.h), their summary, and the provenance of the run, in HDF5,
 * readable with h5py / h5dump without this project. Written atomically: the
 * file is built in memory and saved through a temporary file, fsync and
 * rename (lib/io/h5util.c); a reader never sees a half-written file and a
 * failed write leaves no file. */
#ifndef QMLA_RESULTS_H
#define QMLA_RESULTS_H

#include <stddef.h>

#include "qmla/engine.h"
#include "qmla/response.h"
#include "qmla/status.h"
#include "qmla/sweep.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QMLA_RESULTS_FORMAT "qmla-results"
#define QMLA_RESULTS_VERSION 1

/* Provenance of one cell of the capture (from its attributes). */
typedef struct qmla_results_cell {
    char name[QMLA_CELL_NAME_MAX];
    char dataset[128]; /* corpus, the cell's `dataset` attribute */
    long seed;         /* the cell's `seed` attribute */
    long N, T;         /* sequences and tokens per sequence */
} qmla_results_cell;

typedef struct qmla_results_meta {
    char capture_file[512];   /* base name of the capture */
    char capture_path[1024];  /* path as given */
    char capture_sha256[65];
    char model[256];
    /* the capture's shape */
    int H, D, d_c, d_n, d_r, d_v;
    double softmax_scale;
    char rope_pairing[16];    /* "interleaved" / "half" */
    /* quantizer and target */
    int bits, group;
    char meta[8];             /* "f16" / "f32" / "q8" */
    double nmse;              /* target nu */
    /* what the file holds (derived from its rows when written) */
    char layers[1024];        /* e.g. "0-3,7"; the writer derives it from the rows */
    char cells[4096];         /* the cell set, comma-separated, capture order */
    qmla_results_cell *cell_info; /* [n_cell_info], owned (results_meta_free) */
    size_t n_cell_info;
    /* the run */
    char tool_version[32];
    char git_commit[64];      /* "" when not built from a git checkout */
    char command_line[2048];  /* as given by the program, "" if none */
    char created_utc[32];     /* ISO 8601, e.g. 2026-11-30T10:26:15Z */
    char engine[64];          /* the driver's engine (qmla_engine_name); "" for "cpu" */
    /* writer only: an existing results file of the same capture, parameters
     * and cell set whose other root groups (/jvp, /predict, ...: what later
     * commands added) are carried into the new file; "" for none */
    char keep_groups_from[4096];
    /* the device of the engine (qmla_engine_device), "" for none: written
     * as the attribute engine_device only when not "" (additive) */
    char engine_device[QMLA_ENGINE_DEVICE_MAX];
} qmla_results_meta;

void qmla_results_meta_free(qmla_results_meta *m);

/* Write responses (n rows, any order: written sorted by layer, cell, seq,
 * path), the summary and the provenance to path, atomically. On any
 * failure: QMLA_EIO (or QMLA_ENOMEM) naming the file and cause, and no file
 * at path changed. */
int qmla_results_write(const char *path, const qmla_results_meta *m,
                       const qmla_response *r, size_t n,
                       const qmla_summary *s, qmla_error *err);

/* Read a results file: meta (caller frees with qmla_results_meta_free) and
 * the responses (caller frees *r). Every row is validated
 * (qmla_response_validate); a file of an earlier writer without the
 * `verified` / `route_residual` columns reads as unverified rows. */
int qmla_results_read(const char *path, qmla_results_meta *m,
                      qmla_response **r, size_t *n, qmla_error *err);

/* The resume key: capture hash, parameters and the cell set
 * ("sha256=... bits=4 group=64 meta=f16 nmse=0.01 cells=a,b"). */
void qmla_results_key(const qmla_results_meta *m, char *key, size_t len);

#ifdef __cplusplus
}
#endif
#endif
