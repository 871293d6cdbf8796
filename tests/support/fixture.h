/* tests/support/fixture.h — test data several C tests share: a synthetic
 * capture of the tiny shape written and opened, and file paths inside the
 * test's private folder (check_tmpdir, check.h). */
#ifndef QMLA_TESTS_FIXTURE_H
#define QMLA_TESTS_FIXTURE_H
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "qmla/capture.h"
#include "qmla/synth.h"

/* `name` inside the folder check_tmpdir made (one of 8 rotating buffers). */
static inline const char *check_path(const char *name)
{
    static char buf[8][1024];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", check_tmpdir_, name);
    return buf[k];
}

/* A synthetic capture of the tiny shape (one thread) written to path and
 * opened into *cap; the status of the first call that failed (err set). */
static inline int check_synth_capture(const char *path, unsigned long seed, int n_layers,
                                      int seqs, int tokens, int cells,
                                      qmla_capture **cap, qmla_error *err)
{
    qmla_synth_opts so;
    memset(&so, 0, sizeof so);
    so.shape = qmla_shape_find("tiny");
    so.seed = seed;
    so.n_layers = n_layers;
    so.seqs = seqs;
    so.tokens = tokens;
    so.cells = cells;
    so.threads = 1;
    *cap = NULL;
    int st = qmla_synth_write(path, &so, err);
    if (!st)
        st = qmla_capture_open(path, cap, err);
    return st;
}
#endif
