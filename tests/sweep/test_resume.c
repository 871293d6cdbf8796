/* test_resume.c — the sweep survives interruption: a sweep stopped after k
 * items leaves no results file but a journal; rerunning resumes, computes
 * only the rest and writes results bit-identical to an uninterrupted run. A
 * torn journal line is dropped; a journal or results file of other
 * parameters is refused unless forced; a results file is extended by a
 * sweep over more layers. Every parameter of the resume key counts: a journal
 * or results file of another nu, group, metadata precision, bit width or
 * capture (same shape, other bytes) is refused. Uses synthetic captures
 * (qmla_synth_write); the temporary folder goes also when a check fails. */
#include "check.h"
#include "fixture.h"
#include "qmla/capture.h"
#include "qmla/results.h"
#include "qmla/sweep.h"
#include "qmla/synth.h"
#include "io/journal.h"

#include <inttypes.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

#define tmp(name) check_path(name)

static int exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

typedef struct {
    size_t stop_after, calls, computed, last_done, resumed;
} stopper;

static int stop_cb(void *ctx, size_t done, size_t total, size_t resumed)
{
    stopper *s = ctx;
    (void)total;
    if (s->calls++ == 0)
        s->resumed = resumed;
    else
        s->computed++;
    s->last_done = done;
    return s->stop_after && s->computed >= s->stop_after;
}

static int run_p(qmla_capture *cap, const char *out, const qmla_sweep_params *params,
                 const int *layers, size_t nl, size_t stop_after, int force,
                 stopper *sp, int *stopped, qmla_error *err)
{
    qmla_sweep_opts o;
    memset(&o, 0, sizeof o);
    o.params = *params;
    o.threads = 2;
    o.force = force;
    memset(sp, 0, sizeof *sp);
    sp->stop_after = stop_after;
    o.progress = stop_cb;
    o.progress_ctx = sp;
    qmla_sweep_selection sel = {layers, nl, NULL, 0};
    qmla_summary s;
    int st = qmla_sweep_run(cap, layers ? &sel : NULL, &o, out, &s, stopped, err);
    if (st == 0 && !*stopped)
        qmla_summary_free(&s);
    return st;
}

static int run(qmla_capture *cap, const char *out, int bits, const int *layers,
               size_t nl, size_t stop_after, int force, stopper *sp, int *stopped,
               qmla_error *err)
{
    qmla_sweep_params p = qmla_sweep_defaults();
    p.quant.bits = bits;
    return run_p(cap, out, &p, layers, nl, stop_after, force, sp, stopped, err);
}

/* Each parameter of the resume key: a partial journal and a complete
 * results file of the defaults are refused by a sweep that differs in that
 * one parameter (QMLA_EMISMATCH naming --force), and accepted by the same
 * parameters. */
static void test_key_parameters(qmla_capture *cap)
{
    stopper sp;
    int stopped = 0;
    qmla_error err;
    qmla_error_clear(&err);
    const qmla_sweep_params base = qmla_sweep_defaults();
    struct {
        const char *what;
        qmla_sweep_params p;
    } other[5];
    size_t n = 0;
    other[n].what = "nu 1e-3";
    other[n].p = base;
    other[n++].p.nmse = 1e-3;
    other[n].what = "nu 0.010000001";
    other[n].p = base;
    other[n++].p.nmse = 0.010000001;
    other[n].what = "group 16";
    other[n].p = base;
    other[n++].p.quant.group = 16;
    other[n].what = "meta f32";
    other[n].p = base;
    other[n++].p.quant.meta = QMLA_META_F32;
    other[n].what = "bits 3";
    other[n].p = base;
    other[n++].p.quant.bits = 3;
    /* the base journal (2 items) and results file */
    CHECK(run_p(cap, tmp("kj.h5"), &base, NULL, 0, 2, 0, &sp, &stopped, &err) == 0 &&
              stopped, "key: base partial run");
    CHECK_OK(run_p(cap, tmp("kr.h5"), &base, NULL, 0, 0, 0, &sp, &stopped, &err), err);
    for (size_t k = 0; k < n; k++) {
        int st = run_p(cap, tmp("kj.h5"), &other[k].p, NULL, 0, 0, 0, &sp, &stopped, &err);
        CHECK(st == QMLA_EMISMATCH && strstr(err.msg, "--force"),
              "journal of the defaults resumed with %s: st %d (%s)", other[k].what, st,
              err.msg);
        CHECK(exists(tmp("kj.h5.journal")) && !exists(tmp("kj.h5")),
              "refused journal (%s) kept, no results written", other[k].what);
        st = run_p(cap, tmp("kr.h5"), &other[k].p, NULL, 0, 0, 0, &sp, &stopped, &err);
        CHECK(st == QMLA_EMISMATCH && strstr(err.msg, "--force"),
              "results of the defaults extended with %s: st %d (%s)", other[k].what, st,
              err.msg);
    }
    /* the same parameters resume */
    CHECK_OK(run_p(cap, tmp("kj.h5"), &base, NULL, 0, 0, 0, &sp, &stopped, &err), err);
    CHECK(sp.resumed == 2, "key: base journal resumed %zu items (expected 2)", sp.resumed);
}

