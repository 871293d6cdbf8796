/* devices.c — the devices of several parts of one run (devices.h). */
#include "core/devices.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* name, ordinal and count without the rule: cut at " (" after ", device ";
 * the engine's switches after the rule ("...(rule); GEMMs 3xtf32; query
 * tile <= 128") stay in the key, in brackets, so parts run with other
 * switches are other entries and a merge does not drop them */
static void device_key(const char *dev, char *key, size_t len)
{
    snprintf(key, len, "%s", dev);
    char *d = strstr(key, ", device ");
    char *r = d ? strstr(d, " (") : NULL;
    if (!r)
        return;
    const char *d0 = strstr(dev, ", device ");
    const char *r0 = strstr(d0, " (");
    const char *close = strchr(r0, ')');
    const char *sw = close && close[1] == ';' && close[2] == ' ' ? close + 3 : NULL;
    *r = '\0';
    if (sw && sw[0]) {
        const size_t u = strlen(key);
        snprintf(key + u, len - u, " [%s]", sw);
    }
}

int qmla_devices_add(qmla_devices *d, const char *dev, qmla_error *err)
{
    if (!dev || !dev[0])
        return QMLA_OK;
    char key[sizeof d->key[0]];
    device_key(dev, key, sizeof key);
    for (size_t i = 0; i < d->n; i++)
        if (!strcmp(d->key[i], key))
            return QMLA_OK;
    if (d->n == d->cap) {
        const size_t cap = d->cap ? 2 * d->cap : 8;
        char (*k)[QMLA_DEVICES_KEY] = realloc(d->key, cap * sizeof *k);
        if (!k)
            return qmla_error_set(err, QMLA_ENOMEM, "merge: out of memory (device list)");
        d->key = k;
        d->cap = cap;
    }
    if (d->n == 0)
        snprintf(d->first, sizeof d->first, "%s", dev);
    memcpy(d->key[d->n++], key, sizeof key);
    return QMLA_OK;
}

void qmla_devices_format(const qmla_devices *d, char *out, size_t len)
{
    if (!len)
        return;
    out[0] = '\0';
    if (d->n == 0)
        return;
    if (d->n == 1) {
        snprintf(out, len, "%s", d->first);
        return;
    }
    size_t u = (size_t)snprintf(out, len, "%zu devices: ", d->n);
    if (u >= len)
        return;
    for (size_t i = 0; i < d->n; i++) {
        const char *sep = i ? "; " : "";
        /* room for this entry and, when more follow, for the tail */
        char tail[48];
        const size_t more = d->n - i - 1;
        const int nt = more ? snprintf(tail, sizeof tail, "; ... (%zu more)", more) : 0;
        const size_t need = strlen(sep) + strlen(d->key[i]) + (size_t)nt;
        if (u + need >= len) {
            snprintf(out + u, len - u, "%s... (%zu more)", i ? "; " : "", d->n - i);
            return;
        }
        u += (size_t)snprintf(out + u, len - u, "%s%s", sep, d->key[i]);
    }
}

void qmla_devices_free(qmla_devices *d)
{
    free(d->key);
    memset(d, 0, sizeof *d);
}
