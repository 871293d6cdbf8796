/* cmd_figures.c — `qmla figures`: export what the figures need from one or
 * more results files into DIR/data/ (TSV, as `qmla export` writes it) and
 * render each figure with its gnuplot script in plots/ (png, svg or pdf);
 * tables (Table 4) are written as Markdown and CSV. A figure whose data is
 * absent is skipped with one line naming the data it needs. Tables 5 and 6
 * (render_attr_table) are group attributes of /predict and /interventions
 * beside the paper's rows (plots/table5-paper.tsv, plots/table6-paper.tsv).
 *
 *   qmla figures results/default-sweep.h5 -o results/figures
 *   qmla figures a.h5 b.h5 -o figs --format svg --labels A,B
 *
 * Adding a figure: a script plots/<name>.gp (docs/figures.md: the variables
 * it is given) and one row in `figures` below. */
#include "cli.h"
#include "qmla/export.h"
#include "qmla/text.h"
#include "qmla/table.h"
#include "qmla_config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_INPUTS 64
#define MAX_TABLES 16

typedef struct fig_input {
    const char *path;
    char label[128];
    char model[512];
    double nmse;
    qmla_attr *root;
    size_t n_root;
    /* tables loaded so far (name -> table or the reason it is absent) */
    size_t n_tab;
    char tab_name[MAX_TABLES][64];
    qmla_table *tab[MAX_TABLES];
    char tab_why[MAX_TABLES][QMLA_ERRMSG_MAX];
} fig_input;

typedef struct fig_ctx {
    fig_input *in;
    size_t n;
    const char *dir;     /* output folder (DIR) */
    char plots[PATH_MAX];/* absolute plots/ folder */
    const char *gnuplot;
    const char *format;  /* png | svg | pdf */
} fig_ctx;

struct figure_def;
typedef int (*render_fn)(const fig_ctx *c, const struct figure_def *f, char *msg, size_t len);

typedef struct figure_def {
    const char *name;   /* plots/<name>.gp (gnuplot) or the output stem (render) */
    const char *table;  /* the table every input must have */
    const char *needs;  /* its columns, comma-separated; "@x": table attribute x */
    int w, w_model;     /* width in pixels: w + w_model * inputs (pdf: 1/100 in) */
    int h, h_model;     /* height likewise */
    render_fn render;   /* NULL: run the gnuplot script */
    const char *what;
} figure_def;

static int render_table4(const fig_ctx *c, const figure_def *f, char *msg, size_t len);
static int render_attr_table(const fig_ctx *c, const figure_def *f, char *msg, size_t len);
static int render_table9(const fig_ctx *c, const figure_def *f, char *msg, size_t len);
static int render_table10(const fig_ctx *c, const figure_def *f, char *msg, size_t len);

/* The figures and tables. One row each; gnuplot scripts in plots/. */
static const figure_def figures[] = {
    {"fig2-responses", "summary", "layer,response_content,response_rope,ratio",
     420, 360, 460, 0, NULL,
     "layer-wise content and RoPE responses per model, and the per-layer RoPE/content "
     "ratios with median and IQR (paper Fig. 2)"},
    {"fig6-atlas", "responses_by_layer", "layer,content_nmse_out,rope_nmse_out",
     1000, 0, 300, 100, NULL,
     "layer atlas: content and RoPE output NMSE and their ratio per layer and model, "
     "shared log colour scales (paper Fig. 6)"},
    {"routes", "responses_by_layer",
     "layer,content_nmse_out_matching,content_nmse_out_aggregation,"
     "content_nmse_out_interaction,rope_nmse_out_matching",
     120, 400, 460, 0, NULL,
     "error routes per layer: output NMSE of matching, aggregation and interaction "
     "(content) and matching (RoPE)"},
    {"transforms-nmse", "eval", "layer,nmse_out",
     120, 420, 460, 0, NULL,
     "output NMSE per layer for each cache transform (RTN, SmoothQuant†, QuaRot†, "
     "QuantMLA), both caches quantized (`qmla eval`'s /eval)"},
    {"ppl-bits", "ppl_table", "text_index,delta_bits_per_byte",
     120, 840, 460, 0, NULL,
     "bits/byte above the BF16 cache per cache configuration, policy and method, "
     "one panel per text (`qmla ppl`'s /ppl_table; the accuracy table)"},
    {"fig7-gains", "predict", "layer,path,heldout,g_jvp,g_finite",
     120, 420, 460, 0, NULL,
     "local gain per layer of the content and RoPE paths at the development "
     "direction, JVP and finite (`qmla predict`'s /predict; paper Fig. 7a)"},
    {"fig7-validation", "predict_pairs",
     "log_ratio_measured,log_ratio_pred_alloc,direction_index,abs_error_alloc,"
     "rank_measured,rank_pred_alloc",
     120, 640, 500, 0, NULL,
     "predicted (operator + allocation) against measured RoPE/content log response "
     "ratio, one marker per direction, identity line, Spearman and MAE in the key "
     "(/predict's pairs; paper Fig. 7b)"},
    {"fig7-interventions", "intervention_ratios",
     "control_index,path_index,gain_ratio,ci_low,ci_high",
     120, 420, 460, 0, NULL,
     "gain ratio per equal-energy control and path with 95 % bootstrap intervals, "
     "unity marked (`qmla intervene`'s /interventions; paper Fig. 7c)"},
    {"fig5a-storage", "storage", "context,series_index,bytes_per_token,ratio",
     1100, 0, 480, 0, NULL,
     "persistent KV-cache bytes per token and compression against BF16 by context, BF16 "
     "buffers, metadata and page tables included, per configuration and policy, the paper's "
     "two C4R4 points marked (`qmla storage -o`'s /storage; paper Fig. 5a)"},
    {"fig5b-latency", "table9", "batch,context,BF16_us,C4R4_us",
     1000, 0, 460, 0, NULL,
     "decode attention time of C4R4, C2R4 and C8R8 over BF16's against context at batch 8 "
     "and 32, the paper's C4R4 range shaded (the decode benchmark's /table9; paper Fig. 5b)"},
    {"fig5c-serving", "serve_sim", "throughput,preemptions",
     120, 420, 460, 0, NULL,
     "whole-job output throughput per cache configuration with its preemption count, "
     "beside the paper's BF16 and C4R4 (`qmla serve-sim -o`'s /serve_sim; paper Fig. 5c)"},
    {"allocate-pareto", "allocate_pareto", "kind_index,bytes_per_token,bpb_mean,on_front",
     720, 0, 520, 0, NULL,
     "bits/byte against bytes per token: uniform configurations, their Pareto front and "
     "the allocations of `qmla allocate` (scripts/allocate-validate.sh's pareto.h5)"},
    {"allocate-strip", "allocate_strip", "budget_index,layer,c_bits,r_bits",
     620, 0, 360, 0, NULL,
     "the configuration `qmla allocate` chose per layer and budget, as a strip "
     "(scripts/allocate-validate.sh's pareto.h5)"},
    {"serving-bench", "serving_bench",
     "cache_index,context,batch,fits,cache_gib,tok_s_aggregate",
     1260, 0, 760, 0, NULL,
     "decode tokens/s in aggregate and cache GiB against batch, one column per context: "
     "C4R4 and BF16 pages against transformers' DynamicCache, points that do not fit "
     "marked (scripts/serving-table.py's file)"},
    {"table4", "summary", "@model_response_content,@model_response_rope,@model_ratio",
     0, 0, 0, 0, render_table4,
     "model-level responses and ratio beside the paper's rows (paper Table 4), "
     "Markdown and CSV"},
    {"table5", "predict",
     "@n_pairs,@spearman,@median_abs_log_error,@mae_log_ratio_cache_only,"
     "@mae_log_ratio_operator_only,@mae_log_ratio_operator_allocation",
     0, 0, 0, 0, render_attr_table,
     "predictive validation of the operator-error model: Spearman, median absolute log "
     "error and the three predictors' log-ratio MAE beside the paper's (paper Table 5; "
     "`qmla predict`'s /predict), Markdown and CSV"},
    {"table6", "interventions",
     "@gain_ratio_sign_content,@gain_ratio_sign_rope,@gain_ratio_permute_content,"
     "@gain_ratio_permute_rope,@gain_ratio_isotropic_content,@gain_ratio_isotropic_rope",
     0, 0, 0, 0, render_attr_table,
     "equal-energy interventions: gain ratio per control and path with 95 % intervals "
     "beside the paper's (paper Table 6; `qmla intervene`'s /interventions), Markdown and "
     "CSV"},
    {"table9", "table9", "batch,context,BF16_us,C4R4_us,C4R4_ratio",
     0, 0, 0, 0, render_table9,
     "decode attention latency of BF16 and the low-bit caches at batch 8 and 32 per context "
     "with Δ against BF16, and the C4R4 Δ range beside the paper's (paper Table 9; the "
     "decode benchmark's /table9), Markdown and CSV"},
    {"table10", "serve_sim", "slots,elapsed_s,throughput,preemptions,recomputed_tokens",
     0, 0, 0, 0, render_table10,
     "serving under cache pressure: usable slots, elapsed time, output throughput, "
     "preemptions and recomputed tokens per configuration beside the paper's (paper Table "
     "10; `qmla serve-sim -o`'s /serve_sim), Markdown and CSV"},
};
#define N_FIGURES (sizeof figures / sizeof figures[0])

