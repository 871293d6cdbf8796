/* test_decode_cuda.c — the fused cache writer (kernels/kvcache.cu) and paged
 * decode attention (kernels/decode.cu) on the GPU against their C twins:
 *  - writer: pool pages, sink and window buffers bit for bit equal to
 *    qmla_kv_write_ref (prefill-sized writes), and the same error for NaN;
 *    from BF16 rows and from float32 rows (every configuration and group
 *    size; the float32 rows are not BF16 values, so a writer that rounded
 *    them first would differ from the twin);
 *  - decode: output and LSE against the double-precision reference on the
 *    cache as the kernel attends to it (qmla_decode_ref_model with
 *    qmla_decode_cuda_packed_f32), NMSE <= 1e-5 and
 *    |LSE error| <= 1e-4, over BF16, C4R4, C2R4, C8R8 and odd shapes
 *    (batch 1/3/8, contexts 1, 63, 64, 65, 131, 4097, H 16 and 128,
 *    s_q 1 and 2, window covering everything or nothing); outputs poisoned
 *    before each call; a second call bit-identical; every kernel variant
 *    (QMLA_DECODE_VARIANTS, decode_cuda.h) a configuration has;
 *  - token aging: tokens appended one per sequence per call (decode-sized
 *    writes) across the window boundary, checked after each step;
 *  - q8 metadata pages: the writer's bytes against the twin (edge rows,
 *    every configuration and group size, BF16 and float32 rows) and its
 *    errors (on the H200 since run 12); decode of q8 pages (C4R4 q8, C2R4
 *    q8: the fast kernel's variants 0, 1, 3, 4, 7) over the same shapes
 *    and the same bar, and the token aging on C4R4 q8 (H200 run 13).
 * SKIP (77) without a usable GPU. Run: meson test -C build --suite cuda */
#include "rng.h"
#include "cuda_check.h"
#include "check.h"
#include "decode_cuda.h"
#include "kvcache_cuda.h"
#include "qdq_cuda.h"
#include "qmla/decode.h"
#include "qmla/kvcache.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>


typedef struct {
    const char *name;
    int batch, H, s_q, S, W;
    int len[8];
} shape;

/* Host and device copies of one batch's cache and queries. */
typedef struct {
    qmla_kv_cache h, d;       /* host twin, device */
    qmla_decode_args ah, ad;  /* host / device pointers */
    size_t pool_bytes, sink_bytes, win_bytes;
    int32_t *bt, *len, *dbt, *dlen;
    uint16_t *q, *dq;
    int maxp;
} cache;

