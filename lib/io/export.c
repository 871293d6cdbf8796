/* export.c — tables as TSV, CSV, Markdown or JSON text (include/qmla/export.h).
 * Output goes to the caller's stream, or to a file saved atomically
 * (qmla_export_save, through qmla_text_save); errors come back as a status. */
#include "qmla/export.h"
#include "qmla/text.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int qmla_export_format_parse(const char *s, qmla_export_format *fmt, qmla_error *err)
{
    static const struct {
        const char *name;
        qmla_export_format f;
    } tab[] = {{"tsv", QMLA_EXPORT_TSV}, {"csv", QMLA_EXPORT_CSV},
               {"md", QMLA_EXPORT_MD}, {"json", QMLA_EXPORT_JSON}};
    for (size_t k = 0; k < sizeof tab / sizeof tab[0]; k++)
        if (s && !strcmp(s, tab[k].name)) {
            *fmt = tab[k].f;
            return QMLA_OK;
        }
    return qmla_error_set(err, QMLA_EINVAL, "format: expected tsv, csv, md or json, found \"%s\"",
                          s ? s : "");
}

void qmla_export_double(double x, char *buf, size_t len)
{
    if (!buf || len == 0)
        return;
    if (isnan(x)) {
        snprintf(buf, len, "nan");
        return;
    }
    if (isinf(x)) {
        snprintf(buf, len, x > 0 ? "inf" : "-inf");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            return;
    }
}

/* ---- escaping ----------------------------------------------------------- */

/* TSV field / comment value: backslash escapes for \t \n \r and \\. */
static void put_tsv(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '\t': fputs("\\t", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\\': fputs("\\\\", f); break;
        default: fputc(*s, f);
        }
    }
}

/* CSV field (RFC 4180): quoted when it holds a comma, quote, CR/LF, leading
 * or trailing space, or starts with '#' (a comment to pandas). */
static void put_csv(FILE *f, const char *s)
{
    const size_t n = strlen(s);
    const int quote = strpbrk(s, ",\"\r\n") != NULL || (n && (s[0] == ' ' || s[n - 1] == ' ')) ||
                      s[0] == '#';
    if (!quote) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* Markdown table cell: | escaped, line breaks as spaces. */
static void put_md(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            fputs("\\|", f);
        else if (*s == '\n' || *s == '\r')
            fputc(' ', f);
        else
            fputc(*s, f);
    }
}

/* Inside an HTML comment: no "--". */
static void put_html_comment(FILE *f, const char *s)
{
    for (; *s; s++) {
        fputc(*s, f);
        if (*s == '-' && s[1] == '-')
            fputc(' ', f);
    }
}

