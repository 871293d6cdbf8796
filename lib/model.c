/* lib/model.c — the MLA inference engine of qmla/model.h: config.json and
 * safetensors loading (jansson), the forward pass with the absorbed MLA
 * cache through lib/attention.c, cache configurations through the library
 * quantizer (qmla_quant_qdq, bit for bit the analysis quantizer) and the
 * sink/local policy, and bits per byte over a text. */
#include "qmla/model.h"
#include "qmla/attention.h"
#include "qmla/decode.h"
#include "qmla/kvcache.h"
#include "h5util.h"

#include <cblas.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
};

/* ------------------------------------------------------------ JSON helpers */

static json_t *load_json(const char *path, qmla_error *err)
{
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j)
        qmla_error_set(err, errno == ENOENT ? QMLA_EIO : QMLA_EFORMAT,
                       "%s: line %d: %s", path, je.line, je.text);
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
                        size_t *n_routed, qmla_error *err)
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
        (st = get_size(j, path, "bos_token_id", &bos, 0, err)) ||
        (st = get_size(j, path, "first_k_dense_replace", first_dense, 0, err)) ||
        (st = get_size(j, path, "n_routed_experts", n_routed, 0, err)))
        goto out;
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
    if (nd != want_nd || s0 != r || (c && s1 != c))
        return qmla_error_set(err, QMLA_EFORMAT, "%s: tensor %s: expected shape [%zu%s%zu], "
                              "found %zu dims [%zu, %zu]", s->path, name, r, c ? ", " : "",
                              c ? c : (size_t)0, nd, s0, s1);
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
    size_t b0 = (size_t)json_integer_value(json_array_get(off, 0));
    size_t b1 = (size_t)json_integer_value(json_array_get(off, 1));
    if (b1 < b0 || b1 - b0 != n * es || s->data_off + b1 > s->size)
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
    size_t first_dense = 0, n_routed = 0;
    int st = parse_config(dir, &m->c, &first_dense, &n_routed, err);
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
        qmla_kv_config kc;
        int cb = 0, rb = 0;
        char tail = 0;
        /* the paged cache (qmla_kv_parse_config) packs 2, 4 or 8 bits; the
         * engine dequantizes in place and also takes the quantizer's 3 bits */
        if (sscanf(base, "C%dR%d%c", &cb, &rb, &tail) == 2 && (cb == 3 || rb == 3) &&
            (cb == 2 || cb == 3 || cb == 4 || cb == 8) &&
            (rb == 2 || rb == 3 || rb == 4 || rb == 8)) {
            kc.c_bits = cb;
            kc.r_bits = rb;
            kc.group = 64;
        } else {
            int st = qmla_kv_parse_config(base, &kc, err);
            if (st)
                return st;
        }
        if (kc.c_bits == QMLA_KV_BF16)
            return qmla_error_set(err, QMLA_EINVAL, "cache config '%s': bf16 takes no "
                                  "metadata suffix", config);
        s->c_bits = kc.c_bits;
        s->r_bits = kc.r_bits;
        s->group = kc.group;
    }
    if (!policy || !strcmp(policy, "none")) {
        snprintf(s->policy, sizeof s->policy, "none");
        return QMLA_OK;
    }
    int S = -1, W = -1;
    char tail = 0;
    if (sscanf(policy, "sink%d/local%d%c", &S, &W, &tail) != 2 || S < 0 || W < 0)
        return qmla_error_set(err, QMLA_EINVAL, "policy '%s': expected none or "
                              "sink<S>/local<W> (e.g. sink4/local128)", policy);
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
};

void qmla_model_ws_free(qmla_model_ws *w)
{
    if (!w)
        return;
    float **p[] = {&w->x, &w->h, &w->q, &w->qa, &w->q_nope, &w->q_rope_pre, &w->q_rope,
                   &w->kv, &w->kr_pre, &w->C, &w->K, &w->Cq, &w->Kq, &w->q_lat,
                   &w->q_rope_t, &w->Z, &w->Z2, &w->U, &w->O, &w->Y, &w->g, &w->u,
                   &w->cos_, &w->sin_};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        free(*p[i]);
    free(w);
}

int qmla_model_ws_alloc(const qmla_model *m, size_t T, qmla_model_ws **out, qmla_error *err)
{
    const qmla_model_config *c = &m->c;
    qmla_model_ws *w = calloc(1, sizeof *w);
    if (!w)
        return qmla_error_set(err, QMLA_ENOMEM, "model workspace");
    w->T_max = T;
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
        {&w->sin_, T * c->d_r / 2}};
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

/* y[T, out] = x[T, in] W^T, W [out, in]. */
static void linear(size_t T, size_t in, size_t out_n, const float *x, const float *W, float *y)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)out_n, (int)in, 1.0f, x,
                (int)in, W, (int)in, 0.0f, y, (int)out_n);
}

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