static void help(FILE *f)
{
    fprintf(f,
        "usage: qmla figures RESULTS.h5 [MORE.h5 ...] -o DIR [--format png|svg|pdf]\n"
        "                    [--labels A,B,...] [--only NAME,...] [--exclude NAME,...]\n"
        "                    [--plots DIR]\n"
        "                    [--gnuplot PATH] [--list]\n"
        "\n"
        "Render every figure and table the results files support: the tables each\n"
        "figure needs are exported to DIR/data/ (TSV with provenance, as qmla\n"
        "export writes them) and the figure's gnuplot script (plots/NAME.gp) draws\n"
        "DIR/NAME.FORMAT from them; Table 4 is written as DIR/table4.md and .csv.\n"
        "Each file is one model (one panel, row or line); a figure whose data is\n"
        "absent from a file is skipped with one line saying what it needs.\n"
        "\n"
        "  -o DIR          output folder (created)\n"
        "  --format F      png (default), svg or pdf (gnuplot's cairo terminals)\n"
        "  --labels LIST   one label per file (default: the model name, with the\n"
        "                  cache NMSE or file name where two files share a model)\n"
        "  --only LIST     render only these figures (see --list)\n"
        "  --exclude LIST  render none of these figures, nor report them skipped\n"
        "                  (scripts/run-main.sh: the allocate figures, whose data\n"
        "                  only scripts/allocate-validate.sh makes)\n"
        "  --plots DIR     the gnuplot scripts (default $QMLA_PLOTS_DIR, else\n"
        "                  the source tree's plots/)\n"
        "  --gnuplot PATH  the gnuplot program (default $QMLA_GNUPLOT, else gnuplot)\n"
        "  --list          list the figures, the data each needs, and exit\n"
        "\n"
        "examples:\n"
        "  qmla figures results/default-sweep.h5 -o results/figures\n"
        "  qmla figures full.h5 full-nu1e-3.h5 -o figs --format svg\n"
        "  qmla figures --list\n");
}

/* ---- inputs ------------------------------------------------------------- */

static const char *root_str(const fig_input *in, const char *name)
{
    const qmla_attr *a = qmla_attr_find(in->root, in->n_root, name);
    return a && a->v.kind == QMLA_VAL_STRING && a->v.n ? a->v.s[0] : NULL;
}

/* The dispersion columns of /summary (docs/math.md §3.1) that figures draw
 * (error bars). A file whose /summary predates them gets them recomputed
 * from its /responses (cli_summary_from_responses), else NaN columns (no
 * error bars); the point estimates are always the file's own. */
static int summary_dispersion(const char *path, qmla_table *t, qmla_error *err)
{
    static const char *const names[9] = {
        "response_content_se", "response_content_lo", "response_content_hi",
        "response_rope_se",    "response_rope_lo",    "response_rope_hi",
        "ratio_se",            "ratio_lo",            "ratio_hi"};
    int have = 1;
    for (int q = 0; q < 9; q++)
        have &= qmla_table_column(t, names[q]) != NULL;
    if (have)
        return QMLA_OK;
    const qmla_table_col *lc = qmla_table_column(t, "layer");
    int *layers = malloc((t->n_rows ? t->n_rows : 1) * sizeof *layers);
    double *nan = malloc((t->n_rows ? t->n_rows : 1) * sizeof *nan);
    if (!layers || !nan) {
        free(layers);
        free(nan);
        return qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
    }
    for (size_t k = 0; k < t->n_rows; k++) {
        layers[k] = lc && lc->v.kind != QMLA_VAL_STRING ? (int)qmla_values_get(&lc->v, k) : -1;
        nan[k] = NAN;
    }
    qmla_summary s;
    const int re = lc && cli_summary_from_responses(path, layers, t->n_rows, &s) == 0;
    const double *src[9] = {nan, nan, nan, nan, nan, nan, nan, nan, nan};
    if (re) {
        const double *got[9] = {s.response_content_se, s.response_content_lo,
                                s.response_content_hi, s.response_rope_se,
                                s.response_rope_lo,    s.response_rope_hi,
                                s.ratio_se,            s.ratio_lo,
                                s.ratio_hi};
        memcpy(src, got, sizeof src);
    }
    int st = QMLA_OK;
    for (int q = 0; q < 9 && !st; q++)
        if (!qmla_table_column(t, names[q]))
            st = qmla_table_add_column(t, names[q], "1",
                                       re ? "recomputed from /responses by qmla figures "
                                            "(docs/math.md §3.1)"
                                          : "not recorded in the file (NaN)",
                                       QMLA_VAL_FLOAT, src[q], err);
    if (re)
        qmla_summary_free(&s);
    free(layers);
    free(nan);
    return st;
}

/* The table `name` of an input (NULL when absent; *why says why). */
static const qmla_table *input_table(fig_input *in, const char *name, const char **why)
{
    for (size_t k = 0; k < in->n_tab; k++)
        if (!strcmp(in->tab_name[k], name)) {
            *why = in->tab_why[k];
            return in->tab[k];
        }
    if (in->n_tab == MAX_TABLES) {
        *why = "too many tables";
        return NULL;
    }
    const size_t k = in->n_tab++;
    snprintf(in->tab_name[k], sizeof in->tab_name[k], "%s", name);
    qmla_error err;
    qmla_error_clear(&err);
    in->tab[k] = NULL;
    in->tab_why[k][0] = '\0';
    if (cli_table_load(in->path, name, &in->tab[k], &err))
        snprintf(in->tab_why[k], sizeof in->tab_why[k], "%s", err.msg);
    else if (!strcmp(name, "summary") && summary_dispersion(in->path, in->tab[k], &err)) {
        qmla_table_free(in->tab[k]);
        in->tab[k] = NULL;
        snprintf(in->tab_why[k], sizeof in->tab_why[k], "%s", err.msg);
    }
    *why = in->tab_why[k];
    return in->tab[k];
}

/* Default labels: the model name after its last '/' (synthetic captures:
 * "synthetic <shape>"); where several files share one, add the cache NMSE
 * if they differ in it, else the file's base name. */
static void make_labels(fig_input *in, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char m[512];
        const char *model = root_str(&in[i], "model");
        snprintf(m, sizeof m, "%s", model ? model : "");
        char *cut = strstr(m, " (shape of");
        if (cut)
            *cut = '\0';
        const char *slash = strrchr(m, '/');
        snprintf(in[i].model, sizeof in[i].model, "%s", m);
        snprintf(in[i].label, sizeof in[i].label, "%.127s", slash ? slash + 1 : m);
        if (!in[i].label[0]) {
            const char *b = strrchr(in[i].path, '/');
            snprintf(in[i].label, sizeof in[i].label, "%s", b ? b + 1 : in[i].path);
        }
        const qmla_attr *nu = qmla_attr_find(in[i].root, in[i].n_root, "nmse_target");
        in[i].nmse = nu && nu->v.n ? qmla_values_get(&nu->v, 0) : NAN;
    }
    char base[MAX_INPUTS][128];
    for (size_t i = 0; i < n; i++)
        snprintf(base[i], sizeof base[i], "%s", in[i].label);
    for (size_t i = 0; i < n; i++) {
        int dup = 0, nu_differs = 0;
        for (size_t j = 0; j < n; j++) {
            if (j == i || strcmp(base[i], base[j]))
                continue;
            dup = 1;
            if (in[i].nmse != in[j].nmse)
                nu_differs = 1;
        }
        if (!dup)
            continue;
        char tmp[128];
        if (nu_differs) {
            snprintf(tmp, sizeof tmp, "%s, ν=%g", base[i], in[i].nmse);
        } else {
            const char *b = strrchr(in[i].path, '/');
            snprintf(tmp, sizeof tmp, "%s (%s)", base[i], b ? b + 1 : in[i].path);
        }
        snprintf(in[i].label, sizeof in[i].label, "%s", tmp);
    }
}

