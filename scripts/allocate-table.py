#!/usr/bin/env python3
"""scripts/allocate-table.py WORKDIR BUDGET... — the tables of the
`qmla allocate` validation (scripts/allocate-validate.sh, docs/allocate.md)
from the files that script wrote in WORKDIR: alloc-B.h5 and eval-B.h5 per
budget, eval-uni-C.h5 per uniform configuration, ppl.h5. Writes
WORKDIR/per_layer.tsv, WORKDIR/summary.tsv and WORKDIR/table.md.

Also WORKDIR/pareto.h5, a qmla-results file with the tables the figures
allocate-pareto and allocate-strip read (`qmla figures WORKDIR/pareto.h5
-o DIR --only allocate-pareto,allocate-strip`): /allocate_pareto (one row
per uniform configuration, allocation and bf16: kind_index 0 uniform,
1 allocated, 2 bf16, 3 the measured search of scripts/allocate-search.py
when WORKDIR/search.tsv exists; on_front 1 for the uniform configurations no other
uniform one beats at fewer or equal bytes) and /allocate_strip (one row per
budget and layer), each group with its provenance attributes (this script,
its command line, the git commit, the SHA-256 of every input).

Measured per-layer error: /eval nmse_out (both caches, RTN), the mean over
cells, as `qmla eval` prints it; the model-level error is its sum over
layers, as the allocation's pred_total. Spearman: average ranks (ties)."""
import datetime
import os
import hashlib
import subprocess
import sys

import h5py
import numpy as np


def ranks(x):
    x = np.asarray(x, float)
    order = np.argsort(x, kind="mergesort")
    r = np.empty(len(x))
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
            j += 1
        r[order[i:j + 1]] = (i + j) / 2.0
        i = j + 1
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    return float(np.corrcoef(ra, rb)[0, 1])


def eval_layers(path):
    g = h5py.File(path, "r")["eval"]
    out = {}
    for L, v in zip(g["layer"][...], g["nmse_out"][...]):
        out.setdefault(int(L), []).append(float(v))
    return {L: float(np.mean(v)) for L, v in out.items()}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def provenance(g, inputs):
    g.attrs["tool"] = "scripts/allocate-table.py"
    g.attrs["command_line"] = " ".join(sys.argv)
    g.attrs["created_utc"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        root = __file__.rsplit("/", 2)[0]
        g.attrs["git_commit"] = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True,
                                               text=True).stdout.strip()
    except OSError:
        g.attrs["git_commit"] = ""
    for k, p in inputs.items():
        g.attrs[k] = p
        g.attrs[k + "_sha256"] = sha256(p)


