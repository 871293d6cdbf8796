/* h5util.c — see h5util.h. */
#include "io/h5util.h"
#include "qmla/outpath.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

h5_quiet qmla_h5_quiet_begin(void)
{
    h5_quiet q = {NULL, NULL};
    H5Eget_auto2(H5E_DEFAULT, &q.fn, &q.data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    return q;
}

void qmla_h5_quiet_end(h5_quiet q) { H5Eset_auto2(H5E_DEFAULT, q.fn, q.data); }

typedef struct walk_ctx {
    char *buf;
    size_t cap;
    int got;
} walk_ctx;

static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *p)
{
    (void)n;
    walk_ctx *w = p;
    if (!w->got && e && e->desc && e->desc[0]) {
        snprintf(w->buf, w->cap, "%s", e->desc);
        w->got = 1;
    }
    return 0;
}

void qmla_h5_error_text(char *buf, size_t cap)
{
    walk_ctx w = {buf, cap, 0};
    buf[0] = '\0';
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_cb, &w);
    if (!buf[0])
        snprintf(buf, cap, "unspecified HDF5 error");
}

/* ---- writers ------------------------------------------------------------- */

static hid_t utf8_vlen(void)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t >= 0 && (H5Tset_size(t, H5T_VARIABLE) < 0 ||
                   H5Tset_cset(t, H5T_CSET_UTF8) < 0)) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

int qmla_h5_attr_num(hid_t obj, const char *name, hid_t ftype, hid_t mtype,
                     const void *value)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    if (sp < 0)
        return -1;
    hid_t a = H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, mtype, value) < 0 ? -1 : 0;
    if (a >= 0 && H5Aclose(a) < 0)
        rc = -1;
    if (H5Sclose(sp) < 0)
        rc = -1;
    return rc;
}

static int attr_write(hid_t obj, const char *name, hid_t type, const void *v)
{
    return qmla_h5_attr_num(obj, name, type, type, v);
}

int qmla_h5_attr_fixed_str(hid_t obj, const char *name, const char *value)
{
    const char *v = value ? value : "";
    size_t n = strlen(v);
    int utf8 = 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] >= 0x80)
            utf8 = 1;
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0)
        return -1;
    int rc = H5Tset_size(t, n + 1) < 0 ||
                     H5Tset_strpad(t, H5T_STR_NULLTERM) < 0 ||
                     H5Tset_cset(t, utf8 ? H5T_CSET_UTF8 : H5T_CSET_ASCII) < 0
                 ? -1
                 : attr_write(obj, name, t, v);
    if (H5Tclose(t) < 0)
        rc = -1;
    return rc;
}

int qmla_h5_attr_str(hid_t obj, const char *name, const char *value)
{
    hid_t t = utf8_vlen();
    if (t < 0)
        return -1;
    const char *v = value ? value : "";
    int rc = attr_write(obj, name, t, &v);
    if (H5Tclose(t) < 0)
        rc = -1;
    return rc;
}

