/* lib/engine/capture_native.c — qmla/capture_native.h: a qmla-capture v1 file from
 * the native engine (the tap of qmla_model_forward_tap), windows sampled as
 * experiments/capture/qmla_capture.py samples them (lib/core/pyrandom.c), written
 * through the capture writer (lib/capture/capture_write.c). */
#include "qmla/capture_native.h"
#include "qmla/attention.h"
#include "qmla/capture.h"
#include "qmla/exec.h"
#include "qmla/norms.h"
#include "qmla/pyrandom.h"
#include "qmla/quant.h"
#include "qmla/text.h"
#include "qmla_commit.h"
#include "io/journal.h"
#include "engine/engine_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ tokenizer, text */

int qmla_byte_tokenizer_load(const char *model_dir, int *bos, qmla_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/qmla_tokenizer.json", model_dir);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) {
        if (errno == ENOENT)
            return qmla_error_set(err, QMLA_EIO, "%s: cannot open: expected the byte tokenizer "
                                  "spec {\"type\": \"bytes\", \"bos_id\": N} (the native "
                                  "capture knows no other tokenizer), found: %s", path,
                                  strerror(ENOENT));
        return qmla_error_set(err, QMLA_EFORMAT, "%s: line %d: %s", path, je.line, je.text);
    }
    int st = QMLA_OK;
    const char *type = json_string_value(json_object_get(j, "type"));
    json_t *b = json_object_get(j, "bos_id");
    if (!type || strcmp(type, "bytes"))
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"type\": expected \"bytes\", found %s",
                            path, type ? type : "no string");
    else if (!json_is_integer(b) || json_integer_value(b) < 0 ||
             json_integer_value(b) > 1000000000)
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"bos_id\": expected a non-negative "
                            "integer, found %s", path, b ? "another value" : "nothing");
    else
        *bos = (int)json_integer_value(b);
    json_decref(j);
    return st;
}

/* Length of the valid UTF-8 sequence at p (Python's strict decoder), 0 when
 * invalid. */
static size_t utf8_len(const uint8_t *p, size_t left)
{
    const uint8_t c = p[0];
    if (c < 0x80)
        return 1;
    size_t n;
    uint32_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0;          /* overlong */
        else if (c == 0xED)
            hi = 0x9F;          /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;          /* beyond U+10FFFF */
    } else
        return 0;
    if (left < n)
        return 0;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t k = 2; k < n; k++)
        if (p[k] < 0x80 || p[k] > 0xBF)
            return 0;
    return n;
}

int qmla_text_as_python(uint8_t *buf, size_t *n, const char *label, qmla_error *err)
{
    size_t r = 0, w = 0;
    const size_t len = *n;
    while (r < len) {
        const size_t k = utf8_len(buf + r, len - r);
        if (!k)
            return qmla_error_set(err, QMLA_EFORMAT, "%s: expected UTF-8 text, found an invalid "
                                  "byte 0x%02x at offset %zu", label, buf[r], r);
        if (buf[r] == '\r') {
            buf[w++] = '\n';
            r += (r + 1 < len && buf[r + 1] == '\n') ? 2 : 1;
            continue;
        }
        memmove(buf + w, buf + r, k);
        w += k;
        r += k;
    }
    *n = w;
    return QMLA_OK;
}

/* ------------------------------------------------------------ capture */

typedef struct slot {          /* one selected layer: its cell tensors (float32) */
    int layer;
    float *w_uk, *w_uv, *w_o, *kv_norm; /* as stored (rounded when float16) */
    float *c_kv, *k_rope, *q_nope, *q_rope, *attn_out;
    float *k_pre, *q_pre, *cos_, *sin_;
} slot;

typedef struct run {
    const qmla_model_config *c;
    slot *slots;
    int *slot_of;              /* [L]: slot index or -1 */
    int pre;
} run;

typedef struct tap_ctx {
    const run *r;
    size_t seq;
} tap_ctx;

