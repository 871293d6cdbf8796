#!/usr/bin/env bash
# tests/engine/test_families.sh — the native engine on random-weight
# checkpoints of every family it reads (issue 20), written by
# tests/engine/make_family_ckpt.py with an independent NumPy forward:
#   - `qmla ppl --config fp32` on each checkpoint (DeepseekV2 greedy and
#     group-limited MoE, DeepseekV3 noaux_tc MoE with correction bias and
#     shared experts, Glm4MoeLite with its MoE layers by mlp_layer_types,
#     LongcatFlash with its two MLA sublayers per block, shortcut MoE and
#     zero-computation experts (some tokens do route to them),
#     dense and MoE layers; YaRN with mscale = mscale_all_dim
#     and with mscale != mscale_all_dim, default, linear and llama3 RoPE;
#     interleaved and half pairing; F32, BF16 and FP8 E4M3 with 32 x 32 block
#     scales) equals the NumPy NLL within 1e-5 relative; the peak resident
#     set is printed, and on a 100 MB BF16 MoE checkpoint stays within its
#     bytes + 48 MiB above the fixed footprint (experts kept mapped in their dtype, converted per use);
#   - `qmla capture` on the YaRN checkpoints (FP8 half pairing, BF16
#     interleaved) records softmax_scale = tau x mscale(factor,
#     mscale_all_dim)^2 and rope_cos / rope_sin = the YaRN cos / sin times the
#     attention factor, and `qmla check` recomputes the capture consistently;
#   - `qmla capture` on LongcatFlash: 2 x num_layers capture layers (block b's
#     sublayer s is layer 2b + s), each layer's c_kv (times
#     mla_scale_kv_lora), k_rope, q_nope and q_rope (times mla_scale_q_lora)
#     equal to the NumPy forward's on the windows it reports;
#   - `qmla fuse` on a MoE checkpoint writes its router (F32) and copies
#     its expert tensors through (BF16),
#     and the fused model scores what the original scores (fp32, QuaRot
#     transforms); on LongcatFlash the transforms of all four capture layers
#     land in both sublayers of each block (every kv_a_proj_with_mqa
#     changed), its router, correction bias and experts under their names;
#     an FP8 checkpoint is refused by name;
#   - faulty checkpoints are refused (exit 2) naming the tensor or key,
#     expected and found: a missing expert tensor, a router of the wrong
#     width, a block-scale tensor of the wrong shape, a NaN block scale, a
#     scoring_func the architecture does not compute, an unknown
#     topk_method, an unknown rope_type, mlp_layer_types of the wrong length,
#     F8_E4M3 tensors without a quantization_config; LongcatFlash: a router
#     without the zero experts' rows, a missing e_score_correction_bias,
#     num_hidden_layers other than 2 x num_layers, router_bias true.
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT, QMLA_PYTHON.
source "$(dirname "$0")/../support/cli_lib.sh"
need_python
GEN=$ROOT/tests/engine/make_family_ckpt.py
F=$work/fam
"$PY" "$GEN" write "$F" >"$work/gen.out" 2>&1 && ok || { bad "make_family_ckpt.py write"; cat "$work/gen.out" >&2; }
FAMS=$("$PY" -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))))' "$F/ref.json")
[ "$(echo $FAMS | wc -w)" -ge 10 ] && ok || bad "families written: $FAMS"
"$PY" - "$F/ref.json" <<'PY' && ok || bad "LongcatFlash: zero experts chosen"
import sys, json
r = json.load(open(sys.argv[1]))
for k in ("longcat-flash-bf16", "longcat-flash-yarn-f32"):
    z, n = r[k]["zero_choices"], r[k]["choices"]
    print(f"{k}: {z} of {n} expert choices are zero experts")
    assert 0 < z < n, (z, n)
PY

