/* kernels/kvcache.cu — the fused cache writer (contract: kernels/kvcache_cuda.h).
 *
 * Rows come as BF16 (qmla_kv_write.kv) or float32 (kv_f32); every kernel
 * below has both forms (template parameter In: uint16_t or float), the
 * float32 one quantizing the float32 values and rounding its BF16 copies
 * as qmla_core_f32_to_bf16.
 * BF16 layout: kv_copy_bf16_kernel, a gathered copy of the rows into their
 * page slots (one 16-byte chunk per thread, KVC_UNROLL in flight;
 * consecutive threads on consecutive chunks); kv_copy_f32_kernel the same
 * from float32 rows (two 16-byte loads per chunk).
 * Quantized layouts: kv_write_kernel, one thread per E = min(G, 32)
 * channels; a group of 64 is split over a lane pair (lane, lane ^ 1), its
 * extrema combined by one shuffle each. A block of 288 threads writes E/2
 * tokens: warps 0-7 the content (512/E threads per token), warp 8 the RoPE
 * (64/E per token), so every warp runs one bit width (C2R4 has no
 * divergent paths). A thread issues its loads at once (its row's values
 * with 16-byte loads, E/8 of them for BF16 and E/4 for float32, whatever
 * the slot; the slot, sequence, position; then the sequence's length),
 * finds the extrema by NaN-propagating BF16x2 (float32: float) minimum /
 * maximum (exact; a zero extremum becomes +0 as in
 * qmla_core_group_extrema), the stored f16 metadata by
 * qmla_core_group_meta_from_extrema, the codes by qmla_emit_fast
 * (emit_fast.cuh: about 10 instructions per element, the rare near-ties
 * by the exact division), and stores its codes with 4- to 16-byte stores,
 * the group's metadata as one word (first half), and, for a protected
 * token (sink / window), its BF16 values into the sink / window buffers.
 * Loads of the rows and stores of codes of 32 bytes or more go through
 * qmla_pair_load / qmla_pair_store (emit_fast.cuh): lane pairs move whole
 * 32-byte sectors per instruction. No shared memory and no barriers.
 * Prefill- and decode-sized writes use the same launch. The bit widths
 * are template parameters (one instantiation per G and C{2,4,8}R{2,4,8}),
 * and the sink / window rows are stored before the emitter: 56 registers,
 * no spill (H200 run 25; BF16 rows; the float32 form is bounded at 72,
 * QMLA_KVW_MIN_BLOCKS_F32, its speed not measured). The launcher does not reset the failure word:
 * qmla_kv_write_cuda_ws_init once, the status call after a failure. Twin:
 * qmla_kv_write_ref (bit for bit, test_decode_cuda).
 * q8 metadata (template parameter Q8, cfg.meta): the same threads; a
 * token's path maxima (max |lo_g|, then max s'_g) by shuffles over the
 * path's threads (at G 8 the content's two warps meet through shared
 * memory and one barrier), each thread then derives its group's minimum
 * and step codes with the shared steps of quant_core.h (qmla_core_q8_*),
 * stores sc_g and m_g as bytes and the path's first thread S and M; a
 * range error is the path's (reported at its first group index), a
 * non-finite value its group's, as the twin. On the H200 since run 12
 * (test_decode_cuda's q8 writer checks, bit for bit the twin); its speed
 * beside f16 in run 14 (bench_decode --writer, docs/decode.md).
 */
#include "cuda_status.cuh"
#include "emit_fast.cuh"
#include "kvcache_cuda.h"
#include "qmla/kvcache.h"
#include "qmla/quant_core.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#define KVW_THREADS 288 /* 256 content + 32 RoPE threads */
#ifndef QMLA_KVW_MIN_BLOCKS /* blocks per SM the registers allow (build-time experiment) */
#define QMLA_KVW_MIN_BLOCKS 4 /* H200 run 22a: 3 blocks 51.9 us, 4 blocks 48.7 (C4R4) */
#endif
#ifndef QMLA_KVW_MIN_BLOCKS_Q8 /* q8 metadata (BF16 rows; float32 rows one block fewer):
                                 at 4 blocks (56 registers) ptxas spills 4-112 bytes, at 3
                                 (72) none for BF16 rows (ptxas -v, sm_90a); speed not measured */
