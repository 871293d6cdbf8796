/* test_quant.c — unit tests of the cache quantizer (include/qmla/quant.h,
 * include/qmla/quant_core.h, docs/quantizer.md, docs/math.md §2).
 *
 * Hand-computed groups, ties, constant groups, float16 metadata overflow,
 * the float16 converter, packing layouts, a sweep over odd widths / group
 * sizes / every bit width with a derived error bound, and an independent
 * double-precision reference of the definition compared bit for bit.
 *
 * Run: meson test -C build test_quant --print-errorlogs
 */
#include "check.h"
#include "qmla/quant.h"
#include "qmla/quant_core.h"

#include <fenv.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------- */

static uint32_t fbits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static int same_bits(float a, float b) { return fbits(a) == fbits(b); }

static int same_bits_n(const float *a, const float *b, size_t n, size_t *where)
{
    for (size_t i = 0; i < n; i++)
        if (!same_bits(a[i], b[i])) {
            if (where)
                *where = i;
            return 0;
        }
    return 1;
}

static uint64_t rng_s = 0x9e3779b97f4a7c15ull;
static uint64_t rng_u64(void) /* splitmix64 */
{
    uint64_t z = (rng_s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rng_unif(void) { return (double)(rng_u64() >> 11) * 0x1p-53; }
static double rng_normal(void)
{
    double u = rng_unif(), v = rng_unif();
    return sqrt(-2.0 * log(u + 0x1p-60)) * cos(6.283185307179586 * v);
}

/* ---- independent double-precision reference ------------------------------ *
 * Written from docs/math.md §2 without quant_core.h. Every float32 operation
 * (+, -, /) is done in double and rounded once to float: double has
 * 53 >= 2*24 + 2 bits, so this double rounding equals the correctly rounded
 * float32 result. The fused multiply-add is handled exactly (TwoSum). */

/* Round half to even, by floor and comparison. */
static double ref_rne(double v)
{
    double f = floor(v), d = v - f; /* exact for |v| < 2^52 */
    if (d > 0.5)
        return f + 1.0;
    if (d < 0.5)
        return f;
    return fmod(f, 2.0) == 0.0 ? f : f + 1.0;
}

/* Nearest binary16 value (ties to even), as a double; *ovf = 1 when a finite
 * v rounds beyond 65504. Quantum of the binade, floor at 2^-24. */
static double ref_f16(double v, int *ovf)
{
    if (v == 0.0 || isnan(v) || isinf(v))
        return v;
    int e;
    double a = fabs(v);
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    int E = e - 1 < -14 ? -14 : e - 1;
    double quantum = ldexp(1.0, E - 10);
    double r = ref_rne(a / quantum) * quantum;
    if (r > 65504.0) {
        *ovf = 1;
        return copysign(INFINITY, v);
    }
    return copysign(r, v);
}

/* Correctly rounded float32 of q*s + l (the fmaf of the definition). */
static float ref_fma(unsigned q, float s, float l)
{
    double p = (double)q * (double)s; /* exact: <= 8 + 24 bits */
    double sum = p + (double)l;
    double bv = sum - p;
    double t = (p - (sum - bv)) + ((double)l - bv); /* p + l = sum + t exactly */
    float f = (float)sum;
    if (t != 0.0 && (double)f != sum) {
        /* Only hazard: sum sits exactly on the midpoint of two floats. */
        float g = nextafterf(f, sum > (double)f ? INFINITY : -INFINITY);
        if (((double)f + (double)g) / 2.0 == sum) {
            float up = f < g ? g : f, dn = f < g ? f : g;
            f = t > 0.0 ? up : dn;
        }
    }
    return f;
}

/* Reference of one group. Returns 0, 1 (non-finite), 2 (lo range),
 * 3 (scale range). codes unpacked. */
static int ref_group(const float *x, size_t n, int bits, int meta, float *s_out,
                     float *l_out, uint8_t *codes, float *xhat)
{
    double L = pow(2.0, bits) - 1.0;
    float mn = x[0], mx = x[0];
    for (size_t j = 0; j < n; j++) {
        if (isnan(x[j]) || isinf(x[j]))
            return 1;
        mn = x[j] < mn ? x[j] : mn;
        mx = x[j] > mx ? x[j] : mx;
    }
    if (mn == 0.0f)
        mn = 0.0f; /* zero extrema are +0 */
    if (mx == 0.0f)
        mx = 0.0f;
    float d = (float)((double)mx - (double)mn);
    float sc = (float)((double)d / L);
    float s, l;
    if (meta == QMLA_META_F16) {
        int ovf = 0;
        l = (float)ref_f16(mn, &ovf);
        if (ovf)
            return 2;
        s = (float)ref_f16(sc, &ovf);
        if (ovf || isinf(sc))
            return 3;
    } else {
        l = mn;
        s = sc;
        if (isinf(s))
            return 3;
    }
    for (size_t j = 0; j < n; j++) {
        unsigned q = 0;
        if (s != 0.0f) {
            float diff = (float)((double)x[j] - (double)l);
            float u = (float)((double)diff / (double)s);
            double r = ref_rne(u);
            r = r < 0.0 ? 0.0 : (r > L ? L : r);
            q = (unsigned)r;
        }
        codes[j] = (uint8_t)q;
        xhat[j] = ref_fma(q, s, l);
    }
    *s_out = s;
    *l_out = l;
    return 0;
}

/* Unpack a whole token's codes group by group. */
static void unpack_token(const uint8_t *packed, size_t ng, size_t G, int bits,
                         uint8_t *codes)
{
    size_t gb = (G * (size_t)bits + 7) / 8;
    for (size_t g = 0; g < ng; g++)
        qmla_quant_unpack(packed + g * gb, G, bits, codes + g * G);
}

static qmla_quant_params P(int bits, int group, qmla_meta meta)
{
    qmla_quant_params p;
    p.bits = bits;
    p.group = group;
    p.meta = meta;
    return p;
}

/* ---- parameters and validation ------------------------------------------- */

static void test_params(void)
{
    qmla_error err;
    qmla_quant_params d = qmla_quant_defaults();
    CHECK(d.bits == 4 && d.group == 64 && d.meta == QMLA_META_F16,
          "defaults %d/%d/%d", d.bits, d.group, (int)d.meta);

    int good_bits[] = {2, 3, 4, 8}, bad_bits[] = {0, 1, 5, 6, 7, 16, -4};
    for (int i = 0; i < 4; i++) {
        qmla_quant_params p = P(good_bits[i], 64, QMLA_META_F16);
        CHECK(qmla_quant_check(&p, 576, &err) == QMLA_OK, "bits %d: %s", p.bits, err.msg);
    }
    for (int i = 0; i < 7; i++) {
        qmla_quant_params p = P(bad_bits[i], 64, QMLA_META_F16);
        qmla_error_clear(&err);
        CHECK(qmla_quant_check(&p, 576, &err) == QMLA_EINVAL && strstr(err.msg, "bits"),
              "bits %d accepted or bad message '%s'", p.bits, err.msg);
    }
    qmla_quant_params p = P(4, 0, QMLA_META_F16);
    CHECK(qmla_quant_check(&p, 64, &err) == QMLA_EINVAL, "group 0 accepted");
    p = P(4, -3, QMLA_META_F16);
    CHECK(qmla_quant_check(&p, 64, &err) == QMLA_EINVAL, "group -3 accepted");
    p = P(4, 64, (qmla_meta)7);
    CHECK(qmla_quant_check(&p, 64, &err) == QMLA_EINVAL, "meta 7 accepted");
    p = P(4, 64, QMLA_META_F16);
    CHECK(qmla_quant_check(&p, 0, &err) == QMLA_EINVAL, "width 0 accepted");
    CHECK(qmla_quant_check(NULL, 64, &err) == QMLA_EINVAL, "NULL params accepted");

    /* group not dividing the width */
    qmla_error_clear(&err);
    CHECK(qmla_quant_check(&p, 100, &err) == QMLA_EINVAL, "G 64 on width 100 accepted");
    CHECK(strstr(err.msg, "64") && strstr(err.msg, "100"),
          "message should name group and width: '%s'", err.msg);
    float x[100] = {0}, xh[100];
    CHECK(qmla_quant_qdq(&p, x, 1, 100, NULL, NULL, NULL, xh, &err) == QMLA_EINVAL,
          "qdq on non-dividing width");
    CHECK(qmla_quant_dequant(&p, (const uint8_t *)x, x, x, 1, 100, xh, &err) == QMLA_EINVAL,
          "dequant on non-dividing width");
    p = P(4, 5, QMLA_META_F32);
    CHECK(qmla_quant_check(&p, 576, &err) == QMLA_EINVAL, "G 5 on width 576 accepted");

    /* sizes */
    struct { int bits, group; size_t width, gs, ng, cb; } sz[] = {
        {4, 64, 512, 64, 8, 256},   /* DeepSeek content path */
        {4, 64, 576, 64, 9, 288},   /* 288 code bytes of math.md §9 */
        {4, 64, 64, 64, 1, 32},     /* RoPE path: 36 - 4 meta = 32 */
        {3, 64, 192, 64, 3, 72},    /* odd group count */
        {2, 64, 448, 64, 7, 112},   /* 64*7 */
        {4, 64, 5, 5, 1, 3},        /* width < G: one group of 5 */
        {3, 64, 1, 1, 1, 1},
        {3, 1, 7, 1, 7, 7},         /* G 1: one byte per 3-bit code */
        {3, 5, 35, 5, 7, 14},       /* 15 bits -> 2 bytes per group */
        {8, 17, 17 * 3, 17, 3, 51},
        {2, 7, 7, 7, 1, 2},
    };
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) {
        qmla_quant_params q = P(sz[i].bits, sz[i].group, QMLA_META_F16);
        CHECK(qmla_quant_check(&q, sz[i].width, &err) == QMLA_OK, "case %zu: %s", i, err.msg);
        CHECK(qmla_quant_group_size(&q, sz[i].width) == sz[i].gs &&
                  qmla_quant_n_groups(&q, sz[i].width) == sz[i].ng &&
                  qmla_quant_code_bytes(&q, sz[i].width) == sz[i].cb,
              "case %zu: group %zu n_groups %zu code_bytes %zu, expected %zu %zu %zu", i,
              qmla_quant_group_size(&q, sz[i].width), qmla_quant_n_groups(&q, sz[i].width),
              qmla_quant_code_bytes(&q, sz[i].width), sz[i].gs, sz[i].ng, sz[i].cb);
    }

    /* T = 0 is a no-op; NULL input with tokens is an error */
    p = qmla_quant_defaults();
    CHECK(qmla_quant_qdq(&p, NULL, 0, 64, NULL, NULL, NULL, NULL, &err) == QMLA_OK, "T = 0");
    CHECK(qmla_quant_qdq(&p, NULL, 1, 64, NULL, NULL, NULL, NULL, &err) == QMLA_EINVAL,
          "NULL x accepted");
    CHECK(qmla_quant_dequant(&p, NULL, NULL, NULL, 1, 64, xh, &err) == QMLA_EINVAL,
          "NULL codes accepted");
    /* non-finite metadata: the group minimum is checked as the scale is
     * (mutant 2578); a finite pair dequantizes to lo + q s */
    {
        uint8_t codes[64] = {0};
        const float one = 1.0f, bad[3] = {NAN, INFINITY, -INFINITY};
        for (int k = 0; k < 3; k++) {
            CHECK(qmla_quant_dequant(&p, codes, &one, &bad[k], 1, 64, xh, &err) ==
                      QMLA_ENONFINITE && strstr(err.msg, "non-finite metadata"),
                  "lo = %g accepted", (double)bad[k]);
            CHECK(qmla_quant_dequant(&p, codes, &bad[k], &one, 1, 64, xh, &err) ==
                      QMLA_ENONFINITE, "scale = %g accepted", (double)bad[k]);
        }
        const float lo = -2.5f;
        CHECK_OK(qmla_quant_dequant(&p, codes, &one, &lo, 1, 64, xh, &err), err);
        CHECK(xh[0] == -2.5f && xh[63] == -2.5f, "codes 0 with lo -2.5: %g %g",
              (double)xh[0], (double)xh[63]);
    }
}

/* ---- float16 conversion -------------------------------------------------- */

static void test_f16(void)
{
    int ovf;
    struct { float x; uint16_t h; int ovf; } kv[] = {
        {0.0f, 0x0000, 0},
        {-0.0f, 0x8000, 0},            /* negative zero keeps its sign */
        {1.0f, 0x3c00, 0},
        {-2.0f, 0xc000, 0},
        {0.5f, 0x3800, 0},
        {65504.0f, 0x7bff, 0},         /* largest finite */
        {-65504.0f, 0xfbff, 0},
        {65519.996f, 0x7bff, 0},       /* just below the halfway 65520 */
        {65520.0f, 0x7c00, 1},         /* halfway, ties to even = 2^16 = inf */
        {-65520.0f, 0xfc00, 1},
        {1e5f, 0x7c00, 1},
        {FLT_MAX, 0x7c00, 1},
        {INFINITY, 0x7c00, 0},         /* infinity is not an overflow */
        {-INFINITY, 0xfc00, 0},
        {0x1p-14f, 0x0400, 0},         /* smallest normal */
        {0x1p-24f, 0x0001, 0},         /* smallest subnormal */
        {-0x1p-24f, 0x8001, 0},
        {0x1p-25f, 0x0000, 0},         /* halfway 0 .. 2^-24: even = 0 */
        {0x1.000002p-25f, 0x0001, 0},  /* just above halfway */
        {0x1.8p-24f, 0x0002, 0},       /* 1.5 * 2^-24: halfway 1..2 -> 2 */
        {0x1.4p-23f, 0x0002, 0},       /* 2.5 * 2^-24: halfway 2..3 -> 2 */
        {0x1.ff8p-15f, 0x03ff, 0},     /* largest subnormal 1023 * 2^-24 */
        {0x1.ffcp-15f, 0x0400, 0},     /* halfway 1023..1024: even = smallest normal */
        {0x1.ffap-15f, 0x03ff, 0},     /* 1023.25 * 2^-24 */
        {1e-10f, 0x0000, 0},
        {0x1p-149f, 0x0000, 0},        /* float32 subnormal */
        {0x1.002p+0f, 0x3c00, 0},      /* 1 + 2^-11: halfway, even = 1.0 */
        {0x1.006p+0f, 0x3c02, 0},      /* 1 + 3*2^-11: halfway, even = 1 + 2^-9 */
        {0x1.002002p+0f, 0x3c01, 0},   /* just above halfway */
        {0x1.ffep+0f, 0x4000, 0},      /* rounds up across a binade */
        {0.1f, 0x2e66, 0},
        {3.14159265f, 0x4248, 0},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
        ovf = 0;
        uint16_t h = qmla_f32_to_f16(kv[i].x, &ovf);
        CHECK(h == kv[i].h && ovf == kv[i].ovf, "f32_to_f16(%a) = 0x%04x ovf %d, expected 0x%04x ovf %d",
              (double)kv[i].x, h, ovf, kv[i].h, kv[i].ovf);
    }
    CHECK(qmla_f32_to_f16(1e6f, NULL) == 0x7c00, "NULL overflow pointer");
    ovf = 0;
    uint16_t hn = qmla_f32_to_f16(NAN, &ovf);
    CHECK((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) != 0 && ovf == 0, "NaN -> 0x%04x", hn);
    CHECK(isnan(qmla_f16_to_f32(0x7e00)) && isnan(qmla_f16_to_f32(0xfc01)), "f16 NaN -> f32");

    struct { uint16_t h; float x; } back[] = {
        {0x3c00, 1.0f}, {0xc000, -2.0f}, {0x7bff, 65504.0f}, {0x0001, 0x1p-24f},
        {0x03ff, 0x1.ff8p-15f}, {0x0400, 0x1p-14f}, {0x8000, -0.0f}, {0x7c00, INFINITY},
        {0xfc00, -INFINITY}, {0x3555, 0x1.554p-2f},
    };
    for (size_t i = 0; i < sizeof back / sizeof back[0]; i++)
        CHECK(same_bits(qmla_f16_to_f32(back[i].h), back[i].x), "f16_to_f32(0x%04x) = %a",
              back[i].h, (double)qmla_f16_to_f32(back[i].h));

    /* Every binary16 value: exact round trip, and agreement with the
     * reference decoding m * 2^(e-25); every midpoint between consecutive
     * finite values rounds to the even neighbour, and its float32 neighbours
     * round to the nearer one. */
    int bad_rt = 0, bad_mid = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = qmla_f16_to_f32((uint16_t)h);
        uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
        if (e == 0x1f)
            continue;
        double want = (e ? ldexp((double)(m | 0x400), (int)e - 25) : ldexp((double)m, -24));
        if (h & 0x8000)
            want = -want;
        ovf = 0;
        if ((double)f != want || qmla_f32_to_f16(f, &ovf) != h || ovf)
            bad_rt++;
        if ((h & 0x7fff) < 0x7bff) {
            float f1 = qmla_f16_to_f32((uint16_t)(h + 1));
            float mid = (float)(((double)f + (double)f1) / 2.0); /* exact: 12 bits */
            uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
            if (qmla_f32_to_f16(mid, NULL) != even ||
                qmla_f32_to_f16(nextafterf(mid, f), NULL) != h ||
                qmla_f32_to_f16(nextafterf(mid, f1), NULL) != (uint16_t)(h + 1))
                bad_mid++;
        }
    }
    CHECK(bad_rt == 0, "%d binary16 values fail the round trip", bad_rt);
    CHECK(bad_mid == 0, "%d binary16 midpoints round wrongly", bad_mid);

    /* Random float32 bit patterns (all magnitudes) against the reference. */
    int bad_rand = 0;
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = (uint32_t)rng_u64();
        if (i & 1) /* half the draws in the float16 range */
            u = (u & 0x807fffffu) | ((uint32_t)(100 + (u >> 24) % 45) << 23);
        float x;
        memcpy(&x, &u, sizeof x);
        if (isnan(x))
            continue;
        int o1 = 0, o2 = 0;
        float got = qmla_f16_to_f32(qmla_f32_to_f16(x, &o1));
        double want = ref_f16(x, &o2);
        if (!(same_bits(got, (float)want) && o1 == (o2 && !isinf(x))))
            bad_rand++;
    }
    CHECK(bad_rand == 0, "%d random floats differ from the reference f16 rounding", bad_rand);
}

