/* qmla/quant_core.h — the per-group arithmetic of the cache quantizer
 * (docs/math.md §2, docs/quantizer.md), shared verbatim by the C library
 * (lib/quant/quant.c), the CUDA kernels (kernels/) and the tests.
 *
 * Everything here is `static inline` and marked QMLA_HD, which is
 * `__host__ __device__` under nvcc and empty otherwise, so one definition
 * compiles for the CPU and the GPU. No allocation, no libc beyond <math.h>
 * (rintf, fmaf on the host); <stddef.h>/<stdint.h> for types only.
 *
 * For one group x[0..n) and b bits, L = 2^b - 1:
 *   lo    = min(x), hi = max(x)     (a zero extremum is taken as +0)
 *   scale = (hi - lo) / L           float32, true IEEE division
 *   scale and lo are rounded to the metadata precision (f16: round to
 *   nearest even; f32: unchanged); the *stored* values s, l are used below;
 *   q     = 0                                       if s == 0
 *         = clamp(rint((x - l) / s), 0, L)          otherwise
 *   x^    = fmaf(q, s, l)
 *
 * Bit-exactness between CPU and GPU rests on:
 *   - the division: IEEE `/` on the host (no -ffast-math, no reciprocal);
 *     `__fdiv_rn` on the device, which stays correctly rounded even under
 *     nvcc -prec-div=false / --use_fast_math;
 *   - round half to even: `rintf` in the default rounding mode
 *     (FE_TONEAREST) on the host; CUDA's device `rintf` rounds halfway cases
 *     to the nearest even integer by definition (CUDA Math API);
 *   - the dequantisation: one fused multiply-add, `fmaf` on the host,
 *     `__fmaf_rn` on the device. No expression below has the form a*b + c,
 *     so no compiler contraction can change a result; lib/quant/quant.c is
 *     nevertheless built with -ffp-contract=off;
 *   - no flush-to-zero: float32 subnormals must be kept (do not build the
 *     kernels with -ftz=true or --use_fast_math, which implies it);
 *   - float32 <-> float16 conversion done here with integer operations, not
 *     with hardware or compiler conversions whose rounding or overflow
 *     behaviour could differ.
 *
 * Packing: element j of a group at bit offset b*j from the group's first
 * byte, least-significant bit first; a 3-bit code may straddle two bytes.
 * A group of n codes takes ceil(n*b/8) bytes.
 */
#ifndef QMLA_QUANT_CORE_H
#define QMLA_QUANT_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <math.h>

#ifdef __CUDACC__
#define QMLA_HD __host__ __device__
#else
#define QMLA_HD
#endif

/* Metadata precisions; the values equal qmla_meta in qmla/quant.h. */
#define QMLA_CORE_META_F16 0
#define QMLA_CORE_META_F32 1
#define QMLA_CORE_META_Q8 2 /* compact, per token: see qmla_core_token_meta_q8 */

/* Outcomes of qmla_core_group_meta / qmla_core_group_quant. */
#define QMLA_CORE_OK 0
#define QMLA_CORE_NONFINITE 1   /* a NaN or infinity in the group */
#define QMLA_CORE_LO_RANGE 2    /* lo does not fit the metadata precision */
#define QMLA_CORE_SCALE_RANGE 3 /* scale does not fit the metadata precision */

#define QMLA_F16_MAX 65504.0f

/* ---- bit casts ----------------------------------------------------------- */

QMLA_HD static inline uint32_t qmla_core_f32_bits(float x)
{
#if defined(__CUDA_ARCH__)
    return (uint32_t)__float_as_uint(x);
#elif defined(__GNUC__) || defined(__clang__)
    uint32_t u;
    __builtin_memcpy(&u, &x, sizeof u);
    return u;
#else
    union { float f; uint32_t u; } v; /* C11 6.5.2.3: defined in C */
    v.f = x;
    return v.u;
#endif
}