#define QMLA_KVW_MIN_BLOCKS_Q8 3
#endif
#ifndef QMLA_KVW_MIN_BLOCKS_F32 /* the same for float32 rows (twice the row registers) */
#define QMLA_KVW_MIN_BLOCKS_F32 3 /* 72 registers, no spill (ptxas -v, sm_90a); speed not measured */
#endif

struct kvw_args {
    const uint16_t *kv;       /* [n, 576] BF16, or NULL */
    const float *kv_f32;      /* [n, 576] float32, or NULL */
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

/* The input rows: In = uint16_t (BF16 bits) or float. A thread holds its
 * E elements as KVW_CHUNKS(E, In) uint4 (E/8 of BF16 pairs, E/4 of floats). */
#define KVW_CHUNKS(E, In) ((E) * (int)sizeof(In) / 16)

/* Element j (float32) of E elements held in raw. */
template <int E, class In>
__device__ static inline float kvw_elem(const uint4 *raw, int j)
{
    if constexpr (sizeof(In) == 2) {
        const uint4 v = raw[j / 8];
        const uint32_t u = (j % 8) < 2 ? v.x : (j % 8) < 4 ? v.y : (j % 8) < 6 ? v.z : v.w;
        return __uint_as_float(j % 2 ? u & 0xffff0000u : u << 16);
    } else {
        const uint4 v = raw[j / 4];
        return __uint_as_float((j % 4) == 0 ? v.x : (j % 4) == 1 ? v.y : (j % 4) == 2 ? v.z : v.w);
    }
}

/* Element j of a row in global memory (a run-time j: the rare exact codes). */
__device__ static inline float kvw_load(const uint16_t *src, int j)
{
    return __uint_as_float((uint32_t)src[j] << 16);
}
__device__ static inline float kvw_load(const float *src, int j) { return src[j]; }

/* Chunk v (8 values, 16 bytes) of the BF16 copy of the E elements: raw[v]
 * itself for BF16 rows; float32 rows rounded to nearest even as
 * qmla_core_f32_to_bf16 (the twin's rounding, NaN included). */
template <int E, class In>
__device__ static inline uint4 kvw_bf16_chunk(const uint4 *raw, int v)
{
    if constexpr (sizeof(In) == 2) {
        return raw[v];
    } else {
        uint32_t u[4];
#pragma unroll
        for (int k = 0; k < 4; k++)
            u[k] = (uint32_t)qmla_core_f32_to_bf16(kvw_elem<E, In>(raw, 8 * v + 2 * k)) |
                   (uint32_t)qmla_core_f32_to_bf16(kvw_elem<E, In>(raw, 8 * v + 2 * k + 1)) << 16;
        return make_uint4(u[0], u[1], u[2], u[3]);
    }
}

/* Codes of one thread's E elements (B bits) into dst (E B / 8 bytes,
 * aligned to that size up to 16); act: this lane stores (every lane of the
 * warp calls: qmla_store_words). */
template <int E, int B, class In>
__device__ static inline void kvw_codes(const uint4 *raw, const In *src, float s, float l,
                                        uint8_t *dst, bool act)
{
    auto x = [&](int j) { return kvw_elem<E, In>(raw, j); };
    if constexpr ((E * B) % 32 == 0) {
        constexpr int NW = E * B / 32;
        uint32_t w[NW], bad[(E + 31) / 32];
        qmla_emit_fast<E, B, false>(x, s, l, w, nullptr, bad);
        qmla_emit_fix_codes<E, B>(bad, [&](int j) { return kvw_load(src, j); }, s, l, w);
        qmla_store_words<NW>(dst, act, w);
    } else { /* E 8, B 2: two bytes, by the shared emit loop */
        float xs[E];
        uint8_t p[E * B / 8];
#pragma unroll
        for (int j = 0; j < E; j++)
            xs[j] = x(j);
        qmla_core_group_emit(xs, E, B, s, l, p, nullptr);
        if (act)
            *(uint16_t *)dst = (uint16_t)(p[0] | p[1] << 8);
    }
}

/* The BF16 layout: a gathered copy of the rows into their page slots, one
 * 16-byte chunk per thread and KVC_UNROLL chunks in flight (72 chunks per
 * token; consecutive threads, consecutive chunks: every access coalesced). */
#define KVC_THREADS 256
#define KVC_UNROLL 4
__global__ void __launch_bounds__(KVC_THREADS) kv_copy_bf16_kernel(kvw_args a)
{
    constexpr int CPT = QMLA_KV_D * 2 / 16; /* 72 chunks per token */
    const size_t q0 = (size_t)blockIdx.x * (KVC_THREADS * KVC_UNROLL) + threadIdx.x;
    const size_t nq = a.n * CPT;
    uint4 v[KVC_UNROLL];
    int64_t slot[KVC_UNROLL];
#pragma unroll
    for (int k = 0; k < KVC_UNROLL; k++) {
        const size_t q = q0 + (size_t)k * KVC_THREADS;
        /* the row is loaded whatever the slot (rows [n] exist): the two
         * loads are in flight together */
        slot[k] = q < nq ? __ldg((const long long *)a.slot + q / CPT) : -1;
        v[k] = q < nq ? __ldg((const uint4 *)a.kv + q) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int k = 0; k < KVC_UNROLL; k++) {
        const size_t q = q0 + (size_t)k * KVC_THREADS;
        if (slot[k] >= 0)
            ((uint4 *)(a.pool + (size_t)(slot[k] / QMLA_KV_PAGE) * a.L.page_bytes))
                [(size_t)(slot[k] % QMLA_KV_PAGE) * CPT + q % CPT] = v[k];
    }
}

/* The BF16 layout from float32 rows: one 16-byte chunk of BF16 (8 values,
 * two 16-byte loads of floats) per thread, rounded as qmla_core_f32_to_bf16
 * (consecutive threads, consecutive chunks). */
__global__ void __launch_bounds__(KVC_THREADS) kv_copy_f32_kernel(kvw_args a)
{
    constexpr int CPT = QMLA_KV_D * 2 / 16; /* 72 BF16 chunks per token */
    const size_t q0 = (size_t)blockIdx.x * (KVC_THREADS * KVC_UNROLL) + threadIdx.x;
    const size_t nq = a.n * CPT;
    uint4 v[KVC_UNROLL][2];
    int64_t slot[KVC_UNROLL];
#pragma unroll
    for (int k = 0; k < KVC_UNROLL; k++) {
        const size_t q = q0 + (size_t)k * KVC_THREADS;
        slot[k] = q < nq ? __ldg((const long long *)a.slot + q / CPT) : -1;
        const uint4 z = make_uint4(0u, 0u, 0u, 0u);
        v[k][0] = q < nq ? __ldg((const uint4 *)a.kv_f32 + 2 * q) : z;
        v[k][1] = q < nq ? __ldg((const uint4 *)a.kv_f32 + 2 * q + 1) : z;
    }
#pragma unroll
    for (int k = 0; k < KVC_UNROLL; k++) {
        const size_t q = q0 + (size_t)k * KVC_THREADS;
        if (slot[k] >= 0)
            ((uint4 *)(a.pool + (size_t)(slot[k] / QMLA_KV_PAGE) * a.L.page_bytes))
                [(size_t)(slot[k] % QMLA_KV_PAGE) * CPT + q % CPT] = kvw_bf16_chunk<8, float>(v[k], 0);
    }
}

/* Quantized layouts. One thread per E = min(G, 32) channels: a group of 64
 * is split over a lane pair (lane, lane ^ 1: the halves; extrema combined
 * by one shuffle each), smaller groups take one thread. A block of 288
 * threads writes E/2 tokens: warps 0-7 the content (512/E threads per
 * token), warp 8 the RoPE (64/E per token). */
/* q8 metadata: the maximum of v over the threads of one token's path
 * (content: TPC threads, RoPE: TPR threads, aligned blocks of a warp, or,
 * at G 8, the content's two warps 2t, 2t+1 through sh[9] and one barrier
 * that every thread of the block reaches). Exact in any order for the
 * finite values >= +0 it is given. */
template <int G>
__device__ static inline float kvw_path_max(float v, bool rope, float *sh)
{
    constexpr int E = G > 32 ? 32 : G;
    constexpr int TPC = QMLA_KV_DC / E, TPR = QMLA_KV_DR / E;
    constexpr int WC = TPC < 32 ? TPC : 32;
    if (rope) {
#pragma unroll
        for (int off = 1; off < TPR; off <<= 1)
            v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    } else {
#pragma unroll
        for (int off = 1; off < WC; off <<= 1)
            v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    }
    if constexpr (TPC > 32) {
        const int w = (int)(threadIdx.x >> 5);
        if ((threadIdx.x & 31u) == 0)
            sh[w] = v;
        __syncthreads();
        if (!rope)
            v = fmaxf(sh[w], sh[w ^ 1]);
    }
    return v;
}

template <int G, int BC, int BR, class In, bool Q8>
__global__ void __launch_bounds__(KVW_THREADS,
                                  Q8 ? (sizeof(In) == 2 ? QMLA_KVW_MIN_BLOCKS_Q8
                                                        : QMLA_KVW_MIN_BLOCKS_Q8 - 1)
                                     : (sizeof(In) == 2 ? QMLA_KVW_MIN_BLOCKS
                                                        : QMLA_KVW_MIN_BLOCKS_F32))
    kv_write_kernel(kvw_args a)
{
    constexpr int NC = KVW_CHUNKS(G > 32 ? 32 : G, In); /* uint4 per thread */
    constexpr int E = G > 32 ? 32 : G;      /* channels per thread */
    constexpr int LP = G / E;               /* lanes per group: 1 or 2 */
    constexpr int TOK = E / 2;              /* tokens per block */
    constexpr int TPC = QMLA_KV_DC / E;     /* content threads per token */
    constexpr int TPR = QMLA_KV_DR / E;     /* RoPE threads per token */
    constexpr int NGC = QMLA_KV_DC / G;     /* content groups per token */
    constexpr int NGR = QMLA_KV_DR / G;     /* RoPE groups per token */
    const int tid = threadIdx.x;
    const bool rope = tid >= 256;
    const int u = rope ? tid - 256 : tid;
    const int tk = rope ? u / TPR : u / TPC, k = rope ? u % TPR : u % TPC;
    const int g = k / LP, half = k % LP;    /* group within the path, half of it */
    const size_t i = (size_t)blockIdx.x * TOK + tk;
    /* no early return: lane pairs load, shuffle and store together */
    /* All loads issued at once: the row (whatever its slot: rows [n]
     * exist), its slot, sequence and position, then the sequence's length;
     * none waits for another DRAM round trip but the length. */
    const bool live = i < a.n;
    const int64_t slot = live ? a.slot[i] : -1;
    const int bseq = live ? a.seq[i] : 0;
    const long p = live ? a.pos[i] : 0;
    bool act = slot >= 0;
    const qmla_kv_layout &L = a.L;
    const int ch = rope ? QMLA_KV_DC + k * E : k * E; /* first channel */
    const In *src = (const In *)(sizeof(In) == 2 ? (const void *)a.kv : (const void *)a.kv_f32) +
                    (live ? i : 0) * QMLA_KV_D + ch;
    uint4 raw[NC];
    qmla_pair_load<NC>((const uint4 *)src, live, raw);
    const long len = act ? a.seq_len[bseq] : 0;
    uint8_t *pg = a.pool + (size_t)(act ? slot / QMLA_KV_PAGE : 0) * L.page_bytes;
    const int o = act ? (int)(slot % QMLA_KV_PAGE) : 0;

    /* extrema: NaN-propagating minimum / maximum (exact) */
    float rmn, rmx;
    if constexpr (sizeof(In) == 2) { /* BF16x2 pairs */
        __nv_bfloat162 mn2 = *(const __nv_bfloat162 *)&raw[0].x, mx2 = mn2;
#pragma unroll
        for (int v = 0; v < NC; v++) {
            const uint32_t wv[4] = {raw[v].x, raw[v].y, raw[v].z, raw[v].w};
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const __nv_bfloat162 p = *(const __nv_bfloat162 *)&wv[q];
                mn2 = __hmin2_nan(mn2, p);
                mx2 = __hmax2_nan(mx2, p);
            }
        }
        uint32_t mnu = *(const uint32_t *)&mn2, mxu = *(const uint32_t *)&mx2;
        if constexpr (LP == 2) { /* the other half of the group */
            const uint32_t pmn = __shfl_xor_sync(0xffffffffu, mnu, 1);
            const uint32_t pmx = __shfl_xor_sync(0xffffffffu, mxu, 1);
            mn2 = __hmin2_nan(mn2, *(const __nv_bfloat162 *)&pmn);
            mx2 = __hmax2_nan(mx2, *(const __nv_bfloat162 *)&pmx);
            mnu = *(const uint32_t *)&mn2;
            mxu = *(const uint32_t *)&mx2;
        }
        rmn = qmla_fmin_nan(__uint_as_float(mnu << 16), __uint_as_float(mnu & 0xffff0000u));
        rmx = qmla_fmax_nan(__uint_as_float(mxu << 16), __uint_as_float(mxu & 0xffff0000u));
    } else { /* float32 */
        rmn = rmx = kvw_elem<E, In>(raw, 0);
#pragma unroll
        for (int j = 1; j < E; j++) {
            rmn = qmla_fmin_nan(rmn, kvw_elem<E, In>(raw, j));
            rmx = qmla_fmax_nan(rmx, kvw_elem<E, In>(raw, j));
        }
        if constexpr (LP == 2) { /* the other half of the group */
            rmn = qmla_fmin_nan(rmn, __shfl_xor_sync(0xffffffffu, rmn, 1));
            rmx = qmla_fmax_nan(rmx, __shfl_xor_sync(0xffffffffu, rmx, 1));
        }
    }
    float mn = 0.0f, mx = 0.0f, s = 0.0f, l = 0.0f, bad = 0.0f;
    int st = QMLA_CORE_NONFINITE;
    const int bits = rope ? BR : BC; /* warp-uniform */
    const bool fin = qmla_emit_extrema_finish(rmn, rmx, &mn, &mx);
    float mcode = 0.0f, ccode = 0.0f, Mf = 0.0f, Sf = 0.0f; /* q8 fields */
    if constexpr (!Q8) {
        if (fin)
            st = qmla_core_group_meta_from_extrema(mn, mx, bits, QMLA_CORE_META_F16, &s, &l,
                                                   &bad);
    } else {
        /* one thread per group (or lane pair), the path's maxima by
         * reduction: the steps of qmla_core_token_meta_q8_finish */
        __shared__ float red[3][KVW_THREADS / 32];
        const float nonfin = kvw_path_max<G>(fin ? 0.0f : 1.0f, rope, red[0]);
        const float amax = kvw_path_max<G>(fin ? fabsf(mn) : 0.0f, rope, red[1]);
        int ovm = 0, ovs = 0;
        Mf = qmla_core_q8_super(amax, 127.0f, &ovm);
        float need = 0.0f;
        if (fin && !ovm)
            l = qmla_core_q8_min(mn, mx, Mf, (float)qmla_core_levels(bits), &mcode, &need);
        const float smax = kvw_path_max<G>(need > 0.0f ? need : 0.0f, rope, red[2]);
        Sf = qmla_core_q8_super(smax, 255.0f, &ovs);
        if (fin && !ovm && !ovs)
            s = qmla_core_q8_step(need, Sf, &ccode);
        if (!fin) {
            st = QMLA_CORE_NONFINITE;
        } else if (nonfin > 0.0f) {
            st = -1; /* another group of the path: reported by that group */
        } else if (ovm) {
            st = QMLA_CORE_LO_RANGE;
            bad = amax;
        } else if (ovs) {
            st = QMLA_CORE_SCALE_RANGE;
            bad = smax;
        } else {
            st = QMLA_CORE_OK;
        }
    }
    if (act && st != QMLA_CORE_OK) { /* both lanes of a pair (same token, same status) */
        /* q8 range errors belong to the path: its first thread reports them */
        bool report = (Q8 && st != QMLA_CORE_NONFINITE) ? k == 0 && st > 0 : half == 0;
        if (st == QMLA_CORE_NONFINITE) { /* the group's first non-finite value, as the twin */
            bool mine = false;
#pragma unroll
            for (int j = E - 1; j >= 0; j--) {
                const float v = kvw_elem<E, In>(raw, j);
                if (!qmla_core_isfinite(v)) {
                    bad = v;
                    mine = true;
                }
            }
            if constexpr (LP == 2) { /* the first half's, else the second's */
                const unsigned pair = 3u << (tid & 30);
                const bool first = __shfl_sync(pair, (int)mine, tid & 30) != 0;
                report = half == 0 ? mine : !first;
            } else {
                report = true;
            }
        }
        if (report) {
            /* group index within the token (q8 range errors: the path's first) */
            const int gidx = (Q8 && st != QMLA_CORE_NONFINITE) ? (rope ? L.ng_c : 0)
                                                                : (rope ? L.ng_c + g : g);
            const unsigned long long code =
                ((unsigned long long)(i * (L.ng_c + L.ng_r) + gidx) << 2) | (unsigned)st;
            const unsigned long long old = atomicMin(a.fail, code);
            if (code < old)
                *a.fail_value = bad;
        }
        act = false;
    }
    if (st != QMLA_CORE_OK)
        s = l = 0.0f;
    /* the BF16 rows of protected tokens first: raw is then dead element by
     * element in the emitter (fewer live registers) */
    if (act && p < a.S)
#pragma unroll
        for (int v = 0; v < E / 8; v++)
            ((uint4 *)(a.sink + ((size_t)bseq * a.S + (size_t)p) * QMLA_KV_D + ch))[v] =
                kvw_bf16_chunk<E, In>(raw, v);
    if (act && a.W > 0 && p >= len - a.W)
#pragma unroll
        for (int v = 0; v < E / 8; v++)
            ((uint4 *)(a.window + ((size_t)bseq * a.W + (size_t)(p % a.W)) * QMLA_KV_D + ch))[v] =
                kvw_bf16_chunk<E, In>(raw, v);
    const uint32_t meta = (uint32_t)__half_as_ushort(__float2half_rn(s)) |
                          (uint32_t)__half_as_ushort(__float2half_rn(l)) << 16; /* exact */
    if constexpr (Q8) { /* the token's record: S, M at 0, 2; sc[g] at 4; m[g] at 4 + ng */
        uint8_t *rec = pg + (rope ? L.off_mr + (size_t)o * L.mb_r : L.off_mc + (size_t)o * L.mb_c);
        const int ng = rope ? NGR : NGC;
        if (act && half == 0) {
            rec[4 + g] = (uint8_t)ccode;
            rec[4 + ng + g] = (uint8_t)(int8_t)mcode;
        }
        if (act && k == 0) { /* mb is even: 2-byte aligned */
            ((uint16_t *)rec)[0] = qmla_core_f32_to_f16(Sf, nullptr);
            ((uint16_t *)rec)[1] = qmla_core_f32_to_f16(Mf, nullptr);
        }
    }
    if (rope) {
        uint8_t *dst = pg + L.off_rc + (size_t)o * L.cb_r + (size_t)g * L.gb_r;
        kvw_codes<E, BR, In>(raw, src, s, l, dst + half * (E * BR / 8), act);
        if (!Q8 && act && half == 0)
            *(uint32_t *)(pg + L.off_mr + ((size_t)o * NGR + g) * 4) = meta;
    } else {
        uint8_t *dst = pg + (size_t)o * L.cb_c + (size_t)g * L.gb_c;
        kvw_codes<E, BC, In>(raw, src, s, l, dst + half * (E * BC / 8), act);
        if (!Q8 && act && half == 0)
            *(uint32_t *)(pg + L.off_mc + ((size_t)o * NGC + g) * 4) = meta;
    }
}

