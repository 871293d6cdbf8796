/* op_part.c — part files of `qmla jvp|predict|intervene --shard I/N` and
 * their merge (operator/op_part.h). */
#include "operator/op_part.h"
#include "qmla/part.h"
#include "core/devices.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PART_MAGIC "qmla-journal 1 "
/* the P record's escaped device: every device string (below
 * QMLA_ENGINE_DEVICE_MAX bytes) escapes to at most 3 bytes a byte, and
 * qmla_jnl_escape keeps 4 bytes spare; its sscanf width one less */
#define PART_ESC (3 * QMLA_ENGINE_DEVICE_MAX + 4)
#define PART_ESC_W "1539"
_Static_assert(PART_ESC == 1540, "PART_ESC_W is PART_ESC - 1");

static uint64_t fnv_u64(uint64_t h, uint64_t v)
{
    return qmla_jnl_fnv1a(&v, sizeof v, h);
}

uint64_t qmla_oppart_plan_hash(const qmla_capture *cap, const qmla_plan *full)
{
    uint64_t h = fnv_u64(QMLA_JNL_FNV_INIT, full->n_items);
    for (size_t k = 0; k < full->n_items; k++) {
        const qmla_plan_item *it = &full->items[k];
        h = fnv_u64(h, (uint64_t)(int64_t)it->layer);
        h = fnv_u64(h, it->ci);
        h = fnv_u64(h, it->seq);
        h = fnv_u64(h, qmla_capture_cell_t(cap, it->li, it->ci));
        h = fnv_u64(h, full->wanted[k]);
    }
    return h;
}

int qmla_oppart_check_target(const char *path, const char *kind, qmla_error *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? QMLA_OK
                               : qmla_error_set(err, QMLA_EIO, "%s: %s", path, strerror(errno));
    char line[256];
    const size_t n = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[n] = '\0';
    char want[128];
    snprintf(want, sizeof want, "%s%s ", PART_MAGIC, kind);
    if (n == 0 || strncmp(line, want, strlen(want)) == 0)
        return QMLA_OK;
    return qmla_error_set(err, QMLA_EINVAL, "%s: exists and is not a part file (\"%s...\"); "
                          "a shard run writes a part and does not replace another file: "
                          "remove it or choose another -o", path, want);
}

int qmla_oppart_plan(const qmla_capture *cap, const qmla_sweep_selection *sel, const char *what,
                     size_t shard, size_t n_shards, int merging, const char *results_path,
                     const char *kind, qmla_plan *plan, uint64_t *plan_hash, qmla_error *err)
{
    const int sharded = n_shards > 1;
    int st;
    *plan_hash = 0;
    if (sharded && merging)
        return qmla_error_set(err, QMLA_EINVAL, "%s: a shard run cannot merge parts", what);
    if (sharded && shard >= n_shards)
        return qmla_error_set(err, QMLA_EINVAL, "%s: shard %zu of %zu: expected a shard below %zu",
                              what, shard, n_shards, n_shards);
    if (sharded && (st = qmla_oppart_check_target(results_path, kind, err)))
        return st;
    const qmla_plan_selection ps0 = qmla_plan_selection_of(sel);
    qmla_plan_selection ps = ps0;
    if (sharded) {
        /* the unsharded plan's fingerprint, then this shard's plan */
        if ((st = qmla_plan_build(cap, &ps0, plan, err)))
            return st;
        *plan_hash = qmla_oppart_plan_hash(cap, plan);
        qmla_plan_free(plan);
        ps.shard = shard;
        ps.n_shards = n_shards;
        ps.balance = 1;
    }
    return qmla_plan_build(cap, &ps, plan, err);
}

int qmla_oppart_write(const char *path, const char *kind, const char *key, size_t shard,
                      size_t n_shards, uint64_t plan_hash, const qmla_engine *engine,
                      const char *engines, qmla_oppart_emit_fn emit, void *ctx,
                      qmla_error *err)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    unlink(tmp);
    qmla_jnl j;
    int st = qmla_jnl_open(&j, tmp, kind, key, 1, NULL, NULL, NULL, err);
    if (st)
        return st;
    const char *dev = qmla_engine_device(engine);
    char esc[PART_ESC];
    qmla_jnl_escape(dev && *dev ? dev : "-", esc, sizeof esc);
    qmla_jnl_printf(&j, "P %zu %zu %016llx %s %d %s\n", shard, n_shards,
                    (unsigned long long)plan_hash,
                    engines && *engines ? engines : qmla_engine_name(engine),
                    qmla_engine_device_index(engine), esc);
    if (!(st = qmla_jnl_commit(&j, err)))
        st = emit(ctx, &j, err);
    qmla_jnl_close(&j, 0);
    if (!st && rename(tmp, path) != 0)
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot rename %s to it: %s", path, tmp,
                            strerror(errno));
    if (st)
        unlink(tmp);
    return st;
}

