/* tests/engine/test_model.c — the engine's library API (qmla/model.h) on the
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
 *     the automatic choice is the expanded form on tiny-mla;
 *   - the expanded form computes the sink/local policy by causal blocks
 *     (only the keys some query of a block reads in a representation):
 *     layer 0's attention output over T = 300 (three blocks of 128) for
 *     sink4/local100, sink0/local100, sink4/local0, sink4/local200 and
 *     sink200/local0 equals the absorbed form's square mixing
 *     (qmla_attn_mix_logits / qmla_attn_split over every key) within 2e-5
 *     of its largest value, while reading one key in the wrong
 *     representation moves it by more (layer 0: the cache both forms read
 *     is the same);
 *   - the clean prefix (qmla_model_ppl_multi): a protected configuration
 *     computed in two phases has as its first S + W logit rows the BF16
 *     forward pass of that length, bit for bit, and its mean NLL agrees with
 *     the single pass (a tap forces it) within 0.2 % (not closer: a last-bit
 *     difference flips BF16 roundings and codes of the cache downstream);
 *     qmla_model_ppl_multi over bf16, protected and unprotected
 *     configurations gives each one's qmla_model_ppl result alone bit for
 *     bit, with 1 and 2 threads; with a progress callback the same, every
 *     window reported; a callback that stops it at once: *stopped, no result.
 *   - one window's perplexity (CTX tokens counted, row t scoring byte t)
 *     equals the NLL summed from the forward's logits;
 *   - qmla_text_as_python against Python's strict UTF-8 decoder on near
 *     misses (surrogates, the last continuation byte, C0/C1, F5..F7,
 *     truncation) and its universal newlines (CR LF, lone CR at the end);
 *   - qmla_capture_native refuses a repeated or descending layer selection.
 * Numerical agreement with an independent forward is tests/engine/test_ppl.sh. */
#include "check.h"
#include "qmla/model.h"
#include "qmla/capture_native.h"

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

/* The attention output of layer 0 (tap) for tokens tok[0..T). */
typedef struct y0_ctx {
    float *y;
    size_t n;
} y0_ctx;

static int y0_tap(void *ctx, const qmla_model_tap_layer *d, qmla_error *err)
{
    (void)err;
    y0_ctx *k = ctx;
    memcpy(k->y, d->attn_out, k->n * sizeof(float));
    return QMLA_OK;
}

static int layer0_out(qmla_model *m, qmla_attn_form f, const char *cfg, const char *pol,
                      qmla_model_ws *ws, const int32_t *tok, size_t T, float *y,
                      qmla_error *err)
{
    qmla_cache_spec s;
    int st = qmla_cache_spec_parse(cfg, pol, &s, err);
    if (st)
        return st;
    y0_ctx k = {y, T * qmla_model_cfg(m)->D};
    const qmla_model_tap tap = {y0_tap, &k, 1};
    qmla_model_set_attn_form(m, f);
    st = qmla_model_forward_tap(m, &s, ws, tok, T, NULL, &tap, err);
    qmla_model_set_attn_form(m, QMLA_ATTN_AUTO);
    return st;
}

/* mean NLL of tokens 1..T-1 given the logits of rows 0..T-2 */
static double seq_nll(const float *lg, const int32_t *tok, size_t T, size_t V)
{
    double s = 0;
    for (size_t t = 0; t + 1 < T; t++) {
        const float *r = lg + t * V;
        double mx = r[0], z = 0;
        for (size_t v = 1; v < V; v++)
            mx = fmax(mx, r[v]);
        for (size_t v = 0; v < V; v++)
            z += exp(r[v] - mx);
        s += log(z) + mx - r[tok[t + 1]];
    }
    return s / (double)(T - 1);
}

/* tok[0] = BOS (256), then the bytes of txt taken cyclically with stride:
 * tok[t] = txt[(t * stride) mod strlen(txt)] */
