/* hash.c — SHA-256 of a file (libcrypto EVP, streamed in 64 KiB blocks), used
 * to record which capture a result came from.
 */
#include "qmla/hash.h"

#include <openssl/evp.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

int qmla_sha256_file(const char *path, char hex[65], qmla_error *err)
{
    if (!path || !hex)
        return qmla_error_set(err, QMLA_EINVAL, "qmla_sha256_file: expected a "
                              "path and an output buffer, found NULL");
    hex[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f)
        return qmla_error_set(err, qmla_status_from_errno(errno), "%s: cannot open: %s", path,
                              strerror(errno));
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(ctx);
        fclose(f);
        return qmla_error_set(err, QMLA_EINTERNAL, "%s: sha256: libcrypto "
                              "failed to initialise", path);
    }
    static const size_t block = 1 << 16;
    unsigned char buf[1 << 16];
    int st = QMLA_OK;
    for (;;) {
        size_t n = fread(buf, 1, block, f);
        if (n > 0 && EVP_DigestUpdate(ctx, buf, n) != 1) {
            st = qmla_error_set(err, QMLA_EINTERNAL, "%s: sha256: libcrypto "
                                "update failed", path);
            break;
        }
        if (n < block) {
            if (ferror(f))
                st = qmla_error_set(err, QMLA_EIO, "%s: read error: %s", path,
                                    strerror(errno));
            break;
        }
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (!st && (EVP_DigestFinal_ex(ctx, md, &len) != 1 || len != 32))
        st = qmla_error_set(err, QMLA_EINTERNAL, "%s: sha256: libcrypto "
                            "final failed", path);
    EVP_MD_CTX_free(ctx);
    fclose(f);
    if (st)
        return st;
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < 32; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[64] = '\0';
    return QMLA_OK;
}
