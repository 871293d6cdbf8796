/* tests/check.h — minimal assertion helpers for the C tests.
 * CHECK(cond, fmt, ...) records a failure with file:line and a message and
 * continues; CHECK_OK(status, err) checks a library status; finish with
 * `return check_summary("name");` which prints "N passed, M failed" and
 * returns 0 only when nothing failed. */
#ifndef QMLA_TESTS_CHECK_H
#define QMLA_TESTS_CHECK_H
#include <stdio.h>

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
#endif
