/* decode_ref.c — double-precision reference of paged decode attention on
 * the reconstructed cache: the C twin of kernels/decode.cu (contract:
 * include/qmla/decode.h). Each token is reconstructed exactly as the kernel
 * uses it (qmla_kv_token_model: packed values rounded to BF16, or unrounded
 * for the C4R4 / C2R4 kernel), then logits, one global softmax, the
 * latent aggregation and the log-sum-exp are computed in double.
 * Test: tests/cache/test_kvcache.c (CPU), tests/cache/test_decode_cuda.c (GPU).
 */
#include "qmla/decode.h"
#include "qmla/kvcache.h"

#include <math.h>
#include <stdlib.h>

int qmla_decode_ref(const qmla_kv_cache *kc, const qmla_decode_args *a, double *out,
                    double *lse, qmla_error *err)
{
    return qmla_decode_ref_model(kc, a, 0, out, lse, err);
}

int qmla_decode_ref_model(const qmla_kv_cache *kc, const qmla_decode_args *a, int packed_f32,
                          double *out, double *lse, qmla_error *err)
{
    int st = qmla_kv_check(kc ? &kc->cfg : NULL, err);
    if (st)
        return st;
    if (a->batch < 0 || a->s_q < 1 || a->heads < 1)
        return qmla_error_set(err, QMLA_EINVAL, "decode ref: batch %d, s_q %d, heads %d",
                              a->batch, a->s_q, a->heads);
    const int H = a->heads, R = a->s_q * H;
    long maxlen = 0;
    for (int b = 0; b < a->batch; b++)
        if (a->seq_len[b] > maxlen)
            maxlen = a->seq_len[b];
    float *kv = malloc(((size_t)maxlen + 1) * QMLA_KV_D * sizeof *kv);
    double *z = malloc(((size_t)maxlen + 1) * sizeof *z);
    double *qd = malloc((size_t)QMLA_KV_D * sizeof *qd);
    if (!kv || !z || !qd) {
        free(kv);
        free(z);
        free(qd);
        return qmla_error_set(err, QMLA_ENOMEM, "decode ref: %ld tokens", maxlen);
    }
    for (int b = 0; b < a->batch; b++) {
        const long len = a->seq_len[b];
        for (long t = 0; t < len; t++)
            qmla_kv_token_model(kc, a, b, t, packed_f32, kv + (size_t)t * QMLA_KV_D);
        for (int r = 0; r < R; r++) {
            const int i = r / H; /* query token */
            const long vis = len - a->s_q + i + 1; /* tokens t < vis are visible */
            const uint16_t *q = a->q + ((size_t)b * R + r) * QMLA_KV_D;
            double *o = out + ((size_t)b * R + r) * QMLA_KV_DC;
            for (int j = 0; j < QMLA_KV_D; j++)
                qd[j] = qmla_core_bf16_to_f32(q[j]);
            for (int j = 0; j < QMLA_KV_DC; j++)
                o[j] = 0.0;
            if (vis <= 0) {
                lse[(size_t)b * R + r] = -INFINITY;
                continue;
            }
            double m = -INFINITY, sum = 0.0;
            for (long t = 0; t < vis; t++) {
                const float *k = kv + (size_t)t * QMLA_KV_D;
                double d = 0.0;
                for (int j = 0; j < QMLA_KV_D; j++)
                    d += qd[j] * (double)k[j];
                z[t] = d * (double)a->scale;
                if (z[t] > m)
                    m = z[t];
            }
            for (long t = 0; t < vis; t++) {
                const double p = exp(z[t] - m);
                const float *v = kv + (size_t)t * QMLA_KV_D;
                sum += p;
                for (int j = 0; j < QMLA_KV_DC; j++)
                    o[j] += p * (double)v[j];
            }
            for (int j = 0; j < QMLA_KV_DC; j++)
                o[j] /= sum;
            lse[(size_t)b * R + r] = m + log(sum);
        }
    }
    free(kv);
    free(z);
    free(qd);
    return QMLA_OK;
}
