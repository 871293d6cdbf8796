#!/usr/bin/python3
"""numpy_operator.py — a plain NumPy (float64) implementation of the
operator–error model (docs/math.md §5–6), written independently of the C
library (lib/operator/jvp.c, lib/operator/predict.c, lib/operator/intervene.c). Two uses:

  * the independent computation the tests compare `qmla jvp`, `qmla predict`
    and `qmla intervene` with (--compare RESULTS.h5: exit 1 when a point
    differs by more than --rtol), and
  * the NumPy timing of the sensitivity benchmark (--time-sens: seconds per
    sequence for the exact sensitivities of all tokens, both paths).

Independent routes: the JVP is the dense softmax derivative on explicit
[H, T, T] tensors; the exact token sensitivity is ||M_i||_F^2 summed over the
rows i >= t with M_i = sum_h a_hi (tau q_hi ⊗ v_hi + P_h) formed explicitly
(d_b x D per row; small shapes only) — not the Gram expansion of the C code;
finite responses come from full forwards on the perturbed caches. The
quantizer is bench/numpy_sweep.py's (the one definition of docs/math.md §2).
Random draws of the interventions are GSL's and are not reproduced: the
comparison checks each item's deterministic values (local gains, finite and
joint responses, cross term) and recomputes the headline statistics from the
stored ratios.

Usage:
  numpy_operator.py CAPTURE.h5 --compare RESULTS.h5 [--rtol 2e-3]
  numpy_operator.py CAPTURE.h5 --time-sens [--layers 0] [--cells a]
Needs numpy and h5py (run with /usr/bin/python3).
"""
import argparse
import math
import os
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from numpy_sweep import qdq  # noqa: E402  the quantizer of docs/math.md §2


class Layer:
    def __init__(self, f, li, cfg):
        g = f[f"layers/{li}"]
        self.w_uk = g["w_uk"][...].astype(np.float64)  # [H, dn, dc]
        self.w_uv = g["w_uv"][...].astype(np.float64)  # [H, dv, dc]
        self.w_o = g["w_o"][...].astype(np.float64)    # [D, H*dv]
        H, dv = cfg["H"], cfg["d_v"]
        # P_h = W_UV,h^T W_O,h^T  [H, dc, D]
        wo = self.w_o.reshape(self.w_o.shape[0], H, dv)
        self.P = np.einsum("hvc,dhv->hcd", self.w_uv, wo)


def config(f):
    c = f["config"].attrs
    names = {"H": "n_heads", "D": "d_model", "d_c": "kv_lora_rank",
             "d_n": "qk_nope_head_dim", "d_r": "qk_rope_head_dim", "d_v": "v_head_dim"}
    cfg = {k: int(c[v]) for k, v in names.items()}
    cfg["softmax_scale"] = float(c["softmax_scale"])
    return cfg


def forward(L, tau, qn, qr, C, K):
    """Clean pass: A [H,T,T], U [H,T,dc], Y [T,D], Qc [H,T,dc]."""
    Qc = np.einsum("htn,hnc->htc", qn, L.w_uk)
    Z = tau * (np.einsum("htc,sc->hts", Qc, C) + np.einsum("htr,sr->hts", qr, K))
    T = C.shape[0]
    mask = np.tril(np.ones((T, T), dtype=bool))
    Z = np.where(mask, Z, -np.inf)
    Z -= Z.max(axis=2, keepdims=True)
    A = np.exp(Z)
    A /= A.sum(axis=2, keepdims=True)
    U = np.einsum("hts,sc->htc", A, C)
    Y = np.einsum("htc,hcd->td", U, L.P)
    return A, U, Y, Qc


def jvp(L, tau, A, Qc, qr, C, dC, dK):
    dZ = np.zeros_like(A)
    if dC is not None:
        dZ += tau * np.einsum("htc,sc->hts", Qc, dC)
    if dK is not None:
        dZ += tau * np.einsum("htr,sr->hts", qr, dK)
    dA = A * (dZ - (A * dZ).sum(axis=2, keepdims=True))  # A is 0 above the diagonal
    dU = np.einsum("hts,sc->htc", dA, C)
    if dC is not None:
        dU += np.einsum("hts,sc->htc", A, dC)
    return np.einsum("htc,hcd->td", dU, L.P)


