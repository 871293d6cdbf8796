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
  64, zero-padded to 512 in the cache); --fam-seqs sequences (32) of
  --fam-len bytes (256) of synthetic text: NLL through the cache against the
  hook for BF16, C4R4, C2R4 (tolerances as above), each with the paired
  standard error of the difference, per token and per sequence (a first run
  on 8 x 128 tokens put DeepseekV3 C4R4 at -1.49e-3 against the 1e-3
  tolerance: docs/serving.md); for C4R4 / C2R4 also the hook with its input
  rounded to BF16 (Bf16InputHook, what the packed writer quantizes) as a
  diagnostic of where the difference comes from; and greedy generation of
  --new tokens from 4 prompts (C4R4).
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


class Bf16InputHook(CacheHook):
    """eval_hook.py's CacheHook with its input rounded to BF16 first: what
    the packed writer quantizes (qmla::kv_write takes BF16 rows), so that
    the codes match the pages' (a diagnostic of the paged-vs-hook
    difference; the reference stays CacheHook)."""

    def process(self, layer, path, x):
        return super().process(layer, path, x.to(torch.bfloat16).to(x.dtype))


def tok_nll_hook(model, inp, tgt, cfg, batch=64, hook=CacheHook):
    """Per-token NLL (nats) [N, T] under the QDQ hook (use_cache=False)."""
    out = []
    with hook(model, cfg), torch.no_grad():
        for i in range(0, inp.shape[0], batch):
            lg = model(input_ids=inp[i:i + batch], use_cache=False).logits.float()
            out.append(F.cross_entropy(lg.transpose(1, 2), tgt[i:i + batch],
                                       reduction="none").double())
    return torch.cat(out, 0)


def nll_hook(model, inp, tgt, cfg, batch=64):
    return float(tok_nll_hook(model, inp, tgt, cfg, batch).sum())


def paired(p, h):
    """Paired difference of per-token NLL [N, T] (nats) in bits/token: the
    mean and its standard errors, per token (tokens as independent pairs)
    and per sequence (sequence means as the independent pairs: a code flip
    moves every later token of its sequence, so tokens are not independent)."""
    d = (p - h) / math.log(2)
    N, T = d.shape
    se_tok = float(d.std(unbiased=True)) / math.sqrt(d.numel())
    se_seq = float(d.mean(1).std(unbiased=True)) / math.sqrt(N)
    return float(d.mean()), se_tok, se_seq


def nll_paged(model, inp, tgt, cfg, sink=0, window=0, step=True, per_token=False):
    """Summed NLL with the packed cache: token by token (step) or one forward
    (per_token: the per-token NLL [N, T] in nats instead of the sum)."""
    B, T = inp.shape
    cache = qt.MLAPagedCache(model, batch_size=B, max_cache_len=T, config=cfg, sink=sink,
                             window=window)
    parts = []
    spans = [(t, t + 1) for t in range(T)] if step else [(0, T)]
    with torch.no_grad():
        for a, b in spans:
            lg = model(input_ids=inp[:, a:b], past_key_values=cache, use_cache=True).logits.float()
            parts.append(F.cross_entropy(lg.transpose(1, 2), tgt[:, a:b],
                                         reduction="none").double())
    cache.check()
    lens = {cache.lengths[k] for k in cache.lengths}
    if lens != {T}:
        raise RuntimeError(f"cache lengths {lens}, expected {T}")
    tok = torch.cat(parts, 1)
    return (tok if per_token else float(tok.sum())), cache.nbytes()


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
    N, T = a.fam_seqs, a.fam_len
    if len(text) < N * T:
        raise SystemExit(f"families: the synthetic text has {len(text)} bytes, "
                         f"expected at least {N} x {T} = {N * T}")
    w = torch.frombuffer(bytearray(text[:N * T]), dtype=torch.uint8).view(N, T).long()
    inp = torch.cat([torch.full((N, 1), 256, dtype=torch.long), w[:, :-1]], 1).to(dev)
    tgt = w.to(dev)
    res["families_sample"] = {"sequences": N, "tokens_per_sequence": T, "tokens": N * T}
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
                ht = tok_nll_hook(model, inp, tgt, HOOK_NAME[c])
                pt, _ = nll_paged(model, inp, tgt, c, per_token=True)
                h = float(ht.sum()) / n / math.log(2)
                p = float(pt.sum()) / n / math.log(2)
                mean, se_tok, se_seq = paired(pt, ht)
                tol = TOL[HOOK_NAME[c]]
                e = {"bits_per_token": p, "hook_bits_per_token": h, "diff": p - h,
                     "se_per_token": se_tok, "se_per_sequence": se_seq,
                     "tolerance": tol, "ok": abs(p - h) <= tol}
                if c != "BF16":
                    # diagnostic: the hook on BF16-rounded inputs (the writer's input)
                    bt = tok_nll_hook(model, inp, tgt, HOOK_NAME[c], hook=Bf16InputHook)
                    m2, s2, q2 = paired(pt, bt)
                    m3, s3, q3 = paired(bt, ht)
                    e["bf16_input_hook"] = {
                        "bits_per_token": float(bt.sum()) / n / math.log(2),
                        "paged_minus_it": m2, "se_per_token": s2, "se_per_sequence": q2,
                        "it_minus_hook": m3, "it_minus_hook_se_per_token": s3,
                        "it_minus_hook_se_per_sequence": q3}
                r["nll"][c] = e
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
    ap.add_argument("--fam-seqs", type=int, default=32, help="families: sequences")
    ap.add_argument("--fam-len", type=int, default=256, help="families: tokens per sequence")
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
