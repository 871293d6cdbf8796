/* cuda_status.cuh (private to kernels/) — the one way a launcher turns a
 * CUDA runtime error into the library's status (include/qmla/status.h):
 * QMLA_EIO with "CUDA: <what>: <cudaGetErrorString>". */
#ifndef QMLA_CUDA_STATUS_CUH
#define QMLA_CUDA_STATUS_CUH

#include <cuda_runtime.h>
#include <stdio.h>

#include "qmla/status.h"

static inline int qmla_cuda_fail(qmla_error *err, cudaError_t e, const char *what)
{
    return qmla_error_set(err, QMLA_EIO, "CUDA: %s: %s", what, cudaGetErrorString(e));
}

/* The failure word of a launcher's workspace (ws: 8-byte code, then the
 * offending float value), written by a kernel that met a value it cannot
 * store; all ones = no failure. Waits for `stream`, reads the word and, when
 * a failure is recorded, re-arms the workspace for the next launch
 * (synchronously). *failed = 0 or 1; a CUDA error comes back as its status,
 * naming `what`. */
#define QMLA_CUDA_NO_FAILURE 0xffffffffffffffffull
static inline int qmla_cuda_failure_word(void *ws, cudaStream_t stream, const char *what,
                                         unsigned long long *code, float *value, int *failed,
                                         qmla_error *err)
{
    *code = QMLA_CUDA_NO_FAILURE;
    *value = 0.0f;
    *failed = 0;
    cudaError_t e = cudaStreamSynchronize(stream);
    if (e == cudaSuccess)
        e = cudaMemcpy(code, ws, sizeof *code, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess)
        e = cudaMemcpy(value, (const unsigned long long *)ws + 1, sizeof *value,
                       cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        return qmla_cuda_fail(err, e, what);
    if (*code == QMLA_CUDA_NO_FAILURE)
        return QMLA_OK;
    *failed = 1;
    if ((e = cudaMemset(ws, 0xff, sizeof(unsigned long long))) != cudaSuccess) {
        char w[96];
        snprintf(w, sizeof w, "%s: cudaMemset", what);
        return qmla_cuda_fail(err, e, w);
    }
    return QMLA_OK;
}

#endif
