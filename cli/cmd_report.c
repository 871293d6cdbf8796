/* cmd_report.c — `qmla report`: one self-contained HTML page (no network:
 * figures inline as SVG, the style and the one script inline) for one or
 * more files qmla wrote: the provenance of every input, the per-layer and
 * per-path responses and gains ranked with a cache-configuration and
 * policy suggestion derived from them, every figure `qmla figures` can
 * draw from the inputs (its registry, cli_figure_count / cli_figure_at:
 * a figure added there appears here without a change), its tables
 * (Markdown + CSV renderers: the CSV), and every table of every input.
 *
 *   qmla report results/default-sweep.h5 -o results/report.html
 *
 * docs/report.md describes the page and how its suggestion is derived. */
#include "cli.h"
#include "cli_safe.h"
#include "qmla/export.h"
#include "qmla/outpath.h"
#include "qmla/table.h"
#include "qmla/text.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REPORT_MAX_INPUTS 64
#define REPORT_MAX_LAYERS 4096
#define SINK_FACTOR 8.0 /* a leading token is a sink when sigma_t >= 8 x its series' mean */
#define POLICY_LOCAL 128

static void help(FILE *f, const void *ctx)
{
    (void)ctx;
    fprintf(f,
        "usage: qmla report RESULTS.h5 [MORE.h5 ...] -o REPORT.html [--budget C4R4]\n"
        "                   [--max-rows 200] [--no-figures] [--exclude NAME,...]\n"
        "                   [--plots DIR] [--gnuplot PATH]\n"
        "\n"
        "Write one HTML page about the files qmla wrote (results of sweep, predict,\n"
        "jvp, intervene, eval, ppl; serve-sim and benchmark files; transforms). The\n"
        "page is self-contained: open it in any browser, offline; figures are inline\n"
        "SVG, there is no external style sheet, script or font. It holds:\n"
        "  - where every input came from: its root attributes (the command line, the\n"
        "    time, tool version, git commit, engine, input hashes) and the provenance\n"
        "    of every group a later command added;\n"
        "  - per results file, the (layer, path) pairs ranked, most sensitive first:\n"
        "    the sweep's responses R (/summary) and the local and finite gains of\n"
        "    /predict and /jvp; then a suggested --config (same cache bytes as\n"
        "    --budget), a per-layer configuration and a --policy sinkS/localW, with\n"
        "    how each is derived (docs/report.md);\n"
        "  - every figure and table `qmla figures` can draw from the inputs: files\n"
        "    of one format drawn together (one model per panel or line, as qmla\n"
        "    figures draws them), and a figure they cannot share (its data missing\n"
        "    from one of them) drawn for each file alone; the names of those that\n"
        "    cannot be drawn, with the data they need;\n"
        "  - every table of every input (the first --max-rows rows of each; the\n"
        "    whole table: qmla export FILE --table NAME).\n"
        "Every text from a file is HTML-escaped. The page is written atomically:\n"
        "refused when -o is one of the inputs, a directory, or an existing file that\n"
        "is not an HTML page.\n"
        "\n"
        "  -o FILE         the HTML page to write (required)\n"
        "  --budget CxRy   the cache configuration whose bytes the suggestion keeps\n"
        "                  (default C4R4; x, y in 2, 3, 4, 8)\n"
        "  --max-rows N    rows shown per table (default 200, 1..1000000)\n"
        "  --no-figures    leave the figures out (no gnuplot needed)\n"
        "  --exclude LIST  neither draw nor list as not drawn these figures (as for\n"
        "                  qmla figures; scripts/run-main.sh passes the figures'\n"
        "                  exclusion: the data of those its steps do not make)\n"
        "  --plots DIR     the gnuplot scripts (as for qmla figures)\n"
        "  --gnuplot PATH  the gnuplot program (as for qmla figures)\n"
        "\n"
        "examples:\n"
        "  qmla report results/default-sweep.h5 -o results/report.html\n"
        "  qmla report full.h5 full-nu1e-3.h5 serve.h5 -o report.html --budget C3R4\n");
}

/* ---- HTML text ------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s (1..4), 0 when it is not one. */
static size_t u8len(const unsigned char *s)
{
    if (s[0] < 0x80)
        return 1;
    size_t n = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : (s[0] & 0xf0) == 0xe0 ? 3
             : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
    for (size_t k = 1; k < n; k++)
        if ((s[k] & 0xc0) != 0x80)
            return 0;
    if (n == 3 && ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0)))
        return 0; /* overlong, surrogate */
    if (n == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90)))
        return 0;
    return n;
}

/* s HTML-escaped (text and quoted attribute values alike): & < > " ' as
 * references, control characters and invalid UTF-8 as U+FFFD. */
static void esc(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        switch (*p) {
        case '&': fputs("&amp;", f); p++; continue;
        case '<': fputs("&lt;", f); p++; continue;
        case '>': fputs("&gt;", f); p++; continue;
        case '"': fputs("&quot;", f); p++; continue;
        case '\'': fputs("&#39;", f); p++; continue;
        default: break;
        }
        const size_t n = u8len(p);
        if (n == 0 || (*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f ||
            (p[0] == 0xc2 && p[1] < 0xa0)) {
            fputs("\xef\xbf\xbd", f);
            p += n ? n : 1;
            continue;
        }
        fwrite(p, 1, n, f);
        p += n;
    }
}

/* A value as text: floats the shortest exact decimal (qmla_export_double). */
static void value_text(const qmla_values *v, size_t k, char *buf, size_t len)
{
    switch (v->kind) {
    case QMLA_VAL_INT: snprintf(buf, len, "%lld", (long long)v->i[k]); break;
    case QMLA_VAL_UINT: snprintf(buf, len, "%llu", (unsigned long long)v->u[k]); break;
    case QMLA_VAL_FLOAT: qmla_export_double(v->d[k], buf, len); break;
    default: snprintf(buf, len, "%s", v->s[k] ? v->s[k] : ""); break;
    }
}

/* One number cell: the value rounded to 6 digits, the exact one in data-v. */
static void num_td(FILE *f, double x)
{
    char exact[40];
    qmla_export_double(x, exact, sizeof exact);
    if (isfinite(x))
        fprintf(f, "<td class=n data-v=\"%s\">%.6g</td>", exact, x);
    else
        fprintf(f, "<td class=n data-v=\"%s\">%s</td>", exact, exact);
}

static void value_td(FILE *f, const qmla_values *v, size_t k)
{
    if (v->kind == QMLA_VAL_FLOAT) {
        num_td(f, v->d[k]);
        return;
    }
    char buf[64];
    if (v->kind != QMLA_VAL_STRING) {
        value_text(v, k, buf, sizeof buf);
        fprintf(f, "<td class=n data-v=\"%s\">%s</td>", buf, buf);
        return;
    }
    fputs("<td>", f);
    esc(f, v->s[k]);
    fputs("</td>", f);
}

/* An attribute's value(s) as escaped text (arrays: comma-separated). */
static void attr_value(FILE *f, const qmla_attr *a)
{
    char buf[64];
    for (size_t k = 0; k < a->v.n; k++) {
        if (k)
            fputs(", ", f);
        if (k == 32) {
            fprintf(f, "&hellip; (%zu values)", a->v.n);
            break;
        }
        if (a->v.kind == QMLA_VAL_STRING) {
            esc(f, a->v.s[k]);
        } else {
            value_text(&a->v, k, buf, sizeof buf);
            fputs(buf, f);
        }
    }
}

static const char *attr_str(const qmla_attr *a, size_t n, const char *name)
{
    const qmla_attr *x = qmla_attr_find(a, n, name);
    return x && x->v.kind == QMLA_VAL_STRING && x->v.n ? x->v.s[0] : NULL;
}

static double attr_num(const qmla_attr *a, size_t n, const char *name)
{
    const qmla_attr *x = qmla_attr_find(a, n, name);
    return x && x->v.kind != QMLA_VAL_STRING && x->v.n ? qmla_values_get(&x->v, 0) : NAN;
}

/* The provenance keys (lib/io/group.c, the capture tools' inputs), first
 * and highlighted in every attribute table; the rest follow in name order. */
