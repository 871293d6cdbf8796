/* cmd_capture.c — `qmla capture`: a qmla-capture v1 file from the native
 * engine (lib/engine/capture_native.c), the C twin of
 * experiments/capture/qmla_capture.py for checkpoints qmla/model.h runs. */
#include "cli.h"
#include "cli_safe.h"
#include "qmla/capture_native.h"
#include "qmla/exec.h"
#include "qmla/outpath.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { MAX_CORPORA = 16, MAX_CELLS = 256 };

static void help(FILE *f, const void *ctx)
{
    (void)ctx;
    fprintf(f,
        "usage: qmla capture MODEL_DIR --corpus NAME=FILE[.gz] [--corpus ...]\n"
        "                    [--seeds 0,1,2 | --cells NAME:SEED,...] [--seqs N]\n"
        "                    [--tokens T] [--layers 0-3,5] [--store float16|float32]\n"
        "                    [--gzip L] [--no-pre] [--model-name NAME] [--check-tol X]\n"
        "                    [--threads N] [--force] -o CAPTURE.h5\n"
        "\n"
        "Capture the MLA tensors of a checkpoint the native engine runs (qmla ppl's\n"
        "models: DeepSeek-V2/V3 dense or MoE, byte tokenizer qmla_tokenizer.json) into a\n"
        "qmla-capture v1 file (docs/capture-format.md), with the windows the Python\n"
        "tool experiments/capture/qmla_capture.py draws for the same options: per\n"
        "cell NAME-sSEED, N windows of T tokens (BOS first) at sorted offsets from\n"
        "Python's random.Random(SEED).randint. Compute float32; before each layer\n"
        "and cell is written its attention is recomputed from the stored tensors\n"
        "and must match attn_out within --check-tol (default 5e-3 with float16\n"
        "storage, 1e-5 with float32; written as check_tolerance).\n"
        "\n"
        "  --corpus NAME=FILE  a text corpus, gzip or plain (repeatable, up to %d)\n"
        "  --seeds LIST        seeds for every corpus (default 0)\n"
        "  --cells LIST        NAME:SEED,... instead of corpora x seeds\n"
        "  --seqs N            sequences per cell (default 8)\n"
        "  --tokens T          tokens per sequence, BOS included (default 512)\n"
        "  --layers LIST       layer indices, e.g. 0-3,5 (default all)\n"
        "  --store TYPE        float16 or float32 (default float32, as the Python\n"
        "                      tool for float32 compute)\n"
        "  --gzip L            chunk and compress, 0-9 (default 4, as the Python tool)\n"
        "  --no-pre            omit k_rope_pre, q_rope_pre, rope_cos, rope_sin\n"
        "  --model-name NAME   root attribute model (default: MODEL_DIR)\n"
        "  --check-tol X       tolerance of the recomputation check\n"
        "  --threads N         sequences in parallel (default: online CPUs); the file\n"
        "                      does not depend on it\n"
        "  -o FILE             output (refused if it exists, unless --force); written\n"
        "                      atomically (peak memory about twice the file)\n"
        "  --force             also: discard a journal of other inputs or options\n"
        "\n"
        "Resume: finished windows are kept in FILE.journal (and their tensors in\n"
        "FILE.journal.data); interrupt (SIGINT, or a crash) and rerun the same\n"
        "command to continue; both are removed once FILE is written.\n"
        "\n"
        "stdout: per cell its window offsets, per layer and cell the recompute error.\n"
        "example: qmla capture models/tiny-mla --corpus prose=data/heldout/prose.txt.gz \\\n"
        "           --corpus code=data/heldout/code.txt.gz --seeds 0,1,2 --seqs 8 \\\n"
        "           --tokens 512 --store float16 -o /tmp/tiny-mla-full.h5\n",
        MAX_CORPORA);
}

typedef struct prog {
    cli_progress bar;
    size_t per_cell, n_cells;
    const char *journal;
} prog;

static int on_event(void *ctx, const qmla_native_event *ev)
{
    prog *p = ctx;
    char nm[256];
    if (ev->kind == 2) {
        fprintf(stderr, "qmla capture: resumed %zu of %zu windows from %s\n", ev->done,
                ev->total, cli_esc(p->journal, nm, sizeof nm));
    } else if (ev->kind == 0) {
        cli_progress_update(&p->bar, ev->cell * p->per_cell + ev->done,
                            p->n_cells * p->per_cell);
    } else {
        printf("layer %d cell %s: N=%zu T=%zu recompute error %.3g (tolerance %.3g)\n",
               ev->layer, cli_esc(ev->cell_name, nm, sizeof nm), ev->N, ev->T, ev->rel_err,
               ev->tol);
        fflush(stdout);
    }
    return cli_interrupted() != 0;
}