int qmla_h5_attr_int(hid_t obj, const char *name, long long value)
{
    /* stored as int64 (h5py: numpy.int64) */
    int64_t v = (int64_t)value;
    return qmla_h5_attr_num(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}

int qmla_h5_attr_dbl(hid_t obj, const char *name, double value)
{
    return attr_write(obj, name, H5T_NATIVE_DOUBLE, &value);
}

/* Create dataset `name` (file type ftype, creation properties dcpl) and
 * write `data` (memory type mtype; skipped when it has no elements). The
 * open dataset, or -1 with every other handle closed. */
static hid_t dset_create_write(hid_t g, const char *name, hid_t ftype,
                               hid_t mtype, int rank, const hsize_t *dims,
                               hid_t dcpl, const void *data)
{
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    if (sp < 0)
        return -1;
    hsize_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    hid_t d = H5Dcreate2(g, name, ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int rc = d < 0 ? -1 : 0;
    if (!rc && n && H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
        rc = -1;
    if (H5Sclose(sp) < 0)
        rc = -1;
    if (rc && d >= 0) {
        H5Dclose(d);
        d = -1;
    }
    return d;
}

int qmla_h5_dset_nd(hid_t g, const char *name, hid_t ftype, hid_t mtype,
                    int rank, const hsize_t *dims, hid_t dcpl, const void *data)
{
    hid_t d = dset_create_write(g, name, ftype, mtype, rank, dims, dcpl, data);
    return d < 0 || H5Dclose(d) < 0 ? -1 : 0;
}

int qmla_h5_dset_1d(hid_t g, const char *name, hid_t ftype, hid_t mtype,
                    size_t n, const void *data, const char *description,
                    const char *units)
{
    hsize_t dims[1] = {n};
    hid_t d = dset_create_write(g, name, ftype, mtype, 1, dims, H5P_DEFAULT,
                                data);
    int rc = d < 0 ? -1 : 0;
    if (!rc && description && description[0] &&
        qmla_h5_attr_str(d, "description", description))
        rc = -1;
    if (!rc && units && units[0] && qmla_h5_attr_str(d, "units", units))
        rc = -1;
    if (d >= 0 && H5Dclose(d) < 0)
        rc = -1;
    return rc;
}

int qmla_h5_dset_strs(hid_t g, const char *name, size_t n, const char *const *s,
                      const char *description)
{
    hid_t t = utf8_vlen();
    if (t < 0)
        return -1;
    int rc = qmla_h5_dset_1d(g, name, t, t, n, s, description, NULL);
    if (H5Tclose(t) < 0)
        rc = -1;
    return rc;
}

/* ---- in-memory files ------------------------------------------------------ */

hid_t qmla_h5_create_mem(void)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0)
        return -1;
    /* 1 MiB growth steps; backing_store 0: nothing reaches disk from HDF5 */
    /* A unique name: the core driver takes two files of one name for the
     * same file (a second H5Fcreate would fail while the first is open). A
     * path below /dev/null can never exist on disk. */
    static atomic_ulong counter;
    char name[96];
    snprintf(name, sizeof name, "/dev/null/qmla-in-memory-%ld-%lu",
             (long)getpid(), (unsigned long)atomic_fetch_add(&counter, 1));
    hid_t f = -1;
    if (H5Pset_fapl_core(fapl, (size_t)1 << 20, 0) >= 0)
        f = H5Fcreate(name, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    return f;
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int qmla_save_bytes_atomic(const char *path, const void *const *bufs,
                           const size_t *lens, size_t n, qmla_error *err)
{
    int st = QMLA_OK;
    char tmp[4096];
    /* rename() replaces whatever PATH names: run as root, -o /dev/null or
     * /dev/full became a regular file (exit 0). Only a regular file (or
     * nothing) is replaced; a symbolic link to one is replaced by the file. */
    if (qmla_output_path_check(path, "output file", NULL, 0, err)) {
        if (err)
            err->status = QMLA_EIO; /* this function's status for a path it cannot write */
        return QMLA_EIO;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return qmla_error_set(err, QMLA_EIO, "%s: cannot create %s: %s", path, tmp,
                              strerror(errno));
    for (size_t i = 0; i < n && st == QMLA_OK; i++)
        if (write_all(fd, bufs[i], lens[i]) != 0)
            st = qmla_error_set(err, QMLA_EIO, "%s: cannot write %zu bytes to %s: %s",
                                path, lens[i], tmp, strerror(errno));
    if (st == QMLA_OK && fsync(fd) != 0)
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot fsync %s: %s", path, tmp,
                            strerror(errno));
    if (close(fd) != 0 && st == QMLA_OK)
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot close %s: %s", path, tmp,
                            strerror(errno));
    if (st == QMLA_OK && rename(tmp, path) != 0)
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot rename %s to it: %s", path, tmp,
                            strerror(errno));
    if (st != QMLA_OK) {
        unlink(tmp);
        return st;
    }
    /* make the rename durable */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    return QMLA_OK;
}

int qmla_h5_finish(hid_t f, int st, const char *path, qmla_error *err)
{
    if (f < 0)
        return st;
    if (st == QMLA_OK)
        return qmla_h5_save_image(f, path, err);
    H5Fclose(f);
    return st;
}

int qmla_h5_save_image(hid_t f, const char *path, qmla_error *err)
{
    int st = QMLA_OK;
    unsigned char *img = NULL;

    if (H5Fflush(f, H5F_SCOPE_GLOBAL) < 0) {
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot flush the in-memory file",
                            path);
        goto done;
    }
    ssize_t sz = H5Fget_file_image(f, NULL, 0);
    if (sz <= 0 || !(img = malloc((size_t)sz)) ||
        H5Fget_file_image(f, img, (size_t)sz) != sz) {
        st = qmla_error_set(err, sz > 0 && !img ? QMLA_ENOMEM : QMLA_EIO,
                            "%s: cannot take the file image (%zd bytes)", path,
                            sz);
        goto done;
    }
    {
        const void *b[1] = {img};
        size_t l[1] = {(size_t)sz};
        st = qmla_save_bytes_atomic(path, b, l, 1, err);
    }
done:
    free(img);
    if (H5Fclose(f) < 0 && st == QMLA_OK)
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot close the in-memory file",
                            path);
    return st;
}

/* ---- checked readers: expected/found messages ------------------------------ */

