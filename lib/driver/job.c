/* job.c — every analysis driver behind string keys (qmla/job.h): the
 * options of the `qmla` command of the same name, parsed with its ranges,
 * then the library's driver. */
#define _POSIX_C_SOURCE 200809L
#include "qmla/job.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qmla/capture.h"
#include "qmla/capture_native.h"
#include "qmla/intervene.h"
#include "qmla/learn.h"
#include "qmla/model.h"
#include "qmla/outpath.h"
#include "qmla/ppl.h"
#include "qmla/predict.h"
#include "qmla/sweep.h"
#include "qmla/text.h"
#include "qmla/tfeval.h"
#include "qmla/allocate.h"
#include "qmla/tmethod.h"

enum { MAX_KV = 256, MAX_VALUES = 64 };

typedef struct job_driver job_driver;

struct qmla_job {
    const job_driver *d;
    size_t n;
    char *key[MAX_KV], *val[MAX_KV];
    size_t n_values;
    char vname[MAX_VALUES][96];
    double value[MAX_VALUES];
    int stopped;
    qmla_progress_fn progress;
    void *ctx;
};

struct job_driver {
    const char *name;
    const char *keys; /* space-separated; a trailing '*' marks a repeatable key */
    /* the driver, given the keys input and output (both required) */
    int (*run)(qmla_job *j, const char *in, const char *out, qmla_error *err);
};

/* ---- keys ----------------------------------------------------------------- */

static const char *get(const qmla_job *j, const char *key)
{
    const char *v = NULL;
    for (size_t i = 0; i < j->n; i++)
        if (!strcmp(j->key[i], key))
            v = j->val[i];
    return v;
}

/* the values of a repeatable key, in the order set (at most max) */
static size_t get_all(const qmla_job *j, const char *key, const char **out, size_t max)
{
    size_t k = 0;
    for (size_t i = 0; i < j->n && k < max; i++)
        if (!strcmp(j->key[i], key))
            out[k++] = j->val[i];
    return k;
}

