/* capture_read.c — reader of qmla-capture v1 files (docs/capture-format.md).
 *
 * qmla_capture_open / qmla_capture_open_image validate the whole structure up
 * front — root attributes, /config, every /layers/<i> group and every cell:
 * presence, link kind, object kind, type class, rank and shape of every
 * dataset, attribute types and values, element-count limits — without reading
 * a tensor. qmla_capture_load_layer / qmla_capture_load_cell then read and
 * convert the float datasets to float32 (HDF5's own conversion: float16,
 * bfloat16 and other custom floats, float64 all work) and reject non-finite
 * values, naming the first bad index.
 *
 * Every message has the form "<file or image label>: <object path>: expected
 * <what>, found <what>"; docs/capture-format.md lists every rejection.
 *
 * HDF5 never prints from here: each public entry point disables the automatic
 * error stack printing and restores the caller's handler before returning.
 * Links are followed only inside the file (external links are refused, also
 * behind a soft link), and datasets whose raw data lives outside the file
 * (external storage, virtual datasets) are refused, so a crafted capture
 * cannot make the reader open other files.
 *
 * Which datasets a layer and a cell hold, their shapes and which are optional
 * come from the capture table (capture_table.c), shared with the writer; the
 * checked readers (links, attributes, dataset checks and reads, with their
 * expected/found messages) are the generic ones of h5util.c.
 *
 * Tests: tests/capture/test_reader.c; fuzzing: fuzz/fuzz_capture.c (fuzz/run.sh).
 */
#include "qmla/capture.h"
#include "capture/capture_table.h"
#include "io/h5util.h"

#include <hdf5.h>

#include <errno.h>
#include <float.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(QMLA_CAPTURE_MAX_ELEMS == QMLA_H5_MAX_ELEMS,
               "the capture's element limit is h5util's");

/* ---- internal model of a validated file --------------------------------- */

typedef struct cell_info {
    char *name;         /* link name under cells/ (< 128 bytes) */
    char dataset[128];  /* attribute `dataset` */
    long seed;          /* attribute `seed` */
    size_t N, T;
    int has_pre;        /* k_rope_pre and q_rope_pre */
    int has_cossin;     /* rope_cos and rope_sin (implies has_pre) */
    int has_hidden;     /* hidden_in */
} cell_info;

typedef struct layer_info {
    int index;          /* decimal name == attribute `layer` */
    char *name;
    size_t n_cells;
    cell_info *cells;   /* sorted by name */
} layer_info;

struct qmla_capture {
    hid_t file;
    hid_t lapl;         /* link access: external links refused */
    char *label;        /* path or image label, for messages */
    qmla_capture_config cfg;
    size_t n_layers;
    layer_info *layers; /* sorted by index */
};


/* ---- validation ---------------------------------------------------------- */

static int cfg_int(const qmla_h5_ctx *v, hid_t g, const char *name, int *out)
{
    int64_t x = 0;
    int st = qmla_h5_read_attr_int(v, g, "/config", name, 1, &x, NULL);
    if (st)
        return st;
    if (x <= 0 || x > INT_MAX)
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, "/config",
                    "attribute %s: expected a positive integer (at most %d), "
                    "found %" PRId64, name, INT_MAX, x);
    *out = (int)x;
    return QMLA_OK;
}

static int validate_root(const qmla_h5_ctx *v, hid_t root, qmla_capture_config *cfg)
{
    char *s = NULL;
    int st = qmla_h5_read_attr_str(v, root, "/", "format", 1, &s);
    if (st)
        return st;
    if (strcmp(s, QMLA_CAPTURE_FORMAT) != 0) {
        st = qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, "/",
                  "attribute format: expected \"%s\", found \"%.200s\"",
                  QMLA_CAPTURE_FORMAT, s);
        free(s);
        return st;
    }
    free(s);
    int64_t ver = 0;
    if ((st = qmla_h5_read_attr_int(v, root, "/", "format_version", 1, &ver, NULL)))
        return st;
    if (ver != QMLA_CAPTURE_VERSION)
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, "/",
                    "attribute format_version: expected %d, found %" PRId64,
                    QMLA_CAPTURE_VERSION, ver);
    if ((st = qmla_h5_read_attr_str(v, root, "/", "model", 1, &s)))
        return st;
    snprintf(cfg->model, sizeof cfg->model, "%s", s);
    free(s);
    if ((st = qmla_h5_read_attr_str(v, root, "/", "source", 1, &s)))
        return st;
    snprintf(cfg->source, sizeof cfg->source, "%s", s);
    free(s);
    int present = 0;
    double tol = 0;
    if ((st = qmla_h5_read_attr_dbl(v, root, "/", "check_tolerance", 0, &tol,
                              &present)))
        return st;
    if (present && !(isfinite(tol) && tol > 0))
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, "/",
                    "attribute check_tolerance: expected a finite value > 0, "
                    "found %g", tol);
    cfg->has_check_tolerance = present;
    cfg->check_tolerance = present ? tol : 0.0;
    int64_t syn = 0;
    if ((st = qmla_h5_read_attr_int(v, root, "/", "synthetic", 0, &syn, &present)))
        return st;
    if (present && syn != 0 && syn != 1)
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, "/",
                    "attribute synthetic: expected 0 or 1, found %" PRId64,
                    syn);
    cfg->synthetic = present ? (int)syn : 0;
    return QMLA_OK;
}

