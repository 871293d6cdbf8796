/* tests/capture/test_reader.c — capture writer → reader round trips, malformed
 * captures, in-memory images, HDF5 quietness and handle hygiene, SHA-256.
 *
 * Round trips: float32 (bit-exact), float16 (bit-exact against a reference
 * round-to-nearest-even conversion), float64 and bfloat16 (custom HDF5 float)
 * written with the raw HDF5 API, gzip+shuffle. Malformed files are written
 * valid and then edited with the raw HDF5 API; each must fail with its
 * specific status and a message naming the file, the object and the
 * expected/found values.
 *
 * The writer's float16 is quant_core's converter bit for bit (every float16
 * value, every halfway point and its float32 neighbours; overflow refused);
 * the writer is atomic (nothing on disk before close, abort writes nothing,
 * an old file is replaced only by a complete capture, two writers at once).
 *
 * Run: meson test -C build test_reader   (files go to a fresh /tmp dir).
 */
#include "qmla/capture.h"
#include "qmla/quant_core.h"
#include "check.h"
#include "fixture.h"

#include <hdf5.h>

#include <dirent.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[256];

#define tpath(name) check_path(name)

/* ---- test data ------------------------------------------------------------ */

static qmla_capture_config make_cfg(void)
{
    qmla_capture_config c;
    memset(&c, 0, sizeof c);
    c.n_layers = 27;
    c.H = 2;
    c.D = 6;
    c.d_c = 8;
    c.d_n = 4;
    c.d_r = 4;
    c.d_v = 3;
    c.softmax_scale = 0.1352337788608801;
    c.rope_pairing = QMLA_ROPE_HALF;
    c.rms_norm_eps = 1e-6;
    snprintf(c.model, sizeof c.model, "deepseek-ai/DeepSeek-V2-Lite");
    snprintf(c.source, sizeof c.source, "test_reader (qmla %s)",
             qmla_version());
    c.has_check_tolerance = 1;
    c.check_tolerance = 1e-3;
    c.synthetic = 1;
    return c;
}

/* c with H = d_n = d_v = D = 1, d_r = 2 and d_c = n: w_uk holds n values */
static qmla_capture_config one_column_cfg(qmla_capture_config c, size_t n)
{
    c.H = 1;
    c.d_n = 1;
    c.d_v = 1;
    c.D = 1;
    c.d_r = 2;
    c.d_c = (int)n;
    return c;
}

static float val(int tag, size_t i)
{
    /* spread over several binades, both signs, some small values */
    double x = sin(0.731 * (double)i + 1.37 * tag) * (1.0 + (double)(i % 7));
    if (i % 11 == 3)
        x *= 1e-5;
    return (float)x;
}

static float *filled(size_t n, int tag)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = val(tag, i);
    return x;
}

static void make_layer(const qmla_capture_config *c, int index, qmla_layer *l)
{
    l->layer = index;
    l->w_uk = filled((size_t)c->H * c->d_n * c->d_c, 100 + index);
    l->w_uv = filled((size_t)c->H * c->d_v * c->d_c, 200 + index);
    l->w_o = filled((size_t)c->D * c->H * c->d_v, 300 + index);
    l->kv_norm = filled((size_t)c->d_c, 400 + index);
}

static void make_cell(const qmla_capture_config *c, const char *name,
                      size_t N, size_t T, int tag, int with_pre,
                      qmla_cell *x)
{
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    snprintf(x->dataset, sizeof x->dataset, "wikitext");
    x->seed = tag;
    x->N = N;
    x->T = T;
    const size_t H = (size_t)c->H;
    x->c_kv = filled(N * T * c->d_c, tag + 1);
    x->k_rope = filled(N * T * c->d_r, tag + 2);
    x->q_nope = filled(N * H * T * c->d_n, tag + 3);
    x->q_rope = filled(N * H * T * c->d_r, tag + 4);
    x->attn_out = filled(N * T * c->D, tag + 5);
    x->positions = malloc(N * T * sizeof *x->positions);
    for (size_t i = 0; i < N * T; i++)
        x->positions[i] = (int64_t)(i % T) + 1000 * (int64_t)(i / T);
    if (with_pre) {
        x->k_rope_pre = filled(N * T * c->d_r, tag + 6);
        x->q_rope_pre = filled(N * H * T * c->d_r, tag + 7);
        x->rope_cos = filled(N * T * c->d_r / 2, tag + 8);
        x->rope_sin = filled(N * T * c->d_r / 2, tag + 9);
    }
}

/* The standard test capture: layers 10 and 2 (written in that order), each
 * with cells "b-s1" (N=2, T=3, with the pre tensors) and "a-s0" (N=1, T=5). */
typedef struct fixture {
    qmla_capture_config cfg;
    qmla_layer L[2];
    qmla_cell C[2][2];
} fixture;

static const int fx_layers[2] = {10, 2};

static void fixture_init(fixture *f)
{
    f->cfg = make_cfg();
    for (int i = 0; i < 2; i++) {
        make_layer(&f->cfg, fx_layers[i], &f->L[i]);
        make_cell(&f->cfg, "b-s1", 2, 3, 10 * i + 1, 1, &f->C[i][0]);
        make_cell(&f->cfg, "a-s0", 1, 5, 10 * i + 2, 0, &f->C[i][1]);
    }
}

static void fixture_free(fixture *f)
{
    for (int i = 0; i < 2; i++) {
        qmla_layer_free(&f->L[i]);
        qmla_cell_free(&f->C[i][0]);
        qmla_cell_free(&f->C[i][1]);
    }
}

static int write_fixture(const fixture *f, const char *path, int float16,
                         int gzip)
{
    qmla_error err = {0};
    qmla_capture_writer *w = NULL;
    int st = qmla_capture_writer_open(path, &f->cfg, float16, gzip, &w, &err);
    CHECK_OK(st, err);
    for (int i = 0; i < 2 && !st; i++) {
        st = qmla_capture_writer_layer(w, &f->L[i], &err);
        CHECK_OK(st, err);
        for (int k = 0; k < 2 && !st; k++) {
            st = qmla_capture_writer_cell(w, f->L[i].layer, &f->C[i][k], &err);
            CHECK_OK(st, err);
        }
    }
    int st2 = qmla_capture_writer_close(w, &err);
    CHECK_OK(st2, err);
    return st ? st : st2;
}

/* ---- comparing ------------------------------------------------------------ */

typedef float (*xform_fn)(float);
static float ident(float x) { return x; }

static int same_f(const float *a, const float *b, size_t n, xform_fn t,
                  const char *what)
{
    for (size_t i = 0; i < n; i++) {
        float want = t(b[i]);
        if (memcmp(&a[i], &want, sizeof want) != 0) {
            CHECK(0, "%s[%zu]: read %.9g, expected %.9g (from %.9g)", what, i,
                  (double)a[i], (double)want, (double)b[i]);
            return 0;
        }
    }
    CHECK(n > 0, "%s: nothing compared", what); /* a fixture bug otherwise */
    return 1;
}

/* Open `path`, check config, layout and every tensor against the fixture
 * through transform t (identity for float32/64 storage). */
