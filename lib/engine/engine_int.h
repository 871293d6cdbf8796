/* engine_int.h (private) — what the files of the inference engine of
 * qmla/model.h share: the model's weights (struct qmla_model, one layer_w
 * per layer), config.json parsing (config.c), the safetensors writer that
 * fusion saves through (safetensors.c), and the forward pass's entry points
 * for the perplexity loop (forward.c).
 *
 * The engine's files, in the order a checkpoint becomes bits per byte:
 *   config.c       config.json -> qmla_model_config
 *   safetensors.c  safetensors shards -> the weights (qmla_model_load); the writer
 *   cachespec.c    "C4R4-q8", "sink4/local128" -> qmla_cache_spec
 *   forward.c      the forward pass: the cache written through the quantizer,
 *                  attention in the absorbed (lib/attention/attention.c) or the
 *                  expanded form (lib/attention/expanded.c)
 *   ppl.c          windows -> bits per byte; the /ppl results group
 *   fuse.c         transforms folded into the weights, the online cache hook,
 *                  the fused checkpoint saved through a staging folder */
#ifndef QMLA_ENGINE_INT_H
#define QMLA_ENGINE_INT_H

#include "qmla/model.h"

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

/* A weight matrix [r, c] of the MLP blocks (dense, routed and shared
 * experts), kept as the checkpoint stores it: the file is memory-mapped and
 * the matrix converted to float32 when used (qmla_eng_wt_get), into the
 * forward pass's per-thread workspace, so that resident memory is the
 * checkpoint's bytes, not their float32 size. F32 tensors aligned to 4
 * bytes are used in place. */
enum { QMLA_ENG_DT_F32 = 1, QMLA_ENG_DT_F16, QMLA_ENG_DT_BF16, QMLA_ENG_DT_F8 };

typedef struct qmla_eng_wt {
    const float *f;        /* float32 values in place, or NULL: converted per use */
    const uint8_t *raw;    /* the stored bytes, in the file's mapping */
    const float *scale;    /* F8: block scales [ceil(r / br), ceil(c / bc)] (model-owned) */
    int dtype;             /* QMLA_ENG_DT_* */
    size_t r, c, br, bc;
    char st_dtype[12];     /* the safetensors dtype, "BF16", ... */
} qmla_eng_wt;

/* The float32 values of w: w->f, or w->raw converted into buf (r * c floats). */
const float *qmla_eng_wt_get(const qmla_eng_wt *w, float *buf);
/* Bytes the stored tensor occupies. */
size_t qmla_eng_wt_bytes(const qmla_eng_wt *w);

typedef struct layer_w {
    float *ln_in, *ln_post;           /* [D] */
    float *q_proj;                    /* [H*(d_n+d_r), D] (or q_b_proj [.., q_lora]) */
    float *q_a, *q_a_ln;              /* q_lora: [q_lora, D], [q_lora] */
    float *kv_a;                      /* [d_c + d_r, D] */
    float *kv_a_ln;                   /* [d_c] */
    float *w_uk, *w_uv;               /* [H, d_n, d_c], [H, d_v, d_c] from kv_b_proj */
    float *o_proj;                    /* [D, H*d_v] */
    qmla_eng_wt gate, up, down;       /* [I, D], [I, D], [D, I] (dense blocks) */
    /* MoE blocks (moe != 0): the router mlp.gate.weight [E, D] and, for
     * the sigmoid gate, e_score_correction_bias [E]; routed experts e in
     * [0, E): eg[e], eu[e] [I_moe, D], ed[e] [D, I_moe]; the shared experts
     * as one MLP of width I_moe * n_shared (sg, su, sd when has_shared) */
    int moe, has_shared;
    /* LongcatFlash (sublayer pairs 2l, 2l + 1 of block l): sc_moe on sublayer
     * 0, whose post-attention norm also feeds the block's MoE (router
     * mlp.router.classifier.weight [E + n_zero, D]); its output is held and
     * added after sublayer 1's MLP (sc_add). Both keep their dense MLP. */
    int sc_moe, sc_add;
    float *router, *router_bias;
    qmla_eng_wt *eg, *eu, *ed;
    qmla_eng_wt sg, su, sd;
} layer_w;

/* RoPE scaling as transformers' ROPE_INIT_FUNCTIONS define it (config.c):
 * the inverse frequencies and the attention factor that multiplies cos/sin. */
typedef enum qmla_eng_rope_type {
    QMLA_ENG_ROPE_DEFAULT = 0,
    QMLA_ENG_ROPE_LINEAR,
    QMLA_ENG_ROPE_DYNAMIC,
    QMLA_ENG_ROPE_YARN,
    QMLA_ENG_ROPE_LLAMA3
} qmla_eng_rope_type;