/* ---- small helpers ------------------------------------------------------ */

/* gnuplot single-quoted string: ' doubled. */
static void gp_quote(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

static int mkdir_p(const char *dir)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp)
        return -1;
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0777) && errno != EEXIST)
                return -1;
            *p = '/';
        }
    if (mkdir(tmp, 0777) && errno != EEXIST)
        return -1;
    struct stat st;
    if (stat(tmp, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* Does input `in` have what figure f needs? If not, writes the reason. */
static int input_has(fig_input *in, const figure_def *f, char *why, size_t len)
{
    const char *tw;
    const qmla_table *t = input_table(in, f->table, &tw);
    if (!t) {
        snprintf(why, len, "%s", tw);
        return 0;
    }
    char list[1024], *save = NULL;
    snprintf(list, sizeof list, "%s", f->needs);
    for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        const int attr = tok[0] == '@';
        const char *name = tok + attr;
        int ok;
        if (attr) {
            const qmla_attr *a = qmla_attr_find(t->attrs, t->n_attrs, name);
            ok = a && a->v.kind != QMLA_VAL_STRING && a->v.n == 1;
        } else {
            const qmla_table_col *col = qmla_table_column(t, name);
            ok = col && col->v.kind != QMLA_VAL_STRING;
        }
        if (!ok) {
            snprintf(why, len, "%s: %s %s absent from table %s", in->path,
                     attr ? "attribute" : "numeric column", name, f->table);
            return 0;
        }
    }
    return 1;
}

/* ---- export ------------------------------------------------------------- */

static int export_table(const fig_ctx *c, size_t i, const char *name, char *msg, size_t len)
{
    const char *why;
    const qmla_table *t = input_table(&c->in[i], name, &why);
    if (!t)
        return 0; /* absent: the figures needing it are skipped */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/data/m%zu.%s.tsv", c->dir, i + 1, name);
    /* atomic (a temporary renamed into place): a full disk leaves no empty
     * or cut data file, and the message names the cause */
    qmla_error err;
    qmla_error_clear(&err);
    if (qmla_export_save(path, "data file", &c->in[i].path, 1, t, c->in[i].root,
                         c->in[i].n_root, c->in[i].path, QMLA_EXPORT_TSV, &err)) {
        snprintf(msg, len, "%s", err.msg);
        return -1;
    }
    return 0;
}

/* Save the text of memory stream m (buf, n) to path atomically (qmla/text.h);
 * -1 with the message in msg. */
static int save_text(const char *path, FILE *m, char **buf, size_t *n, char *msg, size_t len)
{
    qmla_error err;
    qmla_error_clear(&err);
    int st = fclose(m) != 0 ? qmla_error_set(&err, QMLA_ENOMEM, "%s: out of memory", path)
                            : qmla_text_save(path, "output file", NULL, 0, *buf, *n, &err);
    free(*buf);
    *buf = NULL;
    if (st)
        snprintf(msg, len, "%s", err.msg);
    return st ? -1 : 0;
}

/* DIR/data/inputs.gp: the inputs as gnuplot arrays, loaded by every script. */
static int write_inputs_gp(const fig_ctx *c, char *msg, size_t len)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/data/inputs.gp", c->dir);
    char *buf = NULL;
    size_t blen = 0;
    FILE *f = open_memstream(&buf, &blen);
    if (!f) {
        snprintf(msg, len, "%s: out of memory", path);
        return -1;
    }
    fprintf(f, "# written by qmla figures: the inputs, m<i>.<table>.tsv for i = 1..nmodels\n");
    fprintf(f, "nmodels = %zu\narray label[%zu]\narray model[%zu]\narray source[%zu]\n"
               "array nmse[%zu]\n", c->n, c->n, c->n, c->n, c->n);
    for (size_t i = 0; i < c->n; i++) {
        fprintf(f, "label[%zu] = ", i + 1);
        gp_quote(f, c->in[i].label);
        fprintf(f, "\nmodel[%zu] = ", i + 1);
        gp_quote(f, c->in[i].model);
        fprintf(f, "\nsource[%zu] = ", i + 1);
        gp_quote(f, c->in[i].path);
        char nu[40];
        qmla_export_double(c->in[i].nmse, nu, sizeof nu);
        fprintf(f, "\nnmse[%zu] = %s\n", i + 1, isnan(c->in[i].nmse) ? "NaN" : nu);
    }
    return save_text(path, f, &buf, &blen, msg, len);
}

/* ---- gnuplot ------------------------------------------------------------ */

static void fig_size(const fig_ctx *c, const figure_def *f, int *w, int *h)
{
    *w = f->w + f->w_model * (int)c->n;
    *h = f->h + f->h_model * (int)c->n;
}

/* Run plots/<name>.gp in DIR; its output DIR/<name>.<format>. */
static int render_gnuplot(const fig_ctx *c, const figure_def *f, char *msg, size_t len)
{
    char script[PATH_MAX + 64], out[PATH_MAX + 64], log[PATH_MAX + 64], setup[PATH_MAX * 2];
    snprintf(script, sizeof script, "%s/%s.gp", c->plots, f->name);
    if (access(script, R_OK)) {
        snprintf(msg, len, "%s: cannot read the figure's script", script);
        return -1;
    }
    snprintf(out, sizeof out, "%s/%s.%s", c->dir, f->name, c->format);
    snprintf(log, sizeof log, "%s/data/%s.log", c->dir, f->name);
    int w, h;
    fig_size(c, f, &w, &h);
    {
        char *buf = NULL;
        size_t blen = 0;
        FILE *m = open_memstream(&buf, &blen);
        if (!m) {
            snprintf(msg, len, "out of memory");
            return -1;
        }
        fprintf(m, "term=");
        gp_quote(m, c->format);
        fprintf(m, "; outfile=");
        char rel[256];
        snprintf(rel, sizeof rel, "%s.%s", f->name, c->format);
        gp_quote(m, rel);
        fprintf(m, "; width=%d; height=%d; plotdir=", w, h);
        gp_quote(m, c->plots);
        fprintf(m, "; load 'data/inputs.gp'");
        fclose(m);
        snprintf(setup, sizeof setup, "%s", buf);
        free(buf);
    }
    unlink(out);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(msg, len, "cannot start gnuplot (fork failed)");
        return -1;
    }
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0666);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        if (chdir(c->dir))
            _exit(126);
        execlp(c->gnuplot, c->gnuplot, "-e", setup, script, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code == 127) {
        snprintf(msg, len, "cannot run \"%s\" (install gnuplot-nox, or give --gnuplot PATH)",
                 c->gnuplot);
        return -1;
    }
    struct stat st;
    if (code != 0 || stat(out, &st) || st.st_size == 0) {
        /* the first error line of gnuplot's log */
        char line[512] = "";
        FILE *lf = fopen(log, "r");
        if (lf) {
            char l[512];
            while (fgets(l, sizeof l, lf))
                if (strstr(l, "\" line ")) { /* "script" line N: message */
                    snprintf(line, sizeof line, "%s", l);
                    break;
                }
            fclose(lf);
        }
        line[strcspn(line, "\n")] = '\0';
        snprintf(msg, len, "%s: gnuplot exited %d%s%s (log %s)", script, code,
                 line[0] ? ": " : "", line, log);
        unlink(out);
        return -1;
    }
    return 0;
}

/* ---- the paper's rows (plots/NAME-paper.tsv) ------------------------ */

