/* sweep_run.c — the CPU driver of the matched-NMSE sweep over a capture
 * (include/qmla/sweep.h): the plan (sweep/plan.h) says what to compute; this
 * file restores what is done (results file, journal), computes the rest one
 * sequence at a time, journals each finished item, and writes the results
 * file atomically at the end. */
#include "sweep/journal_rows.h"
#include "qmla/outpath.h"
#include "qmla/part.h"
#include "sweep/plan.h"
#include "qmla/results.h"
#include "qmla/sweep.h"
#include "qmla_config.h"
#include "qmla_commit.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


/* Capture, parameters, cell set and run provenance; the layers attribute is
 * filled from the rows at the end. */
static int fill_meta(qmla_capture *cap, const qmla_plan *plan,
                     const qmla_sweep_opts *opts, qmla_results_meta *m,
                     qmla_error *err)
{
    const qmla_capture_config *cfg = qmla_capture_get_config(cap);
    const qmla_sweep_params *p = &opts->params;
    memset(m, 0, sizeof *m);
    const char *cpath = qmla_capture_path(cap);
    const char *base = strrchr(cpath, '/');
    snprintf(m->capture_file, sizeof m->capture_file, "%s", base ? base + 1 : cpath);
    snprintf(m->capture_path, sizeof m->capture_path, "%s", cpath);
    snprintf(m->model, sizeof m->model, "%s", cfg->model);
    m->H = cfg->H;
    m->D = cfg->D;
    m->d_c = cfg->d_c;
    m->d_n = cfg->d_n;
    m->d_r = cfg->d_r;
    m->d_v = cfg->d_v;
    m->softmax_scale = cfg->softmax_scale;
    snprintf(m->rope_pairing, sizeof m->rope_pairing, "%s",
             cfg->rope_pairing == QMLA_ROPE_HALF ? "half" : "interleaved");
    m->bits = p->quant.bits;
    m->group = p->quant.group;
    snprintf(m->meta, sizeof m->meta, "%s", qmla_meta_name(p->quant.meta));
    m->nmse = p->nmse;
    snprintf(m->tool_version, sizeof m->tool_version, "%s", QMLA_VERSION);
    snprintf(m->git_commit, sizeof m->git_commit, "%s", QMLA_GIT_COMMIT);
    snprintf(m->engine, sizeof m->engine, "%s", qmla_engine_name(opts->engine));
    {
        const char *dev = qmla_engine_device(opts->engine);
        snprintf(m->engine_device, sizeof m->engine_device, "%s", dev ? dev : "");
    }
    snprintf(m->command_line, sizeof m->command_line, "%s",
             opts->command_line ? opts->command_line : "");
    const time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(m->created_utc, sizeof m->created_utc, "%Y-%m-%dT%H:%M:%SZ", &tm);
    /* the cell set, with each cell's provenance from its first layer */
    size_t o = 0;
    for (size_t k = 0; k < plan->n_cells; k++) {
        const int w = snprintf(m->cells + o, sizeof m->cells - o, "%s%s",
                               k ? "," : "", plan->cells[k]);
        if (w < 0 || (size_t)w >= sizeof m->cells - o)
            return qmla_error_set(err, QMLA_EINVAL,
                                  "%s: the cell set's names exceed %zu bytes",
                                  cpath, sizeof m->cells - 1);
        o += (size_t)w;
    }
    m->cell_info = calloc(plan->n_cells ? plan->n_cells : 1, sizeof *m->cell_info);
    if (!m->cell_info)
        return qmla_error_set(err, QMLA_ENOMEM, "sweep: out of memory");
    m->n_cell_info = plan->n_cells;
    for (size_t k = 0; k < plan->n_cells; k++) {
        qmla_results_cell *c = &m->cell_info[k];
        snprintf(c->name, sizeof c->name, "%s", plan->cells[k]);
        for (size_t li = 0; li < plan->n_layers; li++) {
            size_t ci;
            if (!qmla_capture_find_cell(cap, li, plan->cells[k], &ci))
                continue;
            qmla_capture_cell_attrs(cap, li, ci, c->dataset, sizeof c->dataset,
                                    &c->seed);
            c->N = (long)qmla_capture_cell_n(cap, li, ci);
            c->T = (long)qmla_capture_cell_t(cap, li, ci);
            break;
        }
    }
    return qmla_sha256_file(cpath, m->capture_sha256, err);
}

static int file_exists(const char *p)
{
    struct stat sb;
    return lstat(p, &sb) == 0;
}

