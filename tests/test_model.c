/* tests/test_model.c — the engine's library API (qmla/model.h) on the
 * committed tiny-mla checkpoint:
 *   - loading: the parameter count and dimensions the training README states
 *     (9,770,560 parameters; D 320, 6 layers, 8 heads, d_c 256, d_r 64);
 *   - configuration and policy parsing (accepted names, refused ones);
 *   - forward: token and length validation; the cache hook is called once
 *     per layer and path before and after the quantizer, and a hook that
 *     scales by 2 and back (exact in binary: QDQ(2x) = 2 QDQ(x) with f16
 *     metadata in range) leaves the logits bit-identical to RTN;
 *   - the sink/local policy with S = T covers every token: the logits equal
 *     the bf16 cache's exactly (one representation per token);
 *   - attention in the absorbed and in the expanded form (qmla_attn_form):
 *     with the fp32 cache the logits agree within 2e-4 (float rounding; the
 *     largest logits are ~25), and for every policy and cache under the
 *     expanded form a sink covering all tokens still equals bf16 exactly;
 *     the automatic choice is the expanded form on tiny-mla.
 * Numerical agreement with an independent forward is tests/test_ppl.sh. */
#include "check.h"
#include "qmla/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int calls[2][2];

static int hk_fwd(void *ctx, size_t layer, int path, float *x, size_t T, size_t w,
                  qmla_error *err)
{
    (void)ctx; (void)layer; (void)err;
    calls[0][path]++;
    for (size_t i = 0; i < T * w; i++)
        x[i] *= 2.0f;
    return QMLA_OK;
}

static int hk_inv(void *ctx, size_t layer, int path, float *x, size_t T, size_t w,
                  qmla_error *err)
{
    (void)ctx; (void)layer; (void)err;
    calls[1][path]++;
    for (size_t i = 0; i < T * w; i++)
        x[i] *= 0.5f;
    return QMLA_OK;
}

