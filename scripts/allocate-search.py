#!/usr/bin/env python3
"""scripts/allocate-search.py WORKDIR [CAL_TOKENS] [TOKENS] — the measured
search baseline of issue 23 for `qmla allocate` (docs/allocate.md), after
scripts/allocate-validate.sh has filled WORKDIR:

  1. per-layer sensitivity measured on the model: for every layer l and
     candidate k, `qmla ppl` of the configuration with layer l at k and every
     other layer at C8R8 (96 files), against uniform C8R8, on the first
     CAL_TOKENS (default 4096) tokens of each held-out text: delta[l, k] =
     bits/byte - bits/byte(C8R8), mean over the texts (the KVTuner-style
     search, which runs the model per candidate);
  2. the same exact knapsack as `qmla allocate` (a DP over layers on the
     integer bytes of the candidates table, ties to the smaller cost) on
     delta instead of the operator model's prediction, at each budget of
     WORKDIR/alloc-*.h5 -> WORKDIR/search-B.h5 (allocation files);
  3. `qmla ppl` of the search allocations on TOKENS (default 16384) tokens
     per text, as the validation scored the operator-model allocations.
Writes WORKDIR/search.tsv and WORKDIR/search.md; prints the CPU seconds of
the measurement (children's user + system time)."""
import os
import resource
import shutil
import subprocess
import sys

import h5py
import numpy as np

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
Q = os.environ.get("QMLA_BIN", os.path.join(root, "build", "cli", "qmla"))
BUDGETS = ["4.5bits", "C4R4", "3.5bits", "3bits", "2.5bits"]


def cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def ppl(w, out, cfgs, tokens):
    t0 = cpu()
    cmd = ["nice", "-n", "19", Q, "ppl", os.path.join(root, "models", "tiny-mla"),
           "--text", os.path.join(root, "data", "heldout", "prose.txt.gz"),
           "--text", os.path.join(root, "data", "heldout", "code.txt.gz"),
           "--config", ",".join(cfgs), "--tokens", str(tokens), "--context", "512",
           "--threads", "2", "--force", "-o", out]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    t = h5py.File(out, "r")["ppl_table"]
    v = {}
    for c, x in zip(t["config"][...], t["bits_per_byte"][...]):
        v.setdefault(c.decode(), []).append(float(x))
    return {c: float(np.mean(x)) for c, x in v.items()}, cpu() - t0


def write_alloc(template, path, bits):
    shutil.copy(template, path)
    with h5py.File(path, "r+") as f:
        f["allocate/c_bits"][...] = [b[0] for b in bits]
        f["allocate/r_bits"][...] = [b[1] for b in bits]
        f["allocate"].attrs["budget"] = "measured search (scripts/allocate-search.py)"


def name_of(bits):
    return "mix" + "".join(f"{c}{r}" for c, r in bits)


