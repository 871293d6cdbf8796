/* capture_read.c — reader of qmla-capture v1 files (docs/capture-format.md).
 *
 * qmla_capture_open / qmla_capture_open_image validate the whole structure up
 * front — root attributes, /config, every /layers/<i> group and every cell:
 * presence, link kind, object kind, type class, rank and shape of every
 * dataset, attribute types and values, element-count limits — without reading
 * a tensor. qmla_capture_load_layer / qmla_capture_load_cell then read and
 * convert the float datasets to float32 (HDF5's own conversion: float16,
 * bfloat16 and other custom floats, float64 all work) and reject non-finite
 * values, naming the first bad index.
 *
 * Every message has the form "<file or image label>: <object path>: expected
 * <what>, found <what>"; docs/capture-format.md lists every rejection.
 *
 * HDF5 never prints from here: each public entry point disables the automatic
 * error stack printing and restores the caller's handler before returning.
 * Links are followed only inside the file (external links are refused, also
 * behind a soft link), and datasets whose raw data lives outside the file
 * (external storage, virtual datasets) are refused, so a crafted capture
 * cannot make the reader open other files.
 *
 * Tests: tests/test_reader.c; fuzzing: fuzz/fuzz_capture.c (fuzz/run.sh).
 */
#include "qmla/capture.h"
#include "h5util.h"

#include <hdf5.h>

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WILD ((hsize_t)-1)   /* N or T, not known yet (first cell dataset) */
#define MAX_LINKS 1000000    /* links per group we are willing to list */
#define MAX_STRING (1 << 20) /* longest string attribute we read */

/* ---- internal model of a validated file --------------------------------- */

typedef struct cell_info {
    char *name;         /* link name under cells/ (< 128 bytes) */
    char dataset[128];  /* attribute `dataset` */
    long seed;          /* attribute `seed` */
    size_t N, T;
    int has_pre;        /* k_rope_pre and q_rope_pre */
    int has_cossin;     /* rope_cos and rope_sin (implies has_pre) */
    int has_hidden;     /* hidden_in */
} cell_info;

typedef struct layer_info {
    int index;          /* decimal name == attribute `layer` */
    char *name;
    size_t n_cells;
    cell_info *cells;   /* sorted by name */
} layer_info;

struct qmla_capture {
    hid_t file;
    hid_t lapl;         /* link access: external links refused */
    char *label;        /* path or image label, for messages */
    qmla_capture_config cfg;
    size_t n_layers;
    layer_info *layers; /* sorted by index */
};

typedef struct vctx {
    const char *label;
    hid_t lapl;
    qmla_error *err;
} vctx;

/* ---- HDF5 error printing off, per public call ---------------------------- */


/* ---- messages ------------------------------------------------------------ */

#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
static int fail(qmla_error *err, int status, const char *label,
                const char *obj, const char *fmt, ...)
{
    char detail[QMLA_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return qmla_error_set(err, status, "%s: %s: %s", label, obj, detail);
}

static void join(char *out, size_t cap, const char *parent, const char *name)
{
    int n = strcmp(parent, "/") == 0 ? snprintf(out, cap, "/%s", name)
                                     : snprintf(out, cap, "%s/%s", parent, name);
    if (n < 0 || (size_t)n >= cap) /* over-long names: paths are cut short */
        out[cap - 1] = '\0';
}

static void fmt_dims(char *buf, size_t cap, int rank, const hsize_t *d,
                     const char *const *names)
{
    size_t k = 0;
    int n = snprintf(buf, cap, "[");
    k = n > 0 ? (size_t)n : 0;
    for (int i = 0; i < rank && k < cap; i++) {
        const char *sep = i ? ", " : "";
        if (d[i] == WILD && names && names[i])
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

static const char *class_name(H5T_class_t c)
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
static int open_child(const vctx *v, hid_t loc, const char *ppath,
                      const char *name, H5I_type_t want, const char *expect,
                      int required, hid_t *out)
{
    char path[QMLA_ERRMSG_MAX], h5msg[256];
    *out = H5I_INVALID_HID;
    join(path, sizeof path, ppath, name);
    htri_t ex = H5Lexists(loc, name, v->lapl);
    if (ex < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        return fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected %s, found an unreadable link (%s)", expect,
                    h5msg);
    }
    if (ex == 0) {
        if (!required)
            return QMLA_OK;
        return fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected %s, found nothing (missing)", expect);
    }
    H5L_info_t li;
    if (H5Lget_info(loc, name, &li, v->lapl) < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        return fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected %s, found an unreadable link (%s)", expect,
                    h5msg);
    }
    if (li.type != H5L_TYPE_HARD && li.type != H5L_TYPE_SOFT)
        return fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected %s in this file, found %s link", expect,
                    li.type == H5L_TYPE_EXTERNAL ? "an external"
                                                 : "a user-defined");
    hid_t obj = H5Oopen(loc, name, v->lapl);
    if (obj < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        return fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected %s, found a link that cannot be opened (%s)",
                    expect, h5msg);
    }
    H5I_type_t t = H5Iget_type(obj);
    if (t != want) {
        H5Oclose(obj);
        return fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected %s, found %s", expect, idtype_name(t));
    }
    *out = obj;
    return QMLA_OK;
}

