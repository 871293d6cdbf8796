#!/usr/bin/env python3
"""experiments/serving/generate.py — transformers generation and scoring with
the packed cache (qmla.torch.MLAPagedCache), against the QDQ hook path of
experiments/eval/eval_hook.py (issue 21 item 3). On the accelerator machine:

  python3 experiments/serving/generate.py --out DIR [--windows 64] [--new 256]
      [--what tiny,families]

tiny: models/tiny-mla (float32, eager, TF32 off) on the first W windows of
  data/heldout/{prose,code} ([BOS] + 511 bytes against the 512 bytes, as
  eval_hook.py). Teacher-forced NLL, token by token through the cache
  (every query through qmla::decode with s_q = 1, every token through
  qmla::kv_write), for BF16, C4R4, C2R4, C8R8 with sink = window = 0 (every
  token quantized, as the hook quantizes every token), against the hook's
  bits/byte for the same configuration (use_cache=False; bf16, C{x}R{y});
  tolerances: eval_hook.py's (bf16 1e-4, C4R4 1e-3, C2R4 6e-3; C8R8 1e-3 is
  ours). Also one whole-window forward through the cache (prefill in pieces
  of 128 query tokens) for C4R4, and C4R4 / C2R4 with the default protection
  (sink 4, window 128), reported beside fp32 (no agreement target).
  Greedy generation of --new tokens from 8 prompts ([BOS] + the first 63
  bytes of prose windows 0..7), model.generate with the cache (C4R4 and BF16,
  S = W = 0) against model.generate under the hook (use_cache=False):
  per prompt the tokens that agree, the first position where they differ,
  and there the logit margin of each path between the two tokens, beside
  the largest |logit difference| of the two paths over the common prefix.
families: random-weight checkpoints of the transformers MLA families
  (experiments/capture/test_capture.py family_configs, with
  qk_rope_head_dim 64: the packed cache holds 64 RoPE channels; kv_lora_rank
  64, zero-padded to 512 in the cache); 8 sequences of 128 bytes of
  synthetic text: NLL through the cache against the hook for BF16, C4R4,
  C2R4, and greedy generation of --new tokens from 4 prompts (C4R4).
Writes DIR/generate.json; exit 1 when an agreement check fails.
"""
import argparse
import gzip
import json
import math
import os
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "experiments", "capture"))
sys.path.insert(0, os.path.join(ROOT, "experiments", "eval"))
import qmla  # noqa: E402
import qmla.torch as qt  # noqa: E402
from eval_hook import CacheHook  # noqa: E402

TOL = {"bf16": 1e-4, "C4R4": 1e-3, "C2R4": 6e-3, "C8R8": 1e-3}
HOOK_NAME = {"BF16": "bf16", "C4R4": "C4R4", "C2R4": "C2R4", "C8R8": "C8R8"}


def nll_hook(model, inp, tgt, cfg, batch=64):
    tot = 0.0
    with CacheHook(model, cfg), torch.no_grad():
        for i in range(0, inp.shape[0], batch):
            lg = model(input_ids=inp[i:i + batch], use_cache=False).logits.float()
            tot += F.cross_entropy(lg.reshape(-1, lg.shape[-1]), tgt[i:i + batch].reshape(-1),
                                   reduction="sum").item()
    return tot


def nll_paged(model, inp, tgt, cfg, sink=0, window=0, step=True):
    """Summed NLL with the packed cache: token by token (step) or one forward."""
    B, T = inp.shape
    cache = qt.MLAPagedCache(model, batch_size=B, max_cache_len=T, config=cfg, sink=sink,
                             window=window)
    tot = torch.zeros((), dtype=torch.float64, device=inp.device)
    spans = [(t, t + 1) for t in range(T)] if step else [(0, T)]
    with torch.no_grad():
        for a, b in spans:
            lg = model(input_ids=inp[:, a:b], past_key_values=cache, use_cache=True).logits.float()
            tot += F.cross_entropy(lg.reshape(-1, lg.shape[-1]), tgt[:, a:b].reshape(-1),
                                   reduction="sum").double()
    cache.check()
    lens = {cache.lengths[k] for k in cache.lengths}
    if lens != {T}:
        raise RuntimeError(f"cache lengths {lens}, expected {T}")
    return float(tot), cache.nbytes()


