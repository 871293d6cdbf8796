/* capture_write.c — writer of qmla-capture v1 files (docs/capture-format.md),
 * used by `qmla synth`, the tests and the benchmarks.
 *
 * Float tensors are stored as float32 (H5T_IEEE_F32LE) or, with float16 != 0,
 * as IEEE binary16 built the way h5py builds it (H5T_IEEE_F32LE copied, fields
 * 15/10/5/0/10, size 2, bias 15), so numpy sees `float16`. The writer rounds
 * float32 to binary16 itself (nearest even; HDF5 1.10's conversion gets
 * carries and ties wrong, see f32_to_f16). A finite value that float16 cannot hold
 * (|x| >= 65520) is refused with QMLA_ERANGE rather than stored as infinity.
 * positions are int64; attributes are fixed-length strings, int32 (seed:
 * int64 when it does not fit) and double. gzip > 0 chunks each dataset
 * (chunks of at most ~1 MiB, leading dimensions split first) and applies
 * shuffle + deflate at that level.
 *
 * The writer stores values as given (non-finite values included: tests build
 * bad files with it); it checks shapes, names and the optional-tensor rules
 * so that it never writes a structure the reader rejects.
 */
#include "qmla/capture.h"
#include "h5util.h"

#include <hdf5.h>

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct qmla_capture_writer {
    hid_t file;
    hid_t ftype;       /* float storage type (owned) */
    int float16;
    int gzip;
    char *path;
    qmla_capture_config cfg;
};


/* "<path>: <obj>: <detail>: <innermost HDF5 message>" */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static int h5fail(qmla_error *err, const char *path, const char *obj,
                  const char *fmt, ...)
{
    char detail[QMLA_ERRMSG_MAX], h5msg[256];
    qmla_h5_error_text(h5msg, sizeof h5msg);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return qmla_error_set(err, QMLA_EIO, "%s: %s: %s (%s)", path, obj, detail,
                          h5msg);
}

/* float32 -> IEEE binary16 bits, round to nearest even; overflow gives
 * infinity, NaN stays NaN. Done here rather than by HDF5: HDF5 1.10.8's soft
 * float conversion drops the carry when rounding overflows the mantissa
 * (3.9998 -> 2.0, not 4.0) and rounds ties away from zero. */
static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf, nan (kept quiet) */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
    if (ax >= 0x477ff000u) /* rounds to 65536 or more */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below 2^-14: a subnormal half (or zero) */
        float af;
        memcpy(&af, &ax, sizeof af);
        /* af * 2^24 is exact; rint rounds to nearest even. 1024 encodes
         * the smallest normal, as it should. */
        return (uint16_t)(sign | (uint32_t)rintf(af * 16777216.0f));
    }
    uint32_t h = ((((ax >> 23) - 127u + 15u)) << 10) | ((ax & 0x7fffffu) >> 13);
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++; /* a carry into the exponent is the right answer */
    return (uint16_t)(sign | h);
}

/* IEEE binary16 as h5py/numpy store it. Caller closes. */
static hid_t make_f16(void)
{
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    if (t < 0)
        return t;
    if (H5Tset_fields(t, 15, 10, 5, 0, 10) < 0 || H5Tset_size(t, 2) < 0 ||
        H5Tset_ebias(t, 15) < 0) {
        H5Tclose(t);
        return H5I_INVALID_HID;
    }
    return t;
}

/* ---- attributes ---------------------------------------------------------- */

static int put_string(hid_t obj, const char *name, const char *val)
{
    size_t n = strlen(val);
    int utf8 = 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)val[i] >= 0x80)
            utf8 = 1;
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR), a = -1;
    int ok = t >= 0 && sp >= 0 && H5Tset_size(t, n + 1) >= 0 &&
             H5Tset_strpad(t, H5T_STR_NULLTERM) >= 0 &&
             H5Tset_cset(t, utf8 ? H5T_CSET_UTF8 : H5T_CSET_ASCII) >= 0 &&
             (a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT)) >= 0 &&
             H5Awrite(a, t, val) >= 0;
    if (a >= 0)
        H5Aclose(a);
    if (sp >= 0)
        H5Sclose(sp);
    if (t >= 0)
        H5Tclose(t);
    return ok ? 0 : -1;
}