/* Rows of an existing results file of the same key count as done. */
static int restore_results(const char *path, const char *key, int force,
                           qmla_plan *plan, qmla_results_meta *meta, char *engines,
                           size_t elen, qmla_error *err)
{
    if (!file_exists(path))
        return QMLA_OK;
    qmla_results_meta old;
    qmla_response *rr = NULL;
    size_t nr = 0;
    qmla_error e2;
    qmla_error_clear(&e2);
    int st = QMLA_OK;
    const int rs = qmla_results_read(path, &old, &rr, &nr, &e2);
    char okey[8192];
    if (rs == QMLA_OK)
        qmla_results_key(&old, okey, sizeof okey);
    if (rs == QMLA_OK && strcmp(okey, key) == 0) {
        st = qmla_plan_add(plan, rr, nr, path, err);
        if (nr)
            qmla_jnl_engines_add(engines, elen, old.engine);
        /* the groups other commands added stay with the rows they describe */
        snprintf(meta->keep_groups_from, sizeof meta->keep_groups_from, "%s", path);
    }
    else if (!force)
        st = qmla_error_set(
            err, QMLA_EMISMATCH,
            "%s exists and holds %s (%s); refusing to overwrite it with a "
            "sweep of %s — use --force to discard it, or another -o",
            path, rs == QMLA_OK ? "a sweep of other parameters or another cell set"
                                : "something unreadable",
            rs == QMLA_OK ? okey : e2.msg, key);
    free(rr);
    qmla_results_meta_free(&old);
    return st;
}

/* Refuse up front a workspace that cannot fit, rather than be killed. */
static int check_memory(const qmla_sweep_ops *eng, const qmla_mla_dims *d,
                        const qmla_plan *plan, int verify, const char *cpath,
                        qmla_error *err)
{
    const double need = eng->ws_bytes(d, plan->T_max, verify);
    const long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    const double have = pages > 0 && psz > 0 ? (double)pages * (double)psz : 0.0;
    if (have > 0.0 && need > 0.9 * have)
        return qmla_error_set(err, QMLA_ENOMEM,
                              "%s: the sweep workspace for T = %zu tokens and "
                              "H = %zu heads needs %.1f GiB (three H x T x T "
                              "attention arrays), this machine has %.1f GiB; "
                              "capture shorter sequences or use a larger machine",
                              cpath, plan->T_max, d->H, need / 1073741824.0,
                              have / 1073741824.0);
    return QMLA_OK;
}

/* Compute every wanted item not yet done, journaling each; the per-sequence
 * work and its workspace go through the engine (qmla/engine.h). */
static int compute_pending(qmla_capture *cap, qmla_plan *plan,
                           const qmla_sweep_opts *opts, const qmla_mla_dims *d,
                           qmla_journal *jr, int *stopped, qmla_error *err)
{
    const char *cpath = qmla_capture_path(cap);
    const size_t resumed = plan->n_wanted_done;
    int st = QMLA_OK;
    const qmla_sweep_ops *eng = qmla_engine_sweep(opts->engine);
    void *ws = NULL;
    qmla_layer layer;
    qmla_cell cell;
    memset(&layer, 0, sizeof layer);
    memset(&cell, 0, sizeof cell);
    size_t cur_li = SIZE_MAX, cur_ci = SIZE_MAX;
    const qmla_exec ex = qmla_exec_cpu(opts->threads);
    if (opts->progress &&
        opts->progress(opts->progress_ctx, plan->n_wanted_done, plan->n_wanted, resumed)) {
        *stopped = 1;
        return QMLA_OK;
    }
    if (plan->n_wanted_done == plan->n_wanted)
        return QMLA_OK;
    if ((st = check_memory(eng, d, plan, opts->verify, cpath, err)) ||
        (st = eng->ws_alloc(d, plan->T_max, opts->verify, &ws, err)))
        return st;
    for (size_t k = 0; k < plan->n_items; k++) {
        if (!plan->wanted[k] || qmla_plan_item_done(plan, k))
            continue;
        const qmla_plan_item *it = &plan->items[k];
        if (it->li != cur_li) {
            qmla_layer_free(&layer);
            qmla_cell_free(&cell);
            cur_ci = SIZE_MAX;
            if ((st = qmla_capture_load_layer(cap, it->li, &layer, err)))
                break;
            cur_li = it->li;
            if (eng->layer_begin)
                eng->layer_begin(ws);
        }
        if (it->ci != cur_ci) {
            qmla_cell_free(&cell);
            if ((st = qmla_capture_load_cell_parts(cap, it->li, it->ci, 0, &cell, err)))
                break;
            cur_ci = it->ci;
        }
        const size_t T = cell.T, H = d->H, s = it->seq;
        const qmla_mla_weights w = {layer.w_uk, layer.w_uv, layer.w_o};
        qmla_response r[2];
        st = eng->sequence(&ex, &opts->params, d, T, &w,
                           cell.q_nope + s * H * T * d->d_n,
                           cell.q_rope + s * H * T * d->d_r,
                           cell.c_kv + s * T * d->d_c,
                           cell.k_rope + s * T * d->d_r, opts->verify, ws, r, err);
        if (st) {
            qmla_error_prefix(err, "%s: /layers/%d/cells/%s sequence %zu: ", cpath,
                              it->layer, cell.name, s);
            break;
        }
        for (int p = 0; p < 2; p++) {
            r[p].layer = it->layer;
            snprintf(r[p].cell, sizeof r[p].cell, "%s", cell.name);
            r[p].seq = (int)s;
        }
        if ((st = qmla_journal_append(jr, r, 2, err)) ||
            (st = qmla_plan_add(plan, r, 2, "sweep", err)))
            break;
        if (opts->progress && opts->progress(opts->progress_ctx, plan->n_wanted_done,
                                             plan->n_wanted, resumed)) {
            *stopped = 1;
            break;
        }
    }
    qmla_cell_free(&cell);
    qmla_layer_free(&layer);
    eng->ws_free(ws);
    return st;
}

