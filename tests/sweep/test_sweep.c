/* test_sweep.c — invariants of the matched-NMSE responses (docs/math.md §3)
 * and the aggregation of responses into layer and model means.
 *  - scaling a cache by c and its consumers by 1/c leaves the responses
 *    unchanged: bit for bit for powers of two (every float operation scales
 *    exactly), to a stated tolerance for c = 3 (quantization codes can flip);
 *  - responses move only slowly with the target NMSE nu (finite, not local);
 *  - means: cell = mean over sequences, layer = mean over cells, model =
 *    mean over layers, ratio = mean R_P / mean R_C, degenerate excluded;
 *  - qmla_sweep_error_direction_par gives the serial form's direction,
 *    sums, flags, status and message bit for bit at every thread count. */
#include "check.h"
#include "core/alloc.h"
#include "naive.h"
#include "qmla/response.h"
#include "qmla/sweep.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const qmla_exec ex2 = {2}; /* two OpenMP threads */

typedef struct {
    size_t H, T, dc, dn, dr, dv, D;
} shape;

static void sweep(const naive_case *c, const float *w_uk, const float *w_uv,
                  const float *C, const float *K, const float *q_rope, double nu,
                  qmla_meta meta, qmla_response out[2])
{
    qmla_mla_dims d = {c->H, c->D, c->dc, c->dn, c->dr, c->dv, c->tau};
    qmla_mla_weights w = {w_uk, w_uv, c->w_o};
    qmla_sweep_params p = qmla_sweep_defaults();
    p.nmse = nu;
    p.quant.meta = meta;
    qmla_sweep_ws ws;
    qmla_error err;
    qmla_error_clear(&err);
    CHECK_OK(qmla_sweep_ws_alloc(&d, c->T, 0, &ws, &err), err);
    int st = qmla_sweep_sequence(&ex2, &p, &d, c->T, &w, c->q_nope, q_rope, C, K, 0, &ws,
                                 out, &err);
    CHECK_OK(st, err);
    qmla_sweep_ws_free(&ws);
}

static float *scaled(const float *x, size_t n, double s)
{
    float *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++)
        y[i] = (float)(x[i] * s);
    return y;
}

static double rel(double a, double b) { return fabs(a - b) / fabs(b); }

static void test_scale_invariance(double cs, double tol, qmla_meta meta)
{
    naive_case c;
    naive_case_init(&c, 4, 96, 128, 16, 64, 16, 48, 11);
    qmla_response base[2], sc[2];
    sweep(&c, c.w_uk, c.w_uv, c.C, c.K, c.q_rope, 0.01, meta, base);
    /* content: C -> cC, w_uk -> w_uk/c, w_uv -> w_uv/c */
    float *C2 = scaled(c.C, c.T * c.dc, cs);
    float *uk = scaled(c.w_uk, c.H * c.dn * c.dc, 1.0 / cs);
    float *uv = scaled(c.w_uv, c.H * c.dv * c.dc, 1.0 / cs);
    sweep(&c, uk, uv, C2, c.K, c.q_rope, 0.01, meta, sc);
    CHECK(rel(sc[0].response, base[0].response) <= tol,
          "content, c = %g: R %.10g vs %.10g (tol %g)", cs, sc[0].response,
          base[0].response, tol);
    CHECK(rel(sc[0].nmse_out_aggregation, base[0].nmse_out_aggregation) <= tol,
          "content aggregation route, c = %g", cs);
    /* RoPE: K -> cK, q_rope -> q_rope/c */
    float *K2 = scaled(c.K, c.T * c.dr, cs);
    float *qr = scaled(c.q_rope, c.H * c.T * c.dr, 1.0 / cs);
    sweep(&c, c.w_uk, c.w_uv, c.C, K2, qr, 0.01, meta, sc);
    CHECK(rel(sc[1].response, base[1].response) <= tol,
          "rope, c = %g: R %.10g vs %.10g (tol %g)", cs, sc[1].response,
          base[1].response, tol);
    free(C2);
    free(uk);
    free(uv);
    free(K2);
    free(qr);
    naive_case_free(&c);
}

