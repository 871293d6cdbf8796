#!/usr/bin/env bash
# tests/io/test_results_faults.sh — the sweep's results under injected faults
# and untrusted inputs:
#  1. ENOSPC / EIO injected (strace -e inject) into each write(), pwrite64()
#     and fsync()
#     of a sweep: every run either succeeds with a correct file or exits 2
#     naming the cause, with no results file, no temporary left, and a
#     journal from which a clean rerun reproduces the uninterrupted results;
#  2. replayed rows are checked: a journal record or a results row holding
#     NaN, or naming a layer, cell or sequence the capture lacks, is refused;
#     a journal record with one digit changed fails its checksum and is
#     recomputed;
#  3. one cell set per results file: extension adds layers only, another
#     cell set is refused without --force; the root attributes describe the
#     rows the file holds;
#  4. degenerate layers print "degenerate" and are left out of both model
#     means;
#  5. --verify is recorded per row: resumed unverified rows say so.
set -u
. "$(dirname "$0")/../support/cli_lib.sh"
need_python
command -v strace >/dev/null || { echo "SKIP: strace not installed"; exit 77; }
# LeakSanitizer cannot run under ptrace: off for the traced runs (sanitizer build)
traced() { ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" strace -f -o /dev/null "$@"; }

"$QMLA" synth -o "$work/tiny.h5" --seed 3 --tokens 48 --seqs 3 >/dev/null || { bad "synth"; finish test_results_faults; exit; }
cap="$work/tiny.h5"
"$QMLA" sweep "$cap" -o "$work/clean.h5" --threads 1 >/dev/null 2>&1 || bad "clean sweep"

# --- 1. faults injected into every write and fsync ------------------------------
inject_runs() { # SYSCALL ERRNO MIN_HITS
  local sc=$1 en=$2 min=$3 n=1 hits=0
  while :; do
    local d="$work/inj-$sc-$n"
    mkdir -p "$d"
    traced -e trace="$sc" -e inject="$sc":error="$en":when=$n \
      "$QMLA" sweep "$cap" -o "$d/r.h5" --threads 1 >"$d/out" 2>&1
    local rc=$?
    if [ $rc = 0 ]; then
      # the count ran past the last call: the file must be the clean one
      "$PY" "$ROOT/tests/support/results_same.py" "$work/clean.h5" "$d/r.h5" 2>/dev/null && ok ||
        bad "$sc $en at call $n: exit 0 with results that differ from the clean run"
      break
    fi
    hits=$((hits + 1))
    if [ $rc != 2 ]; then
      bad "$sc $en at call $n: exit $rc, expected 2"; sed 's/^/    /' "$d/out" | tail -3 >&2
    else
      ok
    fi
    grep -q "$d" "$d/out" && ok || { bad "$sc $en at call $n: message does not name the file"; tail -2 "$d/out" >&2; }
    [ ! -e "$d/r.h5" ] && ok || bad "$sc $en at call $n: a results file exists after a failed write"
    if ls "$d"/r.h5.tmp.* >/dev/null 2>&1; then bad "$sc $en at call $n: temporary file left"; else ok; fi
    if "$QMLA" sweep "$cap" -o "$d/r.h5" --threads 1 >/dev/null 2>&1 &&
       "$PY" "$ROOT/tests/support/results_same.py" "$work/clean.h5" "$d/r.h5"; then ok
    else bad "$sc $en at call $n: the rerun does not reproduce the clean results"; fi
    n=$((n + 1))
    [ $n -gt 60 ] && { bad "$sc: more than 60 failing calls"; break; }
  done
  echo "  $sc $en: $hits injected calls, each failed cleanly or as reported above" >&2
  [ $hits -ge "$min" ] && ok || bad "$sc $en: only $hits calls were hit ($min expected)"
}
inject_runs write ENOSPC 3
inject_runs fsync EIO 3
# HDF5's own file driver writes with pwrite64; qmla writes the finished
# image itself, so none may remain, and none may fail silently (before this
# was fixed, a failing pwrite64 left exit 0 and a zeroed column).
inject_runs pwrite64 ENOSPC 0
# the write of the file image (the call that writes the HDF5 signature):
# exit 2 with the cause named
ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" strace -f -e trace=write -o "$work/trace" "$QMLA" sweep "$cap" -o "$work/cnt.h5" --threads 1 >/dev/null 2>&1
nw=$(grep 'write(' "$work/trace" | grep -n 'HDF' | head -1 | cut -d: -f1)
mkdir -p "$work/one"
expect 2 "ENOSPC on the results image (write $nw)" -- traced -e trace=write -e inject=write:error=ENOSPC:when=${nw:-1} "$QMLA" sweep "$cap" -o "$work/one/r.h5" --threads 1
contains "No space left on device" "ENOSPC message"

# --- 2. replayed rows are checked --------------------------------------------
# A journal (lib/io/journal.h: header "qmla-journal 1 sweep <key>", each
# record followed by "#<FNV-1a 64 of its bytes> <byte count>") with the
# sweep's key and one record per row, built from the clean results.
mkjournal() { # OUT.journal MUTATION
  "$PY" - "$work/clean.h5" "$1" "$2" <<'PYEOF'
import sys, h5py
src, out, mut = sys.argv[1:4]
f = h5py.File(src, "r")
a, r = f.attrs, f["responses"]
def fnv(b):
    h = 1469598103934665603
    for c in b:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h
key = "sha256=%s bits=%d group=%d meta=%s nmse=0.01 cells=%s" % (
    a["capture_sha256"], a["bits"], a["group"], a["meta"], a["cells"])
cols = ["layer", "cell", "seq", "path", "nmse_cache", "nmse_out", "response",
        "nmse_out_matching", "nmse_out_aggregation", "nmse_out_interaction",
        "nmse_qdq", "verified", "route_residual", "degenerate"]
assert sorted(cols) == sorted(r), "the row table changed: update this test"
lines = ["qmla-journal 1 sweep " + key + "\n"]
for i in range(4):
    vals = {c: r[c][i] for c in cols}
    vals["cell"] = r["cell"].asstr()[i]
    vals["path"] = r["path"].asstr()[i]
    if i == 2 and mut == "nan":
        vals["nmse_out"] = float("nan")
    if i == 2 and mut == "layer42":
        vals["layer"] = 42
    if i == 2 and mut == "seq3":  # one past the last sequence of a 3-sequence cell
        vals["seq"] = 3
    fields = []
    for c in cols:
        v = vals[c]
        if isinstance(v, str):
            fields.append(v)
        elif c in ("layer", "seq", "verified", "degenerate"):
            fields.append("%d" % int(v))
        else:
            fields.append(float(v).hex() if v == v else "nan")
    body = "R " + " ".join(fields) + "\n"
    trailer = "#%016x %d\n" % (fnv(body.encode()), len(body.encode()))
    if i == 2 and mut == "digit":  # one digit of a complete record altered
        k = body.index("0x1.") + 4
        body = body[:k] + ("1" if body[k] != "1" else "2") + body[k + 1:]
    lines.append(body + trailer)
open(out, "w").write("".join(lines))
PYEOF
}
mkjournal "$work/ok.h5.journal" none
expect 0 "a valid journal resumes" -- "$QMLA" sweep "$cap" -o "$work/ok.h5" --threads 1
expect 0 "resumed from a hand-built journal equals the clean run" -- "$PY" "$ROOT/tests/support/results_same.py" "$work/clean.h5" "$work/ok.h5"
mkjournal "$work/nan.h5.journal" nan
expect 2 "journal record with NaN refused" -- "$QMLA" sweep "$cap" -o "$work/nan.h5"
contains "nan.h5.journal" "NaN journal: file named"
contains "nmse_out" "NaN journal: column named"
[ -e "$work/nan.h5.journal" ] && ok || bad "refused journal was deleted"
mkjournal "$work/l42.h5.journal" layer42
expect 2 "journal record for layer 42 refused" -- "$QMLA" sweep "$cap" -o "$work/l42.h5"
contains "layer 42" "layer-42 journal: named"
mkjournal "$work/s3.h5.journal" seq3
expect 2 "journal record for sequence 3 of a 3-sequence cell (0-2) refused" -- "$QMLA" sweep "$cap" -o "$work/s3.h5"
contains "sequence 3" "seq-3 journal: named"
mkjournal "$work/dig.h5.journal" digit
expect 0 "a record with one digit altered fails its checksum and is recomputed" -- "$QMLA" sweep "$cap" -o "$work/dig.h5" --threads 1
expect 0 "... and the results equal the clean run" -- "$PY" "$ROOT/tests/support/results_same.py" "$work/clean.h5" "$work/dig.h5"

# results files with a NaN row / a row of a layer the capture lacks / a
# negative value / a missing required column
for mut in nan layer42 negative nocol; do
  cp "$work/clean.h5" "$work/res-$mut.h5"
  "$PY" - "$work/res-$mut.h5" "$mut" <<'PYEOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    r = f["responses"]
    if sys.argv[2] == "nan":
        x = r["response"][...]; x[5] = float("nan"); r["response"][...] = x
    elif sys.argv[2] == "negative":
        x = r["nmse_out"][...]; x[5] = -x[5]; r["nmse_out"][...] = x
    elif sys.argv[2] == "nocol":
        del r["nmse_out"]
    else:
        x = r["layer"][...]; x[5] = 42; r["layer"][...] = x
PYEOF
  expect 2 "results file with a $mut row refused on resume" -- "$QMLA" sweep "$cap" -o "$work/res-$mut.h5"
  contains "res-$mut.h5" "$mut results row: file named"
  [ $mut = layer42 ] && contains "layer 42" "layer-42 results row named"
done
contains "nmse_out" "results file without /responses/nmse_out: column named"

# --- 3. one cell set per results file ---------------------------------------------
expect 0 "sweep layer 0, cell synth-s0" -- "$QMLA" sweep "$cap" -o "$work/ext.h5" --layers 0 --cells synth-s0
expect 2 "extension with another cell set refused" -- "$QMLA" sweep "$cap" -o "$work/ext.h5" --layers 1
contains "cell set" "cell-set refusal names the rule"
expect 0 "extension by a layer with the same cell set" -- "$QMLA" sweep "$cap" -o "$work/ext.h5" --layers 1 --cells synth-s0
expect 0 "root attributes describe the rows" -- "$PY" - "$work/ext.h5" <<'PYEOF'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
r = f["responses"]
assert f.attrs["layers"] == "0-1", f.attrs["layers"]
assert f.attrs["cells"] == "synth-s0", f.attrs["cells"]
assert set(r["cell"].asstr()[...]) == {"synth-s0"}
assert sorted(set(r["layer"][...])) == [0, 1]
assert list(f["cells/name"].asstr()[...]) == ["synth-s0"]
assert list(f["cells/n_sequences"][...]) == [3] and list(f["cells/n_tokens"][...]) == [48]
for k in ("command_line", "created_utc", "tool_version", "git_commit", "n_heads",
          "hidden_size", "d_c", "d_n", "d_r", "d_v", "softmax_scale", "rope_pairing"):
    assert k in f.attrs, k
assert "--cells synth-s0" in f.attrs["command_line"], f.attrs["command_line"]
for name, d in f["responses"].items():
    assert "description" in d.attrs, name
PYEOF
# groups other commands added (/jvp, /predict, ...) survive an extension
"$PY" -c 'import sys, h5py; f = h5py.File(sys.argv[1], "r+"); g = f.create_group("extra"); g["x"] = [1.5, 2.5]' "$work/ext.h5"
expect 0 "extend a file that holds another command's group" -- "$QMLA" sweep "$cap" -o "$work/ext.h5" --layers 0-1 --cells synth-s0
expect 0 "... the group is kept" -- "$PY" -c 'import sys, h5py; assert list(h5py.File(sys.argv[1], "r")["extra/x"][...]) == [1.5, 2.5]' "$work/ext.h5"
expect 0 "another cell set with --force starts a new file" -- "$QMLA" sweep "$cap" -o "$work/ext.h5" --layers 1 --force
expect 0 "... holding only what the forced run computed" -- "$PY" - "$work/ext.h5" <<'PYEOF'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
assert f.attrs["layers"] == "1" and f.attrs["cells"] == "synth-s0,synth-s1", dict(f.attrs)
assert set(f["responses/layer"][...]) == {1}
PYEOF

# --- 4. degenerate layers ---------------------------------------------------------
cp "$cap" "$work/deg.h5"
"$PY" - "$work/deg.h5" <<'PYEOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:   # layer 1: no content, no output
    for c in f["layers/1/cells"].values():
        c["c_kv"][...] = 0
PYEOF
expect 0 "sweep with a degenerate layer" -- "$QMLA" sweep "$work/deg.h5" -o "$work/deg-r.h5" -v
contains "    1 .*degenerate" "the degenerate layer is printed as degenerate"
if grep -q "0.000x" "$work/out"; then bad "a degenerate layer printed 0.000x"; else ok; fi
contains "left out of both model means: 1" "the model line names the excluded layer"
expect 0 "model means over the same layers" -- "$PY" - "$work/deg-r.h5" <<'PYEOF'
import sys, h5py, numpy as np
s = h5py.File(sys.argv[1], "r")["summary"]
assert list(s["degenerate"][...]) == [0, 1]
assert np.isnan(s["ratio"][1]) and s.attrs["n_layers_in_model"] == 1
assert s.attrs["model_response_content"] == s["response_content"][0]
assert s.attrs["model_response_rope"] == s["response_rope"][0]
PYEOF

# --- 5. --verify is recorded -------------------------------------------------------
expect 0 "sweep without --verify" -- "$QMLA" sweep "$cap" -o "$work/v.h5" --layers 0
expect 0 "extend with --verify" -- "$QMLA" sweep "$cap" -o "$work/v.h5" --verify
contains "over 12 verified rows" "only the computed rows are verified"
contains "12 rows not verified" "resumed unverified rows are reported"
expect 0 "a sweep without --verify" -- "$QMLA" sweep "$cap" -o "$work/v2.h5"
expect 0 "rerun --verify with everything resumed" -- "$QMLA" sweep "$cap" -o "$work/v2.h5" --verify
contains "no row verified" "a fully resumed --verify says nothing was checked"
if grep -q "residual 0.000e+00" "$work/out"; then bad "fully resumed --verify printed residual 0"; else ok; fi
expect 0 "verified rows have 0 < residual < 1e-3, unverified are marked" -- "$PY" - "$work/v.h5" <<'PYEOF'
import sys, h5py, numpy as np
r = h5py.File(sys.argv[1], "r")["responses"]
v, res, lay = r["verified"][...], r["route_residual"][...], r["layer"][...]
assert np.all(v[lay == 1] == 1) and np.all(v[lay == 0] == 0), v
assert np.all((res[v == 1] > 0) & (res[v == 1] < 1e-3)), res
assert np.all(res[v == 0] == 0)
s = h5py.File(sys.argv[1], "r")["summary"].attrs
assert s["n_verified"] == v.sum() == 12, s["n_verified"]
assert s["worst_route_residual"] == res.max() > 0, (s["worst_route_residual"], res.max())
PYEOF

finish test_results_faults