def sensitivities(L, tau, A, U, Qc, qr, C):
    """Raw tr(J_t^T J_t)/d_b for every token, both paths, from explicit M_i."""
    H, T, _ = A.shape
    sc, sr = np.zeros(T), np.zeros(T)
    for t in range(T):
        a = A[:, t:, t]                               # [H, n]
        v = np.einsum("hic,hcd->hid", C[t][None, None, :] - U[:, t:, :], L.P)  # [H,n,D]
        Mc = tau * np.einsum("hi,hic,hid->icd", a, Qc[:, t:, :], v) + \
            np.einsum("hi,hcd->icd", a, L.P)
        Mr = tau * np.einsum("hi,hir,hid->ird", a, qr[:, t:, :], v)
        sc[t] = (Mc ** 2).sum() / C.shape[1]
        sr[t] = (Mr ** 2).sum() / qr.shape[2]
    return sc, sr


def direction(X, bits, group, nu):
    D = qdq(X.astype(np.float32), bits, group, "f16").astype(np.float64) - X
    return D * np.sqrt(nu * (X ** 2).sum() / (D ** 2).sum())


def rank(x):
    order = np.argsort(x, kind="mergesort")
    r = np.empty(len(x))
    r[order] = np.arange(len(x), dtype=float)
    xs = x[order]
    i = 0
    while i < len(x):  # average ranks of ties
        j = i
        while j + 1 < len(x) and xs[j + 1] == xs[i]:
            j += 1
        r[order[i:j + 1]] = (i + j) / 2.0
        i = j + 1
    return r


def spearman(x, y):
    return float(np.corrcoef(rank(np.asarray(x)), rank(np.asarray(y)))[0, 1])


def seq_tensors(f, layer, cell, q):
    g = f[f"layers/{layer}/cells/{cell}"]
    f64 = np.float64
    return (g["q_nope"][q].astype(f64), g["q_rope"][q].astype(f64),
            g["c_kv"][q].astype(f64), g["k_rope"][q].astype(f64))


class Checker:
    def __init__(self, rtol):
        self.rtol, self.bad, self.n = rtol, 0, 0

    def close(self, what, got, want, rtol=None, atol=0.0):
        self.n += 1
        rtol = self.rtol if rtol is None else rtol
        if not (abs(got - want) <= atol + rtol * abs(want)) or not np.isfinite(got):
            self.bad += 1
            if self.bad <= 10:
                print(f"MISMATCH {what}: qmla {got!r}, numpy {want!r}")


def compare_points(f, R, grp, chk):
    cfg = config(f)
    tau = cfg["softmax_scale"]
    g = R[grp]
    n = len(g["layer"])
    cells = [c.decode() if isinstance(c, bytes) else c for c in g["cell"][...]]
    layers = g["layer"][...]
    seqs = g["seq"][...]
    cache = {}
    pred = grp == "predict"
    gj, gf, pa = [], [], []
    pts = {}  # (layer, cell, seq, bits, group, nu, path) -> (g_fin, pred_trace, pred_alloc, heldout)
    for k in range(n):
        key = (int(layers[k]), cells[k], int(seqs[k]))
        if key not in cache:
            L = Layer(f, key[0], cfg)
            qn, qr, C, K = seq_tensors(f, *key)
            A, U, Y, Qc = forward(L, tau, qn, qr, C, K)
            sig = None
            if pred:
                sc, sr = sensitivities(L, tau, A, U, Qc, qr, C)
                yy = (Y ** 2).sum()
                sig = (sc * (C ** 2).sum() / yy, sr * (K ** 2).sum() / yy)
            cache = {key: (L, qn, qr, C, K, A, U, Y, Qc, sig)}
        L, qn, qr, C, K, A, U, Y, Qc, sig = cache[key]
        path, bits, group, nu = int(g["path"][k]), int(g["bits"][k]), int(g["group"][k]), \
            float(g["nmse"][k])
        if g["degenerate"][k]:
            continue
        X = C if path == 0 else K
        E = direction(X, bits, group, nu)
        dY = jvp(L, tau, A, Qc, qr, C, E if path == 0 else None, E if path == 1 else None)
        yy, xx, ee = (Y ** 2).sum(), (X ** 2).sum(), (E ** 2).sum()
        g_jvp = ((dY ** 2).sum() / yy) / (ee / xx)
        Ap, Up, Yp, _ = forward(L, tau, qn, qr, C + E if path == 0 else C,
                                K + E if path == 1 else K)
        g_fin = (((Yp - Y) ** 2).sum() / yy) / (ee / xx)
        where = f"{grp} point {k} (layer {key[0]} {key[1]} seq {key[2]} path {path} INT{bits} G{group} nu {nu:g})"
        chk.close(where + " g_jvp", float(g["g_jvp"][k]), g_jvp)
        chk.close(where + " g_finite", float(g["g_finite"][k]), g_fin, rtol=max(chk.rtol, 1e-2 if nu < 1e-3 else chk.rtol))
        gj.append(g_jvp)
        gf.append(g_fin)
        if pred:
            w = (E ** 2).sum(axis=1) / ee
            s = sig[path]
            off = int(g["alloc_offset"][k])
            chk.close(where + " allocation", float(np.abs(g["allocation"][off:off + len(w)] - w).max()), 0.0,
                      atol=1e-5)
            chk.close(where + " pred_trace", float(g["pred_trace"][k]), float(s.mean()))
            chk.close(where + " pred_alloc", float(g["pred_alloc"][k]), float((w * s).sum()))
            pa.append(float((w * s).sum()))
            pts[key + (bits, group, nu, path)] = (g_fin, float(s.mean()), float((w * s).sum()),
                                                 int(g["heldout"][k]))
    sp = spearman(gj, gf)
    chk.close(f"/{grp} spearman_jvp_vs_finite", float(g.attrs["spearman_jvp_vs_finite"]), sp,
              atol=0.02)
    if pred:
        e = [[], [], []]
        for kk, (gfc, ptc, pac, _) in pts.items():
            if kk[-1] != 0 or kk[:-1] + (1,) not in pts:
                continue
            gfp, ptp, pap, _ = pts[kk[:-1] + (1,)]
            meas = np.log(gfp / gfc)
            e[0].append(abs(meas))
            e[1].append(abs(np.log(ptp / ptc) - meas))
            e[2].append(abs(np.log(pap / pac) - meas))
        for name, v in zip(("cache_only", "operator_only", "operator_allocation"), e):
            chk.close(f"/predict mae_log_ratio_{name}", float(g.attrs[f"mae_log_ratio_{name}"]),
                      float(np.mean(v)), atol=1e-3)
        ho = [(v[2], v[0]) for v in pts.values() if v[3]]
        chk.close("/predict spearman (held out)", float(g.attrs["spearman"]),
                  spearman([a for a, _ in ho], [b for _, b in ho]), atol=0.02)
        chk.close("/predict median_abs_log_error", float(g.attrs["median_abs_log_error"]),
                  float(np.median([abs(np.log(a / b)) for a, b in ho])), atol=1e-3)
    return n


