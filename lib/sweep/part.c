/* sweep_part.c — shard assignment, part files and their merge
 * (include/qmla/part.h). */
#include "qmla/part.h"
#include "io/group.h"
#include "core/devices.h"

#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- assignment ------------------------------------------------------------ */

int qmla_shard_assign(const double *cost, const unsigned char *sel,
                      size_t n_items, size_t n_shards, int balance,
                      size_t *owner, qmla_error *err)
{
    (void)err;
    if (n_shards < 1)
        n_shards = 1;
    for (size_t k = 0; k < n_items; k++)
        owner[k] = k % n_shards;
    if (!balance || n_shards == 1)
        return QMLA_OK;
    /* contiguous runs of equal cost: item k goes to the shard whose share
     * of the total cost holds the midpoint of k's cost interval */
    double total = 0.0;
    for (size_t k = 0; k < n_items; k++)
        if (sel[k])
            total += cost[k];
    double before = 0.0;
    for (size_t k = 0; k < n_items; k++) {
        if (!sel[k])
            continue;
        const double mid = before + 0.5 * cost[k];
        size_t s = total > 0.0 ? (size_t)(mid * (double)n_shards / total) : 0;
        owner[k] = s < n_shards ? s : n_shards - 1;
        before += cost[k];
    }
    return QMLA_OK;
}

/* ---- part files ------------------------------------------------------------ */

void qmla_part_info_free(qmla_part_info *pi)
{
    if (!pi)
        return;
    free(pi->slots);
    memset(pi, 0, sizeof *pi);
}

static int write_part_group(hid_t g, const qmla_part_info *pi)
{
    const size_t n = pi->n_slots, m = n ? n : 1;
    int32_t *layer = malloc(m * sizeof *layer), *cell = malloc(m * sizeof *cell);
    int64_t *nseq = malloc(m * sizeof *nseq), *T = malloc(m * sizeof *T);
    uint8_t *sel = malloc(m);
    int rc = -1;
    if (!layer || !cell || !nseq || !T || !sel)
        goto done;
    for (size_t k = 0; k < n; k++) {
        layer[k] = pi->slots[k].layer;
        cell[k] = pi->slots[k].cell;
        nseq[k] = pi->slots[k].n_seq;
        T[k] = pi->slots[k].T;
        sel[k] = (uint8_t)(pi->slots[k].selected != 0);
    }
    if (qmla_h5_attr_int(g, "shard", (long long)pi->shard) ||
        qmla_h5_attr_int(g, "n_shards", (long long)pi->n_shards) ||
        qmla_h5_attr_int(g, "balance", pi->balance) ||
        qmla_h5_attr_str(g, "description",
                         "one shard of a sweep; the plan's (layer, cell) slots "
                         "in plan order (include/qmla/part.h); qmla merge") ||
        qmla_h5_dset_1d(g, "layer", H5T_STD_I32LE, H5T_NATIVE_INT32, n, layer,
                        "layer of each slot", NULL) ||
        qmla_h5_dset_1d(g, "cell", H5T_STD_I32LE, H5T_NATIVE_INT32, n, cell,
                        "index of the slot's cell in the cell set", NULL) ||
        qmla_h5_dset_1d(g, "n_seq", H5T_STD_I64LE, H5T_NATIVE_INT64, n, nseq,
                        "sequences of the slot", NULL) ||
        qmla_h5_dset_1d(g, "T", H5T_STD_I64LE, H5T_NATIVE_INT64, n, T,
                        "tokens per sequence", NULL) ||
        qmla_h5_dset_1d(g, "selected", H5T_STD_U8LE, H5T_NATIVE_UINT8, n, sel,
                        "1: the slot's layer is selected", NULL))
        goto done;
    rc = 0;
done:
    free(layer);
    free(cell);
    free(nseq);
    free(T);
    free(sel);
    return rc;
}

