#!/usr/bin/python3
"""make_family_ckpt.py — small random-weight checkpoints of the MLA families
the native engine reads (issue 20), an independent NumPy forward of each
(the reference NLL), and faulty copies the loader must refuse.

  make_family_ckpt.py write OUT      every family into OUT/<name>/ (config.json,
                                     model.safetensors, qmla_tokenizer.json),
                                     OUT/<name>-deq/ (F32 copy of the values the
                                     reference uses, for transformers) for FP8
                                     ones, OUT/text.txt and OUT/ref.json
                                     {name: {"nll": mean nats/token, "tau": ...,
                                     "cos": [T][d_r/2] ...}}
  make_family_ckpt.py write-big OUT  OUT/v2-big-bf16: a BF16 MoE checkpoint of
                                     100 MB, mostly experts (the memory check)
  make_family_ckpt.py fault SRC DST KIND
                                     a copy of checkpoint SRC with one fault:
                                     missing_expert, router_width, scale_shape,
                                     nan_scale, gate (scoring_func), topk_method,
                                     rope_type, layer_types (mlp_layer_types short),
                                     no_qconfig (FP8 tensors, no quantization_config)

Safetensors are written by hand (8-byte header length, JSON, data); FP8 E4M3
values are encoded through the 256-entry table of their decoded values. The
forward follows transformers' DeepseekV2ForCausalLM / DeepseekV3ForCausalLM
(modeling_deepseek_v2.py, modeling_deepseek_v3.py, modeling_rope_utils.py)
in float32 and shares no code with lib/engine. /usr/bin/python3 + numpy only.
"""
import json
import math
import os
import shutil
import struct
import sys

import numpy as np

F32 = np.float32
T_CTX = 32          # context of the test (qmla ppl --context)
N_WIN = 3           # windows scored
BOS = 256

# ---------------------------------------------------------------- dtypes


