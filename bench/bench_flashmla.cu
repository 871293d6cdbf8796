/* bench/bench_flashmla.cu — FlashMLA's SM90 BF16 dense decode timed the way
 * bench_decode --variants times ours (issue 19: FlashMLA side by side).
 *
 * Not built by meson: FlashMLA (github.com/deepseek-ai/FlashMLA) and its
 * CUTLASS submodule are fetched snapshots, kept in an ignored folder and
 * never committed; scripts/build-flashmla.sh compiles its three sm90 dense
 * decode sources (splitkv_mla bf16, combine, get_decoding_sched_meta) and
 * links them with this file. This file calls FlashMLA's launchers directly
 * (no PyTorch): the parameter structs of its params.h, filled as its
 * dense decode interface documents (MLA: one KV head, q [b][s_q * h_q][576],
 * kcache [blocks][64][1][576], out [b][1][s_q * h_q][512]).
 *
 * Method, the same as bench_decode's bench_variants_point: per point (batch,
 * context, H, s_q; s_q 2 causal as ours: query i sees tokens up to
 * len - s_q + i) the same shuffled block table (bench_decode's xorshift,
 * same seed), BF16 cache and queries from the same hash fill (pool seed 5,
 * queries seed 11), softmax scale 1/sqrt(192); the scheduler metadata is
 * computed once outside the timing (as our host-side plan); the main kernel
 * and the combine are captured in one CUDA Graph; before every sample a
 * 256 MiB cudaMemsetAsync flushes the 60 MB L2; CUDA events around the graph
 * launch; --samples per point (default 10), median. A device-to-device copy
 * (2 GiB, 20 samples, GB/s on bytes read + written) is measured first.
 * Correctness: before the timing of two points (b 1, 4K, H 16: every row;
 * b 8, 32K, H 128: sequence 7, rows 0-7) FlashMLA's output is compared with
 * a double-precision CPU reference (NMSE), and the run fails above 1e-4.
 * Points: bench_decode --variants-fmla's (s_q 1, b 1 / 8 / 32, 4K / 32K /
 * 128K, H 16 / 128); --full: bench_decode --variants' (b 1 / 8 / 32 / 64,
 * 4K / 32K / 128K / 1M without b 64 at 1M, H 16 / 128, s_q 1 / 2).
 * --fp8 (a build with -DQMLA_FMLA_FP8=1, scripts/build-flashmla.sh FP8=1):
 * instead of the BF16 points, FlashMLA's SM90 sparse FP8 decode (sm90/decode/sparse_fp8, the
 * V3.2 token of 656 bytes: 512 float8 e4m3 codes, 4 float32 scales, one per
 * 128 channels, 64 BF16 RoPE channels), run as a dense decode: the top-k set
 * of query i of sequence b is every token of the context in order (index
 * block_table[b][t / 64] * 64 + t % 64, topk = the context), and for s_q 2
 * query 0's last index is -1 (FlashMLA's invalid index: masked), so that it
 * sees tokens up to len - s_q + i as ours. Its instantiations take 64 or 128
 * heads (h_q a multiple of 64, one KV head), so the points are the H 128
 * points above and, for reference, the same (b, context) at H 64, s_q 1.
 * Its scheduler metadata (topk = the context) once outside the timing, main
 * kernel + combine in one graph, the same L2 flush and events. Values: the
 * codes of uniform [-2, 2) values over a per-group scale 2^-7 (1 + k/128),
 * k < 128 (exact in BF16, as FlashMLA rounds the scale to BF16), RoPE and
 * queries as the BF16 mode; checked at b 1, 4K, H 128 (s_q 1: every row;
 * s_q 2 with --full: rows 0-7 and 120-127 of both queries) and b 1, 4K,
 * H 64 (every row) against a double reference on the format's values
 * (code x scale); rows "decode hH sqS" with config FlashMLA-FP8, bytes = the
 * 656-byte tokens, the indices and the queries.
 * Usage: bench_flashmla [--samples N] [--full] [--fp8] [--out flashmla.tsv]
 * TSV columns: kind batch context config median_us bytes GBps pct_copy nmse
 * (bytes: the BF16 pages read, queries and block table, as bench_decode
 * counts BF16's bytes). */
