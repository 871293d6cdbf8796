/* test_attention.c — MLA attention (absorbed form, block-causal BLAS) against
 * a naive double-precision implementation of the *non-absorbed* form:
 * k_nope[h] = C w_uk[h]^T, v[h] = C w_uv[h]^T, logits from q_nope·k_nope +
 * q_rope·k_rope, causal softmax, o = a v, y = concat(o) w_o^T.
 * Odd shapes: T in {1, 3, 17, 64, 65, 130}, H in {1, 5}, odd widths.
 * Large logits: queries scaled so that logits reach about +-200 (exp of a
 * raw logit overflows float32 above ~88) and shifted to about -100 with unit
 * spread (exp of a raw logit underflows below ~-87, rows turn uniform): the
 * probabilities must still equal the naive double softmax. */
#include "check.h"
#include "naive.h"
#include "qmla/attention.h"
#include "qmla/capture.h"
#include "qmla/norms.h"
#include "../lib/attention/attention_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void run_case(size_t H, size_t T, size_t dc, size_t dn, size_t dr,
                     size_t dv, size_t D, int threads, unsigned seed)
{
    naive_case c;
    naive_case_init(&c, H, T, dc, dn, dr, dv, D, seed);
    qmla_mla_dims d = {H, D, dc, dn, dr, dv, c.tau};
    qmla_mla_weights w = {c.w_uk, c.w_uv, c.w_o};
    qmla_attn_state ws;
    qmla_error err;
    qmla_error_clear(&err);
    int st = qmla_attn_state_alloc(&d, T, 0, &ws, &err);
    CHECK_OK(st, err);
    const float *Y = ws.Y;
    double *Yref = malloc(T * D * sizeof *Yref);
    const qmla_exec ex = qmla_exec_cpu(threads);
    st = qmla_attn_state_forward(&ex, &d, T, &w, c.q_nope, c.q_rope, c.C, c.K, &ws, &err);
    CHECK_OK(st, err);
    naive_forward(&c, c.C, c.K, Yref, NULL);
    double num = 0, den = 0;
    size_t worst = 0;
    double wv = 0;
    for (size_t i = 0; i < T * D; i++) {
        double e = (double)Y[i] - Yref[i];
        num += e * e;
        den += Yref[i] * Yref[i];
        if (fabs(e) > wv) {
            wv = fabs(e);
            worst = i;
        }
    }
    double rel = sqrt(num / den);
    CHECK(rel < 2e-6, "H=%zu T=%zu threads=%d: rel err %.3e (worst |d| %.3e at %zu)",
          H, T, threads, rel, wv, worst);
    /* attention rows sum to one and vanish above the diagonal */
    double maxdev = 0, maxup = 0;
    for (size_t h = 0; h < H; h++)
        for (size_t i = 0; i < T; i++) {
            double s = 0;
            for (size_t j = 0; j < T; j++) {
                double a = ws.A[(i * H + h) * T + j];
                if (j > i)
                    maxup = fmax(maxup, fabs(a));
                else
                    s += a;
            }
            maxdev = fmax(maxdev, fabs(s - 1.0));
        }
    CHECK(maxdev < 1e-5, "H=%zu T=%zu: softmax rows sum off by %.3e", H, T, maxdev);
    CHECK(maxup == 0.0, "H=%zu T=%zu: attention above the diagonal %.3e", H, T, maxup);
    free(Yref);
    qmla_attn_state_free(&ws);
    naive_case_free(&c);
}

/* Attention probabilities and output at large logits against the naive
 * double reference. mode 0: queries x `scale` (logits ~ N(0, scale^2));
 * mode 1: every logit shifted by `scale` (negative) through one constant
 * RoPE channel, spread ~1 around it. */
