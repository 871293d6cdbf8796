/* summary_print.c — the Table-4-style summary that `qmla sweep` prints after
 * a sweep and `qmla show` prints from a results file: per-layer content and
 * RoPE responses with their ratio, then the model-level means. One printer,
 * so the two commands print the same table. */
#include "cli.h"

void cli_summary_print(FILE *f, const qmla_summary *s, int per_layer)
{
    if (per_layer) {
        fprintf(f, "%5s  %16s  %16s  %8s\n", "layer", "content R_C", "RoPE R_P", "R_P/R_C");
        for (size_t k = 0; k < s->n_layers; k++)
            fprintf(f, "%5d  %16.6g  %16.6g  %7.3fx\n", s->layer[k], s->response_content[k],
                    s->response_rope[k], s->ratio[k]);
        fprintf(f, "\n");
    }
    fprintf(f, "%-24s %16s  %16s  %8s\n", "", "content response", "RoPE response", "ratio");
    fprintf(f, "%-24s %16.6g  %16.6g  %7.3fx\n", "model mean over layers",
            s->model_response_content, s->model_response_rope, s->model_ratio);
}
