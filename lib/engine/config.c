/* lib/engine/config.c — config.json of a transformers checkpoint (jansson)
 * -> qmla_model_config: the architecture (DeepseekV2/V3, Glm4MoeLite,
 * LongcatFlash), the dimensions,
 * the norms' epsilons, RoPE (its scaling type, interleaved or half pairing)
 * and the softmax scale, the MoE blocks (qmla_eng_moe) and FP8 block
 * quantization (qmla_eng_quant); what the engine does not support is
 * refused by name.
 *
 * The keys of transformers' DeepseekV2Config / DeepseekV3Config, and what
 * becomes of each (docs/models.md):
 *   read: vocab_size, hidden_size, num_hidden_layers, num_attention_heads,
 *     intermediate_size, q_lora_rank, kv_lora_rank, qk_nope_head_dim,
 *     qk_rope_head_dim, v_head_dim, max_position_embeddings, bos_token_id,
 *     rms_norm_eps, rope_theta / rope_scaling / rope_parameters (rope_type
 *     default, linear, dynamic, yarn, llama3 with factor,
 *     original_max_position_embeddings, beta_fast, beta_slow, mscale,
 *     mscale_all_dim, attention_factor, truncate, low/high_freq_factor),
 *     rope_interleave (V3), tie_word_embeddings (honoured: lm_head is the
 *     embedding); MoE blocks from first_k_dense_replace on (transformers'
 *     defaults: V3 n_routed_experts 256 from layer 3, V2 64 from layer 0):
 *     n_routed_experts, n_shared_experts, num_experts_per_tok,
 *     moe_intermediate_size, routed_scaling_factor, topk_method (V2 greedy /
 *     group_limited_greedy, V3 noaux_tc), n_group, topk_group,
 *     norm_topk_prob (V3; transformers' V2 gate does not apply it),
 *     scoring_func (V2 softmax, V3 sigmoid); quantization_config fp8 (fmt
 *     e4m3, weight_block_size);
 *   refused unless harmless: architectures and model_type (deepseek_v2 /
 *     deepseek_v3, consistent), num_key_value_heads (= num_attention_heads:
 *     transformers repeats the keys H / num_key_value_heads times),
 *     attention_bias and mlp_bias (false), hidden_act ("silu"),
 *     quantization_config (absent or fp8), moe_layer_freq (1: transformers
 *     makes every layer from first_k_dense_replace on a MoE block), a
 *     scoring_func / topk_method other than the architecture's, n_group /
 *     topk_group that do not fit n_routed_experts and num_experts_per_tok;
 *     model_type kimi_k2 is read as deepseek_v3;
 *   no effect on the function: num_nextn_predict_layers (MTP layers,
 *     which transformers does not run), eos_token_id, pad_token_id,
 *     initializer_range, use_cache, pretraining_tp, attention_dropout,
 *     aux_loss_alpha, seq_aux, ep_size, activation_scheme (the weights are
 *     dequantized, activations stay float32),
 *     head_dim / qk_head_dim (derived), torch_dtype / dtype,
 *     transformers_version.
 *
 * LongcatFlashForCausalLM (longcat_flash): LongcatFlashConfig's keys and
 * defaults (parse_longcat: num_layers, ffn_hidden_size, n_routed_experts,
 * zero_expert_num, moe_topk, expert_ffn_hidden_size, routed_scaling_factor,
 * head_dim, qk_head_dim, q_lora_rank; the aliases intermediate_size,
 * num_local_experts, num_experts_per_tok), refusing router_bias,
 * zero_expert_type, mla_scale_q_lora / mla_scale_kv_lora false,
 * attention_method and rope_interleave false by name; c->L is then the
 * sublayer count 2 num_layers (docs/models.md). */
#include "engine/engine_int.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

json_t *qmla_eng_load_json(const char *path, qmla_error *err)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        qmla_error_set(err, QMLA_EFORMAT, "%s: expected a JSON file, found %s", path,
                       S_ISDIR(sb.st_mode) ? "a directory" : "no regular file");
        return NULL;
    }
    json_error_t je;
    errno = 0;
    json_t *j = json_load_file(path, 0, &je);
    if (!j && je.line < 1) /* not opened or not read: no line to name */
        qmla_error_set(err, QMLA_EIO, "%s: cannot read: %s", path,
                       errno ? strerror(errno) : je.text);
    else if (!j)
        qmla_error_set(err, QMLA_EFORMAT, "%s: line %d: %s", path, je.line, je.text);
    return j;
}

static int get_size(json_t *cfg, const char *path, const char *key, size_t *v, int required,
                    qmla_error *err)
{
    json_t *x = json_object_get(cfg, key);
    if (!x || json_is_null(x)) {
        if (required)
            return qmla_error_set(err, QMLA_EFORMAT, "%s: key \"%s\": expected an integer, "
                                  "found nothing", path, key);
        *v = 0;
        return QMLA_OK;
    }
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return qmla_error_set(err, QMLA_EFORMAT, "%s: key \"%s\": expected a non-negative "
                              "integer", path, key);
    *v = (size_t)json_integer_value(x);
    return QMLA_OK;
}

