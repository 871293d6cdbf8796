/* lib/engine/safetensors.c — safetensors checkpoints: the reader (one
 * model.safetensors or the shards of model.safetensors.index.json; F16,
 * BF16 and F32 tensors to float32, shapes, offsets and values checked) that
 * qmla_model_load builds the model's weights with, and the writer
 * (engine_int.h: qmla_st_*) that qmla_model_save writes a fused checkpoint
 * with. */
#include "engine/engine_int.h"
#include "qmla/kvcache.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

/* ------------------------------------------------------------ reading */

static float half_to_f32(uint16_t h) { return qmla_f16_to_f32(h); }
static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

typedef struct st_file {
    char path[4096];
    json_t *hdr;
    size_t data_off, size;
    FILE *f;
    uint8_t *map;       /* the whole file, read-only (handed to the model at load) */
} st_file;

/* Bits per element of a safetensors dtype (the format's list); 0: unknown. */
static size_t st_dtype_bits(const char *dt)
{
    static const struct { const char *name; size_t bits; } t[] = {
        {"BOOL", 8}, {"U8", 8}, {"I8", 8}, {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8},
        {"I16", 16}, {"U16", 16}, {"F16", 16}, {"BF16", 16}, {"I32", 32}, {"U32", 32},
        {"F32", 32}, {"C64", 64}, {"F64", 64}, {"I64", 64}, {"U64", 64}, {"F4", 4},
        {"F6_E2M3", 6}, {"F6_E3M2", 6}};
    for (size_t i = 0; dt && i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(dt, t[i].name))
            return t[i].bits;
    return 0;
}

typedef struct st_span {
    size_t b, e;
    const char *name;
} st_span;

static int span_cmp(const void *a, const void *b)
{
    const st_span *x = a, *y = b;
    if (x->b != y->b)
        return x->b < y->b ? -1 : 1;
    return x->e < y->e ? -1 : x->e > y->e;
}

/* The layout the safetensors format requires of every tensor of the header
 * (not only those the engine reads): a known dtype, a shape of non-negative
 * integers, data_offsets [begin, end] with end - begin = elements x dtype
 * size and end within the file, and the tensors' byte ranges tiling the byte
 * buffer after the header exactly: no tensor's bytes inside another's, no
 * bytes that belong to none. Overlapping tensors loaded and scored with
 * exit 0 (one tensor's weights read from another's bytes). */
static int st_check_layout(st_file *s, qmla_error *err)
{
    const size_t buf = s->size - s->data_off;
    size_t n = 0;
    st_span *sp = malloc((json_object_size(s->hdr) + 1) * sizeof *sp);
    if (!sp)
        return qmla_error_set(err, QMLA_ENOMEM, "%s: header table", s->path);
    const char *name;
    json_t *t;
    int st = QMLA_OK;
    json_object_foreach(s->hdr, name, t) {
        if (!strcmp(name, "__metadata__"))
            continue;
        const char *dt = json_string_value(json_object_get(t, "dtype"));
        json_t *sh = json_object_get(t, "shape"), *off = json_object_get(t, "data_offsets");
        const size_t bits = st_dtype_bits(dt);
        if (!json_is_object(t) || !bits) {
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: tensor %s: dtype: expected a "
                                "safetensors dtype (F16, BF16, F32, ...), found %s", s->path,
                                name, dt ? dt : "none");
            break;
        }
        /* elements, with overflow refused */
        size_t numel = 1;
        int shape_ok = json_is_array(sh);
        for (size_t d = 0; shape_ok && d < json_array_size(sh); d++) {
            json_t *x = json_array_get(sh, d);
            const json_int_t v = json_is_integer(x) ? json_integer_value(x) : -1;
            if (v < 0 || (v && numel > SIZE_MAX / 8 / (size_t)v))
                shape_ok = 0;
            else
                numel *= (size_t)v;
        }
        if (!shape_ok) {
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: tensor %s: shape: expected a list of "
                                "non-negative integers", s->path, name);
            break;
        }
        json_t *o0 = json_array_get(off, 0), *o1 = json_array_get(off, 1);
        if (json_array_size(off) != 2 || !json_is_integer(o0) || !json_is_integer(o1) ||
            json_integer_value(o0) < 0 || json_integer_value(o1) < 0) {
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: tensor %s: data_offsets: expected two "
                                "non-negative integers [begin, end]", s->path, name);
            break;
        }
        const size_t b0 = (size_t)json_integer_value(o0), b1 = (size_t)json_integer_value(o1);
        const size_t bytes = (numel * bits + 7) / 8;
        if (b1 < b0 || b1 - b0 != bytes || b1 > buf) {
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: tensor %s: data_offsets [%zu, %zu]: "
                                "expected end - begin = %zu bytes (%zu elements of %s) and "
                                "end <= %zu (the byte buffer), found %s%zu bytes", s->path,
                                name, b0, b1, bytes, numel, dt, buf, b1 < b0 ? "-" : "",
                                b1 < b0 ? b0 - b1 : b1 - b0);
            break;
        }
        sp[n++] = (st_span){b0, b1, name};
    }
    if (!st) {
        if (n > 1)
            qsort(sp, n, sizeof *sp, span_cmp);
        size_t at = 0, ai = 0; /* bytes covered so far; sp[ai] reaches at */
        for (size_t i = 0; i < n && !st; i++) {
            if (sp[i].b < at)
                st = qmla_error_set(err, QMLA_EFORMAT, "%s: tensors %s [%zu, %zu] and %s "
                                    "[%zu, %zu]: data_offsets overlap by %zu bytes: expected "
                                    "each tensor's bytes apart (safetensors: the tensors "
                                    "tile the byte buffer)", s->path, sp[ai].name, sp[ai].b,
                                    sp[ai].e, sp[i].name, sp[i].b, sp[i].e,
                                    (sp[i].e < at ? sp[i].e : at) - sp[i].b);
            else if (sp[i].b > at)
                st = qmla_error_set(err, QMLA_EFORMAT, "%s: bytes [%zu, %zu] of the byte buffer "
                                    "belong to no tensor (%s%s%s %s): expected data_offsets "
                                    "that cover the buffer without holes (safetensors), found "
                                    "a gap of %zu bytes", s->path, at, sp[i].b,
                                    i ? "between " : "before ", i ? sp[ai].name : "",
                                    i ? " and" : "", sp[i].name, sp[i].b - at);
            if (sp[i].e >= at) {
                at = sp[i].e;
                ai = i;
            }
        }
        if (!st && at != buf)
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: bytes [%zu, %zu] of the byte buffer "
                                "belong to no tensor (after %s): expected data_offsets that "
                                "cover the buffer to its end (safetensors: %zu bytes after "
                                "the header), found %zu trailing bytes", s->path, at, buf,
                                n ? sp[ai].name : "the header", buf, buf - at);
    }
    free(sp);
    return st;
}

