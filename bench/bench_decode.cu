/* bench/bench_decode.cu — GPU benchmark of the low-bit MLA decode module
 * (kernels/qdq.cu, kvcache.cu, decode.cu), all figures from one run:
 *   copy      device-to-device cudaMemcpy, GB/s on bytes read + written
 *             (the ceiling the other rows are compared with);
 *   qdq       quantize-pack of 131072 x 576 float32 tokens (4-bit, G 64):
 *             f16 codes+metadata, f16 with x^, q8 codes+metadata;
 *   writer    the fused cache writer, 65536-token prefill, BF16 / C4R4 /
 *             C2R4 / C8R8 with f16 metadata and C4R4 / C2R4 / C8R8 with q8
 *             metadata ("C4R4q8"), GB/s on BF16 rows read + pages written;
 *   decode    h_q 16, s_q 1, 64-token pages on a shuffled pool, batch 8 and
 *             32, contexts 4K..1M: BF16 baseline and C4R4 / C2R4 / C8R8
 *             (sink 4 / window 128); CUDA Graph of main + combine (the plan
 *             is host-only and reused); L2 flushed before every sample;
 *             --samples per point (default 40) in alternating order; median
 *             microseconds, ratio to our BF16, GB/s on the bytes read.
 * Synthetic BF16 queries and cache values (random, never zeros).
 * --vlist 0,3,7: only those variants in --variants* / --profile-variants
 * (BF16 variant 0, the reference, always).
 * --writer: copy, qdq and writer only (no decode rows; provenance quick 16).
 * --variants: instead of qdq / writer / the table above, every kernel
 * variant (decode_cuda.h) beside BF16 over b 1, 8, 32, 64, contexts 4K,
 * 32K, 128K, 1M (b 64: to 128K), H 16 and 128, s_q 1 and 2 (10 samples
 * per point unless --samples; provenance: heads and s_q -1, quick 11;
 * --variants-q8: BF16 and C4R4 / C2R4 with f16 and with q8 metadata
 * ("C4R4q8 v7"), H 16, s_q 1, b 8 and 32, 4K, 32K, 128K, 256K, 1M, quick 15;
 * --variants-quick: H 16 s_q 1 whole, the other shapes at 4K and 128K, quick 12;
 * --variants-fmla: the points bench_flashmla.cu times, b 1 / 8 / 32, 4K, 32K
 * and 128K, H 16 and 128, s_q 1, quick 13; --sweep: the default C4R4
 * plan's pages per block forced to 1-8 beside our BF16 at b 1 and 8, 4K and
 * 32K, H 16 and 128, s_q 1 and 2, quick 14).
 * Usage: bench_decode [--samples N] [--out results.tsv] [--h5 results.h5] [--quick | --writer]
 * (--quick: a subset of the points; --profile: a few launches of each
 * kernel, decode at b 32, 64K, for Nsight Compute; --profile-short: decode
 * at b 8, 4K only; --profile-variants: every variant at b 32, 64K, H 16 and
 * 128; --profile-h128: the same at H 128 only)
 * Writes a TSV (one row per measurement), the same rows as an HDF5 results
 * file with the run's provenance and the decode rows in the paper's Table 9
 * shape (qmla/bench_results.h; default: the TSV's name with .h5), both
 * atomically, and prints a Markdown table.
 */
#include "bench_fill.cuh"
#include "cuda_check.h"
#include "decode_cuda.h"
#include "kvcache_cuda.h"
#include "qdq_cuda.h"
#include "qmla/bench_results.h"
#include "qmla/decode.h"
#include "qmla/kvcache.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__global__ void fill_f32(float *p, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = ((float)(hash32(i, seed) >> 8) / 16777216.0f) * 4.0f - 2.0f;
}
/* Quantized pages: random codes, metadata float16 step 0.05, minimum -1. */
__global__ void fill_pages(uint8_t *pool, size_t n_pages, qmla_kv_layout L, uint32_t seed)
{
    const size_t words = n_pages * (L.page_bytes / 4);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t off = (i * 4) % L.page_bytes;
        uint32_t v = hash32(i, seed);
        if (off >= L.off_mc) /* (step, minimum) pairs */
            v = 0x2a66u | (0xbc00u << 16);
        ((uint32_t *)pool)[i] = v;
    }
}

typedef struct {
    void *flush;
    size_t flush_bytes;
    cudaStream_t s;
    cudaEvent_t e0, e1;
    FILE *tsv;
    int samples;
    double copy_gbs;
    qmla_bench_row rows[1024]; /* everything measured, for the HDF5 file */
    size_t n_rows;
    unsigned vmask; /* --vlist: the kernel variants --variants times (default all) */
    int q8;         /* --variants-q8: C4R4 / C2R4 with q8 metadata beside f16 */
} bench;

/* One measurement: a TSV line (columns kind, batch, context, config,
 * median_us, ratio_to_bf16, bytes, GBps, pct_copy; "-" where none) and a row
 * of the HDF5 results file. */
static void emit(bench *B, const char *kind, int batch, long size, const char *config,
                 double us, double ratio, double bytes)
{
    const double gbs = bytes / (us * 1e3), pct = 100.0 * gbs / B->copy_gbs;
    char bs[16] = "-", cs[24] = "-", rs[24] = "-";
    if (batch > 0)
        snprintf(bs, sizeof bs, "%d", batch);
    if (size > 0)
        snprintf(cs, sizeof cs, "%ld", size);
    if (!isnan(ratio))
        snprintf(rs, sizeof rs, "%.3f", ratio);
    fprintf(B->tsv, "%s\t%s\t%s\t%s\t%.2f\t%s\t%.0f\t%.1f\t%.1f\n", kind, bs, cs,
            *config ? config : "-", us, rs, bytes, gbs, pct);
    if (B->n_rows < sizeof B->rows / sizeof B->rows[0]) {
        qmla_bench_row *r = &B->rows[B->n_rows++];
        memset(r, 0, sizeof *r);
        snprintf(r->kind, sizeof r->kind, "%s", kind);
        snprintf(r->config, sizeof r->config, "%s", config);
        r->batch = batch;
        r->size = size;
        r->median_us = us;
        r->ratio_to_bf16 = ratio;
        r->bytes = bytes;
        r->gbps = gbs;
        r->pct_copy = pct;
    }
}

