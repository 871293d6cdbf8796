"""tests/support/st_fault.py — write a one-file safetensors copy of a checkpoint, with
a fault injected, for the loader's and the writers' fault tests
(tests/engine/test_ppl.sh, tests/engine/test_fuse.sh).

  st_fault.py SRC_DIR DST_DIR [--dtype F32|BF16] [--fill TENSOR=VALUE]
              [--negative-offsets TENSOR] [--overlap A:B] [--gap TENSOR]
              [--trailing N] [--config KEY=JSON] [--drop TENSOR]
              [--cols TENSOR=N]

SRC_DIR: config.json and model.safetensors.index.json with its F16 shards.
DST_DIR/model.safetensors holds every tensor in --dtype (default F32: exact
from float16; BF16 by truncation), no index; config.json is copied.
  --fill TENSOR=VALUE     every element of TENSOR set to VALUE (F32 only:
                          e.g. lm_head.weight=3e38, whose logits overflow)
  --negative-offsets T    T's data_offsets made [-(length + 64), -64] (a
                          reader that casts them to unsigned wraps past its
                          bounds check and reads the header as weights)
  --overlap A:B           A's bytes left out of the file and its data_offsets
                          pointed at the first bytes of B (the lengths still
                          agree: only the tiling of the byte buffer is broken)
  --gap T                 64 bytes that belong to no tensor after T's bytes
  --trailing N            N bytes after the last tensor's
  --config KEY=JSON       config.json's KEY set to the JSON value (null: removed)
  --drop T                tensor T left out of the file
  --tie                   lm_head.weight made a copy of model.embed_tokens.weight
  --cols TENSOR=N         the 2-D TENSOR cut to (or padded with zeros to) N
                          columns, its shape and data_offsets consistent: only
                          the model's expected shape is not met
"""
import argparse
import json
import os
import struct

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("src")
ap.add_argument("dst")
ap.add_argument("--dtype", default="F32", choices=["F32", "BF16"])
ap.add_argument("--fill", action="append", default=[])
ap.add_argument("--negative-offsets", dest="neg")
ap.add_argument("--overlap")
ap.add_argument("--gap")
ap.add_argument("--trailing", type=int, default=0)
ap.add_argument("--config", action="append", default=[])
ap.add_argument("--drop", action="append", default=[])
ap.add_argument("--tie", action="store_true")
ap.add_argument("--cols", action="append", default=[])
a = ap.parse_args()

os.makedirs(a.dst, exist_ok=True)
ws = {}
index = json.load(open(os.path.join(a.src, "model.safetensors.index.json")))
for fn in sorted(set(index["weight_map"].values())):
    b = open(os.path.join(a.src, fn), "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    for k, t in h.items():
        if k != "__metadata__":
            o0, o1 = t["data_offsets"]
            ws[k] = np.frombuffer(b[8 + n + o0:8 + n + o1], "<f2").astype(np.float32).reshape(t["shape"])
for f in a.fill:
    name, value = f.split("=")
    assert a.dtype == "F32" and name in ws, f
    ws[name] = np.full(ws[name].shape, float(value), np.float32)
if a.tie:
    ws["lm_head.weight"] = ws["model.embed_tokens.weight"].copy()
for d in a.drop:
    del ws[d]
for kv in a.cols:
    name, nc = kv.split("=")
    x, nc = ws[name], int(nc)
    assert x.ndim == 2 and nc != x.shape[1], kv
    ws[name] = x[:, :nc].copy() if nc < x.shape[1] else np.pad(x, ((0, 0), (0, nc - x.shape[1])))
over_a, over_b = a.overlap.split(":") if a.overlap else (None, None)
hdr, blobs, off = {}, [], 0
for k, x in ws.items():
    if a.dtype == "BF16":
        raw = (x.view(np.uint32) >> 16).astype("<u2").tobytes()
    else:
        raw = x.astype("<f4").tobytes()
    hdr[k] = {"dtype": a.dtype, "shape": list(x.shape), "data_offsets": [off, off + len(raw)]}
    if k == over_a:
        hdr[k]["data_offsets"] = None  # placed below, inside over_b
        continue
    blobs.append(raw)
    off += len(raw)
    if k == a.gap:
        blobs.append(bytes(64))
        off += 64
if over_a:
    n_a = int(np.prod(ws[over_a].shape)) * (2 if a.dtype == "BF16" else 4)
    b0, b1 = hdr[over_b]["data_offsets"]
    assert n_a <= b1 - b0, (over_a, over_b)
    hdr[over_a]["data_offsets"] = [b0, b0 + n_a]
blobs.append(bytes(a.trailing))
if a.neg:
    o0, o1 = hdr[a.neg]["data_offsets"]
    shift = o1 + 64
    hdr[a.neg]["data_offsets"] = [o0 - shift, o1 - shift]
    assert len(json.dumps(hdr)) > o1 - o0 + 64  # the wrapped read lands in the header
hj = json.dumps(hdr).encode()
with open(os.path.join(a.dst, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))
cfg = json.load(open(os.path.join(a.src, "config.json")))
for kv in a.config:
    k, v = kv.split("=", 1)
    v = json.loads(v)
    if v is None:
        cfg.pop(k, None)
    else:
        cfg[k] = v
with open(os.path.join(a.dst, "config.json"), "w") as f:
    if a.config:
        json.dump(cfg, f, indent=2)
    else:
        f.write(open(os.path.join(a.src, "config.json")).read())