static void run_large_logits(int mode, double scale, unsigned seed)
{
    const size_t H = 3, T = 40, dc = 24, dn = 7, dr = 6, dv = 5, D = 11;
    naive_case c;
    naive_case_init(&c, H, T, dc, dn, dr, dv, D, seed);
    if (mode == 0) {
        for (size_t i = 0; i < H * T * dn; i++)
            c.q_nope[i] = (float)(c.q_nope[i] * scale);
        for (size_t i = 0; i < H * T * dr; i++)
            c.q_rope[i] = (float)(c.q_rope[i] * scale);
    } else {
        /* K[s][0] = 4 for every key, q_rope[h][i][0] = scale / (4 tau): every
         * logit gets + scale, the rest of the logit stays ~ N(0, 1) */
        for (size_t s = 0; s < T; s++)
            c.K[s * dr] = 4.0f;
        for (size_t k = 0; k < H * T; k++)
            c.q_rope[k * dr] = (float)(scale / (4.0 * c.tau));
    }
    qmla_mla_dims d = {H, D, dc, dn, dr, dv, c.tau};
    qmla_mla_weights w = {c.w_uk, c.w_uv, c.w_o};
    qmla_attn_state ws;
    qmla_error err;
    qmla_error_clear(&err);
    CHECK_OK(qmla_attn_state_alloc(&d, T, 1, &ws, &err), err);
    const qmla_exec ex = qmla_exec_cpu(1);
    CHECK_OK(qmla_attn_state_forward(&ex, &d, T, &w, c.q_nope, c.q_rope, c.C, c.K, &ws,
                                     &err), err);
    double *Aref = malloc(H * T * T * sizeof *Aref), *Yref = malloc(T * D * sizeof *Yref);
    naive_forward(&c, c.C, c.K, Yref, Aref);
    double zmin = INFINITY, zmax = -INFINITY, worst = 0.0, spread_max = 0.0;
    size_t at = 0;
    int finite = 1;
    for (size_t h = 0; h < H; h++)
        for (size_t i = 0; i < T; i++) {
            double rmin = INFINITY, rmax = -INFINITY;
            for (size_t s = 0; s <= i; s++) {
                const double z = ws.Z[(i * H + h) * T + s];
                zmin = fmin(zmin, z);
                zmax = fmax(zmax, z);
                rmin = fmin(rmin, z);
                rmax = fmax(rmax, z);
                const double a = ws.A[(i * H + h) * T + s];
                finite = finite && isfinite(a);
                const double e = fabs(a - Aref[(h * T + i) * T + s]);
                if (!(e <= worst)) {
                    worst = e;
                    at = (h * T + i) * T + s;
                }
            }
            spread_max = fmax(spread_max, rmax - rmin);
        }
    /* the inputs are what this test claims they are */
    if (mode == 0)
        CHECK(zmax > 150.0 && zmin < -150.0, "mode 0: logits span [%g, %g], "
              "expected beyond +-150", zmin, zmax);
    else
        CHECK(zmax < scale + 20 && zmin > scale - 20 && spread_max > 2.0,
              "mode 1: logits in [%g, %g] around %g (row spread %g)", zmin, zmax,
              scale, spread_max);
    CHECK(finite, "large logits (mode %d, %g): non-finite attention", mode, scale);
    CHECK(worst < 2e-3, "large logits (mode %d, %g): |A - A_ref| up to %.3e at %zu",
          mode, scale, worst, at);
    double num = 0, den = 0;
    for (size_t i = 0; i < T * D; i++) {
        const double e = (double)ws.Y[i] - Yref[i];
        num += e * e;
        den += Yref[i] * Yref[i];
    }
    CHECK(sqrt(num / den) < 1e-3, "large logits (mode %d, %g): output rel err %.3e",
          mode, scale, sqrt(num / den));
    free(Aref);
    free(Yref);
    qmla_attn_state_free(&ws);
    naive_case_free(&c);
}

/* The norms `qmla check` and the sweep report, on values worked by hand. */
static void test_norms(void)
{
    const float a[3] = {1.5f, -2.0f, 0.0f}, b[3] = {1.0f, -2.0f, 0.0f};
    const float z[3] = {0.0f, 0.0f, 0.0f};
    CHECK(qmla_sumsq(a, 3) == 6.25, "sumsq %g", qmla_sumsq(a, 3));
    CHECK(qmla_diff_sumsq(a, b, 3) == 0.25, "diff_sumsq %g", qmla_diff_sumsq(a, b, 3));
    /* |a - b| / |b| = 0.5 / sqrt(5) */
    CHECK(fabs(qmla_rel_fro(a, b, 3) - 0.5 / sqrt(5.0)) < 1e-15, "rel_fro %.17g",
          qmla_rel_fro(a, b, 3));
    CHECK(qmla_rel_fro(z, z, 3) == 0.0, "rel_fro of zeros");
    CHECK(isinf(qmla_rel_fro(a, z, 3)), "rel_fro against zeros is infinite");
}

