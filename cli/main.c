/* main.c — the `qmla` command-line program: subcommand dispatch.
 *
 *   qmla check CAPTURE.h5 [--tol X]
 *   qmla sweep CAPTURE.h5 -o RESULTS.h5 [options]
 *   qmla synth -o FILE [--shape NAME] [options]
 *   qmla export RESULTS.h5 [--table NAME] [--format tsv|csv|md|json]
 *   qmla show RESULTS.h5
 *   qmla figures RESULTS.h5 [MORE.h5 ...] -o DIR [--format png|svg|pdf]
 *   qmla report RESULTS.h5 [MORE.h5 ...] -o REPORT.html
 *   qmla storage [--contexts LIST] [--config C4R4] [--policy sink4/local128]
 *   qmla allocate CAPTURE.h5 --budget B -o ALLOC.h5
 *
 * Exit status: 0 success, 1 a finding (e.g. an inconsistent capture),
 * 2 bad usage or malformed input, 130 interrupted. */
#include "cli.h"
#include "qmla/attention.h"
#include "cli_safe.h"
#include "qmla/status.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: qmla <command> [options]   (qmla <command> --help or\n"
            "       qmla help <command> for more; --version on any command)\n"
            "\n"
            "QuantMLA toolkit: how low-bit quantization of MLA's two KV caches\n"
            "(content latent, RoPE key) becomes attention-output error.\n"
            "\n"
            "commands:\n"
            "  check   validate a qmla-capture file and recompute its attention\n"
            "  sweep   matched-NMSE path responses and error routes -> results.h5\n"
            "  synth   write a synthetic capture with random MLA weights\n"
            "  export  one table of a results file as tsv, csv, md or json\n"
            "  show    print the summary stored in a results file\n"
            "  figures render the paper's figures and tables from results files\n"
            "  report  one self-contained HTML page: provenance, ranked sensitivities,\n"
            "          every figure and table of results files\n"
            "  storage bytes per token of the low-bit paged cache vs BF16\n"
            "  merge   combine the part files of sharded sweeps -> results.h5\n"
            "  serve-sim  serving under KV-cache pressure (paper Table 10)\n"
            "  jvp     local (JVP) versus finite gains of QDQ directions -> /jvp\n"
            "  predict token sensitivities and the operator-error predictors -> /predict\n"
            "  intervene  equal-energy interventions and joint-path perturbation\n"
            "  ppl     bits/byte of an MLA checkpoint with quantized caches -> /ppl\n"
            "  capture a capture file from the native engine (same windows as the Python tool)\n"
            "  fuse    fold a transforms file into an MLA checkpoint (safetensors)\n"
            "  learn   per-layer cache transforms: QuantMLA (learned), RTN, SmoothQuant†,\n"
            "          QuaRot† -> a transforms file (docs/transforms-format.md)\n"
            "  eval    output NMSE of transforms at C4R4/C2R4 or ALLOC.h5, with the RoPE bound\n"
            "  allocate  per-layer cache bits under a byte budget from the operator model\n"
            "          (/allocate; use it as --config ALLOC.h5)\n"
            "\n"
            "exit status: 0 ok, 1 finding, 2 usage/malformed input, 130 interrupted\n");
}

static int dispatch(int argc, char **argv);

int main(int argc, char **argv)
{
    cli_record_command_line(argc, argv);
    qmla_blas_set_threads(1); /* parallelism comes from qmla's own loops */
    int rc = dispatch(argc, argv);
    /* A summary lost to a full disk or a closed pipe is a failure too. */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "qmla: cannot write standard output: %s\n", strerror(errno));
        return rc == QMLA_EXIT_OK ? QMLA_EXIT_USAGE : rc;
    }
    return rc;
}

/* The subcommands: one row each (adding a command is a line here). */
static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
} commands[] = {
    {"check", cmd_check},     {"sweep", cmd_sweep},     {"synth", cmd_synth},
    {"storage", cmd_storage}, {"export", cmd_export},   {"show", cmd_show},
    {"figures", cmd_figures}, {"report", cmd_report},  {"jvp", cmd_jvp},         {"predict", cmd_predict},
    {"intervene", cmd_intervene}, {"merge", cmd_merge},
    {"serve-sim", cmd_serve_sim}, {"ppl", cmd_ppl},
    {"fuse", cmd_fuse},
    {"learn", cmd_learn},     {"eval", cmd_eval},       {"capture", cmd_capture},
    {"allocate", cmd_allocate},
};

static int (*find_command(const char *name))(int, char **)
{
    for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++)
        if (!strcmp(commands[k].name, name))
            return commands[k].run;
    return NULL;
}

static int dispatch(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return QMLA_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    char esc[512];
    if (!strcmp(cmd, "help") && argc >= 3) {
        /* `qmla help sweep` is `qmla sweep --help` */
        char *hargv[] = {argv[2], "--help", NULL};
        int (*run)(int, char **) = find_command(argv[2]);
        if (run)
            return run(2, hargv);
        return cli_fail("help", "unknown command \"%s\" (qmla --help lists them)",
                        cli_esc(argv[2], esc, sizeof esc));
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return QMLA_EXIT_OK;
    }
    if (!strcmp(cmd, "--version")) {
        printf("qmla %s\n", qmla_version());
        return QMLA_EXIT_OK;
    }
    int (*run)(int, char **) = find_command(cmd);
    if (run) {
        /* `qmla <command> ... --version`, for every command alike */
        for (int k = 2; k < argc && strcmp(argv[k], "--"); k++)
            if (!strcmp(argv[k], "--version")) {
                printf("qmla %s\n", qmla_version());
                return QMLA_EXIT_OK;
            }
        return run(argc - 1, argv + 1);
    }
    fprintf(stderr, "qmla: unknown command \"%s\"\n\n", cli_esc(cmd, esc, sizeof esc));
    usage(stderr);
    return QMLA_EXIT_USAGE;
}
