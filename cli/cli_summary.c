/* cli_summary.c — the sweep's summary table on stdout (qmla sweep, and any
 * command that shows a results file): per-layer responses with -v, the
 * model means over the non-degenerate layers, the route-identity check. */
#include "cli.h"
#include "qmla/sweep.h"

#include <math.h>
#include <stdio.h>

static void num(char *buf, size_t len, double v)
{
    if (isfinite(v))
        snprintf(buf, len, "%.6g", v);
    else
        snprintf(buf, len, "-");
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
