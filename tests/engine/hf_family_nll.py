#!/usr/bin/env python3
"""hf_family_nll.py DIR [NAME ...] — transformers' own NLL of every checkpoint that
`tests/engine/make_family_ckpt.py write DIR` wrote (issue 20), beside the
NumPy reference (DIR/ref.json) and `qmla ppl` (DIR/<name>.h5, written before
by scripts/device-realckpt.sh). Needs torch and transformers (the
accelerator machine's Python); runs on the CPU in float32 with eager
attention, so that no TF32 or fused kernel enters the reference.

Per checkpoint (all of ref.json, or the NAMEs given): DeepseekV2ForCausalLM
/ DeepseekV3ForCausalLM / Glm4MoeLiteForCausalLM / LongcatFlashForCausalLM
through AutoModelForCausalLM (the FP8 ones from their F32 copy <name>-deq, which
holds the dequantized values fp8 x scale_inv: transformers' FP8 linear
also quantizes activations, which the engine does not); missing or
unexpected tensors are a failure. Where from_pretrained cannot load a
checkpoint (or loads it with missing, unexpected or mismatched tensors),
that is printed and the model is also built from its config and filled by
name from model.safetensors (load_by_name: the per-expert tensors stacked
into a fused experts parameter where the installed transformers has one);
the NLL of that build is reported as such, with every tensor accounted
for. Where an attention module's softmax scale
lacks DeepSeek's YaRN correction mscale(factor, mscale_all_dim)^2
(docs/models.md; transformers 5.17's DeepseekV2Attention), it is set to the
corrected value, as the capture tool's --yarn-mscale fix does, and the NLL
with the module's own scale is reported too. The windows: the protocol of
qmla/model.h ([BOS] + w[0..T-1) -> w[0..T)).

Prints one line per checkpoint and exits 1 when qmla or NumPy differs from
transformers by more than 1e-5 relative."""
import json
import os
import sys

import h5py
import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "experiments", "capture"))
from hf_by_name import build_filled  # noqa: E402


def load(path):
    try:
        out = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                   attn_implementation="eager",
                                                   output_loading_info=True)
    except TypeError:
        out = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32,
                                                   attn_implementation="eager",
                                                   output_loading_info=True)
    m, info = out
    return m.eval(), info


def load_by_name(path):
    """(model, missing, unused): experiments/capture/hf_by_name.py's build_filled
    in float32"""
    return build_filled(path, torch.float32)


def nll(m, text, T, bos):
    tot, n = 0.0, 0
    with torch.no_grad():
        for k in range(len(text) // T):
            w = list(text[k * T:(k + 1) * T])
            ids = torch.tensor([[bos] + w[:-1]])
            lg = m(input_ids=ids).logits[0].double()
            lse = torch.logsumexp(lg, -1)
            tot += float((lse - lg[torch.arange(T), torch.tensor(w)]).sum())
            n += T
    return tot / n


def main():
    d = sys.argv[1]
    ref = json.load(open(f"{d}/ref.json"))
    if len(sys.argv) > 2:
        ref = {k: v for k, v in ref.items() if k in sys.argv[2:]}
    text = open(f"{d}/text.txt", "rb").read()
    torch.set_num_threads(8)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    bad = 0
    for name, r in ref.items():
        src = f"{d}/{name}-deq" if r["dtype"] == "FP8" else f"{d}/{name}"
        how = "from_pretrained"
        try:
            m, info = load(src)
            miss = [k for k in info.get("missing_keys", [])]
            unexp = [k for k in info.get("unexpected_keys", [])]
            mism = info.get("mismatched_keys", [])
            problem = (f"loading info: missing {miss[:6]} unexpected {unexp[:6]} "
                       f"mismatched {list(mism)[:6]}" if miss or unexp or mism else None)
        except Exception as e:  # noqa: BLE001 - report and go on
            problem = f"transformers cannot load it: {type(e).__name__}: {str(e)[:400]}"
        if problem:
            print(f"{name}: from_pretrained: {problem}")
            if r["arch"] != "longcat":
                bad += 1
                continue
            try:
                m, miss, unused = load_by_name(src)
            except Exception as e:  # noqa: BLE001
                print(f"{name}: load_by_name failed too: {type(e).__name__}: {e}")
                bad += 1
                continue
            how = "load_by_name"
            print(f"{name}: built from config.json, filled by name: model tensors not in the "
                  f"file {miss[:6]}, file tensors unused {unused[:6]}")
            if miss or unused:
                bad += 1
        print(f"{name}: {type(m).__name__} via {how}")
        bos = m.config.bos_token_id
        own, fixed = None, 0
        mods = [x for x in m.modules() if hasattr(x, "kv_b_proj") and hasattr(x, "scaling")]
        if any(abs(x.scaling / r["tau"] - 1.0) > 1e-9 for x in mods):
            own_scale = mods[0].scaling
            own = nll(m, text, r["context"], bos)
            for x in mods:
                x.scaling = r["tau"]
                fixed += 1
        hf = nll(m, text, r["context"], bos)
        try:
            q = float(h5py.File(f"{d}/{name}.h5")["ppl"].attrs["nll_nats_per_token"])
        except Exception as e:  # noqa: BLE001
            q = float("nan")
            print(f"{name}: no qmla result: {e}")
        rq, rn = abs(q - hf) / abs(hf), abs(r["nll"] - hf) / abs(hf)
        note = ""
        if fixed:
            note = (f"  (softmax scale set from {own_scale:.6g} to {r['tau']:.6g} in {fixed} "
                    f"modules; with the module's own scale: {own:.9f})")
        ok = rq <= 1e-5 and rn <= 1e-5
        bad += not ok
        print(f"{name:28s} {r['arch']} {r['dtype']:4s} rope {r['rope']:8s} moe {int(r['moe'])}  "
              f"transformers {hf:.9f}  qmla {q:.9f} (rel {rq:.1e})  numpy {r['nll']:.9f} "
              f"(rel {rn:.1e})  {'OK' if ok else 'DIFFERS'}{note}")
        del m
    print(f"{len(ref) - bad} of {len(ref)} agree within 1e-5")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
