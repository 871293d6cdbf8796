/* tests/core/test_devices.c — the device list of a merged results file's
 * provenance (lib/core/devices.h): one device keeps its full string, the
 * rule that chose it is not part of a device's identity, repeats are not
 * counted again however long the list, and a list that does not fit its
 * buffer is cut between entries with the count of those left out. */
#include "check.h"
#include "core/devices.h"

#include <stdio.h>
#include <string.h>

static const char *dev(char *buf, size_t len, int ord, int count, const char *rule)
{
    snprintf(buf, len, "NVIDIA H200 (sm_90, 139.8 GiB), device %d of %d (%s)", ord, count, rule);
    return buf;
}

int main(void)
{
    qmla_error err;
    qmla_devices d;
    char b[320], out[256];
    memset(&d, 0, sizeof d);

    qmla_devices_format(&d, out, sizeof out);
    CHECK(out[0] == '\0', "no device: empty, found \"%s\"", out);
    CHECK_OK(qmla_devices_add(&d, "", &err), err);
    CHECK_OK(qmla_devices_add(&d, NULL, &err), err);
    CHECK(d.n == 0, "empty strings are no devices (n %zu)", d.n);

    CHECK_OK(qmla_devices_add(&d, dev(b, sizeof b, 0, 8, "default"), &err), err);
    CHECK_OK(qmla_devices_add(&d, dev(b, sizeof b, 0, 8, "--device"), &err), err);
    qmla_devices_format(&d, out, sizeof out);
    CHECK(d.n == 1, "one device under two rules is one device (n %zu)", d.n);
    CHECK(!strcmp(out, dev(b, sizeof b, 0, 8, "default")),
          "one device: the first part's full string, found \"%s\"", out);

    CHECK_OK(qmla_devices_add(&d, dev(b, sizeof b, 1, 8, "QMLA_CUDA_DEVICE"), &err), err);
    qmla_devices_format(&d, out, sizeof out);
    CHECK(!strcmp(out, "2 devices: NVIDIA H200 (sm_90, 139.8 GiB), device 0 of 8; "
                       "NVIDIA H200 (sm_90, 139.8 GiB), device 1 of 8"),
          "two devices without their rules, found \"%s\"", out);

    /* all eight, each seen from three parts: the count stays 8 although the
     * list no longer fits 256 bytes (the old strstr-on-a-cut-list counted
     * a device seen again once its entry had been cut) */
    for (int rep = 0; rep < 3; rep++)
        for (int o = 0; o < 8; o++)
            CHECK_OK(qmla_devices_add(&d, dev(b, sizeof b, o, 8, "local rank"), &err), err);
    CHECK(d.n == 8, "8 distinct devices, found %zu", d.n);
    qmla_devices_format(&d, out, sizeof out);
    CHECK(!strncmp(out, "8 devices: NVIDIA H200 (sm_90, 139.8 GiB), device 0 of 8; ", 58),
          "the count first, found \"%s\"", out);
    CHECK(strlen(out) < sizeof out, "fits its buffer (%zu)", strlen(out));
    int listed = 0;
    for (const char *p = out; (p = strstr(p, ", device ")); p++)
        listed++;
    char tail[64];
    snprintf(tail, sizeof tail, "; ... (%d more)", 8 - listed);
    CHECK(listed >= 2 && listed < 8, "some entries listed, the rest counted (%d listed)", listed);
    CHECK(strlen(out) >= strlen(tail) && !strcmp(out + strlen(out) - strlen(tail), tail),
          "cut between entries with \"%s\", found \"%s\"", tail, out);
    /* every listed entry whole: each ends in " of 8" before "; " */
    for (const char *p = strstr(out, ", device "); p; p = strstr(p + 1, ", device ")) {
        int o, c, n = 0;
        CHECK(sscanf(p, ", device %d of %d%n", &o, &c, &n) == 2 && c == 8 &&
                  (p[n] == ';' || p[n] == '\0'),
              "an entry cut in the middle near \"%.30s\"", p);
    }

    /* a tiny buffer: never overrun, still starts with the count */
    char small[24];
    memset(small, 'x', sizeof small);
    qmla_devices_format(&d, small, sizeof small);
    CHECK(memchr(small, '\0', sizeof small) != NULL && !strncmp(small, "8 devices: ", 11),
          "small buffer: \"%.*s\"", (int)sizeof small, small);
    qmla_devices_free(&d);
    CHECK(d.n == 0 && d.key == NULL, "freed");

    /* the engine's switches after the rule are part of the identity: the
     * same device in two GEMM modes is two entries, and a merge of parts on
     * two devices keeps each part's switches */
    char big[512];
    memset(&d, 0, sizeof d);
    const char *sw = "NVIDIA H200 (sm_90, 139.8 GiB), device 0 of 1 (default); GEMMs 3xtf32; "
                     "query tile <= 128";
    CHECK_OK(qmla_devices_add(&d, sw, &err), err);
    CHECK_OK(qmla_devices_add(&d, "NVIDIA H200 (sm_90, 139.8 GiB), device 0 of 1 (--device); "
                              "GEMMs 3xtf32; query tile <= 128", &err), err);
    qmla_devices_format(&d, big, sizeof big);
    CHECK(d.n == 1 && !strcmp(big, sw), "same device and switches under two rules: one entry, "
          "the first string whole (n %zu, \"%s\")", d.n, big);
    CHECK_OK(qmla_devices_add(&d, dev(b, sizeof b, 0, 1, "default"), &err), err);
    qmla_devices_format(&d, big, sizeof big);
    CHECK(d.n == 2 && !strcmp(big, "2 devices: NVIDIA H200 (sm_90, 139.8 GiB), device 0 of 1 "
                              "[GEMMs 3xtf32; query tile <= 128]; NVIDIA H200 (sm_90, 139.8 "
                              "GiB), device 0 of 1"),
          "the device without switches is another entry, the switches kept in brackets "
          "(n %zu, \"%s\")", d.n, big);
    qmla_devices_free(&d);
    return check_summary("test_devices");
}
