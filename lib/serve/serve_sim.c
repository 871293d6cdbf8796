/* serve_sim.c — discrete-event model of vLLM V1 scheduling under KV cache
 * pressure (include/qmla/serve_sim.h): scenario parsing, calibration of the
 * decode attention cost from the benchmark TSV, and the simulation. */
#include "qmla/serve_sim.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- calibration ----------------------------------------------------------- */

int qmla_serve_calibrate(const char *tsv, qmla_serve_config *c, qmla_error *err)
{
    FILE *f = fopen(tsv, "r");
    if (!f)
        return qmla_error_set(err, qmla_status_from_errno(errno), "%s: cannot open the benchmark "
                              "results: %s", tsv, strerror(errno));
    char line[1024];
    double sx = 0, sy = 0, sxx = 0, sxy = 0, xs[256], ys[256];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        char kind[32], cfg[32];
        long batch, ctx;
        double us;
        if (sscanf(line, "%31s %ld %ld %31s %lf", kind, &batch, &ctx, cfg, &us) != 5 ||
            strcmp(kind, "decode") || strcmp(cfg, c->name) || n >= 256)
            continue;
        const double x = (double)batch * (double)ctx / 1e6;
        xs[n] = x;
        ys[n] = us;
        sx += x;
        sy += us;
        sxx += x * x;
        sxy += x * us;
        n++;
    }
    fclose(f);
    const double den = n * sxx - sx * sx;
    if (n < 2 || den <= 0)
        return qmla_error_set(err, QMLA_EINVAL, "%s: expected at least 2 `decode` "
                              "rows of config %s at different batch x context, "
                              "found %d", tsv, c->name, n);
    c->attn_per_mtok_us = (n * sxy - sx * sy) / den;
    c->attn_base_us = (sy - c->attn_per_mtok_us * sx) / n;
    c->have_attn = 1;
    c->fit_rows = n;
    c->fit_worst_rel = 0;
    for (int k = 0; k < n; k++) {
        const double rel =
            fabs(c->attn_base_us + c->attn_per_mtok_us * xs[k] - ys[k]) / ys[k];
        c->fit_worst_rel = rel > c->fit_worst_rel ? rel : c->fit_worst_rel;
    }
    return QMLA_OK;
}

/* ---- scenario file --------------------------------------------------------- */

#define SERVE_MAX_COUNT (1LL << 40)    /* tokens, slots, pages, layers, ... */
#define SERVE_MAX_REQUESTS (1LL << 20) /* requests (memory: one record each) */

