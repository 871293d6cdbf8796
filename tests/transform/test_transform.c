/* test_transform.c — the fusible transformation spaces (docs/math.md §7):
 *   1. the three maps (X T, X T^-1, X T^-T) against dense matrices built
 *      here in double, T T^-1 = I;
 *   2. the fusion algebra on every synth shape's path widths and pairing:
 *      with quantization off, transformed caches (C T_C, K T_P) with fused
 *      consumers (w_uk, w_uv, q_rope by T^-T) reproduce the original output
 *      of the naive double reference (tests/ref/naive.h) to rounding; and the
 *      effective cache QDQ-free round trip returns the cache;
 *   3. T_P commutes with the positional rotations under both pairings
 *      (random angles), and on synth captures with the stored pre-RoPE
 *      tensors and cos/sin (interleaved: tiny, deepseek-v2-lite; half:
 *      moonlight);
 *   4. the baselines against their definitions: SmoothQuant† T_C =
 *      diag(σ)^-1 with σ from the data, one scale per RoPE pair; QuaRot†
 *      T_C = diag(γ)^-1 H, H orthogonal with entries ±1/sqrt(d_c); RTN T = I;
 *   5. the transforms file: round trip bit for bit, a non-orthogonal
 *      rotation and a non-positive scale refused with the dataset named.
 * Shapes: the synth table's d_c, d_n, d_r, d_v and pairing; H and D capped
 * at 8 and 256 (the transforms act on d_c and d_r only), T = 11.
 * Run: meson test -C build test_transform */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hdf5.h>

#include "check.h"
#include "naive.h"
#include "qmla/capture.h"
#include "qmla/synth.h"
#include "qmla/tfeval.h"
#include "qmla/transform.h"
#include "qmla/tmethod.h"
#include "transform/tfeval_int.h"

static void random_orthogonal(double *R, size_t d)
{
    for (size_t i = 0; i < d * d; i++)
        R[i] = naive_gauss();
    /* modified Gram-Schmidt on the rows, twice for accuracy */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < d; i++) {
            double *ri = R + i * d;
            for (size_t k = 0; k < i; k++) {
                const double *rk = R + k * d;
                double s = 0;
                for (size_t j = 0; j < d; j++)
                    s += ri[j] * rk[j];
                for (size_t j = 0; j < d; j++)
                    ri[j] -= s * rk[j];
            }
            double n = sqrt(naive_sumsq(ri, d));
            for (size_t j = 0; j < d; j++)
                ri[j] /= n;
        }
}

static void random_transform(qmla_transform *t)
{
    random_orthogonal(t->rot, t->d_c);
    for (size_t j = 0; j < t->d_c; j++)
        t->cscale[j] = exp(0.5 * naive_gauss());
    for (size_t i = 0; i < t->d_r / 2; i++) {
        t->angle[i] = 3.0 * naive_gauss();
        t->rscale[i] = exp(0.5 * naive_gauss());
    }
}

static float *gamma_fill(size_t d)
{
    float *g = malloc(d * sizeof *g);
    for (size_t j = 0; j < d; j++) { /* some negative gains, as real ones may be */
        double v = 0.2 + fabs(naive_gauss());
        g[j] = (float)(j % 7 == 3 ? -v : v);
    }
    return g;
}

