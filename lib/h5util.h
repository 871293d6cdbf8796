/* h5util.h (private) — HDF5 helpers shared by the capture reader and writer
 * and the results file:
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

#include "qmla/status.h"

typedef struct h5_quiet {
    H5E_auto2_t fn;
    void *data;
} h5_quiet;

/* Turn HDF5's error printing off; returns the handler to restore. */
h5_quiet qmla_h5_quiet_begin(void);
void qmla_h5_quiet_end(h5_quiet q);

/* The innermost description on HDF5's error stack (the most specific one,
 * e.g. "truncated file: eof = 96, ..."), or "unspecified HDF5 error". */
void qmla_h5_error_text(char *buf, size_t cap);

/* ---- writers: 0 on success, -1 on any HDF5 failure (every handle closed,
 * every close checked) ---------------------------------------------------- */

/* Scalar variable-length UTF-8 string attribute (h5py reads it as str). */
int qmla_h5_attr_str(hid_t obj, const char *name, const char *value);
int qmla_h5_attr_int(hid_t obj, const char *name, long long value);
int qmla_h5_attr_dbl(hid_t obj, const char *name, double value);
/* 1-D dataset of n elements (file type ftype, memory type mtype); when
 * `description` / `units` are non-NULL and non-empty they are attached as
 * string attributes of those names. */
int qmla_h5_dset_1d(hid_t g, const char *name, hid_t ftype, hid_t mtype,
                    size_t n, const void *data, const char *description,
                    const char *units);
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

/* Open `path` as an in-memory copy (core driver, no backing store: nothing
 * reaches disk until qmla_h5_save_image), or create an empty in-memory file
 * (*created = 1) when `path` does not exist; negative with err set on
 * failure. Used to add a group to an existing results file atomically. */
hid_t qmla_h5_open_mem(const char *path, int *created, qmla_error *err);

#endif
