/* test_solve.c — the exact knapsack of `qmla allocate` against brute force
 * over every assignment (random instances from a recorded seed, and the
 * real storage costs of the 16 candidates), the budget forms, and the
 * storage accounting for other widths against closed forms.
 * Run: meson test -C build test_solve */
#include "qmla/allocate.h"
#include "qmla/decode.h"
#include "qmla/kvcache.h"

#include "../support/check.h"
#include "../support/rng.h"

#include <math.h>
#include <stdint.h>

#define SEED 20261202u

/* Brute force: the least layer-order sum of values over assignments with
 * cost <= cap (ties: smaller cost); -1 when none fits. */
static int brute(size_t L, size_t K, const long long *cost, const double *val, long long cap,
                 double *best, long long *best_cost)
{
    size_t n = 1;
    for (size_t l = 0; l < L; l++)
        n *= K;
    int found = 0;
    for (size_t code = 0; code < n; code++) {
        size_t x = code;
        double s = 0.0;
        long long c = 0;
        for (size_t l = 0; l < L; l++) {
            const size_t k = x % K;
            x /= K;
            s += val[l * K + k];
            c += cost[l * K + k];
        }
        if (c > cap)
            continue;
        if (!found || s < *best || (s == *best && c < *best_cost)) {
            *best = s;
            *best_cost = c;
            found = 1;
        }
    }
    return found ? 0 : -1;
}

static void check_instance(const char *what, size_t L, size_t K, const long long *cost,
                           const double *val, long long cap)
{
    int choice[8];
    double total = 0;
    long long used = 0;
    qmla_error err;
    double bb = 0;
    long long bc = 0;
    const int bf = brute(L, K, cost, val, cap, &bb, &bc);
    const int st = qmla_alloc_solve(L, K, cost, val, cap, choice, &total, &used, &err);
    if (bf) {
        CHECK(st == QMLA_EINVAL, "%s: infeasible cap %lld: status %d", what, cap, st);
        return;
    }
    CHECK(st == QMLA_OK, "%s: status %d: %s", what, st, err.msg);
    if (st)
        return;
    double s = 0;
    long long c = 0;
    for (size_t l = 0; l < L; l++) {
        s += val[l * K + (size_t)choice[l]];
        c += cost[l * K + (size_t)choice[l]];
    }
    CHECK(total == bb, "%s: DP %.17g, brute force %.17g (L %zu K %zu cap %lld)", what, total, bb,
          L, K, cap);
    CHECK(s == total && c == used, "%s: choice sums to %.17g / %lld, reported %.17g / %lld", what,
          s, c, total, used);
    CHECK(c <= cap, "%s: cost %lld above cap %lld", what, c, cap);
    CHECK(c == bc, "%s: tie-break cost %lld, brute force %lld", what, c, bc);
}

static void random_instances(void)
{
    check_rng_seed(SEED);
    long long cost[8 * 8];
    double val[8 * 8];
    for (int it = 0; it < 400; it++) {
        const size_t L = 1 + (size_t)(unif() * 5), K = 1 + (size_t)(unif() * 6);
        const long long unit = it % 2 ? 1 : 1 + (long long)(unif() * 50);
        long long lo = 0, hi = 0;
        for (size_t l = 0; l < L; l++) {
            long long mn = 0, mx = 0;
            for (size_t k = 0; k < K; k++) {
                cost[l * K + k] = unit * (long long)(unif() * 40) + (it % 3 ? 7 : 0);
                /* log-uniform errors; every fourth instance has ties */
                val[l * K + k] = it % 4 == 3 ? (double)(int)(unif() * 3)
                                             : exp(-12.0 * unif());
                mn = k == 0 || cost[l * K + k] < mn ? cost[l * K + k] : mn;
                mx = k == 0 || cost[l * K + k] > mx ? cost[l * K + k] : mx;
            }
            lo += mn;
            hi += mx;
        }
        /* caps from below the minimum to above the maximum */
        const long long cap = lo - 2 + (long long)(unif() * (double)(hi - lo + 5));
        char what[64];
        snprintf(what, sizeof what, "random instance %d", it);
        check_instance(what, L, K, cost, val, cap);
    }
}

