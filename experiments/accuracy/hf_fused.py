#!/usr/bin/env python3
"""experiments/accuracy/hf_fused.py — transformers loads a checkpoint written
by `qmla fuse` and computes the same function as the original (issue 11 item
6), run on the accelerator machine:

  python3 experiments/accuracy/hf_fused.py FUSED_DIR --out $OUT [--windows 4]

DeepseekV2ForCausalLM from models/tiny-mla and from FUSED_DIR in float32,
eager attention, on the CPU: the mean NLL of the first W windows of each
held-out text (train.py protocol: [BOS] + 511 bytes against the 512 bytes)
and the largest logit difference, in $OUT/hf_fused.json. The transforms
change the cache basis only, so with the cache unquantized the NLLs must
agree within 1e-4 nats/token (exit 1 otherwise).
"""
import argparse
import gzip
import json

import torch
import torch.nn.functional as F
from transformers import DeepseekV2ForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("fused")
ap.add_argument("--out", required=True)
ap.add_argument("--windows", type=int, default=4)
ap.add_argument("--model", default="models/tiny-mla")
a = ap.parse_args()
BOS, T = 256, 512
import transformers  # noqa: E402
res = {"torch": torch.__version__, "transformers": transformers.__version__, "fused": a.fused}
ms = [DeepseekV2ForCausalLM.from_pretrained(p, dtype=torch.float32, attn_implementation="eager").eval()
      for p in (a.model, a.fused)]
ok = True
for name in ("prose", "code"):
    data = gzip.decompress(open(f"data/heldout/{name}.txt.gz", "rb").read())
    w = torch.frombuffer(bytearray(data[: a.windows * T]), dtype=torch.uint8).view(a.windows, T).long()
    inp = torch.cat([torch.full((a.windows, 1), BOS, dtype=torch.long), w[:, :-1]], 1)
    out = []
    with torch.no_grad():
        for m in ms:
            lg = m(input_ids=inp, use_cache=False).logits.float()
            out.append((lg, F.cross_entropy(lg.reshape(-1, lg.shape[-1]), w.reshape(-1)).item()))
    d = abs(out[0][1] - out[1][1])
    r = {"tokens": a.windows * T, "nll_original": out[0][1], "nll_fused": out[1][1], "abs_diff": d,
         "max_abs_logit_diff": (out[0][0] - out[1][0]).abs().max().item()}
    ok &= d < 1e-4
    res[name] = r
    print(name, json.dumps(r), flush=True)
res["ok"] = bool(ok)
json.dump(res, open(f"{a.out}/hf_fused.json", "w"), indent=1)
raise SystemExit(0 if ok else 1)
