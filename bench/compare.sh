#!/usr/bin/env bash
# bench/compare.sh — the benchmarks of a base commit against the current
# working tree (uncommitted changes included), on the same inputs.
#
#   bash bench/compare.sh BASE_COMMIT [THREADS=2]
#   bash bench/compare.sh BASE_SOURCE_DIR [THREADS=2]
#
# Builds BASE_COMMIT in a temporary worktree (build-compare/base-SHA, git
# ignored) and the working tree in build-compare/current (release builds),
# then runs every benchmark that both trees have, base and current in turn
# (A/B/A/B, REPS rounds), and prints per benchmark the minimum seconds of
# each and the ratio current/base (> 1: the current tree is slower), and
# the same for the CPU seconds (user + system) of the whole benchmark run,
# less sensitive to other load on the machine than the wall time:
#   sweep     bench_sweep on a DeepSeek-V2-Lite-shaped capture (T 512, SEQS
#             sequences, one layer-cell; written once by the base's
#             `qmla synth`, read by both): its seconds per layer-cell
#   operator  bench_operator on a 2-sequence capture of that shape, growth at
#             T 512 (whole run)
#   learn     bench_learn 3 steps, no reference steps, T 512 d_c 256 (whole run)
#   ppl       bench_ppl on each tree's models/tiny-mla and first 4 windows
#             of data/heldout/prose.txt.gz (whole run)
# BASE_SOURCE_DIR: a source tree of the base outside git (for a machine
# without the repository, e.g. the accelerator machine: `git archive BASE`
# unpacked, with the current tree's models/ and data/ copied in); its commit
# is read from BASE_SOURCE_DIR/.commit when present.
# Environment: MESON_ARGS (extra `meson setup` arguments for both builds,
# e.g. -Dcuda=disabled), BENCHES (a subset of "sweep operator learn ppl"),
# REPS (default 3), SEQS (default 8), KEEP=1 keeps the base
# worktree and both builds for the next run. The OpenBLAS variables are
# used as set (prefix `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE` to
# compare with them unset). The qmla program is build/cli/qmla or, in older
# trees, build/analysis/qmla.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: bash bench/compare.sh BASE_COMMIT [THREADS]"
base=${1:?$usage}
threads=${2:-2}
reps=${REPS:-3}
seqs=${SEQS:-8}
die() { echo "compare: $*" >&2; exit 1; }
out=$root/build-compare
if [ -d "$base" ] && [ -f "$base/meson.build" ]; then
  src=$(cd "$base" && pwd)
  sha=$(cat "$src/.commit" 2>/dev/null || basename "$src")
  external=1
else
  sha=$(git -C "$root" rev-parse --verify --quiet "$base^{commit}") ||
    die "$base is neither a commit of $root nor a source tree (a folder with meson.build)"
  src=$out/base-${sha:0:12}
  external=0
fi
cur=$out/current
work=$(mktemp -d /tmp/qmla-compare-XXXXXX)
cleanup() {
  rm -rf "$work"
  if [ "${KEEP:-0}" != 1 ]; then
    if [ "$external" = 1 ]; then
      rm -rf "$src/build"
    else
      git -C "$root" worktree remove --force "$src" 2>/dev/null || rm -rf "$src"
    fi
    rm -rf "$cur"
  fi
}
trap cleanup EXIT
mkdir -p "$out"

# build SRC_DIR BUILD_DIR NAME
build() {
  local log=$work/build-$(printf %s "$3" | tr -c "A-Za-z0-9._-" _).log
  echo "building $3 ($1) ..." >&2
  if { [ -f "$2/build.ninja" ] || meson setup "$2" "$1" --buildtype=release ${MESON_ARGS:-}; } >"$log" 2>&1 &&
     ninja -C "$2" >>"$log" 2>&1; then
    return 0
  fi
  tail -n 30 "$log" >&2
  die "$3 does not build (log above; meson setup $2 $1 --buildtype=release && ninja -C $2)"
}
[ -d "$src" ] || [ "$external" = 1 ] || git -C "$root" worktree add --detach "$src" "$sha" >/dev/null 2>&1 ||
  die "cannot add a worktree of $sha at $src"
build "$src" "$src/build" "base $base (${sha:0:12})"
build "$root" "$cur" "current tree"