/* The 16 candidates' real bytes (tiny-mla: d_c 256, d_r 64, context 512). */
static void storage_instances(void)
{
    static const int cb[16] = {2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 8, 8, 8, 8};
    static const int rb[16] = {2, 3, 4, 8, 2, 3, 4, 8, 2, 3, 4, 8, 2, 3, 4, 8};
    const size_t L = 4, K = 16;
    long long cost[4 * 16];
    double val[4 * 16];
    qmla_error err;
    check_rng_seed(SEED + 1);
    for (size_t l = 0; l < L; l++)
        for (size_t k = 0; k < K; k++) {
            int st = qmla_alloc_layer_bytes(cb[k], rb[k], 256, 64, 0, 0, 512, &cost[l * K + k], &err);
            CHECK_OK(st, err);
            /* a made-up model: error falling ~4x per bit, per-layer and per-path scales */
            val[l * K + k] = exp(-1.4 * cb[k]) * (1 + 9 * unif()) + exp(-1.4 * rb[k]) * (1 + 9 * unif());
        }
    const char *budgets[] = {"2.5bits", "3bits", "3.5bits", "C4R4", "4.5bits", "100.07", "C8R8"};
    for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++) {
        long long cap;
        double bpt;
        int st = qmla_alloc_budget(budgets[b], 256, 64, 0, 0, 512, L, &cap, &bpt, &err);
        CHECK_OK(st, err);
        char what[64];
        snprintf(what, sizeof what, "storage costs, budget %s", budgets[b]);
        check_instance(what, L, K, cost, val, cap);
    }
}

