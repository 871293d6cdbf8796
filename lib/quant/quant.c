/* quant.c — the cache quantizer of docs/math.md §2 for whole tokens and
 * tensors (contract: include/qmla/quant.h; per-group arithmetic:
 * include/qmla/quant_core.h; description: docs/quantizer.md).
 *
 * Built with -ffp-contract=off (lib/meson.build). Validation happens here at
 * the API boundary; quant_core.h assumes valid parameters.
 * Test: meson test -C build test_quant
 */
#include "qmla/quant.h"
#include "qmla/quant_core.h"

#include <float.h>
#include <string.h>

#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0 && FLT_EVAL_METHOD != -1
#error "the quantizer needs float arithmetic evaluated in float (FLT_EVAL_METHOD 0)"
#endif

_Static_assert((int)QMLA_META_F16 == QMLA_CORE_META_F16, "qmla_meta f16");
_Static_assert((int)QMLA_META_F32 == QMLA_CORE_META_F32, "qmla_meta f32");
_Static_assert((int)QMLA_META_Q8 == QMLA_CORE_META_Q8, "qmla_meta q8");

const char *qmla_meta_name(qmla_meta m)
{
    return m == QMLA_META_F32 ? "f32" : (m == QMLA_META_Q8 ? "q8" : "f16");
}

qmla_quant_params qmla_quant_defaults(void)
{
    qmla_quant_params p;
    p.bits = 4;
    p.group = 64;
    p.meta = QMLA_META_F16;
    return p;
}

int qmla_quant_check(const qmla_quant_params *p, size_t width, qmla_error *err)
{
    if (!p)
        return qmla_error_set(err, QMLA_EINVAL, "quantizer: NULL parameters");
    if (p->bits != 2 && p->bits != 3 && p->bits != 4 && p->bits != 8)
        return qmla_error_set(err, QMLA_EINVAL,
                              "quantizer: bits: expected 2, 3, 4 or 8, found %d",
                              p->bits);
    if (p->group < 1)
        return qmla_error_set(err, QMLA_EINVAL,
                              "quantizer: group size: expected >= 1, found %d",
                              p->group);
    if (p->meta != QMLA_META_F16 && p->meta != QMLA_META_F32 &&
        p->meta != QMLA_META_Q8)
        return qmla_error_set(err, QMLA_EINVAL,
                              "quantizer: metadata: expected f16 (%d), f32 (%d) or q8 (%d), "
                              "found %d",
                              (int)QMLA_META_F16, (int)QMLA_META_F32, (int)QMLA_META_Q8,
                              (int)p->meta);
    if (width < 1)
        return qmla_error_set(err, QMLA_EINVAL,
                              "quantizer: path width: expected >= 1, found 0");
    if (width >= (size_t)p->group && width % (size_t)p->group != 0)
        return qmla_error_set(err, QMLA_EINVAL,
                              "quantizer: group size %d does not divide path width %zu "
                              "(expected a divisor of %zu or a group wider than the path, "
                              "found remainder %zu)",
                              p->group, width, width, width % (size_t)p->group);
    return QMLA_OK;
}

size_t qmla_quant_group_size(const qmla_quant_params *p, size_t width)
{
    if (!p || p->group < 1)
        return 0;
    return width < (size_t)p->group ? width : (size_t)p->group;
}

size_t qmla_quant_n_groups(const qmla_quant_params *p, size_t width)
{
    size_t g = qmla_quant_group_size(p, width);
    return g ? width / g : 0;
}

size_t qmla_quant_code_bytes(const qmla_quant_params *p, size_t width)
{
    size_t g = qmla_quant_group_size(p, width);
    if (!g || p->bits < 1 || p->bits > 8)
        return 0;
    return (width / g) * qmla_core_packed_bytes(g, p->bits);
}

size_t qmla_quant_meta_bytes(const qmla_quant_params *p, size_t width)
{
    const size_t ng = qmla_quant_n_groups(p, width);
    if (!ng)
        return 0;
    if (p->meta == QMLA_META_Q8)
        return 4 + 2 * ng;
    return (p->meta == QMLA_META_F32 ? 8 : 4) * ng;
}

/* Index of the first non-finite element of x[0..n) (n if none). */
static size_t first_nonfinite(const float *x, size_t n)
{
    size_t j;
    for (j = 0; j < n; j++)
        if (!qmla_core_isfinite(x[j]))
            break;
    return j;
}

