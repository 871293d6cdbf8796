/* test_dispersion.c — the dispersion of the sweep summary (docs/math.md
 * §3.1, qmla_summary_compute):
 *  - per-layer standard errors equal the two-stage formula computed by hand
 *    on values where the pooled formula, or counting a degenerate row,
 *    gives another number;
 *  - one sequence in a cell: no dispersion (NaN) for that layer and for the
 *    model means; degenerate layers are left out of the model bootstrap;
 *  - the bootstrap: its SE of a mean is within 5 % of the analytic SE on a
 *    large table (theory: sqrt((n-1)/n), Monte Carlo error 1/sqrt(2B));
 *    its ratio SE matches the delta method with the covariance of the two
 *    paths (one draw for both paths: a strongly correlated pair has a far
 *    smaller ratio SE than independent draws would give); 95 % intervals
 *    cover the true means and ratio in 90-98 % of 600 synthetic tables;
 *    the same seed gives the same bits, another seed other intervals; the
 *    row order does not matter; B = 0 leaves only the analytic SEs. */
#include "check.h"
#include "qmla/sweep.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static qmla_response mk(int layer, const char *cell, int seq, int path, double R, int deg)
{
    qmla_response r;
    memset(&r, 0, sizeof r);
    r.layer = layer;
    snprintf(r.cell, sizeof r.cell, "%s", cell);
    r.seq = seq;
    r.path = path;
    r.nmse_cache = 0.01;
    r.response = deg ? 0.0 : R;
    r.nmse_out = r.response * 0.01;
    r.degenerate = deg;
    return r;
}

/* xorshift64* and Box-Muller: an RNG of the test's own, not GSL's */
static uint64_t rs = 88172645463325252ULL;
static double unif(void)
{
    rs ^= rs >> 12;
    rs ^= rs << 25;
    rs ^= rs >> 27;
    return ((double)((rs * 2685821657736338717ULL) >> 11) + 0.5) / 9007199254740992.0;
}
static double gauss(void)
{
    return sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif());
}

static void test_two_stage(void)
{
    /* layer 0 content: a {1,3,5} (s^2 4, /3), b {10,14} (s^2 8, /2) and a
     * degenerate row: se = sqrt(4/3 + 4) / 2. rope: a {2,2,2}, b {4,8}:
     * se = sqrt(0 + 4) / 2 = 1. */
    qmla_response r[] = {
        mk(0, "a", 0, 0, 1.0, 0),  mk(0, "a", 1, 0, 3.0, 0), mk(0, "a", 2, 0, 5.0, 0),
        mk(0, "b", 0, 0, 10.0, 0), mk(0, "b", 1, 0, 14.0, 0), mk(0, "b", 2, 0, 1e3, 1),
        mk(0, "a", 0, 1, 2.0, 0),  mk(0, "a", 1, 1, 2.0, 0), mk(0, "a", 2, 1, 2.0, 0),
        mk(0, "b", 0, 1, 4.0, 0),  mk(0, "b", 1, 1, 8.0, 0), mk(0, "b", 2, 1, 6.0, 1),
    };
    qmla_summary s;
    qmla_error err;
    CHECK_OK(qmla_summary_compute(r, sizeof r / sizeof *r, &s, &err), err);
    const double want_c = sqrt(4.0 / 3.0 + 4.0) / 2.0, want_p = 1.0;
    /* wrong rules: pooled sd of the 5 values / sqrt(5); the degenerate row counted */
    CHECK(fabs(s.response_content_se[0] - want_c) < 1e-12, "content se %.15g, want %.15g",
          s.response_content_se[0], want_c);
    CHECK(fabs(s.response_rope_se[0] - want_p) < 1e-12, "rope se %.15g, want 1", s.response_rope_se[0]);
    CHECK(s.response_content_lo[0] <= s.response_content[0] &&
              s.response_content[0] <= s.response_content_hi[0],
          "interval [%g, %g] holds the mean %g", s.response_content_lo[0],
          s.response_content_hi[0], s.response_content[0]);
    /* the bootstrap cannot leave the range of cell means it resamples */
    CHECK(s.response_content_lo[0] >= (1.0 + 10.0) / 2 && s.response_content_hi[0] <= (5.0 + 14.0) / 2,
          "content interval [%g, %g] inside the resampling range", s.response_content_lo[0],
          s.response_content_hi[0]);
    CHECK(isfinite(s.ratio_se[0]) && isfinite(s.model_ratio_lo) &&
              s.model_ratio_lo <= s.model_ratio && s.model_ratio <= s.model_ratio_hi,
          "model ratio %g in [%g, %g]", s.model_ratio, s.model_ratio_lo, s.model_ratio_hi);
    CHECK(s.bootstrap_replicates == QMLA_SUMMARY_BOOTSTRAP_B &&
              s.bootstrap_seed == QMLA_SUMMARY_BOOTSTRAP_SEED,
          "B %zu seed %lu recorded", s.bootstrap_replicates, s.bootstrap_seed);
    qmla_summary_free(&s);

    /* B = 0: the analytic SEs only */
    CHECK_OK(qmla_summary_compute_boot(r, sizeof r / sizeof *r, 0, 1, &s, &err), err);
    CHECK(fabs(s.response_content_se[0] - want_c) < 1e-12 && isnan(s.response_content_lo[0]) &&
              isnan(s.model_response_content_se) && isnan(s.ratio_se[0]),
          "B = 0: se %g, lo %g, model se %g", s.response_content_se[0], s.response_content_lo[0],
          s.model_response_content_se);
    qmla_summary_free(&s);
}

