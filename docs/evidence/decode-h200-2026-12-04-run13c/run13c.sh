#!/usr/bin/env bash
# lead run 13c: the merged main (decq8 + decc8) full test_decode_cuda; the
# decc8-v10tables kernel (variant 10's conflict-free tables) beside it:
# C8R8 tests, racecheck, and --variants-quick --vlist 10 alternated.
set -u
here=$(pwd)
mkdir -p "$OUT/main" /tmp/t10
cp -r . /tmp/t10/ && cp decode-v10tables.cu /tmp/t10/kernels/decode.cu
echo e1fc6406fdadcdbd321edaf36c05760eaf8ce119 > /tmp/t10/.qmla-commit
rm -rf /tmp/t10/build-dev
( cd /tmp/t10 && source scripts/device-env.sh && meson setup build-dev --buildtype=release >/tmp/t10-setup.log 2>&1 &&
  ninja -C build-dev tests/test_decode_cuda bench/bench_decode >/tmp/t10-build.log 2>&1; echo "== t10 built rc=$? at ${SECONDS}s" ) &
DEADLINE=170 TEST_LIMIT=120 OUT=$OUT/main bash scripts/device-decode-hopper.sh tests 2>&1 | tail -12
wait
source scripts/device-env.sh
cd /tmp/t10
QMLA_TEST_CFGS=3 QMLA_TEST_VARIANTS=0,9,10 timeout 70 ./build-dev/tests/test_decode_cuda >"$OUT/t10_test.log" 2>&1
echo "== t10 test rc=$?"; grep -E "C8R8 .* v10 |aging|worst|passed" "$OUT/t10_test.log" | tail -8
QMLA_TEST_CFGS=3 QMLA_TEST_VARIANTS=10 QMLA_TEST_AGING=30 timeout 80 compute-sanitizer --tool racecheck --error-exitcode 9 \
  ./build-dev/tests/test_decode_cuda >"$OUT/t10_racecheck.log" 2>&1
echo "== t10 racecheck rc=$?"; tail -3 "$OUT/t10_racecheck.log"
for r in 1 2; do
  for t in main t10; do
    d=$here; [ $t = t10 ] && d=/tmp/t10
    timeout 40 "$d/build-dev/bench/bench_decode" --variants-quick --vlist 10 --out "$OUT/quick_${t}_$r.tsv" >"$OUT/quick_${t}_$r.log" 2>&1
    echo "== quick $t $r rc=$? at ${SECONDS}s"
  done
done
cd "$OUT" && tar czf quick.tgz quick_*.tsv quick_*.log && rm -f quick_*.tsv quick_*.log
ls -la "$OUT" "$OUT/main"