def greedy(model, prompt, new, cache=None, hook=None):
    kw = dict(max_new_tokens=new, do_sample=False, output_scores=True,
              return_dict_in_generate=True, pad_token_id=0)
    with torch.no_grad():
        if hook is not None:
            with CacheHook(model, hook):
                r = model.generate(prompt, use_cache=False, **kw)
        else:
            r = model.generate(prompt, past_key_values=cache, use_cache=True, **kw)
    toks = r.sequences[:, prompt.shape[1]:]
    scores = torch.stack([s.float() for s in r.scores], 1)          # [B, new, V]
    return toks, scores


def compare_greedy(tp, sp, th, sh):
    """Per prompt: agreeing tokens, first divergence, margins there."""
    rows = []
    for b in range(tp.shape[0]):
        diff = (tp[b] != th[b]).nonzero()
        first = int(diff[0]) if diff.numel() else None
        upto = first if first is not None else tp.shape[1]
        end = upto + 1 if first is not None else upto      # same context up to `first`
        dl = float((sp[b, :end] - sh[b, :end]).abs().max()) if end else 0.0
        r = {"agree_prefix": upto, "first_divergence": first, "max_abs_logit_diff_prefix": dl}
        if first is not None:
            a, c = int(th[b, first]), int(tp[b, first])
            r.update(hook_token=a, paged_token=c,
                     hook_margin=float(sh[b, first, a] - sh[b, first, c]),
                     paged_margin=float(sp[b, first, c] - sp[b, first, a]))
        rows.append(r)
    return rows


def run_tiny(a, res):
    from transformers import DeepseekV2ForCausalLM
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    BOS, T = 256, 512
    m = DeepseekV2ForCausalLM.from_pretrained(os.path.join(ROOT, "models", "tiny-mla"),
                                              dtype=torch.float32,
                                              attn_implementation="eager").eval().to(dev)
    m.generation_config.eos_token_id = None
    out = {"rows": [], "greedy": {}}
    ok = True
    prose = None
    for name in ("prose", "code"):
        data = gzip.decompress(open(os.path.join(ROOT, "data", "heldout", f"{name}.txt.gz"),
                                    "rb").read())
        W = a.windows
        w = torch.frombuffer(bytearray(data[:W * T]), dtype=torch.uint8).view(W, T).long()
        inp = torch.cat([torch.full((W, 1), BOS, dtype=torch.long), w[:, :-1]], 1).to(dev)
        tgt = w.to(dev)
        if name == "prose":
            prose = inp
        n = W * T
        bpb = lambda s: s / n / math.log(2)  # noqa: E731
        t0 = time.time()
        ref = {"fp32": bpb(nll_hook(m, inp, tgt, "fp32"))}
        for c in ("BF16", "C4R4", "C2R4", "C8R8"):
            ref[c] = bpb(nll_hook(m, inp, tgt, HOOK_NAME[c]))
        print(f"{name}: hook path {ref} ({time.time() - t0:.1f} s)", flush=True)
        for c in ("BF16", "C4R4", "C2R4", "C8R8"):
            t0 = time.time()
            s, nb = nll_paged(m, inp, tgt, c)
            v = bpb(s)
            tol = TOL[HOOK_NAME[c]]
            row = {"text": name, "config": c, "sink": 0, "window": 0, "mode": "token by token",
                   "bits_per_byte": v, "hook_bits_per_byte": ref[c], "diff": v - ref[c],
                   "tolerance": tol, "ok": abs(v - ref[c]) <= tol, "cache_bytes": nb,
                   "seconds": round(time.time() - t0, 1)}
            ok &= row["ok"]
            out["rows"].append(row)
            print(json.dumps(row), flush=True)
        if name != "prose":
            continue
        s, nb = nll_paged(m, inp, tgt, "C4R4", step=False)
        row = {"text": name, "config": "C4R4", "sink": 0, "window": 0,
               "mode": "one forward (prefill pieces of 128)", "bits_per_byte": bpb(s),
               "hook_bits_per_byte": ref["C4R4"], "diff": bpb(s) - ref["C4R4"], "tolerance": 1e-3}
        row["ok"] = abs(row["diff"]) <= 1e-3
        ok &= row["ok"]
        out["rows"].append(row)
        print(json.dumps(row), flush=True)
        for c in ("C4R4", "C2R4") if name == "prose" else ():
            s, nb = nll_paged(m, inp, tgt, c, sink=4, window=128)
            row = {"text": name, "config": c, "sink": 4, "window": 128, "mode": "token by token",
                   "bits_per_byte": bpb(s), "fp32_bits_per_byte": ref["fp32"],
                   "bf16_hook_bits_per_byte": ref["BF16"],
                   "unprotected_hook_bits_per_byte": ref[c]}
            out["rows"].append(row)
            print(json.dumps(row), flush=True)
    prompt = prose[:8, :64].contiguous()
    for c in ("C4R4", "BF16"):
        t0 = time.time()
        cache = qt.MLAPagedCache(m, batch_size=8, max_cache_len=64 + a.new, config=c, sink=0,
                                 window=0)
        tp, sp = greedy(m, prompt, a.new, cache=cache)
        cache.check()
        th, sh = greedy(m, prompt, a.new, hook=HOOK_NAME[c])
        rows = compare_greedy(tp, sp, th, sh)
        out["greedy"][c] = {"prompts": 8, "new_tokens": a.new, "per_prompt": rows,
                            "all_agree": all(r["first_divergence"] is None for r in rows),
                            "seconds": round(time.time() - t0, 1)}
        print(f"greedy {c}: " + json.dumps(out["greedy"][c]), flush=True)
    res["tiny"] = out
    return ok