static void test_single_and_degenerate(void)
{
    /* layer 0: two cells of two sequences; layer 1: cell b has one
     * non-degenerate sequence (the other degenerate); layer 2: rope all
     * degenerate (a degenerate layer) */
    qmla_response r[64];
    size_t n = 0;
    const double v[2][2] = {{1.0, 2.0}, {3.0, 5.0}};
    for (int L = 0; L < 3; L++)
        for (int c = 0; c < 2; c++)
            for (int q = 0; q < 2; q++)
                for (int p = 0; p < 2; p++) {
                    const int deg = (L == 1 && c == 1 && q == 1) || (L == 2 && p == 1);
                    r[n++] = mk(L, c ? "b" : "a", q, p, v[c][q] * (1 + p) + L, deg);
                }
    qmla_summary s;
    qmla_error err;
    CHECK_OK(qmla_summary_compute(r, n, &s, &err), err);
    CHECK(isfinite(s.response_content_se[0]) && isfinite(s.ratio_lo[0]), "layer 0 has a dispersion");
    CHECK(isnan(s.response_content_se[1]) && isnan(s.response_rope_se[1]) &&
              isnan(s.response_content_lo[1]) && isnan(s.ratio_se[1]) && isnan(s.ratio_hi[1]),
          "layer 1 (a cell with one sequence): se %g lo %g ratio se %g", s.response_content_se[1],
          s.response_content_lo[1], s.ratio_se[1]);
    CHECK(isfinite(s.response_content[1]), "layer 1 keeps its mean %g", s.response_content[1]);
    CHECK(s.degenerate[2] && isnan(s.ratio_se[2]) && isnan(s.ratio_lo[2]) &&
              isnan(s.response_rope_se[2]),
          "degenerate layer 2: ratio se %g", s.ratio_se[2]);
    CHECK(isnan(s.model_response_content_se) && isnan(s.model_ratio_lo) &&
              isnan(s.model_response_rope_hi),
          "model: layer 1 enters the means, so no model dispersion (se %g)",
          s.model_response_content_se);
    qmla_summary_free(&s);

    /* without layer 1: the degenerate layer 2 is left out of the model
     * bootstrap, which then equals that of layer 0 alone, bit for bit */
    qmla_response k[64], k0[64];
    size_t nk = 0, n0 = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].layer != 1)
            k[nk++] = r[i];
        if (r[i].layer == 0)
            k0[n0++] = r[i];
    }
    qmla_summary a, b;
    CHECK_OK(qmla_summary_compute(k, nk, &a, &err), err);
    CHECK_OK(qmla_summary_compute(k0, n0, &b, &err), err);
    CHECK(a.n_layers_in_model == 1 && isfinite(a.model_ratio_se) &&
              a.model_ratio_se == b.model_ratio_se && a.model_ratio_lo == b.model_ratio_lo &&
              a.model_response_content_hi == b.model_response_content_hi,
          "degenerate layer left out: model ratio se %g vs %g", a.model_ratio_se,
          b.model_ratio_se);
    qmla_summary_free(&a);
    qmla_summary_free(&b);
}