static int validate_config(const qmla_h5_ctx *v, hid_t root, qmla_capture_config *cfg)
{
    hid_t g;
    int st = qmla_h5_open_child(v, root, "/", "config", H5I_GROUP, "a group", 1, &g);
    if (st)
        return st;
    if ((st = cfg_int(v, g, "n_layers", &cfg->n_layers)) ||
        (st = cfg_int(v, g, "n_heads", &cfg->H)) ||
        (st = cfg_int(v, g, "d_model", &cfg->D)) ||
        (st = cfg_int(v, g, "kv_lora_rank", &cfg->d_c)) ||
        (st = cfg_int(v, g, "qk_nope_head_dim", &cfg->d_n)) ||
        (st = cfg_int(v, g, "qk_rope_head_dim", &cfg->d_r)) ||
        (st = cfg_int(v, g, "v_head_dim", &cfg->d_v)))
        goto out;
    if (cfg->d_r % 2) {
        st = qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, "/config",
                  "attribute qk_rope_head_dim: expected an even value, "
                  "found %d", cfg->d_r);
        goto out;
    }
    if ((st = qmla_h5_read_attr_dbl(v, g, "/config", "softmax_scale", 1,
                              &cfg->softmax_scale, NULL)))
        goto out;
    /* The attention computes in float32 with (float)softmax_scale: a value
     * that becomes 0, subnormal or infinite there is refused. */
    if (!(isfinite(cfg->softmax_scale) && cfg->softmax_scale >= FLT_MIN &&
          cfg->softmax_scale <= FLT_MAX)) {
        st = qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, "/config",
                  "attribute softmax_scale: expected a finite value > 0 that "
                  "is a normal float32 (%.9g .. %.9g: the attention computes "
                  "in float32), found %g", (double)FLT_MIN, (double)FLT_MAX,
                  cfg->softmax_scale);
        goto out;
    }
    if ((st = qmla_h5_read_attr_dbl(v, g, "/config", "rms_norm_eps", 1,
                              &cfg->rms_norm_eps, NULL)))
        goto out;
    if (!(isfinite(cfg->rms_norm_eps) && cfg->rms_norm_eps >= 0)) {
        st = qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, "/config",
                  "attribute rms_norm_eps: expected a finite value >= 0, "
                  "found %g", cfg->rms_norm_eps);
        goto out;
    }
    char *s = NULL;
    if ((st = qmla_h5_read_attr_str(v, g, "/config", "rope_pairing", 1, &s)))
        goto out;
    if (strcmp(s, "interleaved") == 0) {
        cfg->rope_pairing = QMLA_ROPE_INTERLEAVED;
    } else if (strcmp(s, "half") == 0) {
        cfg->rope_pairing = QMLA_ROPE_HALF;
    } else {
        st = qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, "/config",
                  "attribute rope_pairing: expected \"interleaved\" or "
                  "\"half\", found \"%.200s\"", s);
    }
    free(s);
out:
    H5Gclose(g);
    return st;
}

static int cmp_cell(const void *a, const void *b)
{
    return strcmp(((const cell_info *)a)->name, ((const cell_info *)b)->name);
}

static int cmp_layer(const void *a, const void *b)
{
    int x = ((const layer_info *)a)->index, y = ((const layer_info *)b)->index;
    return (x > y) - (x < y);
}

