/* kernels/kvcache.cu — the fused cache writer (contract: kernels/kvcache.h).
 *
 * A block of 288 threads writes 16 tokens (groups of 32 or 64: E = 32
 * channels per thread, 18 threads per token) or 4 tokens (groups of 8 or
 * 16: E = 8, 72 threads per token); thread k of a token owns channels
 * E k .. E k + E - 1 (content below 512, else RoPE): 16-byte loads of the
 * BF16 row, chunk extrema (quant_core.h), the group's extrema by shuffles
 * over the G/E threads of the group, the stored metadata and the shared
 * emit loop qmla_core_group_emit on its E values; then word stores of its
 * packed codes, one metadata store per group, and 16-byte stores of the
 * BF16 row into the sink / window buffers where the token is protected.
 * Templated on the bit widths so that the emit loop unrolls into registers
 * (0: bits read at run time). With constant widths and 32 elements per
 * thread the codes come from qmla_emit_fast (emit_fast.cuh: branch-free,
 * the rare elements near a rounding boundary recomputed exactly); three
 * blocks per SM (at most 72 registers). Twin: qmla_kv_write_ref.
 */
#include "emit_fast.cuh"
#include "kvcache.h"
#include "qmla/kvcache.h"
#include "qmla/quant_core.h"

#include <cuda_runtime.h>

#define NO_FAILURE 0xffffffffffffffffull
#define KVW_THREADS 288 /* 4 tokens x 72 threads, or 16 tokens x 18 threads */

struct kvw_args {
    const uint16_t *kv;       /* [n, 576] */
    const int64_t *slot;      /* [n] */
    const int32_t *seq, *pos; /* [n] */
    const int32_t *seq_len;   /* [batch] */
    uint8_t *pool;            /* [n_pages, page_bytes] */
    uint16_t *sink, *window;  /* [batch, S|W, 576] */
    unsigned long long *fail;
    float *fail_value;
    size_t n;
    qmla_kv_layout L;
    int S, W;
};

/* Store n = E*bits/8 packed bytes (E elements of `bits` bits). */
template <int E, int B>
__device__ static inline void store_codes(uint8_t *dst, const uint8_t *src, int bits)
{
    const int nb = E * (B ? B : bits) / 8;
    if (B != 0 && nb % 4 == 0) { /* 4-byte aligned (chunk offsets are multiples of nb) */
#pragma unroll
        for (int w = 0; w < (B ? E * B / 32 : 1); w++)
            ((uint32_t *)dst)[w] = (uint32_t)src[4 * w] | (uint32_t)src[4 * w + 1] << 8 |
                                   (uint32_t)src[4 * w + 2] << 16 |
                                   (uint32_t)src[4 * w + 3] << 24;
    } else if (B != 0 && nb == 2) {
        *(uint16_t *)dst = (uint16_t)(src[0] | src[1] << 8);
    } else {
        for (int j = 0; j < nb; j++)
            dst[j] = src[j];
    }
}

/* Codes of 32 elements of B bits into dst (4 B bytes, aligned to their
 * size): qmla_emit_fast (emit_fast.cuh), the codes of the shared emit loop
 * without a branch per element. */
template <int B>
__device__ static inline void emit32(const float *x, float s, float l, uint8_t *dst)
{
    uint32_t w[B];
    qmla_emit_fast<32, B>(x, s, l, w, nullptr);
    if constexpr (B == 2) {
        *(uint2 *)dst = make_uint2(w[0], w[1]);
    } else {
#pragma unroll
        for (int i = 0; i < B / 4; i++)
            ((uint4 *)dst)[i] = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
    }
}

/* E: elements per thread (8, or 32 when the group size is 32 or 64);
 * CB, RB: bit widths as constants (0: read at run time). */