int qmla_model_forward_tap(const qmla_model *m, const qmla_cache_spec *cs,
                           qmla_model_ws *w, const int32_t *tokens, size_t T,
                           float *logits, const qmla_model_tap *tap, qmla_error *err)
{
    const qmla_model_config *c = &m->c;
    const size_t n_run = tap && tap->n_layers && tap->n_layers < c->L ? tap->n_layers : c->L;
    if (n_run < c->L && logits)
        return qmla_error_set(err, QMLA_EINVAL, "forward: logits need all %zu layers, "
                              "the tap stops after %zu", c->L, n_run);
    if (T == 0 || T > w->T_max)
        return qmla_error_set(err, QMLA_EINVAL, "forward: T = %zu outside [1, %zu]", T,
                              w->T_max);
    const size_t D = c->D, H = c->H, qk = c->d_n + c->d_r, dc = c->d_c, dr = c->d_r;
    for (size_t t = 0; t < T; t++) {
        if (tokens[t] < 0 || (size_t)tokens[t] >= c->V)
            return qmla_error_set(err, QMLA_EINVAL, "forward: token %zu is %d, outside "
                                  "[0, %zu)", t, (int)tokens[t], c->V);
        memcpy(w->x + t * D, m->embed + (size_t)tokens[t] * D, D * sizeof(float));
    }
    const qmla_exec ex1 = qmla_exec_cpu(1);
    const qmla_mla_dims dims = {H, D, dc, c->d_n, dr, c->d_v, c->tau};
    const int quant = cs->c_bits != QMLA_CACHE_FP32 && cs->c_bits != QMLA_CACHE_BF16;
    const int mixed = quant && (cs->sink > 0 || cs->window > 0);
    for (size_t l = 0; l < n_run; l++) {
        const layer_w *lw = &m->layers[l];
        rmsnorm(T, D, c->eps, w->x, D, lw->ln_in, w->h, D);
        /* queries */
        if (c->q_lora_rank) {
            linear(T, D, c->q_lora_rank, w->h, lw->q_a, w->qa);
            rmsnorm(T, c->q_lora_rank, c->latent_eps, w->qa, c->q_lora_rank, lw->q_a_ln, w->qa,
                    c->q_lora_rank);
            linear(T, c->q_lora_rank, H * qk, w->qa, lw->q_proj, w->q);
        } else {
            linear(T, D, H * qk, w->h, lw->q_proj, w->q);
        }
        for (size_t h = 0; h < H; h++)
            for (size_t t = 0; t < T; t++) {
                const float *src = w->q + (t * H + h) * qk;
                memcpy(w->q_nope + (h * T + t) * c->d_n, src, c->d_n * sizeof(float));
                memcpy(w->q_rope_pre + (h * T + t) * dr, src + c->d_n, dr * sizeof(float));
            }
        qmla_rope_rotate(H, T, dr, c->pairing, w->cos_, w->sin_, w->q_rope_pre, w->q_rope);
        /* latent and RoPE key: the cache row */
        linear(T, D, dc + dr, w->h, lw->kv_a, w->kv);
        rmsnorm(T, dc, c->latent_eps, w->kv, dc + dr, lw->kv_a_ln, w->C, dc);
        for (size_t t = 0; t < T; t++)
            memcpy(w->kr_pre + t * dr, w->kv + t * (dc + dr) + dc, dr * sizeof(float));
        qmla_rope_rotate(1, T, dr, c->pairing, w->cos_, w->sin_, w->kr_pre, w->K);
        int st = write_cache(cs, l, T, dc, dr, w->C, w->K, w->Cq, w->Kq, err);
        if (st)
            return st;
        qmla_attn_absorb(&ex1, &dims, T, w->q_nope, lw->w_uk, w->q_lat);
        qmla_attn_tokens_major(H, T, dr, w->q_rope, w->q_rope_t);
        const qmla_mla_weights mw = {lw->w_uk, lw->w_uv, lw->o_proj};
        if (!quant) {
            qmla_attn_from_queries(&ex1, &dims, T, &mw, w->q_lat, w->q_rope_t, w->C, w->K,
                                   w->Z, w->Z, w->U, w->O, w->Y);
        } else if (!mixed) {
            qmla_attn_from_queries(&ex1, &dims, T, &mw, w->q_lat, w->q_rope_t, w->Cq, w->Kq,
                                   w->Z, w->Z, w->U, w->O, w->Y);
        } else {
            /* Z from the protected values where key s is protected for query
             * i (s < S or i - s < W), from the packed copies elsewhere. */
            const float tau = (float)c->tau;
            qmla_attn_logits_acc(&ex1, H, T, dc, tau, w->q_lat, w->C, 0.0f, w->Z);
            qmla_attn_logits_acc(&ex1, H, T, dr, tau, w->q_rope_t, w->K, 1.0f, w->Z);
            qmla_attn_logits_acc(&ex1, H, T, dc, tau, w->q_lat, w->Cq, 0.0f, w->Z2);
            qmla_attn_logits_acc(&ex1, H, T, dr, tau, w->q_rope_t, w->Kq, 1.0f, w->Z2);
            const size_t S = (size_t)cs->sink, W = (size_t)cs->window;
            for (size_t i = 0; i < T; i++)
                for (size_t h = 0; h < H; h++) {
                    float *zp = w->Z + (i * H + h) * T, *zq = w->Z2 + (i * H + h) * T;
                    for (size_t s = 0; s <= i; s++)
                        if (!(s < S || i - s < W))
                            zp[s] = zq[s];
                }
            qmla_attn_softmax(&ex1, H, T, w->Z, w->Z);
            /* split A: Z keeps the protected weights, Z2 the packed ones */
            for (size_t i = 0; i < T; i++)
                for (size_t h = 0; h < H; h++) {
                    float *ap = w->Z + (i * H + h) * T, *aq = w->Z2 + (i * H + h) * T;
                    for (size_t s = 0; s < T; s++) {
                        if (s <= i && !(s < S || i - s < W)) {
                            aq[s] = ap[s];
                            ap[s] = 0.0f;
                        } else {
                            aq[s] = 0.0f;
                        }
                    }
                }
            qmla_attn_aggregate(&ex1, H, T, dc, w->Z, w->C, 0.0f, w->U);
            qmla_attn_aggregate(&ex1, H, T, dc, w->Z2, w->Cq, 1.0f, w->U);
            qmla_attn_project(&ex1, &dims, T, 1, &mw, w->U, w->O, w->Y);
        }
        if (tap && tap->layer) {
            const qmla_model_tap_layer d = {l, T, w->h, w->C, w->kr_pre, w->K,
                                            w->q_nope, w->q_rope_pre, w->q_rope,
                                            w->cos_, w->sin_, w->Y};
            if ((st = tap->layer(tap->ctx, &d, err)))
                return st;
        }
        for (size_t i = 0; i < T * D; i++)
            w->x[i] += w->Y[i];
        /* SwiGLU MLP */
        rmsnorm(T, D, c->eps, w->x, D, lw->ln_post, w->h, D);
        linear(T, D, c->n_inter, w->h, lw->gate, w->g);
        linear(T, D, c->n_inter, w->h, lw->up, w->u);
        silu_mul(T * c->n_inter, w->g, w->u);
        linear(T, c->n_inter, D, w->g, lw->down, w->Y);
        for (size_t i = 0; i < T * D; i++)
            w->x[i] += w->Y[i];
    }
    if (!logits)
        return QMLA_OK;
    rmsnorm(T, D, c->eps, w->x, D, m->norm, w->h, D);
    linear(T, D, c->V, w->h, m->lm_head, logits);
    return QMLA_OK;
}