/* One instantiation per group size and bit widths (the bit widths are
 * compile-time: no per-warp switch between three code paths). */
template <int BC, int BR, class In, bool Q8>
static void kvw_launch_m(unsigned gb, cudaStream_t stream, const kvw_args &a)
{
    switch (a.L.G) {
    case 8: kv_write_kernel<8, BC, BR, In, Q8><<<gb, KVW_THREADS, 0, stream>>>(a); break;
    case 16: kv_write_kernel<16, BC, BR, In, Q8><<<gb, KVW_THREADS, 0, stream>>>(a); break;
    case 32: kv_write_kernel<32, BC, BR, In, Q8><<<gb, KVW_THREADS, 0, stream>>>(a); break;
    default: kv_write_kernel<64, BC, BR, In, Q8><<<gb, KVW_THREADS, 0, stream>>>(a); break;
    }
}

template <int BC, int BR, class In>
static void kvw_launch_b(unsigned gb, cudaStream_t stream, const kvw_args &a)
{
    if (a.L.meta == QMLA_CORE_META_Q8)
        kvw_launch_m<BC, BR, In, true>(gb, stream, a);
    else
        kvw_launch_m<BC, BR, In, false>(gb, stream, a);
}

template <int BC, class In>
static void kvw_launch_r(unsigned gb, cudaStream_t stream, const kvw_args &a)
{
    if (a.L.r_bits == 2)
        kvw_launch_b<BC, 2, In>(gb, stream, a);
    else if (a.L.r_bits == 4)
        kvw_launch_b<BC, 4, In>(gb, stream, a);
    else
        kvw_launch_b<BC, 8, In>(gb, stream, a);
}

