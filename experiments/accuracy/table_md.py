#!/usr/bin/python3
"""experiments/accuracy/table_md.py — the README's two accuracy tables
(paper Table 1's and Table 3's shapes) in Markdown from the results files of
run_table.sh: /ppl_table of TABLE.h5 (main rows) and ABLATION.h5 (QuantMLA
content transform only).

  /usr/bin/python3 experiments/accuracy/table_md.py experiments/accuracy/table.h5 \
      experiments/accuracy/table-ablation.h5

Best per column within each (cache, policy) block in bold (ties: all)."""
import sys

import h5py


def rows(path):
    with h5py.File(path, "r") as f:
        t = f["ppl_table"]
        cols = {k: t[k][()] for k in t}
    n = len(cols["bits_per_byte"])
    dec = lambda v: v.decode() if isinstance(v, bytes) else str(v)
    out = []
    for i in range(n):
        out.append({k: (dec(v[i]) if v.dtype.kind in "SOU" else float(v[i])) for k, v in cols.items()})
    return out


main, abl = rows(sys.argv[1]), rows(sys.argv[2])
texts = []
for r in main:
    if r["text"] not in texts:
        texts.append(r["text"])
name = {"none": "—", "RTN": "RTN", "SmoothQuant": "SmoothQuant†", "QuaRot": "QuaRot†",
        "QuantMLA": "QuantMLA", "QuantMLA-content": "QuantMLA, content only"}
get = {}
for r in main + abl:
    get[(r["config"], r["method"], r["policy"], r["text"])] = r
tok = int(main[0]["tokens"])
print("Tokens per text: %d (%d windows of 512)\n" % (tok, tok // 512))
print("| cache | method | policy | " + " | ".join("%s | Δ" % t.split("/")[-1].split(".")[0] for t in texts) + " |")
print("|---|---|---|" + "---:|---:|" * len(texts))
bf = [get[("bf16", "none", "none", t)] for t in texts]
print("| BF16 | — | — | " + " | ".join("%.4f | " % r["bits_per_byte"] for r in bf) + " |")
methods = ["RTN", "SmoothQuant", "QuaRot", "QuantMLA"]
for cfg in ("C4R4", "C2R4"):
    for pol in ("none", "sink4/local128"):
        best = [min(round(get[(cfg, m, pol, t)]["bits_per_byte"], 4) for m in methods) for t in texts]
        for m in methods:
            cells = []
            for j, t in enumerate(texts):
                r = get[(cfg, m, pol, t)]
                v = round(r["bits_per_byte"], 4)
                s = "%.4f" % v
                d = r["delta_bits_per_byte"]
                cells.append(("**%s**" % s if v == best[j] else s) + " | %+.4f" % (0.0 if abs(d) < 5e-5 else d))
            print("| %s | %s | %s | %s |" % (cfg, name[m], pol, " | ".join(cells)))
print()
print("| step | " + " | ".join("%s %s" % (c, t.split("/")[-1].split(".")[0]) for c in ("C4R4", "C2R4") for t in texts) + " |")
print("|---|" + "---:|" * (2 * len(texts)))
steps = [("RTN", "RTN", "none"), ("+ content transform", "QuantMLA-content", "none"),
         ("+ RoPE transform (QuantMLA)", "QuantMLA", "none"),
         ("+ sink4/local128 protection", "QuantMLA", "sink4/local128"),
         ("SmoothQuant† (unprotected)", "SmoothQuant", "none"),
         ("QuaRot† (unprotected)", "QuaRot", "none")]
for label, m, pol in steps:
    cells = []
    for c in ("C4R4", "C2R4"):
        for j, t in enumerate(texts):
            r = get[(c, m, pol, t)]
            d = r["bits_per_byte"] - bf[j]["bits_per_byte"]
            cells.append("%.4f (%+.4f)" % (r["bits_per_byte"], d))
    print("| %s | %s |" % (label, " | ".join(cells)))
