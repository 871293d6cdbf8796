/* predict.c — local gains, exact token sensitivities, allocations and the
 * predictors of the operator–error model for one sequence and over a
 * capture, with statistics, a resume journal and the /jvp or /predict group
 * of a results file (include/qmla/predict.h, docs/math.md §5,
 * docs/results-format.md). */
#include "qmla/predict.h"
#include "operator/op_shared.h"
#include "operator/op_part.h"
#include "core/alloc.h"
#include "qmla/norms.h"
#include "sweep/plan.h"
#include "io/group.h"
#include "io/journal.h"

#include <errno.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int qmla_op_ws_alloc(const qmla_mla_dims *d, size_t T, int with_sens,
                     int threads, qmla_op_ws *ws, qmla_error *err)
{
    memset(ws, 0, sizeof *ws);
    ws->T_max = T;
    ws->with_sens = with_sens;
    const size_t wmax = d->d_c > d->d_r ? d->d_c : d->d_r;
    int st;
    if ((st = qmla_sweep_ws_alloc(d, T, 0, &ws->sweep, err)) ||
        (st = qmla_jvp_ws_alloc(d, T, &ws->jvp, err)) ||
        (with_sens && (st = qmla_sens_ws_alloc(d, T, threads, &ws->sens, err)))) {
        qmla_op_ws_free(ws);
        return st;
    }
    ws->E = malloc(T * wmax * sizeof *ws->E);
    ws->tr = malloc(2 * T * sizeof *ws->tr);
    if (!ws->E || !ws->tr) {
        qmla_op_ws_free(ws);
        return qmla_error_set(err, QMLA_ENOMEM, "operator workspace: out of memory");
    }
    return QMLA_OK;
}

void qmla_op_ws_free(qmla_op_ws *ws)
{
    if (!ws)
        return;
    qmla_sweep_ws_free(&ws->sweep);
    qmla_jvp_ws_free(&ws->jvp);
    qmla_sens_ws_free(&ws->sens);
    free(ws->E);
    free(ws->tr);
    memset(ws, 0, sizeof *ws);
}

int qmla_op_sequence(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                     const qmla_mla_weights *w, const qmla_sens_layer *L,
                     const float *q_nope, const float *q_rope, const float *C,
                     const float *K, const qmla_op_config *conf, size_t nconf,
                     qmla_op_ws *ws, qmla_op_point *pts, double *alloc,
                     double *sigma, qmla_error *err)
{
    if (L && !ws->with_sens)
        return qmla_error_set(err, QMLA_EINVAL,
                              "operator: sensitivities asked, workspace without them");
    const size_t dc = d->d_c, dr = d->d_r, nY = T * d->D;
    const double cc = qmla_sumsq(C, T * dc), kk = qmla_sumsq(K, T * dr);
    const qmla_attn_state *clean = &ws->sweep.clean;
    double yy = 0.0;
    for (size_t k = 0; k < nconf; k++) {
        qmla_sweep_params sp = qmla_op_config_sweep(&conf[k]);
        qmla_response fin[2];
        /* the finite responses; the sweep's clean pass is the one the JVP
         * and the sensitivities reuse */
        int st = qmla_sweep_sequence(ex, &sp, d, T, w, q_nope, q_rope, C, K, 0,
                                     &ws->sweep, fin, err);
        if (st)
            return qmla_error_prefix(err, "INT%d G%d nu %g: ", conf[k].bits,
                                     conf[k].group, conf[k].nmse);
        if (k == 0) {
            yy = qmla_sumsq(clean->Y, nY);
            if (L) {
                st = qmla_sens_exact(ex, d, T, w, L, clean, C, &ws->sens, ws->tr,
                                     ws->tr + T, err);
                if (st)
                    return st;
                qmla_op_sigma_scale(sigma, ws->tr, T, cc, kk, yy);
            }
        }
        for (int path = 0; path < 2; path++) {
            qmla_op_point *p = &pts[2 * k + (size_t)path];
            double *wt = alloc + (2 * k + (size_t)path) * T;
            const int content = path == QMLA_PATH_CONTENT;
            double xx, ee;
            int skip;
            st = qmla_op_point_begin(p, path, &conf[k], &sp, C, K, T, dc, dr, &fin[path], yy,
                                     ws->E, wt, &xx, &ee, &skip, err);
            if (st)
                return st;
            if (skip)
                continue;
            st = qmla_jvp_apply(ex, d, T, w, clean, C, content ? ws->E : NULL,
                                content ? NULL : ws->E, &ws->jvp, err);
            if (st)
                return st;
            p->g_jvp = (qmla_sumsq(ws->jvp.dY, nY) / yy) / (ee / xx);
            p->g_finite = fin[path].response;
            if (L)
                qmla_op_point_pred(p, sigma + (size_t)path * T, wt, T);
        }
    }
    return QMLA_OK;
}

/* ---- statistics --------------------------------------------------------- */

double qmla_spearman(const double *x, const double *y, size_t n)
{
    if (n < 2)
        return NAN;
    double *work = malloc(2 * n * sizeof *work);
    double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    double r = NAN;
    if (work && a && b) {
        memcpy(a, x, n * sizeof *a); /* GSL sorts its inputs' copies in work */
        memcpy(b, y, n * sizeof *b);
        r = gsl_stats_spearman(a, 1, b, 1, n, work);
    }
    free(work);
    free(a);
    free(b);
    return r;
}

static int same_item(const qmla_op_point *a, const qmla_op_point *b)
{
    return a->layer == b->layer && a->seq == b->seq && a->bits == b->bits &&
           a->group == b->group && a->nmse == b->nmse && !strcmp(a->cell, b->cell);
}

