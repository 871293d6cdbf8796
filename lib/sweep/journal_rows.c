/* journal_rows.c — the sweep's rows in the journal layer (io/journal.h): kind
 * "sweep", one record per finished item, one line per response:
 *   R <col1> <col2> ...
 * the columns of the row table (include/qmla/response.h) in table order,
 * INT/FLAG decimal, REAL C99 hex (%a, exact round trip), PATH its name, STR
 * escaped (qmla_jnl_escape). */
#include "sweep/journal_rows.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SWEEP_KIND "sweep"

/* One line (newline stripped) into r; -1 when malformed. */
static int parse_row(char *line, qmla_response *r)
{
    if (line[0] != 'R' || line[1] != ' ')
        return -1;
    memset(r, 0, sizeof *r);
    char *save = NULL, *end = NULL, *tok = strtok_r(line + 2, " ", &save);
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
            if (qmla_jnl_real(tok, qmla_col_real(r, c)))
                return -1;
            break;
        case QMLA_COL_PATH:
            if ((*qmla_col_int(r, c) = qmla_path_parse(tok)) < 0)
                return -1;
            break;
        case QMLA_COL_STR:
            if (qmla_jnl_unescape(tok, qmla_col_str(r, c), QMLA_CELL_NAME_MAX))
                return -1;
            break;
        }
    }
    return tok ? -1 : 0; /* no extra fields */
}

typedef struct rows {
    qmla_response *a;
    size_t n, cap;
    const char *path;
} rows;

static int on_record(void *ctx, char *rec, size_t len, qmla_error *err)
{
    (void)len;
    rows *rs = ctx;
    const size_t n0 = rs->n;
    char *save = NULL;
    for (char *line = strtok_r(rec, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (rs->n == rs->cap) {
            size_t nc = rs->cap ? 2 * rs->cap : 256;
            qmla_response *na = realloc(rs->a, nc * sizeof *na);
            if (!na)
                return qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", rs->path);
            rs->a = na;
            rs->cap = nc;
        }
        if (parse_row(line, &rs->a[rs->n])) {
            rs->n = n0; /* the whole record goes */
            return QMLA_EFORMAT;
        }
        rs->n++;
    }
    return QMLA_OK;
}

int qmla_journal_open(qmla_journal *j, const char *path, const char *key,
                      int force, qmla_response **recs, size_t *n,
                      qmla_error *err)
{
    rows rs = {NULL, 0, 0, path};
    *recs = NULL;
    *n = 0;
    const int st = qmla_jnl_open(&j->j, path, SWEEP_KIND, key, force, on_record, &rs, NULL,
                                 err);
    if (st) {
        free(rs.a);
        return st;
    }
    *recs = rs.a;
    *n = rs.n;
    return QMLA_OK;
}

int qmla_journal_read(const char *path, const char *key, qmla_response **recs,
                      size_t *n, qmla_error *err)
{
    return qmla_journal_read_engines(path, key, recs, n, NULL, 0, err);
}

int qmla_journal_read_engines(const char *path, const char *key, qmla_response **recs,
                              size_t *n, char *engines, size_t elen, qmla_error *err)
{
    rows rs = {NULL, 0, 0, path};
    *recs = NULL;
    *n = 0;
    const int st = qmla_jnl_read_engines(path, SWEEP_KIND, key, on_record, &rs, NULL, engines,
                                         elen, err);
    if (st) {
        free(rs.a);
        return st;
    }
    *recs = rs.a;
    *n = rs.n;
    return QMLA_OK;
}

int qmla_journal_append(qmla_journal *j, const qmla_response *r_in, size_t n,
                        qmla_error *err)
{
    for (size_t k = 0; k < n; k++) {
        qmla_response r = r_in[k];
        qmla_jnl_printf(&j->j, "R");
        for (size_t i = 0; i < qmla_response_n_columns; i++) {
            const qmla_column *c = &qmla_response_columns[i];
            char cell[4 * QMLA_CELL_NAME_MAX];
            switch (c->kind) {
            case QMLA_COL_INT:
            case QMLA_COL_FLAG:
                qmla_jnl_printf(&j->j, " %d", *qmla_col_int(&r, c));
                break;
            case QMLA_COL_REAL:
                qmla_jnl_printf(&j->j, " %a", *qmla_col_real(&r, c));
                break;
            case QMLA_COL_PATH:
                qmla_jnl_printf(&j->j, " %s", qmla_path_name(*qmla_col_int(&r, c)));
                break;
            case QMLA_COL_STR:
                qmla_jnl_escape(qmla_col_str(&r, c), cell, sizeof cell);
                qmla_jnl_printf(&j->j, " %s", cell);
                break;
            }
        }
        qmla_jnl_printf(&j->j, "\n");
    }
    return qmla_jnl_commit(&j->j, err);
}

void qmla_journal_close(qmla_journal *j, int remove_file)
{
    qmla_jnl_close(&j->j, remove_file);
}
