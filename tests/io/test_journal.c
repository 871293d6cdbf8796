/* test_journal.c — the one resume journal layer (lib/io/journal.h):
 *  1. records round-trip in order, multi-line, through close and reopen;
 *  2. a torn tail (a record without its trailer, a half-written trailer) is
 *     dropped and the file truncated after the last whole record;
 *  3. a record whose bytes no longer match its checksum (or byte count) cuts
 *     the journal there: it and every later record are dropped;
 *  4. the replay callback's QMLA_EFORMAT cuts the journal the same way;
 *  5. a journal of another kind or key is refused (QMLA_EMISMATCH naming the
 *     path and both headers) and left unchanged, --force restarts it empty;
 *  6. a journal of an earlier qmla (qmla-sweep-journal, qmla-op-journal,
 *     qmla-iv-journal) is refused as "an older journal format", --force
 *     restarts it; an empty file is no foreign journal;
 *  7. a failing fsync is reported (QMLA_EIO naming the path and "fsync");
 *  8. qmla_jnl_read reads without changing the file, and refuses other keys. */
#include "check.h"
#include "fixture.h"
#include "../lib/io/journal.h"
#include "../lib/operator/op_part.h"
#include "../lib/core/engine_int.h"
#include "qmla/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct got {
    char recs[16][256];
    size_t n;
    int cut_at; /* return QMLA_EFORMAT for the record starting with this number */
} got;

static int collect(void *ctx, char *rec, size_t len, qmla_error *err)
{
    (void)err;
    got *g = ctx;
    if (g->cut_at >= 0 && atoi(rec) == g->cut_at)
        return QMLA_EFORMAT;
    if (g->n < 16)
        snprintf(g->recs[g->n++], 256, "%.*s", (int)len, rec);
    return QMLA_OK;
}

static char dir[512];
#define tmp(name) check_path(name)