int qmla_part_write(const char *path, const qmla_results_meta *m,
                    const qmla_response *r, size_t n, const qmla_summary *s,
                    const qmla_part_info *pi, qmla_error *err)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.unstamped.%ld", path, (long)getpid());
    int st = qmla_results_write(tmp, m, r, n, s, err);
    if (st)
        return st;
    qmla_h5_out o; /* /part (results_write carries none from an earlier file) */
    if ((st = qmla_h5_out_group(&o, tmp, "part", err)) == QMLA_OK) {
        o.path = path; /* the image is saved as the part */
        if (write_part_group(o.g, pi))
            st = qmla_error_set(err, QMLA_EIO, "%s: cannot write /part", path);
        st = qmla_h5_out_finish(&o, st);
    }
    unlink(tmp);
    return st;
}

int qmla_part_check_target(const char *path, size_t shard, size_t n_shards,
                           qmla_error *err)
{
    struct stat sb;
    if (n_shards < 2 || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size == 0)
        return QMLA_OK; /* a full sweep over a part is the rest of it (no /part kept) */
    h5_quiet q = qmla_h5_quiet_begin();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    const int has = f >= 0 && H5Lexists(f, "part", H5P_DEFAULT) > 0;
    if (f >= 0)
        H5Fclose(f);
    qmla_h5_quiet_end(q);
    if (!has)
        return QMLA_OK; /* not a part: the results checks judge it */
    /* a part of another plan (shard count) is rewritten, as before: the
     * plan changed; another shard of this plan is a wrong -o */
    qmla_part_info pi;
    memset(&pi, 0, sizeof pi);
    qmla_error e2;
    qmla_error_clear(&e2);
    int st = QMLA_OK;
    if (qmla_part_read(path, &pi, &e2))
        st = qmla_error_set(err, QMLA_EMISMATCH, "%s: holds a /part group that cannot be "
                            "read (%s); refusing to replace it — use --force to discard it, "
                            "or another -o", path, e2.msg);
    else if (pi.shard != shard && pi.n_shards == n_shards)
        st = qmla_error_set(err, QMLA_EMISMATCH, "%s: expected the part file of shard %zu/%zu "
                            "(this sweep's --shard) or a new name, found the part file of shard "
                            "%zu/%zu; refusing to replace it — use --force to discard it, or "
                            "another -o", path, shard, n_shards, pi.shard, pi.n_shards);
    qmla_part_info_free(&pi);
    return st;
}

/* 1-D dataset `name` of /part with n elements (n from the first dataset
 * read when *n == SIZE_MAX). */
static int read_col(hid_t g, const char *path, const char *name, hid_t mtype,
                    size_t esz, size_t *n, void **out, qmla_error *err)
{
    *out = NULL;
    hid_t d = H5Dopen2(g, name, H5P_DEFAULT);
    if (d < 0)
        return qmla_error_set(err, QMLA_EFORMAT, "%s: %s: expected a "
                              "dataset, found none", path, name);
    hid_t sp = H5Dget_space(d);
    hsize_t dim = 0;
    const int rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    if (rank == 1)
        H5Sget_simple_extent_dims(sp, &dim, NULL);
    if (sp >= 0)
        H5Sclose(sp);
    int st = QMLA_OK;
    if (rank != 1 || (*n != SIZE_MAX && dim != *n) || dim > (1u << 30))
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: /part/%s: expected a 1-D "
                            "dataset of %zu elements, found rank %d, %llu",
                            path, name, *n == SIZE_MAX ? (size_t)dim : *n, rank,
                            (unsigned long long)dim);
    if (!st) {
        *out = malloc(dim ? dim * esz : 1);
        if (!*out)
            st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
        else if (dim && H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out) < 0)
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: /part/%s: cannot read",
                                path, name);
        *n = (size_t)dim;
    }
    H5Dclose(d);
    if (st) {
        free(*out);
        *out = NULL;
    }
    return st;
}

/* /cells of a results file into m->cell_info (qmla_results_read leaves it
 * empty: the sweep takes it from the capture, a merge from its first part). */