static void flush_l2(bench *B) { CU(cudaMemsetAsync(B->flush, 0, B->flush_bytes, B->s)); }

/* Time a captured graph once (L2 flushed first); microseconds. */
static float time_graph(bench *B, cudaGraphExec_t g)
{
    flush_l2(B);
    CU(cudaEventRecord(B->e0, B->s));
    CU(cudaGraphLaunch(g, B->s));
    CU(cudaEventRecord(B->e1, B->s));
    CU(cudaEventSynchronize(B->e1));
    float ms = 0;
    CU(cudaEventElapsedTime(&ms, B->e0, B->e1));
    return ms * 1000.0f;
}

static void copy_bandwidth(bench *B)
{
    const size_t n = (size_t)2 << 30;
    void *a = dalloc(n), *b = dalloc(n);
    CU(cudaMemset(a, 1, n));
    float t[20];
    for (int i = 0; i < 22; i++) {
        CU(cudaEventRecord(B->e0, B->s));
        CU(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, B->s));
        CU(cudaEventRecord(B->e1, B->s));
        CU(cudaEventSynchronize(B->e1));
        float ms;
        CU(cudaEventElapsedTime(&ms, B->e0, B->e1));
        if (i >= 2)
            t[i - 2] = ms * 1000.0f;
    }
    const float us = median(t, 20);
    B->copy_gbs = 2.0 * (double)n / (us * 1e3);
    printf("copy: %zu MiB device-to-device, median %.1f us, %.0f GB/s (read + write)\n",
           n >> 20, us, B->copy_gbs);
    emit(B, "copy", 0, 0, "", us, NAN, 2.0 * (double)n);
    cudaFree(a);
    cudaFree(b);
}

static void bench_qdq(bench *B)
{
    const size_t T = 131072, w = 576;
    float *x = (float *)dalloc(T * w * 4), *xh = (float *)dalloc(T * w * 4);
    float *s = (float *)dalloc(T * 9 * 4), *l = (float *)dalloc(T * 9 * 4);
    uint8_t *c = (uint8_t *)dalloc(T * w);
    void *ws = dalloc(QMLA_QDQ_CUDA_WS_BYTES);
    {
        qmla_error e0;
        OK(qmla_qdq_cuda_ws_init(ws, B->s, &e0), e0);
    }
    fill_f32<<<1024, 256>>>(x, T * w, 7);
    CU(cudaGetLastError());
    struct { const char *name; qmla_meta meta; int xhat; } v[3] = {
        {"qdq f16 codes+meta", QMLA_META_F16, 0},
        {"qdq f16 codes+meta+xhat", QMLA_META_F16, 1},
        {"qdq q8 codes+meta", QMLA_META_Q8, 0}};
    for (int k = 0; k < 3; k++) {
        qmla_quant_params p = {4, 64, v[k].meta};
        qmla_error err;
        float t[64];
        int st = 0;
        for (int i = 0; i < B->samples + 2; i++) {
            flush_l2(B);
            CU(cudaEventRecord(B->e0, B->s));
            st |= qmla_qdq_cuda_launch(&p, x, T, w, c, s, l, v[k].xhat ? xh : NULL, ws, B->s, &err);
            CU(cudaEventRecord(B->e1, B->s));
            CU(cudaEventSynchronize(B->e1));
            float ms;
            CU(cudaEventElapsedTime(&ms, B->e0, B->e1));
            if (i >= 2)
                t[i - 2] = ms * 1000.0f;
        }
        OK(st, err);
        st = qmla_qdq_cuda_status(&p, w, ws, B->s, &err);
        OK(st, err);
        const float us = median(t, B->samples);
        const double bytes = (double)T * (w * 4 + 288 + 9 * 8 + (v[k].xhat ? w * 4 : 0));
        const double gbs = bytes / (us * 1e3);
        printf("%-26s T %zu: %8.1f us  %6.0f GB/s  %5.1f %% of copy\n", v[k].name, T, us, gbs,
               100.0 * gbs / B->copy_gbs);
        emit(B, v[k].name, 0, (long)T, "", us, NAN, bytes);
    }
    cudaFree(x);
    cudaFree(xh);
    cudaFree(s);
    cudaFree(l);
    cudaFree(c);
    cudaFree(ws);
}

static const char *CFG[4] = {"BF16", "C4R4", "C2R4", "C8R8"};
/* the writer's configurations: f16 metadata, then q8 (kvcache.h) */
static const char *CFGW[7] = {"BF16", "C4R4", "C2R4", "C8R8", "C4R4q8", "C2R4q8", "C8R8q8"};