int qmla_serve_scenario_read(const char *path, qmla_serve_scenario *s,
                             qmla_error *err)
{
    memset(s, 0, sizeof *s);
    FILE *f = fopen(path, "r");
    if (!f)
        return qmla_error_set(err, qmla_status_from_errno(errno), "%s: cannot open: %s", path,
                              strerror(errno));
    struct { const char *key; long long *i; double *d; } keys[] = {
        {"requests", &s->requests, NULL},
        {"input_tokens", &s->input_tokens, NULL},
        {"output_tokens", &s->output_tokens, NULL},
        {"page_tokens", &s->page_tokens, NULL},
        {"max_seqs", &s->max_seqs, NULL},
        {"max_batched_tokens", &s->max_batched_tokens, NULL},
        {"n_layers", &s->n_layers, NULL},
        {"step_fixed_us", NULL, &s->step_fixed_us},
        {"prefill_token_us", NULL, &s->prefill_token_us},
        {"prefill_attn_us_per_mpair", NULL, &s->prefill_attn_us_per_mpair},
        {"decode_fixed_us", NULL, &s->decode_fixed_us},
    };
    const size_t nkeys = sizeof keys / sizeof keys[0];
    char line[2048], calib[1024] = "";
    int ln = 0, st = QMLA_OK;
    while (!st && fgets(line, sizeof line, f)) {
        ln++;
        if (!strchr(line, '\n') && !feof(f)) {
            st = qmla_error_set(err, QMLA_EINVAL, "%s:%d: expected a line of at most %zu "
                                "bytes, found a longer one", path, ln, sizeof line - 2);
            break;
        }
        char *h = strchr(line, '#');
        if (h)
            *h = '\0';
        char k[64], a[1024], b[64], c[64];
        const int nf = sscanf(line, "%63s %1023s %63s %63s", k, a, b, c);
        if (nf <= 0)
            continue;
        size_t q = 0;
        while (q < nkeys && strcmp(keys[q].key, k))
            q++;
        char *end = NULL;
        if (q < nkeys) {
            errno = 0;
            if (nf != 2)
                st = qmla_error_set(err, QMLA_EINVAL, "%s:%d: %s: expected one "
                                    "value, found %d", path, ln, k, nf - 1);
            else if (keys[q].i) {
                /* bounded so that no sum or product of counts overflows
                 * (input + output tokens wrapped negative and passed the
                 * capacity check) */
                const long long hi = q == 0 ? SERVE_MAX_REQUESTS : SERVE_MAX_COUNT;
                const long long v = strtoll(a, &end, 10);
                if (*end || errno || v < 0 || v > hi)
                    st = qmla_error_set(err, QMLA_EINVAL, "%s:%d: %s: expected an "
                                        "integer in 0..%lld, found \"%s\"", path,
                                        ln, k, hi, a);
                *keys[q].i = v;
            } else {
                const double v = strtod(a, &end);
                if (*end || !(v >= 0) || !isfinite(v))
                    st = qmla_error_set(err, QMLA_EINVAL, "%s:%d: %s: expected a "
                                        "non-negative number, found \"%s\"", path,
                                        ln, k, a);
                *keys[q].d = v;
            }
        } else if (!strcmp(k, "config") && nf == 3) {
            if (s->n_configs == QMLA_SERVE_MAX_CONFIGS) {
                st = qmla_error_set(err, QMLA_EINVAL, "%s:%d: expected at most %d "
                                    "configs", path, ln, QMLA_SERVE_MAX_CONFIGS);
                break;
            }
            qmla_serve_config *cf = &s->cfg[s->n_configs++];
            snprintf(cf->name, sizeof cf->name, "%.31s", a);
            errno = 0;
            cf->slots = strtoll(b, &end, 10);
            if (*end || errno || cf->slots <= 0 || cf->slots > SERVE_MAX_COUNT)
                st = qmla_error_set(err, QMLA_EINVAL, "%s:%d: config %s: expected "
                                    "a slot count in 1..%lld, found \"%s\"", path, ln,
                                    a, SERVE_MAX_COUNT, b);
        } else if (!strcmp(k, "attn") && nf == 4) {
            size_t j = 0;
            while (j < s->n_configs && strcmp(s->cfg[j].name, a))
                j++;
            if (j == s->n_configs) {
                st = qmla_error_set(err, QMLA_EINVAL, "%s:%d: attn %s: expected a "
                                    "config declared above, found none", path, ln, a);
                break;
            }
            char *e2 = NULL;
            s->cfg[j].attn_base_us = strtod(b, &end);
            s->cfg[j].attn_per_mtok_us = strtod(c, &e2);
            if (*end || *e2 || !isfinite(s->cfg[j].attn_base_us) ||
                !isfinite(s->cfg[j].attn_per_mtok_us))
                st = qmla_error_set(err, QMLA_EINVAL, "%s:%d: attn %s: expected two "
                                    "finite numbers, found \"%s %s\"", path, ln, a, b, c);
            s->cfg[j].have_attn = 1;
        } else if (!strcmp(k, "calibrate") && nf == 2) {
            snprintf(calib, sizeof calib, "%s", a);
        } else
            st = qmla_error_set(err, QMLA_EINVAL, "%s:%d: expected a known key "
                                "(see include/qmla/serve_sim.h), found \"%s\"", path,
                                ln, k);
    }
    if (!st && ferror(f))
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot read: %s", path, strerror(errno));
    fclose(f);
    if (st)
        return st;
    if (calib[0]) {
        char full[2200];
        const char *slash = strrchr(path, '/');
        if (calib[0] != '/' && slash)
            snprintf(full, sizeof full, "%.*s/%s", (int)(slash - path), path, calib);
        else
            snprintf(full, sizeof full, "%s", calib);
        snprintf(s->calibrated_from, sizeof s->calibrated_from, "%s", calib);
        for (size_t j = 0; j < s->n_configs && !st; j++)
            if (!s->cfg[j].have_attn)
                st = qmla_serve_calibrate(full, &s->cfg[j], err);
        if (st)
            return qmla_error_prefix(err, "%s: calibrate: ", path);
    }
    if (!s->requests || !s->input_tokens || !s->output_tokens || !s->page_tokens ||
        !s->max_seqs || !s->max_batched_tokens || !s->n_configs)
        return qmla_error_set(err, QMLA_EINVAL, "%s: expected requests, "
                              "input_tokens, output_tokens, page_tokens, max_seqs, "
                              "max_batched_tokens (all > 0) and at least one config",
                              path);
    for (size_t j = 0; j < s->n_configs; j++)
        if (!s->cfg[j].have_attn)
            return qmla_error_set(err, QMLA_EINVAL, "%s: config %s: expected its "
                                  "decode attention cost (an attn line or "
                                  "calibrate), found none", path, s->cfg[j].name);
    return QMLA_OK;
}

