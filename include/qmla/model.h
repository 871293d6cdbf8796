/* qmla/model.h — a native inference engine for transformers MLA checkpoints
 * (issue 11): loading, a forward pass with the MLA cache in the absorbed form
 * (docs/math.md §1) written through the library quantizer (§2) under the
 * sink/local policy (§9), and bits per byte over a text.
 *
 * Supported: DeepseekV2ForCausalLM / DeepseekV3ForCausalLM with dense blocks
 * only (every layer below first_k_dense_replace), q_proj or q_lora
 * (q_a_proj, q_a_layernorm, q_b_proj), kv_a_proj_with_mqa, kv_a_layernorm,
 * kv_b_proj, o_proj, RMSNorm, SwiGLU MLP, RoPE "default" with the
 * interleaved pairing (DeepseekV2) or the half pairing (DeepseekV3), no bias.
 * Weights: config.json plus model.safetensors or sharded safetensors with
 * model.safetensors.index.json; F16, BF16 and F32 tensors (converted to
 * float32 once). Anything else is refused by name (QMLA_EFORMAT).
 *
 * Evaluation protocol (experiments/tiny-mla/train.py, heldout_windows): the
 * text's bytes are cut into n = floor(bytes / T) non-overlapping windows of
 * T bytes from the start; each window is one sequence [BOS] + w[0..T-1) with
 * targets w[0..T); the loss is the mean over all targets, so bits per byte
 * = nats per token / ln 2 (one token per byte).
 *
 * Cache (what attention reads): per layer and token the row [c_kv ; k_rope]
 * (post kv_a_layernorm latent, rotated RoPE key). Configurations:
 *   fp32  the float32 values as computed (the transformers reference);
 *   bf16  rounded to BF16 (the paper's BF16 baseline);
 *   C{x}R{y}[-f16|-q8]  x, y in {2, 3, 4, 8} (qmla_kv_parse_config's names,
 *         plus the quantizer's 3 bits): qmla_quant_qdq with x / y bits per path, group G
 *         (default 64), f16 (default) or q8 metadata, dequantized values
 *         rounded to BF16 (as qmla/kvcache.h reconstructs them).
 * Policy sink S / local W: query i reads key s from its BF16 value when
 * s < S or s > i - W (the W most recent tokens of the cache of length i+1),
 * otherwise from its dequantized packed copy: one representation per token
 * and query, one softmax over all keys. Quantization happens as each token
 * is written, before any query reads it (the token's own query included).
 *
 * Threads: windows run in parallel under OpenMP (ex->threads), each on one
 * thread with BLAS single-threaded (qmla_blas_set_threads(1) by the
 * program); per-window sums are added in window order, so results do not
 * depend on the thread count.
 */
#ifndef QMLA_MODEL_H
#define QMLA_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "qmla/exec.h"
#include "qmla/quant.h"
#include "qmla/rope.h"
#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qmla_model_config {
    char arch[64];       /* "DeepseekV2ForCausalLM" */
    size_t V, D, L, H;
    size_t n_inter;      /* intermediate_size */
    size_t q_lora_rank;  /* 0: plain q_proj */
    size_t d_c, d_n, d_r, d_v;
    double eps;          /* rms_norm_eps (input, post-attention, final norms) */
    double latent_eps;   /* kv_a_layernorm / q_a_layernorm: transformers builds them
                            with its default eps 1e-6, whatever rms_norm_eps says */
    double rope_theta;
    qmla_rope_pairing pairing;
    double tau;          /* (d_n + d_r)^-1/2 */
    size_t max_pos;      /* max_position_embeddings */
    int bos;             /* bos_token_id */
} qmla_model_config;

typedef struct qmla_model qmla_model;

/* Load `dir` (config.json + safetensors). QMLA_EIO / QMLA_EFORMAT naming the
 * file, the tensor and what was expected versus found. */
int qmla_model_load(const char *dir, qmla_model **out, qmla_error *err);
void qmla_model_free(qmla_model *m);
const qmla_model_config *qmla_model_cfg(const qmla_model *m);
/* Number of parameters loaded. */
size_t qmla_model_n_params(const qmla_model *m);

/* The cache transform hook the transforms (issue 10) plug into: before the
 * quantizer, the path of one layer (path 0 content [T, d_c], 1 RoPE
 * [T, d_r]) goes through forward() in place; after dequantization through
 * inverse(), so attention reads the cache in the original basis. NULL
 * members mean identity. Fused (offline) transforms need no hook. */
typedef struct qmla_cache_hook {
    int (*forward)(void *ctx, size_t layer, int path, float *x, size_t T,
                   size_t width, qmla_error *err);
    int (*inverse)(void *ctx, size_t layer, int path, float *x, size_t T,
                   size_t width, qmla_error *err);
    void *ctx;
    const char *method; /* "RTN" when absent */
} qmla_cache_hook;

enum { QMLA_CACHE_FP32 = 32, QMLA_CACHE_BF16 = 16 };

typedef struct qmla_cache_spec {
    int c_bits, r_bits;     /* 32 fp32, 16 bf16, or 2/3/4/8 quantized */
    int group;              /* G for quantized paths */
    qmla_meta meta;         /* f16 or q8 */
    int sink, window;       /* policy; 0 / 0 = none */
    const qmla_cache_hook *hook; /* NULL: RTN */
    char name[32];          /* "C4R4", "C4R4-q8", "bf16", "fp32" */
    char policy[32];        /* "none" or "sink4/local128" */
} qmla_cache_spec;

