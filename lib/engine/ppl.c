/* lib/engine/ppl.c — bits per byte of a text under cache configurations
 * (qmla_model_ppl*): the text cut into windows of [BOS] + bytes, windows in
 * parallel (one workspace per thread), every configuration of a window in
 * turn through the forward pass (lib/engine/forward.c, the clean prefix
 * shared), the NLL summed in double in window order; and the /ppl group of
 * a results file with its /ppl_table (qmla_ppl_save). */
#include "engine/engine_int.h"
#include "io/group.h"
#include "qmla_commit.h"

#include <gsl/gsl_cdf.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* ------------------------------------------------------------ perplexity */

/* Sum over t of -log softmax(row t)[target t] in double, rows t < P from
 * the prefix logits and the rest from lg (P = 0: all from lg). */
static double window_nll(const float *lg, const float *pre, size_t P, size_t T, size_t V,
                         const uint8_t *win)
{
    double s = 0.0;
    for (size_t t = 0; t < T; t++) {
        const float *r = (t < P ? pre : lg) + t * V;
        float mx = r[0];
        for (size_t v = 1; v < V; v++)
            mx = r[v] > mx ? r[v] : mx;
        double z = 0.0;
        for (size_t v = 0; v < V; v++)
            z += exp((double)r[v] - mx);
        s += log(z) + mx - (double)r[win[t]];
    }
    return s;
}

/* log sum_v exp(r[v]) in double, as window_nll takes it, and the first
 * index of the maximum. */
static double row_lse(const float *r, size_t V, size_t *am)
{
    float mx = r[0];
    size_t a = 0;
    for (size_t v = 1; v < V; v++)
        if (r[v] > mx)
            mx = r[v], a = v;
    double z = 0.0;
    for (size_t v = 0; v < V; v++)
        z += exp((double)r[v] - mx);
    *am = a;
    return log(z) + mx;
}

/* One window's KL from the reference rows ref [T, V] (their log-sum-exp
 * rlse [T] and argmax ram [T]): rows t < P from the prefix logits, the rest
 * from lg; tok[T] the per-target KL, *sum their sum in double in target
 * order, *top1 the targets whose argmax agrees. */
static void window_kl(const float *lg, const float *pre, size_t P, size_t T, size_t V,
                      const float *ref, const double *rlse, const size_t *ram, double *sum,
                      long long *top1, float *tok)
{
    double s = 0.0;
    long long agree = 0;
    for (size_t t = 0; t < T; t++) {
        const float *q = (t < P ? pre : lg) + t * V, *r = ref + t * V;
        size_t am;
        const double lq = row_lse(q, V, &am), lr = rlse[t];
        double kl = 0.0;
        for (size_t v = 0; v < V; v++) {
            const double a = (double)r[v] - lr, b = (double)q[v] - lq;
            kl += exp(a) * (a - b);
        }
        tok[t] = (float)kl;
        s += kl;
        agree += am == ram[t];
    }
    *sum = s;
    *top1 = agree;
}

/* res's KL fields from the n windows' sums, agreements and per-token KL of
 * configuration j (qmla_model_ppl_kl says what they are). */
static int kl_stats(const qmla_eng_ppl_kl *kl, size_t j, size_t n_cs, size_t n, size_t T,
                    qmla_ppl_result *res, qmla_error *err)
{
    const size_t N = n * T;
    double *x = malloc((N > n ? N : n) * sizeof *x);
    if (!x)
        return qmla_error_set(err, QMLA_ENOMEM, "KL: %zu per-token values", N);
    double s = 0.0;
    long long a = 0;
    for (size_t k = 0; k < n; k++) {
        s += kl->sum[k * n_cs + j];
        a += kl->top1[k * n_cs + j];
    }
    res->has_kl = 1;
    res->kl_mean = s / (double)N;
    res->top1_agreement = (double)a / (double)N;
    res->kl_ci_lo = res->kl_ci_hi = NAN; /* one window: no spread to measure */
    if (n >= 2) {
        for (size_t k = 0; k < n; k++)
            x[k] = kl->sum[k * n_cs + j] / (double)T;
        const double sd = gsl_stats_sd(x, 1, n);
        const double h = gsl_cdf_tdist_Pinv(0.975, (double)(n - 1)) * sd / sqrt((double)n);
        /* truncated at 0: KL >= 0, so the part below 0 holds no value the
         * mean can take (the interval keeps its coverage) */
        res->kl_ci_lo = fmax(0.0, res->kl_mean - h);
        res->kl_ci_hi = res->kl_mean + h;
    }
    for (size_t k = 0; k < n; k++)
        for (size_t t = 0; t < T; t++)
            x[k * T + t] = kl->tok[(k * n_cs + j) * T + t];
    gsl_sort(x, 1, N);
    res->kl_p99 = gsl_stats_quantile_from_sorted_data(x, 1, N, 0.99);
    free(x);
    return QMLA_OK;
}

