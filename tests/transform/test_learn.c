/* test_learn.c — the learning objectives and their hand-derived gradients
 * (docs/math.md §8):
 *   1. objective values against independent references: L_C from the naive
 *      double attention (tests/ref/naive.h) on QDQ(C T_C) T_C^-1 with R = D_γ
 *      Cay(S) built here by GSL's LU inverse; L_P from the masked positional
 *      score matrix over all causal pairs and heads, in double;
 *   2. gradients (attention backward, Cayley backward, straight-through
 *      through the group scale and minimum) against central finite
 *      differences of the objective with the rounding residuals frozen
 *      (the function the straight-through rule differentiates), along
 *      random directions in S, in log s, in θ and in log s_i, both pairings;
 *   3. the frozen objective equals the true one at the freezing point;
 *   4. the plain reconstruction objective (Table 7 ablation): value and
 *      gradients likewise;
 *   5. determinism: init + 6 AdamW steps give bit-identical parameters with
 *      1 and 2 threads; and the held-out objective of the best step is not
 *      above the initial one;
 *   6. the content path's fast attention (per-head, causal row blocks of 64
 *      queries) on sequences of 150 and 70 tokens (several blocks, ragged
 *      last block): objective against the naive reference, gradient against
 *      the absorbed-form reference implementation (attn_reference) and
 *      against central differences; one sequence on 2 threads (heads split
 *      over threads) bit-identical to 1 thread;
 *   7. the attention in double (attn_f64) on the same sequences: objective
 *      against the naive double reference (1e-5, tighter than float32's
 *      1e-4) and the float32 path, gradient against the float32 path and
 *      central differences; 2 threads bit-identical to 1; refused together
 *      with attn_reference, naming both.
 * Shapes: H 3, T 19 and 13, d_c 16 (group 8: two groups), d_r 8, d_n 5,
 * d_v 6, D 10. Run: meson test -C build test_learn */
#include <gsl/gsl_linalg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "naive.h"
#include "qmla/learn.h"
#include "qmla/transform.h"

enum { H = 3, DC = 16, DN = 5, DR = 8, DV = 6, DD = 10, NSEQ = 2 };
static size_t TS[NSEQ] = {19, 13}; /* check_fast_path uses longer ones */

typedef struct problem {
    naive_case c[NSEQ]; /* shared weights (c[0]'s), own caches and queries */
    float *gamma;
    qmla_learn_bank bank;
    const float *C[NSEQ], *K[NSEQ], *qn[NSEQ], *qr[NSEQ];
} problem;

static void problem_init(problem *p, unsigned seed)
{
    for (int k = 0; k < NSEQ; k++) {
        naive_case_init(&p->c[k], H, TS[k], DC, DN, DR, DV, DD, seed + 17 * k);
        p->C[k] = p->c[k].C;
        p->K[k] = p->c[k].K;
        p->qn[k] = p->c[k].q_nope;
        p->qr[k] = p->c[k].q_rope;
        if (k) { /* one model: the weights of sequence 0 */
            memcpy(p->c[k].w_uk, p->c[0].w_uk, H * DN * DC * 4);
            memcpy(p->c[k].w_uv, p->c[0].w_uv, H * DV * DC * 4);
            memcpy(p->c[k].w_o, p->c[0].w_o, DD * H * DV * 4);
        }
    }
    for (size_t t = 0; t < TS[0]; t++) /* an outlier channel */
        p->c[0].C[t * DC + 3] *= 6.0f;
    p->gamma = malloc(DC * 4);
    for (int j = 0; j < DC; j++)
        p->gamma[j] = (float)((j % 5 == 2 ? -1 : 1) * (0.3 + naive_uniform()));
    p->bank.n = NSEQ;
    p->bank.T = TS;
    p->bank.C = p->C;
    p->bank.K = p->K;
    p->bank.q_nope = p->qn;
    p->bank.q_rope = p->qr;
}

static void problem_free(problem *p)
{
    for (int k = 0; k < NSEQ; k++)
        naive_case_free(&p->c[k]);
    free(p->gamma);
}

