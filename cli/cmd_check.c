/* cmd_check.c — `qmla check`: validate a capture's structure, recompute its
 * attention per (layer, cell, sequence) against attn_out, and check
 * post == rotate(pre) where the _pre tensors exist. */
#include "cli.h"
#include "cli_safe.h"
#include "qmla/attention.h"
#include "qmla/capture.h"
#include "qmla/norms.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void help(FILE *f)
{
    fprintf(f,
        "usage: qmla check CAPTURE.h5 [--tol X] [--threads N] [-q]\n"
        "\n"
        "Validate a qmla-capture v1 file (every rule of the format), recompute\n"
        "MLA attention in the absorbed form for every layer, cell and sequence,\n"
        "and compare with the stored attn_out (relative Frobenius error).\n"
        "Where k_rope_pre/q_rope_pre/rope_cos/rope_sin exist, also check that\n"
        "k_rope and q_rope equal rotate(pre) under the declared rope_pairing.\n"
        "\n"
        "  --tol X       tolerance (default: the capture's check_tolerance\n"
        "                attribute, else 1e-4)\n"
        "  --threads N   threads (default: all online processors)\n"
        "  -q            quiet: print the header, the rows that fail (above\n"
        "                tolerance or non-finite) and the summary, not every row\n"
        "\n"
        "A recomputation that is not finite (float32 overflow: e.g. a logit\n"
        "beyond 3.4e38) is a finding, reported with where it overflowed.\n"
        "\n"
        "exit: 0 all within tolerance, 1 some error above it or a non-finite\n"
        "recomputation, 2 malformed file\n"
        "example: qmla check data/tiny-mla-default.h5\n");
}