int qmla_model_ppl(const qmla_model *m, const qmla_exec *ex, const qmla_cache_spec *cs,
                   const uint8_t *text, size_t n_bytes, size_t context, size_t max_windows,
                   qmla_ppl_result *res, qmla_error *err)
{
    return qmla_model_ppl_multi(m, ex, cs, 1, text, n_bytes, context, max_windows, res, err);
}

int qmla_model_ppl_multi(const qmla_model *m, const qmla_exec *ex, const qmla_cache_spec *cs,
                         size_t n_cs, const uint8_t *text, size_t n_bytes, size_t context,
                         size_t max_windows, qmla_ppl_result *res, qmla_error *err)
{
    return qmla_model_ppl_multi_progress(m, ex, cs, n_cs, text, n_bytes, context, max_windows,
                                         NULL, NULL, NULL, res, err);
}

int qmla_model_ppl_multi_progress(const qmla_model *m, const qmla_exec *ex,
                                  const qmla_cache_spec *cs, size_t n_cs, const uint8_t *text,
                                  size_t n_bytes, size_t context, size_t max_windows,
                                  qmla_progress_fn progress, void *progress_ctx,
                                  int *stopped, qmla_ppl_result *res, qmla_error *err)
{
    return qmla_eng_ppl_windows(m, ex, cs, n_cs, text, n_bytes, context, max_windows, progress,
                                progress_ctx, NULL, NULL, stopped, res, err);
}

int qmla_model_ppl_kl(const qmla_model *m, const qmla_exec *ex, const qmla_cache_spec *cs,
                      size_t n_cs, const qmla_cache_spec *ref, const uint8_t *text,
                      size_t n_bytes, size_t context, size_t max_windows, qmla_ppl_result *res,
                      qmla_error *err)
{
    if (!ref)
        return qmla_error_set(err, QMLA_EINVAL, "KL: no reference configuration");
    const size_t n = qmla_eng_ppl_n_windows(n_bytes, context, max_windows);
    const size_t nn = (n ? n : 1) * (n_cs ? n_cs : 1);
    qmla_eng_ppl_kl kl = {ref, -1, calloc(nn, sizeof(double)), calloc(nn, sizeof(long long)),
                          calloc(nn * (context ? context : 1), sizeof(float))};
    int st = !kl.sum || !kl.top1 || !kl.tok
                 ? qmla_error_set(err, QMLA_ENOMEM, "KL of %zu windows", n)
                 : qmla_eng_ppl_windows(m, ex, cs, n_cs, text, n_bytes, context, max_windows,
                                        NULL, NULL, NULL, &kl, NULL, res, err);
    free(kl.sum);
    free(kl.top1);
    free(kl.tok);
    return st;
}

size_t qmla_eng_ppl_n_windows(size_t n_bytes, size_t context, size_t max_windows)
{
    size_t n = context ? n_bytes / context : 0;
    if (max_windows && max_windows < n)
        n = max_windows;
    return n;
}