static void verify_fixture(const fixture *f, const char *path, xform_fn t)
{
    qmla_error err = {0};
    qmla_capture *c = NULL;
    int st = qmla_capture_open(path, &c, &err);
    CHECK_OK(st, err);
    if (st)
        return;
    const qmla_capture_config *k = qmla_capture_get_config(c);
    const qmla_capture_config *e = &f->cfg;
    CHECK(k->n_layers == e->n_layers && k->H == e->H && k->D == e->D &&
              k->d_c == e->d_c && k->d_n == e->d_n && k->d_r == e->d_r &&
              k->d_v == e->d_v, "config dims");
    CHECK(k->softmax_scale == e->softmax_scale, "softmax_scale %.17g",
          k->softmax_scale);
    CHECK(k->rms_norm_eps == e->rms_norm_eps, "rms_norm_eps");
    CHECK(k->rope_pairing == QMLA_ROPE_HALF, "rope_pairing");
    CHECK(strcmp(k->model, e->model) == 0, "model \"%s\"", k->model);
    CHECK(strcmp(k->source, e->source) == 0, "source \"%s\"", k->source);
    CHECK(k->has_check_tolerance && k->check_tolerance == 1e-3,
          "check_tolerance");
    CHECK(k->synthetic == 1, "synthetic");
    CHECK(strcmp(qmla_capture_path(c), path) == 0, "path");
    CHECK(qmla_capture_n_layers(c) == 2, "n_layers %zu",
          qmla_capture_n_layers(c));
    CHECK(qmla_capture_layer_index(c, 0) == 2 &&
              qmla_capture_layer_index(c, 1) == 10,
          "layers sorted numerically: %d, %d", qmla_capture_layer_index(c, 0),
          qmla_capture_layer_index(c, 1));
    size_t li = 99, ci = 99;
    CHECK(qmla_capture_find_layer(c, 10, &li) && li == 1, "find_layer 10");
    CHECK(!qmla_capture_find_layer(c, 3, NULL), "find_layer 3 absent");
    CHECK(qmla_capture_find_cell(c, 0, "b-s1", &ci) && ci == 1,
          "find_cell b-s1");
    CHECK(!qmla_capture_find_cell(c, 0, "zz", NULL), "find_cell absent");
    CHECK(qmla_capture_layer_index(c, 2) == -1, "layer_index out of range");
    CHECK(qmla_capture_cell_name(c, 0, 2) == NULL, "cell_name out of range");
    for (size_t l = 0; l < 2; l++) {
        int fi = qmla_capture_layer_index(c, l) == 10 ? 0 : 1;
        const qmla_layer *wl = &f->L[fi];
        qmla_layer L;
        st = qmla_capture_load_layer(c, l, &L, &err);
        CHECK_OK(st, err);
        if (!st) {
            const qmla_capture_config *q = k;
            CHECK(L.layer == wl->layer, "layer index");
            same_f(L.w_uk, wl->w_uk, (size_t)q->H * q->d_n * q->d_c, t, "w_uk");
            same_f(L.w_uv, wl->w_uv, (size_t)q->H * q->d_v * q->d_c, t, "w_uv");
            same_f(L.w_o, wl->w_o, (size_t)q->D * q->H * q->d_v, t, "w_o");
            same_f(L.kv_norm, wl->kv_norm, (size_t)q->d_c, t, "kv_norm");
        }
        qmla_layer_free(&L);
        CHECK(qmla_capture_n_cells(c, l) == 2, "n_cells");
        CHECK(strcmp(qmla_capture_cell_name(c, l, 0), "a-s0") == 0 &&
                  strcmp(qmla_capture_cell_name(c, l, 1), "b-s1") == 0,
              "cells sorted by name");
        CHECK(qmla_capture_cell_has_pre(c, l, 0) == 0 &&
                  qmla_capture_cell_has_pre(c, l, 1) == 1, "has_pre");
        CHECK(qmla_capture_cell_n(c, l, 1) == 2 &&
                  qmla_capture_cell_t(c, l, 1) == 3, "N, T of b-s1");
        for (size_t cc = 0; cc < 2; cc++) {
            const qmla_cell *wc = &f->C[fi][cc == 0 ? 1 : 0];
            qmla_cell x;
            st = qmla_capture_load_cell(c, l, cc, &x, &err);
            CHECK_OK(st, err);
            if (st)
                continue;
            const size_t N = x.N, T = x.T, H = (size_t)k->H;
            CHECK(N == wc->N && T == wc->T, "N, T");
            CHECK(strcmp(x.name, wc->name) == 0, "name %s", x.name);
            CHECK(strcmp(x.dataset, "wikitext") == 0 && x.seed == wc->seed,
                  "dataset/seed");
            same_f(x.c_kv, wc->c_kv, N * T * k->d_c, t, "c_kv");
            same_f(x.k_rope, wc->k_rope, N * T * k->d_r, t, "k_rope");
            same_f(x.q_nope, wc->q_nope, N * H * T * k->d_n, t, "q_nope");
            same_f(x.q_rope, wc->q_rope, N * H * T * k->d_r, t, "q_rope");
            same_f(x.attn_out, wc->attn_out, N * T * k->D, t, "attn_out");
            CHECK(memcmp(x.positions, wc->positions,
                         N * T * sizeof *x.positions) == 0, "positions");
            CHECK(!wc->k_rope_pre == !x.k_rope_pre && !wc->rope_cos ==
                      !x.rope_cos, "optional tensors presence");
            if (wc->k_rope_pre && x.k_rope_pre) {
                same_f(x.k_rope_pre, wc->k_rope_pre, N * T * k->d_r, t,
                       "k_rope_pre");
                same_f(x.q_rope_pre, wc->q_rope_pre, N * H * T * k->d_r, t,
                       "q_rope_pre");
                same_f(x.rope_cos, wc->rope_cos, N * T * k->d_r / 2, t,
                       "rope_cos");
                same_f(x.rope_sin, wc->rope_sin, N * T * k->d_r / 2, t,
                       "rope_sin");
            }
            qmla_cell_free(&x);
        }
    }
    qmla_capture_close(c);
}

/* ---- reference conversions -------------------------------------------------- */

/* float32 -> IEEE binary16 bits, round to nearest even */
static uint16_t f2h(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
    if (ax >= 0x477ff000u) /* rounds to 65536 or more */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below 2^-14: subnormal half */
        float af;
        memcpy(&af, &ax, 4);
        return (uint16_t)(sign | (uint32_t)nearbyintf(af * 16777216.0f));
    }
    uint32_t h = ((((ax >> 23) - 127 + 15)) << 10) | ((ax & 0x7fffffu) >> 13);
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

static float h2f(uint16_t h)
{
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    float v = e == 0    ? ldexpf((float)m, -24)
            : e == 31   ? (m ? NAN : INFINITY)
                        : ldexpf((float)(m | 0x400u), (int)e - 25);
    return (h & 0x8000u) ? -v : v;
}

static float f16_round(float x) { return h2f(f2h(x)); }

static float bf16_trunc(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* ---- raw HDF5 editing --------------------------------------------------------- */

static hid_t h5_f16(void)
{
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 10, 5, 0, 10);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 15);
    return t;
}

static hid_t h5_bf16(void)
{
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 7, 8, 0, 7);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 127);
    return t;
}

static hid_t edit_open(const char *path)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(f >= 0, "H5Fopen(%s) for editing", path);
    return f;
}

static void edit_close(hid_t f) { CHECK(H5Fclose(f) >= 0, "H5Fclose"); }

static void del_attr(hid_t f, const char *obj, const char *name)
{
    CHECK(H5Adelete_by_name(f, obj, name, H5P_DEFAULT) >= 0,
          "delete attribute %s of %s", name, obj);
}

static void set_attr(hid_t f, const char *obj, const char *name, hid_t ft,
                     hid_t mt, const void *val)
{
    if (H5Aexists_by_name(f, obj, name, H5P_DEFAULT) > 0)
        del_attr(f, obj, name);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate_by_name(f, obj, name, ft, sp, H5P_DEFAULT, H5P_DEFAULT,
                                H5P_DEFAULT);
    CHECK(a >= 0 && H5Awrite(a, mt, val) >= 0, "write attribute %s of %s",
          name, obj);
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(sp);
}

static void set_int(hid_t f, const char *obj, const char *name, hid_t ft,
                    long long v)
{
    set_attr(f, obj, name, ft, H5T_NATIVE_LLONG, &v);
}

static void set_dbl(hid_t f, const char *obj, const char *name, hid_t ft,
                    double v)
{
    set_attr(f, obj, name, ft, H5T_NATIVE_DOUBLE, &v);
}

/* fixed (vlen = 0; pad = strpad) or variable-length string */
static void set_str(hid_t f, const char *obj, const char *name, const char *v,
                    int vlen, H5T_str_t pad)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (vlen) {
        H5Tset_size(t, H5T_VARIABLE);
        H5Tset_cset(t, H5T_CSET_UTF8);
        set_attr(f, obj, name, t, t, &v);
    } else {
        char buf[256];
        size_t n = strlen(v), sz = n + 4;
        memset(buf, pad == H5T_STR_SPACEPAD ? ' ' : 0, sz);
        memcpy(buf, v, n);
        H5Tset_size(t, sz);
        H5Tset_strpad(t, pad);
        set_attr(f, obj, name, t, t, buf);
    }
    H5Tclose(t);
}

static void del_link(hid_t f, const char *path)
{
    CHECK(H5Ldelete(f, path, H5P_DEFAULT) >= 0, "delete %s", path);
}

/* Replace dataset `path` with one of type ft and shape dims, holding data
 * (memory type mt) or, when data is NULL, the old values converted (shapes
 * must then agree) or nothing (unwritten). `chunk` != NULL: chunked with
 * gzip. */
static void replace_ds(hid_t f, const char *path, hid_t ft, int rank,
                       const hsize_t *dims, hid_t mt, const void *data,
                       int keep_values, const hsize_t *chunk)
{
    double *old = NULL;
    if (keep_values) {
        hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
        hid_t sp = H5Dget_space(d);
        hssize_t n = H5Sget_simple_extent_npoints(sp);
        old = malloc((size_t)n * sizeof *old);
        CHECK(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                      old) >= 0, "read %s", path);
        H5Sclose(sp);
        H5Dclose(d);
        data = old;
        mt = H5T_NATIVE_DOUBLE;
    }
    del_link(f, path);
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (chunk) {
        H5Pset_chunk(dcpl, rank, chunk);
        H5Pset_shuffle(dcpl);
        H5Pset_deflate(dcpl, 6);
    }
    hid_t d = H5Dcreate2(f, path, ft, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    CHECK(d >= 0, "create %s", path);
    if (d >= 0 && data)
        CHECK(H5Dwrite(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0,
              "write %s", path);
    if (d >= 0)
        H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
    free(old);
}

static void get_dims(hid_t f, const char *path, int *rank, hsize_t *dims)
{
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
    hid_t sp = H5Dget_space(d);
    *rank = H5Sget_simple_extent_ndims(sp);
    H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    H5Dclose(d);
}

/* Convert every float dataset of the fixture file to type ft (values kept,
 * HDF5 converts from double). */
static const char *const layer_ds[] = {"w_uk", "w_uv", "w_o",
                                       "kv_norm_weight"};
static const char *const cell_ds[] = {"c_kv", "k_rope", "q_nope", "q_rope",
                                      "attn_out", "k_rope_pre", "q_rope_pre",
                                      "rope_cos", "rope_sin"};

typedef void (*ds_fn)(hid_t f, const char *path, void *ctx);

static void for_each_float_ds(hid_t f, ds_fn fn, void *ctx)
{
    char p[256];
    for (int i = 0; i < 2; i++) {
        for (int k = 0; k < 4; k++) {
            snprintf(p, sizeof p, "/layers/%d/%s", fx_layers[i], layer_ds[k]);
            fn(f, p, ctx);
        }
        for (int c = 0; c < 2; c++)
            for (int k = 0; k < 9; k++) {
                snprintf(p, sizeof p, "/layers/%d/cells/%s/%s", fx_layers[i],
                         c ? "a-s0" : "b-s1", cell_ds[k]);
                if (H5Lexists(f, p, H5P_DEFAULT) > 0)
                    fn(f, p, ctx);
            }
    }
}

static void to_f64(hid_t f, const char *path, void *ctx)
{
    (void)ctx;
    int rank;
    hsize_t dims[4];
    get_dims(f, path, &rank, dims);
    replace_ds(f, path, H5T_IEEE_F64BE, rank, dims, 0, NULL, 1, NULL);
}

/* bfloat16: write the truncated bits directly (no conversion on write) so
 * that the test checks HDF5's bf16 -> float32 conversion only. */
static void to_bf16(hid_t f, const char *path, void *ctx)
{
    (void)ctx;
    int rank;
    hsize_t dims[4];
    get_dims(f, path, &rank, dims);
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= (size_t)dims[i];
    float *x = malloc(n * sizeof *x);
    uint16_t *bits = malloc(n * sizeof *bits);
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
    H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x);
    H5Dclose(d);
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        bits[i] = (uint16_t)(u >> 16);
    }
    hid_t bt = h5_bf16();
    hsize_t chunk[4];
    for (int i = 0; i < rank; i++)
        chunk[i] = dims[i];
    replace_ds(f, path, bt, rank, dims, bt, bits, 0, chunk);
    H5Tclose(bt);
    free(x);
    free(bits);
}

