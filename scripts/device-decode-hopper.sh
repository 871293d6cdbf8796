#!/usr/bin/env bash
# scripts/device-decode-hopper.sh — on the accelerator machine (issue 19):
# build the decode tests and benchmark, then run the named steps; logs and
# results go to $OUT (or ./device-out). Every step has its own time limit,
# so that one call stays within its budget.
#   tests     test_decode_cuda: every kernel variant (decode_cuda.h) against
#             the C twin (NMSE, LSE, token aging, bit-identical reruns)
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck on
#             test_decode_cuda (QMLA_TEST_SMALL=1: three shapes, 12 aging steps)
#   quick     bench_decode --variants-quick (H 16 s_q 1 whole; the other
#             shapes at 4K and 128K), 10 samples per point
#   bench     bench_decode --variants (b 1/8/32/64, 4K-1M, H 16/128, s_q 1/2)
#   ncu       Nsight Compute of variant 2's kernel (C4R4, b 32, 64K, H 16)
#   pack      the logs in $OUT into logs.tgz (at most 8 files come back)
# Usage (from the repository root, carry [".deb"] after scripts/device-prep.sh):
#   OUT=... bash scripts/device-decode-hopper.sh tests quick pack
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source scripts/device-env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw --format=csv
git rev-parse --short HEAD 2>/dev/null || true
if [ ! -f build-dev/build.ninja ]; then
  meson setup build-dev --buildtype=release >/tmp/setup.log 2>&1 ||
    { cp /tmp/setup.log "$OUT/"; tail -40 /tmp/setup.log; exit 1; }
fi
ninja -C build-dev tests/test_decode_cuda bench/bench_decode >/tmp/build.log 2>&1 ||
  { cp /tmp/build.log "$OUT/"; grep -E "error" -A3 /tmp/build.log | head -60; exit 1; }
echo "== built at ${SECONDS}s"
for step in "$@"; do
  echo "== step $step at ${SECONDS}s"
  case $step in
  tests)
    timeout ${TEST_LIMIT:-150} ./build-dev/tests/test_decode_cuda >"$OUT/test_decode_cuda.log" 2>&1
    echo "rc=$?"; grep -E " v[1-9] " "$OUT/test_decode_cuda.log" | head -80
    grep -E "FAIL|failed|aging|worst" "$OUT/test_decode_cuda.log" | tail -8 ;;
  sanitize)
    for tool in memcheck racecheck synccheck; do
      QMLA_TEST_SMALL=1 timeout ${SAN_LIMIT:-60} compute-sanitizer --tool $tool --error-exitcode 9 \
        ./build-dev/tests/test_decode_cuda >"$OUT/sanitize_$tool.log" 2>&1
      echo "== compute-sanitizer $tool rc=$?"; tail -3 "$OUT/sanitize_$tool.log"
    done ;;
  quick | bench)
    a=--variants-quick; [ "$step" = bench ] && a=--variants
    timeout ${BENCH_LIMIT:-150} ./build-dev/bench/bench_decode $a --out "$OUT/bench_variants.tsv" \
      >"$OUT/bench_variants.log" 2>&1
    echo "rc=$?"; cat "$OUT/bench_variants.log" ;;
  ncu)
    timeout 90 ncu --clock-control none --set full -k "regex:decode_ws_kernel" -c 1 \
      ./build-dev/bench/bench_decode --profile-variants --out /tmp/p.tsv >"$OUT/ncu_ws_c4r4.txt" 2>&1
    echo "== ncu rc=$?"
    grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|Executed Instructions  |Warp Cycles Per Issued|highest-utilized|Bank" "$OUT/ncu_ws_c4r4.txt" | head -20 ;;
  pack)
    k=""; while [ -e "$OUT/logs$k.tgz" ]; do k=$(( ${k:-1} + 1 )); done
    (cd "$OUT" && tar czf "logs$k.tgz" --remove-files $(ls | grep -vE '\.(tsv|h5|tgz)$')) ;;
  esac
done
echo "== done at ${SECONDS}s"
