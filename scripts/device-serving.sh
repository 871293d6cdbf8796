#!/usr/bin/env bash
# scripts/device-serving.sh — on the accelerator machine (issue 21): build
# libqmla.so with the CUDA launchers (meson, build dir /tmp/qmla-serving-build
# kept while the machine stays warm), build the torch extension
# (python/qmla/torch_ops.cpp, qmla.torch.load_ops), then the named steps
# (each under its own limit, CUDATEST_LIMIT, OPS_LIMIT, TINY_LIMIT,
# FAMILIES_LIMIT, BENCH_LIMIT; with DEADLINE=N no step runs past N seconds
# of the script):
#   cudatest  tests/test_decode_cuda in the same build, QMLA_TEST_SMALL=1 (the
#             writer, BF16 and float32 rows, and decode against their C twins)
#   ops       experiments/serving/test_ops.py (operators: values, decode,
#             CUDA graph capture, refusals)
#   tiny      experiments/serving/generate.py --what tiny
#   families  experiments/serving/generate.py --what families
#   evalfam   experiments/eval/eval_hook.py families (the QDQ hook alone)
#   bench     experiments/serving/bench_serving.py (eager rows and, since run 6,
#             the CUDA-graph rows; TSV and JSON of the graph checks to $OUT;
#             with BENCH_MARGIN=N no point starts in the step's last N s)
# Logs go to $LOGS (default /tmp/serving-logs); after every step they are packed
# again into $OUT/serving-logs.tgz, so that a call cut short still returns
# what ran (at most 8 files come back); the benchmark's TSV goes to $OUT.
# Needs data/heldout/ and models/tiny-mla (copied beside the tree by the caller:
# scripts/device-copy.sh leaves data/, models/ and experiments/ out).
# Usage: OUT=... bash scripts/device-serving.sh ops tiny families bench
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
LOGS=${LOGS:-/tmp/serving-logs}
mkdir -p "$OUT" "$LOGS"
pack() { (cd "$LOGS" && tar czf "$OUT/serving-logs.tgz" .); }
source scripts/device-env.sh
PY=${PY:-/opt/torch/.venv/bin/python3}
B=${QMLA_SERVING_BUILD:-/tmp/qmla-serving-build}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.total --format=csv
cat .qmla-commit 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || true
if [ ! -f "$B/build.ninja" ]; then
  meson setup "$B" --buildtype=release -Dcuda=enabled >"$LOGS/setup.log" 2>&1 ||
    { tail -30 "$LOGS/setup.log"; pack; exit 1; }
fi
ninja -C "$B" python/libqmla.so >"$LOGS/build.log" 2>&1 ||
  { grep -E "error" -A3 "$LOGS/build.log" | head -60; pack; exit 1; }
echo "== libqmla.so built at ${SECONDS}s"
export QMLA_LIB=$B/python/libqmla.so
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/qmla-torch-ext}
export PYTHONPATH=$PWD/python
$PY -c "import qmla.torch as qt; qt.load_ops(verbose=True)" >"$LOGS/ext_build.log" 2>&1 ||
  { tail -60 "$LOGS/ext_build.log"; pack; exit 1; }
echo "== extension built at ${SECONDS}s"
for step in "$@"; do
  echo "== step $step at ${SECONDS}s"
  lv="${step^^}_LIMIT"
  lim=${!lv:-200}
  if [ -n "${DEADLINE:-}" ]; then    # no step runs past DEADLINE seconds of the script
    left=$((DEADLINE - SECONDS))
    [ "$left" -lt "$lim" ] && lim=$left
    [ "$lim" -lt 1 ] && { echo "== step $step skipped: DEADLINE ${DEADLINE}s reached"; continue; }
  fi
  case $step in
  cudatest)
    if ninja -C "$B" tests/test_decode_cuda >"$LOGS/cudatest_build.log" 2>&1; then
      QMLA_TEST_SMALL=1 timeout $lim "$B/tests/test_decode_cuda" >"$LOGS/test_decode_cuda.log" 2>&1
      echo "rc=$?"; grep -E "FAIL|failed|float32|aging|worst|passed" "$LOGS/test_decode_cuda.log" | tail -12
    else
      echo "rc=build"; grep -E "error" -A3 "$LOGS/cudatest_build.log" | head -30
    fi ;;
  ops)
    timeout $lim $PY experiments/serving/test_ops.py --out "$LOGS" >"$LOGS/test_ops.log" 2>&1
    echo "rc=$?"; grep -E "FAIL|checks passed|Error|error" "$LOGS/test_ops.log" | head -40 ;;
  tiny | families)
    timeout $lim $PY experiments/serving/generate.py --what $step --out "$LOGS/$step" \
      ${GEN_ARGS:-} >"$LOGS/generate_$step.log" 2>&1
    echo "rc=$?"; grep -vE "^\s*$" "$LOGS/generate_$step.log" | cut -c1-700 | tail -40 ;;
  evalfam)
    timeout $lim $PY experiments/eval/eval_hook.py families --device cuda --out "$LOGS/evalfam" \
      >"$LOGS/eval_families.log" 2>&1
    echo "rc=$?"; grep -E "^\{|families:" "$LOGS/eval_families.log" | cut -c1-400 | tail -8 ;;
  bench)
    # BENCH_MARGIN=N: no benchmark point starts later than N s before the
    # step's limit (--seconds, after BENCH_ARGS), so that the run writes its
    # summary (largest batch in the budget, graph checks) before the limit
    bs=()
    [ -n "${BENCH_MARGIN:-}" ] && bs=(--seconds $((lim > BENCH_MARGIN ? lim - BENCH_MARGIN : 1)))
    timeout $lim $PY experiments/serving/bench_serving.py --out "$OUT" \
      ${BENCH_ARGS:-} "${bs[@]}" >"$LOGS/bench_serving.log" 2>&1
    echo "rc=$?"; grep -v "^{" "$LOGS/bench_serving.log" | tail -60 ;;
  esac
  pack
done
echo "== done at ${SECONDS}s"
