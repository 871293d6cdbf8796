/* test_kvcache.c — CPU tests of the paged low-bit cache (no GPU needed):
 *  - pack layout: the C writer twin stores, for every token, the codes and
 *    float16 metadata that qmla_quant_qdq gives for the same row (C4R4,
 *    C2R4, C8R8, groups 64 and 32), and the reconstruction is BF16(x^);
 *    from BF16 rows and from float32 rows (quantized unrounded: the test
 *    also counts the tokens whose codes the BF16-rounded row would change,
 *    so that it tells the two apart), float32 rows into BF16 pages rounded
 *    to nearest even, and the row refusals (both / neither of kv, kv_f32);
 *  - protection buffers: sink rows and the window ring hold the BF16 rows
 *    (of float32 rows: the rounded rows);
 *  - decode reference against an independent naive attention: on the BF16
 *    rows when the window covers everything, on BF16(x^) without
 *    protection, and the causal rule for s_q = 2;
 *  - storage accounting: exact bytes of docs/math.md §9 and the paper's
 *    3.59x with q8 metadata at 128K;
 *  - q8 metadata pages: every token's codes, stored fields (S, M, sc, m),
 *    stored (s, l) and x^ bit for bit against qmla_quant_qdq /
 *    qmla_quant_q8_fields (q8) over C4R4, C2R4, C8R8, C4R2 and groups
 *    8-64, BF16 and float32 rows of nine edge kinds (zeros, constant
 *    groups, 1e4 and 4e5 ranges beyond float16 metadata, tiny ranges,
 *    mixed magnitudes, one-signed groups), protected tokens included, and
 *    what qmla_kv_token_model serves; page bytes of 72 layouts against
 *    qmla_storage_account; the GPU writer's order of the q8 steps; the
 *    q8 writer's errors; qmla_decode_ref_model on q8 pages vs naive.
 * Run: meson test -C build test_kvcache */
#include "rng.h"
#include "check.h"
#include "qmla/decode.h"
#include "qmla/kvcache.h"
#include "qmla/quant.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint16_t bf(double v) { return qmla_core_f32_to_bf16((float)v); }

typedef struct {
    qmla_kv_cache kc;
    qmla_decode_args a;
    int32_t *bt, *len;
    uint16_t *q, *kv; /* kv: the BF16 rows (of float32 rows: rounded) */
    float *kv32;      /* the float32 rows written (f32 fixtures), else NULL */
} fixture;

/* A batch of sequences of lengths len[], pages shuffled, every token written
 * through the C writer twin, as BF16 rows or (f32) as float32 rows. */
static void build_rows(fixture *f, qmla_kv_config cfg, int batch, const int *lens, int s_q,
                       int H, int f32)
{
    memset(f, 0, sizeof *f);
    int maxp = 1;
    size_t ntok = 0;
    for (int b = 0; b < batch; b++) {
        int p = (lens[b] + 63) / 64;
        if (p > maxp)
            maxp = p;
        ntok += (size_t)lens[b];
    }
    const qmla_kv_layout L = qmla_kv_layout_of(&cfg);
    f->kc.cfg = cfg;
    f->kc.batch = batch;
    f->kc.n_pages = (size_t)batch * maxp;
    f->kc.pool = calloc(f->kc.n_pages, L.page_bytes);
    f->kc.sink = calloc((size_t)batch * (cfg.sink + 1), QMLA_KV_D * 2);
    f->kc.window = calloc((size_t)batch * (cfg.window + 1), QMLA_KV_D * 2);
    f->bt = malloc((size_t)batch * maxp * 4);
    f->len = malloc((size_t)batch * 4);
    /* a permutation of the physical pages */
    for (size_t i = 0; i < f->kc.n_pages; i++)
        f->bt[i] = (int32_t)i;
    for (size_t i = f->kc.n_pages; i > 1; i--) {
        size_t j = (size_t)(unif() * (double)i);
        int32_t t = f->bt[i - 1];
        f->bt[i - 1] = f->bt[j];
        f->bt[j] = t;
    }
    f->kv = malloc((ntok + 1) * QMLA_KV_D * 2);
    f->kv32 = f32 ? malloc((ntok + 1) * QMLA_KV_D * 4) : NULL;
    int64_t *slot = malloc((ntok + 1) * 8);
    int32_t *seq = malloc((ntok + 1) * 4), *pos = malloc((ntok + 1) * 4);
    size_t i = 0;
    for (int b = 0; b < batch; b++) {
        f->len[b] = lens[b];
        for (int t = 0; t < lens[b]; t++, i++) {
            for (int j = 0; j < QMLA_KV_D; j++) {
                const float v = (float)(gauss() * (j % 37 == 3 ? 4.0 : 1.0) + 0.1 * b);
                f->kv[i * QMLA_KV_D + j] = qmla_core_f32_to_bf16(v);
                if (f32)
                    f->kv32[i * QMLA_KV_D + j] = v;
            }
            slot[i] = (int64_t)f->bt[b * maxp + t / 64] * 64 + t % 64;
            seq[i] = b;
            pos[i] = t;
        }
    }
    qmla_kv_write w = {f32 ? NULL : f->kv, ntok, slot, seq, pos, f->len, f->kv32};
    qmla_error err;
    int st = qmla_kv_write_ref(&f->kc, &w, &err);
    CHECK_OK(st, err);
    free(slot);
    free(seq);
    free(pos);
    f->q = malloc((size_t)batch * s_q * H * QMLA_KV_D * 2);
    for (size_t k = 0; k < (size_t)batch * s_q * H * QMLA_KV_D; k++)
        f->q[k] = bf(gauss());
    f->a.batch = batch;
    f->a.s_q = s_q;
    f->a.heads = H;
    f->a.scale = 1.0f / sqrtf(192.0f);
    f->a.q = f->q;
    f->a.block_table = f->bt;
    f->a.max_pages = maxp;
    f->a.seq_len = f->len;
}

static void build(fixture *f, qmla_kv_config cfg, int batch, const int *lens, int s_q, int H)
{
    build_rows(f, cfg, batch, lens, s_q, H, 0);
}

static void release(fixture *f)
{
    free(f->kc.pool);
    free(f->kc.sink);
    free(f->kc.window);
    free(f->bt);
    free(f->len);
    free(f->q);
    free(f->kv);
    free(f->kv32);
}

