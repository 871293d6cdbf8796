/* test_rowtable.c — the result-row table (include/qmla/response.h) is the
 * one definition of a /responses row:
 *  1. docs/results-format.md lists exactly its columns, in order, each with
 *     the table's storage type, units and description;
 *  2. a row survives the journal and the results file unchanged, column by
 *     column (written by the library, read back by the library);
 *  3. qmla_response_validate refuses each kind of bad value.
 * Adding a column to the table without documenting it fails here. */
#include "check.h"
#include "qmla/response.h"
#include "qmla/results.h"
#include "qmla/table.h"
#include "qmla_config.h"
#include "../lib/sweep/journal_rows.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hdf5.h>

static const char *type_of(qmla_col_kind k)
{
    switch (k) {
    case QMLA_COL_INT: return "int32";
    case QMLA_COL_STR:
    case QMLA_COL_PATH: return "string";
    case QMLA_COL_REAL: return "float64";
    case QMLA_COL_FLAG: return "uint8";
    }
    return "?";
}

/* Split a Markdown table row "| a | b | c | d |" into trimmed cells, with
 * "\|" unescaped to "|" and backquotes removed. Returns the cell count. */
static int split_row(const char *line, char cells[][512], int max)
{
    int n = -1;
    size_t o = 0;
    for (const char *p = line; *p && *p != '\n'; p++) {
        if (p[0] == '\\' && p[1] == '|') {
            if (n >= 0 && o + 1 < 512)
                cells[n][o++] = '|';
            p++;
            continue;
        }
        if (*p == '|') {
            if (n >= 0) {
                cells[n][o] = '\0';
                /* trim */
                char *s = cells[n];
                while (*s == ' ')
                    memmove(s, s + 1, strlen(s));
                size_t l = strlen(s);
                while (l && s[l - 1] == ' ')
                    s[--l] = '\0';
            }
            if (++n >= max)
                return n;
            o = 0;
            continue;
        }
        if (*p == '`')
            continue;
        if (n >= 0 && o + 1 < 512)
            cells[n][o++] = *p;
    }
    return n < 0 ? 0 : n;
}

static void test_docs(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/docs/results-format.md", QMLA_SOURCE_ROOT);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    if (!f)
        return;
    char line[2048];
    int in_table = 0;
    size_t k = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "## `/responses`", 15) == 0) {
            in_table = 1;
            continue;
        }
        if (!in_table)
            continue;
        if (strncmp(line, "## ", 3) == 0)
            break;
        if (line[0] != '|' || strstr(line, "| dataset |") || strstr(line, "|---"))
            continue;
        char cells[8][512];
        const int n = split_row(line, cells, 8);
        CHECK(n == 4, "doc row with %d cells: %s", n, line);
        if (n != 4)
            continue;
        CHECK(k < qmla_response_n_columns, "doc lists an extra column %s", cells[0]);
        if (k >= qmla_response_n_columns)
            break;
        const qmla_column *c = &qmla_response_columns[k];
        CHECK(strcmp(cells[0], c->name) == 0, "doc column %zu: expected %s, found %s",
              k, c->name, cells[0]);
        CHECK(strcmp(cells[1], type_of(c->kind)) == 0, "doc type of %s: expected %s, found %s",
              c->name, type_of(c->kind), cells[1]);
        CHECK(strcmp(cells[2], c->units) == 0, "doc units of %s: expected \"%s\", found \"%s\"",
              c->name, c->units, cells[2]);
        CHECK(strcmp(cells[3], c->description) == 0,
              "doc description of %s:\n  expected \"%s\"\n  found    \"%s\"", c->name,
              c->description, cells[3]);
        k++;
    }
    fclose(f);
    CHECK(k == qmla_response_n_columns, "doc lists %zu of the %zu columns", k,
          qmla_response_n_columns);
}