static const char *const prov_keys[] = {
    "format", "format_version", "tool", "tool_version", "git_commit", "engine",
    "engine_device", "created_utc", "command_line", "command", "elapsed_s", "threads",
    "blas", "cpu", "capture_file", "capture_path", "capture_sha256", "model_dir",
    "capture", "scenario", "calibrated_from", "model", NULL};

static int is_prov(const char *name)
{
    for (size_t k = 0; prov_keys[k]; k++)
        if (!strcmp(prov_keys[k], name))
            return 1;
    return strstr(name, "sha256") != NULL;
}

/* The attributes as a table: the provenance ones first (passes 0..1 of
 * [first, last]: 0 provenance, 1 the others). */
static void attr_table(FILE *f, const qmla_attr *a, size_t n, const char *cls, int first,
                       int last)
{
    fprintf(f, "<table class=\"attrs %s\"><tr><th>attribute</th><th>value</th></tr>\n", cls);
    for (int pass = first; pass <= last; pass++)
        for (size_t k = 0; k < n; k++) {
            if (is_prov(a[k].name) != !pass)
                continue;
            fprintf(f, "<tr%s data-attr=\"", pass ? "" : " class=prov");
            esc(f, a[k].name);
            fputs("\"><td>", f);
            esc(f, a[k].name);
            fputs("</td><td>", f);
            attr_value(f, &a[k]);
            fputs("</td></tr>\n", f);
        }
    fputs("</table>\n", f);
}

/* ---- sensitivity: ranking and suggestion --------------------------------- */

typedef struct lp_stat {
    double r, r_lo, r_hi;        /* /summary response (NaN: none) */
    int degenerate;              /* /summary marks the layer degenerate */
    double pf, pj; size_t pn;    /* /predict development direction: mean g_finite, g_jvp */
    double jf, jj; size_t jn;    /* /jvp likewise */
    double key;                  /* the ranking metric */
    int bits;                    /* the suggested width */
} lp_stat;

typedef struct sens {
    size_t n_layers;
    int layer[REPORT_MAX_LAYERS];
    lp_stat s[REPORT_MAX_LAYERS][2]; /* [layer index][0 content, 1 RoPE] */
    int have_summary, have_predict, have_jvp;
    char pred_dir[96], jvp_dir[96]; /* the direction the gains are means over */
    const char *key_name;          /* what ranks */
} sens;

static size_t layer_index(sens *S, int layer)
{
    for (size_t k = 0; k < S->n_layers; k++)
        if (S->layer[k] == layer)
            return k;
    if (S->n_layers == REPORT_MAX_LAYERS)
        return (size_t)-1;
    const size_t k = S->n_layers++;
    S->layer[k] = layer;
    for (int p = 0; p < 2; p++) {
        lp_stat *x = &S->s[k][p];
        memset(x, 0, sizeof *x);
        x->r = x->r_lo = x->r_hi = x->pf = x->pj = x->jf = x->jj = x->key = NAN;
    }
    return k;
}

static const qmla_table_col *num_col(const qmla_table *t, const char *name)
{
    const qmla_table_col *c = qmla_table_column(t, name);
    return c && c->v.kind != QMLA_VAL_STRING ? c : NULL;
}

/* /summary: responses per layer and path. 0, or -1 when absent/unusable. */
static int sens_summary(const char *path, sens *S)
{
    qmla_table *t = NULL;
    qmla_error e;
    if (qmla_table_read(path, "summary", &t, &e))
        return -1;
    const qmla_table_col *cl = num_col(t, "layer"), *cr[2] = {num_col(t, "response_content"),
                                                              num_col(t, "response_rope")},
                         *lo[2] = {num_col(t, "response_content_lo"), num_col(t, "response_rope_lo")},
                         *hi[2] = {num_col(t, "response_content_hi"), num_col(t, "response_rope_hi")},
                         *cd = num_col(t, "degenerate");
    if (!cl || !cr[0] || !cr[1]) {
        qmla_table_free(t);
        return -1;
    }
    for (size_t k = 0; k < t->n_rows; k++) {
        const size_t i = layer_index(S, (int)qmla_values_get(&cl->v, k));
        if (i == (size_t)-1)
            break;
        for (int p = 0; p < 2; p++) {
            lp_stat *x = &S->s[i][p];
            x->r = qmla_values_get(&cr[p]->v, k);
            x->r_lo = lo[p] ? qmla_values_get(&lo[p]->v, k) : NAN;
            x->r_hi = hi[p] ? qmla_values_get(&hi[p]->v, k) : NAN;
            x->degenerate = cd ? qmla_values_get(&cd->v, k) != 0 : !(isfinite(x->r) && x->r > 0);
        }
    }
    qmla_table_free(t);
    S->have_summary = 1;
    return 0;
}

/* /predict or /jvp: per layer and path the mean g_finite and g_jvp over
 * the non-degenerate points of the development direction (heldout 0; /jvp,
 * which has every width as a development direction: INT4 when present,
 * else the first width). */
static int sens_operator(const char *path, const char *group, sens *S)
{
    qmla_table *t = NULL;
    qmla_error e;
    if (qmla_table_read_any(path, group, &t, &e))
        return -1;
    const qmla_table_col *cl = num_col(t, "layer"), *cp = num_col(t, "path"),
                         *cf = num_col(t, "g_finite"), *cj = num_col(t, "g_jvp"),
                         *cd = num_col(t, "degenerate"), *ch = num_col(t, "heldout"),
                         *cb = num_col(t, "bits"), *cg = num_col(t, "group"),
                         *cn = num_col(t, "nmse");
    if (!cl || !cp || !cf || !cj || !t->n_rows) {
        qmla_table_free(t);
        return -1;
    }
    const int pred = !strcmp(group, "predict");
    double want_bits = NAN;
    if (!pred && cb) {
        want_bits = qmla_values_get(&cb->v, 0);
        for (size_t k = 0; k < t->n_rows; k++)
            if (qmla_values_get(&cb->v, k) == 4)
                want_bits = 4;
    }
    char *dir = pred ? S->pred_dir : S->jvp_dir;
    dir[0] = '\0';
    int mixed = 0;
    for (size_t k = 0; k < t->n_rows; k++) {
        if (pred && ch && qmla_values_get(&ch->v, k) != 0)
            continue;
        if (!pred && cb && qmla_values_get(&cb->v, k) != want_bits)
            continue;
        char d[96];
        snprintf(d, sizeof d, "INT%.0f/G%.0f/ν=%g", cb ? qmla_values_get(&cb->v, k) : NAN,
                 cg ? qmla_values_get(&cg->v, k) : NAN, cn ? qmla_values_get(&cn->v, k) : NAN);
        if (!dir[0])
            snprintf(dir, 96, "%s", d);
        else if (strcmp(dir, d))
            mixed = 1;
        if (cd && qmla_values_get(&cd->v, k) != 0)
            continue;
        const int p = qmla_values_get(&cp->v, k) != 0;
        const size_t i = layer_index(S, (int)qmla_values_get(&cl->v, k));
        if (i == (size_t)-1)
            break;
        lp_stat *x = &S->s[i][p];
        double *sf = pred ? &x->pf : &x->jf, *sj = pred ? &x->pj : &x->jj;
        size_t *m = pred ? &x->pn : &x->jn;
        if (!*m)
            *sf = *sj = 0;
        *sf += qmla_values_get(&cf->v, k);
        *sj += qmla_values_get(&cj->v, k);
        (*m)++;
    }
    if (mixed)
        snprintf(dir, 96, "%s", "several directions (heldout 0)");
    for (size_t i = 0; i < S->n_layers; i++)
        for (int p = 0; p < 2; p++) {
            lp_stat *x = &S->s[i][p];
            const size_t m = pred ? x->pn : x->jn;
            if (m) {
                *(pred ? &x->pf : &x->jf) /= (double)m;
                *(pred ? &x->pj : &x->jj) /= (double)m;
            }
        }
    qmla_table_free(t);
    if (pred)
        S->have_predict = 1;
    else
        S->have_jvp = 1;
    return 0;
}

