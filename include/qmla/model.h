/* qmla/model.h — a native inference engine for transformers MLA checkpoints
 * (issue 11): loading, a forward pass with the MLA cache in the absorbed form
 * (docs/math.md §1) written through the library quantizer (§2) under the
 * sink/local policy (§9), and bits per byte over a text.
 *
 * Supported: DeepseekV2ForCausalLM / DeepseekV3ForCausalLM (also Kimi-K2's
 * model_type kimi_k2) and Glm4MoeLiteForCausalLM (DeepseekV3's attention and
 * router, MoE layers by mlp_layer_types), q_proj or q_lora (q_a_proj, q_a_layernorm, q_b_proj),
 * kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj, RMSNorm; SwiGLU MLP
 * below first_k_dense_replace and MoE blocks from there (DeepseekV2: softmax
 * gate, greedy or group_limited_greedy top-k; DeepseekV3: sigmoid gate with
 * e_score_correction_bias, noaux_tc group top-k, norm_topk_prob; both
 * routed_scaling_factor and shared experts; only a token's routed experts
 * are computed); RoPE default, linear, dynamic, yarn or llama3 as
 * transformers computes them (YaRN's attention factor on cos/sin, DeepSeek's
 * mscale(factor, mscale_all_dim)^2 in the softmax scale) with the
 * interleaved pairing (DeepseekV2, or V3 with rope_interleave) or the half
 * pairing (DeepseekV3); no bias. Weights: config.json plus model.safetensors
 * or sharded safetensors with model.safetensors.index.json; F16, BF16, F32
 * and FP8 E4M3 tensors with block scales NAME_scale_inv (quantization_config
 * quant_method fp8). The files are memory-mapped; the MLP weights (dense,
 * routed and shared experts) stay in their stored dtype and are converted
 * to float32 when used, in the workspace; every other tensor is converted
 * to float32 once at load. Anything else is refused by name (QMLA_EFORMAT).
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
#include "qmla/transform.h"

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
    int tied;            /* tie_word_embeddings: the output projection is the
                            embedding matrix (lm_head.weight not read) */
} qmla_model_config;

typedef struct qmla_model qmla_model;

/* Load `dir` (config.json + safetensors). QMLA_EIO / QMLA_EFORMAT naming the
 * file, the tensor and what was expected versus found. */
int qmla_model_load(const char *dir, qmla_model **out, qmla_error *err);
void qmla_model_free(qmla_model *m);
const qmla_model_config *qmla_model_cfg(const qmla_model *m);
/* Number of parameters loaded. */
size_t qmla_model_n_params(const qmla_model *m);
/* The vocabulary size V (the logits' row length). */
size_t qmla_model_vocab_size(const qmla_model *m);

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

/* ---- cache transforms (docs/math.md §7, docs/transforms-format.md) -------
 *
 * Fold the per-layer transforms t[0..n) (each for layer t[i].layer, made with
 * the latent gain gammas[i]) into the model's weights in place, so that the
 * cache the forward pass writes is the transformed one and its consumers are
 * compensated (right-multiplying convention, X -> X T):
 *   content  C T_C with T_C = diag(γ)^-1 R diag(s): the latent rows W_c of
 *            kv_a_proj_with_mqa become R^T W_c and the kv_a_layernorm gain
 *            becomes s. This passes through the RMSNorm because the norm
 *            without its gain commutes with an orthogonal R (‖yR‖ = ‖y‖) and
 *            diag(γ)^-1 cancels the old gain: norm(y) diag(γ) T_C =
 *            norm(y R) diag(s). kv_b_proj's key and value blocks become
 *            w_uk[h] T_C^-T and w_uv[h] T_C^-T.
 *   RoPE     K T_P with T_P = blockdiag(s_i R(θ_i)) on the model's RoPE
 *            pairs (a scaled rotation in each pair's plane commutes with the
 *            positional rotation): the RoPE rows W_r of kv_a_proj_with_mqa
 *            become T_P^T W_r and the RoPE rows of each head of q_proj (or
 *            q_b_proj) are multiplied by T_P^-1 from the left, so that
 *            q_rope becomes q_rope T_P^-T. Rows are in checkpoint order; the
 *            pairs are those the engine rotates (the checkpoint's pairing).
 * Only what can be folded is accepted; everything else is refused before any
 * weight changes: a layer index outside the model or given twice,
 * d_c / d_r / pairing other than the model's (QMLA_EMISMATCH), R not
 * orthogonal to 1e-5 or a non-positive / non-finite scale (QMLA_EINVAL: a
 * non-orthogonal content map does not commute with the RMSNorm and cannot be
 * folded), and a gain γ that differs from the model's kv_a_layernorm weight
 * by more than 1e-6 relative (QMLA_EMISMATCH: T_C would then carry
 * diag(γ_model / γ) R before the norm, which is not orthogonal and cannot
 * be folded). Layers without an entry stay unchanged (identity). With every
 * cache unquantized the model computes the same function up to float
 * rounding. */