/* ---- expectations --------------------------------------------------------------- */

/* The open must fail with `status`; the message must contain the file path
 * and each of the NULL-terminated substrings (plus "expected", "found"). */
static void expect_open_fail(const char *path, int status, ...)
{
    qmla_error err = {0};
    qmla_capture *c = (qmla_capture *)(uintptr_t)1;
    int st = qmla_capture_open(path, &c, &err);
    CHECK(st == status, "%s: status %s, expected %s (%s)", path,
          qmla_status_name(st), qmla_status_name(status), err.msg);
    CHECK(c == NULL, "*out is NULL after a failed open");
    CHECK(err.status == st, "err.status %d", err.status);
    CHECK(strstr(err.msg, path) != NULL, "message names the file: %s",
          err.msg);
    CHECK(strstr(err.msg, "expected") && strstr(err.msg, "found"),
          "message says expected/found: %s", err.msg);
    va_list ap;
    va_start(ap, status);
    const char *s;
    while ((s = va_arg(ap, const char *)))
        CHECK(strstr(err.msg, s) != NULL, "message contains \"%s\": %s", s,
              err.msg);
    va_end(ap);
    if (st == QMLA_OK)
        qmla_capture_close(c);
}

static void fresh(const fixture *fx, const char *path)
{
    write_fixture(fx, path, 0, 0);
}

/* ---- tests ------------------------------------------------------------------------- */

static void test_sha256(void)
{
    static const struct { const char *content; size_t reps; const char *hex; }
    vec[] = {
        {"", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"a", 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
    };
    for (size_t i = 0; i < sizeof vec / sizeof vec[0]; i++) {
        const char *p = tpath("sha.bin");
        FILE *f = fopen(p, "wb");
        for (size_t r = 0; r < vec[i].reps; r++)
            fputs(vec[i].content, f);
        fclose(f);
        char hex[65];
        qmla_error err = {0};
        int st = qmla_sha256_file(p, hex, &err);
        CHECK_OK(st, err);
        CHECK(strcmp(hex, vec[i].hex) == 0, "sha256 vector %zu: %s", i, hex);
    }
    char hex[65];
    qmla_error err = {0};
    int st = qmla_sha256_file(tpath("no-such-file"), hex, &err);
    CHECK(st == QMLA_ENOENT && strstr(err.msg, "no-such-file"),
          "sha256 of a missing file: %s", err.msg);
}

static void test_roundtrip_f32(const fixture *fx)
{
    const char *p = tpath("rt-f32.h5");
    CHECK(write_fixture(fx, p, 0, 0) == 0, "write f32");
    verify_fixture(fx, p, ident);
    /* storage type really is float32, positions int64 */
    hid_t f = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/layers/2/cells/a-s0/c_kv", H5P_DEFAULT);
    hid_t t = H5Dget_type(d);
    CHECK(H5Tequal(t, H5T_IEEE_F32LE) > 0, "c_kv stored as float32");
    H5Tclose(t);
    H5Dclose(d);
    d = H5Dopen2(f, "/layers/2/cells/a-s0/positions", H5P_DEFAULT);
    t = H5Dget_type(d);
    CHECK(H5Tequal(t, H5T_STD_I64LE) > 0, "positions stored as int64");
    H5Tclose(t);
    H5Dclose(d);
    H5Fclose(f);
}

static void test_roundtrip_f16(const fixture *fx)
{
    const char *p = tpath("rt-f16.h5");
    CHECK(write_fixture(fx, p, 1, 0) == 0, "write f16");
    verify_fixture(fx, p, f16_round);
    hid_t f = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/layers/10/w_uk", H5P_DEFAULT);
    hid_t t = H5Dget_type(d);
    size_t spos, epos, esize, mpos, msize;
    H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize);
    CHECK(H5Tget_class(t) == H5T_FLOAT && H5Tget_size(t) == 2 &&
              H5Tget_ebias(t) == 15 && spos == 15 && epos == 10 &&
              esize == 5 && mpos == 0 && msize == 10 &&
              H5Tget_order(t) == H5T_ORDER_LE,
          "float16 storage type is IEEE binary16 LE");
    hid_t ref = h5_f16();
    CHECK(H5Tequal(t, ref) > 0, "float16 type equals h5py's");
    H5Tclose(ref);
    H5Tclose(t);
    H5Dclose(d);
    H5Fclose(f);

    /* round to nearest even at ties, subnormals, the largest finite value */
    static const float probe[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f,
                                  0x1p-20f, 3 * 0x1p-26f, 65504.0f,
                                  65519.0f, -0x1.ffcp-15f, 0.0f, -0.0f};
    const size_t np = sizeof probe / sizeof probe[0];
    qmla_capture_config c1 = one_column_cfg(fx->cfg, np);
    qmla_layer L;
    make_layer(&c1, 0, &L);
    memcpy(L.w_uk, probe, sizeof probe);
    qmla_cell x;
    make_cell(&c1, "t", 1, 1, 0, 0, &x);
    qmla_error err = {0};
    qmla_capture_writer *w = NULL;
    const char *p2 = tpath("f16-probe.h5");
    int st = qmla_capture_writer_open(p2, &c1, 1, 0, &w, &err);
    CHECK_OK(st, err);
    if (!st) {
        CHECK_OK(qmla_capture_writer_layer(w, &L, &err), err);
        CHECK_OK(qmla_capture_writer_cell(w, 0, &x, &err), err);
        CHECK_OK(qmla_capture_writer_close(w, &err), err);
        qmla_capture *c = NULL;
        st = qmla_capture_open(p2, &c, &err);
        CHECK_OK(st, err);
        qmla_layer R;
        if (!st && !qmla_capture_load_layer(c, 0, &R, &err)) {
            for (size_t i = 0; i < np; i++)
                CHECK(memcmp(&R.w_uk[i], &(float){f16_round(probe[i])}, 4) == 0,
                      "float16 of %a: read %a, expected %a", (double)probe[i],
                      (double)R.w_uk[i], (double)f16_round(probe[i]));
            qmla_layer_free(&R);
        }
        qmla_capture_close(c);
        /* h5py sees float16 holding exactly numpy's rounding of the values,
         * and the fixed-length string attributes; the suite requires a
         * QMLA_PYTHON with h5py (set by meson), so its absence fails */
        const char *py = getenv("QMLA_PYTHON");
        char cmd[2048];
        CHECK(py && *py, "QMLA_PYTHON unset: the h5py check cannot run");
        if (py && *py) {
            snprintf(cmd, sizeof cmd, "'%s' -c 'import h5py' 2>/dev/null", py);
            if (system(cmd) == 0) {
                int k = snprintf(cmd, sizeof cmd,
                    "'%s' -c 'import sys, h5py, numpy as np\n"
                    "f = h5py.File(sys.argv[1], \"r\")\n"
                    "d = f[\"/layers/0/w_uk\"]\n"
                    "ref = np.array([float.fromhex(s) for s in sys.argv[2:]],"
                    " np.float32).astype(np.float16)\n"
                    "assert d.dtype == np.float16, d.dtype\n"
                    "assert (d[...].view(np.uint16) == ref.view(np.uint16))"
                    ".all(), (d[...], ref)\n"
                    "assert f.attrs[\"format\"] == b\"qmla-capture\"\n"
                    "assert f[\"config\"].attrs[\"rope_pairing\"] == "
                    "b\"half\"\n"
                    "assert f[\"/layers/0/cells/t/positions\"].dtype == "
                    "np.int64\n' '%s'", py, p2);
                for (size_t i = 0; i < np && k > 0 && (size_t)k < sizeof cmd; i++)
                    k += snprintf(cmd + k, sizeof cmd - (size_t)k, " %a",
                                  (double)probe[i]);
                CHECK(system(cmd) == 0, "h5py reads the float16 capture as "
                      "numpy would write it");
            } else {
                CHECK(0, "%s lacks h5py: the h5py check cannot run (apt-get "
                      "install python3-h5py)", py);
            }
        }
    }
    /* a finite value beyond float16 is refused, not stored as infinity */
    L.w_uk[0] = 70000.0f;
    st = qmla_capture_writer_open(tpath("f16-range.h5"), &c1, 1, 0, &w, &err);
    CHECK_OK(st, err);
    if (!st) {
        st = qmla_capture_writer_layer(w, &L, &err);
        CHECK(st == QMLA_ERANGE && strstr(err.msg, "w_uk") &&
                  strstr(err.msg, "70000"), "float16 range: %s", err.msg);
        qmla_capture_writer_close(w, &err);
    }
    qmla_layer_free(&L);
    qmla_cell_free(&x);
}

