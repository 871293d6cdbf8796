/* bench_engine.cu — the sweep per layer-cell on the CUDA engine and on the
 * CPU engine in the same run (docs/cuda-engine.md, "Benchmark"), with
 * cuBLAS's SGEMM rate on the sweep's own shapes and OpenBLAS's on 2048^3.
 *
 *   bench_engine CAPTURE.h5 [--threads N] [--out OUT.h5] [--layers L]
 *                [--cpu-seqs K] [--no-cpu] [--no-sweep] [--ops] [--op-seqs K]
 *                [--iv-seqs K] [--iv-reps R] [--cpu-op-seqs K] [--cpu-light]
 *                [--learn GPU_STEPS] [--cpu-learn-steps K] [--eval]
 *
 * --ops adds jvp, predict (with the exact sensitivities, also timed alone)
 * and intervene per sequence on both engines (bench_ops below); --no-sweep
 * leaves the sweep rows out. --learn and --eval add `qmla learn`'s learner
 * (both paths of layer 0, GPU_STEPS steps timed on the GPU, K (default 2)
 * on the CPU, 300 steps projected) and `qmla eval` of one layer-cell on
 * both engines (bench_tf below).
 *
 * For each of the first L layers (default 1) and each cell: the cuda
 * engine times every sequence of the cell (its weights copied again at the
 * cell's start, as after a layer load: the conservative case), after one
 * untimed warm-up sequence; the CPU engine times the first K sequences
 * (default 1; --no-cpu: none) and the layer-cell time is its mean per
 * sequence times N. The largest relative difference of the response and
 * route NMSEs between the engines over the sequences both ran is reported
 * per row. Useful FLOPs are qmla_sweep_flops (the causal half of the
 * attention products).
 *
 * Results: a table on stdout and OUT.h5 (default /tmp/qmla-bench-engine.h5)
 * with the provenance block of every qmla file (lib/io/group.h; engine
 * "cuda" and engine_device), root attributes (capture, threads, the SGEMM
 * rates, and for a DeepSeek-V3-shaped capture the extrapolated study:
 * 61 layers x 6 cells x 8 sequences from the measured GPU seconds per
 * sequence) and /rows: op, layer, cell, T, N, engine, seqs_timed,
 * seconds_per_layer_cell, seconds_per_sequence, useful_gflops,
 * max_rel_diff. */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver/engine_cuda.h"
extern "C" {
#include "io/group.h" /* private to the library, C linkage */
}
#include "qmla/capture.h"
#include "qmla/engine.h"
#include "qmla/intervene.h"
#include "qmla/jvp.h"
#include "qmla/learn.h"
#include "qmla/outpath.h"
#include "qmla/predict.h"
#include "qmla/sweep.h"
#include "qmla/tfeval.h"

extern "C" void openblas_set_num_threads(int num_threads);

/* QMLA_CUDA_ENGINE_PROFILE=1: the engine's phase profile (engine_cuda.h)
 * of each timed GPU operation, per sequence: prof_start before its timed
 * calls, prof_print after them with their wall seconds and count. The
 * host phases are disjoint; "rest" is the wall time they leave (the
 * launches of kernels and GEMMs, the host's small sums, the driver's
 * loops); the GPU's stream time is the sum over synchronisations of the
 * time from the first work queued to the synchronisation, so GPU / wall
 * near 1 means the GPU bounds the operation, a large host phase that the
 * host does. */
static void prof_start(void) { qmla_cuda_engine_profile_reset(); }
static void prof_print(const char *op, const char *shape, double wall, double n)
{
    qmla_cuda_profile p;
    qmla_cuda_engine_profile_get(&p);
    if (!p.on || !(n > 0) || !(wall > 0))
        return;
    const int host[] = {QMLA_CUDA_PH_DIR, QMLA_CUDA_PH_CTRL, QMLA_CUDA_PH_POINTS,
                        QMLA_CUDA_PH_EVAL_HOST, QMLA_CUDA_PH_EVAL_HEADS,
                        QMLA_CUDA_PH_EVAL_SETUP, QMLA_CUDA_PH_H2D,
                        QMLA_CUDA_PH_WAIT};
    double used = 0.0;
    printf("profile %-13s %-8s per sequence (%g timed): wall %.5f s\n", op, shape, n, wall / n);
    for (size_t k = 0; k < sizeof host / sizeof *host; k++) {
        const double v = p.s[host[k]];
        used += v;
        printf("profile %-13s %-8s   %-40s %.5f s %5.1f %%\n", op, shape,
               qmla_cuda_engine_profile_name(host[k]), v / n, 100.0 * v / wall);
    }
    printf("profile %-13s %-8s   %-40s %.5f s %5.1f %%\n", op, shape,
           "rest (launches, host sums, driver)", (wall - used) / n, 100.0 * (wall - used) / wall);
    printf("profile %-13s %-8s   %-40s %.5f s %5.1f %% of wall\n", op, shape,
           qmla_cuda_engine_profile_name(QMLA_CUDA_PH_GPU), p.s[QMLA_CUDA_PH_GPU] / n,
           100.0 * p.s[QMLA_CUDA_PH_GPU] / wall);
    if (p.s[QMLA_CUDA_PH_SENS] > 0)
        printf("profile %-13s %-8s   %-40s %.5f s %5.1f %%\n", op, shape,
               qmla_cuda_engine_profile_name(QMLA_CUDA_PH_SENS), p.s[QMLA_CUDA_PH_SENS] / n,
               100.0 * p.s[QMLA_CUDA_PH_SENS] / wall);
    for (int k = 0; k < QMLA_CUDA_ST_N; k++)
        if (p.st[k] > 0)
            printf("profile %-13s %-8s   GPU %-36s %.5f s %5.1f %%\n", op, shape,
                   qmla_cuda_engine_stage_name(k), p.st[k] / n, 100.0 * p.st[k] / wall);
    printf("profile %-13s %-8s   synchronisations %.1f, H2D copies %.1f (%.2f MB) per sequence\n",
           op, shape, (double)p.syncs / n, (double)p.h2d_calls / n, p.h2d_bytes / n / 1e6);
}