/* A row whose every column holds a distinct, non-trivial value. */
static qmla_response sample_row(int i)
{
    qmla_response r;
    memset(&r, 0, sizeof r);
    for (size_t k = 0; k < qmla_response_n_columns; k++) {
        const qmla_column *c = &qmla_response_columns[k];
        switch (c->kind) {
        case QMLA_COL_INT: *qmla_col_int(&r, c) = (int)(3 * k + (size_t)i); break;
        case QMLA_COL_FLAG: *qmla_col_int(&r, c) = (int)((k + (size_t)i) % 2); break;
        case QMLA_COL_PATH: *qmla_col_int(&r, c) = i % 2; break;
        case QMLA_COL_REAL: *qmla_col_real(&r, c) = (double)(k + 1) / 7.0 + i * 1e-3; break;
        case QMLA_COL_STR:
            snprintf(qmla_col_str(&r, c), QMLA_CELL_NAME_MAX, "cell %d\t%%x", i);
            break;
        }
    }
    return r;
}

static int same_row(qmla_response *a, qmla_response *b, const char *where)
{
    int same = 1;
    for (size_t k = 0; k < qmla_response_n_columns; k++) {
        const qmla_column *c = &qmla_response_columns[k];
        int eq = 1;
        switch (c->kind) {
        case QMLA_COL_INT:
        case QMLA_COL_FLAG:
        case QMLA_COL_PATH: eq = *qmla_col_int(a, c) == *qmla_col_int(b, c); break;
        case QMLA_COL_REAL: eq = *qmla_col_real(a, c) == *qmla_col_real(b, c); break;
        case QMLA_COL_STR: eq = strcmp(qmla_col_str(a, c), qmla_col_str(b, c)) == 0; break;
        }
        CHECK(eq, "%s: column %s differs after the round trip", where, c->name);
        same &= eq;
    }
    return same;
}

static void test_round_trips(void)
{
    char dir[512];
    CHECK(check_tmpdir(dir, sizeof dir, "rowtable") != NULL, "mkdtemp");
    char jpath[1024], rpath[1024];
    snprintf(jpath, sizeof jpath, "%s/r.h5.journal", dir);
    snprintf(rpath, sizeof rpath, "%s/r.h5", dir);
    qmla_response rows[2] = {sample_row(0), sample_row(1)};
    qmla_error err;
    qmla_error_clear(&err);

    /* journal */
    qmla_journal j;
    qmla_response *recs = NULL;
    size_t n = 0;
    CHECK_OK(qmla_journal_open(&j, jpath, "key", 0, &recs, &n, &err), err);
    free(recs);
    CHECK_OK(qmla_journal_append(&j, rows, 2, &err), err);
    qmla_journal_close(&j, 0);
    CHECK_OK(qmla_journal_open(&j, jpath, "key", 0, &recs, &n, &err), err);
    CHECK(n == 2, "journal replays %zu of 2 rows", n);
    for (size_t i = 0; i < n && i < 2; i++)
        same_row(&rows[i], &recs[i], "journal");
    free(recs);
    qmla_journal_close(&j, 1);

    /* results file: rows are written sorted, so compare by (layer) */
    qmla_results_meta m;
    memset(&m, 0, sizeof m);
    snprintf(m.capture_sha256, sizeof m.capture_sha256, "%064d", 0);
    snprintf(m.meta, sizeof m.meta, "f16");
    snprintf(m.capture_file, sizeof m.capture_file, "x.h5");
    m.bits = 4;
    m.group = 64;
    m.nmse = 0.01;
    qmla_summary s;
    memset(&s, 0, sizeof s);
    CHECK_OK(qmla_results_write(rpath, &m, rows, 2, &s, &err), err);
    qmla_results_meta m2;
    qmla_response *back = NULL;
    CHECK_OK(qmla_results_read(rpath, &m2, &back, &n, &err), err);
    CHECK(n == 2, "results file holds %zu of 2 rows", n);
    qmla_responses_sort(rows, 2);
    for (size_t i = 0; i < n && i < 2; i++)
        same_row(&rows[i], &back[i], "results file");
    free(back);
    qmla_results_meta_free(&m2);
    unlink(rpath);
    rmdir(dir);
}