/* A paper file of plots/: comment lines, a header of nf named columns
 * (checked), rows of nf tab-separated fields. */
typedef struct paper_tsv {
    size_t n;
    int line[32];          /* each row's line number in the file */
    char cell[32][8][64];
} paper_tsv;

static int read_paper_tsv(const char *path, const char *const *head, int nf, paper_tsv *p,
                          char *msg, size_t len)
{
    if (nf > 8) {
        snprintf(msg, len, "%s: %d columns: at most 8", path, nf);
        return -1;
    }
    p->n = 0;
    FILE *pf = fopen(path, "r");
    if (!pf) {
        snprintf(msg, len, "%s: cannot open (the paper's table)", path);
        return -1;
    }
    char line[1024];
    int header = 0, lineno = 0;
    while (fgets(line, sizeof line, pf)) {
        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '#' || !line[0])
            continue;
        char *fld[8] = {0}, *save = NULL;
        int got = 0;
        for (char *t = strtok_r(line, "\t", &save); t && got < 8; t = strtok_r(NULL, "\t", &save))
            fld[got++] = t;
        if (!header) {
            for (int k = 0; k < nf; k++)
                if (k >= got || strcmp(fld[k], head[k])) {
                    snprintf(msg, len, "%s:%d: expected header column %d \"%s\", found \"%s\"",
                             path, lineno, k + 1, head[k], k < got ? fld[k] : "");
                    fclose(pf);
                    return -1;
                }
            header = 1;
            continue;
        }
        if (got != nf || p->n == sizeof p->cell / sizeof p->cell[0]) {
            snprintf(msg, len, "%s:%d: expected %d tab-separated fields, found %d", path, lineno,
                     nf, got);
            fclose(pf);
            return -1;
        }
        for (int k = 0; k < nf; k++)
            snprintf(p->cell[p->n][k], sizeof p->cell[p->n][k], "%s", fld[k]);
        p->line[p->n++] = lineno;
    }
    fclose(pf);
    if (!header) {
        snprintf(msg, len, "%s: no header line", path);
        return -1;
    }
    return 0;
}

/* ---- Table 4 ------------------------------------------------------------ */

typedef struct paper_row {
    char model[128];
    char content[32], rope[32], ratio[32], layers[16], bits[16], nmse[32];
    int used;
} paper_row;

/* plots/table4-paper.tsv's columns, and its rows as paper_row */
static const char *const t4_head[7] = {"model", "content_response", "rope_response", "ratio",
                                       "layers", "bits", "nmse_target"};

static void t4_paper_rows(const paper_tsv *p, paper_row *rows, size_t cap, size_t *n)
{
    *n = 0;
    for (size_t k = 0; k < p->n && *n < cap; k++) {
        paper_row *r = &rows[(*n)++];
        memset(r, 0, sizeof *r);
        snprintf(r->model, sizeof r->model, "%s", p->cell[k][0]);
        snprintf(r->content, sizeof r->content, "%s", p->cell[k][1]);
        snprintf(r->rope, sizeof r->rope, "%s", p->cell[k][2]);
        snprintf(r->ratio, sizeof r->ratio, "%s", p->cell[k][3]);
        snprintf(r->layers, sizeof r->layers, "%s", p->cell[k][4]);
        snprintf(r->bits, sizeof r->bits, "%s", p->cell[k][5]);
        snprintf(r->nmse, sizeof r->nmse, "%s", p->cell[k][6]);
    }
}

static double attr_num(const qmla_attr *a, size_t n, const char *name)
{
    const qmla_attr *x = qmla_attr_find(a, n, name);
    return x && x->v.n ? qmla_values_get(&x->v, 0) : NAN;
}

/* One output row in both files: v = source, model, layers, bits, nmse,
 * content, rope, ratio (CSV, exact) and r3 = the three rounded (Markdown). */
static void t4_row(FILE *md, FILE *csv, const char *const v[8], const char *const r3[3])
{
    fprintf(md, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", v[1], v[0], v[2], v[3], v[4],
            r3[0], r3[1], r3[2]);
    for (int k = 0; k < 8; k++) {
        if (strpbrk(v[k], ",\"\n")) {
            fputc('"', csv);
            for (const char *p = v[k]; *p; p++) {
                if (*p == '"')
                    fputc('"', csv);
                fputc(*p, csv);
            }
            fputc('"', csv);
        } else {
            fputs(v[k], csv);
        }
        fputc(k < 7 ? ',' : '\n', csv);
    }
}

static void t4_paper(FILE *md, FILE *csv, const paper_row *p)
{
    const char *v[8] = {"paper", p->model, p->layers, p->bits, p->nmse, p->content, p->rope,
                        p->ratio};
    const char *r3[3] = {p->content, p->rope, p->ratio};
    t4_row(md, csv, v, r3);
}

/* The Markdown and CSV files DIR/<stem>.md and .csv of one table, built in
 * memory (tab_open) and saved atomically together (tab_close); on failure
 * nothing is left open and msg names the file. */
typedef struct tab_out {
    char mdp[PATH_MAX + 32], csvp[PATH_MAX + 32];
    char *mdb, *csvb;
    size_t mdn, csvn;
    FILE *md, *csv;
} tab_out;

/* tab_open undone (also a half-done one): the files that were opened closed
 * and freed, nothing written */
static void tab_abort(tab_out *o)
{
    if (o->md)
        fclose(o->md);
    if (o->csv)
        fclose(o->csv);
    free(o->mdb);
    free(o->csvb);
}

static int tab_open(tab_out *o, const fig_ctx *c, const char *stem, char *msg, size_t len)
{
    memset(o, 0, sizeof *o);
    snprintf(o->mdp, sizeof o->mdp, "%s/%s.md", c->dir, stem);
    snprintf(o->csvp, sizeof o->csvp, "%s/%s.csv", c->dir, stem);
    o->md = open_memstream(&o->mdb, &o->mdn);
    o->csv = open_memstream(&o->csvb, &o->csvn);
    if (o->md && o->csv)
        return 0;
    tab_abort(o);
    snprintf(msg, len, "%s: out of memory", o->mdp);
    return -1;
}

static int tab_close(tab_out *o, char *msg, size_t len)
{
    if (save_text(o->mdp, o->md, &o->mdb, &o->mdn, msg, len)) {
        fclose(o->csv);
        free(o->csvb);
        return -1;
    }
    return save_text(o->csvp, o->csv, &o->csvb, &o->csvn, msg, len);
}

/* The start of every table: the paper's rows of plots/<paper_file> (header
 * head[0..nf-1] checked) into *paper, then the output files DIR/<stem>.md
 * and .csv opened in memory (tab_open); ppath receives the paper file's
 * path (for the caller's messages). */
static int table_begin(tab_out *o, const fig_ctx *c, const char *stem, const char *paper_file,
                       const char *const *head, int nf, paper_tsv *paper,
                       char ppath[PATH_MAX + 32], char *msg, size_t len)
{
    snprintf(ppath, PATH_MAX + 32, "%s/%s", c->plots, paper_file);
    if (read_paper_tsv(ppath, head, nf, paper, msg, len))
        return -1;
    return tab_open(o, c, stem, msg, len);
}

