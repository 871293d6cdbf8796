/* qmla/exec.h — how library computations run: the execution context passed
 * to every parallel routine (today the CPU thread count; the coming GPU
 * engine adds its device and stream here), and the one process-wide BLAS
 * setting, which the program makes once at start-up. */
#ifndef QMLA_EXEC_H
#define QMLA_EXEC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qmla_exec {
    int threads; /* OpenMP threads for qmla's loops (< 1 means 1) */
} qmla_exec;

/* Record that a computation runs with `threads` threads (the provenance's
 * `threads`: the largest count noted in this process). */
void qmla_exec_note_threads(int threads);
/* The largest thread count any computation of this process ran with (1
 * when none ran). */
int qmla_exec_threads_used(void);

static inline qmla_exec qmla_exec_cpu(int threads)
{
    qmla_exec e;
    e.threads = threads < 1 ? 1 : threads;
    qmla_exec_note_threads(e.threads);
    return e;
}

static inline int qmla_exec_threads(const qmla_exec *ex)
{
    return ex && ex->threads > 1 ? ex->threads : 1;
}

/* Progress of a long computation: called after each finished item with the
 * items done so far (of total; `resumed` of them were already complete from
 * an earlier run); a non-zero return asks the computation to stop cleanly.
 * Each routine that takes one says from which thread it calls it. */
typedef int (*qmla_progress_fn)(void *ctx, size_t done, size_t total, size_t resumed);

/* Threads of each BLAS call (OpenBLAS). qmla parallelises its own loops and
 * calls BLAS from inside them, so programs set 1 once, before any work:
 * results are then bit-identical for every qmla thread count. */
void qmla_blas_set_threads(int threads);
/* The BLAS library and the core it dispatches to, as OpenBLAS describes
 * itself ("OpenBLAS 0.3.20 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64");
 * the provenance's `blas`. */
const char *qmla_blas_info(void);

/* Seconds on the monotonic clock (elapsed-time figures and progress). */
double qmla_monotonic_s(void);

#ifdef __cplusplus
}
#endif
#endif
