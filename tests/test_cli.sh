#!/usr/bin/env bash
# tests/test_cli.sh — end-to-end tests of the `qmla` program: exit codes,
# messages, `qmla check` on the transformers oracle and on a tampered
# capture, `qmla sweep` against the independent NumPy implementation
# (bench/numpy_sweep.py, float64, 1e-4 relative), results readable with h5py,
# and resume after a real SIGINT. Needs /usr/bin/python3 with numpy + h5py.
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT, QMLA_PYTHON.
set -u
QMLA=${QMLA_BIN:?}
ROOT=${QMLA_SOURCE_ROOT:?}
PY=${QMLA_PYTHON:-/usr/bin/python3}
work=$(mktemp -d /tmp/qmla-test-cli-XXXXXX)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0

ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
# expect CODE DESCRIPTION -- command...   (stdout+stderr in $work/out)
expect() {
  local want=$1 what=$2; shift 3
  "$@" >"$work/out" 2>&1
  local got=$?
  if [ "$got" = "$want" ]; then ok; else bad "$what: exit $got, expected $want"; sed 's/^/    /' "$work/out" | tail -5 >&2; fi
}
contains() { if grep -q -- "$1" "$work/out"; then ok; else bad "$2: output lacks \"$1\""; sed 's/^/    /' "$work/out" | tail -5 >&2; fi; }

"$PY" -c 'import numpy, h5py' 2>/dev/null || { echo "FAIL: $PY lacks numpy/h5py (apt-get install python3-numpy python3-h5py)"; echo "0 passed, 1 failed"; exit 1; }

# --- usage and help --------------------------------------------------------
expect 0 "qmla --help" -- "$QMLA" --help
for c in check sweep synth; do
  expect 0 "qmla $c --help" -- "$QMLA" $c --help
  contains "example:" "qmla $c --help"
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

# --- sweep vs the independent NumPy implementation ---------------------------------
expect 0 "sweep tiny" -- "$QMLA" sweep "$work/tiny.h5" -o "$work/r.h5" -v --verify --threads 2
contains "model mean over layers" "sweep summary"
contains "route identity" "sweep --verify"
expect 0 "numpy reference agrees to 1e-4" -- "$PY" "$ROOT/bench/numpy_sweep.py" "$work/tiny.h5" --compare "$work/r.h5" --rtol 1e-4
contains "0 above rtol" "numpy compare"
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
assert np.allclose(r["nmse_cache"][...], 0.01, rtol=1e-6)
assert np.allclose(r["response"][...], r["nmse_out"][...] / r["nmse_cache"][...], rtol=1e-12)
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
assert np.isclose(s.attrs["model_response_content"], means["content"], rtol=1e-12)
assert np.isclose(s.attrs["model_response_rope"], means["rope"], rtol=1e-12)
assert np.isclose(s.attrs["model_ratio"], means["rope"] / means["content"], rtol=1e-12)
print("schema ok")
EOF

# --- resume after a real SIGINT -----------------------------------------------------
"$QMLA" synth -o "$work/mid.h5" --shape deepseek-v2-lite --tokens 96 --seqs 8 --layers 2 --cells 2 >/dev/null || bad "synth mid"
"$QMLA" sweep "$work/mid.h5" -o "$work/full.h5" >/dev/null 2>&1 || bad "uninterrupted sweep"
"$QMLA" sweep "$work/mid.h5" -o "$work/int.h5" >"$work/int.out" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  [ -f "$work/int.h5.journal" ] && [ "$(grep -c '^R ' "$work/int.h5.journal")" -ge 4 ] && break
  sleep 0.05
done
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
if [ $rc = 130 ]; then
  ok
  [ ! -e "$work/int.h5" ] && ok || bad "interrupted sweep left a results file"
  [ -s "$work/int.h5.journal" ] && ok || bad "interrupted sweep left no journal"
  grep -q "rerun the same command to resume" "$work/int.out" && ok || bad "interrupt message"
  expect 0 "resume after SIGINT" -- "$QMLA" sweep "$work/mid.h5" -o "$work/int.h5"
  contains "resumed" "resume summary"
  [ ! -e "$work/int.h5.journal" ] && ok || bad "journal left after resume"
elif [ $rc = 0 ]; then
  echo "note: sweep finished before SIGINT arrived; resume path not exercised here" >&2
  ok
else
  bad "interrupted sweep exit $rc (expected 130)"
fi
expect 0 "resumed results equal the uninterrupted run" -- "$PY" - "$work/full.h5" "$work/int.h5" <<'EOF'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["responses"] for p in sys.argv[1:3])
for k in a:
    x, y = a[k][...], b[k][...]
    assert x.shape == y.shape and np.array_equal(x, y), k
EOF

echo "test_cli: $pass passed, $fail failed"
[ $fail = 0 ]
