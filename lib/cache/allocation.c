/* allocation.c — per-layer cache configurations: the candidate names, and
 * group /allocate of a results file written and read back (contract and
 * layout: include/qmla/allocation.h; docs/allocate.md). Built on
 * lib/io/group.c (the one writer and its provenance block) and the checked
 * readers of lib/io/h5util.c. Test: tests/allocate/test_allocate_cli.sh. */
#include "qmla/allocation.h"

#include "io/group.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GROUP "allocate"

static int width_ok(int b) { return b == 2 || b == 3 || b == 4 || b == 8; }

int qmla_alloc_parse_config(const char *name, int *c_bits, int *r_bits, qmla_error *err)
{
    int cb = 0, rb = 0, nc = 0;
    if (!name || sscanf(name, "C%1dR%1d%n", &cb, &rb, &nc) != 2 || name[nc] != 0)
        return qmla_error_set(err, QMLA_EINVAL,
                              "config \"%s\": expected C<c>R<r> with c, r in 2, 3, 4, 8 "
                              "(e.g. C4R4, C2R4)", name ? name : "(null)");
    if (!width_ok(cb) || !width_ok(rb))
        return qmla_error_set(err, QMLA_EINVAL,
                              "config \"%s\": %s bits %d: expected 2, 3, 4 or 8", name,
                              width_ok(cb) ? "RoPE" : "content", width_ok(cb) ? rb : cb);
    *c_bits = cb;
    *r_bits = rb;
    return QMLA_OK;
}

int qmla_alloc_is_file(const char *s)
{
    const size_t n = s ? strlen(s) : 0;
    return n > 3 && !strcmp(s + n - 3, ".h5");
}

long qmla_allocation_find(const qmla_allocation *a, int layer)
{
    for (size_t i = 0; i < a->n; i++)
        if (a->layer[i] == layer)
            return (long)i;
    return -1;
}

void qmla_allocation_free(qmla_allocation *a)
{
    if (!a)
        return;
    free(a->layer);
    free(a->c_bits);
    free(a->r_bits);
    free(a->bytes);
    free(a->pred);
    memset(a, 0, sizeof *a);
}

/* ---- writer ---------------------------------------------------------------- */

static int col_i(hid_t g, const char *name, size_t n, const int *v, const char *desc)
{
    return qmla_h5_dset_1d(g, name, H5T_STD_I32LE, H5T_NATIVE_INT, n, v, desc, NULL);
}

static int col_d(hid_t g, const char *name, size_t n, const double *v, const char *desc,
                 const char *units)
{
    return qmla_h5_dset_1d(g, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, v, desc, units);
}

static int write_candidates(hid_t g, const qmla_alloc_cand *c, size_t n)
{
    const size_t cap = n ? n : 1;
    int *iv = malloc(cap * sizeof *iv);
    double *dv = malloc(cap * sizeof *dv);
    const char **sv = malloc(cap * sizeof *sv);
    int r = (!iv || !dv || !sv) ? -2 : 0;
#define CI(name, field, desc)                                                  \
    if (!r) {                                                                  \
        for (size_t k = 0; k < n; k++)                                         \
            iv[k] = c[k].field;                                                \
        r = col_i(g, name, n, iv, desc);                                       \
    }
#define CD(name, field, desc, units)                                           \
    if (!r) {                                                                  \
        for (size_t k = 0; k < n; k++)                                         \
            dv[k] = c[k].field;                                                \
        r = col_d(g, name, n, dv, desc, units);                                \
    }
    CI("layer", layer, "layer index")
    if (!r) {
        for (size_t k = 0; k < n; k++)
            sv[k] = c[k].config;
        r = qmla_h5_dset_strs(g, "config", n, sv, "candidate C<content bits>R<RoPE bits>");
    }
    CI("c_bits", c_bits, "content bits")
    CI("r_bits", r_bits, "RoPE bits")
    CD("bytes_per_token", bytes, "the layer's storage per token (qmla storage accounting)", "B")
    CD("nmse_c", nmse_c, "content cache NMSE measured on the capture", "1")
    CD("nmse_r", nmse_r, "RoPE cache NMSE measured on the capture", "1")
    CD("pred_c", pred_c, "predicted output NMSE of the content error", "1")
    CD("pred_r", pred_r, "predicted output NMSE of the RoPE error", "1")
    CD("pred_nmse", pred, "predicted attention-output NMSE pred_c + pred_r", "1")
    CI("chosen", chosen, "1: the allocation's choice for the layer")
#undef CI
#undef CD
    free(iv);
    free(dv);
    free(sv);
    return r;
}