int qmla_h5_fail(qmla_error *err, int status, const char *label,
                const char *obj, const char *fmt, ...)
{
    char detail[QMLA_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return qmla_error_set(err, status, "%s: %s: %s", label, obj, detail);
}

void qmla_h5_join(char *out, size_t cap, const char *parent, const char *name)
{
    int n = strcmp(parent, "/") == 0 ? snprintf(out, cap, "/%s", name)
                                     : snprintf(out, cap, "%s/%s", parent, name);
    if (n < 0 || (size_t)n >= cap) /* over-long names: paths are cut short */
        out[cap - 1] = '\0';
}

void qmla_h5_fmt_dims(char *buf, size_t cap, int rank, const hsize_t *d,
                     const char *const *names)
{
    size_t k = 0;
    int n = snprintf(buf, cap, "[");
    k = n > 0 ? (size_t)n : 0;
    for (int i = 0; i < rank && k < cap; i++) {
        const char *sep = i ? ", " : "";
        if (d[i] == QMLA_H5_WILD && names && names[i])
            n = snprintf(buf + k, cap - k, "%s%s", sep, names[i]);
        else
            n = snprintf(buf + k, cap - k, "%s%llu", sep,
                         (unsigned long long)d[i]);
        if (n < 0)
            break;
        k += (size_t)n;
    }
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
}

const char *qmla_h5_class_name(H5T_class_t c)
{
    switch (c) {
    case H5T_INTEGER: return "an integer";
    case H5T_FLOAT: return "a float";
    case H5T_TIME: return "a time";
    case H5T_STRING: return "a string";
    case H5T_BITFIELD: return "a bitfield";
    case H5T_OPAQUE: return "an opaque";
    case H5T_COMPOUND: return "a compound";
    case H5T_REFERENCE: return "a reference";
    case H5T_ENUM: return "an enum";
    case H5T_VLEN: return "a variable-length sequence";
    case H5T_ARRAY: return "an array";
    default: return "an unknown-type";
    }
}

static const char *idtype_name(H5I_type_t t)
{
    switch (t) {
    case H5I_GROUP: return "a group";
    case H5I_DATASET: return "a dataset";
    case H5I_DATATYPE: return "a named datatype";
    default: return "an object of unknown kind";
    }
}

/* ---- links and objects --------------------------------------------------- */

static herr_t deny_elink(const char *parent_file, const char *parent_group,
                         const char *child_file, const char *child_object,
                         unsigned *acc_flags, hid_t fapl, void *op)
{
    (void)parent_file; (void)parent_group; (void)child_file;
    (void)child_object; (void)acc_flags; (void)fapl; (void)op;
    return -1;
}

/* Open child `name` of `loc` (path `ppath`) expecting object kind `want`
 * (described as `expect` in messages). *out is the open object, or
 * H5I_INVALID_HID when absent and !required. */
int qmla_h5_open_child(const qmla_h5_ctx *v, hid_t loc, const char *ppath,
                      const char *name, H5I_type_t want, const char *expect,
                      int required, hid_t *out)
{
    char path[QMLA_ERRMSG_MAX], h5msg[256];
    *out = H5I_INVALID_HID;
    qmla_h5_join(path, sizeof path, ppath, name);
    htri_t ex = H5Lexists(loc, name, v->lapl);
    if (ex < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected %s, found an unreadable link (%s)", expect,
                    h5msg);
    }
    if (ex == 0) {
        if (!required)
            return QMLA_OK;
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected %s, found nothing (missing)", expect);
    }
    H5L_info_t li;
    if (H5Lget_info(loc, name, &li, v->lapl) < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected %s, found an unreadable link (%s)", expect,
                    h5msg);
    }
    if (li.type != H5L_TYPE_HARD && li.type != H5L_TYPE_SOFT)
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected %s in this file, found %s link", expect,
                    li.type == H5L_TYPE_EXTERNAL ? "an external"
                                                 : "a user-defined");
    hid_t obj = H5Oopen(loc, name, v->lapl);
    if (obj < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected %s, found a link that cannot be opened (%s)",
                    expect, h5msg);
    }
    H5I_type_t t = H5Iget_type(obj);
    if (t != want) {
        H5Oclose(obj);
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected %s, found %s", expect, idtype_name(t));
    }
    *out = obj;
    return QMLA_OK;
}

/* Names of the links of group g, in name order (HDF5's name index). */
int qmla_h5_list_links(const qmla_h5_ctx *v, hid_t g, const char *gpath,
                      char ***names_out, size_t *n_out)
{
    char h5msg[256];
    H5G_info_t gi;
    *names_out = NULL;
    *n_out = 0;
    if (H5Gget_info(g, &gi) < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, gpath,
                    "expected a readable group, found an error (%s)", h5msg);
    }
    if (gi.nlinks > QMLA_H5_MAX_LINKS)
        return qmla_h5_fail(v->err, QMLA_ERANGE, v->label, gpath,
                    "expected at most %d members, found %llu", QMLA_H5_MAX_LINKS,
                    (unsigned long long)gi.nlinks);
    if (gi.nlinks == 0)
        return QMLA_OK;
    char **names = calloc((size_t)gi.nlinks, sizeof *names);
    if (!names)
        return qmla_h5_fail(v->err, QMLA_ENOMEM, v->label, gpath,
                    "expected memory for %llu names, found none",
                    (unsigned long long)gi.nlinks);
    for (hsize_t i = 0; i < gi.nlinks; i++) {
        ssize_t len = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC,
                                         i, NULL, 0, H5P_DEFAULT);
        char *s = len >= 0 && len < 65536 ? malloc((size_t)len + 1) : NULL;
        if (s && H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, s,
                                    (size_t)len + 1, H5P_DEFAULT) < 0) {
            free(s);
            s = NULL;
        }
        if (!s) {
            qmla_h5_error_text(h5msg, sizeof h5msg);
            for (hsize_t j = 0; j < i; j++)
                free(names[j]);
            free(names);
            return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, gpath,
                        "expected readable member names, found an error at "
                        "member %llu (%s)",
                        (unsigned long long)i, len < 0 ? h5msg : "too long");
        }
        names[i] = s;
    }
    *names_out = names;
    *n_out = (size_t)gi.nlinks;
    return QMLA_OK;
}

