/* cmd_show.c — `qmla show`: a compact summary of any file qmla writes, read
 * back without recomputing anything: a sweep's results (what `qmla sweep -v`
 * printed), a part file's coverage, the /jvp, /predict, /interventions,
 * /eval and /ppl groups, serve-sim results, the decode benchmark's file and
 * a transforms file; each with its provenance block (docs/results-format.md).
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
        "usage: qmla show FILE.h5 [--brief]\n"
        "\n"
        "Print a compact summary of any file qmla writes (docs/results-format.md):\n"
        "  sweep results    as `qmla sweep -v` printed it: the capture and quantizer,\n"
        "                   the per-layer content and RoPE responses with their ratio,\n"
        "                   the model means and their dispersion (docs/math.md 3.1)\n"
        "  part file        (qmla sweep --shard) which shard it is and its coverage;\n"
        "                   never one shard's means as the model's\n"
        "  /jvp, /predict   per-layer mean gains, Spearman and MAE validation stats\n"
        "  /interventions   the gain ratio per control and path with its 95%% CI\n"
        "  /eval            per method and layer the NMSEs (old files lacking the\n"
        "                   root format attribute included)\n"
        "  /ppl_table       the perplexity table\n"
        "  /allocate        the per-layer configurations of qmla allocate, the budget\n"
        "                   and the bytes reached\n"
        "  serve-sim        throughput and preemptions per configuration\n"
        "  qmla-bench       the decode benchmark's rows and its Table 9 (a results\n"
        "                   file's /table9: scripts/decode-table.py's)\n"
        "  qmla-storage     qmla storage -o: bytes per token and ratio per row\n"
        "  transforms       method, layers present and missing, the complete flag\n"
        "Every group of a file is shown, each with its provenance (tool, version,\n"
        "commit, command line, creation time, engine, input hashes).\n"
        "\n"
        "  --brief   leave out the per-layer rows (and the benchmark's rows)\n"
        "\n"
        "examples:\n"
        "  qmla show results/default-sweep.h5\n"
        "  qmla show experiments/tiny-mla/results/tiny-mla-full-sweep.h5 --brief\n"
        "  qmla show experiments/operator/tiny-mla-default-operator.h5\n"
        "  qmla show docs/evidence/run25_bench_decode.h5\n");
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

/* A sweep's results file: what `qmla sweep -v` printed (unchanged). */
static int show_sweep(const char *path, const qmla_attr *root, size_t nr, int brief)
{
    qmla_error err;
    qmla_error_clear(&err);
    qmla_table *t = NULL;
    if (qmla_table_read(path, "summary", &t, &err)) {
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
    return rc;
}

/* ---- every other kind: provenance, then the key results ------------------ */

static int has_group(const char *path, const char *name)
{
    qmla_attr *a = NULL;
    size_t n = 0;
    qmla_error e;
    const int ok = qmla_group_attrs(path, name, &a, &n, &e) == QMLA_OK;
    qmla_attrs_free(a, n);
    return ok;
}

/* The provenance block of an attribute list (root or group), where present. */
static void print_provenance(const char *kind, const qmla_attr *a, size_t n)
{
    const char *tool = attr_s(a, n, "tool"), *ver = attr_s(a, n, "tool_version"),
               *commit = attr_s(a, n, "git_commit"), *engine = attr_s(a, n, "engine"),
               *cmd = attr_s(a, n, "command_line"), *created = attr_s(a, n, "created_utc");
    if (!cmd)
        cmd = attr_s(a, n, "command");
    printf("%s\n", kind);
    if (tool)
        printf("  tool         %s\n", tool);
    if (ver)
        printf("  tool_version %s\n", ver);
    if (commit)
        printf("  git_commit   %s\n", commit[0] ? commit : "(outside a git checkout)");
    if (engine)
        printf("  engine       %s\n", engine);
    {
        const char *dev = attr_s(a, n, "engine_device"); /* device engines only */
        if (dev)
            printf("  device       %s\n", dev);
    }
    if (created)
        printf("  created_utc  %s\n", created);
    if (cmd)
        printf("  command_line %s\n", cmd);
    static const char *const in[] = {"capture_file", "capture_path", "capture_sha256",
                                     "model_dir", "capture", "scenario", "calibrated_from"};
    for (size_t k = 0; k < sizeof in / sizeof *in; k++) {
        const char *v = attr_s(a, n, in[k]);
        if (v)
            printf("  %-12s %s\n", in[k], v);
    }
    if (!tool && !ver && !commit && !created)
        printf("  (no provenance block: written before qmla recorded one)\n");
}

/* A number of an attribute list as text ("-" when absent). */
static void print_attr_line(const char *label, const qmla_attr *a, size_t n, const char *name)
{
    const qmla_attr *x = qmla_attr_find(a, n, name);
    if (!x || !x->v.n)
        return;
    if (x->v.kind == QMLA_VAL_STRING)
        printf("  %-34s %s\n", label, x->v.s[0]);
    else if (x->v.kind == QMLA_VAL_FLOAT)
        printf("  %-34s %.6g\n", label, x->v.d[0]);
    else
        printf("  %-34s %.0f\n", label, qmla_values_get(&x->v, 0));
}

/* One cell of a table column as text. */
static void cell_text(const qmla_table_col *c, size_t k, char *buf, size_t cap)
{
    if (c->v.kind == QMLA_VAL_STRING)
        snprintf(buf, cap, "%s", c->v.s[k]);
    else if (c->v.kind == QMLA_VAL_FLOAT)
        snprintf(buf, cap, "%.6g", c->v.d[k]);
    else
        snprintf(buf, cap, "%.0f", qmla_values_get(&c->v, k));
}

/* The named columns of t (those present), one row per line. */
static void print_columns(const qmla_table *t, const char *const *names, size_t nn)
{
    const qmla_table_col *c[32];
    size_t m = 0, w[32];
    char buf[256];
    for (size_t j = 0; j < nn && m < 32; j++)
        if ((c[m] = qmla_table_column(t, names[j])))
            w[m] = strlen(names[j]), m++;
    for (size_t k = 0; k < t->n_rows; k++)
        for (size_t j = 0; j < m; j++) {
            cell_text(c[j], k, buf, sizeof buf);
            if (strlen(buf) > w[j])
                w[j] = strlen(buf);
        }
    printf(" ");
    for (size_t j = 0; j < m; j++)
        printf(" %-*s", (int)w[j], c[j]->name);
    printf("\n");
    for (size_t k = 0; k < t->n_rows; k++) {
        printf(" ");
        for (size_t j = 0; j < m; j++) {
            cell_text(c[j], k, buf, sizeof buf);
            printf(" %-*s", (int)w[j], buf);
        }
        printf("\n");
    }
}

/* A table with the columns a kind needs, or an error naming what is missing. */
static int need_table(const char *path, const char *name, const char *const *cols, size_t nc,
                      qmla_table **t)
{
    qmla_error err;
    qmla_error_clear(&err);
    if (qmla_table_read_any(path, name, t, &err))
        return cli_lib_error("show", &err);
    for (size_t j = 0; j < nc; j++)
        if (!qmla_table_column(*t, cols[j])) {
            cli_fail("show", "%s: /%s/%s: expected a dataset of %zu rows, found none", path, name,
                     cols[j], (*t)->n_rows);
            qmla_table_free(*t);
            *t = NULL;
            return QMLA_EXIT_USAGE;
        }
    return QMLA_EXIT_OK;
}

/* /jvp and /predict: per layer and path, the mean gains over non-degenerate points. */
static int show_operator(const char *path, const char *name, int brief)
{
    static const char *const need[] = {"layer", "path", "degenerate", "g_jvp", "g_finite"};
    qmla_table *t;
    int rc = need_table(path, name, need, 5, &t);
    if (rc)
        return rc;
    const int pred = !strcmp(name, "predict");
    print_provenance(pred ? "group /predict: the operator-error predictors (qmla predict)"
                          : "group /jvp: local (JVP) and finite gains (qmla jvp)",
                     t->attrs, t->n_attrs);
    printf("  points                             %zu\n", t->n_rows);
    print_attr_line("non-degenerate points", t->attrs, t->n_attrs, "n_points");
    print_attr_line("Spearman g_jvp vs g_finite", t->attrs, t->n_attrs, "spearman_jvp_vs_finite");
    if (pred) {
        print_attr_line("Spearman (frozen, held-out)", t->attrs, t->n_attrs, "spearman");
        print_attr_line("median |log error| (held-out)", t->attrs, t->n_attrs,
                        "median_abs_log_error");
        print_attr_line("held-out points", t->attrs, t->n_attrs, "n_heldout");
        print_attr_line("RoPE/content pairs", t->attrs, t->n_attrs, "n_pairs");
        print_attr_line("MAE log ratio, cache only", t->attrs, t->n_attrs,
                        "mae_log_ratio_cache_only");
        print_attr_line("MAE log ratio, operator only", t->attrs, t->n_attrs,
                        "mae_log_ratio_operator_only");
        print_attr_line("MAE log ratio, operator+alloc", t->attrs, t->n_attrs,
                        "mae_log_ratio_operator_allocation");
    }
    if (!brief) {
        const qmla_table_col *cl = qmla_table_column(t, "layer"), *cp = qmla_table_column(t, "path"),
                             *cd = qmla_table_column(t, "degenerate"),
                             *cj = qmla_table_column(t, "g_jvp"),
                             *cf = qmla_table_column(t, "g_finite"),
                             *ca = qmla_table_column(t, "pred_alloc");
        printf("  mean over non-degenerate points:\n  %5s %7s %6s %12s %12s%s\n", "layer", "path",
               "points", "g_jvp", "g_finite", ca ? "   pred_alloc" : "");
        /* layers in order of first appearance (plan order) */
        for (size_t k = 0; k < t->n_rows; k++) {
            const double L = qmla_values_get(&cl->v, k);
            size_t first = 0;
            while (qmla_values_get(&cl->v, first) != L)
                first++;
            if (first != k)
                continue;
            for (int pth = 0; pth < 2; pth++) {
                double sj = 0, sf = 0, sa = 0;
                size_t m = 0;
                for (size_t i = k; i < t->n_rows; i++)
                    if (qmla_values_get(&cl->v, i) == L && qmla_values_get(&cp->v, i) == pth &&
                        qmla_values_get(&cd->v, i) == 0) {
                        sj += qmla_values_get(&cj->v, i);
                        sf += qmla_values_get(&cf->v, i);
                        sa += ca ? qmla_values_get(&ca->v, i) : 0;
                        m++;
                    }
                printf("  %5.0f %7s %6zu %12.6g %12.6g", L, pth ? "rope" : "content", m,
                       m ? sj / m : NAN, m ? sf / m : NAN);
                if (ca)
                    printf(" %12.6g", m ? sa / m : NAN);
                printf("\n");
            }
        }
    }
    qmla_table_free(t);
    return QMLA_EXIT_OK;
}

/* /interventions: per control and path, the gain ratio with its 95% CI. */
static int show_interventions(const char *path)
{
    qmla_attr *a = NULL;
    size_t n = 0;
    qmla_error err;
    qmla_error_clear(&err);
    if (qmla_group_attrs(path, "interventions", &a, &n, &err))
        return cli_lib_error("show", &err);
    print_provenance("group /interventions: control interventions (qmla intervene)", a, n);
    printf("  direction INT%.0f, group %.0f, nu %g; %.0f items x %.0f reps, seed %.0f\n",
           attr_d(a, n, "bits"), attr_d(a, n, "group"), attr_d(a, n, "nmse"),
           attr_d(a, n, "n_items"), attr_d(a, n, "reps"), attr_d(a, n, "seed"));
    static const char *const ctl[] = {"sign", "permute", "isotropic"},
                             *const pth[] = {"content", "rope"};
    int missing = 0;
    printf("  %-10s %-8s %12s %12s %12s %12s\n", "control", "path", "gain_ratio", "ci_low",
           "ci_high", "median");
    for (int c = 0; c < 3; c++)
        for (int p = 0; p < 2; p++) {
            char g[96], lo[112], hi[112], md[112];
            snprintf(g, sizeof g, "gain_ratio_%s_%s", ctl[c], pth[p]);
            snprintf(lo, sizeof lo, "%s_ci_low", g);
            snprintf(hi, sizeof hi, "%s_ci_high", g);
            snprintf(md, sizeof md, "median_%s", g);
            if (!qmla_attr_find(a, n, g)) {
                cli_fail("show", "%s: /interventions: expected attribute %s, found none", path, g);
                missing = 1;
                continue;
            }
            printf("  %-10s %-8s %12.6g %12.6g %12.6g %12.6g\n", ctl[c], pth[p], attr_d(a, n, g),
                   attr_d(a, n, lo), attr_d(a, n, hi), attr_d(a, n, md));
        }
    print_attr_line("mean response, content", a, n, "mean_response_content");
    print_attr_line("mean response, rope", a, n, "mean_response_rope");
    print_attr_line("mean joint response", a, n, "mean_joint_response");
    print_attr_line("mean cross term / single sum", a, n, "mean_cross_relative");
    qmla_attrs_free(a, n);
    return missing ? QMLA_EXIT_USAGE : QMLA_EXIT_OK;
}

/* /eval: per method and layer, the mean over cells of the NMSEs. */
static int show_eval(const char *path, int brief)
{
    static const char *const need[] = {"method", "layer", "nmse_out", "nmse_out_content",
                                       "nmse_out_rope"};
    qmla_table *t;
    int rc = need_table(path, "eval", need, 5, &t);
    if (rc)
        return rc;
    print_provenance("group /eval: transforms at a cache configuration (qmla eval)", t->attrs,
                     t->n_attrs);
    print_attr_line("config", t->attrs, t->n_attrs, "config");
    print_attr_line("policy", t->attrs, t->n_attrs, "policy");
    const qmla_table_col *cm = qmla_table_column(t, "method"), *cl = qmla_table_column(t, "layer"),
                         *cv[3] = {qmla_table_column(t, "nmse_out"),
                                   qmla_table_column(t, "nmse_out_content"),
                                   qmla_table_column(t, "nmse_out_rope")};
    if (cm->v.kind != QMLA_VAL_STRING) {
        qmla_table_free(t);
        return cli_fail("show", "%s: /eval/method: expected strings, found numbers", path);
    }
    printf("  mean over cells (model: mean over layers):\n  %-22s %6s %12s %12s %12s\n",
           "method", "layer", "nmse_out", "content", "rope");
    for (size_t k = 0; k < t->n_rows; k++) {
        size_t first = 0;
        while (strcmp(cm->v.s[first], cm->v.s[k]))
            first++;
        if (first != k)
            continue;
        double model[3] = {0, 0, 0};
        size_t n_layers = 0;
        for (size_t i = k; i < t->n_rows; i++) {
            if (strcmp(cm->v.s[i], cm->v.s[k]))
                continue;
            const double L = qmla_values_get(&cl->v, i);
            size_t fl = k;
            while (strcmp(cm->v.s[fl], cm->v.s[k]) || qmla_values_get(&cl->v, fl) != L)
                fl++;
            if (fl != i)
                continue;
            double m[3] = {0, 0, 0};
            size_t nc = 0;
            for (size_t j = i; j < t->n_rows; j++)
                if (!strcmp(cm->v.s[j], cm->v.s[k]) && qmla_values_get(&cl->v, j) == L) {
                    for (int q = 0; q < 3; q++)
                        m[q] += qmla_values_get(&cv[q]->v, j);
                    nc++;
                }
            for (int q = 0; q < 3; q++)
                model[q] += m[q] / (double)nc;
            n_layers++;
            if (!brief)
                printf("  %-22s %6.0f %12.6g %12.6g %12.6g\n", cm->v.s[k], L, m[0] / nc,
                       m[1] / nc, m[2] / nc);
        }
        printf("  %-22s %6s %12.6g %12.6g %12.6g\n", cm->v.s[k], "model", model[0] / n_layers,
               model[1] / n_layers, model[2] / n_layers);
    }
    const qmla_table_col *cb = qmla_table_column(t, "bound_ok");
    if (cb) {
        size_t nbad = 0;
        for (size_t k = 0; k < t->n_rows; k++)
            nbad += qmla_values_get(&cb->v, k) == 0;
        printf("  App. C.3 bound held on %zu of %zu rows\n", t->n_rows - nbad, t->n_rows);
    }
    qmla_table_free(t);
    return QMLA_EXIT_OK;
}

/* /ppl_table (provenance in /ppl): the table qmla ppl printed. */
static int show_ppl(const char *path)
{
    static const char *const need[] = {"text", "config", "policy", "method", "bits_per_byte"};
    qmla_table *t;
    int rc = need_table(path, "ppl_table", need, 5, &t);
    if (rc)
        return rc;
    qmla_attr *a = NULL;
    size_t n = 0;
    qmla_error e;
    if (qmla_group_attrs(path, "ppl", &a, &n, &e) == QMLA_OK)
        print_provenance("groups /ppl, /ppl_table: perplexity (qmla ppl)", a, n);
    else
        print_provenance("group /ppl_table: perplexity (qmla ppl)", t->attrs, t->n_attrs);
    qmla_attrs_free(a, n);
    static const char *const cols[] = {"text", "config", "policy", "method", "tokens",
                                       "nll_nats_per_token", "bits_per_byte",
                                       "delta_bits_per_byte", "kl_ref", "kl_mean_nats",
                                       "kl_ci95_lo", "kl_ci95_hi", "kl_p99_nats",
                                       "top1_agreement"};
    print_columns(t, cols, sizeof cols / sizeof *cols);
    qmla_table_free(t);
    return QMLA_EXIT_OK;
}

/* /allocate: the chosen configuration per layer and the budget figures. */
static int show_allocate(const char *path)
{
    static const char *const need[] = {"layer", "config", "bytes_per_token", "pred_nmse"};
    qmla_table *t;
    int rc = need_table(path, "allocate", need, 4, &t);
    if (rc)
        return rc;
    print_provenance("group /allocate: per-layer cache configurations (qmla allocate)", t->attrs,
                     t->n_attrs);
    static const char *const lines[][2] = {
        {"budget", "budget"}, {"budget bytes/token", "budget_bytes_per_token"},
        {"bytes/token reached", "bytes_per_token"}, {"predicted total", "pred_total"},
        {"context", "context"}, {"policy", "policy"}, {"candidates", "candidates"}};
    for (size_t k = 0; k < sizeof lines / sizeof *lines; k++)
        print_attr_line(lines[k][0], t->attrs, t->n_attrs, lines[k][1]);
    print_columns(t, need, 4);
    qmla_table_free(t);
    return QMLA_EXIT_OK;
}

/* A whole table, every column (serve-sim, the benchmark's rows). */
static int show_whole(const char *path, const char *name, const char *first)
{
    qmla_table *t;
    const char *need[1] = {first};
    int rc = need_table(path, name, need, 1, &t);
    if (rc)
        return rc;
    const char *cols[32];
    size_t m = 0;
    for (size_t j = 0; j < t->n_cols && m < 32; j++)
        cols[m++] = t->cols[j].name;
    printf("table /%s (%zu rows)\n", name, t->n_rows);
    print_columns(t, cols, m);
    qmla_table_free(t);
    return QMLA_EXIT_OK;
}

/* Columns cols of table `name`, which must hold the columns need. */
static int show_columns(const char *path, const char *name, const char *const *need,
                        size_t nneed, const char *const *cols, size_t ncols)
{
    qmla_table *t;
    int rc = need_table(path, name, need, nneed, &t);
    if (rc)
        return rc;
    print_columns(t, cols, ncols);
    qmla_table_free(t);
    return QMLA_EXIT_OK;
}

static int show_serve(const char *path, const qmla_attr *root, size_t nr)
{
    print_provenance("serve-sim results (qmla serve-sim)", root, nr);
    print_attr_line("requests", root, nr, "requests");
    print_attr_line("input tokens", root, nr, "input_tokens");
    print_attr_line("output tokens", root, nr, "output_tokens");
    static const char *const cols[] = {"config", "throughput", "elapsed_s", "preemptions",
                                       "recomputed_tokens", "output_tokens", "steps",
                                       "max_used_blocks"};
    static const char *const need[] = {"config", "throughput", "preemptions"};
    return show_columns(path, "serve_sim", need, 3, cols, sizeof cols / sizeof *cols);
}

static int show_bench(const char *path, const qmla_attr *root, size_t nr, int brief)
{
    print_provenance("decode benchmark (format qmla-bench)", root, nr);
    print_attr_line("device", root, nr, "device");
    print_attr_line("quick", root, nr, "quick");
    print_attr_line("copy bandwidth (GB/s)", root, nr, "copy_GBps");
    int rc = QMLA_EXIT_OK;
    if (!brief)
        rc = show_whole(path, "rows", "config");
    if (!rc && has_group(path, "table9"))
        rc = show_whole(path, "table9", "batch");
    return rc;
}

static int show_storage(const char *path, const qmla_attr *root, size_t nr)
{
    print_provenance("storage accounting (qmla storage -o)", root, nr);
    static const char *const cols[] = {"config", "meta", "policy", "context", "total_bytes",
                                       "bytes_per_token", "ratio"};
    static const char *const need[] = {"config", "context", "bytes_per_token", "ratio"};
    return show_columns(path, "storage", need, 4, cols, sizeof cols / sizeof *cols);
}

/* The layers a transforms file's settings select ("layers=0-3,7"), 1 each. */
static void transforms_layers(const char *settings, unsigned char *sel, size_t cap)
{
    const char *p = settings ? strstr(settings, "layers=") : NULL;
    if (!p)
        return;
    p += 7;
    while (*p >= '0' && *p <= '9') {
        char *e;
        long a = strtol(p, &e, 10), b = a;
        if (*e == '-')
            b = strtol(e + 1, &e, 10);
        for (long k = a; k <= b && k >= 0 && (size_t)k < cap; k++)
            sel[k] = 1;
        p = *e == ',' ? e + 1 : e;
    }
}

static int show_transforms(const char *path, const qmla_attr *root, size_t nr)
{
    print_provenance("transforms (qmla learn; docs/transforms-format.md)", root, nr);
    print_attr_line("method", root, nr, "method");
    print_attr_line("config", root, nr, "config");
    print_attr_line("train cells", root, nr, "train_cells");
    print_attr_line("settings", root, nr, "settings");
    print_attr_line("complete", root, nr, "complete");
    char **names = NULL;
    size_t n = 0;
    qmla_error err;
    qmla_error_clear(&err);
    if (qmla_group_children(path, "layers", &names, &n, 1, &err))
        return cli_lib_error("show", &err);
    /* numeric order */
    long lay[4096];
    size_t m = 0;
    for (size_t k = 0; k < n && m < 4096; k++)
        lay[m++] = strtol(names[k], NULL, 10);
    for (size_t i = 1; i < m; i++)
        for (size_t j = i; j > 0 && lay[j - 1] > lay[j]; j--) {
            long x = lay[j];
            lay[j] = lay[j - 1];
            lay[j - 1] = x;
        }
    printf("  layers present (%zu):", m);
    for (size_t k = 0; k < m; k++)
        printf(" %ld", lay[k]);
    printf("\n");
    static unsigned char sel[4096];
    memset(sel, 0, sizeof sel);
    transforms_layers(attr_s(root, nr, "settings"), sel, sizeof sel);
    size_t n_missing = 0;
    for (size_t k = 0; k < sizeof sel; k++)
        if (sel[k]) {
            int have = 0;
            for (size_t j = 0; j < m; j++)
                have |= lay[j] == (long)k;
            if (!have)
                printf("%s %zu", n_missing++ ? "" : "  layers missing:", k);
        }
    printf(n_missing ? "\n" : "  layers missing: none\n");
    printf("  %5s %14s %14s %14s %14s\n", "layer", "content_init", "content_best", "rope_init",
           "rope_best");
    for (size_t k = 0; k < m; k++) {
        char g[64];
        snprintf(g, sizeof g, "layers/%ld", lay[k]);
        qmla_attr *a = NULL;
        size_t na = 0;
        if (qmla_group_attrs(path, g, &a, &na, &err)) {
            for (size_t j = 0; j < n; j++)
                free(names[j]);
            free(names);
            return cli_lib_error("show", &err);
        }
        printf("  %5ld %14.6g %14.6g %14.6g %14.6g\n", lay[k],
               attr_d(a, na, "objective_content_init"), attr_d(a, na, "objective_content_best"),
               attr_d(a, na, "objective_rope_init"), attr_d(a, na, "objective_rope_best"));
        qmla_attrs_free(a, na);
    }
    for (size_t j = 0; j < n; j++)
        free(names[j]);
    free(names);
    return QMLA_EXIT_OK;
}

/* A part file of a sharded sweep: its coverage, never its means as the model's. */
static int show_part(const char *path, const qmla_attr *root, size_t nr)
{
    static const char *const need[] = {"layer", "n_seq", "selected"};
    qmla_table *t;
    int rc = need_table(path, "part", need, 3, &t);
    if (rc)
        return rc;
    print_provenance("sweep part file (qmla sweep --shard; merge with qmla merge)", root, nr);
    const double shard = attr_d(t->attrs, t->n_attrs, "shard"),
                 n_shards = attr_d(t->attrs, t->n_attrs, "n_shards");
    const qmla_table_col *cn = qmla_table_column(t, "n_seq"), *cs = qmla_table_column(t, "selected");
    double items = 0;
    for (size_t k = 0; k < t->n_rows; k++)
        if (qmla_values_get(&cs->v, k) != 0)
            items += qmla_values_get(&cn->v, k);
    qmla_table *r = NULL;
    qmla_error err;
    qmla_error_clear(&err);
    size_t held = 0;
    if (qmla_table_read(path, "responses", &r, &err) == QMLA_OK) {
        const qmla_table_col *cp = qmla_table_column(r, "path");
        for (size_t k = 0; cp && cp->v.kind == QMLA_VAL_STRING && k < r->n_rows; k++)
            held += !strcmp(cp->v.s[k], "content");
    }
    qmla_table_free(r);
    const char *cap = attr_s(root, nr, "capture_path");
    printf("capture  %s\n", cap ? cap : "?");
    printf("part     shard %.0f of %.0f (balance %.0f): %zu of the plan's %.0f (layer, cell, "
           "sequence) items; layers %s\n",
           shard, n_shards, attr_d(t->attrs, t->n_attrs, "balance"), held, items,
           attr_s(root, nr, "layers") ? attr_s(root, nr, "layers") : "?");
    printf("         this file's /summary covers this shard's items only, not the model: "
           "merge every part (qmla merge) for the model means\n");
    qmla_table_free(t);
    return QMLA_EXIT_OK;
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
    if (cli_require_args("show", argc, "FILE.h5", NULL, NULL))
        return QMLA_EXIT_USAGE;
    const char *path = argv[optind];
    qmla_error err;
    qmla_error_clear(&err);
    qmla_attr *root = NULL;
    size_t nr = 0;
    if (qmla_file_attrs(path, &root, &nr, &err))
        return cli_lib_error("show", &err);
    const char *format = attr_s(root, nr, "format");
    int rc = QMLA_EXIT_OK;
    if (format && !strcmp(format, "qmla-bench")) {
        rc = show_bench(path, root, nr, brief);
    } else if (format && !strcmp(format, "qmla-serve-sim")) {
        rc = show_serve(path, root, nr);
    } else if (format && !strcmp(format, "qmla-storage")) {
        rc = show_storage(path, root, nr);
    } else if (format && !strcmp(format, "qmla-transforms")) {
        rc = show_transforms(path, root, nr);
    } else if ((format && !strcmp(format, "qmla-results")) || (!format && has_group(path, "eval"))) {
        /* a results file: the sweep's summary (a part file: its coverage),
         * then every group another command added */
        static const char *const groups[] = {"jvp", "predict", "interventions", "eval",
                                             "ppl_table", "allocate", "table9"};
        int shown = 0;
        if (has_group(path, "part")) {
            rc = show_part(path, root, nr);
            shown = 1;
        } else if (has_group(path, "summary")) {
            rc = show_sweep(path, root, nr, brief);
            shown = 1;
        }
        for (size_t k = 0; k < sizeof groups / sizeof *groups && rc == QMLA_EXIT_OK; k++) {
            if (!has_group(path, groups[k]))
                continue;
            if (shown++)
                printf("\n");
            if (!strcmp(groups[k], "jvp") || !strcmp(groups[k], "predict"))
                rc = show_operator(path, groups[k], brief);
            else if (!strcmp(groups[k], "interventions"))
                rc = show_interventions(path);
            else if (!strcmp(groups[k], "eval"))
                rc = show_eval(path, brief);
            else if (!strcmp(groups[k], "allocate"))
                rc = show_allocate(path);
            else if (!strcmp(groups[k], "table9"))
                rc = show_whole(path, "table9", "batch");
            else
                rc = show_ppl(path);
        }
        if (!shown)
            rc = cli_fail("show", "%s: expected one of the groups /summary, /part, /jvp, "
                          "/predict, /interventions, /eval, /ppl_table, /allocate, /table9, "
                          "found none", path);
    } else {
        cli_fail("show", "%s: root attribute format: expected \"qmla-results\", \"qmla-bench\", "
                 "\"qmla-serve-sim\", \"qmla-storage\" or \"qmla-transforms\" (or a group "
                 "/eval), found %s%s%s",
                 path, format ? "\"" : "", format ? format : "none", format ? "\"" : "");
        rc = QMLA_EXIT_USAGE;
    }
    qmla_attrs_free(root, nr);
    return rc;
}