static int on_layer(void *ctx, const qmla_model_tap_layer *d, qmla_error *err)
{
    (void)err;
    const tap_ctx *t = ctx;
    const run *r = t->r;
    const int si = r->slot_of[d->layer];
    if (si < 0)
        return QMLA_OK;
    const qmla_model_config *c = r->c;
    const slot *s = &r->slots[si];
    const size_t T = d->T, n = t->seq, H = c->H, P = c->d_r / 2;
    memcpy(s->c_kv + n * T * c->d_c, d->c_kv, T * c->d_c * sizeof(float));
    memcpy(s->k_rope + n * T * c->d_r, d->k_rope, T * c->d_r * sizeof(float));
    memcpy(s->q_nope + n * H * T * c->d_n, d->q_nope, H * T * c->d_n * sizeof(float));
    memcpy(s->q_rope + n * H * T * c->d_r, d->q_rope, H * T * c->d_r * sizeof(float));
    memcpy(s->attn_out + n * T * c->D, d->attn_out, T * c->D * sizeof(float));
    if (r->pre) {
        memcpy(s->k_pre + n * T * c->d_r, d->k_rope_pre, T * c->d_r * sizeof(float));
        memcpy(s->q_pre + n * H * T * c->d_r, d->q_rope_pre, H * T * c->d_r * sizeof(float));
        memcpy(s->cos_ + n * T * P, d->rope_cos, T * P * sizeof(float));
        memcpy(s->sin_ + n * T * P, d->rope_sin, T * P * sizeof(float));
    }
    return QMLA_OK;
}

/* Round to binary16 and back (what the reader will see), refusing values
 * the writer refuses, by name. */
static int round_store(float *x, size_t n, int f16, const char *what, const char *cell,
                       int layer, qmla_error *err)
{
    if (!f16)
        return QMLA_OK;
    for (size_t i = 0; i < n; i++) {
        int ovf = 0;
        const uint16_t h = qmla_f32_to_f16(x[i], &ovf);
        if (ovf)
            return qmla_error_set(err, QMLA_ERANGE, "layer %d%s%s: %s: expected values that "
                                  "fit float16 storage (|x| < 65520), found %g at element %zu "
                                  "(use --store float32)", layer, cell ? ", cell " : "",
                                  cell ? cell : "", what, (double)x[i], i);
        x[i] = qmla_f16_to_f32(h);
    }
    return QMLA_OK;
}

static void slots_free(slot *s, size_t n)
{
    if (!s)
        return;
    for (size_t i = 0; i < n; i++) {
        float *p[] = {s[i].w_uk, s[i].w_uv, s[i].w_o, s[i].kv_norm, s[i].c_kv, s[i].k_rope,
                      s[i].q_nope, s[i].q_rope, s[i].attn_out, s[i].k_pre, s[i].q_pre,
                      s[i].cos_, s[i].sin_};
        for (size_t k = 0; k < sizeof p / sizeof p[0]; k++)
            free(p[k]);
    }
    free(s);
}

/* ------------------------------------------------------------ resume */
/* The journal (io/journal.h, kind "capture"): one record per finished
 * window, "W <cell> <seq> <offset> <bytes> <fnv1a-64 of the bytes>\n"; the
 * window's tensors (every selected layer: c_kv, k_rope, q_nope, q_rope,
 * attn_out, with_pre also k_rope_pre, q_rope_pre, rope_cos, rope_sin; raw
 * float32 as the tap gave them, before any float16 rounding) at <offset> of
 * JOURNAL.data, appended in record order and fsynced before the record. */
typedef struct resume {
    qmla_jnl j;
    int open, fd;
    char dpath[4200];
    long long *at;             /* [n_cells * N]: offset of a finished window, -1 */
    size_t n_cells, N, B;      /* B: bytes per window */
    unsigned long long end;    /* bytes of JOURNAL.data in use */
    float *buf;                /* one window */
} resume;

/* (pointer, floats per window) of each tensor of slot s, in file order */
static size_t win_parts(const run *r, const slot *s, size_t T, float **p, size_t *cnt)
{
    const qmla_model_config *c = r->c;
    const size_t H = c->H, P = c->d_r / 2;
    size_t k = 0;
    p[k] = s->c_kv, cnt[k++] = T * c->d_c;
    p[k] = s->k_rope, cnt[k++] = T * c->d_r;
    p[k] = s->q_nope, cnt[k++] = H * T * c->d_n;
    p[k] = s->q_rope, cnt[k++] = H * T * c->d_r;
    p[k] = s->attn_out, cnt[k++] = T * c->D;
    if (r->pre) {
        p[k] = s->k_pre, cnt[k++] = T * c->d_r;
        p[k] = s->q_pre, cnt[k++] = H * T * c->d_r;
        p[k] = s->cos_, cnt[k++] = T * P;
        p[k] = s->sin_, cnt[k++] = T * P;
    }
    return k;
}