/* one layer, two cells of n sequences: content c ~ mu_c + sd_c N, rope
 * p = k c + sd_p N (correlated with the content through the sequence) */
static size_t synth(qmla_response *r, int layer, size_t n, const double mu_c[2], double sd_c,
                    double k, double sd_p)
{
    size_t m = 0;
    for (int c = 0; c < 2; c++)
        for (size_t q = 0; q < n; q++) {
            const double x = mu_c[c] + sd_c * gauss();
            r[m++] = mk(layer, c ? "cell-b" : "cell-a", (int)q, 0, x, 0);
            r[m++] = mk(layer, c ? "cell-b" : "cell-a", (int)q, 1, k * x + sd_p * gauss(), 0);
        }
    return m;
}

static void test_bootstrap_vs_theory(void)
{
    const size_t n = 200;
    qmla_response *r = malloc(4 * n * sizeof *r);
    const double mu[2] = {1.0, 2.0};
    const size_t m = synth(r, 0, n, mu, 0.3, 2.0, 0.05);
    qmla_summary s;
    qmla_error err;
    CHECK_OK(qmla_summary_compute(r, m, &s, &err), err);
    /* one layer: the model mean is the layer mean; bootstrap sd vs analytic */
    const double q_c = s.model_response_content_se / s.response_content_se[0];
    const double q_p = s.model_response_rope_se / s.response_rope_se[0];
    CHECK(fabs(q_c - 1.0) < 0.05 && fabs(q_p - 1.0) < 0.05,
          "bootstrap SE / analytic SE: content %.4f, rope %.4f (within 5 %%)", q_c, q_p);
    /* the ratio by the delta method with the two-stage covariance of the
     * paths: var(P/C) = (P/C)^2 (v_c/C^2 + v_p/P^2 - 2 cov/(C P)) */
    double cov = 0.0;
    for (int c = 0; c < 2; c++) {
        double sc = 0, sp = 0;
        for (size_t q = 0; q < n; q++) {
            sc += r[(c * n + q) * 2].response;
            sp += r[(c * n + q) * 2 + 1].response;
        }
        const double mc = sc / n, mp = sp / n;
        double x = 0;
        for (size_t q = 0; q < n; q++)
            x += (r[(c * n + q) * 2].response - mc) * (r[(c * n + q) * 2 + 1].response - mp);
        cov += x / (n - 1) / n;
    }
    cov /= 4.0; /* K = 2 cells */
    const double C = s.response_content[0], P = s.response_rope[0];
    const double vc = s.response_content_se[0] * s.response_content_se[0],
                 vp = s.response_rope_se[0] * s.response_rope_se[0];
    const double delta = (P / C) * sqrt(vc / (C * C) + vp / (P * P) - 2 * cov / (C * P));
    const double indep = (P / C) * sqrt(vc / (C * C) + vp / (P * P));
    CHECK(fabs(s.ratio_se[0] / delta - 1.0) < 0.08,
          "ratio SE %.4g vs delta method %.4g (independent draws would give about %.4g)",
          s.ratio_se[0], delta, indep);
    CHECK(indep > 3 * delta, "the test data tell shared from independent draws (%g vs %g)",
          indep, delta);
    CHECK(s.model_ratio_se == s.ratio_se[0], "one layer: model ratio se = layer ratio se");

    /* determinism, seeds, row order */
    qmla_summary a, b;
    CHECK_OK(qmla_summary_compute_boot(r, m, 500, 7, &a, &err), err);
    for (size_t i = m - 1; i > 0; i--) { /* shuffle */
        const size_t j = (size_t)(unif() * (double)(i + 1));
        qmla_response t = r[i];
        r[i] = r[j];
        r[j] = t;
    }
    CHECK_OK(qmla_summary_compute_boot(r, m, 500, 7, &b, &err), err);
    CHECK(a.model_ratio_lo == b.model_ratio_lo && a.model_response_content_se ==
              b.model_response_content_se && a.response_rope_hi[0] == b.response_rope_hi[0],
          "same seed, shuffled rows: the same bits");
    qmla_summary_free(&b);
    CHECK_OK(qmla_summary_compute_boot(r, m, 500, 8, &b, &err), err);
    CHECK(a.model_ratio_lo != b.model_ratio_lo && a.response_content_hi[0] != b.response_content_hi[0],
          "another seed: other intervals (%.17g vs %.17g)", a.model_ratio_lo, b.model_ratio_lo);
    CHECK(a.model_response_content == b.model_response_content && a.ratio[0] == b.ratio[0],
          "point estimates do not depend on the seed");
    qmla_summary_free(&a);
    qmla_summary_free(&b);
    qmla_summary_free(&s);
    free(r);
}

