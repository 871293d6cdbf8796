/* bench_operator.c — exact token sensitivities (lib/operator/jvp.c) against the
 * matched-NMSE sweep, side by side in one run.
 *
 *   bench_operator CAPTURE.h5 [THREADS] [GROWTH_T_LIST]
 *
 * 1. Layer-cell: `qmla sweep`'s driver (qmla_sweep_run) on the first
 *    layer-cell of CAPTURE, then the exact sensitivities of every token of
 *    every sequence, both paths (layer constants + clean pass + the
 *    pairwise route), on the same layer-cell; seconds, useful GFLOP/s
 *    (qmla_sweep_flops, qmla_sens_flops) and the ratio (target <= 4).
 * 2. Hutchinson: one Rademacher probe of every token costs T single-token
 *    JVPs; its cost per probe is timed on 16 tokens spread over the
 *    sequence and scaled to T, and the probes needed for a 5 % relative
 *    standard error per token are estimated from 16 probes on those tokens
 *    (median over tokens of (sd/mean / 0.05)^2).
 * 3. Growth in T: one random sequence of the capture's shape (weights of
 *    the capture's first layer, Gaussian caches and queries, seed 1) per T of
 *    GROWTH_T_LIST (default 256,512,1024,2048): seconds of one sweep
 *    sequence and of the exact sensitivities, and their ratio.
 * bench/run_operator.sh makes the DeepSeek-V2-Lite-shaped capture and runs
 * this next to the NumPy implementation (bench/numpy_operator.py). */
#include "qmla/capture.h"
#include "qmla/jvp.h"
#include "qmla/norms.h"
#include "qmla/sweep.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rs = 88172645463325252ULL;
static float gauss(void)
{
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    double u = ((double)(rs >> 11) + 0.5) / 9007199254740992.0;
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    double v = ((double)(rs >> 11) + 0.5) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static float *fill(size_t n, float s)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = s * gauss();
    return x;
}

#define DIE(...) do { fprintf(stderr, "bench_operator: " __VA_ARGS__); fputc('\n', stderr); exit(2); } while (0)

