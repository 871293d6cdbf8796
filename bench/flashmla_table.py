#!/usr/bin/env python3
"""bench/flashmla_table.py — join one device call's two timing files into the
FlashMLA side-by-side table of issue 19 (docs/decode.md).

  bench/flashmla_table.py QMLA.tsv FLASHMLA.tsv OUT.tsv [OUT.md]

QMLA.tsv: bench_decode --variants-fmla (every kernel variant beside our BF16
decode, rows "decode h<H> sq1"); FLASHMLA.tsv: bench_flashmla (FlashMLA's BF16
dense decode on the same points, the same timing method). Both must come from
the same device call (their copy rows are printed for the reader to compare).
Per point (H, batch, context): FlashMLA's µs; our BF16 — its fastest variant
(0; 3, the split-parallel combine; 5 and 6, the head rows on one tile), named,
and the times of variants 5 and 6 over variant 3's; C4R4, C2R4 and
C8R8 — their fastest variant, named; ratios to our best BF16 and to FlashMLA;
GB/s and % of the copy bandwidth of the file each figure came from. Standard
library only.
"""
import sys

import tablelib
from tablelib import best


def main(argv):
    st = tablelib.usage(argv, __doc__, lambda n: n in (4, 5))
    if st is not None:
        return st
    q, fm = tablelib.read(argv[1]), tablelib.read(argv[2])
    qcopy = [r for r in q if r["kind"] == "copy"]
    fcopy = [r for r in fm if r["kind"] == "copy"]
    if not qcopy or not fcopy:
        sys.stderr.write("flashmla_table: a file without its copy row\n")
        return 1
    pts = {}
    for r in q:
        if r["kind"].startswith("decode"):
            pts.setdefault((r["kind"], int(r["batch"]), int(r["context"])), []).append(r)
    cols = ["H", "batch", "context", "flashmla_us", "flashmla_pct_copy", "flashmla_nmse",
            "bf16_best", "bf16_best_us", "bf16_v0_us", "bf16_pct_copy", "flashmla_over_bf16",
            "c4r4_best", "c4r4_us", "c4r4_pct_copy", "c4r4_over_bf16", "c4r4_over_flashmla",
            "c2r4_best", "c2r4_us", "c2r4_over_bf16", "c2r4_over_flashmla",
            "bf16_v3_us", "bf16_v5_us", "bf16_v5_over_v3", "bf16_v6_us", "bf16_v6_over_v3",
            "c8r8_best", "c8r8_us", "c8r8_over_bf16", "c8r8_over_flashmla"]
    out = []
    for f in fm:
        if not f["kind"].startswith("decode"):
            continue
        key = (f["kind"], int(f["batch"]), int(f["context"]))
        rows = pts.get(key)
        if not rows:
            sys.stderr.write("flashmla_table: no qmla rows for %s b %d ctx %d\n" % key)
            return 1
        v0 = [r for r in rows if r["config"] == "BF16"]
        bf = best(rows, "BF16")
        c4, c2, c8 = best(rows, "C4R4"), best(rows, "C2R4"), best(rows, "C8R8")
        byc = {r["config"]: r for r in rows}
        b3, b5, b6 = byc.get("BF16 v3"), byc.get("BF16 v5"), byc.get("BF16 v6")
        fu, bu = float(f["median_us"]), float(bf["median_us"])
        c4u, c2u = float(c4["median_us"]), float(c2["median_us"])
        out.append({
            "H": f["kind"].split()[1][1:], "batch": f["batch"], "context": f["context"],
            "flashmla_us": "%.2f" % fu, "flashmla_pct_copy": f["pct_copy"],
            "flashmla_nmse": f["nmse"],
            "bf16_best": tablelib.variant(bf),
            "bf16_best_us": "%.2f" % bu, "bf16_v0_us": v0[0]["median_us"] if v0 else "-",
            "bf16_pct_copy": bf["pct_copy"], "flashmla_over_bf16": "%.3f" % (fu / bu),
            "c4r4_best": tablelib.variant(c4),
            "c4r4_us": "%.2f" % c4u, "c4r4_pct_copy": c4["pct_copy"],
            "c4r4_over_bf16": "%.3f" % (c4u / bu), "c4r4_over_flashmla": "%.3f" % (c4u / fu),
            "c2r4_best": tablelib.variant(c2),
            "c2r4_us": "%.2f" % c2u, "c2r4_over_bf16": "%.3f" % (c2u / bu),
            "c2r4_over_flashmla": "%.3f" % (c2u / fu),
            "bf16_v3_us": b3["median_us"] if b3 else "-",
            "bf16_v5_us": b5["median_us"] if b5 else "-",
            "bf16_v5_over_v3": "%.3f" % (float(b5["median_us"]) / float(b3["median_us"]))
                               if b3 and b5 else "-",
            "bf16_v6_us": b6["median_us"] if b6 else "-",
            "bf16_v6_over_v3": "%.3f" % (float(b6["median_us"]) / float(b3["median_us"]))
                               if b3 and b6 else "-",
            "c8r8_best": c8["config"].split()[-1] if c8 and " v" in c8["config"] else "-",
            "c8r8_us": c8["median_us"] if c8 else "-",
            "c8r8_over_bf16": "%.3f" % (float(c8["median_us"]) / bu) if c8 else "-",
            "c8r8_over_flashmla": "%.3f" % (float(c8["median_us"]) / fu) if c8 else "-",
        })
    tablelib.write_tsv(argv[3], cols, out)
    md = ["copy bandwidth: %s GB/s (bench_decode), %s GB/s (bench_flashmla)"
          % (qcopy[0]["GBps"], fcopy[0]["GBps"]), "",
          "| H | b | context | FlashMLA µs (% copy) | our BF16 µs (variant, % copy) "
          "| FlashMLA / BF16 | C4R4 µs (variant, % copy) | C4R4 / BF16 | C4R4 / FlashMLA "
          "| C2R4 / BF16 | C2R4 / FlashMLA | BF16 v5, v6 / v3 | C8R8 / BF16 (variant) |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in out:
        md.append("| %s | %s | %sK | %s (%s %%) | %s (%s, %s %%) | %s× | %s (%s, %s %%) | %s× "
                  "| %s× | %s× | %s× | %s×, %s× | %s× (%s) |" % (
                      r["H"], r["batch"], int(r["context"]) // 1024, r["flashmla_us"],
                      r["flashmla_pct_copy"], r["bf16_best_us"], r["bf16_best"],
                      r["bf16_pct_copy"], r["flashmla_over_bf16"], r["c4r4_us"],
                      r["c4r4_best"], r["c4r4_pct_copy"], r["c4r4_over_bf16"],
                      r["c4r4_over_flashmla"], r["c2r4_over_bf16"], r["c2r4_over_flashmla"],
                      r["bf16_v5_over_v3"], r["bf16_v6_over_v3"], r["c8r8_over_bf16"],
                      r["c8r8_best"]))
    tablelib.write_text(md, argv[4] if len(argv) == 5 else None)
    return 0


if __name__ == "__main__":
    tablelib.run(main)
