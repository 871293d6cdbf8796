/* test_engine.c — the engine seam (qmla/engine.h): the sweep driver
 * (qmla_sweep_run) and the operator driver (qmla_op_run_points, `qmla jvp`
 * and `qmla predict`) and the interventions driver (qmla_intervene_run) run
 * with engine NULL, with qmla_engine_cpu() and with a test engine whose
 * tables wrap the CPU ones and count their calls. The results are identical
 * in all three (rows / points compared bit for bit), and the counting
 * engine's sequence was called once per item of the plan (layers x cells x
 * sequences), its workspace allocated and freed once: the driver goes
 * through the seam for every item. qmla_engine_find: "cpu" found, an
 * unknown name refused naming the engines of this build, "cuda" refused
 * in a build without it (and, in one with it, where no device is usable),
 * "auto" the CPU engine where no device engine is usable. */
#include "check.h"
#include "fixture.h"
#include "core/engine_int.h"
#include "qmla/capture.h"
#include "qmla/engine.h"
#include "qmla/intervene.h"
#include "qmla/learn.h"
#include "qmla/predict.h"
#include "qmla/results.h"
#include "qmla/sweep.h"
#include "qmla/synth.h"
#include "qmla/tfeval.h"
#include "qmla/tmethod.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[256];

#define tmp(name) check_path(name)

/* ---- the counting engine: the CPU tables, counted ---------------------- */

static size_t n_seq, n_alloc, n_free, n_layer;
static const qmla_sweep_ops *cpu_sweep;
static const qmla_op_ops *cpu_op;
static const qmla_iv_ops *cpu_iv;

static int c_sweep_alloc(const qmla_mla_dims *d, size_t T, int v, void **ws, qmla_error *e)
{
    n_alloc++;
    return cpu_sweep->ws_alloc(d, T, v, ws, e);
}
static void c_sweep_free(void *ws)
{
    n_free++;
    cpu_sweep->ws_free(ws);
}
static int c_sweep_seq(const qmla_exec *ex, const qmla_sweep_params *p, const qmla_mla_dims *d,
                       size_t T, const qmla_mla_weights *w, const float *qn, const float *qr,
                       const float *C, const float *K, int verify, void *ws,
                       qmla_response out[2], qmla_error *e)
{
    n_seq++;
    return cpu_sweep->sequence(ex, p, d, T, w, qn, qr, C, K, verify, ws, out, e);
}
static int c_op_alloc(const qmla_mla_dims *d, size_t T, int s, int th, void **ws, qmla_error *e)
{
    n_alloc++;
    return cpu_op->ws_alloc(d, T, s, th, ws, e);
}
static void c_op_free(void *ws)
{
    n_free++;
    cpu_op->ws_free(ws);
}
static int c_op_layer(const qmla_exec *ex, const qmla_mla_dims *d, const qmla_mla_weights *w,
                      void **L, qmla_error *e)
{
    n_layer++;
    return cpu_op->layer_alloc(ex, d, w, L, e);
}
static int c_op_seq(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                    const qmla_mla_weights *w, const void *L, const float *qn, const float *qr,
                    const float *C, const float *K, const qmla_op_config *conf, size_t nconf,
                    void *ws, qmla_op_point *pts, double *alloc, double *sigma, qmla_error *e)
{
    n_seq++;
    return cpu_op->sequence(ex, d, T, w, L, qn, qr, C, K, conf, nconf, ws, pts, alloc, sigma, e);
}
static int c_iv_alloc(const qmla_mla_dims *d, size_t T, int th, void **ws, qmla_error *e)
{
    n_alloc++;
    return cpu_iv->ws_alloc(d, T, th, ws, e);
}
static void c_iv_free(void *ws)
{
    n_free++;
    cpu_iv->ws_free(ws);
}
static int c_iv_seq(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                    const qmla_mla_weights *w, const float *qn, const float *qr, const float *C,
                    const float *K, const qmla_sweep_params *p, size_t reps, uint64_t seed,
                    void *ws, qmla_iv_item *out, double *ratio, qmla_error *e)
{
    n_seq++;
    return cpu_iv->sequence(ex, d, T, w, qn, qr, C, K, p, reps, seed, ws, out, ratio, e);
}

static qmla_sweep_ops count_sweep;
static qmla_op_ops count_op;
static qmla_iv_ops count_iv;
static struct qmla_engine counting;

