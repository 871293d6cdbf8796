/* cmd_show.c — `qmla show`: the summary `qmla sweep` printed, read back from
 * a results file (root attributes and /summary), without the capture and
 * without recomputing anything.
 *
 *   qmla show results/default-sweep.h5 */
#include "cli.h"
#include "qmla/table.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void help(FILE *f)
{
    fprintf(f,
        "usage: qmla show RESULTS.h5 [--brief]\n"
        "\n"
        "Print the summary of a qmla-results file as `qmla sweep -v` printed it:\n"
        "the capture and quantizer it was computed with, the per-layer content\n"
        "and RoPE responses with their ratio, and the model-level means, then\n"
        "their standard errors and 95%% bootstrap intervals where the file records\n"
        "them (docs/math.md §3.1). Reads only the results file (root attributes\n"
        "and /summary).\n"
        "\n"
        "  --brief   leave out the per-layer rows\n"
        "\n"
        "examples:\n"
        "  qmla show results/default-sweep.h5\n"
        "  qmla show experiments/tiny-mla/results/tiny-mla-full-sweep.h5 --brief\n");
}

static const char *attr_s(const qmla_attr *a, size_t n, const char *name)
{
    const qmla_attr *x = qmla_attr_find(a, n, name);
    return x && x->v.kind == QMLA_VAL_STRING && x->v.n ? x->v.s[0] : NULL;
}

static double attr_d(const qmla_attr *a, size_t n, const char *name)
{
    const qmla_attr *x = qmla_attr_find(a, n, name);
    return x && x->v.n ? qmla_values_get(&x->v, 0) : NAN;
}

/* A numeric /summary column as doubles, or an error naming it. */
static const qmla_table_col *need_col(const char *path, const qmla_table *t, const char *name,
                                   int *bad)
{
    const qmla_table_col *c = qmla_table_column(t, name);
    if (!c || c->v.kind == QMLA_VAL_STRING) {
        cli_fail("show", "%s: /summary/%s: expected a numeric dataset, found %s", path, name,
                 c ? "strings" : "none");
        *bad = 1;
    }
    return c;
}