/* The two cell datasets of optional pair `need` (table order). */
static void pair_of(int need, const qmla_cap_ds *p[2])
{
    size_t k = 0;
    p[0] = p[1] = NULL;
    for (size_t i = 0; i < qmla_cap_n_cell_ds && k < 2; i++)
        if (qmla_cap_cell_ds[i].need == need)
            p[k++] = &qmla_cap_cell_ds[i];
}

/* 1 when the cell has the datasets of `need` (has[] in table order; for a
 * pair, its first member). */
static int has_need(const int *has, int need)
{
    for (size_t i = 0; i < qmla_cap_n_cell_ds; i++)
        if (qmla_cap_cell_ds[i].need == need)
            return has[i];
    return 0;
}

/* The optional-dataset rules: each pair together, the cos/sin pair only
 * with the pre pair. */
static int check_optional(const qmla_h5_ctx *v, const char *path,
                          const int *has)
{
    static const int pairs[2] = {QMLA_CAP_PRE, QMLA_CAP_COSSIN};
    const qmla_cap_ds *p[2];
    for (size_t k = 0; k < 2; k++) {
        pair_of(pairs[k], p);
        int h0 = has[p[0] - qmla_cap_cell_ds], h1 = has[p[1] - qmla_cap_cell_ds];
        if (h0 != h1)
            return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                                "expected %s and %s together, found only %s",
                                p[0]->name, p[1]->name,
                                h0 ? p[0]->name : p[1]->name);
    }
    const qmla_cap_ds *pre[2];
    pair_of(QMLA_CAP_PRE, pre);
    pair_of(QMLA_CAP_COSSIN, p);
    if (has_need(has, QMLA_CAP_COSSIN) && !has_need(has, QMLA_CAP_PRE))
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                            "expected %s/%s only with %s and %s, found %s and "
                            "%s without them", p[0]->name, p[1]->name,
                            pre[0]->name, pre[1]->name, p[0]->name,
                            p[1]->name);
    return QMLA_OK;
}

static int validate_cell(const qmla_h5_ctx *v, const qmla_capture_config *cfg,
                         hid_t cells, const char *cpath, cell_info *ci)
{
    char path[QMLA_ERRMSG_MAX];
    qmla_h5_join(path, sizeof path, cpath, ci->name);
    size_t nlen = strlen(ci->name);
    if (nlen >= sizeof ((qmla_cell *)0)->name)
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected a cell name of at most %zu bytes, found %zu",
                    sizeof ((qmla_cell *)0)->name - 1, nlen);
    hid_t g;
    int st = qmla_h5_open_child(v, cells, cpath, ci->name, H5I_GROUP, "a cell group",
                        1, &g);
    if (st)
        return st;
    char *ds = NULL;
    int64_t seed = 0;
    if ((st = qmla_h5_read_attr_str(v, g, path, "dataset", 1, &ds)))
        goto out;
    if (strlen(ds) >= sizeof ci->dataset) {
        st = qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                  "attribute dataset: expected at most %zu bytes, found %zu",
                  sizeof ci->dataset - 1, strlen(ds));
        free(ds);
        goto out;
    }
    snprintf(ci->dataset, sizeof ci->dataset, "%s", ds);
    free(ds);
    if ((st = qmla_h5_read_attr_int(v, g, path, "seed", 1, &seed, NULL)))
        goto out;
    if (seed < LONG_MIN || seed > LONG_MAX) {
        st = qmla_h5_fail(v->err, QMLA_ERANGE, v->label, path,
                  "attribute seed: expected a value that fits a long, "
                  "found %" PRId64, seed);
        goto out;
    }
    ci->seed = (long)seed;

    /* the cell datasets of the table, in its order; the first (c_kv) gives
     * N and T */
    hsize_t f[H5S_MAX_RANK], N = QMLA_H5_WILD, T = QMLA_H5_WILD;
    int has[QMLA_CAP_MAX_DS];
    for (size_t i = 0; i < qmla_cap_n_cell_ds; i++) {
        const qmla_cap_ds *d = &qmla_cap_cell_ds[i];
        qmla_h5_dspec s;
        qmla_cap_spec(d, cfg, N, T, &s);
        if ((st = qmla_h5_check_dataset(v, g, path, &s,
                                        d->need == QMLA_CAP_REQUIRED, &has[i],
                                        f)))
            goto out;
        if (i > 0)
            continue;
        if (f[0] < 1 || f[1] < 1) {
            char got[96], p2[QMLA_ERRMSG_MAX];
            qmla_h5_fmt_dims(got, sizeof got, s.rank, f, NULL);
            qmla_h5_join(p2, sizeof p2, path, d->name);
            st = qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, p2,
                      "expected N >= 1 and T >= 1, found shape %s", got);
            goto out;
        }
        N = f[0];
        T = f[1];
        ci->N = (size_t)N;
        ci->T = (size_t)T;
    }
    if ((st = check_optional(v, path, has)))
        goto out;
    ci->has_pre = has_need(has, QMLA_CAP_PRE);
    ci->has_cossin = has_need(has, QMLA_CAP_COSSIN);
    ci->has_hidden = has_need(has, QMLA_CAP_EXTRA);
