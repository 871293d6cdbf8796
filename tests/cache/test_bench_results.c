/* test_bench_results.c — the benchmark results file (lib/cache/bench_results.c,
 * qmla/bench_results.h): rows written by qmla_bench_write_h5 and read back
 * through the generic table reader (qmla/table.h): every /rows column
 * equal to what was written (NaN where a row has none), the /table9 shape
 * (one row per (batch, context) in the order first met, one column set per
 * configuration, NaN for a configuration not measured at a point), the
 * provenance attributes and parameters; bad arguments and an unwritable
 * path fail with a status and leave no file. */
#include "check.h"
#include "qmla/bench_results.h"
#include "qmla/table.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

static int same(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

int main(void)
{
    char dir[512], path[640];
    if (!check_tmpdir(dir, sizeof dir, "bench_results"))
        return 1;
    snprintf(path, sizeof path, "%s/r.h5", dir);
    /* rows: a copy, a qdq variant, a writer row, then decode points
     * (batch, context) x configs, C2R4 absent at the last point */
    qmla_bench_row rows[32];
    size_t n = 0;
    memset(rows, 0, sizeof rows);
    snprintf(rows[n].kind, sizeof rows[n].kind, "copy");
    rows[n].median_us = 1014.56, rows[n].ratio_to_bf16 = NAN, rows[n].bytes = 4294967296.0;
    rows[n].gbps = rows[n].bytes / (rows[n].median_us * 1e3), rows[n].pct_copy = 100.0;
    n++;
    snprintf(rows[n].kind, sizeof rows[n].kind, "qdq f16 codes+meta");
    rows[n].size = 131072, rows[n].median_us = 300.91, rows[n].ratio_to_bf16 = NAN;
    rows[n].bytes = 349175808.0, rows[n].gbps = 1160.4, rows[n].pct_copy = 27.4;
    n++;
    snprintf(rows[n].kind, sizeof rows[n].kind, "writer");
    snprintf(rows[n].config, sizeof rows[n].config, "C4R4");
    rows[n].size = 65536, rows[n].median_us = 133.1, rows[n].ratio_to_bf16 = NAN;
    rows[n].bytes = 1e8, rows[n].gbps = 736.0, rows[n].pct_copy = 17.5;
    n++;
    const char *cfg[3] = {"BF16", "C4R4", "C2R4"};
    const int pb[3] = {8, 8, 32};
    const long pc[3] = {4096, 16384, 4096};
    const size_t first_decode = n;
    for (int p = 0; p < 3; p++)
        for (int c = 0; c < 3; c++) {
            if (p == 2 && c == 2)
                continue;
            qmla_bench_row *r = &rows[n++];
            snprintf(r->kind, sizeof r->kind, "decode");
            snprintf(r->config, sizeof r->config, "%s", cfg[c]);
            r->batch = pb[p];
            r->size = pc[p];
            r->median_us = 20.0 + 7.0 * p + 3.0 * c + 0.125;
            r->bytes = (double)pb[p] * (double)pc[p] * (c ? 320.0 : 1152.0);
            r->gbps = r->bytes / (r->median_us * 1e3);
            r->pct_copy = 100.0 * r->gbps / 4233.3;
        }
    for (size_t i = first_decode; i < n; i++) /* ratio to the point's BF16 row */
        for (size_t j = first_decode; j < n; j++)
            if (!strcmp(rows[j].config, "BF16") && rows[j].batch == rows[i].batch &&
                rows[j].size == rows[i].size)
                rows[i].ratio_to_bf16 = rows[i].median_us / rows[j].median_us;
    const char *pn[2] = {"samples", "heads"};
    const double pv[2] = {40, 16};
    qmla_bench_meta m = {"bench_decode", "bench_decode --quick", "test device", 2, pn, pv};
    qmla_error err;
    int st = qmla_bench_write_h5(path, &m, rows, n, &err);
    CHECK_OK(st, err);

    qmla_table *t = NULL;
    st = qmla_table_read(path, "rows", &t, &err);
    CHECK_OK(st, err);
    if (!st) {
        CHECK(t->n_rows == n, "rows: %zu rows, expected %zu", t->n_rows, n);
        const qmla_table_col *kind = qmla_table_column(t, "kind");
        const qmla_table_col *config = qmla_table_column(t, "config");
        const qmla_table_col *batch = qmla_table_column(t, "batch");
        const qmla_table_col *size = qmla_table_column(t, "size");
        const char *dn[5] = {"median_us", "ratio_to_bf16", "bytes", "GBps", "pct_copy"};
        const qmla_table_col *dc[5];
        int all = kind && config && batch && size;
        for (int k = 0; k < 5; k++)
            all &= (dc[k] = qmla_table_column(t, dn[k])) != NULL;
        CHECK(all, "rows: a column is missing");
        CHECK(t->n_cols == 9, "rows: %zu columns, expected 9", t->n_cols);
        if (all && t->n_rows == n)
            for (size_t i = 0; i < n; i++) {
                const double want[5] = {rows[i].median_us, rows[i].ratio_to_bf16, rows[i].bytes,
                                        rows[i].gbps, rows[i].pct_copy};
                CHECK(!strcmp(kind->v.s[i], rows[i].kind), "row %zu kind %s", i, kind->v.s[i]);
                CHECK(!strcmp(config->v.s[i], rows[i].config), "row %zu config %s", i,
                      config->v.s[i]);
                CHECK(qmla_values_get(&batch->v, i) == rows[i].batch, "row %zu batch", i);
                CHECK(qmla_values_get(&size->v, i) == (double)rows[i].size, "row %zu size", i);
                for (int k = 0; k < 5; k++)
                    CHECK(same(qmla_values_get(&dc[k]->v, i), want[k]), "row %zu %s: %g, want %g",
                          i, dn[k], qmla_values_get(&dc[k]->v, i), want[k]);
            }
        const qmla_table_col *mu = qmla_table_column(t, "median_us");
        CHECK(mu && !strcmp(mu->units, "us"), "rows/median_us units");
        qmla_table_free(t);
    }

    st = qmla_table_read(path, "table9", &t, &err);
    CHECK_OK(st, err);
    if (!st) {
        CHECK(t->n_rows == 3, "table9: %zu rows, expected 3", t->n_rows);
        CHECK(t->n_cols == 2 + 3 * 4, "table9: %zu columns, expected 14", t->n_cols);
        const qmla_table_col *b = qmla_table_column(t, "batch");
        const qmla_table_col *ctx = qmla_table_column(t, "context");
        CHECK(b && ctx, "table9: batch or context missing");
        if (b && ctx && t->n_rows == 3)
            for (int p = 0; p < 3; p++) {
                CHECK(qmla_values_get(&b->v, p) == pb[p] && qmla_values_get(&ctx->v, p) == pc[p],
                      "table9 row %d: (%g, %g)", p, qmla_values_get(&b->v, p),
                      qmla_values_get(&ctx->v, p));
                for (int c = 0; c < 3; c++) {
                    const char *what[4] = {"us", "ratio", "GBps", "pct_copy"};
                    double want[4] = {NAN, NAN, NAN, NAN};
                    for (size_t i = first_decode; i < n; i++)
                        if (rows[i].batch == pb[p] && rows[i].size == pc[p] &&
                            !strcmp(rows[i].config, cfg[c])) {
                            want[0] = rows[i].median_us;
                            want[1] = rows[i].ratio_to_bf16;
                            want[2] = rows[i].gbps;
                            want[3] = rows[i].pct_copy;
                        }
                    for (int k = 0; k < 4; k++) {
                        char name[64];
                        snprintf(name, sizeof name, "%s_%s", cfg[c], what[k]);
                        const qmla_table_col *col = qmla_table_column(t, name);
                        CHECK(col && same(qmla_values_get(&col->v, p), want[k]),
                              "table9 %s row %d: %g, want %g", name, p,
                              col ? qmla_values_get(&col->v, p) : -1.0, want[k]);
                    }
                }
            }
        const qmla_table_col *c2 = qmla_table_column(t, "C2R4_us");
        CHECK(c2 && t->n_rows == 3 && isnan(qmla_values_get(&c2->v, 2)),
              "table9: C2R4 not measured at the last point must be NaN");
        qmla_table_free(t);
    }

    qmla_attr *at = NULL;
    size_t na = 0;
    st = qmla_file_attrs(path, &at, &na, &err);
    CHECK_OK(st, err);
    if (!st) {
        const char *strs[6][2] = {{"format", QMLA_BENCH_FORMAT}, {"tool", "bench_decode"},
                                  {"command_line", "bench_decode --quick"},
                                  {"device", "test device"}, {"tool_version", NULL},
                                  {"git_commit", NULL}};
        for (int k = 0; k < 6; k++) {
            const qmla_attr *a = qmla_attr_find(at, na, strs[k][0]);
            CHECK(a && a->v.kind == QMLA_VAL_STRING &&
                      (!strs[k][1] || !strcmp(a->v.s[0], strs[k][1])),
                  "attribute %s", strs[k][0]);
        }
        const qmla_attr *a = qmla_attr_find(at, na, "created_utc");
        CHECK(a && a->v.kind == QMLA_VAL_STRING && strlen(a->v.s[0]) == 20,
              "attribute created_utc");
        a = qmla_attr_find(at, na, "format_version");
        CHECK(a && qmla_values_get(&a->v, 0) == QMLA_BENCH_VERSION, "attribute format_version");
        for (int k = 0; k < 2; k++) {
            a = qmla_attr_find(at, na, pn[k]);
            CHECK(a && qmla_values_get(&a->v, 0) == pv[k], "parameter %s", pn[k]);
        }
        qmla_attrs_free(at, na);
    }

    /* a reserved parameter name, an unwritable path: a status, no file */
    char bad[700];
    snprintf(bad, sizeof bad, "%s/b.h5", dir);
    const char *rn[1] = {"git_commit"};
    qmla_bench_meta mb = {"bench_decode", "", "", 1, rn, pv};
    st = qmla_bench_write_h5(bad, &mb, rows, n, &err);
    CHECK(st == QMLA_EINVAL && strstr(err.msg, "git_commit"), "reserved name: %d %s", st,
          err.msg);
    CHECK(access(bad, F_OK) != 0, "reserved name: a file was written");
    snprintf(bad, sizeof bad, "%s/no/such/dir/r.h5", dir);
    st = qmla_bench_write_h5(bad, &m, rows, n, &err);
    CHECK(st == QMLA_EIO && strstr(err.msg, "no/such/dir"), "unwritable path: %d %s", st,
          err.msg);
    CHECK(access(bad, F_OK) != 0, "unwritable path: a file exists");
    st = qmla_bench_write_h5(path, NULL, rows, n, &err);
    CHECK(st == QMLA_EINVAL, "NULL meta: %d", st);
    return check_summary("test_bench_results");
}
