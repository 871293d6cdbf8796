/* cli_summary.c — the sweep's summary table on stdout (qmla sweep, and any
 * command that shows a results file): per-layer responses with -v, the
 * model means over the non-degenerate layers, the route-identity check. */
#include "cli.h"
#include "qmla/results.h"
#include "qmla/sweep.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void num(char *buf, size_t len, double v)
{
    if (isfinite(v))
        snprintf(buf, len, "%.6g", v);
    else
        snprintf(buf, len, "-");
}

static void se_str(char *buf, size_t len, double v)
{
    if (isfinite(v))
        snprintf(buf, len, "%.3g", v);
    else
        snprintf(buf, len, "-");
}

static void ci_str(char *buf, size_t len, double lo, double hi)
{
    if (isfinite(lo) && isfinite(hi))
        snprintf(buf, len, "[%.4g, %.4g]", lo, hi);
    else
        snprintf(buf, len, "-");
}

static void dispersion_row(const char *label, const double v[9])
{
    char se[3][32], ci[3][64];
    for (int q = 0; q < 3; q++) {
        se_str(se[q], sizeof se[q], v[3 * q]);
        ci_str(ci[q], sizeof ci[q], v[3 * q + 1], v[3 * q + 2]);
    }
    printf("%-5s  %9s %-21s  %9s %-21s  %9s %s\n", label, se[0], ci[0], se[1], ci[1], se[2],
           ci[2]);
}

/* The dispersion of the numbers above (docs/math.md §3.1): standard errors
 * and 95 % bootstrap intervals, after the point estimates, which stay as
 * they were printed. */
static void print_dispersion(const qmla_summary *s, int per_layer)
{
    if (!s->response_content_se) {
        printf("dispersion: not recorded in this file (written before /summary held "
               "standard errors and intervals)\n");
        return;
    }
    int any = isfinite(s->model_response_content_se) || isfinite(s->model_ratio_se);
    for (size_t k = 0; k < s->n_layers && !any; k++)
        any = isfinite(s->response_content_se[k]) || isfinite(s->response_rope_se[k]);
    if (!any) {
        printf("dispersion: none (a cell holds fewer than two non-degenerate sequences; "
               "docs/math.md §3.1)\n");
        return;
    }
    printf("\ndispersion over sequences within cells: standard error, 95%% bootstrap "
           "interval (B %zu, seed %lu)\n", s->bootstrap_replicates, s->bootstrap_seed);
    printf("%-5s  %9s %-21s  %9s %-21s  %9s %s\n", "layer", "se R_C", "R_C 95% interval",
           "se R_P", "R_P 95% interval", "se ratio", "ratio 95% interval");
    if (per_layer)
        for (size_t k = 0; k < s->n_layers; k++) {
            const double v[9] = {s->response_content_se[k], s->response_content_lo[k],
                                 s->response_content_hi[k], s->response_rope_se[k],
                                 s->response_rope_lo[k], s->response_rope_hi[k],
                                 s->ratio_se[k], s->ratio_lo[k], s->ratio_hi[k]};
            char lab[16];
            snprintf(lab, sizeof lab, "%5d", s->layer[k]);
            dispersion_row(lab, v);
        }
    const double m[9] = {s->model_response_content_se, s->model_response_content_lo,
                         s->model_response_content_hi, s->model_response_rope_se,
                         s->model_response_rope_lo, s->model_response_rope_hi,
                         s->model_ratio_se, s->model_ratio_lo, s->model_ratio_hi};
    dispersion_row("model", m);
}

void cli_print_summary(const qmla_summary *s, int per_layer, int verify)
{
    char c[32], r[32];
    if (per_layer) {
        printf("%5s  %16s  %16s  %8s\n", "layer", "content R_C", "RoPE R_P", "R_P/R_C");
        for (size_t k = 0; k < s->n_layers; k++) {
            num(c, sizeof c, s->response_content[k]);
            num(r, sizeof r, s->response_rope[k]);
            if (s->degenerate[k])
                printf("%5d  %16s  %16s  %s\n", s->layer[k], c, r, "degenerate");
            else
                printf("%5d  %16s  %16s  %7.3fx\n", s->layer[k], c, r, s->ratio[k]);
        }
        printf("\n");
    }
    const size_t excluded = s->n_layers - s->n_layers_in_model;
    printf("%-24s %16s  %16s  %8s\n", "", "content response", "RoPE response", "ratio");
    if (s->n_layers_in_model == 0) {
        printf("%-24s %16s  %16s  %s\n", "model mean over layers", "-", "-", "degenerate");
        if (s->n_layers == 0) /* an empty shard: nothing was computed */
            printf("(no items: the shard holds none of the plan's items, so no layer has a response)\n");
        else
            printf("(every layer is degenerate: no item had error, cache and output energy)\n");
    } else {
        num(c, sizeof c, s->model_response_content);
        num(r, sizeof r, s->model_response_rope);
        printf("%-24s %16s  %16s  %7.3fx\n", "model mean over layers", c, r,
               s->model_ratio);
    }
    if (excluded && s->n_layers_in_model) {
        printf("(%zu degenerate layer%s left out of both model means:", excluded,
               excluded > 1 ? "s" : "");
        for (size_t k = 0; k < s->n_layers; k++)
            if (s->degenerate[k])
                printf(" %d", s->layer[k]);
        printf(")\n");
    }
    if (s->n_degenerate)
        printf("(%zu degenerate items flagged and excluded from the means)\n",
               s->n_degenerate);
    print_dispersion(s, per_layer);
    if (verify || s->n_verified) {
        if (s->n_verified) {
            printf("route identity: worst relative residual %.3e over %zu verified "
                   "rows (routes vs full perturbed forward)\n",
                   s->worst_route_residual, s->n_verified);
            if (s->n_verified < s->n_rows)
                printf("(%zu rows not verified: resumed from a run without "
                       "--verify)\n", s->n_rows - s->n_verified);
        } else {
            printf("route identity: no row verified (every item was resumed from "
                   "a run without --verify)\n");
        }
    }
}

int cli_summary_from_responses(const char *path, const int *layers, size_t n_layers,
                               qmla_summary *s)
{
    qmla_results_meta m;
    qmla_response *r = NULL;
    size_t n = 0;
    qmla_error err;
    qmla_error_clear(&err);
    memset(s, 0, sizeof *s);
    if (qmla_results_read(path, &m, &r, &n, &err))
        return -1;
    qmla_results_meta_free(&m);
    const int st = qmla_summary_compute(r, n, s, &err);
    free(r);
    if (st)
        return -1;
    int same = !layers || s->n_layers == n_layers;
    for (size_t k = 0; layers && same && k < n_layers; k++)
        same = s->layer[k] == layers[k];
    if (!same) {
        qmla_summary_free(s);
        return -1;
    }
    return 0;
}
