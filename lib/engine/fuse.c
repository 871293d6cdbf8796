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
#include <sys/syscall.h>
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

/* The in-folder staging of earlier versions of qmla_model_save: remove its
 * files and itself. */
static void stage_remove(const char *stage)
{
    DIR *dp = opendir(stage);
    struct dirent *de;
    while (dp && (de = readdir(dp))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char p[4096];
        if (snprintf(p, sizeof p, "%s/%s", stage, de->d_name) < (int)sizeof p)
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

/* Remove the folder tree `path` (symbolic links not followed); -1 with errno
 * on the first failure. */
static int tree_remove(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(sb.st_mode))
        return unlink(path);
    DIR *dp = opendir(path);
    if (!dp)
        return -1;
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(dp))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char p[4096];
        if (snprintf(p, sizeof p, "%s/%s", path, de->d_name) >= (int)sizeof p) {
            errno = ENAMETOOLONG;
            rc = -1;
        } else {
            rc = tree_remove(p);
        }
    }
    const int e = errno;
    closedir(dp);
    errno = e;
    return rc == 0 ? rmdir(path) : -1;
}

/* The entries of the existing folder `from` that the new folder `to` does
 * not have (files the user keeps beside the checkpoint), carried into `to`
 * before the swap: regular files as hard links (a copy where the file system
 * has none), folders recursively, symbolic links as links. The staging
 * folders of the earlier in-folder layout (.qmla-fuse.tmp.PID) are not. */
static int carry_old(const char *from, const char *to, qmla_error *err)
{
    DIR *dp = opendir(from);
    if (!dp)
        return qmla_error_set(err, QMLA_EIO, "%s: cannot list: %s", from, strerror(errno));
    int st = QMLA_OK;
    struct dirent *de;
    while (!st && (de = readdir(dp))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
            !strncmp(de->d_name, ".qmla-fuse.tmp.", 15))
            continue;
        char a[4096], b[4096];
        struct stat sb, tb;
        if (snprintf(a, sizeof a, "%s/%s", from, de->d_name) >= (int)sizeof a ||
            snprintf(b, sizeof b, "%s/%s", to, de->d_name) >= (int)sizeof b) {
            st = qmla_error_set(err, QMLA_EINVAL, "%s/%s: path too long", from, de->d_name);
            break;
        }
        if (lstat(b, &tb) == 0 || lstat(a, &sb) != 0)
            continue; /* the new folder's file replaces it */
        int rc = 0;
        if (S_ISDIR(sb.st_mode)) {
            rc = mkdir(b, sb.st_mode & 07777);
            if (rc == 0) {
                st = carry_old(a, b, err);
                continue;
            }
        } else if (S_ISLNK(sb.st_mode)) {
            char target[4096];
            const ssize_t n = readlink(a, target, sizeof target - 1);
            rc = n < 0 ? -1 : (target[n] = '\0', symlink(target, b));
        } else if (S_ISREG(sb.st_mode)) {
            rc = link(a, b);
            if (rc != 0 && (errno == EXDEV || errno == EPERM || errno == EMLINK ||
                            errno == ENOTSUP)) {
                unsigned char *data = NULL;
                size_t len = 0;
                if ((st = read_whole(a, &data, &len, err)) == QMLA_OK) {
                    const void *bb[1] = {data};
                    st = qmla_save_bytes_atomic(b, bb, &len, 1, err);
                }
                free(data);
                continue;
            }
        }
        if (rc != 0)
            st = qmla_error_set(err, QMLA_EIO, "%s: cannot carry %s into the new folder %s: %s",
                                from, de->d_name, to, strerror(errno));
    }
    closedir(dp);
    return st;
}

static void fsync_dir(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
}

/* The parent folder and the name of out_dir (an existing one resolved, so
 * that "." or a symbolic link names the real folder); -1 when too long. */
static int split_out(const char *out_dir, char *parent, char *base, size_t len)
{
    char buf[PATH_MAX];
    if (!realpath(out_dir, buf) && snprintf(buf, sizeof buf, "%s", out_dir) >= (int)sizeof buf)
        return -1;
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    const char *slash = strrchr(buf, '/');
    if (!slash) {
        snprintf(parent, len, ".");
        return snprintf(base, len, "%s", buf) >= (int)len ? -1 : 0;
    }
    if (snprintf(base, len, "%s", slash + 1) >= (int)len)
        return -1;
    if (slash == buf)
        snprintf(parent, len, "/");
    else
        snprintf(parent, len, "%.*s", (int)(slash - buf), buf);
    return 0;
}

