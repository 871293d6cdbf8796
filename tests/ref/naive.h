/* tests/ref/naive.h — a naive double-precision MLA reference for the tests,
 * written independently of lib/: non-absorbed form (explicit per-head keys
 * and values), plain loops, its own random numbers (xorshift + Box-Muller).
 *
 *   k_nope[h] = C w_uk[h]^T        [T, d_n]
 *   v[h]      = C w_uv[h]^T        [T, d_v]
 *   z[h][i][s] = tau (q_nope[h][i]·k_nope[h][s] + q_rope[h][i]·K[s]), s <= i
 *   a = causal softmax(z), o[h] = a v[h], y = concat_h(o[h]) w_o^T
 */
#ifndef QMLA_TESTS_NAIVE_H
#define QMLA_TESTS_NAIVE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct naive_case {
    size_t H, T, dc, dn, dr, dv, D;
    double tau;
    float *w_uk, *w_uv, *w_o; /* [H,dn,dc] [H,dv,dc] [D,H*dv] */
    float *C, *K, *q_nope, *q_rope; /* [T,dc] [T,dr] [H,T,dn] [H,T,dr] */
} naive_case;

static uint64_t naive_rng_state;

static double naive_uniform(void)
{
    uint64_t x = naive_rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    naive_rng_state = x;
    return ((double)(x >> 11) + 0.5) / 9007199254740992.0;
}

static double naive_gauss(void)
{
    double u = naive_uniform(), v = naive_uniform();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static float *naive_fill(size_t n, double sigma, double mean)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(mean + sigma * naive_gauss());
    return x;
}

static inline void naive_case_init(naive_case *c, size_t H, size_t T, size_t dc,
                                   size_t dn, size_t dr, size_t dv, size_t D,
                                   unsigned seed)
{
    naive_rng_state = 0x9E3779B97F4A7C15ULL ^ ((uint64_t)seed * 0x100000001B3ULL);
    if (!naive_rng_state)
        naive_rng_state = 1;
    c->H = H; c->T = T; c->dc = dc; c->dn = dn; c->dr = dr; c->dv = dv; c->D = D;
    c->tau = 1.0 / sqrt((double)(dn + dr));
    c->w_uk = naive_fill(H * dn * dc, 1.0 / sqrt((double)dn), 0.0);
    c->w_uv = naive_fill(H * dv * dc, 1.0 / sqrt((double)dc), 0.0);
    c->w_o = naive_fill(D * H * dv, 1.0 / sqrt((double)(H * dv)), 0.0);
    c->C = naive_fill(T * dc, 1.0, 0.3); /* an offset, as real latents have */
    c->K = naive_fill(T * dr, 1.0, 0.0);
    c->q_nope = naive_fill(H * T * dn, 1.0, 0.0);
    c->q_rope = naive_fill(H * T * dr, 1.0, 0.0);
}

static inline void naive_case_free(naive_case *c)
{
    free(c->w_uk); free(c->w_uv); free(c->w_o);
    free(c->C); free(c->K); free(c->q_nope); free(c->q_rope);
    memset(c, 0, sizeof *c);
}

/* Attention probabilities in double: A [H, T, T] (zeros above diagonal),
 * for caches C [T,dc], K [T,dr] (any, e.g. perturbed). */
static inline void naive_attention(const naive_case *c, const float *C,
                                   const float *K, double *A)
{
    const size_t H = c->H, T = c->T, dc = c->dc, dn = c->dn, dr = c->dr;
    double *kn = malloc(T * dn * sizeof *kn);
    for (size_t h = 0; h < H; h++) {
        for (size_t s = 0; s < T; s++)
            for (size_t n = 0; n < dn; n++) {
                double acc = 0;
                for (size_t j = 0; j < dc; j++)
                    acc += (double)C[s * dc + j] * c->w_uk[(h * dn + n) * dc + j];
                kn[s * dn + n] = acc;
            }
        for (size_t i = 0; i < T; i++) {
            double *a = A + (h * T + i) * T, m = -INFINITY, sum = 0;
            for (size_t s = 0; s < T; s++) {
                if (s > i) {
                    a[s] = 0;
                    continue;
                }
                double z = 0;
                for (size_t n = 0; n < dn; n++)
                    z += (double)c->q_nope[(h * T + i) * dn + n] * kn[s * dn + n];
                for (size_t r = 0; r < dr; r++)
                    z += (double)c->q_rope[(h * T + i) * dr + r] * K[s * dr + r];
                a[s] = c->tau * z;
                m = fmax(m, a[s]);
            }
            for (size_t s = 0; s <= i; s++) {
                a[s] = exp(a[s] - m);
                sum += a[s];
            }
            for (size_t s = 0; s <= i; s++)
                a[s] /= sum;
        }
    }
    free(kn);
}

/* Output for given attention A [H,T,T] aggregating the latent X [T,dc]
 * (values v = X w_uv^T): Y [T, D]. */
static inline void naive_output(const naive_case *c, const double *A,
                                const double *X, double *Y)
{
    const size_t H = c->H, T = c->T, dc = c->dc, dv = c->dv, D = c->D;
    double *v = malloc(T * dv * sizeof *v), *o = malloc(T * H * dv * sizeof *o);
    for (size_t h = 0; h < H; h++) {
        for (size_t s = 0; s < T; s++)
            for (size_t e = 0; e < dv; e++) {
                double acc = 0;
                for (size_t j = 0; j < dc; j++)
                    acc += X[s * dc + j] * c->w_uv[(h * dv + e) * dc + j];
                v[s * dv + e] = acc;
            }
        for (size_t i = 0; i < T; i++)
            for (size_t e = 0; e < dv; e++) {
                double acc = 0;
                for (size_t s = 0; s <= i; s++)
                    acc += A[(h * T + i) * T + s] * v[s * dv + e];
                o[i * H * dv + h * dv + e] = acc;
            }
    }
    for (size_t i = 0; i < T; i++)
        for (size_t k = 0; k < D; k++) {
            double acc = 0;
            for (size_t j = 0; j < H * dv; j++)
                acc += o[i * H * dv + j] * c->w_o[k * H * dv + j];
            Y[i * D + k] = acc;
        }
    free(v);
    free(o);
}

static inline double *naive_widen(const float *x, size_t n)
{
    double *y = malloc((n ? n : 1) * sizeof *y);
    for (size_t i = 0; i < n; i++)
        y[i] = x[i];
    return y;
}

/* Clean forward: Y [T,D] in double; A (optional) receives the attention. */
static inline void naive_forward(const naive_case *c, const float *C,
                                 const float *K, double *Y, double *A_out)
{
    const size_t H = c->H, T = c->T;
    double *A = A_out ? A_out : malloc(H * T * T * sizeof *A);
    double *X = naive_widen(C, T * c->dc);
    naive_attention(c, C, K, A);
    naive_output(c, A, X, Y);
    free(X);
    if (!A_out)
        free(A);
}

static inline double naive_sumsq(const double *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += x[i] * x[i];
    return s;
}

#endif
