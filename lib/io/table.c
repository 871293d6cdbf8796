/* table.c — generic HDF5 row tables (include/qmla/table.h): groups of 1-D
 * datasets read column by column with the HDF5 C API, any integer, float or
 * string type, plus attributes; and the derived per-layer table. */
#include "qmla/table.h"
#include "io/h5util.h"

#include <hdf5.h>
#include <sys/stat.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- values ------------------------------------------------------------- */

static void values_free(qmla_values *v)
{
    if (v->s)
        for (size_t k = 0; k < v->n; k++)
            free(v->s[k]);
    free(v->i);
    free(v->u);
    free(v->d);
    free(v->s);
    memset(v, 0, sizeof *v);
}

static int values_alloc(qmla_values *v, qmla_val_kind kind, size_t n)
{
    memset(v, 0, sizeof *v);
    v->kind = kind;
    v->n = n;
    const size_t m = n ? n : 1;
    switch (kind) {
    case QMLA_VAL_INT: v->i = calloc(m, sizeof *v->i); return v->i ? 0 : -1;
    case QMLA_VAL_UINT: v->u = calloc(m, sizeof *v->u); return v->u ? 0 : -1;
    case QMLA_VAL_FLOAT: v->d = calloc(m, sizeof *v->d); return v->d ? 0 : -1;
    case QMLA_VAL_STRING: v->s = calloc(m, sizeof *v->s); return v->s ? 0 : -1;
    }
    return -1;
}

double qmla_values_get(const qmla_values *v, size_t k)
{
    if (k >= v->n)
        return NAN;
    switch (v->kind) {
    case QMLA_VAL_INT: return (double)v->i[k];
    case QMLA_VAL_UINT: return (double)v->u[k];
    case QMLA_VAL_FLOAT: return v->d[k];
    default: return NAN;
    }
}

static char *dupstr(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* Kind of an HDF5 type, -1 if unsupported. */
static int type_kind(hid_t t)
{
    switch (H5Tget_class(t)) {
    case H5T_INTEGER: return H5Tget_sign(t) == H5T_SGN_NONE ? QMLA_VAL_UINT : QMLA_VAL_INT;
    case H5T_FLOAT: return QMLA_VAL_FLOAT;
    case H5T_STRING: return QMLA_VAL_STRING;
    default: return -1;
    }
}

static const char *kind_name(int k)
{
    switch (k) {
    case QMLA_VAL_INT: return "signed integer";
    case QMLA_VAL_UINT: return "unsigned integer";
    case QMLA_VAL_FLOAT: return "float";
    case QMLA_VAL_STRING: return "string";
    default: return "unsupported";
    }
}

/* Read n values of file type ftype from a dataset (is_attr 0) or attribute
 * (is_attr 1) into v. Returns 0 or -1 (HDF5 failure / out of memory). */
static int read_values(hid_t obj, int is_attr, hid_t ftype, size_t n, qmla_values *v)
{
    const int kind = type_kind(ftype);
    if (kind < 0 || values_alloc(v, (qmla_val_kind)kind, n))
        return -1;
    if (n == 0)
        return 0;
    herr_t e = 0;
    if (kind == QMLA_VAL_INT || kind == QMLA_VAL_UINT || kind == QMLA_VAL_FLOAT) {
        hid_t mt = kind == QMLA_VAL_INT ? H5T_NATIVE_INT64
                   : kind == QMLA_VAL_UINT ? H5T_NATIVE_UINT64 : H5T_NATIVE_DOUBLE;
        void *buf = kind == QMLA_VAL_INT ? (void *)v->i
                    : kind == QMLA_VAL_UINT ? (void *)v->u : (void *)v->d;
        e = is_attr ? H5Aread(obj, mt, buf) : H5Dread(obj, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
        return e < 0 ? -1 : 0;
    }
    /* strings */
    hid_t mt = H5Tcopy(H5T_C_S1);
    H5Tset_cset(mt, H5Tget_cset(ftype));
    if (H5Tis_variable_str(ftype) > 0) {
        H5Tset_size(mt, H5T_VARIABLE);
        char **raw = calloc(n, sizeof *raw);
        if (!raw) {
            H5Tclose(mt);
            return -1;
        }
        e = is_attr ? H5Aread(obj, mt, raw) : H5Dread(obj, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw);
        int rc = e < 0 ? -1 : 0;
        for (size_t k = 0; k < n && !rc; k++)
            if (!(v->s[k] = dupstr(raw[k] ? raw[k] : "")))
                rc = -1;
        if (e >= 0) {
            hid_t sp = H5Screate_simple(1, (hsize_t[]){n}, NULL);
#if H5_VERSION_GE(1, 12, 0)
            H5Treclaim(mt, sp, H5P_DEFAULT, raw);
#else
            H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, raw);
#endif
            H5Sclose(sp);
        }
        free(raw);
        H5Tclose(mt);
        return rc;
    }
    const size_t w = H5Tget_size(ftype);
    H5Tset_size(mt, w);
    H5Tset_strpad(mt, H5T_STR_NULLPAD);
    char *buf = calloc(n, w ? w : 1);
    int rc = -1;
    if (buf) {
        e = is_attr ? H5Aread(obj, mt, buf) : H5Dread(obj, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
        rc = e < 0 ? -1 : 0;
        for (size_t k = 0; k < n && !rc; k++) {
            char *s = malloc(w + 1);
            if (!s) {
                rc = -1;
                break;
            }
            memcpy(s, buf + k * w, w);
            s[w] = '\0';
            /* trailing space padding (H5T_STR_SPACEPAD files) */
            for (size_t j = strlen(s); j > 0 && s[j - 1] == ' '; j--)
                s[j - 1] = '\0';
            v->s[k] = s;
        }
    }
    free(buf);
    H5Tclose(mt);
    return rc;
}

/* ---- attributes --------------------------------------------------------- */

typedef struct attr_list {
    qmla_attr *a;
    size_t n, cap;
    int oom;
} attr_list;

static herr_t attr_cb(hid_t loc, const char *name, const H5A_info_t *info, void *p)
{
    (void)info;
    attr_list *L = p;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0)
        return 0;
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    const int rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    hssize_t npts = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    if (t >= 0 && type_kind(t) >= 0 && (rank == 0 || rank == 1) && npts >= 0) {
        if (L->n == L->cap) {
            size_t cap = L->cap ? 2 * L->cap : 16;
            qmla_attr *na = realloc(L->a, cap * sizeof *na);
            if (!na) {
                L->oom = 1;
                goto done;
            }
            L->a = na;
            L->cap = cap;
        }
        qmla_attr *x = &L->a[L->n];
        memset(x, 0, sizeof *x);
        x->scalar = rank == 0;
        x->name = dupstr(name);
        if (!x->name || read_values(a, 1, t, (size_t)npts, &x->v)) {
            free(x->name);
            values_free(&x->v);
        } else {
            L->n++;
        }
    }
done:
    if (t >= 0)
        H5Tclose(t);
    if (sp >= 0)
        H5Sclose(sp);
    H5Aclose(a);
    return L->oom ? -1 : 0;
}

void qmla_attrs_free(qmla_attr *attrs, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        free(attrs[k].name);
        values_free(&attrs[k].v);
    }
    free(attrs);
}

