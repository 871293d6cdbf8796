/* kernels/qdq.cu — GPU quantize-pack-dequantize (contract: kernels/qdq.h).
 *
 * One block of 256 threads per tile of TT tokens (about 4096 elements):
 *   1. the tile is loaded with coalesced (float4 where aligned) reads into
 *      shared memory, cut into chunks of c elements (c = 8 when the group
 *      size is a multiple of 8, else c = G), each chunk at an odd word
 *      stride so that a thread per chunk reads without bank conflicts;
 *   2. a thread per chunk finds the chunk's extrema (quant_core.h's
 *      qmla_core_group_extrema; min/max are exact and a zero extremum is
 *      +0, so the combined extrema equal the CPU's serial ones);
 *   3. a thread per group (f16/f32) or per token (q8) turns the extrema
 *      into stored metadata (qmla_core_group_meta_from_extrema,
 *      qmla_core_token_meta_q8_finish);
 *   4. a thread per chunk runs the shared emit loop qmla_core_group_emit
 *      (codes into shared memory in their global byte layout, x^ in place);
 *      8-element chunks of a constant bit width use its branch-free twin
 *      qmla_emit_fast (emit_fast.cuh), the same codes and x^;
 *   5. codes, metadata and x^ are written back with coalesced stores.
 * The arithmetic is quant_core.h's, shared with lib/quant.c; no fast-math,
 * no flush-to-zero (see quant_core.h). Reference twin: qmla_quant_qdq.
 */
#include "emit_fast.cuh"
#include "qdq.h"
#include "qmla/quant_core.h"

#include <cuda_runtime.h>

/* First failure, encoded so that atomicMin keeps the lowest (token, group):
 * (token * n_groups + group) * 4 + core status. */
#define NO_FAILURE 0xffffffffffffffffull
#define QDQ_THREADS 256
#define QDQ_TILE_ELEMS 4096

struct qdq_args {
    const float *x;            /* [T, width] */
    uint8_t *codes;            /* [T, cb] or nullptr */
    float *scale, *lo;         /* [T, ng] or nullptr */
    float *xhat;               /* [T, width] or nullptr */
    unsigned long long *fail;  /* workspace: first failure */
    float *fail_value;         /* workspace: its value */
    size_t T;
    int width, G, ng, cb;      /* cb: code bytes per token */
    int c, cstride, cbytes;    /* chunk: elements, smem stride (floats), packed bytes */
    int cpg;                   /* chunks per group */
    int bits, meta, TT;        /* TT: tokens per tile */
    int vec;                   /* 1: float4 loads/stores of x and x^ */
};

/* Shared-memory bytes of one tile (see qdq_tile_kernel). */
static size_t tile_smem(int TT, int width, int G, int c, int cstride, int cb)
{
    const size_t nch = (size_t)TT * width / c, ngt = (size_t)TT * (width / G);
    size_t b = nch * cstride * 4 + 2 * ngt * 4;
    if (c != G)
        b += 2 * nch * 4;
    return b + (((size_t)TT * cb + 15) & ~(size_t)15);
}

__device__ static void report(const qdq_args &a, size_t t, int g, int st, float v)
{
    unsigned long long code = ((unsigned long long)(t * a.ng + g) << 2) | (unsigned)st;
    unsigned long long old = atomicMin(a.fail, code);
    if (code < old)
        *a.fail_value = v; /* best effort: the value of the lowest failure seen */
}

/* BITS: the bit width as a constant (0: a.bits at run time), so that the
 * emit loop of an 8-element chunk unrolls with constant byte offsets. */
