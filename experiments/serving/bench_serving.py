#!/usr/bin/env python3
"""experiments/serving/bench_serving.py — memory and decode speed of the packed
cache against BF16 (issue 21 item 4), on the accelerator machine:

  python3 experiments/serving/bench_serving.py --out DIR [--contexts 4096,32768,131072]
      [--batches 1,8,32,64] [--caches C4R4,BF16,dynamic[,C2R4@131072x32+...]]
      [--steps 8] [--budget-gib 125] [--seconds 150]
      [--graph-variants C4R4:7,1;BF16:0,3] [--replays 10] [--profile-at 131072x32]

Model: a random DeepseekV2 attention stack shaped as DeepSeek-V2-Lite's
(27 layers, hidden 2048, H 16, d_c 512, d_r 64, d_n 128, d_v 128; seed 21),
BF16, every MLP replaced by torch.nn.Identity so that a decode step is the
attention stack (projections, cache write, attention, o_proj) and the
embedding / LM head (vocabulary 1024). Caches, side by side in one run:
  dynamic  transformers' DynamicCache (per-head K and V in BF16, eager
           attention): filled with random K, V tensors;
  BF16     MLAPagedCache BF16 (the latent [c_kv ; k_rope] in BF16 pages,
           qmla::decode);
  C4R4     MLAPagedCache C4R4 (sink 4, window 128);
  C2R4, C8R8  likewise, where --caches names them (with @CONTEXTxBATCH+...
           only at those points: a side measurement, since serving run 9);
  C4R4q8, C2R4q8  C4R4 / C2R4 with q8 metadata (314 / 186 bytes a token in
           the pages where f16 takes 324 / 196; since serving run 10; graph
           variants 0, 1, 3, 4, 7 only: the others refuse q8 pages);
both paged caches filled through qmla::kv_write with random rows. Per
(cache, context, batch): cache bytes per token (the cache's device bytes /
(batch x context)), torch.cuda.max_memory_allocated over the steps, decode
step time (CUDA events, median of --steps steps after 2 warm-up steps),
tokens/s per sequence and in aggregate, and the attention kernels alone
(qmla::decode of all 27 layers on random absorbed queries, paged caches).
A point whose cache would not fit --budget-gib is recorded as "does not
fit" with its computed bytes. The largest batch at 32K context inside the
budget follows from the measured bytes per sequence. Writes DIR/bench_serving.tsv.

Those rows ("C4R4", "BF16", "dynamic") are the eager step: transformers'
forward with the cache's per-layer Python, one launch at a time, so at these
sizes they time the host more than the GPU. Beside them, for each paged cache
and each decode-kernel variant of --graph-variants, a CUDA-graph row
("C4R4-graph-v0", "BF16-graph-v3", ...): the whole decode step (embedding,
27 x (norms, projections, qmla::kv_write, query absorption, qmla::decode,
W_UV, o_proj), final norm and LM head) captured once in a torch.cuda.CUDAGraph
on the cache the eager row filled (at its length L = context + steps + 2; the
block-table rows of position L reserved before the capture, the plan made on
the host at capture time, a 4-D attention mask handed in so that transformers
builds none) and replayed --replays times after 2 warm-up replays (median of
CUDA events around each replay). Every replay is the step at position L: it
rewrites that token's rows (the same values) and attends over L + 1 tokens.
Its attn_kernels_s is the 27 qmla::decode launches captured in a graph of
their own. Check, per graph row: the replay's logits against the eager
forward's at the same state, for two different input batches (output filled
with NaN before each replay, the two inputs' logits must differ): bit for bit,
or the largest |difference| is recorded; DIR/bench_serving.json holds them and
the run fails (exit 1) when a replay differs from its eager step. It also
fails when, after a DynamicCache point, qmla.torch's kv_b_proj hook still
holds latents (the whole-context latents of that cache: 58 GB after 32K x 64
in run 6, before the dispatch dropped them; checked since after run 6).

The paged caches decode with the library's default plan (MLAPagedCache's
variant 7: variant 7 for C4R4, 0 for BF16) in the eager rows; the graph rows
name their variant. Per-phase breakdown (--profile-at CONTEXTxBATCH, default
131072x32; since run 7): at that point the first graph row of each paged
cache also runs one eager step twice under torch.profiler with
record_function ranges around the model's modules (mod.q_proj, mod.o_proj,
...) and qmla.torch's phases (qmla.rows, qmla.index, qmla.kv_write,
qmla.absorb, qmla.decode, qmla.expand; qt.PROFILE_RANGES), and replays the
captured graph 5 times under the profiler: device microseconds per step per
range and per kernel class (GEMM, qmla decode, kv_write, elementwise, ...),
kernels per step, the 12 kernels of most time. Written to
DIR/bench_profile.json.
"""
import argparse
import gc
import json
import os
import re
import statistics
import sys
import time

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
import qmla  # noqa: E402
import qmla.paging as P  # noqa: E402
import qmla.torch as qt  # noqa: E402