int qmla_model_apply_transforms(qmla_model *m, const qmla_transform *t,
                                const float *const *gammas, size_t n, qmla_error *err);

/* The model's kv_a_layernorm weight of layer l ([d_c], a view). */
const float *qmla_model_latent_gain(const qmla_model *m, size_t l);

/* Write the model's weights as a safetensors checkpoint
 * out_dir/model.safetensors in dtype "F32" (NULL: F32), "F16" (QMLA_ERANGE
 * naming the tensor for a value beyond float16) or "BF16" (round to
 * nearest even), in the checkpoint's tensor names and layout (
 * kv_b_proj reassembled from its key and value blocks) with the string pairs
 * meta[0..2*n_meta) as "__metadata__" (plus qmla_tool_version and
 * qmla_git_commit), and copy every other regular file of
 * src_dir (config.json, tokenizer and generation files) except safetensors
 * files and model.safetensors.index.json. The files are written into a new
 * folder beside out_dir (.NAME.qmla-fuse-new.PID; an existing out_dir's
 * other entries are carried into it as hard links) and that folder is
 * swapped in for out_dir as one step when all are written (renameat2
 * RENAME_EXCHANGE, or two renames undone on failure): on failure out_dir is
 * left as it was (absent when it was). A commit that a crash or a failed
 * undo cut short is resolved by qmla_model_save_recover, which this call
 * runs first. out_dir is created when absent; QMLA_EINVAL when it is src_dir itself,
 * or when it holds a model.safetensors.index.json (a stale shard index would
 * take precedence over the new file); QMLA_EIO naming the file otherwise. */
int qmla_model_save(const qmla_model *m, const char *src_dir, const char *out_dir,
                    const char *dtype, const char *const *meta, size_t n_meta,
                    qmla_error *err);

/* Resolve what an interrupted qmla_model_save into out_dir left beside it
 * (processes that no longer run): the old folder of a commit cut short
 * between its renames (.NAME.qmla-fuse-old.PID) is renamed back when
 * out_dir is absent and removed when the new folder is in place; an
 * unfinished new folder (.NAME.qmla-fuse-new.PID) is removed. So out_dir is
 * afterwards the old or the new complete folder. note (may be NULL) gets
 * what was done, naming each folder ("" when nothing was found). QMLA_OK,
 * or QMLA_EIO naming the folder that could not be resolved. */
int qmla_model_save_recover(const char *out_dir, char *note, size_t note_len, qmla_error *err);

/* The checks of qmla_model_save on out_dir, for callers to make before long
 * work (the save makes them again): out_dir absent with a writable parent
 * folder, or a writable folder with a writable parent that is not src_dir and holds no
 * model.safetensors.index.json. QMLA_OK, or QMLA_EINVAL naming what was
 * found. */
int qmla_model_save_check(const char *src_dir, const char *out_dir, qmla_error *err);

/* An online cache hook that applies the transforms on the fly through the
 * transforms module (qmla_transform_content_apply / qmla_transform_rope_apply):
 * forward X -> X T before the quantizer, inverse X -> X T^-1 after it, so
 * attention reads QDQ(X T) T^-1 with the model's own weights: the effective
 * cache of qmla_transform_effective_content / _rope. Checks as
 * qmla_model_apply_transforms. The hook keeps pointers to t and gammas
 * (which must outlive it); free with qmla_model_transform_hook_free. */
int qmla_model_transform_hook(const qmla_model *m, const qmla_transform *t,
                              const float *const *gammas, size_t n, const char *method,
                              qmla_cache_hook *hk, qmla_error *err);
void qmla_model_transform_hook_free(qmla_cache_hook *hk);