static void cache_alloc(cache *c, qmla_kv_config cfg, const shape *s, int max_len)
{
    memset(c, 0, sizeof *c);
    const qmla_kv_layout L = qmla_kv_layout_of(&cfg);
    c->maxp = (max_len + 63) / 64;
    const size_t pages = (size_t)s->batch * c->maxp + 3;
    c->pool_bytes = pages * L.page_bytes;
    c->sink_bytes = (size_t)s->batch * (cfg.sink + 1) * QMLA_KV_D * 2;
    c->win_bytes = (size_t)s->batch * (cfg.window + 1) * QMLA_KV_D * 2;
    c->h.cfg = c->d.cfg = cfg;
    c->h.batch = c->d.batch = s->batch;
    c->h.n_pages = c->d.n_pages = pages;
    c->h.pool = calloc(1, c->pool_bytes);
    c->h.sink = calloc(1, c->sink_bytes);
    c->h.window = calloc(1, c->win_bytes);
    c->d.pool = dalloc(c->pool_bytes);
    c->d.sink = dalloc(c->sink_bytes);
    c->d.window = dalloc(c->win_bytes);
    CU(cudaMemset(c->d.pool, 0, c->pool_bytes));
    CU(cudaMemset(c->d.sink, 0, c->sink_bytes));
    CU(cudaMemset(c->d.window, 0, c->win_bytes));
    /* block tables: a random permutation of physical pages 3.. */
    int32_t *perm = malloc(pages * 4);
    for (size_t i = 0; i < pages; i++)
        perm[i] = (int32_t)i;
    for (size_t i = pages; i > 1; i--) {
        size_t j = (size_t)(unif() * (double)i);
        int32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
    c->bt = malloc((size_t)s->batch * c->maxp * 4);
    memcpy(c->bt, perm, (size_t)s->batch * c->maxp * 4);
    free(perm);
    c->len = calloc((size_t)s->batch, 4);
    c->dbt = up(c->bt, (size_t)s->batch * c->maxp * 4);
    c->dlen = up(c->len, (size_t)s->batch * 4);
    const size_t nq = (size_t)s->batch * s->s_q * s->H * QMLA_KV_D;
    c->q = malloc(nq * 2);
    for (size_t i = 0; i < nq; i++)
        c->q[i] = qmla_core_f32_to_bf16((float)gauss());
    c->dq = up(c->q, nq * 2);
    qmla_decode_args a = {s->batch, s->s_q, s->H, 1.0f / sqrtf(192.0f), c->q, c->bt, c->maxp,
                          c->len};
    c->ah = a;
    c->ad = a;
    c->ad.q = c->dq;
    c->ad.block_table = c->dbt;
    c->ad.seq_len = c->dlen;
}

static void cache_free(cache *c)
{
    free(c->h.pool);
    free(c->h.sink);
    free(c->h.window);
    cudaFree(c->d.pool);
    cudaFree(c->d.sink);
    cudaFree(c->d.window);
    free(c->bt);
    free(c->len);
    free(c->q);
    cudaFree(c->dbt);
    cudaFree(c->dlen);
    cudaFree(c->dq);
}

/* Rows of the q8 writer checks (edge_rows != 0): token i of a write gets
 * kind i % 9 as in test_kvcache's q8 tests: Gaussian with outliers, zeros,
 * constant groups, 1e4 N, 4e5 N (beyond float16 metadata), 1 + 1e-3 N,
 * group magnitudes 1e-2..1e2, positive-only, negative-only with a
 * zero-range group. */
static int edge_rows;
static float edge_value(size_t i, int b, int j)
{
    const double z = gauss();
    const int g8 = j / 8;
    switch ((int)(i % 9)) {
    case 1: return 0.0f;
    case 2: return (float)((g8 % 5 == 0) ? 0.0 : 0.75 * (double)(g8 % 7 - 3));
    case 3: return (float)(1e4 * z);
    case 4: return (float)(4e5 * z);
    case 5: return (float)(1.0 + 1e-3 * z);
    case 6: return (float)(z * pow(10.0, (double)((j / 32) % 5 - 2)));
    case 7: return (float)(3.0 + fabs(z) * (1 + j % 3));
    case 8: return (float)((j >= 64 && j < 72) ? -2.5 : -1.0 - fabs(z));
    default: return (float)(z * (j % 37 == 3 ? 4.0 : 1.0) + 0.1 * b);
    }
}

/* Append tokens: for each sequence b, positions from..to-1 (to <= its slot
 * capacity), through the GPU writer and the C twin, as BF16 rows or (f32)
 * as float32 rows; compare the bytes. */
static int append_rows(cache *c, const shape *s, const int *from, const int *to, void *ws,
                       int f32)
{
    size_t n = 0;
    for (int b = 0; b < s->batch; b++)
        n += (size_t)(to[b] - from[b]);
    const size_t esz = f32 ? 4 : 2;
    uint16_t *kv = malloc((n + 1) * QMLA_KV_D * 2);
    float *kv32 = malloc((n + 1) * QMLA_KV_D * 4);
    int64_t *slot = malloc((n + 1) * 8);
    int32_t *seq = malloc((n + 1) * 4), *pos = malloc((n + 1) * 4);
    size_t i = 0;
    for (int b = 0; b < s->batch; b++) {
        for (int t = from[b]; t < to[b]; t++, i++) {
            for (int j = 0; j < QMLA_KV_D; j++) {
                const float v =
                    edge_rows ? edge_value(i, b, j)
                              : (float)(gauss() * (j % 41 == 7 ? 3.0 : 1.0) +
                                        (j < 512 ? 0.05 * b : 0.0));
                kv[i * QMLA_KV_D + j] = qmla_core_f32_to_bf16(v);
                kv32[i * QMLA_KV_D + j] = v;
            }
            slot[i] = (int64_t)c->bt[b * c->maxp + t / 64] * 64 + t % 64;
            seq[i] = b;
            pos[i] = t;
        }
        c->len[b] = to[b];
    }
    const void *rows = f32 ? (const void *)kv32 : (const void *)kv;
    void *drows = up(rows, n * QMLA_KV_D * esz);
    qmla_kv_write wh = {f32 ? NULL : kv, n, slot, seq, pos, c->len, f32 ? kv32 : NULL};
    qmla_kv_write wd = {f32 ? NULL : drows, n, up(slot, n * 8), up(seq, n * 4),
                        up(pos, n * 4), up(c->len, (size_t)s->batch * 4),
                        f32 ? drows : NULL};
    qmla_error e1, e2;
    int st1 = qmla_kv_write_ref(&c->h, &wh, &e1);
    int st2 = qmla_kv_write_cuda_launch(&c->d, &wd, ws, 0, &e2);
    if (!st2)
        st2 = qmla_kv_write_cuda_status(&c->d, ws, 0, &e2);
    CHECK(st1 == 0 && st2 == 0, "writer: %s / %s", e1.msg, e2.msg);
    CU(cudaMemcpy(c->dlen, c->len, (size_t)s->batch * 4, cudaMemcpyHostToDevice));
    uint8_t *pool = malloc(c->pool_bytes), *sink = malloc(c->sink_bytes),
            *win = malloc(c->win_bytes);
    CU(cudaMemcpy(pool, c->d.pool, c->pool_bytes, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(sink, c->d.sink, c->sink_bytes, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(win, c->d.window, c->win_bytes, cudaMemcpyDeviceToHost));
    int same = !memcmp(pool, c->h.pool, c->pool_bytes) && !memcmp(sink, c->h.sink, c->sink_bytes) &&
               !memcmp(win, c->h.window, c->win_bytes);
    free(pool);
    free(sink);
    free(win);
    cudaFree(drows);
    cudaFree((void *)wd.slot);
    cudaFree((void *)wd.seq);
    cudaFree((void *)wd.pos);
    cudaFree((void *)wd.seq_len);
    free(kv);
    free(kv32);
    free(slot);
    free(seq);
    free(pos);
    return same;
}

static int append(cache *c, const shape *s, const int *from, const int *to, void *ws)
{
    return append_rows(c, s, from, to, ws, 0);
}

/* The kernel's reconstruction of every token, bit for bit against
 * qmla_kv_token_ref. Returns the number of differing tokens. */
static long check_gather(cache *c, const shape *s)
{
    const size_t n = (size_t)s->batch * c->maxp * 64 * QMLA_KV_D;
    uint16_t *d = dalloc(n * 2), *h = malloc(n * 2);
    qmla_error err;
    int st = qmla_kv_gather_cuda(&c->d, &c->ad, d, 0, &err);
    CHECK_OK(st, err);
    CU(cudaDeviceSynchronize());
    CU(cudaMemcpy(h, d, n * 2, cudaMemcpyDeviceToHost));
    long bad = 0;
    float row[QMLA_KV_D];
    for (int b = 0; b < s->batch; b++)
        for (long t = 0; t < c->len[b]; t++) {
            qmla_kv_token_ref(&c->h, &c->ah, b, t, row);
            const uint16_t *g = h + ((size_t)b * c->maxp * 64 + t) * QMLA_KV_D;
            int diff = 0;
            for (int j = 0; j < QMLA_KV_D; j++)
                diff |= qmla_core_f32_to_bf16(row[j]) != g[j];
            bad += diff;
        }
    cudaFree(d);
    free(h);
    return bad;
}

/* A comma list of small numbers (0..31) in environment variable name as a
 * bit mask into *m; every bit when it is unset or empty. Anything else
 * ("x", "3,", "3,,4", "40") is a FAIL naming the variable (review11: a
 * malformed list used to select nothing, and the test passed having
 * checked no variant). */
static int env_mask(const char *name, unsigned *m)
{
    const char *e = getenv(name);
    *m = ~0u;
    if (!e || !*e)
        return 1;
    *m = 0;
    for (const char *p = e;;) {
        char *end;
        if (*p < '0' || *p > '9')
            break;
        const long k = strtol(p, &end, 10);
        if (k > 31)
            break;
        *m |= 1u << k;
        if (*end == '\0')
            return 1;
        if (*end != ',')
            break;
        p = end + 1;
    }
    printf("FAIL: %s=\"%s\": expected a comma list of numbers 0..31 (or unset / empty: all)\n",
           name, e);
    return 0;
}

/* 0 when mask (of env_mask) selects something of the n entries 0..n-1 and
 * nothing past them; else a FAIL naming the variable. */
static int env_mask_fits(const char *name, unsigned m, unsigned n)
{
    if (m == ~0u)
        return 0;
    const unsigned all = n >= 32 ? ~0u : (1u << n) - 1u;
    if ((m & all) && !(m & ~all))
        return 0;
    printf("FAIL: %s=\"%s\": expected indices 0..%u of this run (a selection of nothing "
           "would check nothing)\n", name, getenv(name), n - 1);
    return 1;
}

/* 1 when kernel variant v runs for cfg (a plan for it does not fall back
 * to variant 0; host arithmetic, no device needed). */
static int variant_applies(const qmla_kv_config *cfg, int v)
{
    if (v == 0)
        return 1;
    const uint16_t q0 = 0;
    const int32_t z = 0;
    qmla_decode_args a = {1, 1, 16, 1.0f, &q0, &z, 1, &z};
    qmla_decode_plan plan;
    qmla_error err;
    return qmla_decode_cuda_plan_variant(cfg, &a, 64, 132, v, &plan, &err) == QMLA_OK &&
           plan.variant == v;
}

/* Decode on the GPU (twice) and against the reference. Returns NMSE. */
static double check_decode(cache *c, const shape *s, const char *what, int variant,
                           double *lse_err, int *identical)
{
    const size_t R = (size_t)s->s_q * s->H, rows = (size_t)s->batch * R;
    int max_len = 0;
    for (int b = 0; b < s->batch; b++)
        max_len = c->len[b] > max_len ? c->len[b] : max_len;
    qmla_decode_plan plan;
    qmla_error err;
    int st = qmla_decode_cuda_plan_variant(&c->d.cfg, &c->ad, max_len, 0, variant, &plan, &err);
    CHECK_OK(st, err);
    /* variant 7 (the default of C4R4 / C2R4) may hand a shape to variant 2
     * (decode_cuda.h); the plan's variant is the one that runs */
    CHECK(plan.variant == variant || (variant == 7 && plan.variant == 2),
          "%s: plan for variant %d runs %d", what, variant, plan.variant);
    void *ws = dalloc(plan.ws_bytes);
    uint16_t *dout = dalloc(rows * 512 * 2);
    float *dlse = dalloc(rows * 4);
    uint16_t *out = malloc(rows * 512 * 2), *out2 = malloc(rows * 512 * 2);
    float *lse = malloc(rows * 4), *lse2 = malloc(rows * 4);
    double *ro = malloc(rows * 512 * 8), *rl = malloc(rows * 8);
    CU(cudaMemset(dout, 0xff, rows * 512 * 2)); /* poison: NaN */
    CU(cudaMemset(dlse, 0xff, rows * 4));
    st = qmla_decode_cuda(&c->d, &c->ad, &plan, ws, dout, dlse, 0, &err);
    CHECK_OK(st, err);
    CU(cudaDeviceSynchronize());
    CU(cudaMemcpy(out, dout, rows * 512 * 2, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(lse, dlse, rows * 4, cudaMemcpyDeviceToHost));
    CU(cudaMemset(dout, 0xff, rows * 512 * 2));
    st = qmla_decode_cuda(&c->d, &c->ad, &plan, ws, dout, dlse, 0, &err);
    CU(cudaDeviceSynchronize());
    CU(cudaMemcpy(out2, dout, rows * 512 * 2, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(lse2, dlse, rows * 4, cudaMemcpyDeviceToHost));
    *identical = !memcmp(out, out2, rows * 512 * 2) && !memcmp(lse, lse2, rows * 4);
    /* the reference on the cache the kernel attends to (packed values
     * unrounded for C4R4 / C2R4, BF16-rounded otherwise) */
    st = qmla_decode_ref_model(&c->h, &c->ah,
                               qmla_decode_cuda_variant_packed_f32(&c->d.cfg, plan.variant), ro, rl,
                               &err);
    CHECK_OK(st, err);
    double num = 0, den = 0, le = 0;
    int nonfinite = 0;
    for (size_t r = 0; r < rows; r++) {
        for (int j = 0; j < 512; j++) {
            const double g = qmla_core_bf16_to_f32(out[r * 512 + j]), f = ro[r * 512 + j];
            if (!isfinite(g))
                nonfinite++;
            num += (g - f) * (g - f);
            den += f * f;
        }
        if (isinf(rl[r])) {
            if (!(isinf(lse[r]) && lse[r] < 0))
                le = INFINITY;
        } else {
            const double d = fabs((double)lse[r] - rl[r]);
            le = d > le || isnan(d) ? d : le;
        }
    }
    CHECK(nonfinite == 0, "%s: %d non-finite outputs", what, nonfinite);
    *lse_err = le;
    cudaFree(ws);
    cudaFree(dout);
    cudaFree(dlse);
    free(out);
    free(out2);
    free(lse);
    free(lse2);
    free(ro);
    free(rl);
    return den > 0 ? num / den : num;
}

int main(void)
{
    check_rng_seed(0x2545f4914f6cdd1dULL);
    qmla_error err;
    /* QMLA_TEST_VARIANTS / QMLA_TEST_SHAPES / QMLA_TEST_CFGS (comma lists of
     * variant numbers, shape indices of the table below, configuration
     * indices of cfgs[]) and QMLA_TEST_AGING (steps): a full-size subset for
     * the sanitizers, whose full matrix outlasts a device call; read and
     * checked before the device (a malformed value fails here too) */
    unsigned vmask, smask, cmask;
    if (!env_mask("QMLA_TEST_VARIANTS", &vmask) || !env_mask("QMLA_TEST_SHAPES", &smask) ||
        !env_mask("QMLA_TEST_CFGS", &cmask))
        return 1;
    const char *aging_env = getenv("QMLA_TEST_AGING");
    long aging_set = -1;
    if (aging_env && *aging_env) {
        char *end;
        aging_set = aging_env[0] >= '0' && aging_env[0] <= '9' ? strtol(aging_env, &end, 10) : -1;
        if (aging_set < 0 || *end || aging_set > 100000) {
            printf("FAIL: QMLA_TEST_AGING=\"%s\": expected a number of steps 0..100000\n",
                   aging_env);
            return 1;
        }
    }
    skip_without_gpu();
    void *ws = dalloc(QMLA_KV_WRITE_WS_BYTES);
    {
        qmla_error e;
        if (qmla_kv_write_cuda_ws_init(ws, 0, &e)) {
            printf("FAIL: %s\n", e.msg);
            return 1;
        }
    }
    const shape shapes[] = {
        {"b1 ctx1", 1, 16, 1, 4, 128, {1}},
        {"b3 ctx63/64/65", 3, 16, 1, 4, 128, {63, 64, 65}},
        {"b8 mixed", 8, 16, 1, 4, 128, {1, 63, 64, 65, 131, 4097, 200, 1000}},
        /* three row tiles (s_q 3): variants 2, 5, 6 with an odd tile count
         * (the last block's second tile past R_pad); in the small mode too */
        {"b2 s_q3", 2, 16, 3, 4, 128, {300, 1100}},
        {"b3 H128", 3, 128, 1, 4, 128, {131, 4097, 65}},
        {"b3 s_q2", 3, 16, 2, 4, 128, {5, 131, 300}},
        {"b3 window covers all", 3, 16, 1, 4, 8192, {131, 4097, 64}},
        {"b1 no protection", 1, 16, 1, 0, 0, {4097}},
        /* variant 7's combines (decode_cuda.h): rows x sequences 160, the
         * channel-split combine3 with 2 blocks per row (the shapes above
         * run the one with 4: below 132); 512 at <= 16 partials, the old one */
        {"b5 s_q2", 5, 16, 2, 4, 128, {65, 4097, 131, 700, 2}},
        {"b4 H128", 4, 128, 1, 4, 128, {4097, 300, 65, 1}},
        /* 8 row tiles x sequences, <= 4K: variant 7 runs variant 2 (C4R4) */
        {"b1 H128", 1, 128, 1, 4, 128, {2000}},
    };
    /* configurations 4 and 5: q8-metadata pages (the variants that read
     * them: decode_cuda.h); QMLA_TEST_CFGS also selects the token aging of
     * C4R4 (1), C8R8 (3) and C4R4 q8 (4) */
    const char *cfgs[] = {"BF16", "C4R4", "C2R4", "C8R8", "C4R4q8", "C2R4q8"};
    enum { N_CFGS = sizeof cfgs / sizeof *cfgs, FIRST_Q8 = 4 };
    double worst_nmse = 0, worst_lse = 0;
    /* QMLA_TEST_SMALL=1 (under compute-sanitizer): four shapes (one of them
     * with three row tiles), 12 aging steps */
    /* (set and not empty: scripts/device-decode-hopper.sh passes SAN_SMALL=
     * through as an empty value for the full size) */
    const int small = getenv("QMLA_TEST_SMALL") != NULL && *getenv("QMLA_TEST_SMALL");
    const size_t n_shapes = small ? 4 : sizeof shapes / sizeof *shapes;
    if (env_mask_fits("QMLA_TEST_VARIANTS", vmask, QMLA_DECODE_VARIANTS) ||
        env_mask_fits("QMLA_TEST_SHAPES", smask, (unsigned)n_shapes) ||
        env_mask_fits("QMLA_TEST_CFGS", cmask, N_CFGS))
        return 1;
    const int aging_steps = aging_set >= 0 ? (int)aging_set : (small ? 12 : 90);
    for (int ci = 0; ci < N_CFGS; ci++)
        for (size_t si = 0; si < n_shapes; si++) {
            const shape *s = &shapes[si];
            if (!(cmask >> ci & 1) || !(smask >> si & 1))
                continue;
            qmla_kv_config cfg = {0};
            char base[8];
            snprintf(base, sizeof base, "%.4s", cfgs[ci]);
            CHECK_OK(qmla_kv_parse_config(base, &cfg, &err), err);
            if (ci >= FIRST_Q8)
                cfg.meta = QMLA_CORE_META_Q8;
            cfg.sink = s->S;
            cfg.window = s->W;
            int max_len = 0, from[8] = {0};
            for (int b = 0; b < s->batch; b++)
                max_len = s->len[b] > max_len ? s->len[b] : max_len;
            cache c;
            cache_alloc(&c, cfg, s, max_len);
            CHECK(append(&c, s, from, s->len, ws), "%s %s: writer bytes differ from the twin",
                  cfgs[ci], s->name);
            if (ci > 0 && ci < FIRST_Q8) { /* (the gather reads f16 metadata only) */
                const long bad = check_gather(&c, s);
                CHECK(bad == 0, "%s %s: %ld tokens reconstructed differently from the twin",
                      cfgs[ci], s->name, bad);
            }
            /* every kernel variant this configuration has (decode_cuda.h) */
            for (int v = 0; v < QMLA_DECODE_VARIANTS; v++) {
                if (!(vmask >> v & 1) || !variant_applies(&cfg, v))
                    continue;
                double le;
                int same;
                const double nmse = check_decode(&c, s, s->name, v, &le, &same);
                printf("%-6s %-22s v%d nmse %.3e  lse err %.3e  %s\n", cfgs[ci], s->name, v,
                       nmse, le, same ? "repeat identical" : "REPEAT DIFFERS");
                CHECK(nmse <= 1e-5 && le <= 1e-4, "%s %s v%d: nmse %g lse %g", cfgs[ci],
                      s->name, v, nmse, le);
                CHECK(same, "%s %s v%d: second call differs", cfgs[ci], s->name, v);
                worst_nmse = nmse > worst_nmse ? nmse : worst_nmse;
                worst_lse = le > worst_lse ? le : worst_lse;
            }
            cache_free(&c);
        }
    /* the writer's other group sizes (32: 32 channels per thread; 16, 8: 8
     * per thread) and C4R2 (run-time bit widths), bytes against the twin */
    {
        const shape s = {"groups", 3, 16, 1, 4, 128, {70, 131, 5}};
        const int groups[4][3] = {{32, 4, 4}, {16, 4, 4}, {8, 2, 4}, {64, 4, 2}};
        for (int gi = 0; gi < 4; gi++) {
            qmla_kv_config cfg = {groups[gi][1], groups[gi][2], groups[gi][0], 4, 128, QMLA_CORE_META_F16};
            cache c;
            int from[3] = {0, 0, 0};
            cache_alloc(&c, cfg, &s, 131);
            CHECK(append(&c, &s, from, s.len, ws), "writer C%dR%d G %d: bytes differ from the twin",
                  cfg.c_bits, cfg.r_bits, cfg.group);
            cache_free(&c);
        }
    }
    /* float32 rows: every configuration on three shapes (prefill-sized, with
     * and without protection) and the other group sizes, bytes against the
     * twin; then decode-sized writes (one token per sequence per call)
     * across the window boundary */
    {
        const shape fs[3] = {{"f32 b3", 3, 16, 1, 4, 128, {70, 131, 5}},
                             {"f32 b8", 8, 16, 1, 4, 128, {1, 63, 64, 65, 131, 300, 200, 7}},
                             {"f32 no protection", 1, 16, 1, 0, 0, {257}}};
        const int f32cfg[8][3] = {{16, 16, 64}, {4, 4, 64}, {2, 4, 64}, {8, 8, 64},
                                  {4, 4, 32}, {4, 4, 16}, {2, 4, 8}, {4, 2, 64}};
        int n_ok = 0, n_run = 0;
        for (int ci = 0; ci < 8; ci++)
            for (int si = 0; si < 3; si++) {
                const shape *s = &fs[si];
                qmla_kv_config cfg = {f32cfg[ci][0], f32cfg[ci][1], f32cfg[ci][2], s->S, s->W, QMLA_CORE_META_F16};
                int max_len = 0, from[8] = {0};
                for (int b = 0; b < s->batch; b++)
                    max_len = s->len[b] > max_len ? s->len[b] : max_len;
                cache c;
                cache_alloc(&c, cfg, s, max_len);
                const int ok = append_rows(&c, s, from, s->len, ws, 1);
                CHECK(ok, "float32 rows, C%dR%d G %d, %s: writer bytes differ from the twin",
                      cfg.c_bits, cfg.r_bits, cfg.group, s->name);
                n_ok += ok;
                n_run++;
                cache_free(&c);
            }
        const shape s = {"f32 aging", 2, 16, 1, 4, 128, {0, 0}};
        qmla_kv_config cfg = {4, 4, 64, 4, 128, QMLA_CORE_META_F16};
        cache c;
        cache_alloc(&c, cfg, &s, 300);
        int from[2] = {0, 0}, to[2] = {120, 60};
        int ok = append_rows(&c, &s, from, to, ws, 1);
        for (int step = 0; step < 20; step++) {
            from[0] = to[0]++;
            from[1] = to[1]++;
            ok &= append_rows(&c, &s, from, to, ws, 1);
        }
        ok &= check_gather(&c, &s) == 0;
        CHECK(ok, "float32 rows, C4R4: decode-sized writes across W differ from the twin");
        cache_free(&c);
        printf("float32 rows: %d of %d writes bit for bit the twin; decode-sized: %s\n", n_ok,
               n_run, ok ? "identical" : "DIFFER");
    }
    /* token aging: two sequences grow one token per call across W = 128,
     * every variant of C4R4 after each step; then C8R8 with its variants 0,
     * 9 and 10 (the tile kernel, the codes on the tensor cores); then C4R4
     * q8 (the variants that read q8 pages; no gather there) */
    for (int ai = 0; ai < 3; ai++) {
        const int bits = ai == 1 ? 8 : 4, q8 = ai == 2;
        if (!(cmask >> (q8 ? FIRST_Q8 : bits == 8 ? 3 : 1) & 1))
            continue;
        const shape s = {"aging", 2, 16, 1, 4, 128, {0, 0}};
        qmla_kv_config cfg = {bits, bits, 64, 4, 128, q8 ? QMLA_CORE_META_Q8 : QMLA_CORE_META_F16};
        cache c;
        cache_alloc(&c, cfg, &s, 300);
        int from[2] = {0, 0}, to[2] = {120, 60};
        int ok_bytes = append(&c, &s, from, to, ws), ok = 1, steps = 0, n_var = 0;
        double wn = 0, wl = 0;
        for (int step = 0; step < aging_steps; step++, steps++) {
            from[0] = to[0];
            from[1] = to[1];
            to[0]++;
            to[1]++;
            ok_bytes &= append(&c, &s, from, to, ws);
            if (!q8)
                ok &= check_gather(&c, &s) == 0;
            for (int v = 0; v < QMLA_DECODE_VARIANTS; v++) {
                double le;
                int same;
                if (!(vmask >> v & 1) || !variant_applies(&cfg, v) ||
                    (bits == 8 && v != 0 && v < 9))
                    continue;
                const double nmse = check_decode(&c, &s, "aging", v, &le, &same);
                ok &= nmse <= 1e-5 && le <= 1e-4 && same;
                wn = nmse > wn ? nmse : wn;
                wl = le > wl ? le : wl;
                n_var += step == 0;
            }
        }
        const char *what = q8 ? "C4R4q8" : bits == 8 ? "C8R8" : "C4R4";
        printf("%-6s aging (%d steps, %d variants%s) nmse %.3e  lse err %.3e\n", what, steps,
               n_var, vmask == ~0u ? "" : " of QMLA_TEST_VARIANTS", wn, wl);
        CHECK(ok_bytes, "%s aging: writer bytes differ from the twin", what);
        CHECK(ok, "%s aging: worst nmse %g lse %g", what, wn, wl);
        /* (with every variant selected at least one applies; a
         * QMLA_TEST_VARIANTS list may select none of this configuration's) */
        CHECK(steps == 0 || n_var > 0 || vmask != ~0u, "%s aging: no variant applies", what);
        cache_free(&c);
    }
    /* writer error: the same token, group and value as the twin (the
     * group's first non-finite value, in either half of a group of 64:
     * the kernel splits it over two threads) */
    for (int v = 0; v < 4; v++) {
        const shape s = {"nan", 1, 16, 1, 4, 128, {10}};
        qmla_kv_config cfg = {4, 4, 64, 4, 128, QMLA_CORE_META_F16};
        cache c;
        cache_alloc(&c, cfg, &s, 64);
        uint16_t kv[3 * 576];
        float kv32[3 * 576];
        for (int j = 0; j < 3 * 576; j++) {
            kv32[j] = (float)gauss();
            kv[j] = qmla_core_f32_to_bf16(kv32[j]);
        }
        if (v == 0) { /* RoPE group 8, first half */
            kv[2 * 576 + 530] = 0x7fc0;
        } else if (v == 1) { /* content group 1: NaN in the first half, -inf in the second */
            kv[2 * 576 + 70] = 0x7fc0;
            kv[2 * 576 + 100] = 0xff80;
        } else if (v == 2) { /* content group 1: -inf then NaN, both in the second half */
            kv[2 * 576 + 100] = 0xff80;
            kv[2 * 576 + 120] = 0x7fc0;
        } else { /* float32 rows: content group 1, +inf then NaN in the second half */
            kv32[2 * 576 + 100] = INFINITY;
            kv32[2 * 576 + 120] = NAN;
        }
        const int f32 = v == 3;
        const char *want = v == 0 ? "group 8: non-finite value nan"
                           : v == 1 ? "group 1: non-finite value nan"
                           : v == 2 ? "group 1: non-finite value -inf"
                                    : "group 1: non-finite value inf";
        int64_t slot[3] = {(int64_t)c.bt[0] * 64, (int64_t)c.bt[0] * 64 + 1,
                           (int64_t)c.bt[0] * 64 + 2};
        int32_t seq[3] = {0, 0, 0}, pos[3] = {0, 1, 2}, len[1] = {3};
        void *drows = f32 ? up(kv32, sizeof kv32) : up(kv, sizeof kv);
        qmla_kv_write wh = {f32 ? NULL : kv, 3, slot, seq, pos, len, f32 ? kv32 : NULL};
        qmla_kv_write wd = {f32 ? NULL : drows, 3, up(slot, 24), up(seq, 12), up(pos, 12),
                            up(len, 4), f32 ? drows : NULL};
        qmla_error e1, e2;
        int st1 = qmla_kv_write_ref(&c.h, &wh, &e1);
        int st2 = qmla_kv_write_cuda_launch(&c.d, &wd, ws, 0, &e2);
        if (!st2)
            st2 = qmla_kv_write_cuda_status(&c.d, ws, 0, &e2);
        CHECK(st1 == QMLA_ENONFINITE && st2 == QMLA_ENONFINITE && strstr(e2.msg, "token 2,") &&
                  strstr(e2.msg, want) && strcmp(e1.msg, e2.msg) == 0,
              "non-finite %d: %s / %s", v, e1.msg, e2.msg);
        cudaFree(drows);
        cudaFree((void *)wd.slot);
        cudaFree((void *)wd.seq);
        cudaFree((void *)wd.pos);
        cudaFree((void *)wd.seq_len);
        cache_free(&c);
    }
    /* q8 metadata pages: the GPU writer against the twin, bytes of pool,
     * sink and window, BF16 and float32 rows of the nine edge kinds, every
     * configuration and group size, prefill-sized and decode-sized writes;
     * then the errors (token, path or group, value) as the twin names them.
     * Compiled here; first run on a device still to come (docs/decode.md). */
    {
        const shape fs[3] = {{"q8 b3", 3, 16, 1, 4, 128, {70, 131, 5}},
                             {"q8 b8", 8, 16, 1, 4, 128, {1, 63, 64, 65, 131, 300, 200, 7}},
                             {"q8 no protection", 1, 16, 1, 0, 0, {257}}};
        const int qcfg[8][3] = {{4, 4, 64}, {2, 4, 64}, {8, 8, 64}, {4, 4, 32},
                                {4, 4, 16}, {2, 4, 8},  {4, 2, 64}, {8, 8, 8}};
        int n_ok = 0, n_run = 0;
        edge_rows = 1;
        for (int f32 = 0; f32 < 2; f32++)
            for (int ci = 0; ci < 8; ci++)
                for (int si = 0; si < 3; si++) {
                    const shape *s = &fs[si];
                    qmla_kv_config cfg = {qcfg[ci][0], qcfg[ci][1], qcfg[ci][2],
                                          s->S,        s->W,        QMLA_CORE_META_Q8};
                    int max_len = 0, from[8] = {0};
                    for (int b = 0; b < s->batch; b++)
                        max_len = s->len[b] > max_len ? s->len[b] : max_len;
                    cache c;
                    cache_alloc(&c, cfg, s, max_len);
                    const int ok = append_rows(&c, s, from, s->len, ws, f32);
                    CHECK(ok, "q8 %s rows, C%dR%d G %d, %s: writer bytes differ from the twin",
                          f32 ? "float32" : "BF16", cfg.c_bits, cfg.r_bits, cfg.group, s->name);
                    n_ok += ok;
                    n_run++;
                    cache_free(&c);
                }
        const shape s = {"q8 aging", 2, 16, 1, 4, 128, {0, 0}};
        qmla_kv_config cfg = {4, 4, 64, 4, 128, QMLA_CORE_META_Q8};
        cache c;
        cache_alloc(&c, cfg, &s, 300);
        int from[2] = {0, 0}, to[2] = {120, 60};
        int ok = append_rows(&c, &s, from, to, ws, 0);
        for (int step = 0; step < 20; step++) {
            from[0] = to[0]++;
            from[1] = to[1]++;
            ok &= append_rows(&c, &s, from, to, ws, step % 2);
        }
        CHECK(ok, "q8 C4R4: decode-sized writes across W differ from the twin");
        cache_free(&c);
        edge_rows = 0;
        printf("q8 metadata: %d of %d writes bit for bit the twin; decode-sized: %s\n", n_ok,
               n_run, ok ? "identical" : "DIFFER");
        /* errors: token 2 of 3 fails (float32 rows) */
        struct {
            int cb, G, ch;
            float v;
            int status;
        } ec[] = {
            {4, 64, 10, -9e6f, QMLA_ERANGE},  {4, 64, 530, -9e6f, QMLA_ERANGE},
            {4, 64, 10, 3e8f, QMLA_ERANGE},   {8, 64, 552, 5e9f, QMLA_ERANGE},
            {4, 8, 300, -9e6f, QMLA_ERANGE},  {4, 64, 200, NAN, QMLA_ENONFINITE},
            {4, 64, 520, INFINITY, QMLA_ENONFINITE}, {2, 8, 400, NAN, QMLA_ENONFINITE},
        };
        for (size_t k = 0; k < sizeof ec / sizeof ec[0]; k++) {
            const shape es = {"q8 error", 1, 16, 1, 4, 128, {10}};
            qmla_kv_config ecfg = {ec[k].cb, ec[k].cb == 2 ? 4 : ec[k].cb, ec[k].G, 4, 128,
                                   QMLA_CORE_META_Q8};
            cache e;
            cache_alloc(&e, ecfg, &es, 64);
            float kv32[3 * 576];
            for (int j = 0; j < 3 * 576; j++)
                kv32[j] = (float)gauss();
            kv32[2 * 576 + ec[k].ch] = ec[k].v;
            int64_t slot[3] = {(int64_t)e.bt[0] * 64, (int64_t)e.bt[0] * 64 + 1,
                               (int64_t)e.bt[0] * 64 + 2};
            int32_t seq[3] = {0, 0, 0}, pos[3] = {0, 1, 2}, len[1] = {3};
            void *drows = up(kv32, sizeof kv32);
            qmla_kv_write wh = {NULL, 3, slot, seq, pos, len, kv32};
            qmla_kv_write wd = {NULL, 3, up(slot, 24), up(seq, 12), up(pos, 12), up(len, 4),
                                drows};
            qmla_error e1, e2;
            int st1 = qmla_kv_write_ref(&e.h, &wh, &e1);
            int st2 = qmla_kv_write_cuda_launch(&e.d, &wd, ws, 0, &e2);
            if (!st2)
                st2 = qmla_kv_write_cuda_status(&e.d, ws, 0, &e2);
            CHECK(st1 == ec[k].status && st2 == ec[k].status && strstr(e2.msg, "token 2,") &&
                      strcmp(e1.msg, e2.msg) == 0,
                  "q8 error %zu: %s / %s", k, e1.msg, e2.msg);
            cudaFree(drows);
            cudaFree((void *)wd.slot);
            cudaFree((void *)wd.seq);
            cudaFree((void *)wd.pos);
            cudaFree((void *)wd.seq_len);
            cache_free(&e);
        }
    }
    printf("worst nmse %.3e, worst lse error %.3e\n", worst_nmse, worst_lse);
    cudaFree(ws);
    return check_summary("test_decode_cuda");
}