/* Responses at nu = 1e-2, 1e-3, 1e-4: finite responses approach the local
 * gain as nu -> 0, so consecutive decades differ little, the smaller pair
 * less. Tolerances: 5 % between 1e-2 and 1e-3, 1 % between 1e-3 and 1e-4
 * (measured on these cases: see the printed values). */
static void test_nu_dependence(void)
{
    for (unsigned seed = 21; seed < 24; seed++) {
        naive_case c;
        naive_case_init(&c, 3, 80, 128, 16, 64, 16, 40, seed);
        qmla_response r2[2], r3[2], r4[2];
        sweep(&c, c.w_uk, c.w_uv, c.C, c.K, c.q_rope, 1e-2, QMLA_META_F16, r2);
        sweep(&c, c.w_uk, c.w_uv, c.C, c.K, c.q_rope, 1e-3, QMLA_META_F16, r3);
        sweep(&c, c.w_uk, c.w_uv, c.C, c.K, c.q_rope, 1e-4, QMLA_META_F16, r4);
        for (int p = 0; p < 2; p++) {
            printf("seed %u %-7s R(1e-2) %.6g  R(1e-3) %.6g  R(1e-4) %.6g\n", seed,
                   qmla_path_name(p), r2[p].response, r3[p].response, r4[p].response);
            CHECK(rel(r2[p].response, r3[p].response) < 0.05,
                  "%s: R(1e-2)/R(1e-3) - 1 = %.3g", qmla_path_name(p),
                  r2[p].response / r3[p].response - 1);
            CHECK(rel(r3[p].response, r4[p].response) < 0.01,
                  "%s: R(1e-3)/R(1e-4) - 1 = %.3g", qmla_path_name(p),
                  r3[p].response / r4[p].response - 1);
            CHECK(r2[p].response > 0, "positive response");
        }
        naive_case_free(&c);
    }
}

static qmla_response mk(int layer, const char *cell, int seq, int path, double R,
                        int deg)
{
    qmla_response r;
    memset(&r, 0, sizeof r);
    r.layer = layer;
    snprintf(r.cell, sizeof r.cell, "%s", cell);
    r.seq = seq;
    r.path = path;
    r.response = deg ? 0.0 : R;
    r.degenerate = deg;
    return r;
}

static void test_summary(void)
{
    /* layer 3: cell a seqs {1, 3} -> 2; cell b seqs {10} (+ a degenerate
     * one) -> 10; layer mean 6. rope: a {4} -> 4, b {8} -> 8 -> 6... */
    qmla_response r[] = {
        mk(3, "a", 0, 0, 1.0, 0),  mk(3, "a", 1, 0, 3.0, 0),
        mk(3, "b", 0, 0, 10.0, 0), mk(3, "b", 1, 0, 99.0, 1),
        mk(3, "a", 0, 1, 4.0, 0),  mk(3, "b", 0, 1, 8.0, 0),
        mk(3, "b", 1, 1, 0.0, 1),
        /* layer 1: content 2, rope 7 (only cell c) */
        mk(1, "c", 0, 0, 2.0, 0),  mk(1, "c", 0, 1, 7.0, 0),
    };
    qmla_summary s;
    qmla_error err;
    CHECK_OK(qmla_summary_compute(r, sizeof r / sizeof *r, &s, &err), err);
    CHECK(s.n_layers == 2 && s.layer[0] == 1 && s.layer[1] == 3,
          "layers sorted: %zu", s.n_layers);
    CHECK(fabs(s.response_content[1] - 6.0) < 1e-12, "layer 3 content %g",
          s.response_content[1]);
    CHECK(fabs(s.response_rope[1] - 6.0) < 1e-12, "layer 3 rope %g", s.response_rope[1]);
    CHECK(fabs(s.ratio[0] - 3.5) < 1e-12, "layer 1 ratio %g", s.ratio[0]);
    CHECK(fabs(s.model_response_content - 4.0) < 1e-12, "model content %g",
          s.model_response_content);
    CHECK(fabs(s.model_response_rope - 6.5) < 1e-12, "model rope %g",
          s.model_response_rope);
    CHECK(fabs(s.model_ratio - 6.5 / 4.0) < 1e-12, "model ratio %g (mean of ratios "
          "would be %g)", s.model_ratio, (1.0 + 3.5) / 2);
    CHECK(s.n_degenerate == 2, "degenerate count %zu", s.n_degenerate);
    qmla_summary_free(&s);
}