/* Parse a configuration name ("fp32", "bf16", "C4R4", "C3R4", "C2R4-q8"; the
 * C/R part through qmla_kv_parse_config, 3 bits added) and a policy ("none",
 * "sink4/local128"). QMLA_EINVAL with a message otherwise. */
int qmla_cache_spec_parse(const char *config, const char *policy, qmla_cache_spec *s,
                          qmla_error *err);

/* Work buffers of one sequence of up to T_max tokens. */
typedef struct qmla_model_ws qmla_model_ws;
int qmla_model_ws_alloc(const qmla_model *m, size_t T_max, qmla_model_ws **ws,
                        qmla_error *err);
void qmla_model_ws_free(qmla_model_ws *ws);

/* One sequence tokens[0..T) -> logits [T, V] (float32, row-major), single
 * threaded. QMLA_EINVAL for T outside [1, T_max] or a token >= V;
 * quantizer errors (QMLA_ERANGE, QMLA_ENONFINITE) prefixed by the layer. */
int qmla_model_forward(const qmla_model *m, const qmla_cache_spec *cs, qmla_model_ws *ws,
                       const int32_t *tokens, size_t T, float *logits, qmla_error *err);

/* What one layer computed for one sequence, handed to a tap (qmla capture,
 * lib/capture_native.c). Row-major float32, valid during the call only:
 *   hidden_in  [T, D]     the attention module's input (after input_layernorm)
 *   c_kv       [T, d_c]   the content latent after kv_a_layernorm, as
 *                         attention read it (for fp32 the value as computed)
 *   k_rope_pre [T, d_r]   the RoPE key before the rotation, k_rope after it
 *   q_nope     [H, T, d_n] content queries (before absorption)
 *   q_rope_pre [H, T, d_r] RoPE queries before the rotation, q_rope after it
 *   rope_cos, rope_sin [T, d_r/2] per pair, what the rotation applied
 *   attn_out   [T, D]     the attention output after o_proj (before the
 *                         residual add). Positions are 0..T-1. */
typedef struct qmla_model_tap_layer {
    size_t layer, T;
    const float *hidden_in, *c_kv, *k_rope_pre, *k_rope;
    const float *q_nope, *q_rope_pre, *q_rope;
    const float *rope_cos, *rope_sin, *attn_out;
} qmla_model_tap_layer;

typedef struct qmla_model_tap {
    /* called after each layer's attention; a non-zero return stops the
     * forward pass with that status (the tap sets err) */
    int (*layer)(void *ctx, const qmla_model_tap_layer *d, qmla_error *err);
    void *ctx;
    size_t n_layers; /* run layers 0..n_layers-1 only (0 = all) */
} qmla_model_tap;

/* qmla_model_forward with a tap (NULL: none). logits may be NULL (the final
 * norm and lm_head are then skipped), and must be when tap->n_layers stops
 * before the last layer. */
int qmla_model_forward_tap(const qmla_model *m, const qmla_cache_spec *cs,
                           qmla_model_ws *ws, const int32_t *tokens, size_t T,
                           float *logits, const qmla_model_tap *tap, qmla_error *err);

/* The attention weights of layer l as the capture format stores them
 * (docs/capture-format.md): w_uk [H, d_n, d_c], w_uv [H, d_v, d_c] (from
 * kv_b_proj), o_proj [D, H*d_v], kv_a_layernorm's gain [d_c]. Borrowed
 * pointers; QMLA_EINVAL for l >= L. */
int qmla_model_attn_weights(const qmla_model *m, size_t l, const float **w_uk,
                            const float **w_uv, const float **w_o, const float **kv_norm,
                            qmla_error *err);

typedef struct qmla_ppl_result {
    double nll_sum;            /* nats, summed over targets */
    size_t tokens;             /* targets scored */
    size_t windows;
    double nll_nats_per_token;
    double bits_per_byte;
} qmla_ppl_result;

/* Score `text` (bytes) under the protocol above with windows of `context`
 * bytes: the first `max_windows` windows (0 = all). QMLA_EINVAL when the
 * text holds no full window or context exceeds max_position_embeddings. */
int qmla_model_ppl(const qmla_model *m, const qmla_exec *ex, const qmla_cache_spec *cs,
                   const uint8_t *text, size_t n_bytes, size_t context,
                   size_t max_windows, qmla_ppl_result *res, qmla_error *err);

/* One row of a perplexity table. */
typedef struct qmla_ppl_row {
    const char *text;     /* text file as given */
    const char *config;   /* cache_spec name */
    const char *method;   /* "none" (fp32/bf16), "RTN", or the hook's method */
    const char *policy;
    size_t context;
    qmla_ppl_result r;
} qmla_ppl_row;

/* Write group /ppl of the results file `path` atomically (other groups of an
 * existing file are kept): the attributes bits_per_byte,
 * nll_nats_per_token, tokens, config, method, policy, text, context of row 0
 * on /ppl itself, every row as /ppl/row_NNN with the same attributes, and
 * model_dir, command_line, rows on /ppl. QMLA_EIO naming the file. */
int qmla_ppl_save(const char *path, const char *model_dir, const char *command_line,
                  const qmla_ppl_row *rows, size_t n, qmla_error *err);

#ifdef __cplusplus
}
#endif
#endif
