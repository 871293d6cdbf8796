/* run.h (private) — what the transform drivers (learn_run.c, tfeval_run.c)
 * share: the layer selection, and the writers that record the driver's
 * engine in the provenance block. */
#ifndef QMLA_TRANSFORM_RUN_H
#define QMLA_TRANSFORM_RUN_H

#include <stddef.h>

#include "qmla/engine.h"
#include "qmla/tfeval.h"
#include "qmla/transform.h"

/* 1 when `layer` is in layers[0..n_layers) or layers is NULL (all). */
static inline int qmla_tf_layer_wanted(const int *layers, size_t n_layers, int layer)
{
    if (!layers)
        return 1;
    int want = 0;
    for (size_t k = 0; k < n_layers; k++)
        want |= layers[k] == layer;
    return want;
}

/* qmla_tf_eval_write and qmla_transform_file_write with the provenance
 * attributes `engine` (the driver's engine's name; NULL: the CPU engine)
 * and, for a device engine, `engine_device`. */
int qmla_tf_eval_write_engine(const char *path, const char *config, const char *policy,
                              const char *command, const qmla_engine *engine,
                              const qmla_tf_eval_rec *rows, size_t n, qmla_error *err);
int qmla_transform_file_write_engine(const char *path, const qmla_transform_meta *m,
                                     const qmla_engine *engine, const qmla_transform *t,
                                     const float *const *gammas, const double *obj, size_t n,
                                     qmla_error *err);

#endif
