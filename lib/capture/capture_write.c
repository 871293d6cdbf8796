/* capture_write.c — writer of qmla-capture v1 files (docs/capture-format.md),
 * used by `qmla synth`, the tests and the benchmarks.
 *
 * Atomic: the whole file is built in memory (HDF5's core driver, no backing
 * store, so HDF5 itself never writes to disk and has no failing close left
 * for its exit handler) and qmla_capture_writer_close writes the image with
 * qmla_h5_save_image: PATH.tmp.PID with checked write()/fsync(), renamed over
 * PATH. On any failure PATH is untouched and no temporary file is left;
 * nothing reaches the disk before close. Every HDF5 status (closes
 * included) is checked; a failure after the in-memory file was changed
 * marks the writer broken, and close then writes nothing.
 *
 * Which datasets a layer and a cell hold, their shapes and which are
 * optional come from the capture table (capture_table.c), shared with the
 * reader. Float tensors are stored as float32 (H5T_IEEE_F32LE) or, with
 * float16 != 0, as IEEE binary16 built the way h5py builds it
 * (H5T_IEEE_F32LE copied, fields 15/10/5/0/10, size 2, bias 15), so numpy
 * sees `float16`. The writer rounds float32 to binary16 with the project's
 * one converter, qmla_core_f32_to_f16 (quant_core.h: integer round to
 * nearest even, carries into the exponent kept; HDF5 1.10.8's own
 * conversion drops those carries and rounds ties away from zero). A finite
 * value that float16 cannot hold (|x| >= 65520) is refused with QMLA_ERANGE
 * before anything of its layer or cell is written, rather than stored as
 * infinity. positions are int64; attributes are fixed-length strings, int32
 * (seed: int64 when it does not fit) and double, written with h5util's
 * shared attribute writers. gzip > 0 chunks each dataset (chunks of at most
 * ~1 MiB, leading dimensions split first) and applies shuffle + deflate at
 * that level.
 *
 * The writer stores values as given (non-finite values included: tests build
 * bad files with it); it checks shapes, names and the optional-tensor rules
 * so that it never writes a structure the reader rejects.
 */
#include "qmla/capture.h"
#include "qmla/quant_core.h"
#include "capture/capture_table.h"
#include "io/h5util.h"

#include <hdf5.h>

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct qmla_capture_writer {
    hid_t file;        /* in-memory file until close */
    hid_t ftype;       /* float storage type (owned) */
    int float16;
    int gzip;
    int broken;        /* an HDF5 call failed after the file changed */
    char *path;
    qmla_capture_config cfg;
};

