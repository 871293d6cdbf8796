/* qmla/job.h — every analysis driver of the library behind one small,
 * string-keyed interface, for bindings that should not copy C struct
 * layouts (python/qmla, docs/python.md):
 *
 *   qmla_job *j;
 *   qmla_job_new("learn", &j, &err);
 *   qmla_job_set(j, "input", "data/tiny-mla-default.h5", &err);
 *   qmla_job_set(j, "output", "qm.h5", &err);
 *   qmla_job_set(j, "train-cells", "prose-s0", &err);
 *   qmla_job_run(j, NULL, NULL, &err);        // qmla_learn_run
 *   qmla_job_value(j, "n_layers");
 *   qmla_job_free(j);
 *
 * Drivers and what they run: sweep (qmla_sweep_run), jvp and predict
 * (qmla_op_run_points), intervene (qmla_intervene_run), learn
 * (qmla_learn_run), eval (qmla_tf_eval_run), capture (qmla_capture_native),
 * ppl (qmla_ppl_run), allocate (qmla_alloc_run). Keys are the long options of the `qmla` command of
 * the same name (qmla COMMAND --help), with the same values and ranges, plus
 * "input" (the capture, or the model directory of capture and ppl) and
 * "output" (-o). A flag (force, verify, balance, no-pre, transforms-only)
 * takes "1" or "0". Repeatable options (eval's and ppl's transforms,
 * capture's corpus, ppl's text) are set once per value. So a job writes
 * the file its command writes for the same options. */
#ifndef QMLA_JOB_H
#define QMLA_JOB_H

#include <stddef.h>

#include "qmla/exec.h"
#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qmla_job qmla_job;

/* QMLA_EINVAL naming the drivers for an unknown one. */
int qmla_job_new(const char *driver, qmla_job **out, qmla_error *err);
void qmla_job_free(qmla_job *j);
/* QMLA_EINVAL naming the driver's keys for an unknown key; values are
 * checked when the job runs. */
int qmla_job_set(qmla_job *j, const char *key, const char *value, qmla_error *err);
/* Run the driver. progress (may be NULL) is the driver's: called with the
 * items (sequences; learning: steps) done; non-zero stops the run cleanly
 * (qmla_job_stopped then returns 1 and the status is QMLA_EINVAL). */
int qmla_job_run(qmla_job *j, qmla_progress_fn progress, void *ctx, qmla_error *err);
int qmla_job_stopped(const qmla_job *j);
/* Numbers of the run's summary by name (NaN when absent); name NULL or ""
 * gives the count. qmla_job_value_name(j, k) is the k-th name. */
double qmla_job_value(const qmla_job *j, const char *name);
size_t qmla_job_n_values(const qmla_job *j);
const char *qmla_job_value_name(const qmla_job *j, size_t k);

#ifdef __cplusplus
}
#endif
#endif