/* ---- hand-computed groups ------------------------------------------------ */

static void check_group(const char *name, int bits, qmla_meta meta, const float *x, size_t n,
                        float want_scale, float want_lo, const uint8_t *want_codes,
                        const float *want_xhat, const uint8_t *want_packed)
{
    qmla_error err;
    qmla_quant_params p = P(bits, 64, meta);
    float s = -1, l = -1, xh[64];
    uint8_t packed[64], codes[64];
    int st = qmla_quant_qdq(&p, x, 1, n, packed, &s, &l, xh, &err);
    CHECK_OK(st, err);
    CHECK(same_bits(s, want_scale) && same_bits(l, want_lo), "%s: scale %a lo %a, expected %a %a",
          name, (double)s, (double)l, (double)want_scale, (double)want_lo);
    qmla_quant_unpack(packed, n, bits, codes);
    CHECK(memcmp(codes, want_codes, n) == 0, "%s: codes differ", name);
    size_t w = 0;
    CHECK(same_bits_n(xh, want_xhat, n, &w), "%s: xhat[%zu] = %.9g, expected %.9g", name, w,
          (double)xh[w], (double)want_xhat[w]);
    size_t nb = (n * (size_t)bits + 7) / 8;
    CHECK(memcmp(packed, want_packed, nb) == 0, "%s: packed bytes %02x %02x .., expected %02x %02x ..",
          name, packed[0], packed[1], want_packed[0], want_packed[1]);
}