int main(void)
{
    const char *root = getenv("QMLA_SOURCE_ROOT");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/models/tiny-mla", root ? root : ".");
    qmla_error err;
    qmla_error_clear(&err);
    qmla_model *m = NULL;
    int st = qmla_model_load(dir, &m, &err);
    CHECK_OK(st, err);
    if (st)
        return check_summary("test_model");
    const qmla_model_config *c = qmla_model_cfg(m);
    CHECK(qmla_model_n_params(m) == 9770560, "parameters %zu", qmla_model_n_params(m));
    CHECK(c->D == 320 && c->L == 6 && c->H == 8 && c->d_c == 256 && c->d_r == 64 &&
          c->d_n == 64 && c->d_v == 64 && c->V == 320 && c->bos == 256 &&
          c->pairing == QMLA_ROPE_INTERLEAVED && c->max_pos == 512,
          "dimensions");
    CHECK(fabs(c->tau - 1.0 / sqrt(128.0)) < 1e-15, "tau %g", c->tau);

    qmla_cache_spec s;
    CHECK_OK(qmla_cache_spec_parse("C4R4", "sink4/local128", &s, &err), err);
    CHECK(s.c_bits == 4 && s.r_bits == 4 && s.sink == 4 && s.window == 128 &&
          s.meta == QMLA_META_F16 && s.group == 64, "C4R4 sink4/local128");
    CHECK_OK(qmla_cache_spec_parse("C2R4-q8", "none", &s, &err), err);
    CHECK(s.c_bits == 2 && s.r_bits == 4 && s.meta == QMLA_META_Q8 && !s.sink && !s.window,
          "C2R4-q8");
    CHECK_OK(qmla_cache_spec_parse("C3R4", "none", &s, &err), err);
    CHECK(s.c_bits == 3 && s.r_bits == 4 && s.group == 64, "C3R4");
    CHECK_OK(qmla_cache_spec_parse("bf16", NULL, &s, &err), err);
    CHECK(s.c_bits == QMLA_CACHE_BF16, "bf16");
    const char *badc[] = {"C5R4", "C3R5", "C4R4-q9", "C4", "bf16-q8", "C4R4x", "C3R3x"};
    for (size_t i = 0; i < sizeof badc / sizeof *badc; i++)
        CHECK(qmla_cache_spec_parse(badc[i], "none", &s, &err) == QMLA_EINVAL, "%s", badc[i]);
    const char *badp[] = {"sink4", "sink-1/local3", "local128", "sink4/local128x"};
    for (size_t i = 0; i < sizeof badp / sizeof *badp; i++)
        CHECK(qmla_cache_spec_parse("C4R4", badp[i], &s, &err) == QMLA_EINVAL, "%s", badp[i]);

    enum { T = 48 };
    qmla_model_ws *ws = NULL;
    CHECK_OK(qmla_model_ws_alloc(m, T, &ws, &err), err);
    const char *txt = "int main(void) { return 0; } /* a short text */";
    int32_t tok[T];
    tok[0] = 256;
    for (size_t t = 1; t < T; t++)
        tok[t] = (unsigned char)txt[t - 1];
    float *a = malloc(sizeof(float) * T * c->V), *b = malloc(sizeof(float) * T * c->V);
    qmla_cache_spec rtn, bf, all;
    qmla_cache_spec_parse("C2R4", "none", &rtn, &err);
    qmla_cache_spec_parse("bf16", "none", &bf, &err);
    qmla_cache_spec_parse("C2R4", "sink48/local0", &all, &err);
    CHECK(qmla_model_forward(m, &rtn, ws, tok, T + 1, a, &err) == QMLA_EINVAL, "T > T_max");
    tok[3] = 320;
    CHECK(qmla_model_forward(m, &rtn, ws, tok, T, a, &err) == QMLA_EINVAL &&
          strstr(err.msg, "token 3"), "token out of range: %s", err.msg);
    tok[3] = (unsigned char)txt[2];
    CHECK_OK(qmla_model_forward(m, &rtn, ws, tok, T, a, &err), err);
    qmla_cache_hook hook = {hk_fwd, hk_inv, NULL, "scale2"};
    qmla_cache_spec hs = rtn;
    hs.hook = &hook;
    CHECK_OK(qmla_model_forward(m, &hs, ws, tok, T, b, &err), err);
    CHECK(!memcmp(a, b, sizeof(float) * T * c->V), "hook x2 / x0.5 changes the logits");
    CHECK(calls[0][0] == 6 && calls[0][1] == 6 && calls[1][0] == 6 && calls[1][1] == 6,
          "hook calls %d %d %d %d", calls[0][0], calls[0][1], calls[1][0], calls[1][1]);
    CHECK_OK(qmla_model_forward(m, &bf, ws, tok, T, a, &err), err);
    CHECK_OK(qmla_model_forward(m, &all, ws, tok, T, b, &err), err);
    CHECK(!memcmp(a, b, sizeof(float) * T * c->V), "sink covering all = bf16");
    CHECK_OK(qmla_model_forward(m, &rtn, ws, tok, T, b, &err), err);
    double d = 0;
    for (size_t i = 0; i < T * c->V; i++)
        d = fmax(d, fabs((double)a[i] - b[i]));
    CHECK(d > 1e-3, "C2R4 moves the logits (max %g)", d);
    /* the two attention forms */
    CHECK(qmla_model_expanded_cheaper(c, T) && qmla_model_expanded_cheaper(c, 512),
          "expanded form chosen on tiny-mla");
    qmla_cache_spec fp;
    qmla_cache_spec_parse("fp32", "none", &fp, &err);
    qmla_model_set_attn_form(m, QMLA_ATTN_ABSORBED);
    CHECK_OK(qmla_model_forward(m, &fp, ws, tok, T, a, &err), err);
    qmla_model_set_attn_form(m, QMLA_ATTN_EXPANDED);
    CHECK_OK(qmla_model_forward(m, &fp, ws, tok, T, b, &err), err);
    d = 0;
    for (size_t i = 0; i < T * c->V; i++)
        d = fmax(d, fabs((double)a[i] - b[i]));
    CHECK(d < 2e-4 && d > 0, "absorbed vs expanded fp32 logits: max |d| %g", d);
    CHECK_OK(qmla_model_forward(m, &bf, ws, tok, T, a, &err), err);
    CHECK_OK(qmla_model_forward(m, &all, ws, tok, T, b, &err), err);
    CHECK(!memcmp(a, b, sizeof(float) * T * c->V), "expanded: sink covering all = bf16");
    qmla_model_set_attn_form(m, QMLA_ATTN_AUTO);
    free(a);
    free(b);
    qmla_model_ws_free(ws);
    qmla_model_free(m);
    CHECK(qmla_model_load("/nonexistent-model", &m, &err) == QMLA_EIO &&
          strstr(err.msg, "config.json"), "missing: %s", err.msg);
    return check_summary("test_model");
}
