/* kernels/qdq.cu — GPU quantize-pack-dequantize (contract: kernels/qdq_cuda.h).
 *
 * A block of 256 threads takes TT whole tokens (at least one), so that the
 * q8 metadata of a token (one per-token super-scale over its groups) are
 * finished inside the block.
 *   Fast path (group 64, b in {2, 4, 8}, at most 128 groups per token,
 *   16-byte aligned rows; TT = 128 / n_groups): a lane pair per group,
 *   lane 2k + h loads elements 32 h .. 32 h + 31 of it with 8 float4
 *   loads into registers, finds their extrema by NaN-propagating min /
 *   max and the pair's by one shuffle each (exact; a zero extremum
 *   becomes +0, qmla_core_group_extrema), the stored metadata
 *   (qmla_core_group_meta_from_extrema; q8: extrema into shared memory,
 *   one thread per token runs qmla_core_token_meta_q8_finish), the codes
 *   and x^ of its 32 elements by qmla_emit_fast (emit_fast.cuh: about 10
 *   instructions per element, the rare near-ties by the exact division),
 *   and stores its codes and x^; loads and stores of 32 bytes or more per
 *   thread go through qmla_pair_load / qmla_pair_store (lane pairs move
 *   whole 32-byte sectors per instruction).
 *   Any other shape (3 bits, any group size, unaligned rows; TT = 256 /
 *   n_groups): one thread per group running quant_core.h's per-group functions
 *   (qmla_core_group_meta, qmla_core_group_emit) on device memory.
 * The arithmetic is quant_core.h's, shared with lib/quant/quant.c; no fast-math,
 * no flush-to-zero (see quant_core.h). Reference twin: qmla_quant_qdq
 * (bit for bit, test_qdq_cuda).
 */
#include "cuda_status.cuh"
#include "emit_fast.cuh"
#include "qdq_cuda.h"
#include "qmla/quant_core.h"

#include <cuda_runtime.h>

/* First failure, encoded so that atomicMin keeps the lowest (token, group):
 * (token * n_groups + group) * 4 + core status. */
#define QDQ_THREADS 256
#ifndef QMLA_QDQ_MIN_BLOCKS /* fast path: blocks per SM the registers allow */
#define QMLA_QDQ_MIN_BLOCKS 3
#endif

struct qdq_args {
    const float *x;            /* [T, width] */
    uint8_t *codes;            /* [T, cb] or nullptr */
    float *scale, *lo;         /* [T, ng] or nullptr */
    float *xhat;               /* [T, width] or nullptr */
    unsigned long long *fail;  /* workspace: first failure */
    float *fail_value;         /* workspace: its value */
    size_t T;
    int width, G, ng, cb, gb;  /* cb: code bytes per token, gb: per group */
    int bits, meta, TT;        /* TT: tokens per block */
};

__device__ static void report(const qdq_args &a, size_t t, int g, int st, float v)
{
    unsigned long long code = ((unsigned long long)(t * a.ng + g) << 2) | (unsigned)st;
    unsigned long long old = atomicMin(a.fail, code);
    if (code < old)
        *a.fail_value = v; /* best effort: the value of the lowest failure seen */
}

/* q8: the tokens' metadata from the group extrema in shared memory (lo,
 * hi: [nt * ng]; a NaN marks a group with a non-finite value, reported
 * already); on return lo / hi hold the stored l_g / s_g. Barriers inside:
 * every thread of the block calls it. */
__device__ static void q8_finish_tokens(const qdq_args &a, size_t t0, int nt, float *lo,
                                        float *hi)
{
    __syncthreads();
    for (int t = threadIdx.x; t < nt; t += QDQ_THREADS) {
        float *ts = hi + (size_t)t * a.ng, *tl = lo + (size_t)t * a.ng, bad;
        int nonfinite = 0;
        for (int g = 0; g < a.ng; g++)
            nonfinite |= !qmla_core_isfinite(tl[g]);
        const int st = nonfinite ? QMLA_CORE_NONFINITE
                                 : qmla_core_token_meta_q8_finish((size_t)a.ng, a.bits, ts, tl,
                                                                  nullptr, nullptr, nullptr,
                                                                  nullptr, &bad);
        if (st != QMLA_CORE_OK) {
            if (!nonfinite)
                report(a, t0 + t, 0, st, bad);
            for (int g = 0; g < a.ng; g++)
                ts[g] = tl[g] = 0.0f;
        }
    }
    __syncthreads();
}

/* Group 64, B in {2, 4, 8}, 16-byte aligned rows; XH: x^ wanted. A group
 * is split over a lane pair (lane, lane ^ 1: elements 0-31 and 32-63),
 * the extrema combined by one shuffle each; a block takes TT = 128 / ng
 * whole tokens. */