static int st_open(st_file *s, const char *path, qmla_error *err)
{
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", path);
    s->f = fopen(path, "rb");
    if (!s->f)
        return qmla_error_set(err, QMLA_EIO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(s->f), &sb) != 0)
        return qmla_error_set(err, QMLA_EIO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return qmla_error_set(err, QMLA_EFORMAT, "%s: expected a safetensors file, found %s",
                              path, S_ISDIR(sb.st_mode) ? "a directory" : "no regular file");
    uint8_t b[8];
    if (fread(b, 1, 8, s->f) != 8)
        return qmla_error_set(err, QMLA_EFORMAT, "%s: expected an 8-byte safetensors header "
                              "length, found a shorter file", path);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | b[i];
    if (fseek(s->f, 0, SEEK_END) || ftell(s->f) < 0)
        return qmla_error_set(err, QMLA_EIO, "%s: %s", path, strerror(errno));
    s->size = (size_t)ftell(s->f);
    if (n > s->size - 8)
        return qmla_error_set(err, QMLA_EFORMAT, "%s: header length %llu exceeds the file "
                              "(%zu bytes)", path, (unsigned long long)n, s->size);
    char *h = malloc(n + 1);
    if (!h)
        return qmla_error_set(err, QMLA_ENOMEM, "%s: header of %llu bytes", path,
                              (unsigned long long)n);
    fseek(s->f, 8, SEEK_SET);
    if (fread(h, 1, n, s->f) != n) {
        free(h);
        return qmla_error_set(err, QMLA_EIO, "%s: short read of the header", path);
    }
    h[n] = 0;
    json_error_t je;
    s->hdr = json_loadb(h, n, 0, &je);
    free(h);
    if (!s->hdr || !json_is_object(s->hdr))
        return qmla_error_set(err, QMLA_EFORMAT, "%s: safetensors header: %s", path,
                              s->hdr ? "expected an object" : je.text);
    s->data_off = 8 + n;
    int st = st_check_layout(s, err);
    if (st)
        return st;
    void *mp = mmap(NULL, s->size, PROT_READ, MAP_PRIVATE, fileno(s->f), 0);
    if (mp == MAP_FAILED)
        return qmla_error_set(err, QMLA_EIO, "%s: cannot map %zu bytes: %s", path, s->size,
                              strerror(errno));
    s->map = mp;
    return QMLA_OK;
}

static void st_close(st_file *s)
{
    if (s->map)
        munmap(s->map, s->size);
    s->map = NULL;
    if (s->f)
        fclose(s->f);
    json_decref(s->hdr);
    s->f = NULL;
    s->hdr = NULL;
}

/* float8 E4M3 (the "fn" variant of torch.float8_e4m3fn and safetensors'
 * F8_E4M3): sign, 4 exponent bits of bias 7, 3 mantissa bits; exponent 0
 * subnormal (m / 8 * 2^-6), S.1111.111 NaN, no infinities (max 448). */
float qmla_eng_fp8_e4m3(uint8_t b)
{
    const int sgn = b >> 7, e = (b >> 3) & 15, mt = b & 7;
    float v;
    if (e == 15 && mt == 7)
        v = NAN;
    else if (!e)
        v = ldexpf((float)mt / 8.0f, -6);
    else
        v = ldexpf(1.0f + (float)mt / 8.0f, e - 7);
    return sgn ? -v : v;
}

/* Read tensor `name` of shape [r, c] (c = 0: 1-D [r]) as float32 (F8_E4M3
 * decoded without its block scale: shards_read applies it). */
/* The checks of a tensor `name` [r, c] the engine reads (shape, dtype,
 * offsets): its dtype, element size and byte offset in the data buffer. */