/* A train problem p and a held-out one q: other sequences, p's weights. */
static void problem_pair_init(problem *p, problem *q, unsigned sp, unsigned sq)
{
    problem_init(p, sp);
    problem_init(q, sq);
    for (int k = 0; k < NSEQ; k++) {
        memcpy(q->c[k].w_uk, p->c[0].w_uk, H * DN * DC * 4);
        memcpy(q->c[k].w_uv, p->c[0].w_uv, H * DV * DC * 4);
        memcpy(q->c[k].w_o, p->c[0].w_o, DD * H * DV * 4);
    }
}

static qmla_mla_dims dims(const problem *p)
{
    qmla_mla_dims d = {H, DD, DC, DN, DR, DV, p->c[0].tau};
    return d;
}

static qmla_learn_opts opts(int threads)
{
    qmla_learn_opts o = qmla_learn_defaults();
    o.quant.group = 8;
    o.quant.bits = 4;
    o.steps = 20;
    o.lr = 2e-2;
    o.threads = threads;
    return o;
}

/* R = D_γ (I − S)^-1 (I + S) with GSL's LU inverse. */
static void cayley_ref(const double *par, const float *gamma, double *R)
{
    gsl_matrix *A = gsl_matrix_alloc(DC, DC), *Ai = gsl_matrix_alloc(DC, DC);
    gsl_permutation *pm = gsl_permutation_alloc(DC);
    double S[DC][DC];
    memset(S, 0, sizeof S);
    size_t k = 0;
    for (int i = 0; i < DC; i++)
        for (int j = i + 1; j < DC; j++, k++) {
            S[i][j] = par[k];
            S[j][i] = -par[k];
        }
    for (int i = 0; i < DC; i++)
        for (int j = 0; j < DC; j++)
            gsl_matrix_set(A, i, j, (i == j) - S[i][j]);
    int sg;
    gsl_linalg_LU_decomp(A, pm, &sg);
    gsl_linalg_LU_invert(A, pm, Ai);
    for (int i = 0; i < DC; i++)
        for (int j = 0; j < DC; j++) {
            double s = 0;
            for (int m = 0; m < DC; m++)
                s += gsl_matrix_get(Ai, i, m) * ((m == j) + S[m][j]);
            R[i * DC + j] = (gamma[i] < 0 ? -1 : 1) * s;
        }
    gsl_matrix_free(A);
    gsl_matrix_free(Ai);
    gsl_permutation_free(pm);
}

static double content_ref(problem *p, const double *par, const qmla_learn_opts *o)
{
    qmla_error err;
    qmla_transform t;
    qmla_transform_alloc(DC, DR, QMLA_ROPE_INTERLEAVED, &t, &err);
    cayley_ref(par, p->gamma, t.rot);
    size_t np = DC * (DC - 1) / 2;
    for (int j = 0; j < DC; j++)
        t.cscale[j] = exp(par[np + j]);
    qmla_exec ex = qmla_exec_cpu(1);
    double L = 0;
    for (int k = 0; k < NSEQ; k++) {
        size_t T = TS[k];
        float *w = malloc(T * DC * 4), *Ce = malloc(T * DC * 4);
        qmla_transform_effective_content(&ex, &t, p->gamma, &o->quant, p->C[k], T, 0, 0, w, Ce, &err);
        naive_case c = p->c[k];
        double *Y0 = malloc(T * DD * 8), *Y1 = malloc(T * DD * 8);
        naive_forward(&c, c.C, c.K, Y0, NULL);
        naive_forward(&c, Ce, c.K, Y1, NULL);
        double e = 0, y = naive_sumsq(Y0, T * DD);
        for (size_t i = 0; i < T * DD; i++)
            e += (Y1[i] - Y0[i]) * (Y1[i] - Y0[i]);
        L += e / fmax(y, T * DD * 1e-8) / NSEQ;
        free(w); free(Ce); free(Y0); free(Y1);
    }
    qmla_transform_free(&t);
    return L;
}

