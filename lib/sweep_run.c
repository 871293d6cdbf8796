/* sweep_run.c — the matched-NMSE sweep over a capture: item list from the
 * selection, resume from the journal or an existing results file, one
 * journal record per finished item, atomic results at the end
 * (include/qmla/sweep.h). */
#include "journal.h"
#include "qmla/results.h"
#include "qmla/sweep.h"
#include "qmla_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Finished responses, looked up by (layer, cell, seq, path). */
typedef struct done_set {
    qmla_response *r;
    size_t n, cap;
} done_set;

static int done_find(const done_set *d, int layer, const char *cell, int seq,
                     int path)
{
    for (size_t k = d->n; k-- > 0;) {
        const qmla_response *r = &d->r[k];
        if (r->layer == layer && r->seq == seq && r->path == path &&
            strcmp(r->cell, cell) == 0)
            return (int)k;
    }
    return -1;
}

static int done_add(done_set *d, const qmla_response *r, size_t n,
                    qmla_error *err)
{
    for (size_t k = 0; k < n; k++) {
        int at = done_find(d, r[k].layer, r[k].cell, r[k].seq, r[k].path);
        if (at >= 0) {
            d->r[at] = r[k];
            continue;
        }
        if (d->n == d->cap) {
            size_t cap = d->cap ? 2 * d->cap : 256;
            qmla_response *nr = realloc(d->r, cap * sizeof *nr);
            if (!nr)
                return qmla_error_set(err, QMLA_ENOMEM, "sweep: out of memory");
            d->r = nr;
            d->cap = cap;
        }
        d->r[d->n++] = r[k];
    }
    return QMLA_OK;
}

static void join_list(char *out, size_t len, const char *const *names,
                      const int *ints, size_t n)
{
    size_t o = 0;
    out[0] = '\0';
    if (n == 0) {
        snprintf(out, len, "all");
        return;
    }
    for (size_t k = 0; k < n && o + 2 < len; k++) {
        int w = names ? snprintf(out + o, len - o, "%s%s", k ? "," : "", names[k])
                      : snprintf(out + o, len - o, "%s%d", k ? "," : "", ints[k]);
        if (w < 0)
            break;
        o += (size_t)w;
    }
}

static int cell_wanted(const qmla_sweep_selection *sel, const char *name)
{
    if (!sel || !sel->cells)
        return 1;
    for (size_t k = 0; k < sel->n_cells; k++)
        if (strcmp(sel->cells[k], name) == 0)
            return 1;
    return 0;
}

static int file_exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