/* A number key: absent or null gives dflt (*present 0). */
static int get_num(json_t *obj, const char *path, const char *key, double dflt, double *v,
                   int *present, qmla_error *err)
{
    json_t *x = json_object_get(obj, key);
    if (present)
        *present = x && !json_is_null(x);
    if (!x || json_is_null(x)) {
        *v = dflt;
        return QMLA_OK;
    }
    if (!json_is_number(x) || !isfinite(json_number_value(x)))
        return qmla_error_set(err, QMLA_EFORMAT, "%s: key \"%s\": expected a finite number, "
                              "found another value", path, key);
    *v = json_number_value(x);
    return QMLA_OK;
}

/* rope_parameters / rope_scaling -> r (transformers' ROPE_INIT_FUNCTIONS:
 * default, linear, dynamic, yarn, llama3), every other type refused by name. */
static int parse_rope(json_t *j, json_t *rp, const char *path, const qmla_model_config *c,
                      int v3, qmla_eng_rope *r, qmla_error *err)
{
    memset(r, 0, sizeof *r);
    r->attn_factor = 1.0;
    r->softmax_mult = 1.0;
    snprintf(r->name, sizeof r->name, "default");
    /* a partial rotary factor would rotate part of qk_rope_head_dim only */
    for (int k = 0; k < 2; k++) {
        json_t *pf = json_object_get(k ? rp : j, "partial_rotary_factor");
        if (pf && !json_is_null(pf) && (!json_is_number(pf) || json_number_value(pf) != 1.0))
            return qmla_error_set(err, QMLA_EFORMAT, "%s: key \"partial_rotary_factor\": "
                                  "expected 1 (RoPE over all of qk_rope_head_dim), found %s",
                                  path, json_is_number(pf) ? "another value" : "another type");
    }
    if (!rp || !json_is_object(rp))
        return QMLA_OK;
    const char *rt = json_string_value(json_object_get(rp, "rope_type"));
    if (!rt)
        rt = json_string_value(json_object_get(rp, "type"));
    if (!rt || !strcmp(rt, "default"))
        return QMLA_OK;
    static const struct { const char *n; qmla_eng_rope_type t; } types[] = {
        {"linear", QMLA_ENG_ROPE_LINEAR}, {"dynamic", QMLA_ENG_ROPE_DYNAMIC},
        {"yarn", QMLA_ENG_ROPE_YARN}, {"llama3", QMLA_ENG_ROPE_LLAMA3}};
    size_t k;
    for (k = 0; k < sizeof types / sizeof types[0]; k++)
        if (!strcmp(rt, types[k].n))
            break;
    if (k == sizeof types / sizeof types[0])
        return qmla_error_set(err, QMLA_EFORMAT, "%s: rope_type \"%s\" is not supported: "
                              "expected \"default\", \"linear\", \"dynamic\", \"yarn\" or "
                              "\"llama3\"", path, rt);
    r->type = types[k].t;
    snprintf(r->name, sizeof r->name, "%s", rt);
    (void)0;
    int st, has_factor = 0, has_orig = 0, has_af = 0;
    double af = 0.0, fac = 0.0, orig = 0.0;
    if ((st = get_num(rp, path, "factor", 0.0, &fac, &has_factor, err)) ||
        (st = get_num(rp, path, "original_max_position_embeddings", 0.0, &orig, &has_orig, err)) ||
        (st = get_num(rp, path, "attention_factor", 0.0, &af, &has_af, err)) ||
        (st = get_num(rp, path, "beta_fast", 32.0, &r->beta_fast, NULL, err)) ||
        (st = get_num(rp, path, "beta_slow", 1.0, &r->beta_slow, NULL, err)) ||
        (st = get_num(rp, path, "mscale", 0.0, &r->mscale, NULL, err)) ||
        (st = get_num(rp, path, "mscale_all_dim", 0.0, &r->mscale_all_dim, NULL, err)) ||
        (st = get_num(rp, path, "low_freq_factor", 0.0, &r->low_freq_factor, NULL, err)) ||
        (st = get_num(rp, path, "high_freq_factor", 0.0, &r->high_freq_factor, NULL, err)))
        return st;
    /* transformers: `beta_fast or 32`, `beta_slow or 1` */
    if (r->beta_fast == 0.0)
        r->beta_fast = 32.0;
    if (r->beta_slow == 0.0)
        r->beta_slow = 1.0;
    r->orig_max = has_orig ? orig : (double)c->max_pos;
    if (!has_factor && r->type == QMLA_ENG_ROPE_YARN && has_orig)
        fac = (double)c->max_pos / orig; /* yarn: max / original when factor is absent */
    else if (!has_factor)
        return qmla_error_set(err, QMLA_EFORMAT, "%s: rope_type \"%s\": key \"factor\": "
                              "expected a number, found nothing", path, rt);
    if (!(fac > 0.0))
        return qmla_error_set(err, QMLA_EFORMAT, "%s: rope_type \"%s\": key \"factor\": "
                              "expected a positive number, found %g", path, rt, fac);
    if (r->type == QMLA_ENG_ROPE_YARN && !(r->orig_max >= 1.0))
        return qmla_error_set(err, QMLA_EFORMAT, "%s: rope_type \"yarn\": key "
                              "\"original_max_position_embeddings\": expected a positive "
                              "number, found %g", path, r->orig_max);
    if (r->type == QMLA_ENG_ROPE_LLAMA3 &&
        (!has_orig || !(r->high_freq_factor > r->low_freq_factor) || !(r->low_freq_factor > 0)))
        return qmla_error_set(err, QMLA_EFORMAT, "%s: rope_type \"llama3\": expected "
                              "original_max_position_embeddings and high_freq_factor > "
                              "low_freq_factor > 0, found %s%g and %g", path,
                              has_orig ? "" : "no original_max_position_embeddings, ",
                              r->high_freq_factor, r->low_freq_factor);
    r->factor = fac;
    json_t *tr = json_object_get(rp, "truncate");
    r->truncate = !json_is_false(tr);
    /* yarn_get_mscale(scale, m) = 1 for scale <= 1, else 0.1 m ln(scale) + 1 */
#define MSCALE(s, m) ((s) <= 1.0 ? 1.0 : 0.1 * (m) * log(s) + 1.0)
    if (r->type == QMLA_ENG_ROPE_YARN) {
        if (has_af)
            r->attn_factor = af;
        else if (r->mscale != 0.0 && r->mscale_all_dim != 0.0)
            r->attn_factor = MSCALE(fac, r->mscale) / MSCALE(fac, r->mscale_all_dim);
        else
            r->attn_factor = MSCALE(fac, 1.0);
    }
    /* DeepSeek's softmax-scale correction (any rope_type but default,
     * mscale_all_dim set): tau * mscale(factor, mscale_all_dim)^2, as
     * transformers' DeepseekV3Attention and DeepSeek's own V2 code apply it
     * and docs/models.md defines tau. transformers 5.17's DeepseekV2Attention
     * omits it (the capture tool's --yarn-mscale fix sets it there). */
    (void)v3;
    if (r->mscale_all_dim != 0.0) {
        const double m = MSCALE(fac, r->mscale_all_dim);
        r->softmax_mult = m * m;
    }
#undef MSCALE
    (void)j;
    return QMLA_OK;
}

