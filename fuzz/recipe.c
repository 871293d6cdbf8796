/* fuzz/recipe.c — see recipe.h. Input bytes are choices; choice 0 is always
 * the well-formed option. Shapes are tiny (every dimension 1..4) so that one
 * input costs a few milliseconds.
 */
#include "recipe.h"

#include "qmla/capture.h"

#include <hdf5.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- choices --------------------------------------------------------------- */

typedef struct B {
    const uint8_t *p;
    size_t n, i;
    qmla_recipe *r;
    hid_t file;
    int H, D, dc, dn, dr, dv;   /* the true (small) dimensions */
    int absurd;                 /* config claims huge dimensions */
    unsigned blob;              /* counter for /blobs/<k> (soft-link targets) */
    int hdf5_refused;           /* HDF5 refused something we tried to build */
} B;

static unsigned u8(B *b) { return b->i < b->n ? b->p[b->i++] : 0u; }
static unsigned pick(B *b, unsigned k) { return k ? u8(b) % k : 0; }

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void defect(B *b, const char *fmt, ...)
{
    if (b->r->defects++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->r->first_defect, sizeof b->r->first_defect, fmt, ap);
        va_end(ap);
    }
}

static void refused(B *b, int ok)
{
    if (!ok)
        b->hdf5_refused = 1;
}

/* ---- attributes ------------------------------------------------------------ */

static hid_t scalar_or_pair(int pair)
{
    hsize_t two = 2;
    return pair ? H5Screate_simple(1, &two, NULL) : H5Screate(H5S_SCALAR);
}

static void a_write(B *b, hid_t obj, const char *name, hid_t ft, hid_t mt,
                    int pair, const void *val)
{
    hid_t sp = scalar_or_pair(pair), a = -1;
    int ok = sp >= 0 &&
             (a = H5Acreate2(obj, name, ft, sp, H5P_DEFAULT, H5P_DEFAULT)) >= 0 &&
             H5Awrite(a, mt, val) >= 0;
    refused(b, ok);
    if (a >= 0)
        H5Aclose(a);
    if (sp >= 0)
        H5Sclose(sp);
}

/* kind: 0 fixed NULLTERM, 1 variable, 2 fixed SPACEPAD (+3 spaces),
 * 3 fixed NULLPAD exact, 4 variable UTF-8 */
static void a_str(B *b, hid_t obj, const char *name, const char *val, int kind,
                  int pair)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    size_t n = strlen(val);
    if (kind == 1 || kind == 4) {
        H5Tset_size(t, H5T_VARIABLE);
        if (kind == 4)
            H5Tset_cset(t, H5T_CSET_UTF8);
        const char *v2[2] = {val, val};
        a_write(b, obj, name, t, t, pair, pair ? (const void *)v2
                                               : (const void *)&val);
    } else {
        size_t sz = kind == 2 ? n + 3 : kind == 3 ? (n ? n : 1) : n + 1;
        char *buf = calloc(2 * sz + 1, 1);
        if (!buf) {
            H5Tclose(t);
            b->hdf5_refused = 1;
            return;
        }
        for (int k = 0; k < 2; k++) {
            memcpy(buf + k * sz, val, n < sz ? n : sz);
            if (kind == 2)
                memset(buf + k * sz + n, ' ', sz - n);
        }
        H5Tset_size(t, sz);
        H5Tset_strpad(t, kind == 2 ? H5T_STR_SPACEPAD
                         : kind == 3 ? H5T_STR_NULLPAD : H5T_STR_NULLTERM);
        a_write(b, obj, name, t, t, pair, buf);
        free(buf);
    }
    H5Tclose(t);
}

static void a_i64(B *b, hid_t obj, const char *name, hid_t ft, long long v,
                  int pair)
{
    long long vv[2] = {v, v};
    a_write(b, obj, name, ft, H5T_NATIVE_LLONG, pair, vv);
}

static void a_f64(B *b, hid_t obj, const char *name, hid_t ft, double v,
                  int pair)
{
    double vv[2] = {v, v};
    a_write(b, obj, name, ft, H5T_NATIVE_DOUBLE, pair, vv);
}

static hid_t make_f16(void)
{
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 10, 5, 0, 10);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 15);
    return t;
}

static hid_t make_bf16(void)
{
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 7, 8, 0, 7);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 127);
    return t;
}

/* Integer attribute. `strict`: any value other than `good` is a defect (else
 * only the type variants are). */
