/* main.c — the `qmla` command-line program: subcommand dispatch.
 *
 *   qmla check CAPTURE.h5 [--tol X]
 *   qmla sweep CAPTURE.h5 -o RESULTS.h5 [options]
 *   qmla synth -o FILE [--shape NAME] [options]
 *
 * Exit status: 0 success, 1 a finding (e.g. an inconsistent capture),
 * 2 bad usage or malformed input, 130 interrupted. */
#include "cli.h"
#include "cli_safe.h"
#include "qmla/status.h"

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
    if (!strcmp(cmd, "help") && argc >= 3) {
        /* `qmla help sweep` is `qmla sweep --help` */
        char *hargv[] = {argv[2], "--help", NULL};
        if (!strcmp(argv[2], "check"))
            return cmd_check(2, hargv);
        if (!strcmp(argv[2], "sweep"))
            return cmd_sweep(2, hargv);
        if (!strcmp(argv[2], "synth"))
            return cmd_synth(2, hargv);
        return cli_fail("help", "unknown command \"%s\" (expected check, sweep or synth)",
                        argv[2]);
    }
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
    char esc[512];
    fprintf(stderr, "qmla: unknown command \"%s\"\n\n", cli_esc(cmd, esc, sizeof esc));
    usage(stderr);
    return QMLA_EXIT_USAGE;
}
