/* kernels/qdq_cuda.h — the cache quantizer (docs/math.md §2) on the GPU:
 * quantize, pack and dequantize T tokens, bit for bit equal to the C
 * reference twin qmla_quant_qdq (lib/quant/quant.c). Both run the per-group
 * arithmetic and the per-group emit loop of include/qmla/quant_core.h.
 *
 * Layout (device memory, row-major):
 *   x      [T, width]       float32 input
 *   codes  [T, code_bytes]  packed as the CPU packs them, may be NULL
 *   scale, lo [T, n_groups] stored metadata as float32, may be NULL
 *   xhat   [T, width]       dequantized values, may be NULL, may alias x
 *   ws     QMLA_QDQ_CUDA_WS_BYTES bytes of caller-owned device workspace
 *          (the first failure), set up once by qmla_qdq_cuda_ws_init;
 *          one workspace per call in flight.
 *
 * qmla_qdq_cuda_launch validates the parameters (the kernels assume valid
 * input) and enqueues on `stream` without allocating or synchronising.
 * qmla_qdq_cuda_status synchronises the stream and reports a non-finite
 * value or a metadata overflow as the CPU does (QMLA_ENONFINITE /
 * QMLA_ERANGE naming the first offending token and group of the launches
 * since the last status); the outputs are then unspecified, and ws is
 * ready for the next launch (launch does not reset it). qmla_qdq_cuda does both.
 * Test: meson test -C build --suite cuda (test_qdq_cuda; SKIP without a GPU).
 */
#ifndef QMLA_KERNELS_QDQ_H
#define QMLA_KERNELS_QDQ_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "qmla/quant.h"
#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QMLA_QDQ_CUDA_WS_BYTES 16
/* Widest token row the launcher takes (the range test_qdq_cuda covers). */
#define QMLA_QDQ_CUDA_MAX_WIDTH 8192

/* 1 when a CUDA device is usable, else 0 (and err says why). */
int qmla_cuda_available(qmla_error *err);

int qmla_qdq_cuda_launch(const qmla_quant_params *p, const float *x, size_t T,
                         size_t width, uint8_t *codes, float *scale, float *lo,
                         float *xhat, void *ws, cudaStream_t stream,
                         qmla_error *err);

int qmla_qdq_cuda_status(const qmla_quant_params *p, size_t width,
                         void *ws, cudaStream_t stream, qmla_error *err);
int qmla_qdq_cuda_ws_init(void *ws, cudaStream_t stream, qmla_error *err);

int qmla_qdq_cuda(const qmla_quant_params *p, const float *x, size_t T,
                  size_t width, uint8_t *codes, float *scale, float *lo,
                  float *xhat, void *ws, cudaStream_t stream, qmla_error *err);

#ifdef __cplusplus
}
#endif
#endif
