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

/* Split a comma-separated list: *buf a copy of s (cut in place), *out
 * [*n] pointers into it (empty items skipped); free both. -1 when the list
 * has no item or memory runs out (*out and *buf may then be set: free
 * them), 0 otherwise. */
int qmla_split_list(const char *s, char ***out, size_t *n, char **buf);

#ifdef __cplusplus
}
#endif
#endif
