#!/usr/bin/env bash
# tests/cli/test_show_export.sh — `qmla show` and `qmla export` on every kind
# of file qmla writes (issue 26 item 6): made here cheaply from the committed
# tiny data (a one-layer, one-cell sweep with /jvp, /predict, /interventions
# added; a part file of --shard 0/2; rtn transforms, a full and a partial
# one; /eval; a one-window ppl; the Table 10 serve-sim) plus committed files
# (an old /eval without the root format attribute, the decode benchmark,
# the ppl table, the full interventions file). For each, check_show_export.py
# asserts show exits 0 and prints the numbers h5py reads, export --list names
# every table and --table equals the h5py data. A damaged file and a file of
# another kind exit 2 naming the file.
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT, QMLA_PYTHON.
set -u
. "$(dirname "$0")/../support/cli_lib.sh"
need_python
CAP=$ROOT/data/tiny-mla-default.h5
sub=(--layers 0 --cells prose-s0 --threads 2)
expect 0 "sweep" -- "$QMLA" sweep "$CAP" "${sub[@]}" -o "$work/s.h5" -v
cp "$work/out" "$work/sweep.txt"
expect 0 "show sweep" -- "$QMLA" show "$work/s.h5"
sed -n '/^layer/,$p' "$work/sweep.txt" > "$work/t1"; sed -n '/^layer/,$p' "$work/out" > "$work/t2"
if [ -s "$work/t1" ] && cmp -s "$work/t1" "$work/t2"; then ok; else bad "show of a sweep differs from sweep -v"; diff "$work/t1" "$work/t2" | head >&2; fi
expect 0 "jvp" -- "$QMLA" jvp "$CAP" "${sub[@]}" -o "$work/s.h5"
expect 0 "predict" -- "$QMLA" predict "$CAP" "${sub[@]}" -o "$work/s.h5"
expect 0 "intervene" -- "$QMLA" intervene "$CAP" "${sub[@]}" --reps 4 --bootstrap 50 -o "$work/s.h5"
expect 0 "show sweep + groups" -- "$QMLA" show "$work/s.h5"
sed -n '/^layer/,/^group \/jvp/p' "$work/out" | sed '$d' | sed '$d' > "$work/t2"
if cmp -s "$work/t1" "$work/t2"; then ok; else bad "show of a sweep with groups: the sweep part differs from sweep -v"; diff "$work/t1" "$work/t2" | head >&2; fi
contains "^group /interventions" "show: every group"
expect 0 "sweep shard" -- "$QMLA" sweep "$CAP" --layers 0-1 --cells prose-s0 --threads 2 --shard 0/2 -o "$work/part.h5"
expect 0 "learn rtn" -- "$QMLA" learn "$CAP" --method rtn --layers 0-1 --train-cells prose-s0 -o "$work/rtn.h5"
expect 0 "eval" -- "$QMLA" eval "$CAP" --transforms "$work/rtn.h5" --config C4R4 --layers 0-1 --cells prose-s0 --threads 2 -o "$work/eval.h5"
# a learning checkpoint: complete 0 and a layer missing
"$PY" - "$work/rtn.h5" "$work/partial.h5" <<'PY' || bad "h5py: partial transforms"
import sys, shutil, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "a") as f:
    del f["layers/1"]
    f.attrs["complete"] = 0
PY
expect 0 "show partial transforms" -- "$QMLA" show "$work/partial.h5"
contains "layers missing: 1$" "show names the missing layer"
expect 0 "ppl" -- "$QMLA" ppl "$ROOT/models/tiny-mla" --text "$ROOT/data/heldout/code.txt.gz" --config bf16,C4R4 --tokens 64 --threads 2 -o "$work/ppl.h5"
expect 0 "serve-sim" -- "$QMLA" serve-sim "$ROOT/experiments/serving/paper-table10.scn" -o "$work/serve.h5"
pyout=$work/py.txt
"$PY" "$ROOT/tests/cli/check_show_export.py" "$QMLA" "$work/s.h5" "$work/part.h5" "$work/rtn.h5" \
  "$work/partial.h5" "$work/eval.h5" "$work/ppl.h5" "$work/serve.h5" \
  "$ROOT/experiments/transforms/results/eval-code-s0-none.h5" \
  "$ROOT/experiments/operator/tiny-mla-full-intervene.h5" \
  "$ROOT/experiments/accuracy/table.h5" "$ROOT/docs/evidence/run25_bench_decode.h5" >"$pyout" 2>&1
prc=$?
pass=$((pass + $(grep -c '^ok' "$pyout")))
if [ $prc != 0 ] || grep -q '^FAIL' "$pyout" || ! grep -q '^ok' "$pyout"; then
  fail=$((fail + 1)); grep -v '^ok' "$pyout" | head -20 | sed 's/^/    /' >&2
fi
# a damaged file: /jvp without g_jvp; a capture (another kind); not HDF5
"$PY" - "$work/s.h5" "$work/damaged.h5" <<'PY' || bad "h5py: damaged file"
import sys, shutil, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "a") as f:
    del f["jvp/g_jvp"]
PY
# a /jvp group of a device engine names its device (engine_device,
# docs/results-format.md) in its provenance block; the CPU engine's has none
"$PY" - "$work/s.h5" "$work/dev.h5" <<'PY' || bad "h5py: engine_device"
import sys, shutil, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "a") as f:
    f["jvp"].attrs["engine"] = "cuda"
    f["jvp"].attrs["engine_device"] = "NVIDIA H200 (sm_90, 139.8 GiB)"
PY
expect 0 "show a device engine's results" -- "$QMLA" show "$work/dev.h5"
containsF "  device       NVIDIA H200 (sm_90, 139.8 GiB)" "show prints engine_device"
expect 0 "show a cpu engine's results" -- "$QMLA" show "$work/s.h5"
if grep -q "^  device " "$work/out"; then bad "show: a device line for the cpu engine"; else ok; fi
expect 2 "show a damaged file" -- "$QMLA" show "$work/damaged.h5"
containsF "damaged.h5: /jvp/g_jvp: expected a dataset" "damaged file message"
expect 2 "show a capture" -- "$QMLA" show "$CAP"
containsF "tiny-mla-default.h5: root attribute format: expected \"qmla-results\"" "wrong kind message"
contains 'found "qmla-capture"' "wrong kind: what was found"
printf 'not hdf5\n' > "$work/junk.h5"
expect 2 "show junk" -- "$QMLA" show "$work/junk.h5"
containsF "junk.h5: not an HDF5 file" "junk message"
expect 2 "export an unknown section" -- "$QMLA" export "$work/s.h5" --table interventions:7
containsF "no table /interventions:7 (expected one of:" "unknown section message"
finish test_show_export
