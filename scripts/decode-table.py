#!/usr/bin/env python3
"""scripts/decode-table.py BENCH.tsv OUT.h5 [--shape KIND] [--variant vN]
[--config-variant CFG=vN ...] [--bf16-variant vN] — the
paper's Table 9 shape from a `bench_decode --variants` TSV (docs/decode.md,
"Results file"), for the runs whose HDF5 file was not kept (the H200 hopper
run 5, docs/evidence/decode-h200-2026-12-02-run5/bench_variants.tsv).

bench_decode writes /table9 itself for its plain decode rows (kind
"decode"); a --variants run labels its rows by shape (kind "decode h16
sq1") and variant (config "C4R4 v0") and leaves /table9 empty. This script
takes the rows of one shape (default "decode h16 sq1", the paper's 16 query
heads and one query token) and one kernel variant (default v0, the plan
qmla_decode_cuda_plan makes: kernels/decode_cuda.h) with the BF16 rows of
the same variant ("BF16" is v0; BF16 v3 is "BF16 v3"; --config-variant
C8R8=v9 takes that configuration's rows of another variant, e.g. each
configuration's default plan, --bf16-variant the BF16 rows'), and writes the table
/table9 exactly as lib/cache/bench_results.c lays it out: one row per
(batch, context) in the order first met, batch (int32), context (int64),
then per configuration C in BF16, C4R4, C2R4, C8R8 the columns C_us,
C_ratio (the TSV's ratio_to_bf16: the time over the time of BF16's variant
0 at the same point and call, also with --bf16-variant, which picks only
the BF16 rows' own columns), C_GBps, C_pct_copy (NaN where not measured). The root holds
format "qmla-results" and format_version 1; /table9's attributes name the
input, its SHA-256, the shape, the variant (and the configurations' own
variants, "variants": e.g. "BF16=v0 C4R4=v7 C2R4=v7 C8R8=v9"), the copy GB/s of the run and this
command line (no time stamp: the output depends on the input only).
`qmla figures OUT.h5 --only fig5b-latency,table9` draws it (docs/figures.md).
Exit 2 with a message naming the file, line and what was expected on a
malformed TSV or when no row matches."""
import hashlib
import math
import os
import sys

import h5py
import numpy as np

COLS = ("kind", "batch", "context", "config", "median_us", "ratio_to_bf16", "bytes", "GBps",
        "pct_copy")
CONFIGS = ("BF16", "C4R4", "C2R4", "C8R8")


def fail(msg):
    sys.stderr.write(f"decode-table: {msg}\n")
    sys.exit(2)


def num(path, ln, name, s):
    if s in ("", "-"):
        return math.nan
    try:
        return float(s)
    except ValueError:
        fail(f"{path}:{ln}: column {name}: expected a number, found {s!r}")


def main():
    args = sys.argv[1:]
    shape, variant, bf16v = "decode h16 sq1", "v0", None
    own = {}
    pos = []
    while args:
        a = args.pop(0)
        if a in ("--shape", "--variant", "--config-variant", "--bf16-variant"):
            if not args:
                fail(f"{a}: expected a value")
            v = args.pop(0)
            if a == "--shape":
                shape = v
            elif a == "--variant":
                variant = v
            elif a == "--bf16-variant":
                bf16v = v
            else:
                c, _, cv = v.partition("=")
                if c not in CONFIGS[1:] or not cv.startswith("v"):
                    fail(f"--config-variant {v!r}: expected CFG=vN with CFG one of "
                         f"{', '.join(CONFIGS[1:])}")
                own[c] = cv
        else:
            pos.append(a)
    if len(pos) != 2:
        fail("usage: scripts/decode-table.py BENCH.tsv OUT.h5 [--shape KIND] [--variant vN] "
             "[--config-variant CFG=vN ...] [--bf16-variant vN]")
    src, out = pos
    if not os.path.exists(src):
        fail(f"{src}: no such file")
    bv = bf16v or variant
    want = {("BF16" if bv == "v0" else f"BF16 {bv}"): "BF16"}
    used = {"BF16": bv}
    for c in CONFIGS[1:]:
        used[c] = own.get(c, variant)
        want[f"{c} {used[c]}"] = c
    header, copy_gbps = None, math.nan
    points, vals = [], {}
    for ln, line in enumerate(open(src).read().split("\n"), 1):
        if not line.strip() or line.startswith("#"):
            continue
        f = line.split("\t")
        if header is None:
            if tuple(f) != COLS:
                fail(f"{src}:{ln}: expected the header {' '.join(COLS)}, found {' '.join(f)}")
            header = f
            continue
        if len(f) != len(COLS):
            fail(f"{src}:{ln}: expected {len(COLS)} tab-separated columns, found {len(f)}")
        r = dict(zip(COLS, f))
        if r["kind"] == "copy":
            copy_gbps = num(src, ln, "GBps", r["GBps"])
        if r["kind"] != shape or r["config"] not in want:
            continue
        b = int(num(src, ln, "batch", r["batch"]))
        t = int(num(src, ln, "context", r["context"]))
        if (b, t) not in vals:
            points.append((b, t))
            vals[(b, t)] = {}
        c = want[r["config"]]
        if c in vals[(b, t)]:
            fail(f"{src}:{ln}: a second {r['config']} row for batch {b}, context {t}")
        vals[(b, t)][c] = [num(src, ln, k, r[k]) for k in
                           ("median_us", "ratio_to_bf16", "GBps", "pct_copy")]
    if header is None:
        fail(f"{src}: expected a header line, found none")
    if not points:
        fail(f"{src}: no row of kind {shape!r} with a config of variant {variant} "
             f"(expected e.g. {shape!r} / 'C4R4 {variant}')")
    with h5py.File(out, "w") as h:
        h.attrs["format"] = "qmla-results"
        h.attrs["format_version"] = 1
        g = h.create_group("table9")
        g.attrs["tool"] = "scripts/decode-table.py"
        g.attrs["command_line"] = " ".join(sys.argv)
        g.attrs["input"] = src
        g.attrs["input_sha256"] = hashlib.sha256(open(src, "rb").read()).hexdigest()
        g.attrs["shape"] = shape
        g.attrs["variant"] = variant
        g.attrs["variants"] = " ".join(f"{c}={used[c]}" for c in CONFIGS)
        g.attrs["copy_GBps"] = copy_gbps
        g["batch"] = np.array([p[0] for p in points], np.int32)
        g["batch"].attrs["description"] = "sequences"
        g["context"] = np.array([p[1] for p in points], np.int64)
        g["context"].attrs["description"] = "tokens per sequence"
        g["context"].attrs["units"] = "tokens"
        units = ("us", None, "GB/s", "%")
        for c in CONFIGS:
            for j, suf in enumerate(("us", "ratio", "GBps", "pct_copy")):
                d = g.create_dataset(f"{c}_{suf}", data=np.array(
                    [vals[p].get(c, [math.nan] * 4)[j] for p in points], np.float64))
                if units[j]:
                    d.attrs["units"] = units[j]
    own_note = (" (" + " ".join(f"{c}={used[c]}" for c in CONFIGS) + ")") if own or bf16v else ""
    print(f"decode-table: {len(points)} points of {shape!r}, variant {variant}{own_note}, "
          f"from {src} -> {out}")


if __name__ == "__main__":
    main()
