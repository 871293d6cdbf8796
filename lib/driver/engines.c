/* engines.c — the engines of this build (qmla/engine.h): the CPU engine,
 * whose tables point at today's functions (so its numbers are those of the
 * direct calls, bit for bit), and the list qmla_engine_find searches. The
 * top area defines them because the tables name functions of every area;
 * the record type is core/engine_int.h. A CUDA engine is one more record
 * here (see qmla/engine.h). */
#include "core/engine_int.h"
#include "qmla/attention.h"
#include "qmla/intervene.h"
#include "qmla/jvp.h"
#include "qmla/learn.h"
#include "qmla/predict.h"
#include "qmla/quant.h"
#include "qmla/sweep.h"
#include "qmla/tfeval.h"
#include "qmla_config.h"

#if QMLA_HAVE_CUDA_ENGINE
#include "driver/engine_cuda.h"
#endif

#include <stdlib.h>
#include <string.h>

/* ---- workspaces: today's structs behind the engine's opaque pointer ---- */

static int cpu_sweep_ws_alloc(const qmla_mla_dims *d, size_t T_max, int verify, void **ws,
                              qmla_error *err)
{
    qmla_sweep_ws *w = calloc(1, sizeof *w);
    *ws = NULL;
    if (!w)
        return qmla_error_set(err, QMLA_ENOMEM, "sweep: out of memory");
    const int st = qmla_sweep_ws_alloc(d, T_max, verify, w, err);
    if (st) {
        free(w);
        return st;
    }
    *ws = w;
    return QMLA_OK;
}

static void cpu_sweep_ws_free(void *ws)
{
    if (ws) {
        qmla_sweep_ws_free(ws);
        free(ws);
    }
}

static int cpu_sweep_sequence(const qmla_exec *ex, const qmla_sweep_params *p,
                              const qmla_mla_dims *d, size_t T, const qmla_mla_weights *w,
                              const float *q_nope, const float *q_rope, const float *C,
                              const float *K, int verify, void *ws, qmla_response out[2],
                              qmla_error *err)
{
    return qmla_sweep_sequence(ex, p, d, T, w, q_nope, q_rope, C, K, verify, ws, out, err);
}

static int cpu_op_ws_alloc(const qmla_mla_dims *d, size_t T_max, int with_sens, int threads,
                           void **ws, qmla_error *err)
{
    qmla_op_ws *w = calloc(1, sizeof *w);
    *ws = NULL;
    if (!w)
        return qmla_error_set(err, QMLA_ENOMEM, "operator: out of memory");
    const int st = qmla_op_ws_alloc(d, T_max, with_sens, threads, w, err);
    if (st) {
        free(w);
        return st;
    }
    *ws = w;
    return QMLA_OK;
}

static void cpu_op_ws_free(void *ws)
{
    if (ws) {
        qmla_op_ws_free(ws);
        free(ws);
    }
}

static int cpu_op_layer_alloc(const qmla_exec *ex, const qmla_mla_dims *d,
                              const qmla_mla_weights *w, void **layer, qmla_error *err)
{
    qmla_sens_layer *L = calloc(1, sizeof *L);
    *layer = NULL;
    if (!L)
        return qmla_error_set(err, QMLA_ENOMEM, "operator: out of memory");
    const int st = qmla_sens_layer_init(ex, d, w, L, err);
    if (st) {
        qmla_sens_layer_free(L);
        free(L);
        return st;
    }
    *layer = L;
    return QMLA_OK;
}

static void cpu_op_layer_free(void *layer)
{
    if (layer) {
        qmla_sens_layer_free(layer);
        free(layer);
    }
}

static int cpu_op_sequence(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                           const qmla_mla_weights *w, const void *layer,
                           const float *q_nope, const float *q_rope, const float *C,
                           const float *K, const qmla_op_config *conf, size_t nconf,
                           void *ws, qmla_op_point *pts, double *alloc, double *sigma,
                           qmla_error *err)
{
    return qmla_op_sequence(ex, d, T, w, layer, q_nope, q_rope, C, K, conf, nconf, ws, pts,
                            alloc, sigma, err);
}

static int cpu_iv_ws_alloc(const qmla_mla_dims *d, size_t T_max, int threads, void **ws,
                           qmla_error *err)
{
    return cpu_op_ws_alloc(d, T_max, 0, threads, ws, err);
}

static int cpu_iv_sequence(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                           const qmla_mla_weights *w, const float *q_nope,
                           const float *q_rope, const float *C, const float *K,
                           const qmla_sweep_params *p, size_t reps, uint64_t seed, void *ws,
                           qmla_iv_item *out, double *ratio, qmla_error *err)
{
    return qmla_intervene_sequence(ex, d, T, w, q_nope, q_rope, C, K, p, reps, seed, ws, out,
                                   ratio, err);
}

