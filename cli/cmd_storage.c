/* cmd_storage.c — `qmla storage`: persistent bytes of the mixed-precision
 * MLA cache per sequence and the compression against BF16 (docs/math.md §9,
 * paper Fig. 5(a)), from lib/cache/storage.c. CPU only.
 *
 *   qmla storage --contexts 4096,131072 --config C4R4 --policy sink4/local128
 *                [--meta f16|q8] [--format table|tsv] [-o STORAGE.h5]
 * With -o the rows are also written as the table /storage of a results
 * file (qmla_storage_write_h5), which `qmla figures` draws (fig5a-storage).
 */
#include "cli.h"
#include "qmla/allocation.h"
#include "qmla/decode.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(FILE *f)
{
    fprintf(f,
        "usage: qmla storage [--contexts LIST] [--config NAME[,NAME...]]\n"
        "                    [--policy sinkS/localW|none] [--meta f16|q8]\n"
        "                    [--format table|tsv] [-o STORAGE.h5]\n"
        "\n"
        "Bytes of one sequence's MLA cache (d_c 512 + d_r 64, 64-token pages,\n"
        "group 64) with everything counted: packed codes of every token,\n"
        "quantization metadata, the BF16 sink/window buffers ((S + W) x 576 x 2)\n"
        "and the page-table entries (4 bytes per page); the ratio is BF16's\n"
        "1152 bytes per token over the total.\n"
        "\n"
        "  --contexts LIST  tokens per sequence, comma-separated (default 4096,131072)\n"
        "  --config NAMES   C4R4, C2R4, C8R8 or BF16, comma-separated (default C4R4),\n"
        "                   or ALLOC.h5 from qmla allocate: one row per layer at its\n"
        "                   configuration (the file's d_c, d_r and, unless --policy is\n"
        "                   given, its policy; 3-bit paths counted as packed) and\n"
        "                   the mean over layers\n"
        "  --policy P       sink4/local128 (default) or none, or a comma-separated\n"
        "                   list of them (a row per policy; BF16 once)\n"
        "  --meta M         f16 (4 bytes per group, default) or q8 (per token two\n"
        "                   float16 super-scales + 2 bytes per group)\n"
        "  --format F       table (default) or tsv: a header line, then one row per\n"
        "                   (config, context)\n"
        "  -o STORAGE.h5    also write the rows as the table /storage of an HDF5\n"
        "                   file (format qmla-storage; qmla figures: fig5a-storage)\n"
        "\n"
        "example: qmla storage --contexts 4096,131072 --config C4R4 --meta q8\n");
}

static int parse_policy(const char *s, int *S, int *W)
{
    if (!strcmp(s, "none")) {
        *S = *W = 0;
        return 0;
    }
    char tail = 0;
    /* at most 9 digits each (a longer number, which %d wrapped into a
     * meaningless or negative byte count, does not match) */
    if (sscanf(s, "sink%9d/local%9d%c", S, W, &tail) != 2 || *S < 0 || *W < 0)
        return -1;
    return 0;
}

/* The rows printed so far, kept for -o (NULL: not kept). */
static qmla_storage_entry *rows_kept;
static size_t n_kept, cap_kept;
static int keep_failed;

static void keep_row(const char *name, const char *mname, int S, int W,
                     const qmla_storage_row *r)
{
    if (n_kept == cap_kept) {
        const size_t c = cap_kept ? 2 * cap_kept : 64;
        qmla_storage_entry *p = realloc(rows_kept, c * sizeof *p);
        if (!p) {
            keep_failed = 1;
            return;
        }
        rows_kept = p;
        cap_kept = c;
    }
    qmla_storage_entry *e = &rows_kept[n_kept++];
    memset(e, 0, sizeof *e);
    snprintf(e->config, sizeof e->config, "%s", name);
    snprintf(e->meta, sizeof e->meta, "%s", mname);
    e->sink = S;
    e->window = W;
    e->r = *r;
}

/* One row of the printed table (both formats), kept for -o. */
static void print_row(int tsv, const char *name, const char *mname, int S, int W,
                      const qmla_storage_row *r)
{
    keep_row(name, mname, S, W, r);
    if (tsv) {
        printf("%s\t%s\t%d\t%d\t%ld\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.4f\t%.4f\n", name, mname,
               S, W, r->context, r->code_bytes, r->meta_bytes, r->protect_bytes, r->table_bytes,
               r->total_bytes, r->bytes_per_token, r->ratio);
        return;
    }
    char pol[48];
    if (S == 0 && W == 0)
        snprintf(pol, sizeof pol, "none");
    else
        snprintf(pol, sizeof pol, "sink%d/local%d", S, W);
    printf("%-6s %-4s %-15s %9ld %14.0f %12.0f %10.0f %10.0f %14.0f %10.2f %6.3fx\n", name, mname,
           pol, r->context, r->code_bytes, r->meta_bytes, r->protect_bytes, r->table_bytes,
           r->total_bytes, r->bytes_per_token, r->ratio);
}