template <int B, bool XH>
__global__ void __launch_bounds__(QDQ_THREADS, QMLA_QDQ_MIN_BLOCKS) qdq_fast_kernel(qdq_args a)
{
    __shared__ float q8lo[QDQ_THREADS / 2], q8hi[QDQ_THREADS / 2];
    constexpr int G = 64, E = 32, NW = E * B / 32;
    const size_t t0 = (size_t)blockIdx.x * a.TT;
    const int nt = (int)min((size_t)a.TT, a.T - t0);
    const int gl = threadIdx.x >> 1, half = threadIdx.x & 1; /* group slot, its half */
    const bool act = gl < nt * a.ng;
    const size_t t = t0 + (act ? gl / a.ng : 0);
    const int g = act ? gl % a.ng : 0;
    const size_t e0 = t * a.width + (size_t)g * G + half * E; /* first element */
    float x[E];
    {
        uint4 r[E / 4];
        qmla_pair_load<E / 4>((const uint4 *)(a.x + e0), act, r);
#pragma unroll
        for (int v = 0; v < E / 4; v++) {
            x[4 * v] = __uint_as_float(r[v].x);
            x[4 * v + 1] = __uint_as_float(r[v].y);
            x[4 * v + 2] = __uint_as_float(r[v].z);
            x[4 * v + 3] = __uint_as_float(r[v].w);
        }
    }
    float mn = x[0], mx = x[0];
#pragma unroll
    for (int j = 1; j < E; j++) {
        mn = qmla_fmin_nan(mn, x[j]);
        mx = qmla_fmax_nan(mx, x[j]);
    }
    mn = qmla_fmin_nan(mn, __shfl_xor_sync(0xffffffffu, mn, 1)); /* the other half */
    mx = qmla_fmax_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    float s = 0.0f, l = 0.0f, bad = 0.0f;
    const int ok = qmla_emit_extrema_finish(mn, mx, &l, &s); /* l, s: extrema */
    if (act && !ok) { /* both lanes of the pair: the group's first non-finite value */
        bool mine = false;
#pragma unroll
        for (int j = E - 1; j >= 0; j--)
            if (!qmla_core_isfinite(x[j])) {
                bad = x[j];
                mine = true;
            }
        const unsigned lane = threadIdx.x & 31u, pair = 3u << (lane & 30u);
        const bool first = __shfl_sync(pair, (int)mine, (int)(lane & 30u)) != 0;
        if (half == 0 ? mine : !first)
            report(a, t, g, QMLA_CORE_NONFINITE, bad);
    }
    if (a.meta == QMLA_CORE_META_Q8) {
        if (half == 0) {
            q8lo[gl] = ok ? l : __int_as_float(0x7fc00000); /* NaN: reported above */
            q8hi[gl] = ok ? s : __int_as_float(0x7fc00000);
        }
        q8_finish_tokens(a, t0, nt, q8lo, q8hi);
        s = q8hi[gl];
        l = q8lo[gl];
    } else if (act) {
        if (ok) {
            const int st = qmla_core_group_meta_from_extrema(l, s, B, a.meta, &s, &l, &bad);
            if (st != QMLA_CORE_OK) {
                if (half == 0)
                    report(a, t, g, st, bad);
                s = l = 0.0f;
            }
        } else {
            s = l = 0.0f;
        }
    }
    uint32_t w[NW], flg[1];
    const float *xg = a.x + e0;
    qmla_emit_fast<E, B, XH>([&](int j) { return x[j]; }, s, l, w, x, flg);
    /* before any store: x^ may overwrite x */
    qmla_emit_fix_codes<E, B>(flg, [&](int j) { return xg[j]; }, s, l, w);
    if (a.codes)
        qmla_store_words<NW>(a.codes + t * a.cb + (size_t)g * a.gb + half * (E * B / 8), act, w);
    if (XH) {
        uint4 v[E / 4];
#pragma unroll
        for (int i = 0; i < E / 4; i++)
            v[i] = make_uint4(__float_as_uint(x[4 * i]), __float_as_uint(x[4 * i + 1]),
                              __float_as_uint(x[4 * i + 2]), __float_as_uint(x[4 * i + 3]));
        qmla_pair_store<E / 4>((uint4 *)(a.xhat + e0), act, v);
        __syncwarp(); /* the partner's bulk stores before this lane's fixes */
        if (act)
            qmla_emit_fixed_xhat<E, B>(flg, w, s, l, [&](int j, float v) { a.xhat[e0 + j] = v; });
    }
    if (!act || half)
        return;
    if (a.scale)
        a.scale[t * a.ng + g] = s;
    if (a.lo)
        a.lo[t * a.ng + g] = l;
}