/* Swap the complete new folder in for out_dir as one step: renameat2
 * RENAME_EXCHANGE where the kernel and file system have it, otherwise
 * out_dir renamed to `old`, `neu` renamed to out_dir (undone when that
 * fails). The folder that was out_dir is then removed. A commit cut short
 * (a crash between the two renames, or an undo that failed) leaves `old`,
 * which the next qmla_model_save_recover restores. */
static int commit_swap(const char *neu, const char *old, const char *out_dir, int exists,
                       qmla_error *err)
{
    char parent[PATH_MAX], base[PATH_MAX];
    if (!exists) {
        if (rename(neu, out_dir) != 0)
            return qmla_error_set(err, QMLA_EIO, "%s: cannot rename the new folder %s to it: %s",
                                  out_dir, neu, strerror(errno));
    } else {
        int swapped = 0;
#ifdef SYS_renameat2
        swapped = syscall(SYS_renameat2, AT_FDCWD, neu, AT_FDCWD, out_dir, 2 /* RENAME_EXCHANGE */)
                  == 0;
        if (!swapped && errno != ENOSYS && errno != EINVAL && errno != ENOTSUP &&
            errno != EPERM)
            return qmla_error_set(err, QMLA_EIO, "%s: cannot exchange it with the new folder "
                                  "%s: %s; the folder is as it was", out_dir, neu,
                                  strerror(errno));
#endif
        if (swapped) {
            /* neu now holds the old folder */
            if (tree_remove(neu) != 0)
                return qmla_error_set(err, QMLA_EIO, "%s: the new folder is in place; cannot "
                                      "remove the old one, now %s: %s", out_dir, neu,
                                      strerror(errno));
        } else {
            if (rename(out_dir, old) != 0)
                return qmla_error_set(err, QMLA_EIO, "%s: cannot rename it to %s to make room "
                                      "for the new folder: %s; the folder is as it was",
                                      out_dir, old, strerror(errno));
            if (rename(neu, out_dir) != 0) {
                const int e = errno;
                if (rename(old, out_dir) != 0)
                    return qmla_error_set(err, QMLA_EIO, "%s: cannot rename the new folder %s "
                                          "to it: %s; nor the old folder back from %s: %s — "
                                          "the next qmla fuse -o %s restores it (or rename it "
                                          "back by hand)", out_dir, neu, strerror(e), old,
                                          strerror(errno), out_dir);
                return qmla_error_set(err, QMLA_EIO, "%s: cannot rename the new folder %s to "
                                      "it: %s; the folder is as it was", out_dir, neu,
                                      strerror(e));
            }
            if (tree_remove(old) != 0)
                return qmla_error_set(err, QMLA_EIO, "%s: the new folder is in place; cannot "
                                      "remove the old one, %s: %s", out_dir, old,
                                      strerror(errno));
        }
    }
    if (split_out(out_dir, parent, base, sizeof parent) == 0)
        fsync_dir(parent);
    return QMLA_OK;
}

