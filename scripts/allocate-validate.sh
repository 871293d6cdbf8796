#!/usr/bin/env bash
# scripts/allocate-validate.sh — the validation of `qmla allocate`
# (docs/allocate.md, issue 23) on tiny-mla and its default capture, CPU only:
#   1. qmla allocate at budgets 4.5bits, C4R4 (= 4 bits), 3.5bits, 3bits and
#      2.5bits (context 512 = tiny-mla's window, policy none, the 16
#      candidates C{2,3,4,8}R{2,3,4,8});
#   2. qmla eval --config ALLOC.h5 (RTN): the measured per-layer output NMSE
#      of each allocation, and of every uniform candidate;
#   3. qmla ppl on both held-out texts (--tokens N each, default 16384) of
#      bf16, the 16 uniform configurations and the 5 allocations;
#   4. scripts/allocate-search.py: the measured search baseline (each layer
#      at each candidate, the others at C8R8, scored by qmla ppl on 4096
#      tokens per text; the same knapsack on the measured deltas; its
#      allocations scored like the others) — QMLA_NO_SEARCH=1 skips it;
#   5. scripts/allocate-table.py: the tables (per-layer predicted vs
#      measured with Spearman; per budget the allocation against the best
#      uniform configuration within the budget and the cheapest-best of the
#      same or larger bytes).
# Usage: bash scripts/allocate-validate.sh [WORKDIR] [TOKENS]
# Writes WORKDIR/{per_layer.tsv,summary.tsv,table.md} (default WORKDIR
# /tmp/qmla-allocate-validate); docs/evidence/allocate-validation/ keeps the
# committed copy. Took 13 + 17 minutes (validation + search) niced on a
# shared, heavily loaded 2-core machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
q=${QMLA_BIN:-$root/build/cli/qmla}
py=${QMLA_PYTHON:-/usr/bin/python3}
w=${1:-/tmp/qmla-allocate-validate}
tokens=${2:-16384}
cap=$root/data/tiny-mla-default.h5
model=$root/models/tiny-mla
mkdir -p "$w"
budgets="4.5bits C4R4 3.5bits 3bits 2.5bits"
uniform="C2R2 C2R3 C2R4 C2R8 C3R2 C3R3 C3R4 C3R8 C4R2 C4R3 C4R4 C4R8 C8R2 C8R3 C8R4 C8R8"
run() { echo "+ $*" >&2; nice -n 19 "$@"; }
run "$q" learn "$cap" -o "$w/rtn.h5" --method rtn --train-cells prose-s0 >/dev/null
start=$(date +%s)
for b in $budgets; do
  run "$q" allocate "$cap" --budget "$b" --context 512 --threads 1 -o "$w/alloc-$b.h5" | tee "$w/alloc-$b.txt"
  run "$q" eval "$cap" --transforms "$w/rtn.h5" --config "$w/alloc-$b.h5" --threads 1 -o "$w/eval-$b.h5" >/dev/null
done
echo "allocate + eval of 5 budgets: $(( $(date +%s) - start )) s wall" >&2
# the uniform configurations measured the same way (one-layer-each file per config)
for c in $uniform; do
  "$py" - "$w/alloc-C4R4.h5" "$w/uni-$c.h5" "$c" <<'PY'
import sys, shutil, h5py
shutil.copy(sys.argv[1], sys.argv[2])
cb, rb = int(sys.argv[3][1]), int(sys.argv[3][3])
with h5py.File(sys.argv[2], "r+") as f:
    n = len(f["allocate/layer"])
    f["allocate/c_bits"][...] = [cb] * n
    f["allocate/r_bits"][...] = [rb] * n
PY
  run "$q" eval "$cap" --transforms "$w/rtn.h5" --config "$w/uni-$c.h5" --threads 1 -o "$w/eval-uni-$c.h5" >/dev/null
done
cfgs=bf16
for c in $uniform; do cfgs=$cfgs,$c; done
for b in $budgets; do cfgs=$cfgs,$w/alloc-$b.h5; done
start=$(date +%s)
run "$q" ppl "$model" --text "$root/data/heldout/prose.txt.gz" --text "$root/data/heldout/code.txt.gz" \
  --config "$cfgs" --tokens "$tokens" --context 512 --threads 2 -o "$w/ppl.h5" | tee "$w/ppl.txt"
echo "ppl: $(( $(date +%s) - start )) s wall" >&2
# the measured search baseline (96 configurations scored by qmla ppl), then the tables
[ "${QMLA_NO_SEARCH:-0}" = 1 ] || run "$py" "$root/scripts/allocate-search.py" "$w" 4096 "$tokens"
"$py" "$root/scripts/allocate-table.py" "$w" $budgets
run "$q" figures "$w/pareto.h5" -o "$w/figs" --only allocate-pareto,allocate-strip
