/* kernels/decode.cu — paged MLA decode attention (contract: kernels/decode_cuda.h).
 *
 * Two designs, both with grid (split, row tile, sequence), 256 threads = 8
 * warps, one 64-token page per step, 16 query rows (heads x query tokens)
 * per block, BF16 mma.sync m16n8k16 with float32 accumulation, and a
 * normalised partial output + natural-log LSE per block that the combine
 * kernel merges with one global softmax:
 *
 * BF16 tile (decode_bf16_kernel, decode_quant_kernel<8, 8> for C8R8):
 *   1. the page lands in shared memory as a BF16 tile [64][576] (row stride
 *      584 to spread banks): BF16 cache via cp.async (double-buffered, zero
 *      fill past the sequence); C8R8 from packed codes and float16
 *      metadata prefetched into registers during the previous page, then
 *      unpacked, x^ = fmaf(q, s, l) (quant_core.h) rounded to BF16, except
 *      for protected tokens (sink / window), which are copied from their
 *      BF16 buffers: exactly one representation per token;
 *   2. QK: warp (cg, th) multiplies its 144 channels of Q (a [16][576] tile
 *      in shared memory, loaded once, read with ldmatrix) with 32 tokens;
 *      the 4 channel partials are summed in shared memory in a fixed order
 *      (deterministic);
 *   3. online softmax (log2 domain) by 16 threads per row: P as BF16 tile,
 *      running max / sum and the rescale factor per row;
 *   4. PV: warp w accumulates output channels 64w..64w+63 (V = the tile's
 *      first 512 channels, loaded with ldmatrix.trans).
 *   Occupancy: BF16 one block per SM (two page tiles, 185 KB of shared
 *   memory); C8R8 two blocks per SM (one tile, 112 KB, 128 registers).
 *
 * Codes on tensor cores (decode_fast_kernel, C4R4 and C2R4): the packed
 * codes themselves are the MMA operands (exact BF16 values q 2^(p-133)),
 * step and minimum applied per group after the products; protected tokens
 * are attended to by extra blocks through the BF16-tile path (see "C4R4 /
 * C2R4" below).
 *
 * Head rows on one tile (decode_mr_kernel, variant 5): the BF16-tile
 * attention for 32 query rows per block, each page tile and each of its
 * ldmatrix fragments shared by the two row tiles' MMAs (see "variant 5").
 *
 * Codes on tensor cores for two row tiles (decode_fast_mr_kernel, variant
 * 6): the fast kernel's arithmetic for 32 query rows per block, each page's
 * codes unpacked once for both tiles' MMAs (see "variant 6"; H200 run 8:
 * no faster than variant 0, one block per SM instead of two).
 *
 * Twins: qmla_decode_ref_model (BF16-rounded packed values for the tile
 * kernels, unrounded for decode_fast_kernel; qmla_decode_cuda_packed_f32);
 * test: tests/cache/test_decode_cuda.c; benchmark: bench/bench_decode.cu;
 * description: docs/decode.md.
 */
#include "cuda_status.cuh"
#include "decode_cuda.h"
#include "mbarrier.cuh"
#include "qmla/kvcache.h"
#include "qmla/quant_core.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#define DEC_THREADS 256
#define DEC_ROWS 16
#define KSTR (QMLA_KV_D + 8)   /* tile row stride in BF16 elements */
#define PSTR (QMLA_KV_PAGE + 8) /* P tile row stride */
#define SSTR (QMLA_KV_PAGE + 8) /* score partial row stride (floats): 64-bit stores conflict-free */
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
    int n_prot;                 /* fast kernel: partials n_splits - n_prot .. of protected tokens */
    float scale_log2;           /* softmax scale * log2(e) */
    qmla_kv_layout L;
};

/* The pages of `split` (a.pps per split) that hold packed, unprotected
 * tokens [S, lenW) of its sequence (lenW = length - W): [*p0, *p1), empty
 * when *p1 <= *p0 (the fast, multi-row and wgmma kernels). */
__device__ static inline void packed_pages(const dec_args &a, int lenW, int split, int *p0,
                                           int *p1)
{
    const int lo = a.S / QMLA_KV_PAGE;
    const int hi = lenW > a.S ? (lenW + QMLA_KV_PAGE - 1) / QMLA_KV_PAGE : 0;
    const int q0 = split * a.pps, q1 = q0 + a.pps;
    *p0 = q0 > lo ? q0 : lo;
    *p1 = q1 < hi ? q1 : hi;
}

/* ---- shared-memory plan -------------------------------------------------- */
struct dec_smem_quant {
    __nv_bfloat16 tile[QMLA_KV_PAGE * KSTR]; /* [64 tokens][576 (+8 pad)] page */
    __nv_bfloat16 q[DEC_ROWS * KSTR];         /* [16 rows][576 (+8)] queries */
    float sp[4][DEC_ROWS][SSTR];              /* [channel quarter][16][64 (+8)] QK partials */
    __nv_bfloat16 p[DEC_ROWS * PSTR];         /* [16][64 (+8)] probabilities */
    float m[DEC_ROWS], l[DEC_ROWS], alpha[DEC_ROWS]; /* [16] running max (log2), sum, rescale */
    int tmap[QMLA_KV_PAGE];                   /* protected path: token of each tile row */
};
struct dec_smem_bf16 {
    __nv_bfloat16 tile[2][QMLA_KV_PAGE * KSTR]; /* [2 buffers][64][576 (+8)] */
    __nv_bfloat16 q[DEC_ROWS * KSTR];            /* as dec_smem_quant */
    float sp[4][DEC_ROWS][SSTR];
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

/* The same with float16 operands (the l sum(Q) term of decode_fast_kernel). */
__device__ static inline void mma16816_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
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

/* ---- reconstruction of packed groups ------------------------------------
 * Exactly qmla_kv_packed_value (kvcache.h), with cheaper instructions:
 *   - float16 metadata -> float32 by moving the bits into a float32 and
 *     multiplying by 2^112 (exact for every finite float16, subnormals too);
 *   - code -> float through the 2^23 magic number (PRMT + FADD, exact for
 *     codes < 2^23) instead of the quarter-rate I2F;
 *   - x^ = fmaf(q, s, l) with __fmaf_rn as qmla_core_dequant; BF16 by
 *     cvt.rn.bf16x2 (round to nearest even, as qmla_core_f32_to_bf16).
 * A unit is NE consecutive channels of one group (G = 64) of one token.
 */
__device__ static inline float f16_to_f32_exact(uint32_t h)
{
    const uint32_t u = ((h & 0x8000u) << 16) | ((h & 0x7fffu) << 13);
    return __fmul_rn(__uint_as_float(u), 5.192296858534828e33f /* 2^112 */);
}

/* Code in byte k of w (bits above the code cleared) as a float. */
__device__ static inline float byte_code_f(uint32_t w, int k)
{
    return __fsub_rn(__uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u | (unsigned)k)),
                     8388608.0f);
}

__device__ static inline uint32_t bf16x2(float lo, float hi)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&h;
}

/* NE codes of B bits (NE*B/8 bytes, as NE*B/128 uint4) with metadata word
 * meta (low: step s, high: minimum l, float16 bits) -> NE BF16 (NE/8 uint4). */
template <int B, int NE>
__device__ static inline void dequant_unit(const uint4 *in, uint32_t meta, uint4 *out)
{
    const float s = f16_to_f32_exact(meta & 0xffffu), l = f16_to_f32_exact(meta >> 16);
    const uint32_t *w = (const uint32_t *)in;
    uint32_t *o = (uint32_t *)out;
    if constexpr (B == 8) { /* 4 codes per word */
#pragma unroll
        for (int i = 0; i < NE / 4; i++) {
            float x[4];
#pragma unroll
            for (int k = 0; k < 4; k++)
                x[k] = __fmaf_rn(byte_code_f(w[i], k), s, l);
            o[2 * i] = bf16x2(x[0], x[1]);
            o[2 * i + 1] = bf16x2(x[2], x[3]);
        }
    } else if constexpr (B == 4) { /* 8 codes per word: even ones low nibbles */
#pragma unroll
        for (int i = 0; i < NE / 8; i++) {
            const uint32_t ev = w[i] & 0x0f0f0f0fu, od = (w[i] >> 4) & 0x0f0f0f0fu;
#pragma unroll
            for (int k = 0; k < 4; k++)
                o[4 * i + k] = bf16x2(__fmaf_rn(byte_code_f(ev, k), s, l),
                                      __fmaf_rn(byte_code_f(od, k), s, l));
        }
    } else { /* B == 2: 16 codes per word, code 4k + m in byte k at bits 2m */
#pragma unroll
        for (int i = 0; i < NE / 16; i++) {
            uint32_t part[4];
#pragma unroll
            for (int m = 0; m < 4; m++)
                part[m] = (w[i] >> (2 * m)) & 0x03030303u;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                o[8 * i + 2 * k] = bf16x2(__fmaf_rn(byte_code_f(part[0], k), s, l),
                                          __fmaf_rn(byte_code_f(part[1], k), s, l));
                o[8 * i + 2 * k + 1] = bf16x2(__fmaf_rn(byte_code_f(part[2], k), s, l),
                                              __fmaf_rn(byte_code_f(part[3], k), s, l));
            }
        }
    }
}

/* Work of one thread per page (G = 64), in 16-byte pieces of packed codes
 * (a piece holds EP = 128 / B codes: 32 at 4 bits, 64 at 2, 16 at 8).
 * Content: warp w takes tokens (w % 4) * 16 .. + 15, two lanes per token
 * reading the two pieces of one 32-byte sector (piece_lane_*), so every
 * sector a warp touches is used whole; warps 0-3 take the token's first half of pieces,
 * warps 4-7 the second (which is groups 4h .. 4h+3, whose metadata is one
 * 16-byte load). RoPE: consecutive pieces of consecutive tokens (threads
 * 64..191 at 4 bits, all 256 at 8). The 16-byte tile stores of a
 * quarter-warp (8 consecutive tokens, row stride 73 x 16 bytes) fall on 8
 * distinct bank groups. */
template <int B> struct piece_of {
    static constexpr int EP = 128 / B;            /* codes per piece */
    static constexpr int PPT = QMLA_KV_DC * B / 128; /* content pieces per token */
    static constexpr int PT = PPT / 4;             /* content pieces per thread */
};

/* Lane -> (token within the warp's 16, piece parity). 4 bits: lane pairs
 * (l / 2, l % 2), measured faster (ncu 711 vs 779 us at b 32, 64K; their
 * 16-byte tile stores still hit 8 bank groups); 2 and 8 bits: (l % 16,
 * l / 16), which keeps their tile stores conflict-free. */
template <int CB> __device__ static inline int piece_lane_token(int lane)
{
    return CB == 4 ? lane >> 1 : lane & 15;
}
template <int CB> __device__ static inline int piece_lane_par(int lane)
{
    return CB == 4 ? lane & 1 : lane >> 4;
}

template <int CB, int RB> struct prefetch {
    uint4 c[piece_of<CB>::PT];
    uint4 cm;      /* metadata of groups 4h .. 4h+3 of the token */
    uint4 r;       /* one RoPE piece */
    uint32_t rm;
};

/* RoPE piece of thread tid (-1: none) and its token / piece index. */
template <int RB> __device__ static inline int rope_piece(int tid)
{
    const int v = RB == 4 ? tid - 64 : tid; /* 128 pieces at 4 bits, 256 at 8 */
    return v >= 0 && v < 64 * (QMLA_KV_DR * RB / 128) ? v : -1;
}

template <int CB, int RB>
__device__ static inline void load_page(prefetch<CB, RB> &f, const uint8_t *pg,
                                        const qmla_kv_layout &L, int tid)
{
    typedef piece_of<CB> P;
    const int warp = tid >> 5, lane = tid & 31, tok = (warp & 3) * 16 + piece_lane_token<CB>(lane);
    const int h = warp >> 2, par = piece_lane_par<CB>(lane);
    const uint4 *row = (const uint4 *)(pg + (size_t)tok * L.cb_c);
#pragma unroll
    for (int j = 0; j < P::PT; j++)
        f.c[j] = __ldg(row + 2 * (h * P::PT + j) + par);
    f.cm = __ldg((const uint4 *)(pg + L.off_mc + (size_t)tok * 32) + h);
    const int v = rope_piece<RB>(tid);
    if (v >= 0) {
        constexpr int RPT = QMLA_KV_DR * RB / 128; /* RoPE pieces per token */
        f.r = __ldg((const uint4 *)(pg + L.off_rc) + v);
        f.rm = __ldg((const uint32_t *)(pg + L.off_mr) + v / RPT);
    }
}

/* One online-softmax step of a query row (log2 domain), shared by the
 * BF16-tile and the tensor-core kernels: 16 threads per row (part 0..15,
 * one half-warp) each hold 4 of the page's 64 scores z (-inf: masked);
 * p = exp2(z - m_new); thread part 0 updates the row's running maximum m,
 * sum l and rescale factor alpha = exp2(m_old - m_new) (0 for the first
 * visible page). Fixed reduction order (bit-identical across runs).
 * FTZ (the tensor-core kernel): exp2 by ex2.approx.ftz, without exp2f's
 * fix-up for results below 2^-126 (3 instructions per value; such weights
 * become 0, 2^-126 below the row's largest, which is 1). */