static void make_counting(void)
{
    const qmla_engine *cpu = qmla_engine_cpu();
    cpu_sweep = qmla_engine_sweep(cpu);
    cpu_op = qmla_engine_op(cpu);
    cpu_iv = qmla_engine_iv(cpu);
    count_sweep = (qmla_sweep_ops){c_sweep_alloc, cpu_sweep->ws_bytes, c_sweep_free, c_sweep_seq,
                                   cpu_sweep->layer_begin};
    count_op = (qmla_op_ops){c_op_alloc, c_op_free, c_op_layer, cpu_op->layer_free, c_op_seq,
                             cpu_op->layer_begin};
    count_iv = (qmla_iv_ops){c_iv_alloc, c_iv_free, c_iv_seq, cpu_iv->layer_begin};
    counting = *cpu; /* every other table the CPU's */
    counting.name = "counting";
    counting.sweep = &count_sweep;
    counting.op = &count_op;
    counting.iv = &count_iv;
}

static void reset(void) { n_seq = n_alloc = n_free = n_layer = 0; }

/* The provenance attribute `engine` of group `group` of path (NULL: the
 * file's root) is `want`: the writer records the driver's engine. */
static int engine_is(const char *path, const char *group, const char *want)
{
    char got[64] = "(none)";
    const hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t o = f < 0 ? -1 : H5Oopen(f, group ? group : "/", H5P_DEFAULT);
    const hid_t a = o < 0 ? -1 : H5Aopen(o, "engine", H5P_DEFAULT);
    const hid_t t = a < 0 ? -1 : H5Aget_type(a);
    if (t >= 0 && H5Tget_class(t) == H5T_STRING) {
        if (H5Tis_variable_str(t) > 0) {
            char *v = NULL;
            if (H5Aread(a, t, &v) >= 0 && v) {
                snprintf(got, sizeof got, "%s", v);
                H5free_memory(v);
            }
        } else {
            const size_t n = H5Tget_size(t);
            char buf[64] = "";
            if (n < sizeof buf && H5Aread(a, t, buf) >= 0)
                snprintf(got, sizeof got, "%.*s", (int)n, buf);
        }
    }
    if (t >= 0)
        H5Tclose(t);
    if (a >= 0)
        H5Aclose(a);
    if (o >= 0)
        H5Oclose(o);
    if (f >= 0)
        H5Fclose(f);
    const int ok = !strcmp(got, want);
    if (!ok)
        fprintf(stderr, "%s%s%s: engine \"%s\", expected \"%s\"\n", path, group ? " /" : "",
                group ? group : "", got, want);
    return ok;
}

static const char *engine_want(int k) { return k == 2 ? "counting" : "cpu"; }

/* ---- the drivers under the three engines -------------------------------- */

static void test_sweep(qmla_capture *cap, size_t items)
{
    const qmla_engine *eng[3] = {NULL, qmla_engine_cpu(), &counting};
    qmla_response *rows[3] = {NULL, NULL, NULL};
    size_t n[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++) {
        char name[32];
        snprintf(name, sizeof name, "sweep%d.h5", k);
        qmla_sweep_opts o;
        memset(&o, 0, sizeof o);
        o.params = qmla_sweep_defaults();
        o.threads = 2;
        o.engine = eng[k];
        qmla_summary s;
        int stopped = 0;
        qmla_error err;
        qmla_error_clear(&err);
        reset();
        CHECK_OK(qmla_sweep_run(cap, NULL, &o, tmp(name), &s, &stopped, &err), err);
        if (!err.status)
            qmla_summary_free(&s);
        if (k == 2) {
            CHECK(n_seq == items, "sweep: the engine's sequence ran %zu times, expected "
                  "one per plan item (%zu)", n_seq, items);
            CHECK(n_alloc == 1 && n_free == 1, "sweep: workspace allocated %zu and freed %zu "
                  "times through the engine, expected 1 and 1", n_alloc, n_free);
        }
        qmla_results_meta m;
        CHECK_OK(qmla_results_read(tmp(name), &m, &rows[k], &n[k], &err), err);
        if (!err.status) {
            CHECK(!strcmp(m.engine, engine_want(k)), "sweep: meta engine \"%s\", expected "
                  "\"%s\"", m.engine, engine_want(k));
            qmla_results_meta_free(&m);
        }
        CHECK(engine_is(tmp(name), NULL, engine_want(k)),
              "sweep: the results file records the engine passed (engine %d)", k);
    }
    CHECK(n[0] == 2 * items, "sweep: %zu rows, expected %zu", n[0], 2 * items);
    for (int k = 1; k < 3; k++)
        CHECK(n[k] == n[0] && rows[k] && rows[0] &&
                  !memcmp(rows[k], rows[0], n[0] * sizeof *rows[0]),
              "sweep: the rows of engine %d are those of engine NULL bit for bit", k);
    for (int k = 0; k < 3; k++)
        free(rows[k]);
}