static int read_cells(const char *path, qmla_results_meta *m, qmla_error *err)
{
    h5_quiet q = qmla_h5_quiet_begin();
    int st = QMLA_OK;
    char **names = NULL, **ds = NULL;
    int64_t *seed = NULL, *N = NULL, *T = NULL;
    size_t n = SIZE_MAX;
    hid_t g = -1, f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t st_t = H5Tcopy(H5T_C_S1);
    H5Tset_size(st_t, H5T_VARIABLE);
    H5Tset_cset(st_t, H5T_CSET_UTF8);
    if (f < 0 || (g = H5Gopen2(f, "cells", H5P_DEFAULT)) < 0) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: expected a group /cells, "
                            "found none", path);
        goto done;
    }
    if ((st = read_col(g, path, "seed", H5T_NATIVE_INT64, 8, &n, (void **)&seed, err)) ||
        (st = read_col(g, path, "n_sequences", H5T_NATIVE_INT64, 8, &n, (void **)&N, err)) ||
        (st = read_col(g, path, "n_tokens", H5T_NATIVE_INT64, 8, &n, (void **)&T, err)) ||
        (st = read_col(g, path, "name", st_t, sizeof(char *), &n, (void **)&names, err)) ||
        (st = read_col(g, path, "dataset", st_t, sizeof(char *), &n, (void **)&ds, err)))
        goto done;
    m->cell_info = calloc(n ? n : 1, sizeof *m->cell_info);
    if (!m->cell_info) {
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    m->n_cell_info = n;
    for (size_t k = 0; k < n; k++) {
        qmla_results_cell *c = &m->cell_info[k];
        snprintf(c->name, sizeof c->name, "%s", names[k] ? names[k] : "");
        snprintf(c->dataset, sizeof c->dataset, "%s", ds[k] ? ds[k] : "");
        c->seed = (long)seed[k];
        c->N = (long)N[k];
        c->T = (long)T[k];
    }
done:
    for (size_t k = 0; names && k < n; k++)
        H5free_memory(names[k]);
    for (size_t k = 0; ds && k < n; k++)
        H5free_memory(ds[k]);
    free(names);
    free(ds);
    free(seed);
    free(N);
    free(T);
    H5Tclose(st_t);
    if (g >= 0)
        H5Gclose(g);
    if (f >= 0)
        H5Fclose(f);
    qmla_h5_quiet_end(q);
    return st;
}

static int read_attr_ll(hid_t g, const char *path, const char *name,
                        long long *v, qmla_error *err)
{
    hid_t a = H5Aopen(g, name, H5P_DEFAULT);
    int bad = a < 0 || H5Aread(a, H5T_NATIVE_LLONG, v) < 0;
    if (a >= 0)
        H5Aclose(a);
    return bad ? qmla_error_set(err, QMLA_EFORMAT, "%s: /part: expected an "
                                "integer attribute %s, found none", path, name)
               : QMLA_OK;
}

