/* ppl_run.c — the ppl driver (qmla/ppl.h, `qmla ppl`), resumable: every
 * finished window of every group is kept in the journal (io/journal.h, kind
 * "ppl"; docs/results-format.md, "Resume journals") and a rerun scores only
 * the windows it lacks. */
#define _POSIX_C_SOURCE 200809L
#include "qmla/allocation.h"
#include "qmla/ppl.h"
#include "qmla/exec.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine_int.h"
#include "io/journal.h"
#include "qmla/hash.h"
#include "qmla/text.h"
#include "qmla/outpath.h"
#include "qmla/tmethod.h"

qmla_ppl_run_opts qmla_ppl_run_defaults(void)
{
    qmla_ppl_run_opts o;
    memset(&o, 0, sizeof o);
    o.configs = "bf16";
    o.policies = "none";
    o.context = 512;
    o.threads = 1;
    return o;
}

static void emit(const qmla_ppl_run_opts *o, int kind, const qmla_ppl_row *rows, size_t n,
                 double sec, const char *fmt, ...)
{
    if (!o->event)
        return;
    char line[1200] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(line, sizeof line, fmt, ap);
        va_end(ap);
    }
    qmla_ppl_event ev = {kind, line, rows, n, sec};
    o->event(o->event_ctx, &ev);
}

