"""qmla_capture_lib: shared code of the capture tools (qmla-capture v1).

What is here:
  - discovery of the MLA attention modules of a transformers model
    (DeepseekV2Attention, DeepseekV3Attention, Glm4MoeLiteAttention, LongcatFlashMLA);
  - a Recorder that hooks those modules (forward hooks on the attention module and
    its kv_a_layernorm / query projection, plus temporary wrappers around the
    module-level `apply_rotary*` and `eager_attention_forward` functions that the
    attention's forward calls) and turns one forward pass into the tensors of the
    contract: c_kv, k_rope, q_nope, q_rope, attn_out and the pre-RoPE tensors;
  - detection of the RoPE pairing actually used (interleaved / de-interleaved
    half / plain half) by comparing the rotation inputs and outputs;
  - the float64 recomputation of attention in the absorbed form
    (docs/capture-format.md, "Rules") in numpy and in torch;
  - HDF5 writing and a validator of qmla-capture v1 files.

The contract lives in docs/capture-format.md; shapes in comments use its
notation (N, T, H, d_c, d_r, d_n, d_v, D). Torch is imported lazily so that the
validator (`python3 qmla_capture_lib.py validate FILE`) runs with numpy + h5py
alone.
"""

import math
import os
import sys

import numpy as np

FORMAT = "qmla-capture"
FORMAT_VERSION = 1

