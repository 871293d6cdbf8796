/* tests/io/test_export.c — the field escaping of qmla_export_write
 * (lib/io/export.c) on fields chosen so that each near-miss rule gives
 * other bytes: the expected text is worked out from the format's own rules
 * (RFC 4180 for CSV: a field holding a comma, quote, CR or LF, or a leading
 * or trailing space is quoted, quotes inside doubled; TSV: backslash escapes
 * \t \n \r \\; Markdown: | escaped, CR and LF as spaces; RFC 8259 JSON:
 * every control character below 0x20 escaped, bytes that are not UTF-8 of
 * a scalar value (an encoded surrogate U+D800..U+DFFF) replaced by \ufffd,
 * one per byte). Catches mutants 2562..2568.
 * Run: meson test -C build test_export */
#include "check.h"
#include "qmla/export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const fields[] = {
    "a\rb",            /* lone CR */
    "say \"hi\"",      /* quotes */
    "x ",              /* trailing space only */
    "a\\b",            /* backslash */
    "\xed\xbf\xbf",    /* U+DFFF encoded: a surrogate, not UTF-8 */
    "\xed\x9f\xbf",    /* U+D7FF: valid */
    "\x1f" "e",        /* unit separator */
    "p|q\rr",          /* pipe and CR */
};
enum { NF = sizeof fields / sizeof fields[0] };

/* The whole output of one format. */
static char *export_text(const qmla_table *t, qmla_export_format fmt)
{
    qmla_error err;
    qmla_error_clear(&err);
    FILE *f = tmpfile();
    if (!f)
        return NULL;
    int st = qmla_export_write(f, t, NULL, 0, NULL, fmt, &err);
    CHECK(st == QMLA_OK, "export format %d: %s", (int)fmt, err.msg);
    long n = ftell(f);
    rewind(f);
    char *buf = calloc((size_t)n + 1, 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n)
        buf[0] = 0;
    fclose(f);
    return buf;
}

static void expect_tail(const char *got, const char *want, const char *what)
{
    const size_t g = got ? strlen(got) : 0, w = strlen(want);
    const int ok = got && g >= w && !strcmp(got + g - w, want);
    CHECK(ok, "%s: expected the text to end with\n---\n%s---\nfound\n---\n%s---", what, want,
          got ? got : "(null)");
}

int main(void)
{
    qmla_error err;
    qmla_error_clear(&err);
    qmla_table *t = NULL;
    CHECK_OK(qmla_table_alloc("t", NF, &t, &err), err);
    CHECK_OK(qmla_table_add_column(t, "s", "", "", QMLA_VAL_STRING, fields, &err), err);

    char *csv = export_text(t, QMLA_EXPORT_CSV);
    expect_tail(csv, "s\n"
                     "\"a\rb\"\n"
                     "\"say \"\"hi\"\"\"\n"
                     "\"x \"\n"
                     "a\\b\n"
                     "\xed\xbf\xbf\n"
                     "\xed\x9f\xbf\n"
                     "\x1f" "e\n"
                     "\"p|q\rr\"\n", "CSV (RFC 4180)");
    char *tsv = export_text(t, QMLA_EXPORT_TSV);
    expect_tail(tsv, "s\n"
                     "a\\rb\n"
                     "say \"hi\"\n"
                     "x \n"
                     "a\\\\b\n"
                     "\xed\xbf\xbf\n"
                     "\xed\x9f\xbf\n"
                     "\x1f" "e\n"
                     "p|q\\rr\n", "TSV");
    char *md = export_text(t, QMLA_EXPORT_MD);
    expect_tail(md, "| s |\n|---|\n"
                    "| a b |\n"
                    "| say \"hi\" |\n"
                    "| x  |\n"
                    "| a\\b |\n"
                    "| \xed\xbf\xbf |\n"
                    "| \xed\x9f\xbf |\n"
                    "| \x1f" "e |\n"
                    "| p\\|q r |\n", "Markdown");
    char *json = export_text(t, QMLA_EXPORT_JSON);
    expect_tail(json, "\"rows\": [\n"
                      "    {\"s\": \"a\\rb\"},\n"
                      "    {\"s\": \"say \\\"hi\\\"\"},\n"
                      "    {\"s\": \"x \"},\n"
                      "    {\"s\": \"a\\\\b\"},\n"
                      "    {\"s\": \"\\ufffd\\ufffd\\ufffd\"},\n"
                      "    {\"s\": \"\xed\x9f\xbf\"},\n"
                      "    {\"s\": \"\\u001fe\"},\n"
                      "    {\"s\": \"p|q\\rr\"}\n"
                      "  ]\n}\n", "JSON (RFC 8259)");
    free(csv);
    free(tsv);
    free(md);
    free(json);
    qmla_table_free(t);
    return check_summary("test_export");
}
