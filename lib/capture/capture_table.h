/* capture_table.h (private) — the one table of qmla-capture v1 datasets
 * (docs/capture-format.md): name, rank, shape in configuration symbols,
 * whether it is required, which load part it belongs to and which struct
 * field holds it. The reader's validation, the loader and the writer are all
 * driven by it, so a dataset is added or reshaped in one place. */
#ifndef QMLA_CAPTURE_TABLE_H
#define QMLA_CAPTURE_TABLE_H

#include "qmla/capture.h"
#include "io/h5util.h"

#include <hdf5.h>
#include <stddef.h>
#include <string.h>

/* Dimension symbols: the cell's N (sequences) and T (tokens), and the
 * configuration's H, D, d_c, d_n, d_r, d_v, with d_r/2 and H*d_v. */
enum qmla_cap_dim {
    QMLA_CAP_N, QMLA_CAP_T, QMLA_CAP_H, QMLA_CAP_D, QMLA_CAP_DC,
    QMLA_CAP_DN, QMLA_CAP_DR, QMLA_CAP_DV, QMLA_CAP_DR2, QMLA_CAP_HDV
};

/* When a dataset is present. */
enum qmla_cap_need {
    QMLA_CAP_REQUIRED, /* always */
    QMLA_CAP_PRE,      /* k_rope_pre, q_rope_pre: both or neither */
    QMLA_CAP_COSSIN,   /* rope_cos, rope_sin: both or neither, and only
                          with the QMLA_CAP_PRE pair */
    QMLA_CAP_EXTRA     /* optional; checked at open, not loaded or written */
};

typedef struct qmla_cap_ds {
    const char *name;
    int rank;
    unsigned char dim[QMLA_H5_SPEC_RANK]; /* enum qmla_cap_dim */
    unsigned char integer;  /* int64 (positions), else float */
    unsigned char need;     /* enum qmla_cap_need */
    unsigned parts;         /* cells: the QMLA_CELL_* part it is loaded
                               with, 0 when always loaded */
    ptrdiff_t field;        /* offset of its pointer in qmla_layer /
                               qmla_cell; -1 when it has none */
} qmla_cap_ds;

/* Layer datasets (fields of qmla_layer) and cell datasets (fields of
 * qmla_cell), in the order they are checked, loaded and written. The first
 * cell dataset (c_kv) defines the cell's N and T. */
#define QMLA_CAP_MAX_DS 16 /* entries per table, at most */
extern const qmla_cap_ds qmla_cap_layer_ds[];
extern const size_t qmla_cap_n_layer_ds;
extern const qmla_cap_ds qmla_cap_cell_ds[];
extern const size_t qmla_cap_n_cell_ds;

/* The dataset's expected shape (and name, type class) for configuration c
 * and cell extents N, T; N or T may be QMLA_H5_WILD (then printed as "N" /
 * "T" in messages). */
void qmla_cap_spec(const qmla_cap_ds *d, const qmla_capture_config *c,
                   hsize_t N, hsize_t T, qmla_h5_dspec *out);

/* The tensor pointer in the struct (qmla_layer or qmla_cell) at d->field. */
static inline void *qmla_cap_get(const void *s, const qmla_cap_ds *d)
{
    void *p;
    memcpy(&p, (const char *)s + d->field, sizeof p);
    return p;
}

static inline void qmla_cap_set(void *s, const qmla_cap_ds *d, void *p)
{
    memcpy((char *)s + d->field, &p, sizeof p);
}

#endif