static void bench_writer(bench *B)
{
    const size_t n = 65536;
    uint16_t *kv = (uint16_t *)dalloc(n * QMLA_KV_D * 2);
    int64_t *slot = (int64_t *)dalloc(n * 8);
    int32_t *seq = (int32_t *)dalloc(n * 4), *pos = (int32_t *)dalloc(n * 4);
    int32_t *len = (int32_t *)dalloc(4);
    fill_bf16<<<1024, 256>>>(kv, n * QMLA_KV_D, 3);
    /* one sequence, positions 0..n-1 in slots 0..n-1 */
    int64_t *hs = (int64_t *)malloc(n * 8);
    int32_t *hp = (int32_t *)malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        hs[i] = (int64_t)i;
        hp[i] = (int32_t)i;
    }
    CU(cudaMemcpy(slot, hs, n * 8, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(pos, hp, n * 4, cudaMemcpyHostToDevice));
    CU(cudaMemset(seq, 0, n * 4));
    const int32_t hl = (int32_t)n;
    CU(cudaMemcpy(len, &hl, 4, cudaMemcpyHostToDevice));
    void *ws = dalloc(QMLA_KV_WRITE_WS_BYTES);
    qmla_error err0;
    OK(qmla_kv_write_cuda_ws_init(ws, B->s, &err0), err0);
    for (int ci = 0; ci < 7; ci++) {
        qmla_kv_config cfg;
        qmla_error err;
        char base[8];
        snprintf(base, sizeof base, "%.4s", CFGW[ci]);
        OK(qmla_kv_parse_config(base, &cfg, &err), err);
        if (strstr(CFGW[ci], "q8"))
            cfg.meta = QMLA_CORE_META_Q8;
        cfg.sink = 4;
        cfg.window = 128;
        const qmla_kv_layout L = qmla_kv_layout_of(&cfg);
        qmla_kv_cache kc = {cfg, (uint8_t *)dalloc(n / 64 * L.page_bytes), n / 64,
                            (uint16_t *)dalloc(4 * 1152), (uint16_t *)dalloc(128 * 1152), 1};
        qmla_kv_write w = {kv, n, slot, seq, pos, len, NULL};
        float t[64];
        int st = 0;
        for (int i = 0; i < B->samples + 2; i++) {
            flush_l2(B);
            CU(cudaEventRecord(B->e0, B->s));
            st |= qmla_kv_write_cuda_launch(&kc, &w, ws, B->s, &err);
            CU(cudaEventRecord(B->e1, B->s));
            CU(cudaEventSynchronize(B->e1));
            float ms;
            CU(cudaEventElapsedTime(&ms, B->e0, B->e1));
            if (i >= 2)
                t[i - 2] = ms * 1000.0f;
        }
        OK(st, err);
        OK(qmla_kv_write_cuda_status(&kc, ws, B->s, &err), err);
        const float us = median(t, B->samples);
        const double bytes = (double)n * (1152 + 16) + (double)(n / 64) * L.page_bytes +
                             (L.bf16 ? 0 : 132.0 * 1152);
        const double gbs = bytes / (us * 1e3);
        printf("writer %-7s %zu tokens: %8.1f us  %6.0f GB/s  %5.1f %% of copy\n", CFGW[ci], n,
               us, gbs, 100.0 * gbs / B->copy_gbs);
        emit(B, "writer", 0, (long)n, CFGW[ci], us, NAN, bytes);
        cudaFree(kc.pool);
        cudaFree(kc.sink);
        cudaFree(kc.window);
    }
    cudaFree(kv);
    cudaFree(slot);
    cudaFree(seq);
    cudaFree(pos);
    cudaFree(len);
    cudaFree(ws);
    free(hs);
    free(hp);
}