static double rope_ref(problem *p, const double *par, qmla_rope_pairing pp, const qmla_learn_opts *o)
{
    qmla_error err;
    qmla_transform t;
    qmla_transform_alloc(DC, DR, pp, &t, &err);
    for (int i = 0; i < DR / 2; i++) {
        t.angle[i] = par[i];
        t.rscale[i] = exp(par[DR / 2 + i]);
    }
    double L = 0;
    for (int k = 0; k < NSEQ; k++) {
        size_t T = TS[k];
        float *w = malloc(T * DR * 4), *Ke = malloc(T * DR * 4);
        qmla_transform_effective_rope(&t, &o->quant, p->K[k], T, 0, 0, w, Ke, &err);
        double num = 0, den = 0;
        for (int h = 0; h < H; h++)
            for (size_t i = 0; i < T; i++)
                for (size_t s = 0; s <= i; s++) {
                    double z = 0, z1 = 0;
                    for (int j = 0; j < DR; j++) {
                        double q = p->qr[k][(h * T + i) * DR + j];
                        z += q * p->K[k][s * DR + j];
                        z1 += q * Ke[s * DR + j];
                    }
                    num += (z1 - z) * (z1 - z);
                    den += z * z;
                }
        L += num / fmax(den, 1e-8) / NSEQ;
        free(w); free(Ke);
    }
    qmla_transform_free(&t);
    return L;
}

/* FD along directions restricted to [lo, hi) of the parameter vector. */
static void fd_check(qmla_learner *l, const double *par, size_t lo, size_t hi, double eps,
                     const char *what)
{
    qmla_error err;
    size_t n = qmla_learner_n_params(l);
    double *g = malloc(n * 8), *v = malloc(n * 8), *pp = malloc(n * 8), f0, fp, fm;
    CHECK_OK(qmla_learner_freeze(l, 0, par, &err), err);
    CHECK_OK(qmla_learner_objective(l, 0, par, g, 1, &f0, &err), err);
    double ft;
    CHECK_OK(qmla_learner_objective(l, 0, par, NULL, 0, &ft, &err), err);
    CHECK(fabs(ft - f0) <= 1e-5 * ft, "%s: frozen objective %.9g vs true %.9g", what, f0, ft);
    double worst = 0;
    for (int rep = 0; rep < 4; rep++) {
        double gv = 0;
        for (size_t i = 0; i < n; i++) {
            v[i] = (i >= lo && i < hi) ? naive_gauss() : 0.0;
            gv += g[i] * v[i];
        }
        for (size_t i = 0; i < n; i++)
            pp[i] = par[i] + eps * v[i];
        CHECK_OK(qmla_learner_objective(l, 0, pp, NULL, 1, &fp, &err), err);
        for (size_t i = 0; i < n; i++)
            pp[i] = par[i] - eps * v[i];
        CHECK_OK(qmla_learner_objective(l, 0, pp, NULL, 1, &fm, &err), err);
        double fd = (fp - fm) / (2 * eps);
        double rel = fabs(fd - gv) / fmax(fabs(fd), 1e-3 * f0);
        worst = fmax(worst, rel);
        CHECK(rel < 2e-2, "%s: directional derivative %.6g vs central FD %.6g (rel %.3g)", what, gv, fd, rel);
    }
    printf("%-34s f %.5g, worst rel. gradient error %.2e\n", what, f0, worst);
    free(g); free(v); free(pp);
}

static void check_content(void)
{
    problem p;
    problem_init(&p, 5);
    qmla_mla_dims d = dims(&p);
    qmla_mla_weights w = {p.c[0].w_uk, p.c[0].w_uv, p.c[0].w_o};
    qmla_learn_opts o = opts(1);
    qmla_error err;
    qmla_learner *l = NULL;
    CHECK_OK(qmla_learner_alloc(QMLA_LEARN_CONTENT, &d, &w, p.gamma, QMLA_ROPE_INTERLEAVED, &p.bank,
                                NULL, &o, &l, &err), err);
    if (!l)
        return;
    size_t n = qmla_learner_n_params(l), ns = DC * (DC - 1) / 2;
    CHECK(n == ns + DC, "content parameters %zu", n);
    double *par = malloc(n * 8);
    for (size_t i = 0; i < ns; i++)
        par[i] = 0.3 * naive_gauss();
    for (int j = 0; j < DC; j++)
        par[ns + j] = log(fabs(p.gamma[j])) + 0.3 * naive_gauss();
    double f;
    CHECK_OK(qmla_learner_objective(l, 0, par, NULL, 0, &f, &err), err);
    double ref = content_ref(&p, par, &o);
    CHECK(fabs(f - ref) <= 1e-4 * ref, "L_C %.9g vs naive %.9g", f, ref);
    printf("content objective %.6g (naive double reference %.6g)\n", f, ref);
    fd_check(l, par, 0, ns, 1e-3, "content: Cayley S");
    fd_check(l, par, ns, n, 1e-3, "content: log-scales");
    fd_check(l, par, 0, n, 1e-3, "content: all");
    /* at S = 0 too (the start of learning) */
    memset(par, 0, ns * 8);
    fd_check(l, par, 0, n, 1e-3, "content: S = 0");
    free(par);
    qmla_learner_free(l);
    problem_free(&p);
}

