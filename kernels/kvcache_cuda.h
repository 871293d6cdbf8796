/* kernels/kvcache_cuda.h — the fused cache writer on the GPU (layout:
 * include/qmla/kvcache.h; description: docs/decode.md). For incoming rows
 * [c_kv ; k_rope] (BF16 in qmla_kv_write.kv, or float32 in kv_f32: exactly
 * one, 16-byte aligned) and a slot mapping into the paged pool: quantize
 * (quant_core.h, f16 or q8 metadata as kc->cfg.meta says; q8 compiled but
 * not yet run on a device), pack, insert; keep the BF16 rows of sink
 * tokens (pos < S) and of the window (pos >= seq_len - W, ring row pos % W).
 * A packed copy is written for every token, so a token leaving the window
 * needs no new quantization. Float32 rows are quantized as they are and
 * their BF16 copies (protected rows, BF16 pages) rounded to nearest even.
 * Bit for bit the C twin qmla_kv_write_ref (both row types).
 *
 * All pointers in qmla_kv_cache / qmla_kv_write are device pointers.
 * ws: QMLA_KV_WRITE_WS_BYTES of caller-owned device memory (first failure),
 * set up once by qmla_kv_write_cuda_ws_init before the first launch.
 * Launch validates and enqueues on `stream` (no allocation, no
 * synchronisation, no reset of ws); status synchronises and reports
 * QMLA_ENONFINITE / QMLA_ERANGE naming the first failing token and group (q8
 * range errors: token and path) of
 * the launches since the last status (one launch: as the twin does), and
 * leaves ws ready for the next launch.
 * Test: tests/cache/test_decode_cuda.c (suite cuda).
 */
#ifndef QMLA_KERNELS_KVCACHE_H
#define QMLA_KERNELS_KVCACHE_H

#include <cuda_runtime_api.h>

#include "qmla/decode.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QMLA_KV_WRITE_WS_BYTES 16

int qmla_kv_write_cuda_launch(const qmla_kv_cache *kc, const qmla_kv_write *w, void *ws,
                              cudaStream_t stream, qmla_error *err);
int qmla_kv_write_cuda_ws_init(void *ws, cudaStream_t stream, qmla_error *err);
int qmla_kv_write_cuda_status(const qmla_kv_cache *kc, void *ws, cudaStream_t stream,
                              qmla_error *err);

#ifdef __cplusplus
}
#endif
#endif
