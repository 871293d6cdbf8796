#!/usr/bin/env bash
# tests/cli/test_trust3.sh — issue 25 "Trust, third round", classes 3, 4, 6,
# 7 and part of 13. Each block names the fault it injects and what the code
# before the fix did ("before:"); every assertion failed then. Captures are
# built with `qmla synth` and edited with h5py (/usr/bin/python3).
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT, QMLA_PYTHON.
set -u
. "$(dirname "$0")/../support/cli_lib.sh"
cd "$work" || exit 1
h5edit() { "$PY" - "$@" || bad "h5py edit failed: $*"; }
need_python
M=$ROOT/models/tiny-mla
TCAP=$ROOT/data/tiny-mla-default.h5
TXT=$ROOT/data/heldout/code.txt.gz

# === 3. learn resumes only on the capture it was learned on ==================
# Two captures of one shape and cell names (other seeds). before: a checkpoint
# of capture A was resumed on capture B (A's layer 0 kept, layer 1 learned on
# B, `complete` 1 and B's name written); a complete file was rewritten.
"$QMLA" synth -o "$work/a.h5" --seed 5 --tokens 16 --seqs 2 --layers 2 >/dev/null || bad "synth a"
"$QMLA" synth -o "$work/b.h5" --seed 6 --tokens 16 --seqs 2 --layers 2 >/dev/null || bad "synth b"
L=(learn --train-cells synth-s0 --steps 3 --seed 1 --threads 1)
expect 0 "learn on a" -- "$QMLA" "${L[0]}" "$work/a.h5" -o "$work/qa.h5" "${L[@]:1}"
sha_a=$(sha256sum <"$work/a.h5" | cut -d' ' -f1)
sha_b=$(sha256sum <"$work/b.h5" | cut -d' ' -f1)
expect 0 "learn records the capture's SHA-256" -- "$PY" -c '
import sys, h5py; f = h5py.File(sys.argv[1], "r")
assert f.attrs["capture_sha256"] == sys.argv[2], f.attrs.get("capture_sha256")' "$work/qa.h5" "$sha_a"
# an interrupted run: the checkpoint after layer 0 (complete = 0)
cp "$work/qa.h5" "$work/qi.h5"
h5edit "$work/qi.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    f.attrs["complete"] = 0
    del f["layers/1"]
EOF
sum_i=$(sha256sum <"$work/qi.h5")
expect 2 "resume on another capture refused" -- "$QMLA" "${L[0]}" "$work/b.h5" -o "$work/qi.h5" "${L[@]:1}"
containsF "$sha_a" "resume refusal names the file's capture hash"
containsF "$sha_b" "resume refusal names this capture's hash"
containsF "force starts over" "resume refusal names --force"
[ "$(sha256sum <"$work/qi.h5")" = "$sum_i" ] && ok || bad "refused resume changed the checkpoint"
expect 0 "resume on the same capture" -- "$QMLA" "${L[0]}" "$work/a.h5" -o "$work/qi.h5" "${L[@]:1}"
containsF "layer 0: kept from" "resume keeps layer 0"
expect 0 "--force starts over on another capture" -- "$QMLA" "${L[0]}" "$work/b.h5" -o "$work/qi.h5" "${L[@]:1}" --force
# a complete file of the same key: kept as it is (provenance not rewritten)
sum_a=$(sha256sum <"$work/qa.h5")
expect 0 "rerun on a complete file" -- "$QMLA" "${L[0]}" "$work/a.h5" -o "$work/qa.h5" "${L[@]:1}"
containsF "kept as it is" "complete file: said kept"
[ "$(sha256sum <"$work/qa.h5")" = "$sum_a" ] && ok || bad "complete file of the same key was rewritten"
expect 2 "complete file, another capture: refused" -- "$QMLA" "${L[0]}" "$work/b.h5" -o "$work/qa.h5" "${L[@]:1}"
containsF "$sha_b" "complete file refusal names the hash"

