/* tests/engine/test_model_transforms.c — cache transforms inside the engine
 * (qmla_model_apply_transforms, qmla_model_transform_hook, qmla_model_save)
 * on the committed tiny-mla checkpoint, with transforms that move every
 * degree of freedom: in every layer a content rotation R = diag(sign γ) H
 * (Sylvester Hadamard / 16) times a second, random Givens-mixed orthogonal
 * factor, content scales e^N(0, 0.5²), RoPE angles U(−π, π) and RoPE
 * scales e^N(0, 0.5²) (mt19937-style LCG with a fixed seed):
 *   - with the cache unquantized (fp32), the weights-folded model's NLL
 *     equals the original's within 1e-4 nats/token (measured ~1e-7) on a
 *     256-token text, and its logits within 1e-3;
 *   - the online hook (the transforms module applied on the fly) writes the
 *     cache qmla_transform_effective_content / _rope compute from the clean
 *     cache of the same tokens, bit for bit (layer 0, C4R4, f16 metadata);
 *   - the folded model's pre-quantization cache at layer 0 is X T as the
 *     transforms module computes it (relative 1e-5), and quantized at C4R4 it
 *     matches the module's QDQ(X T) except where a last-bit difference moves
 *     a code by one step (at most 1 % of the entries, never more than one
 *     step). The two differ in where the cache is rounded to BF16 (after
 *     T^-1 online, in the transformed basis when folded): on this text and
 *     these deliberately ill-conditioned transforms that moves the C4R4 NLL
 *     by 0.04 nats/token (without the BF16 rounding the two agree to 2e-4),
 *     so the NLLs are checked within 0.06 and both must differ from plain
 *     RTN's by more than 0.06 (the transforms act);
 *   - refusals: a gain of another model (also in its last element), a
 *     non-orthogonal R, one column of R not of unit length, another pairing,
 *     a layer outside the model, two transforms for one layer (adjacent);
 *     the model is unchanged after a refusal;
 *   - the safetensors writer pads the JSON header with 0 to 7 spaces (names
 *     of 1 to 16 bytes: two JSON lengths already a multiple of 8);
 *   - qmla_model_save writes a checkpoint that loads back to the same logits
 *     exactly (float32), copies config.json, and refuses the model's own
 *     folder. */
#include "check.h"
#include "qmla/model.h"
#include "engine/engine_int.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { T = 256, NL = 6 };