# attention class name -> family (model_type of transformers)
KNOWN_ATTENTION = {
    "DeepseekV2Attention": "deepseek_v2",
    "DeepseekV3Attention": "deepseek_v3",
    "Glm4MoeLiteAttention": "glm4_moe_lite",
    "LongcatFlashMLA": "longcat_flash",
}
KNOWN_MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "glm4_moe_lite", "longcat_flash")
MLA_PARTS = ("kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "o_proj")


class CaptureError(Exception):
    """A refusal or an inconsistency; the CLI prints the message and exits 2."""


# --------------------------------------------------------------------------- #
# tolerances
# --------------------------------------------------------------------------- #
def default_check_tolerance(compute_dtype, store_dtype, weights_fp8=False):
    """Relative Frobenius error expected between recomputed attention and attn_out.

    compute_dtype, store_dtype: names ('float64', 'float32', 'float16', 'bfloat16').
    """
    if weights_fp8:
        return 1e-1
    if compute_dtype == "bfloat16":
        return 3e-2
    if compute_dtype == "float16":
        return 1e-2
    if store_dtype == "float16":
        return 5e-3
    if compute_dtype == "float64" and store_dtype == "float64":
        return 1e-9
    return 1e-5


def rope_tolerance(dtype_name):
    """Relative error allowed between stored post-RoPE tensors and rotate(pre)."""
    return {"float64": 1e-6, "float32": 1e-5, "float16": 5e-3}.get(dtype_name, 2e-2)


# --------------------------------------------------------------------------- #
# YaRN
# --------------------------------------------------------------------------- #
def rope_params_of(config):
    """The rope dict of a config (transformers 5: rope_parameters; 4: rope_scaling)."""
    for name in ("rope_parameters", "rope_scaling"):
        rp = getattr(config, name, None)
        if isinstance(rp, dict) and rp:
            # transformers 5 may nest per layer type: {"full_attention": {...}}
            if "rope_type" not in rp and "type" not in rp and "factor" not in rp:
                inner = [v for v in rp.values() if isinstance(v, dict)]
                if inner:
                    return inner[0]
            return rp
    return {}


def expected_softmax_scale(config, d_n, d_r):
    """tau = (d_n + d_r)^-1/2 * mscale^2 with mscale = 0.1*mscale_all_dim*ln(factor)+1
    when YaRN is on (docs/models.md); the plain (d_n+d_r)^-1/2 otherwise."""
    tau = (d_n + d_r) ** -0.5
    rp = rope_params_of(config)
    rtype = rp.get("rope_type", rp.get("type", "default"))
    if rtype not in (None, "default") and rp.get("mscale_all_dim"):
        factor = float(rp.get("factor", 1.0))
        if factor > 1.0:
            m = 0.1 * float(rp["mscale_all_dim"]) * math.log(factor) + 1.0
            tau *= m * m
    return tau


# --------------------------------------------------------------------------- #
# RoPE helpers (torch or numpy arrays; pairs last-dim)
# --------------------------------------------------------------------------- #
def deinterleave_perm(d_r):
    """Index list mapping interleaved pairs (2i,2i+1) to half pairs (i,i+d_r/2)."""
    return list(range(0, d_r, 2)) + list(range(1, d_r, 2))


def rotate(pre, cos, sin, pairing):
    """post = rotate(pre) per capture-format.md.  pre [..., d_r]; cos, sin [..., d_r/2]
    broadcastable.  Works on numpy arrays and torch tensors."""
    h = pre.shape[-1] // 2
    if pairing == "interleaved":
        a, b = pre[..., 0::2], pre[..., 1::2]
    elif pairing == "half":
        a, b = pre[..., :h], pre[..., h:]
    else:
        raise ValueError("unknown rope_pairing %r" % (pairing,))
    pa = a * cos - b * sin
    pb = a * sin + b * cos
    if isinstance(pre, np.ndarray):
        if pairing == "interleaved":
            return np.stack((pa, pb), axis=-1).reshape(pre.shape)
        return np.concatenate((pa, pb), axis=-1)
    import torch
    if pairing == "interleaved":
        return torch.stack((pa, pb), dim=-1).flatten(-2)
    return torch.cat((pa, pb), dim=-1)


def _rel(a, b):
    """||a-b|| / ||b|| (0/0 -> 0)."""
    num = float(((a - b) ** 2).sum())
    den = float((b ** 2).sum())
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return math.sqrt(num / den)


# --------------------------------------------------------------------------- #
# float64 recomputation (absorbed form of capture-format.md)
# --------------------------------------------------------------------------- #
def recompute_attention_np(c_kv, k_rope, q_nope, q_rope, w_uk, w_uv, w_o, tau):
    """One sequence, numpy float64.  c_kv [T,d_c], k_rope [T,d_r], q_nope [H,T,d_n],
    q_rope [H,T,d_r], w_uk [H,d_n,d_c], w_uv [H,d_v,d_c], w_o [D,H*d_v] -> y [T,D]."""
    f = lambda x: np.asarray(x, dtype=np.float64)
    c_kv, k_rope, q_nope, q_rope = f(c_kv), f(k_rope), f(q_nope), f(q_rope)
    w_uk, w_uv, w_o = f(w_uk), f(w_uv), f(w_o)
    H, T = q_nope.shape[0], q_nope.shape[1]
    q_lat = np.einsum("htn,hnc->htc", q_nope, w_uk)
    z = tau * (q_lat @ c_kv.T + q_rope @ k_rope.T)            # [H,T,T]
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    z = np.where(mask[None], -np.inf, z)
    z = z - z.max(axis=-1, keepdims=True)
    a = np.exp(z)
    a /= a.sum(axis=-1, keepdims=True)
    u = a @ c_kv                                               # [H,T,d_c]
    o = np.einsum("htc,hvc->thv", u, w_uv).reshape(T, -1)     # [T,H*d_v]
    return o @ w_o.T


def recompute_attention_torch(c_kv, k_rope, q_nope, q_rope, w_uk, w_uv, w_o, tau):
    """As recompute_attention_np, on torch float64 tensors (any device)."""
    import torch
    H, T = q_nope.shape[0], q_nope.shape[1]
    q_lat = torch.einsum("htn,hnc->htc", q_nope, w_uk)
    z = tau * (q_lat @ c_kv.T + q_rope @ k_rope.T)
    mask = torch.ones((T, T), dtype=torch.bool, device=z.device).triu(1)
    z = z.masked_fill(mask[None], float("-inf"))
    a = torch.softmax(z, dim=-1)
    u = a @ c_kv
    o = torch.einsum("htc,hvc->thv", u, w_uv).reshape(T, -1)
    return o @ w_o.T


def attention_rel_error(cell, w, tau, device=None):
    """Relative Frobenius error of the recomputed attention against cell['attn_out']
    over all N sequences.  cell: dict of arrays (numpy or torch) in the contract's
    shapes; w: dict with w_uk, w_uv, w_o.  With device (a torch device string) the
    work runs in torch float64 there, else in numpy."""
    num = den = 0.0
    N = cell["c_kv"].shape[0]
    if device is not None:
        import torch
        g = lambda x: torch.as_tensor(np.asarray(x) if not torch.is_tensor(x) else x).to(
            device=device, dtype=torch.float64)
        wk, wv, wo = g(w["w_uk"]), g(w["w_uv"]), g(w["w_o"])
        for n in range(N):
            y = recompute_attention_torch(g(cell["c_kv"][n]), g(cell["k_rope"][n]),
                                          g(cell["q_nope"][n]), g(cell["q_rope"][n]),
                                          wk, wv, wo, tau)
            ref = g(cell["attn_out"][n])
            num += float(((y - ref) ** 2).sum())
            den += float((ref ** 2).sum())
    else:
        for n in range(N):
            y = recompute_attention_np(cell["c_kv"][n], cell["k_rope"][n], cell["q_nope"][n],
                                       cell["q_rope"][n], w["w_uk"], w["w_uv"], w["w_o"], tau)
            ref = np.asarray(cell["attn_out"][n], dtype=np.float64)
            num += float(((y - ref) ** 2).sum())
            den += float((ref ** 2).sum())
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return math.sqrt(num / den)


# --------------------------------------------------------------------------- #
# model side (torch)
# --------------------------------------------------------------------------- #
def find_mla_modules(model):
    """[(index, name, module, family)] of MLA attention modules in model order.
    Known classes first; any other module with all of MLA_PARTS is reported as an
    unknown family (the caller refuses it)."""
    found = []
    for name, mod in model.named_modules():
        cls = type(mod).__name__
        if cls in KNOWN_ATTENTION:
            found.append((name, mod, KNOWN_ATTENTION[cls]))
        elif all(hasattr(mod, p) for p in MLA_PARTS) and not any(
                name.startswith(f[0] + ".") for f in found):
            found.append((name, mod, None))
    return [(i, n, m, f) for i, (n, m, f) in enumerate(found)]


def linear_weight(mod):
    """The float32 weight [out, in] of a Linear, FP8 block-scaled weights dequantised."""
    import torch
    w = mod.weight
    if w.dtype in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)):
        s = getattr(mod, "weight_scale_inv", None)
        if s is None:
            raise CaptureError("%s: FP8 weight without weight_scale_inv" % type(mod).__name__)
        out_f, in_f = w.shape
        s = s.float()
        bo = -(-out_f // s.shape[0])
        bi = -(-in_f // s.shape[1])
        s = s.repeat_interleave(bo, 0)[:out_f].repeat_interleave(bi, 1)[:, :in_f]
        return w.float() * s.to(w.device)
    return w.detach().float() if w.dtype != torch.float64 else w.detach()


def is_fp8(mod):
    import torch
    return mod.weight.dtype in (getattr(torch, "float8_e4m3fn", None),
                                getattr(torch, "float8_e5m2", None))


def module_dims(mod, config):
    """H, d_c, d_n, d_r, d_v, D of one MLA module (attributes first, config second)."""
    def get(*names):
        for obj in (mod, config):
            for n in names:
                v = getattr(obj, n, None)
                if isinstance(v, int) and not isinstance(v, bool):
                    return v
        raise CaptureError("cannot read %s off %s" % (names[0], type(mod).__name__))
    return dict(H=get("num_heads", "num_attention_heads"), d_c=get("kv_lora_rank"),
                d_n=get("qk_nope_head_dim"), d_r=get("qk_rope_head_dim"),
                d_v=get("v_head_dim"), D=get("hidden_size"))


def module_scale(mod):
    for n in ("scaling", "softmax_scale"):
        v = getattr(mod, n, None)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    raise CaptureError("%s has neither .scaling nor .softmax_scale" % type(mod).__name__)


def module_eps(mod):
    norm = mod.kv_a_layernorm
    for n in ("variance_epsilon", "eps"):
        v = getattr(norm, n, None)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    raise CaptureError("cannot read eps off kv_a_layernorm (%s)" % type(norm).__name__)


def _num_attr(mod, name):
    v = getattr(mod, name, None)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return None


def layer_weights(mod, dims):
    """w_uk [H,d_n,d_c], w_uv [H,d_v,d_c], w_o [D,H*d_v], kv_norm_weight [d_c] as
    float CPU tensors (float64 if the module is float64, else float32)."""
    import torch
    H, d_c, d_n, d_v, D = dims["H"], dims["d_c"], dims["d_n"], dims["d_v"], dims["D"]
    for part in ("kv_b_proj", "o_proj"):
        b = getattr(getattr(mod, part), "bias", None)
        if b is not None and bool((b != 0).any()):
            raise CaptureError("%s has a non-zero bias; qmla-capture v1 has no place for it"
                               % part)
    kvb = linear_weight(mod.kv_b_proj)
    if tuple(kvb.shape) != (H * (d_n + d_v), d_c):
        raise CaptureError("kv_b_proj.weight has shape %s, expected %s"
                           % (tuple(kvb.shape), (H * (d_n + d_v), d_c)))
    kvb = kvb.view(H, d_n + d_v, d_c)
    wo = linear_weight(mod.o_proj)
    if tuple(wo.shape) != (D, H * d_v):
        raise CaptureError("o_proj.weight has shape %s, expected %s" % (tuple(wo.shape), (D, H * d_v)))
    g = mod.kv_a_layernorm.weight.detach()
    g = g.double() if g.dtype == torch.float64 else g.float()
    return dict(w_uk=kvb[:, :d_n].contiguous().cpu(), w_uv=kvb[:, d_n:].contiguous().cpu(),
                w_o=wo.contiguous().cpu(), kv_norm_weight=g.cpu())


def _cos_sin_pairs(extra, kwargs, d_r):
    """Per-pair (cos, sin) [B', T, d_r/2] (float64) from the rotary function's
    arguments: a complex freqs_cis tensor or a (cos, sin) pair of width d_r/2 or d_r
    ('cat' or 'repeat_interleave' duplication)."""
    import torch
    items = list(extra)
    for k in ("freqs_cis", "position_embeddings", "cos", "sin"):
        if k in kwargs:
            items.append(kwargs[k])
    items = [x for x in items if x is not None and not isinstance(x, (int, float, bool))]
    if not items:
        raise CaptureError("rotary function called without cos/sin")
    first = items[0]
    if isinstance(first, (tuple, list)):
        cos, sin = first[0], first[1]
    elif torch.is_tensor(first) and first.is_complex():
        cos, sin = first.real, first.imag
    else:
        cos, sin = items[0], items[1]
    cos, sin = cos.detach().to(torch.float64).cpu(), sin.detach().to(torch.float64).cpu()
    while cos.dim() > 3:             # e.g. [B,1,T,d]
        cos, sin = cos.squeeze(1), sin.squeeze(1)
    if cos.dim() == 2:
        cos, sin = cos[None], sin[None]
    h = d_r // 2
    if cos.shape[-1] == h:
        return cos, sin
    if cos.shape[-1] == d_r:
        if torch.equal(cos[..., :h], cos[..., h:]) and torch.equal(sin[..., :h], sin[..., h:]):
            return cos[..., :h].contiguous(), sin[..., :h].contiguous()
        if torch.equal(cos[..., 0::2], cos[..., 1::2]) and torch.equal(sin[..., 0::2], sin[..., 1::2]):
            return cos[..., 0::2].contiguous(), sin[..., 0::2].contiguous()
    raise CaptureError("cannot read per-pair cos/sin from a tensor of shape %s (d_r=%d)"
                       % (tuple(cos.shape), d_r))


def detect_rope_layout(q_pre, k_pre, q_post, k_post, cos, sin):
    """Which layout reproduces the rotary function's output.  q_pre/q_post
    [B,H,T,d_r], k_pre/k_post [B,1,T,d_r], cos/sin [B',T,d_r/2] (float64 torch).
    Returns (pairing, perm or None, relative error) of the best candidate:
    ('interleaved', None): pairs (2i,2i+1) in place (DeepSeek-V2 path);
    ('half', perm):        de-interleave then pairs (i,i+d_r/2) (DeepSeek-V3 path);
    ('half', None):        pairs (i,i+d_r/2) in place (rope_interleave=False)."""
    c, s = cos[:, None], sin[:, None]
    d_r = q_pre.shape[-1]
    perm = deinterleave_perm(d_r)
    best = None
    for pairing, p in (("interleaved", None), ("half", perm), ("half", None)):
        qp = q_pre if p is None else q_pre[..., p]
        kp = k_pre if p is None else k_pre[..., p]
        e = max(_rel(rotate(qp, c, s, pairing), q_post), _rel(rotate(kp, c, s, pairing), k_post))
        if best is None or e < best[2]:
            best = (pairing, p, e)
    return best


def _to_cpu(obj):
    """Tensors (also inside tuples, lists, dicts) moved to the CPU, detached."""
    if hasattr(obj, "detach") and hasattr(obj, "cpu"):
        return obj.detach().cpu()
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to_cpu(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    return obj


class Recorder:
    """Hooks the MLA modules of a model for one forward pass at a time.

    layers: [(index, module)] to capture.  After a forward pass, take() returns
    {index: raw record} and clears.  Use as a context manager: the module-level
    function wrappers are removed on exit."""

    def __init__(self, layers, store_hidden=False):
        self.layers = layers
        self.by_mod = {id(m): i for i, m in layers}
        self.store_hidden = store_hidden
        self.cur = None           # (index, record dict) while a target module runs
        self.records = {}
        self.handles = []
        self.patched = []         # (globals dict, name, original)
        self.fired = {"rope": 0, "attn": 0}

    # hooks ------------------------------------------------------------------
    def _pre(self, mod, args, kwargs):
        i = self.by_mod[id(mod)]
        rec = {}
        if self.store_hidden:
            hs = kwargs.get("hidden_states", args[0] if args else None)
            rec["hidden_in"] = hs.detach().cpu()
        self.cur = (i, rec)

    def _post(self, mod, args, output):
        i, rec = self.cur
        out = output[0] if isinstance(output, (tuple, list)) else output
        rec["attn_out"] = out.detach()
        # to the host at once: a deep model would otherwise hold every layer's
        # tensors on the GPU until the forward pass ends
        self.records.setdefault(i, []).append(_to_cpu(rec))
        self.cur = None

    def _sub(self, key):
        def hook(mod, args, output):
            if self.cur is not None:
                self.cur[1][key] = (output[0] if isinstance(output, (tuple, list)) else output).detach()
        return hook

    def _wrap_rope(self, fn):
        rec_self = self

        def wrapped(*args, **kwargs):
            out = fn(*args, **kwargs)
            if rec_self.cur is not None:
                q = args[0] if len(args) > 0 else kwargs.get("q", kwargs.get("xq"))
                k = args[1] if len(args) > 1 else kwargs.get("k", kwargs.get("xk"))
                rec_self.cur[1]["rope"] = (q.detach(), k.detach(), out[0].detach(), out[1].detach(),
                                           args[2:], dict(kwargs))
                rec_self.fired["rope"] += 1
            return out
        wrapped.__qmla_wrapped__ = fn
        return wrapped

    def _wrap_attn(self, fn):
        rec_self = self

        def wrapped(module, query, key, value, attention_mask, *args, **kwargs):
            if id(module) in rec_self.by_mod and rec_self.cur is not None:
                sc = kwargs.get("scaling", args[0] if args else None)
                rec_self.cur[1]["attn_q"] = query.detach()
                rec_self.cur[1]["attn_k"] = key[:, 0].detach().clone()   # [B,T,d_n+d_r], shared by heads
                rec_self.cur[1]["scaling"] = None if sc is None else float(sc)
                rec_self.fired["attn"] += 1
            return fn(module, query, key, value, attention_mask, *args, **kwargs)
        wrapped.__qmla_wrapped__ = fn
        return wrapped

    def __enter__(self):
        import inspect
        seen = set()
        for i, m in self.layers:
            try:
                self.handles.append(m.register_forward_pre_hook(self._pre, with_kwargs=True))
            except TypeError:   # torch < 2.0: no kwargs in pre-hooks
                self.handles.append(m.register_forward_pre_hook(lambda mod, a: self._pre(mod, a, {})))
            self.handles.append(m.register_forward_hook(self._post))
            self.handles.append(m.kv_a_layernorm.register_forward_hook(self._sub("c_kv_norm")))
            self.handles.append(m.kv_a_proj_with_mqa.register_forward_hook(self._sub("kv_a")))
            qp = getattr(m, "q_proj", None) or getattr(m, "q_b_proj", None)
            if qp is not None:
                self.handles.append(qp.register_forward_hook(self._sub("q_proj")))
            g = inspect.unwrap(type(m).forward).__globals__
            if id(g) in seen:
                continue
            seen.add(id(g))
            for name, obj in list(g.items()):
                if not callable(obj) or getattr(obj, "__qmla_wrapped__", None) is not None:
                    continue
                if name.startswith("apply_rotary"):
                    g[name] = self._wrap_rope(obj)
                    self.patched.append((g, name, obj))
                elif name == "eager_attention_forward":
                    g[name] = self._wrap_attn(obj)
                    self.patched.append((g, name, obj))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        for g, name, obj in self.patched:
            g[name] = obj
        self.handles, self.patched = [], []
        return False

    def take(self):
        r, self.records = self.records, {}
        return r


def process_record(rec, mod, dims, family):
    """Turn one raw record (one batch through one module) into contract tensors on
    the CPU, in the compute dtype: c_kv [B,T,d_c], k_rope [B,T,d_r], q_nope
    [B,H,T,d_n], q_rope [B,H,T,d_r], attn_out [B,T,D] and, when the rotary
    function was seen, rope dict (q_pre, k_pre as given, cos, sin float64).
    Also returns the scale the attention was called with (or None)."""
    import torch
    d_n, d_r, d_c, H = dims["d_n"], dims["d_r"], dims["d_c"], dims["H"]
    if "c_kv_norm" not in rec:
        raise CaptureError("kv_a_layernorm was not called inside the attention module")
    c_kv = rec["c_kv_norm"]
    skv = _num_attr(mod, "mla_scale_kv_lora")          # LongCat: the cached latent is scaled
    if skv is not None:
        c_kv = c_kv * skv
    sq = _num_attr(mod, "mla_scale_q_lora")
    out = {"c_kv": c_kv.reshape(c_kv.shape[0], -1, d_c), "attn_out": rec["attn_out"]}
    if "attn_q" in rec:
        q = rec["attn_q"]                                # [B,H,T,d_n+d_r]
        if q.shape[-1] < d_n + d_r:
            raise CaptureError("attention query has width %d < d_n+d_r" % q.shape[-1])
        out["q_nope"] = q[..., :d_n]
        out["q_rope"] = q[..., d_n:d_n + d_r]
        out["k_rope"] = rec["attn_k"][:, :, d_n:d_n + d_r]
        src = "attention inputs"
    else:
        if "rope" not in rec or "q_proj" not in rec:
            raise CaptureError("neither the attention function nor the rotary function of %s "
                               "could be intercepted" % type(mod).__name__)
        qp = rec["q_proj"]
        B, T = qp.shape[0], qp.shape[1]
        qp = qp.view(B, T, H, -1).transpose(1, 2)
        out["q_nope"] = qp[..., :d_n] * sq if sq is not None else qp[..., :d_n]
        out["q_rope"] = rec["rope"][2]
        out["k_rope"] = rec["rope"][3][:, 0]
        src = "projections + rotary outputs"
    if "rope" in rec:
        q_pre, k_pre, q_post, k_post, extra, kw = rec["rope"]
        cos, sin = _cos_sin_pairs(extra, kw, d_r)
        out["rope"] = dict(q_pre=q_pre, k_pre=k_pre, q_post=q_post, k_post=k_post, cos=cos, sin=sin)
    out = {k: (v.cpu() if torch.is_tensor(v) else v) for k, v in out.items()}
    if "rope" in out:
        out["rope"] = {k: v.cpu() for k, v in out["rope"].items()}
    if "hidden_in" in rec:
        out["hidden_in"] = rec["hidden_in"]
    return out, rec.get("scaling"), src


# --------------------------------------------------------------------------- #
# tiny random checkpoints of the real transformers classes (tests, oracle)
# --------------------------------------------------------------------------- #
def yarn_rope(theta, factor, mscale, mscale_all_dim, original_max=4096):
    return dict(rope_type="yarn", rope_theta=float(theta), factor=float(factor),
                original_max_position_embeddings=int(original_max), beta_fast=32.0, beta_slow=1.0,
                mscale=float(mscale), mscale_all_dim=float(mscale_all_dim))


def make_config(model_type, rope, **kw):
    """AutoConfig.for_model(model_type, ...) with the rope dict passed as
    rope_parameters (transformers 5) or, failing that, rope_scaling + rope_theta."""
    from transformers import AutoConfig
    try:
        cfg = AutoConfig.for_model(model_type, rope_parameters=dict(rope), **kw)
    except (TypeError, ValueError):
        legacy = {k: v for k, v in rope.items() if k != "rope_theta"}
        legacy["type"] = legacy.pop("rope_type")
        cfg = AutoConfig.for_model(model_type, rope_theta=rope["rope_theta"],
                                   rope_scaling=None if legacy["type"] == "default" else legacy, **kw)
    got = rope_params_of(cfg)
    if rope.get("rope_type") == "yarn" and got.get("rope_type", got.get("type")) != "yarn":
        raise CaptureError("config of %s did not keep the YaRN rope parameters: %r" % (model_type, got))
    return cfg


def build_tiny_checkpoint(config, out_dir, seed=0, fp16_exact=False, bos_id=256):
    """Randomly initialised AutoModelForCausalLM of `config`, with the MLA modules'
    Linear weights redrawn N(0, 1/in_features) (so attention is far from uniform),
    latent norm gains U(0.5, 1.5) and embeddings N(0, 1); fp16_exact rounds every
    parameter to a float16-representable value.  Saved with save_pretrained plus a
    byte tokenizer (qmla_tokenizer.json).  Returns the model (float32, CPU)."""
    import json as _json
    import torch
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.float()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb.copy_(torch.randn(emb.shape, generator=gen))
        for _, _, m, _ in find_mla_modules(model):
            for sub in m.modules():
                if isinstance(sub, torch.nn.Linear):
                    sub.weight.copy_(torch.randn(sub.weight.shape, generator=gen) * sub.in_features ** -0.5)
            for norm in (getattr(m, "kv_a_layernorm", None), getattr(m, "q_a_layernorm", None)):
                if norm is not None:
                    norm.weight.copy_(torch.rand(norm.weight.shape, generator=gen) + 0.5)
        if fp16_exact:
            for p in model.parameters():
                if p.is_floating_point():
                    p.copy_(p.half().float())
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    with open(os.path.join(out_dir, "qmla_tokenizer.json"), "w") as f:
        _json.dump({"type": "bytes", "bos_id": bos_id, "note": "UTF-8 bytes, BOS first"}, f)
    return model


def synthetic_text(seed, n_words=4000):
    """Deterministic pseudo-English text (a few hundred distinct words)."""
    import random as _random
    r = _random.Random(seed)
    syl = ["ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "an", "el", "or", "un", "st", "th"]
    words = ["".join(r.choice(syl) for _ in range(r.randint(1, 4))) for _ in range(400)]
    out = []
    for i in range(n_words):
        w = r.choice(words)
        out.append(w.capitalize() if i % 13 == 0 else w)
        if i % 13 == 12:
            out[-1] += "."
    return " ".join(out) + "\n"


# --------------------------------------------------------------------------- #
# HDF5
# --------------------------------------------------------------------------- #
NP_DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64}


def to_store(x, store):
    """numpy array in the storage dtype; float16 overflow promotes to float32."""
    a = x.detach().cpu().double().numpy() if hasattr(x, "detach") else np.asarray(x, np.float64)
    if store == "float16" and a.size and np.nanmax(np.abs(a[np.isfinite(a)]), initial=0.0) > 65504.0:
        sys.stderr.write("qmla_capture: note: values beyond float16 range, stored as float32\n")
        return a.astype(np.float32)
    return a.astype(NP_DTYPES[store])


def write_dataset(group, name, arr, gzip):
    kw = {}
    if gzip and arr.size > 64:
        kw = dict(compression="gzip", compression_opts=int(gzip), shuffle=True)
    group.create_dataset(name, data=arr, **kw)


def write_root(f, model, source, check_tolerance, cfg):
    """Root attributes and /config.  cfg: n_layers, n_heads, d_model, kv_lora_rank,
    qk_nope_head_dim, qk_rope_head_dim, v_head_dim, softmax_scale, rope_pairing,
    rms_norm_eps."""
    f.attrs["format"] = FORMAT
    f.attrs["format_version"] = np.int64(FORMAT_VERSION)
    f.attrs["model"] = model
    f.attrs["source"] = source
    f.attrs["check_tolerance"] = np.float64(check_tolerance)
    g = f.require_group("config")
    for k in ("n_layers", "n_heads", "d_model", "kv_lora_rank", "qk_nope_head_dim",
              "qk_rope_head_dim", "v_head_dim"):
        g.attrs[k] = np.int64(cfg[k])
    g.attrs["softmax_scale"] = np.float64(cfg["softmax_scale"])
    g.attrs["rope_pairing"] = cfg["rope_pairing"]
    g.attrs["rms_norm_eps"] = np.float64(cfg["rms_norm_eps"])


# --------------------------------------------------------------------------- #
# validation of a file (numpy + h5py only)
# --------------------------------------------------------------------------- #
REQUIRED_CELL = ("c_kv", "k_rope", "q_nope", "q_rope", "attn_out", "positions")


def validate_file(path, recompute=True, tol=None, device=None):
    """Check a qmla-capture v1 file against the contract.

    Returns a dict: problems (list of messages naming file/group/dataset and
    expected versus found), errors {(layer, cell): relative attention error},
    rope_errors {(layer, cell): relative error of post vs rotate(pre)}, config,
    tolerance (the one applied), layers, cells."""
    import h5py
    rep = {"problems": [], "errors": {}, "rope_errors": {}, "config": {}, "layers": [], "cells": set()}
    P = rep["problems"]

    def s(v):
        return v.decode() if isinstance(v, bytes) else str(v)

    with h5py.File(path, "r") as f:
        if s(f.attrs.get("format", "")) != FORMAT:
            P.append("%s: attribute format is %r, expected %r" % (path, f.attrs.get("format"), FORMAT))
        if int(f.attrs.get("format_version", -1)) != FORMAT_VERSION:
            P.append("%s: format_version %r, expected 1" % (path, f.attrs.get("format_version")))
        for a in ("model", "source"):
            if a not in f.attrs:
                P.append("%s: missing root attribute %s" % (path, a))
        if tol is None:
            tol = float(f.attrs.get("check_tolerance", 1e-3))
        rep["tolerance"] = tol
        if "config" not in f:
            P.append("%s: missing group /config" % path)
            return rep
        c = f["config"].attrs
        keys_i = ("n_layers", "n_heads", "d_model", "kv_lora_rank", "qk_nope_head_dim",
                  "qk_rope_head_dim", "v_head_dim")
        for k in keys_i + ("softmax_scale", "rope_pairing", "rms_norm_eps"):
            if k not in c:
                P.append("%s: /config: missing attribute %s" % (path, k))
        if P:
            return rep
        cfg = {k: int(c[k]) for k in keys_i}
        cfg["softmax_scale"] = float(c["softmax_scale"])
        cfg["rope_pairing"] = s(c["rope_pairing"])
        cfg["rms_norm_eps"] = float(c["rms_norm_eps"])
        rep["config"] = cfg
        H, D, d_c = cfg["n_heads"], cfg["d_model"], cfg["kv_lora_rank"]
        d_n, d_r, d_v = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
        if d_r % 2:
            P.append("%s: /config: qk_rope_head_dim %d is odd" % (path, d_r))
        if cfg["rope_pairing"] not in ("interleaved", "half"):
            P.append("%s: /config: unknown rope_pairing %r" % (path, cfg["rope_pairing"]))
            return rep
        if "layers" not in f:
            P.append("%s: missing group /layers" % path)
            return rep
        for lname in sorted(f["layers"], key=lambda x: int(x) if x.isdigit() else -1):
            lg = f["layers"][lname]
            gp = "/layers/%s" % lname
            if not lname.isdigit() or int(lg.attrs.get("layer", -1)) != int(lname):
                P.append("%s: %s: attribute layer %r does not repeat the group name"
                         % (path, gp, lg.attrs.get("layer")))
            rep["layers"].append(lname)
            wshape = {"w_uk": (H, d_n, d_c), "w_uv": (H, d_v, d_c), "w_o": (D, H * d_v),
                      "kv_norm_weight": (d_c,)}
            w = {}
            for k, shp in wshape.items():
                if k not in lg:
                    P.append("%s: %s: missing dataset %s" % (path, gp, k))
                    continue
                if tuple(lg[k].shape) != shp:
                    P.append("%s: %s/%s: shape %s, expected %s" % (path, gp, k, tuple(lg[k].shape), shp))
                    continue
                w[k] = lg[k][()]
                if not np.all(np.isfinite(w[k])):
                    P.append("%s: %s/%s: non-finite values" % (path, gp, k))
            if "cells" not in lg:
                P.append("%s: %s: missing group cells" % (path, gp))
                continue
            for cname in lg["cells"]:
                cg = lg["cells"][cname]
                cp = "%s/cells/%s" % (gp, cname)
                rep["cells"].add(cname)
                for a in ("dataset", "seed"):
                    if a not in cg.attrs:
                        P.append("%s: %s: missing attribute %s" % (path, cp, a))
                missing = [k for k in REQUIRED_CELL if k not in cg]
                if missing:
                    P.append("%s: %s: missing datasets %s" % (path, cp, ", ".join(missing)))
                    continue
                N, T = cg["c_kv"].shape[0], cg["c_kv"].shape[1]
                shapes = {"c_kv": (N, T, d_c), "k_rope": (N, T, d_r), "q_nope": (N, H, T, d_n),
                          "q_rope": (N, H, T, d_r), "attn_out": (N, T, D), "positions": (N, T),
                          "k_rope_pre": (N, T, d_r), "q_rope_pre": (N, H, T, d_r),
                          "rope_cos": (N, T, d_r // 2), "rope_sin": (N, T, d_r // 2),
                          "hidden_in": (N, T, D)}
                cell = {}
                bad = False
                for k, shp in shapes.items():
                    if k not in cg:
                        continue
                    if tuple(cg[k].shape) != shp:
                        P.append("%s: %s/%s: shape %s, expected %s" % (path, cp, k, tuple(cg[k].shape), shp))
                        bad = True
                        continue
                    cell[k] = cg[k][()]
                    if k != "positions" and not np.all(np.isfinite(cell[k])):
                        P.append("%s: %s/%s: non-finite values" % (path, cp, k))
                        bad = True
                if not np.issubdtype(cg["positions"].dtype, np.integer):
                    P.append("%s: %s/positions: dtype %s, expected an integer type"
                             % (path, cp, cg["positions"].dtype))
                pre = [k for k in ("k_rope_pre", "q_rope_pre", "rope_cos", "rope_sin") if k in cg]
                if pre and len(pre) != 4:
                    P.append("%s: %s: pre-RoPE tensors incomplete (%s)" % (path, cp, ", ".join(pre)))
                elif len(pre) == 4 and not bad:
                    cs, sn = cell["rope_cos"].astype(np.float64), cell["rope_sin"].astype(np.float64)
                    ek = _rel(rotate(cell["k_rope_pre"].astype(np.float64), cs, sn, cfg["rope_pairing"]),
                              cell["k_rope"].astype(np.float64))
                    eq = _rel(rotate(cell["q_rope_pre"].astype(np.float64), cs[:, None], sn[:, None],
                                     cfg["rope_pairing"]), cell["q_rope"].astype(np.float64))
                    rep["rope_errors"][(lname, cname)] = max(ek, eq)
                if recompute and not bad and len(w) == 4:
                    e = attention_rel_error(cell, w, cfg["softmax_scale"], device=device)
                    rep["errors"][(lname, cname)] = e
                    if not e <= tol:
                        P.append("%s: %s: recomputed attention misses attn_out by %.3g (tolerance %.3g)"
                                 % (path, cp, e, tol))
    rep["cells"] = sorted(rep["cells"])
    return rep


def _main(argv):
    if len(argv) >= 2 and argv[0] == "validate":
        bad = 0
        for p in argv[1:]:
            r = validate_file(p)
            for m in r["problems"]:
                print(m)
            worst = max(r["errors"].values()) if r["errors"] else float("nan")
            rw = max(r["rope_errors"].values()) if r["rope_errors"] else float("nan")
            print("%s: %d layers, cells %s, max attention error %.3g (tolerance %.3g), "
                  "max rope error %.3g: %s" % (p, len(r["layers"]), ",".join(r["cells"]), worst,
                                               r["tolerance"], rw, "FAIL" if r["problems"] else "ok"))
            bad += bool(r["problems"])
        return 1 if bad else 0
    print("usage: qmla_capture_lib.py validate FILE...")
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