int qmla_eng_ppl_windows(const qmla_model *m, const qmla_exec *ex, const qmla_cache_spec *cs,
                         size_t n_cs, const uint8_t *text, size_t n_bytes, size_t context,
                         size_t max_windows, qmla_progress_fn progress, void *progress_ctx,
                         const qmla_eng_ppl_resume *rs, const qmla_eng_ppl_kl *kl,
                         int *stopped, qmla_ppl_result *res, qmla_error *err)
{
    const qmla_model_config *c = &m->c;
    if (stopped)
        *stopped = 0;
    memset(res, 0, n_cs * sizeof *res);
    if (context < 1 || context > c->max_pos)
        return qmla_error_set(err, QMLA_EINVAL, "context %zu: expected 1 to "
                              "max_position_embeddings %zu", context, c->max_pos);
    if ((size_t)c->bos >= c->V || c->V < 256)
        return qmla_error_set(err, QMLA_EINVAL, "byte-level scoring needs vocab >= 256 and "
                              "a BOS id below it (vocab %zu, BOS %d)", c->V, c->bos);
    size_t n = qmla_eng_ppl_n_windows(n_bytes, context, max_windows);
    if (n == 0)
        return qmla_error_set(err, QMLA_EINVAL, "text of %zu bytes holds no window of %zu",
                              n_bytes, context);
    double *nll = calloc(n * (n_cs ? n_cs : 1), sizeof *nll);
    if (!nll)
        return qmla_error_set(err, QMLA_ENOMEM, "%zu windows", n);
    int st_all = QMLA_OK, halt = 0; /* halt: the progress callback stopped it */
    size_t done = 0, restored = 0;
    if (rs && rs->done) {
        /* the windows a journal holds: their NLLs as scored, summed below in
         * window order with the others (so the result is bit for bit the same) */
        for (size_t k = 0; k < n; k++)
            if (rs->done[k]) {
                memcpy(nll + k * n_cs, rs->nll + k * n_cs, n_cs * sizeof *nll);
                restored++;
            }
        done = restored;
        if (restored && progress && progress(progress_ctx, done, n, restored))
            halt = 1;
    }
    const int nt = qmla_exec_threads(ex);
#pragma omp parallel num_threads(nt)
    {
        qmla_error e;
        qmla_error_clear(&e);
        qmla_model_ws *ws = NULL;
        int32_t *tok = malloc(context * sizeof *tok);
        float *lg = malloc(context * c->V * sizeof *lg);
        /* with kl: the reference's logits [context, V], log-sum-exp and argmax */
        float *rlg = kl ? malloc(context * c->V * sizeof *rlg) : NULL;
        double *rlse = kl ? malloc(context * sizeof *rlse) : NULL;
        size_t *ram = kl ? malloc(context * sizeof *ram) : NULL;
        int st = (!tok || !lg || (kl && (!rlg || !rlse || !ram)))
                     ? qmla_error_set(&e, QMLA_ENOMEM, "logits")
                     : qmla_model_ws_alloc(m, context, &ws, &e);
#pragma omp for schedule(dynamic, 1)
        for (size_t k = 0; k < n; k++) {
            int stop, halted;
#pragma omp atomic read
            stop = st_all;
#pragma omp atomic read
            halted = halt;
            if (st || stop || halted || (rs && rs->done && rs->done[k]))
                continue;
            const uint8_t *win = text + k * context;
            tok[0] = c->bos;
            for (size_t t = 1; t < context; t++)
                tok[t] = win[t - 1];
            if ((st = qmla_eng_forward_check(m, ws, tok, context, &e)))
                continue;
            size_t have = 0; /* the prefix length phase 1 holds for this window */
            if (kl) {
                /* the reference first (cs[ref_index] when it is one of cs) */
                const qmla_cache_spec *rsp = kl->ref_index >= 0 ? &cs[kl->ref_index] : kl->ref;
                size_t P;
                const float *pre;
                st = qmla_eng_forward_window(m, rsp, ws, tok, context, &have, lg, &P, &pre, &e);
                if (st) {
                    qmla_error_prefix(&e, "KL reference %s %s: ", rsp->name, rsp->policy);
                    continue;
                }
                for (size_t t = 0; t < context; t++) {
                    memcpy(rlg + t * c->V, (t < P ? pre : lg) + t * c->V, c->V * sizeof *rlg);
                    rlse[t] = row_lse(rlg + t * c->V, c->V, &ram[t]);
                }
            }
            for (size_t j = 0; j < n_cs && !st; j++) {
                size_t P = 0;
                const float *pre = NULL, *rows = lg;
                if (kl && (long)j == kl->ref_index)
                    rows = rlg; /* the reference's rows, as scored above */
                else
                    st = qmla_eng_forward_window(m, &cs[j], ws, tok, context, &have, lg, &P,
                                                 &pre, &e);
                if (st) {
                    if (n_cs > 1)
                        qmla_error_prefix(&e, "%s %s: ", cs[j].name, cs[j].policy);
                    continue;
                }
                nll[k * n_cs + j] = window_nll(rows, pre, P, context, c->V, win);
                /* never a NaN in the results: name where it went non-finite */
                if (!isfinite(nll[k * n_cs + j]))
                    st = qmla_error_set(&e, QMLA_ENONFINITE, "config %s, policy %s, window "
                                        "%zu (bytes %zu..%zu): the NLL is %g (the forward "
                                        "pass went non-finite)", cs[j].name, cs[j].policy, k,
                                        k * context, (k + 1) * context - 1,
                                        nll[k * n_cs + j]);
                if (!st && kl) {
                    window_kl(rows, pre, P, context, c->V, rlg, rlse, ram,
                              &kl->sum[k * n_cs + j], &kl->top1[k * n_cs + j],
                              &kl->tok[(k * n_cs + j) * context]);
                    if (!isfinite(kl->sum[k * n_cs + j]))
                        st = qmla_error_set(&e, QMLA_ENONFINITE, "config %s, policy %s, window "
                                            "%zu: the KL from %s is %g (a non-finite "
                                            "reference logit)", cs[j].name, cs[j].policy, k,
                                            kl->ref->name, kl->sum[k * n_cs + j]);
                }
            }
            /* every finished window is saved (rs->save, windows in flight at
             * a stop included) and reported, one call at a time (the
             * callbacks need not be thread-safe), none reported after a stop */
            if (!st && (progress || (rs && rs->save))) {
#pragma omp critical(qmla_model_ppl_progress)
                {
                    int h;
                    if (rs && rs->save)
                        st = rs->save(rs->ctx, k, nll + k * n_cs, n_cs,
                                      kl ? kl->sum + k * n_cs : NULL,
                                      kl ? kl->top1 + k * n_cs : NULL,
                                      kl ? kl->tok + k * n_cs * context : NULL, &e);
#pragma omp atomic read
                    h = halt;
                    ++done;
                    if (!st && !h && progress && progress(progress_ctx, done, n, restored)) {
#pragma omp atomic write
                        halt = 1;
                    }
                }
            }
        }
        if (st) {
#pragma omp critical(qmla_model_ppl_err)
            {
                int cur;
#pragma omp atomic read
                cur = st_all;
                if (!cur) {
                    if (err)
                        *err = e;
#pragma omp atomic write
                    st_all = st;
                }
            }
        }
        qmla_model_ws_free(ws);
        free(tok);
        free(lg);
        free(rlg);
        free(rlse);
        free(ram);
    }
    if (!st_all && halt && stopped)
        *stopped = 1;
    if (!st_all && !halt)
        for (size_t j = 0; j < n_cs; j++) {
            qmla_ppl_result *r = &res[j];
            for (size_t k = 0; k < n; k++)
                r->nll_sum += nll[k * n_cs + j];
            r->windows = n;
            r->tokens = n * context;
            r->nll_nats_per_token = r->nll_sum / (double)r->tokens;
            r->bits_per_byte = r->nll_nats_per_token / log(2.0);
            if (kl && !st_all)
                st_all = kl_stats(kl, j, n_cs, n, context, r, err);
        }
    free(nll);
    return st_all;
}

