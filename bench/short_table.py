#!/usr/bin/env python3
"""bench/short_table.py — issue 19's "no point where C4R4 is slower than
BF16" from one bench_decode --variants TSV: per point (H, s_q, b, context),
C4R4 / C2R4 variant 0 (before) and variant 7 (the default since H200 run 10,
after) as ratios to our BF16 variant 0 (the table's reference) and to the
fastest of our BF16 variants (0, 3, 5), with the worst of each column.

  python3 bench/short_table.py VARIANTS.tsv [OUT.md]

Standard library only. Exit 0; 1 on a missing column or row."""
import csv
import sys
from collections import defaultdict


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 1
    pts = defaultdict(dict)
    with open(argv[1]) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            if not r["kind"].startswith("decode h"):
                continue
            pts[(r["kind"], int(r["batch"]), int(r["context"]))][r["config"]] = float(r["median_us"])
    lines = ["| shape | b | context | BF16 v0 µs | best BF16 µs (variant) | C4R4 v0 / BF16 | C4R4 v7 / BF16 | "
             "C4R4 v7 / best BF16 | C4R4 v7 / v0 | C2R4 v0 / BF16 | C2R4 v7 / BF16 | C2R4 v7 / best BF16 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    worst = defaultdict(lambda: (0.0, None))
    n_slow = defaultdict(int)
    def key(k):
        h, s = k[0].split()[1:]
        return (int(h[1:]), int(s[2:]), k[1], k[2])
    for k in sorted(pts, key=key):
        v = pts[k]
        try:
            b0 = v["BF16"]
            c40, c47, c20, c27 = v["C4R4 v0"], v["C4R4 v7"], v["C2R4 v0"], v["C2R4 v7"]
        except KeyError as e:
            sys.stderr.write("missing %s at %s\n" % (e, k))
            return 1
        bb = min((t, c) for c, t in v.items() if c.startswith("BF16"))
        cols = {"c4v0": c40 / b0, "c4v7": c47 / b0, "c4v7b": c47 / bb[0], "c4v7v0": c47 / c40,
                "c2v0": c20 / b0, "c2v7": c27 / b0, "c2v7b": c27 / bb[0]}
        for c, x in cols.items():
            if x > worst[c][0]:
                worst[c] = (x, k)
            if x > 1.0:
                n_slow[c] += 1
        lines.append("| %s | %d | %d | %.1f | %.1f (%s) | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |" % (
            k[0][7:], k[1], k[2], b0, bb[0], bb[1], cols["c4v0"], cols["c4v7"], cols["c4v7b"],
            cols["c4v7v0"], cols["c2v0"], cols["c2v7"], cols["c2v7b"]))
    lines.append("")
    for c in ["c4v0", "c4v7", "c4v7b", "c4v7v0", "c2v0", "c2v7", "c2v7b"]:
        x, k = worst[c]
        lines.append("- %s: worst %.3f at %s b %d ctx %d; %d of %d points above 1" % (
            c, x, k[0][7:], k[1], k[2], n_slow[c], len(pts)))
    text = "\n".join(lines) + "\n"
    if len(argv) > 2:
        with open(argv[2], "w") as f:
            f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
