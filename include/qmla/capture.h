/* qmla/capture.h — reader (and writer) of qmla-capture v1 files
 * (docs/capture-format.md): captured MLA layer tensors in HDF5.
 *
 * Open validates the whole structure (root attributes, /config, every
 * /layers/<i> group and every cell: presence, rank and shape of each dataset,
 * attribute types) without reading the large tensors. Loading a layer or a
 * cell reads and converts every float dataset to float32 through HDF5's own
 * conversion and rejects non-finite values. Every rejection is QMLA_EFORMAT
 * (or QMLA_ENONFINITE / QMLA_EIO) with a message naming the file, group,
 * dataset or attribute, and the expected versus found value.
 *
 * Shapes (row-major float32 unless said):
 *   w_uk [H, d_n, d_c]   w_uv [H, d_v, d_c]   w_o [D, H*d_v]   kv_norm [d_c]
 *   c_kv [N, T, d_c]     k_rope [N, T, d_r]   q_nope [N, H, T, d_n]
 *   q_rope [N, H, T, d_r] attn_out [N, T, D]  positions [N, T] int64
 *   optional: k_rope_pre [N,T,d_r], q_rope_pre [N,H,T,d_r],
 *             rope_cos, rope_sin [N, T, d_r/2], hidden_in [N, T, D]
 */
#ifndef QMLA_CAPTURE_H
#define QMLA_CAPTURE_H

#include <stddef.h>
#include <stdint.h>

#include "qmla/hash.h"
#include "qmla/rope.h"
#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QMLA_CAPTURE_FORMAT "qmla-capture"
#define QMLA_CAPTURE_VERSION 1

typedef struct qmla_capture_config {
    int n_layers;         /* the model's count (attribute) */
    int H, D, d_c, d_n, d_r, d_v;
    double softmax_scale; /* tau */
    qmla_rope_pairing rope_pairing;
    double rms_norm_eps;
    /* root attributes */
    char model[256];
    char source[512];
    int has_check_tolerance;
    double check_tolerance;
    int synthetic; /* 0 when absent */
} qmla_capture_config;

typedef struct qmla_capture qmla_capture; /* opaque, owns the HDF5 file */

/* Open and validate `path`. On success *out owns an open file; free with
 * qmla_capture_close. On failure *out is NULL and err says why. */
int qmla_capture_open(const char *path, qmla_capture **out, qmla_error *err);

/* Same, from an in-memory HDF5 file image (used by the fuzzer and tests);
 * `label` names the image in messages. The buffer is copied. */
int qmla_capture_open_image(const void *buf, size_t len, const char *label,
                            qmla_capture **out, qmla_error *err);

void qmla_capture_close(qmla_capture *c);

const qmla_capture_config *qmla_capture_get_config(const qmla_capture *c);
const char *qmla_capture_path(const qmla_capture *c);

/* Layers present, in ascending layer index. */
size_t qmla_capture_n_layers(const qmla_capture *c);
int qmla_capture_layer_index(const qmla_capture *c, size_t li);

/* Cells of layer li (sorted by name), their N and T. */
size_t qmla_capture_n_cells(const qmla_capture *c, size_t li);
const char *qmla_capture_cell_name(const qmla_capture *c, size_t li, size_t ci);
size_t qmla_capture_cell_n(const qmla_capture *c, size_t li, size_t ci);
size_t qmla_capture_cell_t(const qmla_capture *c, size_t li, size_t ci);
/* 1 if the cell has k_rope_pre, q_rope_pre, rope_cos and rope_sin. */
/* The cell's `dataset` (corpus) and `seed` attributes. */
void qmla_capture_cell_attrs(const qmla_capture *c, size_t li, size_t ci,
                             char *dataset, size_t len, long *seed);
int qmla_capture_cell_has_pre(const qmla_capture *c, size_t li, size_t ci);

typedef struct qmla_layer {
    int layer;        /* layer index */
    float *w_uk;      /* [H, d_n, d_c] */
    float *w_uv;      /* [H, d_v, d_c] */
    float *w_o;       /* [D, H*d_v] */
    float *kv_norm;   /* [d_c] */
} qmla_layer;