int main(int argc, char **argv)
{
    qmla_blas_set_threads(1);
    if (argc < 2)
        DIE("usage: bench_operator CAPTURE.h5 [THREADS] [GROWTH_T_LIST]");
    const int threads = argc > 2 && atoi(argv[2]) > 0 ? atoi(argv[2]) : 1;
    const char *growth = argc > 3 ? argv[3] : "256,512,1024,2048";
    const qmla_exec ex = qmla_exec_cpu(threads);
    qmla_error err;
    qmla_error_clear(&err);
    qmla_capture *cap = NULL;
    if (qmla_capture_open(argv[1], &cap, &err))
        DIE("%s", err.msg);
    const qmla_capture_config *cfg = qmla_capture_get_config(cap);
    const qmla_mla_dims d = {(size_t)cfg->H, (size_t)cfg->D, (size_t)cfg->d_c,
                             (size_t)cfg->d_n, (size_t)cfg->d_r, (size_t)cfg->d_v,
                             cfg->softmax_scale};
    const size_t N = qmla_capture_cell_n(cap, 0, 0), T = qmla_capture_cell_t(cap, 0, 0);
    const size_t H = d.H;

    /* 1. the sweep on the first layer-cell, through its driver */
    int lay0 = qmla_capture_layer_index(cap, 0);
    const char *cell0 = qmla_capture_cell_name(cap, 0, 0);
    qmla_sweep_selection sel = {&lay0, 1, &cell0, 1};
    qmla_sweep_opts o;
    memset(&o, 0, sizeof o);
    o.params = qmla_sweep_defaults();
    o.threads = threads;
    o.force = 1;
    char out[] = "/tmp/qmla-bench-operator.h5";
    unlink(out);
    qmla_summary s;
    int stopped = 0;
    double t0 = now();
    if (qmla_sweep_run(cap, &sel, &o, out, &s, &stopped, &err))
        DIE("%s", err.msg);
    const double t_sweep = now() - t0;
    qmla_summary_free(&s);
    unlink(out);

    /* ... and the exact sensitivities of the same layer-cell */
    qmla_layer layer;
    qmla_cell cell;
    if (qmla_capture_load_layer(cap, 0, &layer, &err) ||
        qmla_capture_load_cell_parts(cap, 0, 0, 0, &cell, &err))
        DIE("%s", err.msg);
    const qmla_mla_weights w = {layer.w_uk, layer.w_uv, layer.w_o};
    qmla_attn_state st;
    qmla_sens_ws sw;
    qmla_sens_layer L;
    double *trc = malloc(T * sizeof *trc), *trr = malloc(T * sizeof *trr);
    if (qmla_attn_state_alloc(&d, T, 0, &st, &err) ||
        qmla_sens_ws_alloc(&d, T, threads, &sw, &err))
        DIE("%s", err.msg);
    t0 = now();
    if (qmla_sens_layer_init(&ex, &d, &w, &L, &err))
        DIE("%s", err.msg);
    for (size_t q = 0; q < N; q++) {
        if (qmla_attn_state_forward(&ex, &d, T, &w, cell.q_nope + q * H * T * d.d_n,
                                    cell.q_rope + q * H * T * d.d_r,
                                    cell.c_kv + q * T * d.d_c, cell.k_rope + q * T * d.d_r,
                                    &st, &err) ||
            qmla_sens_exact(&ex, &d, T, &w, &L, &st, cell.c_kv + q * T * d.d_c, &sw, trc,
                            trr, &err))
            DIE("%s", err.msg);
    }
    const double t_sens = now() - t0;
    const double f_sweep = (double)N * qmla_sweep_flops(&d, T);
    const double f_sens = (double)N * qmla_sens_flops(&d, T);
    printf("shape                     H %zu, d_c %zu, d_r %zu, d_v %zu, D %zu; T %zu, N %zu; %d threads\n",
           H, d.d_c, d.d_r, d.d_v, d.D, T, N, threads);
    printf("sweep_seconds_layer_cell  %.3f  (%.1f GFLOP/s useful)\n", t_sweep, f_sweep / t_sweep / 1e9);
    printf("sens_seconds_layer_cell   %.3f  (%.1f GFLOP/s useful; all %zu tokens x %zu seqs, both paths)\n",
           t_sens, f_sens / t_sens / 1e9, T, N);
    printf("sens_over_sweep           %.2f  (target <= 4)\n", t_sens / t_sweep);

    /* 2. Hutchinson on the last sequence's clean pass (still in st) */
    {
        qmla_jvp_ws jw;
        if (qmla_jvp_ws_alloc(&d, T, &jw, &err))
            DIE("%s", err.msg);
        const size_t nt = 16 < T ? 16 : T, P = 16;
        float *r = malloc(d.d_c * sizeof *r);
        double tsum = 0.0, cvs[16], zmax = 0.0;
        size_t within2 = 0;
        const float *Cq = cell.c_kv + (N - 1) * T * d.d_c;
        for (size_t k = 0; k < nt; k++) {
            const size_t t = k * T / nt;
            double m = 0, m2 = 0;
            for (size_t p = 0; p < P; p++) {
                for (size_t j = 0; j < d.d_c; j++)
                    r[j] = (rs = rs * 6364136223846793005ULL + 1442695040888963407ULL) >> 63 ? 1.0f : -1.0f;
                const double a = now();
                const double v = qmla_jvp_token(&ex, &d, T, &w, &st, Cq, QMLA_JVP_CONTENT, t,
                                                r, &jw) / (double)d.d_c;
                tsum += now() - a;
                m += v;
                m2 += v * v;
            }
            m /= (double)P;
            const double sd = sqrt(fmax(m2 / (double)P - m * m, 0.0) * (double)P / (double)(P - 1));
            cvs[k] = m > 0 ? sd / m : 0.0;
            /* the exact value of this token (trc: the last sequence) */
            const double z = fabs(m - trc[t]) / (sd / sqrt((double)P) + 1e-300);
            zmax = z > zmax ? z : zmax;
            within2 += z <= 2.0;
        }
        /* median of (cv/0.05)^2 */
        for (size_t a = 0; a < nt; a++)
            for (size_t b = a + 1; b < nt; b++)
                if (cvs[b] < cvs[a]) { double x = cvs[a]; cvs[a] = cvs[b]; cvs[b] = x; }
        const double cv = nt % 2 ? cvs[nt / 2] : 0.5 * (cvs[nt / 2 - 1] + cvs[nt / 2]);
        const double per_probe = tsum / (double)(nt * P) * (double)T; /* all tokens, content */
        const double need = ceil(cv * cv / 0.0025);
        const double exact_per_seq = t_sens / (double)N;
        printf("hutchinson_seconds_per_probe %.3f  (content path, all %zu tokens; timed on %zu tokens x %zu probes)\n",
               per_probe, T, nt, P);
        printf("hutchinson_probes_for_5pct  %.0f  (median per-token sd/mean %.3f of one probe)\n", need, cv);
        printf("hutchinson_vs_exact       %zu of %zu tokens within 2 SE, worst %.2f SE (%zu probes, content)\n",
               within2, nt, zmax, P);
        printf("hutchinson_probes_in_exact_time %.2f  (content path; exact: %.3f s per sequence, both paths)\n",
               exact_per_seq / per_probe, exact_per_seq);
        free(r);
        qmla_jvp_ws_free(&jw);
    }
    qmla_cell_free(&cell);
    qmla_attn_state_free(&st);
    qmla_sens_ws_free(&sw);
    free(trc);
    free(trr);

    /* 3. growth in T, one sequence each */
    printf("\n%6s %12s %12s %8s %14s\n", "T", "sweep_s", "sens_s", "ratio", "sens_GFLOP/s");
    char buf[256];
    snprintf(buf, sizeof buf, "%s", growth);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        const size_t Tg = (size_t)atol(tok);
        if (Tg == 0)
            continue;
        rs = 88172645463325252ULL;
        float *qn = fill(H * Tg * d.d_n, 1.0f), *qr = fill(H * Tg * d.d_r, 1.0f);
        float *C = fill(Tg * d.d_c, 1.0f), *K = fill(Tg * d.d_r, 1.0f);
        qmla_sweep_ws ws;
        qmla_attn_state s2;
        qmla_sens_ws sw2;
        if (qmla_sweep_ws_alloc(&d, Tg, 0, &ws, &err) ||
            qmla_attn_state_alloc(&d, Tg, 0, &s2, &err) ||
            qmla_sens_ws_alloc(&d, Tg, threads, &sw2, &err))
            DIE("%s", err.msg);
        double *a = malloc(Tg * sizeof *a), *b = malloc(Tg * sizeof *b);
        qmla_response resp[2];
        qmla_sweep_params sp = qmla_sweep_defaults();
        t0 = now();
        if (qmla_sweep_sequence(&ex, &sp, &d, Tg, &w, qn, qr, C, K, 0, &ws, resp, &err))
            DIE("%s", err.msg);
        const double ts = now() - t0;
        t0 = now();
        if (qmla_attn_state_forward(&ex, &d, Tg, &w, qn, qr, C, K, &s2, &err) ||
            qmla_sens_exact(&ex, &d, Tg, &w, &L, &s2, C, &sw2, a, b, &err))
            DIE("%s", err.msg);
        const double te = now() - t0;
        printf("%6zu %12.3f %12.3f %8.2f %14.1f\n", Tg, ts, te, te / ts,
               qmla_sens_flops(&d, Tg) / te / 1e9);
        fflush(stdout);
        qmla_sweep_ws_free(&ws);
        qmla_attn_state_free(&s2);
        qmla_sens_ws_free(&sw2);
        free(qn); free(qr); free(C); free(K); free(a); free(b);
    }
    qmla_sens_layer_free(&L);
    qmla_layer_free(&layer);
    qmla_capture_close(cap);
    return 0;
}