/* Row order and path names (lib/sweep/response.c): qmla_responses_sort
 * orders by (layer, cell, sequence, path), checked against every pair of an
 * enumerated set whose sequences and paths disagree in order (rows given
 * in reverse: (seq 1, content) must follow (seq 0, rope)); qmla_path_parse
 * takes exactly "content" and "rope" (mutants 2584, 2585). */
static void test_row_order(void)
{
    enum { N = 16 };
    qmla_response r[N];
    memset(r, 0, sizeof r);
    for (int k = 0; k < N; k++) {
        const int j = N - 1 - k; /* reverse order */
        r[k].layer = j / 8;
        snprintf(r[k].cell, sizeof r[k].cell, "%s", (j / 4) % 2 ? "b" : "a");
        r[k].seq = (j % 4) / 2;
        r[k].path = j % 2;
    }
    qmla_responses_sort(r, N);
    int bad = 0;
    for (int k = 0; k + 1 < N; k++) {
        const qmla_response *a = &r[k], *b = &r[k + 1];
        const int c = strcmp(a->cell, b->cell);
        const int le = a->layer < b->layer ||
                       (a->layer == b->layer && (c < 0 || (c == 0 && (a->seq < b->seq ||
                       (a->seq == b->seq && a->path <= b->path)))));
        bad += !le;
    }
    CHECK(bad == 0, "qmla_responses_sort: %d adjacent rows out of (layer, cell, seq, path) "
          "order", bad);
    CHECK(qmla_path_parse("content") == QMLA_PATH_CONTENT && qmla_path_parse("rope") ==
          QMLA_PATH_ROPE, "content/rope parse");
    CHECK(qmla_path_parse("ropeX") < 0 && qmla_path_parse("rop") < 0 &&
          qmla_path_parse("contentX") < 0 && qmla_path_parse("") < 0,
          "path names with a suffix or prefix accepted");
}