static void check_rope(qmla_rope_pairing pp)
{
    problem p;
    problem_init(&p, 9 + pp);
    qmla_mla_dims d = dims(&p);
    qmla_mla_weights w = {p.c[0].w_uk, p.c[0].w_uv, p.c[0].w_o};
    qmla_learn_opts o = opts(1);
    qmla_error err;
    qmla_learner *l = NULL;
    CHECK_OK(qmla_learner_alloc(QMLA_LEARN_ROPE, &d, &w, p.gamma, pp, &p.bank, NULL, &o, &l, &err), err);
    if (!l)
        return;
    size_t n = qmla_learner_n_params(l);
    CHECK(n == DR, "rope parameters %zu", n);
    double par[DR];
    for (int i = 0; i < DR; i++)
        par[i] = 0.7 * naive_gauss();
    double f;
    CHECK_OK(qmla_learner_objective(l, 0, par, NULL, 0, &f, &err), err);
    double ref = rope_ref(&p, par, pp, &o);
    CHECK(fabs(f - ref) <= 1e-4 * ref, "L_P %.9g vs naive %.9g", f, ref);
    printf("rope (%s) objective %.6g (reference %.6g)\n", qmla_rope_pairing_name(pp), f, ref);
    char what[64];
    snprintf(what, sizeof what, "rope %s: angles", qmla_rope_pairing_name(pp));
    fd_check(l, par, 0, DR / 2, 1e-3, what);
    snprintf(what, sizeof what, "rope %s: log-scales", qmla_rope_pairing_name(pp));
    fd_check(l, par, DR / 2, DR, 1e-3, what);
    qmla_learner_free(l);
    problem_free(&p);
}

/* init + 6 steps, threads 1 vs 2: identical parameters; best <= init. */
static void check_determinism(qmla_learn_path path)
{
    problem p, q;
    problem_pair_init(&p, &q, 21, 33);
    qmla_mla_dims d = dims(&p);
    qmla_mla_weights w = {p.c[0].w_uk, p.c[0].w_uv, p.c[0].w_o};
    double *res[2] = {NULL, NULL};
    size_t n = 0;
    for (int th = 1; th <= 2; th++) {
        qmla_learn_opts o = opts(th);
        o.seed = 4;
        qmla_error err;
        qmla_learner *l = NULL;
        CHECK_OK(qmla_learner_alloc(path, &d, &w, p.gamma, QMLA_ROPE_HALF, &p.bank, &q.bank, &o, &l, &err), err);
        if (!l)
            return;
        double a;
        CHECK_OK(qmla_learner_init(l, &a, &err), err);
        for (int s = 0; s < 6; s++)
            CHECK_OK(qmla_learner_iterate(l, &err), err);
        CHECK_OK(qmla_learner_finish(l, &err), err);
        qmla_learn_state st = qmla_learner_state(l);
        CHECK(st.best_held <= st.init_obj, "best held-out %.6g above init %.6g", st.best_held, st.init_obj);
        if (th == 1)
            printf("%s: init α %g, held-out %.5g -> best %.5g at step %zu\n",
                   path == QMLA_LEARN_CONTENT ? "content" : "rope", a, st.init_obj, st.best_held, st.best_step);
        n = qmla_learner_n_params(l);
        res[th - 1] = malloc(n * 8);
        memcpy(res[th - 1], qmla_learner_params(l), n * 8);
        qmla_learner_free(l);
    }
    CHECK(res[0] && res[1] && !memcmp(res[0], res[1], n * 8), "%s: parameters differ between 1 and 2 threads",
          path == QMLA_LEARN_CONTENT ? "content" : "rope");
    free(res[0]);
    free(res[1]);
    problem_free(&p);
    problem_free(&q);
}