/* Length of the valid UTF-8 sequence at s, 0 if invalid. */
static size_t utf8_len(const unsigned char *s)
{
    if (s[0] < 0x80)
        return 1;
    size_t n;
    uint32_t c;
    if ((s[0] & 0xE0) == 0xC0) {
        n = 2;
        c = s[0] & 0x1F;
    } else if ((s[0] & 0xF0) == 0xE0) {
        n = 3;
        c = s[0] & 0x0F;
    } else if ((s[0] & 0xF8) == 0xF0) {
        n = 4;
        c = s[0] & 0x07;
    } else {
        return 0;
    }
    for (size_t k = 1; k < n; k++) {
        if ((s[k] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (s[k] & 0x3F);
    }
    if ((n == 2 && c < 0x80) || (n == 3 && c < 0x800) || (n == 4 && c < 0x10000) ||
        c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    return n;
}

/* JSON string (RFC 8259). */
static void put_json_str(FILE *f, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    fputc('"', f);
    while (*s) {
        if (*s == '"' || *s == '\\') {
            fputc('\\', f);
            fputc(*s++, f);
        } else if (*s == '\n') {
            fputs("\\n", f);
            s++;
        } else if (*s == '\t') {
            fputs("\\t", f);
            s++;
        } else if (*s == '\r') {
            fputs("\\r", f);
            s++;
        } else if (*s < 0x20 || *s == 0x7F) {
            fprintf(f, "\\u%04x", *s);
            s++;
        } else {
            size_t n = utf8_len(s);
            if (n == 0) {
                fputs("\\ufffd", f);
                s++;
            } else {
                fwrite(s, 1, n, f);
                s += n;
            }
        }
    }
    fputc('"', f);
}

/* ---- values ------------------------------------------------------------- */

/* Value k as text (not for strings). */
static void num_text(const qmla_values *v, size_t k, char *buf, size_t len)
{
    switch (v->kind) {
    case QMLA_VAL_INT: snprintf(buf, len, "%" PRId64, v->i[k]); break;
    case QMLA_VAL_UINT: snprintf(buf, len, "%" PRIu64, v->u[k]); break;
    case QMLA_VAL_FLOAT: qmla_export_double(v->d[k], buf, len); break;
    default: buf[0] = '\0';
    }
}

typedef void (*put_fn)(FILE *, const char *);

static void put_value(FILE *f, const qmla_values *v, size_t k, put_fn put)
{
    if (v->kind == QMLA_VAL_STRING) {
        put(f, v->s[k]);
        return;
    }
    char buf[64];
    num_text(v, k, buf, sizeof buf);
    fputs(buf, f);
}

static void put_json_value(FILE *f, const qmla_values *v, size_t k)
{
    if (v->kind == QMLA_VAL_STRING) {
        put_json_str(f, v->s[k]);
        return;
    }
    if (v->kind == QMLA_VAL_FLOAT && !isfinite(v->d[k])) {
        fputs("null", f);
        return;
    }
    char buf[64];
    num_text(v, k, buf, sizeof buf);
    fputs(buf, f);
}

/* An attribute's value as text: "x" or "x, y, z" for arrays. */
static void put_attr_text(FILE *f, const qmla_attr *a, put_fn put)
{
    for (size_t k = 0; k < a->v.n; k++) {
        if (k)
            fputs(", ", f);
        put_value(f, &a->v, k, put);
    }
}

static void put_attr_json(FILE *f, const qmla_attr *a)
{
    if (a->scalar && a->v.n == 1) {
        put_json_value(f, &a->v, 0);
        return;
    }
    fputc('[', f);
    for (size_t k = 0; k < a->v.n; k++) {
        if (k)
            fputs(", ", f);
        put_json_value(f, &a->v, k);
    }
    fputc(']', f);
}

static const char *kind_json(qmla_val_kind k)
{
    switch (k) {
    case QMLA_VAL_INT: return "int";
    case QMLA_VAL_UINT: return "uint";
    case QMLA_VAL_FLOAT: return "float";
    default: return "string";
    }
}

/* ---- formats ------------------------------------------------------------ */

static void write_comments(FILE *f, const qmla_table *t, const qmla_attr *prov, size_t n_prov,
                           const char *source, const char *pre, put_fn put)
{
    fprintf(f, "%sqmla export: table ", pre);
    put(f, t->name);
    fprintf(f, ", %zu rows", t->n_rows);
    if (source) {
        fputs(", from ", f);
        put(f, source);
    }
    fputc('\n', f);
    for (size_t k = 0; k < n_prov; k++) {
        fputs(pre, f);
        put(f, prov[k].name);
        fputs(": ", f);
        put_attr_text(f, &prov[k], put);
        fputc('\n', f);
    }
    for (size_t k = 0; k < t->n_attrs; k++) {
        fputs(pre, f);
        put(f, t->name);
        fputc('.', f);
        put(f, t->attrs[k].name);
        fputs(": ", f);
        put_attr_text(f, &t->attrs[k], put);
        fputc('\n', f);
    }
}

static void write_delimited(FILE *f, const qmla_table *t, const qmla_attr *prov, size_t n_prov,
                            const char *source, int csv)
{
    write_comments(f, t, prov, n_prov, source, "# ", put_tsv);
    for (size_t c = 0; c < t->n_cols; c++) {
        const qmla_table_col *col = &t->cols[c];
        if (!col->units[0] && !col->description[0])
            continue;
        fputs("# column ", f);
        put_tsv(f, col->name);
        if (col->units[0]) {
            fputs(" [", f);
            put_tsv(f, col->units);
            fputc(']', f);
        }
        if (col->description[0]) {
            fputs(": ", f);
            put_tsv(f, col->description);
        }
        fputc('\n', f);
    }
    const char sep = csv ? ',' : '\t';
    put_fn put = csv ? put_csv : put_tsv;
    for (size_t c = 0; c < t->n_cols; c++) {
        if (c)
            fputc(sep, f);
        put(f, t->cols[c].name);
    }
    fputc('\n', f);
    for (size_t r = 0; r < t->n_rows; r++) {
        for (size_t c = 0; c < t->n_cols; c++) {
            if (c)
                fputc(sep, f);
            put_value(f, &t->cols[c].v, r, put);
        }
        fputc('\n', f);
    }
}

static void write_md(FILE *f, const qmla_table *t, const qmla_attr *prov, size_t n_prov,
                     const char *source)
{
    fputs("<!--\n", f);
    write_comments(f, t, prov, n_prov, source, "", put_html_comment);
    fputs("-->\n\n", f);
    fputc('|', f);
    for (size_t c = 0; c < t->n_cols; c++) {
        fputc(' ', f);
        put_md(f, t->cols[c].name);
        if (t->cols[c].units[0]) {
            fputs(" [", f);
            put_md(f, t->cols[c].units);
            fputc(']', f);
        }
        fputs(" |", f);
    }
    fputs("\n|", f);
    for (size_t c = 0; c < t->n_cols; c++)
        fputs(t->cols[c].v.kind == QMLA_VAL_STRING ? "---|" : "---:|", f);
    fputc('\n', f);
    for (size_t r = 0; r < t->n_rows; r++) {
        fputc('|', f);
        for (size_t c = 0; c < t->n_cols; c++) {
            fputc(' ', f);
            put_value(f, &t->cols[c].v, r, put_md);
            fputs(" |", f);
        }
        fputc('\n', f);
    }
}

static void write_json(FILE *f, const qmla_table *t, const qmla_attr *prov, size_t n_prov,
                       const char *source)
{
    fputs("{\n  \"source\": ", f);
    if (source)
        put_json_str(f, source);
    else
        fputs("null", f);
    fputs(",\n  \"table\": ", f);
    put_json_str(f, t->name);
    fprintf(f, ",\n  \"n_rows\": %zu,\n  \"provenance\": {", t->n_rows);
    for (size_t k = 0; k < n_prov; k++) {
        fputs(k ? ",\n    " : "\n    ", f);
        put_json_str(f, prov[k].name);
        fputs(": ", f);
        put_attr_json(f, &prov[k]);
    }
    fputs(n_prov ? "\n  },\n  \"attributes\": {" : "},\n  \"attributes\": {", f);
    for (size_t k = 0; k < t->n_attrs; k++) {
        fputs(k ? ",\n    " : "\n    ", f);
        put_json_str(f, t->attrs[k].name);
        fputs(": ", f);
        put_attr_json(f, &t->attrs[k]);
    }
    fputs(t->n_attrs ? "\n  },\n  \"columns\": [" : "},\n  \"columns\": [", f);
    for (size_t c = 0; c < t->n_cols; c++) {
        const qmla_table_col *col = &t->cols[c];
        fputs(c ? ",\n    {\"name\": " : "\n    {\"name\": ", f);
        put_json_str(f, col->name);
        fprintf(f, ", \"type\": \"%s\", \"units\": ", kind_json(col->v.kind));
        put_json_str(f, col->units);
        fputs(", \"description\": ", f);
        put_json_str(f, col->description);
        fputc('}', f);
    }
    fputs(t->n_cols ? "\n  ],\n  \"rows\": [" : "],\n  \"rows\": [", f);
    for (size_t r = 0; r < t->n_rows; r++) {
        fputs(r ? ",\n    {" : "\n    {", f);
        for (size_t c = 0; c < t->n_cols; c++) {
            if (c)
                fputs(", ", f);
            put_json_str(f, t->cols[c].name);
            fputs(": ", f);
            put_json_value(f, &t->cols[c].v, r);
        }
        fputc('}', f);
    }
    fputs(t->n_rows ? "\n  ]\n}\n" : "]\n}\n", f);
}

int qmla_export_write(FILE *f, const qmla_table *t, const qmla_attr *prov, size_t n_prov,
                      const char *source, qmla_export_format fmt, qmla_error *err)
{
    if (!f || !t)
        return qmla_error_set(err, QMLA_EINVAL, "export: no stream or table");
    switch (fmt) {
    case QMLA_EXPORT_TSV: write_delimited(f, t, prov, n_prov, source, 0); break;
    case QMLA_EXPORT_CSV: write_delimited(f, t, prov, n_prov, source, 1); break;
    case QMLA_EXPORT_MD: write_md(f, t, prov, n_prov, source); break;
    case QMLA_EXPORT_JSON: write_json(f, t, prov, n_prov, source); break;
    default: return qmla_error_set(err, QMLA_EINVAL, "export: unknown format %d", (int)fmt);
    }
    if (fflush(f) != 0 || ferror(f))
        return qmla_error_set(err, QMLA_EIO, "export: table %s: write failed", t->name);
    return QMLA_OK;
}

int qmla_export_save(const char *path, const char *what, const char *const *inputs,
                     size_t n_inputs, const qmla_table *t, const qmla_attr *prov,
                     size_t n_prov, const char *source, qmla_export_format fmt,
                     qmla_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m)
        return qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
    int st = qmla_export_write(m, t, prov, n_prov, source, fmt, err);
    if (fclose(m) != 0 && !st)
        st = qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
    if (!st)
        st = qmla_text_save(path, what, inputs, n_inputs, buf, len, err);
    free(buf);
    return st;
}