# === 4. a non-finite clean pass is an error in every command =================
# Fault: w_o[0, 0] = 3e38 (finite, so the reader accepts it); Y overflows.
# before: sweep exit 0 with nmse_out = 0, response 0, not degenerate (and
# verified = 1 with --verify); intervene printed -nan, predict nan, eval NaN
# (exit 0); learn stopped with a quantizer message naming no file or layer.
"$QMLA" synth -o "$work/base.h5" --seed 3 --tokens 16 --seqs 2 >/dev/null || bad "synth base"
cp "$work/base.h5" "$work/wo.h5"
h5edit "$work/wo.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    d = f["layers/0/w_o"]; x = d[...]; x[0, 0] = 3e38; d[...] = x
EOF
expect 1 "check: the overflow is a finding" -- "$QMLA" check "$work/wo.h5"
containsF "NON-FINITE" "check reports it"
"$QMLA" learn "$work/base.h5" -o "$work/rtn.h5" --method rtn --train-cells synth-s0 >/dev/null || bad "learn rtn"
for c in "sweep" "sweep --verify" jvp predict intervene \
         "eval --transforms $work/rtn.h5 --config C4R4" "learn --train-cells synth-s0 --steps 2"; do
  rm -f "$work/wo-out.h5"
  expect 2 "$c: non-finite clean pass refused" -- "$QMLA" $c "$work/wo.h5" -o "$work/wo-out.h5"
  containsF "clean attention pass: expected finite values, found inf" "$c: says what is not finite"
  contains "wo.h5: .*layer[s/]* *0.*synth-s0.* sequence 0: " "$c: names file, layer, cell and sequence"
  [ ! -e "$work/wo-out.h5" ] && ok || bad "$c: wrote a results file"
done

# === 6. scales are validated in float32, where they are used =================
# Fault: content/scale[5] = 1e-300 of layer 3 (finite in float64, 0 in
# float32). before: eval wrote NaN (exit 0), fuse wrote ±inf weights (exit 0),
# ppl refused naming another layer.
"$QMLA" learn "$TCAP" -o "$work/trtn.h5" --method rtn --train-cells prose-s0 >/dev/null || bad "learn tiny rtn"
for v in 1e-300 1e-39; do  # (1e39, inf in float32, was already refused)
  cp "$work/trtn.h5" "$work/small.h5"
  h5edit "$work/small.h5" "$v" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    d = f["layers/3/content/scale"]; x = d[...]; x[5] = float(sys.argv[2]); d[...] = x
EOF
  expect 2 "eval: scale $v refused" -- "$QMLA" eval "$TCAP" --transforms "$work/small.h5" --config C4R4 -o "$work/ev6.h5"
  containsF "small.h5: /layers/3/content: scale[5]: expected a value finite and nonzero in float32" "eval scale $v: file, layer, dataset, index, expected"
  containsF "found $v" "eval scale $v: found"
done
expect 2 "fuse: scale 1e-39 refused" -- "$QMLA" fuse "$M" --transforms "$work/small.h5" -o "$work/F6"
containsF "/layers/3/content: scale[5]" "fuse: names layer 3"
[ ! -e "$work/F6" ] && ok || bad "fuse wrote a folder"
expect 2 "ppl: scale 1e-39 refused" -- "$QMLA" ppl "$M" --text "$TXT" --config C4R4 --tokens 64 --transforms "$work/small.h5" -o "$work/p6.h5"
containsF "/layers/3/content: scale[5]" "ppl: names layer 3"
# the RoPE scale too
cp "$work/trtn.h5" "$work/rs.h5"
h5edit "$work/rs.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    d = f["layers/2/rope/scale"]; x = d[...]; x[1] = 1e-300; d[...] = x
EOF
expect 2 "eval: rope scale 1e-300 refused" -- "$QMLA" eval "$TCAP" --transforms "$work/rs.h5" --config C4R4 -o "$work/ev6.h5"
containsF "rs.h5: /layers/2/rope: scale[1]: expected a value finite and nonzero in float32" "rope scale message"

