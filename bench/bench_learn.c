/* bench_learn.c — time per learning step of both paths for one layer of
 * the trained tiny model's shape (H 8, D 320, d_c 256, d_n 64, d_r 64,
 * d_v 64), random tensors of that shape (xorshift, fixed seed), a train
 * bank of NSEQ sequences of T tokens and no held-out bank, and the split of
 * the time (forward, backward, QDQ, Cayley solve). Growth: T in {128, 256,
 * 512} at d_c 256, and d_c in {128, 256, 512} at T 512.
 *
 *   build/bench/bench_learn [STEPS=10] [THREADS=2] [NSEQ=8]
 *
 * Prints one line per configuration: seconds per step for each path and the
 * projected time of 300 steps of both paths. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void run(size_t T, size_t dc, size_t steps, int threads, size_t nseq)
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
    double per[2] = {0, 0};
    qmla_learn_state ls[2];
    for (int p = 0; p < 2; p++) {
        qmla_learn_opts o = qmla_learn_defaults();
        o.steps = steps;
        o.threads = threads;
        qmla_error err;
        qmla_learner *l = NULL;
        if (qmla_learner_alloc((qmla_learn_path)p, &d, &w, gamma, QMLA_ROPE_INTERLEAVED, &b, NULL, &o, &l, &err)) {
            fprintf(stderr, "bench_learn: %s\n", err.msg);
            exit(1);
        }
        double t0 = omp_get_wtime();
        for (size_t s = 0; s < steps; s++)
            if (qmla_learner_iterate(l, &err)) {
                fprintf(stderr, "bench_learn: %s\n", err.msg);
                exit(1);
            }
        per[p] = (omp_get_wtime() - t0) / (double)steps;
        ls[p] = qmla_learner_state(l);
        qmla_learner_free(l);
    }
    /* the split is summed over threads (per-sequence work) plus the serial
     * Cayley time; shown as fractions of their sum */
    double tot = ls[0].t_forward + ls[0].t_backward + ls[0].t_qdq + ls[0].t_cayley;
    printf("T %4zu d_c %3zu: content %.3f s/step (fwd %2.0f%%, bwd %2.0f%%, qdq %2.0f%%, cayley %2.0f%%), "
           "rope %.4f s/step; 300 steps both: %.1f s\n",
           T, dc, per[0], 100 * ls[0].t_forward / tot, 100 * ls[0].t_backward / tot, 100 * ls[0].t_qdq / tot,
           100 * ls[0].t_cayley / tot, per[1], 300 * (per[0] + per[1]));
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
    qmla_blas_set_threads(1);
    printf("bench_learn: %zu steps per path, %d threads, %zu train sequences\n", steps, threads, nseq);
    run(128, 256, steps, threads, nseq);
    run(256, 256, steps, threads, nseq);
    run(512, 256, steps, threads, nseq);
    run(512, 128, steps, threads, nseq);
    run(512, 512, steps, threads, nseq);
    return 0;
}