static void test_op(qmla_capture *cap, size_t items, size_t layers, int pred)
{
    const qmla_engine *eng[3] = {NULL, qmla_engine_cpu(), &counting};
    qmla_op_point *pts[3] = {NULL, NULL, NULL};
    size_t n[3] = {0, 0, 0};
    qmla_op_config conf[QMLA_OP_CONFIGS_MAX];
    size_t nconf = 0;
    const int bits[2] = {3, 4};
    qmla_op_configs(pred, bits, 2, 16, 1e-3, conf, &nconf);
    for (int k = 0; k < 3; k++) {
        char name[32];
        snprintf(name, sizeof name, "op%d_%d.h5", pred, k);
        qmla_op_opts o;
        memset(&o, 0, sizeof o);
        o.conf = conf;
        o.nconf = nconf;
        o.sensitivities = pred;
        o.threads = 2;
        o.engine = eng[k];
        qmla_sweep_selection sel = {NULL, 0, NULL, 0};
        qmla_op_stats st;
        int stopped = 0;
        qmla_error err;
        qmla_error_clear(&err);
        reset();
        CHECK_OK(qmla_op_run_points(cap, &sel, &o, tmp(name), &st, &pts[k], &n[k], &stopped,
                                    &err), err);
        if (k == 2) {
            CHECK(n_seq == items, "%s: the engine's sequence ran %zu times, expected %zu",
                  pred ? "predict" : "jvp", n_seq, items);
            CHECK(n_alloc == 1 && n_free == 1, "%s: workspace %zu/%zu, expected 1/1",
                  pred ? "predict" : "jvp", n_alloc, n_free);
            CHECK(n_layer == (pred ? layers : 0), "%s: layer constants made %zu times, "
                  "expected %zu", pred ? "predict" : "jvp", n_layer, pred ? layers : 0);
        }
        CHECK(engine_is(tmp(name), pred ? "predict" : "jvp", engine_want(k)),
              "%s: the group records the engine passed (engine %d)", pred ? "predict" : "jvp", k);
    }
    CHECK(n[0] == 2 * nconf * items, "op: %zu points, expected %zu", n[0], 2 * nconf * items);
    for (int k = 1; k < 3; k++)
        CHECK(n[k] == n[0] && pts[k] && pts[0] && !memcmp(pts[k], pts[0], n[0] * sizeof *pts[0]),
              "%s: the points of engine %d are those of engine NULL bit for bit",
              pred ? "predict" : "jvp", k);
    for (int k = 0; k < 3; k++)
        free(pts[k]);
}

static void test_iv(qmla_capture *cap, size_t items)
{
    const qmla_engine *eng[3] = {NULL, qmla_engine_cpu(), &counting};
    qmla_iv_stats s[3];
    for (int k = 0; k < 3; k++) {
        char name[32];
        snprintf(name, sizeof name, "iv%d.h5", k);
        qmla_iv_opts o;
        memset(&o, 0, sizeof o);
        o.params = qmla_sweep_defaults();
        o.params.nmse = 1e-3;
        o.reps = 4;
        o.seed = 1;
        o.bootstrap = 50;
        o.threads = 2;
        o.engine = eng[k];
        qmla_sweep_selection sel = {NULL, 0, NULL, 0};
        int stopped = 0;
        qmla_error err;
        qmla_error_clear(&err);
        reset();
        CHECK_OK(qmla_intervene_run(cap, &sel, &o, tmp(name), &s[k], &stopped, &err), err);
        if (k == 2)
            CHECK(n_seq == items && n_alloc == 1 && n_free == 1,
                  "intervene: sequence %zu (expected %zu), workspace %zu/%zu (expected 1/1)",
                  n_seq, items, n_alloc, n_free);
        CHECK(engine_is(tmp(name), "interventions", engine_want(k)),
              "intervene: the group records the engine passed (engine %d)", k);
    }
    for (int k = 1; k < 3; k++)
        CHECK(!memcmp(&s[k], &s[0], sizeof s[0]),
              "intervene: the statistics of engine %d are those of engine NULL bit for bit", k);
}

/* learn (RTN: no optimisation) and eval under the three engines: the
 * transforms file and group /eval record the engine passed. */