static void test_coverage(void)
{
    /* 600 tables of 2 layers x 2 cells x 30 sequences; true layer content
     * means (1 + 2)/2 and (2 + 4)/2 + ..., model mean and ratio known */
    const size_t n = 30, T = 600;
    qmla_response *r = malloc(8 * n * sizeof *r);
    size_t hit_c = 0, hit_q = 0, hit_l = 0;
    const double mu0[2] = {1.0, 2.0}, mu1[2] = {2.0, 4.0};
    for (size_t t = 0; t < T; t++) {
        size_t m = synth(r, 0, n, mu0, 0.4, 2.0, 0.3);
        m += synth(r + m, 1, n, mu1, 0.4, 3.0, 0.3);
        /* the second layer shares the sequences: same (cell, seq) ids */
        qmla_summary s;
        qmla_error err;
        CHECK_OK(qmla_summary_compute_boot(r, m, 1000, 100 + t, &s, &err), err);
        const double mc = (1.5 + 3.0) / 2, mp = (2.0 * 1.5 + 3.0 * 3.0) / 2;
        hit_c += s.model_response_content_lo <= mc && mc <= s.model_response_content_hi;
        hit_q += s.model_ratio_lo <= mp / mc && mp / mc <= s.model_ratio_hi;
        hit_l += s.response_rope_lo[1] <= 9.0 && 9.0 <= s.response_rope_hi[1];
        qmla_summary_free(&s);
    }
    const double fc = (double)hit_c / T, fq = (double)hit_q / T, fl = (double)hit_l / T;
    /* binomial sd at 600 draws: 0.9 %; the percentile bootstrap at n = 30
     * undercovers by about 1 % */
    CHECK(fc > 0.90 && fc < 0.98, "model content coverage %.3f", fc);
    CHECK(fq > 0.90 && fq < 0.98, "model ratio coverage %.3f", fq);
    CHECK(fl > 0.90 && fl < 0.98, "layer 1 rope coverage %.3f", fl);
    free(r);
}

int main(void)
{
    test_two_stage();
    test_single_and_degenerate();
    test_bootstrap_vs_theory();
    test_coverage();
    return check_summary("test_dispersion");
}
