/* qmla/decode.h — the paged low-bit MLA cache and decode attention: C
 * reference twins of the CUDA kernels (kernels/kvcache.cu, kernels/decode.cu)
 * and the storage accounting of docs/math.md §9. Layout: qmla/kvcache.h;
 * description: docs/decode.md.
 *
 * The twins work on host memory with the same structs the CUDA launchers
 * take with device memory.
 * Tests: tests/cache/test_kvcache.c (CPU), tests/cache/test_decode_cuda.c (GPU).
 */
#ifndef QMLA_DECODE_H
#define QMLA_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "qmla/kvcache.h"
#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The cache of a batch of sequences (pointers to host or device memory). */
typedef struct qmla_kv_cache {
    qmla_kv_config cfg;
    uint8_t *pool;      /* [n_pages, page_bytes] (qmla_kv_layout_of) */
    size_t n_pages;
    uint16_t *sink;     /* [batch, S, 576] BF16 bits; NULL when S == 0 */
    uint16_t *window;   /* [batch, W, 576] BF16 bits, row t % W; NULL when W == 0 */
    int batch;
} qmla_kv_cache;

/* Tokens to insert: rows of [c_kv ; k_rope], as BF16 (kv) or float32
 * (kv_f32): exactly one of the two is non-NULL when n > 0. Float32 rows
 * are quantized as they are (what the QDQ hook of a float32 model
 * quantizes); their BF16 copies (sink / window rows, BF16 pages) are the
 * rows rounded to nearest even (qmla_core_f32_to_bf16). BF16 rows are
 * quantized as their float32 values. */
typedef struct qmla_kv_write {
    const uint16_t *kv;     /* [n, 576] BF16 bits, or NULL */
    size_t n;
    const int64_t *slot;    /* [n] physical page * 64 + offset; < 0: skip the token */
    const int32_t *seq;     /* [n] sequence of each token, < batch */
    const int32_t *pos;     /* [n] position of each token in its sequence */
    const int32_t *seq_len; /* [batch] length of each sequence after this write */
    const float *kv_f32;    /* [n, 576] float32, or NULL (last: {kv, n, ...} initializers
                             * of BF16 writes leave it NULL) */
} qmla_kv_write;

/* Decode attention inputs (queries absorbed into the latent space). */
typedef struct qmla_decode_args {
    int batch, s_q, heads;      /* b; query tokens per sequence; H */
    float scale;                /* softmax scale tau */
    const uint16_t *q;          /* [b, s_q, H, 576] BF16 bits */
    const int32_t *block_table; /* [b, max_pages] physical page of logical page i */
    int max_pages;
    const int32_t *seq_len;     /* [b] tokens in the cache (>= 0) */
} qmla_decode_args;

/* Validate a cache configuration (bits, group, S, W, metadata f16 or q8). */
int qmla_kv_check(const qmla_kv_config *c, qmla_error *err);
/* "f16" or "q8" (the packed pages' metadata), "-" for a BF16 cache. */
const char *qmla_kv_meta_name(const qmla_kv_config *c);
/* QMLA_OK for a BF16 cache or f16 metadata; QMLA_EINVAL naming `who`, the
 * layout (C?R? G ?, q8 metadata) and what is supported otherwise. Every GPU
 * path that reads or writes f16-metadata pages only calls it first. */
int qmla_kv_require_f16_meta(const qmla_kv_config *c, const char *who, qmla_error *err);
/* Parse "C4R4", "C2R4", "C8R8", "BF16" (any C{2,4,8}R{2,4,8}) into c, with
 * the defaults group 64, sink 4, window 128, f16 metadata (callers
 * override them; c->meta = QMLA_CORE_META_Q8 selects the q8 page). */
int qmla_kv_parse_config(const char *name, qmla_kv_config *c, qmla_error *err);

/* C twin of the fused cache writer: quantize each token (quant_core.h, f16
 * or q8 metadata as cfg.meta says, exactly as qmla_quant_qdq with that
 * metadata per path) from its BF16 or float32 row, pack it into its slot, and store
 * its BF16 row in the sink buffer when pos < S and in the window ring when
 * pos >= seq_len - W. QMLA_EINVAL when both or neither of kv / kv_f32 are
 * given; QMLA_ENONFINITE / QMLA_ERANGE name the first failing token and
 * group (q8: token and path, as the super-scale is per token and path). */
int qmla_kv_write_ref(const qmla_kv_cache *kc, const qmla_kv_write *w,
                      qmla_error *err);