/* Names of the links of group g, in name order (HDF5's name index). */
static int list_links(const vctx *v, hid_t g, const char *gpath,
                      char ***names_out, size_t *n_out)
{
    char h5msg[256];
    H5G_info_t gi;
    *names_out = NULL;
    *n_out = 0;
    if (H5Gget_info(g, &gi) < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        return fail(v->err, QMLA_EFORMAT, v->label, gpath,
                    "expected a readable group, found an error (%s)", h5msg);
    }
    if (gi.nlinks > MAX_LINKS)
        return fail(v->err, QMLA_ERANGE, v->label, gpath,
                    "expected at most %d members, found %llu", MAX_LINKS,
                    (unsigned long long)gi.nlinks);
    if (gi.nlinks == 0)
        return QMLA_OK;
    char **names = calloc((size_t)gi.nlinks, sizeof *names);
    if (!names)
        return fail(v->err, QMLA_ENOMEM, v->label, gpath,
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
            return fail(v->err, QMLA_EFORMAT, v->label, gpath,
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

static void free_names(char **names, size_t n)
{
    if (!names)
        return;
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* ---- attributes ---------------------------------------------------------- */

/* Open attribute `name` of obj and check that it holds exactly one value.
 * *aid is H5I_INVALID_HID when absent and !required. */
static int attr_open(const vctx *v, hid_t obj, const char *opath,
                     const char *name, const char *expect, int required,
                     hid_t *aid)
{
    char h5msg[256];
    *aid = H5I_INVALID_HID;
    htri_t ex = H5Aexists(obj, name);
    if (ex < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        return fail(v->err, QMLA_EFORMAT, v->label, opath,
                    "attribute %s: expected %s, found an unreadable "
                    "attribute (%s)", name, expect, h5msg);
    }
    if (ex == 0) {
        if (!required)
            return QMLA_OK;
        return fail(v->err, QMLA_EFORMAT, v->label, opath,
                    "attribute %s: expected %s, found none (missing)", name,
                    expect);
    }
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        return fail(v->err, QMLA_EFORMAT, v->label, opath,
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
        *aid = a;
        return QMLA_OK;
    }
    H5Aclose(a);
    char shape[128];
    if (sc == H5S_SIMPLE && rank > 0 && rank <= H5S_MAX_RANK)
        fmt_dims(shape, sizeof shape, rank, dims, NULL);
    else
        snprintf(shape, sizeof shape, "%s",
                 sc == H5S_NULL ? "an empty (null) dataspace"
                                : "an unreadable dataspace");
    return fail(v->err, QMLA_EFORMAT, v->label, opath,
                "attribute %s: expected %s (a single value), found shape %s",
                name, expect, shape);
}

/* Integer attribute of any integer type (or an enum over an integer type,
 * e.g. an h5py boolean). *present = 0 when absent and !required. */
static int read_int_attr(const vctx *v, hid_t obj, const char *opath,
                         const char *name, int required, int64_t *out,
                         int *present)
{
    char h5msg[256];
    hid_t a;
    int st = attr_open(v, obj, opath, name, "an integer", required, &a);
    if (present)
        *present = a >= 0;
    if (st || a < 0)
        return st;
    hid_t ft = H5Aget_type(a);
    H5T_class_t cls = ft >= 0 ? H5Tget_class(ft) : H5T_NO_CLASS;
    herr_t r = -1;
    if (cls == H5T_INTEGER && H5Tget_sign(ft) == H5T_SGN_NONE) {
        /* read unsigned as unsigned: HDF5 would clamp 2^64-1 to INT64_MAX
         * and the message would report a value the file does not hold */
        uint64_t u = 0;
        r = H5Aread(a, H5T_NATIVE_UINT64, &u);
        if (r >= 0 && u > (uint64_t)INT64_MAX) {
            H5Tclose(ft);
            H5Aclose(a);
            return fail(v->err, QMLA_EFORMAT, v->label, opath,
                        "attribute %s: expected an integer of at most %" PRId64
                        ", found %" PRIu64, name, INT64_MAX, u);
        }
        *out = (int64_t)u;
    } else if (cls == H5T_INTEGER) {
        r = H5Aread(a, H5T_NATIVE_INT64, out);
    } else if (cls == H5T_ENUM) {
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
            return fail(v->err, QMLA_EFORMAT, v->label, opath,
                        "attribute %s: expected an integer, found an enum "
                        "that does not convert to one", name);
        }
    } else {
        if (ft >= 0)
            H5Tclose(ft);
        H5Aclose(a);
        return fail(v->err, QMLA_EFORMAT, v->label, opath,
                    "attribute %s: expected an integer, found %s value", name,
                    class_name(cls));
    }
    if (ft >= 0)
        H5Tclose(ft);
    if (r < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        H5Aclose(a);
        return fail(v->err, QMLA_EFORMAT, v->label, opath,
                    "attribute %s: expected a readable integer, found an "
                    "error (%s)", name, h5msg);
    }
    H5Aclose(a);
    return QMLA_OK;
}

/* Float attribute of any float type (integers are accepted and converted). */
static int read_float_attr(const vctx *v, hid_t obj, const char *opath,
                           const char *name, int required, double *out,
                           int *present)
{
    char h5msg[256];
    hid_t a;
    int st = attr_open(v, obj, opath, name, "a float", required, &a);
    if (present)
        *present = a >= 0;
    if (st || a < 0)
        return st;
    hid_t ft = H5Aget_type(a);
    H5T_class_t cls = ft >= 0 ? H5Tget_class(ft) : H5T_NO_CLASS;
    if (ft >= 0)
        H5Tclose(ft);
    if (cls != H5T_FLOAT && cls != H5T_INTEGER) {
        H5Aclose(a);
        return fail(v->err, QMLA_EFORMAT, v->label, opath,
                    "attribute %s: expected a float, found %s value", name,
                    class_name(cls));
    }
    if (H5Aread(a, H5T_NATIVE_DOUBLE, out) < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        H5Aclose(a);
        return fail(v->err, QMLA_EFORMAT, v->label, opath,
                    "attribute %s: expected a readable float, found an "
                    "error (%s)", name, h5msg);
    }
    H5Aclose(a);
    return QMLA_OK;
}

/* String attribute, fixed or variable length; *out is malloc'd (NULL when
 * absent and !required). */
static int read_string_attr(const vctx *v, hid_t obj, const char *opath,
                            const char *name, int required, char **out)
{
    char h5msg[256];
    hid_t a;
    *out = NULL;
    int st = attr_open(v, obj, opath, name, "a string", required, &a);
    if (st || a < 0)
        return st;
    hid_t ft = H5Aget_type(a);
    H5T_class_t cls = ft >= 0 ? H5Tget_class(ft) : H5T_NO_CLASS;
    if (cls != H5T_STRING) {
        if (ft >= 0)
            H5Tclose(ft);
        H5Aclose(a);
        return fail(v->err, QMLA_EFORMAT, v->label, opath,
                    "attribute %s: expected a string, found %s value", name,
                    class_name(cls));
    }
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
            size_t n = p ? strnlen(p, MAX_STRING) : 0;
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
    } else if (fsize > 0 && fsize <= MAX_STRING) {
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
        return fail(v->err, QMLA_ERANGE, v->label, opath,
                    "attribute %s: expected a string of at most %d bytes, "
                    "found %zu", name, MAX_STRING, fsize);
    }
    if (!ok)
        qmla_h5_error_text(h5msg, sizeof h5msg);
    if (mt >= 0)
        H5Tclose(mt);
    H5Aclose(a);
    if (!ok) {
        free(s);
        return fail(v->err, QMLA_EFORMAT, v->label, opath,
                    "attribute %s: expected a readable string, found an "
                    "error (%s)", name, h5msg);
    }
    *out = s;
    return QMLA_OK;
}

/* ---- datasets ------------------------------------------------------------ */

typedef struct ds_spec {
    const char *name;
    int rank;
    hsize_t dims[4];        /* WILD: N or T taken from this dataset */
    const char *sym[4];     /* names of WILD dims, for messages */
    int integer;            /* positions: integer class, else float class */
} ds_spec;

static int count_elems(const hsize_t *d, int rank, uint64_t *out)
{
    uint64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (d[i] && n > QMLA_CAPTURE_MAX_ELEMS / d[i])
            return -1;
        n *= d[i];
    }
    if (n > QMLA_CAPTURE_MAX_ELEMS)
        return -1;
    *out = n;
    return 0;
}

/* Check dataset s->name in group g (path gpath): link and object kind, type
 * class, storage kept inside the file, filters available, rank and shape,
 * element count. found[] receives its dims. *present = 0 when absent and
 * !required. */
static int check_dataset(const vctx *v, hid_t g, const char *gpath,
                         const ds_spec *s, int required, int *present,
                         hsize_t *found)
{
    char path[QMLA_ERRMSG_MAX], want[160], got[160], expect[256], h5msg[256];
    const char *kind = s->integer ? "an integer" : "a float";
    join(path, sizeof path, gpath, s->name);
    fmt_dims(want, sizeof want, s->rank, s->dims, s->sym);
    snprintf(expect, sizeof expect, "%s dataset of shape %s", kind, want);
    hid_t d;
    *present = 0;
    int st = open_child(v, g, gpath, s->name, H5I_DATASET, expect, required,
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
        return fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected %s dataset, found %s dataset", kind,
                    class_name(cls));
    }
    if (tsize == 0 || tsize > 16) {
        if (ft >= 0)
            H5Tclose(ft);
        H5Dclose(d);
        return fail(v->err, QMLA_EFORMAT, v->label, path,
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
        return fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected %s type that converts to %s, found one HDF5 "
                    "cannot convert (%s)", kind,
                    s->integer ? "int64" : "float32", h5msg);
    }

    /* storage: only inside this file, only filters that are available */
    hid_t dcpl = H5Dget_create_plist(d);
    if (dcpl < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        H5Dclose(d);
        return fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected a readable dataset creation property list, "
                    "found an error (%s)", h5msg);
    }
    H5D_layout_t lay = H5Pget_layout(dcpl);
    int next = H5Pget_external_count(dcpl);
    if (lay == H5D_VIRTUAL || next != 0) {
        H5Pclose(dcpl);
        H5Dclose(d);
        return fail(v->err, QMLA_EFORMAT, v->label, path,
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
            return fail(v->err, QMLA_EFORMAT, v->label, path,
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
        return fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected shape %s, found %s", want,
                    sc == H5S_SCALAR ? "a scalar"
                    : sc == H5S_NULL ? "an empty (null) dataspace"
                                     : "an unreadable dataspace");
    }
    int match = rank == s->rank;
    for (int i = 0; match && i < rank; i++)
        if (s->dims[i] != WILD && s->dims[i] != dims[i])
            match = 0;
    if (!match) {
        fmt_dims(got, sizeof got, rank, dims, NULL);
        return fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected shape %s, found %s", want, got);
    }
    uint64_t n;
    if (count_elems(dims, rank, &n) < 0) {
        fmt_dims(got, sizeof got, rank, dims, NULL);
        return fail(v->err, QMLA_ERANGE, v->label, path,
                    "expected at most 2^40 elements, found shape %s", got);
    }
    for (int i = 0; i < rank; i++)
        found[i] = dims[i];
    return QMLA_OK;
}

