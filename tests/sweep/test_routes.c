/* test_routes.c — the finite error routes (docs/math.md §4).
 * 1. In double precision (tests/ref/naive.h), the three content routes
 *    (matching, aggregation, interaction) and the single RoPE route sum to
 *    Y~ - Y exactly (to double rounding): the identity itself.
 * 2. The library's float32 sweep (qmla_sweep_sequence) reports route and
 *    total output NMSEs equal to the double reference to 1e-4 relative, its
 *    own route-sum residual against a full perturbed forward is small, and
 *    the RoPE path has exactly zero aggregation and interaction. */
#include "check.h"
#include "naive.h"
#include "qmla/quant.h"
#include "qmla/sweep.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const qmla_exec ex2 = {2}; /* two OpenMP threads */

/* E = alpha (QDQ(X) - X) with ||E||^2 = nu ||X||^2 (same definition as the
 * library, computed here with plain loops). */
static float *make_error(const float *X, size_t T, size_t w, double nu,
                         const qmla_quant_params *q)
{
    float *xh = malloc(T * w * sizeof *xh), *E = malloc(T * w * sizeof *E);
    qmla_error err;
    int st = qmla_quant_qdq(q, X, T, w, NULL, NULL, NULL, xh, &err);
    CHECK(st == 0, "qdq: %s", err.msg);
    double dd = 0, xx = 0;
    for (size_t i = 0; i < T * w; i++) {
        double d = (double)xh[i] - X[i];
        dd += d * d;
        xx += (double)X[i] * X[i];
    }
    double alpha = sqrt(nu * xx / dd);
    for (size_t i = 0; i < T * w; i++)
        E[i] = (float)(alpha * ((double)xh[i] - (double)X[i]));
    free(xh);
    return E;
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-300); }

