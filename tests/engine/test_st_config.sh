#!/usr/bin/env bash
# test_st_config.sh — the checkpoint reader refuses what transformers would
# read differently (issue 25 items 10 and 11), with faults injected into a
# one-file copy of models/tiny-mla (tests/support/st_fault.py):
#   safetensors layout (lib/engine/safetensors.c): one tensor's data_offsets
#   inside another's bytes (it loaded and scored with exit 0), 64 bytes that
#   belong to no tensor, trailing bytes after the last tensor, a 2-D tensor
#   with a column less than the model's (shape and bytes consistent): exit 2 naming
#   the file, the tensor(s), expected and found; the clean copy still loads;
#   config.json (lib/engine/config.c): tie_word_embeddings true makes the
#   embedding the output layer (it had no effect: the file's lm_head was
#   used): the score equals that of a copy whose lm_head is the embedding,
#   with lm_head.weight present or absent, and differs from the untied one;
#   a model_type inconsistent with architectures, num_key_value_heads other
#   than num_attention_heads, mlp_bias true, a quantization_config other than
#   fp8 (awq), a
#   non-boolean tie_word_embeddings and a V3 config without
#   first_k_dense_replace (transformers' default 3: MoE blocks) are refused
#   by name (exit 2).
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT, QMLA_PYTHON.
source "$(dirname "$0")/../support/cli_lib.sh"
need_python
M=$ROOT/models/tiny-mla
TXT=$ROOT/data/heldout/prose.txt.gz
F=$ROOT/tests/support/st_fault.py
ppl() { "$QMLA" ppl "$1" --text "$TXT" --config bf16 --tokens 512 --threads 1 -o "$work/p.h5"; }
bpb() { awk '$2 == "bf16" {print $5}' "$work/out"; }
fault() { # NAME ARGS...: a faulty copy in $work/NAME
  local n=$1; shift
  "$PY" "$F" "$M" "$work/$n" "$@" && ok || bad "st_fault $n $*"
}

fault clean
expect 0 "clean copy" -- ppl "$work/clean"
base=$(bpb)

# ---- safetensors layout
fault over --overlap model.norm.weight:lm_head.weight
expect 2 "overlapping data_offsets" -- ppl "$work/over"
containsF "over/model.safetensors: tensors model.norm.weight [0, 1280] and lm_head.weight [0, 409600]: data_offsets overlap by 1280 bytes" "overlap: file, both tensors, bytes named"
containsF "expected each tensor's bytes apart" "overlap: expected"
fault gap --gap lm_head.weight
expect 2 "a gap between tensors" -- ppl "$work/gap"
containsF "bytes [409600, 409664] of the byte buffer belong to no tensor (between lm_head.weight and model.embed_tokens.weight)" "gap: tensors named"
containsF "found a gap of 64 bytes" "gap: found"
fault trail --trailing 8
expect 2 "trailing bytes" -- ppl "$work/trail"
containsF "found 8 trailing bytes" "trailing: found"
containsF "trail/model.safetensors" "trailing: file named"
fault cols --cols model.layers.0.self_attn.q_proj.weight=319
expect 2 "a 2-D tensor with one column less" -- ppl "$work/cols"
containsF "cols/model.safetensors: tensor model.layers.0.self_attn.q_proj.weight: expected shape [1024, 320], found 2 dims [1024, 319]" "columns: tensor, expected and found shape named"

# ---- config.json
fault tied_lm --config tie_word_embeddings=true
expect 0 "tie_word_embeddings true" -- ppl "$work/tied_lm"
tied=$(bpb)
fault copy --tie
expect 0 "lm_head = embedding, untied" -- ppl "$work/copy"
copy=$(bpb)
fault tied_nolm --config tie_word_embeddings=true --drop lm_head.weight
expect 0 "tie_word_embeddings true, no lm_head.weight" -- ppl "$work/tied_nolm"
nolm=$(bpb)
[ -n "$tied" ] && [ "$tied" = "$copy" ] && [ "$nolm" = "$copy" ] && ok ||
  bad "tied: bits/byte $tied (lm_head in the file) and $nolm (none), expected $copy (lm_head = embedding)"
[ "$tied" != "$base" ] && ok || bad "tied: bits/byte $tied equals the untied $base (the tie had no effect)"
for f in 'model_type="deepseek_v3"|key "model_type": expected "deepseek_v2" (architectures names DeepseekV2ForCausalLM), found "deepseek_v3"' \
         'model_type="llama"|found "llama"' \
         'architectures=["DeepseekV3ForCausalLM"]|expected "deepseek_v3" (architectures names DeepseekV3ForCausalLM), found "deepseek_v2"' \
         'num_key_value_heads=2|key "num_key_value_heads": expected num_attention_heads = 8' \
         'mlp_bias=true|key "mlp_bias": true' \
         'quantization_config={"quant_method": "awq"}|quantization_config" (quant_method awq)' \
         'tie_word_embeddings=1|key "tie_word_embeddings": expected true or false' \
         'architectures=["DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"]|expected one architecture, found 2'; do
  fault cfg --config "${f%%|*}"
  expect 2 "config ${f%%|*}" -- ppl "$work/cfg"
  containsF "${f#*|}" "config ${f%%|*}: key named"
  containsF "cfg/config.json" "config ${f%%|*}: file named"
  rm -rf "$work/cfg"
done
fault v3 --config 'architectures=["DeepseekV3ForCausalLM"]' --config 'model_type="deepseek_v3"' \
  --config first_k_dense_replace=null --config n_routed_experts=null
expect 2 "V3 without first_k_dense_replace" -- ppl "$work/v3"
containsF "MoE blocks (n_routed_experts 256 from layer first_k_dense_replace = 3 of 6)" "V3 defaults: MoE named"
fault v3d --config 'architectures=["DeepseekV3ForCausalLM"]' --config 'model_type="deepseek_v3"' \
  --config rope_interleave=true
expect 0 "V3 with first_k_dense_replace = layers (dense)" -- ppl "$work/v3d"
[ "$(bpb)" = "$base" ] && ok || bad "V3 dense interleaved: bits/byte $(bpb), expected $base"
finish test_st_config
