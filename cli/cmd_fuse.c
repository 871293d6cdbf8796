/* cli/cmd_fuse.c — `qmla fuse`: fold a transforms file into an MLA
 * checkpoint (qmla_model_apply_transforms, qmla_model_save; docs/math.md §7,
 * issue 11 item 6). */
#include "cli.h"
#include "qmla/model.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
        "usage: qmla fuse MODEL_DIR --transforms T.h5 -o FUSED_DIR [--dtype f32|f16|bf16]\n"
        "\n"
        "Write FUSED_DIR/model.safetensors (float32, or --dtype f16 / bf16: the\n"
        "folded weights rounded, so the function moves by that rounding) with\n"
        "the transforms of T.h5\n"
        "(qmla learn; docs/transforms-format.md) folded into the weights, and\n"
        "copy MODEL_DIR's other files (config.json, tokenizer, generation\n"
        "config). Per layer (docs/math.md section 7, checkpoint layout):\n"
        "  content T_C = diag(gamma)^-1 R diag(s): R into the latent rows of\n"
        "    kv_a_proj_with_mqa (rows <- R^T rows), the kv_a_layernorm gain\n"
        "    becomes s (the RMSNorm commutes with the orthogonal R), and\n"
        "    kv_b_proj's key and value blocks are multiplied by T_C^-T;\n"
        "  RoPE T_P = blockdiag(s_i R(theta_i)) on the model's RoPE pairs (the\n"
        "    checkpoint's own row order and pairing, as the engine rotates them):\n"
        "    into the RoPE rows of kv_a_proj_with_mqa, and T_P^-T into the RoPE\n"
        "    rows of every head of q_proj (or q_b_proj).\n"
        "The fused model's cache is X T: with the cache unquantized it computes\n"
        "the same function, and quantizing its cache plainly (RTN) is the\n"
        "transforms' method. What cannot be folded is refused: a transform made\n"
        "for another model (content/gamma differs from kv_a_layernorm: then\n"
        "diag(gain/gamma) R acts before the norm, which is not orthogonal), a\n"
        "non-orthogonal R, another RoPE pairing, dimensions or layers.\n"
        "FUSED_DIR is created (its parent must exist); it may not be MODEL_DIR or\n"
        "hold a shard index. The files are written into a staging folder inside\n"
        "it and moved into place when all are written: a failure leaves an\n"
        "existing FUSED_DIR as it was and removes one that fuse created (the\n"
        "staging folder of an interrupted run is removed by the next fuse).\n"
        "The provenance (source, transforms file, method, command, tool version,\n"
        "commit) is in the safetensors __metadata__.\n"
        "\n"
        "example: qmla fuse models/tiny-mla --transforms qm.h5 -o /tmp/tiny-mla-qm\n"
        "         qmla ppl /tmp/tiny-mla-qm --text data/heldout/code.txt.gz \\\n"
        "             --config C4R4 --tokens 2048 -o fused.h5\n");
}

int cmd_fuse(int argc, char **argv)
{
    static const struct option lo[] = {{"transforms", required_argument, 0, 'x'},
                                       {"output", required_argument, 0, 'o'},
                                       {"dtype", required_argument, 0, 'd'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    const char *tfp = NULL, *out = NULL, *dtype = "F32";
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
        switch (ch) {
        case 'x': tfp = optarg; break;
        case 'o': out = optarg; break;
        case 'd':
            if (!strcmp(optarg, "f32"))
                dtype = "F32";
            else if (!strcmp(optarg, "f16"))
                dtype = "F16";
            else if (!strcmp(optarg, "bf16"))
                dtype = "BF16";
            else
                return cli_fail("fuse", "--dtype: expected f32, f16 or bf16, found \"%s\"",
                                optarg);
            break;
        case 'h': usage(stdout); return QMLA_EXIT_OK;
        default: usage(stderr); return QMLA_EXIT_USAGE;
        }
    }
    if (cli_require_args("fuse", argc, "MODEL_DIR", NULL, NULL))
        return QMLA_EXIT_USAGE;
    if (!tfp)
        return cli_fail("fuse", "--transforms T.h5 is required");
    if (!out)
        return cli_fail("fuse", "-o FUSED_DIR is required");
    const char *dir = argv[optind];
    qmla_error err;
    qmla_error_clear(&err);
    qmla_transform_file tf;
    memset(&tf, 0, sizeof tf);
    qmla_model *m = NULL;
    int rc = QMLA_EXIT_OK;
    /* what an interrupted fuse left beside the output folder is resolved
     * (and named), then the folder is checked before the model is loaded */
    char note[2048];
    if (qmla_model_save_recover(out, note, sizeof note, &err)) {
        rc = cli_lib_error("fuse", &err);
        goto done;
    }
    if (note[0])
        fprintf(stderr, "qmla fuse: %s\n", note);
    if (qmla_model_save_check(dir, out, &err) || qmla_transform_file_read(tfp, &tf, &err) ||
        qmla_model_load(dir, &m, &err)) {
        rc = cli_lib_error("fuse", &err);
        goto done;
    }
    if (qmla_transform_file_check_complete(&tf, tfp, qmla_model_cfg(m)->L, &err)) {
        rc = cli_lib_error("fuse", &err);
        goto done;
    }
    if (qmla_model_apply_transforms(m, tf.t, (const float *const *)tf.gamma, tf.n, &err)) {
        qmla_error_prefix(&err, "%s into %s: ", tfp, dir);
        rc = cli_lib_error("fuse", &err);
        goto done;
    }
    char layers[16];
    snprintf(layers, sizeof layers, "%zu", tf.n);
    const char *meta[] = {"format", "pt",
                          "qmla_fused_from", dir,
                          "qmla_transforms", tfp,
                          "qmla_method", qmla_tmethod_name(tf.meta.method),
                          "qmla_learned_for", tf.meta.config,
                          "qmla_transform_settings", tf.meta.settings,
                          "qmla_layers_fused", layers,
                          "qmla_command", cli_command_line()};
    if (qmla_model_save(m, dir, out, dtype, meta, sizeof meta / sizeof meta[0] / 2, &err)) {
        rc = cli_lib_error("fuse", &err);
        goto done;
    }
    printf("wrote %s/model.safetensors: %s transforms of %zu layers from %s folded into %s "
           "(%s)\n", out, qmla_tmethod_name(tf.meta.method), tf.n, tfp, dir, dtype);
done:
    qmla_model_free(m);
    qmla_transform_file_free(&tf);
    return rc;
}