__device__ static inline float ex2_ftz(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
template <bool FTZ = false>
__device__ static inline void softmax_step(const float z[4], int part, float *m, float *l,
                                           float *alpha, float p[4])
{
    float mx = fmaxf(fmaxf(z[0], z[1]), fmaxf(z[2], z[3]));
#pragma unroll
    for (int off = 8; off > 0; off >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    const float m_old = *m, m_new = fmaxf(m_old, mx);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    float sum = 0.0f;
#pragma unroll
    for (int u = 0; u < 4; u++) {
        p[u] = FTZ ? ex2_ftz(z[u] - m_use) : exp2f(z[u] - m_use);
        sum += p[u];
    }
#pragma unroll
    for (int off = 8; off > 0; off >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, off);
    __syncwarp();
    if (part == 0) {
        const float al = FTZ ? ex2_ftz(m_old - m_use) : exp2f(m_old - m_use); /* m_old = -inf: 0 */
        *alpha = al;
        *l = *l * al + sum;
        *m = m_new;
    }
}

/* BF16 source row of a protected token (kvcache.h). */
__device__ static inline const uint16_t *protected_row(const dec_args &a, int b, long t)
{
    return t < a.S ? a.sink + ((size_t)b * a.S + t) * QMLA_KV_D
                   : a.window + ((size_t)b * a.W + t % a.W) * QMLA_KV_D;
}

/* NE channels from ch of token t into dst: zero past the end, the BF16 copy
 * for a protected token, else the reconstruction of the prefetched codes. */
template <int B, int NE>
__device__ static inline void unit_to_tile(__nv_bfloat16 *dst, const uint4 *codes, uint32_t meta,
                                           bool special, const dec_args &a, int b, long t,
                                           long len, int ch)
{
    uint4 v[NE / 8];
    if (special && t >= len) {
#pragma unroll
        for (int k = 0; k < NE / 8; k++)
            v[k] = make_uint4(0, 0, 0, 0);
    } else if (special && (t < a.S || t >= len - a.W)) {
        const uint4 *src = (const uint4 *)(protected_row(a, b, t) + ch);
#pragma unroll
        for (int k = 0; k < NE / 8; k++)
            v[k] = __ldg(src + k);
    } else {
        dequant_unit<B, NE>(codes, meta, v);
    }
#pragma unroll
    for (int k = 0; k < NE / 8; k++)
        *((uint4 *)dst + k) = v[k];
}

/* Write the reconstructed page into the tile. t0: first token of the page. */
template <int CB, int RB>
__device__ static inline void store_page(const prefetch<CB, RB> &f, __nv_bfloat16 *tile,
                                         const dec_args &a, int b, long t0, long len, int tid)
{
    typedef piece_of<CB> P;
    const bool special = t0 < a.S || t0 + QMLA_KV_PAGE > len - a.W; /* protected or partial */
    const int warp = tid >> 5, lane = tid & 31, tok = (warp & 3) * 16 + piece_lane_token<CB>(lane);
    const int h = warp >> 2, par = piece_lane_par<CB>(lane);
    const uint32_t meta[4] = {f.cm.x, f.cm.y, f.cm.z, f.cm.w};
#pragma unroll
    for (int j = 0; j < P::PT; j++) {
        const int pp = 2 * (h * P::PT + j) + par; /* piece within the token */
        const int ch = pp * P::EP;
        /* group within 4h..4h+3: (2j + par) EP / 64, indices kept constant */
        const uint32_t m = par ? meta[(2 * j + 1) * P::EP / 64] : meta[2 * j * P::EP / 64];
        unit_to_tile<CB, P::EP>(tile + tok * KSTR + ch, &f.c[j], m, special, a, b, t0 + tok, len,
                                ch);
    }
    const int v = rope_piece<RB>(tid);
    if (v >= 0) {
        constexpr int RPT = QMLA_KV_DR * RB / 128, EPR = 128 / RB;
        const int rt = v / RPT, ch = QMLA_KV_DC + (v % RPT) * EPR;
        unit_to_tile<RB, EPR>(tile + rt * KSTR + ch, &f.r, f.rm, special, a, b, t0 + rt, len, ch);
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

/* ---- barriers --------------------------------------------------------------
 * NB 0: the whole block (__syncthreads); NB > 0: named barrier NB over the
 * DEC_THREADS consumer threads of the warp-specialised kernel (its producer
 * warps never take part). The producer / consumer hand-off of that kernel
 * is a full / empty pair of mbarriers per tile (ws_produce). */
template <int NB> __device__ static inline void dec_bar()
{
    if constexpr (NB == 0)
        __syncthreads();
    else
        asm volatile("bar.sync %0, %1;\n" ::"n"(NB), "n"(DEC_THREADS) : "memory");
}

/* ---- one page of attention on a ready tile ------------------------------ */
struct dec_state {
    float o[8][4]; /* O accumulators: 16 rows x 64 channels */
};

/* ldmatrix fragments of the tile kernels (mi = lane >> 3, rr = lane & 7):
 * A of 16 rows x 16 columns at (row 0, column k0) of a row-major tile with
 * stride ld (Q for QK, P for PV); B of QK: 16 tokens from n0 x 16 channels
 * from k0 (two n-tiles: b[0..1], b[2..3]); B of PV: 16 tokens from k0 x 16
 * channels from n0, transposed. */
__device__ static inline void ldsm_a(uint32_t a[4], const __nv_bfloat16 *t, int ld, int k0,
                                     int lane)
{
    const int mi = lane >> 3, rr = lane & 7;
    ldsm_x4(a[0], a[1], a[2], a[3], t + (rr + 8 * (mi & 1)) * ld + k0 + 8 * (mi >> 1));
}
__device__ static inline void ldsm_bk(uint32_t b[4], const __nv_bfloat16 *tile, int n0, int k0,
                                      int lane)
{
    const int mi = lane >> 3, rr = lane & 7;
    ldsm_x4(b[0], b[1], b[2], b[3], tile + (n0 + rr + 8 * (mi >> 1)) * KSTR + k0 + 8 * (mi & 1));
}
__device__ static inline void ldsm_bv(uint32_t b[4], const __nv_bfloat16 *tile, int k0, int n0,
                                      int lane)
{
    const int mi = lane >> 3, rr = lane & 7;
    ldsm_x4_t(b[0], b[1], b[2], b[3], tile + (k0 + rr + 8 * (mi & 1)) * KSTR + n0 + 8 * (mi >> 1));
}

/* The 4 scores of a row from part * 4: the 4 channel quarters' partials
 * (q0: quarter 0's, qs: the distance between quarters) summed in a fixed
 * order (deterministic). */
__device__ static inline void sum_quarters(const float *q0, ptrdiff_t qs, float acc[4])
{
    const float4 c0 = *(const float4 *)q0, c1 = *(const float4 *)(q0 + qs);
    const float4 c2 = *(const float4 *)(q0 + 2 * qs), c3 = *(const float4 *)(q0 + 3 * qs);
    acc[0] = ((c0.x + c1.x) + c2.x) + c3.x;
    acc[1] = ((c0.y + c1.y) + c2.y) + c3.y;
    acc[2] = ((c0.z + c1.z) + c2.z) + c3.z;
    acc[3] = ((c0.w + c1.w) + c2.w) + c3.w;
}

/* tmap: NULL for the page of tokens t0 .. t0+63, else the token of each
 * tile row (INT_MAX: none), as the protected path gathers them. */
template <class SM, int UNROLL = 9, int NB = 0>
__device__ static inline void attend_page(dec_state &st, SM &sm, const __nv_bfloat16 *tile,
                                          const dec_args &a, long t0, long vis, int tid,
                                          const int *tmap = nullptr)
{
    const int warp = tid >> 5, lane = tid & 31, cg = warp & 3, th = warp >> 2;
    const int gr = lane >> 2, gc = lane & 3;
    /* QK partial: 16 rows x 32 tokens over channels [144cg, 144cg+144) */
    float s[4][4];
#pragma unroll
    for (int n = 0; n < 4; n++)
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll UNROLL
    for (int kk = 0; kk < 9; kk++) {
        const int k0 = (cg * 9 + kk) * 16;
        uint32_t qa[4]; /* A = Q[16 rows][16 channels], as P below */
        ldsm_a(qa, sm.q, KSTR, k0, lane);
#pragma unroll
        for (int np = 0; np < 2; np++) {
            uint32_t bk[4];
            ldsm_bk(bk, tile, th * 32 + np * 16, k0, lane);
            mma16816(s[2 * np], qa, bk[0], bk[1]);
            mma16816(s[2 * np + 1], qa, bk[2], bk[3]);
        }
    }
#pragma unroll
    for (int n = 0; n < 4; n++) {
        const int tok = th * 32 + n * 8 + 2 * gc;
        *(float2 *)&sm.sp[cg][gr][tok] = make_float2(s[n][0], s[n][1]);
        *(float2 *)&sm.sp[cg][gr + 8][tok] = make_float2(s[n][2], s[n][3]);
    }
    dec_bar<NB>();
    /* softmax: 16 threads per row, 4 tokens each (fixed summation order) */
    {
        const int row = tid >> 4, part = tid & 15;
        float z[4], acc[4];
        sum_quarters(&sm.sp[0][row][part * 4], &sm.sp[1][0][0] - &sm.sp[0][0][0], acc);
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const long t = tmap ? (long)tmap[part * 4 + u] : t0 + part * 4 + u;
            z[u] = t < vis ? acc[u] * a.scale_log2 : -INFINITY;
        }
        float p[4];
        softmax_step(z, part, &sm.m[row], &sm.l[row], &sm.alpha[row], p);
        *(uint2 *)(sm.p + row * PSTR + part * 4) = make_uint2(bf16x2(p[0], p[1]), bf16x2(p[2], p[3]));
    }
    dec_bar<NB>();
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
#pragma unroll (UNROLL < 4 ? UNROLL : 4)
        for (int ks = 0; ks < 4; ks++) {
            uint32_t pa[4];
            /* A = P[16 rows][16 tokens]: matrices (rows 0-7, k 0-7), (rows 8-15,
             * k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15) */
            ldsm_a(pa, sm.p, PSTR, ks * 16, lane);
#pragma unroll
            for (int np = 0; np < 4; np++) {
                uint32_t bv[4];
                ldsm_bv(bv, tile, ks * 16, warp * 64 + np * 16, lane);
                mma16816(st.o[2 * np], pa, bv[0], bv[1]);
                mma16816(st.o[2 * np + 1], pa, bv[2], bv[3]);
            }
        }
    }
}

/* Q rows of this tile into shared memory (zero rows past R); reset the
 * accumulators and the softmax state. Visible after the first barrier. */
template <class SM>
__device__ static inline void dec_init(dec_state &st, SM &sm, const dec_args &a, int b, int r0,
                                       int tid)
{
    for (int i = tid; i < DEC_ROWS * 72; i += DEC_THREADS) {
        const int r = i / 72, k = i - r * 72;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r0 + r < a.R)
            v = __ldg((const uint4 *)(a.q + ((size_t)b * a.R + r0 + r) * QMLA_KV_D) + k);
        *(uint4 *)(sm.q + r * KSTR + k * 8) = v;
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
template <class SM, int NB = 0>
__device__ static inline void dec_finish(const dec_state &st, SM &sm, const dec_args &a, int b,
                                         int split, int r0, int tid)
{
    dec_bar<NB>();
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
__global__ void __launch_bounds__(DEC_THREADS, 2) decode_quant_kernel(dec_args a)
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

/* ---- C4R4 / C2R4: tensor cores on the codes, scale and minimum after ----
 * For a packed token n and a group g of 64 channels, x = s q + l (step s,
 * minimum l, code q). With the codes as exact BF16 values (q times a power
 * of two, one LOP3 per two codes: "Codes as MMA operands" below), per group
 *   Q.x   = s (Q.q) + l sum(Q)
 *   P x_c = (P s) q_c + (P s) (l / s)
 * so QK multiplies the BF16 queries with the raw codes (m16n8k16, float32
 * accumulation) and scales the group's product by s; the l sum(Q) terms of
 * the 8 content groups are one float16 MMA per 8 tokens (k: the groups'
 * sum(Q) as float16 high and low parts, B: the stored float16 l; since
 * H200 run 24, 1.0-1.7 % (C4R4) and 1.2-2.6 % (C2R4) faster from 32K
 * than one more FMUL per score and group); PV
 * multiplies BF16(P s) with the raw codes and adds, by one more MMA column
 * pair per k-step, BF16(P s) times l / s split into two BF16 parts.
 * Rounding: as BF16(P) in the BF16-tile kernels, now BF16(P s) (relative
 * 2^-9 per weight); the values themselves are not rounded to BF16, so the
 * kernel attends to fmaf(q, s, l) unrounded (qmla_decode_ref_model with
 * packed_f32 = 1 is its reference). A group with s = 0 has codes 0
 * (quant_core.h) and uses s = 1 in PV.
 * Block: 8 warps, warp w owns content group w: its queries' fragments stay
 * in registers; per page it multiplies them with its group's codes of the
 * 64 tokens (8 n-tiles) plus the RoPE group for tokens 8w .. 8w+7; the 8
 * partial score tiles are summed in shared memory in a fixed order; online
 * softmax by 16 threads per row; then warp w accumulates output channels
 * 64w .. 64w+63 from the same codes. Pages arrive by cp.async, NST stages,
 * content rows XOR-swizzled by 16-byte chunk so that both the QK (token
 * rows) and the PV (token pairs) reads are free of bank conflicts.
 * Protected tokens (sink, window) are masked here and attended to, after
 * their pages, by the last n_prot blocks of each sequence (those with the
 * fewest packed pages: the window's pages are skipped) from their BF16
 * buffers, up to 64 tokens each through the BF16 tile path, into partials
 * of their own; no extra blocks, so the grid stays one wave. The combine
 * merges all partials: exactly one representation per token.
 * Precision: QK multiplies the codes themselves, so the float32 sums are
 * those of Q.q, not of Q.(128 + q) (whose rounding, relative to
 * 128 sum|Q|, cost 10-40x BF16's LSE error in H200 runs 16-17). */
template <int CB, bool Q8 = false> struct fcfg {
    static constexpr int CBC = QMLA_KV_DC * CB / 8;  /* content code bytes per token */
    static constexpr int CPR = CBC / 16;              /* 16-byte chunks per content row */
    static constexpr int OFF_RC = QMLA_KV_PAGE * CBC;  /* RoPE codes, 32 bytes per token */
    /* metadata bytes per token: f16 8 content groups x (s, l), RoPE (s, l);
     * q8 (kvcache.h) the records S, M, sc[8], m[8] (20) and S, M, sc, m (6) */
    static constexpr int MBC = Q8 ? 4 + 2 * 8 : 32, MBR = Q8 ? 6 : 4;
    static constexpr int OFF_MC = OFF_RC + QMLA_KV_PAGE * 32;
    static constexpr int OFF_MR = OFF_MC + QMLA_KV_PAGE * MBC;
    static constexpr int PB = OFF_MR + QMLA_KV_PAGE * MBR; /* page bytes */
    static constexpr int NST = CB == 4 ? 3 : 4;          /* pipeline stages */
    static_assert(PB % 16 == 0, "fast_issue copies whole 16-byte chunks");
};
/* C8R8 G 64 (variant 9, decode_fast8_kernel): 8-bit RoPE codes, 64 bytes a
 * token, so the metadata start later; 39168 bytes a page; 4 stages (one
 * block per SM: 207 KB of shared memory). */
template <> struct fcfg<8> {
    static constexpr int CBC = QMLA_KV_DC, CPR = CBC / 16, RBC = QMLA_KV_DR;
    static constexpr int OFF_RC = QMLA_KV_PAGE * CBC;
    static constexpr int MBC = 32, MBR = 4; /* f16 metadata bytes per token */
    static constexpr int OFF_MC = OFF_RC + QMLA_KV_PAGE * RBC;
    static constexpr int OFF_MR = OFF_MC + QMLA_KV_PAGE * MBC;
    static constexpr int PB = OFF_MR + QMLA_KV_PAGE * MBR;
    static constexpr int NST = 4;
};

template <int CB, bool Q8 = false> struct dec_smem_fast {
    uint8_t stage[fcfg<CB, Q8>::NST][fcfg<CB, Q8>::PB]; /* pages, content rows swizzled */
    float sp[8][DEC_ROWS][SSTR];                /* [group][16][64 (+8)] score partials */
    float pf[DEC_ROWS][SSTR];                   /* [16][64 (+8)] probabilities */
    float2 qkm[8][QMLA_KV_PAGE];                /* [group][token] (s, l) */
    float pvs[8][QMLA_KV_PAGE];                 /* [group][token] s for PV, 0: masked */
    uint16_t bh[8][QMLA_KV_PAGE], bl[8][QMLA_KV_PAGE]; /* l / s 2^-110, BF16 high + low */
    float2 rqm[QMLA_KV_PAGE];                   /* RoPE (s, l) */
    float m[DEC_ROWS], l[DEC_ROWS], alpha[DEC_ROWS];
    float zs[DEC_ROWS]; /* [16] softmax: the row's scores times zs in log2 units */
};

template <int CB, bool Q8 = false> static constexpr size_t fast_smem_bytes()
{
    return sizeof(dec_smem_fast<CB, Q8>) > sizeof(dec_smem_quant) ? sizeof(dec_smem_fast<CB, Q8>)
                                                                   : sizeof(dec_smem_quant);
}

/* Unrolling of the QK (8 n-tiles) and PV (4 k-steps) loops: full by
 * default; smaller values shrink the code (the instruction cache is cold at
 * every launch), a build-time experiment (docs/decode.md). */
#ifndef QMLA_DECODE_QK_UNROLL
#define QMLA_DECODE_QK_UNROLL 8
#endif
#ifndef QMLA_DECODE_PV_UNROLL
#define QMLA_DECODE_PV_UNROLL 4
#endif
static constexpr int QK_UNROLL = QMLA_DECODE_QK_UNROLL, PV_UNROLL = QMLA_DECODE_PV_UNROLL;
/* 1 (default): the fast kernel stores its partial outputs as float4 (8
 * 16-byte stores per lane) instead of one float per store (32 4-byte
 * stores, each in its own 32-byte sector: 0, the run-19 epilogue, kept as
 * a build-time comparison; docs/decode.md). Same values either way. */
#ifndef QMLA_DECODE_VEC_EPILOGUE
#define QMLA_DECODE_VEC_EPILOGUE 1
#endif

/* Chunk swizzle of token t's content row (16-byte chunks). */
template <int CB> __device__ static inline int fast_swz(int t)
{
    return CB == 4 ? 2 * ((t + (t >> 2)) & 3) : CB == 8 ? (t & 6) ^ ((t & 1) << 2) : (t & 7);
}
/* Stage offset of byte c of token t's content codes. */
template <int CB> __device__ static inline int fast_coff(int t, int c)
{
    return t * fcfg<CB>::CBC + ((((c >> 4) ^ fast_swz<CB>(t))) << 4) + (c & 15);
}

/* A lane's 16 channels of a group (its chunk: channels 16 gc .. 16 gc + 15)
 * as 8 BF16 pairs: register r holds channels (fast_lo(r), fast_hi(r)) of
 * the chunk. 4 bits: two words, register 4i + j = nibbles j, j+4 of word i;
 * 2 bits: one word, register j = fields j, j+8. */
template <int B> __host__ __device__ static constexpr int fast_lo(int r)
{
    return B == 4 ? 8 * (r >> 2) + (r & 3) : B == 8 ? 4 * (r >> 1) + (r & 1) : r;
}
template <int B> __host__ __device__ static constexpr int fast_hi(int r)
{
    return B == 4 ? 8 * (r >> 2) + 4 + (r & 3) : B == 8 ? 4 * (r >> 1) + (r & 1) + 2 : 8 + r;
}
/* Codes as MMA operands: BF16 values of the smallest binade. A BF16 bit
 * pattern n < 256 (exponent field 0 or 1) is the value n 2^-133 exactly
 * (subnormal for n < 128, 2^-126 (1 + (n - 128) / 128) above: the same
 * line), so a code field at bit position p < 8 of a 16-bit half, all other
 * bits cleared, is the exact BF16 value q 2^(p - 133): one LOP3 (an AND
 * with one immediate) per two codes, no shift for fields inside bits 0-7,
 * one shift by 8 per word for the rest, and nothing to take off (until
 * H200 run 22: 0x4300 | q = 128 + q by two LOP3 and, for QK, an HFMA2
 * to subtract the 128 again; about 3750 of the 8572 warp instructions per
 * page). The 2^(p - 133) is undone outside the page loop: QK scales the
 * queries of each register by 2^(E - p) (E per query row, from the row's
 * largest exponent, so that the scaled row stays below 2^127; exact,
 * powers of two) and multiplies the softmax scale by 2^(133 - E); PV
 * multiplies P s by 2^110 before its BF16 rounding (exact) and each
 * n-tile's accumulator by 2^(23 - p) in the epilogue, the l / s column by
 * 2^-110. All of these are powers of two, so the scores are the run-22
 * kernel's bit for bit and the PV terms are BF16(P s) q and BF16(P s) l / s
 * as before (without the 128 offset to cancel); underflow can only drop
 * terms 2^-100 below the row's largest. The tensor cores take BF16
 * subnormal inputs unflushed (test_decode_cuda, H200 run 23).
 * Register j of a 4-bit word: nibbles (j, j + 4) at p = 4 (j & 1); of a
 * 2-bit word: fields (j, j + 8) at p = 2 (j & 3); 8 bits (variant 9):
 * register 2i + e of a lane's 4 words = bytes (e, e + 2) of word i at p = 0
 * (a byte n < 256 is the BF16 value n 2^-133 exactly: one PRMT with a zero
 * word, no shift). */
template <int B> __host__ __device__ static constexpr int subn_pos(int reg)
{
    return B == 4 ? 4 * (reg & 1) : B == 8 ? 0 : 2 * (reg & 3);
}
#define PV_PSCALE 1.298074214633707e33f /* 2^110: P s is scaled by it before BF16 */
#define PV_BSCALE 7.703719777548943e-34f /* 2^-110: the l / s column */
__device__ static inline void nib_codes(uint32_t w, uint32_t *r)
{
    const uint32_t w8 = w >> 8;
    r[0] = w & 0x000f000fu;
    r[1] = w & 0x00f000f0u;
    r[2] = w8 & 0x000f000fu;
    r[3] = w8 & 0x00f000f0u;
}
__device__ static inline void crumb_codes(uint32_t w, uint32_t *r)
{
    const uint32_t w8 = w >> 8;
#pragma unroll
    for (int j = 0; j < 8; j++)
        r[j] = (j < 4 ? w : w8) & (0x00030003u << subn_pos<2>(j));
}

/* Query fragments of this lane (rows gr, gr+8 of the tile; content group
 * `g` with CB's channel order, RoPE with 4 bits') and the groups' query sums. */
template <int CB, int RB = 4>
__device__ static inline void fast_q(const dec_args &a, int b, int r0, int g, int gr, int gc,
                                     uint32_t qc[4][4], uint32_t qr[4][4], float sqc[2],
                                     float sqr[2], int qe[2])
{
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int r = r0 + gr + 8 * hr;
        const uint16_t *q = a.q + ((size_t)b * a.R + (r < a.R ? r : 0)) * QMLA_KV_D;
        const uint32_t keep = r < a.R ? 0xffffffffu : 0u;
        /* the lane's 16 content and 16 RoPE channels: 4 loads of 16 bytes */
        uint32_t cw[8], rw[8];
        {
            const uint4 *pc = (const uint4 *)(q + 64 * g + 16 * gc);
            const uint4 *pr = (const uint4 *)(q + QMLA_KV_DC + 16 * gc);
            const uint4 u0 = pc[0], u1 = pc[1], v0 = pr[0], v1 = pr[1];
            cw[0] = u0.x; cw[1] = u0.y; cw[2] = u0.z; cw[3] = u0.w;
            cw[4] = u1.x; cw[5] = u1.y; cw[6] = u1.z; cw[7] = u1.w;
            rw[0] = v0.x; rw[1] = v0.y; rw[2] = v0.z; rw[3] = v0.w;
            rw[4] = v1.x; rw[5] = v1.y; rw[6] = v1.z; rw[7] = v1.w;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                cw[i] &= keep;
                rw[i] &= keep;
            }
        }
        float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
        for (int reg = 0; reg < 8; reg++) {
#define QMLA_Q_ELEM(W, E) (((W)[(E) >> 1] >> (16 * ((E) & 1))) & 0xffffu)
            const uint32_t x0 = QMLA_Q_ELEM(cw, fast_lo<CB>(reg)), x1 = QMLA_Q_ELEM(cw, fast_hi<CB>(reg));
            const uint32_t y0 = QMLA_Q_ELEM(rw, fast_lo<RB>(reg)), y1 = QMLA_Q_ELEM(rw, fast_hi<RB>(reg));
#undef QMLA_Q_ELEM
            /* a0 (row gr, pair 2ks), a1 (row gr+8), a2 (row gr, pair 2ks+1), a3 */
            qc[reg >> 1][hr + 2 * (reg & 1)] = x0 | (x1 << 16);
            qr[reg >> 1][hr + 2 * (reg & 1)] = y0 | (y1 << 16);
            s1 += __uint_as_float(x0 << 16) + __uint_as_float(x1 << 16);
            s2 += __uint_as_float(y0 << 16) + __uint_as_float(y1 << 16);
        }
        s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
        s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
        s2 += __shfl_xor_sync(0xffffffffu, s2, 1);
        s2 += __shfl_xor_sync(0xffffffffu, s2, 2);
        sqc[hr] = s1;
        sqr[hr] = s2;
        /* the largest BF16 exponent field of the lane's channels, then of
         * the row's 4 lanes (the row exponent of the codes' 2^-133 scaling) */
        uint32_t em = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            em = __vmaxu2(em, cw[i] & 0x7f807f80u);
            em = __vmaxu2(em, rw[i] & 0x7f807f80u);
        }
        int e = (int)(max(em & 0xffffu, em >> 16) >> 7);
        e = max(e, __shfl_xor_sync(0xffffffffu, e, 1));
        e = max(e, __shfl_xor_sync(0xffffffffu, e, 2));
        qe[hr] = e;
    }
}

/* 2^k as a float, k in [-126, 127]. */
__device__ static inline float pow2f(int k) { return __int_as_float((127 + k) << 23); }
/* The row exponent E (the codes' 2^-133 scaling) from the row's largest
 * BF16 exponent field e: the row times 2^(E - p) has exponent fields <= 253
 * (values < 2^127) for e <= 246; rows with |Q| >= 2^119 overflow (their
 * scores would not fit a float anyway). E in [7, 252]. */
__device__ static inline int subn_rowexp(int e)
{
    const int E = 253 - e;
    return E < 7 ? 7 : E > 252 ? 252 : E;
}
/* Both BF16 halves of x times 2^k, k in [1, 252] (two exact multiplies). */
__device__ static inline uint32_t bf16x2_ldexp(uint32_t x, int k)
{
    const float fa = pow2f(k >> 1), fb = pow2f(k - (k >> 1));
    return bf16x2(__fmul_rn(__fmul_rn(__uint_as_float(x << 16), fa), fb),
                  __fmul_rn(__fmul_rn(__uint_as_float(x & 0xffff0000u), fa), fb));
}
/* The query fragments of rows gr (hr 0), gr + 8 (hr 1) times 2^(E - p),
 * p the code position of the register (subn_pos), and the query sums
 * times 2^(E - 133): the scores come out times 2^(E - 133). */
template <int CB, int RB = 4>
__device__ static inline void fast_qscale(uint32_t qc[4][4], uint32_t qr[4][4], float sqc[2],
                                          float sqr[2], const int E[2])
{
#pragma unroll
    for (int ks = 0; ks < 4; ks++)
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int hr = k & 1, reg = 2 * ks + (k >> 1);
            qc[ks][k] = bf16x2_ldexp(qc[ks][k], E[hr] - subn_pos<CB>(reg));
            qr[ks][k] = bf16x2_ldexp(qr[ks][k], E[hr] - subn_pos<RB>(reg));
        }
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        sqc[hr] = __fmul_rn(sqc[hr], pow2f(E[hr] - 133));
        sqr[hr] = __fmul_rn(sqr[hr], pow2f(E[hr] - 133));
    }
}

/* Protected tokens of sequence b, the k-th 64 of them (sink rows first,
 * then the window's), through the BF16 tile path. */
__device__ static void prot_part(dec_smem_quant &sm, const dec_args &a, int b, int r0, int k,
                                 int slot, int tid)
{
    const long len = a.seq_len[b];
    dec_state st;
    dec_init(st, sm, a, b, r0, tid);
    const long vis = row_vis(a, r0, len, tid);
    const long nS = len < a.S ? len : a.S, wlo = len - a.W > nS ? len - a.W : nS;
    const long cnt = nS + (len - wlo);
    if ((long)k * QMLA_KV_PAGE < cnt) {
        if (tid < QMLA_KV_PAGE) {
            const long i = (long)k * QMLA_KV_PAGE + tid;
            sm.tmap[tid] = i < cnt ? (int)(i < nS ? i : wlo + (i - nS)) : INT_MAX;
        }
#pragma unroll 1 /* code size: this path runs once per block */
        for (int j = 0; j < 18; j++) {
            const int c = tid + DEC_THREADS * j, tt = c / 72, kk = c - tt * 72;
            const long i = (long)k * QMLA_KV_PAGE + tt;
            const bool ok = i < cnt;
            const uint16_t *src = ok ? protected_row(a, b, i < nS ? i : wlo + (i - nS)) + kk * 8
                                     : a.q;
            cp_async16(sm.tile + tt * KSTR + kk * 8, src, ok ? 16 : 0);
        }
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        /* loops not unrolled: this runs once per block, its code is cold */
        attend_page<dec_smem_quant, 1>(st, sm, sm.tile, a, 0, vis, tid, sm.tmap);
    }
    dec_finish(st, sm, a, b, slot, r0, tid);
}

/* Per-thread constants of the fast path: stage offsets that do not depend
 * on the page (the swizzle repeats every 16 tokens: fast_swz(t + 16) ==
 * fast_swz(t), and every 32 copy chunks of a row hold tokens 16 apart). */
template <int CB> struct fast_lane {
    int qoff[2];  /* QK: token 8j + gr, j even / odd, minus 8j rows */
    int poff[4];  /* PV: tokens 2gc + {0, 1, 8, 9} */
    int roff;     /* RoPE codes of token 8 warp + gr, this lane's 8 bytes */
    int dswz;     /* copy: byte shift of this thread's content chunks */
    __device__ fast_lane(int tid)
    {
        typedef fcfg<CB> F;
        const int warp = tid >> 5, lane = tid & 31, gr = lane >> 2, gc = lane & 3;
        const int qb = CB == 4 ? 32 * warp + 8 * gc : 16 * warp + 4 * gc;
        qoff[0] = fast_coff<CB>(gr, qb);
        qoff[1] = fast_coff<CB>(8 + gr, qb) - 8 * F::CBC;
        /* PV: 4 bits word gr of the group; 2 bits half gr&1 of word gr/2 */
        const int pb = CB == 4 ? 32 * warp + 4 * gr : 16 * warp + 4 * (gr >> 1);
        const int d[4] = {0, 1, 8, 9};
#pragma unroll
        for (int i = 0; i < 4; i++)
            poff[i] = fast_coff<CB>(2 * gc + d[i], pb);
        roff = F::OFF_RC + (8 * warp + gr) * 32 + 8 * gc;
        const int t = tid / F::CPR, k = tid % F::CPR;
        dswz = ((k ^ fast_swz<CB>(t)) - k) * 16;
    }
};

/* Copy a page into a stage: chunk c = tid + 256 i; the content chunks
 * (the first 64 * CPR, a multiple of 256) land swizzled. */
template <int CB, bool Q8 = false>
__device__ static inline void fast_issue(uint8_t *dst, const uint8_t *src, int dswz, int tid)
{
    typedef fcfg<CB, Q8> F;
    constexpr int NC = QMLA_KV_PAGE * F::CPR / DEC_THREADS, NALL = F::PB / 16;
    /* one base per thread, chunk i at a constant offset (immediates) */
    const uint8_t *s0 = src + 16 * tid;
    uint8_t *d0 = dst + 16 * tid, *d1 = d0 + dswz;
#pragma unroll
    for (int i = 0; i < (NALL + DEC_THREADS - 1) / DEC_THREADS; i++) {
        const int c = tid + DEC_THREADS * i;
        if (i < NC || c < NALL)
            cp_async16((i < NC ? d1 : d0) + 16 * DEC_THREADS * i, s0 + 16 * DEC_THREADS * i, 16);
    }
}

/* 1 / x by the hardware approximation (MUFU.RCP, about 1 ulp), without
 * __fdividef's range handling: x is a float16 step (>= 2^-24) or 1. */
__device__ static inline float rcp_approx(float x)
{
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* The stored (s, l) of content group g of token tok in page `pg`: the f16
 * pair, or (Q8) s = sc S and l = m M of the token's q8 record (exact float32
 * products, as qmla_kv_group_meta). */
template <class F, bool Q8>
__device__ static inline float2 fast_group_meta(const uint8_t *pg, int tok, int g)
{
    if constexpr (Q8) { /* S, M at 0 (one word: 20 tok is a multiple of 4), sc at 4, m at 12 */
        const uint8_t *rec = pg + F::OFF_MC + tok * F::MBC;
        const uint32_t u = *(const uint32_t *)rec;
        return make_float2(
            __fmul_rn((float)rec[4 + g], __half2float(__ushort_as_half((unsigned short)(u & 0xffffu)))),
            __fmul_rn((float)(int8_t)rec[12 + g], __half2float(__ushort_as_half((unsigned short)(u >> 16)))));
    }
    const uint32_t u = *(const uint32_t *)(pg + F::OFF_MC + tok * 32 + 4 * g);
    return make_float2(__half2float(__ushort_as_half((unsigned short)(u & 0xffffu))),
                       __half2float(__ushort_as_half((unsigned short)(u >> 16))));
}

/* Metadata of page `pg` for group `warp` (warp-private tables) and the RoPE
 * metadata of tokens 8 warp .. 8 warp + 7. Tokens outside [S, lenW) get
 * zero PV weights (their scores are masked by the softmax). Q8: q8 records
 * (fast_group_meta; RoPE: the 6-byte record by 16-bit loads). */
template <int CB, bool Q8 = false, class SM>
__device__ static inline void fast_meta(SM &sm, const uint8_t *pg, int t0, int S,
                                        int lenW, int warp, int lane)
{
    typedef fcfg<CB, Q8> F;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int tok = lane + 32 * h, t = t0 + tok;
        const float2 sl = fast_group_meta<F, Q8>(pg, tok, warp);
        const float s = sl.x, m = sl.y;
        sm.qkm[warp][tok] = make_float2(s, m);
        const bool ok = t >= S && t < lenW;
        const float spv = ok ? (s == 0.0f ? 1.0f : s) : 0.0f;
        /* P s 2^110 and l / s 2^-110 (the codes' 2^-133, above) */
        const float bias = ok ? m * rcp_approx(spv) * PV_BSCALE : 0.0f;
        const float spvs = spv * PV_PSCALE;
        const __nv_bfloat16 bh = __float2bfloat16_rn(bias);
        const __nv_bfloat16 bl = __float2bfloat16_rn(bias - __bfloat162float(bh));
        sm.pvs[warp][tok] = spvs;
        sm.bh[warp][tok] = __bfloat16_as_ushort(bh);
        sm.bl[warp][tok] = __bfloat16_as_ushort(bl);
    }
    if (lane < 8) {
        const int tok = 8 * warp + lane;
        if constexpr (Q8) { /* the 6-byte record S, M, (sc, m): 16-bit loads */
            const uint16_t *rec = (const uint16_t *)(pg + F::OFF_MR + tok * F::MBR);
            const uint32_t w = rec[2];
            const float s = __fmul_rn((float)(w & 0xffu), __half2float(__ushort_as_half(rec[0])));
            const float m = __fmul_rn((float)(int8_t)(w >> 8), __half2float(__ushort_as_half(rec[1])));
            sm.rqm[tok] = make_float2(s, m);
        } else {
            const uint32_t u = *(const uint32_t *)(pg + F::OFF_MR + tok * 4);
            const float s = __half2float(__ushort_as_half((unsigned short)(u & 0xffffu)));
            const float m = __half2float(__ushort_as_half((unsigned short)(u >> 16)));
            sm.rqm[tok] = make_float2(s, m);
        }
    }
    __syncwarp();
}

/* ---- pieces of the fast kernels' pages (fast_part, fast_part_mr, and
 * variants 9 and 10: fast8_part, fast8b_part), inlined where they are used:
 * the same source for the same arithmetic, each caller's machine code
 * unchanged (scripts/cubin-text-cmp.py, docs/decode.md) ---- */

/* The 4 MMAs of one group's 16 x 8 scores (Q.q of n-tile codes bc): two
 * chains of two dependent MMAs instead of one of four (H200 run 23: up to
 * 1.4 % faster than the single chain). */
__device__ static inline void qk_group(float c[4], const uint32_t qc[4][4], const uint32_t bc[8])
{
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    c[0] = c[1] = c[2] = c[3] = 0.0f;
    mma16816(c, qc[0], bc[0], bc[1]);
    mma16816(d, qc[1], bc[2], bc[3]);
    mma16816(c, qc[2], bc[4], bc[5]);
    mma16816(d, qc[3], bc[6], bc[7]);
#pragma unroll
    for (int k = 0; k < 4; k++)
        c[k] += d[k];
}

/* The warp's query exponent fields qe and unscaled sums sqc of rows gr,
 * gr + 8 into qex (lanes gc = 0): [warp][row], then [8 + warp][row]. */
__device__ static inline void fast_qex(int *qex, const int qe[2], const float sqc[2], int warp,
                                       int gr, int gc)
{
    if (gc == 0) {
        qex[warp * DEC_ROWS + gr] = qe[0];
        qex[warp * DEC_ROWS + gr + 8] = qe[1];
        qex[8 * DEC_ROWS + warp * DEC_ROWS + gr] = __float_as_int(sqc[0]);
        qex[8 * DEC_ROWS + warp * DEC_ROWS + gr + 8] = __float_as_int(sqc[1]);
    }
}

/* The row exponents E of rows gr, gr + 8 (the codes' 2^-133): from the
 * largest of the 8 warps' exponent fields in qex. */
__device__ static inline void fast_rowexp(const int *qex, int gr, int E[2])
{
    int e0 = 0, e1 = 0;
#pragma unroll
    for (int w = 0; w < 8; w++) {
        e0 = max(e0, qex[w * DEC_ROWS + gr]);
        e1 = max(e1, qex[w * DEC_ROWS + gr + 8]);
    }
    E[0] = subn_rowexp(e0);
    E[1] = subn_rowexp(e1);
}

/* A of the l sum(Q) MMA: row gr / gr + 8 (E[0] / E[1]), k 2g, 2g + 1
 * = sum(Q) of group g times 2^(E - 133) (as sqc: |x| < 1) as float16
 * high and low parts (22 bits), g = gc (a0, a1), gc + 4 (a2, a3); qex: the
 * unscaled group sums at [8 DEC_ROWS + g DEC_ROWS + row]. And the rows'
 * softmax scales zs[gr], zs[gr + 8] (lanes 0, 4, .., 28 of warp 0). */