static const int widths[4] = {2, 3, 4, 8};

/* Relative cache error of a b-bit uniform quantizer: 4^-b (each bit
 * quarters the error energy: the step halves). */
static double qerr(int b) { return ldexp(1.0, -2 * b); }

static int usable(const lp_stat *x) { return isfinite(x->key) && x->key > 0; }

/* Greedy allocation (docs/report.md): every usable (layer, path) starts at
 * 2 bits; repeatedly the one whose next width buys the largest drop of
 * key * 4^-b per cache bit is raised, while the cache bits stay within the
 * budget's (d_c * bc + d_r * br per layer); unusable pairs keep the
 * budget's widths. Fills s[][].bits. */
static void allocate(sens *S, const double d[2], const int bud[2])
{
    double left = 0;
    for (size_t i = 0; i < S->n_layers; i++)
        for (int p = 0; p < 2; p++) {
            lp_stat *x = &S->s[i][p];
            left += d[p] * bud[p];
            x->bits = usable(x) ? 2 : bud[p];
            left -= d[p] * x->bits;
        }
    for (;;) {
        double best = 0;
        size_t bi = 0;
        int bp = -1, bw = 0;
        for (size_t i = 0; i < S->n_layers; i++)
            for (int p = 0; p < 2; p++) {
                const lp_stat *x = &S->s[i][p];
                if (!usable(x) || x->bits == 8)
                    continue;
                int w = 0;
                while (widths[w] != x->bits)
                    w++;
                const int nb = widths[w + 1];
                const double cost = d[p] * (nb - x->bits);
                if (cost > left + 1e-9)
                    continue;
                const double gain = x->key * (qerr(x->bits) - qerr(nb)) / cost;
                if (gain > best) { /* ties: the first in layer order, content first */
                    best = gain;
                    bi = i;
                    bp = p;
                    bw = nb;
                }
            }
        if (bp < 0)
            break;
        left -= d[bp] * (bw - S->s[bi][bp].bits);
        S->s[bi][bp].bits = bw;
    }
}

/* sum over usable pairs of key * 4^-b with b the pair's width (uniform
 * widths ub[2] when ub != NULL). */
static double pred_err(const sens *S, const int *ub)
{
    double e = 0;
    for (size_t i = 0; i < S->n_layers; i++)
        for (int p = 0; p < 2; p++)
            if (usable(&S->s[i][p]))
                e += S->s[i][p].key * qerr(ub ? ub[p] : S->s[i][p].bits);
    return e;
}

/* The leading sink tokens from /predict's exact sensitivities sigma_t (one
 * series per layer, cell, sequence and path): position t < T/4 counts as a
 * sink when sigma_t >= SINK_FACTOR x the series' mean in at least half the
 * series; *sink = the number of leading positions that all count (0: none).
 * *share: the mean over series of the share of sum sigma the first *sink
 * tokens carry. 0, or -1 when the file has no sensitivities. */
static int sens_sinks(const char *path, size_t *sink, double *share, size_t *n_series)
{
    char **names = NULL;
    size_t nn = 0;
    qmla_error e;
    if (qmla_table_list(path, &names, &nn, &e))
        return -1;
    const qmla_table_col *cs = NULL, *co = NULL, *ct = NULL;
    qmla_table *ts[2] = {NULL, NULL};
    for (size_t k = 0; k < nn; k++) {
        if ((!strcmp(names[k], "predict") || !strncmp(names[k], "predict:", 8)) && (!cs || !co)) {
            qmla_table *t = NULL;
            if (qmla_table_read_any(path, names[k], &t, &e) == QMLA_OK) {
                const qmla_table_col *c = qmla_table_column(t, "sensitivity");
                if (!cs && c && c->v.kind == QMLA_VAL_FLOAT) {
                    cs = c;
                    ts[0] = t;
                    t = NULL;
                } else if (!co && num_col(t, "sens_offset") && num_col(t, "sens_T")) {
                    co = num_col(t, "sens_offset");
                    ct = num_col(t, "sens_T");
                    ts[1] = t;
                    t = NULL;
                }
                qmla_table_free(t);
            }
        }
        free(names[k]);
    }
    free(names);
    int rc = -1;
    *sink = 0;
    *share = NAN;
    *n_series = 0;
    if (cs && co) {
        size_t tmin = SIZE_MAX;
        const size_t ni = ts[1]->n_rows, nv = ts[0]->n_rows;
        int ok = ni > 0;
        for (size_t i = 0; i < ni && ok; i++) {
            const double o = qmla_values_get(&co->v, i), T = qmla_values_get(&ct->v, i);
            ok = o >= 0 && T >= 1 && o + 2 * T <= (double)nv;
            if (ok && (size_t)T < tmin)
                tmin = (size_t)T;
        }
        if (ok) {
            const size_t lim = tmin / 4, ns = 2 * ni;
            double *mean = malloc(ns * sizeof *mean), *sum = malloc(ns * sizeof *sum);
            size_t *off = malloc(ns * sizeof *off), s = 0;
            if (!mean || !sum || !off) {
                free(mean);
                free(sum);
                free(off);
                qmla_table_free(ts[0]);
                qmla_table_free(ts[1]);
                return -1;
            }
            for (size_t q = 0; q < ns; q++) {
                const size_t T = (size_t)qmla_values_get(&ct->v, q / 2);
                off[q] = (size_t)qmla_values_get(&co->v, q / 2) + (q % 2) * T;
                sum[q] = 0;
                for (size_t t = 0; t < T; t++)
                    sum[q] += cs->v.d[off[q] + t];
                mean[q] = sum[q] / (double)T;
            }
            for (; s < lim; s++) {
                size_t hits = 0;
                for (size_t q = 0; q < ns; q++)
                    hits += cs->v.d[off[q] + s] >= SINK_FACTOR * mean[q];
                if (2 * hits < ns)
                    break;
            }
            double sh = 0;
            for (size_t q = 0; q < ns; q++) {
                double lead = 0;
                for (size_t t = 0; t < s; t++)
                    lead += cs->v.d[off[q] + t];
                sh += sum[q] > 0 ? lead / sum[q] : 0;
            }
            free(mean);
            free(sum);
            free(off);
            *sink = s;
            *share = sh / (double)ns;
            *n_series = ns;
            rc = 0;
        }
    }
    qmla_table_free(ts[0]);
    qmla_table_free(ts[1]);
    return rc;
}

static int parse_cfg(const char *s, int b[2])
{
    int x, y;
    char tail;
    if (sscanf(s, "C%dR%d%c", &x, &y, &tail) != 2)
        return -1;
    int okx = 0, oky = 0;
    for (int k = 0; k < 4; k++) {
        okx |= widths[k] == x;
        oky |= widths[k] == y;
    }
    if (!okx || !oky)
        return -1;
    b[0] = x;
    b[1] = y;
    return 0;
}

static int cmp_key(const void *a, const void *b)
{
    const lp_stat *x = *(const lp_stat *const *)a, *y = *(const lp_stat *const *)b;
    const int ux = isfinite(x->key), uy = isfinite(y->key);
    if (ux != uy)
        return uy - ux; /* NaN last */
    if (ux && x->key != y->key)
        return x->key < y->key ? 1 : -1;
    return x < y ? -1 : x > y; /* stable: layer order, content first */
}

/* The ranking and the suggestion for one results file; nothing when it
 * holds neither /summary, /predict nor /jvp. */
