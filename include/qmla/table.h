/* qmla/table.h — row tables read generically from HDF5 results files.
 *
 * A *table* is an HDF5 group whose datasets are all 1-D and of one length
 * (qmla-results v1: /responses, /summary, and every group later
 * capabilities add). Each dataset is a column: any integer, floating-point
 * or string (fixed or variable length) type. A column's `units` and
 * `description` string attributes are picked up when present; the group's
 * own attributes (e.g. /summary's model_ratio) and the file's root
 * attributes (the provenance) are read as qmla_attr lists.
 *
 * Nothing here knows the results schema: a column added to /responses
 * appears in every table read without a change to this module. Derived
 * tables (qmla_table_by_layer) are built from the generic ones.
 *
 *   qmla_table *t;
 *   if (qmla_table_read("results.h5", "summary", &t, &err)) ...err.msg...
 *   const qmla_table_col *c = qmla_table_column(t, "ratio");  // c->v.d[row]
 *   qmla_table_free(t);
 *
 * Every function returns a qmla_status and fills err (file, dataset,
 * expected, found); nothing prints. */
#ifndef QMLA_TABLE_H
#define QMLA_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qmla_val_kind {
    QMLA_VAL_INT = 0,   /* signed integers (any width) -> i */
    QMLA_VAL_UINT = 1,  /* unsigned integers (any width) -> u */
    QMLA_VAL_FLOAT = 2, /* floating point (any width) -> d */
    QMLA_VAL_STRING = 3 /* fixed or variable-length strings -> s */
} qmla_val_kind;

/* A vector of n values of one kind; only the array matching kind is set. */
typedef struct qmla_values {
    qmla_val_kind kind;
    size_t n;
    int64_t *i;  /* [n] when kind == QMLA_VAL_INT */
    uint64_t *u; /* [n] when kind == QMLA_VAL_UINT */
    double *d;   /* [n] when kind == QMLA_VAL_FLOAT */
    char **s;    /* [n] NUL-terminated, when kind == QMLA_VAL_STRING */
} qmla_values;

/* An attribute: scalar (v.n == 1, scalar = 1) or a 1-D array. */
typedef struct qmla_attr {
    char *name;
    int scalar;
    qmla_values v;
} qmla_attr;

typedef struct qmla_table_col {
    char *name;
    char *units;       /* "" when the dataset has no `units` attribute */
    char *description; /* "" when absent */
    qmla_values v;     /* v.n == the table's n_rows */
} qmla_table_col;

typedef struct qmla_table {
    char *name;       /* group name, e.g. "responses" */
    size_t n_rows, n_cols;
    qmla_table_col *cols;/* [n_cols], in creation order where the file tracks
                         it, else in object-address order (the order a
                         write-once file created them) */
    size_t n_attrs;
    qmla_attr *attrs; /* [n_attrs] the group's attributes */
} qmla_table;

/* Root attributes of an HDF5 file (the results provenance), name order.
 * Attributes of a type that is neither integer, float nor string, or of
 * rank > 1, are left out. Caller frees with qmla_attrs_free. */
int qmla_file_attrs(const char *path, qmla_attr **attrs, size_t *n,
                    qmla_error *err);
void qmla_attrs_free(qmla_attr *attrs, size_t n);

/* Names of the root groups of path that are tables (every member a 1-D
 * dataset, all of one length), name order. Caller frees each and *names. */
int qmla_table_names(const char *path, char ***names, size_t *n,
                     qmla_error *err);

/* Read group `name` of path as a table. QMLA_EIO: cannot open the file;
 * QMLA_EFORMAT: no such group ("expected one of: ..."), a member that is
 * not a 1-D dataset, lengths that differ, an unsupported type. */
int qmla_table_read(const char *path, const char *name, qmla_table **out,
                    qmla_error *err);
void qmla_table_free(qmla_table *t);

/* Every table of path, in root and nested groups alike, name order: the
 * 1-D datasets of one length in a group form a table named by the group's
 * path ("summary", "layers/0/content"). Where a group holds 1-D datasets of
 * several lengths (/interventions: per item and per repetition; /predict),
 * the length most of them share (ties: the first created) is the table
 * named by the group and each other length L the table "GROUP:L"
 * ("interventions:384"). Datasets of other ranks (a transforms file's
 * rotations) and groups of attributes only hold no table. */
int qmla_table_list(const char *path, char ***names, size_t *n, qmla_error *err);

/* Read a table named as qmla_table_list names it; a group that is a table
 * (every member a 1-D dataset of one length) reads as qmla_table_read reads
 * it, and a group holding no 1-D dataset gets qmla_table_read's error. */
int qmla_table_read_any(const char *path, const char *name, qmla_table **out,
                        qmla_error *err);

/* Attributes of group `group` of path ("" or "/": the root), name order. */
int qmla_group_attrs(const char *path, const char *group, qmla_attr **attrs,
                     size_t *n, qmla_error *err);

/* Names of the members of `group` ("" the root) that are groups (groups 1)
 * or datasets (groups 0), name order. Caller frees each and *names. */
int qmla_group_children(const char *path, const char *group, char ***names,
                        size_t *n, int groups, qmla_error *err);

/* Column by name, NULL if absent. */
const qmla_table_col *qmla_table_column(const qmla_table *t, const char *name);
/* Attribute by name in a list, NULL if absent. */
const qmla_attr *qmla_attr_find(const qmla_attr *a, size_t n,
                                const char *name);
/* Numeric value k of a column or attribute as double (strings: NaN). */
double qmla_values_get(const qmla_values *v, size_t k);

/* Build tables in memory: an empty table of n_rows rows, then columns. */
int qmla_table_alloc(const char *name, size_t n_rows, qmla_table **out,
                     qmla_error *err);
/* Append a column (copies name, units, description and the n_rows values
 * of data: int64_t, uint64_t, double or const char * according to kind). */
int qmla_table_add_column(qmla_table *t, const char *name, const char *units,
                          const char *description, qmla_val_kind kind,
                          const void *data, qmla_error *err);

/* The per-layer table of a /responses table: one row per layer, column
 * `layer`, then for every floating-point column X of responses and every
 * path P present (`content`, `rope`, in that order) a column P_X: the mean
 * over cells of the mean over sequences of X, non-degenerate rows only
 * (docs/math.md §3; for X = response this is /summary's response_content
 * and response_rope), and P_n_items (rows averaged). Needs columns layer,
 * cell, path (strings) and, when present, degenerate. Units and
 * descriptions are carried over. */
int qmla_table_by_layer(const qmla_table *responses, qmla_table **out,
                        qmla_error *err);

#ifdef __cplusplus
}
#endif
#endif
