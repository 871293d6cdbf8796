/* qmla/kvcache.h — the paged low-bit MLA cache (docs/decode.md, docs/math.md
 * §2 and §9): its configuration, the byte layout of one page, the BF16
 * protection buffers, and the reconstruction of a token as the decode kernel
 * sees it. The inline parts (QMLA_HD) are shared by the C reference twins
 * (lib/cache/kvcache_ref.c, lib/cache/decode_ref.c) and the CUDA kernels (kernels/).
 *
 * A token is the row [c_kv ; k_rope] of d_c + d_r = 512 + 64 = 576 BF16
 * values. Pages hold QMLA_KV_PAGE = 64 tokens; a sequence's block table maps
 * its logical page i to a physical page; slot = page * 64 + offset.
 *
 * Quantized page (C{c_bits}R{r_bits}), at byte offsets:
 *   content codes [64][d_c/G][ceil(G*c_bits/8)]   at 0
 *   rope codes    [64][d_r/G][ceil(G*r_bits/8)]   at off_rc = 64*cb_c
 *   content meta  [64][mb_c]                      at off_mc = off_rc + 64*cb_r
 *   rope meta     [64][mb_r]                      at off_mr = off_mc + 64*mb_c
 * page_bytes = off_mr + 64*mb_r = 64 * (cb_c + cb_r + mb_c + mb_r).
 * The metadata of one token and path (ng = d/G groups), by cfg.meta:
 *   f16 (QMLA_CORE_META_F16, the default): mb = 4*ng bytes,
 *       [ng][2] float16 bits (step s, minimum l), little-endian;
 *       page_bytes 20736 for C4R4 G 64 (324 bytes per token).
 *   q8 (QMLA_CORE_META_Q8, docs/quantizer.md "The compact format q8"):
 *       mb = 4 + 2*ng bytes: S (float16 bits, step super-scale) at 0,
 *       M (float16 bits, minimum super-scale) at 2, sc[ng] (uint8 step
 *       codes) at 4, m[ng] (int8 minimum codes) at 4 + ng; the stored
 *       s_g = sc_g * S and l_g = m_g * M (exact float32 products);
 *       page_bytes 20096 for C4R4 G 64 (314 bytes per token, the q8 figure
 *       of qmla_storage_account). Every mb is even, so S and M sit on
 *       2-byte boundaries.
 * Codes are packed exactly as qmla_quant_qdq packs them (quant.h), with
 * the same stored (s, l) as qmla_quant_qdq under the same metadata.
 * BF16 page (bits 16, the baseline): [64][576] BF16, 73728 bytes.
 *
 * Protection (sink S / local W, default 4 / 128): per sequence
 *   sink   [b][S][576] BF16: tokens t < S
 *   window [b][W][576] BF16: token t at row t % W, valid for t >= len - W
 * A token t of a sequence of length len is served from BF16 when t < S or
 * t >= len - W, otherwise from its packed copy (which exists for every
 * token): exactly one representation per token.
 *
 * Reconstruction (what attention multiplies): a packed value is
 * x^ = fmaf(q, s, l) (quant_core.h) rounded to BF16 (nearest even); a
 * protected value is its stored BF16. The C4R4 / C2R4 decode kernel applies
 * s and l after tensor-core products of the codes, so it attends to the
 * unrounded fmaf(q, s, l) instead (qmla_kv_packed_f32; qmla_decode_ref_model
 * is its reference).
 */
#ifndef QMLA_KVCACHE_H
#define QMLA_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "qmla/quant_core.h"

#define QMLA_KV_PAGE 64
#define QMLA_KV_DC 512
#define QMLA_KV_DR 64
#define QMLA_KV_D 576
#define QMLA_KV_BF16 16 /* "bits" of an unquantized (BF16) path */

typedef struct qmla_kv_config {
    int c_bits;  /* content bits: 2, 4, 8, or 16 (BF16 cache, both paths) */
    int r_bits;  /* RoPE bits: 2, 4, 8 (ignored when c_bits == 16) */
    int group;   /* G: 8, 16, 32 or 64 (divides 64) */
    int sink;    /* S >= 0 (protected first tokens; 0 when c_bits == 16) */
    int window;  /* W >= 0 (protected most recent tokens) */
    int meta;    /* metadata of the packed pages: QMLA_CORE_META_F16 (0, the
                    default of a zeroed config) or QMLA_CORE_META_Q8 (2);
                    ignored when c_bits == 16 */
} qmla_kv_config;

/* Byte layout of one page, derived from a config. */
typedef struct qmla_kv_layout {
    int bf16;            /* 1: unquantized BF16 page */
    int c_bits, r_bits, G;
    int ng_c, ng_r;      /* groups per token per path */
    int gb_c, gb_r;      /* packed bytes per group per path */
    int cb_c, cb_r;      /* code bytes per token per path */
    size_t off_rc;       /* rope codes */
    size_t off_mc;       /* content meta */
    size_t off_mr;       /* rope meta */
    size_t page_bytes;
    int meta;            /* QMLA_CORE_META_F16 or _Q8 (F16 for a BF16 page) */
    int mb_c, mb_r;      /* metadata bytes per token per path */
} qmla_kv_layout;

