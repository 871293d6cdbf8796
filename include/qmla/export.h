/* qmla/export.h — a table (qmla/table.h) as text: TSV for gnuplot, CSV for
 * spreadsheets and pandas, Markdown for documents, JSON for programs.
 *
 * Every format carries the provenance: the results file's root attributes
 * (format, model, capture_sha256, quantizer parameters, ...) and the
 * table's own attributes, as `# key: value` comment lines (TSV, CSV), an
 * HTML comment block (Markdown) or fields (JSON). Columns are named in a
 * header row; units and descriptions, where the file has them, come as
 * `# units` / `# column` comment lines (TSV, CSV), `name [units]` headers
 * (Markdown) or column objects (JSON). docs/figures.md shows each format.
 *
 * Numbers are written exactly: integers in full, floats as the shortest
 * decimal that reads back to the same double ("nan", "inf", "-inf" in
 * TSV/CSV/Markdown, null in JSON). Strings are escaped per format (TSV:
 * \t \n \r \\; CSV: RFC 4180 quoting; Markdown: \|; JSON: RFC 8259, with
 * invalid UTF-8 bytes replaced by U+FFFD).
 *
 *   qmla_export_write(stdout, t, root, n_root, "results.h5",
 *                     QMLA_EXPORT_TSV, &err);
 *
 * Output goes to a caller-given stream (qmla_export_write) or to a file
 * saved atomically (qmla_export_save); a write error returns QMLA_EIO with
 * a message. */
#ifndef QMLA_EXPORT_H
#define QMLA_EXPORT_H

#include <stdio.h>

#include "qmla/status.h"
#include "qmla/table.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qmla_export_format {
    QMLA_EXPORT_TSV = 0,
    QMLA_EXPORT_CSV = 1,
    QMLA_EXPORT_MD = 2,
    QMLA_EXPORT_JSON = 3
} qmla_export_format;

/* "tsv" | "csv" | "md" | "json" -> *fmt; QMLA_EINVAL otherwise. */
int qmla_export_format_parse(const char *s, qmla_export_format *fmt, qmla_error *err);

/* Write table t to f. prov: the file's root attributes (may be NULL with
 * n_prov 0); source: the file name recorded as `source` (may be NULL).
 * QMLA_EIO when a write to f fails. */
int qmla_export_write(FILE *f, const qmla_table *t, const qmla_attr *prov, size_t n_prov,
                      const char *source, qmla_export_format fmt, qmla_error *err);

/* The same text saved to `path` (qmla export -o, qmla figures' data
 * files) through qmla_text_save (qmla/text.h): `path` checked like every
 * writer's output (`what` names its role; `inputs`, n_inputs of them, are
 * the files read, never replaced), an existing HDF5 file refused, written
 * to a temporary and renamed into place, so that a failed write leaves
 * `path` as it was. */
int qmla_export_save(const char *path, const char *what, const char *const *inputs,
                     size_t n_inputs, const qmla_table *t, const qmla_attr *prov,
                     size_t n_prov, const char *source, qmla_export_format fmt,
                     qmla_error *err);

/* Shortest decimal that reads back exactly as x ("nan", "inf", "-inf" for
 * non-finite values) into buf (at least 32 bytes). */
void qmla_export_double(double x, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