int qmla_op_stats_compute(const qmla_op_point *p, size_t n, int with_pred,
                          qmla_op_stats *s, qmla_error *err)
{
    memset(s, 0, sizeof *s);
    double *x = calloc(n ? n : 1, sizeof *x), *y = calloc(n ? n : 1, sizeof *y);
    if (!x || !y) {
        free(x);
        free(y);
        return qmla_error_set(err, QMLA_ENOMEM, "operator statistics: out of memory");
    }
    size_t m = 0;
    for (size_t k = 0; k < n; k++)
        if (!p[k].degenerate) {
            x[m] = p[k].g_jvp;
            y[m++] = p[k].g_finite;
        }
    s->n_points = m;
    s->spearman_jvp_vs_finite = qmla_spearman(x, y, m);
    s->mae_log_ratio_cache_only = s->mae_log_ratio_operator_only =
        s->mae_log_ratio_operator_allocation = NAN;
    s->spearman = s->median_abs_log_error = NAN;
    if (with_pred) {
        /* pairs: a content point followed somewhere by its RoPE twin */
        double e1 = 0, e2 = 0, e3 = 0;
        size_t np = 0;
        for (size_t k = 0; k < n; k++) {
            if (p[k].path != QMLA_PATH_CONTENT || p[k].degenerate)
                continue;
            for (size_t j = 0; j < n; j++)
                if (p[j].path == QMLA_PATH_ROPE && !p[j].degenerate &&
                    same_item(&p[k], &p[j])) {
                    const double meas = log(p[j].g_finite / p[k].g_finite);
                    e1 += fabs(meas);
                    e2 += fabs(log(p[j].pred_trace / p[k].pred_trace) - meas);
                    e3 += fabs(log(p[j].pred_alloc / p[k].pred_alloc) - meas);
                    np++;
                    break;
                }
        }
        s->n_pairs = np;
        if (np) {
            s->mae_log_ratio_cache_only = e1 / (double)np;
            s->mae_log_ratio_operator_only = e2 / (double)np;
            s->mae_log_ratio_operator_allocation = e3 / (double)np;
        }
        m = 0;
        for (size_t k = 0; k < n; k++)
            if (p[k].heldout && !p[k].degenerate) {
                x[m] = p[k].pred_alloc;
                y[m++] = p[k].g_finite;
            }
        s->n_heldout = m;
        s->spearman = qmla_spearman(x, y, m);
        for (size_t k = 0; k < m; k++)
            x[k] = fabs(log(x[k] / y[k]));
        if (m) {
            gsl_sort(x, 1, m);
            s->median_abs_log_error = gsl_stats_median_from_sorted_data(x, 1, m);
        }
    }
    free(x);
    free(y);
    return QMLA_OK;
}

/* ---- splits by cell and by direction ------------------------------------ */

static void split_key(const qmla_op_point *p, int by, char *key, size_t len)
{
    if (by == QMLA_OP_SPLIT_CELL)
        snprintf(key, len, "%s", p->cell);
    else
        snprintf(key, len, "INT%d/G%d/nu%g", p->bits, p->group, p->nmse);
}

/* Spearman and median |log(pred/meas)| of the m pairs in x (pred), y (meas);
 * x is overwritten. */
static void frozen_stats(double *x, double *y, size_t m, double *rho, double *med)
{
    *rho = qmla_spearman(x, y, m);
    *med = NAN;
    if (!m)
        return;
    for (size_t k = 0; k < m; k++)
        x[k] = fabs(log(x[k] / y[k]));
    gsl_sort(x, 1, m);
    *med = gsl_stats_median_from_sorted_data(x, 1, m);
}

static int cmp_split(const void *a, const void *b)
{
    return strcmp(((const qmla_op_split *)a)->key, ((const qmla_op_split *)b)->key);
}

int qmla_op_split_compute(const qmla_op_point *p, size_t n, int by, qmla_op_split **rows,
                          size_t *n_rows, qmla_error *err)
{
    *rows = NULL;
    *n_rows = 0;
    qmla_op_split *r = calloc(n ? n : 1, sizeof *r);
    double *x = calloc(n ? n : 1, sizeof *x), *y = calloc(n ? n : 1, sizeof *y);
    if (!r || !x || !y) {
        free(r);
        free(x);
        free(y);
        return qmla_error_set(err, QMLA_ENOMEM, "operator split: out of memory");
    }
    size_t nr = 0;
    char key[QMLA_CELL_NAME_MAX];
    for (size_t k = 0; k < n; k++) {
        split_key(&p[k], by, key, sizeof key);
        size_t j = 0;
        while (j < nr && strcmp(r[j].key, key))
            j++;
        if (j == nr) {
            snprintf(r[nr].key, sizeof r[nr].key, "%s", key);
            r[nr].heldout = by == QMLA_OP_SPLIT_CELL ? -1 : p[k].heldout;
            nr++;
        }
    }
    if (by == QMLA_OP_SPLIT_CELL)
        qsort(r, nr, sizeof *r, cmp_split);
    for (size_t j = 0; j < nr; j++) {
        for (int all = 0; all < 2; all++) {
            size_t m = 0;
            for (size_t k = 0; k < n; k++) {
                split_key(&p[k], by, key, sizeof key);
                if (strcmp(key, r[j].key) || p[k].degenerate || (!all && !p[k].heldout))
                    continue;
                x[m] = p[k].pred_alloc;
                y[m++] = p[k].g_finite;
            }
            if (all) {
                r[j].n_all = m;
                frozen_stats(x, y, m, &r[j].spearman_all, &r[j].median_all);
            } else {
                r[j].n_heldout = m;
                frozen_stats(x, y, m, &r[j].spearman_heldout, &r[j].median_heldout);
            }
        }
        double e = 0.0;
        size_t np = 0;
        for (size_t k = 0; k < n; k++) {
            split_key(&p[k], by, key, sizeof key);
            if (strcmp(key, r[j].key) || p[k].path != QMLA_PATH_CONTENT || p[k].degenerate)
                continue;
            for (size_t i = 0; i < n; i++)
                if (p[i].path == QMLA_PATH_ROPE && !p[i].degenerate && same_item(&p[k], &p[i])) {
                    const double meas = log(p[i].g_finite / p[k].g_finite);
                    e += fabs(log(p[i].pred_alloc / p[k].pred_alloc) - meas);
                    np++;
                    break;
                }
        }
        r[j].n_pairs = np;
        r[j].mae_alloc = np ? e / (double)np : NAN;
    }
    free(x);
    free(y);
    *rows = r;
    *n_rows = nr;
    return QMLA_OK;
}

