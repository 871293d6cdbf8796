"""tests/support/st_fault.py — write a one-file safetensors copy of a checkpoint, with
a fault injected, for the loader's and the writers' fault tests
(tests/engine/test_ppl.sh, tests/engine/test_fuse.sh).

  st_fault.py SRC_DIR DST_DIR [--dtype F32|BF16] [--fill TENSOR=VALUE]
              [--negative-offsets TENSOR]

SRC_DIR: config.json and model.safetensors.index.json with its F16 shards.
DST_DIR/model.safetensors holds every tensor in --dtype (default F32: exact
from float16; BF16 by truncation), no index; config.json is copied.
  --fill TENSOR=VALUE     every element of TENSOR set to VALUE (F32 only:
                          e.g. lm_head.weight=3e38, whose logits overflow)
  --negative-offsets T    T's data_offsets made [-(length + 64), -64] (a
                          reader that casts them to unsigned wraps past its
                          bounds check and reads the header as weights)
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
hdr, blobs, off = {}, [], 0
for k, x in ws.items():
    if a.dtype == "BF16":
        raw = (x.view(np.uint32) >> 16).astype("<u2").tobytes()
    else:
        raw = x.astype("<f4").tobytes()
    hdr[k] = {"dtype": a.dtype, "shape": list(x.shape), "data_offsets": [off, off + len(raw)]}
    blobs.append(raw)
    off += len(raw)
if a.neg:
    o0, o1 = hdr[a.neg]["data_offsets"]
    shift = o1 + 64
    hdr[a.neg]["data_offsets"] = [o0 - shift, o1 - shift]
    assert len(json.dumps(hdr)) > o1 - o0 + 64  # the wrapped read lands in the header
hj = json.dumps(hdr).encode()
with open(os.path.join(a.dst, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))
with open(os.path.join(a.dst, "config.json"), "w") as f:
    f.write(open(os.path.join(a.src, "config.json")).read())