LAYERS, HID, H, DN, DV = 27, 2048, 16, 128, 128


def make_model(dev, layers=LAYERS, hidden=HID, heads=H, d_n=DN, d_v=DV, vocab=1024):
    """The random BF16 DeepseekV2 attention stack (seed 21, every MLP an
    identity; d_c 512, d_r 64); the defaults are the benchmark's V2-Lite
    shape (experiments/serving/test_ops.py makes a small one)."""
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM
    cfg = DeepseekV2Config(vocab_size=vocab, hidden_size=hidden, num_attention_heads=heads,
                           num_key_value_heads=heads, kv_lora_rank=512, q_lora_rank=None,
                           qk_rope_head_dim=64, qk_nope_head_dim=d_n, v_head_dim=d_v,
                           num_hidden_layers=layers, first_k_dense_replace=layers,
                           intermediate_size=256, max_position_embeddings=262144,
                           n_routed_experts=1, n_shared_experts=1, moe_intermediate_size=64,
                           rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                           tie_word_embeddings=False, attn_implementation="eager")
    torch.manual_seed(21)
    with torch.device(dev):
        m = DeepseekV2ForCausalLM(cfg).to(torch.bfloat16)
    for layer in m.model.layers:
        layer.mlp = torch.nn.Identity()
    m.generation_config.eos_token_id = None
    return m.eval().to(dev)


DYN = {}


def probe_dynamic(model, dev):
    """Per-token shapes transformers' DynamicCache stores for this model (4.x /
    early 5.x: per-head K [H, d_n + d_r] and V [H, d_v]; 5.17: the latent
    [1, d_c] and the RoPE key [1, d_r]), from one real forward."""
    from transformers import DynamicCache
    c = DynamicCache()
    with torch.no_grad():
        model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=dev), past_key_values=c,
              use_cache=True)
    k, v = c.layers[0].keys, c.layers[0].values
    DYN.update(hk=k.shape[1], dk=k.shape[3], hv=v.shape[1], dv=v.shape[3])
    return DYN


def dyn_bytes(B, ctx):
    return LAYERS * B * ctx * (DYN["hk"] * DYN["dk"] + DYN["hv"] * DYN["dv"]) * 2


def dyn_step_bytes(B, ctx):
    """Transient bytes of one DynamicCache decode step: the concatenated layer
    and, where the cache holds the latent, its per-head expansion."""
    return B * ctx * ((DYN["hk"] * DYN["dk"] + DYN["hv"] * DYN["dv"]) * 2 + H * (DN + 64 + DV) * 2)


def paged_bytes(cfg, B, ctx):
    return B * ctx * P.bytes_per_token(cfg, ctx, LAYERS)