static void int_attr(B *b, hid_t obj, const char *where, const char *name,
                     long long good, long long alt, int alt_defect,
                     int strict, int required)
{
    unsigned v = pick(b, 24);
    if (v <= 11) {
        a_i64(b, obj, name, H5T_STD_I32LE, good, 0);
    } else if (v == 12) {
        a_i64(b, obj, name, H5T_STD_I64BE, good, 0);
    } else if (v == 13) {
        if (good >= 0 && good <= 255)
            a_i64(b, obj, name, H5T_STD_U8LE, good, 0);
        else
            a_i64(b, obj, name, H5T_STD_I64LE, good, 0);
    } else if (v == 14) { /* enum over int16, like an h5py boolean */
        hid_t e = H5Tenum_create(H5T_STD_I16LE);
        short s = (short)good;
        if (good == s) {
            H5Tenum_insert(e, "A", &s);
            a_write(b, obj, name, e, e, 0, &s);
        } else {
            a_i64(b, obj, name, H5T_STD_I32LE, good, 0);
        }
        H5Tclose(e);
    } else if (v == 15) {
        if (required)
            defect(b, "%s attribute %s missing", where, name);
    } else if (v == 16) {
        a_f64(b, obj, name, H5T_IEEE_F64LE, (double)good, 0);
        defect(b, "%s attribute %s float-typed", where, name);
    } else if (v == 17) {
        a_str(b, obj, name, "1", 0, 0);
        defect(b, "%s attribute %s string-typed", where, name);
    } else if (v == 18) {
        a_i64(b, obj, name, H5T_STD_I32LE, good, 1);
        defect(b, "%s attribute %s has two values", where, name);
    } else if (v == 19) {
        a_i64(b, obj, name, H5T_STD_I64LE, alt, 0);
        if (alt_defect)
            defect(b, "%s attribute %s = %lld", where, name, alt);
    } else if (v == 20) {
        a_i64(b, obj, name, H5T_STD_I32LE, -3, 0);
        if (strict)
            defect(b, "%s attribute %s = -3", where, name);
    } else if (v == 21) {
        a_i64(b, obj, name, H5T_STD_I64LE, 1LL << 40, 0);
        if (strict)
            defect(b, "%s attribute %s = 2^40", where, name);
    } else if (v == 22) { /* a null dataspace */
        hid_t sp = H5Screate(H5S_NULL);
        hid_t a = H5Acreate2(obj, name, H5T_STD_I32LE, sp, H5P_DEFAULT,
                             H5P_DEFAULT);
        refused(b, a >= 0);
        if (a >= 0)
            H5Aclose(a);
        H5Sclose(sp);
        defect(b, "%s attribute %s null dataspace", where, name);
    } else {
        a_i64(b, obj, name, H5T_STD_U64LE, good, 0); /* good >= 0 */
    }
}

/* Float attribute; `zero_ok`: 0 is a valid value. */
static void float_attr(B *b, hid_t obj, const char *where, const char *name,
                       double good, int required, int zero_ok)
{
    unsigned v = pick(b, 22);
    if (v <= 9) {
        a_f64(b, obj, name, H5T_IEEE_F64LE, good, 0);
    } else if (v == 10) {
        a_f64(b, obj, name, H5T_IEEE_F32BE, good, 0);
    } else if (v == 11) {
        hid_t t = make_f16();
        a_f64(b, obj, name, t, good, 0);
        H5Tclose(t);
        /* float16 cannot hold tiny or huge values: they may round to 0 */
        if (good != 0 && fabs(good) < 6e-8 && !zero_ok)
            defect(b, "%s attribute %s underflows float16", where, name);
    } else if (v == 12) {
        a_i64(b, obj, name, H5T_STD_I32LE, 1, 0); /* integers accepted */
    } else if (v == 13) {
        if (required)
            defect(b, "%s attribute %s missing", where, name);
    } else if (v == 14) {
        a_f64(b, obj, name, H5T_IEEE_F64LE, NAN, 0);
        defect(b, "%s attribute %s nan", where, name);
    } else if (v == 15) {
        a_f64(b, obj, name, H5T_IEEE_F64LE, 0.0, 0);
        if (!zero_ok)
            defect(b, "%s attribute %s zero", where, name);
    } else if (v == 16) {
        a_f64(b, obj, name, H5T_IEEE_F64LE, -0.5, 0);
        defect(b, "%s attribute %s negative", where, name);
    } else if (v == 17) {
        a_f64(b, obj, name, H5T_IEEE_F64LE, INFINITY, 0);
        defect(b, "%s attribute %s inf", where, name);
    } else if (v == 18) {
        a_str(b, obj, name, "0.5", 1, 0);
        defect(b, "%s attribute %s string-typed", where, name);
    } else if (v == 19) {
        a_f64(b, obj, name, H5T_IEEE_F64LE, good, 1);
        defect(b, "%s attribute %s has two values", where, name);
    } else if (v == 20) {
        hid_t t = make_bf16();
        a_f64(b, obj, name, t, good, 0);
        H5Tclose(t);
    } else {
        a_f64(b, obj, name, H5T_IEEE_F64LE, 1e300, 0); /* finite: fine ... */
        /* ... except where the value is used in float32: softmax_scale must
         * be a normal float32 (docs/capture-format.md) */
        if (strcmp(name, "softmax_scale") == 0)
            defect(b, "%s attribute %s beyond float32", where, name);
    }
}

/* String attribute; `alt` replaces the value in one variant, `alt_defect`
 * says whether that is a defect; `empty_defect` likewise for "". */
static void str_attr(B *b, hid_t obj, const char *where, const char *name,
                     const char *good, const char *alt, int alt_defect,
                     int empty_defect)
{
    unsigned v = pick(b, 20);
    if (v <= 9) {
        a_str(b, obj, name, good, 0, 0);
    } else if (v <= 13) {
        a_str(b, obj, name, good, (int)(v - 9), 0);
    } else if (v == 14) {
        defect(b, "%s attribute %s missing", where, name);
    } else if (v == 15) {
        a_str(b, obj, name, alt, (int)pick(b, 5), 0);
        if (alt_defect)
            defect(b, "%s attribute %s = \"%s\"", where, name, alt);
    } else if (v == 16) {
        a_i64(b, obj, name, H5T_STD_I32LE, 1, 0);
        defect(b, "%s attribute %s int-typed", where, name);
    } else if (v == 17) {
        a_str(b, obj, name, good, (int)pick(b, 2), 1);
        defect(b, "%s attribute %s has two values", where, name);
    } else if (v == 18) {
        a_str(b, obj, name, "", (int)pick(b, 4), 0);
        if (empty_defect)
            defect(b, "%s attribute %s empty", where, name);
    } else {
        /* a fixed string with an embedded NUL: read up to the NUL */
        char buf[300];
        snprintf(buf, sizeof buf, "%s", good);
        size_t n = strlen(buf);
        hid_t t = H5Tcopy(H5T_C_S1);
        char raw[310] = {0};
        memcpy(raw, buf, n);
        memcpy(raw + n + 1, "zz", 2);
        H5Tset_size(t, n + 3);
        H5Tset_strpad(t, H5T_STR_NULLPAD);
        a_write(b, obj, name, t, t, 0, raw);
        H5Tclose(t);
    }
}

