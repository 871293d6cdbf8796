#!/usr/bin/python3
"""numpy_sweep.py — a plain NumPy implementation of the matched-NMSE protocol
(docs/math.md §2-4), written independently of the C library. Two uses:

  * the independent computation the test suite compares `qmla sweep` with
    (float64, --compare RESULTS.h5: exit 1 if any response or route NMSE
    differs by more than --rtol), and
  * the comparison of the sweep benchmark (float32, --time: seconds per
    layer-cell).

Usage:
  numpy_sweep.py CAPTURE.h5 [--layers 0,1] [--cells a,b] [--bits 4] [--group 64]
                 [--meta f16|f32|q8] [--nmse 0.01] [--dtype float64|float32]
                 [--compare RESULTS.h5 --rtol 1e-4] [--time]
Needs numpy and h5py (Debian: python3-numpy python3-h5py; run with
/usr/bin/python3).
"""
import argparse
import sys
import time

import h5py
import numpy as np


def qdq(x, bits, group, meta):
    """QDQ of x [T, w] (float32) exactly as docs/math.md §2 defines it."""
    x = np.asarray(x, dtype=np.float32)
    T, w = x.shape
    g = min(group, w)
    if w % g:
        raise SystemExit(f"group {group} does not divide width {w}")
    L = np.float32(2 ** bits - 1)
    xg = x.reshape(T, w // g, g)
    lo = xg.min(axis=2) + np.float32(0)  # a zero minimum is +0
    hi = xg.max(axis=2) + np.float32(0)
    scale = (hi - lo) / L  # float32 IEEE division
    if meta == "q8":
        scale, lo = q8_meta(lo, hi, L)
    elif meta == "f16":
        with np.errstate(over="ignore"):
            s16, l16 = scale.astype(np.float16), lo.astype(np.float16)
        if not (np.isfinite(s16).all() and np.isfinite(l16).all()):
            raise SystemExit("float16 metadata overflow")
        scale, lo = s16.astype(np.float32), l16.astype(np.float32)
    lo3, sc3 = lo[..., None], scale[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        u = (xg - lo3) / sc3
    q = np.where(sc3 == 0, np.float32(0), np.clip(np.rint(u), 0, L))
    # fmaf(q, scale, lo): q*scale is exact in float64, one rounding to
    # float64 of the sum, then to float32 (matches fmaf except in rare
    # double-rounding cases, far below the comparison tolerance)
    xh = (q.astype(np.float64) * sc3.astype(np.float64) + lo3).astype(np.float32)
    return xh.reshape(T, w)


def f16_up(v):
    """Smallest float16 >= v (v >= 0, float32), as float32."""
    with np.errstate(over="ignore"):
        h = v.astype(np.float16)
    h = np.where(h.astype(np.float32) < v, np.nextafter(h, np.float16(np.inf)), h)
    if not np.isfinite(h).all():
        raise SystemExit("q8 metadata: super-scale beyond float16")
    return h.astype(np.float32)


def q8_meta(lo, hi, L):
    """Compact q8 metadata (docs/quantizer.md): per token float16 super-scales
    M (minima) and S (steps), per group int8 minimum and uint8 step codes.
    lo, hi: [T, n_groups] float32 -> stored (scale, lo)."""
    M = f16_up(np.abs(lo).max(axis=1) / np.float32(127))[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        m = np.where(M > 0, np.clip(np.floor(lo / M), -128, 127), np.float32(0))
    l = (m * M).astype(np.float32)
    sp = ((hi - l) / L).astype(np.float32)
    S = f16_up(sp.max(axis=1) / np.float32(255))[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(S > 0, np.minimum(np.float32(255), np.ceil(sp / S)), np.float32(0))
    return (sc * S).astype(np.float32), l


def attention(qc, qr, C, K, tau):
    """qc [H,T,dc], qr [H,T,dr], C [T,dc], K [T,dr] -> A [H,T,T] (causal)."""
    T = C.shape[0]
    Z = tau * (qc @ C.T + qr @ K.T)
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    Z[:, mask] = -np.inf
    Z -= Z.max(axis=2, keepdims=True)
    A = np.exp(Z)
    A /= A.sum(axis=2, keepdims=True)
    return A


def project(U, w_uv, w_o):
    """U [H,T,dc] -> Y [T,D] = concat_h(U[h] w_uv[h]^T) w_o^T."""
    O = np.einsum("htc,hvc->thv", U, w_uv, optimize=True)
    T = O.shape[0]
    return O.reshape(T, -1) @ w_o.T


def sequence(w, C, K, qn, qr, tau, args, dt):
    """Both paths of one sequence: list of dicts (content, rope)."""
    qc = np.einsum("htn,hnc->htc", qn, w["w_uk"], optimize=True)
    A = attention(qc, qr, C, K, tau)
    Y = project(A @ C, w["w_uv"], w["w_o"])
    yy = float(np.sum(Y.astype(np.float64) ** 2))
    out = []
    for path, X in (("content", C), ("rope", K)):
        X32 = X.astype(np.float32)
        D = qdq(X32, args.bits, args.group, args.meta).astype(np.float64) - X32
        xx = float(np.sum(X32.astype(np.float64) ** 2))
        dd = float(np.sum(D ** 2))
        rec = dict(path=path, degenerate=0)
        if xx == 0 or dd == 0 or yy == 0:
            rec.update(degenerate=1, response=0.0, nmse_out=0.0, m=0.0, a=0.0, i=0.0, qdq=0.0)
            out.append(rec)
            continue
        E = (np.sqrt(args.nmse * xx / dd) * D).astype(np.float32).astype(dt)
        ee = float(np.sum(E.astype(np.float64) ** 2))
        if path == "content":
            At = attention(qc + 0, qr, C + E, K, tau)  # logits of C + E
            dA = At - A
            Ym = project(dA @ C, w["w_uv"], w["w_o"])
            Ya = project(A @ E, w["w_uv"], w["w_o"])
            Yi = project(dA @ E, w["w_uv"], w["w_o"])
            tot = Ym + Ya + Yi
        else:
            At = attention(qc, qr, C, K + E, tau)
            Ym = project((At - A) @ C, w["w_uv"], w["w_o"])
            Ya = Yi = np.zeros_like(Ym)
            tot = Ym
        s = lambda v: float(np.sum(v.astype(np.float64) ** 2)) / yy
        nmse_cache = ee / xx
        rec.update(nmse_cache=nmse_cache, nmse_out=s(tot), m=s(Ym), a=s(Ya), i=s(Yi),
                   qdq=dd / xx)
        rec["response"] = rec["nmse_out"] / nmse_cache
        out.append(rec)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("capture")
    ap.add_argument("--layers")
    ap.add_argument("--cells")
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--group", type=int, default=64)
    ap.add_argument("--meta", default="f16", choices=["f16", "f32", "q8"])
    ap.add_argument("--nmse", type=float, default=0.01)
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--compare")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--time", action="store_true")
    args = ap.parse_args()
    dt = np.dtype(args.dtype)

    f = h5py.File(args.capture, "r")
    cfg = f["config"].attrs
    tau = float(cfg["softmax_scale"])
    layers = sorted(f["layers"], key=int)
    if args.layers:
        layers = [l for l in layers if int(l) in {int(x) for x in args.layers.split(",")}]
    want_cells = set(args.cells.split(",")) if args.cells else None
    results = {}
    timings = []
    for l in layers:
        g = f["layers"][l]
        w = {k: g[k][...].astype(np.float32).astype(dt) for k in ("w_uk", "w_uv", "w_o")}
        for cname in sorted(g["cells"]):
            if want_cells and cname not in want_cells:
                continue
            c = g["cells"][cname]
            t0 = time.perf_counter()  # the timing includes reading the cell, as qmla's does
            arrs = {k: c[k][...].astype(np.float32) for k in ("c_kv", "k_rope", "q_nope", "q_rope")}
            for s in range(arrs["c_kv"].shape[0]):
                recs = sequence(w, arrs["c_kv"][s].astype(dt), arrs["k_rope"][s].astype(dt),
                                arrs["q_nope"][s].astype(dt), arrs["q_rope"][s].astype(dt),
                                tau, args, dt)
                for r in recs:
                    results[(int(l), cname, s, r["path"])] = r
            timings.append(time.perf_counter() - t0)
    if args.time:
        print(f"numpy_seconds_per_layer_cell {np.mean(timings):.4f} over {len(timings)} layer-cells "
              "(reading the cell's tensors included)")
        sys.stdout.flush()
    if args.compare:
        r = h5py.File(args.compare, "r")["responses"]
        cols = {k: r[k][...] for k in ("layer", "seq", "response", "nmse_out",
                                       "nmse_out_matching", "nmse_out_aggregation",
                                       "nmse_out_interaction", "nmse_qdq", "degenerate")}
        cells = r["cell"].asstr()[...]
        paths = r["path"].asstr()[...]
        bad = checked = 0
        worst = 0.0
        for k in range(len(cells)):
            key = (int(cols["layer"][k]), cells[k], int(cols["seq"][k]), paths[k])
            if key not in results:
                continue
            ref = results[key]
            checked += 1
            if int(cols["degenerate"][k]) != ref["degenerate"]:
                print(f"MISMATCH {key}: degenerate {cols['degenerate'][k]} vs {ref['degenerate']}")
                bad += 1
                continue
            for col, rk in (("response", "response"), ("nmse_out", "nmse_out"),
                            ("nmse_out_matching", "m"), ("nmse_out_aggregation", "a"),
                            ("nmse_out_interaction", "i"), ("nmse_qdq", "qdq")):
                a, b = float(cols[col][k]), ref[rk]
                # interaction is a second-order route (~nu^2): compare it
                # relative to the total output NMSE, not to itself
                scale = max(abs(b), 1e-300) if col != "nmse_out_interaction" else max(ref["nmse_out"], 1e-300)
                err = abs(a - b) / scale
                worst = max(worst, err)
                if err > args.rtol:
                    bad += 1
                    print(f"MISMATCH {key} {col}: qmla {a:.9g} numpy {b:.9g} rel {err:.3g}")
        print(f"compared {checked} items ({len(results)} computed here): worst relative "
              f"difference {worst:.3g}, {bad} above rtol {args.rtol}")
        if checked == 0 or checked != len(results) or bad:
            sys.exit(1)


if __name__ == "__main__":
    main()