__device__ static inline void fast_lsum(const dec_args &a, const int *qex, const int E[2],
                                        uint32_t lqa[4], float *zs, int tid, int gr, int gc)
{
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int hr = k & 1, g = gc + 4 * (k >> 1);
        const float x = __fmul_rn(__int_as_float(qex[8 * DEC_ROWS + g * DEC_ROWS + gr + 8 * hr]),
                                  pow2f(E[hr] - 133));
        const __half h = __float2half_rn(x);
        const __half l = __float2half_rn(x - __half2float(h));
        lqa[k] = (uint32_t)__half_as_ushort(h) | ((uint32_t)__half_as_ushort(l) << 16);
    }
    if (tid < 32 && gc == 0) {
        zs[gr] = a.scale_log2 * pow2f(133 - E[0]);
        zs[gr + 8] = a.scale_log2 * pow2f(133 - E[1]);
    }
}

/* A row tile's start: the accumulators zeroed, its rows' softmax state
 * (maximum -inf, sum 0). */
__device__ static inline void fast_begin(float o[8][4], float bacc[4], float *m, float *l, int tid)
{
    bacc[0] = bacc[1] = bacc[2] = bacc[3] = 0.0f;
#pragma unroll
    for (int n = 0; n < 8; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    if (tid < DEC_ROWS) {
        m[tid] = -INFINITY;
        l[tid] = 0.0f;
    }
}

/* The softmax row of this thread (row r0 + srow): tokens [S, shi) visible. */
__device__ static inline int fast_shi(const dec_args &a, int r0, int srow, int len, int lenW)
{
    const int r = r0 + srow;
    if (r >= a.R)
        return 0;
    const int v = len - a.s_q + r / a.H + 1;
    return v < lenW ? v : lenW;
}

/* PV's rescale of a tile's accumulators (o, the bias columns bacc) by the
 * rows' softmax factors alpha[gr], alpha[gr + 8]; skipped when no row of
 * the warp changed its maximum. */
__device__ static inline void pv_rescale(float o[8][4], float bacc[4], const float *alpha, int gr)
{
    const float al0 = alpha[gr], al1 = alpha[gr + 8];
    if (__any_sync(0xffffffffu, al0 != 1.0f || al1 != 1.0f)) {
#pragma unroll
        for (int n = 0; n < 8; n++) {
            o[n][0] *= al0;
            o[n][1] *= al0;
            o[n][2] *= al1;
            o[n][3] *= al1;
        }
        bacc[0] *= al0;
        bacc[1] *= al0;
        bacc[2] *= al1;
        bacc[3] *= al1;
    }
}

/* A of a PV k-step: BF16(P s) of rows gr, gr + 8 at tokens tA, tA + 1
 * (s: sA) and tC, tC + 1 (sC). */
__device__ static inline void pv_pa(const float *p0, const float *p1, int tA, int tC,
                                    float2 sA, float2 sC, uint32_t pa[4])
{
    const float2 pA0 = *(const float2 *)&p0[tA];
    const float2 pA1 = *(const float2 *)&p1[tA];
    const float2 pC0 = *(const float2 *)&p0[tC];
    const float2 pC1 = *(const float2 *)&p1[tC];
    pa[0] = bf16x2(pA0.x * sA.x, pA0.y * sA.y);
    pa[1] = bf16x2(pA1.x * sA.x, pA1.y * sA.y);
    pa[2] = bf16x2(pC0.x * sC.x, pC0.y * sC.y);
    pa[3] = bf16x2(pC1.x * sC.x, pC1.y * sC.y);
}

/* PV k-step ks of group `warp`, what every code width shares: its A (s
 * from sm.pvs, pv_pa) and the MMA of the bias columns (B: the l / s
 * tables bsrc, high part in n-row 0, low in 1, zero in the others). */
template <class SM>
__device__ static inline void pv_kstep(const SM &sm, const uint16_t *bsrc, int ks, int warp,
                                       int gr, int gc, uint32_t pa[4], float bacc[4])
{
    const int tA = 16 * ks + 2 * gc, tC = tA + 8;
    const float2 sA = *(const float2 *)&sm.pvs[warp][tA];
    const float2 sC = *(const float2 *)&sm.pvs[warp][tC];
    pv_pa(sm.pf[gr], sm.pf[gr + 8], tA, tC, sA, sC, pa);
    uint32_t b0 = 0, b1 = 0;
    if (gr < 2) {
        b0 = *(const uint32_t *)&bsrc[tA];
        b1 = *(const uint32_t *)&bsrc[tC];
    }
    mma16816(bacc, pa, b0, b1);
}

/* QK of page `pg`: the partial scores s (Q.q) of group `warp` (plus, for
 * tokens 8 warp .., the RoPE group and the content groups' l sum(Q)) into
 * sm.sp[warp]. */
template <int CB, bool Q8 = false>
__device__ static inline void fast_qk(dec_smem_fast<CB, Q8> &sm, const uint8_t *pg,
                                      const fast_lane<CB> &fl, const uint32_t qc[4][4],
                                      const uint32_t qr[4][4], const float sqr[2],
                                      const uint32_t la[4], int warp, int gr, int gc)
{
    typedef fcfg<CB, Q8> F;
#pragma unroll QK_UNROLL
    for (int j = 0; j < 8; j++) {
        uint32_t bc[8];
        const uint8_t *p = pg + fl.qoff[j & 1] + 8 * j * F::CBC;
        if constexpr (CB == 4) {
            const uint2 v = *(const uint2 *)p;
            nib_codes(v.x, bc);
            nib_codes(v.y, bc + 4);
        } else {
            crumb_codes(*(const uint32_t *)p, bc);
        }
        float c[4];
        qk_group(c, qc, bc);
        const float4 mm = *(const float4 *)&sm.qkm[warp][8 * j + 2 * gc];
        *(float2 *)&sm.sp[warp][gr][8 * j + 2 * gc] = make_float2(mm.x * c[0], mm.z * c[1]);
        *(float2 *)&sm.sp[warp][gr + 8][8 * j + 2 * gc] = make_float2(mm.x * c[2], mm.z * c[3]);
    }
    /* RoPE for n-tile `warp`, added to what this lane just stored */
    const uint2 v = *(const uint2 *)(pg + fl.roff);
    uint32_t br[8];
    nib_codes(v.x, br);
    nib_codes(v.y, br + 4);
    float rc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int ks = 0; ks < 4; ks++)
        mma16816(rc, qr[ks], br[2 * ks], br[2 * ks + 1]);
    const float4 mm = *(const float4 *)&sm.rqm[8 * warp + 2 * gc];
    float2 *d0 = (float2 *)&sm.sp[warp][gr][8 * warp + 2 * gc];
    float2 *d1 = (float2 *)&sm.sp[warp][gr + 8][8 * warp + 2 * gc];
    float2 x0 = *d0, x1 = *d1;
    { /* the 8 content groups' l sum(Q) of tokens 8 warp + 2 gc (+1), rows
       * gr, gr + 8: B (k 2g, 2g + 1; token gr) = l of group g, twice (the
       * high half of the group's metadata word), A = sum(Q) of group g,
       * float16 high and low part (fast_part); the products are exact, the
       * sum float32 (the terms of garbage tokens stay in their column) */
        float e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if constexpr (Q8) {
            /* l = m M is not a float16 in general, the code m (|m| <= 128)
             * is: B = m of groups gc, gc + 4 of token 8 warp + gr, twice;
             * the sum is then per token times its M (column 2 gc (+1)) */
            const uint8_t *rec = pg + F::OFF_MC + (8 * warp + gr) * F::MBC + 12 + gc;
            const uint32_t m0 = __half_as_ushort(__short2half_rn((short)(int8_t)rec[0]));
            const uint32_t m1 = __half_as_ushort(__short2half_rn((short)(int8_t)rec[4]));
            mma16816_f16(e, la, m0 | (m0 << 16), m1 | (m1 << 16));
            const uint8_t *rm = pg + F::OFF_MC + (8 * warp + 2 * gc) * F::MBC + 2;
            const float M0 = __half2float(__ushort_as_half(*(const uint16_t *)rm));
            const float M1 = __half2float(__ushort_as_half(*(const uint16_t *)(rm + F::MBC)));
            e[0] = __fmul_rn(e[0], M0);
            e[1] = __fmul_rn(e[1], M1);
            e[2] = __fmul_rn(e[2], M0);
            e[3] = __fmul_rn(e[3], M1);
        } else {
            const uint8_t *mt = pg + F::OFF_MC + (8 * warp + gr) * 32 + 4 * gc;
            const uint32_t u0 = *(const uint32_t *)mt, u1 = *(const uint32_t *)(mt + 16);
            mma16816_f16(e, la, __byte_perm(u0, 0, 0x3232), __byte_perm(u1, 0, 0x3232));
        }
        x0.x += fmaf(mm.x, rc[0], fmaf(mm.y, sqr[0], e[0]));
        x0.y += fmaf(mm.z, rc[1], fmaf(mm.w, sqr[0], e[1]));
        x1.x += fmaf(mm.x, rc[2], fmaf(mm.y, sqr[1], e[2]));
        x1.y += fmaf(mm.z, rc[3], fmaf(mm.w, sqr[1], e[3]));
    }
    *d0 = x0;
    *d1 = x1;
}

/* Online softmax of the page's scores (16 threads per row, 4 tokens each,
 * the NP partials sm.sp summed in a fixed order): P into sm.pf, rescale
 * factor. VIS: pages whose 4 tokens are all visible skip the per-token
 * test (variant 10 has no such path). */
template <int NP, bool VIS, class SM>
__device__ static inline void fast_softmax(SM &sm, const dec_args &a, int t0, int shi, int srow,
                                           int spart)
{
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int w = 0; w < NP; w++) {
        const float4 c = *(const float4 *)&sm.sp[w][srow][spart * 4];
        acc[0] += c.x;
        acc[1] += c.y;
        acc[2] += c.z;
        acc[3] += c.w;
    }
    float z[4], p[4];
    const float zs = sm.zs[srow];
    const int tb = t0 + spart * 4;
    if (VIS && tb >= a.S && tb + 4 <= shi) { /* all 4 visible (most pages) */
#pragma unroll
        for (int u = 0; u < 4; u++)
            z[u] = acc[u] * zs;
    } else {
#pragma unroll
        for (int u = 0; u < 4; u++)
            z[u] = tb + u >= a.S && tb + u < shi ? acc[u] * zs : -INFINITY;
    }
    softmax_step<true>(z, spart, &sm.m[srow], &sm.l[srow], &sm.alpha[srow], p);
    *(float4 *)&sm.pf[srow][spart * 4] = make_float4(p[0], p[1], p[2], p[3]);
}

/* PV of page `pg` for output channels 64 warp + 8n + nt (n: column of
 * n-tile nt), and the bias columns; SM, FL: the kernel's shared memory and
 * lane offsets (CB 8, variants 9 and 10: dec_smem_fast<8> or dec_smem_f8b,
 * fast8_lane; output channel 64 warp + 8 n + nt is byte nt of lane n's 8
 * bytes of a token). */
template <int CB, class SM, class FL>
__device__ static inline void fast_pv(SM &sm, const uint8_t *pg, const FL &fl, float o[8][4],
                                      float bacc[4], int warp, int gr, int gc)
{
    typedef fcfg<CB> F; /* the codes' offsets: the same for either metadata */
    pv_rescale(o, bacc, sm.alpha, gr);
    const uint16_t *bsrc = gr == 0 ? sm.bh[warp] : sm.bl[warp];
#pragma unroll PV_UNROLL
    for (int ks = 0; ks < 4; ks++) {
        uint32_t pa[4];
        pv_kstep(sm, bsrc, ks, warp, gr, gc, pa, bacc);
        const uint8_t *p = pg + 16 * ks * F::CBC;
        if constexpr (CB == 8) {
            const uint2 wa = *(const uint2 *)(p + fl.poff[0]);
            const uint2 wb = *(const uint2 *)(p + fl.poff[1]);
            const uint2 wc = *(const uint2 *)(p + fl.poff[0] + 8 * F::CBC);
            const uint2 wd = *(const uint2 *)(p + fl.poff[1] + 8 * F::CBC);
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                /* bytes (a_jb, a_jb, b_jb, b_jb), masked: channel byte jb of both tokens */
                const int jb = nt & 3;
                const uint32_t sel = jb | (jb << 4) | ((4 + jb) << 8) | ((4 + jb) << 12);
                const uint32_t x = __byte_perm(nt < 4 ? wa.x : wa.y, nt < 4 ? wb.x : wb.y, sel);
                const uint32_t y = __byte_perm(nt < 4 ? wc.x : wc.y, nt < 4 ? wd.x : wd.y, sel);
                mma16816(o[nt], pa, x & 0x00ff00ffu, y & 0x00ff00ffu);
            }
        } else {
            const uint32_t wa = *(const uint32_t *)(p + fl.poff[0]);
            const uint32_t wb = *(const uint32_t *)(p + fl.poff[1]);
            const uint32_t wc = *(const uint32_t *)(p + fl.poff[2]);
            const uint32_t wd = *(const uint32_t *)(p + fl.poff[3]);
            if constexpr (CB == 4) {
#pragma unroll
                for (int jb = 0; jb < 4; jb++) {
                    /* bytes (a_jb, a_jb, b_jb, b_jb): channels 2jb, 2jb+1 of both tokens */
                    const uint32_t sel = jb | (jb << 4) | ((4 + jb) << 8) | ((4 + jb) << 12);
                    const uint32_t x = __byte_perm(wa, wb, sel), y = __byte_perm(wc, wd, sel);
                    /* low nibbles at p = 0, high nibbles at p = 4 (unshifted) */
                    mma16816(o[2 * jb], pa, x & 0x000f000fu, y & 0x000f000fu);
                    mma16816(o[2 * jb + 1], pa, x & 0x00f000f0u, y & 0x00f000f0u);
                }
            } else {
                const int h = gr & 1;
                const uint32_t sel =
                    (2 * h) | ((2 * h + 1) << 4) | ((4 + 2 * h) << 8) | ((5 + 2 * h) << 12);
                const uint32_t x = __byte_perm(wa, wb, sel), y = __byte_perm(wc, wd, sel);
                const uint32_t x8 = x >> 8, y8 = y >> 8;
#pragma unroll
                for (int nt = 0; nt < 8; nt++) {
                    const uint32_t mk = 0x00030003u << subn_pos<2>(nt);
                    mma16816(o[nt], pa, (nt < 4 ? x : x8) & mk, (nt < 4 ? y : y8) & mk);
                }
            }
        }
    }
}

/* Factor of n-tile nt's PV accumulator: 2^(133 - 110 - p) for the codes
 * at position p. */
template <int CB> __host__ __device__ static constexpr float pv_unscale(int nt)
{
    return (float)(1 << 23) / (float)(1 << subn_pos<CB>(nt));
}

/* The split's normalised partial output and LSE of the row tile at r0
 * (l, mx: its softmax sums and maxima, rows 0 .. 15): the bias columns 0
 * (high) and 1 (low) live in lanes gc = 0. VEC: channel 64 warp + 16 gc +
 * 8 e + nt, the lane's 16 consecutive channels of rows gr and gr + 8, as
 * 4 float4 each (float4 k: e = k / 2, nt = 4 (k % 2) .. + 3); otherwise
 * one float per store: 8x the partials' bytes in L2 write sectors (the
 * short-context cost measured in H200 run 19, docs/decode.md). */
template <int CB, bool VEC>
__device__ static inline void fast_store(const dec_args &a, const float *l, const float *mx, int b,
                                         int r0, int slot, const float o[8][4],
                                         const float bacc[4], int tid)
{
    const int warp = tid >> 5, lane = tid & 31, gr = lane >> 2, gc = lane & 3;
    float b0 = bacc[0] + bacc[1], b1 = bacc[2] + bacc[3];
    b0 = __shfl_sync(0xffffffffu, b0, lane & ~3);
    b1 = __shfl_sync(0xffffffffu, b1, lane & ~3);
    const size_t base = ((size_t)b * a.n_splits + slot) * a.R_pad + r0;
    const float la = l[gr], lb = l[gr + 8];
    const float ia = la > 0.0f ? 1.0f / la : 0.0f, ib = lb > 0.0f ? 1.0f / lb : 0.0f;
    if constexpr (VEC) {
        float4 *d0 = (float4 *)(a.o_part + (base + gr) * QMLA_KV_DC + 64 * warp + 16 * gc);
        float4 *d1 = (float4 *)(a.o_part + (base + gr + 8) * QMLA_KV_DC + 64 * warp + 16 * gc);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int e = k >> 1, n0 = 4 * (k & 1);
#define QMLA_OUT(N, C, BB, I) (fmaf(o[N][C], pv_unscale<CB>(N), BB) * (I))
            d0[k] = make_float4(QMLA_OUT(n0, e, b0, ia), QMLA_OUT(n0 + 1, e, b0, ia),
                                QMLA_OUT(n0 + 2, e, b0, ia), QMLA_OUT(n0 + 3, e, b0, ia));
            d1[k] = make_float4(QMLA_OUT(n0, 2 + e, b1, ib), QMLA_OUT(n0 + 1, 2 + e, b1, ib),
                                QMLA_OUT(n0 + 2, 2 + e, b1, ib), QMLA_OUT(n0 + 3, 2 + e, b1, ib));
#undef QMLA_OUT
        }
    } else {
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int ch = 64 * warp + 8 * (2 * gc + e) + nt;
                a.o_part[(base + gr) * QMLA_KV_DC + ch] =
                    fmaf(o[nt][e], pv_unscale<CB>(nt), b0) * ia;
                a.o_part[(base + gr + 8) * QMLA_KV_DC + ch] =
                    fmaf(o[nt][2 + e], pv_unscale<CB>(nt), b1) * ib;
            }
    }
    if (tid < DEC_ROWS) {
        const float lt = l[tid];
        a.lse_part[base + tid] = lt > 0.0f ? (mx[tid] + log2f(lt)) * LN2 : -INFINITY;
    }
}

/* Pages of split `split`: per page two barriers; PV of page i and QK of
 * page i+1 run in the same phase. NST = 3: page i+2 is copied while the
 * phase of pages i / i+1 runs. */
template <int CB, bool Q8 = false>
__device__ static void fast_part(dec_smem_fast<CB, Q8> &sm, const dec_args &a, int b, int r0,
                                 int split, int slot, int tid)
{
    typedef fcfg<CB, Q8> F;
    static_assert(F::NST >= 3, "fast_part needs three stages");
    const int warp = tid >> 5, lane = tid & 31, gr = lane >> 2, gc = lane & 3;
    const int len = a.seq_len[b], lenW = len - a.W; /* tokens >= lenW: window or absent */
    /* pages holding packed, unprotected tokens [S, lenW) */
    int p0, p1;
    packed_pages(a, lenW, split, &p0, &p1);
    const int np = p1 - p0;
    const fast_lane<CB> fl(tid);
    uint32_t qc[4][4], qr[4][4];
    float sqc[2], sqr[2];
    int qe[2];
    uint32_t lqa[4] = {0u, 0u, 0u, 0u}; /* A of the l sum(Q) MMA (fast_qk) */
    fast_q<CB>(a, b, r0, warp, gr, gc, qc, qr, sqc, sqr, qe);
    /* the rows' exponent fields per warp, [8][16], in sm.pf (unused until
     * the first softmax, two barriers later) */
    int *qex = (int *)&sm.pf[0][0];
    fast_qex(qex, qe, sqc, warp, gr, gc);
    if (tid < DEC_ROWS)
        sm.zs[tid] = a.scale_log2; /* set below for every row; kept: the measured SASS (run 23) */
    float o[8][4], bacc[4];
    fast_begin(o, bacc, sm.m, sm.l, tid);
    const int srow = tid >> 4, spart = tid & 15;
    const int shi = fast_shi(a, r0, srow, len, lenW); /* softmax row: tokens [S, shi) */
    const int32_t *bt = a.block_table + (size_t)b * a.max_pages;
    /* Iteration i: softmax and PV of page i (i >= 0), QK of page i + 1;
     * page i + 2 is copied meanwhile (issued at i, awaited at i + 1). The
     * first iteration (i = -1) only runs the QK of page 0 (awaited before
     * the loop), so that the QK code exists once (the kernel's code size
     * is what costs at short contexts: every launch starts with a cold
     * instruction cache). */
    if (np > 0) {
        fast_issue<CB, Q8>(sm.stage[0], a.pool + (size_t)bt[p0] * F::PB, fl.dswz, tid);
        cp_async_commit();
        if (np > 1)
            fast_issue<CB, Q8>(sm.stage[1], a.pool + (size_t)bt[p0 + 1] * F::PB, fl.dswz, tid);
        cp_async_commit();
    }
    cp_async_wait<1>(); /* page 0 (page 1 may be in flight) */
    __syncthreads();    /* page 0 landed; the rows' exponent fields */
    { /* the row exponents (the codes' 2^-133, above); inline, not fast_rowexp and
       * fast_lsum: as calls they change decode_fast_kernel<CB, 0>'s SASS */
        int e0 = 0, e1 = 0;
#pragma unroll
        for (int w = 0; w < 8; w++) {
            e0 = max(e0, qex[w * DEC_ROWS + gr]);
            e1 = max(e1, qex[w * DEC_ROWS + gr + 8]);
        }
        const int E[2] = {subn_rowexp(e0), subn_rowexp(e1)};
        fast_qscale<CB>(qc, qr, sqc, sqr, E);
        /* A of the l sum(Q) MMA: row gr / gr + 8 (E[0] / E[1]), k 2g, 2g + 1
         * = sum(Q) of group g times 2^(E - 133) (as sqc: |x| < 1) as float16
         * high and low parts (22 bits), g = gc (a0, a1), gc + 4 (a2, a3) */
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int hr = k & 1, g = gc + 4 * (k >> 1);
            const float x = __fmul_rn(__int_as_float(qex[8 * DEC_ROWS + g * DEC_ROWS + gr + 8 * hr]),
                                      pow2f(E[hr] - 133));
            const __half h = __float2half_rn(x);
            const __half l = __float2half_rn(x - __half2float(h));
            lqa[k] = (uint32_t)__half_as_ushort(h) | ((uint32_t)__half_as_ushort(l) << 16);
        }
        if (tid < 32 && gc == 0) { /* lanes 0, 4, .., 28 of warp 0: rows gr, gr + 8 */
            sm.zs[gr] = a.scale_log2 * pow2f(133 - E[0]);
            sm.zs[gr + 8] = a.scale_log2 * pow2f(133 - E[1]);
        }
    }
    for (int i = -1; i < np; i++) {
        if (i >= 0) {
            __syncthreads(); /* scores of page i complete */
            fast_softmax<8, true>(sm, a, (p0 + i) * QMLA_KV_PAGE, shi, srow, spart);
            cp_async_wait<0>();
            __syncthreads(); /* P of page i; page i+1 landed; page i-1 consumed */
            if (i + 2 < np)
                fast_issue<CB, Q8>(sm.stage[(i + 2) % F::NST],
                               a.pool + (size_t)bt[p0 + i + 2] * F::PB, fl.dswz, tid);
            cp_async_commit();
            fast_pv<CB>(sm, sm.stage[i % F::NST], fl, o, bacc, warp, gr, gc);
        }
        if (i + 1 < np) {
            __syncwarp();
            const uint8_t *pg = sm.stage[(i + 1) % F::NST];
            fast_meta<CB, Q8>(sm, pg, (p0 + i + 1) * QMLA_KV_PAGE, a.S, lenW, warp, lane);
            fast_qk<CB, Q8>(sm, pg, fl, qc, qr, sqr, lqa, warp, gr, gc);
        }
    }
    __syncthreads();
    fast_store<CB, QMLA_DECODE_VEC_EPILOGUE>(a, sm.l, sm.m, b, r0, slot, o, bacc, tid);
}

/* SEP 0 (variant 0): grid.x = n_splits - n_prot, the last n_prot blocks
 * attend to the protected tokens after their pages. SEP 1 (variant 1, the
 * short-context plan): grid.x = n_splits, blocks n_splits - n_prot .. take
 * the protected tokens only, beside the packed blocks instead of after them
 * (the plan keeps the grid within one wave). */
template <int SEP, class SM,
          void (*PART)(SM &, const dec_args &, int b, int r0, int split, int slot, int tid)>
__device__ static __forceinline__ void fast_kernel_body(const dec_args &a, unsigned char *smem_raw)
{
    const int b = blockIdx.z, r0 = blockIdx.y * DEC_ROWS, tid = threadIdx.x, x = blockIdx.x;
    if constexpr (SEP) {
        const int nblk = a.n_splits - a.n_prot;
        if (x < nblk)
            PART(*(SM *)smem_raw, a, b, r0, x, x, tid);
        else
            prot_part(*(dec_smem_quant *)smem_raw, a, b, r0, x - nblk, x, tid);
        return;
    }
    const int nblk = a.n_splits - a.n_prot; /* gridDim.x */
    PART(*(SM *)smem_raw, a, b, r0, x, x, tid);
    const int k = x - (nblk - a.n_prot);
    if (k >= 0) { /* the last n_prot blocks (the fewest packed pages) */
        __syncthreads();
        prot_part(*(dec_smem_quant *)smem_raw, a, b, r0, k, nblk + k, tid);
    }
}
template <int CB, int SEP>
__global__ void __launch_bounds__(DEC_THREADS, 2) decode_fast_kernel(dec_args a)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    fast_kernel_body<SEP, dec_smem_fast<CB>, fast_part<CB>>(a, smem_raw);
}
/* The same kernel on q8-metadata pages (fcfg<CB, true>: the page layout,
 * fast_meta and the l sum(Q) term of fast_qk read the q8 records). */
template <int CB, int SEP>
__global__ void __launch_bounds__(DEC_THREADS, 2) decode_fast_q8_kernel(dec_args a)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    fast_kernel_body<SEP, dec_smem_fast<CB, true>, fast_part<CB, true>>(a, smem_raw);
}

