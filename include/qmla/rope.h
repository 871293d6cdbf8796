/* qmla/rope.h — rotary position embedding under the two channel pairings
 * MLA checkpoints use (docs/math.md §1, docs/capture-format.md). */
#ifndef QMLA_ROPE_H
#define QMLA_ROPE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qmla_rope_pairing {
    QMLA_ROPE_INTERLEAVED = 0, /* pairs (2i, 2i+1) */
    QMLA_ROPE_HALF = 1         /* pairs (i, i + d_r/2) */
} qmla_rope_pairing;

const char *qmla_rope_pairing_name(qmla_rope_pairing p); /* "interleaved"/"half" */

/* post = rotate(pre): pair i of token t turned by the angle whose cosine and
 * sine are cos_[t, i], sin_[t, i] ([T, d_r/2]); pre and post [R, T, d_r] for
 * R rows of sequences (heads), may not alias. */
void qmla_rope_rotate(size_t R, size_t T, size_t d_r, qmla_rope_pairing pairing,
                      const float *cos_, const float *sin_, const float *pre,
                      float *post);

#ifdef __cplusplus
}
#endif
#endif