/* The optimiser against a replica written from its documented rule: Adam
 * (beta 0.9 / 0.999, eps 1e-8, bias corrections 1 - beta^(k+1), no weight
 * decay) on the train gradient, the rate warmed up linearly over
 * W = ceil(warmup N) steps (lr (k+1)/W at step k < W) and then cosine-decayed
 * over the N - W remaining steps (lr (1 + cos(pi (k - W)/(N - W)))/2), and
 * the best step the one whose parameters gave the lowest held-out
 * objective (evaluated before each step and once after the last). Checked
 * after every step, for a schedule where W and N - W are both > 1 and for
 * one without warm-up. */
static void check_schedule(qmla_learn_path path, double warmup, size_t N)
{
    problem p, q;
    problem_pair_init(&p, &q, 41, 43);
    qmla_mla_dims d = dims(&p);
    qmla_mla_weights w = {p.c[0].w_uk, p.c[0].w_uv, p.c[0].w_o};
    qmla_learn_opts o = opts(1);
    o.steps = N;
    o.warmup = warmup;
    o.seed = 5;
    qmla_error err;
    qmla_learner *l = NULL;
    CHECK_OK(qmla_learner_alloc(path, &d, &w, p.gamma, QMLA_ROPE_HALF, &p.bank, &q.bank, &o, &l, &err), err);
    if (!l)
        return;
    CHECK_OK(qmla_learner_init(l, NULL, &err), err);
    const size_t n = qmla_learner_n_params(l), W = (size_t)ceil(warmup * (double)N);
    double *x = malloc(n * 8), *g = malloc(n * 8), *m = calloc(n, 8), *v = calloc(n, 8);
    memcpy(x, qmla_learner_params(l), n * 8);
    double best = INFINITY, worst = 0.0;
    size_t best_k = 0;
    for (size_t k = 0; k <= N; k++) {
        double fh = 0, ft = 0;
        CHECK_OK(qmla_learner_objective(l, 1, x, NULL, 0, &fh, &err), err);
        if (fh < best) {
            best = fh;
            best_k = k;
        }
        if (k == N)
            break;
        CHECK_OK(qmla_learner_objective(l, 0, x, g, 0, &ft, &err), err);
        const double lr = k < W ? o.lr * (double)(k + 1) / (double)W
                                : o.lr * 0.5 * (1.0 + cos(M_PI * (double)(k - W) / (double)(N - W)));
        for (size_t i = 0; i < n; i++) {
            m[i] = 0.9 * m[i] + 0.1 * g[i];
            v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
            const double mh = m[i] / (1.0 - pow(0.9, (double)(k + 1)));
            const double vh = v[i] / (1.0 - pow(0.999, (double)(k + 1)));
            x[i] -= lr * mh / (sqrt(vh) + 1e-8);
        }
        CHECK_OK(qmla_learner_iterate(l, &err), err);
        const double *y = qmla_learner_params(l);
        for (size_t i = 0; i < n; i++)
            worst = fmax(worst, fabs(y[i] - x[i]) / (fabs(x[i]) + 1e-6));
    }
    CHECK_OK(qmla_learner_finish(l, &err), err);
    qmla_learn_state st = qmla_learner_state(l);
    CHECK(worst <= 1e-9, "%s, warm-up %g of %zu steps: parameters off the replica by %.3e (relative)",
          path == QMLA_LEARN_CONTENT ? "content" : "rope", warmup, N, worst);
    CHECK(st.step == N && st.best_step == best_k && fabs(st.best_held - best) <= 1e-9 * fabs(best),
          "%s, warm-up %g of %zu steps: best step %zu (held %.9g), replica %zu (%.9g)",
          path == QMLA_LEARN_CONTENT ? "content" : "rope", warmup, N, st.best_step, st.best_held,
          best_k, best);
    free(x); free(g); free(m); free(v);
    qmla_learner_free(l);
    problem_free(&p);
    problem_free(&q);
}

/* The plain reconstruction objective (Table 7 ablation): value against
 * ‖X̃ − X‖²/‖X‖² computed here, gradients against central differences. */