static int put_num(hid_t obj, const char *name, hid_t ftype, hid_t mtype,
                   const void *val)
{
    hid_t sp = H5Screate(H5S_SCALAR), a = -1;
    int ok = sp >= 0 &&
             (a = H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT)) >= 0 &&
             H5Awrite(a, mtype, val) >= 0;
    if (a >= 0)
        H5Aclose(a);
    if (sp >= 0)
        H5Sclose(sp);
    return ok ? 0 : -1;
}

static int put_int(hid_t obj, const char *name, int v)
{
    return put_num(obj, name, H5T_STD_I32LE, H5T_NATIVE_INT, &v);
}

static int put_double(hid_t obj, const char *name, double v)
{
    return put_num(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}

/* ---- datasets ------------------------------------------------------------ */

static int check_f16_range(const char *path, const char *obj, const float *x,
                           size_t n, qmla_error *err)
{
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabsf(x[i]) >= 65520.0f)
            return qmla_error_set(err, QMLA_ERANGE, "%s: %s: float16 storage: "
                                  "expected |x| < 65520, found %g at element "
                                  "%zu", path, obj, (double)x[i], i);
    return QMLA_OK;
}

/* Write dataset `name` in group g (object path gpath) with file type ft from
 * memory type mt. */
static int put_dataset(qmla_capture_writer *w, hid_t g, const char *gpath,
                       const char *name, int rank, const hsize_t *dims,
                       hid_t ft, hid_t mt, const void *data, qmla_error *err)
{
    char obj[QMLA_ERRMSG_MAX];
    snprintf(obj, sizeof obj, "%s/%s", gpath, name);
    size_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] == 0 || n > (size_t)QMLA_CAPTURE_MAX_ELEMS / dims[i])
            return qmla_error_set(err, QMLA_ERANGE, "%s: %s: expected 1 to "
                                  "2^40 elements, found a dimension of %llu",
                                  w->path, obj,
                                  (unsigned long long)dims[i]);
        n *= (size_t)dims[i];
    }
    uint16_t *half = NULL;
    if (w->float16 && mt == H5T_NATIVE_FLOAT) {
        int st = check_f16_range(w->path, obj, data, n, err);
        if (st)
            return st;
        half = malloc(n * sizeof *half);
        if (!half)
            return qmla_error_set(err, QMLA_ENOMEM, "%s: %s: expected memory "
                                  "for %zu float16 values, found none",
                                  w->path, obj, n);
        const float *x = data;
        for (size_t i = 0; i < n; i++)
            half[i] = f32_to_f16(x[i]);
        data = half;
        mt = ft; /* the bits are already binary16: no HDF5 conversion */
    }
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), d = -1;
    int ok = sp >= 0 && dcpl >= 0;
    if (ok && w->gzip > 0) {
        hsize_t chunk[8];
        size_t el = H5Tget_size(ft), bytes = n * el;
        for (int i = 0; i < rank; i++)
            chunk[i] = dims[i];
        for (int i = 0; i < rank && bytes > (1u << 20); i++)
            while (chunk[i] > 1 && bytes > (1u << 20)) {
                size_t old = (size_t)chunk[i];
                chunk[i] = (chunk[i] + 1) / 2;
                bytes = bytes / old * (size_t)chunk[i];
            }
        ok = H5Pset_chunk(dcpl, rank, chunk) >= 0 && H5Pset_shuffle(dcpl) >= 0 &&
             H5Pset_deflate(dcpl, (unsigned)w->gzip) >= 0;
    }
    ok = ok && (d = H5Dcreate2(g, name, ft, sp, H5P_DEFAULT, dcpl,
                               H5P_DEFAULT)) >= 0 &&
         H5Dwrite(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0;
    int st = ok ? QMLA_OK : h5fail(err, w->path, obj, "cannot write dataset");
    if (d >= 0)
        H5Dclose(d);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (sp >= 0)
        H5Sclose(sp);
    free(half);
    return st;
}

static int put_f32(qmla_capture_writer *w, hid_t g, const char *gpath,
                   const char *name, int rank, const hsize_t *dims,
                   const float *x, qmla_error *err)
{
    return put_dataset(w, g, gpath, name, rank, dims, w->ftype,
                       H5T_NATIVE_FLOAT, x, err);
}

/* ---- public -------------------------------------------------------------- */

