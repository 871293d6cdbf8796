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
 *   op:    qmla_op_ops' sequence (qmla jvp / predict) with the exact
 *          sensitivities, the predict directions (INT4 and the held-out
 *          INT2/3/8, nu/10, 10 nu, G/2): g_jvp, g_finite, pred_trace,
 *          pred_alloc and every token's sigma (both paths) within 1e-4
 *          relative, degenerate flags equal, the allocations w_t bit for bit
 *          (host arithmetic on the CPU's own directions); the shapes above
 *          whose CPU sensitivities are affordable (T^2 H^2 d_v <= 1e11);
 *          twice on the GPU, bit-identical.
 *   iv:    qmla_iv_ops' sequence (qmla intervene), 3 repetitions: g_jvp,
 *          r_finite, r_joint and every control ratio within 1e-4 relative,
 *          the cross term within 1e-4 of NMSE_out,C + NMSE_out,P (its
 *          scale: cross_rel within 1e-4 absolute); H T^2 d_c <= 3e9.
 *          T = 1: the RoPE sensitivity and predictors are 0 in exact
 *          arithmetic: both engines' values below 1e-6 of the content
 *          path's; the RoPE control ratios 0/0 (NaN) on both.
 *   layer: layer_begin makes the engine take new weights at the same
 *          host address (the driver calls it on every layer load); the
 *          same for the operator and intervention tables (two sequences
 *          on the kept weights, then the next layer at the same addresses:
 *          points and item the CPU's on the new weights).
 *   qdq:   the engine's quant table against qmla_quant_qdq, bit for bit.
 *   run:   qmla_sweep_run on the default capture (data/tiny-mla-default.h5)
 *          and on a V2-Lite-shaped synth capture with each engine: rows
 *          within 1e-4, the results file's engine "cuda" and engine_device;
 *          likewise qmla_op_run_points (predict on the default capture, jvp
 *          on the synth) and qmla_intervene_run (default capture): points
 *          and statistics within 1e-4, groups /predict, /jvp and
 *          /interventions naming engine "cuda" and its engine_device.
 * SKIP (77) where the build has no cuda engine or no device is usable.
 * QMLA_TEST_SMALL=1 (sanitizer builds, compute-sanitizer memcheck) leaves
 * out the largest shapes; QMLA_TEST_SMALL=2 (racecheck, which is slow on
 * cuBLAS's kernels) runs only the shapes of at most 64 tokens x heads and
 * the layer and QDQ checks. */
#include "check.h"
#include "fixture.h"
#include "rng.h"
#include "driver/engine_cuda.h"
#include "io/h5util.h"
#include "qmla/capture.h"
#include "qmla/engine.h"
#include "qmla/intervene.h"
#include "qmla/learn.h"
#include "qmla/predict.h"
#include "qmla/quant.h"
#include "qmla/results.h"
#include "qmla/sweep.h"
#include "qmla/synth.h"
#include "qmla/tfeval.h"
#include "qmla/tmethod.h"

#include <hdf5.h>
#include <math.h>
#include <pthread.h>
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

/* The inputs of a case, drawn in a fixed order. */
typedef struct case_inputs {
    qmla_mla_dims d;
    float *qn, *qr, *C, *K, *wuk, *wuv, *wo;
    qmla_mla_weights w;
} case_inputs;

static void case_inputs_make(const shape_case *c, case_inputs *in)
{
    const qmla_mla_dims d = {c->H, c->D, c->d_c, c->d_n, c->d_r, c->d_v,
                             1.0 / sqrt((double)(c->d_n + c->d_r))};
    const size_t H = c->H, T = c->T;
    in->d = d;
    /* kind 2: queries near FLT_MAX overflow the absorbed queries */
    in->qn = randn(H * T * c->d_n, c->kind == 2 ? 1e38 : 1.0);
    in->qr = randn(H * T * c->d_r, 1.0);
    in->C = randn(T * c->d_c, 1.0);
    /* kind 1: each token's latent row one constant, a multiple of 1/8
     * (exact in float16): every group quantizes exactly, so the content
     * error has no energy, while the rows differ, so the attention still
     * moves the output (a cache constant over all tokens too would make
     * (A~ - A) C vanish and leave the RoPE route as rounding noise) */
    if (c->kind == 1)
        for (size_t t = 0; t < T; t++) {
            const float v = (float)(1 + (int)(8.0 * unif())) / 8.0f;
            for (size_t j = 0; j < c->d_c; j++)
                in->C[t * c->d_c + j] = v;
        }
    in->K = randn(T * c->d_r, 1.0);
    in->wuk = randn(H * c->d_n * c->d_c, 1.0 / sqrt((double)c->d_n));
    in->wuv = randn(H * c->d_v * c->d_c, 1.0 / sqrt((double)c->d_c));
    in->wo = randn(c->D * H * c->d_v, 1.0 / sqrt((double)(H * c->d_v)));
    in->w.w_uk = in->wuk;
    in->w.w_uv = in->wuv;
    in->w.w_o = in->wo;
}

static void case_inputs_free(case_inputs *in)
{
    free(in->qn);
    free(in->qr);
    free(in->C);
    free(in->K);
    free(in->wuk);
    free(in->wuv);
    free(in->wo);
}

/* The profile after a call with it on: the call synchronised, timed the GPU
 * and copied to the device (what the benchmark's profile lines rest on). */
static int profile_recorded(const char *what)
{
    qmla_cuda_profile pr;
    qmla_cuda_engine_profile_get(&pr);
    const int ok = pr.on && pr.syncs > 0 && pr.h2d_calls > 0 && pr.s[QMLA_CUDA_PH_GPU] > 0.0 &&
                   pr.s[QMLA_CUDA_PH_WAIT] >= 0.0 && pr.s[QMLA_CUDA_PH_H2D] > 0.0 &&
                   pr.s[QMLA_CUDA_PH_DIR] > 0.0;
    if (!ok)
        fprintf(stderr, "  %s: profile on %d syncs %lu h2d %lu gpu %g wait %g h2d %g dir %g\n",
                what, pr.on, pr.syncs, pr.h2d_calls, pr.s[QMLA_CUDA_PH_GPU],
                pr.s[QMLA_CUDA_PH_WAIT], pr.s[QMLA_CUDA_PH_H2D], pr.s[QMLA_CUDA_PH_DIR]);
    return ok;
}

static void profile_begin(void)
{
    qmla_cuda_engine_profile_enable(1);
    qmla_cuda_engine_profile_reset();
}

static void run_case(const shape_case *c)
{
    case_inputs in;
    case_inputs_make(c, &in);
    const qmla_mla_dims d = in.d;
    const size_t H = c->H, T = c->T;
    float *qn = in.qn, *qr = in.qr, *C = in.C, *K = in.K;
    const qmla_mla_weights w = in.w;
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
    /* the run-8 sequence (serial directions, pageable copies) and the
     * profiled one: the same bits */
    qmla_response rg3[2], rg4[2];
    memset(rg3, 0, sizeof rg3);
    memset(rg4, 0, sizeof rg4);
    const int lv = qmla_cuda_engine_set_before(1);
    const int sg3 = st ? st : gpu->sequence(&ex, &p, &d, T, &w, qn, qr, C, K, 0, wg, rg3, &err);
    qmla_cuda_engine_set_before(lv);
    profile_begin();
    const int sg4 = st ? st : gpu->sequence(&ex, &p, &d, T, &w, qn, qr, C, K, 0, wg, rg4, &err);
    const int prof_ok = sg4 || profile_recorded(c->name);
    qmla_cuda_engine_profile_enable(0);
    CHECK(sg3 == sg && sg4 == sg && !memcmp(rg, rg3, sizeof rg) && !memcmp(rg, rg4, sizeof rg),
          "%s: cuda's run-8 sequence and the profiled one bit for bit today's (status %d %d %d)",
          c->name, sg, sg3, sg4);
    CHECK(prof_ok, "%s: the profile recorded the sequence", c->name);
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
    case_inputs_free(&in);
}

/* ---- the operator model (qmla jvp / predict) ------------------------------ */

static double worst_op; /* largest relative difference of the op and iv checks */

static int near_op(double a, double b)
{
    const double m = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
    if (m == 0.0)
        return 1;
    const double r = fabs(a - b) / m;
    if (r > worst_op)
        worst_op = r;
    return r <= RTOL;
}

/* T = 1: one key, so the softmax is 1 whatever the logits and the RoPE
 * path's sensitivity is 0 in exact arithmetic; both engines give rounding
 * noise of the Gram expansion's cancellation (y_t - O_t = 0 through two
 * GEMM orders), which must stay below this fraction of the content one. */
#define ROPE_T1_NOISE 1e-6

static int rope_t1_noise(double cpu, double gpu, double scale)
{
    return fabs(cpu) <= ROPE_T1_NOISE * scale && fabs(gpu) <= ROPE_T1_NOISE * scale;
}

static int points_close(const qmla_op_point *a, const qmla_op_point *b, size_t n,
                        const char *what)
{
    int ok = 1;
    for (size_t k = 0; k < n; k++) {
        const qmla_op_point *x = &a[k], *y = &b[k];
        if (x->T == 1 && x->path == QMLA_PATH_ROPE && y->T == 1 && y->path == QMLA_PATH_ROPE &&
            x->degenerate == y->degenerate) {
            /* the predictors are 0 up to noise (the content point before
             * gives their scale); the gains as everywhere */
            const double sc = fabs(a[k - (k > 0)].pred_trace);
            if (!rope_t1_noise(x->pred_trace, y->pred_trace, sc) ||
                !rope_t1_noise(x->pred_alloc, y->pred_alloc, sc) || !near_op(x->g_jvp, y->g_jvp) ||
                !near_op(x->g_finite, y->g_finite)) {
                fprintf(stderr, "  %s point %zu (T 1, RoPE): pred_trace %.3g/%.3g (content "
                        "%.3g), g_jvp %.9g/%.9g\n", what, k, x->pred_trace, y->pred_trace, sc,
                        x->g_jvp, y->g_jvp);
                ok = 0;
            }
            continue;
        }
        if (x->degenerate != y->degenerate || x->path != y->path || x->bits != y->bits ||
            x->group != y->group || x->nmse != y->nmse || x->heldout != y->heldout ||
            x->T != y->T) {
            fprintf(stderr, "  %s point %zu: keys or degenerate flag differ (%d/%d)\n", what, k,
                    x->degenerate, y->degenerate);
            ok = 0;
            continue;
        }
#define OPCLOSE(f)                                                                       \
    if (!near_op(x->f, y->f)) {                                                          \
        fprintf(stderr, "  %s point %zu (path %d INT%d nu %g): " #f " cpu %.9g cuda %.9g\n", \
                what, k, x->path, x->bits, x->nmse, x->f, y->f);                         \
        ok = 0;                                                                          \
    }
        OPCLOSE(g_jvp)
        OPCLOSE(g_finite)
        OPCLOSE(pred_trace)
        OPCLOSE(pred_alloc)
#undef OPCLOSE
    }
    return ok;
}

/* Cases whose CPU sensitivities are affordable here. */
static int op_affordable(const shape_case *c)
{
    return (double)c->T * (double)c->T * (double)(c->H * c->H) * (double)c->d_v <= 1e11;
}

static void run_op_case(const shape_case *c)
{
    case_inputs in;
    case_inputs_make(c, &in);
    const qmla_mla_dims d = in.d;
    const size_t T = c->T;
    qmla_op_config conf[QMLA_OP_CONFIGS_MAX];
    size_t nconf = 0;
    const int bits = 4;
    qmla_op_configs(1, &bits, 1, 16, 1e-3, conf, &nconf);
    const size_t np = 2 * nconf;
    const qmla_exec ex = qmla_exec_cpu(16);
    qmla_error err;
    qmla_error_clear(&err);
    const qmla_op_ops *cpu = qmla_engine_op(qmla_engine_cpu()), *gpu = qmla_engine_op(cuda);
    CHECK(gpu != cpu, "op: the cuda engine has its own operator table");
    qmla_op_point *pc = calloc(np, sizeof *pc), *pg = calloc(np, sizeof *pg),
                  *pg2 = calloc(np, sizeof *pg2);
    double *ac = calloc(np * T, sizeof *ac), *ag = calloc(np * T, sizeof *ag),
           *ag2 = calloc(np * T, sizeof *ag2);
    double *sc_ = calloc(2 * T, sizeof *sc_), *sg = calloc(2 * T, sizeof *sg),
           *sg2 = calloc(2 * T, sizeof *sg2);
    void *wc = NULL, *wg = NULL, *lc = NULL, *lg = NULL;
    qmla_cuda_engine_set_tile(c->tile);
    int st = cpu->ws_alloc(&d, T, 1, 16, &wc, &err);
    CHECK_OK(st, err);
    if (!st)
        CHECK_OK(st = cpu->layer_alloc(&ex, &d, &in.w, &lc, &err), err);
    const int rc = st ? st : cpu->sequence(&ex, &d, T, &in.w, lc, in.qn, in.qr, in.C, in.K,
                                           conf, nconf, wc, pc, ac, sc_, &err);
    st = gpu->ws_alloc(&d, T, 1, 8, &wg, &err);
    CHECK_OK(st, err);
    if (!st)
        CHECK_OK(st = gpu->layer_alloc(&ex, &d, &in.w, &lg, &err), err);
    const int rg = st ? st : gpu->sequence(&ex, &d, T, &in.w, lg, in.qn, in.qr, in.C, in.K,
                                           conf, nconf, wg, pg, ag, sg, &err);
    const int rg2 = st ? st : gpu->sequence(&ex, &d, T, &in.w, lg, in.qn, in.qr, in.C, in.K,
                                            conf, nconf, wg, pg2, ag2, sg2, &err);
    {
        /* the run-8 sequence (directions drawn again per point, one wait per
         * JVP) and the profiled pipelined one: the same bits */
        qmla_op_point *p3 = calloc(np, sizeof *p3), *p4 = calloc(np, sizeof *p4);
        double *a3 = calloc(np * T, sizeof *a3), *a4 = calloc(np * T, sizeof *a4);
        double *s3 = calloc(2 * T, sizeof *s3), *s4 = calloc(2 * T, sizeof *s4);
        const int lv = qmla_cuda_engine_set_before(1);
        const int r3 = st ? st : gpu->sequence(&ex, &d, T, &in.w, lg, in.qn, in.qr, in.C, in.K,
                                               conf, nconf, wg, p3, a3, s3, &err);
        qmla_cuda_engine_set_before(lv);
        profile_begin();
        const int r4 = st ? st : gpu->sequence(&ex, &d, T, &in.w, lg, in.qn, in.qr, in.C, in.K,
                                               conf, nconf, wg, p4, a4, s4, &err);
        const int prof_ok = r4 || profile_recorded(c->name);
        qmla_cuda_engine_profile_enable(0);
        const int same = r3 == rg && r4 == rg &&
                         (rg || (!memcmp(pg, p3, np * sizeof *pg) &&
                                 !memcmp(pg, p4, np * sizeof *pg) &&
                                 !memcmp(ag, a3, np * T * sizeof *ag) &&
                                 !memcmp(ag, a4, np * T * sizeof *ag) &&
                                 !memcmp(sg, s3, 2 * T * sizeof *sg) &&
                                 !memcmp(sg, s4, 2 * T * sizeof *sg)));
        CHECK(same, "op %s: cuda's run-8 sequence and the profiled pipelined one bit for bit "
              "today's (status %d %d %d)", c->name, rg, r3, r4);
        CHECK(prof_ok, "op %s: the profile recorded the sequence", c->name);
        free(p3);
        free(p4);
        free(a3);
        free(a4);
        free(s3);
        free(s4);
    }
    double ws = 0.0; /* the worst sigma */
    if (c->kind == 2) {
        CHECK(rc == QMLA_ENONFINITE && rg == QMLA_ENONFINITE,
              "op %s: a float32 overflow is refused by both engines (cpu %d, cuda %d: %s)",
              c->name, rc, rg, err.msg);
    } else {
        CHECK(rc == QMLA_OK && rg == QMLA_OK && rg2 == QMLA_OK,
              "op %s: both engines run (cpu %d, cuda %d: %s)", c->name, rc, rg, err.msg);
        if (rc == QMLA_OK && rg == QMLA_OK) {
            CHECK(points_close(pc, pg, np, c->name),
                  "op %s: g_jvp, g_finite and the predictors within %g of cpu", c->name, RTOL);
            CHECK(!memcmp(ac, ag, np * T * sizeof *ac),
                  "op %s: the allocations w_t bit for bit the cpu's", c->name);
            int ok = 1;
            for (size_t k = 0; k < 2 * T; k++) {
                if (T == 1 && k == 1) { /* RoPE at T = 1: 0 up to noise on both */
                    if (!rope_t1_noise(sc_[1], sg[1], fabs(sc_[0]))) {
                        fprintf(stderr, "  op %s: T 1 RoPE sigma cpu %.3g cuda %.3g (content "
                                "%.3g)\n", c->name, sc_[1], sg[1], sc_[0]);
                        ok = 0;
                    }
                    continue;
                }
                const double m = fabs(sc_[k]) > fabs(sg[k]) ? fabs(sc_[k]) : fabs(sg[k]);
                const double r = m > 0 ? fabs(sc_[k] - sg[k]) / m : 0.0;
                if (r > ws)
                    ws = r;
                if (!near_op(sc_[k], sg[k])) {
                    if (ok)
                        fprintf(stderr, "  op %s: sigma[%s][%zu] cpu %.9g cuda %.9g\n", c->name,
                                k < T ? "content" : "rope", k % T, sc_[k], sg[k]);
                    ok = 0;
                }
            }
            CHECK(ok, "op %s: every token's sensitivity (both paths) within %g of cpu", c->name,
                  RTOL);
            CHECK(!memcmp(pg, pg2, np * sizeof *pg) && !memcmp(sg, sg2, 2 * T * sizeof *sg),
                  "op %s: cuda bit-identical run after run", c->name);
            int measured = 0;
            for (size_t k = 0; k < np; k++)
                measured += !pg[k].degenerate && pg[k].g_jvp > 0.0;
            CHECK(c->kind == 1 ? measured == (int)nconf : measured >= (int)nconf,
                  "op %s: %d points measured (content degenerate: %d)", c->name, measured,
                  c->kind == 1);
        }
    }
    if (lg)
        gpu->layer_free(lg);
    if (lc)
        cpu->layer_free(lc);
    if (wg)
        gpu->ws_free(wg);
    if (wc)
        cpu->ws_free(wc);
    qmla_cuda_engine_set_tile(0);
    printf("  op %-25s H %3zu T %4zu  cpu g_jvp %.6g cuda %.6g  sigma worst %.2g\n", c->name,
           c->H, T, pc[0].g_jvp, pg[0].g_jvp, ws);
    free(pc);
    free(pg);
    free(pg2);
    free(ac);
    free(ag);
    free(ag2);
    free(sc_);
    free(sg);
    free(sg2);
    case_inputs_free(&in);
}

/* ---- the interventions ------------------------------------------------------- */

static int iv_affordable(const shape_case *c)
{
    return (double)c->H * (double)c->T * (double)c->T * (double)c->d_c <= 3e9;
}

static int items_close(const qmla_iv_item *a, const qmla_iv_item *b, const double *ra,
                       const double *rb, size_t nr, const char *what)
{
    int ok = a->degenerate == b->degenerate && a->seed == b->seed;
    if (!ok)
        fprintf(stderr, "  iv %s: degenerate %d/%d\n", what, a->degenerate, b->degenerate);
    if (a->degenerate || b->degenerate)
        return ok;
    for (int p = 0; p < 2; p++)
        if (!near_op(a->g_jvp[p], b->g_jvp[p]) || !near_op(a->r_finite[p], b->r_finite[p])) {
            fprintf(stderr, "  iv %s path %d: g_jvp %.9g/%.9g r_finite %.9g/%.9g\n", what, p,
                    a->g_jvp[p], b->g_jvp[p], a->r_finite[p], b->r_finite[p]);
            ok = 0;
        }
    if (!near_op(a->r_joint, b->r_joint)) {
        fprintf(stderr, "  iv %s: r_joint %.9g/%.9g\n", what, a->r_joint, b->r_joint);
        ok = 0;
    }
    /* the cross term on its scale NMSE_out,C + NMSE_out,P */
    if (fabs(a->cross_rel - b->cross_rel) > RTOL) {
        fprintf(stderr, "  iv %s: cross_rel %.9g/%.9g\n", what, a->cross_rel, b->cross_rel);
        ok = 0;
    }
    for (size_t k = 0; k < nr; k++)
        if (isnan(ra[k]) && isnan(rb[k]) && a->g_jvp[k / (nr / 2)] == 0.0 &&
            b->g_jvp[k / (nr / 2)] == 0.0)
            continue; /* 0/0 on both: the path has no local gain (T = 1, RoPE) */
        else if (!near_op(ra[k], rb[k])) {
            fprintf(stderr, "  iv %s: ratio %zu %.9g/%.9g\n", what, k, ra[k], rb[k]);
            ok = 0;
        }
    return ok;
}

static void run_iv_case(const shape_case *c)
{
    case_inputs in;
    case_inputs_make(c, &in);
    const qmla_mla_dims d = in.d;
    const size_t T = c->T, reps = 3, nr = 2 * QMLA_N_CTRL * reps;
    qmla_sweep_params p = qmla_sweep_defaults();
    p.quant.group = 16;
    const qmla_exec ex = qmla_exec_cpu(16);
    qmla_error err;
    qmla_error_clear(&err);
    const qmla_iv_ops *cpu = qmla_engine_iv(qmla_engine_cpu()), *gpu = qmla_engine_iv(cuda);
    CHECK(gpu != cpu, "iv: the cuda engine has its own interventions table");
    qmla_iv_item ic, ig, ig2;
    memset(&ic, 0, sizeof ic);
    memset(&ig, 0, sizeof ig);
    memset(&ig2, 0, sizeof ig2);
    double rc_[2 * QMLA_N_CTRL * 3], rg_[2 * QMLA_N_CTRL * 3], rg2_[2 * QMLA_N_CTRL * 3];
    void *wc = NULL, *wg = NULL;
    qmla_cuda_engine_set_tile(c->tile);
    int st = cpu->ws_alloc(&d, T, 16, &wc, &err);
    CHECK_OK(st, err);
    const int rc = st ? st : cpu->sequence(&ex, &d, T, &in.w, in.qn, in.qr, in.C, in.K, &p, reps,
                                           77, wc, &ic, rc_, &err);
    st = gpu->ws_alloc(&d, T, 8, &wg, &err);
    CHECK_OK(st, err);
    const int rg = st ? st : gpu->sequence(&ex, &d, T, &in.w, in.qn, in.qr, in.C, in.K, &p, reps,
                                           77, wg, &ig, rg_, &err);
    const int rg2 = st ? st : gpu->sequence(&ex, &d, T, &in.w, in.qn, in.qr, in.C, in.K, &p,
                                            reps, 77, wg, &ig2, rg2_, &err);
    {
        /* the run-8 sequence (one wait per control) and the profiled
         * pipelined one: the same bits */
        qmla_iv_item i3, i4;
        double r3_[2 * QMLA_N_CTRL * 3], r4_[2 * QMLA_N_CTRL * 3];
        memset(&i3, 0, sizeof i3);
        memset(&i4, 0, sizeof i4);
        memset(r3_, 0, sizeof r3_);
        memset(r4_, 0, sizeof r4_);
        const int lv = qmla_cuda_engine_set_before(1);
        const int s3 = st ? st : gpu->sequence(&ex, &d, T, &in.w, in.qn, in.qr, in.C, in.K, &p,
                                               reps, 77, wg, &i3, r3_, &err);
        qmla_cuda_engine_set_before(lv);
        profile_begin();
        const int s4 = st ? st : gpu->sequence(&ex, &d, T, &in.w, in.qn, in.qr, in.C, in.K, &p,
                                               reps, 77, wg, &i4, r4_, &err);
        const int prof_ok = s4 || profile_recorded(c->name);
        qmla_cuda_engine_profile_enable(0);
        const int same = s3 == rg && s4 == rg &&
                         (rg || (!memcmp(&ig, &i3, sizeof ig) && !memcmp(&ig, &i4, sizeof ig) &&
                                 !memcmp(rg_, r3_, sizeof rg_) && !memcmp(rg_, r4_, sizeof rg_)));
        CHECK(same, "iv %s: cuda's run-8 sequence and the profiled pipelined one bit for bit "
              "today's (status %d %d %d)", c->name, rg, s3, s4);
        CHECK(prof_ok, "iv %s: the profile recorded the sequence", c->name);
    }
    if (c->kind == 2) {
        CHECK(rc == QMLA_ENONFINITE && rg == QMLA_ENONFINITE,
              "iv %s: a float32 overflow is refused by both engines (cpu %d, cuda %d: %s)",
              c->name, rc, rg, err.msg);
    } else {
        CHECK(rc == QMLA_OK && rg == QMLA_OK && rg2 == QMLA_OK,
              "iv %s: both engines run (cpu %d, cuda %d: %s)", c->name, rc, rg, err.msg);
        if (rc == QMLA_OK && rg == QMLA_OK) {
            CHECK(items_close(&ic, &ig, rc_, rg_, nr, c->name),
                  "iv %s: gains, responses, joint path and control ratios within %g of cpu",
                  c->name, RTOL);
            CHECK(!memcmp(&ig, &ig2, sizeof ig) && !memcmp(rg_, rg2_, sizeof rg_),
                  "iv %s: cuda bit-identical run after run", c->name);
            CHECK(c->kind == 1 ? ig.degenerate : (!ig.degenerate && ig.g_jvp[0] > 0.0),
                  "iv %s: %s", c->name,
                  c->kind == 1 ? "constant content cache: the item degenerate"
                               : "the item measured");
        }
    }
    if (wg)
        gpu->ws_free(wg);
    if (wc)
        cpu->ws_free(wc);
    qmla_cuda_engine_set_tile(0);
    printf("  iv %-25s H %3zu T %4zu  cpu r_joint %.6g cuda %.6g\n", c->name, c->H, T,
           ic.r_joint, ig.r_joint);
    case_inputs_free(&in);
}

/* The string attribute `name` of object `obj` of an HDF5 file into out
 * ("" when absent), through the library's reader. */
static void attr_string(const char *path, const char *obj, const char *name, char *out,
                        size_t len)
{
    out[0] = 0;
    qmla_error err;
    qmla_error_clear(&err);
    const qmla_h5_ctx v = {path, H5P_DEFAULT, &err};
    const hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t o = f < 0 ? -1 : H5Oopen(f, obj, H5P_DEFAULT);
    char *str = NULL;
    if (o >= 0 && qmla_h5_read_attr_str(&v, o, obj, name, 0, &str) == QMLA_OK && str)
        snprintf(out, len, "%s", str);
    free(str);
    if (o >= 0)
        H5Oclose(o);
    if (f >= 0)
        H5Fclose(f);
}

/* The capture at path, or NULL (a failed check); *err cleared for the
 * caller's use. */
static qmla_capture *open_capture(const char *path, qmla_error *err)
{
    qmla_capture *cap = NULL;
    qmla_error_clear(err);
    const int st = qmla_capture_open(path, &cap, err);
    CHECK_OK(st, *err);
    qmla_error_clear(err);
    return st ? NULL : cap;
}

/* The group of a results file names the engine (and, for cuda, its device). */
static void check_group_engine(const char *path, const char *group, int is_cuda,
                               const char *tag)
{
    char e[64], dev[320];
    attr_string(path, group, "engine", e, sizeof e);
    attr_string(path, group, "engine_device", dev, sizeof dev);
    if (is_cuda)
        CHECK(!strcmp(e, "cuda") && !strcmp(dev, qmla_engine_device(cuda)),
              "%s: %s of the cuda engine names it and its device (%s, %s)", tag, group, e, dev);
    else
        CHECK(!strcmp(e, "cpu") && !dev[0], "%s: %s of the cpu engine (%s, no device)", tag,
              group, e);
}

/* qmla_op_run_points with each engine; points compared. */
static void test_op_run(const char *capture, const char *tag, int pred)
{
    qmla_error err;
    qmla_capture *cap = open_capture(capture, &err);
    if (!cap)
        return;
    int st = QMLA_OK;
    qmla_op_config conf[QMLA_OP_CONFIGS_MAX];
    size_t nconf = 0;
    const int bits[2] = {3, 4};
    qmla_op_configs(pred, bits, 2, 64, 1e-3, conf, &nconf);
    qmla_op_point *pts[2] = {NULL, NULL};
    size_t n[2] = {0, 0};
    qmla_op_stats sts[2];
    for (int k = 0; k < 2; k++) {
        qmla_op_opts o;
        memset(&o, 0, sizeof o);
        o.conf = conf;
        o.nconf = nconf;
        o.sensitivities = pred;
        o.threads = 8;
        o.force = 1;
        o.engine = k ? cuda : qmla_engine_cpu();
        char name[64];
        snprintf(name, sizeof name, "%s-op%d-%s.h5", tag, pred, k ? "cuda" : "cpu");
        int stopped = 0;
        st = qmla_op_run_points(cap, NULL, &o, check_path(name), &sts[k], &pts[k], &n[k],
                                &stopped, &err);
        CHECK_OK(st, err);
        if (!st)
            check_group_engine(check_path(name), pred ? "predict" : "jvp", k, tag);
    }
    if (pts[0] && pts[1]) {
        CHECK(n[0] == n[1] && n[0] > 0, "%s %s: same points (%zu, %zu)", tag,
              pred ? "predict" : "jvp", n[0], n[1]);
        CHECK(n[0] == n[1] && points_close(pts[0], pts[1], n[0], tag),
              "%s %s: every point of the cuda engine within %g of the cpu's", tag,
              pred ? "predict" : "jvp", RTOL);
        CHECK(near_op(sts[0].spearman_jvp_vs_finite, sts[1].spearman_jvp_vs_finite) &&
                  (!pred || (near_op(sts[0].mae_log_ratio_operator_allocation,
                                     sts[1].mae_log_ratio_operator_allocation) &&
                             near_op(sts[0].median_abs_log_error, sts[1].median_abs_log_error))),
              "%s %s: the statistics agree (Spearman %.6g/%.6g)", tag, pred ? "predict" : "jvp",
              sts[0].spearman_jvp_vs_finite, sts[1].spearman_jvp_vs_finite);
    }
    free(pts[0]);
    free(pts[1]);
    qmla_capture_close(cap);
}

/* qmla_intervene_run with each engine; statistics compared. */
static void test_iv_run(const char *capture, const char *tag)
{
    qmla_error err;
    qmla_capture *cap = open_capture(capture, &err);
    if (!cap)
        return;
    int st = QMLA_OK;
    qmla_iv_stats s[2];
    memset(s, 0, sizeof s);
    int ran = 0;
    for (int k = 0; k < 2; k++) {
        qmla_iv_opts o;
        memset(&o, 0, sizeof o);
        o.params = qmla_sweep_defaults();
        o.reps = 4;
        o.seed = 5;
        o.bootstrap = 200;
        o.threads = 8;
        o.force = 1;
        o.engine = k ? cuda : qmla_engine_cpu();
        char name[64];
        snprintf(name, sizeof name, "%s-iv-%s.h5", tag, k ? "cuda" : "cpu");
        int stopped = 0;
        st = qmla_intervene_run(cap, NULL, &o, check_path(name), &s[k], &stopped, &err);
        CHECK_OK(st, err);
        if (!st) {
            ran++;
            check_group_engine(check_path(name), "interventions", k, tag);
        }
    }
    if (ran == 2) {
        int ok = s[0].n_items == s[1].n_items && s[0].n_items > 0;
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < 2; p++)
                ok = ok && near_op(s[0].gmean[c][p], s[1].gmean[c][p]) &&
                     near_op(s[0].median[c][p], s[1].median[c][p]);
        ok = ok && near_op(s[0].mean_r_joint, s[1].mean_r_joint) &&
             near_op(s[0].mean_r_content, s[1].mean_r_content) &&
             near_op(s[0].mean_r_rope, s[1].mean_r_rope) &&
             fabs(s[0].mean_cross_rel - s[1].mean_cross_rel) <= RTOL;
        CHECK(ok, "%s interventions: %zu items, geometric means, medians and joint means of "
              "the cuda engine within %g of the cpu's (sign/content %.6g/%.6g)", tag,
              s[1].n_items, RTOL, s[0].gmean[0][0], s[1].gmean[0][0]);
    }
    qmla_capture_close(cap);
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

/* The operator and intervention tables over two "layers" at the same host
 * addresses (as the drivers' freed and reloaded layers may be): the engine
 * keeps a layer's weights on the device between sequences, and after
 * layer_begin takes the next layer's, so its points and items agree with
 * the CPU's on the new weights (and differ from the first layer's). */
static void test_op_layer_begin(void)
{
    const qmla_mla_dims d = {4, 64, 64, 16, 16, 16, 1.0 / sqrt(32.0)};
    const size_t H = 4, T = 40, reps = 2, nr = 2 * QMLA_N_CTRL * 2;
    float *qn = randn(H * T * 16, 1.0), *qr = randn(H * T * 16, 1.0);
    float *C = randn(T * 64, 1.0), *K = randn(T * 16, 1.0);
    float *wuk = randn(H * 16 * 64, 0.25), *wuv = randn(H * 16 * 64, 0.125);
    float *wo = randn(64 * H * 16, 0.125);
    const qmla_mla_weights w = {wuk, wuv, wo};
    qmla_op_config conf[QMLA_OP_CONFIGS_MAX];
    size_t nconf = 0;
    const int bits = 4;
    qmla_op_configs(1, &bits, 1, 16, 1e-3, conf, &nconf);
    const size_t np = 2 * nconf;
    qmla_sweep_params p = qmla_sweep_defaults();
    p.quant.group = 16;
    const qmla_exec ex = qmla_exec_cpu(4);
    qmla_error err;
    qmla_error_clear(&err);
    const qmla_op_ops *ocpu = qmla_engine_op(qmla_engine_cpu()), *ogpu = qmla_engine_op(cuda);
    const qmla_iv_ops *icpu = qmla_engine_iv(qmla_engine_cpu()), *igpu = qmla_engine_iv(cuda);
    CHECK(ogpu->layer_begin != NULL && igpu->layer_begin != NULL,
          "op/iv layer_begin: the cuda engine has them");
    CHECK(ocpu->layer_begin == NULL && icpu->layer_begin == NULL,
          "op/iv layer_begin: the cpu engine has none (its code paths unchanged)");
    qmla_op_point *p1 = calloc(np, sizeof *p1), *pg = calloc(np, sizeof *pg),
                  *pc = calloc(np, sizeof *pc);
    double *al = calloc(np * T, sizeof *al), *sg = calloc(2 * T, sizeof *sg);
    qmla_iv_item i1, ig, ic;
    memset(&i1, 0, sizeof i1);
    memset(&ig, 0, sizeof ig);
    memset(&ic, 0, sizeof ic);
    double r1[2 * QMLA_N_CTRL * 2], rg[2 * QMLA_N_CTRL * 2], rc[2 * QMLA_N_CTRL * 2];
    void *wg = NULL, *wc = NULL, *lg = NULL, *lc = NULL, *vg = NULL, *vc = NULL;
    int ok = 1;
    ok = ok && ogpu->ws_alloc(&d, T, 1, 4, &wg, &err) == QMLA_OK;
    ok = ok && ocpu->ws_alloc(&d, T, 1, 4, &wc, &err) == QMLA_OK;
    ok = ok && igpu->ws_alloc(&d, T, 4, &vg, &err) == QMLA_OK;
    ok = ok && icpu->ws_alloc(&d, T, 4, &vc, &err) == QMLA_OK;
    /* layer 1 on the GPU: two sequences (the second on the kept weights) */
    ok = ok && ogpu->layer_alloc(&ex, &d, &w, &lg, &err) == QMLA_OK;
    for (int r = 0; r < 2 && ok; r++)
        ok = ogpu->sequence(&ex, &d, T, &w, lg, qn, qr, C, K, conf, nconf, wg, p1, al, sg,
                            &err) == QMLA_OK;
    for (int r = 0; r < 2 && ok; r++)
        ok = igpu->sequence(&ex, &d, T, &w, qn, qr, C, K, &p, reps, 5, vg, &i1, r1, &err) ==
             QMLA_OK;
    /* layer 2 at the same addresses */
    for (size_t i = 0; i < H * 16 * 64; i++)
        wuk[i] = (float)(0.25 * gauss());
    for (size_t i = 0; i < 64 * H * 16; i++)
        wo[i] = (float)(0.125 * gauss());
    if (lg)
        ogpu->layer_free(lg);
    lg = NULL;
    ok = ok && ogpu->layer_alloc(&ex, &d, &w, &lg, &err) == QMLA_OK;
    if (ok) {
        ogpu->layer_begin(wg);
        igpu->layer_begin(vg);
    }
    ok = ok && ogpu->sequence(&ex, &d, T, &w, lg, qn, qr, C, K, conf, nconf, wg, pg, al, sg,
                              &err) == QMLA_OK;
    ok = ok && igpu->sequence(&ex, &d, T, &w, qn, qr, C, K, &p, reps, 5, vg, &ig, rg, &err) ==
                   QMLA_OK;
    ok = ok && ocpu->layer_alloc(&ex, &d, &w, &lc, &err) == QMLA_OK;
    ok = ok && ocpu->sequence(&ex, &d, T, &w, lc, qn, qr, C, K, conf, nconf, wc, pc, al, sg,
                              &err) == QMLA_OK;
    ok = ok && icpu->sequence(&ex, &d, T, &w, qn, qr, C, K, &p, reps, 5, vc, &ic, rc, &err) ==
                   QMLA_OK;
    CHECK(ok, "op/iv layer_begin: every sequence runs (%s)", err.msg);
    if (ok) {
        CHECK(p1[0].g_jvp != pg[0].g_jvp && i1.r_joint != ig.r_joint,
              "op/iv layer_begin: the second layer's weights change the results (g_jvp %.9g "
              "-> %.9g, r_joint %.9g -> %.9g)",
              p1[0].g_jvp, pg[0].g_jvp, i1.r_joint, ig.r_joint);
        CHECK(points_close(pc, pg, np, "op layer_begin"),
              "op layer_begin: after it the points are the cpu's on the new weights");
        CHECK(items_close(&ic, &ig, rc, rg, nr, "iv layer_begin"),
              "iv layer_begin: after it the item is the cpu's on the new weights");
    }
    if (lg)
        ogpu->layer_free(lg);
    if (lc)
        ocpu->layer_free(lc);
    if (wg)
        ogpu->ws_free(wg);
    if (wc)
        ocpu->ws_free(wc);
    if (vg)
        igpu->ws_free(vg);
    if (vc)
        icpu->ws_free(vc);
    free(p1);
    free(pg);
    free(pc);
    free(al);
    free(sg);
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
    qmla_error err;
    qmla_capture *cap = open_capture(capture, &err);
    if (!cap)
        return;
    int st = QMLA_OK;
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

/* ---- learning (qmla learn) and the effective-cache evaluation (qmla eval) ----
 * learn: the content path's learner of each engine on the same banks (two
 * train and two held-out sequences of the case's shape, the shapes of at
 * most 512 tokens and H D <= 40960, each once, γ = 1 + 0.3 N(0,1),
 * INT4 groups of 16): the initial α, the train objective and its gradient
 * at the initial parameters (objective within 1e-4 relative, gradient
 * within 1e-4 of its norm), twice on the GPU bit-identical; where the CPU's
 * 100 steps are affordable (T H d_c <= 4e5), 100 AdamW steps from the same
 * seed on both and on the CPU's reference attention form: the first 4
 * steps' train objectives within max(1e-4, 10x the reference form's
 * difference from the CPU at that step), both engines improving on their
 * init, and the 100-step differences printed next to the CPU's own
 * (reference form vs default form; see run_learn_case). eval: qmla_tf_eval_run with each engine on SmoothQuant
 * and QuaRot transforms of the capture (qmla_learn_run, CPU-calibrated):
 * every row's five values within 1e-4 relative, bound_ok and n_seq equal,
 * twice on the GPU bit-identical, /eval naming the engine and device;
 * qmla_learn_run (QuantMLA, content path) with the cuda engine writes a
 * file naming it and its device. */

#define LEARN_RTOL 1e-3
#define LEARN_EXACT_STEPS 4
static double worst_learn; /* objectives and gradients at the same parameters */
static double worst_steps; /* train objectives of the first LEARN_EXACT_STEPS steps */
/* after 100 steps: best held-out and train, cuda vs cpu, cpu reference vs cpu */
static double worst_100[4];
/* learn cases run to 100 steps, and those where all three learners improve */
static int learn_cases, learn_improved;
static double worst_eval;

/* 1 when an earlier case of the table has c's dimensions (a tile variant):
 * the learner and the evaluation have no tile. */
static int shape_repeated(const shape_case *c)
{
    for (const shape_case *p = cases; p < c; p++)
        if (p->H == c->H && p->D == c->D && p->d_c == c->d_c && p->d_n == c->d_n &&
            p->d_r == c->d_r && p->d_v == c->d_v && p->T == c->T && p->kind == c->kind)
            return 1;
    return 0;
}

static int learn_affordable(const shape_case *c)
{
    /* the CPU learner's projections are single-threaded BLAS here: H D <= 40960 */
    return c->kind == 0 && !shape_repeated(c) && c->T > 1 && c->T <= 512 &&
           c->H * c->T * c->T <= 5e6 && c->H * c->D <= 40960 && c->d_c % 16 == 0;
}

static int learn_steps_affordable(const shape_case *c)
{
    return learn_affordable(c) && (double)c->T * (double)c->H * (double)c->d_c <= 4e5;
}

static double rel_diff(double a, double b)
{
    const double m = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
    return m > 0.0 ? fabs(a - b) / m : 0.0;
}

/* The train objective and gradient of the cpu learner lc and, twice, of the
 * cuda learner lg at lc's current parameters: f[0] cpu, f[1], f[2] cuda;
 * *rf, *rg the relative differences of the objective and of the gradient
 * (to its norm); *same: the two cuda evaluations bit-identical. */
static int learn_same_params(qmla_learner *lc, qmla_learner *lg, double *f, double *rf,
                             double *rg, int *same, qmla_error *err)
{
    const size_t np = qmla_learner_n_params(lc);
    double *p = (double *)malloc(np * sizeof *p), *g[3];
    for (int k = 0; k < 3; k++)
        g[k] = (double *)calloc(np, sizeof(double));
    memcpy(p, qmla_learner_params(lc), np * sizeof *p);
    int st = qmla_learner_objective(lc, 0, p, g[0], 0, &f[0], err);
    if (!st)
        st = qmla_learner_objective(lg, 0, p, g[1], 0, &f[1], err);
    if (!st)
        st = qmla_learner_objective(lg, 0, p, g[2], 0, &f[2], err);
    if (!st) {
        double dg = 0, gg = 0;
        for (size_t i = 0; i < np; i++) {
            dg += (g[1][i] - g[0][i]) * (g[1][i] - g[0][i]);
            gg += g[0][i] * g[0][i];
        }
        *rg = gg > 0 ? sqrt(dg / gg) : sqrt(dg);
        *rf = rel_diff(f[0], f[1]);
        *same = f[1] == f[2] && !memcmp(g[1], g[2], np * sizeof(double));
    }
    for (int k = 0; k < 3; k++)
        free(g[k]);
    free(p);
    return st;
}

/* Learning in double (qmla_learn_opts.attn_f64) on both engines: item 4's
 * "learned transforms within 1e-3 of each other's objective after 100
 * steps from the same seed". At the same parameters the objectives within
 * LEARN64_SAME and the gradients within LEARN64_GRAD of their norm (G_C~
 * leaves each engine rounded to float once, so a double difference at a
 * float rounding boundary moves one entry by an ulp); the cuda engine
 * bit-identical run after run; then 100 steps on each: every step's train
 * objective, the final train objective and the best held-out objective
 * within LEARN_RTOL of the cpu's. */
#define LEARN64_SAME 1e-10
#define LEARN64_GRAD 1e-6
static double worst64_same, worst64_grad, worst64_steps, worst64_100[2];
static int learn64_cases, learn64_steps_cases;

static void run_learn64(const shape_case *c, const qmla_mla_dims *d, const qmla_mla_weights *w,
                        const float *gamma, const qmla_learn_bank *train,
                        const qmla_learn_bank *held, const qmla_learn_opts *o32)
{
    qmla_learn_opts o = *o32;
    o.attn_f64 = 1;
    qmla_error err;
    qmla_error_clear(&err);
    const qmla_learn_ops *ops[2] = {qmla_engine_learn(qmla_engine_cpu()), qmla_engine_learn(cuda)};
    void *l[2] = {NULL, NULL};
    double alpha[2] = {0, 0};
    int st = 0;
    for (int e = 0; e < 2 && !st; e++) {
        st = ops[e]->alloc(QMLA_LEARN_CONTENT, d, w, gamma, QMLA_ROPE_INTERLEAVED, train, held,
                           &o, &l[e], &err);
        if (!st)
            st = ops[e]->init(l[e], &alpha[e], &err);
    }
    CHECK_OK(st, err);
    if (!st) {
        double f[3] = {0, 0, 0}, rf = 0, rg = 0;
        int same = 0;
        st = learn_same_params((qmla_learner *)l[0], (qmla_learner *)l[1], f, &rf, &rg, &same,
                               &err);
        CHECK_OK(st, err);
        if (!st) {
            worst64_same = rf > worst64_same ? rf : worst64_same;
            worst64_grad = rg > worst64_grad ? rg : worst64_grad;
            learn64_cases++;
            CHECK(alpha[0] == alpha[1], "%s learn f64: the same initial alpha (cpu %g, cuda %g)",
                  c->name, alpha[0], alpha[1]);
            CHECK(rf <= LEARN64_SAME && rg <= LEARN64_GRAD,
                  "%s learn f64: content objective %.15g/%.15g (rel %.2g, tolerance %g) and "
                  "gradient (rel %.2g, tolerance %g) of the cuda engine against the cpu's",
                  c->name, f[0], f[1], rf, LEARN64_SAME, rg, LEARN64_GRAD);
            CHECK(same, "%s learn f64: cuda objective and gradient bit-identical run after run",
                  c->name);
            printf("  %-28s learn f64 at the same parameters: objective rel %.2g, gradient rel "
                   "%.2g\n", c->name, rf, rg);
        }
    }
    if (!st && learn_steps_affordable(c)) {
        double tr[2][100], worst = 0.0;
        size_t first6 = 0;
        for (int e = 0; e < 2 && !st; e++) {
            for (size_t k = 0; k < o.steps && !st; k++) {
                st = ops[e]->iterate(l[e], &err);
                tr[e][k] = ops[e]->state(l[e]).train_obj;
            }
            if (!st)
                st = ops[e]->finish(l[e], &err);
        }
        CHECK_OK(st, err);
        if (!st) {
            for (size_t k = 0; k < o.steps; k++) {
                const double a = rel_diff(tr[0][k], tr[1][k]);
                worst = a > worst ? a : worst;
                if (!first6 && a > 1e-6)
                    first6 = k + 1;
            }
            const qmla_learn_state s0 = ops[0]->state(l[0]), s1 = ops[1]->state(l[1]);
            const double gb = rel_diff(s0.best_held, s1.best_held),
                         gt = rel_diff(s0.train_obj, s1.train_obj);
            learn64_steps_cases++;
            worst64_steps = worst > worst64_steps ? worst : worst64_steps;
            worst64_100[0] = gb > worst64_100[0] ? gb : worst64_100[0];
            worst64_100[1] = gt > worst64_100[1] ? gt : worst64_100[1];
            CHECK(s0.step == 100 && s1.step == 100, "%s learn f64: 100 steps (%zu, %zu)", c->name,
                  s0.step, s1.step);
            CHECK(worst <= LEARN_RTOL && gb <= LEARN_RTOL && gt <= LEARN_RTOL,
                  "%s learn f64: after 100 steps from the same seed the cuda engine's best "
                  "held-out %.9g and train %.9g within %g of the cpu's %.9g and %.9g (rel %.2g, "
                  "%.2g; every step's train objective: largest %.2g)",
                  c->name, s1.best_held, s1.train_obj, LEARN_RTOL, s0.best_held, s0.train_obj,
                  gb, gt, worst);
            printf("  %-28s learn f64 100 steps: cuda vs cpu best held-out %.2g, train %.2g, "
                   "largest step %.2g (first step beyond 1e-6: %zu; best step %zu/%zu, "
                   "init %.9g best %.9g)\n",
                   c->name, gb, gt, worst, first6, s0.best_step, s1.best_step, s0.init_obj,
                   s0.best_held);
        }
    }
    for (int e = 0; e < 2; e++)
        if (l[e])
            ops[e]->free(l[e]);
}

static void learn64_summary(void)
{
    printf("learn in double (attn_f64), cuda vs cpu: %d cases at the same parameters, objective "
           "%.3g (tolerance %g), gradient %.3g (tolerance %g); %d cases over 100 steps: every "
           "step's train objective %.3g, best held-out %.3g, train %.3g (tolerance %g)\n",
           learn64_cases, worst64_same, LEARN64_SAME, worst64_grad, LEARN64_GRAD,
           learn64_steps_cases, worst64_steps, worst64_100[0], worst64_100[1], LEARN_RTOL);
    CHECK(learn_cases == 0 || learn64_steps_cases > 0,
          "learn f64: the 100-step comparison ran in at least one case (%d)",
          learn64_steps_cases);
}

static void run_learn_case(const shape_case *c)
{
    case_inputs in;
    case_inputs_make(c, &in); /* weights and the first train sequence */
    const qmla_mla_dims d = in.d;
    const size_t H = c->H, T = c->T;
    enum { NS = 4 };
    float *qn[NS], *qr[NS], *C[NS], *K[NS];
    qn[0] = in.qn;
    qr[0] = in.qr;
    C[0] = in.C;
    K[0] = in.K;
    for (int k = 1; k < NS; k++) {
        qn[k] = randn(H * T * c->d_n, 1.0);
        qr[k] = randn(H * T * c->d_r, 1.0);
        C[k] = randn(T * c->d_c, 1.0);
        K[k] = randn(T * c->d_r, 1.0);
    }
    float *gamma = randn(c->d_c, 0.3);
    for (size_t j = 0; j < c->d_c; j++)
        gamma[j] += 1.0f;
    size_t Ts[2] = {T, T};
    const float *bC[2][2] = {{C[0], C[1]}, {C[2], C[3]}}, *bK[2][2] = {{K[0], K[1]}, {K[2], K[3]}};
    const float *bn[2][2] = {{qn[0], qn[1]}, {qn[2], qn[3]}},
                *br[2][2] = {{qr[0], qr[1]}, {qr[2], qr[3]}};
    const qmla_learn_bank train = {2, Ts, bC[0], bK[0], bn[0], br[0]},
                          held = {2, Ts, bC[1], bK[1], bn[1], br[1]};
    qmla_learn_opts o = qmla_learn_defaults();
    o.quant.bits = 4;
    o.quant.group = 16;
    o.steps = 100;
    o.seed = 7;
    o.threads = 8;
    qmla_error err;
    qmla_error_clear(&err);
    const qmla_learn_ops *ops[2] = {qmla_engine_learn(qmla_engine_cpu()), qmla_engine_learn(cuda)};
    void *l[2] = {NULL, NULL};
    double alpha[2] = {0, 0}, f[3] = {0, 0, 0};
    int ok = 1;
    for (int e = 0; e < 2 && ok; e++) {
        int st = ops[e]->alloc(QMLA_LEARN_CONTENT, &d, &in.w, gamma, QMLA_ROPE_INTERLEAVED, &train,
                               &held, &o, &l[e], &err);
        if (!st)
            st = ops[e]->init(l[e], &alpha[e], &err);
        CHECK_OK(st, err);
        ok = !st;
    }
    if (ok) {
        /* both learners are CPU learners (the cuda one with its attention on
         * the GPU): the objective at the same parameters */
        double rf = 0, rg = 0;
        int same = 0;
        int st = learn_same_params((qmla_learner *)l[0], (qmla_learner *)l[1], f, &rf, &rg, &same,
                                   &err);
        CHECK_OK(st, err);
        if (!st) {
            worst_learn = rf > worst_learn ? rf : worst_learn;
            worst_learn = rg > worst_learn ? rg : worst_learn;
            CHECK(alpha[0] == alpha[1], "%s learn: the same initial alpha (cpu %g, cuda %g)",
                  c->name, alpha[0], alpha[1]);
            CHECK(rf <= RTOL && rg <= RTOL,
                  "%s learn: content objective %.9g/%.9g (rel %.2g) and gradient (rel %.2g) of "
                  "the cuda engine within %g of the cpu's",
                  c->name, f[0], f[1], rf, rg, RTOL);
            CHECK(same, "%s learn: cuda objective and gradient bit-identical run after run",
                  c->name);
        }
        if (!st && learn_steps_affordable(c)) {
            /* The trajectories: the train objective before each of the 100
             * steps on both engines, and on a third learner, the CPU's with
             * its absorbed reference attention (attn_reference: the same
             * function, other rounding), the yardstick of how far rounding
             * alone moves a trajectory. The quantizer's rounding makes the
             * objective piecewise in the parameters: the CPU's two forms
             * agree to ~1e-6 for the first steps and then drift apart
             * (1e-3 by step 2 to 10, percents by step 100). Asserted: each
             * of the first LEARN_EXACT_STEPS steps within 1e-4 relative or
             * within 10x the reference form's difference at that step, and
             * the 100-step outcomes compared (below); the 100-step
             * differences of both pairs are printed. */
            void *lr = NULL;
            qmla_learn_opts orf = o;
            orf.attn_reference = 1;
            st = ops[0]->alloc(QMLA_LEARN_CONTENT, &d, &in.w, gamma, QMLA_ROPE_INTERLEAVED,
                               &train, &held, &orf, &lr, &err);
            if (!st)
                st = ops[0]->init(lr, NULL, &err);
            void *L3[3] = {l[0], l[1], lr};
            double tr[3][100];
            for (int e = 0; e < 3 && !st; e++) {
                const qmla_learn_ops *op = ops[e == 1];
                for (size_t k = 0; k < o.steps && !st; k++) {
                    st = op->iterate(L3[e], &err);
                    tr[e][k] = op->state(L3[e]).train_obj;
                }
                if (!st)
                    st = op->finish(L3[e], &err);
            }
            CHECK_OK(st, err);
            if (!st) {
                const qmla_learn_state s0 = ops[0]->state(l[0]), s1 = ops[1]->state(l[1]),
                                       s2 = ops[0]->state(lr);
                double r4 = 0.0, b4 = 0.0;
                int in4 = 1;
                size_t first[2] = {0, 0}; /* first step beyond 1e-3: cuda, reference */
                for (size_t k = 0; k < o.steps; k++) {
                    const double a = rel_diff(tr[0][k], tr[1][k]), b = rel_diff(tr[0][k], tr[2][k]);
                    if (k < LEARN_EXACT_STEPS) {
                        r4 = a > r4 ? a : r4;
                        b4 = b > b4 ? b : b4;
                        in4 = in4 && a <= fmax(RTOL, 10.0 * b);
                    }
                    if (!first[0] && a > LEARN_RTOL)
                        first[0] = k + 1;
                    if (!first[1] && b > LEARN_RTOL)
                        first[1] = k + 1;
                }
                worst_steps = r4 > worst_steps ? r4 : worst_steps;
                CHECK(in4, "%s learn: each of the first %d steps' train objectives of the cuda "
                      "engine within max(%g, 10x the cpu reference form's difference) of the "
                      "cpu's (largest: cuda %.2g, reference form %.2g)", c->name,
                      LEARN_EXACT_STEPS, RTOL, r4, b4);
                const double gb = rel_diff(s0.best_held, s1.best_held),
                             gt = rel_diff(s0.train_obj, s1.train_obj),
                             cb = rel_diff(s0.best_held, s2.best_held),
                             ct = rel_diff(s0.train_obj, s2.train_obj);
                /* Whether 100 steps find a better held-out objective is the
                 * shape's and the rounding's: on the H200 (run 6) at T64 H3
                 * the cpu and its reference form improve by 1-2 % and cuda
                 * not at all, at T257 H8 none of the three improves. So the
                 * outcome is compared, not asserted per engine: cuda's best
                 * held-out within max(LEARN_RTOL, 3x the reference form's
                 * difference) of the cpu's, never above its init; and the
                 * cases where all three improve are counted (the summary
                 * asserts there is one). */
                CHECK(s0.step == 100 && s1.step == 100 && s2.step == 100,
                      "%s learn: 100 steps on the three learners (%zu, %zu, %zu)", c->name,
                      s0.step, s1.step, s2.step);
                CHECK(s1.best_held <= s1.init_obj && gb <= fmax(LEARN_RTOL, 3.0 * cb),
                      "%s learn: cuda's best held-out after 100 steps %.9g (init %.9g) within "
                      "max(%g, 3x the cpu reference form's %.2g) of the cpu's %.9g (rel %.2g)",
                      c->name, s1.best_held, s1.init_obj, LEARN_RTOL, cb, s0.best_held, gb);
                if (s0.best_held < s0.init_obj && s1.best_held < s1.init_obj &&
                    s2.best_held < s2.init_obj)
                    learn_improved++;
                learn_cases++;
                worst_100[0] = gb > worst_100[0] ? gb : worst_100[0];
                worst_100[1] = gt > worst_100[1] ? gt : worst_100[1];
                worst_100[2] = cb > worst_100[2] ? cb : worst_100[2];
                worst_100[3] = ct > worst_100[3] ? ct : worst_100[3];
                printf("  %-28s learn 100 steps: cuda vs cpu best held-out %.2g, train %.2g "
                       "(first step beyond %g: %zu); cpu reference form vs cpu %.2g, %.2g "
                       "(first step beyond: %zu)\n",
                       c->name, gb, gt, LEARN_RTOL, first[0], cb, ct, first[1]);
            }
            if (lr)
                ops[0]->free(lr);
        }
    }
    for (int e = 0; e < 2; e++)
        if (l[e])
            ops[e]->free(l[e]);
    if (ok)
        run_learn64(c, &d, &in.w, gamma, &train, &held, &o);
    printf("  %-28s H %3zu T %4zu  learn L_C cpu %.9g cuda %.9g\n", c->name, H, T, f[0], f[1]);
    for (int k = 1; k < NS; k++) {
        free(qn[k]);
        free(qr[k]);
        free(C[k]);
        free(K[k]);
    }
    free(gamma);
    case_inputs_free(&in);
}

/* Baseline transforms of the capture (CPU-calibrated) into dir. */
static int write_baseline(const char *capture, const qmla_tmethod_type *m, const char *name,
                          qmla_error *err)
{
    qmla_learn_run_opts o = qmla_learn_run_defaults();
    o.method = m;
    o.learn.threads = 8;
    o.force = 1;
    qmla_learn_run_result r;
    memset(&r, 0, sizeof r);
    return qmla_learn_run(capture, check_path(name), &o, &r, err);
}

static int eval_one_layer; /* QMLA_TEST_SMALL=2: layer 0 only */

/* Eval on both engines (k 0 cpu, 1 and 2 cuda, 3 cuda with the eigensolver
 * after the passes: run 11's comparison, the same bits as 1). */
static void test_eval_run(const char *capture_in, const char *tag, const char *policy)
{
    char capture[1024]; /* check_path's buffer is reused below */
    snprintf(capture, sizeof capture, "%s", capture_in);
    qmla_error err;
    qmla_error_clear(&err);
    char f1[96], f2[96];
    snprintf(f1, sizeof f1, "%s-sq.h5", tag);
    snprintf(f2, sizeof f2, "%s-qr.h5", tag);
    int st = write_baseline(capture, qmla_tmethod_smoothquant, f1, &err);
    if (!st)
        st = write_baseline(capture, qmla_tmethod_quarot, f2, &err);
    CHECK_OK(st, err);
    if (st)
        return;
    char p1[1024], p2[1024];
    snprintf(p1, sizeof p1, "%s", check_path(f1));
    snprintf(p2, sizeof p2, "%s", check_path(f2));
    const char *tfs[2] = {p1, p2};
    qmla_tf_eval_run_result r[4];
    memset(r, 0, sizeof r);
    int ran = 0;
    const int layer0[1] = {0};
    for (int k = 0; k < 4; k++) {
        qmla_tf_eval_run_opts o = qmla_tf_eval_run_defaults();
        o.transforms = tfs;
        o.n_transforms = 2;
        o.config = "C4R4";
        o.policy = policy;
        o.threads = 8;
        o.engine = k ? cuda : qmla_engine_cpu();
        if (eval_one_layer) {
            o.layers = layer0;
            o.n_layers = 1;
        }
        char name[96];
        snprintf(name, sizeof name, "%s-eval-%d.h5", tag, k);
        const int was = k == 3 ? qmla_cuda_engine_set_solver_after(1) : 0;
        st = qmla_tf_eval_run(capture, check_path(name), &o, &r[k], &err);
        CHECK_OK(st, err);
        if (!st) {
            ran++;
            /* k 3: while the switch is set, so that the device string the file
             * must name carries it ("; eval solver after the passes") */
            check_group_engine(check_path(name), "eval", k > 0, tag);
        }
        if (k == 3)
            qmla_cuda_engine_set_solver_after(was);
    }
    if (ran == 4) {
        int ok = r[0].n_rows == r[1].n_rows && r[0].n_rows == r[2].n_rows &&
                 r[0].n_rows == r[3].n_rows && r[0].n_rows > 0;
        int same = ok, same_after = ok;
        for (size_t i = 0; ok && i < r[0].n_rows; i++) {
            const qmla_tf_eval_row *a = &r[0].rows[i].r, *b = &r[1].rows[i].r;
            const double v[5] = {rel_diff(a->nmse_out, b->nmse_out), rel_diff(a->nmse_c, b->nmse_c),
                                 rel_diff(a->nmse_p, b->nmse_p), rel_diff(a->pos_err, b->pos_err),
                                 rel_diff(a->bound_p, b->bound_p)};
            for (int j = 0; j < 5; j++) {
                worst_eval = v[j] > worst_eval ? v[j] : worst_eval;
                ok = ok && v[j] <= RTOL;
            }
            ok = ok && a->bound_ok == b->bound_ok && a->n_seq == b->n_seq && a->n_seq > 0;
            same = same && !memcmp(&r[1].rows[i].r, &r[2].rows[i].r, sizeof *b);
            same_after = same_after && !memcmp(&r[1].rows[i].r, &r[3].rows[i].r, sizeof *b);
        }
        CHECK(ok, "%s eval (%s): %zu rows of the cuda engine within %g of the cpu's (first "
              "nmse_out %.9g/%.9g)", tag, policy, r[1].n_rows, RTOL,
              r[0].n_rows ? r[0].rows[0].r.nmse_out : 0.0,
              r[1].n_rows ? r[1].rows[0].r.nmse_out : 0.0);
        CHECK(same, "%s eval: cuda rows bit-identical run after run", tag);
        CHECK(same_after, "%s eval: the eigensolver after the passes "
              "(QMLA_CUDA_EVAL_SOLVER_AFTER) gives the same bits", tag);
    }
    for (int k = 0; k < 4; k++)
        qmla_tf_eval_run_result_free(&r[k]);
}

/* qmla_learn_run with the cuda engine: the transforms file names it. */
static void test_learn_run(const char *capture, const char *tag)
{
    qmla_error err;
    qmla_error_clear(&err);
    qmla_learn_run_opts o = qmla_learn_run_defaults();
    o.path = "content";
    o.learn.steps = 5;
    o.learn.threads = 8;
    o.force = 1;
    const int layers[1] = {0};
    o.layers = layers;
    o.n_layers = 1;
    o.engine = cuda;
    char name[96];
    snprintf(name, sizeof name, "%s-learn-cuda.h5", tag);
    qmla_learn_run_result r;
    memset(&r, 0, sizeof r);
    const int st = qmla_learn_run(capture, check_path(name), &o, &r, &err);
    CHECK_OK(st, err);
    if (!st)
        check_group_engine(check_path(name), "/", 1, tag);
}

/* Run 11: the device checks. qmla_engine_find("cuda") (done by main before
 * this) probes without a context; the full check makes one on the chosen
 * device only; an index out of range is refused naming it; --engine auto
 * with a malformed or out-of-range QMLA_CUDA_DEVICE is an error naming the
 * variable, not a silent CPU. Ends with the default device selected. */
static void test_device_rules(int ctx_before)
{
    qmla_error err;
    qmla_error_clear(&err);
    if (ctx_before < 0)
        printf("device rules: the primary context's state cannot be read here (no driver "
               "entry point); the no-context check is left out\n");
    else
        CHECK(ctx_before == 0, "device rules: qmla_engine_find(\"cuda\") made no context on "
              "device 0 (cuDevicePrimaryCtxGetState active %d)", ctx_before);
    /* the count from the device's name, "... device I of N (RULE)" */
    int n = 0;
    const char *nm = qmla_engine_device(cuda), *of = nm ? strstr(nm, " of ") : NULL;
    CHECK(of && sscanf(of, " of %d", &n) == 1 && n >= 1, "device rules: the device count in "
          "\"%s\"", nm ? nm : "(none)");
    /* one past the last device: refused, naming the index and the count */
    int st = qmla_engine_select_device(cuda, n, &err);
    char want[64];
    snprintf(want, sizeof want, "CUDA device %d asked for (--device)", n);
    CHECK(st == QMLA_EINVAL && strstr(err.msg, want), "device rules: device %d of %d refused "
          "(%s)", n, n, err.msg);
    qmla_error_clear(&err);
    /* auto with a bad QMLA_CUDA_DEVICE: an error, twice (malformed, out of range) */
    const char *bad[2] = {"x1", "999"};
    for (int k = 0; k < 2; k++) {
        setenv("QMLA_CUDA_DEVICE", bad[k], 1);
        qmla_cuda_engine_select(-1);
        const qmla_engine *e = NULL;
        qmla_error_clear(&err);
        st = qmla_engine_find("auto", &e, &err);
        CHECK(st == QMLA_EINVAL && e == NULL && strstr(err.msg, "QMLA_CUDA_DEVICE") &&
              strstr(err.msg, "auto"), "device rules: --engine auto with QMLA_CUDA_DEVICE=%s "
              "refused (%d: %s)", bad[k], st, err.msg);
        qmla_error_clear(&err);
        st = qmla_engine_find("cuda", &e, &err);
        CHECK(st == QMLA_EINVAL, "device rules: --engine cuda with QMLA_CUDA_DEVICE=%s "
              "refused (%s)", bad[k], err.msg);
    }
    unsetenv("QMLA_CUDA_DEVICE");
    qmla_cuda_engine_select(-1);
    const qmla_engine *e = NULL;
    qmla_error_clear(&err);
    st = qmla_engine_find("auto", &e, &err);
    CHECK(st == QMLA_OK && e == cuda, "device rules: auto is cuda again with QMLA_CUDA_DEVICE "
          "unset (%s)", err.msg);
    /* the full check: the default device's context, and ready */
    qmla_error_clear(&err);
    st = qmla_engine_select_device(cuda, -1, &err);
    CHECK_OK(st, err);
    CHECK_OK(qmla_engine_ready(cuda, &err), err);
    const int ctx_after = qmla_cuda_engine_context_active(qmla_engine_device_index(cuda));
    CHECK(ctx_after != 0, "device rules: the full check made the context of device %d (%d)",
          qmla_engine_device_index(cuda), ctx_after);
}

/* Run 11: eval's head norms (qmla_cuda_engine_head_norms, the d_v Gram
 * route) against the CPU's ||P_h||_2 (qmla_spectral_norm of the float
 * product), and non-finite weights refused naming the head and the Gram
 * (review10: a NaN became a norm of 0). */
static void test_head_norms(void)
{
    const shape_case c = {"head norms", 4, 64, 48, 16, 8, 12, 1, 0, 0, 0};
    case_inputs in;
    case_inputs_make(&c, &in);
    const qmla_mla_dims *d = &in.d;
    const size_t H = d->H, HV = H * d->d_v;
    double pn[4], ref[4];
    float *X = malloc(d->D * d->d_c * sizeof *X);
    for (size_t h = 0; h < H; h++) {
        for (size_t o = 0; o < d->D; o++)
            for (size_t j = 0; j < d->d_c; j++) {
                double a = 0.0;
                for (size_t v = 0; v < d->d_v; v++)
                    a += (double)in.wo[o * HV + h * d->d_v + v] *
                         in.wuv[(h * d->d_v + v) * d->d_c + j];
                X[o * d->d_c + j] = (float)a;
            }
        ref[h] = qmla_spectral_norm(X, d->D, d->d_c);
    }
    free(X);
    qmla_error err;
    qmla_error_clear(&err);
    int st = qmla_cuda_engine_head_norms(d, &in.w, 2, pn, &err);
    CHECK_OK(st, err);
    int ok = !st;
    for (size_t h = 0; ok && h < H; h++)
        ok = isfinite(pn[h]) && pn[h] > 0 && fabs(pn[h] - ref[h]) <= RTOL * ref[h];
    CHECK(ok, "head norms: the cuda engine's %zu head norms within %g of the CPU's (%.9g/%.9g)",
          H, RTOL, pn[0], ref[0]);
    /* a NaN in head 2's columns of w_o, then in head 1's rows of w_uv */
    const float wo_keep = in.wo[5 * HV + 2 * d->d_v + 3];
    in.wo[5 * HV + 2 * d->d_v + 3] = NAN;
    for (size_t h = 0; h < H; h++)
        pn[h] = -1.0;
    qmla_error_clear(&err);
    st = qmla_cuda_engine_head_norms(d, &in.w, 2, pn, &err);
    CHECK(st == QMLA_ENONFINITE && strstr(err.msg, "head 2 of 4") && strstr(err.msg, "W_O"),
          "head norms: a NaN in w_o is QMLA_ENONFINITE naming head 2 and W_O (%d: %s)", st,
          err.msg);
    in.wo[5 * HV + 2 * d->d_v + 3] = wo_keep;
    in.wuv[(1 * d->d_v + 2) * d->d_c + 7] = INFINITY;
    qmla_error_clear(&err);
    st = qmla_cuda_engine_head_norms(d, &in.w, 2, pn, &err);
    CHECK(st == QMLA_ENONFINITE && strstr(err.msg, "head 1 of 4") && strstr(err.msg, "W_UV"),
          "head norms: an infinity in w_uv is QMLA_ENONFINITE naming head 1 and W_UV (%d: %s)",
          st, err.msg);
    case_inputs_free(&in);
}

/* QMLA_TEST_SECTIONS (main): NULL all, else a comma-separated list. */
static const char *sections;
static int want(const char *name)
{
    if (!sections || !*sections)
        return 1;
    const size_t n = strlen(name);
    for (const char *p = sections; (p = strstr(p, name)) != NULL; p += n)
        if ((p == sections || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return 0;
}

/* 1 when QMLA_TEST_SECTIONS is unset, empty or a comma list of known
 * section names; else a FAIL naming the variable, the entry and the names
 * (review11: a misspelt section ran nothing and the test passed). */
static int sections_valid(void)
{
    static const char *const known[] = {"rules", "sweep",  "op",   "iv",      "learn",
                                        "layer", "qdq",    "heads", "drivers", "eval"};
    const char *v = getenv("QMLA_TEST_SECTIONS");
    if (!v || !*v)
        return 1;
    for (const char *p = v;;) {
        const char *e = strchr(p, ',');
        const size_t n = e ? (size_t)(e - p) : strlen(p);
        int hit = 0;
        for (size_t k = 0; k < sizeof known / sizeof *known && !hit; k++)
            hit = n == strlen(known[k]) && !strncmp(p, known[k], n);
        if (!hit) {
            printf("FAIL: QMLA_TEST_SECTIONS=\"%s\": \"%.*s\" is no section; expected a "
                   "comma list of rules, sweep, op, iv, learn, layer, qdq, heads, drivers, "
                   "eval\n", v, (int)n, p);
            return 0;
        }
        if (!e)
            return 1;
        p = e + 1;
    }
}

/* The benchmark switches' parsing (run 12), host-only, before the device
 * is probed (so it runs on a machine without a device too): a malformed
 * QMLA_CUDA_ENGINE_TILE or QMLA_CUDA_EVAL_SOLVER_AFTER is an error naming
 * the variable (it was silently ignored), well-formed ones are not; an
 * unknown GEMM mode is refused by the setter. The caller's values are put
 * back. */
static void set_or_unset(const char *name, const char *v)
{
    if (v)
        setenv(name, v, 1);
    else
        unsetenv(name);
}

static void test_switch_parsing(void)
{
    char keep_t[64] = "", keep_a[64] = "";
    const char *t0 = getenv("QMLA_CUDA_ENGINE_TILE"), *a0 = getenv("QMLA_CUDA_EVAL_SOLVER_AFTER");
    if (t0)
        snprintf(keep_t, sizeof keep_t, "%s", t0);
    if (a0)
        snprintf(keep_a, sizeof keep_a, "%s", a0);
    static const struct { const char *tile, *after; int bad; const char *names; } rows[] = {
        {NULL, NULL, 0, ""},       {"128", NULL, 0, ""},
        {"0", "1", 0, ""},         {"12x", NULL, 1, "QMLA_CUDA_ENGINE_TILE=\"12x\""},
        {"-3", NULL, 1, "QMLA_CUDA_ENGINE_TILE"},
        {"99999999", NULL, 1, "QMLA_CUDA_ENGINE_TILE"},
        {NULL, "yes", 1, "QMLA_CUDA_EVAL_SOLVER_AFTER=\"yes\""},
        {"64", "0", 0, ""}};
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        set_or_unset("QMLA_CUDA_ENGINE_TILE", rows[k].tile);
        set_or_unset("QMLA_CUDA_EVAL_SOLVER_AFTER", rows[k].after);
        const char *e = qmla_cuda_engine_switch_error();
        CHECK((e != NULL) == rows[k].bad && (!e || strstr(e, rows[k].names)),
              "switches TILE=%s AFTER=%s: %s (expected %s)", rows[k].tile ? rows[k].tile : "unset",
              rows[k].after ? rows[k].after : "unset", e ? e : "accepted",
              rows[k].bad ? "an error naming the variable" : "accepted");
    }
    set_or_unset("QMLA_CUDA_ENGINE_TILE", t0 ? keep_t : NULL);
    set_or_unset("QMLA_CUDA_EVAL_SOLVER_AFTER", a0 ? keep_a : NULL);
    const char *gm = qmla_cuda_engine_gemm_name();
    char keep_g[16];
    snprintf(keep_g, sizeof keep_g, "%s", gm ? gm : "");
    CHECK(qmla_cuda_engine_set_gemm("tf32") == -1, "GEMM mode \"tf32\" refused by the setter");
    const char *g2 = qmla_cuda_engine_gemm_name();
    CHECK(!strcmp(g2 ? g2 : "", keep_g), "a refused GEMM mode leaves the mode (%s, was %s)",
          g2 ? g2 : "malformed", keep_g);
}

/* The provenance strings from several threads at once (review12: one
 * static buffer, emptied and rebuilt on every call, so a thread could read
 * it empty or half written): every call in every thread returns the whole
 * string, the same pointer (interned), and the mode is the switches
 * without their "; ". Host-only (the switches touch no device). */
typedef struct prov_race {
    const char *want_sw, *want_mode;
    long bad;
} prov_race;

static void *prov_reader(void *p)
{
    prov_race *c = p;
    for (int k = 0; k < 20000; k++) {
        const char *sw = qmla_cuda_engine_switches(), *m = qmla_cuda_engine_mode();
        c->bad += sw != c->want_sw || strcmp(sw, c->want_sw) != 0 || m != c->want_mode;
    }
    return NULL;
}

static void test_provenance_threads(void)
{
    qmla_cuda_engine_set_tile(64);
    const char *sw = qmla_cuda_engine_switches(), *m = qmla_cuda_engine_mode();
    CHECK(strstr(sw, "; query tile <= 64") != NULL && !strcmp(m, sw + 2),
          "switches \"%s\", mode \"%s\" (expected the tile, and the switches without \"; \")",
          sw, m);
    enum { NTH = 6 };
    pthread_t th[NTH];
    prov_race c[NTH];
    int started = 0;
    for (int k = 0; k < NTH; k++) {
        c[k].want_sw = sw;
        c[k].want_mode = m;
        c[k].bad = 0;
        started += pthread_create(&th[k], NULL, prov_reader, &c[k]) == 0;
    }
    long bad = 0;
    for (int k = 0; k < started; k++) {
        pthread_join(th[k], NULL);
        bad += c[k].bad;
    }
    CHECK(started == NTH && bad == 0, "provenance strings from %d threads x 20000 calls: %ld "
          "not the whole, interned string", started, bad);
    qmla_cuda_engine_set_tile(0);
    const char *sw0 = qmla_cuda_engine_switches();
    CHECK(strstr(sw0, "query tile") == NULL && strstr(sw, "; query tile <= 64") != NULL,
          "the tile unset again: \"%s\"; the earlier string unchanged: \"%s\"", sw0, sw);
}

int main(void)
{
    /* line by line: a run cut by a sanitizer's time limit still shows how
     * far it got (run 11's memcheck and racecheck printed nothing) */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!sections_valid()) /* before the device: fails without one too */
        return 1;
    qmla_blas_set_threads(1);
    qmla_error err;
    qmla_error_clear(&err);
    /* QMLA_TEST_ENGINE=cpu with QMLA_TEST_ONLY=learn: the CPU engine in
     * the cuda engine's place, so the learn rows print the CPU's own
     * rounding yardstick (its reference form) without a device */
    test_switch_parsing();
    test_provenance_threads();
    const char *te = getenv("QMLA_TEST_ENGINE"), *to = getenv("QMLA_TEST_ONLY");
    if (te && !strcmp(te, "cpu") && to && !strcmp(to, "learn"))
        cuda = qmla_engine_cpu();
    else if (qmla_engine_find("cuda", &cuda, &err)) {
        printf("SKIP: %s\n", err.msg);
        return check_fail_ ? check_summary("test_engine_cuda") : 77;
    }
    /* read before anything else touches the device: the find above is the
     * light probe (run 11) */
    const int ctx_before = cuda == qmla_engine_cpu() ? -1 : qmla_cuda_engine_context_active(0);
    /* the full check (the device runs this build's kernels): else SKIP */
    if (qmla_engine_ready(cuda, &err)) {
        printf("SKIP: %s\n", err.msg);
        return 77;
    }
    check_rng_seed(0x18c0dau);
    if (!check_tmpdir(dir, sizeof dir, "engine-cuda"))
        return 1;
    printf("device: %s (engine %s)\n", qmla_engine_device(cuda) ? qmla_engine_device(cuda) : "none",
           qmla_engine_name(cuda));
    const char *small = getenv("QMLA_TEST_SMALL");
    const int is_small = small && (!strcmp(small, "1") || !strcmp(small, "2"));
    const int is_tiny = small && !strcmp(small, "2");
    /* QMLA_TEST_ONLY=learn: the learn rows alone (a short device call) */
    const char *only = getenv("QMLA_TEST_ONLY");
    if (only && !strcmp(only, "learn")) {
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
            if (learn_affordable(&cases[k]))
                run_learn_case(&cases[k]);
        printf("largest relative difference cuda vs cpu, learn objective and gradient: %.3g; "
               "first %d steps: %.3g\n", worst_learn, LEARN_EXACT_STEPS, worst_steps);
        printf("learn after 100 steps (largest relative difference): cuda vs cpu "
               "best held-out %.3g train %.3g; cpu reference form vs cpu %.3g, %.3g\n",
               worst_100[0], worst_100[1], worst_100[2], worst_100[3]);
        CHECK(learn_cases == 0 || learn_improved > 0,
              "learn: in at least one of the %d cases run to 100 steps all three learners "
              "improve on their init (%d do)", learn_cases, learn_improved);
        printf("learn: %d of %d cases improve on the init on all three learners\n",
               learn_improved, learn_cases);
        learn64_summary();
        return check_summary("test_engine_cuda");
    }
    /* QMLA_TEST_SECTIONS=a,b,...: only those sections (rules sweep op iv
     * learn layer qdq heads drivers eval), so a sanitizer's run can be split
     * over several processes, each within a device call's time (run 11's
     * memcheck and racecheck of the whole test did not finish in 220 s);
     * unset: all, in this order (a section left out shifts the random
     * inputs of the later ones) */
    sections = getenv("QMLA_TEST_SECTIONS");
    /* the GEMM precision is a dimension of the whole table (run 12): the
     * process runs every case in the mode QMLA_CUDA_ENGINE_GEMM names
     * (fp32 | 3xtf32), against the same CPU references and tolerance;
     * scripts/device-gpu-engine.sh's run12 step runs the test in both */
    {
        const char *gm = qmla_cuda_engine_gemm_name();
        CHECK(gm != NULL, "QMLA_CUDA_ENGINE_GEMM is fp32, 3xtf32 or unset (%s)",
              gm ? gm : qmla_cuda_engine_gemm_error());
        printf("GEMM mode: %s\n", gm ? gm : "(malformed)");
        fflush(stdout);
    }
    if (want("rules"))
        test_device_rules(ctx_before);
    for (size_t k = 0; want("sweep") && k < sizeof cases / sizeof cases[0]; k++)
        if (!(is_small && cases[k].big) && !(is_tiny && cases[k].H * cases[k].T > 64))
            run_case(&cases[k]);
    for (size_t k = 0; want("op") && k < sizeof cases / sizeof cases[0]; k++)
        if (!(is_small && cases[k].big) && !(is_tiny && cases[k].H * cases[k].T > 64) &&
            op_affordable(&cases[k]))
            run_op_case(&cases[k]);
    for (size_t k = 0; want("iv") && k < sizeof cases / sizeof cases[0]; k++)
        if (!(is_small && cases[k].big) && !(is_tiny && cases[k].H * cases[k].T > 64) &&
            iv_affordable(&cases[k]))
            run_iv_case(&cases[k]);
    for (size_t k = 0; want("learn") && k < sizeof cases / sizeof cases[0]; k++)
        if (!(is_small && cases[k].big) && !(is_tiny && cases[k].H * cases[k].T > 64) &&
            learn_affordable(&cases[k]))
            run_learn_case(&cases[k]);
    if (want("layer")) {
        test_layer_begin();
        test_op_layer_begin();
    }
    if (want("qdq"))
        test_qdq();
    /* after the tables: its random weights must not shift the tables'
     * inputs (run 11 drew them first, and the tables' T = 2 finite gain at
     * nu 1e-4 and three learn trajectories then fell outside: docs) */
    if (want("heads"))
        test_head_norms();
    const char *root = getenv("QMLA_SOURCE_ROOT");
    char def[1024];
    snprintf(def, sizeof def, "%s/data/tiny-mla-default.h5", root ? root : ".");
    if (is_tiny) {
        /* racecheck: eval's kernels too (the Gram head norms, the
         * eigensolver's own stream), on one layer of the default capture */
        eval_one_layer = 1;
        if (want("eval"))
            test_eval_run(def, "default", "none");
        return check_summary("test_engine_cuda");
    }
    if (want("drivers")) {
        test_run(def, "default");
        test_op_run(def, "default", 1);
        test_iv_run(def, "default");
    }
    if (want("eval"))
        test_eval_run(def, "default", "none");
    if (want("drivers"))
        test_learn_run(def, "default");
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
        if (!st && want("drivers")) {
            test_run(check_path("v2lite.h5"), "v2-lite synth");
            test_op_run(check_path("v2lite.h5"), "v2-lite synth", 0);
        }
        if (!st && want("eval"))
            test_eval_run(check_path("v2lite.h5"), "v2-lite synth", "sink4/local16");
    }
    printf("largest relative difference cuda vs cpu: %.3g (tolerance %g)\n", worst, RTOL);
    printf("largest relative difference cuda vs cpu, operator and interventions: %.3g "
           "(tolerance %g)\n", worst_op, RTOL);
    printf("largest relative difference cuda vs cpu, learn objective and gradient: %.3g "
           "(tolerance %g); first %d steps: %.3g; eval: %.3g (tolerance %g)\n",
           worst_learn, RTOL, LEARN_EXACT_STEPS, worst_steps, worst_eval, RTOL);
    printf("learn after 100 steps (largest relative difference): cuda vs cpu "
           "best held-out %.3g train %.3g; cpu reference form vs cpu %.3g, %.3g\n",
           worst_100[0], worst_100[1], worst_100[2], worst_100[3]);
    CHECK(learn_cases == 0 || learn_improved > 0,
          "learn: in at least one of the %d cases run to 100 steps all three learners "
          "improve on their init (%d do)", learn_cases, learn_improved);
    printf("learn: %d of %d cases improve on the init on all three learners\n",
           learn_improved, learn_cases);
    if (learn_cases)
        learn64_summary();
    return check_summary("test_engine_cuda");
}