qmla_of() { # BUILD_DIR -> the qmla program
  local p
  for p in cli/qmla analysis/qmla; do
    [ -x "$1/$p" ] && { echo "$1/$p"; return 0; }
  done
  die "no qmla program in $1 (looked for cli/qmla and analysis/qmla)"
}
qb=$(qmla_of "$src/build")
qc=$(qmla_of "$cur")
cap=$work/v2lite.h5
"$qb" synth -o "$cap" --shape deepseek-v2-lite --tokens 512 --seqs "$seqs" \
  --layers 1 --cells 1 --seed 1 --threads "$threads" >/dev/null ||
  die "the base's qmla synth failed"
"$qb" synth -o "$work/v2lite-2.h5" --shape deepseek-v2-lite --tokens 512 --seqs 2 \
  --layers 1 --cells 1 --seed 1 --threads "$threads" >/dev/null

# Benchmarks both builds have.
benches=()
for b in ${BENCHES:-sweep operator learn ppl}; do
  [ -x "$src/build/bench/bench_$b" ] && [ -x "$cur/bench/bench_$b" ] && benches+=("$b")
done
[ ${#benches[@]} -gt 0 ] || die "no benchmark program is in both builds"

# run BENCH BUILD_DIR SRC_DIR TAG -> "SECONDS CPU_SECONDS" on stdout
run() {
  local o=$work/$1-$4.out TIMEFORMAT='%R %U %S'
  { time case $1 in
    sweep) "$2/bench/bench_sweep" "$cap" "$threads" "$work/res-$4.h5" ;;
    operator) "$2/bench/bench_operator" "$work/v2lite-2.h5" "$threads" 512 ;;
    learn) "$2/bench/bench_learn" 3 "$threads" 8 0 512,256 ;;
    ppl) (cd "$3" && "$2/bench/bench_ppl" models/tiny-mla data/heldout/prose.txt.gz \
           --windows 4 --threads "$threads") ;;
  esac >"$o" 2>&1; } 2>"$o.time" || { cat "$o" >&2; die "bench_$1 of the $4 tree failed"; }
  # seconds: the sweep's own (without bench_sweep's sgemm calibration), else
  # the whole run's; CPU seconds (user + system) always of the whole run
  awk -v b="$1" 'NR == FNR { w = $1; c = $2 + $3; next }
    b == "sweep" && /^qmla_seconds_per_layer_cell/ { s = $2 }
    END { print (s != "" ? s : w), c }' "$o.time" "$o"
}

declare -A best
for ((r = 1; r <= reps; r++)); do
  for b in "${benches[@]}"; do
    for tag in base current; do
      if [ $tag = base ]; then s=$(run "$b" "$src/build" "$src" base)
      else s=$(run "$b" "$cur" "$root" current); fi
      echo "round $r/$reps  $b  $tag  seconds, cpu seconds: $s  (load $(cut -d' ' -f1 /proc/loadavg))" >&2
      set -- $s
      for k in "$b.$tag" "$b.$tag.cpu"; do
        best[$k]=$(awk -v a="${best[$k]:-}" -v b="$1" 'BEGIN { print (a == "" || b < a) ? b : a }')
        shift
      done
    done
  done
done

dirty=$(git -C "$root" status --porcelain --untracked-files=no | grep -q . && echo ", modified" || true)
echo "base ${sha:0:12} ($("$qb" --version 2>/dev/null | head -n1)) against current $(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || cat "$root/.commit" 2>/dev/null)$dirty ($("$qc" --version 2>/dev/null | head -n1));" \
  "$threads threads, minimum of $reps, T 512 N $seqs capture;" \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-<unset>}"
printf '%-10s %10s %10s %13s %11s %11s %9s\n' benchmark base_s current_s current/base \
  base_cpu_s cur_cpu_s cpu_ratio
for b in "${benches[@]}"; do
  awk -v n="$b" -v a="${best[$b.base]}" -v c="${best[$b.current]}" \
    -v ac="${best[$b.base.cpu]}" -v cc="${best[$b.current.cpu]}" \
    'BEGIN { printf "%-10s %10.3f %10.3f %13.3f %11.2f %11.2f %9.3f\n", n, a, c, c / a, ac, cc, cc / ac }'
done