static double rel_err_d(const double *a, const double *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static double rel_err_f(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* Dense T_P in double, built from its definition. */
static void dense_tp(const qmla_transform *t, double *M)
{
    size_t d = t->d_r;
    memset(M, 0, d * d * sizeof *M);
    for (size_t i = 0; i < d / 2; i++) {
        size_t a = (t->pairing == QMLA_ROPE_HALF) ? i : 2 * i;
        size_t b = (t->pairing == QMLA_ROPE_HALF) ? i + d / 2 : 2 * i + 1;
        double c = cos(t->angle[i]), s = sin(t->angle[i]), f = t->rscale[i];
        /* R(θ) = [[c, -s], [s, c]] on (a, b) */
        M[a * d + a] = f * c;
        M[a * d + b] = -f * s;
        M[b * d + a] = f * s;
        M[b * d + b] = f * c;
    }
}

/* Y = X M (double), X [n, d] float. */
static void matmul_fd(const float *X, size_t n, const double *M, size_t d, double *Y)
{
    for (size_t r = 0; r < n; r++)
        for (size_t k = 0; k < d; k++) {
            double s = 0;
            for (size_t j = 0; j < d; j++)
                s += (double)X[r * d + j] * M[j * d + k];
            Y[r * d + k] = s;
        }
}

static void check_maps(const qmla_exec *ex, size_t dc, size_t dr, qmla_rope_pairing pp,
                       const char *name)
{
    qmla_error err;
    qmla_transform t;
    CHECK_OK(qmla_transform_alloc(dc, dr, pp, &t, &err), err);
    random_transform(&t);
    float *g = gamma_fill(dc);
    double *Tc = malloc(dc * dc * sizeof *Tc), *TiT = malloc(dc * dc * sizeof *TiT);
    qmla_transform_content_mats(&t, g, Tc, TiT);
    /* T_C against its definition diag(γ)^-1 R diag(s) */
    double worst = 0;
    for (size_t j = 0; j < dc; j++)
        for (size_t k = 0; k < dc; k++) {
            double want = t.rot[j * dc + k] * t.cscale[k] / g[j];
            worst = fmax(worst, fabs(Tc[j * dc + k] - want));
        }
    CHECK(worst < 1e-12, "%s: T_C differs from diag(γ)^-1 R diag(s) by %g", name, worst);
    /* T_C (T_C^-T)^T = I */
    worst = 0;
    for (size_t j = 0; j < dc; j++)
        for (size_t k = 0; k < dc; k++) {
            double s = 0;
            for (size_t r = 0; r < dc; r++)
                s += Tc[j * dc + r] * TiT[k * dc + r];
            worst = fmax(worst, fabs(s - (j == k)));
        }
    CHECK(worst < 1e-9, "%s: T_C T_C^-1 - I = %g", name, worst);
    size_t n = 5;
    float *X = naive_fill(n * dc, 1.0, 0.2), *Y = malloc(n * dc * 4), *Z = malloc(n * dc * 4);
    double *Yd = malloc(n * dc * sizeof *Yd);
    qmla_transform_content_apply(ex, &t, g, QMLA_TMAP_FWD, X, n, Y);
    matmul_fd(X, n, Tc, dc, Yd);
    float *Yf = malloc(n * dc * 4);
    for (size_t i = 0; i < n * dc; i++)
        Yf[i] = (float)Yd[i];
    CHECK(rel_err_f(Y, Yf, n * dc) < 1e-6, "%s: X T_C vs dense: %g", name, rel_err_f(Y, Yf, n * dc));
    qmla_transform_content_apply(ex, &t, g, QMLA_TMAP_INVT, X, n, Y);
    matmul_fd(X, n, TiT, dc, Yd);
    for (size_t i = 0; i < n * dc; i++)
        Yf[i] = (float)Yd[i];
    CHECK(rel_err_f(Y, Yf, n * dc) < 1e-6, "%s: X T_C^-T vs dense: %g", name, rel_err_f(Y, Yf, n * dc));
    qmla_transform_content_apply(ex, &t, g, QMLA_TMAP_FWD, X, n, Y);
    qmla_transform_content_apply(ex, &t, g, QMLA_TMAP_INV, Y, n, Z);
    CHECK(rel_err_f(Z, X, n * dc) < 1e-5, "%s: X T_C T_C^-1 vs X: %g", name, rel_err_f(Z, X, n * dc));
    /* RoPE against the dense block matrix */
    double *Tp = malloc(dr * dr * sizeof *Tp), *Ypd = malloc(n * dr * sizeof *Ypd);
    float *K = naive_fill(n * dr, 1.0, 0.0), *Kt = malloc(n * dr * 4), *Kb = malloc(n * dr * 4);
    dense_tp(&t, Tp);
    qmla_transform_rope_apply(&t, QMLA_TMAP_FWD, K, n, Kt);
    matmul_fd(K, n, Tp, dr, Ypd);
    float *Kf = malloc(n * dr * 4);
    for (size_t i = 0; i < n * dr; i++)
        Kf[i] = (float)Ypd[i];
    CHECK(rel_err_f(Kt, Kf, n * dr) < 1e-6, "%s: K T_P vs dense (%s)", name, qmla_rope_pairing_name(pp));
    qmla_transform_rope_apply(&t, QMLA_TMAP_INV, Kt, n, Kb);
    CHECK(rel_err_f(Kb, K, n * dr) < 1e-6, "%s: K T_P T_P^-1 vs K", name);
    /* (K T_P)(Q T_P^-T)^T = K Q^T */
    float *Q = naive_fill(n * dr, 1.0, 0.0), *Qt = malloc(n * dr * 4);
    qmla_transform_rope_apply(&t, QMLA_TMAP_INVT, Q, n, Qt);
    double e = 0, den = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t s = 0; s < n; s++) {
            double a = 0, b = 0;
            for (size_t j = 0; j < dr; j++) {
                a += (double)Qt[i * dr + j] * Kt[s * dr + j];
                b += (double)Q[i * dr + j] * K[s * dr + j];
            }
            e += (a - b) * (a - b);
            den += b * b;
        }
    CHECK(sqrt(e / den) < 1e-6, "%s: positional scores change under T_P: %g", name, sqrt(e / den));
    free(Q); free(Qt); free(Kf); free(Tp); free(Ypd); free(K); free(Kt); free(Kb);
    free(Yf); free(X); free(Y); free(Z); free(Yd); free(Tc); free(TiT); free(g);
    qmla_transform_free(&t);
}

/* Fusion on a naive case with the shape's widths. */
static void check_fusion(const qmla_exec *ex, const qmla_shape *sh, unsigned seed)
{
    size_t H = sh->H > 8 ? 8 : (size_t)sh->H, D = sh->D > 256 ? 256 : (size_t)sh->D, T = 11;
    size_t dc = sh->d_c, dn = sh->d_n, dr = sh->d_r, dv = sh->d_v;
    naive_case c, f;
    naive_case_init(&c, H, T, dc, dn, dr, dv, D, seed);
    c.tau = sh->tau;
    qmla_error err;
    qmla_transform t;
    CHECK_OK(qmla_transform_alloc(dc, dr, (qmla_rope_pairing)sh->rope_pairing, &t, &err), err);
    random_transform(&t);
    float *g = gamma_fill(dc);
    f = c;
    f.w_uk = malloc(H * dn * dc * 4);
    f.w_uv = malloc(H * dv * dc * 4);
    f.q_rope = malloc(H * T * dr * 4);
    f.C = malloc(T * dc * 4);
    f.K = malloc(T * dr * 4);
    qmla_mla_dims d = {H, D, dc, dn, dr, dv, sh->tau};
    qmla_mla_weights w = {c.w_uk, c.w_uv, c.w_o};
    qmla_transform_fuse_weights(ex, &t, g, &d, &w, f.w_uk, f.w_uv);
    qmla_transform_rope_apply(&t, QMLA_TMAP_INVT, c.q_rope, H * T, f.q_rope);
    qmla_transform_content_apply(ex, &t, g, QMLA_TMAP_FWD, c.C, T, f.C);
    qmla_transform_rope_apply(&t, QMLA_TMAP_FWD, c.K, T, f.K);
    double *Y0 = malloc(T * D * sizeof *Y0), *Y1 = malloc(T * D * sizeof *Y1);
    naive_forward(&c, c.C, c.K, Y0, NULL);
    naive_forward(&f, f.C, f.K, Y1, NULL);
    double e = rel_err_d(Y1, Y0, T * D);
    CHECK(e < 2e-5, "%s: fused model output differs by %.3g (relative)", sh->name, e);
    /* the effective cache without quantization is the cache */
    float *work = malloc(T * dc * 4), *Ce = malloc(T * dc * 4), *Ke = malloc(T * dr * 4);
    CHECK_OK(qmla_transform_effective_content(ex, &t, g, NULL, c.C, T, 0, 0, work, Ce, &err), err);
    CHECK(rel_err_f(Ce, c.C, T * dc) < 1e-5, "%s: C T_C T_C^-1 vs C: %g", sh->name, rel_err_f(Ce, c.C, T * dc));
    CHECK_OK(qmla_transform_effective_rope(&t, NULL, c.K, T, 0, 0, work, Ke, &err), err);
    CHECK(rel_err_f(Ke, c.K, T * dr) < 1e-6, "%s: K T_P T_P^-1 vs K", sh->name);
    /* protection keeps the clean rows bit for bit, quantizes the others */
    qmla_quant_params p = qmla_quant_defaults();
    CHECK_OK(qmla_transform_effective_content(ex, &t, g, &p, c.C, T, 2, 3, work, Ce, &err), err);
    CHECK(!memcmp(Ce, c.C, 2 * dc * 4) && !memcmp(Ce + (T - 3) * dc, c.C + (T - 3) * dc, 3 * dc * 4),
          "%s: sink/local rows not clean", sh->name);
    CHECK(memcmp(Ce + 2 * dc, c.C + 2 * dc, dc * 4) != 0, "%s: row 2 not quantized", sh->name);
    free(work); free(Ce); free(Ke);
    printf("fusion %-20s H %zu D %zu d_c %zu d_r %zu %-11s: output rel. err %.2e\n", sh->name, H, D,
           dc, dr, qmla_rope_pairing_name(t.pairing), e);
    free(Y0); free(Y1); free(g);
    free(f.w_uk); free(f.w_uv); free(f.q_rope); free(f.C); free(f.K);
    naive_case_free(&c);
    qmla_transform_free(&t);
}

/* rotate(X T) == rotate(X) T for random angles, both pairings. */
static void check_commute_random(size_t dr, qmla_rope_pairing pp)
{
    size_t T = 7, P = dr / 2;
    qmla_error err;
    qmla_transform t;
    CHECK_OK(qmla_transform_alloc(8, dr, pp, &t, &err), err);
    random_transform(&t);
    float *cs = malloc(T * P * 4), *sn = malloc(T * P * 4);
    for (size_t i = 0; i < T * P; i++) {
        double a = 10 * naive_gauss();
        cs[i] = (float)cos(a);
        sn[i] = (float)sin(a);
    }
    float *X = naive_fill(T * dr, 1.0, 0.0), *A = malloc(T * dr * 4), *B = malloc(T * dr * 4),
          *Cc = malloc(T * dr * 4);
    for (int m = 0; m < 2; m++) {
        qmla_tmap map = m ? QMLA_TMAP_INVT : QMLA_TMAP_FWD;
        qmla_transform_rope_apply(&t, map, X, T, A);
        qmla_rope_rotate(1, T, dr, pp, cs, sn, A, B); /* rotate(X T) */
        qmla_rope_rotate(1, T, dr, pp, cs, sn, X, A);
        qmla_transform_rope_apply(&t, map, A, T, Cc); /* rotate(X) T */
        CHECK(rel_err_f(B, Cc, T * dr) < 1e-6, "T_P%s does not commute with RoPE (%s, d_r %zu): %g",
              m ? "^-T" : "", qmla_rope_pairing_name(pp), dr, rel_err_f(B, Cc, T * dr));
    }
    free(cs); free(sn); free(X); free(A); free(B); free(Cc);
    qmla_transform_free(&t);
}

/* A one-layer, one-cell synthetic capture of `shape` written to path and
 * opened (NULL, counted as a failure, when either step fails). */
static qmla_capture *synth_capture(const char *path, const char *shape, unsigned long seed,
                                   int seqs, int tokens, int with_pre)
{
    qmla_synth_opts o;
    memset(&o, 0, sizeof o);
    o.shape = qmla_shape_find(shape);
    o.seed = seed;
    o.n_layers = 1;
    o.seqs = seqs;
    o.tokens = tokens;
    o.cells = 1;
    o.with_pre = with_pre;
    o.threads = 1;
    qmla_error err;
    qmla_capture *cap = NULL;
    CHECK_OK(qmla_synth_write(path, &o, &err), err);
    CHECK_OK(qmla_capture_open(path, &cap, &err), err);
    return cap;
}

/* With a synth capture's pre-RoPE tensors: rotate(k_pre T_P) = k_rope T_P,
 * rotate(q_pre T_P^-T) = q_rope T_P^-T. */
static void check_commute_capture(const char *shape)
{
    char path[256];
    snprintf(path, sizeof path, "/tmp/qmla_test_transform_%ld_%s.h5", (long)getpid(), shape);
    qmla_error err;
    qmla_capture *cap = synth_capture(path, shape, 7, 1, 9, 1);
    if (!cap)
        return;
    const qmla_capture_config *cf = qmla_capture_get_config(cap);
    qmla_cell cell;
    CHECK_OK(qmla_capture_load_cell(cap, 0, 0, &cell, &err), err);
    CHECK(cell.k_rope_pre && cell.rope_cos, "%s: no pre-RoPE tensors", shape);
    size_t T = cell.T, dr = (size_t)cf->d_r, H = (size_t)cf->H;
    qmla_transform t;
    CHECK_OK(qmla_transform_alloc((size_t)cf->d_c, dr, cf->rope_pairing, &t, &err), err);
    random_transform(&t);
    float *a = malloc(H * T * dr * 4), *b = malloc(H * T * dr * 4), *c = malloc(H * T * dr * 4);
    qmla_transform_rope_apply(&t, QMLA_TMAP_FWD, cell.k_rope_pre, T, a);
    qmla_rope_rotate(1, T, dr, cf->rope_pairing, cell.rope_cos, cell.rope_sin, a, b);
    qmla_transform_rope_apply(&t, QMLA_TMAP_FWD, cell.k_rope, T, c);
    CHECK(rel_err_f(b, c, T * dr) < 1e-5, "%s (%s): rotate(k_pre T_P) vs k_rope T_P: %g", shape,
          qmla_rope_pairing_name(cf->rope_pairing), rel_err_f(b, c, T * dr));
    qmla_transform_rope_apply(&t, QMLA_TMAP_INVT, cell.q_rope_pre, H * T, a);
    qmla_rope_rotate(H, T, dr, cf->rope_pairing, cell.rope_cos, cell.rope_sin, a, b);
    qmla_transform_rope_apply(&t, QMLA_TMAP_INVT, cell.q_rope, H * T, c);
    CHECK(rel_err_f(b, c, H * T * dr) < 1e-5, "%s: rotate(q_pre T_P^-T) vs q_rope T_P^-T: %g", shape,
          rel_err_f(b, c, H * T * dr));
    printf("commute %-18s %-11s: k %.2e\n", shape, qmla_rope_pairing_name(cf->rope_pairing),
           rel_err_f(b, c, H * T * dr));
    free(a); free(b); free(c);
    qmla_transform_free(&t);
    qmla_cell_free(&cell);
    qmla_capture_close(cap);
    unlink(path);
}

static void check_baselines(const qmla_exec *ex)
{
    size_t dc = 64, dr = 16, T = 13, H = 3;
    qmla_error err;
    float *g = gamma_fill(dc);
    float *C = naive_fill(T * dc, 1.0, 0.3), *K = naive_fill(T * dr, 2.0, 0.0);
    float *Qc = naive_fill(T * H * dc, 0.5, 0.0), *Qp = naive_fill(T * H * dr, 3.0, 0.0);
    for (size_t j = 0; j < dc; j += 9) /* outlier channels */
        C[5 * dc + j] = 40.0f;
    qmla_calib cal;
    CHECK_OK(qmla_calib_alloc(dc, dr, &cal, &err), err);
    qmla_calib_add(&cal, T, H, C, K, Qc, Qp);
    for (int pp = 0; pp < 2; pp++) {
        qmla_transform t;
        CHECK_OK(qmla_transform_alloc(dc, dr, (qmla_rope_pairing)pp, &t, &err), err);
        CHECK_OK(qmla_transform_smoothquant(&t, g, &cal, 0.5, &err), err);
        double *Tc = malloc(dc * dc * sizeof *Tc);
        qmla_transform_content_mats(&t, g, Tc, NULL);
        double worst = 0;
        for (size_t j = 0; j < dc; j++) {
            double xm = 0, qm = 0;
            for (size_t r = 0; r < T; r++)
                xm = fmax(xm, fabs(C[r * dc + j]));
            for (size_t r = 0; r < T * H; r++)
                qm = fmax(qm, fabs(Qc[r * dc + j]));
            double want = 1.0 / (sqrt(xm) / sqrt(qm));
            for (size_t k = 0; k < dc; k++)
                worst = fmax(worst, fabs(Tc[j * dc + k] - (j == k ? want : 0.0)) / want);
        }
        CHECK(worst < 1e-12, "smoothquant: T_C not diag(σ)^-1 (%g)", worst);
        worst = 0;
        for (size_t i = 0; i < dr / 2; i++) {
            size_t a = pp ? i : 2 * i, b = pp ? i + dr / 2 : 2 * i + 1;
            double sig[2];
            size_t ch[2] = {a, b};
            for (int u = 0; u < 2; u++) {
                double xm = 0, qm = 0;
                for (size_t r = 0; r < T; r++)
                    xm = fmax(xm, fabs(K[r * dr + ch[u]]));
                for (size_t r = 0; r < T * H; r++)
                    qm = fmax(qm, fabs(Qp[r * dr + ch[u]]));
                sig[u] = sqrt(xm) / sqrt(qm);
            }
            worst = fmax(worst, fabs(t.rscale[i] * fmax(sig[0], sig[1]) - 1.0));
            CHECK(t.angle[i] == 0.0, "smoothquant: non-zero angle");
        }
        CHECK(worst < 1e-12, "smoothquant: RoPE pair scale not 1/max(σ_a, σ_b) (%g)", worst);
        /* QuaRot: T_C = diag(γ)^-1 H, H = ±1/sqrt(d) orthogonal; T_P = I */
        CHECK_OK(qmla_transform_quarot(&t, &err), err);
        qmla_transform_content_mats(&t, g, Tc, NULL);
        worst = 0;
        for (size_t j = 0; j < dc; j++)
            for (size_t k = 0; k < dc; k++)
                worst = fmax(worst, fabs(fabs(Tc[j * dc + k] * g[j]) * sqrt((double)dc) - 1.0));
        CHECK(worst < 1e-12, "quarot: |γ_j T_C[j,k]| != 1/sqrt(d_c) (%g)", worst);
        worst = 0;
        for (size_t j = 0; j < dc; j++)
            for (size_t k = 0; k < dc; k++) {
                double s = 0;
                for (size_t r = 0; r < dc; r++)
                    s += t.rot[r * dc + j] * t.rot[r * dc + k];
                worst = fmax(worst, fabs(s - (j == k)));
            }
        CHECK(worst < 1e-12, "quarot: H not orthogonal (%g)", worst);
        /* RTN: T = I both paths; effective cache = plain QDQ to rounding */
        CHECK_OK(qmla_transform_set_identity(&t, g, &err), err);
        qmla_transform_content_mats(&t, g, Tc, NULL);
        worst = 0;
        for (size_t j = 0; j < dc * dc; j++)
            worst = fmax(worst, fabs(Tc[j] - (j % (dc + 1) == 0)));
        CHECK(worst < 1e-15, "rtn: T_C != I (%g)", worst);
        qmla_quant_params p = qmla_quant_defaults();
        float *w = malloc(T * dc * 4), *e1 = malloc(T * dc * 4), *e2 = malloc(T * dc * 4);
        CHECK_OK(qmla_transform_effective_content(ex, &t, g, &p, C, T, 0, 0, w, e1, &err), err);
        CHECK_OK(qmla_quant_qdq(&p, C, T, dc, NULL, NULL, NULL, e2, &err), err);
        CHECK(rel_err_f(e1, e2, T * dc) < 1e-6, "rtn: effective cache vs QDQ(C): %g", rel_err_f(e1, e2, T * dc));
        free(w); free(e1); free(e2); free(Tc);
        qmla_transform_free(&t);
    }
    qmla_transform t;
    qmla_transform_alloc(48, 16, QMLA_ROPE_HALF, &t, &err);
    CHECK(qmla_transform_quarot(&t, &err) == QMLA_EINVAL, "quarot accepts d_c 48");
    qmla_transform_free(&t);
    qmla_calib_free(&cal);
    free(g); free(C); free(K); free(Qc); free(Qp);
}

/* The method table (qmla/tmethod.h): lookup by name and by the recorded
 * value, the names and titles, which methods are learned, and each
 * calibrate giving the transform of the direct call bit for bit. */
static void check_method_table(void)
{
    static const char *names[] = {"rtn", "smoothquant", "quarot", "quantmla"};
    static const char *titles[] = {"RTN", "SmoothQuant", "QuaRot", "QuantMLA"};
    const qmla_tmethod_type *const *all = qmla_tmethod_types();
    const qmla_tmethod_type *ext[] = {qmla_tmethod_rtn, qmla_tmethod_smoothquant,
                                      qmla_tmethod_quarot, qmla_tmethod_quantmla};
    size_t n = 0;
    for (; all[n]; n++) {
        CHECK(n < 4 && all[n] == ext[n], "method table entry %zu", n);
        if (n >= 4)
            break;
        CHECK(qmla_tmethod_lookup(names[n]) == all[n], "lookup(\"%s\")", names[n]);
        CHECK(qmla_tmethod_of((qmla_tmethod)n) == all[n] && all[n]->id == (qmla_tmethod)n,
              "qmla_tmethod_of(%zu)", n);
        CHECK(!strcmp(all[n]->name, names[n]) && !strcmp(all[n]->title, titles[n]) &&
              !strcmp(qmla_tmethod_name((qmla_tmethod)n), names[n]), "names of %s", names[n]);
        CHECK(all[n]->learned == (n == 3) && (all[n]->calibrate == NULL) == (n == 3) &&
              all[n]->uses_alpha == (n == 1) && all[n]->needs_calib == (n == 1),
              "flags of %s", names[n]);
    }
    CHECK(n == 4, "method table has %zu entries, expected 4", n);
    CHECK(qmla_tmethod_lookup("QuaRot") == NULL && qmla_tmethod_lookup(NULL) == NULL &&
          qmla_tmethod_of((qmla_tmethod)4) == NULL, "unknown methods found");
    /* labels */
    qmla_transform_meta m;
    memset(&m, 0, sizeof m);
    char lab[64];
    m.method = QMLA_TM_QUANTMLA;
    snprintf(m.settings, sizeof m.settings, "method=quantmla path=rope objective=recon config=C4R4 ");
    qmla_tmethod_quantmla->eval_label(&m, lab, sizeof lab);
    CHECK(!strcmp(lab, "quantmla-rope-recon"), "eval label %s", lab);
    qmla_tmethod_quantmla->ppl_label(&m, lab, sizeof lab);
    CHECK(!strcmp(lab, "QuantMLA-rope"), "ppl label %s", lab);
    m.method = QMLA_TM_SMOOTHQUANT;
    qmla_tmethod_smoothquant->eval_label(&m, lab, sizeof lab);
    CHECK(!strcmp(lab, "smoothquant"), "eval label %s", lab);
    qmla_tmethod_smoothquant->ppl_label(&m, lab, sizeof lab);
    CHECK(!strcmp(lab, "SmoothQuant"), "ppl label %s", lab);
    /* calibrate == the direct calls */
    size_t dc = 64, dr = 16, T = 9, H = 2;
    qmla_error err;
    float *g = gamma_fill(dc);
    float *C = naive_fill(T * dc, 1.0, 0.3), *K = naive_fill(T * dr, 2.0, 0.0);
    float *Qc = naive_fill(T * H * dc, 0.5, 0.0), *Qp = naive_fill(T * H * dr, 3.0, 0.0);
    qmla_calib cal;
    CHECK_OK(qmla_calib_alloc(dc, dr, &cal, &err), err);
    qmla_calib_add(&cal, T, H, C, K, Qc, Qp);
    for (size_t k = 0; k < 3; k++) {
        qmla_transform a, b;
        CHECK_OK(qmla_transform_alloc(dc, dr, QMLA_ROPE_INTERLEAVED, &a, &err), err);
        CHECK_OK(qmla_transform_alloc(dc, dr, QMLA_ROPE_INTERLEAVED, &b, &err), err);
        CHECK_OK(all[k]->calibrate(&a, g, all[k]->needs_calib ? &cal : NULL, 0.3, &err), err);
        if (k == 1) {
            CHECK_OK(qmla_transform_smoothquant(&b, g, &cal, 0.3, &err), err);
        } else {
            CHECK_OK(qmla_transform_set_identity(&b, g, &err), err);
            if (k == 2)
                CHECK_OK(qmla_transform_quarot(&b, &err), err);
        }
        CHECK(!memcmp(a.rot, b.rot, dc * dc * sizeof(double)) &&
              !memcmp(a.cscale, b.cscale, dc * sizeof(double)) &&
              !memcmp(a.angle, b.angle, dr / 2 * sizeof(double)) &&
              !memcmp(a.rscale, b.rscale, dr / 2 * sizeof(double)),
              "%s: calibrate differs from the direct call", names[k]);
        qmla_transform_free(&a);
        qmla_transform_free(&b);
    }
    qmla_calib_free(&cal);
    free(g); free(C); free(K); free(Qc); free(Qp);
}

/* qmla_tf_eval_cell against the naive double attention fed with the
 * effective caches, on a synth capture (2 sequences, T 23). */
/* Largest eigenvalue of the n x n product A B of two symmetric PSD matrices
 * (its eigenvalues are real and >= 0), by power iteration in double until
 * the estimate stops moving. Independent of the library's qmla_spectral_norm
 * (which forms one Gram matrix of the whole operator). */
static double naive_lambda_max(const double *A, const double *B, size_t n)
{
    double *v = malloc(n * sizeof *v), *u = malloc(n * sizeof *u), l = 0;
    for (size_t j = 0; j < n; j++)
        v[j] = 1.0 + 0.01 * (double)(j % 7);
    for (int it = 0; it < 20000; it++) {
        for (size_t i = 0; i < n; i++) {
            u[i] = 0;
            for (size_t j = 0; j < n; j++)
                u[i] += B[i * n + j] * v[j];
        }
        double nv = 0, vv = 0;
        for (size_t i = 0; i < n; i++) {
            double a = 0;
            for (size_t j = 0; j < n; j++)
                a += A[i * n + j] * u[j];
            nv += a * a;
            vv += v[i] * v[i];
            v[i] = a;
        }
        const double lnew = sqrt(nv / vv);
        nv = sqrt(nv);
        for (size_t j = 0; j < n; j++)
            v[j] /= nv;
        if (it > 10 && fabs(lnew - l) <= 1e-13 * lnew) {
            l = lnew;
            break;
        }
        l = lnew;
    }
    free(v);
    free(u);
    return l;
}

/* G = X X^T (rows) or X^T X (cols) of the m x k row-major float matrix X. */
static void naive_gram(const float *X, size_t m, size_t k, size_t ld, size_t off, int rows,
                       double *G)
{
    const size_t n = rows ? m : k;
    for (size_t a = 0; a < n; a++)
        for (size_t b = 0; b < n; b++) {
            double g = 0;
            if (rows)
                for (size_t j = 0; j < k; j++)
                    g += (double)X[a * ld + off + j] * X[b * ld + off + j];
            else
                for (size_t i = 0; i < m; i++)
                    g += (double)X[i * ld + off + a] * X[i * ld + off + b];
            G[a * n + b] = g;
        }
}

static void check_eval(const qmla_exec *ex, const char *shape)
{
    char path[256];
    snprintf(path, sizeof path, "/tmp/qmla_test_transform_ev_%ld.h5", (long)getpid());
    qmla_error err;
    qmla_capture *cap = synth_capture(path, shape, 3, 2, 23, 0);
    if (!cap)
        return;
    const qmla_capture_config *cf = qmla_capture_get_config(cap);
    qmla_layer L;
    qmla_cell cell;
    CHECK_OK(qmla_capture_load_layer(cap, 0, &L, &err), err);
    CHECK_OK(qmla_capture_load_cell(cap, 0, 0, &cell, &err), err);
    size_t H = cf->H, T = cell.T, dc = cf->d_c, dr = cf->d_r, D = cf->D;
    qmla_transform t;
    CHECK_OK(qmla_transform_alloc(dc, dr, cf->rope_pairing, &t, &err), err);
    random_transform(&t);
    for (size_t j = 0; j < dc; j++)
        t.cscale[j] = fabs(L.kv_norm[j]) * exp(0.3 * naive_gauss());
    t.layer = L.layer;
    qmla_tf_eval_opts eo;
    eo.qc = qmla_quant_defaults();
    eo.qr = qmla_quant_defaults();
    eo.qc.bits = 2;
    eo.sink = 2;
    eo.local = 3;
    qmla_tf_eval_row row;
    CHECK_OK(qmla_tf_eval_cell(ex, cap, 0, 0, &t, L.kv_norm, &eo, &row, &err), err);
    double ref[4] = {0, 0, 0, 0};
    float *work = malloc(T * dc * 4), *Ce = malloc(T * dc * 4), *Ke = malloc(T * dr * 4);
    double *Y0 = malloc(T * D * 8), *Y1 = malloc(T * D * 8);
    /* the App. C.3 bound from its definition (docs/math.md §8):
     * ||dY|| <= 1/2 sum_h ||P_h||_2 ||C||_2 ||dZ_P,h||_F, P_h = W_O[:, h] W_UV,h */
    const size_t dv = (size_t)cf->d_v, HV = H * dv;
    /* ||P_h||^2 = lambda_max((W_O,h^T W_O,h)(W_UV,h W_UV,h^T)), d_v x d_v */
    double *Ga = malloc(dv * dv * 8), *Gb = malloc(dv * dv * 8), *I = malloc(T * T * 8);
    double *Gc = malloc(T * T * 8), *pnorm = malloc(H * 8);
    for (size_t h = 0; h < H; h++) {
        naive_gram(L.w_o, D, dv, HV, h * dv, 0, Ga);
        naive_gram(L.w_uv + h * dv * dc, dv, dc, dc, 0, 1, Gb);
        pnorm[h] = sqrt(naive_lambda_max(Ga, Gb, dv));
    }
    for (size_t i = 0; i < T * T; i++)
        I[i] = (i / T == i % T);
    double ref_bound = 0;
    for (size_t n = 0; n < cell.N; n++) {
        naive_case c = {H, T, dc, (size_t)cf->d_n, dr, (size_t)cf->d_v, D, cf->softmax_scale,
                        L.w_uk, L.w_uv, L.w_o, cell.c_kv + n * T * dc, cell.k_rope + n * T * dr,
                        cell.q_nope + n * H * T * cf->d_n, cell.q_rope + n * H * T * dr};
        CHECK_OK(qmla_transform_effective_content(ex, &t, L.kv_norm, &eo.qc, c.C, T, 2, 3, work, Ce, &err), err);
        CHECK_OK(qmla_transform_effective_rope(&t, &eo.qr, c.K, T, 2, 3, work, Ke, &err), err);
        naive_forward(&c, c.C, c.K, Y0, NULL);
        double yy = naive_sumsq(Y0, T * D);
        const float *Cs[3] = {Ce, Ce, c.C}, *Ks[3] = {Ke, c.K, Ke};
        for (int k = 0; k < 3; k++) {
            naive_forward(&c, Cs[k], Ks[k], Y1, NULL);
            double e = 0;
            for (size_t i = 0; i < T * D; i++)
                e += (Y1[i] - Y0[i]) * (Y1[i] - Y0[i]);
            ref[k] += e / yy / cell.N;
        }
        double num = 0, den = 0, bsum = 0;
        for (size_t h = 0; h < H; h++) {
            double nh = 0;
            for (size_t i = 0; i < T; i++)
                for (size_t s = 0; s <= i; s++) {
                    double z = 0, z1 = 0;
                    for (size_t j = 0; j < dr; j++) {
                        double q = c.q_rope[(h * T + i) * dr + j];
                        z += q * c.K[s * dr + j];
                        z1 += q * Ke[s * dr + j];
                    }
                    nh += (z1 - z) * (z1 - z);
                    den += z * z;
                }
            num += nh;
            bsum += pnorm[h] * cf->softmax_scale * sqrt(nh);
        }
        ref[3] += num / den / cell.N;
        naive_gram(c.C, T, dc, dc, 0, 1, Gc); /* ||C||^2 = lambda_max(C C^T) */
        const double bound = 0.5 * bsum * sqrt(naive_lambda_max(I, Gc, T));
        ref_bound += bound * bound / yy / cell.N;
    }
    double got[4] = {row.nmse_out, row.nmse_c, row.nmse_p, row.pos_err};
    const char *nm[4] = {"nmse_out", "nmse_out_content", "nmse_out_rope", "pos_score_err"};
    for (int k = 0; k < 4; k++)
        CHECK(fabs(got[k] - ref[k]) <= 1e-4 * ref[k] && ref[k] > 0, "%s eval %s: %.6g vs naive %.6g", shape,
              nm[k], got[k], ref[k]);
    CHECK(row.n_seq == 2 && row.bound_ok && row.bound_p >= row.nmse_p, "%s: bound %g vs rope NMSE %g",
          shape, row.bound_p, row.nmse_p);
    /* the library inflates both spectral norms by 1e-5 (float storage): 4e-5 in NMSE */
    CHECK(fabs(row.bound_p - ref_bound) <= 1e-3 * ref_bound && ref_bound > 0,
          "%s: bound %.8g vs its definition %.8g", shape, row.bound_p, ref_bound);
    free(Ga);
    free(Gb);
    free(Gc);
    free(I);
    free(pnorm);
    printf("eval %-18s C2R4 sink2/local3: nmse_out %.4e (naive %.4e), rope %.3e <= bound %.3e\n",
           shape, got[0], ref[0], row.nmse_p, row.bound_p);
    /* a transform made with another γ is refused */
    float *g2 = malloc(dc * 4);
    memcpy(g2, L.kv_norm, dc * 4);
    g2[1] *= 1.01f;
    CHECK(qmla_tf_eval_cell(ex, cap, 0, 0, &t, g2, &eo, &row, &err) == QMLA_EMISMATCH &&
          strstr(err.msg, "gamma[1]"), "gamma mismatch: %s", err.msg);
    free(g2); free(work); free(Ce); free(Ke); free(Y0); free(Y1);
    qmla_transform_free(&t);
    qmla_layer_free(&L);
    qmla_cell_free(&cell);
    qmla_capture_close(cap);
    unlink(path);
}

static void check_file(void)
{
    char path[128];
    snprintf(path, sizeof path, "/tmp/qmla_test_transform_%ld.h5", (long)getpid());
    qmla_error err;
    qmla_transform t[2];
    float *g[2];
    for (int i = 0; i < 2; i++) {
        CHECK_OK(qmla_transform_alloc(32, 8, QMLA_ROPE_HALF, &t[i], &err), err);
        random_transform(&t[i]);
        t[i].layer = 3 * i + 1;
        g[i] = gamma_fill(32);
    }
    qmla_transform_meta m;
    memset(&m, 0, sizeof m);
    m.method = QMLA_TM_SMOOTHQUANT;
    strcpy(m.config, "C4R4");
    m.alpha = 0.5;
    double ob[2 * QMLA_TOBJ_N] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8};
    strcpy(m.settings, "steps=3");
    CHECK_OK(qmla_transform_file_write(path, &m, t, (const float *const *)g, ob, 2, &err), err);
    qmla_transform_file f;
    CHECK_OK(qmla_transform_file_read(path, &f, &err), err);
    CHECK(f.n == 2 && f.meta.method == QMLA_TM_SMOOTHQUANT && !strcmp(f.meta.config, "C4R4") &&
          !strcmp(f.meta.settings, "steps=3") && f.meta.complete == 0 && f.obj && !memcmp(f.obj, ob, sizeof ob),
          "file metadata");
    for (size_t i = 0; i < f.n && i < 2; i++) {
        CHECK(f.t[i].layer == t[i].layer && f.t[i].pairing == QMLA_ROPE_HALF, "layer %zu", i);
        CHECK(!memcmp(f.t[i].rot, t[i].rot, 32 * 32 * 8) && !memcmp(f.t[i].cscale, t[i].cscale, 32 * 8) &&
              !memcmp(f.t[i].angle, t[i].angle, 4 * 8) && !memcmp(f.t[i].rscale, t[i].rscale, 4 * 8) &&
              !memcmp(f.gamma[i], g[i], 32 * 4), "layer %zu not bit-identical", i);
    }
    const float *gg = NULL;
    CHECK(qmla_transform_file_layer(&f, 4, &gg) == &f.t[1] && gg == f.gamma[1], "layer lookup");
    qmla_transform_file_free(&f);
    /* a non-orthogonal rotation and a negative scale are refused */
    t[1].rot[5] += 0.01;
    CHECK_OK(qmla_transform_file_write(path, &m, t, (const float *const *)g, NULL, 2, &err), err);
    CHECK(qmla_transform_file_read(path, &f, &err) == QMLA_EFORMAT && strstr(err.msg, "/layers/4/content") &&
          strstr(err.msg, "orthogonal"), "non-orthogonal: %s", err.msg);
    t[1].rot[5] -= 0.01;
    /* near misses: one column of R shorter or longer than 1 by 1e-3 (its
     * inner products with the others still 0: only the diagonal of R^T R
     * is off, by -2e-3 or +2e-3), and a RoPE pair scale of exactly 0 */
    for (int sgn = -1; sgn <= 1; sgn += 2) {
        double keep[32];
        for (size_t r = 0; r < 32; r++) {
            keep[r] = t[1].rot[r * 32 + 3];
            t[1].rot[r * 32 + 3] *= 1.0 + sgn * 1e-3;
        }
        CHECK_OK(qmla_transform_file_write(path, &m, t, (const float *const *)g, NULL, 2, &err), err);
        CHECK(qmla_transform_file_read(path, &f, &err) == QMLA_EFORMAT && strstr(err.msg, "/layers/4/content") &&
              strstr(err.msg, "orthogonal") && strstr(err.msg, "[3, 3]"),
              "column 3 of norm 1 %+g: %s", sgn * 1e-3, err.msg);
        for (size_t r = 0; r < 32; r++)
            t[1].rot[r * 32 + 3] = keep[r];
    }
    const double rs = t[0].rscale[1];
    t[0].rscale[1] = 0.0;
    CHECK_OK(qmla_transform_file_write(path, &m, t, (const float *const *)g, NULL, 2, &err), err);
    CHECK(qmla_transform_file_read(path, &f, &err) == QMLA_EFORMAT && strstr(err.msg, "/layers/1/rope") &&
          strstr(err.msg, "scale[1]: expected > 0, found 0"), "zero RoPE scale: %s", err.msg);
    t[0].rscale[1] = rs;
    t[0].rscale[2] = -1;
    CHECK_OK(qmla_transform_file_write(path, &m, t, (const float *const *)g, NULL, 2, &err), err);
    CHECK(qmla_transform_file_read(path, &f, &err) == QMLA_EFORMAT && strstr(err.msg, "/layers/1/rope") &&
          strstr(err.msg, "scale[2]"), "negative scale: %s", err.msg);
    CHECK(qmla_transform_file_read("/nonexistent/x.h5", &f, &err) == QMLA_ENOENT && strstr(err.msg, "No such file"), "missing file: %s", err.msg);
    CHECK(qmla_transform_file_read("/tmp", &f, &err) == QMLA_EIO && strstr(err.msg, "a directory"), "a directory: %s", err.msg);
    unlink(path);
    for (int i = 0; i < 2; i++) {
        qmla_transform_free(&t[i]);
        free(g[i]);
    }
}

