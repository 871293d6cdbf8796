#!/usr/bin/env bash
# scripts/device-serving.sh — on the accelerator machine (issue 21): build
# libqmla.so with the CUDA launchers (meson, build dir /tmp/qmla-serving-build
# kept while the machine stays warm), build the torch extension
# (python/qmla/torch_ops.cpp, qmla.torch.load_ops), then the named steps;
# logs and results go to $OUT (or ./device-out).
#   ops       experiments/serving/test_ops.py (operators: values, decode,
#             CUDA graph capture, refusals)
#   tiny      experiments/serving/generate.py --what tiny
#   families  experiments/serving/generate.py --what families
#   bench     experiments/serving/bench_serving.py
#   pack      the logs in $OUT into serving-logs.tgz
# Needs data/heldout/ and models/tiny-mla (copied beside the tree by the caller:
# scripts/device-copy.sh leaves data/, models/ and experiments/ out).
# Usage: OUT=... bash scripts/device-serving.sh ops tiny families bench pack
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source scripts/device-env.sh
PY=${PY:-/opt/torch/.venv/bin/python3}
B=${QMLA_SERVING_BUILD:-/tmp/qmla-serving-build}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.total --format=csv
cat .qmla-commit 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || true
if [ ! -f "$B/build.ninja" ]; then
  meson setup "$B" --buildtype=release -Dcuda=enabled >"$OUT/setup.log" 2>&1 ||
    { tail -30 "$OUT/setup.log"; exit 1; }
fi
ninja -C "$B" python/libqmla.so >"$OUT/build.log" 2>&1 ||
  { grep -E "error" -A3 "$OUT/build.log" | head -60; exit 1; }
echo "== libqmla.so built at ${SECONDS}s"
export QMLA_LIB=$B/python/libqmla.so
export TORCH_EXTENSIONS_DIR=/tmp/qmla-torch-ext
export PYTHONPATH=$PWD/python
$PY -c "import qmla.torch as qt; qt.load_ops(verbose=True)" >"$OUT/ext_build.log" 2>&1 ||
  { tail -60 "$OUT/ext_build.log"; exit 1; }
echo "== extension built at ${SECONDS}s"
for step in "$@"; do
  echo "== step $step at ${SECONDS}s"
  case $step in
  ops)
    timeout ${OPS_LIMIT:-120} $PY experiments/serving/test_ops.py --out "$OUT" >"$OUT/test_ops.log" 2>&1
    echo "rc=$?"; grep -E "FAIL|checks passed|Error|error" "$OUT/test_ops.log" | head -40 ;;
  tiny | families)
    timeout ${GEN_LIMIT:-200} $PY experiments/serving/generate.py --what $step --out "$OUT/$step" \
      ${GEN_ARGS:-} >"$OUT/generate_$step.log" 2>&1
    echo "rc=$?"; grep -vE "^\s*$" "$OUT/generate_$step.log" | cut -c1-600 | tail -40 ;;
  bench)
    timeout ${BENCH_LIMIT:-200} $PY experiments/serving/bench_serving.py --out "$OUT" \
      ${BENCH_ARGS:-} >"$OUT/bench_serving.log" 2>&1
    echo "rc=$?"; grep -v "^{" "$OUT/bench_serving.log" | tail -60 ;;
  pack)
    (cd "$OUT" && tar czf serving-logs.tgz --remove-files $(ls | grep -vE '\.(tsv|tgz)$')) ;;
  esac
done
echo "== done at ${SECONDS}s"