ppl() { # DIR OUT [CONFIG]
  "$QMLA" ppl "$1" --text "$F/text.txt" --config "${3:-fp32}" --context 32 --tokens 96 \
    --threads 1 -o "$2"
}
for fam in $FAMS; do
  expect 0 "ppl $fam" -- ppl "$F/$fam" "$work/$fam.h5"
  contains "peak resident set [0-9.]* MiB" "ppl $fam: peak RSS printed"
  sed -n 's/.*peak resident set \([0-9.]*\) MiB.*/\1/p' "$work/out" >>"$work/rss-small"
  "$PY" - "$work/$fam.h5" "$F/ref.json" "$fam" <<'PY' && ok || bad "ppl $fam: NLL vs NumPy"
import sys, json, h5py
got = float(h5py.File(sys.argv[1])["ppl"].attrs["nll_nats_per_token"])
ref = json.load(open(sys.argv[2]))[sys.argv[3]]["nll"]
rel = abs(got - ref) / abs(ref)
print(f"{sys.argv[3]}: qmla {got:.9f} numpy {ref:.9f} rel {rel:.2e}")
assert rel <= 1e-5, rel
PY
done
expect 0 "ppl bf16 cache on the FP8 MoE checkpoint" -- ppl "$F/v3-noaux-yarn-half-fp8" "$work/b.h5" bf16,C4R4
# three windows on two threads (each with its own conversion workspace) and
# a sink/local policy (the clean prefix computed once): the same bits
"$QMLA" ppl "$F/v3-noaux-yarn-half-fp8" --text "$F/text.txt" --config bf16,C4R4 --policy none,sink2/local8 \
  --context 32 --tokens 96 --threads 1 -o "$work/t1.h5" >"$work/out" 2>&1 &&
"$QMLA" ppl "$F/v3-noaux-yarn-half-fp8" --text "$F/text.txt" --config bf16,C4R4 --policy none,sink2/local8 \
  --context 32 --tokens 96 --threads 2 -o "$work/t2.h5" >>"$work/out" 2>&1 && ok || bad "ppl threads 1 / 2"
"$PY" - "$work/t1.h5" "$work/t2.h5" <<'PY' && ok || bad "MoE ppl: threads 1 and 2 differ"
import sys, h5py
a, b = (h5py.File(p)["ppl"] for p in sys.argv[1:])
rows = [k for k in a if k.startswith("row_")]
assert len(rows) == 3, rows
for k in rows:
    assert a[k].attrs["nll_nats_per_token"] == b[k].attrs["nll_nats_per_token"], k
PY

# ---- resident memory: a 100 MB BF16 MoE checkpoint (experts 95 % of it)
# runs within its own bytes plus 48 MiB above the program's fixed footprint (the experts stay mapped in BF16 and
# are converted per use; float32 copies alone would be 200 MB)
# (not under a sanitizer, QMLA_TEST_SMALL=1: ASan's shadow memory and
# quarantine are in the resident set, not the engine's own bytes; the
# release build measures it)
if [ "${QMLA_TEST_SMALL:-0}" != 1 ]; then
  "$PY" "$GEN" write-big "$work/big" >"$work/big.json" && ok || bad "make_family_ckpt.py write-big"
  expect 0 "ppl big MoE" -- ppl "$work/big/v2-big-bf16" "$work/big.h5"
  rss=$(sed -n 's/.*peak resident set \([0-9.]*\) MiB.*/\1/p' "$work/out")
  # the program's fixed footprint (its libraries: a CUDA build maps the
  # CUDA runtime and cuBLAS) is the smallest peak of the tiny checkpoints
  # above (each well under 1 MiB of weights); the big one may add its bytes
  # plus 48 MiB to it
  base=$(sort -n "$work/rss-small" | head -1)
  "$PY" -c 'import json,sys; b=json.load(open(sys.argv[1]))["bytes"]/2**20; r, z = float(sys.argv[2]), float(sys.argv[3]); print(f"checkpoint {b:.1f} MiB, peak RSS {r:.1f} MiB, fixed footprint {z:.1f} MiB"); assert r - z <= b + 48, (r, z, b)' \
    "$work/big.json" "${rss:-1e9}" "${base:-0}" && ok || bad "peak RSS ${rss} MiB beyond the fixed footprint ${base} MiB + the checkpoint's bytes + 48 MiB"
  rm -rf "$work/big"