int qmla_sweep_run(qmla_capture *cap, const qmla_sweep_selection *sel,
                   const qmla_sweep_opts *opts, const char *results_path,
                   qmla_summary *summary, int *stopped, qmla_error *err)
{
    memset(summary, 0, sizeof *summary);
    *stopped = 0;
    const qmla_capture_config *cfg = qmla_capture_get_config(cap);
    const qmla_sweep_params *p = &opts->params;
    int st = QMLA_OK;
    if (!(p->nmse >= QMLA_NMSE_MIN && p->nmse <= QMLA_NMSE_MAX))
        return qmla_error_set(err, QMLA_EINVAL,
                              "target cache NMSE: expected %.3g (2^-30, the "
                              "float32 floor, sweep.h) .. %g, found %g",
                              QMLA_NMSE_MIN, QMLA_NMSE_MAX, p->nmse);
    if ((st = qmla_quant_check(&p->quant, (size_t)cfg->d_c, err)))
        return qmla_error_prefix(err, "content cache (d_c = %d): ", cfg->d_c);
    if ((st = qmla_quant_check(&p->quant, (size_t)cfg->d_r, err)))
        return qmla_error_prefix(err, "RoPE cache (d_r = %d): ", cfg->d_r);

    /* Resolve the selection against the capture. */
    const size_t NL = qmla_capture_n_layers(cap);
    char *use_layer = calloc(NL ? NL : 1, 1);
    if (!use_layer)
        return qmla_error_set(err, QMLA_ENOMEM, "sweep: out of memory");
    if (sel && sel->layers) {
        for (size_t k = 0; k < sel->n_layers; k++) {
            size_t li = 0;
            while (li < NL && qmla_capture_layer_index(cap, li) != sel->layers[k])
                li++;
            if (li == NL) {
                free(use_layer);
                return qmla_error_set(
                    err, QMLA_EINVAL,
                    "%s: layer %d requested but not in the capture (it holds "
                    "%zu layers, %d..%d)",
                    qmla_capture_path(cap), sel->layers[k], NL,
                    NL ? qmla_capture_layer_index(cap, 0) : 0,
                    NL ? qmla_capture_layer_index(cap, NL - 1) : 0);
            }
            use_layer[li] = 1;
        }
    } else {
        memset(use_layer, 1, NL);
    }
    if (sel && sel->cells) {
        for (size_t k = 0; k < sel->n_cells; k++) {
            int found = 0;
            for (size_t li = 0; li < NL && !found; li++)
                for (size_t ci = 0; ci < qmla_capture_n_cells(cap, li); ci++)
                    if (strcmp(qmla_capture_cell_name(cap, li, ci),
                               sel->cells[k]) == 0)
                        found = 1;
            if (!found) {
                free(use_layer);
                return qmla_error_set(err, QMLA_EINVAL,
                                      "%s: cell \"%s\" requested but not in "
                                      "the capture (first layer has \"%s\"...)",
                                      qmla_capture_path(cap), sel->cells[k],
                                      qmla_capture_cell_name(cap, 0, 0));
            }
        }
    }

    /* Results metadata and resume key. */
    qmla_results_meta meta;
    memset(&meta, 0, sizeof meta);
    const char *cpath = qmla_capture_path(cap);
    const char *base = strrchr(cpath, '/');
    snprintf(meta.capture_file, sizeof meta.capture_file, "%s",
             base ? base + 1 : cpath);
    snprintf(meta.capture_path, sizeof meta.capture_path, "%s", cpath);
    snprintf(meta.model, sizeof meta.model, "%s", cfg->model);
    meta.bits = p->quant.bits;
    meta.group = p->quant.group;
    snprintf(meta.meta, sizeof meta.meta, "%s",
             qmla_meta_name(p->quant.meta));
    meta.nmse = p->nmse;
    snprintf(meta.tool_version, sizeof meta.tool_version, "%s", QMLA_VERSION);
    join_list(meta.layers, sizeof meta.layers, NULL, sel ? sel->layers : NULL,
              sel && sel->layers ? sel->n_layers : 0);
    join_list(meta.cells, sizeof meta.cells, sel ? sel->cells : NULL, NULL,
              sel && sel->cells ? sel->n_cells : 0);
    if ((st = qmla_sha256_file(cpath, meta.capture_sha256, err))) {
        free(use_layer);
        return st;
    }
    char key[512];
    qmla_results_key(&meta, key, sizeof key);

    done_set done = {0};
    qmla_journal jr;
    memset(&jr, 0, sizeof jr);
    qmla_sweep_ws ws;
    memset(&ws, 0, sizeof ws);
    qmla_layer layer;
    memset(&layer, 0, sizeof layer);
    qmla_cell cell;
    memset(&cell, 0, sizeof cell);
    int journal_open = 0;

    /* An existing results file of the same key: its items count as done and
     * are kept (so a sweep can be extended layer by layer). */
    if (file_exists(results_path)) {
        qmla_results_meta old;
        qmla_response *rr = NULL;
        size_t nr = 0;
        qmla_error e2;
        int rs = qmla_results_read(results_path, &old, &rr, &nr, &e2);
        char okey[512];
        if (rs == QMLA_OK)
            qmla_results_key(&old, okey, sizeof okey);
        if (rs == QMLA_OK && strcmp(okey, key) == 0) {
            st = done_add(&done, rr, nr, err);
        } else if (!opts->force) {
            st = qmla_error_set(
                err, QMLA_EMISMATCH,
                "%s exists and holds %s (%s); refusing to overwrite it with a "
                "sweep of %s — use --force or another -o",
                results_path, rs == QMLA_OK ? "a sweep of other parameters"
                                            : "something unreadable",
                rs == QMLA_OK ? okey : e2.msg, key);
        }
        free(rr);
        if (st)
            goto done;
    }
    {
        char jpath[4096];
        snprintf(jpath, sizeof jpath, "%s.journal", results_path);
        qmla_response *jrecs = NULL;
        size_t nj = 0;
        if ((st = qmla_journal_open(&jr, jpath, key, opts->force, &jrecs, &nj,
                                    err)))
            goto done;
        journal_open = 1;
        st = done_add(&done, jrecs, nj, err);
        free(jrecs);
        if (st)
            goto done;
    }

    /* Count items. */
    size_t total = 0, resumed = 0, finished = 0;
    double worst_residual = 0.0;
    size_t Tmax = 0;
    for (size_t li = 0; li < NL; li++) {
        if (!use_layer[li])
            continue;
        for (size_t ci = 0; ci < qmla_capture_n_cells(cap, li); ci++) {
            const char *cname = qmla_capture_cell_name(cap, li, ci);
            if (!cell_wanted(sel, cname))
                continue;
            const size_t N = qmla_capture_cell_n(cap, li, ci);
            const size_t T = qmla_capture_cell_t(cap, li, ci);
            if (T > Tmax)
                Tmax = T;
            total += N;
            for (size_t s = 0; s < N; s++)
                if (done_find(&done, qmla_capture_layer_index(cap, li), cname,
                              (int)s, QMLA_PATH_CONTENT) >= 0 &&
                    done_find(&done, qmla_capture_layer_index(cap, li), cname,
                              (int)s, QMLA_PATH_ROPE) >= 0)
                    resumed++;
        }
    }
    if (total == 0) {
        st = qmla_error_set(err, QMLA_EINVAL,
                            "%s: the selection holds no (layer, cell) items",
                            cpath);
        goto done;
    }

    const qmla_mla_dims dims = {(size_t)cfg->H, (size_t)cfg->D, (size_t)cfg->d_c,
                                (size_t)cfg->d_n, (size_t)cfg->d_r,
                                (size_t)cfg->d_v, cfg->softmax_scale};
    qmla_attn_set_threads(opts->threads);
    {
        /* Refuse up front what cannot fit, rather than be killed mid-run. */
        const double need = qmla_sweep_ws_bytes(&dims, Tmax, opts->verify);
        const long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        const double have = pages > 0 && psz > 0 ? (double)pages * (double)psz : 0.0;
        if (resumed < total && have > 0.0 && need > 0.9 * have) {
            st = qmla_error_set(err, QMLA_ENOMEM,
                                "%s: the sweep workspace for T = %zu tokens and "
                                "H = %zu heads needs %.1f GiB (three H x T x T "
                                "attention arrays), this machine has %.1f GiB; "
                                "capture shorter sequences or use a larger machine",
                                cpath, Tmax, dims.H, need / 1073741824.0,
                                have / 1073741824.0);
            goto done;
        }
    }
    if (resumed < total &&
        (st = qmla_sweep_ws_alloc(&dims, Tmax, opts->verify, &ws, err)))
        goto done;
    finished = resumed;
    if (opts->progress && opts->progress(opts->progress_ctx, finished, total,
                                         resumed)) {
        *stopped = 1;
        goto done;
    }

    for (size_t li = 0; li < NL && resumed < total; li++) {
        if (!use_layer[li])
            continue;
        const int lidx = qmla_capture_layer_index(cap, li);
        int layer_loaded = 0;
        for (size_t ci = 0; ci < qmla_capture_n_cells(cap, li); ci++) {
            const char *cname = qmla_capture_cell_name(cap, li, ci);
            if (!cell_wanted(sel, cname))
                continue;
            const size_t N = qmla_capture_cell_n(cap, li, ci);
            int cell_loaded = 0;
            for (size_t s = 0; s < N; s++) {
                if (done_find(&done, lidx, cname, (int)s, QMLA_PATH_CONTENT) >= 0 &&
                    done_find(&done, lidx, cname, (int)s, QMLA_PATH_ROPE) >= 0)
                    continue;
                if (!layer_loaded) {
                    if ((st = qmla_capture_load_layer(cap, li, &layer, err)))
                        goto done;
                    layer_loaded = 1;
                }
                if (!cell_loaded) {
                    if ((st = qmla_capture_load_cell_parts(cap, li, ci, 0, &cell, err)))
                        goto done;
                    cell_loaded = 1;
                }
                const size_t T = cell.T, H = dims.H;
                const qmla_mla_weights w = {layer.w_uk, layer.w_uv, layer.w_o};
                qmla_response r[2];
                st = qmla_sweep_sequence(
                    p, &dims, T, &w, cell.q_nope + s * H * T * dims.d_n,
                    cell.q_rope + s * H * T * dims.d_r,
                    cell.c_kv + s * T * dims.d_c, cell.k_rope + s * T * dims.d_r,
                    opts->verify, &ws, r, err);
                if (st) {
                    qmla_error_prefix(err, "%s: /layers/%d/cells/%s sequence %zu: ",
                                      cpath, lidx, cname, s);
                    goto done;
                }
                for (int k = 0; k < 2; k++) {
                    if (!(r[k].route_residual <= worst_residual))
                        worst_residual = r[k].route_residual;
                    r[k].layer = lidx;
                    snprintf(r[k].cell, sizeof r[k].cell, "%s", cname);
                    r[k].seq = (int)s;
                }
                if ((st = qmla_journal_append(&jr, r, 2, err)) ||
                    (st = done_add(&done, r, 2, err)))
                    goto done;
                finished++;
                if (opts->progress &&
                    opts->progress(opts->progress_ctx, finished, total, resumed)) {
                    *stopped = 1;
                    goto done;
                }
            }
            if (cell_loaded)
                qmla_cell_free(&cell);
        }
        if (layer_loaded)
            qmla_layer_free(&layer);
    }

    if ((st = qmla_summary_compute(done.r, done.n, summary, err)))
        goto done;
    summary->worst_route_residual = worst_residual;
    if ((st = qmla_results_write(results_path, &meta, done.r, done.n, summary,
                                 err))) {
        qmla_summary_free(summary);
        goto done;
    }
    qmla_journal_close(&jr, 1);
    journal_open = 0;
done:
    if (journal_open)
        qmla_journal_close(&jr, 0);
    qmla_cell_free(&cell);
    qmla_layer_free(&layer);
    qmla_sweep_ws_free(&ws);
    free(done.r);
    free(use_layer);
    return st;
}
