/* cli_util.c — option parsing, error reporting and progress for `qmla`. */
#include "cli.h"
#include "qmla/capture.h"
#include "qmla/text.h"
#include "cli_safe.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Messages quote file names, cell names and model names read from files
 * and arguments: printed through cli_esc() so that none reaches the
 * terminal raw (cli_escape.c). */
int cli_fail(const char *cmd, const char *fmt, ...)
{
    char msg[2048], esc[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "qmla %s: %s\n", cmd, cli_esc(msg, esc, sizeof esc));
    return QMLA_EXIT_USAGE;
}

int cli_require_args(const char *cmd, int argc, const char *what, const char *out,
                     const char *out_what)
{
    if (optind != argc - 1)
        return cli_fail(cmd, "expected exactly one %s (see qmla %s --help)", what, cmd);
    if (out_what && !out)
        return cli_fail(cmd, "missing %s", out_what);
    return 0;
}

int cli_lib_error(const char *cmd, const qmla_error *err)
{
    char esc[4 * QMLA_ERRMSG_MAX];
    fprintf(stderr, "qmla %s: error (%s): %s\n", cmd,
            qmla_status_name(err->status), cli_esc(err->msg, esc, sizeof esc));
    return QMLA_EXIT_USAGE;
}

int cli_parse_long(const char *s, long lo, long hi, long *v)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || *end || x < lo || x > hi)
        return -1;
    *v = x;
    return 0;
}

int cli_parse_double(const char *s, double *v)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (errno || *end || !isfinite(x))
        return -1;
    *v = x;
    return 0;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int cli_parse_int_list(const char *s, int **out, size_t *n, char *msg,
                       size_t len)
{
    *out = NULL;
    *n = 0;
    size_t cap = 16, cnt = 0;
    int *v = malloc(cap * sizeof *v);
    char *copy = strdup(s);
    if (!v || !copy) {
        free(v);
        free(copy);
        snprintf(msg, len, "out of memory");
        return -1;
    }
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        long a, b;
        char *dash = strchr(tok + (tok[0] == '-' ? 1 : 0), '-');
        if (dash) {
            *dash = '\0';
            if (cli_parse_long(tok, 0, 1 << 20, &a) ||
                cli_parse_long(dash + 1, 0, 1 << 20, &b) || b < a) {
                snprintf(msg, len, "bad range \"%s-%s\" (expected A-B, 0 <= A <= B)",
                         tok, dash + 1);
                goto fail;
            }
        } else {
            if (cli_parse_long(tok, 0, 1 << 20, &a)) {
                snprintf(msg, len, "bad index \"%s\" (expected a non-negative integer)",
                         tok);
                goto fail;
            }
            b = a;
        }
        for (long x = a; x <= b; x++) {
            if (cnt == cap) {
                cap *= 2;
                int *nv = realloc(v, cap * sizeof *v);
                if (!nv) {
                    snprintf(msg, len, "out of memory");
                    goto fail;
                }
                v = nv;
            }
            v[cnt++] = (int)x;
        }
    }
    if (cnt == 0) {
        snprintf(msg, len, "empty list \"%s\"", s);
        goto fail;
    }
    qsort(v, cnt, sizeof *v, cmp_int);
    size_t u = 0;
    for (size_t k = 0; k < cnt; k++)
        if (u == 0 || v[u - 1] != v[k])
            v[u++] = v[k];
    free(copy);
    *out = v;
    *n = u;
    return 0;
fail:
    free(v);
    free(copy);
    return -1;
}

int cli_split_list(const char *s, char ***out, size_t *n, char **buf)
{
    return qmla_split_list(s, out, n, buf);
}

double cli_now(void) { return qmla_monotonic_s(); }

int cli_default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > 1024 ? 1024 : (int)n);
}

void cli_progress_init(cli_progress *p, const char *label)
{
    p->tty = isatty(STDERR_FILENO);
    p->last_report = 0.0;
    p->t0 = cli_now();
    p->resumed = (size_t)-1;
    p->label = label;
}