/* window n of every slot to (pack) or from buf */
static void win_copy(const run *r, size_t ns, size_t T, size_t n, float *buf, int pack)
{
    for (size_t i = 0; i < ns; i++) {
        float *p[9];
        size_t cnt[9];
        const size_t m = win_parts(r, &r->slots[i], T, p, cnt);
        for (size_t q = 0; q < m; q++) {
            float *seg = p[q] + n * cnt[q];
            if (pack)
                memcpy(buf, seg, cnt[q] * sizeof *buf);
            else
                memcpy(seg, buf, cnt[q] * sizeof *buf);
            buf += cnt[q];
        }
    }
}

static int pread_full(int fd, void *b, size_t n, unsigned long long off)
{
    for (size_t g = 0; g < n;) {
        const ssize_t w = pread(fd, (char *)b + g, n - g, (off_t)(off + g));
        if (w <= 0) {
            if (w < 0 && errno == EINTR)
                continue;
            return -1;
        }
        g += (size_t)w;
    }
    return 0;
}

static int on_window(void *ctx, char *rec, size_t len, qmla_error *err)
{
    (void)len;
    (void)err;
    resume *rs = ctx;
    size_t k, n;
    unsigned long long off, bytes, h;
    int used = 0;
    if (sscanf(rec, "W %zu %zu %llu %llu %llx%n", &k, &n, &off, &bytes, &h, &used) != 5 ||
        strcmp(rec + used, "\n") || k >= rs->n_cells || n >= rs->N || bytes != rs->B ||
        off != rs->end || rs->at[k * rs->N + n] >= 0)
        return QMLA_EFORMAT;
    if (pread_full(rs->fd, rs->buf, rs->B, off) ||
        qmla_jnl_fnv1a(rs->buf, rs->B, QMLA_JNL_FNV_INIT) != h)
        return QMLA_EFORMAT; /* the data is short or damaged: recomputed */
    rs->at[k * rs->N + n] = (long long)off;
    rs->end = off + rs->B;
    return QMLA_OK;
}

void qmla_eng_model_files_key(FILE *f, const char *dir)
{
    struct dirent **names = NULL;
    const int nn = scandir(dir, &names, NULL, alphasort);
    for (int i = 0; i < nn; i++) {
        char p[4608], esc[1024];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, names[i]->d_name);
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) {
            qmla_jnl_escape(names[i]->d_name, esc, sizeof esc);
            fprintf(f, "%s%s:%lld:%lld.%09ld", i ? "," : "", esc, (long long)sb.st_size,
                    (long long)sb.st_mtim.tv_sec, (long)sb.st_mtim.tv_nsec);
        }
        free(names[i]);
    }
    free(names);
}

/* The resume key: every input and option the journaled tensors depend on. */
static char *resume_key(const qmla_model *m, const qmla_native_capture_opts *o,
                        const run *r, size_t ns, int bos, qmla_error *err)
{
    (void)m;
    char *key = NULL;
    size_t klen = 0;
    FILE *f = open_memstream(&key, &klen);
    if (!f) {
        qmla_error_set(err, QMLA_ENOMEM, "resume key");
        return NULL;
    }
    fprintf(f, "model=");
    qmla_eng_model_files_key(f, o->model_dir);
    fprintf(f, " cells=");
    for (size_t k = 0; k < o->n_cells; k++) {
        const qmla_native_corpus *cp = &o->corpora[o->cells[k].corpus];
        char esc[512];
        qmla_jnl_escape(cp->name, esc, sizeof esc);
        fprintf(f, "%s%s-s%llu:%zu:%016llx", k ? "," : "", esc,
                (unsigned long long)o->cells[k].seed, cp->n,
                (unsigned long long)qmla_jnl_fnv1a(cp->bytes, cp->n, QMLA_JNL_FNV_INIT));
    }
    fprintf(f, " seqs=%zu tokens=%zu pre=%d bos=%d layers=", o->seqs, o->tokens, r->pre, bos);
    for (size_t i = 0; i < ns; i++)
        fprintf(f, "%s%d", i ? "," : "", r->slots[i].layer);
    if (fclose(f) != 0) {
        free(key);
        qmla_error_set(err, QMLA_ENOMEM, "resume key");
        return NULL;
    }
    return key;
}