static int read_attrs(hid_t obj, qmla_attr **attrs, size_t *n)
{
    attr_list L = {NULL, 0, 0, 0};
    hsize_t idx = 0;
    H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, attr_cb, &L);
    if (L.oom) {
        qmla_attrs_free(L.a, L.n);
        return -1;
    }
    *attrs = L.a;
    *n = L.n;
    return 0;
}

const qmla_attr *qmla_attr_find(const qmla_attr *a, size_t n, const char *name)
{
    for (size_t k = 0; k < n; k++)
        if (!strcmp(a[k].name, name))
            return &a[k];
    return NULL;
}

/* Open an HDF5 file read-only, with a message on failure. */
static hid_t open_file(const char *path, qmla_error *err)
{
    htri_t ish = H5Fis_hdf5(path);
    if (ish <= 0) {
        struct stat sb;
        if (stat(path, &sb) != 0)
            return qmla_error_set(err, qmla_status_from_errno(errno), "%s: cannot open: %s", path,
                                  strerror(errno)), -1;
        if (S_ISDIR(sb.st_mode))
            return qmla_error_set(err, QMLA_EIO, "%s: cannot open: expected an HDF5 file, found a "
                                  "directory", path), -1;
        FILE *f = fopen(path, "rb");
        if (!f)
            return qmla_error_set(err, qmla_status_from_errno(errno), "%s: cannot open: %s", path,
                                  strerror(errno)), -1;
        fclose(f);
        return qmla_error_set(err, QMLA_EFORMAT, "%s: not an HDF5 file (expected a qmla-results file)", path), -1;
    }
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        char h5[256];
        qmla_h5_error_text(h5, sizeof h5);
        qmla_error_set(err, QMLA_EIO, "%s: cannot open as HDF5 (%s)", path, h5);
    }
    return f;
}

int qmla_file_attrs(const char *path, qmla_attr **attrs, size_t *n, qmla_error *err)
{
    *attrs = NULL;
    *n = 0;
    h5_quiet q = qmla_h5_quiet_begin();
    hid_t f = open_file(path, err);
    int st = QMLA_OK;
    if (f < 0)
        st = err ? err->status : QMLA_EIO;
    else if (read_attrs(f, attrs, n))
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory reading root attributes", path);
    if (f >= 0)
        H5Fclose(f);
    qmla_h5_quiet_end(q);
    return st;
}

/* Close a group and its file (either may be -1), end the quiet HDF5 error
 * stack; st passes through. */
static int close_fg(hid_t f, hid_t g, h5_quiet q, int st)
{
    if (g >= 0)
        H5Gclose(g);
    if (f >= 0)
        H5Fclose(f);
    qmla_h5_quiet_end(q);
    return st;
}

/* ---- tables ------------------------------------------------------------- */

typedef struct member {
    char *name;
    int is_dataset;
    haddr_t addr; /* object header address: creation order of a write-once file */
    int64_t crt;  /* creation-order index, -1 when not tracked */
} member;

typedef struct member_list {
    member *m;
    size_t n, cap;
    int oom;
} member_list;

