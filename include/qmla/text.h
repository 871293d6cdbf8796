/* qmla/text.h — a text file, gzip or plain, read whole (lib/io/text.c): the
 * corpora of `qmla capture` and the texts of `qmla ppl`. */
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

#ifdef __cplusplus
}
#endif
#endif
