#!/usr/bin/env bash
# tests/cli/test_cli.sh — end-to-end tests of the `qmla` program: exit codes,
# messages, `qmla check` on the transformers oracle and on tampered captures
# (attn_out scaled to 1.0001 x and 0.9999 x a chosen tolerance; k_rope_pre
# and q_rope_pre altered), synthetic captures against an independent float64
# NumPy reference (tests/ref/synth_reference.py), `qmla sweep` against the
# independent NumPy implementation (bench/numpy_sweep.py, float64, 1e-4
# relative, every route and nmse_qdq) also on data full of quantizer ties and
# on cells of unequal sequence counts and lengths, results readable with
# h5py (model means recomputed over sequences, then cells, then layers), a
# resume with other parameters refused, and resume after a real SIGINT
# (exit 130 and a partial journal required). Needs /usr/bin/python3 with
# numpy + h5py.
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT, QMLA_PYTHON.
set -u
. "$(dirname "$0")/../support/cli_lib.sh"
need_python

# --- usage and help --------------------------------------------------------
expect 0 "qmla --help" -- "$QMLA" --help
# every command `qmla --help` lists (a two-space indent, then the name)
cmds=$(sed -n '/^commands:/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p' "$work/out")
[ "$(echo $cmds | wc -w)" -ge 17 ] && ok || bad "qmla --help lists $(echo $cmds | wc -w) commands: $cmds"
version=$("$QMLA" --version)
for c in $cmds; do
  expect 0 "qmla $c --help" -- "$QMLA" $c --help
  contains "[Ee]xamples\?:" "qmla $c --help"
  expect 0 "qmla $c --version" -- "$QMLA" $c --version
  [ "$(cat "$work/out")" = "$version" ] && ok || bad "qmla $c --version printed: $(head -c 200 "$work/out")"
done
expect 2 "unknown command" -- "$QMLA" frobnicate
expect 2 "no arguments" -- "$QMLA"
expect 2 "check without file" -- "$QMLA" check
expect 2 "synth without -o" -- "$QMLA" synth
expect 2 "synth unknown shape" -- "$QMLA" synth -o "$work/x.h5" --shape gpt2
contains "unknown shape" "synth unknown shape"

# --- synth + check -----------------------------------------------------------
expect 0 "synth tiny" -- "$QMLA" synth -o "$work/tiny.h5" --seed 3 --tokens 48 --seqs 3
expect 2 "synth refuses to overwrite" -- "$QMLA" synth -o "$work/tiny.h5"
contains "exists" "synth refuses to overwrite"
expect 0 "check synthetic" -- "$QMLA" check "$work/tiny.h5"
contains "consistent" "check synthetic"
expect 0 "synth f16 half-pairing shape" -- "$QMLA" synth -o "$work/glm.h5" --shape glm-4.7-flash --tokens 24 --seqs 1 --layers 1 --cells 1 --f16 --gzip 4
expect 0 "check f16 synthetic (tolerance from the file)" -- "$QMLA" check "$work/glm.h5"
# the synthetic tensors against an independent float64 computation (not the
# library's forward, which `qmla check` shares with `qmla synth`)
expect 0 "synthetic f32 capture vs the NumPy reference" -- "$PY" "$ROOT/tests/ref/synth_reference.py" "$work/tiny.h5" --theta 1e4 --tol 2e-5 --rope-tol 1e-6
expect 0 "synthetic f16 half-pairing capture vs the NumPy reference" -- "$PY" "$ROOT/tests/ref/synth_reference.py" "$work/glm.h5" --theta 1e6 --tol 2e-3 --rope-tol 1e-3

# --- the transformers oracle -------------------------------------------------
expect 0 "check transformers oracle at 1e-5" -- "$QMLA" check "$ROOT/tests/data/oracle-deepseek-v2.h5" --tol 1e-5
contains "0 above tolerance" "oracle"

