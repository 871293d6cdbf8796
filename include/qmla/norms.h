/* qmla/norms.h — squared norms and relative errors of float32 arrays,
 * accumulated in double. */
#ifndef QMLA_NORMS_H
#define QMLA_NORMS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

double qmla_sumsq(const float *x, size_t n);              /* ||x||^2 */
double qmla_diff_sumsq(const float *a, const float *b, size_t n); /* ||a-b||^2 */
/* ||a - b|| / ||b|| (0 if both are zero, +inf if only b is; NaN when an
 * input holds NaN or the sums overflow). */
double qmla_rel_fro(const float *a, const float *b, size_t n);

#ifdef __cplusplus
}
#endif
#endif
