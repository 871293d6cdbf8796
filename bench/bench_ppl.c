/* bench/bench_ppl.c — tokens per second of the C engine (qmla/model.h) on a
 * held-out text for the bf16 cache, C4R4 and C4R4 under sink4/local128, each
 * timed on the same windows in one run with attention in the absorbed form
 * and in the expanded form (qmla_model_set_attn_form; the default picks the
 * expanded one on tiny-mla), interleaved so that both see the same machine
 * load (bench/run_ppl.sh adds the NumPy forward of
 * experiments/accuracy/numpy_forward.py and the ratios).
 *
 *   bench_ppl MODEL_DIR TEXT.gz [--windows N] [--threads N] [--context T]
 *   bench_ppl --logits MODEL_DIR TEXT.gz N OUT.f32
 *       (the fp32-cache logits of the first N windows, [N, T, V] float32
 *       little-endian, for experiments/accuracy/hf_compare.py) */
#include "qmla/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static uint8_t *read_gz(const char *path, size_t *n)
{
    gzFile g = gzopen(path, "rb");
    if (!g)
        return NULL;
    size_t cap = 1 << 22, k = 0;
    uint8_t *b = malloc(cap);
    int r;
    while (b && (r = gzread(g, b + k, (unsigned)(cap - k))) > 0) {
        k += (size_t)r;
        if (k == cap)
            b = realloc(b, cap *= 2);
    }
    gzclose(g);
    *n = k;
    return b;
}

static int die(const qmla_error *e)
{
    fprintf(stderr, "bench_ppl: %s\n", e->msg);
    return 1;
}

int main(int argc, char **argv)
{
    qmla_error err;
    qmla_error_clear(&err);
    qmla_blas_set_threads(1);
    if (argc == 6 && !strcmp(argv[1], "--logits")) {
        qmla_model *m;
        size_t nb, N = (size_t)atol(argv[4]), T = 512;
        if (qmla_model_load(argv[2], &m, &err))
            return die(&err);
        const qmla_model_config *c = qmla_model_cfg(m);
        uint8_t *txt = read_gz(argv[3], &nb);
        qmla_model_ws *ws;
        qmla_cache_spec s;
        qmla_cache_spec_parse("fp32", "none", &s, &err);
        if (!txt || nb < N * T || qmla_model_ws_alloc(m, T, &ws, &err))
            return fprintf(stderr, "bench_ppl: %s: cannot read %zu windows\n", argv[3], N), 1;
        FILE *f = fopen(argv[5], "wb");
        float *lg = malloc(T * c->V * sizeof *lg);
        int32_t tok[512];
        for (size_t k = 0; k < N; k++) {
            tok[0] = c->bos;
            for (size_t t = 1; t < T; t++)
                tok[t] = txt[k * T + t - 1];
            if (qmla_model_forward(m, &s, ws, tok, T, lg, &err))
                return die(&err);
            fwrite(lg, sizeof *lg, T * c->V, f);
        }
        fclose(f);
        return 0;
    }
    if (argc < 3) {
        fprintf(stderr, "usage: bench_ppl MODEL_DIR TEXT.gz [--windows N] [--threads N] "
                        "[--context T]\n");
        return 2;
    }
    size_t windows = 8, context = 512;
    int threads = 2;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--windows"))
            windows = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--context"))
            context = (size_t)atol(argv[i + 1]);
    }
    qmla_model *m;
    if (qmla_model_load(argv[1], &m, &err))
        return die(&err);
    size_t nb;
    uint8_t *txt = read_gz(argv[2], &nb);
    if (!txt)
        return fprintf(stderr, "bench_ppl: cannot read %s\n", argv[2]), 1;
    const char *cfg[][2] = {{"bf16", "none"}, {"C4R4", "none"}, {"C4R4", "sink4/local128"}};
    const qmla_exec ex = qmla_exec_cpu(threads);
    const qmla_attn_form forms[2] = {QMLA_ATTN_ABSORBED, QMLA_ATTN_EXPANDED};
    const char *fname[2] = {"absorbed", "expanded"};
    for (size_t i = 0; i < 3; i++)
        for (int f = 0; f < 2; f++) {
            qmla_cache_spec s;
            qmla_ppl_result r;
            qmla_cache_spec_parse(cfg[i][0], cfg[i][1], &s, &err);
            qmla_model_set_attn_form(m, forms[f]);
            double t0 = now(), c0 = cpu_now();
            if (qmla_model_ppl(m, &ex, &s, txt, nb, context, windows, &r, &err))
                return die(&err);
            double dt = now() - t0, dc = cpu_now() - c0;
            printf("{\"impl\": \"C\", \"form\": \"%s\", \"config\": \"%s\", "
                   "\"policy\": \"%s\", \"threads\": %d, \"tokens\": %zu, \"seconds\": %.3f, "
                   "\"tokens_per_s\": %.1f, \"cpu_seconds\": %.3f, \"tokens_per_cpu_s\": %.1f, "
                   "\"bits_per_byte\": %.6f}\n", fname[f], cfg[i][0], cfg[i][1], threads,
                   r.tokens, dt, r.tokens / dt, dc, r.tokens / dc, r.bits_per_byte);
            fflush(stdout);
        }
    free(txt);
    qmla_model_free(m);
    return 0;
}