/* ---- the merge ---------------------------------------------------------- */

typedef qmla_oppart_hdr part_hdr;

typedef struct merge_rd {
    const char *const *parts;
    size_t p;                 /* the part being read */
    const qmla_capture *cap;
    const qmla_plan *full;
    uint64_t hash;            /* of full */
    qmla_oppart_item_fn item_of;
    qmla_jnl_replay_fn replay;
    void *ctx;
    part_hdr *hdr;            /* [n_parts] */
    size_t n_shards;          /* of the first part (0 until read) */
    size_t *shard_part;       /* [n_shards] part index + 1 */
    size_t *owner;            /* [n_items] shard of each wanted item */
    size_t *from;             /* [n_items] part index + 1 */
} merge_rd;

static void item_name(const merge_rd *m, size_t k, char *buf, size_t len)
{
    const qmla_plan_item *it = &m->full->items[k];
    snprintf(buf, len, "layer %d, cell \"%s\", sequence %zu", it->layer,
             qmla_capture_cell_name(m->cap, it->li, it->ci), it->seq);
}

/* The owner of every item for n_shards: the plan's own assignment (cost T^2,
 * balanced), as qmla_plan_build computes it. */
static int owners(merge_rd *m, size_t n_shards, qmla_error *err)
{
    const size_t n = m->full->n_items;
    double *cost = malloc((n ? n : 1) * sizeof *cost);
    m->owner = malloc((n ? n : 1) * sizeof *m->owner);
    m->shard_part = calloc(n_shards, sizeof *m->shard_part);
    if (!cost || !m->owner || !m->shard_part) {
        free(cost);
        return qmla_error_set(err, QMLA_ENOMEM, "merge: out of memory");
    }
    for (size_t k = 0; k < n; k++) {
        const double T = (double)qmla_capture_cell_t(m->cap, m->full->items[k].li,
                                                      m->full->items[k].ci);
        cost[k] = T * T;
    }
    const int st = qmla_shard_assign(cost, m->full->wanted, n, n_shards, 1, m->owner, err);
    free(cost);
    return st;
}

int qmla_oppart_parse_header(const char *path, const char *rec, qmla_oppart_hdr *h,
                             qmla_error *err)
{
    char esc[PART_ESC];
    if (sscanf(rec, "P %zu %zu %llx %63s %d %" PART_ESC_W "s", &h->shard, &h->n_shards, &h->hash,
               h->engine, &h->ordinal, esc) != 6 || h->n_shards < 2 ||
        h->shard >= h->n_shards || h->n_shards > 1000000)
        return qmla_error_set(err, QMLA_EMISMATCH, "%s: not a part file: its first record "
                              "is no part header (P shard n_shards plan engine device)", path);
    if (qmla_jnl_unescape(esc, h->device, sizeof h->device) != 0)
        return qmla_error_set(err, QMLA_EMISMATCH, "%s: malformed device in its part header "
                              "(expected an escaped string of at most %d bytes)", path,
                              QMLA_ENGINE_DEVICE_MAX - 1);
    if (!strcmp(h->device, "-"))
        h->device[0] = '\0';
    h->have = 1;
    return QMLA_OK;
}