/* ---- journal ------------------------------------------------------------ */
/* RESULTS.h5.<group>.journal in the journal layer (io/journal.h; kind
 * "jvp" or "predict"), one record per finished item, doubles as C99 hex
 * floats (exact):
 *   I <layer> <cell> <seq> <T> <npoints> <nsigma>
 *   P <path> <bits> <group> <nmse> <heldout> <degenerate> <g_jvp> <g_finite>
 *     <pred_trace> <pred_alloc>                  (npoints lines)
 *   W <T values>                                 (npoints lines)
 *   S <T values>                                 (nsigma lines, 0 or 2)
 *   E
 * A malformed record cuts the journal there (recomputed). */

typedef struct op_store {
    qmla_op_point *pts;
    size_t n, cap;
    double *alloc;  /* flat, per point T values */
    size_t na, capa;
    /* sensitivities: per (layer, cell, seq) two vectors */
    int *s_layer, *s_seq;
    char (*s_cell)[QMLA_CELL_NAME_MAX];
    size_t *s_off, *s_T;
    size_t ns, caps;
    double *sig;
    size_t nsig, capsig;
    unsigned char *done; /* [plan items] */
} op_store;

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int store_item(op_store *s, int layer, const char *cell, int seq, size_t T,
                      const qmla_op_point *pts, size_t npts, const double *alloc,
                      const double *sigma)
{
    size_t cap_p = s->cap, cap_s = s->caps;
    if (grow((void **)&s->pts, &cap_p, s->n + npts, sizeof *s->pts) ||
        grow((void **)&s->alloc, &s->capa, s->na + npts * T, sizeof *s->alloc))
        return -1;
    s->cap = cap_p;
    for (size_t k = 0; k < npts; k++) {
        qmla_op_point p = pts[k];
        p.layer = layer;
        p.seq = seq;
        snprintf(p.cell, sizeof p.cell, "%s", cell);
        p.T = T;
        p.alloc_offset = s->na + k * T;
        s->pts[s->n + k] = p;
    }
    memcpy(s->alloc + s->na, alloc, npts * T * sizeof *alloc);
    s->n += npts;
    s->na += npts * T;
    if (sigma) {
        size_t c1 = cap_s, c2 = cap_s, c3 = cap_s, c4 = cap_s, c5 = cap_s;
        if (grow((void **)&s->s_layer, &c1, s->ns + 1, sizeof *s->s_layer) ||
            grow((void **)&s->s_seq, &c2, s->ns + 1, sizeof *s->s_seq) ||
            grow((void **)&s->s_cell, &c3, s->ns + 1, sizeof *s->s_cell) ||
            grow((void **)&s->s_off, &c4, s->ns + 1, sizeof *s->s_off) ||
            grow((void **)&s->s_T, &c5, s->ns + 1, sizeof *s->s_T) ||
            grow((void **)&s->sig, &s->capsig, s->nsig + 2 * T, sizeof *s->sig))
            return -1;
        s->caps = c1;
        s->s_layer[s->ns] = layer;
        s->s_seq[s->ns] = seq;
        snprintf(s->s_cell[s->ns], QMLA_CELL_NAME_MAX, "%s", cell);
        s->s_off[s->ns] = s->nsig;
        s->s_T[s->ns] = T;
        memcpy(s->sig + s->nsig, sigma, 2 * T * sizeof *sigma);
        s->nsig += 2 * T;
        s->ns++;
    }
    return 0;
}

static void store_free(op_store *s)
{
    free(s->pts);
    free(s->alloc);
    free(s->s_layer);
    free(s->s_seq);
    free(s->s_cell);
    free(s->s_off);
    free(s->s_T);
    free(s->sig);
    free(s->done);
    memset(s, 0, sizeof *s);
}

/* Rebuild s with its items in plan order (points of an item are contiguous,
 * its sensitivity pair follows the same order). */
static int store_reorder(op_store *s, const qmla_plan *plan)
{
    size_t *first = malloc((plan->n_items ? plan->n_items : 1) * sizeof *first);
    size_t *cnt = calloc(plan->n_items ? plan->n_items : 1, sizeof *cnt);
    size_t *sidx = malloc((plan->n_items ? plan->n_items : 1) * sizeof *sidx);
    op_store r;
    memset(&r, 0, sizeof r);
    int rc = -1;
    if (!first || !cnt || !sidx)
        goto out;
    for (size_t k = 0; k < plan->n_items; k++)
        first[k] = sidx[k] = SIZE_MAX;
    for (size_t k = 0; k < s->n; k++) {
        const size_t it = qmla_plan_find(plan, s->pts[k].layer, s->pts[k].cell,
                                         s->pts[k].seq);
        if (it == SIZE_MAX)
            goto out;
        if (first[it] == SIZE_MAX)
            first[it] = k;
        cnt[it]++;
    }
    for (size_t k = 0; k < s->ns; k++) {
        const size_t it = qmla_plan_find(plan, s->s_layer[k], s->s_cell[k], s->s_seq[k]);
        if (it == SIZE_MAX)
            goto out;
        sidx[it] = k;
    }
    for (size_t it = 0; it < plan->n_items; it++) {
        if (first[it] == SIZE_MAX)
            continue;
        const qmla_op_point *p = s->pts + first[it];
        const size_t T = p->T;
        double *a = malloc(cnt[it] * T * sizeof *a);
        if (!a)
            goto out;
        for (size_t j = 0; j < cnt[it]; j++)
            memcpy(a + j * T, s->alloc + p[j].alloc_offset, T * sizeof *a);
        const double *sg = sidx[it] == SIZE_MAX ? NULL : s->sig + s->s_off[sidx[it]];
        const int bad = store_item(&r, p->layer, p->cell, p->seq, T, p, cnt[it], a, sg);
        free(a);
        if (bad)
            goto out;
    }
    r.done = s->done;
    s->done = NULL;
    store_free(s);
    *s = r;
    memset(&r, 0, sizeof r);
    rc = 0;
out:
    store_free(&r);
    free(first);
    free(cnt);
    free(sidx);
    return rc;
}

