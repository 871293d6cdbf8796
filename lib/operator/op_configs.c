/* op_configs.c — the directions of `qmla jvp` and `qmla predict`
 * (qmla_op_configs, qmla/predict.h). */
#include "qmla/predict.h"
#include "operator/op_shared.h"

int qmla_op_configs(int sensitivities, const int *bits, size_t nbits, int group,
                    double nu, qmla_op_config *c, size_t *n)
{
    size_t k = 0;
    if (!sensitivities) {
        for (size_t b = 0; b < nbits && b < QMLA_OP_CONFIGS_MAX; b++)
            c[k++] = (qmla_op_config){bits[b], group, nu, 0};
    } else {
        c[k++] = (qmla_op_config){4, group, nu, 0};
        c[k++] = (qmla_op_config){2, group, nu, 1};
        c[k++] = (qmla_op_config){3, group, nu, 1};
        c[k++] = (qmla_op_config){8, group, nu, 1};
        c[k++] = (qmla_op_config){4, group, nu / 10, 1};
        c[k++] = (qmla_op_config){4, group, nu * 10, 1};
        if (group % 2 == 0)
            c[k++] = (qmla_op_config){4, group / 2, nu, 1};
    }
    *n = k;
    return 0;
}

qmla_op_opts qmla_op_opts_make(const qmla_op_config *conf, size_t nconf, int sensitivities,
                               int threads, int force, const qmla_engine *engine,
                               const char *command_line, qmla_progress_fn progress,
                               void *progress_ctx)
{
    const qmla_op_opts o = {.conf = conf, .nconf = nconf, .sensitivities = sensitivities,
                            .threads = threads, .force = force, .command_line = command_line,
                            .progress = progress, .progress_ctx = progress_ctx,
                            .engine = engine};
    return o;
}

qmla_sweep_params qmla_op_config_sweep(const qmla_op_config *c)
{
    qmla_sweep_params sp = qmla_sweep_defaults();
    sp.quant.bits = c->bits;
    sp.quant.group = c->group;
    sp.nmse = c->nmse;
    return sp;
}
