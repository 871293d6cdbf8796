/* lib/engine/ppl.c — bits per byte of a text under cache configurations
 * (qmla_model_ppl*): the text cut into windows of [BOS] + bytes, windows in
 * parallel (one workspace per thread), every configuration of a window in
 * turn through the forward pass (lib/engine/forward.c, the clean prefix
 * shared), the NLL summed in double in window order; and the /ppl group of
 * a results file with its /ppl_table (qmla_ppl_save). */
#include "engine/engine_int.h"
#include "io/group.h"
#include "qmla_commit.h"

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
                                progress_ctx, NULL, stopped, res, err);
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
                         const qmla_eng_ppl_resume *rs, int *stopped, qmla_ppl_result *res,
                         qmla_error *err)
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
        int st = (!tok || !lg) ? qmla_error_set(&e, QMLA_ENOMEM, "logits") :
                 qmla_model_ws_alloc(m, context, &ws, &e);
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
            for (size_t j = 0; j < n_cs && !st; j++) {
                size_t P;
                const float *pre;
                st = qmla_eng_forward_window(m, &cs[j], ws, tok, context, &have, lg, &P, &pre,
                                             &e);
                if (st) {
                    if (n_cs > 1)
                        qmla_error_prefix(&e, "%s %s: ", cs[j].name, cs[j].policy);
                    continue;
                }
                nll[k * n_cs + j] = window_nll(lg, pre, P, context, c->V, win);
                /* never a NaN in the results: name where it went non-finite */
                if (!isfinite(nll[k * n_cs + j]))
                    st = qmla_error_set(&e, QMLA_ENONFINITE, "config %s, policy %s, window "
                                        "%zu (bytes %zu..%zu): the NLL is %g (the forward "
                                        "pass went non-finite)", cs[j].name, cs[j].policy, k,
                                        k * context, (k + 1) * context - 1,
                                        nll[k * n_cs + j]);
            }
            /* every finished window is saved (rs->save, windows in flight at
             * a stop included) and reported, one call at a time (the
             * callbacks need not be thread-safe), none reported after a stop */
            if (!st && (progress || (rs && rs->save))) {
#pragma omp critical(qmla_model_ppl_progress)
                {
                    int h;
                    if (rs && rs->save)
                        st = rs->save(rs->ctx, k, nll + k * n_cs, n_cs, &e);
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
out:
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
