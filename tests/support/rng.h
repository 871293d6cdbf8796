/* tests/support/rng.h — the tests' one random source (xorshift64, uniform in
 * (0, 1), Box–Muller normal). Each test seeds it once at the top of main
 * with its own recorded constant (check_rng_seed), so every draw of every
 * run is the same. Not for the library: its draws come from GSL or
 * qmla/pyrandom.h with recorded seeds. */
#ifndef QMLA_TEST_RNG_H
#define QMLA_TEST_RNG_H

#include <math.h>
#include <stdint.h>

static uint64_t check_rng_state = 0x9e3779b97f4a7c15ULL;
static inline void check_rng_seed(uint64_t s) { check_rng_state = s ? s : 1; }
static inline double unif(void)
{
    check_rng_state ^= check_rng_state << 13;
    check_rng_state ^= check_rng_state >> 7;
    check_rng_state ^= check_rng_state << 17;
    return ((double)(check_rng_state >> 11) + 0.5) / 9007199254740992.0;
}
static inline double gauss(void)
{
    return sqrt(-2 * log(unif())) * cos(6.283185307179586 * unif());
}

#endif
