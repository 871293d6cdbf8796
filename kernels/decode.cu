/* kernels/decode.cu — paged MLA decode attention (contract: kernels/decode.h).
 *
 * Main kernel: grid (split, row tile, sequence), 256 threads = 8 warps, one
 * 64-token page per iteration, 16 query rows (heads x query tokens) per
 * block, BF16 mma.sync m16n8k16 with float32 accumulation:
 *   1. the page lands in shared memory as a BF16 tile [64][576] (row stride
 *      584 to spread banks): BF16 cache via cp.async (double-buffered, zero
 *      fill past the sequence); low-bit cache from packed codes and float16
 *      metadata prefetched into registers during the previous page, then
 *      unpacked, x^ = fmaf(q, s, l) (quant_core.h) rounded to BF16, except
 *      for protected tokens (sink / window), which are copied from their
 *      BF16 buffers: exactly one representation per token;
 *   2. QK: warp (cg, th) multiplies its 144 channels (Q fragments held in
 *      registers for the whole run) with 32 tokens; the 4 channel partials
 *      are summed in shared memory in a fixed order (deterministic);
 *   3. online softmax (log2 domain) by 16 threads per row: P as BF16 tile,
 *      running max / sum and the rescale factor per row;
 *   4. PV: warp w accumulates output channels 64w..64w+63 (V = the tile's
 *      first 512 channels, loaded with ldmatrix.trans).
 * Each block writes its rows' normalised partial output and natural-log
 * LSE; the combine kernel merges the splits with one global softmax.
 */
#include "decode.h"
#include "qmla/kvcache.h"
#include "qmla/quant_core.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#define DEC_THREADS 256
#define DEC_ROWS 16
#define KSTR (QMLA_KV_D + 8)   /* tile row stride in BF16 elements */
#define PSTR (QMLA_KV_PAGE + 8) /* P tile row stride */
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

struct dec_args {
    const uint16_t *q;          /* [b, R, 576] */
    const uint8_t *pool;        /* [n_pages, page_bytes] */
    const uint16_t *sink;       /* [b, S, 576] */
    const uint16_t *window;     /* [b, W, 576] */
    const int32_t *block_table; /* [b, max_pages] */
    const int32_t *seq_len;     /* [b] */
    float *o_part;              /* [b, n_splits, R_pad, 512] */
    float *lse_part;            /* [b, n_splits, R_pad] */
    int max_pages, s_q, H, R, R_pad, n_splits, pps, S, W;
    float scale_log2;           /* softmax scale * log2(e) */
    qmla_kv_layout L;
};

/* ---- shared-memory plan -------------------------------------------------- */
struct dec_smem_quant {
    __nv_bfloat16 tile[QMLA_KV_PAGE * KSTR];
    float sp[4][DEC_ROWS][QMLA_KV_PAGE];
    __nv_bfloat16 p[DEC_ROWS * PSTR];
    float m[DEC_ROWS], l[DEC_ROWS], alpha[DEC_ROWS];
};
struct dec_smem_bf16 {
    __nv_bfloat16 tile[2][QMLA_KV_PAGE * KSTR];
    float sp[4][DEC_ROWS][QMLA_KV_PAGE];
    __nv_bfloat16 p[DEC_ROWS * PSTR];
    float m[DEC_ROWS], l[DEC_ROWS], alpha[DEC_ROWS];
};

/* ---- PTX helpers --------------------------------------------------------- */
__device__ static inline uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ static inline void ldsm_x4(uint32_t &d0, uint32_t &d1, uint32_t &d2, uint32_t &d3,
                                      const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(d0), "=r"(d1), "=r"(d2), "=r"(d3)
                 : "r"(smem_addr(p)));
}

__device__ static inline void ldsm_x4_t(uint32_t &d0, uint32_t &d1, uint32_t &d2, uint32_t &d3,
                                        const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(d0), "=r"(d1), "=r"(d2), "=r"(d3)
                 : "r"(smem_addr(p)));
}