static void test_hand(void)
{
    /* INT4, one group of 8:
     *   x = {-1.5, 6, 0, 1.2, -0.7, 3.3, 2.74, 5.76}
     *   lo = -1.5, hi = 6, scale = 7.5/15 = 0.5 (exact in f32 and f16)
     *   u = (x + 1.5)/0.5 = 2x + 3 = {0, 15, 3, 5.4, 1.6, 9.6, 8.48, 14.52}
     *   q = {0, 15, 3, 5, 2, 10, 8, 15}
     *   x^ = q*0.5 - 1.5 = {-1.5, 6, 0, 1, -0.5, 3.5, 2.5, 6}   (exact)
     *   max |x - x^| = 0.24 (at 5.76) <= scale/2 = 0.25
     *   packed, low nibble first: (0,15)->0xF0 (3,5)->0x53 (2,10)->0xA2
     *   (8,15)->0xF8 */
    const float x4[] = {-1.5f, 6.0f, 0.0f, 1.2f, -0.7f, 3.3f, 2.74f, 5.76f};
    const uint8_t q4[] = {0, 15, 3, 5, 2, 10, 8, 15};
    const float h4[] = {-1.5f, 6.0f, 0.0f, 1.0f, -0.5f, 3.5f, 2.5f, 6.0f};
    const uint8_t p4[] = {0xF0, 0x53, 0xA2, 0xF8};
    check_group("int4 f16", 4, QMLA_META_F16, x4, 8, 0.5f, -1.5f, q4, h4, p4);
    check_group("int4 f32", 4, QMLA_META_F32, x4, 8, 0.5f, -1.5f, q4, h4, p4);

    /* INT2, one group of 8:
     *   x = {0.25, -2, 1, -0.9, 0.3, -1.4, 0.1, -0.5}
     *   lo = -2, hi = 1, L = 3, scale = 3/3 = 1
     *   u = x + 2 = {2.25, 0, 3, 1.1, 2.3, 0.6, 2.1, 1.5}
     *   q = {2, 0, 3, 1, 2, 1, 2, 2}     (1.5 is a tie: even -> 2)
     *   x^ = q - 2 = {0, -2, 1, -1, 0, -1, 0, 0}
     *   packed, 4 per byte, element j at bits 2j:
     *   2 | 0<<2 | 3<<4 | 1<<6 = 0x72;  2 | 1<<2 | 2<<4 | 2<<6 = 0xA6 */
    const float x2[] = {0.25f, -2.0f, 1.0f, -0.9f, 0.3f, -1.4f, 0.1f, -0.5f};
    const uint8_t q2[] = {2, 0, 3, 1, 2, 1, 2, 2};
    const float h2[] = {0.0f, -2.0f, 1.0f, -1.0f, 0.0f, -1.0f, 0.0f, 0.0f};
    const uint8_t p2[] = {0x72, 0xA6};
    check_group("int2 f16", 2, QMLA_META_F16, x2, 8, 1.0f, -2.0f, q2, h2, p2);
    check_group("int2 f32", 2, QMLA_META_F32, x2, 8, 1.0f, -2.0f, q2, h2, p2);

    /* INT3 where the metadata precision changes a code:
     *   x = {0.1f, 0.8f, 0.35f, 0.5f}, L = 7
     *   f32: lo = 0.1f = 0x1.99999ap-4; 0.8f - 0.1f = 0.7f exactly after
     *        rounding; scale = 0.7f/7 rounds to 0.1f.
     *        0.35f - 0.1f = 0.25 - 2^-27 rounds (tie, even) to 0.25, and
     *        0.25/0.1f = 2.49999996 rounds to 2.5 in float32: a tie -> q = 2.
     *        q = {0, 7, 2, 4}; x^ = (q+1)*0.1f rounded once:
     *        {0.1f, 0.8f, 0.3f, 0.5f}.
     *   f16: lo = scale = f16(0.1) = 0x1.998p-4 = 0.0999755859375, so
     *        u = {0.00024, 7.0020, 2.50085, 4.0012}, q = {0, 7, 3, 4};
     *        x^ = (q+1)*0.0999755859375 exactly:
     *        {0.0999755859375, 0.7998046875, 0.39990234375, 0.4998779296875}.
     *   packed 3-bit {0,7,2,4}: 0 | 7<<3 | 2<<6 | 4<<9 = 0x8B8 -> B8 08
     *   packed 3-bit {0,7,3,4}: 0 | 7<<3 | 3<<6 | 4<<9 = 0x8F8 -> F8 08
     *   (element 2 straddles bytes 0 and 1) */
    const float x3[] = {0.1f, 0.8f, 0.35f, 0.5f};
    const uint8_t q3a[] = {0, 7, 2, 4}, q3b[] = {0, 7, 3, 4};
    const float h3a[] = {0.1f, 0.8f, 0.3f, 0.5f};
    const float h3b[] = {0.0999755859375f, 0.7998046875f, 0.39990234375f, 0.4998779296875f};
    const uint8_t p3a[] = {0xB8, 0x08}, p3b[] = {0xF8, 0x08};
    check_group("int3 f32", 3, QMLA_META_F32, x3, 4, 0.1f, 0.1f, q3a, h3a, p3a);
    check_group("int3 f16", 3, QMLA_META_F16, x3, 4, 0x1.998p-4f, 0x1.998p-4f, q3b, h3b, p3b);
}

/* ---- ties ---------------------------------------------------------------- */