static int journal_write_item(qmla_jnl *j, int layer, const char *cell, int seq,
                              size_t T, const qmla_op_point *p, size_t np,
                              const double *alloc, const double *sigma, qmla_error *err)
{
    qmla_jnl_printf(j, "I %d %s %d %zu %zu %d\n", layer, cell, seq, T, np, sigma ? 2 : 0);
    for (size_t k = 0; k < np; k++)
        qmla_jnl_printf(j, "P %d %d %d %a %d %d %a %a %a %a\n", p[k].path, p[k].bits,
                        p[k].group, p[k].nmse, p[k].heldout, p[k].degenerate, p[k].g_jvp,
                        p[k].g_finite, p[k].pred_trace, p[k].pred_alloc);
    for (size_t k = 0; k < np + (sigma ? 2 : 0); k++) {
        const double *v = k < np ? alloc + k * T : sigma + (k - np) * T;
        qmla_jnl_printf(j, k < np ? "W" : "S");
        for (size_t t = 0; t < T; t++)
            qmla_jnl_printf(j, " %a", v[t]);
        qmla_jnl_printf(j, "\n");
    }
    qmla_jnl_printf(j, "E\n");
    return qmla_jnl_commit(j, err);
}

typedef struct op_replay {
    const qmla_plan *plan;
    op_store *s;
    const char *path;
} op_replay;

/* One journal record (an item's block) into the store (the item marked done
 * in the plan); QMLA_EFORMAT for a malformed block (the journal is cut
 * there). */
static int journal_replay_item(void *ctx, char *rec, size_t len, qmla_error *err)
{
    op_replay *r = ctx;
    op_store *s = r->s;
    FILE *f = fmemopen(rec, len, "r");
    if (!f)
        return qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", r->path);
    qmla_op_point *pts = NULL;
    double *vec = NULL;
    int rc = QMLA_EFORMAT;
    int layer, seq, nsig;
    size_t T, np;
    char cell[QMLA_CELL_NAME_MAX];
    if (fscanf(f, " I %d %127s %d %zu %zu %d", &layer, cell, &seq, &T, &np, &nsig) != 6)
        goto out;
    if (T == 0 || T > (1u << 24) || np == 0 || np > 4096 || (nsig != 0 && nsig != 2))
        goto out;
    pts = calloc(np, sizeof *pts);
    vec = malloc((np + 2) * T * sizeof *vec);
    if (!pts || !vec) {
        rc = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", r->path);
        goto out;
    }
    int ok = 1;
    for (size_t k = 0; k < np && ok; k++)
        ok = fscanf(f, " P %d %d %d %la %d %d %la %la %la %la", &pts[k].path,
                    &pts[k].bits, &pts[k].group, &pts[k].nmse, &pts[k].heldout,
                    &pts[k].degenerate, &pts[k].g_jvp, &pts[k].g_finite,
                    &pts[k].pred_trace, &pts[k].pred_alloc) == 10;
    for (size_t k = 0; k < np + (size_t)nsig && ok; k++) {
        char tag[2];
        ok = fscanf(f, " %1s", tag) == 1 && tag[0] == (k < np ? 'W' : 'S');
        for (size_t t = 0; t < T && ok; t++)
            ok = fscanf(f, " %la", &vec[k * T + t]) == 1;
    }
    char e[2];
    if (!ok || fscanf(f, " %1s", e) != 1 || e[0] != 'E')
        goto out; /* a malformed block: cut, recomputed */
    rc = QMLA_OK;
    const size_t item = qmla_plan_find(r->plan, layer, cell, seq);
    /* an item outside the selection (another --layers, another shard) is
     * not this run's: a journal of a wider run resumes only what it wants */
    if (item == SIZE_MAX || s->done[item] || !r->plan->wanted[item])
        goto out;
    if (store_item(s, layer, cell, seq, T, pts, np, vec, nsig ? vec + np * T : NULL)) {
        rc = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", r->path);
        goto out;
    }
    s->done[item] = 1;
out:
    free(pts);
    free(vec);
    fclose(f);
    return rc;
}

/* ---- the results group --------------------------------------------------- */

static int dset_d(hid_t g, const char *name, size_t n, const double *v,
                  const char *desc, const char *units)
{
    return qmla_h5_dset_1d(g, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, v, desc,
                           units);
}

static int dset_i(hid_t g, const char *name, size_t n, const int *v, const char *desc)
{
    return qmla_h5_dset_1d(g, name, H5T_STD_I32LE, H5T_NATIVE_INT, n, v, desc, NULL);
}

static int dset_u(hid_t g, const char *name, size_t n, const size_t *v,
                  const char *desc)
{
    long long *w = malloc((n ? n : 1) * sizeof *w);
    if (!w)
        return -1;
    for (size_t k = 0; k < n; k++)
        w[k] = (long long)v[k];
    int r = qmla_h5_dset_1d(g, name, H5T_STD_I64LE, H5T_NATIVE_LLONG, n, w, desc, NULL);
    free(w);
    return r;
}

