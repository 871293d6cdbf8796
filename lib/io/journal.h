/* journal.h (private) — the one resume journal of every resumable command
 * (sweep, jvp, predict, interventions, capture, ppl; docs/results-format.md,
 * "Resume journals"). An append-only text file:
 *
 *   qmla-journal 1 <kind> <key>\n
 *   <record: one or more caller-formatted lines, none starting with '#'>
 *   #<fnv1a-64 of the record's bytes, 16 hex digits> <the record's byte count>\n
 *   ...
 *
 * <kind> names the work (one word), <key> (rest of the line) every input hash
 * and parameter that changes a result. Each record is written with fflush +
 * fsync. On open, a torn or corrupt record (no trailer, count or checksum
 * mismatch) and everything after it is dropped and the file truncated after
 * the last whole record. A journal of an earlier qmla (headers
 * qmla-sweep-journal, qmla-op-journal, qmla-iv-journal) is not converted: it
 * is refused (QMLA_EMISMATCH, "an older journal format") unless `force`. */
#ifndef QMLA_JOURNAL_H
#define QMLA_JOURNAL_H

#include <stdint.h>
#include <stdio.h>

#include "qmla/engine.h"
#include "qmla/status.h"

/* an engine mode (qmla_engine_mode) as the marks hold it, NUL included */
#define QMLA_JNL_MODE_MAX QMLA_ENGINE_DEVICE_MAX

typedef struct qmla_jnl {
    FILE *f;
    char path[4096];
    char *buf;        /* the record being built (qmla_jnl_printf) */
    size_t len, cap;
    int bad;          /* a printf failed: the commit reports it */
    char engine[32];  /* the engine of the last engine mark (qmla_jnl_engine) */
    char engines[64]; /* the engines of the records kept or written, '+'-joined
                       * in first-seen order ("" when no record follows a mark) */
    char mode[QMLA_JNL_MODE_MAX];      /* the last mark's engine mode ("": defaults) */
    char kept_mode[QMLA_JNL_MODE_MAX]; /* the mode of the first record kept */
    char other_mode[QMLA_JNL_MODE_MAX]; /* a kept record's other mode (mixed) */
    size_t kept;      /* records kept by the open (not marks) */
    int mixed;        /* kept records of two modes (a journal of an older qmla) */
} qmla_jnl;

/* Called per whole record, in file order; rec is NUL-terminated (len bytes,
 * ending in '\n') and may be modified. Return QMLA_OK to keep it,
 * QMLA_EFORMAT to cut the journal before it (it and the rest are dropped and
 * recomputed), any other status to fail the open with err set. */
typedef int (*qmla_jnl_replay_fn)(void *ctx, char *rec, size_t len, qmla_error *err);

/* Open for appending, creating it when absent or empty (or holding only a
 * torn header). Same kind and key: each whole record is replayed (n: how
 * many were kept). Another kind or key, or an older journal format, or a
 * first line that is no journal header: QMLA_EMISMATCH naming the path and
 * both headers, unless `force`, which restarts it empty. The path must be
 * absent or a regular file (QMLA_EIO otherwise). */
int qmla_jnl_open(qmla_jnl *j, const char *path, const char *kind, const char *key,
                  int force, qmla_jnl_replay_fn fn, void *ctx, size_t *n,
                  qmla_error *err);
/* Replay a journal without changing it (a concurrent reader: another
 * process may be appending; a torn tail ends the read). QMLA_EFORMAT: no
 * header; QMLA_EMISMATCH: another kind or key; QMLA_EIO. */
int qmla_jnl_read(const char *path, const char *kind, const char *key,
                  qmla_jnl_replay_fn fn, void *ctx, size_t *n, qmla_error *err);
/* The same, also returning the engines of the records read ('+'-joined,
 * "" for none or a journal without engine marks) into engines[len]. */
int qmla_jnl_read_engines(const char *path, const char *kind, const char *key,
                          qmla_jnl_replay_fn fn, void *ctx, size_t *n, char *engines,
                          size_t len, qmla_error *err);

/* Engine marks. A journal that engines resume from one another (the resume
 * key has no engine: their rows agree to 1e-4, not bit for bit) records
 * which engine wrote its records: qmla_jnl_engine appends the record
 * "@engine NAME" (mode "", the defaults) or "@engine NAME MODE" (MODE
 * escaped, qmla_jnl_escape; since run 13) when NAME or MODE is not the
 * last mark's, and every later record is NAME's in MODE. Replays skip the
 * marks (the callback never sees them) and collect the engines of the kept
 * records in j->engines. The mode (qmla_engine_mode: "" or the switches
 * that change results in their last digits, "GEMMs 3xtf32") must be the
 * kept records' own: a resume in another mode would mix, say, float32 and
 * 3xTF32 rows under one provenance, so qmla_jnl_engine refuses it
 * (QMLA_EMISMATCH naming the journal, the mode expected — its records' —
 * and the mode found — this run's) and writes nothing. A journal written
 * before run 13 has no modes: its records are mode "". */
int qmla_jnl_engine(qmla_jnl *j, const char *name, const char *mode, qmla_error *err);

/* Add the '+'-joined names of `names` to the set `set` (a '+'-joined list
 * in first-seen order, size len), skipping those it has. */
void qmla_jnl_engines_add(char *set, size_t len, const char *names);

/* Append text to the record being built (lines must not start with '#';
 * the record must end with '\n'). */
void qmla_jnl_printf(qmla_jnl *j, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Write the record built so far with its trailer, fflush + fsync; the
 * builder is emptied either way. QMLA_EIO names the path and the cause. */
int qmla_jnl_commit(qmla_jnl *j, qmla_error *err);
/* Close; `remove_file` deletes it (once the results are safely written). */
void qmla_jnl_close(qmla_jnl *j, int remove_file);

/* FNV-1a 64 (the record checksum; also used for side data files). */
uint64_t qmla_jnl_fnv1a(const void *p, size_t n, uint64_t h);
#define QMLA_JNL_FNV_INIT 1469598103934665603ULL
/* Strings as one token: [A-Za-z0-9._:-] kept, other bytes %XX. */
void qmla_jnl_escape(const char *in, char *out, size_t len);
int qmla_jnl_unescape(const char *in, char *out, size_t len);
/* Reals: C99 hex (%a) round-trips exactly; qmla_jnl_real parses one token
 * (strtod), -1 when it is not a whole number. */
int qmla_jnl_real(const char *tok, double *v);

#endif