static void test_rope_rotate(void)
{
    /* rotating by (cos, sin) then by (cos, -sin) is the identity; pairs as
     * declared: interleaved (0,1), half (0,2) for d_r = 4 */
    float pre[4] = {1, 2, 3, 4}, post[4], back[4];
    float cs[2] = {0.6f, 0.0f}, sn[2] = {0.8f, 1.0f}, nsn[2] = {-0.8f, -1.0f};
    qmla_rope_rotate(1, 1, 4, QMLA_ROPE_INTERLEAVED, cs, sn, pre, post);
    CHECK(fabsf(post[0] - (1 * 0.6f - 2 * 0.8f)) < 1e-6f, "interleaved a");
    CHECK(fabsf(post[1] - (1 * 0.8f + 2 * 0.6f)) < 1e-6f, "interleaved b");
    CHECK(fabsf(post[2] - (-4.0f)) < 1e-6f && fabsf(post[3] - 3.0f) < 1e-6f,
          "interleaved pair 1: %g %g", post[2], post[3]);
    qmla_rope_rotate(1, 1, 4, QMLA_ROPE_INTERLEAVED, cs, nsn, post, back);
    for (int i = 0; i < 4; i++)
        CHECK(fabsf(back[i] - pre[i]) < 1e-6f, "inverse rotation %d", i);
    qmla_rope_rotate(1, 1, 4, QMLA_ROPE_HALF, cs, sn, pre, post);
    CHECK(fabsf(post[0] - (1 * 0.6f - 3 * 0.8f)) < 1e-6f, "half a: %g", post[0]);
    CHECK(fabsf(post[2] - (1 * 0.8f + 3 * 0.6f)) < 1e-6f, "half b: %g", post[2]);
    CHECK(fabsf(post[1] - (-4.0f)) < 1e-6f && fabsf(post[3] - 2.0f) < 1e-6f,
          "half pair 1: %g %g", post[1], post[3]);
}

/* Fault: non-finite logits (inf - inf in the max subtraction gives NaN)
 * and logits far outside exp's range. Before the fix exp_neg converted NaN
 * to int (undefined behaviour, flagged by UBSan); now a row with a NaN or
 * +inf logit yields NaN weights (visible, never finite garbage), a row of
 * huge finite logits stays a valid distribution, and rows without
 * non-finite logits are unaffected. */
static void test_softmax_nonfinite(void)
{
    const size_t H = 1, T = 20;
    float Z[20 * 20], A[20 * 20];
    for (size_t i = 0; i < T * T; i++)
        Z[i] = (float)((i * 7) % 11) - 5.0f;
    for (size_t s = 0; s <= 10; s++)
        Z[10 * T + s] = s == 3 ? NAN : 1.0f;           /* row 10: a NaN */
    Z[12 * T + 5] = INFINITY;                          /* row 12: +inf */
    Z[13 * T + 0] = Z[13 * T + 1] = -INFINITY;         /* row 13: masked keys */
    for (size_t s = 0; s <= 15; s++)
        Z[15 * T + s] = s == 0 ? 3e38f : -3e38f;       /* row 15: huge, finite */
    const qmla_exec ex = qmla_exec_cpu(1);
    qmla_attn_softmax(&ex, H, T, Z, A);
    int nan10 = 0, nan12 = 0;
    for (size_t s = 0; s <= 10; s++)
        nan10 += isnan(A[10 * T + s]);
    for (size_t s = 0; s <= 12; s++)
        nan12 += isnan(A[12 * T + s]);
    CHECK(nan10 > 0, "a NaN logit must leave NaN in its row (found none)");
    CHECK(nan12 > 0, "an inf logit (inf - inf) must leave NaN in its row (found none)");
    double sum13 = 0.0;
    for (size_t s = 0; s <= 13; s++)
        sum13 += A[13 * T + s];
    CHECK(A[13 * T + 0] >= 0 && A[13 * T + 0] < 1e-30f && A[13 * T + 1] < 1e-30f &&
              fabs(sum13 - 1.0) < 1e-5,
          "-inf logits get weight ~0: %g %g, sum %g", A[13 * T + 0], A[13 * T + 1], sum13);
    double sum15 = 0.0;
    for (size_t s = 0; s <= 15; s++)
        sum15 += A[15 * T + s];
    CHECK(fabs(A[15 * T] - 1.0) < 1e-6 && fabs(sum15 - 1.0) < 1e-6,
          "huge finite logits: a[0] %g, sum %g", A[15 * T], sum15);
    for (size_t i = 0; i < 10; i++) {
        double sum = 0.0;
        for (size_t s = 0; s <= i; s++)
            sum += A[i * T + s];
        CHECK(fabs(sum - 1.0) < 1e-5, "finite row %zu sums to %g", i, sum);
    }
}