static void test_roundtrip_f64_bf16_gzip(const fixture *fx)
{
    const char *p = tpath("rt-f64.h5");
    write_fixture(fx, p, 0, 0);
    hid_t f = edit_open(p);
    for_each_float_ds(f, to_f64, NULL);
    edit_close(f);
    verify_fixture(fx, p, ident);

    p = tpath("rt-bf16.h5");
    write_fixture(fx, p, 0, 0);
    f = edit_open(p);
    for_each_float_ds(f, to_bf16, NULL);
    hid_t d = H5Dopen2(f, "/layers/2/cells/b-s1/q_rope", H5P_DEFAULT);
    hid_t t = H5Dget_type(d);
    CHECK(H5Tget_size(t) == 2 && H5Tget_class(t) == H5T_FLOAT,
          "bf16 stored in 2 bytes");
    H5Tclose(t);
    H5Dclose(d);
    edit_close(f);
    verify_fixture(fx, p, bf16_trunc);

    p = tpath("rt-gzip.h5");
    CHECK(write_fixture(fx, p, 0, 4) == 0, "write gzip");
    verify_fixture(fx, p, ident);
    f = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT);
    d = H5Dopen2(f, "/layers/10/cells/b-s1/q_nope", H5P_DEFAULT);
    hid_t dcpl = H5Dget_create_plist(d);
    int nf = H5Pget_nfilters(dcpl);
    unsigned fl, cd[8], conf;
    size_t ncd0 = 8, ncd1 = 8;
    char fname[32];
    CHECK(H5Pget_layout(dcpl) == H5D_CHUNKED && nf == 2 &&
              H5Pget_filter2(dcpl, 0, &fl, &ncd0, cd, sizeof fname, fname,
                             &conf) == H5Z_FILTER_SHUFFLE &&
              H5Pget_filter2(dcpl, 1, &fl, &ncd1, cd, sizeof fname, fname,
                             &conf) == H5Z_FILTER_DEFLATE && cd[0] == 4,
          "gzip: chunked, shuffle then deflate (%d filters)", nf);
    H5Pclose(dcpl);
    H5Dclose(d);
    H5Fclose(f);

    p = tpath("rt-f16-gzip.h5");
    CHECK(write_fixture(fx, p, 1, 9) == 0, "write f16 + gzip 9");
    verify_fixture(fx, p, f16_round);
}

/* Attribute types other than the writer's are accepted. */
static void test_accepted_variants(const fixture *fx)
{
    const char *p = tpath("variants.h5");
    fresh(fx, p);
    hid_t f = edit_open(p);
    set_str(f, "/", "format", "qmla-capture", 1, H5T_STR_NULLTERM);
    set_int(f, "/", "format_version", H5T_STD_U8LE, 1);
    set_str(f, "/", "model", "m-vlen", 1, H5T_STR_NULLTERM);
    set_str(f, "/", "source", "spacepad", 0, H5T_STR_SPACEPAD);
    set_dbl(f, "/", "check_tolerance", H5T_IEEE_F32BE, 0.25);
    { /* an h5py boolean: enum over int8 */
        hid_t e = H5Tenum_create(H5T_STD_I8LE);
        signed char no = 0, yes = 1;
        H5Tenum_insert(e, "FALSE", &no);
        H5Tenum_insert(e, "TRUE", &yes);
        set_attr(f, "/", "synthetic", e, e, &yes);
        H5Tclose(e);
    }
    set_int(f, "/config", "n_heads", H5T_STD_I64BE, fx->cfg.H);
    set_int(f, "/config", "d_model", H5T_STD_U16LE, fx->cfg.D);
    hid_t f16 = h5_f16();
    set_dbl(f, "/config", "softmax_scale", f16, 0.125);
    H5Tclose(f16);
    set_str(f, "/config", "rope_pairing", "interleaved", 0, H5T_STR_NULLPAD);
    set_int(f, "/config", "rms_norm_eps", H5T_STD_I32LE, 0);
    set_int(f, "/layers/2/cells/a-s0", "seed", H5T_STD_I64LE,
            -123456789012LL);
    /* positions as uint8, c_kv behind a soft link */
    int rank;
    hsize_t dims[4];
    get_dims(f, "/layers/2/cells/a-s0/positions", &rank, dims);
    replace_ds(f, "/layers/2/cells/a-s0/positions", H5T_STD_U8LE, rank, dims,
               0, NULL, 1, NULL);
    CHECK(H5Lmove(f, "/layers/2/cells/a-s0/c_kv", f, "/moved_c_kv",
                  H5P_DEFAULT, H5P_DEFAULT) >= 0, "move c_kv");
    CHECK(H5Lcreate_soft("/moved_c_kv", f, "/layers/2/cells/a-s0/c_kv",
                         H5P_DEFAULT, H5P_DEFAULT) >= 0, "soft link");
    edit_close(f);

    qmla_error err = {0};
    qmla_capture *c = NULL;
    int st = qmla_capture_open(p, &c, &err);
    CHECK_OK(st, err);
    if (st)
        return;
    const qmla_capture_config *k = qmla_capture_get_config(c);
    CHECK(strcmp(k->model, "m-vlen") == 0, "vlen model: %s", k->model);
    CHECK(strcmp(k->source, "spacepad") == 0, "space-padded source: \"%s\"",
          k->source);
    CHECK(k->check_tolerance == 0.25, "float32 BE check_tolerance");
    CHECK(k->synthetic == 1, "enum synthetic");
    CHECK(k->H == fx->cfg.H && k->D == fx->cfg.D, "int64 BE / uint16 dims");
    CHECK(k->softmax_scale == 0.125, "float16 softmax_scale");
    CHECK(k->rope_pairing == QMLA_ROPE_INTERLEAVED, "null-padded pairing");
    CHECK(k->rms_norm_eps == 0.0, "integer rms_norm_eps");
    qmla_cell x;
    st = qmla_capture_load_cell(c, 0, 0, &x, &err);
    CHECK_OK(st, err);
    if (!st) {
        CHECK(x.seed == -123456789012L, "int64 seed");
        CHECK(x.positions[4] == 4, "uint8 positions");
        CHECK(memcmp(x.c_kv, fx->C[1][1].c_kv, x.N * x.T * 8 * 4) == 0,
              "c_kv through a soft link");
        qmla_cell_free(&x);
    }
    qmla_capture_close(c);
}