int qmla_part_read(const char *path, qmla_part_info *pi, qmla_error *err)
{
    memset(pi, 0, sizeof *pi);
    if (qmla_h5_check_input(path, "part file", err))
        return err ? err->status : QMLA_ENOENT;
    h5_quiet q = qmla_h5_quiet_begin();
    int st = QMLA_OK;
    int32_t *layer = NULL, *cell = NULL;
    int64_t *nseq = NULL, *T = NULL;
    uint8_t *sel = NULL;
    hid_t g = -1, f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot open as HDF5", path);
        goto done;
    }
    if (H5Lexists(f, "part", H5P_DEFAULT) <= 0 ||
        (g = H5Gopen2(f, "part", H5P_DEFAULT)) < 0) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: not a part file (expected a "
                            "group /part written by qmla sweep --shard, found "
                            "none)", path);
        goto done;
    }
    long long shard, n_shards, balance;
    if ((st = read_attr_ll(g, path, "shard", &shard, err)) ||
        (st = read_attr_ll(g, path, "n_shards", &n_shards, err)) ||
        (st = read_attr_ll(g, path, "balance", &balance, err)))
        goto done;
    if (n_shards < 1 || shard < 0 || shard >= n_shards || balance < 0 || balance > 1) {
        st = qmla_error_set(err, QMLA_EFORMAT, "%s: /part: expected 0 <= shard < "
                            "n_shards and balance 0 or 1, found shard %lld, n_shards "
                            "%lld, balance %lld", path, shard, n_shards, balance);
        goto done;
    }
    size_t n = SIZE_MAX;
    if ((st = read_col(g, path, "layer", H5T_NATIVE_INT32, 4, &n, (void **)&layer, err)) ||
        (st = read_col(g, path, "cell", H5T_NATIVE_INT32, 4, &n, (void **)&cell, err)) ||
        (st = read_col(g, path, "n_seq", H5T_NATIVE_INT64, 8, &n, (void **)&nseq, err)) ||
        (st = read_col(g, path, "T", H5T_NATIVE_INT64, 8, &n, (void **)&T, err)) ||
        (st = read_col(g, path, "selected", H5T_NATIVE_UINT8, 1, &n, (void **)&sel, err)))
        goto done;
    pi->slots = calloc(n ? n : 1, sizeof *pi->slots);
    if (!pi->slots) {
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    for (size_t k = 0; k < n; k++) {
        if (nseq[k] < 0 || nseq[k] > INT32_MAX || T[k] < 0 || cell[k] < 0) {
            st = qmla_error_set(err, QMLA_EFORMAT, "%s: /part slot %zu: expected "
                                "n_seq, T, cell >= 0, found %lld, %lld, %d", path, k,
                                (long long)nseq[k], (long long)T[k], (int)cell[k]);
            goto done;
        }
        pi->slots[k] = (qmla_part_slot){layer[k], cell[k], nseq[k], T[k], sel[k] != 0};
    }
    pi->n_slots = n;
    pi->shard = (size_t)shard;
    pi->n_shards = (size_t)n_shards;
    pi->balance = (int)balance;
done:
    if (st)
        qmla_part_info_free(pi);
    if (g >= 0)
        H5Gclose(g);
    if (f >= 0)
        H5Fclose(f);
    qmla_h5_quiet_end(q);
    free(layer);
    free(cell);
    free(nseq);
    free(T);
    free(sel);
    return st;
}

/* ---- merge ----------------------------------------------------------------- */

typedef struct universe {
    size_t n_items;
    size_t *first;        /* [n_slots] first item of each slot */
    size_t *by_key;       /* [n_slots] slot indices sorted by (layer, cell) */
    size_t *owner;        /* [n_items] */
    unsigned char *sel;   /* [n_items] */
    const qmla_part_info *pi;
} universe;

static const qmla_part_info *g_pi;

static int cmp_slot(const void *a, const void *b)
{
    const qmla_part_slot *x = &g_pi->slots[*(const size_t *)a];
    const qmla_part_slot *y = &g_pi->slots[*(const size_t *)b];
    if (x->layer != y->layer)
        return x->layer < y->layer ? -1 : 1;
    return (x->cell > y->cell) - (x->cell < y->cell);
}

static void universe_free(universe *u)
{
    free(u->first);
    free(u->by_key);
    free(u->owner);
    free(u->sel);
    memset(u, 0, sizeof *u);
}

static int universe_build(const qmla_part_info *pi, universe *u, qmla_error *err)
{
    memset(u, 0, sizeof *u);
    u->pi = pi;
    const size_t ns = pi->n_slots ? pi->n_slots : 1;
    u->first = malloc(ns * sizeof *u->first);
    u->by_key = malloc(ns * sizeof *u->by_key);
    size_t n = 0;
    for (size_t k = 0; k < pi->n_slots; k++)
        n += (size_t)pi->slots[k].n_seq;
    u->n_items = n;
    u->owner = malloc((n ? n : 1) * sizeof *u->owner);
    u->sel = malloc(n ? n : 1);
    double *cost = malloc((n ? n : 1) * sizeof *cost);
    int st = QMLA_OK;
    if (!u->first || !u->by_key || !u->owner || !u->sel || !cost) {
        st = qmla_error_set(err, QMLA_ENOMEM, "merge: out of memory for %zu items", n);
        goto done;
    }
    n = 0;
    for (size_t k = 0; k < pi->n_slots; k++) {
        u->first[k] = n;
        u->by_key[k] = k;
        const double T = (double)pi->slots[k].T;
        for (long long s = 0; s < pi->slots[k].n_seq; s++, n++) {
            cost[n] = T * T;
            u->sel[n] = (unsigned char)pi->slots[k].selected;
        }
    }
    g_pi = pi;
    qsort(u->by_key, pi->n_slots, sizeof *u->by_key, cmp_slot);
    st = qmla_shard_assign(cost, u->sel, n, pi->n_shards, pi->balance, u->owner, err);
done:
    free(cost);
    if (st)
        universe_free(u);
    return st;
}

