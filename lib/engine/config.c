/* lib/engine/config.c — config.json of a transformers checkpoint (jansson)
 * -> qmla_model_config: the architecture (DeepseekV2/V3, dense blocks), the
 * dimensions, the norms' epsilons, RoPE ("default", interleaved or half
 * pairing) and the softmax scale; what the engine does not support is refused
 * by name.
 *
 * The keys of transformers' DeepseekV2Config / DeepseekV3Config, and what
 * becomes of each (docs/models.md):
 *   read: vocab_size, hidden_size, num_hidden_layers, num_attention_heads,
 *     intermediate_size, q_lora_rank, kv_lora_rank, qk_nope_head_dim,
 *     qk_rope_head_dim, v_head_dim, max_position_embeddings, bos_token_id,
 *     rms_norm_eps, rope_theta / rope_scaling / rope_parameters ("default"
 *     only), rope_interleave (V3), tie_word_embeddings (honoured: lm_head is
 *     the embedding);
 *   refused unless harmless: architectures and model_type (deepseek_v2 /
 *     deepseek_v3, consistent), num_key_value_heads (= num_attention_heads:
 *     transformers repeats the keys H / num_key_value_heads times),
 *     attention_bias and mlp_bias (false), hidden_act ("silu"),
 *     quantization_config (absent), MoE blocks (n_routed_experts,
 *     first_k_dense_replace, moe_layer_freq: dense blocks only; V3 builds
 *     MoE from layer first_k_dense_replace, default 3, whatever
 *     n_routed_experts says) and with them every MoE key
 *     (moe_intermediate_size, n_shared_experts, num_experts_per_tok,
 *     routed_scaling_factor, topk_method, n_group, topk_group,
 *     norm_topk_prob, scoring_func, aux_loss_alpha, seq_aux, ep_size);
 *   no effect on the function: num_nextn_predict_layers (MTP layers,
 *     which transformers does not run), eos_token_id, pad_token_id,
 *     initializer_range, use_cache, pretraining_tp, attention_dropout,
 *     head_dim / qk_head_dim (derived), torch_dtype / dtype,
 *     transformers_version. */
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

int qmla_eng_parse_config(const char *dir, qmla_model_config *c, size_t *first_dense,
                          size_t *n_routed, size_t *n_mtp, qmla_error *err)
{
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
    int v3 = 0;
    if (!strcmp(c->arch, "DeepseekV3ForCausalLM"))
        v3 = 1;
    else if (strcmp(c->arch, "DeepseekV2ForCausalLM")) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: architecture %s (model_type %s) is not "
                            "supported: expected DeepseekV2ForCausalLM or "
                            "DeepseekV3ForCausalLM", path, c->arch, mt ? mt : "?");
        goto out;
    }
    /* transformers builds the model of model_type (AutoConfig), the
     * architecture names the head: the two must agree (a deepseek_v3 config
     * under DeepseekV2ForCausalLM was run as V2) */
    json_t *mtj = json_object_get(j, "model_type");
    const char *want_mt = v3 ? "deepseek_v3" : "deepseek_v2";
    if (mtj && !json_is_null(mtj) && (!mt || strcmp(mt, want_mt))) {
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
        (st = get_size(j, path, "num_hidden_layers", &c->L, 1, err)) ||
        (st = get_size(j, path, "num_attention_heads", &c->H, 1, err)) ||
        (st = get_size(j, path, "num_key_value_heads", &nkv, 0, err)) ||
        (st = get_size(j, path, "intermediate_size", &c->n_inter, 1, err)) ||
        (st = get_size(j, path, "q_lora_rank", &c->q_lora_rank, 0, err)) ||
        (st = get_size(j, path, "kv_lora_rank", &c->d_c, 1, err)) ||
        (st = get_size(j, path, "qk_nope_head_dim", &c->d_n, 1, err)) ||
        (st = get_size(j, path, "qk_rope_head_dim", &c->d_r, 1, err)) ||
        (st = get_size(j, path, "v_head_dim", &c->d_v, 1, err)) ||
        (st = get_size(j, path, "max_position_embeddings", &c->max_pos, 1, err)) ||
        (st = get_size(j, path, "bos_token_id", &bos, 1, err)) ||
        (st = get_size(j, path, "first_k_dense_replace", first_dense, 0, err)) ||
        (st = get_size(j, path, "n_routed_experts", n_routed, 0, err)) ||
        (st = get_size(j, path, "num_nextn_predict_layers", n_mtp, 0, err)))
        goto out;
    if (bos >= c->V) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"bos_token_id\": expected a token "
                            "id below vocab_size %zu, found %zu", path, c->V, bos);
        goto out;
    }
    c->bos = (int)bos;
    if (!c->V || !c->D || !c->L || !c->H || !c->d_c || !c->d_n || !c->d_v ||
        !c->d_r || (c->d_r & 1)) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: zero dimension or odd "
                            "qk_rope_head_dim %zu", path, c->d_r);
        goto out;
    }
    /* V3 builds MoE blocks from layer first_k_dense_replace on (default 3,
     * n_routed_experts default 256) whatever n_routed_experts says; V2 only
     * when n_routed_experts is set (default None) */
    if (v3 && !json_is_integer(json_object_get(j, "first_k_dense_replace")))
        *first_dense = 3;
    if (v3 && !json_is_integer(json_object_get(j, "n_routed_experts")))
        *n_routed = 256;
    if ((*n_routed || v3) && *first_dense < c->L) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: MoE blocks (n_routed_experts %zu from "
                            "layer first_k_dense_replace = %zu of %zu) are not supported: "
                            "expected dense blocks only", path, *n_routed, *first_dense, c->L);
        goto out;
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
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"quantization_config\" (quant_method "
                            "%s): quantized checkpoints are not supported: expected F16, BF16 "
                            "or F32 weights and no quantization_config", path, qm ? qm : "?");
        goto out;
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
    c->eps = json_is_number(eps) ? json_number_value(eps) : 1e-6;
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
    if (rp && json_is_object(rp)) {
        const char *rt = json_string_value(json_object_get(rp, "rope_type"));
        if (!rt)
            rt = json_string_value(json_object_get(rp, "type"));
        if (rt && strcmp(rt, "default")) {
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: rope_type \"%s\" is not supported: "
                                "expected \"default\"", path, rt);
            goto out;
        }
        if (json_is_number(json_object_get(rp, "rope_theta")))
            theta = json_object_get(rp, "rope_theta");
    }
    c->rope_theta = json_is_number(theta) ? json_number_value(theta) : 10000.0;
    if (!(c->rope_theta > 0.0)) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: key \"rope_theta\": expected a positive "
                            "number, found %g", path, c->rope_theta);
        goto out;
    }
    c->pairing = QMLA_ROPE_INTERLEAVED;
    if (v3 && json_is_false(json_object_get(j, "rope_interleave")))
        c->pairing = QMLA_ROPE_HALF;
    c->tau = 1.0 / sqrt((double)(c->d_n + c->d_r));
out:
    json_decref(j);
    return st;
}