static void test_malformed(const fixture *fx)
{
    const char *p;
    hid_t f;
    int rank;
    hsize_t dims[4];

    p = tpath("bad-format.h5");
    fresh(fx, p);
    f = edit_open(p);
    set_str(f, "/", "format", "hdf-thing", 0, H5T_STR_NULLTERM);
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, ": /: attribute format",
                     "\"qmla-capture\"", "\"hdf-thing\"", NULL);

    p = tpath("bad-version.h5");
    fresh(fx, p);
    f = edit_open(p);
    set_int(f, "/", "format_version", H5T_STD_I64LE, 2);
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "format_version", "expected 1, found 2",
                     NULL);

    p = tpath("missing-dataset.h5");
    fresh(fx, p);
    f = edit_open(p);
    del_link(f, "/layers/2/cells/a-s0/q_rope");
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "/layers/2/cells/a-s0/q_rope", "missing",
                     "[1, 2, 5, 4]", NULL);

    p = tpath("missing-attr.h5");
    fresh(fx, p);
    f = edit_open(p);
    del_attr(f, "/config", "softmax_scale");
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "/config", "attribute softmax_scale",
                     "found none", NULL);

    p = tpath("missing-model.h5");
    fresh(fx, p);
    f = edit_open(p);
    del_attr(f, "/", "model");
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "attribute model", NULL);

    p = tpath("shape.h5");
    fresh(fx, p);
    f = edit_open(p);
    dims[0] = 1, dims[1] = 2, dims[2] = 5, dims[3] = 2;
    replace_ds(f, "/layers/2/cells/a-s0/q_rope", H5T_IEEE_F32LE, 4, dims, 0,
               NULL, 0, NULL);
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "/layers/2/cells/a-s0/q_rope",
                     "expected shape [1, 2, 5, 4], found [1, 2, 5, 2]", NULL);

    p = tpath("n-mismatch.h5");
    fresh(fx, p);
    f = edit_open(p);
    dims[0] = 3, dims[1] = 3, dims[2] = 6;
    replace_ds(f, "/layers/10/cells/b-s1/attn_out", H5T_IEEE_F32LE, 3, dims, 0,
               NULL, 0, NULL);
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "/layers/10/cells/b-s1/attn_out",
                     "expected shape [2, 3, 6], found [3, 3, 6]", NULL);

    p = tpath("rank.h5");
    fresh(fx, p);
    f = edit_open(p);
    dims[0] = 2, dims[1] = 24;
    replace_ds(f, "/layers/10/cells/b-s1/c_kv", H5T_IEEE_F32LE, 2, dims, 0,
               NULL, 0, NULL);
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "/layers/10/cells/b-s1/c_kv",
                     "expected shape [N, T, 8], found [2, 24]", NULL);

    p = tpath("odd-dr.h5");
    fresh(fx, p);
    f = edit_open(p);
    set_int(f, "/config", "qk_rope_head_dim", H5T_STD_I32LE, 5);
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "/config", "qk_rope_head_dim",
                     "expected an even value, found 5", NULL);

    p = tpath("zero-dim.h5");
    fresh(fx, p);
    f = edit_open(p);
    set_int(f, "/config", "v_head_dim", H5T_STD_I32LE, 0);
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "v_head_dim", "found 0", NULL);

    p = tpath("pairing.h5");
    fresh(fx, p);
    f = edit_open(p);
    set_str(f, "/config", "rope_pairing", "diagonal", 1, H5T_STR_NULLTERM);
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "/config", "rope_pairing",
                     "\"interleaved\" or \"half\"", "\"diagonal\"", NULL);

    p = tpath("scale.h5");
    fresh(fx, p);
    f = edit_open(p);
    set_dbl(f, "/config", "softmax_scale", H5T_IEEE_F64LE, NAN);
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "softmax_scale", "finite", NULL);

    p = tpath("tolerance.h5");
    fresh(fx, p);
    f = edit_open(p);
    set_dbl(f, "/", "check_tolerance", H5T_IEEE_F32LE, -1.0);
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "check_tolerance", "found -1", NULL);

    /* Each documented rule of the root and /config attributes alone: one
     * defect per file (the fuzz regression inputs carry several at once). */
    static const struct {
        const char *file, *obj, *attr;
        double v;
        const char *want;
    } one_defect[] = {
        {"eps-negative.h5", "/config", "rms_norm_eps", -1e-6, "found -1e-06"},
        {"eps-inf.h5", "/config", "rms_norm_eps", INFINITY, "found inf"},
        {"scale-zero.h5", "/config", "softmax_scale", 0.0, "found 0"},
        {"scale-negative.h5", "/config", "softmax_scale", -0.125, "found -0.125"},
        {"scale-inf.h5", "/config", "softmax_scale", INFINITY, "found inf"},
        {"tolerance-zero.h5", "/", "check_tolerance", 0.0, "found 0"},
        {"tolerance-inf.h5", "/", "check_tolerance", INFINITY, "found inf"},
    };
    for (size_t k = 0; k < sizeof one_defect / sizeof one_defect[0]; k++) {
        p = tpath(one_defect[k].file);
        fresh(fx, p);
        f = edit_open(p);
        set_dbl(f, one_defect[k].obj, one_defect[k].attr, H5T_IEEE_F64LE, one_defect[k].v);
        edit_close(f);
        expect_open_fail(p, QMLA_EFORMAT, one_defect[k].attr, one_defect[k].want, NULL);
    }
    p = tpath("synthetic-2.h5");
    fresh(fx, p);
    f = edit_open(p);
    set_int(f, "/", "synthetic", H5T_STD_I32LE, 2);
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, ": /: attribute synthetic",
                     "expected 0 or 1, found 2", NULL);
    p = tpath("dim-2to31.h5");
    fresh(fx, p);
    f = edit_open(p);
    set_int(f, "/config", "n_heads", H5T_STD_I64LE, 2147483648LL);
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "attribute n_heads",
                     "expected a positive integer (at most 2147483647), found "
                     "2147483648", NULL);
    /* rms_norm_eps = 0 is allowed (docs/capture-format.md) */
    p = tpath("eps-zero.h5");
    fresh(fx, p);
    f = edit_open(p);
    set_dbl(f, "/config", "rms_norm_eps", H5T_IEEE_F64LE, 0.0);
    edit_close(f);
    {
        qmla_error e0 = {0};
        qmla_capture *c0 = NULL;
        CHECK(qmla_capture_open(p, &c0, &e0) == QMLA_OK, "rms_norm_eps = 0 refused: %s",
              e0.msg);
        qmla_capture_close(c0);
    }

    p = tpath("config-type.h5");
    fresh(fx, p);
    f = edit_open(p);
    set_dbl(f, "/config", "n_heads", H5T_IEEE_F64LE, 2.0);
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "attribute n_heads",
                     "expected an integer, found a float", NULL);

    p = tpath("int-tensor.h5");
    fresh(fx, p);
    f = edit_open(p);
    get_dims(f, "/layers/2/w_uv", &rank, dims);
    replace_ds(f, "/layers/2/w_uv", H5T_STD_I32LE, rank, dims, 0, NULL, 1,
               NULL);
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "/layers/2/w_uv",
                     "expected a float dataset, found an integer dataset",
                     NULL);

    p = tpath("float-positions.h5");
    fresh(fx, p);
    f = edit_open(p);
    get_dims(f, "/layers/2/cells/b-s1/positions", &rank, dims);
    replace_ds(f, "/layers/2/cells/b-s1/positions", H5T_IEEE_F32LE, rank, dims,
               0, NULL, 1, NULL);
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "/layers/2/cells/b-s1/positions",
                     "expected an integer dataset, found a float dataset",
                     NULL);

    p = tpath("layer-attr.h5");
    fresh(fx, p);
    f = edit_open(p);
    set_int(f, "/layers/2", "layer", H5T_STD_I32LE, 3);
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "/layers/2",
                     "attribute layer: expected 2, found 3", NULL);

    p = tpath("layer-name.h5");
    fresh(fx, p);
    f = edit_open(p);
    CHECK(H5Lmove(f, "/layers/2", f, "/layers/two", H5P_DEFAULT,
                  H5P_DEFAULT) >= 0, "rename layer");
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "/layers/two", "decimal layer index",
                     "\"two\"", NULL);

    p = tpath("layer-zero-pad.h5");
    fresh(fx, p);
    f = edit_open(p);
    CHECK(H5Lmove(f, "/layers/2", f, "/layers/02", H5P_DEFAULT,
                  H5P_DEFAULT) >= 0, "rename layer");
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "/layers/02", "leading zeros", NULL);

    p = tpath("no-layers.h5");
    {
        fixture g = *fx;
        qmla_error err = {0};
        qmla_capture_writer *w = NULL;
        CHECK_OK(qmla_capture_writer_open(p, &g.cfg, 0, 0, &w, &err), err);
        CHECK_OK(qmla_capture_writer_close(w, &err), err);
    }
    expect_open_fail(p, QMLA_EFORMAT, "/layers",
                     "expected at least one layer group, found none", NULL);

    p = tpath("empty-cells.h5");
    {
        qmla_error err = {0};
        qmla_capture_writer *w = NULL;
        CHECK_OK(qmla_capture_writer_open(p, &fx->cfg, 0, 0, &w, &err), err);
        CHECK_OK(qmla_capture_writer_layer(w, &fx->L[1], &err), err);
        CHECK_OK(qmla_capture_writer_close(w, &err), err);
    }
    expect_open_fail(p, QMLA_EFORMAT, "/layers/2/cells",
                     "expected at least one cell group, found none", NULL);

    p = tpath("no-config.h5");
    fresh(fx, p);
    f = edit_open(p);
    del_link(f, "/config");
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "/config", "expected a group",
                     "missing", NULL);

    p = tpath("group-not-dataset.h5");
    fresh(fx, p);
    f = edit_open(p);
    del_link(f, "/layers/10/cells/a-s0/k_rope");
    H5Gclose(H5Gcreate2(f, "/layers/10/cells/a-s0/k_rope", H5P_DEFAULT,
                        H5P_DEFAULT, H5P_DEFAULT));
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "/layers/10/cells/a-s0/k_rope",
                     "found a group", NULL);

    p = tpath("scalar.h5");
    fresh(fx, p);
    f = edit_open(p);
    del_link(f, "/layers/10/kv_norm_weight");
    {
        hid_t sp = H5Screate(H5S_SCALAR);
        H5Dclose(H5Dcreate2(f, "/layers/10/kv_norm_weight", H5T_IEEE_F32LE,
                            sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        H5Sclose(sp);
    }
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "/layers/10/kv_norm_weight",
                     "expected shape [8], found a scalar", NULL);

    p = tpath("half-pre-pair.h5");
    fresh(fx, p);
    f = edit_open(p);
    del_link(f, "/layers/2/cells/b-s1/k_rope_pre");
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "/layers/2/cells/b-s1",
                     "k_rope_pre and q_rope_pre together", NULL);

    p = tpath("cos-only.h5");
    fresh(fx, p);
    f = edit_open(p);
    {
        hid_t sp;
        dims[0] = 1, dims[1] = 5, dims[2] = 2;
        sp = H5Screate_simple(3, dims, NULL);
        H5Dclose(H5Dcreate2(f, "/layers/2/cells/a-s0/rope_cos", H5T_IEEE_F32LE,
                            sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        H5Dclose(H5Dcreate2(f, "/layers/2/cells/a-s0/rope_sin", H5T_IEEE_F32LE,
                            sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        H5Sclose(sp);
    }
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "/layers/2/cells/a-s0",
                     "rope_cos/rope_sin only with k_rope_pre", NULL);

    p = tpath("external-link.h5");
    fresh(fx, p);
    f = edit_open(p);
    del_link(f, "/layers/2/cells/a-s0/c_kv");
    CHECK(H5Lcreate_external("other.h5", "/c_kv", f,
                             "/layers/2/cells/a-s0/c_kv", H5P_DEFAULT,
                             H5P_DEFAULT) >= 0, "external link");
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "/layers/2/cells/a-s0/c_kv",
                     "found an external link", NULL);

    p = tpath("soft-to-external.h5");
    fresh(fx, p);
    f = edit_open(p);
    del_link(f, "/layers/2/cells/a-s0/c_kv");
    CHECK(H5Lcreate_external(tpath("rt-f32.h5"), "/layers/2/cells/a-s0/c_kv",
                             f, "/ext", H5P_DEFAULT, H5P_DEFAULT) >= 0,
          "external link to a real file");
    CHECK(H5Lcreate_soft("/ext", f, "/layers/2/cells/a-s0/c_kv", H5P_DEFAULT,
                         H5P_DEFAULT) >= 0, "soft link to it");
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "/layers/2/cells/a-s0/c_kv",
                     "cannot be opened", NULL);

    p = tpath("external-storage.h5");
    fresh(fx, p);
    f = edit_open(p);
    get_dims(f, "/layers/10/w_o", &rank, dims);
    del_link(f, "/layers/10/w_o");
    {
        hid_t sp = H5Screate_simple(rank, dims, NULL);
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_external(dcpl, "/etc/hostname", 0, H5F_UNLIMITED);
        H5Dclose(H5Dcreate2(f, "/layers/10/w_o", H5T_IEEE_F32LE, sp,
                            H5P_DEFAULT, dcpl, H5P_DEFAULT));
        H5Pclose(dcpl);
        H5Sclose(sp);
    }
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "/layers/10/w_o",
                     "found external raw data storage", NULL);

    p = tpath("long-cell-name.h5");
    fresh(fx, p);
    f = edit_open(p);
    {
        char longname[300] = "/layers/2/cells/";
        size_t k = strlen(longname);
        memset(longname + k, 'x', 200);
        longname[k + 200] = '\0';
        CHECK(H5Lmove(f, "/layers/2/cells/a-s0", f, longname, H5P_DEFAULT,
                      H5P_DEFAULT) >= 0, "rename cell");
    }
    edit_close(f);
    expect_open_fail(p, QMLA_EFORMAT, "at most 127 bytes, found 200", NULL);

    /* absurd sizes: refused from the shape, nothing is allocated (layer
     * "10" is validated first: links are visited in name order) */
    p = tpath("huge.h5");
    fresh(fx, p);
    f = edit_open(p);
    set_int(f, "/config", "n_heads", H5T_STD_I32LE, 1 << 20);
    set_int(f, "/config", "qk_nope_head_dim", H5T_STD_I32LE, 1 << 10);
    set_int(f, "/config", "kv_lora_rank", H5T_STD_I32LE, 1 << 20);
    {
        const hsize_t huge[3] = {1u << 20, 1u << 10, 1u << 20};
        const hsize_t ch[3] = {1, 1, 1024};
        del_link(f, "/layers/10/w_uk");
        hid_t sp = H5Screate_simple(3, huge, NULL);
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_chunk(dcpl, 3, ch);
        H5Dclose(H5Dcreate2(f, "/layers/10/w_uk", H5T_IEEE_F32LE, sp,
                            H5P_DEFAULT, dcpl, H5P_DEFAULT));
        H5Pclose(dcpl);
        H5Sclose(sp);
    }
    edit_close(f);
    expect_open_fail(p, QMLA_ERANGE, "/layers/10/w_uk", "2^40",
                     "[1048576, 1024, 1048576]", NULL);

    /* not HDF5, truncated, missing, a directory */
    p = tpath("text.h5");
    {
        FILE *t = fopen(p, "w");
        fputs("this is not an HDF5 file\n", t);
        fclose(t);
    }
    expect_open_fail(p, QMLA_EFORMAT, "not an HDF5 file", NULL);

    p = tpath("truncated.h5");
    fresh(fx, p);
    {
        struct stat sb;
        stat(p, &sb);
        CHECK(truncate(p, sb.st_size / 2) == 0, "truncate");
    }
    expect_open_fail(p, QMLA_EFORMAT, "truncated", NULL);

    p = tpath("no-such-file.h5");
    expect_open_fail(p, QMLA_ENOENT, "No such file", NULL);
    expect_open_fail(g_dir, QMLA_EIO, "a directory", NULL);

    /* non-finite values: open succeeds, the load names the index */
    p = tpath("nan.h5");
    {
        fixture g = *fx;
        qmla_cell bad = fx->C[1][0]; /* layer 2, "b-s1": N=2, T=3, d_c=8 */
        float *ckv = malloc(2 * 3 * 8 * sizeof *ckv);
        memcpy(ckv, bad.c_kv, 2 * 3 * 8 * sizeof *ckv);
        ckv[(1 * 3 + 2) * 8 + 5] = NAN; /* [1, 2, 5] */
        bad.c_kv = ckv;
        qmla_layer badl = fx->L[0];     /* layer 10 */
        float *kn = malloc(8 * sizeof *kn);
        memcpy(kn, badl.kv_norm, 8 * sizeof *kn);
        kn[6] = -INFINITY;
        badl.kv_norm = kn;
        qmla_error err = {0};
        qmla_capture_writer *w = NULL;
        CHECK_OK(qmla_capture_writer_open(p, &g.cfg, 0, 0, &w, &err), err);
        CHECK_OK(qmla_capture_writer_layer(w, &badl, &err), err);
        CHECK_OK(qmla_capture_writer_layer(w, &fx->L[1], &err), err);
        CHECK_OK(qmla_capture_writer_cell(w, 2, &bad, &err), err);
        CHECK_OK(qmla_capture_writer_cell(w, 10, &fx->C[0][0], &err), err);
        CHECK_OK(qmla_capture_writer_close(w, &err), err);
        free(ckv);
        free(kn);
        qmla_capture *c = NULL;
        int st = qmla_capture_open(p, &c, &err);
        CHECK_OK(st, err);
        if (!st) {
            qmla_cell x;
            st = qmla_capture_load_cell(c, 0, 0, &x, &err);
            CHECK(st == QMLA_ENONFINITE, "NaN in c_kv: %s",
                  qmla_status_name(st));
            CHECK(strstr(err.msg, p) && strstr(err.msg,
                  "/layers/2/cells/b-s1/c_kv") && strstr(err.msg, "nan") &&
                  strstr(err.msg, "[1, 2, 5]") && strstr(err.msg, "expected")
                  && strstr(err.msg, "found"), "NaN message: %s", err.msg);
            CHECK(x.c_kv == NULL && x.k_rope == NULL, "failed load frees");
            qmla_cell_free(&x);
            qmla_layer L;
            st = qmla_capture_load_layer(c, 1, &L, &err);
            CHECK(st == QMLA_ENONFINITE && strstr(err.msg, "kv_norm_weight")
                  && strstr(err.msg, "-inf at index [6]"),
                  "-inf in kv_norm_weight: %s", err.msg);
            qmla_layer_free(&L);
            st = qmla_capture_load_layer(c, 0, &L, &err);
            CHECK_OK(st, err);
            qmla_layer_free(&L);
            st = qmla_capture_load_cell(c, 1, 0, &x, &err);
            CHECK_OK(st, err);
            qmla_cell_free(&x);
            qmla_capture_close(c);
        }
    }

    /* float64 beyond float32 range: infinity after conversion, refused */
    p = tpath("f64-overflow.h5");
    fresh(fx, p);
    f = edit_open(p);
    {
        get_dims(f, "/layers/2/cells/a-s0/attn_out", &rank, dims);
        size_t n = (size_t)(dims[0] * dims[1] * dims[2]);
        double *x = calloc(n, sizeof *x);
        x[7] = 1e300;
        replace_ds(f, "/layers/2/cells/a-s0/attn_out", H5T_IEEE_F64LE, rank,
                   dims, H5T_NATIVE_DOUBLE, x, 0, NULL);
        free(x);
    }
    edit_close(f);
    {
        qmla_error err = {0};
        qmla_capture *c = NULL;
        int st = qmla_capture_open(p, &c, &err);
        CHECK_OK(st, err);
        qmla_cell x;
        st = c ? qmla_capture_load_cell(c, 0, 0, &x, &err) : -1;
        CHECK(st == QMLA_ENONFINITE && strstr(err.msg, "attn_out") &&
                  strstr(err.msg, "inf at index [0, 1, 1]"),
              "float64 overflow: %s", err.msg);
        qmla_capture_close(c);
    }
}