#include "bench_fill.cuh" /* bench_decode.cu's fills, so that both time the same values */
#include "params.h"
#include "sm90/decode/dense/splitkv_mla.h"
#include "smxx/decode/combine/combine.h"
#include "smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.h"

#if QMLA_FMLA_FP8
#include "sm90/decode/sparse_fp8/splitkv_mla.h"
#include <cuda_fp8.h>
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "bench_flashmla: %s:%d: %s\n", __FILE__, __LINE__,                    \
                    cudaGetErrorString(e_));                                                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static const int D = 576, DV = 512, PAGE = 64;

static void *dalloc(size_t n)
{
    void *p = NULL;
    CK(cudaMalloc(&p, n ? n : 16));
    return p;
}
static double bf2d(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* One point (batch, context, H, s_q) of either mode: what both share (the
 * shuffled block table, queries, outputs, scheduler metadata, split
 * accumulators) and each mode's cache. */
struct point {
    int b, H, sq, maxp, parts; /* sq: query tokens per sequence (s_q) */
    long ctx;
    size_t pages;
    int32_t *hbt, *bt, *nsplit;
    uint16_t *q, *out;
    float *lse, *lse_acc, *o_acc;
    DecodingSchedMeta *meta;
    int32_t *len; /* BF16: the context lengths */
    uint16_t *kc; /* BF16: the cache [blocks][64][1][576] */
    int32_t *idx; /* FP8: the indices [b][s_q][context] */
    uint8_t *kv;  /* FP8: the 656-byte tokens [blocks][64] */
};

/* The shared part: bench_decode's shuffled block table (xorshift, same
 * seed), the queries (seed 11), outputs and the split buffers of `parts`
 * scheduler parts. */
static void point_common(point &P, int batch, long ctx, int H, int sq, int parts)
{
    memset(&P, 0, sizeof P);
    P.b = batch;
    P.ctx = ctx;
    P.H = H;
    P.sq = sq;
    const size_t qs = (size_t)sq * H; /* q_seq_per_hk (h_k 1) */
    P.maxp = (int)((ctx + 63) / 64);
    P.pages = (size_t)batch * P.maxp;
    P.hbt = (int32_t *)malloc(P.pages * 4);
    for (size_t i = 0; i < P.pages; i++)
        P.hbt[i] = (int32_t)i;
    uint64_t r = 0x1234567ull + (uint64_t)ctx * 31 + (uint64_t)batch; /* bench_decode's */
    for (size_t i = P.pages; i > 1; i--) {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        const size_t j = (size_t)(r % i);
        const int32_t t = P.hbt[i - 1];
        P.hbt[i - 1] = P.hbt[j];
        P.hbt[j] = t;
    }
    P.bt = (int32_t *)dalloc(P.pages * 4);
    CK(cudaMemcpy(P.bt, P.hbt, P.pages * 4, cudaMemcpyHostToDevice));
    P.q = (uint16_t *)dalloc((size_t)batch * qs * D * 2);
    fill_bf16<<<256, 256>>>(P.q, (size_t)batch * qs * D, 11);
    P.out = (uint16_t *)dalloc((size_t)batch * qs * DV * 2);
    P.lse = (float *)dalloc((size_t)batch * qs * 4);
    P.parts = parts < 1 ? 1 : parts;
    P.meta = (DecodingSchedMeta *)dalloc((size_t)P.parts * sizeof(DecodingSchedMeta));
    P.nsplit = (int32_t *)dalloc((size_t)(batch + 1) * 4);
    const size_t total_splits = (size_t)batch + P.parts;
    P.lse_acc = (float *)dalloc(total_splits * qs * 4);
    P.o_acc = (float *)dalloc(total_splits * qs * DV * 4);
}

/* FlashMLA's scheduler metadata, once outside the timing (topk -1: dense,
 * by the lengths; else sparse with that top-k) */
static void point_sched(point &P, int topk, cudaStream_t s)
{
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    GetDecodeSchedMetaParams sp = {P.b, P.sq, 64, 5, topk, topk == -1 ? -1 : 0, nullptr, nullptr,
                                   topk == -1 ? P.len : nullptr, P.meta, P.nsplit, P.parts, s};
    smxx::decode::run_get_decoding_sched_meta_kernel(sp);
    CK(cudaStreamSynchronize(s));
}

static void point_setup(point &P, int batch, long ctx, int H, int sq, int n_sm, cudaStream_t s)
{
    /* FlashMLA's dense interface: num_sm_parts = SMs / h_k / ceil(s_q h_q / h_k / 64) */
    point_common(P, batch, ctx, H, sq, n_sm / (int)((sq * H + 63) / 64));
    P.len = (int32_t *)dalloc((size_t)batch * 4);
    fill_i32<<<64, 256>>>(P.len, (size_t)batch, (int32_t)ctx);
    P.kc = (uint16_t *)dalloc(P.pages * PAGE * D * 2);
    fill_bf16<<<4096, 256>>>(P.kc, P.pages * PAGE * D, 5);
    point_sched(P, -1, s);
}

/* the combine, as FlashMLA's decode interfaces launch it after the main kernel */
static void point_combine(point &P, cudaStream_t s)
{
    const int qs = P.sq * P.H;
    CombineParams c = {P.b, P.sq, P.H, DV,
                       P.lse, P.out, qs, P.H, qs * DV, P.H * DV, DV,
                       P.lse_acc, P.o_acc, qs, P.H, qs * DV, P.H * DV, DV,
                       P.meta, P.nsplit, P.parts, nullptr, s};
    smxx::decode::run_flash_mla_combine_kernel<cutlass::bfloat16_t>(c);
}

/* main kernel + combine, as FlashMLA's dense decode interface launches them */
static void point_launch(point &P, cudaStream_t s)
{
    const int qs = P.sq * P.H; /* q_seq_per_hk = s_q h_q / h_k, h_k 1 */
    DenseAttnDecodeParams p;
    memset(&p, 0, sizeof p);
    p.b = P.b;
    p.s_q = P.sq;
    p.q_seq_per_hk = qs;
    p.seqlens_k_ptr = P.len;
    p.h_q = P.H;
    p.h_k = 1;
    p.num_blocks = (int)P.pages;
    p.q_head_per_hk = P.H;
    p.is_causal = P.sq > 1; /* as ours: query i sees tokens t <= len - s_q + i */
    p.d = D;
    p.d_v = DV;
    p.scale_softmax = 1.0f / sqrtf(192.0f);
    p.scale_softmax_log2 = (float)(p.scale_softmax * M_LOG2E);
    p.q_ptr = P.q;
    p.k_ptr = P.kc;
    p.o_ptr = P.out;
    p.softmax_lse_ptr = P.lse;
    p.q_batch_stride = (int64_t)qs * D; /* q viewed as [b][qs][1][D] */
    p.q_row_stride = D;
    p.q_head_stride = D;
    p.k_batch_stride = (int64_t)PAGE * D; /* [blocks][64][1][D] */
    p.k_row_stride = D;
    p.k_head_stride = D;
    p.o_batch_stride = (int64_t)qs * DV; /* out [b][1][qs][DV] */
    p.o_row_stride = DV;
    p.o_head_stride = (int64_t)qs * DV;
    p.block_table = P.bt;
    p.block_table_batch_stride = P.maxp;
    p.page_block_size = PAGE;
    p.tile_scheduler_metadata_ptr = P.meta;
    p.num_sm_parts = P.parts;
    p.num_splits_ptr = P.nsplit;
    p.total_num_splits = P.b + P.parts;
    p.softmax_lseaccum_ptr = P.lse_acc;
    p.oaccum_ptr = P.o_acc;
    p.stream = s;
    sm90::run_flash_splitkv_mla_kernel<cutlass::bfloat16_t>(p);
    point_combine(P, s);
}

static void point_free(point &P)
{
    cudaFree(P.bt);
    cudaFree(P.q);
    cudaFree(P.out);
    cudaFree(P.lse);
    cudaFree(P.meta);
    cudaFree(P.nsplit);
    cudaFree(P.lse_acc);
    cudaFree(P.o_acc);
    cudaFree(P.len);
    cudaFree(P.kc);
    cudaFree(P.idx);
    cudaFree(P.kv);
    free(P.hbt);
}

/* NMSE of output rows r0..r1-1 (o, [rows][512] BF16) of queries q
 * ([rows][576] BF16) against a double-precision attention over the tok
 * cache rows k ([tok][576]; V its first 512 channels). */
static double ref_nmse(const double *k, size_t tok, const uint16_t *q, const uint16_t *o, int r0, int r1)
{
    double *sc = (double *)malloc(tok * sizeof(double)), *acc = (double *)malloc(DV * sizeof(double));
    double num = 0, den = 0;
    const double scale = 1.0 / sqrt(192.0);
    for (int r = r0; r < r1; r++) {
        double mx = -INFINITY;
        for (size_t t = 0; t < tok; t++) {
            double s = 0;
            for (int c = 0; c < D; c++)
                s += bf2d(q[(size_t)r * D + c]) * k[t * D + c];
            sc[t] = s * scale;
            mx = fmax(mx, sc[t]);
        }
        double sum = 0;
        for (int c = 0; c < DV; c++)
            acc[c] = 0;
        for (size_t t = 0; t < tok; t++) {
            const double w = exp(sc[t] - mx);
            sum += w;
            for (int c = 0; c < DV; c++)
                acc[c] += w * k[t * D + c];
        }
        for (int c = 0; c < DV; c++) {
            const double ref = acc[c] / sum, got = bf2d(o[(size_t)r * DV + c]);
            num += (got - ref) * (got - ref);
            den += ref * ref;
        }
    }
    free(sc);
    free(acc);
    return den > 0 ? num / den : INFINITY;
}

/* ref_nmse of rows r0..r1-1 of sequence sb, query qi (queries and outputs
 * from the device) over the cache rows k, which it frees */
static double point_nmse(const point &P, int sb, int qi, double *k, size_t tok, int r0, int r1)
{
    uint16_t *q = (uint16_t *)malloc((size_t)P.H * D * 2), *o = (uint16_t *)malloc((size_t)P.H * DV * 2);
    const size_t off = ((size_t)sb * P.sq + qi) * P.H;
    CK(cudaMemcpy(q, P.q + off * D, (size_t)P.H * D * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(o, P.out + off * DV, (size_t)P.H * DV * 2, cudaMemcpyDeviceToHost));
    const double nmse = ref_nmse(k, tok, q, o, r0, r1);
    free(q);
    free(o);
    free(k);
    return nmse;
}

/* NMSE of FlashMLA's BF16 output rows r0..r1-1 of sequence sb (s_q 1)
 * against a double reference computed here from the device's own cache
 * and queries. */
static double point_check(point &P, int sb, int r0, int r1)
{
    const size_t tok = (size_t)P.ctx;
    uint16_t *kb = (uint16_t *)malloc(tok * D * 2);
    double *k = (double *)malloc(tok * D * sizeof(double));
    for (int pg = 0; pg < P.maxp; pg++) {
        const size_t n = (size_t)((pg + 1) * PAGE <= P.ctx ? PAGE : P.ctx - pg * PAGE);
        CK(cudaMemcpy(kb + (size_t)pg * PAGE * D,
                      P.kc + (size_t)P.hbt[(size_t)sb * P.maxp + pg] * PAGE * D, n * D * 2,
                      cudaMemcpyDeviceToHost));
    }
    for (size_t i = 0; i < tok * D; i++)
        k[i] = bf2d(kb[i]);
    free(kb);
    return point_nmse(P, sb, 0, k, tok, r0, r1);
}

#if QMLA_FMLA_FP8
static const int TOK8 = 656; /* 512 e4m3 codes, 4 float32 scales, 64 BF16 RoPE */

/* The group scale of physical token t, group g: 2^-7 (1 + k/128), exact in BF16. */
__host__ __device__ static inline float fp8_scale(uint64_t t, int g)
{
    const uint32_t k = (uint32_t)((t * 4 + (uint64_t)g) * 0x9e3779b97f4a7c15ull >> 57); /* 0..127 */
    return (1.0f + (float)k / 128.0f) / 128.0f;
}

__global__ void fill_fp8_tokens(uint8_t *kv, size_t tokens, uint32_t seed)
{
    const size_t words = tokens * (TOK8 / 4);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t t = i / (TOK8 / 4), off = (i % (TOK8 / 4)) * 4;
        uint32_t w = 0;
        if (off < 512) {
            const float sc = fp8_scale(t, (int)(off / 128));
            for (int j = 0; j < 4; j++) {
                const float v = ((float)(hash32(i * 4 + j, seed) >> 8) / 16777216.0f) * 4.0f - 2.0f;
                w |= (uint32_t)__nv_cvt_float_to_fp8(v / sc, __NV_SATFINITE, __NV_E4M3) << (8 * j);
            }
        } else if (off < 528) {
            const float sc = fp8_scale(t, (int)((off - 512) / 4));
            memcpy(&w, &sc, 4);
        } else {
            for (int j = 0; j < 2; j++) {
                const float v = ((float)(hash32(i * 2 + j, seed + 1) >> 8) / 16777216.0f) * 4.0f - 2.0f;
                w |= (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(v)) << (16 * j);
            }
        }
        ((uint32_t *)kv)[i] = w;
    }
}

/* indices [b][s_q][ctx]: every token of the context in order; the last
 * sq - 1 - i tokens of query i are -1 (causal, as ours) */
__global__ void fill_dense_indices(int32_t *idx, const int32_t *bt, int b, int sq, long ctx, int maxp)
{
    const size_t n = (size_t)b * sq * ctx;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const long t = (long)(i % (size_t)ctx);
        const int qi = (int)(i / (size_t)ctx % (size_t)sq), sb = (int)(i / ((size_t)ctx * sq));
        idx[i] = t > ctx - sq + qi ? -1 : bt[(size_t)sb * maxp + t / 64] * 64 + (int32_t)(t % 64);
    }
}