# === 7. an interrupted learn checkpoint is not used as if whole ==============
# Fault: complete = 0 with layers 2-5 absent. before: ppl --transforms and
# fuse used it (exit 0); eval refused it.
cp "$work/trtn.h5" "$work/part.h5"
h5edit "$work/part.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    f.attrs["complete"] = 0
    for k in ("2", "3", "4", "5"): del f["layers"][k]
EOF
expect 2 "eval: checkpoint refused" -- "$QMLA" eval "$TCAP" --transforms "$work/part.h5" --config C4R4 -o "$work/ev7.h5"
containsF "part.h5 has no transform for layer 2" "eval message"
expect 2 "fuse: checkpoint refused" -- "$QMLA" fuse "$M" --transforms "$work/part.h5" -o "$work/F7"
containsF "part.h5 has no transform for layers 2, 3, 4, 5 (attribute complete = 0" "fuse names the missing layers"
[ ! -e "$work/F7" ] && ok || bad "fuse wrote a folder"
expect 2 "ppl: checkpoint refused" -- "$QMLA" ppl "$M" --text "$TXT" --config C4R4 --tokens 64 --transforms "$work/part.h5" -o "$work/p7.h5"
containsF "part.h5 has no transform for layers 2, 3, 4, 5 (attribute complete = 0" "ppl names the missing layers"
[ ! -e "$work/p7.h5" ] && ok || bad "ppl wrote a results file"

# === 13. messages ============================================================
# Fault: attn_out of one sequence zeroed: the relative error is infinite.
# before: "worst finite inf".
cp "$work/base.h5" "$work/z.h5"
h5edit "$work/z.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    d = f["layers/0/cells/synth-s0/attn_out"]; x = d[...]; x[0] = 0; d[...] = x
EOF
expect 1 "check: zero attn_out is a finding" -- "$QMLA" check "$work/z.h5"
lacks "worst finite inf" "check never calls inf the worst finite"
containsF "non-finite errors: 1" "check counts the non-finite errors"
contains "worst finite [0-9]" "check still names the worst finite error"
# Fault: content/rotation [128, 128] where scale and gamma are [256].
# before: reported as content/scale.
cp "$work/trtn.h5" "$work/rot.h5"
h5edit "$work/rot.h5" <<'EOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    g = f["layers/1/content"]; n = g["rotation"].shape[0]; del g["rotation"]; g["rotation"] = np.eye(n // 2)
EOF
expect 2 "eval: wrong-shape rotation refused" -- "$QMLA" eval "$TCAP" --transforms "$work/rot.h5" --config C4R4 -o "$work/ev13.h5"
containsF "rot.h5: /layers/1/content: rotation: expected shape [256, 256]" "rotation named with expected shape"
containsF "found [128, 128]" "rotation: found shape"
# Fault: a shard that holds no items. before: "every layer is degenerate".
expect 0 "sweep: empty shard" -- "$QMLA" sweep "$work/base.h5" --shard 15/16 -o "$work/part15.h5"
containsF "the shard holds none of the plan's items" "empty shard says so"
lacks "every layer is degenerate" "empty shard is not called degenerate"
# A directory as --transforms, and eval's results file marked as results.
mkdir "$work/tdir"
expect 2 "eval: a directory as --transforms" -- "$QMLA" eval "$work/base.h5" --transforms "$work/tdir" --config C4R4 -o "$work/ev14.h5"
containsF "tdir: cannot open the transforms file: expected a regular file, found a directory" "directory named"
lacks "HDF5-DIAG" "no HDF5 internals"
expect 0 "eval writes" -- "$QMLA" eval "$work/base.h5" --transforms "$work/rtn.h5" --config C4R4 -o "$work/ev15.h5"
expect 0 "eval's file has the format attributes" -- "$PY" -c '
import sys, h5py; f = h5py.File(sys.argv[1], "r")
assert f.attrs["format"] == "qmla-results" and f.attrs["format_version"] == 1, dict(f.attrs)
assert f["eval"].attrs["tool"] == "qmla eval" and f["eval"].attrs["git_commit"]' "$work/ev15.h5"
finish test_trust3
