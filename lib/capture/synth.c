/* synth.c — synthetic qmla-capture v1 files (include/qmla/synth.h,
 * docs/synth.md). Random MLA tensors with the shapes, softmax scales, RoPE
 * bases and RoPE layouts of real models; attention output computed by this
 * library from the stored (possibly float16-rounded) tensors. */
#include "qmla/synth.h"
#include "qmla/attention.h"
#include "qmla/capture.h"
#include "qmla/quant.h"
#include "qmla_config.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tau = (d_n + d_r)^-1/2 * mscale^2, mscale = 0.1 * m_all * ln(factor) + 1
 * (docs/models.md); values below are those formulas evaluated. */
static const qmla_shape shapes[] = {
    {"tiny", "(none: small test shape)", 2, 4, 64, 64, 16, 16, 16,
     0.17677669529663687, 1e4, QMLA_ROPE_INTERLEAVED, 1e-6},
    {"deepseek-v2-lite", "deepseek-ai/DeepSeek-V2-Lite", 27, 16, 2048, 512, 128,
     64, 128, 0.11472430527070087, 1e4, QMLA_ROPE_INTERLEAVED, 1e-6},
    {"deepseek-v3", "deepseek-ai/DeepSeek-V3", 61, 128, 7168, 512, 128, 64, 128,
     0.13523377516865213, 1e4, QMLA_ROPE_HALF, 1e-6},
    {"kimi-k2", "moonshotai/Kimi-K2-Instruct", 61, 64, 7168, 512, 128, 64, 128,
     0.13086012926734035, 5e4, QMLA_ROPE_HALF, 1e-6},
    {"moonlight", "moonshotai/Moonlight-16B-A3B", 27, 16, 2048, 512, 128, 64,
     128, 0.07216878364870323, 5e4, QMLA_ROPE_HALF, 1e-5},
    {"longcat-flash-lite", "meituan-longcat/LongCat-Flash-Lite", 28, 32, 3072,
     512, 128, 64, 128, 0.07216878364870323, 5e6, QMLA_ROPE_HALF, 1e-5},
    {"glm-4.7-flash", "zai-org/GLM-4.7-Flash", 47, 20, 2048, 512, 192, 64, 256,
     0.0625, 1e6, QMLA_ROPE_HALF, 1e-5},
    {NULL, NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
};

const qmla_shape *qmla_shapes(void) { return shapes; }

const qmla_shape *qmla_shape_find(const char *name)
{
    for (const qmla_shape *s = shapes; s->name; s++)
        if (strcmp(s->name, name) == 0)
            return s;
    return NULL;
}

static void gauss(gsl_rng *r, float *x, size_t n, double sigma)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)gsl_ran_gaussian_ziggurat(r, sigma);
}

/* Round to float16-representable values when storing as float16, so that
 * the attention output is computed from exactly what is stored. */
static void round_f16(float *x, size_t n, int on)
{
    if (!on)
        return;
    for (size_t i = 0; i < n; i++)
        x[i] = qmla_f16_to_f32(qmla_f32_to_f16(x[i], NULL));
}

