/* cli/cli_safe.h — the CLI's defences against hostile input and
 * signals: terminal-safe printing of untrusted text (cli_escape.c),
 * SIGINT/SIGTERM handling (cli_signal.c), and the diagnosis of a
 * recomputation that went non-finite (check_diag.c). */
#ifndef QMLA_CLI_SAFE_H
#define QMLA_CLI_SAFE_H

#include <stddef.h>

/* Copy `in` into out[len] with control characters, the backslash, invalid
 * UTF-8 and C1 controls escaped (\x1b, \\, \xff, \u009b); truncated with
 * "..." when it does not fit. Returns out. Use it for every cell name, model
 * name or message that quotes one before printing it. */
const char *cli_esc(const char *in, char *out, size_t len);

/* Install the SIGINT/SIGTERM handler (see cli_signal.c for why without
 * SA_RESTART). cli_interrupted(): the signal number once one arrived, else
 * 0. cli_signal_name(): "SIGINT" / "SIGTERM". */
void cli_signals_install(void);
int cli_interrupted(void);
const char *cli_signal_name(void);
/* The library's progress callback for the resumable commands: ctx is a
 * cli_progress (cli.h); updates the bar and returns nonzero (stop after
 * the current item) once SIGINT/SIGTERM arrived. */
int cli_progress_poll(void *ctx, size_t done, size_t total, size_t resumed);
/* The same without a bar (MPI ranks other than 0): stop once a signal arrived. */
int cli_quiet_poll(void *ctx, size_t done, size_t total, size_t resumed);

/* Where did a float32 recomputation of one sequence go non-finite? Inputs
 * are the stages of the forward pass, token-major as in attention.h:
 * q_lat [T,H,d_c] (absorbed queries), q_rope_t [T,H,d_r], A [T,H,T]
 * (attention), U [T,H,d_c], O [T,H*d_v], Y [T,D]; C [T,d_c], K [T,d_r].
 * Writes into out[len] a sentence naming the first non-finite stage and,
 * for the logits, the token, head and key, the value in double precision
 * and what exceeded float32. */
void check_diag_nonfinite(size_t H, size_t T, size_t d_c, size_t d_r,
                          size_t d_v, size_t D, double tau, const float *q_lat,
                          const float *q_rope_t, const float *A, const float *U,
                          const float *O, const float *Y, const float *C,
                          const float *K, char *out, size_t len);

/* 1 when all n values are finite. */
int cli_all_finite(const float *x, size_t n);

#endif