/* ---- simulation ------------------------------------------------------------ */

/* The work of a step is proportional to the requests it touches (running,
 * admitted, preempted), not to all requests: the waiting queue is a ring
 * buffer (preemption pushes to its front, admission pops from it), the
 * scheduled set is kept as a list and visited in request order (sorted, as
 * the step's sums were taken over all requests in index order), finished
 * requests leave `running` in one compaction pass, and the blocks in use are
 * summed over the running requests (the only ones that hold blocks). A run of
 * S steps costs O(sum over steps of k log k), k the requests of the step,
 * where it was O(S n). Results are those of the linear scans bit for bit
 * (tests/serve/test_serve_sim.c compares with them). */

typedef struct sim_req {
    long long tokens;   /* prompt + outputs sampled so far */
    long long computed; /* tokens whose KV is in the cache */
    long long outputs;
    long long blocks;
    int done;
} sim_req;

static long long ceil_div(long long a, long long b) { return a / b + (a % b != 0); }

static int cmp_ll(const void *a, const void *b)
{
    const long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

int qmla_serve_simulate(const qmla_serve_scenario *s, size_t config,
                        qmla_serve_result *r, qmla_error *err)
{
    return qmla_serve_simulate_progress(s, config, r, NULL, NULL, err);
}

int qmla_serve_simulate_progress(const qmla_serve_scenario *s, size_t config,
                                 qmla_serve_result *r, qmla_progress_fn progress,
                                 void *progress_ctx, qmla_error *err)
{
    memset(r, 0, sizeof *r);
    if (config >= s->n_configs)
        return qmla_error_set(err, QMLA_EINVAL, "serve-sim: config %zu of %zu",
                              config, s->n_configs);
    const qmla_serve_config *cf = &s->cfg[config];
    const long long P = s->page_tokens, cap = cf->slots / P, n = s->requests;
    r->capacity_blocks = cap;
    if (ceil_div(s->input_tokens + s->output_tokens - 1, P) > cap)
        return qmla_error_set(err, QMLA_EINVAL, "serve-sim: config %s: one request "
                              "needs %lld blocks of %lld tokens, the capacity is %lld "
                              "blocks: it can never finish", cf->name,
                              ceil_div(s->input_tokens + s->output_tokens - 1, P), P,
                              cap);
    sim_req *q = calloc((size_t)n, sizeof *q);
    long long *running = malloc((size_t)n * sizeof *running);
    long long *waiting = malloc((size_t)n * sizeof *waiting); /* ring buffer */
    long long *sched_n = calloc((size_t)n, sizeof *sched_n);
    long long *sched = malloc((size_t)n * sizeof *sched); /* ids with sched_n > 0 */
    if (!q || !running || !waiting || !sched_n || !sched) {
        free(q);
        free(running);
        free(waiting);
        free(sched_n);
        free(sched);
        return qmla_error_set(err, QMLA_ENOMEM, "serve-sim: out of memory");
    }
    long long n_run = 0, n_wait = n, w_head = 0, free_blocks = cap, finished = 0;
    for (long long i = 0; i < n; i++) {
        q[i].tokens = s->input_tokens;
        waiting[i] = i; /* FCFS: all arrive at t = 0 in index order */
    }
    /* progress: finished requests of n, about every n/1000 of them */
    const long long every = n / 1000 > 0 ? n / 1000 : 1;
    long long next_report = every;
    double t_us = 0;
    int st = QMLA_OK;
    const long long max_steps = 100000000;
    while (finished < n && !st) {
        if (r->steps++ > max_steps) {
            st = qmla_error_set(err, QMLA_EINVAL, "serve-sim: config %s: not finished "
                                "after %lld steps: expected a scenario that ends within "
                                "them (each request's prefill alone takes input_tokens / "
                                "max_batched_tokens = %lld steps)", cf->name, max_steps,
                                ceil_div(s->input_tokens, s->max_batched_tokens));
            break;
        }
        long long budget = s->max_batched_tokens;
        int preempted = 0;
        /* 1. running requests, in order */
        for (long long i = 0; i < n_run && budget > 0; i++) {
            const long long id = running[i];
            sim_req *x = &q[id];
            const long long want = x->tokens - x->computed;
            const long long nn = want < budget ? want : budget;
            for (;;) {
                const long long need = ceil_div(x->computed + nn, P) - x->blocks;
                if (need <= free_blocks) {
                    x->blocks += need > 0 ? need : 0;
                    free_blocks -= need > 0 ? need : 0;
                    sched_n[id] = nn;
                    budget -= nn;
                    break;
                }
                /* preempt the last running request (only here: exhaustion) */
                const long long v = running[--n_run];
                sim_req *y = &q[v];
                r->preemptions++;
                r->recomputed_tokens += y->computed;
                free_blocks += y->blocks;
                y->blocks = 0;
                y->computed = 0;
                sched_n[v] = 0;
                w_head = w_head ? w_head - 1 : n - 1;
                waiting[w_head] = v;
                n_wait++;
                preempted = 1;
                if (v == id)
                    break;
            }
        }
        /* 2. admission, only in a step without preemption */
        while (!preempted && n_wait > 0 && n_run < s->max_seqs && budget > 0) {
            const long long id = waiting[w_head];
            sim_req *x = &q[id];
            const long long want = x->tokens - x->computed;
            const long long nn = want < budget ? want : budget;
            const long long need = ceil_div(x->computed + nn, P) - x->blocks;
            if (need > free_blocks)
                break;
            x->blocks += need;
            free_blocks -= need;
            sched_n[id] = nn;
            budget -= nn;
            w_head = w_head + 1 < n ? w_head + 1 : 0;
            n_wait--;
            running[n_run++] = id;
        }
        /* invariant: no slot over-commit (only running requests hold blocks) */
        long long used = 0, n_sched = 0;
        int sorted = 1;
        for (long long i = 0; i < n_run; i++) {
            const long long id = running[i];
            used += q[id].blocks;
            if (sched_n[id]) {
                sorted &= !n_sched || sched[n_sched - 1] < id;
                sched[n_sched++] = id;
            }
        }
        if (used + free_blocks != cap || free_blocks < 0) {
            st = qmla_error_set(err, QMLA_EINVAL, "serve-sim: step %lld: blocks in "
                                "use %lld + free %lld != capacity %lld", r->steps,
                                used, free_blocks, cap);
            break;
        }
        r->max_used_blocks = used > r->max_used_blocks ? used : r->max_used_blocks;
        /* 3. cost of the step, summed in request order */
        if (!sorted)
            qsort(sched, (size_t)n_sched, sizeof *sched, cmp_ll);
        double pf_tok = 0, pf_pairs = 0, dec_ctx = 0;
        long long n_dec = 0;
        for (long long k = 0; k < n_sched; k++) {
            const long long nn = sched_n[sched[k]];
            const sim_req *x = &q[sched[k]];
            if (nn == 1 && x->outputs > 0 && x->computed == x->tokens - 1) {
                n_dec++;
                dec_ctx += (double)(x->computed + 1);
            } else {
                pf_tok += (double)nn;
                pf_pairs += (double)nn * (double)x->computed +
                            (double)nn * (double)(nn + 1) / 2.0;
            }
        }
        if (n_sched == 0) {
            st = qmla_error_set(err, QMLA_EINVAL, "serve-sim: config %s: step %lld "
                                "schedules nothing (%lld running, %lld waiting, %lld "
                                "free blocks)", cf->name, r->steps, n_run, n_wait,
                                free_blocks);
            break;
        }
        double dt = s->step_fixed_us + s->prefill_token_us * pf_tok +
                    s->prefill_attn_us_per_mpair * pf_pairs / 1e6;
        if (n_dec)
            dt += s->decode_fixed_us +
                  (double)s->n_layers * (cf->attn_base_us + cf->attn_per_mtok_us *
                                                                dec_ctx / 1e6);
        /* a cost model that makes a step negative or non-finite (an attn
         * fit below zero, a huge coefficient) gave NaN, negative or infinite
         * times with exit 0 */
        if (!(dt >= 0) || !isfinite(dt)) {
            st = qmla_error_set(err, QMLA_EINVAL, "serve-sim: config %s: step %lld costs "
                                "%g us (%lld prefill tokens, %lld decodes): expected a "
                                "finite non-negative time from the cost model (step_fixed_us, "
                                "prefill_*, decode_fixed_us, n_layers x attn %g + %g per "
                                "Mtok)", cf->name, r->steps, dt, (long long)pf_tok, n_dec,
                                cf->attn_base_us, cf->attn_per_mtok_us);
            break;
        }
        t_us += dt;
        if (pf_tok > 0)
            r->prefill_s += dt / 1e6;
        else
            r->decode_s += dt / 1e6;
        r->prefill_tokens += (long long)pf_tok;
        /* 4. sample outputs; finish (finished requests leave `running` in
         * order, one compaction pass) */
        long long kept = 0;
        for (long long i = 0; i < n_run; i++) {
            const long long id = running[i];
            sim_req *x = &q[id];
            running[kept++] = id;
            if (!sched_n[id])
                continue;
            x->computed += sched_n[id];
            if (x->computed < x->tokens)
                continue;
            if (x->computed != x->tokens || x->outputs >= s->output_tokens) {
                st = qmla_error_set(err, QMLA_EINVAL, "serve-sim: request %lld "
                                    "computed %lld of %lld tokens with %lld outputs",
                                    id, x->computed, x->tokens, x->outputs);
                break;
            }
            x->outputs++;
            r->output_tokens++;
            if (x->outputs == s->output_tokens) {
                x->done = 1;
                finished++;
                free_blocks += x->blocks;
                x->blocks = 0;
                kept--;
            } else
                x->tokens++;
        }
        if (!st)
            n_run = kept;
        for (long long k = 0; k < n_sched; k++)
            sched_n[sched[k]] = 0;
        if (!st && progress && (finished >= next_report || finished == n)) {
            next_report = finished + every;
            if (progress(progress_ctx, (size_t)finished, (size_t)n, 0))
                st = qmla_error_set(err, QMLA_EINVAL, "serve-sim: config %s: stopped by "
                                    "the progress callback after %lld of %lld requests",
                                    cf->name, finished, n);
        }
    }
    if (!st && !(t_us > 0))
        st = qmla_error_set(err, QMLA_EINVAL, "serve-sim: config %s: the cost model gives "
                            "the whole run %g us: expected a positive time (throughput is "
                            "output tokens per second)", cf->name, t_us);
    if (!st && r->output_tokens != n * s->output_tokens)
        st = qmla_error_set(err, QMLA_EINVAL, "serve-sim: %lld outputs sampled, "
                            "expected %lld", r->output_tokens, n * s->output_tokens);
    r->elapsed_s = t_us / 1e6;
    r->throughput_tok_s = r->elapsed_s > 0 ? (double)r->output_tokens / r->elapsed_s : 0;
    free(q);
    free(running);
    free(waiting);
    free(sched_n);
    free(sched);
    return st;
}

/* ---- results file ---------------------------------------------------------- */

#include "io/group.h"

int qmla_serve_check_output(const char *path, qmla_error *err)
{
    return qmla_h5_check_replace(path, "qmla-serve-sim", err) ? QMLA_EINVAL : QMLA_OK;
}

int qmla_serve_write(const char *path, const char *scenario_path,
                     const qmla_serve_scenario *s, const qmla_serve_result *r,
                     qmla_error *err)
{
    /* the whole file is replaced: an existing results file of sweep or ppl,
     * or a capture, given as -o was replaced without a word (exit 0) */
    if (qmla_serve_check_output(path, err))
        return QMLA_EINVAL;
    const size_t n = s->n_configs;
    const char *names[QMLA_SERVE_MAX_CONFIGS];
    long long iv[7][QMLA_SERVE_MAX_CONFIGS];
    double dv[6][QMLA_SERVE_MAX_CONFIGS];
    for (size_t k = 0; k < n; k++) {
        names[k] = s->cfg[k].name;
        iv[0][k] = s->cfg[k].slots;
        iv[1][k] = r[k].preemptions;
        iv[2][k] = r[k].recomputed_tokens;
        iv[3][k] = r[k].steps;
        iv[4][k] = r[k].prefill_tokens;
        iv[5][k] = r[k].output_tokens;
        iv[6][k] = r[k].max_used_blocks;
        dv[0][k] = r[k].elapsed_s;
        dv[1][k] = r[k].throughput_tok_s;
        dv[2][k] = r[k].prefill_s;
        dv[3][k] = r[k].decode_s;
        dv[4][k] = s->cfg[k].attn_base_us;
        dv[5][k] = s->cfg[k].attn_per_mtok_us;
    }
    static const char *in[7][3] = {
        {"slots", "KV token slots of the configuration", "tokens"},
        {"preemptions", "preemption events", NULL},
        {"recomputed_tokens", "computed tokens discarded by preemptions", "tokens"},
        {"steps", "engine steps", NULL},
        {"prefill_tokens", "prefill tokens computed, recomputation included", "tokens"},
        {"output_tokens", "output tokens sampled", "tokens"},
        {"max_used_blocks", "peak KV blocks in use", "blocks"}};
    static const char *dn[6][3] = {
        {"elapsed_s", "simulated whole-job time", "s"},
        {"throughput", "output tokens / elapsed", "tokens/s"},
        {"prefill_s", "time of steps with prefill tokens", "s"},
        {"decode_s", "time of decode-only steps", "s"},
        {"attn_base_us", "decode attention cost per layer per step: base", "us"},
        {"attn_per_mtok_us", "... per 1e6 tokens of summed context", "us"}};
    qmla_h5_out o;
    int st = qmla_h5_out_file(&o, path, err);
    if (st)
        return st;
    int bad = 0;
    hid_t f = o.f, g = -1;
    if (!bad) {
        bad |= qmla_h5_attr_str(f, "format", "qmla-serve-sim") != 0;
        bad |= qmla_h5_attr_int(f, "format_version", 1) != 0;
        bad |= qmla_h5_attr_str(f, "scenario", scenario_path) != 0;
        bad |= qmla_h5_attr_str(f, "calibrated_from", s->calibrated_from) != 0;
        const qmla_prov p = {.tool = "qmla serve-sim"};
        bad |= qmla_h5_prov(f, &p, path, err) != QMLA_OK;
        const struct { const char *k; long long v; } sc[] = {
            {"requests", s->requests}, {"input_tokens", s->input_tokens},
            {"output_tokens", s->output_tokens}, {"page_tokens", s->page_tokens},
            {"max_seqs", s->max_seqs}, {"max_batched_tokens", s->max_batched_tokens},
            {"n_layers", s->n_layers}};
        for (size_t k = 0; k < sizeof sc / sizeof sc[0]; k++)
            bad |= qmla_h5_attr_int(f, sc[k].k, sc[k].v) != 0;
        bad |= qmla_h5_attr_dbl(f, "step_fixed_us", s->step_fixed_us) != 0;
        bad |= qmla_h5_attr_dbl(f, "prefill_token_us", s->prefill_token_us) != 0;
        bad |= qmla_h5_attr_dbl(f, "prefill_attn_us_per_mpair",
                                s->prefill_attn_us_per_mpair) != 0;
        bad |= qmla_h5_attr_dbl(f, "decode_fixed_us", s->decode_fixed_us) != 0;
        g = H5Gcreate2(f, "serve_sim", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        bad |= g < 0;
    }
    if (!bad) {
        bad |= qmla_h5_dset_strs(g, "config", n, names, "cache configuration") != 0;
        for (int k = 0; k < 7; k++)
            bad |= qmla_h5_dset_1d(g, in[k][0], H5T_STD_I64LE, H5T_NATIVE_LLONG, n,
                                   iv[k], in[k][1], in[k][2]) != 0;
        for (int k = 0; k < 6; k++)
            bad |= qmla_h5_dset_1d(g, dn[k][0], H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n,
                                   dv[k], dn[k][1], dn[k][2]) != 0;
    }
    if (g >= 0)
        H5Gclose(g);
    if (bad)
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot build the serve-sim results",
                            path);
    return qmla_h5_out_finish(&o, st);
}
