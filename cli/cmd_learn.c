/* cmd_learn.c — `qmla learn`: per-layer cache transforms written in the
 * transforms format (docs/transforms-format.md). The baselines of
 * docs/math.md §7 (RTN, SmoothQuant†, QuaRot†) are calibrated on the
 * train cells:
 *
 *   qmla learn data/tiny-mla-default.h5 -o sq.h5 --method smoothquant \
 *        --train-cells prose-s0
 *
 * and the learned QuantMLA transforms of §8 (qmla/learn.h), one path at a
 * time, on a train bank with the best step chosen on a disjoint held-out
 * bank:
 *
 *   qmla learn data/tiny-mla-default.h5 -o qm.h5 --train-cells prose-s0 \
 *        --heldout-cells code-s0 --path both --steps 300
 *
 * Learning is resumable per layer: the file is rewritten after every layer
 * (attribute complete = 0 until the last), and a rerun of the same command
 * keeps the layers already there. The driver is the library's
 * (qmla_learn_run, lib/transform/learn_run.c); this file parses the
 * options, prints and maps statuses to exit codes. */
#include "cli.h"
#include "qmla/capture.h"
#include "qmla/learn.h"
#include "qmla/tmethod.h"

#include <getopt.h>
#include "cli_safe.h"
#include <stdlib.h>
#include <string.h>

static void help(FILE *f, const void *ctx)
{
    (void)ctx;
    fprintf(f,
        "usage: qmla learn CAPTURE.h5 -o TRANSFORMS.h5 [--method quantmla|rtn|smoothquant|quarot]\n"
        "                  [--path content|rope|both] [--config C4R4|C2R4] [--steps 300]\n"
        "                  [--lr 5e-3] [--seed 0] [--objective function|recon] [--alpha 0.5]\n"
        "                  [--layers LIST]\n"
        "                  [--train-cells LIST] [--heldout-cells LIST] [--threads N] [--force]\n"
        "                  [--also-content CONTENT.h5] [--attn-precision f32|f64]\n"
        "\n"
        "Per-layer cache transforms (docs/math.md §7) in the transforms format\n"
        "(docs/transforms-format.md): RTN (T = I), SmoothQuant† (T = diag(σ)^-1,\n"
        "σ_j = max|X_j|^α / max|Q_j|^(1-α) over the train cells, one scale per\n"
        "RoPE pair), QuaRot† (T_C = diag(γ)^-1 H, T_P = I). --train-cells\n"
        "defaults to the first cell of each layer.\n"
        "QuantMLA (the default method, docs/math.md §8): content = Cayley rotation +\n"
        "log-scales against attention-output reconstruction (content cache only\n"
        "quantized, C bits of --config); RoPE = pair angles + log-scales against the\n"
        "complete positional-score reconstruction (R bits); AdamW, --steps with 10 %%\n"
        "warm-up then cosine, scales initialised by a held-out search over α; the\n"
        "best step on --heldout-cells (default: every cell not in --train-cells;\n"
        "none left: the last quarter of the train sequences; --heldout-cells none:\n"
        "the train objective selects). A path not learned stays the\n"
        "identity. --objective recon replaces both objectives by plain cache\n"
        "reconstruction ‖X~ - X‖²/‖X‖² (the paper's Table 7 ablation).\n"
        "--also-content (with --path both) also writes CONTENT.h5: the same run's\n"
        "content transform with the RoPE path the identity, which is what --path\n"
        "content with the same settings writes (the paths are learned\n"
        "independently), without learning the content path twice.\n"
        "--attn-precision f64 (QuantMLA's content path) computes the objective's\n"
        "attention and its backward in double on either engine and rounds the\n"
        "gradient to 16 significant bits, so that two engines learn the same\n"
        "transforms from the same seed (docs/cuda-engine.md, \"Learning in\n"
        "double\"); somewhat slower. f32 (the default) is float32 as before.\n"
        "One progress line per layer and path. Resume: rerun the same\n"
        "command (--force starts over).\n"
        CLI_ENGINE_HELP
        "example: qmla learn data/tiny-mla-default.h5 -o qm.h5 --train-cells prose-s0\n");
}