/* ------------------------------------------------------------ results */

static int row_attrs(hid_t g, const char *path, const qmla_ppl_row *r, qmla_error *err)
{
    int st = QMLA_OK;
    QMLA_H5_TRY(qmla_h5_attr_dbl(g, "bits_per_byte", r->r.bits_per_byte), "bits_per_byte");
    QMLA_H5_TRY(qmla_h5_attr_dbl(g, "nll_nats_per_token", r->r.nll_nats_per_token),
          "nll_nats_per_token");
    QMLA_H5_TRY(qmla_h5_attr_int(g, "tokens", (long long)r->r.tokens), "tokens");
    QMLA_H5_TRY(qmla_h5_attr_int(g, "windows", (long long)r->r.windows), "windows");
    QMLA_H5_TRY(qmla_h5_attr_int(g, "context", (long long)r->context), "context");
    QMLA_H5_TRY(qmla_h5_attr_str(g, "config", r->config), "config");
    QMLA_H5_TRY(qmla_h5_attr_str(g, "method", r->method), "method");
    QMLA_H5_TRY(qmla_h5_attr_str(g, "policy", r->policy), "policy");
    QMLA_H5_TRY(qmla_h5_attr_str(g, "text", r->text), "text");
    QMLA_H5_TRY(qmla_h5_attr_str(g, "transforms", r->transforms ? r->transforms : ""), "transforms");
    if (r->r.has_kl) {
        QMLA_H5_TRY(qmla_h5_attr_str(g, "kl_ref", r->kl_ref ? r->kl_ref : ""), "kl_ref");
        QMLA_H5_TRY(qmla_h5_attr_dbl(g, "kl_mean_nats", r->r.kl_mean), "kl_mean_nats");
        QMLA_H5_TRY(qmla_h5_attr_dbl(g, "kl_ci95_lo", r->r.kl_ci_lo), "kl_ci95_lo");
        QMLA_H5_TRY(qmla_h5_attr_dbl(g, "kl_ci95_hi", r->r.kl_ci_hi), "kl_ci95_hi");
        QMLA_H5_TRY(qmla_h5_attr_dbl(g, "kl_p99_nats", r->r.kl_p99), "kl_p99_nats");
        QMLA_H5_TRY(qmla_h5_attr_dbl(g, "top1_agreement", r->r.top1_agreement), "top1_agreement");
    }
out:
    return st;
}

