/* lib/operator/optables.c — the derived tables of the operator–error
 * results that the Fig. 7 figures draw (`qmla export --table`, `qmla
 * figures`; docs/figures.md): predict_pairs, one row per RoPE/content pair
 * of /predict (the pairs of its mae_log_ratio_* attributes), and
 * intervention_ratios, one row per (control, path) of /interventions' gain
 * ratio attributes. Computed on reading, never stored. */
#include "qmla/intervene.h"
#include "qmla/predict.h"
#include "qmla/table.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Average ranks (1-based, ties share their mean rank) of x[n] into r[n]. */
static int avg_ranks(const double *x, size_t n, double *r)
{
    size_t *ix = malloc((n ? n : 1) * sizeof *ix);
    if (!ix)
        return -1;
    for (size_t i = 0; i < n; i++)
        ix[i] = i;
    /* insertion sort by value, stable (n is a few hundred) */
    for (size_t i = 1; i < n; i++) {
        const size_t v = ix[i];
        size_t j = i;
        while (j > 0 && x[ix[j - 1]] > x[v]) {
            ix[j] = ix[j - 1];
            j--;
        }
        ix[j] = v;
    }
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && x[ix[j + 1]] == x[ix[i]])
            j++;
        const double rk = 0.5 * (double)(i + j) + 1.0;
        for (size_t q = i; q <= j; q++)
            r[ix[q]] = rk;
        i = j + 1;
    }
    free(ix);
    return 0;
}

static const qmla_table_col *need_col(const qmla_table *t, const char *name, int string,
                                      qmla_error *err)
{
    const qmla_table_col *c = qmla_table_column(t, name);
    if (!c || (c->v.kind == QMLA_VAL_STRING) != !!string) {
        qmla_error_set(err, QMLA_EFORMAT, "table /%s: column %s %s", t->name, name,
                       c ? (string ? "is not a string" : "is not numeric") : "absent");
        return NULL;
    }
    return c;
}

