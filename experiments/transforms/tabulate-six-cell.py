#!/usr/bin/python3
"""tabulate-six-cell.py — the markdown tables of experiments/transforms/README.md
(six-cell section) from the /eval files that run-six-cell.sh writes.

    /usr/bin/python3 experiments/transforms/tabulate-six-cell.py DIR > DIR/tables.md

DIR holds eval-c4-none.h5, eval-c4-sink4-local128.h5,
eval-objective-c4-none.h5 and (optional) eval-c2-none.h5, as run-six-cell.sh
writes them; each may also be split into several files PREFIX-*.h5 (e.g. one
per method group or layer), whose rows are merged (a (method, layer, cell)
present twice must have the same values). Every number is read from the
/eval datasets (one row per method, layer and evaluation cell); "per layer"
values are means over the evaluation cells, "mean" is the mean over layers
of those, as `qmla eval` prints them. The objective table takes RTN and
QuantMLA from the C4R4 / none set when the objective set lacks them.
"""
import glob
import os
import sys

import h5py
import numpy as np

NAMES = {"rtn": "RTN", "smoothquant": "SmoothQuant† (α 0.5)", "quarot": "QuaRot†",
         "quantmla-content": "QuantMLA content only", "quantmla": "QuantMLA (both paths)",
         "quantmla-recon": "QuantMLA, plain-reconstruction objective"}


ORDER = ["rtn", "smoothquant", "quarot", "quantmla-content", "quantmla-recon", "quantmla"]
KEYS = ("nmse_out", "nmse_c", "nmse_p", "pos", "bound")


def load_file(path):
    g = h5py.File(path, "r")["eval"]
    dec = lambda a: [x.decode() if isinstance(x, bytes) else x for x in a]
    return {"method": dec(g["method"][...]), "cell": dec(g["cell"][...]), "layer": list(g["layer"][...]),
            "nmse_out": list(g["nmse_out"][...]), "nmse_c": list(g["nmse_out_content"][...]),
            "nmse_p": list(g["nmse_out_rope"][...]), "pos": list(g["pos_score_err"][...]),
            "bound": list(g["rope_bound_nmse"][...]), "cmd": [g.attrs["command"]]}


def merge(parts):
    rows = {}
    cmds = []
    for e in parts:
        cmds += e["cmd"]
        for i, m in enumerate(e["method"]):
            k = (m, int(e["layer"][i]), e["cell"][i])
            v = tuple(float(e[x][i]) for x in KEYS)
            if k in rows and rows[k] != v:
                sys.exit("tabulate-six-cell: %s given twice with different values" % (k,))
            rows[k] = v
    ks = sorted(rows, key=lambda k: (ORDER.index(k[0]) if k[0] in ORDER else len(ORDER), k[0], k[1], k[2]))
    out = {"method": [k[0] for k in ks], "layer": np.array([k[1] for k in ks]), "cell": [k[2] for k in ks],
           "cmd": cmds}
    for j, x in enumerate(KEYS):
        out[x] = np.array([rows[k][j] for k in ks])
    return out


def load(d, prefix):
    files = sorted(glob.glob(os.path.join(d, prefix + ".h5")) + glob.glob(os.path.join(d, prefix + "-*.h5")))
    if not files:
        return None
    return merge([load_file(f) for f in files])


def only(e, keep):
    sel = [i for i, m in enumerate(e["method"]) if m in keep]
    out = {"method": [e["method"][i] for i in sel], "cell": [e["cell"][i] for i in sel], "cmd": e["cmd"]}
    for x in ("layer",) + KEYS:
        out[x] = np.asarray(e[x])[sel]
    return out


def methods(e):
    out = []
    for m in e["method"]:
        if m not in out:
            out.append(m)
    return out


def per_layer(e, m, key="nmse_out"):
    """{layer: mean over cells} for method m."""
    sel = [i for i, x in enumerate(e["method"]) if x == m]
    layers = sorted(set(int(e["layer"][i]) for i in sel))
    return {l: float(np.mean([e[key][i] for i in sel if e["layer"][i] == l])) for l in layers}


def per_cell(e, m, key="nmse_out"):
    return {(int(e["layer"][i]), e["cell"][i]): float(e[key][i])
            for i in range(len(e["method"])) if e["method"][i] == m}


def mean(d):
    return float(np.mean(list(d.values())))


def f(x):
    return "%.3e" % x


