/* lib/engine/cachespec.c — the engine's cache configurations and policies
 * by name (qmla_cache_spec_parse): fp32, bf16, C<x>R<y>[-f16|-q8] with the
 * quantizer's bit widths, and none or sink<S>/local<W>; a per-layer
 * configuration from an allocation file (qmla_cache_spec_from_allocation). */
#include "qmla/allocation.h"
#include "qmla/model.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* the quantizer's bit widths (lib/quant/quant.c) */
static int cache_bits_ok(int b) { return b == 2 || b == 3 || b == 4 || b == 8; }

int qmla_cache_spec_parse(const char *config, const char *policy, qmla_cache_spec *s,
                          qmla_error *err)
{
    memset(s, 0, sizeof *s);
    s->group = 64;
    s->meta = QMLA_META_F16;
    if (!config)
        config = "bf16";
    if (strlen(config) >= sizeof s->name)
        return qmla_error_set(err, QMLA_EINVAL, "cache config: name too long");
    snprintf(s->name, sizeof s->name, "%s", config);
    if (!strcmp(config, "fp32") || !strcmp(config, "FP32")) {
        s->c_bits = s->r_bits = QMLA_CACHE_FP32;
    } else if (!strcmp(config, "bf16") || !strcmp(config, "BF16")) {
        s->c_bits = s->r_bits = QMLA_CACHE_BF16;
    } else {
        char base[32];
        snprintf(base, sizeof base, "%s", config);
        char *dash = strchr(base, '-');
        if (dash) {
            *dash = 0;
            if (!strcmp(dash + 1, "q8"))
                s->meta = QMLA_META_Q8;
            else if (strcmp(dash + 1, "f16"))
                return qmla_error_set(err, QMLA_EINVAL, "cache config '%s': metadata '%s': "
                                      "expected f16 or q8", config, dash + 1);
        }
        /* the engine dequantizes in place, so it takes every bit width of the
         * quantizer (the paged cache of qmla_kv_parse_config packs 2, 4, 8) */
        int cb = 0, rb = 0;
        char tail = 0;
        if (sscanf(base, "C%dR%d%c", &cb, &rb, &tail) != 2)
            return qmla_error_set(err, QMLA_EINVAL, "cache config '%s': expected fp32, bf16 "
                                  "or C<x>R<y>[-f16|-q8] (e.g. C4R4, C2R4-q8)", config);
        if (cb == 16 && rb == 16)
            return qmla_error_set(err, QMLA_EINVAL, dash ? "cache config '%s': bf16 takes "
                                  "no metadata suffix" : "cache config '%s': expected a "
                                  "quantized C{x}R{y} (16 bits is the unquantized bf16 "
                                  "configuration: name it bf16)", config);
        if (!cache_bits_ok(cb) || !cache_bits_ok(rb))
            return qmla_error_set(err, QMLA_EINVAL, "cache config '%s': %s bits: expected "
                                  "2, 3, 4 or 8, found %d", config,
                                  cache_bits_ok(cb) ? "RoPE" : "content",
                                  cache_bits_ok(cb) ? rb : cb);
        s->c_bits = cb;
        s->r_bits = rb;
        s->group = 64;
    }
    if (!policy || !strcmp(policy, "none")) {
        snprintf(s->policy, sizeof s->policy, "none");
        return QMLA_OK;
    }
    int S = -1, W = -1;
    char tail = 0;
    /* at most 9 digits each: S, W and S + W stay far inside int (a longer
     * number, which %d would have wrapped, does not match) */
    if (sscanf(policy, "sink%9d/local%9d%c", &S, &W, &tail) != 2 || S < 0 || W < 0)
        return qmla_error_set(err, QMLA_EINVAL, "policy '%s': expected none or "
                              "sink<S>/local<W> with S, W in 0..999999999 (e.g. "
                              "sink4/local128)", policy);
    s->sink = S;
    s->window = W;
    snprintf(s->policy, sizeof s->policy, "sink%d/local%d", S, W);
    return QMLA_OK;
}

int qmla_cache_spec_from_allocation(const char *path, const char *policy, qmla_cache_spec *s,
                                    qmla_error *err)
{
    qmla_allocation a;
    int st = qmla_allocation_read(path, &a, err);
    if (st)
        return st;
    char c0[16];
    snprintf(c0, sizeof c0, "C%dR%d", a.c_bits[0], a.r_bits[0]);
    st = qmla_cache_spec_parse(c0, policy, s, err);
    uint32_t h = 2166136261u; /* FNV-1a 32 over (layer, c, r) */
    for (size_t i = 0; i < a.n && !st; i++) {
        if (a.layer[i] < 0 || a.layer[i] >= QMLA_CACHE_LAYERS_MAX) {
            st = qmla_error_set(err, QMLA_EINVAL, "%s: layer %d: expected 0..%d", path,
                                a.layer[i], QMLA_CACHE_LAYERS_MAX - 1);
            break;
        }
        s->layer_bits[a.layer[i]][0] = (unsigned char)a.c_bits[i];
        s->layer_bits[a.layer[i]][1] = (unsigned char)a.r_bits[i];
        if (a.layer[i] + 1 > s->n_layer_bits)
            s->n_layer_bits = a.layer[i] + 1;
        const unsigned char b[3] = {(unsigned char)a.layer[i], (unsigned char)a.c_bits[i],
                                    (unsigned char)a.r_bits[i]};
        for (int k = 0; k < 3; k++)
            h = (h ^ b[k]) * 16777619u;
    }
    if (!st) {
        if (3 + 2 * (size_t)s->n_layer_bits < sizeof s->name) {
            snprintf(s->name, sizeof s->name, "mix");
            for (int l = 0; l < s->n_layer_bits; l++)
                snprintf(s->name + 3 + 2 * l, sizeof s->name - 3 - 2 * (size_t)l, "%d%d",
                         s->layer_bits[l][0] % 10, s->layer_bits[l][1] % 10);
        } else {
            snprintf(s->name, sizeof s->name, "mix-%08x", (unsigned)h);
        }
    }
    qmla_allocation_free(&a);
    return st;
}