static int render_table4(const fig_ctx *c, const figure_def *f, char *msg, size_t len)
{
    (void)f;
    paper_row paper[64];
    size_t np;
    static paper_tsv tsv;
    tab_out o;
    char ppath[PATH_MAX + 32];
    if (table_begin(&o, c, "table4", "table4-paper.tsv", t4_head, 7, &tsv, ppath, msg, len))
        return -1;
    t4_paper_rows(&tsv, paper, 64, &np);
    FILE *md = o.md, *csv = o.csv;
    fprintf(md, "Model-level responses at matched cache NMSE (Table 4 of the QuantMLA paper): "
                "mean over layers of the content and RoPE responses R = NMSE_out / NMSE_cache "
                "(dimensionless) and their ratio. Rows of source *paper* are the paper's "
                "(plots/table4-paper.tsv), placed beside ours where the model matches.\n\n");
    fprintf(md, "| model | source | layers | bits | cache NMSE | content response | "
                "RoPE response | ratio |\n|---|---|---:|---:|---:|---:|---:|---:|\n");
    fprintf(csv, "source,model,layers,bits,nmse_target,content_response,rope_response,ratio\n");
    for (size_t i = 0; i < c->n; i++) {
        const char *why;
        fig_input *in = &c->in[i];
        const qmla_table *t = input_table(in, "summary", &why);
        const double rc = attr_num(t->attrs, t->n_attrs, "model_response_content"),
                     rr = attr_num(t->attrs, t->n_attrs, "model_response_rope"),
                     rq = attr_num(t->attrs, t->n_attrs, "model_ratio");
        char bits[32], nmse[32], sc[32], sr[32], sq[32], c3[32], r3[32], q3[32];
        const double b = attr_num(in->root, in->n_root, "bits");
        if (isnan(b))
            bits[0] = '\0';
        else
            snprintf(bits, sizeof bits, "%.0f", b);
        if (isnan(in->nmse))
            nmse[0] = '\0';
        else
            qmla_export_double(in->nmse, nmse, sizeof nmse);
        qmla_export_double(rc, sc, sizeof sc);
        qmla_export_double(rr, sr, sizeof sr);
        qmla_export_double(rq, sq, sizeof sq);
        snprintf(c3, sizeof c3, "%.3f", rc);
        snprintf(r3, sizeof r3, "%.3f", rr);
        snprintf(q3, sizeof q3, "%.3f", rq);
        char src[160];
        snprintf(src, sizeof src, "ours (%s)", in->label);
        const char *slash = strrchr(in->model, '/');
        const char *shortm = slash ? slash + 1 : in->model;
        char layers[32];
        snprintf(layers, sizeof layers, "%zu", t->n_rows);
        const char *v[8] = {src, in->model, layers, bits, nmse, sc, sr, sq};
        const char *r[3] = {c3, r3, q3};
        t4_row(md, csv, v, r);
        for (size_t k = 0; k < np; k++)
            if (!strcasecmp(paper[k].model, shortm)) {
                paper[k].used = 1;
                t4_paper(md, csv, &paper[k]);
            }
    }
    for (size_t k = 0; k < np; k++)
        if (!paper[k].used)
            t4_paper(md, csv, &paper[k]);
    return tab_close(&o, msg, len);
}

/* ---- Tables 5 and 6: group attributes beside the paper's rows ---------- */

/* One column of an attribute table: its header, the attribute of each row
 * (printf pattern with %s = the row's key) and optionally its 95 % interval. */
typedef struct attr_col {
    const char *head, *csv, *attr, *lo, *hi;
} attr_col;

typedef struct attr_tab {
    const char *name, *title, *paper;   /* stem, Markdown intro, plots/<paper> */
    const char *row_head;               /* the first column's header */
    size_t n_rows, n_cols;
    const char *row_key[8], *row_label[8];
    attr_col col[4];
} attr_tab;

static const attr_tab attr_tables[] = {
    {"table5",
     "Predictive validation of the operator–error model (Table 5 of the QuantMLA paper): the "
     "log RoPE/content response ratio predicted per direction against the measured one "
     "(`qmla predict`'s /predict attributes; docs/analysis.md). Spearman and the median "
     "absolute log error of the operator + allocation predictor, and the log-ratio MAE of "
     "the three predictors. Rows of source *paper* are the paper's (plots/table5-paper.tsv, "
     "36 validation points per model).",
     "table5-paper.tsv", "quantity", 6, 1,
     {"points", "spearman", "median_abs_log_error", "mae_log_ratio_cache_only",
      "mae_log_ratio_operator_only", "mae_log_ratio_operator_allocation"},
     {"validation points (pairs)", "held-out Spearman (frozen predictor)",
      "held-out median absolute log error",
      "log-ratio MAE: cache error only", "log-ratio MAE: operator trace only",
      "log-ratio MAE: operator + error allocation"},
     {{"value", "value", "%s", NULL, NULL}}},
    {"table6",
     "Equal-energy interventions (Table 6 of the QuantMLA paper): gain ratio of each control "
     "to the original QDQ-induced error, per path, with the 95 % bootstrap interval "
     "(`qmla intervene`'s /interventions attributes); unity is an unchanged gain. Rows of "
     "source *paper* are the paper's (plots/table6-paper.tsv: DeepSeek-V2-Lite layer 20, 32 "
     "repetitions per control, no intervals printed).",
     "table6-paper.tsv", "control", 3, 2,
     {"sign", "permute", "isotropic"},
     {"independent sign randomization", "whole-token permutation", "isotropic direction"},
     {{"content gain ratio", "content", "gain_ratio_%s_content", "gain_ratio_%s_content_ci_low",
       "gain_ratio_%s_content_ci_high"},
      {"RoPE gain ratio", "rope", "gain_ratio_%s_rope", "gain_ratio_%s_rope_ci_low",
       "gain_ratio_%s_rope_ci_high"}}},
};

static void csv_field(FILE *csv, const char *v, int last)
{
    if (strpbrk(v, ",\"\n")) {
        fputc('"', csv);
        for (const char *p = v; *p; p++) {
            if (*p == '"')
                fputc('"', csv);
            fputc(*p, csv);
        }
        fputc('"', csv);
    } else {
        fputs(v, csv);
    }
    fputc(last ? '\n' : ',', csv);
}

/* The value of row r, column k of the input's table (NaN when absent);
 * "points" is the n_pairs attribute. */
static double attr_cell(const qmla_table *t, const attr_tab *T, size_t r, const char *pat)
{
    char name[128];
    if (!strcmp(T->row_key[r], "points"))
        return attr_num(t->attrs, t->n_attrs, "n_pairs");
    snprintf(name, sizeof name, pat, T->row_key[r]);
    return attr_num(t->attrs, t->n_attrs, name);
}

typedef struct attr_paper {
    char model[128], key[64], val[4][32];
    int used;
} attr_paper;

/* plots/<T->paper>'s header: model, the row-key column, one column per
 * attr_col csv name; returns the number of columns */
static int attr_paper_head(const attr_tab *T, const char *want[8])
{
    want[0] = "model";
    want[1] = T->row_head;
    for (size_t k = 0; k < T->n_cols; k++)
        want[2 + k] = T->col[k].csv;
    return 2 + (int)T->n_cols;
}

/* the rows of plots/<T->paper> (path: for the messages), each row key known */
static int attr_paper_rows_of(const char *path, const paper_tsv *p, const attr_tab *T,
                              attr_paper *rows, size_t cap, size_t *n, char *msg, size_t len)
{
    *n = 0;
    for (size_t k = 0; k < p->n && *n < cap; k++) {
        int known = 0;
        for (size_t r = 0; r < T->n_rows; r++)
            known |= !strcmp(p->cell[k][1], T->row_key[r]);
        if (!known) {
            snprintf(msg, len, "%s:%d: unknown %s \"%s\"", path, p->line[k], T->row_head,
                     p->cell[k][1]);
            return -1;
        }
        attr_paper *a = &rows[(*n)++];
        memset(a, 0, sizeof *a);
        snprintf(a->model, sizeof a->model, "%s", p->cell[k][0]);
        snprintf(a->key, sizeof a->key, "%s", p->cell[k][1]);
        for (size_t c = 0; c < T->n_cols; c++)
            snprintf(a->val[c], sizeof a->val[c], "%s", p->cell[k][2 + c]);
    }
    return 0;
}

static const char *row_label(const attr_tab *T, const char *key)
{
    for (size_t r = 0; r < T->n_rows; r++)
        if (!strcmp(T->row_key[r], key))
            return T->row_label[r];
    return key;
}

static void attr_paper_rows(FILE *md, FILE *csv, const attr_tab *T, attr_paper *p)
{
    p->used = 1;
    fprintf(md, "| %s | paper | %s |", p->model, row_label(T, p->key));
    for (size_t k = 0; k < T->n_cols; k++)
        fprintf(md, " %s |", p->val[k]);
    fputc('\n', md);
    csv_field(csv, "paper", 0);
    csv_field(csv, p->model, 0);
    csv_field(csv, p->key, 0);
    for (size_t k = 0; k < T->n_cols; k++) {
        const int ci = T->col[k].lo != NULL, last = k + 1 == T->n_cols;
        csv_field(csv, p->val[k], last && !ci);
        if (ci) {
            csv_field(csv, "", 0);
            csv_field(csv, "", last);
        }
    }
}

