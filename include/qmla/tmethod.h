/* qmla/tmethod.h — the transform methods (docs/math.md §7–8) as one table in
 * GSL's type-table style (gsl_rng_type): a const struct per method with its
 * name and the functions that differ between methods, looked up by name or
 * by the qmla_tmethod value a transforms file records.
 *
 *   const qmla_tmethod_type *m = qmla_tmethod_lookup("smoothquant");
 *   if (m->calibrate) m->calibrate(t, gamma, &cal, alpha, err);
 *
 * The baselines (RTN, SmoothQuant†, QuaRot†) are calibrated: `calibrate`
 * sets a layer's transform from its gain γ and (when `needs_calib`) the
 * calibration maxima of qmla_calib. QuantMLA is learned (`calibrate` NULL,
 * `learned` 1: qmla_learn_run, qmla/learn.h). */
#ifndef QMLA_TMETHOD_H
#define QMLA_TMETHOD_H

#include <stddef.h>

#include "qmla/transform.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qmla_tmethod_type {
    const char *name;   /* "rtn": --method and the file's method attribute */
    const char *title;  /* "RTN": qmla ppl's row label */
    qmla_tmethod id;    /* the value qmla_transform_meta records */
    int learned;        /* 1: learned per layer, resumable (QuantMLA) */
    int uses_alpha;     /* 1: the file records --alpha (SmoothQuant α) */
    int needs_calib;    /* 1: calibrate reads the calibration maxima */
    /* A layer's transform (t allocated with the capture's d_c, d_r and
     * pairing) from its gain gamma [d_c] and calibration maxima cal (NULL
     * unless needs_calib); NULL for a learned method. */
    int (*calibrate)(qmla_transform *t, const float *gamma, const qmla_calib *cal,
                     double alpha, qmla_error *err);
    /* The label of a file of this method in qmla eval's table and /eval
     * (the name; a QuantMLA file of one path: quantmla-content, -rope; its
     * recon ablation: -recon appended). */
    void (*eval_label)(const qmla_transform_meta *m, char *out, size_t n);
    /* Its label in qmla ppl's rows (the title; QuantMLA-content, -rope). */
    void (*ppl_label)(const qmla_transform_meta *m, char *out, size_t n);
} qmla_tmethod_type;

extern const qmla_tmethod_type *qmla_tmethod_rtn;
extern const qmla_tmethod_type *qmla_tmethod_smoothquant;
extern const qmla_tmethod_type *qmla_tmethod_quarot;
extern const qmla_tmethod_type *qmla_tmethod_quantmla;

/* NULL-terminated, in qmla_tmethod order. */
const qmla_tmethod_type *const *qmla_tmethod_types(void);
/* By name ("rtn", "smoothquant", "quarot", "quantmla"); NULL when unknown. */
const qmla_tmethod_type *qmla_tmethod_lookup(const char *name);
/* By the recorded value; NULL when out of range. */
const qmla_tmethod_type *qmla_tmethod_of(qmla_tmethod id);

#ifdef __cplusplus
}
#endif
#endif