#define QMLA_CACHE_LAYERS_MAX 128 /* layers a per-layer configuration covers */
typedef struct qmla_cache_spec {
    int c_bits, r_bits;     /* 32 fp32, 16 bf16, or 2/3/4/8 quantized */
    int group;              /* G for quantized paths */
    qmla_meta meta;         /* f16 or q8 */
    int sink, window;       /* policy; 0 / 0 = none */
    const qmla_cache_hook *hook; /* NULL: RTN */
    char name[32];          /* "C4R4", "C4R4-q8", "bf16", "fp32", "mix..." */
    char policy[32];        /* "none" or "sink4/local128" */
    /* a per-layer configuration (qmla_cache_spec_from_allocation): layer l's
     * content and RoPE bits are layer_bits[l][0..1] for l < n_layer_bits (0:
     * none given, refused when the layer is written); n_layer_bits 0: c_bits
     * and r_bits for every layer */
    unsigned char layer_bits[QMLA_CACHE_LAYERS_MAX][2];
    int n_layer_bits;
} qmla_cache_spec;

/* Parse a configuration name ("fp32", "bf16", "C4R4", "C3R4", "C2R4-q8"; the
 * C/R part through qmla_kv_parse_config, 3 bits added) and a policy ("none",
 * "sink4/local128"). QMLA_EINVAL with a message otherwise. */
int qmla_cache_spec_parse(const char *config, const char *policy, qmla_cache_spec *s,
                          qmla_error *err);
/* A per-layer configuration from the allocation file `path` (group /allocate
 * of `qmla allocate`, qmla/allocation.h) under `policy`: group 64, f16
 * metadata, c_bits/r_bits those of the file's first layer, layer_bits set,
 * name "mix" followed by each layer's two digits when that fits (else
 * "mix-" and 8 hex digits of a hash of the bits). QMLA_EINVAL for a layer
 * index beyond QMLA_CACHE_LAYERS_MAX; the reader's errors otherwise. */
int qmla_cache_spec_from_allocation(const char *path, const char *policy, qmla_cache_spec *s,
                                    qmla_error *err);

/* How attention is computed over a window (prefill): the absorbed form of
 * docs/math.md §1 through lib/attention/attention.c (queries absorbed into the latent
 * space, logits and aggregation over d_c channels), or the expanded form
 * (the latent cache up-projected by kv_b_proj into per-head keys [T, d_n]
 * and values [T, d_v], logits over d_n + d_r channels), both from the same
 * cache as written, causal in row blocks, through sgemm. AUTO (the default)
 * picks the one with fewer multiply-adds (qmla_model_expanded_cheaper): the
 * expanded form when d_n + d_v is well below 2 d_c, as on tiny-mla (64 + 64
 * vs 512). The two agree to float rounding (tests/engine/test_model.c). */
typedef enum qmla_attn_form {
    QMLA_ATTN_AUTO = 0,
    QMLA_ATTN_ABSORBED = 1,
    QMLA_ATTN_EXPANDED = 2
} qmla_attn_form;
void qmla_model_set_attn_form(qmla_model *m, qmla_attn_form f);
/* 1 when the expanded form costs fewer multiply-adds for a window of T
 * tokens (per cache representation read; the same choice for every policy). */
int qmla_model_expanded_cheaper(const qmla_model_config *c, size_t T);

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
 * lib/engine/capture_native.c). Row-major float32, valid during the call only:
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
    /* KL(P_ref || P_this) from a reference configuration (qmla_model_ppl_kl,
     * `qmla ppl --kl-ref`; docs/results-format.md "/ppl_table"): has_kl 0
     * when none was computed (the fields below are then 0) */
    int has_kl;
    double kl_mean;            /* nats/token: mean over every target */
    double kl_ci_lo, kl_ci_hi; /* 95 % t interval over the windows' means (NaN: 1 window) */
    double kl_p99;             /* nats: 99th percentile of the per-token KL (float32) */
    double top1_agreement;     /* fraction of targets whose argmax equals the reference's */
} qmla_ppl_result;

/* Score `text` (bytes) under the protocol above with windows of `context`
 * bytes: the first `max_windows` windows (0 = all). QMLA_EINVAL when the
 * text holds no full window or context exceeds max_position_embeddings. */
int qmla_model_ppl(const qmla_model *m, const qmla_exec *ex, const qmla_cache_spec *cs,
                   const uint8_t *text, size_t n_bytes, size_t context,
                   size_t max_windows, qmla_ppl_result *res, qmla_error *err);

