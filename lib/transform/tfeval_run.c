/* tfeval_run.c — the eval driver (qmla/tfeval.h, `qmla eval`): every
 * transforms file on every selected (layer, cell) of a capture at one cache
 * configuration -> group /eval of a results file (docs/results-format.md),
 * with the per-layer and model means the command prints. */
#include "qmla/tfeval.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qmla/allocation.h"
#include "qmla/outpath.h"
#include "qmla/tmethod.h"
#include "transform/run.h"

/* room for a cell name (capture cell names are shorter) */
#define CELL_MAX 512

qmla_tf_eval_run_opts qmla_tf_eval_run_defaults(void)
{
    qmla_tf_eval_run_opts o;
    memset(&o, 0, sizeof o);
    o.policy = "none";
    o.threads = 1;
    return o;
}

int qmla_tf_eval_policy_parse(const char *s, size_t *sink, size_t *local)
{
    if (!strcmp(s, "none")) {
        *sink = *local = 0;
        return 0;
    }
    unsigned long a, b;
    char tail;
    if (sscanf(s, "sink%lu/local%lu%c", &a, &b, &tail) != 2 || a > 1000000 || b > 1000000)
        return -1;
    *sink = a;
    *local = b;
    return 0;
}

/* the rows' cell pointers into r->names (which moves as it grows) */
static void point_names(qmla_tf_eval_run_result *r)
{
    for (size_t i = 0; i < r->n_rows; i++)
        r->rows[i].cell = r->names + i * CELL_MAX;
}

void qmla_tf_eval_run_result_free(qmla_tf_eval_run_result *r)
{
    if (!r)
        return;
    free(r->rows);
    free(r->names);
    free(r->layer);
    free(r->layer_mean);
    memset(r, 0, sizeof *r);
}

