/* journal.c — the one resume journal layer (see journal.h for the format). */
#include "io/journal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define JNL_MAGIC "qmla-journal 1 "

/* headers of the journals of earlier qmla versions (one per command) */
static const char *const old_magic[] = {"qmla-sweep-journal ", "qmla-op-journal ",
                                        "qmla-iv-journal "};

uint64_t qmla_jnl_fnv1a(const void *p, size_t n, uint64_t h)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

void qmla_jnl_escape(const char *in, char *out, size_t len)
{
    size_t o = 0;
    for (; *in && o + 4 < len; in++) {
        unsigned char c = (unsigned char)*in;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
            c == ':')
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, len - o, "%%%02X", c);
    }
    out[o] = '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

int qmla_jnl_unescape(const char *in, char *out, size_t len)
{
    size_t o = 0;
    for (; *in; in++) {
        if (o + 1 >= len)
            return -1;
        if (in[0] == '%') {
            int hi = hexval(in[1]), lo = hi < 0 ? -1 : hexval(in[2]);
            if (hi < 0 || lo < 0)
                return -1;
            out[o++] = (char)(hi * 16 + lo);
            in += 2;
        } else {
            out[o++] = *in;
        }
    }
    out[o] = '\0';
    return 0;
}

int qmla_jnl_real(const char *tok, double *v)
{
    char *end = NULL;
    *v = strtod(tok, &end);
    return end == tok || *end ? -1 : 0;
}

/* The journal path must be absent or a regular file (a FIFO would block). */
static int check_regular(const char *path, qmla_error *err)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return errno == ENOENT ? QMLA_OK
                               : qmla_error_set(err, QMLA_EIO, "%s: cannot stat "
                                                "journal: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return qmla_error_set(err, QMLA_EIO,
                              "%s: journal path: expected a regular file, found "
                              "%s",
                              path, S_ISDIR(sb.st_mode)    ? "a directory"
                                    : S_ISFIFO(sb.st_mode) ? "a FIFO"
                                    : S_ISLNK(sb.st_mode)  ? "a symbolic link"
                                                           : "a special file");
    return QMLA_OK;
}

/* The header line (newline stripped) against kind and key: 0 same, 1 another
 * kind/key/format (err set, QMLA_EMISMATCH). */
static int header_differs(const char *path, const char *line, const char *kind,
                          const char *key, int for_read, qmla_error *err)
{
    const size_t ml = strlen(JNL_MAGIC), kl = strlen(kind);
    if (strncmp(line, JNL_MAGIC, ml) == 0) {
        const char *k = line + ml;
        if (strncmp(k, kind, kl) == 0 && k[kl] == ' ' && strcmp(k + kl + 1, key) == 0)
            return 0;
        qmla_error_set(err, QMLA_EMISMATCH,
                       "%s: journal of another run (found \"%.2000s\", expected "
                       "\"%s %.2000s\")%s",
                       path, k, kind, key,
                       for_read ? "" : "; use --force to discard it");
        return 1;
    }
    for (size_t i = 0; i < sizeof old_magic / sizeof old_magic[0]; i++)
        if (strncmp(line, old_magic[i], strlen(old_magic[i])) == 0) {
            qmla_error_set(err, QMLA_EMISMATCH,
                           "%s: an older journal format (header \"%.80s\", expected "
                           "\"%s%s ...\"): this qmla does not resume it; pass --force "
                           "(or delete the file) to start over",
                           path, line, JNL_MAGIC, kind);
            return 1;
        }
    qmla_error_set(err, QMLA_EMISMATCH,
                   "%s: expected a journal header \"%s%s ...\", found \"%.80s\"%s", path,
                   JNL_MAGIC, kind, line, for_read ? "" : "; use --force to discard it");
    return 1;
}

#define ENGINE_MARK "@engine "

void qmla_jnl_engines_add(char *set, size_t len, const char *names)
{
    const char *p = names;
    while (p && *p) {
        const char *e = strchr(p, '+');
        const size_t n = e ? (size_t)(e - p) : strlen(p);
        int have = 0;
        for (const char *q = set; *q && !have;) {
            const char *qe = strchr(q, '+');
            const size_t qn = qe ? (size_t)(qe - q) : strlen(q);
            have = qn == n && !strncmp(q, p, n);
            q += qn + (qe ? 1 : 0);
        }
        const size_t u = strlen(set);
        if (!have && n && u + n + (u ? 1 : 0) < len)
            snprintf(set + u, len - u, "%s%.*s", u ? "+" : "", (int)n, p);
        p += n + (e ? 1 : 0);
    }
}

/* The engine state of a scan: the last mark's engine and the set of the
 * records' engines. */