static void test_ties(void)
{
    /* Groups whose (x - lo)/scale is exactly k + 0.5 in float32:
     *   (a) lo = 0, scale = 1: x = k + 0.5;
     *   (b) lo = -1, scale = 0.75 (hi = -1 + 0.75 L): x = -1 + 0.75 (k + 0.5),
     *       so x - lo = 0.75 (k + 0.5) exactly and the quotient is exact;
     *   (c) lo = 3, scale = 2^-6.
     * All values are exact in float16 too, so both metadata precisions give
     * the same result: q = k for even k, k + 1 for odd k. */
    struct { float lo, scale; } base[] = {{0.0f, 1.0f}, {-1.0f, 0.75f}, {3.0f, 0x1p-6f}};
    int bitsv[] = {2, 3, 4, 8};
    for (int bi = 0; bi < 4; bi++) {
        int bits = bitsv[bi];
        unsigned L = (1u << bits) - 1;
        for (int b = 0; b < 3; b++)
            for (int m = 0; m < 2; m++) {
                qmla_quant_params p = P(bits, 512, m ? QMLA_META_F32 : QMLA_META_F16);
                float lo = base[b].lo, sc = base[b].scale;
                float x[512];
                size_t n = 0;
                x[n++] = lo;
                x[n++] = lo + sc * (float)L;
                for (unsigned k = 0; k < L; k++)
                    x[n++] = lo + sc * ((float)k + 0.5f);
                int exact = 1;
                for (unsigned k = 0; k < L; k++)
                    exact &= ((x[2 + k] - lo) / sc == (float)k + 0.5f);
                CHECK(exact, "tie construction not exact (bits %d base %d)", bits, b);
                float s, l, xh[512];
                uint8_t packed[512], codes[512];
                qmla_error err;
                int st = qmla_quant_qdq(&p, x, 1, n, packed, &s, &l, xh, &err);
                CHECK_OK(st, err);
                CHECK(s == sc && l == lo, "bits %d base %d: scale %g lo %g", bits, b, (double)s,
                      (double)l);
                qmla_quant_unpack(packed, n, bits, codes);
                int ok = codes[0] == 0 && codes[1] == L;
                for (unsigned k = 0; k < L; k++)
                    ok &= codes[2 + k] == ((k & 1) ? k + 1 : k);
                CHECK(ok, "bits %d base %d meta %d: ties not to even", bits, b, m);
            }
    }
    /* round_half_even itself */
    const float in[] = {0.5f, 1.5f, 2.5f, 3.5f, -0.5f, 254.5f, 2.4999998f, 2.5000002f};
    const float out[] = {0.0f, 2.0f, 2.0f, 4.0f, -0.0f, 254.0f, 2.0f, 3.0f};
    for (int i = 0; i < 8; i++)
        CHECK(qmla_core_round_half_even(in[i]) == out[i], "rne(%.9g) = %g", (double)in[i],
              (double)qmla_core_round_half_even(in[i]));
}

/* ---- constant groups and vanishing scales -------------------------------- */

static void test_constant(void)
{
    qmla_error err;
    const float consts[] = {3.7f, -2.25f, 0.0f, 1e-30f, -65504.0f};
    int bitsv[] = {2, 3, 4, 8};
    feclearexcept(FE_ALL_EXCEPT);
    for (int bi = 0; bi < 4; bi++)
        for (int m = 0; m < 2; m++)
            for (int c = 0; c < 5; c++) {
                qmla_quant_params p = P(bitsv[bi], 16, m ? QMLA_META_F32 : QMLA_META_F16);
                float x[48], xh[48], s[3], l[3];
                uint8_t packed[48], codes[48];
                for (int j = 0; j < 48; j++)
                    x[j] = consts[c];
                int st = qmla_quant_qdq(&p, x, 1, 48, packed, s, l, xh, &err);
                CHECK_OK(st, err);
                unpack_token(packed, 3, 16, bitsv[bi], codes);
                int ok = 1;
                for (int g = 0; g < 3; g++) {
                    float want_l = m ? consts[c] : qmla_f16_to_f32(qmla_f32_to_f16(consts[c], NULL));
                    ok &= s[g] == 0.0f && same_bits(l[g], want_l);
                }
                for (int j = 0; j < 48; j++)
                    ok &= codes[j] == 0 && same_bits(xh[j], l[0]);
                if (m) /* f32 metadata reproduces a constant group exactly */
                    for (int j = 0; j < 48; j++)
                        ok &= same_bits(xh[j], x[j]);
                CHECK(ok, "constant %g bits %d meta %d", (double)consts[c], bitsv[bi], m);
            }
    int fe = fetestexcept(FE_DIVBYZERO | FE_INVALID);
    CHECK(fe == 0, "constant groups raised divide-by-zero or invalid (0x%x)", fe);

    /* Mixed -0 / +0 group: lo is stored as +0 whatever the order, x^ is +0. */
    {
        float a[4] = {-0.0f, 0.0f, -0.0f, 0.0f}, b[4] = {0.0f, -0.0f, 0.0f, -0.0f};
        float xa[4], xb[4], sa, sb, la, lb;
        qmla_quant_params p = P(4, 4, QMLA_META_F32);
        CHECK_OK(qmla_quant_qdq(&p, a, 1, 4, NULL, &sa, &la, xa, &err), err);
        CHECK_OK(qmla_quant_qdq(&p, b, 1, 4, NULL, &sb, &lb, xb, &err), err);
        CHECK(fbits(la) == 0 && fbits(lb) == 0 && fbits(sa) == 0 && fbits(sb) == 0,
              "signed zeros: lo %a %a", (double)la, (double)lb);
        CHECK(fbits(xa[0]) == 0 && same_bits_n(xa, xb, 4, NULL), "signed zeros: x^ not +0");
        float c[3] = {-0.0f, 3.0f, 0.0f}, xc[3], sc, lc;
        p = P(2, 3, QMLA_META_F16);
        CHECK_OK(qmla_quant_qdq(&p, c, 1, 3, NULL, &sc, &lc, xc, &err), err);
        CHECK(fbits(lc) == 0 && sc == 1.0f && fbits(xc[0]) == 0 && fbits(xc[2]) == 0 &&
                  xc[1] == 3.0f,
              "-0 minimum: lo %a", (double)lc);
    }

    /* A range so small that the float16 scale underflows to 0: every code 0,
     * x^ = lo, no division. hi - lo = 2^-23, scale = 2^-23/15 < 2^-25. */
    {
        float x[4] = {1.0f, 0x1.000002p+0f, 1.0f, 0x1.000002p+0f}, xh[4], s, l;
        uint8_t packed[2];
        qmla_quant_params p = P(4, 4, QMLA_META_F16);
        feclearexcept(FE_ALL_EXCEPT);
        CHECK_OK(qmla_quant_qdq(&p, x, 1, 4, packed, &s, &l, xh, &err), err);
        CHECK(fetestexcept(FE_DIVBYZERO | FE_INVALID) == 0, "division by a zero scale");
        CHECK(s == 0.0f && l == 1.0f && packed[0] == 0 && packed[1] == 0, "f16 scale underflow");
        CHECK(xh[0] == 1.0f && xh[1] == 1.0f, "f16 scale underflow: x^ = lo");
        /* f32 metadata keeps the tiny scale and reproduces both values */
        p.meta = QMLA_META_F32;
        CHECK_OK(qmla_quant_qdq(&p, x, 1, 4, packed, &s, &l, xh, &err), err);
        CHECK(s > 0.0f && same_bits_n(xh, x, 4, NULL), "f32 tiny scale");
    }
}

/* ---- metadata overflow and non-finite input ------------------------------ */

