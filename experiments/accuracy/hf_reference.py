#!/usr/bin/env python3
"""experiments/accuracy/hf_reference.py — the transformers side of the
engine's agreement check (issue 11), run on the accelerator machine:

  python3 experiments/accuracy/hf_reference.py --out $OUT [--windows 4]

1. DeepseekV2ForCausalLM from models/tiny-mla in float32, eager attention,
   on the CPU (no TF32): the logits of the first W windows of each held-out
   text (train.py protocol: [BOS] + 511 bytes), saved as
   $OUT/hf_logits_{prose,code}.npy [W, 512, 320] float32;
2. the full held-out bits/byte in float32 on the GPU (TF32 off), every window
   of 512 bytes (train.py heldout_windows, 3,905 per text) — the training
   run's 1.257 / 0.839 — in $OUT/hf_reference.json.
experiments/accuracy/hf_compare.py compares the logits with the C engine's.
"""
import argparse
import gzip
import json
import math
import time

import numpy as np
import torch
import torch.nn.functional as F
from transformers import DeepseekV2ForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--windows", type=int, default=4)
ap.add_argument("--model", default="models/tiny-mla")
a = ap.parse_args()
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
BOS, T = 256, 512
res = {"torch": torch.__version__}
import transformers  # noqa: E402
res["transformers"] = transformers.__version__
m = DeepseekV2ForCausalLM.from_pretrained(a.model, dtype=torch.float32,
                                          attn_implementation="eager").eval()
for name in ("prose", "code"):
    data = gzip.decompress(open(f"data/heldout/{name}.txt.gz", "rb").read())
    n = len(data) // T
    w = torch.frombuffer(bytearray(data[: n * T]), dtype=torch.uint8).view(n, T).long()
    inp = torch.cat([torch.full((n, 1), BOS, dtype=torch.long), w[:, :-1]], 1)
    with torch.no_grad():
        lg = m(input_ids=inp[: a.windows], use_cache=False).logits.float().numpy()
    np.save(f"{a.out}/hf_logits_{name}.npy", lg)
    t0 = time.time()
    g = m.cuda()
    tot = 0.0
    with torch.no_grad():
        for i in range(0, n, 128):
            x, y = inp[i:i + 128].cuda(), w[i:i + 128].cuda()
            l = g(input_ids=x, use_cache=False).logits.float()
            tot += F.cross_entropy(l.reshape(-1, l.shape[-1]), y.reshape(-1), reduction="sum").item()
    m = g.cpu()
    res[name] = {"windows": n, "tokens": n * T, "nll_nats_per_token": tot / (n * T),
                 "bits_per_byte": tot / (n * T) / math.log(2), "seconds": time.time() - t0}
    print(name, json.dumps(res[name]), flush=True)
json.dump(res, open(f"{a.out}/hf_reference.json", "w"), indent=1)
