/* results.c — qmla-results v1 writer and reader (include/qmla/results.h,
 * docs/results-format.md). */
#include "qmla/results.h"
#include "qmla_config.h"
#include "h5util.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp_resp(const void *pa, const void *pb)
{
    const qmla_response *a = pa, *b = pb;
    if (a->layer != b->layer)
        return a->layer < b->layer ? -1 : 1;
    int c = strcmp(a->cell, b->cell);
    if (c)
        return c;
    if (a->seq != b->seq)
        return a->seq < b->seq ? -1 : 1;
    return (a->path > b->path) - (a->path < b->path);
}

void qmla_responses_sort(qmla_response *r, size_t n)
{
    if (n > 1)
        qsort(r, n, sizeof *r, cmp_resp);
}

/* Shortest decimal that reads back as exactly x (readable and exact). */
static void shortest_double(double x, char *buf, size_t len)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            return;
    }
}

void qmla_results_key(const qmla_results_meta *m, char *key, size_t len)
{
    char nu[40];
    shortest_double(m->nmse, nu, sizeof nu);
    snprintf(key, len, "sha256=%s bits=%d group=%d meta=%s nmse=%s",
             m->capture_sha256, m->bits, m->group, m->meta, nu);
}

/* ---- small HDF5 helpers (status-returning, silent) ----------------------- */

/* Scalar variable-length UTF-8 string: h5py reads it as str. */
static int attr_str(hid_t obj, const char *name, const char *value)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t e = a < 0 ? -1 : H5Awrite(a, t, &value);
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
    return e < 0 ? -1 : 0;
}

static int attr_num(hid_t obj, const char *name, hid_t type, const void *v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t e = a < 0 ? -1 : H5Awrite(a, type, v);
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(sp);
    return e < 0 ? -1 : 0;
}

static int attr_int(hid_t obj, const char *name, int v)
{
    return attr_num(obj, name, H5T_NATIVE_INT, &v);
}

static int attr_dbl(hid_t obj, const char *name, double v)
{
    return attr_num(obj, name, H5T_NATIVE_DOUBLE, &v);
}

static int dset_1d(hid_t g, const char *name, hid_t ftype, hid_t mtype,
                   size_t n, const void *data)
{
    hsize_t dims[1] = {n};
    hid_t sp = H5Screate_simple(1, dims, NULL);
    hid_t d = H5Dcreate2(g, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT,
                         H5P_DEFAULT);
    herr_t e = d < 0 ? -1 : (n ? H5Dwrite(d, mtype, H5S_ALL, H5S_ALL,
                                          H5P_DEFAULT, data)
                               : 0);
    if (d >= 0)
        H5Dclose(d);
    H5Sclose(sp);
    return e < 0 ? -1 : 0;
}

static int dset_strs(hid_t g, const char *name, size_t n, const char **s)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    int rc = dset_1d(g, name, t, t, n, s);
    H5Tclose(t);
    return rc;
}

#define TRY(expr, what)                                                       \
    do {                                                                      \
        if ((expr) < 0) {                                                     \
            st = qmla_error_set(err, QMLA_EIO, "%s: cannot write %s", tmp,    \
                                what);                                        \
            goto done;                                                        \
        }                                                                     \
    } while (0)