/* The rows of a write: QMLA_EINVAL unless exactly one of kv / kv_f32 is
 * given (n > 0); shared by the twin and the CUDA launcher. */
int qmla_kv_write_rows_check(const qmla_kv_write *w, qmla_error *err);

/* Token t of sequence bi as attention uses it: 576 BF16 values (as float),
 * from the protection buffers or reconstructed from the packed copy. */
void qmla_kv_token_ref(const qmla_kv_cache *kc, const qmla_decode_args *a,
                       int bi, long t, float *row);
/* The same with packed_f32 != 0: packed values unrounded (qmla_kv_packed_f32,
 * the values the C4R4 / C2R4 GPU decode attends to); protected ones as above. */
void qmla_kv_token_model(const qmla_kv_cache *kc, const qmla_decode_args *a,
                         int bi, long t, int packed_f32, float *row);

/* Double-precision reference of decode attention on the reconstructed
 * cache: query i of sequence bi sees tokens t <= len - s_q + i; one global
 * softmax. out [b, s_q, H, 512], lse [b, s_q, H] (natural log; -inf and a
 * zero output for a query that sees no token). */
int qmla_decode_ref(const qmla_kv_cache *kc, const qmla_decode_args *a,
                    double *out, double *lse, qmla_error *err);
/* The same on the cache of qmla_kv_token_model(packed_f32). */
int qmla_decode_ref_model(const qmla_kv_cache *kc, const qmla_decode_args *a,
                          int packed_f32, double *out, double *lse, qmla_error *err);

/* ---- storage accounting (docs/math.md §9) ------------------------------ */

typedef struct qmla_storage_row {
    long context;             /* tokens per sequence */
    double code_bytes;        /* packed codes, per sequence */
    double meta_bytes;        /* quantization metadata, per sequence */
    double protect_bytes;     /* BF16 sink + window buffers, per sequence */
    double table_bytes;       /* page-table entries (int32 per page) */
    double total_bytes;
    double bytes_per_token;
    double ratio;             /* BF16 bytes (1152 per token) / total */
} qmla_storage_row;

/* Bytes of one sequence of `context` tokens in config c (c_bits 16: the BF16
 * baseline, no protection buffers), metadata meta (QMLA_CORE_META_F16 or
 * QMLA_CORE_META_Q8). */
int qmla_storage_account(const qmla_kv_config *c, int meta, long context,
                         qmla_storage_row *row, qmla_error *err);

/* One row of a storage results file: a configuration's name ("C4R4",
 * "layer3:C2R4", "mean"), its metadata ("f16", "q8", "-" for BF16), the
 * policy (sink, window) and the accounting at one context. */
typedef struct qmla_storage_entry {
    char config[48];
    char meta[8];
    int sink, window;
    qmla_storage_row r;
} qmla_storage_entry;

/* Write rows e[0..n) to path atomically as a whole new file: root
 * attributes format "qmla-storage", format_version 1 and the provenance
 * (command_line may be NULL), and the table /storage with one row per
 * entry (config, config_index: order of first appearance, meta, policy,
 * sink, window, context, series_index: order of first appearance of
 * (config, meta, policy), code_bytes, meta_bytes, protect_bytes,
 * table_bytes, total_bytes, bytes_per_token, ratio). An existing path that
 * is not an earlier storage file is refused (QMLA_EINVAL naming what it
 * holds); QMLA_EIO naming the file when the write fails. */
int qmla_storage_write_h5(const char *path, const qmla_storage_entry *e, size_t n,
                          const char *command_line, qmla_error *err);
/* The refusal of qmla_storage_write_h5, checked before any work. */
int qmla_storage_check_output(const char *path, qmla_error *err);

/* The same accounting for a latent of d_c + d_r values per token (multiples
 * of c->group, or a path narrower than it: one group, as the quantizer
 * groups it) and every bit width of the quantizer (2, 3, 4, 8; 16 BF16):
 * code bytes per token (d_c/G) ceil(G c_bits/8) + (d_r/G) ceil(G r_bits/8),
 * metadata, protection (S + W) (d_c + d_r) 2, page table 4 per 64 tokens;
 * ratio against 2 (d_c + d_r) bytes per token. qmla_storage_account is this
 * at 512 + 64 after qmla_kv_check. QMLA_EINVAL naming the value otherwise. */
int qmla_storage_account_dims(const qmla_kv_config *c, int meta, long context, int d_c,
                              int d_r, qmla_storage_row *row, qmla_error *err);

#ifdef __cplusplus
}
#endif
#endif