/* Naive attention of one query row over rows[0..n) (double). */
static double naive(const uint16_t *q, const float *rows, long n, double scale, double *o)
{
    double m = -INFINITY, s = 0;
    double *z = malloc((size_t)n * sizeof *z);
    for (long t = 0; t < n; t++) {
        double d = 0;
        for (int j = 0; j < QMLA_KV_D; j++)
            d += (double)qmla_core_bf16_to_f32(q[j]) * rows[t * QMLA_KV_D + j];
        z[t] = d * scale;
        m = z[t] > m ? z[t] : m;
    }
    for (int j = 0; j < QMLA_KV_DC; j++)
        o[j] = 0;
    for (long t = 0; t < n; t++) {
        double p = exp(z[t] - m);
        s += p;
        for (int j = 0; j < QMLA_KV_DC; j++)
            o[j] += p * rows[t * QMLA_KV_D + j];
    }
    for (int j = 0; j < QMLA_KV_DC; j++)
        o[j] /= s;
    free(z);
    return m + log(s);
}

/* f32: the rows are written as float32 (quantized unrounded). */
static void test_layout(int cb, int rb, int G, int f32)
{
    qmla_kv_config cfg = {cb, rb, G, 4, 128, QMLA_CORE_META_F16};
    const int lens[2] = {70, 200};
    fixture f;
    build_rows(&f, cfg, 2, lens, 1, 1, f32);
    const qmla_kv_layout L = qmla_kv_layout_of(&cfg);
    qmla_quant_params pc = {cb, G, QMLA_META_F16}, pr = {rb, G, QMLA_META_F16};
    int bad_codes = 0, bad_meta = 0, bad_rec = 0, rounding_moves = 0;
    size_t i = 0;
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < lens[b]; t++, i++) {
            float x[QMLA_KV_D], xh[QMLA_KV_D], s[16], l[16];
            uint8_t c[QMLA_KV_D];
            for (int j = 0; j < QMLA_KV_D; j++)
                x[j] = f32 ? f.kv32[i * QMLA_KV_D + j] : qmla_core_bf16_to_f32(f.kv[i * QMLA_KV_D + j]);
            qmla_error err;
            if (f32) { /* would the BF16-rounded row give other codes? */
                float xr[QMLA_KV_D];
                uint8_t c1[QMLA_KV_D], c2[QMLA_KV_D];
                for (int j = 0; j < QMLA_KV_D; j++)
                    xr[j] = qmla_core_bf16_to_f32(f.kv[i * QMLA_KV_D + j]);
                CHECK_OK(qmla_quant_qdq(&pc, x, 1, QMLA_KV_DC, c1, s, l, NULL, &err), err);
                CHECK_OK(qmla_quant_qdq(&pc, xr, 1, QMLA_KV_DC, c2, s, l, NULL, &err), err);
                rounding_moves += memcmp(c1, c2, (size_t)L.cb_c) != 0;
            }
            const uint8_t *pg = f.kc.pool + (size_t)f.bt[b * f.a.max_pages + t / 64] * L.page_bytes;
            const int o = t % 64;
            for (int path = 0; path < 2; path++) {
                const qmla_quant_params *p = path ? &pr : &pc;
                const int w = path ? QMLA_KV_DR : QMLA_KV_DC, ng = w / G;
                const int cbytes = path ? L.cb_r : L.cb_c;
                int st = qmla_quant_qdq(p, x + path * QMLA_KV_DC, 1, (size_t)w, c, s, l,
                                        xh + path * QMLA_KV_DC, &err);
                CHECK_OK(st, err);
                const uint8_t *pc_ = pg + (path ? L.off_rc + (size_t)o * L.cb_r : (size_t)o * L.cb_c);
                const uint8_t *pm = pg + (path ? L.off_mr + (size_t)o * 4 * L.ng_r
                                               : L.off_mc + (size_t)o * 4 * L.ng_c);
                bad_codes += memcmp(pc_, c, (size_t)cbytes) != 0;
                for (int g = 0; g < ng; g++)
                    bad_meta += qmla_f16_to_f32((uint16_t)(pm[4 * g] | pm[4 * g + 1] << 8)) != s[g] ||
                                qmla_f16_to_f32((uint16_t)(pm[4 * g + 2] | pm[4 * g + 3] << 8)) != l[g];
            }
            for (int j = 0; j < QMLA_KV_D; j++)
                bad_rec += qmla_kv_packed_value(&L, pg, o, j) != qmla_core_f32_to_bf16(xh[j]);
            /* protection buffers */
            if (t < 4)
                CHECK(!memcmp(f.kc.sink + ((size_t)b * 4 + t) * QMLA_KV_D, f.kv + i * QMLA_KV_D,
                              QMLA_KV_D * 2), "sink row %d of sequence %d", t, b);
            if (t >= lens[b] - 128)
                CHECK(!memcmp(f.kc.window + ((size_t)b * 128 + t % 128) * QMLA_KV_D,
                              f.kv + i * QMLA_KV_D, QMLA_KV_D * 2),
                      "window row %d of sequence %d", t, b);
        }
    CHECK(bad_codes == 0 && bad_meta == 0 && bad_rec == 0,
          "C%dR%d G %d %s rows: tokens with other codes %d, metadata %d, values %d", cb, rb, G,
          f32 ? "float32" : "BF16", bad_codes, bad_meta, bad_rec);
    /* the float32 rows are not BF16 values in disguise: rounding them first
     * would have changed the content codes of some tokens */
    CHECK(!f32 || rounding_moves > 0, "C%dR%d G %d float32 rows: no token's codes depend on "
          "the BF16 rounding (the test cannot tell the paths apart)", cb, rb, G);
    release(&f);
}

/* Float32 rows into a BF16 cache: the pages hold the rows rounded to
 * nearest even (NaN too: quieted, as qmla_core_f32_to_bf16); the writer
 * takes exactly one of kv / kv_f32. */