/* ---- variant 6: the codes on tensor cores for MT row tiles per page ------
 * decode_fast_kernel gives every 16 query rows (heads x query tokens) a
 * block of its own, so at H 128 each packed page is fetched and its codes
 * unpacked 8 times. decode_fast_mr_kernel<CB, MT> is variant 5's idea on
 * that kernel: one block of 8 warps takes MT = 2 row tiles (32 rows) on
 * each page, and every warp register-blocks them: the codes it reads from
 * the stage and unpacks into MMA operands (QK: one 8-byte load and 8 LOP3
 * per n-tile; PV: 4 word loads, 8 PRMT and 16 LOP3 per k-step), the page's
 * metadata tables (fast_meta, once per page) and the RoPE codes serve the
 * MMAs of both tiles. The arithmetic per tile is decode_fast_kernel's (the
 * same MMA chains, summation orders and softmax), so each row's output is
 * that kernel's bit for bit. One block per SM (the two tiles' query
 * fragments and accumulators: about 2 x 68 registers more than the 126 of
 * the one-tile kernel), the page pipeline of fast_part (NST stages by
 * cp.async, two block barriers per page), the protected partials after the
 * pages of the last n_prot blocks, one tile after the other (prot_part).
 * Row tiles at or past R_pad (an odd tile count's last group) compute on
 * zero queries and write nothing. Reference: qmla_decode_ref_model with
 * packed_f32 = 1, as variant 0. */
template <int CB, int MT> struct dec_smem_fmr {
    uint8_t stage[fcfg<CB>::NST][fcfg<CB>::PB];     /* as dec_smem_fast */
    float sp[MT][8][DEC_ROWS][SSTR];                /* [tile][group][16][64 (+8)] */
    float pf[MT][DEC_ROWS][SSTR];                   /* [tile][16][64 (+8)] */
    float2 qkm[8][QMLA_KV_PAGE];
    float pvs[8][QMLA_KV_PAGE];
    uint16_t bh[8][QMLA_KV_PAGE], bl[8][QMLA_KV_PAGE];
    float2 rqm[QMLA_KV_PAGE];
    float m[MT * DEC_ROWS], l[MT * DEC_ROWS], alpha[MT * DEC_ROWS], zs[MT * DEC_ROWS];
};

template <int CB, int MT> static constexpr size_t fmr_smem_bytes()
{
    return sizeof(dec_smem_fmr<CB, MT>) > sizeof(dec_smem_quant) ? sizeof(dec_smem_fmr<CB, MT>)
                                                                  : sizeof(dec_smem_quant);
}

/* fast_qk for MT row tiles: each n-tile's codes loaded and unpacked once. */
template <int CB, int MT>
__device__ static inline void fast_qk_mr(dec_smem_fmr<CB, MT> &sm, const uint8_t *pg,
                                         const fast_lane<CB> &fl, const uint32_t (&qc)[MT][4][4],
                                         const uint32_t (&qr)[MT][4][4], const float (&sqr)[MT][2],
                                         const uint32_t (&la)[MT][4], int warp, int gr, int gc)
{
    typedef fcfg<CB> F;
#pragma unroll QK_UNROLL
    for (int j = 0; j < 8; j++) {
        uint32_t bc[8];
        const uint8_t *p = pg + fl.qoff[j & 1] + 8 * j * F::CBC;
        if constexpr (CB == 4) {
            const uint2 v = *(const uint2 *)p;
            nib_codes(v.x, bc);
            nib_codes(v.y, bc + 4);
        } else {
            crumb_codes(*(const uint32_t *)p, bc);
        }
        const float4 mm = *(const float4 *)&sm.qkm[warp][8 * j + 2 * gc];
#pragma unroll
        for (int m = 0; m < MT; m++) {
            float c[4];
            qk_group(c, qc[m], bc);
            *(float2 *)&sm.sp[m][warp][gr][8 * j + 2 * gc] = make_float2(mm.x * c[0], mm.z * c[1]);
            *(float2 *)&sm.sp[m][warp][gr + 8][8 * j + 2 * gc] =
                make_float2(mm.x * c[2], mm.z * c[3]);
        }
    }
    /* RoPE for n-tile `warp` and the content groups' l sum(Q) (fast_qk) */
    const uint2 v = *(const uint2 *)(pg + fl.roff);
    uint32_t br[8];
    nib_codes(v.x, br);
    nib_codes(v.y, br + 4);
    const float4 mm = *(const float4 *)&sm.rqm[8 * warp + 2 * gc];
    const uint8_t *mt = pg + F::OFF_MC + (8 * warp + gr) * 32 + 4 * gc;
    const uint32_t u0 = *(const uint32_t *)mt, u1 = *(const uint32_t *)(mt + 16);
    const uint32_t lb0 = __byte_perm(u0, 0, 0x3232), lb1 = __byte_perm(u1, 0, 0x3232);
#pragma unroll
    for (int m = 0; m < MT; m++) {
        float rc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int ks = 0; ks < 4; ks++)
            mma16816(rc, qr[m][ks], br[2 * ks], br[2 * ks + 1]);
        float2 *d0 = (float2 *)&sm.sp[m][warp][gr][8 * warp + 2 * gc];
        float2 *d1 = (float2 *)&sm.sp[m][warp][gr + 8][8 * warp + 2 * gc];
        float2 x0 = *d0, x1 = *d1;
        float e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma16816_f16(e, la[m], lb0, lb1);
        x0.x += fmaf(mm.x, rc[0], fmaf(mm.y, sqr[m][0], e[0]));
        x0.y += fmaf(mm.z, rc[1], fmaf(mm.w, sqr[m][0], e[1]));
        x1.x += fmaf(mm.x, rc[2], fmaf(mm.y, sqr[m][1], e[2]));
        x1.y += fmaf(mm.z, rc[3], fmaf(mm.w, sqr[m][1], e[3]));
        *d0 = x0;
        *d1 = x1;
    }
}

/* fast_softmax for MT row tiles: each thread takes row srow of every tile. */
template <int CB, int MT>
__device__ static inline void fast_softmax_mr(dec_smem_fmr<CB, MT> &sm, const dec_args &a,
                                              int t0, const int (&shi)[MT], int srow, int spart)
{
#pragma unroll
    for (int m = 0; m < MT; m++) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int w = 0; w < 8; w++) {
            const float4 c = *(const float4 *)&sm.sp[m][w][srow][spart * 4];
            acc[0] += c.x;
            acc[1] += c.y;
            acc[2] += c.z;
            acc[3] += c.w;
        }
        float z[4], p[4];
        const int row = m * DEC_ROWS + srow;
        const float zs = sm.zs[row];
        const int tb = t0 + spart * 4;
        if (tb >= a.S && tb + 4 <= shi[m]) {
#pragma unroll
            for (int u = 0; u < 4; u++)
                z[u] = acc[u] * zs;
        } else {
#pragma unroll
            for (int u = 0; u < 4; u++)
                z[u] = tb + u >= a.S && tb + u < shi[m] ? acc[u] * zs : -INFINITY;
        }
        softmax_step<true>(z, spart, &sm.m[row], &sm.l[row], &sm.alpha[row], p);
        *(float4 *)&sm.pf[m][srow][spart * 4] = make_float4(p[0], p[1], p[2], p[3]);
    }
}

/* fast_pv for MT row tiles: the code words and their operands once per
 * k-step, the MMAs of every tile on them. */
template <int CB, int MT>
__device__ static inline void fast_pv_mr(dec_smem_fmr<CB, MT> &sm, const uint8_t *pg,
                                         const fast_lane<CB> &fl, float (&o)[MT][8][4],
                                         float (&bacc)[MT][4], int warp, int gr, int gc)
{
    typedef fcfg<CB> F;
#pragma unroll
    for (int m = 0; m < MT; m++)
        pv_rescale(o[m], bacc[m], sm.alpha + m * DEC_ROWS, gr);
    const uint16_t *bsrc = gr == 0 ? sm.bh[warp] : sm.bl[warp];
#pragma unroll PV_UNROLL
    for (int ks = 0; ks < 4; ks++) {
        const int tA = 16 * ks + 2 * gc, tC = tA + 8;
        const float2 sA = *(const float2 *)&sm.pvs[warp][tA];
        const float2 sC = *(const float2 *)&sm.pvs[warp][tC];
        uint32_t pa[MT][4];
#pragma unroll
        for (int m = 0; m < MT; m++)
            pv_pa(sm.pf[m][gr], sm.pf[m][gr + 8], tA, tC, sA, sC, pa[m]);
        {
            uint32_t b0 = 0, b1 = 0;
            if (gr < 2) {
                b0 = *(const uint32_t *)&bsrc[tA];
                b1 = *(const uint32_t *)&bsrc[tC];
            }
#pragma unroll
            for (int m = 0; m < MT; m++)
                mma16816(bacc[m], pa[m], b0, b1);
        }
        const uint8_t *p = pg + 16 * ks * F::CBC;
        const uint32_t wa = *(const uint32_t *)(p + fl.poff[0]);
        const uint32_t wb = *(const uint32_t *)(p + fl.poff[1]);
        const uint32_t wc = *(const uint32_t *)(p + fl.poff[2]);
        const uint32_t wd = *(const uint32_t *)(p + fl.poff[3]);
        if constexpr (CB == 4) {
#pragma unroll
            for (int jb = 0; jb < 4; jb++) {
                const uint32_t sel = jb | (jb << 4) | ((4 + jb) << 8) | ((4 + jb) << 12);
                const uint32_t x = __byte_perm(wa, wb, sel), y = __byte_perm(wc, wd, sel);
                const uint32_t xl = x & 0x000f000fu, yl = y & 0x000f000fu;
                const uint32_t xh = x & 0x00f000f0u, yh = y & 0x00f000f0u;
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    mma16816(o[m][2 * jb], pa[m], xl, yl);
                    mma16816(o[m][2 * jb + 1], pa[m], xh, yh);
                }
            }
        } else {
            const int h = gr & 1;
            const uint32_t sel = (2 * h) | ((2 * h + 1) << 4) | ((4 + 2 * h) << 8) | ((5 + 2 * h) << 12);
            const uint32_t x = __byte_perm(wa, wb, sel), y = __byte_perm(wc, wd, sel);
            const uint32_t x8 = x >> 8, y8 = y >> 8;
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                const uint32_t mk = 0x00030003u << subn_pos<2>(nt);
                const uint32_t bx = (nt < 4 ? x : x8) & mk, by = (nt < 4 ? y : y8) & mk;
#pragma unroll
                for (int m = 0; m < MT; m++)
                    mma16816(o[m][nt], pa[m], bx, by);
            }
        }
    }
}

/* fast_part for MT row tiles from r0 (the same schedule). */
template <int CB, int MT>
__device__ static void fast_part_mr(dec_smem_fmr<CB, MT> &sm, const dec_args &a, int b, int r0,
                                    int split, int slot, int tid)
{
    typedef fcfg<CB> F;
    static_assert(F::NST >= 3, "fast_part_mr needs three stages");
    const int warp = tid >> 5, lane = tid & 31, gr = lane >> 2, gc = lane & 3;
    const int len = a.seq_len[b], lenW = len - a.W;
    int p0, p1;
    packed_pages(a, lenW, split, &p0, &p1);
    const int np = p1 - p0;
    const fast_lane<CB> fl(tid);
    uint32_t qc[MT][4][4], qr[MT][4][4];
    float sqc[MT][2], sqr[MT][2];
    uint32_t lqa[MT][4];
#pragma unroll
    for (int m = 0; m < MT; m++) {
        int qe[2];
        fast_q<CB>(a, b, r0 + m * DEC_ROWS, warp, gr, gc, qc[m], qr[m], sqc[m], sqr[m], qe);
        fast_qex((int *)&sm.pf[m][0][0], qe, sqc[m], warp, gr, gc);
    }
    float o[MT][8][4], bacc[MT][4];
#pragma unroll
    for (int m = 0; m < MT; m++) {
        bacc[m][0] = bacc[m][1] = bacc[m][2] = bacc[m][3] = 0.0f;
#pragma unroll
        for (int n = 0; n < 8; n++)
            o[m][n][0] = o[m][n][1] = o[m][n][2] = o[m][n][3] = 0.0f;
    }
    if (tid < MT * DEC_ROWS) {
        sm.m[tid] = -INFINITY;
        sm.l[tid] = 0.0f;
    }
    const int srow = tid >> 4, spart = tid & 15;
    int shi[MT];
#pragma unroll
    for (int m = 0; m < MT; m++)
        shi[m] = fast_shi(a, r0 + m * DEC_ROWS, srow, len, lenW);
    const int32_t *bt = a.block_table + (size_t)b * a.max_pages;
    if (np > 0) {
        fast_issue<CB>(sm.stage[0], a.pool + (size_t)bt[p0] * F::PB, fl.dswz, tid);
        cp_async_commit();
        if (np > 1)
            fast_issue<CB>(sm.stage[1], a.pool + (size_t)bt[p0 + 1] * F::PB, fl.dswz, tid);
        cp_async_commit();
    }
    cp_async_wait<1>();
    __syncthreads(); /* page 0 landed; the rows' exponent fields */
#pragma unroll
    for (int m = 0; m < MT; m++) {
        const int *qex = (const int *)&sm.pf[m][0][0];
        int E[2];
        fast_rowexp(qex, gr, E);
        fast_qscale<CB>(qc[m], qr[m], sqc[m], sqr[m], E);
        fast_lsum(a, qex, E, lqa[m], sm.zs + m * DEC_ROWS, tid, gr, gc);
    }
    for (int i = -1; i < np; i++) {
        if (i >= 0) {
            __syncthreads(); /* scores of page i complete */
            fast_softmax_mr<CB, MT>(sm, a, (p0 + i) * QMLA_KV_PAGE, shi, srow, spart);
            cp_async_wait<0>();
            __syncthreads(); /* P of page i; page i+1 landed; page i-1 consumed */
            if (i + 2 < np)
                fast_issue<CB>(sm.stage[(i + 2) % F::NST],
                               a.pool + (size_t)bt[p0 + i + 2] * F::PB, fl.dswz, tid);
            cp_async_commit();
            fast_pv_mr<CB, MT>(sm, sm.stage[i % F::NST], fl, o, bacc, warp, gr, gc);
        }
        if (i + 1 < np) {
            __syncwarp();
            const uint8_t *pg = sm.stage[(i + 1) % F::NST];
            fast_meta<CB>(sm, pg, (p0 + i + 1) * QMLA_KV_PAGE, a.S, lenW, warp, lane);
            fast_qk_mr<CB, MT>(sm, pg, fl, qc, qr, sqr, lqa, warp, gr, gc);
        }
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < MT; m++) {
        const int rm = r0 + m * DEC_ROWS;
        if (rm >= a.R_pad)
            break; /* the same for the whole block */
        fast_store<CB, true>(a, sm.l + m * DEC_ROWS, sm.m + m * DEC_ROWS, b, rm, slot, o[m],
                             bacc[m], tid);
    }
}

/* Variant 6: grid (n_splits - n_prot, ceil(row tiles / MT), batch); the
 * last n_prot blocks then attend to the protected tokens of each of their
 * row tiles below R_pad (prot_part, one tile after the other). */
template <int CB, int MT>
__global__ void __launch_bounds__(DEC_THREADS, 1) decode_fast_mr_kernel(dec_args a)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int b = blockIdx.z, r0 = blockIdx.y * DEC_ROWS * MT, tid = threadIdx.x, x = blockIdx.x;
    const int nblk = a.n_splits - a.n_prot; /* gridDim.x */
    fast_part_mr<CB, MT>(*(dec_smem_fmr<CB, MT> *)smem_raw, a, b, r0, x, x, tid);
    const int k = x - (nblk - a.n_prot);
    if (k >= 0) {
#pragma unroll 1
        for (int m = 0; m < MT; m++) {
            if (r0 + m * DEC_ROWS >= a.R_pad)
                break;
            __syncthreads();
            prot_part(*(dec_smem_quant *)smem_raw, a, b, r0 + m * DEC_ROWS, k, nblk + k, tid);
        }
    }
}

/* ---- variant 2: warp-specialised BF16-tile decode (C4R4, C2R4, C8R8) -----
 * 512 threads: warps 8-15 are producers, warps 0-7 consumers. Producers
 * hold the packed codes and metadata of the next two pages in registers
 * (load_page, 16-byte loads, two pages in flight), reconstruct each page
 * into one of two BF16 tiles [64][576 (+8)] (store_page: BF16(fmaf(q, s,
 * l)) for packed tokens, the BF16 rows of the sink / window buffers for
 * protected ones, zeros past the sequence: exactly one representation per
 * token, the same code as the reconstruction check qmla_kv_gather_cuda),
 * and hand the tile over through a full / empty pair of mbarriers per tile
 * (see ws_produce). The
 * consumers run the BF16-tile attention of decode_bf16_kernel (mma.sync
 * m16n8k16, QK, online softmax, PV; barriers among the 256 consumers only)
 * for NRT row tiles of 16 query rows (heads x query tokens) on the same
 * tile, so one dequantized page serves 16 NRT rows (NRT = 2 when the batch
 * shape has more than 16 rows: H 128 reads and converts every page 4 times
 * instead of the fast kernel's 8). Split-KV as the other kernels, one
 * block per SM (228 KB of shared memory at NRT 2), combine unchanged.
 * Reference: qmla_decode_ref_model with packed_f32 = 0 (BF16-rounded
 * packed values, as the C8R8 tile kernel). Tensor cores: mma.sync, not
 * wgmma (a first working step; docs/decode.md). */
#define WS_THREADS (2 * DEC_THREADS)
#define WS_BAR_CONS 1 /* consumers only */

struct dec_smem_rt { /* one row tile's part of dec_smem_quant */
    __nv_bfloat16 q[DEC_ROWS * KSTR];
    float sp[4][DEC_ROWS][SSTR];
    __nv_bfloat16 p[DEC_ROWS * PSTR];
    float m[DEC_ROWS], l[DEC_ROWS], alpha[DEC_ROWS];
};
template <int NRT> struct dec_smem_ws {
    __nv_bfloat16 tile[2][QMLA_KV_PAGE * KSTR];
    dec_smem_rt rt[NRT];
    uint64_t full[2], empty[2]; /* mbarriers of the tiles (ws_produce) */
};

/* The hand-off: per tile t a pair of mbarriers, full[t] (256 arrivals: the
 * producer threads, once their stores of a page into tile t are done) and
 * empty[t] (256 arrivals: the consumer threads, once their last read of
 * the page in tile t is done). Page i uses tile i & 1 and is the (i >> 1)-th
 * use of it: the consumers wait for phase i >> 1 of full[i & 1] (parity
 * (i >> 1) & 1) before reading page i; the producers, before storing page
 * i >= 2, wait for phase (i >> 1) - 1 of empty[i & 1], the consumers'
 * arrivals after page i - 2. Arrive is a release and the wait an acquire
 * (CTA scope), so the stores of page i happen before its reads (read after
 * write) and the reads of page i - 2 before the stores of page i (write
 * after read). Neither side can run a phase ahead (a producer is at most
 * one page ahead with two tiles), so a parity names one phase. The same
 * schedule as the earlier named-barrier hand-offs (H200 hopper runs 1-3:
 * bar.arrive FULL / EMPTY; run 4a: bar.sync of all 512 threads, which
 * synccheck reported as a barrier reached from divergent code, bar.sync
 * being .aligned; racecheck flagged both; docs/decode.md). */
template <int CB, int RB, int NRT>
__device__ static inline void ws_produce(prefetch<CB, RB> &f, dec_smem_ws<NRT> &sm,
                                         const dec_args &a, int b, int p0, int i, int np,
                                         long len, const int32_t *bt, int pt)
{
    const int t = i & 1;
    if (i >= 2)
        mbar_wait(&sm.empty[t], (uint32_t)(((i >> 1) - 1) & 1)); /* page i - 2 read */
    store_page<CB, RB>(f, sm.tile[t], a, b, (long)(p0 + i) * QMLA_KV_PAGE, len, pt);
    mbar_arrive(&sm.full[t]);
    if (i + 2 < np)
        load_page<CB, RB>(f, a.pool + (size_t)bt[p0 + i + 2] * a.L.page_bytes, a.L, pt);
}

template <int CB, int RB, int NRT>
__global__ void __launch_bounds__(WS_THREADS, 1) decode_ws_kernel(dec_args a)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    dec_smem_ws<NRT> &sm = *(dec_smem_ws<NRT> *)smem_raw;
    const int split = blockIdx.x, b = blockIdx.z, tid = threadIdx.x;
    const long len = a.seq_len[b];
    const int npages = (int)((len + QMLA_KV_PAGE - 1) / QMLA_KV_PAGE);
    const int p0 = split * a.pps, p1 = min(npages, p0 + a.pps);
    const int np = p1 > p0 ? p1 - p0 : 0;
    const int32_t *bt = a.block_table + (size_t)b * a.max_pages;
    if (tid == 0) {
        for (int t = 0; t < 2; t++) {
            mbar_init(&sm.full[t], DEC_THREADS);
            mbar_init(&sm.empty[t], DEC_THREADS);
        }
    }
    __syncthreads(); /* the mbarriers initialised, for both roles */
    if (tid >= DEC_THREADS) { /* producers */
        const int pt = tid - DEC_THREADS;
        prefetch<CB, RB> f0, f1;
        if (np > 0)
            load_page<CB, RB>(f0, a.pool + (size_t)bt[p0] * a.L.page_bytes, a.L, pt);
        if (np > 1)
            load_page<CB, RB>(f1, a.pool + (size_t)bt[p0 + 1] * a.L.page_bytes, a.L, pt);
        for (int i = 0; i < np; i += 2) { /* two register sets, constant indices */
            ws_produce<CB, RB, NRT>(f0, sm, a, b, p0, i, np, len, bt, pt);
            if (i + 1 < np)
                ws_produce<CB, RB, NRT>(f1, sm, a, b, p0, i + 1, np, len, bt, pt);
        }
        return;
    }
    /* consumers */
    dec_state st[NRT];
    long vis[NRT];
    const int rt0 = blockIdx.y * NRT;
#pragma unroll
    for (int j = 0; j < NRT; j++) {
        const int r0 = (rt0 + j) * DEC_ROWS;
        vis[j] = 0;
        if (r0 < a.R_pad) { /* the same for the whole block */
            dec_init(st[j], sm.rt[j], a, b, r0, tid);
            vis[j] = row_vis(a, r0, len, tid);
        }
    }
    dec_bar<WS_BAR_CONS>(); /* queries and softmax state visible */
    for (int i = 0; i < np; i++) {
        const int t = i & 1;
        mbar_wait(&sm.full[t], (uint32_t)((i >> 1) & 1)); /* page i stored */
#pragma unroll
        for (int j = 0; j < NRT; j++)
            if ((rt0 + j) * DEC_ROWS < a.R_pad)
                attend_page<dec_smem_rt, 9, WS_BAR_CONS>(st[j], sm.rt[j], sm.tile[t], a,
                                                         (long)(p0 + i) * QMLA_KV_PAGE, vis[j],
                                                         tid);
        if (i + 2 < np)
            mbar_arrive(&sm.empty[t]); /* page i read: tile t free for page i + 2 */
    }
#pragma unroll
    for (int j = 0; j < NRT; j++)
        if ((rt0 + j) * DEC_ROWS < a.R_pad)
            dec_finish<dec_smem_rt, WS_BAR_CONS>(st[j], sm.rt[j], a, b, split,
                                                 (rt0 + j) * DEC_ROWS, tid);
}

/* ---- variant 5: the head rows of a query on one tile --------------------
 * decode_mr_kernel<CB, RB, MT>: the BF16-tile attention of
 * decode_bf16_kernel / decode_quant_kernel, but one block of 8 warps takes
 * MT row tiles (16 MT query rows: heads x query tokens) on each page tile,
 * and every warp register-blocks them: each B fragment of the page that a
 * warp loads by ldmatrix (QK: 32 tokens x 16 channels; PV: 16 tokens x 16
 * channels) feeds the MMAs of all MT row tiles. So at H 128 (8 row tiles)
 * every page is fetched into shared memory 8 / MT times instead of 8 (BF16
 * variants 0 and 3; hopper run 4's profile of BF16 at H 16 already showed
 * L2 throughput at 89 %, and at H 128 each page went through L2 8 times),
 * and the shared-memory reads of the page per query row fall from 3 + 5 to
 * (2 + 4 MT) / MT ldmatrix per k-step and warp. FlashMLA's dense decode
 * does the same at 64 rows per block with wgmma (two warpgroups, Q in
 * shared memory; docs/decode.md); here MT = 2 (32 rows) is what fits the
 * register file (the O accumulators are 32 MT floats per thread) and the
 * shared memory (BF16: two page tiles, 228.7 KB).
 * CB = 16: the BF16 cache (cp.async, two tiles, zero fill past the end, as
 * decode_bf16_kernel); CB = 4 / 2 / 8: packed pages prefetched into
 * registers during the previous page and reconstructed into one tile
 * (load_page / store_page: BF16(fmaf(q, s, l)), the BF16 sink / window
 * rows for protected tokens, zeros past the end; as decode_quant_kernel),
 * so C4R4 / C2R4 attend to BF16-rounded values here (packed_f32 0) and
 * there are no protected partials. Combine: decode_combine2_kernel.
 * Reference: qmla_decode_ref_model. */
template <int MT, int NBUF> struct dec_smem_mr {
    __nv_bfloat16 tile[NBUF][QMLA_KV_PAGE * KSTR];
    __nv_bfloat16 q[MT * DEC_ROWS * KSTR];
    float sp[4][MT * DEC_ROWS][SSTR];
    __nv_bfloat16 p[MT * DEC_ROWS * PSTR];
    float m[MT * DEC_ROWS], l[MT * DEC_ROWS], alpha[MT * DEC_ROWS];
};
template <int CB, int MT> static constexpr size_t mr_smem_bytes()
{
    return sizeof(dec_smem_mr<MT, CB == 16 ? 2 : 1>);
}

template <int MT> struct dec_state_mr {
    float o[MT][8][4]; /* row tile m: 16 rows x channels 64w .. 64w + 63 */
};

/* One page on a ready tile for the MT row tiles (attend_page's steps, the
 * row tiles' MMAs sharing every B fragment). vis[m]: the visible bound of
 * this thread's softmax row in row tile m. */
