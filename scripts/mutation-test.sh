#!/usr/bin/env bash
# scripts/mutation-test.sh — mutation testing of the library and the `qmla`
# program: each mutant in tests/mutants/*.mut (one small fault, described in
# one line) is applied to a temporary copy of the tree (never to the working
# tree), the copy is rebuilt incrementally (one build directory, the mutated
# file reverted between mutants), and the unit and ref suites run until its first
# failing test: the C tests first (seconds), then the shell tests of the
# program (about a minute each). A mutant is
#   caught    some test failed (or timed out);
#   survived  every test passed — a test is missing, or the mutant is
#             equivalent (docs/testing.md argues each known one);
#   stale     its pattern no longer matches the source (the code moved on:
#             update the mutant); not counted in the score;
#   nobuild   the mutated copy does not compile; not counted.
# Tests that fail on the unmutated copy are left out (and named), so that
# they cannot "catch" every mutant.
#
# Usage: bash scripts/mutation-test.sh [PATTERN...]
#   PATTERN  run only mutants whose file name contains one of them
# Env: QMLA_MUT_KEEP=1 keeps the temporary copy; QMLA_MUT_JOBS (2) ninja and
#      meson test parallelism; QMLA_PYTHON (/usr/bin/python3) for the tests;
#      QMLA_MUT_ONLY_FAST=1 runs the C tests only, QMLA_MUT_TESTS="t1 t2"
#      only the tests named (both for quick work on one test, not a score);
#      QMLA_MUT_TIMEOUT_MULT (1) scales the tests' meson timeouts;
#      QMLA_MUT_MESON_ARGS extra `meson setup` arguments (e.g. -Dpython=...
#      where /usr/bin/python3 lacks numpy); QMLA_MUT_SHARD=I/N runs only
#      every N-th selected mutant from the I-th (I from 1), so that N
#      harnesses on one many-core machine split a run (their scores add up).
#      QMLA_MUT_AREA_ONLY=1 runs, per mutant, only its hinted tests and
#      those of its file's area (tests/AREA/ for lib/AREA/): a quick triage
#      of likely survivors ("area-pass"), not a score.
#      Outside a git checkout (the accelerator machine) the copy is every
#      file but build*/ folders.
#      QMLA_MUT_EXCLUDE="t1 t2" leaves those tests out (named in the
#      output: tests the machine cannot run, e.g. no gnuplot);
#      QMLA_MUT_NO_BASELINE=1 skips the baseline — only where a separate
#      baseline of the same tree runs beside the harness and its verdict is
#      kept with the run's logs (scripts/device-mutation.sh does both).
# Exits 0 (a report, not a gate); not part of CI (.ci/run). Run time on 2
# cores: see docs/testing.md.
#
# Mutant file format (tests/mutants/NNN-name.mut), one "key: value" a line:
#   desc:    the fault it models (one line)
#   module:  the library module (quantizer, attention, routes, ...)
#   file:    path relative to the repository root
#   find:    literal text to replace (first occurrence)  -- or --
#   regex:   a Python regular expression (first match; \s* makes it robust
#            to re-formatting)
#   replace: the replacement (for regex: a Python re replacement; \1 ...)
#   tests:   optional; test names run first for this mutant (speed only)
# Several find/regex + replace pairs may follow one another (all must match).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${QMLA_PYTHON:-/usr/bin/python3}
JOBS=${QMLA_MUT_JOBS:-2}
MUTDIR="$ROOT/tests/mutants"
start=$(date +%s)

tmp=$(mktemp -d /tmp/qmla-mutants-XXXXXX)
cleanup() { [ "${QMLA_MUT_KEEP:-0}" = 1 ] && echo "kept $tmp" || rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
src="$tmp/src"
mkdir -p "$src"
# the tree as it is now (tracked and untracked files, not build outputs)
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
  (cd "$ROOT" && git ls-files -co --exclude-standard -z) |
    (cd "$ROOT" && xargs -0 cp --parents -t "$src" 2>/dev/null)
else
  tar -C "$ROOT" --exclude='./build*' --exclude='./.deb' --exclude='./.bench-base' -cf - . |
    tar -C "$src" -xf -
fi
git -C "$ROOT" rev-parse HEAD >"$src/.mutation-base" 2>/dev/null
b="$tmp/build"
echo "== copy in $src; setting up $b"
if ! (meson setup "$b" "$src" --buildtype=release -Dcuda=disabled ${QMLA_MUT_MESON_ARGS:-} >"$tmp/setup.log" 2>&1 &&
      ninja -C "$b" -j "$JOBS" >"$tmp/build.log" 2>&1); then
  echo "the unmutated copy does not build:"; tail -n 20 "$tmp/setup.log" "$tmp/build.log"
  exit 0
fi

# --- the test lists: C tests (fast) first, then the shell tests -------------
# the tests of the unit and ref suites, from meson's introspection (the
# `meson test --list` format differs between meson versions)
all=$(meson introspect "$b" --tests 2>/dev/null | "$PY" -c '
import json, sys
for t in json.load(sys.stdin):
    if any(x.split(":")[-1] in ("unit", "ref") for x in t["suite"]):
        print(t["name"])')
[ -n "$all" ] || { echo "no tests of the unit and ref suites in $b (meson introspect --tests)"; exit 0; }
fast="" slow=""
for t in $all; do
  case $t in
    test_cli|test_results_faults|test_full_disk) slow="$slow $t" ;;
    *) fast="$fast $t" ;;
  esac
