/* intervene.c — equal-energy interventions and the joint-path perturbation
 * (include/qmla/intervene.h, docs/math.md §6, paper Table 6, App. B.2),
 * with a GSL percentile bootstrap of the geometric-mean gain ratios. */
#include "qmla/intervene.h"
#include "operator/op_shared.h"
#include "operator/op_part.h"
#include "qmla/norms.h"
#include "sweep/plan.h"
#include "io/group.h"
#include "io/journal.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *qmla_control_name(int c)
{
    return c == QMLA_CTRL_SIGN ? "sign" : c == QMLA_CTRL_PERMUTE ? "permute"
                                                                : "isotropic";
}

/* ||J_b E'||^2 / ||Y||^2 / (||E'||^2/||X||^2) with the clean pass of ws. */
static int local_gain(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                      const qmla_mla_weights *w, const float *C, int path,
                      const float *E, double xx, double yy, qmla_op_ws *ws,
                      double *g, qmla_error *err)
{
    const size_t width = path == QMLA_PATH_CONTENT ? d->d_c : d->d_r;
    int st = qmla_jvp_apply(ex, d, T, w, &ws->sweep.clean, C,
                            path == QMLA_PATH_CONTENT ? E : NULL,
                            path == QMLA_PATH_CONTENT ? NULL : E, &ws->jvp, err);
    if (st)
        return st;
    const double ee = qmla_sumsq(E, T * width);
    *g = (qmla_sumsq(ws->jvp.dY, T * d->D) / yy) / (ee / xx);
    return QMLA_OK;
}

int qmla_intervene_sequence(const qmla_exec *ex, const qmla_mla_dims *d,
                            size_t T, const qmla_mla_weights *w,
                            const float *q_nope, const float *q_rope,
                            const float *C, const float *K,
                            const qmla_sweep_params *p, size_t reps,
                            uint64_t seed, qmla_op_ws *ws, qmla_iv_item *out,
                            double *ratio, qmla_error *err)
{
    const size_t dc = d->d_c, dr = d->d_r, nY = T * d->D;
    memset(out, 0, sizeof *out);
    out->seed = seed;
    qmla_response fin[2];
    int st = qmla_sweep_sequence(ex, p, d, T, w, q_nope, q_rope, C, K, 0, &ws->sweep,
                                 fin, err);
    if (st)
        return st;
    const float *Y = ws->sweep.clean.Y;
    const double yy = qmla_sumsq(Y, nY);
    const size_t wmax = dc > dr ? dc : dr;
    float *E0 = malloc(T * wmax * sizeof *E0), *E1 = malloc(T * wmax * sizeof *E1);
    float *Ek = malloc(T * dr * sizeof *Ek), *Cp = malloc(T * dc * sizeof *Cp);
    float *Kp = malloc(T * dr * sizeof *Kp);
    size_t *perm = malloc(T * sizeof *perm);
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    if (!E0 || !E1 || !Ek || !Cp || !Kp || !perm || !rng) {
        st = qmla_error_set(err, QMLA_ENOMEM, "interventions: out of memory");
        goto out;
    }
    if (qmla_iv_begin(rng, seed, reps, fin, yy, out, ratio))
        goto out;
    for (int path = 0; path < 2; path++) {
        const int content = path == QMLA_PATH_CONTENT;
        size_t width;
        double xx;
        int degen;
        if ((st = qmla_op_path_direction(p, path, C, K, T, dc, dr, E0, &width, &xx, &degen,
                                         err)))
            goto out;
        const size_t n = T * width;
        if (!content)
            memcpy(Ek, E0, n * sizeof *Ek); /* kept for the joint perturbation */
        else
            memcpy(Cp, E0, n * sizeof *Cp);
        out->r_finite[path] = fin[path].response;
        if ((st = local_gain(ex, d, T, w, C, path, E0, xx, yy, ws, &out->g_jvp[path], err)))
            goto out;
        const double e0 = sqrt(qmla_sumsq(E0, n));
        for (int c = 0; c < QMLA_N_CTRL; c++)
            for (size_t r = 0; r < reps; r++) {
                qmla_iv_control(rng, c, E0, E1, T, width, e0, perm);
                double g;
                if ((st = local_gain(ex, d, T, w, C, path, E1, xx, yy, ws, &g, err)))
                    goto out;
                ratio[((size_t)path * QMLA_N_CTRL + (size_t)c) * reps + r] =
                    g / out->g_jvp[path];
            }
    }
    /* joint: C + E_C (kept in Cp as the error), K + E_K, one full forward into
     * the JVP workspace (logits/attention in dZ, latents dU, values dO). */
    for (size_t i = 0; i < T * dc; i++)
        Cp[i] = C[i] + Cp[i];
    for (size_t i = 0; i < T * dr; i++)
        Kp[i] = K[i] + Ek[i];
    qmla_attn_from_queries(ex, d, T, w, ws->sweep.clean.q_lat, ws->sweep.clean.q_rope_t,
                           Cp, Kp, ws->jvp.dZ, ws->jvp.dZ, ws->jvp.dU, ws->jvp.dO,
                           ws->jvp.dY);
    {
        qmla_iv_joint(out, qmla_diff_sumsq(ws->jvp.dY, Y, nY) / yy, fin, p->nmse);
    }
out:
    if (rng)
        gsl_rng_free(rng);
    free(E0);
    free(E1);
    free(Ek);
    free(Cp);
    free(Kp);
    free(perm);
    return st;
}