static double e4m3_to_d(uint8_t c)
{
    const int e = c >> 3 & 15, m = c & 7;
    const double v = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
    return c & 0x80 ? -v : v;
}

static void point8_setup(point &P, int batch, long ctx, int H, int sq, int n_sm, cudaStream_t s)
{
    /* FlashMLA's sparse decode interface on sm90: SMs / s_q / (h_q / 64) parts */
    point_common(P, batch, ctx, H, sq, n_sm / sq / (H / 64));
    P.idx = (int32_t *)dalloc((size_t)batch * sq * ctx * 4);
    fill_dense_indices<<<4096, 256>>>(P.idx, P.bt, batch, sq, ctx, P.maxp);
    P.kv = (uint8_t *)dalloc(P.pages * PAGE * TOK8);
    fill_fp8_tokens<<<4096, 256>>>(P.kv, P.pages * PAGE, 5);
    point_sched(P, (int)ctx, s);
}

/* main kernel + combine, as FlashMLA's sparse decode interface launches them */
static void point8_launch(point &P, cudaStream_t s)
{
    const int qs = P.sq * P.H;
    SparseAttnDecodeParams p;
    memset(&p, 0, sizeof p);
    p.b = P.b;
    p.s_q = P.sq;
    p.h_q = P.H;
    p.h_kv = 1;
    p.d_qk = D;
    p.d_v = DV;
    p.sm_scale = 1.0f / sqrtf(192.0f);
    p.sm_scale_div_log2 = (float)(p.sm_scale * M_LOG2E);
    p.num_blocks = (int)P.pages;
    p.page_block_size = PAGE;
    p.topk = (int)P.ctx;
    p.model_type = ModelType::V32;
    p.q = (cutlass::bfloat16_t *)P.q;
    p.kv = (cutlass::bfloat16_t *)P.kv;
    p.indices = P.idx;
    p.lse = P.lse;
    p.out = (cutlass::bfloat16_t *)P.out;
    p.stride_q_b = qs * D;
    p.stride_q_s_q = P.H * D;
    p.stride_q_h_q = D;
    p.stride_kv_block = PAGE * TOK8;
    p.stride_kv_row = TOK8;
    p.stride_indices_b = (int)(P.sq * P.ctx);
    p.stride_indices_s_q = (int)P.ctx;
    p.stride_lse_b = qs;
    p.stride_lse_s_q = P.H;
    p.stride_o_b = qs * DV;
    p.stride_o_s_q = P.H * DV;
    p.stride_o_h_q = DV;
    p.stream = s;
    p.lse_accum = P.lse_acc;
    p.o_accum = P.o_acc;
    p.stride_lse_accum_split = qs;
    p.stride_lse_accum_s_q = P.H;
    p.stride_o_accum_split = qs * DV;
    p.stride_o_accum_s_q = P.H * DV;
    p.stride_o_accum_h_q = DV;
    p.tile_scheduler_metadata_ptr = P.meta;
    p.num_splits_ptr = P.nsplit;
    p.num_sm_parts = P.parts;
    if (P.H == 128)
        sm90::decode::sparse_fp8::run_flash_splitkv_mla_fp8_sparse_kernel<ModelType::V32, 128>(p);
    else
        sm90::decode::sparse_fp8::run_flash_splitkv_mla_fp8_sparse_kernel<ModelType::V32, 64>(p);
    point_combine(P, s);
}