/* ---- validation ---------------------------------------------------------- */

static int cfg_int(const vctx *v, hid_t g, const char *name, int *out)
{
    int64_t x = 0;
    int st = read_int_attr(v, g, "/config", name, 1, &x, NULL);
    if (st)
        return st;
    if (x <= 0 || x > INT_MAX)
        return fail(v->err, QMLA_EFORMAT, v->label, "/config",
                    "attribute %s: expected a positive integer (at most %d), "
                    "found %" PRId64, name, INT_MAX, x);
    *out = (int)x;
    return QMLA_OK;
}

static int validate_root(const vctx *v, hid_t root, qmla_capture_config *cfg)
{
    char *s = NULL;
    int st = read_string_attr(v, root, "/", "format", 1, &s);
    if (st)
        return st;
    if (strcmp(s, QMLA_CAPTURE_FORMAT) != 0) {
        st = fail(v->err, QMLA_EFORMAT, v->label, "/",
                  "attribute format: expected \"%s\", found \"%.200s\"",
                  QMLA_CAPTURE_FORMAT, s);
        free(s);
        return st;
    }
    free(s);
    int64_t ver = 0;
    if ((st = read_int_attr(v, root, "/", "format_version", 1, &ver, NULL)))
        return st;
    if (ver != QMLA_CAPTURE_VERSION)
        return fail(v->err, QMLA_EFORMAT, v->label, "/",
                    "attribute format_version: expected %d, found %" PRId64,
                    QMLA_CAPTURE_VERSION, ver);
    if ((st = read_string_attr(v, root, "/", "model", 1, &s)))
        return st;
    snprintf(cfg->model, sizeof cfg->model, "%s", s);
    free(s);
    if ((st = read_string_attr(v, root, "/", "source", 1, &s)))
        return st;
    snprintf(cfg->source, sizeof cfg->source, "%s", s);
    free(s);
    int present = 0;
    double tol = 0;
    if ((st = read_float_attr(v, root, "/", "check_tolerance", 0, &tol,
                              &present)))
        return st;
    if (present && !(isfinite(tol) && tol > 0))
        return fail(v->err, QMLA_EFORMAT, v->label, "/",
                    "attribute check_tolerance: expected a finite value > 0, "
                    "found %g", tol);
    cfg->has_check_tolerance = present;
    cfg->check_tolerance = present ? tol : 0.0;
    int64_t syn = 0;
    if ((st = read_int_attr(v, root, "/", "synthetic", 0, &syn, &present)))
        return st;
    if (present && syn != 0 && syn != 1)
        return fail(v->err, QMLA_EFORMAT, v->label, "/",
                    "attribute synthetic: expected 0 or 1, found %" PRId64,
                    syn);
    cfg->synthetic = present ? (int)syn : 0;
    return QMLA_OK;
}