static int st_locate(st_file *s, const char *name, size_t r, size_t c, const char **dtp,
                     size_t *esp, size_t *b0p, qmla_error *err)
{
    json_t *t = json_object_get(s->hdr, name);
    if (!t)
        return qmla_error_set(err, QMLA_EFORMAT, "%s: tensor %s: missing: expected a tensor "
                              "of shape [%zu%s%.0zu], found none", s->path, name, r,
                              c ? ", " : "", c);
    const char *dt = json_string_value(json_object_get(t, "dtype"));
    json_t *sh = json_object_get(t, "shape"), *off = json_object_get(t, "data_offsets");
    size_t nd = json_array_size(sh);
    size_t want_nd = c ? 2 : 1;
    size_t s0 = nd > 0 ? (size_t)json_integer_value(json_array_get(sh, 0)) : 0;
    size_t s1 = nd > 1 ? (size_t)json_integer_value(json_array_get(sh, 1)) : 0;
    if (nd != want_nd || s0 != r || (c && s1 != c)) {
        char want[64];
        if (c)
            snprintf(want, sizeof want, "[%zu, %zu]", r, c);
        else
            snprintf(want, sizeof want, "[%zu]", r); /* was printed "[3200]" for [320] */
        return qmla_error_set(err, QMLA_EFORMAT, "%s: tensor %s: expected shape %s, "
                              "found %zu dims [%zu, %zu]", s->path, name, want, nd, s0, s1);
    }
    size_t n = r * (c ? c : 1), es;
    if (!dt)
        dt = "?";
    if (!strcmp(dt, "F32"))
        es = 4;
    else if (!strcmp(dt, "F16") || !strcmp(dt, "BF16"))
        es = 2;
    else if (!strcmp(dt, "F8_E4M3"))
        es = 1;
    else
        return qmla_error_set(err, QMLA_EFORMAT, "%s: tensor %s: dtype %s: expected F16, "
                              "BF16, F32 or F8_E4M3", s->path, name, dt);
    json_t *o0 = json_array_get(off, 0), *o1 = json_array_get(off, 1);
    /* negative offsets, cast to size_t, wrapped past the bound check below
     * and read the header's bytes as weights */
    if (json_array_size(off) != 2 || !json_is_integer(o0) || !json_is_integer(o1) ||
        json_integer_value(o0) < 0 || json_integer_value(o1) < 0)
        return qmla_error_set(err, QMLA_EFORMAT, "%s: tensor %s: data_offsets: expected two "
                              "non-negative integers [begin, end]", s->path, name);
    size_t b0 = (size_t)json_integer_value(o0);
    size_t b1 = (size_t)json_integer_value(o1);
    if (b1 < b0 || b1 - b0 != n * es || b1 > s->size - s->data_off)
        return qmla_error_set(err, QMLA_EFORMAT, "%s: tensor %s: data_offsets [%zu, %zu] do "
                              "not hold %zu values of %s within the file", s->path, name, b0,
                              b1, n, dt);
    *dtp = dt;
    *esp = es;
    *b0p = b0;
    return QMLA_OK;
}

static int st_read(st_file *s, const char *name, size_t r, size_t c, float *out,
                   qmla_error *err)
{
    const char *dt;
    size_t es, b0;
    int st0 = st_locate(s, name, r, c, &dt, &es, &b0, err);
    if (st0)
        return st0;
    const size_t n = r * (c ? c : 1);
    uint8_t *buf = malloc(n * es);
    if (!buf)
        return qmla_error_set(err, QMLA_ENOMEM, "%s: tensor %s", s->path, name);
    if (fseek(s->f, (long)(s->data_off + b0), SEEK_SET) || fread(buf, es, n, s->f) != n) {
        free(buf);
        return qmla_error_set(err, QMLA_EIO, "%s: tensor %s: short read", s->path, name);
    }
    for (size_t i = 0; i < n; i++) {
        if (es == 1) {
            out[i] = qmla_eng_fp8_e4m3(buf[i]);
        } else if (es == 4) {
            uint32_t u = (uint32_t)buf[4 * i] | (uint32_t)buf[4 * i + 1] << 8 |
                         (uint32_t)buf[4 * i + 2] << 16 | (uint32_t)buf[4 * i + 3] << 24;
            memcpy(&out[i], &u, 4);
        } else {
            uint16_t h = (uint16_t)(buf[2 * i] | buf[2 * i + 1] << 8);
            out[i] = dt[0] == 'B' ? bf16_to_f32(h) : half_to_f32(h);
        }
        if (!isfinite(out[i])) {
            free(buf);
            return qmla_error_set(err, QMLA_ENONFINITE, "%s: tensor %s: element %zu is %g: "
                                  "expected finite values", s->path, name, i, (double)out[i]);
        }
    }
    free(buf);
    return QMLA_OK;
}

/* All shards: the index's file names, or model.safetensors alone. */
typedef struct shards {
    st_file *f;
    size_t n;
    json_t *map; /* weight_map (index) or NULL */
    char **names;
    const qmla_eng_quant *quant;
} shards;

static void shards_close(shards *S)
{
    for (size_t i = 0; i < S->n; i++) {
        st_close(&S->f[i]);
        free(S->names[i]);
    }
    free(S->f);
    free(S->names);
    json_decref(S->map);
}

static int shards_open(const char *dir, shards *S, qmla_error *err)
{
    memset(S, 0, sizeof *S);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *probe = fopen(path, "rb");
    if (!probe) {
        S->f = calloc(1, sizeof *S->f);
        S->names = calloc(1, sizeof *S->names);
        if (!S->f || !S->names)
            return qmla_error_set(err, QMLA_ENOMEM, "%s: shard table", dir);
        S->names[0] = strdup("model.safetensors");
        S->n = 1;
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        return st_open(&S->f[0], path, err);
    }
    fclose(probe);
    json_t *idx = qmla_eng_load_json(path, err);
    if (!idx)
        return err ? err->status : QMLA_EFORMAT;
    S->map = json_incref(json_object_get(idx, "weight_map"));
    json_decref(idx);
    if (!json_is_object(S->map))
        return qmla_error_set(err, QMLA_EFORMAT, "%s: expected an object \"weight_map\"",
                              path);
    size_t cap = json_object_size(S->map);
    S->f = calloc(cap ? cap : 1, sizeof *S->f);
    S->names = calloc(cap ? cap : 1, sizeof *S->names);
    if (!S->f || !S->names)
        return qmla_error_set(err, QMLA_ENOMEM, "%s: shard table", path);
    const char *k;
    json_t *v;
    json_object_foreach(S->map, k, v) {
        const char *fn = json_string_value(v);
        if (!fn || strchr(fn, '/'))
            return qmla_error_set(err, QMLA_EFORMAT, "%s: weight_map[%s]: expected a file "
                                  "name in the folder", path, k);
        size_t i;
        for (i = 0; i < S->n; i++)
            if (!strcmp(S->names[i], fn))
                break;
        if (i < S->n)
            continue;
        S->names[S->n] = strdup(fn);
        char fp[4096];
        snprintf(fp, sizeof fp, "%s/%s", dir, fn);
        S->n++;
        int st = st_open(&S->f[S->n - 1], fp, err);
        if (st)
            return st;
    }
    return QMLA_OK;
}

