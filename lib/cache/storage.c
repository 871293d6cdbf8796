/* storage.c — persistent bytes of the mixed-precision MLA cache (docs/math.md
 * §9, paper Fig. 5(a)): codes, quantization metadata, the BF16 sink/window
 * buffers and the page-table entries of one sequence, against the BF16
 * cache's 1152 bytes per token (contract: include/qmla/decode.h).
 * Test: tests/cache/test_kvcache.c; command: qmla storage.
 */
#include "qmla/decode.h"
#include "qmla/kvcache.h"

int qmla_storage_account(const qmla_kv_config *c, int meta, long context,
                         qmla_storage_row *row, qmla_error *err)
{
    int st = qmla_kv_check(c, err);
    if (st)
        return st;
    if (context < 1)
        return qmla_error_set(err, QMLA_EINVAL, "storage: context %ld: expected >= 1",
                              context);
    if (meta != QMLA_CORE_META_F16 && meta != QMLA_CORE_META_Q8)
        return qmla_error_set(err, QMLA_EINVAL, "storage: metadata: expected f16 or q8");
    const qmla_kv_layout L = qmla_kv_layout_of(c);
    const double T = (double)context;
    const long pages = (context + QMLA_KV_PAGE - 1) / QMLA_KV_PAGE;
    row->context = context;
    row->table_bytes = 4.0 * (double)pages;
    if (L.bf16) {
        row->code_bytes = T * QMLA_KV_D * 2;
        row->meta_bytes = 0;
        row->protect_bytes = 0;
    } else {
        row->code_bytes = T * (L.cb_c + L.cb_r);
        row->meta_bytes = T * (meta == QMLA_CORE_META_Q8 ? (4 + 2 * L.ng_c) + (4 + 2 * L.ng_r)
                                                         : 4 * (L.ng_c + L.ng_r));
        row->protect_bytes = ((double)c->sink + (double)c->window) * QMLA_KV_D * 2;
    }
    row->total_bytes = row->code_bytes + row->meta_bytes + row->protect_bytes + row->table_bytes;
    row->bytes_per_token = row->total_bytes / T;
    row->ratio = T * QMLA_KV_D * 2 / row->total_bytes;
    return QMLA_OK;
}
