/* transform.c — the fusible transformation spaces, their application, the
 * baselines and the transforms file (qmla/transform.h, docs/math.md §7,
 * docs/transforms-format.md). */
#include "qmla/transform.h"
#include "qmla/tmethod.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/group.h"
#include "transform/run.h"

int qmla_transform_alloc(size_t d_c, size_t d_r, qmla_rope_pairing pairing,
                         qmla_transform *t, qmla_error *err)
{
    memset(t, 0, sizeof *t);
    if (d_c == 0 || d_r % 2)
        return qmla_error_set(err, QMLA_EINVAL,
                              "transform: expected d_c > 0 and even d_r, found d_c %zu, d_r %zu",
                              d_c, d_r);
    t->d_c = d_c;
    t->d_r = d_r;
    t->pairing = pairing;
    t->rot = calloc(d_c * d_c, sizeof(double));
    t->cscale = malloc(d_c * sizeof(double));
    t->angle = calloc(d_r / 2 + 1, sizeof(double));
    t->rscale = malloc((d_r / 2 + 1) * sizeof(double));
    if (!t->rot || !t->cscale || !t->angle || !t->rscale) {
        qmla_transform_free(t);
        return qmla_error_set(err, QMLA_ENOMEM, "transform: out of memory (d_c %zu)", d_c);
    }
    for (size_t j = 0; j < d_c; j++) {
        t->rot[j * d_c + j] = 1.0;
        t->cscale[j] = 1.0;
    }
    for (size_t i = 0; i < d_r / 2; i++)
        t->rscale[i] = 1.0;
    return QMLA_OK;
}

void qmla_transform_free(qmla_transform *t)
{
    if (!t)
        return;
    free(t->rot);
    free(t->cscale);
    free(t->angle);
    free(t->rscale);
    t->rot = t->cscale = t->angle = t->rscale = NULL;
}

int qmla_transform_set_identity(qmla_transform *t, const float *gamma,
                                qmla_error *err)
{
    size_t d = t->d_c;
    for (size_t j = 0; j < d; j++)
        if (!(gamma[j] != 0.0f) || !isfinite(gamma[j]))
            return qmla_error_set(err, QMLA_EINVAL,
                                  "transform: kv_norm gain γ[%zu] = %g: expected a finite non-zero value",
                                  j, (double)gamma[j]);
    memset(t->rot, 0, d * d * sizeof(double));
    for (size_t j = 0; j < d; j++) {
        t->rot[j * d + j] = gamma[j] < 0 ? -1.0 : 1.0;
        t->cscale[j] = fabs((double)gamma[j]);
    }
    for (size_t i = 0; i < t->d_r / 2; i++) {
        t->angle[i] = 0.0;
        t->rscale[i] = 1.0;
    }
    return QMLA_OK;
}

void qmla_rope_pair(size_t d_r, qmla_rope_pairing p, size_t i, size_t *a,
                    size_t *b)
{
    if (p == QMLA_ROPE_HALF) {
        *a = i;
        *b = i + d_r / 2;
    } else {
        *a = 2 * i;
        *b = 2 * i + 1;
    }
}

/* T_C[j][k] = R[j][k] s_k / γ_j;  T_C^-T[j][k] = γ_j R[j][k] / s_k. */
void qmla_transform_content_mats(const qmla_transform *t, const float *gamma,
                                 double *Tc, double *TcinvT)
{
    size_t d = t->d_c;
    for (size_t j = 0; j < d; j++)
        for (size_t k = 0; k < d; k++) {
            double r = t->rot[j * d + k];
            if (Tc)
                Tc[j * d + k] = r * t->cscale[k] / (double)gamma[j];
            if (TcinvT)
                TcinvT[j * d + k] = (double)gamma[j] * r / t->cscale[k];
        }
}

/* Y = X M for the three maps, M dense in closed form:
 *   FWD : (x diag(1/γ)) R diag(s)
 *   INV : (x diag(1/s)) R^T diag(γ)
 *   INVT: (x diag(γ)) R diag(1/s)  */