QMLA_HD static inline float qmla_core_bits_f32(uint32_t u)
{
#if defined(__CUDA_ARCH__)
    return __uint_as_float((unsigned int)u);
#elif defined(__GNUC__) || defined(__clang__)
    float x;
    __builtin_memcpy(&x, &u, sizeof x);
    return x;
#else
    union { float f; uint32_t u; } v;
    v.u = u;
    return v.f;
#endif
}

/* 1 when x is neither NaN nor an infinity. */
QMLA_HD static inline int qmla_core_isfinite(float x)
{
    return (qmla_core_f32_bits(x) & 0x7f800000u) != 0x7f800000u;
}

/* ---- float16 ------------------------------------------------------------- */

/* float32 -> IEEE binary16 bits, round to nearest, ties to even.
 * Subnormal results are produced exactly (no flush to zero); |x| <= 2^-25
 * gives a signed zero. A finite x that rounds to infinity (|x| >= 65520)
 * returns +-inf and sets *overflow = 1 (overflow may be NULL; it is never
 * cleared). Infinities map to infinities without the flag; a NaN maps to a
 * quiet NaN keeping the sign and the top 10 payload bits. */
QMLA_HD static inline uint16_t qmla_core_f32_to_f16(float x, int *overflow)
{
    uint32_t f = qmla_core_f32_bits(x);
    uint16_t sign = (uint16_t)((f >> 16) & 0x8000u);
    uint32_t a = f & 0x7fffffffu;

    if (a >= 0x7f800000u) { /* inf or NaN */
        if (a == 0x7f800000u)
            return (uint16_t)(sign | 0x7c00u);
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    }
    if (a >= 0x477ff000u) { /* >= 65520 = halfway 65504..65536: rounds to inf */
        if (overflow)
            *overflow = 1;
        return (uint16_t)(sign | 0x7c00u);
    }
    if (a >= 0x38800000u) { /* >= 2^-14: normal float16 */
        /* Add just under half an ulp (0xfff) plus the ulp's parity bit so
         * that exact halves round to even; a carry out of the mantissa
         * correctly bumps the exponent. Then rebias 127 -> 15. */
        uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
        return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
    }
    if (a <= 0x33000000u) /* <= 2^-25: zero (2^-25 itself is a tie to 0) */
        return sign;
    {
        /* Subnormal float16: value = m16 * 2^-24. With m the 24-bit
         * significand and e the biased exponent (102..112), x = m * 2^(e-150),
         * so m16 = m >> (126 - e), rounded to nearest even. m16 may become
         * 0x400, which is exactly the smallest normal encoding. */
        uint32_t e = a >> 23;
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t sh = 126u - e; /* 14..24 */
        uint32_t q = m >> sh;
        uint32_t rem = m & ((1u << sh) - 1u);
        uint32_t half = 1u << (sh - 1u);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
}

/* IEEE binary16 bits -> float32 (exact). */
QMLA_HD static inline float qmla_core_f16_to_f32(uint16_t h)
{
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t e = ((uint32_t)h >> 10) & 0x1fu;
    uint32_t m = (uint32_t)h & 0x3ffu;
    uint32_t f;
    if (e == 0x1fu) {
        f = sign | 0x7f800000u | (m << 13);
    } else if (e != 0) {
        f = sign | ((e + 112u) << 23) | (m << 13);
    } else if (m == 0) {
        f = sign;
    } else { /* subnormal: normalise */
        uint32_t ee = 113u; /* biased float32 exponent of 2^-14 */
        while (!(m & 0x400u)) {
            m <<= 1;
            ee--;
        }
        f = sign | (ee << 23) | ((m & 0x3ffu) << 13);
    }
    return qmla_core_bits_f32(f);
}

/* Round v to the metadata precision and return it as float32. Sets
 * *overflow = 1 when a finite v does not fit (f16: rounds to infinity;
 * f32: v is infinite). */
QMLA_HD static inline float qmla_core_meta_round(float v, int meta, int *overflow)
{
    if (meta == QMLA_CORE_META_F32) {
        if (!qmla_core_isfinite(v))
            *overflow = 1;
        return v;
    }
    {
        int ovf = 0;
        uint16_t h = qmla_core_f32_to_f16(v, &ovf);
        if (ovf || !qmla_core_isfinite(v))
            *overflow = 1;
        return qmla_core_f16_to_f32(h);
    }
}

/* ---- scalar pieces of the definition ------------------------------------- */

/* Round to nearest integer, halfway cases to even. Host: rintf, which
 * honours the current rounding mode; the library assumes the default
 * FE_TONEAREST. Device: rintf rounds halfway cases to even. */
QMLA_HD static inline float qmla_core_round_half_even(float u)
{
    return rintf(u);
}

/* L = 2^bits - 1. */
QMLA_HD static inline unsigned qmla_core_levels(int bits)
{
    return (1u << bits) - 1u;
}

/* Code of one element against stored metadata (s, l), levels L. */
QMLA_HD static inline unsigned qmla_core_code(float x, float s, float l,
                                              unsigned L)
{
    float u, r;
    if (s == 0.0f)
        return 0u;
#ifdef __CUDA_ARCH__
    u = __fdiv_rn(__fsub_rn(x, l), s);
#else
    u = (x - l) / s;
#endif
    r = qmla_core_round_half_even(u);
    if (!(r > 0.0f)) /* also catches NaN, which valid input never gives */
        return 0u;
    if (r >= (float)L)
        return L;
    return (unsigned)r;
}

/* The same code as qmla_core_code, computed on the GPU without the IEEE
 * division in almost every case (the host calls qmla_core_code).
 * inv = __frcp_rn(s) (correctly rounded), d = x - l (exact as above),
 * up = RN(d * inv). With Q = d / s exactly, |up - Q| <= |Q| 2^-23 (two
 * roundings of 2^-24) and the CPU's u = RN(Q) has |u - Q| <= |Q| 2^-24, so
 * |up - u| < 2^-12.4 when |up| < 1024. If up is farther than 2^-11 from
 * every half-integer, u and up round to the same integer and neither is a
 * tie: rint(up) is the CPU's rint(u). Otherwise (a near-tie, or a large
 * quotient) the IEEE division decides. Rounding and the float -> unsigned
 * step use the 1.5 * 2^23 / 2^23 magic numbers (exact for |v| < 2^22).
 * Bit-identity with the CPU is tested in tests/cache/test_qdq_cuda.c. */
QMLA_HD static inline unsigned qmla_core_code_fast(float x, float s, float l,
                                                   float inv, unsigned L)
{
#ifdef __CUDA_ARCH__
    if (s != 0.0f) {
        const float d = __fsub_rn(x, l);
        const float up = __fmul_rn(d, inv);
        const float r = __fsub_rn(__fadd_rn(up, 12582912.0f), 12582912.0f);
        const float f = __fsub_rn(up, r);
        if (fabsf(up) < 1024.0f && fabsf(f) < 0.49951171875f /* 0.5 - 2^-11 */) {
            if (!(r > 0.0f))
                return 0u;
            if (r >= (float)L)
                return L;
            return (unsigned)__float_as_int(__fadd_rn(r, 8388608.0f)) & 0x7fffffu;
        }
    }
#else
    (void)inv;
#endif
    return qmla_core_code(x, s, l, L);
}

/* inv for qmla_core_code_fast: 1/s correctly rounded on the GPU (unused on
 * the host). */
QMLA_HD static inline float qmla_core_code_inv(float s)
{
#ifdef __CUDA_ARCH__
    return s != 0.0f ? __frcp_rn(s) : 0.0f;
#else
    (void)s;
    return 0.0f;
#endif
}

/* x^ = fmaf(q, s, l), one rounding. */
QMLA_HD static inline float qmla_core_dequant(unsigned q, float s, float l)
{
#ifdef __CUDA_ARCH__
    return __fmaf_rn((float)q, s, l);
#else
    return fmaf((float)q, s, l);
#endif
}

/* Extrema of one group x[0..n), n >= 1, with a zero extremum taken as +0
 * (-0 + +0 = +0 under round-to-nearest, so the result does not depend on
 * the order of a (parallel) reduction over -0 and +0, and hi - lo is never
 * -0). Returns QMLA_CORE_OK, or QMLA_CORE_NONFINITE with *bad = the first
 * non-finite element. */
QMLA_HD static inline int qmla_core_group_extrema(const float *x, size_t n,
                                                  float *lo, float *hi,
                                                  float *bad)
{
    float mn = x[0], mx = x[0];
    size_t j;
    for (j = 0; j < n; j++) {
        float v = x[j];
        if (!qmla_core_isfinite(v)) {
            *bad = v;
            return QMLA_CORE_NONFINITE;
        }
        if (v < mn)
            mn = v;
        if (v > mx)
            mx = v;
    }
#ifdef __CUDA_ARCH__
    *lo = __fadd_rn(mn, 0.0f);
    *hi = __fadd_rn(mx, 0.0f);
#else
    *lo = mn + 0.0f;
    *hi = mx + 0.0f;
#endif
    return QMLA_CORE_OK;
}

/* Stored metadata of a group from its extrema mn, mx (finite, as
 * qmla_core_group_extrema gives them): *scale and *lo, or
 *   QMLA_CORE_LO_RANGE    with *bad = lo (float32) that does not fit,
 *   QMLA_CORE_SCALE_RANGE with *bad = scale (float32) that does not fit. */
QMLA_HD static inline int qmla_core_group_meta_from_extrema(float mn, float mx,
                                                            int bits, int meta,
                                                            float *scale,
                                                            float *lo,
                                                            float *bad)
{
    float sc;
    int ovf = 0;
#ifdef __CUDA_ARCH__
    sc = __fdiv_rn(__fsub_rn(mx, mn), (float)qmla_core_levels(bits));
#else
    sc = (mx - mn) / (float)qmla_core_levels(bits);
#endif
    *lo = qmla_core_meta_round(mn, meta, &ovf);
    if (ovf) {
        *bad = mn;
        return QMLA_CORE_LO_RANGE;
    }
    *scale = qmla_core_meta_round(sc, meta, &ovf);
    if (ovf) {
        *bad = sc;
        return QMLA_CORE_SCALE_RANGE;
    }
    return QMLA_CORE_OK;
}

/* Stored metadata of one group x[0..n), n >= 1.
 * Writes *scale and *lo (float32 values exactly representable in the
 * metadata precision) and returns QMLA_CORE_OK, or returns
 *   QMLA_CORE_NONFINITE   with *bad = the first non-finite element,
 *   QMLA_CORE_LO_RANGE    with *bad = lo (float32) that does not fit,
 *   QMLA_CORE_SCALE_RANGE with *bad = scale (float32) that does not fit
 * (checked in this order; *scale and *lo are then unspecified). */
QMLA_HD static inline int qmla_core_group_meta(const float *x, size_t n,
                                               int bits, int meta,
                                               float *scale, float *lo,
                                               float *bad)
{
    float mn, mx;
    if (qmla_core_group_extrema(x, n, &mn, &mx, bad) != QMLA_CORE_OK)
        return QMLA_CORE_NONFINITE;
    return qmla_core_group_meta_from_extrema(mn, mx, bits, meta, scale, lo,
                                             bad);
}

/* Quantize one group x[0..n): stored metadata as qmla_core_group_meta, then
 * codes[j] (unpacked, one per byte; may be NULL) and xhat[j] (may be NULL,
 * may alias x). Returns as qmla_core_group_meta; on error nothing is written
 * to codes or xhat. */
QMLA_HD static inline int qmla_core_group_quant(const float *x, size_t n,
                                                int bits, int meta,
                                                float *scale, float *lo,
                                                uint8_t *codes, float *xhat,
                                                float *bad)
{
    unsigned L = qmla_core_levels(bits);
    float s, l;
    size_t j;
    int st = qmla_core_group_meta(x, n, bits, meta, &s, &l, bad);
    if (st != QMLA_CORE_OK)
        return st;
    for (j = 0; j < n; j++) {
        unsigned q = qmla_core_code(x[j], s, l, L);
        if (codes)
            codes[j] = (uint8_t)q;
        if (xhat)
            xhat[j] = qmla_core_dequant(q, s, l);
    }
    *scale = s;
    *lo = l;
    return QMLA_CORE_OK;
}

/* ---- compact metadata "q8" (per token) ----------------------------------
 *
 * Storage: per token and path, two float16 super-scales S and M, and per
 * group an unsigned 8-bit step code sc_g and a signed 8-bit minimum code
 * m_g: 4 + 2 * n_groups bytes (f16 metadata: 4 * n_groups). The stored
 * per-group step and minimum are products, exact in float32:
 *   s_g = sc_g * S,   l_g = m_g * M.
 * Derivation, for the groups' minima lo_g and maxima hi_g (as above):
 *   M   = the smallest float16 >= max_g |lo_g| / 127
 *   m_g = clamp(floor(lo_g / M), -128, 127)      (0 when M = 0)
 *   s'_g = (hi_g - l_g) / L                      (the step the group needs)
 *   S   = the smallest float16 >= max_g s'_g / 255
 *   sc_g = min(255, ceil(s'_g / S))              (0 when S = 0)
 * Rounding M and S up, m_g down and sc_g up keeps [l_g, l_g + L s_g]
 * around the group's values (up to the rounding of the divisions), so
 * codes and x^ then follow the definition above with (s_g, l_g). */

/* Smallest float16 >= v, for finite v >= 0 (as float32); sets *overflow
 * when it does not exist (v > 65504). */
QMLA_HD static inline float qmla_core_f16_up(float v, int *overflow)
{
    int ovf = 0;
    uint16_t h = qmla_core_f32_to_f16(v, &ovf);
    float r = qmla_core_f16_to_f32(h);
    if (!ovf && r < v) {
        h = (uint16_t)(h + 1u); /* next float16 up (v >= 0) */
        r = qmla_core_f16_to_f32(h);
        if (h >= 0x7c00u)
            ovf = 1;
    }
    if (ovf)
        *overflow = 1;
    return r;
}

/* The steps of the q8 derivation for one group, shared by
 * qmla_core_token_meta_q8_finish (one thread per token) and GPU writers
 * that keep one group per thread (kernels/kvcache.cu) and reduce the
 * path's maxima across threads (a maximum is exact in any order).
 * qmla_core_q8_super: a super-scale, the smallest float16 >= vmax / div
 * (div 127 for M, 255 for S; vmax >= 0), *overflow set when none exists. */
QMLA_HD static inline float qmla_core_q8_super(float vmax, float div, int *overflow)
{
#ifdef __CUDA_ARCH__
    return qmla_core_f16_up(__fdiv_rn(vmax, div), overflow);
#else
    return qmla_core_f16_up(vmax / div, overflow);
#endif
}

/* The minimum code of a group with extrema lo, hi under the minimum
 * super-scale Mf (as float: clamp(floor(lo / Mf), -128, 127), 0 when
 * Mf = 0) into *mcode; returns the stored minimum l = m * Mf and writes the
 * step the group needs, s' = (hi - l) / Lf, into *need. */
QMLA_HD static inline float qmla_core_q8_min(float lo, float hi, float Mf, float Lf,
                                             float *mcode, float *need)
{
    float m = 0.0f, l;
    if (Mf > 0.0f) {
#ifdef __CUDA_ARCH__
        m = floorf(__fdiv_rn(lo, Mf));
#else
        m = floorf(lo / Mf);
#endif
        m = m < -128.0f ? -128.0f : (m > 127.0f ? 127.0f : m);
    }
    *mcode = m;
#ifdef __CUDA_ARCH__
    l = __fmul_rn(m, Mf);
    *need = __fdiv_rn(__fsub_rn(hi, l), Lf);
#else
    l = m * Mf;
    *need = (hi - l) / Lf;
#endif
    return l;
}

/* The step code of a group needing step `need` under the step
 * super-scale Sf (as float: min(255, ceil(need / Sf)), 0 when Sf = 0) into
 * *ccode; returns the stored step s = c * Sf. */
QMLA_HD static inline float qmla_core_q8_step(float need, float Sf, float *ccode)
{
    float c = 0.0f;
    if (Sf > 0.0f) {
#ifdef __CUDA_ARCH__
        c = ceilf(__fdiv_rn(need, Sf));
#else
        c = ceilf(need / Sf);
#endif
        c = c > 255.0f ? 255.0f : c;
    }
    *ccode = c;
#ifdef __CUDA_ARCH__
    return __fmul_rn(c, Sf);
#else
    return c * Sf;
#endif
}

/* q8 metadata of one token from its groups' extrema: on entry lo[g] and
 * scale[g] hold the minimum and maximum of group g (as
 * qmla_core_group_extrema gives them, all finite), g < ng; on return they
 * hold the stored step s_g and minimum l_g (float32), and, where not NULL,
 * sc[g], mq[g], *S16, *M16 the stored fields. Returns QMLA_CORE_OK, or
 *   QMLA_CORE_LO_RANGE    with *bad = max |lo_g| (M would exceed float16),
 *   QMLA_CORE_SCALE_RANGE with *bad = max s'_g (S would exceed float16).
 * Split from qmla_core_token_meta_q8 so that a GPU block can find the group
 * extrema with one thread per group and finish each token with one thread
 * (or, with the per-group steps above, one thread per group). */
QMLA_HD static inline int qmla_core_token_meta_q8_finish(
    size_t ng, int bits, float *scale, float *lo, uint8_t *sc, int8_t *mq,
    uint16_t *S16, uint16_t *M16, float *bad)
{
    const float Lf = (float)qmla_core_levels(bits);
    float amax = 0.0f, smax = 0.0f, Mf, Sf;
    int ovf = 0;
    size_t g;
    for (g = 0; g < ng; g++)
        if (fabsf(lo[g]) > amax)
            amax = fabsf(lo[g]);
    Mf = qmla_core_q8_super(amax, 127.0f, &ovf);
    if (ovf) {
        *bad = amax;
        return QMLA_CORE_LO_RANGE;
    }
    for (g = 0; g < ng; g++) { /* minimum codes; scale[g] becomes s'_g */
        float m;
        lo[g] = qmla_core_q8_min(lo[g], scale[g], Mf, Lf, &m, &scale[g]);
        if (mq)
            mq[g] = (int8_t)m;
        if (scale[g] > smax)
            smax = scale[g];
    }
    Sf = qmla_core_q8_super(smax, 255.0f, &ovf);
    if (ovf) {
        *bad = smax;
        return QMLA_CORE_SCALE_RANGE;
    }
    for (g = 0; g < ng; g++) { /* step codes */
        float c;
        scale[g] = qmla_core_q8_step(scale[g], Sf, &c);
        if (sc)
            sc[g] = (uint8_t)c;
    }
    if (S16)
        *S16 = qmla_core_f32_to_f16(Sf, NULL);
    if (M16)
        *M16 = qmla_core_f32_to_f16(Mf, NULL);
    return QMLA_CORE_OK;
}

/* q8 metadata of one token x[0..width) in groups of G (width = n_groups*G).
 * Writes scale[g] = s_g and lo[g] = l_g (float32), and, where not NULL,
 * sc[g], mq[g], *S16, *M16 (the stored fields). Returns QMLA_CORE_OK, or
 *   QMLA_CORE_NONFINITE   with *bad = the first non-finite element,
 *   QMLA_CORE_LO_RANGE    with *bad = max |lo_g| (M would exceed float16),
 *   QMLA_CORE_SCALE_RANGE with *bad = max s'_g (S would exceed float16);
 * *bad_group receives the group of a non-finite element. */
QMLA_HD static inline int qmla_core_token_meta_q8(
    const float *x, size_t width, size_t G, int bits, float *scale, float *lo,
    uint8_t *sc, int8_t *mq, uint16_t *S16, uint16_t *M16, float *bad,
    size_t *bad_group)
{
    const size_t ng = width / G;
    size_t g;
    for (g = 0; g < ng; g++) { /* group extrema: lo[g] = min, scale[g] = max */
        if (qmla_core_group_extrema(x + g * G, G, &lo[g], &scale[g], bad) !=
            QMLA_CORE_OK) {
            *bad_group = g;
            return QMLA_CORE_NONFINITE;
        }
    }
    return qmla_core_token_meta_q8_finish(ng, bits, scale, lo, sc, mq, S16,
                                          M16, bad);
}

/* ---- packing ------------------------------------------------------------- */

/* Bytes taken by n packed codes of `bits` bits: ceil(n*bits/8). */
QMLA_HD static inline size_t qmla_core_packed_bytes(size_t n, int bits)
{
    return (n * (size_t)bits + 7u) / 8u;
}

/* OR code q (low `bits` bits kept) into element j of a packed group whose
 * bytes were zeroed beforehand. bits in 1..8. */
QMLA_HD static inline void qmla_core_put_code(uint8_t *packed, size_t j,
                                              int bits, unsigned q)
{
    size_t bit = j * (size_t)bits;
    size_t byte = bit >> 3;
    unsigned sh = (unsigned)(bit & 7u);
    unsigned v = (q & qmla_core_levels(bits)) << sh; /* at most 15 bits */
    packed[byte] = (uint8_t)(packed[byte] | (v & 0xffu));
    if (sh + (unsigned)bits > 8u)
        packed[byte + 1] = (uint8_t)(packed[byte + 1] | (v >> 8));
}

/* Element j of a packed group. bits in 1..8. */
QMLA_HD static inline unsigned qmla_core_get_code(const uint8_t *packed,
                                                  size_t j, int bits)
{
    size_t bit = j * (size_t)bits;
    size_t byte = bit >> 3;
    unsigned sh = (unsigned)(bit & 7u);
    unsigned v = (unsigned)packed[byte] >> sh;
    if (sh + (unsigned)bits > 8u)
        v |= (unsigned)packed[byte + 1] << (8u - sh);
    return v & qmla_core_levels(bits);
}

/* Pack n codes into ceil(n*bits/8) bytes (all of them written; trailing
 * bits of the last byte are zero). bits in 1..8. */
QMLA_HD static inline void qmla_core_pack(const uint8_t *codes, size_t n,
                                          int bits, uint8_t *out)
{
    size_t nb = qmla_core_packed_bytes(n, bits), j;
    for (j = 0; j < nb; j++)
        out[j] = 0;
    for (j = 0; j < n; j++)
        qmla_core_put_code(out, j, bits, codes[j]);
}

/* Inverse of qmla_core_pack. */
QMLA_HD static inline void qmla_core_unpack(const uint8_t *packed, size_t n,
                                            int bits, uint8_t *codes)
{
    size_t j;
    for (j = 0; j < n; j++)
        codes[j] = (uint8_t)qmla_core_get_code(packed, j, bits);
}

/* The per-group emit loop, shared by the CPU (lib/quant/quant.c) and the GPU
 * kernels: with the stored metadata (s, l) of a group x[0..n), write its
 * packed codes (all ceil(n*bits/8) bytes; may be NULL) and its dequantized
 * values xhat[0..n) (may be NULL; may alias x: x[j] is read before xhat[j]
 * is written). bits in 1..8. Codes by qmla_core_code_fast (on the host the
 * same as qmla_core_code). A branch-free GPU variant (a check pass, then
 * rint/clamp for the whole group) was measured in H200 run 9: faster for
 * qdq and C8R8, slower for the C4R4 / C2R4 writer; not kept. */
QMLA_HD static inline void qmla_core_group_emit(const float *x, size_t n,
                                                int bits, float s, float l,
                                                uint8_t *packed, float *xhat)
{
    const unsigned L = qmla_core_levels(bits);
    const float inv = qmla_core_code_inv(s);
    size_t j;
    if (packed)
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
        for (j = 0; j < qmla_core_packed_bytes(n, bits); j++)
            packed[j] = 0;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (j = 0; j < n; j++) {
        unsigned q = qmla_core_code_fast(x[j], s, l, inv, L);
        if (packed)
            qmla_core_put_code(packed, j, bits, q);
        if (xhat)
            xhat[j] = qmla_core_dequant(q, s, l);
    }
}

#endif
