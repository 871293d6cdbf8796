/* lib/core/pyrandom.c — qmla/pyrandom.h: MT19937 with CPython's integer seeding,
 * getrandbits and randint, and the window sampling of the Python capture
 * tool. */
#include "qmla/pyrandom.h"

#include <stdlib.h>

enum { MT_N = 624, MT_M = 397 };

static void init_genrand(qmla_pyrand *r, uint32_t s)
{
    r->mt[0] = s;
    for (int i = 1; i < MT_N; i++) {
        const uint32_t p = r->mt[i - 1];
        r->mt[i] = 1812433253u * (p ^ (p >> 30)) + (uint32_t)i;
    }
    r->idx = MT_N;
}

static void init_by_array(qmla_pyrand *r, const uint32_t *key, int len)
{
    init_genrand(r, 19650218u);
    int i = 1, j = 0;
    for (int k = MT_N > len ? MT_N : len; k > 0; k--) {
        const uint32_t p = r->mt[i - 1];
        r->mt[i] = (r->mt[i] ^ ((p ^ (p >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
        i++;
        j++;
        if (i >= MT_N) {
            r->mt[0] = r->mt[MT_N - 1];
            i = 1;
        }
        if (j >= len)
            j = 0;
    }
    for (int k = MT_N - 1; k > 0; k--) {
        const uint32_t p = r->mt[i - 1];
        r->mt[i] = (r->mt[i] ^ ((p ^ (p >> 30)) * 1566083941u)) - (uint32_t)i;
        i++;
        if (i >= MT_N) {
            r->mt[0] = r->mt[MT_N - 1];
            i = 1;
        }
    }
    r->mt[0] = 0x80000000u; /* a non-zero initial state is assured */
}

void qmla_pyrand_seed(qmla_pyrand *r, uint64_t seed)
{
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    init_by_array(r, key, key[1] ? 2 : 1);
}

static void regenerate(qmla_pyrand *r)
{
    for (int i = 0; i < MT_N; i++) {
        const uint32_t y = (r->mt[i] & 0x80000000u) | (r->mt[(i + 1) % MT_N] & 0x7fffffffu);
        r->mt[i] = r->mt[(i + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    r->idx = 0;
}

uint32_t qmla_pyrand_u32(qmla_pyrand *r)
{
    if (r->idx >= MT_N)
        regenerate(r);
    uint32_t y = r->mt[r->idx++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

uint64_t qmla_pyrand_getrandbits(qmla_pyrand *r, int k)
{
    if (k < 1 || k > 64)
        return 0;
    if (k <= 32)
        return qmla_pyrand_u32(r) >> (32 - k);
    /* two words, least significant first; the second keeps its top k-32 bits */
    const uint64_t lo = qmla_pyrand_u32(r);
    const uint64_t hi = qmla_pyrand_u32(r) >> (64 - k);
    return lo | (hi << 32);
}

static int bit_length(uint64_t n)
{
    int k = 0;
    while (n) {
        k++;
        n >>= 1;
    }
    return k;
}

int64_t qmla_pyrand_randint(qmla_pyrand *r, int64_t a, int64_t b)
{
    const uint64_t n = (uint64_t)(b - a) + 1u; /* >= 1 */
    const int k = bit_length(n);
    uint64_t x = qmla_pyrand_getrandbits(r, k);
    while (x >= n)
        x = qmla_pyrand_getrandbits(r, k);
    return a + (int64_t)x;
}

static int cmp_size(const void *a, const void *b)
{
    const size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

int qmla_sample_windows(size_t n_text, size_t n, size_t T, int has_bos, uint64_t seed,
                        const char *what, size_t *offs, qmla_error *err)
{
    const size_t w = T - (has_bos ? 1 : 0);
    if (n == 0 || T == 0 || w == 0 || T > SIZE_MAX / n)
        return qmla_error_set(err, QMLA_EINVAL, "%s: expected at least one window of at "
                              "least %d tokens, found %zu windows of %zu tokens",
                              what, has_bos ? 2 : 1, n, T);
    const size_t need = n * w;
    if (n_text < need)
        return qmla_error_set(err, QMLA_EINVAL, "%s is too short: %zu windows of %zu tokens "
                              "need %zu text tokens, found %zu", what, n, T, need, n_text);
    qmla_pyrand r;
    qmla_pyrand_seed(&r, seed);
    for (size_t i = 0; i < n; i++)
        offs[i] = (size_t)qmla_pyrand_randint(&r, 0, (int64_t)(n_text - need));
    qsort(offs, n, sizeof *offs, cmp_size);
    for (size_t i = 0; i < n; i++)
        offs[i] += i * w;
    return QMLA_OK;
}