void qmla_eng_rope_inv_freq(const qmla_model_config *c, const qmla_eng_rope *r, float *inv)
{
    const size_t P = c->d_r / 2, d = c->d_r;
    const double base = c->rope_theta;
    for (size_t i = 0; i < P; i++) {
        /* the default frequencies as the engine always computed them */
        const float f0 = (float)(1.0 / pow(base, (double)(2 * i) / (double)d));
        float f = f0;
        if (r->type == QMLA_ENG_ROPE_LINEAR) {
            f = f0 / (float)r->factor;
        } else if (r->type == QMLA_ENG_ROPE_YARN) {
            /* transformers' _compute_yarn_parameters in float32: pos_freqs =
             * base^(2i/d), extrapolation 1/pos, interpolation 1/(factor pos),
             * mixed by the linear ramp over the correction range of
             * beta_fast / beta_slow rotations within original_max */
            const float pos = (float)pow(base, (double)(float)(2 * i) / (double)d);
            const float ext = 1.0f / pos, itp = 1.0f / ((float)r->factor * pos);
            const double cd = 2.0 * log(base);
            double lo = (double)d * log(r->orig_max / (r->beta_fast * 2.0 * M_PI)) / cd;
            double hi = (double)d * log(r->orig_max / (r->beta_slow * 2.0 * M_PI)) / cd;
            if (r->truncate) {
                lo = floor(lo);
                hi = ceil(hi);
            }
            if (lo < 0.0)
                lo = 0.0;
            if (hi > (double)(d - 1))
                hi = (double)(d - 1);
            if (lo == hi)
                hi += 0.001;
            float ramp = ((float)i - (float)lo) / (float)(hi - lo);
            ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
            const float ef = 1.0f - ramp;
            f = itp * (1.0f - ef) + ext * ef;
        } else if (r->type == QMLA_ENG_ROPE_LLAMA3) {
            const double lw = r->orig_max / r->low_freq_factor;
            const double hw = r->orig_max / r->high_freq_factor;
            const double wl = 2.0 * M_PI / (double)f0;
            const float fs = (float)r->factor;
            if (wl > lw) {
                f = f0 / fs;
            } else if (wl >= hw) {
                const float sm = (float)((r->orig_max / wl - r->low_freq_factor) /
                                         (r->high_freq_factor - r->low_freq_factor));
                f = (1.0f - sm) * f0 / fs + sm * f0;
            }
        }
        /* dynamic: base * ((factor seq / max) - (factor - 1))^(d / (d - 2)) is
         * base for every seq <= max_position_embeddings (the engine's limit) */
        inv[i] = f;
    }
}

void qmla_eng_tensor_name(const qmla_eng_family *f, size_t l, const char *sfx, char *out,
                          size_t n)
{
    if (!f || !f->longcat) {
        snprintf(out, n, "model.layers.%zu.%s", l, sfx);
        return;
    }
    const size_t b = l / 2, s = l % 2;
    static const char *const per_sub[] = {"self_attn.", "input_layernorm.",
                                          "post_attention_layernorm."};
    for (size_t k = 0; k < sizeof per_sub / sizeof per_sub[0]; k++) {
        const size_t len = strlen(per_sub[k]);
        if (!strncmp(sfx, per_sub[k], len)) {
            snprintf(out, n, "model.layers.%zu.%.*s%zu.%s", b, (int)len, sfx, s, sfx + len);
            return;
        }
    }
    if (!strcmp(sfx, "mlp.gate_proj.weight") || !strcmp(sfx, "mlp.up_proj.weight") ||
        !strcmp(sfx, "mlp.down_proj.weight")) {
        snprintf(out, n, "model.layers.%zu.mlps.%zu.%s", b, s, sfx + 4);
        return;
    }
    snprintf(out, n, "model.layers.%zu.%s", b, sfx);
}