QMLA_HD static inline qmla_kv_layout qmla_kv_layout_of(const qmla_kv_config *c)
{
    qmla_kv_layout L;
    L.bf16 = c->c_bits == QMLA_KV_BF16;
    L.c_bits = c->c_bits;
    L.r_bits = L.bf16 ? QMLA_KV_BF16 : c->r_bits;
    L.G = c->group;
    L.ng_c = QMLA_KV_DC / c->group;
    L.ng_r = QMLA_KV_DR / c->group;
    L.meta = (!L.bf16 && c->meta == QMLA_CORE_META_Q8) ? QMLA_CORE_META_Q8 : QMLA_CORE_META_F16;
    L.mb_c = L.meta == QMLA_CORE_META_Q8 ? 4 + 2 * L.ng_c : 4 * L.ng_c;
    L.mb_r = L.meta == QMLA_CORE_META_Q8 ? 4 + 2 * L.ng_r : 4 * L.ng_r;
    if (L.bf16) {
        L.mb_c = L.mb_r = 0;
        L.gb_c = L.gb_r = 2 * c->group;
        L.cb_c = 2 * QMLA_KV_DC;
        L.cb_r = 2 * QMLA_KV_DR;
        L.off_rc = L.off_mc = L.off_mr = 0;
        L.page_bytes = (size_t)QMLA_KV_PAGE * QMLA_KV_D * 2;
        return L;
    }
    L.gb_c = (int)qmla_core_packed_bytes((size_t)c->group, c->c_bits);
    L.gb_r = (int)qmla_core_packed_bytes((size_t)c->group, c->r_bits);
    L.cb_c = L.ng_c * L.gb_c;
    L.cb_r = L.ng_r * L.gb_r;
    L.off_rc = (size_t)QMLA_KV_PAGE * L.cb_c;
    L.off_mc = L.off_rc + (size_t)QMLA_KV_PAGE * L.cb_r;
    L.off_mr = L.off_mc + (size_t)QMLA_KV_PAGE * L.mb_c;
    L.page_bytes = L.off_mr + (size_t)QMLA_KV_PAGE * L.mb_r;
    return L;
}

/* float32 -> BF16 bits, round to nearest even (NaN stays a quiet NaN). */
QMLA_HD static inline uint16_t qmla_core_f32_to_bf16(float x)
{
    uint32_t u = qmla_core_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

QMLA_HD static inline float qmla_core_bf16_to_f32(uint16_t h)
{
    return qmla_core_bits_f32((uint32_t)h << 16);
}

/* 1 when token t of a sequence of length len is served from BF16. */
QMLA_HD static inline int qmla_kv_protected(const qmla_kv_config *c, long t, long len)
{
    return t < c->sink || t >= len - c->window;
}

/* The stored (s, l) of group g of token o's path (rope 0: content, 1:
 * RoPE) in a packed page, as float32, for either metadata format. */
QMLA_HD static inline void qmla_kv_group_meta(const qmla_kv_layout *L, const uint8_t *page,
                                              int o, int rope, int g, float *s, float *l)
{
    const uint8_t *m = page + (rope ? L->off_mr + (size_t)o * L->mb_r
                                    : L->off_mc + (size_t)o * L->mb_c);
    if (L->meta == QMLA_CORE_META_Q8) {
        const int ng = rope ? L->ng_r : L->ng_c;
        const float S = qmla_core_f16_to_f32((uint16_t)(m[0] | (m[1] << 8)));
        const float M = qmla_core_f16_to_f32((uint16_t)(m[2] | (m[3] << 8)));
        /* exact products (8-bit code times a float16), as the quantizer's */
        *s = (float)m[4 + g] * S;
        *l = (float)(int8_t)m[4 + ng + g] * M;
        return;
    }
    *s = qmla_core_f16_to_f32((uint16_t)(m[4 * g] | (m[4 * g + 1] << 8)));
    *l = qmla_core_f16_to_f32((uint16_t)(m[4 * g + 2] | (m[4 * g + 3] << 8)));
}

/* Channel ch (0..575) of a packed token before the BF16 rounding:
 * fmaf(q, s, l) as float. page: the physical page's bytes; o: the token's
 * offset in it. */
QMLA_HD static inline float qmla_kv_packed_f32(const qmla_kv_layout *L, const uint8_t *page,
                                               int o, int ch)
{
    const int rope = ch >= QMLA_KV_DC;
    const int k = rope ? ch - QMLA_KV_DC : ch;
    const int g = k / L->G, j = k % L->G;
    const int bits = rope ? L->r_bits : L->c_bits;
    const uint8_t *codes = page + (rope ? L->off_rc + (size_t)o * L->cb_r + (size_t)g * L->gb_r
                                        : (size_t)o * L->cb_c + (size_t)g * L->gb_c);
    float s, l;
    qmla_kv_group_meta(L, page, o, rope, g, &s, &l);
    return qmla_core_dequant(qmla_core_get_code(codes, (size_t)j, bits), s, l);
}

/* The same value as BF16 bits (round to nearest even): the reconstruction
 * of a packed value. */
QMLA_HD static inline uint16_t qmla_kv_packed_value(const qmla_kv_layout *L,
                                                     const uint8_t *page, int o,
                                                     int ch)
{
    return qmla_core_f32_to_bf16(qmla_kv_packed_f32(L, page, o, ch));
}

#endif