def write_pareto(w, budgets, uni, mean_bpb):
    rows = []  # kind_index, name, bytes, bpb, pred, meas
    for c, u in uni.items():
        rows.append((0, c, u["bytes"], u["bpb"], u["pred"], u["meas"]))
    strip = []
    inputs = {"ppl": f"{w}/ppl.h5"}
    for bi, b in enumerate(budgets):
        f = h5py.File(f"{w}/alloc-{b}.h5", "r")["allocate"]
        cfg = [x.decode() for x in f["config"][...]]
        name = "mix" + "".join(f"{c[1]}{c[3]}" for c in cfg)
        ev = eval_layers(f"{w}/eval-{b}.h5")
        rows.append((1, b, float(f.attrs["bytes_per_token"]), mean_bpb[name], float(f.attrs["pred_total"]),
                     float(np.sum(list(ev.values())))))
        for L, c, by in zip(f["layer"][...], cfg, f["bytes_per_token"][...]):
            strip.append((bi, b, int(L), int(c[1]), int(c[3]), float(by)))
        inputs[f"allocation_{bi}"] = f"{w}/alloc-{b}.h5"
    rows.append((2, "bf16", 640.0625, mean_bpb["bf16"], 0.0, 0.0))  # 2 (256 + 64) + 4/64
    # the measured search of scripts/allocate-search.py, when it has run
    if os.path.exists(f"{w}/search.tsv"):
        for line in open(f"{w}/search.tsv").read().strip().split("\n")[1:]:
            b, _, by, bp = line.split("\t")[:4]
            rows.append((3, b, float(by), float(bp), float("nan"), float("nan")))
        inputs["search_ppl"] = f"{w}/search-ppl.h5"
    front = []
    for r in rows:
        front.append(int(r[0] == 0 and not any(q[0] == 0 and q[2] <= r[2] and q[3] < r[3] for q in rows)))
    with h5py.File(f"{w}/pareto.h5", "w") as h:
        h.attrs["format"] = "qmla-results"
        h.attrs["format_version"] = 1
        g = h.create_group("allocate_pareto")
        provenance(g, inputs)
        g["kind_index"] = np.array([r[0] for r in rows], np.int32)
        g["kind_index"].attrs["description"] = ("0 uniform, 1 allocated (qmla allocate), 2 bf16, "
                                                "3 measured search (scripts/allocate-search.py)")
        g["name"] = np.array([r[1] for r in rows], dtype=h5py.string_dtype())
        g["bytes_per_token"] = np.array([r[2] for r in rows])
        g["bpb_mean"] = np.array([r[3] for r in rows])
        g["bpb_mean"].attrs["description"] = "bits/byte, mean over the held-out texts (qmla ppl)"
        g["pred_total"] = np.array([r[4] for r in rows])
        g["measured_total"] = np.array([r[5] for r in rows])
        g["measured_total"].attrs["description"] = "sum over layers of qmla eval's nmse_out (RTN)"
        g["on_front"] = np.array(front, np.int32)
        s = h.create_group("allocate_strip")
        provenance(s, inputs)
        s["budget_index"] = np.array([r[0] for r in strip], np.int32)
        s["budget"] = np.array([r[1] for r in strip], dtype=h5py.string_dtype())
        s["layer"] = np.array([r[2] for r in strip], np.int32)
        s["c_bits"] = np.array([r[3] for r in strip], np.int32)
        s["r_bits"] = np.array([r[4] for r in strip], np.int32)
        s["bytes_per_token"] = np.array([r[5] for r in strip])