static void bos_text_tokens(int32_t *tok, size_t T, const char *txt, size_t stride)
{
    tok[0] = 256;
    for (size_t t = 1; t < T; t++)
        tok[t] = (unsigned char)txt[(t * stride) % strlen(txt)];
}

/* what the progress callback saw; stop_at_first: return 1 on the first call */
typedef struct prog_log {
    size_t calls, max_done, total;
    int stop_at_first;
} prog_log;

static int prog_cb(void *ctx, size_t done, size_t total, size_t resumed)
{
    prog_log *p = ctx;
    p->calls++;
    p->max_done = done > p->max_done ? done : p->max_done;
    p->total = total;
    return p->stop_at_first || resumed != 0;
}

/* max |a - b| / max |b| */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        mx = fmax(mx, fabs((double)b[i]));
    }
    return mx > 0 ? d / mx : d;
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
    /* the sink/local policy by causal blocks (expanded) against the square
     * mixing (absorbed), layer 0, three query blocks */
    {
        enum { TB = 300 };
        qmla_model_ws *wb = NULL;
        CHECK_OK(qmla_model_ws_alloc(m, TB, &wb, &err), err);
        int32_t tb[TB];
        bos_text_tokens(tb, TB, txt, 7);
        const size_t n = TB * c->D;
        float *ya = malloc(sizeof(float) * n), *yb = malloc(sizeof(float) * n),
              *yc = malloc(sizeof(float) * n);
        const char *pols[] = {"sink4/local100", "sink0/local100", "sink4/local0",
                              "sink4/local200", "sink200/local0"};
        for (size_t k = 0; k < sizeof pols / sizeof *pols && wb; k++) {
            CHECK_OK(layer0_out(m, QMLA_ATTN_ABSORBED, "C2R4", pols[k], wb, tb, TB, ya, &err),
                     err);
            CHECK_OK(layer0_out(m, QMLA_ATTN_EXPANDED, "C2R4", pols[k], wb, tb, TB, yb, &err),
                     err);
            const double d = rel_diff(yb, ya, n);
            CHECK(d < 2e-5, "%s: blocked vs square mixing: max |d| / max %g", pols[k], d);
            printf("layer 0, C2R4 %-15s blocked vs square: %.2e\n", pols[k], d);
        }
        /* one key step off the window: sink4/local99 and local101 differ from
         * local100 by more than the tolerance above */
        const char *near[] = {"sink4/local99", "sink4/local101", "sink3/local100"};
        CHECK_OK(layer0_out(m, QMLA_ATTN_ABSORBED, "C2R4", "sink4/local100", wb, tb, TB, ya,
                            &err), err);
        for (size_t k = 0; k < sizeof near / sizeof *near && wb; k++) {
            CHECK_OK(layer0_out(m, QMLA_ATTN_EXPANDED, "C2R4", near[k], wb, tb, TB, yc, &err),
                     err);
            const double d = rel_diff(yc, ya, n);
            CHECK(d > 1e-4, "%s vs sink4/local100: max |d| / max %g", near[k], d);
            printf("layer 0, C2R4 %-15s vs sink4/local100: %.2e\n", near[k], d);
        }
        free(ya);
        free(yb);
        free(yc);
        qmla_model_ws_free(wb);
    }
    /* QMLA_TEST_SMALL=1 (a sanitizer build; tests/meson.build): the two
     * sections below on windows of 160 tokens (the release build: 300),
     * still past every sink + window of their policies (at most 104) */
    const int small = getenv("QMLA_TEST_SMALL") != NULL;
    enum { CTX_MAX = 300 };
    const size_t ctx = small ? 160 : CTX_MAX;
    /* the clean prefix: two phases against the single pass */
    {
        const size_t TP = ctx;
        qmla_model_ws *wp = NULL;
        CHECK_OK(qmla_model_ws_alloc(m, TP, &wp, &err), err);
        int32_t tp[CTX_MAX];
        bos_text_tokens(tp, TP, txt, 5);
        float *la = malloc(sizeof(float) * TP * c->V), *lb = malloc(sizeof(float) * TP * c->V);
        const qmla_model_tap none = {NULL, NULL, 0};
        const char *cf[][2] = {{"C4R4", "sink4/local100"}, {"C2R4", "sink4/local100"},
                               {"C2R4", "sink0/local60"}, {"C2R4", "sink30/local0"}};
        qmla_cache_spec bf16;
        qmla_cache_spec_parse("bf16", "none", &bf16, &err);
        for (size_t k = 0; k < sizeof cf / sizeof *cf && wp; k++) {
            qmla_cache_spec sp;
            qmla_cache_spec_parse(cf[k][0], cf[k][1], &sp, &err);
            const size_t P = (size_t)(sp.sink + sp.window);
            CHECK_OK(qmla_model_forward(m, &sp, wp, tp, TP, la, &err), err);
            CHECK_OK(qmla_model_forward(m, &bf16, wp, tp, P, lb, &err), err);
            CHECK(!memcmp(la, lb, sizeof(float) * P * c->V), "%s %s: the first %zu rows are "
                  "not the BF16 forward of length %zu", cf[k][0], cf[k][1], P, P);
            CHECK_OK(qmla_model_forward_tap(m, &sp, wp, tp, TP, lb, &none, &err), err);
            const double na = seq_nll(la, tp, TP, c->V), nb = seq_nll(lb, tp, TP, c->V);
            CHECK(fabs(na - nb) < 2e-3 * nb, "%s %s: two phases %g vs one pass %g nats/token",
                  cf[k][0], cf[k][1], na, nb);
            printf("%s %s: nats/token two phases %.6f, single pass %.6f\n", cf[k][0],
                   cf[k][1], na, nb);
        }
        free(la);
        free(lb);
        qmla_model_ws_free(wp);
        /* sharing: each configuration of a group as alone, bit for bit */
        /* QMLA_TEST_SMALL=1: two windows of ctx (160) tokens and 2 threads
         * only (the release build checks 3 windows of 300 with 1 and 2
         * threads) */
        enum { NW_MAX = 3 };
        const size_t NW = small ? 2 : NW_MAX;
        uint8_t text[CTX_MAX * NW_MAX];
        const size_t ntext = ctx * NW;
        for (size_t i = 0; i < ntext; i++)
            text[i] = (uint8_t)txt[(i * 3) % strlen(txt)];
        const char *gc[][2] = {{"bf16", "none"}, {"C4R4", "sink4/local100"},
                               {"C4R4", "none"}, {"C2R4", "sink4/local100"},
                               {"C2R4", "sink8/local50"}};
        enum { NG = sizeof gc / sizeof *gc };
        qmla_cache_spec gs[NG];
        qmla_ppl_result ra[NG], rg[NG];
        for (size_t j = 0; j < NG; j++)
            qmla_cache_spec_parse(gc[j][0], gc[j][1], &gs[j], &err);
        for (int th = small ? 2 : 1; th <= 2; th++) {
            const qmla_exec ex = qmla_exec_cpu(th);
            CHECK_OK(qmla_model_ppl_multi(m, &ex, gs, NG, text, ntext, ctx, 0, rg, &err),
                     err);
            for (size_t j = 0; j < NG; j++) {
                CHECK_OK(qmla_model_ppl(m, &ex, &gs[j], text, ntext, ctx, 0, &ra[j], &err),
                         err);
                CHECK(ra[j].nll_sum == rg[j].nll_sum && rg[j].tokens == ctx * NW,
                      "%s %s, %d threads: shared %.17g, alone %.17g", gc[j][0], gc[j][1], th,
                      rg[j].nll_sum, ra[j].nll_sum);
            }
            CHECK(rg[1].nll_sum != rg[2].nll_sum && rg[1].nll_sum != rg[0].nll_sum &&
                  rg[3].nll_sum != rg[4].nll_sum, "configurations differ");
            /* progress: a callback that lets it run changes nothing and sees
             * every window; one that stops it at its first call is called
             * once and gives *stopped, QMLA_OK and no result */
            prog_log pl = {0, 0, 0, 0};
            qmla_ppl_result rp[NG];
            int stopped = -1;
            CHECK_OK(qmla_model_ppl_multi_progress(m, &ex, gs, NG, text, ntext, ctx, 0,
                                                   prog_cb, &pl, &stopped, rp, &err), err);
            for (size_t j = 0; j < NG; j++)
                CHECK(rp[j].nll_sum == rg[j].nll_sum, "with progress: %s %s", gc[j][0],
                      gc[j][1]);
            CHECK(!stopped && pl.calls == NW && pl.total == NW && pl.max_done == NW,
                  "%d threads: progress calls %zu, max done %zu of %zu, stopped %d", th,
                  pl.calls, pl.max_done, pl.total, stopped);
            prog_log ps = {0, 0, 0, 1};
            CHECK(qmla_model_ppl_multi_progress(m, &ex, gs, NG, text, ntext, ctx, 0,
                                                prog_cb, &ps, &stopped, rp, &err) == QMLA_OK &&
                      stopped == 1 && ps.calls == 1 && rp[0].tokens == 0 && rp[0].nll_sum == 0,
                  "%d threads: a stop: stopped %d, calls %zu, tokens %zu", th, stopped, ps.calls,
                  rp[0].tokens);
        }
    }
    /* perplexity of one window against the forward: the window [BOS] + the
     * first CTX - 1 bytes predicts the CTX bytes (row t scores byte t), and
     * CTX tokens are counted */
    {
        enum { CTX = 40 };
        int32_t wt[CTX];
        wt[0] = c->bos;
        for (size_t t = 1; t < CTX; t++)
            wt[t] = (unsigned char)txt[t - 1];
        qmla_cache_spec bs;
        qmla_cache_spec_parse("bf16", "none", &bs, &err);
        CHECK_OK(qmla_model_forward(m, &bs, ws, wt, CTX, a, &err), err);
        double want = 0;
        for (size_t t = 0; t < CTX; t++) {
            const float *r = a + t * c->V;
            double mx = r[0], z = 0;
            for (size_t v = 1; v < c->V; v++)
                mx = fmax(mx, r[v]);
            for (size_t v = 0; v < c->V; v++)
                z += exp(r[v] - mx);
            want += log(z) + mx - r[(unsigned char)txt[t]];
        }
        const qmla_exec ex1 = qmla_exec_cpu(1);
        qmla_ppl_result pr;
        CHECK_OK(qmla_model_ppl(m, &ex1, &bs, (const uint8_t *)txt, CTX, CTX, 0, &pr, &err),
                 err);
        CHECK(pr.tokens == CTX && fabs(pr.nll_sum - want) <= 1e-5 * want,
              "one window: %zu tokens, NLL %.9g, expected %d and %.9g (the forward)",
              pr.tokens, pr.nll_sum, CTX, want);
    }
    /* The text as Python reads it (qmla_text_as_python): each case is a
     * near miss of a UTF-8 rule after one ASCII byte; the verdict and the
     * offset are those of /usr/bin/python3 bytes.decode("utf-8")
     * (UnicodeDecodeError.start), checked when this table was written. */
    {
        static const struct { const char *b; size_t n; int ok; } u8[] = {
            {"x\xED\x9F\xBF", 4, 1},     /* U+D7FF, the last before the surrogates */
            {"x\xED\xA0\x80", 4, 0},     /* U+D800 encoded: a surrogate */
            {"x\xE2\x82\xAC", 4, 1},     /* U+20AC */
            {"x\xE2\x82\x41", 4, 0},     /* last continuation byte of 3 not 10xxxxxx */
            {"x\xF0\x9F\x98\x80", 5, 1}, /* U+1F600 */
            {"x\xF0\x9F\x98\x41", 5, 0}, /* last continuation byte of 4 not 10xxxxxx */
            {"x\xE2\x82", 3, 0},         /* truncated at the end */
            {"x\xC2\x80", 3, 1},         /* U+0080, the first 2-byte form */
            {"x\xC0\x80", 3, 0},         /* overlong NUL */
            {"x\xC1\xBF", 3, 0},         /* overlong U+007F */
            {"x\xF4\x8F\xBF\xBF", 5, 1}, /* U+10FFFF */
            {"x\xF5\x80\x80\x80", 5, 0}, /* beyond U+10FFFF */
            {"x\xF7\xBF\xBF\xBF", 5, 0},
        };
        for (size_t i = 0; i < sizeof u8 / sizeof *u8; i++) {
            uint8_t buf[8];
            size_t n = u8[i].n;
            memcpy(buf, u8[i].b, n);
            st = qmla_text_as_python(buf, &n, "case", &err);
            if (u8[i].ok)
                CHECK(st == QMLA_OK && n == u8[i].n && !memcmp(buf, u8[i].b, n),
                      "UTF-8 case %zu: valid, refused: %s", i, err.msg);
            else
                CHECK(st == QMLA_EFORMAT && strstr(err.msg, "case: ") &&
                          strstr(err.msg, "at offset 1"),
                      "UTF-8 case %zu: invalid (Python: at offset 1), found %d: %s", i, st,
                      st ? err.msg : "accepted");
        }
        /* universal newlines (io.TextIOWrapper, newline=None): CR LF and a
         * lone CR (also the last byte) become one LF each */
        uint8_t nl[] = "a\r\nb\rc\r\n\r\n\r";
        size_t nn = sizeof nl - 1;
        CHECK(qmla_text_as_python(nl, &nn, "nl", &err) == QMLA_OK && nn == 8 &&
                  !memcmp(nl, "a\nb\nc\n\n\n", 8),
              "newlines: %zu bytes \"%.*s\", expected 8 (Python's a\\nb\\nc\\n\\n\\n)", nn,
              (int)nn, (const char *)nl);
    }
    /* native capture: the layer selection ascending, a repeated index
     * or a descending one refused before any work */
    {
        static const uint8_t corpus_text[] = "abcdefghijklmnopqrstuvwxyz0123456789 the text";
        qmla_native_corpus corp = {"t", "t.txt", corpus_text, sizeof corpus_text - 1};
        qmla_native_cell cell = {0, 0};
        const int lsel[][3] = {{2, 2, 3}, {0, 3, 3}, {3, 1, 4}};
        char out[4200];
        snprintf(out, sizeof out, "test_model_layers.h5");
        for (size_t i = 0; i < 3; i++) {
            qmla_native_capture_opts o;
            memset(&o, 0, sizeof o);
            o.model_dir = dir;
            o.model_name = "tiny-mla";
            o.corpora = &corp;
            o.n_corpora = 1;
            o.cells = &cell;
            o.n_cells = 1;
            o.seqs = 1;
            o.tokens = 8;
            o.layers = lsel[i];
            o.n_layers = 3;
            o.threads = 1;
            st = qmla_capture_native(m, out, &o, &err);
            CHECK(st == QMLA_EINVAL && strstr(err.msg, "expected ascending"),
                  "layers {%d, %d, %d}: expected a refusal, found %d: %s", lsel[i][0],
                  lsel[i][1], lsel[i][2], st, st ? err.msg : "accepted");
            FILE *wf = fopen(out, "rb");
            CHECK(!wf, "layers {%d, %d, %d}: a refused capture wrote %s", lsel[i][0],
                  lsel[i][1], lsel[i][2], out);
            if (wf)
                fclose(wf);
            remove(out);
        }
    }
    free(a);
    free(b);
    qmla_model_ws_free(ws);
    qmla_model_free(m);
    CHECK(qmla_model_load("/nonexistent-model", &m, &err) == QMLA_EIO &&
          strstr(err.msg, "config.json"), "missing: %s", err.msg);
    return check_summary("test_model");
}
