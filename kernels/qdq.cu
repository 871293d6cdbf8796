/* kernels/qdq.cu — GPU quantize-dequantize (kernels/qdq.h). One thread per
 * (token, group) for f16/f32 metadata, one thread per token for q8 (its
 * super-scales span the token's groups). The arithmetic is quant_core.h's,
 * shared with the CPU; no fast-math, no flush-to-zero (see the header of
 * quant_core.h). Reference twin: qmla_quant_qdq in lib/quant.c. */
#include "qdq.h"
#include "qmla/quant_core.h"

#include <cuda_runtime.h>
#include <stdio.h>

/* First failure, encoded so that atomicMin keeps the lowest (token, group):
 * (token * n_groups + group) * 4 + core status. */
#define NO_FAILURE 0xffffffffffffffffull

struct qdq_args {
    const float *x;     /* [T, width] */
    uint8_t *codes;     /* [T, code_bytes] or nullptr */
    float *scale, *lo;  /* [T, ng] or nullptr */
    float *xhat;        /* [T, width] or nullptr */
    unsigned long long *fail;
    float *fail_value;
    size_t T, width, G, ng, gbytes;
    int bits, meta;
};

__device__ static void report(const qdq_args &a, size_t t, size_t g, int st, float v)
{
    unsigned long long code = ((unsigned long long)(t * a.ng + g) << 2) | (unsigned)st;
    unsigned long long old = atomicMin(a.fail, code);
    if (code < old)
        *a.fail_value = v; /* best effort: the value of the lowest failure seen */
}

__device__ static void emit_group(const qdq_args &a, size_t t, size_t g, float s, float l)
{
    const float *xg = a.x + t * a.width + g * a.G;
    const unsigned L = qmla_core_levels(a.bits);
    uint8_t *cg = a.codes ? a.codes + (t * a.ng + g) * a.gbytes : nullptr;
    float *xh = a.xhat ? a.xhat + t * a.width + g * a.G : nullptr;
    if (cg)
        for (size_t j = 0; j < a.gbytes; j++)
            cg[j] = 0;
    for (size_t j = 0; j < a.G; j++) {
        const unsigned q = qmla_core_code(xg[j], s, l, L);
        if (cg)
            qmla_core_put_code(cg, j, a.bits, q);
        if (xh)
            xh[j] = qmla_core_dequant(q, s, l);
    }
    if (a.scale)
        a.scale[t * a.ng + g] = s;
    if (a.lo)
        a.lo[t * a.ng + g] = l;
}

__global__ void qdq_group_kernel(qdq_args a)
{
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= a.T * a.ng)
        return;
    const size_t t = i / a.ng, g = i % a.ng;
    float s, l, bad;
    const int st = qmla_core_group_meta(a.x + t * a.width + g * a.G, a.G, a.bits,
                                        a.meta, &s, &l, &bad);
    if (st != QMLA_CORE_OK) {
        report(a, t, g, st, bad);
        return;
    }
    emit_group(a, t, g, s, l);
}

__global__ void qdq_q8_kernel(qdq_args a)
{
    const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= a.T)
        return;
    float s[QMLA_QDQ_CUDA_Q8_MAX_GROUPS], l[QMLA_QDQ_CUDA_Q8_MAX_GROUPS], bad = 0.0f;
    size_t bg = 0;
    const int st = qmla_core_token_meta_q8(a.x + t * a.width, a.width, a.G, a.bits, s,
                                           l, nullptr, nullptr, nullptr, nullptr,
                                           &bad, &bg);
    if (st != QMLA_CORE_OK) {
        report(a, t, st == QMLA_CORE_NONFINITE ? bg : 0, st, bad);
        return;
    }
    for (size_t g = 0; g < a.ng; g++)
        emit_group(a, t, g, s[g], l[g]);
}

static int cuda_fail(qmla_error *err, cudaError_t e, const char *what)
{
    return qmla_error_set(err, QMLA_EIO, "CUDA: %s: %s", what, cudaGetErrorString(e));
}

extern "C" int qmla_cuda_available(qmla_error *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cuda_fail(err, e, "cudaGetDeviceCount");
        return 0;
    }
    if (n < 1) {
        qmla_error_set(err, QMLA_EIO, "CUDA: no device");
        return 0;
    }
    return 1;
}

extern "C" int qmla_qdq_cuda(const qmla_quant_params *p, const float *x, size_t T,
                             size_t width, uint8_t *codes, float *scale, float *lo,
                             float *xhat, qmla_error *err)
{
    int st = qmla_quant_check(p, width, err);
    if (st)
        return st;
    if (T == 0)
        return QMLA_OK;
    qdq_args a;
    a.x = x;
    a.codes = codes;
    a.scale = scale;
    a.lo = lo;
    a.xhat = xhat;
    a.T = T;
    a.width = width;
    a.G = qmla_quant_group_size(p, width);
    a.ng = width / a.G;
    a.gbytes = qmla_core_packed_bytes(a.G, p->bits);
    a.bits = p->bits;
    a.meta = (int)p->meta;
    if (p->meta == QMLA_META_Q8 && a.ng > QMLA_QDQ_CUDA_Q8_MAX_GROUPS)
        return qmla_error_set(err, QMLA_EINVAL,
                              "qdq_cuda: q8 metadata: at most %d groups per token, found %zu",
                              QMLA_QDQ_CUDA_Q8_MAX_GROUPS, a.ng);
    unsigned long long *fail = nullptr;
    cudaError_t e = cudaMalloc(&fail, sizeof *fail + sizeof(float));
    if (e != cudaSuccess)
        return cuda_fail(err, e, "cudaMalloc");
    a.fail = fail;
    a.fail_value = (float *)(fail + 1);
    const unsigned long long none = NO_FAILURE;
    e = cudaMemcpy(fail, &none, sizeof none, cudaMemcpyHostToDevice);
    const int threads = 128;
    if (e == cudaSuccess) {
        if (p->meta == QMLA_META_Q8)
            qdq_q8_kernel<<<(unsigned)((T + threads - 1) / threads), threads>>>(a);
        else
            qdq_group_kernel<<<(unsigned)((T * a.ng + threads - 1) / threads), threads>>>(a);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    unsigned long long code = NO_FAILURE;
    float value = 0.0f;
    if (e == cudaSuccess)
        e = cudaMemcpy(&code, fail, sizeof code, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess)
        e = cudaMemcpy(&value, fail + 1, sizeof value, cudaMemcpyDeviceToHost);
    cudaFree(fail);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "qdq kernel");
    if (code == NO_FAILURE)
        return QMLA_OK;
    const size_t idx = (size_t)(code >> 2), t = idx / a.ng, g = idx % a.ng;
    const int cs = (int)(code & 3u);
    if (cs == QMLA_CORE_NONFINITE)
        return qmla_error_set(err, QMLA_ENONFINITE,
                              "qdq_cuda: token %zu, group %zu: non-finite value %g", t, g,
                              (double)value);
    const char *what = cs == QMLA_CORE_LO_RANGE ? "minimum" : "scale";
    if (p->meta == QMLA_META_Q8)
        return qmla_error_set(err, QMLA_ERANGE,
                              "qdq_cuda: token %zu: q8 metadata: %s %.9g needs a float16 "
                              "super-scale beyond %g", t, what, (double)value,
                              (double)QMLA_F16_MAX);
    return qmla_error_set(err, QMLA_ERANGE,
                          "qdq_cuda: token %zu, group %zu: %s %.9g does not fit %s metadata",
                          t, g, what, (double)value, qmla_meta_name(p->meta));
}
