/* exec.c — the process-wide BLAS setting and the monotonic clock
 * (include/qmla/exec.h). */
#include "qmla/exec.h"

#include <time.h>

/* OpenBLAS extension (declared in its cblas.h; repeated for other CBLAS). */
void openblas_set_num_threads(int num_threads);
char *openblas_get_config(void);

static _Atomic int threads_used = 1;

void qmla_exec_note_threads(int threads)
{
    int cur = threads_used;
    while (threads > cur && !__atomic_compare_exchange_n(&threads_used, &cur, threads, 0,
                                                         __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

int qmla_exec_threads_used(void) { return threads_used; }

const char *qmla_blas_info(void)
{
    const char *s = openblas_get_config();
    return s ? s : "";
}

void qmla_blas_set_threads(int threads)
{
    openblas_set_num_threads(threads < 1 ? 1 : threads);
}

double qmla_monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