/* The KL columns of /ppl_table, when a row has KL (NaN in a row without). */
static int ppl_table_kl(hid_t g, const char *path, const qmla_ppl_row *rows, size_t n,
                        qmla_error *err)
{
    int st = QMLA_OK, any = 0;
    for (size_t i = 0; i < n; i++)
        any |= rows[i].r.has_kl;
    if (!any)
        return QMLA_OK;
    static const struct {
        const char *name, *desc, *unit;
    } col[5] = {
        {"kl_mean_nats", "mean over targets of KL(P_ref || P_row), log-softmax in double", "nat/token"},
        {"kl_ci95_lo", "95 % t interval over windows of the mean KL, truncated at 0: low (NaN: one window)", "nat/token"},
        {"kl_ci95_hi", "95 % t interval over windows of the mean KL: high (NaN: one window)", "nat/token"},
        {"kl_p99_nats", "99th percentile of the per-target KL (float32 values, linear interpolation)", "nat"},
        {"top1_agreement", "fraction of targets whose argmax equals the reference's", ""}};
    const char **ref = calloc(n, sizeof *ref);
    double *x = calloc(5 * n, sizeof *x);
    if (!ref || !x) {
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: ppl_table", path);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const qmla_ppl_result *r = &rows[i].r;
        ref[i] = r->has_kl && rows[i].kl_ref ? rows[i].kl_ref : "";
        const double v[5] = {r->kl_mean, r->kl_ci_lo, r->kl_ci_hi, r->kl_p99, r->top1_agreement};
        for (int c = 0; c < 5; c++)
            x[c * n + i] = r->has_kl ? v[c] : NAN;
    }
    QMLA_H5_TRY(qmla_h5_dset_strs(g, "kl_ref", n, ref, "the KL's reference configuration"),
                "ppl_table/kl_ref");
    for (int c = 0; c < 5; c++)
        QMLA_H5_TRY(qmla_h5_dset_1d(g, col[c].name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n,
                                    x + c * n, col[c].desc, col[c].unit), col[c].name);
out:
    free(ref);
    free(x);
    return st;
}

/* /ppl_table: the rows as a table (qmla/table.h: one 1-D dataset per
 * column) for qmla export and qmla figures; delta_bits_per_byte is against
 * the bf16 row (method none) of the same text, NaN when there is none. */