typedef struct qmla_eng_rope {
    qmla_eng_rope_type type;
    char name[16];              /* "default", "yarn", ... */
    double factor;              /* linear / yarn / llama3 / dynamic */
    double attn_factor;         /* multiplies cos and sin (yarn; 1 otherwise) */
    double beta_fast, beta_slow;
    double orig_max;            /* original_max_position_embeddings */
    double mscale, mscale_all_dim;
    int truncate;               /* yarn: floor/ceil the correction range */
    double low_freq_factor, high_freq_factor; /* llama3 */
    double softmax_mult;        /* the softmax-scale correction folded into tau */
} qmla_eng_rope;

/* The MoE block of a family (config.c). */
typedef enum qmla_eng_topk {
    QMLA_ENG_TOPK_GREEDY = 0,        /* V2: top-k of the softmax scores */
    QMLA_ENG_TOPK_GROUP_LIMITED,     /* V2: groups by their best score */
    QMLA_ENG_TOPK_NOAUX_TC           /* V3: sigmoid + bias, groups by top-2 sum */
} qmla_eng_topk;

typedef struct qmla_eng_moe {
    size_t n_routed;     /* 0: every layer dense */
    size_t first_dense;  /* layers below are dense */
    size_t n_shared, top_k, n_group, topk_group, inter;
    qmla_eng_topk method;
    int sigmoid;         /* scoring: 0 softmax (V2), 1 sigmoid (V3) */
    int norm_topk;       /* V3: weights / their sum */
    double scale;        /* routed_scaling_factor */
    size_t n_zero;       /* LongcatFlash: zero-computation (identity) experts E..E+n_zero-1 */
    unsigned char *sparse; /* Glm4MoeLite: per layer 1 = MoE (mlp_layer_types); NULL:
                              the layers from first_dense on (owned) */
} qmla_eng_moe;

/* What a family changes beyond the dimensions (config.c). */
typedef struct qmla_eng_family {
    int longcat;         /* LongcatFlashForCausalLM: two MLA sublayers per block */
    size_t n_blocks;     /* its num_layers (engine layers 2 num_layers) */
    double q_scale;      /* queries times (D / q_lora_rank)^1/2 (mla_scale_q_lora); 1 otherwise */
    double kv_scale;     /* the cached latent times (D / kv_lora_rank)^1/2 (mla_scale_kv_lora) */
} qmla_eng_family;

/* FP8 block-quantized weights (quantization_config quant_method "fp8"). */
typedef struct qmla_eng_quant {
    int fp8;
    size_t block_r, block_c; /* weight_block_size, 128 x 128 */
} qmla_eng_quant;

struct qmla_model {
    qmla_model_config c;
    float *embed, *norm, *lm_head;
    layer_w *layers;
    size_t n_params;
    float **owned;
    size_t n_owned, cap_owned;
    qmla_attn_form form; /* QMLA_ATTN_AUTO by default */
    qmla_eng_rope rope;
    qmla_eng_moe moe;
    qmla_eng_quant quant;
    qmla_eng_family fam;
    size_t n_moe_layers;
    size_t wt_max;          /* floats of the largest qmla_eng_wt (the workspace) */
    void **maps;            /* the safetensors files, memory-mapped */
    size_t *map_lens, n_maps;
};

/* ---- config.c */

/* A JSON file, or NULL with err naming the file (and line). */
json_t *qmla_eng_load_json(const char *path, qmla_error *err);
/* dir/config.json -> c, with the keys that only decide what is refused. */
int qmla_eng_parse_config(const char *dir, qmla_model_config *c, qmla_eng_rope *rope,
                          qmla_eng_moe *moe, qmla_eng_quant *quant, qmla_eng_family *fam,
                          size_t *n_mtp, qmla_error *err);
/* The checkpoint's name of engine layer l's tensor sfx, given in DeepSeek's
 * terms ("self_attn.kv_b_proj.weight", "input_layernorm.weight",
 * "mlp.gate_proj.weight", "mlp.experts.3.up_proj.weight"):
 * model.layers.<l>.<sfx>; LongcatFlash: block l / 2, sublayer s = l % 2,
 * self_attn.<s>.*, input_layernorm.<s>.weight,
 * post_attention_layernorm.<s>.weight, mlps.<s>.{gate,up,down}_proj.weight,
 * the block's mlp.* (router, experts) as given. */
void qmla_eng_tensor_name(const qmla_eng_family *f, size_t l, const char *sfx, char *out,
                          size_t n);
/* The inverse frequencies inv[0..d_r/2) of the rope (float32, as
 * transformers computes them for positions below max_position_embeddings). */
void qmla_eng_rope_inv_freq(const qmla_model_config *c, const qmla_eng_rope *r, float *inv);

/* ---- safetensors.c: FP8 E4M3 (torch.float8_e4m3fn) byte -> float */
float qmla_eng_fp8_e4m3(uint8_t b);

/* ---- safetensors.c: the writer */

/* A safetensors file being built: the header object (tensors and
 * __metadata__), then slot 0 of bufs / lens the header bytes
 * (qmla_st_finish) and slots 1.. the tensors in the order added. */