static void test_validate(void)
{
    qmla_error err;
    qmla_response good = sample_row(0);
    CHECK(qmla_response_validate(&good, &err) == 0, "a good row is refused: %s", err.msg);
    const struct {
        const char *col;
        double v;
    } bad[] = {{"nmse_out", NAN}, {"response", INFINITY}, {"nmse_cache", -1.0},
               {"route_residual", NAN}};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        qmla_response r = good;
        for (size_t k = 0; k < qmla_response_n_columns; k++)
            if (strcmp(qmla_response_columns[k].name, bad[b].col) == 0)
                *qmla_col_real(&r, &qmla_response_columns[k]) = bad[b].v;
        CHECK(qmla_response_validate(&r, &err) == QMLA_EFORMAT && strstr(err.msg, bad[b].col),
              "%s = %g not refused by name (%s)", bad[b].col, bad[b].v, err.msg);
    }
    qmla_response r = good;
    r.degenerate = 2;
    CHECK(qmla_response_validate(&r, &err) == QMLA_EFORMAT && strstr(err.msg, "degenerate"),
          "flag 2 not refused");
    r = good;
    r.path = 7;
    CHECK(qmla_response_validate(&r, &err) == QMLA_EFORMAT, "path 7 not refused");
    r = good;
    r.seq = -1;
    CHECK(qmla_response_validate(&r, &err) == QMLA_EFORMAT, "seq -1 not refused");
    r = good;
    r.cell[0] = '\0';
    CHECK(qmla_response_validate(&r, &err) == QMLA_EFORMAT, "empty cell not refused");
}

/* 4. qmla_table_by_layer (lib/io/table.c) against the closed forms of
 * docs/math.md §3, §3.1 written out by hand, on rows chosen so that the
 * near-miss rules give other numbers: several cells per layer with unequal
 * sequence counts (mean over cells of the mean over sequences; the SE
 * sqrt(sum_k s_k^2/n_k) / K, not sqrt(sum_k s_k^2/n_k / K)), a degenerate
 * row (n_items counts the rows averaged: 7, not the 3 cells), and a layer
 * with a cell of one non-degenerate sequence beside a cell of two (SE NaN,
 * not the other cell's SE). Catches mutants 2569, 2570, 2571. */
