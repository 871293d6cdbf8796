#!/usr/bin/env python3
"""scripts/serving-table.py BENCH.tsv OUT.h5 — the serving benchmark's table
(experiments/serving/bench_serving.py's bench_serving.tsv, issue 21 item 4)
as a qmla-results file with one table, /serving_bench, that the figure
serving-bench reads (`qmla figures OUT.h5 -o DIR --only serving-bench`,
docs/figures.md). One row per (cache, context, batch) of the TSV:

  cache (string) and cache_index  0 C4R4, 1 BF16 (qmla pages), 2 dynamic
                                  (transformers' DynamicCache, BF16): the eager
                                  step; 3 C4R4-graph-v0, 4 C4R4-graph-v1,
                                  5 BF16-graph-v0, 6 BF16-graph-v3,
                                  7 C4R4-graph-v7 (since run 7: the default
                                  plan): the whole step in a CUDA graph
                                  (decode-kernel variant vN; bench_serving.py
                                  since run 6); 8 C2R4 (eager), 9
                                  C2R4-graph-v7 (run 9's side measurement;
                                  serving-bench does not draw them); -1
                                  any other cache bench_serving.py writes
                                  (C8R8, q8 metadata C4R4q8 / C2R4q8 since
                                  run 10, other variants; not drawn)
  context, batch                  tokens per sequence, sequences
  fits                            1 measured, 0 "does not fit" (the cache the
                                  point needs exceeds the budget; no step ran),
                                  -1 not measured ("error", "out of memory",
                                  "not run (time)": the benchmark's log says why)
  cache_bytes                     device bytes of the cache (for a point that
                                  does not fit: the bytes it would need)
  cache_gib                       cache_bytes / 2^30
  budget_gib                      the benchmark's cache budget (--budget-gib,
                                  read from the TSV's trailing comment)
  bytes_per_token, peak_alloc_bytes, step_s, tok_s_per_seq,
  tok_s_aggregate, attn_kernels_s NaN where the TSV leaves them empty

The TSV's leading comment lines (its command, versions, device) and its
trailing ones (the largest batch inside the budget) are kept as attributes,
with this script's command line, the git commit and the input's SHA-256.
Exit 2 with a message naming the file, line and what was expected on a
malformed TSV."""
import datetime
import hashlib
import os
import re
import subprocess
import sys

import h5py
import numpy as np

CACHES = ("C4R4", "BF16", "dynamic", "C4R4-graph-v0", "C4R4-graph-v1", "BF16-graph-v0",
          "BF16-graph-v3", "C4R4-graph-v7", "C2R4", "C2R4-graph-v7")
# every cache bench_serving.py writes: its paged configurations, eager or as
# CUDA graphs of a decode variant (kernels/decode_cuda.h: 0-10), and
# transformers' DynamicCache; the ones not in CACHES get cache_index -1
CACHE_RE = re.compile(r"(C4R4|C2R4|C4R4q8|C2R4q8|C8R8|BF16)(-graph-v([0-9]|10))?|dynamic")
CACHES_TEXT = ("C4R4, C2R4, C4R4q8, C2R4q8 (q8 metadata), C8R8 or BF16 (optionally -graph-vN, "
               "N 0-10), or dynamic")
STATUS = {"ok": 1, "does not fit": 0, "error": -1, "out of memory": -1, "not run (time)": -1}
COLS = ("cache", "context", "batch", "status", "cache_bytes", "bytes_per_token",
        "peak_alloc_bytes", "step_s", "tok_s_per_seq", "tok_s_aggregate", "attn_kernels_s")


def fail(msg):
    sys.stderr.write(f"serving-table: {msg}\n")
    sys.exit(2)


def num(path, ln, name, s):
    if s == "":
        return float("nan")
    try:
        return float(s)
    except ValueError:
        fail(f"{path}:{ln}: column {name}: expected a number, found {s!r}")


