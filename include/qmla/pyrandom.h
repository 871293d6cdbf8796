/* qmla/pyrandom.h — Python's `random.Random(seed)` for non-negative integer
 * seeds, as far as window sampling needs it: MT19937 (Matsumoto and
 * Nishimura's generator) seeded as CPython seeds it from an int, its
 * getrandbits(k), and randint(a, b) through _randbelow (rejection sampling
 * on k = bit_length(n) bits). Written from the algorithm's description; the
 * unit test (tests/core/test_pyrandom.c) compares against /usr/bin/python3.
 *
 * Seeding from an int n >= 0: the key is the 32-bit words of n, least
 * significant first (one word, 0, for n = 0), fed to MT19937's
 * init_by_array. getrandbits(k), 1 <= k <= 64: for k <= 32 the top k bits
 * of one output; for k > 32 the first output is the least significant
 * word and the last output is cut to its top (k mod 32) bits.
 *
 * qmla_sample_windows reproduces sample_windows of
 * experiments/capture/qmla_capture.py: n non-overlapping windows of T
 * tokens, the first of which is BOS when has_bos, from a text of n_text
 * tokens: cuts = sorted(randint(0, n_text - need) for each of n) with
 * need = n (T - has_bos), offset_i = cut_i + i (T - has_bos). */
#ifndef QMLA_PYRANDOM_H
#define QMLA_PYRANDOM_H

#include <stddef.h>
#include <stdint.h>

#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qmla_pyrand {
    uint32_t mt[624];
    int idx;
} qmla_pyrand;

/* random.Random(seed) for seed >= 0. */
void qmla_pyrand_seed(qmla_pyrand *r, uint64_t seed);
/* One raw 32-bit output (genrand_uint32). */
uint32_t qmla_pyrand_u32(qmla_pyrand *r);
/* getrandbits(k) for 1 <= k <= 64 (k outside: 0). */
uint64_t qmla_pyrand_getrandbits(qmla_pyrand *r, int k);
/* randint(a, b) = a + _randbelow(b - a + 1) for a <= b with b - a < 2^63 - 1. */
int64_t qmla_pyrand_randint(qmla_pyrand *r, int64_t a, int64_t b);

/* The window offsets (into the text, without BOS) of sample_windows above,
 * ascending, into offs[0..n). QMLA_EINVAL when n or T is 0, T - has_bos is
 * 0, or the text is shorter than n (T - has_bos) tokens: the message says
 * "<what> is too short: <n> windows of <T> tokens need <need> text tokens,
 * found <n_text>" (Python's wording). */
int qmla_sample_windows(size_t n_text, size_t n, size_t T, int has_bos, uint64_t seed,
                        const char *what, size_t *offs, qmla_error *err);

#ifdef __cplusplus
}
#endif
#endif