int qmla_model_save_recover(const char *out_dir, char *note, size_t note_len, qmla_error *err)
{
    if (note && note_len)
        note[0] = '\0';
    char parent[PATH_MAX], base[PATH_MAX], pre_old[PATH_MAX + 32], pre_new[PATH_MAX + 32];
    if (!out_dir || split_out(out_dir, parent, base, sizeof parent) != 0)
        return QMLA_OK;
    const int po = snprintf(pre_old, sizeof pre_old, ".%s.qmla-fuse-old.", base);
    const int pn = snprintf(pre_new, sizeof pre_new, ".%s.qmla-fuse-new.", base);
    int st = QMLA_OK;
    size_t used = 0;
#define NOTE(...)                                                                   \
    do {                                                                            \
        if (note && used < note_len) {                                              \
            int k_ = snprintf(note + used, note_len - used, __VA_ARGS__);           \
            used += k_ > 0 ? (size_t)k_ : 0;                                        \
        }                                                                           \
    } while (0)
    /* first the old folders (a commit cut short between its renames), then
     * the new ones (a run that died before or after its swap) */
    for (int pass = 0; pass < 2 && !st; pass++) {
        const char *pre = pass ? pre_new : pre_old;
        const size_t pl = (size_t)(pass ? pn : po);
        DIR *dp = opendir(parent);
        if (!dp)
            return QMLA_OK; /* the save's checks report the folder */
        struct dirent *de;
        while (!st && (de = readdir(dp))) {
            if (strncmp(de->d_name, pre, pl) || !qmla_tmp_owner_gone(de->d_name + pl))
                continue;
            char p[PATH_MAX * 2 + 8];
            if (snprintf(p, sizeof p, "%s/%s", parent, de->d_name) >= (int)sizeof p)
                continue;
            struct stat sb;
            if (!pass && lstat(out_dir, &sb) != 0 && errno == ENOENT) {
                if (rename(p, out_dir) != 0)
                    st = qmla_error_set(err, QMLA_EIO, "%s: an interrupted commit left the "
                                        "folder as %s: expected to rename it back, found %s",
                                        out_dir, p, strerror(errno));
                else
                    NOTE("%s%s: an interrupted commit (process %s) left the folder as %s: "
                         "restored it", used ? "; " : "", out_dir, de->d_name + pl, p);
            } else {
                if (tree_remove(p) != 0)
                    st = qmla_error_set(err, QMLA_EIO, "%s: the %s folder %s of an interrupted "
                                        "run (process %s): expected to remove it, found %s",
                                        out_dir, pass ? "unfinished new" : "replaced old", p,
                                        de->d_name + pl, strerror(errno));
                else
                    NOTE("%s%s: removed %s, the %s folder of an interrupted run (process %s)",
                         used ? "; " : "", out_dir, p, pass ? "staging" : "replaced old",
                         de->d_name + pl);
            }
        }
        closedir(dp);
    }
#undef NOTE
    if (!st)
        fsync_dir(parent);
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
    {
        /* the new folder is made beside it and swapped in */
        char parent[PATH_MAX], base[PATH_MAX];
        if (split_out(out_dir, parent, base, sizeof parent) == 0 &&
            access(parent, W_OK | X_OK) != 0)
            return qmla_error_set(err, QMLA_EINVAL, "%s: output folder: expected a writable "
                                  "parent folder %s (the new folder is made beside it), "
                                  "found %s", out_dir, parent, strerror(errno));
    }
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
    /* FP8 weights are dequantized at load: written in dtype, the copied
     * config.json would still declare quantization_config fp8 */
    if (m->quant.fp8)
        return qmla_error_set(err, QMLA_EINVAL, "%s/config.json: quantization_config fp8: "
                              "saving an FP8 block-quantized checkpoint is not supported: "
                              "expected F16, BF16 or F32 weights (dequantize it first)",
                              src_dir);
    char path[4096], stage[PATH_MAX * 2 + 64], old[PATH_MAX * 2 + 64];
    /* Every file is written into a new folder beside out_dir, and that
     * folder is swapped in for out_dir as one step when all are written
     * (commit_swap): a failure (a full disk, a tensor beyond float16, a
     * failed rename) leaves out_dir as it was, or absent when it was (it
     * used to leave the new folder behind, empty or with model.safetensors
     * but no config.json, and a rename failing in the commit left some new
     * files beside the old ones). */
    int st0 = qmla_model_save_recover(out_dir, NULL, 0, err);
    if (!st0)
        st0 = qmla_model_save_check(src_dir, out_dir, err);
    if (st0)
        return st0;
    struct stat osb;
    const int exists = stat(out_dir, &osb) == 0;
    {
        char parent[PATH_MAX], base[PATH_MAX];
        if (split_out(out_dir, parent, base, sizeof parent) != 0 ||
            snprintf(stage, sizeof stage, "%s/.%s.qmla-fuse-new.%ld", parent, base,
                     (long)getpid()) >= (int)sizeof stage ||
            snprintf(old, sizeof old, "%s/.%s.qmla-fuse-old.%ld", parent, base,
                     (long)getpid()) >= (int)sizeof old)
            return qmla_error_set(err, QMLA_EINVAL, "%s: path too long", out_dir);
    }
    if (exists)
        stage_remove_stale(out_dir); /* the earlier in-folder staging of dead runs */
    tree_remove(stage); /* stale ones of an earlier process with this pid */
    tree_remove(old);
    if (mkdir(stage, 0755) != 0)
        return qmla_error_set(err, QMLA_EIO, "%s: cannot create the new folder %s: %s",
                              out_dir, stage, strerror(errno));
    const size_t H = c->H, D = c->D, qk = c->d_n + c->d_r, dc = c->d_c;
    const size_t kvb_rows = H * (c->d_n + c->d_v);
    qmla_st_out o = {0};
    o.dtype = dtype;
    float **kvb = calloc(c->L, sizeof *kvb);
    /* the dense MLP weights converted for the write (3 per layer) */
    float **tmp = calloc(3 * c->L + 1, sizeof *tmp);
    size_t n_tmp = 0;
    int st = QMLA_OK;
    o.hdr = json_object();
    if (!o.hdr || !kvb || !tmp)
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
        qmla_eng_tensor_name(&m->fam, l, suffix, nm, sizeof nm);                     \
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
        if (!w->moe) {
            /* the dense MLP in the output dtype, as always */
            const qmla_eng_wt *mw[3] = {&w->gate, &w->up, &w->down};
            static const char *const mn[3] = {"mlp.gate_proj.weight", "mlp.up_proj.weight",
                                              "mlp.down_proj.weight"};
            for (int k = 0; k < 3 && !st; k++) {
                float *x = mw[k]->f ? NULL : malloc(mw[k]->r * mw[k]->c * sizeof(float));
                if (!mw[k]->f && !x) {
                    st = qmla_error_set(err, QMLA_ENOMEM, "layer %zu: %s", l, mn[k]);
                    break;
                }
                if (x)
                    tmp[n_tmp++] = x;
                LADD(mn[k], qmla_eng_wt_get(mw[k], x), mw[k]->r, mw[k]->c);
            }
            if (!w->sc_moe)
                continue;
        }
        /* a MoE block: router and bias in the dtype, the routed and shared
         * experts copied through untouched (their stored dtype and bytes) */
        const qmla_eng_moe *mo = &m->moe;
        const size_t E = mo->n_routed, EW = E + mo->n_zero;
        const int lc = m->fam.longcat;
        LADD(lc ? "mlp.router.classifier.weight" : "mlp.gate.weight", w->router, EW, D);
        if (w->router_bias)
            LADD(lc ? "mlp.router.e_score_correction_bias" : "mlp.gate.e_score_correction_bias",
                 w->router_bias, EW, 0);
#define RAW(sfx, wt)                                                                 \
    do {                                                                             \
        qmla_eng_tensor_name(&m->fam, l, sfx, nm, sizeof nm);                        \
        if (!st)                                                                     \
            st = qmla_st_add_raw(&o, nm, (wt)->st_dtype, (wt)->raw,                   \
                                 qmla_eng_wt_bytes(wt), (wt)->r, (wt)->c, err);      \
    } while (0)
        for (size_t e = 0; e < E && !st; e++) {
            char sfx[128];
            snprintf(sfx, sizeof sfx, "mlp.experts.%zu.gate_proj.weight", e);
            RAW(sfx, &w->eg[e]);
            snprintf(sfx, sizeof sfx, "mlp.experts.%zu.up_proj.weight", e);
            RAW(sfx, &w->eu[e]);
            snprintf(sfx, sizeof sfx, "mlp.experts.%zu.down_proj.weight", e);
            RAW(sfx, &w->ed[e]);
        }
        if (w->has_shared) {
            RAW("mlp.shared_experts.gate_proj.weight", &w->sg);
            RAW("mlp.shared_experts.up_proj.weight", &w->su);
            RAW("mlp.shared_experts.down_proj.weight", &w->sd);
        }
#undef RAW
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
    if (!st && exists)
        st = carry_old(out_dir, stage, err);
    if (!st) {
        fsync_dir(stage);
        st = commit_swap(stage, old, out_dir, exists, err);
    }
    tree_remove(stage); /* after a failure; gone after a commit */
    if (kvb)
        for (size_t l = 0; l < c->L; l++)
            free(kvb[l]);
    free(kvb);
    for (size_t i = 0; tmp && i < n_tmp; i++)
        free(tmp[i]);
    free(tmp);
    qmla_st_out_free(&o);
    return st;
}