static void test_errors(void)
{
    qmla_error err;
    enum { W = 192, T = 2 };
    float x[T * W], xh[T * W], s[T * 3], l[T * 3];
    uint8_t packed[T * 3 * 32];
    for (int i = 0; i < T * W; i++)
        x[i] = (float)rng_normal();
    /* token 1, group 2: values around 1e5 -> lo = 1e5 does not fit f16 */
    for (int j = 0; j < 64; j++)
        x[W + 128 + j] = 1e5f + 10.0f * (float)j;
    qmla_quant_params p = P(4, 64, QMLA_META_F16);
    qmla_error_clear(&err);
    int st = qmla_quant_qdq(&p, x, T, W, packed, s, l, xh, &err);
    CHECK(st == QMLA_ERANGE, "lo 1e5 with f16 metadata: status %d", st);
    CHECK(strstr(err.msg, "token 1") && strstr(err.msg, "group 2") && strstr(err.msg, "100000") &&
              strstr(err.msg, "lo"),
          "message should name token 1, group 2, lo and the value: '%s'", err.msg);
    /* the same data with f32 metadata succeeds and keeps the error bound */
    p.meta = QMLA_META_F32;
    CHECK_OK(qmla_quant_qdq(&p, x, T, W, packed, s, l, xh, &err), err);
    {
        double worst = 0;
        for (int j = 0; j < 64; j++) {
            double e = fabs((double)x[W + 128 + j] - xh[W + 128 + j]);
            worst = e > worst ? e : worst;
        }
        double slack = 0x1p-21 * (2 * 1.01e5 + 15.0 * s[5]);
        CHECK(worst <= s[5] / 2.0 + slack && l[5] == 1e5f, "f32 large group: err %g scale %g",
              worst, (double)s[5]);
    }

    /* scale overflow: token 0, group 1, lo = 0, hi = 3e5, INT2 -> scale 1e5 */
    for (int j = 0; j < 64; j++)
        x[64 + j] = (float)j * (3e5f / 63.0f);
    for (int j = 0; j < 64; j++)
        x[W + 128 + j] = (float)rng_normal();
    p = P(2, 64, QMLA_META_F16);
    st = qmla_quant_qdq(&p, x, T, W, packed, s, l, xh, &err);
    CHECK(st == QMLA_ERANGE && strstr(err.msg, "token 0") && strstr(err.msg, "group 1") &&
              strstr(err.msg, "scale"),
          "scale overflow: status %d '%s'", st, err.msg);
    /* INT4: scale 2e4 fits; values above 65504 are fine when lo and scale fit */
    p.bits = 4;
    CHECK_OK(qmla_quant_qdq(&p, x, T, W, packed, s, l, xh, &err), err);
    CHECK(s[1] > 19000 && s[1] < 21000 && xh[64 + 63] > 2.9e5f, "INT4 large range: scale %g",
          (double)s[1]);
    p = P(2, 64, QMLA_META_F32);
    CHECK_OK(qmla_quant_qdq(&p, x, T, W, packed, s, l, xh, &err), err);

    /* f32 metadata: hi - lo overflows float32 -> scale is infinite */
    {
        float y[2] = {-3e38f, 3e38f}, yh[2];
        p = P(4, 2, QMLA_META_F32);
        st = qmla_quant_qdq(&p, y, 1, 2, NULL, NULL, NULL, yh, &err);
        CHECK(st == QMLA_ERANGE && strstr(err.msg, "scale"), "f32 scale overflow: %d '%s'", st,
              err.msg);
    }
    /* the float16 boundary: lo = -65519 rounds to -65504 (fits), -65520 does not */
    {
        float y[2] = {-65519.0f, 0.0f}, yh[2], ys, yl;
        p = P(8, 2, QMLA_META_F16);
        CHECK_OK(qmla_quant_qdq(&p, y, 1, 2, NULL, &ys, &yl, yh, &err), err);
        CHECK(yl == -65504.0f, "lo -65519 stored as %g", (double)yl);
        y[0] = -65520.0f;
        CHECK(qmla_quant_qdq(&p, y, 1, 2, NULL, &ys, &yl, yh, &err) == QMLA_ERANGE,
              "lo -65520 accepted");
    }

    /* non-finite input names token and group */
    for (int i = 0; i < T * W; i++)
        x[i] = (float)rng_normal();
    const float nf[] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        for (int m = 0; m < 2; m++) {
            p = P(4, 64, m ? QMLA_META_F32 : QMLA_META_F16);
            float save = x[W + 70];
            x[W + 70] = nf[k]; /* token 1, group 1, channel 70 */
            qmla_error_clear(&err);
            st = qmla_quant_qdq(&p, x, T, W, packed, s, l, xh, &err);
            CHECK(st == QMLA_ENONFINITE && strstr(err.msg, "token 1") && strstr(err.msg, "group 1") &&
                      strstr(err.msg, "channel 70"),
                  "non-finite %g: status %d '%s'", (double)nf[k], st, err.msg);
            x[W + 70] = save;
        }
    }
    /* non-finite metadata in dequant */
    {
        p = P(4, 64, QMLA_META_F16);
        float ss[3] = {1, NAN, 1}, ll[3] = {0, 0, 0};
        memset(packed, 0, sizeof packed);
        st = qmla_quant_dequant(&p, packed, ss, ll, 1, W, xh, &err);
        CHECK(st == QMLA_ENONFINITE && strstr(err.msg, "group 1"), "dequant NaN scale: %d '%s'",
              st, err.msg);
    }
}

/* ---- packing ------------------------------------------------------------- */

static void test_pack(void)
{
    /* hand layouts */
    {
        const uint8_t c4[] = {0x1, 0x2, 0xF, 0x0, 0xA, 0x5, 0x3};
        const uint8_t w4[] = {0x21, 0x0F, 0x5A, 0x03}; /* low nibble first; pad 0 */
        uint8_t out[8];
        memset(out, 0xEE, sizeof out);
        qmla_quant_pack(c4, 7, 4, out);
        CHECK(memcmp(out, w4, 4) == 0 && out[4] == 0xEE, "INT4 layout %02x %02x %02x %02x %02x",
              out[0], out[1], out[2], out[3], out[4]);

        const uint8_t c2[] = {1, 2, 3, 0, 3, 3, 0, 1, 2};
        /* byte0 = 1 | 2<<2 | 3<<4 | 0<<6 = 0x39; byte1 = 3 | 3<<2 | 0<<4 | 1<<6 = 0x4F;
         * byte2 = 2 */
        const uint8_t w2[] = {0x39, 0x4F, 0x02};
        memset(out, 0xEE, sizeof out);
        qmla_quant_pack(c2, 9, 2, out);
        CHECK(memcmp(out, w2, 3) == 0 && out[3] == 0xEE, "INT2 layout %02x %02x %02x", out[0],
              out[1], out[2]);

        /* INT3: sum of c_j << 3j = 0x88E1DD, little-endian bytes DD E1 88;
         * elements 2 (bits 6..8) and 5 (bits 15..17) straddle bytes. */
        const uint8_t c3[] = {5, 3, 7, 0, 6, 1, 2, 4};
        const uint8_t w3[] = {0xDD, 0xE1, 0x88};
        memset(out, 0xEE, sizeof out);
        qmla_quant_pack(c3, 8, 3, out);
        CHECK(memcmp(out, w3, 3) == 0 && out[3] == 0xEE, "INT3 layout %02x %02x %02x", out[0],
              out[1], out[2]);

        const uint8_t c8[] = {0, 255, 17};
        memset(out, 0xEE, sizeof out);
        qmla_quant_pack(c8, 3, 8, out);
        CHECK(out[0] == 0 && out[1] == 255 && out[2] == 17 && out[3] == 0xEE, "INT8 layout");
    }
    /* round trips for every width and length, canary after the last byte */
    int bitsv[] = {2, 3, 4, 8};
    int bad = 0;
    for (int bi = 0; bi < 4; bi++)
        for (size_t n = 1; n <= 130; n++) {
            int bits = bitsv[bi];
            uint8_t c[130], back[130], out[140];
            for (size_t j = 0; j < n; j++)
                c[j] = (uint8_t)(rng_u64() & ((1u << bits) - 1));
            size_t nb = (n * (size_t)bits + 7) / 8;
            memset(out, 0xA5, sizeof out);
            qmla_quant_pack(c, n, bits, out);
            qmla_quant_unpack(out, n, bits, back);
            /* independent bit-by-bit check of the layout */
            int layout = 1;
            for (size_t j = 0; j < n; j++)
                for (int k = 0; k < bits; k++) {
                    size_t bit = j * (size_t)bits + (size_t)k;
                    layout &= ((out[bit / 8] >> (bit % 8)) & 1) == ((c[j] >> k) & 1);
                }
            int pad = 1;
            for (size_t bit = n * (size_t)bits; bit < nb * 8; bit++)
                pad &= ((out[bit / 8] >> (bit % 8)) & 1) == 0;
            if (memcmp(c, back, n) || !layout || !pad || out[nb] != 0xA5)
                bad++;
        }
    CHECK(bad == 0, "%d pack/unpack round trips failed", bad);
}

/* ---- sweep: odd sizes, every bit width, reference, bound ----------------- */

/* Token t's data: distributions a KV cache and its corner cases produce. */
static void fill_token(float *x, size_t w, int kind)
{
    for (size_t j = 0; j < w; j++) {
        double v;
        switch (kind) {
        case 0: v = rng_normal(); break;
        case 1: v = 3.0 + 0.5 * rng_normal(); break;
        case 2: v = -100.0 + 20.0 * rng_normal(); break;
        case 3: v = 1e-4 * (2.0 * rng_unif() - 1.0); break;   /* f16-subnormal scales */
        case 4: v = 1e-7 * rng_normal(); break;               /* f16 scale -> 0 */
        case 5: v = rng_normal() * (j % 13 == 5 ? 50.0 : 1.0); break; /* outlier channels */
        case 6: v = (double)((int)(rng_u64() % 7) - 3); if (v == 0 && (rng_u64() & 1)) v = -0.0; break;
        case 7: v = 1.0 + 1e-6 * rng_normal(); break;         /* tiny range at offset */
        default: v = 1e4 * rng_normal(); break;
        }
        x[j] = (float)v;
    }
}

enum { NKIND = 9 };