__device__ static inline void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ static inline void cp_async16(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(src_bytes));
}
__device__ static inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int N> __device__ static inline void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* ---- packed chunks: 8 codes of B bits (B bytes) ------------------------- */
template <int B> struct chunk_t;
template <> struct chunk_t<2> { typedef uint16_t type; };
template <> struct chunk_t<4> { typedef uint32_t type; };
template <> struct chunk_t<8> { typedef uint2 type; };

template <int B>
__device__ static inline uint4 dequant_chunk(typename chunk_t<B>::type v, uint32_t meta)
{
    const float s = __half2float(__ushort_as_half((unsigned short)(meta & 0xffffu)));
    const float l = __half2float(__ushort_as_half((unsigned short)(meta >> 16)));
    uint64_t bitsv;
    if constexpr (B == 8)
        bitsv = (uint64_t)v.x | ((uint64_t)v.y << 32);
    else
        bitsv = (uint64_t)v;
    float x[8];
#pragma unroll
    for (int j = 0; j < 8; j++)
        x[j] = qmla_core_dequant((unsigned)((bitsv >> (B * j)) & ((1u << B) - 1u)), s, l);
    uint4 r;
    __nv_bfloat162 h;
    h = __floats2bfloat162_rn(x[0], x[1]);
    r.x = *(uint32_t *)&h;
    h = __floats2bfloat162_rn(x[2], x[3]);
    r.y = *(uint32_t *)&h;
    h = __floats2bfloat162_rn(x[4], x[5]);
    r.z = *(uint32_t *)&h;
    h = __floats2bfloat162_rn(x[6], x[7]);
    r.w = *(uint32_t *)&h;
    return r;
}

/* Content chunks per thread (64 tokens x 64 chunks / 256 threads) and RoPE
 * chunks per thread (64 x 8 / 256). */
#define CCH 16
#define RCH 2

template <int CB, int RB> struct prefetch {
    typename chunk_t<CB>::type c[CCH];
    uint32_t cm[CCH];
    typename chunk_t<RB>::type r[RCH];
    uint32_t rm[RCH];
};

template <int CB, int RB>
__device__ static inline void load_page(prefetch<CB, RB> &f, const uint8_t *pg,
                                        const qmla_kv_layout &L, int tid)
{
    const int lanes_c = L.G / 8;
#pragma unroll
    for (int j = 0; j < CCH; j++) {
        const int c = tid + DEC_THREADS * j, tt = c >> 6, kk = c & 63;
        f.c[j] = __ldg((const typename chunk_t<CB>::type *)pg + c);
        f.cm[j] = __ldg((const uint32_t *)(pg + L.off_mc) + tt * L.ng_c + kk / lanes_c);
    }
#pragma unroll
    for (int j = 0; j < RCH; j++) {
        const int c = tid + DEC_THREADS * j, tt = c >> 3, kk = c & 7;
        f.r[j] = __ldg((const typename chunk_t<RB>::type *)(pg + L.off_rc) + c);
        f.rm[j] = __ldg((const uint32_t *)(pg + L.off_mr) + tt * L.ng_r + kk / lanes_c);
    }
}

/* Write the reconstructed page into the tile. t0: first token of the page. */
template <int CB, int RB>
__device__ static inline void store_page(const prefetch<CB, RB> &f, __nv_bfloat16 *tile,
                                         const dec_args &a, int b, long t0, long len, int tid)
{
    const bool special = t0 < a.S || t0 + QMLA_KV_PAGE > len - a.W; /* protected or partial */
#pragma unroll
    for (int j = 0; j < CCH + RCH; j++) {
        int tt, ch;
        if (j < CCH) {
            const int c = tid + DEC_THREADS * j;
            tt = c >> 6;
            ch = (c & 63) * 8;
        } else {
            const int c = tid + DEC_THREADS * (j - CCH);
            tt = c >> 3;
            ch = QMLA_KV_DC + (c & 7) * 8;
        }
        uint4 v;
        const long t = t0 + tt;
        if (special && t >= len) {
            v = make_uint4(0, 0, 0, 0);
        } else if (special && (t < a.S || t >= len - a.W)) {
            const uint16_t *src = t < a.S ? a.sink + ((size_t)b * a.S + t) * QMLA_KV_D
                                          : a.window + ((size_t)b * a.W + t % a.W) * QMLA_KV_D;
            v = __ldg((const uint4 *)(src + ch));
        } else if (j < CCH) {
            v = dequant_chunk<CB>(f.c[j], f.cm[j]);
        } else {
            v = dequant_chunk<RB>(f.r[j - CCH], f.rm[j - CCH]);
        }
        *(uint4 *)(tile + tt * KSTR + ch) = v;
    }
}