/* ------------------------------------------------------------ perplexity */

int qmla_model_ppl(const qmla_model *m, const qmla_exec *ex, const qmla_cache_spec *cs,
                   const uint8_t *text, size_t n_bytes, size_t context, size_t max_windows,
                   qmla_ppl_result *res, qmla_error *err)
{
    const qmla_model_config *c = &m->c;
    memset(res, 0, sizeof *res);
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
    double *nll = calloc(n, sizeof *nll);
    if (!nll)
        return qmla_error_set(err, QMLA_ENOMEM, "%zu windows", n);
    int st_all = QMLA_OK;
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
            int stop;
#pragma omp atomic read
            stop = st_all;
            if (st || stop)
                continue;
            const uint8_t *win = text + k * context;
            tok[0] = c->bos;
            for (size_t t = 1; t < context; t++)
                tok[t] = win[t - 1];
            st = qmla_model_forward(m, cs, ws, tok, context, lg, &e);
            if (st)
                continue;
            double s = 0.0;
            for (size_t t = 0; t < context; t++) {
                const float *r = lg + t * c->V;
                float mx = r[0];
                for (size_t v = 1; v < c->V; v++)
                    mx = r[v] > mx ? r[v] : mx;
                double z = 0.0;
                for (size_t v = 0; v < c->V; v++)
                    z += exp((double)r[v] - mx);
                s += log(z) + mx - (double)r[win[t]];
            }
            nll[k] = s;
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
    if (!st_all) {
        for (size_t k = 0; k < n; k++)
            res->nll_sum += nll[k];
        res->windows = n;
        res->tokens = n * context;
        res->nll_nats_per_token = res->nll_sum / (double)res->tokens;
        res->bits_per_byte = res->nll_nats_per_token / log(2.0);
    }
    free(nll);
    return st_all;
}

/* ------------------------------------------------------------ results */

#define H5TRY(x, what)                                                         \
    do {                                                                       \
        if ((x) < 0) {                                                         \
            char h5m[256];                                                     \
            qmla_h5_error_text(h5m, sizeof h5m);                               \
            st = qmla_error_set(err, QMLA_EIO, "%s: cannot write %s: %s", path, \
                                what, h5m);                                    \
            goto out;                                                          \
        }                                                                      \
    } while (0)

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
out:
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
