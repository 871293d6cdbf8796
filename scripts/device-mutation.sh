#!/usr/bin/env bash
# scripts/device-mutation.sh — the mutation harness on the accelerator
# machine's many cores (after scripts/device-prep.sh; see docs/testing.md):
# N harnesses, each on every N-th selected mutant (QMLA_MUT_SHARD), one core
# each, beside ONE baseline run of the same tree (unit and ref suites,
# release build) whose verdict is kept with the logs: the harnesses skip
# their own baseline (QMLA_MUT_NO_BASELINE), so a test that fails in the
# baseline log makes its "caught" lines worthless — check baseline.txt.
# Tests the machine cannot run (no gnuplot, no mpirun, Ubuntu's paths) are
# left out of both (QMLA_MUT_EXCLUDE); a mutant only they catch shows as
# SURVIVED here and is rerun on a Debian machine.
# QMLA_MUT_JOBS (default 1) sets each harness's ninja and meson test
# parallelism. Neither 16 x 1 nor 4 x 4 (tried 2026-12-02: 27 mutants in one
# 600 s call, and 4 tests failing in that machine's baseline) finishes a
# run in one call: not a way to score the tree (docs/testing.md).
# Usage: [QMLA_MUT_JOBS=J] bash scripts/device-mutation.sh N LIMIT_S [PATTERN...]
#   logs in $OUT: mut-I.log per harness, baseline.txt, summary.txt
set -u
n=${1:?N harnesses} limit=${2:?time limit in seconds}; shift 2
source scripts/device-env.sh
PY=${QMLA_PYTHON:-/opt/torch/.venv/bin/python3}
export QMLA_PYTHON=$PY QMLA_MUT_JOBS=${QMLA_MUT_JOBS:-1} QMLA_MUT_NO_BASELINE=1
export QMLA_MUT_EXCLUDE=${QMLA_MUT_EXCLUDE:-"test_figures test_merge test_serve_sim_cli test_mpi test_capture_cli"}
export QMLA_MUT_MESON_ARGS="-Dpython=$PY -Dmpi=disabled"
OUT=${OUT:-/tmp/mut-out}; mkdir -p "$OUT"
( b=/tmp/qmla-mut-baseline
  rm -rf "$b"
  meson setup "$b" . --buildtype=release -Dcuda=disabled $QMLA_MUT_MESON_ARGS >/dev/null 2>&1 &&
  ninja -C "$b" -j 2 >/dev/null 2>&1 || { echo "baseline build FAILED"; exit 0; }
  timeout $((limit - 20)) meson test -C "$b" --no-rebuild --suite unit --suite ref --num-processes 2 >/dev/null 2>&1
  "$PY" - "$b/meson-logs/testlog.json" "$QMLA_MUT_EXCLUDE" <<'PY'
import json, sys
excl = set(sys.argv[2].split())
res = {}
for line in open(sys.argv[1]):
    r = json.loads(line); res[r["name"].split()[-1]] = r["result"]
bad = sorted(t for t, v in res.items() if v not in ("OK", "SKIP", "EXPECTEDFAIL") and t not in excl)
print("baseline: %d tests run, %d outside the excluded list failed: %s" % (len(res), len(bad), " ".join(bad) or "none"))
for t, v in sorted(res.items()):
    print("  %-28s %s%s" % (t, v, "  (excluded)" if t in excl else ""))
PY
) >"$OUT/baseline.txt" 2>&1 &
for ((i = 1; i <= n; i++)); do
  QMLA_MUT_SHARD=$i/$n timeout "$limit" bash scripts/mutation-test.sh "$@" >"$OUT/mut-$i.log" 2>&1 &
done
wait
{ head -1 "$OUT/baseline.txt"
  cat "$OUT"/mut-*.log | grep -E '^[0-9]+-[^ ]+ +[a-z0-9_]+ +(caught|SURVIVED|STALE|nobuild) ' | awk '{print $3}' | sort | uniq -c
  echo "not SURVIVED/caught:"; grep -hE ' (SURVIVED|STALE|nobuild) ' "$OUT"/mut-*.log | awk '{print "  " $1, $3}'
  grep -h "run time" "$OUT"/mut-*.log | sort | uniq -c | head -3
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