void qmla_h5_free_names(char **names, size_t n)
{
    if (!names)
        return;
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* ---- attributes ---------------------------------------------------------- */

/* Close ft and a; report that attribute `name` holds a value of class cls
 * where `kind` ("an integer", ...) was expected. */
static int attr_wrong_class(const qmla_h5_ctx *v, hid_t a, hid_t ft,
                            const char *opath, const char *name,
                            const char *kind, H5T_class_t cls)
{
    if (ft >= 0)
        H5Tclose(ft);
    H5Aclose(a);
    return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, opath,
                        "attribute %s: expected %s, found %s value", name,
                        kind, qmla_h5_class_name(cls));
}

#define ATTR_CLASS(c) (1u << (c))

/* Open attribute `name` of obj and check that it holds exactly one value of
 * a type class in `classes` (ATTR_CLASS bits; described as `expect`). *aid
 * and *ft (its type) are H5I_INVALID_HID when absent and !required. */
static int attr_open(const qmla_h5_ctx *v, hid_t obj, const char *opath,
                     const char *name, const char *expect, unsigned classes,
                     int required, int *present, hid_t *aid, hid_t *ft)
{
    char h5msg[256];
    *aid = *ft = H5I_INVALID_HID;
    if (present)
        *present = 0;
    htri_t ex = H5Aexists(obj, name);
    if (ex < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, opath,
                    "attribute %s: expected %s, found an unreadable "
                    "attribute (%s)", name, expect, h5msg);
    }
    if (ex == 0) {
        if (!required)
            return QMLA_OK;
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, opath,
                    "attribute %s: expected %s, found none (missing)", name,
                    expect);
    }
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, opath,
                    "attribute %s: expected %s, found an attribute that "
                    "cannot be opened (%s)", name, expect, h5msg);
    }
    hid_t sp = H5Aget_space(a);
    H5S_class_t sc = sp >= 0 ? H5Sget_simple_extent_type(sp) : H5S_NO_CLASS;
    hssize_t np = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    int rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    hsize_t dims[H5S_MAX_RANK];
    if (rank > 0 && rank <= H5S_MAX_RANK)
        H5Sget_simple_extent_dims(sp, dims, NULL);
    if (sp >= 0)
        H5Sclose(sp);
    if (sc == H5S_SCALAR || (sc == H5S_SIMPLE && np == 1)) {
        *ft = H5Aget_type(a);
        H5T_class_t cls = *ft >= 0 ? H5Tget_class(*ft) : H5T_NO_CLASS;
        if (present)
            *present = 1;
        if (cls < 0 || cls >= 32 || !(classes & ATTR_CLASS(cls))) {
            int st = attr_wrong_class(v, a, *ft, opath, name, expect, cls);
            *ft = H5I_INVALID_HID;
            return st;
        }
        *aid = a;
        return QMLA_OK;
    }
    H5Aclose(a);
    char shape[128];
    if (sc == H5S_SIMPLE && rank > 0 && rank <= H5S_MAX_RANK)
        qmla_h5_fmt_dims(shape, sizeof shape, rank, dims, NULL);
    else
        snprintf(shape, sizeof shape, "%s",
                 sc == H5S_NULL ? "an empty (null) dataspace"
                                : "an unreadable dataspace");
    return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, opath,
                "attribute %s: expected %s (a single value), found shape %s",
                name, expect, shape);
}

/* Close a after its read (status r); a failed read is reported as "expected
 * a readable <kind>". */
static int attr_read_done(const qmla_h5_ctx *v, hid_t a, herr_t r,
                          const char *opath, const char *name,
                          const char *kind)
{
    char h5msg[256];
    if (r < 0)
        qmla_h5_error_text(h5msg, sizeof h5msg);
    H5Aclose(a);
    if (r >= 0)
        return QMLA_OK;
    return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, opath,
                        "attribute %s: expected a readable %s, found an "
                        "error (%s)", name, kind, h5msg);
}

/* Integer attribute of any integer type (or an enum over an integer type,
 * e.g. an h5py boolean). *present = 0 when absent and !required. */