template <class In>
static void kvw_launch_g(unsigned gb, cudaStream_t stream, const kvw_args &a)
{
    if (a.L.c_bits == 2)
        kvw_launch_r<2, In>(gb, stream, a);
    else if (a.L.c_bits == 4)
        kvw_launch_r<4, In>(gb, stream, a);
    else
        kvw_launch_r<8, In>(gb, stream, a);
}

extern "C" int qmla_kv_write_cuda_launch(const qmla_kv_cache *kc, const qmla_kv_write *w,
                                         void *ws, cudaStream_t stream, qmla_error *err)
{
    int st = qmla_kv_check(kc ? &kc->cfg : nullptr, err);
    if (st)
        return st;
    if (!w || !ws || (w->n > 0 && (!w->slot || !w->seq || !w->pos || !w->seq_len)))
        return qmla_error_set(err, QMLA_EINVAL, "kv writer: NULL argument");
    if ((st = qmla_kv_write_rows_check(w, err)))
        return st;
    if (((uintptr_t)w->kv & 15u) || ((uintptr_t)w->kv_f32 & 15u) || ((uintptr_t)kc->pool & 15u) ||
        ((uintptr_t)kc->sink & 15u) || ((uintptr_t)kc->window & 15u) || ((uintptr_t)ws & 7u))
        return qmla_error_set(err, QMLA_EINVAL,
                              "kv writer: rows, pool and buffers must be 16-byte aligned");
    const qmla_kv_layout L = qmla_kv_layout_of(&kc->cfg);
    if (!L.bf16 && ((kc->cfg.sink > 0 && !kc->sink) || (kc->cfg.window > 0 && !kc->window)))
        return qmla_error_set(err, QMLA_EINVAL, "kv writer: NULL protection buffer");
    /* no per-call reset of ws: qmla_kv_write_cuda_ws_init once, and status
     * resets it after a failure (H200 run 25: about 1 us of a 64K-token
     * C4R4 write, docs/decode.md) */
    cudaError_t e;
    if (w->n == 0)
        return QMLA_OK;
    kvw_args a;
    a.kv = w->kv;
    a.kv_f32 = w->kv_f32;
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
    if (L.bf16) {
        const size_t per = (size_t)KVC_THREADS * KVC_UNROLL, nq = w->n * (QMLA_KV_D * 2 / 16);
        const size_t blocks = (nq + per - 1) / per;
        if (blocks > 0x7fffffffu)
            return qmla_error_set(err, QMLA_EINVAL, "kv writer: %zu tokens is too many", w->n);
        if (w->kv)
            kv_copy_bf16_kernel<<<(unsigned)blocks, KVC_THREADS, 0, stream>>>(a);
        else
            kv_copy_f32_kernel<<<(unsigned)blocks, KVC_THREADS, 0, stream>>>(a);
    } else {
        const size_t tok = (size_t)(L.G > 32 ? 32 : L.G) / 2; /* tokens per block */
        const size_t blocks = (w->n + tok - 1) / tok;
        if (blocks > 0x7fffffffu)
            return qmla_error_set(err, QMLA_EINVAL, "kv writer: %zu tokens is too many", w->n);
        if (w->kv)
            kvw_launch_g<uint16_t>((unsigned)blocks, stream, a);
        else
            kvw_launch_g<float>((unsigned)blocks, stream, a);
    }
    if ((e = cudaGetLastError()) != cudaSuccess)
        return qmla_cuda_fail(err, e, "kv writer launch");
    return QMLA_OK;
}

