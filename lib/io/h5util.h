/* h5util.h (private) — HDF5 helpers shared by the capture reader and writer
 * and the results file:
 *   - checked readers for files we do not trust: links, groups, attributes
 *     and datasets are opened and checked (link and object kind, type class,
 *     a single value, shape, storage inside the file, filters, element count)
 *     with messages "<label>: <object>: expected <what>, found <what>";
 *   - silencing HDF5's automatic error printing for the duration of a
 *     library call (the library never prints), and the most specific message
 *     on HDF5's error stack for our own error messages;
 *   - status-returning attribute and 1-D dataset writers (UTF-8 strings,
 *     `description`/`units` attributes on datasets);
 *   - in-memory files saved atomically: a writer builds the whole file with
 *     HDF5's core driver (no disk I/O inside HDF5, so no half-flushed file and
 *     no failing close left for HDF5's exit handler), then
 *     qmla_h5_save_image() writes the image to PATH.tmp.PID with checked
 *     write()/fsync(), renames it over PATH and fsyncs the directory. Any
 *     failure (ENOSPC, EIO, ...) removes the temporary file and leaves PATH
 *     as it was. */
#ifndef QMLA_H5UTIL_H
#define QMLA_H5UTIL_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "qmla/status.h"

typedef struct h5_quiet {
    H5E_auto2_t fn;
    void *data;
} h5_quiet;

/* Turn HDF5's error printing off; returns the handler to restore. */
h5_quiet qmla_h5_quiet_begin(void);
void qmla_h5_quiet_end(h5_quiet q);

/* A reader's epilogue: closes the group g, the file fh and the link access
 * list lapl (each only where it is a valid id, >= 0), then restores HDF5's
 * error printing (qmla_h5_quiet_end(q)). */
void qmla_h5_read_close(hid_t g, hid_t fh, hid_t lapl, h5_quiet q);

/* The innermost description on HDF5's error stack (the most specific one,
 * e.g. "truncated file: eof = 96, ..."), or "unspecified HDF5 error". */
void qmla_h5_error_text(char *buf, size_t cap);

/* ---- checked readers: expected/found messages ------------------------------ */

/* Where a reader reports (the file's path or an image label) and how it
 * follows links (qmla_h5_make_lapl). */
typedef struct qmla_h5_ctx {
    const char *label;
    hid_t lapl;
    qmla_error *err;
} qmla_h5_ctx;

#define QMLA_H5_WILD ((hsize_t)-1)   /* a dimension of any extent */
#define QMLA_H5_MAX_LINKS 1000000    /* members per group we list */
#define QMLA_H5_MAX_STRING (1 << 20) /* longest string attribute we read */
#define QMLA_H5_MAX_ELEMS (UINT64_C(1) << 40) /* elements per dataset */