static void check_recon(qmla_learn_path path)
{
    problem p;
    problem_init(&p, 41 + path);
    qmla_mla_dims d = dims(&p);
    qmla_mla_weights w = {p.c[0].w_uk, p.c[0].w_uv, p.c[0].w_o};
    qmla_learn_opts o = opts(1);
    o.recon = 1;
    qmla_error err;
    qmla_learner *l = NULL;
    CHECK_OK(qmla_learner_alloc(path, &d, &w, p.gamma, QMLA_ROPE_HALF, &p.bank, NULL, &o, &l, &err), err);
    if (!l)
        return;
    size_t n = qmla_learner_n_params(l), ns = DC * (DC - 1) / 2;
    double *par = malloc(n * 8);
    for (size_t i = 0; i < n; i++)
        par[i] = 0.3 * naive_gauss();
    if (path == QMLA_LEARN_CONTENT)
        for (int j = 0; j < DC; j++)
            par[ns + j] = log(fabs(p.gamma[j])) + 0.3 * naive_gauss();
    qmla_transform t;
    qmla_transform_alloc(DC, DR, QMLA_ROPE_HALF, &t, &err);
    if (path == QMLA_LEARN_CONTENT) {
        cayley_ref(par, p.gamma, t.rot);
        for (int j = 0; j < DC; j++)
            t.cscale[j] = exp(par[ns + j]);
    } else {
        for (int i = 0; i < DR / 2; i++) {
            t.angle[i] = par[i];
            t.rscale[i] = exp(par[DR / 2 + i]);
        }
    }
    qmla_exec ex = qmla_exec_cpu(1);
    double ref = 0;
    for (int k = 0; k < NSEQ; k++) {
        size_t T = TS[k], wd = path == QMLA_LEARN_CONTENT ? DC : DR;
        const float *X = path == QMLA_LEARN_CONTENT ? p.C[k] : p.K[k];
        float *wk = malloc(T * wd * 4), *Xe = malloc(T * wd * 4);
        if (path == QMLA_LEARN_CONTENT)
            qmla_transform_effective_content(&ex, &t, p.gamma, &o.quant, X, T, 0, 0, wk, Xe, &err);
        else
            qmla_transform_effective_rope(&t, &o.quant, X, T, 0, 0, wk, Xe, &err);
        double e = 0, den = 0;
        for (size_t i = 0; i < T * wd; i++) {
            e += ((double)Xe[i] - X[i]) * ((double)Xe[i] - X[i]);
            den += (double)X[i] * X[i];
        }
        ref += e / den / NSEQ;
        free(wk);
        free(Xe);
    }
    double f;
    CHECK_OK(qmla_learner_objective(l, 0, par, NULL, 0, &f, &err), err);
    CHECK(fabs(f - ref) <= 1e-4 * ref, "recon objective %.9g vs reference %.9g", f, ref);
    fd_check(l, par, 0, n, path == QMLA_LEARN_CONTENT ? 1e-3 : 1e-4,
             path == QMLA_LEARN_CONTENT ? "content, plain reconstruction" : "rope, plain reconstruction");
    qmla_transform_free(&t);
    free(par);
    qmla_learner_free(l);
    problem_free(&p);
}