out:
    H5Gclose(g);
    return st;
}

/* Parse a canonical decimal layer index ("0", "17"; no sign, no leading
 * zeros). Returns -1 when `s` is not one. */
static int parse_index(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 9 || (n > 1 && s[0] == '0'))
        return -1;
    int x = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        x = x * 10 + (s[i] - '0');
    }
    return x;
}

static int validate_layer(const qmla_h5_ctx *v, const qmla_capture_config *cfg,
                          hid_t layers, layer_info *L)
{
    char path[QMLA_ERRMSG_MAX], cpath[QMLA_ERRMSG_MAX];
    qmla_h5_join(path, sizeof path, "/layers", L->name);
    L->index = parse_index(L->name);
    if (L->index < 0)
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                    "expected a group named by a decimal layer index (no "
                    "sign or leading zeros, below 10^9), found \"%.100s\"",
                    L->name);
    hid_t g;
    int st = qmla_h5_open_child(v, layers, "/layers", L->name, H5I_GROUP,
                        "a layer group", 1, &g);
    if (st)
        return st;
    int64_t at = 0;
    hid_t cells = H5I_INVALID_HID;
    char **names = NULL;
    size_t n = 0;
    if ((st = qmla_h5_read_attr_int(v, g, path, "layer", 1, &at, NULL)))
        goto out;
    if (at != L->index) {
        st = qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, path,
                  "attribute layer: expected %d, found %" PRId64, L->index,
                  at);
        goto out;
    }
    hsize_t f[H5S_MAX_RANK];
    int present;
    for (size_t i = 0; i < qmla_cap_n_layer_ds; i++) {
        qmla_h5_dspec s;
        qmla_cap_spec(&qmla_cap_layer_ds[i], cfg, 0, 0, &s);
        if ((st = qmla_h5_check_dataset(v, g, path, &s, 1, &present, f)))
            goto out;
    }
    qmla_h5_join(cpath, sizeof cpath, path, "cells");
    if ((st = qmla_h5_open_child(v, g, path, "cells", H5I_GROUP, "a group of cells",
                         1, &cells)))
        goto out;
    if ((st = qmla_h5_list_links(v, cells, cpath, &names, &n)))
        goto out;
    if (n == 0) {
        st = qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, cpath,
                  "expected at least one cell group, found none (empty)");
        goto out;
    }
    L->cells = calloc(n, sizeof *L->cells);
    if (!L->cells) {
        st = qmla_h5_fail(v->err, QMLA_ENOMEM, v->label, cpath,
                  "expected memory for %zu cells, found none", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        L->cells[i].name = names[i];
        names[i] = NULL;
        L->n_cells = i + 1;
        if ((st = validate_cell(v, cfg, cells, cpath, &L->cells[i])))
            goto out;
    }
    qsort(L->cells, L->n_cells, sizeof *L->cells, cmp_cell);
out:
    qmla_h5_free_names(names, n);
    if (cells >= 0)
        H5Gclose(cells);
    H5Gclose(g);
    return st;
}

static void free_model(qmla_capture *c)
{
    for (size_t i = 0; i < c->n_layers; i++) {
        layer_info *L = &c->layers[i];
        for (size_t j = 0; j < L->n_cells; j++)
            free(L->cells[j].name);
        free(L->cells);
        free(L->name);
    }
    free(c->layers);
    c->layers = NULL;
    c->n_layers = 0;
}