/* "V3", "V2-Lite" or "H%zu" for the profile lines. */
static const char *shape_tag(const qmla_mla_dims *d)
{
    static char b[32];
    if (d->H == 128 && d->D == 7168)
        return "V3";
    if (d->H == 16 && d->D == 2048)
        return "V2-Lite";
    snprintf(b, sizeof b, "H%zu", d->H);
    return b;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_sgemm_rate(int threads)
{
    const int n = 2048;
    float *a = (float *)malloc(sizeof(float) * n * n), *b = (float *)malloc(sizeof(float) * n * n),
          *c = (float *)malloc(sizeof(float) * n * n);
    for (long i = 0; i < (long)n * n; i++) {
        a[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        b[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
    }
    openblas_set_num_threads(threads);
    double best = 1e30;
    for (int r = 0; r < 4; r++) {
        const double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f,
                    c, n);
        const double t = now() - t0;
        if (r > 0 && t < best)
            best = t;
    }
    free(a);
    free(b);
    free(c);
    qmla_blas_set_threads(1); /* as the qmla program runs its own loops */
    return 2.0 * n * n * (double)n / best / 1e9;
}

/* cuBLAS SGEMM (CUBLAS_DEFAULT_MATH, as the engine) of `batch` products
 * [M, K] x [K, N], best of 5 after a warm-up, in GFLOP/s; 0 on failure. */
static double gpu_sgemm_rate(size_t M, size_t N, size_t K, size_t batch)
{
    float *A = NULL, *B = NULL, *C = NULL;
    cublasHandle_t h = NULL;
    double rate = 0.0;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    if (cudaMalloc((void **)&A, M * K * batch * 4) || cudaMalloc((void **)&B, K * N * 4) ||
        cudaMalloc((void **)&C, M * N * batch * 4) || cublasCreate(&h) ||
        cublasSetMathMode(h, CUBLAS_DEFAULT_MATH))
        goto out;
    cudaMemset(A, 0, M * K * batch * 4);
    cudaMemset(B, 0, K * N * 4);
    {
        const float one = 1.0f, zero = 0.0f;
        float best = 1e30f;
        for (int r = 0; r < 6; r++) {
            cudaEventRecord(e0);
            cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one,
                                      B, (int)K, 0, A, (int)K, (long long)(M * K), &zero, C,
                                      (int)N, (long long)(M * N), (int)batch);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            if (r > 0 && ms < best)
                best = ms;
        }
        rate = 2.0 * (double)M * N * K * batch / (best * 1e-3) / 1e9;
    }
out:
    if (h)
        cublasDestroy(h);
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return rate;
}

typedef struct row {
    const char *op; /* sweep, jvp, predict, sensitivities, interventions */
    int layer;
    char cell[128];
    int T, N, seqs_timed;
    const char *engine;
    double s_cell, s_seq, gflops, max_rel;
} row;

static double rel(double a, double b)
{
    const double m = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
    return m > 0.0 ? fabs(a - b) / m : 0.0;
}

static double row_rel(const qmla_response *a, const qmla_response *b)
{
    const double v[] = {rel(a->response, b->response), rel(a->nmse_out, b->nmse_out),
                        rel(a->nmse_out_matching, b->nmse_out_matching),
                        rel(a->nmse_out_aggregation, b->nmse_out_aggregation),
                        rel(a->nmse_out_interaction, b->nmse_out_interaction)};
    double m = 0.0;
    for (size_t k = 0; k < sizeof v / sizeof *v; k++)
        m = v[k] > m ? v[k] : m;
    return m;
}

/* OUT.h5: the provenance block, the numeric attributes, /rows. */
static int write_h5(const char *path, const char *capture, const char *cmd,
                    const char *device, const char *const *names, const double *vals,
                    size_t nv, const row *rows, size_t nr, qmla_error *err)
{
    qmla_h5_out o;
    int st = qmla_h5_out_file(&o, path, err);
    if (st)
        return st;
    const hid_t f = o.f;
    const size_t n = nr ? nr : 1;
    int *iv = (int *)malloc(n * sizeof *iv);
    double *dv = (double *)malloc(n * sizeof *dv);
    const char **sv = (const char **)malloc(n * sizeof *sv);
    hid_t g = -1;
    {
        const qmla_prov_input in[] = {{"capture_path", capture}};
        qmla_prov pv;
        memset(&pv, 0, sizeof pv);
        pv.tool = "bench_engine";
        pv.command_line = cmd;
        pv.engine = "cuda";
        pv.engine_device = device;
        pv.inputs = in;
        pv.n_inputs = 1;
        if ((st = qmla_h5_prov(f, &pv, path, err)))
            goto out;
    }
    QMLA_H5_TRY(qmla_h5_attr_str(f, "format", "qmla-bench-engine"), "attribute format");
    QMLA_H5_TRY(qmla_h5_attr_int(f, "format_version", 2), "attribute format_version");
    for (size_t k = 0; k < nv; k++)
        QMLA_H5_TRY(qmla_h5_attr_dbl(f, names[k], vals[k]), names[k]);
    g = H5Gcreate2(f, "rows", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    QMLA_H5_TRY(g, "group rows");
#define ICOL(name, expr, desc)                                                             \
    for (size_t k = 0; k < nr; k++)                                                        \
        iv[k] = (expr);                                                                    \
    QMLA_H5_TRY(qmla_h5_dset_1d(g, name, H5T_STD_I32LE, H5T_NATIVE_INT, nr, iv, desc, ""), \
                name)
#define DCOL(name, expr, desc, units)                                                      \
    for (size_t k = 0; k < nr; k++)                                                        \
        dv[k] = (expr);                                                                    \
    QMLA_H5_TRY(qmla_h5_dset_1d(g, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, nr, dv, desc,  \
                                units),                                                    \
                name)
    for (size_t k = 0; k < nr; k++)
        sv[k] = rows[k].op;
    QMLA_H5_TRY(qmla_h5_dset_strs(g, "op", nr, sv,
                                  "operation: sweep, jvp, predict, sensitivities, interventions, "
                                  "eval, learn_content_step, learn_rope_step, learn_layer_300"),
                "rows/op");
    ICOL("layer", rows[k].layer, "layer index as captured");
    for (size_t k = 0; k < nr; k++)
        sv[k] = rows[k].cell;
    QMLA_H5_TRY(qmla_h5_dset_strs(g, "cell", nr, sv, "cell name"), "rows/cell");
    for (size_t k = 0; k < nr; k++)
        sv[k] = rows[k].engine;
    QMLA_H5_TRY(qmla_h5_dset_strs(g, "engine", nr, sv, "engine (cuda, cpu)"), "rows/engine");
    ICOL("T", rows[k].T, "tokens per sequence");
    ICOL("N", rows[k].N, "sequences of the cell");
    ICOL("seqs_timed", rows[k].seqs_timed, "sequences timed (the layer-cell time scales them to N)");
    DCOL("seconds_per_layer_cell", rows[k].s_cell, "the operation on the N sequences", "s");
    DCOL("seconds_per_sequence", rows[k].s_seq, "mean over the timed sequences", "s");
    DCOL("useful_gflops", rows[k].gflops,
         "qmla_sweep_flops (sweep) or qmla_sens_flops (sensitivities) / seconds per sequence; "
         "NaN for the other operations", "GFLOP/s");
    DCOL("max_rel_diff", rows[k].max_rel,
         "largest relative difference cuda vs cpu over the sequences both ran", "1");
#undef ICOL
#undef DCOL
out:
    if (g >= 0)
        H5Gclose(g);
    free(iv);
    free(dv);
    free(sv);
    return qmla_h5_out_finish(&o, st);
}

/* ---- the operator model and the interventions ----------------------------------
 * On the first cell of the first layer: `qmla jvp` (one direction, INT4 at
 * nu 1e-3), `qmla predict` (the eight predict directions with the exact
 * sensitivities) and `qmla intervene` (INT4 at nu 1e-3, `iv_reps`
 * repetitions of each control, Table 6's 32 by default) per sequence on
 * each engine, the GPU timing `gpu_seqs` (interventions: `iv_seqs`)
 * sequences after an untimed warm-up, the CPU `cpu_seqs`; and the exact
 * sensitivities alone: the GPU's from the engine's hook during the predict
 * runs, the CPU's qmla_sens_exact on its own clean pass. max_rel: the
 * largest relative difference of g_jvp, g_finite and the predictors
 * (interventions: the gains, r_joint and the control ratios) over the
 * sequences both ran. */

typedef struct op_times {
    double jvp[2], predict[2], sens[2], iv[2]; /* seconds per sequence: cuda, cpu */
} op_times;

static double pts_rel(const qmla_op_point *a, const qmla_op_point *b, size_t n)
{
    double m = 0.0;
    for (size_t k = 0; k < n; k++) {
        const double v[] = {rel(a[k].g_jvp, b[k].g_jvp), rel(a[k].g_finite, b[k].g_finite),
                            rel(a[k].pred_trace, b[k].pred_trace),
                            rel(a[k].pred_alloc, b[k].pred_alloc)};
        for (size_t j = 0; j < 4; j++)
            m = v[j] > m ? v[j] : m;
    }
    return m;
}

static row *add_row(row *rows, size_t *nr, const char *op, int layer, const char *cell, size_t T,
                    size_t N, const char *engine, size_t timed, double s_seq, double flops)
{
    row *r = &rows[(*nr)++];
    r->op = op;
    r->layer = layer;
    snprintf(r->cell, sizeof r->cell, "%s", cell);
    r->T = (int)T;
    r->N = (int)N;
    r->seqs_timed = (int)timed;
    r->engine = engine;
    r->s_seq = s_seq;
    r->s_cell = s_seq * (double)N;
    r->gflops = flops > 0 ? flops / s_seq / 1e9 : NAN;
    r->max_rel = NAN;
    return r;
}

static int bench_ops(qmla_capture *cap, const qmla_mla_dims *d, const qmla_engine *cuda,
                     int threads, size_t gpu_seqs, size_t iv_seqs, size_t cpu_seqs,
                     size_t iv_reps, int cpu_light, row *rows, size_t *nr, op_times *tm,
                     qmla_error *err)
{
    qmla_layer L;
    qmla_cell c;
    memset(&L, 0, sizeof L);
    memset(&c, 0, sizeof c);
    int st = qmla_capture_load_layer(cap, 0, &L, err);
    if (!st)
        st = qmla_capture_load_cell_parts(cap, 0, 0, 0, &c, err);
    const qmla_mla_weights w = {L.w_uk, L.w_uv, L.w_o};
    const size_t T = c.T, N = c.N, H = d->H, nsel[2] = {gpu_seqs < N ? gpu_seqs : N,
                                                       cpu_seqs < N ? cpu_seqs : N};
    const int layer = st ? 0 : qmla_capture_layer_index(cap, 0);
    const qmla_exec ex = qmla_exec_cpu(threads);
    const qmla_engine *eng[2] = {cuda, qmla_engine_cpu()};
    const char *ename[2] = {"cuda", "cpu"};
    qmla_op_config cj[QMLA_OP_CONFIGS_MAX], cp[QMLA_OP_CONFIGS_MAX];
    size_t nj = 0, npc = 0;
    const int bits = 4;
    qmla_op_configs(0, &bits, 1, 64, 1e-3, cj, &nj);
    qmla_op_configs(1, &bits, 1, 64, 1e-3, cp, &npc);
    const size_t npmax = 2 * QMLA_OP_CONFIGS_MAX;
    qmla_op_point *pts[2][2];
    double *alloc = (double *)malloc(npmax * (T ? T : 1) * sizeof(double));
    double *sigma = (double *)malloc(2 * (T ? T : 1) * sizeof(double));
    const size_t nrat = 2 * QMLA_N_CTRL * iv_reps;
    double *ratio[2] = {(double *)malloc((nrat ? nrat : 1) * (iv_seqs ? iv_seqs : 1) * 8),
                        (double *)malloc((nrat ? nrat : 1) * (iv_seqs ? iv_seqs : 1) * 8)};
    qmla_iv_item *items[2] = {(qmla_iv_item *)calloc(iv_seqs + 1, sizeof(qmla_iv_item)),
                              (qmla_iv_item *)calloc(iv_seqs + 1, sizeof(qmla_iv_item))};
    for (int e = 0; e < 2; e++)
        for (int q = 0; q < 2; q++)
            pts[e][q] = (qmla_op_point *)calloc(npmax * (N ? N : 1), sizeof(qmla_op_point));
    qmla_sweep_params ivp = qmla_sweep_defaults();
    ivp.nmse = 1e-3;
    for (int e = 0; e < 2 && !st; e++) {
        const size_t n = nsel[e];
        if (n == 0)
            continue;
        const qmla_op_ops *op = qmla_engine_op(eng[e]);
        const qmla_iv_ops *iv = qmla_engine_iv(eng[e]);
        void *ws = NULL, *lay = NULL;
        if ((st = op->ws_alloc(d, T, 1, threads, &ws, err)) ||
            (st = op->layer_alloc(&ex, d, &w, &lay, err))) {
            op->ws_free(ws);
            break;
        }
#define OPSEQ(s, conf, nconf, layer_, out)                                                  \
    op->sequence(&ex, d, T, &w, layer_, c.q_nope + (s) * H * T * d->d_n,                  \
                 c.q_rope + (s) * H * T * d->d_r, c.c_kv + (s) * T * d->d_c,             \
                 c.k_rope + (s) * T * d->d_r, conf, nconf, ws, out, alloc, sigma, err)
        if (e == 0) /* warm-up: one direction with the sensitivities */
            st = OPSEQ(0, cj, nj, lay, pts[e][1]);
        if (e == 0)
            prof_start();
        double t0 = now();
        for (size_t s = 0; s < n && !st; s++)
            st = OPSEQ(s, cj, nj, NULL, pts[e][0] + s * 2 * nj);
        tm->jvp[e] = (now() - t0) / (double)n;
        if (e == 0)
            prof_print("jvp", shape_tag(d), tm->jvp[e] * (double)n, (double)n);
        const double h0 = qmla_cuda_engine_sens_seconds();
        const int light = e == 1 && cpu_light; /* the CPU: jvp and sensitivities only */
        if (e == 0)
            prof_start();
        t0 = now();
        for (size_t s = 0; s < n && !st && !light; s++)
            st = OPSEQ(s, cp, npc, lay, pts[e][1] + s * 2 * npc);
        if (!light)
            tm->predict[e] = (now() - t0) / (double)n;
        if (e == 0)
            prof_print("predict", shape_tag(d), tm->predict[e] * (double)n, (double)n);
        if (e == 0)
            tm->sens[0] = (qmla_cuda_engine_sens_seconds() - h0) / (double)n;
#undef OPSEQ
        op->layer_free(lay);
        op->ws_free(ws);
        if (st)
            break;
        if (e == 1) { /* the CPU's sensitivities alone, on its own clean pass */
            qmla_attn_state as;
            qmla_sens_layer sl;
            qmla_sens_ws sw;
            memset(&as, 0, sizeof as);
            memset(&sw, 0, sizeof sw);
            double *tr = (double *)malloc(2 * T * sizeof(double));
            if (!(st = qmla_attn_state_alloc(d, T, 0, &as, err)) &&
                !(st = qmla_sens_layer_init(&ex, d, &w, &sl, err))) {
                if (!(st = qmla_sens_ws_alloc(d, T, threads, &sw, err))) {
                    double tot = 0.0;
                    for (size_t s = 0; s < n && !st; s++) {
                        st = qmla_attn_state_forward(&ex, d, T, &w, c.q_nope + s * H * T * d->d_n,
                                                     c.q_rope + s * H * T * d->d_r,
                                                     c.c_kv + s * T * d->d_c,
                                                     c.k_rope + s * T * d->d_r, &as, err);
                        const double t1 = now();
                        if (!st)
                            st = qmla_sens_exact(&ex, d, T, &w, &sl, &as, c.c_kv + s * T * d->d_c,
                                                 &sw, tr, tr + T, err);
                        tot += now() - t1;
                    }
                    tm->sens[1] = tot / (double)n;
                    qmla_sens_ws_free(&sw);
                }
                qmla_sens_layer_free(&sl);
            }
            qmla_attn_state_free(&as);
            free(tr);
            if (st)
                break;
        }
        const size_t ni = light ? 0 : e == 0 ? (iv_seqs < N ? iv_seqs : N)
                                              : (iv_seqs < n ? iv_seqs : n);
        if (iv_reps && ni) {
            void *iws = NULL;
            if ((st = iv->ws_alloc(d, T, threads, &iws, err)))
                break;
#define IVSEQ(s, out, rat)                                                                  \
    iv->sequence(&ex, d, T, &w, c.q_nope + (s) * H * T * d->d_n,                          \
                 c.q_rope + (s) * H * T * d->d_r, c.c_kv + (s) * T * d->d_c,             \
                 c.k_rope + (s) * T * d->d_r, &ivp, iv_reps, 1 + (s), iws, out, rat, err)
            if (e == 0)
                prof_start();
            t0 = now();
            for (size_t s = 0; s < ni && !st; s++)
                st = IVSEQ(s, items[e] + s, ratio[e] + s * nrat);
            tm->iv[e] = (now() - t0) / (double)ni;
            if (e == 0)
                prof_print("interventions", shape_tag(d), tm->iv[e] * (double)ni, (double)ni);
#undef IVSEQ
            iv->ws_free(iws);
            if (st)
                break;
        }
        add_row(rows, nr, "jvp", layer, c.name, T, N, ename[e], n, tm->jvp[e], 0);
        if (!light)
            add_row(rows, nr, "predict", layer, c.name, T, N, ename[e], n, tm->predict[e], 0);
        add_row(rows, nr, "sensitivities", layer, c.name, T, N, ename[e], n, tm->sens[e],
                qmla_sens_flops(d, T));
        if (iv_reps && ni)
            add_row(rows, nr, "interventions", layer, c.name, T, N, ename[e], ni, tm->iv[e], 0);
    }
    if (!st && nsel[1]) { /* agreement over the sequences both ran */
        const size_t n = nsel[1] < nsel[0] ? nsel[1] : nsel[0];
        const double rj = pts_rel(pts[0][0], pts[1][0], 2 * nj * n);
        const double rp = cpu_light ? NAN : pts_rel(pts[0][1], pts[1][1], 2 * npc * n);
        double ri = 0.0;
        const size_t niv = cpu_light ? 0 : iv_seqs < n ? iv_seqs : n;
        for (size_t s = 0; s < niv; s++) {
            const qmla_iv_item *a = &items[0][s], *b = &items[1][s];
            const double v[] = {rel(a->g_jvp[0], b->g_jvp[0]), rel(a->g_jvp[1], b->g_jvp[1]),
                                rel(a->r_joint, b->r_joint)};
            for (size_t j = 0; j < 3; j++)
                ri = v[j] > ri ? v[j] : ri;
            for (size_t k = 0; k < nrat; k++) {
                const double x = rel(ratio[0][s * nrat + k], ratio[1][s * nrat + k]);
                ri = x > ri ? x : ri;
            }
        }
        for (size_t k = 0; k < *nr; k++) {
            if (!strcmp(rows[k].op, "jvp"))
                rows[k].max_rel = rj;
            else if (!strcmp(rows[k].op, "predict") && !cpu_light)
                rows[k].max_rel = rp;
            else if (!strcmp(rows[k].op, "interventions") && niv)
                rows[k].max_rel = ri;
        }
    }
    for (int e = 0; e < 2; e++) {
        free(pts[e][0]);
        free(pts[e][1]);
        free(ratio[e]);
        free(items[e]);
    }
    free(alloc);
    free(sigma);
    qmla_cell_free(&c);
    qmla_layer_free(&L);
    return st;
}

/* ---- learning and the effective-cache evaluation -------------------------------
 * On layer 0: `qmla learn`'s learner (Table 7's settings: 300 AdamW steps
 * of both paths at C4R4, the train bank the first cell's sequences, the
 * held-out bank the second cell's, when there is one) on each engine, the
 * GPU timing `gpu_steps` steps and the CPU `cpu_steps`: per path the setup
 * (allocation with the banks' clean passes, the scale search, the final
 * held-out evaluation) and the time per step, and one layer's 300 steps of
 * both paths projected from them; max_rel: the train objective after
 * min(gpu_steps, cpu_steps) steps from the same seed. And `qmla eval` of a
 * SmoothQuant transform (calibrated on the CPU on the first cell) on the
 * first cell per engine; max_rel: over nmse_out, nmse_out_content,
 * nmse_out_rope, pos_score_err and rope_bound_nmse. */

/* --attn-precision f64: the learner's content attention in double
 * (qmla_learn_opts.attn_f64) on both engines; recorded in the command line */
static int bench_attn_f64;

typedef struct tf_times {
    double eval[2];   /* seconds per layer-cell: cuda, cpu */
    double step[2][2], setup[2][2]; /* [engine][path] */
    double layer300[2];
} tf_times;

static int bench_tf(qmla_capture *cap, const qmla_mla_dims *d, const qmla_engine *cuda,
                    int threads, size_t gpu_steps, size_t cpu_steps, int do_eval, int cpu_eval,
                    row *rows,
                    size_t *nr, tf_times *tm, qmla_error *err)
{
    const qmla_capture_config *cf = qmla_capture_get_config(cap);
    const size_t ncell = qmla_capture_n_cells(cap, 0);
    qmla_layer L;
    qmla_cell c[2];
    memset(&L, 0, sizeof L);
    memset(c, 0, sizeof c);
    int st = qmla_capture_load_layer(cap, 0, &L, err);
    for (size_t k = 0; k < 2 && k < ncell && !st; k++)
        st = qmla_capture_load_cell_parts(cap, 0, k, 0, &c[k], err);
    if (st) {
        qmla_layer_free(&L);
        for (int k = 0; k < 2; k++)
            qmla_cell_free(&c[k]);
        return st;
    }
    const int layer = qmla_capture_layer_index(cap, 0);
    const qmla_mla_weights w = {L.w_uk, L.w_uv, L.w_o};
    const qmla_engine *eng[2] = {cuda, qmla_engine_cpu()};
    const char *ename[2] = {"cuda", "cpu"};
    const size_t H = d->H, T = c[0].T;
    const qmla_exec ex = qmla_exec_cpu(threads);
    /* the banks: views into the cells */
    qmla_learn_bank bk[2];
    size_t *Ts[2];
    const float **pv[2][4];
    for (int b = 0; b < 2; b++) {
        const size_t n = b < (int)ncell ? c[b].N : 0;
        Ts[b] = (size_t *)malloc((n ? n : 1) * sizeof(size_t));
        for (int q = 0; q < 4; q++)
            pv[b][q] = (const float **)malloc((n ? n : 1) * sizeof(float *));
        for (size_t s = 0; s < n; s++) {
            const size_t Tb = c[b].T;
            Ts[b][s] = Tb;
            pv[b][0][s] = c[b].c_kv + s * Tb * d->d_c;
            pv[b][1][s] = c[b].k_rope + s * Tb * d->d_r;
            pv[b][2][s] = c[b].q_nope + s * H * Tb * d->d_n;
            pv[b][3][s] = c[b].q_rope + s * H * Tb * d->d_r;
        }
        bk[b].n = n;
        bk[b].T = Ts[b];
        bk[b].C = pv[b][0];
        bk[b].K = pv[b][1];
        bk[b].q_nope = pv[b][2];
        bk[b].q_rope = pv[b][3];
    }
    qmla_learn_opts o = qmla_learn_defaults();
    o.quant.bits = 4;
    o.threads = threads;
    o.steps = 300;
    o.attn_f64 = bench_attn_f64;
    const size_t ncmp = gpu_steps < cpu_steps ? gpu_steps : cpu_steps;
    double cmp_obj[2][2] = {{NAN, NAN}, {NAN, NAN}};
    for (int e = 0; e < 2 && !st; e++) {
        const size_t n = e == 0 ? gpu_steps : cpu_steps;
        if (n == 0)
            continue;
        const qmla_learn_ops *lo = qmla_engine_learn(eng[e]);
        tm->layer300[e] = 0.0;
        for (int path = 0; path < 2 && !st; path++) {
            void *l = NULL;
            const double t0 = now();
            st = lo->alloc(path ? QMLA_LEARN_ROPE : QMLA_LEARN_CONTENT, d, &w, L.kv_norm,
                           cf->rope_pairing, &bk[0], &bk[1], &o, &l, err);
            if (!st)
                st = lo->init(l, NULL, err);
            const double t1 = now();
            for (size_t k = 0; k < n && !st; k++) {
                st = lo->iterate(l, err);
                if (!st && k + 1 == ncmp)
                    cmp_obj[e][path] = lo->state(l).train_obj;
            }
            const double t2 = now();
            if (!st)
                st = lo->finish(l, err);
            const double t3 = now();
            if (l)
                lo->free(l);
            if (st)
                break;
            tm->setup[e][path] = (t1 - t0) + (t3 - t2);
            tm->step[e][path] = (t2 - t1) / (double)n;
            tm->layer300[e] += tm->setup[e][path] + 300.0 * tm->step[e][path];
            add_row(rows, nr, path ? "learn_rope_step" : "learn_content_step", layer, c[0].name, T,
                    1, ename[e], n, tm->step[e][path], 0);
        }
        if (!st)
            add_row(rows, nr, "learn_layer_300", layer, c[0].name, T, 1, ename[e], n,
                    tm->layer300[e], 0);
    }
    if (!st && ncmp)
        for (size_t k = 0; k < *nr; k++)
            if (!strncmp(rows[k].op, "learn_", 6)) {
                const int path = !strcmp(rows[k].op, "learn_rope_step");
                rows[k].max_rel = !strcmp(rows[k].op, "learn_layer_300")
                                      ? fmax(rel(cmp_obj[0][0], cmp_obj[1][0]),
                                             rel(cmp_obj[0][1], cmp_obj[1][1]))
                                      : rel(cmp_obj[0][path], cmp_obj[1][path]);
            }
    if (!st && do_eval) {
        qmla_transform t;
        memset(&t, 0, sizeof t);
        float *gam = (float *)malloc(d->d_c * sizeof(float));
        const size_t cells0[1] = {0};
        st = qmla_transform_alloc(d->d_c, d->d_r, cf->rope_pairing, &t, err);
        if (!st)
            st = qmla_tf_baseline(&ex, cap, 0, cells0, 1, QMLA_TM_SMOOTHQUANT, 0.5, &t, gam, err);
        qmla_tf_eval_opts eo;
        memset(&eo, 0, sizeof eo);
        eo.qc = qmla_quant_defaults();
        eo.qr = qmla_quant_defaults();
        eo.qc.bits = eo.qr.bits = 4;
        qmla_tf_eval_row er[2];
        memset(er, 0, sizeof er);
        for (int e = 0; e < (cpu_eval ? 2 : 1) && !st; e++) {
            if (e == 0)
                prof_start();
            const double t0 = now();
            st = qmla_engine_tfeval(eng[e])->cell(&ex, cap, 0, 0, &t, gam, &eo, &er[e], err);
            tm->eval[e] = now() - t0;
            if (e == 0 && !st)
                prof_print("eval", shape_tag(d), tm->eval[e], (double)c[0].N);
            if (!st)
                add_row(rows, nr, "eval", layer, c[0].name, T, c[0].N, ename[e], c[0].N,
                        tm->eval[e] / (double)c[0].N, 0);
        }
        if (!st && cpu_eval) {
            const double v[5] = {rel(er[0].nmse_out, er[1].nmse_out), rel(er[0].nmse_c, er[1].nmse_c),
                                 rel(er[0].nmse_p, er[1].nmse_p), rel(er[0].pos_err, er[1].pos_err),
                                 rel(er[0].bound_p, er[1].bound_p)};
            double m = 0.0;
            for (int j = 0; j < 5; j++)
                m = v[j] > m ? v[j] : m;
            rows[*nr - 1].max_rel = rows[*nr - 2].max_rel = m;
            printf("eval nmse_out cuda %.9g cpu %.9g\n", er[0].nmse_out, er[1].nmse_out);
        }
        qmla_transform_free(&t);
        free(gam);
    }
    for (int b = 0; b < 2; b++) {
        free(Ts[b]);
        for (int q = 0; q < 4; q++)
            free(pv[b][q]);
    }
    qmla_cell_free(&c[0]);
    qmla_cell_free(&c[1]);
    qmla_layer_free(&L);
    return st;
}

/* The engine's query rows per sensitivity chunk (kernels/engine_cuda.cu,
 * op_ws_alloc_common): clamp(4096 / H, 2, 64), or 1024 / H under
 * QMLA_CUDA_ENGINE_BEFORE=2 (the 2026-12-02 engine). */
static size_t sens_rows(size_t H)
{
    size_t ni = (qmla_cuda_engine_before() >= 2 ? 1024 : 4096) / H;
    return ni < 2 ? 2 : ni > 64 ? 64 : ni;
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_engine CAPTURE.h5 [--threads N] [--out OUT.h5] [--layers L] "
                    "[--cpu-seqs K] [--no-cpu] [--no-sweep] [--ops] [--op-seqs K] "
                    "[--iv-seqs K] [--iv-reps R] [--cpu-op-seqs K] [--cpu-light] "
                    "[--learn GPU_STEPS] [--cpu-learn-steps K] [--attn-precision f32|f64] "
                    "[--eval]\n");
    return 2;
}

int main(int argc, char **argv)
{
    qmla_blas_set_threads(1);
    if (argc < 2)
        return usage();
    const char *capture = argv[1], *out = "/tmp/qmla-bench-engine.h5";
    int threads = 1, layers = 1, cpu_seqs = 1, no_sweep = 0, ops = 0, op_seqs = 8, iv_seqs = 1;
    int iv_reps = 32, cpu_op_seqs = 1, cpu_light = 0, learn_steps = 0, cpu_learn_steps = 2;
    int do_eval = 0, cpu_eval = 1;
    for (int k = 2; k < argc; k++) {
        if (!strcmp(argv[k], "--threads") && k + 1 < argc)
            threads = atoi(argv[++k]);
        else if (!strcmp(argv[k], "--out") && k + 1 < argc)
            out = argv[++k];
        else if (!strcmp(argv[k], "--layers") && k + 1 < argc)
            layers = atoi(argv[++k]);
        else if (!strcmp(argv[k], "--cpu-seqs") && k + 1 < argc)
            cpu_seqs = atoi(argv[++k]);
        else if (!strcmp(argv[k], "--no-cpu"))
            cpu_seqs = cpu_op_seqs = cpu_learn_steps = cpu_eval = 0;
        else if (!strcmp(argv[k], "--no-sweep"))
            no_sweep = 1;
        else if (!strcmp(argv[k], "--ops"))
            ops = 1;
        else if (!strcmp(argv[k], "--learn") && k + 1 < argc)
            learn_steps = atoi(argv[++k]);
        else if (!strcmp(argv[k], "--cpu-learn-steps") && k + 1 < argc)
            cpu_learn_steps = atoi(argv[++k]);
        else if (!strcmp(argv[k], "--eval"))
            do_eval = 1;
        else if (!strcmp(argv[k], "--attn-precision") && k + 1 < argc &&
                 (!strcmp(argv[k + 1], "f32") || !strcmp(argv[k + 1], "f64")))
            bench_attn_f64 = !strcmp(argv[++k], "f64");
        else if (!strcmp(argv[k], "--cpu-light"))
            cpu_light = 1;
        else if (!strcmp(argv[k], "--op-seqs") && k + 1 < argc)
            op_seqs = atoi(argv[++k]);
        else if (!strcmp(argv[k], "--iv-seqs") && k + 1 < argc)
            iv_seqs = atoi(argv[++k]);
        else if (!strcmp(argv[k], "--iv-reps") && k + 1 < argc)
            iv_reps = atoi(argv[++k]);
        else if (!strcmp(argv[k], "--cpu-op-seqs") && k + 1 < argc)
            cpu_op_seqs = atoi(argv[++k]);
        else
            return usage();
    }
    if (threads < 1)
        threads = 1;
    qmla_error err;
    qmla_error_clear(&err);
    const qmla_engine *cuda = NULL;
    if (qmla_engine_find("cuda", &cuda, &err) || qmla_engine_ready(cuda, &err)) {
        fprintf(stderr, "bench_engine: %s\n", err.msg);
        return 77;
    }
    if (qmla_output_path_check(out, "benchmark file", &capture, 1, &err)) {
        fprintf(stderr, "bench_engine: %s\n", err.msg);
        return 2;
    }
    qmla_capture *cap = NULL;
    if (qmla_capture_open(capture, &cap, &err)) {
        fprintf(stderr, "bench_engine: %s\n", err.msg);
        return 2;
    }
    const qmla_capture_config *cfg = qmla_capture_get_config(cap);
    const qmla_mla_dims d = {(size_t)cfg->H,   (size_t)cfg->D,   (size_t)cfg->d_c,
                             (size_t)cfg->d_n, (size_t)cfg->d_r, (size_t)cfg->d_v,
                             cfg->softmax_scale};
    const double cpu_gemm = cpu_sgemm_rate(threads);
    const qmla_sweep_ops *eng[2] = {qmla_engine_sweep(cuda), qmla_engine_sweep(qmla_engine_cpu())};
    const qmla_sweep_params p = qmla_sweep_defaults();
    const qmla_exec ex = qmla_exec_cpu(threads);
    const size_t nl = qmla_capture_n_layers(cap) < (size_t)layers ? qmla_capture_n_layers(cap)
                                                                 : (size_t)layers;
    row *rows = (row *)calloc(2 * nl * 64 + 32, sizeof *rows);
    size_t nr = 0;
    double gpu_seq_s = 0.0, gpu_seqs = 0.0, cpu_seq_s = 0.0, cpu_seqs_n = 0.0;
    double gemm_logits = 0.0, gemm_proj = 0.0;
    size_t T_first = 0;
    int st = 0;
    for (size_t li = 0; li < nl && !st && !no_sweep; li++) {
        qmla_layer L;
        memset(&L, 0, sizeof L);
        if ((st = qmla_capture_load_layer(cap, li, &L, &err)))
            break;
        const qmla_mla_weights w = {L.w_uk, L.w_uv, L.w_o};
        for (size_t ci = 0; ci < qmla_capture_n_cells(cap, li) && ci < 64 && !st; ci++) {
            qmla_cell c;
            memset(&c, 0, sizeof c);
            if ((st = qmla_capture_load_cell_parts(cap, li, ci, 0, &c, &err)))
                break;
            const size_t T = c.T, N = c.N, H = d.H;
            if (!T_first) {
                T_first = T;
                gemm_logits = gpu_sgemm_rate(T, T, d.d_c, H);
                gemm_proj = gpu_sgemm_rate(T, d.D, H * d.d_v, 1);
            }
            qmla_response *res[2];
            res[0] = (qmla_response *)calloc(2 * N, sizeof(qmla_response));
            res[1] = (qmla_response *)calloc(2 * N, sizeof(qmla_response));
            size_t done[2] = {0, 0};
            for (int e = 0; e < 2 && !st; e++) {
                const size_t n_run = e == 0 ? N : (cpu_seqs < (int)N ? (size_t)cpu_seqs : N);
                if (n_run == 0)
                    continue;
                void *ws = NULL;
                if ((st = eng[e]->ws_alloc(&d, T, 0, &ws, &err)))
                    break;
#define SEQ(s, r)                                                                          \
    eng[e]->sequence(&ex, &p, &d, T, &w, c.q_nope + (s) * H * T * d.d_n,                 \
                     c.q_rope + (s) * H * T * d.d_r, c.c_kv + (s) * T * d.d_c,            \
                     c.k_rope + (s) * T * d.d_r, 0, ws, r, &err)
                if (e == 0) { /* warm-up: cuBLAS's first calls, the first copies */
                    qmla_response tmp[2];
                    st = SEQ(0, tmp);
                    eng[e]->layer_begin(ws);
                }
                if (e == 0)
                    prof_start();
                const double t0 = now();
                for (size_t s = 0; s < n_run && !st; s++)
                    st = SEQ(s, res[e] + 2 * s);
                const double el = now() - t0;
                if (e == 0)
                    prof_print("sweep", shape_tag(&d), el, (double)n_run);
#undef SEQ
                eng[e]->ws_free(ws);
                if (st)
                    break;
                done[e] = n_run;
                row *r = &rows[nr++];
                r->op = "sweep";
                r->layer = qmla_capture_layer_index(cap, li);
                snprintf(r->cell, sizeof r->cell, "%s", c.name);
                r->T = (int)T;
                r->N = (int)N;
                r->seqs_timed = (int)n_run;
                r->engine = e == 0 ? "cuda" : "cpu";
                r->s_seq = el / (double)n_run;
                r->s_cell = r->s_seq * (double)N;
                r->gflops = qmla_sweep_flops(&d, T) / r->s_seq / 1e9;
                r->max_rel = NAN;
                if (e == 0) {
                    gpu_seq_s += el;
                    gpu_seqs += (double)n_run;
                } else {
                    cpu_seq_s += el;
                    cpu_seqs_n += (double)n_run;
                }
            }
            if (!st && done[1]) {
                double m = 0.0;
                for (size_t s = 0; s < 2 * done[1]; s++) {
                    const double v = row_rel(&res[1][s], &res[0][s]);
                    m = v > m ? v : m;
                }
                rows[nr - 1].max_rel = rows[nr - 2].max_rel = m;
            }
            free(res[0]);
            free(res[1]);
            qmla_cell_free(&c);
        }
        qmla_layer_free(&L);
    }
    op_times tm;
    for (int e = 0; e < 2; e++)
        tm.jvp[e] = tm.predict[e] = tm.sens[e] = tm.iv[e] = NAN;
    if (!st && ops)
        st = bench_ops(cap, &d, cuda, threads, op_seqs < 0 ? 0 : (size_t)op_seqs,
                       iv_seqs < 0 ? 0 : (size_t)iv_seqs, cpu_op_seqs < 0 ? 0 : (size_t)cpu_op_seqs,
                       iv_reps < 0 ? 0 : (size_t)iv_reps, cpu_light, rows, &nr, &tm, &err);
    tf_times tt;
    memset(&tt, 0, sizeof tt);
    for (int e = 0; e < 2; e++)
        tt.eval[e] = tt.layer300[e] = NAN;
    if (!st && (learn_steps > 0 || do_eval))
        st = bench_tf(cap, &d, cuda, threads, learn_steps < 0 ? 0 : (size_t)learn_steps,
                      cpu_learn_steps < 0 ? 0 : (size_t)cpu_learn_steps, do_eval, cpu_eval, rows,
                      &nr, &tt, &err);
    double gemm_sens = 0.0;
    if (!st && ops && nr) {
        /* the sensitivities' pairwise product: [ni H, d_v] x [d_v, T] per head */
        const size_t T = (size_t)rows[nr - 1].T, H = d.H;
        const size_t ni = sens_rows(H);
        gemm_sens = gpu_sgemm_rate(ni * H, T, d.d_v, H);
        if (!T_first) {
            T_first = T;
            gemm_logits = gpu_sgemm_rate(T, T, d.d_c, H);
            gemm_proj = gpu_sgemm_rate(T, d.D, H * d.d_v, 1);
        }
    }
    if (st) {
        fprintf(stderr, "bench_engine: %s\n", err.msg);
        qmla_capture_close(cap);
        return 2;
    }
    const int v3 = d.H == 128 && d.D == 7168 && d.d_c == 512;
    const double study_items = 61.0 * 6.0 * 8.0;
    const double gpu_per_seq = gpu_seqs > 0 ? gpu_seq_s / gpu_seqs : NAN;
    const double cpu_per_seq = cpu_seqs_n > 0 ? cpu_seq_s / cpu_seqs_n : NAN;
    printf("device            %s\n", qmla_engine_device(cuda));
    printf("capture           %s (H %zu, D %zu, d_c %zu, d_r %zu, T %zu)\n", capture, d.H, d.D,
           d.d_c, d.d_r, T_first);
    printf("%-13s %-6s %-14s %6s %4s %-5s %5s %12s %12s %10s %10s\n", "op", "layer", "cell",
           "T", "N", "eng", "timed", "s/layercell", "s/seq", "GFLOP/s", "max_rel");
    for (size_t k = 0; k < nr; k++)
        printf("%-13s %-6d %-14s %6d %4d %-5s %5d %12.4f %12.5f %10.1f %10.2e\n", rows[k].op,
               rows[k].layer, rows[k].cell, rows[k].T, rows[k].N, rows[k].engine,
               rows[k].seqs_timed, rows[k].s_cell, rows[k].s_seq, rows[k].gflops,
               rows[k].max_rel);
    printf("cublas_sgemm_gflops logits %.1f (%zu x [%zu, %zu] x [%zu, %zu]), projection %.1f\n",
           gemm_logits, d.H, T_first, d.d_c, d.d_c, T_first, gemm_proj);
    printf("openblas_sgemm_gflops %.1f (2048^3, %d threads)\n", cpu_gemm, threads);
    if (ops)
        printf("cublas_sgemm_gflops sensitivities %.1f (%zu x [%zu, %zu] x [%zu, %zu])\n",
               gemm_sens, d.H, sens_rows(d.H) *
               d.H, d.d_v, d.d_v, T_first);
    printf("speedup_cuda_over_cpu %.1f (per sequence)\n", cpu_per_seq / gpu_per_seq);
    double study_s = NAN, predict_s = NAN, iv_s = NAN;
    if (ops) {
        printf("ops_speedup_cuda_over_cpu jvp %.1f predict %.1f sensitivities %.1f "
               "interventions %.1f (per sequence)\n",
               tm.jvp[1] / tm.jvp[0], tm.predict[1] / tm.predict[0], tm.sens[1] / tm.sens[0],
               tm.iv[1] / tm.iv[0]);
    }
    if (learn_steps > 0)
        printf("learn one layer, both paths, 300 steps (Table 7): cuda %.1f s, cpu %.1f s "
               "(projected from the timed steps); content step cuda %.4f s cpu %.4f s, rope step "
               "cuda %.4f s cpu %.4f s\n",
               tt.layer300[0], tt.layer300[1], tt.step[0][0], tt.step[1][0], tt.step[0][1],
               tt.step[1][1]);
    if (do_eval)
        printf("eval one layer-cell: cuda %.3f s cpu %.3f s (speedup %.1f)\n", tt.eval[0],
               tt.eval[1], tt.eval[1] / tt.eval[0]);
    if (v3) {
        study_s = gpu_per_seq * study_items;
        if (!no_sweep)
            printf("extrapolated DeepSeek-V3 sweep study (61 x 6 x 8 sequences of T %zu): %.1f s "
                   "on the GPU\n",
                   T_first, study_s);
        if (ops) {
            /* predict: every layer-cell-sequence; interventions: Table 6's 4
             * layer-cells x 8 sequences at iv_reps repetitions */
            predict_s = tm.predict[0] * study_items;
            iv_s = tm.iv[0] * 4.0 * 8.0;
            printf("extrapolated DeepSeek-V3 predict study (61 x 6 x 8 sequences): %.1f s on the "
                   "GPU; interventions (4 layer-cells x 8 sequences, %d reps): %.1f s\n",
                   predict_s, iv_reps, iv_s);
        }
    }
    {
        char cmd[4096] = "";
        for (int k = 0, w = 0; k < argc && w < (int)sizeof cmd - 2; k++)
            w += snprintf(cmd + w, sizeof cmd - (size_t)w, "%s%s", k ? " " : "", argv[k]);
        const char *names[] = {"cublas_sgemm_gflops_logits", "cublas_sgemm_gflops_projection",
                               "openblas_sgemm_gflops", "cpu_threads",
                               "gpu_seconds_per_sequence", "cpu_seconds_per_sequence",
                               "v3_sweep_study_seconds_extrapolated",
                               "v3_predict_study_seconds_extrapolated",
                               "v3_interventions_study_seconds_extrapolated",
                               "cublas_sgemm_gflops_sensitivities",
                               "learn_layer_300_steps_seconds_cuda",
                               "learn_layer_300_steps_seconds_cpu", "eval_cell_seconds_cuda",
                               "eval_cell_seconds_cpu"};
        const double vals[] = {gemm_logits,    gemm_proj,      cpu_gemm,    (double)threads,
                               gpu_per_seq,    cpu_per_seq,    study_s,     predict_s,
                               iv_s,           gemm_sens,      tt.layer300[0], tt.layer300[1],
                               tt.eval[0],     tt.eval[1]};
        if ((st = write_h5(out, capture, cmd, qmla_engine_device(cuda), names, vals, 14, rows,
                           nr, &err))) {
            fprintf(stderr, "bench_engine: %s\n", err.msg);
            qmla_capture_close(cap);
            return 2;
        }
    }
    printf("wrote %s\n", out);
    qmla_capture_close(cap);
    free(rows);
    return 0;
}
