#!/usr/bin/env bash
# scripts/run-tests.sh — set up, build, and run the whole test suite:
#  1. the release build's tests (meson test: unit suites),
#  2. the same tests under AddressSanitizer + UndefinedBehaviorSanitizer
#     (except suite full: the whole held-out set, ~12 min in the release build),
#  3. the capture reader's libFuzzer target for QMLA_FUZZ_SECONDS (60).
set -euo pipefail
cd "$(dirname "$0")/.."
export QMLA_WITH_FUZZ=1
bash scripts/setup.sh
echo "== tests (release build)"
meson test -C build --print-errorlogs --num-processes 2
echo "== tests under ASan + UBSan"
if [ ! -f build-asan/build.ninja ]; then
  bash scripts/meson-setup.sh build-asan --buildtype=debugoptimized \
    -Db_sanitize=address,undefined -Db_lundef=false -Dc_args=-fno-sanitize-recover=all
fi
ninja -C build-asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  meson test -C build-asan --print-errorlogs --num-processes 2 --timeout-multiplier 4 \
  --no-suite full
echo "== fuzzing the capture reader for ${QMLA_FUZZ_SECONDS:-60} s"
fuzz_ok=0
bash fuzz/run.sh "${QMLA_FUZZ_SECONDS:-60}" build-fuzz && fuzz_ok=1
# One closing line over both builds' meson tests and the fuzzing run.
logs="build/meson-logs/testlog.json build-asan/meson-logs/testlog.json"
passed=$(cat $logs | grep -c '"result": "OK"' || true)
skipped=$(cat $logs | grep -c '"result": "SKIP"' || true)
failed=$(cat $logs | grep -E -c '"result": "(FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS)"' || true)
if [ $fuzz_ok = 1 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