int qmla_op_pairs_table(const qmla_table *pr, qmla_table **out, qmla_error *err)
{
    *out = NULL;
    static const char *const num[] = {"layer", "seq", "path", "bits", "group", "nmse",
                                      "heldout", "degenerate", "g_finite", "pred_alloc",
                                      "pred_trace"};
    const qmla_table_col *c[11], *cell = need_col(pr, "cell", 1, err);
    if (!cell)
        return QMLA_EFORMAT;
    for (int k = 0; k < 11; k++)
        if (!(c[k] = need_col(pr, num[k], 0, err)))
            return QMLA_EFORMAT;
#define V(k, i) qmla_values_get(&c[k]->v, i)
    const size_t n = pr->n_rows;
    size_t *ci = malloc((n ? n : 1) * sizeof *ci), *ri = malloc((n ? n : 1) * sizeof *ri);
    if (!ci || !ri) {
        free(ci);
        free(ri);
        return qmla_error_set(err, QMLA_ENOMEM, "predict_pairs: %zu points", n);
    }
    /* a content point and its RoPE twin (same layer, cell, seq, bits, group,
     * nmse), neither degenerate: as qmla_op_stats_compute pairs them */
    size_t np = 0;
    for (size_t k = 0; k < n; k++) {
        if (V(2, k) != 0 || V(7, k) != 0)
            continue;
        for (size_t j = 0; j < n; j++)
            if (V(2, j) == 1 && V(7, j) == 0 && V(0, j) == V(0, k) && V(1, j) == V(1, k) &&
                V(3, j) == V(3, k) && V(4, j) == V(4, k) && V(5, j) == V(5, k) &&
                !strcmp(cell->v.s[j], cell->v.s[k])) {
                ci[np] = k;
                ri[np++] = j;
                break;
            }
    }
    int st = QMLA_OK;
    const size_t m = np ? np : 1;
    int64_t *layer = malloc(m * sizeof *layer), *seq = malloc(m * sizeof *seq),
            *bits = malloc(m * sizeof *bits), *grp = malloc(m * sizeof *grp),
            *held = malloc(m * sizeof *held), *dix = malloc(m * sizeof *dix);
    double *nmse = malloc(m * sizeof *nmse), *meas = malloc(m * sizeof *meas),
           *pa = malloc(m * sizeof *pa), *pt = malloc(m * sizeof *pt),
           *rm = malloc(m * sizeof *rm), *rp = malloc(m * sizeof *rp),
           *ae = malloc(m * sizeof *ae);
    const char **cells = malloc(m * sizeof *cells), **dir = malloc(m * sizeof *dir);
    char (*dbuf)[48] = malloc(m * sizeof *dbuf);
    qmla_table *t = NULL;
    if (!layer || !seq || !bits || !grp || !held || !dix || !nmse || !meas || !pa || !pt ||
        !rm || !rp || !ae || !cells || !dir || !dbuf) {
        st = qmla_error_set(err, QMLA_ENOMEM, "predict_pairs: %zu pairs", np);
        goto out;
    }
    for (size_t q = 0; q < np; q++) {
        const size_t k = ci[q], j = ri[q];
        layer[q] = (int64_t)V(0, k);
        seq[q] = (int64_t)V(1, k);
        bits[q] = (int64_t)V(3, k);
        grp[q] = (int64_t)V(4, k);
        nmse[q] = V(5, k);
        held[q] = (int64_t)V(6, k);
        cells[q] = cell->v.s[k];
        meas[q] = log(V(8, j) / V(8, k));
        pa[q] = log(V(9, j) / V(9, k));
        pt[q] = log(V(10, j) / V(10, k));
        ae[q] = fabs(pa[q] - meas[q]);
        snprintf(dbuf[q], sizeof dbuf[q], "INT%d/G%d/nu%g", (int)bits[q], (int)grp[q], nmse[q]);
        dir[q] = dbuf[q];
        /* direction index: order of first appearance */
        dix[q] = 0;
        for (size_t r = 0, seen = 0; r <= q; r++) {
            int first = 1;
            for (size_t s = 0; s < r && first; s++)
                first = strcmp(dir[s], dir[r]) != 0;
            if (!first)
                continue;
            if (!strcmp(dir[r], dir[q])) {
                dix[q] = (int64_t)seen;
                break;
            }
            seen++;
        }
    }
#undef V
    if (avg_ranks(meas, np, rm) || avg_ranks(pa, np, rp)) {
        st = qmla_error_set(err, QMLA_ENOMEM, "predict_pairs: ranks");
        goto out;
    }
    if ((st = qmla_table_alloc("predict_pairs", np, &t, err)))
        goto out;
    struct {
        const char *name, *units, *desc;
        qmla_val_kind kind;
        const void *data;
    } col[] = {
        {"layer", "", "layer index", QMLA_VAL_INT, layer},
        {"cell", "", "cell name", QMLA_VAL_STRING, cells},
        {"seq", "", "sequence index in the cell", QMLA_VAL_INT, seq},
        {"bits", "", "QDQ direction: bit width", QMLA_VAL_INT, bits},
        {"group", "", "QDQ direction: group size", QMLA_VAL_INT, grp},
        {"nmse", "1", "cache NMSE nu of the direction", QMLA_VAL_FLOAT, nmse},
        {"heldout", "", "1: a held-out direction of the frozen validation", QMLA_VAL_INT, held},
        {"direction", "", "INT<bits>/G<group>/nu<nmse>", QMLA_VAL_STRING, dir},
        {"direction_index", "", "index of the direction in order of first appearance",
         QMLA_VAL_INT, dix},
        {"log_ratio_measured", "1", "log(g_finite RoPE / g_finite content)", QMLA_VAL_FLOAT, meas},
        {"log_ratio_pred_alloc", "1", "log(pred_alloc RoPE / pred_alloc content): operator + allocation",
         QMLA_VAL_FLOAT, pa},
        {"log_ratio_pred_trace", "1", "log(pred_trace RoPE / pred_trace content): operator only",
         QMLA_VAL_FLOAT, pt},
        {"abs_error_alloc", "1", "|log_ratio_pred_alloc - log_ratio_measured| (mean: "
         "/predict mae_log_ratio_operator_allocation)", QMLA_VAL_FLOAT, ae},
        {"rank_measured", "", "average rank of log_ratio_measured (Spearman = Pearson of the ranks)",
         QMLA_VAL_FLOAT, rm},
        {"rank_pred_alloc", "", "average rank of log_ratio_pred_alloc", QMLA_VAL_FLOAT, rp},
    };
    for (size_t k = 0; k < sizeof col / sizeof col[0] && !st; k++)
        st = qmla_table_add_column(t, col[k].name, col[k].units, col[k].desc, col[k].kind,
                                   col[k].data, err);
out:
    if (st) {
        qmla_table_free(t);
        t = NULL;
    }
    *out = t;
    free(ci);
    free(ri);
    free(layer);
    free(seq);
    free(bits);
    free(grp);
    free(held);
    free(dix);
    free(nmse);
    free(meas);
    free(pa);
    free(pt);
    free(rm);
    free(rp);
    free(ae);
    free(cells);
    free(dir);
    free(dbuf);
    return st;
}