static void section_sensitivity(FILE *f, size_t idx, const char *path, const qmla_attr *root,
                                size_t nr, const int bud[2])
{
    static sens S; /* large: 4096 layers */
    memset(&S, 0, sizeof S);
    sens_summary(path, &S);
    sens_operator(path, "predict", &S);
    sens_operator(path, "jvp", &S);
    if (!S.have_summary && !S.have_predict && !S.have_jvp)
        return;
    fprintf(f, "<h3>");
    esc(f, path);
    fprintf(f, "</h3>\n");
    S.key_name = S.have_summary ? "response R (/summary)"
               : S.have_predict ? "finite gain g_finite (/predict)" : "finite gain g_finite (/jvp)";
    lp_stat *order[2 * REPORT_MAX_LAYERS];
    size_t n = 0;
    for (size_t i = 0; i < S.n_layers; i++)
        for (int p = 0; p < 2; p++) {
            lp_stat *x = &S.s[i][p];
            x->key = S.have_summary ? (x->degenerate ? NAN : x->r)
                   : S.have_predict ? (x->pn ? x->pf : NAN) : (x->jn ? x->jf : NAN);
            order[n++] = x;
        }
    double d[2] = {attr_num(root, nr, "d_c"), attr_num(root, nr, "d_r")};
    const int dims = isfinite(d[0]) && isfinite(d[1]) && d[0] > 0 && d[1] > 0;
    if (!dims)
        d[0] = d[1] = 1;
    allocate(&S, d, bud);
    qsort(order, n, sizeof *order, cmp_key);
    fprintf(f, "<p>Ranked by the %s, most sensitive first (rank 1). The gains are means over "
               "the non-degenerate points of one direction: /predict %s, /jvp %s. Bits: the "
               "suggested width (below).</p>\n",
            S.key_name, S.have_predict ? S.pred_dir : "(absent)", S.have_jvp ? S.jvp_dir : "(absent)");
    fprintf(f, "<table class=rank data-file=\"%zu\" data-rank-key=\"%s\"><tr><th>rank</th>"
               "<th>layer</th><th>path</th><th>response R</th><th>R 95%% low</th>"
               "<th>R 95%% high</th><th>g_finite (predict)</th><th>g_jvp (predict)</th>"
               "<th>g_finite (jvp)</th><th>g_jvp (jvp)</th><th>bits</th></tr>\n",
            idx, S.have_summary ? "summary" : S.have_predict ? "predict" : "jvp");
    for (size_t r = 0; r < n; r++) {
        const lp_stat *x = order[r];
        const size_t k = (size_t)(x - &S.s[0][0]);
        const int p = (int)(k % 2);
        fprintf(f, "<tr%s><td class=n>%zu</td><td class=n data-v=\"%d\">%d</td><td>%s</td>",
                p ? " class=rope" : "", r + 1, S.layer[k / 2], S.layer[k / 2],
                p ? "rope" : "content");
        num_td(f, x->r);
        num_td(f, x->r_lo);
        num_td(f, x->r_hi);
        num_td(f, x->pn ? x->pf : NAN);
        num_td(f, x->pn ? x->pj : NAN);
        num_td(f, x->jn ? x->jf : NAN);
        num_td(f, x->jn ? x->jj : NAN);
        fprintf(f, "<td class=n>%d</td></tr>\n", x->bits);
    }
    fputs("</table>\n", f);

    /* the uniform configuration of the same bytes with the least predicted error */
    const double budget = d[0] * bud[0] + d[1] * bud[1];
    int best[2] = {bud[0], bud[1]};
    double be = pred_err(&S, best);
    const double e_budget = be;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            const int u[2] = {widths[a], widths[b]};
            if (d[0] * u[0] + d[1] * u[1] > budget + 1e-9)
                continue;
            const double e = pred_err(&S, u);
            if (e < be * (1 - 1e-12)) {
                be = e;
                best[0] = u[0];
                best[1] = u[1];
            }
        }
    const double e_alloc = pred_err(&S, NULL);
    size_t sink = 0, n_series = 0;
    double share = NAN;
    const int have_sinks = sens_sinks(path, &sink, &share, &n_series) == 0;
    char policy[64];
    if (!have_sinks)
        snprintf(policy, sizeof policy, "sink4/local%d", POLICY_LOCAL);
    else if (sink)
        snprintf(policy, sizeof policy, "sink%zu/local%d", sink, POLICY_LOCAL);
    else
        snprintf(policy, sizeof policy, "none");
    fprintf(f, "<div class=suggest data-file=\"%zu\" data-budget=\"C%dR%d\">\n<p><b>Suggested"
               "</b> (cache bytes of C%dR%d):</p>\n<pre>--config C%dR%d --policy <span "
               "data-policy>%s</span>\nper-layer: <span data-per-layer>",
            idx, bud[0], bud[1], bud[0], bud[1], best[0], best[1], policy);
    for (size_t i = 0; i < S.n_layers; i++)
        fprintf(f, "%s%d:C%dR%d", i ? "," : "", S.layer[i], S.s[i][0].bits, S.s[i][1].bits);
    char cfgs[64];
    if (best[0] == bud[0] && best[1] == bud[1])
        snprintf(cfgs, sizeof cfgs, "C%dR%d", bud[0], bud[1]);
    else
        snprintf(cfgs, sizeof cfgs, "C%dR%d,C%dR%d", bud[0], bud[1], best[0], best[1]);
    fprintf(f, "</span>\ncheck it:  qmla ppl MODEL_DIR --text TEXT --config bf16,%s "
               "--policy none,%s -o check.h5</pre>\n", cfgs, policy);
    fprintf(f, "<p data-uniform=\"C%dR%d\">How: the predicted output error of a cache "
               "configuration is the sum over (layer, path) of its %s times 4<sup>&minus;b</sup> "
               "(a b-bit quantizer's error energy quarters per bit; the response is output NMSE "
               "per unit of cache NMSE, docs/math.md §3). <i>--config</i>: of the uniform "
               "configurations C<i>x</i>R<i>y</i> (x, y in 2, 3, 4, 8) whose cache bits per token "
               "and layer, %s&middot;x + %s&middot;y, do not exceed C%dR%d's, the one with the "
               "least predicted error: %.4g&times; C%dR%d's. <i>per-layer</i>: every pair starts "
               "at 2 bits and the pair whose next width (3, 4, 8) buys the largest drop of "
               "predicted error per cache bit is raised, while the total stays within the same "
               "bytes: %.4g&times; C%dR%d's predicted error. qmla's own commands take one "
               "configuration for every layer; the per-layer line is for an engine that takes "
               "widths per layer. Pairs without a usable value (degenerate) keep C%dR%d.%s</p>\n",
            best[0], best[1], S.key_name, dims ? "d_c" : "1", dims ? "d_r" : "1", bud[0], bud[1],
            e_budget > 0 ? be / e_budget : NAN, bud[0], bud[1],
            e_budget > 0 ? e_alloc / e_budget : NAN, bud[0], bud[1], bud[0], bud[1],
            dims ? "" : " (the file records no d_c and d_r: both paths weighted alike)");
    if (have_sinks)
        fprintf(f, "<p>--policy: from /predict's exact per-token sensitivities &sigma;<sub>t</sub> "
                   "(%zu series: layer &times; cell &times; sequence &times; path): a leading "
                   "position is a sink when &sigma;<sub>t</sub> &ge; %g&times; its series' mean in "
                   "at least half the series; the first <b>%zu</b> positions are, carrying on "
                   "average %.3g of &sum;&sigma;<sub>t</sub>. The local window (%d) is qmla's "
                   "default, not derived: &sigma;<sub>t</sub> is a key position's sensitivity "
                   "summed over queries and says nothing about recency.</p>\n",
                n_series, SINK_FACTOR, sink, share, POLICY_LOCAL);
    else
        fprintf(f, "<p>--policy: qmla's default sink4/local%d, not derived (the file has no "
                   "/predict sensitivities: <code>qmla predict CAPTURE -o THIS.h5</code>).</p>\n",
                POLICY_LOCAL);
    fputs("</div>\n", f);
}

/* ---- figures: `qmla figures --format svg` into a temporary folder -------- */

/* Run cmd_figures in a child process on inputs idx[0..n) into dir (its
 * output in dir/figures.log). Returns its exit status (-1: not started). */