static int header(merge_rd *m, char *rec, qmla_error *err)
{
    const char *path = m->parts[m->p];
    part_hdr *h = &m->hdr[m->p];
    {
        const int st = qmla_oppart_parse_header(path, rec, h, err);
        if (st)
            return st;
    }
    if (h->hash != m->hash)
        return qmla_error_set(err, QMLA_EMISMATCH, "%s is a part of another plan (plan hash "
                              "%016llx, this selection's %016llx): the layers, cells and "
                              "sequences must be the merge's", path, h->hash,
                              (unsigned long long)m->hash);
    if (m->n_shards == 0) {
        m->n_shards = h->n_shards;
        const int st = owners(m, h->n_shards, err);
        if (st)
            return st;
    } else if (h->n_shards != m->n_shards)
        return qmla_error_set(err, QMLA_EMISMATCH, "%s is a part of another plan than %s "
                              "(shard %zu of %zu; expected shards of %zu)", path, m->parts[0],
                              h->shard, h->n_shards, m->n_shards);
    if (strcmp(h->engine, m->hdr[0].engine) != 0) {
        /* "cuda+cpu": a part resumed across engines (journal.h) */
        const int mixed = strchr(h->engine, '+') || strchr(m->hdr[0].engine, '+');
        return qmla_error_set(err, QMLA_EMISMATCH, "%s was computed by engine \"%s\" and %s by "
                              "engine \"%s\": parts of one merge must come from one engine "
                              "(engines agree within a tolerance, not bit for bit); %s%s",
                              path, h->engine, m->parts[0], m->hdr[0].engine,
                              mixed ? "a part of several engines was resumed across engines: "
                                      "rerun it with --force and one --engine"
                                    : "rerun the shard with --engine ",
                              mixed ? "" : m->hdr[0].engine);
    }
    if (m->shard_part[h->shard])
        return qmla_error_set(err, QMLA_EMISMATCH, "%s and %s are both shard %zu of %zu: "
                              "overlapping parts", m->parts[m->shard_part[h->shard] - 1], path,
                              h->shard, h->n_shards);
    m->shard_part[h->shard] = m->p + 1;
    return QMLA_OK;
}

static int merge_record(void *ctx, char *rec, size_t len, qmla_error *err)
{
    merge_rd *m = ctx;
    const char *path = m->parts[m->p];
    const part_hdr *h = &m->hdr[m->p];
    if (!h->have)
        return header(m, rec, err);
    size_t k = SIZE_MAX;
    char nm[512];
    if (m->item_of(m->ctx, rec, len, &k) != QMLA_OK)
        return qmla_error_set(err, QMLA_EMISMATCH, "%s: a malformed item record", path);
    if (k == SIZE_MAX || k >= m->full->n_items || !m->full->wanted[k])
        return qmla_error_set(err, QMLA_EMISMATCH, "%s holds an item outside the merge's "
                              "plan (a part of another selection)", path);
    item_name(m, k, nm, sizeof nm);
    if (m->owner[k] != h->shard)
        return qmla_error_set(err, QMLA_EMISMATCH, "%s (shard %zu of %zu) holds item (%s) of "
                              "shard %zu", path, h->shard, h->n_shards, nm, m->owner[k]);
    if (m->from[k])
        return qmla_error_set(err, QMLA_EMISMATCH, "%s and %s both hold item (%s)",
                              m->parts[m->from[k] - 1], path, nm);
    const int st = m->replay(m->ctx, rec, len, err);
    if (st == QMLA_EFORMAT)
        return qmla_error_set(err, QMLA_EMISMATCH, "%s: a malformed record of item (%s)", path,
                              nm);
    if (st)
        return st;
    m->from[k] = m->p + 1;
    return QMLA_OK;
}