static void test_f32_rows(void)
{
    qmla_kv_config cfg = {QMLA_KV_BF16, QMLA_KV_BF16, 64, 0, 0, QMLA_CORE_META_F16};
    uint8_t pool[2 * 73728];
    float row[2 * QMLA_KV_D];
    uint16_t row16[QMLA_KV_D];
    for (int j = 0; j < 2 * QMLA_KV_D; j++)
        row[j] = (float)gauss();
    row[QMLA_KV_D + 9] = qmla_core_bits_f32(0x7f800001u); /* a signalling NaN */
    int64_t slot[2] = {64 + 5, 3};
    int32_t seq[2] = {0, 0}, pos[2] = {0, 1}, len = 2;
    qmla_kv_cache kc = {cfg, pool, 2, NULL, NULL, 1};
    memset(pool, 0, sizeof pool);
    qmla_kv_write w = {NULL, 2, slot, seq, pos, &len, row};
    qmla_error err;
    CHECK_OK(qmla_kv_write_ref(&kc, &w, &err), err);
    int bad = 0;
    for (int t = 0; t < 2; t++) {
        const uint8_t *r = pool + (size_t)(slot[t] / 64) * 73728 + (size_t)(slot[t] % 64) * 1152;
        for (int j = 0; j < QMLA_KV_D; j++)
            bad += (uint16_t)(r[2 * j] | r[2 * j + 1] << 8) !=
                   qmla_core_f32_to_bf16(row[t * QMLA_KV_D + j]);
    }
    CHECK(bad == 0, "BF16 pages from float32 rows: %d values not rounded to nearest even", bad);
    for (int j = 0; j < QMLA_KV_D; j++)
        row16[j] = bf(row[j]);
    qmla_kv_write both = {row16, 2, slot, seq, pos, &len, row};
    int st = qmla_kv_write_ref(&kc, &both, &err);
    CHECK(st == QMLA_EINVAL && strstr(err.msg, "found both"), "kv and kv_f32: %d %s", st, err.msg);
    qmla_kv_write neither = {NULL, 2, slot, seq, pos, &len, NULL};
    st = qmla_kv_write_ref(&kc, &neither, &err);
    CHECK(st == QMLA_EINVAL && strstr(err.msg, "found neither"), "no rows: %d %s", st, err.msg);
    /* a non-finite float32 value is named as for BF16 rows */
    qmla_kv_config c4 = {4, 4, 64, 0, 0, QMLA_CORE_META_F16};
    uint8_t pool4[20736];
    qmla_kv_cache k4 = {c4, pool4, 1, NULL, NULL, 1};
    row[200] = -INFINITY;
    qmla_kv_write w4 = {NULL, 1, &slot[1], seq, pos, &len, row};
    st = qmla_kv_write_ref(&k4, &w4, &err);
    CHECK(st == QMLA_ENONFINITE && strstr(err.msg, "group 3: non-finite value -inf"),
          "float32 -inf: %d %s", st, err.msg);
}

/* decode_ref against naive attention; protect: 1 = window covers all,
 * 0 = no protection; packed_f32: qmla_decode_ref_model's unrounded packed
 * values (the C4R4 / C2R4 GPU kernel's model) instead of BF16(x^). */
static void test_decode_ref(int protect, int s_q, int packed_f32)
{
    qmla_kv_config cfg = {4, 4, 64, protect ? 4 : 0, protect ? 4096 : 0, QMLA_CORE_META_F16};
    const int lens[3] = {1, 65, 131};
    const int H = 3;
    fixture f;
    build(&f, cfg, 3, lens, s_q, H);
    double *out = malloc(3 * (size_t)s_q * H * 512 * 8), *lse = malloc(3 * (size_t)s_q * H * 8);
    qmla_error err;
    int st = packed_f32 ? qmla_decode_ref_model(&f.kc, &f.a, 1, out, lse, &err)
                        : qmla_decode_ref(&f.kc, &f.a, out, lse, &err);
    CHECK_OK(st, err);
    double worst = 0, worst_lse = 0;
    size_t i0 = 0;
    for (int b = 0; b < 3; b++) {
        float *rows = malloc((size_t)lens[b] * QMLA_KV_D * 4);
        for (int t = 0; t < lens[b]; t++) {
            const uint16_t *src = f.kv + (i0 + t) * QMLA_KV_D;
            float x[QMLA_KV_D];
            for (int j = 0; j < QMLA_KV_D; j++)
                x[j] = qmla_core_bf16_to_f32(src[j]);
            if (!protect) { /* x^ (BF16(x^)) from the CPU quantizer */
                qmla_quant_params pc = {4, 64, QMLA_META_F16};
                st = qmla_quant_qdq(&pc, x, 1, 512, NULL, NULL, NULL, x, &err);
                st |= qmla_quant_qdq(&pc, x + 512, 1, 64, NULL, NULL, NULL, x + 512, &err);
                for (int j = 0; j < QMLA_KV_D && !packed_f32; j++)
                    x[j] = qmla_core_bf16_to_f32(qmla_core_f32_to_bf16(x[j]));
            }
            memcpy(rows + (size_t)t * QMLA_KV_D, x, sizeof x);
        }
        for (int r = 0; r < s_q * H; r++) {
            double o[512];
            const long vis = lens[b] - s_q + r / H + 1;
            const size_t k = (size_t)b * s_q * H + r;
            if (vis <= 0) {
                CHECK(isinf(lse[k]) && lse[k] < 0, "no visible token: lse %g", lse[k]);
                continue;
            }
            double l = naive(f.q + k * QMLA_KV_D, rows, vis, f.a.scale, o);
            for (int j = 0; j < 512; j++) {
                double d = fabs(o[j] - out[k * 512 + j]);
                worst = d > worst ? d : worst;
            }
            worst_lse = fabs(l - lse[k]) > worst_lse ? fabs(l - lse[k]) : worst_lse;
        }
        i0 += (size_t)lens[b];
        free(rows);
    }
    CHECK(worst < 1e-12 && worst_lse < 1e-12,
          "decode ref (protect %d, s_q %d, packed_f32 %d) vs naive: worst output %g, lse %g",
          protect, s_q, packed_f32, worst, worst_lse);
    free(out);
    free(lse);
    release(&f);
}

/* The sink/window choice: protected tokens give the BF16 row, others the
 * packed copy, and a token aging out of the window switches representation
 * without being rewritten. */
static void test_aging(void)
{
    qmla_kv_config cfg = {4, 4, 64, 4, 128, QMLA_CORE_META_F16};
    const int lens[1] = {133};
    fixture f;
    build(&f, cfg, 1, lens, 1, 1);
    float row[QMLA_KV_D];
    int ok_bf = 1, ok_packed = 1;
    for (long t = 0; t < 133; t++) {
        qmla_kv_token_ref(&f.kc, &f.a, 0, t, row);
        int same = 1;
        for (int j = 0; j < QMLA_KV_D; j++)
            same &= row[j] == qmla_core_bf16_to_f32(f.kv[t * QMLA_KV_D + j]);
        if (t < 4 || t >= 5)
            ok_bf &= same;
        else
            ok_packed &= !same;
    }
    CHECK(ok_bf && ok_packed, "len 133: tokens 0-3 and 5-132 BF16, token 4 packed");
    f.len[0] = 134; /* token 5 leaves the window (no rewrite of its packed copy) */
    qmla_kv_token_ref(&f.kc, &f.a, 0, 5, row);
    int differs = 0;
    for (int j = 0; j < QMLA_KV_D; j++)
        differs |= row[j] != qmla_core_bf16_to_f32(f.kv[5 * QMLA_KV_D + j]);
    CHECK(differs, "token 5 served from its packed copy once len = 134");
    release(&f);
}