static int validate_config(const vctx *v, hid_t root, qmla_capture_config *cfg)
{
    hid_t g;
    int st = open_child(v, root, "/", "config", H5I_GROUP, "a group", 1, &g);
    if (st)
        return st;
    if ((st = cfg_int(v, g, "n_layers", &cfg->n_layers)) ||
        (st = cfg_int(v, g, "n_heads", &cfg->H)) ||
        (st = cfg_int(v, g, "d_model", &cfg->D)) ||
        (st = cfg_int(v, g, "kv_lora_rank", &cfg->d_c)) ||
        (st = cfg_int(v, g, "qk_nope_head_dim", &cfg->d_n)) ||
        (st = cfg_int(v, g, "qk_rope_head_dim", &cfg->d_r)) ||
        (st = cfg_int(v, g, "v_head_dim", &cfg->d_v)))
        goto out;
    if (cfg->d_r % 2) {
        st = fail(v->err, QMLA_EFORMAT, v->label, "/config",
                  "attribute qk_rope_head_dim: expected an even value, "
                  "found %d", cfg->d_r);
        goto out;
    }
    if ((st = read_float_attr(v, g, "/config", "softmax_scale", 1,
                              &cfg->softmax_scale, NULL)))
        goto out;
    /* The attention computes in float32 with (float)softmax_scale: a value
     * that becomes 0, subnormal or infinite there is refused. */
    if (!(isfinite(cfg->softmax_scale) && cfg->softmax_scale >= FLT_MIN &&
          cfg->softmax_scale <= FLT_MAX)) {
        st = fail(v->err, QMLA_EFORMAT, v->label, "/config",
                  "attribute softmax_scale: expected a finite value > 0 that "
                  "is a normal float32 (%.9g .. %.9g: the attention computes "
                  "in float32), found %g", (double)FLT_MIN, (double)FLT_MAX,
                  cfg->softmax_scale);
        goto out;
    }
    if ((st = read_float_attr(v, g, "/config", "rms_norm_eps", 1,
                              &cfg->rms_norm_eps, NULL)))
        goto out;
    if (!(isfinite(cfg->rms_norm_eps) && cfg->rms_norm_eps >= 0)) {
        st = fail(v->err, QMLA_EFORMAT, v->label, "/config",
                  "attribute rms_norm_eps: expected a finite value >= 0, "
                  "found %g", cfg->rms_norm_eps);
        goto out;
    }
    char *s = NULL;
    if ((st = read_string_attr(v, g, "/config", "rope_pairing", 1, &s)))
        goto out;
    if (strcmp(s, "interleaved") == 0) {
        cfg->rope_pairing = QMLA_ROPE_INTERLEAVED;
    } else if (strcmp(s, "half") == 0) {
        cfg->rope_pairing = QMLA_ROPE_HALF;
    } else {
        st = fail(v->err, QMLA_EFORMAT, v->label, "/config",
                  "attribute rope_pairing: expected \"interleaved\" or "
                  "\"half\", found \"%.200s\"", s);
    }
    free(s);
out:
    H5Gclose(g);
    return st;
}

static int cmp_cell(const void *a, const void *b)
{
    return strcmp(((const cell_info *)a)->name, ((const cell_info *)b)->name);
}

static int cmp_layer(const void *a, const void *b)
{
    int x = ((const layer_info *)a)->index, y = ((const layer_info *)b)->index;
    return (x > y) - (x < y);
}

static int validate_cell(const vctx *v, const qmla_capture_config *cfg,
                         hid_t cells, const char *cpath, cell_info *ci)
{
    char path[QMLA_ERRMSG_MAX];
    join(path, sizeof path, cpath, ci->name);
    size_t nlen = strlen(ci->name);
    if (nlen >= sizeof ((qmla_cell *)0)->name)
        return fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected a cell name of at most %zu bytes, found %zu",
                    sizeof ((qmla_cell *)0)->name - 1, nlen);
    hid_t g;
    int st = open_child(v, cells, cpath, ci->name, H5I_GROUP, "a cell group",
                        1, &g);
    if (st)
        return st;
    char *ds = NULL;
    int64_t seed = 0;
    if ((st = read_string_attr(v, g, path, "dataset", 1, &ds)))
        goto out;
    if (strlen(ds) >= sizeof ci->dataset) {
        st = fail(v->err, QMLA_EFORMAT, v->label, path,
                  "attribute dataset: expected at most %zu bytes, found %zu",
                  sizeof ci->dataset - 1, strlen(ds));
        free(ds);
        goto out;
    }
    snprintf(ci->dataset, sizeof ci->dataset, "%s", ds);
    free(ds);
    if ((st = read_int_attr(v, g, path, "seed", 1, &seed, NULL)))
        goto out;
    if (seed < LONG_MIN || seed > LONG_MAX) {
        st = fail(v->err, QMLA_ERANGE, v->label, path,
                  "attribute seed: expected a value that fits a long, "
                  "found %" PRId64, seed);
        goto out;
    }
    ci->seed = (long)seed;

    const hsize_t H = (hsize_t)cfg->H, D = (hsize_t)cfg->D;
    const hsize_t dc = (hsize_t)cfg->d_c, dn = (hsize_t)cfg->d_n;
    const hsize_t dr = (hsize_t)cfg->d_r;
    hsize_t f[H5S_MAX_RANK];
    int present;
    ds_spec first = {"c_kv", 3, {WILD, WILD, dc, 0}, {"N", "T", NULL, NULL}, 0};
    if ((st = check_dataset(v, g, path, &first, 1, &present, f)))
        goto out;
    if (f[0] < 1 || f[1] < 1) {
        char got[96], p2[QMLA_ERRMSG_MAX];
        fmt_dims(got, sizeof got, 3, f, NULL);
        join(p2, sizeof p2, path, "c_kv");
        st = fail(v->err, QMLA_EFORMAT, v->label, p2,
                  "expected N >= 1 and T >= 1, found shape %s", got);
        goto out;
    }
    const hsize_t N = f[0], T = f[1];
    ci->N = (size_t)N;
    ci->T = (size_t)T;
    const ds_spec req[] = {
        {"k_rope", 3, {N, T, dr, 0}, {0}, 0},
        {"q_nope", 4, {N, H, T, dn}, {0}, 0},
        {"q_rope", 4, {N, H, T, dr}, {0}, 0},
        {"attn_out", 3, {N, T, D, 0}, {0}, 0},
        {"positions", 2, {N, T, 0, 0}, {0}, 1},
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if ((st = check_dataset(v, g, path, &req[i], 1, &present, f)))
            goto out;
    const ds_spec opt[] = {
        {"k_rope_pre", 3, {N, T, dr, 0}, {0}, 0},
        {"q_rope_pre", 4, {N, H, T, dr}, {0}, 0},
        {"rope_cos", 3, {N, T, dr / 2, 0}, {0}, 0},
        {"rope_sin", 3, {N, T, dr / 2, 0}, {0}, 0},
        {"hidden_in", 3, {N, T, D, 0}, {0}, 0},
    };
    int has[5];
    for (size_t i = 0; i < 5; i++)
        if ((st = check_dataset(v, g, path, &opt[i], 0, &has[i], f)))
            goto out;
    if (has[0] != has[1]) {
        st = fail(v->err, QMLA_EFORMAT, v->label, path,
                  "expected k_rope_pre and q_rope_pre together, found only "
                  "%s", has[0] ? "k_rope_pre" : "q_rope_pre");
        goto out;
    }
    if (has[2] != has[3]) {
        st = fail(v->err, QMLA_EFORMAT, v->label, path,
                  "expected rope_cos and rope_sin together, found only %s",
                  has[2] ? "rope_cos" : "rope_sin");
        goto out;
    }
    if (has[2] && !has[0]) {
        st = fail(v->err, QMLA_EFORMAT, v->label, path,
                  "expected rope_cos/rope_sin only with k_rope_pre and "
                  "q_rope_pre, found rope_cos and rope_sin without them");
        goto out;
    }
    ci->has_pre = has[0];
    ci->has_cossin = has[2];
    ci->has_hidden = has[4];
out:
    H5Gclose(g);
    return st;
}