void qmla_transform_content_apply(const qmla_exec *ex, const qmla_transform *t,
                                  const float *gamma, qmla_tmap m,
                                  const float *X, size_t n, float *Y)
{
    size_t d = t->d_c;
    const double *R = t->rot;
    long nn = (long)n;
#pragma omp parallel num_threads(qmla_exec_threads(ex))
    {
        double *xin = malloc(2 * d * sizeof(double));
        double *acc = xin ? xin + d : NULL;
#pragma omp for schedule(static)
        for (long r = 0; r < nn; r++) {
            if (!xin)
                continue;
            const float *x = X + (size_t)r * d;
            float *y = Y + (size_t)r * d;
            for (size_t j = 0; j < d; j++) {
                double v = x[j];
                xin[j] = m == QMLA_TMAP_FWD ? v / gamma[j]
                         : m == QMLA_TMAP_INV ? v / t->cscale[j]
                                              : v * gamma[j];
                acc[j] = 0.0;
            }
            if (m == QMLA_TMAP_INV) {
                /* acc_k = sum_j xin_j R[k][j] */
                for (size_t k = 0; k < d; k++) {
                    const double *rk = R + k * d;
                    double s = 0.0;
                    for (size_t j = 0; j < d; j++)
                        s += xin[j] * rk[j];
                    acc[k] = s;
                }
            } else {
                for (size_t j = 0; j < d; j++) {
                    double v = xin[j];
                    if (v == 0.0)
                        continue;
                    const double *rj = R + j * d;
                    for (size_t k = 0; k < d; k++)
                        acc[k] += v * rj[k];
                }
            }
            for (size_t k = 0; k < d; k++)
                y[k] = (float)(m == QMLA_TMAP_FWD ? acc[k] * t->cscale[k]
                               : m == QMLA_TMAP_INV ? acc[k] * gamma[k]
                                                    : acc[k] / t->cscale[k]);
        }
        free(xin);
    }
}

void qmla_transform_rope_apply(const qmla_transform *t, qmla_tmap m,
                               const float *X, size_t n, float *Y)
{
    size_t d = t->d_r, P = d / 2;
    for (size_t r = 0; r < n; r++) {
        const float *x = X + r * d;
        float *y = Y + r * d;
        for (size_t i = 0; i < P; i++) {
            size_t a, b;
            qmla_rope_pair(d, t->pairing, i, &a, &b);
            double c = cos(t->angle[i]), s = sin(t->angle[i]);
            double f = m == QMLA_TMAP_FWD ? t->rscale[i] : 1.0 / t->rscale[i];
            double xa = x[a], xb = x[b], ya, yb;
            if (m == QMLA_TMAP_INV) { /* x R(θ)^T */
                ya = xa * c - xb * s;
                yb = xa * s + xb * c;
            } else { /* x R(θ) (FWD: times s; INVT: R(θ)/s) */
                ya = xa * c + xb * s;
                yb = -xa * s + xb * c;
            }
            y[a] = (float)(f * ya);
            y[b] = (float)(f * yb);
        }
    }
}

static void keep_clean(const float *X, size_t T, size_t w, size_t sink,
                       size_t local, float *out)
{
    for (size_t t = 0; t < T; t++)
        if (t < sink || (local > 0 && t + local >= T))
            memcpy(out + t * w, X + t * w, w * sizeof(float));
}

int qmla_transform_effective_content(const qmla_exec *ex,
                                     const qmla_transform *t,
                                     const float *gamma,
                                     const qmla_quant_params *p,
                                     const float *C, size_t T, size_t sink,
                                     size_t local, float *work, float *out,
                                     qmla_error *err)
{
    qmla_transform_content_apply(ex, t, gamma, QMLA_TMAP_FWD, C, T, work);
    if (p) {
        int st = qmla_quant_qdq(p, work, T, t->d_c, NULL, NULL, NULL, work, err);
        if (st)
            return qmla_error_prefix(err, "content cache in transformed coordinates: ");
    }
    qmla_transform_content_apply(ex, t, gamma, QMLA_TMAP_INV, work, T, out);
    keep_clean(C, T, t->d_c, sink, local, out);
    return QMLA_OK;
}