int qmla_results_write(const char *path, const qmla_results_meta *m,
                       const qmla_response *r_in, size_t n,
                       const qmla_summary *s, qmla_error *err)
{
    int st = QMLA_OK;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    qmla_response *r = NULL;
    int *ival = NULL;
    double *dval = NULL;
    uint8_t *u8 = NULL;
    const char **sval = NULL;
    hid_t f = -1, g = -1;
    h5_quiet quiet = qmla_h5_quiet_begin();

    r = malloc((n ? n : 1) * sizeof *r);
    ival = malloc((n ? n : 1) * sizeof *ival);
    dval = malloc((n ? n : 1) * sizeof *dval);
    u8 = malloc(n ? n : 1);
    sval = malloc((n ? n : 1) * sizeof *sval);
    if (!r || !ival || !dval || !u8 || !sval) {
        st = qmla_error_set(err, QMLA_ENOMEM, "results: out of memory");
        goto done;
    }
    memcpy(r, r_in, n * sizeof *r);
    qmla_responses_sort(r, n);

    f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot create results file",
                            tmp);
        goto done;
    }
    TRY(attr_str(f, "format", QMLA_RESULTS_FORMAT), "attribute format");
    TRY(attr_int(f, "format_version", QMLA_RESULTS_VERSION),
        "attribute format_version");
    TRY(attr_str(f, "capture_file", m->capture_file), "attribute capture_file");
    TRY(attr_str(f, "capture_path", m->capture_path), "attribute capture_path");
    TRY(attr_str(f, "capture_sha256", m->capture_sha256),
        "attribute capture_sha256");
    TRY(attr_str(f, "model", m->model), "attribute model");
    TRY(attr_str(f, "tool", "qmla sweep"), "attribute tool");
    TRY(attr_str(f, "tool_version", m->tool_version), "attribute tool_version");
    TRY(attr_int(f, "bits", m->bits), "attribute bits");
    TRY(attr_int(f, "group", m->group), "attribute group");
    TRY(attr_str(f, "meta", m->meta), "attribute meta");
    TRY(attr_dbl(f, "nmse_target", m->nmse), "attribute nmse_target");
    TRY(attr_str(f, "layers", m->layers), "attribute layers");
    TRY(attr_str(f, "cells", m->cells), "attribute cells");
    TRY(attr_str(f, "quantizer",
                 "per-token asymmetric affine, groups of `group` channels, "
                 "round-half-even, docs/quantizer.md"),
        "attribute quantizer");

    g = H5Gcreate2(f, "responses", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    TRY(g, "group /responses");
    for (size_t k = 0; k < n; k++)
        ival[k] = r[k].layer;
    TRY(dset_1d(g, "layer", H5T_STD_I32LE, H5T_NATIVE_INT, n, ival), "layer");
    for (size_t k = 0; k < n; k++)
        ival[k] = r[k].seq;
    TRY(dset_1d(g, "seq", H5T_STD_I32LE, H5T_NATIVE_INT, n, ival), "seq");
    for (size_t k = 0; k < n; k++)
        sval[k] = r[k].cell;
    TRY(dset_strs(g, "cell", n, sval), "cell");
    for (size_t k = 0; k < n; k++)
        sval[k] = qmla_path_name(r[k].path);
    TRY(dset_strs(g, "path", n, sval), "path");
#define DCOL(field)                                                           \
    do {                                                                      \
        for (size_t k = 0; k < n; k++)                                        \
            dval[k] = r[k].field;                                             \
        TRY(dset_1d(g, #field, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, dval),   \
            #field);                                                          \
    } while (0)
    DCOL(nmse_cache);
    DCOL(nmse_out);
    DCOL(response);
    DCOL(nmse_out_matching);
    DCOL(nmse_out_aggregation);
    DCOL(nmse_out_interaction);
    DCOL(nmse_qdq);
#undef DCOL
    for (size_t k = 0; k < n; k++)
        u8[k] = (uint8_t)(r[k].degenerate != 0);
    TRY(dset_1d(g, "degenerate", H5T_STD_U8LE, H5T_NATIVE_UINT8, n, u8),
        "degenerate");
    H5Gclose(g);

    g = H5Gcreate2(f, "summary", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    TRY(g, "group /summary");
    TRY(dset_1d(g, "layer", H5T_STD_I32LE, H5T_NATIVE_INT, s->n_layers,
                s->layer),
        "summary/layer");
    TRY(dset_1d(g, "response_content", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
                s->n_layers, s->response_content),
        "summary/response_content");
    TRY(dset_1d(g, "response_rope", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
                s->n_layers, s->response_rope),
        "summary/response_rope");
    TRY(dset_1d(g, "ratio", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, s->n_layers,
                s->ratio),
        "summary/ratio");
    TRY(attr_dbl(g, "model_response_content", s->model_response_content),
        "model_response_content");
    TRY(attr_dbl(g, "model_response_rope", s->model_response_rope),
        "model_response_rope");
    TRY(attr_dbl(g, "model_ratio", s->model_ratio), "model_ratio");
    TRY(attr_int(g, "n_degenerate", (int)s->n_degenerate), "n_degenerate");
    H5Gclose(g);
    g = -1;
    if (H5Fclose(f) < 0) {
        f = -1;
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot close results file", tmp);
        goto done;
    }
    f = -1;
    /* durable before visible */
    int fd = open(tmp, O_RDONLY);
    if (fd < 0 || fsync(fd) != 0) {
        if (fd >= 0)
            close(fd);
        st = qmla_error_set(err, QMLA_EIO, "%s: fsync failed: %s", tmp,
                            strerror(errno));
        goto done;
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        st = qmla_error_set(err, QMLA_EIO, "cannot rename %s to %s: %s", tmp,
                            path, strerror(errno));
        goto done;
    }
done:
    if (g >= 0)
        H5Gclose(g);
    if (f >= 0)
        H5Fclose(f);
    if (st != QMLA_OK)
        unlink(tmp);
    qmla_h5_quiet_end(quiet);
    free(r);
    free(ival);
    free(dval);
    free(u8);
    free(sval);
    return st;
}
#undef TRY

/* ---- reader --------------------------------------------------------------- */

static int read_attr_str(hid_t obj, const char *name, char *out, size_t len)
{
    out[0] = '\0';
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0)
        return -1;
    hid_t t = H5Aget_type(a);
    int rc = -1;
    if (H5Tget_class(t) == H5T_STRING) {
        if (H5Tis_variable_str(t) > 0) {
            char *s = NULL;
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, H5T_VARIABLE);
            H5Tset_cset(mt, H5Tget_cset(t));
            if (H5Aread(a, mt, &s) >= 0 && s) {
                snprintf(out, len, "%s", s);
                H5free_memory(s);
                rc = 0;
            }
            H5Tclose(mt);
        } else {
            size_t sz = H5Tget_size(t);
            char *buf = calloc(sz + 1, 1);
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, sz + 1);
            H5Tset_cset(mt, H5Tget_cset(t));
            if (buf && H5Aread(a, mt, buf) >= 0) {
                snprintf(out, len, "%s", buf);
                rc = 0;
            }
            H5Tclose(mt);
            free(buf);
        }
    }
    H5Tclose(t);
    H5Aclose(a);
    return rc;
}