/* q8 metadata of token t (see qmla_core_token_meta_q8) with messages. */
static int q8_token(const qmla_quant_params *p, const float *xt, size_t width,
                    size_t G, size_t t, float *s, float *l, uint8_t *sc,
                    int8_t *mq, uint16_t *S16, uint16_t *M16, qmla_error *err)
{
    float bad = 0.0f;
    size_t bg = 0;
    int st = qmla_core_token_meta_q8(xt, width, G, p->bits, s, l, sc, mq, S16,
                                     M16, &bad, &bg);
    switch (st) {
    case QMLA_CORE_OK:
        return QMLA_OK;
    case QMLA_CORE_NONFINITE:
        return qmla_error_set(err, QMLA_ENONFINITE,
                              "quantizer: token %zu, group %zu: non-finite value %g "
                              "at channel %zu",
                              t, bg, (double)bad, bg * G + first_nonfinite(xt + bg * G, G));
    case QMLA_CORE_LO_RANGE:
        return qmla_error_set(err, QMLA_ERANGE,
                              "quantizer: token %zu: q8 metadata: max |lo| = %.9g needs a "
                              "minimum super-scale %.9g above the float16 maximum %g",
                              t, (double)bad, (double)bad / 127.0, (double)QMLA_F16_MAX);
    case QMLA_CORE_SCALE_RANGE:
        return qmla_error_set(err, QMLA_ERANGE,
                              "quantizer: token %zu: q8 metadata: largest group step %.9g "
                              "needs a step super-scale %.9g above the float16 maximum %g",
                              t, (double)bad, (double)bad / 255.0, (double)QMLA_F16_MAX);
    default:
        return qmla_error_set(err, QMLA_EINTERNAL,
                              "quantizer: token %zu: unknown core status %d", t, st);
    }
}

int qmla_quant_q8_fields(const qmla_quant_params *p, const float *x, size_t T,
                         size_t width, uint16_t *S16, uint16_t *M16,
                         uint8_t *sc, int8_t *mq, qmla_error *err)
{
    int st = qmla_quant_check(p, width, err);
    if (st)
        return st;
    if (p->meta != QMLA_META_Q8)
        return qmla_error_set(err, QMLA_EINVAL,
                              "quantizer: q8 fields: expected q8 metadata, found %s",
                              qmla_meta_name(p->meta));
    const size_t G = qmla_quant_group_size(p, width), ng = width / G;
    if (ng > QMLA_Q8_MAX_GROUPS)
        return qmla_error_set(err, QMLA_EINVAL,
                              "quantizer: q8 metadata: at most %d groups per token, "
                              "found %zu", QMLA_Q8_MAX_GROUPS, ng);
    float s[QMLA_Q8_MAX_GROUPS], l[QMLA_Q8_MAX_GROUPS];
    for (size_t t = 0; t < T; t++)
        if ((st = q8_token(p, x + t * width, width, G, t, s, l,
                           sc ? sc + t * ng : NULL, mq ? mq + t * ng : NULL,
                           S16 ? S16 + t : NULL, M16 ? M16 + t : NULL, err)))
            return st;
    return QMLA_OK;
}