class GslMT19937:
    """GSL's gsl_rng_mt19937, written from its definition: seeding as
    mt_set (Knuth's 1812433253 recurrence; seed 0 means 4357), the standard
    MT19937 twist and tempering; uniform_int as gsl_rng_uniform_int
    (scale = 0xffffffff // n, reject k >= n)."""

    def __init__(self, seed):
        s = seed & 0xFFFFFFFF or 4357
        mt = [s]
        for i in range(1, 624):
            mt.append((1812433253 * (mt[-1] ^ (mt[-1] >> 30)) + i) & 0xFFFFFFFF)
        self.mt, self.i = mt, 624

    def get(self):
        mt = self.mt
        if self.i >= 624:
            for k in range(624):
                y = (mt[k] & 0x80000000) | (mt[(k + 1) % 624] & 0x7FFFFFFF)
                mt[k] = mt[(k + 397) % 624] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
            self.i = 0
        y = mt[self.i]
        self.i += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        return y ^ (y >> 18)

    def uniform_int(self, n):
        scale = 0xFFFFFFFF // n
        while True:
            k = self.get() // scale
            if k < n:
                return k


def quantile_sorted(x, f):
    """gsl_stats_quantile_from_sorted_data: linear between order statistics."""
    idx = f * (len(x) - 1)
    lhs = int(idx)
    d = idx - lhs
    return x[lhs] if lhs == len(x) - 1 else (1 - d) * x[lhs] + d * x[lhs + 1]


def bootstrap_ci(lr, B, seed):
    """The percentile bootstrap of the mean of lr as docs/math.md (the
    interventions) states it: B resamples of len(lr) draws with replacement from one mt19937
    stream seeded with the run seed (per control and path), each draw's
    log ratio summed in draw order; the 2.5 % and 97.5 % quantiles, exp."""
    g, n, means = GslMT19937(seed), len(lr), []
    for _ in range(B):
        acc = 0.0
        for _ in range(n):
            acc += lr[g.uniform_int(n)]
        means.append(acc / n)
    means.sort()
    return math.exp(quantile_sorted(means, 0.025)), math.exp(quantile_sorted(means, 0.975))


