/* tests/serve/test_serve_sim_ref.c — the serving simulator
 * (lib/serve/serve_sim.c, issue 25 item 12) against the linear-scan
 * algorithm it replaced, kept here verbatim as the reference (ref_simulate:
 * per step a scan of every request, memmove on the waiting queue): on 3,000
 * random scenarios with tight capacity (preemptions push requests back to the
 * front of the queue and re-admission reorders `running`, so the step's sums
 * visit the scheduled requests in an order other than the running order),
 * on the shipped Table 10 scenarios and on refusals, every result field is
 * equal bit for bit (memcmp) and the status and message are the same. Then
 * the progress callback of qmla_serve_simulate_progress: called with
 * done <= total, non-decreasing, ending at total = requests; a non-zero
 * return stops the run with QMLA_EINVAL naming the callback.
 * Run: meson test -C build test_serve_sim_ref */
#include "check.h"
#include "qmla/serve_sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the reference: lib/serve/serve_sim.c before issue 25 item 12 ---- */
typedef struct ref_req {
    long long tokens;   /* prompt + outputs sampled so far */
    long long computed; /* tokens whose KV is in the cache */
    long long outputs;
    long long blocks;
    int done;
} ref_req;

static long long ref_ceil_div(long long a, long long b) { return a / b + (a % b != 0); }