static void test_transform_engines(const char *capture_path)
{
    char capture[1024]; /* check_path's buffers rotate */
    snprintf(capture, sizeof capture, "%s", capture_path);
    const qmla_engine *eng[3] = {NULL, qmla_engine_cpu(), &counting};
    for (int k = 0; k < 3; k++) {
        char tf[32], ev[32];
        snprintf(tf, sizeof tf, "tf%d.h5", k);
        snprintf(ev, sizeof ev, "eval%d.h5", k);
        qmla_error err;
        qmla_error_clear(&err);
        qmla_learn_run_opts lo = qmla_learn_run_defaults();
        lo.method = qmla_tmethod_lookup("rtn");
        lo.learn.threads = 1;
        lo.engine = eng[k];
        qmla_learn_run_result lr;
        CHECK_OK(qmla_learn_run(capture, tmp(tf), &lo, &lr, &err), err);
        CHECK(engine_is(tmp(tf), NULL, engine_want(k)),
              "learn: the transforms file records the engine passed (engine %d)", k);
        const char *tfs[1] = {tmp(tf)};
        qmla_tf_eval_run_opts eo = qmla_tf_eval_run_defaults();
        eo.transforms = tfs;
        eo.n_transforms = 1;
        eo.config = "C4R4";
        eo.threads = 1;
        eo.engine = eng[k];
        qmla_tf_eval_run_result er;
        CHECK_OK(qmla_tf_eval_run(capture, tmp(ev), &eo, &er, &err), err);
        qmla_tf_eval_run_result_free(&er);
        CHECK(engine_is(tmp(ev), "eval", engine_want(k)),
              "eval: group /eval records the engine passed (engine %d)", k);
    }
}

static void test_find(void)
{
    const qmla_engine *e = NULL;
    qmla_error err;
    qmla_error_clear(&err);
    CHECK_OK(qmla_engine_find("cpu", &e, &err), err);
    CHECK(e == qmla_engine_cpu() && !strcmp(qmla_engine_name(e), "cpu") &&
              !strcmp(qmla_engine_name(NULL), "cpu"),
          "find: \"cpu\" is the CPU engine, and NULL names it");
    qmla_error_clear(&err);
    int st = qmla_engine_find("nope", &e, &err);
    CHECK(st == QMLA_EINVAL && e == NULL && strstr(err.msg, "\"nope\"") &&
              strstr(err.msg, qmla_engine_names()),
          "find: \"nope\" refused naming the engines this build has (%s)", err.msg);
    CHECK(qmla_engine_device(NULL) == NULL && qmla_engine_device(qmla_engine_cpu()) == NULL,
          "the CPU engine has no device");
    qmla_error_clear(&err);
    st = qmla_engine_find("cuda", &e, &err);
    if (!strcmp(qmla_engine_names(), "cpu"))
        CHECK(st == QMLA_EINVAL && e == NULL && strstr(err.msg, "\"cuda\"") &&
                  strstr(err.msg, "cpu"),
              "find: \"cuda\" refused naming the engines this build has (%s)", err.msg);
    else /* a CUDA build: found where a device is usable, else refused saying so */
        CHECK((st == QMLA_OK && e && !strcmp(qmla_engine_name(e), "cuda") &&
               qmla_engine_device(e)) ||
                  (st == QMLA_EINVAL && e == NULL && strstr(err.msg, "no usable device")),
              "find: \"cuda\" in a CUDA build (%d: %s)", st, err.msg);
    /* since run 11 find probes without a context; the full check is ready */
    const int have_dev = st == QMLA_OK && !qmla_engine_ready(e, &err);
    CHECK(qmla_engine_ready(NULL, &err) == QMLA_OK &&
              qmla_engine_ready(qmla_engine_cpu(), &err) == QMLA_OK,
          "ready: the CPU engine is always ready");
    qmla_error_clear(&err);
    CHECK_OK(qmla_engine_find("auto", &e, &err), err);
    CHECK(e && (have_dev ? !strcmp(qmla_engine_name(e), "cuda") : e == qmla_engine_cpu()),
          "find: \"auto\" is cuda where usable, else the CPU engine (%s)",
          e ? qmla_engine_name(e) : "NULL");
    CHECK(qmla_engine_sweep(NULL) == qmla_engine_sweep(qmla_engine_cpu()) &&
              qmla_engine_tfeval(NULL) && qmla_engine_learn(NULL) && qmla_engine_attn(NULL) &&
              qmla_engine_quant(NULL) && qmla_engine_jvp(NULL),
          "every accessor answers NULL with the CPU engine's table");
}

int main(void)
{
    qmla_blas_set_threads(1);
    if (!check_tmpdir(dir, sizeof dir, "engine"))
        return 1;
    make_counting();
    test_find();
    qmla_error err;
    qmla_error_clear(&err);
    qmla_capture *cap = NULL;
    CHECK_OK(check_synth_capture(tmp("cap.h5"), 7, 2, 2, 16, 2, &cap, &err), err);
    if (!cap)
        return check_summary("test_engine");
    const size_t items = 2 * 2 * 2; /* layers x cells x seqs */
    test_sweep(cap, items);
    test_op(cap, items, 2, 0);
    test_op(cap, items, 2, 1);
    test_iv(cap, items);
    test_transform_engines(tmp("cap.h5"));
    qmla_capture_close(cap);
    return check_summary("test_engine");
}