template <int CB, int RB, int E>
__global__ void __launch_bounds__(KVW_THREADS, 3) kv_write_kernel(kvw_args a)
{
    constexpr int TPT = QMLA_KV_D / E;       /* threads per token */
    constexpr int TOK = KVW_THREADS / TPT;   /* tokens per block */
    const int tid = threadIdx.x, tk = tid / TPT, k = tid - tk * TPT;
    const size_t i = (size_t)blockIdx.x * TOK + tk;
    const bool live = i < a.n && a.slot[i] >= 0;
    const qmla_kv_layout &L = a.L;
    uint4 raw[E / 8];
#pragma unroll
    for (int u = 0; u < E / 8; u++)
        raw[u] = live ? __ldg((const uint4 *)(a.kv + i * QMLA_KV_D) + k * (E / 8) + u)
                      : make_uint4(0, 0, 0, 0);
    const int64_t slot = live ? a.slot[i] : 0;
    uint8_t *pg = a.pool + (size_t)(slot / QMLA_KV_PAGE) * L.page_bytes;
    const int o = (int)(slot % QMLA_KV_PAGE);

    if (L.bf16) {
        if (live)
#pragma unroll
            for (int u = 0; u < E / 8; u++)
                *((uint4 *)(pg + (size_t)o * QMLA_KV_D * 2) + k * (E / 8) + u) = raw[u];
        return;
    }
    float x[E];
#pragma unroll
    for (int u = 0; u < E / 8; u++) {
        const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            x[8 * u + 2 * j] = __uint_as_float(w[j] << 16);
            x[8 * u + 2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
        }
    }
    float mn, mx, bad = 0.0f;
    int nonfinite = qmla_core_group_extrema(x, E, &mn, &mx, &bad) != QMLA_CORE_OK;
    if (nonfinite)
        mn = mx = 0.0f;
    const int lanes = L.G / E; /* threads of one group: aligned, power of two */
    for (int off = lanes / 2; off > 0; off /= 2) {
        mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, off));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        nonfinite |= __shfl_xor_sync(0xffffffffu, nonfinite, off);
    }
    if (!live)
        return;
    const bool rope = k >= QMLA_KV_DC / E;
    const int bits = rope ? (RB ? RB : L.r_bits) : (CB ? CB : L.c_bits);
    const int kk = rope ? k - QMLA_KV_DC / E : k; /* chunk within its path */
    const int g = kk / lanes;
    const int gidx = rope ? L.ng_c + g : g;       /* group index within the token */
    float s = 0.0f, l = 0.0f;
    int st = QMLA_CORE_NONFINITE;
    if (!nonfinite)
        st = qmla_core_group_meta_from_extrema(mn, mx, bits, QMLA_CORE_META_F16, &s, &l, &bad);
    if (st != QMLA_CORE_OK) {
        /* each failing thread of the group reports; atomicMin keeps the lowest */
        const unsigned long long code =
            ((unsigned long long)(i * (L.ng_c + L.ng_r) + gidx) << 2) | (unsigned)st;
        if (st != QMLA_CORE_NONFINITE ||
            qmla_core_group_extrema(x, E, &mn, &mx, &bad) != QMLA_CORE_OK) {
            const unsigned long long old = atomicMin(a.fail, code);
            if (code < old)
                *a.fail_value = bad;
        }
        return;
    }
    uint8_t packed[E];
    const size_t cbytes = (size_t)kk * E * bits / 8; /* chunk offset in the token's codes */
    if constexpr (E == 32 && CB != 0 && RB != 0) {
        /* constant widths: chunk offsets are multiples of the chunk's bytes */
        uint8_t *dst = rope ? pg + L.off_rc + (size_t)o * L.cb_r + cbytes
                            : pg + (size_t)o * L.cb_c + cbytes;
        if (CB == RB || !rope)
            emit32<CB>(x, s, l, dst);
        else
            emit32<RB>(x, s, l, dst);
    } else if (rope) {
        qmla_core_group_emit(x, E, RB ? RB : bits, s, l, packed, nullptr);
        store_codes<E, RB>(pg + L.off_rc + (size_t)o * L.cb_r + cbytes, packed, bits);
    } else {
        qmla_core_group_emit(x, E, CB ? CB : bits, s, l, packed, nullptr);
        store_codes<E, CB>(pg + (size_t)o * L.cb_c + cbytes, packed, bits);
    }
    if (kk % lanes == 0) {
        const uint32_t m = (uint32_t)qmla_core_f32_to_f16(s, nullptr) |
                           (uint32_t)qmla_core_f32_to_f16(l, nullptr) << 16;
        if (rope)
            *(uint32_t *)(pg + L.off_mr + ((size_t)o * L.ng_r + g) * 4) = m;
        else
            *(uint32_t *)(pg + L.off_mc + ((size_t)o * L.ng_c + g) * 4) = m;
    }
    const int b = a.seq[i];
    const long p = a.pos[i], len = a.seq_len[b];
    if (p < a.S)
#pragma unroll
        for (int u = 0; u < E / 8; u++)
            *((uint4 *)(a.sink + ((size_t)b * a.S + (size_t)p) * QMLA_KV_D) + k * (E / 8) + u) =
                raw[u];
    if (a.W > 0 && p >= len - a.W)
#pragma unroll
        for (int u = 0; u < E / 8; u++)
            *((uint4 *)(a.window + ((size_t)b * a.W + (size_t)(p % a.W)) * QMLA_KV_D) +
              k * (E / 8) + u) = raw[u];
}