/* Parse a canonical decimal layer index ("0", "17"; no sign, no leading
 * zeros). Returns -1 when `s` is not one. */
static int parse_index(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 9 || (n > 1 && s[0] == '0'))
        return -1;
    int x = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        x = x * 10 + (s[i] - '0');
    }
    return x;
}

static int validate_layer(const vctx *v, const qmla_capture_config *cfg,
                          hid_t layers, layer_info *L)
{
    char path[QMLA_ERRMSG_MAX], cpath[QMLA_ERRMSG_MAX];
    join(path, sizeof path, "/layers", L->name);
    L->index = parse_index(L->name);
    if (L->index < 0)
        return fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected a group named by a decimal layer index (no "
                    "sign or leading zeros, below 10^9), found \"%.100s\"",
                    L->name);
    hid_t g;
    int st = open_child(v, layers, "/layers", L->name, H5I_GROUP,
                        "a layer group", 1, &g);
    if (st)
        return st;
    int64_t at = 0;
    hid_t cells = H5I_INVALID_HID;
    char **names = NULL;
    size_t n = 0;
    if ((st = read_int_attr(v, g, path, "layer", 1, &at, NULL)))
        goto out;
    if (at != L->index) {
        st = fail(v->err, QMLA_EFORMAT, v->label, path,
                  "attribute layer: expected %d, found %" PRId64, L->index,
                  at);
        goto out;
    }
    const hsize_t H = (hsize_t)cfg->H, D = (hsize_t)cfg->D;
    const hsize_t dc = (hsize_t)cfg->d_c, dn = (hsize_t)cfg->d_n;
    const hsize_t dv = (hsize_t)cfg->d_v;
    const ds_spec w[] = {
        {"w_uk", 3, {H, dn, dc, 0}, {0}, 0},
        {"w_uv", 3, {H, dv, dc, 0}, {0}, 0},
        {"w_o", 2, {D, H * dv, 0, 0}, {0}, 0},
        {"kv_norm_weight", 1, {dc, 0, 0, 0}, {0}, 0},
    };
    hsize_t f[H5S_MAX_RANK];
    int present;
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        if ((st = check_dataset(v, g, path, &w[i], 1, &present, f)))
            goto out;
    join(cpath, sizeof cpath, path, "cells");
    if ((st = open_child(v, g, path, "cells", H5I_GROUP, "a group of cells",
                         1, &cells)))
        goto out;
    if ((st = list_links(v, cells, cpath, &names, &n)))
        goto out;
    if (n == 0) {
        st = fail(v->err, QMLA_EFORMAT, v->label, cpath,
                  "expected at least one cell group, found none (empty)");
        goto out;
    }
    L->cells = calloc(n, sizeof *L->cells);
    if (!L->cells) {
        st = fail(v->err, QMLA_ENOMEM, v->label, cpath,
                  "expected memory for %zu cells, found none", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        L->cells[i].name = names[i];
        names[i] = NULL;
        L->n_cells = i + 1;
        if ((st = validate_cell(v, cfg, cells, cpath, &L->cells[i])))
            goto out;
    }
    qsort(L->cells, L->n_cells, sizeof *L->cells, cmp_cell);
out:
    free_names(names, n);
    if (cells >= 0)
        H5Gclose(cells);
    H5Gclose(g);
    return st;
}

static void free_model(qmla_capture *c)
{
    for (size_t i = 0; i < c->n_layers; i++) {
        layer_info *L = &c->layers[i];
        for (size_t j = 0; j < L->n_cells; j++)
            free(L->cells[j].name);
        free(L->cells);
        free(L->name);
    }
    free(c->layers);
    c->layers = NULL;
    c->n_layers = 0;
}

static int validate(qmla_capture *c, const vctx *v)
{
    hid_t root = H5Gopen2(c->file, "/", H5P_DEFAULT);
    char h5msg[256];
    if (root < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        return fail(v->err, QMLA_EFORMAT, v->label, "/",
                    "expected a readable root group, found an error (%s)",
                    h5msg);
    }
    hid_t layers = H5I_INVALID_HID;
    char **names = NULL;
    size_t n = 0;
    int st;
    if ((st = validate_root(v, root, &c->cfg)) ||
        (st = validate_config(v, root, &c->cfg)))
        goto out;
    if ((st = open_child(v, root, "/", "layers", H5I_GROUP, "a group", 1,
                         &layers)))
        goto out;
    if ((st = list_links(v, layers, "/layers", &names, &n)))
        goto out;
    if (n == 0) {
        st = fail(v->err, QMLA_EFORMAT, v->label, "/layers",
                  "expected at least one layer group, found none (empty)");
        goto out;
    }
    c->layers = calloc(n, sizeof *c->layers);
    if (!c->layers) {
        st = fail(v->err, QMLA_ENOMEM, v->label, "/layers",
                  "expected memory for %zu layers, found none", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        c->layers[i].name = names[i];
        names[i] = NULL;
        c->n_layers = i + 1;
        if ((st = validate_layer(v, &c->cfg, layers, &c->layers[i])))
            goto out;
    }
    qsort(c->layers, c->n_layers, sizeof *c->layers, cmp_layer);
out:
    free_names(names, n);
    if (layers >= 0)
        H5Gclose(layers);
    H5Gclose(root);
    return st;
}

/* ---- open / close -------------------------------------------------------- */

static hid_t make_lapl(void)
{
    hid_t lapl = H5Pcreate(H5P_LINK_ACCESS);
    if (lapl >= 0 && H5Pset_elink_cb(lapl, deny_elink, NULL) < 0) {
        H5Pclose(lapl);
        lapl = H5I_INVALID_HID;
    }
    return lapl;
}

/* Takes ownership of `file`; on failure closes it. */
static int finish_open(hid_t file, const char *label, qmla_capture **out,
                       qmla_error *err)
{
    qmla_capture *c = calloc(1, sizeof *c);
    char *lab = malloc(strlen(label) + 1);
    hid_t lapl = make_lapl();
    if (!c || !lab || lapl < 0) {
        free(c);
        free(lab);
        if (lapl >= 0)
            H5Pclose(lapl);
        H5Fclose(file);
        return qmla_error_set(err, QMLA_ENOMEM, "%s: expected memory to open "
                              "the capture, found none", label);
    }
    strcpy(lab, label);
    c->file = file;
    c->lapl = lapl;
    c->label = lab;
    vctx v = {lab, lapl, err};
    int st = validate(c, &v);
    if (st) {
        qmla_capture_close(c);
        return st;
    }
    *out = c;
    return QMLA_OK;
}

static hid_t make_fapl(void)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0)
        return fapl;
    H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
    return fapl;
}