/* BF16 page: cp.async of 64 x 72 chunks of 16 bytes, zero past the end. */
__device__ static inline void async_page_bf16(__nv_bfloat16 *tile, const uint8_t *pg, long t0,
                                              long len, int tid)
{
#pragma unroll
    for (int j = 0; j < 18; j++) {
        const int c = tid + DEC_THREADS * j, tt = c / 72, kk = c - tt * 72;
        cp_async16(tile + tt * KSTR + kk * 8, pg + (size_t)c * 16, t0 + tt < len ? 16 : 0);
    }
}

/* ---- one page of attention on a ready tile ------------------------------ */
struct dec_state {
    uint32_t qf[9][4]; /* Q A-fragments of this warp's 9 k-steps */
    float o[8][4];     /* O accumulators: 16 rows x 64 channels */
};

template <class SM>
__device__ static inline void attend_page(dec_state &st, SM &sm, const __nv_bfloat16 *tile,
                                          const dec_args &a, long t0, long vis, int tid)
{
    const int warp = tid >> 5, lane = tid & 31, cg = warp & 3, th = warp >> 2;
    const int gr = lane >> 2, gc = lane & 3;
    /* QK partial: 16 rows x 32 tokens over channels [144cg, 144cg+144) */
    float s[4][4];
#pragma unroll
    for (int n = 0; n < 4; n++)
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    const int mi = lane >> 3, rr = lane & 7;
#pragma unroll
    for (int kk = 0; kk < 9; kk++) {
        const int k0 = (cg * 9 + kk) * 16;
#pragma unroll
        for (int np = 0; np < 2; np++) {
            const int n0 = th * 32 + np * 16;
            uint32_t b0, b1, b2, b3;
            ldsm_x4(b0, b1, b2, b3, tile + (n0 + rr + 8 * (mi >> 1)) * KSTR + k0 + 8 * (mi & 1));
            mma16816(s[2 * np], st.qf[kk], b0, b1);
            mma16816(s[2 * np + 1], st.qf[kk], b2, b3);
        }
    }
#pragma unroll
    for (int n = 0; n < 4; n++) {
        const int tok = th * 32 + n * 8 + 2 * gc;
        *(float2 *)&sm.sp[cg][gr][tok] = make_float2(s[n][0], s[n][1]);
        *(float2 *)&sm.sp[cg][gr + 8][tok] = make_float2(s[n][2], s[n][3]);
    }
    __syncthreads();
    /* softmax: 16 threads per row, 4 tokens each (fixed summation order) */
    {
        const int row = tid >> 4, part = tid & 15;
        float z[4], mx = -INFINITY;
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int tok = part * 4 + u;
            const float acc = ((sm.sp[0][row][tok] + sm.sp[1][row][tok]) + sm.sp[2][row][tok]) +
                              sm.sp[3][row][tok];
            z[u] = t0 + tok < vis ? acc * a.scale_log2 : -INFINITY;
            mx = fmaxf(mx, z[u]);
        }
#pragma unroll
        for (int off = 8; off > 0; off >>= 1)
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        const float m_old = sm.m[row], m_new = fmaxf(m_old, mx);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        float sum = 0.0f;
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const float p = exp2f(z[u] - m_use);
            sum += p;
            sm.p[row * PSTR + part * 4 + u] = __float2bfloat16_rn(p);
        }
