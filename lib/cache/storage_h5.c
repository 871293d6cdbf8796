/* storage_h5.c — the results file of `qmla storage -o` (format
 * "qmla-storage", contract: include/qmla/decode.h): the storage accounting
 * of lib/cache/storage.c as the table /storage, which `qmla figures`
 * draws (fig5a-storage) and `qmla export` / `qmla report` read.
 * Test: tests/cache/test_storage_cli.sh (h5py against the TSV). */
#include "qmla/decode.h"

#include <stdlib.h>
#include <string.h>

#include "io/group.h"

int qmla_storage_check_output(const char *path, qmla_error *err)
{
    return qmla_h5_check_replace(path, "qmla-storage", err) ? QMLA_EINVAL : QMLA_OK;
}

int qmla_storage_write_h5(const char *path, const qmla_storage_entry *e, size_t n,
                          const char *command_line, qmla_error *err)
{
    if (!path || (!e && n))
        return qmla_error_set(err, QMLA_EINVAL, "storage results: NULL argument");
    if (qmla_storage_check_output(path, err))
        return QMLA_EINVAL;
    const size_t m = n ? n : 1;
    const char **cfg = malloc(m * sizeof *cfg), **meta = malloc(m * sizeof *meta),
               **pol = malloc(m * sizeof *pol);
    char (*polbuf)[48] = malloc(m * sizeof *polbuf);
    long long *iv = malloc(5 * m * sizeof *iv);
    double *dv = malloc(7 * m * sizeof *dv);
    int st = QMLA_OK;
    if (!cfg || !meta || !pol || !polbuf || !iv || !dv) {
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    for (size_t k = 0; k < n; k++) {
        cfg[k] = e[k].config;
        meta[k] = e[k].meta;
        if (e[k].sink == 0 && e[k].window == 0)
            snprintf(polbuf[k], sizeof polbuf[k], "none");
        else
            snprintf(polbuf[k], sizeof polbuf[k], "sink%d/local%d", e[k].sink, e[k].window);
        pol[k] = polbuf[k];
        long long idx = 0;
        while (idx < (long long)k && strcmp(e[idx].config, e[k].config))
            idx++;
        /* the index of the config's first row, renumbered in order below */
        iv[k] = idx;
        iv[m + k] = e[k].sink;
        iv[2 * m + k] = e[k].window;
        iv[3 * m + k] = e[k].r.context;
        long long sdx = 0;
        while (sdx < (long long)k &&
               (strcmp(e[sdx].config, e[k].config) || strcmp(e[sdx].meta, e[k].meta) ||
                e[sdx].sink != e[k].sink || e[sdx].window != e[k].window))
            sdx++;
        iv[4 * m + k] = sdx;
        const double d[7] = {e[k].r.code_bytes,  e[k].r.meta_bytes,  e[k].r.protect_bytes,
                             e[k].r.table_bytes, e[k].r.total_bytes, e[k].r.bytes_per_token,
                             e[k].r.ratio};
        for (int j = 0; j < 7; j++)
            dv[(size_t)j * m + k] = d[j];
    }
    /* config_index, series_index: 0, 1, ... in order of first appearance */
    for (int c = 0; c < 5; c += 4) {
        long long next = 0, *x = iv + (size_t)c * m;
        for (size_t k = 0; k < n; k++)
            x[k] = (size_t)x[k] == k ? next++ : x[x[k]];
    }
    static const char *in[5][3] = {
        {"config_index", "the configuration's order of first appearance (0, 1, ...)", NULL},
        {"sink", "BF16 sink tokens (first tokens of the sequence)", "tokens"},
        {"window", "BF16 window tokens (most recent)", "tokens"},
        {"context", "tokens per sequence", "tokens"},
        {"series_index", "the order of first appearance of (config, meta, policy)", NULL}};
    static const char *dn[7][3] = {
        {"code_bytes", "packed codes of every token, per sequence", "bytes"},
        {"meta_bytes", "quantization metadata, per sequence", "bytes"},
        {"protect_bytes", "BF16 sink and window buffers, per sequence", "bytes"},
        {"table_bytes", "page-table entries (4 bytes per 64-token page)", "bytes"},
        {"total_bytes", "persistent bytes per sequence, everything counted", "bytes"},
        {"bytes_per_token", "total_bytes / context", "bytes"},
        {"ratio", "BF16 bytes (2 (d_c + d_r) per token) over total_bytes", "1"}};
    qmla_h5_out o;
    st = qmla_h5_out_file(&o, path, err);
    if (st)
        goto out;
    int bad = 0;
    hid_t g = -1;
    bad |= qmla_h5_attr_str(o.f, "format", "qmla-storage") != 0;
    bad |= qmla_h5_attr_int(o.f, "format_version", 1) != 0;
    const qmla_prov p = {.tool = "qmla storage", .command_line = command_line};
    bad |= qmla_h5_prov(o.f, &p, path, err) != QMLA_OK;
    if (!bad) {
        g = H5Gcreate2(o.f, "storage", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        bad |= g < 0;
    }
    if (!bad) {
        bad |= qmla_h5_dset_strs(g, "config", n, cfg, "cache configuration") != 0;
        bad |= qmla_h5_dset_1d(g, in[0][0], H5T_STD_I64LE, H5T_NATIVE_LLONG, n, iv, in[0][1],
                               in[0][2]) != 0;
        bad |= qmla_h5_dset_strs(g, "meta", n, meta,
                                 "quantization metadata: f16, q8 or - (BF16)") != 0;
        bad |= qmla_h5_dset_strs(g, "policy", n, pol, "BF16 protection: sinkS/localW or none") != 0;
        for (int k = 1; k < 5; k++)
            bad |= qmla_h5_dset_1d(g, in[k][0], H5T_STD_I64LE, H5T_NATIVE_LLONG, n,
                                   iv + (size_t)k * m, in[k][1], in[k][2]) != 0;
        for (int k = 0; k < 7; k++)
            bad |= qmla_h5_dset_1d(g, dn[k][0], H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n,
                                   dv + (size_t)k * m, dn[k][1], dn[k][2]) != 0;
    }
    if (g >= 0)
        H5Gclose(g);
    if (bad)
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot build the storage results", path);
    st = qmla_h5_out_finish(&o, st);
out:
    free(cfg);
    free(meta);
    free(pol);
    free(polbuf);
    free(iv);
    free(dv);
    return st;
}
