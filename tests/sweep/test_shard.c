/* tests/sweep/test_shard.c — qmla_shard_assign (include/qmla/part.h) against
 * assignments worked out by hand: round robin; cost-balanced runs (the
 * midpoint rule: item k to shard floor(K m_k / C)); unselected items; more
 * shards than items (some shards empty).
 * Run: meson test -C build test_shard */
#include "check.h"
#include "qmla/part.h"
#include "qmla/results.h"
#include "qmla/sweep.h"

#include <stdio.h>

#include <string.h>

static int same(const size_t *a, const size_t *b, size_t n)
{
    return memcmp(a, b, n * sizeof *a) == 0;
}

/* ---- qmla_merge on hand-made parts ----------------------------------------
 * Parts written with qmla_part_write from a plan of our own, whose shard
 * owners are worked out here by the documented rule (cost T^2, midpoint
 * floor(K m_k / C)); each case is chosen so that a near-miss rule of the
 * merge gives the other answer (mutants 2555..2561). */
static char g_dir[512];

static qmla_response mrow(int layer, const char *cell, int seq, int path)
{
    qmla_response r;
    memset(&r, 0, sizeof r);
    r.layer = layer;
    snprintf(r.cell, sizeof r.cell, "%s", cell);
    r.seq = seq;
    r.path = path;
    r.response = 0.25 + layer + 0.125 * seq + 0.5 * path;
    return r;
}

/* Write part `name` (shard of n_shards, balance) of the plan slots and
 * return its path in buf. */
static const char *mpart(char *buf, size_t len, const char *name, const char *cells,
                         const qmla_part_slot *slots, size_t n_slots, size_t shard,
                         size_t n_shards, int balance, const qmla_response *rows, size_t n)
{
    snprintf(buf, len, "%s/%s.h5", g_dir, name);
    qmla_results_meta m;
    memset(&m, 0, sizeof m);
    snprintf(m.capture_sha256, sizeof m.capture_sha256, "%064d", 0);
    snprintf(m.meta, sizeof m.meta, "f16");
    snprintf(m.capture_file, sizeof m.capture_file, "x.h5");
    snprintf(m.cells, sizeof m.cells, "%s", cells);
    m.bits = 4;
    m.group = 64;
    m.nmse = 0.01;
    qmla_summary s;
    memset(&s, 0, sizeof s);
    qmla_part_info pi = {shard, n_shards, balance, n_slots, (qmla_part_slot *)slots};
    qmla_error err;
    qmla_error_clear(&err);
    CHECK_OK(qmla_part_write(buf, &m, rows, n, &s, &pi, &err), err);
    return buf;
}

/* Merge parts; returns the status, err.msg in msg. */
static int mmerge(const char *const *parts, size_t n, char *msg, size_t len)
{
    char out[600];
    snprintf(out, sizeof out, "%s/merged.h5", g_dir);
    remove(out);
    qmla_summary s;
    qmla_error err;
    qmla_error_clear(&err);
    const int st = qmla_merge(parts, n, out, "test_shard", &s, &err);
    if (!st)
        qmla_summary_free(&s);
    snprintf(msg, len, "%s", st ? err.msg : "");
    return st;
}

