/* kernels/emit_fast.cuh — branch-free code emission for the GPU quantizer
 * kernels (qdq.cu, kvcache.cu): the codes and x^ of qmla_core_group_emit
 * (quant_core.h: qmla_core_code_fast per element) for a whole group held
 * in registers, without a branch per element.
 *
 * Per element (about 10 instructions):
 *   up = RN(RN(x - l) * inv), inv = RN(1 / s)          (FADD, FMUL)
 *   uc = min(max(up, 0), L)                             (2 FMNMX)
 *   t  = uc + 1.5 2^23, r = t - 1.5 2^23 = rint(uc)     (2 FADD)
 *   near-tie flag: |uc - r| >= 0.5 - 2^-11              (FADD, FSETP + LOP)
 *   code: the low mantissa bits of t are r; the word of codes is built as
 *   sum_k bits(t_k) 2^(B k) minus the constant sum_k 0x4b400000 2^(B k)
 *   (mod 2^32; one shift-add per element, no mask)
 *   x^ = fmaf(r, s, l)                                  (qmla_core_dequant)
 * Why this is qmla_core_code: clamping before rounding gives the same
 * integer as clamping after (rint is monotone, 0 and L are integers); for
 * up inside [0, L] (L <= 255 < 1024) quant_core.h's proof of
 * qmla_core_code_fast applies: unless up is within 2^-11 of a
 * half-integer, rint(up) = rint(u) for the CPU's u = RN(d / s). For up
 * outside [0, L] the clamped value is 0 or L, and so is the CPU's code
 * (|up - u| < 2^-12.4 for |up| < 1024; beyond, both are far outside).
 * Flagged elements (about 1 in 700 on random data) are recomputed by
 * qmla_core_code (the exact division), as qmla_core_code_fast does
 * (qmla_emit_fix_codes, qmla_emit_fixed_xhat: a loop over the flags with
 * one call of the division, after the branch-free pass). With
 * s = 0, inv = 0 gives code 0 (qmla_core_code's answer: d is finite
 * whenever the metadata are); an infinite inv (s below 2^-128, f32
 * metadata only) flags the whole group. The codes and x^ are therefore
 * bit for bit those of the shared emit loop (test_qdq_cuda,
 * test_decode_cuda).
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

/* sum_{k < 32/B} 0x4b400000 * 2^(B k) mod 2^32: what the bits of the
 * magic-number sums add to a word of codes besides the codes. */
template <int B>
__host__ __device__ constexpr uint32_t qmla_emit_word_bias()
{
    uint32_t c = 0u;
    for (int k = 0; k < 32 / B; k++)
        c += 0x4b400000u << (B * k);
    return c;
}

/* Codes of the N elements x(0) .. x(N-1) (B in {2, 4, 8} bits, N B a
 * multiple of 32; x: a callable giving element j as float32, with j a
 * constant after unrolling) into the words w[0 .. N B / 32),
 * least-significant bit first as qmla_core_put_code packs them; x^ into
 * xhat[j] when XH (xhat may be the caller's copy of x: x(j) is not read
 * again after xhat[j] is written). The near-ties are flagged in
 * bad[0 .. ceil(N / 32)) (bit j % 32 of word j / 32); their codes and x^
 * are not yet right: qmla_emit_fix_codes, then qmla_emit_fixed_xhat. */
