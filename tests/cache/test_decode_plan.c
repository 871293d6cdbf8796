/* test_decode_plan.c — the decode plan's kernel variants (kernels/decode.cu,
 * qmla_decode_cuda_plan_variant; host arithmetic only, no GPU needed):
 *  - the default plan (qmla_decode_cuda_plan) is variant 7 for C4R4 / C2R4,
 *    variant 10 for C8R8 (variant 7 of C8R8 is 10) and variant 0 for BF16,
 *    field for field;
 *  - variant 7 (C4R4 / C2R4): variant 1's plan, except one page per packed
 *    block (protected blocks of their own) exactly where that grid fits one
 *    block per SM, and (C4R4 only) variant 2's plan (variant 2) exactly at
 *    >= 2 row tiles, 8-16 row tiles x sequences and contexts <= 4096;
 *  - variant 1 (C4R4 / C2R4 short-context plan): a grid of one wave of 2
 *    blocks per SM, at least 2 pages per packed block, the packed blocks
 *    covering the pages below the window, the protected partials n_prot
 *    as variant 0's and in blocks of their own where the wave has room;
 *  - variant 2 (warp-specialised tile kernel): no protected partials, one
 *    block per SM in one wave, pages covered; C8R8 too;
 *  - variant 3: variant 0's plan (only its combine differs), BF16 too;
 *  - variant 4: variant 1's plan (only its combine choice differs);
 *  - variant 5 (head rows on one tile): every configuration, no protected
 *    partials, one block per SM in one wave, pages covered;
 *  - variant 6 (the fast kernel with two row tiles per page): C4R4 / C2R4
 *    only, variant 0's protected partials, one wave of one block per SM
 *    (two at one row tile, variant 0's plan there), pages covered;
 *  - variants 9 and 10 (C8R8 codes on the tensor cores): C8R8 only,
 *    variant 7's plan for one (9) or two (10) blocks per SM, protected
 *    partials, packed_f32 1;
 *  - fall-backs: BF16 runs variant 0 under 1, 2, 4; C8R8 under 1 and 4;
 *  - an unknown variant is an error naming it;
 *  - q8-metadata pages: the fast kernel's variants 0, 1, 3, 4, 7 of C4R4 /
 *    C2R4 plan them exactly as f16 pages (every shape above), except that
 *    variant 7 never hands a shape to variant 2 (q8 keeps variant 7 there,
 *    with variant 1's plan or its one-page plan); the default plan is
 *    variant 7's; variants 2, 5, 6, 8 and every variant of C8R8 refuse
 *    them with QMLA_EINVAL naming the variant, the layout and q8 metadata,
 *    in the plan and in decode (before touching a pointer); the gather
 *    refuses them (it reads f16 metadata); the GPU writer accepts them; a
 *    BF16 cache ignores the field.
 * Suite unit (linked with the CUDA kernels' library, but launches nothing). */
#include "check.h"
#include "decode_cuda.h"
#include "kvcache_cuda.h"
#include "qmla/decode.h"

#include <stdio.h>
#include <string.h>

static qmla_kv_config cfg_of(const char *name)
{
    qmla_kv_config c;
    qmla_error err;
    if (qmla_kv_parse_config(name, &c, &err))
        memset(&c, 0, sizeof c);
    c.sink = 4;
    c.window = 128;
    return c;
}

