/* results.c — qmla-results v1 writer and reader (include/qmla/results.h,
 * docs/results-format.md). The /responses columns come from the row table
 * (include/qmla/response.h); the file is built in memory and saved
 * atomically (lib/io/h5util.c). */
#include "qmla/results.h"
#include "qmla_config.h"
#include "io/group.h"
#include "io/h5util.h"
#include "qmla/table.h"

#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void qmla_results_meta_free(qmla_results_meta *m)
{
    if (!m)
        return;
    free(m->cell_info);
    m->cell_info = NULL;
    m->n_cell_info = 0;
}

/* Shortest decimal that reads back as exactly x (readable and exact). */
static void shortest_double(double x, char *buf, size_t len)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            return;
    }
}

void qmla_results_key(const qmla_results_meta *m, char *key, size_t len)
{
    char nu[40];
    shortest_double(m->nmse, nu, sizeof nu);
    snprintf(key, len, "sha256=%s bits=%d group=%d meta=%s nmse=%s cells=%s",
             m->capture_sha256, m->bits, m->group, m->meta, nu, m->cells);
}

/* "0-3,7" from sorted distinct ints. */
static void format_ranges(const int *v, size_t n, char *out, size_t len)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t k = 0; k < n && o + 1 < len;) {
        size_t j = k;
        while (j + 1 < n && v[j + 1] == v[j] + 1)
            j++;
        int w = j > k ? snprintf(out + o, len - o, "%s%d-%d", o ? "," : "", v[k], v[j])
                      : snprintf(out + o, len - o, "%s%d", o ? "," : "", v[k]);
        if (w < 0)
            break;
        o += (size_t)w;
        k = j + 1;
    }
}

/* ---- writer ---------------------------------------------------------------- */