static void test_sweep(void)
{
    const size_t widths[] = {1, 2, 3, 5, 7, 17, 64, 192, 448, 576, 1023};
    const int groups[] = {1, 2, 3, 5, 7, 17, 64, 576};
    const int bitsv[] = {2, 3, 4, 8};
    const size_t nw = sizeof widths / sizeof widths[0], ngr = sizeof groups / sizeof groups[0];
    const size_t T = NKIND, WMAX = 1023;

    float *x = malloc(T * WMAX * sizeof *x), *xh = malloc(T * WMAX * sizeof *xh);
    float *xh2 = malloc(T * WMAX * sizeof *xh2), *xr = malloc(T * WMAX * sizeof *xr);
    float *y = malloc(T * WMAX * sizeof *y);
    float *s = malloc(T * WMAX * sizeof *s), *l = malloc(T * WMAX * sizeof *l);
    float *s2 = malloc(T * WMAX * sizeof *s2), *l2 = malloc(T * WMAX * sizeof *l2);
    uint8_t *packed = malloc(T * WMAX), *packed2 = malloc(T * WMAX);
    uint8_t *codes = malloc(T * WMAX), *codes2 = malloc(T * WMAX), *cref = malloc(T * WMAX);
    if (!x || !xh || !xh2 || !xr || !y || !s || !l || !s2 || !l2 || !packed || !packed2 ||
        !codes || !codes2 || !cref) {
        CHECK(0, "out of memory");
        return;
    }

    int configs = 0, rejected = 0;
    long idem_groups = 0;
    /* f16 metadata at G = 64, per data kind: elements with |x - x^| above
     * s/2 + slack, and the worst such excess in units of s (s > 0). */
    long over_half[NKIND] = {0}, elems[NKIND] = {0};
    double worst_excess[NKIND] = {0};
    for (size_t wi = 0; wi < nw; wi++)
        for (size_t gi = 0; gi < ngr; gi++) {
            const size_t W = widths[wi];
            const int Gp = groups[gi];
            const int valid = W < (size_t)Gp || W % (size_t)Gp == 0;
            for (int bi = 0; bi < 4; bi++)
                for (int m = 0; m < 2; m++) {
                    const int bits = bitsv[bi];
                    const qmla_meta meta = m ? QMLA_META_F32 : QMLA_META_F16;
                    qmla_quant_params p = P(bits, Gp, meta);
                    qmla_error err;
                    if (!valid) {
                        CHECK(qmla_quant_check(&p, W, &err) == QMLA_EINVAL &&
                                  qmla_quant_qdq(&p, x, 1, W, NULL, NULL, NULL, xh, &err) ==
                                      QMLA_EINVAL,
                              "width %zu G %d should be rejected", W, Gp);
                        rejected++;
                        continue;
                    }
                    configs++;
                    const size_t G = qmla_quant_group_size(&p, W), ng = qmla_quant_n_groups(&p, W);
                    const size_t cb = qmla_quant_code_bytes(&p, W);
                    const unsigned L = (1u << bits) - 1;
                    for (size_t t = 0; t < T; t++)
                        fill_token(x + t * W, W, (int)t);

                    int st = qmla_quant_qdq(&p, x, T, W, packed, s, l, xh, &err);
                    CHECK(st == QMLA_OK, "W %zu G %d b %d m %d: %s", W, Gp, bits, m, err.msg);
                    if (st)
                        continue;

                    /* (1) reference, bit for bit */
                    int ref_ok = 1;
                    for (size_t t = 0; t < T && ref_ok; t++)
                        for (size_t g = 0; g < ng && ref_ok; g++) {
                            float rs, rl;
                            size_t o = t * W + g * G;
                            int rst = ref_group(x + o, G, bits, meta, &rs, &rl, cref + o, xr + o);
                            ref_ok = rst == 0 && same_bits(rs, s[t * ng + g]) &&
                                     same_bits(rl, l[t * ng + g]);
                        }
                    for (size_t t = 0; t < T; t++)
                        unpack_token(packed + t * cb, ng, G, bits, codes + t * W);
                    size_t wx = 0;
                    ref_ok = ref_ok && memcmp(codes, cref, T * W) == 0 &&
                             same_bits_n(xh, xr, T * W, &wx);
                    CHECK(ref_ok, "W %zu G %d b %d m %d: differs from the reference (x^[%zu] %a vs %a)",
                          W, Gp, bits, m, wx, (double)xh[wx], (double)xr[wx]);

                    /* (2) error bound. With s, l the stored metadata and
                     * lo, hi the true extrema:
                     *   |x - x^| <= max(s/2, l - lo, hi - l - L s) + slack
                     * (x in [l, l + L s]: nearest grid point within s/2;
                     *  x < l: q = 0, error l - x <= l - lo;
                     *  x > l + L s: q = L, error <= hi - l - L s).
                     * slack = 2^-21 (|x| + |l| + L s) + 1e-44 covers the float32
                     * roundings of x - l, the division and the fma.
                     * f32 metadata: l = lo and L s = hi - lo up to ~2^-23 (hi - lo),
                     * so the bound is s/2 + slack. */
                    int bound_ok = 1;
                    size_t bw = 0;
                    double bgot = 0, bmax = 0;
                    for (size_t t = 0; t < T; t++)
                        for (size_t g = 0; g < ng; g++) {
                            size_t o = t * W + g * G;
                            double sg = s[t * ng + g], lg = l[t * ng + g];
                            double lo = x[o], hi = x[o];
                            for (size_t j = 0; j < G; j++) {
                                lo = x[o + j] < lo ? x[o + j] : lo;
                                hi = x[o + j] > hi ? x[o + j] : hi;
                            }
                            for (size_t j = 0; j < G; j++) {
                                double xv = x[o + j], e = fabs(xv - xh[o + j]);
                                double slack = 0x1p-21 * (fabs(xv) + fabs(lg) + L * sg) + 1e-44;
                                double lim = sg / 2;
                                if (meta == QMLA_META_F16) {
                                    lim = fmax(lim, fmax(lg - lo, hi - lg - L * sg));
                                    if (G == 64) {
                                        elems[t]++;
                                        if (e > sg / 2 + slack) {
                                            over_half[t]++;
                                            if (sg > 0 && (e - sg / 2) / sg > worst_excess[t])
                                                worst_excess[t] = (e - sg / 2) / sg;
                                        }
                                    }
                                }
                                if (!(e <= lim + slack) && bound_ok) {
                                    bound_ok = 0;
                                    bw = o + j;
                                    bgot = e;
                                    bmax = lim + slack;
                                }
                            }
                        }
                    CHECK(bound_ok, "W %zu G %d b %d m %d: |x - x^| = %g > bound %g at %zu", W, Gp,
                          bits, m, bgot, bmax, bw);

                    /* (3) dequant(codes) == x^ bit for bit */
                    CHECK_OK(qmla_quant_dequant(&p, packed, s, l, T, W, xh2, &err), err);
                    CHECK(same_bits_n(xh2, xh, T * W, &wx), "W %zu G %d b %d m %d: dequant differs at %zu",
                          W, Gp, bits, m, wx);

                    /* (4) NULL outputs, and x^ written in place over x */
                    memcpy(y, x, T * W * sizeof *y);
                    st = qmla_quant_qdq(&p, y, T, W, NULL, NULL, NULL, y, &err);
                    int alias_ok = st == QMLA_OK && same_bits_n(y, xh, T * W, NULL);
                    st = qmla_quant_qdq(&p, x, T, W, packed2, NULL, NULL, NULL, &err);
                    alias_ok = alias_ok && st == QMLA_OK && memcmp(packed2, packed, T * cb) == 0;
                    st = qmla_quant_qdq(&p, x, T, W, NULL, s2, l2, NULL, &err);
                    alias_ok = alias_ok && st == QMLA_OK && same_bits_n(s2, s, T * ng, NULL) &&
                               same_bits_n(l2, l, T * ng, NULL);
                    CHECK(alias_ok, "W %zu G %d b %d m %d: NULL outputs / in-place differ", W, Gp,
                          bits, m);

                    /* (5) the core group entry point agrees */
                    int core_ok = 1;
                    for (size_t t = 0; t < T; t++)
                        for (size_t g = 0; g < ng; g++) {
                            size_t o = t * W + g * G;
                            float cs, cl, bad;
                            int cst = qmla_core_group_quant(x + o, G, bits, (int)meta, &cs, &cl,
                                                            codes2 + o, xh2 + o, &bad);
                            core_ok &= cst == QMLA_CORE_OK && same_bits(cs, s[t * ng + g]) &&
                                       same_bits(cl, l[t * ng + g]);
                        }
                    core_ok = core_ok && memcmp(codes2, codes, T * W) == 0 &&
                              same_bits_n(xh2, xh, T * W, NULL);
                    CHECK(core_ok, "W %zu G %d b %d m %d: qmla_core_group_quant differs", W, Gp,
                          bits, m);

                    /* (6) f32 metadata, second pass QDQ(QDQ(x)): lo is kept
                     * exactly (the q = 0 element dequantises to l exactly and
                     * every x^ >= l); the codes are kept whenever s is normal
                     * (>= 2^-100) and max|x^| <= 2^20 s (each x^ is within
                     * 2^-24 |x^| of the grid, so the re-divided value is within
                     * ~2^-23 |x^|/s + 2^-14 of the old code, < 1/2). The scale
                     * and x^ themselves are not always kept: test_idempotence. */
                    if (meta == QMLA_META_F32) {
                        CHECK_OK(qmla_quant_qdq(&p, xh, T, W, NULL, s2, l2, xh2, &err), err);
                        CHECK_OK(qmla_quant_qdq(&p, xh, T, W, packed2, NULL, NULL, NULL, &err), err);
                        for (size_t t = 0; t < T; t++)
                            unpack_token(packed2 + t * cb, ng, G, bits, codes2 + t * W);
                        int lo_ok = same_bits_n(l2, l, T * ng, NULL), code_ok = 1;
                        for (size_t t = 0; t < T; t++)
                            for (size_t g = 0; g < ng; g++) {
                                size_t o = t * W + g * G;
                                double sg = s[t * ng + g], M = 0;
                                for (size_t j = 0; j < G; j++)
                                    M = fmax(M, fabs(xh[o + j]));
                                if (sg == 0 || (sg >= 0x1p-100 && M <= 0x1p20 * sg)) {
                                    idem_groups++;
                                    code_ok &= memcmp(codes2 + o, codes + o, G) == 0;
                                }
                            }
                        CHECK(lo_ok && code_ok, "W %zu G %d b %d: second pass changed lo (%d) or codes (%d)",
                              W, Gp, bits, lo_ok, code_ok);
                    }
                }
        }
    printf("sweep: %d configurations, %d rejected shapes, %ld groups checked for code "
           "idempotence\n", configs, rejected, idem_groups);
    static const char *kname[NKIND] = {"N(0,1)", "3 + 0.5 N", "-100 + 20 N", "1e-4 U(-1,1)",
                                       "1e-7 N", "N, outliers", "ints, +-0", "1 + 1e-6 N",
                                       "1e4 N"};
    printf("f16 metadata, G = 64: elements with |x - x^| > scale/2 (all within the derived "
           "bound):\n");
    for (int k = 0; k < NKIND; k++)
        printf("  %-16s %6ld of %6ld  worst excess %.3g scales\n", kname[k], over_half[k],
               elems[k], worst_excess[k]);
    CHECK(configs > 250 && rejected > 20, "sweep too small: %d %d", configs, rejected);

    free(x); free(xh); free(xh2); free(xr); free(y); free(s); free(l); free(s2); free(l2);
    free(packed); free(packed2); free(codes); free(codes2); free(cref);
}