static int write_group(const char *path, const char *gname, const op_store *s,
                       const qmla_op_stats *stt, int with_pred, const char *capture,
                       const char *sha, const char *command_line,
                       const char *eng_name, const char *eng_device, qmla_error *err)
{
    const size_t n = s->n;
    int st = QMLA_OK;
    qmla_h5_out o;
    if ((st = qmla_h5_out_group(&o, path, gname, err)))
        return st;
    const hid_t g = o.g;
    int *iv = malloc((n ? n : 1) * sizeof *iv);
    double *dv = malloc((n ? n : 1) * sizeof *dv);
    const char **cells = malloc((n ? n : 1) * sizeof *cells);
    if (!iv || !dv || !cells) {
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    {
        const qmla_prov_input in[] = {{"capture_file", capture}, {"capture_sha256", sha}};
        const qmla_prov p = {.tool = with_pred ? "qmla predict" : "qmla jvp",
                             .command_line = command_line,
                             .engine = eng_name, .engine_device = eng_device, .inputs = in,
                             .n_inputs = 2};
        if ((st = qmla_h5_prov(g, &p, path, err)))
            goto out;
    }
    QMLA_H5_TRY(qmla_h5_attr_int(g, "n_points", (long long)stt->n_points), "attribute n_points");
    QMLA_H5_TRY(qmla_h5_attr_dbl(g, "spearman_jvp_vs_finite", stt->spearman_jvp_vs_finite),
          "attribute spearman_jvp_vs_finite");
    if (with_pred) {
        QMLA_H5_TRY(qmla_h5_attr_dbl(g, "spearman", stt->spearman), "attribute spearman");
        QMLA_H5_TRY(qmla_h5_attr_dbl(g, "median_abs_log_error", stt->median_abs_log_error),
              "attribute median_abs_log_error");
        QMLA_H5_TRY(qmla_h5_attr_dbl(g, "mae_log_ratio_cache_only", stt->mae_log_ratio_cache_only),
              "attribute mae_log_ratio_cache_only");
        QMLA_H5_TRY(qmla_h5_attr_dbl(g, "mae_log_ratio_operator_only",
                               stt->mae_log_ratio_operator_only),
              "attribute mae_log_ratio_operator_only");
        QMLA_H5_TRY(qmla_h5_attr_dbl(g, "mae_log_ratio_operator_allocation",
                               stt->mae_log_ratio_operator_allocation),
              "attribute mae_log_ratio_operator_allocation");
        QMLA_H5_TRY(qmla_h5_attr_int(g, "n_pairs", (long long)stt->n_pairs), "attribute n_pairs");
        QMLA_H5_TRY(qmla_h5_attr_int(g, "n_heldout", (long long)stt->n_heldout),
              "attribute n_heldout");
        QMLA_H5_TRY(qmla_h5_attr_str(g, "sensitivity_estimator", "exact"),
              "attribute sensitivity_estimator");
    }
#define COL_I(name, field, desc)                                               \
    for (size_t k = 0; k < n; k++)                                             \
        iv[k] = s->pts[k].field;                                               \
    QMLA_H5_TRY(dset_i(g, name, n, iv, desc), name)
#define COL_D(name, field, desc, units)                                        \
    for (size_t k = 0; k < n; k++)                                             \
        dv[k] = s->pts[k].field;                                               \
    QMLA_H5_TRY(dset_d(g, name, n, dv, desc, units), name)
    COL_I("layer", layer, "layer index");
    for (size_t k = 0; k < n; k++)
        cells[k] = s->pts[k].cell;
    QMLA_H5_TRY(qmla_h5_dset_strs(g, "cell", n, cells, "cell name"), "cell");
    COL_I("seq", seq, "sequence within the cell");
    COL_I("path", path, "0 content, 1 RoPE");
    COL_I("bits", bits, "quantizer bits of the direction");
    COL_I("group", group, "quantizer group size of the direction");
    COL_D("nmse", nmse, "cache NMSE the direction is rescaled to", "1");
    COL_I("heldout", heldout, "1: a validation point of the frozen predictor");
    COL_I("degenerate", degenerate, "1: zero-energy direction, cache or output");
    COL_D("g_jvp", g_jvp, "local (JVP) gain (||J E||^2/||Y||^2)/(||E||^2/||X||^2)", "1");
    COL_D("g_finite", g_finite, "finite response NMSE_out/NMSE_cache at the same E", "1");
    if (with_pred) {
        COL_D("pred_trace", pred_trace, "operator-only predictor (1/T) sum_t sigma_t", "1");
        COL_D("pred_alloc", pred_alloc, "operator+allocation predictor sum_t w_t sigma_t", "1");
        size_t *off = malloc((n ? n : 1) * sizeof *off);
        if (!off) {
            st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
            goto out;
        }
        for (size_t k = 0; k < n; k++)
            off[k] = s->pts[k].alloc_offset;
        int r = dset_u(g, "alloc_offset", n, off, "offset of the point's w_t in allocation");
        for (size_t k = 0; k < n; k++)
            off[k] = s->pts[k].T;
        r = r < 0 ? r : dset_u(g, "T", n, off, "tokens of the point's sequence");
        free(off);
        QMLA_H5_TRY(r, "alloc_offset");
        QMLA_H5_TRY(dset_d(g, "allocation", s->na, s->alloc,
                     "error allocation w_t = ||e_t||^2/||E||^2, per point, flat", "1"),
              "allocation");
        QMLA_H5_TRY(dset_i(g, "sens_layer", s->ns, s->s_layer, "layer of each sensitivity vector pair"),
              "sens_layer");
        const char **sc = malloc((s->ns ? s->ns : 1) * sizeof *sc);
        if (!sc) {
            st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
            goto out;
        }
        for (size_t k = 0; k < s->ns; k++)
            sc[k] = s->s_cell[k];
        r = qmla_h5_dset_strs(g, "sens_cell", s->ns, sc, "cell of each sensitivity vector pair");
        free(sc);
        QMLA_H5_TRY(r, "sens_cell");
        QMLA_H5_TRY(dset_i(g, "sens_seq", s->ns, s->s_seq, "sequence of each sensitivity vector pair"),
              "sens_seq");
        QMLA_H5_TRY(dset_u(g, "sens_offset", s->ns, s->s_off,
                     "offset of sigma: content at off, RoPE at off + T"), "sens_offset");
        QMLA_H5_TRY(dset_u(g, "sens_T", s->ns, s->s_T, "tokens"), "sens_T");
        QMLA_H5_TRY(dset_d(g, "sensitivity", s->nsig, s->sig,
                     "sigma_b,t = tr(J_t^T J_t)/d_b * ||X_b||^2/||Y||^2 (exact), flat", "1"),
              "sensitivity");
    }
    if (with_pred) {
        /* the frozen predictor by cell and by direction (qmla_op_split_compute) */
        static const char *const pre[2] = {"by_cell_", "by_direction_"};
        for (int by = 0; by < 2; by++) {
            qmla_op_split *sp = NULL;
            size_t nsp = 0;
            if ((st = qmla_op_split_compute(s->pts, n, by, &sp, &nsp, err)))
                goto out;
            const char **keys = malloc((nsp ? nsp : 1) * sizeof *keys);
            double *col = malloc((nsp ? nsp : 1) * sizeof *col);
            int r = (!keys || !col) ? -2 : 0;
            char nm[64];
#define SPLIT_D(field, desc)                                                   \
    if (r == 0) {                                                              \
        for (size_t k = 0; k < nsp; k++)                                       \
            col[k] = (double)sp[k].field;                                      \
        snprintf(nm, sizeof nm, "%s%s", pre[by], #field);                      \
        r = dset_d(g, nm, nsp, col, desc, "1");                                \
    }
            if (r == 0) {
                for (size_t k = 0; k < nsp; k++)
                    keys[k] = sp[k].key;
                snprintf(nm, sizeof nm, "%skey", pre[by]);
                r = qmla_h5_dset_strs(g, nm, nsp, keys, by ? "direction INTb/Gg/nu" :
                                      "cell name");
            }
            SPLIT_D(heldout, "direction held out (1) or development (0); -1 for cells")
            SPLIT_D(n_heldout, "non-degenerate held-out points")
            SPLIT_D(spearman_heldout, "Spearman(pred_alloc, g_finite), held-out points")
            SPLIT_D(median_heldout, "median |log(pred_alloc/g_finite)|, held-out points")
            SPLIT_D(n_all, "non-degenerate points, all directions")
            SPLIT_D(spearman_all, "Spearman(pred_alloc, g_finite), all directions")
            SPLIT_D(median_all, "median |log(pred_alloc/g_finite)|, all directions")
            SPLIT_D(n_pairs, "RoPE/content pairs")
            SPLIT_D(mae_alloc, "operator+allocation log-ratio MAE over the pairs")
#undef SPLIT_D
            free(keys);
            free(col);
            free(sp);
            if (r == -2) {
                st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
                goto out;
            }
            QMLA_H5_TRY(r, nm);
        }
    }
#undef COL_I
#undef COL_D
out:
    st = qmla_h5_out_finish(&o, st);
    free(iv);
    free(dv);
    free(cells);
    return st;
}

/* ---- the driver ------------------------------------------------------- */

static void op_key(const qmla_op_opts *o, const char *sha, const qmla_plan *plan,
                   char *key, size_t len)
{
    size_t u = (size_t)snprintf(key, len, "sha256=%s sens=%d", sha, o->sensitivities);
    for (size_t k = 0; k < o->nconf && u < len; k++)
        u += (size_t)snprintf(key + u, len - u, " c%d/%d/%a/%d", o->conf[k].bits,
                              o->conf[k].group, o->conf[k].nmse, o->conf[k].heldout);
    for (size_t c = 0; c < plan->n_cells && u < len; c++)
        u += (size_t)snprintf(key + u, len - u, "%s%s", c ? "," : " cells=",
                              plan->cells[c]);
}

/* The plan index of a record (op_part.h's item_of). */
static int op_record_item(void *ctx, const char *rec, size_t len, size_t *item)
{
    (void)len;
    const op_replay *r = ctx;
    int layer, seq;
    char cell[QMLA_CELL_NAME_MAX];
    if (sscanf(rec, " I %d %127s %d", &layer, cell, &seq) != 3)
        return QMLA_EFORMAT;
    *item = qmla_plan_find(r->plan, layer, cell, seq);
    return QMLA_OK;
}

/* The shard's items (the store in plan order: np points and one
 * sensitivity pair per item) into its part file. */
typedef struct op_emit {
    const op_store *s;
    size_t np;
    int sens;
} op_emit;

static int op_emit_items(void *ctx, qmla_jnl *j, qmla_error *err)
{
    const op_emit *e = ctx;
    const op_store *s = e->s;
    for (size_t i = 0; e->np && i < s->n / e->np; i++) {
        const qmla_op_point *p = s->pts + i * e->np;
        const int st = journal_write_item(j, p->layer, p->cell, p->seq, p->T, p, e->np,
                                          s->alloc + p->alloc_offset,
                                          e->sens ? s->sig + s->s_off[i] : NULL, err);
        if (st)
            return st;
    }
    return QMLA_OK;
}

int qmla_op_run(qmla_capture *cap, const qmla_sweep_selection *sel,
                const qmla_op_opts *o, const char *results_path,
                qmla_op_stats *stats, int *stopped, qmla_error *err)
{
    return qmla_op_run_points(cap, sel, o, results_path, stats, NULL, NULL, stopped,
                              err);
}

int qmla_op_run_points(qmla_capture *cap, const qmla_sweep_selection *sel,
                       const qmla_op_opts *o, const char *results_path,
                       qmla_op_stats *stats, qmla_op_point **points, size_t *npoints,
                       int *stopped, qmla_error *err)
{
    *stopped = 0;
    if (points)
        *points = NULL;
    const qmla_capture_config *cfg = qmla_capture_get_config(cap);
    const qmla_mla_dims d = {(size_t)cfg->H, (size_t)cfg->D, (size_t)cfg->d_c,
                             (size_t)cfg->d_n, (size_t)cfg->d_r, (size_t)cfg->d_v,
                             cfg->softmax_scale};
    if (o->nconf == 0)
        return qmla_error_set(err, QMLA_EINVAL, "operator: no configuration");
    for (size_t k = 0; k < o->nconf; k++) {
        qmla_sweep_params sp = qmla_sweep_defaults();
        sp.quant.bits = o->conf[k].bits;
        sp.quant.group = o->conf[k].group;
        sp.nmse = o->conf[k].nmse;
        int st = qmla_sweep_params_check(&sp, cfg, err);
        if (st)
            return st;
    }
    const char *gname = o->sensitivities ? "predict" : "jvp";
    const char *pkind = o->sensitivities ? "predict-part" : "jvp-part";
    const int sharded = o->n_shards > 1, merging = o->n_parts > 0;
    int st;
    qmla_plan plan;
    uint64_t plan_hash = 0;
    if ((st = qmla_oppart_plan(cap, sel, "operator", o->shard, o->n_shards, merging,
                               results_path, pkind, &plan, &plan_hash, err)))
        return st;
    const qmla_plan_selection ps = qmla_plan_selection_of(sel); /* the whole run's, for a merge */
    char sha[65], key[8192], jpath[4096];
    qmla_oppart_prov prov;
    memset(&prov, 0, sizeof prov);
    op_store s;
    memset(&s, 0, sizeof s);
    /* the per-sequence work, its workspace and the per-layer constants go
     * through the engine (qmla/engine.h) */
    const qmla_op_ops *eng = qmla_engine_op(o->engine);
    void *ws = NULL, *L = NULL;
    qmla_layer layer;
    memset(&layer, 0, sizeof layer);
    qmla_op_point *pts = NULL;
    double *alloc = NULL, *sigma = NULL;
    qmla_jnl jf;
    int jopen = 0;
    const qmla_exec ex = qmla_exec_cpu(o->threads);
    if ((st = qmla_sha256_file(qmla_capture_path(cap), sha, err)))
        goto out;
    op_key(o, sha, &plan, key, sizeof key);
    snprintf(jpath, sizeof jpath, "%s.%s.journal", results_path, gname);
    if (!(s.done = calloc(plan.n_items ? plan.n_items : 1, 1))) {
        st = qmla_error_set(err, QMLA_ENOMEM, "operator: out of memory");
        goto out;
    }
    op_replay rp = {&plan, &s, jpath};
    if (merging)
        st = qmla_oppart_merge_read(o->parts, o->n_parts, pkind, key, cap, &ps, &plan,
                                    op_record_item, journal_replay_item, &rp, &prov, err);
    else
        st = qmla_jnl_open(&jf, jpath, gname, key, o->force, journal_replay_item, &rp, NULL,
                           err);
    if (st)
        goto out;
    jopen = !merging;
    char engines[64] = ""; /* of the items resumed and computed (journal.h) */
    if (jopen) {
        qmla_jnl_engines_add(engines, sizeof engines, jf.engines);
        if ((st = qmla_jnl_engine(&jf, qmla_engine_name(o->engine),
                                  qmla_engine_mode(o->engine), err)))
            goto out;
    }
    if (sharded && o->n_replay) { /* earlier runs' parts and journals, any N */
        if ((st = qmla_oppart_replay_files(o->replay, o->n_replay, gname, pkind, key,
                                           journal_replay_item, &rp, engines, sizeof engines,
                                           err)))
            goto out;
    }
    const size_t T = plan.T_max ? plan.T_max : 1, np = 2 * o->nconf;
    /* nothing to compute: a merge, or an empty shard */
    if (!merging && plan.n_wanted > 0 &&
        (st = eng->ws_alloc(&d, T, o->sensitivities, qmla_exec_threads(&ex), &ws, err)))
        goto out;
    pts = malloc(np * sizeof *pts);
    alloc = malloc(np * T * sizeof *alloc);
    sigma = malloc(2 * T * sizeof *sigma);
    if (!pts || !alloc || !sigma) {
        st = qmla_error_set(err, QMLA_ENOMEM, "operator: out of memory");
        goto out;
    }
    size_t done = 0, resumed = 0;
    for (size_t k = 0; k < plan.n_items; k++)
        if (plan.wanted[k] && s.done[k])
            resumed++;
    done = resumed;
    long cur_li = -1;
    for (size_t k = 0; k < plan.n_items; k++) {
        if (!plan.wanted[k] || s.done[k])
            continue;
        const qmla_plan_item *it = &plan.items[k];
        if ((long)it->li != cur_li) {
            qmla_layer_free(&layer);
            eng->layer_free(L);
            L = NULL;
            if ((st = qmla_capture_load_layer(cap, it->li, &layer, err)))
                goto out;
            const qmla_mla_weights w = {layer.w_uk, layer.w_uv, layer.w_o};
            if (o->sensitivities && (st = eng->layer_alloc(&ex, &d, &w, &L, err)))
                goto out;
            if (eng->layer_begin) /* a device engine copies the new weights */
                eng->layer_begin(ws);
            cur_li = (long)it->li;
        }
        qmla_cell cell;
        memset(&cell, 0, sizeof cell);
        if ((st = qmla_capture_load_cell_parts(cap, it->li, it->ci, 0, &cell, err)))
            goto out;
        const size_t Tc = cell.T, H = d.H, q = it->seq;
        const qmla_mla_weights w = {layer.w_uk, layer.w_uv, layer.w_o};
        st = eng->sequence(&ex, &d, Tc, &w, o->sensitivities ? L : NULL,
                           cell.q_nope + q * H * Tc * d.d_n,
                           cell.q_rope + q * H * Tc * d.d_r, cell.c_kv + q * Tc * d.d_c,
                           cell.k_rope + q * Tc * d.d_r, o->conf, o->nconf, ws, pts,
                           alloc, sigma, err);
        if (st) {
            qmla_error_prefix(err, "%s: layer %d, cell %s, sequence %zu: ",
                              qmla_capture_path(cap), it->layer, cell.name, q);
            qmla_cell_free(&cell);
            goto out;
        }
        const char *cname = qmla_capture_cell_name(cap, it->li, it->ci);
        if (store_item(&s, it->layer, cname, (int)q, Tc, pts, np, alloc,
                       o->sensitivities ? sigma : NULL)) {
            qmla_cell_free(&cell);
            st = qmla_error_set(err, QMLA_ENOMEM, "operator: out of memory");
            goto out;
        }
        qmla_cell_free(&cell);
        if ((st = journal_write_item(&jf, it->layer, cname, (int)q, Tc, pts, np, alloc,
                                     o->sensitivities ? sigma : NULL, err)))
            goto out;
        s.done[k] = 1;
        done++;
        if (o->progress && o->progress(o->progress_ctx, done, plan.n_wanted, resumed)) {
            *stopped = 1;
            goto out;
        }
    }
    /* plan order, whatever was resumed: the file is the same bit for bit */
    if (store_reorder(&s, &plan)) {
        st = qmla_error_set(err, QMLA_ENOMEM, "operator: out of memory");
        goto out;
    }
    /* items another engine computed (a resume across engines): the file
     * names every engine of its items, so a merge refuses it beside one
     * engine's parts */
    if (jopen)
        qmla_jnl_engines_add(engines, sizeof engines, jf.engines);
    if (sharded) {
        /* a part file of the shard's items; the group needs every item */
        const op_emit em = {&s, np, o->sensitivities};
        if ((st = qmla_oppart_write(results_path, pkind, key, o->shard, o->n_shards, plan_hash,
                                    o->engine, engines, op_emit_items, (void *)&em, err)))
            goto out;
        qmla_jnl_close(&jf, 1);
        jopen = 0;
        goto out;
    }
    if ((st = qmla_op_stats_compute(s.pts, s.n, o->sensitivities, stats, err)))
        goto out;
    if ((st = write_group(results_path, gname, &s, stats, o->sensitivities,
                          qmla_capture_path(cap), sha, o->command_line,
                          merging ? prov.engine
                                  : engines[0] ? engines : qmla_engine_name(o->engine),
                          merging ? prov.device : qmla_engine_device(o->engine), err)))
        goto out;
    if (jopen)
        qmla_jnl_close(&jf, 1);
    jopen = 0;
    if (points) {
        *points = s.pts; /* handed over */
        *npoints = s.n;
        s.pts = NULL;
    }
out:
    if (jopen)
        qmla_jnl_close(&jf, 0);
    free(pts);
    free(alloc);
    free(sigma);
    if (ws)
        eng->ws_free(ws);
    qmla_layer_free(&layer);
    eng->layer_free(L);
    store_free(&s);
    qmla_plan_free(&plan);
    return st;
}

static void point_init(qmla_op_point *p, int path, const qmla_op_config *c, size_t T)
{
    memset(p, 0, sizeof *p);
    p->path = path;
    p->bits = c->bits;
    p->group = c->group;
    p->nmse = c->nmse;
    p->heldout = c->heldout;
    p->T = T;
}

void qmla_op_sigma_scale(double *sigma, const double *tr, size_t T, double cc, double kk,
                         double yy)
{
    for (size_t t = 0; t < T; t++) {
        sigma[t] = yy > 0 ? tr[t] * cc / yy : 0.0;
        sigma[T + t] = yy > 0 ? tr[T + t] * kk / yy : 0.0;
    }
}

static int point_weights(qmla_op_point *p, int degen, const qmla_response *fin, double yy,
                         const float *E, size_t T, size_t width, double *wt, double *ee)
{
    p->degenerate = degen || fin->degenerate || yy == 0.0;
    for (size_t t = 0; t < T; t++)
        wt[t] = 0.0;
    *ee = 0.0;
    if (p->degenerate)
        return 1;
    *ee = qmla_sumsq(E, T * width);
    for (size_t t = 0; t < T; t++)
        wt[t] = qmla_sumsq(E + t * width, width) / *ee;
    return 0;
}

int qmla_op_point_begin(qmla_op_point *p, int path, const qmla_op_config *c,
                        const qmla_sweep_params *sp, const float *C, const float *K, size_t T,
                        size_t dc, size_t dr, const qmla_response *fin, double yy, float *E,
                        double *wt, double *xx, double *ee, int *skip, qmla_error *err)
{
    point_init(p, path, c, T);
    size_t width;
    int degen;
    *skip = 1;
    const int st = qmla_op_path_direction(sp, path, C, K, T, dc, dr, E, &width, xx, &degen, err);
    if (st)
        return st;
    *skip = point_weights(p, degen, fin, yy, E, T, width, wt, ee);
    return QMLA_OK;
}

int qmla_op_point_begin_dir(qmla_op_point *p, int path, const qmla_op_config *c, size_t T,
                            size_t width, const float *E, int degen,
                            const qmla_response *fin, double yy, double *wt, double *ee)
{
    point_init(p, path, c, T);
    return point_weights(p, degen, fin, yy, E, T, width, wt, ee);
}

void qmla_op_point_pred(qmla_op_point *p, const double *sg, const double *wt, size_t T)
{
    double m = 0.0, a = 0.0;
    for (size_t t = 0; t < T; t++) {
        m += sg[t];
        a += wt[t] * sg[t];
    }
    p->pred_trace = m / (double)T;
    p->pred_alloc = a;
}