# --- an inconsistent capture: exit 1, named ------------------------------------
cp "$work/tiny.h5" "$work/tampered.h5"
"$PY" - "$work/tampered.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    d = f["layers/1/cells/synth-s1/attn_out"]
    x = d[...]; x[2] *= 1.01; d[...] = x
EOF
expect 1 "check tampered capture" -- "$QMLA" check "$work/tampered.h5"
contains "ABOVE TOL" "tampered capture"
contains "INCONSISTENT" "tampered capture"
grep "ABOVE TOL" "$work/out" | grep -q "synth-s1" && ok || bad "tampered row names the cell"

# --- the relative error against the tolerance, at the tolerance -----------------
# attn_out of one sequence scaled by 1 + d with d/(1 + d) = r, so that the
# relative error check computes, |Y - (1+d)Y|/|(1+d)Y|, is r (plus the
# capture's own ~1e-7): r = 1.0001 tol must be a finding, r = 0.9999 tol not.
tamper_rel() { # OUT R
  cp "$work/tiny.h5" "$1"
  "$PY" - "$1" "$2" <<'EOF'
import sys, h5py
r = float(sys.argv[2]); d = r / (1 - r)
with h5py.File(sys.argv[1], "r+") as f:
    ds = f["layers/0/cells/synth-s0/attn_out"]
    x = ds[...]; x[1] *= 1 + d; ds[...] = x
EOF
}
tamper_rel "$work/near-above.h5" 0.050005
expect 1 "relative error 1.0001 x tol 0.05 is a finding" -- "$QMLA" check "$work/near-above.h5" --tol 0.05
awk '$2 == "synth-s0" && $3 == 1 && /ABOVE TOL/ { f = 1 } END { exit !f }' "$work/out" && ok || bad "the finding names sequence 1 of synth-s0"
contains "5.000e-02" "the error printed is 0.05"
tamper_rel "$work/near-below.h5" 0.049995
expect 0 "relative error 0.9999 x tol 0.05 is within tolerance" -- "$QMLA" check "$work/near-below.h5" --tol 0.05
contains "0 above tolerance" "just under the tolerance"
# k_rope_pre and q_rope_pre: attn_out stays consistent, only the rotation
# check can see it
for t in k_rope_pre q_rope_pre; do
  cp "$work/tiny.h5" "$work/pre-$t.h5"
  "$PY" - "$work/pre-$t.h5" "$t" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    ds = f["layers/1/cells/synth-s0/" + sys.argv[2]]
    x = ds[...]; x[0] *= 1.001; ds[...] = x
EOF
  expect 1 "check: $t altered by 0.1 %" -- "$QMLA" check "$work/pre-$t.h5"
  contains "ABOVE TOL" "$t altered"
done

# --- malformed input: exit 2 with the file named ---------------------------------
echo "not hdf5" > "$work/junk.h5"
expect 2 "check non-HDF5" -- "$QMLA" check "$work/junk.h5"
contains "junk.h5" "check non-HDF5"
expect 2 "sweep non-HDF5" -- "$QMLA" sweep "$work/junk.h5" -o "$work/r.h5"
expect 2 "check missing file" -- "$QMLA" check "$work/nope.h5"

# --- sweep: usage errors -----------------------------------------------------------
expect 2 "sweep --bits 5" -- "$QMLA" sweep "$work/tiny.h5" -o "$work/r.h5" --bits 5
expect 2 "sweep --group 48 (does not divide d_c 64)" -- "$QMLA" sweep "$work/tiny.h5" -o "$work/r.h5" --group 48
contains "48" "group message"
expect 2 "sweep layer not in capture" -- "$QMLA" sweep "$work/tiny.h5" -o "$work/r.h5" --layers 0,5
contains "layer 5" "layer message"
expect 2 "sweep bad --layers" -- "$QMLA" sweep "$work/tiny.h5" -o "$work/r.h5" --layers 3-1
expect 2 "sweep unknown cell" -- "$QMLA" sweep "$work/tiny.h5" -o "$work/r.h5" --cells nope
[ ! -e "$work/r.h5" ] && ok || bad "a failed sweep left a results file"

