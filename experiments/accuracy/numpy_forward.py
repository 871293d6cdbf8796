#!/usr/bin/python3
"""experiments/accuracy/numpy_forward.py — an independent NumPy forward of
the tiny MLA checkpoint (DeepseekV2ForCausalLM, dense blocks), written from
transformers' DeepseekV2 modelling code in the *naive* (non-absorbed) form:
keys and values are expanded per head through kv_b_proj, RoPE is applied as
complex multiplication of interleaved pairs, attention is an explicit masked
softmax. It shares no code with the C engine (lib/engine/) and reads the
safetensors with NumPy alone.

Scores held-out text under the training run's protocol (train.py,
heldout_windows): non-overlapping windows of T bytes from the start, input
[BOS] + w[:-1], targets w; bits per byte = mean NLL / ln 2.

Cache configurations (--config fp32 | bf16 | C4R4 | C2R4[-q8]) quantize the
post-norm latent and the rotated RoPE key of every token with the NumPy
quantizer of bench/numpy_sweep.py (docs/math.md §2, written independently
of lib/quant/quant.c), dequantized values rounded to BF16; --policy sinkS/localW
serves key s to query i from its BF16 value when s < S or i - s < W.

usage: numpy_forward.py MODEL_DIR TEXT[.gz] [--windows N] [--context T]
       [--config C] [--policy P] [--float64] [--json]   (stdlib + numpy only)
"""
import argparse
import gzip
import json
import math
import os
import struct
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from numpy_sweep import qdq  # noqa: E402