extern "C" int qmla_kv_write_cuda_ws_init(void *ws, cudaStream_t stream, qmla_error *err)
{
    if (!ws || ((uintptr_t)ws & 7u))
        return qmla_error_set(err, QMLA_EINVAL, "kv writer: ws NULL or not 8-byte aligned");
    const cudaError_t e = cudaMemsetAsync(ws, 0xff, sizeof(unsigned long long), stream);
    return e == cudaSuccess ? QMLA_OK : qmla_cuda_fail(err, e, "cudaMemsetAsync");
}

extern "C" int qmla_kv_write_cuda_status(const qmla_kv_cache *kc, void *ws, cudaStream_t stream,
                                         qmla_error *err)
{
    unsigned long long code;
    float value;
    int failed;
    const int st = qmla_cuda_failure_word(ws, stream, "kv writer", &code, &value, &failed, err);
    if (st || !failed)
        return st;
    const qmla_kv_layout L = qmla_kv_layout_of(&kc->cfg);
    const size_t ngt = (size_t)(L.ng_c + L.ng_r), idx = (size_t)(code >> 2);
    const int cs = (int)(code & 3u);
    if (cs == QMLA_CORE_NONFINITE)
        return qmla_error_set(err, QMLA_ENONFINITE,
                              "kv writer: token %zu, group %zu: non-finite value %g", idx / ngt,
                              idx % ngt, (double)value);
    if (L.meta == QMLA_CORE_META_Q8) { /* the twin's messages: token and path */
        const char *path = idx % ngt < (size_t)L.ng_c ? "content" : "RoPE";
        if (cs == QMLA_CORE_LO_RANGE)
            return qmla_error_set(err, QMLA_ERANGE,
                                  "kv writer: token %zu, %s path: q8 metadata: max |lo| = %.9g "
                                  "needs a minimum super-scale %.9g above the float16 maximum %g",
                                  idx / ngt, path, (double)value, (double)value / 127.0,
                                  (double)QMLA_F16_MAX);
        return qmla_error_set(err, QMLA_ERANGE,
                              "kv writer: token %zu, %s path: q8 metadata: largest group step "
                              "%.9g needs a step super-scale %.9g above the float16 maximum %g",
                              idx / ngt, path, (double)value, (double)value / 255.0,
                              (double)QMLA_F16_MAX);
    }
    return qmla_error_set(err, QMLA_ERANGE,
                          "kv writer: token %zu, group %zu: %s %.9g does not fit float16 "
                          "metadata",
                          idx / ngt, idx % ngt, cs == QMLA_CORE_LO_RANGE ? "minimum" : "scale",
                          (double)value);
}