int qmla_capture_open(const char *path, qmla_capture **out, qmla_error *err)
{
    if (!out)
        return qmla_error_set(err, QMLA_EINVAL,
                              "qmla_capture_open: expected an output pointer, "
                              "found NULL");
    *out = NULL;
    if (!path)
        return qmla_error_set(err, QMLA_EINVAL,
                              "qmla_capture_open: expected a path, found NULL");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return qmla_error_set(err, QMLA_EIO, "%s: cannot open: expected an "
                              "existing readable file, found: %s", path,
                              strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return qmla_error_set(err, QMLA_EIO, "%s: cannot open: expected a "
                              "regular file, found %s", path,
                              S_ISDIR(sb.st_mode) ? "a directory"
                                                  : "a special file");
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return qmla_error_set(err, QMLA_EIO, "%s: cannot open: expected a "
                              "readable file, found: %s", path,
                              strerror(errno));
    close(fd);

    h5_quiet q = qmla_h5_quiet_begin();
    char h5msg[256];
    int st;
    htri_t is = H5Fis_hdf5(path);
    if (is <= 0) {
        if (is < 0)
            qmla_h5_error_text(h5msg, sizeof h5msg);
        st = is < 0 ? qmla_error_set(err, QMLA_EIO, "%s: cannot open: "
                                     "expected a readable HDF5 file, found "
                                     "an error (%s)", path, h5msg)
                    : qmla_error_set(err, QMLA_EFORMAT, "%s: not an HDF5 "
                                     "file: expected the HDF5 signature, "
                                     "found none (%lld bytes)", path,
                                     (long long)sb.st_size);
        qmla_h5_quiet_end(q);
        return st;
    }
    hid_t fapl = make_fapl();
#if H5_VERSION_GE(1, 10, 7)
    if (fapl >= 0) /* locking where the file system supports it */
        H5Pset_file_locking(fapl, 1, 1);
#endif
    hid_t f = fapl >= 0 ? H5Fopen(path, H5F_ACC_RDONLY, fapl) : -1;
    if (f < 0)
        qmla_h5_error_text(h5msg, sizeof h5msg);
    if (fapl >= 0)
        H5Pclose(fapl);
    if (f < 0) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: cannot open as HDF5: "
                            "expected a complete, readable HDF5 file, found: "
                            "%s", path, h5msg);
        qmla_h5_quiet_end(q);
        return st;
    }
    st = finish_open(f, path, out, err);
    qmla_h5_quiet_end(q);
    return st;
}

static int has_signature(const unsigned char *p, size_t len)
{
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n',
                                         0x1a, '\n'};
    /* the superblock sits at 0, 512, 1024, 2048, ... */
    for (size_t off = 0; off + 8 <= len; off = off ? off * 2 : 512)
        if (memcmp(p + off, sig, 8) == 0)
            return 1;
    return 0;
}

int qmla_capture_open_image(const void *buf, size_t len, const char *label,
                            qmla_capture **out, qmla_error *err)
{
    static atomic_ulong counter;
    if (!out)
        return qmla_error_set(err, QMLA_EINVAL,
                              "qmla_capture_open_image: expected an output "
                              "pointer, found NULL");
    *out = NULL;
    if (!label)
        label = "(image)";
    if (!buf && len)
        return qmla_error_set(err, QMLA_EINVAL, "%s: expected an image "
                              "buffer, found NULL", label);
    if (len < 8 || !has_signature(buf, len))
        return qmla_error_set(err, QMLA_EFORMAT, "%s: not an HDF5 image: "
                              "expected the HDF5 signature, found none (%zu "
                              "bytes)", label, len);
    h5_quiet q = qmla_h5_quiet_begin();
    char h5msg[256], name[96];
    int st;
    hid_t fapl = make_fapl();
    if (fapl < 0 || H5Pset_fapl_core(fapl, 1 << 16, 0) < 0 ||
        H5Pset_file_image(fapl, (void *)buf, len) < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        if (fapl >= 0)
            H5Pclose(fapl);
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: expected to set up an "
                            "in-memory file of %zu bytes, found an error (%s)",
                            label, len, h5msg);
        qmla_h5_quiet_end(q);
        return st;
    }
    /* The core driver refuses an image whose name exists on disk, and two
     * open images of one name would be shared: a unique name under a path
     * that can never exist. */
    snprintf(name, sizeof name, "/dev/null/qmla-capture-image-%lu-%p",
             (unsigned long)atomic_fetch_add(&counter, 1), (const void *)buf);
    hid_t f = H5Fopen(name, H5F_ACC_RDONLY, fapl);
    if (f < 0)
        qmla_h5_error_text(h5msg, sizeof h5msg);
    H5Pclose(fapl);
    if (f < 0) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: cannot open as HDF5: "
                            "expected a complete, readable HDF5 image, found: "
                            "%s", label, h5msg);
        qmla_h5_quiet_end(q);
        return st;
    }
    st = finish_open(f, label, out, err);
    qmla_h5_quiet_end(q);
    return st;
}

void qmla_capture_close(qmla_capture *c)
{
    if (!c)
        return;
    h5_quiet q = qmla_h5_quiet_begin();
    free_model(c);
    if (c->lapl >= 0)
        H5Pclose(c->lapl);
    if (c->file >= 0)
        H5Fclose(c->file);
    qmla_h5_quiet_end(q);
    free(c->label);
    free(c);
}

/* ---- accessors ----------------------------------------------------------- */

const qmla_capture_config *qmla_capture_get_config(const qmla_capture *c)
{
    return c ? &c->cfg : NULL;
}

const char *qmla_capture_path(const qmla_capture *c)
{
    return c ? c->label : NULL;
}

