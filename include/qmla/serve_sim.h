/* qmla/serve_sim.h — a discrete-event model of vLLM-style serving under KV
 * cache pressure (paper §4.4, App. F.2, Table 10): paged KV blocks with a
 * slot capacity, FCFS admission, at most max_seqs running sequences,
 * chunked prefill with a token budget per step, preemption by recompute
 * when blocks run out, one token per running sequence per decode step.
 *
 * The scheduler follows vLLM's V1 scheduler (vLLM 0.10.x, prefix caching
 * off), one engine step at a time:
 *   1. running requests in order: each asks for min(remaining, budget)
 *      tokens (a decode asks for 1) and the blocks to hold them; when the
 *      free blocks do not suffice, the LAST running request is preempted
 *      (its blocks freed, its computed tokens discarded, it goes to the
 *      front of the waiting queue) and the allocation is retried; when the
 *      victim is the asking request itself, it is not scheduled;
 *   2. only if nothing was preempted in this step: waiting requests in
 *      order are admitted while a sequence slot, budget and blocks for
 *      their first chunk remain (no preemption for admission);
 *   3. the step's time from the cost model; every request whose computed
 *      tokens reach its tokens (prompt + outputs so far) samples one output
 *      token; a request with all its outputs finishes and frees its blocks.
 * A preempted request recomputes its prompt and the outputs it had
 * generated (recomputed tokens = its computed tokens when preempted).
 *
 * Cost of a step (microseconds):
 *   step_fixed + prefill_token * (prefill tokens)
 *   + prefill_attn * (prefill query-key pairs / 1e6)
 *   + [decodes > 0] decode_fixed + n_layers * (attn_base + attn_per_mtok *
 *     (sum of the decoding sequences' contexts) / 1e6)
 * attn_base/attn_per_mtok are per configuration (per layer, per GPU), and
 * can be fitted to the decode rows of the CUDA benchmark's results file
 * (docs/evidence/final_bench_decode.tsv: microseconds per decode step by
 * batch and context, 16 heads = one GPU of TP8).
 *
 * Scenario file (experiments/serving/paper-table10.scn): `key value` lines,
 * '#' comments:
 *   requests N | input_tokens N | output_tokens N | page_tokens N
 *   max_seqs N | max_batched_tokens N | n_layers N
 *   step_fixed_us X | prefill_token_us X | prefill_attn_us_per_mpair X
 *   decode_fixed_us X
 *   config NAME SLOTS            (one per configuration, up to 8)
 *   attn NAME BASE_US PER_MTOK_US  (explicit decode attention cost)
 *   calibrate PATH               (fit attn of every config from the decode
 *                                 rows of a benchmark TSV; relative paths
 *                                 are relative to the scenario file)
 */
#ifndef QMLA_SERVE_SIM_H
#define QMLA_SERVE_SIM_H

#include <stddef.h>

#include "qmla/exec.h"
#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QMLA_SERVE_MAX_CONFIGS 8

typedef struct qmla_serve_config {
    char name[32];
    long long slots;       /* KV token slots (blocks = slots / page_tokens) */
    double attn_base_us;   /* decode attention per layer per step: base */
    double attn_per_mtok_us; /* ... per 1e6 tokens of summed context */
    int have_attn;
    /* calibration fit quality (calibrate only): rows used, worst relative
     * residual of the fit */
    int fit_rows;
    double fit_worst_rel;
} qmla_serve_config;

typedef struct qmla_serve_scenario {
    long long requests, input_tokens, output_tokens, page_tokens;
    long long max_seqs, max_batched_tokens, n_layers;
    double step_fixed_us, prefill_token_us, prefill_attn_us_per_mpair,
        decode_fixed_us;
    size_t n_configs;
    qmla_serve_config cfg[QMLA_SERVE_MAX_CONFIGS];
    char calibrated_from[1024]; /* "" when attn was given explicitly */
} qmla_serve_scenario;

typedef struct qmla_serve_result {
    long long preemptions;       /* preemption events */
    long long recomputed_tokens; /* computed tokens discarded by them */
    long long steps;             /* engine steps */
    long long prefill_tokens;    /* prefill tokens computed (incl. recompute) */
    long long output_tokens;     /* sampled output tokens */
    long long max_used_blocks;   /* peak blocks in use (<= capacity) */
    long long capacity_blocks;
    double elapsed_s, throughput_tok_s;
    double prefill_s, decode_s;  /* time of steps with prefill / decode only */
} qmla_serve_result;

/* Parse a scenario file (and the benchmark TSV it calibrates from).
 * QMLA_EINVAL / QMLA_EIO naming the file, line and expected/found. */
int qmla_serve_scenario_read(const char *path, qmla_serve_scenario *s,
                             qmla_error *err);

/* Fit attn_base_us + attn_per_mtok_us * (batch * context / 1e6) by least
 * squares to the `decode` rows of config `c->name` in a benchmark TSV
 * (columns kind, batch, context, config, median_us). QMLA_EINVAL when the
 * file has fewer than 2 such rows. */
int qmla_serve_calibrate(const char *tsv, qmla_serve_config *c, qmla_error *err);

/* Simulate configuration `config` of the scenario. Checks its invariants on
 * every step (blocks in use never exceed the capacity; a preemption only when
 * an allocation fails; each request samples each output exactly once) and
 * returns QMLA_EINVAL describing the violation, or a request that can never
 * fit (needs more blocks than the capacity). */
int qmla_serve_simulate(const qmla_serve_scenario *s, size_t config,
                        qmla_serve_result *r, qmla_error *err);
/* The same, calling progress(ctx, finished, requests, 0) from the calling
 * thread about every requests/1000 finished requests and at the end (NULL:
 * none); a non-zero return stops the run with QMLA_EINVAL. The work of a
 * step is proportional to the requests it touches (O(k log k)), so a run
 * costs O(steps x running) rather than O(steps x requests). */
int qmla_serve_simulate_progress(const qmla_serve_scenario *s, size_t config,
                                 qmla_serve_result *r, qmla_progress_fn progress,
                                 void *progress_ctx, qmla_error *err);

/* Write the results of every config (r[n_configs]) and the scenario to
 * `path` (HDF5, atomic): root attributes format "qmla-serve-sim", the
 * scenario's parameters; /serve_sim/{config, slots, preemptions,
 * recomputed_tokens, steps, prefill_tokens, output_tokens, max_used_blocks,
 * elapsed_s, throughput, prefill_s, decode_s, attn_base_us,
 * attn_per_mtok_us}[n_configs]. QMLA_EIO naming the file. */
int qmla_serve_write(const char *path, const char *scenario_path,
                     const qmla_serve_scenario *s, const qmla_serve_result *r,
                     qmla_error *err);

/* Whether qmla_serve_write may replace `path`: QMLA_OK when it does not
 * exist, is empty or is a serve-sim file; QMLA_EINVAL naming what it is
 * otherwise. Callers check before the simulation; the writer checks again. */
int qmla_serve_check_output(const char *path, qmla_error *err);

#ifdef __cplusplus
}
#endif
#endif