def bf16_round(x):
    """float32 -> the nearest bfloat16 (ties to even), returned as float32."""
    u = np.ascontiguousarray(x, dtype=F32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(F32)


def bf16_bits(x):
    return (np.ascontiguousarray(bf16_round(x)).view(np.uint32) >> 16).astype(np.uint16)


def fp8_table():
    """decoded value of every E4M3 (fn) byte; NaN for 0x7f / 0xff"""
    t = np.zeros(256, dtype=np.float64)
    for b in range(256):
        s, e, m = b >> 7, (b >> 3) & 15, b & 7
        if e == 15 and m == 7:
            v = float("nan")
        elif e == 0:
            v = m / 8.0 * 2.0 ** -6
        else:
            v = (1 + m / 8.0) * 2.0 ** (e - 7)
        t[b] = -v if s else v
    return t


FP8 = fp8_table()
_POS = np.array([b for b in range(127) if not math.isnan(FP8[b])])  # 0x00..0x7e, increasing


def fp8_encode(x):
    """nearest E4M3 byte of every value (|x| <= 448)"""
    a = np.abs(x.astype(np.float64)).ravel()
    vals = FP8[_POS]
    i = np.clip(np.searchsorted(vals, a), 1, len(vals) - 1)
    lo, hi = vals[i - 1], vals[i]
    pick = np.where(a - lo <= hi - a, i - 1, i)
    b = _POS[pick].astype(np.uint8)
    b = np.where(x.ravel() < 0, b | 0x80, b).astype(np.uint8)
    return b.reshape(x.shape)


def fp8_quantize(w, br, bc):
    """w [r, c] -> (bytes [r, c], scale_inv [ceil(r/br), ceil(c/bc)] float32, dequantized)"""
    r, c = w.shape
    nr, nc = -(-r // br), -(-c // bc)
    sc = np.zeros((nr, nc), dtype=F32)
    q = np.zeros((r, c), dtype=np.uint8)
    for i in range(nr):
        for j in range(nc):
            blk = w[i * br:(i + 1) * br, j * bc:(j + 1) * bc]
            s = F32(max(float(np.abs(blk).max()), 1e-12) / 448.0)
            sc[i, j] = s
            q[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = fp8_encode(blk / s)
    deq = FP8[q].astype(F32) * np.repeat(np.repeat(sc, br, 0), bc, 1)[:r, :c]
    return q, sc, deq.astype(F32)


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype, shape, bytes)"""
    hdr, off, blobs = {}, 0, []
    for name, dt, shape, data in tensors:
        hdr[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    hj = json.dumps(hdr, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    out = []
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        b0, b1 = t["data_offsets"]
        out.append((name, t["dtype"], t["shape"], data[b0:b1]))
    out.sort(key=lambda x: hdr[x[0]]["data_offsets"][0])
    return out


# ---------------------------------------------------------------- families

BASE = dict(V=320, D=64, L=3, H=4, dc=32, dn=16, dr=16, dv=16, inter=96, eps=1e-6,
            theta=10000.0, max_pos=1024)

FAMILIES = {
    # DeepseekV2: softmax gate, greedy top-k, YaRN with mscale = mscale_all_dim
    # (V2-Lite's kind), interleaved pairing, plain q_proj, F32
    "v2-greedy-yarn-f32": dict(arch="v2", dtype="F32", q_lora=0, E=8, K=2, n_shared=2,
                               moe_inter=24, first_dense=1, method="greedy", rsf=1.0,
                               rope=dict(rope_type="yarn", factor=4.0,
                                         original_max_position_embeddings=256,
                                         beta_fast=32.0, beta_slow=1.0, mscale=0.707,
                                         mscale_all_dim=0.707)),
    # DeepseekV2: group-limited greedy over 4 groups, routed_scaling_factor,
    # q_lora, default RoPE, BF16
    "v2-group-default-bf16": dict(arch="v2", dtype="BF16", q_lora=24, E=8, K=3, n_shared=1,
                                  moe_inter=24, first_dense=1, method="group_limited_greedy",
                                  n_group=4, topk_group=2, rsf=1.5, rope=None),
    # DeepseekV3 (the case): YaRN x4 with mscale 1.0, half pairing,
    # q_lora, noaux_tc over 4 groups, sigmoid + correction bias, FP8 E4M3 with
    # 32 x 32 block scales (partial blocks at the edges)
    "v3-noaux-yarn-half-fp8": dict(arch="v3", dtype="FP8", block=32, q_lora=24, E=8, K=2,
                                   n_shared=1, moe_inter=24, first_dense=1, n_group=4,
                                   topk_group=2, norm=True, rsf=2.5, interleave=False,
                                   rope=dict(rope_type="yarn", factor=4.0,
                                             original_max_position_embeddings=256,
                                             beta_fast=32.0, beta_slow=1.0, mscale=1.0,
                                             mscale_all_dim=1.0)),
    # DeepseekV3 / Moonlight-like: one group, interleaved pairing, YaRN with
    # mscale != mscale_all_dim (attention factor on cos/sin), BF16
    "v3-yarn-interleaved-bf16": dict(arch="v3", dtype="BF16", q_lora=0, E=8, K=2, n_shared=2,
                                     moe_inter=24, first_dense=1, n_group=1, topk_group=1,
                                     norm=True, rsf=2.0, interleave=True,
                                     rope=dict(rope_type="yarn", factor=8.0,
                                               original_max_position_embeddings=128,
                                               beta_fast=32.0, beta_slow=1.0, mscale=1.0,
                                               mscale_all_dim=0.5)),
    # DeepseekV3 with the default RoPE, no norm_topk_prob, F32
    "v3-default-f32": dict(arch="v3", dtype="F32", q_lora=24, E=8, K=2, n_shared=1,
                           moe_inter=24, first_dense=2, n_group=2, topk_group=1, norm=False,
                           rsf=1.0, interleave=False, rope=None),
    # RoPE scaling types of other configs: linear (V2) and llama3 (V3), dense
    "v2-linear-dense-f32": dict(arch="v2", dtype="F32", q_lora=0, E=0, first_dense=3,
                                rope=dict(rope_type="linear", factor=2.0)),
    "v3-llama3-dense-bf16": dict(arch="v3", dtype="BF16", q_lora=24, E=0, first_dense=3,
                                 interleave=False,
                                 rope=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                           high_freq_factor=4.0,
                                           original_max_position_embeddings=64)),
    # (last, so that the seeds of the others stay as they were)
    # Glm4MoeLite (GLM-4.7-Flash): DeepseekV3 attention and router, MoE
    # layers by mlp_layer_types (here sparse, dense, sparse), interleaved
    # pairing, YaRN, BF16
    "glm4-moe-lite-yarn-bf16": dict(arch="glm", dtype="BF16", q_lora=24, E=8, K=2, n_shared=1,
                                    moe_inter=24, first_dense=0, sparse=[1, 0, 1], n_group=2,
                                    topk_group=1, norm=True, rsf=1.8, interleave=True,
                                    rope=dict(rope_type="yarn", factor=4.0,
                                              original_max_position_embeddings=256,
                                              beta_fast=32.0, beta_slow=1.0, mscale=1.0,
                                              mscale_all_dim=1.0)),
    # LongcatFlash (LongCat-Flash): blocks of two MLA sublayers, two dense
    # MLPs and one shortcut MoE with zero-computation (identity) experts;
    # softmax router over routed + zero experts, choice by score + correction
    # bias, weights x routed_scaling_factor; mla_scale_q_lora /
    # mla_scale_kv_lora; interleaved pairing. Default RoPE with LongCat's
    # theta 1e7, BF16 ...
    "longcat-flash-bf16": dict(arch="longcat", dtype="BF16", q_lora=24, blocks=2, E=6, Z=3,
                               K=3, moe_inter=24, rsf=6.0, theta=1e7, eps=1e-5, rope=None),
    # ... and YaRN (with the softmax-scale correction) in F32
    "longcat-flash-yarn-f32": dict(arch="longcat", dtype="F32", q_lora=32, blocks=2, E=4, Z=2,
                                   K=2, moe_inter=16, rsf=2.0, eps=1e-5,
                                   rope=dict(rope_type="yarn", factor=4.0,
                                             original_max_position_embeddings=256,
                                             beta_fast=32.0, beta_slow=1.0, mscale=1.0,
                                             mscale_all_dim=1.0)),
}

LC = "longcat"


def theta_of(f):
    return f.get("theta", BASE["theta"])


def eps_of(f):
    return f.get("eps", BASE["eps"])


def config_longcat(f):
    """LongcatFlashConfig's keys (transformers' names: num_layers blocks,
    ffn_hidden_size, expert_ffn_hidden_size, moe_topk, zero_expert_num)"""
    c = {
        "architectures": ["LongcatFlashForCausalLM"], "model_type": "longcat_flash",
        "vocab_size": BASE["V"], "hidden_size": BASE["D"], "ffn_hidden_size": BASE["inter"],
        "expert_ffn_hidden_size": f["moe_inter"], "num_layers": f["blocks"],
        "num_attention_heads": BASE["H"], "num_key_value_heads": BASE["H"],
        "kv_lora_rank": BASE["dc"], "q_lora_rank": f["q_lora"],
        "qk_nope_head_dim": BASE["dn"], "qk_rope_head_dim": BASE["dr"],
        "v_head_dim": BASE["dv"], "head_dim": BASE["dr"],
        "n_routed_experts": f["E"], "zero_expert_num": f["Z"], "moe_topk": f["K"],
        "routed_scaling_factor": f["rsf"],
        "max_position_embeddings": BASE["max_pos"], "rms_norm_eps": eps_of(f),
        "bos_token_id": BOS, "eos_token_id": None, "pad_token_id": None, "hidden_act": "silu",
        "attention_bias": False, "tie_word_embeddings": False, "initializer_range": 0.02,
        "attention_dropout": 0.0, "use_cache": False,
    }
    rp = {"rope_type": "default", "rope_theta": theta_of(f)}
    if f.get("rope"):
        rp.update(f["rope"])
    c["rope_parameters"] = rp
    return c


def config_json(f):
    if f["arch"] == LC:
        return config_longcat(f)
    v3 = f["arch"] in ("v3", "glm")
    glm = f["arch"] == "glm"
    c = {
        "architectures": ["Glm4MoeLiteForCausalLM" if glm else
                          "DeepseekV3ForCausalLM" if v3 else "DeepseekV2ForCausalLM"],
        "model_type": "glm4_moe_lite" if glm else "deepseek_v3" if v3 else "deepseek_v2",
        "vocab_size": BASE["V"], "hidden_size": BASE["D"], "intermediate_size": BASE["inter"],
        "num_hidden_layers": BASE["L"], "num_attention_heads": BASE["H"],
        "num_key_value_heads": BASE["H"], "kv_lora_rank": BASE["dc"],
        "q_lora_rank": f["q_lora"] or None, "qk_nope_head_dim": BASE["dn"],
        "qk_rope_head_dim": BASE["dr"], "v_head_dim": BASE["dv"], "head_dim": BASE["dr"],
        "max_position_embeddings": BASE["max_pos"], "rms_norm_eps": BASE["eps"],
        "bos_token_id": BOS, "eos_token_id": None, "pad_token_id": None, "hidden_act": "silu",
        "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
        "first_k_dense_replace": f["first_dense"], "initializer_range": 0.02,
        "attention_dropout": 0.0, "use_cache": False,
    }
    rp = {"rope_type": "default", "rope_theta": BASE["theta"]}
    if f.get("rope"):
        rp.update(f["rope"])
    c["rope_parameters"] = rp
    if glm:
        # Glm4MoeLiteConfig: the MoE layers by mlp_layer_types (no
        # first_k_dense_replace, topk_method or scoring_func)
        del c["first_k_dense_replace"]
        c.update({"n_routed_experts": f["E"], "num_experts_per_tok": f["K"],
                  "n_shared_experts": f["n_shared"], "moe_intermediate_size": f["moe_inter"],
                  "routed_scaling_factor": f["rsf"], "n_group": f["n_group"],
                  "topk_group": f["topk_group"], "norm_topk_prob": f["norm"],
                  "mlp_layer_types": ["sparse" if x else "dense" for x in f["sparse"]]})
    elif f["E"]:
        c.update({"n_routed_experts": f["E"], "num_experts_per_tok": f["K"],
                  "n_shared_experts": f["n_shared"], "moe_intermediate_size": f["moe_inter"],
                  "routed_scaling_factor": f["rsf"]})
        if v3:
            c.update({"n_group": f["n_group"], "topk_group": f["topk_group"],
                      "norm_topk_prob": f["norm"], "topk_method": "noaux_tc",
                      "scoring_func": "sigmoid"})
        else:
            c.update({"topk_method": f["method"], "n_group": f.get("n_group"),
                      "topk_group": f.get("topk_group"), "norm_topk_prob": False})
    else:
        # dense: transformers' defaults would build MoE blocks; none from layer L
        c.update({"n_routed_experts": 4, "num_experts_per_tok": 1, "n_shared_experts": 1,
                  "moe_intermediate_size": 16, "n_group": 1, "topk_group": 1})
    if v3:
        c["rope_interleave"] = bool(f.get("interleave", True))
    if f["dtype"] == "FP8":
        c["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                    "activation_scheme": "dynamic",
                                    "weight_block_size": [f["block"], f["block"]]}
    return c


def is_moe(f, l):
    """a MoE block in layer l: mlp_layer_types (Glm4MoeLite) or first_k_dense_replace"""
    if "sparse" in f:
        return bool(f["sparse"][l])
    return bool(f["E"]) and l >= f["first_dense"]


def make_weights(f, seed):
    """name -> float32 array (the values as generated, before storage rounding)"""
    rng = np.random.default_rng(seed)
    B = BASE
    D, H, dc, dn, dr, dv = B["D"], B["H"], B["dc"], B["dn"], B["dr"], B["dv"]
    qk = dn + dr

    def lin(o, i, s=None):
        return (rng.standard_normal((o, i)) * (s if s else 1.0 / math.sqrt(i))).astype(F32)

    def gain(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(F32)

    if f["arch"] == LC:
        return make_weights_longcat(f, lin, gain, rng)

    W = {"model.embed_tokens.weight": (rng.standard_normal((B["V"], D))).astype(F32),
         "model.norm.weight": gain(D),
         "lm_head.weight": lin(B["V"], D, 4.0 / math.sqrt(D))}
    for l in range(B["L"]):
        p = f"model.layers.{l}."
        W[p + "input_layernorm.weight"] = gain(D)
        W[p + "post_attention_layernorm.weight"] = gain(D)
        if f["q_lora"]:
            W[p + "self_attn.q_a_proj.weight"] = lin(f["q_lora"], D)
            W[p + "self_attn.q_a_layernorm.weight"] = gain(f["q_lora"])
            W[p + "self_attn.q_b_proj.weight"] = lin(H * qk, f["q_lora"])
        else:
            W[p + "self_attn.q_proj.weight"] = lin(H * qk, D)
        W[p + "self_attn.kv_a_proj_with_mqa.weight"] = lin(dc + dr, D)
        W[p + "self_attn.kv_a_layernorm.weight"] = gain(dc)
        W[p + "self_attn.kv_b_proj.weight"] = lin(H * (dn + dv), dc)
        W[p + "self_attn.o_proj.weight"] = lin(D, H * dv)
        if is_moe(f, l):
            E, I = f["E"], f["moe_inter"]
            W[p + "mlp.gate.weight"] = lin(E, D, 2.0 / math.sqrt(D))
            if f["arch"] in ("v3", "glm"):
                # positive scores + bias: the masked 0.0 never outranks a choice
                W[p + "mlp.gate.e_score_correction_bias"] = (0.1 * rng.random(E)).astype(F32)
            for e in range(E):
                W[p + f"mlp.experts.{e}.gate_proj.weight"] = lin(I, D)
                W[p + f"mlp.experts.{e}.up_proj.weight"] = lin(I, D)
                W[p + f"mlp.experts.{e}.down_proj.weight"] = lin(D, I)
            if f["n_shared"]:
                IS = I * f["n_shared"]
                W[p + "mlp.shared_experts.gate_proj.weight"] = lin(IS, D)
                W[p + "mlp.shared_experts.up_proj.weight"] = lin(IS, D)
                W[p + "mlp.shared_experts.down_proj.weight"] = lin(D, IS)
        else:
            W[p + "mlp.gate_proj.weight"] = lin(B["inter"], D)
            W[p + "mlp.up_proj.weight"] = lin(B["inter"], D)
            W[p + "mlp.down_proj.weight"] = lin(D, B["inter"])
    return W


def make_weights_longcat(f, lin, gain, rng):
    """LongcatFlash's tensor names: per block b the sublayers' attention
    self_attn.<s>.*, norms input_layernorm.<s> / post_attention_layernorm.<s>,
    dense MLPs mlps.<s>.*, and the block's MoE mlp.router.classifier
    [E + Z, D], mlp.router.e_score_correction_bias [E + Z], mlp.experts.<e>.*
    for the E routed experts (the zero experts have no weights)"""
    B = BASE
    D, H, dc, dn, dr, dv = B["D"], B["H"], B["dc"], B["dn"], B["dr"], B["dv"]
    qk, E, Z, I = dn + dr, f["E"], f["Z"], f["moe_inter"]
    W = {"model.embed_tokens.weight": (rng.standard_normal((B["V"], D))).astype(F32),
         "model.norm.weight": gain(D),
         "lm_head.weight": lin(B["V"], D, 4.0 / math.sqrt(D))}
    for b in range(f["blocks"]):
        p = f"model.layers.{b}."
        for s in (0, 1):
            W[p + f"input_layernorm.{s}.weight"] = gain(D)
            W[p + f"post_attention_layernorm.{s}.weight"] = gain(D)
            a = p + f"self_attn.{s}."
            W[a + "q_a_proj.weight"] = lin(f["q_lora"], D)
            W[a + "q_a_layernorm.weight"] = gain(f["q_lora"])
            W[a + "q_b_proj.weight"] = lin(H * qk, f["q_lora"])
            W[a + "kv_a_proj_with_mqa.weight"] = lin(dc + dr, D)
            W[a + "kv_a_layernorm.weight"] = gain(dc)
            W[a + "kv_b_proj.weight"] = lin(H * (dn + dv), dc)
            W[a + "o_proj.weight"] = lin(D, H * dv)
            m = p + f"mlps.{s}."
            W[m + "gate_proj.weight"] = lin(B["inter"], D)
            W[m + "up_proj.weight"] = lin(B["inter"], D)
            W[m + "down_proj.weight"] = lin(D, B["inter"])
        W[p + "mlp.router.classifier.weight"] = lin(E + Z, D, 2.0 / math.sqrt(D))
        W[p + "mlp.router.e_score_correction_bias"] = (0.1 * rng.random(E + Z)).astype(F32)
        for e in range(E):
            q = p + f"mlp.experts.{e}."
            W[q + "gate_proj.weight"] = lin(I, D)
            W[q + "up_proj.weight"] = lin(I, D)
            W[q + "down_proj.weight"] = lin(D, I)
    return W


def fp8_eligible(name, a):
    """DeepSeek-V3's FP8 tensors: the 2-D projections, not the embedding,
    lm_head or the router"""
    return a.ndim == 2 and not (name.startswith("model.embed") or name.startswith("lm_head")
                                or name.endswith("mlp.gate.weight"))


def store(f, W):
    """-> (safetensors tensor list, the values as stored, float32)"""
    out, vals = [], {}
    for name, a in W.items():
        dt = f["dtype"]
        if dt == "F32":
            out.append((name, "F32", a.shape, a.astype("<f4").tobytes()))
            vals[name] = a
        elif dt == "BF16" or (dt == "FP8" and not fp8_eligible(name, a)):
            out.append((name, "BF16", a.shape, bf16_bits(a).astype("<u2").tobytes()))
            vals[name] = bf16_round(a)
        else:
            q, sc, deq = fp8_quantize(a, f["block"], f["block"])
            out.append((name, "F8_E4M3", a.shape, q.tobytes()))
            out.append((name + "_scale_inv", "F32", sc.shape, sc.astype("<f4").tobytes()))
            vals[name] = deq
    return out, vals


# ---------------------------------------------------------------- reference forward


def mscale(s, m):
    return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0


def rope_tables(f, T):
    """cos, sin [T, d_r/2] (attention factor included) and the softmax scale"""
    dr, base = BASE["dr"], theta_of(f)
    idx = np.arange(0, dr, 2).astype(F32)
    inv = (1.0 / (base ** (idx.astype(np.float64) / dr))).astype(F32)
    af = 1.0
    tau = (BASE["dn"] + dr) ** -0.5
    r = f.get("rope")
    if r:
        fac = r["factor"]
        if r["rope_type"] == "linear":
            inv = (inv / F32(fac)).astype(F32)
        elif r["rope_type"] == "yarn":
            orig = r.get("original_max_position_embeddings", BASE["max_pos"])
            pos = (base ** (idx.astype(np.float64) / dr)).astype(F32)
            ext = (F32(1) / pos).astype(F32)
            itp = (F32(1) / (F32(fac) * pos)).astype(F32)

            def cdim(n_rot):
                return dr * math.log(orig / (n_rot * 2 * math.pi)) / (2 * math.log(base))
            lo = max(math.floor(cdim(r.get("beta_fast", 32))), 0)
            hi = min(math.ceil(cdim(r.get("beta_slow", 1))), dr - 1)
            if lo == hi:
                hi += 0.001
            ramp = np.clip((np.arange(dr // 2, dtype=F32) - F32(lo)) / F32(hi - lo), 0, 1)
            ef = (F32(1) - ramp).astype(F32)
            inv = (itp * (F32(1) - ef) + ext * ef).astype(F32)
            ms, msa = r.get("mscale"), r.get("mscale_all_dim")
            af = mscale(fac, ms) / mscale(fac, msa) if (ms and msa) else mscale(fac, 1.0)
        elif r["rope_type"] == "llama3":
            orig = r["original_max_position_embeddings"]
            lf, hf = r["low_freq_factor"], r["high_freq_factor"]
            wl = 2 * math.pi / inv.astype(np.float64)
            out = np.where(wl > orig / lf, inv / F32(fac), inv).astype(np.float64)
            sm = (orig / wl - lf) / (hf - lf)
            smooth = (1 - sm) * out / fac + sm * out
            med = ~(wl < orig / hf) & ~(wl > orig / lf)
            inv = np.where(med, smooth, out).astype(F32)
        # DeepSeek's softmax-scale correction, V2 and V3 (docs/models.md)
        if r.get("mscale_all_dim"):
            m = mscale(fac, r["mscale_all_dim"])
            tau = tau * m * m
    ang = (np.arange(T, dtype=F32)[:, None] * inv[None, :]).astype(F32)
    cos = (np.cos(ang.astype(np.float64)).astype(F32) * F32(af)).astype(F32)
    sin = (np.sin(ang.astype(np.float64)).astype(F32) * F32(af)).astype(F32)
    return cos, sin, tau, af


def rms(x, g, eps):
    v = (x.astype(np.float64) ** 2).mean(-1, keepdims=True)
    return (g * (x / np.sqrt(v + eps)).astype(F32)).astype(F32)


def rotate(x, cos, sin, half):
    """x [..., T, d_r]; pairs (2i, 2i+1) or (i, i + d_r/2)"""
    P = x.shape[-1] // 2
    if half:
        a, b = x[..., :P], x[..., P:]
    else:
        a, b = x[..., 0::2], x[..., 1::2]
    pa, pb = a * cos - b * sin, a * sin + b * cos
    out = np.empty_like(x)
    if half:
        out[..., :P], out[..., P:] = pa, pb
    else:
        out[..., 0::2], out[..., 1::2] = pa, pb
    return out.astype(F32)


def silu(x):
    return (x / (1 + np.exp(-x))).astype(F32)


def mlp(x, g, u, d):
    return ((silu(x @ g.T) * (x @ u.T)) @ d.T).astype(F32)


def moe(f, W, p, x):
    E, K = f["E"], f["K"]
    logits = (x @ W[p + "mlp.gate.weight"].T).astype(F32)
    if f["arch"] in ("v3", "glm"):
        s = (1 / (1 + np.exp(-logits))).astype(F32)
        choice = s + W[p + "mlp.gate.e_score_correction_bias"]
        G = f["n_group"]
        gs = np.sort(choice.reshape(len(x), G, E // G), -1)[..., -2:].sum(-1)
    else:
        z = np.exp(logits - logits.max(-1, keepdims=True))
        s = (z / z.sum(-1, keepdims=True)).astype(F32)
        choice = s.copy()
        G = f.get("n_group") or 1
        gs = choice.reshape(len(x), G, E // G).max(-1)
    y = np.zeros_like(x)
    for t in range(len(x)):
        c = choice[t].copy()
        if f["arch"] in ("v3", "glm") or f["method"] == "group_limited_greedy":
            keep = np.argsort(-gs[t], kind="stable")[:f["topk_group"]]
            mask = np.zeros(G, bool)
            mask[keep] = True
            c[~np.repeat(mask, E // G)] = 0.0
        sel = np.argsort(-c, kind="stable")[:K]
        w = s[t, sel].astype(F32)
        if f["arch"] in ("v3", "glm") and f["norm"]:
            w = (w / (w.sum() + F32(1e-20))).astype(F32)
        w = (w * F32(f["rsf"])).astype(F32)
        for e, we in zip(sel, w):
            q = p + f"mlp.experts.{e}."
            y[t] += we * mlp(x[t:t + 1], W[q + "gate_proj.weight"], W[q + "up_proj.weight"],
                             W[q + "down_proj.weight"])[0]
    if f["n_shared"]:
        q = p + "mlp.shared_experts."
        y += mlp(x, W[q + "gate_proj.weight"], W[q + "up_proj.weight"], W[q + "down_proj.weight"])
    return y.astype(F32)


def attention(f, W, a, h, cos, sin, tau, half, tap=None):
    """one MLA attention over rows h (tensors a + "q_a_proj.weight", ...);
    LongcatFlash: queries times (D / q_lora)^1/2, the latent times
    (D / d_c)^1/2 (cached so). tap (a dict) gets c_kv, k_rope, q_nope, q_rope."""
    B = BASE
    H, dc, dn, dr, dv = B["H"], B["dc"], B["dn"], B["dr"], B["dv"]
    T = len(h)
    if f["q_lora"]:
        qa = rms(h @ W[a + "q_a_proj.weight"].T, W[a + "q_a_layernorm.weight"], 1e-6)
        q = qa @ W[a + "q_b_proj.weight"].T
    else:
        q = h @ W[a + "q_proj.weight"].T
    q = q.astype(F32)
    if f["arch"] == LC:
        q = (q * F32(math.sqrt(B["D"] / f["q_lora"]))).astype(F32)
    q = q.reshape(T, H, dn + dr).transpose(1, 0, 2)
    q_nope, q_rope = q[..., :dn], rotate(q[..., dn:], cos, sin, half)
    kv = (h @ W[a + "kv_a_proj_with_mqa.weight"].T).astype(F32)
    c = rms(kv[:, :dc], W[a + "kv_a_layernorm.weight"], 1e-6)
    if f["arch"] == LC:
        c = (c * F32(math.sqrt(B["D"] / dc))).astype(F32)
    k_rope = rotate(kv[:, dc:], cos, sin, half)
    if tap is not None:
        tap.update(c_kv=c, k_rope=k_rope, q_nope=q_nope, q_rope=q_rope)
    kvb = W[a + "kv_b_proj.weight"].reshape(H, dn + dv, dc)
    k_nope = np.einsum("td,hnd->htn", c, kvb[:, :dn])
    v = np.einsum("td,hnd->htn", c, kvb[:, dn:])
    z = (np.einsum("hin,hjn->hij", q_nope, k_nope) +
         np.einsum("hir,jr->hij", q_rope, k_rope)) * F32(tau)
    causal = np.triu(np.ones((T, T), bool), 1)
    z = np.where(causal[None], -np.inf, z)
    p = np.exp(z - z.max(-1, keepdims=True))
    p = (p / p.sum(-1, keepdims=True)).astype(F32)
    o = np.einsum("hij,hjv->ihv", p, v).reshape(T, H * dv)
    return (o @ W[a + "o_proj.weight"].T).astype(F32)


def moe_longcat(f, W, p, x):
    """LongcatFlash's MoE: softmax over the E routed + Z zero experts (float32
    logits), the top K of scores + e_score_correction_bias, weights the
    chosen scores x routed_scaling_factor; a zero expert returns its input.
    Also returns how many choices fell on zero experts."""
    E, Z, K = f["E"], f["Z"], f["K"]
    logits = (x @ W[p + "mlp.router.classifier.weight"].T).astype(F32)
    z = np.exp((logits - logits.max(-1, keepdims=True)).astype(np.float64))
    s = (z / z.sum(-1, keepdims=True)).astype(F32)
    choice = s + W[p + "mlp.router.e_score_correction_bias"]
    y = np.zeros_like(x)
    n_zero = 0
    for t in range(len(x)):
        sel = np.argsort(-choice[t], kind="stable")[:K]
        w = (s[t, sel] * F32(f["rsf"])).astype(F32)
        for e, we in zip(sel, w):
            if e >= E:
                y[t] += we * x[t]
                n_zero += 1
                continue
            q = p + f"mlp.experts.{e}."
            y[t] += we * mlp(x[t:t + 1], W[q + "gate_proj.weight"], W[q + "up_proj.weight"],
                             W[q + "down_proj.weight"])[0]
    return y.astype(F32), n_zero


def forward_longcat(f, W, tokens, cos, sin, tau, taps=None, stats=None):
    """LongcatFlash: per block b, sublayer s in (0, 1): x += attn_s(norm x);
    h = post_norm_s(x); s = 0: the MoE of h is held; x += mlp_s(h); s = 1: x
    += the held MoE output. taps: list of per-sublayer dicts (engine layer
    2 b + s)."""
    eps = eps_of(f)
    x = W["model.embed_tokens.weight"][tokens].astype(F32)
    for b in range(f["blocks"]):
        p = f"model.layers.{b}."
        for s in (0, 1):
            tap = {} if taps is not None else None
            h = rms(x, W[p + f"input_layernorm.{s}.weight"], eps)
            x = (x + attention(f, W, p + f"self_attn.{s}.", h, cos, sin, tau, False,
                               tap)).astype(F32)
            if taps is not None:
                taps.append(tap)
            h2 = rms(x, W[p + f"post_attention_layernorm.{s}.weight"], eps)
            if s == 0:
                short, nz = moe_longcat(f, W, p, h2)
                if stats is not None:
                    stats["zero_choices"] = stats.get("zero_choices", 0) + nz
            m = p + f"mlps.{s}."
            x = (x + mlp(h2, W[m + "gate_proj.weight"], W[m + "up_proj.weight"],
                         W[m + "down_proj.weight"])).astype(F32)
            if s == 1:
                x = (x + short).astype(F32)
    hf = rms(x, W["model.norm.weight"], eps)
    return (hf @ W["lm_head.weight"].T).astype(np.float64)


def forward(f, W, tokens, cos, sin, tau, stats=None):
    if f["arch"] == LC:
        return forward_longcat(f, W, tokens, cos, sin, tau, stats=stats)
    B = BASE
    T = len(tokens)
    half = f["arch"] in ("v3", "glm") and not f.get("interleave", True)
    x = W["model.embed_tokens.weight"][tokens].astype(F32)
    for l in range(B["L"]):
        p = f"model.layers.{l}."
        h = rms(x, W[p + "input_layernorm.weight"], B["eps"])
        x = (x + attention(f, W, p + "self_attn.", h, cos, sin, tau, half)).astype(F32)
        h2 = rms(x, W[p + "post_attention_layernorm.weight"], B["eps"])
        if is_moe(f, l):
            x = (x + moe(f, W, p, h2)).astype(F32)
        else:
            x = (x + mlp(h2, W[p + "mlp.gate_proj.weight"], W[p + "mlp.up_proj.weight"],
                         W[p + "mlp.down_proj.weight"])).astype(F32)
    hf = rms(x, W["model.norm.weight"], B["eps"])
    return (hf @ W["lm_head.weight"].T).astype(np.float64)


def text_bytes():
    words = ("the quick brown fox jumps over a lazy dog while latent caches hold keys and "
             "values of many heads in few numbers ").split()
    rng = np.random.default_rng(7)
    s = " ".join(words[i] for i in rng.integers(0, len(words), 400))
    return s.encode()[:T_CTX * N_WIN]


def nll_of(f, W, text, stats=None):
    cos, sin, tau, af = rope_tables(f, T_CTX)
    tot, n = 0.0, 0
    for k in range(len(text) // T_CTX):
        w = list(text[k * T_CTX:(k + 1) * T_CTX])
        tok = [BOS] + w[:-1]
        lg = forward(f, W, np.array(tok), cos, sin, tau, stats)
        m = lg.max(-1, keepdims=True)
        lse = (m[:, 0] + np.log(np.exp(lg - m).sum(-1)))
        tot += float((lse - lg[np.arange(T_CTX), w]).sum())
        n += T_CTX
    return tot / n, cos, sin, tau, af


def write_family(out, name, f, seed):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump(config_json(f), fh, indent=1)
    with open(os.path.join(d, "qmla_tokenizer.json"), "w") as fh:
        json.dump({"type": "bytes", "bos_id": BOS}, fh)
    W = make_weights(f, seed)
    tensors, vals = store(f, W)
    write_safetensors(os.path.join(d, "model.safetensors"), tensors)
    if f["dtype"] == "FP8":
        # the dequantized values in F32, without quantization_config
        dq = os.path.join(out, name + "-deq")
        os.makedirs(dq, exist_ok=True)
        cfg = config_json(f)
        del cfg["quantization_config"]
        with open(os.path.join(dq, "config.json"), "w") as fh:
            json.dump(cfg, fh, indent=1)
        shutil.copy(os.path.join(d, "qmla_tokenizer.json"), dq)
        write_safetensors(os.path.join(dq, "model.safetensors"),
                          [(k, "F32", v.shape, v.astype("<f4").tobytes()) for k, v in vals.items()])
    return vals


def cmd_write(out):
    os.makedirs(out, exist_ok=True)
    text = text_bytes()
    with open(os.path.join(out, "text.txt"), "wb") as fh:
        fh.write(text)
    ref = {}
    for i, (name, f) in enumerate(FAMILIES.items()):
        vals = write_family(out, name, f, 100 + i)
        stats = {}
        nll, cos, sin, tau, af = nll_of(f, vals, text, stats)
        ref[name] = {"nll": nll, "tau": tau, "attention_factor": af, "arch": f["arch"],
                     "dtype": f["dtype"], "rope": (f.get("rope") or {}).get("rope_type",
                                                                           "default"),
                     "moe": bool(f["E"]), "context": T_CTX, "tokens": T_CTX * N_WIN,
                     "cos": cos.tolist(), "sin": sin.tolist()}
        if f["arch"] == LC:
            # tokens x K choices that went to zero experts (none: the test would
            # not see them)
            ref[name]["zero_choices"] = stats["zero_choices"]
            ref[name]["choices"] = len(text) * f["blocks"] * f["K"]
    with open(os.path.join(out, "ref.json"), "w") as fh:
        json.dump(ref, fh)
    for k, v in ref.items():
        print(f"{k:28s} nll {v['nll']:.8f} tau {v['tau']:.6f} af {v['attention_factor']:.6f}")


def cmd_write_big(out):
    """one DeepseekV2 MoE checkpoint in BF16 whose experts dominate its bytes
    (2 MoE layers x 64 experts of 512 x 256: 50M parameters, 100 MB), for
    the resident-memory check; no reference NLL"""
    global BASE
    keep = BASE
    BASE = dict(keep, D=512, inter=256)
    f = dict(arch="v2", dtype="BF16", q_lora=0, E=64, K=6, n_shared=2, moe_inter=256,
             first_dense=1, method="greedy", rsf=1.0, rope=None)
    try:
        d = os.path.join(out, "v2-big-bf16")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as fh:
            json.dump(config_json(f), fh, indent=1)
        with open(os.path.join(d, "qmla_tokenizer.json"), "w") as fh:
            json.dump({"type": "bytes", "bos_id": BOS}, fh)
        W = make_weights(f, 1)
        tensors, _ = store(f, W)
        write_safetensors(os.path.join(d, "model.safetensors"), tensors)
        n = sum(a.size for a in W.values())
        ne = sum(a.size for k, a in W.items() if ".experts." in k)
        print(json.dumps({"params": int(n), "expert_params": int(ne),
                          "bytes": os.path.getsize(os.path.join(d, "model.safetensors"))}))
    finally:
        BASE = keep


def cmd_check_capture(d, name, cap, offsets):
    """the capture cap of checkpoint d/<name> (qmla capture ... --seqs N
    --tokens T, windows at text offsets `offsets`: [BOS] + text[o, o + T - 1))
    against the NumPy forward: every layer's c_kv, k_rope, q_nope, q_rope
    within 1e-5 of its scale. LongcatFlash's sublayer s of block b is layer
    2 b + s."""
    import h5py
    f = FAMILIES[name]
    W = read_values(os.path.join(d, name), f)
    text = open(os.path.join(d, "text.txt"), "rb").read()
    h = h5py.File(cap, "r")
    T = h["layers/0/cells"][list(h["layers/0/cells"])[0]]["c_kv"].shape[1]
    cos, sin, tau, _ = rope_tables(f, T)
    worst, n_cmp = 0.0, 0
    L = 2 * f["blocks"] if f["arch"] == LC else BASE["L"]
    assert sorted(int(x) for x in h["layers"]) == list(range(L)), list(h["layers"])
    for i, o in enumerate(offsets):
        tok = np.array([BOS] + list(text[o:o + T - 1]))
        taps = []
        forward_longcat(f, W, tok, cos, sin, tau, taps=taps)
        for l in range(L):
            cell = list(h[f"layers/{l}/cells"].values())[0]
            for k in ("c_kv", "k_rope", "q_nope", "q_rope"):
                got, want = cell[k][i], taps[l][k]
                err = float(np.abs(got - want).max() / (np.abs(want).max() + 1e-30))
                assert err <= 1e-5, (l, k, i, err)
                worst = max(worst, err)
                n_cmp += 1
    print(f"{name}: {n_cmp} capture tensors ({L} layers x {len(offsets)} windows) match the "
          f"NumPy forward, worst relative {worst:.2e}")


def read_values(d, f):
    """the float32 values of checkpoint d's tensors as stored (F32 / BF16)"""
    out = {}
    for name, dt, shape, b in read_safetensors(os.path.join(d, "model.safetensors")):
        if dt == "F32":
            a = np.frombuffer(b, dtype="<f4")
        elif dt == "BF16":
            a = (np.frombuffer(b, dtype="<u2").astype(np.uint32) << 16).view(F32)
        else:
            sys.exit(f"{name}: dtype {dt} not read here")
        out[name] = a.reshape(shape).astype(F32)
    return out