static uint64_t rng = 88172645463325252ull;
static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static double nrand(void)
{
    double u = urand() + 1e-300, v = urand();
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* a recording hook: wraps `inner` (may be NULL), stores layer 0's content
 * values before the quantizer (after inner forward) and after it (before
 * inner inverse), and after inner inverse */
typedef struct rec {
    const qmla_cache_hook *inner;
    float *pre, *post, *eff; /* [T, d_c] */
} rec;

static int rec_fwd(void *ctx, size_t layer, int path, float *x, size_t n, size_t w,
                   qmla_error *err)
{
    rec *r = ctx;
    int st = r->inner ? r->inner->forward(r->inner->ctx, layer, path, x, n, w, err) : 0;
    if (!st && layer == 0 && path == 0)
        memcpy(r->pre, x, n * w * sizeof *x);
    return st;
}

static int rec_inv(void *ctx, size_t layer, int path, float *x, size_t n, size_t w,
                   qmla_error *err)
{
    rec *r = ctx;
    if (layer == 0 && path == 0)
        memcpy(r->post, x, n * w * sizeof *x);
    int st = r->inner ? r->inner->inverse(r->inner->ctx, layer, path, x, n, w, err) : 0;
    if (!st && layer == 0 && path == 0)
        memcpy(r->eff, x, n * w * sizeof *x);
    return st;
}

static double nll(const float *lg, const int32_t *tok, size_t V)
{
    double s = 0;
    for (size_t t = 0; t + 1 < T; t++) {
        const float *r = lg + t * V;
        double mx = r[0], z = 0;
        for (size_t v = 1; v < V; v++)
            mx = r[v] > mx ? r[v] : mx;
        for (size_t v = 0; v < V; v++)
            z += exp(r[v] - mx);
        s += log(z) + mx - r[tok[t + 1]];
    }
    return s / (T - 1);
}

/* The safetensors writer (qmla_st_finish, used by qmla_model_save): the
 * 8-byte length is the JSON header plus the fewest spaces (0 to 7) that make
 * it a multiple of 8, checked for tensor names of 1 to 16 bytes, so that the
 * JSON's own length is a multiple of 8 for two of them. */
static void st_header_pad(void)
{
    const float x = 1.0f;
    int aligned = 0;
    for (size_t len = 1; len <= 16; len++) {
        qmla_error err;
        qmla_error_clear(&err);
        qmla_st_out o = {0};
        o.dtype = "F32";
        o.hdr = json_object();
        char name[32];
        memset(name, 't', len);
        name[len] = 0;
        CHECK_OK(qmla_st_add(&o, name, &x, 1, 0, &err), err);
        CHECK_OK(qmla_st_finish(&o, &err), err);
        if (!o.hj || !o.head) {
            qmla_st_out_free(&o);
            continue;
        }
        const size_t hl = strlen(o.hj), want = (hl + 7) / 8 * 8;
        aligned += hl % 8 == 0;
        uint64_t got = 0;
        for (int b = 0; b < 8; b++)
            got |= (uint64_t)o.head[b] << (8 * b);
        int spaces = 1;
        for (size_t i = hl; i < want; i++)
            spaces &= o.head[8 + i] == ' ';
        CHECK(got == want && o.lens[0] == 8 + want && spaces && !memcmp(o.head + 8, o.hj, hl),
              "name of %zu bytes: JSON of %zu bytes: header length %llu, %zu bytes in slot 0, "
              "expected %zu and %zu (the JSON and %zu spaces)", len, hl,
              (unsigned long long)got, o.lens[0], want, 8 + want, want - hl);
        qmla_st_out_free(&o);
    }
    CHECK(aligned == 2, "%d names gave an 8-aligned JSON header, expected 2", aligned);
}

int main(void)
{
    const char *root = getenv("QMLA_SOURCE_ROOT");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/models/tiny-mla", root ? root : ".");
    qmla_error err;
    qmla_error_clear(&err);
    st_header_pad();
    qmla_model *m0 = NULL, *m1 = NULL;
    CHECK_OK(qmla_model_load(dir, &m0, &err), err);
    CHECK_OK(qmla_model_load(dir, &m1, &err), err);
    if (!m0 || !m1)
        return check_summary("test_model_transforms");
    const qmla_model_config *c = qmla_model_cfg(m0);
    const size_t dc = c->d_c, dr = c->d_r, V = c->V;

    /* transforms */
    qmla_transform tf[NL];
    const float *gam[NL];
    for (int l = 0; l < NL; l++) {
        CHECK_OK(qmla_transform_alloc(dc, dr, c->pairing, &tf[l], &err), err);
        tf[l].layer = l;
        gam[l] = qmla_model_latent_gain(m0, (size_t)l);
        CHECK_OK(qmla_transform_quarot(&tf[l], &err), err);
        /* R <- diag(sign γ) H G with G a product of random Givens rotations */
        for (size_t j = 0; j < dc; j++)
            if (gam[l][j] < 0)
                for (size_t k = 0; k < dc; k++)
                    tf[l].rot[j * dc + k] = -tf[l].rot[j * dc + k];
        for (int g = 0; g < 512; g++) {
            size_t a = (size_t)(urand() * dc), b = (size_t)(urand() * dc);
            if (a == b)
                continue;
            double th = (urand() - 0.5) * M_PI, cs = cos(th), sn = sin(th);
            for (size_t j = 0; j < dc; j++) {
                double x = tf[l].rot[j * dc + a], y = tf[l].rot[j * dc + b];
                tf[l].rot[j * dc + a] = cs * x - sn * y;
                tf[l].rot[j * dc + b] = sn * x + cs * y;
            }
        }
        for (size_t j = 0; j < dc; j++)
            tf[l].cscale[j] = exp(0.5 * nrand());
        for (size_t i = 0; i < dr / 2; i++) {
            tf[l].angle[i] = (urand() - 0.5) * 2.0 * M_PI;
            tf[l].rscale[i] = exp(0.5 * nrand());
        }
    }

    const char *txt =
        "The quick brown fox jumps over the lazy dog. In the beginning the engine read "
        "every weight of the checkpoint and wrote the cache as each token arrived; "
        "int main(void) { for (int i = 0; i < 10; i++) printf(\"%d\\n\", i); return 0; } "
        "Then the transforms folded into the weights left the function unchanged, as "
        "the algebra promised, and quantization acted in the new coordinates.";
    int32_t tok[T];
    tok[0] = c->bos;
    for (size_t t = 1; t < T; t++)
        tok[t] = (unsigned char)txt[(t - 1) % strlen(txt)];
    qmla_model_ws *ws = NULL;
    CHECK_OK(qmla_model_ws_alloc(m0, T, &ws, &err), err);
    float *a = malloc(sizeof(float) * T * V), *b = malloc(sizeof(float) * T * V);
    qmla_cache_spec fp, q4;
    qmla_cache_spec_parse("fp32", "none", &fp, &err);
    qmla_cache_spec_parse("C4R4", "none", &q4, &err);

    /* refusals leave the model unchanged */
    {
        float *g2 = malloc(dc * sizeof *g2);
        memcpy(g2, gam[0], dc * sizeof *g2);
        g2[7] *= 1.001f;
        const float *gg[NL];
        memcpy(gg, gam, sizeof gg);
        gg[0] = g2;
        CHECK(qmla_model_apply_transforms(m1, tf, gg, NL, &err) == QMLA_EMISMATCH &&
              strstr(err.msg, "gamma[7]") && strstr(err.msg, "Not fusible"),
              "other gain: %s", err.msg);
        /* the last element of the gain */
        memcpy(g2, gam[0], dc * sizeof *g2);
        g2[dc - 1] *= 1.001f;
        CHECK(qmla_model_apply_transforms(m1, tf, gg, NL, &err) == QMLA_EMISMATCH &&
                  strstr(err.msg, "layer 0") && strstr(err.msg, "gamma[255]") && dc == 256,
              "other last gain: %s", err.msg);
        free(g2);
        tf[2].rot[5] += 1e-3;
        CHECK(qmla_model_apply_transforms(m1, tf, gam, NL, &err) == QMLA_EINVAL &&
              strstr(err.msg, "layer 2") && strstr(err.msg, "orthogonal"),
              "non-orthogonal: %s", err.msg);
        tf[2].rot[5] -= 1e-3;
        /* two transforms for one layer, adjacent in the list (the second
         * with layer 0's gain: only the repetition is wrong) */
        const float *gd[NL];
        memcpy(gd, gam, sizeof gd);
        gd[1] = gam[0];
        tf[1].layer = 0;
        CHECK(qmla_model_apply_transforms(m1, tf, gd, NL, &err) == QMLA_EMISMATCH &&
              strstr(err.msg, "layer 0: two transforms"), "adjacent duplicate: %s", err.msg);
        tf[1].layer = 1;
        /* a column of R scaled by 1 + 1e-4: still orthogonal columns, one
         * not of unit length (|R^T R - I| = 2e-4 on the diagonal only) */
        for (size_t k = 0; k < dc; k++)
            tf[2].rot[k * dc + 5] *= 1.0001;
        CHECK(qmla_model_apply_transforms(m1, tf, gam, NL, &err) == QMLA_EINVAL &&
              strstr(err.msg, "layer 2") && strstr(err.msg, "orthogonal"),
              "non-unit column: %s", err.msg);
        for (size_t k = 0; k < dc; k++)
            tf[2].rot[k * dc + 5] /= 1.0001;
        tf[3].pairing = c->pairing == QMLA_ROPE_HALF ? QMLA_ROPE_INTERLEAVED : QMLA_ROPE_HALF;
        CHECK(qmla_model_apply_transforms(m1, tf, gam, NL, &err) == QMLA_EMISMATCH &&
              strstr(err.msg, "rope_pairing"), "pairing: %s", err.msg);
        tf[3].pairing = c->pairing;
        tf[4].layer = 6;
        CHECK(qmla_model_apply_transforms(m1, tf, gam, NL, &err) == QMLA_EMISMATCH &&
              strstr(err.msg, "layer 6"), "layer: %s", err.msg);
        tf[4].layer = 4;
        CHECK_OK(qmla_model_forward(m0, &fp, ws, tok, T, a, &err), err);
        CHECK_OK(qmla_model_forward(m1, &fp, ws, tok, T, b, &err), err);
        CHECK(!memcmp(a, b, sizeof(float) * T * V), "refused transforms changed the model");
    }

    /* fusion with the cache unquantized */
    CHECK_OK(qmla_model_apply_transforms(m1, tf, gam, NL, &err), err);
    CHECK_OK(qmla_model_forward(m0, &fp, ws, tok, T, a, &err), err);
    CHECK_OK(qmla_model_forward(m1, &fp, ws, tok, T, b, &err), err);
    double n0 = nll(a, tok, V), n1 = nll(b, tok, V), dl = 0;
    for (size_t i = 0; i < T * V; i++)
        dl = fmax(dl, fabs((double)a[i] - b[i]));
    printf("fp32 NLL original %.9f folded %.9f |d| %.2e, max |d logit| %.2e\n", n0, n1,
           fabs(n0 - n1), dl);
    CHECK(fabs(n0 - n1) < 1e-4 && dl < 1e-3, "fp32 drift %g, logits %g", fabs(n0 - n1), dl);
    CHECK(dl > 0, "the folded weights are the original ones (nothing was folded)");

    /* quantized: online hook (the transforms module) vs the folded weights */
    float *pre0 = malloc(sizeof(float) * T * dc * 6);
    float *post0 = pre0 + T * dc, *eff0 = post0 + T * dc, *pre1 = eff0 + T * dc,
          *post1 = pre1 + T * dc, *eff1 = post1 + T * dc;
    qmla_cache_hook online;
    CHECK_OK(qmla_model_transform_hook(m0, tf, gam, NL, "test", &online, &err), err);
    rec r0 = {&online, pre0, post0, eff0}, r1 = {NULL, pre1, post1, eff1};
    qmla_cache_hook h0 = {rec_fwd, rec_inv, &r0, "online"}, h1 = {rec_fwd, rec_inv, &r1, "fused"};
    qmla_cache_spec s0 = q4, s1 = q4;
    s0.hook = &h0;
    s1.hook = &h1;
    CHECK_OK(qmla_model_forward(m0, &s0, ws, tok, T, a, &err), err);
    const double nq0 = nll(a, tok, V);
    CHECK_OK(qmla_model_forward(m1, &s1, ws, tok, T, b, &err), err);
    const double nq1 = nll(b, tok, V);
    /* the clean layer-0 cache of the same tokens (a plain recording hook) */
    float *clean = malloc(sizeof(float) * T * dc * 3), *work = clean + T * dc,
          *eff = work + T * dc;
    rec rc = {NULL, clean, work, eff};
    qmla_cache_hook hc = {rec_fwd, rec_inv, &rc, "RTN"};
    qmla_cache_spec sc = q4;
    sc.hook = &hc;
    CHECK_OK(qmla_model_forward(m0, &sc, ws, tok, T, a, &err), err);
    const double nrtn = nll(a, tok, V);
    qmla_quant_params qp = {4, 64, QMLA_META_F16};
    const qmla_exec ex1 = qmla_exec_cpu(1);
    CHECK_OK(qmla_transform_effective_content(&ex1, &tf[0], gam[0], &qp, clean, T, 0, 0, work,
                                              eff, &err), err);
    CHECK(!memcmp(eff, eff0, sizeof(float) * T * dc),
          "online hook's cache != qmla_transform_effective_content");
    /* folded: X T before the quantizer, QDQ(X T) after */
    qmla_transform_content_apply(&ex1, &tf[0], gam[0], QMLA_TMAP_FWD, clean, T, work);
    double rel = 0, nx = 0;
    for (size_t i = 0; i < T * dc; i++) {
        rel = fmax(rel, fabs((double)pre1[i] - work[i]));
        nx = fmax(nx, fabs((double)work[i]));
    }
    CHECK(rel / nx < 1e-5, "folded pre-quantization cache vs X T: %g", rel / nx);
    CHECK_OK(qmla_quant_qdq(&qp, work, T, dc, NULL, NULL, NULL, work, &err), err);
    size_t diff = 0;
    double worst_steps = 0;
    for (size_t t = 0; t < T; t++)
        for (size_t g = 0; g < dc / 64; g++) {
            double lo = INFINITY, hi = -INFINITY;
            for (size_t j = 0; j < 64; j++) {
                double v = pre1[t * dc + g * 64 + j];
                lo = fmin(lo, v);
                hi = fmax(hi, v);
            }
            const double step = (hi - lo) / 15.0;
            for (size_t j = 0; j < 64; j++) {
                size_t i = t * dc + g * 64 + j;
                double d = fabs((double)post1[i] - work[i]);
                if (d > 1e-4 * step) {
                    diff++;
                    worst_steps = fmax(worst_steps, d / step);
                }
            }
        }
    printf("C4R4 layer 0: %zu of %zu quantized entries differ (worst %.3f steps); NLL "
           "RTN %.6f online %.6f folded %.6f\n", diff, (size_t)(T * dc), worst_steps, nrtn,
           nq0, nq1);
    CHECK(diff <= T * dc / 100 && worst_steps < 1.01, "folded QDQ vs module: %zu entries, "
          "%.3f steps", diff, worst_steps);
    CHECK(fabs(nq0 - nq1) < 0.06, "C4R4 NLL online %g folded %g", nq0, nq1);
    CHECK(fabs(nq0 - nrtn) > 0.06 && fabs(nq1 - nrtn) > 0.06,
          "the transforms do not change the quantized NLL (RTN %g)", nrtn);
    qmla_model_transform_hook_free(&online);

    /* saving */
    char out[] = "/tmp/qmla-test-fuse-XXXXXX";
    CHECK(mkdtemp(out) != NULL, "mkdtemp");
    const char *meta[] = {"qmla_test", "1"};
    CHECK_OK(qmla_model_save(m1, dir, out, NULL, meta, 1, &err), err);
    qmla_model *m2 = NULL;
    CHECK_OK(qmla_model_load(out, &m2, &err), err);
    if (m2) {
        CHECK_OK(qmla_model_forward(m1, &q4, ws, tok, T, a, &err), err);
        CHECK_OK(qmla_model_forward(m2, &q4, ws, tok, T, b, &err), err);
        CHECK(!memcmp(a, b, sizeof(float) * T * V), "saved checkpoint reloads differently");
        qmla_model_free(m2);
    }
    char p[4200];
    snprintf(p, sizeof p, "%s/config.json", out);
    CHECK(access(p, R_OK) == 0, "config.json copied");
    CHECK(qmla_model_save(m1, dir, dir, NULL, meta, 1, &err) == QMLA_EINVAL &&
          strstr(err.msg, "own folder"), "own folder: %s", err.msg);
    const char *rm[] = {"model.safetensors", "config.json", "generation_config.json",
                        "qmla_tokenizer.json"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", out, rm[i]);
        unlink(p);
    }
    rmdir(out);

    for (int l = 0; l < NL; l++)
        qmla_transform_free(&tf[l]);
    free(clean);
    free(pre0);
    free(a);
    free(b);
    qmla_model_ws_free(ws);
    qmla_model_free(m0);
    qmla_model_free(m1);
    return check_summary("test_model_transforms");
}
