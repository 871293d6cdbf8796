/* check_diag.c — diagnosis of a non-finite recomputation in `qmla check`
 * (cli/cli_safe.h). A capture can hold only finite float32 values and
 * still overflow float32 on the way to its attention output: a q_rope entry
 * of 3e38 makes q_rope·k_rope exceed FLT_MAX, a softmax_scale of 1e38 does
 * the same to every logit, and inf - inf in the softmax gives NaN. The check
 * must then report a finding, not compare NaN (which every comparison
 * passes). This names the first stage that went non-finite. */
#include "cli_safe.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

int cli_all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

/* First non-finite index of x[n], or n. */
static size_t first_bad(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return i;
    return n;
}

static double dot_d(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t k = 0; k < n; k++)
        s += (double)a[k] * (double)b[k];
    return s;
}

static double maxabs(const float *x, size_t n)
{
    double m = 0.0;
    for (size_t k = 0; k < n; k++)
        if (fabs((double)x[k]) > m)
            m = fabs((double)x[k]);
    return m;
}

/* "WHAT overflows float32 (max M) at token i, head h" for the first
 * non-finite entry of a [T, H, width] array (H 0: [T, width], a channel). */
static int stage_bad(const float *x, size_t T, size_t H, size_t width, const char *what,
                     char *out, size_t len)
{
    const size_t n = T * (H ? H : 1) * width, at = first_bad(x, n);
    if (at >= n)
        return 0;
    if (H)
        snprintf(out, len, "%s overflows float32 (max %.4g) at token %zu, head %zu", what,
                 (double)FLT_MAX, at / (H * width), at / width % H);
    else
        snprintf(out, len, "%s overflows float32 (max %.4g) at token %zu, output channel %zu",
                 what, (double)FLT_MAX, at / width, at % width);
    return 1;
}

void check_diag_nonfinite(size_t H, size_t T, size_t d_c, size_t d_r,
                          size_t d_v, size_t D, double tau, const float *q_lat,
                          const float *q_rope_t, const float *A, const float *U,
                          const float *O, const float *Y, const float *C,
                          const float *K, char *out, size_t len)
{
    const double fmax32 = (double)FLT_MAX;
    size_t at;
    if (stage_bad(q_lat, T, H, d_c, "the absorbed query q_nope·w_uk", out, len))
        return;
    if ((at = first_bad(A, T * H * T)) < T * H * T) {
        const size_t i = at / (H * T), h = at / T % H;
        const float *qc = q_lat + (i * H + h) * d_c, *qr = q_rope_t + (i * H + h) * d_r;
        /* the row's logits in double: which key, which term */
        size_t worst = 0;
        double wm = -1.0, wc = 0.0, wr = 0.0;
        for (size_t s = 0; s <= i; s++) {
            const double dc = dot_d(qc, C + s * d_c, d_c), dr = dot_d(qr, K + s * d_r, d_r);
            const double m = fmax(fmax(fabs(dc), fabs(dr)),
                                  fmax(fmax(fabs(tau * dc), fabs(tau * dr)),
                                       fabs(tau * (dc + dr))));
            if (!(m <= wm)) {
                wm = m;
                worst = s;
                wc = dc;
                wr = dr;
            }
        }
        /* attention.c computes tau (q_lat C^T), then adds tau (q_rope K^T) */
        const double z = tau * (wc + wr);
        const char *what;
        if (fabs(wr) > fmax32)
            what = "the RoPE term q_rope·k_rope";
        else if (fabs(wc) > fmax32)
            what = "the content term (q_nope·w_uk)·c_kv";
        else if (fabs(tau * wc) > fmax32)
            what = "softmax_scale × the content term";
        else if (fabs(tau * wr) > fmax32)
            what = "softmax_scale × the RoPE term";
        else if (fabs(z) > fmax32)
            what = "the logit softmax_scale × (content + RoPE term)";
        else
            what = "an intermediate float32 sum of the logit";
        snprintf(out, len,
                 "attention logits overflow float32 (max %.4g) at token %zu, "
                 "head %zu, key %zu: %s exceeds it (in double precision: "
                 "content q·c = %.4g, RoPE q·k = %.4g, softmax_scale %.4g, "
                 "logit %.4g; largest |q_rope| entry of the query %.4g)",
                 fmax32, i, h, worst, what, wc, wr, tau, z, maxabs(qr, d_r));
        return;
    }
    if (stage_bad(U, T, H, d_c, "the aggregation attention·c_kv", out, len) ||
        stage_bad(O, T, H, d_v, "the value projection U·w_uv", out, len) ||
        stage_bad(Y, T, 0, D, "the output projection O·w_o", out, len))
        return;
    snprintf(out, len, "the comparison with attn_out is not a finite number");
}