typedef struct scan_engines {
    char last[32];
    char set[64];
    char last_mode[QMLA_JNL_MODE_MAX]; /* the last mark's mode */
    char kept_mode[QMLA_JNL_MODE_MAX]; /* the first kept record's */
    char other_mode[QMLA_JNL_MODE_MAX]; /* a later kept record's other mode */
    size_t kept;
    int mixed;
} scan_engines;

/* A whole record that is an engine mark: 1 (eng->last and last_mode
 * updated; a mode that does not unescape is kept as written). */
static int engine_mark(const char *rec, size_t len, scan_engines *eng)
{
    const size_t ml = strlen(ENGINE_MARK);
    if (len <= ml + 1 || strncmp(rec, ENGINE_MARK, ml) != 0 || memchr(rec, '\n', len - 1))
        return 0;
    const char *b = rec + ml, *e = rec + len - 1, *sp = memchr(b, ' ', (size_t)(e - b));
    snprintf(eng->last, sizeof eng->last, "%.*s", (int)((sp ? sp : e) - b), b);
    eng->last_mode[0] = '\0';
    if (sp) {
        char esc[3 * QMLA_JNL_MODE_MAX + 4];
        snprintf(esc, sizeof esc, "%.*s", (int)(e - sp - 1), sp + 1);
        if (qmla_jnl_unescape(esc, eng->last_mode, sizeof eng->last_mode) != 0)
            snprintf(eng->last_mode, sizeof eng->last_mode, "%.*s",
                     (int)(sizeof eng->last_mode - 1), esc);
    }
    return 1;
}

/* A record kept: its engine into the set, its mode against the others. */
static void engine_kept(scan_engines *eng)
{
    qmla_jnl_engines_add(eng->set, sizeof eng->set, eng->last);
    if (!eng->kept++)
        memcpy(eng->kept_mode, eng->last_mode, sizeof eng->kept_mode);
    else if (!eng->mixed && strcmp(eng->kept_mode, eng->last_mode) != 0) {
        eng->mixed = 1;
        memcpy(eng->other_mode, eng->last_mode, sizeof eng->other_mode);
    }
}

/* Replay the records after the header; *keep: the offset after the last
 * whole record kept. */
static int scan(FILE *f, const char *path, qmla_jnl_replay_fn fn, void *ctx, size_t *n,
                long *keep, scan_engines *eng, qmla_error *err)
{
    char *line = NULL, *rec = NULL;
    size_t lcap = 0, rlen = 0, rcap = 0;
    ssize_t len;
    int st = QMLA_OK;
    *keep = ftell(f);
    while ((len = getline(&line, &lcap, f)) > 0) {
        if (line[len - 1] != '\n')
            break; /* torn last line */
        if (line[0] != '#') {
            if (rlen + (size_t)len + 1 > rcap) {
                size_t nc = rcap ? rcap : 4096;
                while (nc < rlen + (size_t)len + 1)
                    nc *= 2;
                char *nr = realloc(rec, nc);
                if (!nr) {
                    st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
                    break;
                }
                rec = nr;
                rcap = nc;
            }
            memcpy(rec + rlen, line, (size_t)len);
            rlen += (size_t)len;
            continue;
        }
        /* the trailer: #<16 hex> <count> */
        char *end = NULL;
        errno = 0;
        const uint64_t want = strtoull(line + 1, &end, 16);
        if (errno || end != line + 17 || *end != ' ')
            break;
        const char *cs = end + 1;
        const unsigned long long cnt = strtoull(cs, &end, 10);
        if (end == cs || *end != '\n' || cnt != rlen || rlen == 0)
            break;
        if (qmla_jnl_fnv1a(rec, rlen, QMLA_JNL_FNV_INIT) != want)
            break; /* damaged: recompute from here */
        rec[rlen] = '\0';
        if (engine_mark(rec, rlen, eng)) {
            *keep = ftell(f);
            rlen = 0;
            continue;
        }
        const int r = fn ? fn(ctx, rec, rlen, err) : QMLA_OK;
        if (r == QMLA_EFORMAT) {
            qmla_error_clear(err);
            break;
        }
        if (r) {
            st = r;
            break;
        }
        ++*n;
        engine_kept(eng);
        *keep = ftell(f);
        rlen = 0;
    }
    free(line);
    free(rec);
    return st;
}

static int write_header(qmla_jnl *j, const char *kind, const char *key, qmla_error *err)
{
    FILE *f = fopen(j->path, "w");
    if (!f)
        return qmla_error_set(err, QMLA_EIO, "%s: cannot create journal: %s", j->path,
                              strerror(errno));
    if (fprintf(f, "%s%s %s\n", JNL_MAGIC, kind, key) < 0 || fflush(f) != 0 ||
        fsync(fileno(f)) != 0) {
        const int st = qmla_error_set(err, QMLA_EIO, "%s: cannot write journal: %s",
                                      j->path, strerror(errno));
        fclose(f);
        return st;
    }
    j->f = f;
    return QMLA_OK;
}

