/* exec.c — the process-wide BLAS setting (include/qmla/exec.h). */
#include "qmla/exec.h"

/* OpenBLAS extension (declared in its cblas.h; repeated for other CBLAS). */
void openblas_set_num_threads(int num_threads);

void qmla_blas_set_threads(int threads)
{
    openblas_set_num_threads(threads < 1 ? 1 : threads);
}