/* qmla_lambda_max_psd_prod (the CUDA engine's head norms): lambda_max of
 * (AB)^T (AB) from A^T A and B B^T against the full Gram's, on random
 * shapes (D, d_v, d_c), a rank-deficient A and a zero head. */
static void check_psd_prod(void)
{
    const size_t shapes[][3] = {{64, 8, 24}, {256, 32, 96}, {40, 16, 16}, {7, 5, 9}};
    for (size_t q = 0; q < sizeof shapes / sizeof *shapes; q++)
        for (int kind = 0; kind < 3; kind++) {
            const size_t D = shapes[q][0], dv = shapes[q][1], dc = shapes[q][2];
            double *A = malloc(D * dv * sizeof *A), *B = malloc(dv * dc * sizeof *B);
            double *X = calloc(D * dc, sizeof *X), *G = calloc(dc * dc, sizeof *G);
            double *G1 = calloc(dv * dv, sizeof *G1), *G2 = calloc(dv * dv, sizeof *G2);
            for (size_t i = 0; i < D * dv; i++) /* kind 1: A's last column 0; 2: A = 0 */
                A[i] = kind == 2 || (kind == 1 && i % dv == dv - 1) ? 0.0 : naive_gauss();
            for (size_t i = 0; i < dv * dc; i++)
                B[i] = naive_gauss() * 0.1;
            for (size_t i = 0; i < D; i++)
                for (size_t j = 0; j < dc; j++)
                    for (size_t k = 0; k < dv; k++)
                        X[i * dc + j] += A[i * dv + k] * B[k * dc + j];
            for (size_t i = 0; i < dc; i++)
                for (size_t j = 0; j < dc; j++)
                    for (size_t k = 0; k < D; k++)
                        G[i * dc + j] += X[k * dc + i] * X[k * dc + j];
            for (size_t i = 0; i < dv; i++)
                for (size_t j = 0; j < dv; j++) {
                    for (size_t k = 0; k < D; k++)
                        G1[i * dv + j] += A[k * dv + i] * A[k * dv + j];
                    for (size_t k = 0; k < dc; k++)
                        G2[i * dv + j] += B[i * dc + k] * B[j * dc + k];
                }
            const double full = qmla_lambda_max_sym(G, dc);
            const double prod = qmla_lambda_max_psd_prod(G1, G2, dv);
            double batch[2] = {0, 0};
            double *G1b = malloc(2 * dv * dv * sizeof *G1b), *G2b = malloc(2 * dv * dv * sizeof *G2b);
            memcpy(G1b, G1, dv * dv * sizeof *G1);
            memcpy(G1b + dv * dv, G1, dv * dv * sizeof *G1);
            memcpy(G2b, G2, dv * dv * sizeof *G2);
            memcpy(G2b + dv * dv, G2, dv * dv * sizeof *G2);
            qmla_lambda_max_psd_prod_batch(G1b, G2b, 2, dv, 2, batch);
            if (kind == 2)
                CHECK(fabs(prod) <= 1e-300 && fabs(full) <= 1e-300,
                      "psd_prod D %zu d_v %zu d_c %zu: zero head: %g (full %g)", D, dv, dc, prod,
                      full);
            else
                CHECK(full > 0 && fabs(prod - full) <= 1e-10 * full,
                      "psd_prod D %zu d_v %zu d_c %zu kind %d: %.17g, the full Gram's %.17g",
                      D, dv, dc, kind, prod, full);
            CHECK(batch[0] == prod && batch[1] == prod,
                  "psd_prod batch D %zu kind %d: %.17g %.17g, single %.17g", D, kind, batch[0],
                  batch[1], prod);
            free(A);
            free(B);
            free(X);
            free(G);
            free(G1);
            free(G2);
            free(G1b);
            free(G2b);
        }
}

