/* engine.c — the accessors of the engine record (qmla/engine.h): each
 * returns one table of the engine, NULL meaning the CPU engine. The
 * tables' types are completed in their areas' headers; here they stay
 * incomplete, so this file includes nothing above lib/core. The engines
 * and qmla_engine_cpu/qmla_engine_find are in lib/driver/engines.c. */
#include "core/engine_int.h"

#include <stddef.h>

static const struct qmla_engine *resolve(const qmla_engine *e)
{
    return e ? e : qmla_engine_cpu();
}

const char *qmla_engine_name(const qmla_engine *e) { return resolve(e)->name; }
const char *qmla_engine_device(const qmla_engine *e)
{
    const struct qmla_engine *r = resolve(e);
    return r->device ? r->device() : NULL;
}
const char *qmla_engine_mode(const qmla_engine *e)
{
    const struct qmla_engine *r = resolve(e);
    const char *m = r->mode ? r->mode() : NULL;
    return m ? m : "";
}
const struct qmla_attn_ops *qmla_engine_attn(const qmla_engine *e) { return resolve(e)->attn; }
const struct qmla_quant_ops *qmla_engine_quant(const qmla_engine *e) { return resolve(e)->quant; }
const struct qmla_sweep_ops *qmla_engine_sweep(const qmla_engine *e) { return resolve(e)->sweep; }
const struct qmla_jvp_ops *qmla_engine_jvp(const qmla_engine *e) { return resolve(e)->jvp; }
const struct qmla_op_ops *qmla_engine_op(const qmla_engine *e) { return resolve(e)->op; }
const struct qmla_iv_ops *qmla_engine_iv(const qmla_engine *e) { return resolve(e)->iv; }
const struct qmla_learn_ops *qmla_engine_learn(const qmla_engine *e) { return resolve(e)->learn; }
const struct qmla_tfeval_ops *qmla_engine_tfeval(const qmla_engine *e) { return resolve(e)->tfeval; }