def main():
    w, budgets = sys.argv[1], sys.argv[2:]
    ppl = h5py.File(f"{w}/ppl.h5", "r")["ppl_table"]
    bpb = {}
    for t, c, v in zip(ppl["text"][...], ppl["config"][...], ppl["bits_per_byte"][...]):
        bpb.setdefault(c.decode(), {})[t.decode().rsplit("/", 1)[-1]] = float(v)
    texts = sorted({k for d in bpb.values() for k in d})
    mean_bpb = {c: float(np.mean([d[t] for t in texts])) for c, d in bpb.items()}
    # uniform configurations: bytes and predicted total from the C4R4 file's candidates
    cand = h5py.File(f"{w}/alloc-C4R4.h5", "r")["allocate/candidates"]
    names = [x.decode() for x in cand["config"][...]]
    uni = {}
    for c in sorted(set(names)):
        sel = [i for i, n in enumerate(names) if n == c]
        ev = eval_layers(f"{w}/eval-uni-{c}.h5")
        uni[c] = dict(bytes=float(np.mean(cand["bytes_per_token"][...][sel])),
                      pred=float(np.sum(cand["pred_nmse"][...][sel])),
                      meas=float(np.sum(list(ev.values()))), bpb=mean_bpb[c],
                      per_text=bpb[c])
    per_layer = ["budget\tlayer\tconfig\tbytes_per_token\tpred_nmse\tmeasured_nmse"]
    summary = ["kind\tname\tbytes_per_token\tpred_total\tmeasured_total\t" +
               "\t".join(f"bpb_{t}" for t in texts) + "\tbpb_mean"]
    md = []
    md.append("| budget | B/token (budget → reached) | allocation (layers 0–5) | predicted / measured error (sum over layers) | Spearman, 6 layers | bits/byte allocated | best uniform ≤ budget | uniform at the next bytes ≥ reached (best there) | cheapest uniform at least as good |")
    md.append("|---|---|---|---|---|---|---|---|---|")
    P, M = [], []
    for b in budgets:
        f = h5py.File(f"{w}/alloc-{b}.h5", "r")["allocate"]
        ev = eval_layers(f"{w}/eval-{b}.h5")
        cfg = [x.decode() for x in f["config"][...]]
        pred = f["pred_nmse"][...]
        meas = [ev[int(L)] for L in f["layer"][...]]
        for L, c, by, p, m in zip(f["layer"][...], cfg, f["bytes_per_token"][...], pred, meas):
            per_layer.append(f"{b}\t{L}\t{c}\t{by:.4f}\t{p:.6e}\t{m:.6e}")
        P += list(pred)
        M += list(meas)
        rho = spearman(pred, meas)
        name = "mix" + "".join(f"{c[1]}{c[3]}" for c in cfg)
        reached = float(f.attrs["bytes_per_token"])
        budget = float(f.attrs["budget_bytes_per_token"])
        summary.append(f"alloc\t{b}\t{reached:.4f}\t{f.attrs['pred_total']:.6e}\t{np.sum(meas):.6e}\t" +
                       "\t".join(f"{bpb[name][t]:.5f}" for t in texts) + f"\t{mean_bpb[name]:.5f}")
        within = [c for c in uni if uni[c]["bytes"] <= budget + 1e-9]
        above = [c for c in uni if uni[c]["bytes"] >= reached - 1e-9]
        bw = min(within, key=lambda c: uni[c]["bpb"]) if within else None
        # the next uniform cost at or above the bytes reached, best there
        nxt = min(uni[c]["bytes"] for c in above) if above else None
        ba = min((c for c in above if uni[c]["bytes"] == nxt), key=lambda c: uni[c]["bpb"]) if above else None
        good = [c for c in uni if uni[c]["bpb"] <= mean_bpb[name]]
        bg = min(good, key=lambda c: (uni[c]["bytes"], uni[c]["bpb"])) if good else None
        fmt = lambda c: "—" if c is None else f"{c} ({uni[c]['bytes']:.1f} B) {uni[c]['bpb']:.5f}"
        md.append(f"| {b} | {budget:.2f} → {reached:.2f} | {' '.join(cfg)} | "
                  f"{f.attrs['pred_total']:.4f} / {np.sum(meas):.4f} | {rho:.3f} | "
                  f"{mean_bpb[name]:.5f} | {fmt(bw)} | {fmt(ba)} | {fmt(bg)} |")
    for c in sorted(uni, key=lambda c: uni[c]["bytes"]):
        u = uni[c]
        summary.append(f"uniform\t{c}\t{u['bytes']:.4f}\t{u['pred']:.6e}\t{u['meas']:.6e}\t" +
                       "\t".join(f"{u['per_text'][t]:.5f}" for t in texts) + f"\t{u['bpb']:.5f}")
    summary.append(f"bf16\tbf16\t640.0625\t0\t0\t" + "\t".join(f"{bpb['bf16'][t]:.5f}" for t in texts) +
                   f"\t{mean_bpb['bf16']:.5f}")
    rho_all = spearman(P, M)
    # every (layer, uniform candidate) point: predicted (candidates table) vs measured
    CP, CM = [], []
    for c in uni:
        ev = eval_layers(f"{w}/eval-uni-{c}.h5")
        for i, n in enumerate(names):
            if n == c:
                CP.append(float(cand["pred_nmse"][i]))
                CM.append(ev[int(cand["layer"][i])])
    ratio = np.array(CP) / np.array(CM)
    up = [uni[c]["pred"] for c in uni]
    um = [uni[c]["meas"] for c in uni]
    md.append("")
    md.append(f"Pooled over the 5 budgets × 6 layers: Spearman(predicted, measured per-layer NMSE) = {rho_all:.3f}; "
              f"over the 16 uniform configurations' model totals: {spearman(up, um):.3f}; "
              f"over all 96 (layer, candidate) points: {spearman(CP, CM):.3f}, predicted/measured "
              f"median {np.median(ratio):.3f} (range {ratio.min():.3f}–{ratio.max():.3f}). "
              f"bits/byte: mean over the texts {', '.join(texts)}; bf16 {mean_bpb['bf16']:.5f}.")
    write_pareto(w, budgets, uni, mean_bpb)
    open(f"{w}/per_layer.tsv", "w").write("\n".join(per_layer) + "\n")
    open(f"{w}/summary.tsv", "w").write("\n".join(summary) + "\n")
    open(f"{w}/table.md", "w").write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