/* Rows of the replayed files (read only) count as done; files of another
 * key are skipped. */
static int replay_files(const qmla_sweep_opts *opts, const char *key,
                        qmla_plan *plan, char *engines, size_t elen, qmla_error *err)
{
    for (size_t k = 0; k < opts->n_replay; k++) {
        const char *f = opts->replay[k];
        const size_t len = strlen(f);
        qmla_response *r = NULL;
        size_t n = 0;
        qmla_error e2;
        qmla_error_clear(&e2);
        int rs;
        char fe[64] = "";
        if (len > 8 && !strcmp(f + len - 8, ".journal"))
            rs = qmla_journal_read_engines(f, key, &r, &n, fe, sizeof fe, &e2);
        else {
            qmla_results_meta m;
            char okey[8192];
            rs = qmla_results_read(f, &m, &r, &n, &e2);
            if (rs == QMLA_OK) {
                qmla_results_key(&m, okey, sizeof okey);
                snprintf(fe, sizeof fe, "%s", m.engine);
                qmla_results_meta_free(&m);
                if (strcmp(okey, key) != 0)
                    rs = QMLA_EMISMATCH;
            }
        }
        if (rs == QMLA_OK && n)
            qmla_jnl_engines_add(engines, elen, fe);
        const int st = rs == QMLA_OK ? qmla_plan_add(plan, r, n, f, err) : QMLA_OK;
        free(r);
        if (st)
            return st;
    }
    return QMLA_OK;
}

/* The plan's (layer, cell) slots for a part file (qmla/part.h). */
static int part_info(qmla_capture *cap, const qmla_plan *plan,
                     const qmla_sweep_selection *sel, const qmla_sweep_opts *o,
                     qmla_part_info *pi, qmla_error *err)
{
    memset(pi, 0, sizeof *pi);
    pi->slots = calloc(plan->n_layers * plan->n_cells + 1, sizeof *pi->slots);
    if (!pi->slots)
        return qmla_error_set(err, QMLA_ENOMEM, "sweep: out of memory");
    pi->shard = o->shard;
    pi->n_shards = o->n_shards;
    pi->balance = o->balance;
    for (size_t li = 0; li < plan->n_layers; li++)
        for (size_t c = 0; c < plan->n_cells; c++) {
            const size_t first = plan->first_item[li * plan->n_cells + c];
            if (first == SIZE_MAX)
                continue;
            const qmla_plan_item *it = &plan->items[first];
            int selected = !sel || !sel->layers;
            for (size_t q = 0; !selected && q < sel->n_layers; q++)
                selected = sel->layers[q] == it->layer;
            pi->slots[pi->n_slots++] = (qmla_part_slot){
                it->layer, (int)c, (long long)plan->n_seq[li * plan->n_cells + c],
                (long long)qmla_capture_cell_t(cap, it->li, it->ci), selected};
        }
    return QMLA_OK;
}

/* Summary of every row (a part: of the shard's rows), and the results (or
 * part) file. */
static int finish(qmla_capture *cap, const qmla_sweep_selection *sel,
                  const qmla_sweep_opts *opts, const char *results_path,
                  const qmla_plan *plan, qmla_results_meta *meta,
                  qmla_summary *summary, qmla_error *err)
{
    qmla_response *rows = NULL;
    size_t n = 0;
    const int part = opts->n_shards > 1;
    int st = qmla_plan_rows(plan, &rows, &n, err);
    if (!st && part) { /* only the shard's own rows */
        n = 0;
        for (size_t k = 0; k < 2 * plan->n_items; k++)
            if (plan->have[k] && plan->wanted[k / 2])
                rows[n++] = plan->rows[k];
    }
    if (!st)
        st = qmla_summary_compute(rows, n, summary, err);
    if (!st) {
        if (part) {
            qmla_part_info pi;
            st = part_info(cap, plan, sel, opts, &pi, err);
            if (!st)
                st = qmla_part_write(results_path, meta, rows, n, summary, &pi, err);
            qmla_part_info_free(&pi);
        } else
            st = qmla_results_write(results_path, meta, rows, n, summary, err);
        if (st)
            qmla_summary_free(summary);
    }
    free(rows);
    return st;
}