static void run(size_t H, size_t T, size_t dc, size_t dr, unsigned seed)
{
    naive_case c;
    naive_case_init(&c, H, T, dc, 8, dr, 8, 24, seed);
    const double nu = 0.01;
    qmla_sweep_params p = qmla_sweep_defaults();
    p.nmse = nu;
    const size_t nY = T * c.D, nA = H * T * T;
    double *Y = malloc(nY * sizeof *Y), *Yt = malloc(nY * sizeof *Yt);
    double *A = malloc(nA * sizeof *A), *At = malloc(nA * sizeof *At);
    double *R[3];
    for (int k = 0; k < 3; k++)
        R[k] = malloc(nY * sizeof(double));
    naive_forward(&c, c.C, c.K, Y, A);
    const double yy = naive_sumsq(Y, nY);
    double ref[2][4]; /* [path][total, matching, aggregation, interaction] */

    for (int path = 0; path < 2; path++) {
        const int content = path == QMLA_PATH_CONTENT;
        const size_t w = content ? dc : dr;
        const float *X = content ? c.C : c.K;
        float *E = make_error(X, T, w, nu, &p.quant);
        float *Cp = malloc(T * dc * sizeof *Cp), *Kp = malloc(T * dr * sizeof *Kp);
        for (size_t i = 0; i < T * dc; i++)
            Cp[i] = c.C[i] + (content ? E[i] : 0.0f);
        for (size_t i = 0; i < T * dr; i++)
            Kp[i] = c.K[i] + (content ? 0.0f : E[i]);
        /* Y~ from a full forward on the perturbed cache (double) */
        naive_forward(&c, Cp, Kp, Yt, At);
        for (size_t i = 0; i < nA; i++)
            At[i] -= A[i]; /* A~ - A */
        double *Cd = naive_widen(c.C, T * dc);
        naive_output(&c, At, Cd, R[0]); /* matching */
        if (content) {
            /* the error as it stands in the float perturbed cache (exact in
             * double), so that the identity is tested to double rounding */
            double *Ed = malloc(T * dc * sizeof *Ed);
            for (size_t i = 0; i < T * dc; i++)
                Ed[i] = (double)Cp[i] - (double)c.C[i];
            naive_output(&c, A, Ed, R[1]);  /* aggregation */
            naive_output(&c, At, Ed, R[2]); /* interaction */
            free(Ed);
        } else {
            memset(R[1], 0, nY * sizeof(double));
            memset(R[2], 0, nY * sizeof(double));
        }
        double num = 0, den = 0, tot = 0;
        for (size_t i = 0; i < nY; i++) {
            double d = Yt[i] - Y[i], s = R[0][i] + R[1][i] + R[2][i];
            num += (d - s) * (d - s);
            den += d * d;
            tot += s * s;
        }
        CHECK(den == 0.0 ? num == 0.0 : sqrt(num / den) < 1e-9,
              "H=%zu T=%zu %s: routes do not sum to Y~ - Y: rel residual %.3e", H, T,
              qmla_path_name(path), den > 0 ? sqrt(num / den) : num);
        ref[path][0] = den / yy;
        ref[path][1] = naive_sumsq(R[0], nY) / yy;
        ref[path][2] = naive_sumsq(R[1], nY) / yy;
        ref[path][3] = naive_sumsq(R[2], nY) / yy;
        CHECK(fabs(tot / yy - ref[path][0]) <= 1e-9 * fmax(ref[path][0], 1e-300),
              "route total vs forward");
        free(Cd);
        free(E);
        free(Cp);
        free(Kp);
    }

    /* the library, float32, with verification on */
    qmla_mla_dims d = {H, c.D, dc, c.dn, dr, c.dv, c.tau};
    qmla_mla_weights w = {c.w_uk, c.w_uv, c.w_o};
    qmla_sweep_ws ws;
    qmla_error err;
    qmla_error_clear(&err);
    int st = qmla_sweep_ws_alloc(&d, T, 1, &ws, &err);
    CHECK_OK(st, err);
    qmla_response out[2];
    st = qmla_sweep_sequence(&ex2, &p, &d, T, &w, c.q_nope, c.q_rope, c.C, c.K, 1, &ws,
                             out, &err);
    CHECK_OK(st, err);
    for (int path = 0; path < 2; path++) {
        const qmla_response *r = &out[path];
        const char *pn = qmla_path_name(path);
        CHECK(!r->degenerate, "%s flagged degenerate", pn);
        CHECK(rel(r->nmse_cache, nu) < 1e-5, "%s nmse_cache %.9g != %g", pn,
              r->nmse_cache, nu);
        CHECK(rel(r->nmse_out, ref[path][0]) < 1e-4, "%s nmse_out %.8g vs ref %.8g",
              pn, r->nmse_out, ref[path][0]);
        CHECK(rel(r->response, ref[path][0] / nu) < 1e-4, "%s response", pn);
        /* R is defined on the realised cache NMSE (not the target nu) */
        CHECK(r->response == r->nmse_out / r->nmse_cache, "%s response %.17g != "
              "nmse_out / nmse_cache %.17g", pn, r->response, r->nmse_out / r->nmse_cache);
        CHECK(r->nmse_cache != nu, "%s: realised nmse_cache equals nu exactly: the "
              "check above cannot tell them apart", pn);
        CHECK(rel(r->nmse_out_matching, ref[path][1]) < 1e-4,
              "%s matching %.8g vs %.8g", pn, r->nmse_out_matching, ref[path][1]);
        /* --verify ran: the row says so, and the residual is float32
         * rounding (never exactly 0: the full forward and the route sum are
         * different computations) */
        CHECK(r->verified == 1, "%s: verified flag %d with verify on", pn, r->verified);
        if (ref[path][0] > 0.0) /* (T = 1: the RoPE path moves nothing) */
            CHECK(r->route_residual > 0.0 && r->route_residual < 1e-3,
                  "%s route residual %.3e (expected 0 < residual < 1e-3)", pn,
                  r->route_residual);
        else
            CHECK(r->route_residual == 0.0, "%s: nothing moved, residual %.3e", pn,
                  r->route_residual);
        /* the raw quantizer NMSE against its definition computed here */
        {
            const size_t w = path == QMLA_PATH_CONTENT ? dc : dr;
            const float *X = path == QMLA_PATH_CONTENT ? c.C : c.K;
            float *xh = malloc(T * w * sizeof *xh);
            qmla_error e2;
            CHECK(qmla_quant_qdq(&p.quant, X, T, w, NULL, NULL, NULL, xh, &e2) == 0,
                  "qdq: %s", e2.msg);
            double dd = 0, xx = 0;
            for (size_t i = 0; i < T * w; i++) {
                const double e = (double)xh[i] - (double)X[i];
                dd += e * e;
                xx += (double)X[i] * (double)X[i];
            }
            CHECK(rel(r->nmse_qdq, dd / xx) < 1e-12, "%s nmse_qdq %.9g vs %.9g", pn,
                  r->nmse_qdq, dd / xx);
            free(xh);
        }
        if (path == QMLA_PATH_CONTENT) {
            CHECK(rel(r->nmse_out_aggregation, ref[path][2]) < 1e-4,
                  "aggregation %.8g vs %.8g", r->nmse_out_aggregation, ref[path][2]);
            CHECK(rel(r->nmse_out_interaction, ref[path][3]) < 1e-3,
                  "interaction %.8g vs %.8g", r->nmse_out_interaction, ref[path][3]);
        } else {
            CHECK(r->nmse_out_aggregation == 0.0 && r->nmse_out_interaction == 0.0,
                  "rope path must have no aggregation/interaction route");
        }
    }
    qmla_sweep_ws_free(&ws);
    for (int k = 0; k < 3; k++)
        free(R[k]);
    free(Y);
    free(Yt);
    free(A);
    free(At);
    naive_case_free(&c);
}

/* A zero RoPE cache is degenerate: flagged, zeros, no NaN. */
static void degenerate_case(void)
{
    naive_case c;
    naive_case_init(&c, 2, 10, 64, 8, 16, 8, 12, 99);
    memset(c.K, 0, 10 * 16 * sizeof(float));
    qmla_mla_dims d = {2, 12, 64, 8, 16, 8, c.tau};
    qmla_mla_weights w = {c.w_uk, c.w_uv, c.w_o};
    qmla_sweep_params p = qmla_sweep_defaults();
    qmla_sweep_ws ws;
    qmla_error err;
    qmla_response out[2];
    CHECK_OK(qmla_sweep_ws_alloc(&d, 10, 0, &ws, &err), err);
    int st = qmla_sweep_sequence(&ex2, &p, &d, 10, &w, c.q_nope, c.q_rope, c.C, c.K, 0,
                                 &ws, out, &err);
    CHECK_OK(st, err);
    CHECK(!out[0].degenerate, "content must not be degenerate");
    CHECK(out[1].degenerate && out[1].response == 0.0 && out[1].nmse_out == 0.0,
          "zero RoPE cache: degenerate with zeros (deg %d, R %g)", out[1].degenerate,
          out[1].response);
    qmla_sweep_ws_free(&ws);
    naive_case_free(&c);
}

int main(void)
{
    qmla_blas_set_threads(1);
    run(3, 40, 64, 16, 1);
    run(2, 100, 128, 16, 2);
    run(1, 1, 64, 16, 3);
    run(4, 67, 64, 64, 4);
    degenerate_case();
    return check_summary("test_routes");
}
