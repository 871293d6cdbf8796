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
# serving benchmark of issue 21, docs/evidence/serving/bench_serving-h200-2026-12-04-run9.tsv,
# converted by scripts/serving-table.py), and Fig. 5 with Tables 9 and 10:
# docs/figures/storage/ (fig5a-storage from `qmla storage -o`),
# docs/figures/decode/ (fig5b-latency and table9 from the H200 decode run 14,
# docs/evidence/decode-h200-2026-12-04-run14/bench_variants.tsv, each
# configuration's default kernel, converted by scripts/decode-table.py) and docs/figures/serve-sim/ (fig5c-serving and
# table10 from `qmla serve-sim experiments/serving/paper-table10.scn -o`).
# Needs a build (scripts/setup.sh) and python3 with h5py.
set -euo pipefail
cd "$(dirname "$0")/.."
qmla=./build/cli/qmla
mkdir -p results
[ -f results/default-sweep.h5 ] ||
  "$qmla" sweep data/tiny-mla-default.h5 -o results/default-sweep.h5 --threads "$(nproc)"
rm -rf docs/figures/default docs/figures/tiny-mla-full docs/figures/operator docs/figures/allocate \
  docs/figures/serving docs/figures/storage docs/figures/decode docs/figures/serve-sim
"$qmla" figures results/default-sweep.h5 -o docs/figures/default
"$qmla" figures experiments/tiny-mla/results/tiny-mla-full-sweep.h5 \
  experiments/tiny-mla/results/tiny-mla-full-sweep-nu1e-3.h5 -o docs/figures/tiny-mla-full
"$qmla" figures experiments/operator/tiny-mla-default-operator.h5 -o docs/figures/operator \
  --only fig7-gains,fig7-validation,fig7-interventions,table5,table6 --labels "tiny-mla (default capture)"
"$qmla" figures docs/evidence/allocate-validation/pareto.h5 -o docs/figures/allocate \
  --only allocate-pareto,allocate-strip
sv=docs/evidence/serving/bench_serving-h200-2026-12-04-run9
"${PYTHON:-python3}" scripts/serving-table.py "$sv.tsv" "$sv.h5"
"$qmla" figures "$sv.h5" -o docs/figures/serving --only serving-bench \
  --labels "H200 serving benchmark"
# Fig. 5 (a): every configuration, with and without the sink4/local128
# policy, f16 metadata, contexts 1K..1M
"$qmla" storage --contexts 1024,2048,4096,8192,16384,32768,65536,131072,262144,524288,1048576 \
  --config BF16,C4R4,C2R4,C8R8 --policy sink4/local128,none -o results/storage.h5 >/dev/null
"$qmla" figures results/storage.h5 -o docs/figures/storage --only fig5a-storage \
  --labels "qmla storage (f16 metadata)"
# Fig. 5 (b) and Table 9: H 16, s_q 1, each configuration's default plan
# (BF16 variant 0, C4R4 / C2R4 variant 7, C8R8 variant 10) of the H200 run 14
"${PYTHON:-python3}" scripts/decode-table.py \
  docs/evidence/decode-h200-2026-12-04-run14/bench_variants.tsv results/decode-h200-run14.h5 \
  --variant v7 --bf16-variant v0 --config-variant C8R8=v10
"$qmla" figures results/decode-h200-run14.h5 -o docs/figures/decode --only fig5b-latency,table9 \
  --labels "H200 decode run 14: H 16 / s_q 1 / default kernels"
# Fig. 5 (c) and Table 10: the paper's serving scenario, simulated
"$qmla" serve-sim experiments/serving/paper-table10.scn -o results/serve-sim.h5 >/dev/null
"$qmla" figures results/serve-sim.h5 -o docs/figures/serve-sim --only fig5c-serving,table10 \
  --labels "qmla serve-sim (paper-table10.scn)"
rm -f docs/figures/*/data/*.log