static int render_attr_table(const fig_ctx *c, const figure_def *f, char *msg, size_t len)
{
    const attr_tab *T = NULL;
    for (size_t k = 0; k < sizeof attr_tables / sizeof attr_tables[0]; k++)
        if (!strcmp(attr_tables[k].name, f->name))
            T = &attr_tables[k];
    if (!T) {
        snprintf(msg, len, "%s: no attribute-table definition", f->name);
        return -1;
    }
    attr_paper paper[32];
    size_t np;
    static paper_tsv tsv;
    const char *want[8];
    const int nf = attr_paper_head(T, want);
    tab_out o;
    char ppath[PATH_MAX + 32];
    if (table_begin(&o, c, T->name, T->paper, want, nf, &tsv, ppath, msg, len))
        return -1;
    if (attr_paper_rows_of(ppath, &tsv, T, paper, 32, &np, msg, len)) {
        tab_abort(&o);
        return -1;
    }
    FILE *md = o.md, *csv = o.csv;
    fprintf(md, "%s\n\n| model | source | %s |", T->title, T->row_head);
    for (size_t k = 0; k < T->n_cols; k++)
        fprintf(md, " %s%s |", T->col[k].head, T->col[k].lo ? " [95 % CI]" : "");
    fprintf(md, "\n|---|---|---|");
    for (size_t k = 0; k < T->n_cols; k++)
        fprintf(md, "---:|");
    fputc('\n', md);
    fprintf(csv, "source,model,%s", T->row_head);
    for (size_t k = 0; k < T->n_cols; k++) {
        fprintf(csv, ",%s", T->col[k].csv);
        if (T->col[k].lo)
            fprintf(csv, ",%s_ci_low,%s_ci_high", T->col[k].csv, T->col[k].csv);
    }
    fputc('\n', csv);
    for (size_t i = 0; i < c->n; i++) {
        const char *why;
        fig_input *in = &c->in[i];
        const qmla_table *t = input_table(in, f->table, &why);
        char src[160];
        snprintf(src, sizeof src, "ours (%s)", in->label);
        /* a file without a model attribute (qmla predict's): its label */
        const char *mname = in->model[0] ? in->model : in->label;
        for (size_t r = 0; r < T->n_rows; r++) {
            fprintf(md, "| %s | %s | %s |", mname, src, T->row_label[r]);
            csv_field(csv, src, 0);
            csv_field(csv, mname, 0);
            csv_field(csv, T->row_key[r], 0);
            for (size_t k = 0; k < T->n_cols; k++) {
                const attr_col *a = &T->col[k];
                const double v = attr_cell(t, T, r, a->attr);
                const int last = k + 1 == T->n_cols;
                char ex[40];
                qmla_export_double(v, ex, sizeof ex);
                csv_field(csv, isnan(v) ? "" : ex, last && !a->lo);
                if (!strcmp(T->row_key[r], "points"))
                    fprintf(md, " %.0f |", v);
                else if (a->lo) {
                    const double lo = attr_cell(t, T, r, a->lo), hi = attr_cell(t, T, r, a->hi);
                    char el[40], eh[40];
                    qmla_export_double(lo, el, sizeof el);
                    qmla_export_double(hi, eh, sizeof eh);
                    csv_field(csv, isnan(lo) ? "" : el, 0);
                    csv_field(csv, isnan(hi) ? "" : eh, last);
                    fprintf(md, " %.3f [%.3f, %.3f] |", v, lo, hi);
                } else {
                    fprintf(md, " %.4f |", v);
                }
            }
            fputc('\n', md);
        }
        const char *slash = strrchr(in->model, '/');
        const char *shortm = slash ? slash + 1 : in->model;
        for (size_t k = 0; k < np; k++)
            if (!strcasecmp(paper[k].model, shortm))
                attr_paper_rows(md, csv, T, &paper[k]);
    }
    for (size_t k = 0; k < np; k++)
        if (!paper[k].used)
            attr_paper_rows(md, csv, T, &paper[k]);
    return tab_close(&o, msg, len);
}

/* ---- Tables 9 and 10: table rows beside the paper's ------------------- */

/* Value of column `name` at row r of t (NaN when absent or a string). */
static double col_at(const qmla_table *t, const char *name, size_t r)
{
    const qmla_table_col *c = qmla_table_column(t, name);
    return c && c->v.kind != QMLA_VAL_STRING && r < c->v.n ? qmla_values_get(&c->v, r) : NAN;
}

/* 4096 -> "4K", 1048576 -> "1M". */
static void ctx_label(double t, char *buf, size_t len)
{
    const long v = (long)t;
    if (v > 0 && v % 1048576 == 0)
        snprintf(buf, len, "%ldM", v / 1048576);
    else if (v > 0 && v % 1024 == 0)
        snprintf(buf, len, "%ldK", v / 1024);
    else
        snprintf(buf, len, "%ld", v);
}

static void csv_num(FILE *csv, double v, int last)
{
    char ex[40];
    qmla_export_double(v, ex, sizeof ex);
    csv_field(csv, isnan(v) ? "" : ex, last);
}

static const char *const t9_cfg[4] = {"BF16", "C4R4", "C2R4", "C8R8"};

