/* tests/support/cuda_check.h — the harness of the GPU tests and the decode
 * benchmark, after llm.c's dev/cuda/common.h: a CUDA call that fails stops
 * the program naming the call, file and line (CU); a library status that
 * fails does the same with its message (OK); device allocation and upload;
 * and the skip rule (exit 77, meson's SKIP, where no usable GPU is present).
 * Test and benchmark code only: the library and the launchers return
 * statuses (kernels/cuda_status.cuh). */
#ifndef QMLA_TEST_CUDA_CHECK_H
#define QMLA_TEST_CUDA_CHECK_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "qdq_cuda.h"
#include "qmla/status.h"

#define CU(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

#define OK(st, err)                                                                            \
    do {                                                                                       \
        if (st) {                                                                              \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, (err).msg);                     \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* Device memory of n bytes (16 for n = 0, so every buffer has an address). */
static inline void *dalloc(size_t n)
{
    void *p = NULL;
    CU(cudaMalloc(&p, n ? n : 16));
    return p;
}

/* A device copy of n host bytes. */
static inline void *up(const void *h, size_t n)
{
    void *d = dalloc(n);
    if (n)
        CU(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}

/* Exit 77 (SKIP) with the reason when no usable GPU is present. */
static inline void skip_without_gpu(void)
{
    qmla_error err;
    if (!qmla_cuda_available(&err)) {
        printf("SKIP: %s\n", err.msg);
        exit(77);
    }
}

#endif