static int ppl_table(hid_t f, const char *path, const qmla_ppl_row *rows, size_t n,
                     qmla_error *err)
{
    int st = QMLA_OK;
    hid_t g = -1;
    const char **str[5];
    for (int k = 0; k < 5; k++)
        str[k] = calloc(n, sizeof(char *));
    long long *ti = calloc(n, sizeof *ti), *ctx = calloc(n, sizeof *ctx),
              *tok = calloc(n, sizeof *tok);
    double *bpb = calloc(n, sizeof *bpb), *nll = calloc(n, sizeof *nll),
           *dl = calloc(n, sizeof *dl);
    if (!str[0] || !str[1] || !str[2] || !str[3] || !str[4] || !ti || !ctx || !tok || !bpb ||
        !nll || !dl) {
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: ppl_table", path);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const qmla_ppl_row *r = &rows[i];
        str[0][i] = r->text;
        str[1][i] = r->config;
        str[2][i] = r->method;
        str[3][i] = r->policy;
        str[4][i] = r->transforms ? r->transforms : "";
        /* text index: order of first appearance */
        ti[i] = 0;
        for (size_t j = 0, k = 0; j < n; j++) {
            int first = 1;
            for (size_t q = 0; q < j && first; q++)
                first = strcmp(rows[q].text, rows[j].text) != 0;
            if (!first)
                continue;
            if (!strcmp(rows[j].text, r->text)) {
                ti[i] = (long long)k;
                break;
            }
            k++;
        }
        ctx[i] = (long long)r->context;
        tok[i] = (long long)r->r.tokens;
        bpb[i] = r->r.bits_per_byte;
        nll[i] = r->r.nll_nats_per_token;
        dl[i] = NAN;
        for (size_t j = 0; j < n; j++)
            if (!strcmp(rows[j].text, r->text) && !strcmp(rows[j].config, "bf16") &&
                !strcmp(rows[j].method, "none"))
                dl[i] = r->r.bits_per_byte - rows[j].r.bits_per_byte;
    }
    if (H5Lexists(f, "ppl_table", H5P_DEFAULT) > 0)
        QMLA_H5_TRY(H5Ldelete(f, "ppl_table", H5P_DEFAULT), "ppl_table");
    QMLA_H5_TRY(g = H5Gcreate2(f, "ppl_table", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "ppl_table");
    QMLA_H5_TRY(qmla_h5_dset_strs(g, "text", n, str[0], "text file as given"), "ppl_table/text");
    QMLA_H5_TRY(qmla_h5_dset_1d(g, "text_index", H5T_STD_I64LE, H5T_NATIVE_LLONG, n, ti,
                          "index of the text in the order given", ""), "ppl_table/text_index");
    QMLA_H5_TRY(qmla_h5_dset_strs(g, "config", n, str[1], "cache configuration"), "ppl_table/config");
    QMLA_H5_TRY(qmla_h5_dset_strs(g, "method", n, str[2], "none, RTN, or the transforms' method"),
          "ppl_table/method");
    QMLA_H5_TRY(qmla_h5_dset_strs(g, "policy", n, str[3], "none or sink<S>/local<W>"),
          "ppl_table/policy");
    QMLA_H5_TRY(qmla_h5_dset_strs(g, "transforms", n, str[4], "transforms file folded in"),
          "ppl_table/transforms");
    QMLA_H5_TRY(qmla_h5_dset_1d(g, "context", H5T_STD_I64LE, H5T_NATIVE_LLONG, n, ctx,
                          "window length", "tokens"), "ppl_table/context");
    QMLA_H5_TRY(qmla_h5_dset_1d(g, "tokens", H5T_STD_I64LE, H5T_NATIVE_LLONG, n, tok,
                          "targets scored", "tokens"), "ppl_table/tokens");
    QMLA_H5_TRY(qmla_h5_dset_1d(g, "bits_per_byte", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, bpb,
                          "mean NLL / ln 2 (one token per byte)", "bit/byte"),
          "ppl_table/bits_per_byte");
    QMLA_H5_TRY(qmla_h5_dset_1d(g, "nll_nats_per_token", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, nll,
                          "mean NLL", "nat/token"), "ppl_table/nll_nats_per_token");
    QMLA_H5_TRY(qmla_h5_dset_1d(g, "delta_bits_per_byte", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, dl,
                          "bits_per_byte minus the bf16 row's of the same text", "bit/byte"),
          "ppl_table/delta_bits_per_byte");
    if ((st = ppl_table_kl(g, path, rows, n, err)))
        goto out;
out:
    if (g >= 0)
        H5Gclose(g);
    for (int k = 0; k < 5; k++)
        free(str[k]);
    free(ti);
    free(ctx);
    free(tok);
    free(bpb);
    free(nll);
    free(dl);
    return st;
}

int qmla_ppl_save(const char *path, const char *model_dir, const char *command_line,
                  const qmla_ppl_row *rows, size_t n, qmla_error *err)
{
    int st = QMLA_OK;
    if (n == 0)
        return qmla_error_set(err, QMLA_EINVAL, "%s: no perplexity rows to write", path);
    qmla_h5_out o;
    if ((st = qmla_h5_out_group(&o, path, "ppl", err)))
        return st;
    const hid_t f = o.f, g = o.g;
    QMLA_H5_TRY(qmla_h5_attr_int(g, "rows", (long long)n), "rows");
    {
        const qmla_prov_input in[] = {{"model_dir", model_dir}};
        const qmla_prov p = {.tool = "qmla ppl", .command_line = command_line,
                             .inputs = in, .n_inputs = 1};
        if ((st = qmla_h5_prov(g, &p, path, err)))
            goto out;
    }
    if ((st = row_attrs(g, path, &rows[0], err)))
        goto out;
    for (size_t i = 0; i < n; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "row_%03zu", i);
        hid_t r;
        QMLA_H5_TRY(r = H5Gcreate2(g, nm, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), nm);
        st = row_attrs(r, path, &rows[i], err);
        H5Gclose(r);
        if (st)
            goto out;
    }
    if ((st = ppl_table(f, path, rows, n, err)))
        goto out;
out:
    return qmla_h5_out_finish(&o, st);
}
