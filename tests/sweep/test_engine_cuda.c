/* test_engine_cuda.c — the CUDA engine (kernels/engine_cuda.cu) against its
 * C reference twin, the CPU engine, table-driven over operations x shapes
 * in the manner of ggml's test-backend-ops: every case runs the operation
 * on both engines from the same inputs and compares.
 *   sweep: one sequence, both paths: nmse_cache and nmse_qdq bit for bit
 *          (the error directions are the CPU's), nmse_out, response and
 *          the three route NMSEs within 1e-4 relative, the degenerate flag
 *          equal; shapes T 1 .. 4097, H 1 .. 128, the family shapes of
 *          docs/models.md (V2-Lite, V3, GLM-4.7-Flash), odd widths, tiles
 *          of 1, 3 and 7 query tokens and the automatic tile; degenerate
 *          paths; T = 1 (RoPE response 0: one key); a float32 overflow
 *          refused by both; every case run twice
 *          on the GPU, bit-identical.
 *   layer: layer_begin makes the engine take new weights at the same
 *          host address (the driver calls it on every layer load).
 *   qdq:   the engine's quant table against qmla_quant_qdq, bit for bit.
 *   run:   qmla_sweep_run on the default capture (data/tiny-mla-default.h5)
 *          and on a V2-Lite-shaped synth capture with each engine: rows
 *          within 1e-4, the results file's engine "cuda" and engine_device.
 * SKIP (77) where the build has no cuda engine or no device is usable.
 * QMLA_TEST_SMALL=1 (sanitizer builds, compute-sanitizer memcheck) leaves
 * out the largest shapes; QMLA_TEST_SMALL=2 (racecheck, which is slow on
 * cuBLAS's kernels) runs only the shapes of at most 64 tokens x heads and
 * the layer and QDQ checks. */
#include "check.h"
#include "fixture.h"
#include "rng.h"
#include "driver/engine_cuda.h"
#include "qmla/capture.h"
#include "qmla/engine.h"
#include "qmla/quant.h"
#include "qmla/results.h"
#include "qmla/sweep.h"
#include "qmla/synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RTOL 1e-4

static const qmla_engine *cuda;
static char dir[256];
static double worst; /* largest relative difference seen */

typedef struct shape_case {
    const char *name;
    size_t H, D, d_c, d_n, d_r, d_v, T;
    size_t tile;  /* query tokens per tile; 0: automatic */
    int kind;     /* 0 normal; 1 content error without energy (degenerate); 2 overflow */
    int big;      /* left out under QMLA_TEST_SMALL */
} shape_case;

static const shape_case cases[] = {
    {"T1 H1", 1, 16, 16, 8, 8, 8, 1, 0, 0, 0},
    {"T2 H1", 1, 16, 16, 8, 8, 8, 2, 0, 0, 0},
    {"T17 H4", 4, 64, 64, 16, 16, 16, 17, 0, 0, 0},
    {"T17 H4 tile 1", 4, 64, 64, 16, 16, 16, 17, 1, 0, 0},
    {"T33 H4 tile 3", 4, 64, 64, 16, 16, 16, 33, 3, 0, 0},
    {"T64 H3 odd widths", 3, 40, 48, 24, 8, 12, 64, 7, 0, 0},
    {"T130 H2 d_c 128 tile 7", 2, 96, 128, 32, 64, 32, 130, 7, 0, 0},
    {"T257 H8", 8, 128, 64, 32, 32, 32, 257, 0, 0, 0},
    {"T512 H16 V2-Lite", 16, 2048, 512, 128, 64, 128, 512, 0, 0, 1},
    {"T512 H16 V2-Lite tile 100", 16, 2048, 512, 128, 64, 128, 512, 100, 0, 1},
    {"T96 H20 GLM-4.7-Flash", 20, 2048, 512, 192, 64, 256, 96, 0, 0, 1},
    {"T128 H128 V3", 128, 7168, 512, 128, 64, 128, 128, 0, 0, 1},
    {"T1024 H128 small widths", 128, 64, 64, 16, 16, 16, 1024, 0, 0, 1},
    {"T4097 H1", 1, 32, 64, 16, 16, 16, 4097, 0, 0, 1},
    {"T4097 H4 tile 1000", 4, 32, 64, 16, 16, 16, 4097, 1000, 0, 1},
    {"T2048 H128 small widths", 128, 64, 64, 16, 16, 16, 2048, 0, 0, 1},
    {"T33 H4 content degenerate", 4, 64, 64, 16, 16, 16, 33, 0, 1, 0},
    {"T33 H4 overflow", 4, 64, 64, 16, 16, 16, 33, 0, 2, 0},
};

