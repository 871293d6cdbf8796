/* qmla/outpath.h — safety of the paths the tools write (results files,
 * captures, journals, temporaries), checked before any work is done.
 *
 * Every writer in qmla replaces its output atomically (a temporary file in
 * the same directory, then rename), so an existing output is replaced, not
 * written through. That is right for a regular file and wrong for anything
 * else: renaming over a device node or FIFO replaces the node; a directory
 * cannot be replaced; writing to the file being read destroys the input.
 * Like every library call these functions never print: they return a
 * status and fill the error record. */
#ifndef QMLA_OUTPATH_H
#define QMLA_OUTPATH_H

#include <stddef.h>

#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Check that `path` may be written (created, or replaced by rename). `what`
 * names its role in the message (e.g. "output file (-o)", "journal").
 * Refused, with QMLA_EINVAL and "<path>: <what>: expected X, found Y":
 *  - an empty path;
 *  - a path that exists (symlinks followed) and is not a regular file: a
 *    directory, character or block device, FIFO or socket;
 *  - the same file as one of `inputs` (same st_dev and st_ino: also a hard
 *    or symbolic link to it), whatever the caller's --force says;
 *  - a path whose directory does not exist, is not a directory or cannot
 *    be written (a read-only directory or file system).
 * `inputs` (n_inputs of them, may be NULL) are files the caller reads; an
 * input that cannot be stat'ed is skipped (its reader reports it).
 * Returns QMLA_OK or QMLA_EINVAL. */
int qmla_output_path_check(const char *path, const char *what,
                           const char *const *inputs, size_t n_inputs,
                           qmla_error *err);

/* "a directory", "a character device", "a FIFO (named pipe)", "a regular
 * file", ... for a stat() st_mode: the "found" of the messages above. */
const char *qmla_path_kind_name(unsigned mode);

/* Remove the temporary files `<path>.tmp.<pid>` (the results writer's
 * naming) that processes which no longer exist left behind: those whose
 * <pid> is all digits, is not this process, and for which kill(pid, 0)
 * fails with ESRCH. Only regular files are removed; a live process's
 * temporary (or one of another user's process: EPERM) is kept. *removed
 * (may be NULL) receives the count. Returns QMLA_OK, or QMLA_EIO when the
 * directory cannot be read or a stale file cannot be removed. */
int qmla_stale_tmp_remove(const char *path, size_t *removed, qmla_error *err);

/* Whether `pid_digits` (the tail of a temporary's name such as
 * "<path>.tmp.<pid>") names a process that no longer exists: 1 when it is
 * 1 to 10 decimal digits, not this process, and kill(pid, 0) fails with
 * ESRCH; 0 otherwise (alive, another user's: EPERM, or not a pid). */
int qmla_tmp_owner_gone(const char *pid_digits);

#ifdef __cplusplus
}
#endif
#endif