int qmla_transform_effective_rope(const qmla_transform *t,
                                  const qmla_quant_params *p, const float *K,
                                  size_t T, size_t sink, size_t local,
                                  float *work, float *out, qmla_error *err)
{
    qmla_transform_rope_apply(t, QMLA_TMAP_FWD, K, T, work);
    if (p) {
        int st = qmla_quant_qdq(p, work, T, t->d_r, NULL, NULL, NULL, work, err);
        if (st)
            return qmla_error_prefix(err, "RoPE cache in transformed coordinates: ");
    }
    qmla_transform_rope_apply(t, QMLA_TMAP_INV, work, T, out);
    keep_clean(K, T, t->d_r, sink, local, out);
    return QMLA_OK;
}

void qmla_transform_fuse_weights(const qmla_exec *ex, const qmla_transform *t,
                                 const float *gamma, const qmla_mla_dims *d,
                                 const qmla_mla_weights *w, float *w_uk_out,
                                 float *w_uv_out)
{
    qmla_transform_content_apply(ex, t, gamma, QMLA_TMAP_INVT, w->w_uk,
                                 d->H * d->d_n, w_uk_out);
    qmla_transform_content_apply(ex, t, gamma, QMLA_TMAP_INVT, w->w_uv,
                                 d->H * d->d_v, w_uv_out);
}

/* ---- baselines ----------------------------------------------------------- */

int qmla_calib_alloc(size_t d_c, size_t d_r, qmla_calib *c, qmla_error *err)
{
    memset(c, 0, sizeof *c);
    c->d_c = d_c;
    c->d_r = d_r;
    c->cmax = calloc(d_c, sizeof(double));
    c->qcmax = calloc(d_c, sizeof(double));
    c->kmax = calloc(d_r + 1, sizeof(double));
    c->qpmax = calloc(d_r + 1, sizeof(double));
    if (!c->cmax || !c->qcmax || !c->kmax || !c->qpmax) {
        qmla_calib_free(c);
        return qmla_error_set(err, QMLA_ENOMEM, "calibration: out of memory");
    }
    return QMLA_OK;
}

void qmla_calib_free(qmla_calib *c)
{
    if (!c)
        return;
    free(c->cmax);
    free(c->qcmax);
    free(c->kmax);
    free(c->qpmax);
    c->cmax = c->qcmax = c->kmax = c->qpmax = NULL;
}

static void colmax(double *m, const float *X, size_t rows, size_t w)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < w; j++) {
            double v = fabs((double)X[r * w + j]);
            if (v > m[j])
                m[j] = v;
        }
}

void qmla_calib_add(qmla_calib *c, size_t T, size_t H, const float *C,
                    const float *K, const float *q_lat, const float *q_rope_t)
{
    if (C)
        colmax(c->cmax, C, T, c->d_c);
    if (K)
        colmax(c->kmax, K, T, c->d_r);
    if (q_lat)
        colmax(c->qcmax, q_lat, T * H, c->d_c);
    if (q_rope_t)
        colmax(c->qpmax, q_rope_t, T * H, c->d_r);
}

/* qmla_tmethod_name: lib/transform/tmethod.c (the method table) */

static double smooth_sigma(double xm, double qm, double alpha)
{
    if (!(xm > 0) || !(qm > 0))
        return 1.0;
    return pow(xm, alpha) / pow(qm, 1.0 - alpha);
}

int qmla_transform_smoothquant(qmla_transform *t, const float *gamma,
                               const qmla_calib *c, double alpha,
                               qmla_error *err)
{
    if (!(alpha >= 0.0 && alpha <= 1.0))
        return qmla_error_set(err, QMLA_EINVAL,
                              "smoothquant: expected α in [0, 1], found %g", alpha);
    int st = qmla_transform_set_identity(t, gamma, err);
    if (st)
        return st;
    for (size_t j = 0; j < t->d_c; j++)
        t->cscale[j] = fabs((double)gamma[j]) /
                       smooth_sigma(c->cmax[j], c->qcmax[j], alpha);
    for (size_t i = 0; i < t->d_r / 2; i++) {
        size_t a, b;
        qmla_rope_pair(t->d_r, t->pairing, i, &a, &b);
        double sa = smooth_sigma(c->kmax[a], c->qpmax[a], alpha);
        double sb = smooth_sigma(c->kmax[b], c->qpmax[b], alpha);
        t->rscale[i] = 1.0 / (sa > sb ? sa : sb);
    }
    return QMLA_OK;
}