static void budgets_and_storage(void)
{
    qmla_error err;
    long long cap = 0, b = 0;
    double bpt = 0;
    /* closed forms, tiny-mla dims, policy none, context 512 (8 pages):
     * C4R4 = (128 + 32 + 4*(4+1)) * 512 + 4*8; C3R3 = (96 + 24 + 20) * 512 + 32 */
    CHECK_OK(qmla_alloc_layer_bytes(4, 4, 256, 64, 0, 0, 512, &b, &err), err);
    CHECK(b == 180LL * 512 + 32, "C4R4 bytes %lld", b);
    CHECK_OK(qmla_alloc_budget("C4R4", 256, 64, 0, 0, 512, 6, &cap, &bpt, &err), err);
    CHECK(cap == 6 * (180LL * 512 + 32) && fabs(bpt - 180.0625) < 1e-12, "C4R4 cap %lld bpt %g", cap, bpt);
    CHECK_OK(qmla_alloc_budget("3bits", 256, 64, 0, 0, 512, 6, &cap, &bpt, &err), err);
    CHECK(cap == 6 * (140LL * 512 + 32), "3bits cap %lld, expected C3R3's", cap);
    CHECK_OK(qmla_alloc_budget("2.5bits", 256, 64, 0, 0, 512, 6, &cap, &bpt, &err), err);
    CHECK(cap == 6 * (120LL * 512 + 32), "2.5bits cap %lld", cap);
    CHECK_OK(qmla_alloc_budget("150.5", 256, 64, 0, 0, 512, 6, &cap, &bpt, &err), err);
    CHECK(cap == 150.5 * 6 * 512 && bpt == 150.5, "150.5 cap %lld", cap);
    /* protection: sink4/local128 adds 132 * 320 * 2 bytes per sequence */
    CHECK_OK(qmla_alloc_layer_bytes(2, 4, 256, 64, 4, 128, 512, &b, &err), err);
    CHECK(b == (64 + 32 + 20) * 512LL + 32 + 132 * 320 * 2, "C2R4 sink4/local128 bytes %lld", b);
    const char *bad[] = {"abc", "-1", "0", "C5R4", "3.5bit", "1bits", "17bits", "nan", "inf",
                         "C4R4x", "", "12abc"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        int st = qmla_alloc_budget(bad[k], 256, 64, 0, 0, 512, 6, &cap, &bpt, &err);
        CHECK(st == QMLA_EINVAL, "budget \"%s\": status %d", bad[k], st);
        if (bad[k][0] && st)
            CHECK(strstr(err.msg, bad[k]) != NULL, "budget \"%s\": message \"%s\" does not name it",
                  bad[k], err.msg);
    }
    /* the dims form at 512 + 64 is qmla_storage_account; 3 bits by closed form */
    static const int w[3] = {2, 4, 8};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            qmla_kv_config c = {w[i], w[j], 64, 4, 128, QMLA_CORE_META_F16};
            qmla_storage_row r1, r2;
            CHECK_OK(qmla_storage_account(&c, QMLA_CORE_META_F16, 4096, &r1, &err), err);
            CHECK_OK(qmla_storage_account_dims(&c, QMLA_CORE_META_F16, 4096, 512, 64, &r2, &err), err);
            CHECK(r1.total_bytes == r2.total_bytes && r1.ratio == r2.ratio, "C%dR%d", w[i], w[j]);
        }
    qmla_kv_config c3 = {3, 4, 64, 0, 0, QMLA_CORE_META_F16};
    qmla_storage_row r;
    CHECK_OK(qmla_storage_account_dims(&c3, QMLA_CORE_META_F16, 64, 512, 64, &r, &err), err);
    CHECK(r.total_bytes == (192 + 32 + 36) * 64.0 + 4, "C3R4 at 512+64: %g", r.total_bytes);
    /* a path narrower than the group is one group (the quantizer's rule):
     * d_c 64, d_r 16 at C4R2 = 32 + 4 code bytes, 4 + 4 metadata per token */
    qmla_kv_config cn = {4, 2, 64, 0, 0, QMLA_CORE_META_F16};
    CHECK_OK(qmla_storage_account_dims(&cn, QMLA_CORE_META_F16, 64, 64, 16, &r, &err), err);
    CHECK(r.total_bytes == (32 + 4 + 8) * 64.0 + 4, "C4R2 at 64+16: %g", r.total_bytes);
    CHECK(qmla_storage_account_dims(&cn, QMLA_CORE_META_F16, 64, 96, 16, &r, &err) == QMLA_EINVAL,
          "d_c 96 with group 64 accepted");
    qmla_kv_config c5 = {5, 4, 64, 0, 0, QMLA_CORE_META_F16};
    CHECK(qmla_storage_account_dims(&c5, QMLA_CORE_META_F16, 64, 512, 64, &r, &err) == QMLA_EINVAL,
          "C5R4 accepted");
    /* the infeasible message names the budget and the cheapest total */
    long long cost[2] = {10, 20};
    double val[2] = {1, 0.5};
    int ch[2]; /* the two-layer instance below writes choice[0..1] */
    double tot;
    long long used;
    int st = qmla_alloc_solve(1, 2, cost, val, 9, ch, &tot, &used, &err);
    CHECK(st == QMLA_EINVAL && strstr(err.msg, "9 bytes") && strstr(err.msg, "10 bytes"),
          "infeasible: %d %s", st, err.msg);
    double nanv[2] = {1, NAN};
    CHECK(qmla_alloc_solve(1, 2, cost, nanv, 30, ch, &tot, &used, &err) == QMLA_EINVAL,
          "NaN value accepted");
    /* exactness where greedy by value per byte fails: two layers, one byte
     * step; the DP must take the 2-byte upgrade of layer 1 */
    long long c2[4] = {0, 1, 0, 2};
    double v2[4] = {1.0, 0.5, 10.0, 0.0};
    CHECK_OK(qmla_alloc_solve(2, 2, c2, v2, 2, ch, &tot, &used, &err), err);
    CHECK(tot == 1.0 && used == 2, "two-layer instance: %g at %lld", tot, used);
}

int main(void)
{
    random_instances();
    storage_instances();
    budgets_and_storage();
    return check_summary("test_solve");
}