static void test_by_layer(void)
{
    qmla_error err;
    qmla_error_clear(&err);
    /* layer 0: A = {1, 2, 4}, B = {10, 13}, C = {5, 6} + a degenerate 100;
     * layer 1: A = {3} + a degenerate 9, B = {2, 4} */
    const int64_t layer[] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1};
    const char *cell[] = {"A", "A", "A", "B", "B", "C", "C", "C", "A", "A", "B", "B"};
    const char *path[] = {"content", "content", "content", "content", "content", "content",
                          "content", "content", "content", "content", "content", "content"};
    const int64_t degen[] = {0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0};
    const double resp[] = {1, 2, 4, 10, 13, 5, 100, 6, 3, 9, 2, 4};
    enum { N = 12 };
    qmla_table *r = NULL, *t = NULL;
    CHECK_OK(qmla_table_alloc("responses", N, &r, &err), err);
    CHECK_OK(qmla_table_add_column(r, "layer", "", "", QMLA_VAL_INT, layer, &err), err);
    CHECK_OK(qmla_table_add_column(r, "cell", "", "", QMLA_VAL_STRING, cell, &err), err);
    CHECK_OK(qmla_table_add_column(r, "path", "", "", QMLA_VAL_STRING, path, &err), err);
    CHECK_OK(qmla_table_add_column(r, "degenerate", "", "", QMLA_VAL_INT, degen, &err), err);
    CHECK_OK(qmla_table_add_column(r, "response", "", "", QMLA_VAL_FLOAT, resp, &err), err);
    CHECK_OK(qmla_table_by_layer(r, &t, &err), err);
    const qmla_table_col *m = t ? qmla_table_column(t, "content_response") : NULL,
                         *se = t ? qmla_table_column(t, "content_response_se") : NULL,
                         *ni = t ? qmla_table_column(t, "content_n_items") : NULL;
    CHECK(t && t->n_rows == 2 && m && se && ni, "by-layer table: 2 rows with content_response, "
          "content_response_se, content_n_items");
    if (t && t->n_rows == 2 && m && se && ni) {
        /* sample variances (n - 1): A 7/3, B 4.5, C 0.5 */
        const double mean0 = ((1.0 + 2 + 4) / 3 + (10.0 + 13) / 2 + (5.0 + 6) / 2) / 3;
        const double se0 = sqrt((7.0 / 3) / 3 + 4.5 / 2 + 0.5 / 2) / 3;
        const double mean1 = (3.0 + (2.0 + 4) / 2) / 2;
        CHECK(fabs(m->v.d[0] - mean0) <= 1e-12 * mean0, "layer 0 mean %.17g, expected %.17g",
              m->v.d[0], mean0);
        CHECK(fabs(se->v.d[0] - se0) <= 1e-12 * se0, "layer 0 SE %.17g, expected "
              "sqrt(7/9 + 2.25 + 0.25) / 3 = %.17g", se->v.d[0], se0);
        CHECK(ni->v.i[0] == 7, "layer 0 n_items %lld, expected 7 rows", (long long)ni->v.i[0]);
        CHECK(fabs(m->v.d[1] - mean1) <= 1e-12 * mean1, "layer 1 mean %.17g, expected %.17g",
              m->v.d[1], mean1);
        CHECK(isnan(se->v.d[1]), "layer 1 SE %g, expected NaN (cell A has one sequence)",
              se->v.d[1]);
        CHECK(ni->v.i[1] == 3, "layer 1 n_items %lld, expected 3", (long long)ni->v.i[1]);
    }
    qmla_table_free(t);
    qmla_table_free(r);
}

/* 5. A group of 1-D datasets of different lengths is not a table
 * (qmla_table_names lists only the group of equal lengths). Catches 2572. */
static void test_ragged_group(void)
{
    char dir[] = "/tmp/qmla_ragged_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char p[256];
    snprintf(p, sizeof p, "%s/r.h5", dir);
    hid_t f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const int v[3] = {1, 2, 3};
    const char *groups[2] = {"even", "ragged"};
    for (int g = 0; g < 2; g++) {
        hid_t gr = H5Gcreate2(f, groups[g], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        for (int d = 0; d < 2; d++) {
            hsize_t dims[1] = {(hsize_t)(g && d ? 2 : 3)};
            hid_t sp = H5Screate_simple(1, dims, NULL);
            hid_t ds = H5Dcreate2(gr, d ? "b" : "a", H5T_NATIVE_INT, sp, H5P_DEFAULT,
                                  H5P_DEFAULT, H5P_DEFAULT);
            H5Dwrite(ds, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
            H5Dclose(ds);
            H5Sclose(sp);
        }
        H5Gclose(gr);
    }
    H5Fclose(f);
    qmla_error err;
    qmla_error_clear(&err);
    char **names = NULL;
    size_t n = 0;
    CHECK_OK(qmla_table_names(p, &names, &n, &err), err);
    CHECK(n == 1 && !strcmp(names[0], "even"), "tables of %s: %zu (%s...), expected only "
          "\"even\" (a[3], b[2] is no table)", p, n, n ? names[0] : "");
    for (size_t k = 0; k < n; k++)
        free(names[k]);
    free(names);
    unlink(p);
    rmdir(dir);
}

int main(void)
{
    test_docs();
    test_round_trips();
    test_validate();
    test_by_layer();
    test_ragged_group();
    return check_summary("test_rowtable");
}