void qmla_ppl_run_result_free(qmla_ppl_run_result *r)
{
    if (!r)
        return;
    free(r->rows);
    free(r->priv);
    memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------ resume */
/* One group: the configurations of one (text, model variant) scored
 * together, rows [row0, row0 + n) of the result. */
typedef struct pgroup {
    size_t k, v, row0, n, n_win;
    unsigned char *done; /* [n_win]: restored from the journal (2: in the record being read) */
    double *nll;         /* [n_win * n] */
    long ref_index;      /* the KL reference's row in the group, or -1 */
    double *kl_sum;      /* with KL: [n_win * n] (qmla_eng_ppl_kl) */
    long long *top1;     /* with KL: [n_win * n] */
    float *kl_tok;       /* with KL: [n_win * n * context] */
} pgroup;

/* The journal: records of lines "W <group> <window> <tokens> <NLL sum of
 * each configuration of the group, %a>" and, with a KL reference, for each
 * configuration " <KL sum, %a> <agreeing targets> <the per-target KL as
 * float32 bit patterns, 8 hex digits each, no separator>", then "\n"; committed at most every second
 * (and at the end of every group, at a stop and at an error) so that the
 * fsync costs nothing next to the windows. */
typedef struct pjournal {
    qmla_jnl j;
    int open;
    pgroup *g;
    size_t n_g, cur, context, pending;
    size_t kept; /* windows in the journal: restored and committed */
    double last;
    int kl;      /* the lines carry the KL fields */
    char *hex;   /* with kl: [8 * context + 1] */
} pjournal;

#define PPL_COMMIT_S 1.0     /* seconds between commits */
#define PPL_COMMIT_MAX 256   /* windows per record at most */

/* One configuration's KL fields of a journal line at *p (moved past them). */
static int pj_replay_kl(const pjournal *pj, pgroup *G, size_t k, size_t j, char **p)
{
    const size_t T = pj->context, at = k * G->n + j;
    char *q = *p, *end;
    if (*q != ' ')
        return QMLA_EFORMAT;
    const double x = strtod(q + 1, &end);
    if (end == q + 1 || *end != ' ' || !isfinite(x))
        return QMLA_EFORMAT;
    q = end + 1;
    if (*q < '0' || *q > '9')
        return QMLA_EFORMAT;
    const long long a = strtoll(q, &end, 10);
    if (end == q || *end != ' ' || a < 0 || (unsigned long long)a > T)
        return QMLA_EFORMAT;
    q = end + 1;
    for (size_t t = 0; t < T; t++, q += 8) {
        uint32_t u = 0;
        for (int i = 0; i < 8; i++) {
            const char c = q[i];
            const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (d < 0)
                return QMLA_EFORMAT;
            u = u << 4 | (uint32_t)d;
        }
        float f;
        memcpy(&f, &u, sizeof f);
        if (!isfinite(f))
            return QMLA_EFORMAT;
        G->kl_tok[at * T + t] = f;
    }
    if (*q && *q != ' ')
        return QMLA_EFORMAT;
    G->kl_sum[at] = x;
    G->top1[at] = a;
    *p = q;
    return QMLA_OK;
}

static int pj_replay(void *ctx, char *rec, size_t len, qmla_error *err)
{
    (void)len;
    (void)err;
    pjournal *pj = ctx;
    size_t lines = 0;
    for (const char *q = rec; *q; q++)
        lines += *q == '\n';
    size_t *undo = malloc(2 * (lines + 1) * sizeof *undo), nu = 0;
    if (!undo)
        return qmla_error_set(err, QMLA_ENOMEM, "%s: replay", pj->j.path);
    int st = QMLA_OK;
    char *save = NULL;
    for (char *ln = strtok_r(rec, "\n", &save); ln && !st; ln = strtok_r(NULL, "\n", &save)) {
        size_t g, k, tok;
        int used = 0;
        if (sscanf(ln, "W %zu %zu %zu%n", &g, &k, &tok, &used) != 3 || g >= pj->n_g ||
            k >= pj->g[g].n_win || tok != pj->context || pj->g[g].done[k]) {
            st = QMLA_EFORMAT;
            break;
        }
        pgroup *G = &pj->g[g];
        char *p = ln + used;
        for (size_t j = 0; j < G->n && !st; j++) {
            char *end;
            if (*p != ' ') {
                st = QMLA_EFORMAT;
                break;
            }
            const double x = strtod(p + 1, &end);
            if (end == p + 1 || (*end && *end != ' ') || !isfinite(x))
                st = QMLA_EFORMAT;
            G->nll[k * G->n + j] = x;
            p = end;
        }
        for (size_t j = 0; j < G->n && !st && pj->kl; j++)
            st = pj_replay_kl(pj, G, k, j, &p);
        if (!st && *p)
            st = QMLA_EFORMAT;
        if (!st) {
            G->done[k] = 2;
            undo[nu++] = g;
            undo[nu++] = k;
        }
    }
    for (size_t i = 0; i < nu; i += 2)
        pj->g[undo[i]].done[undo[i + 1]] = st ? 0 : 1;
    free(undo);
    return st;
}

static int pj_flush(pjournal *pj, qmla_error *err)
{
    if (!pj->open || !pj->pending)
        return QMLA_OK;
    const size_t n = pj->pending;
    pj->pending = 0;
    pj->last = qmla_monotonic_s();
    const int st = qmla_jnl_commit(&pj->j, err);
    if (!st)
        pj->kept += n;
    return st;
}

static int pj_window(void *ctx, size_t k, const double *nll, size_t n_cs, const double *kl_sum,
                     const long long *top1, const float *kl_tok, qmla_error *err)
{
    pjournal *pj = ctx;
    qmla_jnl_printf(&pj->j, "W %zu %zu %zu", pj->cur, k, pj->context);
    for (size_t j = 0; j < n_cs; j++)
        qmla_jnl_printf(&pj->j, " %a", nll[j]);
    for (size_t j = 0; j < n_cs && pj->kl && kl_sum; j++) {
        static const char hx[] = "0123456789abcdef";
        for (size_t t = 0; t < pj->context; t++) {
            uint32_t u;
            memcpy(&u, &kl_tok[j * pj->context + t], sizeof u);
            for (int i = 0; i < 8; i++)
                pj->hex[8 * t + (size_t)i] = hx[(u >> (28 - 4 * i)) & 15];
        }
        pj->hex[8 * pj->context] = '\0';
        qmla_jnl_printf(&pj->j, " %a %lld %s", kl_sum[j], top1[j], pj->hex);
    }
    qmla_jnl_printf(&pj->j, "\n");
    pj->pending++;
    if (pj->pending >= PPL_COMMIT_MAX || qmla_monotonic_s() - pj->last >= PPL_COMMIT_S)
        return pj_flush(pj, err);
    return QMLA_OK;
}

/* The resume key: every input and option a window's NLLs depend on (the
 * paths and the command line are recorded from the run that writes). */
static char *pj_key(const char *dir, const qmla_ppl_run_opts *o, size_t context,
                    const uint8_t *const *bufs, const size_t *nbs, const char (*tsha)[65],
                    const qmla_cache_spec *specs, size_t n_spec, const char *kl_ref,
                    qmla_error *err)
{
    char *key = NULL, esc[512];
    size_t klen = 0;
    FILE *f = open_memstream(&key, &klen);
    if (!f) {
        qmla_error_set(err, QMLA_ENOMEM, "resume key");
        return NULL;
    }
    {
        /* the model directory's files (name:size:mtime, as the capture's
         * key lists them), as one FNV-1a 64 so that the key stays short */
        char *mk = NULL;
        size_t ml = 0;
        FILE *mf = open_memstream(&mk, &ml);
        if (mf) {
            qmla_eng_model_files_key(mf, dir);
            if (fclose(mf) != 0) {
                free(mk);
                mk = NULL;
            }
        }
        if (!mk) {
            fclose(f);
            free(key);
            qmla_error_set(err, QMLA_ENOMEM, "resume key");
            return NULL;
        }
        fprintf(f, "model=%016llx", (unsigned long long)qmla_jnl_fnv1a(mk, ml, QMLA_JNL_FNV_INIT));
        free(mk);
    }
    fprintf(f, " texts=");
    for (size_t k = 0; k < o->n_texts; k++)
        fprintf(f, "%s%zu:%016llx", k ? "," : "", nbs[k],
                (unsigned long long)qmla_jnl_fnv1a(bufs[k], nbs[k], QMLA_JNL_FNV_INIT));
    fprintf(f, " transforms=");
    for (size_t i = 0; i < o->n_transforms; i++)
        fprintf(f, "%s%.16s", i ? "," : "", tsha[i]); /* SHA-256, first 64 bits */
    fprintf(f, " configs=");
    for (size_t s = 0; s < n_spec; s++) {
        qmla_jnl_escape(specs[s].name, esc, sizeof esc);
        fprintf(f, "%s%s", s ? "," : "", esc);
        qmla_jnl_escape(specs[s].policy, esc, sizeof esc);
        fprintf(f, "@%s", esc);
    }
    fprintf(f, " transforms_only=%d tokens=%zu context=%zu", !!o->transforms_only, o->tokens,
            context);
    if (kl_ref) /* runs without KL keep the key they had */
        fprintf(f, " kl=%s", kl_ref);
    if (fclose(f) != 0) {
        free(key);
        qmla_error_set(err, QMLA_ENOMEM, "resume key");
        return NULL;
    }
    return key;
}

/* A ppl journal of another key: QMLA_EMISMATCH naming the fields that
 * differ (the journal layer's message would quote both keys whole); 0 when
 * `path` is no ppl journal of another key (qmla_jnl_open decides). */
static int pj_other_key(const char *path, const char *key, qmla_error *err)
{
    static const char magic[] = "qmla-journal 1 ppl ";
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char *line = NULL;
    size_t cap = 0;
    const ssize_t n = getline(&line, &cap, f);
    fclose(f);
    if (n <= 0 || line[n - 1] != '\n' || strncmp(line, magic, sizeof magic - 1)) {
        free(line);
        return 0;
    }
    line[n - 1] = '\0';
    const char *was = line + sizeof magic - 1;
    if (!strcmp(was, key)) {
        free(line);
        return 0;
    }
    /* fields "name=value" separated by spaces, in the same order */
    char diff[700] = "";
    size_t dl = 0;
    for (const char *a = was, *b = key; *a || *b;) {
        const size_t la = strcspn(a, " "), lb = strcspn(b, " ");
        if ((la != lb || memcmp(a, b, la)) && dl < sizeof diff - 1)
            dl += (size_t)snprintf(diff + dl, sizeof diff - dl, "%s%.*s in the journal, %.*s now",
                                   dl ? "; " : "", (int)(la < 150 ? la : 150), a,
                                   (int)(lb < 150 ? lb : 150), b);
        a += la + (a[la] == ' ');
        b += lb + (b[lb] == ' ');
    }
    if (dl >= sizeof diff)
        dl = sizeof diff - 1;
    free(line);
    return qmla_error_set(err, QMLA_EMISMATCH, "%s: journal of another run (%s); use --force "
                          "to discard it", path, diff);
}

int qmla_ppl_run(const char *dir, const char *out, const qmla_ppl_run_opts *o,
                 qmla_ppl_run_result *r, qmla_error *err)
{
    memset(r, 0, sizeof *r);
    const size_t n_texts = o->n_texts, n_tf = o->n_transforms;
    const char *const *texts = o->texts, *const *tfp = o->transforms;
    if (!n_texts)
        return qmla_refuse(&r->refusal, err, "--text is required");
    if (!out)
        return qmla_refuse(&r->refusal, err, "-o RESULTS.h5 is required");
    if (n_texts > QMLA_PPL_MAX)
        return qmla_refuse(&r->refusal, err, "--text: at most %d texts", QMLA_PPL_MAX);
    if (n_tf > QMLA_PPL_MAX)
        return qmla_refuse(&r->refusal, err, "--transforms: at most %d files", QMLA_PPL_MAX);
    const size_t context = o->context ? o->context : 512;
    char **cl = NULL, **pl = NULL, *cbuf = NULL, *pbuf = NULL;
    size_t nc = 0, np = 0;
    int st = QMLA_OK;
    if (qmla_split_list(o->configs ? o->configs : "bf16", &cl, &nc, &cbuf) || !nc ||
        qmla_split_list(o->policies ? o->policies : "none", &pl, &np, &pbuf) || !np) {
        st = qmla_refuse(&r->refusal, err, "--config / --policy: expected comma-separated lists");
        free(cl);
        free(cbuf);
        free(pl);
        free(pbuf);
        return st;
    }
    {
        /* before any work (a full text takes minutes): -o and the journal
         * must be regular files or new names, and none of the inputs */
        const char *in[2 * QMLA_PPL_MAX];
        size_t n_in = 0;
        for (size_t k = 0; k < n_texts; k++)
            in[n_in++] = texts[k];
        for (size_t k = 0; k < n_tf; k++)
            in[n_in++] = tfp[k];
        /* a FIFO or device as --text blocked (or never ended) */
        int bad_text = 0;
        for (size_t k = 0; k < n_texts && !bad_text; k++)
            bad_text = qmla_text_check_input(texts[k], "--text", err) != QMLA_OK;
        r->refusal = bad_text; /* reported as the text reader's errors are */
        if (bad_text || qmla_output_path_check(out, "output file (-o)", in, n_in, err) ||
            (o->journal && qmla_output_path_check(o->journal, "journal", in, n_in, err))) {
            free(cl);
            free(cbuf);
            free(pl);
            free(pbuf);
            return err->status;
        }
    }
    size_t n_spec = 0, n_g = 0;
    qmla_cache_spec *specs = calloc(nc * np + 1, sizeof *specs);
    /* variant 0: the checkpoint as it is; 1..n_tf: with the file's transforms */
    qmla_model *mv[QMLA_PPL_MAX + 1] = {0};
    qmla_transform_file tf[QMLA_PPL_MAX];
    char tsha[QMLA_PPL_MAX][65];
    char (*labels)[32] = r->labels;
    memset(tf, 0, sizeof tf);
    const size_t max_rows = nc * np * n_texts * (n_tf + 1) + 1;
    r->rows = calloc(max_rows, sizeof *r->rows);
    size_t *row_spec = calloc(max_rows, sizeof *row_spec);
    pgroup *gs = calloc(n_texts * (n_tf + 1) + 1, sizeof *gs);
    qmla_cache_spec *grp = calloc(nc * np + 1, sizeof *grp);
    qmla_ppl_result *res = calloc(nc * np + 1, sizeof *res);
    uint8_t *bufs[QMLA_PPL_MAX] = {0};
    size_t nbs[QMLA_PPL_MAX] = {0};
    pjournal pj;
    memset(&pj, 0, sizeof pj);
    int success = 0;
    r->priv = specs;
    if (!specs || !r->rows || !row_spec || !gs || !grp || !res) {
        st = qmla_refuse(&r->refusal, err, "out of memory");
        goto done;
    }
    int any_quant = 0;
    for (size_t p = 0; p < np; p++)
        for (size_t c = 0; c < nc; c++) {
            qmla_cache_spec s;
            st = qmla_alloc_is_file(cl[c]) ? qmla_cache_spec_from_allocation(cl[c], pl[p], &s, err)
                                           : qmla_cache_spec_parse(cl[c], pl[p], &s, err);
            if (st)
                goto done;
            const int plain = s.c_bits == QMLA_CACHE_FP32 || s.c_bits == QMLA_CACHE_BF16;
            /* a policy changes nothing for unquantized caches: one row */
            if (plain && p > 0 && strcmp(s.policy, "none"))
                continue;
            if (plain)
                snprintf(s.policy, sizeof s.policy, "none"), s.sink = s.window = 0;
            any_quant |= !plain;
            specs[n_spec++] = s;
        }
    /* the KL reference: --kl-ref, or fp32 when a configuration is quantized */
    const char *kl_ref = o->kl_ref && *o->kl_ref ? o->kl_ref : any_quant ? "fp32" : "none";
    qmla_cache_spec kl_spec;
    memset(&kl_spec, 0, sizeof kl_spec);
    if (strcmp(kl_ref, "fp32") && strcmp(kl_ref, "bf16") && strcmp(kl_ref, "none")) {
        st = qmla_refuse(&r->refusal, err, "--kl-ref: expected fp32, bf16 or none, found \"%s\"",
                         kl_ref);
        goto done;
    }
    if (!strcmp(kl_ref, "none"))
        kl_ref = NULL;
    else if ((st = qmla_cache_spec_parse(kl_ref, "none", &kl_spec, err)))
        goto done;
    int any_policy = 0;
    for (size_t p = 0; p < np; p++)
        any_policy |= strcmp(pl[p], "none") != 0;
    if (any_policy && !any_quant)
        emit(o, QMLA_PPL_NOTE, NULL, 0, 0, "note: --policy applies to quantized configs only; the "
             "fp32/bf16 rows are scored without one (policy none)");
    for (size_t i = 0; i < n_tf; i++) {
        st = qmla_transform_file_read(tfp[i], &tf[i], err);
        if (st)
            goto done;
        qmla_tmethod_of(tf[i].meta.method)->ppl_label(&tf[i].meta, labels[i + 1],
                                                       sizeof labels[i + 1]);
    }
    /* the texts, and the groups with their rows: (text, variant) in order */
    const size_t maxw = o->tokens ? (o->tokens + context - 1) / context : 0;
    size_t n_rows_all = 0;
    for (size_t k = 0; k < n_texts; k++) {
        if (qmla_text_read(texts[k], &bufs[k], &nbs[k], err)) {
            r->refusal = 1;
            st = err->status;
            goto done;
        }
        for (size_t v = 0; v <= n_tf; v++) {
            size_t n_grp = 0;
            for (size_t s = 0; s < n_spec; s++) {
                const qmla_cache_spec *sp = &specs[s];
                const int plain = sp->c_bits == QMLA_CACHE_FP32 || sp->c_bits == QMLA_CACHE_BF16;
                if (!v && o->transforms_only)
                    continue;
                if (v) {
                    const qmla_transform_meta *tm = &tf[v - 1].meta;
                    if (plain && any_quant)
                        continue;
                    /* a learned file serves the configuration it was learned for */
                    if (!plain && qmla_tmethod_of(tm->method)->learned &&
                        strncmp(sp->name, tm->config, strlen(tm->config)))
                        continue;
                }
                qmla_ppl_row *row = &r->rows[n_rows_all + n_grp];
                row_spec[n_rows_all + n_grp] = s;
                row->text = texts[k];
                row->config = sp->name;
                row->policy = sp->policy;
                row->method = v ? labels[v] : plain ? "none" : "RTN";
                row->transforms = v ? tfp[v - 1] : "";
                row->context = context;
                row->kl_ref = kl_ref;
                n_grp++;
            }
            if (!n_grp)
                continue;
            pgroup *G = &gs[n_g++];
            G->k = k;
            G->v = v;
            G->row0 = n_rows_all;
            G->n = n_grp;
            G->n_win = qmla_eng_ppl_n_windows(nbs[k], context, maxw);
            G->done = calloc(G->n_win + 1, 1);
            G->nll = calloc(G->n_win * n_grp + 1, sizeof *G->nll);
            G->ref_index = -1;
            for (size_t j = 0; j < n_grp && kl_ref; j++)
                if (G->ref_index < 0 && !strcmp(r->rows[n_rows_all + j].config, kl_ref))
                    G->ref_index = (long)j;
            if (kl_ref) {
                G->kl_sum = calloc(G->n_win * n_grp + 1, sizeof *G->kl_sum);
                G->top1 = calloc(G->n_win * n_grp + 1, sizeof *G->top1);
                G->kl_tok = calloc(G->n_win * n_grp * context + 1, sizeof *G->kl_tok);
            }
            if (!G->done || !G->nll || (kl_ref && (!G->kl_sum || !G->top1 || !G->kl_tok))) {
                st = qmla_refuse(&r->refusal, err, "out of memory");
                goto done;
            }
            n_rows_all += n_grp;
        }
    }
    if (o->journal) {
        /* before the models load: a journal of other inputs is refused at once */
        for (size_t i = 0; i < n_tf; i++)
            if ((st = qmla_sha256_file(tfp[i], tsha[i], err)))
                goto done;
        char *key = pj_key(dir, o, context, (const uint8_t *const *)bufs, nbs,
                           (const char (*)[65])tsha, specs, n_spec, kl_ref, err);
        if (!key) {
            st = err->status;
            goto done;
        }
        if (!o->force && (st = pj_other_key(o->journal, key, err))) {
            free(key);
            goto done;
        }
        pj.g = gs;
        pj.n_g = n_g;
        pj.context = context;
        pj.kl = kl_ref != NULL;
        if (pj.kl && !(pj.hex = malloc(8 * context + 1))) {
            free(key);
            st = qmla_refuse(&r->refusal, err, "out of memory");
            goto done;
        }
        size_t n_rec = 0;
        st = qmla_jnl_open(&pj.j, o->journal, "ppl", key, o->force, pj_replay, &pj, &n_rec,
                           err);
        free(key);
        if (st)
            goto done;
        pj.open = 1;
        pj.last = qmla_monotonic_s();
        if (n_rec == 0) /* a new (or forced) journal: nothing restored */
            for (size_t g = 0; g < n_g; g++)
                memset(gs[g].done, 0, gs[g].n_win);
        for (size_t g = 0; g < n_g; g++) {
            r->total_windows += gs[g].n_win;
            for (size_t w = 0; w < gs[g].n_win; w++)
                r->resumed += gs[g].done[w] != 0;
        }
        pj.kept = r->resumed;
        if (r->resumed)
            emit(o, QMLA_PPL_NOTE, NULL, 0, 0, "resumed %zu of %zu windows from %s", r->resumed,
                 r->total_windows, o->journal);
    }
    for (size_t v = 0; v <= n_tf; v++) {
        double t0 = qmla_monotonic_s();
        st = qmla_model_load(dir, &mv[v], err);
        if (st)
            goto done;
        if (v && (st = qmla_transform_file_check_complete(&tf[v - 1], tfp[v - 1],
                                                          qmla_model_cfg(mv[v])->L, err))) {
            r->refusal = 1; /* as eval refuses it */
            goto done;
        }
        if (v && (st = qmla_model_apply_transforms(mv[v], tf[v - 1].t,
                                                   (const float *const *)tf[v - 1].gamma,
                                                   tf[v - 1].n, err))) {
            qmla_error_prefix(err, "%s: ", tfp[v - 1]);
            goto done;
        }
        const qmla_model_config *mc = qmla_model_cfg(mv[v]);
        if (!v)
            emit(o, QMLA_PPL_NOTE, NULL, 0, 0, "%s: %s, %zu parameters, %zu layers, d_c %zu, d_r %zu "
                 "(loaded in %.2f s)", dir, mc->arch, qmla_model_n_params(mv[v]), mc->L,
                 mc->d_c, mc->d_r, qmla_monotonic_s() - t0);
        else if (qmla_tmethod_of(tf[v - 1].meta.method)->learned)
            emit(o, QMLA_PPL_NOTE, NULL, 0, 0, "%s: %s transforms (%s, learned for %s) of %zu layers "
                 "folded into the weights", tfp[v - 1], labels[v],
                 qmla_tmethod_name(tf[v - 1].meta.method), tf[v - 1].meta.config, tf[v - 1].n);
        else
            emit(o, QMLA_PPL_NOTE, NULL, 0, 0, "%s: %s transforms (a baseline, used for every quantized "
                 "config) of %zu layers folded into the weights", tfp[v - 1], labels[v], tf[v - 1].n);
    }
    const qmla_exec ex = qmla_exec_cpu(o->threads);
    emit(o, QMLA_PPL_TABLE, NULL, 0, 0, "%s", kl_ref ? kl_ref : "");
    for (size_t g = 0; g < n_g; g++) {
        const pgroup *G = &gs[g];
        const size_t k = G->k, v = G->v, n_grp = G->n;
        for (size_t j = 0; j < n_grp; j++)
            grp[j] = specs[row_spec[G->row0 + j]];
        double t1 = qmla_monotonic_s();
        const char *base = strrchr(texts[k], '/');
        emit(o, QMLA_PPL_GROUP_BEGIN, NULL, 0, 0, "ppl %s%s%s", base ? base + 1 : texts[k],
             v ? " + " : "", v ? labels[v] : "");
        const qmla_eng_ppl_resume rs = {G->done, G->nll, pj_window, &pj};
        const qmla_eng_ppl_kl klg = {&kl_spec, G->ref_index, G->kl_sum, G->top1, G->kl_tok};
        pj.cur = g;
        st = qmla_eng_ppl_windows(mv[v], &ex, grp, n_grp, bufs[k], nbs[k], context, maxw,
                                  o->progress, o->progress_ctx, pj.open ? &rs : NULL,
                                  kl_ref ? &klg : NULL, &r->stopped, res, err);
        {
            /* the windows finished so far are kept, whatever happened */
            qmla_error e2;
            qmla_error_clear(&e2);
            const int st2 = pj_flush(&pj, &e2);
            if (st2 && !st) {
                st = st2;
                *err = e2;
            }
        }
        for (size_t j = 0; j < n_grp && !st && !r->stopped; j++)
            r->rows[r->n_rows + j].r = res[j];
        emit(o, QMLA_PPL_GROUP_END, r->rows + r->n_rows, st || r->stopped ? 0 : n_grp,
             qmla_monotonic_s() - t1, NULL);
        if (!st && !r->stopped && o->should_stop && o->should_stop(o->progress_ctx))
            r->stopped = 1;
        if (r->stopped && !st) {
            st = pj.open ? qmla_error_set(err, QMLA_EINVAL, "stopped; the finished windows are "
                                          "kept in %s", o->journal)
                         : qmla_error_set(err, QMLA_EINVAL, "stopped; nothing written to %s", out);
            goto done;
        }
        if (st) {
            r->stopped = 0;
            qmla_error_prefix(err, "%s%s%s: ", texts[k], v ? ", transforms " : "",
                              v ? tfp[v - 1] : "");
            goto done;
        }
        r->n_rows += n_grp;
    }
    if (o->should_stop && o->should_stop(o->progress_ctx)) {
        /* after the last window: nothing written (the journal holds it all) */
        r->stopped = 1;
        st = pj.open ? qmla_error_set(err, QMLA_EINVAL, "stopped; the finished windows are "
                                      "kept in %s", o->journal)
                     : qmla_error_set(err, QMLA_EINVAL, "stopped; nothing written to %s", out);
        goto done;
    }
    st = qmla_ppl_save(out, dir, o->command_line, r->rows, r->n_rows, err);
    if (!st) {
        r->wrote = 1;
        success = 1;
    }
done:
    /* removed once the results are written, or when it holds no window (a
     * run refused before any was scored leaves nothing behind) */
    if (pj.open)
        qmla_jnl_close(&pj.j, success || !pj.kept);
    for (size_t v = 0; v <= n_tf; v++)
        qmla_model_free(mv[v]);
    for (size_t i = 0; i < n_tf; i++)
        qmla_transform_file_free(&tf[i]);
    for (size_t k = 0; k < n_texts; k++)
        free(bufs[k]);
    for (size_t g = 0; gs && g < n_g; g++) {
        free(gs[g].done);
        free(gs[g].nll);
        free(gs[g].kl_sum);
        free(gs[g].top1);
        free(gs[g].kl_tok);
    }
    free(pj.hex);
    free(gs);
    free(row_spec);
    free(grp);
    free(res);
    free(cl);
    free(cbuf);
    free(pl);
    free(pbuf);
    return st;
}