int cmd_check(int argc, char **argv)
{
    static const struct option lo[] = {{"tol", required_argument, 0, 't'},
                                       {"threads", required_argument, 0, 'j'},
                                       {"help", no_argument, 0, 'h'},
                                       {"version", no_argument, 0, 'v' + 256},
                                       {0, 0, 0, 0}};
    double tol = -1.0;
    long threads = cli_default_threads();
    int quiet = 0, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "hq", lo, NULL)) != -1) {
        switch (ch) {
        case 't':
            if (cli_parse_double(optarg, &tol) || !(tol > 0))
                return cli_fail("check", "--tol: expected a positive number, found \"%s\"", optarg);
            break;
        case 'j':
            if (cli_parse_long(optarg, 1, 1024, &threads))
                return cli_fail("check", "--threads: expected 1..1024, found \"%s\"", optarg);
            break;
        case 'q': quiet = 1; break;
        case 'h': help(stdout); return QMLA_EXIT_OK;
        case 'v' + 256: printf("qmla %s\n", qmla_version()); return QMLA_EXIT_OK;
        default: help(stderr); return QMLA_EXIT_USAGE;
        }
    }
    if (cli_require_args("check", argc, "CAPTURE.h5", NULL, NULL))
        return QMLA_EXIT_USAGE;
    const char *path = argv[optind];
    qmla_error err;
    qmla_error_clear(&err);
    qmla_capture *cap = NULL;
    if (qmla_capture_open(path, &cap, &err))
        return cli_lib_error("check", &err);
    const qmla_capture_config *cfg = qmla_capture_get_config(cap);
    const char *tol_src = "--tol";
    if (tol < 0) {
        tol = cfg->has_check_tolerance ? cfg->check_tolerance : 1e-4;
        tol_src = cfg->has_check_tolerance ? "the capture's check_tolerance" : "default";
    }
    const qmla_exec ex = qmla_exec_cpu((int)threads);
    const qmla_mla_dims d = {(size_t)cfg->H, (size_t)cfg->D, (size_t)cfg->d_c,
                             (size_t)cfg->d_n, (size_t)cfg->d_r, (size_t)cfg->d_v,
                             cfg->softmax_scale};
    char escp[1024], escm[1024], escc[512];
    printf("capture  %s\nmodel    %s%s\nshape    H %d  D %d  d_c %d  d_n %d  d_r %d  d_v %d  tau %.6g  rope %s\n"
           "tol      %.3g (%s)\n",
           cli_esc(path, escp, sizeof escp), cli_esc(cfg->model, escm, sizeof escm),
           cfg->synthetic ? " [synthetic]" : "", cfg->H, cfg->D,
           cfg->d_c, cfg->d_n, cfg->d_r, cfg->d_v, cfg->softmax_scale,
           cfg->rope_pairing == QMLA_ROPE_HALF ? "half" : "interleaved", tol, tol_src);
    if (!quiet)
        printf("\n%5s  %-16s %4s  %11s  %11s  %11s  %s\n", "layer", "cell", "seq",
               "attn_err", "k_rope_err", "q_rope_err", "status");

    int rc = QMLA_EXIT_OK;
    size_t nchecks = 0, nbad = 0, nnonfinite = 0, ninf = 0;
    double worst = -1.0;
    char worst_at[256] = "";
    float *post = NULL;
    qmla_attn_state ws;
    memset(&ws, 0, sizeof ws);
    size_t ws_T = 0;
    for (size_t li = 0; li < qmla_capture_n_layers(cap) && rc != QMLA_EXIT_USAGE; li++) {
        qmla_layer lay;
        memset(&lay, 0, sizeof lay);
        if (qmla_capture_load_layer(cap, li, &lay, &err)) {
            rc = cli_lib_error("check", &err);
            break;
        }
        const qmla_mla_weights w = {lay.w_uk, lay.w_uv, lay.w_o};
        for (size_t ci = 0; ci < qmla_capture_n_cells(cap, li); ci++) {
            qmla_cell c;
            memset(&c, 0, sizeof c);
            if (qmla_capture_load_cell(cap, li, ci, &c, &err)) {
                rc = cli_lib_error("check", &err);
                break;
            }
            const size_t T = c.T, H = d.H;
            if (T > ws_T) {
                qmla_attn_state_free(&ws);
                free(post);
                post = malloc(H * T * d.d_r * sizeof *post);
                if (!post || qmla_attn_state_alloc(&d, T, 0, &ws, &err)) {
                    if (!post)
                        qmla_error_set(&err, QMLA_ENOMEM, "out of memory for T = %zu", T);
                    rc = cli_lib_error("check", &err);
                    qmla_cell_free(&c);
                    break;
                }
                ws_T = T;
            }
            for (size_t s = 0; s < c.N; s++) {
                const float *C = c.c_kv + s * T * d.d_c, *K = c.k_rope + s * T * d.d_r;
                const float *qn = c.q_nope + s * H * T * d.d_n, *qr = c.q_rope + s * H * T * d.d_r;
                /* a non-finite recomputation (QMLA_ENONFINITE) is this
                 * command's finding, diagnosed below; other errors stop it */
                if (qmla_attn_state_forward(&ex, &d, T, &w, qn, qr, C, K, &ws, &err) &&
                    err.status != QMLA_ENONFINITE) {
                    rc = cli_lib_error("check", &err);
                    break;
                }
                const double e = qmla_rel_fro(ws.Y, c.attn_out + s * T * d.D, T * d.D);
                double ek = -1.0, eq = -1.0;
                if (c.k_rope_pre && c.rope_cos && c.rope_sin) {
                    const float *cs = c.rope_cos + s * T * (d.d_r / 2),
                                *sn = c.rope_sin + s * T * (d.d_r / 2);
                    qmla_rope_rotate(1, T, d.d_r, cfg->rope_pairing, cs, sn,
                                     c.k_rope_pre + s * T * d.d_r, post);
                    ek = cli_all_finite(post, T * d.d_r) ? qmla_rel_fro(post, K, T * d.d_r) : NAN;
                    if (c.q_rope_pre) {
                        qmla_rope_rotate(H, T, d.d_r, cfg->rope_pairing, cs, sn,
                                         c.q_rope_pre + s * H * T * d.d_r, post);
                        eq = cli_all_finite(post, H * T * d.d_r)
                                 ? qmla_rel_fro(post, qr, H * T * d.d_r) : NAN;
                    }
                }
                /* NaN is never within tolerance: fmax() would drop it. A
                 * recomputation that is not finite is a finding of its own. */
                char why[640] = "";
                if (!cli_all_finite(ws.Y, T * d.D))
                    check_diag_nonfinite(H, T, d.d_c, d.d_r, d.d_v, d.D, d.tau,
                                         ws.q_lat, ws.q_rope_t, ws.A, ws.U, ws.O,
                                         ws.Y, C, K, why, sizeof why);
                else if (isnan(ek) || isnan(eq))
                    snprintf(why, sizeof why, "rotate(*_rope_pre) under rope_cos/rope_sin "
                             "is not finite (float32 overflow)");
                const int nonfinite = why[0] != '\0' || isnan(e);
                if (nonfinite && !why[0])
                    snprintf(why, sizeof why, "the comparison with attn_out is not a finite number");
                const double m = nonfinite ? NAN : fmax(e, fmax(ek, eq));
                const int bad = !(m <= tol);
                nchecks++;
                nbad += bad;
                nnonfinite += nonfinite;
                /* an infinite error (attn_out zero where the recomputation
                 * is not) is counted, never reported as the worst finite one */
                ninf += !nonfinite && !isfinite(m);
                if (!nonfinite && isfinite(m) && !(m <= worst)) {
                    worst = m;
                    snprintf(worst_at, sizeof worst_at, "layer %d, cell %s, seq %zu",
                             lay.layer, cli_esc(c.name, escc, sizeof escc), s);
                }
                if (!quiet || bad) {
                    char kb[16] = "-", qb[16] = "-";
                    if (!(ek < 0))
                        snprintf(kb, sizeof kb, "%.3e", ek);
                    if (!(eq < 0))
                        snprintf(qb, sizeof qb, "%.3e", eq);
                    printf("%5d  %-16s %4zu  %11.3e  %11s  %11s  %s\n", lay.layer,
                           cli_esc(c.name, escc, sizeof escc), s, isnan(e) ? fabs(e) : e, kb, qb,
                           nonfinite ? "NON-FINITE" : bad ? "ABOVE TOL" : "ok");
                }
                if (nonfinite)
                    printf("       non-finite recomputation at layer %d, cell %s, "
                           "seq %zu: %s\n", lay.layer, cli_esc(c.name, escc, sizeof escc),
                           s, why);
            }
            qmla_cell_free(&c);
            if (rc == QMLA_EXIT_USAGE)
                break;
        }
        qmla_layer_free(&lay);
    }
    qmla_attn_state_free(&ws);
    free(post);
    qmla_capture_close(cap);
    if (rc == QMLA_EXIT_USAGE)
        return rc;
    printf("\n%zu checks (layer x cell x sequence), %zu above tolerance %.3g", nchecks,
           nbad, tol);
    if (nnonfinite)
        printf(" (%zu of them non-finite)", nnonfinite);
    if (ninf)
        printf("; non-finite errors: %zu (attn_out is zero where the recomputation is not)", ninf);
    if (worst >= 0)
        printf("; worst finite %.3e (%s)\n", worst, worst_at);
    else
        printf("; no finite comparison\n");
    printf("%s\n", nnonfinite ? "INCONSISTENT: the recomputation overflows float32 (non-finite) "
                                "where noted above"
                   : nbad ? "INCONSISTENT: the capture does not reproduce its attention output"
                          : "consistent");
    return nbad ? QMLA_EXIT_FINDING : QMLA_EXIT_OK;
}