/* The fast content path on several causal blocks (T 150 and 70). */
static void check_fast_path(void)
{
    size_t keep[NSEQ] = {TS[0], TS[1]};
    TS[0] = 150;
    TS[1] = 70;
    problem p;
    problem_init(&p, 57);
    qmla_mla_dims d = dims(&p);
    qmla_mla_weights w = {p.c[0].w_uk, p.c[0].w_uv, p.c[0].w_o};
    qmla_error err;
    qmla_learner *lf = NULL, *lr = NULL;
    qmla_learn_opts o = opts(1);
    CHECK_OK(qmla_learner_alloc(QMLA_LEARN_CONTENT, &d, &w, p.gamma, QMLA_ROPE_INTERLEAVED, &p.bank,
                                NULL, &o, &lf, &err), err);
    o.attn_reference = 1;
    CHECK_OK(qmla_learner_alloc(QMLA_LEARN_CONTENT, &d, &w, p.gamma, QMLA_ROPE_INTERLEAVED, &p.bank,
                                NULL, &o, &lr, &err), err);
    if (lf && lr) {
        size_t n = qmla_learner_n_params(lf), ns = DC * (DC - 1) / 2;
        double *par = malloc(n * 8), *gf = malloc(n * 8), *gr = malloc(n * 8), ff, fr;
        for (size_t i = 0; i < ns; i++)
            par[i] = 0.3 * naive_gauss();
        for (int j = 0; j < DC; j++)
            par[ns + j] = log(fabs(p.gamma[j])) + 0.3 * naive_gauss();
        CHECK_OK(qmla_learner_objective(lf, 0, par, gf, 0, &ff, &err), err);
        CHECK_OK(qmla_learner_objective(lr, 0, par, gr, 0, &fr, &err), err);
        double ref = content_ref(&p, par, &o);
        CHECK(fabs(ff - ref) <= 1e-4 * ref, "fast L_C %.9g vs naive %.9g", ff, ref);
        CHECK(fabs(ff - fr) <= 1e-5 * fr, "fast L_C %.9g vs reference path %.9g", ff, fr);
        double dn = 0, rn = 0;
        for (size_t i = 0; i < n; i++) {
            dn += (gf[i] - gr[i]) * (gf[i] - gr[i]);
            rn += gr[i] * gr[i];
        }
        CHECK(rn > 0 && sqrt(dn / rn) < 1e-4, "fast gradient vs reference path: rel. difference %.3g",
              sqrt(dn / rn));
        printf("fast content path, T 150/70: L_C %.6g (reference path %.6g, naive %.6g), "
               "gradient rel. difference %.2e\n", ff, fr, ref, sqrt(dn / rn));
        fd_check(lf, par, 0, n, 1e-3, "fast content path, T 150/70");
        free(par); free(gf); free(gr);
    }
    qmla_learner_free(lf);
    qmla_learner_free(lr);
    /* one sequence, 2 threads over heads vs 1 thread */
    p.bank.n = 1;
    double *g[2] = {NULL, NULL}, f[2] = {0, 0};
    size_t n = 0;
    for (int th = 1; th <= 2; th++) {
        qmla_learn_opts o2 = opts(th);
        qmla_learner *l = NULL;
        CHECK_OK(qmla_learner_alloc(QMLA_LEARN_CONTENT, &d, &w, p.gamma, QMLA_ROPE_INTERLEAVED, &p.bank,
                                    NULL, &o2, &l, &err), err);
        if (!l)
            break;
        n = qmla_learner_n_params(l);
        double *par = calloc(n, 8);
        for (size_t i = 0; i < n; i++)
            par[i] = 0.2 * naive_gauss();
        if (th == 2) /* same parameters as for 1 thread */
            memcpy(par, g[0] + n, n * 8);
        g[th - 1] = malloc(2 * n * 8);
        memcpy(g[th - 1] + n, par, n * 8);
        CHECK_OK(qmla_learner_objective(l, 0, par, g[th - 1], 0, &f[th - 1], &err), err);
        free(par);
        qmla_learner_free(l);
    }
    CHECK(g[0] && g[1] && f[0] == f[1] && !memcmp(g[0], g[1], n * 8),
          "fast content path: one sequence on 2 threads differs from 1 thread");
    free(g[0]);
    free(g[1]);
    p.bank.n = NSEQ;
    problem_free(&p);
    TS[0] = keep[0];
    TS[1] = keep[1];
}

