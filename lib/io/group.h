/* group.h (private) — the one HDF5 output writer of every qmla command
 * (docs/results-format.md, "Provenance"):
 *   - qmla_h5_out_file: a whole new file, built in memory (the sweep's
 *     results and parts, transforms, serve-sim and benchmark files);
 *   - qmla_h5_out_group: one group added to (or replaced in) a results
 *     file, the file opened as an in-memory copy or created with the root
 *     attributes `format` = "qmla-results" and `format_version` = 1 (added
 *     too when an existing file lacks them); every other group kept;
 *   - qmla_h5_prov: the provenance block, written the same way on the root
 *     of a whole file or on an added group;
 *   - qmla_h5_out_finish: save the image atomically (qmla_h5_save_image) or,
 *     after a failure, discard it leaving PATH as it was.
 * HDF5's error printing is off between open and finish. Checked HDF5 calls
 * use QMLA_H5_TRY (h5util.h). */
#ifndef QMLA_IO_GROUP_H
#define QMLA_IO_GROUP_H

#include <hdf5.h>
#include <stddef.h>

#include "io/h5util.h"
#include "qmla/status.h"

typedef struct qmla_h5_out {
    const char *path;
    qmla_error *err;
    hid_t f;      /* the in-memory file */
    hid_t g;      /* the group being written (the root for a whole file) */
    int created;  /* the file did not exist (or was empty) */
    int own_g;    /* g is a group to close */
    h5_quiet quiet;
} qmla_h5_out;

/* A new in-memory file; o->g is its root. QMLA_EIO on failure. */
int qmla_h5_out_file(qmla_h5_out *o, const char *path, qmla_error *err);
/* Group `name` of results file `path` (qmla_h5_open_mem), an older group of
 * that name deleted; o->g is the new, empty group. */
int qmla_h5_out_group(qmla_h5_out *o, const char *path, const char *name,
                      qmla_error *err);
/* When st is QMLA_OK: close the group and save the file to o->path;
 * otherwise close everything without saving. Returns the final status. */
int qmla_h5_out_finish(qmla_h5_out *o, int st);

/* An input of the output, recorded as a string attribute (name, value);
 * value NULL is left out. */
typedef struct qmla_prov_input {
    const char *name, *value;
} qmla_prov_input;

typedef struct qmla_prov {
    const char *tool;         /* `tool`: "qmla sweep", ...; NULL: left out */
    const char *command_line; /* `command_line`; NULL: "" */
    const char *created_utc;  /* `created_utc`; NULL: now */
    const char *tool_version; /* `tool_version`; NULL: qmla_version() */
    const char *git_commit;   /* `git_commit`; NULL: QMLA_GIT_COMMIT */
    const char *engine;       /* `engine`; NULL: "cpu" */
    const char *engine_device; /* `engine_device` (qmla_engine_device); NULL or
                                  "": left out (the CPU engine) */
    const qmla_prov_input *inputs; /* input hashes, paths, ... */
    size_t n_inputs;
} qmla_prov;

/* The provenance block on obj (a file's root or a group): tool,
 * tool_version, git_commit, command_line, created_utc, engine,
 * engine_device (only when the engine has a device), threads
 * (qmla_exec_threads_used), blas (qmla_blas_info), elapsed_s (seconds since
 * the library was loaded: the program's run time) and the inputs. An
 * attribute obj already has is left as it is. */
int qmla_h5_prov(hid_t obj, const qmla_prov *p, const char *path, qmla_error *err);

/* "2024-01-31T12:00:00Z" (UTC now) into buf (32 bytes). */
void qmla_utc_now(char *buf, size_t cap);

#endif
