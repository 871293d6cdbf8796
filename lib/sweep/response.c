/* response.c — the result-row table (include/qmla/response.h): column
 * descriptors generated from QMLA_RESPONSE_COLUMNS, row validation, order. */
#include "qmla/response.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

const char *qmla_path_name(int path)
{
    return path == QMLA_PATH_ROPE ? "rope" : "content";
}

int qmla_path_parse(const char *name)
{
    if (strcmp(name, "content") == 0)
        return QMLA_PATH_CONTENT;
    if (strcmp(name, "rope") == 0)
        return QMLA_PATH_ROPE;
    return -1;
}

const qmla_column qmla_response_columns[] = {
#define QMLA_X_DESC(name, kind, ctype, array, units, desc)                    \
    {#name, QMLA_COL_##kind, offsetof(qmla_response, name), units, desc},
    QMLA_RESPONSE_COLUMNS(QMLA_X_DESC)
#undef QMLA_X_DESC
};
const size_t qmla_response_n_columns =
    sizeof qmla_response_columns / sizeof qmla_response_columns[0];

int qmla_response_validate(const qmla_response *r_in, qmla_error *err)
{
    qmla_response *r = (qmla_response *)r_in; /* read-only use */
    for (size_t k = 0; k < qmla_response_n_columns; k++) {
        const qmla_column *c = &qmla_response_columns[k];
        switch (c->kind) {
        case QMLA_COL_INT:
            if (*qmla_col_int(r, c) < 0)
                return qmla_error_set(err, QMLA_EFORMAT,
                                      "column %s: expected >= 0, found %d",
                                      c->name, *qmla_col_int(r, c));
            break;
        case QMLA_COL_FLAG:
            if (*qmla_col_int(r, c) != 0 && *qmla_col_int(r, c) != 1)
                return qmla_error_set(err, QMLA_EFORMAT,
                                      "column %s: expected 0 or 1, found %d",
                                      c->name, *qmla_col_int(r, c));
            break;
        case QMLA_COL_PATH:
            if (*qmla_col_int(r, c) != QMLA_PATH_CONTENT &&
                *qmla_col_int(r, c) != QMLA_PATH_ROPE)
                return qmla_error_set(err, QMLA_EFORMAT,
                                      "column %s: expected content or rope, "
                                      "found code %d",
                                      c->name, *qmla_col_int(r, c));
            break;
        case QMLA_COL_REAL: {
            const double v = *qmla_col_real(r, c);
            if (!isfinite(v) || v < 0.0)
                return qmla_error_set(err, QMLA_EFORMAT,
                                      "column %s: expected a finite value >= 0, "
                                      "found %g",
                                      c->name, v);
            break;
        }
        case QMLA_COL_STR:
            if (!qmla_col_str(r, c)[0])
                return qmla_error_set(err, QMLA_EFORMAT,
                                      "column %s: expected a name, found an "
                                      "empty string",
                                      c->name);
            break;
        }
    }
    return QMLA_OK;
}

static int cmp_resp(const void *pa, const void *pb)
{
    const qmla_response *a = pa, *b = pb;
    if (a->layer != b->layer)
        return a->layer < b->layer ? -1 : 1;
    int c = strcmp(a->cell, b->cell);
    if (c)
        return c;
    if (a->seq != b->seq)
        return a->seq < b->seq ? -1 : 1;
    return (a->path > b->path) - (a->path < b->path);
}

void qmla_responses_sort(qmla_response *r, size_t n)
{
    if (n > 1)
        qsort(r, n, sizeof *r, cmp_resp);
}