int qmla_h5_read_attr_int(const qmla_h5_ctx *v, hid_t obj, const char *opath,
                         const char *name, int required, int64_t *out,
                         int *present)
{
    hid_t a, ft;
    int st = attr_open(v, obj, opath, name, "an integer",
                       ATTR_CLASS(H5T_INTEGER) | ATTR_CLASS(H5T_ENUM), required,
                       present, &a, &ft);
    if (st || a < 0)
        return st;
    herr_t r = -1;
    if (H5Tget_class(ft) == H5T_INTEGER && H5Tget_sign(ft) == H5T_SGN_NONE) {
        /* read unsigned as unsigned: HDF5 would clamp 2^64-1 to INT64_MAX
         * and the message would report a value the file does not hold */
        uint64_t u = 0;
        r = H5Aread(a, H5T_NATIVE_UINT64, &u);
        if (r >= 0 && u > (uint64_t)INT64_MAX) {
            H5Tclose(ft);
            H5Aclose(a);
            return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, opath,
                                "attribute %s: expected an integer of at most "
                                "%" PRId64 ", found %" PRIu64,
                                name, INT64_MAX, u);
        }
        *out = (int64_t)u;
    } else if (H5Tget_class(ft) == H5T_INTEGER) {
        r = H5Aread(a, H5T_NATIVE_INT64, out);
    } else { /* H5T_ENUM */
        /* HDF5 does not convert enum to integer: read the enum in its native
         * form, then convert the base integer type. */
        hid_t nt = H5Tget_native_type(ft, H5T_DIR_ASCEND);
        hid_t base = nt >= 0 ? H5Tget_super(nt) : H5I_INVALID_HID;
        size_t sz = nt >= 0 ? H5Tget_size(nt) : 0;
        unsigned char buf[16] = {0};
        if (base >= 0 && sz > 0 && sz <= 8 &&
            H5Tget_class(base) == H5T_INTEGER && H5Aread(a, nt, buf) >= 0 &&
            H5Tconvert(base, H5T_NATIVE_INT64, 1, buf, NULL, H5P_DEFAULT) >= 0) {
            memcpy(out, buf, sizeof *out);
            r = 0;
        }
        if (base >= 0)
            H5Tclose(base);
        if (nt >= 0)
            H5Tclose(nt);
        if (r < 0) {
            H5Tclose(ft);
            H5Aclose(a);
            return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, opath,
                        "attribute %s: expected an integer, found an enum "
                        "that does not convert to one", name);
        }
    }
    if (ft >= 0)
        H5Tclose(ft);
    return attr_read_done(v, a, r, opath, name, "integer");
}

/* Float attribute of any float type (integers are accepted and converted). */
int qmla_h5_read_attr_dbl(const qmla_h5_ctx *v, hid_t obj, const char *opath,
                           const char *name, int required, double *out,
                           int *present)
{
    hid_t a, ft;
    int st = attr_open(v, obj, opath, name, "a float",
                       ATTR_CLASS(H5T_FLOAT) | ATTR_CLASS(H5T_INTEGER),
                       required, present, &a, &ft);
    if (st || a < 0)
        return st;
    H5Tclose(ft);
    return attr_read_done(v, a, H5Aread(a, H5T_NATIVE_DOUBLE, out), opath,
                          name, "float");
}

/* String attribute, fixed or variable length; *out is malloc'd (NULL when
 * absent and !required). */
int qmla_h5_read_attr_str(const qmla_h5_ctx *v, hid_t obj, const char *opath,
                            const char *name, int required, char **out)
{
    char h5msg[256];
    hid_t a, ft;
    *out = NULL;
    int st = attr_open(v, obj, opath, name, "a string",
                       ATTR_CLASS(H5T_STRING), required, NULL, &a, &ft);
    if (st || a < 0)
        return st;
    htri_t vl = H5Tis_variable_str(ft);
    H5T_cset_t cset = H5Tget_cset(ft);
    size_t fsize = H5Tget_size(ft);
    H5Tclose(ft);
    hid_t mt = H5Tcopy(H5T_C_S1);
    char *s = NULL;
    int ok = 0;
    if (mt >= 0 && cset >= 0)
        H5Tset_cset(mt, cset);
    if (mt < 0 || vl < 0) {
        /* fall through to the error below */
    } else if (vl > 0) {
        char *p = NULL;
        if (H5Tset_size(mt, H5T_VARIABLE) >= 0 && H5Aread(a, mt, &p) >= 0) {
            size_t n = p ? strnlen(p, QMLA_H5_MAX_STRING) : 0;
            s = malloc(n + 1);
            if (s) {
                if (n)
                    memcpy(s, p, n);
                s[n] = '\0';
                ok = 1;
            }
            if (p)
                H5free_memory(p);
        }
    } else if (fsize > 0 && fsize <= QMLA_H5_MAX_STRING) {
        /* one more byte and NULLTERM: HDF5 strips the stored padding
         * (NUL or space) and terminates. */
        s = calloc(fsize + 1, 1);
        if (s && H5Tset_size(mt, fsize + 1) >= 0 &&
            H5Tset_strpad(mt, H5T_STR_NULLTERM) >= 0 && H5Aread(a, mt, s) >= 0)
            ok = 1;
    } else {
        if (mt >= 0)
            H5Tclose(mt);
        H5Aclose(a);
        return qmla_h5_fail(v->err, QMLA_ERANGE, v->label, opath,
                    "attribute %s: expected a string of at most %d bytes, "
                    "found %zu", name, QMLA_H5_MAX_STRING, fsize);
    }
    if (!ok)
        qmla_h5_error_text(h5msg, sizeof h5msg);
    if (mt >= 0)
        H5Tclose(mt);
    H5Aclose(a);
    if (!ok) {
        free(s);
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, opath,
                    "attribute %s: expected a readable string, found an "
                    "error (%s)", name, h5msg);
    }
    *out = s;
    return QMLA_OK;
}
int qmla_h5_count_elems(const hsize_t *d, int rank, uint64_t *out)
{
    uint64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (d[i] && n > QMLA_H5_MAX_ELEMS / d[i])
            return -1;
        n *= d[i];
    }
    if (n > QMLA_H5_MAX_ELEMS)
        return -1;
    *out = n;
    return 0;
}