static int resume_open(resume *rs, const qmla_model *m, const qmla_native_capture_opts *o,
                       const run *r, size_t ns, int bos, qmla_error *err)
{
    const size_t N = o->seqs, T = o->tokens;
    rs->fd = -1;
    rs->n_cells = o->n_cells;
    rs->N = N;
    {
        float *p[9];
        size_t cnt[9], per = 0;
        const size_t q = win_parts(r, &r->slots[0], T, p, cnt);
        for (size_t i = 0; i < q; i++)
            per += cnt[i];
        rs->B = ns * per * sizeof(float);
    }
    snprintf(rs->dpath, sizeof rs->dpath, "%s.data", o->journal);
    rs->at = malloc(o->n_cells * N * sizeof *rs->at);
    rs->buf = malloc(rs->B ? rs->B : 1);
    if (!rs->at || !rs->buf)
        return qmla_error_set(err, QMLA_ENOMEM, "resume buffers");
    for (size_t i = 0; i < o->n_cells * N; i++)
        rs->at[i] = -1;
    char *key = resume_key(m, o, r, ns, bos, err);
    if (!key)
        return err->status;
    rs->fd = open(rs->dpath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (rs->fd < 0) {
        free(key);
        return qmla_error_set(err, QMLA_EIO, "%s: cannot open the journal's data file: %s",
                              rs->dpath, strerror(errno));
    }
    size_t n = 0;
    int st = qmla_jnl_open(&rs->j, o->journal, "capture", key, o->journal_force, on_window,
                           rs, &n, err);
    free(key);
    if (st)
        return st;
    rs->open = 1;
    if (n == 0) { /* a fresh (or forced) journal: no data either */
        for (size_t i = 0; i < o->n_cells * N; i++)
            rs->at[i] = -1;
        rs->end = 0;
    }
    if (ftruncate(rs->fd, (off_t)rs->end) != 0)
        return qmla_error_set(err, QMLA_EIO, "%s: cannot truncate: %s", rs->dpath,
                              strerror(errno));
    return QMLA_OK;
}

/* window n of cell k (in the slots) into the data file and the journal */
static int resume_save(resume *rs, const run *r, size_t ns, size_t T, size_t k, size_t n,
                       qmla_error *err)
{
    win_copy(r, ns, T, n, rs->buf, 1);
    for (size_t g = 0; g < rs->B;) {
        const ssize_t w = pwrite(rs->fd, (const char *)rs->buf + g, rs->B - g,
                                 (off_t)(rs->end + g));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return qmla_error_set(err, QMLA_EIO, "%s: write failed: %s", rs->dpath,
                                  w < 0 ? strerror(errno) : "no progress");
        g += (size_t)w;
    }
    if (fsync(rs->fd) != 0)
        return qmla_error_set(err, QMLA_EIO, "%s: fsync failed: %s", rs->dpath,
                              strerror(errno));
    qmla_jnl_printf(&rs->j, "W %zu %zu %llu %zu %016llx\n", k, n, rs->end, rs->B,
                    (unsigned long long)qmla_jnl_fnv1a(rs->buf, rs->B, QMLA_JNL_FNV_INIT));
    const int st = qmla_jnl_commit(&rs->j, err);
    if (st)
        return st;
    rs->at[k * rs->N + n] = (long long)rs->end;
    rs->end += rs->B;
    return QMLA_OK;
}

/* the finished windows of cell k into the slots; how many */
static int resume_restore(resume *rs, const run *r, size_t ns, size_t T, size_t k,
                          size_t *restored, qmla_error *err)
{
    *restored = 0;
    for (size_t n = 0; n < rs->N; n++) {
        const long long off = rs->at[k * rs->N + n];
        if (off < 0)
            continue;
        if (pread_full(rs->fd, rs->buf, rs->B, (unsigned long long)off))
            return qmla_error_set(err, QMLA_EIO, "%s: cannot read window %zu of cell %zu at "
                                  "byte %lld: %s", rs->dpath, n, k, off,
                                  errno ? strerror(errno) : "short file");
        win_copy(r, ns, T, n, rs->buf, 0);
        ++*restored;
    }
    return QMLA_OK;
}

static void resume_close(resume *rs, int success)
{
    if (rs->open)
        qmla_jnl_close(&rs->j, success);
    if (rs->fd >= 0) {
        close(rs->fd);
        if (success)
            unlink(rs->dpath);
    }
    free(rs->at);
    free(rs->buf);
}

int qmla_native_corpus_arg(const char *arg, char *name, size_t cap, const char **path)
{
    const char *eq = strchr(arg, '=');
    const size_t len = eq ? (size_t)(eq - arg) : 0;
    if (!eq || !len || !eq[1] || len >= cap || memchr(arg, '/', len))
        return -1;
    memcpy(name, arg, len);
    name[len] = 0;
    *path = eq + 1;
    return 0;
}

size_t qmla_native_cells_repeat(const qmla_native_cell *cells, size_t n)
{
    for (size_t a = 0; a < n; a++)
        for (size_t b = 0; b < a; b++)
            if (cells[a].corpus == cells[b].corpus && cells[a].seed == cells[b].seed)
                return a;
    return n;
}

int qmla_native_corpora_read(qmla_native_corpus *corp, size_t n_corpora,
                             const qmla_native_cell *cells, size_t n_cells, uint8_t **bufs,
                             size_t *failed, int *decoding, qmla_error *err)
{
    for (size_t i = 0; i < n_corpora; i++) {
        int used = 0;
        for (size_t k = 0; k < n_cells; k++)
            used |= cells[k].corpus == i;
        if (!used)
            continue;
        size_t nb = 0;
        int st = qmla_text_read(corp[i].path, &bufs[i], &nb, err);
        *decoding = 0;
        if (!st) {
            *decoding = 1;
            st = qmla_text_as_python(bufs[i], &nb, corp[i].path, err);
        }
        if (st) {
            *failed = i;
            return st;
        }
        corp[i].bytes = bufs[i];
        corp[i].n = nb;
    }
    return QMLA_OK;
}

int qmla_capture_native(const qmla_model *m, const char *path,
                        const qmla_native_capture_opts *o, qmla_error *err)
{
    const qmla_model_config *c = qmla_model_cfg(m);
    const size_t N = o->seqs, T = o->tokens, H = c->H, D = c->D, dc = c->d_c, dn = c->d_n,
                 dr = c->d_r, dv = c->d_v, P = dr / 2;
    if (o->stopped)
        *o->stopped = 0;
    if (!N || !T || T > c->max_pos)
        return qmla_error_set(err, QMLA_EINVAL, "expected --seqs >= 1 and 1 <= --tokens <= "
                              "max_position_embeddings %zu, found %zu and %zu", c->max_pos,
                              N, T);
    if (!o->n_cells || !o->n_corpora)
        return qmla_error_set(err, QMLA_EINVAL, "expected at least one cell and one corpus");
    int bos = 0;
    int st = qmla_byte_tokenizer_load(o->model_dir, &bos, err);
    if (st)
        return st;
    if (bos < 0 || (size_t)bos >= c->V || c->V < 256)
        return qmla_error_set(err, QMLA_EFORMAT, "%s: byte tokenizer with BOS %d: expected "
                              "a vocabulary of at least 256 holding the BOS id, found %zu",
                              o->model_dir, bos, c->V);
    /* windows of every cell first: a short corpus is refused before any work */
    size_t *offs = malloc(o->n_cells * N * sizeof *offs);
    if (!offs)
        return qmla_error_set(err, QMLA_ENOMEM, "window offsets");
    for (size_t k = 0; k < o->n_cells; k++) {
        const qmla_native_corpus *cp = &o->corpora[o->cells[k].corpus];
        char what[512];
        snprintf(what, sizeof what, "corpus %s (%s)", cp->name, cp->path);
        if ((st = qmla_sample_windows(cp->n, N, T, 1, o->cells[k].seed, what, offs + k * N,
                                      err))) {
            free(offs);
            return st;
        }
    }
    if (o->offsets_out)
        memcpy(o->offsets_out, offs, o->n_cells * N * sizeof *offs);

    /* the layers: all, or the selection */
    const size_t ns = o->layers ? o->n_layers : c->L;
    run r = {c, NULL, NULL, o->with_pre != 0};
    r.slots = calloc(ns ? ns : 1, sizeof *r.slots);
    r.slot_of = malloc(c->L * sizeof *r.slot_of);
    qmla_capture_writer *wr = NULL;
    qmla_attn_state as;
    memset(&as, 0, sizeof as);
    resume rs;
    memset(&rs, 0, sizeof rs);
    rs.fd = -1;
    int success = 0;
    double worst = 0.0;
    if (o->resumed_out)
        *o->resumed_out = 0;
    if (!r.slots || !r.slot_of) {
        st = qmla_error_set(err, QMLA_ENOMEM, "layer table");
        goto done;
    }
    for (size_t l = 0; l < c->L; l++)
        r.slot_of[l] = -1;
    size_t last = 0;
    for (size_t i = 0; i < ns; i++) {
        const int l = o->layers ? o->layers[i] : (int)i;
        if (l < 0 || (size_t)l >= c->L || (i && l <= r.slots[i - 1].layer)) {
            st = qmla_error_set(err, QMLA_EINVAL, "layers: expected ascending indices below "
                                "%zu (the model's layers), found %d", c->L, l);
            goto done;
        }
        r.slots[i].layer = l;
        r.slot_of[l] = (int)i;
        last = (size_t)l;
    }
    const double tol = o->check_tol > 0 ? o->check_tol : (o->float16 ? 5e-3 : 1e-5);
    qmla_capture_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_layers = (int)c->L;
    cfg.H = (int)H;
    cfg.D = (int)D;
    cfg.d_c = (int)dc;
    cfg.d_n = (int)dn;
    cfg.d_r = (int)dr;
    cfg.d_v = (int)dv;
    cfg.softmax_scale = c->tau;
    cfg.rope_pairing = c->pairing;
    cfg.rms_norm_eps = c->latent_eps;
    snprintf(cfg.model, sizeof cfg.model, "%s", o->model_name ? o->model_name : o->model_dir);
    snprintf(cfg.source, sizeof cfg.source,
             "qmla capture %s (commit %s): native C engine lib/engine, %s; byte tokenizer "
             "(BOS %d); compute float32 (OpenBLAS sgemm, one thread per sequence); store %s, "
             "weights %s; c_kv after kv_a_layernorm, q/k after RoPE (%s pairing), attn_out "
             "after o_proj", qmla_version(), QMLA_GIT_COMMIT[0] ? QMLA_GIT_COMMIT : "unknown",
             c->arch, bos, o->float16 ? "float16" : "float32",
             o->float16 ? "float16" : "float32",
             c->pairing == QMLA_ROPE_HALF ? "half" : "interleaved");
    cfg.has_check_tolerance = 1;
    cfg.check_tolerance = tol;
    if ((st = qmla_capture_writer_open(path, &cfg, o->float16, o->gzip, &wr, err)))
        goto done;

    /* weights (rounded copies: the recomputation check uses what is stored) */
    for (size_t i = 0; i < ns; i++) {
        slot *s = &r.slots[i];
        const float *wk, *wv, *wo, *g;
        if ((st = qmla_model_attn_weights(m, (size_t)s->layer, &wk, &wv, &wo, &g, err)))
            goto done;
        const size_t nk = H * dn * dc, nv = H * dv * dc, no = D * H * dv;
        s->w_uk = malloc(nk * sizeof(float));
        s->w_uv = malloc(nv * sizeof(float));
        s->w_o = malloc(no * sizeof(float));
        s->kv_norm = malloc(dc * sizeof(float));
        s->c_kv = malloc(N * T * dc * sizeof(float));
        s->k_rope = malloc(N * T * dr * sizeof(float));
        s->q_nope = malloc(N * H * T * dn * sizeof(float));
        s->q_rope = malloc(N * H * T * dr * sizeof(float));
        s->attn_out = malloc(N * T * D * sizeof(float));
        int bad = !s->w_uk || !s->w_uv || !s->w_o || !s->kv_norm || !s->c_kv || !s->k_rope ||
                  !s->q_nope || !s->q_rope || !s->attn_out;
        if (r.pre) {
            s->k_pre = malloc(N * T * dr * sizeof(float));
            s->q_pre = malloc(N * H * T * dr * sizeof(float));
            s->cos_ = malloc(N * T * P * sizeof(float));
            s->sin_ = malloc(N * T * P * sizeof(float));
            bad = bad || !s->k_pre || !s->q_pre || !s->cos_ || !s->sin_;
        }
        if (bad) {
            st = qmla_error_set(err, QMLA_ENOMEM, "capture buffers of layer %d (%zu x %zu "
                                "tokens)", s->layer, N, T);
            goto done;
        }
        memcpy(s->w_uk, wk, nk * sizeof(float));
        memcpy(s->w_uv, wv, nv * sizeof(float));
        memcpy(s->w_o, wo, no * sizeof(float));
        memcpy(s->kv_norm, g, dc * sizeof(float));
        if ((st = round_store(s->w_uk, nk, o->float16, "w_uk", NULL, s->layer, err)) ||
            (st = round_store(s->w_uv, nv, o->float16, "w_uv", NULL, s->layer, err)) ||
            (st = round_store(s->w_o, no, o->float16, "w_o", NULL, s->layer, err)) ||
            (st = round_store(s->kv_norm, dc, o->float16, "kv_norm_weight", NULL, s->layer,
                              err)))
            goto done;
        const qmla_layer lay = {s->layer, s->w_uk, s->w_uv, s->w_o, s->kv_norm};
        if ((st = qmla_capture_writer_layer(wr, &lay, err)))
            goto done;
    }

    if (o->journal) {
        if ((st = resume_open(&rs, m, o, &r, ns, bos, err)))
            goto done;
        size_t nres = 0;
        for (size_t i = 0; i < o->n_cells * N; i++)
            nres += rs.at[i] >= 0;
        if (o->resumed_out)
            *o->resumed_out = nres;
        if (nres && o->progress) {
            const qmla_native_event ev = {2, 0, nres, o->n_cells * N, "", -1, N, T, 0.0, tol};
            if (o->progress(o->progress_ctx, &ev)) {
                if (o->stopped)
                    *o->stopped = 1;
                goto done;
            }
        }
    }
    const qmla_mla_dims dims = {H, D, dc, dn, dr, dv, c->tau};
    const qmla_exec ex = qmla_exec_cpu(o->threads > 0 ? o->threads : 1);
    if ((st = qmla_attn_state_alloc(&dims, T, 0, &as, err)))
        goto done;
    int64_t *pos = malloc(N * T * sizeof *pos);
    if (!pos) {
        st = qmla_error_set(err, QMLA_ENOMEM, "positions");
        goto done;
    }
    for (size_t i = 0; i < N * T; i++)
        pos[i] = (int64_t)(i % T);
    const int nt = o->threads > 0 ? o->threads : 1;
    for (size_t k = 0; k < o->n_cells && !st; k++) {
        const qmla_native_corpus *cp = &o->corpora[o->cells[k].corpus];
        char name[128];
        snprintf(name, sizeof name, "%s-s%llu", cp->name, (unsigned long long)o->cells[k].seed);
        int st_all = QMLA_OK, stop_all = 0;
        size_t done_seqs = 0;
        if (rs.open) { /* windows finished by an earlier run */
            if ((st = resume_restore(&rs, &r, ns, T, k, &done_seqs, err))) {
                free(pos);
                goto done;
            }
            if (done_seqs && o->progress) {
                const qmla_native_event ev = {0, k, done_seqs, N, name, -1, N, T, 0.0, tol};
                if (o->progress(o->progress_ctx, &ev))
                    stop_all = 1;
            }
        }
#pragma omp parallel num_threads(nt)
        {
            qmla_error e;
            qmla_error_clear(&e);
            qmla_model_ws *ws = NULL;
            int32_t *tok = malloc(T * sizeof *tok);
            int sst = !tok ? qmla_error_set(&e, QMLA_ENOMEM, "tokens") :
                      qmla_model_ws_alloc(m, T, &ws, &e);
#pragma omp for schedule(dynamic, 1)
            for (size_t n = 0; n < N; n++) {
                int stop;
#pragma omp atomic read
                stop = st_all;
                if (sst || stop || stop_all || (rs.open && rs.at[k * N + n] >= 0))
                    continue;
                const size_t off = offs[k * N + n];
                tok[0] = bos;
                for (size_t t = 1; t < T; t++)
                    tok[t] = cp->bytes[off + t - 1];
                tap_ctx tc = {&r, n};
                const qmla_model_tap tap = {on_layer, &tc, last + 1};
                qmla_cache_spec fp32;
                if (!(sst = qmla_cache_spec_parse("fp32", "none", &fp32, &e)))
                    sst = qmla_model_forward_tap(m, &fp32, ws, tok, T, NULL, &tap, &e);
                if (sst)
                    continue;
#pragma omp critical(qmla_capture_native_progress)
                if (!rs.open || !(sst = resume_save(&rs, &r, ns, T, k, n, &e))) {
                    done_seqs++;
                    if (o->progress) {
                        const qmla_native_event ev = {0, k, done_seqs, N, name, -1, N, T,
                                                      0.0, tol};
                        if (o->progress(o->progress_ctx, &ev))
                            stop_all = 1;
                    }
                }
            }
            if (sst) {
#pragma omp critical(qmla_capture_native_err)
                {
                    if (!st_all) {
                        *err = e;
                        st_all = sst;
                    }
                }
            }
            qmla_model_ws_free(ws);
            free(tok);
        }
        if (st_all) {
            st = qmla_error_prefix(err, "cell %s: ", name);
            break;
        }
        if (stop_all) {
            if (o->stopped)
                *o->stopped = 1;
            free(pos);
            goto done; /* no capture: the writer is aborted (the journal stays) */
        }
        for (size_t i = 0; i < ns && !st; i++) {
            slot *s = &r.slots[i];
            if ((st = round_store(s->c_kv, N * T * dc, o->float16, "c_kv", name, s->layer,
                                  err)) ||
                (st = round_store(s->k_rope, N * T * dr, o->float16, "k_rope", name, s->layer,
                                  err)) ||
                (st = round_store(s->q_nope, N * H * T * dn, o->float16, "q_nope", name,
                                  s->layer, err)) ||
                (st = round_store(s->q_rope, N * H * T * dr, o->float16, "q_rope", name,
                                  s->layer, err)) ||
                (st = round_store(s->attn_out, N * T * D, o->float16, "attn_out", name,
                                  s->layer, err)))
                break;
            if (r.pre &&
                ((st = round_store(s->k_pre, N * T * dr, o->float16, "k_rope_pre", name,
                                   s->layer, err)) ||
                 (st = round_store(s->q_pre, N * H * T * dr, o->float16, "q_rope_pre", name,
                                   s->layer, err)) ||
                 (st = round_store(s->cos_, N * T * P, o->float16, "rope_cos", name, s->layer,
                                   err)) ||
                 (st = round_store(s->sin_, N * T * P, o->float16, "rope_sin", name, s->layer,
                                   err))))
                break;
            /* the recomputation check, on the stored values */
            const qmla_mla_weights w = {s->w_uk, s->w_uv, s->w_o};
            double e_cell = 0.0;
            for (size_t n = 0; n < N && !st; n++) {
                st = qmla_attn_state_forward(&ex, &dims, T, &w, s->q_nope + n * H * T * dn,
                                             s->q_rope + n * H * T * dr, s->c_kv + n * T * dc,
                                             s->k_rope + n * T * dr, &as, err);
                if (st)
                    qmla_error_prefix(err, "layer %d cell %s sequence %zu: ", s->layer, name, n);
                if (!st) {
                    const double e = qmla_rel_fro(as.Y, s->attn_out + n * T * D, T * D);
                    if (!(e <= e_cell))
                        e_cell = e; /* NaN propagates */
                }
            }
            if (st)
                break;
            if (!(e_cell <= tol)) {
                st = qmla_error_set(err, QMLA_EFORMAT, "layer %d cell %s: attention recomputed "
                                    "from the captured tensors misses attn_out by %.3g "
                                    "(tolerance %.3g); nothing written", s->layer, name,
                                    e_cell, tol);
                break;
            }
            worst = e_cell > worst ? e_cell : worst;
            qmla_cell cell;
            memset(&cell, 0, sizeof cell);
            snprintf(cell.name, sizeof cell.name, "%s", name);
            snprintf(cell.dataset, sizeof cell.dataset, "%s", cp->name);
            cell.seed = (long)o->cells[k].seed;
            cell.N = N;
            cell.T = T;
            cell.c_kv = s->c_kv;
            cell.k_rope = s->k_rope;
            cell.q_nope = s->q_nope;
            cell.q_rope = s->q_rope;
            cell.attn_out = s->attn_out;
            cell.positions = pos;
            if (r.pre) {
                cell.k_rope_pre = s->k_pre;
                cell.q_rope_pre = s->q_pre;
                cell.rope_cos = s->cos_;
                cell.rope_sin = s->sin_;
            }
            if ((st = qmla_capture_writer_cell(wr, s->layer, &cell, err)))
                break;
            if (o->progress) {
                const qmla_native_event ev = {1, k, k + 1, o->n_cells, name, s->layer, N, T,
                                              e_cell, tol};
                if (o->progress(o->progress_ctx, &ev)) {
                    if (o->stopped)
                        *o->stopped = 1;
                    free(pos);
                    goto done;
                }
            }
        }
    }
    free(pos);
    if (st)
        goto done;
    st = qmla_capture_writer_close(wr, err);
    wr = NULL;
    if (!st && o->worst_out)
        *o->worst_out = worst;
    success = st == QMLA_OK;
done:
    qmla_capture_writer_abort(wr);
    resume_close(&rs, success);
    qmla_attn_state_free(&as);
    slots_free(r.slots, ns);
    free(r.slot_of);
    free(offs);
    return st;
}
