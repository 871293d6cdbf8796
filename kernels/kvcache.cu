/* kernels/kvcache.cu — the fused cache writer (contract: kernels/kvcache.h).
 *
 * A block of 288 threads writes 4 tokens; thread k of a token (k < 72) owns
 * channels 8k..8k+7 (k < 64: content, else RoPE): one 16-byte load of the
 * BF16 row, chunk extrema (quant_core.h), the group's extrema by shuffles
 * over the G/8 threads of the group, the stored metadata and the shared
 * emit loop qmla_core_group_emit on its 8 values; then one store of its
 * packed codes (bits bytes), one metadata store per group, and 16-byte
 * stores of the BF16 row into the sink / window buffers where the token is
 * protected. Templated on the two bit widths so that the emit loop unrolls
 * into registers (0: bits read at run time). Twin: qmla_kv_write_ref.
 */
#include "kvcache.h"
#include "qmla/kvcache.h"
#include "qmla/quant_core.h"

#include <cuda_runtime.h>

#define NO_FAILURE 0xffffffffffffffffull
#define KVW_TOKENS 4
#define KVW_CHUNKS (QMLA_KV_D / 8)
#define KVW_THREADS (KVW_TOKENS * KVW_CHUNKS)

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

template <int B>
__device__ static inline void store_codes(uint8_t *dst, const uint8_t *src, int bits)
{
    const int nb = B ? B : bits; /* 8 codes of `bits` bits: `bits` bytes */
    if (nb == 4) {
        *(uint32_t *)dst = (uint32_t)src[0] | (uint32_t)src[1] << 8 |
                           (uint32_t)src[2] << 16 | (uint32_t)src[3] << 24;
    } else if (nb == 2) {
        *(uint16_t *)dst = (uint16_t)(src[0] | src[1] << 8);
    } else if (nb == 8) {
        uint2 v;
        v.x = (uint32_t)src[0] | (uint32_t)src[1] << 8 | (uint32_t)src[2] << 16 |
              (uint32_t)src[3] << 24;
        v.y = (uint32_t)src[4] | (uint32_t)src[5] << 8 | (uint32_t)src[6] << 16 |
              (uint32_t)src[7] << 24;
        *(uint2 *)dst = v;
    } else {
        for (int j = 0; j < nb; j++)
            dst[j] = src[j];
    }
}

template <int CB, int RB>
__global__ void __launch_bounds__(KVW_THREADS) kv_write_kernel(kvw_args a)
{
    const int tid = threadIdx.x, tk = tid / KVW_CHUNKS, k = tid - tk * KVW_CHUNKS;
    const size_t i = (size_t)blockIdx.x * KVW_TOKENS + tk;
    const bool live = i < a.n && a.slot[i] >= 0;
    const qmla_kv_layout &L = a.L;
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (live)
        raw = __ldg((const uint4 *)(a.kv + i * QMLA_KV_D) + k);
    const int64_t slot = live ? a.slot[i] : 0;
    uint8_t *pg = a.pool + (size_t)(slot / QMLA_KV_PAGE) * L.page_bytes;
    const int o = (int)(slot % QMLA_KV_PAGE);

    if (L.bf16) {
        if (live)
            *((uint4 *)(pg + (size_t)o * QMLA_KV_D * 2) + k) = raw;
        return;
    }
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
    float x[8];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        x[2 * j] = __uint_as_float(w[j] << 16);
        x[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
    }
    float mn, mx, bad = 0.0f;
    int nonfinite = qmla_core_group_extrema(x, 8, &mn, &mx, &bad) != QMLA_CORE_OK;
    if (nonfinite)
        mn = mx = 0.0f;
    const int lanes = L.G / 8; /* threads of one group: aligned, power of two */
    for (int off = lanes / 2; off > 0; off /= 2) {
        mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, off));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        nonfinite |= __shfl_xor_sync(0xffffffffu, nonfinite, off);
    }
    if (!live)
        return;
    const bool rope = k >= QMLA_KV_DC / 8;
    const int bits = rope ? (RB ? RB : L.r_bits) : (CB ? CB : L.c_bits);
    const int kk = rope ? k - QMLA_KV_DC / 8 : k; /* chunk within its path */
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
            qmla_core_group_extrema(x, 8, &mn, &mx, &bad) != QMLA_CORE_OK) {
            const unsigned long long old = atomicMin(a.fail, code);
            if (code < old)
                *a.fail_value = bad;
        }
        return;
    }
    uint8_t packed[8];
    if (rope)
        qmla_core_group_emit(x, 8, RB ? RB : bits, s, l, packed, nullptr);
    else
        qmla_core_group_emit(x, 8, CB ? CB : bits, s, l, packed, nullptr);
    if (rope)
        store_codes<RB>(pg + L.off_rc + (size_t)o * L.cb_r + (size_t)kk * bits, packed, bits);
    else
        store_codes<CB>(pg + (size_t)o * L.cb_c + (size_t)kk * bits, packed, bits);
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
        *((uint4 *)(a.sink + ((size_t)b * a.S + (size_t)p) * QMLA_KV_D) + k) = raw;
    if (a.W > 0 && p >= len - a.W)
        *((uint4 *)(a.window + ((size_t)b * a.W + (size_t)(p % a.W)) * QMLA_KV_D) + k) = raw;
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
    const size_t blocks = (w->n + KVW_TOKENS - 1) / KVW_TOKENS;
    if (blocks > 0x7fffffffu)
        return qmla_error_set(err, QMLA_EINVAL, "kv writer: %zu tokens is too many", w->n);
    const unsigned gb = (unsigned)blocks;
    const int cb = L.c_bits, rb = L.r_bits;
    if (cb == 4 && rb == 4)
        kv_write_kernel<4, 4><<<gb, KVW_THREADS, 0, stream>>>(a);
    else if (cb == 2 && rb == 4)
        kv_write_kernel<2, 4><<<gb, KVW_THREADS, 0, stream>>>(a);
    else if (cb == 8 && rb == 8)
        kv_write_kernel<8, 8><<<gb, KVW_THREADS, 0, stream>>>(a);
    else
        kv_write_kernel<0, 0><<<gb, KVW_THREADS, 0, stream>>>(a);
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