static void on_note(void *ctx, const char *line)
{
    (void)ctx;
    fprintf(stderr, "qmla learn: %s\n", line);
}

static int on_progress(void *ctx, size_t done, size_t total, size_t resumed)
{
    (void)ctx;
    (void)done;
    (void)total;
    (void)resumed;
    return cli_interrupted() != 0;
}

/* --method quantmla|rtn|smoothquant|quarot */
static int opt_method(const char *cmd, const char *arg, void *dst)
{
    if (!(*(const qmla_tmethod_type **)dst = qmla_tmethod_lookup(arg)))
        return cli_fail(cmd, "--method: expected quantmla, rtn, smoothquant or quarot, found \"%s\"", arg);
    return 0;
}

int cmd_learn(int argc, char **argv)
{
    const char *out = NULL, *layers_arg = NULL, *train_arg = NULL, *held_arg = NULL, *also = NULL;
    const char *config = "C4R4", *path_arg = "both", *objective = NULL, *precision = NULL;
    const qmla_tmethod_type *method = qmla_tmethod_quantmla;
    int threads = cli_default_threads(), force = 0;
    double alpha = 0.5;
    qmla_learn_opts lo_ = qmla_learn_defaults();
    long steps = (long)lo_.steps, seed = (long)lo_.seed;
    const qmla_engine *engine = NULL; /* --engine (NULL: cpu) */
    const cli_opt opts[] = {
        {.name = "output", .shrt = 'o', .kind = CLI_STR, .dst = &out},
        {.name = "method", .shrt = 0, .kind = CLI_FN, .dst = &method, .fn = opt_method},
        {.name = "alpha", .shrt = 0, .kind = CLI_DOUBLE, .dst = &alpha, .dlo = 0, .dhi = 1, .expected = "a number in [0, 1]"},
        {.name = "config", .shrt = 0, .kind = CLI_CHOICE, .dst = &config, .expected = "C4R4 or C2R4", .choices = "C4R4 C2R4"},
        {.name = "layers", .shrt = 0, .kind = CLI_STR, .dst = &layers_arg},
        {.name = "train-cells", .shrt = 0, .kind = CLI_STR, .dst = &train_arg},
        {.name = "heldout-cells", .shrt = 0, .kind = CLI_STR, .dst = &held_arg},
        {.name = "path", .shrt = 0, .kind = CLI_CHOICE, .dst = &path_arg, .expected = "content, rope or both",
         .choices = "content rope both"},
        {.name = "steps", .shrt = 0, .kind = CLI_LONG, .dst = &steps, .lo = 1, .hi = 1000000, .expected = "1..1000000"},
        {.name = "lr", .shrt = 0, .kind = CLI_DOUBLE, .dst = &lo_.lr, .dlo = 0, .dhi = 10, .open = CLI_OPEN_LO | CLI_OPEN_HI,
         .expected = "a number in (0, 10)"},
        {.name = "seed", .shrt = 0, .kind = CLI_LONG, .dst = &seed, .lo = 0, .hi = 0x7fffffffL, .expected = "0..2^31-1"},
        {.name = "force", .shrt = 0, .kind = CLI_SET, .dst = &force},
        {.name = "objective", .shrt = 0, .kind = CLI_CHOICE, .dst = &objective, .expected = "function or recon",
         .choices = "function recon"},
        {.name = "also-content", .shrt = 0, .kind = CLI_STR, .dst = &also},
        {.name = "attn-precision", .shrt = 0, .kind = CLI_CHOICE, .dst = &precision,
         .expected = "f32 or f64", .choices = "f32 f64"},
        {.name = "threads", .shrt = 0, .kind = CLI_THREADS, .dst = &threads},
        {.name = "help", .shrt = 'h', .kind = CLI_HELP, .dst = NULL},
        {.name = "engine", .shrt = 0, .kind = CLI_ENGINE, .dst = &engine},
        {0}};
    const int prc = cli_getopt("learn", argc, argv, opts, help, NULL);
    if (prc >= 0)
        return prc;
    lo_.steps = (size_t)steps;
    lo_.seed = (unsigned long)seed;
    if (objective)
        lo_.recon = !strcmp(objective, "recon");
    lo_.attn_f64 = precision && !strcmp(precision, "f64");
    lo_.threads = threads;
    if (cli_require_args("learn", argc, "CAPTURE.h5", out, "-o TRANSFORMS.h5"))
        return QMLA_EXIT_USAGE;
    if (cli_engine_device("learn", engine, -1))
        return QMLA_EXIT_USAGE;
    const char *capture = argv[optind];
    qmla_learn_run_opts o = qmla_learn_run_defaults();
    o.method = method;
    o.path = path_arg;
    o.config = config;
    o.alpha = alpha;
    o.also_content = also;
    o.force = force;
    o.learn = lo_; /* before the check: it refuses --attn-precision f64 where it does nothing */
    qmla_learn_run_result res;
    qmla_error err;
    qmla_error_clear(&err);
    if (qmla_learn_run_check(capture, out, &o, &res, &err))
        return res.refusal ? cli_fail("learn", "%s", err.msg) : cli_lib_error("learn", &err);
    int *layers = NULL;
    size_t n_layers_sel = 0, n_train = 0, n_held = 0;
    char **train = NULL, *trainbuf = NULL, **held = NULL, *heldbuf = NULL, msg[256];
    if (layers_arg && cli_parse_int_list(layers_arg, &layers, &n_layers_sel, msg, sizeof msg))
        return cli_fail("learn", "--layers: %s", msg);
    if (train_arg && cli_split_list(train_arg, &train, &n_train, &trainbuf)) {
        free(layers);
        return cli_fail("learn", "--train-cells: empty list \"%s\"", train_arg);
    }
    int no_held = held_arg && !strcmp(held_arg, "none");
    if (held_arg && !no_held && cli_split_list(held_arg, &held, &n_held, &heldbuf)) {
        free(layers);
        free(train);
        free(trainbuf);
        return cli_fail("learn", "--heldout-cells: empty list \"%s\"", held_arg);
    }
    cli_signals_install();
    o.layers = layers;
    o.n_layers = n_layers_sel;
    o.train = (const char *const *)train;
    o.n_train = n_train;
    o.held = (const char *const *)held;
    o.n_held = n_held;
    o.no_held = no_held;
    o.layers_text = layers_arg;
    o.train_text = train_arg;
    o.held_text = held_arg;
    o.command_line = cli_command_line();
    o.engine = engine;
    o.progress = on_progress;
    o.note = on_note;
    int rc = QMLA_EXIT_OK;
    int st = qmla_learn_run(capture, out, &o, &res, &err);
    if (res.wrote)
        printf("wrote %s: %s, %zu layers\n", out, method->name, res.n_layers);
    if (res.wrote_also)
        printf("wrote %s: %s (content path only), %zu layers\n", also, method->name, res.n_layers);
    if (st && res.stopped) {
        qmla_error_set(&err, QMLA_EINVAL, "interrupted by %s (layers done so far are kept)",
                       cli_signal_name());
        rc = cli_lib_error("learn", &err);
    } else if (st) {
        rc = res.refusal ? cli_fail("learn", "%s", err.msg) : cli_lib_error("learn", &err);
    }
    free(layers);
    free(train);
    free(trainbuf);
    free(held);
    free(heldbuf);
    if (rc == QMLA_EXIT_USAGE && cli_interrupted())
        rc = QMLA_EXIT_INTERRUPTED;
    return rc;
}
