/* group.c — the one HDF5 output writer and its provenance block
 * (lib/io/group.h, docs/results-format.md "Provenance"). */
#include "io/group.h"

#include "qmla/exec.h"
#include "qmla_commit.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* The library's load time: elapsed_s is measured from it. */
static struct timespec t_loaded;
__attribute__((constructor)) static void note_load_time(void)
{
    clock_gettime(CLOCK_MONOTONIC, &t_loaded);
}

void qmla_utc_now(char *buf, size_t cap)
{
    const time_t now = time(NULL);
    struct tm tm;
    buf[0] = '\0';
    if (gmtime_r(&now, &tm))
        strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int qmla_h5_out_file(qmla_h5_out *o, const char *path, qmla_error *err)
{
    memset(o, 0, sizeof *o);
    o->path = path;
    o->err = err;
    o->g = -1;
    o->quiet = qmla_h5_quiet_begin();
    o->created = 1;
    o->f = qmla_h5_create_mem();
    if (o->f < 0) {
        qmla_h5_quiet_end(o->quiet);
        return qmla_error_set(err, QMLA_EIO, "%s: cannot create the file in memory", path);
    }
    o->g = o->f;
    return QMLA_OK;
}

int qmla_h5_out_group(qmla_h5_out *o, const char *path, const char *name,
                      qmla_error *err)
{
    int st = QMLA_OK;
    memset(o, 0, sizeof *o);
    o->path = path;
    o->err = err;
    o->g = -1;
    o->quiet = qmla_h5_quiet_begin();
    o->f = qmla_h5_open_mem(path, &o->created, err);
    if (o->f < 0) {
        qmla_h5_quiet_end(o->quiet);
        return err && err->status ? err->status : QMLA_EIO;
    }
    /* a new file, or one written before every writer marked it */
    const htri_t has_fmt = H5Aexists(o->f, "format");
    QMLA_H5_TRY(has_fmt, "attribute format");
    if (!has_fmt) {
        QMLA_H5_TRY(qmla_h5_attr_str(o->f, "format", "qmla-results"), "attribute format");
        if (H5Aexists(o->f, "format_version") <= 0)
            QMLA_H5_TRY(qmla_h5_attr_int(o->f, "format_version", 1),
                        "attribute format_version");
    }
    if (H5Lexists(o->f, name, H5P_DEFAULT) > 0)
        QMLA_H5_TRY(H5Ldelete(o->f, name, H5P_DEFAULT), name);
    QMLA_H5_TRY(o->g = H5Gcreate2(o->f, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), name);
    o->own_g = 1;
    return QMLA_OK;
out:
    H5Fclose(o->f);
    o->f = -1;
    qmla_h5_quiet_end(o->quiet);
    return st;
}

int qmla_h5_out_finish(qmla_h5_out *o, int st)
{
    qmla_error *err = o->err;
    const char *path = o->path;
    if (o->f < 0)
        return st;
    if (o->own_g && o->g >= 0 && H5Gclose(o->g) < 0 && st == QMLA_OK) {
        char m[256];
        qmla_h5_error_text(m, sizeof m);
        st = qmla_error_set(err, QMLA_EIO, "%s: cannot close the group: %s", path, m);
    }
    o->g = -1;
    st = qmla_h5_finish(o->f, st, path, err);
    o->f = -1;
    qmla_h5_quiet_end(o->quiet);
    return st;
}

/* String attribute unless obj has it already. */
static int put_str(hid_t obj, const char *name, const char *v)
{
    const htri_t e = H5Aexists(obj, name);
    return e < 0 ? -1 : e ? 0 : qmla_h5_attr_str(obj, name, v ? v : "");
}

int qmla_h5_prov(hid_t obj, const qmla_prov *p, const char *path, qmla_error *err)
{
    int st = QMLA_OK;
    char utc[32];
    if (!p->created_utc)
        qmla_utc_now(utc, sizeof utc);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const double elapsed = (double)(now.tv_sec - t_loaded.tv_sec) +
                           1e-9 * (double)(now.tv_nsec - t_loaded.tv_nsec);
    if (p->tool)
        QMLA_H5_TRY(put_str(obj, "tool", p->tool), "attribute tool");
    QMLA_H5_TRY(put_str(obj, "tool_version", p->tool_version ? p->tool_version : qmla_version()),
                "attribute tool_version");
    QMLA_H5_TRY(put_str(obj, "git_commit", p->git_commit ? p->git_commit : QMLA_GIT_COMMIT),
                "attribute git_commit");
    QMLA_H5_TRY(put_str(obj, "command_line", p->command_line), "attribute command_line");
    QMLA_H5_TRY(put_str(obj, "created_utc", p->created_utc ? p->created_utc : utc),
                "attribute created_utc");
    QMLA_H5_TRY(put_str(obj, "engine", p->engine ? p->engine : "cpu"), "attribute engine");
    if (p->engine_device && p->engine_device[0])
        QMLA_H5_TRY(put_str(obj, "engine_device", p->engine_device), "attribute engine_device");
    if (H5Aexists(obj, "threads") == 0)
        QMLA_H5_TRY(qmla_h5_attr_int(obj, "threads", qmla_exec_threads_used()),
                    "attribute threads");
    QMLA_H5_TRY(put_str(obj, "blas", qmla_blas_info()), "attribute blas");
    if (H5Aexists(obj, "elapsed_s") == 0)
        QMLA_H5_TRY(qmla_h5_attr_dbl(obj, "elapsed_s", elapsed), "attribute elapsed_s");
    for (size_t k = 0; k < p->n_inputs; k++)
        if (p->inputs[k].value)
            QMLA_H5_TRY(put_str(obj, p->inputs[k].name, p->inputs[k].value),
                        p->inputs[k].name);
out:
    return st;
}