/* Check dataset s->name in group g (path gpath): link and object kind, type
 * class, storage kept inside the file, filters available, rank and shape,
 * element count. found[] receives its dims. *present = 0 when absent and
 * !required. */
int qmla_h5_check_dataset(const qmla_h5_ctx *v, hid_t g, const char *gpath,
                         const qmla_h5_dspec *s, int required, int *present,
                         hsize_t *found)
{
    char path[QMLA_ERRMSG_MAX], want[160], got[160], expect[256], h5msg[256];
    const char *kind = s->integer ? "an integer" : "a float";
    qmla_h5_join(path, sizeof path, gpath, s->name);
    qmla_h5_fmt_dims(want, sizeof want, s->rank, s->dims, s->sym);
    snprintf(expect, sizeof expect, "%s dataset of shape %s", kind, want);
    hid_t d;
    *present = 0;
    int st = qmla_h5_open_child(v, g, gpath, s->name, H5I_DATASET, expect, required,
                        &d);
    if (st || d < 0)
        return st;
    *present = 1;

    hid_t ft = H5Dget_type(d);
    H5T_class_t cls = ft >= 0 ? H5Tget_class(ft) : H5T_NO_CLASS;
    size_t tsize = ft >= 0 ? H5Tget_size(ft) : 0;
    H5T_class_t wcls = s->integer ? H5T_INTEGER : H5T_FLOAT;
    if (cls != wcls) {
        if (ft >= 0)
            H5Tclose(ft);
        H5Dclose(d);
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected %s dataset, found %s dataset", kind,
                    qmla_h5_class_name(cls));
    }
    if (tsize == 0 || tsize > 16) {
        if (ft >= 0)
            H5Tclose(ft);
        H5Dclose(d);
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected %s type of at most 16 bytes, found %zu bytes",
                    kind, tsize);
    }
    /* A conversion path can exist and still fail at run time (custom floats
     * with an explicit leading mantissa bit: "normalization method not
     * implemented yet"): convert one element now rather than fail at load. */
    unsigned char probe[64];
    memset(probe, 0x55, sizeof probe); /* a normal, non-zero pattern */
    memset(probe + tsize, 0, tsize);   /* and zero */
    herr_t conv = H5Tconvert(ft, s->integer ? H5T_NATIVE_INT64
                                            : H5T_NATIVE_FLOAT,
                             2, probe, NULL, H5P_DEFAULT);
    if (conv < 0)
        qmla_h5_error_text(h5msg, sizeof h5msg);
    H5Tclose(ft);
    if (conv < 0) {
        H5Dclose(d);
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected %s type that converts to %s, found one HDF5 "
                    "cannot convert (%s)", kind,
                    s->integer ? "int64" : "float32", h5msg);
    }

    /* storage: only inside this file, only filters that are available */
    hid_t dcpl = H5Dget_create_plist(d);
    if (dcpl < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        H5Dclose(d);
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected a readable dataset creation property list, "
                    "found an error (%s)", h5msg);
    }
    H5D_layout_t lay = H5Pget_layout(dcpl);
    int next = H5Pget_external_count(dcpl);
    if (lay == H5D_VIRTUAL || next != 0) {
        H5Pclose(dcpl);
        H5Dclose(d);
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected raw data stored in this file, found %s",
                    lay == H5D_VIRTUAL ? "a virtual dataset"
                                       : "external raw data storage");
    }
    int nf = H5Pget_nfilters(dcpl);
    for (int i = 0; i < nf; i++) {
        unsigned flags = 0, conf = 0;
        size_t ncd = 0;
        char fname[64] = "";
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd,
                                         NULL, sizeof fname, fname, &conf);
        if (id < 0 || (!(flags & H5Z_FLAG_OPTIONAL) && H5Zfilter_avail(id) <= 0)) {
            H5Pclose(dcpl);
            H5Dclose(d);
            return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                        "expected filters this HDF5 library has, found "
                        "unavailable filter %d (%s)", (int)id,
                        fname[0] ? fname : "unnamed");
        }
    }
    H5Pclose(dcpl);

    hid_t sp = H5Dget_space(d);
    H5S_class_t sc = sp >= 0 ? H5Sget_simple_extent_type(sp) : H5S_NO_CLASS;
    int rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    hsize_t dims[H5S_MAX_RANK];
    if (sc == H5S_SIMPLE && rank > 0 && rank <= H5S_MAX_RANK)
        H5Sget_simple_extent_dims(sp, dims, NULL);
    if (sp >= 0)
        H5Sclose(sp);
    H5Dclose(d);
    if (sc != H5S_SIMPLE || rank <= 0 || rank > H5S_MAX_RANK) {
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected shape %s, found %s", want,
                    sc == H5S_SCALAR ? "a scalar"
                    : sc == H5S_NULL ? "an empty (null) dataspace"
                                     : "an unreadable dataspace");
    }
    int match = rank == s->rank;
    for (int i = 0; match && i < rank; i++)
        if (s->dims[i] != QMLA_H5_WILD && s->dims[i] != dims[i])
            match = 0;
    if (!match) {
        qmla_h5_fmt_dims(got, sizeof got, rank, dims, NULL);
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected shape %s, found %s", want, got);
    }
    uint64_t n;
    if (qmla_h5_count_elems(dims, rank, &n) < 0) {
        qmla_h5_fmt_dims(got, sizeof got, rank, dims, NULL);
        return qmla_h5_fail(v->err, QMLA_ERANGE, v->label, path,
                    "expected at most 2^40 elements, found shape %s", got);
    }
    for (int i = 0; i < rank; i++)
        found[i] = dims[i];
    return QMLA_OK;
}
void qmla_h5_read_close(hid_t g, hid_t fh, hid_t lapl, h5_quiet q)
{
    if (g >= 0)
        H5Gclose(g);
    if (fh >= 0)
        H5Fclose(fh);
    if (lapl >= 0)
        H5Pclose(lapl);
    qmla_h5_quiet_end(q);
}