static int bad(qmla_job *j, qmla_error *err, const char *fmt, ...)
{
    char msg[QMLA_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return qmla_error_set(err, QMLA_EINVAL, "%s: %s", j->d->name, msg);
}

static int p_long(qmla_job *j, const char *key, long lo, long hi, long *v, qmla_error *err)
{
    const char *s = get(j, key);
    if (!s)
        return 0;
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (!*s || errno || *end || x < lo || x > hi)
        return bad(j, err, "%s: expected an integer in %ld..%ld, found \"%s\"", key, lo, hi, s);
    *v = x;
    return 0;
}

static int p_double(qmla_job *j, const char *key, double lo, double hi, double *v,
                    qmla_error *err)
{
    const char *s = get(j, key);
    if (!s)
        return 0;
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (!*s || errno || *end || !(x >= lo && x <= hi))
        return bad(j, err, "%s: expected a number in %g .. %g, found \"%s\"", key, lo, hi, s);
    *v = x;
    return 0;
}

static int p_flag(qmla_job *j, const char *key, int *v, qmla_error *err)
{
    const char *s = get(j, key);
    if (!s)
        return 0;
    if (strcmp(s, "0") && strcmp(s, "1"))
        return bad(j, err, "%s: expected 0 or 1, found \"%s\"", key, s);
    *v = s[0] == '1';
    return 0;
}

static int p_bits(qmla_job *j, const char *key, int *bits, qmla_error *err)
{
    long v = *bits;
    if (p_long(j, key, 1, 64, &v, err))
        return err->status;
    if (v != 2 && v != 3 && v != 4 && v != 8)
        return bad(j, err, "%s: expected 2, 3, 4 or 8, found %ld", key, v);
    *bits = (int)v;
    return 0;
}

static int p_threads(qmla_job *j, int *threads, qmla_error *err)
{
    long v = 1;
    *threads = 1;
    if (p_long(j, "threads", 1, 1024, &v, err))
        return err->status;
    *threads = (int)v;
    return 0;
}

/* "cpu" (the command's --engine; qmla/engine.h): unknown names refused with
 * the engine's message naming this build's engines */
static int p_engine(qmla_job *j, const qmla_engine **e, qmla_error *err)
{
    *e = NULL;
    const char *s = get(j, "engine");
    if (!s)
        return 0;
    qmla_error e2;
    qmla_error_clear(&e2);
    if (qmla_engine_find(s, e, &e2))
        return bad(j, err, "%s", e2.msg);
    return 0;
}

/* "0-3,7" (the command's --layers) */
static int p_int_list(qmla_job *j, const char *key, int **out, size_t *n, qmla_error *err)
{
    *out = NULL;
    *n = 0;
    const char *s = get(j, key);
    if (!s)
        return 0;
    size_t cap = 16, cnt = 0;
    int *v = malloc(cap * sizeof *v);
    char *copy = strdup(s), *save = NULL;
    int st = (!v || !copy) ? qmla_error_set(err, QMLA_ENOMEM, "out of memory") : 0;
    for (char *tok = st ? NULL : strtok_r(copy, ",", &save); tok && !st;
         tok = strtok_r(NULL, ",", &save)) {
        char *dash = strchr(tok + (tok[0] == '-' ? 1 : 0), '-'), *e1, *e2;
        long a, b;
        if (dash)
            *dash = 0;
        a = strtol(tok, &e1, 10);
        b = dash ? strtol(dash + 1, &e2, 10) : a;
        if (!*tok || *e1 || (dash && (!dash[1] || *e2)) || a < 0 || b < a || b > (1 << 20)) {
            st = bad(j, err, "%s: bad index or range in \"%s\"", key, s);
            break;
        }
        for (long x = a; x <= b && !st; x++) {
            if (cnt == cap) {
                int *nv = realloc(v, 2 * cap * sizeof *v);
                if (!nv) {
                    st = qmla_error_set(err, QMLA_ENOMEM, "out of memory");
                    break;
                }
                v = nv;
                cap *= 2;
            }
            v[cnt++] = (int)x;
        }
    }
    free(copy);
    if (!st && !cnt)
        st = bad(j, err, "%s: empty list \"%s\"", key, s);
    if (st) {
        free(v);
        return st;
    }
    *out = v;
    *n = cnt;
    return 0;
}

/* "a,b" -> names (views into *buf) */
static int p_list(qmla_job *j, const char *key, char ***out, size_t *n, char **buf,
                  qmla_error *err)
{
    *out = NULL;
    *n = 0;
    *buf = NULL;
    const char *s = get(j, key);
    if (!s)
        return 0;
    size_t cap = 2;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    *buf = strdup(s);
    *out = calloc(cap, sizeof **out);
    if (!*buf || !*out)
        return qmla_error_set(err, QMLA_ENOMEM, "out of memory");
    char *save = NULL;
    for (char *tok = strtok_r(*buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        (*out)[(*n)++] = tok;
    if (!*n)
        return bad(j, err, "%s: empty list \"%s\"", key, s);
    return 0;
}

static void put(qmla_job *j, const char *name, double v)
{
    if (j->n_values == MAX_VALUES)
        return;
    snprintf(j->vname[j->n_values], sizeof j->vname[0], "%s", name);
    j->value[j->n_values++] = v;
}

static const char *command_of(qmla_job *j)
{
    const char *c = get(j, "command");
    return c ? c : "";
}

/* input and output, both required */
static int io_paths(qmla_job *j, const char **in, const char **out, qmla_error *err)
{
    *in = get(j, "input");
    *out = get(j, "output");
    if (!*in)
        return bad(j, err, "missing input");
    if (!*out)
        return bad(j, err, "missing output");
    return 0;
}

/* ---- sweep ---------------------------------------------------------------- */

typedef struct selection {
    int *layers;
    size_t n_layers;
    char **cells, *cellbuf;
    size_t n_cells;
    qmla_sweep_selection sel;
} selection;

static int sel_parse(qmla_job *j, selection *s, qmla_error *err)
{
    memset(s, 0, sizeof *s);
    int st = p_int_list(j, "layers", &s->layers, &s->n_layers, err);
    if (!st)
        st = p_list(j, "cells", &s->cells, &s->n_cells, &s->cellbuf, err);
    s->sel.layers = s->layers;
    s->sel.n_layers = s->n_layers;
    s->sel.cells = (const char *const *)s->cells;
    s->sel.n_cells = s->n_cells;
    return st;
}

static void sel_free(selection *s)
{
    free(s->layers);
    free(s->cells);
    free(s->cellbuf);
    memset(s, 0, sizeof *s);
}

static int p_meta(qmla_job *j, qmla_meta *meta, qmla_error *err)
{
    const char *s = get(j, "meta");
    if (!s)
        return 0;
    if (!strcmp(s, "f16"))
        *meta = QMLA_META_F16;
    else if (!strcmp(s, "f32"))
        *meta = QMLA_META_F32;
    else if (!strcmp(s, "q8"))
        *meta = QMLA_META_Q8;
    else
        return bad(j, err, "meta: expected f16, f32 or q8, found \"%s\"", s);
    return 0;
}

static int p_quant(qmla_job *j, qmla_sweep_params *p, qmla_error *err)
{
    long g = p->quant.group;
    int st = p_bits(j, "bits", &p->quant.bits, err);
    if (!st)
        st = p_long(j, "group", 1, 1 << 20, &g, err);
    p->quant.group = (int)g;
    if (!st)
        st = p_double(j, "nmse", QMLA_NMSE_MIN, QMLA_NMSE_MAX, &p->nmse, err);
    return st;
}

static int run_sweep(qmla_job *j, const char *in, const char *out, qmla_error *err)
{
    int st;
    qmla_sweep_opts o;
    memset(&o, 0, sizeof o);
    o.params = qmla_sweep_defaults();
    st = p_quant(j, &o.params, err);
    if (!st)
        st = p_meta(j, &o.params.quant.meta, err);
    if (!st)
        st = p_threads(j, &o.threads, err);
    if (!st)
        st = p_engine(j, &o.engine, err);
    if (!st)
        st = p_flag(j, "verify", &o.verify, err);
    if (!st)
        st = p_flag(j, "force", &o.force, err);
    if (!st)
        st = p_flag(j, "balance", &o.balance, err);
    const char *sh = get(j, "shard");
    if (!st && sh) {
        unsigned long i, n;
        char tail;
        if (sscanf(sh, "%lu/%lu%c", &i, &n, &tail) != 2 || n < 1 || i >= n || n > 1000000)
            st = bad(j, err, "shard: expected I/N with 0 <= I < N, found \"%s\"", sh);
        o.shard = i;
        o.n_shards = n;
    }
    if (st)
        return st;
    char jpath[4096];
    snprintf(jpath, sizeof jpath, "%s.journal", out);
    if (qmla_output_path_check(out, "output file (-o)", &in, 1, err) ||
        qmla_output_path_check(jpath, "journal", &in, 1, err) ||
        qmla_stale_tmp_remove(out, NULL, err))
        return err->status;
    selection s;
    st = sel_parse(j, &s, err);
    qmla_capture *cap = NULL;
    if (!st)
        st = qmla_capture_open(in, &cap, err);
    o.progress = j->progress;
    o.progress_ctx = j->ctx;
    o.command_line = command_of(j);
    qmla_summary sum;
    memset(&sum, 0, sizeof sum);
    if (!st)
        st = qmla_sweep_run(cap, &s.sel, &o, out, &sum, &j->stopped, err);
    if (!st && j->stopped)
        st = bad(j, err, "stopped (finished items are kept in %s)", jpath);
    if (!st) {
        put(j, "n_layers", (double)sum.n_layers);
        put(j, "n_rows", (double)sum.n_rows);
        put(j, "n_degenerate", (double)sum.n_degenerate);
        put(j, "model_response_content", sum.model_response_content);
        put(j, "model_response_rope", sum.model_response_rope);
        put(j, "model_ratio", sum.model_ratio);
        put(j, "worst_route_residual", sum.worst_route_residual);
        qmla_summary_free(&sum);
    }
    qmla_capture_close(cap);
    sel_free(&s);
    return st;
}

/* ---- jvp, predict ------------------------------------------------------------ */

static int run_op(qmla_job *j, const char *in, const char *out, int pred, qmla_error *err)
{
    int st;
    double nu = 1e-3;
    long group = 64;
    int bits[QMLA_OP_CONFIGS_MAX] = {2, 3, 4, 8}, threads = 1, force = 0;
    size_t nbits = 4;
    const qmla_engine *engine = NULL;
    st = p_double(j, "nmse", QMLA_NMSE_MIN, QMLA_NMSE_MAX, &nu, err);
    if (!st)
        st = p_long(j, "group", 1, 1 << 20, &group, err);
    if (!st)
        st = p_threads(j, &threads, err);
    if (!st)
        st = p_engine(j, &engine, err);
    if (!st)
        st = p_flag(j, "force", &force, err);
    if (!st && get(j, "bits")) {
        int *bl = NULL;
        if (pred)
            return bad(j, err, "bits: predict uses INT4 and the held-out INT2/3/8");
        st = p_int_list(j, "bits", &bl, &nbits, err);
        if (!st && nbits > 4)
            st = bad(j, err, "bits: at most 4 widths (2, 3, 4, 8)");
        for (size_t k = 0; !st && k < nbits; k++) {
            if (bl[k] != 2 && bl[k] != 3 && bl[k] != 4 && bl[k] != 8)
                st = bad(j, err, "bits: expected 2, 3, 4 or 8, found %d", bl[k]);
            else
                bits[k] = bl[k];
        }
        free(bl);
    }
    if (st)
        return st;
    qmla_op_config conf[QMLA_OP_CONFIGS_MAX];
    size_t nconf;
    qmla_op_configs(pred, bits, nbits, (int)group, nu, conf, &nconf);
    selection s;
    st = sel_parse(j, &s, err);
    qmla_capture *cap = NULL;
    if (!st)
        st = qmla_capture_open(in, &cap, err);
    qmla_op_opts o = qmla_op_opts_make(conf, nconf, pred, threads, force, engine,
                                       command_of(j), j->progress, j->ctx);
    qmla_op_stats ss;
    qmla_op_point *pts = NULL;
    size_t npts = 0;
    if (!st)
        st = qmla_op_run_points(cap, &s.sel, &o, out, &ss, &pts, &npts, &j->stopped, err);
    if (!st && j->stopped)
        st = bad(j, err, "stopped (finished items are kept in %s.%s.journal)", out, j->d->name);
    if (!st) {
        put(j, "n_points", (double)ss.n_points);
        put(j, "spearman_jvp_vs_finite", ss.spearman_jvp_vs_finite);
        if (pred) {
            put(j, "n_pairs", (double)ss.n_pairs);
            put(j, "mae_log_ratio_cache_only", ss.mae_log_ratio_cache_only);
            put(j, "mae_log_ratio_operator_only", ss.mae_log_ratio_operator_only);
            put(j, "mae_log_ratio_operator_allocation", ss.mae_log_ratio_operator_allocation);
            put(j, "n_heldout", (double)ss.n_heldout);
            put(j, "spearman", ss.spearman);
            put(j, "median_abs_log_error", ss.median_abs_log_error);
        }
    }
    free(pts);
    qmla_capture_close(cap);
    sel_free(&s);
    return st;
}

static int run_jvp(qmla_job *j, const char *in, const char *out, qmla_error *err)
{
    return run_op(j, in, out, 0, err);
}
static int run_predict(qmla_job *j, const char *in, const char *out, qmla_error *err)
{
    return run_op(j, in, out, 1, err);
}

/* ---- intervene ------------------------------------------------------------------ */

static int run_intervene(qmla_job *j, const char *in, const char *out, qmla_error *err)
{
    int st;
    qmla_iv_opts o;
    memset(&o, 0, sizeof o);
    o.params = qmla_sweep_defaults();
    o.params.nmse = 1e-3;
    long reps = 32, seed = 1, boot = 2000;
    st = p_quant(j, &o.params, err);
    if (!st)
        st = p_long(j, "reps", 1, 1 << 20, &reps, err);
    if (!st)
        st = p_long(j, "seed", 0, 0x7fffffffL, &seed, err);
    if (!st)
        st = p_long(j, "bootstrap", 0, 1 << 24, &boot, err);
    if (!st)
        st = p_threads(j, &o.threads, err);
    if (!st)
        st = p_engine(j, &o.engine, err);
    if (!st)
        st = p_flag(j, "force", &o.force, err);
    if (st)
        return st;
    o.reps = (size_t)reps;
    o.seed = (uint64_t)seed;
    o.bootstrap = (size_t)boot;
    o.command_line = command_of(j);
    o.progress = j->progress;
    o.progress_ctx = j->ctx;
    selection s;
    st = sel_parse(j, &s, err);
    qmla_capture *cap = NULL;
    if (!st)
        st = qmla_capture_open(in, &cap, err);
    qmla_iv_stats ss;
    if (!st)
        st = qmla_intervene_run(cap, &s.sel, &o, out, &ss, &j->stopped, err);
    if (!st && j->stopped)
        st = bad(j, err, "stopped (finished items are kept in %s.interventions.journal)", out);
    if (!st) {
        put(j, "n_items", (double)ss.n_items);
        for (int c = 0; c < QMLA_N_CTRL; c++)
            for (int p = 0; p < 2; p++) {
                char nm[64];
                const char *pn = p ? "rope" : "content";
                snprintf(nm, sizeof nm, "gmean_%s_%s", qmla_control_name(c), pn);
                put(j, nm, ss.gmean[c][p]);
                snprintf(nm, sizeof nm, "median_%s_%s", qmla_control_name(c), pn);
                put(j, nm, ss.median[c][p]);
            }
        put(j, "mean_r_joint", ss.mean_r_joint);
        put(j, "mean_cross_rel", ss.mean_cross_rel);
    }
    qmla_capture_close(cap);
    sel_free(&s);
    return st;
}

/* ---- learn ----------------------------------------------------------------------- */

static int learn_progress(void *ctx, size_t done, size_t total, size_t resumed)
{
    qmla_job *j = ctx;
    return j->progress ? j->progress(j->ctx, done, total, resumed) : 0;
}

static int run_learn(qmla_job *j, const char *in, const char *out, qmla_error *err)
{
    int st;
    qmla_learn_run_opts o = qmla_learn_run_defaults();
    long steps = (long)o.learn.steps, seed = (long)o.learn.seed;
    const char *m = get(j, "method"), *obj = get(j, "objective"), *held = get(j, "heldout-cells");
    const char *prec = get(j, "attn-precision");
    if (m && !(o.method = qmla_tmethod_lookup(m)))
        return bad(j, err, "method: expected quantmla, rtn, smoothquant or quarot, found \"%s\"", m);
    if (get(j, "path"))
        o.path = get(j, "path");
    if (get(j, "config"))
        o.config = get(j, "config");
    st = p_double(j, "alpha", 0, 1, &o.alpha, err);
    if (!st)
        st = p_long(j, "steps", 1, 1000000, &steps, err);
    if (!st)
        st = p_double(j, "lr", 1e-300, 10, &o.learn.lr, err);
    if (!st && !(o.learn.lr < 10))
        st = bad(j, err, "lr: expected a number in (0, 10)");
    if (!st)
        st = p_long(j, "seed", 0, 0x7fffffffL, &seed, err);
    if (!st && obj && strcmp(obj, "function") && strcmp(obj, "recon"))
        st = bad(j, err, "objective: expected function or recon, found \"%s\"", obj);
    if (!st && prec && strcmp(prec, "f32") && strcmp(prec, "f64"))
        st = bad(j, err, "attn-precision: expected f32 or f64, found \"%s\"", prec);
    if (!st)
        st = p_threads(j, &o.learn.threads, err);
    if (!st)
        st = p_engine(j, &o.engine, err);
    if (!st)
        st = p_flag(j, "force", &o.force, err);
    if (st)
        return st;
    o.learn.steps = (size_t)steps;
    o.learn.seed = (unsigned long)seed;
    o.learn.recon = obj && !strcmp(obj, "recon");
    o.learn.attn_f64 = prec && !strcmp(prec, "f64");
    o.also_content = get(j, "also-content");
    o.command_line = command_of(j);
    o.progress = learn_progress;
    o.progress_ctx = j;
    char **train = NULL, *tbuf = NULL, **hl = NULL, *hbuf = NULL;
    size_t nt = 0, nh = 0;
    int *layers = NULL;
    size_t nl = 0;
    qmla_learn_run_result r;
    st = qmla_learn_run_check(in, out, &o, &r, err);
    if (!st)
        st = p_int_list(j, "layers", &layers, &nl, err);
    if (!st)
        st = p_list(j, "train-cells", &train, &nt, &tbuf, err);
    o.no_held = held && !strcmp(held, "none");
    if (!st && !o.no_held)
        st = p_list(j, "heldout-cells", &hl, &nh, &hbuf, err);
    o.layers = layers;
    o.n_layers = nl;
    o.train = (const char *const *)train;
    o.n_train = nt;
    o.held = (const char *const *)hl;
    o.n_held = nh;
    o.layers_text = get(j, "layers");
    o.train_text = get(j, "train-cells");
    o.held_text = held;
    if (!st)
        st = qmla_learn_run(in, out, &o, &r, err);
    j->stopped = !!(st && r.stopped);
    if (!st)
        put(j, "n_layers", (double)r.n_layers);
    free(layers);
    free(train);
    free(tbuf);
    free(hl);
    free(hbuf);
    return st;
}

/* ---- eval ------------------------------------------------------------------------- */

static int run_eval(qmla_job *j, const char *in, const char *out, qmla_error *err)
{
    int st;
    const char *tf[QMLA_TF_EVAL_MAX + 1];
    qmla_tf_eval_run_opts o = qmla_tf_eval_run_defaults();
    o.n_transforms = get_all(j, "transforms", tf, QMLA_TF_EVAL_MAX + 1);
    o.transforms = tf;
    o.config = get(j, "config");
    if (get(j, "policy"))
        o.policy = get(j, "policy");
    o.command_line = command_of(j);
    st = p_threads(j, &o.threads, err);
    if (!st)
        st = p_engine(j, &o.engine, err);
    selection s;
    if (!st)
        st = sel_parse(j, &s, err);
    else
        memset(&s, 0, sizeof s);
    o.layers = s.layers;
    o.n_layers = s.n_layers;
    o.cells = (const char *const *)s.cells;
    o.n_cells = s.n_cells;
    qmla_tf_eval_run_result r;
    memset(&r, 0, sizeof r);
    if (!st)
        st = qmla_tf_eval_run(in, out, &o, &r, err);
    if (!st) {
        put(j, "n_rows", (double)r.n_rows);
        put(j, "bound_fail", (double)r.bound_fail);
        for (size_t k = 0; k < r.n_tf; k++) {
            char nm[96];
            snprintf(nm, sizeof nm, "mean_%s", r.label[k]);
            put(j, nm, r.mean[k]);
        }
    }
    qmla_tf_eval_run_result_free(&r);
    sel_free(&s);
    return st;
}

/* ---- allocate ---------------------------------------------------------------------- */

static int run_allocate(qmla_job *j, const char *in, const char *out, qmla_error *err)
{
    qmla_alloc_opts o;
    memset(&o, 0, sizeof o);
    o.budget = get(j, "budget");
    o.candidates = get(j, "candidates");
    o.policy = get(j, "policy");
    o.transforms = get(j, "transforms");
    o.command_line = command_of(j);
    long context = 4096;
    char **cells = NULL, *cbuf = NULL;
    int st = p_long(j, "context", 1, 1L << 30, &context, err);
    o.context = context;
    if (!st)
        st = p_threads(j, &o.threads, err);
    if (!st)
        st = p_engine(j, &o.engine, err);
    if (!st)
        st = p_list(j, "cells", &cells, &o.n_cells, &cbuf, err);
    o.cells = (const char *const *)cells;
    qmla_alloc_result r;
    memset(&r, 0, sizeof r);
    if (!st)
        st = qmla_alloc_run(in, out, &o, &r, err);
    if (!st) {
        put(j, "n_layers", (double)r.a.n);
        put(j, "budget_bytes_per_token", r.a.budget_bytes);
        put(j, "bytes_per_token", r.a.bytes_per_token);
        put(j, "pred_total", r.a.pred_total);
        put(j, "measure_cpu_s", r.measure_cpu_s);
    }
    qmla_alloc_result_free(&r);
    free(cells);
    free(cbuf);
    return st;
}

/* ---- capture ---------------------------------------------------------------------- */

enum { CAP_MAX_CORPORA = 16, CAP_MAX_CELLS = 256 };

typedef struct cap_prog {
    qmla_job *j;
    size_t per_cell, n_cells;
} cap_prog;

static int cap_event(void *ctx, const qmla_native_event *ev)
{
    cap_prog *p = ctx;
    if (ev->kind != 0 || !p->j->progress)
        return 0;
    return p->j->progress(p->j->ctx, ev->cell * p->per_cell + ev->done, p->n_cells * p->per_cell, 0);
}

static int run_capture(qmla_job *j, const char *dir, const char *out, qmla_error *err)
{
    int st;
    const char *carg[CAP_MAX_CORPORA + 1];
    size_t n_corpora = get_all(j, "corpus", carg, CAP_MAX_CORPORA + 1);
    if (!n_corpora)
        return bad(j, err, "no corpus NAME=FILE given");
    if (n_corpora > CAP_MAX_CORPORA)
        return bad(j, err, "corpus: at most %d corpora", CAP_MAX_CORPORA);
    long seqs = 8, tokens = 512, gz = 4, v;
    int threads = 1, f16 = 0, nopre = 0, force = 0;
    double tol = 0.0;
    st = p_long(j, "seqs", 1, 1 << 20, &seqs, err);
    if (!st)
        st = p_long(j, "tokens", 2, 1 << 20, &tokens, err);
    if (!st)
        st = p_long(j, "gzip", 0, 9, &gz, err);
    if (!st)
        st = p_threads(j, &threads, err);
    if (!st)
        st = p_flag(j, "no-pre", &nopre, err);
    if (!st)
        st = p_flag(j, "force", &force, err);
    if (!st && get(j, "check-tol")) {
        st = p_double(j, "check-tol", 0, HUGE_VAL, &tol, err);
        if (!st && !(tol > 0))
            st = bad(j, err, "check-tol: expected a number > 0");
    }
    const char *store = get(j, "store");
    if (!st && store) {
        if (!strcmp(store, "float16"))
            f16 = 1;
        else if (strcmp(store, "float32"))
            st = bad(j, err, "store: expected float16 or float32, found \"%s\"", store);
    }
    if (st)
        return st;
    qmla_native_corpus corp[CAP_MAX_CORPORA];
    char names[CAP_MAX_CORPORA][128];
    uint8_t *bufs[CAP_MAX_CORPORA] = {0};
    qmla_native_cell cells[CAP_MAX_CELLS];
    size_t n_cells = 0, nl = 0, n_layers = 0;
    int *layers = NULL;
    size_t *offs = NULL;
    qmla_model *m = NULL;
    char **list = NULL, *lbuf = NULL;
    for (size_t i = 0; i < n_corpora && !st; i++) {
        const char *file = NULL;
        if (qmla_native_corpus_arg(carg[i], names[i], sizeof names[i], &file)) {
            st = bad(j, err, "corpus \"%s\": expected NAME=FILE (NAME without '/', at most 100 bytes)",
                     carg[i]);
            break;
        }
        for (size_t k = 0; k < i && !st; k++)
            if (!strcmp(names[k], names[i]))
                st = bad(j, err, "corpus %s given twice", names[i]);
        corp[i] = (qmla_native_corpus){names[i], file, NULL, 0};
    }
    const char *cells_arg = get(j, "cells"), *seeds = get(j, "seeds");
    if (!st && cells_arg) {
        st = p_list(j, "cells", &list, &nl, &lbuf, err);
        for (size_t k = 0; k < nl && !st; k++) {
            char *colon = strchr(list[k], ':');
            if (colon)
                *colon = 0;
            size_t ci = n_corpora;
            for (size_t i = 0; i < n_corpora; i++)
                if (!strcmp(names[i], list[k]))
                    ci = i;
            v = 0;
            char *end = NULL;
            if (ci == n_corpora)
                st = bad(j, err, "cells %s: no corpus %s=FILE given", list[k], list[k]);
            else if (colon && colon[1] && ((v = strtol(colon + 1, &end, 10)) < 0 || *end))
                st = bad(j, err, "cells: expected a seed >= 0, found \"%s\"", colon + 1);
            else if (n_cells == CAP_MAX_CELLS)
                st = bad(j, err, "at most %d cells", CAP_MAX_CELLS);
            else
                cells[n_cells++] = (qmla_native_cell){ci, (uint64_t)v};
        }
    } else if (!st) {
        if (!seeds)
            seeds = "0";
        char *sb = strdup(seeds), *save = NULL;
        if (!sb)
            st = qmla_error_set(err, QMLA_ENOMEM, "out of memory");
        size_t ns = 0;
        for (size_t i = 0; i < n_corpora && !st; i++) {
            strcpy(sb, seeds);
            ns = 0;
            for (char *tok = strtok_r(sb, ",", &save); tok && !st; tok = strtok_r(NULL, ",", &save)) {
                char *end;
                errno = 0;
                v = strtol(tok, &end, 10);
                if (errno || *end || v < 0)
                    st = bad(j, err, "seeds: expected integers >= 0, found \"%s\"", tok);
                else if (n_cells == CAP_MAX_CELLS)
                    st = bad(j, err, "at most %d cells", CAP_MAX_CELLS);
                else
                    cells[n_cells++] = (qmla_native_cell){i, (uint64_t)v};
                ns++;
            }
            if (!st && !ns)
                st = bad(j, err, "seeds: expected a comma-separated list of seeds");
        }
        free(sb);
    }
    const size_t rep = st ? n_cells : qmla_native_cells_repeat(cells, n_cells);
    if (rep < n_cells)
        st = bad(j, err, "cell %s-s%llu given twice", names[cells[rep].corpus],
                 (unsigned long long)cells[rep].seed);
    if (!st)
        st = p_int_list(j, "layers", &layers, &n_layers, err);
    if (!st) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", out);
        const char *inp[CAP_MAX_CORPORA];
        for (size_t i = 0; i < n_corpora; i++)
            inp[i] = corp[i].path;
        struct stat sb;
        if (qmla_output_path_check(out, "output file (-o)", inp, n_corpora, err) ||
            qmla_output_path_check(tmp, "temporary file", NULL, 0, err))
            st = err->status;
        else if (!force && stat(out, &sb) == 0)
            st = bad(j, err, "%s exists (use force to overwrite)", out);
    }
    if (!st) {
        size_t failed = 0;
        int decoding = 0;
        st = qmla_native_corpora_read(corp, n_corpora, cells, n_cells, bufs, &failed, &decoding,
                                      err);
        if (st)
            qmla_error_prefix(err, "corpus %s: ", names[failed]);
    }
    if (!st)
        st = qmla_model_load(dir, &m, err);
    if (!st && !(offs = malloc(n_cells * (size_t)seqs * sizeof *offs)))
        st = qmla_error_set(err, QMLA_ENOMEM, "out of memory");
    if (!st) {
        cap_prog pg = {j, (size_t)seqs, n_cells};
        double worst = 0.0;
        qmla_native_capture_opts o;
        memset(&o, 0, sizeof o);
        o.model_dir = dir;
        o.model_name = get(j, "model-name") ? get(j, "model-name") : dir;
        o.corpora = corp;
        o.n_corpora = n_corpora;
        o.cells = cells;
        o.n_cells = n_cells;
        o.seqs = (size_t)seqs;
        o.tokens = (size_t)tokens;
        o.layers = layers;
        o.n_layers = n_layers;
        o.float16 = f16;
        o.gzip = (int)gz;
        o.with_pre = !nopre;
        o.threads = threads;
        o.check_tol = tol;
        o.progress = cap_event;
        o.progress_ctx = &pg;
        o.offsets_out = offs;
        o.worst_out = &worst;
        o.stopped = &j->stopped;
        st = qmla_capture_native(m, out, &o, err);
        if (!st && j->stopped)
            st = bad(j, err, "stopped; nothing written");
        if (!st) {
            put(j, "worst_recompute_error", worst);
            put(j, "n_cells", (double)n_cells);
        }
    }
    qmla_model_free(m);
    for (size_t i = 0; i < CAP_MAX_CORPORA; i++)
        free(bufs[i]);
    free(layers);
    free(offs);
    free(list);
    free(lbuf);
    return st;
}

/* ---- ppl ------------------------------------------------------------------------------ */

static int run_ppl(qmla_job *j, const char *dir, const char *out, qmla_error *err)
{
    int st;
    const char *texts[QMLA_PPL_MAX + 1], *tf[QMLA_PPL_MAX + 1];
    qmla_ppl_run_opts o = qmla_ppl_run_defaults();
    o.n_texts = get_all(j, "text", texts, QMLA_PPL_MAX + 1);
    o.texts = texts;
    o.n_transforms = get_all(j, "transforms", tf, QMLA_PPL_MAX + 1);
    o.transforms = tf;
    if (get(j, "config"))
        o.configs = get(j, "config");
    if (get(j, "policy"))
        o.policies = get(j, "policy");
    o.kl_ref = get(j, "kl-ref");
    long tokens = 0, context = 512;
    st = p_flag(j, "transforms-only", &o.transforms_only, err);
    if (!st)
        st = p_long(j, "tokens", 1, 1L << 40, &tokens, err);
    if (!st)
        st = p_long(j, "context", 1, 1L << 20, &context, err);
    if (!st)
        st = p_threads(j, &o.threads, err);
    if (st)
        return st;
    o.tokens = (size_t)tokens;
    o.context = (size_t)context;
    o.command_line = command_of(j);
    o.progress = j->progress;
    o.progress_ctx = j->ctx;
    char jpath[4200];
    snprintf(jpath, sizeof jpath, "%s.journal", out);
    o.journal = jpath;
    st = p_flag(j, "force", &o.force, err);
    if (st)
        return st;
    qmla_ppl_run_result r;
    st = qmla_ppl_run(dir, out, &o, &r, err);
    j->stopped = r.stopped;
    if (!st) {
        put(j, "n_rows", (double)r.n_rows);
        put(j, "resumed", (double)r.resumed);
        for (size_t k = 0; k < r.n_rows; k++) {
            char nm[96];
            snprintf(nm, sizeof nm, "bits_per_byte_%zu", k);
            put(j, nm, r.rows[k].r.bits_per_byte);
            if (r.rows[k].r.has_kl) {
                snprintf(nm, sizeof nm, "kl_mean_nats_%zu", k);
                put(j, nm, r.rows[k].r.kl_mean);
                snprintf(nm, sizeof nm, "top1_agreement_%zu", k);
                put(j, nm, r.rows[k].r.top1_agreement);
            }
        }
    }
    qmla_ppl_run_result_free(&r);
    return st;
}

/* ---- the table ------------------------------------------------------------------------ */


static const job_driver drivers[] = {
    {"sweep", "input output bits group nmse meta layers cells threads engine verify force shard balance command",
     run_sweep},
    {"jvp", "input output nmse bits group layers cells threads engine force command", run_jvp},
    {"predict", "input output nmse group layers cells threads engine force command", run_predict},
    {"intervene", "input output bits group nmse reps seed bootstrap layers cells threads engine force command",
     run_intervene},
    {"learn", "input output method path config steps lr seed objective alpha layers train-cells "
              "heldout-cells threads engine force also-content attn-precision command", run_learn},
    {"eval", "input output transforms* config policy layers cells threads engine command", run_eval},
    {"capture", "input output corpus* seeds cells seqs tokens layers store gzip no-pre model-name "
                "check-tol threads force", run_capture},
    {"ppl", "input output text* config policy transforms* transforms-only tokens context threads "
            "force kl-ref command", run_ppl},
    {"allocate", "input output budget candidates policy context transforms cells threads engine "
                 "command", run_allocate},
};

static int key_known(const char *keys, const char *key)
{
    size_t n = strlen(key);
    for (const char *p = keys; *p;) {
        const char *e = strchr(p, ' ');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        size_t kl = l && p[l - 1] == '*' ? l - 1 : l;
        if (kl == n && !strncmp(p, key, n))
            return 1;
        p += l;
        while (*p == ' ')
            p++;
    }
    return 0;
}

int qmla_job_new(const char *driver, qmla_job **out, qmla_error *err)
{
    *out = NULL;
    for (size_t k = 0; k < sizeof drivers / sizeof *drivers; k++)
        if (driver && !strcmp(driver, drivers[k].name)) {
            qmla_job *j = calloc(1, sizeof *j);
            if (!j)
                return qmla_error_set(err, QMLA_ENOMEM, "out of memory");
            j->d = &drivers[k];
            *out = j;
            return QMLA_OK;
        }
    return qmla_error_set(err, QMLA_EINVAL,
                          "driver \"%s\": expected sweep, jvp, predict, intervene, learn, eval, capture, ppl "
                          "or allocate",
                          driver ? driver : "(null)");
}

void qmla_job_free(qmla_job *j)
{
    if (!j)
        return;
    for (size_t i = 0; i < j->n; i++) {
        free(j->key[i]);
        free(j->val[i]);
    }
    free(j);
}

int qmla_job_set(qmla_job *j, const char *key, const char *value, qmla_error *err)
{
    if (!key || !value)
        return qmla_error_set(err, QMLA_EINVAL, "%s: NULL key or value", j->d->name);
    if (!key_known(j->d->keys, key))
        return qmla_error_set(err, QMLA_EINVAL, "%s: unknown option \"%s\" (expected one of: %s)",
                              j->d->name, key, j->d->keys);
    if (j->n == MAX_KV)
        return qmla_error_set(err, QMLA_EINVAL, "%s: at most %d options", j->d->name, MAX_KV);
    j->key[j->n] = strdup(key);
    j->val[j->n] = strdup(value);
    if (!j->key[j->n] || !j->val[j->n]) {
        free(j->key[j->n]);
        free(j->val[j->n]);
        return qmla_error_set(err, QMLA_ENOMEM, "out of memory");
    }
    j->n++;
    return QMLA_OK;
}

int qmla_job_run(qmla_job *j, qmla_progress_fn progress, void *ctx, qmla_error *err)
{
    j->progress = progress;
    j->ctx = ctx;
    j->stopped = 0;
    j->n_values = 0;
    const char *in, *out;
    const int st = io_paths(j, &in, &out, err);
    return st ? st : j->d->run(j, in, out, err);
}

int qmla_job_stopped(const qmla_job *j) { return j->stopped; }

double qmla_job_value(const qmla_job *j, const char *name)
{
    if (!name || !*name)
        return (double)j->n_values;
    for (size_t k = 0; k < j->n_values; k++)
        if (!strcmp(j->vname[k], name))
            return j->value[k];
    return NAN;
}

size_t qmla_job_n_values(const qmla_job *j) { return j->n_values; }

const char *qmla_job_value_name(const qmla_job *j, size_t k)
{
    return k < j->n_values ? j->vname[k] : NULL;
}
