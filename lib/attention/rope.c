/* rope.c — rotary position embedding (include/qmla/rope.h). */
#include "qmla/rope.h"

const char *qmla_rope_pairing_name(qmla_rope_pairing p)
{
    return p == QMLA_ROPE_HALF ? "half" : "interleaved";
}

void qmla_rope_rotate(size_t R, size_t T, size_t d_r, qmla_rope_pairing pairing,
                      const float *cos_, const float *sin_, const float *pre,
                      float *post)
{
    const size_t P = d_r / 2;
    for (size_t r = 0; r < R; r++)
        for (size_t t = 0; t < T; t++) {
            const float *x = pre + (r * T + t) * d_r;
            float *y = post + (r * T + t) * d_r;
            const float *c = cos_ + t * P, *s = sin_ + t * P;
            for (size_t i = 0; i < P; i++) {
                size_t ia, ib;
                if (pairing == QMLA_ROPE_HALF) {
                    ia = i;
                    ib = i + P;
                } else {
                    ia = 2 * i;
                    ib = 2 * i + 1;
                }
                const float a = x[ia], b = x[ib];
                y[ia] = a * c[i] - b * s[i];
                y[ib] = a * s[i] + b * c[i];
            }
        }
}
