/* main.c — the `qmla` command-line program: subcommand dispatch.
 *
 *   qmla check CAPTURE.h5 [--tol X]
 *   qmla sweep CAPTURE.h5 -o RESULTS.h5 [options]
 *   qmla synth -o FILE [--shape NAME] [options]
 *   qmla storage [--contexts LIST] [--config C4R4] [--policy sink4/local128]
 *
 * Exit status: 0 success, 1 a finding (e.g. an inconsistent capture),
 * 2 bad usage or malformed input, 130 interrupted. */
#include "cli.h"
#include "qmla/status.h"

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
            "  storage bytes per token of the low-bit paged cache vs BF16\n"
            "\n"
            "exit status: 0 ok, 1 finding, 2 usage/malformed input, 130 interrupted\n");
}

int main(int argc, char **argv)
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
    if (!strcmp(cmd, "storage"))
        return cmd_storage(argc - 1, argv + 1);
    fprintf(stderr, "qmla: unknown command \"%s\"\n\n", cmd);
    usage(stderr);
    return QMLA_EXIT_USAGE;
}
