#!/usr/bin/env bash
# scripts/run-tests.sh — set up, build, and run the whole test suite, in four
# stages (each prints its wall time):
#  1. setup: scripts/setup.sh (packages, release build in build/),
#  2. release: the release build's meson tests (suites unit, ref),
#  3. asan: the same tests under AddressSanitizer + UndefinedBehaviorSanitizer
#     (build-asan/, --timeout-multiplier 4; without the CUDA kernels, and the
#     heaviest tests on smaller inputs, QMLA_TEST_SMALL=1: docs/testing.md),
#  4. fuzz: the capture reader's libFuzzer target for QMLA_FUZZ_SECONDS (24)
#     in 2 processes (48 process-seconds; 45 in one process before).
# Every stage runs whatever an earlier one did, except that a failed setup
# stops the run (there is nothing to test). A stage that fails to build,
# crashes or runs past its time limit (QMLA_STAGE_TIMEOUT seconds if set,
# else 20 / 20 / 35 / 10 minutes, 85 in all, under the CI's 90) counts as one
# failure, besides any failed tests. The run always ends with exactly one line
#   N passed, N failed, N skipped
# (meson tests of both builds, + 1 for the fuzzing run) and exits non-zero iff
# anything failed.
#
# TEST-ONLY HOOK (tests/cli/test_run_tests.sh): QMLA_RUN_TESTS_STUBS=DIR runs
# DIR/<stage> (setup, release, asan, fuzz; a missing one passes with no tests)
# instead of each stage's command, with the build folders under DIR
# (DIR/build, DIR/build-asan, DIR/build-fuzz) so that nothing in the tree is
# touched; a stub gets its build folder as $1 and may write
# $1/meson-logs/testlog.json. Never set it otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
export QMLA_WITH_FUZZ=1
stubs=${QMLA_RUN_TESTS_STUBS:-}
if [ -n "$stubs" ]; then
  echo "run-tests: QMLA_RUN_TESTS_STUBS=$stubs: stage commands replaced by stubs (test only)"
  B=$stubs/build BA=$stubs/build-asan BF=$stubs/build-fuzz
else
  B=build BA=build-asan BF=build-fuzz
fi
fuzz_s=${QMLA_FUZZ_SECONDS:-24}
passed=0 failed=0 skipped=0
t_all=$(date +%s)

# count BUILD_DIR: add the results of BUILD_DIR/meson-logs/testlog.json;
# sets n_fail to this log's failures
count() {
  local log=$1/meson-logs/testlog.json p=0 s=0
  n_fail=0
  if [ -f "$log" ]; then
    p=$(grep -c '"result": "OK"' "$log")
    s=$(grep -c '"result": "SKIP"' "$log")
    n_fail=$(grep -E -c '"result": "(FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS)"' "$log")
  fi
  passed=$((passed + p)) skipped=$((skipped + s)) failed=$((failed + n_fail))
  stage_counts="$p OK, $n_fail failed, $s skipped"
}

# stage NAME TITLE LIMIT_S BUILD_DIR|- COMMAND: run COMMAND (a bash script)
# under a time limit; BUILD_DIR: count its meson test log (removed first, so
# that an old log is never counted); "-": the stage is one test itself;
# "": the stage counts only if it fails (setup).
stage() {
  local name=$1 title=$2 limit=${QMLA_STAGE_TIMEOUT:-$3} bdir=$4 cmd=$5 rc t0
  echo "== $title"
  case $bdir in -|"") ;; *) rm -f "$bdir/meson-logs/testlog.json" ;; esac
  t0=$(date +%s)
  if [ -n "$stubs" ]; then
    if [ -x "$stubs/$name" ]; then
      timeout -k 30 "$limit" "$stubs/$name" "$bdir"
    else
      true
    fi
  else
    timeout -k 30 "$limit" bash -euo pipefail -c "$cmd"
  fi
  rc=$?
  stage_s=$(( $(date +%s) - t0 ))
  local why=""
  [ $rc = 124 ] || [ $rc = 137 ] && why=" (ran past its limit of $limit s)"
  [ $rc -gt 128 ] && [ $rc != 137 ] && why=" (killed by signal $((rc - 128)))"
  if [ -z "$bdir" ]; then
    if [ $rc = 0 ]; then stage_counts="ok"
    else failed=$((failed + 1)); stage_counts="1 failed"; fi
  elif [ "$bdir" = - ]; then
    if [ $rc = 0 ]; then passed=$((passed + 1)); stage_counts="1 OK"
    else failed=$((failed + 1)); stage_counts="1 failed"; fi
  else
    count "$bdir"
    # a build failure, crash or time-out is a failure of its own unless the
    # log already explains the exit status
    if [ $rc != 0 ] && { [ "$n_fail" = 0 ] || [ -n "$why" ]; }; then
      failed=$((failed + 1))
      stage_counts="$stage_counts, + the stage itself failed"
    fi
  fi
  stage_rc=$rc
  echo "== $title: ${stage_s} s, exit $rc$why; $stage_counts"
  summary+=("$(printf '%-8s %5d s  exit %-3d %s' "$name" "$stage_s" "$rc" "$stage_counts")")
}

verdict() {
  echo "== stages (wall time)"
  printf '   %s\n' "${summary[@]}"
  echo "   total    $(( $(date +%s) - t_all )) s"
  echo "$passed passed, $failed failed, $skipped skipped"
  [ "$failed" = 0 ]
  exit
}
summary=()

stage setup "setup (packages, release build)" 1200 "" 'bash scripts/setup.sh'
if [ "$stage_rc" != 0 ]; then
  echo "run-tests: setup failed; no tests run"
  verdict
fi
stage release "tests (release build)" 1200 "$B" \
  "meson test -C $B --print-errorlogs --num-processes 2"
stage asan "tests under ASan + UBSan" 2100 "$BA" "
  if [ ! -f $BA/build.ninja ]; then
    bash scripts/meson-setup.sh $BA --buildtype=debugoptimized -Dcuda=disabled \
      -Db_sanitize=address,undefined -Db_lundef=false -Dc_args=-fno-sanitize-recover=all
  fi
  ninja -C $BA >$BA/last-build.log 2>&1 || { tail -n 40 $BA/last-build.log >&2; exit 1; }
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    meson test -C $BA --print-errorlogs --num-processes 2 --timeout-multiplier 4"
stage fuzz "fuzzing the capture reader for $fuzz_s s in 2 processes" 600 - "QMLA_FUZZ_WORKERS=2 bash fuzz/run.sh $fuzz_s $BF"
verdict