static int check_cfg(const char *path, const qmla_capture_config *c,
                     qmla_error *err)
{
    const struct { const char *name; int v; } dims[] = {
        {"n_layers", c->n_layers}, {"n_heads", c->H}, {"d_model", c->D},
        {"kv_lora_rank", c->d_c}, {"qk_nope_head_dim", c->d_n},
        {"qk_rope_head_dim", c->d_r}, {"v_head_dim", c->d_v}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].v <= 0)
            return qmla_error_set(err, QMLA_EINVAL, "%s: config %s: expected "
                                  "a positive value, found %d", path,
                                  dims[i].name, dims[i].v);
    if (c->d_r % 2)
        return qmla_error_set(err, QMLA_EINVAL, "%s: config qk_rope_head_dim: "
                              "expected an even value, found %d", path,
                              c->d_r);
    if ((long long)c->H * c->d_v > INT_MAX)
        return qmla_error_set(err, QMLA_EINVAL, "%s: config: expected n_heads "
                              "* v_head_dim to fit an int, found %d * %d",
                              path, c->H, c->d_v);
    if (!(isfinite(c->softmax_scale) && c->softmax_scale > 0))
        return qmla_error_set(err, QMLA_EINVAL, "%s: config softmax_scale: "
                              "expected a finite value > 0, found %g", path,
                              c->softmax_scale);
    if (!(isfinite(c->rms_norm_eps) && c->rms_norm_eps >= 0))
        return qmla_error_set(err, QMLA_EINVAL, "%s: config rms_norm_eps: "
                              "expected a finite value >= 0, found %g", path,
                              c->rms_norm_eps);
    if (c->rope_pairing != QMLA_ROPE_INTERLEAVED &&
        c->rope_pairing != QMLA_ROPE_HALF)
        return qmla_error_set(err, QMLA_EINVAL, "%s: config rope_pairing: "
                              "expected QMLA_ROPE_INTERLEAVED or "
                              "QMLA_ROPE_HALF, found %d", path,
                              (int)c->rope_pairing);
    if (c->has_check_tolerance &&
        !(isfinite(c->check_tolerance) && c->check_tolerance > 0))
        return qmla_error_set(err, QMLA_EINVAL, "%s: config check_tolerance: "
                              "expected a finite value > 0, found %g", path,
                              c->check_tolerance);
    if (c->synthetic != 0 && c->synthetic != 1)
        return qmla_error_set(err, QMLA_EINVAL, "%s: config synthetic: "
                              "expected 0 or 1, found %d", path, c->synthetic);
    if (!memchr(c->model, '\0', sizeof c->model) ||
        !memchr(c->source, '\0', sizeof c->source))
        return qmla_error_set(err, QMLA_EINVAL, "%s: config model/source: "
                              "expected NUL-terminated strings, found none",
                              path);
    return QMLA_OK;
}

static int write_header(qmla_capture_writer *w, qmla_error *err)
{
    const qmla_capture_config *c = &w->cfg;
    hid_t root = H5Gopen2(w->file, "/", H5P_DEFAULT);
    int ok = root >= 0 && put_string(root, "format", QMLA_CAPTURE_FORMAT) == 0 &&
             put_int(root, "format_version", QMLA_CAPTURE_VERSION) == 0 &&
             put_string(root, "model", c->model) == 0 &&
             put_string(root, "source", c->source) == 0 &&
             (!c->has_check_tolerance ||
              put_double(root, "check_tolerance", c->check_tolerance) == 0) &&
             (!c->synthetic || put_int(root, "synthetic", 1) == 0);
    if (root >= 0)
        H5Gclose(root);
    if (!ok)
        return h5fail(err, w->path, "/", "cannot write the root attributes");
    hid_t g = H5Gcreate2(w->file, "/config", H5P_DEFAULT, H5P_DEFAULT,
                         H5P_DEFAULT);
    ok = g >= 0 && put_int(g, "n_layers", c->n_layers) == 0 &&
         put_int(g, "n_heads", c->H) == 0 && put_int(g, "d_model", c->D) == 0 &&
         put_int(g, "kv_lora_rank", c->d_c) == 0 &&
         put_int(g, "qk_nope_head_dim", c->d_n) == 0 &&
         put_int(g, "qk_rope_head_dim", c->d_r) == 0 &&
         put_int(g, "v_head_dim", c->d_v) == 0 &&
         put_double(g, "softmax_scale", c->softmax_scale) == 0 &&
         put_string(g, "rope_pairing", c->rope_pairing == QMLA_ROPE_HALF
                                           ? "half" : "interleaved") == 0 &&
         put_double(g, "rms_norm_eps", c->rms_norm_eps) == 0;
    if (g >= 0)
        H5Gclose(g);
    if (!ok)
        return h5fail(err, w->path, "/config", "cannot write the attributes");
    g = H5Gcreate2(w->file, "/layers", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0)
        return h5fail(err, w->path, "/layers", "cannot create the group");
    H5Gclose(g);
    return QMLA_OK;
}

