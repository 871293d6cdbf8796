/* core/engine_int.h — private to the library: the engine record behind the
 * opaque qmla_engine (qmla/engine.h). It points at each area's operations
 * table through incomplete struct types, so lib/core includes nothing of
 * the areas above it; each area's header completes its own type. The
 * engines themselves are defined in lib/driver/ (engines.c). */
#ifndef QMLA_CORE_ENGINE_INT_H
#define QMLA_CORE_ENGINE_INT_H

#include "qmla/engine.h"

struct qmla_attn_ops;
struct qmla_quant_ops;
struct qmla_sweep_ops;
struct qmla_jvp_ops;
struct qmla_op_ops;
struct qmla_iv_ops;
struct qmla_learn_ops;
struct qmla_tfeval_ops;

struct qmla_engine {
    const char *name;
    /* The device this engine runs on, as "NAME (sm_XY, N GiB)", or NULL
     * when it has none usable; NULL function: no device (the CPU engine). */
    const char *(*device)(void);
    const struct qmla_attn_ops *attn;
    const struct qmla_quant_ops *quant;
    const struct qmla_sweep_ops *sweep;
    const struct qmla_jvp_ops *jvp;
    const struct qmla_op_ops *op;
    const struct qmla_iv_ops *iv;
    const struct qmla_learn_ops *learn;
    const struct qmla_tfeval_ops *tfeval;
    /* The arithmetic mode (qmla_engine_mode); NULL function: "" (the
     * defaults, the CPU engine). Last, so tables that leave it out get
     * NULL. */
    const char *(*mode)(void);
};

#endif