/* The same path holding another capture (other bytes, same shape and cell
 * names): its journal and results do not resume. */
static void test_key_capture(qmla_capture *cap)
{
    stopper sp;
    int stopped = 0;
    qmla_error err;
    qmla_error_clear(&err);
    CHECK(run(cap, tmp("cj.h5"), 4, NULL, 0, 2, 0, &sp, &stopped, &err) == 0 && stopped,
          "capture key: partial run");
    CHECK_OK(run(cap, tmp("cr.h5"), 4, NULL, 0, 0, 0, &sp, &stopped, &err), err);
    qmla_capture *c6 = NULL; /* seed 6: other numbers, same layout */
    CHECK_OK(check_synth_capture(tmp("cap6.h5"), 6, 2, 3, 40, 2, &c6, &err), err);
    if (!c6)
        return;
    int st = run(c6, tmp("cj.h5"), 4, NULL, 0, 0, 0, &sp, &stopped, &err);
    CHECK(st == QMLA_EMISMATCH, "journal of another capture resumed: st %d", st);
    st = run(c6, tmp("cr.h5"), 4, NULL, 0, 0, 0, &sp, &stopped, &err);
    CHECK(st == QMLA_EMISMATCH, "results of another capture extended: st %d", st);
    qmla_capture_close(c6);
}

static int same_results(const char *a, const char *b)
{
    qmla_results_meta ma, mb;
    qmla_response *ra = NULL, *rb = NULL;
    size_t na = 0, nb = 0;
    qmla_error err;
    int ok = qmla_results_read(a, &ma, &ra, &na, &err) == 0 &&
             qmla_results_read(b, &mb, &rb, &nb, &err) == 0 && na == nb && na > 0;
    for (size_t k = 0; ok && k < na; k++)
        ok = ra[k].layer == rb[k].layer && ra[k].seq == rb[k].seq &&
             ra[k].path == rb[k].path && !strcmp(ra[k].cell, rb[k].cell) &&
             ra[k].response == rb[k].response && ra[k].nmse_out == rb[k].nmse_out &&
             ra[k].nmse_out_matching == rb[k].nmse_out_matching &&
             ra[k].nmse_out_aggregation == rb[k].nmse_out_aggregation &&
             ra[k].nmse_out_interaction == rb[k].nmse_out_interaction &&
             ra[k].degenerate == rb[k].degenerate;
    free(ra);
    free(rb);
    return ok;
}

/* The journal's engine mark "@engine FROM" rewritten to "@engine TO" with
 * its record trailer recomputed: the journal of an interrupted run by
 * engine TO (this build may have only the CPU engine). 1 when done. */
static int remark_engine(const char *path, const char *from, const char *to)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    static char buf[1 << 20], out[1 << 20];
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char want[64], rec[64];
    snprintf(want, sizeof want, "\n@engine %s\n#", from);
    char *m = strstr(buf, want);
    if (!m)
        return 0;
    char *tail = strchr(m + strlen(want), '\n'); /* end of the old trailer */
    if (!tail)
        return 0;
    snprintf(rec, sizeof rec, "@engine %s\n", to);
    const uint64_t h = qmla_jnl_fnv1a(rec, strlen(rec), QMLA_JNL_FNV_INIT);
    int u = snprintf(out, sizeof out, "%.*s\n%s#%016" PRIx64 " %zu%s", (int)(m - buf), buf, rec,
                     h, strlen(rec), tail);
    f = fopen(path, "wb");
    if (!f)
        return 0;
    const int ok = fwrite(out, 1, (size_t)u, f) == (size_t)u;
    fclose(f);
    return ok;
}