/* ---- over a capture -------------------------------------------------------- */

static int bootstrap_gmean(const double *lr, size_t n, size_t B, uint64_t seed,
                           double *gm, double *lo, double *hi, double *med)
{
    *gm = *lo = *hi = *med = NAN;
    if (n == 0)
        return 0;
    double *m = malloc((B ? B : 1) * sizeof *m), *s = malloc(n * sizeof *s);
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    if (!m || !s || !rng) {
        free(m);
        free(s);
        if (rng)
            gsl_rng_free(rng);
        return -1;
    }
    gsl_rng_set(rng, (unsigned long)seed);
    *gm = exp(gsl_stats_mean(lr, 1, n));
    memcpy(s, lr, n * sizeof *s);
    gsl_sort(s, 1, n);
    *med = exp(gsl_stats_median_from_sorted_data(s, 1, n));
    for (size_t b = 0; b < B; b++) {
        double acc = 0.0;
        for (size_t k = 0; k < n; k++)
            acc += lr[gsl_rng_uniform_int(rng, n)];
        m[b] = acc / (double)n;
    }
    if (B) {
        gsl_sort(m, 1, B);
        *lo = exp(gsl_stats_quantile_from_sorted_data(m, 1, B, 0.025));
        *hi = exp(gsl_stats_quantile_from_sorted_data(m, 1, B, 0.975));
    }
    gsl_rng_free(rng);
    free(m);
    free(s);
    return 0;
}