/* An integer key of LongcatFlashConfig with its default (absent or null:
 * dflt) and, where transformers' attribute_map gives it a second name,
 * that name, which must agree when both are present. */
static int lc_size(json_t *j, const char *path, const char *key, const char *alias,
                   size_t dflt, size_t *v, qmla_error *err)
{
    int st = get_size(j, path, key, v, 0, err);
    if (st)
        return st;
    json_t *x = json_object_get(j, key);
    const int have = x && !json_is_null(x);
    if (!have)
        *v = dflt;
    json_t *a = alias ? json_object_get(j, alias) : NULL;
    if (a && !json_is_null(a)) {
        size_t av = 0;
        if ((st = get_size(j, path, alias, &av, 0, err)))
            return st;
        if (have && av != *v)
            return qmla_error_set(err, QMLA_EFORMAT, "%s: keys \"%s\" and \"%s\" (the same "
                                  "value in LongcatFlashConfig): expected equal values, found "
                                  "%zu and %zu", path, key, alias, *v, av);
        *v = av;
    }
    return QMLA_OK;
}

/* LongcatFlash (transformers' LongcatFlashConfig / modeling_longcat_flash):
 * num_layers blocks, each two MLA sublayers (engine layers 2l, 2l + 1)
 * with their dense MLPs of ffn_hidden_size and one MoE block fed from
 * sublayer 0's post-attention norm, added after sublayer 1 (the shortcut);
 * the router: softmax over n_routed_experts + zero_expert_num logits, top
 * moe_topk of the scores + e_score_correction_bias, weights the scores of
 * the chosen times routed_scaling_factor (no renormalisation); experts
 * from n_routed_experts on are the identity. Queries times (D /
 * q_lora_rank)^1/2, the cached latent times (D / kv_lora_rank)^1/2;
 * interleaved RoPE pairs. c->L is 2 num_layers on return. */
static int parse_longcat(json_t *j, const char *path, qmla_model_config *c,
                         qmla_eng_moe *moe, qmla_eng_family *fam, qmla_error *err)
{
    int st;
    size_t nb = 0, nh = 0, hd = 0, qkh = 0;
    fam->longcat = 1;
    if ((st = lc_size(j, path, "num_layers", NULL, 28, &nb, err)) ||
        (st = get_size(j, path, "num_hidden_layers", &nh, 0, err)) ||
        (st = lc_size(j, path, "ffn_hidden_size", "intermediate_size", 12288, &c->n_inter,
                      err)) ||
        (st = lc_size(j, path, "n_routed_experts", "num_local_experts", 512, &moe->n_routed,
                      err)) ||
        (st = lc_size(j, path, "zero_expert_num", NULL, 256, &moe->n_zero, err)) ||
        (st = lc_size(j, path, "moe_topk", "num_experts_per_tok", 12, &moe->top_k, err)) ||
        (st = lc_size(j, path, "expert_ffn_hidden_size", NULL, 2048, &moe->inter, err)) ||
        (st = lc_size(j, path, "head_dim", NULL, 64, &hd, err)) ||
        (st = get_size(j, path, "qk_head_dim", &qkh, 0, err)) ||
        (st = get_num(j, path, "routed_scaling_factor", 6.0, &moe->scale, NULL, err)))
        return st;
    /* zero_expert_num null: none (transformers: `zero_expert_num or 0`) */
    json_t *zx = json_object_get(j, "zero_expert_num");
    if (zx && json_is_null(zx))
        moe->n_zero = 0;
    if (!nb || nb > 2048)
        return qmla_error_set(err, QMLA_EFORMAT, "%s: key \"num_layers\": expected 1 to 2048 "
                              "blocks, found %zu", path, nb);
    /* transformers overwrites num_hidden_layers with 2 num_layers (the
     * sublayers); a config that says otherwise was made for another layout */
    if (nh && nh != 2 * nb)
        return qmla_error_set(err, QMLA_EFORMAT, "%s: key \"num_hidden_layers\": expected 2 x "
                              "num_layers = %zu (LongcatFlash's MLA sublayers), found %zu",
                              path, 2 * nb, nh);
    fam->n_blocks = nb;
    c->L = 2 * nb;
    if (!c->n_inter)
        return qmla_error_set(err, QMLA_EFORMAT, "%s: key \"ffn_hidden_size\": expected a "
                              "positive width, found 0", path);
    if (!moe->n_routed || !moe->inter || !moe->top_k ||
        moe->top_k > moe->n_routed + moe->n_zero)
        return qmla_error_set(err, QMLA_EFORMAT, "%s: keys \"n_routed_experts\", "
                              "\"expert_ffn_hidden_size\" and \"moe_topk\": expected at least "
                              "one routed expert, a positive width and 1 <= moe_topk <= "
                              "n_routed_experts + zero_expert_num = %zu, found %zu, %zu and "
                              "%zu", path, moe->n_routed + moe->n_zero, moe->n_routed,
                              moe->inter, moe->top_k);
    if (hd != c->d_r)
        return qmla_error_set(err, QMLA_EFORMAT, "%s: key \"head_dim\": expected "
                              "qk_rope_head_dim = %zu (LongcatFlash's rotary embedding has "
                              "head_dim / 2 frequencies; transformers' default is 64), found %zu",
                              path, c->d_r, hd);
    if (qkh && qkh != c->d_n + c->d_r)
        return qmla_error_set(err, QMLA_EFORMAT, "%s: key \"qk_head_dim\": expected "
                              "qk_nope_head_dim + qk_rope_head_dim = %zu, found %zu", path,
                              c->d_n + c->d_r, qkh);
    /* transformers' attention always runs the query LoRA (default 1536) */
    json_t *ql = json_object_get(j, "q_lora_rank");
    if (!ql)
        c->q_lora_rank = 1536;
    else if (json_is_null(ql) || !c->q_lora_rank)
        return qmla_error_set(err, QMLA_EFORMAT, "%s: key \"q_lora_rank\": expected a positive "
                              "rank (LongcatFlash's queries always go through q_a_proj, "
                              "q_a_layernorm and q_b_proj), found %s", path,
                              json_is_null(ql) ? "null" : "0");
    /* what the engine (and transformers' LongcatFlash) does not compute */
    const char *zt = json_string_value(json_object_get(j, "zero_expert_type"));
    json_t *ztj = json_object_get(j, "zero_expert_type");
    if (ztj && !json_is_null(ztj) && (!zt || strcmp(zt, "identity")))
        return qmla_error_set(err, QMLA_EFORMAT, "%s: key \"zero_expert_type\": expected "
                              "\"identity\" (zero-computation experts return their input), "
                              "found %s%s%s", path, zt ? "\"" : "", zt ? zt : "another type",
                              zt ? "\"" : "");
    json_t *rb = json_object_get(j, "router_bias");
    if (rb && !json_is_null(rb) && !json_is_false(rb))
        return qmla_error_set(err, QMLA_EFORMAT, "%s: key \"router_bias\": expected false (a "
                              "bias in the router's classifier is not supported), found %s",
                              path, json_is_true(rb) ? "true" : "another value");
    static const char *const scales[] = {"mla_scale_q_lora", "mla_scale_kv_lora"};
    for (size_t k = 0; k < 2; k++) {
        json_t *x = json_object_get(j, scales[k]);
        if (x && !json_is_null(x) && !json_is_true(x))
            return qmla_error_set(err, QMLA_EFORMAT, "%s: key \"%s\": expected true "
                                  "(transformers' LongcatFlash always applies the scale), "
                                  "found %s", path, scales[k],
                                  json_is_false(x) ? "false" : "another value");
    }
    const char *am = json_string_value(json_object_get(j, "attention_method"));
    json_t *amj = json_object_get(j, "attention_method");
    if (amj && !json_is_null(amj) && (!am || strcmp(am, "MLA")))
        return qmla_error_set(err, QMLA_EFORMAT, "%s: key \"attention_method\": expected "
                              "\"MLA\", found %s%s%s", path, am ? "\"" : "",
                              am ? am : "another type", am ? "\"" : "");
    if (json_is_false(json_object_get(j, "rope_interleave")))
        return qmla_error_set(err, QMLA_EFORMAT, "%s: key \"rope_interleave\": false: "
                              "LongcatFlash pairs RoPE channels interleaved: expected true or "
                              "no key", path);
    fam->q_scale = sqrt((double)c->D / (double)c->q_lora_rank);
    fam->kv_scale = sqrt((double)c->D / (double)c->d_c);
    moe->first_dense = 0;
    moe->method = QMLA_ENG_TOPK_GREEDY;
    moe->sigmoid = 0;
    moe->norm_topk = 0;
    return QMLA_OK;
}