static int validate(qmla_capture *c, const qmla_h5_ctx *v)
{
    hid_t root = H5Gopen2(c->file, "/", H5P_DEFAULT);
    char h5msg[256];
    if (root < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        return qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, "/",
                    "expected a readable root group, found an error (%s)",
                    h5msg);
    }
    hid_t layers = H5I_INVALID_HID;
    char **names = NULL;
    size_t n = 0;
    int st;
    if ((st = validate_root(v, root, &c->cfg)) ||
        (st = validate_config(v, root, &c->cfg)))
        goto out;
    if ((st = qmla_h5_open_child(v, root, "/", "layers", H5I_GROUP, "a group", 1,
                         &layers)))
        goto out;
    if ((st = qmla_h5_list_links(v, layers, "/layers", &names, &n)))
        goto out;
    if (n == 0) {
        st = qmla_h5_fail(v->err, QMLA_EFORMAT, v->label, "/layers",
                  "expected at least one layer group, found none (empty)");
        goto out;
    }
    c->layers = calloc(n, sizeof *c->layers);
    if (!c->layers) {
        st = qmla_h5_fail(v->err, QMLA_ENOMEM, v->label, "/layers",
                  "expected memory for %zu layers, found none", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        c->layers[i].name = names[i];
        names[i] = NULL;
        c->n_layers = i + 1;
        if ((st = validate_layer(v, &c->cfg, layers, &c->layers[i])))
            goto out;
    }
    qsort(c->layers, c->n_layers, sizeof *c->layers, cmp_layer);
out:
    qmla_h5_free_names(names, n);
    if (layers >= 0)
        H5Gclose(layers);
    H5Gclose(root);
    return st;
}

/* ---- open / close -------------------------------------------------------- */


/* Takes ownership of `file`; on failure closes it. */
static int finish_open(hid_t file, const char *label, qmla_capture **out,
                       qmla_error *err)
{
    qmla_capture *c = calloc(1, sizeof *c);
    char *lab = malloc(strlen(label) + 1);
    hid_t lapl = qmla_h5_make_lapl();
    if (!c || !lab || lapl < 0) {
        free(c);
        free(lab);
        if (lapl >= 0)
            H5Pclose(lapl);
        H5Fclose(file);
        return qmla_error_set(err, QMLA_ENOMEM, "%s: expected memory to open "
                              "the capture, found none", label);
    }
    strcpy(lab, label);
    c->file = file;
    c->lapl = lapl;
    c->label = lab;
    qmla_h5_ctx v = {lab, lapl, err};
    int st = validate(c, &v);
    if (st) {
        qmla_capture_close(c);
        return st;
    }
    *out = c;
    return QMLA_OK;
}

static hid_t make_fapl(void)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0)
        return fapl;
    H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
    return fapl;
}

int qmla_capture_open(const char *path, qmla_capture **out, qmla_error *err)
{
    if (!out)
        return qmla_error_set(err, QMLA_EINVAL,
                              "qmla_capture_open: expected an output pointer, "
                              "found NULL");
    *out = NULL;
    if (!path)
        return qmla_error_set(err, QMLA_EINVAL,
                              "qmla_capture_open: expected a path, found NULL");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return qmla_error_set(err, qmla_status_from_errno(errno), "%s: cannot open: expected an "
                              "existing readable file, found: %s", path,
                              strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return qmla_error_set(err, QMLA_EIO, "%s: cannot open: expected a "
                              "regular file, found %s", path,
                              S_ISDIR(sb.st_mode) ? "a directory"
                                                  : "a special file");
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return qmla_error_set(err, qmla_status_from_errno(errno), "%s: cannot open: expected a "
                              "readable file, found: %s", path,
                              strerror(errno));
    close(fd);

    h5_quiet q = qmla_h5_quiet_begin();
    char h5msg[256];
    int st;
    htri_t is = H5Fis_hdf5(path);
    if (is <= 0) {
        if (is < 0)
            qmla_h5_error_text(h5msg, sizeof h5msg);
        st = is < 0 ? qmla_error_set(err, QMLA_EIO, "%s: cannot open: "
                                     "expected a readable HDF5 file, found "
                                     "an error (%s)", path, h5msg)
                    : qmla_error_set(err, QMLA_EFORMAT, "%s: not an HDF5 "
                                     "file: expected the HDF5 signature, "
                                     "found none (%lld bytes)", path,
                                     (long long)sb.st_size);
        qmla_h5_quiet_end(q);
        return st;
    }
    hid_t fapl = make_fapl();
#if H5_VERSION_GE(1, 10, 7)
    if (fapl >= 0) /* locking where the file system supports it */
        H5Pset_file_locking(fapl, 1, 1);
#endif
    hid_t f = fapl >= 0 ? H5Fopen(path, H5F_ACC_RDONLY, fapl) : -1;
    if (f < 0)
        qmla_h5_error_text(h5msg, sizeof h5msg);
    if (fapl >= 0)
        H5Pclose(fapl);
    if (f < 0) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: cannot open as HDF5: "
                            "expected a complete, readable HDF5 file, found: "
                            "%s", path, h5msg);
        qmla_h5_quiet_end(q);
        return st;
    }
    st = finish_open(f, path, out, err);
    qmla_h5_quiet_end(q);
    return st;
}