# --- --engine (include/qmla/engine.h): cpu accepted, any other refused before any work --
# A build with -Dcuda has the engine cuda (and lists it); where no GPU is
# usable, --engine cuda is refused too, naming why. On a machine with a GPU
# the cuda engine runs (tests/sweep/test_engine_cuda.c checks it), so there
# only unknown names are checked for refusal.
"$QMLA" sweep "$work/tiny.h5" -o "$work/eng.h5" --engine nope >"$work/eng.out" 2>&1
if grep -qF 'which has the engines: cpu,cuda' "$work/eng.out"; then have_cuda_engine=1; else have_cuda_engine=0; fi
for c in sweep jvp predict intervene learn; do
  expect 2 "$c --engine nope" -- "$QMLA" $c "$work/tiny.h5" -o "$work/eng.h5" --engine nope
  containsF 'engine "nope": not in this build, which has the engines: cpu' "$c --engine nope names the engines"
  if [ $have_cuda_engine = 0 ]; then
    expect 2 "$c --engine cuda" -- "$QMLA" $c "$work/tiny.h5" -o "$work/eng.h5" --engine cuda
    containsF 'engine "cuda": not in this build, which has the engines: cpu' "$c --engine cuda names the engines"
  else
    # a CUDA build: without a usable GPU --engine cuda is refused (exit 2),
    # naming why; with one the engine runs
    "$QMLA" $c "$work/tiny.h5" -o "$work/eng.h5" --engine cuda >"$work/out" 2>&1
    rc=$?
    if [ $rc = 0 ]; then
      ok
    else
      [ $rc = 2 ] && ok || bad "$c --engine cuda without a GPU: exit $rc, expected 2"
      containsF 'engine "cuda": no usable device on this machine' "$c --engine cuda without a GPU names why"
    fi
    rm -f "$work/eng.h5" "$work/eng.h5.journal"
  fi
done
expect 2 "eval --engine nope" -- "$QMLA" eval "$work/tiny.h5" --transforms "$work/nope.h5" --config C4R4 -o "$work/eng.h5" --engine nope
containsF 'which has the engines: cpu' "eval --engine nope names the engines"
[ ! -e "$work/eng.h5" ] && [ ! -e "$work/eng.h5.journal" ] && ok || bad "a refused --engine left a file"
expect 0 "sweep --engine auto" -- "$QMLA" sweep "$work/tiny.h5" -o "$work/eng.h5" --engine auto
rm -f "$work/eng.h5" "$work/eng.h5.journal"

# --- sweep vs the independent NumPy implementation ---------------------------------
expect 0 "sweep tiny" -- "$QMLA" sweep "$work/tiny.h5" -o "$work/r.h5" -v --verify --threads 2
contains "model mean over layers" "sweep summary"
contains "route identity" "sweep --verify"
expect 0 "numpy reference agrees to 1e-4" -- "$PY" "$ROOT/bench/numpy_sweep.py" "$work/tiny.h5" --compare "$work/r.h5" --rtol 1e-4
contains "0 above rtol" "numpy compare"
expect 0 "sweep --engine cpu" -- "$QMLA" sweep "$work/tiny.h5" -o "$work/r_cpu.h5" --engine cpu --verify --threads 2
"$QMLA" export "$work/r.h5" | grep -v '^#' > "$work/rows_default.tsv"
"$QMLA" export "$work/r_cpu.h5" | grep -v '^#' > "$work/rows_cpu.tsv"
cmp -s "$work/rows_default.tsv" "$work/rows_cpu.tsv" && [ -s "$work/rows_cpu.tsv" ] && ok || bad "sweep --engine cpu: rows differ from the default engine's"

