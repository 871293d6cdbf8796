#!/usr/bin/env python3
"""Train a tiny byte-level MLA language model (transformers' DeepseekV2ForCausalLM).

Runs on the accelerator machine (torch 2.11, transformers 5.x):

    PYTHONUNBUFFERED=1 python3 experiments/tiny-mla/train.py --out $OUT --deadline-s 480

Inputs: .corpus/{prose,code}.train.txt.xz (prepare_corpus.sh; carried to the
device) and data/heldout/{prose,code}.txt.gz (committed).

Tokens are bytes 0..255 plus BOS = 256; the vocabulary is padded to 320.
Every training sequence is BOS followed by 511 bytes of a uniformly random
window of one corpus (half of each batch prose, half code); the model predicts
all 512 bytes of the window (the first from BOS alone).

Wall-clock bounded: the training loop stops so that the whole script ends by
--deadline-s after it started (a reserve is kept for the final evaluation,
saving and diagnostics).  The cosine learning-rate schedule runs on elapsed
training time, so it always completes.

Outputs under --out (at most 8 files): config.json, model-0000k-of-0000n.safetensors,
model.safetensors.index.json, qmla_tokenizer.json, train-log.jsonl,
diagnostics.json (+ generation_config.json if it fits).
"""
import argparse
import concurrent.futures
import gzip
import json
import lzma
import math
import os
import platform
import shutil
import sys
import tempfile
import time

T0 = time.time()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from transformers import DeepseekV2Config, DeepseekV2ForCausalLM  # noqa: E402

BOS = 256
VOCAB = 320          # 257 padded to a multiple of 64
LN2 = math.log(2.0)


def model_config(a):
    return DeepseekV2Config(
        vocab_size=VOCAB,
        hidden_size=a.hidden,
        intermediate_size=a.intermediate,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.heads,
        kv_lora_rank=a.d_c,
        q_lora_rank=None,
        qk_rope_head_dim=64,
        qk_nope_head_dim=a.d_n,
        v_head_dim=a.d_v,
        first_k_dense_replace=a.layers,   # every layer dense: no MoE module is built
        n_routed_experts=1,
        num_experts_per_tok=1,
        moe_intermediate_size=a.intermediate,
        hidden_act="silu",
        max_position_embeddings=a.seq,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        attention_bias=False,
        tie_word_embeddings=False,
        bos_token_id=BOS,
        eos_token_id=None,
        pad_token_id=None,
        initializer_range=0.02,
        use_cache=False,
    )


def count_params(model):
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------- data
def load_corpora(a):
    names = ["prose", "code"]

    def rd_train(n):
        with open(os.path.join(a.data_dir, f"{n}.train.txt.xz"), "rb") as f:
            return lzma.decompress(f.read())

    def rd_held(n):
        with open(os.path.join(a.heldout_dir, f"{n}.txt.gz"), "rb") as f:
            return gzip.decompress(f.read())

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        tr = {n: ex.submit(rd_train, n) for n in names}
        he = {n: ex.submit(rd_held, n) for n in names}
        train = {n: tr[n].result() for n in names}
        held = {n: he[n].result() for n in names}
    return train, held


def to_dev(b, dev):
    return torch.frombuffer(bytearray(b), dtype=torch.uint8).to(dev)


def sample_batch(data, n, seq, gen, ar):
    """n windows of `seq` bytes -> (input [n, seq] with BOS first, target [n, seq])."""
    off = torch.randint(0, data.numel() - seq, (n,), device=data.device, generator=gen)
    w = data[off[:, None] + ar[None, :]].long()
    inp = torch.cat([torch.full((n, 1), BOS, device=data.device, dtype=torch.long),
                     w[:, :-1]], dim=1)
    return inp, w


def heldout_windows(data, seq):
    n = data.numel() // seq
    w = data[: n * seq].view(n, seq).long()
    inp = torch.cat([torch.full((n, 1), BOS, device=data.device, dtype=torch.long),
                     w[:, :-1]], dim=1)
    return inp, w


@torch.no_grad()
def eval_bpb(model, inp, tgt, bs, autocast=True, max_windows=None):
    if max_windows is not None and inp.shape[0] > max_windows:
        # evenly spaced subset (deterministic)
        idx = torch.linspace(0, inp.shape[0] - 1, max_windows, device=inp.device).long()
        inp, tgt = inp[idx], tgt[idx]
    was = model.training
    model.eval()
    tot, cnt = 0.0, 0
    for i in range(0, inp.shape[0], bs):
        x, y = inp[i:i + bs], tgt[i:i + bs]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=x, use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1),
                               reduction="sum")
        tot += loss.item()
        cnt += y.numel()
    model.train(was)
    return tot / cnt / LN2