/* Any shape: quant_core.h's per-group functions on device memory, one
 * thread per group (a block loops over its tokens' groups). */
__global__ void __launch_bounds__(QDQ_THREADS) qdq_generic_kernel(qdq_args a)
{
    extern __shared__ float q8sm[]; /* q8: [TT * ng] lo, then hi */
    const size_t t0 = (size_t)blockIdx.x * a.TT;
    const int nt = (int)min((size_t)a.TT, a.T - t0), ngl = nt * a.ng;
    const int q8 = a.meta == QMLA_CORE_META_Q8;
    float *q8lo = q8sm, *q8hi = q8sm + (size_t)a.TT * a.ng;
    if (q8) {
        for (int gl = threadIdx.x; gl < ngl; gl += QDQ_THREADS) {
            const size_t t = t0 + gl / a.ng;
            const int g = gl % a.ng;
            float mn = 0.0f, mx = 0.0f, bad;
            if (qmla_core_group_extrema(a.x + t * a.width + (size_t)g * a.G, (size_t)a.G, &mn,
                                        &mx, &bad) != QMLA_CORE_OK) {
                report(a, t, g, QMLA_CORE_NONFINITE, bad);
                mn = mx = __int_as_float(0x7fc00000);
            }
            q8lo[gl] = mn;
            q8hi[gl] = mx;
        }
        q8_finish_tokens(a, t0, nt, q8lo, q8hi);
    }
    for (int gl = threadIdx.x; gl < ngl; gl += QDQ_THREADS) {
        const size_t t = t0 + gl / a.ng;
        const int g = gl % a.ng;
        const float *xg = a.x + t * a.width + (size_t)g * a.G;
        float s, l, bad;
        if (q8) {
            s = q8hi[gl];
            l = q8lo[gl];
        } else {
            const int st = qmla_core_group_meta(xg, (size_t)a.G, a.bits, a.meta, &s, &l, &bad);
            if (st != QMLA_CORE_OK) {
                report(a, t, g, st, bad);
                s = l = 0.0f;
            }
        }
        qmla_core_group_emit(xg, (size_t)a.G, a.bits, s, l,
                             a.codes ? a.codes + t * a.cb + (size_t)g * a.gb : nullptr,
                             a.xhat ? a.xhat + t * a.width + (size_t)g * a.G : nullptr);
        if (a.scale)
            a.scale[t * a.ng + g] = s;
        if (a.lo)
            a.lo[t * a.ng + g] = l;
    }
}

extern "C" int qmla_cuda_available(qmla_error *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        qmla_cuda_fail(err, e, "cudaGetDeviceCount");
        return 0;
    }
    if (n < 1) {
        qmla_error_set(err, QMLA_EIO, "CUDA: no device");
        return 0;
    }
    return 1;
}