/* --config ALLOC.h5: a row per layer ("layerL:C4R4") at each context, then
 * "mean": the byte columns averaged over layers, the ratio of the sums. */
static int storage_allocation(const char *path, int meta, int policy_given, int S, int W,
                              const long *T, size_t nctx, int tsv)
{
    qmla_error err;
    qmla_allocation a;
    if (qmla_allocation_read(path, &a, &err))
        return cli_lib_error("storage", &err);
    if (!policy_given) {
        S = a.sink;
        W = a.window;
    }
    const char *mname = meta == QMLA_CORE_META_Q8 ? "q8" : "f16";
    int rc = QMLA_EXIT_OK;
    for (size_t i = 0; i < nctx && rc == QMLA_EXIT_OK; i++) {
        qmla_storage_row m;
        memset(&m, 0, sizeof m);
        m.context = T[i];
        for (size_t l = 0; l < a.n; l++) {
            const qmla_kv_config c = {a.c_bits[l], a.r_bits[l], a.group, S, W, QMLA_CORE_META_F16};
            qmla_storage_row r;
            if (qmla_storage_account_dims(&c, meta, T[i], a.d_c, a.d_r, &r, &err)) {
                rc = cli_lib_error("storage", &err);
                break;
            }
            char name[48];
            snprintf(name, sizeof name, "layer%d:C%dR%d", a.layer[l], a.c_bits[l], a.r_bits[l]);
            print_row(tsv, name, mname, S, W, &r);
            m.code_bytes += r.code_bytes / (double)a.n;
            m.meta_bytes += r.meta_bytes / (double)a.n;
            m.protect_bytes += r.protect_bytes / (double)a.n;
            m.table_bytes += r.table_bytes / (double)a.n;
            m.total_bytes += r.total_bytes / (double)a.n;
        }
        if (rc == QMLA_EXIT_OK) {
            m.bytes_per_token = m.total_bytes / (double)T[i];
            m.ratio = (double)T[i] * (a.d_c + a.d_r) * 2.0 / m.total_bytes;
            print_row(tsv, "mean", mname, S, W, &m);
        }
    }
    qmla_allocation_free(&a);
    return rc;
}