#pragma unroll
        for (int off = 8; off > 0; off >>= 1)
            sum += __shfl_xor_sync(0xffffffffu, sum, off);
        __syncwarp();
        if (part == 0) {
            const float al = exp2f(m_old - m_use); /* m_old = -inf: 0 */
            sm.alpha[row] = al;
            sm.l[row] = sm.l[row] * al + sum;
            sm.m[row] = m_new;
        }
    }
    __syncthreads();
    /* PV: rows x channels [64w, 64w+64) */
    {
        const float a0 = sm.alpha[gr], a1 = sm.alpha[gr + 8];
#pragma unroll
        for (int n = 0; n < 8; n++) {
            st.o[n][0] *= a0;
            st.o[n][1] *= a0;
            st.o[n][2] *= a1;
            st.o[n][3] *= a1;
        }
#pragma unroll
        for (int ks = 0; ks < 4; ks++) {
            uint32_t pa[4];
            /* A = P[16 rows][16 tokens]: matrices (rows 0-7, k 0-7), (rows 8-15,
             * k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15) */
            ldsm_x4(pa[0], pa[1], pa[2], pa[3],
                    sm.p + (rr + 8 * (mi & 1)) * PSTR + ks * 16 + 8 * (mi >> 1));
#pragma unroll
            for (int np = 0; np < 4; np++) {
                const int n0 = warp * 64 + np * 16;
                uint32_t b0, b1, b2, b3;
                ldsm_x4_t(b0, b1, b2, b3,
                          tile + (ks * 16 + rr + 8 * (mi & 1)) * KSTR + n0 + 8 * (mi >> 1));
                mma16816(st.o[2 * np], pa, b0, b1);
                mma16816(st.o[2 * np + 1], pa, b2, b3);
            }
        }
    }
}

/* Load Q fragments (zero rows past R) and reset the softmax state. */
template <class SM>
__device__ static inline void dec_init(dec_state &st, SM &sm, const dec_args &a, int b, int r0,
                                       int tid)
{
    const int warp = tid >> 5, lane = tid & 31, cg = warp & 3;
    const int gr = lane >> 2, gc = lane & 3;
    const int ra = r0 + gr, rb = r0 + gr + 8;
    const uint32_t *qa = (const uint32_t *)(a.q + ((size_t)b * a.R + ra) * QMLA_KV_D);
    const uint32_t *qb = (const uint32_t *)(a.q + ((size_t)b * a.R + rb) * QMLA_KV_D);
#pragma unroll
    for (int kk = 0; kk < 9; kk++) {
        const int k0 = (cg * 9 + kk) * 16 + 2 * gc; /* even: one 32-bit word */
        st.qf[kk][0] = ra < a.R ? __ldg(qa + k0 / 2) : 0u;
        st.qf[kk][1] = rb < a.R ? __ldg(qb + k0 / 2) : 0u;
        st.qf[kk][2] = ra < a.R ? __ldg(qa + k0 / 2 + 4) : 0u;
        st.qf[kk][3] = rb < a.R ? __ldg(qb + k0 / 2 + 4) : 0u;
    }
#pragma unroll
    for (int n = 0; n < 8; n++)
        st.o[n][0] = st.o[n][1] = st.o[n][2] = st.o[n][3] = 0.0f;
    if (tid < DEC_ROWS) {
        sm.m[tid] = -INFINITY;
        sm.l[tid] = 0.0f;
    }
}

/* Normalised partial output and natural-log LSE of this block's rows. */
template <class SM>
__device__ static inline void dec_finish(const dec_state &st, SM &sm, const dec_args &a, int b,
                                         int split, int r0, int tid)
{
    __syncthreads();
    const int warp = tid >> 5, lane = tid & 31, gr = lane >> 2, gc = lane & 3;
    const size_t base = ((size_t)b * a.n_splits + split) * a.R_pad + r0;
    const float la = sm.l[gr], lb = sm.l[gr + 8];
    const float ia = la > 0.0f ? 1.0f / la : 0.0f, ib = lb > 0.0f ? 1.0f / lb : 0.0f;
#pragma unroll
    for (int n = 0; n < 8; n++) {
        const int ch = warp * 64 + n * 8 + 2 * gc;
        *(float2 *)(a.o_part + (base + gr) * QMLA_KV_DC + ch) =
            make_float2(st.o[n][0] * ia, st.o[n][1] * ia);
        *(float2 *)(a.o_part + (base + gr + 8) * QMLA_KV_DC + ch) =
            make_float2(st.o[n][2] * ib, st.o[n][3] * ib);
    }
    if (tid < DEC_ROWS) {
        const float l = sm.l[tid];
        a.lse_part[base + tid] = l > 0.0f ? (sm.m[tid] + log2f(l)) * LN2 : -INFINITY;
    }
}