static int cuda_fail(qmla_error *err, cudaError_t e, const char *what)
{
    return qmla_error_set(err, QMLA_EIO, "CUDA: %s: %s", what, cudaGetErrorString(e));
}

extern "C" int qmla_kv_write_cuda_launch(const qmla_kv_cache *kc, const qmla_kv_write *w,
                                         void *ws, cudaStream_t stream, qmla_error *err)
{
    int st = qmla_kv_check(kc ? &kc->cfg : nullptr, err);
    if (st)
        return st;
    if (!w || !ws || (w->n > 0 && (!w->kv || !w->slot || !w->seq || !w->pos || !w->seq_len)))
        return qmla_error_set(err, QMLA_EINVAL, "kv writer: NULL argument");
    if (((uintptr_t)w->kv & 15u) || ((uintptr_t)kc->pool & 15u) ||
        ((uintptr_t)kc->sink & 15u) || ((uintptr_t)kc->window & 15u) || ((uintptr_t)ws & 7u))
        return qmla_error_set(err, QMLA_EINVAL,
                              "kv writer: rows, pool and buffers must be 16-byte aligned");
    const qmla_kv_layout L = qmla_kv_layout_of(&kc->cfg);
    if (!L.bf16 && ((kc->cfg.sink > 0 && !kc->sink) || (kc->cfg.window > 0 && !kc->window)))
        return qmla_error_set(err, QMLA_EINVAL, "kv writer: NULL protection buffer");
    cudaError_t e = cudaMemsetAsync(ws, 0xff, sizeof(unsigned long long), stream);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "cudaMemsetAsync");
    if (w->n == 0)
        return QMLA_OK;
    kvw_args a;
    a.kv = w->kv;
    a.slot = w->slot;
    a.seq = w->seq;
    a.pos = w->pos;
    a.seq_len = w->seq_len;
    a.pool = kc->pool;
    a.sink = kc->sink;
    a.window = kc->window;
    a.fail = (unsigned long long *)ws;
    a.fail_value = (float *)((unsigned long long *)ws + 1);
    a.n = w->n;
    a.L = L;
    a.S = L.bf16 ? 0 : kc->cfg.sink;
    a.W = L.bf16 ? 0 : kc->cfg.window;
    const bool wide = L.G >= 32; /* 32 elements per thread, else 8 */
    const size_t tok = wide ? KVW_THREADS / (QMLA_KV_D / 32) : KVW_THREADS / (QMLA_KV_D / 8);
    const size_t blocks = (w->n + tok - 1) / tok;
    if (blocks > 0x7fffffffu)
        return qmla_error_set(err, QMLA_EINVAL, "kv writer: %zu tokens is too many", w->n);
    const unsigned gb = (unsigned)blocks;
    const int cb = L.c_bits, rb = L.r_bits;
    if (wide && cb == 4 && rb == 4)
        kv_write_kernel<4, 4, 32><<<gb, KVW_THREADS, 0, stream>>>(a);
    else if (wide && cb == 2 && rb == 4)
        kv_write_kernel<2, 4, 32><<<gb, KVW_THREADS, 0, stream>>>(a);
    else if (wide && cb == 8 && rb == 8)
        kv_write_kernel<8, 8, 32><<<gb, KVW_THREADS, 0, stream>>>(a);
    else if (wide)
        kv_write_kernel<0, 0, 32><<<gb, KVW_THREADS, 0, stream>>>(a);
    else
        kv_write_kernel<0, 0, 8><<<gb, KVW_THREADS, 0, stream>>>(a);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return cuda_fail(err, e, "kv writer launch");
    return QMLA_OK;
}

extern "C" int qmla_kv_write_cuda_status(const qmla_kv_cache *kc, const void *ws,
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
        return cuda_fail(err, e, "kv writer");
    if (code == NO_FAILURE)
        return QMLA_OK;
    const qmla_kv_layout L = qmla_kv_layout_of(&kc->cfg);
    const size_t ngt = (size_t)(L.ng_c + L.ng_r), idx = (size_t)(code >> 2);
    const int cs = (int)(code & 3u);
    if (cs == QMLA_CORE_NONFINITE)
        return qmla_error_set(err, QMLA_ENONFINITE,
                              "kv writer: token %zu, group %zu: non-finite value %g", idx / ngt,
                              idx % ngt, (double)value);
    return qmla_error_set(err, QMLA_ERANGE,
                          "kv writer: token %zu, group %zu: %s %.9g does not fit float16 "
                          "metadata",
                          idx / ngt, idx % ngt, cs == QMLA_CORE_LO_RANGE ? "minimum" : "scale",
                          (double)value);
}