int qmla_transform_quarot(qmla_transform *t, qmla_error *err)
{
    size_t d = t->d_c;
    if (d & (d - 1))
        return qmla_error_set(err, QMLA_EINVAL,
                              "quarot: expected d_c a power of 2 (Sylvester Hadamard), found %zu", d);
    double f = 1.0 / sqrt((double)d);
    for (size_t j = 0; j < d; j++) {
        for (size_t k = 0; k < d; k++)
            t->rot[j * d + k] = (__builtin_popcountll((unsigned long long)(j & k)) & 1) ? -f : f;
        t->cscale[j] = 1.0;
    }
    for (size_t i = 0; i < t->d_r / 2; i++) {
        t->angle[i] = 0.0;
        t->rscale[i] = 1.0;
    }
    return QMLA_OK;
}

/* ---- the file ----------------------------------------------------------- */

#define TF_FORMAT "qmla-transforms"
static const char *const obj_names[QMLA_TOBJ_N] = {
    "objective_content_init", "objective_content_best", "objective_rope_init",
    "objective_rope_best"};
#define TF_VERSION 1

int qmla_transform_file_check_output(const char *path, qmla_error *err)
{
    return qmla_h5_check_replace(path, TF_FORMAT, err) ? QMLA_EINVAL : QMLA_OK;
}

int qmla_transform_file_write(const char *path, const qmla_transform_meta *m,
                              const qmla_transform *t, const float *const *gammas,
                              const double *obj, size_t n, qmla_error *err)
{
    return qmla_transform_file_write_engine(path, m, NULL, t, gammas, obj, n, err);
}