/* NMSE of FlashMLA's FP8 output, sequence sb, query qi, rows r0..r1-1,
 * against a double reference on the format's values (code x scale, BF16
 * RoPE) of the device's own cache, over tokens 0..len - s_q + qi. */
static double point8_check(point &P, int sb, int qi, int r0, int r1)
{
    const size_t tok = (size_t)(P.ctx - P.sq + 1 + qi);
    uint8_t *kb = (uint8_t *)malloc((size_t)P.maxp * PAGE * TOK8);
    double *k = (double *)malloc(tok * D * sizeof(double));
    for (int pg = 0; pg < P.maxp; pg++)
        CK(cudaMemcpy(kb + (size_t)pg * PAGE * TOK8,
                      P.kv + (size_t)P.hbt[(size_t)sb * P.maxp + pg] * PAGE * TOK8,
                      (size_t)PAGE * TOK8, cudaMemcpyDeviceToHost));
    for (size_t t = 0; t < tok; t++) {
        const uint8_t *b = kb + t * TOK8;
        float sc[4];
        memcpy(sc, b + 512, 16);
        for (int c = 0; c < 512; c++)
            k[t * D + c] = e4m3_to_d(b[c]) * sc[c / 128];
        for (int c = 0; c < 64; c++) {
            uint16_t h;
            memcpy(&h, b + 528 + 2 * c, 2);
            k[t * D + 512 + c] = bf2d(h);
        }
    }
    free(kb);
    return point_nmse(P, sb, qi, k, tok, r0, r1);
}
#endif