int cmd_storage(int argc, char **argv)
{
    static const struct option lo[] = {
        {"contexts", required_argument, 0, 'c'}, {"config", required_argument, 0, 'k'},
        {"policy", required_argument, 0, 'p'},   {"meta", required_argument, 0, 'm'},
        {"format", required_argument, 0, 'f'},   {"help", no_argument, 0, 'h'},
        {"output", required_argument, 0, 'o'},   {0, 0, 0, 0}};
    const char *contexts = "4096,131072", *configs = "C4R4", *policy = "sink4/local128";
    const char *out_h5 = NULL;
    int meta = QMLA_CORE_META_F16, tsv = 0, S = 4, W = 128, ch, policy_given = 0;
    n_kept = 0;
    keep_failed = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "ho:", lo, NULL)) != -1) {
        switch (ch) {
        case 'o': out_h5 = optarg; break;
        case 'c': contexts = optarg; break;
        case 'k': configs = optarg; break;
        case 'p': policy = optarg; policy_given = 1; break;
        case 'm':
            if (!strcmp(optarg, "f16"))
                meta = QMLA_CORE_META_F16;
            else if (!strcmp(optarg, "q8"))
                meta = QMLA_CORE_META_Q8;
            else
                return cli_fail("storage", "--meta: expected f16 or q8, found \"%s\"", optarg);
            break;
        case 'f':
            if (!strcmp(optarg, "tsv"))
                tsv = 1;
            else if (!strcmp(optarg, "table"))
                tsv = 0;
            else
                return cli_fail("storage", "--format: expected table or tsv, found \"%s\"",
                                optarg);
            break;
        case 'h': help(stdout); return QMLA_EXIT_OK;
        default: help(stderr); return QMLA_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return cli_fail("storage", "unexpected argument \"%s\"", argv[optind]);
    char **ctx = NULL, **cfg = NULL, **pol = NULL, *cbuf = NULL, *kbuf = NULL, *pbuf = NULL;
    size_t nctx = 0, ncfg = 0, npol = 0;
    int rc = QMLA_EXIT_OK, *PS = NULL, *PW = NULL;
    long *T = NULL;
    qmla_kv_config *kc = NULL;
    qmla_error err;
    qmla_error_clear(&err);
    if (cli_split_list(policy, &pol, &npol, &pbuf) || !npol) {
        rc = cli_fail("storage", "--policy: expected a comma-separated list");
        goto out;
    }
    PS = malloc(npol * sizeof *PS);
    PW = malloc(npol * sizeof *PW);
    if (!PS || !PW) {
        rc = cli_fail("storage", "out of memory");
        goto out;
    }
    for (size_t p = 0; p < npol; p++)
        if (parse_policy(pol[p], &PS[p], &PW[p])) {
            rc = cli_fail("storage", "--policy: expected sinkS/localW with S, W in "
                          "0..999999999 (e.g. sink4/local128) or none, found \"%s\"", pol[p]);
            goto out;
        }
    if (out_h5 && qmla_storage_check_output(out_h5, &err)) {
        rc = cli_lib_error("storage", &err);
        goto out;
    }
    if (cli_split_list(contexts, &ctx, &nctx, &cbuf) || cli_split_list(configs, &cfg, &ncfg, &kbuf) ||
        !nctx || !ncfg) {
        rc = cli_fail("storage", "--contexts / --config: expected comma-separated lists");
        goto out;
    }
    T = malloc(nctx * sizeof *T);
    kc = malloc(ncfg * sizeof *kc);
    if (!T || !kc) {
        rc = cli_fail("storage", "out of memory");
        goto out;
    }
    for (size_t i = 0; i < nctx; i++)
        if (cli_parse_long(ctx[i], 1, 1L << 40, &T[i])) {
            rc = cli_fail("storage", "--contexts: expected positive integers, found \"%s\"",
                          ctx[i]);
            goto out;
        }
    /* every config is checked before anything is printed */
    for (size_t k = 0; k < ncfg; k++) {
        if (qmla_alloc_is_file(cfg[k])) {
            qmla_allocation a;
            if (qmla_allocation_read(cfg[k], &a, &err)) {
                rc = cli_lib_error("storage", &err);
                goto out;
            }
            qmla_allocation_free(&a);
            continue;
        }
        if (qmla_kv_parse_config(cfg[k], &kc[k], &err)) {
            rc = cli_lib_error("storage", &err);
            goto out;
        }
    }
    if (tsv)
        printf("config\tmeta\tsink\twindow\tcontext\tcode_bytes\tmeta_bytes\tprotect_bytes\t"
               "table_bytes\ttotal_bytes\tbytes_per_token\tratio\n");
    else
        printf("%-6s %-4s %-15s %9s %14s %12s %10s %10s %14s %10s %7s\n", "config", "meta",
               "policy", "context", "codes", "metadata", "bf16 buf", "pages", "total",
               "B/token", "ratio");
    /* per config, each policy (BF16, which has none, once), each context */
    for (size_t k = 0; k < ncfg && rc == QMLA_EXIT_OK; k++)
        for (size_t p = 0; p < npol && rc == QMLA_EXIT_OK; p++) {
            S = PS[p];
            W = PW[p];
            if (qmla_alloc_is_file(cfg[k])) {
                rc = storage_allocation(cfg[k], meta, policy_given, S, W, T, nctx, tsv);
                if (!policy_given)
                    break; /* the file's own policy */
                continue;
            }
            qmla_kv_config c = kc[k];
            if (c.c_bits == QMLA_KV_BF16 && p > 0)
                break;
            c.sink = c.c_bits == QMLA_KV_BF16 ? 0 : S;
            c.window = c.c_bits == QMLA_KV_BF16 ? 0 : W;
            const char *mname = c.c_bits == QMLA_KV_BF16 ? "-"
                                : (meta == QMLA_CORE_META_Q8 ? "q8" : "f16");
            for (size_t i = 0; i < nctx; i++) {
                qmla_storage_row r;
                if (qmla_storage_account(&c, meta, T[i], &r, &err)) {
                    rc = cli_lib_error("storage", &err);
                    break;
                }
                print_row(tsv, cfg[k], mname, c.sink, c.window, &r);
            }
        }
    if (rc == QMLA_EXIT_OK && out_h5) {
        if (keep_failed)
            rc = cli_fail("storage", "%s: out of memory", out_h5);
        else if (qmla_storage_write_h5(out_h5, rows_kept, n_kept, cli_command_line(), &err))
            rc = cli_lib_error("storage", &err);
    }
out:
    free(rows_kept);
    rows_kept = NULL;
    n_kept = cap_kept = 0;
    free(kc);
    free(T);
    free(PS);
    free(PW);
    free(ctx);
    free(cfg);
    free(pol);
    free(cbuf);
    free(kbuf);
    free(pbuf);
    return rc;
}
