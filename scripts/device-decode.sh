#!/usr/bin/env bash
# scripts/device-decode.sh — on the accelerator machine: build qmla, then run
# the named steps of the decode module's GPU work; logs and results go to
# $OUT (or ./device-out).
#   tests     test_qdq_cuda, test_decode_cuda
#   bench     bench/bench_decode (full table)        quick: its --quick subset
#   ncu       Nsight Compute summary of one launch of each kernel
#   sanitize  compute-sanitizer memcheck + racecheck on test_decode_cuda (small)
# Usage: bash scripts/device-decode.sh tests bench ncu sanitize
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source scripts/device-env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw --format=csv | tee "$OUT/gpu.txt"
if [ ! -f build-dev/build.ninja ]; then
  meson setup build-dev --buildtype=release >"$OUT/setup.log" 2>&1 || { tail -40 "$OUT/setup.log"; exit 1; }
fi
ninja -C build-dev >"$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -60; exit 1; }
for step in "$@"; do
  case $step in
  tests)
    echo "== test_qdq_cuda"
    ./build-dev/tests/test_qdq_cuda 2>&1 | tail -8 | tee "$OUT/test_qdq_cuda.log"
    echo "== test_decode_cuda"
    timeout 300 ./build-dev/tests/test_decode_cuda 2>&1 | tee "$OUT/test_decode_cuda.log" | tail -45 ;;
  bench | quick)
    echo "== bench_decode"
    q=""; [ "$step" = quick ] && q=--quick
    ./build-dev/bench/bench_decode $q --out "$OUT/bench_decode.tsv" 2>&1 | tee "$OUT/bench_decode.log" ;;
  ncu)
    echo "== ncu"
    timeout 240 ncu --clock-control none -k 'regex:qdq_tile|kv_write_kernel|decode_quant|decode_bf16' -c 8 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section InstructionStats \
      --section LaunchStats ./build-dev/bench/bench_decode --profile --out /tmp/p.tsv >"$OUT/ncu.txt" 2>&1
    echo "rc=$?"; grep -E "^  [a-z_]+.*\(|Duration|Throughput|Registers|Achieved Occupancy|Warp Cycles Per Issued|Issue Slots Busy|Stall|Executed Ipc A" "$OUT/ncu.txt" | head -80 ;;
  sanitize)
    for tool in memcheck racecheck; do
      echo "== compute-sanitizer $tool (test_decode_cuda, QMLA_TEST_SMALL=1)"
      QMLA_TEST_SMALL=1 timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 \
        ./build-dev/tests/test_decode_cuda >"$OUT/sanitize_$tool.log" 2>&1
      echo "rc=$?"; tail -4 "$OUT/sanitize_$tool.log"
    done ;;
  esac
done