static long fsize(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

static char *slurp(const char *p)
{
    FILE *f = fopen(p, "rb");
    if (!f)
        return NULL;
    char *b = calloc(1, 1 << 16);
    size_t n = fread(b, 1, (1 << 16) - 1, f);
    b[n] = 0;
    fclose(f);
    return b;
}

/* three records: "1 a\n", "2 b\nline two\n", "3 c\n" */
static void write3(const char *p)
{
    qmla_jnl j;
    qmla_error err;
    qmla_error_clear(&err);
    size_t n = 9;
    unlink(p);
    CHECK_OK(qmla_jnl_open(&j, p, "test", "k=1 x=0x1p-3", 0, collect, NULL, &n, &err), err);
    CHECK(n == 0, "fresh journal replayed %zu records", n);
    qmla_jnl_printf(&j, "1 a\n");
    CHECK_OK(qmla_jnl_commit(&j, &err), err);
    qmla_jnl_printf(&j, "2 %s\n", "b");
    qmla_jnl_printf(&j, "line %s\n", "two");
    CHECK_OK(qmla_jnl_commit(&j, &err), err);
    qmla_jnl_printf(&j, "3 c\n");
    CHECK_OK(qmla_jnl_commit(&j, &err), err);
    qmla_jnl_close(&j, 0);
}

static size_t reopen(const char *p, const char *kind, const char *key, int force, got *g,
                     int *st, qmla_error *err)
{
    qmla_jnl j;
    size_t n = 0;
    memset(g, 0, sizeof *g);
    g->cut_at = g->cut_at ? g->cut_at : -1;
    qmla_error_clear(err);
    *st = qmla_jnl_open(&j, p, kind, key, force, collect, g, &n, err);
    if (*st == 0)
        qmla_jnl_close(&j, 0);
    return n;
}

static int emit_one(void *ctx, qmla_jnl *j, qmla_error *err)
{
    (void)ctx;
    (void)err;
    qmla_jnl_printf(j, "I 0\n");
    return qmla_jnl_commit(j, err);
}

static int count_rec(void *ctx, char *rec, size_t len, qmla_error *err)
{
    (void)rec;
    (void)len;
    (void)err;
    ++*(size_t *)ctx;
    return QMLA_OK;
}

/* A part file whose header names an engine set of 59 bytes (the sets hold
 * 63, journal.h engines[64]): read back whole by the replay (the header
 * was read with %31s until run 12, which cut such a set and made the part
 * "not a part file" at the merge). */
static void test_long_engine_set(void)
{
    qmla_error err;
    qmla_error_clear(&err);
    const qmla_engine *cpu = NULL;
    CHECK_OK(qmla_engine_find("cpu", &cpu, &err), err);
    const char *set = "cpu+cuda+engine-with-a-long-name-0123456789+another-name-xy";
    CHECK(strlen(set) > 31 && strlen(set) < 64, "the set's length %zu", strlen(set));
    const char *p = tmp("long.part");
    int st = qmla_oppart_write(p, "tpart", "k=1", 0, 2, 0x1234, cpu, set, emit_one, NULL, &err);
    CHECK_OK(st, err);
    char engines[64] = "";
    size_t n = 0;
    const char *files[1] = {p};
    st = qmla_oppart_replay_files(files, 1, "tjnl", "tpart", "k=1", count_rec, &n, engines,
                                  sizeof engines, &err);
    CHECK_OK(st, err);
    CHECK(n == 1, "the part's items replayed: %zu (expected 1)", n);
    CHECK(!strcmp(engines, set), "the part's engine set read back: \"%s\" (expected \"%s\")",
          engines, set);
}

/* Engine modes (run 13, review12): a journal's records of one mode resume
 * only in that mode (the CPU engine's and the CUDA engine's defaults are
 * both ""); another mode is refused naming the file, the mode expected and
 * the one found, and writes nothing; a journal with no modes (before run
 * 13) reads as "". */
static void test_engine_modes(void)
{
    qmla_error err;
    qmla_error_clear(&err);
    const char *q = tmp("mode.journal");
    qmla_jnl j;
    unlink(q);
    /* 3xtf32 records */
    CHECK_OK(qmla_jnl_open(&j, q, "test", "k", 0, NULL, NULL, NULL, &err), err);
    CHECK_OK(qmla_jnl_engine(&j, "cuda", "GEMMs 3xtf32", &err), err);
    qmla_jnl_printf(&j, "1 a\n");
    CHECK_OK(qmla_jnl_commit(&j, &err), err);
    qmla_jnl_close(&j, 0);
    char *before = slurp(q);
    CHECK(before && strstr(before, "@engine cuda GEMMs%203xtf32\n"),
          "the mark records the mode escaped: %s", before ? before : "(unreadable)");
    /* resumed in fp32 (the defaults), by either engine: refused */
    const char *const other[2] = {"cuda", "cpu"};
    for (int k = 0; k < 2; k++) {
        size_t nn = 0;
        CHECK_OK(qmla_jnl_open(&j, q, "test", "k", 0, NULL, NULL, &nn, &err), err);
        CHECK(nn == 1 && !strcmp(j.kept_mode, "GEMMs 3xtf32"), "reopened: %zu records, mode "
              "\"%s\"", nn, j.kept_mode);
        qmla_error_clear(&err);
        const int st = qmla_jnl_engine(&j, other[k], "", &err);
        CHECK(st == QMLA_EMISMATCH, "%s in fp32 resuming 3xtf32 records: status %d (expected "
              "QMLA_EMISMATCH)", other[k], st);
        CHECK(strstr(err.msg, q) && strstr(err.msg, "expected engine mode \"GEMMs 3xtf32\"") &&
              strstr(err.msg, "found \"defaults (float32)\""),
              "the refusal names the file, expected and found: %s", err.msg);
        qmla_jnl_close(&j, 0);
    }
    /* another non-default mode: refused too; the same mode: resumed */
    CHECK_OK(qmla_jnl_open(&j, q, "test", "k", 0, NULL, NULL, NULL, &err), err);
    CHECK(qmla_jnl_engine(&j, "cuda", "GEMMs 3xtf32; query tile <= 128", &err) ==
              QMLA_EMISMATCH, "3xtf32 with another tile resuming 3xtf32 records");
    CHECK_OK(qmla_jnl_engine(&j, "cuda", "GEMMs 3xtf32", &err), err);
    qmla_jnl_printf(&j, "2 b\n");
    CHECK_OK(qmla_jnl_commit(&j, &err), err);
    qmla_jnl_close(&j, 0);
    char *after = slurp(q);
    int marks = 0;
    for (const char *t = after; t && (t = strstr(t, "@engine ")); t++)
        marks++;
    CHECK(marks == 1, "the refused resumes wrote nothing, the same mode no second mark: %d "
          "marks", marks);
    free(before);
    free(after);
    /* a journal of defaults (no mode in its marks, as before run 13) resumes
     * in the defaults with the other engine, not in 3xtf32 */
    unlink(q);
    CHECK_OK(qmla_jnl_open(&j, q, "test", "k", 0, NULL, NULL, NULL, &err), err);
    CHECK_OK(qmla_jnl_engine(&j, "cpu", NULL, &err), err);
    qmla_jnl_printf(&j, "1 a\n");
    CHECK_OK(qmla_jnl_commit(&j, &err), err);
    qmla_jnl_close(&j, 0);
    CHECK_OK(qmla_jnl_open(&j, q, "test", "k", 0, NULL, NULL, NULL, &err), err);
    CHECK(qmla_jnl_engine(&j, "cuda", "GEMMs 3xtf32", &err) == QMLA_EMISMATCH,
          "3xtf32 resuming records of the defaults");
    CHECK_OK(qmla_jnl_engine(&j, "cuda", "", &err), err);
    CHECK(!strcmp(j.engines, "cpu"), "engines \"%s\"", j.engines);
    qmla_jnl_close(&j, 0);
    /* mixed modes in one journal (the commands mark the engine once per
     * run, so they do not write one; one handle marked twice does, as
     * here): refused whatever the mode, naming both */
    unlink(q);
    CHECK_OK(qmla_jnl_open(&j, q, "test", "k", 0, NULL, NULL, NULL, &err), err);
    CHECK_OK(qmla_jnl_engine(&j, "cuda", "", &err), err);
    qmla_jnl_printf(&j, "1 a\n");
    CHECK_OK(qmla_jnl_commit(&j, &err), err);
    CHECK_OK(qmla_jnl_engine(&j, "cuda", "GEMMs 3xtf32", &err), err); /* same process */
    qmla_jnl_printf(&j, "2 b\n");
    CHECK_OK(qmla_jnl_commit(&j, &err), err);
    qmla_jnl_close(&j, 0);
    CHECK_OK(qmla_jnl_open(&j, q, "test", "k", 0, NULL, NULL, NULL, &err), err);
    qmla_error_clear(&err);
    CHECK(qmla_jnl_engine(&j, "cuda", "", &err) == QMLA_EMISMATCH && j.mixed &&
              strstr(err.msg, "some are in \"GEMMs 3xtf32\""),
          "a journal of two modes: refused naming both: %s", err.msg);
    qmla_jnl_close(&j, 0);
}

/* The longest device string (QMLA_ENGINE_DEVICE_MAX - 1 bytes, every byte
 * escaped in the part header) round-trips through a part file's P record
 * (review12: the header's device was 320 bytes, shorter than the engine's
 * device string with its switches); one byte more is refused naming the
 * file. */
#define PART_REC_MAX 4096
static char long_dev_buf[QMLA_ENGINE_DEVICE_MAX + 1];
static const char *long_dev(void) { return long_dev_buf; }

static int first_record(void *ctx, char *rec, size_t len, qmla_error *err)
{
    (void)err;
    char *out = ctx;
    if (!out[0])
        snprintf(out, 2 * PART_REC_MAX, "%.*s", (int)len, rec);
    return QMLA_OK;
}

static void test_long_device(void)
{
    qmla_error err;
    qmla_error_clear(&err);
    const struct qmla_engine fake = {.name = "cpu", .device = long_dev};
    /* extra 0: letters and spaces; 1: every byte a space (escaped, 3 bytes
     * each: the widest P record); 2: one byte too long */
    for (int extra = 0; extra < 3; extra++) {
        const size_t n = QMLA_ENGINE_DEVICE_MAX - 1 + (size_t)(extra == 2);
        for (size_t k = 0; k < n; k++)
            long_dev_buf[k] = extra == 1 || k % 7 == 0 ? ' ' : (char)('a' + k % 26); /* %20 */
        long_dev_buf[n] = '\0';
        const char *p = tmp("dev.part");
        int st = qmla_oppart_write(p, "tpart", "k=1", 0, 2, 0x1234, &fake, NULL, emit_one, NULL,
                                   &err);
        CHECK_OK(st, err);
        static char rec[2 * PART_REC_MAX];
        rec[0] = '\0';
        CHECK_OK(qmla_jnl_read(p, "tpart", "k=1", first_record, rec, NULL, &err), err);
        qmla_oppart_hdr h;
        memset(&h, 0, sizeof h);
        qmla_error_clear(&err);
        st = qmla_oppart_parse_header(p, rec, &h, &err);
        if (extra < 2) {
            CHECK_OK(st, err);
            CHECK(!st && !strcmp(h.device, long_dev_buf) && h.shard == 0 && h.n_shards == 2,
                  "a device of %zu bytes read back whole (%zu bytes)", n, strlen(h.device));
        } else
            CHECK(st == QMLA_EMISMATCH && strstr(err.msg, p) && strstr(err.msg, "at most 511"),
                  "a device of %zu bytes: refused naming the file and the limit (status %d: "
                  "%s)", n, st, err.msg);
    }
}

int main(void)
{
    check_tmpdir(dir, sizeof dir, "test_journal");
    qmla_error err;
    got g;
    int st;
    const char *p = tmp("a.journal");

    /* 1. round trip */
    write3(p);
    const long whole = fsize(p);
    size_t n = reopen(p, "test", "k=1 x=0x1p-3", 0, &g, &st, &err);
    CHECK_OK(st, err);
    CHECK(n == 3 && g.n == 3, "replayed %zu (%zu) of 3 records", n, g.n);
    CHECK(!strcmp(g.recs[0], "1 a\n") && !strcmp(g.recs[1], "2 b\nline two\n") &&
          !strcmp(g.recs[2], "3 c\n"), "records differ: \"%s\" \"%s\" \"%s\"", g.recs[0],
          g.recs[1], g.recs[2]);
    char *text = slurp(p);
    CHECK(text && !strncmp(text, "qmla-journal 1 test k=1 x=0x1p-3\n1 a\n#", 38),
          "header and first record: \"%.60s\"", text ? text : "");
    free(text);
    CHECK(fsize(p) == whole, "reopening changed the size: %ld -> %ld", whole, fsize(p));

    /* 2. torn tails */
    FILE *f = fopen(p, "a");
    fputs("4 d\nhalf a li", f);
    fclose(f);
    n = reopen(p, "test", "k=1 x=0x1p-3", 0, &g, &st, &err);
    CHECK_OK(st, err);
    CHECK(n == 3, "torn record: replayed %zu (expected 3)", n);
    CHECK(fsize(p) == whole, "torn record not truncated: %ld (expected %ld)", fsize(p), whole);
    f = fopen(p, "a");
    fputs("4 d\n#00000000", f); /* the trailer torn */
    fclose(f);
    n = reopen(p, "test", "k=1 x=0x1p-3", 0, &g, &st, &err);
    CHECK(st == 0 && n == 3 && fsize(p) == whole, "torn trailer: st %d n %zu size %ld", st, n,
          fsize(p));
    f = fopen(p, "a");
    fputs("4 d\n", f); /* a whole line, no trailer */
    fclose(f);
    n = reopen(p, "test", "k=1 x=0x1p-3", 0, &g, &st, &err);
    CHECK(st == 0 && n == 3 && fsize(p) == whole, "record without trailer: st %d n %zu size %ld",
          st, n, fsize(p));

    /* 3. checksum and count mismatches cut there */
    text = slurp(p);
    char *r2 = strstr(text, "2 b\n");
    r2[2] = 'B'; /* one byte of record 2, its trailer unchanged */
    f = fopen(p, "wb");
    fputs(text, f);
    fclose(f);
    const long upto1 = (long)(r2 - text);
    n = reopen(p, "test", "k=1 x=0x1p-3", 0, &g, &st, &err);
    CHECK_OK(st, err);
    CHECK(n == 1 && !strcmp(g.recs[0], "1 a\n"), "checksum mismatch: kept %zu (expected 1)", n);
    CHECK(fsize(p) == upto1, "cut at the damaged record: size %ld (expected %ld)", fsize(p),
          upto1);
    free(text);
    write3(p);
    text = slurp(p);
    char *tr = strstr(text, "\n#");
    tr = strchr(tr + 2, ' ');
    tr[1] = tr[1] == '9' ? '8' : (char)(tr[1] + 1); /* the first byte count */
    f = fopen(p, "wb");
    fputs(text, f);
    fclose(f);
    free(text);
    n = reopen(p, "test", "k=1 x=0x1p-3", 0, &g, &st, &err);
    CHECK(st == 0 && n == 0, "byte-count mismatch: st %d kept %zu (expected 0)", st, n);

    /* 4. the callback cuts */
    write3(p);
    memset(&g, 0, sizeof g);
    g.cut_at = 2;
    {
        qmla_jnl j;
        qmla_error_clear(&err);
        st = qmla_jnl_open(&j, p, "test", "k=1 x=0x1p-3", 0, collect, &g, &n, &err);
        CHECK_OK(st, err);
        CHECK(n == 1 && g.n == 1, "callback cut at record 2: kept %zu", n);
        qmla_jnl_printf(&j, "5 e\n"); /* appended after the cut */
        CHECK_OK(qmla_jnl_commit(&j, &err), err);
        qmla_jnl_close(&j, 0);
    }
    n = reopen(p, "test", "k=1 x=0x1p-3", 0, &g, &st, &err);
    CHECK(st == 0 && n == 2 && !strcmp(g.recs[1], "5 e\n"), "after the cut: %zu records, "
          "second \"%s\"", n, g.recs[1]);

    /* 5. another kind or key */
    write3(p);
    n = reopen(p, "test", "k=2 x=0x1p-3", 0, &g, &st, &err);
    CHECK(st == QMLA_EMISMATCH, "other key resumed: st %d", st);
    CHECK(strstr(err.msg, "a.journal") && strstr(err.msg, "k=1") && strstr(err.msg, "k=2") &&
          strstr(err.msg, "--force"), "other-key message: %s", err.msg);
    CHECK(fsize(p) == whole, "refused journal changed: %ld", fsize(p));
    n = reopen(p, "other", "k=1 x=0x1p-3", 0, &g, &st, &err);
    CHECK(st == QMLA_EMISMATCH, "other kind resumed: st %d", st);
    n = reopen(p, "test", "k=2 x=0x1p-3", 1, &g, &st, &err);
    CHECK(st == 0 && n == 0 && g.n == 0, "--force: st %d replayed %zu", st, n);
    text = slurp(p);
    CHECK(text && !strcmp(text, "qmla-journal 1 test k=2 x=0x1p-3\n"), "--force restart: "
          "\"%s\"", text ? text : "");
    free(text);

    /* 6. journals of earlier versions; an empty file */
    const char *old[] = {"qmla-sweep-journal 2 sha256=ab bits=4\nR 0 x #0123\n",
                         "qmla-op-journal 1 sha256=ab sens=1\nI 0 c 0 4 2 0\nE\n",
                         "qmla-iv-journal 1 sha256=ab\n"};
    for (int k = 0; k < 3; k++) {
        f = fopen(p, "wb");
        fputs(old[k], f);
        fclose(f);
        n = reopen(p, "test", "k=1", 0, &g, &st, &err);
        CHECK(st == QMLA_EMISMATCH && strstr(err.msg, "older journal format") &&
              strstr(err.msg, "--force") && strstr(err.msg, "a.journal"),
              "old journal %d: st %d: %s", k, st, err.msg);
        CHECK(fsize(p) == (long)strlen(old[k]), "old journal %d changed", k);
        n = reopen(p, "test", "k=1", 1, &g, &st, &err);
        CHECK(st == 0 && n == 0, "old journal %d with --force: st %d n %zu", k, st, n);
    }
    f = fopen(p, "wb");
    fputs("some other text\n", f);
    fclose(f);
    n = reopen(p, "test", "k=1", 0, &g, &st, &err);
    CHECK(st == QMLA_EMISMATCH, "a file that is no journal was taken: st %d", st);
    f = fopen(p, "wb");
    fclose(f);
    n = reopen(p, "test", "k=1", 0, &g, &st, &err);
    CHECK(st == 0 && n == 0 && fsize(p) > 0, "empty file: st %d size %ld", st, fsize(p));

    /* 7. fsync failure: the journal's descriptor made a pipe (fsync: EINVAL) */
    {
        qmla_jnl j;
        qmla_error_clear(&err);
        unlink(p);
        CHECK_OK(qmla_jnl_open(&j, p, "test", "k=1", 0, NULL, NULL, &n, &err), err);
        int fds[2];
        CHECK(pipe(fds) == 0, "pipe");
        fflush(j.f);
        dup2(fds[1], fileno(j.f));
        qmla_jnl_printf(&j, "1 a\n");
        st = qmla_jnl_commit(&j, &err);
        CHECK(st == QMLA_EIO && strstr(err.msg, "a.journal") && strstr(err.msg, "fsync"),
              "fsync failure: st %d: %s", st, err.msg);
        qmla_jnl_close(&j, 0);
        close(fds[0]);
        close(fds[1]);
    }

    /* 8. the read-only reader */
    write3(p);
    memset(&g, 0, sizeof g);
    g.cut_at = -1;
    f = fopen(p, "a");
    fputs("4 torn", f);
    fclose(f);
    qmla_error_clear(&err);
    st = qmla_jnl_read(p, "test", "k=1 x=0x1p-3", collect, &g, &n, &err);
    CHECK(st == 0 && n == 3, "read: st %d n %zu: %s", st, n, err.msg);
    CHECK(fsize(p) == whole + 6, "read changed the file: %ld", fsize(p));
    st = qmla_jnl_read(p, "test", "k=9", collect, &g, &n, &err);
    CHECK(st == QMLA_EMISMATCH, "read of another key: st %d", st);

    /* the helpers: escaped strings and exact reals */
    char esc[64], back[64];
    qmla_jnl_escape("a b%c\n", esc, sizeof esc);
    CHECK(!strcmp(esc, "a%20b%25c%0A"), "escape: %s", esc);
    CHECK(qmla_jnl_unescape(esc, back, sizeof back) == 0 && !strcmp(back, "a b%c\n"),
          "unescape: %s", back);
    /* every byte 1..255 escaped by hand with lowercase hex digits (%xx)
     * unescapes to itself: a..f are digits as A..F are (mutant 2587) */
    {
        char orig[256], lower[800], got[256];
        size_t o = 0;
        for (int c = 1; c < 256; c++) {
            orig[c - 1] = (char)c;
            o += (size_t)snprintf(lower + o, sizeof lower - o, "%%%02x", c);
        }
        orig[255] = '\0';
        CHECK(qmla_jnl_unescape(lower, got, sizeof got) == 0 && !memcmp(got, orig, 256),
              "lowercase %%xx escapes of bytes 1..255 do not unescape to those bytes");
        CHECK(qmla_jnl_unescape("%2f%af%Fa%fF", got, sizeof got) == 0 &&
              !strcmp(got, "/\xaf\xfa\xff"), "unescape of %%2f%%af%%Fa%%fF");
    }
    double v = 0;
    char hex[64];
    snprintf(hex, sizeof hex, "%a", 0.1);
    CHECK(qmla_jnl_real(hex, &v) == 0 && v == 0.1, "%%a round trip: %s -> %.17g", hex, v);
    CHECK(qmla_jnl_real("0x1p-3junk", &v) != 0, "a real with trailing junk accepted");
    /* engine marks: written when the engine changes, never replayed as
     * records, the kept records' engines collected in order */
    {
        const char *q = tmp("eng.journal");
        qmla_jnl j;
        unlink(q);
        CHECK_OK(qmla_jnl_open(&j, q, "test", "k", 0, NULL, NULL, NULL, &err), err);
        CHECK_OK(qmla_jnl_engine(&j, "cpu", "", &err), err);
        CHECK_OK(qmla_jnl_engine(&j, "cpu", "", &err), err); /* no second mark */
        qmla_jnl_printf(&j, "1 a\n");
        CHECK_OK(qmla_jnl_commit(&j, &err), err);
        CHECK(!strcmp(j.engines, "cpu"), "engines after one cpu record: \"%s\"", j.engines);
        qmla_jnl_close(&j, 0);
        memset(&g, 0, sizeof g);
        g.cut_at = -1;
        size_t nn = 0;
        CHECK_OK(qmla_jnl_open(&j, q, "test", "k", 0, collect, &g, &nn, &err), err);
        CHECK(nn == 1 && g.n == 1 && !strcmp(g.recs[0], "1 a\n"),
              "a mark is no record: replayed %zu (%zu)", nn, g.n);
        CHECK(!strcmp(j.engine, "cpu") && !strcmp(j.engines, "cpu"),
              "reopened: last mark \"%s\", engines \"%s\"", j.engine, j.engines);
        CHECK_OK(qmla_jnl_engine(&j, "cuda", "", &err), err);
        qmla_jnl_printf(&j, "2 b\n");
        CHECK_OK(qmla_jnl_commit(&j, &err), err);
        CHECK_OK(qmla_jnl_engine(&j, "cpu", "", &err), err); /* a mark with no record after it */
        qmla_jnl_close(&j, 0);
        char *txt = slurp(q);
        int marks = 0;
        for (const char *t = txt; t && (t = strstr(t, "@engine ")); t++)
            marks++;
        CHECK(marks == 3, "3 marks written (cpu, cuda, cpu), found %d", marks);
        free(txt);
        char eng[64];
        memset(&g, 0, sizeof g);
        g.cut_at = -1;
        CHECK_OK(qmla_jnl_read_engines(q, "test", "k", collect, &g, &nn, eng, sizeof eng, &err),
                 err);
        CHECK(nn == 2 && !strcmp(eng, "cpu+cuda"),
              "read: %zu records, engines \"%s\" (expected 2, \"cpu+cuda\")", nn, eng);
        CHECK_OK(qmla_jnl_open(&j, q, "test", "k", 0, NULL, NULL, NULL, &err), err);
        CHECK(!strcmp(j.engine, "cpu") && !strcmp(j.engines, "cpu+cuda"),
              "reopened: last mark \"%s\", engines \"%s\"", j.engine, j.engines);
        CHECK(qmla_jnl_engine(&j, "a+b", "", &err) == QMLA_EINTERNAL, "a '+' in an engine name");
        qmla_jnl_close(&j, 0);
        char set[16] = "";
        qmla_jnl_engines_add(set, sizeof set, "cuda+cpu");
        qmla_jnl_engines_add(set, sizeof set, "cpu");
        qmla_jnl_engines_add(set, sizeof set, "");
        qmla_jnl_engines_add(set, sizeof set, "cud");
        CHECK(!strcmp(set, "cuda+cpu+cud"), "engine set: \"%s\"", set);
        qmla_jnl_engines_add(set, sizeof set, "toolong");
        CHECK(!strcmp(set, "cuda+cpu+cud"), "a name that does not fit is left out: \"%s\"", set);
    }
    test_long_engine_set();
    test_engine_modes();
    test_long_device();
    return check_summary("test_journal");
}