# --- quantizer ties: round half to even, not half up ------------------------------
# every c_kv / k_rope group holds 0 and 15/8 (4 bits: scale 1/8, lo 0, exact
# in any metadata) and otherwise (k + 0.5)/8: nearly every element is a tie,
# so a half-up quantizer moves the error, the responses and the routes
cp "$work/tiny.h5" "$work/ties.h5"
"$PY" - "$work/ties.h5" <<'EOF'
import sys, h5py, numpy as np
rng = np.random.default_rng(7)
with h5py.File(sys.argv[1], "r+") as f:
    for l in f["layers"].values():
        for c in l["cells"].values():
            for name in ("c_kv", "k_rope"):
                x = c[name][...]
                g = min(64, x.shape[-1])
                v = rng.integers(0, 15, size=x.shape).astype(np.float32) + 0.5
                v = v.reshape(-1, g)
                v[:, 0], v[:, 1] = 0.0, 15.0
                c[name][...] = v.reshape(x.shape) / 8
EOF
expect 0 "sweep a capture full of ties" -- "$QMLA" sweep "$work/ties.h5" -o "$work/rties.h5" --bits 4
expect 0 "numpy reference agrees on ties (round half to even)" -- "$PY" "$ROOT/bench/numpy_sweep.py" "$work/ties.h5" --bits 4 --compare "$work/rties.h5" --rtol 1e-4
contains "0 above rtol" "numpy compare on ties"
expect 0 "sweep INT2 f32-meta nu=1e-3 on one layer" -- "$QMLA" sweep "$work/glm.h5" -o "$work/r2.h5" --bits 2 --meta f32 --nmse 1e-3
expect 0 "numpy reference agrees (INT2, f32 meta, half pairing, f16 storage)" -- "$PY" "$ROOT/bench/numpy_sweep.py" "$work/glm.h5" --bits 2 --meta f32 --nmse 1e-3 --compare "$work/r2.h5" --rtol 1e-4

# --- thread count does not change a single bit; progress lines without a tty
expect 0 "sweep, 1 thread" -- "$QMLA" sweep "$work/tiny.h5" -o "$work/t1.h5" --threads 1
contains "items (100%)" "progress line on a non-terminal stderr"
expect 0 "sweep, 3 threads" -- "$QMLA" sweep "$work/tiny.h5" -o "$work/t3.h5" --threads 3
expect 0 "results identical for 1 and 3 threads" -- "$PY" - "$work/t1.h5" "$work/t3.h5" <<'EOF2'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
for k in a["responses"]:
    assert np.array_equal(a["responses"][k][...], b["responses"][k][...]), k
for k in a["summary"]:
    assert np.array_equal(a["summary"][k][...], b["summary"][k][...]), k
EOF2

expect 0 "sweep with compact q8 metadata" -- "$QMLA" sweep "$work/tiny.h5" -o "$work/rq8.h5" --meta q8 --bits 3
expect 0 "numpy reference agrees (q8 metadata, INT3)" -- "$PY" "$ROOT/bench/numpy_sweep.py" "$work/tiny.h5" --meta q8 --bits 3 --compare "$work/rq8.h5" --rtol 1e-4
expect 0 "sweep --meta q8 on the trained model's capture" -- "$QMLA" sweep "$ROOT/data/tiny-mla-default.h5" -o "$work/dq8.h5" --meta q8 --layers 1,4
expect 0 "numpy reference agrees on real tensors (q8)" -- "$PY" "$ROOT/bench/numpy_sweep.py" "$ROOT/data/tiny-mla-default.h5" --layers 1,4 --meta q8 --compare "$work/dq8.h5" --rtol 1e-4
expect 2 "sweep --meta q4 is refused" -- "$QMLA" sweep "$work/tiny.h5" -o "$work/bad.h5" --meta q4