def read(path):
    head, tail, rows, header = [], [], [], None
    for ln, line in enumerate(open(path).read().split("\n"), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            (head if header is None else tail).append(line[1:].strip())
            continue
        f = line.split("\t")
        if header is None:
            header = f
            if tuple(f) != COLS:
                fail(f"{path}:{ln}: expected the header {' '.join(COLS)}, found {' '.join(f)}")
            continue
        if len(f) != len(COLS):
            fail(f"{path}:{ln}: expected {len(COLS)} tab-separated columns, found {len(f)}")
        r = dict(zip(COLS, f))
        if not CACHE_RE.fullmatch(r["cache"]):
            fail(f"{path}:{ln}: cache: expected {CACHES_TEXT}, found {r['cache']!r}")
        if r["status"] not in STATUS:
            fail(f"{path}:{ln}: status: expected one of " + ", ".join(repr(k) for k in STATUS)
                 + f", found {r['status']!r}")
        rows.append((ln, r))
    if header is None or not rows:
        fail(f"{path}: expected a header line and at least one row, found none")
    return head, tail, rows


def main():
    if len(sys.argv) != 3:
        fail("usage: scripts/serving-table.py BENCH.tsv OUT.h5")
    src, out = sys.argv[1], sys.argv[2]
    if not os.path.exists(src):
        fail(f"{src}: no such file")
    head, tail, rows = read(src)
    m = [re.search(r"\(([0-9.]+) GiB of cache\)", t) for t in tail]
    m = [x for x in m if x]
    if not m:
        fail(f"{src}: expected a trailing comment naming the budget ('(N GiB of cache)'), found none")
    budget = float(m[0].group(1))
    data = {k: [] for k in COLS if k != "status"}
    data["cache_index"], data["fits"] = [], []
    for ln, r in rows:
        data["cache"].append(r["cache"])
        data["cache_index"].append(CACHES.index(r["cache"]) if r["cache"] in CACHES else -1)
        data["fits"].append(STATUS[r["status"]])
        for k in COLS[1:]:
            if k != "status":
                data[k].append(num(src, ln, k, r[k]))
    with h5py.File(out, "w") as h:
        h.attrs["format"] = "qmla-results"
        h.attrs["format_version"] = 1
        g = h.create_group("serving_bench")
        g.attrs["tool"] = "scripts/serving-table.py"
        g.attrs["command_line"] = " ".join(sys.argv)
        g.attrs["created_utc"] = datetime.datetime.now(datetime.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        try:
            g.attrs["git_commit"] = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"],
                                                   capture_output=True, text=True).stdout.strip()
        except OSError:
            g.attrs["git_commit"] = ""
        g.attrs["input"] = src
        g.attrs["input_sha256"] = hashlib.sha256(open(src, "rb").read()).hexdigest()
        g.attrs["bench_header"] = "\n".join(head)
        g.attrs["bench_budget"] = "\n".join(tail)
        g["cache"] = np.array(data["cache"], dtype=h5py.string_dtype())
        g["cache_index"] = np.array(data["cache_index"], np.int32)
        g["cache_index"].attrs["description"] = ("0 C4R4, 1 BF16 (qmla pages), 2 DynamicCache (BF16): "
                                                 "eager step; 3 C4R4-graph-v0, 4 C4R4-graph-v1, "
                                                 "5 BF16-graph-v0, 6 BF16-graph-v3, "
                                                 "7 C4R4-graph-v7: CUDA-graph step; 8 C2R4, "
                                                 "9 C2R4-graph-v7; -1 any other (C8R8, other "
                                                 "variants: not drawn)")
        g["context"] = np.array(data["context"], np.int64)
        g["batch"] = np.array(data["batch"], np.int64)
        g["fits"] = np.array(data["fits"], np.int32)
        g["fits"].attrs["description"] = ("1 measured, 0 does not fit the budget (no step ran), "
                                          "-1 not measured (error, out of memory, not run)")
        for k in ("cache_bytes", "bytes_per_token", "peak_alloc_bytes", "step_s",
                  "tok_s_per_seq", "tok_s_aggregate", "attn_kernels_s"):
            g[k] = np.array(data[k], np.float64)
        g["cache_gib"] = np.array(data["cache_bytes"], np.float64) / 2.0 ** 30
        g["budget_gib"] = np.full(len(rows), budget)
        g["cache_bytes"].attrs["description"] = ("device bytes of the cache; where fits is 0 "
                                                 "the bytes the point would need")
    print(f"serving-table: {len(rows)} rows from {src} -> {out}")


if __name__ == "__main__":
    main()
