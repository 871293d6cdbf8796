# tests/support/cli_lib.sh — shared helpers of the shell tests (sourced): a private
# work folder removed on exit (also on failure), pass/fail counters, and
#   expect CODE DESCRIPTION -- command...   (stdout+stderr in $work/out)
#   contains REGEX DESCRIPTION              (grep in $work/out)
#   containsF TEXT DESCRIPTION / lacks TEXT DESCRIPTION (fixed strings)
#   finish NAME                              (closing line and status)
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT, QMLA_PYTHON.
QMLA=${QMLA_BIN:?}
ROOT=${QMLA_SOURCE_ROOT:?}
PY=${QMLA_PYTHON:-/usr/bin/python3}
work=$(mktemp -d /tmp/qmla-test-XXXXXX)
# a test may define cleanup_extra (e.g. to stop a background job)
trap 'declare -F cleanup_extra >/dev/null && cleanup_extra; rm -rf "$work"' EXIT
pass=0 fail=0

ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
expect() {
  local want=$1 what=$2; shift 3
  "$@" >"$work/out" 2>&1
  local got=$?
  if [ "$got" = "$want" ]; then ok; else bad "$what: exit $got, expected $want"; sed 's/^/    /' "$work/out" | tail -5 >&2; fi
}
contains() { if grep -q -- "$1" "$work/out"; then ok; else bad "$2: output lacks \"$1\""; sed 's/^/    /' "$work/out" | tail -5 >&2; fi; }
containsF() { if grep -qF -- "$1" "$work/out"; then ok; else bad "$2: output lacks \"$1\""; sed 's/^/    /' "$work/out" | tail -5 >&2; fi; }
lacks() { if grep -qF -- "$1" "$work/out"; then bad "$2: output has \"$1\""; sed 's/^/    /' "$work/out" | tail -5 >&2; else ok; fi; }
need_python() {
  "$PY" -c 'import numpy, h5py' 2>/dev/null && return 0
  echo "FAIL: $PY lacks numpy/h5py (apt-get install python3-numpy python3-h5py)"
  echo "0 passed, 1 failed"
  exit 1
}
finish() {
  echo "$1: $pass passed, $fail failed"
  [ $fail = 0 ]
}