static float *randn(size_t n, double scale)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(scale * gauss());
    return x;
}

/* |a - b| <= RTOL max(|a|, |b|) (both zero passes) */
static int near_rel(double a, double b)
{
    const double m = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
    if (m == 0.0)
        return 1;
    const double r = fabs(a - b) / m;
    if (r > worst)
        worst = r;
    return r <= RTOL;
}

static int rows_close(const qmla_response *a, const qmla_response *b, const char *what)
{
    int ok = 1;
#define CLOSE(f)                                                                         \
    if (!near_rel(a->f, b->f)) {                                                            \
        fprintf(stderr, "  %s %s: " #f " cpu %.9g cuda %.9g\n", what,                  \
                qmla_path_name(a->path), a->f, b->f);                                    \
        ok = 0;                                                                          \
    }
    CLOSE(nmse_out)
    CLOSE(response)
    CLOSE(nmse_out_matching)
    CLOSE(nmse_out_aggregation)
    CLOSE(nmse_out_interaction)
#undef CLOSE
    if (a->nmse_cache != b->nmse_cache || a->nmse_qdq != b->nmse_qdq ||
        a->degenerate != b->degenerate || a->path != b->path || a->verified != b->verified) {
        fprintf(stderr, "  %s %s: cache NMSE %.17g/%.17g qdq %.17g/%.17g degenerate %d/%d\n",
                what, qmla_path_name(a->path), a->nmse_cache, b->nmse_cache, a->nmse_qdq,
                b->nmse_qdq, a->degenerate, b->degenerate);
        ok = 0;
    }
    return ok;
}