static void test_storage(void)
{
    qmla_kv_config c;
    qmla_error err;
    qmla_storage_row r;
    CHECK_OK(qmla_kv_parse_config("C4R4", &c, &err), err);
    c.sink = 4;
    c.window = 128;
    CHECK_OK(qmla_storage_account(&c, QMLA_CORE_META_F16, 4096, &r, &err), err);
    /* 4096 * 324 + 132 * 1152 + 64 pages * 4 */
    CHECK(r.total_bytes == 1479424.0 && fabs(r.ratio - 3.1895) < 1e-4, "4K f16: %.0f %.4f",
          r.total_bytes, r.ratio);
    CHECK_OK(qmla_storage_account(&c, QMLA_CORE_META_F16, 131072, &r, &err), err);
    CHECK(r.total_bytes == 42627584.0 && fabs(r.ratio - 3.5421) < 1e-4, "128K f16: %.0f %.4f",
          r.total_bytes, r.ratio);
    CHECK_OK(qmla_storage_account(&c, QMLA_CORE_META_Q8, 131072, &r, &err), err);
    CHECK(r.meta_bytes == 131072.0 * 26 && r.ratio >= 3.59, "128K q8: meta %.0f ratio %.4f",
          r.meta_bytes, r.ratio);
    CHECK_OK(qmla_kv_parse_config("C2R4", &c, &err), err);
    CHECK_OK(qmla_storage_account(&c, QMLA_CORE_META_F16, 131072, &r, &err), err);
    CHECK(r.code_bytes == 131072.0 * 160, "C2R4 codes %.0f", r.code_bytes);
    CHECK(qmla_kv_parse_config("C5R4", &c, &err) == QMLA_EINVAL, "C5R4 refused");
    CHECK(qmla_kv_parse_config("X", &c, &err) == QMLA_EINVAL, "X refused");
    /* names with trailing characters are refused (mutant 2554) */
    CHECK(qmla_kv_parse_config("C4R4x", &c, &err) == QMLA_EINVAL, "C4R4x refused");
    CHECK(qmla_kv_parse_config("C4R4 ", &c, &err) == QMLA_EINVAL, "\"C4R4 \" refused");
    /* a partial last page costs a whole page-table entry: 100 tokens are
     * ceil(100 / 64) = 2 pages, 8 bytes (mutant 2550: floor gives 1);
     * 100 * 324 + 132 * 1152 + 2 * 4 */
    CHECK_OK(qmla_kv_parse_config("C4R4", &c, &err), err);
    CHECK_OK(qmla_storage_account(&c, QMLA_CORE_META_F16, 100, &r, &err), err);
    CHECK(r.table_bytes == 8.0 && r.total_bytes == 100.0 * 324 + 132.0 * 1152 + 8.0,
          "100 tokens: table %.0f bytes (expected 8), total %.0f (expected 184472)",
          r.table_bytes, r.total_bytes);
    CHECK_OK(qmla_storage_account(&c, QMLA_CORE_META_F16, 1, &r, &err), err);
    CHECK(r.table_bytes == 4.0, "1 token: table %.0f bytes, expected 4 (one page)",
          r.table_bytes);
}

/* ---- q8 metadata pages ---------------------------------------------------- */

/* Row kinds of the q8 tests (token i of a write gets kind i % 9): 0 Gaussian
 * with outlier channels, 1 all zeros, 2 constant groups (every group one
 * value, some zero, some negative), 3 large range (1e4 N(0,1)), 4 beyond
 * float16 metadata (values to +-4e5: f16 refuses lo / scale, q8 stores
 * them), 5 a tiny range at an offset (1 + 1e-3 N, float16-subnormal steps
 * at 8 bits), 6 group magnitudes 1e-2..1e2 (small step codes against the
 * token's super-scale), 7 positive-only groups (positive minimum codes),
 * 8 negative-only groups with one zero-range group. */
#define Q8_KINDS 9
static void q8_row(int kind, int b, float *x)
{
    for (int j = 0; j < QMLA_KV_D; j++) {
        const double z = gauss();
        const int g8 = j / 8; /* constant over every group size */
        double v;
        switch (kind) {
        case 1: v = 0.0; break;
        case 2: v = (g8 % 5 == 0) ? 0.0 : 0.75 * (double)(g8 % 7 - 3); break;
        case 3: v = 1e4 * z; break;
        case 4: v = 4e5 * z; break;
        case 5: v = 1.0 + 1e-3 * z; break;
        case 6: v = z * pow(10.0, (double)((j / 32) % 5 - 2)); break;
        case 7: v = 3.0 + fabs(z) * (1 + j % 3); break;
        case 8: v = (j >= 64 && j < 72) ? -2.5 : -1.0 - fabs(z); break;
        default: v = z * (j % 37 == 3 ? 4.0 : 1.0) + 0.1 * b;
        }
        x[j] = (float)v;
    }
}

/* Write lens[] tokens of q8 rows (kinds above) through qmla_kv_write_ref into
 * a cache of cfg; f->kv holds the BF16 rows, f->kv32 the float32 ones (f32). */