static void fmt_time(double s, char *out, size_t len)
{
    if (!(s >= 0) || s > 1e7) {
        snprintf(out, len, "--:--");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(out, len, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    else
        snprintf(out, len, "%02ld:%02ld", t / 60, t % 60);
}

void cli_progress_update(cli_progress *p, size_t done, size_t total)
{
    if (p->resumed == (size_t)-1) {
        p->resumed = done; /* first call: items found complete */
        p->t0 = cli_now();
    }
    if (total == 0)
        return;
    const double el = cli_now() - p->t0;
    if (!p->tty) {
        /* a log line at most every 30 s (and at the end) */
        if (done != total && el - p->last_report < 30.0)
            return;
        p->last_report = el;
        const size_t fresh = done - p->resumed, left = total - done;
        char e1[32], e2[32];
        fmt_time(el, e1, sizeof e1);
        fmt_time(fresh ? el / (double)fresh * (double)left : -1.0, e2, sizeof e2);
        fprintf(stderr, "%s: %zu/%zu items (%.0f%%), elapsed %s, eta %s\n", p->label,
                done, total, 100.0 * (double)done / (double)total, e1, e2);
        return;
    }
    const size_t fresh = done - p->resumed, left = total - done;
    const double eta = fresh ? el / (double)fresh * (double)left : -1.0;
    char e1[32], e2[32];
    fmt_time(el, e1, sizeof e1);
    fmt_time(eta, e2, sizeof e2);
    const int width = 30;
    const int fill = (int)((double)width * (double)done / (double)total);
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr, "\r%s [%s] %zu/%zu  elapsed %s  eta %s ", p->label, bar,
            done, total, e1, e2);
    fflush(stderr);
}

void cli_progress_end(cli_progress *p)
{
    if (p->tty)
        fputc('\n', stderr);
}

static char command_line[2048];

void cli_record_command_line(int argc, char **argv)
{
    size_t o = 0;
    command_line[0] = '\0';
    for (int k = 0; k < argc && o + 4 < sizeof command_line; k++) {
        const char *a = argv[k];
        const int plain = a[0] && strspn(a, "abcdefghijklmnopqrstuvwxyz"
                                            "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789-_./=,:+@%") == strlen(a);
        if (k)
            command_line[o++] = ' ';
        if (!plain)
            command_line[o++] = '\'';
        for (; *a && o + 6 < sizeof command_line; a++) {
            if (*a == '\'') { /* ' -> '\'' */
                memcpy(command_line + o, "'\\''", 4);
                o += 4;
            } else {
                command_line[o++] = *a;
            }
        }
        if (!plain)
            command_line[o++] = '\'';
        command_line[o] = '\0';
    }
}

const char *cli_command_line(void) { return command_line; }

/* ---- options shared by several subcommands ------------------------------ */

int cli_opt_bits(const char *cmd, const char *arg, int *bits)
{
    long v;
    if (cli_parse_long(arg, 1, 64, &v) || (v != 2 && v != 3 && v != 4 && v != 8))
        return cli_fail(cmd, "--bits: expected 2, 3, 4 or 8, found \"%s\"", arg);
    *bits = (int)v;
    return 0;
}

int cli_opt_group(const char *cmd, const char *arg, int *group)
{
    long v;
    if (cli_parse_long(arg, 1, 1 << 20, &v))
        return cli_fail(cmd, "--group: expected a positive integer, found \"%s\"", arg);
    *group = (int)v;
    return 0;
}

int cli_opt_nmse(const char *cmd, const char *arg, double *nmse)
{
    double x;
    if (cli_parse_double(arg, &x) || !(x >= QMLA_NMSE_MIN && x <= QMLA_NMSE_MAX))
        return cli_fail(cmd, "--nmse: expected a number in %.3g .. %g (the floor "
                        "2^-30 is where float32 stops resolving the perturbation: "
                        "see --help), found \"%s\"", QMLA_NMSE_MIN, QMLA_NMSE_MAX, arg);
    *nmse = x;
    return 0;
}

int cli_opt_meta(const char *cmd, const char *arg, qmla_meta *meta)
{
    if (!strcmp(arg, "f16"))
        *meta = QMLA_META_F16;
    else if (!strcmp(arg, "f32"))
        *meta = QMLA_META_F32;
    else if (!strcmp(arg, "q8"))
        *meta = QMLA_META_Q8;
    else
        return cli_fail(cmd, "--meta: expected f16, f32 or q8, found \"%s\"", arg);
    return 0;
}

int cli_opt_threads(const char *cmd, const char *arg, int *threads)
{
    long v;
    if (cli_parse_long(arg, 1, 1024, &v))
        return cli_fail(cmd, "--threads: expected 1..1024, found \"%s\"", arg);
    *threads = (int)v;
    return 0;
}

int cli_opt_engine(const char *cmd, const char *arg, const qmla_engine **engine)
{
    qmla_error err;
    qmla_error_clear(&err);
    if (qmla_engine_find(arg, engine, &err))
        return cli_fail(cmd, "--engine: %s", err.msg);
    return 0;
}

int cli_engine_device(const char *cmd, const qmla_engine *engine, long device)
{
    qmla_error err;
    qmla_error_clear(&err);
    if (device < 0) { /* the device the rules chose: checked now, before any work */
        if (qmla_engine_ready(engine, &err))
            return cli_fail(cmd, "--engine: %s", err.msg);
        return 0;
    }
    if (qmla_engine_select_device(engine, (int)device, &err))
        return cli_fail(cmd, "--device: %s", err.msg);
    return 0;
}

int cli_merge_args(const char *cmd, int argc, const char *out, size_t n_shards)
{
    if (optind > argc - 2)
        return cli_fail(cmd, "--merge: expected CAPTURE.h5 and at least one PART (see qmla %s "
                        "--help)", cmd);
    if (!out)
        return cli_fail(cmd, "missing -o RESULTS.h5");
    if (n_shards > 1)
        return cli_fail(cmd, "--merge and --shard exclude each other");
    return 0;
}

int cli_opt_shard(const char *cmd, const char *arg, void *dst)
{
    cli_shard *s = dst;
    unsigned long i, n;
    char tail;
    if (sscanf(arg, "%lu/%lu%c", &i, &n, &tail) != 2 || n < 1 || i >= n || n > 1000000)
        return cli_fail(cmd, "--shard: expected I/N with 0 <= I < N, found \"%s\"", arg);
    s->shard = i;
    s->n_shards = n;
    return 0;
}

/* ---- the option table (cli_getopt) ------------------------------------- */

enum { CLI_OPTS_MAX = 64 };

static int choice_ok(const char *choices, const char *arg)
{
    const size_t n = strlen(arg);
    for (const char *c = choices; *c;) {
        const size_t k = strcspn(c, " ");
        if (k == n && !strncmp(c, arg, n))
            return 1;
        c += k;
        c += *c == ' ';
    }
    return 0;
}

static int opt_value(const char *cmd, const cli_opt *o, const char *arg)
{
    switch (o->kind) {
    case CLI_HELP: return 0;
    case CLI_STR: *(const char **)o->dst = arg; return 0;
    case CLI_SET: *(int *)o->dst = 1; return 0;
    case CLI_CLEAR: *(int *)o->dst = 0; return 0;
    case CLI_LONG:
        if (cli_parse_long(arg, o->lo, o->hi, (long *)o->dst))
            return cli_fail(cmd, "--%s: expected %s, found \"%s\"", o->name, o->expected, arg);
        return 0;
    case CLI_DOUBLE: {
        double x;
        if (cli_parse_double(arg, &x) ||
            !((o->open & CLI_OPEN_LO) ? x > o->dlo : x >= o->dlo) ||
            !((o->open & CLI_OPEN_HI) ? x < o->dhi : x <= o->dhi))
            return cli_fail(cmd, "--%s: expected %s, found \"%s\"", o->name, o->expected, arg);
        *(double *)o->dst = x;
        return 0;
    }
    case CLI_CHOICE:
        if (!choice_ok(o->choices, arg))
            return cli_fail(cmd, "--%s: expected %s, found \"%s\"", o->name, o->expected, arg);
        *(const char **)o->dst = arg;
        return 0;
    case CLI_REPEAT:
        if (*o->count == (size_t)o->hi)
            return cli_fail(cmd, "--%s: at most %ld %s", o->name, o->hi, o->expected);
        ((const char **)o->dst)[(*o->count)++] = arg;
        return 0;
    case CLI_BITS: return cli_opt_bits(cmd, arg, (int *)o->dst);
    case CLI_GROUP: return cli_opt_group(cmd, arg, (int *)o->dst);
    case CLI_NMSE: return cli_opt_nmse(cmd, arg, (double *)o->dst);
    case CLI_THREADS: return cli_opt_threads(cmd, arg, (int *)o->dst);
    case CLI_ENGINE: return cli_opt_engine(cmd, arg, (const qmla_engine **)o->dst);
    case CLI_FN: return o->fn(cmd, arg, o->dst);
    }
    return QMLA_EXIT_USAGE;
}

int cli_getopt(const char *cmd, int argc, char **argv, const cli_opt *opts,
               void (*help)(FILE *f, const void *ctx), const void *help_ctx)
{
    struct option lo[CLI_OPTS_MAX + 1];
    char shorts[2 * CLI_OPTS_MAX + 1];
    size_t n = 0, nl = 0, ns = 0;
    for (; (opts[n].name || opts[n].shrt) && n < CLI_OPTS_MAX; n++) {
        const cli_opt_kind k = opts[n].kind;
        const int arg = k != CLI_HELP && k != CLI_SET && k != CLI_CLEAR;
        if (opts[n].name)
            lo[nl++] = (struct option){opts[n].name, arg ? required_argument : no_argument, 0,
                                       256 + (int)n};
        if (opts[n].shrt) {
            shorts[ns++] = opts[n].shrt;
            if (arg)
                shorts[ns++] = ':';
        }
    }
    lo[nl] = (struct option){0, 0, 0, 0};
    shorts[ns] = 0;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
        size_t i = n;
        if (ch >= 256)
            i = (size_t)(ch - 256);
        else
            for (i = 0; i < n && !(opts[i].shrt && opts[i].shrt == ch); i++)
                ;
        if (i == n) {
            help(stderr, help_ctx);
            return QMLA_EXIT_USAGE;
        }
        if (opts[i].kind == CLI_HELP) {
            help(stdout, help_ctx);
            return QMLA_EXIT_OK;
        }
        if (opt_value(cmd, &opts[i], optarg))
            return QMLA_EXIT_USAGE;
    }
    return -1;
}

