/* bench_results.c — benchmark results files (contract: qmla/bench_results.h).
 * Built on lib/io/h5util.c: an in-memory HDF5 file saved atomically. */
#include "qmla/bench_results.h"

#include "io/group.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const reserved[] = {"format", "format_version", "tool", "tool_version",
                                       "git_commit", "command_line", "created_utc", "device",
                                       "engine", "threads", "blas", "elapsed_s"};

/* Index of (batch, size) in the decode points so far, appending it. */
static size_t point_of(int *pb, long *ps, size_t *np, int batch, long size)
{
    for (size_t i = 0; i < *np; i++)
        if (pb[i] == batch && ps[i] == size)
            return i;
    pb[*np] = batch;
    ps[*np] = size;
    return (*np)++;
}

static size_t config_of(const char **cfg, size_t *nc, const char *name)
{
    for (size_t i = 0; i < *nc; i++)
        if (!strcmp(cfg[i], name))
            return i;
    cfg[*nc] = name;
    return (*nc)++;
}

int qmla_bench_write_h5(const char *path, const qmla_bench_meta *m,
                        const qmla_bench_row *rows, size_t n, qmla_error *err)
{
    if (!path || !m || (n && !rows) || (m->n_params && (!m->param_names || !m->param_values)))
        return qmla_error_set(err, QMLA_EINVAL, "bench results: NULL argument");
    for (size_t p = 0; p < m->n_params; p++)
        for (size_t k = 0; k < sizeof reserved / sizeof reserved[0]; k++)
            if (!m->param_names[p] || !strcmp(m->param_names[p], reserved[k]))
                return qmla_error_set(err, QMLA_EINVAL,
                                      "bench results %s: parameter name %s is reserved",
                                      path, m->param_names[p] ? m->param_names[p] : "(NULL)");
    int st = QMLA_OK;
    hid_t g = -1;
    qmla_h5_out o;
    if ((st = qmla_h5_out_file(&o, path, err)))
        return st;
    const hid_t f = o.f;
    const size_t cap = n ? n : 1;
    const char **kind = malloc(cap * sizeof *kind), **cfg = malloc(cap * sizeof *cfg);
    int *batch = malloc(cap * sizeof *batch), *pb = malloc(cap * sizeof *pb);
    long long *size = malloc(cap * sizeof *size);
    long *ps = malloc(cap * sizeof *ps);
    double *col = malloc(cap * sizeof *col);
    const char **cnames = malloc(cap * sizeof *cnames);
    if (!kind || !cfg || !batch || !pb || !size || !ps || !col || !cnames) {
        st = qmla_error_set(err, QMLA_ENOMEM, "bench results %s: out of memory", path);
        goto out;
    }
    {
        QMLA_H5_TRY(qmla_h5_attr_str(f, "format", QMLA_BENCH_FORMAT), "attribute format");
        QMLA_H5_TRY(qmla_h5_attr_int(f, "format_version", QMLA_BENCH_VERSION),
            "attribute format_version");
        const qmla_prov p = {.tool = m->tool ? m->tool : "", .command_line = m->command_line,
                             .engine = "cuda"};
        if ((st = qmla_h5_prov(f, &p, path, err)))
            goto out;
        QMLA_H5_TRY(qmla_h5_attr_str(f, "device", m->device ? m->device : ""), "attribute device");
        for (size_t p = 0; p < m->n_params; p++)
            QMLA_H5_TRY(qmla_h5_attr_dbl(f, m->param_names[p], m->param_values[p]), m->param_names[p]);
    }
    /* /rows */
    g = H5Gcreate2(f, "rows", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    QMLA_H5_TRY(g, "group rows");
    for (size_t i = 0; i < n; i++) {
        kind[i] = rows[i].kind;
        cfg[i] = rows[i].config;
        batch[i] = rows[i].batch;
        size[i] = rows[i].size;
    }
    QMLA_H5_TRY(qmla_h5_dset_strs(g, "kind", n, kind, "what was measured"), "rows/kind");
    QMLA_H5_TRY(qmla_h5_dset_strs(g, "config", n, cfg, "cache configuration (empty: none)"),
        "rows/config");
    QMLA_H5_TRY(qmla_h5_dset_1d(g, "batch", H5T_STD_I32LE, H5T_NATIVE_INT, n, batch,
                        "decode: sequences (0: not a decode row)", NULL), "rows/batch");
    QMLA_H5_TRY(qmla_h5_dset_1d(g, "size", H5T_STD_I64LE, H5T_NATIVE_LLONG, n, size,
                        "decode: context; quantize-pack and writer: tokens", "tokens"),
        "rows/size");
    {
        const struct { const char *name, *desc, *units; size_t off; } c[] = {
            {"median_us", "median time", "us", offsetof(qmla_bench_row, median_us)},
            {"ratio_to_bf16", "median over the BF16 median of the same point", NULL,
             offsetof(qmla_bench_row, ratio_to_bf16)},
            {"bytes", "bytes moved (decode: read)", "B", offsetof(qmla_bench_row, bytes)},
            {"GBps", "bytes over the median", "GB/s", offsetof(qmla_bench_row, gbps)},
            {"pct_copy", "GBps over the same run's device copy", "%",
             offsetof(qmla_bench_row, pct_copy)}};
        for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
            for (size_t i = 0; i < n; i++)
                col[i] = *(const double *)((const char *)&rows[i] + c[k].off);
            QMLA_H5_TRY(qmla_h5_dset_1d(g, c[k].name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, col,
                                c[k].desc, c[k].units), c[k].name);
        }
    }
    QMLA_H5_TRY(H5Gclose(g), "group rows");
    g = -1;
    /* /table9 */
    {
        size_t np = 0, nc = 0;
        for (size_t i = 0; i < n; i++)
            if (!strcmp(rows[i].kind, "decode")) {
                point_of(pb, ps, &np, rows[i].batch, rows[i].size);
                config_of(cnames, &nc, rows[i].config);
            }
        g = H5Gcreate2(f, "table9", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        QMLA_H5_TRY(g, "group table9");
        for (size_t i = 0; i < np; i++)
            size[i] = ps[i];
        QMLA_H5_TRY(qmla_h5_dset_1d(g, "batch", H5T_STD_I32LE, H5T_NATIVE_INT, np, pb, "sequences",
                            NULL), "table9/batch");
        QMLA_H5_TRY(qmla_h5_dset_1d(g, "context", H5T_STD_I64LE, H5T_NATIVE_LLONG, np, size,
                            "tokens per sequence", "tokens"), "table9/context");
        const char *what[4] = {"us", "ratio", "GBps", "pct_copy"};
        const char *units[4] = {"us", NULL, "GB/s", "%"};
        for (size_t c = 0; c < nc; c++)
            for (int k = 0; k < 4; k++) {
                for (size_t i = 0; i < np; i++)
                    col[i] = NAN;
                for (size_t i = 0; i < n; i++)
                    if (!strcmp(rows[i].kind, "decode") && !strcmp(rows[i].config, cnames[c])) {
                        const size_t j = point_of(pb, ps, &np, rows[i].batch, rows[i].size);
                        col[j] = k == 0 ? rows[i].median_us
                               : k == 1 ? rows[i].ratio_to_bf16
                               : k == 2 ? rows[i].gbps
                                        : rows[i].pct_copy;
                    }
                char name[64];
                snprintf(name, sizeof name, "%s_%s", cnames[c], what[k]);
                QMLA_H5_TRY(qmla_h5_dset_1d(g, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, np, col,
                                    NULL, units[k]), name);
            }
        QMLA_H5_TRY(H5Gclose(g), "group table9");
        g = -1;
    }
out:
    if (g >= 0)
        H5Gclose(g);
    st = qmla_h5_out_finish(&o, st);
    free(kind);
    free(cfg);
    free(batch);
    free(pb);
    free(size);
    free(ps);
    free(col);
    free(cnames);
    return st;
}
