/* tmethod.c — the transform method table (qmla/tmethod.h). */
#include "qmla/tmethod.h"

#include <stdio.h>
#include <string.h>

static int rtn_calibrate(qmla_transform *t, const float *gamma, const qmla_calib *cal,
                         double alpha, qmla_error *err)
{
    (void)cal;
    (void)alpha;
    return qmla_transform_set_identity(t, gamma, err);
}

static int quarot_calibrate(qmla_transform *t, const float *gamma, const qmla_calib *cal,
                            double alpha, qmla_error *err)
{
    (void)cal;
    (void)alpha;
    int st = qmla_transform_set_identity(t, gamma, err);
    return st ? st : qmla_transform_quarot(t, err);
}

static int smoothquant_calibrate(qmla_transform *t, const float *gamma, const qmla_calib *cal,
                                 double alpha, qmla_error *err)
{
    return qmla_transform_smoothquant(t, gamma, cal, alpha, err);
}

static void name_label(const qmla_transform_meta *m, char *out, size_t n)
{
    snprintf(out, n, "%s", qmla_tmethod_name(m->method));
}

static void title_label(const qmla_transform_meta *m, char *out, size_t n)
{
    const qmla_tmethod_type *t = qmla_tmethod_of(m->method);
    snprintf(out, n, "%s", t ? t->title : "?");
}

/* a QuantMLA file that learned one path only is quantmla-content /
 * quantmla-rope; the reconstruction ablation adds -recon */
static void quantmla_eval_label(const qmla_transform_meta *m, char *out, size_t n)
{
    snprintf(out, n, "%s", "quantmla");
    if (strstr(m->settings, "path=content "))
        snprintf(out, n, "quantmla-content");
    else if (strstr(m->settings, "path=rope "))
        snprintf(out, n, "quantmla-rope");
    if (strstr(m->settings, "objective=recon ")) {
        size_t bl = strlen(out);
        snprintf(out + bl, n - bl, "-recon");
    }
}

static void quantmla_ppl_label(const qmla_transform_meta *m, char *out, size_t n)
{
    const char *p = strstr(m->settings, "path=");
    char path[16] = "both";
    if (p)
        sscanf(p + 5, "%15[a-z]", path);
    if (strcmp(path, "both"))
        snprintf(out, n, "QuantMLA-%s", path);
    else
        snprintf(out, n, "QuantMLA");
}

static const qmla_tmethod_type rtn_type = {
    "rtn", "RTN", QMLA_TM_RTN, 0, 0, 0, rtn_calibrate, name_label, title_label};
static const qmla_tmethod_type smoothquant_type = {
    "smoothquant", "SmoothQuant", QMLA_TM_SMOOTHQUANT, 0, 1, 1, smoothquant_calibrate,
    name_label, title_label};
static const qmla_tmethod_type quarot_type = {
    "quarot", "QuaRot", QMLA_TM_QUAROT, 0, 0, 0, quarot_calibrate, name_label, title_label};
static const qmla_tmethod_type quantmla_type = {
    "quantmla", "QuantMLA", QMLA_TM_QUANTMLA, 1, 0, 0, NULL, quantmla_eval_label,
    quantmla_ppl_label};

const qmla_tmethod_type *qmla_tmethod_rtn = &rtn_type;
const qmla_tmethod_type *qmla_tmethod_smoothquant = &smoothquant_type;
const qmla_tmethod_type *qmla_tmethod_quarot = &quarot_type;
const qmla_tmethod_type *qmla_tmethod_quantmla = &quantmla_type;

static const qmla_tmethod_type *const all_types[] = {&rtn_type, &smoothquant_type,
                                                     &quarot_type, &quantmla_type, NULL};

const qmla_tmethod_type *const *qmla_tmethod_types(void)
{
    return all_types;
}

const qmla_tmethod_type *qmla_tmethod_lookup(const char *name)
{
    for (size_t k = 0; name && all_types[k]; k++)
        if (!strcmp(name, all_types[k]->name))
            return all_types[k];
    return NULL;
}

const qmla_tmethod_type *qmla_tmethod_of(qmla_tmethod id)
{
    for (size_t k = 0; all_types[k]; k++)
        if (all_types[k]->id == id)
            return all_types[k];
    return NULL;
}

const char *qmla_tmethod_name(qmla_tmethod m)
{
    const qmla_tmethod_type *t = qmla_tmethod_of(m);
    return t ? t->name : "?";
}