static void run_case(const shape_case *c)
{
    const qmla_mla_dims d = {c->H, c->D, c->d_c, c->d_n, c->d_r, c->d_v,
                             1.0 / sqrt((double)(c->d_n + c->d_r))};
    const size_t H = c->H, T = c->T;
    /* kind 2: queries near FLT_MAX overflow the absorbed queries */
    float *qn = randn(H * T * c->d_n, c->kind == 2 ? 1e38 : 1.0);
    float *qr = randn(H * T * c->d_r, 1.0);
    float *C = randn(T * c->d_c, 1.0);
    /* kind 1: each token's latent row one constant, a multiple of 1/8
     * (exact in float16): every group quantizes exactly, so the content
     * error has no energy, while the rows differ, so the attention still
     * moves the output (a cache constant over all tokens too would make
     * (A~ - A) C vanish and leave the RoPE route as rounding noise) */
    if (c->kind == 1)
        for (size_t t = 0; t < T; t++) {
            const float v = (float)(1 + (int)(8.0 * unif())) / 8.0f;
            for (size_t j = 0; j < c->d_c; j++)
                C[t * c->d_c + j] = v;
        }
    float *K = randn(T * c->d_r, 1.0);
    float *wuk = randn(H * c->d_n * c->d_c, 1.0 / sqrt((double)c->d_n));
    float *wuv = randn(H * c->d_v * c->d_c, 1.0 / sqrt((double)c->d_c));
    float *wo = randn(c->D * H * c->d_v, 1.0 / sqrt((double)(H * c->d_v)));
    const qmla_mla_weights w = {wuk, wuv, wo};
    qmla_sweep_params p = qmla_sweep_defaults();
    p.quant.group = 16; /* divides every width of the table */
    const qmla_exec ex = qmla_exec_cpu(8);
    qmla_error err;
    qmla_error_clear(&err);
    const qmla_sweep_ops *cpu = qmla_engine_sweep(qmla_engine_cpu()),
                         *gpu = qmla_engine_sweep(cuda);
    void *wc = NULL, *wg = NULL;
    qmla_response rc[2], rg[2], rg2[2];
    memset(rc, 0, sizeof rc);
    memset(rg, 0, sizeof rg);
    memset(rg2, 0, sizeof rg2);
    qmla_cuda_engine_set_tile(c->tile);
    int st = cpu->ws_alloc(&d, T, 0, &wc, &err);
    CHECK_OK(st, err);
    const int sc = st ? st : cpu->sequence(&ex, &p, &d, T, &w, qn, qr, C, K, 0, wc, rc, &err);
    st = gpu->ws_alloc(&d, T, 0, &wg, &err);
    CHECK_OK(st, err);
    const int sg = st ? st : gpu->sequence(&ex, &p, &d, T, &w, qn, qr, C, K, 0, wg, rg, &err);
    const int sg2 = st ? st : gpu->sequence(&ex, &p, &d, T, &w, qn, qr, C, K, 0, wg, rg2, &err);
    if (c->kind == 2) {
        CHECK(sc == QMLA_ENONFINITE && sg == QMLA_ENONFINITE,
              "%s: a float32 overflow is refused by both engines (cpu %d, cuda %d: %s)",
              c->name, sc, sg, err.msg);
    } else {
        CHECK(sc == QMLA_OK && sg == QMLA_OK && sg2 == QMLA_OK,
              "%s: both engines run (cpu %d, cuda %d: %s)", c->name, sc, sg, err.msg);
        if (sc == QMLA_OK && sg == QMLA_OK) {
            CHECK(rows_close(&rc[0], &rg[0], c->name) && rows_close(&rc[1], &rg[1], c->name),
                  "%s: cuda within %g of cpu", c->name, RTOL);
            CHECK(!memcmp(rg, rg2, sizeof rg), "%s: cuda bit-identical run after run",
                  c->name);
            if (c->kind == 1)
                CHECK(rg[0].degenerate && !rg[1].degenerate,
                      "%s: constant content cache degenerate on cuda, RoPE not", c->name);
            else if (T == 1) /* one key: the softmax is 1 whatever the logits */
                CHECK(!rg[0].degenerate && rg[0].response > 0.0 && rg[1].response == 0.0 &&
                          rc[1].response == 0.0,
                      "%s: T = 1: the content path measured, the RoPE response 0 on both",
                      c->name);
            else
                CHECK(!rg[0].degenerate && !rg[1].degenerate && rg[0].response > 0.0 &&
                          rg[1].response > 0.0,
                      "%s: both paths measured", c->name);
        }
    }
    if (wg)
        gpu->ws_free(wg);
    if (wc)
        cpu->ws_free(wc);
    qmla_cuda_engine_set_tile(0);
    printf("  %-28s H %3zu T %4zu tile %4zu  cpu R_C %.6g cuda R_C %.6g\n", c->name, H, T,
           c->tile, rc[0].response, rg[0].response);
    free(qn);
    free(qr);
    free(C);
    free(K);
    free(wuk);
    free(wuv);
    free(wo);
}

/* One workspace over two "layers" whose weights sit at the same host
 * address (as a freed and reloaded layer may): after layer_begin the
 * engine uses the new weights, so it agrees with the CPU on them. */
