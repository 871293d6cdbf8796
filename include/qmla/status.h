/* qmla/status.h — status codes and the error record every library call fills.
 *
 * The library never prints and never exits: a function that can fail returns
 * an int status (QMLA_OK == 0) and, when given a non-NULL qmla_error, writes a
 * message naming what failed (file, group, dataset, expected versus found).
 * The command-line program prints err.msg and maps the status to an exit code.
 */
#ifndef QMLA_STATUS_H
#define QMLA_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum qmla_status {
    QMLA_OK = 0,
    QMLA_EINVAL = 1,     /* bad argument or parameter (caller error) */
    QMLA_EIO = 2,        /* cannot open / read / write a file */
    QMLA_EFORMAT = 3,    /* malformed input: wrong format, shape, attribute */
    QMLA_ENONFINITE = 4, /* NaN or infinity in a tensor that is used */
    QMLA_ERANGE = 5,     /* value does not fit (e.g. float16 metadata overflow) */
    QMLA_ENOMEM = 6,     /* allocation failed */
    QMLA_EMISMATCH = 7,  /* e.g. resume journal written with other parameters */
    QMLA_EINTERNAL = 8,  /* a bug: an invariant did not hold */
    QMLA_ENOENT = 9      /* a file that must exist does not (ENOENT, ENOTDIR) */
};

#define QMLA_ERRMSG_MAX 1024

typedef struct qmla_error {
    int status;                  /* last status written, QMLA_OK if none */
    char msg[QMLA_ERRMSG_MAX];   /* human-readable, NUL-terminated */
} qmla_error;

/* Set err (if non-NULL) to status with a printf-style message; returns status
 * so that callers can write `return qmla_error_set(err, QMLA_EIO, ...)`. */
int qmla_error_set(qmla_error *err, int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* A refusal worded for the command line: sets *refusal = 1 (when non-NULL)
 * and err to QMLA_EINVAL with the message; returns QMLA_EINVAL. The drivers'
 * results carry the flag so that a front end can tell a bad option from a
 * failure of the work. */
int qmla_refuse(int *refusal, qmla_error *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Prefix the existing message with context ("layer 3: " + old message). */
int qmla_error_prefix(qmla_error *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

void qmla_error_clear(qmla_error *err);

/* The status of a failed open/stat/access with errno e: QMLA_ENOENT for
 * ENOENT and ENOTDIR (no such file), QMLA_EIO otherwise. */
int qmla_status_from_errno(int e);

/* Short name of a status ("EFORMAT"); never NULL. */
const char *qmla_status_name(int status);

/* Library version string, e.g. "0.1.0". */
const char *qmla_version(void);

#ifdef __cplusplus
}
#endif
#endif