static int shards_has(shards *S, const char *name);

static st_file *shards_file(shards *S, const char *name)
{
    if (S->map) {
        const char *fn = json_string_value(json_object_get(S->map, name));
        if (!fn)
            return NULL;
        for (size_t i = 0; i < S->n; i++)
            if (!strcmp(S->names[i], fn))
                return &S->f[i];
        return NULL;
    }
    return &S->f[0];
}

/* The dtype of tensor `name` ("" when absent). */
static const char *shards_dtype(shards *S, const char *name)
{
    st_file *f = shards_file(S, name);
    const char *dt = f ? json_string_value(json_object_get(json_object_get(f->hdr, name),
                                                           "dtype"))
                       : NULL;
    return dt ? dt : "";
}

static int shards_read_raw(shards *S, const char *name, size_t r, size_t c, float *out,
                           qmla_error *err);

/* Read `name` as float32; an F8_E4M3 tensor (FP8 checkpoints) is multiplied
 * by its block scales NAME_scale_inv [ceil(r / br), ceil(c / bc)] (value =
 * fp8 x scale_inv of its block, as transformers dequantizes). */
static int shards_read(shards *S, const char *name, size_t r, size_t c, float *out,
                       qmla_error *err)
{
    int st = shards_read_raw(S, name, r, c, out, err);
    if (st || strcmp(shards_dtype(S, name), "F8_E4M3"))
        return st;
    const qmla_eng_quant *q = S->quant;
    if (!q || !q->fp8)
        return qmla_error_set(err, QMLA_EFORMAT, "tensor %s: dtype F8_E4M3: expected a "
                              "quantization_config with quant_method \"fp8\" in config.json "
                              "(the block scales' layout), found none", name);
    const size_t cc = c ? c : 1, br = q->block_r, bc = q->block_c;
    const size_t nr = (r + br - 1) / br, nc = (cc + bc - 1) / bc;
    char sn[320];
    snprintf(sn, sizeof sn, "%s_scale_inv", name);
    if (!shards_has(S, sn))
        return qmla_error_set(err, QMLA_EFORMAT, "tensor %s: missing: expected the block "
                              "scales [%zu, %zu] of the F8_E4M3 tensor %s [%zu, %zu] (blocks "
                              "%zu x %zu), found none", sn, nr, nc, name, r, cc, br, bc);
    float *sc = malloc(nr * nc * sizeof(float));
    if (!sc)
        return qmla_error_set(err, QMLA_ENOMEM, "tensor %s", sn);
    st = shards_read_raw(S, sn, nr, c ? nc : 0, sc, err);
    if (st) {
        qmla_error_prefix(err, "block scales of %s [%zu, %zu] (blocks %zu x %zu): ", name, r,
                          cc, br, bc);
        free(sc);
        return st;
    }
    for (size_t i = 0; i < nr * nc; i++)
        if (!(sc[i] > 0.0f)) {
            st = qmla_error_set(err, QMLA_EFORMAT, "tensor %s: element %zu is %g: expected "
                                "a positive block scale", sn, i, (double)sc[i]);
            free(sc);
            return st;
        }
    for (size_t i = 0; i < r; i++)
        for (size_t j = 0; j < cc; j++)
            out[i * cc + j] *= sc[(i / br) * nc + j / bc];
    free(sc);
    return QMLA_OK;
}

static int shards_read_raw(shards *S, const char *name, size_t r, size_t c, float *out,
                           qmla_error *err)
{
    if (S->map) {
        const char *fn = json_string_value(json_object_get(S->map, name));
        if (!fn)
            return qmla_error_set(err, QMLA_EFORMAT, "model.safetensors.index.json: tensor "
                                  "%s: missing from weight_map", name);
        for (size_t i = 0; i < S->n; i++)
            if (!strcmp(S->names[i], fn))
                return st_read(&S->f[i], name, r, c, out, err);
    }
    return st_read(&S->f[0], name, r, c, out, err);
}

static int shards_has(shards *S, const char *name)
{
    if (S->map)
        return json_object_get(S->map, name) != NULL;
    return json_object_get(S->f[0].hdr, name) != NULL;
}

/* ------------------------------------------------------------ loading */

static float *own(qmla_model *m, size_t n)
{
    if (m->n_owned == m->cap_owned) {
        size_t nc = m->cap_owned ? 2 * m->cap_owned : 64;
        float **p = realloc(m->owned, nc * sizeof *p);
        if (!p)
            return NULL;
        m->owned = p;
        m->cap_owned = nc;
    }
    float *x = malloc((n ? n : 1) * sizeof(float));
    if (x)
        m->owned[m->n_owned++] = x;
    return x;
}

static int load_t(qmla_model *m, shards *S, const char *name, size_t r, size_t c, float **out,
                  qmla_error *err)
{
    float *x = own(m, r * (c ? c : 1));
    if (!x)
        return qmla_error_set(err, QMLA_ENOMEM, "tensor %s: %zu floats", name,
                              r * (c ? c : 1));
    *out = x;
    m->n_params += r * (c ? c : 1);
    return shards_read(S, name, r, c, x, err);
}