/* /responses from the row table. */
static int write_responses(hid_t g, const char *path, qmla_response *r,
                           size_t n, qmla_error *err)
{
    int st = QMLA_OK;
    const size_t m = n ? n : 1;
    int *iv = malloc(m * sizeof *iv);
    double *dv = malloc(m * sizeof *dv);
    uint8_t *u8 = malloc(m);
    const char **sv = malloc(m * sizeof *sv);
    if (!iv || !dv || !u8 || !sv) {
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    for (size_t k = 0; k < qmla_response_n_columns; k++) {
        const qmla_column *c = &qmla_response_columns[k];
        int rc = 0;
        switch (c->kind) {
        case QMLA_COL_INT:
            for (size_t i = 0; i < n; i++)
                iv[i] = *qmla_col_int(&r[i], c);
            rc = qmla_h5_dset_1d(g, c->name, H5T_STD_I32LE, H5T_NATIVE_INT, n,
                                 iv, c->description, c->units);
            break;
        case QMLA_COL_FLAG:
            for (size_t i = 0; i < n; i++)
                u8[i] = (uint8_t)(*qmla_col_int(&r[i], c) != 0);
            rc = qmla_h5_dset_1d(g, c->name, H5T_STD_U8LE, H5T_NATIVE_UINT8, n,
                                 u8, c->description, c->units);
            break;
        case QMLA_COL_REAL:
            for (size_t i = 0; i < n; i++)
                dv[i] = *qmla_col_real(&r[i], c);
            rc = qmla_h5_dset_1d(g, c->name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
                                 n, dv, c->description, c->units);
            break;
        case QMLA_COL_PATH:
            for (size_t i = 0; i < n; i++)
                sv[i] = qmla_path_name(*qmla_col_int(&r[i], c));
            rc = qmla_h5_dset_strs(g, c->name, n, sv, c->description);
            break;
        case QMLA_COL_STR:
            for (size_t i = 0; i < n; i++)
                sv[i] = qmla_col_str(&r[i], c);
            rc = qmla_h5_dset_strs(g, c->name, n, sv, c->description);
            break;
        }
        if (rc < 0) {
            st = qmla_error_set(err, QMLA_EIO, "%s: cannot write /responses/%s",
                                path, c->name);
            goto done;
        }
    }
done:
    free(iv);
    free(dv);
    free(u8);
    free(sv);
    return st;
}

/* One 1-D dataset of a group: storage kind, data, description, units. */
typedef enum { DS_I32, DS_I64, DS_U8, DS_F64, DS_STR } ds_kind;
typedef struct ds_spec {
    const char *name;
    ds_kind kind;
    const void *data; /* int / long long / uint8_t / double / const char * */
    const char *description, *units;
} ds_spec;

/* Create group `name` of f holding n-row datasets; 0 or QMLA_EIO. */
static int write_group(hid_t f, const char *path, const char *name, size_t n,
                       const ds_spec *spec, size_t nspec, hid_t *gout,
                       qmla_error *err)
{
    hid_t g = H5Gcreate2(f, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0)
        return qmla_error_set(err, QMLA_EIO, "%s: cannot write group /%s", path, name);
    for (size_t k = 0; k < nspec; k++) {
        const ds_spec *d = &spec[k];
        static const struct { hid_t *file, *mem; } types[] = {
            [DS_I32] = {&H5T_STD_I32LE_g, &H5T_NATIVE_INT_g},
            [DS_I64] = {&H5T_STD_I64LE_g, &H5T_NATIVE_LLONG_g},
            [DS_U8] = {&H5T_STD_U8LE_g, &H5T_NATIVE_UINT8_g},
            [DS_F64] = {&H5T_IEEE_F64LE_g, &H5T_NATIVE_DOUBLE_g}};
        const int rc = d->kind == DS_STR
                           ? qmla_h5_dset_strs(g, d->name, n, d->data, d->description)
                           : qmla_h5_dset_1d(g, d->name, *types[d->kind].file,
                                             *types[d->kind].mem, n, d->data,
                                             d->description, d->units);
        if (rc < 0) {
            H5Gclose(g);
            return qmla_error_set(err, QMLA_EIO, "%s: cannot write /%s/%s", path,
                                  name, d->name);
        }
    }
    if (gout) {
        *gout = g;
        return QMLA_OK;
    }
    return H5Gclose(g) < 0 ? qmla_error_set(err, QMLA_EIO, "%s: cannot close /%s",
                                            path, name)
                           : QMLA_OK;
}

static int write_cells(hid_t f, const char *path, const qmla_results_meta *m,
                       qmla_error *err)
{
    int st = QMLA_OK;
    const size_t n = m->n_cell_info, c = n ? n : 1;
    const char **names = malloc(c * sizeof *names), **ds = malloc(c * sizeof *ds);
    long long *seed = malloc(c * sizeof *seed), *N = malloc(c * sizeof *N),
              *T = malloc(c * sizeof *T);
    if (!names || !ds || !seed || !N || !T) {
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
    } else {
        for (size_t k = 0; k < n; k++) {
            names[k] = m->cell_info[k].name;
            ds[k] = m->cell_info[k].dataset;
            seed[k] = m->cell_info[k].seed;
            N[k] = m->cell_info[k].N;
            T[k] = m->cell_info[k].T;
        }
        const ds_spec spec[] = {
            {"name", DS_STR, names, "cell name as captured", NULL},
            {"dataset", DS_STR, ds,
             "corpus the cell's text was drawn from (capture attribute)", NULL},
            {"seed", DS_I64, seed, "sampling seed of the cell (capture attribute)", NULL},
            {"n_sequences", DS_I64, N, "sequences in the cell (N)", NULL},
            {"n_tokens", DS_I64, T, "tokens per sequence (T)", "tokens"}};
        st = write_group(f, path, "cells", n, spec, sizeof spec / sizeof spec[0],
                         NULL, err);
    }
    free(names);
    free(ds);
    free(seed);
    free(N);
    free(T);
    return st;
}

static int write_summary(hid_t f, const char *path, const qmla_summary *s,
                         qmla_error *err)
{
    const size_t n = s->n_layers;
    uint8_t *deg = malloc(n ? n : 1);
    double *nan = malloc((n ? n : 1) * sizeof *nan); /* a summary without dispersion */
    hid_t g = -1;
    if (!deg || !nan) {
        free(deg);
        free(nan);
        return qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
    }
    for (size_t k = 0; k < n; k++) {
        deg[k] = (uint8_t)(s->degenerate[k] != 0);
        nan[k] = NAN;
    }
#define OR_NAN(x) ((x) ? (const void *)(x) : (const void *)nan)
    const ds_spec spec[] = {
        {"layer", DS_I32, s->layer, "layer index", NULL},
        {"response_content", DS_F64, s->response_content,
         "content response R_C: mean over cells of the mean over non-degenerate "
         "sequences (NaN when the layer has none)", "1"},
        {"response_rope", DS_F64, s->response_rope,
         "RoPE response R_P: mean over cells of the mean over non-degenerate "
         "sequences (NaN when the layer has none)", "1"},
        {"ratio", DS_F64, s->ratio,
         "R_P / R_C of the layer (NaN for a degenerate layer)", "1"},
        {"degenerate", DS_U8, deg,
         "1: a path of this layer has no non-degenerate item; the layer is left "
         "out of the model means", NULL},
        /* dispersion (docs/math.md §3.1); NaN where a cell entering the mean
         * holds fewer than two non-degenerate sequences */
        {"response_content_se", DS_F64, OR_NAN(s->response_content_se),
         "standard error of response_content: sqrt(sum over cells of s_k^2/n_k) / K, "
         "s_k the sd of the cell's n_k non-degenerate sequences (NaN when a cell has "
         "fewer than two)", "1"},
        {"response_content_lo", DS_F64, OR_NAN(s->response_content_lo),
         "response_content: 2.5 % quantile of the bootstrap over sequences within cells "
         "(95 % interval; NaN as response_content_se)", "1"},
        {"response_content_hi", DS_F64, OR_NAN(s->response_content_hi),
         "response_content: 97.5 % quantile of the bootstrap over sequences within cells",
         "1"},
        {"response_rope_se", DS_F64, OR_NAN(s->response_rope_se),
         "standard error of response_rope (as response_content_se)", "1"},
        {"response_rope_lo", DS_F64, OR_NAN(s->response_rope_lo),
         "response_rope: 2.5 % bootstrap quantile (95 % interval)", "1"},
        {"response_rope_hi", DS_F64, OR_NAN(s->response_rope_hi),
         "response_rope: 97.5 % bootstrap quantile", "1"},
        {"ratio_se", DS_F64, OR_NAN(s->ratio_se),
         "standard error of ratio: sd of its bootstrap replicates", "1"},
        {"ratio_lo", DS_F64, OR_NAN(s->ratio_lo), "ratio: 2.5 % bootstrap quantile (95 % interval)",
         "1"},
        {"ratio_hi", DS_F64, OR_NAN(s->ratio_hi), "ratio: 97.5 % bootstrap quantile", "1"}};
#undef OR_NAN
    int st = write_group(f, path, "summary", n, spec, sizeof spec / sizeof spec[0],
                         &g, err);
    free(deg);
    free(nan);
    if (st)
        return st;
    const struct { const char *name; double v; int is_int; } attrs[] = {
        {"model_response_content", s->model_response_content, 0},
        {"model_response_rope", s->model_response_rope, 0},
        {"model_ratio", s->model_ratio, 0},
        {"n_layers_in_model", (double)s->n_layers_in_model, 1},
        {"n_degenerate", (double)s->n_degenerate, 1},
        {"n_verified", (double)s->n_verified, 1},
        {"worst_route_residual", s->worst_route_residual, 0},
        /* dispersion of the model-level numbers (docs/math.md §3.1) */
        {"model_response_content_se", s->model_response_content_se, 0},
        {"model_response_content_lo", s->model_response_content_lo, 0},
        {"model_response_content_hi", s->model_response_content_hi, 0},
        {"model_response_rope_se", s->model_response_rope_se, 0},
        {"model_response_rope_lo", s->model_response_rope_lo, 0},
        {"model_response_rope_hi", s->model_response_rope_hi, 0},
        {"model_ratio_se", s->model_ratio_se, 0},
        {"model_ratio_lo", s->model_ratio_lo, 0},
        {"model_ratio_hi", s->model_ratio_hi, 0},
        {"bootstrap_replicates", (double)s->bootstrap_replicates, 1},
        {"bootstrap_seed", (double)s->bootstrap_seed, 1}};
    for (size_t k = 0; k < sizeof attrs / sizeof attrs[0] && !st; k++)
        if ((attrs[k].is_int ? qmla_h5_attr_int(g, attrs[k].name, (long long)attrs[k].v)
                             : qmla_h5_attr_dbl(g, attrs[k].name, attrs[k].v)) < 0)
            st = qmla_error_set(err, QMLA_EIO, "%s: cannot write /summary attribute %s",
                                path, attrs[k].name);
    if (H5Gclose(g) < 0 && !st)
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot close /summary", path);
    return st;
}

/* Copy the root groups of `from` that this writer does not make (what other
 * commands added to the file) into f; not /part. */
static int carry_groups(hid_t f, const char *path, const char *from,
                        qmla_error *err)
{
    if (!from || !from[0])
        return QMLA_OK;
    hid_t src = H5Fopen(from, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (src < 0)
        return qmla_error_set(err, QMLA_EIO, "%s: cannot reopen to keep its other "
                              "groups", from);
    int st = QMLA_OK;
    H5G_info_t gi;
    if (H5Gget_info(src, &gi) < 0)
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot list its groups", from);
    for (hsize_t k = 0; !st && k < gi.nlinks; k++) {
        char name[256];
        if (H5Lget_name_by_idx(src, ".", H5_INDEX_NAME, H5_ITER_INC, k, name,
                               sizeof name, H5P_DEFAULT) < 0) {
            st = qmla_error_set(err, QMLA_EIO, "%s: cannot read link %llu", from,
                                (unsigned long long)k);
            break;
        }
        /* /part describes the rows of one shard: a full results file
         * written over a part does not keep it (a part's writer,
         * qmla_part_write, adds its own) */
        if (!strcmp(name, "responses") || !strcmp(name, "summary") ||
            !strcmp(name, "cells") || !strcmp(name, "part"))
            continue;
        if (H5Ocopy(src, name, f, name, H5P_DEFAULT, H5P_DEFAULT) < 0)
            st = qmla_error_set(err, QMLA_EIO, "%s: cannot carry /%s of %s into "
                                "the new file", path, name, from);
    }
    if (H5Fclose(src) < 0 && !st)
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot close", from);
    return st;
}

int qmla_results_write(const char *path, const qmla_results_meta *m,
                       const qmla_response *r_in, size_t n,
                       const qmla_summary *s, qmla_error *err)
{
    int st = QMLA_OK;
    qmla_response *r = NULL;
    hid_t g = -1;
    qmla_h5_out o;

    r = malloc((n ? n : 1) * sizeof *r);
    if (!r)
        return qmla_error_set(err, QMLA_ENOMEM, "results: out of memory");
    memcpy(r, r_in, n * sizeof *r);
    qmla_responses_sort(r, n);

    if ((st = qmla_h5_out_file(&o, path, err))) {
        free(r);
        return st;
    }
    const hid_t f = o.f;
    QMLA_H5_TRY(qmla_h5_attr_str(f, "format", QMLA_RESULTS_FORMAT), "attribute format");
    QMLA_H5_TRY(qmla_h5_attr_int(f, "format_version", QMLA_RESULTS_VERSION),
        "attribute format_version");
    {
        const qmla_prov_input in[] = {{"capture_file", m->capture_file},
                                      {"capture_path", m->capture_path},
                                      {"capture_sha256", m->capture_sha256}};
        const qmla_prov p = {.tool = "qmla sweep", .command_line = m->command_line,
                             .created_utc = m->created_utc, .tool_version = m->tool_version,
                             .git_commit = m->git_commit,
                             .engine = m->engine[0] ? m->engine : NULL,
                             .engine_device = m->engine_device, .inputs = in,
                             .n_inputs = 3};
        if ((st = qmla_h5_prov(f, &p, path, err)))
            goto out;
    }
    QMLA_H5_TRY(qmla_h5_attr_str(f, "model", m->model), "attribute model");
    {
        const struct { const char *name; int v; } shape[] = {
            {"n_heads", m->H}, {"hidden_size", m->D}, {"d_c", m->d_c},
            {"d_n", m->d_n}, {"d_r", m->d_r}, {"d_v", m->d_v}};
        for (size_t k = 0; k < sizeof shape / sizeof shape[0]; k++)
            QMLA_H5_TRY(qmla_h5_attr_int(f, shape[k].name, shape[k].v), shape[k].name);
    }
    QMLA_H5_TRY(qmla_h5_attr_dbl(f, "softmax_scale", m->softmax_scale), "attribute softmax_scale");
    QMLA_H5_TRY(qmla_h5_attr_str(f, "rope_pairing", m->rope_pairing), "attribute rope_pairing");
    QMLA_H5_TRY(qmla_h5_attr_int(f, "bits", m->bits), "attribute bits");
    QMLA_H5_TRY(qmla_h5_attr_int(f, "group", m->group), "attribute group");
    QMLA_H5_TRY(qmla_h5_attr_str(f, "meta", m->meta), "attribute meta");
    QMLA_H5_TRY(qmla_h5_attr_dbl(f, "nmse_target", m->nmse), "attribute nmse_target");
    {
        /* the layers the rows hold (the summary has one row per layer) */
        char layers[sizeof m->layers];
        format_ranges(s->layer, s->n_layers, layers, sizeof layers);
        QMLA_H5_TRY(qmla_h5_attr_str(f, "layers", layers), "attribute layers");
    }
    QMLA_H5_TRY(qmla_h5_attr_str(f, "cells", m->cells), "attribute cells");
    QMLA_H5_TRY(qmla_h5_attr_str(f, "quantizer",
                         "per-token asymmetric affine, groups of `group` channels, "
                         "round-half-even, docs/quantizer.md"),
        "attribute quantizer");

    g = H5Gcreate2(f, "responses", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    QMLA_H5_TRY(g, "group /responses");
    if ((st = write_responses(g, path, r, n, err)))
        goto out;
    if (H5Gclose(g) < 0) {
        g = -1;
        QMLA_H5_TRY(-1, "group /responses (close)");
    }
    g = -1;
    if ((st = write_cells(f, path, m, err)) || (st = write_summary(f, path, s, err)) ||
        (st = carry_groups(f, path, m->keep_groups_from, err)))
        goto out;
out:
    if (g >= 0)
        H5Gclose(g);
    st = qmla_h5_out_finish(&o, st);
    free(r);
    return st;
}

/* ---- reader (on the generic table reader, qmla/table.h) -------------------- */

static void attr_str(const qmla_attr *a, size_t n, const char *name, char *out,
                     size_t len)
{
    const qmla_attr *x = qmla_attr_find(a, n, name);
    snprintf(out, len, "%s",
             x && x->v.kind == QMLA_VAL_STRING && x->v.n ? x->v.s[0] : "");
}

/* Numeric attribute: 0 and *v set, or -1 when absent or not numeric. */
static int attr_num(const qmla_attr *a, size_t n, const char *name, double *v)
{
    const qmla_attr *x = qmla_attr_find(a, n, name);
    if (!x || x->v.kind == QMLA_VAL_STRING || x->v.n != 1)
        return -1;
    *v = qmla_values_get(&x->v, 0);
    return 0;
}

static int attr_int(const qmla_attr *a, size_t n, const char *name, int *v)
{
    double d;
    if (attr_num(a, n, name, &d) || !(d >= INT32_MIN && d <= INT32_MAX))
        return -1;
    *v = (int)d;
    return 0;
}

/* Row values of one table column into the rows (by the row-table kind). */
static int scatter_column(const qmla_column *c, const qmla_table_col *tc,
                          qmla_response *r, size_t n)
{
    const qmla_val_kind vk = tc->v.kind;
    const int ok = c->kind == QMLA_COL_STR || c->kind == QMLA_COL_PATH
                       ? vk == QMLA_VAL_STRING
                   : c->kind == QMLA_COL_REAL ? vk == QMLA_VAL_FLOAT
                                              : vk == QMLA_VAL_INT || vk == QMLA_VAL_UINT;
    if (!ok || tc->v.n != n)
        return -1;
    for (size_t k = 0; k < n; k++) {
        switch (c->kind) {
        case QMLA_COL_INT:
        case QMLA_COL_FLAG: {
            const double v = qmla_values_get(&tc->v, k);
            if (!(v >= INT32_MIN && v <= INT32_MAX))
                return -1;
            *qmla_col_int(&r[k], c) = (int)v;
            break;
        }
        case QMLA_COL_REAL:
            *qmla_col_real(&r[k], c) = qmla_values_get(&tc->v, k);
            break;
        case QMLA_COL_PATH:
            *qmla_col_int(&r[k], c) = qmla_path_parse(tc->v.s[k]);
            break;
        case QMLA_COL_STR:
            if (strlen(tc->v.s[k]) >= QMLA_CELL_NAME_MAX)
                return -1;
            snprintf(qmla_col_str(&r[k], c), QMLA_CELL_NAME_MAX, "%s", tc->v.s[k]);
            break;
        }
    }
    return 0;
}

/* Columns a file of an earlier writer may lack (read as 0: unverified). */
static int optional_column(const char *name)
{
    return strcmp(name, "verified") == 0 || strcmp(name, "route_residual") == 0;
}

int qmla_results_read(const char *path, qmla_results_meta *m,
                      qmla_response **out, size_t *nout, qmla_error *err)
{
    *out = NULL;
    *nout = 0;
    memset(m, 0, sizeof *m);
    qmla_attr *a = NULL;
    size_t na = 0;
    qmla_table *t = NULL;
    qmla_response *r = NULL;
    int st = qmla_file_attrs(path, &a, &na, err);
    if (st)
        return st;
    char fmt[64];
    attr_str(a, na, "format", fmt, sizeof fmt);
    int ver = 0;
    if (strcmp(fmt, QMLA_RESULTS_FORMAT) != 0) {
        st = qmla_error_set(err, QMLA_EFORMAT,
                            "%s: attribute /format: expected \"%s\", found \"%s\"",
                            path, QMLA_RESULTS_FORMAT, fmt);
        goto done;
    }
    if (attr_int(a, na, "format_version", &ver) || ver != QMLA_RESULTS_VERSION) {
        st = qmla_error_set(err, QMLA_EFORMAT,
                            "%s: attribute /format_version: expected %d, found %d",
                            path, QMLA_RESULTS_VERSION, ver);
        goto done;
    }
    attr_str(a, na, "capture_file", m->capture_file, sizeof m->capture_file);
    attr_str(a, na, "capture_sha256", m->capture_sha256, sizeof m->capture_sha256);
    attr_str(a, na, "meta", m->meta, sizeof m->meta);
    if (!m->capture_file[0] || strlen(m->capture_sha256) != 64 || !m->meta[0] ||
        attr_int(a, na, "bits", &m->bits) || attr_int(a, na, "group", &m->group) ||
        attr_num(a, na, "nmse_target", &m->nmse)) {
        st = qmla_error_set(err, QMLA_EFORMAT,
                            "%s: missing one of the root attributes capture_file, "
                            "capture_sha256, meta, bits, group, nmse_target",
                            path);
        goto done;
    }
    /* provenance written by later writers; absent in earlier files */
    attr_str(a, na, "capture_path", m->capture_path, sizeof m->capture_path);
    attr_str(a, na, "model", m->model, sizeof m->model);
    attr_str(a, na, "layers", m->layers, sizeof m->layers);
    attr_str(a, na, "cells", m->cells, sizeof m->cells);
    attr_str(a, na, "tool_version", m->tool_version, sizeof m->tool_version);
    attr_str(a, na, "git_commit", m->git_commit, sizeof m->git_commit);
    attr_str(a, na, "command_line", m->command_line, sizeof m->command_line);
    attr_str(a, na, "created_utc", m->created_utc, sizeof m->created_utc);
    attr_str(a, na, "engine", m->engine, sizeof m->engine);
    attr_str(a, na, "engine_device", m->engine_device, sizeof m->engine_device);
    attr_str(a, na, "rope_pairing", m->rope_pairing, sizeof m->rope_pairing);
    attr_int(a, na, "n_heads", &m->H);
    attr_int(a, na, "hidden_size", &m->D);
    attr_int(a, na, "d_c", &m->d_c);
    attr_int(a, na, "d_n", &m->d_n);
    attr_int(a, na, "d_r", &m->d_r);
    attr_int(a, na, "d_v", &m->d_v);
    attr_num(a, na, "softmax_scale", &m->softmax_scale);

    if ((st = qmla_table_read(path, "responses", &t, err)))
        goto done;
    const size_t n = t->n_rows;
    r = calloc(n ? n : 1, sizeof *r);
    if (!r) {
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    for (size_t k = 0; k < qmla_response_n_columns; k++) {
        const qmla_column *c = &qmla_response_columns[k];
        const qmla_table_col *tc = qmla_table_column(t, c->name);
        if (!tc && optional_column(c->name))
            continue;
        if (!tc || scatter_column(c, tc, r, n)) {
            st = qmla_error_set(err, QMLA_EFORMAT,
                                "%s: /responses/%s: %s (expected %s values, one "
                                "per row)",
                                path, c->name, tc ? "wrong type or value" : "missing",
                                c->kind == QMLA_COL_REAL ? "floating-point"
                                : c->kind == QMLA_COL_STR || c->kind == QMLA_COL_PATH
                                    ? "string"
                                    : "integer");
            goto done;
        }
    }
    for (size_t k = 0; k < n; k++)
        if ((st = qmla_response_validate(&r[k], err))) {
            qmla_error_prefix(err, "%s: /responses row %zu (layer %d, cell %s, "
                              "seq %d): ", path, k, r[k].layer, r[k].cell,
                              r[k].seq);
            goto done;
        }
    *out = r;
    *nout = n;
    r = NULL;
done:
    free(r);
    qmla_table_free(t);
    qmla_attrs_free(a, na);
    return st;
}
