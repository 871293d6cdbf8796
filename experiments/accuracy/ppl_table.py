#!/usr/bin/env python3
"""experiments/accuracy/ppl_table.py — add the table /ppl_table to a
`qmla ppl` results file written before `qmla ppl` wrote it itself (the
accuracy table of this directory was computed with such a build; its /ppl
rows are what `qmla ppl` computes now bit for bit, see README.md).

  /usr/bin/python3 experiments/accuracy/ppl_table.py RESULTS.h5

Columns as lib/engine/ppl.c's ppl_table() writes them (include/qmla/model.h):
text, text_index, config, method, policy, transforms, context, tokens,
bits_per_byte, nll_nats_per_token, delta_bits_per_byte (against the same
text's bf16 row, NaN without one). Refuses a file that has /ppl_table
already. The file is rewritten atomically (copy, then rename over).
"""
import math
import os
import shutil
import sys

import h5py
import numpy as np

path = sys.argv[1]
tmp = path + ".tmp.%d" % os.getpid()
shutil.copyfile(path, tmp)
try:
    with h5py.File(tmp, "a") as f:
        if "ppl_table" in f:
            sys.exit("%s: /ppl_table exists already" % path)
        g = f["ppl"]
        rows = [dict(g[k].attrs) for k in sorted(k for k in g if k.startswith("row_"))]
        if len(rows) != int(g.attrs["rows"]):
            sys.exit("%s: /ppl: %d row groups, attribute rows says %d" % (path, len(rows), g.attrs["rows"]))
        s = lambda r, k: str(r.get(k, ""))
        texts = []
        for r in rows:
            if s(r, "text") not in texts:
                texts.append(s(r, "text"))
        bf = {s(r, "text"): float(r["bits_per_byte"]) for r in rows
              if s(r, "config") == "bf16" and s(r, "method") == "none"}
        t = f.create_group("ppl_table")
        sd = h5py.string_dtype("utf-8")
        def col(name, data, dtype, desc, units=None):
            d = t.create_dataset(name, data=np.asarray(data, dtype=dtype))
            d.attrs["description"] = desc
            if units is not None:
                d.attrs["units"] = units
        col("text", [s(r, "text") for r in rows], sd, "text file as given")
        col("text_index", [texts.index(s(r, "text")) for r in rows], "<i8", "index of the text in the order given", "")
        col("config", [s(r, "config") for r in rows], sd, "cache configuration")
        col("method", [s(r, "method") for r in rows], sd, "none, RTN, or the transforms' method")
        col("policy", [s(r, "policy") for r in rows], sd, "none or sink<S>/local<W>")
        col("transforms", [s(r, "transforms") for r in rows], sd, "transforms file folded in")
        col("context", [int(r["context"]) for r in rows], "<i8", "window length", "tokens")
        col("tokens", [int(r["tokens"]) for r in rows], "<i8", "targets scored", "tokens")
        col("bits_per_byte", [float(r["bits_per_byte"]) for r in rows], "<f8",
            "mean NLL / ln 2 (one token per byte)", "bit/byte")
        col("nll_nats_per_token", [float(r["nll_nats_per_token"]) for r in rows], "<f8", "mean NLL", "nat/token")
        col("delta_bits_per_byte", [float(r["bits_per_byte"]) - bf.get(s(r, "text"), math.nan) for r in rows],
            "<f8", "bits_per_byte minus the bf16 row's of the same text", "bit/byte")
        t.attrs["added_by"] = "experiments/accuracy/ppl_table.py"
    os.replace(tmp, path)
finally:
    if os.path.exists(tmp):
        os.unlink(tmp)