def unigram_bpb(train_bytes_dev, held_tgt):
    cnt = torch.bincount(train_bytes_dev.long(), minlength=256).double() + 1.0
    logp = torch.log2(cnt / cnt.sum())
    return float(-logp[held_tgt.reshape(-1)].mean())


# ---------------------------------------------------------------- diagnostics
@torch.no_grad()
def diagnostics(model, held_inp, n_seq):
    """Sink diagnostics of an eager-attention model, per corpus and layer."""
    layers = model.model.layers
    cfg = model.config
    d_c = cfg.kv_lora_rank
    out = {"n_sequences_per_corpus": n_seq, "seq_len": None, "corpora": {}}
    for name, inp in held_inp.items():
        idx = torch.linspace(0, inp.shape[0] - 1, n_seq, device=inp.device).long()
        x = inp[idx]
        T = x.shape[1]
        out["seq_len"] = T
        store = {}
        hooks = []
        for li, layer in enumerate(layers):
            at = layer.self_attn

            def h_ckv(mod, args, res, li=li):
                store[("ckv", li)] = res.float()

            def h_kva(mod, args, res, li=li):
                store[("kpe", li)] = res[..., d_c:].float()
                store[("ckv_pre", li)] = res[..., :d_c].float()

            def h_in(mod, args, kwargs, li=li):
                hs = args[0] if args else kwargs["hidden_states"]
                store[("hid", li)] = hs.float()

            hooks.append(at.kv_a_layernorm.register_forward_hook(h_ckv))
            hooks.append(at.kv_a_proj_with_mqa.register_forward_hook(h_kva))
            hooks.append(layer.register_forward_pre_hook(h_in, with_kwargs=True))
        try:
            o = model(input_ids=x, use_cache=False, output_attentions=True)
        finally:
            for h in hooks:
                h.remove()
        atts = o.attentions
        per_layer = []
        t = torch.arange(T, device=x.device)
        uniform_all = float((1.0 / (t[1:] + 1).double()).mean())
        uniform_64 = float((1.0 / (t[64:] + 1).double()).mean())
        for li in range(len(layers)):
            A = atts[li].float()                      # [B, H, T, T]
            m0_all = A[:, :, 1:, 0].mean(dim=(0, 2))  # per head, queries t >= 1
            m0_64 = A[:, :, 64:, 0].mean(dim=(0, 2))  # per head, queries t >= 64
            m1_64 = A[:, :, 64:, 1].mean(dim=(0, 2))  # second token, for contrast
            m4_64 = A[:, :, 64:, :4].sum(-1).mean(dim=(0, 2))  # first four tokens (sink4)
            # largest mass on any non-first key, averaged (t >= 64)
            mx_other = A[:, :, 64:, 1:].max(dim=-1).values.mean(dim=(0, 2))
            ckv = store[("ckv", li)].norm(dim=-1)     # [B, T]
            kpe = store[("kpe", li)].norm(dim=-1)
            ckv_pre = store[("ckv_pre", li)].norm(dim=-1)
            hid = store[("hid", li)].norm(dim=-1)
            rec = {
                "layer": li,
                "bos_attention_mass_mean": float(m0_all.mean()),
                "bos_attention_mass_mean_q_ge_64": float(m0_64.mean()),
                "bos_attention_mass_per_head_q_ge_64": [round(float(v), 4) for v in m0_64],
                "pos1_attention_mass_mean_q_ge_64": float(m1_64.mean()),
                "first4_attention_mass_mean_q_ge_64": float(m4_64.mean()),
                "max_other_key_mass_mean_q_ge_64": float(mx_other.mean()),
                "ckv_norm_first": float(ckv[:, 0].mean()),
                "ckv_norm_median_other": float(ckv[:, 1:].median()),
                "ckv_prenorm_norm_first": float(ckv_pre[:, 0].mean()),
                "ckv_prenorm_norm_median_other": float(ckv_pre[:, 1:].median()),
                "kpe_norm_first": float(kpe[:, 0].mean()),
                "kpe_norm_median_other": float(kpe[:, 1:].median()),
                "hidden_in_norm_first": float(hid[:, 0].mean()),
                "hidden_in_norm_median_other": float(hid[:, 1:].median()),
            }
            rec["ckv_norm_ratio_first_over_median"] = rec["ckv_norm_first"] / rec["ckv_norm_median_other"]
            rec["ckv_prenorm_ratio_first_over_median"] = (
                rec["ckv_prenorm_norm_first"] / rec["ckv_prenorm_norm_median_other"])
            rec["kpe_norm_ratio_first_over_median"] = rec["kpe_norm_first"] / rec["kpe_norm_median_other"]
            rec["hidden_in_norm_ratio_first_over_median"] = (
                rec["hidden_in_norm_first"] / rec["hidden_in_norm_median_other"])
            per_layer.append(rec)
        out["corpora"][name] = {"layers": per_layer,
                                "uniform_causal_mass_on_first_mean": uniform_all,
                                "uniform_causal_mass_on_first_mean_q_ge_64": uniform_64}
    return out