static int has_signature(const unsigned char *p, size_t len)
{
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n',
                                         0x1a, '\n'};
    /* the superblock sits at 0, 512, 1024, 2048, ... */
    for (size_t off = 0; off + 8 <= len; off = off ? off * 2 : 512)
        if (memcmp(p + off, sig, 8) == 0)
            return 1;
    return 0;
}

int qmla_capture_open_image(const void *buf, size_t len, const char *label,
                            qmla_capture **out, qmla_error *err)
{
    static atomic_ulong counter;
    if (!out)
        return qmla_error_set(err, QMLA_EINVAL,
                              "qmla_capture_open_image: expected an output "
                              "pointer, found NULL");
    *out = NULL;
    if (!label)
        label = "(image)";
    if (!buf && len)
        return qmla_error_set(err, QMLA_EINVAL, "%s: expected an image "
                              "buffer, found NULL", label);
    if (len < 8 || !has_signature(buf, len))
        return qmla_error_set(err, QMLA_EFORMAT, "%s: not an HDF5 image: "
                              "expected the HDF5 signature, found none (%zu "
                              "bytes)", label, len);
    h5_quiet q = qmla_h5_quiet_begin();
    char h5msg[256], name[96];
    int st;
    hid_t fapl = make_fapl();
    if (fapl < 0 || H5Pset_fapl_core(fapl, 1 << 16, 0) < 0 ||
        H5Pset_file_image(fapl, (void *)buf, len) < 0) {
        qmla_h5_error_text(h5msg, sizeof h5msg);
        if (fapl >= 0)
            H5Pclose(fapl);
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: expected to set up an "
                            "in-memory file of %zu bytes, found an error (%s)",
                            label, len, h5msg);
        qmla_h5_quiet_end(q);
        return st;
    }
    /* The core driver refuses an image whose name exists on disk, and two
     * open images of one name would be shared: a unique name under a path
     * that can never exist. */
    snprintf(name, sizeof name, "/dev/null/qmla-capture-image-%lu-%p",
             (unsigned long)atomic_fetch_add(&counter, 1), (const void *)buf);
    hid_t f = H5Fopen(name, H5F_ACC_RDONLY, fapl);
    if (f < 0)
        qmla_h5_error_text(h5msg, sizeof h5msg);
    H5Pclose(fapl);
    if (f < 0) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: cannot open as HDF5: "
                            "expected a complete, readable HDF5 image, found: "
                            "%s", label, h5msg);
        qmla_h5_quiet_end(q);
        return st;
    }
    st = finish_open(f, label, out, err);
    qmla_h5_quiet_end(q);
    return st;
}

void qmla_capture_close(qmla_capture *c)
{
    if (!c)
        return;
    h5_quiet q = qmla_h5_quiet_begin();
    free_model(c);
    if (c->lapl >= 0)
        H5Pclose(c->lapl);
    if (c->file >= 0)
        H5Fclose(c->file);
    qmla_h5_quiet_end(q);
    free(c->label);
    free(c);
}

/* ---- accessors ----------------------------------------------------------- */

const qmla_capture_config *qmla_capture_get_config(const qmla_capture *c)
{
    return c ? &c->cfg : NULL;
}

const char *qmla_capture_path(const qmla_capture *c)
{
    return c ? c->label : NULL;
}

size_t qmla_capture_n_layers(const qmla_capture *c)
{
    return c ? c->n_layers : 0;
}

int qmla_capture_layer_index(const qmla_capture *c, size_t li)
{
    return c && li < c->n_layers ? c->layers[li].index : -1;
}

static const cell_info *get_cell(const qmla_capture *c, size_t li, size_t ci)
{
    if (!c || li >= c->n_layers || ci >= c->layers[li].n_cells)
        return NULL;
    return &c->layers[li].cells[ci];
}

