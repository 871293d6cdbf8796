/* bench_sweep.c — throughput of the matched-NMSE sweep on a capture, side
 * by side with the rate of a large OpenBLAS sgemm measured in the same run.
 *
 *   bench_sweep CAPTURE.h5 [THREADS] [RESULTS.h5]
 *
 * Prints seconds per layer-cell, useful GFLOP/s (qmla_sweep_flops: causal
 * half of the attention products) and that rate as a fraction of sgemm's
 * (2048^3, OpenBLAS with THREADS threads, best of 5). bench/run.sh runs it
 * next to the NumPy implementation of the same protocol. */
#include "qmla/capture.h"
#include "qmla/outpath.h"
#include "qmla/sweep.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);
char *openblas_get_config(void);

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double sgemm_rate(int threads)
{
    const int n = 2048;
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n),
          *c = malloc(sizeof(float) * n * n);
    for (long i = 0; i < (long)n * n; i++) {
        a[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        b[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
    }
    openblas_set_num_threads(threads);
    double best = 1e30;
    for (int r = 0; r < 6; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n,
                    b, n, 0.0f, c, n);
        double t = now() - t0;
        if (r > 0 && t < best)
            best = t;
    }
    free(a);
    free(b);
    free(c);
    /* Back to one thread per BLAS call before the sweep: qmla parallelises
     * its own loops and calls BLAS inside them (qmla/exec.h). Left at
     * `threads`, every sweep GEMM ran multi-threaded inside each OpenMP
     * thread (oversubscribed; 1.25-1.4x slower at 2 threads) -- the sweep
     * reset it itself until 91d544f moved that to program start-up. */
    qmla_blas_set_threads(1);
    return 2.0 * n * n * (double)n / best / 1e9;
}

int main(int argc, char **argv)
{
    qmla_blas_set_threads(1); /* as the qmla program does */
    if (argc < 2) {
        fprintf(stderr, "usage: bench_sweep CAPTURE.h5 [THREADS] [RESULTS.h5]\n");
        return 2;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    if (threads < 1)
        threads = 1;
    char out[4096];
    snprintf(out, sizeof out, "%s", argc > 3 ? argv[3] : "/tmp/qmla-bench-results.h5");
    qmla_error err;
    qmla_error_clear(&err);
    /* it unlinks and rewrites `out`: never the capture, a device, a FIFO */
    char jpath[4200];
    snprintf(jpath, sizeof jpath, "%s.journal", out);
    const char *in = argv[1];
    if (qmla_output_path_check(out, "results file", &in, 1, &err) ||
        qmla_output_path_check(jpath, "journal", &in, 1, &err)) {
        fprintf(stderr, "bench_sweep: %s\n", err.msg);
        return 2;
    }
    qmla_capture *cap = NULL;
    if (qmla_capture_open(argv[1], &cap, &err)) {
        fprintf(stderr, "bench_sweep: %s\n", err.msg);
        return 2;
    }
    const qmla_capture_config *cfg = qmla_capture_get_config(cap);
    const double gemm = sgemm_rate(threads);

    size_t layer_cells = 0;
    double flops = 0.0;
    const qmla_mla_dims d = {(size_t)cfg->H, (size_t)cfg->D, (size_t)cfg->d_c,
                             (size_t)cfg->d_n, (size_t)cfg->d_r, (size_t)cfg->d_v,
                             cfg->softmax_scale};
    for (size_t li = 0; li < qmla_capture_n_layers(cap); li++)
        for (size_t ci = 0; ci < qmla_capture_n_cells(cap, li); ci++) {
            layer_cells++;
            flops += (double)qmla_capture_cell_n(cap, li, ci) *
                     qmla_sweep_flops(&d, qmla_capture_cell_t(cap, li, ci));
        }
    qmla_sweep_opts o;
    memset(&o, 0, sizeof o);
    o.params = qmla_sweep_defaults();
    o.threads = threads;
    o.force = 1;
    unlink(out);
    qmla_summary s;
    int stopped = 0;
    const double t0 = now();
    int st = qmla_sweep_run(cap, NULL, &o, out, &s, &stopped, &err);
    const double el = now() - t0;
    if (st) {
        fprintf(stderr, "bench_sweep: %s\n", err.msg);
        qmla_capture_close(cap);
        return 2;
    }
    qmla_summary_free(&s);
    qmla_capture_close(cap);
    const double rate = flops / el / 1e9;
    printf("threads                   %d\n", threads);
    printf("layer-cells               %zu (H %d, d_c %d, d_r %d, D %d)\n", layer_cells,
           cfg->H, cfg->d_c, cfg->d_r, cfg->D);
    printf("qmla_seconds_per_layer_cell %.4f\n", el / (double)layer_cells);
    printf("qmla_useful_gflops        %.1f\n", rate);
    printf("sgemm_gflops              %.1f  (2048^3, OpenBLAS, %d threads)\n", gemm,
           threads);
    printf("fraction_of_sgemm         %.3f\n", rate / gemm);
    printf("openblas                  %s (core %s)\n", openblas_get_config(),
           openblas_get_corename());
    return 0;
}