int qmla_transform_file_write_engine(const char *path, const qmla_transform_meta *m,
                                     const qmla_engine *engine, const qmla_transform *t,
                                     const float *const *gammas, const double *obj, size_t n,
                                     qmla_error *err)
{
    /* the whole file is replaced: a results file given as -o was lost */
    if (qmla_transform_file_check_output(path, err))
        return QMLA_EINVAL;
    qmla_h5_out o;
    int st = qmla_h5_out_file(&o, path, err);
    if (st)
        return st;
    const hid_t f = o.f;
    int bad = 0;
    if (!bad) {
        bad |= qmla_h5_attr_str(f, "format", TF_FORMAT);
        bad |= qmla_h5_attr_int(f, "version", TF_VERSION);
        bad |= qmla_h5_attr_str(f, "method", qmla_tmethod_name(m->method));
        bad |= qmla_h5_attr_str(f, "config", m->config);
        bad |= qmla_h5_attr_dbl(f, "smoothquant_alpha", m->alpha);
        bad |= qmla_h5_attr_str(f, "train_cells", m->train_cells);
        bad |= qmla_h5_attr_str(f, "capture", m->capture);
        bad |= qmla_h5_attr_str(f, "command", m->command);
        bad |= qmla_h5_attr_str(f, "settings", m->settings);
        bad |= qmla_h5_attr_int(f, "complete", m->complete);
        if (m->capture_sha256[0])
            bad |= qmla_h5_attr_str(f, "capture_sha256", m->capture_sha256);
        const qmla_prov p = {.tool = "qmla learn", .command_line = m->command,
                             .engine = qmla_engine_name(engine),
                             .engine_device = qmla_engine_device(engine)};
        if (!bad && (st = qmla_h5_prov(f, &p, path, err)))
            return qmla_h5_out_finish(&o, st);
    }
    hid_t lg = bad ? -1 : H5Gcreate2(f, "layers", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    bad |= lg < 0;
    for (size_t i = 0; i < n && !bad; i++) {
        char name[32];
        snprintf(name, sizeof name, "%d", t[i].layer);
        hid_t g = H5Gcreate2(lg, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        hid_t gc = g >= 0 ? H5Gcreate2(g, "content", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
        hid_t gr = g >= 0 ? H5Gcreate2(g, "rope", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
        bad |= g < 0 || gc < 0 || gr < 0;
        if (!bad) {
            hsize_t dims[2] = {t[i].d_c, t[i].d_c};
            bad |= qmla_h5_dset_nd(gc, "rotation", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2,
                                   dims, H5P_DEFAULT, t[i].rot);
            bad |= qmla_h5_dset_1d(gc, "scale", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, t[i].d_c,
                                   t[i].cscale, "s of T_C = diag(gamma)^-1 R diag(s)", "1");
            bad |= qmla_h5_dset_1d(gc, "gamma", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, t[i].d_c,
                                   gammas[i], "the capture's kv_norm weight it was computed with", "1");
            bad |= qmla_h5_dset_1d(gr, "angle", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, t[i].d_r / 2,
                                   t[i].angle, "theta_i of T_P = blockdiag(s_i R(theta_i))", "rad");
            bad |= qmla_h5_dset_1d(gr, "scale", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, t[i].d_r / 2,
                                   t[i].rscale, "s_i of T_P", "1");
            bad |= qmla_h5_attr_str(gr, "rope_pairing", qmla_rope_pairing_name(t[i].pairing));
            for (int k = 0; k < QMLA_TOBJ_N; k++)
                bad |= qmla_h5_attr_dbl(g, obj_names[k], obj ? obj[i * QMLA_TOBJ_N + k] : NAN);
        }
        if (gc >= 0) H5Gclose(gc);
        if (gr >= 0) H5Gclose(gr);
        if (g >= 0) H5Gclose(g);
    }
    if (lg >= 0)
        H5Gclose(lg);
    if (bad) {
        char msg[256];
        qmla_h5_error_text(msg, sizeof msg);
        st = qmla_error_set(err, QMLA_EIO, "%s: building the transforms file: %s", path, msg);
    }
    return qmla_h5_out_finish(&o, st);
}

void qmla_transform_file_free(qmla_transform_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++) {
        if (f->t)
            qmla_transform_free(&f->t[i]);
        if (f->gamma)
            free(f->gamma[i]);
    }
    free(f->t);
    free(f->gamma);
    free(f->obj);
    memset(f, 0, sizeof *f);
}

static int cmp_layer(const void *a, const void *b)
{
    long x = strtol(*(char *const *)a, NULL, 10), y = strtol(*(char *const *)b, NULL, 10);
    return (x > y) - (x < y);
}

/* Scales are used in float32 (the fused weights, the cache maps): finite,
 * nonzero after the conversion and with a finite reciprocal there. */
static int scale_f32_ok(double x)
{
    const float f = (float)x;
    return isfinite(f) && f != 0.0f && isfinite(1.0f / f);
}
#define SCALE_F32_EXPECT                                                                  \
    "expected a value finite and nonzero in float32 (the precision it is used in) with a " \
    "finite float32 reciprocal, found %g (%g in float32)"

static int read_layer(const qmla_h5_ctx *v, hid_t lg, const char *name,
                      qmla_transform_file *f, size_t i)
{
    char gp[96], cp[128], rp[128];
    snprintf(gp, sizeof gp, "/layers/%s", name);
    char *end;
    long li = strtol(name, &end, 10);
    if (*end || end == name || li < 0 || li > 1000000)
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, gp, "expected a layer index as the group name");
    hid_t g = -1, gc = -1, gr = -1;
    int st = qmla_h5_open_child(v, lg, "/layers", name, H5I_GROUP, "a group", 1, &g);
    if (!st) {
        snprintf(cp, sizeof cp, "%s/content", gp);
        st = qmla_h5_open_child(v, g, gp, "content", H5I_GROUP, "a group", 1, &gc);
    }
    if (!st) {
        snprintf(rp, sizeof rp, "%s/rope", gp);
        st = qmla_h5_open_child(v, g, gp, "rope", H5I_GROUP, "a group", 1, &gr);
    }
    hsize_t fd[4];
    qmla_h5_dspec rs = {"rotation", 2, {QMLA_H5_WILD, QMLA_H5_WILD}, {"d_c", "d_c"}, 0};
    qmla_h5_dspec as = {"angle", 1, {QMLA_H5_WILD}, {"d_r/2"}, 0};
    size_t dc = 0, P = 0;
    int present = 0;
    if (!st)
        st = qmla_h5_check_dataset(v, gc, cp, &rs, 1, &present, fd);
    if (!st) {
        dc = fd[0];
        if (fd[1] != fd[0] || dc == 0 || dc > 65536)
            st = qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, cp,
                              "rotation: expected a square [d_c, d_c] with 0 < d_c <= 65536, found [%llu, %llu]",
                              (unsigned long long)fd[0], (unsigned long long)fd[1]);
    }
    if (!st) { /* a rotation whose side disagrees with content/scale and
                * content/gamma (which agree) is the wrong one: name it */
        qmla_h5_dspec ss = {"scale", 1, {QMLA_H5_WILD}, {"d_c"}, 0};
        qmla_h5_dspec gs = {"gamma", 1, {QMLA_H5_WILD}, {"d_c"}, 0};
        hsize_t fs[4] = {0}, fg[4] = {0};
        int ps = 0, pg = 0;
        qmla_error e2;
        qmla_h5_ctx v2 = {v->label, v->lapl, &e2};
        if (qmla_h5_check_dataset(&v2, gc, cp, &ss, 0, &ps, fs) == QMLA_OK &&
            qmla_h5_check_dataset(&v2, gc, cp, &gs, 0, &pg, fg) == QMLA_OK && ps && pg &&
            fs[0] == fg[0] && fs[0] != dc)
            st = qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, cp,
                              "rotation: expected shape [%llu, %llu] (the length of content/scale and "
                              "content/gamma), found [%llu, %llu]",
                              (unsigned long long)fs[0], (unsigned long long)fs[0],
                              (unsigned long long)dc, (unsigned long long)dc);
    }
    if (!st)
        st = qmla_h5_check_dataset(v, gr, rp, &as, 1, &present, fd);
    if (!st)
        P = fd[0];
    char *pair = NULL;
    if (!st)
        st = qmla_h5_read_attr_str(v, gr, rp, "rope_pairing", 1, &pair);
    qmla_rope_pairing pp = QMLA_ROPE_INTERLEAVED;
    if (!st) {
        if (!strcmp(pair, "half"))
            pp = QMLA_ROPE_HALF;
        else if (strcmp(pair, "interleaved"))
            st = qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, rp,
                              "attribute rope_pairing: expected \"interleaved\" or \"half\", found \"%s\"", pair);
    }
    free(pair);
    qmla_transform *t = &f->t[i];
    if (!st)
        st = qmla_transform_alloc(dc, 2 * P, pp, t, v->err);
    if (!st)
        t->layer = (int)li;
    void *buf = NULL;
    hsize_t d2[2] = {dc, dc}, d1 = dc, dp = P;
    struct { hid_t g; const char *gp, *name; hsize_t *dims; int rank; double *dst; size_t n; } rd[] = {
        {gc, cp, "rotation", d2, 2, t->rot, dc * dc},
        {gc, cp, "scale", &d1, 1, t->cscale, dc},
        {gr, rp, "angle", &dp, 1, t->angle, P},
        {gr, rp, "scale", &dp, 1, t->rscale, P}};
    for (size_t k = 0; k < 4 && !st; k++) {
        st = qmla_h5_read_dataset(v, rd[k].g, rd[k].gp, rd[k].name, rd[k].rank, rd[k].dims,
                                  H5T_NATIVE_FLOAT, sizeof(float), &buf);
        free(buf);
        buf = NULL;
        if (!st)
            st = qmla_h5_read_dataset(v, rd[k].g, rd[k].gp, rd[k].name, rd[k].rank, rd[k].dims,
                                      H5T_NATIVE_DOUBLE, sizeof(double), &buf);
        if (!st)
            memcpy(rd[k].dst, buf, rd[k].n * sizeof(double));
        free(buf);
        buf = NULL;
    }
    if (!st)
        st = qmla_h5_read_dataset(v, gc, cp, "gamma", 1, &d1, H5T_NATIVE_FLOAT, sizeof(float), &buf);
    if (!st)
        f->gamma[i] = buf;
    for (int k = 0; k < QMLA_TOBJ_N && !st; k++) {
        int pr = 0;
        double ov = NAN;
        st = qmla_h5_read_attr_dbl(v, g, gp, obj_names[k], 0, &ov, &pr);
        f->obj[i * QMLA_TOBJ_N + k] = pr ? ov : NAN;
    }
    for (size_t j = 0; j < dc && !st; j++)
        if (!(t->cscale[j] > 0))
            st = qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, cp,
                              "scale[%zu]: expected > 0, found %g", j, t->cscale[j]);
        else if (!scale_f32_ok(t->cscale[j]))
            st = qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, cp, "scale[%zu]: " SCALE_F32_EXPECT,
                              j, t->cscale[j], (double)(float)t->cscale[j]);
    for (size_t j = 0; j < P && !st; j++)
        if (!(t->rscale[j] > 0))
            st = qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, rp,
                              "scale[%zu]: expected > 0, found %g", j, t->rscale[j]);
        else if (!scale_f32_ok(t->rscale[j]))
            st = qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, rp, "scale[%zu]: " SCALE_F32_EXPECT,
                              j, t->rscale[j], (double)(float)t->rscale[j]);
    if (!st) { /* orthogonality of R */
        double worst = 0.0;
        size_t wj = 0, wk = 0;
        for (size_t j = 0; j < dc; j++)
            for (size_t k = j; k < dc; k++) {
                double s = 0.0;
                for (size_t r = 0; r < dc; r++)
                    s += t->rot[r * dc + j] * t->rot[r * dc + k];
                double e = fabs(s - (j == k ? 1.0 : 0.0));
                if (e > worst) {
                    worst = e;
                    wj = j;
                    wk = k;
                }
            }
        if (worst > 1e-5)
            st = qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, cp,
                              "rotation: expected orthogonal (|R^T R - I| <= 1e-5), found %.3g at [%zu, %zu]",
                              worst, wj, wk);
    }
    if (gc >= 0) H5Gclose(gc);
    if (gr >= 0) H5Gclose(gr);
    if (g >= 0) H5Gclose(g);
    return st;
}