size_t qmla_capture_n_layers(const qmla_capture *c)
{
    return c ? c->n_layers : 0;
}

int qmla_capture_layer_index(const qmla_capture *c, size_t li)
{
    return c && li < c->n_layers ? c->layers[li].index : -1;
}

static const cell_info *get_cell(const qmla_capture *c, size_t li, size_t ci)
{
    if (!c || li >= c->n_layers || ci >= c->layers[li].n_cells)
        return NULL;
    return &c->layers[li].cells[ci];
}

size_t qmla_capture_n_cells(const qmla_capture *c, size_t li)
{
    return c && li < c->n_layers ? c->layers[li].n_cells : 0;
}

const char *qmla_capture_cell_name(const qmla_capture *c, size_t li,
                                   size_t ci)
{
    const cell_info *x = get_cell(c, li, ci);
    return x ? x->name : NULL;
}

size_t qmla_capture_cell_n(const qmla_capture *c, size_t li, size_t ci)
{
    const cell_info *x = get_cell(c, li, ci);
    return x ? x->N : 0;
}

size_t qmla_capture_cell_t(const qmla_capture *c, size_t li, size_t ci)
{
    const cell_info *x = get_cell(c, li, ci);
    return x ? x->T : 0;
}

int qmla_capture_cell_has_pre(const qmla_capture *c, size_t li, size_t ci)
{
    const cell_info *x = get_cell(c, li, ci);
    return x ? x->has_cossin : 0;
}

int qmla_capture_find_layer(const qmla_capture *c, int layer, size_t *li)
{
    for (size_t i = 0; c && i < c->n_layers; i++)
        if (c->layers[i].index == layer) {
            if (li)
                *li = i;
            return 1;
        }
    return 0;
}

int qmla_capture_find_cell(const qmla_capture *c, size_t li, const char *name,
                           size_t *ci)
{
    for (size_t i = 0; name && i < qmla_capture_n_cells(c, li); i++)
        if (strcmp(c->layers[li].cells[i].name, name) == 0) {
            if (ci)
                *ci = i;
            return 1;
        }
    return 0;
}

/* ---- loading ------------------------------------------------------------- */

static void fmt_index(char *buf, size_t cap, size_t flat, int rank,
                      const hsize_t *dims)
{
    hsize_t idx[4] = {0, 0, 0, 0};
    for (int i = rank - 1; i >= 0; i--) {
        idx[i] = dims[i] ? flat % dims[i] : 0;
        flat = dims[i] ? flat / dims[i] : 0;
    }
    fmt_dims(buf, cap, rank, idx, NULL);
}

/* Read dataset `name` of group g (path gpath) with the given shape into a
 * new buffer of `elsize`-byte elements of memory type mt. Float data is
 * scanned for non-finite values. */