# --- results readable with h5py alone, as documented ------------------------------
expect 0 "results schema via h5py" -- "$PY" - "$work/r.h5" "$work/tiny.h5" <<'EOF'
import sys, hashlib, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
a = f.attrs
assert a["format"] == "qmla-results" and a["format_version"] == 1, dict(a)
assert a["capture_sha256"] == hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest()
for k in ("capture_file", "tool_version", "bits", "group", "meta", "nmse_target", "layers", "cells"):
    assert k in a, k
r = f["responses"]
cols = ["layer", "cell", "seq", "path", "nmse_cache", "nmse_out", "response",
        "nmse_out_matching", "nmse_out_aggregation", "nmse_out_interaction", "degenerate"]
n = {len(r[c]) for c in cols}
assert len(n) == 1 and n.pop() == 2 * 2 * 2 * 3, "one length, layers x cells x seqs x paths"
path = r["path"].asstr()[...]
assert set(path) == {"content", "rope"}
rope = path == "rope"
assert np.all(r["nmse_out_interaction"][...][rope] == 0) and np.all(r["nmse_out_aggregation"][...][rope] == 0)
assert np.allclose(r["nmse_cache"][...], 0.01, rtol=1e-6, atol=0)
assert np.allclose(r["response"][...], r["nmse_out"][...] / r["nmse_cache"][...], rtol=1e-12, atol=0)
s = f["summary"]
# model means recomputed from the per-item table (cells -> layers -> model)
lay, cell, resp = r["layer"][...], r["cell"].asstr()[...], r["response"][...]
means = {}
for p in ("content", "rope"):
    per_layer = []
    for l in sorted(set(lay)):
        cm = [resp[(lay == l) & (cell == c) & (path == p)].mean() for c in sorted(set(cell[lay == l]))]
        per_layer.append(np.mean(cm))
    means[p] = np.mean(per_layer)
assert np.isclose(s.attrs["model_response_content"], means["content"], rtol=1e-12, atol=0)
assert np.isclose(s.attrs["model_response_rope"], means["rope"], rtol=1e-12, atol=0)
assert np.isclose(s.attrs["model_ratio"], means["rope"] / means["content"], rtol=1e-12, atol=0)
print("schema ok")
EOF

# --- cells of unequal sequence counts and lengths ------------------------------------
# synth-s1 keeps 1 of its 3 sequences and its first 24 of 48 tokens (causal
# attention: attn_out of those tokens is unchanged); synth-s0 keeps all 3, so
# the mean over sequences then cells differs from the pooled mean, and the
# longest cell comes first (the workspace must fit it)
cp "$work/tiny.h5" "$work/uneq.h5"
"$PY" - "$work/uneq.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    for l in f["layers"].values():
        c = l["cells/synth-s1"]
        for name in list(c):
            d = c[name]
            x, attrs = d[...], dict(d.attrs)
            x = x[:1, :, :24] if x.ndim == 4 else x[:1, :24]
            del c[name]
            nd = c.create_dataset(name, data=x)
            for k, v in attrs.items():
                nd.attrs[k] = v
EOF
expect 0 "check the unequal capture" -- "$QMLA" check "$work/uneq.h5"
expect 0 "sweep cells of unequal counts and lengths" -- "$QMLA" sweep "$work/uneq.h5" -o "$work/runeq.h5" -v
expect 0 "numpy reference agrees (unequal cells)" -- "$PY" "$ROOT/bench/numpy_sweep.py" "$work/uneq.h5" --compare "$work/runeq.h5" --rtol 1e-4
expect 0 "means over sequences, then cells, then layers (unequal counts)" -- "$PY" - "$work/runeq.h5" <<'EOF'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
r, s = f["responses"], f["summary"]
lay, cell, path, resp = r["layer"][...], r["cell"].asstr()[...], r["path"].asstr()[...], r["response"][...]
assert sorted(zip(f["cells/name"].asstr()[...], f["cells/n_sequences"][...], f["cells/n_tokens"][...])) == [("synth-s0", 3, 48), ("synth-s1", 1, 24)]
model, pooled_differs = {}, False
for p in ("content", "rope"):
    per_layer = []
    for l in sorted(set(lay)):
        sel = (lay == l) & (path == p)
        cm = [resp[sel & (cell == c)].mean() for c in ("synth-s0", "synth-s1")]
        per_layer.append(np.mean(cm))
        pooled_differs |= abs(resp[sel].mean() - np.mean(cm)) > 1e-6 * np.mean(cm)
    key = "response_" + p
    assert np.allclose(s[key][...], per_layer, rtol=1e-12, atol=0), (p, s[key][...], per_layer)
    model[p] = np.mean(per_layer)
