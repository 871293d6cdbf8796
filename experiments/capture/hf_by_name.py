"""hf_by_name: build a transformers causal LM from its config.json and fill its
state dict by tensor name from the directory's model.safetensors.

For checkpoints whose tensor layout the installed transformers' loader does not
accept although every value is present: LongcatFlash under transformers 5.17
sizes its fused expert parameter [E + Z, ...] for routed plus zero experts,
while the checkpoint holds per-expert tensors of the E routed experts only
(docs/models.md, LongcatFlash). Per-expert gate/up/down tensors are stacked
into a fused `experts.gate_up_proj` / `experts.down_proj` parameter where the
model has one; rows past the routed experts (zero experts, never read) are 0.

build_filled(path, dtype) -> (model, missing, unused): the model in eval mode,
the model tensors the file lacks and the file tensors left unused. A caller
that needs every value accounted for refuses when either list is non-empty.
Used by experiments/capture/qmla_capture.py (LongcatFlash fallback) and
tests/engine/hf_family_nll.py."""
import re


def build_filled(path, dtype, attn_implementation="eager"):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.from_pretrained(path)
    try:
        m = AutoModelForCausalLM.from_config(cfg, dtype=dtype,
                                             attn_implementation=attn_implementation)
    except TypeError:
        m = AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype,
                                             attn_implementation=attn_implementation)
    m = m.to(dtype).eval()
    sd = load_file(f"{path}/model.safetensors")
    used, missing = set(), []
    with torch.no_grad():
        for name, t in m.state_dict().items():
            if name in sd:
                t.copy_(sd[name].to(t.dtype).reshape(t.shape))
                used.add(name)
                continue
            mm = re.match(r"(.*\.experts)\.(gate_up_proj|down_proj)$", name)
            if not mm:
                missing.append(name)
                continue
            base, kind = mm.groups()
            t.zero_()  # rows past the routed experts (zero experts) are never read
            for e in range(t.shape[0]):
                parts = ([f"{base}.{e}.gate_proj.weight", f"{base}.{e}.up_proj.weight"]
                         if kind == "gate_up_proj" else [f"{base}.{e}.down_proj.weight"])
                if not all(p in sd for p in parts):
                    continue
                w = torch.cat([sd[p].float() for p in parts], 0)
                if tuple(t[e].shape) == tuple(w.shape):
                    t[e].copy_(w)
                elif tuple(t[e].shape) == tuple(w.T.shape):
                    t[e].copy_(w.T)
                else:
                    raise RuntimeError(f"{name}[{e}]: shape {tuple(t[e].shape)}, the file's "
                                       f"{parts} give {tuple(w.shape)}")
                used.update(parts)
    return m, missing, [k for k in sd if k not in used]
