#!/usr/bin/env bash
# bench/run_operator.sh — the exact-sensitivity benchmark (issue 8).
#
#   bash bench/run_operator.sh [BUILD_DIR] [THREADS]
#
# On a DeepSeek-V2-Lite-shaped synthetic capture (H 16, d_c 512, d_r 64,
# d_n 128, d_v 128, D 2048, T 512, N 8; one layer-cell, seed 1), in one run:
# `qmla sweep`'s driver on the layer-cell against the exact sensitivities of
# all tokens, both paths, on the same layer-cell (seconds, GFLOP/s, ratio;
# target <= 4x); the Hutchinson probe cost and the probes for 5 % error; the
# growth in T (256, 512, 1024, 2048; one sequence each). Then the NumPy
# implementation (bench/numpy_operator.py, float64, explicit M_i route) on a
# T 32 sequence of the same shape beside the C route at T 32 — the NumPy
# route forms the d_c x D matrix of every causal pair and cannot run at
# T 512 in reasonable time.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
threads=${2:-$(nproc)}
work=$(mktemp -d /tmp/qmla-bench-op-XXXXXX)
trap 'rm -rf "$work"' EXIT
q="$build/cli/qmla"
"$q" synth -o "$work/v2.h5" --shape deepseek-v2-lite --tokens 512 --seqs 8 \
  --layers 1 --cells 1 --seed 1 --threads "$threads" >/dev/null
"$q" synth -o "$work/v2s.h5" --shape deepseek-v2-lite --tokens 32 --seqs 1 \
  --layers 1 --cells 1 --seed 1 --threads "$threads" >/dev/null
echo "$("$q" --version); cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
"$build/bench/bench_operator" "$work/v2.h5" "$threads" 256,512,1024,2048
echo
echo "== NumPy (float64, explicit M_i) against C at T 32, same shape"
"$build/bench/bench_operator" "$work/v2s.h5" "$threads" 32 | tail -1
OPENBLAS_NUM_THREADS="$threads" /usr/bin/python3 "$here/bench/numpy_operator.py" "$work/v2s.h5" --time-sens