size_t qmla_capture_n_cells(const qmla_capture *c, size_t li)
{
    return c && li < c->n_layers ? c->layers[li].n_cells : 0;
}

const char *qmla_capture_cell_name(const qmla_capture *c, size_t li,
                                   size_t ci)
{
    const cell_info *x = get_cell(c, li, ci);
    return x ? x->name : NULL;
}

size_t qmla_capture_cell_n(const qmla_capture *c, size_t li, size_t ci)
{
    const cell_info *x = get_cell(c, li, ci);
    return x ? x->N : 0;
}

size_t qmla_capture_cell_t(const qmla_capture *c, size_t li, size_t ci)
{
    const cell_info *x = get_cell(c, li, ci);
    return x ? x->T : 0;
}

void qmla_capture_cell_attrs(const qmla_capture *c, size_t li, size_t ci,
                             char *dataset, size_t len, long *seed)
{
    const cell_info *x = get_cell(c, li, ci);
    snprintf(dataset, len, "%s", x ? x->dataset : "");
    *seed = x ? x->seed : 0;
}

int qmla_capture_cell_has_pre(const qmla_capture *c, size_t li, size_t ci)
{
    const cell_info *x = get_cell(c, li, ci);
    return x ? x->has_cossin : 0;
}

int qmla_capture_find_layer(const qmla_capture *c, int layer, size_t *li)
{
    for (size_t i = 0; c && i < c->n_layers; i++)
        if (c->layers[i].index == layer) {
            if (li)
                *li = i;
            return 1;
        }
    return 0;
}

int qmla_capture_find_cell(const qmla_capture *c, size_t li, const char *name,
                           size_t *ci)
{
    for (size_t i = 0; name && i < qmla_capture_n_cells(c, li); i++)
        if (strcmp(c->layers[li].cells[i].name, name) == 0) {
            if (ci)
                *ci = i;
            return 1;
        }
    return 0;
}

/* ---- loading ------------------------------------------------------------- */

/* Read the datasets of `tab` (n entries) of group g (path gpath) into the
 * struct s (a qmla_layer or qmla_cell): those with a field, in the part
 * set `parts` (entries with parts 0 always), and for the optional ones only
 * when x (a cell) has them. Shapes from the table, N and T from x. */
static int load_table(const qmla_capture *c, hid_t g, const char *gpath,
                      const qmla_cap_ds *tab, size_t n, unsigned parts,
                      const cell_info *x, void *s, qmla_error *err)
{
    qmla_h5_ctx v = {c->label, c->lapl, err};
    for (size_t i = 0; i < n; i++) {
        const qmla_cap_ds *d = &tab[i];
        if (d->field < 0 || (d->parts && !(d->parts & parts)) ||
            (d->need == QMLA_CAP_PRE && !(x && x->has_pre)) ||
            (d->need == QMLA_CAP_COSSIN && !(x && x->has_cossin)))
            continue;
        qmla_h5_dspec sp;
        qmla_cap_spec(d, &c->cfg, x ? x->N : 0, x ? x->T : 0, &sp);
        void *p = NULL;
        int st = qmla_h5_read_dataset(&v, g, gpath, d->name, sp.rank, sp.dims,
                                      d->integer ? H5T_NATIVE_INT64
                                                 : H5T_NATIVE_FLOAT,
                                      d->integer ? sizeof(int64_t)
                                                 : sizeof(float), &p);
        if (st)
            return st;
        qmla_cap_set(s, d, p);
    }
    return QMLA_OK;
}

/* Free the tensors of `tab` held by s and set them to NULL. */
static void free_table(const qmla_cap_ds *tab, size_t n, void *s)
{
    for (size_t i = 0; i < n; i++)
        if (tab[i].field >= 0) {
            free(qmla_cap_get(s, &tab[i]));
            qmla_cap_set(s, &tab[i], NULL);
        }
}

static hid_t open_layer_group(const qmla_capture *c, size_t li, char *path,
                              size_t cap, qmla_error *err, int *st)
{
    char lp[QMLA_ERRMSG_MAX];
    qmla_h5_join(lp, sizeof lp, "/layers", c->layers[li].name);
    snprintf(path, cap, "%s", lp);
    qmla_h5_ctx v = {c->label, c->lapl, err};
    hid_t layers, g = H5I_INVALID_HID;
    *st = qmla_h5_open_child(&v, c->file, "/", "layers", H5I_GROUP, "a group",
                             1, &layers);
    if (*st)
        return H5I_INVALID_HID;
    *st = qmla_h5_open_child(&v, layers, "/layers", c->layers[li].name,
                             H5I_GROUP, "a layer group", 1, &g);
    H5Gclose(layers);
    return g;
}

