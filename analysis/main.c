/* main.c — the `qmla` command-line program: subcommand dispatch.
 *
 *   qmla check CAPTURE.h5 [--tol X]
 *   qmla sweep CAPTURE.h5 -o RESULTS.h5 [options]
 *   qmla synth -o FILE [--shape NAME] [options]
 *
 * Exit status: 0 success, 1 a finding (e.g. an inconsistent capture),
 * 2 bad usage or malformed input, 130 interrupted. */
#include "cli.h"
#include "qmla/attention.h"
#include "qmla/status.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: qmla <command> [options]   (qmla <command> --help for more)\n"
            "\n"
            "QuantMLA toolkit: how low-bit quantization of MLA's two KV caches\n"
            "(content latent, RoPE key) becomes attention-output error.\n"
            "\n"
            "commands:\n"
            "  check   validate a qmla-capture file and recompute its attention\n"
            "  sweep   matched-NMSE path responses and error routes -> results.h5\n"
            "  synth   write a synthetic capture with random MLA weights\n"
            "  jvp     local (JVP) versus finite gains of QDQ directions -> /jvp\n"
            "  predict token sensitivities and the operator-error predictors -> /predict\n"
            "  intervene  equal-energy interventions and joint-path perturbation\n"
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

static int dispatch(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return QMLA_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return QMLA_EXIT_OK;
    }
    if (!strcmp(cmd, "--version")) {
        printf("qmla %s\n", qmla_version());
        return QMLA_EXIT_OK;
    }
    if (!strcmp(cmd, "check"))
        return cmd_check(argc - 1, argv + 1);
    if (!strcmp(cmd, "sweep"))
        return cmd_sweep(argc - 1, argv + 1);
    if (!strcmp(cmd, "synth"))
        return cmd_synth(argc - 1, argv + 1);
    if (!strcmp(cmd, "jvp"))
        return cmd_jvp(argc - 1, argv + 1);
    if (!strcmp(cmd, "predict"))
        return cmd_predict(argc - 1, argv + 1);
    if (!strcmp(cmd, "intervene"))
        return cmd_intervene(argc - 1, argv + 1);
    fprintf(stderr, "qmla: unknown command \"%s\"\n\n", cmd);
    usage(stderr);
    return QMLA_EXIT_USAGE;
}
