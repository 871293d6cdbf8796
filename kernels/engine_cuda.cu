/* engine_cuda.cu — the CUDA engine's operations (lib/driver/engine_cuda.h,
 * docs/cuda-engine.md): one sequence of the matched-NMSE sweep on the GPU
 * and QDQ through the project's kernel. Its C reference twin is the CPU
 * engine (qmla_sweep_sequence, lib/sweep/sweep.c; qmla_quant_qdq); the test
 * is tests/sweep/test_engine_cuda.c (suite cuda, SKIP without a device).
 *
 * The sweep of one sequence, all tensors head-major [H, T, ...] on the
 * device, query tokens in tiles of B (keys 0 .. t1-1 for the tile t0..t1-1,
 * so only the causal part is computed and memory is O(H B T), never
 * O(H T^2) beyond one tile):
 *   ql = q_nope W_UK                                  (strided-batched SGEMM)
 *   per tile:
 *     Z  = tau (ql C^T + q_rope K^T)                  (two SGEMMs)
 *     P1 = Z + tau ql E_C^T,  P2 = Z + tau q_rope E_R^T (copy + SGEMM)
 *     A = softmax(Z); P1 <- softmax(P1) - A; P2 <- softmax(P2) - A  (fused)
 *     U = A C, P1 C, A E_C, P1 E_C, P2 C  -> O = U W_UV^T -> Y = O W_O^T
 *     sums of squares of the five Y tiles (and of the content route sum)
 *     in double, one partial per thread block, no atomics
 *   the partials summed on the host in a fixed order.
 * The error directions E (QDQ, rescaling to the target NMSE) are the CPU
 * engine's own (qmla_sweep_error_direction), so E is bit for bit the CPU's;
 * the response arithmetic after the sums is the CPU's line for line.
 * cuBLAS runs with CUBLAS_DEFAULT_MATH set explicitly (float32, no TF32)
 * on one stream: the same inputs give bit-identical results run after run.
 * --verify items run on the CPU engine (the workspace keeps a CPU one). */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/engine_cuda.h"
#include "qdq_cuda.h"
#include "qmla/norms.h"

/* ---- the device probe ----------------------------------------------------- */

static int probed;
static char dev_name[320];
static char dev_why[640];

static __global__ void probe_kernel(int *x)
{
    if (x)
        *x = 1;
}

static void probe(void)
{
    if (probed)
        return;
    probed = 1;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1) {
        snprintf(dev_why, sizeof dev_why, "no CUDA device: %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "none present");
        cudaGetLastError();
        return;
    }
    cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, 0)) != cudaSuccess) {
        snprintf(dev_why, sizeof dev_why, "CUDA device 0: %s", cudaGetErrorString(e));
        cudaGetLastError();
        return;
    }
    /* the build's kernels must run on it (a binary for its architecture) */
    cudaFuncAttributes fa;
    if ((e = cudaFuncGetAttributes(&fa, probe_kernel)) != cudaSuccess) {
        snprintf(dev_why, sizeof dev_why, "CUDA device 0 (%s, sm_%d%d) cannot run this "
                 "build's kernels (meson option gpu_arch): %s", p.name, p.major, p.minor,
                 cudaGetErrorString(e));
        cudaGetLastError();
        return;
    }
    snprintf(dev_name, sizeof dev_name, "%s (sm_%d%d, %.1f GiB)", p.name, p.major, p.minor,
             (double)p.totalGlobalMem / 1073741824.0);
}

extern "C" const char *qmla_cuda_engine_device(void)
{
    probe();
    return dev_name[0] ? dev_name : NULL;
}

extern "C" const char *qmla_cuda_engine_unusable(void)
{
    probe();
    return dev_name[0] ? "" : dev_why;
}

static size_t tile_override;
extern "C" void qmla_cuda_engine_set_tile(size_t tokens) { tile_override = tokens; }

/* ---- errors ------------------------------------------------------------------ */