/* One (batch, context) point: the four configurations side by side. */
static void bench_decode_point(bench *B, int batch, long ctx, float res_us[4])
{
    const int H = 16, maxp = (int)((ctx + 63) / 64);
    const size_t pages = (size_t)batch * maxp;
    int32_t *hbt = (int32_t *)malloc(pages * 4);
    for (size_t i = 0; i < pages; i++)
        hbt[i] = (int32_t)i;
    uint64_t r = 0x1234567ull + (uint64_t)ctx * 31 + (uint64_t)batch;
    for (size_t i = pages; i > 1; i--) { /* independently owned, shuffled pages */
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        const size_t j = (size_t)(r % i);
        const int32_t t = hbt[i - 1];
        hbt[i - 1] = hbt[j];
        hbt[j] = t;
    }
    int32_t *bt = (int32_t *)dalloc(pages * 4), *len = (int32_t *)dalloc((size_t)batch * 4);
    CU(cudaMemcpy(bt, hbt, pages * 4, cudaMemcpyHostToDevice));
    fill_i32<<<64, 256>>>(len, (size_t)batch, (int32_t)ctx);
    uint16_t *q = (uint16_t *)dalloc((size_t)batch * H * QMLA_KV_D * 2);
    fill_bf16<<<256, 256>>>(q, (size_t)batch * H * QMLA_KV_D, 11);
    uint16_t *out = (uint16_t *)dalloc((size_t)batch * H * 512 * 2);
    float *lse = (float *)dalloc((size_t)batch * H * 4);
    qmla_decode_args a = {batch, 1, H, 1.0f / sqrtf(192.0f), q, bt, maxp, len};
    qmla_kv_cache kc[4];
    qmla_decode_plan plan[4];
    void *ws[4];
    cudaGraphExec_t gx[4];
    double bytes[4];
    for (int ci = 0; ci < 7; ci++) {
        qmla_kv_config cfg;
        qmla_error err;
        char base[8];
        snprintf(base, sizeof base, "%.4s", CFGW[ci]);
        OK(qmla_kv_parse_config(base, &cfg, &err), err);
        if (strstr(CFGW[ci], "q8"))
            cfg.meta = QMLA_CORE_META_Q8;
        cfg.sink = 4;
        cfg.window = 128;
        const qmla_kv_layout L = qmla_kv_layout_of(&cfg);
        kc[ci].cfg = cfg;
        kc[ci].pool = (uint8_t *)dalloc(pages * L.page_bytes);
        kc[ci].n_pages = pages;
        kc[ci].sink = (uint16_t *)dalloc((size_t)batch * 4 * 1152);
        kc[ci].window = (uint16_t *)dalloc((size_t)batch * 128 * 1152);
        kc[ci].batch = batch;
        if (L.bf16)
            fill_bf16<<<4096, 256>>>((uint16_t *)kc[ci].pool, pages * L.page_bytes / 2, 5);
        else
            fill_pages<<<4096, 256>>>(kc[ci].pool, pages, L, 5);
        fill_bf16<<<256, 256>>>(kc[ci].sink, (size_t)batch * 4 * 576, 6);
        fill_bf16<<<256, 256>>>(kc[ci].window, (size_t)batch * 128 * 576, 7);
        CU(cudaGetLastError());
        OK(qmla_decode_cuda_plan(&cfg, &a, ctx, 0, &plan[ci], &err), err);
        ws[ci] = dalloc(plan[ci].ws_bytes);
        /* warm up outside the graph, then capture main + combine */
        OK(qmla_decode_cuda(&kc[ci], &a, &plan[ci], ws[ci], out, lse, B->s, &err), err);
        CU(cudaStreamSynchronize(B->s));
        cudaGraph_t g;
        CU(cudaStreamBeginCapture(B->s, cudaStreamCaptureModeGlobal));
        OK(qmla_decode_cuda(&kc[ci], &a, &plan[ci], ws[ci], out, lse, B->s, &err), err);
        CU(cudaStreamEndCapture(B->s, &g));
        CU(cudaGraphInstantiate(&gx[ci], g, 0));
        CU(cudaGraphDestroy(g));
        const double prot = L.bf16 ? 0.0 : (double)batch * (ctx < 132 ? ctx : 132) * 1152;
        bytes[ci] = (double)pages * L.page_bytes + prot + (double)batch * H * 1152 + pages * 4.0;
    }
    float t[4][256];
    for (int i = 0; i < B->samples; i++)
        for (int k = 0; k < 4; k++) {
            const int ci = i % 2 ? 3 - k : k; /* alternating order */
            t[ci][i] = time_graph(B, gx[ci]);
        }
    for (int ci = 0; ci < 4; ci++) {
        res_us[ci] = median(t[ci], B->samples);
        emit(B, "decode", batch, ctx, CFG[ci], res_us[ci], res_us[ci] / res_us[0], bytes[ci]);
        cudaGraphExecDestroy(gx[ci]);
        cudaFree(kc[ci].pool);
        cudaFree(kc[ci].sink);
        cudaFree(kc[ci].window);
        cudaFree(ws[ci]);
    }
    printf("| %2d | %7ld | %8.1f | %8.1f (%.2fx, %4.0f GB/s) | %8.1f (%.2fx) | %8.1f (%.2fx) | %5.0f |"
           " %4d |\n",
           batch, ctx, res_us[0], res_us[1], res_us[1] / res_us[0], bytes[1] / (res_us[1] * 1e3),
           res_us[2], res_us[2] / res_us[0], res_us[3], res_us[3] / res_us[0],
           bytes[0] / (res_us[0] * 1e3), plan[1].n_splits);
    fflush(stdout);
    cudaFree(bt);
    cudaFree(len);
    cudaFree(q);
    cudaFree(out);
    cudaFree(lse);
    free(hbt);
}

/* --variants: one (batch, context, H, s_q) point, every kernel variant
 * (decode_cuda.h) of C4R4 / C2R4 / C8R8 beside our BF16 decode, all on the
 * same synthetic cache of the point (the variants of a configuration share
 * its pool); CUDA Graphs, L2 flushed before every sample, alternating order.
 * Rows: kind "decode h<H> sq<s_q>", config "<cfg> v<variant>" (BF16's
 * variant 0 "BF16", the reference of the ratios; its variant 3 "BF16 v3"),
 * ratio to BF16 of the same point, GB/s on the bytes read (packed pages,
 * protected BF16 rows, queries, block table). Prints one Markdown line per
 * configuration and variant. */
