/* solve.c — the exact grouped knapsack of `qmla allocate` and its budget
 * (contract: include/qmla/allocate.h; method: docs/allocate.md). A dynamic
 * program over layers on exact integer byte costs: D[l][c] = the least sum
 * of values of layers 0..l at reduced cost <= c. Floating-point addition is
 * monotone, so D is the exact minimum of the layer-order sums (the brute
 * force of tests/allocate/test_solve.c adds in the same order and must find
 * the same number bit for bit). */
#include "qmla/allocate.h"
#include "qmla/decode.h"
#include "qmla/kvcache.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DP_MAX_CELLS (1LL << 28)

static long long gcd_ll(long long a, long long b)
{
    while (b) {
        long long t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int qmla_alloc_solve(size_t L, size_t K, const long long *cost, const double *value,
                     long long cap, int *choice, double *total, long long *used,
                     qmla_error *err)
{
    if (!L || !K || !cost || !value || !choice)
        return qmla_error_set(err, QMLA_EINVAL, "knapsack: empty problem (%zu layers, %zu "
                              "candidates)", L, K);
    long long base = 0, g = 0, span = 0;
    for (size_t l = 0; l < L; l++) {
        long long lo = cost[l * K], hi = cost[l * K];
        for (size_t k = 0; k < K; k++) {
            const long long c = cost[l * K + k];
            if (c < 0 || c > (1LL << 50))
                return qmla_error_set(err, QMLA_EINVAL, "knapsack: layer %zu candidate %zu: "
                                      "cost %lld: expected 0..2^50", l, k, c);
            if (!isfinite(value[l * K + k]))
                return qmla_error_set(err, QMLA_EINVAL, "knapsack: layer %zu candidate %zu: "
                                      "value %g: expected a finite number", l, k,
                                      value[l * K + k]);
            lo = c < lo ? c : lo;
            hi = c > hi ? c : hi;
        }
        base += lo;
        span += hi - lo;
        for (size_t k = 0; k < K; k++)
            g = gcd_ll(g, cost[l * K + k] - lo);
    }
    if (cap < base)
        return qmla_error_set(err, QMLA_EINVAL, "budget %lld bytes: below the cheapest "
                              "assignment, %lld bytes (every layer at its cheapest candidate)",
                              cap, base);
    if (g == 0)
        g = 1;
    long long C = (cap - base) / g;
    if (C > span / g)
        C = span / g; /* beyond: every assignment fits */
    if ((long long)L * (C + 1) > DP_MAX_CELLS)
        return qmla_error_set(err, QMLA_ERANGE, "knapsack: %zu layers x %lld reduced byte "
                              "steps exceed the table limit 2^28", L, C + 1);
    const size_t W = (size_t)C + 1;
    double *D = malloc(W * sizeof *D), *N = malloc(W * sizeof *N);
    long long *Dc = malloc(W * sizeof *Dc), *Nc = malloc(W * sizeof *Nc);
    unsigned char *pick = malloc(L * W);
    long long *w = malloc(L * K * sizeof *w);
    if (!D || !N || !Dc || !Nc || !pick || !w) {
        free(D), free(N), free(Dc), free(Nc), free(pick), free(w);
        return qmla_error_set(err, QMLA_ENOMEM, "knapsack: out of memory (%zu x %zu)", L, W);
    }
    if (K > 255) {
        free(D), free(N), free(Dc), free(Nc), free(pick), free(w);
        return qmla_error_set(err, QMLA_EINVAL, "knapsack: %zu candidates: expected <= 255", K);
    }
    for (size_t l = 0; l < L; l++) {
        long long lo = cost[l * K];
        for (size_t k = 1; k < K; k++)
            lo = cost[l * K + k] < lo ? cost[l * K + k] : lo;
        for (size_t k = 0; k < K; k++)
            w[l * K + k] = (cost[l * K + k] - lo) / g;
    }
    /* D[c] over layers so far: least value at reduced cost <= c (INFINITY:
     * none), Dc the reduced cost of that best (the tie-break) */
    for (size_t c = 0; c < W; c++) {
        D[c] = 0.0;
        Dc[c] = 0;
    }
    for (size_t l = 0; l < L; l++) {
        for (size_t c = 0; c < W; c++) {
            double best = INFINITY;
            long long bc = 0;
            int bk = -1;
            for (size_t k = 0; k < K; k++) {
                const long long wk = w[l * K + k];
                if (wk > (long long)c || !isfinite(D[c - (size_t)wk]))
                    continue;
                const double v = D[c - (size_t)wk] + value[l * K + k];
                const long long vc = Dc[c - (size_t)wk] + wk;
                if (v < best || (v == best && vc < bc)) {
                    best = v;
                    bc = vc;
                    bk = (int)k;
                }
            }
            N[c] = best;
            Nc[c] = bc;
            pick[l * W + c] = (unsigned char)(bk < 0 ? 255 : bk);
        }
        memcpy(D, N, W * sizeof *D);
        memcpy(Dc, Nc, W * sizeof *Dc);
    }
    /* reconstruct from the full capacity */
    size_t c = W - 1;
    long long reached = 0;
    for (size_t l = L; l-- > 0;) {
        const int k = pick[l * W + c];
        choice[l] = k;
        reached += cost[l * K + (size_t)k];
        c -= (size_t)w[l * K + (size_t)k];
    }
    double sum = 0.0;
    for (size_t l = 0; l < L; l++)
        sum += value[l * K + (size_t)choice[l]];
    const double best = D[W - 1];
    free(D), free(N), free(Dc), free(Nc), free(pick), free(w);
    if (sum != best || reached > cap)
        return qmla_error_set(err, QMLA_EINTERNAL, "knapsack: reconstruction %.17g at %lld "
                              "bytes, table %.17g, cap %lld", sum, reached, best, cap);
    if (total)
        *total = best;
    if (used)
        *used = reached;
    return QMLA_OK;
}

/* One layer's integer bytes at context for bits (c, r), f16 metadata. */
static int layer_bytes(int c_bits, int r_bits, int d_c, int d_r, int sink, int window,
                       long context, long long *bytes, qmla_error *err)
{
    const qmla_kv_config kc = {c_bits, r_bits, 64, sink, window, QMLA_CORE_META_F16};
    qmla_storage_row row;
    int st = qmla_storage_account_dims(&kc, QMLA_CORE_META_F16, context, d_c, d_r, &row, err);
    if (st)
        return st;
    *bytes = llround(row.total_bytes);
    if ((double)*bytes != row.total_bytes)
        return qmla_error_set(err, QMLA_EINTERNAL, "storage: %.17g bytes is not an integer",
                              row.total_bytes);
    return QMLA_OK;
}

int qmla_alloc_layer_bytes(int c_bits, int r_bits, int d_c, int d_r, int sink, int window,
                           long context, long long *bytes, qmla_error *err)
{
    return layer_bytes(c_bits, r_bits, d_c, d_r, sink, window, context, bytes, err);
}

int qmla_alloc_budget(const char *s, int d_c, int d_r, int sink, int window, long context,
                      size_t n_layers, long long *cap, double *bytes_per_token,
                      qmla_error *err)
{
    if (!s || !*s)
        return qmla_error_set(err, QMLA_EINVAL, "--budget: expected bytes per token, a "
                              "config (C4R4) or <b>bits, found an empty value");
    const long double LT = (long double)n_layers * (long double)context;
    int cb, rb;
    qmla_error e2;
    if (s[0] == 'C' && qmla_alloc_parse_config(s, &cb, &rb, &e2) == QMLA_OK) {
        long long b;
        int st = layer_bytes(cb, rb, d_c, d_r, sink, window, context, &b, err);
        if (st)
            return st;
        *cap = b * (long long)n_layers;
        *bytes_per_token = (double)b / (double)context;
        return QMLA_OK;
    }
    char *end = NULL;
    const double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v <= 0)
        return qmla_error_set(err, QMLA_EINVAL, "--budget \"%s\": expected bytes per token (a "
                              "positive number), a config C<c>R<r> (c, r in 2, 3, 4, 8) or "
                              "<b>bits (e.g. 3.5bits)", s);
    if (!strcmp(end, "bits")) {
        if (v < 2 || v > 16)
            return qmla_error_set(err, QMLA_EINVAL, "--budget \"%s\": expected 2 to 16 bits "
                                  "per cached value", s);
        long long b4;
        int st = layer_bytes(4, 4, d_c, d_r, sink, window, context, &b4, err);
        if (st)
            return st;
        const long double per_layer =
            (long double)b4 + ((long double)v - 4.0L) * (long double)(d_c + d_r) / 8.0L *
                                  (long double)context;
        *cap = (long long)floorl(per_layer * (long double)n_layers);
        *bytes_per_token = (double)(per_layer / (long double)context);
        return QMLA_OK;
    }
    if (*end)
        return qmla_error_set(err, QMLA_EINVAL, "--budget \"%s\": expected bytes per token (a "
                              "positive number), a config C<c>R<r> (c, r in 2, 3, 4, 8) or "
                              "<b>bits (e.g. 3.5bits)", s);
    const long double c = (long double)v * LT;
    if (c > 9.0e18L)
        return qmla_error_set(err, QMLA_EINVAL, "--budget \"%s\": too large", s);
    *cap = (long long)floorl(c);
    *bytes_per_token = v;
    return QMLA_OK;
}