int qmla_tf_eval_run(const char *capture, const char *out, const qmla_tf_eval_run_opts *o,
                     qmla_tf_eval_run_result *r, qmla_error *err)
{
    memset(r, 0, sizeof *r);
    const size_t n_tf = o->n_transforms;
    const char *config = o->config, *policy = o->policy ? o->policy : "none";
    if (!capture || !out)
        return qmla_refuse(&r->refusal, err, "expected a capture and an output file");
    if (!n_tf)
        return qmla_refuse(&r->refusal, err, "missing --transforms T.h5");
    if (n_tf > QMLA_TF_EVAL_MAX)
        return qmla_refuse(&r->refusal, err, "--transforms: at most %d files", QMLA_TF_EVAL_MAX);
    if (!config)
        return qmla_refuse(&r->refusal, err, "missing --config C4R4|C2R4");
    /* a per-layer configuration (qmla allocate) or one of the two */
    qmla_allocation alloc;
    memset(&alloc, 0, sizeof alloc);
    const int mixed = qmla_alloc_is_file(config);
    if (!mixed && strcmp(config, "C4R4") && strcmp(config, "C2R4"))
        return qmla_refuse(&r->refusal, err, "--config: expected C4R4, C2R4 or an allocation "
                           "file ALLOC.h5 (qmla allocate), found \"%s\"", config);
    size_t sink = 0, local = 0;
    if (qmla_tf_eval_policy_parse(policy, &sink, &local))
        return qmla_refuse(&r->refusal, err, "--policy: expected sinkS/localW (e.g. sink4/local128) or none, found \"%s\"",
                      policy);
    const char *inputs[QMLA_TF_EVAL_MAX + 1];
    inputs[0] = capture;
    for (size_t k = 0; k < n_tf; k++)
        inputs[k + 1] = o->transforms[k];
    if (qmla_output_path_check(out, "output file (-o)", inputs, n_tf + 1, err))
        return err->status;
    if (mixed && qmla_allocation_read(config, &alloc, err))
        return err->status;
    qmla_tf_eval_opts eo;
    eo.qc = qmla_quant_defaults();
    eo.qr = qmla_quant_defaults();
    eo.qc.bits = mixed ? alloc.c_bits[0] : config[1] - '0';
    eo.qr.bits = mixed ? alloc.r_bits[0] : config[3] - '0';
    eo.sink = sink;
    eo.local = local;
    qmla_exec ex = qmla_exec_cpu(o->threads);
    qmla_transform_file tf[QMLA_TF_EVAL_MAX];
    memset(tf, 0, sizeof tf);
    qmla_capture *cap = NULL;
    size_t cap_rows = 0, NL = 0;
    int st = QMLA_OK;
    r->n_tf = n_tf;
    for (size_t k = 0; k < n_tf; k++) {
        st = qmla_transform_file_read(o->transforms[k], &tf[k], err);
        if (st)
            goto done;
        /* label: the method's (qmla/tmethod.h); a repeated label gets #k */
        char base[40];
        const qmla_tmethod_type *mt = qmla_tmethod_of(tf[k].meta.method);
        mt->eval_label(&tf[k].meta, base, sizeof base);
        int dup = 0;
        for (size_t j = 0; j < k; j++)
            dup += !strncmp(r->label[j], base, strlen(base)) &&
                   (r->label[j][strlen(base)] == 0 || r->label[j][strlen(base)] == '#');
        if (dup)
            snprintf(r->label[k], sizeof r->label[k], "%s#%d", base, dup + 1);
        else
            snprintf(r->label[k], sizeof r->label[k], "%s", base);
    }
    st = qmla_capture_open(capture, &cap, err);
    if (st)
        goto done;
    r->opened = 1;
    NL = qmla_capture_n_layers(cap);
    r->layer = calloc(NL + 1, sizeof *r->layer);
    r->layer_mean = calloc((NL + 1) * n_tf, sizeof *r->layer_mean);
    if (!r->layer || !r->layer_mean) {
        st = qmla_refuse(&r->refusal, err, "out of memory");
        goto done;
    }
    double mean[QMLA_TF_EVAL_MAX] = {0};
    size_t n_mean = 0;
    for (size_t li = 0; li < NL; li++) {
        int layer = qmla_capture_layer_index(cap, li);
        if (!qmla_tf_layer_wanted(o->layers, o->n_layers, layer))
            continue;
        if (mixed) {
            const long ai = qmla_allocation_find(&alloc, layer);
            if (ai < 0) {
                st = qmla_refuse(&r->refusal, err, "%s has no configuration for layer %d", config,
                                 layer);
                goto done;
            }
            eo.qc.bits = alloc.c_bits[ai];
            eo.qr.bits = alloc.r_bits[ai];
        }
        double lay[QMLA_TF_EVAL_MAX] = {0};
        size_t nc = qmla_capture_n_cells(cap, li), used = 0;
        for (size_t ci = 0; ci < nc; ci++) {
            const char *cn = qmla_capture_cell_name(cap, li, ci);
            if (o->cells) {
                int want = 0;
                for (size_t k = 0; k < o->n_cells; k++)
                    want |= !strcmp(o->cells[k], cn);
                if (!want)
                    continue;
            }
            used++;
            for (size_t k = 0; k < n_tf; k++) {
                const float *g = NULL;
                const qmla_transform *t = qmla_transform_file_layer(&tf[k], layer, &g);
                if (!t) {
                    st = qmla_refuse(&r->refusal, err, "%s has no transform for layer %d", o->transforms[k], layer);
                    goto done;
                }
                if (r->n_rows == cap_rows) {
                    cap_rows = cap_rows ? 2 * cap_rows : 64;
                    qmla_tf_eval_rec *nr = realloc(r->rows, cap_rows * sizeof *r->rows);
                    if (nr)
                        r->rows = nr;
                    char *nn = realloc(r->names, cap_rows * CELL_MAX);
                    if (nn)
                        r->names = nn;
                    if (!nr || !nn) {
                        st = qmla_refuse(&r->refusal, err, "out of memory");
                        goto done;
                    }
                }
                qmla_tf_eval_rec *row = &r->rows[r->n_rows];
                row->method = r->label[k];
                row->transforms = o->transforms[k];
                row->layer = layer;
                row->cell = NULL;
                snprintf(r->names + r->n_rows * CELL_MAX, CELL_MAX, "%s", cn);
                st = qmla_engine_tfeval(o->engine)->cell(&ex, cap, li, ci, t, g, &eo,
                                                         &row->r, err);
                if (st)
                    goto done;
                r->n_rows++;
                lay[k] += row->r.nmse_out;
                if (!row->r.bound_ok)
                    r->bound_fail = 1;
            }
        }
        if (!used)
            continue;
        r->layer[r->n_layers_done] = layer;
        for (size_t k = 0; k < n_tf; k++) {
            lay[k] /= (double)used;
            mean[k] += lay[k];
            r->layer_mean[r->n_layers_done * n_tf + k] = lay[k];
        }
        r->n_layers_done++;
        n_mean++;
    }
    if (!r->n_rows) {
        st = qmla_refuse(&r->refusal, err, "no (layer, cell) selected");
        goto done;
    }
    for (size_t k = 0; k < n_tf; k++) {
        r->mean[k] = mean[k] / (double)n_mean;
        double a = 0, b = 0, c = 0, d = 0;
        size_t m = 0;
        for (size_t i = 0; i < r->n_rows; i++)
            if (r->rows[i].method == r->label[k]) {
                a += r->rows[i].r.nmse_c;
                b += r->rows[i].r.nmse_p;
                c += r->rows[i].r.pos_err;
                d += r->rows[i].r.bound_p;
                m++;
            }
        r->path_mean[k][0] = a / m;
        r->path_mean[k][1] = b / m;
        r->path_mean[k][2] = c / m;
        r->path_mean[k][3] = d / m;
    }
    r->computed = 1;
    point_names(r);
    st = qmla_tf_eval_write_engine(out, config, policy, o->command_line,
                                   o->engine, r->rows, r->n_rows, err);
    if (!st)
        r->wrote = 1;
done:
    qmla_allocation_free(&alloc);
    point_names(r);
    for (size_t k = 0; k < n_tf; k++)
        qmla_transform_file_free(&tf[k]);
    qmla_capture_close(cap);
    return st;
}