/* qmla_model_ppl for the configurations cs[0..n_cs) at once (res[n_cs]),
 * window by window: protected configurations (a quantized cache under a
 * sink S / local W policy, expanded form, P = S + W < context) share the
 * clean prefix. Query t < P reads every key from its BF16 value in every
 * layer, so tokens 0..P-1 go through the BF16 forward pass whatever the
 * configuration: they are computed once per window (a forward pass of
 * length P) for every such configuration, and each configuration then
 * computes tokens P..T-1 only. qmla_model_forward and qmla_model_ppl take
 * the same two phases for such a configuration alone, so each result is
 * bit for bit the one of qmla_model_ppl with that configuration alone
 * (tests/engine/test_model.c). Errors name the configuration. */
int qmla_model_ppl_multi(const qmla_model *m, const qmla_exec *ex, const qmla_cache_spec *cs,
                         size_t n_cs, const uint8_t *text, size_t n_bytes, size_t context,
                         size_t max_windows, qmla_ppl_result *res, qmla_error *err);

/* qmla_model_ppl_multi with a progress callback (qmla/exec.h; may be NULL),
 * called after each finished window with the windows finished so far
 * (resumed 0), one call at a time from any of the threads. When the callback stops it: *stopped = 1,
 * QMLA_OK and res zeroed (the windows already scored are dropped). stopped
 * may be NULL. */
int qmla_model_ppl_multi_progress(const qmla_model *m, const qmla_exec *ex,
                                  const qmla_cache_spec *cs, size_t n_cs, const uint8_t *text,
                                  size_t n_bytes, size_t context, size_t max_windows,
                                  qmla_progress_fn progress, void *progress_ctx,
                                  int *stopped, qmla_ppl_result *res, qmla_error *err);

/* qmla_model_ppl_multi with, for every configuration, the KL divergence of
 * its next-token distribution from the one of `ref` (a configuration scored
 * in the same windows; it may be one of cs, whose row then has KL 0 and
 * agreement 1 exactly): per target t, with log-softmax in double of the
 * float logits, KL_t = sum_v p_ref(v) (log p_ref(v) - log p_this(v)); and
 * whether argmax of the two rows (the first maximum) agrees. res[j] gets
 * has_kl = 1, the mean of KL_t over every target, a 95 % t interval over
 * the windows (mean +- t(0.975, n-1) s / sqrt(n) of the n windows' mean
 * KL_t: windows are disjoint and each starts from BOS, the tokens inside
 * one are not independent), the 99th percentile of KL_t rounded to float32
 * (linear interpolation between order statistics, as NumPy's default) and
 * the agreement fraction. The NLL fields are bit for bit those of
 * qmla_model_ppl_multi. */
int qmla_model_ppl_kl(const qmla_model *m, const qmla_exec *ex, const qmla_cache_spec *cs,
                      size_t n_cs, const qmla_cache_spec *ref, const uint8_t *text,
                      size_t n_bytes, size_t context, size_t max_windows, qmla_ppl_result *res,
                      qmla_error *err);

/* One row of a perplexity table. */
typedef struct qmla_ppl_row {
    const char *text;     /* text file as given */
    const char *config;   /* cache_spec name */
    const char *method;   /* "none" (fp32/bf16), "RTN", or the hook's method */
    const char *policy;
    const char *transforms; /* transforms file folded in ("" or NULL: none) */
    size_t context;
    qmla_ppl_result r;
    const char *kl_ref;     /* the KL's reference configuration (r.has_kl) */
} qmla_ppl_row;

/* Write group /ppl of the results file `path` atomically (other groups of an
 * existing file are kept): the attributes bits_per_byte,
 * nll_nats_per_token, tokens, config, method, policy, text, context of row 0
 * on /ppl itself, every row as /ppl/row_NNN with the same attributes (and
 * transforms, the file folded in or ""), and model_dir, command_line, rows,
 * tool_version, git_commit on /ppl; and the same rows as the table
 * /ppl_table (qmla/table.h: columns text, text_index, config, method, policy,
 * transforms, context, tokens, bits_per_byte, nll_nats_per_token,
 * delta_bits_per_byte against the same text's bf16 row) for qmla export and
 * qmla figures. QMLA_EIO naming the file. */
int qmla_ppl_save(const char *path, const char *model_dir, const char *command_line,
                  const qmla_ppl_row *rows, size_t n, qmla_error *err);

#ifdef __cplusplus
}
#endif
#endif