/* A resume across engines: the journal of an interrupted run by one engine
 * resumed by another (the resume key has no engine). The results file's
 * engine names both ("cuda+cpu"), so a merge refuses it beside one engine's
 * parts; resuming with the journal's own engine keeps one name. */
static void test_engine_marks(qmla_capture *cap)
{
    stopper sp;
    int stopped = 0;
    qmla_error err;
    qmla_error_clear(&err);
    int st = run(cap, tmp("eng.h5"), 4, NULL, 0, 3, 0, &sp, &stopped, &err);
    CHECK(st == 0 && stopped, "engine marks: partial run (st %d, stopped %d)", st, stopped);
    CHECK(remark_engine(tmp("eng.h5.journal"), "cpu", "cuda"),
          "engine marks: the journal has the mark \"@engine cpu\"");
    st = run(cap, tmp("eng.h5"), 4, NULL, 0, 0, 0, &sp, &stopped, &err);
    CHECK_OK(st, err);
    CHECK(sp.resumed == 3, "engine marks: resumed %zu of 3 (the mark is no item)", sp.resumed);
    qmla_results_meta m;
    qmla_response *r = NULL;
    size_t n = 0;
    CHECK_OK(qmla_results_read(tmp("eng.h5"), &m, &r, &n, &err), err);
    CHECK(!strcmp(m.engine, "cuda+cpu"), "engine marks: engine \"%s\", expected \"cuda+cpu\"",
          m.engine);
    qmla_results_meta_free(&m);
    free(r);
    CHECK(same_results(tmp("full.h5"), tmp("eng.h5")), "engine marks: rows differ");
    /* a rerun over that complete file computes nothing and keeps both names */
    st = run(cap, tmp("eng.h5"), 4, NULL, 0, 0, 0, &sp, &stopped, &err);
    CHECK_OK(st, err);
    r = NULL;
    CHECK_OK(qmla_results_read(tmp("eng.h5"), &m, &r, &n, &err), err);
    CHECK(sp.computed == 0 && !strcmp(m.engine, "cuda+cpu"),
          "engine marks: rerun computed %zu, engine \"%s\"", sp.computed, m.engine);
    qmla_results_meta_free(&m);
    free(r);
    /* one engine throughout: one name */
    unlink(tmp("eng1.h5"));
    st = run(cap, tmp("eng1.h5"), 4, NULL, 0, 3, 0, &sp, &stopped, &err);
    st = st ? st : run(cap, tmp("eng1.h5"), 4, NULL, 0, 0, 0, &sp, &stopped, &err);
    CHECK_OK(st, err);
    r = NULL;
    CHECK_OK(qmla_results_read(tmp("eng1.h5"), &m, &r, &n, &err), err);
    CHECK(!strcmp(m.engine, "cpu"), "engine marks: one engine: \"%s\"", m.engine);
    qmla_results_meta_free(&m);
    free(r);
}