/* Visible-token bound (tokens t < vis) of the softmax row of thread tid. */
__device__ static inline long row_vis(const dec_args &a, int r0, long len, int tid)
{
    const int row = r0 + (tid >> 4);
    return row < a.R ? len - a.s_q + row / a.H + 1 : 0;
}

template <int CB, int RB>
__global__ void __launch_bounds__(DEC_THREADS, 1) decode_quant_kernel(dec_args a)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    dec_smem_quant &sm = *(dec_smem_quant *)smem_raw;
    const int split = blockIdx.x, r0 = blockIdx.y * DEC_ROWS, b = blockIdx.z, tid = threadIdx.x;
    const long len = a.seq_len[b];
    const int npages = (int)((len + QMLA_KV_PAGE - 1) / QMLA_KV_PAGE);
    const int p0 = split * a.pps, p1 = min(npages, p0 + a.pps);
    dec_state st;
    dec_init(st, sm, a, b, r0, tid);
    const long vis = row_vis(a, r0, len, tid);
    const int32_t *bt = a.block_table + (size_t)b * a.max_pages;
    prefetch<CB, RB> f;
    if (p0 < p1)
        load_page<CB, RB>(f, a.pool + (size_t)bt[p0] * a.L.page_bytes, a.L, tid);
    for (int p = p0; p < p1; p++) {
        __syncthreads(); /* the tile's previous readers are done */
        store_page<CB, RB>(f, sm.tile, a, b, (long)p * QMLA_KV_PAGE, len, tid);
        __syncthreads();
        if (p + 1 < p1)
            load_page<CB, RB>(f, a.pool + (size_t)bt[p + 1] * a.L.page_bytes, a.L, tid);
        attend_page(st, sm, sm.tile, a, (long)p * QMLA_KV_PAGE, vis, tid);
    }
    dec_finish(st, sm, a, b, split, r0, tid);
}

__global__ void __launch_bounds__(DEC_THREADS, 1) decode_bf16_kernel(dec_args a)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    dec_smem_bf16 &sm = *(dec_smem_bf16 *)smem_raw;
    const int split = blockIdx.x, r0 = blockIdx.y * DEC_ROWS, b = blockIdx.z, tid = threadIdx.x;
    const long len = a.seq_len[b];
    const int npages = (int)((len + QMLA_KV_PAGE - 1) / QMLA_KV_PAGE);
    const int p0 = split * a.pps, p1 = min(npages, p0 + a.pps);
    dec_state st;
    dec_init(st, sm, a, b, r0, tid);
    const long vis = row_vis(a, r0, len, tid);
    const int32_t *bt = a.block_table + (size_t)b * a.max_pages;
    if (p0 < p1) {
        async_page_bf16(sm.tile[0], a.pool + (size_t)bt[p0] * a.L.page_bytes,
                        (long)p0 * QMLA_KV_PAGE, len, tid);
        cp_async_commit();
    }
    for (int p = p0; p < p1; p++) {
        __syncthreads(); /* the buffer about to be refilled is no longer read */
        if (p + 1 < p1) {
            async_page_bf16(sm.tile[(p + 1 - p0) & 1], a.pool + (size_t)bt[p + 1] * a.L.page_bytes,
                            (long)(p + 1) * QMLA_KV_PAGE, len, tid);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        attend_page(st, sm, sm.tile[(p - p0) & 1], a, (long)p * QMLA_KV_PAGE, vis, tid);
    }
    dec_finish(st, sm, a, b, split, r0, tid);
}