int qmla_quant_qdq(const qmla_quant_params *p, const float *x, size_t T,
                   size_t width, uint8_t *codes, float *scale, float *lo,
                   float *xhat, qmla_error *err)
{
    int st = qmla_quant_check(p, width, err);
    if (st)
        return st;
    if (T > 0 && !x)
        return qmla_error_set(err, QMLA_EINVAL, "quantizer: NULL input with %zu tokens", T);

    const size_t G = qmla_quant_group_size(p, width);
    const size_t ng = width / G;
    const size_t gbytes = qmla_core_packed_bytes(G, p->bits);
    const unsigned L = qmla_core_levels(p->bits);
    const char *mname = p->meta == QMLA_META_F16 ? "float16" : "float32";
    float q8s[QMLA_Q8_MAX_GROUPS], q8l[QMLA_Q8_MAX_GROUPS];
    if (p->meta == QMLA_META_Q8 && ng > QMLA_Q8_MAX_GROUPS)
        return qmla_error_set(err, QMLA_EINVAL,
                              "quantizer: q8 metadata: at most %d groups per token, "
                              "found %zu", QMLA_Q8_MAX_GROUPS, ng);

    for (size_t t = 0; t < T; t++) {
        if (p->meta == QMLA_META_Q8 &&
            (st = q8_token(p, x + t * width, width, G, t, q8s, q8l, NULL, NULL,
                           NULL, NULL, err)))
            return st;
        for (size_t g = 0; g < ng; g++) {
            const size_t off = t * width + g * G;
            const float *xg = x + off;
            float s, l, bad;
            if (p->meta == QMLA_META_Q8) {
                s = q8s[g];
                l = q8l[g];
                st = QMLA_CORE_OK;
            } else {
                st = qmla_core_group_meta(xg, G, p->bits, (int)p->meta, &s, &l,
                                          &bad);
            }
            switch (st) {
            case QMLA_CORE_OK:
                break;
            case QMLA_CORE_NONFINITE:
                return qmla_error_set(err, QMLA_ENONFINITE,
                                      "quantizer: token %zu, group %zu: non-finite "
                                      "value %g at channel %zu",
                                      t, g, (double)bad, g * G + first_nonfinite(xg, G));
            case QMLA_CORE_LO_RANGE:
                return qmla_error_set(err, QMLA_ERANGE,
                                      "quantizer: token %zu, group %zu: lo = min(x) = %.9g "
                                      "does not fit %s metadata (|lo| must round to at "
                                      "most %g)",
                                      t, g, (double)bad, mname,
                                      p->meta == QMLA_META_F16 ? (double)QMLA_F16_MAX
                                                               : (double)FLT_MAX);
            case QMLA_CORE_SCALE_RANGE:
                return qmla_error_set(err, QMLA_ERANGE,
                                      "quantizer: token %zu, group %zu: scale = (max - min)/%u "
                                      "= %.9g does not fit %s metadata (must round to at "
                                      "most %g)",
                                      t, g, L, (double)bad, mname,
                                      p->meta == QMLA_META_F16 ? (double)QMLA_F16_MAX
                                                               : (double)FLT_MAX);
            default:
                return qmla_error_set(err, QMLA_EINTERNAL,
                                      "quantizer: token %zu, group %zu: unknown core status %d",
                                      t, g, st);
            }
            qmla_core_group_emit(xg, G, p->bits, s, l,
                                 codes ? codes + (t * ng + g) * gbytes : NULL,
                                 xhat ? xhat + off : NULL);
            if (scale)
                scale[t * ng + g] = s;
            if (lo)
                lo[t * ng + g] = l;
        }
    }
    return QMLA_OK;
}

int qmla_quant_dequant(const qmla_quant_params *p, const uint8_t *codes,
                       const float *scale, const float *lo, size_t T,
                       size_t width, float *xhat, qmla_error *err)
{
    int st = qmla_quant_check(p, width, err);
    if (st)
        return st;
    if (T > 0 && (!codes || !scale || !lo || !xhat))
        return qmla_error_set(err, QMLA_EINVAL,
                              "quantizer: dequant: NULL codes, scale, lo or output "
                              "with %zu tokens", T);

    const size_t G = qmla_quant_group_size(p, width);
    const size_t ng = width / G;
    const size_t gbytes = qmla_core_packed_bytes(G, p->bits);

    for (size_t t = 0; t < T; t++) {
        for (size_t g = 0; g < ng; g++) {
            const float s = scale[t * ng + g], l = lo[t * ng + g];
            if (!qmla_core_isfinite(s) || !qmla_core_isfinite(l))
                return qmla_error_set(err, QMLA_ENONFINITE,
                                      "quantizer: dequant: token %zu, group %zu: "
                                      "non-finite metadata (scale %g, lo %g)",
                                      t, g, (double)s, (double)l);
            const uint8_t *cg = codes + (t * ng + g) * gbytes;
            float *xh = xhat + t * width + g * G;
            for (size_t j = 0; j < G; j++)
                xh[j] = qmla_core_dequant(qmla_core_get_code(cg, j, p->bits), s, l);
        }
    }
    return QMLA_OK;
}

void qmla_quant_pack(const uint8_t *codes, size_t n, int bits, uint8_t *out)
{
    if (bits < 1 || bits > 8)
        return;
    qmla_core_pack(codes, n, bits, out);
}

void qmla_quant_unpack(const uint8_t *packed, size_t n, int bits, uint8_t *codes)
{
    if (bits < 1 || bits > 8)
        return;
    qmla_core_unpack(packed, n, bits, codes);
}

uint16_t qmla_f32_to_f16(float x, int *overflow)
{
    return qmla_core_f32_to_f16(x, overflow);
}

float qmla_f16_to_f32(uint16_t h)
{
    return qmla_core_f16_to_f32(h);
}
