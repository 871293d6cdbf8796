/* kvcache_ref.c — C reference twin of the fused cache writer
 * (kernels/kvcache.cu) and the token reconstruction that decode attention
 * uses (contract: include/qmla/decode.h; layout: include/qmla/kvcache.h).
 * Both metadata formats of the page (kvcache.h): f16, and q8 exactly as
 * the quantizer's q8 path (qmla_core_token_meta_q8 per token and path).
 * Built with the quantizer's -ffp-contract=off (lib/meson.build).
 * Test: meson test -C build test_kvcache (CPU), test_decode_cuda (GPU).
 */
#include "qmla/decode.h"
#include "qmla/kvcache.h"
#include "qmla/quant_core.h"

#include <stdio.h>
#include <string.h>

int qmla_kv_check(const qmla_kv_config *c, qmla_error *err)
{
    if (!c)
        return qmla_error_set(err, QMLA_EINVAL, "kv cache: NULL config");
    if (c->c_bits != 2 && c->c_bits != 4 && c->c_bits != 8 && c->c_bits != QMLA_KV_BF16)
        return qmla_error_set(err, QMLA_EINVAL,
                              "kv cache: content bits: expected 2, 4, 8 or 16, found %d",
                              c->c_bits);
    if (c->c_bits != QMLA_KV_BF16 && c->r_bits != 2 && c->r_bits != 4 && c->r_bits != 8)
        return qmla_error_set(err, QMLA_EINVAL,
                              "kv cache: RoPE bits: expected 2, 4 or 8, found %d", c->r_bits);
    if (c->group != 8 && c->group != 16 && c->group != 32 && c->group != 64)
        return qmla_error_set(err, QMLA_EINVAL,
                              "kv cache: group: expected 8, 16, 32 or 64, found %d", c->group);
    if (c->sink < 0 || c->window < 0)
        return qmla_error_set(err, QMLA_EINVAL,
                              "kv cache: sink %d / window %d: expected >= 0", c->sink,
                              c->window);
    if (c->meta != QMLA_CORE_META_F16 && c->meta != QMLA_CORE_META_Q8)
        return qmla_error_set(err, QMLA_EINVAL,
                              "kv cache: metadata: expected f16 (%d) or q8 (%d), found %d",
                              QMLA_CORE_META_F16, QMLA_CORE_META_Q8, c->meta);
    return QMLA_OK;
}

const char *qmla_kv_meta_name(const qmla_kv_config *c)
{
    if (!c || c->c_bits == QMLA_KV_BF16)
        return "-";
    return c->meta == QMLA_CORE_META_Q8 ? "q8" : "f16";
}

int qmla_kv_require_f16_meta(const qmla_kv_config *c, const char *who, qmla_error *err)
{
    if (!c || c->c_bits == QMLA_KV_BF16 || c->meta == QMLA_CORE_META_F16)
        return QMLA_OK;
    return qmla_error_set(err, QMLA_EINVAL,
                          "%s: page layout C%dR%d G %d with %s metadata is not supported "
                          "here: this GPU path reads f16-metadata pages (and BF16 pages) "
                          "only; q8 pages are read by qmla_decode_ref_model (the C twin) and "
                          "by the GPU decode's fast variants (kernels/decode_cuda.h)",
                          who ? who : "kv cache", c->c_bits, c->r_bits, c->group,
                          qmla_kv_meta_name(c));
}

int qmla_kv_parse_config(const char *name, qmla_kv_config *c, qmla_error *err)
{
    int cb = 0, rb = 0;
    char tail = 0;
    if (!name || !c)
        return qmla_error_set(err, QMLA_EINVAL, "kv cache: NULL config name");
    c->group = 64;
    c->sink = 4;
    c->window = 128;
    c->meta = QMLA_CORE_META_F16;
    if (!strcmp(name, "BF16") || !strcmp(name, "bf16")) {
        c->c_bits = c->r_bits = QMLA_KV_BF16;
        return QMLA_OK;
    }
    if (sscanf(name, "C%dR%d%c", &cb, &rb, &tail) != 2)
        return qmla_error_set(err, QMLA_EINVAL,
                              "kv cache: config '%s': expected C<bits>R<bits> (C4R4, C2R4, "
                              "C8R8) or BF16", name);
    c->c_bits = cb;
    c->r_bits = rb;
    return qmla_kv_check(c, err);
}