def cmd_fault(src, dst, kind):
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    cfgp = os.path.join(dst, "config.json")
    stp = os.path.join(dst, "model.safetensors")
    cfg = json.load(open(cfgp))
    ts = read_safetensors(stp)
    if kind == "missing_expert":
        ts = [t for t in ts if t[0] != "model.layers.1.mlp.experts.3.up_proj.weight"]
    elif kind == "router_width":
        ts = [(n, d, ([s[0] - 2, s[1]] if n == "model.layers.2.mlp.gate.weight" else s),
               (b[:len(b) * (s[0] - 2) // s[0]] if n == "model.layers.2.mlp.gate.weight" else b))
              for n, d, s, b in ts]
    elif kind == "scale_shape":
        name = "model.layers.1.self_attn.kv_a_proj_with_mqa.weight_scale_inv"
        out = []
        for n, d, s, b in ts:
            if n == name:
                s = [s[0] + 1, s[1]]
                b = b + b[:4 * s[1]]
            out.append((n, d, s, b))
        ts = out
    elif kind == "nan_scale":
        name = "model.layers.2.mlp.experts.1.down_proj.weight_scale_inv"
        ts = [(n, d, s, (struct.pack("<f", float("nan")) + b[4:] if n == name else b))
              for n, d, s, b in ts]
    elif kind == "gate":
        cfg["scoring_func"] = "softmax" if cfg["model_type"] == "deepseek_v3" else "sigmoid"
    elif kind == "topk_method":
        cfg["topk_method"] = "top_p"
    elif kind == "rope_type":
        cfg["rope_parameters"]["rope_type"] = "longrope"
    elif kind == "no_qconfig":
        del cfg["quantization_config"]
    elif kind == "layer_types":
        cfg["mlp_layer_types"] = cfg["mlp_layer_types"][:-1]
    elif kind == "lc_router_width":
        # a router without the zero experts' rows
        name = "model.layers.1.mlp.router.classifier.weight"
        z = cfg["zero_expert_num"]
        ts = [(n, d, ([s[0] - z, s[1]] if n == name else s),
               (b[:len(b) * (s[0] - z) // s[0]] if n == name else b)) for n, d, s, b in ts]
    elif kind == "lc_missing_bias":
        ts = [t for t in ts if t[0] != "model.layers.0.mlp.router.e_score_correction_bias"]
    elif kind == "lc_layers":
        cfg["num_hidden_layers"] = cfg["num_layers"]
    elif kind == "lc_router_bias":
        cfg["router_bias"] = True
    else:
        sys.exit(f"unknown fault {kind}")
    write_safetensors(stp, ts)
    json.dump(cfg, open(cfgp, "w"), indent=1)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        cmd_write(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "write-big":
        cmd_write_big(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "fault":
        cmd_fault(*sys.argv[2:])
    elif len(sys.argv) >= 6 and sys.argv[1] == "check-capture":
        cmd_check_capture(sys.argv[2], sys.argv[3], sys.argv[4], [int(x) for x in sys.argv[5:]])
    else:
        sys.exit(__doc__)