static int run_figures(char *const *paths, const size_t *idx, size_t n, const char *dir,
                       const char *only, const char *exclude, const char *plots,
                       const char *gnuplot)
{
    char log[PATH_MAX];
    snprintf(log, sizeof log, "%s/figures.log", dir);
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        const int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0666);
        if (fd < 0)
            _exit(126);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
        char **av = calloc(n + 16, sizeof *av);
        if (!av)
            _exit(126);
        int ac = 0;
        av[ac++] = "figures";
        for (size_t k = 0; k < n; k++)
            av[ac++] = paths[idx[k]];
        av[ac++] = "-o";
        av[ac++] = (char *)dir;
        av[ac++] = "--format";
        av[ac++] = "svg";
        if (only) {
            av[ac++] = "--only";
            av[ac++] = (char *)only;
        }
        if (exclude) {
            av[ac++] = "--exclude";
            av[ac++] = (char *)exclude;
        }
        if (plots) {
            av[ac++] = "--plots";
            av[ac++] = (char *)plots;
        }
        if (gnuplot) {
            av[ac++] = "--gnuplot";
            av[ac++] = (char *)gnuplot;
        }
        const int rc = cmd_figures(ac, av);
        free(av);
        fflush(NULL);
        _exit(rc);
    }
    /* Ctrl-C reaches the child too (one process group): the parent waits
     * for it, then removes the temporary folder and exits 130 */
    struct sigaction ign, old_int, old_term;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigaction(SIGINT, &ign, &old_int);
    sigaction(SIGTERM, &ign, &old_term);
    int status = 0, rc;
    for (;;) {
        if (waitpid(pid, &status, 0) >= 0) {
            rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            break;
        }
        if (errno != EINTR) {
            rc = -1;
            break;
        }
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    return rc;
}

static int read_whole(const char *path, char **buf, size_t *n)
{
    uint8_t *b = NULL;
    qmla_error e;
    if (qmla_text_read(path, &b, n, &e))
        return -1;
    char *s = realloc(b, *n + 1);
    if (!s) {
        free(b);
        return -1;
    }
    s[*n] = '\0';
    *buf = s;
    return 0;
}

/* The <svg> element of a gnuplot SVG file, inline, its ids (and the
 * references to them) prefixed with `prefix` so that several figures'
 * ids do not collide. Refused (-1, why) when it holds a script, a foreign
 * object or a reference to anything outside itself (inline PNG images,
 * gnuplot's `with image`, are kept). */
static int inline_svg(FILE *f, const char *path, const char *prefix, char *why, size_t len)
{
    char *s = NULL;
    size_t n = 0;
    if (read_whole(path, &s, &n)) {
        snprintf(why, len, "%s: cannot read", path);
        return -1;
    }
    char *a = strstr(s, "<svg"), *b = NULL;
    for (char *p = a; p && (p = strstr(p, "</svg>")); p += 6)
        b = p + 6;
    if (!a || !b) {
        snprintf(why, len, "%s: expected an <svg> element, found none", path);
        free(s);
        return -1;
    }
    *b = '\0';
    static const char *const bad[] = {"<script", "<foreignobject", "javascript:", "<iframe",
                                      "@import", NULL};
    for (char *p = a; *p; p++) {
        for (size_t k = 0; bad[k]; k++)
            if (!strncasecmp(p, bad[k], strlen(bad[k]))) {
                snprintf(why, len, "%s: refused: holds \"%s\"", path, bad[k]);
                free(s);
                return -1;
            }
        if (!strncmp(p, "href=", 5) && (p[5] == '"' || p[5] == '\'') && p[6] != '#' &&
            strncmp(p + 6, "data:image/png;base64,", 22)) {
            snprintf(why, len, "%s: refused: a reference outside the figure (href=%.40s)", path,
                     p + 5);
            free(s);
            return -1;
        }
    }
    static const char *const pre[] = {"id=\"", "id='", "href=\"#", "href='#", "url(#", NULL};
    for (char *p = a; *p;) {
        size_t m = 0;
        for (size_t k = 0; pre[k] && !m; k++)
            if (!strncmp(p, pre[k], strlen(pre[k])) &&
                (pre[k][0] == 'u' || p == a || p[-1] == ' ' || p[-1] == '\t' || p[-1] == '\n' ||
                 p[-1] == ':'))
                m = strlen(pre[k]);
        if (m) {
            fwrite(p, 1, m, f);
            fputs(prefix, f);
            p += m;
        } else {
            fputc(*p++, f);
        }
    }
    free(s);
    return 0;
}

/* A CSV file (RFC 4180, as qmla figures writes its tables) as an HTML
 * table, the first row the header. */
static int csv_table(FILE *f, const char *path, const char *name)
{
    char *s = NULL;
    size_t n = 0;
    if (read_whole(path, &s, &n))
        return -1;
    fputs("<div class=scroll><table class=data data-csv=\"", f);
    esc(f, name);
    fputs("\">\n<tr>", f);
    int header = 1, quoted = 0;
    char *cell = malloc(n + 1);
    size_t cl = 0;
    if (!cell) {
        free(s);
        return -1;
    }
    for (size_t k = 0; k <= n; k++) {
        const char c = k < n ? s[k] : '\n';
        if (quoted) {
            if (c == '"' && k + 1 < n && s[k + 1] == '"') {
                cell[cl++] = '"';
                k++;
            } else if (c == '"') {
                quoted = 0;
            } else {
                cell[cl++] = c;
            }
            continue;
        }
        if (c == '"') {
            quoted = 1;
        } else if (c == ',' || c == '\n') {
            cell[cl] = '\0';
            fputs(header ? "<th>" : "<td>", f);
            esc(f, cell);
            fputs(header ? "</th>" : "</td>", f);
            cl = 0;
            if (c == '\n') {
                header = 0;
                fputs(k + 1 < n ? "</tr>\n<tr>" : "</tr>\n", f);
            }
        } else if (c != '\r') {
            cell[cl++] = c;
        }
    }
    fputs("</table></div>\n", f);
    free(cell);
    free(s);
    return 0;
}

/* Remove the folder qmla figures wrote (its files and data/). */
static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[PATH_MAX];
        if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p)
            continue;
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            remove_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The stems of dir's files ending in ext (".svg"), sorted. */
static size_t stems(const char *dir, const char *ext, char ***out)
{
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    size_t n = 0, cap = 0;
    struct dirent *e;
    const size_t el = strlen(ext);
    while ((e = readdir(d))) {
        const size_t l = strlen(e->d_name);
        if (l <= el || strcmp(e->d_name + l - el, ext))
            continue;
        if (n == cap) {
            char **g = realloc(*out, (cap = cap ? 2 * cap : 16) * sizeof *g);
            if (!g)
                break;
            *out = g;
        }
        (*out)[n] = strndup(e->d_name, l - el);
        if ((*out)[n])
            n++;
    }
    closedir(d);
    if (n)
        qsort(*out, n, sizeof **out, name_cmp);
    return n;
}

/* One run of qmla figures: inputs of one format drawn together, or (alone)
 * one of them with the figures the others could not share (--only). */
typedef struct fig_run {
    const char *format;      /* the inputs' root format attribute ("" none) */
    size_t idx[REPORT_MAX_INPUTS], n;
    int alone;               /* one input of a group of several */
    size_t parent;           /* alone: the joint run */
    int show_skipped;        /* 0: its skipped figures are drawn per input */
    char only[4096];         /* --only (alone runs) */
    char dir[PATH_MAX];
} fig_run;

/* The names of the figures a run's log says were skipped, comma-separated
 * into out (empty: none). */
static void skipped_names(const char *dir, char *out, size_t len)
{
    char logp[PATH_MAX + 16], *log = NULL;
    size_t ln = 0, o = 0;
    out[0] = '\0';
    snprintf(logp, sizeof logp, "%s/figures.log", dir);
    if (read_whole(logp, &log, &ln))
        return;
    for (char *line = log, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (strncmp(line, "figures: skipped ", 17))
            continue;
        const char *name = line + 17;
        const size_t l = strcspn(name, ":");
        if (o + l + 2 < len) {
            o += (size_t)snprintf(out + o, len - o, "%s%.*s", o ? "," : "", (int)l, name);
        }
    }
    free(log);
}

/* One run's figures and tables: the registry's in its order, then any
 * other the folder holds; the skipped ones with what they need. */