template <int N, int B, bool XH, class X>
__device__ static inline void qmla_emit_fast(X x, float s, float l, uint32_t *w, float *xhat,
                                             uint32_t *bad)
{
    static_assert(B == 2 || B == 4 || B == 8, "codes may not straddle words");
    static_assert((N * B) % 32 == 0, "whole words of codes");
    constexpr unsigned L = (1u << B) - 1u;
    constexpr int PW = 32 / B; /* codes per word */
    constexpr int NW = N * B / 32;
    const float inv = qmla_core_code_inv(s);
#pragma unroll
    for (int i = 0; i < (N + 31) / 32; i++) /* an infinite 1/s: all by the division */
        bad[i] = inv <= 3.402823466e38f ? 0u : (N - 32 * i >= 32 ? 0xffffffffu
                                                                 : (1u << (N % 32)) - 1u);
#pragma unroll
    for (int i = 0; i < NW; i++)
        w[i] = 0u - qmla_emit_word_bias<B>();
#pragma unroll
    for (int j = 0; j < N; j++) {
        const float up = __fmul_rn(__fsub_rn(x(j), l), inv);
        const float uc = fminf(fmaxf(up, 0.0f), (float)L);
        const float t = __fadd_rn(uc, 12582912.0f);
        const float r = __fsub_rn(t, 12582912.0f);
        if (fabsf(__fsub_rn(uc, r)) >= 0.49951171875f) /* 0.5 - 2^-11 */
            bad[j / 32] |= 1u << (j % 32);
        w[j / PW] += __float_as_uint(t) << (B * (j % PW));
        if (XH)
            xhat[j] = __fmaf_rn(r, s, l); /* qmla_core_dequant: r is the code as a float */
    }
}

/* The flagged codes by the exact division (qmla_core_code); xr(j):
 * element j for a run-time j (e.g. reloaded from memory). One call site,
 * a loop over the flags: the common case (no flag) costs a test. */
template <int N, int B, class XR>
__device__ static inline void qmla_emit_fix_codes(const uint32_t *bad, XR xr, float s, float l,
                                                  uint32_t *w)
{
    constexpr unsigned L = (1u << B) - 1u;
    constexpr int PW = 32 / B, NW = N * B / 32;
#pragma unroll
    for (int k = 0; k < (N + 31) / 32; k++)
        for (uint32_t m = bad[k]; m; m &= m - 1u) {
            const int j = 32 * k + __ffs((int)m) - 1, wi = j / PW, sh = B * (j % PW);
            const unsigned q = qmla_emit_exact_code(xr(j), s, l, L);
#pragma unroll
            for (int i = 0; i < NW; i++)
                if (i == wi)
                    w[i] = (w[i] & ~(L << sh)) | (q << sh);
        }
}

/* x^ of the flagged elements, from their (fixed) codes in w: store(j, v)
 * writes v as x^ of element j (after the caller's bulk stores). */
template <int N, int B, class ST>
__device__ static inline void qmla_emit_fixed_xhat(const uint32_t *bad, const uint32_t *w,
                                                   float s, float l, ST store)
{
    constexpr unsigned L = (1u << B) - 1u;
    constexpr int PW = 32 / B, NW = N * B / 32;
#pragma unroll
    for (int k = 0; k < (N + 31) / 32; k++)
        for (uint32_t m = bad[k]; m; m &= m - 1u) {
            const int j = 32 * k + __ffs((int)m) - 1, wi = j / PW, sh = B * (j % PW);
            uint32_t v = 0u;
#pragma unroll
            for (int i = 0; i < NW; i++)
                if (i == wi)
                    v = w[i];
            store(j, __fmaf_rn((float)((v >> sh) & L), s, l));
        }
}

/* Sector-complete access for thread-per-group kernels. Each lane owns n
 * 16-byte chunks at p (32-byte aligned when n > 1; act: the lane has a
 * region). With one lane per region every load or store instruction of a
 * warp would touch half of 32 sectors, which costs DRAM bandwidth (H200
 * run 21: the first thread-per-group writer moved BF16 rows at 42 % of the
 * copy bandwidth, against 76 % for coalesced stores). Here the lanes of a
 * pair (lane, lane ^ 1) move whole sectors: instruction A sector m of the
 * even lane's region (chunk 2m by the even lane, 2m + 1 by the odd one),
 * instruction B that of the odd lane's region, and one 16-byte shuffle
 * per sector hands each lane its own chunks. Every lane of the warp must
 * call (shuffles); n = 1 is a plain access. */
