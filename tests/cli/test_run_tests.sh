#!/usr/bin/env bash
# tests/cli/test_run_tests.sh — scripts/run-tests.sh (the README's and CI's
# test command) always gives its verdict: with its stage commands replaced by
# stubs (its test-only hook QMLA_RUN_TESTS_STUBS; nothing is built or run),
#   - a stage with a failed test, a stage that crashes without a test log and
#     a stage that runs past its time limit each count as failed, the later
#     stages still run, the closing line is there exactly once with the right
#     counts, and the exit status is non-zero;
#   - all stages passing: exit 0 and the counts (meson OK/SKIP + the fuzz run);
#   - a failed setup stops the run but still prints the verdict (1 failed);
#   - each stage's wall time is printed.
# Before the fix, set -e stopped the script at the first failing stage with
# no closing line. A few seconds.
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT.
source "$(dirname "$0")/../support/cli_lib.sh"
S=$work/stubs
mkdir -p "$S"
# stub NAME BODY: an executable stage stub; $1 is its build folder
stub() { printf '#!/usr/bin/env bash\n%s\n' "$2" > "$S/$1"; chmod +x "$S/$1"; }
# a meson test log with the given results (one JSON object per line, as meson writes it)
LOG='mkdir -p "$1/meson-logs"; for r in "$@"; do [ "$r" = "$1" ] || echo "{\"name\": \"t\", \"result\": \"$r\"}"; done > "$1/meson-logs/testlog.json"'
mklog() { echo "set -- \"\$1\" $*"; echo "$LOG"; }
run() { # NAME: run the script with the stubs; output in $work/out, exit in $rc
  QMLA_RUN_TESTS_STUBS=$S bash "$ROOT/scripts/run-tests.sh" >"$work/out" 2>&1
  rc=$?
  cp "$work/out" "$work/$1.out"
}
verdict_is() { # WANT DESCRIPTION: exactly one closing line, equal to WANT, and it is the last line
  local n
  n=$(grep -E -c '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$work/out")
  if [ "$n" = 1 ] && [ "$(tail -n 1 "$work/out")" = "$1" ]; then ok
  else bad "$2: expected one closing line \"$1\", found $n: $(tail -n 1 "$work/out")"; sed 's/^/    /' "$work/out" >&2; fi
}
ran() { [ -e "$S/ran-$1" ] && ok || bad "$2: stage $1 did not run"; }

# 1. release has a failed test (and a skip), asan crashes with no log, fuzz passes
reset() { rm -f "$S"/ran-* "$S"/setup "$S"/release "$S"/asan "$S"/fuzz; }
reset
stub setup "touch '$S/ran-setup'"
stub release "touch '$S/ran-release'
$(mklog OK OK FAIL SKIP)
exit 1"
stub asan "touch '$S/ran-asan'
$(mklog OK)
kill -SEGV \$\$"
stub fuzz "touch '$S/ran-fuzz'"
run fails
[ "$rc" != 0 ] && ok || bad "a failed test and a crash: exit 0"
# release: 2 OK, 1 FAIL, 1 SKIP (the FAIL explains exit 1: not counted twice);
# asan: 1 OK + the crash; fuzz: 1 OK
verdict_is "4 passed, 2 failed, 1 skipped" "failed test + crash"
for s in setup release asan fuzz; do ran $s "failed test + crash"; done
contains "^== tests under ASan + UBSan: [0-9]* s, exit 139 (killed by signal 11)" "the crash is named with the stage's time"
contains "^== tests (release build): [0-9]* s, exit 1;" "release stage's time printed"
contains "^== fuzzing the capture reader for 24 s in 2 processes: [0-9]* s, exit 0" "fuzz stage's time printed"
contains "^   total " "total wall time printed"

# 2. every stage passes
reset
stub release "$(mklog OK OK SKIP)"
stub asan "$(mklog OK OK)"
stub fuzz "true"
run passes
[ "$rc" = 0 ] && ok || bad "all stages pass: exit $rc"
verdict_is "5 passed, 0 failed, 1 skipped" "all pass"

# 3. a stage past its time limit (QMLA_STAGE_TIMEOUT), the next ones still run
reset
stub release "touch '$S/ran-release'
$(mklog OK)
sleep 60"
stub asan "touch '$S/ran-asan'
$(mklog OK)"
stub fuzz "touch '$S/ran-fuzz'; exit 3"
QMLA_STAGE_TIMEOUT=2 run timeout
[ "$rc" != 0 ] && ok || bad "time-out: exit 0"
verdict_is "2 passed, 2 failed, 0 skipped" "time-out + fuzz failure"
contains "^== tests (release build): [0-9]* s, exit 124 (ran past its limit of 2 s)" "time-out named"
ran asan "after a time-out"; ran fuzz "after a time-out"

# 4. setup fails: no tests, still the verdict
reset
stub setup "exit 1"
stub release "touch '$S/ran-release'"
run setup
[ "$rc" != 0 ] && ok || bad "setup failure: exit 0"
verdict_is "0 passed, 1 failed, 0 skipped" "setup failure"
[ ! -e "$S/ran-release" ] && ok || bad "setup failure: the tests ran"
containsF "setup failed; no tests run" "setup failure said"

# nothing of the tree was touched: the stubs' build folders are under $S
[ -f "$S/build/meson-logs/testlog.json" ] && ok || bad "the stubs' logs are not under QMLA_RUN_TESTS_STUBS"
finish test_run_tests