static void check_f64(void)
{
    size_t keep[NSEQ] = {TS[0], TS[1]};
    TS[0] = 150;
    TS[1] = 70;
    problem p;
    problem_init(&p, 61);
    qmla_mla_dims d = dims(&p);
    qmla_mla_weights w = {p.c[0].w_uk, p.c[0].w_uv, p.c[0].w_o};
    qmla_error err;
    qmla_learner *l32 = NULL, *l64 = NULL, *l64b = NULL, *bad = NULL;
    qmla_learn_opts o = opts(1);
    CHECK_OK(qmla_learner_alloc(QMLA_LEARN_CONTENT, &d, &w, p.gamma, QMLA_ROPE_INTERLEAVED, &p.bank,
                                NULL, &o, &l32, &err), err);
    o.attn_f64 = 1;
    CHECK_OK(qmla_learner_alloc(QMLA_LEARN_CONTENT, &d, &w, p.gamma, QMLA_ROPE_INTERLEAVED, &p.bank,
                                NULL, &o, &l64, &err), err);
    qmla_learn_opts o2 = opts(2);
    o2.attn_f64 = 1;
    CHECK_OK(qmla_learner_alloc(QMLA_LEARN_CONTENT, &d, &w, p.gamma, QMLA_ROPE_INTERLEAVED, &p.bank,
                                NULL, &o2, &l64b, &err), err);
    /* refused with the reference form, naming both */
    qmla_learn_opts o3 = o;
    o3.attn_reference = 1;
    qmla_error_clear(&err);
    const int sb = qmla_learner_alloc(QMLA_LEARN_CONTENT, &d, &w, p.gamma, QMLA_ROPE_INTERLEAVED,
                                      &p.bank, NULL, &o3, &bad, &err);
    CHECK(sb == QMLA_EINVAL && !bad && strstr(err.msg, "attn_f64") &&
              strstr(err.msg, "attn_reference"),
          "attn_f64 with attn_reference: expected EINVAL naming both, found %d \"%s\"", sb, err.msg);
    if (l32 && l64 && l64b) {
        size_t n = qmla_learner_n_params(l64), ns = DC * (DC - 1) / 2;
        double *par = malloc(n * 8), *g32 = malloc(n * 8), *g64 = malloc(n * 8),
               *g64b = malloc(n * 8), f32, f64, f64b;
        for (size_t i = 0; i < ns; i++)
            par[i] = 0.3 * naive_gauss();
        for (int j = 0; j < DC; j++)
            par[ns + j] = log(fabs(p.gamma[j])) + 0.3 * naive_gauss();
        CHECK_OK(qmla_learner_objective(l32, 0, par, g32, 0, &f32, &err), err);
        CHECK_OK(qmla_learner_objective(l64, 0, par, g64, 0, &f64, &err), err);
        CHECK_OK(qmla_learner_objective(l64b, 0, par, g64b, 0, &f64b, &err), err);
        const double ref = content_ref(&p, par, &o);
        CHECK(fabs(f64 - ref) <= 1e-5 * ref, "double L_C %.12g vs naive %.12g (rel %.2g)", f64, ref,
              fabs(f64 - ref) / ref);
        CHECK(fabs(f64 - f32) <= 1e-4 * f32 && f64 != f32,
              "double L_C %.12g vs float32 %.12g: within 1e-4, and computed otherwise", f64, f32);
        double dn = 0, rn = 0;
        for (size_t i = 0; i < n; i++) {
            dn += (g64[i] - g32[i]) * (g64[i] - g32[i]);
            rn += g64[i] * g64[i];
        }
        CHECK(rn > 0 && sqrt(dn / rn) < 1e-4, "double gradient vs float32: rel. difference %.3g",
              sqrt(dn / rn));
        CHECK(f64 == f64b && !memcmp(g64, g64b, n * 8),
              "double attention: 2 threads differ from 1 thread");
        printf("double attention, T 150/70: L_C %.9g (float32 %.9g, naive %.9g: rel %.2e and "
               "%.2e), gradient vs float32 %.2e\n",
               f64, f32, ref, fabs(f64 - ref) / ref, fabs(f32 - ref) / ref, sqrt(dn / rn));
        fd_check(l64, par, 0, n, 1e-3, "double attention, T 150/70");
        free(par); free(g32); free(g64); free(g64b);
    }
    qmla_learner_free(l32);
    qmla_learner_free(l64);
    qmla_learner_free(l64b);
    problem_free(&p);
    TS[0] = keep[0];
    TS[1] = keep[1];
}

int main(void)
{
    qmla_blas_set_threads(1);
    check_content();
    check_rope(QMLA_ROPE_INTERLEAVED);
    check_rope(QMLA_ROPE_HALF);
    check_determinism(QMLA_LEARN_CONTENT);
    check_determinism(QMLA_LEARN_ROPE);
    check_recon(QMLA_LEARN_CONTENT);
    check_recon(QMLA_LEARN_ROPE);
    check_schedule(QMLA_LEARN_CONTENT, 0.3, 9);
    check_schedule(QMLA_LEARN_ROPE, 0.3, 9);
    check_schedule(QMLA_LEARN_ROPE, 0.0, 5);
    check_fast_path();
    check_f64();
    return check_summary("test_learn");
}