int qmla_capture_writer_open(const char *path, const qmla_capture_config *cfg,
                             int float16, int gzip, qmla_capture_writer **out,
                             qmla_error *err)
{
    if (!out)
        return qmla_error_set(err, QMLA_EINVAL, "qmla_capture_writer_open: "
                              "expected an output pointer, found NULL");
    *out = NULL;
    if (!path || !cfg)
        return qmla_error_set(err, QMLA_EINVAL, "qmla_capture_writer_open: "
                              "expected a path and a config, found NULL");
    if (gzip < 0 || gzip > 9)
        return qmla_error_set(err, QMLA_EINVAL, "%s: gzip: expected a level "
                              "0..9, found %d", path, gzip);
    int st = check_cfg(path, cfg, err);
    if (st)
        return st;
    h5_quiet q = qmla_h5_quiet_begin();
    if (gzip > 0 && (H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0 ||
                     H5Zfilter_avail(H5Z_FILTER_SHUFFLE) <= 0)) {
        qmla_h5_quiet_end(q);
        return qmla_error_set(err, QMLA_EINVAL, "%s: gzip: expected the "
                              "deflate and shuffle filters, found them "
                              "unavailable in this HDF5", path);
    }
    qmla_capture_writer *w = calloc(1, sizeof *w);
    char *p = malloc(strlen(path) + 1);
    if (!w || !p) {
        free(w);
        free(p);
        qmla_h5_quiet_end(q);
        return qmla_error_set(err, QMLA_ENOMEM, "%s: expected memory for the "
                              "writer, found none", path);
    }
    strcpy(p, path);
    w->path = p;
    w->cfg = *cfg;
    w->float16 = float16 != 0;
    w->gzip = gzip;
    w->file = H5I_INVALID_HID;
    w->ftype = float16 ? make_f16() : H5Tcopy(H5T_IEEE_F32LE);
    if (w->ftype < 0) {
        st = h5fail(err, path, "/", "cannot build the float storage type");
        goto fail;
    }
    w->file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (w->file < 0) {
        st = h5fail(err, path, "/", "cannot create: expected a writable "
                    "path, found an error");
        goto fail;
    }
    if ((st = write_header(w, err)))
        goto fail;
    qmla_h5_quiet_end(q);
    *out = w;
    return QMLA_OK;
fail:
    if (w->file >= 0)
        H5Fclose(w->file);
    if (w->ftype >= 0)
        H5Tclose(w->ftype);
    free(w->path);
    free(w);
    qmla_h5_quiet_end(q);
    return st;
}