/* Item of (layer, cell index, seq), or SIZE_MAX. */
static size_t universe_find(const universe *u, int layer, int cell, int seq)
{
    size_t lo = 0, hi = u->pi->n_slots;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        const qmla_part_slot *s = &u->pi->slots[u->by_key[mid]];
        if (s->layer == layer && s->cell == cell) {
            if (seq < 0 || seq >= s->n_seq)
                return SIZE_MAX;
            return u->first[u->by_key[mid]] + (size_t)seq;
        }
        if (s->layer < layer || (s->layer == layer && s->cell < cell))
            lo = mid + 1;
        else
            hi = mid;
    }
    return SIZE_MAX;
}

/* Index of `name` in the comma-separated cell set, or -1. */
static int cell_in_set(const char *cells, const char *name)
{
    const size_t len = strlen(name);
    int k = 0;
    for (const char *p = cells; *p; k++) {
        const char *e = strchr(p, ',');
        const size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == len && !strncmp(p, name, len))
            return k;
        if (!e)
            break;
        p = e + 1;
    }
    return -1;
}

/* Name of cell index c of the set into out. */
static void cell_name(const char *cells, int c, char *out, size_t len)
{
    const char *p = cells;
    for (int k = 0; k < c && p; k++) {
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    if (!p) {
        snprintf(out, len, "#%d", c);
        return;
    }
    const char *e = strchr(p, ',');
    snprintf(out, len, "%.*s", (int)(e ? (size_t)(e - p) : strlen(p)), p);
}

static int same_plan(const qmla_part_info *a, const qmla_part_info *b)
{
    if (a->n_shards != b->n_shards || a->balance != b->balance ||
        a->n_slots != b->n_slots)
        return 0;
    for (size_t k = 0; k < a->n_slots; k++) {
        const qmla_part_slot *x = &a->slots[k], *y = &b->slots[k];
        if (x->layer != y->layer || x->cell != y->cell || x->n_seq != y->n_seq ||
            x->T != y->T || x->selected != y->selected)
            return 0;
    }
    return 1;
}


typedef struct merge_state {
    qmla_results_meta meta0;
    qmla_part_info pi0;
    universe u;
    qmla_response *rows;  /* [2 n_items] item-major, path-minor */
    size_t *from;         /* [2 n_items] part index + 1, 0 = absent */
    size_t *shard_part;   /* [n_shards] part index + 1 */
    qmla_devices devs;    /* the parts' devices (provenance) */
} merge_state;

/* Add the rows of part p (meta m, info pi, rows r) to the state. */
static int merge_one(merge_state *ms, const char *const *parts, size_t p,
                     const qmla_part_info *pi, const qmla_response *r, size_t n,
                     qmla_error *err)
{
    const char *path = parts[p];
    if (ms->shard_part[pi->shard])
        return qmla_error_set(err, QMLA_EMISMATCH, "%s and %s are both shard %zu "
                              "of %zu: overlapping parts",
                              parts[ms->shard_part[pi->shard] - 1], path, pi->shard,
                              pi->n_shards);
    ms->shard_part[pi->shard] = p + 1;
    for (size_t i = 0; i < n; i++) {
        const int c = cell_in_set(ms->meta0.cells, r[i].cell);
        const size_t k = c < 0 ? SIZE_MAX : universe_find(&ms->u, r[i].layer, c, r[i].seq);
        if (k == SIZE_MAX || !ms->u.sel[k] || ms->u.owner[k] != pi->shard)
            return qmla_error_set(err, QMLA_EFORMAT, "%s: row %zu (layer %d, cell "
                                  "\"%s\", sequence %d): expected an item of shard "
                                  "%zu of the plan, found %s", path, i, r[i].layer,
                                  r[i].cell, r[i].seq, pi->shard,
                                  k == SIZE_MAX ? "an item outside the plan"
                                  : !ms->u.sel[k] ? "an item of an unselected layer"
                                                  : "an item of another shard");
        const size_t slot = 2 * k + (size_t)r[i].path;
        if (ms->from[slot])
            return qmla_error_set(err, QMLA_EMISMATCH, "%s and %s both hold layer "
                                  "%d, cell \"%s\", sequence %d (%s path): "
                                  "overlapping parts", parts[ms->from[slot] - 1],
                                  path, r[i].layer, r[i].cell, r[i].seq,
                                  r[i].path ? "rope" : "content");
        ms->from[slot] = p + 1;
        ms->rows[slot] = r[i];
    }
    return QMLA_OK;
}

/* QMLA_EINVAL listing what is missing, or QMLA_OK when complete. */
static int check_coverage(const merge_state *ms, qmla_error *err)
{
    const universe *u = &ms->u;
    size_t missing = 0;
    char list[1024] = "", shards[512] = "";
    size_t lo = 0, no_part = 0;
    for (size_t s = 0; s < ms->pi0.n_shards; s++)
        if (!ms->shard_part[s]) {
            if (no_part++ < 16)
                lo += (size_t)snprintf(shards + lo, sizeof shards - lo, "%s%zu",
                                       no_part > 1 ? "," : "", s);
        }
    size_t ll = 0, item = 0;
    for (size_t sl = 0; sl < ms->pi0.n_slots; sl++) {
        const qmla_part_slot *s = &ms->pi0.slots[sl];
        for (long long q = 0; q < s->n_seq; q++, item++) {
            if (!u->sel[item] || (ms->from[2 * item] && ms->from[2 * item + 1]))
                continue;
            if (missing++ < 8 && ll < sizeof list - 100) {
                char cn[QMLA_CELL_NAME_MAX];
                cell_name(ms->meta0.cells, s->cell, cn, sizeof cn);
                ll += (size_t)snprintf(list + ll, sizeof list - ll,
                                       "%s(layer %d, cell \"%s\", sequence %lld: shard "
                                       "%zu)", missing > 1 ? ", " : "", s->layer, cn, q,
                                       u->owner[item]);
            }
        }
    }
    if (!missing)
        return QMLA_OK;
    return qmla_error_set(err, QMLA_EINVAL, "incomplete: %zu of the plan's items are "
                          "missing; %s%s%s; first missing: %s%s", missing,
                          no_part ? "no part for shard(s) " : "every shard has a part",
                          shards, no_part > 16 ? ",..." : "", list,
                          missing > 8 ? ", ..." : "");
}

int qmla_merge(const char *const *parts, size_t n_parts, const char *out,
               const char *command_line, qmla_summary *summary, qmla_error *err)
{
    memset(summary, 0, sizeof *summary);
    if (n_parts == 0)
        return qmla_error_set(err, QMLA_EINVAL, "merge: no part files given");
    /* the whole file is replaced: a capture, transforms or serve-sim file
     * (or anything not HDF5) at -o is refused, as sweep, jvp, ppl, learn
     * and serve-sim refuse one */
    if (qmla_h5_check_replace(out, QMLA_RESULTS_FORMAT, err))
        return QMLA_EINVAL;
    merge_state ms;
    memset(&ms, 0, sizeof ms);
    qmla_response *all = NULL;
    char key0[8192], key[8192];
    int st = QMLA_OK;
    for (size_t p = 0; p < n_parts && !st; p++) {
        qmla_results_meta m;
        qmla_part_info pi;
        qmla_response *r = NULL;
        size_t n = 0;
        memset(&pi, 0, sizeof pi);
        if ((st = qmla_results_read(parts[p], &m, &r, &n, err)))
            break;
        if ((st = qmla_part_read(parts[p], &pi, err))) {
            qmla_results_meta_free(&m);
            free(r);
            break;
        }
        qmla_results_key(&m, key, sizeof key);
        if (p == 0) {
            ms.meta0 = m;
            qmla_results_meta_free(&ms.meta0);
            if ((st = read_cells(parts[p], &ms.meta0, err)))
                goto next;
            ms.pi0 = pi;
            memcpy(key0, key, sizeof key0);
            if ((st = universe_build(&ms.pi0, &ms.u, err)))
                goto next;
            ms.rows = calloc(2 * (ms.u.n_items ? ms.u.n_items : 1), sizeof *ms.rows);
            ms.from = calloc(2 * (ms.u.n_items ? ms.u.n_items : 1), sizeof *ms.from);
            ms.shard_part = calloc(pi.n_shards, sizeof *ms.shard_part);
            if (!ms.rows || !ms.from || !ms.shard_part) {
                st = qmla_error_set(err, QMLA_ENOMEM, "merge: out of memory");
                goto next;
            }
        } else if (strcmp(key, key0) != 0) {
            st = qmla_error_set(err, QMLA_EMISMATCH, "%s is a part of another sweep "
                                "than %s (found \"%s\", expected \"%s\"): capture "
                                "hash, parameters and cell set must agree",
                                parts[p], parts[0], key, key0);
            goto next;
        } else if (strcmp(m.engine, ms.meta0.engine) != 0) {
            /* engines agree within a tolerance, not bit for bit: a merged
             * file is one engine's (docs/cuda-engine.md "Several GPUs") */
            const int mixed = strchr(m.engine, '+') || strchr(ms.meta0.engine, '+');
            st = qmla_error_set(err, QMLA_EMISMATCH, "%s was computed by engine \"%s\" and "
                                "%s by engine \"%s\": parts of one merge must come from one "
                                "engine; %s%s", parts[p], m.engine, parts[0], ms.meta0.engine,
                                mixed ? "a part of several engines was resumed across "
                                        "engines: rerun it with --force and one --engine"
                                      : "rerun the shard with --engine ",
                                mixed ? "" : ms.meta0.engine);
            goto next;
        } else if (!same_plan(&pi, &ms.pi0)) {
            st = qmla_error_set(err, QMLA_EMISMATCH, "%s is a part of another plan "
                                "than %s (found %zu shards, balance %d, %zu slots; "
                                "expected %zu shards, balance %d, %zu slots, the same "
                                "layers, cells and sequences)", parts[p], parts[0],
                                pi.n_shards, pi.balance, pi.n_slots, ms.pi0.n_shards,
                                ms.pi0.balance, ms.pi0.n_slots);
            goto next;
        }
        st = merge_one(&ms, parts, p, &pi, r, n, err);
        if (!st)
            st = qmla_devices_add(&ms.devs, p ? m.engine_device : ms.meta0.engine_device, err);
    next:
        if (p > 0) {
            qmla_results_meta_free(&m);
            qmla_part_info_free(&pi);
        }
        free(r);
    }
    if (!st)
        st = check_coverage(&ms, err);
    size_t n_all = 0;
    if (!st) {
        all = malloc(2 * (ms.u.n_items ? ms.u.n_items : 1) * sizeof *all);
        if (!all)
            st = qmla_error_set(err, QMLA_ENOMEM, "merge: out of memory");
        for (size_t k = 0; !st && k < 2 * ms.u.n_items; k++)
            if (ms.from[k])
                all[n_all++] = ms.rows[k];
    }
    if (!st)
        st = qmla_summary_compute(all, n_all, summary, err);
    if (!st) {
        qmla_results_meta *m = &ms.meta0;
        snprintf(m->command_line, sizeof m->command_line, "%s",
                 command_line ? command_line : "");
        const time_t now = time(NULL);
        struct tm tm;
        if (gmtime_r(&now, &tm))
            strftime(m->created_utc, sizeof m->created_utc, "%Y-%m-%dT%H:%M:%SZ", &tm);
        m->keep_groups_from[0] = '\0';
        qmla_devices_format(&ms.devs, m->engine_device, sizeof m->engine_device);
        st = qmla_results_write(out, m, all, n_all, summary, err);
        if (st)
            qmla_summary_free(summary);
    }
    free(all);
    free(ms.rows);
    free(ms.from);
    free(ms.shard_part);
    qmla_devices_free(&ms.devs);
    universe_free(&ms.u);
    qmla_part_info_free(&ms.pi0);
    qmla_results_meta_free(&ms.meta0);
    return st;
}
