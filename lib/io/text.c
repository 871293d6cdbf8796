/* text.c — a text file, gzip or plain, read whole (qmla_text_read,
 * qmla/text.h): the corpora of `qmla capture` and the texts of
 * `qmla ppl`. A gzip stream cut short is an error: gzread() returns the
 * bytes it had and reports the missing end only through gzerror()
 * (Z_BUF_ERROR, "unexpected end of file"), so without the check below a
 * truncated .gz scored as a shorter text with exit 0. gzerror()'s message
 * already starts with the path. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "qmla/text.h"

int qmla_text_read(const char *path, uint8_t **out, size_t *n, qmla_error *err)
{
    errno = 0;
    gzFile g = gzopen(path, "rb");
    if (!g)
        return qmla_error_set(err, errno ? qmla_status_from_errno(errno) : QMLA_ENOMEM,
                              "%s: cannot open: %s", path,
                              errno ? strerror(errno) : "out of memory");
    size_t cap = 1 << 20, k = 0;
    uint8_t *b = malloc(cap);
    for (;;) {
        if (!b) {
            gzclose(g);
            return qmla_error_set(err, QMLA_ENOMEM, "%s: out of memory", path);
        }
        if (k == cap) {
            uint8_t *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                b = NULL;
                continue;
            }
            b = nb;
            cap *= 2;
        }
        int r = gzread(g, b + k, (unsigned)(cap - k));
        int e = Z_OK;
        const char *why = r <= 0 ? gzerror(g, &e) : NULL;
        if (r < 0 || (r == 0 && e != Z_OK)) {
            int st;
            if (e == Z_BUF_ERROR)
                st = qmla_error_set(err, QMLA_EFORMAT, "%s: truncated gzip stream (unexpected end of file "
                                    "after %zu bytes of text)", path, k);
            else
                st = qmla_error_set(err, QMLA_EIO, "%s", why);
            free(b);
            gzclose(g);
            return st;
        }
        if (r == 0)
            break;
        k += (size_t)r;
    }
    gzclose(g);
    *out = b;
    *n = k;
    return 0;
}

int qmla_split_list(const char *s, char ***out, size_t *n, char **buf)
{
    *buf = strdup(s);
    size_t cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    *out = calloc(cap, sizeof **out);
    if (!*buf || !*out)
        return -1;
    size_t cnt = 0;
    char *save = NULL;
    for (char *tok = strtok_r(*buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        (*out)[cnt++] = tok;
    *n = cnt;
    return cnt ? 0 : -1;
}
