/* devices.h — the devices of several parts of one run, for the provenance
 * of a merged results file (sweep's and the operator drivers' --merge).
 * A device is identified by its name, ordinal and count without the rule
 * that chose it ("NVIDIA H200 (sm_90, 139.8 GiB), device 1 of 2"); one
 * device is recorded with its full string, several as "K devices: A; B;
 * ..." with K exact even when the list is cut to fit. */
#ifndef QMLA_CORE_DEVICES_H
#define QMLA_CORE_DEVICES_H

#include <stddef.h>

#include "qmla/engine.h"
#include "qmla/status.h"

/* a key is a device string (below QMLA_ENGINE_DEVICE_MAX) with " [switches]"
 * in place of "; switches" (one byte more) */
#define QMLA_DEVICES_KEY (QMLA_ENGINE_DEVICE_MAX + 8)

typedef struct qmla_devices {
    char (*key)[QMLA_DEVICES_KEY]; /* the distinct devices, in the order first seen */
    size_t n, cap;
    char first[QMLA_ENGINE_DEVICE_MAX]; /* the first device's full string (rule included) */
} qmla_devices;

/* Add a part's device string ("" or NULL: none, ignored); a device seen
 * before is not counted again. QMLA_ENOMEM with a message. */
int qmla_devices_add(qmla_devices *d, const char *dev, qmla_error *err);

/* The provenance string into out[len]: "" for none, the first device's
 * full string for one, "K devices: A; B; ..." for several; entries that do
 * not fit are left out as "; ... (M more)", never cut in the middle. */
void qmla_devices_format(const qmla_devices *d, char *out, size_t len);

void qmla_devices_free(qmla_devices *d);

#endif
