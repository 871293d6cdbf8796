/* lib/engine/forward.c — the engine's forward pass (qmla/model.h): per
 * layer the RMSNorm'd queries (q_proj or q_lora) and the cache row [c_kv ;
 * k_rope] with RoPE (lib/attention/rope.c), the cache written through the
 * quantizer and the optional transform hook under the configuration
 * (write_cache), attention in the absorbed form (lib/attention/attention.c)
 * or the expanded one (lib/attention/expanded.c), each with the sink/local
 * policy, then o_proj and the SwiGLU MLP; the final norm and lm_head. Under
 * a mixed policy in the expanded form the clean prefix (tokens 0..S+W-1) is
 * computed once as a BF16 pass (phase 1) and the rest from its state
 * (phase 2). */
#include "engine/engine_int.h"
#include "attention/attention_int.h"
#include "qmla/attention.h"
#include "qmla/kvcache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ workspace */

struct qmla_model_ws {
    size_t T_max;
    float *x, *h, *q, *qa, *q_nope, *q_rope_pre, *q_rope, *kv, *kr_pre;
    float *C, *K, *Cq, *Kq, *q_lat, *q_rope_t, *Z, *Z2, *U, *O, *Y, *g, *u;
    float *cos_, *sin_;
    float *qc, *kc, *kc2, *vn, *vn2, *kn; /* the expanded (non-absorbed) form */
    struct prefix_state *pre;             /* the clean prefix (allocated when used) */
    size_t L;
    /* MoE blocks: scores [T, E], choice [T, k] (expert, weight), per expert
     * the rows that chose it, gathered inputs / outputs [T, D] */
    float *sc, *sc2, *tw, *xe, *ye;
    float *sh; /* LongcatFlash: the block's MoE output, added after sublayer 1 [T, D] */
    float *wbuf; /* one MLP weight matrix converted from its stored dtype */
    int32_t *ti, *rows;
    float *rw;
};
typedef struct prefix_state prefix_state;
static void prefix_free(prefix_state *p, size_t L);

void qmla_model_ws_free(qmla_model_ws *w)
{
    if (!w)
        return;
    float **p[] = {&w->x, &w->h, &w->q, &w->qa, &w->q_nope, &w->q_rope_pre, &w->q_rope,
                   &w->kv, &w->kr_pre, &w->C, &w->K, &w->Cq, &w->Kq, &w->q_lat,
                   &w->q_rope_t, &w->Z, &w->Z2, &w->U, &w->O, &w->Y, &w->g, &w->u,
                   &w->cos_, &w->sin_, &w->qc, &w->kc, &w->kc2, &w->vn, &w->vn2, &w->kn,
                   &w->sc, &w->sc2, &w->tw, &w->xe, &w->ye, &w->rw, &w->wbuf, &w->sh};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        free(*p[i]);
    prefix_free(w->pre, w->L);
    free(w->ti);
    free(w->rows);
    free(w);
}