/* An optional root string attribute into dst (left as it is when absent). */
static int read_opt_str(const qmla_h5_ctx *v, hid_t fh, const char *name, char *dst, size_t n)
{
    char *s = NULL;
    int st = qmla_h5_read_attr_str(v, fh, "/", name, 0, &s);
    if (!st && s)
        snprintf(dst, n, "%s", s);
    free(s);
    return st;
}

int qmla_transform_file_read(const char *path, qmla_transform_file *f,
                             qmla_error *err)
{
    memset(f, 0, sizeof *f);
    if (qmla_h5_check_input(path, "transforms file", err))
        return err ? err->status : QMLA_ENOENT;
    h5_quiet q = qmla_h5_quiet_begin();
    hid_t lapl = qmla_h5_make_lapl();
    qmla_h5_ctx v = {path, lapl, err};
    hid_t fh = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    int st = QMLA_OK;
    char *s = NULL, **names = NULL;
    size_t nn = 0;
    hid_t lg = -1;
    if (fh < 0) {
        char msg[256];
        qmla_h5_error_text(msg, sizeof msg);
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot open as HDF5: %s", path, msg);
        goto out;
    }
    st = qmla_h5_read_attr_str(&v, fh, "/", "format", 1, &s);
    if (!st && strcmp(s, TF_FORMAT))
        st = qmla_h5_fail(err, QMLA_EFORMAT, path, "/", "attribute format: expected \"%s\", found \"%s\"",
                          TF_FORMAT, s);
    free(s);
    s = NULL;
    int64_t ver = 0;
    if (!st)
        st = qmla_h5_read_attr_int(&v, fh, "/", "version", 1, &ver, NULL);
    if (!st && ver != TF_VERSION)
        st = qmla_h5_fail(err, QMLA_EFORMAT, path, "/", "attribute version: expected %d, found %lld",
                          TF_VERSION, (long long)ver);
    if (!st)
        st = qmla_h5_read_attr_str(&v, fh, "/", "method", 1, &s);
    if (!st) {
        const qmla_tmethod_type *mt = qmla_tmethod_lookup(s);
        if (mt)
            f->meta.method = mt->id;
        else
            st = qmla_h5_fail(err, QMLA_EFORMAT, path, "/",
                              "attribute method: expected rtn, smoothquant, quarot or quantmla, found \"%s\"", s);
    }
    free(s);
    s = NULL;
    if (!st)
        st = qmla_h5_read_attr_str(&v, fh, "/", "config", 1, &s);
    if (!st)
        snprintf(f->meta.config, sizeof f->meta.config, "%s", s);
    free(s);
    s = NULL;
    if (!st)
        st = qmla_h5_read_attr_dbl(&v, fh, "/", "smoothquant_alpha", 0, &f->meta.alpha, NULL);
    if (!st)
        st = read_opt_str(&v, fh, "settings", f->meta.settings, sizeof f->meta.settings);
    int64_t comp = 1;
    int cpres = 0;
    if (!st)
        st = qmla_h5_read_attr_int(&v, fh, "/", "complete", 0, &comp, &cpres);
    f->meta.complete = cpres ? (int)comp : 1;
    if (!st)
        st = read_opt_str(&v, fh, "capture_sha256", f->meta.capture_sha256,
                          sizeof f->meta.capture_sha256);
    if (!st)
        st = qmla_h5_open_child(&v, fh, "/", "layers", H5I_GROUP, "a group", 1, &lg);
    if (!st)
        st = qmla_h5_list_links(&v, lg, "/layers", &names, &nn);
    if (!st && nn == 0)
        st = qmla_h5_fail(err, QMLA_EFORMAT, path, "/layers", "expected at least one layer, found none");
    if (!st) {
        qsort(names, nn, sizeof *names, cmp_layer);
        f->t = calloc(nn, sizeof *f->t);
        f->gamma = calloc(nn, sizeof *f->gamma);
        f->obj = calloc(nn * QMLA_TOBJ_N, sizeof *f->obj);
        if (!f->t || !f->gamma || !f->obj)
            st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
        else
            f->n = nn;
    }
    for (size_t i = 0; i < nn && !st; i++)
        st = read_layer(&v, lg, names[i], f, i);
out:
    if (names)
        qmla_h5_free_names(names, nn);
    qmla_h5_read_close(lg, fh, lapl, q);
    if (st)
        qmla_transform_file_free(f);
    return st;
}