int qmla_jnl_open(qmla_jnl *j, const char *path, const char *kind, const char *key,
                  int force, qmla_jnl_replay_fn fn, void *ctx, size_t *n,
                  qmla_error *err)
{
    memset(j, 0, sizeof *j);
    snprintf(j->path, sizeof j->path, "%s", path);
    size_t cnt = 0;
    if (n)
        *n = 0;
    int st = check_regular(path, err);
    if (st)
        return st;
    FILE *f = fopen(path, "r");
    if (!f && errno != ENOENT)
        return qmla_error_set(err, QMLA_EIO, "%s: cannot open journal: %s", path,
                              strerror(errno));
    int fresh = f == NULL;
    long keep = 0;
    scan_engines eng;
    memset(&eng, 0, sizeof eng);
    if (f) {
        char *line = NULL;
        size_t lcap = 0;
        const ssize_t len = getline(&line, &lcap, f);
        if (len > 0 && line[len - 1] == '\n') {
            line[len - 1] = '\0';
            qmla_error e2;
            qmla_error_clear(&e2);
            if (header_differs(path, line, kind, key, 0, &e2)) {
                if (!force) {
                    *err = e2;
                    free(line);
                    fclose(f);
                    return QMLA_EMISMATCH;
                }
                fresh = 1;
            } else
                st = scan(f, path, fn, ctx, &cnt, &keep, &eng, err);
        } else
            fresh = 1; /* empty or torn header: nothing was recorded */
        free(line);
        fclose(f);
        if (st)
            return st;
    }
    if (fresh)
        return write_header(j, kind, key, err);
    if (truncate(path, keep) != 0 || !(j->f = fopen(path, "a")))
        return qmla_error_set(err, QMLA_EIO, "%s: cannot reopen journal: %s", path,
                              strerror(errno));
    memcpy(j->engine, eng.last, sizeof j->engine);
    memcpy(j->engines, eng.set, sizeof j->engines);
    memcpy(j->mode, eng.last_mode, sizeof j->mode);
    memcpy(j->kept_mode, eng.kept_mode, sizeof j->kept_mode);
    memcpy(j->other_mode, eng.other_mode, sizeof j->other_mode);
    j->kept = eng.kept;
    j->mixed = eng.mixed;
    if (n)
        *n = cnt;
    return QMLA_OK;
}

int qmla_jnl_read(const char *path, const char *kind, const char *key,
                  qmla_jnl_replay_fn fn, void *ctx, size_t *n, qmla_error *err)
{
    return qmla_jnl_read_engines(path, kind, key, fn, ctx, n, NULL, 0, err);
}

int qmla_jnl_read_engines(const char *path, const char *kind, const char *key,
                          qmla_jnl_replay_fn fn, void *ctx, size_t *n, char *engines,
                          size_t elen, qmla_error *err)
{
    scan_engines eng;
    memset(&eng, 0, sizeof eng);
    if (engines && elen)
        engines[0] = '\0';
    size_t cnt = 0;
    if (n)
        *n = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return qmla_error_set(err, QMLA_EIO, "%s: cannot open journal: %s", path,
                              strerror(errno));
    char *line = NULL;
    size_t lcap = 0;
    int st = QMLA_OK;
    const ssize_t len = getline(&line, &lcap, f);
    long keep;
    if (!(len > 0 && line[len - 1] == '\n'))
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: expected a journal header "
                            "\"%s%s ...\", found none", path, JNL_MAGIC, kind);
    else {
        line[len - 1] = '\0';
        if (header_differs(path, line, kind, key, 1, err))
            st = QMLA_EMISMATCH;
        else
            st = scan(f, path, fn, ctx, &cnt, &keep, &eng, err);
    }
    free(line);
    fclose(f);
    if (!st && n)
        *n = cnt;
    if (!st && engines && elen)
        snprintf(engines, elen, "%s", eng.set);
    return st;
}

/* "" reads as "the defaults" in the messages; for a journal's records also
 * "no mode recorded": a journal written before run 13 has no modes in its
 * marks, and its records read as the defaults */
static const char *mode_name(const char *m) { return m[0] ? m : "defaults (float32)"; }
static const char *kept_mode_name(const char *m)
{
    return m[0] ? m : "defaults (float32)\" or \"none recorded (a journal before run 13)";
}

