/* kernels/decode_cuda.h — paged MLA decode attention on the GPU over the low-bit
 * cache (C4R4, C2R4, C8R8 with sink/window BF16 protection) and over a BF16
 * cache with the same structure (layout: include/qmla/kvcache.h;
 * description: docs/decode.md). Twin: qmla_decode_ref (lib/cache/decode_ref.c).
 * Metadata: f16 pages everywhere; q8 pages (cfg.meta = QMLA_CORE_META_Q8)
 * in the fast kernel's variants 0, 1, 3, 4 and 7 (the default) of C4R4 /
 * C2R4 G 64 (decode_fast_q8_kernel, H200 run 13); the plan and decode
 * refuse q8 pages under every other variant and configuration with
 * QMLA_EINVAL naming the variant, the layout and the metadata, and the
 * gather refuses them (qmla_kv_require_f16_meta); the C twin reads both.
 *
 * Per sequence b and query row r = i * H + h (query token i < s_q, head h):
 *   logits  z_t = scale * q[b, i, h, :] . k_t      (576 channels, t visible:
 *                                                     t <= len - s_q + i)
 *   out[b, i, h, :] = sum_t softmax(z)_t v_t       (v_t = k_t[0:512])
 *   lse[b, i, h]    = log sum_t exp(z_t)           (natural log)
 * with k_t the token as reconstructed (kvcache.h): BF16 for protected
 * tokens, for the others BF16(fmaf(q, s, l)) (C8R8 variants 0, 2, 3, 5) or
 * fmaf(q, s, l) unrounded (C4R4, C2R4, and C8R8's default variant 10:
 * tensor-core products of the raw codes, scale and minimum applied per
 * group after; qmla_decode_cuda_packed_f32). Products
 * in BF16 tensor-core MMA with float32 accumulation; one global softmax
 * over the splits.
 *
 * Work: split-KV. A plan (qmla_decode_cuda_plan, host only, no kernel)
 * fixes the splits for a batch shape and can be reused while the shape is
 * unchanged (across layers and steps); the main kernel writes per-split
 * partial outputs and LSEs into the caller's workspace, a combine kernel
 * merges them. Output: out [b, s_q, H, 512] BF16 bits, lse [b, s_q, H]
 * float32. Inputs and outputs are device pointers; the launcher validates
 * and enqueues on `stream`, it neither allocates nor synchronises.
 * Limits: H * s_q <= QMLA_DECODE_MAX_ROWS; 16-byte aligned q, pool, buffers.
 * Test: tests/cache/test_decode_cuda.c (suite cuda); benchmark: bench/bench_decode.
 */
#ifndef QMLA_KERNELS_DECODE_H
#define QMLA_KERNELS_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "qmla/decode.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QMLA_DECODE_MAX_ROWS 1024

typedef struct qmla_decode_plan {
    int n_splits;        /* partials per sequence (fast kernel: grid n_splits - n_prot) */
    int pages_per_split;
    int row_tiles;       /* ceil(s_q * H / 16) */
    int n_prot;          /* C4R4 / C2R4: partials of protected tokens (of n_splits) */
    size_t ws_bytes;     /* device workspace the launch needs */
    int variant;         /* kernel variant the plan was made for (below) */
    int sep;             /* variants 1, 4, 7: protected partials in blocks of their own */
} qmla_decode_plan;

