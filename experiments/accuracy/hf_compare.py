#!/usr/bin/python3
"""experiments/accuracy/hf_compare.py — the C engine's fp32-cache logits
(build/bench/bench_ppl --logits) against transformers' (hf_reference.py) on
the same held-out windows: relative error ||C - HF||_F / ||HF||_F per text
and over all, and the largest absolute difference; exit 1 above 1e-4.

  python3 experiments/accuracy/hf_compare.py HF_DIR [BUILD_DIR]
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

hf_dir = sys.argv[1]
build = sys.argv[2] if len(sys.argv) > 2 else "build"
worst = 0.0
num = den = 0.0
for name in ("prose", "code"):
    ref = np.load(os.path.join(hf_dir, f"hf_logits_{name}.npy")).astype(np.float64)
    W = ref.shape[0]
    with tempfile.NamedTemporaryFile(suffix=".f32") as f:
        subprocess.run([os.path.join(build, "bench", "bench_ppl"), "--logits", "models/tiny-mla",
                        f"data/heldout/{name}.txt.gz", str(W), f.name], check=True)
        c = np.fromfile(f.name, dtype="<f4").reshape(ref.shape).astype(np.float64)
    e = np.linalg.norm(c - ref) / np.linalg.norm(ref)
    worst = max(worst, e)
    num += np.sum((c - ref) ** 2)
    den += np.sum(ref ** 2)
    print(f"{name}: {W} windows x {ref.shape[1]} tokens x {ref.shape[2]} logits: relative error "
          f"{e:.3e}, max |diff| {np.abs(c - ref).max():.3e}, max |logit| {np.abs(ref).max():.2f}")
tot = (num / den) ** 0.5
print(f"all: relative error {tot:.3e} (limit 1e-4): {'PASS' if worst <= 1e-4 else 'FAIL'}")
sys.exit(0 if worst <= 1e-4 else 1)