int cmd_show(int argc, char **argv)
{
    static const struct option lo[] = {{"brief", no_argument, 0, 'b'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    int brief = 0, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (ch) {
        case 'b': brief = 1; break;
        case 'h': help(stdout); return QMLA_EXIT_OK;
        default: help(stderr); return QMLA_EXIT_USAGE;
        }
    }
    if (cli_require_args("show", argc, "RESULTS.h5", NULL, NULL))
        return QMLA_EXIT_USAGE;
    const char *path = argv[optind];
    qmla_error err;
    qmla_error_clear(&err);
    qmla_attr *root = NULL;
    size_t nr = 0;
    if (qmla_file_attrs(path, &root, &nr, &err))
        return cli_lib_error("show", &err);
    const char *format = attr_s(root, nr, "format");
    if (!format || strcmp(format, "qmla-results")) {
        cli_fail("show", "%s: root attribute format: expected \"qmla-results\", found %s%s%s", path,
                 format ? "\"" : "", format ? format : "none", format ? "\"" : "");
        qmla_attrs_free(root, nr);
        return QMLA_EXIT_USAGE;
    }
    qmla_table *t = NULL;
    if (qmla_table_read(path, "summary", &t, &err)) {
        qmla_attrs_free(root, nr);
        return cli_lib_error("show", &err);
    }
    int bad = 0, rc = QMLA_EXIT_OK, recomputed = 0;
    const qmla_table_col *cl = need_col(path, t, "layer", &bad),
                      *cc = need_col(path, t, "response_content", &bad),
                      *cr = need_col(path, t, "response_rope", &bad),
                      *cq = need_col(path, t, "ratio", &bad);
    qmla_summary s;
    memset(&s, 0, sizeof s);
    if (bad) {
        rc = QMLA_EXIT_USAGE;
        goto out;
    }
    s.n_layers = t->n_rows;
    s.layer = calloc(t->n_rows ? t->n_rows : 1, sizeof *s.layer);
    s.response_content = calloc(t->n_rows ? t->n_rows : 1, sizeof(double));
    s.response_rope = calloc(t->n_rows ? t->n_rows : 1, sizeof(double));
    s.ratio = calloc(t->n_rows ? t->n_rows : 1, sizeof(double));
    s.degenerate = calloc(t->n_rows ? t->n_rows : 1, sizeof(int));
    if (!s.layer || !s.response_content || !s.response_rope || !s.ratio || !s.degenerate) {
        rc = cli_fail("show", "out of memory");
        goto out;
    }
    /* files of earlier writers lack /summary/degenerate: a layer without a
     * finite positive ratio is degenerate there */
    const qmla_table_col *cd = qmla_table_column(t, "degenerate");
    size_t in_model = 0;
    for (size_t k = 0; k < t->n_rows; k++) {
        s.layer[k] = (int)qmla_values_get(&cl->v, k);
        s.response_content[k] = qmla_values_get(&cc->v, k);
        s.response_rope[k] = qmla_values_get(&cr->v, k);
        s.ratio[k] = qmla_values_get(&cq->v, k);
        s.degenerate[k] = cd ? qmla_values_get(&cd->v, k) != 0
                             : !(isfinite(s.ratio[k]) && s.ratio[k] > 0);
        in_model += !s.degenerate[k];
    }
    /* the dispersion (docs/math.md §3.1), where the file records it: every
     * column present, else none (files of earlier writers) */
    {
        static const char *const dn[9] = {
            "response_content_se", "response_content_lo", "response_content_hi",
            "response_rope_se",    "response_rope_lo",    "response_rope_hi",
            "ratio_se",            "ratio_lo",            "ratio_hi"};
        double **dst[9] = {&s.response_content_se, &s.response_content_lo,
                           &s.response_content_hi, &s.response_rope_se,
                           &s.response_rope_lo,    &s.response_rope_hi,
                           &s.ratio_se,            &s.ratio_lo,
                           &s.ratio_hi};
        const qmla_table_col *dc[9];
        int all = 1;
        for (int q = 0; q < 9; q++) {
            dc[q] = qmla_table_column(t, dn[q]);
            all &= dc[q] && dc[q]->v.kind != QMLA_VAL_STRING;
        }
        for (int q = 0; q < 9 && all; q++) {
            if (!(*dst[q] = calloc(t->n_rows ? t->n_rows : 1, sizeof(double)))) {
                rc = cli_fail("show", "out of memory");
                goto out;
            }
            for (size_t k = 0; k < t->n_rows; k++)
                (*dst[q])[k] = qmla_values_get(&dc[q]->v, k);
        }
        static const char *const mn[9] = {
            "model_response_content_se", "model_response_content_lo",
            "model_response_content_hi", "model_response_rope_se",
            "model_response_rope_lo",    "model_response_rope_hi",
            "model_ratio_se",            "model_ratio_lo",
            "model_ratio_hi"};
        double *mdst[9] = {&s.model_response_content_se, &s.model_response_content_lo,
                           &s.model_response_content_hi, &s.model_response_rope_se,
                           &s.model_response_rope_lo,    &s.model_response_rope_hi,
                           &s.model_ratio_se,            &s.model_ratio_lo,
                           &s.model_ratio_hi};
        for (int q = 0; q < 9; q++)
            *mdst[q] = attr_d(t->attrs, t->n_attrs, mn[q]);
        const double B = attr_d(t->attrs, t->n_attrs, "bootstrap_replicates"),
                     seed = attr_d(t->attrs, t->n_attrs, "bootstrap_seed");
        s.bootstrap_replicates = B > 0 ? (size_t)B : 0;
        s.bootstrap_seed = seed > 0 ? (unsigned long)seed : 0;
        /* not recorded: recomputed from /responses where the file has them
         * (the point estimates printed stay those of /summary) */
        qmla_summary re;
        if (!all && cli_summary_from_responses(path, s.layer, s.n_layers, &re) == 0) {
            for (int q = 0; q < 9; q++) {
                double **src[9] = {&re.response_content_se, &re.response_content_lo,
                                   &re.response_content_hi, &re.response_rope_se,
                                   &re.response_rope_lo,    &re.response_rope_hi,
                                   &re.ratio_se,            &re.ratio_lo,
                                   &re.ratio_hi};
                *dst[q] = *src[q];
                *src[q] = NULL;
            }
            const double mv[9] = {re.model_response_content_se, re.model_response_content_lo,
                                  re.model_response_content_hi, re.model_response_rope_se,
                                  re.model_response_rope_lo,    re.model_response_rope_hi,
                                  re.model_ratio_se,            re.model_ratio_lo,
                                  re.model_ratio_hi};
            for (int q = 0; q < 9; q++)
                *mdst[q] = mv[q];
            s.bootstrap_replicates = re.bootstrap_replicates;
            s.bootstrap_seed = re.bootstrap_seed;
            recomputed = 1;
            qmla_summary_free(&re);
        }
    }
    s.model_response_content = attr_d(t->attrs, t->n_attrs, "model_response_content");
    s.model_response_rope = attr_d(t->attrs, t->n_attrs, "model_response_rope");
    s.model_ratio = attr_d(t->attrs, t->n_attrs, "model_ratio");
    const double ndeg = attr_d(t->attrs, t->n_attrs, "n_degenerate");
    const double nver = attr_d(t->attrs, t->n_attrs, "n_verified");
    const double nin = attr_d(t->attrs, t->n_attrs, "n_layers_in_model");
    s.n_degenerate = ndeg > 0 ? (size_t)ndeg : 0;
    s.n_verified = nver > 0 ? (size_t)nver : 0;
    s.worst_route_residual = attr_d(t->attrs, t->n_attrs, "worst_route_residual");
    s.n_layers_in_model = nin >= 0 ? (size_t)nin : in_model;
    s.n_rows = 0;
    {
        qmla_table *rt = NULL;
        qmla_error e2;
        if (qmla_table_read(path, "responses", &rt, &e2) == QMLA_OK)
            s.n_rows = rt->n_rows;
        qmla_table_free(rt);
    }
    const char *cap = attr_s(root, nr, "capture_path"), *model = attr_s(root, nr, "model"),
               *meta = attr_s(root, nr, "meta");
    printf("capture  %s  (%s)\n", cap ? cap : "?", model ? model : "?");
    printf("quant    INT%.0f, group %.0f, %s metadata; error rescaled to cache NMSE %g\n",
           attr_d(root, nr, "bits"), attr_d(root, nr, "group"), meta ? meta : "?",
           attr_d(root, nr, "nmse_target"));
    printf("results  %s  (%zu layers%s)\n\n", path, s.n_layers,
           s.n_degenerate ? ", some degenerate items excluded" : "");
    cli_print_summary(&s, !brief, 0);
    if (recomputed)
        printf("(dispersion recomputed from /responses: this file's /summary predates it)\n");
out:
    qmla_summary_free(&s);
    qmla_table_free(t);
    qmla_attrs_free(root, nr);
    return rc;
}