static int render_table9(const fig_ctx *c, const figure_def *f, char *msg, size_t len)
{
    (void)f;
    static const char *const head[3] = {"model", "quantity", "value"};
    static paper_tsv paper;
    tab_out o;
    char ppath[PATH_MAX + 32];
    if (table_begin(&o, c, "table9", "table9-paper.tsv", head, 3, &paper, ppath, msg, len))
        return -1;
    FILE *md = o.md, *csv = o.csv;
    fprintf(md, "Decode attention latency at fixed context lengths (Table 9 of the QuantMLA "
                "paper): the median time of the BF16 cache and of each low-bit cache "
                "(sink4/local128) at batch 8 and 32 (medians of one call, µs), and "
                "Δ = (t / t_BF16 − 1) × 100 %% (the decode benchmark's /table9; "
                "docs/decode.md). The paper's per-point values are not in "
                "the text we hold: its rows (plots/table9-paper.tsv) are the range it states, "
                "beside ours.\n\n");
    fprintf(md, "| model | source | batch | context | BF16 µs |");
    for (int k = 1; k < 4; k++)
        fprintf(md, " %s µs | %s Δ |", t9_cfg[k], t9_cfg[k]);
    fprintf(md, "\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    fprintf(csv, "source,model,row,batch,context,BF16_us");
    for (int k = 1; k < 4; k++)
        fprintf(csv, ",%s_us,%s_delta_pct", t9_cfg[k], t9_cfg[k]);
    fprintf(csv, ",value\n");
    double dmin[MAX_INPUTS], dmax[MAX_INPUTS], dfar[MAX_INPUTS];
    for (size_t i = 0; i < c->n; i++) {
        const char *why;
        fig_input *in = &c->in[i];
        const qmla_table *t = input_table(in, f->table, &why);
        char src[160];
        snprintf(src, sizeof src, "ours (%s)", in->label);
        const char *mname = in->model[0] ? in->model : in->label;
        dmin[i] = INFINITY;
        dmax[i] = -INFINITY;
        dfar[i] = 0;
        for (size_t r = 0; r < t->n_rows; r++) {
            const double b = col_at(t, "batch", r), ctx = col_at(t, "context", r);
            if (b != 8 && b != 32)
                continue;
            char cl[32], us[32];
            ctx_label(ctx, cl, sizeof cl);
            snprintf(us, sizeof us, "%.2f", col_at(t, "BF16_us", r));
            fprintf(md, "| %s | %s | %.0f | %s | %s |", mname, src, b, cl, us);
            csv_field(csv, src, 0);
            csv_field(csv, mname, 0);
            csv_field(csv, "point", 0);
            csv_num(csv, b, 0);
            csv_num(csv, ctx, 0);
            csv_num(csv, col_at(t, "BF16_us", r), 0);
            for (int k = 1; k < 4; k++) {
                char nm[32];
                snprintf(nm, sizeof nm, "%s_us", t9_cfg[k]);
                const double v = col_at(t, nm, r);
                const double d = (v / col_at(t, "BF16_us", r) - 1.0) * 100.0;
                if (isnan(v))
                    fprintf(md, " – | – |");
                else
                    fprintf(md, " %.2f | %+.2f %% |", v, d);
                csv_num(csv, v, 0);
                csv_num(csv, d, 0);
                if (k == 1 && !isnan(d)) {
                    dmin[i] = d < dmin[i] ? d : dmin[i];
                    dmax[i] = d > dmax[i] ? d : dmax[i];
                    if (ctx >= 65536 && fabs(d) > dfar[i])
                        dfar[i] = fabs(d);
                }
            }
            csv_field(csv, "", 1);
            fputc('\n', md);
        }
    }
    static const char *const qkey[3] = {"c4r4_delta_min_pct", "c4r4_delta_max_pct",
                                        "c4r4_abs_delta_max_from_64k_pct"};
    static const char *const qlab[3] = {"C4R4 Δ, lowest (batch 8 and 32, every context)",
                                        "C4R4 Δ, highest (batch 8 and 32, every context)",
                                        "C4R4 largest absolute Δ from 64K on"};
    fprintf(md, "\n| model | source | quantity | value |\n|---|---|---|---:|\n");
    for (size_t i = 0; i < c->n; i++) {
        const char *mname = c->in[i].model[0] ? c->in[i].model : c->in[i].label;
        char src[160];
        snprintf(src, sizeof src, "ours (%s)", c->in[i].label);
        const double v[3] = {dmin[i], dmax[i], dfar[i]};
        for (int q = 0; q < 3; q++) {
            const double x = isfinite(v[q]) ? v[q] : NAN;
            if (isnan(x))
                fprintf(md, "| %s | %s | %s | – |\n", mname, src, qlab[q]);
            else
                fprintf(md, q == 2 ? "| %s | %s | %s | %.2f %% |\n" : "| %s | %s | %s | %+.2f %% |\n",
                        mname, src, qlab[q], x);
            csv_field(csv, src, 0);
            csv_field(csv, mname, 0);
            csv_field(csv, qkey[q], 0);
            for (int k = 0; k < 9; k++) /* batch .. C8R8_delta_pct */
                csv_field(csv, "", 0);
            csv_num(csv, x, 1);
        }
    }
    for (size_t r = 0; r < paper.n; r++) {
        const char *lab = paper.cell[r][1];
        for (int q = 0; q < 3; q++)
            if (!strcmp(paper.cell[r][1], qkey[q]))
                lab = qlab[q];
        fprintf(md, "| %s | paper | %s | %s %% |\n", paper.cell[r][0], lab, paper.cell[r][2]);
        csv_field(csv, "paper", 0);
        csv_field(csv, paper.cell[r][0], 0);
        csv_field(csv, paper.cell[r][1], 0);
        for (int k = 0; k < 9; k++) /* batch .. C8R8_delta_pct */
            csv_field(csv, "", 0);
        csv_field(csv, paper.cell[r][2], 1);
    }
    return tab_close(&o, msg, len);
}

static int render_table10(const fig_ctx *c, const figure_def *f, char *msg, size_t len)
{
    static const char *const head[4] = {"model", "metric", "BF16", "C4R4"};
    static const char *const mkey[5] = {"slots", "elapsed_s", "throughput", "preemptions",
                                        "recomputed_tokens"};
    static const char *const mlab[5] = {"usable cache slots", "elapsed time (s)",
                                        "output throughput (tokens/s)", "preemption events",
                                        "recomputed tokens"};
    static paper_tsv paper;
    tab_out o;
    char ppath[PATH_MAX + 32];
    if (table_begin(&o, c, "table10", "table10-paper.tsv", head, 4, &paper, ppath, msg, len))
        return -1;
    /* the columns: every input's configurations in order, then the paper's */
    const char *cols[16];
    size_t nc = 0;
    for (size_t i = 0; i < c->n; i++) {
        const char *why;
        const qmla_table *t = input_table(&c->in[i], f->table, &why);
        const qmla_table_col *cc = qmla_table_column(t, "config");
        for (size_t r = 0; cc && cc->v.kind == QMLA_VAL_STRING && r < t->n_rows; r++) {
            size_t k = 0;
            while (k < nc && strcmp(cols[k], cc->v.s[r]))
                k++;
            if (k == nc && nc < 14)
                cols[nc++] = cc->v.s[r];
        }
    }
    for (int p = 2; p < 4; p++) {
        size_t k = 0;
        while (k < nc && strcmp(cols[k], head[p]))
            k++;
        if (k == nc)
            cols[nc++] = head[p];
    }
    FILE *md = o.md, *csv = o.csv;
    fprintf(md, "Serving under KV-cache pressure (Table 10 of the QuantMLA paper): usable "
                "cache slots, whole-job elapsed time and output throughput, preemption events "
                "and recomputed tokens per cache configuration (`qmla serve-sim`'s /serve_sim: "
                "a simulation of vLLM's scheduler with a cost model, "
                "experiments/serving/README.md). Rows of source *paper* are the paper's "
                "(plots/table10-paper.tsv: DeepSeek-R1-0528 on eight GPUs, one C4R4 run "
                "against the recorded BF16 baseline).\n\n| model | source | metric |");
    fprintf(csv, "source,model,metric,");
    for (size_t k = 0; k < nc; k++) {
        fprintf(md, " %s |", cols[k]);
        csv_field(csv, cols[k], k + 1 == nc);
    }
    fprintf(md, "\n|---|---|---|");
    for (size_t k = 0; k < nc; k++)
        fprintf(md, "---:|");
    fputc('\n', md);
    for (size_t i = 0; i < c->n; i++) {
        const char *why;
        fig_input *in = &c->in[i];
        const qmla_table *t = input_table(in, f->table, &why);
        const qmla_table_col *cc = qmla_table_column(t, "config");
        char src[160];
        snprintf(src, sizeof src, "ours (%s)", in->label);
        const char *mname = in->model[0] ? in->model : in->label;
        for (int m = 0; m < 5; m++) {
            fprintf(md, "| %s | %s | %s |", mname, src, mlab[m]);
            csv_field(csv, src, 0);
            csv_field(csv, mname, 0);
            csv_field(csv, mkey[m], 0);
            for (size_t k = 0; k < nc; k++) {
                double v = NAN;
                for (size_t r = 0; cc && cc->v.kind == QMLA_VAL_STRING && r < t->n_rows; r++)
                    if (!strcmp(cc->v.s[r], cols[k]))
                        v = col_at(t, mkey[m], r);
                if (isnan(v))
                    fprintf(md, " – |");
                else if (m == 1 || m == 2)
                    fprintf(md, " %.3f |", v);
                else
                    fprintf(md, " %.0f |", v);
                csv_num(csv, v, k + 1 == nc);
            }
            fputc('\n', md);
        }
    }
    for (size_t r = 0; r < paper.n; r++) {
        const char *lab = paper.cell[r][1];
        for (int m = 0; m < 5; m++)
            if (!strcmp(lab, mkey[m]))
                lab = mlab[m];
        fprintf(md, "| %s | paper | %s |", paper.cell[r][0], lab);
        csv_field(csv, "paper", 0);
        csv_field(csv, paper.cell[r][0], 0);
        csv_field(csv, paper.cell[r][1], 0);
        for (size_t k = 0; k < nc; k++) {
            const char *v = "";
            for (int p = 2; p < 4; p++)
                if (!strcmp(cols[k], head[p]))
                    v = paper.cell[r][p];
            fprintf(md, " %s |", v[0] ? v : "–");
            csv_field(csv, v, k + 1 == nc);
        }
        fputc('\n', md);
    }
    return tab_close(&o, msg, len);
}

/* ---- the command -------------------------------------------------------- */

static void list_figures(void)
{
    printf("%-18s %-20s %-9s %s\n", "figure", "table", "size", "needs / what");
    for (size_t k = 0; k < N_FIGURES; k++) {
        const figure_def *f = &figures[k];
        char size[48];
        if (f->render)
            snprintf(size, sizeof size, "md+csv");
        else
            snprintf(size, sizeof size, "%d+%dN x %d+%dN", f->w, f->w_model, f->h, f->h_model);
        printf("%-18s %-20s %-9s %s\n%-18s %-20s %-9s %s\n", f->name, f->table, size, f->needs,
               "", "", "", f->what);
    }
}

/* The registry for other commands (cli.h; qmla report lists what it embeds). */
size_t cli_figure_count(void) { return N_FIGURES; }

const char *cli_figure_at(size_t k, const char **what)
{
    *what = figures[k].what;
    return figures[k].name;
}

/* Is name in the comma-separated list? (cli.h) */
int cli_in_list(const char *list, const char *name)
{
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == n && !strncmp(p, name, n))
            return 1;
        p += l + (e ? 1 : 0);
    }
    return 0;
}

