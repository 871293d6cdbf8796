#!/usr/bin/env bash
# bench/run.sh — the sweep benchmark (README "Performance").
#
#   bash bench/run.sh [BUILD_DIR] [THREADS]
#
# On a DeepSeek-V2-Lite-shaped synthetic capture (H 16, d_c 512, d_r 64,
# d_n 128, d_v 128, D 2048, T 512, N 8; one layer-cell, seed 1) it measures,
# in one run: seconds per layer-cell of `qmla sweep`, its useful GFLOP/s
# against a 2048^3 OpenBLAS sgemm in the same process, and the same protocol
# in plain NumPy (bench/numpy_sweep.py, float32, Debian's numpy through
# /usr/bin/python3); then prints the ratios. Both C and NumPy runs are made
# twice: with the environment as it is, and with OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE unset in that command only (this machine sets them; they
# force OpenBLAS's Haswell kernels and slow NumPy — and us — down).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
threads=${2:-$(nproc)}
work=$(mktemp -d /tmp/qmla-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
cap=$work/v2lite.h5
"$build/cli/qmla" synth -o "$cap" --shape deepseek-v2-lite --tokens 512 \
  --seqs 8 --layers 1 --cells 1 --seed 1 --threads "$threads" >/dev/null
echo "capture: $("$build/cli/qmla" --version), deepseek-v2-lite shape, T 512, N 8, 1 layer-cell; $threads threads"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
for mode in as-is unset; do
  if [ "$mode" = unset ]; then run=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE);
  else run=(env); fi
  echo
  if [ "$mode" = unset ]; then
    echo "== environment: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for these commands"
  else
    echo "== environment as set: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-<unset>}"
  fi
  c_out=$("${run[@]}" "$build/bench/bench_sweep" "$cap" "$threads" "$work/res.h5")
  echo "$c_out"
  py_out=$("${run[@]}" OPENBLAS_NUM_THREADS="$threads" /usr/bin/python3 \
    "$here/bench/numpy_sweep.py" "$cap" --dtype float32 --time)
  echo "$py_out"
  q=$(echo "$c_out" | awk '/qmla_seconds_per_layer_cell/ {print $2}')
  n=$(echo "$py_out" | awk '/numpy_seconds_per_layer_cell/ {print $2}')
  f=$(echo "$c_out" | awk '/fraction_of_sgemm/ {print $2}')
  awk -v q="$q" -v n="$n" -v f="$f" 'BEGIN {
    printf "speedup over NumPy: %.2fx (target >= 3x); fraction of sgemm rate: %.0f%% (target >= 40%%)\n", n / q, 100 * f }'
done