static int read_attr_num(hid_t obj, const char *name, hid_t mtype, void *v)
{
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0)
        return -1;
    herr_t e = H5Aread(a, mtype, v);
    H5Aclose(a);
    return e < 0 ? -1 : 0;
}

/* Read a 1-D dataset of length n (checked) into buf with mtype. */
static int read_col(hid_t g, const char *name, hid_t mtype, size_t *n,
                    void *buf)
{
    hid_t d = H5Dopen2(g, name, H5P_DEFAULT);
    if (d < 0)
        return -1;
    hid_t sp = H5Dget_space(d);
    hsize_t dims[1] = {0};
    int rc = -1;
    if (H5Sget_simple_extent_ndims(sp) == 1) {
        H5Sget_simple_extent_dims(sp, dims, NULL);
        if (!buf) {
            *n = dims[0];
            rc = 0;
        } else if (dims[0] == *n) {
            rc = (*n == 0 || H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                                     buf) >= 0)
                     ? 0
                     : -1;
        }
    }
    H5Sclose(sp);
    H5Dclose(d);
    return rc;
}

int qmla_results_read(const char *path, qmla_results_meta *m,
                      qmla_response **out, size_t *nout, qmla_error *err)
{
    *out = NULL;
    *nout = 0;
    memset(m, 0, sizeof *m);
    h5_quiet quiet = qmla_h5_quiet_begin();
    int st = QMLA_OK;
    hid_t f = -1, g = -1;
    qmla_response *r = NULL;
    double *dv = NULL;
    int *iv = NULL;
    uint8_t *u8 = NULL;
    char **sv = NULL;
    size_t n = 0;
    char fmt[64];
    int ver = 0;

    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot open as HDF5", path);
        goto done;
    }
    if (read_attr_str(f, "format", fmt, sizeof fmt) || strcmp(fmt, QMLA_RESULTS_FORMAT)) {
        st = qmla_error_set(err, QMLA_EFORMAT,
                            "%s: attribute /format: expected \"%s\", found \"%s\"",
                            path, QMLA_RESULTS_FORMAT, fmt);
        goto done;
    }
    if (read_attr_num(f, "format_version", H5T_NATIVE_INT, &ver) ||
        ver != QMLA_RESULTS_VERSION) {
        st = qmla_error_set(err, QMLA_EFORMAT,
                            "%s: attribute /format_version: expected %d, found %d",
                            path, QMLA_RESULTS_VERSION, ver);
        goto done;
    }
    if (read_attr_str(f, "capture_file", m->capture_file, sizeof m->capture_file) ||
        read_attr_str(f, "capture_sha256", m->capture_sha256, sizeof m->capture_sha256) ||
        read_attr_str(f, "meta", m->meta, sizeof m->meta) ||
        read_attr_num(f, "bits", H5T_NATIVE_INT, &m->bits) ||
        read_attr_num(f, "group", H5T_NATIVE_INT, &m->group) ||
        read_attr_num(f, "nmse_target", H5T_NATIVE_DOUBLE, &m->nmse)) {
        st = qmla_error_set(err, QMLA_EFORMAT,
                            "%s: missing one of the root attributes capture_file, "
                            "capture_sha256, meta, bits, group, nmse_target",
                            path);
        goto done;
    }
    read_attr_str(f, "capture_path", m->capture_path, sizeof m->capture_path);
    read_attr_str(f, "model", m->model, sizeof m->model);
    read_attr_str(f, "layers", m->layers, sizeof m->layers);
    read_attr_str(f, "cells", m->cells, sizeof m->cells);
    read_attr_str(f, "tool_version", m->tool_version, sizeof m->tool_version);

    g = H5Gopen2(f, "responses", H5P_DEFAULT);
    if (g < 0 || read_col(g, "layer", H5T_NATIVE_INT, &n, NULL)) {
        st = qmla_error_set(err, QMLA_EFORMAT,
                            "%s: /responses/layer: missing or not 1-D", path);
        goto done;
    }
    r = calloc(n ? n : 1, sizeof *r);
    dv = malloc((n ? n : 1) * sizeof *dv);
    iv = malloc((n ? n : 1) * sizeof *iv);
    u8 = malloc(n ? n : 1);
    sv = calloc(n ? n : 1, sizeof *sv);
    if (!r || !dv || !iv || !u8 || !sv) {
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
        goto done;
    }
