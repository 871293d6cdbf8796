/* qmla/text.h — a text file, gzip or plain, read whole (lib/io/text.c): the
 * corpora of `qmla capture` and the texts of `qmla ppl`; comma lists. */
#ifndef QMLA_TEXT_H
#define QMLA_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The whole file into *out (malloc'ed, *n bytes), through zlib's gzread
 * (which reads plain files too). QMLA_EIO ("PATH: cannot open: why"),
 * QMLA_EFORMAT for a truncated gzip stream, QMLA_ENOMEM. */
int qmla_text_read(const char *path, uint8_t **out, size_t *n, qmla_error *err);

/* Write the len bytes of buf to `path` as a text output (qmla export -o,
 * the data files of qmla figures): checked first like every writer's
 * output (qmla_output_path_check with `what` and the inputs: not a
 * directory, device, FIFO or one of the inputs) and refused when `path` is
 * an existing HDF5 file (a capture, results or transforms file would be
 * replaced by text), then written to a temporary in the same folder and
 * renamed into place: on failure `path` is left as it was. QMLA_EINVAL
 * (refused), QMLA_EIO naming the file and the cause (strerror). */
int qmla_text_save(const char *path, const char *what, const char *const *inputs,
                   size_t n_inputs, const void *buf, size_t len, qmla_error *err);

/* Before reading `path` as a text: QMLA_OK for a regular file (or a path
 * that cannot be examined: qmla_text_read reports it); otherwise QMLA_EINVAL
 * with "PATH: WHAT: expected a regular file (plain or gzip text), found a
 * FIFO (named pipe)" and the like. A FIFO blocks the read until a writer
 * comes; a device may never end. */
int qmla_text_check_input(const char *path, const char *what, qmla_error *err);

/* Split a comma-separated list: *buf a copy of s (cut in place), *out
 * [*n] pointers into it (empty items skipped); free both. -1 when the list
 * has no item or memory runs out (*out and *buf may then be set: free
 * them), 0 otherwise. */
int qmla_split_list(const char *s, char ***out, size_t *n, char **buf);

#ifdef __cplusplus
}
#endif
#endif