hid_t qmla_h5_make_lapl(void)
{
    hid_t lapl = H5Pcreate(H5P_LINK_ACCESS);
    if (lapl >= 0 && H5Pset_elink_cb(lapl, deny_elink, NULL) < 0) {
        H5Pclose(lapl);
        lapl = H5I_INVALID_HID;
    }
    return lapl;
}

/* ---- checked dataset reads ------------------------------------------------- */

static void fmt_index(char *buf, size_t cap, size_t flat, int rank,
                      const hsize_t *dims)
{
    hsize_t idx[H5S_MAX_RANK] = {0};
    for (int i = (rank < H5S_MAX_RANK ? rank : H5S_MAX_RANK) - 1; i >= 0; i--) {
        idx[i] = dims[i] ? flat % dims[i] : 0;
        flat = dims[i] ? flat / dims[i] : 0;
    }
    qmla_h5_fmt_dims(buf, cap, rank, idx, NULL);
}

/* Read dataset `name` of group g (path gpath) with the given shape into a
 * new buffer of `elsize`-byte elements of memory type mt. Float data is
 * scanned for non-finite values. */
int qmla_h5_read_dataset(const qmla_h5_ctx *v, hid_t g, const char *gpath,
                         const char *name, int rank, const hsize_t *dims,
                         hid_t mt, size_t elsize, void **out)
{
    char path[QMLA_ERRMSG_MAX], h5msg[256], want[128], got[128];
    *out = NULL;
    qmla_h5_join(path, sizeof path, gpath, name);
    uint64_t n;
    if (qmla_h5_count_elems(dims, rank, &n) < 0 || n > SIZE_MAX / elsize)
        return qmla_h5_fail(v->err, QMLA_ERANGE, v->label, path,
                    "expected at most 2^40 elements, found more");
    hid_t d;
    int st = qmla_h5_open_child(v, g, gpath, name, H5I_DATASET, "a dataset", 1, &d);
    if (st)
        return st;
    /* the file is open read-only; still, never trust a shape we did not
     * just see */
    hid_t sp = H5Dget_space(d);
    int r = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    hsize_t fd[H5S_MAX_RANK];
    int same = r == rank && H5Sget_simple_extent_dims(sp, fd, NULL) == rank;
    for (int i = 0; same && i < rank; i++)
        same = fd[i] == dims[i];
    if (sp >= 0)
        H5Sclose(sp);
    if (!same) {
        H5Dclose(d);
        qmla_h5_fmt_dims(want, sizeof want, rank, dims, NULL);
        if (r > 0 && r <= H5S_MAX_RANK)
            qmla_h5_fmt_dims(got, sizeof got, r, fd, NULL);
        else
            snprintf(got, sizeof got, "rank %d", r);
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected shape %s (as validated at open), found %s",
                    want, got);
    }
    void *buf = malloc(n ? (size_t)n * elsize : 1);
    if (!buf) {
        H5Dclose(d);
        return qmla_h5_fail(v->err, QMLA_ENOMEM, v->label, path,
                    "expected memory for %" PRIu64 " elements, found none", n);
    }
    if (H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        H5Dclose(d);
        free(buf);
        return qmla_h5_fail(v->err, QMLA_EIO, v->label, path,
                    "expected readable data, found a read error (%s)", h5msg);
    }
    H5Dclose(d);
    if (mt == H5T_NATIVE_FLOAT) {
        const float *x = buf;
        for (size_t i = 0; i < (size_t)n; i++) {
            if (!isfinite(x[i])) {
                char at[128];
                fmt_index(at, sizeof at, i, rank, dims);
                st = qmla_h5_fail(v->err, QMLA_ENONFINITE, v->label, path,
                          "expected finite values (within float32 range), "
                          "found %s at index %s (element %zu)",
                          isnan(x[i]) ? "nan" : x[i] > 0 ? "inf" : "-inf",
                          at, i);
                free(buf);
                return st;
            }
        }
    }
    *out = buf;
    return QMLA_OK;
}
/* See h5util.h: refuse to replace an existing file of another format. */
int qmla_h5_check_replace(const char *path, const char *format, qmla_error *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0 || (S_ISREG(sb.st_mode) && sb.st_size == 0))
        return QMLA_OK;
    h5_quiet q = qmla_h5_quiet_begin();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    char *fmt = NULL;
    qmla_error e2;
    qmla_error_clear(&e2);
    const qmla_h5_ctx v = {path, H5P_DEFAULT, &e2};
    if (f >= 0)
        (void)qmla_h5_read_attr_str(&v, f, "/", "format", 0, &fmt);
    if (f >= 0)
        H5Fclose(f);
    qmla_h5_quiet_end(q);
    int st = QMLA_OK;
    if (!fmt || strcmp(fmt, format))
        st = qmla_error_set(err, QMLA_EINVAL, "%s: exists and is %s%s%s: expected a new name "
                            "or an earlier %s file (the whole file would be replaced)", path,
                            f < 0 ? "not an HDF5 file" : fmt ? "of format \"" :
                            "an HDF5 file without a format attribute", fmt ? fmt : "",
                            fmt ? "\"" : "", format);
    free(fmt);
    return st;
}