/* ---- float16 metadata rounding lo above min(x); idempotence --------------- */

static void test_lo_above_min(void)
{
    /* x = {1000.3, 1001}: f16 spacing at 1000 is 0.5, so lo = 1000.3 is
     * stored as l = 1000.5 > min(x). scale = 0.7/15 -> s = 0.046661377.
     * The minimum gets (1000.3 - 1000.5)/s < 0 -> q = 0, x^ = 1000.5: an
     * error of 0.2 = 4.3 s, far above s/2. The maximum gets
     * (1001 - 1000.5)/s = 10.7 -> q = 11: the top code 15 is never used. */
    qmla_error err;
    qmla_quant_params p = P(4, 2, QMLA_META_F16);
    float x[2] = {1000.3f, 1001.0f}, xh[2], s, l;
    uint8_t packed[1];
    CHECK_OK(qmla_quant_qdq(&p, x, 1, 2, packed, &s, &l, xh, &err), err);
    CHECK(l == 1000.5f && l > x[0], "stored lo %.9g", (double)l);
    CHECK((packed[0] & 0xF) == 0 && (packed[0] >> 4) == 11, "codes %d %d", packed[0] & 0xF,
          packed[0] >> 4);
    CHECK(xh[0] == 1000.5f && fabsf(x[0] - xh[0]) > 4 * s, "error at the minimum %g, s %g",
          (double)fabsf(x[0] - xh[0]), (double)s);
    /* QDQ is not idempotent under f16 metadata: the second pass sees a
     * range of 11 s instead of 15 s and rescales. */
    float s2, l2, xh2[2];
    CHECK_OK(qmla_quant_qdq(&p, xh, 1, 2, packed, &s2, &l2, xh2, &err), err);
    CHECK(l2 == l && s2 < s && (packed[0] >> 4) == 15, "second pass: s %g -> %g, top code %d",
          (double)s, (double)s2, packed[0] >> 4);
    /* f32 metadata has no such offset */
    p.meta = QMLA_META_F32;
    CHECK_OK(qmla_quant_qdq(&p, x, 1, 2, packed, &s, &l, xh, &err), err);
    CHECK(l == x[0] && same_bits(xh[0], x[0]) && (packed[0] >> 4) == 15, "f32: lo %.9g", (double)l);
}

static void test_idempotence(void)
{
    qmla_error err;
    /* (a) Exact grids: lo, scale and every lo + k scale representable (in
     * float16 too) -> QDQ(x) lies on the grid, its extrema are lo and
     * lo + L scale, the scale is recomputed exactly, and QDQ(QDQ(x)) ==
     * QDQ(x) bit for bit, for both metadata precisions. */
    int bitsv[] = {2, 3, 4, 8};
    for (int bi = 0; bi < 4; bi++)
        for (int m = 0; m < 2; m++) {
            int bits = bitsv[bi];
            unsigned L = (1u << bits) - 1;
            qmla_quant_params p = P(bits, 64, m ? QMLA_META_F32 : QMLA_META_F16);
            float x[128], a[128], b[128], sa[2], la[2], sb[2], lb[2];
            for (int t = 0; t < 2; t++) {
                float lo = t ? -3.0f : 0.25f, sc = t ? 0x1p-4f : 0.75f;
                x[t * 64] = lo;
                x[t * 64 + 1] = lo + sc * (float)L;
                for (int j = 2; j < 64; j++)
                    x[t * 64 + j] = lo + sc * (float)L * (float)rng_unif();
            }
            CHECK_OK(qmla_quant_qdq(&p, x, 2, 64, NULL, sa, la, a, &err), err);
            CHECK_OK(qmla_quant_qdq(&p, a, 2, 64, NULL, sb, lb, b, &err), err);
            CHECK(same_bits_n(a, b, 128, NULL) && same_bits_n(sa, sb, 2, NULL) &&
                      same_bits_n(la, lb, 2, NULL),
                  "exact grid, bits %d meta %d: QDQ not idempotent", bits, m);
        }

    /* (b) In general QDQ is not idempotent, even with f32 metadata: for
     * x = {-1, 0x1.19999cp+0}, INT4: scale = fl(fl(hi - lo)/15) =
     * 0x1.1eb854p-3 and x^(hi) = fl(15 scale + lo) = 0x1.19999ep+0 != hi;
     * the second pass computes scale 0x1.1eb856p-3 (one ulp larger) and
     * x^(hi) = 0x1.1999a2p+0. The codes and lo stay the same. */
    {
        qmla_quant_params p = P(4, 2, QMLA_META_F32);
        float x[2] = {-1.0f, 0x1.19999cp+0f}, a[2], b[2], sa, la, sb, lb;
        uint8_t ca[1], cb[1];
        CHECK_OK(qmla_quant_qdq(&p, x, 1, 2, ca, &sa, &la, a, &err), err);
        CHECK_OK(qmla_quant_qdq(&p, a, 1, 2, cb, &sb, &lb, b, &err), err);
        CHECK(sa == 0x1.1eb854p-3f && a[1] == 0x1.19999ep+0f, "first pass %a %a", (double)sa,
              (double)a[1]);
        CHECK(sb == 0x1.1eb856p-3f && b[1] == 0x1.1999a2p+0f && b[0] == -1.0f,
              "second pass %a %a", (double)sb, (double)b[1]);
        CHECK(ca[0] == cb[0] && ca[0] == 0xF0 && la == lb, "codes %02x %02x", ca[0], cb[0]);
    }
}


/* ---- compact q8 metadata --------------------------------------------------- */

/* Smallest binary16 value >= v (v >= 0 finite), in double; *ovf when none. */
static double ref_f16_up(double v, int *ovf)
{
    double r = ref_f16(v, ovf);
    if (*ovf || r >= v)
        return r;
    int e;
    frexp(r, &e); /* r = f 2^e, f in [0.5, 1) */
    double quantum = r < 0x1p-14 ? 0x1p-24 : ldexp(1.0, e - 11);
    r += quantum;
    if (r > 65504.0)
        *ovf = 1;
    return r;
}

/* Independent reference of the q8 format for one token (as docs/quantizer.md
 * states it), every float operation done in double and rounded once. */