static int write_iv(const char *path, const qmla_iv_opts *o, const char *eng_name,
                    const char *eng_device, const char *capture,
                    const char *sha, size_t n, const int *layer, const char **cell,
                    const int *seq, const qmla_iv_item *it, const double *ratio,
                    const qmla_iv_stats *s, qmla_error *err)
{
    int st = QMLA_OK;
    qmla_h5_out ho;
    if ((st = qmla_h5_out_group(&ho, path, "interventions", err)))
        return st;
    const hid_t g = ho.g;
    double *v = malloc((2 * n + 1) * sizeof *v);
    long long *u = malloc((n + 1) * sizeof *u);
    if (!v || !u) {
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    {
        const qmla_prov_input in[] = {{"capture_file", capture}, {"capture_sha256", sha}};
        const qmla_prov p = {.tool = "qmla intervene", .command_line = o->command_line,
                             .engine = eng_name, .engine_device = eng_device, .inputs = in,
                             .n_inputs = 2};
        if ((st = qmla_h5_prov(g, &p, path, err)))
            goto out;
    }
    QMLA_H5_TRY(qmla_h5_attr_int(g, "bits", o->params.quant.bits), "attribute bits");
    QMLA_H5_TRY(qmla_h5_attr_int(g, "group", o->params.quant.group), "attribute group");
    QMLA_H5_TRY(qmla_h5_attr_dbl(g, "nmse", o->params.nmse), "attribute nmse");
    QMLA_H5_TRY(qmla_h5_attr_int(g, "reps", (long long)o->reps), "attribute reps");
    QMLA_H5_TRY(qmla_h5_attr_int(g, "seed", (long long)o->seed), "attribute seed");
    QMLA_H5_TRY(qmla_h5_attr_int(g, "bootstrap_resamples", (long long)o->bootstrap),
          "attribute bootstrap_resamples");
    QMLA_H5_TRY(qmla_h5_attr_int(g, "n_items", (long long)s->n_items), "attribute n_items");
    for (int c = 0; c < QMLA_N_CTRL; c++)
        for (int p = 0; p < 2; p++) {
            char a[96];
            const char *pn = p ? "rope" : "content";
            snprintf(a, sizeof a, "gain_ratio_%s_%s", qmla_control_name(c), pn);
            QMLA_H5_TRY(qmla_h5_attr_dbl(g, a, s->gmean[c][p]), a);
            snprintf(a, sizeof a, "gain_ratio_%s_%s_ci_low", qmla_control_name(c), pn);
            QMLA_H5_TRY(qmla_h5_attr_dbl(g, a, s->ci_lo[c][p]), a);
            snprintf(a, sizeof a, "gain_ratio_%s_%s_ci_high", qmla_control_name(c), pn);
            QMLA_H5_TRY(qmla_h5_attr_dbl(g, a, s->ci_hi[c][p]), a);
            snprintf(a, sizeof a, "median_gain_ratio_%s_%s", qmla_control_name(c), pn);
            QMLA_H5_TRY(qmla_h5_attr_dbl(g, a, s->median[c][p]), a);
        }
    QMLA_H5_TRY(qmla_h5_attr_dbl(g, "mean_joint_response", s->mean_r_joint), "mean_joint_response");
    QMLA_H5_TRY(qmla_h5_attr_dbl(g, "mean_response_content", s->mean_r_content), "mean_response_content");
    QMLA_H5_TRY(qmla_h5_attr_dbl(g, "mean_response_rope", s->mean_r_rope), "mean_response_rope");
    QMLA_H5_TRY(qmla_h5_attr_dbl(g, "mean_cross_relative", s->mean_cross_rel), "mean_cross_relative");
    QMLA_H5_TRY(qmla_h5_dset_1d(g, "layer", H5T_STD_I32LE, H5T_NATIVE_INT, n, layer, "layer index", NULL),
          "layer");
    QMLA_H5_TRY(qmla_h5_dset_strs(g, "cell", n, cell, "cell name"), "cell");
    QMLA_H5_TRY(qmla_h5_dset_1d(g, "seq", H5T_STD_I32LE, H5T_NATIVE_INT, n, seq, "sequence", NULL),
          "seq");
    for (size_t k = 0; k < n; k++)
        u[k] = (long long)it[k].seed;
    QMLA_H5_TRY(qmla_h5_dset_1d(g, "item_seed", H5T_STD_I64LE, H5T_NATIVE_LLONG, n, u,
                          "mt19937 seed of the item's draws", NULL), "item_seed");
    for (size_t k = 0; k < n; k++)
        u[k] = it[k].degenerate;
    QMLA_H5_TRY(qmla_h5_dset_1d(g, "degenerate", H5T_STD_I64LE, H5T_NATIVE_LLONG, n, u,
                          "1: a path or the output has no energy", NULL), "degenerate");
#define ITEM_D(name, expr, desc)                                                \
    for (size_t k = 0; k < n; k++)                                              \
        v[k] = (expr);                                                          \
    QMLA_H5_TRY(qmla_h5_dset_1d(g, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, v, desc, "1"), name)
    ITEM_D("g_jvp_content", it[k].g_jvp[0], "local gain of the content QDQ direction");
    ITEM_D("g_jvp_rope", it[k].g_jvp[1], "local gain of the RoPE QDQ direction");
    ITEM_D("response_content", it[k].r_finite[0], "finite content response at nu");
    ITEM_D("response_rope", it[k].r_finite[1], "finite RoPE response at nu");
    ITEM_D("response_joint", it[k].r_joint, "joint response NMSE_out,joint / nu");
    ITEM_D("cross", it[k].cross, "NMSE_out,joint - NMSE_out,C - NMSE_out,P");
    ITEM_D("cross_relative", it[k].cross_rel, "cross / (NMSE_out,C + NMSE_out,P)");
#undef ITEM_D
    for (int c = 0; c < QMLA_N_CTRL; c++)
        for (int p = 0; p < 2; p++) {
            char name[64];
            snprintf(name, sizeof name, "ratio_%s_%s", qmla_control_name(c),
                     p ? "rope" : "content");
            double *r = malloc((n * o->reps + 1) * sizeof *r);
            if (!r) {
                st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
                goto out;
            }
            for (size_t k = 0; k < n; k++)
                memcpy(r + k * o->reps,
                       ratio + ((k * 2 + (size_t)p) * QMLA_N_CTRL + (size_t)c) * o->reps,
                       o->reps * sizeof *r);
            const int rr = qmla_h5_dset_1d(g, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
                                           n * o->reps, r,
                                           "gain ratio g(E')/g(E), item-major, reps per item",
                                           "1");
            free(r);
            QMLA_H5_TRY(rr, name);
        }
out:
    st = qmla_h5_out_finish(&ho, st);
    free(v);
    free(u);
    return st;
}

/* The resume journal, RESULTS.h5.interventions.journal, in the journal
 * layer (io/journal.h; kind "interventions"), one record per finished item
 * (reals as C99 hex floats):
 *   I <plan item> <layer> <seq> <seed> <degenerate> <g_jvp C> <g_jvp P>
 *     <R C> <R P> <R joint> <cross> <cross_rel>
 *   R <2 x 3 x reps ratios>
 *   E
 * A malformed record cuts the journal there (recomputed). */
static int iv_journal_write(qmla_jnl *j, size_t k, int layer, int seq,
                            const qmla_iv_item *it, const double *ratio, size_t n,
                            qmla_error *err)
{
    qmla_jnl_printf(j, "I %zu %d %d %llu %d %a %a %a %a %a %a %a\nR", k, layer, seq,
                    (unsigned long long)it->seed, it->degenerate, it->g_jvp[0],
                    it->g_jvp[1], it->r_finite[0], it->r_finite[1], it->r_joint, it->cross,
                    it->cross_rel);
    for (size_t i = 0; i < n; i++)
        qmla_jnl_printf(j, " %a", ratio[i]);
    qmla_jnl_printf(j, "\nE\n");
    return qmla_jnl_commit(j, err);
}

typedef struct iv_replay {
    const qmla_plan *plan;
    const size_t *ord;
    size_t nr;
    qmla_iv_item *items;
    double *ratio;
    unsigned char *done;
    double *r; /* [nr] scratch */
} iv_replay;

/* One record into items/ratio at its item's ordinal. */
static int iv_journal_replay(void *ctx, char *rec, size_t len, qmla_error *err)
{
    (void)err;
    iv_replay *c = ctx;
    const qmla_plan *plan = c->plan;
    FILE *f = fmemopen(rec, len, "r");
    if (!f)
        return qmla_error_set(err, QMLA_ENOMEM, "interventions journal: out of memory");
    size_t k;
    int layer, seq, degen;
    unsigned long long seed;
    qmla_iv_item it;
    memset(&it, 0, sizeof it);
    int ok = fscanf(f, " I %zu %d %d %llu %d %la %la %la %la %la %la %la", &k, &layer, &seq,
                    &seed, &degen, &it.g_jvp[0], &it.g_jvp[1], &it.r_finite[0],
                    &it.r_finite[1], &it.r_joint, &it.cross, &it.cross_rel) == 12;
    char tag[2];
    ok = ok && fscanf(f, " %1s", tag) == 1 && tag[0] == 'R';
    for (size_t i = 0; i < c->nr && ok; i++)
        ok = fscanf(f, " %la", &c->r[i]) == 1;
    ok = ok && fscanf(f, " %1s", tag) == 1 && tag[0] == 'E';
    fclose(f);
    if (!ok)
        return QMLA_EFORMAT;
    if (k >= plan->n_items || !plan->wanted[k] || plan->items[k].layer != layer ||
        (int)plan->items[k].seq != seq || c->done[c->ord[k]])
        return QMLA_OK;
    it.seed = seed;
    it.degenerate = degen;
    c->items[c->ord[k]] = it;
    memcpy(c->ratio + c->ord[k] * c->nr, c->r, c->nr * sizeof *c->r);
    c->done[c->ord[k]] = 1;
    return QMLA_OK;
}

/* The plan index of a record (op_part.h's item_of). */
static int iv_record_item(void *ctx, const char *rec, size_t len, size_t *item)
{
    (void)len;
    const iv_replay *c = ctx;
    size_t k;
    int layer, seq;
    if (sscanf(rec, " I %zu %d %d", &k, &layer, &seq) != 3)
        return QMLA_EFORMAT;
    *item = k < c->plan->n_items && c->plan->items[k].layer == layer &&
                    (int)c->plan->items[k].seq == seq
                ? k
                : SIZE_MAX;
    return QMLA_OK;
}

/* The shard's items, in plan order, into its part file. */
typedef struct iv_emit {
    const qmla_plan *plan;
    const size_t *ord;
    const int *lay, *seq;
    const qmla_iv_item *items;
    const double *ratio;
    size_t nr;
} iv_emit;

static int iv_emit_items(void *ctx, qmla_jnl *j, qmla_error *err)
{
    const iv_emit *e = ctx;
    for (size_t k = 0; k < e->plan->n_items; k++) {
        if (!e->plan->wanted[k])
            continue;
        const size_t o = e->ord[k];
        const int st = iv_journal_write(j, k, e->lay[o], e->seq[o], &e->items[o],
                                        e->ratio + o * e->nr, e->nr, err);
        if (st)
            return st;
    }
    return QMLA_OK;
}

int qmla_intervene_run(qmla_capture *cap, const qmla_sweep_selection *sel,
                       const qmla_iv_opts *o, const char *results_path,
                       qmla_iv_stats *stats, int *stopped, qmla_error *err)
{
    *stopped = 0;
    memset(stats, 0, sizeof *stats);
    const qmla_capture_config *cfg = qmla_capture_get_config(cap);
    const qmla_mla_dims d = {(size_t)cfg->H, (size_t)cfg->D, (size_t)cfg->d_c,
                             (size_t)cfg->d_n, (size_t)cfg->d_r, (size_t)cfg->d_v,
                             cfg->softmax_scale};
    int st = qmla_sweep_params_check(&o->params, cfg, err);
    if (st)
        return st;
    if (o->reps == 0)
        return qmla_error_set(err, QMLA_EINVAL, "interventions: expected reps >= 1, found 0");
    const int sharded = o->n_shards > 1, merging = o->n_parts > 0;
    qmla_plan plan;
    uint64_t plan_hash = 0;
    if ((st = qmla_oppart_plan(cap, sel, "interventions", o->shard, o->n_shards, merging,
                               results_path, "interventions-part", &plan, &plan_hash, err)))
        return st;
    const qmla_plan_selection ps = qmla_plan_selection_of(sel); /* the whole run's, for a merge */
    const size_t nw = plan.n_wanted, R = o->reps;
    qmla_oppart_prov prov;
    memset(&prov, 0, sizeof prov);
    /* the per-sequence work and its workspace go through the engine
     * (qmla/engine.h) */
    const qmla_iv_ops *eng = qmla_engine_iv(o->engine);
    void *ws = NULL;
    qmla_layer layer;
    memset(&layer, 0, sizeof layer);
    int *lay = malloc((nw + 1) * sizeof *lay), *seq = malloc((nw + 1) * sizeof *seq);
    const char **cells = malloc((nw + 1) * sizeof *cells);
    qmla_iv_item *items = malloc((nw + 1) * sizeof *items);
    double *ratio = malloc((nw * 2 * QMLA_N_CTRL * R + 1) * sizeof *ratio);
    double *lr = malloc((nw * R + 1) * sizeof *lr);
    char sha[65];
    const qmla_exec ex = qmla_exec_cpu(o->threads);
    if (!lay || !seq || !cells || !items || !ratio || !lr) {
        st = qmla_error_set(err, QMLA_ENOMEM, "interventions: out of memory");
        goto out;
    }
    if ((st = qmla_sha256_file(qmla_capture_path(cap), sha, err)))
        goto out;
    /* nothing to compute: a merge, or an empty shard */
    if (!merging && nw > 0 && (st = eng->ws_alloc(&d, plan.T_max, o->threads, &ws, err)))
        goto out;
    /* ordinal of each wanted item (plan order); results sit at it */
    size_t *ord = malloc((plan.n_items + 1) * sizeof *ord);
    unsigned char *done = calloc(nw + 1, 1);
    char key[8192], jpath[4096];
    qmla_jnl jf;
    int jopen = 0;
    if (!ord || !done) {
        free(ord);
        free(done);
        st = qmla_error_set(err, QMLA_ENOMEM, "interventions: out of memory");
        goto out;
    }
    size_t n = 0;
    for (size_t k = 0; k < plan.n_items; k++)
        ord[k] = plan.wanted[k] ? n++ : SIZE_MAX;
    {
        size_t u = (size_t)snprintf(key, sizeof key,
                                    "sha256=%s bits=%d group=%d meta=%d nmse=%a reps=%zu seed=%llu",
                                    sha, o->params.quant.bits, o->params.quant.group,
                                    (int)o->params.quant.meta, o->params.nmse, R,
                                    (unsigned long long)o->seed);
        for (size_t c = 0; c < plan.n_cells && u < sizeof key; c++)
            u += (size_t)snprintf(key + u, sizeof key - u, "%s%s", c ? "," : " cells=",
                                  plan.cells[c]);
    }
    snprintf(jpath, sizeof jpath, "%s.interventions.journal", results_path);
    const size_t nr = 2 * QMLA_N_CTRL * R;
    double *scratch = malloc((nr ? nr : 1) * sizeof *scratch);
    if (!scratch) {
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", jpath);
        goto out2;
    }
    iv_replay rpl = {&plan, ord, nr, items, ratio, done, scratch};
    if (merging)
        st = qmla_oppart_merge_read(o->parts, o->n_parts, "interventions-part", key, cap, &ps,
                                    &plan, iv_record_item, iv_journal_replay, &rpl, &prov, err);
    else
        st = qmla_jnl_open(&jf, jpath, "interventions", key, o->force, iv_journal_replay,
                           &rpl, NULL, err);
    free(scratch);
    if (st)
        goto out2;
    jopen = !merging;
    char engines[64] = ""; /* of the items resumed and computed (journal.h) */
    if (jopen) {
        qmla_jnl_engines_add(engines, sizeof engines, jf.engines);
        if ((st = qmla_jnl_engine(&jf, qmla_engine_name(o->engine),
                                  qmla_engine_mode(o->engine), err)))
            goto out2;
    }
    if (sharded && o->n_replay) { /* earlier runs' parts and journals, any N */
        double *sc2 = malloc((nr ? nr : 1) * sizeof *sc2);
        if (!sc2) {
            st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", jpath);
            goto out2;
        }
        rpl.r = sc2;
        st = qmla_oppart_replay_files(o->replay, o->n_replay, "interventions",
                                      "interventions-part", key, iv_journal_replay, &rpl,
                                      engines, sizeof engines, err);
        free(sc2);
        if (st)
            goto out2;
    }
    size_t resumed = 0;
    for (size_t k = 0; k < nw; k++)
        resumed += done[k];
    size_t fin = resumed;
    long cur = -1;
    for (size_t k = 0; k < plan.n_items; k++) {
        const qmla_plan_item *it = &plan.items[k];
        if (plan.wanted[k]) {
            lay[ord[k]] = it->layer;
            seq[ord[k]] = (int)it->seq;
            cells[ord[k]] = qmla_capture_cell_name(cap, it->li, it->ci);
        }
        if (!plan.wanted[k] || done[ord[k]])
            continue;
        if ((long)it->li != cur) {
            qmla_layer_free(&layer);
            if ((st = qmla_capture_load_layer(cap, it->li, &layer, err)))
                goto out2;
            if (eng->layer_begin) /* a device engine copies the new weights */
                eng->layer_begin(ws);
            cur = (long)it->li;
        }
        qmla_cell cell;
        memset(&cell, 0, sizeof cell);
        if ((st = qmla_capture_load_cell_parts(cap, it->li, it->ci, 0, &cell, err)))
            goto out2;
        const size_t T = cell.T, H = d.H, q = it->seq, j = ord[k];
        const qmla_mla_weights w = {layer.w_uk, layer.w_uv, layer.w_o};
        st = eng->sequence(&ex, &d, T, &w, cell.q_nope + q * H * T * d.d_n,
                           cell.q_rope + q * H * T * d.d_r,
                           cell.c_kv + q * T * d.d_c, cell.k_rope + q * T * d.d_r,
                           &o->params, R, o->seed + k, ws, &items[j],
                           ratio + j * nr, err);
        if (st)
            qmla_error_prefix(err, "%s: layer %d, cell %s, sequence %zu: ", qmla_capture_path(cap),
                              it->layer, cell.name, q);
        qmla_cell_free(&cell);
        if (st) {
            goto out2;
        }
        if ((st = iv_journal_write(&jf, k, it->layer, (int)q, &items[j], ratio + j * nr, nr,
                                   err)))
            goto out2;
        done[j] = 1;
        fin++;
        if (o->progress && o->progress(o->progress_ctx, fin, nw, resumed)) {
            *stopped = 1;
            goto out2;
        }
    }
    /* items another engine computed (a resume across engines): the file
     * names every engine of its items, so a merge refuses it beside one
     * engine's parts */
    if (jopen)
        qmla_jnl_engines_add(engines, sizeof engines, jf.engines);
    if (sharded) {
        /* a part file of the shard's items; the group needs every item */
        const iv_emit em = {&plan, ord, lay, seq, items, ratio, nr};
        st = qmla_oppart_write(results_path, "interventions-part", key, o->shard, o->n_shards,
                               plan_hash, o->engine, engines, iv_emit_items, (void *)&em, err);
        if (st == QMLA_OK) {
            qmla_jnl_close(&jf, 1);
            jopen = 0;
        }
        goto out2;
    }
    /* headline statistics over the non-degenerate items */
    size_t good = 0;
    double rj = 0, rc = 0, rp = 0, cr = 0;
    for (size_t k = 0; k < n; k++)
        if (!items[k].degenerate) {
            good++;
            rj += items[k].r_joint;
            rc += items[k].r_finite[0];
            rp += items[k].r_finite[1];
            cr += items[k].cross_rel;
        }
    stats->n_items = good;
    stats->mean_r_joint = good ? rj / (double)good : NAN;
    stats->mean_r_content = good ? rc / (double)good : NAN;
    stats->mean_r_rope = good ? rp / (double)good : NAN;
    stats->mean_cross_rel = good ? cr / (double)good : NAN;
    for (int c = 0; c < QMLA_N_CTRL; c++)
        for (int p = 0; p < 2; p++) {
            size_t m = 0;
            for (size_t k = 0; k < n; k++)
                if (!items[k].degenerate)
                    for (size_t r = 0; r < R; r++)
                        lr[m++] = log(ratio[((k * 2 + (size_t)p) * QMLA_N_CTRL + (size_t)c) * R + r]);
            if (bootstrap_gmean(lr, m, o->bootstrap, o->seed, &stats->gmean[c][p],
                                &stats->ci_lo[c][p], &stats->ci_hi[c][p],
                                &stats->median[c][p])) {
                st = qmla_error_set(err, QMLA_ENOMEM, "interventions: out of memory");
                goto out2;
            }
        }
    {
        const char *en = merging ? prov.engine : engines[0] ? engines : qmla_engine_name(o->engine);
        const char *ed = merging ? prov.device : qmla_engine_device(o->engine);
        st = write_iv(results_path, o, en, ed, qmla_capture_path(cap), sha, n, lay, cells, seq,
                      items, ratio, stats, err);
    }
    if (st == QMLA_OK && jopen) {
        qmla_jnl_close(&jf, 1);
        jopen = 0;
    }
out2:
    if (jopen)
        qmla_jnl_close(&jf, 0);
    free(ord);
    free(done);
out:
    if (ws)
        eng->ws_free(ws);
    qmla_layer_free(&layer);
    qmla_plan_free(&plan);
    free(lay);
    free(seq);
    free(cells);
    free(items);
    free(ratio);
    free(lr);
    return st;
}

int qmla_iv_begin(gsl_rng *rng, uint64_t seed, size_t reps, const qmla_response fin[2],
                  double yy, qmla_iv_item *out, double *ratio)
{
    gsl_rng_set(rng, (unsigned long)seed);
    for (size_t k = 0; k < 2 * QMLA_N_CTRL * reps; k++)
        ratio[k] = NAN;
    out->degenerate = fin[0].degenerate || fin[1].degenerate || yy == 0.0;
    return out->degenerate;
}

void qmla_iv_control(gsl_rng *rng, int c, const float *E0, float *E1, size_t T,
                     size_t width, double e0, size_t *perm)
{
    const size_t n = T * width;
    if (c == QMLA_CTRL_SIGN) {
        for (size_t i = 0; i < n; i++)
            E1[i] = (gsl_rng_get(rng) & 1u) ? E0[i] : -E0[i];
    } else if (c == QMLA_CTRL_PERMUTE) {
        for (size_t t = 0; t < T; t++)
            perm[t] = t;
        gsl_ran_shuffle(rng, perm, T, sizeof *perm);
        for (size_t t = 0; t < T; t++)
            memcpy(E1 + t * width, E0 + perm[t] * width, width * sizeof *E1);
    } else {
        double gg = 0.0;
        for (size_t i = 0; i < n; i++) {
            const double v = gsl_ran_gaussian_ziggurat(rng, 1.0);
            E1[i] = (float)v;
            gg += v * v;
        }
        const double s = e0 / sqrt(gg);
        for (size_t i = 0; i < n; i++)
            E1[i] = (float)((double)E1[i] * s);
    }
}

int qmla_op_path_direction(const qmla_sweep_params *p, int path, const float *C, const float *K,
                           size_t T, size_t dc, size_t dr, float *E, size_t *width, double *xx,
                           int *degen, qmla_error *err)
{
    const int content = path == QMLA_PATH_CONTENT;
    double nq, nc;
    *width = content ? dc : dr;
    return qmla_sweep_error_direction(p, content ? C : K, T, *width, E, xx, &nq, &nc, degen,
                                      err);
}

void qmla_iv_joint(qmla_iv_item *out, double oj, const qmla_response fin[2], double nmse)
{
    const double oc = fin[0].nmse_out, op = fin[1].nmse_out;
    out->r_joint = oj / nmse;
    out->cross = oj - oc - op;
    out->cross_rel = (oc + op) > 0 ? out->cross / (oc + op) : 0.0;
}
