/* capture_table.c — see capture_table.h. */
#include "capture/capture_table.h"

#define F(type, member) ((ptrdiff_t)offsetof(type, member))
#define LAYER(m) F(qmla_layer, m)
#define CELL(m) F(qmla_cell, m)
enum { N = QMLA_CAP_N, T = QMLA_CAP_T, H = QMLA_CAP_H, D = QMLA_CAP_D,
       DC = QMLA_CAP_DC, DN = QMLA_CAP_DN, DR = QMLA_CAP_DR,
       DV = QMLA_CAP_DV, DR2 = QMLA_CAP_DR2, HDV = QMLA_CAP_HDV };
enum { REQ = QMLA_CAP_REQUIRED, PRE = QMLA_CAP_PRE,
       COSSIN = QMLA_CAP_COSSIN, EXTRA = QMLA_CAP_EXTRA };

const qmla_cap_ds qmla_cap_layer_ds[] = {
    /* name             rank  shape         int need parts field */
    {"w_uk",              3, {H, DN, DC},    0, REQ, 0, LAYER(w_uk)},
    {"w_uv",              3, {H, DV, DC},    0, REQ, 0, LAYER(w_uv)},
    {"w_o",               2, {D, HDV},       0, REQ, 0, LAYER(w_o)},
    {"kv_norm_weight",    1, {DC},           0, REQ, 0, LAYER(kv_norm)},
};
const size_t qmla_cap_n_layer_ds =
    sizeof qmla_cap_layer_ds / sizeof qmla_cap_layer_ds[0];

const qmla_cap_ds qmla_cap_cell_ds[] = {
    {"c_kv",              3, {N, T, DC},     0, REQ, 0, CELL(c_kv)},
    {"k_rope",            3, {N, T, DR},     0, REQ, 0, CELL(k_rope)},
    {"q_nope",            4, {N, H, T, DN},  0, REQ, 0, CELL(q_nope)},
    {"q_rope",            4, {N, H, T, DR},  0, REQ, 0, CELL(q_rope)},
    {"attn_out",          3, {N, T, D},      0, REQ, QMLA_CELL_OUTPUT,
     CELL(attn_out)},
    {"positions",         2, {N, T},         1, REQ, QMLA_CELL_POSITIONS,
     CELL(positions)},
    {"k_rope_pre",        3, {N, T, DR},     0, PRE, QMLA_CELL_PRE,
     CELL(k_rope_pre)},
    {"q_rope_pre",        4, {N, H, T, DR},  0, PRE, QMLA_CELL_PRE,
     CELL(q_rope_pre)},
    {"rope_cos",          3, {N, T, DR2},    0, COSSIN, QMLA_CELL_PRE,
     CELL(rope_cos)},
    {"rope_sin",          3, {N, T, DR2},    0, COSSIN, QMLA_CELL_PRE,
     CELL(rope_sin)},
    {"hidden_in",         3, {N, T, D},      0, EXTRA, 0, -1},
};
const size_t qmla_cap_n_cell_ds =
    sizeof qmla_cap_cell_ds / sizeof qmla_cap_cell_ds[0];

_Static_assert(sizeof qmla_cap_cell_ds / sizeof qmla_cap_cell_ds[0] <=
                   QMLA_CAP_MAX_DS &&
               sizeof qmla_cap_layer_ds / sizeof qmla_cap_layer_ds[0] <=
                   QMLA_CAP_MAX_DS, "QMLA_CAP_MAX_DS");

void qmla_cap_spec(const qmla_cap_ds *d, const qmla_capture_config *c,
                   hsize_t n, hsize_t t, qmla_h5_dspec *out)
{
    memset(out, 0, sizeof *out);
    out->name = d->name;
    out->rank = d->rank;
    out->integer = d->integer;
    for (int i = 0; i < d->rank; i++) {
        hsize_t x = 0;
        switch (d->dim[i]) {
        case N: x = n; out->sym[i] = "N"; break;
        case T: x = t; out->sym[i] = "T"; break;
        case H: x = (hsize_t)c->H; break;
        case D: x = (hsize_t)c->D; break;
        case DC: x = (hsize_t)c->d_c; break;
        case DN: x = (hsize_t)c->d_n; break;
        case DR: x = (hsize_t)c->d_r; break;
        case DV: x = (hsize_t)c->d_v; break;
        case DR2: x = (hsize_t)c->d_r / 2; break;
        case HDV: x = (hsize_t)c->H * (hsize_t)c->d_v; break;
        }
        out->dims[i] = x;
    }
}