static int ref_q8(const float *x, size_t w, size_t G, int bits, uint8_t *codes,
                  float *xhat, float *s_out, float *l_out, double *S_out, double *M_out)
{
    const size_t ng = w / G;
    const double L = pow(2.0, bits) - 1.0;
    float mn[1024], mx[1024], sp[1024];
    double amax = 0.0, smax = 0.0;
    for (size_t g = 0; g < ng; g++) {
        mn[g] = mx[g] = x[g * G];
        for (size_t j = 0; j < G; j++) {
            float v = x[g * G + j];
            if (isnan(v) || isinf(v))
                return 1;
            mn[g] = v < mn[g] ? v : mn[g];
            mx[g] = v > mx[g] ? v : mx[g];
        }
        if (mn[g] == 0.0f)
            mn[g] = 0.0f;
        if (mx[g] == 0.0f)
            mx[g] = 0.0f;
        amax = fmax(amax, fabs((double)mn[g]));
    }
    int ovf = 0;
    double M = ref_f16_up((float)(amax / 127.0), &ovf);
    if (ovf)
        return 2;
    for (size_t g = 0; g < ng; g++) {
        double m = 0.0;
        if (M > 0.0) {
            m = floor((float)((double)mn[g] / M));
            m = m < -128.0 ? -128.0 : (m > 127.0 ? 127.0 : m);
        }
        l_out[g] = (float)(m * M); /* exact */
        float d = (float)((double)mx[g] - (double)l_out[g]);
        sp[g] = (float)((double)d / L);
        smax = fmax(smax, sp[g]);
    }
    double S = ref_f16_up((float)(smax / 255.0), &ovf);
    if (ovf)
        return 3;
    for (size_t g = 0; g < ng; g++) {
        double c = 0.0;
        if (S > 0.0) {
            c = ceil((float)((double)sp[g] / S));
            c = c > 255.0 ? 255.0 : c;
        }
        s_out[g] = (float)(c * S);
        const float sg = s_out[g], lg = l_out[g];
        for (size_t j = 0; j < G; j++) {
            unsigned q = 0;
            if (sg != 0.0f) {
                float diff = (float)((double)x[g * G + j] - (double)lg);
                double r = ref_rne((float)((double)diff / (double)sg));
                r = r < 0.0 ? 0.0 : (r > L ? L : r);
                q = (unsigned)r;
            }
            codes[g * G + j] = (uint8_t)q;
            xhat[g * G + j] = ref_fma(q, sg, lg);
        }
    }
    *S_out = S;
    *M_out = M;
    return 0;
}

static void test_q8(void)
{
    qmla_error err;
    /* storage sizes */
    qmla_quant_params p = P(4, 64, QMLA_META_Q8);
    CHECK(qmla_quant_meta_bytes(&p, 512) == 20 && qmla_quant_meta_bytes(&p, 64) == 6,
          "q8 meta bytes %zu %zu", qmla_quant_meta_bytes(&p, 512),
          qmla_quant_meta_bytes(&p, 64));
    qmla_quant_params pf = P(4, 64, QMLA_META_F16), p32 = P(4, 64, QMLA_META_F32);
    CHECK(qmla_quant_meta_bytes(&pf, 512) == 32 && qmla_quant_meta_bytes(&p32, 512) == 64,
          "f16/f32 meta bytes");
    CHECK(qmla_quant_code_bytes(&p, 512) + qmla_quant_meta_bytes(&p, 512) +
              qmla_quant_code_bytes(&p, 64) + qmla_quant_meta_bytes(&p, 64) == 314,
          "C4R4 with q8: 314 bytes per token");
    CHECK(!strcmp(qmla_meta_name(QMLA_META_Q8), "q8"), "name");

    /* hand-computed token: 2 groups of 4, INT2 (L = 3).
     * group 0: {-1, 0, 1, 2}: lo -1, hi 2; group 1: {0.5, 0.5, 0.5, 0.5}.
     * max|lo| = 1 -> M = f16_up(1/127) = 0.0078773..., floor(-1/M) = -127
     * (-1/M = -126.95...), l0 = -127 M = -1.00041...; l1 = floor(0.5/M) M.
     * s'_0 = (2 - l0)/3; S = f16_up(max s' / 255); sc_0 = 255 (s'_0 is the
     * maximum), so s_0 = 255 S >= s'_0. */
    {
        float x[8] = {-1, 0, 1, 2, 0.5f, 0.5f, 0.5f, 0.5f}, xh[8], s[2], l[2];
        uint8_t sc[2];
        int8_t mq[2];
        uint16_t S16, M16;
        qmla_quant_params q = P(2, 4, QMLA_META_Q8);
        CHECK_OK(qmla_quant_q8_fields(&q, x, 1, 8, &S16, &M16, sc, mq, &err), err);
        CHECK_OK(qmla_quant_qdq(&q, x, 1, 8, NULL, s, l, xh, &err), err);
        const float M = qmla_f16_to_f32(M16), S = qmla_f16_to_f32(S16);
        CHECK(M >= 1.0f / 127.0f && qmla_f16_to_f32((uint16_t)(M16 - 1)) < 1.0f / 127.0f,
              "M %g is the smallest float16 >= 1/127", (double)M);
        CHECK(mq[0] == -127 && l[0] == -127.0f * M, "m0 %d l0 %g", mq[0], (double)l[0]);
        CHECK(l[0] <= -1.0f && l[1] <= 0.5f && l[1] > 0.5f - M, "minima cover");
        CHECK(sc[0] == 255 && s[0] == 255.0f * S, "sc0 %d", sc[0]);
        CHECK(l[0] + 3.0f * s[0] >= 2.0f, "range covers the max");
        CHECK(sc[1] == (uint8_t)ceilf(((0.5f - l[1]) / 3.0f) / S), "sc1 %d", sc[1]);
        for (int j = 0; j < 4; j++)
            CHECK(fabsf(xh[j] - x[j]) <= s[0] / 2 * 1.0001f, "elt %d: %g vs %g", j,
                  (double)xh[j], (double)x[j]);
        CHECK(fabsf(xh[5] - 0.5f) <= s[1] / 2 * 1.0001f + 1e-6f, "constant group %g",
              (double)xh[5]);
    }

    /* all-zero token: S = M = 0, codes 0, x^ = 0 exactly */
    {
        float x[128] = {0}, xh[128], s[2], l[2];
        uint8_t sc[2];
        int8_t mq[2];
        uint16_t S16 = 1, M16 = 1;
        CHECK_OK(qmla_quant_q8_fields(&p, x, 1, 128, &S16, &M16, sc, mq, &err), err);
        CHECK_OK(qmla_quant_qdq(&p, x, 1, 128, NULL, s, l, xh, &err), err);
        CHECK(S16 == 0 && M16 == 0 && sc[0] == 0 && mq[1] == 0, "zero token fields");
        int ok = 1;
        for (int j = 0; j < 128; j++)
            ok &= xh[j] == 0.0f;
        CHECK(ok, "zero token reconstructs to 0");
    }

    /* range: |lo| > 127 * 65504 cannot be represented */
    {
        float x[64];
        for (int j = 0; j < 64; j++)
            x[j] = -9e6f + (float)j;
        qmla_error_clear(&err);
        int st = qmla_quant_qdq(&p, x, 1, 64, NULL, NULL, NULL, NULL, &err);
        CHECK(st == QMLA_ERANGE && strstr(err.msg, "token 0") && strstr(err.msg, "q8"),
              "q8 range: %d %s", st, err.msg);
    }

    /* bit for bit against the reference, and the error bound, over random
     * tokens of the cache shapes and odd ones, every bit width */
    const size_t shapes[][2] = {{512, 64}, {64, 64}, {576, 64}, {192, 32}, {24, 8}, {7, 7}};
    const int kinds = NKIND;
    size_t mism = 0, bound = 0, total = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const size_t w = shapes[si][0], G = shapes[si][1], ng = w / G;
        for (int b = 0; b < 4; b++) {
            const int bits = (int[]){2, 3, 4, 8}[b];
            qmla_quant_params q = P(bits, (int)G, QMLA_META_Q8);
            for (int kind = 0; kind < kinds; kind++)
                for (int rep = 0; rep < 8; rep++) {
                    float x[1024], xh[1024], rx[1024], s[128], l[128], rs[128], rl[128];
                    uint8_t packed[1024], codes[1024], rcodes[1024];
                    double S, M;
                    fill_token(x, w, kind);
                    int rr = ref_q8(x, w, G, bits, rcodes, rx, rs, rl, &S, &M);
                    int st = qmla_quant_qdq(&q, x, 1, w, packed, s, l, xh, &err);
                    CHECK((rr == 0) == (st == QMLA_OK), "status %d vs ref %d: %s", st, rr,
                          err.msg);
                    if (rr || st)
                        continue;
                    unpack_token(packed, ng, G, bits, codes);
                    for (size_t g = 0; g < ng; g++)
                        if (s[g] != rs[g] || l[g] != rl[g])
                            mism++;
                    for (size_t j = 0; j < w; j++) {
                        total++;
                        if (codes[j] != rcodes[j] ||
                            memcmp(&xh[j], &rx[j], sizeof(float)) != 0)
                            mism++;
                        const size_t g = j / G;
                        const double eps = 0x1p-20 * (fabs(x[j]) + fabs(l[g]) +
                                                      ((1 << bits) - 1) * (double)s[g]);
                        if (fabs((double)xh[j] - x[j]) > (double)s[g] / 2 + eps)
                            bound++;
                    }
                }
        }
    }
    CHECK(mism == 0, "q8: %zu mismatches against the reference", mism);
    CHECK(bound == 0, "q8: %zu of %zu elements beyond s/2", bound, total);
    CHECK(total > 10000, "q8 sweep covered %zu elements", total);
}

int main(void)
{
    test_params();
    test_f16();
    test_hand();
    test_ties();
    test_constant();
    test_errors();
    test_pack();
    test_sweep();
    test_lo_above_min();
    test_idempotence();
    test_q8();
    return check_summary("test_quant");
}