/* Quantize one path x[0..width) of token i into codes/meta (f16). */
static int quant_path(const float *x, int width, int G, int bits, uint8_t *codes,
                      uint8_t *meta, size_t i, int g0, qmla_error *err)
{
    const int ng = width / G;
    const int gb = (int)qmla_core_packed_bytes((size_t)G, bits);
    for (int g = 0; g < ng; g++) {
        float s, l, bad = 0.0f;
        int st = qmla_core_group_meta(x + g * G, (size_t)G, bits, QMLA_CORE_META_F16, &s, &l,
                                      &bad);
        if (st == QMLA_CORE_NONFINITE)
            return qmla_error_set(err, QMLA_ENONFINITE,
                                  "kv writer: token %zu, group %d: non-finite value %g", i,
                                  g0 + g, (double)bad);
        if (st != QMLA_CORE_OK)
            return qmla_error_set(err, QMLA_ERANGE,
                                  "kv writer: token %zu, group %d: %s %.9g does not fit "
                                  "float16 metadata",
                                  i, g0 + g, st == QMLA_CORE_LO_RANGE ? "minimum" : "scale",
                                  (double)bad);
        qmla_core_group_emit(x + g * G, (size_t)G, bits, s, l, codes + (size_t)g * gb, NULL);
        const uint16_t hs = qmla_core_f32_to_f16(s, NULL), hl = qmla_core_f32_to_f16(l, NULL);
        meta[4 * g + 0] = (uint8_t)(hs & 0xff);
        meta[4 * g + 1] = (uint8_t)(hs >> 8);
        meta[4 * g + 2] = (uint8_t)(hl & 0xff);
        meta[4 * g + 3] = (uint8_t)(hl >> 8);
    }
    return QMLA_OK;
}

/* Quantize one path x[0..width) of token i with q8 metadata (the
 * quantizer's q8 path: qmla_core_token_meta_q8, then the same emitter) into
 * codes and the token's record meta[4 + 2*ng]: S, M (float16 bits,
 * little-endian), sc[ng], m[ng] (kvcache.h). */
static int quant_path_q8(const float *x, int width, int G, int bits, uint8_t *codes,
                         uint8_t *meta, size_t i, int rope, int g0, qmla_error *err)
{
    const int ng = width / G;
    const int gb = (int)qmla_core_packed_bytes((size_t)G, bits);
    float s[QMLA_KV_DC / 8], l[QMLA_KV_DC / 8], bad = 0.0f;
    uint8_t sc[QMLA_KV_DC / 8];
    int8_t mq[QMLA_KV_DC / 8];
    uint16_t S16 = 0, M16 = 0;
    size_t bg = 0;
    const char *path = rope ? "RoPE" : "content";
    int st = qmla_core_token_meta_q8(x, (size_t)width, (size_t)G, bits, s, l, sc, mq, &S16,
                                     &M16, &bad, &bg);
    if (st == QMLA_CORE_NONFINITE)
        return qmla_error_set(err, QMLA_ENONFINITE,
                              "kv writer: token %zu, group %d: non-finite value %g", i,
                              g0 + (int)bg, (double)bad);
    if (st == QMLA_CORE_LO_RANGE)
        return qmla_error_set(err, QMLA_ERANGE,
                              "kv writer: token %zu, %s path: q8 metadata: max |lo| = %.9g "
                              "needs a minimum super-scale %.9g above the float16 maximum %g",
                              i, path, (double)bad, (double)bad / 127.0,
                              (double)QMLA_F16_MAX);
    if (st != QMLA_CORE_OK)
        return qmla_error_set(err, QMLA_ERANGE,
                              "kv writer: token %zu, %s path: q8 metadata: largest group step "
                              "%.9g needs a step super-scale %.9g above the float16 maximum %g",
                              i, path, (double)bad, (double)bad / 255.0,
                              (double)QMLA_F16_MAX);
    for (int g = 0; g < ng; g++)
        qmla_core_group_emit(x + g * G, (size_t)G, bits, s[g], l[g], codes + (size_t)g * gb,
                             NULL);
    meta[0] = (uint8_t)(S16 & 0xff);
    meta[1] = (uint8_t)(S16 >> 8);
    meta[2] = (uint8_t)(M16 & 0xff);
    meta[3] = (uint8_t)(M16 >> 8);
    for (int g = 0; g < ng; g++) {
        meta[4 + g] = sc[g];
        meta[4 + ng + g] = (uint8_t)mq[g];
    }
    return QMLA_OK;
}

int qmla_kv_write_rows_check(const qmla_kv_write *w, qmla_error *err)
{
    if (!w)
        return qmla_error_set(err, QMLA_EINVAL, "kv writer: NULL argument");
    if (w->n > 0 && !w->kv == !w->kv_f32)
        return qmla_error_set(err, QMLA_EINVAL,
                              "kv writer: rows: expected exactly one of kv (BF16) and kv_f32 "
                              "(float32), found %s",
                              w->kv ? "both" : "neither");
    return QMLA_OK;
}

