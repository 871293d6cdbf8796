#!/usr/bin/env bash
# scripts/device-decode.sh — on the accelerator machine: build qmla, run the
# CUDA tests of the decode module and its benchmark; logs and results go to
# $OUT (or ./device-out). Usage: bash scripts/device-decode.sh [quick|full|sanitize]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
mode=${1:-full}
source scripts/device-env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw --format=csv | tee "$OUT/gpu.txt"
if [ ! -f build-dev/build.ninja ]; then
  meson setup build-dev --buildtype=release >"$OUT/setup.log" 2>&1 || { tail -40 "$OUT/setup.log"; exit 1; }
fi
ninja -C build-dev >"$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -60; exit 1; }
echo "== test_qdq_cuda"
./build-dev/tests/test_qdq_cuda 2>&1 | tail -8 | tee "$OUT/test_qdq_cuda.log"
echo "== test_decode_cuda"
timeout 300 ./build-dev/tests/test_decode_cuda 2>&1 | tee "$OUT/test_decode_cuda.log" | tail -60
if [ "$mode" = sanitize ]; then
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer $tool (test_decode_cuda, QMLA_TEST_SMALL=1)"
    QMLA_TEST_SMALL=1 timeout 400 compute-sanitizer --tool $tool --error-exitcode 9 \
      ./build-dev/tests/test_decode_cuda >"$OUT/sanitize_$tool.log" 2>&1
    echo "rc=$?"; tail -5 "$OUT/sanitize_$tool.log"
  done
fi
if [ "$mode" != sanitize ]; then
  echo "== bench_decode"
  q=""; [ "$mode" = quick ] && q=--quick
  ./build-dev/bench/bench_decode $q --out "$OUT/bench_decode.tsv" 2>&1 | tee "$OUT/bench_decode.log"
fi