static void test_images(const fixture *fx)
{
    const char *p = tpath("rt-f32.h5");
    FILE *f = fopen(p, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n);
    CHECK(fread(buf, 1, (size_t)n, f) == (size_t)n, "read image");
    fclose(f);

    qmla_error err = {0};
    qmla_capture *a = NULL, *b = NULL;
    int st = qmla_capture_open_image(buf, (size_t)n, "mem-a", &a, &err);
    CHECK_OK(st, err);
    /* a second image of different content, open at the same time */
    unsigned char *buf2 = malloc((size_t)n);
    memcpy(buf2, buf, (size_t)n);
    st = qmla_capture_open_image(buf2, (size_t)n, "mem-b", &b, &err);
    CHECK_OK(st, err);
    memset(buf2, 0, (size_t)n); /* the reader copied it */
    free(buf2);
    if (a && b) {
        CHECK(strcmp(qmla_capture_path(a), "mem-a") == 0, "image label");
        CHECK(qmla_capture_n_layers(a) == 2 && qmla_capture_n_layers(b) == 2,
              "layers from images");
        qmla_cell x;
        st = qmla_capture_load_cell(b, 1, 1, &x, &err);
        CHECK_OK(st, err);
        if (!st) {
            same_f(x.q_rope, fx->C[0][0].q_rope,
                   x.N * x.T * (size_t)fx->cfg.H * fx->cfg.d_r, ident,
                   "q_rope from an image");
            qmla_cell_free(&x);
        }
    }
    qmla_capture_close(a);
    qmla_capture_close(b);

    st = qmla_capture_open_image("garbage!garbage!", 16, "mem-junk", &a, &err);
    CHECK(st == QMLA_EFORMAT && a == NULL && strstr(err.msg, "mem-junk") &&
              strstr(err.msg, "expected"), "junk image: %s", err.msg);
    st = qmla_capture_open_image(buf, (size_t)n / 3, "mem-cut", &a, &err);
    CHECK(st == QMLA_EFORMAT && a == NULL && strstr(err.msg, "mem-cut") &&
              strstr(err.msg, "truncated"), "truncated image: %s", err.msg);
    st = qmla_capture_open_image(NULL, 0, NULL, &a, &err);
    CHECK(st == QMLA_EFORMAT && a == NULL, "empty image: %s", err.msg);
    free(buf);
}