static void test_layer_begin(void)
{
    const qmla_mla_dims d = {4, 64, 64, 16, 16, 16, 1.0 / sqrt(32.0)};
    const size_t H = 4, T = 40;
    float *qn = randn(H * T * 16, 1.0), *qr = randn(H * T * 16, 1.0);
    float *C = randn(T * 64, 1.0), *K = randn(T * 16, 1.0);
    float *wuk = randn(H * 16 * 64, 0.25), *wuv = randn(H * 16 * 64, 0.125);
    float *wo = randn(64 * H * 16, 0.125);
    const qmla_mla_weights w = {wuk, wuv, wo};
    qmla_sweep_params p = qmla_sweep_defaults();
    p.quant.group = 16;
    const qmla_exec ex = qmla_exec_cpu(1);
    qmla_error err;
    qmla_error_clear(&err);
    const qmla_sweep_ops *cpu = qmla_engine_sweep(qmla_engine_cpu()),
                         *gpu = qmla_engine_sweep(cuda);
    CHECK(gpu->layer_begin != NULL, "layer_begin: the cuda engine has one");
    void *wc = NULL, *wg = NULL;
    qmla_response rc[2], rg[2];
    memset(rc, 0, sizeof rc);
    memset(rg, 0, sizeof rg);
    CHECK_OK(cpu->ws_alloc(&d, T, 0, &wc, &err), err);
    CHECK_OK(gpu->ws_alloc(&d, T, 0, &wg, &err), err);
    if (wc && wg) {
        CHECK_OK(gpu->sequence(&ex, &p, &d, T, &w, qn, qr, C, K, 0, wg, rg, &err), err);
        for (size_t i = 0; i < H * 16 * 64; i++) /* the "next layer", same address */
            wuk[i] = (float)(0.25 * gauss());
        gpu->layer_begin(wg);
        CHECK_OK(gpu->sequence(&ex, &p, &d, T, &w, qn, qr, C, K, 0, wg, rg, &err), err);
        CHECK_OK(cpu->sequence(&ex, &p, &d, T, &w, qn, qr, C, K, 0, wc, rc, &err), err);
        CHECK(rows_close(&rc[0], &rg[0], "layer_begin") &&
                  rows_close(&rc[1], &rg[1], "layer_begin"),
              "layer_begin: the next layer's weights at the same address are used");
    }
    if (wg)
        gpu->ws_free(wg);
    if (wc)
        cpu->ws_free(wc);
    free(qn);
    free(qr);
    free(C);
    free(K);
    free(wuk);
    free(wuv);
    free(wo);
}

static void test_qdq(void)
{
    const qmla_quant_ops *cq = qmla_engine_quant(qmla_engine_cpu()), *gq = qmla_engine_quant(cuda);
    CHECK(gq != cq, "qdq: the cuda engine has its own QDQ");
    const struct { size_t T, w; int bits, group; qmla_meta meta; } q[] = {
        {1, 64, 4, 64, QMLA_META_F16}, {257, 512, 4, 64, QMLA_META_F16},
        {33, 64, 2, 16, QMLA_META_F32}, {100, 192, 3, 64, QMLA_META_Q8},
        {7, 128, 8, 32, QMLA_META_F16}};
    for (size_t k = 0; k < sizeof q / sizeof q[0]; k++) {
        qmla_quant_params p = qmla_quant_defaults();
        p.bits = q[k].bits;
        p.group = q[k].group;
        p.meta = q[k].meta;
        const size_t n = q[k].T * q[k].w, ng = q[k].w / (size_t)p.group;
        const size_t cb = qmla_quant_code_bytes(&p, q[k].w);
        float *x = randn(n, 2.0), *a = malloc(n * 4), *b = malloc(n * 4);
        float *sa = malloc(q[k].T * ng * 4), *sb = malloc(q[k].T * ng * 4);
        float *la = malloc(q[k].T * ng * 4), *lb = malloc(q[k].T * ng * 4);
        uint8_t *ca = malloc(q[k].T * cb), *cbuf = malloc(q[k].T * cb);
        qmla_error err;
        qmla_error_clear(&err);
        CHECK_OK(cq->qdq(&p, x, q[k].T, q[k].w, ca, sa, la, a, &err), err);
        CHECK_OK(gq->qdq(&p, x, q[k].T, q[k].w, cbuf, sb, lb, b, &err), err);
        CHECK(!memcmp(a, b, n * 4) && !memcmp(ca, cbuf, q[k].T * cb) &&
                  !memcmp(sa, sb, q[k].T * ng * 4) && !memcmp(la, lb, q[k].T * ng * 4),
              "qdq T %zu width %zu bits %d group %d: cuda bit for bit the cpu", q[k].T,
              q[k].w, p.bits, p.group);
        free(x);
        free(a);
        free(b);
        free(sa);
        free(sb);
        free(la);
        free(lb);
        free(ca);
        free(cbuf);
    }
}