/* ------------------------------------------------------------ weights kept as stored */

static float fp8_lut[256];

static void fp8_lut_init(void)
{
    static int done;
    if (done)
        return;
    for (int b = 0; b < 256; b++)
        fp8_lut[b] = qmla_eng_fp8_e4m3((uint8_t)b);
    done = 1;
}

static int host_le(void)
{
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

size_t qmla_eng_wt_bytes(const qmla_eng_wt *w)
{
    const size_t es = w->dtype == QMLA_ENG_DT_F32 ? 4 : w->dtype == QMLA_ENG_DT_F8 ? 1 : 2;
    return w->r * w->c * es;
}

const float *qmla_eng_wt_get(const qmla_eng_wt *w, float *buf)
{
    if (w->f)
        return w->f;
    const size_t n = w->r * w->c;
    const uint8_t *p = w->raw;
    switch (w->dtype) {
    case QMLA_ENG_DT_F32:
        for (size_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 |
                         (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
            memcpy(&buf[i], &u, 4);
        }
        break;
    case QMLA_ENG_DT_F16:
        for (size_t i = 0; i < n; i++)
            buf[i] = half_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        break;
    case QMLA_ENG_DT_BF16:
        for (size_t i = 0; i < n; i++)
            buf[i] = bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        break;
    default: { /* F8: value x its block's scale */
        const size_t nc = (w->c + w->bc - 1) / w->bc;
        for (size_t i = 0; i < w->r; i++) {
            const float *sr = w->scale + (i / w->br) * nc;
            const uint8_t *q = p + i * w->c;
            float *o = buf + i * w->c;
            for (size_t j = 0; j < w->c; j++)
                o[j] = fp8_lut[q[j]] * sr[j / w->bc];
        }
    }
    }
    return buf;
}

/* Tensor `name` [r, c] as a qmla_eng_wt over the file's mapping: checked
 * as shards_read checks it (shape, dtype, offsets, every value finite, FP8
 * block scales of the right shape, finite and positive), then left in the
 * mapping (used in place when it is little-endian F32 aligned to 4 bytes). */
static int load_wt(qmla_model *m, shards *S, const char *name, size_t r, size_t c,
                   qmla_eng_wt *w, qmla_error *err)
{
    memset(w, 0, sizeof *w);
    st_file *f = shards_file(S, name);
    if (!f) {
        if (S->map)
            return qmla_error_set(err, QMLA_EFORMAT, "model.safetensors.index.json: tensor "
                                  "%s: missing from weight_map", name);
        f = &S->f[0];
    }
    const char *dt;
    size_t es, b0;
    int st = st_locate(f, name, r, c, &dt, &es, &b0, err);
    if (st)
        return st;
    w->r = r;
    w->c = c;
    w->raw = f->map + f->data_off + b0;
    snprintf(w->st_dtype, sizeof w->st_dtype, "%s", dt);
    w->dtype = !strcmp(dt, "F32") ? QMLA_ENG_DT_F32 : !strcmp(dt, "F16") ? QMLA_ENG_DT_F16
             : !strcmp(dt, "BF16") ? QMLA_ENG_DT_BF16 : QMLA_ENG_DT_F8;
    const size_t n = r * c;
    m->n_params += n;
    if (w->dtype == QMLA_ENG_DT_F8) {
        const qmla_eng_quant *q = S->quant;
        if (!q || !q->fp8)
            return qmla_error_set(err, QMLA_EFORMAT, "tensor %s: dtype F8_E4M3: expected a "
                                  "quantization_config with quant_method \"fp8\" in "
                                  "config.json (the block scales' layout), found none", name);
        const size_t br = q->block_r, bc = q->block_c;
        const size_t nr = (r + br - 1) / br, nc = (c + bc - 1) / bc;
        char sn[320];
        snprintf(sn, sizeof sn, "%s_scale_inv", name);
        if (!shards_has(S, sn))
            return qmla_error_set(err, QMLA_EFORMAT, "tensor %s: missing: expected the block "
                                  "scales [%zu, %zu] of the F8_E4M3 tensor %s [%zu, %zu] "
                                  "(blocks %zu x %zu), found none", sn, nr, nc, name, r, c,
                                  br, bc);
        float *sc = own(m, nr * nc);
        if (!sc)
            return qmla_error_set(err, QMLA_ENOMEM, "tensor %s", sn);
        if ((st = shards_read_raw(S, sn, nr, nc, sc, err)))
            return qmla_error_prefix(err, "block scales of %s [%zu, %zu] (blocks %zu x %zu): ",
                                     name, r, c, br, bc);
        for (size_t i = 0; i < nr * nc; i++)
            if (!(sc[i] > 0.0f))
                return qmla_error_set(err, QMLA_EFORMAT, "tensor %s: element %zu is %g: "
                                      "expected a positive block scale", sn, i, (double)sc[i]);
        w->scale = sc;
        w->br = br;
        w->bc = bc;
        fp8_lut_init();
    }
    /* every value finite (a pass over the stored bytes, as the float32
     * conversion made it) */
    for (size_t i = 0; i < n; i++) {
        float v;
        const uint8_t *p = w->raw + i * es;
        if (es == 1) {
            v = qmla_eng_fp8_e4m3(p[0]);
        } else if (es == 2) {
            const uint16_t h = (uint16_t)(p[0] | p[1] << 8);
            v = w->dtype == QMLA_ENG_DT_BF16 ? bf16_to_f32(h) : half_to_f32(h);
        } else {
            uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                         (uint32_t)p[3] << 24;
            memcpy(&v, &u, 4);
        }
        if (!isfinite(v))
            return qmla_error_set(err, QMLA_ENONFINITE, "%s: tensor %s: element %zu is %g: "
                                  "expected finite values", f->path, name, i, (double)v);
    }
    if (w->dtype == QMLA_ENG_DT_F32 && host_le() && ((uintptr_t)w->raw & 3) == 0)
        w->f = (const float *)(const void *)w->raw;
    else if (n > m->wt_max)
        m->wt_max = n;
    return QMLA_OK;
}

void qmla_model_free(qmla_model *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    for (size_t l = 0; m->layers && l < m->c.L; l++) {
        free(m->layers[l].eg);
        free(m->layers[l].eu);
        free(m->layers[l].ed);
    }
    free(m->layers);
    for (size_t i = 0; i < m->n_maps; i++)
        munmap(m->maps[i], m->map_lens[i]);
    free(m->maps);
    free(m->map_lens);
    free(m->moe.sparse);
    free(m);
}

int qmla_model_load(const char *dir, qmla_model **out, qmla_error *err)
{
    *out = NULL;
    qmla_model *m = calloc(1, sizeof *m);
    if (!m)
        return qmla_error_set(err, QMLA_ENOMEM, "model");
    size_t n_mtp = 0;
    int st = qmla_eng_parse_config(dir, &m->c, &m->rope, &m->moe, &m->quant, &m->fam,
                                   &n_mtp, err);
    if (st) {
        free(m->moe.sparse);
        free(m);
        return st;
    }
    const qmla_model_config *c = &m->c;
    const qmla_eng_moe *mo = &m->moe;
    shards S;
    st = shards_open(dir, &S, err);
    S.quant = &m->quant;
    m->layers = calloc(c->L, sizeof *m->layers);
    if (!st && !m->layers)
        st = qmla_error_set(err, QMLA_ENOMEM, "layers");
    const size_t qk = c->d_n + c->d_r, HD = c->H;
    char nm[256];
    if (!st)
        st = load_t(m, &S, "model.embed_tokens.weight", c->V, c->D, &m->embed, err);
    if (!st)
        st = load_t(m, &S, "model.norm.weight", c->D, 0, &m->norm, err);
    /* tie_word_embeddings: transformers ties lm_head to the embedding (its
     * weight, if the file has one, is replaced by the embedding's) */
    if (!st && c->tied)
        m->lm_head = m->embed;
    else if (!st)
        st = load_t(m, &S, "lm_head.weight", c->V, c->D, &m->lm_head, err);
    float *kvb = NULL;
    if (!st && !(kvb = malloc(HD * (c->d_n + c->d_v) * c->d_c * sizeof(float))))
        st = qmla_error_set(err, QMLA_ENOMEM, "kv_b_proj");
    for (size_t l = 0; l < c->L && !st; l++) {
        layer_w *w = &m->layers[l];
#define LT(suffix, r, cc, dst)                                                       \
    do {                                                                             \
        qmla_eng_tensor_name(&m->fam, l, suffix, nm, sizeof nm);                     \
        if (!st)                                                                     \
            st = load_t(m, &S, nm, r, cc, dst, err);                                 \
    } while (0)
        const int lc = m->fam.longcat;
        w->moe = !lc && mo->n_routed && (mo->sparse ? mo->sparse[l] : l >= mo->first_dense);
        w->sc_moe = lc && l % 2 == 0;
        w->sc_add = lc && l % 2 == 1;
        snprintf(nm, sizeof nm, "model.layers.%zu.mlp.gate.weight", l);
        if (!lc && !w->moe && shards_has(&S, nm)) {
            st = qmla_error_set(err, QMLA_EFORMAT, "tensor %s: MoE router found in layer %zu, "
                                "which config.json makes a dense block (n_routed_experts %zu, "
                                "first_k_dense_replace %zu): expected mlp.gate_proj, mlp.up_proj, "
                                "mlp.down_proj only", nm, l, mo->n_routed, mo->first_dense);
            break;
        }
        if (w->moe && !shards_has(&S, nm)) {
            st = qmla_error_set(err, QMLA_EFORMAT, "tensor %s: missing: expected the router "
                                "[%zu, %zu] of MoE blocks (n_routed_experts %zu from layer "
                                "first_k_dense_replace = %zu of %zu)", nm, mo->n_routed, c->D,
                                mo->n_routed, mo->first_dense, c->L);
            break;
        }
        LT("input_layernorm.weight", c->D, 0, &w->ln_in);
        LT("post_attention_layernorm.weight", c->D, 0, &w->ln_post);
        if (c->q_lora_rank) {
            LT("self_attn.q_a_proj.weight", c->q_lora_rank, c->D, &w->q_a);
            LT("self_attn.q_a_layernorm.weight", c->q_lora_rank, 0, &w->q_a_ln);
            LT("self_attn.q_b_proj.weight", HD * qk, c->q_lora_rank, &w->q_proj);
        } else {
            LT("self_attn.q_proj.weight", HD * qk, c->D, &w->q_proj);
        }
        LT("self_attn.kv_a_proj_with_mqa.weight", c->d_c + c->d_r, c->D, &w->kv_a);
        LT("self_attn.kv_a_layernorm.weight", c->d_c, 0, &w->kv_a_ln);
        qmla_eng_tensor_name(&m->fam, l, "self_attn.kv_b_proj.weight", nm, sizeof nm);
        if (!st)
            st = shards_read(&S, nm, HD * (c->d_n + c->d_v), c->d_c, kvb, err);
        if (!st) {
            w->w_uk = own(m, HD * c->d_n * c->d_c);
            w->w_uv = own(m, HD * c->d_v * c->d_c);
            if (!w->w_uk || !w->w_uv)
                st = qmla_error_set(err, QMLA_ENOMEM, "%s", nm);
        }
        if (!st) {
            m->n_params += HD * (c->d_n + c->d_v) * c->d_c;
            for (size_t h = 0; h < HD; h++) {
                const float *blk = kvb + h * (c->d_n + c->d_v) * c->d_c;
                memcpy(w->w_uk + h * c->d_n * c->d_c, blk, c->d_n * c->d_c * sizeof(float));
                memcpy(w->w_uv + h * c->d_v * c->d_c, blk + c->d_n * c->d_c,
                       c->d_v * c->d_c * sizeof(float));
            }
        }
        LT("self_attn.o_proj.weight", c->D, HD * c->d_v, &w->o_proj);
#define LW(suffix, r, cc, dst)                                                       \
    do {                                                                             \
        qmla_eng_tensor_name(&m->fam, l, suffix, nm, sizeof nm);                     \
        if (!st)                                                                     \
            st = load_wt(m, &S, nm, r, cc, dst, err);                                \
    } while (0)
        if (!w->moe) {
            LW("mlp.gate_proj.weight", c->n_inter, c->D, &w->gate);
            LW("mlp.up_proj.weight", c->n_inter, c->D, &w->up);
            LW("mlp.down_proj.weight", c->D, c->n_inter, &w->down);
            if (!w->sc_moe)
                continue;
        }
        if (st)
            break;
        /* MoE block: router, (bias), routed experts, shared experts;
         * LongcatFlash's router over the routed and the zero experts, its
         * correction bias always there */
        const size_t E = mo->n_routed, NE = mo->inter, IS = mo->inter * mo->n_shared;
        const size_t EW = E + mo->n_zero;
        m->n_moe_layers++;
        LT(lc ? "mlp.router.classifier.weight" : "mlp.gate.weight", EW, c->D, &w->router);
        qmla_eng_tensor_name(&m->fam, l, lc ? "mlp.router.e_score_correction_bias"
                                            : "mlp.gate.e_score_correction_bias", nm, sizeof nm);
        if (!st && (mo->sigmoid || lc))
            st = load_t(m, &S, nm, EW, 0, &w->router_bias, err);
        else if (!st && shards_has(&S, nm))
            st = qmla_error_set(err, QMLA_EFORMAT, "tensor %s: found in a %s checkpoint, "
                                "whose softmax gate has no correction bias: expected none",
                                nm, c->arch);
        if (st && lc)
            qmla_error_prefix(err, "LongcatFlash block %zu: the router over n_routed_experts "
                              "%zu + zero_expert_num %zu experts: ", l / 2, E, mo->n_zero);
        if (!st && (!(w->eg = calloc(E, sizeof *w->eg)) || !(w->eu = calloc(E, sizeof *w->eu)) ||
                    !(w->ed = calloc(E, sizeof *w->ed))))
            st = qmla_error_set(err, QMLA_ENOMEM, "experts of layer %zu", l);
        for (size_t e = 0; e < E && !st; e++) {
            char sfx[128];
            snprintf(sfx, sizeof sfx, "mlp.experts.%zu.gate_proj.weight", e);
            LW(sfx, NE, c->D, &w->eg[e]);
            snprintf(sfx, sizeof sfx, "mlp.experts.%zu.up_proj.weight", e);
            LW(sfx, NE, c->D, &w->eu[e]);
            snprintf(sfx, sizeof sfx, "mlp.experts.%zu.down_proj.weight", e);
            LW(sfx, c->D, NE, &w->ed[e]);
        }
        {
            char sfx[128];
            snprintf(sfx, sizeof sfx, "mlp.experts.%zu.gate_proj.weight", E);
            qmla_eng_tensor_name(&m->fam, l, sfx, nm, sizeof nm);
        }
        if (!st && shards_has(&S, nm))
            st = qmla_error_set(err, QMLA_EFORMAT, "tensor %s: expected experts 0..%zu "
                                "(n_routed_experts %zu), found more", nm, E - 1, E);
        if (mo->n_shared) {
            w->has_shared = 1;
            LW("mlp.shared_experts.gate_proj.weight", IS, c->D, &w->sg);
            LW("mlp.shared_experts.up_proj.weight", IS, c->D, &w->su);
            LW("mlp.shared_experts.down_proj.weight", c->D, IS, &w->sd);
        } else {
            qmla_eng_tensor_name(&m->fam, l, "mlp.shared_experts.gate_proj.weight", nm,
                                 sizeof nm);
            if (!st && shards_has(&S, nm))
                st = qmla_error_set(err, QMLA_EFORMAT, "tensor %s: shared experts found, "
                                    "config.json says n_shared_experts 0: expected none", nm);
        }
#undef LT
#undef LW
    }
    free(kvb);
    /* a checkpoint with more layers than config.json's num_hidden_layers
     * (and no multi-token-prediction layers declared) would run truncated */
    qmla_eng_tensor_name(&m->fam, c->L, "self_attn.kv_a_proj_with_mqa.weight", nm, sizeof nm);
    if (!st && !n_mtp && shards_has(&S, nm))
        st = qmla_error_set(err, QMLA_EFORMAT, "config.json: num_hidden_layers is %zu, but "
                            "the checkpoint holds more layers (found tensor %s)", c->L, nm);
    /* the mappings stay with the model (the MLP weights are read from them) */
    if (!st && (!(m->maps = calloc(S.n ? S.n : 1, sizeof *m->maps)) ||
                !(m->map_lens = calloc(S.n ? S.n : 1, sizeof *m->map_lens))))
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: mappings", dir);
    for (size_t i = 0; !st && i < S.n; i++)
        if (S.f[i].map) {
            m->maps[m->n_maps] = S.f[i].map;
            m->map_lens[m->n_maps++] = S.f[i].size;
            S.f[i].map = NULL;
        }
    shards_close(&S);
    if (st) {
        qmla_error_prefix(err, "%s: ", dir);
        qmla_model_free(m);
        return st;
    }
    *out = m;
    return QMLA_OK;
}

const qmla_model_config *qmla_model_cfg(const qmla_model *m) { return &m->c; }
size_t qmla_model_n_params(const qmla_model *m) { return m->n_params; }
size_t qmla_model_vocab_size(const qmla_model *m) { return m->c.V; }

/* ------------------------------------------------------------ writing */

int qmla_st_add(qmla_st_out *o, const char *name, const float *x, size_t r, size_t c,
                qmla_error *err)
{
    const size_t ne = r * (c ? c : 1);
    const int half = strcmp(o->dtype, "F32") != 0;
    uint16_t *h = NULL;
    if (half) {
        uint16_t **cv = realloc(o->conv, (o->n_conv + 1) * sizeof *cv);
        if (!cv)
            return qmla_error_set(err, QMLA_ENOMEM, "safetensors table");
        o->conv = cv;
        if (!(h = malloc((ne ? ne : 1) * sizeof *h)))
            return qmla_error_set(err, QMLA_ENOMEM, "tensor %s", name);
        o->conv[o->n_conv++] = h;
        for (size_t i = 0; i < ne; i++) {
            int ovf = 0;
            h[i] = o->dtype[0] == 'B' ? qmla_core_f32_to_bf16(x[i]) : qmla_f32_to_f16(x[i], &ovf);
            if (ovf)
                return qmla_error_set(err, QMLA_ERANGE, "tensor %s: element %zu = %g does not "
                                      "fit float16: write float32 or bfloat16", name, i,
                                      (double)x[i]);
        }
    }
    if (o->n + 1 >= o->cap) {
        size_t nc = o->cap ? 2 * o->cap : 64;
        const void **b = realloc(o->bufs, nc * sizeof *b);
        if (b)
            o->bufs = b;
        size_t *l = realloc(o->lens, nc * sizeof *l);
        if (l)
            o->lens = l;
        if (!b || !l)
            return qmla_error_set(err, QMLA_ENOMEM, "safetensors table");
        o->cap = nc;
    }
    const size_t bytes = ne * (half ? 2 : 4);
    json_t *shape = c ? json_pack("[II]", (json_int_t)r, (json_int_t)c)
                      : json_pack("[I]", (json_int_t)r);
    json_t *e = json_pack("{s:s, s:o, s:[II]}", "dtype", o->dtype, "shape", shape,
                          "data_offsets", (json_int_t)o->off, (json_int_t)(o->off + bytes));
    if (!e || json_object_set_new(o->hdr, name, e))
        return qmla_error_set(err, QMLA_ENOMEM, "safetensors header: %s", name);
    /* slot 0 is the header; tensors follow in the order added */
    o->bufs[1 + o->n] = half ? (const void *)h : (const void *)x;
    o->lens[1 + o->n] = bytes;
    o->n++;
    o->off += bytes;
    return QMLA_OK;
}

int qmla_st_add_raw(qmla_st_out *o, const char *name, const char *dtype, const void *bytes,
                    size_t nbytes, size_t r, size_t c, qmla_error *err)
{
    if (o->n + 1 >= o->cap) {
        size_t nc = o->cap ? 2 * o->cap : 64;
        const void **b = realloc(o->bufs, nc * sizeof *b);
        if (b)
            o->bufs = b;
        size_t *l = realloc(o->lens, nc * sizeof *l);
        if (l)
            o->lens = l;
        if (!b || !l)
            return qmla_error_set(err, QMLA_ENOMEM, "safetensors table");
        o->cap = nc;
    }
    json_t *shape = c ? json_pack("[II]", (json_int_t)r, (json_int_t)c)
                      : json_pack("[I]", (json_int_t)r);
    json_t *e = json_pack("{s:s, s:o, s:[II]}", "dtype", dtype, "shape", shape,
                          "data_offsets", (json_int_t)o->off, (json_int_t)(o->off + nbytes));
    if (!e || json_object_set_new(o->hdr, name, e))
        return qmla_error_set(err, QMLA_ENOMEM, "safetensors header: %s", name);
    o->bufs[1 + o->n] = bytes;
    o->lens[1 + o->n] = nbytes;
    o->n++;
    o->off += nbytes;
    return QMLA_OK;
}

int qmla_st_finish(qmla_st_out *o, qmla_error *err)
{
    if (!(o->hj = json_dumps(o->hdr, JSON_COMPACT | JSON_SORT_KEYS)))
        return qmla_error_set(err, QMLA_ENOMEM, "safetensors header");
    /* 8-byte little-endian header length, the JSON padded with spaces to
     * a multiple of 8 (so the data are aligned) */
    size_t hl = strlen(o->hj), pad = (8 - hl % 8) % 8;
    o->head = malloc(8 + hl + pad);
    if (!o->head)
        return qmla_error_set(err, QMLA_ENOMEM, "safetensors header");
    uint64_t L = hl + pad;
    for (int b = 0; b < 8; b++)
        o->head[b] = (unsigned char)(L >> (8 * b));
    memcpy(o->head + 8, o->hj, hl);
    memset(o->head + 8 + hl, ' ', pad);
    o->bufs[0] = o->head;
    o->lens[0] = 8 + hl + pad;
    return QMLA_OK;
}

void qmla_st_out_free(qmla_st_out *o)
{
    free(o->head);
    free(o->hj);
    for (size_t i = 0; i < o->n_conv; i++)
        free(o->conv[i]);
    free(o->conv);
    free(o->bufs);
    free(o->lens);
    json_decref(o->hdr);
    memset(o, 0, sizeof *o);
}