typedef struct qmla_st_out {
    json_t *hdr;
    const void **bufs;
    size_t *lens;
    size_t n, cap, off;
    const char *dtype;    /* "F32", "F16", "BF16" */
    uint16_t **conv;      /* converted tensors (F16/BF16), owned */
    size_t n_conv;
    char *hj;             /* the header JSON (qmla_st_finish) */
    unsigned char *head;  /* slot 0: length + padded JSON */
} qmla_st_out;

/* Add tensor `name` x [r, c] (c = 0: 1-D [r]) in o->dtype; x is kept by
 * reference when F32 (it must outlive the write). */
int qmla_st_add(qmla_st_out *o, const char *name, const float *x, size_t r, size_t c,
                qmla_error *err);
/* Add tensor `name` [r, c] as the bytes it is stored in (dtype as
 * safetensors names it), kept by reference. */
int qmla_st_add_raw(qmla_st_out *o, const char *name, const char *dtype, const void *bytes,
                    size_t nbytes, size_t r, size_t c, qmla_error *err);
/* Serialize the header into slot 0: bufs[0..n] / lens[0..n] are the file. */
int qmla_st_finish(qmla_st_out *o, qmla_error *err);
void qmla_st_out_free(qmla_st_out *o);

/* ---- forward.c: for the perplexity loop */

/* T in [1, the workspace's T_max], every token below V. */
int qmla_eng_forward_check(const qmla_model *m, const qmla_model_ws *w, const int32_t *tokens,
                           size_t T, qmla_error *err);
/* The logits of tokens[0..T) (checked) under cs, as qmla_model_forward
 * gives them, with the clean prefix of the sink/local policy shared between
 * the configurations of one window: *have is the prefix length the
 * workspace holds for these tokens (0 for new ones). Rows t < *P of the
 * logits are in *pre, the rest in lg (*P = 0: all in lg). */
int qmla_eng_forward_window(const qmla_model *m, const qmla_cache_spec *cs, qmla_model_ws *w,
                            const int32_t *tokens, size_t T, size_t *have, float *lg,
                            size_t *P, const float **pre, qmla_error *err);

/* ---- ppl.c: the windows of qmla_model_ppl_multi_progress, resumable */

/* Windows scored of a text of n_bytes (max_windows 0: all). */
size_t qmla_eng_ppl_n_windows(size_t n_bytes, size_t context, size_t max_windows);

/* The KL of every configuration from a reference (qmla_model_ppl_kl), per
 * window k and configuration j: sum[k * n_cs + j] the KL summed over the
 * window's targets (nats, in target order), top1[k * n_cs + j] the targets
 * whose argmax agrees, tok[(k * n_cs + j) * context + t] target t's KL
 * rounded to float32. Windows done in a resume journal are filled by the
 * caller; the others are written. */
typedef struct qmla_eng_ppl_kl {
    const qmla_cache_spec *ref; /* the reference configuration */
    long ref_index;             /* its index in cs, or -1: scored on its own (no result) */
    double *sum;                /* [windows * n_cs] */
    long long *top1;            /* [windows * n_cs] */
    float *tok;                 /* [windows * n_cs * context] */
} qmla_eng_ppl_kl;

/* Windows already scored (a resume journal: done[k] != 0, their NLLs in
 * nll[k * n_cs + j], with kl: their KL in its arrays), and a callback for
 * every newly scored window with its n_cs NLL sums (and with kl, its KL
 * sums, agreements and n_cs * context per-token KL; else NULL), called one
 * at a time, in completion order; a non-zero status fails the run with err
 * set. */
typedef struct qmla_eng_ppl_resume {
    const unsigned char *done; /* [windows] or NULL */
    const double *nll;         /* [windows * n_cs] */
    int (*save)(void *ctx, size_t k, const double *nll, size_t n_cs, const double *kl_sum,
                const long long *top1, const float *kl_tok, qmla_error *err);
    void *ctx;
} qmla_eng_ppl_resume;

/* qmla_model_ppl_multi_progress with rs (may be NULL): windows done in rs
 * are not scored again; every sum is taken over all windows in window
 * order, so the results equal an uninterrupted run's bit for bit. Progress
 * counts the restored windows (its `resumed`), reported once before the
 * first new window when there are any. kl (may be NULL): the KL of every
 * configuration from kl->ref, into its arrays and res[j]'s KL fields. */
int qmla_eng_ppl_windows(const qmla_model *m, const qmla_exec *ex, const qmla_cache_spec *cs,
                         size_t n_cs, const uint8_t *text, size_t n_bytes, size_t context,
                         size_t max_windows, qmla_progress_fn progress, void *progress_ctx,
                         const qmla_eng_ppl_resume *rs, const qmla_eng_ppl_kl *kl,
                         int *stopped, qmla_ppl_result *res, qmla_error *err);

/* ---- capture_native.c: a model directory in a resume key */

/* "name:size:mtime" of every regular file of dir, alphabetically, comma
 * separated, names escaped (qmla_jnl_escape). */
void qmla_eng_model_files_key(FILE *f, const char *dir);

#endif