static int cpu_learn_alloc(qmla_learn_path path, const qmla_mla_dims *d,
                           const qmla_mla_weights *w, const float *gamma,
                           qmla_rope_pairing pairing, const qmla_learn_bank *train,
                           const qmla_learn_bank *held, const qmla_learn_opts *o,
                           void **learner, qmla_error *err)
{
    qmla_learner *l = NULL;
    const int st = qmla_learner_alloc(path, d, w, gamma, pairing, train, held, o, &l, err);
    *learner = l;
    return st;
}

static void cpu_learn_free(void *l) { qmla_learner_free(l); }
static int cpu_learn_init(void *l, double *alpha, qmla_error *err)
{
    return qmla_learner_init(l, alpha, err);
}
static int cpu_learn_iterate(void *l, qmla_error *err) { return qmla_learner_iterate(l, err); }
static int cpu_learn_finish(void *l, qmla_error *err) { return qmla_learner_finish(l, err); }
static int cpu_learn_get(void *l, qmla_transform *t, qmla_error *err)
{
    return qmla_learner_get(l, t, err);
}
static qmla_learn_state cpu_learn_state(const void *l) { return qmla_learner_state(l); }

/* ---- the CPU engine ---------------------------------------------------- */

static const qmla_attn_ops cpu_attn = {qmla_attn_state_forward};
static const qmla_quant_ops cpu_quant = {qmla_quant_qdq};
static const qmla_sweep_ops cpu_sweep = {cpu_sweep_ws_alloc, qmla_sweep_ws_bytes,
                                         cpu_sweep_ws_free, cpu_sweep_sequence, NULL};
static const qmla_jvp_ops cpu_jvp = {qmla_jvp_apply, qmla_jvp_token, qmla_sens_exact,
                                     qmla_sens_hutchinson};
static const qmla_op_ops cpu_op = {cpu_op_ws_alloc, cpu_op_ws_free, cpu_op_layer_alloc,
                                   cpu_op_layer_free, cpu_op_sequence, NULL};
static const qmla_iv_ops cpu_iv = {cpu_iv_ws_alloc, cpu_op_ws_free, cpu_iv_sequence, NULL};
static const qmla_learn_ops cpu_learn = {cpu_learn_alloc,   cpu_learn_free, cpu_learn_init,
                                         cpu_learn_iterate, cpu_learn_finish, cpu_learn_get,
                                         cpu_learn_state};
static const qmla_tfeval_ops cpu_tfeval = {qmla_tf_eval_cell};

static const qmla_engine engine_cpu = {"cpu",   NULL,     &cpu_attn, &cpu_quant, &cpu_sweep,
                                       &cpu_jvp, &cpu_op,  &cpu_iv,   &cpu_learn, &cpu_tfeval,
                                       NULL};

#if QMLA_HAVE_CUDA_ENGINE
/* ---- the CUDA engine (kernels/engine_cuda.cu) --------------------------
 * On the GPU: the sweep's sequence, QDQ, the operator model's sequence
 * (jvp, predict: responses, JVPs, exact sensitivities), the
 * interventions' sequence, the effective-cache evaluation's attention
 * passes and sums (eval), and the content objective's attention forward
 * and backward inside the CPU learner (learn: the rest of the learner is
 * the CPU's, so its table is the CPU's but for alloc). The JVP table keeps
 * the CPU functions (its arguments are the CPU's workspaces; no driver
 * calls it directly: the operator and intervention sequences above run
 * their JVPs on the device); docs/cuda-engine.md lists which run where. */
static const qmla_learn_ops cuda_learn = {qmla_cuda_learn_alloc, cpu_learn_free, cpu_learn_init,
                                          cpu_learn_iterate,     cpu_learn_finish,
                                          cpu_learn_get,         cpu_learn_state};
static const qmla_tfeval_ops cuda_tfeval = {qmla_cuda_tf_eval_cell};
static const qmla_engine engine_cuda = {"cuda",   qmla_cuda_engine_device, &cpu_attn,
                                        &qmla_cuda_quant_ops, &qmla_cuda_sweep_ops,
                                        &cpu_jvp, &qmla_cuda_op_ops, &qmla_cuda_iv_ops,
                                        &cuda_learn, &cuda_tfeval,
                                        qmla_cuda_engine_mode};
#endif

/* NULL-terminated. */
static const qmla_engine *const engines[] = {&engine_cpu,
#if QMLA_HAVE_CUDA_ENGINE
                                             &engine_cuda,
#endif
                                             NULL};

const qmla_engine *qmla_engine_cpu(void) { return &engine_cpu; }

/* Why a device engine has no usable device. */
static const char *engine_unusable(const qmla_engine *e)
{
#if QMLA_HAVE_CUDA_ENGINE
    if (e == &engine_cuda)
        return qmla_cuda_engine_unusable();
#endif
    (void)e;
    return "no device";
}