static int section_figures(FILE *f, char *const *paths, const fig_run *g, size_t gi,
                           const char *drawn, size_t *n_fig, char *why, size_t len)
{
    fputs(g->alone ? "<h3>Alone: " : g->n > 1 ? "<h3>Drawn together: " : "<h3>", f);
    for (size_t k = 0; k < g->n; k++) {
        fputs(k ? ", " : "", f);
        fputs("<code>", f);
        esc(f, paths[g->idx[k]]);
        fputs("</code>", f);
    }
    fputs("</h3>\n", f);
    if (g->alone)
        fputs("<p>The figures the inputs drawn together above could not share (each needs "
              "its data in every input).</p>\n", f);
    char **svg = NULL, **csv = NULL;
    const size_t nsvg = stems(g->dir, ".svg", &svg), ncsv = stems(g->dir, ".csv", &csv);
    unsigned char *used_svg = calloc(nsvg + 1, 1), *used_csv = calloc(ncsv + 1, 1);
    int rc = 0;
    const size_t nreg = cli_figure_count();
    for (size_t pass = 0; pass < 2 && !rc; pass++)
        for (size_t k = 0; k < (pass ? nsvg + ncsv : nreg) && !rc; k++) {
            const char *what = "", *name;
            if (!pass)
                name = cli_figure_at(k, &what);
            else if (k < nsvg)
                name = used_svg[k] ? NULL : svg[k];
            else
                name = used_csv[k - nsvg] ? NULL : csv[k - nsvg];
            if (!name)
                continue;
            for (size_t j = 0; j < nsvg; j++)
                if (!strcmp(svg[j], name) && !used_svg[j]) {
                    char p[PATH_MAX + 300], prefix[48];
                    snprintf(p, sizeof p, "%s/%s.svg", g->dir, name);
                    snprintf(prefix, sizeof prefix, "g%zu-%zu-", gi, *n_fig);
                    fprintf(f, "<figure id=\"fig-g%zu-", gi);
                    esc(f, name);
                    fputs("\" data-figure=\"", f);
                    esc(f, name);
                    fputs("\">\n", f);
                    if (inline_svg(f, p, prefix, why, len)) {
                        rc = -1;
                        break;
                    }
                    fputs("\n<figcaption><b>", f);
                    esc(f, name);
                    fputs("</b>: ", f);
                    esc(f, what);
                    fputs("</figcaption></figure>\n", f);
                    used_svg[j] = 1;
                    (*n_fig)++;
                }
            for (size_t j = 0; j < ncsv && !rc; j++)
                if (!strcmp(csv[j], name) && !used_csv[j]) {
                    char p[PATH_MAX + 300];
                    snprintf(p, sizeof p, "%s/%s.csv", g->dir, name);
                    fputs("<h4>", f);
                    esc(f, name);
                    fputs("</h4>\n<p>", f);
                    esc(f, what);
                    fputs("</p>\n", f);
                    if (csv_table(f, p, name)) {
                        snprintf(why, len, "%s: cannot read", p);
                        rc = -1;
                    }
                    used_csv[j] = 1;
                }
        }
    if (!rc && !g->show_skipped && nsvg + ncsv == 0)
        fputs("<p>None of the figures has its data in every one of these inputs; each input "
              "is drawn alone below.</p>\n", f);
    /* what qmla figures skipped, and why */
    char logp[PATH_MAX + 16], *log = NULL;
    size_t ln = 0;
    snprintf(logp, sizeof logp, "%s/figures.log", g->dir);
    if (!rc && g->show_skipped && read_whole(logp, &log, &ln) == 0) {
        int any = 0;
        for (char *line = log, *nl; line && *line; line = nl ? nl + 1 : NULL) {
            nl = strchr(line, '\n');
            if (nl)
                *nl = '\0';
            if (strncmp(line, "figures: skipped ", 17))
                continue;
            /* a figure drawn for other inputs of the page is not listed */
            char nm[128];
            snprintf(nm, sizeof nm, "%.*s", (int)strcspn(line + 17, ":"), line + 17);
            if (cli_in_list(drawn, nm))
                continue;
            fputs(any++ ? "<li>"
                        : "<p>Not drawn for these inputs (the data each needs; a figure drawn "
                          "for other inputs of this page is not listed):</p>\n"
                          "<ul class=skipped><li>",
                  f);
            esc(f, line + 17);
            fputs("</li>\n", f);
        }
        if (any)
            fputs("</ul>\n", f);
        free(log);
    }
    for (size_t k = 0; k < nsvg; k++)
        free(svg[k]);
    for (size_t k = 0; k < ncsv; k++)
        free(csv[k]);
    free(svg);
    free(csv);
    free(used_svg);
    free(used_csv);
    return rc;
}

/* ---- every table of an input --------------------------------------------- */

static int section_tables(FILE *f, size_t idx, const char *path, size_t max_rows, char *why,
                          size_t len)
{
    char **names = NULL;
    size_t nn = 0;
    qmla_error e;
    qmla_error_clear(&e);
    if (qmla_table_list(path, &names, &nn, &e)) {
        snprintf(why, len, "%s", e.msg);
        return -1;
    }
    int rc = 0;
    if (!nn)
        fputs("<p>No tables (no group of 1-D datasets of one length).</p>\n", f);
    for (size_t k = 0; k < nn; k++) {
        qmla_table *t = NULL;
        if (!rc && qmla_table_read_any(path, names[k], &t, &e)) {
            snprintf(why, len, "%s", e.msg);
            rc = -1;
        }
        if (!rc) {
            const size_t shown = t->n_rows < max_rows ? t->n_rows : max_rows;
            fprintf(f, "<details%s><summary><b>/", t->n_rows <= 12 ? " open" : "");
            esc(f, names[k]);
            fprintf(f, "</b>: %zu rows &times; %zu columns%s</summary>\n", t->n_rows, t->n_cols,
                    shown < t->n_rows ? " (first rows shown)" : "");
            if (t->n_attrs) {
                fputs("<details class=gattrs><summary>group attributes</summary>\n", f);
                attr_table(f, t->attrs, t->n_attrs, "group", 0, 1);
                fputs("</details>\n", f);
            }
            fprintf(f, "<div class=scroll><table class=data data-file=\"%zu\" data-table=\"", idx);
            esc(f, names[k]);
            fprintf(f, "\" data-rows=\"%zu\" data-shown=\"%zu\">\n<tr>", t->n_rows, shown);
            for (size_t c = 0; c < t->n_cols; c++) {
                fputs("<th title=\"", f);
                esc(f, t->cols[c].description);
                fputs("\" data-col=\"", f);
                esc(f, t->cols[c].name);
                fputs("\">", f);
                esc(f, t->cols[c].name);
                if (t->cols[c].units && t->cols[c].units[0]) {
                    fputs(" <span class=u>[", f);
                    esc(f, t->cols[c].units);
                    fputs("]</span>", f);
                }
                fputs("</th>", f);
            }
            fputs("</tr>\n", f);
            for (size_t r = 0; r < shown; r++) {
                fputs("<tr>", f);
                for (size_t c = 0; c < t->n_cols; c++)
                    value_td(f, &t->cols[c].v, r);
                fputs("</tr>\n", f);
            }
            fputs("</table></div>\n", f);
            if (shown < t->n_rows) {
                fprintf(f, "<p class=more>%zu more rows: <code>qmla export ", t->n_rows - shown);
                esc(f, path);
                fputs(" --table ", f);
                esc(f, names[k]);
                fputs("</code></p>\n", f);
            }
            fputs("</details>\n", f);
        }
        qmla_table_free(t);
        free(names[k]);
    }
    free(names);
    return rc;
}

/* ---- the page -------------------------------------------------------------- */