/* Combine: one block of 128 threads per (row, sequence), 4 channels each. */
__global__ void __launch_bounds__(128) decode_combine_kernel(const float *o_part,
                                                            const float *lse_part, int n_splits,
                                                            int R, int R_pad, uint16_t *out,
                                                            float *lse)
{
    const int r = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
    float mx = -INFINITY;
    for (int s = 0; s < n_splits; s++)
        mx = fmaxf(mx, lse_part[((size_t)b * n_splits + s) * R_pad + r]);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sum = 0.0f;
    if (mx != -INFINITY) {
        for (int s = 0; s < n_splits; s++) {
            const size_t row = ((size_t)b * n_splits + s) * R_pad + r;
            const float ls = lse_part[row];
            if (ls == -INFINITY)
                continue;
            const float w = expf(ls - mx);
            sum += w;
            const float4 v = *((const float4 *)(o_part + row * QMLA_KV_DC) + tid);
            acc[0] += w * v.x;
            acc[1] += w * v.y;
            acc[2] += w * v.z;
            acc[3] += w * v.w;
        }
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    __nv_bfloat162 h0 = __floats2bfloat162_rn(acc[0] * inv, acc[1] * inv);
    __nv_bfloat162 h1 = __floats2bfloat162_rn(acc[2] * inv, acc[3] * inv);
    uint2 v;
    v.x = *(uint32_t *)&h0;
    v.y = *(uint32_t *)&h1;
    *((uint2 *)(out + ((size_t)b * R + r) * QMLA_KV_DC) + tid) = v;
    if (tid == 0)
        lse[(size_t)b * R + r] = mx == -INFINITY ? -INFINITY : mx + logf(sum);
}

/* ---- host side ----------------------------------------------------------- */
static int cuda_fail(qmla_error *err, cudaError_t e, const char *what)
{
    return qmla_error_set(err, QMLA_EIO, "CUDA: %s: %s", what, cudaGetErrorString(e));
}

extern "C" int qmla_decode_cuda_plan(const qmla_kv_config *cfg, const qmla_decode_args *a,
                                     long max_len, int n_sm, qmla_decode_plan *plan,
                                     qmla_error *err)
{
    int st = qmla_kv_check(cfg, err);
    if (st)
        return st;
    if (!a || !plan || a->batch < 1 || a->s_q < 1 || a->heads < 1 || max_len < 0)
        return qmla_error_set(err, QMLA_EINVAL, "decode plan: batch, s_q, heads >= 1 needed");
    const long R = (long)a->s_q * a->heads;
    if (R > QMLA_DECODE_MAX_ROWS)
        return qmla_error_set(err, QMLA_EINVAL, "decode plan: s_q * H = %ld above %d", R,
                              QMLA_DECODE_MAX_ROWS);
    if (n_sm <= 0) {
        int dev = 0;
        cudaError_t e = cudaGetDevice(&dev);
        if (e == cudaSuccess)
            e = cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev);
        if (e != cudaSuccess)
            return cuda_fail(err, e, "multiprocessor count");
    }
    const int tiles = (int)((R + DEC_ROWS - 1) / DEC_ROWS);
    const long pages = (max_len + QMLA_KV_PAGE - 1) / QMLA_KV_PAGE;
    const long per_seq = (long)a->batch * tiles;
    long splits = ((long)n_sm + per_seq - 1) / per_seq; /* one wave of blocks */
    if (splits > pages)
        splits = pages;
    if (splits < 1)
        splits = 1;
    long pps = (pages + splits - 1) / splits;
    if (pps < 1)
        pps = 1;
    splits = pages > 0 ? (pages + pps - 1) / pps : 1;
    plan->n_splits = (int)splits;
    plan->pages_per_split = (int)pps;
    plan->row_tiles = tiles;
    const size_t rows = (size_t)a->batch * splits * tiles * DEC_ROWS;
    plan->ws_bytes = rows * QMLA_KV_DC * 4 + ((rows * 4 + 15) & ~(size_t)15);
    return QMLA_OK;
}