#define NV_MAX 32
/* --variants-q8: the configurations (q8: q8-metadata pages, kvcache.h) */
static const char *CFGQ[5] = {"BF16", "C4R4", "C2R4", "C4R4q8", "C2R4q8"};
static void bench_variants_point(bench *B, int batch, long ctx, int H, int s_q)
{
    const char *const *cfgs = B->q8 ? CFGQ : CFG;
    const int nc = B->q8 ? 5 : 4;
    const int maxp = (int)((ctx + 63) / 64);
    const size_t pages = (size_t)batch * maxp, R = (size_t)s_q * H;
    int32_t *hbt = (int32_t *)malloc(pages * 4);
    for (size_t i = 0; i < pages; i++)
        hbt[i] = (int32_t)i;
    uint64_t r = 0x1234567ull + (uint64_t)ctx * 31 + (uint64_t)batch;
    for (size_t i = pages; i > 1; i--) { /* independently owned, shuffled pages */
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        const size_t j = (size_t)(r % i);
        const int32_t t = hbt[i - 1];
        hbt[i - 1] = hbt[j];
        hbt[j] = t;
    }
    int32_t *bt = (int32_t *)dalloc(pages * 4), *len = (int32_t *)dalloc((size_t)batch * 4);
    CU(cudaMemcpy(bt, hbt, pages * 4, cudaMemcpyHostToDevice));
    fill_i32<<<64, 256>>>(len, (size_t)batch, (int32_t)ctx);
    uint16_t *q = (uint16_t *)dalloc((size_t)batch * R * QMLA_KV_D * 2);
    fill_bf16<<<256, 256>>>(q, (size_t)batch * R * QMLA_KV_D, 11);
    uint16_t *out = (uint16_t *)dalloc((size_t)batch * R * 512 * 2);
    float *lse = (float *)dalloc((size_t)batch * R * 4);
    qmla_decode_args a = {batch, s_q, H, 1.0f / sqrtf(192.0f), q, bt, maxp, len};
    qmla_kv_cache kc[5];
    int n = 0, ent_cfg[NV_MAX], ent_var[NV_MAX], ent_splits[NV_MAX];
    void *ws[NV_MAX];
    cudaGraphExec_t gx[NV_MAX];
    double bytes[5];
    for (int ci = 0; ci < nc; ci++) {
        qmla_kv_config cfg;
        qmla_error err;
        char base[8];
        snprintf(base, sizeof base, "%.4s", cfgs[ci]);
        OK(qmla_kv_parse_config(base, &cfg, &err), err);
        if (strstr(cfgs[ci], "q8"))
            cfg.meta = QMLA_CORE_META_Q8;
        cfg.sink = 4;
        cfg.window = 128;
        const qmla_kv_layout L = qmla_kv_layout_of(&cfg);
        kc[ci].cfg = cfg;
        kc[ci].pool = (uint8_t *)dalloc(pages * L.page_bytes);
        kc[ci].n_pages = pages;
        kc[ci].sink = (uint16_t *)dalloc((size_t)batch * 4 * 1152);
        kc[ci].window = (uint16_t *)dalloc((size_t)batch * 128 * 1152);
        kc[ci].batch = batch;
        if (L.bf16)
            fill_bf16<<<4096, 256>>>((uint16_t *)kc[ci].pool, pages * L.page_bytes / 2, 5);
        else
            fill_pages<<<4096, 256>>>(kc[ci].pool, pages, L, 5);
        fill_bf16<<<256, 256>>>(kc[ci].sink, (size_t)batch * 4 * 576, 6);
        fill_bf16<<<256, 256>>>(kc[ci].window, (size_t)batch * 128 * 576, 7);
        CU(cudaGetLastError());
        const double prot = L.bf16 ? 0.0 : (double)batch * (ctx < 132 ? ctx : 132) * 1152;
        bytes[ci] = (double)pages * L.page_bytes + prot + (double)batch * R * 1152 + pages * 4.0;
        for (int v = 0; v < QMLA_DECODE_VARIANTS && n < NV_MAX; v++) {
            if (!(B->vmask >> v & 1) && !(ci == 0 && v == 0))
                continue; /* --vlist (BF16's variant 0, the reference, always) */
            qmla_decode_plan plan;
            const int prc = qmla_decode_cuda_plan_variant(&cfg, &a, ctx, 0, v, &plan, &err);
            if (prc != QMLA_OK && cfg.meta == QMLA_CORE_META_Q8)
                continue; /* q8 pages: only the variants that read them (decode_cuda.h) */
            OK(prc, err);
            if (plan.variant != v && !(v == 7 && plan.variant == 2))
                continue; /* falls back to variant 0: measured already (variant 7
                           * handing a shape to variant 2 is kept, as "v7") */
            ws[n] = dalloc(plan.ws_bytes);
            OK(qmla_decode_cuda(&kc[ci], &a, &plan, ws[n], out, lse, B->s, &err), err);
            CU(cudaStreamSynchronize(B->s));
            cudaGraph_t g;
            CU(cudaStreamBeginCapture(B->s, cudaStreamCaptureModeGlobal));
            OK(qmla_decode_cuda(&kc[ci], &a, &plan, ws[n], out, lse, B->s, &err), err);
            CU(cudaStreamEndCapture(B->s, &g));
            CU(cudaGraphInstantiate(&gx[n], g, 0));
            CU(cudaGraphDestroy(g));
            ent_cfg[n] = ci;
            ent_var[n] = v;
            ent_splits[n] = plan.n_splits;
            n++;
        }
    }
    static float t[NV_MAX][256];
    for (int i = 0; i < B->samples; i++)
        for (int k = 0; k < n; k++) {
            const int e = i % 2 ? n - 1 - k : k; /* alternating order */
            t[e][i] = time_graph(B, gx[e]);
        }
    float us[NV_MAX];
    for (int e = 0; e < n; e++)
        us[e] = median(t[e], B->samples);
    char kind[32];
    snprintf(kind, sizeof kind, "decode h%d sq%d", H, s_q);
    for (int e = 0; e < n; e++) {
        const int ci = ent_cfg[e];
        char cs[16];
        if (ci == 0 && ent_var[e] == 0)
            snprintf(cs, sizeof cs, "BF16");
        else
            snprintf(cs, sizeof cs, "%s v%d", cfgs[ci], ent_var[e]);
        emit(B, kind, batch, ctx, cs, us[e], us[e] / us[0], bytes[ci]);
        const double gbs = bytes[ci] / (us[e] * 1e3);
        printf("| %3d | %3d | %2d | %7ld | %-8s | %9.1f | %5.3f | %5.0f | %5.1f %% | %4d |\n", H,
               s_q, batch, ctx, cs, us[e], us[e] / us[0], gbs, 100.0 * gbs / B->copy_gbs,
               ent_splits[e]);
        cudaGraphExecDestroy(gx[e]);
        cudaFree(ws[e]);
    }
    fflush(stdout);
    for (int ci = 0; ci < nc; ci++) {
        cudaFree(kc[ci].pool);
        cudaFree(kc[ci].sink);
        cudaFree(kc[ci].window);
    }
    cudaFree(bt);
    cudaFree(len);
    cudaFree(q);
    cudaFree(out);
    cudaFree(lse);
    free(hbt);
}

/* --sweep: the short-context plan of the default C4R4 kernel (variant 7)
 * with its pages per packed block forced to 1, 2, 3, 4, 6, 8 (protected
 * partials in blocks of their own; splits = ceil(pages below the window /
 * pps) + protected), beside our BF16 (variants 0, 3, 5), C4R4 variant 0 and
 * variant 7's own plan, at one point; rows kind "sweep h<H> sq<s_q>",
 * config "C4R4 v7 pps<p>" (ratios to BF16 variant 0). Evidence for the
 * plan's choice (H200 run 10); CUDA Graphs, L2 flushed, alternating order
 * as --variants. */