template <int MT, class SM>
__device__ static inline void attend_page_mr(dec_state_mr<MT> &st, SM &sm,
                                             const __nv_bfloat16 *tile, const dec_args &a,
                                             long t0, const long vis[MT], int tid)
{
    const int warp = tid >> 5, lane = tid & 31, cg = warp & 3, th = warp >> 2;
    const int gr = lane >> 2, gc = lane & 3;
    /* QK partial: 16 MT rows x 32 tokens over channels [144cg, 144cg+144) */
    float s[MT][4][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < 4; n++)
            s[m][n][0] = s[m][n][1] = s[m][n][2] = s[m][n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < 9; kk++) {
        const int k0 = (cg * 9 + kk) * 16;
        uint32_t qa[MT][4];
#pragma unroll
        for (int m = 0; m < MT; m++)
            ldsm_a(qa[m], sm.q + m * DEC_ROWS * KSTR, KSTR, k0, lane);
#pragma unroll
        for (int np = 0; np < 2; np++) {
            uint32_t bk[4];
            ldsm_bk(bk, tile, th * 32 + np * 16, k0, lane);
#pragma unroll
            for (int m = 0; m < MT; m++) { /* one fragment, MT row tiles */
                mma16816(s[m][2 * np], qa[m], bk[0], bk[1]);
                mma16816(s[m][2 * np + 1], qa[m], bk[2], bk[3]);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < 4; n++) {
            const int tok = th * 32 + n * 8 + 2 * gc;
            *(float2 *)&sm.sp[cg][m * DEC_ROWS + gr][tok] = make_float2(s[m][n][0], s[m][n][1]);
            *(float2 *)&sm.sp[cg][m * DEC_ROWS + gr + 8][tok] =
                make_float2(s[m][n][2], s[m][n][3]);
        }
    __syncthreads();
    /* softmax: 16 threads per row, row tile by row tile (fixed order) */
#pragma unroll
    for (int m = 0; m < MT; m++) {
        const int row = m * DEC_ROWS + (tid >> 4), part = tid & 15;
        float z[4], p[4], acc[4];
        sum_quarters(&sm.sp[0][row][part * 4], &sm.sp[1][0][0] - &sm.sp[0][0][0], acc);
#pragma unroll
        for (int u = 0; u < 4; u++)
            z[u] = t0 + part * 4 + u < vis[m] ? acc[u] * a.scale_log2 : -INFINITY;
        softmax_step(z, part, &sm.m[row], &sm.l[row], &sm.alpha[row], p);
        *(uint2 *)(sm.p + row * PSTR + part * 4) = make_uint2(bf16x2(p[0], p[1]), bf16x2(p[2], p[3]));
    }
    __syncthreads();
    /* PV: 16 MT rows x channels [64w, 64w+64) */
#pragma unroll
    for (int m = 0; m < MT; m++) {
        const float a0 = sm.alpha[m * DEC_ROWS + gr], a1 = sm.alpha[m * DEC_ROWS + gr + 8];
#pragma unroll
        for (int n = 0; n < 8; n++) {
            st.o[m][n][0] *= a0;
            st.o[m][n][1] *= a0;
            st.o[m][n][2] *= a1;
            st.o[m][n][3] *= a1;
        }
    }
#pragma unroll
    for (int ks = 0; ks < 4; ks++) {
        uint32_t pa[MT][4];
#pragma unroll
        for (int m = 0; m < MT; m++)
            ldsm_a(pa[m], sm.p + m * DEC_ROWS * PSTR, PSTR, ks * 16, lane);
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t bv[4];
            ldsm_bv(bv, tile, ks * 16, warp * 64 + np * 16, lane);
#pragma unroll
            for (int m = 0; m < MT; m++) {
                mma16816(st.o[m][2 * np], pa[m], bv[0], bv[1]);
                mma16816(st.o[m][2 * np + 1], pa[m], bv[2], bv[3]);
            }
        }
    }
}

template <int CB, int RB, int MT>
__global__ void __launch_bounds__(DEC_THREADS, 1) decode_mr_kernel(dec_args a)
{
    constexpr int NBUF = CB == 16 ? 2 : 1, ROWS = MT * DEC_ROWS;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    dec_smem_mr<MT, NBUF> &sm = *(dec_smem_mr<MT, NBUF> *)smem_raw;
    const int split = blockIdx.x, r0 = blockIdx.y * ROWS, b = blockIdx.z, tid = threadIdx.x;
    const long len = a.seq_len[b];
    const int npages = (int)((len + QMLA_KV_PAGE - 1) / QMLA_KV_PAGE);
    const int p0 = split * a.pps, p1 = min(npages, p0 + a.pps);
    const int32_t *bt = a.block_table + (size_t)b * a.max_pages;
    /* queries (zero rows past R), accumulators, softmax state */
    for (int i = tid; i < ROWS * 72; i += DEC_THREADS) {
        const int r = i / 72, k = i - r * 72;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r0 + r < a.R)
            v = __ldg((const uint4 *)(a.q + ((size_t)b * a.R + r0 + r) * QMLA_KV_D) + k);
        *(uint4 *)(sm.q + r * KSTR + k * 8) = v;
    }
    dec_state_mr<MT> st;
    long vis[MT];
#pragma unroll
    for (int m = 0; m < MT; m++) {
#pragma unroll
        for (int n = 0; n < 8; n++)
            st.o[m][n][0] = st.o[m][n][1] = st.o[m][n][2] = st.o[m][n][3] = 0.0f;
        vis[m] = row_vis(a, r0 + m * DEC_ROWS, len, tid);
    }
    if (tid < ROWS) {
        sm.m[tid] = -INFINITY;
        sm.l[tid] = 0.0f;
    }
    if constexpr (CB == 16) {
        if (p0 < p1) {
            async_page_bf16(sm.tile[0], a.pool + (size_t)bt[p0] * a.L.page_bytes,
                            (long)p0 * QMLA_KV_PAGE, len, tid);
            cp_async_commit();
        }
        /* one barrier per page here (decode_bf16_kernel has two): page p is
         * the only copy in flight when it is waited for, and the barrier
         * after the wait also marks the end of page p - 1's reads, so the
         * copy of page p + 1 into that buffer is issued after it */
        for (int p = p0; p < p1; p++) {
            cp_async_wait<0>();
            __syncthreads(); /* page p visible; page p - 1's buffer no longer read */
            if (p + 1 < p1) {
                async_page_bf16(sm.tile[(p + 1 - p0) & 1],
                                a.pool + (size_t)bt[p + 1] * a.L.page_bytes,
                                (long)(p + 1) * QMLA_KV_PAGE, len, tid);
                cp_async_commit();
            }
            attend_page_mr<MT>(st, sm, sm.tile[(p - p0) & 1], a, (long)p * QMLA_KV_PAGE, vis,
                               tid);
        }
    } else {
        prefetch<CB, RB> f;
        if (p0 < p1)
            load_page<CB, RB>(f, a.pool + (size_t)bt[p0] * a.L.page_bytes, a.L, tid);
        for (int p = p0; p < p1; p++) {
            __syncthreads(); /* the tile's previous readers are done */
            store_page<CB, RB>(f, sm.tile[0], a, b, (long)p * QMLA_KV_PAGE, len, tid);
            __syncthreads();
            if (p + 1 < p1)
                load_page<CB, RB>(f, a.pool + (size_t)bt[p + 1] * a.L.page_bytes, a.L, tid);
            attend_page_mr<MT>(st, sm, sm.tile[0], a, (long)p * QMLA_KV_PAGE, vis, tid);
        }
    }
    /* normalised partials and natural-log LSEs of the row tiles below R_pad */
    __syncthreads();
    const int warp = tid >> 5, lane = tid & 31, gr = lane >> 2, gc = lane & 3;
    const size_t base = ((size_t)b * a.n_splits + split) * a.R_pad + r0;
#pragma unroll
    for (int m = 0; m < MT; m++) {
        if (r0 + m * DEC_ROWS >= a.R_pad)
            break; /* the same for the whole block */
        const int ra = m * DEC_ROWS + gr, rb = ra + 8;
        const float la = sm.l[ra], lb = sm.l[rb];
        const float ia = la > 0.0f ? 1.0f / la : 0.0f, ib = lb > 0.0f ? 1.0f / lb : 0.0f;
#pragma unroll
        for (int n = 0; n < 8; n++) {
            const int ch = warp * 64 + n * 8 + 2 * gc;
            *(float2 *)(a.o_part + (base + ra) * QMLA_KV_DC + ch) =
                make_float2(st.o[m][n][0] * ia, st.o[m][n][1] * ia);
            *(float2 *)(a.o_part + (base + rb) * QMLA_KV_DC + ch) =
                make_float2(st.o[m][n][2] * ib, st.o[m][n][3] * ib);
        }
    }
    if (tid < ROWS && r0 + tid < a.R_pad) {
        const float l = sm.l[tid];
        a.lse_part[base + tid] = l > 0.0f ? (sm.m[tid] + log2f(l)) * LN2 : -INFINITY;
    }
}

/* Reconstruction check: page blockIdx.x of sequence blockIdx.y through the
 * decode kernel's own load_page / store_page, rows copied to
 * out [b][max_pages * 64][576] (zero past the sequence). */
template <int CB, int RB>
__global__ void __launch_bounds__(DEC_THREADS) gather_kernel(dec_args a, uint16_t *out)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __nv_bfloat16 *tile = (__nv_bfloat16 *)smem_raw;
    const int p = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
    const long len = a.seq_len[b];
    uint16_t *dst = out + ((size_t)b * a.max_pages + p) * QMLA_KV_PAGE * QMLA_KV_D;
    if ((long)p * QMLA_KV_PAGE >= len) {
        for (int i = tid; i < QMLA_KV_PAGE * QMLA_KV_D / 8; i += DEC_THREADS)
            ((uint4 *)dst)[i] = make_uint4(0, 0, 0, 0);
        return;
    }
    prefetch<CB, RB> f;
    load_page<CB, RB>(f, a.pool + (size_t)a.block_table[(size_t)b * a.max_pages + p] *
                             a.L.page_bytes, a.L, tid);
    store_page<CB, RB>(f, tile, a, b, (long)p * QMLA_KV_PAGE, len, tid);
    __syncthreads();
    for (int i = tid; i < QMLA_KV_PAGE * 72; i += DEC_THREADS) {
        const int tt = i / 72, k = i - tt * 72;
        ((uint4 *)dst)[i] = *(const uint4 *)(tile + tt * KSTR + k * 8);
    }
}

/* Combine: one block of 128 threads per (row, sequence), 4 channels each.
 * The partials' LSEs are read in parallel (max by shuffles), their weights
 * exp(lse - max) kept in shared memory, then every thread sums the weights
 * and its channels' partials in split order (deterministic); the partial
 * loads are independent (unrolled by 4) and empty partials are skipped. */