static int q8_build(fixture *f, qmla_kv_config cfg, int batch, const int *lens, int f32,
                    qmla_error *err)
{
    memset(f, 0, sizeof *f);
    int maxp = 1;
    size_t ntok = 0;
    for (int b = 0; b < batch; b++) {
        const int p = (lens[b] + 63) / 64;
        maxp = p > maxp ? p : maxp;
        ntok += (size_t)lens[b];
    }
    const qmla_kv_layout L = qmla_kv_layout_of(&cfg);
    f->kc.cfg = cfg;
    f->kc.batch = batch;
    f->kc.n_pages = (size_t)batch * maxp;
    f->kc.pool = calloc(f->kc.n_pages, L.page_bytes);
    f->kc.sink = calloc((size_t)batch * (cfg.sink + 1), QMLA_KV_D * 2);
    f->kc.window = calloc((size_t)batch * (cfg.window + 1), QMLA_KV_D * 2);
    f->bt = malloc((size_t)batch * maxp * 4);
    f->len = malloc((size_t)batch * 4);
    for (size_t i = 0; i < f->kc.n_pages; i++) /* pages in reverse order */
        f->bt[i] = (int32_t)(f->kc.n_pages - 1 - i);
    f->kv = malloc((ntok + 1) * QMLA_KV_D * 2);
    f->kv32 = malloc((ntok + 1) * QMLA_KV_D * 4);
    int64_t *slot = malloc((ntok + 1) * 8);
    int32_t *seq = malloc((ntok + 1) * 4), *pos = malloc((ntok + 1) * 4);
    size_t i = 0;
    for (int b = 0; b < batch; b++) {
        f->len[b] = lens[b];
        for (int t = 0; t < lens[b]; t++, i++) {
            q8_row((int)(i % Q8_KINDS), b, f->kv32 + i * QMLA_KV_D);
            for (int j = 0; j < QMLA_KV_D; j++) {
                f->kv[i * QMLA_KV_D + j] = qmla_core_f32_to_bf16(f->kv32[i * QMLA_KV_D + j]);
                if (!f32) /* the row as written */
                    f->kv32[i * QMLA_KV_D + j] = qmla_core_bf16_to_f32(f->kv[i * QMLA_KV_D + j]);
            }
            slot[i] = (int64_t)f->bt[b * maxp + t / 64] * 64 + t % 64;
            seq[i] = b;
            pos[i] = t;
        }
    }
    qmla_kv_write w = {f32 ? NULL : f->kv, ntok, slot, seq, pos, f->len, f32 ? f->kv32 : NULL};
    const int st = qmla_kv_write_ref(&f->kc, &w, err);
    free(slot);
    free(seq);
    free(pos);
    f->a.batch = batch;
    f->a.s_q = 1;
    f->a.heads = 1;
    f->a.scale = 1.0f / sqrtf(192.0f);
    f->a.block_table = f->bt;
    f->a.max_pages = maxp;
    f->a.seq_len = f->len;
    return st;
}

static int same_f32(float a, float b) { return qmla_core_f32_bits(a) == qmla_core_f32_bits(b); }

/* q8 pages against the library quantizer on the same rows, every token
 * (protected ones too: their packed copies are read once they age out):
 * the codes (qmla_quant_qdq, q8), the stored fields S, M, sc, m
 * (qmla_quant_q8_fields) byte for byte, the stored (s, l) and x^ bit for
 * bit, BF16(x^), and what qmla_kv_token_model serves (BF16 rows for
 * protected tokens). The same page read as an f16 layout gives other values
 * (the test sees the metadata format). */
static void test_q8_layout(int cb, int rb, int G, int f32)
{
    qmla_kv_config cfg = {cb, rb, G, 4, 128, QMLA_CORE_META_Q8};
    const int lens[2] = {70, 200};
    fixture f;
    qmla_error err;
    CHECK_OK(q8_build(&f, cfg, 2, lens, f32, &err), err);
    const qmla_kv_layout L = qmla_kv_layout_of(&cfg);
    /* the same records misread as f16 metadata: group 0 of each path reads
     * the record's first 4 bytes (S, M) as its (s, l) */
    qmla_kv_layout Lf16 = L;
    Lf16.meta = QMLA_CORE_META_F16;
    const qmla_quant_params pc = {cb, G, QMLA_META_Q8}, pr = {rb, G, QMLA_META_Q8};
    int bad_codes = 0, bad_fields = 0, bad_meta = 0, bad_xhat = 0, bad_bf = 0, bad_served = 0;
    int misread = 0, n_misread = 0, kinds_seen = 0;
    size_t i = 0;
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < lens[b]; t++, i++) {
            const float *x = f.kv32 + i * QMLA_KV_D;
            float xh[QMLA_KV_D], s[QMLA_KV_DC / 8], l[QMLA_KV_DC / 8];
            uint8_t c[QMLA_KV_D], sc[QMLA_KV_DC / 8];
            int8_t mq[QMLA_KV_DC / 8];
            uint16_t S16, M16;
            const uint8_t *pg = f.kc.pool + (size_t)f.bt[b * f.a.max_pages + t / 64] * L.page_bytes;
            const int o = t % 64;
            for (int path = 0; path < 2; path++) {
                const qmla_quant_params *p = path ? &pr : &pc;
                const int w = path ? QMLA_KV_DR : QMLA_KV_DC, ng = w / G;
                CHECK_OK(qmla_quant_qdq(p, x + path * QMLA_KV_DC, 1, (size_t)w, c, s, l,
                                        xh + path * QMLA_KV_DC, &err), err);
                CHECK_OK(qmla_quant_q8_fields(p, x + path * QMLA_KV_DC, 1, (size_t)w, &S16, &M16,
                                              sc, mq, &err), err);
                const uint8_t *pc_ = pg + (path ? L.off_rc + (size_t)o * L.cb_r : (size_t)o * L.cb_c);
                const uint8_t *pm = pg + (path ? L.off_mr + (size_t)o * L.mb_r
                                               : L.off_mc + (size_t)o * L.mb_c);
                bad_codes += memcmp(pc_, c, (size_t)(path ? L.cb_r : L.cb_c)) != 0;
                int fb = (uint16_t)(pm[0] | pm[1] << 8) != S16 ||
                         (uint16_t)(pm[2] | pm[3] << 8) != M16;
                for (int g = 0; g < ng; g++) {
                    fb |= pm[4 + g] != sc[g] || (int8_t)pm[4 + ng + g] != mq[g];
                    float s1, l1;
                    qmla_kv_group_meta(&L, pg, o, path, g, &s1, &l1);
                    bad_meta += !same_f32(s1, s[g]) || !same_f32(l1, l[g]);
                }
                bad_fields += fb;
            }
            for (int j = 0; j < QMLA_KV_D; j++) {
                const float v = qmla_kv_packed_f32(&L, pg, o, j);
                bad_xhat += !same_f32(v, xh[j]);
                bad_bf += qmla_kv_packed_value(&L, pg, o, j) != qmla_core_f32_to_bf16(xh[j]);
                if ((j % QMLA_KV_DC) < G) {
                    misread += !same_f32(qmla_kv_packed_f32(&Lf16, pg, o, j), v);
                    n_misread++;
                }
            }
            /* what attention is served */
            float row[QMLA_KV_D], row32[QMLA_KV_D];
            qmla_kv_token_ref(&f.kc, &f.a, b, t, row);
            qmla_kv_token_model(&f.kc, &f.a, b, t, 1, row32);
            const int prot = t < 4 || t >= lens[b] - 128;
            for (int j = 0; j < QMLA_KV_D; j++) {
                const float bfv = qmla_core_bf16_to_f32(f.kv[i * QMLA_KV_D + j]);
                bad_served += prot ? !same_f32(row[j], bfv) || !same_f32(row32[j], bfv)
                                   : !same_f32(row32[j], xh[j]) ||
                                         !same_f32(row[j], qmla_core_bf16_to_f32(
                                                               qmla_core_f32_to_bf16(xh[j])));
            }
            if (t < 4)
                CHECK(!memcmp(f.kc.sink + ((size_t)b * 4 + t) * QMLA_KV_D, f.kv + i * QMLA_KV_D,
                              QMLA_KV_D * 2), "q8: sink row %d of sequence %d", t, b);
            if (t >= lens[b] - 128)
                CHECK(!memcmp(f.kc.window + ((size_t)b * 128 + t % 128) * QMLA_KV_D,
                              f.kv + i * QMLA_KV_D, QMLA_KV_D * 2),
                      "q8: window row %d of sequence %d", t, b);
            kinds_seen |= 1 << (i % Q8_KINDS);
        }
    CHECK(bad_codes == 0 && bad_fields == 0 && bad_meta == 0 && bad_xhat == 0 && bad_bf == 0 &&
              bad_served == 0,
          "q8 C%dR%d G %d %s rows: paths with other codes %d, other fields %d, groups with "
          "other (s, l) %d; values: x^ %d, BF16(x^) %d, served %d",
          cb, rb, G, f32 ? "float32" : "BF16", bad_codes, bad_fields, bad_meta, bad_xhat,
          bad_bf, bad_served);
    CHECK(kinds_seen == (1 << Q8_KINDS) - 1, "q8: row kinds seen %#x", kinds_seen);
    CHECK(misread > n_misread / 2, "q8 C%dR%d G %d: the records read as f16 metadata give %d "
          "of %d values unchanged: the test cannot see the format", cb, rb, G,
          n_misread - misread, n_misread);
    release(&f);
}