/* ---- datasets -------------------------------------------------------------- */

/* Float storage type chosen by the input. Caller closes. *unreadable is set
 * for a type HDF5 cannot convert to float32 (explicit leading mantissa bit:
 * "normalization method not implemented yet"), which the reader refuses. */
static hid_t float_type(B *b, int *unreadable)
{
    *unreadable = 0;
    unsigned v = pick(b, 10);
    switch (v) {
    case 3: return make_f16();
    case 4: return make_bf16();
    case 5: return H5Tcopy(H5T_IEEE_F64LE);
    case 6: return H5Tcopy(H5T_IEEE_F32BE);
    case 7: return H5Tcopy(H5T_IEEE_F64BE);
    case 8: { /* a custom float of 1..4 bytes */
        unsigned size = 1 + pick(b, 4), bits = 8 * size;
        unsigned esize = 2 + pick(b, bits - 3 < 9 ? bits - 3 : 9);
        unsigned msize = bits - 1 - esize;
        hid_t t = H5Tcopy(H5T_IEEE_F32LE);
        int ok = H5Tset_fields(t, bits - 1, msize, esize, 0, msize) >= 0 &&
                 H5Tset_precision(t, bits) >= 0 && H5Tset_size(t, size) >= 0 &&
                 H5Tset_ebias(t, (1u << (esize - 1)) - 1) >= 0;
        if (ok && pick(b, 4) == 3) {
            ok = H5Tset_norm(t, H5T_NORM_MSBSET) >= 0;
            *unreadable = ok;
        }
        if (!ok) {
            H5Tclose(t);
            return H5Tcopy(H5T_IEEE_F32LE);
        }
        return t;
    }
    default: return H5Tcopy(H5T_IEEE_F32LE);
    }
}

static hid_t int_type(B *b)
{
    static const hid_t *const types[] = {&H5T_STD_I64LE_g, &H5T_STD_I32LE_g,
                                         &H5T_STD_U8LE_g, &H5T_STD_I16BE_g,
                                         &H5T_STD_U64LE_g};
    unsigned v = pick(b, 8);
    H5open();
    return H5Tcopy(v < 5 ? *types[v] : H5T_STD_I64LE);
}

enum { DS_FLOAT = 0, DS_INT = 1 };

typedef struct ds_out {
    int present;    /* exists and is (as far as the recipe knows) valid */
    int nonfinite;  /* float data read back holds NaN/inf */
} ds_out;

/* Build dataset `name` in g. rank/dims are the correct shape; the input
 * may break it. `optional`: a missing dataset is no defect. */
