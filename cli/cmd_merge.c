/* cmd_merge.c — `qmla merge PART... -o RESULTS.h5`: combine the part files
 * of a sharded sweep (`qmla sweep --shard I/N`, e.g. a Slurm job array:
 * experiments/cluster/) into the results file a single run writes. The
 * checks and the format are lib/sweep/part.c's (include/qmla/part.h). */
#include "cli.h"
#include "qmla/outpath.h"
#include "qmla/part.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static void help(FILE *f)
{
    fprintf(f,
        "usage: qmla merge PART.h5... -o RESULTS.h5 [-v]\n"
        "\n"
        "Merge the part files of `qmla sweep --shard I/N` into one results file,\n"
        "the same (/responses and /summary bit for bit) as a single run of the\n"
        "same sweep. Refused: parts of another capture (hash), parameters or\n"
        "cell set; parts of another plan (layers, shards); two parts of one\n"
        "shard or a row in two parts; an incomplete set (the message names the\n"
        "shards without a part and the first missing items).\n"
        "\n"
        "  -o RESULTS.h5   output (atomic; refused if it is one of the parts)\n"
        "  -v              per-layer summary rows\n"
        "example: qmla merge part-*.h5 -o results.h5\n");
}

int cmd_merge(int argc, char **argv)
{
    static const struct option lo[] = {{"output", required_argument, 0, 'o'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    const char *out = NULL;
    int verbose = 0, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:vh", lo, NULL)) != -1) {
        switch (ch) {
        case 'o': out = optarg; break;
        case 'v': verbose = 1; break;
        case 'h': help(stdout); return QMLA_EXIT_OK;
        default: help(stderr); return QMLA_EXIT_USAGE;
        }
    }
    if (optind >= argc)
        return cli_fail("merge", "expected at least one PART.h5 (see qmla merge --help)");
    if (!out)
        return cli_fail("merge", "missing -o RESULTS.h5");
    const char *const *parts = (const char *const *)argv + optind;
    const size_t n = (size_t)(argc - optind);
    qmla_error err;
    qmla_error_clear(&err);
    if (qmla_output_path_check(out, "output file (-o)", parts, n, &err))
        return cli_lib_error("merge", &err);
    qmla_summary s;
    if (qmla_merge(parts, n, out, cli_command_line(), &s, &err))
        return cli_lib_error("merge", &err);
    printf("merged   %zu part%s -> %s (%zu rows)\n\n", n, n == 1 ? "" : "s", out,
           s.n_rows);
    cli_print_summary(&s, verbose, s.n_verified > 0);
    qmla_summary_free(&s);
    return QMLA_EXIT_OK;
}