/* The GPU writer's order of the q8 derivation (kernels/kvcache.cu: one
 * thread per group, the path's maxima by reduction, then each group's codes
 * by qmla_core_q8_min / _step), here on the host with the maxima taken in
 * reverse group order as fmaxf over values >= +0: the stored fields and
 * (s, l) bit for bit those of qmla_core_token_meta_q8, over the row kinds,
 * every bit width and group size, both paths. */
static void test_q8_group_steps(void)
{
    const int bits[3] = {2, 4, 8}, groups[4] = {8, 16, 32, 64};
    int bad = 0, n = 0;
    for (int kind = 0; kind < Q8_KINDS; kind++)
        for (int rep = 0; rep < 4; rep++) {
            float x[QMLA_KV_D];
            q8_row(kind, rep, x);
            for (int bi = 0; bi < 3; bi++)
                for (int gi = 0; gi < 4; gi++)
                    for (int path = 0; path < 2; path++) {
                        const int G = groups[gi], w = path ? 64 : 512, ng = w / G;
                        const float *xp = x + (path ? 512 : 0);
                        float s[64], l[64], bd;
                        uint8_t sc[64];
                        int8_t mq[64];
                        uint16_t S16, M16;
                        size_t bg;
                        if (qmla_core_token_meta_q8(xp, (size_t)w, (size_t)G, bits[bi], s, l, sc,
                                                    mq, &S16, &M16, &bd, &bg) != QMLA_CORE_OK)
                            continue;
                        float mn[64], mx[64], need[64], amax = 0.0f, smax = 0.0f;
                        for (int g = ng - 1; g >= 0; g--) {
                            qmla_core_group_extrema(xp + g * G, (size_t)G, &mn[g], &mx[g], &bd);
                            amax = fmaxf(amax, fabsf(mn[g]));
                        }
                        int ovf = 0;
                        const float Mf = qmla_core_q8_super(amax, 127.0f, &ovf);
                        const float Lf = (float)qmla_core_levels(bits[bi]);
                        float lg[64], mc[64];
                        for (int g = ng - 1; g >= 0; g--) {
                            lg[g] = qmla_core_q8_min(mn[g], mx[g], Mf, Lf, &mc[g], &need[g]);
                            smax = fmaxf(smax, need[g] > 0.0f ? need[g] : 0.0f);
                        }
                        const float Sf = qmla_core_q8_super(smax, 255.0f, &ovf);
                        int b1 = ovf || qmla_core_f32_to_f16(Sf, NULL) != S16 ||
                                 qmla_core_f32_to_f16(Mf, NULL) != M16;
                        for (int g = 0; g < ng; g++) {
                            float cc;
                            const float sg = qmla_core_q8_step(need[g], Sf, &cc);
                            b1 |= !same_f32(sg, s[g]) || !same_f32(lg[g], l[g]) ||
                                  (uint8_t)cc != sc[g] || (int8_t)mc[g] != mq[g];
                        }
                        bad += b1;
                        n++;
                    }
        }
    CHECK(bad == 0 && n > 800, "q8 per-group steps (the GPU writer's order): %d of %d paths "
          "differ from qmla_core_token_meta_q8", bad, n);
}

/* Page sizes: for every config, group and metadata, the page is 64 tokens
 * of exactly qmla_storage_account's code + metadata bytes per token (the
 * page rounding is zero: pages hold whole tokens), the sections in the
 * order of kvcache.h; C4R4 G 64 is 20736 (f16) and 20096 (q8). */
