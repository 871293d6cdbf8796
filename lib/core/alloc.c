/* alloc.c — large aligned workspaces on transparent huge pages
 * (lib/core/alloc.h). */
#include "core/alloc.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

void *qmla_alloc_big(size_t bytes, qmla_error *err, const char *what)
{
    void *p = NULL;
    const size_t huge = (size_t)2 << 20;
    if (bytes == 0)
        bytes = 1;
    /* Large workspaces (T x T attention, caches) on transparent huge pages
     * where the kernel allows it: fewer page faults and TLB misses. */
    const size_t align = bytes >= 4 * huge ? huge : 64;
    if (posix_memalign(&p, align, bytes) != 0) {
        qmla_error_set(err, QMLA_ENOMEM, "cannot allocate %zu bytes for %s",
                       bytes, what);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    if (align == huge)
        (void)madvise(p, (bytes + huge - 1) / huge * huge, MADV_HUGEPAGE);
#endif
    return p;
}

void qmla_memcpy_par(void *dst, const void *src, size_t bytes, int threads)
{
    if (threads < 2 || bytes < ((size_t)1 << 20)) {
        memcpy(dst, src, bytes);
        return;
    }
    const long nb = threads;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long b = 0; b < nb; b++) {
        const size_t a = bytes * (size_t)b / (size_t)nb, e = bytes * (size_t)(b + 1) / (size_t)nb;
        memcpy((char *)dst + a, (const char *)src + a, e - a);
    }
}
