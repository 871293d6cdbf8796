/* qmla/response.h — the one definition of a result row of the matched-NMSE
 * sweep (docs/results-format.md, /responses). The X-macro table below
 * generates the struct, and drives the journal (lib/io/journal.c), the results
 * writer and reader (lib/sweep/results.c), the validation of replayed rows and the
 * test that keeps docs/results-format.md in step (tests/io/test_rowtable.c):
 * a new column is one line here.
 *
 * X(name, kind, ctype, array, units, description)
 *   kind  INT   int, stored int32
 *         STR   char[128] UTF-8, stored variable-length string
 *         PATH  int (QMLA_PATH_*), stored as the string "content" / "rope"
 *         REAL  double, stored float64; finite and >= 0 in every valid row
 *         FLAG  int 0/1, stored uint8
 *   units "1" for dimensionless ratios, "" where none applies
 */
#ifndef QMLA_RESPONSE_H
#define QMLA_RESPONSE_H

#include <stddef.h>

#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { QMLA_PATH_CONTENT = 0, QMLA_PATH_ROPE = 1 };
const char *qmla_path_name(int path); /* "content" / "rope" */
/* QMLA_PATH_* for "content" / "rope", -1 otherwise. */
int qmla_path_parse(const char *name);

#define QMLA_CELL_NAME_MAX 128

#define QMLA_RESPONSE_COLUMNS(X)                                              \
    X(layer, INT, int, , "",                                                  \
      "layer index as captured (/layers/<layer> of the capture)")             \
    X(cell, STR, char, [QMLA_CELL_NAME_MAX], "",                              \
      "cell name as captured (a corpus and sampling seed)")                   \
    X(seq, INT, int, , "", "sequence index within the cell (0-based)")        \
    X(path, PATH, int, , "",                                                  \
      "perturbed cache path: content (latent c_kv) or rope (RoPE key k_rope)") \
    X(nmse_cache, REAL, double, , "1",                                        \
      "realised cache NMSE ||E||^2/||X||^2 of the perturbed path")            \
    X(nmse_out, REAL, double, , "1",                                          \
      "attention-output NMSE ||Y~ - Y||^2/||Y||^2")                           \
    X(response, REAL, double, , "1",                                          \
      "path response R = nmse_out / nmse_cache")                              \
    X(nmse_out_matching, REAL, double, , "1",                                 \
      "output NMSE of the matching route (A~ - A) C")                         \
    X(nmse_out_aggregation, REAL, double, , "1",                              \
      "output NMSE of the aggregation route A E (content path; 0 for rope)")  \
    X(nmse_out_interaction, REAL, double, , "1",                              \
      "output NMSE of the interaction route (A~ - A) E (content; 0 for rope)") \
    X(nmse_qdq, REAL, double, , "1",                                          \
      "raw quantizer NMSE ||QDQ(X) - X||^2/||X||^2 before rescaling")         \
    X(verified, FLAG, int, , "",                                              \
      "1: route identity checked against a full perturbed forward (--verify)") \
    X(route_residual, REAL, double, , "1",                                    \
      "||sum of routes - (Y~ - Y)|| / ||Y~ - Y|| when verified, else 0")      \
    X(degenerate, FLAG, int, , "",                                            \
      "1: no energy in the error, cache or output; numbers 0, not averaged")

/* One row of /responses. */
typedef struct qmla_response {
#define QMLA_X_FIELD(name, kind, ctype, array, units, desc) ctype name array;
    QMLA_RESPONSE_COLUMNS(QMLA_X_FIELD)
#undef QMLA_X_FIELD
} qmla_response;

typedef enum qmla_col_kind {
    QMLA_COL_INT,
    QMLA_COL_STR,
    QMLA_COL_PATH,
    QMLA_COL_REAL,
    QMLA_COL_FLAG
} qmla_col_kind;

typedef struct qmla_column {
    const char *name;
    qmla_col_kind kind;
    size_t offset; /* in qmla_response */
    const char *units;
    const char *description;
} qmla_column;

/* The columns in table order. */
extern const qmla_column qmla_response_columns[];
extern const size_t qmla_response_n_columns;

/* Field access through a column (kind INT/PATH/FLAG: int; REAL: double;
 * STR: char[QMLA_CELL_NAME_MAX]). */
static inline int *qmla_col_int(qmla_response *r, const qmla_column *c)
{
    return (int *)(void *)((char *)r + c->offset);
}
static inline double *qmla_col_real(qmla_response *r, const qmla_column *c)
{
    return (double *)(void *)((char *)r + c->offset);
}
static inline char *qmla_col_str(qmla_response *r, const qmla_column *c)
{
    return (char *)r + c->offset;
}

/* Check one row for what the writer never produces: a non-finite or
 * negative REAL, a flag other than 0/1, an unknown path, a negative layer or
 * sequence, an empty cell name. QMLA_OK, or QMLA_EFORMAT with a message
 * naming the column, the expected and the found value. */
int qmla_response_validate(const qmla_response *r, qmla_error *err);

/* Sort by (layer, cell, seq, path). */
void qmla_responses_sort(qmla_response *r, size_t n);

#ifdef __cplusplus
}
#endif
#endif
