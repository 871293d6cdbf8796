/* qmla/transform.h — offline-fusible cache transformations (docs/math.md §7,
 * paper §3.1 and App. C): the content space T_C = diag(γ)^-1 R diag(s) and
 * the RoPE space T_P = blockdiag(s_i R(θ_i)), their application to caches
 * and consumers, the effective quantized cache QDQ(X T) T^-1, the baselines
 * (RTN, SmoothQuant†, QuaRot†) and the transforms file
 * (docs/transforms-format.md).
 *
 * Conventions (math.md §7): caches and queries are row vectors, a transform
 * multiplies from the right (X T). R(θ) = [[cos θ, −sin θ], [sin θ, cos θ]]
 * acts on the two coordinates (a, b) of RoPE pair i, (2i, 2i+1) when
 * interleaved and (i, i + d_r/2) when half, as rope_pairing says. So for a
 * row x, (x T_P)_a = s (x_a cos θ + x_b sin θ), (x T_P)_b = s (−x_a sin θ +
 * x_b cos θ).
 *
 * Closed forms used (no matrix is inverted):
 *   T_C^-1  = diag(1/s) R^T diag(γ)      T_C^-T = diag(γ) R diag(1/s)
 *   T_P^-1  = blockdiag(R(−θ_i)/s_i)     T_P^-T = blockdiag(R(θ_i)/s_i)
 * Fused consumers: w_uk[h] ← w_uk[h] T_C^-T, w_uv[h] ← w_uv[h] T_C^-T
 * (so Q_C ← Q_C T_C^-T), q_rope ← q_rope T_P^-T.
 *
 * Matrices are double in memory and in the file; application to float32
 * tensors accumulates in double.
 */
#ifndef QMLA_TRANSFORM_H
#define QMLA_TRANSFORM_H

#include <stddef.h>

#include "qmla/attention.h"
#include "qmla/quant.h"
#include "qmla/rope.h"
#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One layer's pair of transforms (owned arrays). */
typedef struct qmla_transform {
    int layer;                 /* layer index it belongs to */
    size_t d_c, d_r;
    qmla_rope_pairing pairing;
    double *rot;    /* [d_c, d_c] R, orthogonal */
    double *cscale; /* [d_c] s > 0 (content) */
    double *angle;  /* [d_r/2] θ_i (radians) */
    double *rscale; /* [d_r/2] s_i > 0 (RoPE) */
} qmla_transform;

/* Allocate and set to R = I, s = 1, θ = 0, s_i = 1 (T_C = diag(γ)^-1,
 * T_P = I). QMLA_EINVAL for d_c == 0 or odd d_r; QMLA_ENOMEM. */
int qmla_transform_alloc(size_t d_c, size_t d_r, qmla_rope_pairing pairing,
                         qmla_transform *t, qmla_error *err);
void qmla_transform_free(qmla_transform *t);
/* The identity on both caches for gain γ [d_c]: R = diag(sign γ),
 * s = |γ| (so T_C = I), T_P = I. QMLA_EINVAL when some γ_j == 0. */
int qmla_transform_set_identity(qmla_transform *t, const float *gamma,
                                qmla_error *err);

/* Channel indices (a, b) of RoPE pair i. */
void qmla_rope_pair(size_t d_r, qmla_rope_pairing p, size_t i, size_t *a,
                    size_t *b);

/* Dense T_C and T_C^-T ([d_c, d_c] row-major double; either may be NULL). */
void qmla_transform_content_mats(const qmla_transform *t, const float *gamma,
                                 double *Tc, double *TcinvT);

/* Which of the four content/RoPE maps to apply. */
typedef enum qmla_tmap {
    QMLA_TMAP_FWD = 0,  /* X T        (caches) */
    QMLA_TMAP_INV = 1,  /* X T^-1     (back from transformed coordinates) */
    QMLA_TMAP_INVT = 2  /* X T^-T     (consumers) */
} qmla_tmap;

/* Content: rows of X [n, d_c] -> Y [n, d_c] (Y may not alias X), through
 * the closed forms above. */
void qmla_transform_content_apply(const qmla_exec *ex, const qmla_transform *t,
                                  const float *gamma, qmla_tmap m,
                                  const float *X, size_t n, float *Y);
/* RoPE: rows of X [n, d_r] -> Y [n, d_r] (may alias). */
void qmla_transform_rope_apply(const qmla_transform *t, qmla_tmap m,
                               const float *X, size_t n, float *Y);

/* Effective caches QDQ(X T) T^-1 for T tokens; `work` [T, width] floats.
 * Tokens t < sink and t >= T - local keep their clean values (the
 * sink/local policy, math.md §9; 0/0 for none). Errors of the quantizer
 * (QMLA_ERANGE / QMLA_ENONFINITE) pass through. p NULL: no quantization
 * (X T T^-1 only: the fusion round trip). */
int qmla_transform_effective_content(const qmla_exec *ex,
                                     const qmla_transform *t,
                                     const float *gamma,
                                     const qmla_quant_params *p,
                                     const float *C, size_t T, size_t sink,
                                     size_t local, float *work, float *out,
                                     qmla_error *err);
int qmla_transform_effective_rope(const qmla_transform *t,
                                  const qmla_quant_params *p, const float *K,
                                  size_t T, size_t sink, size_t local,
                                  float *work, float *out, qmla_error *err);

/* Fused consumers of one layer: w_uk' [H, d_n, d_c], w_uv' [H, d_v, d_c]
 * (right-multiplied by T_C^-T), caller-owned. */
void qmla_transform_fuse_weights(const qmla_exec *ex, const qmla_transform *t,
                                 const float *gamma, const qmla_mla_dims *d,
                                 const qmla_mla_weights *w, float *w_uk_out,
                                 float *w_uv_out);