/* Selected: in --only (when given) and not in --exclude. */
static const char *sel_exclude;

static int selected(const char *only, const char *name)
{
    if (sel_exclude && cli_in_list(sel_exclude, name))
        return 0;
    return !only || cli_in_list(only, name);
}

/* Every name of a --only/--exclude list is a figure; else 0 and the bad one
 * (cli.h; qmla report checks its --exclude with it). */
int cli_figure_list_ok(const char *cmd, const char *opt, const char *list)
{
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t l = e ? (size_t)(e - p) : strlen(p);
        int found = 0;
        for (size_t k = 0; k < N_FIGURES; k++)
            found |= strlen(figures[k].name) == l && !strncmp(p, figures[k].name, l);
        if (!found) {
            cli_fail(cmd, "%s: no figure \"%.*s\" (see qmla figures --list)", opt, (int)l, p);
            return 0;
        }
        p += l + (e ? 1 : 0);
    }
    return 1;
}

int cmd_figures(int argc, char **argv)
{
    static const struct option lo[] = {{"output", required_argument, 0, 'o'},
                                       {"format", required_argument, 0, 'F'},
                                       {"labels", required_argument, 0, 'L'},
                                       {"only", required_argument, 0, 'O'},
                                       {"exclude", required_argument, 0, 'X'},
                                       {"plots", required_argument, 0, 'P'},
                                       {"gnuplot", required_argument, 0, 'G'},
                                       {"list", no_argument, 0, 'l'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    const char *dir = NULL, *format = "png", *labels = NULL, *only = NULL, *plots = NULL,
               *gnuplot = NULL, *exclude = NULL;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
        switch (ch) {
        case 'o': dir = optarg; break;
        case 'F': format = optarg; break;
        case 'L': labels = optarg; break;
        case 'O': only = optarg; break;
        case 'X': exclude = optarg; break;
        case 'P': plots = optarg; break;
        case 'G': gnuplot = optarg; break;
        case 'l': list_figures(); return QMLA_EXIT_OK;
        case 'h': help(stdout); return QMLA_EXIT_OK;
        default: help(stderr); return QMLA_EXIT_USAGE;
        }
    }
    if (strcmp(format, "png") && strcmp(format, "svg") && strcmp(format, "pdf"))
        return cli_fail("figures", "--format: expected png, svg or pdf, found \"%s\"", format);
    if (!dir)
        return cli_fail("figures", "missing -o DIR");
    const size_t n = (size_t)(argc - optind);
    if (n == 0)
        return cli_fail("figures", "expected one or more RESULTS.h5 (see qmla figures --help)");
    if (n > MAX_INPUTS)
        return cli_fail("figures", "expected at most %d results files, found %zu", MAX_INPUTS, n);
    if (only && !cli_figure_list_ok("figures", "--only", only))
        return QMLA_EXIT_USAGE;
    if (exclude && !cli_figure_list_ok("figures", "--exclude", exclude))
        return QMLA_EXIT_USAGE;
    sel_exclude = exclude;

    fig_ctx c;
    memset(&c, 0, sizeof c);
    c.dir = dir;
    c.format = format;
    c.gnuplot = gnuplot ? gnuplot : getenv("QMLA_GNUPLOT") ? getenv("QMLA_GNUPLOT") : "gnuplot";
    if (!plots)
        plots = getenv("QMLA_PLOTS_DIR");
    char fallback[PATH_MAX];
    if (!plots) {
        snprintf(fallback, sizeof fallback, "%s/plots", QMLA_SOURCE_ROOT);
        plots = fallback;
    }
    if (!realpath(plots, c.plots))
        return cli_fail("figures", "%s: no plots folder (give --plots DIR or set QMLA_PLOTS_DIR)",
                        plots);
    c.in = calloc(n, sizeof *c.in);
    if (!c.in)
        return cli_fail("figures", "out of memory");
    c.n = n;
    int rc = QMLA_EXIT_OK;
    char msg[QMLA_ERRMSG_MAX + PATH_MAX];
    for (size_t i = 0; i < n; i++) {
        c.in[i].path = argv[optind + (int)i];
        qmla_error err;
        qmla_error_clear(&err);
        if (qmla_file_attrs(c.in[i].path, &c.in[i].root, &c.in[i].n_root, &err)) {
            rc = cli_lib_error("figures", &err);
            goto out;
        }
    }
    make_labels(c.in, n);
    if (labels) {
        char **lab = NULL, *buf = NULL;
        size_t nl = 0;
        if (cli_split_list(labels, &lab, &nl, &buf) || nl != n) {
            rc = cli_fail("figures", "--labels: expected %zu labels (one per file), found %zu", n,
                          nl);
            free(lab);
            free(buf);
            goto out;
        }
        for (size_t i = 0; i < n; i++)
            snprintf(c.in[i].label, sizeof c.in[i].label, "%s", lab[i]);
        free(lab);
        free(buf);
    }
    char data[PATH_MAX + 8];
    snprintf(data, sizeof data, "%s/data", dir);
    if (mkdir_p(data)) {
        rc = cli_fail("figures", "%s: cannot create the folder: %s", data, strerror(errno));
        goto out;
    }
    /* export every table a selected figure needs, from every input */
    for (size_t k = 0; k < N_FIGURES; k++) {
        if (!selected(only, figures[k].name))
            continue;
        int dup = 0;
        for (size_t j = 0; j < k; j++)
            dup |= selected(only, figures[j].name) && !strcmp(figures[j].table, figures[k].table);
        for (size_t i = 0; i < n && !dup; i++)
            if (export_table(&c, i, figures[k].table, msg, sizeof msg)) {
                rc = cli_fail("figures", "%s", msg);
                goto out;
            }
    }
    if (write_inputs_gp(&c, msg, sizeof msg)) {
        rc = cli_fail("figures", "%s", msg);
        goto out;
    }
    size_t made = 0, skipped = 0, failed = 0;
    for (size_t k = 0; k < N_FIGURES; k++) {
        const figure_def *f = &figures[k];
        if (!selected(only, f->name))
            continue;
        char why[QMLA_ERRMSG_MAX + 256] = "";
        int ok = 1;
        for (size_t i = 0; i < n && ok; i++)
            ok = input_has(&c.in[i], f, why, sizeof why);
        if (!ok) {
            printf("figures: skipped %s: needs %s%s with %s (%s)\n", f->name, f->table,
                   strcmp(f->table, "responses_by_layer") ? "" : " (per-layer means of /responses)",
                   f->needs, why);
            skipped++;
            continue;
        }
        if ((f->render ? f->render : render_gnuplot)(&c, f, msg, sizeof msg)) {
            fprintf(stderr, "qmla figures: %s: %s\n", f->name, msg);
            failed++;
            continue;
        }
        if (f->render) {
            printf("figures: wrote %s/%s.md and %s/%s.csv\n", dir, f->name, dir, f->name);
        } else {
            int w, h;
            fig_size(&c, f, &w, &h);
            printf("figures: wrote %s/%s.%s (%dx%d)\n", dir, f->name, format, w, h);
        }
        made++;
    }
    printf("figures: %zu written, %zu skipped for missing data%s; data in %s/data\n", made,
           skipped, failed ? ", some failed" : "", dir);
    if (failed)
        rc = QMLA_EXIT_USAGE;
out:
    for (size_t i = 0; i < c.n; i++) {
        qmla_attrs_free(c.in[i].root, c.in[i].n_root);
        for (size_t k = 0; k < c.in[i].n_tab; k++)
            qmla_table_free(c.in[i].tab[k]);
    }
    free(c.in);
    return rc;
}