static herr_t member_cb(hid_t g, const char *name, const H5L_info_t *li, void *p)
{
    member_list *L = p;
    if (L->n == L->cap) {
        size_t cap = L->cap ? 2 * L->cap : 16;
        member *nm = realloc(L->m, cap * sizeof *nm);
        if (!nm) {
            L->oom = 1;
            return -1;
        }
        L->m = nm;
        L->cap = cap;
    }
    member *x = &L->m[L->n];
    memset(x, 0, sizeof *x);
    x->crt = li->corder_valid ? li->corder : -1;
    x->name = dupstr(name);
    if (!x->name) {
        L->oom = 1;
        return -1;
    }
    x->is_dataset = 0;
    if (li->type == H5L_TYPE_HARD) {
#if H5_VERSION_GE(1, 12, 0)
        H5O_info2_t oi;
        if (H5Oget_info_by_name3(g, name, &oi, H5O_INFO_BASIC, H5P_DEFAULT) >= 0) {
            x->is_dataset = oi.type == H5O_TYPE_DATASET;
            haddr_t a = 0;
            memcpy(&a, &oi.token, sizeof a < sizeof oi.token ? sizeof a : sizeof oi.token);
            x->addr = a;
        }
#else
        H5O_info_t oi;
        if (H5Oget_info_by_name2(g, name, &oi, H5O_INFO_BASIC, H5P_DEFAULT) >= 0) {
            x->is_dataset = oi.type == H5O_TYPE_DATASET;
            x->addr = oi.addr;
        }
#endif
    }
    L->n++;
    return 0;
}

static int cmp_member(const void *pa, const void *pb)
{
    const member *a = pa, *b = pb;
    if (a->crt >= 0 && b->crt >= 0)
        return (a->crt > b->crt) - (a->crt < b->crt);
    if (a->addr != b->addr)
        return (a->addr > b->addr) - (a->addr < b->addr);
    return strcmp(a->name, b->name);
}

static void members_free(member_list *L)
{
    for (size_t k = 0; k < L->n; k++)
        free(L->m[k].name);
    free(L->m);
    memset(L, 0, sizeof *L);
}

/* Members of group g, in creation order (tracked) or address order. */
static int list_members(hid_t g, member_list *L)
{
    memset(L, 0, sizeof *L);
    hsize_t idx = 0;
    herr_t e = H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, member_cb, L);
    if (L->oom || e < 0) {
        members_free(L);
        return -1;
    }
    if (L->n > 1) /* (qsort of a null array is undefined, even of 0 items) */
        qsort(L->m, L->n, sizeof *L->m, cmp_member);
    return 0;
}

static void column_free(qmla_table_col *c)
{
    free(c->name);
    free(c->units);
    free(c->description);
    values_free(&c->v);
}

void qmla_table_free(qmla_table *t)
{
    if (!t)
        return;
    for (size_t k = 0; k < t->n_cols; k++)
        column_free(&t->cols[k]);
    free(t->cols);
    qmla_attrs_free(t->attrs, t->n_attrs);
    free(t->name);
    free(t);
}

const qmla_table_col *qmla_table_column(const qmla_table *t, const char *name)
{
    for (size_t k = 0; k < t->n_cols; k++)
        if (!strcmp(t->cols[k].name, name))
            return &t->cols[k];
    return NULL;
}

/* A string attribute of a dataset ("" when absent or not a string). */
static char *string_attr(hid_t d, const char *name)
{
    char *out = NULL;
    if (H5Aexists(d, name) > 0) {
        hid_t a = H5Aopen(d, name, H5P_DEFAULT);
        hid_t t = a >= 0 ? H5Aget_type(a) : -1;
        hid_t sp = a >= 0 ? H5Aget_space(a) : -1;
        if (t >= 0 && sp >= 0 && H5Tget_class(t) == H5T_STRING &&
            H5Sget_simple_extent_npoints(sp) == 1) {
            qmla_values v;
            if (!read_values(a, 1, t, 1, &v)) {
                out = v.s[0];
                v.s[0] = NULL;
            }
            values_free(&v);
        }
        if (t >= 0)
            H5Tclose(t);
        if (sp >= 0)
            H5Sclose(sp);
        if (a >= 0)
            H5Aclose(a);
    }
    return out ? out : dupstr("");
}

/* Is group g a table? Sets *rows. 1 yes, 0 no. */
static int group_is_table(hid_t g, const member_list *L, hsize_t *rows)
{
    if (L->n == 0)
        return 0;
    for (size_t k = 0; k < L->n; k++) {
        if (!L->m[k].is_dataset)
            return 0;
        hid_t d = H5Dopen2(g, L->m[k].name, H5P_DEFAULT);
        if (d < 0)
            return 0;
        hid_t sp = H5Dget_space(d);
        hsize_t dims[1] = {0};
        int ok = sp >= 0 && H5Sget_simple_extent_ndims(sp) == 1;
        if (ok)
            H5Sget_simple_extent_dims(sp, dims, NULL);
        if (sp >= 0)
            H5Sclose(sp);
        H5Dclose(d);
        if (!ok || (k > 0 && dims[0] != *rows))
            return 0;
        *rows = dims[0];
    }
    return 1;
}

typedef struct name_list {
    char **s;
    size_t n, cap;
    int oom;
} name_list;

static int names_push(name_list *L, const char *s)
{
    if (L->n == L->cap) {
        size_t cap = L->cap ? 2 * L->cap : 8;
        char **ns = realloc(L->s, cap * sizeof *ns);
        if (!ns)
            return L->oom = 1, -1;
        L->s = ns;
        L->cap = cap;
    }
    if (!(L->s[L->n] = dupstr(s)))
        return L->oom = 1, -1;
    L->n++;
    return 0;
}

