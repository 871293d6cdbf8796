/* exec.c — the process-wide BLAS setting and the monotonic clock
 * (include/qmla/exec.h). */
#include "qmla/exec.h"

#include <time.h>

/* OpenBLAS extension (declared in its cblas.h; repeated for other CBLAS). */
void openblas_set_num_threads(int num_threads);

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