int qmla_kv_write_ref(const qmla_kv_cache *kc, const qmla_kv_write *w, qmla_error *err)
{
    int st = qmla_kv_check(kc ? &kc->cfg : NULL, err);
    if (st)
        return st;
    const qmla_kv_config *c = &kc->cfg;
    const qmla_kv_layout L = qmla_kv_layout_of(c);
    if ((st = qmla_kv_write_rows_check(w, err)))
        return st;
    for (size_t i = 0; i < w->n; i++) {
        if (w->slot[i] < 0)
            continue;
        /* x: what is quantized; row: the BF16 copy (sink, window, BF16 page) */
        float x[QMLA_KV_D];
        uint16_t rb[QMLA_KV_D];
        const uint16_t *row = w->kv ? w->kv + i * QMLA_KV_D : rb;
        for (int j = 0; j < QMLA_KV_D; j++) {
            if (w->kv) {
                x[j] = qmla_core_bf16_to_f32(row[j]);
            } else {
                x[j] = w->kv_f32[i * QMLA_KV_D + j];
                rb[j] = qmla_core_f32_to_bf16(x[j]);
            }
        }
        const size_t page = (size_t)(w->slot[i] / QMLA_KV_PAGE);
        const int o = (int)(w->slot[i] % QMLA_KV_PAGE);
        if (page >= kc->n_pages || w->seq[i] < 0 || w->seq[i] >= kc->batch)
            return qmla_error_set(err, QMLA_EINVAL,
                                  "kv writer: token %zu: slot %lld / sequence %d outside the "
                                  "pool (%zu pages, batch %d)",
                                  i, (long long)w->slot[i], (int)w->seq[i], kc->n_pages,
                                  kc->batch);
        uint8_t *pg = kc->pool + page * L.page_bytes;
        if (L.bf16) {
            memcpy(pg + (size_t)o * QMLA_KV_D * 2, row, QMLA_KV_D * 2);
            continue;
        }
        if (L.meta == QMLA_CORE_META_Q8) {
            if ((st = quant_path_q8(x, QMLA_KV_DC, L.G, L.c_bits, pg + (size_t)o * L.cb_c,
                                    pg + L.off_mc + (size_t)o * L.mb_c, i, 0, 0, err)) ||
                (st = quant_path_q8(x + QMLA_KV_DC, QMLA_KV_DR, L.G, L.r_bits,
                                    pg + L.off_rc + (size_t)o * L.cb_r,
                                    pg + L.off_mr + (size_t)o * L.mb_r, i, 1, L.ng_c, err)))
                return st;
        } else if ((st = quant_path(x, QMLA_KV_DC, L.G, L.c_bits, pg + (size_t)o * L.cb_c,
                                    pg + L.off_mc + (size_t)o * L.mb_c, i, 0, err)) ||
                   (st = quant_path(x + QMLA_KV_DC, QMLA_KV_DR, L.G, L.r_bits,
                                    pg + L.off_rc + (size_t)o * L.cb_r,
                                    pg + L.off_mr + (size_t)o * L.mb_r, i, L.ng_c, err)))
            return st;
        const int b = w->seq[i];
        const long p = w->pos[i], len = w->seq_len[b];
        if (p < c->sink)
            memcpy(kc->sink + ((size_t)b * c->sink + (size_t)p) * QMLA_KV_D, row,
                   QMLA_KV_D * 2);
        if (c->window > 0 && p >= len - c->window)
            memcpy(kc->window + ((size_t)b * c->window + (size_t)(p % c->window)) * QMLA_KV_D,
                   row, QMLA_KV_D * 2);
    }
    return QMLA_OK;
}

void qmla_kv_token_ref(const qmla_kv_cache *kc, const qmla_decode_args *a, int bi, long t,
                       float *row)
{
    qmla_kv_token_model(kc, a, bi, t, 0, row);
}

void qmla_kv_token_model(const qmla_kv_cache *kc, const qmla_decode_args *a, int bi, long t,
                         int packed_f32, float *row)
{
    const qmla_kv_config *c = &kc->cfg;
    const qmla_kv_layout L = qmla_kv_layout_of(c);
    const long len = a->seq_len[bi];
    const uint8_t *pg =
        kc->pool + (size_t)a->block_table[(size_t)bi * a->max_pages + t / QMLA_KV_PAGE] *
                       L.page_bytes;
    const int o = (int)(t % QMLA_KV_PAGE);
    if (L.bf16) {
        const uint8_t *r = pg + (size_t)o * QMLA_KV_D * 2;
        for (int j = 0; j < QMLA_KV_D; j++)
            row[j] = qmla_core_bf16_to_f32((uint16_t)(r[2 * j] | (r[2 * j + 1] << 8)));
        return;
    }
    if (qmla_kv_protected(c, t, len)) {
        const uint16_t *src =
            t < c->sink ? kc->sink + ((size_t)bi * c->sink + (size_t)t) * QMLA_KV_D
                        : kc->window + ((size_t)bi * c->window + (size_t)(t % c->window)) *
                                           QMLA_KV_D;
        for (int j = 0; j < QMLA_KV_D; j++)
            row[j] = qmla_core_bf16_to_f32(src[j]);
        return;
    }
    for (int j = 0; j < QMLA_KV_D; j++)
        row[j] = packed_f32 ? qmla_kv_packed_f32(&L, pg, o, j)
                            : qmla_core_bf16_to_f32(qmla_kv_packed_value(&L, pg, o, j));
}