static int read_tensor(const qmla_capture *c, hid_t g, const char *gpath,
                       const char *name, int rank, const hsize_t *dims,
                       hid_t mt, size_t elsize, void **out, qmla_error *err)
{
    char path[QMLA_ERRMSG_MAX], h5msg[256], want[128], got[128];
    *out = NULL;
    join(path, sizeof path, gpath, name);
    uint64_t n;
    if (count_elems(dims, rank, &n) < 0 || n > SIZE_MAX / elsize)
        return fail(err, QMLA_ERANGE, c->label, path,
                    "expected at most 2^40 elements, found more");
    vctx v = {c->label, c->lapl, err};
    hid_t d;
    int st = open_child(&v, g, gpath, name, H5I_DATASET, "a dataset", 1, &d);
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
        fmt_dims(want, sizeof want, rank, dims, NULL);
        if (r > 0 && r <= H5S_MAX_RANK)
            fmt_dims(got, sizeof got, r, fd, NULL);
        else
            snprintf(got, sizeof got, "rank %d", r);
        return fail(err, QMLA_EFORMAT, c->label, path,
                    "expected shape %s (as validated at open), found %s",
                    want, got);
    }
    void *buf = malloc(n ? (size_t)n * elsize : 1);
    if (!buf) {
        H5Dclose(d);
        return fail(err, QMLA_ENOMEM, c->label, path,
                    "expected memory for %" PRIu64 " elements, found none", n);
    }
    if (H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        H5Dclose(d);
        free(buf);
        return fail(err, QMLA_EIO, c->label, path,
                    "expected readable data, found a read error (%s)", h5msg);
    }
    H5Dclose(d);
    if (mt == H5T_NATIVE_FLOAT) {
        const float *x = buf;
        for (size_t i = 0; i < (size_t)n; i++) {
            if (!isfinite(x[i])) {
                char at[128];
                fmt_index(at, sizeof at, i, rank, dims);
                st = fail(err, QMLA_ENONFINITE, c->label, path,
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

static int read_f32(const qmla_capture *c, hid_t g, const char *gpath,
                    const char *name, int rank, const hsize_t *dims,
                    float **out, qmla_error *err)
{
    void *p = NULL;
    int st = read_tensor(c, g, gpath, name, rank, dims, H5T_NATIVE_FLOAT,
                         sizeof(float), &p, err);
    *out = p;
    return st;
}

static hid_t open_layer_group(const qmla_capture *c, size_t li, char *path,
                              size_t cap, qmla_error *err, int *st)
{
    char lp[QMLA_ERRMSG_MAX];
    join(lp, sizeof lp, "/layers", c->layers[li].name);
    snprintf(path, cap, "%s", lp);
    vctx v = {c->label, c->lapl, err};
    hid_t layers, g = H5I_INVALID_HID;
    *st = open_child(&v, c->file, "/", "layers", H5I_GROUP, "a group", 1,
                     &layers);
    if (*st)
        return H5I_INVALID_HID;
    *st = open_child(&v, layers, "/layers", c->layers[li].name, H5I_GROUP,
                     "a layer group", 1, &g);
    H5Gclose(layers);
    return g;
}

int qmla_capture_load_layer(qmla_capture *c, size_t li, qmla_layer *out,
                            qmla_error *err)
{
    if (!out)
        return qmla_error_set(err, QMLA_EINVAL, "qmla_capture_load_layer: "
                              "expected an output struct, found NULL");
    memset(out, 0, sizeof *out);
    if (!c || li >= c->n_layers)
        return qmla_error_set(err, QMLA_EINVAL, "%s: load_layer: expected a "
                              "layer position below %zu, found %zu",
                              c ? c->label : "(null capture)",
                              c ? c->n_layers : 0, li);
    h5_quiet q = qmla_h5_quiet_begin();
    char path[QMLA_ERRMSG_MAX];
    int st;
    hid_t g = open_layer_group(c, li, path, sizeof path, err, &st);
    if (st) {
        qmla_h5_quiet_end(q);
        return st;
    }
    const qmla_capture_config *k = &c->cfg;
    const hsize_t H = (hsize_t)k->H, D = (hsize_t)k->D;
    const hsize_t dc = (hsize_t)k->d_c, dn = (hsize_t)k->d_n;
    const hsize_t dv = (hsize_t)k->d_v;
    const hsize_t uk[3] = {H, dn, dc}, uv[3] = {H, dv, dc}, o[2] = {D, H * dv};
    out->layer = c->layers[li].index;
    if ((st = read_f32(c, g, path, "w_uk", 3, uk, &out->w_uk, err)) ||
        (st = read_f32(c, g, path, "w_uv", 3, uv, &out->w_uv, err)) ||
        (st = read_f32(c, g, path, "w_o", 2, o, &out->w_o, err)) ||
        (st = read_f32(c, g, path, "kv_norm_weight", 1, &dc, &out->kv_norm,
                       err)))
        qmla_layer_free(out);
    H5Gclose(g);
    qmla_h5_quiet_end(q);
    return st;
}

void qmla_layer_free(qmla_layer *l)
{
    if (!l)
        return;
    free(l->w_uk);
    free(l->w_uv);
    free(l->w_o);
    free(l->kv_norm);
    l->w_uk = l->w_uv = l->w_o = l->kv_norm = NULL;
}

int qmla_capture_load_cell(qmla_capture *c, size_t li, size_t ci,
                           qmla_cell *out, qmla_error *err)
{
    return qmla_capture_load_cell_parts(c, li, ci, QMLA_CELL_ALL, out, err);
}

int qmla_capture_load_cell_parts(qmla_capture *c, size_t li, size_t ci,
                                 unsigned parts, qmla_cell *out,
                                 qmla_error *err)
{
    if (!out)
        return qmla_error_set(err, QMLA_EINVAL, "qmla_capture_load_cell: "
                              "expected an output struct, found NULL");
    memset(out, 0, sizeof *out);
    const cell_info *x = get_cell(c, li, ci);
    if (!x)
        return qmla_error_set(err, QMLA_EINVAL, "%s: load_cell: expected a "
                              "layer position below %zu and a cell position "
                              "below its cell count, found (%zu, %zu)",
                              c ? c->label : "(null capture)",
                              c ? c->n_layers : 0, li, ci);
    h5_quiet q = qmla_h5_quiet_begin();
    char lpath[QMLA_ERRMSG_MAX], cpath[QMLA_ERRMSG_MAX], path[QMLA_ERRMSG_MAX];
    int st;
    hid_t lg = open_layer_group(c, li, lpath, sizeof lpath, err, &st);
    if (st) {
        qmla_h5_quiet_end(q);
        return st;
    }
    vctx v = {c->label, c->lapl, err};
    hid_t cells = H5I_INVALID_HID, g = H5I_INVALID_HID;
    join(cpath, sizeof cpath, lpath, "cells");
    join(path, sizeof path, cpath, x->name);
    if ((st = open_child(&v, lg, lpath, "cells", H5I_GROUP, "a group of cells",
                         1, &cells)) ||
        (st = open_child(&v, cells, cpath, x->name, H5I_GROUP, "a cell group",
                         1, &g)))
        goto out;
    snprintf(out->name, sizeof out->name, "%s", x->name);
    snprintf(out->dataset, sizeof out->dataset, "%s", x->dataset);
    out->seed = x->seed;
    out->N = x->N;
    out->T = x->T;
    const qmla_capture_config *k = &c->cfg;
    const hsize_t N = x->N, T = x->T, H = (hsize_t)k->H, D = (hsize_t)k->D;
    const hsize_t dc = (hsize_t)k->d_c, dn = (hsize_t)k->d_n;
    const hsize_t dr = (hsize_t)k->d_r;
    const hsize_t ckv[3] = {N, T, dc}, kr[3] = {N, T, dr};
    const hsize_t qn[4] = {N, H, T, dn}, qr[4] = {N, H, T, dr};
    const hsize_t ao[3] = {N, T, D}, pos[2] = {N, T};
    const hsize_t cs[3] = {N, T, dr / 2};
    void *p = NULL;
    if ((st = read_f32(c, g, path, "c_kv", 3, ckv, &out->c_kv, err)) ||
        (st = read_f32(c, g, path, "k_rope", 3, kr, &out->k_rope, err)) ||
        (st = read_f32(c, g, path, "q_nope", 4, qn, &out->q_nope, err)) ||
        (st = read_f32(c, g, path, "q_rope", 4, qr, &out->q_rope, err)) ||
        ((parts & QMLA_CELL_OUTPUT) &&
         (st = read_f32(c, g, path, "attn_out", 3, ao, &out->attn_out, err))) ||
        ((parts & QMLA_CELL_POSITIONS) &&
         (st = read_tensor(c, g, path, "positions", 2, pos, H5T_NATIVE_INT64,
                           sizeof(int64_t), &p, err))))
        goto out;
    out->positions = p;
    if ((parts & QMLA_CELL_PRE) && x->has_pre &&
        ((st = read_f32(c, g, path, "k_rope_pre", 3, kr, &out->k_rope_pre,
                        err)) ||
         (st = read_f32(c, g, path, "q_rope_pre", 4, qr, &out->q_rope_pre,
                        err))))
        goto out;
    if ((parts & QMLA_CELL_PRE) && x->has_cossin &&
        ((st = read_f32(c, g, path, "rope_cos", 3, cs, &out->rope_cos, err)) ||
         (st = read_f32(c, g, path, "rope_sin", 3, cs, &out->rope_sin, err))))
        goto out;
out:
    if (st)
        qmla_cell_free(out);
    if (g >= 0)
        H5Gclose(g);
    if (cells >= 0)
        H5Gclose(cells);
    H5Gclose(lg);
    qmla_h5_quiet_end(q);
    return st;
}

void qmla_cell_free(qmla_cell *cell)
{
    if (!cell)
        return;
    free(cell->c_kv);
    free(cell->k_rope);
    free(cell->q_nope);
    free(cell->q_rope);
    free(cell->attn_out);
    free(cell->positions);
    free(cell->k_rope_pre);
    free(cell->q_rope_pre);
    free(cell->rope_cos);
    free(cell->rope_sin);
    cell->c_kv = cell->k_rope = cell->q_nope = cell->q_rope = NULL;
    cell->attn_out = cell->k_rope_pre = cell->q_rope_pre = NULL;
    cell->rope_cos = cell->rope_sin = NULL;
    cell->positions = NULL;
}
