/* lib/engine/model.c — the MLA inference engine of qmla/model.h: config.json and
 * safetensors loading (jansson), the forward pass with the absorbed MLA
 * cache through lib/attention/attention.c (and the expanded form of
 * lib/attention/expanded.c), cache configurations through the library
 * quantizer (qmla_quant_qdq, bit for bit the analysis quantizer) and the
 * sink/local policy, and bits per byte over a text. */
#include "qmla/model.h"
#include "attention/attention_int.h"
#include "qmla/attention.h"
#include "qmla/decode.h"
#include "qmla/kvcache.h"
#include "qmla/outpath.h"
#include "io/h5util.h"
#include "qmla_commit.h"

#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct layer_w {
    float *ln_in, *ln_post;           /* [D] */
    float *q_proj;                    /* [H*(d_n+d_r), D] (or q_b_proj [.., q_lora]) */
    float *q_a, *q_a_ln;              /* q_lora: [q_lora, D], [q_lora] */
    float *kv_a;                      /* [d_c + d_r, D] */
    float *kv_a_ln;                   /* [d_c] */
    float *w_uk, *w_uv;               /* [H, d_n, d_c], [H, d_v, d_c] from kv_b_proj */
    float *o_proj;                    /* [D, H*d_v] */
    float *gate, *up, *down;          /* [I, D], [I, D], [D, I] */
} layer_w;

struct qmla_model {
    qmla_model_config c;
    float *embed, *norm, *lm_head;
    layer_w *layers;
    size_t n_params;
    float **owned;
    size_t n_owned, cap_owned;
    qmla_attn_form form; /* QMLA_ATTN_AUTO by default */
};

/* ------------------------------------------------------------ JSON helpers */

static json_t *load_json(const char *path, qmla_error *err)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        qmla_error_set(err, QMLA_EFORMAT, "%s: expected a JSON file, found %s", path,
                       S_ISDIR(sb.st_mode) ? "a directory" : "no regular file");
        return NULL;
    }
    json_error_t je;
    errno = 0;
    json_t *j = json_load_file(path, 0, &je);
    if (!j && je.line < 1) /* not opened or not read: no line to name */
        qmla_error_set(err, QMLA_EIO, "%s: cannot read: %s", path,
                       errno ? strerror(errno) : je.text);
    else if (!j)
        qmla_error_set(err, QMLA_EFORMAT, "%s: line %d: %s", path, je.line, je.text);
    return j;
}

static int get_size(json_t *cfg, const char *path, const char *key, size_t *v, int required,
                    qmla_error *err)
{
    json_t *x = json_object_get(cfg, key);
    if (!x || json_is_null(x)) {
        if (required)
            return qmla_error_set(err, QMLA_EFORMAT, "%s: key \"%s\": expected an integer, "
                                  "found nothing", path, key);
        *v = 0;
        return QMLA_OK;
    }
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return qmla_error_set(err, QMLA_EFORMAT, "%s: key \"%s\": expected a non-negative "
                              "integer", path, key);
    *v = (size_t)json_integer_value(x);
    return QMLA_OK;
}

static int parse_config(const char *dir, qmla_model_config *c, size_t *first_dense,
                        size_t *n_routed, size_t *n_mtp, qmla_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *j = load_json(path, err);
    if (!j)
        return err ? err->status : QMLA_EIO;
    int st = QMLA_OK;
    memset(c, 0, sizeof *c);
    json_t *arch = json_array_get(json_object_get(j, "architectures"), 0);
    const char *mt = json_string_value(json_object_get(j, "model_type"));
    if (!json_is_string(arch)) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: \"architectures\": expected a list "
                            "naming the architecture", path);
        goto out;
    }
    snprintf(c->arch, sizeof c->arch, "%s", json_string_value(arch));
    int v3 = 0;
    if (!strcmp(c->arch, "DeepseekV3ForCausalLM"))
        v3 = 1;
    else if (strcmp(c->arch, "DeepseekV2ForCausalLM")) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: architecture %s (model_type %s) is not "
                            "supported: expected DeepseekV2ForCausalLM or "
                            "DeepseekV3ForCausalLM", path, c->arch, mt ? mt : "?");
        goto out;
    }
    size_t nkv = 0, bos = 0;
    if ((st = get_size(j, path, "vocab_size", &c->V, 1, err)) ||
        (st = get_size(j, path, "hidden_size", &c->D, 1, err)) ||
        (st = get_size(j, path, "num_hidden_layers", &c->L, 1, err)) ||
        (st = get_size(j, path, "num_attention_heads", &c->H, 1, err)) ||
        (st = get_size(j, path, "num_key_value_heads", &nkv, 0, err)) ||
        (st = get_size(j, path, "intermediate_size", &c->n_inter, 1, err)) ||
        (st = get_size(j, path, "q_lora_rank", &c->q_lora_rank, 0, err)) ||
        (st = get_size(j, path, "kv_lora_rank", &c->d_c, 1, err)) ||
        (st = get_size(j, path, "qk_nope_head_dim", &c->d_n, 1, err)) ||
        (st = get_size(j, path, "qk_rope_head_dim", &c->d_r, 1, err)) ||
        (st = get_size(j, path, "v_head_dim", &c->d_v, 1, err)) ||
        (st = get_size(j, path, "max_position_embeddings", &c->max_pos, 1, err)) ||
        (st = get_size(j, path, "bos_token_id", &bos, 1, err)) ||
        (st = get_size(j, path, "first_k_dense_replace", first_dense, 0, err)) ||
        (st = get_size(j, path, "n_routed_experts", n_routed, 0, err)) ||
        (st = get_size(j, path, "num_nextn_predict_layers", n_mtp, 0, err)))
        goto out;
    if (bos >= c->V) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"bos_token_id\": expected a token "
                            "id below vocab_size %zu, found %zu", path, c->V, bos);
        goto out;
    }
    c->bos = (int)bos;
    if (!c->V || !c->D || !c->L || !c->H || !c->d_c || !c->d_n || !c->d_v ||
        !c->d_r || (c->d_r & 1)) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: zero dimension or odd "
                            "qk_rope_head_dim %zu", path, c->d_r);
        goto out;
    }
    if (*n_routed && *first_dense < c->L) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: MoE blocks (n_routed_experts %zu from "
                            "layer first_k_dense_replace = %zu of %zu) are not supported: "
                            "expected dense blocks only", path, *n_routed, *first_dense, c->L);
        goto out;
    }
    json_t *bias = json_object_get(j, "attention_bias");
    if (json_is_true(bias)) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: attention_bias true is not supported", path);
        goto out;
    }
    json_t *act = json_object_get(j, "hidden_act");
    if (act && (!json_is_string(act) || strcmp(json_string_value(act), "silu"))) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: hidden_act: expected \"silu\"", path);
        goto out;
    }
    json_t *eps = json_object_get(j, "rms_norm_eps");
    c->eps = json_is_number(eps) ? json_number_value(eps) : 1e-6;
    if ((eps && !json_is_null(eps) && !json_is_number(eps)) || !(c->eps >= 0.0)) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"rms_norm_eps\": expected a "
                            "non-negative number, found %s", path,
                            json_is_number(eps) ? "a negative one" : "another type");
        goto out;
    }
    c->latent_eps = 1e-6;
    /* RoPE: rope_parameters (transformers 5) or rope_theta + rope_scaling */
    json_t *rp = json_object_get(j, "rope_parameters");
    if (!rp || json_is_null(rp))
        rp = json_object_get(j, "rope_scaling");
    json_t *theta = json_object_get(j, "rope_theta");
    if (rp && json_is_object(rp)) {
        const char *rt = json_string_value(json_object_get(rp, "rope_type"));
        if (!rt)
            rt = json_string_value(json_object_get(rp, "type"));
        if (rt && strcmp(rt, "default")) {
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: rope_type \"%s\" is not supported: "
                                "expected \"default\"", path, rt);
            goto out;
        }
        if (json_is_number(json_object_get(rp, "rope_theta")))
            theta = json_object_get(rp, "rope_theta");
    }
    c->rope_theta = json_is_number(theta) ? json_number_value(theta) : 10000.0;
    if (!(c->rope_theta > 0.0)) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"rope_theta\": expected a positive "
                            "number, found %g", path, c->rope_theta);
        goto out;
    }
    c->pairing = QMLA_ROPE_INTERLEAVED;
    if (v3 && json_is_false(json_object_get(j, "rope_interleave")))
        c->pairing = QMLA_ROPE_HALF;
    c->tau = 1.0 / sqrt((double)(c->d_n + c->d_r));
out:
    json_decref(j);
    return st;
}

/* ------------------------------------------------------------ safetensors */

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
} st_file;

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
    return QMLA_OK;
}

static void st_close(st_file *s)
{
    if (s->f)
        fclose(s->f);
    json_decref(s->hdr);
    s->f = NULL;
    s->hdr = NULL;
}