static herr_t root_cb(hid_t f, const char *name, const H5L_info_t *li, void *p)
{
    name_list *L = p;
    if (li->type != H5L_TYPE_HARD)
        return 0;
    H5O_type_t type = H5O_TYPE_UNKNOWN;
#if H5_VERSION_GE(1, 12, 0)
    H5O_info2_t oi;
    if (H5Oget_info_by_name3(f, name, &oi, H5O_INFO_BASIC, H5P_DEFAULT) >= 0)
        type = oi.type;
#else
    H5O_info_t oi;
    if (H5Oget_info_by_name2(f, name, &oi, H5O_INFO_BASIC, H5P_DEFAULT) >= 0)
        type = oi.type;
#endif
    if (type != H5O_TYPE_GROUP)
        return 0;
    hid_t g = H5Gopen2(f, name, H5P_DEFAULT);
    if (g < 0)
        return 0;
    member_list M;
    hsize_t rows = 0;
    int is = !list_members(g, &M) && group_is_table(g, &M, &rows);
    members_free(&M);
    H5Gclose(g);
    return is ? names_push(L, name) : 0;
}

static int collect_names(const char *path, int nested, char ***names, size_t *n,
                         qmla_error *err);

int qmla_table_names(const char *path, char ***names, size_t *n, qmla_error *err)
{
    return collect_names(path, 0, names, n, err);
}

/* "responses, summary" for messages: the root tables (nested 0) or every
 * table (nested 1). */
static void names_text(const char *path, int nested, char *buf, size_t cap)
{
    char **names;
    size_t n;
    buf[0] = '\0';
    if (collect_names(path, nested, &names, &n, NULL)) {
        snprintf(buf, cap, "(none)");
        return;
    }
    size_t used = 0;
    for (size_t k = 0; k < n; k++) {
        int w = snprintf(buf + used, cap - used, "%s%s", k ? ", " : "", names[k]);
        if (w > 0 && (size_t)w < cap - used)
            used += (size_t)w;
        free(names[k]);
    }
    free(names);
    if (!n)
        snprintf(buf, cap, "(none)");
}

/* Read group g (path `name` in the file) of an open file as table `tname`:
 * every member when `section` is 0 (each must be a 1-D dataset of one
 * length), else only its 1-D datasets of `want` rows (the others skipped). */
static int read_group(hid_t g, const char *path, const char *name, const char *tname,
                      int section, hsize_t want, qmla_table **out, qmla_error *err)
{
    *out = NULL;
    int st = QMLA_OK;
    qmla_table *t = NULL;
    member_list M = {NULL, 0, 0, 0};
    if (list_members(g, &M)) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: cannot list group /%s", path, name);
        goto out;
    }
    t = calloc(1, sizeof *t);
    if (!t || !(t->name = dupstr(tname)) ||
        !(t->cols = calloc(M.n ? M.n : 1, sizeof *t->cols))) {
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    for (size_t k = 0; k < M.n; k++) {
        const char *cn = M.m[k].name;
        if (section && !M.m[k].is_dataset)
            continue;
        if (!M.m[k].is_dataset) {
            st = qmla_error_set(err, QMLA_EFORMAT,
                                "%s: /%s/%s: expected a 1-D dataset (a table column), found a group or link",
                                path, name, cn);
            goto out;
        }
        hid_t d = H5Dopen2(g, cn, H5P_DEFAULT);
        if (d < 0) {
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: /%s/%s: cannot open dataset", path, name, cn);
            goto out;
        }
        hid_t sp = H5Dget_space(d), ty = H5Dget_type(d);
        const int rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
        hsize_t dims[1] = {0};
        if (rank == 1)
            H5Sget_simple_extent_dims(sp, dims, NULL);
        const int kind = ty >= 0 ? type_kind(ty) : -1;
        if (section && (rank != 1 || dims[0] != want)) {
            if (ty >= 0)
                H5Tclose(ty);
            if (sp >= 0)
                H5Sclose(sp);
            H5Dclose(d);
            continue;
        }
        if (rank != 1)
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: /%s/%s: expected a 1-D dataset, found rank %d",
                                path, name, cn, rank);
        else if (t->n_cols > 0 && dims[0] != t->n_rows)
            st = qmla_error_set(err, QMLA_EFORMAT,
                                "%s: /%s/%s: expected %zu rows (as /%s/%s), found %llu", path, name,
                                cn, t->n_rows, name, t->cols[0].name, (unsigned long long)dims[0]);
        else if (kind < 0)
            st = qmla_error_set(err, QMLA_EFORMAT,
                                "%s: /%s/%s: expected an integer, float or string type, found HDF5 class %d",
                                path, name, cn, (int)H5Tget_class(ty));
        else if (dims[0] > ((hsize_t)1 << 40))
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: /%s/%s: absurd length %llu", path, name, cn,
                                (unsigned long long)dims[0]);
        if (!st) {
            t->n_rows = (size_t)dims[0];
            qmla_table_col *c = &t->cols[t->n_cols];
            memset(c, 0, sizeof *c);
            c->name = dupstr(cn);
            c->units = string_attr(d, "units");
            c->description = string_attr(d, "description");
            if (!c->name || !c->units || !c->description) {
                column_free(c);
                st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
            } else if (read_values(d, 0, ty, t->n_rows, &c->v)) {
                char h5[256];
                qmla_h5_error_text(h5, sizeof h5);
                column_free(c);
                st = qmla_error_set(err, QMLA_EFORMAT, "%s: /%s/%s: cannot read %zu %s values (%s)",
                                    path, name, cn, t->n_rows, kind_name(kind), h5);
            } else {
                t->n_cols++;
            }
        }
        if (ty >= 0)
            H5Tclose(ty);
        if (sp >= 0)
            H5Sclose(sp);
        H5Dclose(d);
        if (st)
            goto out;
    }
    if (read_attrs(g, &t->attrs, &t->n_attrs))
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
out:
    members_free(&M);
    if (st)
        qmla_table_free(t);
    else
        *out = t;
    return st;
}