def fill_paged(cache, B, ctx, dev, gen):
    chunk = max(64, min(ctx, (1 << 20) // B))
    rows = (torch.randn((B, chunk, P.D), generator=gen, device=dev) * 0.5).to(torch.bfloat16)
    for layer in cache._pages:
        done = 0
        while done < ctx:
            n = min(chunk, ctx - done)
            cache.write_rows(layer, rows[:, :n])
            done += n
    cache.check()


def fill_dynamic(B, ctx, dev, gen):
    from transformers import DynamicCache
    c = DynamicCache()
    for layer in range(LAYERS):
        k = torch.randn((B, DYN["hk"], ctx, DYN["dk"]), generator=gen, device=dev,
                        dtype=torch.bfloat16)
        v = torch.randn((B, DYN["hv"], ctx, DYN["dv"]), generator=gen, device=dev,
                        dtype=torch.bfloat16)
        c.update(k, v, layer)
    return c


def time_steps(model, cache, B, ctx, steps, dev):
    ids = torch.randint(0, 1024, (B, 1), device=dev)
    times = []
    torch.cuda.reset_peak_memory_stats(dev)
    with torch.no_grad():
        for i in range(steps + 2):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            model(input_ids=ids, past_key_values=cache, use_cache=True)
            e1.record()
            torch.cuda.synchronize(dev)
            if i >= 2:
                times.append(e0.elapsed_time(e1) / 1e3)
    return statistics.median(times), torch.cuda.max_memory_allocated(dev)


def time_kernels(cache, B, ctx, dev, gen, reps=5):
    q = (torch.randn((B, 1, H, P.D), generator=gen, device=dev) * 0.1).to(torch.bfloat16)
    layers = list(cache._pages)
    ts = []
    for r in range(reps + 1):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for layer in layers:
            cache.decode_latent(layer, q, 0.07)
        e1.record()
        torch.cuda.synchronize(dev)
        if r:
            ts.append(e0.elapsed_time(e1) / 1e3)
    return statistics.median(ts)


PAGED = ("C4R4", "C2R4", "C8R8", "BF16", "C4R4q8", "C2R4q8")


def cache_cfg(cname):
    """The qmla.paging configuration of a paged cache name (C4R4q8: C4R4
    with q8 metadata; sink 4, window 128)."""
    base, meta = P.split_cache_name(cname)
    return P.parse_config(base, meta=meta)


def parse_graph_variants(text):
    """'C4R4:0,1;BF16:0,3' -> [('C4R4', 0), ('C4R4', 1), ('BF16', 0), ('BF16', 3)]"""
    out = []
    for part in filter(None, (x.strip() for x in text.split(";"))):
        name, _, vs = part.partition(":")
        if name not in PAGED or not vs:
            raise SystemExit(f"bench_serving: --graph-variants {text!r}: expected "
                             f"'C4R4:0,1;BF16:0,3' (caches {' / '.join(PAGED)}, decode variants)")
        out += [(name, int(v)) for v in vs.split(",")]
    return out


def parse_caches(text):
    """'C4R4,BF16,dynamic,C2R4@131072x32+32768x64' -> [('C4R4', None), ...,
    ('C2R4', {'131072x32', '32768x64'})]: a cache with '@' runs only at the
    CONTEXTxBATCH points it names (a side measurement that does not cost the
    whole grid); without, at every point."""
    out = []
    for part in filter(None, (x.strip() for x in text.split(","))):
        name, at, pts = part.partition("@")
        points = set(filter(None, pts.split("+"))) if at else None
        if name not in PAGED + ("dynamic",) or (at and not points) or any(
                not re.fullmatch(r"[0-9]+x[0-9]+", x) for x in points or ()):
            raise SystemExit(f"bench_serving: --caches {text!r}: expected caches of "
                             f"{', '.join(PAGED + ('dynamic',))}, each optionally "
                             "@CONTEXTxBATCH+... (e.g. 'C4R4,BF16,dynamic,C2R4@131072x32')")
        out.append((name, points))
    return out


def _set_variant(cache, variant):
    """Decode with `variant` from now on (plans are made again; the pages stay)."""
    cache.variant = int(variant)
    cache._plans = {}


def graph_kernels(cache, B, dev, gen, reps):
    """The 27 qmla::decode launches of time_kernels captured in one CUDA graph
    (random absorbed queries, every layer at its length): median replay time."""
    q = (torch.randn((B, 1, H, P.D), generator=gen, device=dev) * 0.1).to(torch.bfloat16)
    layers = list(cache._pages)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for layer in layers:
            cache.decode_latent(layer, q, 0.07)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize(dev)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for layer in layers:
            cache.decode_latent(layer, q, 0.07)
    ts = []
    for r in range(reps + 2):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        torch.cuda.synchronize(dev)
        if r >= 2:
            ts.append(e0.elapsed_time(e1) / 1e3)
    del g
    return statistics.median(ts)


KERNEL_CLASSES = (("qmla decode (main + combine)", ("decode",)),
                  ("qmla kv_write", ("kv_write", "kv_copy")),
                  ("GEMM", ("gemm", "gemv", "nvjet", "cutlass", "xmma", "splitk", "cublas")),
                  ("cat", ("catarray", "cat_")),
                  ("reduce", ("reduce",)),
                  ("index / gather", ("index", "gather", "scatter")),
                  ("fill", ("fill",)),
                  ("elementwise / copy", ("elementwise", "vectorized", "unrolled", "copy")))


def kernel_class(name):
    n = name.lower()
    for cls, keys in KERNEL_CLASSES:
        if any(k in n for k in keys):
            return cls
    return "other"


def kernel_table(prof, per):
    """{class: [microseconds per step, kernels per step]} over the CUDA kernel
    events of a profile of `per` steps, plus the 12 kernels of most time."""
    from torch.autograd import DeviceType
    cls, names = {}, {}
    for e in prof.events():
        if e.device_type != DeviceType.CUDA:
            continue
        us = e.time_range.elapsed_us()
        c = cls.setdefault(kernel_class(e.name), [0.0, 0])
        c[0] += us / per
        c[1] += 1 / per
        n = names.setdefault(e.name[:90], [0.0, 0])
        n[0] += us / per
        n[1] += 1 / per
    total = sum(v[0] for v in cls.values())
    top = sorted(names.items(), key=lambda kv: -kv[1][0])[:12]
    return dict(kernel_us_per_step=total, kernels_per_step=sum(v[1] for v in cls.values()),
                classes={k: dict(us=round(v[0], 2), kernels=round(v[1], 2))
                         for k, v in sorted(cls.items(), key=lambda kv: -kv[1][0])},
                top_kernels=[dict(name=k, us=round(v[0], 2), kernels=round(v[1], 2))
                             for k, v in top])


# modules of the model whose forwards the eager profile brackets (names of
# record_function ranges "mod.<attr>"); qmla.torch adds its own "qmla.*"
RANGE_ATTRS = ("embed_tokens", "input_layernorm", "self_attn", "q_proj", "q_a_proj", "q_b_proj",
               "kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "o_proj",
               "post_attention_layernorm", "norm", "lm_head")


def range_hooks(model):
    """Forward pre/post hooks opening and closing a record_function range
    "mod.<attr>" around every module named in RANGE_ATTRS; returns the handles."""
    hs = []
    for name, mod in model.named_modules():
        attr = name.rsplit(".", 1)[-1]
        if attr not in RANGE_ATTRS:
            continue
        label = "mod." + attr

        def pre(m, args, label=label):
            r = torch.profiler.record_function(label)
            r.__enter__()
            m._qmla_rf = getattr(m, "_qmla_rf", []) + [r]

        def post(m, args, out):
            m._qmla_rf.pop().__exit__(None, None, None)
        hs += [mod.register_forward_pre_hook(pre), mod.register_forward_hook(post)]
    return hs


def range_table(prof, per):
    """{range: device microseconds per step} of the mod.* and qmla.* ranges
    (kernels launched inside each, children included) and the exclusive
    remainders: self_attn's own kernels (RoPE, splits, transposes of
    transformers' attention) and what lies outside every range."""
    out = {}
    for a in prof.key_averages():
        if a.key.startswith("mod.") or a.key.startswith("qmla."):
            t = getattr(a, "device_time_total", None)
            if t is None:
                t = a.cuda_time_total
            out[a.key] = round(t / per, 2)
    inner = ("mod.q_proj", "mod.q_a_proj", "mod.q_b_proj", "mod.kv_a_proj_with_mqa",
             "mod.kv_a_layernorm", "mod.kv_b_proj", "mod.o_proj", "qmla.rows", "qmla.index",
             "qmla.kv_write", "qmla.absorb", "qmla.decode", "qmla.expand")
    if "mod.self_attn" in out:
        out["self_attn other (exclusive)"] = round(
            out["mod.self_attn"] - sum(out.get(k, 0.0) for k in inner), 2)
    return out


def profile_point(model, cache, B, L, mask, ids, dev, graph):
    """Per-phase breakdown of one decode step at length L: the eager forward
    under torch.profiler with module and qmla ranges (kernels per class and
    per range), and the captured graph's replays (kernels per class)."""
    def fwd():
        for k in list(cache.lengths):
            cache.lengths[k] = L
        return model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
    from torch.profiler import ProfilerActivity, profile
    res = {}
    hs = range_hooks(model)
    qt.PROFILE_RANGES = True
    try:
        with torch.no_grad():
            fwd()
            torch.cuda.synchronize(dev)
            n = 2
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(n):
                    fwd()
                torch.cuda.synchronize(dev)
        res["eager"] = kernel_table(prof, n)
        res["eager"]["ranges_us"] = range_table(prof, n)
    finally:
        qt.PROFILE_RANGES = False
        for h in hs:
            h.remove()
    n = 5
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            graph.replay()
        torch.cuda.synchronize(dev)
    res["graph"] = kernel_table(prof, n)
    for k in list(cache.lengths):     # the eager steps advanced the lengths: back to L, so that
        cache.lengths[k] = L          # the next graph row starts where this one did (run 7 did not)
    return res


def graph_step(model, cache, B, dev, gen, replays, profile=False):
    """One whole decode step captured in a CUDA graph at the cache's length L
    and replayed: (median step seconds, peak bytes, check dict). The check
    compares the replay's logits with the eager forward's at the same state
    for two input batches. With profile, the check dict also holds
    profile_point's breakdown ('profile')."""
    L = max(cache.lengths.values())
    cache._reserve(L + 1)            # block-table rows of position L on the device now
    ids_a = torch.randint(0, 1024, (B, 1), device=dev, generator=gen)
    ids_b = torch.randint(0, 1024, (B, 1), device=dev, generator=gen)
    # a 4-D mask is handed back by transformers as it is (no mask construction
    # in the graph); the paged attention does not read it
    mask = torch.zeros((B, 1, 1, L + 1), dtype=torch.bfloat16, device=dev)
    static_ids = ids_a.clone()

    def at_len():
        for k in list(cache.lengths):
            cache.lengths[k] = L

    def fwd(ids):
        at_len()
        return model(input_ids=ids, attention_mask=mask, past_key_values=cache,
                     use_cache=True).logits

    torch.cuda.reset_peak_memory_stats(dev)
    with torch.no_grad():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):           # warm-up off the capture stream
            for _ in range(2):
                fwd(static_ids)
        torch.cuda.current_stream().wait_stream(s)
        ref_a = fwd(ids_a).clone()
        ref_b = fwd(ids_b).clone()
        torch.cuda.synchronize(dev)
        cache.check()
        g = torch.cuda.CUDAGraph()
        at_len()
        with torch.cuda.graph(g):
            static_out = fwd(static_ids)
        at_len()
        chk = dict(length=L)
        same, diff = True, 0.0
        for tag, ids, ref in (("b", ids_b, ref_b), ("a", ids_a, ref_a)):
            static_ids.copy_(ids)
            static_out.fill_(float("nan"))
            g.replay()
            torch.cuda.synchronize(dev)
            eq = bool(torch.equal(static_out, ref))
            d = float((static_out.float() - ref.float()).abs().max())
            chk[f"exact_{tag}"] = eq
            chk[f"max_abs_{tag}"] = d
            same &= eq
            diff = max(diff, d) if d == d else float("inf")
        chk["inputs_differ"] = bool(not torch.equal(ref_a, ref_b))
        chk["finite"] = bool(torch.isfinite(ref_a).all() and torch.isfinite(ref_b).all())
        chk["exact"] = same
        chk["max_abs"] = diff
        chk["ok"] = same and chk["inputs_differ"] and chk["finite"]
        ts = []
        for r in range(replays + 2):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            g.replay()
            e1.record()
            torch.cuda.synchronize(dev)
            if r >= 2:
                ts.append(e0.elapsed_time(e1) / 1e3)
        cache.check()
        peak = torch.cuda.max_memory_allocated(dev)
        if profile:
            try:
                chk["profile"] = profile_point(model, cache, B, L, mask, ids_a, dev, g)
                chk["profile"]["graph_step_us_median"] = statistics.median(ts) * 1e6
            except Exception as e:      # the breakdown is extra: recorded, the row stands
                chk["profile"] = dict(error=repr(e)[:500])
            print("profile", json.dumps(chk["profile"]), flush=True)
        del g, static_out
    return statistics.median(ts), peak, chk


def graph_row(model, cache, cname, var, ctx, B, nb, dev, gen, replays, checks, profile=False):
    """The TSV row of one CUDA-graph point (variant `var` of the decode kernel)."""
    name = f"{cname}-graph-v{var}"
    row = dict(cache=name, context=ctx, batch=B)
    try:
        _set_variant(cache, var)
        kt = graph_kernels(cache, B, dev, gen, replays)
        st, peak, chk = graph_step(model, cache, B, dev, gen, replays, profile)
        chk.update(cache=name, context=ctx, batch=B, variant=var)
        checks.append(chk)
        print("graph check", chk, flush=True)
        row.update(status="ok", cache_bytes=int(nb), bytes_per_token="%.1f" % (nb / (B * ctx)),
                   peak_alloc_bytes=int(peak), step_s="%.6f" % st, tok_s_per_seq="%.2f" % (1 / st),
                   tok_s_aggregate="%.1f" % (B / st), attn_kernels_s="%.6f" % kt)
    except Exception as e:           # a failed capture or replay: recorded, the run goes on
        print(f"graph row {name} {ctx} {B}: {e!r}"[:2000], flush=True)
        checks.append(dict(cache=name, context=ctx, batch=B, variant=var, ok=False, exact=False,
                           max_abs=float("inf"), error=repr(e)[:500]))
        row.update(status="error", cache_bytes=int(nb))
    finally:
        _set_variant(cache, qt.DEFAULT_VARIANT)
        gc.collect()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--contexts", default="4096,32768,131072")
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--caches", default="C4R4,BF16,dynamic",
                    help="caches (C4R4, C2R4, C8R8, BF16, C4R4q8, C2R4q8: q8 metadata, dynamic), "
                         "each at every point or, "
                         "with @CONTEXTxBATCH+..., only at those")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--budget-gib", type=float, default=125.0)
    ap.add_argument("--seconds", type=float, default=150.0, help="stop starting points after this")
    ap.add_argument("--profile-at", default="131072x32",
                    help="CONTEXTxBATCH points ('' for none, comma-separated) whose first graph "
                         "row of each cache gets the per-phase breakdown (bench_profile.json)")
    ap.add_argument("--graph-variants", default="C4R4:7,1;BF16:0,3",
                    help="CUDA-graph rows: cache:decode variants; '' for none")
    ap.add_argument("--replays", type=int, default=10, help="timed replays of each graph")
    a = ap.parse_args()
    gvars = parse_graph_variants(a.graph_variants)
    caches = parse_caches(a.caches)
    os.makedirs(a.out, exist_ok=True)
    dev = torch.device("cuda")
    t_start = time.time()
    model = make_model(dev)
    probe_dynamic(model, dev)
    gen = torch.Generator(device=dev).manual_seed(21)
    budget = a.budget_gib * 2 ** 30
    path = os.path.join(a.out, "bench_serving.tsv")
    f = open(path, "w")
    import transformers
    f.write(f"# DynamicCache stores per token and layer K {DYN['hk']} x {DYN['dk']} and V "
            f"{DYN['hv']} x {DYN['dv']} (BF16)\n")
    f.write(f"# bench_serving.py {' '.join(sys.argv[1:])}; torch {torch.__version__}, transformers "
            f"{transformers.__version__}, qmla {qmla.version()}, {torch.cuda.get_device_name()}; "
            f"V2-Lite-shaped attention stack, {LAYERS} layers, H {H}, MLP identity, BF16, seed 21\n")
    cols = ["cache", "context", "batch", "status", "cache_bytes", "bytes_per_token",
            "peak_alloc_bytes", "step_s", "tok_s_per_seq", "tok_s_aggregate", "attn_kernels_s"]
    f.write("\t".join(cols) + "\n")
    f.flush()
    per_seq = {}
    checks = []
    kept_latents = []
    for ctx in [int(x) for x in a.contexts.split(",")]:
        for B in [int(x) for x in a.batches.split(",")]:
            for cname, points in caches:
                if points is not None and f"{ctx}x{B}" not in points:
                    continue
                row = dict(cache=cname, context=ctx, batch=B)
                if time.time() - t_start > a.seconds:
                    row["status"] = "not run (time)"
                else:
                    need = (dyn_bytes(B, ctx + a.steps + 2) + dyn_step_bytes(B, ctx + a.steps + 2)
                            if cname == "dynamic" else
                            paged_bytes(cache_cfg(cname), B, ctx + a.steps + 3))
                    if need > budget:
                        row.update(status="does not fit", cache_bytes=int(need))
                    else:
                        cache = None
                        try:
                            gc.collect()
                            torch.cuda.empty_cache()
                            if cname == "dynamic":
                                cache = fill_dynamic(B, ctx, dev, gen)
                                nb = dyn_bytes(B, ctx)
                                kt = ""
                            else:
                                base, meta = P.split_cache_name(cname)
                                cache = qt.MLAPagedCache(model, batch_size=B,
                                                         max_cache_len=ctx + a.steps + 3,
                                                         config=base, meta=meta)
                                fill_paged(cache, B, ctx, dev, gen)
                                nb = cache.nbytes()
                                kt = "%.6f" % time_kernels(cache, B, ctx, dev, gen)
                            st, peak = time_steps(model, cache, B, ctx, a.steps, dev)
                            row.update(status="ok", cache_bytes=int(nb),
                                       bytes_per_token="%.1f" % (nb / (B * ctx)),
                                       peak_alloc_bytes=int(peak), step_s="%.6f" % st,
                                       tok_s_per_seq="%.2f" % (1 / st),
                                       tok_s_aggregate="%.1f" % (B / st), attn_kernels_s=kt)
                            per_seq.setdefault(cname, {})[ctx] = nb / B
                            if cname == "dynamic":
                                # the latents qmla.torch's kv_b_proj hook still holds after
                                # the DynamicCache steps (must be none: run 6 found 58 GB)
                                kept = sum(t.numel() * t.element_size()
                                           for t in qt._LATENT.values())
                                kept_latents.append(dict(context=ctx, batch=B,
                                                         tensors=len(qt._LATENT), bytes=kept))
                            if cname != "dynamic":
                                f.write("\t".join(str(row.get(c, "")) for c in cols) + "\n")
                                f.flush()
                                print("[%.1f s]" % (time.time() - t_start), row, flush=True)
                                row = None
                                prof = f"{ctx}x{B}" in a.profile_at.split(",")
                                for gname, var in gvars:
                                    if gname != cname:
                                        continue
                                    gr = graph_row(model, cache, cname, var, ctx, B, nb, dev, gen,
                                                   a.replays, checks, prof)
                                    prof = False
                                    f.write("\t".join(str(gr.get(c, "")) for c in cols) + "\n")
                                    f.flush()
                                    print("[%.1f s]" % (time.time() - t_start), gr, flush=True)
                            del cache
                        except torch.cuda.OutOfMemoryError as e:
                            row.update(status="out of memory", cache_bytes=int(need))
                            print(repr(e)[:200], flush=True)
                        cache = None
                        gc.collect()
                if row is not None:
                    f.write("\t".join(str(row.get(c, "")) for c in cols) + "\n")
                    f.flush()
                    print("[%.1f s]" % (time.time() - t_start), row, flush=True)
    # the largest batch in the budget at each measured context
    f.write("# largest batch inside the budget (%.0f GiB of cache), from the measured bytes "
            "per sequence:\n" % a.budget_gib)
    for cname, d in per_seq.items():
        for ctx, b in sorted(d.items()):
            f.write(f"# {cname}\tcontext {ctx}\t{b:.0f} bytes/sequence\tmax batch "
                    f"{int(budget // b)}\n")
    n_ok = sum(c["ok"] for c in checks)
    f.write(f"# CUDA-graph replay against the eager step (logits, two input batches each): "
            f"{sum(c['exact'] for c in checks)} of {len(checks)} rows bit for bit, "
            f"{n_ok} of {len(checks)} ok; largest |difference| "
            f"{max([c['max_abs'] for c in checks] or [0.0]):.3g}\n")
    kept_ok = all(k["tensors"] == 0 for k in kept_latents)
    f.write(f"# latents kept by the kv_b_proj hook after a DynamicCache point: "
            f"{max([k['bytes'] for k in kept_latents] or [0])} bytes at most over "
            f"{len(kept_latents)} points ({'none' if kept_ok else 'some kept'})\n")
    f.close()
    profs = [dict(cache=c["cache"], context=c["context"], batch=c["batch"], **c.pop("profile"))
             for c in checks if "profile" in c]
    with open(os.path.join(a.out, "bench_serving.json"), "w") as jf:
        json.dump(dict(command=" ".join(sys.argv), graph_checks=checks,
                       kept_latents_after_dynamic=kept_latents), jf, indent=1)
    with open(os.path.join(a.out, "bench_profile.json"), "w") as jf:
        json.dump(dict(command=" ".join(sys.argv), profiles=profs), jf, indent=1)
    print(open(path).read(), flush=True)
    return 0 if n_ok == len(checks) and kept_ok else 1


if __name__ == "__main__":
    sys.exit(main())