extern "C" int qmla_decode_cuda(const qmla_kv_cache *kc, const qmla_decode_args *a,
                                const qmla_decode_plan *plan, void *ws, uint16_t *out,
                                float *lse, cudaStream_t stream, qmla_error *err)
{
    int st = qmla_kv_check(kc ? &kc->cfg : nullptr, err);
    if (st)
        return st;
    if (!a || !plan || !ws || !out || !lse || !a->q || !a->block_table || !a->seq_len ||
        !kc->pool)
        return qmla_error_set(err, QMLA_EINVAL, "decode: NULL argument");
    const qmla_kv_layout L = qmla_kv_layout_of(&kc->cfg);
    const long R = (long)a->s_q * a->heads;
    if (a->batch < 1 || a->s_q < 1 || a->heads < 1 || R > QMLA_DECODE_MAX_ROWS ||
        plan->row_tiles != (int)((R + DEC_ROWS - 1) / DEC_ROWS) || plan->n_splits < 1)
        return qmla_error_set(err, QMLA_EINVAL,
                              "decode: batch %d, s_q %d, heads %d do not match the plan",
                              a->batch, a->s_q, a->heads);
    if (((uintptr_t)a->q & 15u) || ((uintptr_t)kc->pool & 15u) || ((uintptr_t)ws & 15u) ||
        ((uintptr_t)kc->sink & 15u) || ((uintptr_t)kc->window & 15u) || ((uintptr_t)out & 7u))
        return qmla_error_set(err, QMLA_EINVAL, "decode: q, pool, buffers, workspace must be "
                                                "16-byte aligned, out 8-byte aligned");
    if (!L.bf16 && ((kc->cfg.sink > 0 && !kc->sink) || (kc->cfg.window > 0 && !kc->window)))
        return qmla_error_set(err, QMLA_EINVAL, "decode: NULL protection buffer");
    if (!L.bf16 && !((L.c_bits == 4 && L.r_bits == 4) || (L.c_bits == 2 && L.r_bits == 4) ||
                     (L.c_bits == 8 && L.r_bits == 8)))
        return qmla_error_set(err, QMLA_EINVAL,
                              "decode: C%dR%d is not built (C4R4, C2R4, C8R8, BF16)", L.c_bits,
                              L.r_bits);
    dec_args d;
    d.q = a->q;
    d.pool = kc->pool;
    d.sink = kc->sink;
    d.window = kc->window;
    d.block_table = a->block_table;
    d.seq_len = a->seq_len;
    d.max_pages = a->max_pages;
    d.s_q = a->s_q;
    d.H = a->heads;
    d.R = (int)R;
    d.R_pad = plan->row_tiles * DEC_ROWS;
    d.n_splits = plan->n_splits;
    d.pps = plan->pages_per_split;
    d.S = L.bf16 ? 0 : kc->cfg.sink;
    d.W = L.bf16 ? 0 : kc->cfg.window;
    d.scale_log2 = a->scale * LOG2E;
    d.L = L;
    const size_t rows = (size_t)a->batch * d.n_splits * d.R_pad;
    d.o_part = (float *)ws;
    d.lse_part = (float *)ws + rows * QMLA_KV_DC;
    dim3 grid((unsigned)d.n_splits, (unsigned)plan->row_tiles, (unsigned)a->batch);
    cudaError_t e = cudaSuccess;
#define QMLA_LAUNCH(KERNEL, SMEM)                                                              \
    do {                                                                                       \
        e = cudaFuncSetAttribute(KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize,          \
                                 (int)(SMEM));                                                 \
        if (e == cudaSuccess) {                                                                \
            KERNEL<<<grid, DEC_THREADS, SMEM, stream>>>(d);                                    \
            e = cudaGetLastError();                                                            \
        }                                                                                      \
    } while (0)
    if (L.bf16)
        QMLA_LAUNCH(decode_bf16_kernel, sizeof(dec_smem_bf16));
    else if (L.c_bits == 4)
        QMLA_LAUNCH((decode_quant_kernel<4, 4>), sizeof(dec_smem_quant));
    else if (L.c_bits == 2)
        QMLA_LAUNCH((decode_quant_kernel<2, 4>), sizeof(dec_smem_quant));
    else
        QMLA_LAUNCH((decode_quant_kernel<8, 8>), sizeof(dec_smem_quant));
#undef QMLA_LAUNCH
    if (e != cudaSuccess)
        return cuda_fail(err, e, "decode main kernel");
    decode_combine_kernel<<<dim3((unsigned)R, (unsigned)a->batch), 128, 0, stream>>>(
        d.o_part, d.lse_part, d.n_splits, d.R, d.R_pad, out, lse);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return cuda_fail(err, e, "decode combine kernel");
    return QMLA_OK;
}