static void test_q8_page_bytes(void)
{
    const int bits[3] = {2, 4, 8}, groups[4] = {8, 16, 32, 64}, metas[2] = {0, 2};
    int bad = 0;
    qmla_error err;
    for (int ci = 0; ci < 3; ci++)
        for (int ri = 0; ri < 3; ri++)
            for (int gi = 0; gi < 4; gi++)
                for (int mi = 0; mi < 2; mi++) {
                    qmla_kv_config c = {bits[ci], bits[ri], groups[gi], 4, 128, metas[mi]};
                    const qmla_kv_layout L = qmla_kv_layout_of(&c);
                    qmla_storage_row r;
                    CHECK_OK(qmla_storage_account(&c, metas[mi], 64 * 1000, &r, &err), err);
                    const double per_tok = (r.code_bytes + r.meta_bytes) / (64.0 * 1000);
                    const int ng_c = 512 / groups[gi], ng_r = 64 / groups[gi];
                    const int mb = metas[mi] ? 8 + 2 * (ng_c + ng_r) : 4 * (ng_c + ng_r);
                    const int ok = (double)L.page_bytes == 64.0 * per_tok && L.meta == metas[mi] &&
                                   L.mb_c + L.mb_r == mb && L.off_rc == 64 * (size_t)L.cb_c &&
                                   L.off_mc == L.off_rc + 64 * (size_t)L.cb_r &&
                                   L.off_mr == L.off_mc + 64 * (size_t)L.mb_c &&
                                   L.page_bytes == L.off_mr + 64 * (size_t)L.mb_r &&
                                   L.mb_c % 2 == 0 && L.mb_r % 2 == 0;
                    if (!ok && bad++ < 4)
                        CHECK(0, "C%dR%d G %d %s: page %zu bytes, storage %.2f per token",
                              bits[ci], bits[ri], groups[gi], metas[mi] ? "q8" : "f16",
                              L.page_bytes, per_tok);
                }
    CHECK(bad == 0, "page layouts against qmla_storage_account: %d differ", bad);
    qmla_kv_config c = {4, 4, 64, 4, 128, QMLA_CORE_META_F16};
    CHECK(qmla_kv_layout_of(&c).page_bytes == 20736, "C4R4 f16 page %zu",
          qmla_kv_layout_of(&c).page_bytes);
    c.meta = QMLA_CORE_META_Q8;
    const qmla_kv_layout L = qmla_kv_layout_of(&c);
    CHECK(L.page_bytes == 20096 && L.off_mc == 18432 && L.off_mr == 18432 + 1280 &&
              L.mb_c == 20 && L.mb_r == 6,
          "C4R4 q8 page %zu, meta at %zu / %zu", L.page_bytes, L.off_mc, L.off_mr);
    /* a BF16 cache ignores the metadata field */
    qmla_kv_config cb = {QMLA_KV_BF16, QMLA_KV_BF16, 64, 0, 0, QMLA_CORE_META_Q8};
    CHECK(qmla_kv_layout_of(&cb).page_bytes == 73728 && qmla_kv_layout_of(&cb).meta == 0,
          "BF16 with q8 field: page %zu", qmla_kv_layout_of(&cb).page_bytes);
    CHECK(!strcmp(qmla_kv_meta_name(&c), "q8") && !strcmp(qmla_kv_meta_name(&cb), "-"),
          "meta names %s %s", qmla_kv_meta_name(&c), qmla_kv_meta_name(&cb));
    /* parse gives f16; an unknown metadata value is refused by name */
    qmla_kv_config p;
    memset(&p, 0x55, sizeof p);
    CHECK_OK(qmla_kv_parse_config("C2R4", &p, &err), err);
    CHECK(p.meta == QMLA_CORE_META_F16, "parsed config meta %d", p.meta);
    p.meta = 1; /* f32: not a page format */
    const int st = qmla_kv_check(&p, &err);
    CHECK(st == QMLA_EINVAL && strstr(err.msg, "metadata: expected f16 (0) or q8 (2), found 1"),
          "meta 1: %d %s", st, err.msg);
}

/* Refusals and errors of the q8 writer twin: values beyond float16
 * metadata (f16 refuses, q8 stores), beyond q8's super-scales (minimum and
 * step, content and RoPE path named), a NaN (group named). */
