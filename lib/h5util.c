/* h5util.c — see h5util.h. */
#include "h5util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* ---- writers ------------------------------------------------------------- */

static hid_t utf8_vlen(void)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t >= 0 && (H5Tset_size(t, H5T_VARIABLE) < 0 ||
                   H5Tset_cset(t, H5T_CSET_UTF8) < 0)) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

static int attr_write(hid_t obj, const char *name, hid_t type, const void *v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    if (sp < 0)
        return -1;
    hid_t a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, type, v) < 0 ? -1 : 0;
    if (a >= 0 && H5Aclose(a) < 0)
        rc = -1;
    if (H5Sclose(sp) < 0)
        rc = -1;
    return rc;
}

int qmla_h5_attr_str(hid_t obj, const char *name, const char *value)
{
    hid_t t = utf8_vlen();
    if (t < 0)
        return -1;
    const char *v = value ? value : "";
    int rc = attr_write(obj, name, t, &v);
    if (H5Tclose(t) < 0)
        rc = -1;
    return rc;
}

int qmla_h5_attr_int(hid_t obj, const char *name, long long value)
{
    /* stored as int64 (h5py: numpy.int64) */
    int64_t v = (int64_t)value;
    hid_t sp = H5Screate(H5S_SCALAR);
    if (sp < 0)
        return -1;
    hid_t a = H5Acreate2(obj, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, H5T_NATIVE_INT64, &v) < 0 ? -1 : 0;
    if (a >= 0 && H5Aclose(a) < 0)
        rc = -1;
    if (H5Sclose(sp) < 0)
        rc = -1;
    return rc;
}

int qmla_h5_attr_dbl(hid_t obj, const char *name, double value)
{
    return attr_write(obj, name, H5T_NATIVE_DOUBLE, &value);
}

int qmla_h5_dset_1d(hid_t g, const char *name, hid_t ftype, hid_t mtype,
                    size_t n, const void *data, const char *description,
                    const char *units)
{
    hsize_t dims[1] = {n};
    hid_t sp = H5Screate_simple(1, dims, NULL);
    if (sp < 0)
        return -1;
    hid_t d = H5Dcreate2(g, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT,
                         H5P_DEFAULT);
    int rc = d < 0 ? -1 : 0;
    if (!rc && n && H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
        rc = -1;
    if (!rc && description && description[0] &&
        qmla_h5_attr_str(d, "description", description))
        rc = -1;
    if (!rc && units && units[0] && qmla_h5_attr_str(d, "units", units))
        rc = -1;
    if (d >= 0 && H5Dclose(d) < 0)
        rc = -1;
    if (H5Sclose(sp) < 0)
        rc = -1;
    return rc;
}

int qmla_h5_dset_strs(hid_t g, const char *name, size_t n, const char *const *s,
                      const char *description)
{
    hid_t t = utf8_vlen();
    if (t < 0)
        return -1;
    int rc = qmla_h5_dset_1d(g, name, t, t, n, s, description, NULL);
    if (H5Tclose(t) < 0)
        rc = -1;
    return rc;
}

/* ---- in-memory files ------------------------------------------------------ */

hid_t qmla_h5_create_mem(void)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0)
        return -1;
    /* 1 MiB growth steps; backing_store 0: nothing reaches disk from HDF5 */
    hid_t f = -1;
    if (H5Pset_fapl_core(fapl, (size_t)1 << 20, 0) >= 0)
        f = H5Fcreate("qmla-in-memory.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    return f;
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int qmla_h5_save_image(hid_t f, const char *path, qmla_error *err)
{
    int st = QMLA_OK;
    unsigned char *img = NULL;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = -1;

    if (H5Fflush(f, H5F_SCOPE_GLOBAL) < 0) {
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot flush the in-memory file",
                            path);
        goto done;
    }
    ssize_t sz = H5Fget_file_image(f, NULL, 0);
    if (sz <= 0 || !(img = malloc((size_t)sz)) ||
        H5Fget_file_image(f, img, (size_t)sz) != sz) {
        st = qmla_error_set(err, sz > 0 && !img ? QMLA_ENOMEM : QMLA_EIO,
                            "%s: cannot take the file image (%zd bytes)", path,
                            sz);
        goto done;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot create: %s", tmp,
                            strerror(errno));
        goto done;
    }
    if (write_all(fd, img, (size_t)sz) != 0) {
        st = qmla_error_set(err, QMLA_EIO, "%s: write failed after %zd bytes: %s",
                            tmp, sz, strerror(errno));
        goto done;
    }
    if (fsync(fd) != 0) {
        st = qmla_error_set(err, QMLA_EIO, "%s: fsync failed: %s", tmp,
                            strerror(errno));
        goto done;
    }
    if (close(fd) != 0) {
        fd = -1;
        st = qmla_error_set(err, QMLA_EIO, "%s: close failed: %s", tmp,
                            strerror(errno));
        goto done;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        st = qmla_error_set(err, QMLA_EIO, "cannot rename %s to %s: %s", tmp,
                            path, strerror(errno));
        goto done;
    }
    {
        /* make the rename durable */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
done:
    if (fd >= 0)
        close(fd);
    if (st != QMLA_OK)
        unlink(tmp);
    free(img);
    if (H5Fclose(f) < 0 && st == QMLA_OK)
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot close the in-memory file",
                            path);
    return st;
}

/* Open `path` in memory (a copy; nothing reaches disk until saved), or
 * create an empty in-memory file when it does not exist. */
hid_t qmla_h5_open_mem(const char *path, int *created, qmla_error *err)
{
    *created = 0;
    if (access(path, F_OK) != 0) {
        *created = 1;
        hid_t f = qmla_h5_create_mem();
        if (f < 0)
            qmla_error_set(err, QMLA_EIO, "%s: cannot create an in-memory file", path);
        return f;
    }
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    hid_t f = -1;
    if (fapl >= 0 && H5Pset_fapl_core(fapl, (size_t)1 << 20, 0) >= 0)
        f = H5Fopen(path, H5F_ACC_RDWR, fapl);
    if (fapl >= 0)
        H5Pclose(fapl);
    if (f < 0) {
        char m[256];
        qmla_h5_error_text(m, sizeof m);
        qmla_error_set(err, QMLA_EIO, "%s: cannot open as HDF5 to add a group: %s",
                       path, m);
    }
    return f;
}

