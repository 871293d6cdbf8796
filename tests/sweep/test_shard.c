/* tests/sweep/test_shard.c — qmla_shard_assign (include/qmla/part.h) against
 * assignments worked out by hand: round robin; cost-balanced runs (the
 * midpoint rule: item k to shard floor(K m_k / C)); unselected items; more
 * shards than items (some shards empty).
 * Run: meson test -C build test_shard */
#include "check.h"
#include "qmla/part.h"

#include <string.h>

static int same(const size_t *a, const size_t *b, size_t n)
{
    return memcmp(a, b, n * sizeof *a) == 0;
}

int main(void)
{
    qmla_error err;
    qmla_error_clear(&err);
    size_t o[6];
    const double c6[6] = {4, 1, 1, 1, 1, 4};
    const unsigned char all[6] = {1, 1, 1, 1, 1, 1};
    /* round robin */
    CHECK_OK(qmla_shard_assign(c6, all, 6, 4, 0, o, &err), err);
    CHECK(same(o, (const size_t[]){0, 1, 2, 3, 0, 1}, 6), "round robin");
    /* C = 12, midpoints 2, 4.5, 5.5, 6.5, 7.5, 10; K = 2: x 2/12 ->
     * 0.33 0.75 0.92 1.08 1.25 1.67: shards 0 0 0 1 1 1 (costs 6 and 6) */
    CHECK_OK(qmla_shard_assign(c6, all, 6, 2, 1, o, &err), err);
    CHECK(same(o, (const size_t[]){0, 0, 0, 1, 1, 1}, 6), "balanced K=2: %zu %zu %zu %zu %zu %zu",
          o[0], o[1], o[2], o[3], o[4], o[5]);
    /* K = 4: x 4/12 -> 0.67 1.5 1.83 2.17 2.5 3.33: 0 1 1 2 2 3 (4 2 2 4:
     * each within one item's cost, 4, of C/K = 3) */
    CHECK_OK(qmla_shard_assign(c6, all, 6, 4, 1, o, &err), err);
    CHECK(same(o, (const size_t[]){0, 1, 1, 2, 2, 3}, 6), "balanced K=4");
    /* unselected item 1 keeps k mod K; C = 2 over items 0 and 2 */
    const double c3[3] = {1, 1, 1};
    const unsigned char sel[3] = {1, 0, 1};
    CHECK_OK(qmla_shard_assign(c3, sel, 3, 2, 1, o, &err), err);
    CHECK(same(o, (const size_t[]){0, 1, 1}, 3), "unselected");
    /* 2 items over 4 shards: midpoints 0.5, 1.5 of C = 2 -> shards 1 and 3 */
    CHECK_OK(qmla_shard_assign(c3, all, 2, 4, 1, o, &err), err);
    CHECK(same(o, (const size_t[]){1, 3}, 2), "more shards than items");
    return check_summary("test_shard");
}
