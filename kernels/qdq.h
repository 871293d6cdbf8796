/* kernels/qdq.h — the cache quantizer (docs/quantizer.md, docs/math.md §2)
 * on the GPU: quantize-dequantize of T tokens with packed codes, bit for bit
 * equal to the C reference twin qmla_quant_qdq (lib/quant.c). Both run the
 * per-group arithmetic of include/qmla/quant_core.h.
 *
 * Launcher contract (C API, host code):
 *   x      [T, width]       float32, device memory
 *   codes  [T, code_bytes]  packed as the CPU packs them, device, may be NULL
 *   scale, lo [T, n_groups] stored metadata as float32, device, may be NULL
 *   xhat   [T, width]       device, may be NULL, may alias x
 * Parameters are validated here (qmla_quant_check); the kernels assume
 * valid input. A non-finite value or a metadata overflow is reported as on
 * the CPU (QMLA_ENONFINITE / QMLA_ERANGE naming the first offending token and
 * group); the outputs are then unspecified. q8 metadata is limited to
 * QMLA_QDQ_CUDA_Q8_MAX_GROUPS groups per token.
 * Test: meson test -C build --suite cuda (SKIP without a GPU).
 */
#ifndef QMLA_KERNELS_QDQ_H
#define QMLA_KERNELS_QDQ_H

#include <stddef.h>
#include <stdint.h>

#include "qmla/quant.h"
#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QMLA_QDQ_CUDA_Q8_MAX_GROUPS 64

/* 1 when a CUDA device is usable, else 0 (and err says why). */
int qmla_cuda_available(qmla_error *err);

int qmla_qdq_cuda(const qmla_quant_params *p, const float *x, size_t T,
                  size_t width, uint8_t *codes, float *scale, float *lo,
                  float *xhat, qmla_error *err);

#ifdef __cplusplus
}
#endif
#endif