static void test_q8_errors(void)
{
    qmla_error err;
    fixture f;
    const int len1[1] = {9}; /* token 4 is kind 4 (values to +-4e5) */
    qmla_kv_config c16 = {4, 4, 64, 4, 128, QMLA_CORE_META_F16};
    int st = q8_build(&f, c16, 1, len1, 1, &err);
    CHECK(st == QMLA_ERANGE && strstr(err.msg, "token 4, group"),
          "f16 metadata, values to 4e5: %d %s", st, err.msg);
    release(&f);
    c16.meta = QMLA_CORE_META_Q8;
    CHECK_OK(q8_build(&f, c16, 1, len1, 1, &err), err);
    release(&f);
    /* one token, one failing value */
    struct {
        int cb, ch;
        float v;
        int status;
        const char *msg;
    } cases[] = {
        {4, 10, -9e6f, QMLA_ERANGE, "token 0, content path: q8 metadata: max |lo|"},
        {4, 530, -9e6f, QMLA_ERANGE, "token 0, RoPE path: q8 metadata: max |lo|"},
        {4, 10, 3e8f, QMLA_ERANGE, "token 0, content path: q8 metadata: largest group step"},
        {8, 552, 5e9f, QMLA_ERANGE, "token 0, RoPE path: q8 metadata: largest group step"},
        {4, 200, NAN, QMLA_ENONFINITE, "token 0, group 3: non-finite"},
        {4, 520, INFINITY, QMLA_ENONFINITE, "token 0, group 8: non-finite"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        qmla_kv_config c = {cases[k].cb, cases[k].cb, 64, 0, 0, QMLA_CORE_META_Q8};
        const qmla_kv_layout L = qmla_kv_layout_of(&c);
        uint8_t *pool = calloc(1, L.page_bytes);
        float row[QMLA_KV_D];
        for (int j = 0; j < QMLA_KV_D; j++)
            row[j] = (float)(0.01 * j);
        row[cases[k].ch] = cases[k].v;
        int64_t slot = 0;
        int32_t seq = 0, pos = 0, len = 1;
        qmla_kv_cache kc = {c, pool, 1, NULL, NULL, 1};
        qmla_kv_write w = {NULL, 1, &slot, &seq, &pos, &len, row};
        st = qmla_kv_write_ref(&kc, &w, &err);
        CHECK(st == cases[k].status && strstr(err.msg, cases[k].msg),
              "q8 error case %zu: %d %s (expected %d, \"%s\")", k, st, err.msg, cases[k].status,
              cases[k].msg);
        /* the quantizer refuses the same path */
        const qmla_quant_params p = {cases[k].cb, 64, QMLA_META_Q8};
        const int rope = cases[k].ch >= QMLA_KV_DC;
        CHECK(qmla_quant_qdq(&p, row + (rope ? QMLA_KV_DC : 0), 1, rope ? 64 : 512, NULL, NULL,
                             NULL, NULL, &err) == cases[k].status,
              "q8 error case %zu: the quantizer gives %s", k, err.msg);
        free(pool);
    }
}

/* decode_ref on q8 pages against naive attention on the quantizer's q8 x^
 * (BF16-rounded, or unrounded: packed_f32), no protection, two sequences;
 * and with a window over everything, the BF16 rows. */
static void test_q8_decode_ref(int cb, int rb, int G, int protect, int packed_f32)
{
    qmla_kv_config cfg = {cb, rb, G, protect ? 4 : 0, protect ? 4096 : 0, QMLA_CORE_META_Q8};
    const int lens[2] = {37, 131}, H = 2;
    fixture f;
    qmla_error err;
    CHECK_OK(q8_build(&f, cfg, 2, lens, 1, &err), err);
    f.a.heads = H;
    f.q = malloc((size_t)2 * H * QMLA_KV_D * 2);
    for (size_t k = 0; k < (size_t)2 * H * QMLA_KV_D; k++)
        f.q[k] = bf(gauss() * 1e-3); /* keep the 4e5-scale rows from saturating the softmax */
    f.a.q = f.q;
    f.a.scale = 1e-3f;
    double *out = malloc((size_t)2 * H * 512 * 8), *lse = malloc((size_t)2 * H * 8);
    CHECK_OK(qmla_decode_ref_model(&f.kc, &f.a, packed_f32, out, lse, &err), err);
    const qmla_quant_params pc = {cb, G, QMLA_META_Q8}, pr = {rb, G, QMLA_META_Q8};
    double worst = 0, worst_lse = 0, scale_o = 0;
    size_t i0 = 0;
    for (int b = 0; b < 2; b++) {
        float *rows = malloc((size_t)lens[b] * QMLA_KV_D * 4);
        for (int t = 0; t < lens[b]; t++) {
            float *x = rows + (size_t)t * QMLA_KV_D;
            for (int j = 0; j < QMLA_KV_D; j++)
                x[j] = protect ? qmla_core_bf16_to_f32(f.kv[(i0 + t) * QMLA_KV_D + j])
                               : f.kv32[(i0 + t) * QMLA_KV_D + j];
            if (!protect) {
                CHECK_OK(qmla_quant_qdq(&pc, x, 1, 512, NULL, NULL, NULL, x, &err), err);
                CHECK_OK(qmla_quant_qdq(&pr, x + 512, 1, 64, NULL, NULL, NULL, x + 512, &err),
                         err);
                for (int j = 0; j < QMLA_KV_D && !packed_f32; j++)
                    x[j] = qmla_core_bf16_to_f32(qmla_core_f32_to_bf16(x[j]));
            }
        }
        for (int r = 0; r < H; r++) {
            double o[512];
            const size_t k = (size_t)b * H + r;
            const double l = naive(f.q + k * QMLA_KV_D, rows, lens[b], f.a.scale, o);
            for (int j = 0; j < 512; j++) {
                const double d = fabs(o[j] - out[k * 512 + j]);
                worst = d > worst ? d : worst;
                scale_o = fabs(o[j]) > scale_o ? fabs(o[j]) : scale_o;
            }
            worst_lse = fabs(l - lse[k]) > worst_lse ? fabs(l - lse[k]) : worst_lse;
        }
        i0 += (size_t)lens[b];
        free(rows);
    }
    CHECK(worst <= 1e-12 * scale_o && worst_lse < 1e-12,
          "q8 C%dR%d G %d decode ref (protect %d, packed_f32 %d) vs naive: worst output %g "
          "(of %g), lse %g", cb, rb, G, protect, packed_f32, worst, scale_o, worst_lse);
    free(out);
    free(lse);
    release(&f);
}

int main(void)
{
    check_rng_seed(0x9e3779b97f4a7c15ULL);
    test_layout(4, 4, 64, 0);
    test_layout(2, 4, 64, 0);
    test_layout(8, 8, 64, 0);
    test_layout(4, 2, 32, 0);
    test_decode_ref(1, 1, 0);
    test_decode_ref(0, 1, 0);
    test_decode_ref(0, 2, 0);
    test_decode_ref(1, 1, 1);
    test_decode_ref(0, 1, 1);
    test_decode_ref(0, 2, 1);
    test_aging();
    test_storage();
    /* float32 rows (after the BF16 tests: their random draws unchanged) */
    test_layout(4, 4, 64, 1);
    test_layout(2, 4, 64, 1);
    test_layout(8, 8, 64, 1);
    test_layout(4, 2, 32, 1);
    test_f32_rows();
    /* the writer names a non-finite token */
    {
        qmla_kv_config cfg = {4, 4, 64, 4, 128, QMLA_CORE_META_F16};
        uint8_t pool[20736];
        uint16_t row[576], sink[4 * 576], win[128 * 576];
        for (int j = 0; j < 576; j++)
            row[j] = bf(0.5 * j);
        row[300] = 0x7fc0;
        int64_t slot = 3;
        int32_t seq = 0, pos = 0, len = 1;
        qmla_kv_cache kc = {cfg, pool, 1, sink, win, 1};
        qmla_kv_write w = {row, 1, &slot, &seq, &pos, &len, NULL};
        qmla_error err;
        int st = qmla_kv_write_ref(&kc, &w, &err);
        CHECK(st == QMLA_ENONFINITE && strstr(err.msg, "group 4"), "NaN: %d %s", st, err.msg);
    }
    /* q8 metadata pages (after the f16 tests: their random draws unchanged) */
    test_q8_page_bytes();
    test_q8_group_steps();
    for (int f32 = 0; f32 < 2; f32++) {
        test_q8_layout(4, 4, 64, f32);
        test_q8_layout(2, 4, 64, f32);
        test_q8_layout(8, 8, 64, f32);
        test_q8_layout(4, 4, 32, f32);
        test_q8_layout(2, 4, 16, f32);
        test_q8_layout(8, 8, 8, f32);
        test_q8_layout(4, 2, 8, f32);
    }
    test_q8_errors();
    test_q8_decode_ref(4, 4, 64, 0, 0);
    test_q8_decode_ref(4, 4, 64, 0, 1);
    test_q8_decode_ref(2, 4, 32, 0, 1);
    test_q8_decode_ref(8, 8, 16, 0, 0);
    test_q8_decode_ref(4, 4, 64, 1, 0);
    return check_summary("test_kvcache");
}