static const char style[] =
    "body{font:15px/1.45 'DejaVu Sans',sans-serif;margin:1.5em auto;max-width:1200px;"
    "padding:0 1em;color:#202020}h1{font-size:1.6em}h2{border-bottom:2px solid #1f5fa8;"
    "margin-top:2em}table{border-collapse:collapse;font-size:13px;margin:.5em 0}"
    "td,th{border:1px solid #ccc;padding:2px 6px;vertical-align:top}th{background:#eef2f7}"
    "td.n{text-align:right;font-variant-numeric:tabular-nums}tr.prov td{background:#f7f9ec}"
    "tr.rope td{background:#fbf0ee}.scroll{overflow-x:auto;max-height:32em;overflow-y:auto}"
    "figure{margin:1em 0;border:1px solid #ddd;padding:.5em;overflow-x:auto}"
    "figcaption{font-size:13px;color:#404040}pre{background:#f4f4f4;padding:.6em;"
    "overflow-x:auto}.check{padding:.3em .6em;border-radius:4px;background:#eee}"
    ".check.ok{background:#dff0d8}.check.fail{background:#f2dede}.u{color:#707070}"
    "code{background:#f4f4f4;padding:0 .2em}table.attrs td{overflow-wrap:anywhere}"
    "td.n,td{white-space:nowrap}table.attrs td{white-space:normal}"
    "table.attrs td:first-child{white-space:nowrap}";

/* The page checks itself on load (the browser test reads the verdict from
 * the DOM): every inline figure has a non-empty box and drawn content, no
 * <img> is broken; the verdict goes to <html data-render-check>. */
static const char check_script[] =
    "window.addEventListener('load',function(){var bad=[],ok=0;"
    "var s=document.querySelectorAll('figure > svg');"
    "for(var i=0;i<s.length;i++){var r=s[i].getBoundingClientRect(),b={width:0,height:0};"
    "try{b=s[i].getBBox();}catch(e){}"
    "var drawn=s[i].querySelectorAll('path,text,rect,polygon,polyline,line,circle,use,image')."
    "length;if(r.width>0&&r.height>0&&b.width>0&&b.height>0&&drawn>0)ok++;"
    "else bad.push(s[i].parentNode.id);}"
    "var im=document.querySelectorAll('img');for(var j=0;j<im.length;j++)"
    "if(!(im[j].complete&&im[j].naturalWidth>0))bad.push('img '+j);"
    "var v=bad.length?'fail '+bad.join(' '):'ok '+ok+' svg '+im.length+' img';"
    "document.documentElement.setAttribute('data-render-check',v);"
    "var c=document.getElementById('render-check');if(c){c.textContent='Rendering check in "
    "this browser: '+(bad.length?'FAILED for '+bad.join(', '):'all '+ok+' figures drawn, '+"
    "im.length+' images, none broken');c.className='check '+(bad.length?'fail':'ok');}});";

/* An existing -o that is not an HTML page is refused (a capture or a PNG
 * would be replaced by the page): its first bytes, past a BOM and white
 * space, must open an HTML document. */
static int looks_html(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 1; /* the writer reports what it cannot do */
    char b[64] = "";
    const size_t n = fread(b, 1, sizeof b - 1, f);
    fclose(f);
    b[n] = '\0';
    if (n == 0)
        return 1;
    const char *p = b;
    if (!strncmp(p, "\xef\xbb\xbf", 3))
        p += 3;
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
        p++;
    return !strncasecmp(p, "<!doctype html", 14) || !strncasecmp(p, "<html", 5);
}