int cli_selection_parse(const char *cmd, const char *layers_arg, const char *cells_arg,
                        const char *cells_opt, cli_selection *s)
{
    char msg[256];
    memset(s, 0, sizeof *s);
    if (layers_arg && cli_parse_int_list(layers_arg, &s->layers, &s->n_layers, msg, sizeof msg))
        return cli_fail(cmd, "--layers: %s", msg);
    if (cells_arg && cli_split_list(cells_arg, &s->cells, &s->n_cells, &s->cellbuf)) {
        cli_selection_free(s);
        return cli_fail(cmd, "%s: empty list \"%s\"", cells_opt ? cells_opt : "--cells",
                        cells_arg);
    }
    s->sel.layers = s->layers;
    s->sel.n_layers = s->n_layers;
    s->sel.cells = (const char *const *)s->cells;
    s->sel.n_cells = s->n_cells;
    return 0;
}

int cli_open_selected(const char *cmd, const char *path, const char *layers_arg,
                      const char *cells_arg, cli_selection *s, qmla_capture **cap,
                      qmla_error *err)
{
    *cap = NULL;
    if (cli_selection_parse(cmd, layers_arg, cells_arg, NULL, s))
        return QMLA_EXIT_USAGE;
    if (qmla_capture_open(path, cap, err)) {
        cli_selection_free(s);
        return cli_lib_error(cmd, err);
    }
    return 0;
}

void cli_selection_free(cli_selection *s)
{
    free(s->layers);
    free(s->cells);
    free(s->cellbuf);
    memset(s, 0, sizeof *s);
}
