/* cmd_synth.c — `qmla synth`: write a synthetic qmla-capture v1 file. */
#include "cli.h"
#include "cli_safe.h"
#include "qmla/outpath.h"
#include "qmla/synth.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void help(FILE *f)
{
    fprintf(f,
        "usage: qmla synth -o FILE [--shape NAME] [--seed S] [--seqs N]\n"
        "                  [--tokens T] [--layers L] [--cells C] [--f16]\n"
        "                  [--gzip LEVEL] [--no-pre] [--threads N] [--force]\n"
        "\n"
        "Write a valid qmla-capture v1 file with random MLA tensors of a real\n"
        "model's shape (root attribute synthetic = 1). The attention output is\n"
        "computed by qmla from the stored tensors, so `qmla check` passes.\n"
        "\n"
        "  -o FILE        output capture (refused if it exists, unless --force;\n"
        "                 always refused if it is a directory, device or FIFO)\n"
        "  --shape NAME   one of the shapes below (default tiny)\n"
        "  --seed S       RNG seed, 0..4294967295 (GSL mt19937 takes a 32-bit\n"
        "                 seed: larger values are refused, not wrapped; GSL\n"
        "                 maps 0 to its default seed 4357; default 1)\n"
        "  --seqs N       sequences per cell (default 2)\n"
        "  --tokens T     tokens per sequence (default 64)\n"
        "  --layers L     layers to write (default: min(4, the model's))\n"
        "  --cells C      cells (named synth-s0, synth-s1, ...; default 2)\n"
        "  --f16          store tensors as float16 (check_tolerance 2e-3)\n"
        "  --gzip LEVEL   chunk and compress datasets (0-9, default 0)\n"
        "  --no-pre       omit k_rope_pre, q_rope_pre, rope_cos, rope_sin\n"
        "  --threads N    threads for the attention (default: all processors)\n"
        "\n"
        "shapes (H, D, d_c, d_n/d_r/d_v, layers, softmax scale, rope layout):\n");
    for (const qmla_shape *s = qmla_shapes(); s->name; s++)
        fprintf(f, "  %-19s H %3d  D %4d  d_c %3d  %3d/%2d/%3d  L %2d  tau %.5f  %s\n",
                s->name, s->H, s->D, s->d_c, s->d_n, s->d_r, s->d_v,
                s->n_layers, s->tau, s->rope_pairing ? "half" : "interleaved");
    fprintf(f, "\nexample: qmla synth -o syn.h5 --shape deepseek-v2-lite --tokens 512 --seqs 8\n");
}

int cmd_synth(int argc, char **argv)
{
    static const struct option lo[] = {
        {"output", required_argument, 0, 'o'}, {"shape", required_argument, 0, 's'},
        {"seed", required_argument, 0, 'S'},   {"seqs", required_argument, 0, 'n'},
        {"tokens", required_argument, 0, 't'}, {"layers", required_argument, 0, 'L'},
        {"cells", required_argument, 0, 'c'},  {"f16", no_argument, 0, 'h' + 256},
        {"gzip", required_argument, 0, 'z'},   {"no-pre", no_argument, 0, 'p'},
        {"threads", required_argument, 0, 'j'}, {"force", no_argument, 0, 'f'},
        {"help", no_argument, 0, 'h'},         {"version", no_argument, 0, 'v' + 256},
        {0, 0, 0, 0}};
    const char *out = NULL, *shape = "tiny";
    qmla_synth_opts o;
    memset(&o, 0, sizeof o);
    o.seed = 1;
    o.seqs = 2;
    o.tokens = 64;
    o.cells = 2;
    o.with_pre = 1;
    o.threads = cli_default_threads();
    int force = 0, layers = -1;
    long v;
    optind = 1;
    int ch;
    while ((ch = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
        switch (ch) {
        case 'o': out = optarg; break;
        case 's': shape = optarg; break;
        case 'S':
            /* the full range GSL's mt19937 distinguishes (it keeps the
             * low 32 bits of an unsigned long); refused beyond it */
            if (cli_parse_long(optarg, 0, 0xffffffffL, &v))
                return cli_fail("synth", "--seed: expected an integer in 0..4294967295 "
                                "(a 32-bit mt19937 seed), found \"%s\"", optarg);
            o.seed = (unsigned long)v;
            break;
        case 'n':
            if (cli_parse_long(optarg, 1, 1 << 16, &v))
                return cli_fail("synth", "--seqs: expected 1..65536, found \"%s\"", optarg);
            o.seqs = (int)v;
            break;
        case 't':
            if (cli_parse_long(optarg, 1, 1 << 16, &v))
                return cli_fail("synth", "--tokens: expected 1..65536, found \"%s\"", optarg);
            o.tokens = (int)v;
            break;
        case 'L':
            if (cli_parse_long(optarg, 1, 1000, &v))
                return cli_fail("synth", "--layers: expected 1..1000, found \"%s\"", optarg);
            layers = (int)v;
            break;
        case 'c':
            if (cli_parse_long(optarg, 1, 1000, &v))
                return cli_fail("synth", "--cells: expected 1..1000, found \"%s\"", optarg);
            o.cells = (int)v;
            break;
        case 'h' + 256: o.float16 = 1; break;
        case 'z':
            if (cli_parse_long(optarg, 0, 9, &v))
                return cli_fail("synth", "--gzip: expected 0..9, found \"%s\"", optarg);
            o.gzip = (int)v;
            break;
        case 'p': o.with_pre = 0; break;
        case 'j':
            if (cli_opt_threads("synth", optarg, &o.threads))
                return QMLA_EXIT_USAGE;
            break;
        case 'f': force = 1; break;
        case 'h': help(stdout); return QMLA_EXIT_OK;
        case 'v' + 256: printf("qmla %s\n", qmla_version()); return QMLA_EXIT_OK;
        default: help(stderr); return QMLA_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return cli_fail("synth", "unexpected argument \"%s\"", argv[optind]);
    if (!out)
        return cli_fail("synth", "missing -o FILE (see qmla synth --help)");
    o.shape = qmla_shape_find(shape);
    if (!o.shape)
        return cli_fail("synth", "unknown shape \"%s\" (qmla synth --help lists them)", shape);
    if (layers > o.shape->n_layers)
        return cli_fail("synth", "--layers %d: shape %s has %d layers", layers,
                        shape, o.shape->n_layers);
    o.n_layers = layers > 0 ? layers : (o.shape->n_layers < 4 ? o.shape->n_layers : 4);
    qmla_error err;
    qmla_error_clear(&err);
    {
        /* Before any work: a path the atomic rename may replace
         * (include/qmla/outpath.h), and its temporary. */
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", out);
        if (qmla_output_path_check(out, "output file (-o)", NULL, 0, &err) ||
            qmla_output_path_check(tmp, "temporary file", NULL, 0, &err))
            return cli_lib_error("synth", &err);
    }
    struct stat sb;
    if (!force && stat(out, &sb) == 0)
        return cli_fail("synth", "%s exists (use --force to overwrite)", out);
    if (qmla_synth_write(out, &o, &err))
        return cli_lib_error("synth", &err);
    printf("wrote %s: shape %s, %d layers, %d cells x %d seqs x %d tokens, seed %lu%s\n",
           out, o.shape->name, o.n_layers, o.cells, o.seqs, o.tokens, o.seed,
           o.float16 ? ", float16" : "");
    if (fflush(stdout) != 0 || ferror(stdout))
        return cli_fail("synth", "%s written, but standard output failed: %s",
                        out, strerror(errno));
    return QMLA_EXIT_OK;
}
