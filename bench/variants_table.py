#!/usr/bin/env python3
"""bench/variants_table.py — a bench_decode --variants TSV as a Markdown table
whose ratios are to the fastest of our BF16 variants (0; 3 with the
split-parallel combine; 5 and 6 with the head rows on one tile) at each point, not
to variant 0 alone.

  bench/variants_table.py VARIANTS.tsv [KIND ...]

KIND: the rows to show ("decode h16 sq1" ...; default every kind in the file).
Per point: the best BF16 µs and its variant; for C4R4, C2R4 and C8R8 the
fastest variant, its ratio to the best BF16 and its % of the file's copy
bandwidth; and variant 2's ratio (the warp-specialised kernel). Standard
library only.
"""
import tablelib


def main(argv):
    st = tablelib.usage(argv, __doc__, lambda n: n >= 2)
    if st is not None:
        return st
    rows = [r for r in tablelib.read(argv[1]) if r["kind"].startswith("decode")]
    kinds = argv[2:] or sorted({r["kind"] for r in rows}, key=lambda k: (len(k), k))
    print("| shape | b | context | best BF16 µs (variant) | C4R4 best (variant, % copy) "
          "| C4R4 v2 | C2R4 best (variant) | C2R4 v2 | C8R8 best (variant) | C8R8 v2 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for kind in kinds:
        pts = {}
        for r in rows:
            if r["kind"] == kind:
                pts.setdefault((int(r["batch"]), int(r["context"])), {})[r["config"]] = r
        for (b, ctx), c in sorted(pts.items()):
            bf = tablelib.best(c.values(), "BF16")
            if bf is None:
                raise ValueError("%s: no BF16 row at %s b %d context %d" % (argv[1], kind, b, ctx))
            bu = float(bf["median_us"])

            def best(cfg):
                cand = [(float(r["median_us"]), k, r) for k, r in c.items()
                        if k.startswith(cfg + " v")]
                if not cand:
                    return "-", "-"
                us, k, r = min(cand)
                return "%.2f× (%s, %s %%)" % (us / bu, k.split()[-1], r["pct_copy"]), us

            def v2(cfg):
                r = c.get(cfg + " v2")
                return "%.2f×" % (float(r["median_us"]) / bu) if r else "-"

            ctxs = "%dK" % (ctx // 1024) if ctx < 1 << 20 else "%dM" % (ctx >> 20)
            shape = kind.replace("decode ", "").replace("h", "H ").replace(" sq", ", s_q ")
            print("| %s | %d | %s | %.1f (%s) | %s | %s | %s | %s | %s | %s |" % (
                shape, b, ctxs, bu, tablelib.variant(bf),
                best("C4R4")[0], v2("C4R4"), best("C2R4")[0].split(",")[0] + ")",
                v2("C2R4"), best("C8R8")[0].split(",")[0] + ")", v2("C8R8")))
    return 0


if __name__ == "__main__":
    tablelib.run(main)