static int cuda_fail(qmla_error *err, cudaError_t e, const char *what)
{
    const int st = e == cudaErrorMemoryAllocation ? QMLA_ENOMEM : QMLA_EIO;
    return qmla_error_set(err, st, "cuda engine: %s: %s", what, cudaGetErrorString(e));
}

static const char *cublas_name(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
    }
}

#define CU(call, what)                                                                   \
    do {                                                                                 \
        const cudaError_t e_ = (call);                                                   \
        if (e_ != cudaSuccess) {                                                         \
            st = cuda_fail(err, e_, what);                                               \
            goto out;                                                                    \
        }                                                                                \
    } while (0)
#define CB(call, what)                                                                   \
    do {                                                                                 \
        const cublasStatus_t s_ = (call);                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                               \
            st = qmla_error_set(err, QMLA_EIO, "cuda engine: %s: %s", what,             \
                                cublas_name(s_));                                        \
            goto out;                                                                    \
        }                                                                                \
    } while (0)

/* ---- kernels ---------------------------------------------------------------- */

#define SM_THREADS 256
#define NORM_BLOCKS 128
#define NORM_SUMS 6

/* Sum of v over the block's threads in double, a fixed tree (the same
 * order every run); the result in every thread. */
static __device__ double block_sum(double v, double *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    const double r = sh[0];
    __syncthreads();
    return r;
}

static __device__ float block_max(float v, float *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            const float o = sh[threadIdx.x + s];
            sh[threadIdx.x] = o > sh[threadIdx.x] ? o : sh[threadIdx.x];
        }
        __syncthreads();
    }
    const float r = sh[0];
    __syncthreads();
    return r;
}

/* Causal softmax of one tile row per block: the tile holds query tokens
 * t0 .. t0+B-1 of every head, [H, B, L] with L = t0 + B keys; row (h, r)
 * is token i = t0 + r and sees keys s <= i. a[s] = softmax(z)[s] (minus
 * ref[s] when ref is not NULL), zeros for i < s < L. Like the CPU
 * (lib/attention/attention.c): the row maximum in float, the exponentials
 * in float, their sum in double, one float reciprocal. z and a may alias. */
static __global__ void softmax_rows_kernel(const float *z, const float *ref, float *a,
                                           size_t B, size_t L, size_t t0)
{
    __shared__ double shd[SM_THREADS];
    __shared__ float shf[SM_THREADS];
    const size_t row = blockIdx.x, r = row % B;
    const size_t n = t0 + r + 1;
    const float *zr = z + row * L;
    float *ar = a + row * L;
    const float *rr = ref ? ref + row * L : NULL;
    float m = zr[0];
    for (size_t s = threadIdx.x; s < n; s += blockDim.x)
        m = zr[s] > m ? zr[s] : m;
    m = block_max(m, shf);
    double part = 0.0;
    for (size_t s = threadIdx.x; s < n; s += blockDim.x) {
        const float e = expf(zr[s] - m);
        ar[s] = e;
        part += (double)e;
    }
    const double sum = block_sum(part, shd);
    const float inv = (float)(1.0 / sum);
    for (size_t s = threadIdx.x; s < n; s += blockDim.x)
        ar[s] = rr ? ar[s] * inv - rr[s] : ar[s] * inv;
    for (size_t s = n + threadIdx.x; s < L; s += blockDim.x)
        ar[s] = 0.0f;
}

/* Partial sums of squares over n elements of the tile's five outputs
 * (clean, content matching, aggregation, interaction, RoPE matching):
 * yy, m, a, i, the content route sum (m + a + i)^2, and the RoPE m, one
 * row of NORM_SUMS doubles per block into part. */
static __global__ void norms_kernel(const float *Y0, const float *Ym, const float *Ya,
                                    const float *Yi, const float *Yr, size_t n,
                                    double *part)
{
    __shared__ double sh[SM_THREADS];
    double s[NORM_SUMS] = {0, 0, 0, 0, 0, 0};
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        const double y = Y0[k], m = Ym[k], a = Ya[k], i = Yi[k], r = Yr[k];
        const double t = m + a + i;
        s[0] += y * y;
        s[1] += m * m;
        s[2] += a * a;
        s[3] += i * i;
        s[4] += t * t;
        s[5] += r * r;
    }
    for (int q = 0; q < NORM_SUMS; q++) {
        const double v = block_sum(s[q], sh);
        if (threadIdx.x == 0)
            part[blockIdx.x * NORM_SUMS + q] = v;
    }
}

