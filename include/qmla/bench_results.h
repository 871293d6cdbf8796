/* qmla/bench_results.h — benchmark results as HDF5 (docs/decode.md,
 * "Results file"): the measurement rows of one run with its provenance,
 * written atomically (lib/io/h5util.h: in-memory file, then rename).
 *
 * Layout (format "qmla-bench", version 1):
 *   /            attributes: format, format_version, tool, tool_version,
 *                git_commit, command_line, created_utc, device, and the
 *                run's numeric parameters (qmla_bench_meta.params)
 *   /rows        one row per measurement: kind, config (strings), batch
 *                (int32), size (int64), median_us, ratio_to_bf16, bytes,
 *                GBps, pct_copy (float64; NaN where a row has no value)
 *   /table9      the decode rows (kind "decode") in the paper's Table 9
 *                shape: one row per (batch, context), in the order first
 *                met: batch, context, then per configuration C (in the
 *                order first met) C_us, C_ratio, C_GBps, C_pct_copy (NaN
 *                where that configuration was not measured)
 * Both groups are tables in the sense of qmla/table.h (1-D columns of one
 * length, `units` and `description` attributes). Writer: bench/bench_decode.cu;
 * test: tests/cache/test_bench_results.c. */
#ifndef QMLA_BENCH_RESULTS_H
#define QMLA_BENCH_RESULTS_H

#include <stddef.h>

#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QMLA_BENCH_FORMAT "qmla-bench"
#define QMLA_BENCH_VERSION 1

typedef struct qmla_bench_row {
    char kind[32];        /* "copy", "writer", "decode", or a qdq variant */
    char config[16];      /* "BF16", "C4R4", ...; "" where none */
    int batch;            /* decode: sequences; else 0 */
    long size;            /* decode: context tokens; qdq / writer: tokens; copy: 0 */
    double median_us;
    double ratio_to_bf16; /* decode: median / BF16 median of the same point; else NaN */
    double bytes;         /* bytes moved (read + written) or read (decode) */
    double gbps;          /* bytes / median */
    double pct_copy;      /* gbps over the same run's device copy, percent */
} qmla_bench_row;

typedef struct qmla_bench_meta {
    const char *tool;         /* e.g. "bench_decode" */
    const char *command_line;
    const char *device;       /* e.g. "NVIDIA H200, 132 SMs" */
    size_t n_params;          /* numeric parameters, root attributes */
    const char *const *param_names;
    const double *param_values;
} qmla_bench_meta;

/* Write rows[0..n) to path atomically. QMLA_EINVAL for a bad argument or a
 * parameter name that clashes with the provenance attributes, QMLA_EIO
 * naming the file and what failed. */
int qmla_bench_write_h5(const char *path, const qmla_bench_meta *m,
                        const qmla_bench_row *rows, size_t n, qmla_error *err);

#ifdef __cplusplus
}
#endif
#endif
