/* kernels/emit_fast.cuh — branch-free code emission for the GPU quantizer
 * kernels (qdq.cu, kvcache.cu): the codes of qmla_core_group_emit
 * (quant_core.h: qmla_core_code_fast per element) without a branch per
 * element.
 *
 * Per element: d = x - l, up = RN(d inv) with inv = RN(1 / s), r = rint(up)
 * (magic-number rounding: (up + 1.5 2^23) - 1.5 2^23, never -0), clamped to
 * [0, L] by fminf / fmaxf (r <= 0 gives 0, r >= L gives L, as
 * qmla_core_code) and packed straight into words
 * (LSB first, as qmla_core_put_code); x^ = fmaf(r, s, l) = qmla_core_dequant.
 * An element outside the fast path's proven range (|up| >= 1024, or up
 * within 2^-11 of a half-integer; about 1 in 700 on random data, see
 * quant_core.h for the proof) is flagged and recomputed afterwards by
 * qmla_core_code, the exact division, exactly as qmla_core_code_fast falls
 * back to it. With s = 0, inv = 0 gives code 0 (qmla_core_code's answer)
 * unless d is not finite, which is flagged. The codes and x^ are therefore
 * bit for bit those of the shared emit loop (test_qdq_cuda, test_decode_cuda).
 */
#ifndef QMLA_EMIT_FAST_CUH
#define QMLA_EMIT_FAST_CUH

#include "qmla/quant_core.h"

#include <stdint.h>

/* The rare exact code, out of line (keeps the callers' registers low). */
__device__ static __noinline__ unsigned qmla_emit_exact_code(float x, float s, float l,
                                                             unsigned L)
{
    return qmla_core_code(x, s, l, L);
}

/* Codes of x[0..N) (B bits each) into w[0 .. (N B + 31) / 32), and x^ into
 * xhat (may be x itself, or nullptr). */
template <int N, int B>
__device__ static inline void qmla_emit_fast(const float *x, float s, float l, uint32_t *w,
                                             float *xhat)
{
    static_assert(32 % B == 0 || N * B <= 32, "codes may not straddle words");
    constexpr unsigned L = (1u << B) - 1u;
    constexpr int NW = (N * B + 31) / 32;
    const float inv = qmla_core_code_inv(s);
#pragma unroll
    for (int i = 0; i < NW; i++)
        w[i] = 0u;
    uint32_t bad = 0u;
    float rc[N];
#pragma unroll
    for (int j = 0; j < N; j++) {
        const float up = __fmul_rn(__fsub_rn(x[j], l), inv);
        const float r = __fsub_rn(__fadd_rn(up, 12582912.0f), 12582912.0f);
        const bool ok = fabsf(up) < 1024.0f && fabsf(__fsub_rn(up, r)) < 0.49951171875f;
        bad |= ok ? 0u : 1u << j;
        rc[j] = fminf(fmaxf(r, 0.0f), (float)L);
        const uint32_t q = (uint32_t)__float_as_int(__fadd_rn(rc[j], 8388608.0f)) & L;
        w[j * B / 32] |= q << ((j * B) % 32);
    }
    if (bad) {
#pragma unroll
        for (int j = 0; j < N; j++)
            if (bad & (1u << j)) {
                const uint32_t q = qmla_emit_exact_code(x[j], s, l, L), sh = (j * B) % 32;
                w[j * B / 32] = (w[j * B / 32] & ~(L << sh)) | (q << sh);
                rc[j] = (float)q;
            }
    }
    if (xhat)
#pragma unroll
        for (int j = 0; j < N; j++)
            xhat[j] = __fmaf_rn(rc[j], s, l); /* qmla_core_dequant: rc is the code as a float */
}

#endif