def solve(cost, val, cap):
    """Exact grouped knapsack, as lib/allocate/solve.c: least layer-order sum."""
    L, K = cost.shape
    lo = cost.min(axis=1)
    g = 0
    for l in range(L):
        for k in range(K):
            g = np.gcd(g, int(cost[l, k] - lo[l]))
    g = g or 1
    C = min((cap - lo.sum()) // g, int((cost.max(axis=1) - lo).sum()) // g)
    if C < 0:
        return None
    w = (cost - lo[:, None]) // g
    D = np.zeros(C + 1)
    Dc = np.zeros(C + 1, np.int64)
    pick = np.zeros((L, C + 1), np.int64)
    for l in range(L):
        N = np.full(C + 1, np.inf)
        Nc = np.zeros(C + 1, np.int64)
        for c in range(C + 1):
            for k in range(K):
                if w[l, k] > c or not np.isfinite(D[c - w[l, k]]):
                    continue
                v = D[c - w[l, k]] + val[l, k]
                vc = Dc[c - w[l, k]] + w[l, k]
                if v < N[c] or (v == N[c] and vc < Nc[c]):
                    N[c], Nc[c], pick[l, c] = v, vc, k
        D, Dc = N, Nc
    ch, c = [0] * L, C
    for l in range(L - 1, -1, -1):
        ch[l] = int(pick[l, c])
        c -= int(w[l, ch[l]])
    return ch


def main():
    w = sys.argv[1]
    cal = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 16384
    tmpl = f"{w}/alloc-C4R4.h5"
    cand = h5py.File(tmpl, "r")["allocate/candidates"]
    names = [x.decode() for x in cand["config"][...]]
    layers = sorted(set(int(x) for x in cand["layer"][...]))
    L = len(layers)
    K = len(names) // L
    ctx = int(h5py.File(tmpl, "r")["allocate"].attrs["context"])
    cbits = [(int(n[1]), int(n[3])) for n in names[:K]]
    cost = np.rint(cand["bytes_per_token"][...] * ctx).astype(np.int64).reshape(L, K)
    files = []
    for l in range(L):
        for k in range(K):
            bits = [(8, 8)] * L
            bits[l] = cbits[k]
            path = f"{w}/one-{l}-{names[k]}.h5"
            write_alloc(tmpl, path, bits)
            files.append((l, k, path, name_of(bits)))
    v, cpu_cal = ppl(w, f"{w}/search-cal.h5", ["C8R8"] + [f[2] for f in files], cal)
    delta = np.zeros((L, K))
    for l, k, _, nm in files:
        delta[l, k] = v[nm] - v["C8R8"]
    rows = ["budget\tsearch_allocation\tbytes_per_token"]
    picks = {}
    for b in BUDGETS:
        a = h5py.File(f"{w}/alloc-{b}.h5", "r")["allocate"]
        cap = int(np.floor(a.attrs["budget_bytes_per_token"] * L * ctx + 1e-6))
        ch = solve(cost, delta, cap)
        bits = [cbits[k] for k in ch]
        write_alloc(tmpl, f"{w}/search-{b}.h5", bits)
        picks[b] = (bits, sum(cost[l, ch[l]] for l in range(L)) / (L * ctx))
    v2, cpu_eval = ppl(w, f"{w}/search-ppl.h5", [f"{w}/search-{b}.h5" for b in BUDGETS], tokens)
    base = h5py.File(f"{w}/ppl.h5", "r")["ppl_table"]
    bo = {}
    for c, x in zip(base["config"][...], base["bits_per_byte"][...]):
        bo.setdefault(c.decode(), []).append(float(x))
    bo = {c: float(np.mean(x)) for c, x in bo.items()}
    md = ["| budget | operator model: allocation, bits/byte | measured search: allocation, B/token, bits/byte |",
          "|---|---|---|"]
    for b in BUDGETS:
        a = h5py.File(f"{w}/alloc-{b}.h5", "r")["allocate"]
        ab = [(int(x[1]), int(x[3])) for x in (y.decode() for y in a["config"][...])]
        bits, bpt = picks[b]
        sb = v2[name_of(bits)]
        rows.append(f"{b}\t{' '.join(f'C{c}R{r}' for c, r in bits)}\t{bpt:.4f}\t{sb:.5f}\t"
                    f"{' '.join(f'C{c}R{r}' for c, r in ab)}\t{bo[name_of(ab)]:.5f}")
        md.append(f"| {b} | {' '.join(f'C{c}R{r}' for c, r in ab)}, {bo[name_of(ab)]:.5f} | "
                  f"{' '.join(f'C{c}R{r}' for c, r in bits)}, {bpt:.2f}, {sb:.5f} |")
    rows[0] += "\tsearch_bpb_mean\toperator_allocation\toperator_bpb_mean"
    md.append("")
    md.append(f"Measured search: {L * K} configurations scored on {cal} tokens per text, "
              f"{cpu_cal:.0f} CPU s (qmla ppl, children's user + system time); the scoring of the "
              f"5 search allocations on {tokens} tokens took {cpu_eval:.0f} CPU s more.")
    open(f"{w}/search.tsv", "w").write("\n".join(rows) + "\n")
    np.savetxt(f"{w}/search-delta.tsv", delta, delimiter="\t", header="\t".join(names[:K]), fmt="%.6f")
    open(f"{w}/search.md", "w").write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
