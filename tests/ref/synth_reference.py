#!/usr/bin/python3
"""synth_reference.py — an independent check of a capture written by `qmla
synth` (docs/synth.md), in float64 NumPy, sharing no code with the library:

  * attn_out equals MLA attention recomputed in the non-absorbed form
    (k_nope = C w_uk^T, v = C w_uv^T, causal softmax with the max subtracted,
    y = concat_h(a v) w_o^T) from the stored tensors, to --tol relative
    (Frobenius, per sequence);
  * positions are 0..T-1; rope_cos / rope_sin are cos / sin of
    position * theta^(-2i/d_r) for --theta; k_rope and q_rope equal
    k_rope_pre and q_rope_pre rotated under the declared rope_pairing
    (interleaved pairs (2i, 2i+1), half pairs (i, i + d_r/2)), to --rope-tol
    (absolute below 1, relative above; float16 storage rounds after the
    rotation: use 1e-3 there).

Usage: synth_reference.py CAPTURE.h5 --theta 1e4 [--tol 2e-5] [--rope-tol 1e-6]
Exit 0 when everything agrees, 1 otherwise (the worst case printed).
Needs numpy and h5py (/usr/bin/python3).
"""
import argparse
import sys

import h5py
import numpy as np


def attention(c, w, s):
    """y [T, D] for sequence s of cell group c and layer weights w."""
    C = c["c_kv"][s].astype(np.float64)          # [T, dc]
    K = c["k_rope"][s].astype(np.float64)        # [T, dr]
    qn = c["q_nope"][s].astype(np.float64)       # [H, T, dn]
    qr = c["q_rope"][s].astype(np.float64)       # [H, T, dr]
    w_uk, w_uv, w_o, tau = w                     # [H,dn,dc] [H,dv,dc] [D,H*dv], scale
    H, T = qn.shape[0], qn.shape[1]
    kn = np.einsum("sj,hnj->hsn", C, w_uk)       # [H, T, dn]
    v = np.einsum("sj,hej->hse", C, w_uv)        # [H, T, dv]
    z = np.einsum("hin,hsn->his", qn, kn) + np.einsum("hir,sr->his", qr, K)
    z *= tau
    mask = np.tril(np.ones((T, T), dtype=bool))
    z = np.where(mask, z, -np.inf)
    z -= z.max(axis=2, keepdims=True)
    a = np.exp(z)
    a /= a.sum(axis=2, keepdims=True)
    o = np.einsum("his,hse->ihe", a, v).reshape(T, -1)
    return o @ w_o.T


def rotate(x, cos, sin, pairing):
    """x [..., T, dr] rotated by cos/sin [T, dr/2]."""
    P = x.shape[-1] // 2
    if pairing == "half":
        ia, ib = np.arange(P), np.arange(P) + P
    else:
        ia, ib = 2 * np.arange(P), 2 * np.arange(P) + 1
    a, b = x[..., ia], x[..., ib]
    y = np.empty_like(x)
    y[..., ia] = a * cos - b * sin
    y[..., ib] = a * sin + b * cos
    return y


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("capture")
    ap.add_argument("--theta", type=float, required=True)
    ap.add_argument("--tol", type=float, default=2e-5)
    ap.add_argument("--rope-tol", type=float, default=1e-6)
    args = ap.parse_args()
    f = h5py.File(args.capture, "r")
    cfg = f["config"].attrs
    tau = float(cfg["softmax_scale"])
    pairing = cfg["rope_pairing"]
    pairing = pairing.decode() if isinstance(pairing, bytes) else str(pairing)
    dr = int(cfg["qk_rope_head_dim"])
    worst = {"attn": (0.0, ""), "rope": (0.0, "")}
    n = 0
    for l in sorted(f["layers"], key=int):
        g = f["layers"][l]
        w = tuple(g[k][...].astype(np.float64) for k in ("w_uk", "w_uv", "w_o")) + (tau,)
        for cname in sorted(g["cells"]):
            c = g["cells"][cname]
            N, T = c["c_kv"].shape[:2]
            for s in range(N):
                n += 1
                where = f"layer {l} cell {cname} seq {s}"
                y = attention(c, w, s)
                ys = c["attn_out"][s].astype(np.float64)
                e = np.linalg.norm(y - ys) / np.linalg.norm(y)
                if e > worst["attn"][0]:
                    worst["attn"] = (e, where)
                if "k_rope_pre" not in c:
                    continue
                pos = c["positions"][s]
                if not np.array_equal(pos, np.arange(T)):
                    print(f"positions of {where}: expected 0..{T - 1}, found {pos[:4]}...")
                    worst["rope"] = (np.inf, where + " (positions)")
                    continue
                ang = pos[:, None] * args.theta ** (-2.0 * np.arange(dr // 2) / dr)
                cs, sn = c["rope_cos"][s].astype(np.float64), c["rope_sin"][s].astype(np.float64)
                errs = [np.abs(cs - np.cos(ang)).max(), np.abs(sn - np.sin(ang)).max()]
                kr = rotate(c["k_rope_pre"][s].astype(np.float64), cs, sn, pairing)
                qr = rotate(c["q_rope_pre"][s].astype(np.float64), cs, sn, pairing)
                rel = lambda a, b: (np.abs(a - b) / np.maximum(1.0, np.abs(a))).max()
                errs += [rel(kr, c["k_rope"][s]), rel(qr, c["q_rope"][s])]
                if max(errs) > worst["rope"][0]:
                    worst["rope"] = (max(errs), where)
    bad = worst["attn"][0] > args.tol or worst["rope"][0] > args.rope_tol
    print(f"{n} sequences: worst attn_out rel err {worst['attn'][0]:.3e} ({worst['attn'][1]}), "
          f"tol {args.tol:g}; worst RoPE abs err {worst['rope'][0]:.3e} ({worst['rope'][1]}), "
          f"tol {args.rope_tol:g}")
    print("INCONSISTENT" if bad else "agrees with the float64 reference")
    sys.exit(1 if bad or n == 0 else 0)


if __name__ == "__main__":
    main()
