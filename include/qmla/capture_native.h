/* qmla/capture_native.h — a qmla-capture v1 file (docs/capture-format.md)
 * from the native engine (qmla/model.h) instead of transformers: `qmla
 * capture`, the C twin of experiments/capture/qmla_capture.py for
 * checkpoints the engine runs (byte tokenizer, qmla_tokenizer.json).
 *
 * Same windows as the Python tool: per cell (corpus, seed) `seqs` windows
 * of `tokens` tokens, BOS first, at the offsets of qmla_sample_windows
 * (qmla/pyrandom.h: random.Random(seed).randint, sorted). The text is read
 * as Python's open(..., encoding="utf-8") reads it (universal newlines:
 * \r\n and \r become \n; invalid UTF-8 is refused) and tokenized as its
 * UTF-8 bytes.
 *
 * Per selected layer: the weights (w_uk, w_uv, w_o, kv_norm_weight), and per
 * cell c_kv, k_rope, q_nope, q_rope, attn_out (after o_proj), positions
 * (0..T-1), with_pre: k_rope_pre, q_rope_pre, rope_cos, rope_sin (hidden_in
 * is not written: the capture writer has no field for it). Compute float32 (each sequence single-threaded, sequences in
 * parallel: the file does not depend on the thread count). Before a cell of
 * a layer is written, its attention is recomputed from the tensors as
 * stored (float16-rounded when float16) and must reproduce attn_out within
 * check_tol (default 5e-3 with float16 storage, 1e-5 with float32, as the
 * Python tool's default_check_tolerance for float32 compute), else
 * QMLA_EFORMAT naming layer and cell and nothing is written. The file is
 * written atomically (qmla_capture_writer_*). */
#ifndef QMLA_CAPTURE_NATIVE_H
#define QMLA_CAPTURE_NATIVE_H

#include <stddef.h>
#include <stdint.h>

#include "qmla/model.h"
#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qmla_native_corpus {
    const char *name;      /* cell names are <name>-s<seed> */
    const char *path;      /* for messages */
    const uint8_t *bytes;  /* the text after qmla_text_as_python */
    size_t n;
} qmla_native_corpus;

typedef struct qmla_native_cell {
    size_t corpus;         /* index into corpora */
    uint64_t seed;
} qmla_native_cell;

/* Progress: kind 0 = one sequence of cell `cell` done (done of total), kind 1
 * = layer `layer` of the cell checked and written (rel_err, tol), kind 2 =
 * resuming: `done` of `total` windows restored from the journal (once,
 * before any work; cell_name ""). A non-zero
 * return interrupts: no capture is written (finished windows stay in the
 * journal when there is one), *stopped = 1, QMLA_OK. */
typedef struct qmla_native_event {
    int kind;
    size_t cell, done, total;
    const char *cell_name;
    int layer;
    size_t N, T;
    double rel_err, tol;
} qmla_native_event;

typedef struct qmla_native_capture_opts {
    const char *model_dir;
    const char *model_name;   /* root attribute model */
    const qmla_native_corpus *corpora;
    size_t n_corpora;
    const qmla_native_cell *cells;
    size_t n_cells;
    size_t seqs, tokens;
    const int *layers;        /* ascending, NULL = all */
    size_t n_layers;
    int float16, gzip, with_pre;
    int threads;
    double check_tol;         /* 0: default */
    int (*progress)(void *ctx, const qmla_native_event *ev);
    void *progress_ctx;
    size_t *offsets_out;      /* optional [n_cells * seqs]: the window offsets */
    double *worst_out;        /* optional: largest recompute error */
    int *stopped;             /* optional: set to 1 when progress interrupted */
    /* Resume (optional): finished windows are kept in the journal `journal`
     * (kind "capture", one record per window) and their tensors in
     * `journal`.data (raw float32, checksummed per window); a rerun with the
     * same resume key (the model directory's files by name, size and mtime,
     * the corpora's bytes, cells, seqs, tokens, layers, with_pre) restores
     * them instead of recomputing; both files are removed once the capture
     * is written. A journal of another key: QMLA_EMISMATCH unless
     * journal_force (restart). NULL: no journal (nothing kept). */
    const char *journal;
    int journal_force;
    size_t *resumed_out;      /* optional: windows restored from the journal */
} qmla_native_capture_opts;

/* The byte tokenizer of MODEL_DIR/qmla_tokenizer.json ({"type": "bytes",
 * "bos_id": B}): *bos = B. QMLA_EIO when the file is missing (the native
 * capture knows no other tokenizer), QMLA_EFORMAT naming the key otherwise. */
int qmla_byte_tokenizer_load(const char *model_dir, int *bos, qmla_error *err);

/* In place: what Python's text-mode UTF-8 read followed by .encode("utf-8")
 * gives: \r\n and lone \r become \n; invalid UTF-8 (overlong forms,
 * surrogates, beyond U+10FFFF, truncated sequences) is QMLA_EFORMAT naming
 * `label` and the byte offset. *n is updated. */
int qmla_text_as_python(uint8_t *buf, size_t *n, const char *label, qmla_error *err);

/* The assembly of a capture's corpora and cells, shared by `qmla capture`
 * and the job driver "capture" (qmla/job.h); each caller words its own
 * messages.
 * qmla_native_corpus_arg: "NAME=FILE" -> name (NUL-terminated, shorter than
 * cap bytes, no '/') and *path (into arg); -1 when it is not of that form.
 * qmla_native_cells_repeat: the first index a whose (corpus, seed) an
 * earlier cell has, or n when none repeats.
 * qmla_native_corpora_read: the corpora some cell uses read whole (gzip or
 * plain, qmla_text_read) and made what Python reads (qmla_text_as_python);
 * corp[i].bytes and .n point into bufs[i] (the caller frees each). On a
 * failure: the status, err without the corpus named, *failed its index and
 * *decoding 0 when reading it failed, 1 when its text was refused. */
int qmla_native_corpus_arg(const char *arg, char *name, size_t cap, const char **path);
size_t qmla_native_cells_repeat(const qmla_native_cell *cells, size_t n);
int qmla_native_corpora_read(qmla_native_corpus *corp, size_t n_corpora,
                             const qmla_native_cell *cells, size_t n_cells, uint8_t **bufs,
                             size_t *failed, int *decoding, qmla_error *err);

int qmla_capture_native(const qmla_model *m, const char *path,
                        const qmla_native_capture_opts *o, qmla_error *err);

#ifdef __cplusplus
}
#endif
#endif