extern "C" int qmla_qdq_cuda_launch(const qmla_quant_params *p, const float *x, size_t T,
                                    size_t width, uint8_t *codes, float *scale, float *lo,
                                    float *xhat, void *ws, cudaStream_t stream,
                                    qmla_error *err)
{
    int st = qmla_quant_check(p, width, err);
    if (st)
        return st;
    if (width > QMLA_QDQ_CUDA_MAX_WIDTH)
        return qmla_error_set(err, QMLA_EINVAL, "qdq_cuda: width %zu above the kernel's %d",
                              width, QMLA_QDQ_CUDA_MAX_WIDTH);
    if (!ws || (T > 0 && !x))
        return qmla_error_set(err, QMLA_EINVAL, "qdq_cuda: NULL %s",
                              ws ? "input" : "workspace");
    if (((uintptr_t)ws & 7u) != 0)
        return qmla_error_set(err, QMLA_EINVAL, "qdq_cuda: workspace not 8-byte aligned");
    /* no per-call reset of ws (qmla_qdq_cuda_ws_init once; status resets
     * it after a failure) */
    cudaError_t e;
    if (T == 0)
        return QMLA_OK;
    qdq_args a;
    a.x = x;
    a.codes = codes;
    a.scale = scale;
    a.lo = lo;
    a.xhat = xhat;
    a.fail = (unsigned long long *)ws;
    a.fail_value = (float *)((unsigned long long *)ws + 1);
    a.T = T;
    a.width = (int)width;
    a.G = (int)qmla_quant_group_size(p, width);
    a.ng = a.width / a.G;
    a.cb = (int)qmla_quant_code_bytes(p, width);
    a.gb = (int)qmla_core_packed_bytes((size_t)a.G, p->bits);
    a.bits = p->bits;
    a.meta = (int)p->meta;
    if (p->meta == QMLA_META_Q8 && a.ng > QMLA_Q8_MAX_GROUPS)
        return qmla_error_set(err, QMLA_EINVAL,
                              "qdq_cuda: q8 metadata: at most %d groups per token, found %d",
                              QMLA_Q8_MAX_GROUPS, a.ng);
    /* the fast path: a lane pair per group, at most 128 groups per token */
    const int fast = a.G == 64 && a.ng <= QDQ_THREADS / 2 &&
                     (p->bits == 2 || p->bits == 4 || p->bits == 8) &&
                     ((uintptr_t)x & 15u) == 0 && ((uintptr_t)xhat & 15u) == 0 &&
                     ((uintptr_t)codes & 15u) == 0;
    const int slots = fast ? QDQ_THREADS / 2 : QDQ_THREADS; /* groups per block */
    a.TT = a.ng >= slots ? 1 : slots / a.ng;
    const size_t blocks = (T + a.TT - 1) / a.TT;
    if (blocks > 0x7fffffffu)
        return qmla_error_set(err, QMLA_EINVAL, "qdq_cuda: %zu tokens is too many", T);
    const unsigned gb = (unsigned)blocks;
    if (fast) {
        void (*k)(qdq_args) =
            p->bits == 2 ? (xhat ? qdq_fast_kernel<2, true> : qdq_fast_kernel<2, false>)
            : p->bits == 4 ? (xhat ? qdq_fast_kernel<4, true> : qdq_fast_kernel<4, false>)
                           : (xhat ? qdq_fast_kernel<8, true> : qdq_fast_kernel<8, false>);
        k<<<gb, QDQ_THREADS, 0, stream>>>(a);
    } else {
        const size_t smem = p->meta == QMLA_META_Q8 ? 2 * (size_t)a.TT * a.ng * sizeof(float) : 0;
        qdq_generic_kernel<<<gb, QDQ_THREADS, smem, stream>>>(a);
    }
    if ((e = cudaGetLastError()) != cudaSuccess)
        return qmla_cuda_fail(err, e, "qdq kernel launch");
    return QMLA_OK;
}

extern "C" int qmla_qdq_cuda_ws_init(void *ws, cudaStream_t stream, qmla_error *err)
{
    if (!ws || ((uintptr_t)ws & 7u))
        return qmla_error_set(err, QMLA_EINVAL, "qdq_cuda: workspace NULL or not 8-byte aligned");
    const cudaError_t e = cudaMemsetAsync(ws, 0xff, sizeof(unsigned long long), stream);
    return e == cudaSuccess ? QMLA_OK : qmla_cuda_fail(err, e, "cudaMemsetAsync");
}

extern "C" int qmla_qdq_cuda_status(const qmla_quant_params *p, size_t width, void *ws,
                                    cudaStream_t stream, qmla_error *err)
{
    unsigned long long code;
    float value;
    int failed;
    const int st = qmla_cuda_failure_word(ws, stream, "qdq kernel", &code, &value, &failed, err);
    if (st || !failed)
        return st;
    const size_t ng = qmla_quant_n_groups(p, width);
    const size_t idx = (size_t)(code >> 2), t = idx / ng, g = idx % ng;
    const int cs = (int)(code & 3u);
    if (cs == QMLA_CORE_NONFINITE)
        return qmla_error_set(err, QMLA_ENONFINITE,
                              "qdq_cuda: token %zu, group %zu: non-finite value %g", t, g,
                              (double)value);
    const char *what = cs == QMLA_CORE_LO_RANGE ? "minimum" : "scale";
    if (p->meta == QMLA_META_Q8)
        return qmla_error_set(err, QMLA_ERANGE,
                              "qdq_cuda: token %zu: q8 metadata: %s %.9g needs a float16 "
                              "super-scale beyond %g", t, what, (double)value,
                              (double)QMLA_F16_MAX);
    return qmla_error_set(err, QMLA_ERANGE,
                          "qdq_cuda: token %zu, group %zu: %s %.9g does not fit %s metadata",
                          t, g, what, (double)value, qmla_meta_name(p->meta));
}

extern "C" int qmla_qdq_cuda(const qmla_quant_params *p, const float *x, size_t T,
                             size_t width, uint8_t *codes, float *scale, float *lo,
                             float *xhat, void *ws, cudaStream_t stream, qmla_error *err)
{
    int st = qmla_qdq_cuda_launch(p, x, T, width, codes, scale, lo, xhat, ws, stream, err);
    if (st)
        return st;
    return qmla_qdq_cuda_status(p, width, ws, stream, err);
}
