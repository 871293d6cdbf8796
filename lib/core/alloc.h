/* alloc.h (private) — allocation of large float workspaces (attention arrays,
 * caches). */
#ifndef QMLA_ALLOC_H
#define QMLA_ALLOC_H

#include <stddef.h>

#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 64-byte aligned, and on transparent huge pages (2 MiB, madvise) from
 * 8 MiB up; free with free(). NULL with QMLA_ENOMEM and a message naming
 * `what` on failure. */
void *qmla_alloc_big(size_t bytes, qmla_error *err, const char *what);

/* memcpy of `bytes` bytes in `threads` contiguous blocks on OpenMP threads
 * (serial when threads < 2, the build has no OpenMP or bytes < 1 MiB): the
 * CUDA engine's staging of inputs into pinned buffers. */
void qmla_memcpy_par(void *dst, const void *src, size_t bytes, int threads);

#ifdef __cplusplus
}
#endif
#endif