#define COMB_MAX_SPLITS 1024
__global__ void __launch_bounds__(128) decode_combine_kernel(const float *o_part,
                                                            const float *lse_part, int n_splits,
                                                            int R, int R_pad, uint16_t *out,
                                                            float *lse)
{
    __shared__ float wsh[COMB_MAX_SPLITS];
    __shared__ float red[4];
    const int r = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
    const float *lp = lse_part + (size_t)b * n_splits * R_pad + r;
    float mx = -INFINITY;
    for (int s = tid; s < n_splits; s += 128)
        mx = fmaxf(mx, lp[(size_t)s * R_pad]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if ((tid & 31) == 0)
        red[tid >> 5] = mx;
    __syncthreads();
    mx = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
    for (int s = tid; s < n_splits; s += 128) {
        const float ls = lp[(size_t)s * R_pad];
        wsh[s] = mx == -INFINITY || ls == -INFINITY ? 0.0f : expf(ls - mx);
    }
    __syncthreads();
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sum = 0.0f;
    const float4 *op = (const float4 *)(o_part + ((size_t)b * n_splits * R_pad + r) * QMLA_KV_DC) + tid;
    const size_t stride = (size_t)R_pad * QMLA_KV_DC / 4; /* float4s between splits */
#pragma unroll 4
    for (int s = 0; s < n_splits; s++) {
        const float w = wsh[s];
        if (w != 0.0f) {
            const float4 v = op[(size_t)s * stride];
            sum += w;
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

/* Combine of variants 1-3: the same weights, the sum over splits spread
 * over 16 warps (warp k takes the splits k, k + 16, ..; each lane 16
 * channels, 4 float4 per split, 2 splits in flight), the 16 partial sums
 * then added in warp order in shared memory: fixed order, bit-identical
 * across runs. The one-warp-per-channel-slice combine above walks all
 * splits serially (a memory round trip per 4 splits), which at short
 * contexts with 259 partials costs more than the main kernel (H200 run
 * 29, b 1, 32K). 512 threads per (row, sequence). */
#define COMB2_THREADS 512
#define COMB2_WARPS (COMB2_THREADS / 32)
__global__ void __launch_bounds__(COMB2_THREADS) decode_combine2_kernel(
    const float *o_part, const float *lse_part, int n_splits, int R, int R_pad, uint16_t *out,
    float *lse)
{
    __shared__ float wsh[COMB_MAX_SPLITS];
    __shared__ __align__(16) float part[COMB2_WARPS][QMLA_KV_DC];
    __shared__ float psum[COMB2_WARPS];
    __shared__ float red[COMB2_WARPS];
    const int r = blockIdx.x, b = blockIdx.y, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const float *lp = lse_part + (size_t)b * n_splits * R_pad + r;
    float mx = -INFINITY;
    for (int s = tid; s < n_splits; s += COMB2_THREADS)
        mx = fmaxf(mx, lp[(size_t)s * R_pad]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if (lane == 0)
        red[warp] = mx;
    __syncthreads();
    mx = red[0];
#pragma unroll
    for (int w = 1; w < COMB2_WARPS; w++)
        mx = fmaxf(mx, red[w]);
    for (int s = tid; s < n_splits; s += COMB2_THREADS) {
        const float ls = lp[(size_t)s * R_pad];
        wsh[s] = mx == -INFINITY || ls == -INFINITY ? 0.0f : expf(ls - mx);
    }
    __syncthreads();
    float acc[16], sum = 0.0f;
#pragma unroll
    for (int k = 0; k < 16; k++)
        acc[k] = 0.0f;
    const float4 *op = (const float4 *)(o_part + ((size_t)b * n_splits * R_pad + r) * QMLA_KV_DC) + lane;
    const size_t stride = (size_t)R_pad * QMLA_KV_DC / 4; /* float4s between splits */
#pragma unroll 2
    for (int s = warp; s < n_splits; s += COMB2_WARPS) {
        const float w = wsh[s];
        if (w != 0.0f) {
            float4 v[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                v[j] = op[(size_t)s * stride + 32 * j];
            sum += w;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                acc[4 * j] += w * v[j].x;
                acc[4 * j + 1] += w * v[j].y;
                acc[4 * j + 2] += w * v[j].z;
                acc[4 * j + 3] += w * v[j].w;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < 4; j++)
        *(float4 *)&part[warp][4 * (lane + 32 * j)] =
            make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
    if (lane == 0)
        psum[warp] = sum;
    __syncthreads();
    if (tid < QMLA_KV_DC / 4) { /* 4 channels per thread, warps added in order */
        float4 t = *(const float4 *)&part[0][4 * tid];
        float ts = psum[0];
#pragma unroll
        for (int w = 1; w < COMB2_WARPS; w++) {
            const float4 u = *(const float4 *)&part[w][4 * tid];
            t.x += u.x;
            t.y += u.y;
            t.z += u.z;
            t.w += u.w;
            ts += psum[w];
        }
        const float inv = ts > 0.0f ? 1.0f / ts : 0.0f;
        __nv_bfloat162 h0 = __floats2bfloat162_rn(t.x * inv, t.y * inv);
        __nv_bfloat162 h1 = __floats2bfloat162_rn(t.z * inv, t.w * inv);
        uint2 v;
        v.x = *(uint32_t *)&h0;
        v.y = *(uint32_t *)&h1;
        *((uint2 *)(out + ((size_t)b * R + r) * QMLA_KV_DC) + tid) = v;
        if (tid == 0)
            lse[(size_t)b * R + r] = mx == -INFINITY ? -INFINITY : mx + logf(ts);
    }
}

/* Combine of variant 7 (the default plan of C4R4 / C2R4): combine2's
 * weights and warp layout (16 warps share the splits of a row), but the
 * 512 channels of a row split over NCH = 4 / NF blocks (grid R x batch x
 * NCH), each lane NF float4 of its block's 128 NF channels per split, and
 * 8 / NF splits per warp loaded before they are added (the same bytes in
 * flight per lane at every NF). At small batch shapes (R x batch below
 * two blocks per SM) combine2 runs R x batch blocks, each reading all
 * partials of a row: at b 1, H 16 that is 16 blocks on 132 SMs, and with
 * the 258 partials of b 1, 32K the reads of 16 SMs set its time. Every
 * block recomputes the row's weights from the partial LSEs (n_splits
 * floats); block z == 0 writes the LSE. Fixed order (warp k: splits k,
 * k + 16, ..; then the 16 warps in order): bit-identical across runs. */
template <int NF>
__global__ void __launch_bounds__(COMB2_THREADS) decode_combine3_kernel(
    const float *o_part, const float *lse_part, int n_splits, int R, int R_pad, uint16_t *out,
    float *lse)
{
    constexpr int CH = 128 * NF; /* channels per block */
    constexpr int UN = 8 / NF;   /* splits in flight per warp */
    __shared__ float wsh[COMB_MAX_SPLITS];
    __shared__ __align__(16) float part[COMB2_WARPS][CH];
    __shared__ float psum[COMB2_WARPS];
    __shared__ float red[COMB2_WARPS];
    const int r = blockIdx.x, b = blockIdx.y, z = blockIdx.z, tid = threadIdx.x,
              warp = tid >> 5, lane = tid & 31;
    const float *lp = lse_part + (size_t)b * n_splits * R_pad + r;
    float mx = -INFINITY;
    for (int s = tid; s < n_splits; s += COMB2_THREADS)
        mx = fmaxf(mx, lp[(size_t)s * R_pad]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if (lane == 0)
        red[warp] = mx;
    __syncthreads();
    mx = red[0];
#pragma unroll
    for (int w = 1; w < COMB2_WARPS; w++)
        mx = fmaxf(mx, red[w]);
    for (int s = tid; s < n_splits; s += COMB2_THREADS) {
        const float ls = lp[(size_t)s * R_pad];
        wsh[s] = mx == -INFINITY || ls == -INFINITY ? 0.0f : expf(ls - mx);
    }
    __syncthreads();
    float acc[4 * NF], sum = 0.0f;
#pragma unroll
    for (int k = 0; k < 4 * NF; k++)
        acc[k] = 0.0f;
    const float4 *op =
        (const float4 *)(o_part + ((size_t)b * n_splits * R_pad + r) * QMLA_KV_DC + CH * z) + lane;
    const size_t stride = (size_t)R_pad * QMLA_KV_DC / 4; /* float4s between splits */
    for (int s0 = warp; s0 < n_splits; s0 += COMB2_WARPS * UN) {
        float4 v[UN][NF];
        float w[UN];
#pragma unroll
        for (int u = 0; u < UN; u++) {
            const int s = s0 + COMB2_WARPS * u;
            w[u] = s < n_splits ? wsh[s] : 0.0f;
#pragma unroll
            for (int j = 0; j < NF; j++)
                v[u][j] = w[u] != 0.0f ? op[(size_t)s * stride + 32 * j]
                                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < UN; u++)
            if (w[u] != 0.0f) {
                sum += w[u];
#pragma unroll
                for (int j = 0; j < NF; j++) {
                    acc[4 * j] += w[u] * v[u][j].x;
                    acc[4 * j + 1] += w[u] * v[u][j].y;
                    acc[4 * j + 2] += w[u] * v[u][j].z;
                    acc[4 * j + 3] += w[u] * v[u][j].w;
                }
            }
    }
#pragma unroll
    for (int j = 0; j < NF; j++)
        *(float4 *)&part[warp][4 * (lane + 32 * j)] =
            make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
    if (lane == 0)
        psum[warp] = sum;
    __syncthreads();
    if (tid < CH / 4) { /* 4 channels per thread, warps added in order */
        float4 t = *(const float4 *)&part[0][4 * tid];
        float ts = psum[0];
#pragma unroll
        for (int w = 1; w < COMB2_WARPS; w++) {
            const float4 u = *(const float4 *)&part[w][4 * tid];
            t.x += u.x;
            t.y += u.y;
            t.z += u.z;
            t.w += u.w;
            ts += psum[w];
        }
        const float inv = ts > 0.0f ? 1.0f / ts : 0.0f;
        __nv_bfloat162 h0 = __floats2bfloat162_rn(t.x * inv, t.y * inv);
        __nv_bfloat162 h1 = __floats2bfloat162_rn(t.z * inv, t.w * inv);
        uint2 o2;
        o2.x = *(uint32_t *)&h0;
        o2.y = *(uint32_t *)&h1;
        *((uint2 *)(out + ((size_t)b * R + r) * QMLA_KV_DC + CH * z) + tid) = o2;
        if (tid == 0 && z == 0)
            lse[(size_t)b * R + r] = mx == -INFINITY ? -INFINITY : mx + logf(ts);
    }
}

/* ---- host side ----------------------------------------------------------- */
/* 1 for the configurations decode_fast_kernel takes (C4R4, C2R4, group 64). */
/* ---- variant 8: wgmma on the codes (H200 run 11, C4R4) -------------------
 * decode_wg_kernel: one warpgroup (128 threads) per block and row tile, two
 * blocks per SM. The page's tokens are the M dimension of Hopper's
 * wgmma.m64n16k16 (64 tokens = one m64 tile), the 16 query rows of the
 * tile its N; the A operand (the codes) comes from registers, the B
 * operand (queries, probabilities) from shared memory through matrix
 * descriptors, so the register file carries no B fragments.
 *   QK (BF16): A = the 4-bit codes of a group as BF16 values of the
 *   smallest binade (c 2^(p - 133), one LOP3 per two codes: nib_codes,
 *   the trick of decode_fast_kernel), B = Q^T of the group, each row n
 *   times 2^(E_n - p) (fast_qscale's exponents), built once per block in
 *   the k order of the A fragments; each of the 9 groups (8 content, 1
 *   RoPE) accumulates into its own accumulator, and the group's scale s is
 *   applied per token after the product (T += s acc), two groups in flight
 *   (wgmma.wait_group 1). The minimum's term l sum(Q) is one more
 *   wgmma (float16: A = l of the token's 8 content groups, exact; B =
 *   sum(Q) 2^(E - 133) as float16 high and low part), the RoPE group's
 *   by an FMA.
 *   softmax: online, per column of the accumulators (the thread's 4 query
 *   rows), maxima and sums over the warpgroup through shared memory; P as
 *   float16 into shared memory (the B of PV, K-major core matrices).
 *   PV (float16): the output dims are M (one m64 tile per group: 8 tiles,
 *   64 accumulators per thread), the tokens K: A = the codes of two tokens
 *   (k, k + 1) of one dim, fetched by ldmatrix.trans (a 16-byte code chunk
 *   of 8 tokens: each lane receives 4 dims of two tokens; a warp uses dims
 *   4j, 4j + 1 directly and 4j + 2, 4j + 3 after a shift by 8, one LOP3
 *   per register), float16 subnormals c 2^(p - 24); B = P s of the group
 *   (mul.f16x2, one matrix per group, s zero outside the packed tokens),
 *   the minimum's term sum_t P l by one more wgmma (A = l of the token per
 *   group row, warp 0; B = P). Outputs times 2^(24 - p).
 * Pages by cp.async into a ring of 3 stages (two pages ahead), content
 * chunks swizzled (v8_sig) so that the QK rows and the ldmatrix rows hit
 * distinct banks. The protected tokens (sink and window) are the partials
 * n_splits - n_prot .. of decode_prot_kernel (prot_part, the BF16 tile
 * path, launched before this kernel); the combine as variant 7. Attends to
 * unrounded packed values for QK and to float16(P s) q + P l for PV, like
 * decode_fast_kernel's BF16(P s): reference qmla_decode_ref_model with
 * packed_f32 = 1. Built for sm_90a only (wgmma). H200 run 11 (docs/decode.md):
 * correct (test_decode_cuda, full-size sanitizers), but 1.20-2.16x variant
 * 7's time in run 11b: 8 warps per SM with 0.40 eligible per scheduler,
 * 6316 warp instructions per page, shared accesses 59 % excess wavefronts
 * (the P s pass's stores 8-way conflicting); its rows skewed per lane,
 * 1.005-2.04x (run 11c). */
/* 1 when this build's device code is sm_90a's (meson: gpu_arch 90a, the
 * default), so decode_wg_kernel has its wgmma instructions; else variant 8
 * falls back to variant 0 (its kernel would trap). */
#ifndef QMLA_DECODE_WGMMA
#define QMLA_DECODE_WGMMA 0
#endif
#define V8_THREADS 128
#define V8_NST 3
struct dec_smem_wg {
    uint8_t stage[V8_NST][fcfg<4>::PB]; /* pages, content chunks swizzled */
    uint16_t bq[36][256];               /* B of QK: Q^T, [k-step][core matrices] */
    uint16_t bsum[256];                 /* B of the l sum(Q) term (float16) */
    uint16_t bp[4][256];                /* B: P (float16) */
    uint16_t bg[8][4][256];             /* B: P s per group (float16) */
    float red[2][4][DEC_ROWS];          /* [max, sum][warp][row] */
    float sqr[DEC_ROWS], zs[DEC_ROWS];  /* RoPE sum(Q) 2^(E - 133); softmax scale 2^(133 - E) */
    float bias[8][DEC_ROWS];            /* sum_t P l per group (epilogue) */
};

/* Element offset of (k, n) in a 16 x 16 B tile of K-major core matrices
 * (8 x 8, 128 bytes each): k halves 128 bytes apart (LBO), n halves 256
 * (SBO). */
__device__ static inline int wg_boff(int k, int n)
{
    return (n >> 3) * 128 + (k >> 3) * 64 + (n & 7) * 8 + (k & 7);
}
/* Shared-memory matrix descriptor (no swizzle, LBO 128, SBO 256 bytes). */
__device__ static inline uint64_t wg_desc(const void *p)
{
    return (uint64_t)((smem_addr(p) & 0x3ffffu) >> 4) | ((uint64_t)(128 >> 4) << 16) |
           ((uint64_t)(256 >> 4) << 32);
}
/* Chunk swizzle of token t's content row: distinct for the 8 tokens of a
 * QK warp row set (t .. t + 7, pairs t, t + 4 two wavefronts anyway) and of
 * an ldmatrix matrix (t, t + 8, t + 1, t + 9, ..). */
__device__ static inline int v8_sig(int t) { return 2 * (t & 3) + ((t >> 3) & 1); }

/* The wgmma instructions exist on sm_90a only: elsewhere (gpu_arch 90, or
 * another architecture) they are left out, so the file still compiles
 * (review11: ptxas refused wgmma.fence on sm_90), and variant 8 is not
 * planned (QMLA_DECODE_WGMMA 0: eff_variant falls back to variant 0). */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ static inline void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ static inline void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ static inline void wg_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
#else
__device__ static inline void wg_fence() {}
__device__ static inline void wg_commit() {}
template <int N> __device__ static inline void wg_wait() {}
#endif
__device__ static inline void fence_async_smem()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* D (64 x 16, f32) += A (registers) B (descriptor); acc 0: D = A B. */
template <bool F16>
__device__ static inline void wg_mma(float d[8], uint32_t a0, uint32_t a1, uint32_t a2,
                                     uint32_t a3, uint64_t desc, int acc)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if constexpr (F16)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                       "+f"(d[6]), "+f"(d[7])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(acc));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                       "+f"(d[6]), "+f"(d[7])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(acc));
#else
    (void)d; (void)a0; (void)a1; (void)a2; (void)a3; (void)desc; (void)acc;
    __trap(); /* variant 8 needs sm_90a (gpu_arch 90a) */
#endif
}
__device__ static inline uint32_t hmul2_bits(uint32_t x, uint32_t y)
{
    uint32_t r;
    asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(x), "r"(y));
    return r;
}
__device__ static inline uint32_t half2_bits(float lo, float hi)
{
    return (uint32_t)__half_as_ushort(__float2half_rn(lo)) |
           ((uint32_t)__half_as_ushort(__float2half_rn(hi)) << 16);
}
__device__ static inline float f16lo(uint32_t u)
{
    return __half2float(__ushort_as_half((unsigned short)(u & 0xffffu)));
}
__device__ static inline float f16hi(uint32_t u)
{
    return __half2float(__ushort_as_half((unsigned short)(u >> 16)));
}

/* Copy a page into a stage (128 threads): content chunk k of token t at
 * chunk k ^ v8_sig(t) of its row, the rest as it is. */
__device__ static inline void wg_issue(uint8_t *dst, const uint8_t *src, int tid)
{
    typedef fcfg<4> F;
    constexpr int NALL = F::PB / 16, NC = QMLA_KV_PAGE * F::CPR;
#pragma unroll
    for (int i = 0; i < (NALL + V8_THREADS - 1) / V8_THREADS; i++) {
        const int c = tid + V8_THREADS * i;
        if (c < NC) {
            const int t = c >> 4, k = c & 15;
            cp_async16(dst + t * F::CBC + 16 * (k ^ v8_sig(t)), src + 16 * c, 16);
        } else if (c < NALL) {
            cp_async16(dst + 16 * c, src + 16 * c, 16);
        }
    }
}

/* Q^T of the tile's rows into sm.bq in the k order of the QK A fragments
 * (register r = 4 (j >> 3) + (j & 3) of lane quarter c >> 4 holds channel
 * c of a group, j = c & 15, half (j >> 2) & 1: k-step r >> 1, k 8 (r & 1)
 * + 2 (c >> 4) + half, code position p = 4 (r & 1)), each value times
 * 2^(E_n - p); the float16 B of the l sum(Q) term; RoPE sums, softmax
 * scales. 8 threads per row: thread j the content group j and RoPE
 * channels 8j .. 8j + 7. */
__device__ static void wg_setup(dec_smem_wg &sm, const dec_args &a, int b, int r0, int tid)
{
    const int n = tid >> 3, j = tid & 7, r = r0 + n;
    const bool live = r < a.R;
    const uint16_t *q = a.q + ((size_t)b * a.R + (live ? r : 0)) * QMLA_KV_D;
    uint32_t cw[32], rw[4];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const uint4 u = live ? __ldg((const uint4 *)(q + 64 * j) + i) : make_uint4(0, 0, 0, 0);
        cw[4 * i] = u.x;
        cw[4 * i + 1] = u.y;
        cw[4 * i + 2] = u.z;
        cw[4 * i + 3] = u.w;
    }
    {
        const uint4 u = live ? __ldg((const uint4 *)(q + QMLA_KV_DC + 8 * j)) : make_uint4(0, 0, 0, 0);
        rw[0] = u.x;
        rw[1] = u.y;
        rw[2] = u.z;
        rw[3] = u.w;
    }
    float s1 = 0.0f, s2 = 0.0f;
    uint32_t em = 0;
#pragma unroll
    for (int i = 0; i < 32; i++) {
        s1 += __uint_as_float(cw[i] << 16) + __uint_as_float(cw[i] & 0xffff0000u);
        em = __vmaxu2(em, cw[i] & 0x7f807f80u);
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        s2 += __uint_as_float(rw[i] << 16) + __uint_as_float(rw[i] & 0xffff0000u);
        em = __vmaxu2(em, rw[i] & 0x7f807f80u);
    }
    int e = (int)(max(em & 0xffffu, em >> 16) >> 7);
#pragma unroll
    for (int off = 1; off < 8; off <<= 1) {
        e = max(e, __shfl_xor_sync(0xffffffffu, e, off));
        s2 += __shfl_xor_sync(0xffffffffu, s2, off);
    }
    const int E = subn_rowexp(e);
    /* channel c of a group at (k-step, k, p) */
#pragma unroll 4
    for (int c = 0; c < 64; c++) {
        const int qc = c >> 4, jj = c & 15, rr = 4 * (jj >> 3) + (jj & 3);
        const int ks = rr >> 1, k = 8 * (rr & 1) + 2 * qc + ((jj >> 2) & 1), p = 4 * (rr & 1);
        const int sh = E - p, sa = sh >> 1;
        const float x = __uint_as_float(((cw[c >> 1] >> (16 * (c & 1))) & 0xffffu) << 16);
        const float y = __fmul_rn(__fmul_rn(x, pow2f(sa)), pow2f(sh - sa));
        sm.bq[4 * j + ks][wg_boff(k, n)] = (uint16_t)(__float_as_uint(y) >> 16);
        if (c >> 3 == j) { /* this thread's RoPE channels 8j .. 8j + 7 */
            const float xr = __uint_as_float(((rw[(c & 7) >> 1] >> (16 * (c & 1))) & 0xffffu) << 16);
            const float yr = __fmul_rn(__fmul_rn(xr, pow2f(sa)), pow2f(sh - sa));
            sm.bq[32 + ks][wg_boff(k, n)] = (uint16_t)(__float_as_uint(yr) >> 16);
        }
    }
    const float xs = __fmul_rn(s1, pow2f(E - 133));
    const __half h = __float2half_rn(xs);
    const __half l = __float2half_rn(xs - __half2float(h));
    sm.bsum[wg_boff(2 * j, n)] = __half_as_ushort(h);
    sm.bsum[wg_boff(2 * j + 1, n)] = __half_as_ushort(l);
    if (j == 0) {
        sm.sqr[n] = __fmul_rn(s2, pow2f(E - 133));
        sm.zs[n] = a.scale_log2 * pow2f(133 - E);
    }
}

__global__ void __launch_bounds__(V8_THREADS, 2) decode_wg_kernel(dec_args a)
{
    typedef fcfg<4> F;
    extern __shared__ __align__(128) unsigned char smem_wg_raw[] /* its own name: the 128-byte alignment would conflict with the other kernels' 16 (nvcc warning 1886) */;
    dec_smem_wg &sm = *(dec_smem_wg *)smem_wg_raw;
    const int b = blockIdx.z, r0 = blockIdx.y * DEC_ROWS, split = blockIdx.x, tid = threadIdx.x;
    const int w = tid >> 5, lane = tid & 31, gr = lane >> 2, gc = lane & 3;
    const int len = a.seq_len[b], lenW = len - a.W;
    int p0, p1;
    packed_pages(a, lenW, split, &p0, &p1);
    const int np = p1 - p0;
    const int32_t *bt = a.block_table + (size_t)b * a.max_pages;
    if (np > 0)
        wg_issue(sm.stage[0], a.pool + (size_t)bt[p0] * F::PB, tid);
    cp_async_commit();
    if (np > 1)
        wg_issue(sm.stage[1], a.pool + (size_t)bt[p0 + 1] * F::PB, tid);
    cp_async_commit();
    wg_setup(sm, a, b, r0, tid);
    fence_async_smem();
    __syncthreads();
    /* the thread's accumulator columns c = 0..3: rows n = 8 (c >> 1) + 2 gc
     * + (c & 1); D element i is column ((i >> 2) << 1) | (i & 1), token row
     * tA (i & 2 == 0) or tB */
    int ncol[4], shi[4];
    float zsc[4], sqc[4], mrow[4], lrow[4];
#pragma unroll
    for (int c = 0; c < 4; c++) {
        const int n = 8 * (c >> 1) + 2 * gc + (c & 1), r = r0 + n;
        ncol[c] = n;
        int v = 0;
        if (r < a.R) {
            v = len - a.s_q + r / a.H + 1;
            v = v < lenW ? v : lenW;
        }
        shi[c] = v;
        zsc[c] = sm.zs[n];
        sqc[c] = sm.sqr[n];
        mrow[c] = -INFINITY;
        lrow[c] = 0.0f;
    }
    float o[8][8], bacc[8];
#pragma unroll
    for (int g = 0; g < 8; g++)
#pragma unroll
        for (int i = 0; i < 8; i++)
            o[g][i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++)
        bacc[i] = 0.0f;
    const uint64_t dq = wg_desc(sm.bq), dsum = wg_desc(sm.bsum), dp = wg_desc(sm.bp),
                   dg = wg_desc(sm.bg);
    const int tA = 16 * w + gr, tB = tA + 8;
    /* ldmatrix rows of PV: lane's matrix mi = lane >> 3 (X, Y of k-step
     * 2 kp, X, Y of 2 kp + 1), row rho = lane & 7: token 16 ks + 4 (mi & 1)
     * + (rho >> 1) + 8 (rho & 1) */
    int ltok[2], lsig[2];
#pragma unroll
    for (int kp = 0; kp < 2; kp++) {
        const int mi = lane >> 3, rho = lane & 7;
        const int t = 16 * (2 * kp + (mi >> 1)) + 4 * (mi & 1) + (rho >> 1) + 8 * (rho & 1);
        ltok[kp] = t * F::CBC;
        lsig[kp] = v8_sig(t);
    }
    const int psh = (w >> 1) * 8, pch = w & 1; /* PV: dims 4j + 2 (w >> 1) (+1), chunk 2g + (w & 1) */
    const int sigA = v8_sig(tA), sigB = v8_sig(tB);
    float T[8], acc[2][8];
#pragma unroll
    for (int ii = 0; ii < 8; ii++)
        T[ii] = acc[0][ii] = acc[1][ii] = 0.0f;
    for (int i = 0; i < np; i++) {
        const uint8_t *pg = sm.stage[i % V8_NST];
        cp_async_wait<1>();
        __syncthreads(); /* page i landed; the stage of page i - 1 is free */
        if (i + 2 < np)
            wg_issue(sm.stage[(i + 2) % V8_NST], a.pool + (size_t)bt[p0 + i + 2] * F::PB, tid);
        cp_async_commit();
        const int t0 = (p0 + i) * QMLA_KV_PAGE;
        /* ---- QK ---- */
        const uint8_t *mc = pg + F::OFF_MC;
        /* A of the l sum(Q) term: l of groups gc (k 2gc, 2gc + 1) and gc + 4 */
        const uint32_t lt0 = __byte_perm(*(const uint32_t *)(mc + tA * 32 + 4 * gc), 0, 0x3232);
        const uint32_t lt1 = __byte_perm(*(const uint32_t *)(mc + tB * 32 + 4 * gc), 0, 0x3232);
        const uint32_t lt2 = __byte_perm(*(const uint32_t *)(mc + tA * 32 + 4 * gc + 16), 0, 0x3232);
        const uint32_t lt3 = __byte_perm(*(const uint32_t *)(mc + tB * 32 + 4 * gc + 16), 0, 0x3232);
        uint32_t A[2][16];
#define QMLA_V8_FOLD(G)                                                                          \
    do {                                                                                         \
        float sa, sb;                                                                            \
        if ((G) < 8) {                                                                           \
            sa = f16lo(*(const uint32_t *)(mc + tA * 32 + 4 * (G)));                             \
            sb = f16lo(*(const uint32_t *)(mc + tB * 32 + 4 * (G)));                             \
        } else {                                                                                 \
            const uint32_t ra = *(const uint32_t *)(pg + F::OFF_MR + tA * 4);                    \
            const uint32_t rb = *(const uint32_t *)(pg + F::OFF_MR + tB * 4);                    \
            sa = f16lo(ra);                                                                      \
            sb = f16lo(rb);                                                                      \
            const float la = f16hi(ra), lb = f16hi(rb);                                          \
            _Pragma("unroll") for (int ii = 0; ii < 8; ii++) T[ii] =                             \
                fmaf((ii & 2) ? lb : la, sqc[((ii >> 2) << 1) | (ii & 1)], T[ii]);               \
        }                                                                                        \
        _Pragma("unroll") for (int ii = 0; ii < 8; ii++) T[ii] =                                 \
            fmaf((ii & 2) ? sb : sa, acc[(G) & 1][ii], T[ii]);                                   \
    } while (0)
        /* group g + 1's codes are fetched and unpacked while group g's
         * MMAs run; then group g is folded (wait_group 0: with 1, and two
         * groups in flight, ptxas serialises every wgmma, C7514) */
#define QMLA_V8_CODES(G)                                                                         \
    do {                                                                                         \
        uint2 vA, vB;                                                                            \
        if ((G) < 8) {                                                                           \
            const int ch = 2 * (G) + (gc >> 1);                                                  \
            vA = *(const uint2 *)(pg + tA * F::CBC + 16 * (ch ^ sigA) + 8 * (gc & 1));           \
            vB = *(const uint2 *)(pg + tB * F::CBC + 16 * (ch ^ sigB) + 8 * (gc & 1));           \
        } else {                                                                                 \
            vA = *(const uint2 *)(pg + F::OFF_RC + tA * 32 + 8 * gc);                            \
            vB = *(const uint2 *)(pg + F::OFF_RC + tB * 32 + 8 * gc);                            \
        }                                                                                        \
        uint32_t ra[8], rb[8];                                                                   \
        nib_codes(vA.x, ra);                                                                     \
        nib_codes(vA.y, ra + 4);                                                                 \
        nib_codes(vB.x, rb);                                                                     \
        nib_codes(vB.y, rb + 4);                                                                 \
        _Pragma("unroll") for (int ks = 0; ks < 4; ks++) {                                       \
            A[(G) & 1][4 * ks] = ra[2 * ks];                                                     \
            A[(G) & 1][4 * ks + 1] = rb[2 * ks];                                                 \
            A[(G) & 1][4 * ks + 2] = ra[2 * ks + 1];                                             \
            A[(G) & 1][4 * ks + 3] = rb[2 * ks + 1];                                             \
        }                                                                                        \
    } while (0)
#define QMLA_V8_ISSUE(G)                                                                         \
    do {                                                                                         \
        _Pragma("unroll") for (int ks = 0; ks < 4; ks++)                                         \
            wg_mma<false>(acc[(G) & 1], A[(G) & 1][4 * ks], A[(G) & 1][4 * ks + 1],              \
                          A[(G) & 1][4 * ks + 2], A[(G) & 1][4 * ks + 3],                        \
                          dq + (uint64_t)((((G) < 8 ? 4 * (G) : 32) + ks) * 512 >> 4), ks > 0);  \
    } while (0)
        QMLA_V8_CODES(0);
        wg_fence();
        wg_mma<true>(T, lt0, lt1, lt2, lt3, dsum, 0);
        QMLA_V8_ISSUE(0);
        wg_commit();
#pragma unroll
        for (int g = 0; g < 9; g++) {
            if (g < 8)
                QMLA_V8_CODES(g + 1);
            wg_wait<0>();
            QMLA_V8_FOLD(g);
            if (g < 8) {
                wg_fence();
                QMLA_V8_ISSUE(g + 1);
                wg_commit();
            }
        }
#undef QMLA_V8_CODES
#undef QMLA_V8_ISSUE
#undef QMLA_V8_FOLD
        /* ---- softmax ---- */
        float z[8], mx[4], al[4], mu[4];
#pragma unroll
        for (int ii = 0; ii < 8; ii++) {
            const int c = ((ii >> 2) << 1) | (ii & 1), t = t0 + ((ii & 2) ? tB : tA);
            z[ii] = t >= a.S && t < shi[c] ? T[ii] * zsc[c] : -INFINITY;
        }
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const int i0 = ((c >> 1) << 2) | (c & 1);
            float x = fmaxf(z[i0], z[i0 + 2]);
            x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
            x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 8));
            x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 16));
            mx[c] = x;
        }
        if (gr == 0) {
#pragma unroll
            for (int c = 0; c < 4; c++)
                sm.red[0][w][ncol[c]] = mx[c];
        }
        __syncthreads(); /* the warps' maxima */
#pragma unroll
        for (int c = 0; c < 4; c++) {
            float x = mrow[c];
#pragma unroll
            for (int ww = 0; ww < 4; ww++)
                x = fmaxf(x, sm.red[0][ww][ncol[c]]);
            mu[c] = x == -INFINITY ? 0.0f : x;
            al[c] = ex2_ftz(mrow[c] - mu[c]);
            mrow[c] = x;
        }
        float pr[8];
#pragma unroll
        for (int ii = 0; ii < 8; ii++)
            pr[ii] = ex2_ftz(z[ii] - mu[((ii >> 2) << 1) | (ii & 1)]);
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const int i0 = ((c >> 1) << 2) | (c & 1);
            float x = pr[i0] + pr[i0 + 2];
            x += __shfl_xor_sync(0xffffffffu, x, 4);
            x += __shfl_xor_sync(0xffffffffu, x, 8);
            x += __shfl_xor_sync(0xffffffffu, x, 16);
            if (gr == 0)
                sm.red[1][w][ncol[c]] = x;
            /* P of tokens tA, tB (k 2 (8 w + gr), + 1 of k-step w) */
            *(uint32_t *)&sm.bp[w][wg_boff(2 * gr, ncol[c])] = half2_bits(pr[i0], pr[i0 + 2]);
        }
        if (__any_sync(0xffffffffu, al[0] != 1.0f || al[1] != 1.0f || al[2] != 1.0f ||
                                        al[3] != 1.0f)) {
#pragma unroll
            for (int ii = 0; ii < 8; ii++) {
                const float f = al[((ii >> 2) << 1) | (ii & 1)];
#pragma unroll
                for (int g = 0; g < 8; g++)
                    o[g][ii] *= f;
                bacc[ii] *= f;
            }
        }
        __syncthreads(); /* P and the sums */
#pragma unroll
        for (int c = 0; c < 4; c++) {
            float x = 0.0f;
#pragma unroll
            for (int ww = 0; ww < 4; ww++)
                x += sm.red[1][ww][ncol[c]];
            lrow[c] = lrow[c] * al[c] + x;
        }
        /* ---- P s per group (thread: group tid >> 4, k 4q .. 4q + 3) ---- */
        {
            const int g = tid >> 4, q = tid & 15, ks = q >> 2, k0 = 4 * (q & 3);
            const int tu = 16 * (q >> 2) + 2 * (q & 3);
            uint32_t mt[4];
            const int tk[4] = {tu, tu + 8, tu + 1, tu + 9};
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int t = t0 + tk[u];
                const uint32_t x = *(const uint32_t *)(mc + tk[u] * 32 + 4 * g);
                mt[u] = t >= a.S && t < lenW ? x : 0u;
            }
            const uint32_t s01 = __byte_perm(mt[0], mt[1], 0x5410);
            const uint32_t s23 = __byte_perm(mt[2], mt[3], 0x5410);
            /* rows in a per-lane order: the 16 lanes of a group then touch
             * 16 distinct 8-byte bank slots (run 11b: 8-way conflicts with
             * n the same in every lane) */
#pragma unroll 4
            for (int nn = 0; nn < DEC_ROWS; nn++) {
                const int n = (nn + q + (q >> 3)) & (DEC_ROWS - 1);
                const uint2 pv = *(const uint2 *)&sm.bp[ks][wg_boff(k0, n)];
                *(uint2 *)&sm.bg[g][ks][wg_boff(k0, n)] =
                    make_uint2(hmul2_bits(pv.x, s01), hmul2_bits(pv.y, s23));
            }
        }
        /* A of sum_t P l (warp 0: row g = gr, k pairs of tokens t, t + 8) */
        uint32_t ab[4][2];
#pragma unroll
        for (int ks = 0; ks < 4; ks++) {
            ab[ks][0] = ab[ks][1] = 0u;
            if (w == 0) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int t = 16 * ks + 4 * h + gc;
                    uint32_t x = *(const uint32_t *)(mc + t * 32 + 4 * gr);
                    uint32_t y = *(const uint32_t *)(mc + (t + 8) * 32 + 4 * gr);
                    x = t0 + t >= a.S && t0 + t < lenW ? x : 0u;
                    y = t0 + t + 8 >= a.S && t0 + t + 8 < lenW ? y : 0u;
                    ab[ks][h] = __byte_perm(x, y, 0x7632);
                }
            }
        }
        fence_async_smem();
        __syncthreads(); /* P s of every group */
        /* ---- PV ---- (per group: two ldmatrix.x4 for its 4 k-steps, 4
         * wgmma; at most two groups in flight, their A registers double
         * buffered: ptxas serialises every wgmma when the A registers of
         * all 32 cannot stay live) */
        uint32_t AP[2][16];
#define QMLA_V8_PVA(G)                                                                           \
    do {                                                                                         \
        const int ch = 2 * (G) + pch;                                                            \
        _Pragma("unroll") for (int kp = 0; kp < 2; kp++) {                                       \
            uint32_t x0, y0, x1, y1;                                                             \
            ldsm_x4_t(x0, y0, x1, y1, pg + ltok[kp] + 16 * (ch ^ lsig[kp]));                     \
            x0 >>= psh;                                                                          \
            y0 >>= psh;                                                                          \
            x1 >>= psh;                                                                          \
            y1 >>= psh;                                                                          \
            uint32_t *r = AP[(G) & 1] + 8 * kp;                                                  \
            r[0] = x0 & 0x000f000fu;                                                             \
            r[1] = x0 & 0x00f000f0u;                                                             \
            r[2] = y0 & 0x000f000fu;                                                             \
            r[3] = y0 & 0x00f000f0u;                                                             \
            r[4] = x1 & 0x000f000fu;                                                             \
            r[5] = x1 & 0x00f000f0u;                                                             \
            r[6] = y1 & 0x000f000fu;                                                             \
            r[7] = y1 & 0x00f000f0u;                                                             \
        }                                                                                        \
    } while (0)
        QMLA_V8_PVA(0);
#pragma unroll
        for (int g = 0; g < 8; g++) {
            wg_fence();
#pragma unroll
            for (int ks = 0; ks < 4; ks++)
                wg_mma<true>(o[g], AP[g & 1][4 * ks], AP[g & 1][4 * ks + 1], AP[g & 1][4 * ks + 2],
                             AP[g & 1][4 * ks + 3], dg + (uint64_t)((4 * g + ks) * 512 >> 4), 1);
            if (g == 7) {
#pragma unroll
                for (int ks = 0; ks < 4; ks++)
                    wg_mma<true>(bacc, ab[ks][0], 0u, ab[ks][1], 0u,
                                 dp + (uint64_t)(ks * 512 >> 4), 1);
            }
            wg_commit();
            if (g < 7) {
                wg_wait<1>(); /* group g - 1 done: its A buffer is free */
                QMLA_V8_PVA(g + 1);
            }
        }
        wg_wait<0>();
#undef QMLA_V8_PVA
    }
    wg_wait<0>();
    if (w == 0) {
        sm.bias[gr][2 * gc] = bacc[0];
        sm.bias[gr][2 * gc + 1] = bacc[1];
        sm.bias[gr][8 + 2 * gc] = bacc[4];
        sm.bias[gr][9 + 2 * gc] = bacc[5];
    }
    __syncthreads();
    const size_t base = ((size_t)b * a.n_splits + split) * a.R_pad + r0;
    const int dA = 32 * pch + 4 * gr + 2 * (w >> 1); /* M rows gr, gr + 8: dims dA, dA + 1 */
#pragma unroll
    for (int c = 0; c < 4; c++) {
        const int n = ncol[c], i0 = ((c >> 1) << 2) | (c & 1);
        const float inv = lrow[c] > 0.0f ? 1.0f / lrow[c] : 0.0f;
        float *dst = a.o_part + (base + n) * QMLA_KV_DC + dA;
#pragma unroll
        for (int g = 0; g < 8; g++) {
            const float bb = sm.bias[g][n];
            *(float2 *)(dst + 64 * g) = make_float2(fmaf(o[g][i0], 16777216.0f, bb) * inv,
                                                    fmaf(o[g][i0 + 2], 1048576.0f, bb) * inv);
        }
        if (w == 0 && gr == 0)
            a.lse_part[base + n] = lrow[c] > 0.0f ? (mrow[c] + log2f(lrow[c])) * LN2 : -INFINITY;
    }
}

