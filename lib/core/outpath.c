/* outpath.c — output-path safety (include/qmla/outpath.h). */
#include "qmla/outpath.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

const char *qmla_path_kind_name(unsigned mode)
{
    const mode_t m = (mode_t)mode;
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISFIFO(m))
        return "a FIFO (named pipe)";
    if (S_ISSOCK(m))
        return "a socket";
    if (S_ISREG(m))
        return "a regular file";
    return "a special file";
}

/* Directory part of path ("." when there is none) into out. */
static void dir_of(const char *path, char *out, size_t len)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(out, len, ".");
        return;
    }
    size_t n = (size_t)(slash - path);
    while (n > 0 && path[n - 1] == '/')
        n--;
    if (n == 0) {
        snprintf(out, len, "/");
        return;
    }
    snprintf(out, len, "%.*s", (int)n, path);
}

int qmla_output_path_check(const char *path, const char *what,
                           const char *const *inputs, size_t n_inputs,
                           qmla_error *err)
{
    if (!what)
        what = "output file";
    if (!path || !*path)
        return qmla_error_set(err, QMLA_EINVAL,
                              "\"\": %s: expected a file name, found an empty "
                              "string", what);
    const size_t plen = strlen(path);
    if (path[plen - 1] == '/')
        return qmla_error_set(err, QMLA_EINVAL,
                              "%s: %s: expected a file name, found a directory "
                              "name (ends with /)", path, what);
    struct stat sb;
    const int exists = stat(path, &sb) == 0;
    if (exists) {
        if (!S_ISREG(sb.st_mode))
            return qmla_error_set(err, QMLA_EINVAL,
                                  "%s: %s: expected a regular file or a new "
                                  "name, found %s", path, what,
                                  qmla_path_kind_name(sb.st_mode));
        for (size_t k = 0; k < n_inputs; k++) {
            struct stat ib;
            if (!inputs || !inputs[k] || stat(inputs[k], &ib) != 0)
                continue;
            if (ib.st_dev == sb.st_dev && ib.st_ino == sb.st_ino)
                return qmla_error_set(
                    err, QMLA_EINVAL,
                    "%s: %s: expected a file other than the input, found the "
                    "input %s itself (same device and inode; refused even "
                    "with --force)", path, what, inputs[k]);
        }
    } else if (errno != ENOENT) {
        return qmla_error_set(err, QMLA_EINVAL,
                              "%s: %s: expected a path that can be examined, "
                              "found an error (%s)", path, what,
                              strerror(errno));
    }
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    struct stat db;
    if (stat(dir, &db) != 0)
        return qmla_error_set(err, QMLA_EINVAL,
                              "%s: %s: expected an existing directory %s, "
                              "found %s", path, what, dir, strerror(errno));
    if (!S_ISDIR(db.st_mode))
        return qmla_error_set(err, QMLA_EINVAL,
                              "%s: %s: expected %s to be a directory, found "
                              "%s", path, what, dir, qmla_path_kind_name(db.st_mode));
    /* the temporary is created there: a read-only directory (or file
     * system) is refused now, not after the work */
    if (access(dir, W_OK | X_OK) != 0)
        return qmla_error_set(err, QMLA_EINVAL,
                              "%s: %s: expected a writable directory %s, found "
                              "%s", path, what, dir, strerror(errno));
    return QMLA_OK;
}

int qmla_tmp_owner_gone(const char *digits)
{
    if (!*digits || strlen(digits) > 10 || strspn(digits, "0123456789") != strlen(digits))
        return 0;
    const long pid = strtol(digits, NULL, 10);
    if (pid <= 0 || pid == (long)getpid())
        return 0;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int qmla_stale_tmp_remove(const char *path, size_t *removed, qmla_error *err)
{
    if (removed)
        *removed = 0;
    if (!path || !*path)
        return QMLA_OK;
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char prefix[1024];
    int pn = snprintf(prefix, sizeof prefix, "%s.tmp.", base);
    if (pn < 0 || (size_t)pn >= sizeof prefix)
        return QMLA_OK; /* a name this long has no temporaries we made */
    DIR *d = opendir(dir);
    if (!d)
        return qmla_error_set(err, errno == ENOENT || errno == ENOTDIR
                                       ? QMLA_ENOENT : QMLA_EIO,
                              "%s: cannot list the directory %s to look for "
                              "stale temporary files: %s", path, dir,
                              strerror(errno));
    int st = QMLA_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, (size_t)pn) != 0)
            continue;
        if (!qmla_tmp_owner_gone(e->d_name + pn))
            continue; /* alive, not ours to judge (EPERM), or not a pid */
        char full[8192];
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(full, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        if (unlink(full) != 0) {
            st = qmla_error_set(err, QMLA_EIO,
                                "%s: stale temporary file of process %s "
                                "(no longer running): expected to remove it, "
                                "found %s", full, e->d_name + pn, strerror(errno));
            break;
        }
        if (removed)
            (*removed)++;
    }
    closedir(d);
    return st;
}