static int ref_simulate(const qmla_serve_scenario *s, size_t config,
                        qmla_serve_result *r, qmla_error *err)
{
    memset(r, 0, sizeof *r);
    if (config >= s->n_configs)
        return qmla_error_set(err, QMLA_EINVAL, "serve-sim: config %zu of %zu",
                              config, s->n_configs);
    const qmla_serve_config *cf = &s->cfg[config];
    const long long P = s->page_tokens, cap = cf->slots / P, n = s->requests;
    r->capacity_blocks = cap;
    if (ref_ceil_div(s->input_tokens + s->output_tokens - 1, P) > cap)
        return qmla_error_set(err, QMLA_EINVAL, "serve-sim: config %s: one request "
                              "needs %lld blocks of %lld tokens, the capacity is %lld "
                              "blocks: it can never finish", cf->name,
                              ref_ceil_div(s->input_tokens + s->output_tokens - 1, P), P,
                              cap);
    ref_req *q = calloc((size_t)n, sizeof *q);
    long long *running = malloc((size_t)n * sizeof *running);
    long long *waiting = malloc((size_t)n * sizeof *waiting);
    long long *sched_n = malloc((size_t)n * sizeof *sched_n);
    if (!q || !running || !waiting || !sched_n) {
        free(q);
        free(running);
        free(waiting);
        free(sched_n);
        return qmla_error_set(err, QMLA_ENOMEM, "serve-sim: out of memory");
    }
    long long n_run = 0, n_wait = n, free_blocks = cap, finished = 0;
    for (long long i = 0; i < n; i++) {
        q[i].tokens = s->input_tokens;
        waiting[i] = i; /* FCFS: all arrive at t = 0 in index order */
    }
    double t_us = 0;
    int st = QMLA_OK;
    const long long max_steps = 100000000;
    while (finished < n && !st) {
        if (r->steps++ > max_steps) {
            st = qmla_error_set(err, QMLA_EINVAL, "serve-sim: config %s: not finished "
                                "after %lld steps: expected a scenario that ends within "
                                "them (each request's prefill alone takes input_tokens / "
                                "max_batched_tokens = %lld steps)", cf->name, max_steps,
                                ref_ceil_div(s->input_tokens, s->max_batched_tokens));
            break;
        }
        long long budget = s->max_batched_tokens;
        int preempted = 0;
        for (long long i = 0; i < n; i++)
            sched_n[i] = 0;
        /* 1. running requests, in order */
        for (long long i = 0; i < n_run && budget > 0; i++) {
            const long long id = running[i];
            ref_req *x = &q[id];
            const long long want = x->tokens - x->computed;
            const long long nn = want < budget ? want : budget;
            for (;;) {
                const long long need = ref_ceil_div(x->computed + nn, P) - x->blocks;
                if (need <= free_blocks) {
                    x->blocks += need > 0 ? need : 0;
                    free_blocks -= need > 0 ? need : 0;
                    sched_n[id] = nn;
                    budget -= nn;
                    break;
                }
                /* preempt the last running request (only here: exhaustion) */
                const long long v = running[--n_run];
                ref_req *y = &q[v];
                r->preemptions++;
                r->recomputed_tokens += y->computed;
                free_blocks += y->blocks;
                y->blocks = 0;
                y->computed = 0;
                sched_n[v] = 0;
                memmove(waiting + 1, waiting, (size_t)n_wait * sizeof *waiting);
                waiting[0] = v;
                n_wait++;
                preempted = 1;
                if (v == id)
                    break;
            }
        }
        /* 2. admission, only in a step without preemption */
        while (!preempted && n_wait > 0 && n_run < s->max_seqs && budget > 0) {
            const long long id = waiting[0];
            ref_req *x = &q[id];
            const long long want = x->tokens - x->computed;
            const long long nn = want < budget ? want : budget;
            const long long need = ref_ceil_div(x->computed + nn, P) - x->blocks;
            if (need > free_blocks)
                break;
            x->blocks += need;
            free_blocks -= need;
            sched_n[id] = nn;
            budget -= nn;
            memmove(waiting, waiting + 1, (size_t)(n_wait - 1) * sizeof *waiting);
            n_wait--;
            running[n_run++] = id;
        }
        /* invariant: no slot over-commit */
        long long used = 0;
        for (long long i = 0; i < n; i++)
            used += q[i].blocks;
        if (used + free_blocks != cap || free_blocks < 0) {
            st = qmla_error_set(err, QMLA_EINVAL, "serve-sim: step %lld: blocks in "
                                "use %lld + free %lld != capacity %lld", r->steps,
                                used, free_blocks, cap);
            break;
        }
        r->max_used_blocks = used > r->max_used_blocks ? used : r->max_used_blocks;
        /* 3. cost of the step */
        double pf_tok = 0, pf_pairs = 0, dec_ctx = 0;
        long long n_dec = 0, n_sched = 0;
        for (long long i = 0; i < n; i++) {
            const long long nn = sched_n[i];
            if (!nn)
                continue;
            n_sched++;
            const ref_req *x = &q[i];
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
        /* 4. sample outputs; finish */
        for (long long i = 0; i < n_run; i++) {
            const long long id = running[i];
            ref_req *x = &q[id];
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
                memmove(running + i, running + i + 1,
                        (size_t)(n_run - i - 1) * sizeof *running);
                n_run--;
                i--;
            } else
                x->tokens++;
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
    return st;
}

/* ---- the comparison -------------------------------------------------- */

static unsigned long long rng_state = 0x9E3779B97F4A7C15ULL;
static long long rnd(long long lo, long long hi) /* uniform in lo..hi */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (long long)(rng_state % (unsigned long long)(hi - lo + 1));
}

static int same(const qmla_serve_scenario *s, size_t k, const char *what)
{
    qmla_serve_result a, b;
    qmla_error ea, eb;
    qmla_error_clear(&ea);
    qmla_error_clear(&eb);
    const int sa = qmla_serve_simulate(s, k, &a, &ea);
    const int sb = ref_simulate(s, k, &b, &eb);
    int ok = sa == sb && (sa ? !strcmp(ea.msg, eb.msg) : !memcmp(&a, &b, sizeof a));
    CHECK(ok, "%s: status %d vs reference %d (%s | %s); steps %lld/%lld preemptions "
          "%lld/%lld recomputed %lld/%lld elapsed %.17g/%.17g peak %lld/%lld", what, sa, sb,
          ea.msg, eb.msg, a.steps, b.steps, a.preemptions, b.preemptions,
          a.recomputed_tokens, b.recomputed_tokens, a.elapsed_s, b.elapsed_s,
          a.max_used_blocks, b.max_used_blocks);
    return sb == 0 && b.preemptions > 0;
}

typedef struct prog_log {
    size_t calls, last_done, last_total, stop_at;
    int monotonic;
} prog_log;

static int on_progress(void *ctx, size_t done, size_t total, size_t resumed)
{
    prog_log *p = ctx;
    p->monotonic &= done <= total && done >= p->last_done && resumed == 0;
    p->calls++;
    p->last_done = done;
    p->last_total = total;
    return p->stop_at && p->calls >= p->stop_at;
}

int main(void)
{
    qmla_serve_scenario s;
    int with_preemption = 0, n_cases = 0;
    for (int it = 0; it < 3000; it++) {
        memset(&s, 0, sizeof s);
        s.requests = rnd(1, 60);
        s.input_tokens = rnd(1, 40);
        s.output_tokens = rnd(1, 12);
        s.page_tokens = rnd(1, 8);
        s.max_seqs = rnd(1, 12);
        s.max_batched_tokens = rnd(1, 64);
        s.n_layers = rnd(0, 4);
        /* costs that are not integers: a change of summation order shows */
        s.step_fixed_us = (double)rnd(0, 1000) / 7.0;
        s.prefill_token_us = (double)rnd(0, 1000) / 3.0;
        s.prefill_attn_us_per_mpair = (double)rnd(0, 1000) / 11.0;
        s.decode_fixed_us = (double)rnd(0, 1000) / 13.0;
        s.n_configs = 2;
        const long long need =
            (s.input_tokens + s.output_tokens - 1 + s.page_tokens - 1) / s.page_tokens;
        for (int k = 0; k < 2; k++) {
            qmla_serve_config *c = &s.cfg[k];
            snprintf(c->name, sizeof c->name, "C%d", k);
            /* k = 0: just enough for one request or a few (preemptions);
             * k = 1: roomy; now and then one block short (refused) */
            c->slots = s.page_tokens * (k ? need * rnd(1, 20) : need + rnd(0, 2 * need));
            if (it % 97 == 0 && k == 1)
                c->slots = s.page_tokens * (need - 1);
            c->attn_base_us = (double)rnd(0, 100) / 9.0;
            c->attn_per_mtok_us = (double)rnd(0, 100000) / 17.0;
            c->have_attn = 1;
        }
        char what[64];
        for (size_t k = 0; k < 2; k++) {
            snprintf(what, sizeof what, "random scenario %d config %zu", it, k);
            with_preemption += same(&s, k, what);
            n_cases++;
        }
    }
    /* the cases exercised the preemption path (the reordering) */
    CHECK(with_preemption > n_cases / 10, "%d of %d random cases preempted", with_preemption,
          n_cases);
    /* all costs zero: the whole-run refusal, same message */
    memset(&s, 0, sizeof s);
    s.requests = 5, s.input_tokens = 10, s.output_tokens = 3, s.page_tokens = 4;
    s.max_seqs = 2, s.max_batched_tokens = 8, s.n_configs = 1;
    snprintf(s.cfg[0].name, sizeof s.cfg[0].name, "Z");
    s.cfg[0].slots = 64;
    s.cfg[0].have_attn = 1;
    same(&s, 0, "zero costs");
    same(&s, 1, "config out of range");
    /* the shipped scenarios */
    const char *root = getenv("QMLA_SOURCE_ROOT");
    const char *scn[] = {"paper-table10.scn", "paper-table10-fit.scn"};
    for (int f = 0; f < 2; f++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/experiments/serving/%s", root ? root : ".", scn[f]);
        qmla_error err;
        qmla_error_clear(&err);
        CHECK_OK(qmla_serve_scenario_read(path, &s, &err), err);
        for (size_t k = 0; k < s.n_configs; k++)
            same(&s, k, scn[f]);
    }
    /* progress: through to the end, in order; a stop request honoured */
    memset(&s, 0, sizeof s);
    s.requests = 5000, s.input_tokens = 20, s.output_tokens = 4, s.page_tokens = 4;
    s.max_seqs = 16, s.max_batched_tokens = 64, s.n_configs = 1, s.step_fixed_us = 1;
    snprintf(s.cfg[0].name, sizeof s.cfg[0].name, "P");
    s.cfg[0].slots = 40;
    s.cfg[0].have_attn = 1;
    qmla_serve_result r, r0;
    qmla_error err;
    qmla_error_clear(&err);
    prog_log pl = {.monotonic = 1};
    CHECK_OK(qmla_serve_simulate_progress(&s, 0, &r, on_progress, &pl, &err), err);
    CHECK(pl.calls >= 100 && pl.calls <= 5000 && pl.monotonic && pl.last_done == 5000 &&
          pl.last_total == 5000, "progress: %zu calls, last %zu/%zu, in order %d", pl.calls,
          pl.last_done, pl.last_total, pl.monotonic);
    CHECK_OK(qmla_serve_simulate(&s, 0, &r0, &err), err);
    CHECK(!memcmp(&r, &r0, sizeof r), "progress: results as without the callback");
    prog_log stop = {.monotonic = 1, .stop_at = 3};
    CHECK(qmla_serve_simulate_progress(&s, 0, &r, on_progress, &stop, &err) == QMLA_EINVAL &&
          strstr(err.msg, "stopped by the progress callback") && stop.calls == 3,
          "progress: stop: %zu calls, %s", stop.calls, err.msg);
    return check_summary("test_serve_sim_ref");
}