/* the mode's setup, launch and check (--fp8 only in an FP8 build: main refuses it otherwise) */
static void mode_setup(int fp8, point &P, int b, long ctx, int H, int sq, int n_sm, cudaStream_t s)
{
#if QMLA_FMLA_FP8
    if (fp8) {
        point8_setup(P, b, ctx, H, sq, n_sm, s);
        return;
    }
#endif
    (void)fp8;
    point_setup(P, b, ctx, H, sq, n_sm, s);
}
static void mode_launch(int fp8, point &P, cudaStream_t s)
{
#if QMLA_FMLA_FP8
    if (fp8) {
        point8_launch(P, s);
        return;
    }
#endif
    (void)fp8;
    point_launch(P, s);
}
/* the checked points: BF16 b 1, 4K, H 16 (every row) and b 8, 32K, H 128
 * (sequence 7, rows 0-7); FP8 b 1, 4K (s_q 1 every row; s_q 2 rows 0-7 and
 * 120-127 of both queries); NAN elsewhere */
static double mode_check(int fp8, point &P)
{
#if QMLA_FMLA_FP8
    if (fp8) {
        if (P.b != 1 || P.ctx != 4096)
            return NAN;
        if (P.sq == 1)
            return point8_check(P, 0, 0, 0, P.H);
        return fmax(fmax(point8_check(P, 0, 0, 0, 8), point8_check(P, 0, 0, 120, 128)),
                    fmax(point8_check(P, 0, 1, 0, 8), point8_check(P, 0, 1, 120, 128)));
    }
#endif
    (void)fp8;
    if (P.sq == 1 && P.H == 16 && P.b == 1 && P.ctx == 4096)
        return point_check(P, 0, 0, 16);
    if (P.sq == 1 && P.H == 128 && P.b == 8 && P.ctx == 32768)
        return point_check(P, 7, 0, 8);
    return NAN;
}

