/* python/abi.c — the layout of every C struct the ctypes binding
 * (python/qmla) mirrors, compiled into build/python/libqmla.so from the
 * library's own headers: name, size, and each field's offset and size, in
 * declaration order. python/qmla compares its ctypes classes with this
 * table when it loads the library and refuses to run on any difference, so
 * a field added, removed, reordered or resized in a header cannot silently
 * corrupt memory through the binding. */
#include <stddef.h>
#include <string.h>

#include "qmla/capture.h"
#include "qmla/exec.h"
#include "qmla/model.h"
#include "qmla/quant.h"
#include "qmla/status.h"
#include "qmla/transform.h"

typedef struct abi_field {
    const char *type, *field;
    size_t offset, size;
} abi_field;

#define F(S, f) {#S, #f, offsetof(S, f), sizeof(((S *)0)->f)}
#define END(S) {#S, NULL, 0, sizeof(S)}

/* Each struct: its fields in declaration order, then END (its sizeof). */
static const abi_field fields[] = {
    F(qmla_error, status), F(qmla_error, msg), END(qmla_error),
    F(qmla_quant_params, bits), F(qmla_quant_params, group), F(qmla_quant_params, meta),
    END(qmla_quant_params),
    F(qmla_cache_spec, c_bits), F(qmla_cache_spec, r_bits), F(qmla_cache_spec, group),
    F(qmla_cache_spec, meta), F(qmla_cache_spec, sink), F(qmla_cache_spec, window),
    F(qmla_cache_spec, hook), F(qmla_cache_spec, name), F(qmla_cache_spec, policy),
    F(qmla_cache_spec, layer_bits), F(qmla_cache_spec, n_layer_bits), END(qmla_cache_spec),
    F(qmla_exec, threads), END(qmla_exec),
    F(qmla_ppl_result, nll_sum), F(qmla_ppl_result, tokens), F(qmla_ppl_result, windows),
    F(qmla_ppl_result, nll_nats_per_token), F(qmla_ppl_result, bits_per_byte),
    F(qmla_ppl_result, has_kl), F(qmla_ppl_result, kl_mean), F(qmla_ppl_result, kl_ci_lo),
    F(qmla_ppl_result, kl_ci_hi), F(qmla_ppl_result, kl_p99),
    F(qmla_ppl_result, top1_agreement), END(qmla_ppl_result),
    F(qmla_transform, layer), F(qmla_transform, d_c), F(qmla_transform, d_r),
    F(qmla_transform, pairing), F(qmla_transform, rot), F(qmla_transform, cscale),
    F(qmla_transform, angle), F(qmla_transform, rscale), END(qmla_transform),
    F(qmla_transform_meta, method), F(qmla_transform_meta, config),
    F(qmla_transform_meta, alpha), F(qmla_transform_meta, train_cells),
    F(qmla_transform_meta, capture), F(qmla_transform_meta, command),
    F(qmla_transform_meta, settings), F(qmla_transform_meta, complete),
    F(qmla_transform_meta, capture_sha256), END(qmla_transform_meta),
    F(qmla_transform_file, meta), F(qmla_transform_file, n), F(qmla_transform_file, t),
    F(qmla_transform_file, gamma), F(qmla_transform_file, obj), END(qmla_transform_file),
    F(qmla_capture_config, n_layers), F(qmla_capture_config, H), F(qmla_capture_config, D),
    F(qmla_capture_config, d_c), F(qmla_capture_config, d_n), F(qmla_capture_config, d_r),
    F(qmla_capture_config, d_v), F(qmla_capture_config, softmax_scale),
    F(qmla_capture_config, rope_pairing), F(qmla_capture_config, rms_norm_eps),
    F(qmla_capture_config, model), F(qmla_capture_config, source),
    F(qmla_capture_config, has_check_tolerance), F(qmla_capture_config, check_tolerance),
    F(qmla_capture_config, synthetic), END(qmla_capture_config),
    F(qmla_layer, layer), F(qmla_layer, w_uk), F(qmla_layer, w_uv), F(qmla_layer, w_o),
    F(qmla_layer, kv_norm), END(qmla_layer),
    F(qmla_cell, name), F(qmla_cell, dataset), F(qmla_cell, seed), F(qmla_cell, N),
    F(qmla_cell, T), F(qmla_cell, c_kv), F(qmla_cell, k_rope), F(qmla_cell, q_nope),
    F(qmla_cell, q_rope), F(qmla_cell, attn_out), F(qmla_cell, positions),
    F(qmla_cell, k_rope_pre), F(qmla_cell, q_rope_pre), F(qmla_cell, rope_cos),
    F(qmla_cell, rope_sin), END(qmla_cell),
};

/* Entries of the table (fields and END rows). */
size_t qmla_abi_count(void) { return sizeof fields / sizeof fields[0]; }

/* Entry i: its struct's type name, the field name (NULL on the struct's END
 * row, whose size is the struct's sizeof), offset and size. 0 when i is out
 * of range, 1 otherwise. */
int qmla_abi_entry(size_t i, const char **type, const char **field, size_t *offset,
                   size_t *size)
{
    if (i >= qmla_abi_count())
        return 0;
    *type = fields[i].type;
    *field = fields[i].field;
    *offset = fields[i].offset;
    *size = fields[i].size;
    return 1;
}