int qmla_jnl_engine(qmla_jnl *j, const char *name, const char *mode, qmla_error *err)
{
    if (!mode)
        mode = "";
    if (strlen(mode) >= sizeof j->mode)
        return qmla_error_set(err, QMLA_EINTERNAL, "%s: engine mode \"%.40s...\": expected "
                              "at most %zu bytes", j->path, mode, sizeof j->mode - 1);
    if (j->kept && (j->mixed || strcmp(j->kept_mode, mode) != 0))
        return qmla_error_set(err, QMLA_EMISMATCH,
                              "%s: cannot resume: expected engine mode \"%s\" (the mode of its "
                              "%zu records%s%s%s), found \"%s\" (this run's); a results file "
                              "is one mode's: run with the switches of its mode "
                              "(QMLA_CUDA_ENGINE_GEMM, QMLA_CUDA_ENGINE_TILE, "
                              "QMLA_CUDA_EVAL_SOLVER_AFTER), or remove the journal",
                              j->path, kept_mode_name(j->kept_mode), j->kept,
                              j->mixed ? "; some are in \"" : "",
                              j->mixed ? mode_name(j->other_mode) : "", j->mixed ? "\"" : "",
                              mode_name(mode));
    if (!name || !name[0] || (!strcmp(j->engine, name) && !strcmp(j->mode, mode)))
        return QMLA_OK;
    if (strlen(name) >= sizeof j->engine || strpbrk(name, "+\n# "))
        return qmla_error_set(err, QMLA_EINTERNAL, "%s: engine name \"%s\": expected a word "
                              "of at most %zu bytes", j->path, name, sizeof j->engine - 1);
    j->len = 0;
    if (mode[0]) {
        char esc[3 * QMLA_JNL_MODE_MAX + 4];
        qmla_jnl_escape(mode, esc, sizeof esc);
        qmla_jnl_printf(j, ENGINE_MARK "%s %s\n", name, esc);
    } else
        qmla_jnl_printf(j, ENGINE_MARK "%s\n", name);
    int st = qmla_jnl_commit(j, err);
    if (!st) {
        snprintf(j->engine, sizeof j->engine, "%s", name);
        snprintf(j->mode, sizeof j->mode, "%s", mode);
    }
    return st;
}

void qmla_jnl_printf(qmla_jnl *j, const char *fmt, ...)
{
    if (j->bad)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int w = vsnprintf(j->buf ? j->buf + j->len : NULL,
                                j->buf ? j->cap - j->len : 0, fmt, ap);
        va_end(ap);
        if (w < 0) {
            j->bad = EINVAL;
            return;
        }
        if (j->buf && j->len + (size_t)w < j->cap) {
            j->len += (size_t)w;
            return;
        }
        size_t nc = j->cap ? 2 * j->cap : 4096;
        while (nc < j->len + (size_t)w + 1)
            nc *= 2;
        char *nb = realloc(j->buf, nc);
        if (!nb) {
            j->bad = ENOMEM;
            return;
        }
        j->buf = nb;
        j->cap = nc;
    }
}

int qmla_jnl_commit(qmla_jnl *j, qmla_error *err)
{
    const size_t len = j->len;
    const int bad = j->bad;
    j->len = 0;
    j->bad = 0;
    if (bad)
        return qmla_error_set(err, bad == ENOMEM ? QMLA_ENOMEM : QMLA_EINTERNAL,
                              "%s: cannot format a journal record: %s", j->path,
                              strerror(bad));
    if (len == 0 || j->buf[len - 1] != '\n' || j->buf[0] == '#')
        return qmla_error_set(err, QMLA_EINTERNAL, "%s: journal record: expected "
                              "lines ending in a newline, none starting with '#'",
                              j->path);
    const uint64_t h = qmla_jnl_fnv1a(j->buf, len, QMLA_JNL_FNV_INIT);
    if (fwrite(j->buf, 1, len, j->f) != len ||
        fprintf(j->f, "#%016" PRIx64 " %zu\n", h, len) < 0)
        return qmla_error_set(err, QMLA_EIO, "%s: write failed: %s", j->path,
                              strerror(errno));
    if (fflush(j->f) != 0)
        return qmla_error_set(err, QMLA_EIO, "%s: write failed: %s", j->path,
                              strerror(errno));
    if (fsync(fileno(j->f)) != 0)
        return qmla_error_set(err, QMLA_EIO, "%s: fsync failed: %s", j->path,
                              strerror(errno));
    if (strncmp(j->buf, ENGINE_MARK, strlen(ENGINE_MARK)) != 0)
        qmla_jnl_engines_add(j->engines, sizeof j->engines, j->engine);
    return QMLA_OK;
}

void qmla_jnl_close(qmla_jnl *j, int remove_file)
{
    if (j->f)
        fclose(j->f);
    j->f = NULL;
    free(j->buf);
    j->buf = NULL;
    j->len = j->cap = 0;
    if (remove_file && j->path[0])
        unlink(j->path);
}