#define BAD(name)                                                             \
    do {                                                                      \
        st = qmla_error_set(err, QMLA_EFORMAT,                                \
                            "%s: /responses/%s: missing, or length differs "  \
                            "from /responses/layer (%zu)",                    \
                            path, name, n);                                   \
        goto done;                                                            \
    } while (0)
    if (read_col(g, "layer", H5T_NATIVE_INT, &n, iv))
        BAD("layer");
    for (size_t k = 0; k < n; k++)
        r[k].layer = iv[k];
    if (read_col(g, "seq", H5T_NATIVE_INT, &n, iv))
        BAD("seq");
    for (size_t k = 0; k < n; k++)
        r[k].seq = iv[k];
    if (read_col(g, "degenerate", H5T_NATIVE_UINT8, &n, u8))
        BAD("degenerate");
    for (size_t k = 0; k < n; k++)
        r[k].degenerate = u8[k];
    {
        hid_t vt = H5Tcopy(H5T_C_S1);
        H5Tset_size(vt, H5T_VARIABLE);
        H5Tset_cset(vt, H5T_CSET_UTF8);
        const char *names[2] = {"cell", "path"};
        for (int c = 0; c < 2; c++) {
            if (read_col(g, names[c], vt, &n, sv)) {
                H5Tclose(vt);
                BAD(names[c]);
            }
            for (size_t k = 0; k < n; k++) {
                const char *v = sv[k] ? sv[k] : "";
                if (c == 0)
                    snprintf(r[k].cell, sizeof r[k].cell, "%s", v);
                else
                    r[k].path = strcmp(v, "rope") == 0 ? QMLA_PATH_ROPE
                                                       : QMLA_PATH_CONTENT;
                if (sv[k])
                    H5free_memory(sv[k]);
                sv[k] = NULL;
            }
        }
        H5Tclose(vt);
    }
#define RCOL(field)                                                           \
    do {                                                                      \
        if (read_col(g, #field, H5T_NATIVE_DOUBLE, &n, dv))                   \
            BAD(#field);                                                      \
        for (size_t k = 0; k < n; k++)                                        \
            r[k].field = dv[k];                                               \
    } while (0)
    RCOL(nmse_cache);
    RCOL(nmse_out);
    RCOL(response);
    RCOL(nmse_out_matching);
    RCOL(nmse_out_aggregation);
    RCOL(nmse_out_interaction);
    RCOL(nmse_qdq);
#undef RCOL
#undef BAD
    *out = r;
    *nout = n;
    r = NULL;
done:
    if (g >= 0)
        H5Gclose(g);
    if (f >= 0)
        H5Fclose(f);
    qmla_h5_quiet_end(quiet);
    free(r);
    free(dv);
    free(iv);
    free(u8);
    free(sv);
    return st;
}
