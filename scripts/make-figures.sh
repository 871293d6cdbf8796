#!/usr/bin/env bash
# scripts/make-figures.sh — regenerate the committed figures shown in the
# README: docs/figures/default/ (the default run: the sweep of
# data/tiny-mla-default.h5 that scripts/run-main.sh makes) and
# docs/figures/tiny-mla-full/ (the full six-cell tiny-mla sweep at cache NMSE
# 1e-2 and 1e-3, experiments/tiny-mla/results/), docs/figures/operator/
# (Fig. 7 and Tables 5 and 6 from qmla predict and qmla intervene on the default capture,
# experiments/operator/tiny-mla-default-operator.h5) and docs/figures/allocate/
# (the qmla allocate validation, docs/evidence/allocate-validation/pareto.h5
# from scripts/allocate-validate.sh) and docs/figures/serving/ (the H200
# serving benchmark of issue 21, docs/evidence/serving/bench_serving-h200-2026-12-02.tsv,
# converted by scripts/serving-table.py). Needs a build (scripts/setup.sh)
# and python3 with h5py.
set -euo pipefail
cd "$(dirname "$0")/.."
qmla=./build/cli/qmla
mkdir -p results
[ -f results/default-sweep.h5 ] ||
  "$qmla" sweep data/tiny-mla-default.h5 -o results/default-sweep.h5 --threads "$(nproc)"
rm -rf docs/figures/default docs/figures/tiny-mla-full docs/figures/operator docs/figures/allocate \
  docs/figures/serving
"$qmla" figures results/default-sweep.h5 -o docs/figures/default
"$qmla" figures experiments/tiny-mla/results/tiny-mla-full-sweep.h5 \
  experiments/tiny-mla/results/tiny-mla-full-sweep-nu1e-3.h5 -o docs/figures/tiny-mla-full
"$qmla" figures experiments/operator/tiny-mla-default-operator.h5 -o docs/figures/operator \
  --only fig7-gains,fig7-validation,fig7-interventions,table5,table6 --labels "tiny-mla (default capture)"
"$qmla" figures docs/evidence/allocate-validation/pareto.h5 -o docs/figures/allocate \
  --only allocate-pareto,allocate-strip
sv=docs/evidence/serving/bench_serving-h200-2026-12-02
"${PYTHON:-python3}" scripts/serving-table.py "$sv.tsv" "$sv.h5"
"$qmla" figures "$sv.h5" -o docs/figures/serving --only serving-bench \
  --labels "H200 serving benchmark"
rm -f docs/figures/*/data/*.log