/* qmla_sweep_run on capture with each engine; rows compared. */
static void test_run(const char *capture, const char *tag)
{
    qmla_capture *cap = NULL;
    qmla_error err;
    qmla_error_clear(&err);
    int st = qmla_capture_open(capture, &cap, &err);
    CHECK_OK(st, err);
    if (st)
        return;
    qmla_response *r[2] = {NULL, NULL};
    size_t n[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        qmla_sweep_opts o;
        memset(&o, 0, sizeof o);
        o.params = qmla_sweep_defaults();
        o.threads = 2;
        o.force = 1;
        o.engine = k ? cuda : qmla_engine_cpu();
        char name[64];
        snprintf(name, sizeof name, "%s-%s.h5", tag, k ? "cuda" : "cpu");
        qmla_summary s;
        int stopped = 0;
        st = qmla_sweep_run(cap, NULL, &o, check_path(name), &s, &stopped, &err);
        CHECK_OK(st, err);
        if (st)
            continue;
        qmla_summary_free(&s);
        qmla_results_meta m;
        st = qmla_results_read(check_path(name), &m, &r[k], &n[k], &err);
        CHECK_OK(st, err);
        if (!st) {
            if (k)
                CHECK(!strcmp(m.engine, "cuda") && m.engine_device[0] &&
                          !strcmp(m.engine_device, qmla_engine_device(cuda)),
                      "%s: results of the cuda engine name it and its device (%s, %s)", tag,
                      m.engine, m.engine_device);
            else
                CHECK(!strcmp(m.engine, "cpu") && !m.engine_device[0],
                      "%s: results of the cpu engine have no engine_device", tag);
            qmla_results_meta_free(&m);
        }
    }
    if (r[0] && r[1]) {
        CHECK(n[0] == n[1] && n[0] > 0, "%s: same rows (%zu, %zu)", tag, n[0], n[1]);
        int ok = n[0] == n[1];
        for (size_t i = 0; ok && i < n[0]; i++)
            ok = r[0][i].layer == r[1][i].layer && !strcmp(r[0][i].cell, r[1][i].cell) &&
                 r[0][i].seq == r[1][i].seq && rows_close(&r[0][i], &r[1][i], tag);
        CHECK(ok, "%s: every row of the cuda engine within %g of the cpu's", tag, RTOL);
    }
    free(r[0]);
    free(r[1]);
    qmla_capture_close(cap);
}

int main(void)
{
    qmla_blas_set_threads(1);
    qmla_error err;
    qmla_error_clear(&err);
    if (qmla_engine_find("cuda", &cuda, &err)) {
        printf("SKIP: %s\n", err.msg);
        return 77;
    }
    check_rng_seed(0x18c0dau);
    if (!check_tmpdir(dir, sizeof dir, "engine-cuda"))
        return 1;
    printf("device: %s\n", qmla_engine_device(cuda));
    const char *small = getenv("QMLA_TEST_SMALL");
    const int is_small = small && (!strcmp(small, "1") || !strcmp(small, "2"));
    const int is_tiny = small && !strcmp(small, "2");
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        if (!(is_small && cases[k].big) && !(is_tiny && cases[k].H * cases[k].T > 64))
            run_case(&cases[k]);
    test_layer_begin();
    test_qdq();
    if (is_tiny)
        return check_summary("test_engine_cuda");
    const char *root = getenv("QMLA_SOURCE_ROOT");
    char def[1024];
    snprintf(def, sizeof def, "%s/data/tiny-mla-default.h5", root ? root : ".");
    test_run(def, "default");
    {
        qmla_synth_opts so;
        memset(&so, 0, sizeof so);
        so.shape = qmla_shape_find("deepseek-v2-lite");
        so.seed = 18;
        so.n_layers = 2;
        so.seqs = 2;
        so.tokens = is_small ? 64 : 256;
        so.cells = 1;
        so.threads = 2;
        const int st = qmla_synth_write(check_path("v2lite.h5"), &so, &err);
        CHECK_OK(st, err);
        if (!st)
            test_run(check_path("v2lite.h5"), "v2-lite synth");
    }
    printf("largest relative difference cuda vs cpu: %.3g (tolerance %g)\n", worst, RTOL);
    return check_summary("test_engine_cuda");
}