int qmla_table_read(const char *path, const char *name, qmla_table **out, qmla_error *err)
{
    *out = NULL;
    h5_quiet q = qmla_h5_quiet_begin();
    int st = QMLA_OK;
    hid_t g = -1, f = open_file(path, err);
    if (f < 0) {
        st = err ? err->status : QMLA_EIO;
        goto out;
    }
    if (!name[0] || strchr(name, '/') || H5Lexists(f, name, H5P_DEFAULT) <= 0 ||
        (g = H5Gopen2(f, name, H5P_DEFAULT)) < 0) {
        char have[512];
        names_text(path, 0, have, sizeof have);
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: no table /%s (expected one of: %s)",
                            path, name, have);
        goto out;
    }
    st = read_group(g, path, name, name, 0, 0, out, err);
out:
    return close_fg(f, g, q, st);
}

/* ---- every table of a file: nested groups and sections ------------------ */

/* The lengths of the 1-D datasets of group g (members M, in order): distinct
 * lengths in first-seen order into len/cnt (at most cap), their number
 * returned; *main the index of the length most of them share (ties: the
 * first seen). */
static size_t group_sections(hid_t g, const member_list *M, hsize_t *len, size_t *cnt,
                             size_t cap, size_t *main)
{
    size_t n = 0;
    *main = 0;
    for (size_t k = 0; k < M->n; k++) {
        if (!M->m[k].is_dataset)
            continue;
        hid_t d = H5Dopen2(g, M->m[k].name, H5P_DEFAULT);
        if (d < 0)
            continue;
        hid_t sp = H5Dget_space(d);
        hsize_t dims[1] = {0};
        const int one = sp >= 0 && H5Sget_simple_extent_ndims(sp) == 1;
        if (one)
            H5Sget_simple_extent_dims(sp, dims, NULL);
        if (sp >= 0)
            H5Sclose(sp);
        H5Dclose(d);
        if (!one)
            continue;
        size_t j = 0;
        while (j < n && len[j] != dims[0])
            j++;
        if (j == n) {
            if (n == cap)
                continue;
            len[n] = dims[0];
            cnt[n++] = 0;
        }
        cnt[j]++;
    }
    for (size_t j = 1; j < n; j++)
        if (cnt[j] > cnt[*main])
            *main = j;
    return n;
}

#define MAX_SECTIONS 64

/* One group's tables: its name for the main length, NAME:L for the others. */
static int group_tables(hid_t f, const char *name, name_list *L)
{
    hid_t g = H5Gopen2(f, name, H5P_DEFAULT);
    if (g < 0)
        return 0;
    member_list M;
    int rc = 0;
    if (!list_members(g, &M)) {
        hsize_t len[MAX_SECTIONS];
        size_t cnt[MAX_SECTIONS], main;
        const size_t n = group_sections(g, &M, len, cnt, MAX_SECTIONS, &main);
        for (size_t j = 0; j < n && !rc; j++) {
            if (j == main) {
                rc = names_push(L, name);
            } else {
                char buf[1024];
                snprintf(buf, sizeof buf, "%s:%llu", name, (unsigned long long)len[j]);
                rc = names_push(L, buf);
            }
        }
        members_free(&M);
    }
    H5Gclose(g);
    return rc;
}