int qmla_intervene_ratios_table(const qmla_attr *a, size_t n_attrs, qmla_table **out,
                                qmla_error *err)
{
    *out = NULL;
    static const char *const path[2] = {"content", "rope"};
    enum { N = 3 * 2 };
    const char *ctl[N], *pth[N];
    int64_t cix[N], pix[N];
    double x[4][N];
    static const char *const fmt[4] = {"gain_ratio_%s_%s", "gain_ratio_%s_%s_ci_low",
                                       "gain_ratio_%s_%s_ci_high", "median_gain_ratio_%s_%s"};
    for (int c = 0; c < 3; c++)
        for (int p = 0; p < 2; p++) {
            const int r = 2 * c + p;
            ctl[r] = qmla_control_name(c);
            pth[r] = path[p];
            cix[r] = c;
            pix[r] = p;
            for (int q = 0; q < 4; q++) {
                char nm[96];
                snprintf(nm, sizeof nm, fmt[q], ctl[r], path[p]);
                const qmla_attr *at = qmla_attr_find(a, n_attrs, nm);
                if (!at || at->v.kind == QMLA_VAL_STRING || at->v.n != 1)
                    return qmla_error_set(err, QMLA_EFORMAT, "group /interventions: attribute "
                                          "%s %s", nm, at ? "is not one number" : "absent");
                x[q][r] = qmla_values_get(&at->v, 0);
            }
        }
    qmla_table *t;
    int st = qmla_table_alloc("intervention_ratios", N, &t, err);
    if (st)
        return st;
    struct {
        const char *name, *desc;
        qmla_val_kind kind;
        const void *data;
    } col[] = {
        {"control", "sign, permute or isotropic (docs/math.md §6)", QMLA_VAL_STRING, ctl},
        {"control_index", "0 sign, 1 permute, 2 isotropic", QMLA_VAL_INT, cix},
        {"path", "content or rope", QMLA_VAL_STRING, pth},
        {"path_index", "0 content, 1 rope", QMLA_VAL_INT, pix},
        {"gain_ratio", "geometric mean over items and repetitions of g(E')/g(E)", QMLA_VAL_FLOAT,
         x[0]},
        {"ci_low", "95 % percentile bootstrap interval: low", QMLA_VAL_FLOAT, x[1]},
        {"ci_high", "95 % percentile bootstrap interval: high", QMLA_VAL_FLOAT, x[2]},
        {"median", "median of g(E')/g(E)", QMLA_VAL_FLOAT, x[3]},
    };
    for (size_t k = 0; k < sizeof col / sizeof col[0] && !st; k++)
        st = qmla_table_add_column(t, col[k].name, "", col[k].desc, col[k].kind, col[k].data,
                                   err);
    if (st) {
        qmla_table_free(t);
        return st;
    }
    *out = t;
    return QMLA_OK;
}