int cmd_report(int argc, char **argv)
{
    const char *out = NULL, *budget_s = "C4R4", *plots = NULL, *gnuplot = NULL, *exclude = NULL;
    long max_rows = 200;
    int no_figures = 0;
    const cli_opt opts[] = {
        {.name = "output", .shrt = 'o', .kind = CLI_STR, .dst = &out},
        {.name = "budget", .shrt = 0, .kind = CLI_STR, .dst = &budget_s},
        {.name = "max-rows", .shrt = 0, .kind = CLI_LONG, .dst = &max_rows, .lo = 1,
         .hi = 1000000, .expected = "1..1000000"},
        {.name = "no-figures", .shrt = 0, .kind = CLI_SET, .dst = &no_figures},
        {.name = "exclude", .shrt = 0, .kind = CLI_STR, .dst = &exclude},
        {.name = "plots", .shrt = 0, .kind = CLI_STR, .dst = &plots},
        {.name = "gnuplot", .shrt = 0, .kind = CLI_STR, .dst = &gnuplot},
        {.name = "help", .shrt = 'h', .kind = CLI_HELP, .dst = NULL},
        {0}};
    const int prc = cli_getopt("report", argc, argv, opts, help, NULL);
    if (prc >= 0)
        return prc;
    char e1[256];
    int bud[2];
    if (parse_cfg(budget_s, bud))
        return cli_fail("report", "--budget: expected C{x}R{y} with x, y in 2, 3, 4, 8 (e.g. "
                        "C4R4), found \"%s\"", cli_esc(budget_s, e1, sizeof e1));
    if (!out)
        return cli_fail("report", "missing -o REPORT.html (see qmla report --help)");
    if (exclude && !cli_figure_list_ok("report", "--exclude", exclude))
        return QMLA_EXIT_USAGE;
    const size_t n = (size_t)(argc - optind);
    if (n == 0)
        return cli_fail("report", "expected one or more files qmla wrote, e.g. RESULTS.h5 "
                        "(see qmla report --help)");
    if (n > REPORT_MAX_INPUTS)
        return cli_fail("report", "expected at most %d input files, found %zu",
                        REPORT_MAX_INPUTS, n);
    char *const *paths = argv + optind;
    qmla_error err;
    qmla_error_clear(&err);
    if (qmla_output_path_check(out, "report (-o)", (const char *const *)paths, n, &err))
        return cli_lib_error("report", &err);
    if (!looks_html(out))
        return cli_fail("report", "%s: report (-o): expected an HTML page (a report) or a new "
                        "file, found a file of another kind; not replaced",
                        cli_esc(out, e1, sizeof e1));
    qmla_attr *root[REPORT_MAX_INPUTS] = {0};
    size_t nroot[REPORT_MAX_INPUTS] = {0};
    int rc = QMLA_EXIT_OK;
    char why[QMLA_ERRMSG_MAX + PATH_MAX];
    char tmp[PATH_MAX] = "";
    static fig_run groups[2 * REPORT_MAX_INPUTS];
    size_t ng = 0, n_joint = 0;
    char *page = NULL;
    size_t page_n = 0;
    FILE *f = NULL;
    for (size_t i = 0; i < n; i++)
        if (qmla_file_attrs(paths[i], &root[i], &nroot[i], &err)) {
            rc = cli_lib_error("report", &err);
            goto out;
        }
    /* inputs of one format are drawn together, as qmla figures draws them */
    for (size_t i = 0; i < n; i++) {
        const char *fm = attr_str(root[i], nroot[i], "format");
        fm = fm ? fm : "";
        size_t g = 0;
        while (g < ng && strcmp(groups[g].format, fm))
            g++;
        if (g == ng) {
            memset(&groups[ng], 0, sizeof groups[ng]);
            groups[ng].show_skipped = 1;
            groups[ng++].format = fm;
        }
        groups[g].idx[groups[g].n++] = i;
    }
    if (!no_figures) {
        const char *td = getenv("TMPDIR");
        snprintf(tmp, sizeof tmp, "%s/qmla-report.XXXXXX", td && td[0] ? td : "/tmp");
        if (!mkdtemp(tmp)) {
            rc = cli_fail("report", "%s: cannot create a temporary folder for the figures: %s",
                          tmp, strerror(errno));
            tmp[0] = '\0';
            goto out;
        }
        /* a joint run whose figures some input lacks the data for: those
         * figures drawn again for each input alone */
        n_joint = ng;
        for (size_t g = 0; g < ng; g++) {
            snprintf(groups[g].dir, sizeof groups[g].dir, "%s/g%zu", tmp, g);
            if (mkdir(groups[g].dir, 0700)) {
                rc = cli_fail("report", "%s: cannot create: %s", groups[g].dir, strerror(errno));
                goto out;
            }
            const int frc = run_figures(paths, groups[g].idx, groups[g].n, groups[g].dir,
                                        groups[g].alone ? groups[g].only : NULL, exclude, plots,
                                        gnuplot);
            if (frc == 128 + SIGINT || frc == 128 + SIGTERM) {
                fprintf(stderr, "qmla report: interrupted (%s); no page written\n",
                        frc == 128 + SIGINT ? "SIGINT" : "SIGTERM");
                rc = QMLA_EXIT_INTERRUPTED;
                goto out;
            }
            if (frc != 0) {
                char logp[PATH_MAX + 16], *log = NULL;
                size_t ln = 0;
                snprintf(logp, sizeof logp, "%s/figures.log", groups[g].dir);
                if (read_whole(logp, &log, &ln) == 0) {
                    for (char *line = log, *nl; line && *line; line = nl ? nl + 1 : NULL) {
                        nl = strchr(line, '\n');
                        if (nl)
                            *nl = '\0';
                        if (strncmp(line, "figures: ", 9))
                            fprintf(stderr, "%s\n", line);
                    }
                    free(log);
                }
                rc = cli_fail("report", "the figures could not be drawn (qmla figures exited "
                              "%d; messages above); --no-figures writes the page without them",
                              frc);
                goto out;
            }
            char names[4096];
            if (g < n_joint && groups[g].n > 1 &&
                (skipped_names(groups[g].dir, names, sizeof names), names[0])) {
                groups[g].show_skipped = 0;
                for (size_t k = 0; k < groups[g].n && ng < 2 * REPORT_MAX_INPUTS; k++) {
                    fig_run *a = &groups[ng++];
                    memset(a, 0, sizeof *a);
                    a->format = groups[g].format;
                    a->idx[0] = groups[g].idx[k];
                    a->n = 1;
                    a->alone = 1;
                    a->parent = g;
                    a->show_skipped = 1;
                    snprintf(a->only, sizeof a->only, "%s", names);
                }
            }
        }
    }
    f = open_memstream(&page, &page_n);
    if (!f) {
        rc = cli_fail("report", "out of memory");
        goto out;
    }
    char now[32];
    {
        const time_t t = time(NULL);
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", &tm);
    }
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\" data-render-check=\"pending\">\n<head>\n"
               "<meta charset=\"utf-8\">\n<meta name=\"generator\" content=\"qmla %s\">\n"
               "<title>qmla report</title>\n<style>%s</style>\n</head>\n<body>\n"
               "<h1>qmla report</h1>\n<p>Written by qmla %s at %s by <code>",
            qmla_version(), style, qmla_version(), now);
    esc(f, cli_command_line());
    fprintf(f, "</code>. Self-contained: no file or network address is fetched.</p>\n"
               "<p id=\"render-check\" class=check>Rendering check: the page's script did "
               "not run (a browser without JavaScript still shows everything).</p>\n"
               "<ol class=toc><li><a href=\"#inputs\">Inputs and provenance</a></li>"
               "<li><a href=\"#sensitivity\">Sensitivity ranking and suggestion</a></li>"
               "<li><a href=\"#figures\">Figures and paper tables</a></li>"
               "<li><a href=\"#tables\">Tables of every input</a></li></ol>\n");
    fputs("<h2 id=\"inputs\">1. Inputs and provenance</h2>\n<p>The root attributes of "
          "every input (provenance first, highlighted: command line, time, tool version, "
          "commit, engine, input hashes), then the provenance of each group a later command "
          "added.</p>\n", f);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "<h3 data-input=\"%zu\">Input %zu: <code>", i, i + 1);
        esc(f, paths[i]);
        fputs("</code></h3>\n", f);
        char cls[48];
        snprintf(cls, sizeof cls, "root\" data-input=\"%zu", i);
        attr_table(f, root[i], nroot[i], cls, 0, 0);
        size_t n_other = 0;
        for (size_t k = 0; k < nroot[i]; k++)
            n_other += !is_prov(root[i][k].name);
        if (n_other) {
            fprintf(f, "<details><summary>the other %zu root attributes (parameters, shapes)"
                       "</summary>\n", n_other);
            attr_table(f, root[i], nroot[i], cls, 1, 1);
            fputs("</details>\n", f);
        }
        char **gn = NULL;
        size_t ngn = 0;
        qmla_error_clear(&err);
        if (qmla_group_children(paths[i], "", &gn, &ngn, 1, &err) == QMLA_OK) {
            for (size_t k = 0; k < ngn; k++) {
                qmla_attr *ga = NULL;
                size_t na = 0;
                qmla_error e2;
                if (qmla_group_attrs(paths[i], gn[k], &ga, &na, &e2) == QMLA_OK &&
                    (attr_str(ga, na, "command_line") || attr_str(ga, na, "tool"))) {
                    fputs("<details><summary>group /", f);
                    esc(f, gn[k]);
                    fputs(": written by <code>", f);
                    const char *cl = attr_str(ga, na, "command_line");
                    esc(f, cl ? cl : attr_str(ga, na, "tool"));
                    fputs("</code></summary>\n", f);
                    attr_table(f, ga, na, "group", 0, 1);
                    fputs("</details>\n", f);
                }
                qmla_attrs_free(ga, na);
                free(gn[k]);
            }
            free(gn);
        }
    }
    fputs("<h2 id=\"sensitivity\">2. Sensitivity ranking and suggestion</h2>\n", f);
    {
        long pos = ftell(f);
        for (size_t i = 0; i < n; i++)
            section_sensitivity(f, i, paths[i], root[i], nroot[i], bud);
        if (ftell(f) == pos)
            fputs("<p>No input holds per-layer responses (/summary: qmla sweep) or gains "
                  "(/predict, /jvp: qmla predict, qmla jvp).</p>\n", f);
    }
    fputs("<h2 id=\"figures\">3. Figures and paper tables</h2>\n", f);
    /* the figures drawn for any input (their names, comma-separated) */
    char drawn[8192] = "";
    for (size_t g = 0; g < ng && !no_figures; g++)
        for (int e = 0; e < 2; e++) {
            char **st = NULL;
            const size_t ns = stems(groups[g].dir, e ? ".csv" : ".svg", &st);
            for (size_t k = 0; k < ns; k++) {
                const size_t o = strlen(drawn);
                if (!cli_in_list(drawn, st[k]) && o + strlen(st[k]) + 2 < sizeof drawn)
                    snprintf(drawn + o, sizeof drawn - o, "%s%s", o ? "," : "", st[k]);
                free(st[k]);
            }
            free(st);
        }
    size_t n_fig = 0;
    if (no_figures)
        fputs("<p>Left out (--no-figures).</p>\n", f);
    else if (exclude) {
        fputs("<p class=excluded>Left out on request (--exclude), neither drawn nor listed "
              "below: <code>", f);
        esc(f, exclude);
        fputs("</code>.</p>\n", f);
    }
    for (size_t g = 0; g < n_joint && !no_figures; g++)
        for (size_t a = g; a < ng; a = a == g ? n_joint : a + 1) /* g, then its alone runs */
            if ((a == g || groups[a].parent == g) &&
                section_figures(f, paths, &groups[a], a, drawn, &n_fig, why, sizeof why)) {
                rc = cli_fail("report", "%s", why);
                goto out;
            }
    fputs("<h2 id=\"tables\">4. Tables of every input</h2>\n<p>Numbers are rounded to 6 "
          "digits; the exact value (the shortest decimal that reads back to the stored double) "
          "is in each cell's data-v attribute.</p>\n", f);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "<h3>Input %zu: <code>", i + 1);
        esc(f, paths[i]);
        fputs("</code></h3>\n", f);
        if (section_tables(f, i, paths[i], (size_t)max_rows, why, sizeof why)) {
            rc = cli_fail("report", "%s", why);
            goto out;
        }
    }
    fprintf(f, "<script>%s</script>\n</body>\n</html>\n", check_script);
    if (fclose(f)) {
        f = NULL;
        rc = cli_fail("report", "out of memory");
        goto out;
    }
    f = NULL;
    qmla_error_clear(&err);
    if (qmla_text_save(out, "report (-o)", (const char *const *)paths, n, page, page_n, &err)) {
        rc = cli_lib_error("report", &err);
        goto out;
    }
    printf("report: wrote %s (%zu bytes: %zu input%s, %zu figure%s)\n", out, page_n, n,
           n == 1 ? "" : "s", n_fig, n_fig == 1 ? "" : "s");
out:
    if (f)
        fclose(f);
    free(page);
    if (tmp[0])
        remove_tree(tmp);
    for (size_t i = 0; i < n; i++)
        qmla_attrs_free(root[i], nroot[i]);
    return rc;
}