done
# order the fast tests: cheapest and most sensitive first
order="test_quant test_rowtable test_attention test_routes test_sweep test_reader test_fuzz_regress test_resume"
sorted=""
for t in $order; do case " $fast " in *" $t "*) sorted="$sorted $t" ;; esac; done
for t in $fast; do case " $sorted " in *" $t "*) ;; *) sorted="$sorted $t" ;; esac; done
fast=$sorted
# slow: results_faults before cli (it stops earlier on bookkeeping faults)
sslow=""
for t in test_results_faults test_cli test_full_disk; do case " $slow " in *" $t "*) sslow="$sslow $t" ;; esac; done
slow=$sslow

without() { # LIST DROP -> LIST less the names in DROP
  local t out=""
  for t in $1; do case " $2 " in *" $t "*) ;; *) out="$out $t" ;; esac; done
  echo "$out"
}
failed_of() { # TESTLOG.json -> the names of its tests that did not pass ("*" if unreadable)
  "$PY" -c '
import json, sys
try:
    for line in open(sys.argv[1]):
        r = json.loads(line)
        if r.get("result") not in ("OK", "SKIP", "EXPECTEDFAIL"):
            print(r["name"].split()[-1])
except (OSError, ValueError, KeyError):
    print("*")' "$1"
}
run_tests() { # LIST -> 0 all passed, 1 a failure; sets $failed_test
  local list=$1 log="$tmp/testlog"
  failed_test=""
  [ -n "${list// /}" ] || return 0
  QMLA_PYTHON=$PY timeout 1500 meson test -C "$b" --no-rebuild --maxfail 1 \
    --num-processes "$JOBS" -t "${QMLA_MUT_TIMEOUT_MULT:-1}" --logbase mut $list >"$log" 2>&1
  local rc=$?
  [ $rc = 0 ] && return 0
  failed_test=$(failed_of "$b/meson-logs/mut.json" | sed -n 1p)  # sed reads to the end: no BrokenPipeError when two tests failed
  [ -n "$failed_test" ] || failed_test="(meson rc $rc)"
  return 1
}

if [ -n "${QMLA_MUT_EXCLUDE:-}" ]; then
  fast=$(without "$fast" "$QMLA_MUT_EXCLUDE") slow=$(without "$slow" "$QMLA_MUT_EXCLUDE")
  echo "== left out (QMLA_MUT_EXCLUDE): $QMLA_MUT_EXCLUDE"
fi
[ "${QMLA_MUT_ONLY_FAST:-0}" = 1 ] && slow=""
[ -n "${QMLA_MUT_TESTS:-}" ] && { fast=$QMLA_MUT_TESTS; slow=""; }
# --- baseline: every selected test passes on the unmutated copy -------------
keep_fast="" keep_slow=""
if [ "${QMLA_MUT_NO_BASELINE:-0}" = 1 ]; then
  echo "== baseline SKIPPED (QMLA_MUT_NO_BASELINE=1): a separate baseline run of this tree vouches for the tests"
  keep_fast=$fast keep_slow=$slow fast="" slow=""
else
echo "== baseline (unmutated copy)"
# all selected tests at once (in parallel); those that fail there are tried
# alone, twice (a timeout on a loaded machine is not a failure of the code)
QMLA_PYTHON=$PY timeout 3000 meson test -C "$b" --no-rebuild --num-processes "$JOBS" \
  -t "${QMLA_MUT_TIMEOUT_MULT:-1}" --logbase baseline $fast $slow >"$tmp/baseline.log" 2>&1