/* "<label>: <obj>: <fmt...>" into err; returns status. */
int qmla_h5_fail(qmla_error *err, int status, const char *label,
                 const char *obj, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
/* parent + "/" + name (no doubled slash after "/"); cut short to cap. */
void qmla_h5_join(char *out, size_t cap, const char *parent, const char *name);
/* "[2, 16, 512]"; a QMLA_H5_WILD dimension prints as names[i] when given. */
void qmla_h5_fmt_dims(char *buf, size_t cap, int rank, const hsize_t *d,
                      const char *const *names);
/* "a float", "an integer", ... */
const char *qmla_h5_class_name(H5T_class_t c);
/* Link access property list that refuses to traverse external links. */
hid_t qmla_h5_make_lapl(void);

/* Open child `name` of `loc` (path `ppath`) expecting object kind `want`
 * (described as `expect` in messages): hard or soft links only. *out is the
 * open object, or H5I_INVALID_HID when absent and !required. */
int qmla_h5_open_child(const qmla_h5_ctx *v, hid_t loc, const char *ppath,
                       const char *name, H5I_type_t want, const char *expect,
                       int required, hid_t *out);
/* Names of the links of group g, in name order; free with
 * qmla_h5_free_names. */
int qmla_h5_list_links(const qmla_h5_ctx *v, hid_t g, const char *gpath,
                       char ***names_out, size_t *n_out);
void qmla_h5_free_names(char **names, size_t n);

/* Attribute readers: one value (a scalar or a one-element array). Integers
 * of any integer type (or an enum over one), floats of any float or integer
 * type, strings fixed or variable length (*out malloc'd). *present (may be
 * NULL) = 0 and QMLA_OK when absent and !required. */
int qmla_h5_read_attr_int(const qmla_h5_ctx *v, hid_t obj, const char *opath,
                          const char *name, int required, int64_t *out,
                          int *present);
int qmla_h5_read_attr_dbl(const qmla_h5_ctx *v, hid_t obj, const char *opath,
                          const char *name, int required, double *out,
                          int *present);
int qmla_h5_read_attr_str(const qmla_h5_ctx *v, hid_t obj, const char *opath,
                          const char *name, int required, char **out);

/* Product of the dims into *out; -1 beyond QMLA_H5_MAX_ELEMS. */
int qmla_h5_count_elems(const hsize_t *d, int rank, uint64_t *out);

/* What a dataset must be. */
#define QMLA_H5_SPEC_RANK 4
typedef struct qmla_h5_dspec {
    const char *name;
    int rank;                          /* 1..QMLA_H5_SPEC_RANK */
    hsize_t dims[QMLA_H5_SPEC_RANK];   /* QMLA_H5_WILD: any extent */
    const char *sym[QMLA_H5_SPEC_RANK];/* names of the WILD dims (messages) */
    int integer;                       /* integer class, else float class */
} qmla_h5_dspec;
/* Check dataset s->name in group g (path gpath) without reading it: link
 * and object kind, type class (and a probe conversion to int64/float32),
 * raw data stored inside the file, filters available, rank and shape,
 * element count. found[] receives its dims. *present = 0 when absent and
 * !required. */
int qmla_h5_check_dataset(const qmla_h5_ctx *v, hid_t g, const char *gpath,
                          const qmla_h5_dspec *s, int required, int *present,
                          hsize_t *found);
/* Read dataset `name` of g (path gpath), which must have exactly the shape
 * dims, into a new buffer of `elsize`-byte elements of memory type mt
 * (malloc'd into *out). With mt == H5T_NATIVE_FLOAT the values are scanned
 * and a non-finite one is QMLA_ENONFINITE naming its index. */
int qmla_h5_read_dataset(const qmla_h5_ctx *v, hid_t g, const char *gpath,
                         const char *name, int rank, const hsize_t *dims,
                         hid_t mt, size_t elsize, void **out);

/* ---- writers: 0 on success, -1 on any HDF5 failure (every handle closed,
 * every close checked) ---------------------------------------------------- */

/* Scalar variable-length UTF-8 string attribute (h5py reads it as str). */
int qmla_h5_attr_str(hid_t obj, const char *name, const char *value);
int qmla_h5_attr_int(hid_t obj, const char *name, long long value);
int qmla_h5_attr_dbl(hid_t obj, const char *name, double value);
/* Scalar attribute of file type ftype from a value of memory type mtype. */
int qmla_h5_attr_num(hid_t obj, const char *name, hid_t ftype, hid_t mtype,
                     const void *value);
/* Scalar fixed-length NUL-terminated string attribute, ASCII (UTF-8 when a
 * byte is >= 0x80); h5py reads it as bytes. The capture format's strings. */
int qmla_h5_attr_fixed_str(hid_t obj, const char *name, const char *value);
/* 1-D dataset of n elements (file type ftype, memory type mtype); when
 * `description` / `units` are non-NULL and non-empty they are attached as
 * string attributes of those names. */
int qmla_h5_dset_1d(hid_t g, const char *name, hid_t ftype, hid_t mtype,
                    size_t n, const void *data, const char *description,
                    const char *units);
/* Dataset of rank `rank` and shape dims with creation properties dcpl
 * (H5P_DEFAULT, or chunking/filters). */
int qmla_h5_dset_nd(hid_t g, const char *name, hid_t ftype, hid_t mtype,
                    int rank, const hsize_t *dims, hid_t dcpl,
                    const void *data);
/* 1-D variable-length UTF-8 string dataset (h5py: bytes unless .asstr()). */
int qmla_h5_dset_strs(hid_t g, const char *name, size_t n, const char *const *s,
                      const char *description);

/* ---- in-memory files saved atomically ----------------------------------- */

/* Create an empty in-memory HDF5 file (core driver, no backing store);
 * negative on failure. Close it with qmla_h5_save_image or H5Fclose. */
hid_t qmla_h5_create_mem(void);
/* Flush `f`, write its image to `path` atomically (see above) and close `f`
 * (also on failure). QMLA_EIO with a message naming the file and the cause
 * on failure. */
int qmla_h5_save_image(hid_t f, const char *path, qmla_error *err);
/* A writer's last step: when st is QMLA_OK, qmla_h5_save_image(f, ...);
 * otherwise close f (when open, f >= 0) without saving, leaving PATH as it
 * was. Returns the final status. */
int qmla_h5_finish(hid_t f, int st, const char *path, qmla_error *err);
/* The same save for plain bytes: the n buffers, concatenated, written to
 * PATH.tmp.PID (checked write()/fsync()), renamed over PATH, the directory
 * fsynced; on failure the temporary file is removed and PATH left as it was
 * (QMLA_EIO naming PATH, the temporary file and the reason). */
int qmla_save_bytes_atomic(const char *path, const void *const *bufs,
                           const size_t *lens, size_t n, qmla_error *err);

/* Open `path` as an in-memory copy (core driver, no backing store: nothing
 * reaches disk until qmla_h5_save_image), or create an empty in-memory file
 * (*created = 1) when `path` does not exist or is an empty file; negative
 * with err set on failure: `path` not a regular file, not HDF5, or with a
 * root "format" other than "qmla-results" (a capture, transforms or
 * serve-sim file is not rewritten). Used to add a group to an existing
 * results file atomically. */
hid_t qmla_h5_open_mem(const char *path, int *created, qmla_error *err);

/* Before an HDF5 file is opened for reading: QMLA_ENOENT when `path` does
 * not exist ("PATH: cannot open the WHAT: No such file or directory"),
 * QMLA_EIO when it is a directory or otherwise not a regular file. */
int qmla_h5_check_input(const char *path, const char *what, qmla_error *err);

/* Before a writer replaces `path` with a whole new file: QMLA_OK when it
 * does not exist, is empty, or is an HDF5 file whose root "format" is
 * `format` (an earlier output of the same kind); QMLA_EINVAL naming what
 * was found otherwise (another kind of results, a capture, not HDF5). */
int qmla_h5_check_replace(const char *path, const char *format, qmla_error *err);

/* The one check of an HDF5 call in a writer with `int st`, `qmla_error *err`
 * and `const char *path` in scope and a label `out:`: when x is negative (an
 * HDF5 call failed), st = QMLA_EIO naming the file, what was being written
 * and HDF5's own message, then goto out. */
#define QMLA_H5_TRY(x, what)                                                  \
    do {                                                                      \
        if ((x) < 0) {                                                        \
            char h5m_[256];                                                   \
            qmla_h5_error_text(h5m_, sizeof h5m_);                            \
            st = qmla_error_set(err, QMLA_EIO, "%s: cannot write %s: %s",     \
                                path, what, h5m_);                            \
            goto out;                                                         \
        }                                                                     \
    } while (0)

#endif
