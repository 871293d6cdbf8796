/* journal.h (private) — the sweep's resume journal: an append-only text file
 * `<results>.journal` with a header naming the resume key and one line per
 * finished (layer, cell, seq, path) response, each line carrying a checksum
 * and written with fflush + fsync. A torn last line (crash mid-write) fails
 * its checksum and is dropped; earlier lines survive. */
#ifndef QMLA_JOURNAL_H
#define QMLA_JOURNAL_H

#include <stdio.h>

#include "qmla/status.h"
#include "qmla/response.h"

typedef struct qmla_journal {
    FILE *f;
    char path[4096];
} qmla_journal;

/* Open (creating if absent) the journal for `key`. Existing valid records
 * are returned in *recs (caller frees) and the file is truncated after the
 * last valid record. A journal with another key: QMLA_EMISMATCH unless
 * `force`, which restarts it empty. */
int qmla_journal_open(qmla_journal *j, const char *path, const char *key,
                      int force, qmla_response **recs, size_t *n,
                      qmla_error *err);
/* Append records durably. */
int qmla_journal_append(qmla_journal *j, const qmla_response *r, size_t n,
                        qmla_error *err);
/* Read the records of a journal without changing it (another process may be
 * appending: a torn last line ends the read). QMLA_EMISMATCH for a journal
 * of another key, QMLA_EFORMAT for no header, QMLA_EIO. */
int qmla_journal_read(const char *path, const char *key, qmla_response **recs,
                      size_t *n, qmla_error *err);
/* Close; `remove_file` deletes it (after the results are safely written). */
void qmla_journal_close(qmla_journal *j, int remove_file);

#endif
