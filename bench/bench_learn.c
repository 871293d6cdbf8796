/* bench_learn.c — time per learning step of both paths for one layer of
 * the trained tiny model's shape (H 8, D 320, d_c 256, d_n 64, d_r 64,
 * d_v 64), random tensors of that shape (xorshift, fixed seed), a train
 * bank of NSEQ sequences of T tokens and no held-out bank, and the split of
 * the time (forward, backward, QDQ, Cayley solve). Growth: T in {128, 256,
 * 512} at d_c 256, and d_c in {128, 256, 512} at T 512.
 *
 *   build/bench/bench_learn [STEPS=10] [THREADS=2] [NSEQ=8] [REFSTEPS=3] [T,D_C]
 *
 * Prints one line per configuration: seconds per step for each path and the
 * projected time of 300 steps of both paths; then, in the same run, the
 * content path's reference implementation (qmla_learn_opts.attn_reference:
 * absorbed form, full T×T backward products) for REFSTEPS steps and the
 * speed-up of the default path over it (0 skips the reference). T,D_C runs
 * that one configuration only. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qmla/learn.h"

static uint64_t rs = 88172645463325252ULL;
static double unif(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return ((double)(rs >> 11) + 0.5) / 9007199254740992.0;
}
static float *fill(size_t n, double sd, double mean)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(mean + sd * sqrt(-2 * log(unif())) * cos(6.283185307179586 * unif()));
    return x;
}

/* Process CPU seconds (all threads): on a shared machine the wall time
 * depends on the other load; CPU time / threads is what the same work takes
 * on dedicated cores when the threads are kept busy. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void run(size_t T, size_t dc, size_t steps, int threads, size_t nseq, size_t refsteps)
{
    qmla_mla_dims d = {8, 320, dc, 64, 64, 64, 0.0883883};
    float *w_uk = fill(d.H * d.d_n * dc, 1 / sqrt(64.0), 0), *w_uv = fill(d.H * d.d_v * dc, 1 / sqrt((double)dc), 0);
    float *w_o = fill(d.D * d.H * d.d_v, 1 / sqrt(512.0), 0), *gamma = fill(dc, 0.3, 1.0);
    qmla_mla_weights w = {w_uk, w_uv, w_o};
    size_t *Ts = malloc(nseq * sizeof *Ts);
    const float **C = malloc(nseq * sizeof *C), **K = malloc(nseq * sizeof *K);
    const float **qn = malloc(nseq * sizeof *qn), **qr = malloc(nseq * sizeof *qr);
    for (size_t k = 0; k < nseq; k++) {
        Ts[k] = T;
        C[k] = fill(T * dc, 1, 0.2);
        K[k] = fill(T * d.d_r, 1, 0);
        qn[k] = fill(d.H * T * d.d_n, 1, 0);
        qr[k] = fill(d.H * T * d.d_r, 1, 0);
    }
    qmla_learn_bank b = {nseq, Ts, C, K, qn, qr};
    double per[3] = {0, 0, 0}, cpu[3] = {0, 0, 0};
    qmla_learn_state ls[3];
    for (int p = 0; p < (refsteps ? 3 : 2); p++) {
        qmla_learn_opts o = qmla_learn_defaults();
        size_t ns = p == 2 ? refsteps : steps;
        o.steps = ns;
        o.threads = threads;
        o.attn_reference = p == 2;
        qmla_error err;
        qmla_learner *l = NULL;
        if (qmla_learner_alloc(p == 2 ? QMLA_LEARN_CONTENT : (qmla_learn_path)p, &d, &w, gamma, QMLA_ROPE_INTERLEAVED, &b, NULL, &o, &l, &err)) {
            fprintf(stderr, "bench_learn: %s\n", err.msg);
            exit(1);
        }
        double t0 = omp_get_wtime(), c0 = cpu_now();
        for (size_t s = 0; s < ns; s++)
            if (qmla_learner_iterate(l, &err)) {
                fprintf(stderr, "bench_learn: %s\n", err.msg);
                exit(1);
            }
        per[p] = (omp_get_wtime() - t0) / (double)ns;
        cpu[p] = (cpu_now() - c0) / (double)ns;
        ls[p] = qmla_learner_state(l);
        qmla_learner_free(l);
    }
    /* the split is summed over threads (per-sequence work) plus the serial
     * Cayley time; shown as fractions of their sum */
    double tot = ls[0].t_forward + ls[0].t_backward + ls[0].t_qdq + ls[0].t_cayley;
    printf("T %4zu d_c %3zu: content %.3f s/step, cpu %.3f s (fwd %2.0f%%, bwd %2.0f%%, qdq %2.0f%%, cayley %2.0f%%), "
           "rope %.4f s/step, cpu %.4f s; 300 steps both: %.1f s wall, %.1f s cpu/%d\n",
           T, dc, per[0], cpu[0], 100 * ls[0].t_forward / tot, 100 * ls[0].t_backward / tot, 100 * ls[0].t_qdq / tot,
           100 * ls[0].t_cayley / tot, per[1], cpu[1], 300 * (per[0] + per[1]), 300 * (cpu[0] + cpu[1]) / threads,
           threads);
    if (refsteps) {
        double rt = ls[2].t_forward + ls[2].t_backward + ls[2].t_qdq + ls[2].t_cayley;
        printf("             reference content %.3f s/step, cpu %.3f s (fwd %2.0f%%, bwd %2.0f%%, qdq %2.0f%%, cayley %2.0f%%); "
               "speed-up %.2fx wall, %.2fx cpu\n",
               per[2], cpu[2], 100 * ls[2].t_forward / rt, 100 * ls[2].t_backward / rt, 100 * ls[2].t_qdq / rt,
               100 * ls[2].t_cayley / rt, per[2] / per[0], cpu[2] / cpu[0]);
    }
    fflush(stdout);
    for (size_t k = 0; k < nseq; k++) {
        free((void *)C[k]); free((void *)K[k]); free((void *)qn[k]); free((void *)qr[k]);
    }
    free(C); free(K); free(qn); free(qr); free(Ts);
    free(w_uk); free(w_uv); free(w_o); free(gamma);
}

int main(int argc, char **argv)
{
    size_t steps = argc > 1 ? (size_t)atol(argv[1]) : 10;
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    size_t nseq = argc > 3 ? (size_t)atol(argv[3]) : 8;
    size_t refsteps = argc > 4 ? (size_t)atol(argv[4]) : 3;
    qmla_blas_set_threads(1);
    printf("bench_learn: %zu steps per path (reference: %zu), %d threads, %zu train sequences\n", steps, refsteps,
           threads, nseq);
    if (argc > 5) {
        size_t T = 0, dc = 0;
        if (sscanf(argv[5], "%zu,%zu", &T, &dc) != 2 || T == 0 || dc < 2) {
            fprintf(stderr, "bench_learn: expected T,D_C (e.g. 512,256), found \"%s\"\n", argv[5]);
            return 2;
        }
        run(T, dc, steps, threads, nseq, refsteps);
        return 0;
    }
    run(128, 256, steps, threads, nseq, refsteps);
    run(256, 256, steps, threads, nseq, refsteps);
    run(512, 256, steps, threads, nseq, refsteps);
    run(512, 128, steps, threads, nseq, refsteps);
    run(512, 512, steps, threads, nseq, refsteps);
    return 0;
}