/* Kernel variants (numbered as llm.c's dev/cuda kernels; docs/decode.md):
 *   0  the baseline (the default of BF16): C4R4 / C2R4 decode_fast_kernel (tensor cores on the
 *      codes, protected tokens after the pages of the last blocks), C8R8
 *      and BF16 through the BF16-tile kernels;
 *   1  C4R4 / C2R4: decode_fast_kernel with the short-context plan (at
 *      least 2 pages per packed block; the protected partials in blocks of
 *      their own beside the packed ones where one wave has room) and the
 *      split-parallel combine;
 *   2  C4R4 / C2R4 / C8R8: the warp-specialised kernel (producer warps
 *      dequantize pages into shared BF16 tiles, consumer warps run mma.sync
 *      for up to 32 query rows per tile; attends to BF16-rounded values),
 *      split-parallel combine;
 *   3  every configuration (BF16 too): variant 0 with the split-parallel
 *      combine (16 warps share the splits of a row instead of one walking
 *      them all);
 *   4  C4R4 / C2R4: variant 1 with the split-parallel combine only above 16
 *      partials (the old one at few splits);
 *   5  BF16, C4R4 / C2R4 / C8R8: the head rows of a query on one tile
 *      (decode_mr_kernel: 32 query rows per block, each page's BF16 tile
 *      loaded or dequantized once for them and every ldmatrix fragment of
 *      it shared by their MMAs; attends to BF16-rounded packed values, no
 *      protected partials), split-parallel combine;
 *   6  C4R4 / C2R4: decode_fast_mr_kernel, variant 5's idea on the tensor-
 *      core-on-codes kernel: 32 query rows per block of 8 warps (16 at one
 *      row tile: then decode_fast_kernel with variant 3's plan), each page's
 *      codes fetched and unpacked once for both row tiles' MMAs, one block
 *      per SM; the same arithmetic per row as variant 0 (unrounded packed
 *      values, protected partials), split-parallel combine.
 *   7  the default of C4R4 / C2R4 (qmla_decode_cuda_plan), a shape
 *      heuristic (H200 runs 8 and 10, docs/decode.md): decode_fast_kernel
 *      with variant 1's short-context plan, one page per packed block where
 *      the grid of one page per block then fits one block per SM, and the
 *      combine chosen by batch shape: the old one at <= 16 partials and
 *      >= 512 rows x sequences, the channel-split combine3 (2 or 4 blocks
 *      per row) below 264 rows x sequences from 64 partials, else the
 *      split-parallel combine; attends to unrounded packed values as
 *      variant 0. Except for C4R4 at 2 or more row tiles, 8 to 16 row tiles x
 *      sequences and max_len <= 4096: there the plan is variant 2's (its
 *      `variant` 2, BF16-rounded packed values: use
 *      qmla_decode_cuda_variant_packed_f32(cfg, plan.variant)).
 *   8  C4R4: decode_wg_kernel (H200 run 11, docs/decode.md), Hopper wgmma
 *      with the codes as the A operand from registers (tokens as M in QK,
 *      output dims as M in PV), queries and probabilities as B in shared
 *      memory, scale and minimum per group after the products; one
 *      warpgroup per block and row tile, 2 blocks per SM; the protected
 *      partials in a launch of their own (decode_prot_kernel) before it;
 *      variant 7's combine; attends to unrounded packed values (packed_f32
 *      1). Needs sm_90a (a build for another gpu_arch plans variant 0 instead:
 *      qmla_decode_cuda_variant_built). H200 run 11: correct, 1.005-2.04x variant 7's
 *      time (run 11c; latency-bound at 8 warps per SM): not in the
 *      default plan.
 *   9  C8R8 G 64: decode_fast8_kernel, variant 0's tensor cores on the
 *      codes for 8-bit codes (a byte is the BF16 value n 2^-133 exactly),
 *      one block per SM with four page stages, variant 7's plan for one
 *      block per SM (protected partials as variant 7) and combine; attends
 *      to unrounded packed values (packed_f32 1).
 *  10  C8R8 G 64: decode_fast8b_kernel, variant 9's arithmetic at two
 *      blocks per SM (two page stages; each warp's QK on two groups for
 *      half the page's tokens, so 4 score partials), variant 7's plan
 *      and combine; packed_f32 1. The default of C8R8: a plan for
 *      variant 7 of C8R8 is variant 10's (its `variant` 10; H200 run 13,
 *      docs/decode.md: 0.29-0.76x variant 0's time at all 60 points).
 * (An earlier variant 6, two warp groups of 8 on one BF16 tile, was
 * measured in H200 run 6 at commit 9829c8b and removed: slower than 5, and
 * racecheck reported its BF16 hand-off; docs/decode.md. The number was
 * reused in H200 run 8.)
 * A variant that does not apply to a configuration falls back to 0 (the
 * plan's `variant` says which one runs). */