static void test_writer_errors(const fixture *fx)
{
    qmla_error err = {0};
    qmla_capture_writer *w = NULL;
    qmla_capture_config c = fx->cfg;
    c.d_r = 5;
    int st = qmla_capture_writer_open(tpath("w.h5"), &c, 0, 0, &w, &err);
    CHECK(st == QMLA_EINVAL && w == NULL &&
              strstr(err.msg, "qk_rope_head_dim"), "odd d_r: %s", err.msg);
    st = qmla_capture_writer_open(tpath("w.h5"), &fx->cfg, 0, 12, &w, &err);
    CHECK(st == QMLA_EINVAL && strstr(err.msg, "gzip"), "gzip 12: %s",
          err.msg);
    st = qmla_capture_writer_open("/nonexistent-dir/x.h5", &fx->cfg, 0, 0, &w,
                                  &err);
    CHECK(st == QMLA_EIO && strstr(err.msg, "/nonexistent-dir/x.h5"),
          "unwritable path: %s", err.msg);
    st = qmla_capture_writer_open(tpath("w.h5"), &fx->cfg, 0, 0, &w, &err);
    CHECK_OK(st, err);
    if (st)
        return;
    st = qmla_capture_writer_cell(w, 2, &fx->C[0][0], &err);
    CHECK(st == QMLA_EINVAL && strstr(err.msg, "/layers/2"),
          "cell before its layer: %s", err.msg);
    CHECK_OK(qmla_capture_writer_layer(w, &fx->L[1], &err), err);
    st = qmla_capture_writer_layer(w, &fx->L[1], &err);
    CHECK(st == QMLA_EINVAL && strstr(err.msg, "already"), "layer twice: %s",
          err.msg);
    qmla_cell x = fx->C[1][0];
    x.q_rope_pre = NULL;
    st = qmla_capture_writer_cell(w, 2, &x, &err);
    CHECK(st == QMLA_EINVAL, "half of the pre pair: %s", err.msg);
    x = fx->C[1][0];
    snprintf(x.name, sizeof x.name, "a/b");
    st = qmla_capture_writer_cell(w, 2, &x, &err);
    CHECK(st == QMLA_EINVAL && strstr(err.msg, "cell name"), "slash: %s",
          err.msg);
    x = fx->C[1][0];
    x.attn_out = NULL;
    st = qmla_capture_writer_cell(w, 2, &x, &err);
    CHECK(st == QMLA_EINVAL && strstr(err.msg, "NULL"), "NULL tensor: %s",
          err.msg);
    CHECK_OK(qmla_capture_writer_cell(w, 2, &fx->C[1][0], &err), err);
    st = qmla_capture_writer_cell(w, 2, &fx->C[1][0], &err);
    CHECK(st == QMLA_EINVAL && strstr(err.msg, "already"), "cell twice: %s",
          err.msg);
    CHECK_OK(qmla_capture_writer_close(w, &err), err);
}

/* Write `n` values as the float16 w_uk [1, 1, n] of a one-layer capture and
 * read the stored binary16 bits back without any conversion. 0, or the
 * writer's status (err set). */
static int write_f16_bits(const char *path, const float *x, size_t n,
                          uint16_t *bits, qmla_error *err)
{
    qmla_capture_config c = one_column_cfg(make_cfg(), n);
    qmla_layer L;
    make_layer(&c, 0, &L);
    memcpy(L.w_uk, x, n * sizeof *x);
    qmla_capture_writer *w = NULL;
    int st = qmla_capture_writer_open(path, &c, 1, 0, &w, err);
    if (!st && (st = qmla_capture_writer_layer(w, &L, err)))
        qmla_capture_writer_abort(w);
    else if (!st)
        st = qmla_capture_writer_close(w, err);
    qmla_layer_free(&L);
    if (st || !bits)
        return st;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/layers/0/w_uk", H5P_DEFAULT);
    hid_t ft = H5Dget_type(d);
    CHECK(H5Tget_size(ft) == 2, "float16 storage: 2 bytes");
    /* the file type as memory type: the raw bits, no conversion */
    CHECK(H5Dread(d, ft, H5S_ALL, H5S_ALL, H5P_DEFAULT, bits) >= 0,
          "read the float16 bits");
    H5Tclose(ft);
    H5Dclose(d);
    H5Fclose(f);
    return 0;
}

/* The writer's float16 is quant_core's qmla_core_f32_to_f16, bit for bit:
 * ties to even, carries into the exponent (also subnormal -> normal),
 * subnormals, the largest finite value, infinities and NaN; every value
 * that rounds to infinity is refused (QMLA_ERANGE). */
static void test_f16_is_quant_core(void)
{
    static const float edge[] = {
        1.0f + 0x1p-11f,      /* tie: to even (1.0) */
        1.0f + 3 * 0x1p-11f,  /* tie: to even (up) */
        2.0f - 0x1p-12f,      /* rounds up into the next binade: 2.0 */
        3.9998f,              /* carry into the exponent: 4.0 (HDF5: 2.0) */
        -0.99996f,            /* carry: -1.0 (HDF5: -0.5) */
        0x1.ffcp-15f,         /* subnormal tie -> smallest normal 2^-14 */
        0x1.ff8p-15f,         /* largest subnormal */
        0x1p-24f,             /* smallest subnormal */
        0x1p-25f,             /* tie with 0: to even (0) */
        0x1.000002p-25f,      /* just above: smallest subnormal */
        3 * 0x1p-25f,         /* subnormal tie: 1.5 ulp -> 2 ulp */
        3 * 0x1p-26f, 0x1p-20f, 0x1p-30f, -0x1p-30f,
        65504.0f,             /* largest finite */
        65519.996f,           /* just below the halfway point: 65504 */
        -65519.996f, 0.0f, -0.0f, 1e-8f, -1e-8f, 0.1f, 1.0f / 3.0f,
        INFINITY, -INFINITY, NAN,
    };
    const size_t ne = sizeof edge / sizeof edge[0];
    /* plus, over the whole positive and negative float16 range: every
     * representable value, every halfway point between neighbours and the
     * float32 values on either side of each halfway point */
    size_t n = ne + 2 * 4 * 0x7c00;
    float *x = malloc(n * sizeof *x);
    uint16_t *bits = malloc(n * sizeof *bits);
    memcpy(x, edge, sizeof edge);
    size_t k = ne;
    for (int sgn = 0; sgn < 2; sgn++)
        for (uint32_t h = 0; h < 0x7c00; h++) {
            float a = qmla_core_f16_to_f32((uint16_t)h);
            float b = h + 1 < 0x7c00 ? qmla_core_f16_to_f32((uint16_t)(h + 1))
                                     : 65519.996f; /* below the overflow tie */
            float m = h + 1 < 0x7c00 ? a + (b - a) / 2 : b;
            float v[4] = {a, m, nextafterf(m, 0.0f), nextafterf(m, INFINITY)};
            if (h + 1 >= 0x7c00)
                v[3] = m;
            for (int i = 0; i < 4; i++)
                x[k++] = sgn ? -v[i] : v[i];
        }
    CHECK(k == n, "probe count %zu", k);
    qmla_error err = {0};
    int st = write_f16_bits(tpath("f16-core.h5"), x, n, bits, &err);
    CHECK_OK(st, err);
    size_t bad = 0;
    for (size_t i = 0; !st && i < n; i++) {
        uint16_t want = qmla_core_f32_to_f16(x[i], NULL);
        int same = isnan(x[i]) ? (bits[i] & 0x7c00u) == 0x7c00u &&
                                     (bits[i] & 0x3ffu) &&
                                     bits[i] == want
                               : bits[i] == want;
        if (!same && bad++ < 5)
            CHECK(0, "float16 of %a: writer stored 0x%04x, quant_core gives "
                  "0x%04x", (double)x[i], bits[i], want);
        /* and the independent reference conversion agrees on finite values */
        if (!isnan(x[i]) && bits[i] != f2h(x[i]) && bad++ < 5)
            CHECK(0, "float16 of %a: writer stored 0x%04x, reference 0x%04x",
                  (double)x[i], bits[i], f2h(x[i]));
    }
    CHECK(bad == 0, "%zu of %zu float16 values differ from quant_core's", bad,
          n);
    /* spot checks of what the edge values must become */
    static const uint16_t expect[] = {0x3c00, 0x3c02, 0x4000, 0x4400, 0xbc00,
                                      0x0400, 0x03ff, 0x0001, 0x0000, 0x0001,
                                      0x0002};
    for (size_t i = 0; !st && i < sizeof expect / sizeof expect[0]; i++)
        CHECK(bits[i] == expect[i], "float16 of %a: 0x%04x, expected 0x%04x",
              (double)edge[i], bits[i], expect[i]);
    CHECK(!st && bits[15] == 0x7bff && bits[16] == 0x7bff &&
              bits[17] == 0xfbff && bits[ne - 3] == 0x7c00 &&
              bits[ne - 2] == 0xfc00,
          "largest finite, below the overflow tie, infinities");
    free(x);
    free(bits);

    /* overflow: refused before anything of the layer is written */
    static const float over[] = {65520.0f, -65520.0f, 65536.0f, 1e6f,
                                 -FLT_MAX};
    for (size_t i = 0; i < sizeof over / sizeof over[0]; i++) {
        float v[3] = {1.0f, over[i], 2.0f};
        int ovf = 0;
        (void)qmla_core_f32_to_f16(over[i], &ovf);
        CHECK(ovf == 1, "quant_core flags %g as overflow", (double)over[i]);
        const char *p = tpath("f16-over.h5");
        unlink(p);
        st = write_f16_bits(p, v, 3, NULL, &err);
        char want[64];
        snprintf(want, sizeof want, "found %g at element 1", (double)over[i]);
        CHECK(st == QMLA_ERANGE && strstr(err.msg, "w_uk") &&
                  strstr(err.msg, want),
              "float16 overflow of %g refused: %s", (double)over[i], err.msg);
        CHECK(access(p, F_OK) != 0, "nothing written for %g", (double)over[i]);
    }
}

