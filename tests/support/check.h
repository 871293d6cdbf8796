/* tests/support/check.h — minimal assertion helpers for the C tests.
 * CHECK(cond, fmt, ...) records a failure with file:line and a message and
 * continues; CHECK_OK(status, err) checks a library status; finish with
 * `return check_summary("name");` which prints "N passed, M failed" and
 * returns 0 only when nothing failed.
 * check_tmpdir(buf, len, "name") makes a private folder under $TMPDIR (or
 * /tmp) that is removed with everything in it when the test exits, passed
 * or failed (QMLA_KEEP_TMP=1 keeps it and says where). */
#ifndef QMLA_TESTS_CHECK_H
#define QMLA_TESTS_CHECK_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_pass_ = 0, check_fail_ = 0;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (cond) {                                                         \
            check_pass_++;                                                  \
        } else {                                                            \
            check_fail_++;                                                  \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, \
                    #cond);                                                 \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

#define CHECK_OK(status, err)                                               \
    CHECK((status) == 0, "status %d: %s", (status), (err).msg)

static inline int check_summary(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, check_pass_, check_fail_);
    return check_fail_ ? 1 : (check_pass_ ? 0 : 1);
}
static char check_tmpdir_[512];

static void check_tmpdir_remove_(void)
{
    if (!check_tmpdir_[0])
        return;
    const char *keep = getenv("QMLA_KEEP_TMP");
    if (keep && strcmp(keep, "1") == 0) {
        fprintf(stderr, "test files kept in %s\n", check_tmpdir_);
        return;
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", check_tmpdir_);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", check_tmpdir_);
}

/* A private temporary folder in buf, removed at exit; NULL on failure. */
static inline char *check_tmpdir(char *buf, size_t len, const char *name)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, len, "%s/qmla-test-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
    if (!mkdtemp(buf)) {
        perror("mkdtemp");
        return NULL;
    }
    snprintf(check_tmpdir_, sizeof check_tmpdir_, "%s", buf);
    atexit(check_tmpdir_remove_);
    return buf;
}
#endif
