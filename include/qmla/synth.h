/* qmla/synth.h — synthetic qmla-capture v1 files with random MLA weights for
 * shapes named after real models (docs/synth.md). Everything is drawn from a
 * GSL mt19937 stream seeded with `seed`; the attention output is computed by
 * this library (so `qmla check` holds to float32 rounding, or to float16
 * rounding when stored as float16). Root attribute `synthetic` = 1. */
#ifndef QMLA_SYNTH_H
#define QMLA_SYNTH_H

#include <stddef.h>

#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qmla_shape {
    const char *name;
    const char *model;   /* the real model it is named after */
    int n_layers, H, D, d_c, d_n, d_r, d_v;
    double tau;          /* softmax scale, YaRN mscale^2 included */
    double rope_theta;
    int rope_pairing;    /* layout transformers produces for this family */
    double eps;
} qmla_shape;

/* Table of known shapes, terminated by a NULL name. */
const qmla_shape *qmla_shapes(void);
const qmla_shape *qmla_shape_find(const char *name);

typedef struct qmla_synth_opts {
    const qmla_shape *shape;
    unsigned long seed;
    int n_layers;     /* layers to write (<= shape->n_layers); 0: all */
    int seqs;         /* N per cell */
    int tokens;       /* T */
    int cells;        /* number of cells (named synth-s<k>) */
    int float16;      /* store tensors as float16 */
    int gzip;         /* 0: none, else level */
    int with_pre;     /* also store k_rope_pre, q_rope_pre, rope_cos/sin */
    int threads;
} qmla_synth_opts;

int qmla_synth_write(const char *path, const qmla_synth_opts *o,
                     qmla_error *err);

#ifdef __cplusplus
}
#endif
#endif