/* Open `path` in memory (a copy; nothing reaches disk until saved), or
 * create an empty in-memory file when it does not exist (or is empty). */
int qmla_h5_check_input(const char *path, const char *what, qmla_error *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return qmla_error_set(err, qmla_status_from_errno(errno), "%s: cannot open the %s: %s",
                              path, what, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return qmla_error_set(err, QMLA_EIO, "%s: cannot open the %s: expected a regular "
                              "file, found %s", path, what,
                              S_ISDIR(sb.st_mode) ? "a directory" : "a special file");
    return QMLA_OK;
}

hid_t qmla_h5_open_mem(const char *path, int *created, qmla_error *err)
{
    *created = 0;
    struct stat sb0;
    /* an empty file (e.g. from mktemp) is a new results file */
    if (access(path, F_OK) != 0 ||
        (stat(path, &sb0) == 0 && S_ISREG(sb0.st_mode) && sb0.st_size == 0)) {
        *created = 1;
        hid_t f = qmla_h5_create_mem();
        if (f < 0)
            qmla_error_set(err, QMLA_EIO, "%s: cannot create an in-memory file", path);
        return f;
    }
    if (qmla_output_path_check(path, "results file", NULL, 0, err))
        return -1;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    hid_t f = -1;
    if (fapl >= 0 && H5Pset_fapl_core(fapl, (size_t)1 << 20, 0) >= 0)
        f = H5Fopen(path, H5F_ACC_RDWR, fapl);
    if (fapl >= 0)
        H5Pclose(fapl);
    if (f < 0) {
        char m[256];
        qmla_h5_error_text(m, sizeof m);
        qmla_error_set(err, QMLA_EIO, "%s: cannot open as HDF5 to add a group: %s",
                       path, m);
        return f;
    }
    /* a group is added to a results file only: a capture, a transforms file
     * or a serve-sim file given as -o was rewritten with the new group in it
     * (exit 0). Files without a format attribute (qmla eval's) are taken. */
    char *fmt = NULL;
    const qmla_h5_ctx v = {path, H5P_DEFAULT, err};
    if (qmla_h5_read_attr_str(&v, f, "/", "format", 0, &fmt) != QMLA_OK) {
        H5Fclose(f);
        return -1;
    }
    if (fmt && strcmp(fmt, "qmla-results")) {
        qmla_error_set(err, QMLA_EFORMAT, "%s: expected a qmla-results file to add a group "
                       "to (or a new name), found format \"%s\" (a file of another "
                       "kind is not overwritten)", path, fmt);
        free(fmt);
        H5Fclose(f);
        return -1;
    }
    free(fmt);
    return f;
}

