/* bench/bench_fill.cuh — the deterministic device fills and the median of
 * bench_decode.cu, shared with bench_flashmla.cu so that both time the same
 * values (a hash of the element index and a seed). */
#ifndef QMLA_BENCH_FILL_CUH
#define QMLA_BENCH_FILL_CUH

#include <cuda_bf16.h>
#include <stdint.h>
#include <stdlib.h>

__device__ static inline uint32_t hash32(uint64_t i, uint32_t seed)
{
    uint64_t x = i * 0x9e3779b97f4a7c15ull + seed;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return (uint32_t)x;
}

/* Random BF16 in about [-2, 2). */
__global__ void fill_bf16(uint16_t *p, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float v = ((float)(hash32(i, seed) >> 8) / 16777216.0f) * 4.0f - 2.0f;
        p[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
    }
}
__global__ void fill_i32(int32_t *p, size_t n, int32_t v)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = v;
}

static int cmp_f(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}
/* Median of n values (sorts v). */
static float median(float *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_f);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

#endif
