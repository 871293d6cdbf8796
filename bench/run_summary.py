#!/usr/bin/env python3
"""bench/run_summary.py TSV [CFG ...] — a bench_decode --variants TSV summed
up per kernel (H200 run 11): for each configuration and variant (default
C4R4 v7, C2R4 v7), the points where it is slower than our BF16 (variant 0)
and than the fastest BF16 variant of the same point, and its ratio range at
H 16, s_q 1, b 8 and 32 from 32K and from 128K (the issue-19 targets)."""
import csv
import sys

rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
cfgs = sys.argv[2:] or ["C4R4 v7", "C2R4 v7"]
pts = {}
for r in rows:
    if not r["kind"].startswith("decode"):
        continue
    k = (r["kind"], int(r["batch"]), int(r["context"]))
    pts.setdefault(k, {})[r["config"]] = float(r["median_us"])
print(f"{len(pts)} points in {sys.argv[1]}")
for c in cfgs:
    slow, slow_best, n = [], [], 0
    t32, t128 = [], []
    for k, d in sorted(pts.items()):
        if c not in d or "BF16" not in d:
            continue
        n += 1
        r = d[c] / d["BF16"]
        best = min(v for kk, v in d.items() if kk.startswith("BF16"))
        if r > 1:
            slow.append((k, round(r, 3)))
        if d[c] > best:
            slow_best.append((k, round(d[c] / best, 3)))
        if k[0] == "decode h16 sq1" and k[1] in (8, 32) and k[2] >= 32768:
            t32.append(r)
            if k[2] >= 131072:
                t128.append(r)
    print(f"{c}: {n} points; slower than BF16 v0 at {len(slow)}: {slow}")
    print(f"  slower than the fastest BF16 variant at {len(slow_best)}"
          + (f" ({min(x[1] for x in slow_best)}-{max(x[1] for x in slow_best)}x)" if slow_best else ""))
    if t32:
        # (a TSV without 128K points has t32 but no t128: said, not a crash)
        print(f"  H 16 s_q 1 b 8/32 >= 32K: {min(t32):.3f}-{max(t32):.3f}x BF16; >= 128K: "
              + (f"{min(t128):.3f}-{max(t128):.3f}x" if t128 else "no point"))