int qmla_eng_parse_config(const char *dir, qmla_model_config *c, qmla_eng_rope *rope,
                          qmla_eng_moe *moe, qmla_eng_quant *quant, qmla_eng_family *fam,
                          size_t *n_mtp, qmla_error *err)
{
    size_t fd0 = 0, nr0 = 0, *first_dense = &fd0, *n_routed = &nr0;
    memset(moe, 0, sizeof *moe);
    memset(quant, 0, sizeof *quant);
    memset(fam, 0, sizeof *fam);
    fam->q_scale = fam->kv_scale = 1.0;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *j = qmla_eng_load_json(path, err);
    if (!j)
        return err ? err->status : QMLA_EIO;
    int st = QMLA_OK;
    memset(c, 0, sizeof *c);
    json_t *arch = json_array_get(json_object_get(j, "architectures"), 0);
    const char *mt = json_string_value(json_object_get(j, "model_type"));
    if (!json_is_string(arch)) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: \"architectures\": expected a list "
                            "naming the architecture", path);
        goto out;
    }
    snprintf(c->arch, sizeof c->arch, "%s", json_string_value(arch));
    /* Glm4MoeLite (GLM-4.7-Flash): DeepseekV3's attention and router, its
     * MoE layers named by mlp_layer_types */
    int v3 = 0, glm = 0, lc = 0;
    if (!strcmp(c->arch, "DeepseekV3ForCausalLM"))
        v3 = 1;
    else if (!strcmp(c->arch, "Glm4MoeLiteForCausalLM"))
        v3 = glm = 1;
    else if (!strcmp(c->arch, "LongcatFlashForCausalLM"))
        lc = 1;
    else if (strcmp(c->arch, "DeepseekV2ForCausalLM")) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: architecture %s (model_type %s) is not "
                            "supported: expected DeepseekV2ForCausalLM, "
                            "DeepseekV3ForCausalLM, Glm4MoeLiteForCausalLM or "
                            "LongcatFlashForCausalLM", path, c->arch, mt ? mt : "?");
        goto out;
    }
    /* transformers builds the model of model_type (AutoConfig), the
     * architecture names the head: the two must agree (a deepseek_v3 config
     * under DeepseekV2ForCausalLM was run as V2) */
    json_t *mtj = json_object_get(j, "model_type");
    const char *want_mt = lc ? "longcat_flash" : glm ? "glm4_moe_lite" : v3 ? "deepseek_v3"
                                                                             : "deepseek_v2";
    /* Kimi-K2 names its DeepseekV3 model model_type "kimi_k2" */
    if (mtj && !json_is_null(mtj) && (!mt || (strcmp(mt, want_mt) &&
                                             !(v3 && !glm && !strcmp(mt, "kimi_k2"))))) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"model_type\": expected \"%s\" "
                            "(architectures names %s), found %s%s%s", path, want_mt, c->arch,
                            mt ? "\"" : "", mt ? mt : "another type", mt ? "\"" : "");
        goto out;
    }
    if (json_array_size(json_object_get(j, "architectures")) != 1) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: \"architectures\": expected one "
                            "architecture, found %zu", path,
                            json_array_size(json_object_get(j, "architectures")));
        goto out;
    }
    size_t nkv = 0, bos = 0;
    if ((st = get_size(j, path, "vocab_size", &c->V, 1, err)) ||
        (st = get_size(j, path, "hidden_size", &c->D, 1, err)) ||
        (!lc && (st = get_size(j, path, "num_hidden_layers", &c->L, 1, err))) ||
        (st = get_size(j, path, "num_attention_heads", &c->H, 1, err)) ||
        (st = get_size(j, path, "num_key_value_heads", &nkv, 0, err)) ||
        (!lc && (st = get_size(j, path, "intermediate_size", &c->n_inter, 1, err))) ||
        (st = get_size(j, path, "q_lora_rank", &c->q_lora_rank, 0, err)) ||
        (st = get_size(j, path, "kv_lora_rank", &c->d_c, 1, err)) ||
        (st = get_size(j, path, "qk_nope_head_dim", &c->d_n, 1, err)) ||
        (st = get_size(j, path, "qk_rope_head_dim", &c->d_r, 1, err)) ||
        (st = get_size(j, path, "v_head_dim", &c->d_v, 1, err)) ||
        (st = get_size(j, path, "max_position_embeddings", &c->max_pos, 1, err)) ||
        (st = get_size(j, path, "bos_token_id", &bos, 1, err)) ||
        (!lc && (st = get_size(j, path, "first_k_dense_replace", first_dense, 0, err))) ||
        (!lc && (st = get_size(j, path, "n_routed_experts", n_routed, 0, err))) ||
        (st = get_size(j, path, "num_nextn_predict_layers", n_mtp, 0, err)))
        goto out;
    if (bos >= c->V) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"bos_token_id\": expected a token "
                            "id below vocab_size %zu, found %zu", path, c->V, bos);
        goto out;
    }
    c->bos = (int)bos;
    if (lc && (c->d_r & 1) == 0 && c->d_r && (st = parse_longcat(j, path, c, moe, fam, err)))
        goto out;
    if (!c->V || !c->D || !c->L || !c->H || !c->d_c || !c->d_n || !c->d_v ||
        !c->d_r || (c->d_r & 1)) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: zero dimension or odd "
                            "qk_rope_head_dim %zu", path, c->d_r);
        goto out;
    }
    /* MoE blocks from layer first_k_dense_replace on, with transformers'
     * defaults: V3 n_routed_experts 256 from layer 3; V2 (transformers 5)
     * 64 from layer 0 */
    if (!json_is_integer(json_object_get(j, "first_k_dense_replace")))
        *first_dense = v3 ? 3 : 0;
    if (!json_is_integer(json_object_get(j, "n_routed_experts")))
        *n_routed = glm ? 64 : v3 ? 256 : 64;
    if (lc) /* its MoE block is parse_longcat's */
        *n_routed = 0;
    size_t n_sparse = 0;
    if (glm) {
        /* mlp_layer_types: "dense" / "sparse" per layer, default dense then
         * sparse (first_k_dense_replace is not read) */
        json_t *lt = json_object_get(j, "mlp_layer_types");
        if (c->L > 4096) {
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: num_hidden_layers %zu: expected at "
                                "most 4096", path, c->L);
            goto out;
        }
        if (!(moe->sparse = calloc(c->L, 1))) {
            st = qmla_error_set(err, QMLA_ENOMEM, "%s: mlp_layer_types", path);
            goto out;
        }
        if (lt && !json_is_null(lt) && json_array_size(lt) != c->L) {
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"mlp_layer_types\": expected a "
                                "list of num_hidden_layers = %zu strings \"dense\" or "
                                "\"sparse\", found %s of %zu", path, c->L,
                                json_is_array(lt) ? "a list" : "another type",
                                json_array_size(lt));
            goto out;
        }
        for (size_t l = 0; l < c->L; l++) {
            const char *ty = lt && !json_is_null(lt)
                                 ? json_string_value(json_array_get(lt, l))
                                 : (l ? "sparse" : "dense");
            if (!ty || (strcmp(ty, "dense") && strcmp(ty, "sparse"))) {
                st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"mlp_layer_types\": element "
                                    "%zu: expected \"dense\" or \"sparse\", found %s%s%s",
                                    path, l, ty ? "\"" : "", ty ? ty : "another type",
                                    ty ? "\"" : "");
                goto out;
            }
            moe->sparse[l] = !strcmp(ty, "sparse");
            n_sparse += moe->sparse[l];
        }
        *first_dense = 0;
    }
    if (*n_routed && (glm ? n_sparse > 0 : *first_dense < c->L)) {
        char ctx[160];
        if (glm)
            snprintf(ctx, sizeof ctx, "MoE blocks (n_routed_experts %zu in the %zu sparse "
                     "layers of mlp_layer_types)", *n_routed, n_sparse);
        else
            snprintf(ctx, sizeof ctx, "MoE blocks (n_routed_experts %zu from layer "
                     "first_k_dense_replace = %zu of %zu)", *n_routed, *first_dense, c->L);
        moe->n_routed = *n_routed;
        moe->first_dense = *first_dense;
        double rsf, mlf;
        int have_mlf;
        if ((st = get_size(j, path, "n_shared_experts", &moe->n_shared, 0, err)) ||
            (st = get_size(j, path, "num_experts_per_tok", &moe->top_k, 0, err)) ||
            (st = get_size(j, path, "n_group", &moe->n_group, 0, err)) ||
            (st = get_size(j, path, "topk_group", &moe->topk_group, 0, err)) ||
            (st = get_size(j, path, "moe_intermediate_size", &moe->inter, 0, err)) ||
            (st = get_num(j, path, "routed_scaling_factor", glm ? 1.8 : v3 ? 2.5 : 1.0, &rsf,
                      NULL, err)) ||
            (st = get_num(j, path, "moe_layer_freq", 1.0, &mlf, &have_mlf, err)))
            goto out;
        moe->scale = rsf;
        /* transformers' defaults where the key is absent (null stays null) */
#define DFLT(key, field, v)                                                     \
        if (!json_object_get(j, key))                                           \
            moe->field = (v);
        DFLT("n_shared_experts", n_shared, v3 ? 1 : 2)
        DFLT("num_experts_per_tok", top_k, glm ? 4 : v3 ? 8 : 0)
        DFLT("n_group", n_group, glm ? 1 : v3 ? 8 : 0)
        DFLT("topk_group", topk_group, glm ? 1 : v3 ? 4 : 0)
        DFLT("moe_intermediate_size", inter, glm ? 1536 : v3 ? 2048 : 1407)
#undef DFLT
        json_t *ntp = json_object_get(j, "norm_topk_prob");
        moe->norm_topk = v3 ? (ntp ? json_is_true(ntp) : 1) : 0;
        const char *sf = json_string_value(json_object_get(j, "scoring_func"));
        const char *tm = json_string_value(json_object_get(j, "topk_method"));
        json_t *sfj = json_object_get(j, "scoring_func"), *tmj = json_object_get(j, "topk_method");
        moe->sigmoid = v3;
        const char *want_sf = v3 ? "sigmoid" : "softmax";
        if (sfj && !json_is_null(sfj) && (!sf || strcmp(sf, want_sf))) {
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"scoring_func\": expected "
                                "\"%s\" (the gate %s computes), found %s%s%s: %s", path,
                                want_sf, c->arch, sf ? "\"" : "", sf ? sf : "another type",
                                sf ? "\"" : "", ctx);
            goto out;
        }
        if (v3) {
            moe->method = QMLA_ENG_TOPK_NOAUX_TC;
            if (tmj && !json_is_null(tmj) && (!tm || strcmp(tm, "noaux_tc"))) {
                st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"topk_method\": expected "
                                    "\"noaux_tc\" (the routing DeepseekV3 computes), found "
                                    "%s%s%s: %s", path, tm ? "\"" : "", tm ? tm : "another type",
                                    tm ? "\"" : "", ctx);
                goto out;
            }
        } else if (!tm || !strcmp(tm, "greedy")) {
            moe->method = QMLA_ENG_TOPK_GREEDY;
            if (tmj && !json_is_null(tmj) && !tm) {
                st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"topk_method\": expected a "
                                    "string, found another type: %s", path, ctx);
                goto out;
            }
        } else if (!strcmp(tm, "group_limited_greedy")) {
            moe->method = QMLA_ENG_TOPK_GROUP_LIMITED;
        } else {
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"topk_method\": expected "
                                "\"greedy\" or \"group_limited_greedy\" (DeepseekV2), found "
                                "\"%s\": %s", path, tm, ctx);
            goto out;
        }
        if (glm && !moe->n_shared) {
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"n_shared_experts\": expected "
                                "at least 1 (Glm4MoeLite always runs its shared experts), "
                                "found 0: %s", path, ctx);
            goto out;
        }
        if (have_mlf && mlf != 1.0 && !glm) {
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"moe_layer_freq\": expected 1 "
                                "(transformers builds every layer from first_k_dense_replace "
                                "on as a MoE block), found %g: %s", path, mlf, ctx);
            goto out;
        }
        if (!moe->top_k || moe->top_k > moe->n_routed || !moe->inter) {
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: keys \"num_experts_per_tok\" and "
                                "\"moe_intermediate_size\": expected 1 <= num_experts_per_tok "
                                "<= n_routed_experts = %zu and a positive width, found %zu and "
                                "%zu: %s", path, moe->n_routed, moe->top_k, moe->inter, ctx);
            goto out;
        }
        const int grouped = moe->method != QMLA_ENG_TOPK_GREEDY;
        if (grouped && (!moe->n_group || moe->n_group > 1024 || moe->n_routed % moe->n_group ||
                        !moe->topk_group ||
                        moe->topk_group > moe->n_group ||
                        moe->top_k > moe->topk_group * (moe->n_routed / moe->n_group) ||
                        (v3 && moe->n_routed / moe->n_group < 2))) {
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: keys \"n_group\" and \"topk_group\": "
                                "expected n_group dividing n_routed_experts = %zu%s, 1 <= "
                                "topk_group <= n_group and num_experts_per_tok = %zu within "
                                "the topk_group groups, found n_group %zu, topk_group %zu: %s",
                                path, moe->n_routed, v3 ? " into groups of two or more" : "",
                                moe->top_k, moe->n_group, moe->topk_group, ctx);
            goto out;
        }
    }
    json_t *bias = json_object_get(j, "attention_bias");
    if (json_is_true(bias)) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: attention_bias true is not supported", path);
        goto out;
    }
    /* keys that change the function and that the engine does not implement */
    static const char *const bools[] = {"attention_bias", "mlp_bias", "tie_word_embeddings"};
    for (size_t k = 0; k < sizeof bools / sizeof bools[0]; k++) {
        json_t *x = json_object_get(j, bools[k]);
        if (x && !json_is_null(x) && !json_is_boolean(x)) {
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"%s\": expected true or false, "
                                "found another type", path, bools[k]);
            goto out;
        }
    }
    if (json_is_true(json_object_get(j, "mlp_bias"))) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"mlp_bias\": true (biases in the "
                            "MLP) is not supported: expected false", path);
        goto out;
    }
    json_t *qc = json_object_get(j, "quantization_config");
    if (qc && !json_is_null(qc)) {
        const char *qm = json_string_value(json_object_get(qc, "quant_method"));
        const char *fmt = json_string_value(json_object_get(qc, "fmt"));
        json_t *bs = json_object_get(qc, "weight_block_size");
        if (!qm || strcmp(qm, "fp8") || (fmt && strcmp(fmt, "e4m3"))) {
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"quantization_config\" "
                                "(quant_method %s%s%s): this quantization is not supported: "
                                "expected F16, BF16 or F32 weights, or quant_method \"fp8\" "
                                "(E4M3 with block scales weight_scale_inv)", path,
                                qm ? qm : "?", fmt ? ", fmt " : "", fmt ? fmt : "");
            goto out;
        }
        quant->fp8 = 1;
        quant->block_r = quant->block_c = 128;
        if (bs && !json_is_null(bs)) {
            json_t *b0 = json_array_get(bs, 0), *b1 = json_array_get(bs, 1);
            if (json_array_size(bs) != 2 || !json_is_integer(b0) || !json_is_integer(b1) ||
                json_integer_value(b0) < 1 || json_integer_value(b1) < 1) {
                st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"quantization_config\": "
                                    "weight_block_size: expected two positive integers "
                                    "[rows, columns]", path);
                goto out;
            }
            quant->block_r = (size_t)json_integer_value(b0);
            quant->block_c = (size_t)json_integer_value(b1);
        }
    }
    if (nkv && nkv != c->H) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"num_key_value_heads\": expected "
                            "num_attention_heads = %zu (transformers repeats each key "
                            "num_attention_heads / num_key_value_heads times), found %zu",
                            path, c->H, nkv);
        goto out;
    }
    c->tied = json_is_true(json_object_get(j, "tie_word_embeddings"));
    json_t *act = json_object_get(j, "hidden_act");
    if (act && (!json_is_string(act) || strcmp(json_string_value(act), "silu"))) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: hidden_act: expected \"silu\"", path);
        goto out;
    }
    json_t *eps = json_object_get(j, "rms_norm_eps");
    c->eps = json_is_number(eps) ? json_number_value(eps) : lc ? 1e-5 : 1e-6;
    if ((eps && !json_is_null(eps) && !json_is_number(eps)) || !(c->eps >= 0.0)) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"rms_norm_eps\": expected a "
                            "non-negative number, found %s", path,
                            json_is_number(eps) ? "a negative one" : "another type");
        goto out;
    }
    c->latent_eps = 1e-6;
    /* RoPE: rope_parameters (transformers 5) or rope_theta + rope_scaling */
    json_t *rp = json_object_get(j, "rope_parameters");
    if (!rp || json_is_null(rp))
        rp = json_object_get(j, "rope_scaling");
    json_t *theta = json_object_get(j, "rope_theta");
    if (rp && json_is_object(rp) && json_is_number(json_object_get(rp, "rope_theta")))
        theta = json_object_get(rp, "rope_theta");
    if ((st = parse_rope(j, rp, path, c, v3, rope, err)))
        goto out;
    /* transformers' defaults: LongcatFlash 1e7, the others 1e4 */
    c->rope_theta = json_is_number(theta) ? json_number_value(theta) : lc ? 1e7 : 10000.0;
    if (!(c->rope_theta > 0.0)) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"rope_theta\": expected a positive "
                            "number, found %g", path, c->rope_theta);
        goto out;
    }
    c->pairing = QMLA_ROPE_INTERLEAVED;
    if (v3 && json_is_false(json_object_get(j, "rope_interleave")))
        c->pairing = QMLA_ROPE_HALF;
    c->tau = 1.0 / sqrt((double)(c->d_n + c->d_r));
    if (rope->softmax_mult != 1.0)
        c->tau *= rope->softmax_mult;
out:
    json_decref(j);
    return st;
}
