/* qmla/quant.h — the cache quantizer of docs/math.md §2, one definition for
 * the analysis library, the CUDA kernels and the tests.
 *
 * Per-token asymmetric affine quantization in groups of G contiguous channels.
 * For one group x[0..G) and b bits (b in {2,3,4,8}), L = 2^b - 1:
 *   lo = min(x), hi = max(x), scale = (hi - lo) / L        (float32)
 *   scale and lo are rounded to the metadata precision (f16 default, or f32)
 *   and the *stored* values are used below;
 *   q  = clamp(round_half_even((x - lo) / scale), 0, L)    (IEEE division)
 *        q = 0 when the stored scale is 0;
 *   x^ = fmaf(q, scale, lo)                                 (float32)
 * The per-group arithmetic lives in qmla/quant_core.h (inline, host+device);
 * this header adds whole-token / whole-tensor entry points, packing and
 * validation.
 *
 * Packing: codes least-significant first, element j of a group at bit offset
 * b*j from the start of the group, each group starting on a byte boundary, so
 * a group takes ceil(G*b/8) bytes (INT4: 2 codes per byte, INT2: 4).
 */
#ifndef QMLA_QUANT_H
#define QMLA_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "qmla/engine.h"
#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qmla_meta {
    QMLA_META_F16 = 0, /* scale and lo stored as IEEE binary16 (default) */
    QMLA_META_F32 = 1, /* scale and lo stored as float32 */
    QMLA_META_Q8 = 2   /* compact: per token two float16 super-scales, per
                          group 8-bit step and minimum codes (quant_core.h,
                          docs/quantizer.md) */
} qmla_meta;

/* q8 metadata keeps one token's groups on the stack: at most this many. */
#define QMLA_Q8_MAX_GROUPS 1024

typedef struct qmla_quant_params {
    int bits;       /* 2, 3, 4 or 8 */
    int group;      /* G, channels per group (default 64); must divide the
                       path width, or the width is narrower than G (one group) */
    qmla_meta meta; /* metadata precision */
} qmla_quant_params;

/* Defaults: 4 bits, group 64, f16 metadata. */
qmla_quant_params qmla_quant_defaults(void);

/* Validate params for a path of `width` channels. QMLA_EINVAL with a message
 * if bits is unsupported, group < 1, or group does not divide width (a width
 * smaller than group is accepted: it is one group of `width`). */
int qmla_quant_check(const qmla_quant_params *p, size_t width, qmla_error *err);

/* Effective group size for a path of `width` channels (min(group, width)). */
size_t qmla_quant_group_size(const qmla_quant_params *p, size_t width);
/* Metadata bytes per token: f16 4*n_groups, f32 8*n_groups,
 * q8 4 + 2*n_groups. */
size_t qmla_quant_meta_bytes(const qmla_quant_params *p, size_t width);
/* "f16", "f32" or "q8". */
const char *qmla_meta_name(qmla_meta m);

/* The stored q8 fields of T tokens: S16, M16 [T] (float16 bits),
 * sc [T, n_groups] (uint8), mq [T, n_groups] (int8); errors as
 * qmla_quant_qdq. p->meta must be QMLA_META_Q8. */
int qmla_quant_q8_fields(const qmla_quant_params *p, const float *x, size_t T,
                         size_t width, uint16_t *S16, uint16_t *M16,
                         uint8_t *sc, int8_t *mq, qmla_error *err);

/* Number of groups per token. */
size_t qmla_quant_n_groups(const qmla_quant_params *p, size_t width);
/* Bytes of packed codes per token (sum over groups of ceil(Geff*b/8)). */
size_t qmla_quant_code_bytes(const qmla_quant_params *p, size_t width);

/* Quantize T tokens of `width` channels (x row-major [T, width]).
 * codes : [T, code_bytes] packed, or NULL to skip packing
 * scale : [T, n_groups] stored scales (as float32 values exactly
 *         representable in the metadata precision), may be NULL
 * lo    : [T, n_groups] stored minimums, may be NULL
 * xhat  : [T, width] dequantized values, may be NULL (may alias x)
 * Errors: QMLA_ERANGE naming the token and group when lo or scale overflows
 * float16 metadata; QMLA_ENONFINITE when a group holds NaN/Inf. On error the
 * outputs are unspecified. */
int qmla_quant_qdq(const qmla_quant_params *p, const float *x, size_t T,
                   size_t width, uint8_t *codes, float *scale, float *lo,
                   float *xhat, qmla_error *err);

/* Dequantize packed codes with stored metadata (inverse of the above):
 * codes [T, code_bytes], scale/lo [T, n_groups] -> xhat [T, width]. */
int qmla_quant_dequant(const qmla_quant_params *p, const uint8_t *codes,
                       const float *scale, const float *lo, size_t T,
                       size_t width, float *xhat, qmla_error *err);

/* Pack n codes (each < 2^bits) of one group, LSB first, into
 * ceil(n*bits/8) bytes; unpack is its inverse. */
void qmla_quant_pack(const uint8_t *codes, size_t n, int bits, uint8_t *out);
void qmla_quant_unpack(const uint8_t *packed, size_t n, int bits, uint8_t *codes);

/* IEEE binary16 conversions, round-to-nearest-even; `overflow` (may be NULL)
 * is set to 1 when a finite float rounds to infinity. */
uint16_t qmla_f32_to_f16(float x, int *overflow);
float qmla_f16_to_f32(uint16_t h);

/* ---- the engine seam (qmla/engine.h) ---------------------------------- */

/* QDQ of an engine. The CPU engine: qmla_quant_qdq. */
typedef struct qmla_quant_ops {
    int (*qdq)(const qmla_quant_params *p, const float *x, size_t T, size_t width,
               uint8_t *codes, float *scale, float *lo, float *xhat, qmla_error *err);
} qmla_quant_ops;

const qmla_quant_ops *qmla_engine_quant(const qmla_engine *e);

#ifdef __cplusplus
}
#endif
#endif
