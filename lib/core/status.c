/* status.c — the error record (see include/qmla/status.h). */
#include <errno.h>
#include "qmla/status.h"
#include "qmla_config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int qmla_error_set(qmla_error *err, int status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = status;
    }
    return status;
}

int qmla_refuse(int *refusal, qmla_error *err, const char *fmt, ...)
{
    if (refusal)
        *refusal = 1;
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = QMLA_EINVAL;
    }
    return QMLA_EINVAL;
}

int qmla_error_prefix(qmla_error *err, const char *fmt, ...)
{
    if (!err)
        return QMLA_OK;
    char head[QMLA_ERRMSG_MAX], old[QMLA_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    old[sizeof old - 1] = '\0';
    /* head + old, cut to fit msg (what snprintf("%s%s") would give; copied
     * by hand because gcc's -Wformat-truncation flags the intended cut). */
    const size_t cap = sizeof err->msg - 1;
    size_t hl = strlen(head), ol = strlen(old);
    if (hl > cap)
        hl = cap;
    if (ol > cap - hl)
        ol = cap - hl;
    memcpy(err->msg, head, hl);
    memcpy(err->msg + hl, old, ol);
    err->msg[hl + ol] = '\0';
    return err->status;
}

void qmla_error_clear(qmla_error *err)
{
    if (err) {
        err->status = QMLA_OK;
        err->msg[0] = '\0';
    }
}

int qmla_status_from_errno(int e)
{
    return e == ENOENT || e == ENOTDIR ? QMLA_ENOENT : QMLA_EIO;
}

const char *qmla_status_name(int status)
{
    switch (status) {
    case QMLA_OK: return "OK";
    case QMLA_EINVAL: return "EINVAL";
    case QMLA_EIO: return "EIO";
    case QMLA_EFORMAT: return "EFORMAT";
    case QMLA_ENONFINITE: return "ENONFINITE";
    case QMLA_ERANGE: return "ERANGE";
    case QMLA_ENOMEM: return "ENOMEM";
    case QMLA_EMISMATCH: return "EMISMATCH";
    case QMLA_EINTERNAL: return "EINTERNAL";
    case QMLA_ENOENT: return "ENOENT";
    default: return "EUNKNOWN";
    }
}

const char *qmla_version(void) { return QMLA_VERSION; }