/* ---- variants 9 and 10: C8R8 codes on the tensor cores -------------------
 * decode_fast_kernel's arithmetic (grid, QK and PV on the raw codes, step
 * and minimum per group after the products, the protected tokens as
 * partials of their own) for C8R8 G 64 (fcfg<8>), in place of the BF16-tile
 * kernel decode_quant_kernel<8, 8>. The codes become MMA operands as BF16
 * values of the smallest binade: a byte n < 256 at bits 0-7 of a 16-bit
 * half is the BF16 value n 2^-133 exactly (subnormal below 128, exponent
 * field 1 above), so all 8 bits of a code fit without an offset and
 * without float16: QK one PRMT with a zero word per two codes (bytes e,
 * e + 2 of a word: fast_lo<8>, subn_pos<8> = 0), PV one PRMT (the same
 * channel byte of two tokens) and one AND per register. The rest is
 * decode_fast_kernel's: queries times 2^E, softmax scale 2^(133 - E), the
 * l sum(Q) float16 MMA, BF16(P s 2^110) as A of PV, the l / s columns,
 * outputs times 2^23; so both attend to fmaf(q, s, l) unrounded (reference
 * qmla_decode_ref_model with packed_f32 = 1). Content rows swizzled by
 * fast_swz<8>: QK reads 16 bytes of token gr (chunk 4 g + gc), PV 8 bytes of
 * tokens 2 gc + {0, 1, 8, 9} (chunk 4 warp + gr / 2), both free of bank
 * conflicts. A page is 39168 bytes, so decode_fast_kernel's layout (3
 * stages, 8 score partials) fits one block per SM only:
 * - variant 9 (decode_fast8_kernel): that layout with 4 stages (207 KB),
 *   one block of 8 warps per SM, pages three ahead;
 * - variant 10 (decode_fast8b_kernel): two blocks per SM (at most 113 KB
 *   each): 2 stages, and warp w's QK takes groups 2 (w & 3), 2 (w & 3) + 1
 *   for tokens 32 (w >> 2) .. + 31, so the page's scores come in 4
 *   partials (18 KB) instead of 8; a page per phase: QK, softmax and PV of
 *   page i (three barriers), page i + 1 in flight meanwhile, page i + 2
 *   issued into page i's stage after its PV. PV unchanged (group w). */
struct fast8_lane {
    int qoff[2]; /* QK: token gr, the lane's 16 bytes of groups g0, g1 (token 8j + gr: + 8j rows) */
    int poff[2]; /* PV: tokens 2 gc, 2 gc + 1, the lane's 8 bytes (tokens + 8: 8 rows on) */
    int roff;    /* RoPE codes of token 8 warp + gr, the lane's 16 bytes */
    int dswz;    /* copy: byte shift of this thread's content chunks */
    __device__ fast8_lane(int tid, int g0, int g1)
    {
        typedef fcfg<8> F;
        const int warp = tid >> 5, lane = tid & 31, gr = lane >> 2, gc = lane & 3;
        qoff[0] = fast_coff<8>(gr, 64 * g0 + 16 * gc);
        qoff[1] = fast_coff<8>(gr, 64 * g1 + 16 * gc);
        poff[0] = fast_coff<8>(2 * gc, 64 * warp + 8 * gr);
        poff[1] = fast_coff<8>(2 * gc + 1, 64 * warp + 8 * gr);
        roff = F::OFF_RC + (8 * warp + gr) * F::RBC + 16 * gc;
        const int t = tid / F::CPR, k = tid % F::CPR;
        dswz = ((k ^ fast_swz<8>(t)) - k) * 16;
    }
};

/* 16 consecutive 8-bit codes (channels 16 gc ..) as 8 BF16 pairs:
 * register 2i + e = bytes e, e + 2 of word i (fast_lo<8>, fast_hi<8>). */
__device__ static inline void byte_codes(const uint4 v, uint32_t r[8])
{
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        r[2 * i] = __byte_perm(w[i], 0u, 0x4240);
        r[2 * i + 1] = __byte_perm(w[i], 0u, 0x4341);
    }
}

/* The RoPE group and the content groups' l sum(Q) of tokens 8 warp + 2 gc
 * (+1), rows gr, gr + 8, added to the scores *d0, *d1 (fast_qk's tail;
 * qr the RoPE query fragments, mm = rqm of the two tokens). */
__device__ static inline void qk8_rope(const uint8_t *pg, const fast8_lane &fl,
                                       const uint32_t qr[4][4], const float sqr[2],
                                       const uint32_t la[4], float4 mm, float2 *d0, float2 *d1,
                                       int warp, int gr, int gc)
{
    typedef fcfg<8> F;
    uint32_t br[8];
    byte_codes(*(const uint4 *)(pg + fl.roff), br);
    float rc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int ks = 0; ks < 4; ks++)
        mma16816(rc, qr[ks], br[2 * ks], br[2 * ks + 1]);
    float2 x0 = *d0, x1 = *d1;
    const uint8_t *mt = pg + F::OFF_MC + (8 * warp + gr) * F::MBC + 4 * gc;
    const uint32_t u0 = *(const uint32_t *)mt, u1 = *(const uint32_t *)(mt + 16);
    float e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma16816_f16(e, la, __byte_perm(u0, 0, 0x3232), __byte_perm(u1, 0, 0x3232));
    x0.x += fmaf(mm.x, rc[0], fmaf(mm.y, sqr[0], e[0]));
    x0.y += fmaf(mm.z, rc[1], fmaf(mm.w, sqr[0], e[1]));
    x1.x += fmaf(mm.x, rc[2], fmaf(mm.y, sqr[1], e[2]));
    x1.y += fmaf(mm.z, rc[3], fmaf(mm.w, sqr[1], e[3]));
    *d0 = x0;
    *d1 = x1;
}

/* Variant 9's QK of page `pg` (fast_qk for 8-bit content and RoPE codes). */
__device__ static inline void fast8_qk(dec_smem_fast<8> &sm, const uint8_t *pg,
                                       const fast8_lane &fl, const uint32_t qc[4][4],
                                       const uint32_t qr[4][4], const float sqr[2],
                                       const uint32_t la[4], int warp, int gr, int gc)
{
    typedef fcfg<8> F;
#pragma unroll QK_UNROLL
    for (int j = 0; j < 8; j++) {
        uint32_t bc[8];
        byte_codes(*(const uint4 *)(pg + fl.qoff[0] + 8 * j * F::CBC), bc);
        float c[4];
        qk_group(c, qc, bc);
        const float4 mm = *(const float4 *)&sm.qkm[warp][8 * j + 2 * gc];
        *(float2 *)&sm.sp[warp][gr][8 * j + 2 * gc] = make_float2(mm.x * c[0], mm.z * c[1]);
        *(float2 *)&sm.sp[warp][gr + 8][8 * j + 2 * gc] = make_float2(mm.x * c[2], mm.z * c[3]);
    }
    qk8_rope(pg, fl, qr, sqr, la, *(const float4 *)&sm.rqm[8 * warp + 2 * gc],
             (float2 *)&sm.sp[warp][gr][8 * warp + 2 * gc],
             (float2 *)&sm.sp[warp][gr + 8][8 * warp + 2 * gc], warp, gr, gc);
}

/* Variant 9: fast_part for C8R8, the same phases, pages F8_LA = 3 ahead
 * (4 stages). */
#define F8_LA (fcfg<8>::NST - 1)
__device__ static void fast8_part(dec_smem_fast<8> &sm, const dec_args &a, int b, int r0,
                                  int split, int slot, int tid)
{
    typedef fcfg<8> F;
    static_assert(F8_LA == 3, "fast8_part waits for page i + 1 with pages i + 2 .. in flight");
    const int warp = tid >> 5, lane = tid & 31, gr = lane >> 2, gc = lane & 3;
    const int len = a.seq_len[b], lenW = len - a.W;
    int p0, p1;
    packed_pages(a, lenW, split, &p0, &p1);
    const int np = p1 - p0;
    const fast8_lane fl(tid, warp, warp);
    uint32_t qc[4][4], qr[4][4];
    float sqc[2], sqr[2];
    int qe[2];
    uint32_t lqa[4];
    fast_q<8, 8>(a, b, r0, warp, gr, gc, qc, qr, sqc, sqr, qe);
    int *qex = (int *)&sm.pf[0][0];
    fast_qex(qex, qe, sqc, warp, gr, gc);
    float o[8][4], bacc[4];
    fast_begin(o, bacc, sm.m, sm.l, tid);
    const int srow = tid >> 4, spart = tid & 15;
    const int shi = fast_shi(a, r0, srow, len, lenW);
    const int32_t *bt = a.block_table + (size_t)b * a.max_pages;
    if (np > 0) {
#pragma unroll
        for (int k = 0; k < F8_LA; k++) {
            if (k < np)
                fast_issue<8>(sm.stage[k], a.pool + (size_t)bt[p0 + k] * F::PB, fl.dswz, tid);
            cp_async_commit();
        }
    }
    cp_async_wait<F8_LA - 1>(); /* page 0 */
    __syncthreads();
    {
        int E[2];
        fast_rowexp(qex, gr, E);
        fast_qscale<8, 8>(qc, qr, sqc, sqr, E);
        fast_lsum(a, qex, E, lqa, sm.zs, tid, gr, gc);
    }
    /* iteration i: softmax and PV of page i, QK of page i + 1; pages i + 2
     * and i + 3 in flight (page i + 3 issued at i into page i - 1's stage) */
    for (int i = -1; i < np; i++) {
        if (i >= 0) {
            __syncthreads(); /* scores of page i complete */
            fast_softmax<8, true>(sm, a, (p0 + i) * QMLA_KV_PAGE, shi, srow, spart);
            cp_async_wait<F8_LA - 2>(); /* page i + 1 */
            __syncthreads(); /* P of page i; page i+1 landed; page i-1 consumed */
            if (i + F8_LA < np)
                fast_issue<8>(sm.stage[(i + F8_LA) % F::NST],
                              a.pool + (size_t)bt[p0 + i + F8_LA] * F::PB, fl.dswz, tid);
            cp_async_commit();
            fast_pv<8>(sm, sm.stage[i % F::NST], fl, o, bacc, warp, gr, gc);
        }
        if (i + 1 < np) {
            __syncwarp();
            const uint8_t *pg = sm.stage[(i + 1) % F::NST];
            fast_meta<8>(sm, pg, (p0 + i + 1) * QMLA_KV_PAGE, a.S, lenW, warp, lane);
            fast8_qk(sm, pg, fl, qc, qr, sqr, lqa, warp, gr, gc);
        }
    }
    __syncthreads();
    fast_store<8, true>(a, sm.l, sm.m, b, r0, slot, o, bacc, tid);
}

/* SEP as decode_fast_kernel's (variant 9's plan is variant 7's for one
 * block per SM). */
template <int SEP>
__global__ void __launch_bounds__(DEC_THREADS, 1) decode_fast8_kernel(dec_args a)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    fast_kernel_body<SEP, dec_smem_fast<8>, fast8_part>(a, smem_raw);
}

/* Variant 10's shared memory: two page stages, 4 score partials (one per
 * group pair), warp-private QK scales; the PV tables are filled by all
 * warps (warp w: tokens 8 w .. 8 w + 7 of every group; rows of F8B_TSTR
 * entries, so that those stores and the PV reads are free of bank
 * conflicts: a row stride of 4 banks). */
#define F8B_NST 2
#define F8B_TSTR (QMLA_KV_PAGE + 4)
struct dec_smem_f8b {
    uint8_t stage[F8B_NST][fcfg<8>::PB]; /* pages, content rows swizzled (fast_swz<8>) */
    float sp[4][DEC_ROWS][SSTR];         /* [group pair][16][64 (+8)] score partials */
    float pf[DEC_ROWS][SSTR];            /* [16][64 (+8)] probabilities */
    float qks[8][2][32];                 /* [warp][its group][its token] s for QK */
    float pvs[8][F8B_TSTR];              /* [group][token] s for PV, 0: masked */
    uint16_t bh[8][F8B_TSTR], bl[8][F8B_TSTR]; /* l / s 2^-110, BF16 high + low */
    float2 rqm[QMLA_KV_PAGE];            /* RoPE (s, l) */
    uint4 qrf[4][32];                    /* the RoPE query fragments [k-step][lane] (all warps alike) */
    float sqrs[DEC_ROWS];                /* RoPE sum(Q) 2^(E - 133) per row */
    float m[DEC_ROWS], l[DEC_ROWS], alpha[DEC_ROWS];
    float zs[DEC_ROWS];
};
static constexpr size_t f8b_smem_bytes()
{
    return sizeof(dec_smem_f8b) > sizeof(dec_smem_quant) ? sizeof(dec_smem_f8b)
                                                          : sizeof(dec_smem_quant);
}

/* Variant 10's metadata of page `pg`: warp w's QK scales (groups g0, g0 + 1,
 * tokens 32 h .., one 8-byte load per lane; warp-private), the PV tables of
 * tokens 8 w .. 8 w + 7 of every group (consecutive metadata words: read
 * after the barriers between QK and PV) and the RoPE (s, l) of the same
 * tokens (warp-private). */
__device__ static inline void f8b_meta(dec_smem_f8b &sm, const uint8_t *pg, int t0, int S,
                                       int lenW, int warp, int lane, int g0, int h)
{
    typedef fcfg<8> F;
    {
        const int tok = 32 * h + lane;
        const uint2 u = *(const uint2 *)(pg + F::OFF_MC + tok * F::MBC + 4 * g0);
        sm.qks[warp][0][lane] = __half2float(__ushort_as_half((unsigned short)(u.x & 0xffffu)));
        sm.qks[warp][1][lane] = __half2float(__ushort_as_half((unsigned short)(u.y & 0xffffu)));
    }
#pragma unroll 1 /* (unrolled, decode_fast8b_kernel<1> spilled 8 bytes) */
    for (int hh = 0; hh < 2; hh++) {
        /* entry e = lane + 32 hh: token 8 warp + e / 8, group e % 8 */
        const int e = lane + 32 * hh, g = e & 7, tok = 8 * warp + (e >> 3), t = t0 + tok;
        const uint32_t u = *(const uint32_t *)(pg + F::OFF_MC + tok * F::MBC + 4 * g);
        const float s = __half2float(__ushort_as_half((unsigned short)(u & 0xffffu)));
        const float m = __half2float(__ushort_as_half((unsigned short)(u >> 16)));
        const bool ok = t >= S && t < lenW;
        const float spv = ok ? (s == 0.0f ? 1.0f : s) : 0.0f;
        const float bias = ok ? m * rcp_approx(spv) * PV_BSCALE : 0.0f;
        const __nv_bfloat16 bh = __float2bfloat16_rn(bias);
        const __nv_bfloat16 bl = __float2bfloat16_rn(bias - __bfloat162float(bh));
        sm.pvs[g][tok] = spv * PV_PSCALE;
        sm.bh[g][tok] = __bfloat16_as_ushort(bh);
        sm.bl[g][tok] = __bfloat16_as_ushort(bl);
    }
    if (lane < 8) {
        const int tok = 8 * warp + lane;
        const uint32_t u = *(const uint32_t *)(pg + F::OFF_MR + tok * F::MBR);
        const float s = __half2float(__ushort_as_half((unsigned short)(u & 0xffffu)));
        const float m = __half2float(__ushort_as_half((unsigned short)(u >> 16)));
        sm.rqm[tok] = make_float2(s, m);
    }
    __syncwarp();
}

/* Variant 10's QK of page `pg`: groups g0, g0 + 1 of tokens 32 h .. 32 h + 31
 * (n-tiles 4h .. 4h + 3) into partial gp, then the RoPE and l sum(Q) of
 * n-tile `warp` (one of them). */
__device__ static inline void f8b_qk(dec_smem_f8b &sm, const uint8_t *pg, const fast8_lane &fl,
                                     const uint32_t qc[2][4][4], const uint32_t la[4], int warp,
                                     int gp, int h, int gr, int gc)
{
    typedef fcfg<8> F;
#pragma unroll
    for (int jj = 0; jj < 4; jj++) {
        const int j = 4 * h + jj;
        float c[4], d[4];
        {
            uint32_t bc[8];
            byte_codes(*(const uint4 *)(pg + fl.qoff[0] + 8 * j * F::CBC), bc);
            qk_group(c, qc[0], bc);
        }
        {
            uint32_t bc[8];
            byte_codes(*(const uint4 *)(pg + fl.qoff[1] + 8 * j * F::CBC), bc);
            qk_group(d, qc[1], bc);
        }
        const float2 s0 = *(const float2 *)&sm.qks[warp][0][8 * jj + 2 * gc];
        const float2 s1 = *(const float2 *)&sm.qks[warp][1][8 * jj + 2 * gc];
        *(float2 *)&sm.sp[gp][gr][8 * j + 2 * gc] =
            make_float2(fmaf(s1.x, d[0], s0.x * c[0]), fmaf(s1.y, d[1], s0.y * c[1]));
        *(float2 *)&sm.sp[gp][gr + 8][8 * j + 2 * gc] =
            make_float2(fmaf(s1.x, d[2], s0.x * c[2]), fmaf(s1.y, d[3], s0.y * c[3]));
    }
    uint32_t qr[4][4];
    {
#pragma unroll
        for (int ks = 0; ks < 4; ks++) {
            const uint4 v = sm.qrf[ks][(gr << 2) | gc];
            qr[ks][0] = v.x;
            qr[ks][1] = v.y;
            qr[ks][2] = v.z;
            qr[ks][3] = v.w;
        }
    }
    const float sqr[2] = {sm.sqrs[gr], sm.sqrs[gr + 8]};
    qk8_rope(pg, fl, qr, sqr, la, *(const float4 *)&sm.rqm[8 * warp + 2 * gc],
             (float2 *)&sm.sp[gp][gr][8 * warp + 2 * gc],
             (float2 *)&sm.sp[gp][gr + 8][8 * warp + 2 * gc], warp, gr, gc);
}

__device__ static void fast8b_part(dec_smem_f8b &sm, const dec_args &a, int b, int r0,
                                   int split, int slot, int tid)
{
    typedef fcfg<8> F;
    const int warp = tid >> 5, lane = tid & 31, gr = lane >> 2, gc = lane & 3;
    const int gp = warp & 3, h = warp >> 2, g0 = 2 * gp;
    const int len = a.seq_len[b], lenW = len - a.W;
    int p0, p1;
    packed_pages(a, lenW, split, &p0, &p1);
    const int np = p1 - p0;
    const fast8_lane fl(tid, g0, g0 + 1);
    uint32_t qc[2][4][4], lqa[4];
    int *qex = (int *)&sm.pf[0][0];
    {
        uint32_t qr[4][4];
        float sqc[2][2], sqr[2];
        int qe[2][2];
        fast_q<8, 8>(a, b, r0, g0, gr, gc, qc[0], qr, sqc[0], sqr, qe[0]);
        fast_q<8, 8>(a, b, r0, g0 + 1, gr, gc, qc[1], qr, sqc[1], sqr, qe[1]);
        if (gc == 0) {
            qex[warp * DEC_ROWS + gr] = max(qe[0][0], qe[1][0]);
            qex[warp * DEC_ROWS + gr + 8] = max(qe[0][1], qe[1][1]);
            if (h == 0) { /* the group sums (warps 4-7 hold the same groups) */
#pragma unroll
                for (int k = 0; k < 2; k++) {
                    qex[8 * DEC_ROWS + (g0 + k) * DEC_ROWS + gr] = __float_as_int(sqc[k][0]);
                    qex[8 * DEC_ROWS + (g0 + k) * DEC_ROWS + gr + 8] = __float_as_int(sqc[k][1]);
                }
            }
        }
        if (tid < DEC_ROWS) {
            sm.m[tid] = -INFINITY;
            sm.l[tid] = 0.0f;
        }
        const int32_t *bt = a.block_table + (size_t)b * a.max_pages;
        if (np > 0) {
            fast_issue<8>(sm.stage[0], a.pool + (size_t)bt[p0] * F::PB, fl.dswz, tid);
            cp_async_commit();
            if (np > 1)
                fast_issue<8>(sm.stage[1], a.pool + (size_t)bt[p0 + 1] * F::PB, fl.dswz, tid);
            cp_async_commit();
        }
        __syncthreads(); /* the rows' exponent fields and group sums */
        int E[2];
        fast_rowexp(qex, gr, E);
        fast_qscale<8, 8>(qc[0], qr, sqc[0], sqr, E);
#pragma unroll
        for (int ks = 0; ks < 4; ks++) /* the second group's (subn_pos<8> = 0) */
#pragma unroll
            for (int k = 0; k < 4; k++)
                qc[1][ks][k] = bf16x2_ldexp(qc[1][ks][k], E[k & 1]);
        fast_lsum(a, qex, E, lqa, sm.zs, tid, gr, gc);
        if (warp == 0) { /* every warp's RoPE fragments are the same */
#pragma unroll
            for (int ks = 0; ks < 4; ks++)
                sm.qrf[ks][lane] = make_uint4(qr[ks][0], qr[ks][1], qr[ks][2], qr[ks][3]);
            if (gc == 0) {
                sm.sqrs[gr] = sqr[0];
                sm.sqrs[gr + 8] = sqr[1];
            }
        }
    }
    float o[8][4], bacc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < 8; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    const int srow = tid >> 4, spart = tid & 15;
    const int shi = fast_shi(a, r0, srow, len, lenW);
    const int32_t *bt = a.block_table + (size_t)b * a.max_pages;
    cp_async_wait<1>(); /* page 0 */
    __syncthreads();    /* page 0 landed; qrf, sqrs, zs; qex read by all */
    for (int i = 0; i < np; i++) {
        const uint8_t *pg = sm.stage[i % F8B_NST];
        f8b_meta(sm, pg, (p0 + i) * QMLA_KV_PAGE, a.S, lenW, warp, lane, g0, h);
        f8b_qk(sm, pg, fl, qc, lqa, warp, gp, h, gr, gc);
        __syncthreads(); /* scores of page i */
        fast_softmax<4, false>(sm, a, (p0 + i) * QMLA_KV_PAGE, shi, srow, spart);
        __syncthreads(); /* P of page i */
        fast_pv<8>(sm, pg, fl, o, bacc, warp, gr, gc);
        cp_async_wait<0>(); /* page i + 1 */
        __syncthreads();    /* page i + 1 landed; page i consumed */
        if (i + 2 < np)
            fast_issue<8>(sm.stage[i % F8B_NST], a.pool + (size_t)bt[p0 + i + 2] * F::PB,
                          fl.dswz, tid);
        cp_async_commit();
    }
    fast_store<8, true>(a, sm.l, sm.m, b, r0, slot, o, bacc, tid);
}

/* Variant 10: two blocks per SM (variant 7's plan). */
template <int SEP>
__global__ void __launch_bounds__(DEC_THREADS, 2) decode_fast8b_kernel(dec_args a)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    fast_kernel_body<SEP, dec_smem_f8b, fast8b_part>(a, smem_raw);
}

/* The protected partials of variant 8 (blocks n_splits - n_prot ..). */
__global__ void __launch_bounds__(DEC_THREADS, 2) decode_prot_kernel(dec_args a)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int nblk = a.n_splits - a.n_prot;
    prot_part(*(dec_smem_quant *)smem_raw, a, blockIdx.z, blockIdx.y * DEC_ROWS, blockIdx.x,
              nblk + blockIdx.x, threadIdx.x);
}

static int fast_config(const qmla_kv_config *c)
{
    return c->c_bits != QMLA_KV_BF16 && c->group == 64 && c->r_bits == 4 &&
           (c->c_bits == 4 || c->c_bits == 2);
}

/* C8R8 G 64: variant 9 (decode_fast8_kernel) applies. */
static int fast8_config(const qmla_kv_config *c)
{
    return c->c_bits == 8 && c->r_bits == 8 && c->group == 64;
}

extern "C" int qmla_decode_cuda_packed_f32(const qmla_kv_config *cfg)
{
    return cfg && (fast_config(cfg) || fast8_config(cfg));
}

/* The variant a configuration runs under a requested one: 1 needs the fast
 * kernel (C4R4, C2R4), 2 a low-bit configuration with a tile path (C4R4,
 * C2R4, C8R8); otherwise variant 0. */
static int eff_variant(const qmla_kv_config *c, int v)
{
    if ((v == 1 || v == 4 || v == 6 || v == 7) && fast_config(c))
        return v;
    if (v == 8 && QMLA_DECODE_WGMMA && fast_config(c) && c->c_bits == 4)
        return 8; /* decode_wg_kernel: C4R4 only, builds for sm_90a only */
    if ((v == 9 || v == 10) && fast8_config(c))
        return v; /* decode_fast8_kernel, decode_fast8b_kernel: C8R8 only */
    if (v == 7 && fast8_config(c))
        return 10; /* the default of C8R8 (H200 run 13: 0.29-0.76x variant 0's time) */
    if (v == 3)
        return 3; /* every configuration, BF16 too */
    if (v == 5 && (c->c_bits == QMLA_KV_BF16 ||
                   (c->group == 64 && ((c->c_bits == 4 && c->r_bits == 4) ||
                                       (c->c_bits == 2 && c->r_bits == 4) ||
                                       (c->c_bits == 8 && c->r_bits == 8)))))
        return v; /* the tile kernels' configurations, BF16 too */
    if (v == 2 && c->c_bits != QMLA_KV_BF16 && c->group == 64 &&
        ((c->c_bits == 4 && c->r_bits == 4) || (c->c_bits == 2 && c->r_bits == 4) ||
         (c->c_bits == 8 && c->r_bits == 8)))
        return 2;
    return 0;
}

/* q8-metadata pages (kvcache.h): read by decode_fast_q8_kernel, i.e. by the
 * variants that run the fast kernel (0, 1, 3, 4 and the default 7) of C4R4 /
 * C2R4 G 64; every other variant and configuration reads f16 metadata
 * only. The requested variant decides (variant 8 refuses q8 in every build,
 * also where it would fall back to variant 0). */
static int q8_pages(const qmla_kv_config *c)
{
    return c->c_bits != QMLA_KV_BF16 && c->meta == QMLA_CORE_META_Q8;
}
static int q8_variant(const qmla_kv_config *c, int v)
{
    return fast_config(c) && (v == 0 || v == 1 || v == 3 || v == 4 || v == 7);
}
static int q8_refuse(const qmla_kv_config *c, const char *who, int v, qmla_error *err)
{
    return qmla_error_set(err, QMLA_EINVAL,
                          "%s: variant %d (%s) with page layout C%dR%d G %d and q8 metadata "
                          "is not supported: it reads f16-metadata pages only; q8 pages are "
                          "read by variants 0, 1, 3, 4 and 7 (the default) of C4R4 / C2R4 G 64",
                          who, v, qmla_decode_cuda_variant_name(v), c->c_bits, c->r_bits,
                          c->group);
}

