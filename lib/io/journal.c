/* journal.c — sweep resume journal (see journal.h). Header line:
 *   qmla-sweep-journal 2 <resume key>
 * then one record line per finished response, the columns of the row table
 * (include/qmla/response.h) in table order, separated by single spaces:
 *   R <col1> <col2> ... #<fnv1a-64 of everything before '#', 16 hex digits>
 * INT/FLAG as decimal, REAL in C99 hex (%a, exact round trip), PATH as its
 * name, STR percent-escaped (no spaces, no control characters). */
#include "io/journal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define JOURNAL_MAGIC "qmla-sweep-journal 2 "
#define JOURNAL_MAGIC_ANY "qmla-sweep-journal "

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static void escape(const char *in, char *out, size_t len)
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

static int unescape(const char *in, char *out, size_t len)
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

/* One record line (without the newline) into r; -1 when malformed or when
 * the checksum does not match. */
static int parse_record(char *line, qmla_response *r)
{
    char *hash = strrchr(line, '#');
    if (!hash || line[0] != 'R' || line[1] != ' ' || hash[-1] != ' ')
        return -1;
    char *end = NULL;
    errno = 0;
    const uint64_t want = strtoull(hash + 1, &end, 16);
    if (errno || end != hash + 17 || *end)
        return -1;
    if (fnv1a(line, (size_t)(hash - line)) != want)
        return -1;
    hash[-1] = '\0';
    memset(r, 0, sizeof *r);
    char *save = NULL, *tok = strtok_r(line + 2, " ", &save);
    for (size_t k = 0; k < qmla_response_n_columns; k++, tok = strtok_r(NULL, " ", &save)) {
        const qmla_column *c = &qmla_response_columns[k];
        if (!tok)
            return -1;
        switch (c->kind) {
        case QMLA_COL_INT:
        case QMLA_COL_FLAG: {
            errno = 0;
            long v = strtol(tok, &end, 10);
            if (errno || *end || v < -2147483647L - 1 || v > 2147483647L)
                return -1;
            *qmla_col_int(r, c) = (int)v;
            break;
        }
        case QMLA_COL_REAL:
            *qmla_col_real(r, c) = strtod(tok, &end);
            if (*end)
                return -1;
            break;
        case QMLA_COL_PATH:
            if ((*qmla_col_int(r, c) = qmla_path_parse(tok)) < 0)
                return -1;
            break;
        case QMLA_COL_STR:
            if (unescape(tok, qmla_col_str(r, c), QMLA_CELL_NAME_MAX))
                return -1;
            break;
        }
    }
    return tok ? -1 : 0; /* no extra fields */
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

static int push(qmla_response **arr, size_t *cnt, size_t *cap,
                const qmla_response *r)
{
    if (*cnt == *cap) {
        size_t nc = *cap ? 2 * *cap : 256;
        qmla_response *na = realloc(*arr, nc * sizeof *na);
        if (!na)
            return -1;
        *arr = na;
        *cap = nc;
    }
    (*arr)[(*cnt)++] = *r;
    return 0;
}

int qmla_journal_open(qmla_journal *j, const char *path, const char *key,
                      int force, qmla_response **recs, size_t *n,
                      qmla_error *err)
{
    memset(j, 0, sizeof *j);
    snprintf(j->path, sizeof j->path, "%s", path);
    *recs = NULL;
    *n = 0;
    int st = check_regular(path, err);
    if (st)
        return st;
    FILE *f = fopen(path, "r");
    if (!f && errno != ENOENT)
        return qmla_error_set(err, QMLA_EIO, "%s: cannot open journal: %s",
                              path, strerror(errno));
    size_t cap = 0, cnt = 0;
    qmla_response *arr = NULL;
    long keep = 0; /* offset after the last valid line */
    int fresh = f == NULL;
    if (f) {
        char *line = NULL;
        size_t lcap = 0;
        ssize_t len = getline(&line, &lcap, f);
        const size_t klen = strlen(JOURNAL_MAGIC);
        const int complete = len > 0 && line[len - 1] == '\n';
        if (complete && strncmp(line, JOURNAL_MAGIC, klen) == 0) {
            line[len - 1] = '\0';
            if (strcmp(line + klen, key) != 0) {
                if (!force) {
                    qmla_error_set(err, QMLA_EMISMATCH,
                                   "%s: journal of another sweep (found key "
                                   "\"%s\", expected \"%s\"); use --force to "
                                   "discard it",
                                   path, line + klen, key);
                    free(line);
                    fclose(f);
                    return QMLA_EMISMATCH;
                }
                fresh = 1;
            } else {
                keep = ftell(f);
                while ((len = getline(&line, &lcap, f)) > 0) {
                    if (line[len - 1] != '\n')
                        break; /* torn last line */
                    line[len - 1] = '\0';
                    qmla_response r;
                    if (parse_record(line, &r) != 0)
                        break; /* damaged: recompute from here */
                    if (push(&arr, &cnt, &cap, &r)) {
                        free(arr);
                        free(line);
                        fclose(f);
                        return qmla_error_set(err, QMLA_ENOMEM,
                                              "%s: out of memory", path);
                    }
                    keep = ftell(f);
                }
            }
        } else if (complete && strncmp(line, JOURNAL_MAGIC_ANY,
                                       strlen(JOURNAL_MAGIC_ANY)) == 0 &&
                   !force) {
            line[len - 1] = '\0';
            qmla_error_set(err, QMLA_EMISMATCH,
                           "%s: journal header: expected \"%s...\", found "
                           "\"%.60s\" (another journal version); use --force "
                           "to discard it",
                           path, JOURNAL_MAGIC, line);
            free(line);
            fclose(f);
            return QMLA_EMISMATCH;
        } else {
            fresh = 1; /* empty or torn header: nothing was recorded */
        }
        free(line);
        fclose(f);
        f = NULL;
    }
    if (fresh) {
        free(arr);
        arr = NULL;
        cnt = 0;
        f = fopen(path, "w");
        if (!f)
            return qmla_error_set(err, QMLA_EIO, "%s: cannot create journal: %s",
                                  path, strerror(errno));
        if (fprintf(f, "%s%s\n", JOURNAL_MAGIC, key) < 0 || fflush(f) != 0 ||
            fsync(fileno(f)) != 0) {
            st = qmla_error_set(err, QMLA_EIO, "%s: cannot write journal: %s",
                                path, strerror(errno));
            fclose(f);
            return st;
        }
    } else {
        if (truncate(path, keep) != 0 || !(f = fopen(path, "a"))) {
            free(arr);
            return qmla_error_set(err, QMLA_EIO, "%s: cannot reopen journal: %s",
                                  path, strerror(errno));
        }
    }
    j->f = f;
    *recs = arr;
    *n = cnt;
    return QMLA_OK;
}

/* Format one record (with checksum and newline) into line. */
static int format_record(const qmla_response *r_in, char *line, size_t cap)
{
    qmla_response r = *r_in;
    size_t o = (size_t)snprintf(line, cap, "R");
    for (size_t k = 0; k < qmla_response_n_columns && o < cap; k++) {
        const qmla_column *c = &qmla_response_columns[k];
        char cell[4 * QMLA_CELL_NAME_MAX];
        int w = 0;
        switch (c->kind) {
        case QMLA_COL_INT:
        case QMLA_COL_FLAG:
            w = snprintf(line + o, cap - o, " %d", *qmla_col_int(&r, c));
            break;
        case QMLA_COL_REAL:
            w = snprintf(line + o, cap - o, " %a", *qmla_col_real(&r, c));
            break;
        case QMLA_COL_PATH:
            w = snprintf(line + o, cap - o, " %s",
                         qmla_path_name(*qmla_col_int(&r, c)));
            break;
        case QMLA_COL_STR:
            escape(qmla_col_str(&r, c), cell, sizeof cell);
            w = snprintf(line + o, cap - o, " %s", cell);
            break;
        }
        if (w < 0)
            return -1;
        o += (size_t)w;
    }
    if (o + 24 >= cap)
        return -1;
    line[o++] = ' '; /* the checksum covers "R ... " up to the '#' */
    const uint64_t h = fnv1a(line, o);
    snprintf(line + o, cap - o, "#%016" PRIx64 "\n", h);
    return 0;
}

int qmla_journal_append(qmla_journal *j, const qmla_response *r, size_t n,
                        qmla_error *err)
{
    char line[4096];
    for (size_t k = 0; k < n; k++) {
        if (format_record(&r[k], line, sizeof line))
            return qmla_error_set(err, QMLA_EINTERNAL, "journal line too long");
        if (fputs(line, j->f) < 0)
            return qmla_error_set(err, QMLA_EIO, "%s: write failed: %s",
                                  j->path, strerror(errno));
    }
    if (fflush(j->f) != 0 || fsync(fileno(j->f)) != 0)
        return qmla_error_set(err, QMLA_EIO, "%s: flush failed: %s", j->path,
                              strerror(errno));
    return QMLA_OK;
}

void qmla_journal_close(qmla_journal *j, int remove_file)
{
    if (j->f)
        fclose(j->f);
    j->f = NULL;
    if (remove_file && j->path[0])
        unlink(j->path);
}

int qmla_journal_read(const char *path, const char *key, qmla_response **recs,
                      size_t *n, qmla_error *err)
{
    *recs = NULL;
    *n = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return qmla_error_set(err, QMLA_EIO, "%s: cannot open journal: %s", path,
                              strerror(errno));
    char *line = NULL;
    size_t lcap = 0, cap = 0, cnt = 0;
    qmla_response *arr = NULL;
    int st = QMLA_OK;
    ssize_t len = getline(&line, &lcap, f);
    const size_t klen = strlen(JOURNAL_MAGIC);
    if (!(len > 0 && line[len - 1] == '\n' && strncmp(line, JOURNAL_MAGIC, klen) == 0))
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: expected a journal header "
                            "\"%s...\", found none", path, JOURNAL_MAGIC);
    else {
        line[len - 1] = '\0';
        if (strcmp(line + klen, key) != 0)
            st = qmla_error_set(err, QMLA_EMISMATCH, "%s: journal of another sweep "
                                "(found key \"%s\", expected \"%s\")", path,
                                line + klen, key);
    }
    while (!st && (len = getline(&line, &lcap, f)) > 0) {
        if (line[len - 1] != '\n')
            break; /* torn last line (its writer may still be running) */
        line[len - 1] = '\0';
        qmla_response r;
        if (parse_record(line, &r) != 0)
            break;
        if (push(&arr, &cnt, &cap, &r))
            st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
    }
    free(line);
    fclose(f);
    if (st) {
        free(arr);
        return st;
    }
    *recs = arr;
    *n = cnt;
    return QMLA_OK;
}