/* No temporary file of `path` left in its directory. */
static int tmp_left(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[512], pre[256];
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    snprintf(pre, sizeof pre, "%s.tmp", slash + 1);
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strncmp(e->d_name, pre, strlen(pre)) == 0;
    if (d)
        closedir(d);
    return n;
}

/* The writer is atomic: nothing reaches the path before close; abort and a
 * failed close leave an existing file as it was; two writers at once. */
static void test_writer_atomic(const fixture *fx)
{
    qmla_error err = {0};
    const char *p = tpath("atomic.h5");
    FILE *o = fopen(p, "w");
    fputs("old contents\n", o);
    fclose(o);
    qmla_capture_writer *w = NULL, *w2 = NULL;
    int st = qmla_capture_writer_open(p, &fx->cfg, 0, 0, &w, &err);
    CHECK_OK(st, err);
    if (st)
        return;
    /* a second writer at the same time (the in-memory files are distinct) */
    const char *p2 = tpath("atomic2.h5");
    CHECK_OK(qmla_capture_writer_open(p2, &fx->cfg, 1, 3, &w2, &err), err);
    CHECK_OK(qmla_capture_writer_layer(w, &fx->L[1], &err), err);
    CHECK_OK(qmla_capture_writer_layer(w2, &fx->L[1], &err), err);
    CHECK_OK(qmla_capture_writer_cell(w, 2, &fx->C[1][0], &err), err);
    CHECK_OK(qmla_capture_writer_cell(w2, 2, &fx->C[1][0], &err), err);
    char buf[64] = {0};
    o = fopen(p, "r");
    CHECK(o && fgets(buf, sizeof buf, o) && strcmp(buf, "old contents\n") == 0,
          "the old file is untouched before close");
    if (o)
        fclose(o);
    CHECK(access(p2, F_OK) != 0 && tmp_left(p) == 0 && tmp_left(p2) == 0,
          "nothing on disk before close");
    qmla_capture_writer_abort(w2);
    CHECK(access(p2, F_OK) != 0 && tmp_left(p2) == 0, "abort writes nothing");
    CHECK_OK(qmla_capture_writer_close(w, &err), err);
    qmla_capture *c = NULL;
    st = qmla_capture_open(p, &c, &err);
    CHECK_OK(st, err);
    CHECK(!st && qmla_capture_n_layers(c) == 1 && qmla_capture_n_cells(c, 0) == 1,
          "the new capture replaced the old file");
    qmla_capture_close(c);
    CHECK(tmp_left(p) == 0, "no temporary left after close");

    /* a directory is never replaced, and is refused at open */
    const char *pd = tpath("a-directory.h5");
    mkdir(pd, 0755);
    st = qmla_capture_writer_open(pd, &fx->cfg, 0, 0, &w, &err);
    CHECK(st == QMLA_EIO && strstr(err.msg, pd) &&
              strstr(err.msg, "a directory"), "directory: %s", err.msg);
    rmdir(pd);
    /* a device is never replaced; an empty path is refused */
    st = qmla_capture_writer_open("/dev/null", &fx->cfg, 0, 0, &w, &err);
    CHECK(st == QMLA_EIO && strstr(err.msg, "/dev/null") &&
              strstr(err.msg, "a special file"), "device: %s", err.msg);
    st = qmla_capture_writer_open("", &fx->cfg, 0, 0, &w, &err);
    CHECK(st == QMLA_EINVAL && w == NULL, "empty path: %s", err.msg);
    /* the path vanishes between open and close: the save fails, naming it */
    char sub[512];
    snprintf(sub, sizeof sub, "%s", tpath("gone"));
    mkdir(sub, 0755);
    char pg[600];
    snprintf(pg, sizeof pg, "%s/x.h5", sub);
    st = qmla_capture_writer_open(pg, &fx->cfg, 0, 0, &w, &err);
    CHECK_OK(st, err);
    if (!st) {
        rmdir(sub);
        st = qmla_capture_writer_close(w, &err);
        CHECK(st == QMLA_EIO && strstr(err.msg, pg) &&
                  strstr(err.msg, "No such file or directory"),
              "directory removed before close: %s", err.msg);
    }
}

/* The library prints nothing through HDF5 and restores the caller's error
 * handler. */
static int g_handler_calls;
static herr_t my_handler(hid_t stack, void *data)
{
    (void)stack;
    (void)data;
    g_handler_calls++;
    return 0;
}

static void test_quiet(const fixture *fx)
{
    (void)fx;
    H5E_auto2_t old_fn;
    void *old_data;
    H5Eget_auto2(H5E_DEFAULT, &old_fn, &old_data);
    int sentinel;
    H5Eset_auto2(H5E_DEFAULT, my_handler, &sentinel);

    fflush(stderr);
    int saved = dup(2);
    const char *errpath = tpath("stderr.txt");
    int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
    const char *bad[] = {"truncated.h5", "missing-dataset.h5", "text.h5",
                         "external-link.h5", "int-tensor.h5", "huge.h5",
                         "no-such-file.h5"};
    qmla_error err = {0};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qmla_capture *c = NULL;
        qmla_capture_open(tpath(bad[i]), &c, &err);
        qmla_capture_close(c);
    }
    qmla_capture *c = NULL;
    qmla_capture_open_image("\x89HDF\r\n\x1a\n-----------", 19, "x", &c, &err);
    qmla_capture_writer *w = NULL;
    qmla_capture_writer_open("/nonexistent-dir/x.h5", &fx->cfg, 0, 0, &w,
                             &err);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    struct stat sb;
    CHECK(stat(errpath, &sb) == 0 && sb.st_size == 0,
          "nothing printed on stderr (%lld bytes, see %s)",
          (long long)sb.st_size, errpath);
    CHECK(g_handler_calls == 0, "caller's handler not called inside the "
          "library (%d calls)", g_handler_calls);
    H5E_auto2_t fn;
    void *data;
    H5Eget_auto2(H5E_DEFAULT, &fn, &data);
    CHECK(fn == my_handler && data == &sentinel,
          "caller's HDF5 error handler restored");
    H5Eset_auto2(H5E_DEFAULT, old_fn, old_data);
}

int main(void)
{
    if (!check_tmpdir(g_dir, sizeof g_dir, "reader"))
        return 1;
    fixture fx;
    fixture_init(&fx);
    test_sha256();
    test_roundtrip_f32(&fx);
    test_roundtrip_f16(&fx);
    test_roundtrip_f64_bf16_gzip(&fx);
    test_accepted_variants(&fx);
    test_malformed(&fx);
    test_images(&fx);
    test_writer_errors(&fx);
    test_f16_is_quant_core();
    test_writer_atomic(&fx);
    test_quiet(&fx);
    ssize_t left = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
    CHECK(left == 0, "%zd HDF5 files/objects left open", left);
    fixture_free(&fx);
    /* the folder goes at exit, also on failure (QMLA_KEEP_TMP=1 keeps it) */
    return check_summary("test_reader");
}
