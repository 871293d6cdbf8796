/* h5util.c — see h5util.h. */
#include "h5util.h"

#include <stdio.h>

h5_quiet qmla_h5_quiet_begin(void)
{
    h5_quiet q = {NULL, NULL};
    H5Eget_auto2(H5E_DEFAULT, &q.fn, &q.data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    return q;
}

void qmla_h5_quiet_end(h5_quiet q) { H5Eset_auto2(H5E_DEFAULT, q.fn, q.data); }

typedef struct walk_ctx {
    char *buf;
    size_t cap;
    int got;
} walk_ctx;

static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *p)
{
    (void)n;
    walk_ctx *w = p;
    if (!w->got && e && e->desc && e->desc[0]) {
        snprintf(w->buf, w->cap, "%s", e->desc);
        w->got = 1;
    }
    return 0;
}

void qmla_h5_error_text(char *buf, size_t cap)
{
    walk_ctx w = {buf, cap, 0};
    buf[0] = '\0';
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_cb, &w);
    if (!buf[0])
        snprintf(buf, cap, "unspecified HDF5 error");
}
