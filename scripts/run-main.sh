#!/usr/bin/env bash
# scripts/run-main.sh — the main job: set up, build, then on the embedded
# default capture run `qmla check` and the matched-NMSE sweep, printing the
# per-layer content/RoPE responses (Table 4 style) and writing
# results/default-sweep.h5, then render its figures and Table 4 into
# results/figures/ (`qmla figures`, gnuplot scripts in plots/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cap=${1:-data/tiny-mla-default.h5}
mkdir -p results
threads=$(nproc)
./build/cli/qmla check "$cap" -q --threads "$threads"
./build/cli/qmla sweep "$cap" -o results/default-sweep.h5 -v --threads "$threads"
./build/cli/qmla figures results/default-sweep.h5 -o results/figures