fi

# ---- qmla capture on the YaRN checkpoints, qmla check
for fam in v3-noaux-yarn-half-fp8 v3-yarn-interleaved-bf16 v2-greedy-yarn-f32 glm4-moe-lite-yarn-bf16 \
    longcat-flash-yarn-f32; do
  expect 0 "capture $fam" -- "$QMLA" capture "$F/$fam" --corpus t="$F/text.txt" --seqs 2 \
    --tokens 32 --threads 1 -o "$work/$fam.cap.h5"
  "$PY" - "$work/$fam.cap.h5" "$F/ref.json" "$fam" <<'PY' && ok || bad "capture $fam: scale, cos/sin"
import sys, json, h5py, numpy as np
f = h5py.File(sys.argv[1]); r = json.load(open(sys.argv[2]))[sys.argv[3]]
tau = float(f["config"].attrs["softmax_scale"])
assert abs(tau - r["tau"]) <= 1e-6 * r["tau"], (tau, r["tau"])
cos, sin = np.array(r["cos"]), np.array(r["sin"])
n = 0
for l in f["layers"]:
    for c in f["layers"][l]["cells"].values():
        for k, want in (("rope_cos", cos), ("rope_sin", sin)):
            got = c[k][...]
            err = np.abs(got - want[None, :got.shape[1]]).max()
            assert err <= 1e-6, (l, k, err)
            n += 1
assert n >= 6, n
print(sys.argv[3], "softmax_scale", tau, "attention factor", r["attention_factor"])
PY
  expect 0 "check $fam capture" -- "$QMLA" check "$work/$fam.cap.h5"
done

# ---- qmla capture on LongcatFlash: layer 2b + s against the NumPy forward
LC=longcat-flash-bf16
expect 0 "capture $LC" -- "$QMLA" capture "$F/$LC" --corpus t="$F/text.txt" --seqs 2 --tokens 32 \
  --threads 1 -o "$work/$LC.cap.h5"
offs=$(sed -n 's/.*windows at text offsets//p' "$work/out")
"$PY" "$GEN" check-capture "$F" $LC "$work/$LC.cap.h5" $offs && ok || bad "capture $LC vs NumPy (offsets: $offs)"
expect 0 "check $LC capture" -- "$QMLA" check "$work/$LC.cap.h5"

# ---- qmla fuse on LongcatFlash: both sublayers of every block
expect 0 "learn quarot ($LC)" -- "$QMLA" learn "$work/$LC.cap.h5" -o "$work/qrl.h5" --method quarot --train-cells t-s0
expect 0 "fuse $LC" -- "$QMLA" fuse "$F/$LC" --transforms "$work/qrl.h5" -o "$work/fusedl"
expect 0 "ppl fused $LC" -- ppl "$work/fusedl" "$work/fusedl.h5"
"$PY" - "$work/fusedl.h5" "$work/$LC.h5" "$work/fusedl/model.safetensors" "$F/$LC/model.safetensors" <<'PY' && ok || bad "fused $LC: NLL and tensors"
import sys, json, struct, h5py, numpy as np
a, b = (float(h5py.File(p)["ppl"].attrs["nll_nats_per_token"]) for p in sys.argv[1:3])
assert abs(a - b) <= 1e-5 * abs(b), (a, b)
def read(p):
    with open(p, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        hdr = json.loads(fh.read(n)); data = fh.read()
    hdr.pop("__metadata__", None)
    return hdr, data
def val(hdr, data, k):
    t = hdr[k]; b0, b1 = t["data_offsets"]; raw = data[b0:b1]
    if t["dtype"] == "F32":
        return np.frombuffer(raw, "<f4").reshape(t["shape"])
    return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32).reshape(t["shape"])