/* The sink/local policy of qmla_attn_mix_logits and qmla_attn_split
 * against the rule enumerated pair by pair: query i reads key s <= i packed
 * exactly when s >= S and i - s >= W (S sinks and the W most recent keys,
 * the query's own included, protected). S = 2, W = 3, T = 9, H = 2: the
 * pairs at i - s == W and at s == S are packed (mutants 2579, 2580). */
static void test_policy_masks(void)
{
    enum { H = 2, T = 9, S = 2, W = 3 };
    static float Z[T * H * T], Z2[T * H * T], orig[T * H * T];
    for (size_t k = 0; k < (size_t)T * H * T; k++) {
        Z[k] = 1.0f;
        Z2[k] = 2.0f;
    }
    qmla_attn_mix_logits(H, T, S, W, Z, Z2);
    int bad = 0;
    for (size_t i = 0; i < T; i++)
        for (size_t h = 0; h < H; h++)
            for (size_t s = 0; s < T; s++) {
                const int packed = s <= i && s >= S && i - s >= W;
                bad += Z[(i * H + h) * T + s] != (packed ? 2.0f : 1.0f);
            }
    CHECK(bad == 0, "mix_logits: %d (query, key) pairs read from the wrong copy", bad);
    for (size_t k = 0; k < (size_t)T * H * T; k++) {
        orig[k] = Z[k] = (float)(k + 1);
        Z2[k] = -1.0f;
    }
    qmla_attn_split(H, T, S, W, Z, Z2);
    bad = 0;
    for (size_t i = 0; i < T; i++)
        for (size_t h = 0; h < H; h++)
            for (size_t s = 0; s < T; s++) {
                const size_t k = (i * H + h) * T + s;
                const int packed = s <= i && s >= S && i - s >= W;
                bad += Z[k] != (packed ? 0.0f : orig[k]) || Z2[k] != (packed ? orig[k] : 0.0f);
            }
    CHECK(bad == 0, "split: %d (query, key) weights on the wrong side", bad);
}

int main(void)
{
    test_policy_masks();
    qmla_blas_set_threads(1); /* as the qmla program does */
    const size_t Ts[] = {1, 3, 17, 64, 65, 130};
    const size_t Hs[] = {1, 5};
    unsigned seed = 1;
    for (size_t a = 0; a < sizeof Ts / sizeof *Ts; a++)
        for (size_t b = 0; b < 2; b++)
            run_case(Hs[b], Ts[a], 24, 7, 6, 5, 11, 1, seed++);
    /* realistic widths, threaded */
    run_case(4, 96, 128, 32, 64, 32, 96, 2, 77);
    run_case(3, 70, 64, 16, 16, 16, 40, 3, 78);
    run_large_logits(0, 100.0, 91);
    run_large_logits(0, 100.0, 92);
    run_large_logits(1, -100.0, 93);
    run_large_logits(1, -200.0, 94);
    test_norms();
    test_rope_rotate();
    test_softmax_nonfinite();
    return check_summary("test_attention");
}