int qmla_sweep_run(qmla_capture *cap, const qmla_sweep_selection *sel,
                   const qmla_sweep_opts *opts, const char *results_path,
                   qmla_summary *summary, int *stopped, qmla_error *err)
{
    memset(summary, 0, sizeof *summary);
    *stopped = 0;
    const qmla_capture_config *cfg = qmla_capture_get_config(cap);
    const qmla_sweep_params *p = &opts->params;
    int st = qmla_sweep_params_check(p, cfg, err);
    if (st)
        return st;
    /* never write over the capture, a device, a FIFO or a directory */
    {
        const char *in = qmla_capture_path(cap);
        char jp[4096];
        snprintf(jp, sizeof jp, "%s.journal", results_path);
        if ((st = qmla_output_path_check(results_path, "results file", &in, 1, err)) ||
            (st = qmla_output_path_check(jp, "journal", &in, 1, err)))
            return st;
    }
    const qmla_plan_selection psel = {sel ? sel->layers : NULL,
                                      sel ? sel->n_layers : 0,
                                      sel ? sel->cells : NULL,
                                      sel ? sel->n_cells : 0, opts->shard,
                                      opts->n_shards, opts->balance};
    if (opts->n_shards > 1 && opts->shard >= opts->n_shards)
        return qmla_error_set(err, QMLA_EINVAL, "sweep: shard %zu of %zu: expected "
                              "a shard below %zu", opts->shard, opts->n_shards,
                              opts->n_shards);
    qmla_plan plan;
    if ((st = qmla_plan_build(cap, &psel, &plan, err)))
        return st;
    qmla_results_meta meta;
    qmla_journal jr;
    memset(&jr, 0, sizeof jr);
    int journal_open = 0;
    char key[8192], jpath[4096];
    char engines[64] = ""; /* of the rows restored or replayed (journal.h) */
    if ((st = fill_meta(cap, &plan, opts, &meta, err)))
        goto done;
    qmla_results_key(&meta, key, sizeof key);
    if ((!opts->force && opts->n_shards > 1 &&
         (st = qmla_part_check_target(results_path, opts->shard, opts->n_shards, err))) ||
        (st = restore_results(results_path, key, opts->force, &plan, &meta, engines,
                              sizeof engines, err)))
        goto done;
    {
        snprintf(jpath, sizeof jpath, "%s.journal", results_path);
        qmla_response *jrecs = NULL;
        size_t nj = 0;
        if ((st = qmla_journal_open(&jr, jpath, key, opts->force, &jrecs, &nj, err)))
            goto done;
        journal_open = 1;
        qmla_jnl_engines_add(engines, sizeof engines, jr.j.engines);
        st = qmla_plan_add(&plan, jrecs, nj, jpath, err);
        free(jrecs);
        if (st || (st = replay_files(opts, key, &plan, engines, sizeof engines, err)) ||
            (st = qmla_jnl_engine(&jr.j, meta.engine, qmla_engine_mode(opts->engine), err)))
            goto done;
    }
    const qmla_mla_dims dims = {(size_t)cfg->H, (size_t)cfg->D, (size_t)cfg->d_c,
                                (size_t)cfg->d_n, (size_t)cfg->d_r,
                                (size_t)cfg->d_v, cfg->softmax_scale};
    if ((st = compute_pending(cap, &plan, opts, &dims, &jr, stopped, err)) || *stopped)
        goto done;
    /* rows another engine computed (a resume across engines): the results
     * file names every engine of its rows ("cuda+cpu"), so a merge refuses
     * it beside one engine's parts */
    qmla_jnl_engines_add(engines, sizeof engines, jr.j.engines);
    if (engines[0] && strcmp(engines, meta.engine) != 0)
        snprintf(meta.engine, sizeof meta.engine, "%s", engines);
    if ((st = finish(cap, sel, opts, results_path, &plan, &meta, summary, err)))
        goto done;
    qmla_journal_close(&jr, 1);
    journal_open = 0;
done:
    if (journal_open)
        qmla_journal_close(&jr, 0);
    qmla_results_meta_free(&meta);
    qmla_plan_free(&plan);
    return st;
}