template <int BITS>
__global__ void __launch_bounds__(QDQ_THREADS) qdq_tile_kernel(qdq_args a)
{
    extern __shared__ float4 smem4[];
    const size_t t0 = (size_t)blockIdx.x * a.TT;
    const int nt = (int)min((size_t)a.TT, a.T - t0);
    const int E = nt * a.width, nch = E / a.c, ngt = nt * a.ng;
    const int maxch = a.TT * a.width / a.c, maxg = a.TT * a.ng;
    float *xs = (float *)smem4;                      /* [maxch][cstride] */
    float *gs = xs + (size_t)maxch * a.cstride;      /* [maxg] scale (max) */
    float *gl = gs + maxg;                           /* [maxg] lo (min) */
    float *pmx = gs, *pmn = gl;                      /* chunk extrema */
    uint8_t *cs;                                     /* [TT * cb] codes */
    if (a.c != a.G) {
        pmx = gl + maxg;
        pmn = pmx + maxch;
        cs = (uint8_t *)(pmn + maxch);
    } else {
        cs = (uint8_t *)(gl + maxg);
    }
    const float *x0 = a.x + t0 * a.width;
    const int tid = threadIdx.x;

    /* 1. load */
    if (a.vec) {
        for (int i = tid; i < E / 4; i += QDQ_THREADS) {
            const float4 v = __ldg((const float4 *)x0 + i);
            const int e = 4 * i, k = a.c == 8 ? e >> 3 : e / a.c, j = e - k * a.c;
            float *d = xs + k * a.cstride + j;
            d[0] = v.x;
            d[1] = v.y;
            d[2] = v.z;
            d[3] = v.w;
        }
    } else {
        for (int e = tid; e < E; e += QDQ_THREADS) {
            const int k = e / a.c, j = e - k * a.c;
            xs[k * a.cstride + j] = __ldg(x0 + e);
        }
    }
    __syncthreads();

    /* 2. chunk extrema */
    for (int k = tid; k < nch; k += QDQ_THREADS) {
        float mn = 0.0f, mx = 0.0f, bad;
        if (qmla_core_group_extrema(xs + k * a.cstride, (size_t)a.c, &mn, &mx, &bad) !=
            QMLA_CORE_OK) {
            const int g = k / a.cpg;
            report(a, t0 + g / a.ng, g % a.ng, QMLA_CORE_NONFINITE, bad);
            mn = mx = __int_as_float(0x7fc00000); /* marks the group as reported */
        }
        pmn[k] = mn;
        pmx[k] = mx;
    }
    __syncthreads();

    /* 3. stored metadata */
    if (a.meta != QMLA_CORE_META_Q8) {
        for (int g = tid; g < ngt; g += QDQ_THREADS) {
            float mn = pmn[g * a.cpg], mx = pmx[g * a.cpg], s = 0.0f, l = 0.0f, bad;
            int nonfinite = !qmla_core_isfinite(mn);
            for (int k = 1; k < a.cpg; k++) {
                nonfinite |= !qmla_core_isfinite(pmn[g * a.cpg + k]);
                mn = fminf(mn, pmn[g * a.cpg + k]);
                mx = fmaxf(mx, pmx[g * a.cpg + k]);
            }
            const int st = nonfinite ? QMLA_CORE_OK
                                     : qmla_core_group_meta_from_extrema(mn, mx, a.bits, a.meta,
                                                                         &s, &l, &bad);
            if (nonfinite) {
                s = l = 0.0f;
            } else if (st != QMLA_CORE_OK) {
                report(a, t0 + g / a.ng, g % a.ng, st, bad);
                s = l = 0.0f;
            }
            gs[g] = s;
            gl[g] = l;
        }
    } else {
        for (int t = tid; t < nt; t += QDQ_THREADS) {
            float *ts = gs + t * a.ng, *tl = gl + t * a.ng, bad;
            int nonfinite = 0;
            for (int g = 0; g < a.ng; g++) {
                const int k0 = (t * a.ng + g) * a.cpg;
                float mn = pmn[k0], mx = pmx[k0];
                for (int k = 0; k < a.cpg; k++)
                    nonfinite |= !qmla_core_isfinite(pmn[k0 + k]);
                for (int k = 1; k < a.cpg; k++) {
                    mn = fminf(mn, pmn[k0 + k]);
                    mx = fmaxf(mx, pmx[k0 + k]);
                }
                tl[g] = mn;
                ts[g] = mx;
            }
            const int st = nonfinite ? QMLA_CORE_NONFINITE
                                     : qmla_core_token_meta_q8_finish((size_t)a.ng, a.bits, ts,
                                                                      tl, nullptr, nullptr,
                                                                      nullptr, nullptr, &bad);
            if (st != QMLA_CORE_OK) {
                if (!nonfinite) /* a non-finite value was reported in step 2 */
                    report(a, t0 + t, 0, st, bad);
                for (int g = 0; g < a.ng; g++)
                    ts[g] = tl[g] = 0.0f;
            }
        }
    }
    __syncthreads();

    /* 4. the shared emit loop, one chunk per thread */
    for (int k = tid; k < nch; k += QDQ_THREADS) {
        const int g = a.cpg == 8 ? k >> 3 : k / a.cpg;
        float *xk = xs + k * a.cstride;
        uint8_t *ck = a.codes ? cs + (size_t)k * a.cbytes : nullptr;
        if (BITS != 0 && a.c == 8) {
            /* in registers: shared x and codes could alias for the compiler */
            float xr[8];
            uint32_t w[(8 * (BITS ? BITS : 1) + 31) / 32];
#pragma unroll
            for (int j = 0; j < 8; j++)
                xr[j] = xk[j];
            /* branch-free, the codes and x^ of qmla_core_group_emit
             * (emit_fast.cuh); literal pointers keep xr in registers */
            if (a.xhat)
                qmla_emit_fast<8, BITS ? BITS : 1>(xr, gs[g], gl[g], w, xr);
            else
                qmla_emit_fast<8, BITS ? BITS : 1>(xr, gs[g], gl[g], w, nullptr);
            if (ck)
#pragma unroll
                for (int j = 0; j < BITS; j++)
                    ck[j] = (uint8_t)(w[j >> 2] >> (8 * (j & 3)));
            if (a.xhat)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    xk[j] = xr[j];
        } else
            qmla_core_group_emit(xk, (size_t)a.c, a.bits, gs[g], gl[g], ck,
                                 a.xhat ? xk : nullptr);
    }
    if (a.scale || a.lo)
        for (int g = tid; g < ngt; g += QDQ_THREADS) {
            if (a.scale)
                a.scale[t0 * a.ng + g] = gs[g];
            if (a.lo)
                a.lo[t0 * a.ng + g] = gl[g];
        }
    __syncthreads();

    /* 5. write back */
    if (a.codes) {
        uint8_t *c0 = a.codes + t0 * a.cb;
        const int nb = nt * a.cb;
        if (((uintptr_t)c0 & 3u) == 0) {
            for (int i = tid; i < nb / 4; i += QDQ_THREADS)
                ((uint32_t *)c0)[i] = ((const uint32_t *)cs)[i];
            for (int i = (nb / 4) * 4 + tid; i < nb; i += QDQ_THREADS)
                c0[i] = cs[i];
        } else {
            for (int i = tid; i < nb; i += QDQ_THREADS)
                c0[i] = cs[i];
        }
    }
    if (a.xhat) {
        float *h0 = a.xhat + t0 * a.width;
        if (a.vec) {
            for (int i = tid; i < E / 4; i += QDQ_THREADS) {
                const int e = 4 * i, k = a.c == 8 ? e >> 3 : e / a.c, j = e - k * a.c;
                const float *s = xs + k * a.cstride + j;
                ((float4 *)h0)[i] = make_float4(s[0], s[1], s[2], s[3]);
            }
        } else {
            for (int e = tid; e < E; e += QDQ_THREADS) {
                const int k = e / a.c, j = e - k * a.c;
                h0[e] = xs[k * a.cstride + j];
            }
        }
    }
}

