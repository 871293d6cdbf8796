/* ppl_run.c — the ppl driver (qmla/ppl.h, `qmla ppl`). */
#define _POSIX_C_SOURCE 200809L
#include "qmla/ppl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qmla/text.h"
#include "qmla/outpath.h"
#include "qmla/tmethod.h"

qmla_ppl_run_opts qmla_ppl_run_defaults(void)
{
    qmla_ppl_run_opts o;
    memset(&o, 0, sizeof o);
    o.configs = "bf16";
    o.policies = "none";
    o.context = 512;
    o.threads = 1;
    return o;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void emit(const qmla_ppl_run_opts *o, int kind, const qmla_ppl_row *rows, size_t n,
                 double sec, const char *fmt, ...)
{
    if (!o->event)
        return;
    char line[1200] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(line, sizeof line, fmt, ap);
        va_end(ap);
    }
    qmla_ppl_event ev = {kind, line, rows, n, sec};
    o->event(o->event_ctx, &ev);
}

static int refuse(qmla_ppl_run_result *r, qmla_error *err, const char *fmt, ...)
{
    char msg[QMLA_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->refusal = 1;
    return qmla_error_set(err, QMLA_EINVAL, "%s", msg);
}

static int split_list(const char *s, char ***out, size_t *n, char **buf)
{
    *buf = strdup(s);
    size_t cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    *out = calloc(cap, sizeof **out);
    if (!*buf || !*out)
        return -1;
    size_t cnt = 0;
    char *save = NULL;
    for (char *tok = strtok_r(*buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        (*out)[cnt++] = tok;
    *n = cnt;
    return cnt ? 0 : -1;
}

void qmla_ppl_run_result_free(qmla_ppl_run_result *r)
{
    if (!r)
        return;
    free(r->rows);
    free(r->priv);
    memset(r, 0, sizeof *r);
}

int qmla_ppl_run(const char *dir, const char *out, const qmla_ppl_run_opts *o,
                 qmla_ppl_run_result *r, qmla_error *err)
{
    memset(r, 0, sizeof *r);
    const size_t n_texts = o->n_texts, n_tf = o->n_transforms;
    const char *const *texts = o->texts, *const *tfp = o->transforms;
    if (!n_texts)
        return refuse(r, err, "--text is required");
    if (!out)
        return refuse(r, err, "-o RESULTS.h5 is required");
    if (n_texts > QMLA_PPL_MAX)
        return refuse(r, err, "--text: at most %d texts", QMLA_PPL_MAX);
    if (n_tf > QMLA_PPL_MAX)
        return refuse(r, err, "--transforms: at most %d files", QMLA_PPL_MAX);
    const size_t context = o->context ? o->context : 512;
    char **cl = NULL, **pl = NULL, *cbuf = NULL, *pbuf = NULL;
    size_t nc = 0, np = 0;
    int st = QMLA_OK;
    if (split_list(o->configs ? o->configs : "bf16", &cl, &nc, &cbuf) || !nc ||
        split_list(o->policies ? o->policies : "none", &pl, &np, &pbuf) || !np) {
        st = refuse(r, err, "--config / --policy: expected comma-separated lists");
        free(cl);
        free(cbuf);
        free(pl);
        free(pbuf);
        return st;
    }
    {
        /* before any work (a full text takes minutes): -o must be a regular
         * file or a new name, and none of the inputs */
        const char *in[2 * QMLA_PPL_MAX];
        size_t n_in = 0;
        for (size_t k = 0; k < n_texts; k++)
            in[n_in++] = texts[k];
        for (size_t k = 0; k < n_tf; k++)
            in[n_in++] = tfp[k];
        if (qmla_output_path_check(out, "output file (-o)", in, n_in, err)) {
            free(cl);
            free(cbuf);
            free(pl);
            free(pbuf);
            return err->status;
        }
    }
    size_t n_spec = 0;
    qmla_cache_spec *specs = calloc(nc * np + 1, sizeof *specs);
    /* variant 0: the checkpoint as it is; 1..n_tf: with the file's transforms */
    qmla_model *mv[QMLA_PPL_MAX + 1] = {0};
    qmla_transform_file tf[QMLA_PPL_MAX];
    char (*labels)[32] = r->labels;
    memset(tf, 0, sizeof tf);
    r->rows = calloc(nc * np * n_texts * (n_tf + 1) + 1, sizeof *r->rows);
    qmla_cache_spec *grp = calloc(nc * np + 1, sizeof *grp);
    qmla_ppl_result *res = calloc(nc * np + 1, sizeof *res);
    uint8_t *buf = NULL;
    r->priv = specs;
    if (!specs || !r->rows || !grp || !res) {
        st = refuse(r, err, "out of memory");
        goto done;
    }
    int any_quant = 0;
    for (size_t p = 0; p < np; p++)
        for (size_t c = 0; c < nc; c++) {
            qmla_cache_spec s;
            st = qmla_cache_spec_parse(cl[c], pl[p], &s, err);
            if (st)
                goto done;
            const int plain = s.c_bits == QMLA_CACHE_FP32 || s.c_bits == QMLA_CACHE_BF16;
            /* a policy changes nothing for unquantized caches: one row */
            if (plain && p > 0 && strcmp(s.policy, "none"))
                continue;
            if (plain)
                snprintf(s.policy, sizeof s.policy, "none"), s.sink = s.window = 0;
            any_quant |= !plain;
            specs[n_spec++] = s;
        }
    int any_policy = 0;
    for (size_t p = 0; p < np; p++)
        any_policy |= strcmp(pl[p], "none") != 0;
    if (any_policy && !any_quant)
        emit(o, QMLA_PPL_NOTE, NULL, 0, 0, "note: --policy applies to quantized configs only; the "
             "fp32/bf16 rows are scored without one (policy none)");
    for (size_t i = 0; i < n_tf; i++) {
        st = qmla_transform_file_read(tfp[i], &tf[i], err);
        if (st)
            goto done;
        qmla_tmethod_of(tf[i].meta.method)->ppl_label(&tf[i].meta, labels[i + 1],
                                                       sizeof labels[i + 1]);
    }
    for (size_t v = 0; v <= n_tf; v++) {
        double t0 = now_s();
        st = qmla_model_load(dir, &mv[v], err);
        if (st)
            goto done;
        if (v && (st = qmla_model_apply_transforms(mv[v], tf[v - 1].t,
                                                   (const float *const *)tf[v - 1].gamma,
                                                   tf[v - 1].n, err))) {
            qmla_error_prefix(err, "%s: ", tfp[v - 1]);
            goto done;
        }
        const qmla_model_config *mc = qmla_model_cfg(mv[v]);
        if (!v)
            emit(o, QMLA_PPL_NOTE, NULL, 0, 0, "%s: %s, %zu parameters, %zu layers, d_c %zu, d_r %zu "
                 "(loaded in %.2f s)", dir, mc->arch, qmla_model_n_params(mv[v]), mc->L,
                 mc->d_c, mc->d_r, now_s() - t0);
        else if (qmla_tmethod_of(tf[v - 1].meta.method)->learned)
            emit(o, QMLA_PPL_NOTE, NULL, 0, 0, "%s: %s transforms (%s, learned for %s) of %zu layers "
                 "folded into the weights", tfp[v - 1], labels[v],
                 qmla_tmethod_name(tf[v - 1].meta.method), tf[v - 1].meta.config, tf[v - 1].n);
        else
            emit(o, QMLA_PPL_NOTE, NULL, 0, 0, "%s: %s transforms (a baseline, used for every quantized "
                 "config) of %zu layers folded into the weights", tfp[v - 1], labels[v], tf[v - 1].n);
    }
    const qmla_exec ex = qmla_exec_cpu(o->threads);
    emit(o, QMLA_PPL_TABLE, NULL, 0, 0, NULL);
    for (size_t k = 0; k < n_texts; k++) {
        size_t nb = 0;
        free(buf);
        buf = NULL;
        if (qmla_text_read(texts[k], &buf, &nb, err)) {
            r->refusal = 1;
            st = err->status;
            goto done;
        }
        size_t maxw = o->tokens ? (o->tokens + context - 1) / context : 0;
        for (size_t v = 0; v <= n_tf; v++) {
            size_t n_grp = 0;
            for (size_t s = 0; s < n_spec; s++) {
                const qmla_cache_spec *sp = &specs[s];
                const int plain = sp->c_bits == QMLA_CACHE_FP32 || sp->c_bits == QMLA_CACHE_BF16;
                if (!v && o->transforms_only)
                    continue;
                if (v) {
                    const qmla_transform_meta *tm = &tf[v - 1].meta;
                    if (plain && any_quant)
                        continue;
                    /* a learned file serves the configuration it was learned for */
                    if (!plain && qmla_tmethod_of(tm->method)->learned &&
                        strncmp(sp->name, tm->config, strlen(tm->config)))
                        continue;
                }
                grp[n_grp] = *sp;
                qmla_ppl_row *row = &r->rows[r->n_rows + n_grp];
                row->text = texts[k];
                row->config = sp->name;
                row->policy = sp->policy;
                row->method = v ? labels[v] : plain ? "none" : "RTN";
                row->transforms = v ? tfp[v - 1] : "";
                row->context = context;
                n_grp++;
            }
            if (!n_grp)
                continue;
            double t1 = now_s();
            const char *base = strrchr(texts[k], '/');
            emit(o, QMLA_PPL_GROUP_BEGIN, NULL, 0, 0, "ppl %s%s%s", base ? base + 1 : texts[k],
                 v ? " + " : "", v ? labels[v] : "");
            st = qmla_model_ppl_multi_progress(mv[v], &ex, grp, n_grp, buf, nb, context, maxw,
                                               o->progress, o->progress_ctx, &r->stopped, res, err);
            for (size_t j = 0; j < n_grp && !st && !r->stopped; j++)
                r->rows[r->n_rows + j].r = res[j];
            emit(o, QMLA_PPL_GROUP_END, r->rows + r->n_rows, st || r->stopped ? 0 : n_grp,
                 now_s() - t1, NULL);
            if (!r->stopped && o->should_stop && o->should_stop(o->progress_ctx))
                r->stopped = 1;
            if (r->stopped) {
                st = qmla_error_set(err, QMLA_EINVAL, "stopped; nothing written to %s", out);
                goto done;
            }
            if (st) {
                qmla_error_prefix(err, "%s%s%s: ", texts[k], v ? ", transforms " : "",
                                  v ? tfp[v - 1] : "");
                goto done;
            }
            r->n_rows += n_grp;
        }
    }
    if (o->should_stop && o->should_stop(o->progress_ctx)) {
        /* after the last window: still nothing written */
        r->stopped = 1;
        st = qmla_error_set(err, QMLA_EINVAL, "stopped; nothing written to %s", out);
        goto done;
    }
    st = qmla_ppl_save(out, dir, o->command_line, r->rows, r->n_rows, err);
    if (!st)
        r->wrote = 1;
done:
    for (size_t v = 0; v <= n_tf; v++)
        qmla_model_free(mv[v]);
    for (size_t i = 0; i < n_tf; i++)
        qmla_transform_file_free(&tf[i]);
    free(buf);
    free(grp);
    free(res);
    free(cl);
    free(cbuf);
    free(pl);
    free(pbuf);
    return st;
}
