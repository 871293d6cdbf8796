/* qmla/ppl.h — the ppl driver (`qmla ppl`): bits per byte of a checkpoint
 * over texts for every (text, policy, config) and transforms file, scored
 * group by group (the configurations of one text and model variant
 * together, qmla_model_ppl_multi_progress), then groups /ppl and /ppl_table
 * of a results file (qmla_ppl_save). Resumable: with a journal, every
 * finished window's NLL sums are kept (kind "ppl", docs/results-format.md
 * "Resume journals") and a rerun scores only the missing windows, with
 * results bit for bit those of an uninterrupted run. With a KL reference
 * (opts kl_ref), every row also has its KL divergence from it. */
#ifndef QMLA_PPL_H
#define QMLA_PPL_H

#include <stddef.h>

#include "qmla/exec.h"
#include "qmla/model.h"
#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QMLA_PPL_MAX 16 /* texts, and transforms files, of one run */

enum {
    QMLA_PPL_NOTE = 0,        /* line: a note (model loaded, transforms folded) */
    QMLA_PPL_TABLE = 1,       /* every model is loaded: the table begins (line: the
                                 KL reference, "" when none) */
    QMLA_PPL_GROUP_BEGIN = 2, /* line: the group's label ("ppl TEXT[ + METHOD]") */
    QMLA_PPL_GROUP_END = 3    /* rows [n_rows] of the group, seconds it took */
};

typedef struct qmla_ppl_event {
    int kind;
    const char *line;
    const qmla_ppl_row *rows;
    size_t n_rows;
    double seconds;
} qmla_ppl_event;

typedef struct qmla_ppl_run_opts {
    const char *const *texts;      /* files, gzip or plain (1..QMLA_PPL_MAX) */
    size_t n_texts;
    const char *configs;           /* comma list (default "bf16") */
    const char *policies;          /* comma list (default "none") */
    const char *const *transforms; /* transforms files (0..QMLA_PPL_MAX) */
    size_t n_transforms;
    int transforms_only;           /* only the transforms files' rows */
    size_t tokens;                 /* score ceil(tokens/context) windows; 0: all */
    size_t context;                /* window (default 512) */
    int threads;
    const char *command_line;      /* recorded (may be NULL) */
    /* windows done of the current group (of total; restored ones counted,
     * and passed as `resumed`); non-zero stops the run before the results
     * are written (the finished windows stay in the journal) */
    qmla_progress_fn progress;
    void *progress_ctx;
    /* polled (with progress_ctx) after every group and before the write:
     * non-zero stops the run as progress does (may be NULL) */
    int (*should_stop)(void *ctx);
    void (*event)(void *ctx, const qmla_ppl_event *ev); /* may be NULL */
    void *event_ctx;
    /* the resume journal (`qmla ppl`: RESULTS.h5.journal; NULL: none, an
     * interrupted run keeps nothing): finished windows are restored from it
     * and appended to it; removed once the results are written. A journal
     * of other inputs or options: QMLA_EMISMATCH naming it, unless `force`,
     * which starts it over. */
    const char *journal;
    int force;
    /* the KL reference (`--kl-ref`): "fp32" or "bf16" (scored in every
     * group's windows; a row only when --config holds it), "none", or NULL:
     * fp32 when a configuration is quantized, else none. Every row then has
     * its KL from the reference (qmla_model_ppl_kl; the reference of a
     * transforms group is scored with that group's folded weights) */
    const char *kl_ref;
} qmla_ppl_run_opts;

qmla_ppl_run_opts qmla_ppl_run_defaults(void);

typedef struct qmla_ppl_run_result {
    size_t n_rows;
    qmla_ppl_row *rows; /* owned; labels and names in the result */
    int stopped;        /* progress asked to stop: no results written (the
                           journal keeps the finished windows) */
    int refusal;        /* the error is a refusal worded for the command line */
    int wrote;
    char labels[QMLA_PPL_MAX + 1][32];
    void *priv;         /* the cache specs the rows point into */
    size_t resumed;       /* windows restored from the journal */
    size_t total_windows; /* windows of every group (with a journal) */
} qmla_ppl_run_result;

int qmla_ppl_run(const char *model_dir, const char *out, const qmla_ppl_run_opts *o,
                 qmla_ppl_run_result *r, qmla_error *err);
void qmla_ppl_run_result_free(qmla_ppl_run_result *r);

#ifdef __cplusplus
}
#endif
#endif