static int cuda_fail(qmla_error *err, cudaError_t e, const char *what)
{
    return qmla_error_set(err, QMLA_EIO, "CUDA: %s: %s", what, cudaGetErrorString(e));
}

extern "C" int qmla_cuda_available(qmla_error *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cuda_fail(err, e, "cudaGetDeviceCount");
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
    cudaError_t e = cudaMemsetAsync(ws, 0xff, sizeof(unsigned long long), stream);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "cudaMemsetAsync");
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
    a.c = a.G % 8 == 0 ? 8 : a.G;
    a.cstride = a.c | 1;
    a.cbytes = (int)qmla_core_packed_bytes((size_t)a.c, p->bits);
    a.cpg = a.G / a.c;
    a.bits = p->bits;
    a.meta = (int)p->meta;
    a.vec = a.c % 4 == 0 && ((uintptr_t)x & 15u) == 0 &&
            (!xhat || ((uintptr_t)xhat & 15u) == 0);
    int TT = a.width >= QDQ_TILE_ELEMS ? 1 : QDQ_TILE_ELEMS / a.width;
    while (TT > 1 && tile_smem(TT, a.width, a.G, a.c, a.cstride, a.cb) > 48 * 1024)
        TT /= 2;
    a.TT = TT;
    const size_t smem = tile_smem(TT, a.width, a.G, a.c, a.cstride, a.cb);
    const size_t blocks = (T + TT - 1) / TT;
    if (blocks > 0x7fffffffu)
        return qmla_error_set(err, QMLA_EINVAL, "qdq_cuda: %zu tokens is too many", T);
    void (*kernel)(qdq_args) = p->bits == 2   ? qdq_tile_kernel<2>
                               : p->bits == 3 ? qdq_tile_kernel<3>
                               : p->bits == 4 ? qdq_tile_kernel<4>
                               : p->bits == 8 ? qdq_tile_kernel<8>
                                              : qdq_tile_kernel<0>;
    if (smem > 48 * 1024 &&
        (e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)smem)) != cudaSuccess)
        return cuda_fail(err, e, "qdq: shared memory");
    kernel<<<(unsigned)blocks, QDQ_THREADS, smem, stream>>>(a);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return cuda_fail(err, e, "qdq kernel launch");
    return QMLA_OK;
}

extern "C" int qmla_qdq_cuda_status(const qmla_quant_params *p, size_t width, const void *ws,
                                    cudaStream_t stream, qmla_error *err)
{
    unsigned long long code = NO_FAILURE;
    float value = 0.0f;
    cudaError_t e = cudaStreamSynchronize(stream);
    if (e == cudaSuccess)
        e = cudaMemcpy(&code, ws, sizeof code, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess)
        e = cudaMemcpy(&value, (const unsigned long long *)ws + 1, sizeof value,
                       cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "qdq kernel");
    if (code == NO_FAILURE)
        return QMLA_OK;
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
