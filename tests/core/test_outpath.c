/* tests/core/test_outpath.c — the output-path safety library (qmla/outpath.h),
 * called directly: each refusal's status and message (file, role, expected,
 * found), the accepted cases, and the stale-temporary sweep (a dead PID's
 * file removed; a live PID's, our own and non-matching names kept). The
 * CLI-level cases are in test_faults.sh. */
#include "check.h"
#include "qmla/outpath.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void touch(const char *p)
{
    FILE *f = fopen(p, "w");
    if (f) {
        fputs("x\n", f);
        fclose(f);
    }
}

static int exists(const char *p)
{
    struct stat sb;
    return lstat(p, &sb) == 0;
}

int main(void)
{
    char dir[] = "/tmp/qmla-test-outpath-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char in[512], out[512], sub[512], fifo[512], lnk[512], hard[512], p[1024];
    snprintf(in, sizeof in, "%s/in.h5", dir);
    snprintf(out, sizeof out, "%s/out.h5", dir);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(lnk, sizeof lnk, "%s/link.h5", dir);
    snprintf(hard, sizeof hard, "%s/hard.h5", dir);
    touch(in);
    mkdir(sub, 0700);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo: %s", strerror(errno));
    CHECK(symlink("in.h5", lnk) == 0, "symlink");
    CHECK(link(in, hard) == 0, "link");
    const char *inputs[] = {in};
    qmla_error err;

    /* accepted: a new name, an existing regular file that is not an input */
    qmla_error_clear(&err);
    CHECK_OK(qmla_output_path_check(out, "output file (-o)", inputs, 1, &err), err);
    touch(out);
    CHECK_OK(qmla_output_path_check(out, "output file (-o)", inputs, 1, &err), err);
    CHECK_OK(qmla_output_path_check(in, "x", NULL, 0, &err), err); /* no inputs */

    struct {
        const char *path, *want;
    } bad[] = {
        {"", "expected a file name, found an empty string"},
        {in, "found the input"},
        {lnk, "found the input"},
        {hard, "found the input"},
        {sub, "found a directory"},
        {fifo, "found a FIFO"},
        {"/dev/null", "found a character device"},
        {"/nonexistent-qmla-dir/x.h5", "expected an existing directory"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        qmla_error_clear(&err);
        int st = qmla_output_path_check(bad[k].path, "output file (-o)", inputs, 1, &err);
        CHECK(st == QMLA_EINVAL, "%s: status %d, expected EINVAL", bad[k].path, st);
        CHECK(strstr(err.msg, bad[k].want) != NULL, "%s: message \"%s\" lacks \"%s\"",
              bad[k].path, err.msg, bad[k].want);
        CHECK(strstr(err.msg, "output file (-o)") != NULL, "message names the role: %s", err.msg);
    }
    snprintf(p, sizeof p, "%s/", sub);
    CHECK(qmla_output_path_check(p, "o", NULL, 0, &err) == QMLA_EINVAL &&
              strstr(err.msg, "ends with /"), "trailing slash: %s", err.msg);

    /* stale temporaries: a dead child's PID, our own PID, PID 1 (alive) */
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0);
    char tdead[1024], tself[1024], tone[1024], tother[1024], tdir[1024];
    snprintf(tdead, sizeof tdead, "%s.tmp.%ld", out, (long)dead);
    snprintf(tself, sizeof tself, "%s.tmp.%ld", out, (long)getpid());
    snprintf(tone, sizeof tone, "%s.tmp.1", out);
    snprintf(tother, sizeof tother, "%s.tmp.%ldx", out, (long)dead);
    touch(tdead);
    touch(tself);
    touch(tone);
    touch(tother);
    size_t removed = 99;
    qmla_error_clear(&err);
    CHECK_OK(qmla_stale_tmp_remove(out, &removed, &err), err);
    if (kill(dead, 0) != 0) { /* the PID was not reused meanwhile */
        CHECK(!exists(tdead), "a dead process's temporary was kept");
        CHECK(removed == 1, "removed %zu, expected 1", removed);
    }
    CHECK(exists(tself), "our own temporary was removed");
    CHECK(exists(tone), "PID 1's temporary was removed");
    CHECK(exists(tother), "a non-matching name was removed");
    /* a directory named like a stale temporary is not touched */
    snprintf(tdir, sizeof tdir, "%s.tmp.%ld", out, (long)dead);
    unlink(tdead);
    mkdir(tdir, 0700);
    CHECK_OK(qmla_stale_tmp_remove(out, &removed, &err), err);
    CHECK(exists(tdir), "a directory was removed");
    /* a path in a directory that cannot be listed */
    /* a path whose directory does not exist is QMLA_ENOENT (not EIO),
     * naming the directory; so is one under a regular file (ENOTDIR) */
    CHECK(qmla_stale_tmp_remove("/nonexistent-qmla-dir/x.h5", NULL, &err) == QMLA_ENOENT &&
              strstr(err.msg, "/nonexistent-qmla-dir") != NULL,
          "missing directory: %s", err.msg);
    char under_file[4200];
    snprintf(under_file, sizeof under_file, "%s/x.h5", in);
    CHECK(qmla_stale_tmp_remove(under_file, NULL, &err) == QMLA_ENOENT &&
              strstr(err.msg, in) != NULL,
          "directory that is a file: %s", err.msg);

    rmdir(tdir);
    unlink(tself);
    unlink(tone);
    unlink(tother);
    unlink(out);
    unlink(in);
    unlink(hard);
    unlink(lnk);
    unlink(fifo);
    rmdir(sub);
    rmdir(dir);
    return check_summary("test_outpath");
}
