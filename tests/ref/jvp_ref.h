/* tests/ref/jvp_ref.h — double-precision references for the JVP tests, written
 * independently of lib/: the non-absorbed MLA forward on double caches
 * (explicit per-head keys k_nope = C w_uk^T and values v = C w_uv^T), and
 * central finite differences of it:
 *   directional:  (f(X + h V) - f(X - h V)) / (2h)
 *   column (t,j): the same with V the unit vector at row t, column j,
 * from which the brute-force token traces tr(J_t^T J_t) = sum_j ||J e_tj||^2
 * follow. Truncation error O(h^2) (h = 1e-5 relative to the cache scale). */
#ifndef QMLA_TESTS_JVP_REF_H
#define QMLA_TESTS_JVP_REF_H

#include "naive.h"

/* Y [T, D] for double caches C [T, dc], K [T, dr]. */
static inline void ref_forward_d(const naive_case *c, const double *C,
                                 const double *K, double *Y)
{
    const size_t H = c->H, T = c->T, dc = c->dc, dn = c->dn, dr = c->dr;
    const size_t dv = c->dv, D = c->D;
    double *kn = malloc(T * dn * sizeof *kn), *v = malloc(T * dv * sizeof *v);
    double *o = calloc(T * H * dv, sizeof *o), *a = malloc(T * sizeof *a);
    for (size_t h = 0; h < H; h++) {
        for (size_t s = 0; s < T; s++) {
            for (size_t n = 0; n < dn; n++) {
                double acc = 0;
                for (size_t j = 0; j < dc; j++)
                    acc += C[s * dc + j] * c->w_uk[(h * dn + n) * dc + j];
                kn[s * dn + n] = acc;
            }
            for (size_t e = 0; e < dv; e++) {
                double acc = 0;
                for (size_t j = 0; j < dc; j++)
                    acc += C[s * dc + j] * c->w_uv[(h * dv + e) * dc + j];
                v[s * dv + e] = acc;
            }
        }
        for (size_t i = 0; i < T; i++) {
            double m = -INFINITY, sum = 0;
            for (size_t s = 0; s <= i; s++) {
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
                for (size_t e = 0; e < dv; e++)
                    o[(i * H + h) * dv + e] += a[s] / sum * v[s * dv + e];
        }
    }
    for (size_t i = 0; i < T; i++)
        for (size_t k = 0; k < D; k++) {
            double acc = 0;
            for (size_t j = 0; j < H * dv; j++)
                acc += o[i * H * dv + j] * c->w_o[k * H * dv + j];
            Y[i * D + k] = acc;
        }
    free(kn);
    free(v);
    free(o);
    free(a);
}

/* Central difference of Y along (VC, VK) (either may be NULL) at the
 * case's caches: out [T, D]. */
static inline void ref_fd_dir(const naive_case *c, const double *VC,
                              const double *VK, double h, double *out)
{
    const size_t T = c->T, nC = T * c->dc, nK = T * c->dr, nY = T * c->D;
    double *Cp = naive_widen(c->C, nC), *Cm = naive_widen(c->C, nC);
    double *Kp = naive_widen(c->K, nK), *Km = naive_widen(c->K, nK);
    double *Yp = malloc(nY * sizeof *Yp), *Ym = malloc(nY * sizeof *Ym);
    for (size_t i = 0; VC && i < nC; i++) {
        Cp[i] += h * VC[i];
        Cm[i] -= h * VC[i];
    }
    for (size_t i = 0; VK && i < nK; i++) {
        Kp[i] += h * VK[i];
        Km[i] -= h * VK[i];
    }
    ref_forward_d(c, Cp, Kp, Yp);
    ref_forward_d(c, Cm, Km, Ym);
    for (size_t i = 0; i < nY; i++)
        out[i] = (Yp[i] - Ym[i]) / (2.0 * h);
    free(Cp); free(Cm); free(Kp); free(Km); free(Yp); free(Ym);
}

/* Brute-force raw token traces tr(J_b,t^T J_b,t) / d_b for path b (0
 * content, 1 RoPE), column by column: tr [T]. */
static inline void ref_token_traces(const naive_case *c, int path, double h,
                                    double *tr)
{
    const size_t T = c->T, w = path == 0 ? c->dc : c->dr, nY = T * c->D;
    double *V = calloc(T * w, sizeof *V), *col = malloc(nY * sizeof *col);
    for (size_t t = 0; t < T; t++) {
        double s = 0;
        for (size_t j = 0; j < w; j++) {
            V[t * w + j] = 1.0;
            ref_fd_dir(c, path == 0 ? V : NULL, path == 1 ? V : NULL, h, col);
            V[t * w + j] = 0.0;
            s += naive_sumsq(col, nY);
        }
        tr[t] = s / (double)w;
    }
    free(V);
    free(col);
}

#endif
