/* norms.c — norms in double precision (include/qmla/norms.h). */
#include "qmla/norms.h"

#include <math.h>

double qmla_sumsq(const float *x, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * (double)x[i];
    return s;
}

double qmla_diff_sumsq(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - (double)b[i];
        s += e * e;
    }
    return s;
}

double qmla_rel_fro(const float *a, const float *b, size_t n)
{
    double num = qmla_diff_sumsq(a, b, n), den = qmla_sumsq(b, n);
    if (den == 0.0)
        return num == 0.0 ? 0.0 : INFINITY;
    return sqrt(num / den);
}

