/* tests/serve/test_serve_sim.c — the serving simulator (lib/serve/serve_sim.c) against
 * scenarios solved by hand (step by step in the comments), its invariants
 * (no over-commit: peak blocks <= capacity; every output sampled once;
 * no preemption without exhaustion), the cost model's arithmetic, the
 * least-squares calibration on exactly linear data, scenario-file errors,
 * and the paper's Table 10 scenario (32 preemptions, 3,996,255 recomputed
 * tokens: App. F.2 / issue 12), whose counts do not depend on the costs.
 * Run: meson test -C build test_serve_sim */
#include "check.h"
#include "qmla/serve_sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static qmla_serve_scenario base(long long req, long long in, long long out,
                                long long page, long long seqs, long long budget,
                                long long slots)
{
    qmla_serve_scenario s;
    memset(&s, 0, sizeof s);
    s.requests = req;
    s.input_tokens = in;
    s.output_tokens = out;
    s.page_tokens = page;
    s.max_seqs = seqs;
    s.max_batched_tokens = budget;
    s.n_configs = 1;
    snprintf(s.cfg[0].name, sizeof s.cfg[0].name, "X");
    s.cfg[0].slots = slots;
    s.cfg[0].have_attn = 1;
    return s;
}

int main(void)
{
    qmla_error err;
    qmla_error_clear(&err);
    qmla_serve_result r;

    /* (a) one request, 100 in, 3 out, 64-token budget, 1 ms per step:
     * step 1 prefill 64; step 2 prefill 36 -> output 1; steps 3, 4 decode
     * -> outputs 2, 3. 4 steps, 4 ms, 750 tok/s, peak ceil(102/64) = 2. */
    qmla_serve_scenario s = base(1, 100, 3, 64, 4, 64, 640);
    s.step_fixed_us = 1000;
    CHECK_OK(qmla_serve_simulate(&s, 0, &r, &err), err);
    CHECK(r.steps == 4 && r.preemptions == 0 && r.prefill_tokens == 100 &&
          r.output_tokens == 3 && r.max_used_blocks == 2,
          "(a) steps %lld preempt %lld prefill %lld out %lld peak %lld", r.steps,
          r.preemptions, r.prefill_tokens, r.output_tokens, r.max_used_blocks);
    CHECK(fabs(r.elapsed_s - 0.004) < 1e-12 && fabs(r.throughput_tok_s - 750) < 1e-9,
          "(a) elapsed %g tok/s %g", r.elapsed_s, r.throughput_tok_s);

    /* (b) exhaustion: 2 requests of 64 in, 65 out; 3 blocks of 64; budget 128.
     * Step 1: both prefill (1 block each) -> output 1 each, free 1.
     * Step 2: A decodes at position 64 (2nd block, free 0); B needs a block:
     * none free -> B (the last running) is preempted, 64 tokens recomputed
     * later; no admission in a step with a preemption.
     * Steps 3..65: A decodes (B's 65 tokens need 2 blocks, 1 free); A's 65th
     * output at step 65, its 2 blocks freed. Step 66: B re-prefills 65 tokens
     * (2 blocks) -> output 2; steps 67..129 -> outputs 3..65.
     * 129 steps, 1 preemption, 64 recomputed, 128 + 65 = 193 prefill tokens.
     * Peak blocks over the executed batches: 2 (the third block is held by
     * B only until it is preempted while step 2 is being scheduled). */
    s = base(2, 64, 65, 64, 4, 128, 192);
    s.step_fixed_us = 1;
    CHECK_OK(qmla_serve_simulate(&s, 0, &r, &err), err);
    CHECK(r.steps == 129 && r.preemptions == 1 && r.recomputed_tokens == 64 &&
          r.prefill_tokens == 193 && r.output_tokens == 130 && r.max_used_blocks == 2,
          "(b) steps %lld preempt %lld recomputed %lld prefill %lld out %lld peak %lld",
          r.steps, r.preemptions, r.recomputed_tokens, r.prefill_tokens,
          r.output_tokens, r.max_used_blocks);
    /* the same with 4 blocks: both fit (2 + 2), no preemption, 65 steps */
    s.cfg[0].slots = 256;
    CHECK_OK(qmla_serve_simulate(&s, 0, &r, &err), err);
    CHECK(r.steps == 65 && r.preemptions == 0 && r.recomputed_tokens == 0 &&
          r.max_used_blocks == 4, "(b') steps %lld preempt %lld peak %lld", r.steps,
          r.preemptions, r.max_used_blocks);

    /* (c) max_seqs 1: 3 requests of 10 in, 2 out run one after another,
     * prefill + decode each: 6 steps. */
    s = base(3, 10, 2, 16, 1, 100, 1 << 20);
    s.step_fixed_us = 1;
    CHECK_OK(qmla_serve_simulate(&s, 0, &r, &err), err);
    CHECK(r.steps == 6 && r.preemptions == 0 && r.output_tokens == 6,
          "(c) steps %lld preempt %lld out %lld", r.steps, r.preemptions,
          r.output_tokens);

    /* (d) prefill cost: 8 tokens in chunks of 4, 1 us per token and 1 us per
     * query-key pair: chunk 1 has 1+2+3+4 = 10 pairs (14 us), chunk 2 has
     * 5+6+7+8 = 26 (30 us): 44 us. */
    s = base(1, 8, 1, 16, 1, 4, 1 << 20);
    s.prefill_token_us = 1;
    s.prefill_attn_us_per_mpair = 1e6;
    CHECK_OK(qmla_serve_simulate(&s, 0, &r, &err), err);
    CHECK(fabs(r.elapsed_s - 44e-6) < 1e-15, "(d) elapsed %g", r.elapsed_s);

    /* (e) decode cost: 4 in, 2 out; prefill free; the decode step has
     * context 5: 100 + 2 layers x (10 + 1e6 x 5 / 1e6) = 130 us. */
    s = base(1, 4, 2, 16, 1, 8, 1 << 20);
    s.decode_fixed_us = 100;
    s.n_layers = 2;
    s.cfg[0].attn_base_us = 10;
    s.cfg[0].attn_per_mtok_us = 1e6;
    CHECK_OK(qmla_serve_simulate(&s, 0, &r, &err), err);
    CHECK(fabs(r.elapsed_s - 130e-6) < 1e-15, "(e) elapsed %g", r.elapsed_s);

    /* (f) a request larger than the whole cache is refused, not looped */
    s = base(1, 1000, 10, 64, 1, 64, 640);
    CHECK(qmla_serve_simulate(&s, 0, &r, &err) == QMLA_EINVAL &&
          strstr(err.msg, "can never finish"), "(f) %s", err.msg);

    /* (g) calibration on exact data: us = 3 + 2 x batch x ctx / 1e6 */
    char tsv[] = "/tmp/qmla-serve-XXXXXX";
    int fd = mkstemp(tsv);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "kind\tbatch\tcontext\tconfig\tmedian_us\n"
               "decode\t1\t1000000\tY\t5\ndecode\t2\t1000000\tY\t7\n"
               "decode\t4\t500000\tY\t7\ndecode\t8\t1000000\tZ\t99\n"
               "writer\t-\t65536\tY\t46.8\n");
    fclose(f);
    qmla_serve_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "Y");
    CHECK_OK(qmla_serve_calibrate(tsv, &c, &err), err);
    CHECK(fabs(c.attn_base_us - 3) < 1e-9 && fabs(c.attn_per_mtok_us - 2) < 1e-9 &&
          c.fit_rows == 3, "(g) fit %g + %g x, %d rows", c.attn_base_us,
          c.attn_per_mtok_us, c.fit_rows);
    snprintf(c.name, sizeof c.name, "Z");
    CHECK(qmla_serve_calibrate(tsv, &c, &err) == QMLA_EINVAL &&
          strstr(err.msg, "found 1"), "(g) one row: %s", err.msg);
    unlink(tsv);

    /* (h) scenario file errors name the line */
    char scn[] = "/tmp/qmla-scn-XXXXXX";
    fd = mkstemp(scn);
    f = fdopen(fd, "w");
    fprintf(f, "requests 5\n# comment\nbogus 3\n");
    fclose(f);
    CHECK(qmla_serve_scenario_read(scn, &s, &err) == QMLA_EINVAL &&
          strstr(err.msg, ":3: expected a known key"), "(h) %s", err.msg);
    unlink(scn);

    /* (i) the paper's scenario (App. F.2): the counts depend only on the
     * scheduling, not on the costs */
    const char *root = getenv("QMLA_SOURCE_ROOT");
    char path[4096];
    snprintf(path, sizeof path, "%s/experiments/serving/paper-table10.scn",
             root ? root : ".");
    CHECK_OK(qmla_serve_scenario_read(path, &s, &err), err);
    qmla_serve_result rb, rc;
    CHECK_OK(qmla_serve_simulate(&s, 0, &rb, &err), err);
    CHECK_OK(qmla_serve_simulate(&s, 1, &rc, &err), err);
    CHECK(rb.preemptions == 32 && rb.recomputed_tokens == 3996255,
          "(i) BF16: %lld preemptions, %lld recomputed (paper: 32, 3996255)",
          rb.preemptions, rb.recomputed_tokens);
    CHECK(rc.preemptions == 0 && rc.recomputed_tokens == 0,
          "(i) C4R4: %lld preemptions", rc.preemptions);
    CHECK(rb.output_tokens == 5120 && rc.output_tokens == 5120, "(i) outputs");
    CHECK(rb.max_used_blocks <= 657856 / 64 && rc.max_used_blocks <= 2360832 / 64,
          "(i) peaks %lld %lld", rb.max_used_blocks, rc.max_used_blocks);
    /* C4R4: all five prompts resident (5 x 2048 blocks) and never more than
     * five whole requests, 5 x ceil((131072 + 1023) / 64) = 5 x 2064; BF16
     * runs its cache full: 657856 / 64 = 10279 blocks */
    CHECK(rc.max_used_blocks >= 5 * 2048 && rc.max_used_blocks <= 5 * 2064,
          "(i) C4R4 peak %lld", rc.max_used_blocks);
    CHECK(rb.max_used_blocks == 10279, "(i) BF16 peak %lld", rb.max_used_blocks);
    /* counts unchanged under other costs */
    s.prefill_token_us *= 7;
    s.decode_fixed_us = 1;
    CHECK_OK(qmla_serve_simulate(&s, 0, &r, &err), err);
    CHECK(r.preemptions == 32 && r.recomputed_tokens == 3996255, "(i) cost-free counts");
    return check_summary("test_serve_sim");
}
