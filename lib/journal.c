/* journal.c — sweep resume journal (see journal.h). Record line format:
 *   R <layer> <cell%> <seq> <path> <nmse_cache> <nmse_out> <response>
 *     <matching> <aggregation> <interaction> <nmse_qdq> <degenerate> #<fnv64>
 * floats in C99 hex (%a, exact round trip); <cell%> percent-escaped. */
#include "journal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define JOURNAL_MAGIC "qmla-sweep-journal 1 "

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

static void unescape(const char *in, char *out, size_t len)
{
    size_t o = 0;
    for (; *in && o + 1 < len; in++) {
        if (in[0] == '%' && in[1] && in[2]) {
            char hex[3] = {in[1], in[2], 0};
            out[o++] = (char)strtol(hex, NULL, 16);
            in += 2;
        } else {
            out[o++] = *in;
        }
    }
    out[o] = '\0';
}

static int parse_record(const char *line, qmla_response *r)
{
    const char *hash = strrchr(line, '#');
    if (!hash || line[0] != 'R' || line[1] != ' ')
        return -1;
    uint64_t want = strtoull(hash + 1, NULL, 16);
    if (fnv1a(line, (size_t)(hash - line)) != want)
        return -1;
    char cell[512], path[16];
    int deg = 0;
    memset(r, 0, sizeof *r);
    int k = sscanf(line, "R %d %511s %d %15s %la %la %la %la %la %la %la %d",
                   &r->layer, cell, &r->seq, path, &r->nmse_cache, &r->nmse_out,
                   &r->response, &r->nmse_out_matching,
                   &r->nmse_out_aggregation, &r->nmse_out_interaction,
                   &r->nmse_qdq, &deg);
    if (k != 12)
        return -1;
    unescape(cell, r->cell, sizeof r->cell);
    if (strcmp(path, "content") == 0)
        r->path = QMLA_PATH_CONTENT;
    else if (strcmp(path, "rope") == 0)
        r->path = QMLA_PATH_ROPE;
    else
        return -1;
    r->degenerate = deg != 0;
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
    FILE *f = fopen(path, "r+");
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
        size_t klen = strlen(JOURNAL_MAGIC);
        int header_ok = len > 0 && strncmp(line, JOURNAL_MAGIC, klen) == 0 &&
                        line[len - 1] == '\n';
        if (header_ok) {
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
                        break;
                    if (cnt == cap) {
                        cap = cap ? 2 * cap : 256;
                        qmla_response *na = realloc(arr, cap * sizeof *arr);
                        if (!na) {
                            free(arr);
                            free(line);
                            fclose(f);
                            return qmla_error_set(err, QMLA_ENOMEM,
                                                  "%s: out of memory", path);
                        }
                        arr = na;
                    }
                    arr[cnt++] = r;
                    keep = ftell(f);
                }
            }
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
            fclose(f);
            return qmla_error_set(err, QMLA_EIO, "%s: cannot write journal: %s",
                                  path, strerror(errno));
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

int qmla_journal_append(qmla_journal *j, const qmla_response *r, size_t n,
                        qmla_error *err)
{
    char line[2048], cell[512];
    for (size_t k = 0; k < n; k++) {
        escape(r[k].cell, cell, sizeof cell);
        int len = snprintf(line, sizeof line,
                           "R %d %s %d %s %a %a %a %a %a %a %a %d ", r[k].layer,
                           cell, r[k].seq, qmla_path_name(r[k].path),
                           r[k].nmse_cache, r[k].nmse_out, r[k].response,
                           r[k].nmse_out_matching, r[k].nmse_out_aggregation,
                           r[k].nmse_out_interaction, r[k].nmse_qdq,
                           r[k].degenerate);
        if (len < 0 || (size_t)len >= sizeof line - 24)
            return qmla_error_set(err, QMLA_EINTERNAL, "journal line too long");
        snprintf(line + len, sizeof line - (size_t)len, "#%016" PRIx64 "\n",
                 fnv1a(line, (size_t)len));
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