/* Variant 1's plan (qmla_decode_cuda_plan_variant). */
#define V1_MIN_PPS 2
#define V1_SLACK 2

/* The short-context plans (variants 1, 4, 7, 8): the pages that hold tokens
 * below the window of a max_len-token sequence, and how many packed blocks
 * of one wave (`slots` of them) take them at least min_pps pages each (at
 * most COMB_MAX_SPLITS - 64 blocks, at least 1). */
static long packed_pages_below_window(long max_len, int window)
{
    return max_len - window > 0 ? (max_len - window + QMLA_KV_PAGE - 1) / QMLA_KV_PAGE : 0;
}
static long wave_packed(long slots, long hi, long min_pps)
{
    long packed = slots < 1 ? 1 : slots;
    if (packed > COMB_MAX_SPLITS - 64)
        packed = COMB_MAX_SPLITS - 64;
    if (packed > (hi + min_pps - 1) / min_pps)
        packed = (hi + min_pps - 1) / min_pps;
    return packed < 1 ? 1 : packed;
}
/* Variant 4 (variant 1's plan): the old combine up to this many partials. */
#define V4_COMB2_MIN_SPLITS 16
/* Variant 7 (the default of C4R4 / C2R4): the old combine only where it has
 * as many blocks (rows x sequences) as this; the channel-split combine3
 * below V7_COMB3_RB rows x sequences (H200 run 8: at <= 16 partials the
 * old combine won by 5-9 % at R x b >= 1024 and lost by 7-9 % at 256). */
#define V7_OLD_COMB_MIN_RB 512
#define V7_COMB3_RB 264
#define V7_COMB3_MIN_SPLITS 64
/* Variant 7 of C4R4 runs variant 2 (the warp-specialised BF16-tile kernel, two row
 * tiles per dequantized page, protected rows in the tile) at two or more
 * row tiles, V7_WS_MIN_TILES to V7_WS_MAX_TILES row tiles x sequences and
 * contexts up to V7_WS_MAX_LEN: H200 runs 8 and 10 measured variant 2 0-7 %
 * faster than variant 1's plan at b 1, 4K, H 128 (s_q 1 and 2) and b 8, 4K,
 * H 16, s_q 2 (8 and 16 row tiles x sequences; at the last within the
 * runs' spread), slower at 32K and at b 1, 4K, H 16, s_q 2 (2). C2R4's
 * variant 2 is slower than variant 1 at those points (runs 8, 10a, 10b:
 * 1.07-1.18x at b 8, H 16, s_q 2 and b 1, H 128, s_q 2), so C2R4 keeps
 * variant 1's plan there. */
#define V7_WS_MIN_TILES 8
#define V7_WS_MAX_TILES 16
#define V7_WS_MAX_LEN 4096

/* Variant 7's combine for a batch shape: 0 the old combine, 2 combine2,
 * 3 combine3 with 4 channel blocks per row (NF 1), 4 with 2 (NF 2); combine3
 * only from V7_COMB3_MIN_SPLITS partials (H200 run 10: 5-8 % slower than
 * combine2 at 16-36 partials and 128-256 rows x sequences, 2-13 % faster at
 * 65-264 partials and 16-32). */
static int v7_combine(int n_splits, long rb)
{
    if (n_splits <= V4_COMB2_MIN_SPLITS && rb >= V7_OLD_COMB_MIN_RB)
        return 0;
    if (rb >= V7_COMB3_RB || n_splits < V7_COMB3_MIN_SPLITS)
        return 2;
    return 2 * rb < V7_COMB3_RB ? 3 : 4;
}

/* Row tiles per block of variant 2 (one dequantized page for all of them). */
static int ws_nrt(int tiles) { return tiles >= 2 ? 2 : 1; }
/* Row tiles per block of variant 5 (register-blocked on one tile). */
static int mr_mt(int tiles) { return tiles >= 2 ? 2 : 1; }
/* Row tiles per block of variant 6 (register-blocked on one page's codes);
 * at one row tile variant 6 is decode_fast_kernel with variant 3's plan. */
static int fmr_mt(int tiles) { return tiles >= 2 ? 2 : 1; }
/* 1 when the plan's variant reads packed pages through BF16 tiles (no
 * protected partials, BF16-rounded packed values). */
static int tile_variant(int v) { return v == 2 || v == 5; }

extern "C" int qmla_decode_cuda_variant_built(int variant)
{
    return variant >= 0 && variant < QMLA_DECODE_VARIANTS && (variant != 8 || QMLA_DECODE_WGMMA);
}

extern "C" int qmla_decode_cuda_variant_packed_f32(const qmla_kv_config *cfg, int variant)
{
    const int v = cfg ? eff_variant(cfg, variant) : 0;
    return cfg && !tile_variant(v) && (fast_config(cfg) || v == 9 || v == 10);
}

extern "C" const char *qmla_decode_cuda_variant_name(int variant)
{
    switch (variant) {
    case 0: return "v0 fast";
    case 1: return "v1 fast+sep";
    case 2: return "v2 ws-tile";
    case 3: return "v3 v0+comb2";
    case 4: return "v4 v1+comb-by-splits";
    case 5: return "v5 rows-on-one-tile";
    case 6: return "v6 fast-rows-on-one-page";
    case 7: return "v7 auto (default)";
    case 8: return "v8 wgmma-codes";
    case 9: return "v9 fast8";
    case 10: return "v10 fast8-2blk";
    default: return "?";
    }
}

extern "C" int qmla_decode_cuda_plan(const qmla_kv_config *cfg, const qmla_decode_args *a,
                                     long max_len, int n_sm, qmla_decode_plan *plan,
                                     qmla_error *err)
{
    /* the default: variant 7 for C4R4 / C2R4 (the short-context plan and
     * the combine by batch shape), variant 10 for C8R8 (variant 7 is 10
     * there), variant 0 for BF16 (variant 7 falls back to 0) */
    return qmla_decode_cuda_plan_variant(cfg, a, max_len, n_sm, 7, plan, err);
}

extern "C" int qmla_decode_cuda_plan_variant(const qmla_kv_config *cfg,
                                             const qmla_decode_args *a, long max_len, int n_sm,
                                             int variant, qmla_decode_plan *plan,
                                             qmla_error *err)
{
    int st = qmla_kv_check(cfg, err);
    if (st)
        return st;
    if (!a || !plan || a->batch < 1 || a->s_q < 1 || a->heads < 1 || max_len < 0)
        return qmla_error_set(err, QMLA_EINVAL, "decode plan: batch, s_q, heads >= 1 needed");
    if (variant < 0 || variant >= QMLA_DECODE_VARIANTS)
        return qmla_error_set(err, QMLA_EINVAL, "decode plan: variant %d, expected 0..%d",
                              variant, QMLA_DECODE_VARIANTS - 1);
    const int q8 = q8_pages(cfg);
    if (q8 && !q8_variant(cfg, variant))
        return q8_refuse(cfg, "decode plan", variant, err);
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
            return qmla_cuda_fail(err, e, "multiprocessor count");
    }
    int v = eff_variant(cfg, variant);
    const int tiles = (int)((R + DEC_ROWS - 1) / DEC_ROWS);
    /* variant 7 at a few short sequences with several row tiles (C4R4,
     * f16 metadata: variant 2 reads no q8 pages): variant 2 (the plan's
     * variant says so; it attends to BF16-rounded values) */
    if (v == 7 && !q8 && cfg->c_bits == 4 && tiles >= 2 && (long)a->batch * tiles >= V7_WS_MIN_TILES &&
        (long)a->batch * tiles <= V7_WS_MAX_TILES && max_len <= V7_WS_MAX_LEN)
        v = 2;
    const long pages = (max_len + QMLA_KV_PAGE - 1) / QMLA_KV_PAGE;
    const long prot =
        !tile_variant(v) && (fast_config(cfg) || v == 9 || v == 10) ? (cfg->sink + cfg->window + QMLA_KV_PAGE - 1) / QMLA_KV_PAGE : 0;
    long splits, pps;
    if (v == 8) {
        /* decode_wg_kernel: one wave of 2 blocks per SM over the packed
         * pages below the window (at least V1_MIN_PPS each), the protected
         * partials in a launch of their own (decode_prot_kernel) */
        const long slots = (long)n_sm * 2 / ((long)a->batch * tiles);
        const long hi = packed_pages_below_window(max_len, cfg->window);
        const long packed = wave_packed(slots, hi, V1_MIN_PPS);
        pps = hi > 0 ? (hi + packed - 1) / packed : 1;
        splits = (hi > 0 ? (hi + pps - 1) / pps : 1) + prot;
        plan->sep = 1;
    } else if (v == 1 || v == 4 || v == 7 || v == 9 || v == 10) {
        /* the short-context plan: the packed pages below the window over
         * `packed` blocks of one wave (2 per SM), at least V1_MIN_PPS pages
         * each (variant 7: one page each where all the blocks of one page
         * and the protected blocks fit one block per SM); the protected partials in blocks of their own beside them
         * when the wave has room for them, or when making room costs at
         * most V1_SLACK more pages per packed block (the protected blocks'
         * own work, about 2 pages); otherwise after the pages of the last
         * packed blocks, as variant 0 */
        /* (variant 9: variant 7's plan for one block per SM) */
        const long slots = (long)n_sm * (v == 9 ? 1 : 2) / ((long)a->batch * tiles);
        const long hi = packed_pages_below_window(max_len, cfg->window);
        const long min_pps =
            (v == 7 || v == 9 || v == 10) && (long)a->batch * tiles * (hi + prot) <= n_sm ? 1 : V1_MIN_PPS;
        long packed = wave_packed(slots, hi, min_pps);
        const long pps0 = hi > 0 ? (hi + packed - 1) / packed : 1;
        long sep = packed + prot <= slots;
        if (!sep && slots - prot >= 1) {
            const long pps1 = (hi + slots - prot - 1) / (slots - prot);
            if (pps1 <= pps0 + V1_SLACK) {
                packed = slots - prot;
                sep = 1;
            }
        }
        pps = hi > 0 ? (hi + packed - 1) / packed : 1;
        splits = hi > 0 ? (hi + pps - 1) / pps : 1;
        if (!sep && splits < prot)
            splits = prot;
        splits += prot;
        plan->sep = (int)sep;
    } else {
        const long groups = v == 2   ? (tiles + ws_nrt(tiles) - 1) / ws_nrt(tiles)
                            : v == 5 ? (tiles + mr_mt(tiles) - 1) / mr_mt(tiles)
                            : v == 6 ? (tiles + fmr_mt(tiles) - 1) / fmr_mt(tiles)
                                     : tiles;
        const long per_seq = (long)a->batch * groups;
        /* one wave: blocks resident at once (2 per SM low-bit, 1 BF16 and
         * variants 2 and 5, and variant 6 at two row tiles per block) */
        const long per_sm =
            cfg->c_bits == QMLA_KV_BF16 || tile_variant(v) || (v == 6 && fmr_mt(tiles) > 1) ? 1
                                                                                           : 2;
        splits = (long)n_sm * per_sm / per_seq;
        if (splits > COMB_MAX_SPLITS - 64)
            splits = COMB_MAX_SPLITS - 64; /* room for the protected partials */
        if (splits > pages)
            splits = pages;
        if (splits < 1)
            splits = 1;
        pps = (pages + splits - 1) / splits;
        if (pps < 1)
            pps = 1;
        splits = pages > 0 ? (pages + pps - 1) / pps : 1;
        /* C4R4 / C2R4: one more partial per 64 protected tokens (sink +
         * window), computed by the last `prot` blocks after their pages (no
         * extra blocks: the grid stays within one wave) */
        if (splits < prot)
            splits = prot;
        splits += prot;
    }
    plan->n_prot = (int)prot;
    plan->n_splits = (int)splits;
    plan->pages_per_split = (int)pps;
    plan->row_tiles = tiles;
    plan->variant = v;
    if (v != 1 && v != 4 && v != 7 && v != 8 && v != 9 && v != 10)
        plan->sep = 0;
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
    /* q8 pages: the plan's variant must read them (before any pointer) */
    if (plan && q8_pages(&kc->cfg) && !q8_variant(&kc->cfg, plan->variant))
        return q8_refuse(&kc->cfg, "decode", plan->variant, err);
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
    if (plan->n_splits > COMB_MAX_SPLITS)
        return qmla_error_set(err, QMLA_EINVAL,
                              "decode: %d partials per sequence in the plan, at most %d (sink "
                              "+ window too large?)",
                              plan->n_splits, COMB_MAX_SPLITS);
    if (((uintptr_t)a->q & 15u) || ((uintptr_t)kc->pool & 15u) || ((uintptr_t)ws & 15u) ||
        ((uintptr_t)kc->sink & 15u) || ((uintptr_t)kc->window & 15u) || ((uintptr_t)out & 7u))
        return qmla_error_set(err, QMLA_EINVAL, "decode: q, pool, buffers, workspace must be "
                                                "16-byte aligned, out 8-byte aligned");
    if (!L.bf16 && ((kc->cfg.sink > 0 && !kc->sink) || (kc->cfg.window > 0 && !kc->window)))
        return qmla_error_set(err, QMLA_EINVAL, "decode: NULL protection buffer");
    if (!L.bf16 && L.G != 64)
        return qmla_error_set(err, QMLA_EINVAL, "decode: group %d: the kernel takes 64", L.G);
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
    const int var = plan->variant;
    if (var < 0 || var >= QMLA_DECODE_VARIANTS || var != eff_variant(&kc->cfg, var))
        return qmla_error_set(err, QMLA_EINVAL, "decode: the plan's variant %d does not fit C%dR%d",
                              var, L.c_bits, L.r_bits);
    const int q8 = q8_pages(&kc->cfg);
    const int fast = fast_config(&kc->cfg) && !tile_variant(var);
    d.n_prot = fast ? plan->n_prot : 0;
    const int n_prot = (kc->cfg.sink + kc->cfg.window + QMLA_KV_PAGE - 1) / QMLA_KV_PAGE;
    if (fast_config(&kc->cfg)) {
        const size_t pb = q8 ? (L.c_bits == 4 ? fcfg<4, true>::PB : fcfg<2, true>::PB)
                             : (L.c_bits == 4 ? fcfg<4>::PB : fcfg<2>::PB);
        if (L.page_bytes != pb)
            return qmla_error_set(err, QMLA_EINVAL, "decode: C%dR%d %s pages: expected %zu bytes "
                                  "a page, found %zu", L.c_bits, L.r_bits, q8 ? "q8" : "f16",
                                  pb, L.page_bytes);
    }
    if (fast && plan->n_prot != n_prot)
        return qmla_error_set(err, QMLA_EINVAL, "decode: the plan was made for another "
                              "sink/window: expected %d protected pages (sink %d, window %d), "
                              "the plan has %d", n_prot, kc->cfg.sink, kc->cfg.window,
                              plan->n_prot);
    if (var == 9 || var == 10) { /* decode_fast8(b)_kernel: protected partials as the fast kernel's */
        if (L.page_bytes != (size_t)fcfg<8>::PB)
            return qmla_error_set(err, QMLA_EINVAL, "decode: C8R8 pages: expected %zu bytes a "
                                  "page, found %zu", (size_t)fcfg<8>::PB, L.page_bytes);
        if (plan->n_prot != n_prot)
            return qmla_error_set(err, QMLA_EINVAL, "decode: the plan was made for another "
                                  "sink/window: expected %d protected pages (sink %d, window "
                                  "%d), the plan has %d", n_prot, kc->cfg.sink, kc->cfg.window,
                                  plan->n_prot);
        d.n_prot = plan->n_prot;
    }
    const size_t rows = (size_t)a->batch * d.n_splits * d.R_pad;
    d.o_part = (float *)ws;
    d.lse_part = (float *)ws + rows * QMLA_KV_DC;
    const int sep = (var == 1 || var == 4 || var == 7 || var == 8 || var == 9 || var == 10) && plan->sep;
    dim3 grid((unsigned)(d.n_splits - (sep ? 0 : d.n_prot)), (unsigned)plan->row_tiles,
              (unsigned)a->batch);
    const int nrt = ws_nrt(plan->row_tiles);
    const int mt = mr_mt(plan->row_tiles);
    const int fmt = fmr_mt(plan->row_tiles);
    if (var == 6)
        grid.y = (unsigned)((plan->row_tiles + fmt - 1) / fmt);
    if (var == 2)
        grid.y = (unsigned)((plan->row_tiles + nrt - 1) / nrt);
    if (var == 5)
        grid.y = (unsigned)((plan->row_tiles + mt - 1) / mt);
    cudaError_t e = cudaSuccess;
#define QMLA_LAUNCH(KERNEL, SMEM)                                                              \
    do {                                                                                       \
        e = cudaFuncSetAttribute(KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize,          \
                                 (int)(SMEM));                                                 \
        if (e == cudaSuccess) {                                                                \
            KERNEL<<<grid, THREADS, SMEM, stream>>>(d);                                        \
            e = cudaGetLastError();                                                            \
        }                                                                                      \
    } while (0)
    int THREADS = DEC_THREADS;
#define QMLA_LAUNCH_MR(CB, RB)                                                                 \
    do {                                                                                       \
        if (mt == 1)                                                                           \
            QMLA_LAUNCH((decode_mr_kernel<CB, RB, 1>), (mr_smem_bytes<CB, 1>()));              \
        else                                                                                   \
            QMLA_LAUNCH((decode_mr_kernel<CB, RB, 2>), (mr_smem_bytes<CB, 2>()));              \
    } while (0)
    if (var == 8) {
        /* the protected partials, then the packed pages (decode_wg_kernel) */
        if (d.n_prot > 0) {
            const dim3 pgrid((unsigned)d.n_prot, (unsigned)plan->row_tiles, (unsigned)a->batch);
            e = cudaFuncSetAttribute(decode_prot_kernel,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)sizeof(dec_smem_quant));
            if (e == cudaSuccess) {
                decode_prot_kernel<<<pgrid, DEC_THREADS, sizeof(dec_smem_quant), stream>>>(d);
                e = cudaGetLastError();
            }
        }
        if (e == cudaSuccess) {
            grid.x = (unsigned)(d.n_splits - d.n_prot);
            THREADS = V8_THREADS;
            QMLA_LAUNCH(decode_wg_kernel, sizeof(dec_smem_wg));
        }
    } else if (var == 5 && L.bf16)
        QMLA_LAUNCH_MR(16, 16);
    else if (var == 5 && L.c_bits == 4)
        QMLA_LAUNCH_MR(4, 4);
    else if (var == 5 && L.c_bits == 2)
        QMLA_LAUNCH_MR(2, 4);
    else if (var == 5)
        QMLA_LAUNCH_MR(8, 8);
    else if (var == 9 && sep)
        QMLA_LAUNCH((decode_fast8_kernel<1>), fast_smem_bytes<8>());
    else if (var == 9)
        QMLA_LAUNCH((decode_fast8_kernel<0>), fast_smem_bytes<8>());
    else if (var == 10 && sep)
        QMLA_LAUNCH((decode_fast8b_kernel<1>), f8b_smem_bytes());
    else if (var == 10)
        QMLA_LAUNCH((decode_fast8b_kernel<0>), f8b_smem_bytes());
    else if (L.bf16)
        QMLA_LAUNCH(decode_bf16_kernel, sizeof(dec_smem_bf16));
    else if (var == 2) {
        THREADS = WS_THREADS;
        if (L.c_bits == 4 && nrt == 1)
            QMLA_LAUNCH((decode_ws_kernel<4, 4, 1>), sizeof(dec_smem_ws<1>));
        else if (L.c_bits == 4)
            QMLA_LAUNCH((decode_ws_kernel<4, 4, 2>), sizeof(dec_smem_ws<2>));
        else if (L.c_bits == 2 && nrt == 1)
            QMLA_LAUNCH((decode_ws_kernel<2, 4, 1>), sizeof(dec_smem_ws<1>));
        else if (L.c_bits == 2)
            QMLA_LAUNCH((decode_ws_kernel<2, 4, 2>), sizeof(dec_smem_ws<2>));
        else if (nrt == 1)
            QMLA_LAUNCH((decode_ws_kernel<8, 8, 1>), sizeof(dec_smem_ws<1>));
        else
            QMLA_LAUNCH((decode_ws_kernel<8, 8, 2>), sizeof(dec_smem_ws<2>));
    } else if (var == 6 && L.c_bits == 4 && fmt == 2)
        QMLA_LAUNCH((decode_fast_mr_kernel<4, 2>), (fmr_smem_bytes<4, 2>()));
    else if (var == 6 && L.c_bits == 2 && fmt == 2)
        QMLA_LAUNCH((decode_fast_mr_kernel<2, 2>), (fmr_smem_bytes<2, 2>()));
    else if (q8 && L.c_bits == 4 && sep)
        QMLA_LAUNCH((decode_fast_q8_kernel<4, 1>), (fast_smem_bytes<4, true>()));
    else if (q8 && L.c_bits == 4)
        QMLA_LAUNCH((decode_fast_q8_kernel<4, 0>), (fast_smem_bytes<4, true>()));
    else if (q8 && sep)
        QMLA_LAUNCH((decode_fast_q8_kernel<2, 1>), (fast_smem_bytes<2, true>()));
    else if (q8)
        QMLA_LAUNCH((decode_fast_q8_kernel<2, 0>), (fast_smem_bytes<2, true>()));
    else if (L.c_bits == 4 && sep)
        QMLA_LAUNCH((decode_fast_kernel<4, 1>), fast_smem_bytes<4>());
    else if (L.c_bits == 4)
        QMLA_LAUNCH((decode_fast_kernel<4, 0>), fast_smem_bytes<4>());
    else if (L.c_bits == 2 && sep)
        QMLA_LAUNCH((decode_fast_kernel<2, 1>), fast_smem_bytes<2>());
    else if (L.c_bits == 2)
        QMLA_LAUNCH((decode_fast_kernel<2, 0>), fast_smem_bytes<2>());
    else
        QMLA_LAUNCH((decode_quant_kernel<8, 8>), sizeof(dec_smem_quant));
#undef QMLA_LAUNCH_MR
#undef QMLA_LAUNCH
    if (e != cudaSuccess)
        return qmla_cuda_fail(err, e, "decode main kernel");
    /* variant 4: the split-parallel combine only where the splits are many
     * (hopper run 2: it loses 1-10 % at <= 11 partials, wins from 24) */
    const int comb = var == 0 || (var == 4 && d.n_splits <= V4_COMB2_MIN_SPLITS) ? 0
                     : var == 7 || var == 8 || var == 9 || var == 10 ? v7_combine(d.n_splits, R * a->batch)
                                : 2;
    if (comb == 0)
        decode_combine_kernel<<<dim3((unsigned)R, (unsigned)a->batch), 128, 0, stream>>>(
            d.o_part, d.lse_part, d.n_splits, d.R, d.R_pad, out, lse);
    else if (comb == 3)
        decode_combine3_kernel<1><<<dim3((unsigned)R, (unsigned)a->batch, 4), COMB2_THREADS, 0,
                                    stream>>>(d.o_part, d.lse_part, d.n_splits, d.R, d.R_pad,
                                              out, lse);
    else if (comb == 4)
        decode_combine3_kernel<2><<<dim3((unsigned)R, (unsigned)a->batch, 2), COMB2_THREADS, 0,
                                    stream>>>(d.o_part, d.lse_part, d.n_splits, d.R, d.R_pad,
                                              out, lse);
    else
        decode_combine2_kernel<<<dim3((unsigned)R, (unsigned)a->batch), COMB2_THREADS, 0,
                                 stream>>>(d.o_part, d.lse_part, d.n_splits, d.R, d.R_pad, out,
                                           lse);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return qmla_cuda_fail(err, e, "decode combine kernel");
    return QMLA_OK;
}

extern "C" int qmla_kv_gather_cuda(const qmla_kv_cache *kc, const qmla_decode_args *a,
                                   uint16_t *out, cudaStream_t stream, qmla_error *err)
{
    int st = qmla_kv_check(kc ? &kc->cfg : nullptr, err);
    if (st)
        return st;
    if ((st = qmla_kv_require_f16_meta(&kc->cfg, "gather", err)))
        return st;
    const qmla_kv_layout L = qmla_kv_layout_of(&kc->cfg);
    if (L.bf16 || L.G != 64 ||
        !((L.c_bits == 4 && L.r_bits == 4) || (L.c_bits == 2 && L.r_bits == 4) ||
          (L.c_bits == 8 && L.r_bits == 8)))
        return qmla_error_set(err, QMLA_EINVAL, "gather: C4R4, C2R4 or C8R8 with group 64");
    if (!a || !out || a->batch < 1 || a->max_pages < 1)
        return qmla_error_set(err, QMLA_EINVAL, "gather: bad arguments");
    dec_args d;
    memset(&d, 0, sizeof d);
    d.pool = kc->pool;
    d.sink = kc->sink;
    d.window = kc->window;
    d.block_table = a->block_table;
    d.seq_len = a->seq_len;
    d.max_pages = a->max_pages;
    d.S = kc->cfg.sink;
    d.W = kc->cfg.window;
    d.L = L;
    const dim3 grid((unsigned)a->max_pages, (unsigned)a->batch);
    const size_t smem = sizeof(__nv_bfloat16) * QMLA_KV_PAGE * KSTR;
    cudaError_t e;
#define QMLA_GATHER(CB, RB)                                                                        do {                                                                                               e = cudaFuncSetAttribute(gather_kernel<CB, RB>,                                                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);              if (e == cudaSuccess) {                                                                            gather_kernel<CB, RB><<<grid, DEC_THREADS, smem, stream>>>(d, out);                            e = cudaGetLastError();                                                                    }                                                                                          } while (0)
    if (L.c_bits == 4)
        QMLA_GATHER(4, 4);
    else if (L.c_bits == 2)
        QMLA_GATHER(2, 4);
    else
        QMLA_GATHER(8, 8);
#undef QMLA_GATHER
    if (e != cudaSuccess)
        return qmla_cuda_fail(err, e, "gather kernel");
    return QMLA_OK;
}