static ds_out make_ds(B *b, hid_t g, const char *where, const char *name,
                      int kind, int rank, const hsize_t *dims, int optional)
{
    ds_out o = {0, 0};
    hsize_t d[5];
    int r = rank;
    for (int i = 0; i < rank; i++)
        d[i] = dims[i];
    unsigned v = pick(b, 40);
    if (b->absurd)
        v = 0;
    int link_kind = 0; /* 0 hard, 1 soft via /blobs, 2 group, 3 external */
    int space = 0;     /* 0 simple, 1 scalar, 2 null */
    int wrong_class = 0, string_type = 0, ext_storage = 0;
    if (v < 26) {
        /* well-formed */
    } else if (v == 26) {
        if (!optional)
            defect(b, "%s/%s missing", where, name);
        return o;
    } else if (v == 27) {
        wrong_class = 1;
        defect(b, "%s/%s wrong type class", where, name);
    } else if (v == 28) {
        r = rank > 1 ? rank - 1 : 2;
        if (rank == 1)
            d[1] = 1;
        defect(b, "%s/%s wrong rank", where, name);
    } else if (v == 29) {
        d[pick(b, (unsigned)rank)] += 1 + pick(b, 2);
        defect(b, "%s/%s wrong dim", where, name);
    } else if (v == 30) {
        d[pick(b, (unsigned)rank)] = 0;
        defect(b, "%s/%s zero dim", where, name);
    } else if (v == 31) {
        space = 1;
        defect(b, "%s/%s scalar", where, name);
    } else if (v == 32) {
        space = 2;
        defect(b, "%s/%s null dataspace", where, name);
    } else if (v == 33) {
        string_type = 1;
        defect(b, "%s/%s string-typed", where, name);
    } else if (v == 34) {
        link_kind = 3;
        defect(b, "%s/%s external link", where, name);
    } else if (v == 35) {
        link_kind = 2;
        defect(b, "%s/%s is a group", where, name);
    } else if (v == 36 || v == 37) {
        link_kind = 1; /* valid: a soft link to the data elsewhere */
    } else if (v == 38) {
        ext_storage = 1;
        defect(b, "%s/%s external raw storage", where, name);
    } else {
        d[r] = 1; /* one extra trailing dimension of 1 */
        r++;
        defect(b, "%s/%s extra dimension", where, name);
    }
    if (link_kind == 2) {
        hid_t x = H5Gcreate2(g, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        refused(b, x >= 0);
        if (x >= 0)
            H5Gclose(x);
        return o;
    }
    if (link_kind == 3) {
        refused(b, H5Lcreate_external("qmla-fuzz-nonexistent.h5", "/x", g,
                                      name, H5P_DEFAULT, H5P_DEFAULT) >= 0);
        return o;
    }

    hid_t ft;
    if (string_type) {
        ft = H5Tcopy(H5T_C_S1);
        H5Tset_size(ft, 4);
    } else if ((kind == DS_FLOAT) != (wrong_class != 0)) {
        int unreadable;
        ft = float_type(b, &unreadable);
        if (unreadable)
            defect(b, "%s/%s custom float with an explicit leading mantissa "
                   "bit", where, name);
    } else {
        ft = int_type(b);
    }
    hid_t sp = space == 1 ? H5Screate(H5S_SCALAR)
             : space == 2 ? H5Screate(H5S_NULL)
                          : H5Screate_simple(r, d, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    size_t n = 1;
    for (int i = 0; i < r; i++)
        n *= (size_t)d[i];
    if (space)
        n = space == 1 ? 1 : 0;
    unsigned layout = b->absurd ? 1 : pick(b, 6);
    if (space == 0 && !ext_storage && n > 0 && (layout == 1 || layout == 2 ||
                                                 layout == 3)) {
        hsize_t ch[5];
        for (int i = 0; i < r; i++)
            ch[i] = b->absurd ? 1 : d[i];
        if (b->absurd)
            ch[r - 1] = d[r - 1] < 1024 ? d[r - 1] : 1024;
        H5Pset_chunk(dcpl, r, ch);
        if (layout == 2) {
            H5Pset_shuffle(dcpl);
            H5Pset_deflate(dcpl, 1 + pick(b, 9));
        }
        if (layout == 3)
            H5Pset_fletcher32(dcpl);
    } else if (layout == 4 && space == 0 && !ext_storage) {
        H5Pset_layout(dcpl, H5D_COMPACT);
    }
    if (ext_storage)
        H5Pset_external(dcpl, "qmla-fuzz-nonexistent.bin", 0,
                        H5F_UNLIMITED);

    char target[64];
    hid_t loc = g;
    const char *dname = name;
    if (link_kind == 1) {
        snprintf(target, sizeof target, "/blobs/%u", b->blob++);
        dname = target;
        loc = b->file;
    }
    hid_t ds = H5Dcreate2(loc, dname, ft, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    refused(b, ds >= 0);
    if (ds >= 0 && link_kind == 1)
        refused(b, H5Lcreate_soft(target, g, name, H5P_DEFAULT,
                                  H5P_DEFAULT) >= 0);

    int writable = ds >= 0 && !string_type && !ext_storage && !b->absurd &&
                   n > 0;
    if (writable) {
        double *x = malloc(n * sizeof *x);
        float *back = malloc(n * sizeof *back);
        if (!x || !back) {
            b->hdf5_refused = 1;
        } else {
            unsigned amp_pick = pick(b, 8);
            double amp = amp_pick == 5 ? 1e-3 : amp_pick == 6 ? 300.0
                       : amp_pick == 7 ? 1e5 : 1.0;
            double salt = 0.1 * (double)pick(b, 64);
            for (size_t i = 0; i < n; i++)
                x[i] = kind == DS_INT && !wrong_class
                           ? (double)(i % 97)
                           : amp * sin(0.37 * (double)i + salt);
            if (pick(b, 10) == 9) { /* inject one non-finite value */
                size_t at = (size_t)(u8(b) | (u8(b) << 8)) % n;
                unsigned w = pick(b, 4);
                x[at] = w == 0 ? NAN : w == 1 ? INFINITY
                      : w == 2 ? -INFINITY : 1e300;
            }
            int ok = H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL,
                              H5P_DEFAULT, x) >= 0;
            refused(b, ok);
            if (ok && kind == DS_FLOAT && !wrong_class && space == 0) {
                if (H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL,
                            H5P_DEFAULT, back) >= 0) {
                    for (size_t i = 0; i < n; i++)
                        if (!isfinite(back[i]))
                            o.nonfinite = 1;
                } else {
                    defect(b, "%s/%s has a type HDF5 cannot read as float",
                           where, name);
                }
            }
        }
        free(x);
        free(back);
    }
    if (ds >= 0)
        H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Tclose(ft);
    o.present = 1;
    return o;
}

/* ---- structure ------------------------------------------------------------- */

static void build_cell(B *b, hid_t cells, const char *lwhere, int li, int k)
{
    qmla_recipe *r = b->r;
    char name[256], where[512];
    unsigned nv = pick(b, 10);
    if (nv == 8)
        snprintf(name, sizeof name, "cell with spaces %d", k);
    else if (nv == 9) {
        memset(name, 'n', 200);
        snprintf(name + 200, sizeof name - 200, "%d", k);
        defect(b, "%s cell name of %zu bytes", lwhere, strlen(name));
    } else
        snprintf(name, sizeof name, "wiki-s%d", k);
    snprintf(where, sizeof where, "%s/cells/%s", lwhere, name);
    snprintf(r->cell_name[li][k], sizeof r->cell_name[li][k], "%s", name);
    hid_t g = H5Gcreate2(cells, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    refused(b, g >= 0);
    if (g < 0)
        return;
    char longds[201];
    memset(longds, 'd', 200);
    longds[200] = '\0';
    str_attr(b, g, where, "dataset", "wikitext", longds, 1, 0);
    int_attr(b, g, where, "seed", k, -12345678901LL, 0, 0, 1);

    const hsize_t N = 1 + pick(b, 3), T = 1 + pick(b, 3);
    const hsize_t H = (hsize_t)b->H, D = (hsize_t)b->D, dc = (hsize_t)b->dc;
    const hsize_t dn = (hsize_t)b->dn, dr = (hsize_t)b->dr;
    r->cell_N[li][k] = (size_t)N;
    r->cell_T[li][k] = (size_t)T;
    const hsize_t ckv[3] = {N, T, dc}, kr[3] = {N, T, dr};
    const hsize_t qn[4] = {N, H, T, dn}, qr[4] = {N, H, T, dr};
    const hsize_t ao[3] = {N, T, D}, pos[2] = {N, T}, cs[3] = {N, T, dr / 2};
    int nf = 0;
    ds_out o;
    o = make_ds(b, g, where, "c_kv", DS_FLOAT, 3, ckv, 0);
    nf |= o.nonfinite;
    o = make_ds(b, g, where, "k_rope", DS_FLOAT, 3, kr, 0);
    nf |= o.nonfinite;
    o = make_ds(b, g, where, "q_nope", DS_FLOAT, 4, qn, 0);
    nf |= o.nonfinite;
    o = make_ds(b, g, where, "q_rope", DS_FLOAT, 4, qr, 0);
    nf |= o.nonfinite;
    o = make_ds(b, g, where, "attn_out", DS_FLOAT, 3, ao, 0);
    nf |= o.nonfinite;
    make_ds(b, g, where, "positions", DS_INT, 2, pos, 0);

    /* optional tensors: none, the pre pair, all four, or a broken set */
    unsigned pv = pick(b, 8);
    int want[4] = {0, 0, 0, 0}; /* k_pre, q_pre, cos, sin */
    if (pv == 1 || pv == 2) {
        want[0] = want[1] = 1;
    } else if (pv == 3 || pv == 4) {
        want[0] = want[1] = want[2] = want[3] = 1;
    } else if (pv == 5) {
        want[pick(b, 2)] = 1;
    } else if (pv == 6) {
        want[2] = want[3] = 1;
    } else if (pv == 7) {
        want[0] = want[1] = 1;
        want[2 + pick(b, 2)] = 1;
    }
    static const char *const oname[4] = {"k_rope_pre", "q_rope_pre",
                                         "rope_cos", "rope_sin"};
    const hsize_t *odims[4] = {kr, qr, cs, cs};
    const int orank[4] = {3, 4, 3, 3};
    int have[4] = {0, 0, 0, 0}, onf[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) {
        if (!want[i])
            continue;
        o = make_ds(b, g, where, oname[i], DS_FLOAT, orank[i], odims[i], 1);
        have[i] = o.present;
        onf[i] = o.nonfinite;
    }
    if (have[0] != have[1] || have[2] != have[3] || (have[2] && !have[0]))
        defect(b, "%s optional tensors k_pre=%d q_pre=%d cos=%d sin=%d",
               where, have[0], have[1], have[2], have[3]);
    if (have[0] && have[1])
        nf |= onf[0] | onf[1];
    if (have[2] && have[3])
        nf |= onf[2] | onf[3];
    r->cell_pre[li][k] = have[0] && have[1] && have[2] && have[3];
    if (pick(b, 4) == 3) {
        const hsize_t hi[3] = {N, T, D};
        make_ds(b, g, where, "hidden_in", DS_FLOAT, 3, hi, 1); /* not loaded */
    }
    if (pick(b, 8) == 7) { /* unknown members are ignored */
        const hsize_t one = 3;
        hid_t sp = H5Screate_simple(1, &one, NULL);
        hid_t x = H5Dcreate2(g, "notes", H5T_STD_I8LE, sp, H5P_DEFAULT,
                             H5P_DEFAULT, H5P_DEFAULT);
        if (x >= 0)
            H5Dclose(x);
        H5Sclose(sp);
        a_str(b, g, "comment", "extra attribute", 0, 0);
    }
    r->cell_nonfinite[li][k] = nf;
    H5Gclose(g);
}

static void build_layer(B *b, hid_t layers, int li, int index)
{
    qmla_recipe *r = b->r;
    char name[64], where[128];
    unsigned nv = pick(b, 20);
    if (nv == 16) {
        snprintf(name, sizeof name, "0%d", index);
        defect(b, "layer name %s has a leading zero", name);
    } else if (nv == 17) {
        snprintf(name, sizeof name, "L%d", index);
        defect(b, "layer name %s", name);
    } else if (nv == 18) {
        snprintf(name, sizeof name, "%d", 1000000000 + index);
        defect(b, "layer name %s too large", name);
    } else if (nv == 19) {
        snprintf(name, sizeof name, "-%d", index);
        defect(b, "layer name %s negative", name);
    } else {
        snprintf(name, sizeof name, "%d", index);
    }
    snprintf(where, sizeof where, "/layers/%s", name);
    hid_t g = H5Gcreate2(layers, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    refused(b, g >= 0);
    if (g < 0)
        return;
    int_attr(b, g, where, "layer", index, index + 1, 1, 1, 1);
    hsize_t H = (hsize_t)b->H, D = (hsize_t)b->D, dc = (hsize_t)b->dc;
    hsize_t dn = (hsize_t)b->dn, dv = (hsize_t)b->dv;
    if (b->absurd) {
        H = 1u << 20;
        dc = 1u << 20;
        dn = 1u << 10;
    }
    const hsize_t uk[3] = {H, dn, dc}, uv[3] = {H, dv, dc};
    const hsize_t o[2] = {D, H * dv}, kn[1] = {dc};
    int nf = 0;
    nf |= make_ds(b, g, where, "w_uk", DS_FLOAT, 3, uk, 0).nonfinite;
    nf |= make_ds(b, g, where, "w_uv", DS_FLOAT, 3, uv, 0).nonfinite;
    nf |= make_ds(b, g, where, "w_o", DS_FLOAT, 2, o, 0).nonfinite;
    nf |= make_ds(b, g, where, "kv_norm_weight", DS_FLOAT, 1, kn, 0).nonfinite;
    r->layer_nonfinite[li] = nf;

    unsigned cv = b->absurd ? 15 : pick(b, 16);
    if (cv == 13) {
        defect(b, "%s/cells missing", where);
    } else if (cv == 14) {
        hsize_t one = 1;
        hid_t sp = H5Screate_simple(1, &one, NULL);
        hid_t x = H5Dcreate2(g, "cells", H5T_IEEE_F32LE, sp, H5P_DEFAULT,
                             H5P_DEFAULT, H5P_DEFAULT);
        if (x >= 0)
            H5Dclose(x);
        H5Sclose(sp);
        defect(b, "%s/cells is a dataset", where);
    } else {
        hid_t cells = H5Gcreate2(g, "cells", H5P_DEFAULT, H5P_DEFAULT,
                                 H5P_DEFAULT);
        refused(b, cells >= 0);
        if (cells >= 0) {
            int nc = cv == 15 ? 0 : 1 + (int)pick(b, QMLA_RECIPE_MAX_CELLS);
            if (nc == 0)
                defect(b, "%s/cells empty", where);
            for (int k = 0; k < nc; k++)
                build_cell(b, cells, where, li, k);
            r->n_cells[li] = nc;
            H5Gclose(cells);
        }
    }
    H5Gclose(g);
}

static void build_root(B *b)
{
    hid_t root = H5Gopen2(b->file, "/", H5P_DEFAULT);
    str_attr(b, root, "/", "format", QMLA_CAPTURE_FORMAT, "qmla-capture2", 1, 1);
    int_attr(b, root, "/", "format_version", 1, 2, 1, 1, 1);
    str_attr(b, root, "/", "model", "deepseek-ai/DeepSeek-V2-Lite", "x", 0, 0);
    str_attr(b, root, "/", "source", "qmla fuzz recipe", "y", 0, 0);
    if (pick(b, 3) == 2)
        float_attr(b, root, "/", "check_tolerance", 1e-3, 0, 0);
    if (pick(b, 3) == 2)
        int_attr(b, root, "/", "synthetic", 1, 7, 1, 1, 0);
    H5Gclose(root);
}

static void build_config(B *b)
{
    unsigned v = pick(b, 16);
    if (v == 14) {
        defect(b, "/config missing");
        return;
    }
    if (v == 15) {
        hsize_t one = 1;
        hid_t sp = H5Screate_simple(1, &one, NULL);
        hid_t x = H5Dcreate2(b->file, "/config", H5T_STD_I32LE, sp,
                             H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (x >= 0)
            H5Dclose(x);
        H5Sclose(sp);
        defect(b, "/config is a dataset");
        return;
    }
    hid_t g = H5Gcreate2(b->file, "/config", H5P_DEFAULT, H5P_DEFAULT,
                         H5P_DEFAULT);
    refused(b, g >= 0);
    if (g < 0)
        return;
    const char *w = "/config";
    int_attr(b, g, w, "n_layers", 27, 61, 0, 1, 1);
    if (b->absurd) {
        a_i64(b, g, "n_heads", H5T_STD_I32LE, 1 << 20, 0);
        a_i64(b, g, "d_model", H5T_STD_I32LE, b->D, 0);
        a_i64(b, g, "kv_lora_rank", H5T_STD_I32LE, 1 << 20, 0);
        a_i64(b, g, "qk_nope_head_dim", H5T_STD_I32LE, 1 << 10, 0);
        a_i64(b, g, "qk_rope_head_dim", H5T_STD_I32LE, b->dr, 0);
        a_i64(b, g, "v_head_dim", H5T_STD_I32LE, b->dv, 0);
        defect(b, "absurd dimensions");
    } else {
        int_attr(b, g, w, "n_heads", b->H, 0, 1, 1, 1);
        int_attr(b, g, w, "d_model", b->D, 0, 1, 1, 1);
        int_attr(b, g, w, "kv_lora_rank", b->dc, 0, 1, 1, 1);
        int_attr(b, g, w, "qk_nope_head_dim", b->dn, 0, 1, 1, 1);
        int_attr(b, g, w, "qk_rope_head_dim", b->dr, b->dr + 1, 1, 1, 1);
        int_attr(b, g, w, "v_head_dim", b->dv, 0, 1, 1, 1);
    }
    float_attr(b, g, w, "softmax_scale", 0.125, 1, 0);
    str_attr(b, g, w, "rope_pairing", pick(b, 2) ? "half" : "interleaved",
             "Half", 1, 1);
    float_attr(b, g, w, "rms_norm_eps", 1e-6, 1, 1);
    if (pick(b, 8) == 7)
        a_str(b, g, "unknown_extra", "ignored", 1, 0);
    H5Gclose(g);
}

static void build_layers(B *b)
{
    qmla_recipe *r = b->r;
    unsigned v = pick(b, 16);
    if (v == 13) {
        defect(b, "/layers missing");
        return;
    }
    if (v == 14) {
        hsize_t one = 1;
        hid_t sp = H5Screate_simple(1, &one, NULL);
        hid_t x = H5Dcreate2(b->file, "/layers", H5T_STD_I32LE, sp,
                             H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (x >= 0)
            H5Dclose(x);
        H5Sclose(sp);
        defect(b, "/layers is a dataset");
        return;
    }
    hid_t g = H5Gcreate2(b->file, "/layers", H5P_DEFAULT, H5P_DEFAULT,
                         H5P_DEFAULT);
    refused(b, g >= 0);
    if (g < 0)
        return;
    int n = v == 15 ? 0 : 1 + (int)pick(b, b->absurd ? 1 : 3);
    if (n == 0)
        defect(b, "/layers empty");
    int index = (int)pick(b, 4);
    for (int li = 0; li < n; li++) {
        r->layer_index[li] = index;
        build_layer(b, g, li, index);
        index += 1 + (int)pick(b, 12);
    }
    r->n_layers = n;
    H5Gclose(g);
}

/* Bob Jenkins' lookup3 hashlittle(), the checksum of HDF5 metadata. */
static uint32_t rot32(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }

static uint32_t lookup3(const unsigned char *k, size_t len)
{
    uint32_t a, b, c;
    a = b = c = 0xdeadbeefu + (uint32_t)len;
    while (len > 12) {
        a += k[0] | (uint32_t)k[1] << 8 | (uint32_t)k[2] << 16 | (uint32_t)k[3] << 24;
        b += k[4] | (uint32_t)k[5] << 8 | (uint32_t)k[6] << 16 | (uint32_t)k[7] << 24;
        c += k[8] | (uint32_t)k[9] << 8 | (uint32_t)k[10] << 16 | (uint32_t)k[11] << 24;
        a -= c; a ^= rot32(c, 4);  c += b;
        b -= a; b ^= rot32(a, 6);  a += c;
        c -= b; c ^= rot32(b, 8);  b += a;
        a -= c; a ^= rot32(c, 16); c += b;
        b -= a; b ^= rot32(a, 19); a += c;
        c -= b; c ^= rot32(b, 4);  b += a;
        len -= 12;
        k += 12;
    }
    if (len == 0)
        return c;
    unsigned char t[12] = {0};
    memcpy(t, k, len);
    a += t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 | (uint32_t)t[3] << 24;
    b += t[4] | (uint32_t)t[5] << 8 | (uint32_t)t[6] << 16 | (uint32_t)t[7] << 24;
    c += t[8] | (uint32_t)t[9] << 8 | (uint32_t)t[10] << 16 | (uint32_t)t[11] << 24;
    c ^= b; c -= rot32(b, 14);
    a ^= c; a -= rot32(c, 11);
    b ^= a; b -= rot32(a, 25);
    c ^= b; c -= rot32(b, 16);
    a ^= c; a -= rot32(c, 4);
    b ^= a; b -= rot32(a, 14);
    c ^= b; c -= rot32(b, 24);
    return c;
}

/* HDF5 1.10.8 bug (docs/capture-format.md, "HDF5 issues"): H5Fget_file_image
 * of a file with a version 2/3 superblock clears the file-consistency flags
 * in the image but keeps the checksum computed with them set, so the image
 * cannot be opened ("incorrect metadata checksum"). Recompute it. */
static void fix_superblock_checksum(unsigned char *img, size_t len)
{
    if (len < 12 || memcmp(img, "\211HDF\r\n\032\n", 8) != 0 || img[8] < 2)
        return;
    size_t so = img[9]; /* size of offsets; the superblock holds 4 of them */
    size_t body = 12 + 4 * so;
    if (so > 8 || body + 4 > len)
        return;
    uint32_t h = lookup3(img, body);
    for (int i = 0; i < 4; i++)
        img[body + (size_t)i] = (unsigned char)(h >> (8 * i));
}

int qmla_recipe_build(const uint8_t *data, size_t size, qmla_recipe *r)
{
    memset(r, 0, sizeof *r);
    H5E_auto2_t efn;
    void *edata;
    H5Eget_auto2(H5E_DEFAULT, &efn, &edata);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);

    B b = {0};
    b.p = data;
    b.n = size;
    b.r = r;
    unsigned flags = u8(&b);
    b.H = 1 + (int)pick(&b, 3);
    b.D = 1 + (int)pick(&b, 4);
    b.dc = 1 + (int)pick(&b, 4);
    b.dn = 1 + (int)pick(&b, 3);
    b.dr = 2 * (1 + (int)pick(&b, 2));
    b.dv = 1 + (int)pick(&b, 3);
    b.absurd = pick(&b, 64) == 63;

    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_core(fapl, 1 << 14, 0);
    if (flags & 1)
        H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    /* a name that cannot exist on disk (the core driver never touches it) */
    b.file = H5Fcreate("/dev/null/qmla-fuzz-recipe.h5", H5F_ACC_EXCL,
                       H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    int rc = -1;
    if (b.file < 0)
        goto out;
    hid_t blobs = H5Gcreate2(b.file, "/blobs", H5P_DEFAULT, H5P_DEFAULT,
                             H5P_DEFAULT);
    if (blobs >= 0)
        H5Gclose(blobs);
    build_root(&b);
    build_config(&b);
    build_layers(&b);
    if (H5Fflush(b.file, H5F_SCOPE_GLOBAL) < 0)
        b.hdf5_refused = 1;
    ssize_t len = H5Fget_file_image(b.file, NULL, 0);
    if (len > 0 && !b.hdf5_refused) {
        r->image = malloc((size_t)len);
        if (r->image &&
            H5Fget_file_image(b.file, r->image, (size_t)len) == len) {
            r->len = (size_t)len;
            fix_superblock_checksum(r->image, r->len);
            rc = 0;
        }
    }
    H5Fclose(b.file);
    if (rc == 0 && pick(&b, 32) == 31) {
        size_t keep = r->len * pick(&b, 256) / 256;
        r->len = keep;
        r->truncated = 1;
    }
out:
    H5Eset_auto2(H5E_DEFAULT, efn, edata);
    if (rc)
        qmla_recipe_free(r);
    return rc;
}

void qmla_recipe_free(qmla_recipe *r)
{
    free(r->image);
    r->image = NULL;
    r->len = 0;
}

/* ---- the oracle ------------------------------------------------------------ */

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int violation(char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return 1;
}

static int good_message(const qmla_error *e)
{
    return strncmp(e->msg, QMLA_RECIPE_LABEL ": ",
                   strlen(QMLA_RECIPE_LABEL) + 2) == 0 &&
           strstr(e->msg, "expected") && strstr(e->msg, "found");
}

static int known_status(int st)
{
    return st == QMLA_OK || st == QMLA_EFORMAT || st == QMLA_ERANGE ||
           st == QMLA_EIO || st == QMLA_ENONFINITE || st == QMLA_ENOMEM;
}

static int check_loads(qmla_capture *c, const qmla_recipe *r, char *why,
                       size_t cap)
{
    if (qmla_capture_n_layers(c) != (size_t)r->n_layers)
        return violation(why, cap, "n_layers %zu, recipe built %d",
                         qmla_capture_n_layers(c), r->n_layers);
    for (int li = 0; li < r->n_layers; li++) {
        if (qmla_capture_layer_index(c, (size_t)li) != r->layer_index[li])
            return violation(why, cap, "layer %d has index %d, recipe %d", li,
                             qmla_capture_layer_index(c, (size_t)li),
                             r->layer_index[li]);
        qmla_error e = {0};
        qmla_layer L;
        int st = qmla_capture_load_layer(c, (size_t)li, &L, &e);
        int want = r->layer_nonfinite[li] ? QMLA_ENONFINITE : QMLA_OK;
        qmla_layer_free(&L);
        if (st != want || (st && !good_message(&e)))
            return violation(why, cap, "load_layer %d: status %s, expected "
                             "%s: %s", li, qmla_status_name(st),
                             qmla_status_name(want), e.msg);
        if ((int)qmla_capture_n_cells(c, (size_t)li) != r->n_cells[li])
            return violation(why, cap, "layer %d: %zu cells, recipe %d", li,
                             qmla_capture_n_cells(c, (size_t)li),
                             r->n_cells[li]);
        for (int k = 0; k < r->n_cells[li]; k++) {
            size_t ci;
            if (!qmla_capture_find_cell(c, (size_t)li, r->cell_name[li][k],
                                        &ci))
                return violation(why, cap, "layer %d: cell \"%s\" not found",
                                 li, r->cell_name[li][k]);
            qmla_cell cell;
            qmla_error ce = {0};
            st = qmla_capture_load_cell(c, (size_t)li, ci, &cell, &ce);
            want = r->cell_nonfinite[li][k] ? QMLA_ENONFINITE : QMLA_OK;
            int shape_ok = st || (cell.N == r->cell_N[li][k] &&
                                  cell.T == r->cell_T[li][k] &&
                                  !cell.rope_cos == !r->cell_pre[li][k] &&
                                  strcmp(cell.name, r->cell_name[li][k]) == 0);
            qmla_cell_free(&cell);
            if (st != want || (st && !good_message(&ce)))
                return violation(why, cap, "load_cell %d/%s: status %s, "
                                 "expected %s: %s", li, r->cell_name[li][k],
                                 qmla_status_name(st), qmla_status_name(want),
                                 ce.msg);
            if (!shape_ok)
                return violation(why, cap, "load_cell %d/%s: N, T, name or "
                                 "optional tensors differ from the recipe",
                                 li, r->cell_name[li][k]);
        }
    }
    return 0;
}

int qmla_recipe_run(const uint8_t *data, size_t size, char *why, size_t cap)
{
    qmla_recipe r;
    why[0] = '\0';
    if (qmla_recipe_build(data, size, &r))
        return -1;
    qmla_capture *c = NULL;
    qmla_error err = {0};
    int st = qmla_capture_open_image(r.image, r.len, QMLA_RECIPE_LABEL, &c,
                                     &err);
    int bad = 0;
    int expect_ok = r.defects == 0 && !r.truncated;
    if (!known_status(st) || st == QMLA_ENONFINITE)
        bad = violation(why, cap, "open: unexpected status %d (%s): %s", st,
                        qmla_status_name(st), err.msg);
    else if (st && !good_message(&err))
        bad = violation(why, cap, "open: message lacks the label or "
                        "expected/found: \"%s\"", err.msg);
    else if (st && (c != NULL))
        bad = violation(why, cap, "open failed but returned a capture");
    else if (expect_ok && st)
        bad = violation(why, cap, "open rejected a valid capture: %s",
                        err.msg);
    else if (!expect_ok && !st)
        bad = violation(why, cap, "open accepted a defective capture (%d "
                        "defects, first: %s; truncated %d)", r.defects,
                        r.first_defect, r.truncated);
    else if (!st)
        bad = check_loads(c, &r, why, cap);
    qmla_capture_close(c);
    ssize_t left = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
    if (!bad && left != 0)
        bad = violation(why, cap, "%zd HDF5 file/object ids left open after "
                        "close", left);
    qmla_recipe_free(&r);
    return bad;
}