/* Read tensor `name` of shape [r, c] (c = 0: 1-D [r]) as float32. */
static int st_read(st_file *s, const char *name, size_t r, size_t c, float *out,
                   qmla_error *err)
{
    json_t *t = json_object_get(s->hdr, name);
    if (!t)
        return qmla_error_set(err, QMLA_EFORMAT, "%s: tensor %s: missing", s->path, name);
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
    else
        return qmla_error_set(err, QMLA_EFORMAT, "%s: tensor %s: dtype %s: expected F16, "
                              "BF16 or F32", s->path, name, dt);
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
    uint8_t *buf = malloc(n * es);
    if (!buf)
        return qmla_error_set(err, QMLA_ENOMEM, "%s: tensor %s", s->path, name);
    if (fseek(s->f, (long)(s->data_off + b0), SEEK_SET) || fread(buf, es, n, s->f) != n) {
        free(buf);
        return qmla_error_set(err, QMLA_EIO, "%s: tensor %s: short read", s->path, name);
    }
    for (size_t i = 0; i < n; i++) {
        if (es == 4) {
            uint32_t u = (uint32_t)buf[4 * i] | (uint32_t)buf[4 * i + 1] << 8 |
                         (uint32_t)buf[4 * i + 2] << 16 | (uint32_t)buf[4 * i + 3] << 24;
            memcpy(&out[i], &u, 4);
        } else {
            uint16_t h = (uint16_t)(buf[2 * i] | buf[2 * i + 1] << 8);
            out[i] = dt[0] == 'B' ? bf16_to_f32(h) : half_to_f32(h);
        }
        if (!isfinite(out[i])) {
            free(buf);
            return qmla_error_set(err, QMLA_ENONFINITE, "%s: tensor %s: element %zu is %g",
                                  s->path, name, i, (double)out[i]);
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
    json_t *idx = load_json(path, err);
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

static int shards_read(shards *S, const char *name, size_t r, size_t c, float *out,
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

void qmla_model_free(qmla_model *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m);
}

int qmla_model_load(const char *dir, qmla_model **out, qmla_error *err)
{
    *out = NULL;
    qmla_model *m = calloc(1, sizeof *m);
    if (!m)
        return qmla_error_set(err, QMLA_ENOMEM, "model");
    size_t first_dense = 0, n_routed = 0, n_mtp = 0;
    int st = parse_config(dir, &m->c, &first_dense, &n_routed, &n_mtp, err);
    if (st) {
        free(m);
        return st;
    }
    const qmla_model_config *c = &m->c;
    shards S;
    st = shards_open(dir, &S, err);
    m->layers = calloc(c->L, sizeof *m->layers);
    if (!st && !m->layers)
        st = qmla_error_set(err, QMLA_ENOMEM, "layers");
    const size_t qk = c->d_n + c->d_r, HD = c->H;
    char nm[256];
    if (!st)
        st = load_t(m, &S, "model.embed_tokens.weight", c->V, c->D, &m->embed, err);
    if (!st)
        st = load_t(m, &S, "model.norm.weight", c->D, 0, &m->norm, err);
    if (!st)
        st = load_t(m, &S, "lm_head.weight", c->V, c->D, &m->lm_head, err);
    float *kvb = NULL;
    if (!st && !(kvb = malloc(HD * (c->d_n + c->d_v) * c->d_c * sizeof(float))))
        st = qmla_error_set(err, QMLA_ENOMEM, "kv_b_proj");
    for (size_t l = 0; l < c->L && !st; l++) {
        layer_w *w = &m->layers[l];
#define LT(suffix, r, cc, dst)                                                       \
    do {                                                                             \
        snprintf(nm, sizeof nm, "model.layers.%zu.%s", l, suffix);                   \
        if (!st)                                                                     \
            st = load_t(m, &S, nm, r, cc, dst, err);                                 \
    } while (0)
        snprintf(nm, sizeof nm, "model.layers.%zu.mlp.gate.weight", l);
        if (shards_has(&S, nm)) {
            st = qmla_error_set(err, QMLA_EFORMAT, "tensor %s: MoE router found: MoE blocks "
                                "are not supported", nm);
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
        snprintf(nm, sizeof nm, "model.layers.%zu.self_attn.kv_b_proj.weight", l);
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
        LT("mlp.gate_proj.weight", c->n_inter, c->D, &w->gate);
        LT("mlp.up_proj.weight", c->n_inter, c->D, &w->up);
        LT("mlp.down_proj.weight", c->D, c->n_inter, &w->down);
#undef LT
    }
    free(kvb);
    /* a checkpoint with more layers than config.json's num_hidden_layers
     * (and no multi-token-prediction layers declared) would run truncated */
    snprintf(nm, sizeof nm, "model.layers.%zu.self_attn.kv_a_proj_with_mqa.weight", c->L);
    if (!st && !n_mtp && shards_has(&S, nm))
        st = qmla_error_set(err, QMLA_EFORMAT, "config.json: num_hidden_layers is %zu, but "
                            "the checkpoint holds more layers (found tensor %s)", c->L, nm);
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

/* ------------------------------------------------------------ cache specs */

/* the quantizer's bit widths (lib/quant/quant.c) */
static int cache_bits_ok(int b) { return b == 2 || b == 3 || b == 4 || b == 8; }

int qmla_cache_spec_parse(const char *config, const char *policy, qmla_cache_spec *s,
                          qmla_error *err)
{
    memset(s, 0, sizeof *s);
    s->group = 64;
    s->meta = QMLA_META_F16;
    if (!config)
        config = "bf16";
    if (strlen(config) >= sizeof s->name)
        return qmla_error_set(err, QMLA_EINVAL, "cache config: name too long");
    snprintf(s->name, sizeof s->name, "%s", config);
    if (!strcmp(config, "fp32") || !strcmp(config, "FP32")) {
        s->c_bits = s->r_bits = QMLA_CACHE_FP32;
    } else if (!strcmp(config, "bf16") || !strcmp(config, "BF16")) {
        s->c_bits = s->r_bits = QMLA_CACHE_BF16;
    } else {
        char base[32];
        snprintf(base, sizeof base, "%s", config);
        char *dash = strchr(base, '-');
        if (dash) {
            *dash = 0;
            if (!strcmp(dash + 1, "q8"))
                s->meta = QMLA_META_Q8;
            else if (strcmp(dash + 1, "f16"))
                return qmla_error_set(err, QMLA_EINVAL, "cache config '%s': metadata '%s': "
                                      "expected f16 or q8", config, dash + 1);
        }
        /* the engine dequantizes in place, so it takes every bit width of the
         * quantizer (the paged cache of qmla_kv_parse_config packs 2, 4, 8) */
        int cb = 0, rb = 0;
        char tail = 0;
        if (sscanf(base, "C%dR%d%c", &cb, &rb, &tail) != 2)
            return qmla_error_set(err, QMLA_EINVAL, "cache config '%s': expected fp32, bf16 "
                                  "or C<x>R<y>[-f16|-q8] (e.g. C4R4, C2R4-q8)", config);
        if (cb == 16 && rb == 16)
            return qmla_error_set(err, QMLA_EINVAL, dash ? "cache config '%s': bf16 takes "
                                  "no metadata suffix" : "cache config '%s': expected a "
                                  "quantized C{x}R{y} (16 bits is the unquantized bf16 "
                                  "configuration: name it bf16)", config);
        if (!cache_bits_ok(cb) || !cache_bits_ok(rb))
            return qmla_error_set(err, QMLA_EINVAL, "cache config '%s': %s bits: expected "
                                  "2, 3, 4 or 8, found %d", config,
                                  cache_bits_ok(cb) ? "RoPE" : "content",
                                  cache_bits_ok(cb) ? rb : cb);
        s->c_bits = cb;
        s->r_bits = rb;
        s->group = 64;
    }
    if (!policy || !strcmp(policy, "none")) {
        snprintf(s->policy, sizeof s->policy, "none");
        return QMLA_OK;
    }
    int S = -1, W = -1;
    char tail = 0;
    /* at most 9 digits each: S, W and S + W stay far inside int (a longer
     * number, which %d would have wrapped, does not match) */
    if (sscanf(policy, "sink%9d/local%9d%c", &S, &W, &tail) != 2 || S < 0 || W < 0)
        return qmla_error_set(err, QMLA_EINVAL, "policy '%s': expected none or "
                              "sink<S>/local<W> with S, W in 0..999999999 (e.g. "
                              "sink4/local128)", policy);
    s->sink = S;
    s->window = W;
    snprintf(s->policy, sizeof s->policy, "sink%d/local%d", S, W);
    return QMLA_OK;
}

/* ------------------------------------------------------------ workspace */

struct qmla_model_ws {
    size_t T_max;
    float *x, *h, *q, *qa, *q_nope, *q_rope_pre, *q_rope, *kv, *kr_pre;
    float *C, *K, *Cq, *Kq, *q_lat, *q_rope_t, *Z, *Z2, *U, *O, *Y, *g, *u;
    float *cos_, *sin_;
    float *qc, *kc, *kc2, *vn, *vn2, *kn; /* the expanded (non-absorbed) form */
    struct prefix_state *pre;             /* the clean prefix (allocated when used) */
    size_t L;
};
typedef struct prefix_state prefix_state;
static void prefix_free(prefix_state *p, size_t L);

void qmla_model_ws_free(qmla_model_ws *w)
{
    if (!w)
        return;
    float **p[] = {&w->x, &w->h, &w->q, &w->qa, &w->q_nope, &w->q_rope_pre, &w->q_rope,
                   &w->kv, &w->kr_pre, &w->C, &w->K, &w->Cq, &w->Kq, &w->q_lat,
                   &w->q_rope_t, &w->Z, &w->Z2, &w->U, &w->O, &w->Y, &w->g, &w->u,
                   &w->cos_, &w->sin_, &w->qc, &w->kc, &w->kc2, &w->vn, &w->vn2, &w->kn};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        free(*p[i]);
    prefix_free(w->pre, w->L);
    free(w);
}

int qmla_model_ws_alloc(const qmla_model *m, size_t T, qmla_model_ws **out, qmla_error *err)
{
    const qmla_model_config *c = &m->c;
    qmla_model_ws *w = calloc(1, sizeof *w);
    if (!w)
        return qmla_error_set(err, QMLA_ENOMEM, "model workspace");
    w->T_max = T;
    w->L = c->L;
    const size_t H = c->H, qk = c->d_n + c->d_r;
    struct { float **p; size_t n; } a[] = {
        {&w->x, T * c->D}, {&w->h, T * c->D}, {&w->q, T * H * qk},
        {&w->qa, T * (c->q_lora_rank ? c->q_lora_rank : 1)},
        {&w->q_nope, H * T * c->d_n}, {&w->q_rope_pre, H * T * c->d_r},
        {&w->q_rope, H * T * c->d_r}, {&w->kv, T * (c->d_c + c->d_r)},
        {&w->kr_pre, T * c->d_r}, {&w->C, T * c->d_c}, {&w->K, T * c->d_r},
        {&w->Cq, T * c->d_c}, {&w->Kq, T * c->d_r}, {&w->q_lat, T * H * c->d_c},
        {&w->q_rope_t, T * H * c->d_r}, {&w->Z, T * H * T}, {&w->Z2, T * H * T},
        {&w->U, T * H * c->d_c}, {&w->O, T * H * c->d_v}, {&w->Y, T * c->D},
        {&w->g, T * c->n_inter}, {&w->u, T * c->n_inter}, {&w->cos_, T * c->d_r / 2},
        {&w->sin_, T * c->d_r / 2}, {&w->qc, H * T * qk}, {&w->kc, H * T * qk},
        {&w->kc2, H * T * qk}, {&w->vn, T * H * c->d_v}, {&w->vn2, T * H * c->d_v},
        {&w->kn, T * H * c->d_n}};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
        if (!(*a[i].p = calloc(a[i].n ? a[i].n : 1, sizeof(float)))) {
            qmla_model_ws_free(w);
            return qmla_error_set(err, QMLA_ENOMEM, "model workspace for T = %zu", T);
        }
    /* RoPE tables as transformers computes them in float32:
     * inv_freq[i] = 1 / theta^(2i/d_r), angle = t * inv_freq[i]. */
    const size_t P = c->d_r / 2;
    for (size_t i = 0; i < P; i++) {
        float inv = (float)(1.0 / pow(c->rope_theta, (double)(2 * i) / (double)c->d_r));
        for (size_t t = 0; t < T; t++) {
            float ang = (float)t * inv;
            w->cos_[t * P + i] = (float)cos((double)ang);
            w->sin_[t * P + i] = (float)sin((double)ang);
        }
    }
    *out = w;
    return QMLA_OK;
}

/* ------------------------------------------------------------ forward */

static void rmsnorm(size_t T, size_t n, double eps, const float *x, size_t ldx,
                    const float *g, float *y, size_t ldy)
{
    for (size_t t = 0; t < T; t++) {
        const float *xr = x + t * ldx;
        float *yr = y + t * ldy;
        double ss = 0.0;
        for (size_t i = 0; i < n; i++)
            ss += (double)xr[i] * xr[i];
        const float r = (float)(1.0 / sqrt(ss / (double)n + eps));
        for (size_t i = 0; i < n; i++)
            yr[i] = g[i] * (xr[i] * r);
    }
}

static void round_bf16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = qmla_core_bf16_to_f32(qmla_core_f32_to_bf16(x[i]));
}

/* Write one layer's cache [C ; K] under the spec: C, K become the protected
 * (BF16 or fp32) values, Cq, Kq the dequantized packed copies. */
static int write_cache(const qmla_cache_spec *cs, size_t layer, size_t T, size_t d_c,
                       size_t d_r, float *C, float *K, float *Cq, float *Kq, qmla_error *err)
{
    if (cs->c_bits == QMLA_CACHE_FP32)
        return QMLA_OK;
    if (cs->c_bits != QMLA_CACHE_BF16) {
        const qmla_cache_hook *hk = cs->hook;
        memcpy(Cq, C, T * d_c * sizeof(float));
        memcpy(Kq, K, T * d_r * sizeof(float));
        for (int path = 0; path < 2; path++) {
            float *x = path ? Kq : Cq;
            size_t wdt = path ? d_r : d_c;
            qmla_quant_params p = {path ? cs->r_bits : cs->c_bits, cs->group, cs->meta};
            int st = QMLA_OK;
            if (hk && hk->forward)
                st = hk->forward(hk->ctx, layer, path, x, T, wdt, err);
            if (!st)
                st = qmla_quant_qdq(&p, x, T, wdt, NULL, NULL, NULL, x, err);
            if (!st && hk && hk->inverse)
                st = hk->inverse(hk->ctx, layer, path, x, T, wdt, err);
            if (st)
                return qmla_error_prefix(err, "layer %zu, %s path: ", layer,
                                         path ? "RoPE" : "content");
            round_bf16(x, T * wdt);
        }
    }
    round_bf16(C, T * d_c);
    round_bf16(K, T * d_r);
    return QMLA_OK;
}

int qmla_model_expanded_cheaper(const qmla_model_config *c, size_t T)
{
    /* multiply-adds per token and head over one cache representation, causal
     * average T/2 keys: the up-projections (expanded) cost what absorption
     * plus w_uv cost (absorbed). A mixed policy reads two representations;
     * the choice does not depend on the policy, so that every configuration
     * of one model and window length runs in the same form. */
    const double t2 = (double)T / 2.0, nv = (double)(c->d_n + c->d_v) * c->d_c;
    return nv + t2 * (double)(c->d_n + c->d_r + c->d_v) < nv + t2 * (double)(2 * c->d_c + c->d_r);
}

void qmla_model_set_attn_form(qmla_model *m, qmla_attn_form f) { m->form = f; }

static void silu_mul(size_t n, float *g, const float *u)
{
    for (size_t i = 0; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

int qmla_model_attn_weights(const qmla_model *m, size_t l, const float **w_uk,
                            const float **w_uv, const float **w_o, const float **kv_norm,
                            qmla_error *err)
{
    if (l >= m->c.L)
        return qmla_error_set(err, QMLA_EINVAL, "layer %zu: expected a layer below %zu", l,
                              m->c.L);
    *w_uk = m->layers[l].w_uk;
    *w_uv = m->layers[l].w_uv;
    *w_o = m->layers[l].o_proj;
    *kv_norm = m->layers[l].kv_a_ln;
    return QMLA_OK;
}

int qmla_model_forward(const qmla_model *m, const qmla_cache_spec *cs, qmla_model_ws *w,
                       const int32_t *tokens, size_t T, float *logits, qmla_error *err)
{
    return qmla_model_forward_tap(m, cs, w, tokens, T, logits, NULL, err);
}

/* ---- the clean prefix of the sink/local policy ----
 * Under sink S / local W, query t < P = S + W reads every key in its
 * protected (BF16) value, in every layer, so the forward pass of tokens
 * 0..P-1 is the BF16 cache's whatever the packed configuration (its packed
 * copies are only read by later queries). A protected configuration in the
 * expanded form is therefore computed in two phases: tokens 0..P-1 as a BF16
 * forward pass of length P (phase 1, the same for every protected
 * configuration of the model with that P), then tokens P..T-1 (phase 2), whose
 * attention reads the prefix's keys and values from phase 1's state.
 * qmla_model_ppl_multi runs phase 1 once per window for all such
 * configurations; running a configuration alone takes the same two phases,
 * so sharing changes no bit. */
struct prefix_state {
    size_t P;                 /* rows held (0: none) */
    float **C, **K;           /* [L][P, d_c], [L][P, d_r]: cache rows before rounding */
    float **kc, **vn;         /* [L][H, P, d_n + d_r], [L][P, H d_v]: BF16 keys, values */
    float *logits;            /* [P, V] */
};

static void prefix_free(prefix_state *p, size_t L)
{
    if (!p)
        return;
    for (size_t l = 0; l < L; l++) {
        if (p->C) free(p->C[l]);
        if (p->K) free(p->K[l]);
        if (p->kc) free(p->kc[l]);
        if (p->vn) free(p->vn[l]);
    }
    free(p->C);
    free(p->K);
    free(p->kc);
    free(p->vn);
    free(p->logits);
    free(p);
}

static int prefix_alloc(const qmla_model_config *c, qmla_model_ws *w, qmla_error *err)
{
    if (w->pre)
        return QMLA_OK;
    const size_t T = w->T_max, L = c->L, qk = c->d_n + c->d_r;
    prefix_state *p = calloc(1, sizeof *p);
    int ok = p && (p->C = calloc(L, sizeof(float *))) && (p->K = calloc(L, sizeof(float *))) &&
             (p->kc = calloc(L, sizeof(float *))) && (p->vn = calloc(L, sizeof(float *))) &&
             (p->logits = malloc(T * c->V * sizeof(float)));
    for (size_t l = 0; l < L && ok; l++)
        ok = (p->C[l] = malloc(T * c->d_c * sizeof(float))) &&
             (p->K[l] = malloc(T * c->d_r * sizeof(float))) &&
             (p->kc[l] = malloc(c->H * T * qk * sizeof(float))) &&
             (p->vn[l] = malloc(T * c->H * c->d_v * sizeof(float)));
    if (!ok) {
        prefix_free(p, L);
        return qmla_error_set(err, QMLA_ENOMEM, "model workspace: the clean prefix for T = %zu",
                              T);
    }
    w->pre = p;
    return QMLA_OK;
}

/* The prefix length P of a configuration computed in two phases, 0 when it
 * is computed in one (unquantized caches, no policy, the absorbed form, or
 * P >= T). */
static size_t clean_prefix(const qmla_model *m, const qmla_cache_spec *cs, size_t T)
{
    const int quant = cs->c_bits != QMLA_CACHE_FP32 && cs->c_bits != QMLA_CACHE_BF16;
    if (!quant || (cs->sink <= 0 && cs->window <= 0))
        return 0;
    const int expanded = m->form == QMLA_ATTN_EXPANDED ||
                         (m->form == QMLA_ATTN_AUTO && qmla_model_expanded_cheaper(&m->c, T));
    const size_t P = (size_t)cs->sink + (size_t)cs->window;
    return expanded && P < T ? P : 0;
}

/* The forward pass of rows t0..T-1 of tokens[0..T) (all of them for t0 = 0):
 * t0 > 0 is phase 2 (expanded form, a mixed policy, the prefix state holding
 * rows 0..t0-1, no tap); save (with t0 = 0) is phase 1: the rows' cache,
 * keys and values are kept in the prefix state. logits rows t0..T-1. */
static int forward_rows(const qmla_model *m, const qmla_cache_spec *cs, qmla_model_ws *w,
                        const int32_t *tokens, size_t T, size_t t0, int save, int expanded,
                        float *logits, const qmla_model_tap *tap, qmla_error *err)
{
    const qmla_model_config *c = &m->c;
    const size_t n_run = tap && tap->n_layers && tap->n_layers < c->L ? tap->n_layers : c->L;
    const size_t D = c->D, H = c->H, qk = c->d_n + c->d_r, dc = c->d_c, dr = c->d_r;
    const size_t n = T - t0, P2 = dr / 2, NI = c->n_inter;
    prefix_state *pre = w->pre;
    for (size_t t = t0; t < T; t++)
        memcpy(w->x + t * D, m->embed + (size_t)tokens[t] * D, D * sizeof(float));
    const qmla_exec ex1 = qmla_exec_cpu(1);
    const qmla_mla_dims dims = {H, D, dc, c->d_n, dr, c->d_v, c->tau};
    const int quant = cs->c_bits != QMLA_CACHE_FP32 && cs->c_bits != QMLA_CACHE_BF16;
    const int mixed = quant && (cs->sink > 0 || cs->window > 0);
    for (size_t l = 0; l < n_run; l++) {
        const layer_w *lw = &m->layers[l];
        rmsnorm(n, D, c->eps, w->x + t0 * D, D, lw->ln_in, w->h + t0 * D, D);
        /* queries */
        if (c->q_lora_rank) {
            const size_t qr = c->q_lora_rank;
            qmla_linear(n, D, qr, w->h + t0 * D, lw->q_a, w->qa + t0 * qr);
            rmsnorm(n, qr, c->latent_eps, w->qa + t0 * qr, qr, lw->q_a_ln, w->qa + t0 * qr, qr);
            qmla_linear(n, qr, H * qk, w->qa + t0 * qr, lw->q_proj, w->q + t0 * H * qk);
        } else {
            qmla_linear(n, D, H * qk, w->h + t0 * D, lw->q_proj, w->q + t0 * H * qk);
        }
        for (size_t h = 0; h < H; h++)
            for (size_t t = t0; t < T; t++) {
                const float *src = w->q + (t * H + h) * qk;
                memcpy(w->q_nope + (h * T + t) * c->d_n, src, c->d_n * sizeof(float));
                memcpy(w->q_rope_pre + (h * T + t) * dr, src + c->d_n, dr * sizeof(float));
            }
        if (!t0)
            qmla_rope_rotate(H, T, dr, c->pairing, w->cos_, w->sin_, w->q_rope_pre, w->q_rope);
        else
            for (size_t h = 0; h < H; h++)
                qmla_rope_rotate(1, n, dr, c->pairing, w->cos_ + t0 * P2, w->sin_ + t0 * P2,
                                 w->q_rope_pre + (h * T + t0) * dr,
                                 w->q_rope + (h * T + t0) * dr);
        /* latent and RoPE key: the cache row */
        qmla_linear(n, D, dc + dr, w->h + t0 * D, lw->kv_a, w->kv + t0 * (dc + dr));
        rmsnorm(n, dc, c->latent_eps, w->kv + t0 * (dc + dr), dc + dr, lw->kv_a_ln,
                w->C + t0 * dc, dc);
        for (size_t t = t0; t < T; t++)
            memcpy(w->kr_pre + t * dr, w->kv + t * (dc + dr) + dc, dr * sizeof(float));
        qmla_rope_rotate(1, n, dr, c->pairing, w->cos_ + t0 * P2, w->sin_ + t0 * P2,
                         w->kr_pre + t0 * dr, w->K + t0 * dr);
        if (t0) {
            memcpy(w->C, pre->C[l], t0 * dc * sizeof(float));
            memcpy(w->K, pre->K[l], t0 * dr * sizeof(float));
        }
        if (save) {
            memcpy(pre->C[l], w->C, T * dc * sizeof(float));
            memcpy(pre->K[l], w->K, T * dr * sizeof(float));
        }
        int st = write_cache(cs, l, T, dc, dr, w->C, w->K, w->Cq, w->Kq, err);
        if (st)
            return st;
        const qmla_mla_weights mw = {lw->w_uk, lw->w_uv, lw->o_proj};
        const float tau = (float)c->tau;
        const size_t S = (size_t)cs->sink, W = (size_t)cs->window;
        /* the representation attention reads (unless mixed) */
        const float *Cr = quant ? w->Cq : w->C, *Kr = quant ? w->Kq : w->K;
        if (expanded) {
            const size_t dn = c->d_n, dv = c->d_v;
            for (size_t h = 0; h < H; h++)
                for (size_t t = t0; t < T; t++) {
                    float *dst = w->qc + (h * T + t) * qk;
                    memcpy(dst, w->q_nope + (h * T + t) * dn, dn * sizeof(float));
                    memcpy(dst + dn, w->q_rope + (h * T + t) * dr, dr * sizeof(float));
                }
            qmla_attn_expand_kv(H, dc, dn, dr, dv, lw->w_uk, lw->w_uv, T, t0, T,
                                mixed ? w->C : Cr, mixed ? w->K : Kr, w->kn, w->kc, w->vn);
            if (t0) {
                for (size_t h = 0; h < H; h++)
                    memcpy(w->kc + h * T * qk, pre->kc[l] + h * t0 * qk,
                           t0 * qk * sizeof(float));
                memcpy(w->vn, pre->vn[l], t0 * H * dv * sizeof(float));
            }
            if (save) {
                memcpy(pre->kc[l], w->kc, H * T * qk * sizeof(float));
                memcpy(pre->vn[l], w->vn, T * H * dv * sizeof(float));
            }
            if (mixed) {
                size_t p0, p1;
                qmla_attn_band_packed_rows(T, S, W, &p0, &p1);
                qmla_attn_expand_kv(H, dc, dn, dr, dv, lw->w_uk, lw->w_uv, T, p0, p1, w->Cq,
                                    w->Kq, w->kn, w->kc2, w->vn2);
                qmla_attn_expand_band(&ex1, H, T, t0, qk, dv, tau, S, W, w->qc, w->kc, w->vn,
                                      w->kc2, w->vn2, w->Z, w->Z2, w->O);
            } else {
                qmla_attn_expand_logits(H, T, qk, tau, w->qc, w->kc, w->Z);
                qmla_attn_softmax(&ex1, H, T, w->Z, w->Z);
                qmla_attn_expand_aggregate(H, T, dv, w->Z, w->vn, 0.0f, w->O);
            }
            qmla_linear(n, H * dv, D, w->O + t0 * H * dv, lw->o_proj, w->Y + t0 * D);
        } else {
            qmla_attn_absorb(&ex1, &dims, T, w->q_nope, lw->w_uk, w->q_lat);
            qmla_attn_tokens_major(H, T, dr, w->q_rope, w->q_rope_t);
            if (!mixed) {
                qmla_attn_from_queries(&ex1, &dims, T, &mw, w->q_lat, w->q_rope_t, Cr, Kr,
                                       w->Z, w->Z, w->U, w->O, w->Y);
            } else {
                /* Z from the protected values where key s is protected for
                 * query i (s < S or i - s < W), from the packed copies
                 * elsewhere; one softmax; A split by representation. */
                qmla_attn_logits_acc(&ex1, H, T, dc, tau, w->q_lat, w->C, 0.0f, w->Z);
                qmla_attn_logits_acc(&ex1, H, T, dr, tau, w->q_rope_t, w->K, 1.0f, w->Z);
                qmla_attn_logits_acc(&ex1, H, T, dc, tau, w->q_lat, w->Cq, 0.0f, w->Z2);
                qmla_attn_logits_acc(&ex1, H, T, dr, tau, w->q_rope_t, w->Kq, 1.0f, w->Z2);
                qmla_attn_mix_logits(H, T, S, W, w->Z, w->Z2);
                qmla_attn_softmax(&ex1, H, T, w->Z, w->Z);
                qmla_attn_split(H, T, S, W, w->Z, w->Z2);
                qmla_attn_aggregate(&ex1, H, T, dc, w->Z, w->C, 0.0f, w->U);
                qmla_attn_aggregate(&ex1, H, T, dc, w->Z2, w->Cq, 1.0f, w->U);
                qmla_attn_project(&ex1, &dims, T, 1, &mw, w->U, w->O, w->Y);
            }
        }
        if (tap && tap->layer) {
            const qmla_model_tap_layer d = {l, T, w->h, w->C, w->kr_pre, w->K,
                                            w->q_nope, w->q_rope_pre, w->q_rope,
                                            w->cos_, w->sin_, w->Y};
            if ((st = tap->layer(tap->ctx, &d, err)))
                return st;
        }
        for (size_t i = t0 * D; i < T * D; i++)
            w->x[i] += w->Y[i];
        /* SwiGLU MLP */
        rmsnorm(n, D, c->eps, w->x + t0 * D, D, lw->ln_post, w->h + t0 * D, D);
        qmla_linear(n, D, NI, w->h + t0 * D, lw->gate, w->g + t0 * NI);
        qmla_linear(n, D, NI, w->h + t0 * D, lw->up, w->u + t0 * NI);
        silu_mul(n * NI, w->g + t0 * NI, w->u + t0 * NI);
        qmla_linear(n, NI, D, w->g + t0 * NI, lw->down, w->Y + t0 * D);
        for (size_t i = t0 * D; i < T * D; i++)
            w->x[i] += w->Y[i];
    }
    if (!logits)
        return QMLA_OK;
    rmsnorm(n, D, c->eps, w->x + t0 * D, D, m->norm, w->h + t0 * D, D);
    qmla_linear(n, D, c->V, w->h + t0 * D, m->lm_head, logits + t0 * c->V);
    return QMLA_OK;
}

/* Phase 1 for tokens[0..P): the BF16 forward of length P, expanded form,
 * kept in the prefix state (its logits in pre->logits). */
static int prefix_forward(const qmla_model *m, qmla_model_ws *w, const int32_t *tokens,
                          size_t P, qmla_error *err)
{
    int st = prefix_alloc(&m->c, w, err);
    if (st)
        return st;
    qmla_cache_spec bf;
    memset(&bf, 0, sizeof bf);
    bf.c_bits = bf.r_bits = QMLA_CACHE_BF16;
    w->pre->P = 0;
    st = forward_rows(m, &bf, w, tokens, P, 0, 1, 1, w->pre->logits, NULL, err);
    if (!st)
        w->pre->P = P;
    return st;
}

static int forward_check(const qmla_model *m, const qmla_model_ws *w, const int32_t *tokens,
                         size_t T, qmla_error *err)
{
    if (T == 0 || T > w->T_max)
        return qmla_error_set(err, QMLA_EINVAL, "forward: T = %zu outside [1, %zu]", T,
                              w->T_max);
    for (size_t t = 0; t < T; t++)
        if (tokens[t] < 0 || (size_t)tokens[t] >= m->c.V)
            return qmla_error_set(err, QMLA_EINVAL, "forward: token %zu is %d, outside "
                                  "[0, %zu)", t, (int)tokens[t], m->c.V);
    return QMLA_OK;
}

int qmla_model_forward_tap(const qmla_model *m, const qmla_cache_spec *cs,
                           qmla_model_ws *w, const int32_t *tokens, size_t T,
                           float *logits, const qmla_model_tap *tap, qmla_error *err)
{
    const qmla_model_config *c = &m->c;
    const size_t n_run = tap && tap->n_layers && tap->n_layers < c->L ? tap->n_layers : c->L;
    if (n_run < c->L && logits)
        return qmla_error_set(err, QMLA_EINVAL, "forward: logits need all %zu layers, "
                              "the tap stops after %zu", c->L, n_run);
    int st = forward_check(m, w, tokens, T, err);
    if (st)
        return st;
    const size_t P = tap || !logits ? 0 : clean_prefix(m, cs, T);
    if (P) {
        if ((st = prefix_forward(m, w, tokens, P, err)) ||
            (st = forward_rows(m, cs, w, tokens, T, P, 0, 1, logits, NULL, err)))
            return st;
        memcpy(logits, w->pre->logits, P * c->V * sizeof(float));
        return QMLA_OK;
    }
    const int expanded = m->form == QMLA_ATTN_EXPANDED ||
                         (m->form == QMLA_ATTN_AUTO && qmla_model_expanded_cheaper(c, T));
    return forward_rows(m, cs, w, tokens, T, 0, 0, expanded, logits, tap, err);
}

/* ------------------------------------------------------------ perplexity */

/* Sum over t of -log softmax(row t)[target t] in double, rows t < P from
 * the prefix logits and the rest from lg (P = 0: all from lg). */
static double window_nll(const float *lg, const float *pre, size_t P, size_t T, size_t V,
                         const uint8_t *win)
{
    double s = 0.0;
    for (size_t t = 0; t < T; t++) {
        const float *r = (t < P ? pre : lg) + t * V;
        float mx = r[0];
        for (size_t v = 1; v < V; v++)
            mx = r[v] > mx ? r[v] : mx;
        double z = 0.0;
        for (size_t v = 0; v < V; v++)
            z += exp((double)r[v] - mx);
        s += log(z) + mx - (double)r[win[t]];
    }
    return s;
}

int qmla_model_ppl(const qmla_model *m, const qmla_exec *ex, const qmla_cache_spec *cs,
                   const uint8_t *text, size_t n_bytes, size_t context, size_t max_windows,
                   qmla_ppl_result *res, qmla_error *err)
{
    return qmla_model_ppl_multi(m, ex, cs, 1, text, n_bytes, context, max_windows, res, err);
}

int qmla_model_ppl_multi(const qmla_model *m, const qmla_exec *ex, const qmla_cache_spec *cs,
                         size_t n_cs, const uint8_t *text, size_t n_bytes, size_t context,
                         size_t max_windows, qmla_ppl_result *res, qmla_error *err)
{
    return qmla_model_ppl_multi_progress(m, ex, cs, n_cs, text, n_bytes, context, max_windows,
                                         NULL, NULL, NULL, res, err);
}

int qmla_model_ppl_multi_progress(const qmla_model *m, const qmla_exec *ex,
                                  const qmla_cache_spec *cs, size_t n_cs, const uint8_t *text,
                                  size_t n_bytes, size_t context, size_t max_windows,
                                  qmla_progress_fn progress, void *progress_ctx,
                                  int *stopped, qmla_ppl_result *res, qmla_error *err)
{
    const qmla_model_config *c = &m->c;
    if (stopped)
        *stopped = 0;
    memset(res, 0, n_cs * sizeof *res);
    if (context < 1 || context > c->max_pos)
        return qmla_error_set(err, QMLA_EINVAL, "context %zu: expected 1 to "
                              "max_position_embeddings %zu", context, c->max_pos);
    if ((size_t)c->bos >= c->V || c->V < 256)
        return qmla_error_set(err, QMLA_EINVAL, "byte-level scoring needs vocab >= 256 and "
                              "a BOS id below it (vocab %zu, BOS %d)", c->V, c->bos);
    size_t n = n_bytes / context;
    if (n == 0)
        return qmla_error_set(err, QMLA_EINVAL, "text of %zu bytes holds no window of %zu",
                              n_bytes, context);
    if (max_windows && max_windows < n)
        n = max_windows;
    double *nll = calloc(n * (n_cs ? n_cs : 1), sizeof *nll);
    if (!nll)
        return qmla_error_set(err, QMLA_ENOMEM, "%zu windows", n);
    int st_all = QMLA_OK, halt = 0; /* halt: the progress callback stopped it */
    size_t done = 0;
    const int nt = qmla_exec_threads(ex);
#pragma omp parallel num_threads(nt)
    {
        qmla_error e;
        qmla_error_clear(&e);
        qmla_model_ws *ws = NULL;
        int32_t *tok = malloc(context * sizeof *tok);
        float *lg = malloc(context * c->V * sizeof *lg);
        int st = (!tok || !lg) ? qmla_error_set(&e, QMLA_ENOMEM, "logits") :
                 qmla_model_ws_alloc(m, context, &ws, &e);
#pragma omp for schedule(dynamic, 1)
        for (size_t k = 0; k < n; k++) {
            int stop, halted;
#pragma omp atomic read
            stop = st_all;
#pragma omp atomic read
            halted = halt;
            if (st || stop || halted)
                continue;
            const uint8_t *win = text + k * context;
            tok[0] = c->bos;
            for (size_t t = 1; t < context; t++)
                tok[t] = win[t - 1];
            if ((st = forward_check(m, ws, tok, context, &e)))
                continue;
            size_t have = 0; /* the prefix length phase 1 holds for this window */
            for (size_t j = 0; j < n_cs && !st; j++) {
                const size_t P = clean_prefix(m, &cs[j], context);
                if (P) {
                    if (P != have) {
                        st = prefix_forward(m, ws, tok, P, &e);
                        have = st ? 0 : P;
                    }
                    if (!st)
                        st = forward_rows(m, &cs[j], ws, tok, context, P, 0, 1, lg, NULL, &e);
                } else {
                    st = qmla_model_forward(m, &cs[j], ws, tok, context, lg, &e);
                }
                if (st) {
                    if (n_cs > 1)
                        qmla_error_prefix(&e, "%s %s: ", cs[j].name, cs[j].policy);
                    continue;
                }
                nll[k * n_cs + j] = window_nll(lg, P ? ws->pre->logits : NULL, P, context,
                                               c->V, win);
                /* never a NaN in the results: name where it went non-finite */
                if (!isfinite(nll[k * n_cs + j]))
                    st = qmla_error_set(&e, QMLA_ENONFINITE, "config %s, policy %s, window "
                                        "%zu (bytes %zu..%zu): the NLL is %g (the forward "
                                        "pass went non-finite)", cs[j].name, cs[j].policy, k,
                                        k * context, (k + 1) * context - 1,
                                        nll[k * n_cs + j]);
            }
            /* every finished window is reported, one call at a time (the
             * callback need not be thread-safe), none after a stop */
            if (!st && progress) {
#pragma omp critical(qmla_model_ppl_progress)
                {
                    int h;
#pragma omp atomic read
                    h = halt;
                    if (!h && progress(progress_ctx, ++done, n, 0)) {
#pragma omp atomic write
                        halt = 1;
                    }
                }
            }
        }
        if (st) {
#pragma omp critical(qmla_model_ppl_err)
            {
                int cur;
#pragma omp atomic read
                cur = st_all;
                if (!cur) {
                    if (err)
                        *err = e;
#pragma omp atomic write
                    st_all = st;
                }
            }
        }
        qmla_model_ws_free(ws);
        free(tok);
        free(lg);
    }
    if (!st_all && halt && stopped)
        *stopped = 1;
    if (!st_all && !halt)
        for (size_t j = 0; j < n_cs; j++) {
            qmla_ppl_result *r = &res[j];
            for (size_t k = 0; k < n; k++)
                r->nll_sum += nll[k * n_cs + j];
            r->windows = n;
            r->tokens = n * context;
            r->nll_nats_per_token = r->nll_sum / (double)r->tokens;
            r->bits_per_byte = r->nll_nats_per_token / log(2.0);
        }
    free(nll);
    return st_all;
}

/* ------------------------------------------------------------ results */

#define H5TRY(x, what) QMLA_H5_TRY_TO(out, x, what)

static int row_attrs(hid_t g, const char *path, const qmla_ppl_row *r, qmla_error *err)
{
    int st = QMLA_OK;
    H5TRY(qmla_h5_attr_dbl(g, "bits_per_byte", r->r.bits_per_byte), "bits_per_byte");
    H5TRY(qmla_h5_attr_dbl(g, "nll_nats_per_token", r->r.nll_nats_per_token),
          "nll_nats_per_token");
    H5TRY(qmla_h5_attr_int(g, "tokens", (long long)r->r.tokens), "tokens");
    H5TRY(qmla_h5_attr_int(g, "windows", (long long)r->r.windows), "windows");
    H5TRY(qmla_h5_attr_int(g, "context", (long long)r->context), "context");
    H5TRY(qmla_h5_attr_str(g, "config", r->config), "config");
    H5TRY(qmla_h5_attr_str(g, "method", r->method), "method");
    H5TRY(qmla_h5_attr_str(g, "policy", r->policy), "policy");
    H5TRY(qmla_h5_attr_str(g, "text", r->text), "text");
    H5TRY(qmla_h5_attr_str(g, "transforms", r->transforms ? r->transforms : ""), "transforms");
out:
    return st;
}

/* /ppl_table: the rows as a table (qmla/table.h: one 1-D dataset per
 * column) for qmla export and qmla figures; delta_bits_per_byte is against
 * the bf16 row (method none) of the same text, NaN when there is none. */
static int ppl_table(hid_t f, const char *path, const qmla_ppl_row *rows, size_t n,
                     qmla_error *err)
{
    int st = QMLA_OK;
    hid_t g = -1;
    const char **str[5];
    for (int k = 0; k < 5; k++)
        str[k] = calloc(n, sizeof(char *));
    long long *ti = calloc(n, sizeof *ti), *ctx = calloc(n, sizeof *ctx),
              *tok = calloc(n, sizeof *tok);
    double *bpb = calloc(n, sizeof *bpb), *nll = calloc(n, sizeof *nll),
           *dl = calloc(n, sizeof *dl);
    if (!str[0] || !str[1] || !str[2] || !str[3] || !str[4] || !ti || !ctx || !tok || !bpb ||
        !nll || !dl) {
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: ppl_table", path);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const qmla_ppl_row *r = &rows[i];
        str[0][i] = r->text;
        str[1][i] = r->config;
        str[2][i] = r->method;
        str[3][i] = r->policy;
        str[4][i] = r->transforms ? r->transforms : "";
        /* text index: order of first appearance */
        ti[i] = 0;
        for (size_t j = 0, k = 0; j < n; j++) {
            int first = 1;
            for (size_t q = 0; q < j && first; q++)
                first = strcmp(rows[q].text, rows[j].text) != 0;
            if (!first)
                continue;
            if (!strcmp(rows[j].text, r->text)) {
                ti[i] = (long long)k;
                break;
            }
            k++;
        }
        ctx[i] = (long long)r->context;
        tok[i] = (long long)r->r.tokens;
        bpb[i] = r->r.bits_per_byte;
        nll[i] = r->r.nll_nats_per_token;
        dl[i] = NAN;
        for (size_t j = 0; j < n; j++)
            if (!strcmp(rows[j].text, r->text) && !strcmp(rows[j].config, "bf16") &&
                !strcmp(rows[j].method, "none"))
                dl[i] = r->r.bits_per_byte - rows[j].r.bits_per_byte;
    }
    if (H5Lexists(f, "ppl_table", H5P_DEFAULT) > 0)
        H5TRY(H5Ldelete(f, "ppl_table", H5P_DEFAULT), "ppl_table");
    H5TRY(g = H5Gcreate2(f, "ppl_table", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "ppl_table");
    H5TRY(qmla_h5_dset_strs(g, "text", n, str[0], "text file as given"), "ppl_table/text");
    H5TRY(qmla_h5_dset_1d(g, "text_index", H5T_STD_I64LE, H5T_NATIVE_LLONG, n, ti,
                          "index of the text in the order given", ""), "ppl_table/text_index");
    H5TRY(qmla_h5_dset_strs(g, "config", n, str[1], "cache configuration"), "ppl_table/config");
    H5TRY(qmla_h5_dset_strs(g, "method", n, str[2], "none, RTN, or the transforms' method"),
          "ppl_table/method");
    H5TRY(qmla_h5_dset_strs(g, "policy", n, str[3], "none or sink<S>/local<W>"),
          "ppl_table/policy");
    H5TRY(qmla_h5_dset_strs(g, "transforms", n, str[4], "transforms file folded in"),
          "ppl_table/transforms");
    H5TRY(qmla_h5_dset_1d(g, "context", H5T_STD_I64LE, H5T_NATIVE_LLONG, n, ctx,
                          "window length", "tokens"), "ppl_table/context");
    H5TRY(qmla_h5_dset_1d(g, "tokens", H5T_STD_I64LE, H5T_NATIVE_LLONG, n, tok,
                          "targets scored", "tokens"), "ppl_table/tokens");
    H5TRY(qmla_h5_dset_1d(g, "bits_per_byte", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, bpb,
                          "mean NLL / ln 2 (one token per byte)", "bit/byte"),
          "ppl_table/bits_per_byte");
    H5TRY(qmla_h5_dset_1d(g, "nll_nats_per_token", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, nll,
                          "mean NLL", "nat/token"), "ppl_table/nll_nats_per_token");
    H5TRY(qmla_h5_dset_1d(g, "delta_bits_per_byte", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, dl,
                          "bits_per_byte minus the bf16 row's of the same text", "bit/byte"),
          "ppl_table/delta_bits_per_byte");
out:
    if (g >= 0)
        H5Gclose(g);
    for (int k = 0; k < 5; k++)
        free(str[k]);
    free(ti);
    free(ctx);
    free(tok);
    free(bpb);
    free(nll);
    free(dl);
    return st;
}

int qmla_ppl_save(const char *path, const char *model_dir, const char *command_line,
                  const qmla_ppl_row *rows, size_t n, qmla_error *err)
{
    int st = QMLA_OK, created = 0;
    hid_t g = -1, f = -1;
    if (n == 0)
        return qmla_error_set(err, QMLA_EINVAL, "%s: no perplexity rows to write", path);
    h5_quiet q = qmla_h5_quiet_begin();
    f = qmla_h5_open_mem(path, &created, err);
    if (f < 0) {
        st = err ? err->status : QMLA_EIO;
        goto out;
    }
    if (created) {
        H5TRY(qmla_h5_attr_str(f, "format", "qmla-results"), "attribute format");
        H5TRY(qmla_h5_attr_int(f, "format_version", 1), "attribute format_version");
    }
    if (H5Lexists(f, "ppl", H5P_DEFAULT) > 0)
        H5TRY(H5Ldelete(f, "ppl", H5P_DEFAULT), "ppl");
    H5TRY(g = H5Gcreate2(f, "ppl", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "ppl");
    H5TRY(qmla_h5_attr_str(g, "model_dir", model_dir), "model_dir");
    H5TRY(qmla_h5_attr_str(g, "command_line", command_line ? command_line : ""),
          "command_line");
    H5TRY(qmla_h5_attr_int(g, "rows", (long long)n), "rows");
    H5TRY(qmla_h5_attr_str(g, "tool_version", qmla_version()), "tool_version");
    H5TRY(qmla_h5_attr_str(g, "git_commit", QMLA_GIT_COMMIT), "git_commit");
    if ((st = row_attrs(g, path, &rows[0], err)))
        goto out;
    for (size_t i = 0; i < n; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "row_%03zu", i);
        hid_t r;
        H5TRY(r = H5Gcreate2(g, nm, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), nm);
        st = row_attrs(r, path, &rows[i], err);
        H5Gclose(r);
        if (st)
            goto out;
    }
    H5Gclose(g);
    g = -1;
    if ((st = ppl_table(f, path, rows, n, err)))
        goto out;
    st = qmla_h5_save_image(f, path, err);
    f = -1;
out:
    if (g >= 0)
        H5Gclose(g);
    if (f >= 0)
        H5Fclose(f);
    qmla_h5_quiet_end(q);
    return st;
}

/* ------------------------------------------------------------ transforms */

/* The checks of qmla_model_apply_transforms (nothing is changed). */
static int check_transforms(const qmla_model *m, const qmla_transform *t,
                            const float *const *gammas, size_t n, qmla_error *err)
{
    const qmla_model_config *c = &m->c;
    for (size_t i = 0; i < n; i++) {
        const qmla_transform *x = &t[i];
        if (x->layer < 0 || (size_t)x->layer >= c->L)
            return qmla_error_set(err, QMLA_EMISMATCH, "transform %zu: layer %d: expected a "
                                  "layer of the model (0 to %zu)", i, x->layer, c->L - 1);
        for (size_t k = 0; k < i; k++)
            if (t[k].layer == x->layer)
                return qmla_error_set(err, QMLA_EMISMATCH, "layer %d: two transforms",
                                      x->layer);
        if (x->d_c != c->d_c || x->d_r != c->d_r)
            return qmla_error_set(err, QMLA_EMISMATCH, "layer %d: transform for d_c %zu, "
                                  "d_r %zu: expected the model's d_c %zu, d_r %zu", x->layer,
                                  x->d_c, x->d_r, c->d_c, c->d_r);
        if (x->pairing != c->pairing)
            return qmla_error_set(err, QMLA_EMISMATCH, "layer %d: transform's rope_pairing "
                                  "%s: expected the model's %s (a rotation in other pairs "
                                  "does not commute with the model's RoPE)", x->layer,
                                  qmla_rope_pairing_name(x->pairing),
                                  qmla_rope_pairing_name(c->pairing));
        const size_t d = c->d_c;
        const float *g = m->layers[x->layer].kv_a_ln;
        for (size_t j = 0; j < d; j++)
            if (fabs((double)gammas[i][j] - g[j]) > 1e-6 * fabs((double)g[j]) + 1e-30)
                return qmla_error_set(err, QMLA_EMISMATCH, "layer %d: the transform's "
                                      "content/gamma[%zu] = %.9g, expected the model's "
                                      "kv_a_layernorm weight %.9g (made for another model?). "
                                      "Not fusible: T_C = diag(gamma)^-1 R diag(s) passes "
                                      "through the RMSNorm only when gamma is the norm's own "
                                      "gain; otherwise diag(gain/gamma) R acts before the "
                                      "norm and is not orthogonal", x->layer, j,
                                      (double)gammas[i][j], (double)g[j]);
        double worst = 0.0;
        for (size_t a = 0; a < d; a++)
            for (size_t b = a; b < d; b++) {
                double s = 0.0;
                for (size_t k = 0; k < d; k++)
                    s += x->rot[k * d + a] * x->rot[k * d + b];
                double e = fabs(s - (a == b ? 1.0 : 0.0));
                worst = e > worst ? e : worst;
            }
        if (!(worst <= 1e-5))
            return qmla_error_set(err, QMLA_EINVAL, "layer %d: content rotation R: max "
                                  "|R^T R - I| = %.3g, expected <= 1e-5. Not fusible: only an "
                                  "orthogonal map commutes with the latent RMSNorm", x->layer,
                                  worst);
        for (size_t j = 0; j < d; j++)
            if (!(x->cscale[j] > 0.0) || !isfinite(x->cscale[j]))
                return qmla_error_set(err, QMLA_EINVAL, "layer %d: content scale[%zu] = %g: "
                                      "expected a finite positive value", x->layer, j,
                                      x->cscale[j]);
        for (size_t j = 0; j < c->d_r / 2; j++)
            if (!(x->rscale[j] > 0.0) || !isfinite(x->rscale[j]) || !isfinite(x->angle[j]))
                return qmla_error_set(err, QMLA_EINVAL, "layer %d: RoPE pair %zu: scale %g, "
                                      "angle %g: expected a finite positive scale and a "
                                      "finite angle", x->layer, j, x->rscale[j],
                                      x->angle[j]);
    }
    return QMLA_OK;
}

/* Rows W [r, in] -> rows of (W^T M)^T, i.e. every column of W, read as a row
 * vector of length r, goes through the RoPE map m (r = d_r). */
static int rope_rows(const qmla_transform *t, qmla_tmap m, float *W, size_t in,
                     qmla_error *err)
{
    const size_t r = t->d_r;
    float *buf = malloc(in * r * sizeof *buf);
    if (!buf)
        return qmla_error_set(err, QMLA_ENOMEM, "RoPE rows");
    for (size_t a = 0; a < r; a++)
        for (size_t j = 0; j < in; j++)
            buf[j * r + a] = W[a * in + j];
    qmla_transform_rope_apply(t, m, buf, in, buf);
    for (size_t a = 0; a < r; a++)
        for (size_t j = 0; j < in; j++)
            W[a * in + j] = buf[j * r + a];
    free(buf);
    return QMLA_OK;
}

const float *qmla_model_latent_gain(const qmla_model *m, size_t l)
{
    return l < m->c.L ? m->layers[l].kv_a_ln : NULL;
}

int qmla_model_apply_transforms(qmla_model *m, const qmla_transform *t,
                                const float *const *gammas, size_t n, qmla_error *err)
{
    int st = check_transforms(m, t, gammas, n, err);
    if (st)
        return st;
    const qmla_model_config *c = &m->c;
    const size_t D = c->D, H = c->H, dc = c->d_c, dr = c->d_r, qk = c->d_n + c->d_r;
    const size_t qin = c->q_lora_rank ? c->q_lora_rank : D;
    const qmla_exec ex1 = qmla_exec_cpu(1);
    const qmla_mla_dims dims = {H, D, dc, c->d_n, dr, c->d_v, c->tau};
    double *acc = malloc(D * sizeof *acc);
    float *wc = malloc(dc * D * sizeof *wc);
    float *uk = malloc(H * c->d_n * dc * sizeof *uk);
    float *uv = malloc(H * c->d_v * dc * sizeof *uv);
    if (!acc || !wc || !uk || !uv)
        st = qmla_error_set(err, QMLA_ENOMEM, "transforms: fusion buffers");
    for (size_t i = 0; i < n && !st; i++) {
        const qmla_transform *x = &t[i];
        layer_w *lw = &m->layers[x->layer];
        /* consumers first: T_C^-T is built with the model's gain */
        const qmla_mla_weights mw = {lw->w_uk, lw->w_uv, lw->o_proj};
        qmla_transform_fuse_weights(&ex1, x, lw->kv_a_ln, &dims, &mw, uk, uv);
        memcpy(lw->w_uk, uk, H * c->d_n * dc * sizeof *uk);
        memcpy(lw->w_uv, uv, H * c->d_v * dc * sizeof *uv);
        /* latent rows: W_c' = R^T W_c, gain s */
        memcpy(wc, lw->kv_a, dc * D * sizeof *wc);
        for (size_t k = 0; k < dc; k++) {
            memset(acc, 0, D * sizeof *acc);
            for (size_t j = 0; j < dc; j++) {
                const double r = x->rot[j * dc + k];
                if (r == 0.0)
                    continue;
                const float *src = wc + j * D;
                for (size_t e = 0; e < D; e++)
                    acc[e] += r * src[e];
            }
            for (size_t e = 0; e < D; e++)
                lw->kv_a[k * D + e] = (float)acc[e];
            lw->kv_a_ln[k] = (float)x->cscale[k];
        }
        /* RoPE rows of the key (T_P) and of every head's query (T_P^-T) */
        st = rope_rows(x, QMLA_TMAP_FWD, lw->kv_a + dc * D, D, err);
        for (size_t h = 0; h < H && !st; h++)
            st = rope_rows(x, QMLA_TMAP_INVT, lw->q_proj + (h * qk + c->d_n) * qin, qin, err);
    }
    free(acc);
    free(wc);
    free(uk);
    free(uv);
    return st;
}

/* ---- the online hook ---- */

typedef struct tf_hook_ctx {
    const qmla_transform **t; /* [L], NULL: identity */
    const float **gamma;      /* [L] */
} tf_hook_ctx;

static int tf_hook_apply(void *ctx, size_t layer, int path, float *x, size_t T, size_t w,
                         qmla_tmap m, qmla_error *err)
{
    const tf_hook_ctx *k = ctx;
    const qmla_transform *t = k->t[layer];
    if (!t)
        return QMLA_OK;
    if (path == 1) {
        qmla_transform_rope_apply(t, m, x, T, x);
        return QMLA_OK;
    }
    float *y = malloc(T * w * sizeof *y);
    if (!y)
        return qmla_error_set(err, QMLA_ENOMEM, "transform hook: %zu x %zu", T, w);
    const qmla_exec ex1 = qmla_exec_cpu(1);
    qmla_transform_content_apply(&ex1, t, k->gamma[layer], m, x, T, y);
    memcpy(x, y, T * w * sizeof *y);
    free(y);
    return QMLA_OK;
}

static int tf_hook_fwd(void *ctx, size_t layer, int path, float *x, size_t T, size_t w,
                       qmla_error *err)
{
    return tf_hook_apply(ctx, layer, path, x, T, w, QMLA_TMAP_FWD, err);
}

static int tf_hook_inv(void *ctx, size_t layer, int path, float *x, size_t T, size_t w,
                       qmla_error *err)
{
    return tf_hook_apply(ctx, layer, path, x, T, w, QMLA_TMAP_INV, err);
}

int qmla_model_transform_hook(const qmla_model *m, const qmla_transform *t,
                              const float *const *gammas, size_t n, const char *method,
                              qmla_cache_hook *hk, qmla_error *err)
{
    memset(hk, 0, sizeof *hk);
    int st = check_transforms(m, t, gammas, n, err);
    if (st)
        return st;
    tf_hook_ctx *k = calloc(1, sizeof *k);
    if (k) {
        k->t = calloc(m->c.L, sizeof *k->t);
        k->gamma = calloc(m->c.L, sizeof *k->gamma);
    }
    if (!k || !k->t || !k->gamma) {
        if (k) {
            free(k->t);
            free(k->gamma);
        }
        free(k);
        return qmla_error_set(err, QMLA_ENOMEM, "transform hook");
    }
    for (size_t i = 0; i < n; i++) {
        k->t[t[i].layer] = &t[i];
        k->gamma[t[i].layer] = gammas[i];
    }
    hk->forward = tf_hook_fwd;
    hk->inverse = tf_hook_inv;
    hk->ctx = k;
    hk->method = method;
    return QMLA_OK;
}

void qmla_model_transform_hook_free(qmla_cache_hook *hk)
{
    if (!hk || !hk->ctx)
        return;
    tf_hook_ctx *k = hk->ctx;
    free(k->t);
    free(k->gamma);
    free(k);
    hk->ctx = NULL;
}

/* ------------------------------------------------------------ saving */

typedef struct st_out {
    json_t *hdr;
    const void **bufs;
    size_t *lens;
    size_t n, cap, off;
    const char *dtype;  /* "F32", "F16", "BF16" */
    uint16_t **conv;    /* converted tensors (F16/BF16), owned */
    size_t n_conv;
} st_out;

static int st_add(st_out *o, const char *name, const float *x, size_t r, size_t c,
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

static int read_whole(const char *path, unsigned char **out, size_t *n, qmla_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return qmla_error_set(err, QMLA_EIO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, k = 0;
    unsigned char *b = malloc(cap);
    while (b) {
        if (k == cap) {
            unsigned char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
        size_t r = fread(b + k, 1, cap - k, f);
        k += r;
        if (r == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (!b)
        return qmla_error_set(err, QMLA_ENOMEM, "%s: reading", path);
    if (bad) {
        free(b);
        return qmla_error_set(err, QMLA_EIO, "%s: read error", path);
    }
    *out = b;
    *n = k;
    return QMLA_OK;
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* The staging folder of qmla_model_save: remove its files and itself. */
static void stage_remove(const char *stage)
{
    DIR *dp = opendir(stage);
    struct dirent *de;
    while (dp && (de = readdir(dp))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", stage, de->d_name);
        unlink(p);
    }
    if (dp)
        closedir(dp);
    rmdir(stage);
}

/* Staging folders of fuse runs that died (killed, interrupted) before they
 * moved their files into place: .qmla-fuse.tmp.PID of a PID that no longer
 * runs. */
static void stage_remove_stale(const char *out_dir)
{
    DIR *dp = opendir(out_dir);
    struct dirent *de;
    static const char pre[] = ".qmla-fuse.tmp.";
    while (dp && (de = readdir(dp))) {
        if (strncmp(de->d_name, pre, sizeof pre - 1))
            continue;
        if (!qmla_tmp_owner_gone(de->d_name + sizeof pre - 1))
            continue;
        char p[4096];
        if (snprintf(p, sizeof p, "%s/%s", out_dir, de->d_name) < (int)sizeof p)
            stage_remove(p);
    }
    if (dp)
        closedir(dp);
}

/* Move every file of the staging folder into out_dir (one folder: renames
 * that need no room), then make the renames durable. */
static int stage_commit(const char *stage, const char *out_dir, qmla_error *err)
{
    DIR *dp = opendir(stage);
    if (!dp)
        return qmla_error_set(err, QMLA_EIO, "%s: cannot list: %s", stage, strerror(errno));
    int st = QMLA_OK;
    struct dirent *de;
    while (!st && (de = readdir(dp))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char a[4096], b[4096];
        if (snprintf(a, sizeof a, "%s/%s", stage, de->d_name) >= (int)sizeof a ||
            snprintf(b, sizeof b, "%s/%s", out_dir, de->d_name) >= (int)sizeof b)
            st = qmla_error_set(err, QMLA_EINVAL, "%s/%s: path too long", out_dir,
                                de->d_name);
        else if (rename(a, b) != 0)
            st = qmla_error_set(err, QMLA_EIO, "%s: cannot rename %s to it: %s", b, a,
                                strerror(errno));
    }
    closedir(dp);
    int dfd = open(out_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    return st;
}

int qmla_model_save_check(const char *src_dir, const char *out_dir, qmla_error *err)
{
    struct stat sb;
    char path[4096], rs[PATH_MAX], ro[PATH_MAX];
    if (stat(out_dir, &sb) != 0) {
        if (errno != ENOENT)
            return qmla_error_set(err, QMLA_EINVAL, "%s: output folder: %s", out_dir,
                                  strerror(errno));
        /* a new folder: its parent must exist and be writable */
        return qmla_output_path_check(out_dir, "output folder", NULL, 0, err);
    }
    if (!S_ISDIR(sb.st_mode))
        return qmla_error_set(err, QMLA_EINVAL, "%s: output folder: expected a folder (or "
                              "a new name), found another kind of file", out_dir);
    if (access(out_dir, W_OK | X_OK) != 0)
        return qmla_error_set(err, QMLA_EINVAL, "%s: output folder: expected a writable "
                              "folder, found %s", out_dir, strerror(errno));
    if (realpath(src_dir, rs) && realpath(out_dir, ro) && !strcmp(rs, ro))
        return qmla_error_set(err, QMLA_EINVAL, "%s: the output folder is the model's own "
                              "folder: expected another one", out_dir);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", out_dir);
    if (access(path, F_OK) == 0)
        return qmla_error_set(err, QMLA_EINVAL, "%s: holds a shard index that would take "
                              "precedence over the new model.safetensors: expected a folder "
                              "without one", out_dir);
    return QMLA_OK;
}

int qmla_model_save(const qmla_model *m, const char *src_dir, const char *out_dir,
                    const char *dtype, const char *const *meta, size_t n_meta,
                    qmla_error *err)
{
    if (!dtype)
        dtype = "F32";
    if (strcmp(dtype, "F32") && strcmp(dtype, "F16") && strcmp(dtype, "BF16"))
        return qmla_error_set(err, QMLA_EINVAL, "checkpoint dtype \"%s\": expected F32, F16 "
                              "or BF16", dtype);
    const qmla_model_config *c = &m->c;
    char path[4096], stage[4096];
    /* Every file is written into a staging folder inside out_dir first and
     * moved into place only when all are written: a failure (a full disk, a
     * tensor beyond float16) leaves out_dir as it was, and removes it when
     * this call created it (it used to leave the new folder behind, empty or
     * with model.safetensors but no config.json). */
    int st0 = qmla_model_save_check(src_dir, out_dir, err);
    if (st0)
        return st0;
    int made = mkdir(out_dir, 0755) == 0;
    if (!made && errno != EEXIST)
        return qmla_error_set(err, QMLA_EIO, "%s: cannot create the folder: %s", out_dir,
                              strerror(errno));
    if (snprintf(stage, sizeof stage, "%s/.qmla-fuse.tmp.%ld", out_dir, (long)getpid()) >=
        (int)sizeof stage) {
        if (made)
            rmdir(out_dir);
        return qmla_error_set(err, QMLA_EINVAL, "%s: path too long", out_dir);
    }
    stage_remove(stage); /* a stale one of an earlier process with this pid */
    stage_remove_stale(out_dir);
    if (mkdir(stage, 0755) != 0) {
        int e = errno;
        if (made)
            rmdir(out_dir);
        return qmla_error_set(err, QMLA_EIO, "%s: cannot create the staging folder %s: %s",
                              out_dir, stage, strerror(e));
    }
    const size_t H = c->H, D = c->D, qk = c->d_n + c->d_r, dc = c->d_c;
    const size_t kvb_rows = H * (c->d_n + c->d_v);
    st_out o = {0};
    o.dtype = dtype;
    float **kvb = calloc(c->L, sizeof *kvb);
    int st = QMLA_OK;
    o.hdr = json_object();
    if (!o.hdr || !kvb)
        st = qmla_error_set(err, QMLA_ENOMEM, "safetensors header");
    json_t *md = json_object();
    for (size_t i = 0; i < n_meta && !st && md; i++)
        if (json_object_set_new(md, meta[2 * i], json_string(meta[2 * i + 1] ? meta[2 * i + 1]
                                                                             : "")))
            st = qmla_error_set(err, QMLA_ENOMEM, "safetensors metadata");
    if (!st && md &&
        (json_object_set_new(md, "qmla_tool_version", json_string(qmla_version())) ||
         json_object_set_new(md, "qmla_git_commit", json_string(QMLA_GIT_COMMIT))))
        st = qmla_error_set(err, QMLA_ENOMEM, "safetensors metadata");
    if (!st && (!md || json_object_set_new(o.hdr, "__metadata__", md)))
        st = qmla_error_set(err, QMLA_ENOMEM, "safetensors metadata");
    char nm[256];
#define ADD(name, x, r, cc)                                                          \
    do {                                                                             \
        if (!st)                                                                     \
            st = st_add(&o, name, x, r, cc, err);                                    \
    } while (0)
    ADD("model.embed_tokens.weight", m->embed, c->V, D);
    ADD("model.norm.weight", m->norm, D, 0);
    ADD("lm_head.weight", m->lm_head, c->V, D);
    for (size_t l = 0; l < c->L && !st; l++) {
        const layer_w *w = &m->layers[l];
#define LADD(suffix, x, r, cc)                                                       \
    do {                                                                             \
        snprintf(nm, sizeof nm, "model.layers.%zu.%s", l, suffix);                   \
        ADD(nm, x, r, cc);                                                           \
    } while (0)
        LADD("input_layernorm.weight", w->ln_in, D, 0);
        LADD("post_attention_layernorm.weight", w->ln_post, D, 0);
        if (c->q_lora_rank) {
            LADD("self_attn.q_a_proj.weight", w->q_a, c->q_lora_rank, D);
            LADD("self_attn.q_a_layernorm.weight", w->q_a_ln, c->q_lora_rank, 0);
            LADD("self_attn.q_b_proj.weight", w->q_proj, H * qk, c->q_lora_rank);
        } else {
            LADD("self_attn.q_proj.weight", w->q_proj, H * qk, D);
        }
        LADD("self_attn.kv_a_proj_with_mqa.weight", w->kv_a, dc + c->d_r, D);
        LADD("self_attn.kv_a_layernorm.weight", w->kv_a_ln, dc, 0);
        if (!st && !(kvb[l] = malloc(kvb_rows * dc * sizeof(float))))
            st = qmla_error_set(err, QMLA_ENOMEM, "kv_b_proj of layer %zu", l);
        if (!st)
            for (size_t h = 0; h < H; h++) {
                float *blk = kvb[l] + h * (c->d_n + c->d_v) * dc;
                memcpy(blk, w->w_uk + h * c->d_n * dc, c->d_n * dc * sizeof(float));
                memcpy(blk + c->d_n * dc, w->w_uv + h * c->d_v * dc,
                       c->d_v * dc * sizeof(float));
            }
        LADD("self_attn.kv_b_proj.weight", kvb[l], kvb_rows, dc);
        LADD("self_attn.o_proj.weight", w->o_proj, D, H * c->d_v);
        LADD("mlp.gate_proj.weight", w->gate, c->n_inter, D);
        LADD("mlp.up_proj.weight", w->up, c->n_inter, D);
        LADD("mlp.down_proj.weight", w->down, D, c->n_inter);
#undef LADD
    }
#undef ADD
    char *hj = NULL;
    if (!st && !(hj = json_dumps(o.hdr, JSON_COMPACT | JSON_SORT_KEYS)))
        st = qmla_error_set(err, QMLA_ENOMEM, "safetensors header");
    unsigned char *head = NULL;
    if (!st) {
        /* 8-byte little-endian header length, the JSON padded with spaces to
         * a multiple of 8 (so the data are aligned) */
        size_t hl = strlen(hj), pad = (8 - hl % 8) % 8;
        head = malloc(8 + hl + pad);
        if (!head) {
            st = qmla_error_set(err, QMLA_ENOMEM, "safetensors header");
        } else {
            uint64_t L = hl + pad;
            for (int b = 0; b < 8; b++)
                head[b] = (unsigned char)(L >> (8 * b));
            memcpy(head + 8, hj, hl);
            memset(head + 8 + hl, ' ', pad);
            o.bufs[0] = head;
            o.lens[0] = 8 + hl + pad;
        }
    }
    if (st)
        qmla_error_prefix(err, "%s/model.safetensors: ", out_dir);
    if (!st && snprintf(path, sizeof path, "%s/model.safetensors", stage) >= (int)sizeof path)
        st = qmla_error_set(err, QMLA_EINVAL, "%s: path too long", out_dir);
    if (!st)
        st = qmla_save_bytes_atomic(path, o.bufs, o.lens, o.n + 1, err);
    /* the other files of the model folder (config, tokenizer, generation) */
    DIR *dp = st ? NULL : opendir(src_dir);
    if (!st && !dp)
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot list: %s", src_dir, strerror(errno));
    struct dirent *de;
    while (!st && dp && (de = readdir(dp))) {
        if (de->d_name[0] == '.' || ends_with(de->d_name, ".safetensors") ||
            !strcmp(de->d_name, "model.safetensors.index.json"))
            continue;
        char sp[4096];
        snprintf(sp, sizeof sp, "%s/%s", src_dir, de->d_name);
        struct stat sb;
        if (stat(sp, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        unsigned char *data = NULL;
        size_t len = 0;
        st = read_whole(sp, &data, &len, err);
        if (!st && snprintf(path, sizeof path, "%s/%s", stage, de->d_name) >= (int)sizeof path)
            st = qmla_error_set(err, QMLA_EINVAL, "%s/%s: path too long", out_dir, de->d_name);
        if (!st) {
            const void *b[1] = {data};
            st = qmla_save_bytes_atomic(path, b, &len, 1, err);
        }
        free(data);
    }
    if (dp)
        closedir(dp);
    if (!st)
        st = stage_commit(stage, out_dir, err);
    stage_remove(stage);
    if (st && made)
        rmdir(out_dir);
    free(head);
    free(hj);
    if (kvb)
        for (size_t l = 0; l < c->L; l++)
            free(kvb[l]);
    free(kvb);
    for (size_t i = 0; i < o.n_conv; i++)
        free(o.conv[i]);
    free(o.conv);
    free(o.bufs);
    free(o.lens);
    json_decref(o.hdr);
    return st;
}