#if H5_VERSION_GE(1, 12, 0)
static herr_t visit_cb(hid_t f, const char *name, const H5O_info2_t *oi, void *p)
#else
static herr_t visit_cb(hid_t f, const char *name, const H5O_info_t *oi, void *p)
#endif
{
    if (oi->type != H5O_TYPE_GROUP || !strcmp(name, "."))
        return 0;
    return group_tables(f, name, p) ? -1 : 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The root tables (nested 0: qmla_table_names) or every table (nested 1:
 * qmla_table_list) of path. */
static int collect_names(const char *path, int nested, char ***names, size_t *n,
                         qmla_error *err)
{
    *names = NULL;
    *n = 0;
    h5_quiet q = qmla_h5_quiet_begin();
    int st = QMLA_OK;
    hid_t f = open_file(path, err);
    if (f < 0) {
        st = err ? err->status : QMLA_EIO;
        goto out;
    }
    name_list L = {NULL, 0, 0, 0};
    hsize_t idx = 0;
    if (!nested)
        H5Literate(f, H5_INDEX_NAME, H5_ITER_INC, &idx, root_cb, &L);
    else
#if H5_VERSION_GE(1, 12, 0)
        H5Ovisit3(f, H5_INDEX_NAME, H5_ITER_INC, visit_cb, &L, H5O_INFO_BASIC);
#else
        H5Ovisit2(f, H5_INDEX_NAME, H5_ITER_INC, visit_cb, &L, H5O_INFO_BASIC);
#endif
    if (L.oom) {
        for (size_t k = 0; k < L.n; k++)
            free(L.s[k]);
        free(L.s);
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    if (nested && L.n > 1)
        qsort(L.s, L.n, sizeof *L.s, cmp_str);
    *names = L.s;
    *n = L.n;
out:
    if (f >= 0)
        H5Fclose(f);
    qmla_h5_quiet_end(q);
    return st;
}

int qmla_table_list(const char *path, char ***names, size_t *n, qmla_error *err)
{
    return collect_names(path, 1, names, n, err);
}

/* Is `name` (no leading '/') a group of f? */
static int is_group(hid_t f, const char *name)
{
    if (!name[0] || name[0] == '/' || strstr(name, "//") || name[strlen(name) - 1] == '/')
        return 0;
    /* every prefix must exist for H5Lexists on a path */
    char buf[1024];
    if (strlen(name) >= sizeof buf)
        return 0;
    strcpy(buf, name);
    for (char *p = buf; (p = strchr(p, '/')); *p++ = '/') {
        *p = '\0';
        if (H5Lexists(f, buf, H5P_DEFAULT) <= 0)
            return 0;
    }
    if (H5Lexists(f, name, H5P_DEFAULT) <= 0)
        return 0;
#if H5_VERSION_GE(1, 12, 0)
    H5O_info2_t oi;
    if (H5Oget_info_by_name3(f, name, &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0)
        return 0;
#else
    H5O_info_t oi;
    if (H5Oget_info_by_name2(f, name, &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0)
        return 0;
#endif
    return oi.type == H5O_TYPE_GROUP;
}

int qmla_table_read_any(const char *path, const char *name, qmla_table **out, qmla_error *err)
{
    *out = NULL;
    h5_quiet q = qmla_h5_quiet_begin();
    int st = QMLA_OK;
    hid_t g = -1, f = open_file(path, err);
    member_list M = {NULL, 0, 0, 0};
    char gname[1024];
    hsize_t want = 0;
    int explicit_len = 0;
    if (f < 0) {
        st = err ? err->status : QMLA_EIO;
        goto out;
    }
    snprintf(gname, sizeof gname, "%s", name);
    if (!is_group(f, gname)) {
        char *c = strrchr(gname, ':');
        char *end = NULL;
        if (c && c[1] >= '0' && c[1] <= '9') {
            unsigned long long v = strtoull(c + 1, &end, 10);
            if (end && !*end) {
                *c = '\0';
                want = (hsize_t)v;
                explicit_len = 1;
            }
        }
    }
    if (!is_group(f, gname) || (g = H5Gopen2(f, gname, H5P_DEFAULT)) < 0) {
        char have[2048];
        names_text(path, 1, have, sizeof have);
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: no table /%s (expected one of: %s)", path,
                            name, have);
        goto out;
    }
    if (list_members(g, &M)) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: cannot list group /%s", path, gname);
        goto out;
    }
    hsize_t len[MAX_SECTIONS];
    size_t cnt[MAX_SECTIONS], main;
    const size_t ns = group_sections(g, &M, len, cnt, MAX_SECTIONS, &main);
    if (!explicit_len) {
        hsize_t rows = 0;
        if (!ns || group_is_table(g, &M, &rows)) {
            /* a plain table, or nothing tabular: the strict reader's answer */
            st = read_group(g, path, gname, name, 0, 0, out, err);
            goto out;
        }
        want = len[main];
    } else {
        size_t j = 0;
        while (j < ns && len[j] != want)
            j++;
        if (j == ns || j == main) {
            char have[2048];
            names_text(path, 1, have, sizeof have);
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: no table /%s (expected one of: %s)",
                                path, name, have);
            goto out;
        }
    }
    st = read_group(g, path, gname, name, 1, want, out, err);
out:
    members_free(&M);
    return close_fg(f, g, q, st);
}

static int open_group(hid_t f, const char *path, const char *group, hid_t *g, qmla_error *err)
{
    if (!group[0] || !strcmp(group, "/")) {
        *g = H5Gopen2(f, "/", H5P_DEFAULT);
    } else if (!is_group(f, group) || (*g = H5Gopen2(f, group, H5P_DEFAULT)) < 0) {
        *g = -1;
        return qmla_error_set(err, QMLA_EFORMAT, "%s: /%s: expected a group, found %s", path,
                              group, H5Lexists(f, group, H5P_DEFAULT) > 0 ? "a dataset" : "none");
    }
    return *g < 0 ? qmla_error_set(err, QMLA_EIO, "%s: cannot open /%s", path, group) : QMLA_OK;
}

int qmla_group_attrs(const char *path, const char *group, qmla_attr **attrs, size_t *n,
                     qmla_error *err)
{
    *attrs = NULL;
    *n = 0;
    h5_quiet q = qmla_h5_quiet_begin();
    hid_t g = -1, f = open_file(path, err);
    int st = f < 0 ? (err ? err->status : QMLA_EIO) : open_group(f, path, group, &g, err);
    if (!st && read_attrs(g, attrs, n))
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory reading /%s's attributes", path,
                            group);
    return close_fg(f, g, q, st);
}

