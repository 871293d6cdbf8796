/* cuda_status.cuh (private to kernels/) — the one way a launcher turns a
 * CUDA runtime error into the library's status (include/qmla/status.h):
 * QMLA_EIO with "CUDA: <what>: <cudaGetErrorString>". */
#ifndef QMLA_CUDA_STATUS_CUH
#define QMLA_CUDA_STATUS_CUH

#include <cuda_runtime.h>

#include "qmla/status.h"

static inline int qmla_cuda_fail(qmla_error *err, cudaError_t e, const char *what)
{
    return qmla_error_set(err, QMLA_EIO, "CUDA: %s: %s", what, cudaGetErrorString(e));
}

#endif