fh, fd = read(sys.argv[3]); oh, od = read(sys.argv[4])
assert set(fh) == set(oh), set(fh) ^ set(oh)
for blk in (0, 1):
    for s in (0, 1):
        k = f"model.layers.{blk}.self_attn.{s}.kv_a_proj_with_mqa.weight"
        d = np.abs(val(fh, fd, k) - val(oh, od, k)).max()
        assert d > 1e-2, (k, d)  # the rotation folded in
    assert fh[f"model.layers.{blk}.mlp.experts.5.down_proj.weight"]["dtype"] == "BF16"
    assert fh[f"model.layers.{blk}.mlp.router.classifier.weight"]["shape"] == [9, 64]
    assert fh[f"model.layers.{blk}.mlp.router.e_score_correction_bias"]["shape"] == [9]
print("fused longcat: NLL", a, "original", b)
PY

# ---- qmla fuse on a MoE checkpoint
M=$F/v2-group-default-bf16
expect 0 "capture for fuse" -- "$QMLA" capture "$M" --corpus t="$F/text.txt" --seqs 2 --tokens 32 \
  --threads 1 -o "$work/fcap.h5"
expect 0 "learn quarot" -- "$QMLA" learn "$work/fcap.h5" -o "$work/qr.h5" --method quarot --train-cells t-s0
expect 0 "fuse MoE" -- "$QMLA" fuse "$M" --transforms "$work/qr.h5" -o "$work/fused"
expect 0 "ppl fused MoE" -- ppl "$work/fused" "$work/fused.h5"
"$PY" - "$work/fused.h5" "$work/v2-group-default-bf16.h5" "$work/fused/model.safetensors" <<'PY' && ok || bad "fused MoE: NLL and tensors"
import sys, json, struct, h5py
a, b = (float(h5py.File(p)["ppl"].attrs["nll_nats_per_token"]) for p in sys.argv[1:3])
assert abs(a - b) <= 1e-5 * abs(b), (a, b)
with open(sys.argv[3], "rb") as fh:
    hdr = json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))
for n in ("model.layers.1.mlp.gate.weight", "model.layers.2.mlp.experts.7.down_proj.weight",
          "model.layers.1.mlp.shared_experts.up_proj.weight", "model.layers.0.mlp.gate_proj.weight"):
    assert n in hdr, n
# experts copied through in their stored BF16, the rest in the output F32
assert hdr["model.layers.2.mlp.experts.7.down_proj.weight"]["dtype"] == "BF16"
assert hdr["model.layers.1.mlp.shared_experts.up_proj.weight"]["dtype"] == "BF16"
assert hdr["model.layers.1.mlp.gate.weight"]["dtype"] == "F32"
assert hdr["model.layers.0.mlp.gate_proj.weight"]["dtype"] == "F32"
PY
expect 0 "learn quarot (FP8)" -- "$QMLA" learn "$work/v3-noaux-yarn-half-fp8.cap.h5" -o "$work/qr8.h5" \
  --method quarot --train-cells t-s0
expect 2 "fuse FP8 refused" -- "$QMLA" fuse "$F/v3-noaux-yarn-half-fp8" --transforms "$work/qr8.h5" -o "$work/fused8"
containsF "quantization_config fp8" "fuse FP8: named"

