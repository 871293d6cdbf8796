/* h5util.h (private) — small HDF5 helpers shared by the capture reader and
 * writer and the results file: silencing HDF5's automatic error printing for
 * the duration of a library call (the library never prints), and the most
 * specific message on HDF5's error stack for our own error messages. */
#ifndef QMLA_H5UTIL_H
#define QMLA_H5UTIL_H

#include <hdf5.h>
#include <stddef.h>

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

#endif