int qmla_capture_writer_layer(qmla_capture_writer *w, const qmla_layer *l,
                              qmla_error *err)
{
    if (!w || !l)
        return qmla_error_set(err, QMLA_EINVAL, "qmla_capture_writer_layer: "
                              "expected a writer and a layer, found NULL");
    if (l->layer < 0)
        return qmla_error_set(err, QMLA_EINVAL, "%s: layer: expected an index "
                              ">= 0, found %d", w->path, l->layer);
    if (!l->w_uk || !l->w_uv || !l->w_o || !l->kv_norm)
        return qmla_error_set(err, QMLA_EINVAL, "%s: layer %d: expected w_uk, "
                              "w_uv, w_o and kv_norm, found a NULL tensor",
                              w->path, l->layer);
    h5_quiet q = qmla_h5_quiet_begin();
    char gpath[64];
    snprintf(gpath, sizeof gpath, "/layers/%d", l->layer);
    int st = QMLA_OK;
    htri_t ex = H5Lexists(w->file, gpath, H5P_DEFAULT);
    if (ex != 0) {
        st = ex > 0 ? qmla_error_set(err, QMLA_EINVAL, "%s: %s: expected a "
                                     "new layer, found it already written",
                                     w->path, gpath)
                    : h5fail(err, w->path, gpath, "cannot query the layer");
        qmla_h5_quiet_end(q);
        return st;
    }
    hid_t g = H5Gcreate2(w->file, gpath, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0 || put_int(g, "layer", l->layer) < 0) {
        st = h5fail(err, w->path, gpath, "cannot create the layer group");
        goto out;
    }
    const qmla_capture_config *c = &w->cfg;
    const hsize_t H = (hsize_t)c->H, D = (hsize_t)c->D, dc = (hsize_t)c->d_c;
    const hsize_t uk[3] = {H, (hsize_t)c->d_n, dc};
    const hsize_t uv[3] = {H, (hsize_t)c->d_v, dc};
    const hsize_t o[2] = {D, H * (hsize_t)c->d_v};
    if ((st = put_f32(w, g, gpath, "w_uk", 3, uk, l->w_uk, err)) ||
        (st = put_f32(w, g, gpath, "w_uv", 3, uv, l->w_uv, err)) ||
        (st = put_f32(w, g, gpath, "w_o", 2, o, l->w_o, err)) ||
        (st = put_f32(w, g, gpath, "kv_norm_weight", 1, &dc, l->kv_norm, err)))
        goto out;
    hid_t cg = H5Gcreate2(g, "cells", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (cg < 0)
        st = h5fail(err, w->path, gpath, "cannot create the cells group");
    else
        H5Gclose(cg);
out:
    if (g >= 0)
        H5Gclose(g);
    qmla_h5_quiet_end(q);
    return st;
}

int qmla_capture_writer_cell(qmla_capture_writer *w, int layer,
                             const qmla_cell *cell, qmla_error *err)
{
    if (!w || !cell)
        return qmla_error_set(err, QMLA_EINVAL, "qmla_capture_writer_cell: "
                              "expected a writer and a cell, found NULL");
    size_t nl = strnlen(cell->name, sizeof cell->name);
    if (nl == 0 || nl == sizeof cell->name || strchr(cell->name, '/') ||
        strcmp(cell->name, ".") == 0)
        return qmla_error_set(err, QMLA_EINVAL, "%s: layer %d: cell name: "
                              "expected 1 to %zu bytes without '/', found "
                              "\"%.127s\"", w->path, layer,
                              sizeof cell->name - 1, cell->name);
    if (!memchr(cell->dataset, '\0', sizeof cell->dataset))
        return qmla_error_set(err, QMLA_EINVAL, "%s: cell %s: dataset: "
                              "expected a NUL-terminated string, found none",
                              w->path, cell->name);
    if (cell->N < 1 || cell->T < 1)
        return qmla_error_set(err, QMLA_EINVAL, "%s: cell %s: expected N >= 1 "
                              "and T >= 1, found N = %zu, T = %zu", w->path,
                              cell->name, cell->N, cell->T);
    if (!cell->c_kv || !cell->k_rope || !cell->q_nope || !cell->q_rope ||
        !cell->attn_out || !cell->positions)
        return qmla_error_set(err, QMLA_EINVAL, "%s: cell %s: expected c_kv, "
                              "k_rope, q_nope, q_rope, attn_out and positions, "
                              "found a NULL tensor", w->path, cell->name);
    if (!cell->k_rope_pre != !cell->q_rope_pre ||
        !cell->rope_cos != !cell->rope_sin ||
        (cell->rope_cos && !cell->k_rope_pre))
        return qmla_error_set(err, QMLA_EINVAL, "%s: cell %s: expected none, "
                              "the pre pair (k_rope_pre, q_rope_pre) or all "
                              "four of k_rope_pre, q_rope_pre, rope_cos, "
                              "rope_sin, found another combination", w->path,
                              cell->name);
    h5_quiet q = qmla_h5_quiet_begin();
    char lpath[64], gpath[QMLA_ERRMSG_MAX];
    snprintf(lpath, sizeof lpath, "/layers/%d/cells", layer);
    snprintf(gpath, sizeof gpath, "%s/%s", lpath, cell->name);
    int st = QMLA_OK;
    hid_t cells = H5I_INVALID_HID, g = H5I_INVALID_HID;
    char lgrp[64];
    snprintf(lgrp, sizeof lgrp, "/layers/%d", layer);
    if (layer < 0 || H5Lexists(w->file, lgrp, H5P_DEFAULT) <= 0 ||
        H5Lexists(w->file, lpath, H5P_DEFAULT) <= 0) {
        st = qmla_error_set(err, QMLA_EINVAL, "%s: %s: expected a layer "
                            "written by qmla_capture_writer_layer, found none",
                            w->path, lgrp);
        goto out;
    }
    cells = H5Gopen2(w->file, lpath, H5P_DEFAULT);
    if (cells < 0) {
        st = h5fail(err, w->path, lpath, "cannot open the cells group");
        goto out;
    }
    htri_t ex = H5Lexists(cells, cell->name, H5P_DEFAULT);
    if (ex != 0) {
        st = ex > 0 ? qmla_error_set(err, QMLA_EINVAL, "%s: %s: expected a "
                                     "new cell, found it already written",
                                     w->path, gpath)
                    : h5fail(err, w->path, gpath, "cannot query the cell");
        goto out;
    }
    g = H5Gcreate2(cells, cell->name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int sok = g >= 0 && put_string(g, "dataset", cell->dataset) == 0;
    if (sok) {
        if (cell->seed >= INT_MIN && cell->seed <= INT_MAX) {
            sok = put_int(g, "seed", (int)cell->seed) == 0;
        } else {
            long long s = cell->seed;
            sok = put_num(g, "seed", H5T_STD_I64LE, H5T_NATIVE_LLONG, &s) == 0;
        }
    }
    if (!sok) {
        st = h5fail(err, w->path, gpath, "cannot create the cell group");
        goto out;
    }
    const qmla_capture_config *c = &w->cfg;
    const hsize_t N = cell->N, T = cell->T, H = (hsize_t)c->H;
    const hsize_t D = (hsize_t)c->D, dr = (hsize_t)c->d_r;
    const hsize_t ckv[3] = {N, T, (hsize_t)c->d_c}, kr[3] = {N, T, dr};
    const hsize_t qn[4] = {N, H, T, (hsize_t)c->d_n}, qr[4] = {N, H, T, dr};
    const hsize_t ao[3] = {N, T, D}, pos[2] = {N, T}, cs[3] = {N, T, dr / 2};
    if ((st = put_f32(w, g, gpath, "c_kv", 3, ckv, cell->c_kv, err)) ||
        (st = put_f32(w, g, gpath, "k_rope", 3, kr, cell->k_rope, err)) ||
        (st = put_f32(w, g, gpath, "q_nope", 4, qn, cell->q_nope, err)) ||
        (st = put_f32(w, g, gpath, "q_rope", 4, qr, cell->q_rope, err)) ||
        (st = put_f32(w, g, gpath, "attn_out", 3, ao, cell->attn_out, err)) ||
        (st = put_dataset(w, g, gpath, "positions", 2, pos, H5T_STD_I64LE,
                          H5T_NATIVE_INT64, cell->positions, err)))
        goto out;
    if (cell->k_rope_pre &&
        ((st = put_f32(w, g, gpath, "k_rope_pre", 3, kr, cell->k_rope_pre,
                       err)) ||
         (st = put_f32(w, g, gpath, "q_rope_pre", 4, qr, cell->q_rope_pre,
                       err))))
        goto out;
    if (cell->rope_cos &&
        ((st = put_f32(w, g, gpath, "rope_cos", 3, cs, cell->rope_cos, err)) ||
         (st = put_f32(w, g, gpath, "rope_sin", 3, cs, cell->rope_sin, err))))
        goto out;
out:
    if (g >= 0)
        H5Gclose(g);
    if (cells >= 0)
        H5Gclose(cells);
    qmla_h5_quiet_end(q);
    return st;
}

int qmla_capture_writer_close(qmla_capture_writer *w, qmla_error *err)
{
    if (!w)
        return QMLA_OK;
    h5_quiet q = qmla_h5_quiet_begin();
    int st = QMLA_OK;
    if (w->file >= 0 && H5Fflush(w->file, H5F_SCOPE_GLOBAL) < 0)
        st = h5fail(err, w->path, "/", "cannot flush");
    if (w->ftype >= 0)
        H5Tclose(w->ftype);
    if (w->file >= 0 && H5Fclose(w->file) < 0 && !st)
        st = h5fail(err, w->path, "/", "cannot close");
    qmla_h5_quiet_end(q);
    free(w->path);
    free(w);
    return st;
}