def run_families(a, res):
    import qmla_capture_lib as L
    from test_capture import family_configs
    from transformers import AutoModelForCausalLM
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = "cuda"
    text = L.synthetic_text(7).encode()
    N, T = 8, 128
    w = torch.frombuffer(bytearray(text[:N * T]), dtype=torch.uint8).view(N, T).long()
    inp = torch.cat([torch.full((N, 1), 256, dtype=torch.long), w[:, :-1]], 1).to(dev)
    tgt = w.to(dev)
    work = tempfile.mkdtemp(prefix="qmla-serve-")
    ok = True
    fams = []
    for k, (label, mtype, rope, kw) in enumerate(family_configs()):
        kw = dict(kw, qk_rope_head_dim=64, head_dim=64)
        r = {"family": label, "model_type": mtype}
        try:
            cfg = L.make_config(mtype, rope, **kw)
            d = os.path.join(work, str(k))
            L.build_tiny_checkpoint(cfg, d, seed=k + 1)
            model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                         attn_implementation="eager").to(dev).eval()
            model.generation_config.eos_token_id = None
            r["nll"] = {}
            n = N * T
            for c in ("BF16", "C4R4", "C2R4"):
                h = nll_hook(model, inp, tgt, HOOK_NAME[c]) / n / math.log(2)
                p, _ = nll_paged(model, inp, tgt, c)
                p = p / n / math.log(2)
                tol = TOL[HOOK_NAME[c]]
                r["nll"][c] = {"bits_per_token": p, "hook_bits_per_token": h, "diff": p - h,
                               "tolerance": tol, "ok": abs(p - h) <= tol}
            prompt = inp[:4, :32].contiguous()
            cache = qt.MLAPagedCache(model, batch_size=4, max_cache_len=32 + a.new, config="C4R4",
                                     sink=0, window=0)
            tp, sp = greedy(model, prompt, a.new, cache=cache)
            cache.check()
            th, sh = greedy(model, prompt, a.new, hook="C4R4")
            r["greedy_C4R4"] = compare_greedy(tp, sp, th, sh)
            r["ok"] = all(v["ok"] for v in r["nll"].values())
        except Exception as e:  # noqa: BLE001 - reported per family
            import traceback
            traceback.print_exc()
            r["error"] = repr(e)[:400]
            r["ok"] = False
        ok &= r["ok"]
        fams.append(r)
        print(json.dumps(r), flush=True)
    res["families"] = fams
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--windows", type=int, default=64)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--what", default="tiny,families")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    import transformers
    res = {"torch": torch.__version__, "transformers": transformers.__version__,
           "qmla": qmla.version(), "device": torch.cuda.get_device_name(), "argv": sys.argv,
           "windows": a.windows, "new_tokens": a.new}
    ok = True
    for what in a.what.split(","):
        t0 = time.time()
        ok &= run_tiny(a, res) if what == "tiny" else run_families(a, res)
        print(f"== {what} done in {time.time() - t0:.1f} s", flush=True)
    res["ok"] = bool(ok)
    json.dump(res, open(os.path.join(a.out, "generate.json"), "w"), indent=1)
    print("generate:", "ok" if ok else "FAIL", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