def compare_interventions(f, R, chk):
    cfg = config(f)
    tau = cfg["softmax_scale"]
    g = R["interventions"]
    bits, group, nu = int(g.attrs["bits"]), int(g.attrs["group"]), float(g.attrs["nmse"])
    reps = int(g.attrs["reps"])
    cells = [c.decode() if isinstance(c, bytes) else c for c in g["cell"][...]]
    n = len(cells)
    good = [k for k in range(n) if not g["degenerate"][k]]
    for k in good:
        lay, q = int(g["layer"][k]), int(g["seq"][k])
        L = Layer(f, lay, cfg)
        qn, qr, C, K = seq_tensors(f, lay, cells[k], q)
        A, U, Y, Qc = forward(L, tau, qn, qr, C, K)
        yy = (Y ** 2).sum()
        EC, EK = direction(C, bits, group, nu), direction(K, bits, group, nu)
        out = []
        for path, X, E in ((0, C, EC), (1, K, EK)):
            dY = jvp(L, tau, A, Qc, qr, C, E if path == 0 else None, E if path == 1 else None)
            chk.close(f"interventions item {k} g_jvp path {path}",
                      float(g["g_jvp_content" if path == 0 else "g_jvp_rope"][k]),
                      ((dY ** 2).sum() / yy) / ((E ** 2).sum() / (X ** 2).sum()))
            _, _, Yp, _ = forward(L, tau, qn, qr, C + EC if path == 0 else C,
                                  K + EK if path == 1 else K)
            out.append(((Yp - Y) ** 2).sum() / yy)
        _, _, Yj, _ = forward(L, tau, qn, qr, C + EC, K + EK)
        oj = ((Yj - Y) ** 2).sum() / yy
        chk.close(f"interventions item {k} response_joint", float(g["response_joint"][k]), oj / nu)
        chk.close(f"interventions item {k} cross", float(g["cross"][k]), oj - out[0] - out[1],
                  atol=2e-3 * (out[0] + out[1]))
    for c in ("sign", "permute", "isotropic"):
        for p in ("content", "rope"):
            r = g[f"ratio_{c}_{p}"][...].reshape(n, reps)[good]
            chk.close(f"gain_ratio_{c}_{p}", float(g.attrs[f"gain_ratio_{c}_{p}"]),
                      float(np.exp(np.log(r).mean())), rtol=1e-9)
            lo, hi = float(g.attrs[f"gain_ratio_{c}_{p}_ci_low"]), float(g.attrs[f"gain_ratio_{c}_{p}_ci_high"])
            chk.n += 1
            if not (lo <= float(g.attrs[f"gain_ratio_{c}_{p}"]) <= hi):
                chk.bad += 1
                print(f"MISMATCH gain_ratio_{c}_{p} outside its CI [{lo}, {hi}]")
            # the median of the ratios, and the bootstrap CI recomputed
            # draw for draw (math.log/exp: the C library's, as the C code)
            lr = [math.log(v) for v in r.ravel()]
            chk.close(f"median_gain_ratio_{c}_{p}", float(g.attrs[f"median_gain_ratio_{c}_{p}"]),
                      float(math.exp(np.median(lr))), rtol=1e-12)
            B = int(g.attrs["bootstrap_resamples"])
            if lr and B:
                rlo, rhi = bootstrap_ci(lr, B, int(g.attrs["seed"]))
                chk.close(f"gain_ratio_{c}_{p}_ci_low", lo, rlo, rtol=1e-12)
                chk.close(f"gain_ratio_{c}_{p}_ci_high", hi, rhi, rtol=1e-12)
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("capture")
    ap.add_argument("--compare")
    ap.add_argument("--rtol", type=float, default=2e-3)
    ap.add_argument("--time-sens", action="store_true")
    ap.add_argument("--layers", default=None)
    ap.add_argument("--cells", default=None)
    a = ap.parse_args()
    f = h5py.File(a.capture, "r")
    if a.time_sens:
        cfg = config(f)
        lay = int((a.layers or sorted(f["layers"], key=int)[0]).split(",")[0])
        cell = (a.cells or sorted(f[f"layers/{lay}/cells"])[0]).split(",")[0]
        L = Layer(f, lay, cfg)
        qn, qr, C, K = seq_tensors(f, lay, cell, 0)
        t0 = time.perf_counter()
        A, U, Y, Qc = forward(L, cfg["softmax_scale"], qn, qr, C, K)
        sensitivities(L, cfg["softmax_scale"], A, U, Qc, qr, C)
        print(f"numpy exact sensitivities: {time.perf_counter() - t0:.3f} s per sequence "
              f"(T {C.shape[0]}, both paths, float64)")
        return 0
    if not a.compare:
        ap.error("nothing to do: --compare RESULTS.h5 or --time-sens")
    R = h5py.File(a.compare, "r")
    chk = Checker(a.rtol)
    for grp in ("jvp", "predict"):
        if grp in R:
            n = compare_points(f, R, grp, chk)
            print(f"/{grp}: {n} points compared")
    if "interventions" in R:
        n = compare_interventions(f, R, chk)
        print(f"/interventions: {n} items compared")
    print(f"{chk.n - chk.bad} agree, {chk.bad} differ (rtol {a.rtol})")
    return 1 if chk.bad else 0


if __name__ == "__main__":
    sys.exit(main())