int main(int argc, char **argv)
{
    int samples = 10, full = 0, fp8 = 0;
    const char *outp = "flashmla.tsv";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--samples") && i + 1 < argc)
            samples = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--full"))
            full = 1;
        else if (!strcmp(argv[i], "--fp8"))
            fp8 = 1;
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            outp = argv[++i];
        else {
            fprintf(stderr, "usage: bench_flashmla [--samples N] [--full] [--fp8] [--out F.tsv]\n");
            return 2;
        }
    }
#if !QMLA_FMLA_FP8
    if (fp8) {
        fprintf(stderr, "bench_flashmla: --fp8: this build has no FP8 kernel (expected a build by "
                        "FP8=1 bash scripts/build-flashmla.sh, found one without -DQMLA_FMLA_FP8=1)\n");
        return 2;
    }
#endif
    if (samples < 3 || samples > 250)
        samples = 10;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major != 9 || prop.minor != 0) {
        fprintf(stderr, "bench_flashmla: FlashMLA's dense decode needs sm_90a, found %d.%d\n",
                prop.major, prop.minor);
        return 1;
    }
    FILE *tsv = fopen(outp, "w");
    if (!tsv) {
        perror(outp);
        return 1;
    }
    cudaStream_t s;
    cudaEvent_t e0, e1;
    CK(cudaStreamCreate(&s));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const size_t flush_bytes = (size_t)256 << 20;
    void *flush = dalloc(flush_bytes);
    printf("device: %s, %d SMs, L2 %d MB; samples per point %d\n", prop.name,
           prop.multiProcessorCount, prop.l2CacheSize >> 20, samples);
    /* copy bandwidth, as bench_decode's copy_bandwidth */
    double copy_gbs;
    {
        const size_t n = (size_t)2 << 30;
        void *a = dalloc(n), *b = dalloc(n);
        CK(cudaMemset(a, 1, n));
        float t[20];
        for (int i = 0; i < 22; i++) {
            CK(cudaEventRecord(e0, s));
            CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s));
            CK(cudaEventRecord(e1, s));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (i >= 2)
                t[i - 2] = ms;
        }
        const float us = median(t, 20) * 1000.0f;
        copy_gbs = 2.0 * n / (us * 1e3);
        fprintf(tsv, "kind\tbatch\tcontext\tconfig\tmedian_us\tbytes\tGBps\tpct_copy\tnmse\n");
        fprintf(tsv, "copy\t-\t-\t-\t%.2f\t%.0f\t%.1f\t100.0\t-\n", us, 2.0 * n, copy_gbs);
        cudaFree(a);
        cudaFree(b);
    }
    printf("\n| H | s_q | b | context | FlashMLA%s us | GB/s | %% of copy | sm parts | NMSE |\n"
           "|---|---|---|---|---|---|---|---|---|\n", fp8 ? " FP8" : "");
    /* BF16: the points of bench_decode --variants-fmla; --full: those of
     * --variants (b 1-64, 4K-1M without b 64 at 1M, H 16 and 128, s_q 1, 2).
     * FP8: the same at H 128, then H 64 (its other instantiation) at s_q 1. */
    const int bs[] = {1, 8, 32, 64}, sqs[] = {1, 2};
    const int hs[2] = {fp8 ? 128 : 16, fp8 ? 64 : 128};
    const long cx[] = {4096, 32768, 131072, 1048576};
    const int nb = full ? 4 : 3, nx = full ? 4 : 3, nsq = full ? 2 : 1;
    int bad = 0;
    float *t = (float *)malloc(sizeof(float) * (size_t)samples);
    for (int hi = 0; hi < 2; hi++)
        for (int si = 0; si < (fp8 && hi ? 1 : nsq); si++)
            for (int bi = 0; bi < nb; bi++)
                for (int xi = 0; xi < nx; xi++) {
                    if ((long)bs[bi] * cx[xi] > 32L * 1048576)
                        continue; /* as bench_decode: b 64 at 1M is not run */
                    point P;
                    mode_setup(fp8, P, bs[bi], cx[xi], hs[hi], sqs[si], prop.multiProcessorCount, s);
                    mode_launch(fp8, P, s);
                    CK(cudaStreamSynchronize(s));
                    CK(cudaGetLastError());
                    const double nmse = mode_check(fp8, P);
                    if (!isnan(nmse) && !(nmse <= 1e-4))
                        bad = 1;
                    cudaGraph_t g;
                    cudaGraphExec_t gx;
                    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
                    mode_launch(fp8, P, s);
                    CK(cudaStreamEndCapture(s, &g));
                    CK(cudaGraphInstantiate(&gx, g, 0));
                    CK(cudaGraphDestroy(g));
                    for (int i = 0; i < samples; i++) {
                        CK(cudaMemsetAsync(flush, 0, flush_bytes, s));
                        CK(cudaEventRecord(e0, s));
                        CK(cudaGraphLaunch(gx, s));
                        CK(cudaEventRecord(e1, s));
                        CK(cudaEventSynchronize(e1));
                        float ms = 0;
                        CK(cudaEventElapsedTime(&ms, e0, e1));
                        t[i] = ms * 1000.0f;
                    }
                    const float us = median(t, samples);
                    /* BF16: bench_decode's BF16 bytes (pages, queries, block
                     * table); FP8: the 656-byte tokens, the indices, the queries */
                    const double qbytes = (double)P.b * P.sq * P.H * D * 2;
#if QMLA_FMLA_FP8
                    const double bytes = fp8 ? (double)P.pages * PAGE * TOK8 + (double)P.b * P.sq * P.ctx * 4.0 + qbytes
                                             : (double)P.pages * PAGE * D * 2 + qbytes + P.pages * 4.0;
#else
                    const double bytes = (double)P.pages * PAGE * D * 2 + qbytes + P.pages * 4.0;
#endif
                    const double gbs = bytes / (us * 1e3);
                    char ns[32] = "-";
                    if (!isnan(nmse))
                        snprintf(ns, sizeof ns, "%.3e", nmse);
                    fprintf(tsv, "decode h%d sq%d\t%d\t%ld\t%s\t%.2f\t%.0f\t%.1f\t%.1f\t%s\n", P.H, P.sq,
                            P.b, P.ctx, fp8 ? "FlashMLA-FP8" : "FlashMLA", us, bytes, gbs,
                            100.0 * gbs / copy_gbs, ns);
                    printf("| %3d | %d | %2d | %7ld | %9.1f | %5.0f | %5.1f %% | %3d | %s |\n", P.H,
                           P.sq, P.b, P.ctx, us, gbs, 100.0 * gbs / copy_gbs, P.parts, ns);
                    fflush(stdout);
                    cudaGraphExecDestroy(gx);
                    point_free(P);
                }
    free(t);
    if (fclose(tsv) != 0) {
        perror(outp);
        return 1;
    }
    if (bad) {
        fprintf(stderr, "bench_flashmla: FlashMLA output differs from the CPU reference\n");
        return 1;
    }
    return 0;
}