int qmla_capture_load_layer(qmla_capture *c, size_t li, qmla_layer *out,
                            qmla_error *err)
{
    if (!out)
        return qmla_error_set(err, QMLA_EINVAL, "qmla_capture_load_layer: "
                              "expected an output struct, found NULL");
    memset(out, 0, sizeof *out);
    if (!c || li >= c->n_layers)
        return qmla_error_set(err, QMLA_EINVAL, "%s: load_layer: expected a "
                              "layer position below %zu, found %zu",
                              c ? c->label : "(null capture)",
                              c ? c->n_layers : 0, li);
    h5_quiet q = qmla_h5_quiet_begin();
    char path[QMLA_ERRMSG_MAX];
    int st;
    hid_t g = open_layer_group(c, li, path, sizeof path, err, &st);
    if (st) {
        qmla_h5_quiet_end(q);
        return st;
    }
    out->layer = c->layers[li].index;
    if ((st = load_table(c, g, path, qmla_cap_layer_ds, qmla_cap_n_layer_ds,
                         0, NULL, out, err)))
        qmla_layer_free(out);
    H5Gclose(g);
    qmla_h5_quiet_end(q);
    return st;
}

void qmla_layer_free(qmla_layer *l)
{
    if (l)
        free_table(qmla_cap_layer_ds, qmla_cap_n_layer_ds, l);
}

int qmla_capture_load_cell(qmla_capture *c, size_t li, size_t ci,
                           qmla_cell *out, qmla_error *err)
{
    return qmla_capture_load_cell_parts(c, li, ci, QMLA_CELL_ALL, out, err);
}

int qmla_capture_load_cell_parts(qmla_capture *c, size_t li, size_t ci,
                                 unsigned parts, qmla_cell *out,
                                 qmla_error *err)
{
    if (!out)
        return qmla_error_set(err, QMLA_EINVAL, "qmla_capture_load_cell: "
                              "expected an output struct, found NULL");
    memset(out, 0, sizeof *out);
    const cell_info *x = get_cell(c, li, ci);
    if (!x)
        return qmla_error_set(err, QMLA_EINVAL, "%s: load_cell: expected a "
                              "layer position below %zu and a cell position "
                              "below its cell count, found (%zu, %zu)",
                              c ? c->label : "(null capture)",
                              c ? c->n_layers : 0, li, ci);
    h5_quiet q = qmla_h5_quiet_begin();
    char lpath[QMLA_ERRMSG_MAX], cpath[QMLA_ERRMSG_MAX], path[QMLA_ERRMSG_MAX];
    int st;
    hid_t lg = open_layer_group(c, li, lpath, sizeof lpath, err, &st);
    if (st) {
        qmla_h5_quiet_end(q);
        return st;
    }
    qmla_h5_ctx v = {c->label, c->lapl, err};
    hid_t cells = H5I_INVALID_HID, g = H5I_INVALID_HID;
    qmla_h5_join(cpath, sizeof cpath, lpath, "cells");
    qmla_h5_join(path, sizeof path, cpath, x->name);
    if ((st = qmla_h5_open_child(&v, lg, lpath, "cells", H5I_GROUP,
                                 "a group of cells", 1, &cells)) ||
        (st = qmla_h5_open_child(&v, cells, cpath, x->name, H5I_GROUP,
                                 "a cell group", 1, &g)))
        goto out;
    snprintf(out->name, sizeof out->name, "%s", x->name);
    snprintf(out->dataset, sizeof out->dataset, "%s", x->dataset);
    out->seed = x->seed;
    out->N = x->N;
    out->T = x->T;
    st = load_table(c, g, path, qmla_cap_cell_ds, qmla_cap_n_cell_ds, parts,
                    x, out, err);
out:
    if (st)
        qmla_cell_free(out);
    if (g >= 0)
        H5Gclose(g);
    if (cells >= 0)
        H5Gclose(cells);
    H5Gclose(lg);
    qmla_h5_quiet_end(q);
    return st;
}

void qmla_cell_free(qmla_cell *cell)
{
    if (cell)
        free_table(qmla_cap_cell_ds, qmla_cap_n_cell_ds, cell);
}