int qmla_allocation_write(const char *path, const qmla_allocation *a,
                          const qmla_alloc_record *rec, qmla_error *err)
{
    if (!path || !a || !rec || !a->n)
        return qmla_error_set(err, QMLA_EINVAL, "allocation: nothing to write");
    qmla_h5_out o;
    int st = qmla_h5_out_group(&o, path, GROUP, err);
    if (st)
        return st;
    const hid_t g = o.g;
    hid_t gc = -1;
    char **names = calloc(a->n, sizeof *names);
    char *nbuf = calloc(a->n, 16);
    if (!names || !nbuf) {
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    {
        qmla_prov_input in[4];
        size_t ni = 0;
        in[ni++] = (qmla_prov_input){"capture", rec->capture};
        in[ni++] = (qmla_prov_input){"capture_sha256", rec->capture_sha256};
        if (rec->transforms) {
            in[ni++] = (qmla_prov_input){"transforms", rec->transforms};
            in[ni++] = (qmla_prov_input){"transforms_sha256", rec->transforms_sha256};
        }
        const qmla_prov p = {.tool = "qmla allocate", .command_line = rec->command_line,
                             .engine = rec->engine, .inputs = in, .n_inputs = ni};
        if ((st = qmla_h5_prov(g, &p, path, err)))
            goto out;
    }
    QMLA_H5_TRY(qmla_h5_attr_str(g, "budget", rec->budget ? rec->budget : ""), "attribute budget");
    QMLA_H5_TRY(qmla_h5_attr_str(g, "candidates", rec->candidates ? rec->candidates : ""),
                "attribute candidates");
    QMLA_H5_TRY(qmla_h5_attr_dbl(g, "budget_bytes_per_token", a->budget_bytes),
                "attribute budget_bytes_per_token");
    QMLA_H5_TRY(qmla_h5_attr_dbl(g, "bytes_per_token", a->bytes_per_token),
                "attribute bytes_per_token");
    QMLA_H5_TRY(qmla_h5_attr_dbl(g, "pred_total", a->pred_total), "attribute pred_total");
    QMLA_H5_TRY(qmla_h5_attr_dbl(g, "pred_mean", a->pred_total / (double)a->n),
                "attribute pred_mean");
    QMLA_H5_TRY(qmla_h5_attr_int(g, "context", a->context), "attribute context");
    QMLA_H5_TRY(qmla_h5_attr_int(g, "group", a->group), "attribute group");
    QMLA_H5_TRY(qmla_h5_attr_int(g, "d_c", a->d_c), "attribute d_c");
    QMLA_H5_TRY(qmla_h5_attr_int(g, "d_r", a->d_r), "attribute d_r");
    QMLA_H5_TRY(qmla_h5_attr_int(g, "sink", a->sink), "attribute sink");
    QMLA_H5_TRY(qmla_h5_attr_int(g, "window", a->window), "attribute window");
    QMLA_H5_TRY(qmla_h5_attr_str(g, "policy", a->policy), "attribute policy");
    QMLA_H5_TRY(qmla_h5_attr_str(g, "meta", "f16"), "attribute meta");
    QMLA_H5_TRY(col_i(g, "layer", a->n, a->layer, "layer index"), "layer");
    for (size_t i = 0; i < a->n; i++) {
        names[i] = nbuf + 16 * i;
        snprintf(names[i], 16, "C%dR%d", a->c_bits[i], a->r_bits[i]);
    }
    QMLA_H5_TRY(qmla_h5_dset_strs(g, "config", a->n, (const char *const *)names,
                                  "the layer's configuration C<content bits>R<RoPE bits>"),
                "config");
    QMLA_H5_TRY(col_i(g, "c_bits", a->n, a->c_bits, "content bits"), "c_bits");
    QMLA_H5_TRY(col_i(g, "r_bits", a->n, a->r_bits, "RoPE bits"), "r_bits");
    QMLA_H5_TRY(col_d(g, "bytes_per_token", a->n, a->bytes,
                      "the layer's storage per token at `context` (qmla storage accounting)", "B"),
                "bytes_per_token");
    QMLA_H5_TRY(col_d(g, "pred_nmse", a->n, a->pred,
                      "predicted attention-output NMSE of the layer at its configuration", "1"),
                "pred_nmse");
    if (rec->n_cand) {
        gc = H5Gcreate2(g, "candidates", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        QMLA_H5_TRY(gc, "group candidates");
        int r = write_candidates(gc, rec->cand, rec->n_cand);
        if (r == -2) {
            st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
            goto out;
        }
        QMLA_H5_TRY(r, "candidates");
        QMLA_H5_TRY(H5Gclose(gc), "group candidates");
        gc = -1;
    }
out:
    if (gc >= 0)
        H5Gclose(gc);
    free(names);
    free(nbuf);
    return qmla_h5_out_finish(&o, st);
}

/* ---- reader ---------------------------------------------------------------- */

static int read_col(const qmla_h5_ctx *v, hid_t g, const char *name, size_t *n, int integer,
                    void **out)
{
    const qmla_h5_dspec s = {name, 1, {QMLA_H5_WILD}, {"n_layers"}, integer};
    hsize_t found[QMLA_H5_SPEC_RANK];
    int present = 0;
    int st = qmla_h5_check_dataset(v, g, "/" GROUP, &s, 1, &present, found);
    if (st)
        return st;
    if (*n && found[0] != *n)
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, "/" GROUP "/", "%s: expected %zu "
                            "values (one per layer), found %llu", name, *n,
                            (unsigned long long)found[0]);
    *n = (size_t)found[0];
    return qmla_h5_read_dataset(v, g, "/" GROUP, name, 1, found,
                                integer ? H5T_NATIVE_INT : H5T_NATIVE_DOUBLE,
                                integer ? sizeof(int) : sizeof(double), out);
}

int qmla_allocation_read(const char *path, qmla_allocation *a, qmla_error *err)
{
    memset(a, 0, sizeof *a);
    if (qmla_h5_check_input(path, "allocation file", err))
        return err ? err->status : QMLA_ENOENT;
    h5_quiet q = qmla_h5_quiet_begin();
    hid_t lapl = qmla_h5_make_lapl();
    qmla_h5_ctx v = {path, lapl, err};
    hid_t fh = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), g = -1;
    int st = QMLA_OK;
    char *s = NULL;
    if (fh < 0) {
        char msg[256];
        qmla_h5_error_text(msg, sizeof msg);
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot open as HDF5: %s", path, msg);
        goto out;
    }
    st = qmla_h5_open_child(&v, fh, "/", GROUP, H5I_GROUP,
                            "a group (an allocation made by qmla allocate)", 1, &g);
    size_t n = 0;
    if (!st)
        st = read_col(&v, g, "layer", &n, 1, (void **)&a->layer);
    if (!st && n == 0)
        st = qmla_h5_fail(err, QMLA_EFORMAT, path, "/" GROUP "/layer",
                          "expected at least one layer, found none");
    if (!st)
        st = read_col(&v, g, "c_bits", &n, 1, (void **)&a->c_bits);
    if (!st)
        st = read_col(&v, g, "r_bits", &n, 1, (void **)&a->r_bits);
    if (!st)
        st = read_col(&v, g, "bytes_per_token", &n, 0, (void **)&a->bytes);
    if (!st)
        st = read_col(&v, g, "pred_nmse", &n, 0, (void **)&a->pred);
    a->n = n;
    for (size_t i = 0; i < n && !st; i++) {
        if (!width_ok(a->c_bits[i]) || !width_ok(a->r_bits[i]))
            st = qmla_h5_fail(err, QMLA_EFORMAT, path, "/" GROUP "/", "layer %d: bits C%dR%d: "
                              "expected content and RoPE bits in 2, 3, 4, 8", a->layer[i],
                              a->c_bits[i], a->r_bits[i]);
        for (size_t j = 0; j < i && !st; j++)
            if (a->layer[j] == a->layer[i])
                st = qmla_h5_fail(err, QMLA_EFORMAT, path, "/" GROUP "/layer",
                                  "layer %d appears twice", a->layer[i]);
    }
    int64_t iv = 0;
    struct { const char *name; int *dst; } ints[] = {
        {"group", &a->group}, {"d_c", &a->d_c}, {"d_r", &a->d_r},
        {"sink", &a->sink}, {"window", &a->window}};
    for (size_t k = 0; k < sizeof ints / sizeof ints[0] && !st; k++) {
        st = qmla_h5_read_attr_int(&v, g, "/" GROUP, ints[k].name, 1, &iv, NULL);
        if (!st && (iv < 0 || iv > 1000000000))
            st = qmla_h5_fail(err, QMLA_EFORMAT, path, "/" GROUP, "attribute %s: expected "
                              "0..1e9, found %lld", ints[k].name, (long long)iv);
        if (!st)
            *ints[k].dst = (int)iv;
    }
    if (!st && a->group != 64)
        st = qmla_h5_fail(err, QMLA_EFORMAT, path, "/" GROUP, "attribute group: expected 64, "
                          "found %d", a->group);
    if (!st)
        st = qmla_h5_read_attr_int(&v, g, "/" GROUP, "context", 1, &iv, NULL);
    if (!st && iv < 1)
        st = qmla_h5_fail(err, QMLA_EFORMAT, path, "/" GROUP, "attribute context: expected "
                          ">= 1, found %lld", (long long)iv);
    a->context = (long)iv;
    if (!st)
        st = qmla_h5_read_attr_dbl(&v, g, "/" GROUP, "budget_bytes_per_token", 1,
                                   &a->budget_bytes, NULL);
    if (!st)
        st = qmla_h5_read_attr_dbl(&v, g, "/" GROUP, "bytes_per_token", 1, &a->bytes_per_token,
                                   NULL);
    if (!st)
        st = qmla_h5_read_attr_dbl(&v, g, "/" GROUP, "pred_total", 1, &a->pred_total, NULL);
    if (!st)
        st = qmla_h5_read_attr_str(&v, g, "/" GROUP, "policy", 1, &s);
    if (!st)
        snprintf(a->policy, sizeof a->policy, "%s", s);
out:
    free(s);
    qmla_h5_read_close(g, fh, lapl, q);
    if (st)
        qmla_allocation_free(a);
    return st;
}