static void bench_sweep_point(bench *B, int batch, long ctx, int H, int s_q)
{
    const int maxp = (int)((ctx + 63) / 64);
    const size_t pages = (size_t)batch * maxp, R = (size_t)s_q * H;
    int32_t *hbt = (int32_t *)malloc(pages * 4);
    for (size_t i = 0; i < pages; i++)
        hbt[i] = (int32_t)i;
    uint64_t r = 0x1234567ull + (uint64_t)ctx * 31 + (uint64_t)batch;
    for (size_t i = pages; i > 1; i--) {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        const size_t j = (size_t)(r % i);
        const int32_t t = hbt[i - 1];
        hbt[i - 1] = hbt[j];
        hbt[j] = t;
    }
    int32_t *bt = (int32_t *)dalloc(pages * 4), *len = (int32_t *)dalloc((size_t)batch * 4);
    CU(cudaMemcpy(bt, hbt, pages * 4, cudaMemcpyHostToDevice));
    fill_i32<<<64, 256>>>(len, (size_t)batch, (int32_t)ctx);
    uint16_t *q = (uint16_t *)dalloc((size_t)batch * R * QMLA_KV_D * 2);
    fill_bf16<<<256, 256>>>(q, (size_t)batch * R * QMLA_KV_D, 11);
    uint16_t *out = (uint16_t *)dalloc((size_t)batch * R * 512 * 2);
    float *lse = (float *)dalloc((size_t)batch * R * 4);
    qmla_decode_args a = {batch, s_q, H, 1.0f / sqrtf(192.0f), q, bt, maxp, len};
    qmla_kv_cache kc[2];
    int n = 0, ent_cfg[NV_MAX], ent_splits[NV_MAX];
    char ent_name[NV_MAX][32];
    void *ws[NV_MAX];
    cudaGraphExec_t gx[NV_MAX];
    double bytes[2];
    const int cis[2] = {0, 1}; /* BF16, C4R4 */
    for (int k = 0; k < 2; k++) {
        const int ci = cis[k];
        qmla_kv_config cfg;
        qmla_error err;
        OK(qmla_kv_parse_config(CFG[ci], &cfg, &err), err);
        cfg.sink = 4;
        cfg.window = 128;
        const qmla_kv_layout L = qmla_kv_layout_of(&cfg);
        kc[k].cfg = cfg;
        kc[k].pool = (uint8_t *)dalloc(pages * L.page_bytes);
        kc[k].n_pages = pages;
        kc[k].sink = (uint16_t *)dalloc((size_t)batch * 4 * 1152);
        kc[k].window = (uint16_t *)dalloc((size_t)batch * 128 * 1152);
        kc[k].batch = batch;
        if (L.bf16)
            fill_bf16<<<4096, 256>>>((uint16_t *)kc[k].pool, pages * L.page_bytes / 2, 5);
        else
            fill_pages<<<4096, 256>>>(kc[k].pool, pages, L, 5);
        fill_bf16<<<256, 256>>>(kc[k].sink, (size_t)batch * 4 * 576, 6);
        fill_bf16<<<256, 256>>>(kc[k].window, (size_t)batch * 128 * 576, 7);
        CU(cudaGetLastError());
        const double prot = L.bf16 ? 0.0 : (double)batch * (ctx < 132 ? ctx : 132) * 1152;
        bytes[k] = (double)pages * L.page_bytes + prot + (double)batch * R * 1152 + pages * 4.0;
        const int bf_v[3] = {0, 3, 5}, c4_v[2] = {0, 7};
        const int nv = k == 0 ? 3 : 2 + 6;
        const int pps_f[6] = {1, 2, 3, 4, 6, 8};
        for (int e = 0; e < nv && n < NV_MAX; e++) {
            qmla_decode_plan plan;
            const int v = k == 0 ? bf_v[e] : e < 2 ? c4_v[e] : 7;
            OK(qmla_decode_cuda_plan_variant(&cfg, &a, ctx, 0, v, &plan, &err), err);
            if (k == 0 && e == 0)
                snprintf(ent_name[n], sizeof ent_name[n], "BF16");
            else if (k == 0 || e < 2)
                snprintf(ent_name[n], sizeof ent_name[n], "%s v%d", CFG[ci], v);
            else { /* forced pages per packed block, protected blocks of their own */
                if (plan.variant != 7)
                    continue; /* variant 7 runs variant 2 here: no such plan */
                const int pp = pps_f[e - 2];
                const long hi = ctx - 128 > 0 ? (ctx - 128 + 63) / 64 : 0;
                const long packed = hi > 0 ? (hi + pp - 1) / pp : 1;
                plan.pages_per_split = pp;
                plan.n_splits = (int)(packed + plan.n_prot);
                plan.sep = 1;
                const size_t rows = (size_t)batch * plan.n_splits * plan.row_tiles * 16;
                plan.ws_bytes = rows * 512 * 4 + ((rows * 4 + 15) & ~(size_t)15);
                snprintf(ent_name[n], sizeof ent_name[n], "C4R4 v7 pps%d", pp);
            }
            ws[n] = dalloc(plan.ws_bytes);
            OK(qmla_decode_cuda(&kc[k], &a, &plan, ws[n], out, lse, B->s, &err), err);
            CU(cudaStreamSynchronize(B->s));
            cudaGraph_t g;
            CU(cudaStreamBeginCapture(B->s, cudaStreamCaptureModeGlobal));
            OK(qmla_decode_cuda(&kc[k], &a, &plan, ws[n], out, lse, B->s, &err), err);
            CU(cudaStreamEndCapture(B->s, &g));
            CU(cudaGraphInstantiate(&gx[n], g, 0));
            CU(cudaGraphDestroy(g));
            ent_cfg[n] = k;
            ent_splits[n] = plan.n_splits;
            n++;
        }
    }
    static float t[NV_MAX][256];
    for (int i = 0; i < B->samples; i++)
        for (int k = 0; k < n; k++) {
            const int e = i % 2 ? n - 1 - k : k;
            t[e][i] = time_graph(B, gx[e]);
        }
    float us[NV_MAX];
    for (int e = 0; e < n; e++)
        us[e] = median(t[e], B->samples);
    char kind[32];
    snprintf(kind, sizeof kind, "sweep h%d sq%d", H, s_q);
    for (int e = 0; e < n; e++) {
        emit(B, kind, batch, ctx, ent_name[e], us[e], us[e] / us[0], bytes[ent_cfg[e]]);
        printf("| %3d | %3d | %2d | %7ld | %-13s | %9.1f | %5.3f | %4d |\n", H, s_q, batch, ctx,
               ent_name[e], us[e], us[e] / us[0], ent_splits[e]);
        cudaGraphExecDestroy(gx[e]);
        cudaFree(ws[e]);
    }
    fflush(stdout);
    for (int k = 0; k < 2; k++) {
        cudaFree(kc[k].pool);
        cudaFree(kc[k].sink);
        cudaFree(kc[k].window);
    }
    cudaFree(bt);
    cudaFree(len);
    cudaFree(q);
    cudaFree(out);
    cudaFree(lse);
    free(hbt);
}

