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
  S = W = 0) against model.generate under the hook (use_cache=False), on
  the raw logits: per prompt the tokens that agree and, where they differ,
  the first position, each path's top-2 margin there (its best logit minus
  its second), each path's margin between the two tokens chosen, and a
  verdict against the rounding bound (greedy_report).
families: random-weight checkpoints of the transformers MLA families
  (experiments/capture/test_capture.py family_configs, with
  qk_rope_head_dim 64: the packed cache holds 64 RoPE channels; kv_lora_rank
  64, zero-padded to 512 in the cache); --fam-seqs sequences (32) of
  --fam-len bytes (256) of synthetic text: NLL through the cache against the
  hook for BF16, C4R4, C2R4 (tolerances as above), each with the paired
  standard error of the difference, per token and per sequence; for C4R4 /
  C2R4 also the hook with its input rounded to BF16 (Bf16InputHook: what
  the writer quantized while it took BF16 rows only; the cache now hands
  float32 models' rows over as float32) as a diagnostic; and greedy
  generation of --new tokens from 4 prompts (C4R4).
The rounding bound of a greedy run (one model and configuration): delta =
  the largest |logit difference| between the two paths over every position
  where both had seen the same tokens (each prompt's positions before its
  first divergence, all prompts of the run). The two paths compute the same
  quantized model with different roundings (BF16 queries and attention
  output in the kernel, C4R4 / C2R4 attending to unrounded dequantized
  values, token-by-token against whole-sequence products), so delta is the
  observed size of their rounding difference. At a divergence the hook
  prefers token a, the cache token c; hook margin h_a - h_c >= 0 and cache
  margin p_c - p_a >= 0 add up to (p_c - h_c) - (p_a - h_a), a difference
  of two logit errors: the divergence is "within rounding of a tie" when
  that sum is <= 2 delta, else "beyond rounding".
Writes DIR/generate.json; exit 1 when an agreement check fails (an NLL
outside its tolerance, or a greedy divergence beyond rounding).
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
    the packed writer quantized while qmla::kv_write took BF16 rows only (a
    diagnostic; the reference stays CacheHook, which the float32 rows now
    match)."""

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
    """Greedy tokens [B, new] and the raw logits [B, new, V] of each step."""
    kw = dict(max_new_tokens=new, do_sample=False, output_logits=True, output_scores=True,
              return_dict_in_generate=True, pad_token_id=0)
    with torch.no_grad():
        if hook is not None:
            with CacheHook(model, hook):
                r = model.generate(prompt, use_cache=False, **kw)
        else:
            r = model.generate(prompt, past_key_values=cache, use_cache=True, **kw)
    toks = r.sequences[:, prompt.shape[1]:]
    raw = getattr(r, "logits", None)
    logits = torch.stack([s.float() for s in (raw if raw is not None else r.scores)], 1)
    return toks, logits


def top2_margin(v):
    t = v.topk(2).values
    return float(t[0] - t[1])


def greedy_report(tp, sp, th, sh, label):
    """Greedy agreement of the cache (tp, logits sp) with the hook (th, sh):
    per prompt the agreeing tokens and, at a divergence, the first position,
    both paths' top-2 margins and margins between the two tokens, and the
    verdict against 2 delta (module docstring). Prints one line per
    divergence."""
    B, N = tp.shape
    firsts = []
    for b in range(B):
        diff = (tp[b] != th[b]).nonzero()
        firsts.append(int(diff[0]) if diff.numel() else None)
    # positions 0 .. first-1 of prompt b: both paths had the same tokens (position `first`
    # also, but its difference is the one being judged: left out of delta)
    ends = [N if f is None else f for f in firsts]
    pref = [float((sp[b, :e] - sh[b, :e]).abs().max()) if e > 0 else None
            for b, e in enumerate(ends)]
    seen = [d for d in pref if d is not None]
    delta = max(seen) if seen else None
    bound = 2 * delta if delta is not None else None
    rows = []
    for b in range(B):
        first = firsts[b]
        r = {"agree_prefix": N if first is None else first, "first_divergence": first,
             "max_abs_logit_diff_prefix": pref[b]}
        if first is not None:
            a, c = int(th[b, first]), int(tp[b, first])
            hm = float(sh[b, first, a] - sh[b, first, c])
            pm = float(sp[b, first, c] - sp[b, first, a])
            r.update(hook_token=a, paged_token=c, hook_margin=hm, paged_margin=pm,
                     hook_top2_margin=top2_margin(sh[b, first]),
                     paged_top2_margin=top2_margin(sp[b, first]),
                     margin_sum=hm + pm,
                     max_abs_logit_diff_here=float((sp[b, first] - sh[b, first]).abs().max()),
                     within_rounding=bool(bound is not None and hm + pm <= bound))
            print(f"greedy {label} prompt {b}: first divergence at token {first}: hook top-2 "
                  f"margin {r['hook_top2_margin']:.3g}, cache top-2 margin "
                  f"{r['paged_top2_margin']:.3g}; margins between the two tokens: hook "
                  f"{hm:.3g}, cache {pm:.3g}, sum {hm + pm:.3g} against 2 delta = "
                  + (f"{bound:.3g}" if bound is not None else "none (no common prefix)")
                  + (": within rounding of a tie" if r["within_rounding"] else
                     ": BEYOND ROUNDING"), flush=True)
        rows.append(r)
    ok = all(r["first_divergence"] is None or r["within_rounding"] for r in rows)
    return {"prompts": B, "new_tokens": N, "delta": delta, "bound": bound,
            "bound_rule": "divergence within rounding when hook_margin + paged_margin <= 2 delta; "
                          "delta = max |logit difference| over the positions before each "
                          "prompt's first divergence, all prompts",
            "agree": sum(r["first_divergence"] is None for r in rows),
            "all_agree": all(r["first_divergence"] is None for r in rows),
            "ok": ok, "per_prompt": rows}


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
        g = greedy_report(tp, sp, th, sh, f"tiny {c}")
        g["seconds"] = round(time.time() - t0, 1)
        ok &= g["ok"]
        out["greedy"][c] = g
        print(f"greedy {c}: {g['agree']}/8 prompts agree on {a.new} tokens, delta "
              f"{g['delta']}, ok {g['ok']}; " + json.dumps(g), flush=True)
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
            r["greedy_C4R4"] = greedy_report(tp, sp, th, sh, f"{label} C4R4")
            r["ok"] = all(v["ok"] for v in r["nll"].values()) and r["greedy_C4R4"]["ok"]
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