/* ---- cuBLAS in row-major terms ---------------------------------------------
 * Row-major X [r, c] with row stride ld is column-major X' [c, r] (ld ld).
 * gemm_rm computes, for each of `batch` heads, C = alpha op(A) op(B) +
 * beta C in row-major terms (C [M, N]) as the column-major C' = op(B)'
 * op(A)'. */
static cublasStatus_t gemm_rm(cublasHandle_t h, int ta, int tb, size_t M, size_t N,
                              size_t K, float alpha, const float *A, size_t lda,
                              long long sA, const float *Bm, size_t ldb, long long sB,
                              float beta, float *C, size_t ldc, long long sC, size_t batch)
{
    return cublasSgemmStridedBatched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K,
                                     &alpha, Bm, (int)ldb, sB, A, (int)lda, sA, &beta, C,
                                     (int)ldc, sC, (int)batch);
}

/* ---- the sweep workspace ------------------------------------------------------ */

typedef struct cuda_sweep_ws {
    qmla_mla_dims d;
    size_t T_max, B; /* B: query tokens per tile */
    qmla_sweep_ws *cpu; /* --verify items */
    cudaStream_t stream;
    cublasHandle_t blas;
    /* inputs */
    float *qn, *qr, *C, *K, *Ec, *Er, *wuk, *wuv, *wo;
    /* absorbed queries, tiles */
    float *ql, *Z, *P1, *P2, *U, *O, *Y[5];
    double *part, *hpart; /* [n_tiles * NORM_BLOCKS * NORM_SUMS] */
    /* the weights on the device: those of these host arrays, until the
     * driver's layer_begin (or other pointers) says otherwise */
    const float *w_host[3];
    int w_valid;
    float *hE;            /* host [T_max, d_c + d_r]: the error directions */
} cuda_sweep_ws;

static void sweep_ws_free(void *p)
{
    cuda_sweep_ws *w = (cuda_sweep_ws *)p;
    if (!w)
        return;
    float **f[] = {&w->qn, &w->qr, &w->C,  &w->K,  &w->Ec, &w->Er, &w->wuk, &w->wuv,
                   &w->wo, &w->ql, &w->Z,  &w->P1, &w->P2, &w->U,  &w->O};
    for (size_t k = 0; k < sizeof f / sizeof *f; k++)
        if (*f[k])
            cudaFree(*f[k]);
    for (int k = 0; k < 5; k++)
        if (w->Y[k])
            cudaFree(w->Y[k]);
    if (w->part)
        cudaFree(w->part);
    if (w->hpart)
        cudaFreeHost(w->hpart);
    free(w->hE);
    if (w->blas)
        cublasDestroy(w->blas);
    if (w->stream)
        cudaStreamDestroy(w->stream);
    if (w->cpu) {
        qmla_sweep_ws_free(w->cpu);
        free(w->cpu);
    }
    free(w);
}

static size_t ntiles(size_t T, size_t B) { return (T + B - 1) / B; }