int main(int argc, char **argv)
{
    bench B;
    memset(&B, 0, sizeof B);
    B.samples = 40;
    B.vmask = ~0u;
    const char *outp = "bench_decode.tsv", *h5p = NULL;
    int quick = 0, variants = 0, samples_set = 0, writer_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--samples") && i + 1 < argc) {
            B.samples = atoi(argv[++i]);
            samples_set = 1;
        }
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            outp = argv[++i];
        else if (!strcmp(argv[i], "--vlist") && i + 1 < argc) {
            /* a comma list of variant numbers (--variants*, --profile-variants);
             * anything else is a usage error naming it (review11: a
             * malformed list timed no variant without a word) */
            const char *v = argv[++i], *p = v;
            B.vmask = 0;
            for (;;) {
                char *end;
                if (*p < '0' || *p > '9')
                    break;
                const long k = strtol(p, &end, 10);
                if (k >= QMLA_DECODE_VARIANTS)
                    break;
                B.vmask |= 1u << k;
                p = end;
                if (*p != ',')
                    break;
                p++;
            }
            if (*p || !B.vmask || p[-1] == ',') {
                fprintf(stderr, "bench_decode: --vlist \"%s\": expected a comma list of "
                                "variant numbers 0..%d\n", v, QMLA_DECODE_VARIANTS - 1);
                return 2;
            }
        } else if (!strcmp(argv[i], "--h5") && i + 1 < argc)
            h5p = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--profile"))
            quick = 2;
        else if (!strcmp(argv[i], "--profile-short"))
            quick = 3;
        else if (!strcmp(argv[i], "--writer"))
            writer_only = 1;
        else if (!strcmp(argv[i], "--variants"))
            variants = 1;
        else if (!strcmp(argv[i], "--variants-quick"))
            variants = 2;
        else if (!strcmp(argv[i], "--variants-fmla"))
            variants = 3;
        else if (!strcmp(argv[i], "--sweep"))
            variants = 4;
        else if (!strcmp(argv[i], "--variants-q8")) {
            variants = 5;
            B.q8 = 1;
        }
        else if (!strcmp(argv[i], "--profile-variants"))
            quick = 4;
        else if (!strcmp(argv[i], "--profile-h128"))
            quick = 5;
        else {
            fprintf(stderr, "usage: bench_decode [--samples N] [--out F.tsv] [--h5 F.h5] "
                            "[--quick | --writer | --profile | --profile-short | --variants | "
                            "--variants-quick | --variants-fmla | --variants-q8 | --sweep | "
                            "--profile-variants | "
                            "--profile-h128]\n");
            return 2;
        }
    }
    if (variants && !samples_set)
        B.samples = 10;
    if (B.samples < 3 || B.samples > 250)
        B.samples = 40;
    qmla_error err;
    if (!qmla_cuda_available(&err)) {
        printf("SKIP: %s\n", err.msg);
        return 77;
    }
    char h5buf[1024], tsvtmp[1100], cmd[2048] = "";
    if (!h5p) {
        const size_t k = strlen(outp);
        snprintf(h5buf, sizeof h5buf, "%.*s.h5",
                 (int)(k > 4 && !strcmp(outp + k - 4, ".tsv") ? k - 4 : k), outp);
        h5p = h5buf;
    }
    for (int i = 0; i < argc; i++) {
        const size_t k = strlen(cmd);
        snprintf(cmd + k, sizeof cmd - k, "%s%s", i ? " " : "", argv[i]);
    }
    snprintf(tsvtmp, sizeof tsvtmp, "%s.tmp.%ld", outp, (long)getpid());
    B.tsv = fopen(tsvtmp, "w"); /* renamed over outp when complete */
    if (!B.tsv) {
        perror(tsvtmp);
        return 1;
    }
    fprintf(B.tsv, "kind\tbatch\tcontext\tconfig\tmedian_us\tratio_to_bf16\tbytes\tGBps\tpct_copy\n");
    CU(cudaStreamCreate(&B.s));
    CU(cudaEventCreate(&B.e0));
    CU(cudaEventCreate(&B.e1));
    B.flush_bytes = (size_t)256 << 20; /* > 4x the 60 MB L2 */
    B.flush = dalloc(B.flush_bytes);
    cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, L2 %d MB; samples per point %d\n", prop.name,
           prop.multiProcessorCount, prop.l2CacheSize >> 20, B.samples);
    if (quick >= 2) { /* a few launches of each kernel, for ncu */
        B.samples = 3;
        B.copy_gbs = 1.0;
        float r[4];
        if (quick == 2) {
            bench_qdq(&B);
            bench_writer(&B);
            bench_decode_point(&B, 32, 65536, r);
        } else if (quick == 3) {
            bench_decode_point(&B, 8, 4096, r); /* --profile-short */
        } else if (quick == 4) { /* --profile-variants: every variant at b 32, 64K, H 16 and 128 */
            bench_variants_point(&B, 32, 65536, 16, 1);
            bench_variants_point(&B, 32, 65536, 128, 1);
        } else { /* --profile-h128: every variant at b 32, 64K, H 128 only */
            bench_variants_point(&B, 32, 65536, 128, 1);
        }
        fclose(B.tsv);
        remove(tsvtmp);
        return 0;
    }
    copy_bandwidth(&B);
    if (variants == 4) { /* --sweep: b 1 and 8, 4K and 32K, H 16 and 128, s_q 1 and 2 */
        printf("\n| H | s_q | b | context | kernel | us | x BF16 | splits |\n"
               "|---|---|---|---|---|---|---|---|\n");
        const int bs[] = {1, 8}, hs[] = {16, 128}, sqs[] = {1, 2};
        const long cx[] = {4096, 32768};
        for (int hi = 0; hi < 2; hi++)
            for (int si = 0; si < 2; si++)
                for (int bi = 0; bi < 2; bi++)
                    for (int xi = 0; xi < 2; xi++)
                        bench_sweep_point(&B, bs[bi], cx[xi], hs[hi], sqs[si]);
    } else if (variants == 5) { /* --variants-q8: H 16, s_q 1, b 8 and 32, 4K-1M */
        printf("\n| H | s_q | b | context | kernel | us | x BF16 | GB/s | %% of copy | splits |\n"
               "|---|---|---|---|---|---|---|---|---|---|\n");
        const int bs[] = {8, 32};
        const long cx[] = {4096, 32768, 131072, 262144, 1048576};
        for (int bi = 0; bi < 2; bi++)
            for (int xi = 0; xi < 5; xi++)
                bench_variants_point(&B, bs[bi], cx[xi], 16, 1);
    } else if (variants) {
        printf("\n| H | s_q | b | context | kernel | us | x BF16 | GB/s | %% of copy | splits |\n"
               "|---|---|---|---|---|---|---|---|---|---|\n");
        const int bs[] = {1, 8, 32, 64}, hs[] = {16, 128}, sqs[] = {1, 2};
        const long cx[] = {4096, 32768, 131072, 1048576};
        for (int hi = 0; hi < 2; hi++)
            for (int si = 0; si < 2; si++)
                for (int bi = 0; bi < 4; bi++)
                    for (int xi = 0; xi < 4; xi++) {
                        /* --variants-quick: H 16 s_q 1 whole, the rest at 4K and 128K */
                        if (variants == 2 && (hi || si) && (xi == 1 || xi == 3))
                            continue;
                        /* --variants-fmla: s_q 1, b to 32, contexts to 128K */
                        if (variants == 3 && (si || bi == 3 || xi == 3))
                            continue;
                        if ((long)bs[bi] * cx[xi] > 32L * 1048576)
                            continue; /* b 64, 1M: the four pools exceed the memory */
                        bench_variants_point(&B, bs[bi], cx[xi], hs[hi], sqs[si]);
                    }
    } else if (writer_only) {
        bench_qdq(&B);
        bench_writer(&B);
    } else {
    bench_qdq(&B);
    bench_writer(&B);
    printf("\n| b | context | BF16 us | C4R4 us (ratio, GB/s) | C2R4 us | C8R8 us | BF16 GB/s |"
           " splits |\n|---|---|---|---|---|---|---|---|\n");
    const long full[] = {4096, 16384, 32768, 65536, 131072, 262144, 1048576};
    const long q8[] = {4096, 16384, 65536}, q32[] = {4096, 65536}; /* --quick */
    const long *ctx8 = quick ? q8 : full, *ctx32 = quick ? q32 : full;
    const int n8 = quick ? 3 : 7, n32 = quick ? 2 : 7;
    float res[4];
    for (int i = 0; i < n8; i++)
        bench_decode_point(&B, 8, ctx8[i], res);
    for (int i = 0; i < n32; i++)
        bench_decode_point(&B, 32, ctx32[i], res);
    }
    if (fclose(B.tsv) != 0 || rename(tsvtmp, outp) != 0) {
        perror(outp);
        remove(tsvtmp);
        return 1;
    }
    char dev[300];
    snprintf(dev, sizeof dev, "%s, %d SMs, L2 %d MB", prop.name, prop.multiProcessorCount,
             prop.l2CacheSize >> 20);
    const char *pn[] = {"samples", "heads", "s_q", "page_tokens", "group", "sink", "window",
                        "l2_flush_bytes", "copy_GBps", "quick"};
    const double pv[] = {(double)B.samples, variants ? -1.0 : 16.0, variants ? -1.0 : 1.0, 64, 64, 4,
                         128, (double)B.flush_bytes, B.copy_gbs,
                         (double)(variants ? 10 + variants : writer_only ? 16 : quick)};
    const qmla_bench_meta meta = {"bench_decode", cmd, dev, sizeof pn / sizeof pn[0], pn, pv};
    if (qmla_bench_write_h5(h5p, &meta, B.rows, B.n_rows, &err)) {
        fprintf(stderr, "bench_decode: %s\n", err.msg);
        return 1;
    }
    printf("results: %s, %s\n", outp, h5p);
    return 0;
}