assert pooled_differs, "the data cannot tell the pooled mean from the mean of cell means"
assert np.isclose(s.attrs["model_response_content"], model["content"], rtol=1e-12, atol=0)
assert np.isclose(s.attrs["model_response_rope"], model["rope"], rtol=1e-12, atol=0)
assert np.isclose(s.attrs["model_ratio"], model["rope"] / model["content"], rtol=1e-12, atol=0)
EOF

# --- a resume with other parameters is refused ------------------------------------------
cp "$work/r.h5" "$work/rnu.h5"
for opt in "--nmse 1e-3" "--group 16" "--meta f32" "--bits 3"; do
  expect 2 "existing results of the defaults, rerun with $opt" -- "$QMLA" sweep "$work/tiny.h5" -o "$work/rnu.h5" $opt
  contains "force" "refusal with $opt suggests --force"
done
expect 0 "... and with the same parameters nothing is recomputed" -- "$QMLA" sweep "$work/tiny.h5" -o "$work/rnu.h5"
contains "resumed" "rerun with the same parameters resumes"

# --- resume after a real SIGINT -----------------------------------------------------
# 32 items of a 16-head shape: SIGINT goes once the journal holds 4 rows (2
# items), long before the sweep can end; the test requires the interruption
# (exit 130, a partial journal, no results) before it tests the resume.
"$QMLA" synth -o "$work/mid.h5" --shape deepseek-v2-lite --tokens 96 --seqs 8 --layers 2 --cells 2 >/dev/null || bad "synth mid"
"$QMLA" sweep "$work/mid.h5" -o "$work/full.h5" >/dev/null 2>&1 || bad "uninterrupted sweep"
"$QMLA" sweep "$work/mid.h5" -o "$work/int.h5" >"$work/int.out" 2>&1 &
pid=$!
rows=0
for _ in $(seq 1 1200); do
  [ -f "$work/int.h5.journal" ] && rows=$(grep -c '^R ' "$work/int.h5.journal")
  [ "$rows" -ge 4 ] && break
  sleep 0.05
done
[ "$rows" -ge 4 ] && ok || bad "the journal never reached 4 rows before SIGINT ($rows)"
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
[ $rc = 130 ] && ok || bad "interrupted sweep: exit $rc, expected 130 (the signal must arrive mid-sweep)"
[ ! -e "$work/int.h5" ] && ok || bad "interrupted sweep left a results file"
jrows=$(grep -c '^R ' "$work/int.h5.journal" 2>/dev/null); jrows=${jrows:-0}
[ "$jrows" -ge 4 ] && [ "$jrows" -lt 64 ] && ok || bad "interrupted sweep: journal holds $jrows of 64 rows (expected a partial journal)"
grep -q "rerun the same command to resume" "$work/int.out" && ok || bad "interrupt message"
expect 0 "resume after SIGINT" -- "$QMLA" sweep "$work/mid.h5" -o "$work/int.h5"
contains "resumed" "resume summary"
[ ! -e "$work/int.h5.journal" ] && ok || bad "journal left after resume"
expect 0 "resumed results equal the uninterrupted run" -- "$PY" - "$work/full.h5" "$work/int.h5" <<'EOF'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["responses"] for p in sys.argv[1:3])
for k in a:
    x, y = a[k][...], b[k][...]
    assert x.shape == y.shape and np.array_equal(x, y), k
EOF

finish test_cli