static int sweep_ws_alloc(const qmla_mla_dims *d, size_t T_max, int verify, void **out,
                          qmla_error *err)
{
    *out = NULL;
    if (!qmla_cuda_engine_device())
        return qmla_error_set(err, QMLA_EINVAL, "cuda engine: %s", qmla_cuda_engine_unusable());
    if (T_max == 0)
        return qmla_error_set(err, QMLA_EINVAL, "cuda engine: T_max = 0");
    int st = QMLA_OK;
    cuda_sweep_ws *w = (cuda_sweep_ws *)calloc(1, sizeof *w);
    if (!w)
        return qmla_error_set(err, QMLA_ENOMEM, "cuda engine: out of memory");
    const size_t H = d->H, dc = d->d_c, dr = d->d_r, dn = d->d_n, dv = d->d_v, D = d->D;
    const size_t T = T_max, HV = H * dv;
    size_t free_b = 0, total_b = 0;
    w->d = *d;
    w->T_max = T;
    if (verify) {
        if (!(w->cpu = (qmla_sweep_ws *)calloc(1, sizeof *w->cpu))) {
            st = qmla_error_set(err, QMLA_ENOMEM, "cuda engine: out of memory");
            goto out;
        }
        if ((st = qmla_sweep_ws_alloc(d, T, 1, w->cpu, err))) {
            free(w->cpu);
            w->cpu = NULL;
            goto out;
        }
    }
    CU(cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking), "stream");
    CB(cublasCreate(&w->blas), "cublasCreate");
    CB(cublasSetStream(w->blas, w->stream), "cublasSetStream");
    /* float32 products, no TF32 (matched-NMSE responses difference nearby
     * outputs; docs/cuda-engine.md) */
    CB(cublasSetMathMode(w->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    CU(cudaMalloc((void **)&w->qn, H * T * dn * sizeof(float)), "q_nope");
    CU(cudaMalloc((void **)&w->qr, H * T * dr * sizeof(float)), "q_rope");
    CU(cudaMalloc((void **)&w->C, T * dc * sizeof(float)), "c_kv");
    CU(cudaMalloc((void **)&w->K, T * dr * sizeof(float)), "k_rope");
    CU(cudaMalloc((void **)&w->Ec, T * dc * sizeof(float)), "content error");
    CU(cudaMalloc((void **)&w->Er, T * dr * sizeof(float)), "RoPE error");
    CU(cudaMalloc((void **)&w->wuk, H * dn * dc * sizeof(float)), "w_uk");
    CU(cudaMalloc((void **)&w->wuv, H * dv * dc * sizeof(float)), "w_uv");
    CU(cudaMalloc((void **)&w->wo, D * HV * sizeof(float)), "w_o");
    CU(cudaMalloc((void **)&w->ql, H * T * dc * sizeof(float)), "absorbed queries");
    /* the tile: three [H, B, T] arrays dominate; a quarter of the free
     * device memory (at most 8 GiB) for them */
    CU(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    {
        double budget = (double)free_b / 4.0;
        if (budget > 8.0 * 1073741824.0)
            budget = 8.0 * 1073741824.0;
        const double row = 3.0 * (double)H * (double)T * 4.0 +
                           4.0 * ((double)H * dc + (double)HV + 5.0 * D);
        size_t B = (size_t)(budget / row);
        if (B > T)
            B = T;
        if (tile_override && B > tile_override)
            B = tile_override;
        if (B < 1)
            B = 1;
        w->B = B;
    }
    {
        const size_t B = w->B, nt = ntiles(T, B);
        CU(cudaMalloc((void **)&w->Z, H * B * T * sizeof(float)), "logits tile");
        CU(cudaMalloc((void **)&w->P1, H * B * T * sizeof(float)), "content tile");
        CU(cudaMalloc((void **)&w->P2, H * B * T * sizeof(float)), "RoPE tile");
        CU(cudaMalloc((void **)&w->U, H * B * dc * sizeof(float)), "latent tile");
        CU(cudaMalloc((void **)&w->O, B * HV * sizeof(float)), "head-output tile");
        for (int k = 0; k < 5; k++)
            CU(cudaMalloc((void **)&w->Y[k], B * D * sizeof(float)), "output tile");
        CU(cudaMalloc((void **)&w->part, nt * NORM_BLOCKS * NORM_SUMS * sizeof(double)),
           "partial sums");
        CU(cudaMallocHost((void **)&w->hpart, nt * NORM_BLOCKS * NORM_SUMS * sizeof(double)),
           "host partial sums");
    }
    if (!(w->hE = (float *)malloc(T * (dc + dr) * sizeof(float)))) {
        st = qmla_error_set(err, QMLA_ENOMEM, "cuda engine: out of memory");
        goto out;
    }
out:
    if (st) {
        sweep_ws_free(w);
        return st;
    }
    *out = w;
    return QMLA_OK;
}

/* Host memory the workspace takes (the device memory is checked by
 * cudaMalloc): the error directions, and the CPU workspace of --verify. */
static double sweep_ws_bytes(const qmla_mla_dims *d, size_t T_max, int verify)
{
    const double host = 4.0 * (double)T_max * (double)(d->d_c + d->d_r);
    return host + (verify ? qmla_sweep_ws_bytes(d, T_max, 1) : 0.0);
}

static void zero_response(qmla_response *r)
{
    r->nmse_cache = r->nmse_out = r->response = 0.0;
    r->nmse_out_matching = r->nmse_out_aggregation = 0.0;
    r->nmse_out_interaction = r->nmse_qdq = r->route_residual = 0.0;
    r->verified = 0;
}

/* U (the latent tile) -> O -> Y for one tile of Bt tokens. */
static cublasStatus_t project_tile(cuda_sweep_ws *w, size_t Bt, float *Y)
{
    const qmla_mla_dims *d = &w->d;
    const size_t H = d->H, dc = d->d_c, dv = d->d_v, HV = H * dv;
    /* O[t, h dv + v] = sum_c U[h, t, c] w_uv[h, v, c] */
    cublasStatus_t s = gemm_rm(w->blas, 0, 1, Bt, dv, dc, 1.0f, w->U, dc,
                               (long long)(Bt * dc), w->wuv, dc, (long long)(dv * dc), 0.0f,
                               w->O, HV, (long long)dv, H);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    /* Y = O w_o^T */
    return gemm_rm(w->blas, 0, 1, Bt, d->D, HV, 1.0f, w->O, HV, 0, w->wo, HV, 0, 0.0f, Y,
                   d->D, 0, 1);
}

/* U = X_tile-weights (Bt x L per head) times V [L, dc] (shared by heads). */
static cublasStatus_t aggregate_tile(cuda_sweep_ws *w, size_t Bt, size_t L, const float *A,
                                     const float *V)
{
    const size_t H = w->d.H, dc = w->d.d_c;
    return gemm_rm(w->blas, 0, 0, Bt, dc, L, 1.0f, A, L, (long long)(Bt * L), V, dc, 0, 0.0f,
                   w->U, dc, (long long)(Bt * dc), H);
}

static int sweep_sequence(const qmla_exec *ex, const qmla_sweep_params *p,
                          const qmla_mla_dims *d, size_t T, const qmla_mla_weights *wt,
                          const float *q_nope, const float *q_rope, const float *C,
                          const float *K, int verify, void *ws, qmla_response out[2],
                          qmla_error *err)
{
    cuda_sweep_ws *w = (cuda_sweep_ws *)ws;
    if (T == 0 || T > w->T_max)
        return qmla_error_set(err, QMLA_EINVAL, "sweep: T = %zu outside [1, %zu]", T,
                              w->T_max);
    if (verify) {
        if (!w->cpu)
            return qmla_error_set(err, QMLA_EINVAL,
                                  "sweep: workspace allocated without verify");
        /* the route identity's full perturbed forward runs on the CPU */
        return qmla_sweep_sequence(ex, p, d, T, wt, q_nope, q_rope, C, K, 1, w->cpu, out,
                                   err);
    }
    const size_t H = d->H, dc = d->d_c, dr = d->d_r, dn = d->d_n, dv = d->d_v, D = d->D;
    const size_t HV = H * dv, B = w->B, nt = ntiles(T, B);
    const float tau = (float)d->tau;
    int st = QMLA_OK;
    out[0].path = QMLA_PATH_CONTENT;
    out[1].path = QMLA_PATH_ROPE;

    /* the error directions of both paths, on the host: the CPU's own */
    double xx[2], nmse_qdq[2], nmse_cache[2];
    int degenerate[2];
    float *E[2] = {w->hE, w->hE + T * dc};
    for (int path = 0; path < 2; path++) {
        const int content = path == QMLA_PATH_CONTENT;
        st = qmla_sweep_error_direction(p, content ? C : K, T, content ? dc : dr, E[path],
                                        &xx[path], &nmse_qdq[path], &nmse_cache[path],
                                        &degenerate[path], err);
        if (st)
            return qmla_error_prefix(err, "%s cache: ", qmla_path_name(path));
    }
    const int run[2] = {!degenerate[0], !degenerate[1]};

    cudaStream_t s = w->stream;
    CU(cudaMemcpyAsync(w->qn, q_nope, H * T * dn * sizeof(float), cudaMemcpyHostToDevice, s),
       "copy q_nope");
    CU(cudaMemcpyAsync(w->qr, q_rope, H * T * dr * sizeof(float), cudaMemcpyHostToDevice, s),
       "copy q_rope");
    CU(cudaMemcpyAsync(w->C, C, T * dc * sizeof(float), cudaMemcpyHostToDevice, s), "copy c_kv");
    CU(cudaMemcpyAsync(w->K, K, T * dr * sizeof(float), cudaMemcpyHostToDevice, s), "copy k_rope");
    CU(cudaMemcpyAsync(w->Ec, E[0], T * dc * sizeof(float), cudaMemcpyHostToDevice, s),
       "copy content error");
    CU(cudaMemcpyAsync(w->Er, E[1], T * dr * sizeof(float), cudaMemcpyHostToDevice, s),
       "copy RoPE error");
    if (!(w->w_valid && w->w_host[0] == wt->w_uk && w->w_host[1] == wt->w_uv &&
          w->w_host[2] == wt->w_o)) {
        w->w_valid = 0;
        CU(cudaMemcpyAsync(w->wuk, wt->w_uk, H * dn * dc * sizeof(float),
                           cudaMemcpyHostToDevice, s),
           "copy w_uk");
        CU(cudaMemcpyAsync(w->wuv, wt->w_uv, H * dv * dc * sizeof(float),
                           cudaMemcpyHostToDevice, s),
           "copy w_uv");
        CU(cudaMemcpyAsync(w->wo, wt->w_o, D * HV * sizeof(float), cudaMemcpyHostToDevice, s),
           "copy w_o");
        w->w_host[0] = wt->w_uk;
        w->w_host[1] = wt->w_uv;
        w->w_host[2] = wt->w_o;
        w->w_valid = 1;
    }
    /* absorption: ql[h] = q_nope[h] w_uk[h]  ([T, dn] x [dn, dc]) */
    CB(gemm_rm(w->blas, 0, 0, T, dc, dn, 1.0f, w->qn, dn, (long long)(T * dn), w->wuk, dc,
               (long long)(dn * dc), 0.0f, w->ql, dc, (long long)(T * dc), H),
       "absorption");
    for (size_t k = 0; k < nt; k++) {
        const size_t t0 = k * B, t1 = t0 + B < T ? t0 + B : T, Bt = t1 - t0, L = t1;
        const size_t nZ = H * Bt * L;
        const long long sZ = (long long)(Bt * L);
        const float *qlt = w->ql + t0 * dc, *qrt = w->qr + t0 * dr;
        /* Z = tau ql C^T, += tau q_rope K^T (keys 0..L-1) */
        CB(gemm_rm(w->blas, 0, 1, Bt, L, dc, tau, qlt, dc, (long long)(T * dc), w->C, dc, 0,
                   0.0f, w->Z, L, sZ, H),
           "content logits");
        CB(gemm_rm(w->blas, 0, 1, Bt, L, dr, tau, qrt, dr, (long long)(T * dr), w->K, dr, 0,
                   1.0f, w->Z, L, sZ, H),
           "RoPE logits");
        /* perturbed logits */
        if (run[0]) {
            CU(cudaMemcpyAsync(w->P1, w->Z, nZ * sizeof(float), cudaMemcpyDeviceToDevice, s),
               "copy logits");
            CB(gemm_rm(w->blas, 0, 1, Bt, L, dc, tau, qlt, dc, (long long)(T * dc), w->Ec, dc,
                       0, 1.0f, w->P1, L, sZ, H),
               "content perturbed logits");
        }
        if (run[1]) {
            CU(cudaMemcpyAsync(w->P2, w->Z, nZ * sizeof(float), cudaMemcpyDeviceToDevice, s),
               "copy logits");
            CB(gemm_rm(w->blas, 0, 1, Bt, L, dr, tau, qrt, dr, (long long)(T * dr), w->Er, dr,
                       0, 1.0f, w->P2, L, sZ, H),
               "RoPE perturbed logits");
        }
        const unsigned rows = (unsigned)(H * Bt);
        softmax_rows_kernel<<<rows, SM_THREADS, 0, s>>>(w->Z, NULL, w->Z, Bt, L, t0);
        CU(cudaGetLastError(), "softmax");
        if (run[0]) {
            softmax_rows_kernel<<<rows, SM_THREADS, 0, s>>>(w->P1, w->Z, w->P1, Bt, L, t0);
            CU(cudaGetLastError(), "content softmax delta");
        }
        if (run[1]) {
            softmax_rows_kernel<<<rows, SM_THREADS, 0, s>>>(w->P2, w->Z, w->P2, Bt, L, t0);
            CU(cudaGetLastError(), "RoPE softmax delta");
        }
        /* the five outputs: clean; content matching, aggregation,
         * interaction; RoPE matching */
        CB(aggregate_tile(w, Bt, L, w->Z, w->C), "aggregation");
        CB(project_tile(w, Bt, w->Y[0]), "projection");
        if (run[0]) {
            CB(aggregate_tile(w, Bt, L, w->P1, w->C), "matching route");
            CB(project_tile(w, Bt, w->Y[1]), "projection");
            CB(aggregate_tile(w, Bt, L, w->Z, w->Ec), "aggregation route");
            CB(project_tile(w, Bt, w->Y[2]), "projection");
            CB(aggregate_tile(w, Bt, L, w->P1, w->Ec), "interaction route");
            CB(project_tile(w, Bt, w->Y[3]), "projection");
        } else
            for (int r = 1; r < 4; r++)
                CU(cudaMemsetAsync(w->Y[r], 0, Bt * D * sizeof(float), s), "memset");
        if (run[1]) {
            CB(aggregate_tile(w, Bt, L, w->P2, w->C), "RoPE matching route");
            CB(project_tile(w, Bt, w->Y[4]), "projection");
        } else
            CU(cudaMemsetAsync(w->Y[4], 0, Bt * D * sizeof(float), s), "memset");
        norms_kernel<<<NORM_BLOCKS, SM_THREADS, 0, s>>>(
            w->Y[0], w->Y[1], w->Y[2], w->Y[3], w->Y[4], Bt * D,
            w->part + k * NORM_BLOCKS * NORM_SUMS);
        CU(cudaGetLastError(), "norms");
    }
    CU(cudaMemcpyAsync(w->hpart, w->part, nt * NORM_BLOCKS * NORM_SUMS * sizeof(double),
                       cudaMemcpyDeviceToHost, s),
       "copy sums");
    CU(cudaStreamSynchronize(s), "sweep sequence");
    {
        double sum[NORM_SUMS] = {0, 0, 0, 0, 0, 0};
        for (size_t k = 0; k < nt * NORM_BLOCKS; k++)
            for (int q = 0; q < NORM_SUMS; q++)
                sum[q] += w->hpart[k * NORM_SUMS + q];
        const double yy = sum[0];
        if (!isfinite(yy))
            return qmla_error_set(err, QMLA_ENONFINITE,
                                  "clean attention pass: expected finite values, found %g as "
                                  "the sum of squares of the attention output Y = O W_O "
                                  "(float32 overflow; `qmla check` locates it)",
                                  yy);
        for (int path = 0; path < 2; path++) {
            qmla_response *r = &out[path];
            const int content = path == QMLA_PATH_CONTENT;
            zero_response(r);
            r->degenerate = degenerate[path] || yy == 0.0;
            if (r->degenerate)
                continue;
            const double m = content ? sum[1] : sum[5];
            const double a = content ? sum[2] : 0.0, i = content ? sum[3] : 0.0;
            const double tot = content ? sum[4] : m;
            r->nmse_cache = nmse_cache[path];
            r->nmse_qdq = nmse_qdq[path];
            r->nmse_out = tot / yy;
            r->response = r->nmse_out / nmse_cache[path];
            r->nmse_out_matching = m / yy;
            r->nmse_out_aggregation = a / yy;
            r->nmse_out_interaction = i / yy;
            if (!isfinite(r->response) || !isfinite(r->nmse_out))
                return qmla_error_set(err, QMLA_ENONFINITE,
                                      "%s path: non-finite output NMSE (%g)",
                                      qmla_path_name(path), r->nmse_out);
        }
    }
out:
    if (st)
        cudaStreamSynchronize(s);
    return st;
}

/* Another layer: its weights are copied with its first sequence. */
static void sweep_layer_begin(void *ws) { ((cuda_sweep_ws *)ws)->w_valid = 0; }

extern "C" const qmla_sweep_ops qmla_cuda_sweep_ops = {sweep_ws_alloc, sweep_ws_bytes,
                                                      sweep_ws_free, sweep_sequence,
                                                      sweep_layer_begin};

/* ---- QDQ ----------------------------------------------------------------------- */

/* Host arrays in and out through device copies and the project's kernel
 * (kernels/qdq.cu), bit for bit the CPU's qmla_quant_qdq. */
static int cuda_qdq(const qmla_quant_params *p, const float *x, size_t T, size_t width,
                    uint8_t *codes, float *scale, float *lo, float *xhat, qmla_error *err)
{
    if (!qmla_cuda_engine_device())
        return qmla_error_set(err, QMLA_EINVAL, "cuda engine: %s", qmla_cuda_engine_unusable());
    int st = qmla_quant_check(p, width, err);
    if (st)
        return st;
    if (T == 0)
        return QMLA_OK;
    const size_t ng = width / (size_t)p->group, cb = qmla_quant_code_bytes(p, width);
    float *dx = NULL, *ds = NULL, *dl = NULL;
    uint8_t *dc = NULL;
    void *dws = NULL;
    cudaStream_t s = 0;
    CU(cudaMalloc((void **)&dx, T * width * sizeof(float)), "QDQ input");
    CU(cudaMalloc(&dws, QMLA_QDQ_CUDA_WS_BYTES), "QDQ workspace");
    if (codes)
        CU(cudaMalloc((void **)&dc, T * cb), "QDQ codes");
    if (scale)
        CU(cudaMalloc((void **)&ds, T * ng * sizeof(float)), "QDQ scales");
    if (lo)
        CU(cudaMalloc((void **)&dl, T * ng * sizeof(float)), "QDQ minima");
    CU(cudaMemcpy(dx, x, T * width * sizeof(float), cudaMemcpyHostToDevice), "QDQ copy in");
    if ((st = qmla_qdq_cuda_ws_init(dws, s, err)) ||
        (st = qmla_qdq_cuda(p, dx, T, width, dc, ds, dl, xhat ? dx : NULL, dws, s, err)))
        goto out;
    if (xhat)
        CU(cudaMemcpy(xhat, dx, T * width * sizeof(float), cudaMemcpyDeviceToHost), "QDQ out");
    if (codes)
        CU(cudaMemcpy(codes, dc, T * cb, cudaMemcpyDeviceToHost), "QDQ codes out");
    if (scale)
        CU(cudaMemcpy(scale, ds, T * ng * sizeof(float), cudaMemcpyDeviceToHost), "QDQ out");
    if (lo)
        CU(cudaMemcpy(lo, dl, T * ng * sizeof(float), cudaMemcpyDeviceToHost), "QDQ out");
out:
    cudaFree(dx);
    cudaFree(dc);
    cudaFree(ds);
    cudaFree(dl);
    cudaFree(dws);
    return st;
}

extern "C" const qmla_quant_ops qmla_cuda_quant_ops = {cuda_qdq};