int qmla_model_ws_alloc(const qmla_model *m, size_t T, qmla_model_ws **out, qmla_error *err)
{
    const qmla_model_config *c = &m->c;
    qmla_model_ws *w = calloc(1, sizeof *w);
    if (!w)
        return qmla_error_set(err, QMLA_ENOMEM, "model workspace");
    w->T_max = T;
    w->L = c->L;
    const size_t H = c->H, qk = c->d_n + c->d_r;
    const qmla_eng_moe *mo = &m->moe;
    const int moe = m->n_moe_layers > 0;
    const size_t E = moe ? mo->n_routed + mo->n_zero : 0, K = moe ? mo->top_k : 0;
    size_t NI = c->n_inter;
    if (moe && mo->inter * (mo->n_shared ? mo->n_shared : 1) > NI)
        NI = mo->inter * (mo->n_shared ? mo->n_shared : 1);
    struct { float **p; size_t n; } a[] = {
        {&w->x, T * c->D}, {&w->h, T * c->D}, {&w->q, T * H * qk},
        {&w->qa, T * (c->q_lora_rank ? c->q_lora_rank : 1)},
        {&w->q_nope, H * T * c->d_n}, {&w->q_rope_pre, H * T * c->d_r},
        {&w->q_rope, H * T * c->d_r}, {&w->kv, T * (c->d_c + c->d_r)},
        {&w->kr_pre, T * c->d_r}, {&w->C, T * c->d_c}, {&w->K, T * c->d_r},
        {&w->Cq, T * c->d_c}, {&w->Kq, T * c->d_r}, {&w->q_lat, T * H * c->d_c},
        {&w->q_rope_t, T * H * c->d_r}, {&w->Z, T * H * T}, {&w->Z2, T * H * T},
        {&w->U, T * H * c->d_c}, {&w->O, T * H * c->d_v}, {&w->Y, T * c->D},
        {&w->g, T * NI}, {&w->u, T * NI}, {&w->cos_, T * c->d_r / 2},
        {&w->sin_, T * c->d_r / 2}, {&w->qc, H * T * qk}, {&w->kc, H * T * qk},
        {&w->kc2, H * T * qk}, {&w->vn, T * H * c->d_v}, {&w->vn2, T * H * c->d_v},
        {&w->kn, T * H * c->d_n}, {&w->sc, T * E}, {&w->sc2, T * E}, {&w->tw, T * K},
        {&w->xe, T * c->D}, {&w->ye, T * c->D}, {&w->rw, T}, {&w->wbuf, m->wt_max},
        {&w->sh, m->fam.longcat ? T * c->D : 0}};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
        if (!(*a[i].p = calloc(a[i].n ? a[i].n : 1, sizeof(float)))) {
            qmla_model_ws_free(w);
            return qmla_error_set(err, QMLA_ENOMEM, "model workspace for T = %zu", T);
        }
    if (!(w->ti = calloc(T * K + 1, sizeof *w->ti)) ||
        !(w->rows = calloc(T + 1, sizeof *w->rows))) {
        qmla_model_ws_free(w);
        return qmla_error_set(err, QMLA_ENOMEM, "model workspace for T = %zu", T);
    }
    /* RoPE tables as transformers computes them in float32:
     * inv_freq[i] = 1 / theta^(2i/d_r) (or the scaled frequencies of
     * qmla_eng_rope_inv_freq), angle = t * inv_freq[i]; cos and sin times
     * the attention factor (YaRN's mscale ratio) when it is not 1. */
    const size_t P = c->d_r / 2;
    float *invf = malloc((P ? P : 1) * sizeof *invf);
    if (!invf) {
        qmla_model_ws_free(w);
        return qmla_error_set(err, QMLA_ENOMEM, "model workspace for T = %zu", T);
    }
    qmla_eng_rope_inv_freq(c, &m->rope, invf);
    const float af = (float)m->rope.attn_factor;
    for (size_t i = 0; i < P; i++) {
        float inv = invf[i];
        for (size_t t = 0; t < T; t++) {
            float ang = (float)t * inv;
            w->cos_[t * P + i] = (float)cos((double)ang);
            w->sin_[t * P + i] = (float)sin((double)ang);
            if (af != 1.0f) {
                w->cos_[t * P + i] *= af;
                w->sin_[t * P + i] *= af;
            }
        }
    }
    free(invf);
    *out = w;
    return QMLA_OK;
}

/* ------------------------------------------------------------ forward */

static void rmsnorm(size_t T, size_t n, double eps, const float *x, size_t ldx,
                    const float *g, float *y, size_t ldy)
{
    for (size_t t = 0; t < T; t++) {
        const float *xr = x + t * ldx;
        float *yr = y + t * ldy;
        double ss = 0.0;
        for (size_t i = 0; i < n; i++)
            ss += (double)xr[i] * xr[i];
        const float r = (float)(1.0 / sqrt(ss / (double)n + eps));
        for (size_t i = 0; i < n; i++)
            yr[i] = g[i] * (xr[i] * r);
    }
}

static void round_bf16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = qmla_core_bf16_to_f32(qmla_core_f32_to_bf16(x[i]));
}

/* Write one layer's cache [C ; K] under the spec: C, K become the protected
 * (BF16 or fp32) values, Cq, Kq the dequantized packed copies. */
static int write_cache(const qmla_cache_spec *cs, size_t layer, size_t T, size_t d_c,
                       size_t d_r, float *C, float *K, float *Cq, float *Kq, qmla_error *err)
{
    if (cs->c_bits == QMLA_CACHE_FP32)
        return QMLA_OK;
    if (cs->c_bits != QMLA_CACHE_BF16) {
        const qmla_cache_hook *hk = cs->hook;
        int bits[2] = {cs->c_bits, cs->r_bits};
        if (cs->n_layer_bits) { /* a per-layer configuration */
            if (layer >= (size_t)cs->n_layer_bits || !cs->layer_bits[layer][0])
                return qmla_error_set(err, QMLA_EINVAL, "cache config %s: no configuration "
                                      "for layer %zu", cs->name, layer);
            bits[0] = cs->layer_bits[layer][0];
            bits[1] = cs->layer_bits[layer][1];
        }
        memcpy(Cq, C, T * d_c * sizeof(float));
        memcpy(Kq, K, T * d_r * sizeof(float));
        for (int path = 0; path < 2; path++) {
            float *x = path ? Kq : Cq;
            size_t wdt = path ? d_r : d_c;
            qmla_quant_params p = {bits[path], cs->group, cs->meta};
            int st = QMLA_OK;
            if (hk && hk->forward)
                st = hk->forward(hk->ctx, layer, path, x, T, wdt, err);
            if (!st)
                st = qmla_quant_qdq(&p, x, T, wdt, NULL, NULL, NULL, x, err);
            if (!st && hk && hk->inverse)
                st = hk->inverse(hk->ctx, layer, path, x, T, wdt, err);
            if (st)
                return qmla_error_prefix(err, "layer %zu, %s path: ", layer,
                                         path ? "RoPE" : "content");
            round_bf16(x, T * wdt);
        }
    }
    round_bf16(C, T * d_c);
    round_bf16(K, T * d_r);
    return QMLA_OK;
}

