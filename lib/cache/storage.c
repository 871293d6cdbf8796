/* storage.c — persistent bytes of the mixed-precision MLA cache (docs/math.md
 * §9, paper Fig. 5(a)): codes, quantization metadata, the BF16 sink/window
 * buffers and the page-table entries of one sequence, against the BF16
 * cache's 2 (d_c + d_r) bytes per token (1152 for the paged cache's 512 + 64;
 * contract: include/qmla/decode.h). qmla_storage_account is the paged cache
 * (qmla_kv_check's widths); qmla_storage_account_dims the same accounting
 * for other latent widths and every width of the quantizer (3 bits too),
 * which `qmla allocate` prices a model's layers with.
 * Test: tests/cache/test_kvcache.c; commands: qmla storage, qmla allocate.
 */
#include "qmla/decode.h"
#include "qmla/kvcache.h"

static int width_ok(int b) { return b == 2 || b == 3 || b == 4 || b == 8; }

int qmla_storage_account_dims(const qmla_kv_config *c, int meta, long context, int d_c,
                              int d_r, qmla_storage_row *row, qmla_error *err)
{
    if (!c || !row)
        return qmla_error_set(err, QMLA_EINVAL, "storage: NULL argument");
    const int bf16 = c->c_bits == QMLA_KV_BF16;
    if (!bf16 && (!width_ok(c->c_bits) || !width_ok(c->r_bits)))
        return qmla_error_set(err, QMLA_EINVAL,
                              "storage: config C%dR%d: expected content and RoPE bits in "
                              "2, 3, 4, 8 (or 16: BF16)", c->c_bits, c->r_bits);
    if (c->group != 8 && c->group != 16 && c->group != 32 && c->group != 64)
        return qmla_error_set(err, QMLA_EINVAL,
                              "storage: group: expected 8, 16, 32 or 64, found %d", c->group);
    /* as the quantizer groups a path: width/G groups of G, or one group of
     * the whole path when it is narrower than G */
    if (d_c < 1 || d_r < 1 || (d_c > c->group && d_c % c->group) ||
        (d_r > c->group && d_r % c->group))
        return qmla_error_set(err, QMLA_EINVAL,
                              "storage: d_c %d, d_r %d: expected multiples of the group %d "
                              "(or narrower than it)", d_c, d_r, c->group);
    if (c->sink < 0 || c->window < 0)
        return qmla_error_set(err, QMLA_EINVAL,
                              "storage: sink %d / window %d: expected >= 0", c->sink, c->window);
    if (context < 1)
        return qmla_error_set(err, QMLA_EINVAL, "storage: context %ld: expected >= 1",
                              context);
    if (meta != QMLA_CORE_META_F16 && meta != QMLA_CORE_META_Q8)
        return qmla_error_set(err, QMLA_EINVAL, "storage: metadata: expected f16 or q8");
    const double T = (double)context, D = (double)d_c + (double)d_r;
    const long pages = (context + QMLA_KV_PAGE - 1) / QMLA_KV_PAGE;
    row->context = context;
    row->table_bytes = 4.0 * (double)pages;
    if (bf16) {
        row->code_bytes = T * D * 2;
        row->meta_bytes = 0;
        row->protect_bytes = 0;
    } else {
        const int gc = d_c < c->group ? d_c : c->group, gr = d_r < c->group ? d_r : c->group;
        const int ng_c = d_c / gc, ng_r = d_r / gr;
        const double cb_c = (double)ng_c * (double)qmla_core_packed_bytes((size_t)gc, c->c_bits);
        const double cb_r = (double)ng_r * (double)qmla_core_packed_bytes((size_t)gr, c->r_bits);
        row->code_bytes = T * (cb_c + cb_r);
        row->meta_bytes = T * (meta == QMLA_CORE_META_Q8 ? (4 + 2 * ng_c) + (4 + 2 * ng_r)
                                                         : 4 * (ng_c + ng_r));
        row->protect_bytes = ((double)c->sink + (double)c->window) * D * 2;
    }
    row->total_bytes = row->code_bytes + row->meta_bytes + row->protect_bytes + row->table_bytes;
    row->bytes_per_token = row->total_bytes / T;
    row->ratio = T * D * 2 / row->total_bytes;
    return QMLA_OK;
}

int qmla_storage_account(const qmla_kv_config *c, int meta, long context,
                         qmla_storage_row *row, qmla_error *err)
{
    int st = qmla_kv_check(c, err);
    if (st)
        return st;
    return qmla_storage_account_dims(c, meta, context, QMLA_KV_DC, QMLA_KV_DR, row, err);
}