/* ---- baselines (math.md §7) --------------------------------------------- */

/* Calibration statistics of one layer over a bank of sequences:
 * maxima of |X| per channel of the caches and of the consumer queries. */
typedef struct qmla_calib {
    size_t d_c, d_r;
    double *cmax;  /* [d_c] max_t |C[t, j]| */
    double *qcmax; /* [d_c] max_{h,t} |Q_C,h[t, j]| (absorbed queries) */
    double *kmax;  /* [d_r] max_t |K[t, j]| */
    double *qpmax; /* [d_r] max_{h,t} |Q_P,h[t, j]| */
} qmla_calib;

int qmla_calib_alloc(size_t d_c, size_t d_r, qmla_calib *c, qmla_error *err);
void qmla_calib_free(qmla_calib *c);
/* Fold one sequence into c: C [T, d_c], K [T, d_r], q_lat [T, H, d_c]
 * (absorbed), q_rope_t [T, H, d_r]; a NULL tensor is skipped. */
void qmla_calib_add(qmla_calib *c, size_t T, size_t H, const float *C,
                    const float *K, const float *q_lat, const float *q_rope_t);

typedef enum qmla_tmethod {
    QMLA_TM_RTN = 0,
    QMLA_TM_SMOOTHQUANT = 1,
    QMLA_TM_QUAROT = 2,
    QMLA_TM_QUANTMLA = 3
} qmla_tmethod;
const char *qmla_tmethod_name(qmla_tmethod m); /* "rtn", "smoothquant", ... */

/* SmoothQuant†: content R = diag(sign γ), s_j = |γ_j| / σ_j with
 * σ_j = cmax_j^α / qcmax_j^(1−α) (so T_C = diag(1/σ)); RoPE θ = 0,
 * s_i = 1 / max(σ_a, σ_b) over the pair's two channels. A channel with a
 * zero maximum gets σ = 1. QMLA_EINVAL for α outside [0, 1] or γ_j == 0. */
int qmla_transform_smoothquant(qmla_transform *t, const float *gamma,
                               const qmla_calib *c, double alpha,
                               qmla_error *err);
/* QuaRot†: R = H_dc / sqrt(d_c) (Sylvester Hadamard), s = 1 (so
 * T_C = diag(γ)^-1 H), T_P = I. QMLA_EINVAL unless d_c is a power of 2. */
int qmla_transform_quarot(qmla_transform *t, qmla_error *err);

/* ---- the transforms file (docs/transforms-format.md) -------------------- */

/* Settings and objective values recorded with a file. */
typedef struct qmla_transform_meta {
    qmla_tmethod method;
    char config[16];      /* "C4R4", "C2R4" */
    double alpha;         /* SmoothQuant α (NaN when not used) */
    char train_cells[256];/* comma list */
    char capture[512];    /* the capture it was computed on */
    char command[1024];   /* the command line (provenance) */
    char settings[512];   /* learning settings (resume compares them) */
    int complete;         /* 0 while a learning run is still adding layers */
    char capture_sha256[65]; /* the capture's SHA-256 ("" when not recorded);
                              * with settings, the key a resumed learn compares */
} qmla_transform_meta;

/* Per-layer objective values (held-out bank; NaN when not learned). */
enum { QMLA_TOBJ_C_INIT = 0, QMLA_TOBJ_C_BEST, QMLA_TOBJ_P_INIT, QMLA_TOBJ_P_BEST,
       QMLA_TOBJ_N };

/* Write n layers to `path` atomically (in-memory file, renamed over).
 * gammas[i] [d_c] is stored as content/gamma so a reader can check that it
 * is applied to the same model. obj [n][QMLA_TOBJ_N] (may be NULL): the
 * per-layer objective values, written as layer attributes. */
int qmla_transform_file_write(const char *path, const qmla_transform_meta *m,
                              const qmla_transform *t, const float *const *gammas,
                              const double *obj, size_t n, qmla_error *err);

/* Whether qmla_transform_file_write may replace `path`: QMLA_OK when it does
 * not exist, is empty or is a transforms file; QMLA_EINVAL naming what it is
 * otherwise (a capture, results of another command). Callers check before
 * long work; the writer checks again. */
int qmla_transform_file_check_output(const char *path, qmla_error *err);

typedef struct qmla_transform_file {
    qmla_transform_meta meta;
    size_t n;               /* layers */
    qmla_transform *t;      /* [n] */
    float **gamma;          /* [n][d_c] */
    double *obj;            /* [n][QMLA_TOBJ_N] (NaN where absent) */
} qmla_transform_file;

/* Read and validate a transforms file: every dataset's shape, finite values,
 * positive scales, R orthogonal to 1e-5 (max |R^T R − I|). QMLA_EFORMAT
 * naming the file, dataset, expected and found. */
int qmla_transform_file_read(const char *path, qmla_transform_file *f,
                             qmla_error *err);
void qmla_transform_file_free(qmla_transform_file *f);
/* QMLA_OK when f is whole (attribute complete = 1); for an interrupted
 * `qmla learn` checkpoint (complete = 0) QMLA_EINVAL naming `path` and the
 * layers 0 .. n_layers-1 (the model's) it has no transform for, as
 * `qmla eval` does. ppl --transforms and fuse refuse such a file. */
int qmla_transform_file_check_complete(const qmla_transform_file *f, const char *path,
                                       size_t n_layers, qmla_error *err);
/* The entry of layer index `layer`, or NULL. */
const qmla_transform *qmla_transform_file_layer(const qmla_transform_file *f,
                                                int layer, const float **gamma);

#ifdef __cplusplus
}
#endif
#endif