int qmla_group_children(const char *path, const char *group, char ***names, size_t *n,
                        int groups, qmla_error *err)
{
    *names = NULL;
    *n = 0;
    h5_quiet q = qmla_h5_quiet_begin();
    hid_t g = -1, f = open_file(path, err);
    int st = f < 0 ? (err ? err->status : QMLA_EIO) : open_group(f, path, group, &g, err);
    member_list M = {NULL, 0, 0, 0};
    if (!st && list_members(g, &M))
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: cannot list /%s", path, group);
    name_list L = {NULL, 0, 0, 0};
    for (size_t k = 0; !st && k < M.n; k++)
        if (M.m[k].is_dataset != groups && names_push(&L, M.m[k].name))
            st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
    if (st) {
        for (size_t k = 0; k < L.n; k++)
            free(L.s[k]);
        free(L.s);
    } else {
        if (L.n > 1)
            qsort(L.s, L.n, sizeof *L.s, cmp_str);
        *names = L.s;
        *n = L.n;
    }
    members_free(&M);
    return close_fg(f, g, q, st);
}

/* ---- building tables ---------------------------------------------------- */

int qmla_table_alloc(const char *name, size_t n_rows, qmla_table **out, qmla_error *err)
{
    qmla_table *t = calloc(1, sizeof *t);
    if (!t || !(t->name = dupstr(name))) {
        free(t);
        return qmla_error_set(err, QMLA_ENOMEM, "table %s: out of memory", name);
    }
    t->n_rows = n_rows;
    *out = t;
    return QMLA_OK;
}

int qmla_table_add_column(qmla_table *t, const char *name, const char *units,
                          const char *description, qmla_val_kind kind, const void *data,
                          qmla_error *err)
{
    qmla_table_col *nc = realloc(t->cols, (t->n_cols + 1) * sizeof *nc);
    if (!nc)
        return qmla_error_set(err, QMLA_ENOMEM, "table %s: out of memory", t->name);
    t->cols = nc;
    qmla_table_col *c = &t->cols[t->n_cols];
    memset(c, 0, sizeof *c);
    c->name = dupstr(name);
    c->units = dupstr(units ? units : "");
    c->description = dupstr(description ? description : "");
    int bad = !c->name || !c->units || !c->description || values_alloc(&c->v, kind, t->n_rows);
    for (size_t k = 0; !bad && k < t->n_rows; k++) {
        switch (kind) {
        case QMLA_VAL_INT: c->v.i[k] = ((const int64_t *)data)[k]; break;
        case QMLA_VAL_UINT: c->v.u[k] = ((const uint64_t *)data)[k]; break;
        case QMLA_VAL_FLOAT: c->v.d[k] = ((const double *)data)[k]; break;
        case QMLA_VAL_STRING:
            bad = !(c->v.s[k] = dupstr(((const char *const *)data)[k]));
            break;
        }
    }
    if (bad) {
        column_free(c);
        return qmla_error_set(err, QMLA_ENOMEM, "table %s: out of memory", t->name);
    }
    t->n_cols++;
    return QMLA_OK;
}

/* ---- the per-layer table ------------------------------------------------ */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Whether string column c (n rows) holds the value v. */
static int column_has(const qmla_table_col *c, size_t n, const char *v)
{
    for (size_t k = 0; k < n; k++)
        if (!strcmp(c->v.s[k], v))
            return 1;
    return 0;
}