int main(void)
{
    qmla_blas_set_threads(1); /* as the qmla program does */
    if (!check_tmpdir(dir, sizeof dir, "resume"))
        return 1;
    qmla_error err;
    qmla_error_clear(&err);
    qmla_capture *cap = NULL;
    CHECK_OK(check_synth_capture(tmp("cap.h5"), 5, 2, 3, 40, 2, &cap, &err), err);
    if (!cap)
        return check_summary("test_resume");
    stopper sp;
    int stopped = 0;
    const size_t total = 2 * 2 * 3; /* layers x cells x seqs */

    /* reference: uninterrupted */
    CHECK_OK(run(cap, tmp("full.h5"), 4, NULL, 0, 0, 0, &sp, &stopped, &err), err);
    CHECK(!stopped && sp.computed == total, "full run computed %zu of %zu", sp.computed,
          total);
    CHECK(!exists(tmp("full.h5.journal")), "journal removed after success");

    /* interrupted after 5 items: no results file, journal kept */
    int st = run(cap, tmp("part.h5"), 4, NULL, 0, 5, 0, &sp, &stopped, &err);
    CHECK(st == 0 && stopped, "stopped run: st %d stopped %d", st, stopped);
    CHECK(!exists(tmp("part.h5")), "no results file after interruption");
    CHECK(exists(tmp("part.h5.journal")), "journal kept after interruption");

    /* tear the journal's last line as a crash mid-write would */
    FILE *f = fopen(tmp("part.h5.journal"), "a");
    fputs("R 1 synth-s1 2 content 0x1.8p-1 0x1", f);
    fclose(f);

    st = run(cap, tmp("part.h5"), 4, NULL, 0, 0, 0, &sp, &stopped, &err);
    CHECK_OK(st, err);
    CHECK(sp.resumed == 5, "resumed %zu items from the journal (expected 5)", sp.resumed);
    CHECK(sp.computed == total - 5, "computed %zu after resume (expected %zu)",
          sp.computed, total - 5);
    CHECK(same_results(tmp("full.h5"), tmp("part.h5")),
          "resumed results differ from the uninterrupted run");
    CHECK(!exists(tmp("part.h5.journal")), "journal removed after resume");

    test_engine_marks(cap);

    /* rerun of a complete sweep: nothing recomputed, file rewritten equal */
    st = run(cap, tmp("part.h5"), 4, NULL, 0, 0, 0, &sp, &stopped, &err);
    CHECK_OK(st, err);
    CHECK(sp.computed == 0 && sp.resumed == total, "complete rerun computed %zu", sp.computed);
    CHECK(same_results(tmp("full.h5"), tmp("part.h5")), "rerun changed results");

    /* other parameters: refused, then forced */
    st = run(cap, tmp("part.h5"), 8, NULL, 0, 0, 0, &sp, &stopped, &err);
    CHECK(st == QMLA_EMISMATCH, "other bits over existing results: st %d", st);
    CHECK(strstr(err.msg, "--force") != NULL, "message suggests --force: %s", err.msg);
    st = run(cap, tmp("j8.h5"), 8, NULL, 0, 2, 0, &sp, &stopped, &err);
    CHECK(st == 0 && stopped, "bits 8 partial");
    st = run(cap, tmp("j8.h5"), 4, NULL, 0, 0, 0, &sp, &stopped, &err);
    CHECK(st == QMLA_EMISMATCH, "journal of bits 8 resumed with bits 4: st %d", st);
    st = run(cap, tmp("j8.h5"), 4, NULL, 0, 0, 1, &sp, &stopped, &err);
    CHECK(st == 0 && sp.resumed == 0 && sp.computed == total,
          "forced: st %d resumed %zu", st, sp.resumed);
    CHECK(same_results(tmp("full.h5"), tmp("j8.h5")), "forced run results");

    /* extend: layer 0 first, then 0-1 */
    int l0[] = {0}, l01[] = {0, 1};
    CHECK_OK(run(cap, tmp("ext.h5"), 4, l0, 1, 0, 0, &sp, &stopped, &err), err);
    CHECK(sp.computed == total / 2, "layer 0 only: %zu", sp.computed);
    CHECK_OK(run(cap, tmp("ext.h5"), 4, l01, 2, 0, 0, &sp, &stopped, &err), err);
    CHECK(sp.resumed == total / 2 && sp.computed == total / 2,
          "extension resumed %zu computed %zu", sp.resumed, sp.computed);
    CHECK(same_results(tmp("full.h5"), tmp("ext.h5")), "extended results");

    /* a layer that is not in the capture */
    int l9[] = {9};
    st = run(cap, tmp("bad.h5"), 4, l9, 1, 0, 0, &sp, &stopped, &err);
    CHECK(st == QMLA_EINVAL && strstr(err.msg, "layer 9"), "missing layer: %s", err.msg);
    CHECK(!exists(tmp("bad.h5")), "no results for a bad selection");

    test_key_parameters(cap);
    test_key_capture(cap);
    qmla_capture_close(cap);
    return check_summary("test_resume");
}
