/* qmla/hash.h — input hashes for provenance and resume keys (lib/core/hash.c). */
#ifndef QMLA_HASH_H
#define QMLA_HASH_H

#include "qmla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* SHA-256 of a file as 64 lowercase hex characters plus NUL (libcrypto). */
int qmla_sha256_file(const char *path, char hex[65], qmla_error *err);

#ifdef __cplusplus
}
#endif
#endif
