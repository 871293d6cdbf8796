#!/usr/bin/python3
"""python/test_qmla.py — the ctypes binding against independent references:
qmla.qdq against the NumPy quantizer of bench/numpy_sweep.py (docs/math.md
§2) on random data, and Model.ppl against the NumPy forward's committed
figures (tests/data/tiny_mla_ppl_ref.jsonl, first 4 windows of prose).
Env: QMLA_SOURCE_ROOT (repository), QMLA_LIB (build/python/libqmla.so)."""
import gzip
import json
import os
import sys

import numpy as np

root = os.environ.get("QMLA_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(root, "python"))
sys.path.insert(0, os.path.join(root, "bench"))
import qmla  # noqa: E402
from numpy_sweep import qdq as np_qdq  # noqa: E402

fails = 0
rng = np.random.default_rng(7)
for bits in (2, 3, 4, 8):
    for meta in ("f16", "q8"):
        x = (rng.standard_normal((64, 256)) * rng.uniform(0.1, 5, (64, 1))).astype(np.float32)
        a, b = qmla.qdq(x, bits, 64, meta), np_qdq(x, bits, 64, meta)
        frac = np.mean(a == b)
        ok = frac >= 0.999 and np.abs(a - b).max() <= 1e-6 * np.abs(x).max() + 1e-7
        print(f"qdq {bits} bits {meta}: identical {frac:.5f} {'ok' if ok else 'FAIL'}")
        fails += not ok
try:
    qmla.qdq(np.zeros((2, 48), np.float32), 5)
    fails += 1
    print("qdq 5 bits: not refused FAIL")
except qmla.QmlaError as e:
    print("qdq 5 bits refused:", e)
try:  # docs/python.md: an unknown meta is a ValueError, as in Transforms.effective
    qmla.qdq(np.zeros((2, 64), np.float32), 4, 64, "f8")
    fails += 1
    print("qdq meta f8: not refused FAIL")
except ValueError as e:
    print("qdq meta f8 refused:", e)
m = qmla.Model(os.path.join(root, "models", "tiny-mla"))
fails += m.n_params != 9770560
text = gzip.decompress(open(os.path.join(root, "data/heldout/prose.txt.gz"), "rb").read())
ref = {(r["config"], r["policy"]): r for r in map(json.loads, open(os.path.join(
    root, "tests/data/tiny_mla_ppl_ref.jsonl"))) if r["text"].endswith("prose.txt.gz")}
for cfg, pol, tol in (("fp32", "none", 2e-4), ("C4R4", "sink4/local128", 3e-3)):
    r = m.ppl(text, cfg, pol, windows=4, threads=2)
    d = abs(r["bits_per_byte"] - ref[(cfg, pol)]["bits_per_byte"])
    ok = d <= tol and r["tokens"] == 2048
    print(f"ppl {cfg} {pol}: {r['bits_per_byte']:.6f} vs NumPy {ref[(cfg, pol)]['bits_per_byte']:.6f} {'ok' if ok else 'FAIL'}")
    fails += not ok
try:
    qmla.Model("/nonexistent")
    fails += 1
except qmla.QmlaError as e:
    print("missing model refused:", e)
print(f"test_python: {'FAIL' if fails else 'ok'} ({fails} failed)")
sys.exit(1 if fails else 0)