#define QMLA_DECODE_VARIANTS 11

/* Plan for a batch (a->batch, s_q, heads) whose longest sequence has at most
 * max_len tokens, on a device of n_sm multiprocessors (0: ask the current
 * device). Host arithmetic only. The default variant: 7 for C4R4 / C2R4,
 * 10 for C8R8, 0 for BF16 (the plan's `variant`); with q8 metadata
 * (C4R4 / C2R4) variant 7 keeps the shapes it hands to variant 2 on f16
 * pages. */
int qmla_decode_cuda_plan(const qmla_kv_config *cfg, const qmla_decode_args *a,
                          long max_len, int n_sm, qmla_decode_plan *plan, qmla_error *err);

/* The same for kernel variant `variant` (0 .. QMLA_DECODE_VARIANTS - 1);
 * qmla_decode_cuda_plan is variant 7 (which is variant 0 for BF16, 10 for C8R8). */
int qmla_decode_cuda_plan_variant(const qmla_kv_config *cfg, const qmla_decode_args *a,
                                  long max_len, int n_sm, int variant, qmla_decode_plan *plan,
                                  qmla_error *err);
/* 1 when this build has the kernel of `variant` (0 .. QMLA_DECODE_VARIANTS
 * - 1): all but variant 8 always; variant 8 only in a build for sm_90a
 * (meson gpu_arch 90a, the default); elsewhere its plan falls back to 0. */
int qmla_decode_cuda_variant_built(int variant);
/* Short name of a variant ("v0 fast", ...). */
const char *qmla_decode_cuda_variant_name(int variant);
/* qmla_decode_cuda_packed_f32 for the variant (0 for variants 2 and 5;
 * variant 7 gives 1, and its C4R4 plans that run variant 2 say so in
 * `variant`: pass the plan's variant). */
int qmla_decode_cuda_variant_packed_f32(const qmla_kv_config *cfg, int variant);

/* Enqueue main + combine. Every seq_len must be <= the plan's max_len;
 * block_table rows must cover ceil(len / 64) pages. ws: plan->ws_bytes,
 * 16-byte aligned. */
int qmla_decode_cuda(const qmla_kv_cache *kc, const qmla_decode_args *a,
                     const qmla_decode_plan *plan, void *ws, uint16_t *out, float *lse,
                     cudaStream_t stream, qmla_error *err);

/* 1 when the decode kernel of this configuration attends to packed values
 * unrounded, fmaf(q, s, l) (C4R4, C2R4, C8R8: scale and minimum applied after
 * tensor-core products of the codes), 0 when to BF16(fmaf(q, s, l)): the
 * packed_f32 argument of qmla_decode_ref_model that is its reference.
 * For C4R4 / C2R4 this is variant 0's (and variant 7's) answer; the default
 * plan of a C4R4 batch shape that runs variant 2 (variant 7's heuristic)
 * attends to BF16-rounded values. For C8R8 it is the default plan's
 * (variant 10, unrounded); C8R8's variant 0, the BF16-tile kernel, rounds.
 * qmla_decode_cuda_variant_packed_f32(cfg, plan.variant) answers for a
 * plan. */
int qmla_decode_cuda_packed_f32(const qmla_kv_config *cfg);

/* Test hook: every page of every sequence reconstructed by the decode
 * kernel's own unpacking (BF16 bits, out [b, max_pages * 64, 576], zero rows
 * past each sequence), to compare bit for bit with qmla_kv_token_ref.
 * Low-bit configurations with group 64 only. */
int qmla_kv_gather_cuda(const qmla_kv_cache *kc, const qmla_decode_args *a, uint16_t *out,
                        cudaStream_t stream, qmla_error *err);

#ifdef __cplusplus
}
#endif
#endif