/* "<path>: <obj>: <detail>: <innermost HDF5 message>"; marks w broken (the
 * in-memory file may hold half an object). */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static int h5fail(qmla_capture_writer *w, qmla_error *err, const char *obj,
                  const char *fmt, ...)
{
    char detail[QMLA_ERRMSG_MAX], h5msg[256];
    qmla_h5_error_text(h5msg, sizeof h5msg);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    w->broken = 1;
    return qmla_error_set(err, QMLA_EIO, "%s: %s: %s (%s)", w->path, obj,
                          detail, h5msg);
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

static int put_int(hid_t obj, const char *name, int v)
{
    return qmla_h5_attr_num(obj, name, H5T_STD_I32LE, H5T_NATIVE_INT, &v);
}

static int put_double(hid_t obj, const char *name, double v)
{
    return qmla_h5_attr_num(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}

/* ---- datasets ------------------------------------------------------------ */

/* Float16 storage: every finite value must round to a finite binary16
 * (quant_core's overflow flag: |x| >= 65520). */
static int check_f16_range(const qmla_capture_writer *w, const char *gpath,
                           const char *name, const float *x, size_t n,
                           qmla_error *err)
{
    for (size_t i = 0; i < n; i++) {
        int ovf = 0;
        (void)qmla_core_f32_to_f16(x[i], &ovf);
        if (ovf)
            return qmla_error_set(err, QMLA_ERANGE, "%s: %s/%s: float16 "
                                  "storage: expected |x| < 65520, found %g at "
                                  "element %zu", w->path, gpath, name,
                                  (double)x[i], i);
    }
    return QMLA_OK;
}

/* The element count of a table dataset for cell extents N, T. */
static size_t table_elems(const qmla_capture_writer *w, const qmla_cap_ds *d,
                          hsize_t N, hsize_t T, qmla_h5_dspec *s)
{
    qmla_cap_spec(d, &w->cfg, N, T, s);
    size_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= (size_t)s->dims[i];
    return n;
}

/* Before anything of a layer or cell is written: with float16 storage,
 * refuse values float16 cannot hold. */
static int check_range(const qmla_capture_writer *w, const char *gpath,
                       const qmla_cap_ds *tab, size_t ntab, const void *s,
                       hsize_t N, hsize_t T, qmla_error *err)
{
    for (size_t i = 0; w->float16 && i < ntab; i++) {
        const qmla_cap_ds *d = &tab[i];
        const void *x = d->field >= 0 ? qmla_cap_get(s, d) : NULL;
        if (!x || d->integer)
            continue;
        qmla_h5_dspec sp;
        int st = check_f16_range(w, gpath, d->name, x,
                                 table_elems(w, d, N, T, &sp), err);
        if (st)
            return st;
    }
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
        half = malloc(n * sizeof *half);
        if (!half)
            return qmla_error_set(err, QMLA_ENOMEM, "%s: %s: expected memory "
                                  "for %zu float16 values, found none",
                                  w->path, obj, n);
        const float *x = data;
        int ovf = 0;
        for (size_t i = 0; i < n; i++)
            half[i] = qmla_core_f32_to_f16(x[i], &ovf);
        if (ovf) { /* check_range ran first: cannot happen */
            free(half);
            return qmla_error_set(err, QMLA_ERANGE, "%s: %s: float16 storage: "
                                  "expected |x| < 65520, found a larger value",
                                  w->path, obj);
        }
        data = half;
        mt = ft; /* the bits are already binary16: no HDF5 conversion */
    }
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    int ok = dcpl >= 0;
    if (ok && w->gzip > 0) {
        hsize_t chunk[H5S_MAX_RANK];
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
    ok = ok && qmla_h5_dset_nd(g, name, ft, mt, rank, dims, dcpl, data) == 0;
    if (dcpl >= 0 && H5Pclose(dcpl) < 0)
        ok = 0;
    free(half);
    return ok ? QMLA_OK : h5fail(w, err, obj, "cannot write dataset");
}

/* Write the datasets of `tab` that s (a qmla_layer or qmla_cell) holds:
 * every one with a field whose pointer is non-NULL, shapes from the table. */
static int put_table(qmla_capture_writer *w, hid_t g, const char *gpath,
                     const qmla_cap_ds *tab, size_t ntab, const void *s,
                     hsize_t N, hsize_t T, qmla_error *err)
{
    for (size_t i = 0; i < ntab; i++) {
        const qmla_cap_ds *d = &tab[i];
        const void *x = d->field >= 0 ? qmla_cap_get(s, d) : NULL;
        if (!x)
            continue;
        qmla_h5_dspec sp;
        qmla_cap_spec(d, &w->cfg, N, T, &sp);
        int st = put_dataset(w, g, gpath, d->name, sp.rank, sp.dims,
                             d->integer ? H5T_STD_I64LE : w->ftype,
                             d->integer ? H5T_NATIVE_INT64 : H5T_NATIVE_FLOAT,
                             x, err);
        if (st)
            return st;
    }
    return QMLA_OK;
}

/* Close a group the writer created; a failure marks the writer broken. */
static int close_group(qmla_capture_writer *w, hid_t g, const char *gpath,
                       int st, qmla_error *err)
{
    if (g >= 0 && H5Gclose(g) < 0 && st == QMLA_OK)
        st = h5fail(w, err, gpath, "cannot close the group");
    return st;
}

/* QMLA_OK when link `name` of loc (object path gpath) does not exist yet; a
 * layer or cell is written once. */
static int must_be_new(qmla_capture_writer *w, hid_t loc, const char *name,
                       const char *gpath, const char *what, qmla_error *err)
{
    htri_t ex = H5Lexists(loc, name, H5P_DEFAULT);
    if (ex == 0)
        return QMLA_OK;
    if (ex > 0)
        return qmla_error_set(err, QMLA_EINVAL, "%s: %s: expected a new %s, "
                              "found it already written", w->path, gpath,
                              what);
    return h5fail(w, err, gpath, "cannot query the %s", what);
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
    int ok = root >= 0 &&
             qmla_h5_attr_fixed_str(root, "format", QMLA_CAPTURE_FORMAT) == 0 &&
             put_int(root, "format_version", QMLA_CAPTURE_VERSION) == 0 &&
             qmla_h5_attr_fixed_str(root, "model", c->model) == 0 &&
             qmla_h5_attr_fixed_str(root, "source", c->source) == 0 &&
             (!c->has_check_tolerance ||
              put_double(root, "check_tolerance", c->check_tolerance) == 0) &&
             (!c->synthetic || put_int(root, "synthetic", 1) == 0);
    if (root >= 0 && H5Gclose(root) < 0)
        ok = 0;
    if (!ok)
        return h5fail(w, err, "/", "cannot write the root attributes");
    hid_t g = H5Gcreate2(w->file, "/config", H5P_DEFAULT, H5P_DEFAULT,
                         H5P_DEFAULT);
    ok = g >= 0 && put_int(g, "n_layers", c->n_layers) == 0 &&
         put_int(g, "n_heads", c->H) == 0 && put_int(g, "d_model", c->D) == 0 &&
         put_int(g, "kv_lora_rank", c->d_c) == 0 &&
         put_int(g, "qk_nope_head_dim", c->d_n) == 0 &&
         put_int(g, "qk_rope_head_dim", c->d_r) == 0 &&
         put_int(g, "v_head_dim", c->d_v) == 0 &&
         put_double(g, "softmax_scale", c->softmax_scale) == 0 &&
         qmla_h5_attr_fixed_str(g, "rope_pairing",
                                c->rope_pairing == QMLA_ROPE_HALF
                                    ? "half" : "interleaved") == 0 &&
         put_double(g, "rms_norm_eps", c->rms_norm_eps) == 0;
    if (g >= 0 && H5Gclose(g) < 0)
        ok = 0;
    if (!ok)
        return h5fail(w, err, "/config", "cannot write the attributes");
    g = H5Gcreate2(w->file, "/layers", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0)
        return h5fail(w, err, "/layers", "cannot create the group");
    return close_group(w, g, "/layers", QMLA_OK, err);
}

/* The destination must be creatable: a directory we can write to, and the
 * path itself new or a regular file (the rename at close replaces it; a
 * device, FIFO or directory is never replaced). */
static int check_dest(const char *path, qmla_error *err)
{
    if (!path[0])
        return qmla_error_set(err, QMLA_EINVAL, "qmla_capture_writer_open: "
                              "expected a path, found an empty string");
    /* room for the temporary's ".tmp.PID" in qmla_h5_save_image's buffer */
    if (strlen(path) > 4000)
        return qmla_error_set(err, QMLA_EIO, "%s: cannot create: expected a "
                              "path of at most 4000 bytes, found %zu", path,
                              strlen(path));
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return qmla_error_set(err, QMLA_EIO, "%s: cannot create: expected a "
                              "regular file or a new path, found %s", path,
                              S_ISDIR(sb.st_mode) ? "a directory"
                                                  : "a special file");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    const char *d = dirname(dir);
    if (access(d, W_OK | X_OK) != 0)
        return qmla_error_set(err, QMLA_EIO, "%s: cannot create: expected a "
                              "writable directory %s, found: %s", path, d,
                              strerror(errno));
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
    if (st || (st = check_dest(path, err)))
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
        st = h5fail(w, err, "/", "cannot build the float storage type");
        goto fail;
    }
    w->file = qmla_h5_create_mem();
    if (w->file < 0) {
        st = h5fail(w, err, "/", "cannot create the in-memory file");
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
    for (size_t i = 0; i < qmla_cap_n_layer_ds; i++)
        if (!qmla_cap_get(l, &qmla_cap_layer_ds[i]))
            return qmla_error_set(err, QMLA_EINVAL, "%s: layer %d: expected "
                                  "w_uk, w_uv, w_o and kv_norm, found a NULL "
                                  "tensor", w->path, l->layer);
    h5_quiet q = qmla_h5_quiet_begin();
    char gpath[64];
    snprintf(gpath, sizeof gpath, "/layers/%d", l->layer);
    int st = QMLA_OK;
    hid_t g = H5I_INVALID_HID;
    if ((st = must_be_new(w, w->file, gpath, gpath, "layer", err)))
        goto out;
    if ((st = check_range(w, gpath, qmla_cap_layer_ds, qmla_cap_n_layer_ds, l,
                          0, 0, err)))
        goto out;
    g = H5Gcreate2(w->file, gpath, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0 || put_int(g, "layer", l->layer) < 0) {
        st = h5fail(w, err, gpath, "cannot create the layer group");
        goto out;
    }
    if ((st = put_table(w, g, gpath, qmla_cap_layer_ds, qmla_cap_n_layer_ds,
                        l, 0, 0, err)))
        goto out;
    hid_t cg = H5Gcreate2(g, "cells", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (cg < 0)
        st = h5fail(w, err, gpath, "cannot create the cells group");
    else
        st = close_group(w, cg, gpath, st, err);
out:
    st = close_group(w, g, gpath, st, err);
    qmla_h5_quiet_end(q);
    return st;
}

/* The optional datasets a cell holds: none, the pre pair, or the pre pair
 * and the cos/sin pair (the reader's rules). */
static int optional_ok(const qmla_cell *cell)
{
    int n[QMLA_CAP_EXTRA + 1] = {0}, of[QMLA_CAP_EXTRA + 1] = {0};
    for (size_t i = 0; i < qmla_cap_n_cell_ds; i++) {
        const qmla_cap_ds *d = &qmla_cap_cell_ds[i];
        if (d->field < 0)
            continue;
        of[d->need]++;
        n[d->need] += qmla_cap_get(cell, d) != NULL;
    }
    int pre = n[QMLA_CAP_PRE], cs = n[QMLA_CAP_COSSIN];
    return n[QMLA_CAP_REQUIRED] == of[QMLA_CAP_REQUIRED] &&
           (pre == 0 || pre == of[QMLA_CAP_PRE]) &&
           (cs == 0 || cs == of[QMLA_CAP_COSSIN]) && (cs == 0 || pre > 0);
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
    for (size_t i = 0; i < qmla_cap_n_cell_ds; i++) {
        const qmla_cap_ds *d = &qmla_cap_cell_ds[i];
        if (d->need == QMLA_CAP_REQUIRED && d->field >= 0 &&
            !qmla_cap_get(cell, d))
            return qmla_error_set(err, QMLA_EINVAL, "%s: cell %s: expected "
                                  "c_kv, k_rope, q_nope, q_rope, attn_out and "
                                  "positions, found a NULL tensor", w->path,
                                  cell->name);
    }
    if (!optional_ok(cell))
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
        st = h5fail(w, err, lpath, "cannot open the cells group");
        goto out;
    }
    if ((st = must_be_new(w, cells, cell->name, gpath, "cell", err)))
        goto out;
    const hsize_t N = cell->N, T = cell->T;
    if ((st = check_range(w, gpath, qmla_cap_cell_ds, qmla_cap_n_cell_ds, cell,
                          N, T, err)))
        goto out;
    g = H5Gcreate2(cells, cell->name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int sok = g >= 0 && qmla_h5_attr_fixed_str(g, "dataset", cell->dataset) == 0;
    if (sok) {
        if (cell->seed >= INT_MIN && cell->seed <= INT_MAX) {
            sok = put_int(g, "seed", (int)cell->seed) == 0;
        } else {
            long long s = cell->seed;
            sok = qmla_h5_attr_num(g, "seed", H5T_STD_I64LE, H5T_NATIVE_LLONG,
                                   &s) == 0;
        }
    }
    if (!sok) {
        st = h5fail(w, err, gpath, "cannot create the cell group");
        goto out;
    }
    st = put_table(w, g, gpath, qmla_cap_cell_ds, qmla_cap_n_cell_ds, cell, N,
                   T, err);
out:
    st = close_group(w, g, gpath, st, err);
    st = close_group(w, cells, lpath, st, err);
    qmla_h5_quiet_end(q);
    return st;
}

/* Close w's HDF5 objects other than the file; 0, or -1 when a close failed. */
static int release(qmla_capture_writer *w)
{
    return w->ftype >= 0 && H5Tclose(w->ftype) < 0 ? -1 : 0;
}

int qmla_capture_writer_close(qmla_capture_writer *w, qmla_error *err)
{
    if (!w)
        return QMLA_OK;
    h5_quiet q = qmla_h5_quiet_begin();
    int st = QMLA_OK;
    if (release(w) != 0)
        st = h5fail(w, err, "/", "cannot close the float storage type");
    if (w->broken || st) {
        /* half an object may be in memory: write nothing */
        H5Fclose(w->file);
        if (!st)
            st = qmla_error_set(err, QMLA_EIO, "%s: not written: an earlier "
                                "write to the capture failed", w->path);
    } else {
        st = qmla_h5_save_image(w->file, w->path, err);
    }
    qmla_h5_quiet_end(q);
    free(w->path);
    free(w);
    return st;
}

void qmla_capture_writer_abort(qmla_capture_writer *w)
{
    if (!w)
        return;
    h5_quiet q = qmla_h5_quiet_begin();
    release(w);
    H5Fclose(w->file);
    qmla_h5_quiet_end(q);
    free(w->path);
    free(w);
}