int qmla_synth_write(const char *path, const qmla_synth_opts *o,
                     qmla_error *err)
{
    const qmla_shape *sh = o->shape;
    if (!sh)
        return qmla_error_set(err, QMLA_EINVAL, "synth: no shape given");
    const int L = o->n_layers > 0 ? o->n_layers : sh->n_layers;
    if (L > sh->n_layers || o->seqs < 1 || o->tokens < 1 || o->cells < 1)
        return qmla_error_set(err, QMLA_EINVAL,
                              "synth: need 1 <= layers <= %d, seqs >= 1, tokens "
                              ">= 1, cells >= 1 (found %d, %d, %d, %d)",
                              sh->n_layers, L, o->seqs, o->tokens, o->cells);
    const size_t H = (size_t)sh->H, D = (size_t)sh->D, dc = (size_t)sh->d_c,
                 dn = (size_t)sh->d_n, dr = (size_t)sh->d_r,
                 dv = (size_t)sh->d_v, N = (size_t)o->seqs,
                 T = (size_t)o->tokens, P = dr / 2;

    qmla_capture_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_layers = sh->n_layers;
    cfg.H = sh->H;
    cfg.D = sh->D;
    cfg.d_c = sh->d_c;
    cfg.d_n = sh->d_n;
    cfg.d_r = sh->d_r;
    cfg.d_v = sh->d_v;
    cfg.softmax_scale = sh->tau;
    cfg.rope_pairing = (qmla_rope_pairing)sh->rope_pairing;
    cfg.rms_norm_eps = sh->eps;
    snprintf(cfg.model, sizeof cfg.model, "synthetic %s (shape of %s)", sh->name,
             sh->model);
    snprintf(cfg.source, sizeof cfg.source,
             "qmla %s synth: gsl mt19937 seed %lu, %s storage", QMLA_VERSION,
             o->seed, o->float16 ? "float16" : "float32");
    cfg.has_check_tolerance = 1;
    cfg.check_tolerance = o->float16 ? 2e-3 : 1e-5;
    cfg.synthetic = 1;

    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    if (!rng)
        return qmla_error_set(err, QMLA_ENOMEM, "synth: cannot allocate RNG");
    gsl_rng_set(rng, o->seed);

    int st = QMLA_OK;
    qmla_capture_writer *wr = NULL;
    qmla_layer lay;
    memset(&lay, 0, sizeof lay);
    qmla_cell c;
    memset(&c, 0, sizeof c);
    float *gamma = NULL, *bias = NULL;
    qmla_attn_state ws;
    memset(&ws, 0, sizeof ws);
    const qmla_exec ex = qmla_exec_cpu(o->threads);
    const qmla_mla_dims dims = {H, D, dc, dn, dr, dv, sh->tau};

    lay.w_uk = malloc(H * dn * dc * sizeof(float));
    lay.w_uv = malloc(H * dv * dc * sizeof(float));
    lay.w_o = malloc(D * H * dv * sizeof(float));
    lay.kv_norm = malloc(dc * sizeof(float));
    gamma = lay.kv_norm;
    bias = malloc(dc * sizeof(float));
    c.N = N;
    c.T = T;
    c.c_kv = malloc(N * T * dc * sizeof(float));
    c.k_rope = malloc(N * T * dr * sizeof(float));
    c.q_nope = malloc(N * H * T * dn * sizeof(float));
    c.q_rope = malloc(N * H * T * dr * sizeof(float));
    c.attn_out = malloc(N * T * D * sizeof(float));
    c.positions = malloc(N * T * sizeof(int64_t));
    c.k_rope_pre = malloc(N * T * dr * sizeof(float));
    c.q_rope_pre = malloc(N * H * T * dr * sizeof(float));
    c.rope_cos = malloc(N * T * P * sizeof(float));
    c.rope_sin = malloc(N * T * P * sizeof(float));
    if (!lay.w_uk || !lay.w_uv || !lay.w_o || !lay.kv_norm || !bias ||
        !c.c_kv || !c.k_rope || !c.q_nope || !c.q_rope || !c.attn_out ||
        !c.positions || !c.k_rope_pre || !c.q_rope_pre || !c.rope_cos ||
        !c.rope_sin) {
        st = qmla_error_set(err, QMLA_ENOMEM,
                            "synth: out of memory for shape %s with T = %zu",
                            sh->name, T);
        goto done;
    }
    if ((st = qmla_attn_state_alloc(&dims, T, 0, &ws, err)))
        goto done;
    if ((st = qmla_capture_writer_open(path, &cfg, o->float16, o->gzip, &wr,
                                       err)))
        goto done;

    for (int l = 0; l < L; l++) {
        lay.layer = l;
        gauss(rng, lay.w_uk, H * dn * dc, 1.0 / sqrt((double)dn));
        gauss(rng, lay.w_uv, H * dv * dc, 1.0 / sqrt((double)dc));
        gauss(rng, lay.w_o, D * H * dv, 1.0 / sqrt((double)(H * dv)));
        for (size_t j = 0; j < dc; j++)
            gamma[j] = (float)exp(0.5 * gsl_ran_gaussian_ziggurat(rng, 1.0));
        gauss(rng, bias, dc, 1.0);
        round_f16(lay.w_uk, H * dn * dc, o->float16);
        round_f16(lay.w_uv, H * dv * dc, o->float16);
        round_f16(lay.w_o, D * H * dv, o->float16);
        round_f16(gamma, dc, o->float16);
        if ((st = qmla_capture_writer_layer(wr, &lay, err)))
            goto done;
        for (int ci = 0; ci < o->cells; ci++) {
            snprintf(c.name, sizeof c.name, "synth-s%d", ci);
            snprintf(c.dataset, sizeof c.dataset, "synthetic");
            c.seed = ci;
            for (size_t n = 0; n < N; n++) {
                /* content latent: RMSNorm(z + bias) * gamma */
                for (size_t t = 0; t < T; t++) {
                    float *x = c.c_kv + (n * T + t) * dc;
                    double ms = 0.0;
                    for (size_t j = 0; j < dc; j++) {
                        x[j] = (float)gsl_ran_gaussian_ziggurat(rng, 1.0) + bias[j];
                        ms += (double)x[j] * x[j];
                    }
                    const double inv = 1.0 / sqrt(ms / (double)dc + sh->eps);
                    for (size_t j = 0; j < dc; j++)
                        x[j] = (float)(x[j] * inv) * gamma[j];
                }
                for (size_t t = 0; t < T; t++) {
                    c.positions[n * T + t] = (int64_t)t;
                    for (size_t i = 0; i < P; i++) {
                        const double inv_freq =
                            pow(sh->rope_theta, -2.0 * (double)i / (double)dr);
                        const double ang = (double)t * inv_freq;
                        c.rope_cos[(n * T + t) * P + i] = (float)cos(ang);
                        c.rope_sin[(n * T + t) * P + i] = (float)sin(ang);
                    }
                }
                gauss(rng, c.k_rope_pre + n * T * dr, T * dr, 1.0);
                gauss(rng, c.q_nope + n * H * T * dn, H * T * dn, 1.0);
                gauss(rng, c.q_rope_pre + n * H * T * dr, H * T * dr, 1.0);
            }
            const size_t nck = N * T * dc, nkr = N * T * dr;
            round_f16(c.c_kv, nck, o->float16);
            round_f16(c.k_rope_pre, nkr, o->float16);
            round_f16(c.q_nope, N * H * T * dn, o->float16);
            round_f16(c.q_rope_pre, N * H * T * dr, o->float16);
            round_f16(c.rope_cos, N * T * P, o->float16);
            round_f16(c.rope_sin, N * T * P, o->float16);
            for (size_t n = 0; n < N; n++) {
                const float *cs = c.rope_cos + n * T * P, *sn = c.rope_sin + n * T * P;
                qmla_rope_rotate(1, T, dr, sh->rope_pairing, cs, sn,
                                 c.k_rope_pre + n * T * dr, c.k_rope + n * T * dr);
                qmla_rope_rotate(H, T, dr, sh->rope_pairing, cs, sn,
                                 c.q_rope_pre + n * H * T * dr,
                                 c.q_rope + n * H * T * dr);
            }
            round_f16(c.k_rope, nkr, o->float16);
            round_f16(c.q_rope, N * H * T * dr, o->float16);
            const qmla_mla_weights w = {lay.w_uk, lay.w_uv, lay.w_o};
            for (size_t n = 0; n < N; n++) {
                st = qmla_attn_state_forward(&ex, &dims, T, &w,
                                             c.q_nope + n * H * T * dn,
                                             c.q_rope + n * H * T * dr,
                                             c.c_kv + n * T * dc,
                                             c.k_rope + n * T * dr, &ws, err);
                if (st)
                    goto done;
                memcpy(c.attn_out + n * T * D, ws.Y, T * D * sizeof(float));
            }
            /* With pre tensors absent the writer skips them. */
            float *kp = c.k_rope_pre, *qp = c.q_rope_pre, *rc = c.rope_cos,
                  *rs = c.rope_sin;
            if (!o->with_pre)
                c.k_rope_pre = c.q_rope_pre = c.rope_cos = c.rope_sin = NULL;
            st = qmla_capture_writer_cell(wr, l, &c, err);
            c.k_rope_pre = kp;
            c.q_rope_pre = qp;
            c.rope_cos = rc;
            c.rope_sin = rs;
            if (st)
                goto done;
        }
    }
    /* atomic: the capture reaches `path` whole or not at all */
    st = qmla_capture_writer_close(wr, err);
    wr = NULL;
done:
    qmla_capture_writer_abort(wr);
    qmla_attn_state_free(&ws);
    free(bias);
    qmla_layer_free(&lay);
    qmla_cell_free(&c);
    gsl_rng_free(rng);
    return st;
}