# ---- faulty checkpoints
fault() { # SRC NAME KIND
  "$PY" "$GEN" fault "$F/$1" "$work/$2" "$3" && ok || bad "fault $3"
}
fault v2-greedy-yarn-f32 f1 missing_expert
expect 2 "missing expert tensor" -- ppl "$work/f1" "$work/x.h5"
containsF "tensor model.layers.1.mlp.experts.3.up_proj.weight: missing: expected a tensor of shape [24, 64], found none" "missing expert named"
fault v3-default-f32 f2 router_width
expect 2 "router of the wrong width" -- ppl "$work/f2" "$work/x.h5"
containsF "tensor model.layers.2.mlp.gate.weight: expected shape [8, 64], found 2 dims [6, 64]" "router width named"
fault v3-noaux-yarn-half-fp8 f3 scale_shape
expect 2 "block scales of the wrong shape" -- ppl "$work/f3" "$work/x.h5"
containsF "block scales of model.layers.1.self_attn.kv_a_proj_with_mqa.weight [48, 64] (blocks 32 x 32)" "scale shape: weight named"
containsF "tensor model.layers.1.self_attn.kv_a_proj_with_mqa.weight_scale_inv: expected shape [2, 2], found 2 dims [3, 2]" "scale shape: expected and found"
fault v3-noaux-yarn-half-fp8 f4 nan_scale
expect 2 "NaN block scale" -- ppl "$work/f4" "$work/x.h5"
containsF "tensor model.layers.2.mlp.experts.1.down_proj.weight_scale_inv: element 0 is nan: expected finite values" "NaN scale named"
fault v3-default-f32 f5 gate
expect 2 "V3 softmax gate refused" -- ppl "$work/f5" "$work/x.h5"
containsF 'key "scoring_func": expected "sigmoid" (the gate DeepseekV3ForCausalLM computes), found "softmax"' "gate named"
fault v2-greedy-yarn-f32 f6 gate
expect 2 "V2 sigmoid gate refused" -- ppl "$work/f6" "$work/x.h5"
containsF 'expected "softmax" (the gate DeepseekV2ForCausalLM computes), found "sigmoid"' "V2 gate named"
fault v2-greedy-yarn-f32 f7 topk_method
expect 2 "unknown topk_method" -- ppl "$work/f7" "$work/x.h5"
containsF 'key "topk_method": expected "greedy" or "group_limited_greedy" (DeepseekV2), found "top_p"' "topk_method named"
fault v3-default-f32 f8 rope_type
expect 2 "unknown rope_type" -- ppl "$work/f8" "$work/x.h5"
containsF 'rope_type "longrope" is not supported: expected "default", "linear", "dynamic", "yarn" or "llama3"' "rope_type named"
fault v3-noaux-yarn-half-fp8 f10 no_qconfig
expect 2 "FP8 tensors without quantization_config" -- ppl "$work/f10" "$work/x.h5"
containsF 'dtype F8_E4M3: expected a quantization_config with quant_method "fp8" in config.json' "FP8 without quantization_config named"
fault glm4-moe-lite-yarn-bf16 f9 layer_types
expect 2 "mlp_layer_types of the wrong length" -- ppl "$work/f9" "$work/x.h5"
containsF 'key "mlp_layer_types": expected a list of num_hidden_layers = 3 strings "dense" or "sparse", found a list of 2' "mlp_layer_types named"
fault longcat-flash-bf16 f11 lc_router_width
expect 2 "LongcatFlash router without the zero experts" -- ppl "$work/f11" "$work/x.h5"
containsF "LongcatFlash block 1: the router over n_routed_experts 6 + zero_expert_num 3 experts" "longcat router: experts named"
containsF "tensor model.layers.1.mlp.router.classifier.weight: expected shape [9, 64], found 2 dims [6, 64]" "longcat router width named"
fault longcat-flash-bf16 f12 lc_missing_bias
expect 2 "LongcatFlash correction bias missing" -- ppl "$work/f12" "$work/x.h5"
containsF "tensor model.layers.0.mlp.router.e_score_correction_bias: missing: expected a tensor of shape [9], found none" "longcat bias named"
fault longcat-flash-bf16 f13 lc_layers
expect 2 "LongcatFlash num_hidden_layers" -- ppl "$work/f13" "$work/x.h5"
containsF 'key "num_hidden_layers": expected 2 x num_layers = 4 (LongcatFlash'"'"'s MLA sublayers), found 2' "longcat layers named"
fault longcat-flash-bf16 f14 lc_router_bias
expect 2 "LongcatFlash router_bias" -- ppl "$work/f14" "$work/x.h5"
containsF 'key "router_bias": expected false' "longcat router_bias named"
finish test_families
