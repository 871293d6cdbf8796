/* sweep/journal_rows.h (private) — the sweep's rows in the journal layer
 * (io/journal.h; lib/sweep/journal_rows.c). Kind "sweep": one record per
 * finished (layer, cell, seq), one line per
 * response: R <the row table's columns in table order> (include/qmla/
 * response.h; INT/FLAG decimal, REAL %a, PATH its name, STR escaped). */
#ifndef QMLA_SWEEP_JOURNAL_ROWS_H
#define QMLA_SWEEP_JOURNAL_ROWS_H

#include "io/journal.h"
#include "qmla/response.h"

typedef struct qmla_journal {
    qmla_jnl j;
} qmla_journal;

/* Open (creating if absent) the sweep journal for `key`; the replayed rows
 * in *recs (caller frees). Another key: QMLA_EMISMATCH unless `force`. */
int qmla_journal_open(qmla_journal *j, const char *path, const char *key,
                      int force, qmla_response **recs, size_t *n,
                      qmla_error *err);
/* Append the responses of one item as one durable record. */
int qmla_journal_append(qmla_journal *j, const qmla_response *r, size_t n,
                        qmla_error *err);
/* Read the rows of a journal without changing it (qmla_jnl_read). */
int qmla_journal_read(const char *path, const char *key, qmla_response **recs,
                      size_t *n, qmla_error *err);
/* The same, with the engines of its records ('+'-joined, "" when unmarked;
 * journal.h "Engine marks") into engines[len]. */
int qmla_journal_read_engines(const char *path, const char *key, qmla_response **recs,
                              size_t *n, char *engines, size_t len, qmla_error *err);
void qmla_journal_close(qmla_journal *j, int remove_file);

#endif
