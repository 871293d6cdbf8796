/* qmla/engine.h — the analysis engine: which implementation runs the
 * per-sequence computations of the analysis drivers (docs/architecture.md,
 * "The engine seam").
 *
 * An engine is an opaque, immutable handle. It holds one operations table
 * per area that has per-sequence work; each area declares its own table
 * type and accessor in its own header:
 *   qmla_attn_ops    qmla_engine_attn    (qmla/attention.h) the clean pass
 *   qmla_quant_ops   qmla_engine_quant   (qmla/quant.h)     QDQ
 *   qmla_sweep_ops   qmla_engine_sweep   (qmla/sweep.h)     one sequence of the sweep
 *   qmla_jvp_ops     qmla_engine_jvp     (qmla/jvp.h)       JVPs, sensitivities
 *   qmla_op_ops      qmla_engine_op      (qmla/predict.h)   gains, predictors
 *   qmla_iv_ops      qmla_engine_iv      (qmla/intervene.h) controls, joint path
 *   qmla_learn_ops   qmla_engine_learn   (qmla/learn.h)     the learner
 *   qmla_tfeval_ops  qmla_engine_tfeval  (qmla/tfeval.h)    effective-cache cell
 * Every accessor takes NULL for the CPU engine. The drivers (qmla_sweep_run,
 * qmla_op_run, qmla_intervene_run, qmla_learn_run, qmla_tf_eval_run) take
 * the engine in their options (`engine`, NULL = CPU) and call every
 * per-sequence operation, and the workspace it needs, through these
 * tables; they never name a CPU function for that work.
 *
 * Workspaces belong to the engine: each table with a workspace has
 * ws_alloc (from the dims and T_max, returning an opaque pointer) and
 * ws_free, so a device engine keeps device buffers there. The CPU engine's
 * workspaces are today's structs (qmla_sweep_ws, qmla_op_ws, ...) and its
 * operations are today's functions, so its numbers are those of the direct
 * calls bit for bit.
 *
 * How a CUDA engine plugs in: a file of lib/driver/ (or kernels/, built
 * with CUDA) defines its tables — ws_alloc allocating device memory (and
 * pinned host staging), `sequence` copying the inputs, launching, and
 * copying the results back into the same output structs — and a
 * `struct qmla_engine` (lib/core/engine_int.h) named "cuda" pointing at
 * them; lib/driver/engines.c adds it to the list qmla_engine_find searches
 * (under the build's CUDA option). A table entry may point at the CPU
 * function where the engine has nothing faster. No driver changes. */
#ifndef QMLA_ENGINE_H
#define QMLA_ENGINE_H

#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qmla_engine qmla_engine;

/* The CPU engine (today's functions). */
const qmla_engine *qmla_engine_cpu(void);

/* The engine of that name ("cpu", and "cuda" in a build with CUDA) into
 * *e; "auto" is the CUDA engine when the build has it and a device is
 * usable (qmla_engine_device non-NULL), else the CPU engine; "cuda:N" is
 * "cuda" on device N (qmla_engine_select_device). Any other
 * name (including "cuda" in a build without it) is QMLA_EINVAL with a
 * message naming the engines this build has. "cuda" where its
 * device is not usable on this machine is QMLA_EINVAL saying why; so is
 * "auto" when the device asked for by QMLA_CUDA_DEVICE is malformed or out
 * of range (auto chooses the CPU only when no usable device is present). */
int qmla_engine_find(const char *name, const qmla_engine **e, qmla_error *err);

/* Its name ("cpu"); NULL is the CPU engine. */
const char *qmla_engine_name(const qmla_engine *e);

/* The device the engine runs on ("NVIDIA H200 (sm_90, 139.8 GiB), device 0
 * of 1 (default)": name, ordinal, count and the rule that chose it, then
 * the engine's result-changing switches, "; GEMMs 3xtf32" ...), or
 * NULL for the CPU engine and for a device engine with no usable device.
 * Results files record it as the attribute engine_device. Its length is
 * below QMLA_ENGINE_DEVICE_MAX (NUL included; every buffer that holds one
 * device string, the results' engine_device and the part headers', has
 * that size). The string is immutable: it stays valid for the process. */
const char *qmla_engine_device(const qmla_engine *e);
#define QMLA_ENGINE_DEVICE_MAX 512

/* The engine's arithmetic mode: "" for the defaults (float32 as the CPU
 * engine computes; the CPU engine's is always ""), else the switches that
 * change results in their last digits ("GEMMs 3xtf32; query tile <= 128").
 * Resume journals record it with each engine mark and refuse to resume
 * records of another mode (a results file is one mode's). Immutable, valid
 * for the process; below QMLA_ENGINE_DEVICE_MAX bytes. */
const char *qmla_engine_mode(const qmla_engine *e);

/* Choose the device of a device engine for the rest of the process, before
 * any work: device >= 0 is the CUDA ordinal (the CLI's --device N and
 * --engine cuda:N), -1 the default rules (QMLA_CUDA_DEVICE, else the
 * node-local MPI/Slurm rank mod the device count, else 0;
 * docs/cuda-engine.md "Several GPUs"). QMLA_EINVAL for the CPU engine
 * (device >= 0: it has no devices) and, naming the index asked for and the
 * count found, when the device is not usable. */
int qmla_engine_select_device(const qmla_engine *e, int device, qmla_error *err);

/* The full check of the engine's device (for "cuda": its context made and
 * this build's kernels run on it), after the last qmla_engine_select_device:
 * QMLA_EINVAL saying why when it is not usable; QMLA_OK for the CPU engine.
 * qmla_engine_find checks a named device engine without making a context
 * (so a later select on another device leaves none on the first); the CLI
 * calls this once its options are read, before any work. */
int qmla_engine_ready(const qmla_engine *e, qmla_error *err);

/* The device ordinal the engine runs on, -1 for none (the CPU engine). */
int qmla_engine_device_index(const qmla_engine *e);

/* The names of this build's engines, comma separated ("cpu" or "cpu,cuda"). */
const char *qmla_engine_names(void);

#ifdef __cplusplus
}
#endif
#endif
