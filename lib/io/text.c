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
#include <sys/stat.h>
#include <zlib.h>

#include "io/h5util.h"
#include "qmla/outpath.h"
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

/* Whether the existing regular file `path` is HDF5: the signature at 0 or
 * at 512 * 2^k, where HDF5 looks for a superblock. *fmt (malloc'd, NULL when
 * absent or not HDF5) receives its root "format" attribute. */
static int is_hdf5(const char *path, char **fmt)
{
    *fmt = NULL;
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    int found = 0;
    for (long off = 0; !found && off <= (1L << 30); off = off ? off * 2 : 512) {
        unsigned char b[8];
        if (fseek(f, off, SEEK_SET) != 0 || fread(b, 1, 8, f) != 8)
            break;
        found = !memcmp(b, sig, 8);
    }
    fclose(f);
    if (!found)
        return 0;
    h5_quiet q = qmla_h5_quiet_begin();
    hid_t h = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (h >= 0) {
        qmla_error e2;
        qmla_error_clear(&e2);
        const qmla_h5_ctx v = {path, H5P_DEFAULT, &e2};
        (void)qmla_h5_read_attr_str(&v, h, "/", "format", 0, fmt);
        H5Fclose(h);
    }
    qmla_h5_quiet_end(q);
    return 1;
}

int qmla_text_save(const char *path, const char *what, const char *const *inputs,
                   size_t n_inputs, const void *buf, size_t len, qmla_error *err)
{
    if (!what)
        what = "output file";
    if (qmla_output_path_check(path, what, inputs, n_inputs, err))
        return err ? err->status : QMLA_EINVAL;
    struct stat sb;
    char *fmt = NULL;
    if (stat(path, &sb) == 0 && sb.st_size > 0 && is_hdf5(path, &fmt)) {
        int st = qmla_error_set(err, QMLA_EINVAL, "%s: %s: expected a text file or a new name, "
                                "found an HDF5 file (%s%s%s); refusing to replace it with text",
                                path, what, fmt ? "format \"" : "no format attribute",
                                fmt ? fmt : "", fmt ? "\"" : "");
        free(fmt);
        return st;
    }
    const void *b[1] = {buf};
    const size_t l[1] = {len};
    return qmla_save_bytes_atomic(path, b, l, 1, err);
}

int qmla_text_check_input(const char *path, const char *what, qmla_error *err)
{
    if (!what)
        what = "text file";
    struct stat sb;
    if (stat(path, &sb) != 0)
        return QMLA_OK; /* missing or unreadable: qmla_text_read reports it */
    if (!S_ISREG(sb.st_mode))
        return qmla_error_set(err, QMLA_EINVAL, "%s: %s: expected a regular file (plain or "
                              "gzip text), found %s", path, what, qmla_path_kind_name(sb.st_mode));
    return QMLA_OK;
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