static void test_merge(void)
{
    CHECK(check_tmpdir(g_dir, sizeof g_dir, "shard") != NULL, "mkdtemp");
    char a[600], b[600], c[600], msg[2048];
    int st;
    /* 2555: one item, one shard; the part holds its content row only */
    {
        const qmla_part_slot sl[1] = {{0, 0, 1, 4, 1}};
        const qmla_response r[1] = {mrow(0, "A", 0, 0)};
        const char *p[1] = {mpart(a, sizeof a, "cov", "A", sl, 1, 0, 1, 0, r, 1)};
        st = mmerge(p, 1, msg, sizeof msg);
        CHECK(st == QMLA_EINVAL && strstr(msg, "incomplete: 1 of the plan's items"),
              "a part without the rope row merged (status %d: %s)", st, msg);
    }
    /* 2556: 2 items round robin over 2 shards (owners 0 1); shard 0's part
     * also holds item 1, shard 1's part is empty */
    {
        const qmla_part_slot sl[1] = {{0, 0, 2, 4, 1}};
        const qmla_response r[4] = {mrow(0, "A", 0, 0), mrow(0, "A", 0, 1), mrow(0, "A", 1, 0),
                                    mrow(0, "A", 1, 1)};
        const char *p[2] = {mpart(a, sizeof a, "f0", "A", sl, 1, 0, 2, 0, r, 4),
                            mpart(b, sizeof b, "f1", "A", sl, 1, 1, 2, 0, r, 0)};
        st = mmerge(p, 2, msg, sizeof msg);
        CHECK(st == QMLA_EFORMAT && strstr(msg, "an item of another shard"),
              "rows of another shard's item merged (status %d: %s)", st, msg);
        /* the same items split as planned merge */
        const char *q[2] = {mpart(a, sizeof a, "g0", "A", sl, 1, 0, 2, 0, r, 2),
                            mpart(b, sizeof b, "g1", "A", sl, 1, 1, 2, 0, r + 2, 2)};
        st = mmerge(q, 2, msg, sizeof msg);
        CHECK(st == QMLA_OK, "a planned split refused: %s", msg);
        /* 2559: the second part planned for T = 8 instead of 4 */
        const qmla_part_slot s8[1] = {{0, 0, 2, 8, 1}};
        const char *t[2] = {mpart(a, sizeof a, "h0", "A", sl, 1, 0, 2, 0, r, 2),
                            mpart(b, sizeof b, "h1", "A", s8, 1, 1, 2, 0, r + 2, 2)};
        st = mmerge(t, 2, msg, sizeof msg);
        CHECK(st == QMLA_EMISMATCH && strstr(msg, "is a part of another plan"),
              "parts planned for T = 4 and T = 8 merged (status %d: %s)", st, msg);
    }
    /* 2557: cells A, B of one sequence each; the part holds A sequence 1
     * (== n_seq of A) in place of B sequence 0 */
    {
        const qmla_part_slot sl[2] = {{0, 0, 1, 4, 1}, {0, 1, 1, 4, 1}};
        const qmla_response r[4] = {mrow(0, "A", 0, 0), mrow(0, "A", 0, 1), mrow(0, "A", 1, 0),
                                    mrow(0, "A", 1, 1)};
        const char *p[1] = {mpart(a, sizeof a, "seq", "A,B", sl, 2, 0, 1, 0, r, 4)};
        st = mmerge(p, 1, msg, sizeof msg);
        CHECK(st == QMLA_EFORMAT && strstr(msg, "an item outside the plan"),
              "a row of sequence n_seq merged (status %d: %s)", st, msg);
    }
    /* 2560: cells "AB" and "A": row cell A is cell 1, not a prefix of AB */
    {
        const qmla_part_slot sl[2] = {{0, 0, 1, 4, 1}, {0, 1, 1, 4, 1}};
        const qmla_response r[4] = {mrow(0, "AB", 0, 0), mrow(0, "AB", 0, 1),
                                    mrow(0, "A", 0, 0), mrow(0, "A", 0, 1)};
        const char *p[1] = {mpart(a, sizeof a, "pre", "AB,A", sl, 2, 0, 1, 0, r, 4)};
        st = mmerge(p, 1, msg, sizeof msg);
        CHECK(st == QMLA_OK, "cells AB and A refused: %s", msg);
    }
    /* 2561: balanced, 3 shards, items of T = 1 and T = 2: costs T^2 = 1, 4,
     * C = 5, midpoints 0.5, 3: floor(3 m / C) = 0, 1 (with cost T: C = 3,
     * midpoints 0.5, 2: shards 0, 2) */
    {
        const qmla_part_slot sl[2] = {{0, 0, 1, 1, 1}, {0, 1, 1, 2, 1}};
        const double cost[2] = {1, 4};
        const unsigned char all[2] = {1, 1};
        size_t o[2];
        qmla_error err;
        qmla_error_clear(&err);
        CHECK_OK(qmla_shard_assign(cost, all, 2, 3, 1, o, &err), err);
        CHECK(o[0] == 0 && o[1] == 1, "T^2 owners %zu %zu, expected 0 1", o[0], o[1]);
        const qmla_response r[4] = {mrow(0, "A", 0, 0), mrow(0, "A", 0, 1),
                                    mrow(0, "B", 0, 0), mrow(0, "B", 0, 1)};
        const char *p[3] = {mpart(a, sizeof a, "b0", "A,B", sl, 2, 0, 3, 1, r, 2),
                            mpart(b, sizeof b, "b1", "A,B", sl, 2, 1, 3, 1, r + 2, 2),
                            mpart(c, sizeof c, "b2", "A,B", sl, 2, 2, 3, 1, r, 0)};
        st = mmerge(p, 3, msg, sizeof msg);
        CHECK(st == QMLA_OK, "balanced parts of T = 1 and 2 refused: %s", msg);
    }
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
    test_merge();
    return check_summary("test_shard");
}