base_failed=$(failed_of "$b/meson-logs/baseline.json" | tr '\n' ' ')
for t in $fast $slow; do
  case " $base_failed " in *" $t "*|*" * "*) ;; *)
    case " $slow " in *" $t "*) keep_slow="$keep_slow $t" ;; *) keep_fast="$keep_fast $t" ;; esac
    continue ;;
  esac
  if run_tests "$t" || run_tests "$t"; then
    case " $slow " in *" $t "*) keep_slow="$keep_slow $t" ;; *) keep_fast="$keep_fast $t" ;; esac
  else
    echo "   $t FAILS on the unmutated copy: left out of this run"
  fi
done
fi
fast=$keep_fast slow=$keep_slow
echo "   tests used, in order:$fast |$slow"
all_targets=" $(ninja -C "$b" -t targets all 2>/dev/null | sed -n 's/^\([^:]*\): .*/\1/p' | tr '\n' ' ') "
base_s=$(( $(date +%s) - start ))

# --- apply one mutant (python: literal or regex substitution) ----------------
apply_mutant() { # MUTFILE -> prints "ok FILE" or "stale REASON"
  "$PY" - "$1" "$src" <<'PYEOF'
import re, sys, os
mut, src = sys.argv[1], sys.argv[2]
pairs, meta, cur = [], {}, None
for raw in open(mut, encoding="utf-8"):
    line = raw.rstrip("\n")
    if not line.strip() or line.lstrip().startswith("#"):
        continue
    k, _, v = line.partition(":")
    k, v = k.strip(), v[1:] if v.startswith(" ") else v
    if k in ("find", "regex"):
        cur = [k, v, None]
        pairs.append(cur)
    elif k == "replace":
        if cur is None or cur[2] is not None:
            print("stale replace without find/regex"); sys.exit(0)
        cur[2] = v
    else:
        meta[k] = v
path = os.path.join(src, meta.get("file", ""))
if not meta.get("file") or not os.path.isfile(path) or not pairs:
    print("stale file %s missing or no pattern" % meta.get("file")); sys.exit(0)
text = open(path, encoding="utf-8").read()
new = text
for kind, pat, rep in pairs:
    if rep is None:
        print("stale pattern without replace"); sys.exit(0)
    if kind == "find":
        if pat not in new:
            print("stale no match for: %s" % pat[:70]); sys.exit(0)
        new = new.replace(pat, rep, 1)
    else:
        try:
            rx = re.compile(pat, re.M)
        except re.error as e:
            print("stale bad regex: %s" % e); sys.exit(0)
        if not rx.search(new):
            print("stale no match for: %s" % pat[:70]); sys.exit(0)
        new = rx.sub(rep, new, count=1)
if new == text:
    print("stale substitution changes nothing"); sys.exit(0)
open(path + ".mutation-orig", "w", encoding="utf-8").write(text)
open(path, "w", encoding="utf-8").write(new)
print("ok " + meta["file"])
PYEOF
}

field() { sed -n "s/^$2: *//p" "$1" | head -1; }
# The tests a mutant names in its optional "tests:" line (the ones that
# caught it before), among the tests used, run first: only the order changes
# (a survivor still runs every test), so the score does not depend on it.
# Then the tests of the mutated file's area (lib/AREA/... -> tests/AREA/;
# cli/... -> tests/cli/), in the order used: again only the order changes.
area_of_test=""
for t in $fast $slow; do
  f=$(ls "$src"/tests/*/"$t".* 2>/dev/null | head -1)
  [ -n "$f" ] && area_of_test="$area_of_test $t:$(basename "$(dirname "$f")")"
done
hinted() {
  local t out="" file area
  for t in $(field "$1" tests); do
    case " $fast $slow " in *" $t "*) out="$out $t" ;; esac
  done
  file=$(field "$1" file)
  case $file in lib/*/*) area=${file#lib/}; area=${area%%/*} ;; cli/*) area=cli ;; *) area="" ;; esac
  if [ -n "$area" ]; then
    for t in $fast $slow; do
      case " $area_of_test " in *" $t:$area "*)
        case " $out " in *" $t "*) ;; *) out="$out $t" ;; esac ;;
      esac
    done
  fi
  echo "$out"
}

# --- the mutants ----------------------------------------------------------------
mutants=()
for m in "$MUTDIR"/*.mut; do
  [ -e "$m" ] || continue
  if [ $# -gt 0 ]; then
    sel=0 bm=${m##*/}; for p in "$@"; do case $bm in *"$p"*) sel=1; break ;; esac; done
    [ $sel = 1 ] || continue
  fi
  mutants+=("$m")