typedef struct qmla_cell {
    char name[128];
    char dataset[128]; /* attribute `dataset` */
    long seed;         /* attribute `seed` */
    size_t N, T;
    float *c_kv;       /* [N, T, d_c] */
    float *k_rope;     /* [N, T, d_r] */
    float *q_nope;     /* [N, H, T, d_n] */
    float *q_rope;     /* [N, H, T, d_r] */
    float *attn_out;   /* [N, T, D] */
    int64_t *positions;/* [N, T] */
    float *k_rope_pre; /* [N, T, d_r] or NULL */
    float *q_rope_pre; /* [N, H, T, d_r] or NULL */
    float *rope_cos;   /* [N, T, d_r/2] or NULL */
    float *rope_sin;   /* [N, T, d_r/2] or NULL */
} qmla_cell;

/* Read the weights of layer li (index into the present layers). The caller
 * frees with qmla_layer_free (also safe on a zeroed or half-filled struct). */
int qmla_capture_load_layer(qmla_capture *c, size_t li, qmla_layer *out,
                            qmla_error *err);
void qmla_layer_free(qmla_layer *l);

/* Read cell ci of layer li; optional tensors are loaded when present. */
int qmla_capture_load_cell(qmla_capture *c, size_t li, size_t ci,
                           qmla_cell *out, qmla_error *err);
void qmla_cell_free(qmla_cell *cell);

/* Parts of a cell to load (the caches and queries are always loaded). */
enum {
    QMLA_CELL_OUTPUT = 1u,    /* attn_out */
    QMLA_CELL_POSITIONS = 2u, /* positions */
    QMLA_CELL_PRE = 4u,       /* k_rope_pre, q_rope_pre, rope_cos, rope_sin */
    QMLA_CELL_ALL = 7u
};
/* As qmla_capture_load_cell, loading only c_kv, k_rope, q_nope, q_rope and
 * the parts named; the others stay NULL. */
int qmla_capture_load_cell_parts(qmla_capture *c, size_t li, size_t ci,
                                 unsigned parts, qmla_cell *out,
                                 qmla_error *err);

/* Look-ups by name: 1 and *li (*ci) set when layer index `layer` (cell
 * `name` of layer li) is present, else 0. */
int qmla_capture_find_layer(const qmla_capture *c, int layer, size_t *li);
int qmla_capture_find_cell(const qmla_capture *c, size_t li, const char *name,
                           size_t *ci);

/* Largest element count of one dataset that open accepts (QMLA_ERANGE
 * beyond it): 2^40. */
#define QMLA_CAPTURE_MAX_ELEMS (UINT64_C(1) << 40)

/* ---- writer (qmla synth, tests, benchmarks) ---------------------------- */

typedef struct qmla_capture_writer qmla_capture_writer;

/* Start a capture that will be written to `path` and write the root
 * attributes and /config. The file is built in memory: nothing reaches the
 * disk until qmla_capture_writer_close, which writes it atomically (see
 * there); peak memory is about twice the file's size. Open checks that
 * `path` can be created (a writable directory; the path new or a regular
 * file). `float16` != 0 stores float datasets as float16, else float32;
 * `gzip` > 0 chunks and compresses with that level. */
int qmla_capture_writer_open(const char *path, const qmla_capture_config *cfg,
                             int float16, int gzip, qmla_capture_writer **out,
                             qmla_error *err);
int qmla_capture_writer_layer(qmla_capture_writer *w, const qmla_layer *l,
                              qmla_error *err);
/* Write a cell under /layers/<layer>/cells/<cell->name>; optional tensors
 * that are non-NULL are written too. The layer group must exist. */
int qmla_capture_writer_cell(qmla_capture_writer *w, int layer,
                             const qmla_cell *cell, qmla_error *err);
/* Write the file and free w: the image goes to PATH.tmp.PID (checked
 * write, fsync), which is renamed over PATH. On failure (ENOSPC, EIO, ...)
 * QMLA_EIO with a message naming the file and the cause, PATH untouched and
 * the temporary removed. When an earlier call failed inside HDF5 (the
 * in-memory file may hold half a layer or cell) nothing is written and
 * QMLA_EIO is returned; refused arguments (QMLA_EINVAL, QMLA_ERANGE) change
 * nothing and do not count. */
int qmla_capture_writer_close(qmla_capture_writer *w, qmla_error *err);
/* Free w without writing anything (error paths). NULL is a no-op. */
void qmla_capture_writer_abort(qmla_capture_writer *w);

#ifdef __cplusplus
}
#endif
#endif