/* --store float16|float32 -> 1|0 */
static int opt_store(const char *cmd, const char *arg, void *dst)
{
    if (!strcmp(arg, "float16"))
        *(int *)dst = 1;
    else if (!strcmp(arg, "float32"))
        *(int *)dst = 0;
    else
        return cli_fail(cmd, "--store: expected float16 or float32, found \"%s\"", arg);
    return 0;
}

int cmd_capture(int argc, char **argv)
{
    const char *corpus_arg[MAX_CORPORA];
    size_t n_corpora = 0;
    const char *seeds = "0", *cells_arg = NULL, *layers_arg = NULL, *out = NULL,
               *model_name = NULL;
    long seqs = 8, tokens = 512, gzip = 4, v;
    int threads = cli_default_threads();
    int f16 = 0, pre = 1, force = 0;
    double tol = 0.0;
    const cli_opt opts[] = {
        {.name = "corpus", .shrt = 0, .kind = CLI_REPEAT, .dst = corpus_arg, .hi = MAX_CORPORA, .expected = "corpora",
         .count = &n_corpora},
        {.name = "seeds", .shrt = 0, .kind = CLI_STR, .dst = &seeds},
        {.name = "cells", .shrt = 0, .kind = CLI_STR, .dst = &cells_arg},
        {.name = "seqs", .shrt = 0, .kind = CLI_LONG, .dst = &seqs, .lo = 1, .hi = 1 << 20, .expected = "1..1048576"},
        {.name = "tokens", .shrt = 0, .kind = CLI_LONG, .dst = &tokens, .lo = 2, .hi = 1 << 20,
         .expected = "2..1048576 (BOS and at least one text token)"},
        {.name = "layers", .shrt = 0, .kind = CLI_STR, .dst = &layers_arg},
        {.name = "store", .shrt = 0, .kind = CLI_FN, .dst = &f16, .fn = opt_store},
        {.name = "gzip", .shrt = 0, .kind = CLI_LONG, .dst = &gzip, .lo = 0, .hi = 9, .expected = "0..9"},
        {.name = "no-pre", .shrt = 0, .kind = CLI_CLEAR, .dst = &pre},
        {.name = "model-name", .shrt = 0, .kind = CLI_STR, .dst = &model_name},
        {.name = "check-tol", .shrt = 0, .kind = CLI_DOUBLE, .dst = &tol, .dlo = 0, .dhi = HUGE_VAL, .open = CLI_OPEN_LO,
         .expected = "a number > 0"},
        {.name = "threads", .shrt = 0, .kind = CLI_THREADS, .dst = &threads},
        {.name = "force", .shrt = 0, .kind = CLI_SET, .dst = &force},
        {.name = "output", .shrt = 'o', .kind = CLI_STR, .dst = &out},
        {.name = "help", .shrt = 'h', .kind = CLI_HELP, .dst = NULL},
        {0}};
    const int prc = cli_getopt("capture", argc, argv, opts, help, NULL);
    if (prc >= 0)
        return prc;
    if (cli_require_args("capture", argc, "MODEL_DIR", out, "-o CAPTURE.h5"))
        return QMLA_EXIT_USAGE;
    if (!n_corpora)
        return cli_fail("capture", "no --corpus NAME=FILE given");
    const char *dir = argv[optind];
    cli_signals_install(); /* before any work: SIGINT always reports, keeps the journal */

    int rc = QMLA_EXIT_OK;
    qmla_error err;
    qmla_error_clear(&err);
    qmla_native_corpus corp[MAX_CORPORA];
    char names[MAX_CORPORA][128];
    uint8_t *bufs[MAX_CORPORA] = {0};
    qmla_native_cell cells[MAX_CELLS];
    size_t n_cells = 0;
    int *layers = NULL;
    size_t n_layers = 0;
    size_t *offs = NULL;
    qmla_model *m = NULL;
    char **list = NULL, *lbuf = NULL;
    size_t nl = 0;
    char e1[256], e2[256], jpath[4096], dpath[4096];

    for (size_t i = 0; i < n_corpora; i++) {
        const char *file = NULL;
        if (qmla_native_corpus_arg(corpus_arg[i], names[i], sizeof names[i], &file)) {
            rc = cli_fail("capture", "--corpus \"%s\": expected NAME=FILE (NAME without '/', "
                          "at most 100 bytes)", cli_esc(corpus_arg[i], e1, sizeof e1));
            goto done;
        }
        for (size_t j = 0; j < i; j++)
            if (!strcmp(names[j], names[i])) {
                rc = cli_fail("capture", "--corpus %s given twice", cli_esc(names[i], e1,
                              sizeof e1));
                goto done;
            }
        corp[i].name = names[i];
        corp[i].path = file;
        corp[i].bytes = NULL;
        corp[i].n = 0;
    }
    if (cells_arg) {
        if (cli_split_list(cells_arg, &list, &nl, &lbuf) || !nl) {
            rc = cli_fail("capture", "--cells: expected NAME:SEED,...");
            goto done;
        }
        for (size_t k = 0; k < nl; k++) {
            char *colon = strchr(list[k], ':');
            if (colon)
                *colon = 0;
            size_t ci = n_corpora;
            for (size_t i = 0; i < n_corpora; i++)
                if (!strcmp(names[i], list[k]))
                    ci = i;
            if (ci == n_corpora) {
                if (colon)
                    *colon = ':';
                char nm[128];
                snprintf(nm, sizeof nm, "%.*s", (int)(colon ? colon - list[k] : 127), list[k]);
                rc = cli_fail("capture", "--cells %s: no --corpus %s=FILE given",
                              cli_esc(list[k], e1, sizeof e1), cli_esc(nm, e2, sizeof e2));
                goto done;
            }
            v = 0;
            if (colon && colon[1] && cli_parse_long(colon + 1, 0, LONG_MAX, &v)) {
                rc = cli_fail("capture", "--cells %s: expected a seed >= 0, found \"%s\"",
                              cli_esc(list[k], e1, sizeof e1), cli_esc(colon + 1, e2,
                              sizeof e2));
                goto done;
            }
            if (n_cells == MAX_CELLS) {
                rc = cli_fail("capture", "at most %d cells", MAX_CELLS);
                goto done;
            }
            cells[n_cells++] = (qmla_native_cell){ci, (uint64_t)v};
        }
    } else {
        if (cli_split_list(seeds, &list, &nl, &lbuf) || !nl) {
            rc = cli_fail("capture", "--seeds: expected a comma-separated list of seeds");
            goto done;
        }
        for (size_t i = 0; i < n_corpora; i++)
            for (size_t k = 0; k < nl; k++) {
                if (cli_parse_long(list[k], 0, LONG_MAX, &v)) {
                    rc = cli_fail("capture", "--seeds: expected integers >= 0, found \"%s\"",
                                  cli_esc(list[k], e1, sizeof e1));
                    goto done;
                }
                if (n_cells == MAX_CELLS) {
                    rc = cli_fail("capture", "at most %d cells", MAX_CELLS);
                    goto done;
                }
                cells[n_cells++] = (qmla_native_cell){i, (uint64_t)v};
            }
    }
    const size_t rep = qmla_native_cells_repeat(cells, n_cells);
    if (rep < n_cells) {
        rc = cli_fail("capture", "cell %s-s%llu given twice",
                      cli_esc(names[cells[rep].corpus], e1, sizeof e1),
                      (unsigned long long)cells[rep].seed);
        goto done;
    }
    if (layers_arg) {
        char msg[256];
        if (cli_parse_int_list(layers_arg, &layers, &n_layers, msg, sizeof msg) || !n_layers) {
            rc = cli_fail("capture", "--layers: %s", n_layers ? msg : "expected a list");
            goto done;
        }
    }
    {
        /* Before any work: a path the atomic rename may replace, and none
         * of the corpora (-o CORPUS --force replaced the text it read) */
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", out);
        snprintf(jpath, sizeof jpath, "%s.journal", out);
        snprintf(dpath, sizeof dpath, "%s.journal.data", out);
        const char *in[MAX_CORPORA];
        for (size_t i = 0; i < n_corpora; i++)
            in[i] = corp[i].path;
        if (qmla_output_path_check(out, "output file (-o)", in, n_corpora, &err) ||
            qmla_output_path_check(tmp, "temporary file", NULL, 0, &err) ||
            qmla_output_path_check(jpath, "journal", in, n_corpora, &err) ||
            qmla_output_path_check(dpath, "journal data file", in, n_corpora, &err)) {
            rc = cli_lib_error("capture", &err);
            goto done;
        }
        struct stat sb;
        if (!force && stat(out, &sb) == 0) {
            rc = cli_fail("capture", "%s exists (use --force to overwrite)",
                          cli_esc(out, e1, sizeof e1));
            goto done;
        }
    }
    /* corpora used by some cell: read, as Python reads text */
    {
        size_t i = 0;
        int decoding = 0;
        if (qmla_native_corpora_read(corp, n_corpora, cells, n_cells, bufs, &i, &decoding,
                                     &err)) {
            if (decoding) {
                qmla_error_prefix(&err, "corpus %s: ", names[i]);
                rc = cli_lib_error("capture", &err);
            } else {
                char msg[512]; /* the reader's message, cut to 511 bytes */
                snprintf(msg, sizeof msg, "%.511s", err.msg);
                rc = cli_fail("capture", "corpus %s: %s", cli_esc(names[i], e1, sizeof e1),
                              cli_esc(msg, e2, sizeof e2));
            }
            goto done;
        }
    }
    double t0 = cli_now();
    if (qmla_model_load(dir, &m, &err)) {
        rc = cli_lib_error("capture", &err);
        goto done;
    }
    const qmla_model_config *mc = qmla_model_cfg(m);
    fprintf(stderr, "qmla capture: %s: %s, %zu layers, d_c %zu, d_r %zu (loaded in %.2f s); "
            "%zu cells x %ld x %ld tokens, %s\n", cli_esc(dir, e1, sizeof e1), mc->arch, mc->L,
            mc->d_c, mc->d_r, cli_now() - t0, n_cells, seqs, tokens,
            f16 ? "float16" : "float32");
    offs = malloc(n_cells * (size_t)seqs * sizeof *offs);
    if (!offs) {
        rc = cli_fail("capture", "out of memory");
        goto done;
    }
    prog pg;
    cli_progress_init(&pg.bar, "capture");
    pg.per_cell = (size_t)seqs;
    pg.n_cells = n_cells;
    pg.journal = jpath;
    int stopped = 0;
    double worst = 0.0;
    qmla_native_capture_opts o;
    memset(&o, 0, sizeof o);
    o.model_dir = dir;
    o.model_name = model_name ? model_name : dir;
    o.corpora = corp;
    o.n_corpora = n_corpora;
    o.cells = cells;
    o.n_cells = n_cells;
    o.seqs = (size_t)seqs;
    o.tokens = (size_t)tokens;
    o.layers = layers;
    o.n_layers = n_layers;
    o.float16 = f16;
    o.gzip = (int)gzip;
    o.with_pre = pre;
    o.threads = (int)threads;
    o.check_tol = tol;
    o.progress = on_event;
    o.progress_ctx = &pg;
    o.offsets_out = offs;
    o.worst_out = &worst;
    o.stopped = &stopped;
    o.journal = jpath;
    o.journal_force = force;
    qmla_blas_set_threads(1);
    int st = qmla_capture_native(m, out, &o, &err);
    cli_progress_end(&pg.bar);
    if (stopped || cli_interrupted()) {
        fprintf(stderr, "qmla capture: interrupted (%s); finished windows are kept in %s — "
                "rerun the same command to resume\n", cli_signal_name(),
                cli_esc(jpath, e1, sizeof e1));
        rc = QMLA_EXIT_INTERRUPTED;
        goto done;
    }
    if (st) {
        rc = cli_lib_error("capture", &err);
        goto done;
    }
    for (size_t k = 0; k < n_cells; k++) {
        printf("cell %s-s%llu: windows at text offsets", cli_esc(names[cells[k].corpus], e1,
               sizeof e1), (unsigned long long)cells[k].seed);
        for (long n = 0; n < seqs; n++)
            printf(" %zu", offs[k * (size_t)seqs + (size_t)n]);
        printf("\n");
    }
    printf("wrote %s: %zu layers x %zu cells x %ld seqs x %ld tokens, %s, worst recompute "
           "error %.3g, %.1f s\n", cli_esc(out, e1, sizeof e1), layers ? n_layers : mc->L,
           n_cells, seqs, tokens, f16 ? "float16" : "float32", worst, cli_now() - t0);
done:
    qmla_model_free(m);
    for (size_t i = 0; i < MAX_CORPORA; i++)
        free(bufs[i]);
    free(layers);
    free(offs);
    free(list);
    free(lbuf);
    return rc;
}