def main_table(e, title, ref="quantmla"):
    ms = methods(e)
    pl = {m: per_layer(e, m) for m in ms}
    pc = {m: per_cell(e, m) for m in ms}
    print("### %s\n" % title)
    for c in e["cmd"]:
        print("`%s`\n" % c)
    print("| method | output NMSE (mean over layers) | %s / method | layers where %s is lower | (layer, cell) pairs where %s is lower |"
          % (NAMES.get(ref, ref), NAMES.get(ref, ref), NAMES.get(ref, ref)))
    print("|---|---|---|---|---|")
    for m in ms:
        if m == ref:
            print("| **%s** | **%s** | — | — | — |" % (NAMES.get(m, m), f(mean(pl[m]))))
            continue
        wl = sum(pl[ref][l] < pl[m][l] for l in pl[m])
        wc = sum(pc[ref][k] < pc[m][k] for k in pc[m])
        ratio = "%.2f" % (mean(pl[ref]) / mean(pl[m])) if mean(pl[m]) > 0 else "n/a"
        print("| %s | %s | %s | %d/%d | %d/%d |" % (NAMES.get(m, m), f(mean(pl[m])), ratio,
                                                  wl, len(pl[m]), wc, len(pc[m])))
    print()
    layers = sorted(pl[ms[0]])
    print("Per layer (mean over the evaluation cells; lowest in bold):\n")
    print("| layer | " + " | ".join(NAMES.get(m, m) for m in ms) + " |")
    print("|---|" + "---|" * len(ms))
    for l in layers:
        lo = min(pl[m][l] for m in ms)
        print("| %d | " % l + " | ".join(("**%s**" if pl[m][l] == lo else "%s") % f(pl[m][l]) for m in ms) + " |")
    print()
    print("Per path (mean over layers and cells):\n")
    print("| method | content-only output NMSE | RoPE-only output NMSE | positional-score error L_P | App. C.3 bound on RoPE-only NMSE |")
    print("|---|---|---|---|---|")
    for m in ms:
        sel = [i for i, x in enumerate(e["method"]) if x == m]
        print("| %s | %s | %s | %s | %s |" % (NAMES.get(m, m), f(np.mean(e["nmse_c"][sel])), f(np.mean(e["nmse_p"][sel])),
                                          f(np.mean(e["pos"][sel])), "%.1e" % np.mean(e["bound"][sel])))
    print()
    return pl


def main():
    d = sys.argv[1]
    e4 = load(d, "eval-c4-none")
    pl4 = main_table(e4, "C4R4, no protection")
    es = load(d, "eval-c4-sink4-local128")
    pls = main_table(es, "C4R4, sink4/local128")
    print("### Cumulative ablation (paper Table 3's shape), C4R4, mean over layers\n")
    print("| step | output NMSE | paper (DeepSeek-V2-Lite, MMLU %, ↑) |")
    print("|---|---|---|")
    print("| RTN | %s | 51.90 |" % f(mean(pl4["rtn"])))
    print("| + content transform | %s | 53.12 |" % f(mean(pl4["quantmla-content"])))
    print("| + RoPE transform | %s | 56.31 |" % f(mean(pl4["quantmla"])))
    print("| + sink4/local128 protection | %s | 57.95 (BF16 57.90) |" % f(mean(pls["quantmla"])))
    print("| SmoothQuant† (unprotected) | %s | 54.02 |" % f(mean(pl4["smoothquant"])))
    print("| QuaRot† (unprotected) | %s | 55.66 |" % f(mean(pl4["quarot"])))
    print()
    eo = load(d, "eval-objective-c4-none")
    have = set(eo["method"])
    eo = merge([eo, only(e4, {"rtn", "quantmla"} - have)])
    print("### Objective ablation (paper Table 7's question), C4R4, no protection\n")
    for c in eo["cmd"]:
        print("`%s`\n" % c)
    print("| objective | joint output NMSE (mean) | content-only | RoPE-only | positional-score error | layers where function-aligned is lower |")
    print("|---|---|---|---|---|---|")
    plf = per_layer(eo, "quantmla")
    for m, lab in (("rtn", "RTN (no transform)"), ("quantmla-recon", "plain reconstruction (both paths)"),
                   ("quantmla", "function-aligned (QuantMLA)")):
        sel = [i for i, x in enumerate(eo["method"]) if x == m]
        p = per_layer(eo, m)
        w = "—" if m == "quantmla" else "%d/%d" % (sum(plf[l] < p[l] for l in p), len(p))
        print("| %s | %s | %s | %s | %s | %s |" % (lab, f(mean(p)), f(np.mean(eo["nmse_c"][sel])),
                                              f(np.mean(eo["nmse_p"][sel])), f(np.mean(eo["pos"][sel])), w))
    print()
    pr, pf = per_layer(eo, "quantmla-recon"), plf
    print("| layer | plain reconstruction | function-aligned |")
    print("|---|---|---|")
    for l in sorted(pf):
        print("| %d | %s | %s |" % (l, ("**%s**" if pr[l] < pf[l] else "%s") % f(pr[l]),
                                  ("**%s**" if pf[l] <= pr[l] else "%s") % f(pf[l])))
    print()
    c2 = load(d, "eval-c2-none")
    if c2 is not None:
        main_table(c2, "C2R4, no protection (QuantMLA learned at C2R4)")


if __name__ == "__main__":
    main()