def bf16(x):
    """Round float32 to BF16 (nearest even), returned as float32."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32)

DT = {"F16": np.float16, "BF16": None, "F32": np.float32}


def read_safetensors(path):
    out = {}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        b0, b1 = t["data_offsets"]
        raw = data[b0:b1]
        if t["dtype"] == "BF16":
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            a = u.view(np.float32)
        else:
            a = np.frombuffer(raw, dtype=np.dtype(DT[t["dtype"]]).newbyteorder("<"))
        out[name] = a.reshape(t["shape"]).astype(np.float32)
    return out


def load(model_dir):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    W = {}
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) \
        else ["model.safetensors"]
    for fn in files:
        W.update(read_safetensors(os.path.join(model_dir, fn)))
    return cfg, W


class Model:
    def __init__(self, cfg, W, dtype=np.float32, config="fp32", policy="none"):
        self.config, self.sink, self.window = config, 0, 0
        self.meta = "q8" if config.endswith("-q8") else "f16"
        if config not in ("fp32", "bf16"):
            cr = config.split("-")[0]
            self.cb, self.rb = int(cr[1:cr.index("R")]), int(cr[cr.index("R") + 1:])
        if policy != "none" and config not in ("fp32", "bf16"):
            S, Wn = policy.split("/")
            self.sink, self.window = int(S[4:]), int(Wn[5:])
        assert cfg["architectures"][0] == "DeepseekV2ForCausalLM"
        assert cfg.get("q_lora_rank") is None
        self.c = cfg
        self.W = {k: v.astype(dtype) for k, v in W.items()}
        self.dt = dtype
        self.H = cfg["num_attention_heads"]
        self.dn, self.dr, self.dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
        self.dc = cfg["kv_lora_rank"]
        self.eps = cfg["rms_norm_eps"]
        self.scale = (self.dn + self.dr) ** -0.5
        rp = cfg.get("rope_parameters") or {}
        self.theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))

    def rms(self, x, g):
        v = np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True)
        return (g * (x / np.sqrt(v + self.eps))).astype(self.dt)

    def rope(self, x, T):
        # x [..., T, dr]; complex multiply of pairs (2i, 2i+1) (DeepseekV2)
        # angles in float32 as transformers computes them (inv_freq and
        # position @ inv_freq in float32)
        inv = (1.0 / (self.theta ** (np.arange(0, self.dr, 2, dtype=np.float64) / self.dr))).astype(np.float32)
        ang = (np.arange(T, dtype=np.float32)[:, None] * inv[None, :]).astype(np.float64)
        z = x[..., 0::2] + 1j * x[..., 1::2]
        z = z * np.exp(1j * ang)
        out = np.empty_like(x)
        out[..., 0::2] = z.real
        out[..., 1::2] = z.imag
        return out

    def cached_attention(self, l, c, k_pe, q_nope, q_pe, mask, T):
        """Attention on the cache as written: protected rows in BF16, the
        others QDQ'd and rounded to BF16; keys and values expanded from the
        cached latent through kv_b_proj (naive form)."""
        H, dn, dv = self.H, self.dn, self.dv
        wkv = self.W[f"model.layers.{l}.self_attn.kv_b_proj.weight"]
        reps = [(bf16(c), bf16(k_pe))]
        if self.config != "bf16":
            reps.append((bf16(qdq(c, self.cb, 64, self.meta)), bf16(qdq(k_pe, self.rb, 64, self.meta))))
        ss, vs = [], []
        for cc, kk in reps:
            kv = (cc @ wkv.T).reshape(T, H, dn + dv).transpose(1, 0, 2)
            ss.append((q_nope @ kv[..., :dn].transpose(0, 2, 1) + q_pe @ kk.T[None]) * self.scale)
            vs.append(kv[..., dn:])
        if len(reps) == 1:
            s, prot = ss[0], None
        else:
            i, j = np.arange(T)[:, None], np.arange(T)[None, :]
            prot = (j < self.sink) | (i - j < self.window)
            s = np.where(prot[None], ss[0], ss[1])
        s = s + mask
        s = s - s.max(-1, keepdims=True)
        a = np.exp(s)
        a /= a.sum(-1, keepdims=True)
        if prot is None:
            o = a @ vs[0]
        else:
            o = (a * prot[None]) @ vs[0] + (a * ~prot[None]) @ vs[1]
        return o.transpose(1, 0, 2).reshape(T, H * dv)

    def forward(self, ids):
        W, H, dn, dr, dv, dc = self.W, self.H, self.dn, self.dr, self.dv, self.dc
        T = len(ids)
        x = W["model.embed_tokens.weight"][ids]
        mask = np.triu(np.full((T, T), -np.inf, dtype=self.dt), 1)
        for l in range(self.c["num_hidden_layers"]):
            p = f"model.layers.{l}."
            h = self.rms(x, W[p + "input_layernorm.weight"])
            q = (h @ W[p + "self_attn.q_proj.weight"].T).reshape(T, H, dn + dr).transpose(1, 0, 2)
            q_nope, q_pe = q[..., :dn], q[..., dn:]
            ckv = h @ W[p + "self_attn.kv_a_proj_with_mqa.weight"].T
            c, k_pe = ckv[:, :dc], ckv[:, dc:]
            c = self.rms(c, W[p + "self_attn.kv_a_layernorm.weight"])
            kv = (c @ W[p + "self_attn.kv_b_proj.weight"].T).reshape(T, H, dn + dv).transpose(1, 0, 2)
            k_nope, v = kv[..., :dn], kv[..., dn:]
            q_pe = self.rope(q_pe, T)
            k_pe = self.rope(k_pe[None], T)
            if self.config == "fp32":
                s = (q_nope @ k_nope.transpose(0, 2, 1) + q_pe @ k_pe.transpose(0, 2, 1)) * self.scale
                s = s + mask
                s = s - s.max(-1, keepdims=True)
                a = np.exp(s)
                a /= a.sum(-1, keepdims=True)
                o = (a @ v).transpose(1, 0, 2).reshape(T, H * dv)
            else:
                o = self.cached_attention(l, c, k_pe[0], q_nope, q_pe, mask, T)
            x = x + o @ W[p + "self_attn.o_proj.weight"].T
            h = self.rms(x, W[p + "post_attention_layernorm.weight"])
            g = h @ W[p + "mlp.gate_proj.weight"].T
            u = h @ W[p + "mlp.up_proj.weight"].T
            x = x + ((g / (1 + np.exp(-g))) * u) @ W[p + "mlp.down_proj.weight"].T
        h = self.rms(x, W["model.norm.weight"])
        return h @ W["lm_head.weight"].T


def read_text(path):
    raw = open(path, "rb").read()
    return gzip.decompress(raw) if path.endswith(".gz") else raw


def score(model, text, T, windows):
    n = len(text) // T
    if windows:
        n = min(n, windows)
    bos = model.c["bos_token_id"]
    tot = 0.0
    for k in range(n):
        w = np.frombuffer(text[k * T:(k + 1) * T], dtype=np.uint8).astype(np.int64)
        ids = np.concatenate([[bos], w[:-1]])
        lg = model.forward(ids).astype(np.float64)
        m = lg.max(-1, keepdims=True)
        lse = np.log(np.exp(lg - m).sum(-1)) + m[:, 0]
        tot += float(np.sum(lse - lg[np.arange(T), w]))
    return tot, n * T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("text")
    ap.add_argument("--windows", type=int, default=0)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--float64", action="store_true")
    ap.add_argument("--config", default="fp32")
    ap.add_argument("--policy", default="none")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    cfg, W = load(a.model_dir)
    m = Model(cfg, W, np.float64 if a.float64 else np.float32, a.config, a.policy)
    t0 = time.time()
    tot, ntok = score(m, read_text(a.text), a.context, a.windows)
    dt = time.time() - t0
    r = {"text": a.text, "windows": ntok // a.context, "tokens": ntok, "context": a.context,
         "dtype": "float64" if a.float64 else "float32", "config": a.config,
         "policy": a.policy, "nll_sum": tot,
         "nll_nats_per_token": tot / ntok, "bits_per_byte": tot / ntok / math.log(2),
         "seconds": dt, "tokens_per_s": ntok / dt}
    print(json.dumps(r) if a.json else
          f"{a.text}: {r['bits_per_byte']:.6f} bits/byte over {ntok} tokens ({dt:.1f} s)")


if __name__ == "__main__":
    main()