/* qmla_spectral_norm: sigma_max of a known X, 0 for X = 0, and NaN (not a
 * norm of 0, which made the eval bound silently 0) for non-finite X. */
static void check_spectral_norm(void)
{
    /* X = diag(3, 4) padded with a zero row: sigma_max 4 */
    const float X[6] = {3, 0, 0, 4, 0, 0};
    double s = qmla_spectral_norm(X, 3, 2);
    CHECK(fabs(s - 4.0) <= 1e-12, "spectral norm of diag(3, 4): %.17g, expected 4", s);
    const float Z[6] = {0};
    s = qmla_spectral_norm(Z, 3, 2);
    CHECK(s == 0.0, "spectral norm of 0: %g", s);
    float B[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    B[4] = NAN;
    s = qmla_spectral_norm(B, 4, 3);
    CHECK(isnan(s), "spectral norm with a NaN entry: %g, expected NaN", s);
    B[4] = INFINITY;
    s = qmla_spectral_norm(B, 4, 3);
    CHECK(isnan(s) || isinf(s), "spectral norm with an infinite entry: %g, expected non-finite", s);
}

int main(void)
{
    qmla_exec ex = qmla_exec_cpu(2);
    check_spectral_norm();
    naive_rng_state = 12345;
    for (int pp = 0; pp < 2; pp++) {
        check_maps(&ex, 64, 16, (qmla_rope_pairing)pp, "d_c 64");
        check_maps(&ex, 7, 6, (qmla_rope_pairing)pp, "d_c 7");
        check_commute_random(64, (qmla_rope_pairing)pp);
        check_commute_random(6, (qmla_rope_pairing)pp);
    }
    unsigned seed = 1;
    for (const qmla_shape *s = qmla_shapes(); s->name; s++)
        check_fusion(&ex, s, seed++);
    check_commute_capture("tiny");
    check_commute_capture("deepseek-v2-lite");
    check_commute_capture("moonlight");
    check_baselines(&ex);
    check_method_table();
    check_eval(&ex, "tiny");
    check_eval(&ex, "moonlight");
    check_file();
    check_psd_prod();
    return check_summary("test_transform");
}