int qmla_table_by_layer(const qmla_table *r, qmla_table **out, qmla_error *err)
{
    *out = NULL;
    const qmla_table_col *layer = qmla_table_column(r, "layer"),
                      *cell = qmla_table_column(r, "cell"),
                      *path = qmla_table_column(r, "path"),
                      *degen = qmla_table_column(r, "degenerate");
    if (!layer || (layer->v.kind != QMLA_VAL_INT && layer->v.kind != QMLA_VAL_UINT) || !cell ||
        cell->v.kind != QMLA_VAL_STRING || !path || path->v.kind != QMLA_VAL_STRING)
        return qmla_error_set(err, QMLA_EFORMAT,
                              "table %s: expected integer column layer and string columns cell "
                              "and path, found %s%s%s",
                              r->name, layer ? "" : "no layer ", cell ? "" : "no cell ",
                              path ? "" : "no path");
    const size_t n = r->n_rows;
    int st = QMLA_OK;
    int64_t *layers = malloc((n ? n : 1) * sizeof *layers);
    char *done = malloc(n ? n : 1);
    double *acc = NULL;
    qmla_table *t = NULL;
    if (!layers || !done) {
        st = qmla_error_set(err, QMLA_ENOMEM, "table %s: out of memory", r->name);
        goto out;
    }
    for (size_t k = 0; k < n; k++)
        layers[k] = (int64_t)qmla_values_get(&layer->v, k);
    qsort(layers, n, sizeof *layers, cmp_i64);
    size_t nl = 0;
    for (size_t k = 0; k < n; k++)
        if (nl == 0 || layers[nl - 1] != layers[k])
            layers[nl++] = layers[k];
    if ((st = qmla_table_alloc("responses_by_layer", nl, &t, err)))
        goto out;
    if ((st = qmla_table_add_column(t, "layer", layer->units, "layer index", QMLA_VAL_INT, layers,
                                    err)))
        goto out;
    acc = malloc((nl ? nl : 1) * sizeof *acc);
    if (!acc) {
        st = qmla_error_set(err, QMLA_ENOMEM, "table %s: out of memory", r->name);
        goto out;
    }
    static const char *const paths[2] = {"content", "rope"};
    for (int p = 0; p < 2; p++) {
        if (!column_has(path, n, paths[p]))
            continue;
        for (size_t c = 0; c < r->n_cols; c++) {
            const qmla_table_col *x = &r->cols[c];
            const int count = x == layer; /* the layer column slot: P_n_items */
            if (x->v.kind != QMLA_VAL_FLOAT && !count)
                continue;
            for (size_t li = 0; li < nl; li++) {
                /* mean over cells of the mean over sequences, as
                 * qmla_summary_compute (lib/sweep/sweep.c) */
                double cell_sum = 0.0;
                size_t cells = 0, items = 0;
                memset(done, 0, n ? n : 1);
                for (size_t k = 0; k < n; k++) {
                    if (done[k] || (int64_t)qmla_values_get(&layer->v, k) != layers[li] ||
                        strcmp(path->v.s[k], paths[p]))
                        continue;
                    double seq_sum = 0.0;
                    size_t seqs = 0;
                    for (size_t j = k; j < n; j++) {
                        if ((int64_t)qmla_values_get(&layer->v, j) != layers[li] ||
                            strcmp(path->v.s[j], paths[p]) || strcmp(cell->v.s[j], cell->v.s[k]))
                            continue;
                        done[j] = 1;
                        if (!(degen && qmla_values_get(&degen->v, j) != 0.0)) {
                            seq_sum += count ? 0.0 : x->v.d[j];
                            seqs++;
                        }
                    }
                    if (seqs) {
                        cell_sum += seq_sum / (double)seqs;
                        cells++;
                        items += seqs;
                    }
                }
                acc[li] = count ? (double)items : cells ? cell_sum / (double)cells : NAN;
            }
            char cname[256], desc[1024];
            if (count) {
                snprintf(cname, sizeof cname, "%s_n_items", paths[p]);
                snprintf(desc, sizeof desc, "%s path: non-degenerate rows averaged", paths[p]);
                int64_t *cnt = malloc((nl ? nl : 1) * sizeof *cnt);
                if (!cnt) {
                    st = qmla_error_set(err, QMLA_ENOMEM, "table %s: out of memory", r->name);
                    goto out;
                }
                for (size_t li = 0; li < nl; li++)
                    cnt[li] = (int64_t)acc[li];
                st = qmla_table_add_column(t, cname, "", desc, QMLA_VAL_INT, cnt, err);
                free(cnt);
            } else {
                snprintf(cname, sizeof cname, "%s_%s", paths[p], x->name);
                snprintf(desc, sizeof desc, "%s path, mean over cells of the mean over sequences: %s",
                         paths[p], x->description[0] ? x->description : x->name);
                st = qmla_table_add_column(t, cname, x->units, desc, QMLA_VAL_FLOAT, acc, err);
            }
            if (st)
                goto out;
        }
    }
    /* standard errors of those means, after every mean column (docs/math.md
     * §3.1, as qmla_summary_compute): cells independent, within a cell the
     * sample sd of its non-degenerate sequences / sqrt(n);
     * sqrt(sum_k s_k^2 / n_k) / K, NaN when a cell has a single one */
    for (int p = 0; p < 2; p++) {
        if (!column_has(path, n, paths[p]))
            continue;
        for (size_t c = 0; c < r->n_cols; c++) {
            const qmla_table_col *x = &r->cols[c];
            if (x->v.kind != QMLA_VAL_FLOAT)
                continue;
            for (size_t li = 0; li < nl; li++) {
                double var = 0.0;
                size_t cells = 0;
                int single = 0;
                memset(done, 0, n ? n : 1);
                for (size_t k = 0; k < n; k++) {
                    if (done[k] || (int64_t)qmla_values_get(&layer->v, k) != layers[li] ||
                        strcmp(path->v.s[k], paths[p]))
                        continue;
                    double sum = 0.0, ss = 0.0;
                    size_t seqs = 0;
                    for (int pass = 0; pass < 2; pass++) {
                        const double mean = seqs ? sum / (double)seqs : 0.0;
                        for (size_t j = k; j < n; j++) {
                            if ((int64_t)qmla_values_get(&layer->v, j) != layers[li] ||
                                strcmp(path->v.s[j], paths[p]) ||
                                strcmp(cell->v.s[j], cell->v.s[k]))
                                continue;
                            done[j] = 1;
                            if (degen && qmla_values_get(&degen->v, j) != 0.0)
                                continue;
                            if (pass == 0) {
                                sum += x->v.d[j];
                                seqs++;
                            } else {
                                ss += (x->v.d[j] - mean) * (x->v.d[j] - mean);
                            }
                        }
                    }
                    if (seqs == 1)
                        single = 1;
                    if (seqs >= 2) {
                        var += ss / (double)(seqs - 1) / (double)seqs;
                        cells++;
                    }
                }
                acc[li] = single || !cells ? NAN : sqrt(var) / (double)cells;
            }
            char cname[256], desc[1024];
            snprintf(cname, sizeof cname, "%s_%s_se", paths[p], x->name);
            snprintf(desc, sizeof desc,
                     "%s path, standard error of %s_%s over sequences within cells "
                     "(NaN when a cell has one non-degenerate sequence): %s",
                     paths[p], paths[p], x->name, x->description[0] ? x->description : x->name);
            if ((st = qmla_table_add_column(t, cname, x->units, desc, QMLA_VAL_FLOAT, acc, err)))
                goto out;
        }
    }
out:
    free(layers);
    free(done);
    free(acc);
    if (st)
        qmla_table_free(t);
    else
        *out = t;
    return st;
}