int main(void)
{
    const int n_sm = 132;
    const uint16_t q0 = 0;
    const int32_t z = 0;
    const int batches[] = {1, 8, 32, 64}, heads[] = {16, 128}, sqs[] = {1, 2};
    const long ctxs[] = {1, 65, 200, 4096, 32768, 131072, 1048576};
    const char *names[] = {"C4R4", "C2R4", "C8R8", "BF16"};
    qmla_error err;
    for (int ni = 0; ni < 4; ni++) {
        const qmla_kv_config cfg = cfg_of(names[ni]);
        const int fast = ni < 2, lowbit = ni < 3;
        for (int bi = 0; bi < 4; bi++)
            for (int hi = 0; hi < 2; hi++)
                for (int si = 0; si < 2; si++)
                    for (int ci = 0; ci < 7; ci++) {
                        const qmla_decode_args a = {batches[bi], sqs[si], heads[hi], 1.0f, &q0,
                                                    &z, 1, &z};
                        const long len = ctxs[ci], pages = (len + 63) / 64;
                        const int tiles = (sqs[si] * heads[hi] + 15) / 16;
                        qmla_decode_plan pd, p0, pv, p, p7, p2;
                        /* variant 7 hands these shapes to variant 2 */
                        const int ws7 = ni == 0 && tiles >= 2 && (long)a.batch * tiles >= 8 &&
                                        (long)a.batch * tiles <= 16 && len <= 4096;
                        CHECK_OK(qmla_decode_cuda_plan_variant(&cfg, &a, len, n_sm, 2, &p2, &err),
                                 err);
                        CHECK_OK(qmla_decode_cuda_plan(&cfg, &a, len, n_sm, &pd, &err), err);
                        CHECK_OK(qmla_decode_cuda_plan_variant(&cfg, &a, len, n_sm, 0, &p0, &err),
                                 err);
                        CHECK_OK(qmla_decode_cuda_plan_variant(&cfg, &a, len, n_sm,
                                                               fast ? 7 : ni == 2 ? 10 : 0, &pv,
                                                               &err),
                                 err);
                        CHECK(p0.variant == 0 &&
                                  pd.variant == (ws7 ? 2 : fast ? 7 : ni == 2 ? 10 : 0) &&
                                  pv.variant == pd.variant && pd.n_splits == pv.n_splits &&
                                  pd.pages_per_split == pv.pages_per_split &&
                                  pd.n_prot == pv.n_prot && pd.ws_bytes == pv.ws_bytes &&
                                  pd.row_tiles == pv.row_tiles && pd.sep == pv.sep,
                              "%s: the default plan is not variant %d's", names[ni],
                              fast ? 7 : ni == 2 ? 10 : 0);
                        /* variant 1 */
                        CHECK_OK(qmla_decode_cuda_plan_variant(&cfg, &a, len, n_sm, 1, &p, &err),
                                 err);
                        CHECK(p.variant == (fast ? 1 : 0), "%s: variant 1 runs %d", names[ni],
                              p.variant);
                        if (fast) {
                            const long below = len > 128 ? (len - 128 + 63) / 64 : 0;
                            const long packed = p.n_splits - p.n_prot;
                            CHECK(p.n_prot == p0.n_prot && packed >= 1 &&
                                      (below == 0 || packed * p.pages_per_split >= below) &&
                                      (below == 0 || packed <= p.n_prot || (packed - 1) * p.pages_per_split < below),
                                  "%s b %d H %d len %ld: v1 %d splits, %d pages each, %ld "
                                  "below the window",
                                  names[ni], a.batch, a.heads, len, p.n_splits, p.pages_per_split,
                                  below);
                            /* one wave whenever the batch leaves room for it; the
                             * protected partials in blocks of their own when they fit
                             * beside the packed blocks; at least 2 pages per block */
                            const long grid = p.sep ? p.n_splits : packed;
                            if ((long)a.batch * tiles * p.n_prot <= 2L * n_sm)
                                CHECK((long)a.batch * tiles * grid <= 2L * n_sm,
                                      "%s b %d H %d s_q %d len %ld: v1 grid %ld blocks over one wave",
                                      names[ni], a.batch, a.heads, a.s_q, len,
                                      (long)a.batch * tiles * grid);
                            if ((long)a.batch * tiles * (p0.n_splits - p0.n_prot + p.n_prot) <=
                                2L * n_sm)
                                CHECK(p.sep, "%s b %d H %d len %ld: v1 protected blocks not "
                                             "separate though the wave has room",
                                      names[ni], a.batch, a.heads, len);
                            CHECK(p.pages_per_split >= (below < 2 ? 1 : 2),
                                  "%s b %d len %ld: v1 %d pages per block", names[ni], a.batch,
                                  len, p.pages_per_split);
                        } else {
                            CHECK(p.sep == 0, "%s: sep without variant 1", names[ni]);
                        }
                        /* variant 7: variant 1's plan, but one page per block where
                         * that grid (and the protected blocks) fits one block per SM */
                        {
                            qmla_decode_plan p1 = p;
                            CHECK_OK(qmla_decode_cuda_plan_variant(&cfg, &a, len, n_sm, 7, &p7,
                                                                   &err),
                                     err);
                            CHECK(p7.variant == (ws7 ? 2 : fast ? 7 : ni == 2 ? 10 : 0),
                                  "%s: variant 7 runs %d",
                                  names[ni], p7.variant);
                            if (ws7)
                                CHECK(p7.n_splits == p2.n_splits &&
                                          p7.pages_per_split == p2.pages_per_split &&
                                          p7.n_prot == 0 && p7.sep == 0 &&
                                          p7.ws_bytes == p2.ws_bytes,
                                      "%s b %d H %d s_q %d len %ld: v7 is not v2's plan", names[ni],
                                      a.batch, a.heads, a.s_q, len);
                            else if (fast) {
                                const long below = len > 128 ? (len - 128 + 63) / 64 : 0;
                                const long packed = p7.n_splits - p7.n_prot;
                                const int tiny =
                                    (long)a.batch * tiles * ((below > 0 ? below : 1) + p7.n_prot) <= n_sm;
                                CHECK(p7.n_prot == p0.n_prot && packed >= 1 &&
                                          (below == 0 || packed * p7.pages_per_split >= below) &&
                                          (below == 0 || packed <= p7.n_prot ||
                                           (packed - 1) * p7.pages_per_split < below),
                                      "%s b %d H %d len %ld: v7 %d splits, %d pages each", names[ni],
                                      a.batch, a.heads, len, p7.n_splits, p7.pages_per_split);
                                if (tiny)
                                    CHECK(p7.pages_per_split == 1 && p7.sep == 1 &&
                                              (long)a.batch * tiles * p7.n_splits <= n_sm,
                                          "%s b %d H %d s_q %d len %ld: v7 tiny grid: %d pages "
                                          "per block, sep %d, %d splits",
                                          names[ni], a.batch, a.heads, a.s_q, len,
                                          p7.pages_per_split, p7.sep, p7.n_splits);
                                else
                                    CHECK(p7.n_splits == p1.n_splits &&
                                              p7.pages_per_split == p1.pages_per_split &&
                                              p7.sep == p1.sep && p7.ws_bytes == p1.ws_bytes,
                                          "%s b %d H %d s_q %d len %ld: v7 is not v1's plan",
                                          names[ni], a.batch, a.heads, a.s_q, len);
                                if ((long)a.batch * tiles * p7.n_prot <= 2L * n_sm)
                                    CHECK((long)a.batch * tiles *
                                                  (p7.sep ? p7.n_splits : packed) <=
                                              2L * n_sm,
                                          "%s b %d H %d s_q %d len %ld: v7 grid over one wave",
                                          names[ni], a.batch, a.heads, a.s_q, len);
                            } else if (ni != 2) { /* (C8R8: variant 10's plan, below) */
                                CHECK(p7.sep == 0, "%s: sep without variant 7", names[ni]);
                            }
                        }
                        /* q8 metadata (fast configurations): variant 1 (p), 7 (p7) and the
                         * others as f16; variant 7 keeps the shapes it hands to variant 2 */
                        if (fast) {
                            qmla_kv_config cq = cfg;
                            cq.meta = QMLA_CORE_META_Q8;
                            const int qv[5] = {0, 1, 3, 4, 7};
                            for (int k = 0; k < 5; k++) {
                                qmla_decode_plan pf, pq;
                                CHECK_OK(qmla_decode_cuda_plan_variant(&cfg, &a, len, n_sm, qv[k],
                                                                       &pf, &err),
                                         err);
                                CHECK_OK(qmla_decode_cuda_plan_variant(&cq, &a, len, n_sm, qv[k],
                                                                       &pq, &err),
                                         err);
                                if (qv[k] == 7 && ws7) {
                                    const long below = len > 128 ? (len - 128 + 63) / 64 : 0;
                                    const int tiny = (long)a.batch * tiles *
                                                         ((below > 0 ? below : 1) + p.n_prot) <= n_sm;
                                    CHECK(pq.variant == 7 && pq.n_prot == p.n_prot &&
                                              (tiny ? pq.pages_per_split == 1 && pq.sep == 1
                                                    : pq.n_splits == p.n_splits &&
                                                          pq.pages_per_split == p.pages_per_split &&
                                                          pq.sep == p.sep),
                                          "%s q8 b %d H %d s_q %d len %ld: v7 runs %d (%d splits, "
                                          "%d pages each, sep %d)",
                                          names[ni], a.batch, a.heads, a.s_q, len, pq.variant,
                                          pq.n_splits, pq.pages_per_split, pq.sep);
                                } else {
                                    CHECK(pq.variant == pf.variant && pq.n_splits == pf.n_splits &&
                                              pq.pages_per_split == pf.pages_per_split &&
                                              pq.n_prot == pf.n_prot && pq.sep == pf.sep &&
                                              pq.row_tiles == pf.row_tiles &&
                                              pq.ws_bytes == pf.ws_bytes,
                                          "%s q8 b %d H %d s_q %d len %ld: variant %d plan is not "
                                          "f16's", names[ni], a.batch, a.heads, a.s_q, len, qv[k]);
                                }
                                if (qv[k] == 7) {
                                    qmla_decode_plan pqd;
                                    CHECK_OK(qmla_decode_cuda_plan(&cq, &a, len, n_sm, &pqd, &err),
                                             err);
                                    CHECK(pqd.variant == 7 && pqd.n_splits == pq.n_splits &&
                                              pqd.pages_per_split == pq.pages_per_split &&
                                              pqd.sep == pq.sep && pqd.ws_bytes == pq.ws_bytes,
                                          "%s q8: the default plan is not variant 7's", names[ni]);
                                }
                            }
                        }
                        /* variant 2 */
                        CHECK_OK(qmla_decode_cuda_plan_variant(&cfg, &a, len, n_sm, 2, &p, &err),
                                 err);
                        CHECK(p.variant == (lowbit ? 2 : 0), "%s: variant 2 runs %d", names[ni],
                              p.variant);
                        if (lowbit) {
                            const int groups = (tiles + 1) / 2;
                            CHECK(p.n_prot == 0 && p.row_tiles == tiles &&
                                      (pages == 0 || (long)p.n_splits * p.pages_per_split >= pages) &&
                                      (pages <= 1 || (long)(p.n_splits - 1) * p.pages_per_split < pages),
                                  "%s b %d len %ld: v2 %d splits of %d pages", names[ni], a.batch,
                                  len, p.n_splits, p.pages_per_split);
                            if ((long)a.batch * groups <= n_sm)
                                CHECK((long)a.batch * groups * p.n_splits <= n_sm,
                                      "%s b %d H %d len %ld: v2 grid over one wave", names[ni],
                                      a.batch, a.heads, len);
                        }
                        /* variant 5: every tile configuration, BF16 too; 32 rows
                         * per block (16 at one row tile), no protected partials,
                         * one block per SM in one wave, pages covered */
                        for (int v = 5; v <= 5; v++) {
                            CHECK_OK(qmla_decode_cuda_plan_variant(&cfg, &a, len, n_sm, v, &p, &err),
                                     err);
                            CHECK(p.variant == v, "%s: variant %d runs %d", names[ni], v, p.variant);
                            const int groups = (tiles + 1) / 2;
                            CHECK(p.n_prot == 0 && p.sep == 0 && p.row_tiles == tiles &&
                                      (pages == 0 || (long)p.n_splits * p.pages_per_split >= pages) &&
                                      (pages <= 1 || (long)(p.n_splits - 1) * p.pages_per_split < pages),
                                  "%s b %d len %ld: v%d %d splits of %d pages", names[ni], a.batch,
                                  len, v, p.n_splits, p.pages_per_split);
                            if ((long)a.batch * groups <= n_sm)
                                CHECK((long)a.batch * groups * p.n_splits <= n_sm,
                                      "%s b %d H %d len %ld: v%d grid over one wave", names[ni],
                                      a.batch, a.heads, len, v);
                            CHECK(qmla_decode_cuda_variant_packed_f32(&cfg, v) == 0,
                                  "%s: v%d attends to BF16-rounded values", names[ni], v);
                        }
                    }
        /* variant 6: C4R4 / C2R4 only; 32 rows per block (16 at one row
         * tile), protected partials as variant 0, one wave (one block per SM
         * at two row tiles per block, two at one), pages covered */
        for (int bi = 0; bi < 4; bi++)
            for (int hi = 0; hi < 2; hi++)
                for (int si = 0; si < 2; si++)
                    for (int ci = 0; ci < 7; ci++) {
                        const qmla_decode_args a = {batches[bi], sqs[si], heads[hi], 1.0f, &q0,
                                                    &z, 1, &z};
                        const long len = ctxs[ci], pages = (len + 63) / 64;
                        const int tiles = (sqs[si] * heads[hi] + 15) / 16;
                        qmla_decode_plan p0, p;
                        CHECK_OK(qmla_decode_cuda_plan_variant(&cfg, &a, len, n_sm, 0, &p0, &err),
                                 err);
                        CHECK_OK(qmla_decode_cuda_plan_variant(&cfg, &a, len, n_sm, 6, &p, &err),
                                 err);
                        CHECK(p.variant == (fast ? 6 : 0), "%s: variant 6 runs %d", names[ni],
                              p.variant);
                        if (!fast)
                            continue;
                        const int mt = tiles >= 2 ? 2 : 1, groups = (tiles + mt - 1) / mt;
                        const long packed = p.n_splits - p.n_prot;
                        CHECK(p.n_prot == p0.n_prot && p.sep == 0 && p.row_tiles == tiles &&
                                  packed >= p.n_prot &&
                                  (pages == 0 || packed * p.pages_per_split >= pages) &&
                                  (pages <= 1 || (packed - 1) * p.pages_per_split < pages ||
                                   packed == p.n_prot),
                              "%s b %d H %d s_q %d len %ld: v6 %d splits (%d protected) of %d pages",
                              names[ni], a.batch, a.heads, a.s_q, len, p.n_splits, p.n_prot,
                              p.pages_per_split);
                        const long per_sm = mt == 2 ? 1 : 2;
                        if ((long)a.batch * groups * p.n_prot <= per_sm * n_sm)
                            CHECK((long)a.batch * groups * packed <= per_sm * n_sm,
                                  "%s b %d H %d s_q %d len %ld: v6 grid over one wave", names[ni],
                                  a.batch, a.heads, a.s_q, len);
                        CHECK(qmla_decode_cuda_variant_packed_f32(&cfg, 6) == 1,
                              "%s: v6 attends to unrounded packed values", names[ni]);
                        if (mt == 1) /* variant 3's plan at one row tile */
                            CHECK(p.n_splits == p0.n_splits &&
                                      p.pages_per_split == p0.pages_per_split,
                                  "%s: v6 at one row tile is not variant 0's plan", names[ni]);
                    }
#ifdef QMLA_TEST_GPU_ARCH
        /* variant 8's kernel is in exactly the builds for sm_90a (meson
         * passes gpu_arch; review11: a gpu_arch 90 build did not compile) */
        CHECK(qmla_decode_cuda_variant_built(8) == !strcmp(QMLA_TEST_GPU_ARCH, "90a") &&
                  qmla_decode_cuda_variant_built(7) && !qmla_decode_cuda_variant_built(-1) &&
                  !qmla_decode_cuda_variant_built(QMLA_DECODE_VARIANTS),
              "variant 8 built %d in a build for gpu_arch %s", qmla_decode_cuda_variant_built(8),
              QMLA_TEST_GPU_ARCH);
#endif
        /* variant 8 (decode_wg_kernel): C4R4 only; the packed pages below the
         * window covered by n_splits - n_prot blocks of at least 2 pages
         * (fewer only when there are fewer), one wave of 2 blocks per SM,
         * the protected partials of variant 0 in their own launch (sep).
         * Variants 9 and 10 (decode_fast8_kernel, decode_fast8b_kernel): C8R8
         * only; variant 7's plan for one (9) or two (10) blocks per SM: the
         * packed pages below the window covered, the protected partials of
         * the fast kernel (sink + window over 64), one wave where the
         * protected partials fit it, one page per block where that whole
         * grid fits one block per SM; unrounded packed values */
        for (int v = 8; v <= 10; v++)
        for (int bi = 0; bi < 4; bi++)
            for (int hi = 0; hi < 2; hi++)
                for (int si = 0; si < 2; si++)
                    for (int ci = 0; ci < 7; ci++) {
                        const qmla_decode_args a = {batches[bi], sqs[si], heads[hi], 1.0f, &q0,
                                                    &z, 1, &z};
                        const long len = ctxs[ci];
                        const long below = len - 128 > 0 ? (len - 128 + 63) / 64 : 0;
                        const int tiles = (sqs[si] * heads[hi] + 15) / 16;
                        if (v == 8) {
                            qmla_decode_plan p0, p;
                            CHECK_OK(
                                qmla_decode_cuda_plan_variant(&cfg, &a, len, n_sm, 0, &p0, &err),
                                err);
                            CHECK_OK(
                                qmla_decode_cuda_plan_variant(&cfg, &a, len, n_sm, 8, &p, &err),
                                err);
                            /* (a build without sm_90a code: variant 0 everywhere) */
                            const int built = qmla_decode_cuda_variant_built(8);
                            CHECK(p.variant == (ni == 0 && built ? 8 : 0),
                                  "%s: variant 8 runs %d (built %d)", names[ni], p.variant, built);
                            if (ni != 0 || !built)
                                continue;
                            const long packed = p.n_splits - p.n_prot;
                            CHECK(p.n_prot == p0.n_prot && p.sep == 1 && p.row_tiles == tiles &&
                                      packed >= 1 && packed * p.pages_per_split >= below &&
                                      (below == 0 || (packed - 1) * p.pages_per_split < below) &&
                                      (below < 2 || p.pages_per_split >= 2 ||
                                       (long)a.batch * tiles * packed >=
                                           2 * n_sm - a.batch * tiles) &&
                                      (packed == 1 || (long)a.batch * tiles * packed <= 2 * n_sm),
                                  "%s b %d H %d s_q %d len %ld: v8 %d splits (%d protected) of %d "
                                  "pages",
                                  names[ni], a.batch, a.heads, a.s_q, len, p.n_splits, p.n_prot,
                                  p.pages_per_split);
                            CHECK(qmla_decode_cuda_variant_packed_f32(&cfg, 8) == 1,
                                  "%s: v8 attends to unrounded packed values", names[ni]);
                            continue;
                        }
                        const long bt = (long)a.batch * tiles,
                                   slots = (v == 9 ? 1 : 2) * (long)n_sm;
                        qmla_decode_plan p;
                        CHECK_OK(qmla_decode_cuda_plan_variant(&cfg, &a, len, n_sm, v, &p, &err),
                                 err);
                        CHECK(p.variant == (ni == 2 ? v : 0), "%s: variant %d runs %d", names[ni],
                              v, p.variant);
                        CHECK(qmla_decode_cuda_variant_packed_f32(&cfg, v) == (ni < 3),
                              "%s: v%d packed_f32 %d", names[ni], v,
                              qmla_decode_cuda_variant_packed_f32(&cfg, v));
                        if (ni != 2)
                            continue;
                        const long packed = p.n_splits - p.n_prot;
                        const int tiny = bt * ((below > 0 ? below : 1) + p.n_prot) <= n_sm;
                        CHECK(p.n_prot == (cfg.sink + cfg.window + 63) / 64 &&
                                  p.row_tiles == tiles && packed >= 1 &&
                                  packed * p.pages_per_split >= below &&
                                  (below == 0 || packed <= p.n_prot ||
                                   (packed - 1) * p.pages_per_split < below),
                              "%s b %d H %d s_q %d len %ld: v%d %d splits (%d protected) of %d pages",
                              names[ni], a.batch, a.heads, a.s_q, len, v, p.n_splits, p.n_prot,
                              p.pages_per_split);
                        if (tiny)
                            CHECK(p.pages_per_split == 1 && p.sep == 1 && bt * p.n_splits <= n_sm,
                                  "%s b %d H %d s_q %d len %ld: v%d tiny grid: %d pages per "
                                  "block, sep %d, %d splits",
                                  names[ni], a.batch, a.heads, a.s_q, len, v, p.pages_per_split,
                                  p.sep, p.n_splits);
                        if (bt * p.n_prot <= slots)
                            CHECK(bt * (p.sep ? p.n_splits : packed) <= slots,
                                  "%s b %d H %d s_q %d len %ld: v%d grid over one wave (%d "
                                  "splits, sep %d)",
                                  names[ni], a.batch, a.heads, a.s_q, len, v, p.n_splits, p.sep);
                    }
        /* variant 4: variant 1's plan (the combine choice differs) */
        {
            const qmla_decode_args a = {8, 1, 16, 1.0f, &q0, &z, 1, &z};
            qmla_decode_plan p1, p4;
            CHECK_OK(qmla_decode_cuda_plan_variant(&cfg, &a, 4096, n_sm, 1, &p1, &err), err);
            CHECK_OK(qmla_decode_cuda_plan_variant(&cfg, &a, 4096, n_sm, 4, &p4, &err), err);
            CHECK(p4.variant == (fast ? 4 : 0) && p4.n_splits == p1.n_splits &&
                      p4.pages_per_split == p1.pages_per_split && p4.n_prot == p1.n_prot &&
                      p4.sep == p1.sep,
                  "%s: variant 4 plan", names[ni]);
        }
        /* variant 3: variant 0's plan (the combine differs), BF16 too */
        {
            const qmla_decode_args a = {8, 1, 16, 1.0f, &q0, &z, 1, &z};
            qmla_decode_plan p0, p3;
            CHECK_OK(qmla_decode_cuda_plan_variant(&cfg, &a, 65536, n_sm, 0, &p0, &err), err);
            CHECK_OK(qmla_decode_cuda_plan_variant(&cfg, &a, 65536, n_sm, 3, &p3, &err), err);
            CHECK(p3.variant == 3 && p3.n_splits == p0.n_splits &&
                      p3.pages_per_split == p0.pages_per_split && p3.n_prot == p0.n_prot &&
                      p3.sep == 0,
                  "%s: variant 3 plan", names[ni]);
        }
        qmla_decode_plan p;
        const qmla_decode_args a = {8, 1, 16, 1.0f, &q0, &z, 1, &z};
        const int st = qmla_decode_cuda_plan_variant(&cfg, &a, 4096, n_sm, QMLA_DECODE_VARIANTS,
                                                     &p, &err);
        char want[32];
        snprintf(want, sizeof want, "variant %d", QMLA_DECODE_VARIANTS);
        CHECK(st == QMLA_EINVAL && strstr(err.msg, want), "%s: bad variant: %d %s", names[ni],
              st, err.msg);
    }
    CHECK(strcmp(qmla_decode_cuda_variant_name(2), "v2 ws-tile") == 0, "variant name");
    CHECK(strcmp(qmla_decode_cuda_variant_name(5), "v5 rows-on-one-tile") == 0, "variant 5 name");
    CHECK(strcmp(qmla_decode_cuda_variant_name(6), "v6 fast-rows-on-one-page") == 0,
          "variant 6 name");
    CHECK(strcmp(qmla_decode_cuda_variant_name(7), "v7 auto (default)") == 0, "variant 7 name");
    CHECK(strcmp(qmla_decode_cuda_variant_name(9), "v9 fast8") == 0 &&
              strcmp(qmla_decode_cuda_variant_name(10), "v10 fast8-2blk") == 0,
          "variant 9, 10 names");
    {
        const qmla_kv_config c4 = cfg_of("C4R4"), c8 = cfg_of("C8R8");
        CHECK(qmla_decode_cuda_variant_packed_f32(&c4, 0) == 1 &&
                  qmla_decode_cuda_variant_packed_f32(&c4, 1) == 1 &&
                  qmla_decode_cuda_variant_packed_f32(&c4, 2) == 0 &&
                  qmla_decode_cuda_variant_packed_f32(&c4, 7) == 1 &&
                  qmla_decode_cuda_variant_packed_f32(&c8, 7) == 1 &&
                  qmla_decode_cuda_packed_f32(&c8) == 1 && qmla_decode_cuda_packed_f32(&c4) == 1 &&
                  qmla_decode_cuda_variant_packed_f32(&c8, 2) == 0,
              "packed_f32 per variant");
    }
    /* q8 metadata: the fast kernel's variants of C4R4 / C2R4 take it; every
     * other variant and configuration refuses it by name (plan, decode),
     * the gather refuses it, the writer takes it */
    {
        const char *qn[3] = {"C4R4", "C2R4", "C8R8"};
        int32_t z = 0;
        const qmla_decode_args a = {8, 1, 16, 1.0f, NULL, &z, 1, &z};
        for (int k = 0; k < 3; k++) {
            qmla_kv_config c = cfg_of(qn[k]);
            c.meta = QMLA_CORE_META_Q8;
            char want[64];
            snprintf(want, sizeof want, "page layout %s G 64 and q8 metadata", qn[k]);
            int n_ok = 0;
            for (int v = 0; v < QMLA_DECODE_VARIANTS; v++) {
                const int reads = k < 2 && (v == 0 || v == 1 || v == 3 || v == 4 || v == 7);
                qmla_decode_plan p;
                memset(&p, 0, sizeof p);
                const int st = qmla_decode_cuda_plan_variant(&c, &a, 4096, 132, v, &p, &err);
                char wv[32];
                snprintf(wv, sizeof wv, "decode plan: variant %d (", v);
                if (reads) {
                    CHECK(st == QMLA_OK && p.variant == v &&
                              qmla_decode_cuda_variant_packed_f32(&c, v) == 1,
                          "%s q8, variant %d plan: %d %s (runs %d)", qn[k], v, st,
                          st ? err.msg : "", p.variant);
                    n_ok += st == QMLA_OK;
                } else {
                    CHECK(st == QMLA_EINVAL && strstr(err.msg, wv) && strstr(err.msg, want) &&
                              strstr(err.msg, "f16-metadata pages only"),
                          "%s q8, variant %d plan: %d %s", qn[k], v, st, err.msg);
                }
                /* decode with a plan of that variant: refused before any
                 * pointer, or (read) past the layout to the NULL arguments */
                qmla_kv_cache kc;
                memset(&kc, 0, sizeof kc);
                kc.cfg = c;
                p.variant = v;
                const int sd = qmla_decode_cuda(&kc, &a, &p, NULL, NULL, NULL, 0, &err);
                snprintf(wv, sizeof wv, "decode: variant %d (", v);
                CHECK(sd == QMLA_EINVAL &&
                          (reads ? strstr(err.msg, "decode: NULL argument") != NULL
                                 : strstr(err.msg, wv) && strstr(err.msg, want)),
                      "%s q8 decode, variant %d: %d %s", qn[k], v, sd, err.msg);
            }
            CHECK(n_ok == (k < 2 ? 5 : 0), "%s q8: %d variants plan it", qn[k], n_ok);
            qmla_kv_cache kc;
            memset(&kc, 0, sizeof kc);
            kc.cfg = c;
            char wg[64];
            snprintf(wg, sizeof wg, "page layout %s G 64 with q8 metadata", qn[k]);
            int st = qmla_kv_gather_cuda(&kc, &a, NULL, 0, &err);
            CHECK(st == QMLA_EINVAL && strstr(err.msg, "gather: ") && strstr(err.msg, wg),
                  "%s q8 gather: %d %s", qn[k], st, err.msg);
            /* the GPU writer takes q8 pages (kernels/kvcache.cu): past the
             * layout, to its argument checks */
            st = qmla_kv_write_cuda_launch(&kc, NULL, NULL, 0, &err);
            CHECK(st == QMLA_EINVAL && strstr(err.msg, "kv writer: NULL argument"),
                  "%s q8 writer: %d %s", qn[k], st, err.msg);
        }
        /* BF16 ignores the field; f16 C4R4 plans as before */
        qmla_kv_config cb = cfg_of("BF16"), c4 = cfg_of("C4R4");
        cb.meta = QMLA_CORE_META_Q8;
        qmla_decode_plan pb, p4;
        CHECK_OK(qmla_decode_cuda_plan_variant(&cb, &a, 4096, 132, 0, &pb, &err), err);
        CHECK_OK(qmla_decode_cuda_plan_variant(&c4, &a, 4096, 132, 7, &p4, &err), err);
        CHECK(pb.variant == 0 && p4.variant == 7, "BF16 q8-field / f16 C4R4 plans");
    }
    return check_summary("test_decode_plan");
}