# ---------------------------------------------------------------- save
def save_model(model, out_dir, max_files_left):
    tmp = tempfile.mkdtemp(prefix="tinymla-save-")
    m16 = DeepseekV2ForCausalLM(model.config).to(dtype=torch.float16)
    m16.load_state_dict({k: v.detach().to(torch.float16).cpu() for k, v in model.state_dict().items()})
    try:
        m16.save_pretrained(tmp, safe_serialization=True, max_shard_size="15MB")
    except TypeError:
        m16.save_pretrained(tmp, max_shard_size="15MB")
    files = sorted(os.listdir(tmp))
    must = [f for f in files if f != "generation_config.json"]
    optional = [f for f in files if f == "generation_config.json"]
    keep = must + optional[: max(0, max_files_left - len(must))]
    for f in keep:
        shutil.copy(os.path.join(tmp, f), os.path.join(out_dir, f))
    shutil.rmtree(tmp)
    return {f: os.path.getsize(os.path.join(out_dir, f)) for f in keep}, [f for f in files if f not in keep]


# ---------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--data-dir", default=".corpus")
    ap.add_argument("--heldout-dir", default="data/heldout")
    ap.add_argument("--deadline-s", type=float, default=480.0,
                    help="whole script (from process start) must end by then")
    ap.add_argument("--reserve-s", type=float, default=25.0,
                    help="time kept after the training loop for final eval/save/diagnostics")
    ap.add_argument("--hidden", type=int, default=320)
    ap.add_argument("--intermediate", type=int, default=768)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--d-c", type=int, default=256)
    ap.add_argument("--d-n", type=int, default=64)
    ap.add_argument("--d-v", type=int, default=64)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=256, help="sequences per step")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--compile", type=int, default=1)
    ap.add_argument("--eval-every-s", type=float, default=30.0)
    ap.add_argument("--eval-windows", type=int, default=256, help="per corpus, periodic evals")
    ap.add_argument("--diag-seqs", type=int, default=64, help="per corpus")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--smoke-loop-s", type=float, default=8.0)
    ap.add_argument("--smoke-compile-before-s", type=float, default=75.0)
    ap.add_argument("--smoke", action="store_true",
                    help="measure eager vs compiled throughput, then run the end-of-training path")
    a = ap.parse_args()

    os.makedirs(a.out, exist_ok=True)
    dev = torch.device("cuda")
    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    logf = open(os.path.join(a.out, "train-log.jsonl"), "w")

    def log(rec):
        rec = dict(rec)
        rec["elapsed_s"] = round(time.time() - T0, 2)
        logf.write(json.dumps(rec) + "\n")
        logf.flush()
        print(json.dumps(rec), flush=True)

    cfg = model_config(a)
    try:
        model = DeepseekV2ForCausalLM._from_config(cfg, attn_implementation="sdpa")
    except (TypeError, AttributeError):
        cfg._attn_implementation = "sdpa"
        model = DeepseekV2ForCausalLM(cfg)
    model = model.to(dev)
    model.train()
    n_params = count_params(model)
    fp16_bytes = 2 * n_params
    log({"event": "start", "argv": sys.argv, "args": vars(a), "n_params": n_params,
         "fp16_bytes": fp16_bytes, "torch": torch.__version__,
         "transformers": transformers.__version__, "python": platform.python_version(),
         "gpu": torch.cuda.get_device_name(0), "model_class": type(model).__name__,
         "mlp_types": sorted({type(l.mlp).__name__ for l in model.model.layers}),
         "attn_implementation": model.config._attn_implementation})

    train_b, held_b = load_corpora(a)
    train = {k: to_dev(v, dev) for k, v in train_b.items()}
    held = {k: to_dev(v, dev) for k, v in held_b.items()}
    held_w = {k: heldout_windows(v, a.seq) for k, v in held.items()}
    uni = {k: unigram_bpb(train[k], held_w[k][1]) for k in train}
    both = torch.cat([train["prose"], train["code"]])
    uni_both = {k: unigram_bpb(both, held_w[k][1]) for k in train}
    del both
    log({"event": "data", "train_bytes": {k: v.numel() for k, v in train.items()},
         "heldout_bytes": {k: v.numel() for k, v in held.items()},
         "heldout_windows": {k: v[0].shape[0] for k, v in held_w.items()},
         "unigram_bpb_own_corpus": uni, "unigram_bpb_both_corpora": uni_both})

    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)
    ar = torch.arange(a.seq, device=dev)
    half = a.batch // 2

    def batch():
        x1, y1 = sample_batch(train["prose"], half, a.seq, gen, ar)
        x2, y2 = sample_batch(train["code"], a.batch - half, a.seq, gen, ar)
        return torch.cat([x1, x2]), torch.cat([y1, y2])

    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)

    def loss_fn(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x, use_cache=False).logits
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))

    compiled = torch.compile(loss_fn) if a.compile else None

    def train_step(fn, lr):
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch()
        loss = fn(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        return loss.detach(), gn

    tokens_per_step = a.batch * a.seq

    def run_loop(fn, deadline):
        """Train until `deadline` (time.time()); returns (steps, tokens, loop seconds)."""
        t_first = time.time()
        loss, gn = train_step(fn, 0.0 if a.warmup > 0 else a.lr)  # step 0: compiles (lr 0)
        torch.cuda.synchronize()
        st = {"step": 1, "tokens": tokens_per_step, "lr": 0.0}
        t_start = time.time()
        log({"event": "first_step", "seconds": round(t_start - t_first, 2), "loss": float(loss)})
        span = max(1.0, deadline - t_start)
        last_eval = t_start
        acc, acc_n = torch.zeros((), device=dev), 0

        def do_eval():
            r = {k: eval_bpb(model, *held_w[k], bs=128, max_windows=a.eval_windows)
                 for k in held_w}
            log({"event": "eval", "step": st["step"], "tokens": st["tokens"], "lr": st["lr"],
                 "heldout_bpb": r, "heldout_windows": a.eval_windows})

        while True:
            now = time.time()
            if now >= deadline:
                break
            prog = min(1.0, (now - t_start) / span)
            lr = a.lr * min(1.0, st["step"] / max(1, a.warmup)) * (
                a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * prog)))
            st["lr"] = lr
            loss, gn = train_step(fn, lr)
            acc += loss
            acc_n += 1
            st["step"] += 1
            st["tokens"] += tokens_per_step
            if st["step"] % a.log_every == 0:
                tl = float(acc / acc_n)
                el = time.time() - t_start
                log({"event": "train", "step": st["step"], "tokens": st["tokens"],
                     "train_loss": tl, "train_bpb": tl / LN2, "lr": lr, "grad_norm": float(gn),
                     "tokens_per_s": round((st["tokens"] - tokens_per_step) / el)})
                acc.zero_()
                acc_n = 0
                if not math.isfinite(tl):
                    log({"event": "abort", "reason": "non-finite loss"})
                    break
            if time.time() - last_eval >= a.eval_every_s:
                do_eval()
                last_eval = time.time()
        t_loop = time.time() - t_start
        do_eval()
        return st["step"], st["tokens"], t_loop

    if a.smoke:
        res = {"event": "smoke"}

        def bench(fn, n, label):
            torch.cuda.synchronize()
            t = time.time()
            train_step(fn, 1e-4)
            torch.cuda.synchronize()
            first = time.time() - t
            for _ in range(2):
                train_step(fn, 1e-4)
            torch.cuda.synchronize()
            t = time.time()
            for _ in range(n):
                l, _ = train_step(fn, 1e-4)
            torch.cuda.synchronize()
            dt = time.time() - t
            res[label] = {"first_step_s": round(first, 2), "steps": n,
                          "tokens_per_s": round(n * tokens_per_step / dt),
                          "step_ms": round(1000 * dt / n, 2), "loss": float(l),
                          "max_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}
            log({"event": "bench", "label": label, **res[label]})

        bench(loss_fn, 10, "eager")
        # the real loop (eager) for a few seconds, then the end-of-training path
        steps, toks, t_loop = run_loop(loss_fn, time.time() + a.smoke_loop_s)
        t = time.time()
        finish(a, model, held_w, uni, uni_both, n_params, log, step=steps, tokens=toks,
               t_loop=t_loop, logf=logf)
        res["finish_path_s"] = round(time.time() - t, 2)
        log({"event": "finish_timing", "finish_path_s": res["finish_path_s"]})
        if a.compile and time.time() - T0 < a.smoke_compile_before_s:
            log({"event": "compile_start"})
            bench(compiled, 10, "compiled")
        print("SMOKE", json.dumps(res), flush=True)
        return

    # ---------------- training
    steps, toks, t_loop = run_loop(compiled if a.compile else loss_fn,
                                   T0 + a.deadline_s - a.reserve_s)
    finish(a, model, held_w, uni, uni_both, n_params, log, step=steps, tokens=toks,
           t_loop=t_loop, logf=logf)


def finish(a, model, held_w, uni, uni_both, n_params, log, step, tokens, t_loop, logf):
    out = a.out
    # full held-out evaluation of the trained (fp32 master, bf16 autocast) model
    full = {k: eval_bpb(model, *held_w[k], bs=128) for k in held_w}
    files, dropped = save_model(model, out, max_files_left=8 - 3)  # 3 = log, diag, tokenizer
    with open(os.path.join(out, "qmla_tokenizer.json"), "w") as f:
        json.dump({"type": "bytes", "bos_id": BOS, "vocab_size": VOCAB,
                   "note": "token id = byte value 0..255; 256 = BOS, prepended to every sequence; "
                           "ids 257..319 are padding and never occur"}, f, indent=1)
        f.write("\n")
    # reload what was saved (float16 on disk) and evaluate it in float32, no autocast
    m = DeepseekV2ForCausalLM.from_pretrained(out, dtype=torch.float32,
                                              attn_implementation="sdpa").cuda()
    m.eval()
    saved = {k: eval_bpb(m, *held_w[k], bs=128, autocast=False) for k in held_w}
    del m
    m = DeepseekV2ForCausalLM.from_pretrained(out, dtype=torch.float32,
                                              attn_implementation="eager").cuda()
    m.eval()
    try:
        diag = diagnostics(m, {k: v[0] for k, v in held_w.items()}, a.diag_seqs)
    except Exception as e:  # keep the saved model and the log even if this fails
        import traceback
        traceback.print_exc()
        diag = {"error": repr(e), "corpora": {}}
    diag["model"] = {"n_params": n_params, "config": m.config.to_dict()}
    diag["heldout_bpb_saved_fp16_weights_fp32_compute"] = saved
    diag["heldout_bpb_training_model_bf16_autocast"] = full
    diag["unigram_bpb_own_corpus"] = uni
    diag["unigram_bpb_both_corpora"] = uni_both
    diag["training"] = {"steps": step, "tokens": tokens, "loop_seconds": round(t_loop, 1),
                        "seed": a.seed}
    with open(os.path.join(out, "diagnostics.json"), "w") as f:
        json.dump(diag, f, indent=1)
        f.write("\n")
    log({"event": "final", "step": step, "tokens": tokens,
         "heldout_bpb_full": full, "heldout_bpb_saved_fp32": saved,
         "unigram_bpb_own_corpus": uni, "files": files, "dropped": dropped})
    summ = []
    for name, c in diag["corpora"].items():
        for r in c["layers"]:
            summ.append(f"{name} L{r['layer']}: bos_mass(q>=64)={r['bos_attention_mass_mean_q_ge_64']:.3f} "
                        f"first4={r['first4_attention_mass_mean_q_ge_64']:.3f} "
                        f"ckv_ratio={r['ckv_norm_ratio_first_over_median']:.2f} "
                        f"ckvpre_ratio={r['ckv_prenorm_ratio_first_over_median']:.2f} "
                        f"kpe_ratio={r['kpe_norm_ratio_first_over_median']:.2f} "
                        f"hid_ratio={r['hidden_in_norm_ratio_first_over_median']:.2f}")
    print("\n".join(summ), flush=True)
    logf.flush()


if __name__ == "__main__":
    main()