template <int n>
__device__ static inline void qmla_pair_load(const uint4 *p, bool act, uint4 *v)
{
    if constexpr (n == 1) {
        v[0] = act ? __ldg(p) : make_uint4(0u, 0u, 0u, 0u);
    } else {
        static_assert(n % 2 == 0, "whole sectors");
        const bool odd = threadIdx.x & 1u;
        const uint4 *pp = (const uint4 *)__shfl_xor_sync(0xffffffffu, (unsigned long long)p, 1);
        const bool pact = __shfl_xor_sync(0xffffffffu, (int)act, 1) != 0;
        const uint4 *ev = odd ? pp : p, *od = odd ? p : pp;
        const bool eact = odd ? pact : act, oact = odd ? act : pact;
        const uint4 z = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
        for (int m = 0; m < n / 2; m++) {
            const int c = 2 * m + (odd ? 1 : 0);
            const uint4 A = eact ? __ldg(ev + c) : z, Bv = oact ? __ldg(od + c) : z;
            const uint4 give = odd ? A : Bv;
            uint4 got;
            got.x = __shfl_xor_sync(0xffffffffu, give.x, 1);
            got.y = __shfl_xor_sync(0xffffffffu, give.y, 1);
            got.z = __shfl_xor_sync(0xffffffffu, give.z, 1);
            got.w = __shfl_xor_sync(0xffffffffu, give.w, 1);
            v[2 * m] = odd ? got : A;
            v[2 * m + 1] = odd ? Bv : got;
        }
    }
}

template <int n>
__device__ static inline void qmla_pair_store(uint4 *p, bool act, const uint4 *v)
{
    if constexpr (n == 1) {
        if (act)
            *p = v[0];
    } else {
        static_assert(n % 2 == 0, "whole sectors");
        const bool odd = threadIdx.x & 1u;
        uint4 *pp = (uint4 *)__shfl_xor_sync(0xffffffffu, (unsigned long long)p, 1);
        const bool pact = __shfl_xor_sync(0xffffffffu, (int)act, 1) != 0;
        uint4 *ev = odd ? pp : p, *od = odd ? p : pp;
        const bool eact = odd ? pact : act, oact = odd ? act : pact;
#pragma unroll
        for (int m = 0; m < n / 2; m++) {
            const int c = 2 * m + (odd ? 1 : 0);
            const uint4 give = odd ? v[2 * m] : v[2 * m + 1];
            uint4 got;
            got.x = __shfl_xor_sync(0xffffffffu, give.x, 1);
            got.y = __shfl_xor_sync(0xffffffffu, give.y, 1);
            got.z = __shfl_xor_sync(0xffffffffu, give.z, 1);
            got.w = __shfl_xor_sync(0xffffffffu, give.w, 1);
            if (eact)
                ev[c] = odd ? got : v[2 * m];
            if (oact)
                od[c] = odd ? v[2 * m + 1] : got;
        }
    }
}

/* Store NW words of codes at dst (aligned to 4 NW bytes up to 16): one
 * 4-, 8- or 16-byte store, or lane pairs moving whole sectors
 * (qmla_pair_store: every lane of the warp calls). */
template <int NW>
__device__ static inline void qmla_store_words(uint8_t *dst, bool act, const uint32_t *w)
{
    if constexpr (NW == 1) {
        if (act)
            *(uint32_t *)dst = w[0];
    } else if constexpr (NW == 2) {
        if (act)
            *(uint2 *)dst = make_uint2(w[0], w[1]);
    } else {
        static_assert(NW % 4 == 0, "whole 16-byte chunks");
        uint4 v[NW / 4];
#pragma unroll
        for (int i = 0; i < NW / 4; i++)
            v[i] = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
        qmla_pair_store<NW / 4>((uint4 *)dst, act, v);
    }
}

/* Extrema of a group as qmla_core_group_extrema gives them (a zero
 * extremum is +0), from a running NaN-propagating minimum and maximum:
 * returns 0 when a NaN or an infinity was among the values. */
__device__ static inline int qmla_emit_extrema_finish(float mn, float mx, float *lo, float *hi)
{
    if (!qmla_core_isfinite(mn) || !qmla_core_isfinite(mx))
        return 0;
    *lo = __fadd_rn(mn, 0.0f);
    *hi = __fadd_rn(mx, 0.0f);
    return 1;
}

/* NaN-propagating float32 minimum / maximum (PTX min.NaN / max.NaN). */
__device__ static inline float qmla_fmin_nan(float a, float b)
{
    float d;
    asm("min.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}
__device__ static inline float qmla_fmax_nan(float a, float b)
{
    float d;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

#endif