int qmla_oppart_merge_read(const char *const *parts, size_t n_parts, const char *kind,
                           const char *key, const qmla_capture *cap,
                           const qmla_plan_selection *ps, const qmla_plan *full,
                           qmla_oppart_item_fn item_of, qmla_jnl_replay_fn replay, void *ctx,
                           qmla_oppart_prov *prov, qmla_error *err)
{
    (void)ps;
    memset(prov, 0, sizeof *prov);
    if (n_parts == 0)
        return qmla_error_set(err, QMLA_EINVAL, "merge: no part files given");
    merge_rd m;
    memset(&m, 0, sizeof m);
    m.parts = parts;
    m.cap = cap;
    m.full = full;
    m.hash = qmla_oppart_plan_hash(cap, full);
    m.item_of = item_of;
    m.replay = replay;
    m.ctx = ctx;
    m.hdr = calloc(n_parts, sizeof *m.hdr);
    m.from = calloc(full->n_items ? full->n_items : 1, sizeof *m.from);
    int st = QMLA_OK;
    if (!m.hdr || !m.from)
        st = qmla_error_set(err, QMLA_ENOMEM, "merge: out of memory");
    for (size_t p = 0; p < n_parts && !st; p++) {
        m.p = p;
        for (size_t q = 0; q < p; q++)
            if (!strcmp(parts[q], parts[p])) {
                st = qmla_error_set(err, QMLA_EINVAL, "%s is given twice", parts[p]);
                break;
            }
        if (st)
            break;
        st = qmla_jnl_read(parts[p], kind, key, merge_record, &m, NULL, err);
        if (!st && !m.hdr[p].have)
            st = qmla_error_set(err, QMLA_EMISMATCH, "%s: not a part file (no part header)",
                                parts[p]);
    }
    if (!st) {
        /* coverage */
        size_t missing = 0;
        char first[1024];
        size_t u = 0;
        first[0] = '\0';
        for (size_t k = 0; k < full->n_items; k++)
            if (full->wanted[k] && !m.from[k]) {
                if (missing < 3 && u < sizeof first) {
                    char nm[512];
                    item_name(&m, k, nm, sizeof nm);
                    u += (size_t)snprintf(first + u, sizeof first - u, "%s(%s: shard %zu)",
                                          missing ? ", " : "", nm, m.owner[k]);
                }
                missing++;
            }
        if (missing) {
            char ns[512];
            size_t v = 0;
            ns[0] = '\0';
            for (size_t s = 0; s < m.n_shards && v < sizeof ns; s++)
                if (!m.shard_part[s])
                    v += (size_t)snprintf(ns + v, sizeof ns - v, "%s%zu", v ? ", " : "", s);
            st = qmla_error_set(err, QMLA_EINVAL, "incomplete: %zu of the plan's items are "
                                "missing; no part for shard(s) %s of %zu; first missing: %s",
                                missing, v ? ns : "(none: a part is incomplete)", m.n_shards,
                                first);
        }
    }
    if (!st) {
        snprintf(prov->engine, sizeof prov->engine, "%s", m.hdr[0].engine);
        /* at most one device per part; a shard without items may have no
         * part (complete coverage without it): skipped */
        qmla_devices devs;
        memset(&devs, 0, sizeof devs);
        for (size_t s = 0; !st && s < m.n_shards; s++)
            if (m.shard_part[s])
                st = qmla_devices_add(&devs, m.hdr[m.shard_part[s] - 1].device, err);
        qmla_devices_format(&devs, prov->device, sizeof prov->device);
        qmla_devices_free(&devs);
    }
    free(m.hdr);
    free(m.from);
    free(m.owner);
    free(m.shard_part);
    return st;
}

/* ---- read-only replay of earlier runs' files ---------------------------- */

typedef struct replay_skip_p {
    qmla_jnl_replay_fn fn;
    void *ctx;
    int first;
    char engine[64]; /* the P header's (an engine set, as journal.h engines[64]) */
    size_t items;
} replay_skip_p;

static int replay_part_record(void *ctx, char *rec, size_t len, qmla_error *err)
{
    replay_skip_p *r = ctx;
    if (r->first) {
        r->first = 0;
        if (rec[0] == 'P' && rec[1] == ' ') { /* the part header */
            if (sscanf(rec, "P %*s %*s %*s %63s", r->engine) != 1)
                r->engine[0] = '\0';
            return QMLA_OK;
        }
    }
    r->items++;
    return r->fn(r->ctx, rec, len, err);
}

int qmla_oppart_replay_files(const char *const *files, size_t n, const char *kind,
                             const char *part_kind, const char *key, qmla_jnl_replay_fn replay,
                             void *ctx, char *engines, size_t elen, qmla_error *err)
{
    char jh[128], ph[128];
    snprintf(jh, sizeof jh, "%s%s ", PART_MAGIC, kind);
    snprintf(ph, sizeof ph, "%s%s ", PART_MAGIC, part_kind);
    for (size_t k = 0; k < n; k++) {
        FILE *f = fopen(files[k], "r");
        if (!f)
            continue;
        char line[128];
        const size_t m = fread(line, 1, sizeof line - 1, f);
        fclose(f);
        line[m] = '\0';
        qmla_error e2;
        qmla_error_clear(&e2);
        int st = QMLA_OK;
        char fe[64] = "";
        size_t ni = 0;
        if (strncmp(line, ph, strlen(ph)) == 0) {
            replay_skip_p r = {replay, ctx, 1, "", 0};
            st = qmla_jnl_read(files[k], part_kind, key, replay_part_record, &r, NULL, &e2);
            snprintf(fe, sizeof fe, "%s", r.engine);
            ni = r.items;
        } else if (strncmp(line, jh, strlen(jh)) == 0)
            st = qmla_jnl_read_engines(files[k], kind, key, replay, ctx, &ni, fe, sizeof fe,
                                       &e2);
        if (engines && ni && (st == QMLA_OK || st == QMLA_EFORMAT))
            qmla_jnl_engines_add(engines, elen, fe);
        if (st == QMLA_ENOMEM) {
            *err = e2;
            return st;
        }
    }
    return QMLA_OK;
}