const qmla_transform *qmla_transform_file_layer(const qmla_transform_file *f,
                                                int layer, const float **gamma)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->t[i].layer == layer) {
            if (gamma)
                *gamma = f->gamma[i];
            return &f->t[i];
        }
    return NULL;
}

int qmla_transform_file_check_complete(const qmla_transform_file *f, const char *path,
                                       size_t n_layers, qmla_error *err)
{
    if (f->meta.complete)
        return QMLA_OK;
    char miss[512] = "";
    size_t nm = 0, l = 0;
    for (size_t i = 0; i < n_layers; i++) {
        if (qmla_transform_file_layer(f, (int)i, NULL))
            continue;
        if (l + 24 < sizeof miss)
            l += (size_t)snprintf(miss + l, sizeof miss - l, "%s%zu", nm ? ", " : "", i);
        else if (l + 5 < sizeof miss && miss[l - 1] != '.')
            l += (size_t)snprintf(miss + l, sizeof miss - l, ", ...");
        nm++;
    }
    if (!nm)
        return qmla_error_set(err, QMLA_EINVAL, "%s: attribute complete: expected 1, found 0 (an "
                              "interrupted qmla learn checkpoint; rerun the learn command to finish it)",
                              path);
    return qmla_error_set(err, QMLA_EINVAL, "%s has no transform for layer%s %s (attribute complete "
                          "= 0: an interrupted qmla learn checkpoint; rerun the learn command to "
                          "finish it)", path, nm > 1 ? "s" : "", miss);
}
