#!/usr/bin/python3
"""experiments/accuracy/make_ppl_sample_ref.py — regenerate
tests/data/tiny_mla_ppl_sample_ref.jsonl, the CI reference of
tests/engine/test_ppl_sample.sh: the independent NumPy forward
(numpy_forward.py: float32, naive MLA form, BF16 cache) on a fixed, seeded
sample of held-out windows, one NLL per window.

The sample: for text k of (prose, code), the 512-byte windows of
data/heldout/<text>.txt.gz (train.py heldout_windows: non-overlapping from the
start, 3,905 per text) numbered
  sorted(numpy.random.default_rng(SEED + k).choice(n_windows, N, replace=False))
with SEED = 26 and N = 100 (the test recomputes the indices from the seed).
Each window is scored as [BOS] + w[0..511) against w[0..512).

Output: one header line {"kind": "sample", ...} then one line per window
{"text", "window", "nll_sum" (nats over its 512 tokens), "bits_per_byte"}.

  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 experiments/accuracy/make_ppl_sample_ref.py
  (200 windows at ~0.9 CPU-s each: about 2 minutes on 2 free cores; the
  windows are split over QMLA_REF_WORKERS (4) processes)
"""
import gzip
import json
import math
import multiprocessing as mp
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import numpy_forward as nf  # noqa: E402

SEED, N, T, CONFIG = 26, 100, 512, "bf16"
WORKERS = int(os.environ.get("QMLA_REF_WORKERS", "4"))
TEXTS = ("prose", "code")
OUT = os.path.join(ROOT, "tests", "data", "tiny_mla_ppl_sample_ref.jsonl")


def sample(k, n_windows):
    return sorted(int(i) for i in np.random.default_rng(SEED + k).choice(n_windows, N, replace=False))


def texts():
    return [gzip.open(os.path.join(ROOT, "data", "heldout", n + ".txt.gz")).read() for n in TEXTS]


def run(job):
    """Score the windows of job = [(text number, window number), ...]."""
    tx = texts()
    cfg, W = nf.load(os.path.join(ROOT, "models", "tiny-mla"))
    m = nf.Model(cfg, W, np.float32, CONFIG, "none")
    bos = cfg["bos_token_id"]
    rows, t0 = [], time.time()
    for j, (k, i) in enumerate(job):
        w = np.frombuffer(tx[k][i * T:(i + 1) * T], dtype=np.uint8).astype(np.int64)
        lg = m.forward(np.concatenate([[bos], w[:-1]])).astype(np.float64)
        mx = lg.max(-1, keepdims=True)
        lse = np.log(np.exp(lg - mx).sum(-1)) + mx[:, 0]
        nll = float(np.sum(lse - lg[np.arange(T), w]))
        rows.append({"text": TEXTS[k], "window": i, "nll_sum": nll,
                     "bits_per_byte": nll / T / math.log(2)})
        if j % 10 == 9:
            print("worker %d: %d/%d windows, %.0f s" % (os.getpid(), j + 1, len(job), time.time() - t0),
                  file=sys.stderr, flush=True)
    return rows


def main():
    tx = texts()
    nw = [len(t) // T for t in tx]
    jobs = [(k, i) for k in range(len(TEXTS)) for i in sample(k, nw[k])]
    t0 = time.time()
    with mp.Pool(WORKERS) as p:
        parts = p.map(run, [jobs[w::WORKERS] for w in range(WORKERS)])
    dt = time.time() - t0
    got = {(r["text"], r["window"]): r for part in parts for r in part}
    head = {"kind": "sample", "seed": SEED, "per_text": N, "context": T, "config": CONFIG,
            "policy": "none", "dtype": "float32", "model": "models/tiny-mla",
            "texts": {TEXTS[k]: {"file": "data/heldout/%s.txt.gz" % TEXTS[k], "n_windows": nw[k]}
                      for k in range(len(TEXTS))},
            "seconds": round(dt, 1),
            "made_by": "experiments/accuracy/make_ppl_sample_ref.py (numpy_forward.py)"}
    with open(OUT + ".tmp", "w") as f:
        f.write(json.dumps(head) + "\n")
        for k, i in jobs:
            f.write(json.dumps(got[(TEXTS[k], i)]) + "\n")
    os.replace(OUT + ".tmp", OUT)
    for k, name in enumerate(TEXTS):
        b = np.array([got[(name, i)]["bits_per_byte"] for kk, i in jobs if kk == k])
        print("%s: %d windows of %d, mean %.5f bits/byte, sd %.4f" % (
            name, len(b), nw[k], b.mean(), b.std(ddof=1)))
    print("%.0f s" % dt)


if __name__ == "__main__":
    main()
