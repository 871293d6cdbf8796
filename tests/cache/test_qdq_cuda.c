/* test_qdq_cuda.c — the GPU quantizer (kernels/qdq.cu) against its C
 * reference twin qmla_quant_qdq, bit for bit: packed codes, stored scale and
 * minimum, dequantized values; every bit width, all three metadata formats,
 * odd shapes, hard distributions (tiny ranges at an offset, float16
 * subnormal scales, outlier channels, signed zeros); and the same error
 * (status, token, group) for NaN and float16 overflow. SKIP (77) without a
 * usable GPU. */
#include "rng.h"
#include "cuda_check.h"
#include "check.h"
#include "qdq_cuda.h"
#include "qmla/quant.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>


static void fill(float *x, size_t n, size_t w, int kind)
{
    for (size_t i = 0; i < n; i++) {
        const size_t j = i % w;
        double v;
        switch (kind) {
        case 0: v = gauss(); break;
        case 1: v = 3.0 + 0.5 * gauss(); break;
        case 2: v = 1e-4 * (2 * unif() - 1); break;
        case 3: v = 1.0 + 1e-6 * gauss(); break;
        case 4: v = gauss() * (j % 13 == 5 ? 50.0 : 1.0); break;
        case 5: v = (double)((int)(unif() * 7) - 3); if (v == 0 && unif() < 0.5) v = -0.0; break;
        default: v = 1e3 * gauss(); break;
        }
        x[i] = (float)v;
    }
}

typedef struct {
    float *x, *s, *l, *xh;
    uint8_t *c;
} dbuf;

static void *ws; /* QMLA_QDQ_CUDA_WS_BYTES of device workspace */

/* off: element offset of x and x^ in their device buffers (1 makes them
 * misaligned for float4, exercising the scalar path). */