const char *qmla_engine_names(void) { return QMLA_HAVE_CUDA_ENGINE ? "cpu,cuda" : "cpu"; }

/* The device check of qmla_engine_find: for "cuda" the light probe (no
 * context: a later --device N must not leave one on device 0), for any
 * other device engine its device(). */
static const char *device_light(const qmla_engine *e)
{
#if QMLA_HAVE_CUDA_ENGINE
    if (e == &engine_cuda)
        return qmla_cuda_engine_device_light();
#endif
    return e->device();
}

int qmla_engine_ready(const qmla_engine *e, qmla_error *err)
{
    if (!e || !e->device)
        return QMLA_OK;
    if (!e->device())
        return qmla_error_set(err, QMLA_EINVAL, "engine \"%s\": %s", e->name,
                              engine_unusable(e));
    return QMLA_OK;
}

int qmla_engine_select_device(const qmla_engine *e, int device, qmla_error *err)
{
    const qmla_engine *r = e ? e : &engine_cpu;
#if QMLA_HAVE_CUDA_ENGINE
    if (r == &engine_cuda) {
        qmla_cuda_engine_select(device);
        if (!qmla_cuda_engine_device())
            return qmla_error_set(err, QMLA_EINVAL, "engine \"cuda\": %s",
                                  qmla_cuda_engine_unusable());
        return QMLA_OK;
    }
#endif
    if (device < 0)
        return QMLA_OK;
    return qmla_error_set(err, QMLA_EINVAL, "engine \"%s\" has no devices: device %d asked "
                          "for (a device is chosen only with --engine cuda)", r->name, device);
}

int qmla_engine_device_index(const qmla_engine *e)
{
#if QMLA_HAVE_CUDA_ENGINE
    if (e == &engine_cuda)
        return qmla_cuda_engine_device_index();
#endif
    (void)e;
    return -1;
}

int qmla_engine_find(const char *name, const qmla_engine **e, qmla_error *err)
{
    *e = NULL;
    /* "cuda:N": the engine "cuda" on device N */
    const char *colon = name ? strchr(name, ':') : NULL;
    if (colon) {
        char base[32], *end = NULL;
        const size_t nb = (size_t)(colon - name);
        const long dev = strtol(colon + 1, &end, 10);
        if (nb == 0 || nb >= sizeof base || !colon[1] || *end || dev < 0 || dev > 1000000)
            return qmla_error_set(err, QMLA_EINVAL, "engine \"%s\": expected NAME or "
                                  "NAME:DEVICE (e.g. cuda:1)", name);
        memcpy(base, name, nb);
        base[nb] = '\0';
        if (!strcmp(base, "auto"))
            return qmla_error_set(err, QMLA_EINVAL, "engine \"%s\": auto takes no device",
                                  name);
        const qmla_engine *b = NULL;
        for (size_t k = 0; engines[k]; k++)
            if (!strcmp(base, engines[k]->name))
                b = engines[k];
        if (!b)
            return qmla_error_set(err, QMLA_EINVAL, "engine \"%s\": not in this build, which "
                                  "has the engines: %s (or auto)", base, qmla_engine_names());
        int st = qmla_engine_select_device(b, (int)dev, err);
        if (st)
            return st;
        *e = b;
        return QMLA_OK;
    }
    if (name && !strcmp(name, "auto")) {
        /* the first device engine with a usable device, else the CPU; a
         * device asked for explicitly (QMLA_CUDA_DEVICE) that is malformed
         * or out of range is an error, not a silent fall back (run 11) */
        for (size_t k = 1; engines[k]; k++)
            if (engines[k]->device && engines[k]->device()) {
                *e = engines[k];
                return QMLA_OK;
            }
#if QMLA_HAVE_CUDA_ENGINE
        if (qmla_cuda_engine_unusable_explicit())
            return qmla_error_set(err, QMLA_EINVAL,
                                  "engine \"auto\": %s; auto falls back to the CPU only when "
                                  "no usable CUDA device is present, not when the one asked "
                                  "for does not exist (unset QMLA_CUDA_DEVICE or pass --engine "
                                  "cpu)",
                                  qmla_cuda_engine_unusable());
#endif
        *e = &engine_cpu;
        return QMLA_OK;
    }
    for (size_t k = 0; name && engines[k]; k++)
        if (!strcmp(name, engines[k]->name)) {
            if (engines[k]->device && !device_light(engines[k]))
                return qmla_error_set(err, QMLA_EINVAL,
                                      "engine \"%s\": no usable device on this machine (%s); "
                                      "--engine auto falls back to the CPU",
                                      name, engine_unusable(engines[k]));
            *e = engines[k];
            return QMLA_OK;
        }
    return qmla_error_set(err, QMLA_EINVAL,
                          "engine \"%s\": not in this build, which has the engines: %s (or auto)",
                          name ? name : "(none)", qmla_engine_names());
}
