/* lib/engine/fuse.c — transforms (qmla/transform.h) and the engine's
 * weights: the checks that a transforms file fits the model, the fusion of
 * T_C and T_P into the weights (qmla_model_apply_transforms: the latent and
 * RoPE key rows of kv_a_proj, the latent norm's gain, w_uk / w_uv through
 * qmla_transform_fuse_weights, the queries' RoPE rows), the online cache hook
 * that applies them to the cache instead (qmla_model_transform_hook), and the
 * fused checkpoint saved as model.safetensors (the writer of
 * lib/engine/safetensors.c) plus the model folder's other files, through a
 * staging folder moved into place when every file is written
 * (qmla_model_save). */
#include "engine/engine_int.h"
#include "io/h5util.h"
#include "qmla/outpath.h"
#include "qmla_commit.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
        /* latent rows: W_c' = R^T W_c, gain s. Written here, not through
         * qmla_transform_content_apply: that applies R only between the
         * scalings diag(1/γ) and diag(s) (the cache's T_C), whereas the
         * fused rows take R alone (γ cancels in the latent RMSNorm and s
         * becomes its gain). The RoPE rows and the consumers below do go
         * through transform.c's maps. */
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

static int read_whole(const char *path, unsigned char **out, size_t *n, qmla_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return qmla_error_set(err, qmla_status_from_errno(errno), "%s: cannot open: %s", path,
                              strerror(errno));
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
    qmla_st_out o = {0};
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
            st = qmla_st_add(&o, name, x, r, cc, err);                               \
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
    if (!st)
        st = qmla_st_finish(&o, err);
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
    if (kvb)
        for (size_t l = 0; l < c->L; l++)
            free(kvb[l]);
    free(kvb);
    qmla_st_out_free(&o);
    return st;
}