/* Uniform in [-1, 1) from a 64-bit LCG (the test's own stream). */
static float lcg_unit(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void test_direction_par(void)
{
    const size_t Ts[] = {1, 2, 3, 17, 64, 257, 512};
    const size_t widths[] = {64, 512, 8, 96};
    const int bitss[] = {4, 2, 8, 3};
    const qmla_meta metas[] = {QMLA_META_F16, QMLA_META_F32, QMLA_META_Q8, QMLA_META_F16};
    const int threads[] = {1, 2, 3, 7, 16};
    size_t cases = 0, differ = 0;
    uint64_t seed = 12345;
    for (size_t iw = 0; iw < sizeof widths / sizeof *widths; iw++)
        for (size_t it = 0; it < sizeof Ts / sizeof *Ts; it++)
            for (int kind = 0; kind < 4; kind++) {
                /* kind 0: random; 1: all zero (degenerate); 2: one NaN
                 * (an error naming its token); 3: tokens of very different
                 * scale */
                const size_t T = Ts[it], W = widths[iw], n = T * W;
                float *X = malloc(n * sizeof *X), *E0 = malloc(n * sizeof *E0),
                      *E1 = malloc(n * sizeof *E1);
                CHECK(X && E0 && E1, "out of memory");
                if (!X || !E0 || !E1)
                    return;
                for (size_t i = 0; i < n; i++)
                    X[i] = kind == 1 ? 0.0f : lcg_unit(&seed) *
                                                  (kind == 3 ? (float)(1u << (i / W % 9)) : 1.0f);
                if (kind == 2)
                    X[n - 1 - (n / 3)] = NAN;
                qmla_sweep_params p = qmla_sweep_defaults();
                p.quant.bits = bitss[iw];
                p.quant.meta = metas[iw];
                p.quant.group = W == 96 ? 32 : 64;
                p.nmse = 1e-3;
                double a[3], b[3];
                int dg0 = -1, dg1 = -1;
                qmla_error e0, e1;
                qmla_error_clear(&e0);
                const int s0 = qmla_sweep_error_direction(&p, X, T, W, E0, &a[0], &a[1], &a[2],
                                                          &dg0, &e0);
                for (size_t ith = 0; ith < sizeof threads / sizeof *threads; ith++) {
                    const qmla_exec ex = {threads[ith]};
                    qmla_error_clear(&e1);
                    memset(E1, 0x5a, n * sizeof *E1);
                    dg1 = -1;
                    const int s1 = qmla_sweep_error_direction_par(&ex, &p, X, T, W, E1, &b[0],
                                                                  &b[1], &b[2], &dg1, &e1);
                    cases++;
                    int same = s0 == s1 && !strcmp(e0.msg, e1.msg);
                    if (!s0)
                        same = same && !memcmp(E0, E1, n * sizeof *E0) &&
                               !memcmp(a, b, sizeof a) && dg0 == dg1;
                    differ += !same;
                    CHECK(same, "direction_par T %zu width %zu kind %d threads %d: status %d/%d "
                          "(\"%s\" / \"%s\"), same E %d, sums %.17g/%.17g, degenerate %d/%d",
                          T, W, kind, threads[ith], s0, s1, e0.msg, e1.msg,
                          !s0 && !memcmp(E0, E1, n * sizeof *E0), a[2], b[2], dg0, dg1);
                }
                if (kind == 2)
                    CHECK(s0 == QMLA_ENONFINITE, "NaN input: status %d, expected ENONFINITE", s0);
                if (kind == 1)
                    CHECK(!s0 && dg0 == 1, "zero input: status %d degenerate %d", s0, dg0);
                if (kind == 0 && !s0)
                    CHECK(dg0 == 0 && fabs(a[2] / 1e-3 - 1.0) < 1e-3,
                          "random input: cache NMSE %g, expected 1e-3", a[2]);
                free(X);
                free(E0);
                free(E1);
            }
    printf("direction_par: %zu cases (shape x input x threads), %zu differ from the serial "
           "form\n", cases, differ);
}

/* qmla_memcpy_par: the same bytes as memcpy for sizes around its 1 MiB
 * threshold and odd lengths, at several thread counts. */
static void test_memcpy_par(void)
{
    const size_t sizes[] = {0, 1, 1000, ((size_t)1 << 20) - 1, (size_t)1 << 20,
                            ((size_t)3 << 20) + 7};
    uint64_t seed = 99;
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
        for (int th = 1; th <= 16; th *= 3) {
            const size_t n = sizes[k];
            unsigned char *a = malloc(n + 1), *b = malloc(n + 1);
            CHECK(a && b, "out of memory");
            if (!a || !b)
                return;
            for (size_t i = 0; i < n; i++)
                a[i] = (unsigned char)(lcg_unit(&seed) * 127.0f + 128.0f);
            memset(b, 0xa5, n + 1);
            qmla_memcpy_par(b, a, n, th);
            CHECK(!memcmp(a, b, n) && b[n] == 0xa5, "memcpy_par %zu bytes, %d threads", n, th);
            free(a);
            free(b);
        }
}

int main(void)
{
    qmla_blas_set_threads(1);
    test_row_order();
    test_scale_invariance(4.0, 0.0, QMLA_META_F16);
    test_scale_invariance(0.125, 0.0, QMLA_META_F32);
    test_scale_invariance(3.0, 0.02, QMLA_META_F32);
    test_nu_dependence();
    test_summary();
    test_direction_par();
    test_memcpy_par();
    return check_summary("test_sweep");
}