done
if [ -n "${QMLA_MUT_SHARD:-}" ]; then
  si=${QMLA_MUT_SHARD%/*} sn=${QMLA_MUT_SHARD#*/}
  case "$si/$sn" in [0-9]*/[0-9]*) ;; *) echo "QMLA_MUT_SHARD: expected I/N, found $QMLA_MUT_SHARD"; exit 2 ;; esac
  [ "$si" -ge 1 ] && [ "$si" -le "$sn" ] || { echo "QMLA_MUT_SHARD: expected 1 <= I <= N, found $QMLA_MUT_SHARD"; exit 2; }
  sel=()
  for ((k = si - 1; k < ${#mutants[@]}; k += sn)); do sel+=("${mutants[$k]}"); done
  mutants=("${sel[@]}")
  echo "== shard $si/$sn"
fi
echo "== ${#mutants[@]} mutants"
n_caught=0 n_surv=0 n_stale=0 n_nob=0 n_area=0
survivors="" stales="" area_pass=""
printf '%-40s %-11s %-9s %5s  %s\n' "mutant" "module" "result" "secs" "caught by / reason"
for m in "${mutants[@]}"; do
  name=$(basename "$m" .mut)
  module=$(field "$m" module)
  t0=$(date +%s)
  out=$(apply_mutant "$m")
  case $out in
    ok\ *) file=${out#ok } ;;
    *)
      n_stale=$((n_stale + 1)); stales="$stales $name"
      printf '%-40s %-11s %-9s %5s  %s\n' "$name" "$module" "STALE" 0 "${out#stale }"
      continue ;;
  esac
  result="" by=""
  # First only what the hinted tests run (their executables, the program,
  # libqmla.so, bench_sweep), then, unless they catch it, everything: no test
  # runs an executable that was not rebuilt with this mutant.
  h=$(hinted "$m") htargets="cli/qmla python/libqmla.so bench/bench_sweep"
  for t in $h; do
    case " $all_targets " in *" tests/$t "*) htargets="$htargets tests/$t" ;; esac
  done
  if ! ninja -C "$b" -j "$JOBS" $htargets >"$tmp/mbuild.log" 2>&1; then
    result=nobuild; by=$(grep -m1 'error:' "$tmp/mbuild.log" | cut -c1-80)
    n_nob=$((n_nob + 1))
  elif ! run_tests "$h"; then
    result=caught; by=$failed_test
  elif [ "${QMLA_MUT_AREA_ONLY:-0}" = 1 ]; then
    result=area-pass; by="its hinted and area tests passed (QMLA_MUT_AREA_ONLY: the rest not run)"
    n_area=$((n_area + 1)); area_pass="$area_pass $name"
  elif ! ninja -C "$b" -j "$JOBS" >"$tmp/mbuild.log" 2>&1; then
    result=nobuild; by=$(grep -m1 'error:' "$tmp/mbuild.log" | cut -c1-80)
    n_nob=$((n_nob + 1))
  elif ! run_tests "$(without "$fast" "$h")"; then
    result=caught; by=$failed_test
  elif ! run_tests "$(without "$slow" "$h")"; then
    result=caught; by=$failed_test
  else
    result=SURVIVED; by="every test passed"
    survivors="$survivors $name"
  fi
  [ $result = caught ] && n_caught=$((n_caught + 1))
  [ $result = SURVIVED ] && n_surv=$((n_surv + 1))
  # revert (a new mtime: ninja rebuilds the file for the next mutant)
  mv "$src/$file.mutation-orig" "$src/$file"
  touch "$src/$file" # (mv keeps the old mtime, older than the mutant's objects)
  printf '%-40s %-11s %-9s %5s  %s\n' "$name" "$module" "$result" $(( $(date +%s) - t0 )) "$by"
done

scored=$((n_caught + n_surv))
total_s=$(( $(date +%s) - start ))
echo
echo "== summary"
echo "mutants: ${#mutants[@]}  caught: $n_caught  survived: $n_surv  stale: $n_stale  nobuild: $n_nob"
if [ $scored -gt 0 ]; then
  awk -v c=$n_caught -v s=$scored 'BEGIN { printf "score: %d/%d = %.1f %%\n", c, s, 100 * c / s }'
fi
[ -n "$survivors" ] && echo "survived:$survivors"
[ -n "$area_pass" ] && echo "not caught by their hinted and area tests ($n_area; QMLA_MUT_AREA_ONLY, not a score):$area_pass"
[ -n "$stales" ] && echo "stale (update their patterns):$stales"
echo "run time: ${total_s} s (setup, build and baseline ${base_s} s)"
exit 0