int qmla_model_expanded_cheaper(const qmla_model_config *c, size_t T)
{
    /* multiply-adds per token and head over one cache representation, causal
     * average T/2 keys: the up-projections (expanded) cost what absorption
     * plus w_uv cost (absorbed). A mixed policy reads two representations;
     * the choice does not depend on the policy, so that every configuration
     * of one model and window length runs in the same form. */
    const double t2 = (double)T / 2.0, nv = (double)(c->d_n + c->d_v) * c->d_c;
    return nv + t2 * (double)(c->d_n + c->d_r + c->d_v) < nv + t2 * (double)(2 * c->d_c + c->d_r);
}

void qmla_model_set_attn_form(qmla_model *m, qmla_attn_form f) { m->form = f; }

static void silu_mul(size_t n, float *g, const float *u)
{
    for (size_t i = 0; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* The k largest of x[0..n) (ties: the lower index first) into idx[0..k). */
static void top_k(const float *x, size_t n, size_t k, int32_t *idx)
{
    for (size_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (size_t e = 0; e < n; e++) {
            int used = 0;
            for (size_t q = 0; q < j && !used; q++)
                used = idx[q] == (int32_t)e;
            if (!used && (best < 0 || x[e] > x[best]))
                best = (int32_t)e;
        }
        idx[j] = best;
    }
}

/* The routing of rows h[0..n) of a MoE block (transformers' DeepseekV2Moe /
 * DeepseekV3TopkRouter): float32 logits h W^T; V2 softmax scores, top-k
 * (greedy) or top-k within the topk_group groups of the largest best score
 * (group_limited_greedy; other groups' scores taken as 0); V3 sigmoid
 * scores s, choice by s + e_score_correction_bias within the topk_group
 * groups of the largest sum of their two best (others 0), weights s of the
 * chosen, divided by their sum (+1e-20) under norm_topk_prob; weights times
 * routed_scaling_factor. Choice ti[n, k], weights tw[n, k]. */
static void moe_route(const qmla_model *m, const layer_w *lw, size_t n, const float *h,
                      qmla_model_ws *w)
{
    const qmla_eng_moe *mo = &m->moe;
    /* LongcatFlash: softmax over the routed and the zero experts, greedy
     * choice by the scores + e_score_correction_bias */
    const size_t E = mo->n_routed + mo->n_zero, K = mo->top_k, D = m->c.D;
    qmla_linear(n, D, E, h, lw->router, w->sc);
    for (size_t t = 0; t < n; t++) {
        float *s = w->sc + t * E, *sf = w->sc2 + t * E;
        int32_t *ti = w->ti + t * K;
        float *tw = w->tw + t * K;
        if (mo->sigmoid) {
            for (size_t e = 0; e < E; e++)
                s[e] = 1.0f / (1.0f + expf(-s[e]));
        } else {
            float mx = s[0];
            for (size_t e = 1; e < E; e++)
                mx = s[e] > mx ? s[e] : mx;
            double z = 0.0;
            for (size_t e = 0; e < E; e++)
                z += (double)(s[e] = expf(s[e] - mx));
            for (size_t e = 0; e < E; e++)
                s[e] = (float)((double)s[e] / z);
        }
        for (size_t e = 0; e < E; e++)
            sf[e] = s[e] + (lw->router_bias ? lw->router_bias[e] : 0.0f);
        if (mo->method != QMLA_ENG_TOPK_GREEDY) {
            const size_t G = mo->n_group, per = E / G;
            float gs[1024];
            int32_t gi[1024];
            for (size_t g = 0; g < G; g++) {
                const float *x = sf + g * per;
                if (mo->method == QMLA_ENG_TOPK_NOAUX_TC) {
                    int32_t two[2];
                    top_k(x, per, 2, two);
                    gs[g] = x[two[0]] + x[two[1]];
                } else {
                    float mx = x[0];
                    for (size_t e = 1; e < per; e++)
                        mx = x[e] > mx ? x[e] : mx;
                    gs[g] = mx;
                }
            }
            top_k(gs, G, mo->topk_group, gi);
            for (size_t g = 0; g < G; g++) {
                int keep = 0;
                for (size_t q = 0; q < mo->topk_group && !keep; q++)
                    keep = gi[q] == (int32_t)g;
                if (!keep)
                    for (size_t e = 0; e < per; e++)
                        sf[g * per + e] = 0.0f;
            }
        }
        top_k(sf, E, K, ti);
        float sum = 0.0f;
        for (size_t j = 0; j < K; j++)
            sum += (tw[j] = s[ti[j]]);
        for (size_t j = 0; j < K; j++) {
            if (mo->norm_topk)
                tw[j] /= sum + 1e-20f;
            tw[j] *= (float)mo->scale;
        }
    }
}

/* One SwiGLU MLP over rows x[0..n): y = down(silu(gate x) * up x), each
 * weight converted from its stored dtype into wbuf when used. */
static void mlp_rows(size_t n, size_t D, size_t NI, const float *x, const qmla_eng_wt *g_w,
                     const qmla_eng_wt *u_w, const qmla_eng_wt *d_w, float *wbuf, float *g,
                     float *u, float *y)
{
    qmla_linear(n, D, NI, x, qmla_eng_wt_get(g_w, wbuf), g);
    qmla_linear(n, D, NI, x, qmla_eng_wt_get(u_w, wbuf), u);
    silu_mul(n * NI, g, u);
    qmla_linear(n, NI, D, g, qmla_eng_wt_get(d_w, wbuf), y);
}

/* A MoE block over rows h[0..n) -> y[0..n): each routed expert computes
 * only the rows that chose it (gathered), weighted and added per row, in
 * expert order; a zero-computation expert (LongcatFlash, e >= n_routed)
 * adds its rows' input times their weight; then the shared experts over
 * every row. */
static void moe_block(const qmla_model *m, const layer_w *lw, size_t n, const float *h,
                      qmla_model_ws *w, float *y)
{
    const qmla_eng_moe *mo = &m->moe;
    const size_t E = mo->n_routed, K = mo->top_k, D = m->c.D, NI = mo->inter;
    moe_route(m, lw, n, h, w);
    memset(y, 0, n * D * sizeof(float));
    for (size_t e = 0; e < E + mo->n_zero; e++) {
        size_t r = 0;
        for (size_t t = 0; t < n; t++)
            for (size_t j = 0; j < K; j++)
                if (w->ti[t * K + j] == (int32_t)e) {
                    w->rows[r] = (int32_t)t;
                    w->rw[r] = w->tw[t * K + j];
                    memcpy(w->xe + r * D, h + t * D, D * sizeof(float));
                    r++;
                }
        if (!r)
            continue;
        if (e >= E) /* the identity */
            memcpy(w->ye, w->xe, r * D * sizeof(float));
        else
            mlp_rows(r, D, NI, w->xe, &lw->eg[e], &lw->eu[e], &lw->ed[e], w->wbuf, w->g, w->u,
                     w->ye);
        for (size_t q = 0; q < r; q++) {
            float *dst = y + (size_t)w->rows[q] * D;
            const float *src = w->ye + q * D, a = w->rw[q];
            for (size_t i = 0; i < D; i++)
                dst[i] += src[i] * a;
        }
    }
    if (lw->has_shared) {
        const size_t IS = NI * mo->n_shared;
        mlp_rows(n, D, IS, h, &lw->sg, &lw->su, &lw->sd, w->wbuf, w->g, w->u, w->ye);
        for (size_t i = 0; i < n * D; i++)
            y[i] += w->ye[i];
    }
}

int qmla_model_attn_weights(const qmla_model *m, size_t l, const float **w_uk,
                            const float **w_uv, const float **w_o, const float **kv_norm,
                            qmla_error *err)
{
    if (l >= m->c.L)
        return qmla_error_set(err, QMLA_EINVAL, "layer %zu: expected a layer below %zu", l,
                              m->c.L);
    *w_uk = m->layers[l].w_uk;
    *w_uv = m->layers[l].w_uv;
    *w_o = m->layers[l].o_proj;
    *kv_norm = m->layers[l].kv_a_ln;
    return QMLA_OK;
}

int qmla_model_forward(const qmla_model *m, const qmla_cache_spec *cs, qmla_model_ws *w,
                       const int32_t *tokens, size_t T, float *logits, qmla_error *err)
{
    return qmla_model_forward_tap(m, cs, w, tokens, T, logits, NULL, err);
}

/* ---- the clean prefix of the sink/local policy ----
 * Under sink S / local W, query t < P = S + W reads every key in its
 * protected (BF16) value, in every layer, so the forward pass of tokens
 * 0..P-1 is the BF16 cache's whatever the packed configuration (its packed
 * copies are only read by later queries). A protected configuration in the
 * expanded form is therefore computed in two phases: tokens 0..P-1 as a BF16
 * forward pass of length P (phase 1, the same for every protected
 * configuration of the model with that P), then tokens P..T-1 (phase 2), whose
 * attention reads the prefix's keys and values from phase 1's state.
 * qmla_model_ppl_multi runs phase 1 once per window for all such
 * configurations; running a configuration alone takes the same two phases,
 * so sharing changes no bit. */
struct prefix_state {
    size_t P;                 /* rows held (0: none) */
    float **C, **K;           /* [L][P, d_c], [L][P, d_r]: cache rows before rounding */
    float **kc, **vn;         /* [L][H, P, d_n + d_r], [L][P, H d_v]: BF16 keys, values */
    float *logits;            /* [P, V] */
};

static void prefix_free(prefix_state *p, size_t L)
{
    if (!p)
        return;
    for (size_t l = 0; l < L; l++) {
        if (p->C) free(p->C[l]);
        if (p->K) free(p->K[l]);
        if (p->kc) free(p->kc[l]);
        if (p->vn) free(p->vn[l]);
    }
    free(p->C);
    free(p->K);
    free(p->kc);
    free(p->vn);
    free(p->logits);
    free(p);
}

static int prefix_alloc(const qmla_model_config *c, qmla_model_ws *w, qmla_error *err)
{
    if (w->pre)
        return QMLA_OK;
    const size_t T = w->T_max, L = c->L, qk = c->d_n + c->d_r;
    prefix_state *p = calloc(1, sizeof *p);
    int ok = p && (p->C = calloc(L, sizeof(float *))) && (p->K = calloc(L, sizeof(float *))) &&
             (p->kc = calloc(L, sizeof(float *))) && (p->vn = calloc(L, sizeof(float *))) &&
             (p->logits = malloc(T * c->V * sizeof(float)));
    for (size_t l = 0; l < L && ok; l++)
        ok = (p->C[l] = malloc(T * c->d_c * sizeof(float))) &&
             (p->K[l] = malloc(T * c->d_r * sizeof(float))) &&
             (p->kc[l] = malloc(c->H * T * qk * sizeof(float))) &&
             (p->vn[l] = malloc(T * c->H * c->d_v * sizeof(float)));
    if (!ok) {
        prefix_free(p, L);
        return qmla_error_set(err, QMLA_ENOMEM, "model workspace: the clean prefix for T = %zu",
                              T);
    }
    w->pre = p;
    return QMLA_OK;
}

/* The prefix length P of a configuration computed in two phases, 0 when it
 * is computed in one (unquantized caches, no policy, the absorbed form, or
 * P >= T). */
static size_t clean_prefix(const qmla_model *m, const qmla_cache_spec *cs, size_t T)
{
    const int quant = cs->c_bits != QMLA_CACHE_FP32 && cs->c_bits != QMLA_CACHE_BF16;
    if (!quant || (cs->sink <= 0 && cs->window <= 0))
        return 0;
    const int expanded = m->form == QMLA_ATTN_EXPANDED ||
                         (m->form == QMLA_ATTN_AUTO && qmla_model_expanded_cheaper(&m->c, T));
    const size_t P = (size_t)cs->sink + (size_t)cs->window;
    return expanded && P < T ? P : 0;
}

/* The forward pass of rows t0..T-1 of tokens[0..T) (all of them for t0 = 0):
 * t0 > 0 is phase 2 (expanded form, a mixed policy, the prefix state holding
 * rows 0..t0-1, no tap); save (with t0 = 0) is phase 1: the rows' cache,
 * keys and values are kept in the prefix state. logits rows t0..T-1. */
static int forward_rows(const qmla_model *m, const qmla_cache_spec *cs, qmla_model_ws *w,
                        const int32_t *tokens, size_t T, size_t t0, int save, int expanded,
                        float *logits, const qmla_model_tap *tap, qmla_error *err)
{
    const qmla_model_config *c = &m->c;
    const size_t n_run = tap && tap->n_layers && tap->n_layers < c->L ? tap->n_layers : c->L;
    const size_t D = c->D, H = c->H, qk = c->d_n + c->d_r, dc = c->d_c, dr = c->d_r;
    const size_t n = T - t0, P2 = dr / 2, NI = c->n_inter;
    prefix_state *pre = w->pre;
    for (size_t t = t0; t < T; t++)
        memcpy(w->x + t * D, m->embed + (size_t)tokens[t] * D, D * sizeof(float));
    const qmla_exec ex1 = qmla_exec_cpu(1);
    const qmla_mla_dims dims = {H, D, dc, c->d_n, dr, c->d_v, c->tau};
    const int quant = cs->c_bits != QMLA_CACHE_FP32 && cs->c_bits != QMLA_CACHE_BF16;
    const int mixed = quant && (cs->sink > 0 || cs->window > 0);
    for (size_t l = 0; l < n_run; l++) {
        const layer_w *lw = &m->layers[l];
        rmsnorm(n, D, c->eps, w->x + t0 * D, D, lw->ln_in, w->h + t0 * D, D);
        /* queries */
        if (c->q_lora_rank) {
            const size_t qr = c->q_lora_rank;
            qmla_linear(n, D, qr, w->h + t0 * D, lw->q_a, w->qa + t0 * qr);
            rmsnorm(n, qr, c->latent_eps, w->qa + t0 * qr, qr, lw->q_a_ln, w->qa + t0 * qr, qr);
            qmla_linear(n, qr, H * qk, w->qa + t0 * qr, lw->q_proj, w->q + t0 * H * qk);
        } else {
            qmla_linear(n, D, H * qk, w->h + t0 * D, lw->q_proj, w->q + t0 * H * qk);
        }
        if (m->fam.q_scale != 1.0) { /* LongcatFlash's mla_scale_q_lora */
            const float s = (float)m->fam.q_scale;
            for (size_t i = t0 * H * qk; i < T * H * qk; i++)
                w->q[i] *= s;
        }
        for (size_t h = 0; h < H; h++)
            for (size_t t = t0; t < T; t++) {
                const float *src = w->q + (t * H + h) * qk;
                memcpy(w->q_nope + (h * T + t) * c->d_n, src, c->d_n * sizeof(float));
                memcpy(w->q_rope_pre + (h * T + t) * dr, src + c->d_n, dr * sizeof(float));
            }
        if (!t0)
            qmla_rope_rotate(H, T, dr, c->pairing, w->cos_, w->sin_, w->q_rope_pre, w->q_rope);
        else
            for (size_t h = 0; h < H; h++)
                qmla_rope_rotate(1, n, dr, c->pairing, w->cos_ + t0 * P2, w->sin_ + t0 * P2,
                                 w->q_rope_pre + (h * T + t0) * dr,
                                 w->q_rope + (h * T + t0) * dr);
        /* latent and RoPE key: the cache row */
        qmla_linear(n, D, dc + dr, w->h + t0 * D, lw->kv_a, w->kv + t0 * (dc + dr));
        rmsnorm(n, dc, c->latent_eps, w->kv + t0 * (dc + dr), dc + dr, lw->kv_a_ln,
                w->C + t0 * dc, dc);
        if (m->fam.kv_scale != 1.0) { /* LongcatFlash's mla_scale_kv_lora: cached so */
            const float s = (float)m->fam.kv_scale;
            for (size_t i = t0 * dc; i < T * dc; i++)
                w->C[i] *= s;
        }
        for (size_t t = t0; t < T; t++)
            memcpy(w->kr_pre + t * dr, w->kv + t * (dc + dr) + dc, dr * sizeof(float));
        qmla_rope_rotate(1, n, dr, c->pairing, w->cos_ + t0 * P2, w->sin_ + t0 * P2,
                         w->kr_pre + t0 * dr, w->K + t0 * dr);
        if (t0) {
            memcpy(w->C, pre->C[l], t0 * dc * sizeof(float));
            memcpy(w->K, pre->K[l], t0 * dr * sizeof(float));
        }
        if (save) {
            memcpy(pre->C[l], w->C, T * dc * sizeof(float));
            memcpy(pre->K[l], w->K, T * dr * sizeof(float));
        }
        int st = write_cache(cs, l, T, dc, dr, w->C, w->K, w->Cq, w->Kq, err);
        if (st)
            return st;
        const qmla_mla_weights mw = {lw->w_uk, lw->w_uv, lw->o_proj};
        const float tau = (float)c->tau;
        const size_t S = (size_t)cs->sink, W = (size_t)cs->window;
        /* the representation attention reads (unless mixed) */
        const float *Cr = quant ? w->Cq : w->C, *Kr = quant ? w->Kq : w->K;
        if (expanded) {
            const size_t dn = c->d_n, dv = c->d_v;
            for (size_t h = 0; h < H; h++)
                for (size_t t = t0; t < T; t++) {
                    float *dst = w->qc + (h * T + t) * qk;
                    memcpy(dst, w->q_nope + (h * T + t) * dn, dn * sizeof(float));
                    memcpy(dst + dn, w->q_rope + (h * T + t) * dr, dr * sizeof(float));
                }
            qmla_attn_expand_kv(H, dc, dn, dr, dv, lw->w_uk, lw->w_uv, T, t0, T,
                                mixed ? w->C : Cr, mixed ? w->K : Kr, w->kn, w->kc, w->vn);
            if (t0) {
                for (size_t h = 0; h < H; h++)
                    memcpy(w->kc + h * T * qk, pre->kc[l] + h * t0 * qk,
                           t0 * qk * sizeof(float));
                memcpy(w->vn, pre->vn[l], t0 * H * dv * sizeof(float));
            }
            if (save) {
                memcpy(pre->kc[l], w->kc, H * T * qk * sizeof(float));
                memcpy(pre->vn[l], w->vn, T * H * dv * sizeof(float));
            }
            if (mixed) {
                size_t p0, p1;
                qmla_attn_band_packed_rows(T, S, W, &p0, &p1);
                qmla_attn_expand_kv(H, dc, dn, dr, dv, lw->w_uk, lw->w_uv, T, p0, p1, w->Cq,
                                    w->Kq, w->kn, w->kc2, w->vn2);
                qmla_attn_expand_band(&ex1, H, T, t0, qk, dv, tau, S, W, w->qc, w->kc, w->vn,
                                      w->kc2, w->vn2, w->Z, w->Z2, w->O);
            } else {
                qmla_attn_expand_logits(H, T, qk, tau, w->qc, w->kc, w->Z);
                qmla_attn_softmax(&ex1, H, T, w->Z, w->Z);
                qmla_attn_expand_aggregate(H, T, dv, w->Z, w->vn, 0.0f, w->O);
            }
            qmla_linear(n, H * dv, D, w->O + t0 * H * dv, lw->o_proj, w->Y + t0 * D);
        } else {
            qmla_attn_absorb(&ex1, &dims, T, w->q_nope, lw->w_uk, w->q_lat);
            qmla_attn_tokens_major(H, T, dr, w->q_rope, w->q_rope_t);
            if (!mixed) {
                qmla_attn_from_queries(&ex1, &dims, T, &mw, w->q_lat, w->q_rope_t, Cr, Kr,
                                       w->Z, w->Z, w->U, w->O, w->Y);
            } else {
                /* Z from the protected values where key s is protected for
                 * query i (s < S or i - s < W), from the packed copies
                 * elsewhere; one softmax; A split by representation. */
                qmla_attn_logits_acc(&ex1, H, T, dc, tau, w->q_lat, w->C, 0.0f, w->Z);
                qmla_attn_logits_acc(&ex1, H, T, dr, tau, w->q_rope_t, w->K, 1.0f, w->Z);
                qmla_attn_logits_acc(&ex1, H, T, dc, tau, w->q_lat, w->Cq, 0.0f, w->Z2);
                qmla_attn_logits_acc(&ex1, H, T, dr, tau, w->q_rope_t, w->Kq, 1.0f, w->Z2);
                qmla_attn_mix_logits(H, T, S, W, w->Z, w->Z2);
                qmla_attn_softmax(&ex1, H, T, w->Z, w->Z);
                qmla_attn_split(H, T, S, W, w->Z, w->Z2);
                qmla_attn_aggregate(&ex1, H, T, dc, w->Z, w->C, 0.0f, w->U);
                qmla_attn_aggregate(&ex1, H, T, dc, w->Z2, w->Cq, 1.0f, w->U);
                qmla_attn_project(&ex1, &dims, T, 1, &mw, w->U, w->O, w->Y);
            }
        }
        if (tap && tap->layer) {
            const qmla_model_tap_layer d = {l, T, w->h, w->C, w->kr_pre, w->K,
                                            w->q_nope, w->q_rope_pre, w->q_rope,
                                            w->cos_, w->sin_, w->Y};
            if ((st = tap->layer(tap->ctx, &d, err)))
                return st;
        }
        for (size_t i = t0 * D; i < T * D; i++)
            w->x[i] += w->Y[i];
        /* SwiGLU MLP, or the MoE block */
        rmsnorm(n, D, c->eps, w->x + t0 * D, D, lw->ln_post, w->h + t0 * D, D);
        if (lw->moe) {
            moe_block(m, lw, n, w->h + t0 * D, w, w->Y + t0 * D);
            for (size_t i = t0 * D; i < T * D; i++)
                w->x[i] += w->Y[i];
            continue;
        }
        /* LongcatFlash: sublayer 0's normed rows also feed the block's MoE */
        if (lw->sc_moe)
            moe_block(m, lw, n, w->h + t0 * D, w, w->sh + t0 * D);
        qmla_linear(n, D, NI, w->h + t0 * D, qmla_eng_wt_get(&lw->gate, w->wbuf),
                    w->g + t0 * NI);
        qmla_linear(n, D, NI, w->h + t0 * D, qmla_eng_wt_get(&lw->up, w->wbuf),
                    w->u + t0 * NI);
        silu_mul(n * NI, w->g + t0 * NI, w->u + t0 * NI);
        qmla_linear(n, NI, D, w->g + t0 * NI, qmla_eng_wt_get(&lw->down, w->wbuf),
                    w->Y + t0 * D);
        for (size_t i = t0 * D; i < T * D; i++)
            w->x[i] += w->Y[i];
        if (lw->sc_add) /* after sublayer 1: residual + MLP + the shortcut MoE */
            for (size_t i = t0 * D; i < T * D; i++)
                w->x[i] += w->sh[i];
    }
    if (!logits)
        return QMLA_OK;
    rmsnorm(n, D, c->eps, w->x + t0 * D, D, m->norm, w->h + t0 * D, D);
    qmla_linear(n, D, c->V, w->h + t0 * D, m->lm_head, logits + t0 * c->V);
    return QMLA_OK;
}

/* Phase 1 for tokens[0..P): the BF16 forward of length P, expanded form,
 * kept in the prefix state (its logits in pre->logits). */
static int prefix_forward(const qmla_model *m, qmla_model_ws *w, const int32_t *tokens,
                          size_t P, qmla_error *err)
{
    int st = prefix_alloc(&m->c, w, err);
    if (st)
        return st;
    qmla_cache_spec bf;
    memset(&bf, 0, sizeof bf);
    bf.c_bits = bf.r_bits = QMLA_CACHE_BF16;
    w->pre->P = 0;
    st = forward_rows(m, &bf, w, tokens, P, 0, 1, 1, w->pre->logits, NULL, err);
    if (!st)
        w->pre->P = P;
    return st;
}

int qmla_eng_forward_check(const qmla_model *m, const qmla_model_ws *w, const int32_t *tokens,
                           size_t T, qmla_error *err)
{
    if (T == 0 || T > w->T_max)
        return qmla_error_set(err, QMLA_EINVAL, "forward: T = %zu outside [1, %zu]", T,
                              w->T_max);
    for (size_t t = 0; t < T; t++)
        if (tokens[t] < 0 || (size_t)tokens[t] >= m->c.V)
            return qmla_error_set(err, QMLA_EINVAL, "forward: token %zu is %d, outside "
                                  "[0, %zu)", t, (int)tokens[t], m->c.V);
    return QMLA_OK;
}

int qmla_model_forward_tap(const qmla_model *m, const qmla_cache_spec *cs,
                           qmla_model_ws *w, const int32_t *tokens, size_t T,
                           float *logits, const qmla_model_tap *tap, qmla_error *err)
{
    const qmla_model_config *c = &m->c;
    const size_t n_run = tap && tap->n_layers && tap->n_layers < c->L ? tap->n_layers : c->L;
    if (n_run < c->L && logits)
        return qmla_error_set(err, QMLA_EINVAL, "forward: logits need all %zu layers, "
                              "the tap stops after %zu", c->L, n_run);
    int st = qmla_eng_forward_check(m, w, tokens, T, err);
    if (st)
        return st;
    const size_t P = tap || !logits ? 0 : clean_prefix(m, cs, T);
    if (P) {
        if ((st = prefix_forward(m, w, tokens, P, err)) ||
            (st = forward_rows(m, cs, w, tokens, T, P, 0, 1, logits, NULL, err)))
            return st;
        memcpy(logits, w->pre->logits, P * c->V * sizeof(float));
        return QMLA_OK;
    }
    const int expanded = m->form == QMLA_ATTN_EXPANDED ||
                         (m->form == QMLA_ATTN_AUTO && qmla_model_expanded_cheaper(c, T));
    return forward_rows(m, cs, w, tokens, T, 0, 0, expanded, logits, tap, err);
}

int qmla_eng_forward_window(const qmla_model *m, const qmla_cache_spec *cs, qmla_model_ws *w,
                            const int32_t *tokens, size_t T, size_t *have, float *lg,
                            size_t *P, const float **pre, qmla_error *err)
{
    *pre = NULL;
    *P = clean_prefix(m, cs, T);
    if (!*P)
        return qmla_model_forward(m, cs, w, tokens, T, lg, err);
    int st = QMLA_OK;
    if (*P != *have) {
        st = prefix_forward(m, w, tokens, *P, err);
        *have = st ? 0 : *P;
    }
    if (!st)
        st = forward_rows(m, cs, w, tokens, T, *P, 0, 1, lg, NULL, err);
    if (!st)
        *pre = w->pre->logits;
    return st;
}