static int run_gpu_off(const qmla_quant_params *p, const float *x, size_t T, size_t w,
                       uint8_t *c, float *s, float *l, float *xh, size_t off, qmla_error *err)
{
    const size_t ng = qmla_quant_n_groups(p, w), cb = qmla_quant_code_bytes(p, w);
    dbuf d = {0};
    int st = QMLA_EIO;
    if (cudaMalloc((void **)&d.x, (T * w + off) * 4) || cudaMalloc((void **)&d.xh, (T * w + off) * 4) ||
        cudaMalloc((void **)&d.s, T * ng * 4) || cudaMalloc((void **)&d.l, T * ng * 4) ||
        cudaMalloc((void **)&d.c, T * cb + 1))
        goto out;
    cudaMemcpy(d.x + off, x, T * w * 4, cudaMemcpyHostToDevice);
    cudaMemset(d.xh, 0xff, (T * w + off) * 4); /* poison: every element must be written */
    cudaMemset(d.c, 0xa5, T * cb + 1);
    st = qmla_qdq_cuda(p, d.x + off, T, w, d.c, d.s, d.l, d.xh + off, ws, 0, err);
    if (st == QMLA_OK) {
        cudaMemcpy(c, d.c, T * cb, cudaMemcpyDeviceToHost);
        cudaMemcpy(s, d.s, T * ng * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(l, d.l, T * ng * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(xh, d.xh + off, T * w * 4, cudaMemcpyDeviceToHost);
    }
out:
    if (st == QMLA_EIO && err->msg[0] == 0)
        qmla_error_set(err, QMLA_EIO, "cudaMalloc failed");
    cudaFree(d.x);
    cudaFree(d.xh);
    cudaFree(d.s);
    cudaFree(d.l);
    cudaFree(d.c);
    return st;
}

static int run_gpu(const qmla_quant_params *p, const float *x, size_t T, size_t w,
                   uint8_t *c, float *s, float *l, float *xh, qmla_error *err)
{
    return run_gpu_off(p, x, T, w, c, s, l, xh, 0, err);
}

int main(void)
{
    check_rng_seed(0x853c49e6748fea9bULL);
    qmla_error err;
    skip_without_gpu();
    if (cudaMalloc(&ws, QMLA_QDQ_CUDA_WS_BYTES) != cudaSuccess ||
        qmla_qdq_cuda_ws_init(ws, 0, &err)) {
        printf("FAIL: no workspace\n");
        return 1;
    }
    /* (width, G): the cache's paths, odd group sizes (chunked and whole-group
     * paths), a tile of one token (4096), the widest row (8192), one channel
     * per group (1000 x 1: 1000 groups per token). */
    const size_t shapes[][2] = {{512, 64}, {64, 64}, {576, 64}, {192, 32}, {24, 8}, {7, 7},
                                {96, 12}, {4096, 128}, {8192, 64}, {1000, 1}};
    const int bitsv[] = {2, 3, 4, 8};
    const qmla_meta metas[] = {QMLA_META_F16, QMLA_META_F32, QMLA_META_Q8};
    const size_t T0 = 300;
    size_t elements = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (int b = 0; b < 4; b++)
            for (int m = 0; m < 3; m++)
                for (int kind = 0; kind < 7; kind++) {
                    const size_t w = shapes[si][0];
                    const size_t T = w >= 4096 ? 37 : T0;
                    qmla_quant_params p = {bitsv[b], (int)shapes[si][1], metas[m]};
                    const size_t ng = qmla_quant_n_groups(&p, w), cb = qmla_quant_code_bytes(&p, w);
                    float *x = malloc(T * w * 4), *xh = malloc(T * w * 4), *gxh = malloc(T * w * 4);
                    float *s = malloc(T * ng * 4), *l = malloc(T * ng * 4);
                    float *gs = malloc(T * ng * 4), *gl = malloc(T * ng * 4);
                    uint8_t *c = malloc(T * cb + 1), *gc = malloc(T * cb + 1);
                    fill(x, T * w, w, kind);
                    qmla_error e1, e2;
                    int st1 = qmla_quant_qdq(&p, x, T, w, c, s, l, xh, &e1);
                    int st2 = run_gpu_off(&p, x, T, w, gc, gs, gl, gxh, (size_t)(kind == 2), &e2);
                    CHECK(st1 == st2, "w %zu G %d b %d meta %s kind %d: cpu %d (%s) gpu %d (%s)", w,
                          p.group, p.bits, qmla_meta_name(p.meta), kind, st1, e1.msg, st2, e2.msg);
                    if (st1 == QMLA_OK && st2 == QMLA_OK) {
                        CHECK(!memcmp(c, gc, T * cb), "codes differ (w %zu b %d %s kind %d)", w,
                              p.bits, qmla_meta_name(p.meta), kind);
                        CHECK(!memcmp(s, gs, T * ng * 4) && !memcmp(l, gl, T * ng * 4),
                              "metadata differs (w %zu b %d %s kind %d)", w, p.bits,
                              qmla_meta_name(p.meta), kind);
                        CHECK(!memcmp(xh, gxh, T * w * 4), "x^ differs (w %zu b %d %s kind %d)",
                              w, p.bits, qmla_meta_name(p.meta), kind);
                        elements += T * w;
                    }
                    free(x); free(xh); free(gxh); free(s); free(l); free(gs); free(gl);
                    free(c); free(gc);
                }
    /* errors: NaN at token 5, group 2; float16 overflow at token 7 */
    for (int m = 0; m < 3; m++) {
        qmla_quant_params p = {4, 64, metas[m]};
        float *x = malloc(10 * 512 * 4), *xh = malloc(10 * 512 * 4), s[80], l[80];
        uint8_t c[10 * 256];
        fill(x, 10 * 512, 512, 0);
        x[5 * 512 + 2 * 64 + 3] = NAN;
        qmla_error e1, e2;
        int st1 = qmla_quant_qdq(&p, x, 10, 512, c, s, l, xh, &e1);
        int st2 = run_gpu(&p, x, 10, 512, c, s, l, xh, &e2);
        CHECK(st1 == QMLA_ENONFINITE && st2 == QMLA_ENONFINITE && strstr(e2.msg, "token 5") &&
                  strstr(e2.msg, "group 2"),
              "NaN (%s): cpu %d %s / gpu %d %s", qmla_meta_name(p.meta), st1, e1.msg, st2, e2.msg);
        /* the group's first non-finite value, whichever half of the group
         * (the fast kernel splits a group over two threads) holds it */
        x[5 * 512 + 2 * 64 + 40] = -INFINITY;
        st2 = run_gpu(&p, x, 10, 512, c, s, l, xh, &e2);
        CHECK(st2 == QMLA_ENONFINITE && strstr(e2.msg, "group 2") && strstr(e2.msg, "nan") &&
                  !strstr(e2.msg, "inf"),
              "NaN then -inf (%s): gpu %d %s", qmla_meta_name(p.meta), st2, e2.msg);
        x[5 * 512 + 2 * 64 + 3] = 0.0f;
        x[5 * 512 + 2 * 64 + 50] = NAN;
        st1 = qmla_quant_qdq(&p, x, 10, 512, c, s, l, xh, &e1);
        st2 = run_gpu(&p, x, 10, 512, c, s, l, xh, &e2);
        CHECK(st1 == QMLA_ENONFINITE && st2 == QMLA_ENONFINITE && strstr(e1.msg, "value -inf") &&
                  strstr(e2.msg, "group 2: non-finite value -inf"),
              "-inf then NaN (%s): cpu %d %s / gpu %d %s", qmla_meta_name(p.meta), st1, e1.msg,
              st2, e2.msg);
        x[5 * 512 + 2 * 64 + 40] = x[5 * 512 + 2 * 64 + 50] = 0.0f;
        for (int j = 0; j < 64; j++)
            x[7 * 512 + j] = -1e7f + (float)j;
        st1 = qmla_quant_qdq(&p, x, 10, 512, c, s, l, xh, &e1);
        st2 = run_gpu(&p, x, 10, 512, c, s, l, xh, &e2);
        if (p.meta == QMLA_META_F32)
            CHECK(st1 == QMLA_OK && st2 == QMLA_OK, "f32 holds 1e7: %d %d", st1, st2);
        else
            CHECK(st1 == QMLA_ERANGE && st2 == QMLA_ERANGE && strstr(e2.msg, "token 7"),
                  "overflow (%s): cpu %d %s / gpu %d %s", qmla_meta_name(p.meta), st1, e1.msg,
                  st2, e2.msg);
        free(x);
        free(xh);
    }
    /* one large call: many tiles, vectorised path */
    {
        qmla_quant_params p = {4, 64, QMLA_META_F16};
        const size_t T = 65536, w = 576, ng = 9, cb = 288;
        float *x = malloc(T * w * 4), *xh = malloc(T * w * 4), *gxh = malloc(T * w * 4);
        float *s = malloc(T * ng * 4), *l = malloc(T * ng * 4), *gs = malloc(T * ng * 4),
              *gl = malloc(T * ng * 4);
        uint8_t *c = malloc(T * cb), *gc = malloc(T * cb);
        fill(x, T * w, w, 4);
        qmla_error e1, e2;
        int st1 = qmla_quant_qdq(&p, x, T, w, c, s, l, xh, &e1);
        int st2 = run_gpu(&p, x, T, w, gc, gs, gl, gxh, &e2);
        CHECK(st1 == QMLA_OK && st2 == QMLA_OK, "65536 x 576: %d %d %s", st1, st2, e2.msg);
        CHECK(!memcmp(c, gc, T * cb) && !memcmp(s, gs, T * ng * 4) && !memcmp(l, gl, T * ng * 4) &&
                  !memcmp(xh, gxh, T * w * 4),
              "65536 x 576 differs");
        elements += T * w;
        free(x); free(xh); free(gxh); free(s); free(l); free(gs); free(gl); free(c); free(gc);
    }
    cudaFree(ws);
    printf("compared %zu elements bit for bit\n", elements);
    return check_summary("test_qdq_cuda");
}
