#!/usr/bin/python3
"""experiments/operator/tabulate.py RESULTS.h5 — per-layer tables (markdown)
of the groups `qmla jvp`, `qmla predict` and `qmla intervene` wrote: measured
versus predicted RoPE/content log-ratios at the development direction, the
allocation diagnostics (effective token count 1/sum w_t^2, and the
correlation of w_t with sigma_t), and the per-layer intervention ratios.
Reads only the results file (h5py + numpy; run with /usr/bin/python3)."""
import sys

import h5py
import numpy as np

f = h5py.File(sys.argv[1], "r")
p = f["predict"]
cell = p["cell"].asstr()[...]
layer, seq, path = p["layer"][...], p["seq"][...], p["path"][...]
bits, group, nmse = p["bits"][...], p["group"][...], p["nmse"][...]
heldout = p["heldout"][...]
gf, gj = p["g_finite"][...], p["g_jvp"][...]
pt, pa = p["pred_trace"][...], p["pred_alloc"][...]
T, off = p["T"][...], p["alloc_offset"][...]
alloc = p["allocation"][...]
sig = p["sensitivity"][...]
s_layer, s_cell, s_seq = p["sens_layer"][...], p["sens_cell"].asstr()[...], p["sens_seq"][...]
s_off, s_T = p["sens_offset"][...], p["sens_T"][...]


def sigma(l, c, q, b):
    k = np.where((s_layer == l) & (s_cell == c) & (s_seq == q))[0][0]
    o, n = s_off[k], s_T[k]
    return sig[o + b * n: o + (b + 1) * n]


dev = heldout == 0
print("### Development direction (INT4, G64, nu 1e-3): per layer, means over cells")
print()
print("| layer | R_C (finite) | R_P (finite) | log(R_P/R_C) measured | operator only | operator + allocation | eff. tokens w_C | eff. tokens w_P | corr(w_C, σ_C) |")
print("|---|---|---|---|---|---|---|---|---|")
for l in sorted(set(layer)):
    rows = []
    for c in sorted(set(cell)):
        m = dev & (layer == l) & (cell == c)
        C, P = np.where(m & (path == 0))[0], np.where(m & (path == 1))[0]
        for kc, kp in zip(C, P):
            wC = alloc[off[kc]: off[kc] + T[kc]]
            wP = alloc[off[kp]: off[kp] + T[kp]]
            sC = sigma(l, c, seq[kc], 0)
            rows.append((gf[kc], gf[kp], np.log(gf[kp] / gf[kc]), np.log(pt[kp] / pt[kc]),
                         np.log(pa[kp] / pa[kc]), 1 / (wC ** 2).sum(), 1 / (wP ** 2).sum(),
                         np.corrcoef(wC, sC)[0, 1]))
    r = np.array(rows).mean(axis=0)
    print(f"| {l} | {r[0]:.3f} | {r[1]:.3f} | {r[2]:+.2f} | {r[3]:+.2f} | {r[4]:+.2f} | {r[5]:.0f} | {r[6]:.0f} | {r[7]:+.2f} |")
print()
print(f"(T = {T[0]} tokens per sequence)")
print()
if "interventions" in f:
    g = f["interventions"]
    reps = int(g.attrs["reps"])
    il = g["layer"][...]
    print("### Interventions per layer: geometric-mean gain ratio over cells and repetitions")
    print()
    print("| layer | sign C | permute C | isotropic C | sign P | permute P | isotropic P | joint R | cross / (single sum) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for l in sorted(set(il)):
        m = il == l
        vals = []
        for pth in ("content", "rope"):
            for ctl in ("sign", "permute", "isotropic"):
                r = g[f"ratio_{ctl}_{pth}"][...].reshape(len(il), reps)[m]
                vals.append(np.exp(np.log(r).mean()))
        print(f"| {l} | " + " | ".join(f"{v:.3f}" for v in vals) +
              f" | {g['response_joint'][...][m].mean():.3f} | {g['cross_relative'][...][m].mean():+.3f} |")

# frozen validation by held-out category (nothing is fitted; the
# development direction is INT4 / G64 / nu 1e-3)
print()
print("### Frozen operator+allocation predictor by held-out category (both paths)")
print()
print("| held-out directions | points | Spearman | median \\|log(pred/measured)\\| |")
print("|---|---|---|---|")


def spear(x, y):
    rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
    return np.corrcoef(rx, ry)[0, 1]


ok = p["degenerate"][...] == 0
cats = [("INT2, INT3, INT8 (G64, nu 1e-3)", (bits != 4) & (group == 64) & (nmse == 1e-3)),
        ("INT4, nu 1e-4 and 1e-2", (bits == 4) & (group == 64) & (nmse != 1e-3)),
        ("INT4, group 32", (bits == 4) & (group == 32)),
        ("all held out", heldout == 1),
        ("development (INT4, G64, nu 1e-3)", heldout == 0)]
for name, m in cats:
    m = m & ok
    print(f"| {name} | {m.sum()} | {spear(pa[m], gf[m]):.3f} | "
          f"{np.median(np.abs(np.log(pa[m] / gf[m]))):.3f} |")

# frozen validation by cell group: each seed's cells pooled (every cell is
# held out from the predictor, which fits nothing; the rows say whether it
# holds on cells it was never looked at with — e.g. prose-s2 and code-s2)
seeds = sorted({c.rsplit("-s", 1)[1] for c in cell if "-s" in c})
if len(seeds) > 1 or len(set(cell)) > 2:
    print()
    print("### Frozen operator+allocation predictor by cells (held-out directions, both paths)")
    print()
    print("| cells | points | Spearman | median \\|log(pred/measured)\\| |")
    print("|---|---|---|---|")
    groups = [(f"seed {s} ({', '.join(sorted(c for c in set(cell) if c.endswith('-s' + s)))})",
               np.array([c.endswith("-s" + s) for c in cell])) for s in seeds]
    groups += [(f"corpus {k}", np.array([c.startswith(k + "-s") for c in cell]))
               for k in sorted({c.rsplit("-s", 1)[0] for c in cell})]
    for name, m in groups:
        m = m & ok & (heldout == 1)
        print(f"| {name} | {m.sum()} | {spear(pa[m], gf[m]):.3f} | "
              f"{np.median(np.abs(np.log(pa[m] / gf[m]))):.3f} |")
