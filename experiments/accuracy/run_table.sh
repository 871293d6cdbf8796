#!/usr/bin/env bash
# experiments/accuracy/run_table.sh — the accuracy table (issue 11; paper
# Tables 1 and 3 on tiny-mla): bits/byte on held-out prose and code for the
# BF16 cache, and at C4R4 and C2R4 for RTN, SmoothQuant†, QuaRot† and
# QuantMLA, each without protection and under sink4/local128, plus the
# content-only QuantMLA rows of the cumulative ablation, on the first WINDOWS
# windows of 512 bytes of each text (the training run's protocol; WINDOWS=0:
# the whole text).
#   bash experiments/accuracy/run_table.sh [BUILD_DIR=build] [WINDOWS=100] [THREADS=2]
# (env: QMLA the binary, default BUILD_DIR/cli/qmla; OUT the output
# folder, default experiments/accuracy; TF the transforms folder)
# The transforms are calibrated / learned on both cells of the default capture
# data/tiny-mla-default.h5 (prose-s0, code-s0: 160 byte tokens each from
# data/heldout at offset 1,770,880 = window 3,458 of 512, far from the first
# WINDOWS windows scored here) into $TF (default
# /tmp/qmla-accuracy-transforms; 3 MB per file, so not committed) when absent:
#   qmla learn data/tiny-mla-default.h5 -o $TF/{rtn,smoothquant,quarot}.h5 \
#       --method M --train-cells prose-s0,code-s0
#   qmla learn data/tiny-mla-default.h5 -o $TF/qm-{both,content}-{C4R4,C2R4}.h5 \
#       --path both|content --config C4R4|C2R4 --steps 300 --seed 0 \
#       --train-cells prose-s0,code-s0 --heldout-cells none --threads THREADS
# Writes experiments/accuracy/table.h5 (/ppl: the main rows) and
# table-ablation.h5 (/ppl: QuantMLA content only, no protection), and the
# printed tables in experiments/accuracy/table.txt.
set -eu
cd "$(dirname "$0")/../.."
B=${1:-build} N=${2:-100} J=${3:-2}
Q=${QMLA:-$B/cli/qmla}
TF=${TF:-/tmp/qmla-accuracy-transforms}
CAP=data/tiny-mla-default.h5
CELLS=prose-s0,code-s0
mkdir -p "$TF"
for m in rtn smoothquant quarot; do
  [ -f "$TF/$m.h5" ] || "$Q" learn $CAP -o "$TF/$m.h5" --method $m --train-cells $CELLS
done
for cfg in C4R4 C2R4; do
  for p in both content; do
    [ -f "$TF/qm-$p-$cfg.h5" ] && [ "$(/usr/bin/python3 -c 'import h5py,sys; print(h5py.File(sys.argv[1])["/"].attrs["complete"])' "$TF/qm-$p-$cfg.h5")" = 1 ] ||
      "$Q" learn $CAP -o "$TF/qm-$p-$cfg.h5" --path $p --config $cfg --steps 300 --seed 0 \
        --train-cells $CELLS --heldout-cells none --threads "$J"
  done
done
tok=()
[ "$N" != 0 ] && tok=(--tokens $((N * 512)))
out=${OUT:-experiments/accuracy}
texts=(--text data/heldout/prose.txt.gz --text data/heldout/code.txt.gz)
{
  echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) windows ${N} threads $J transforms $TF"
  "$Q" ppl models/tiny-mla "${texts[@]}" --config bf16,C4R4,C2R4 \
    --policy none,sink4/local128 --transforms "$TF/smoothquant.h5" --transforms "$TF/quarot.h5" \
    --transforms "$TF/qm-both-C4R4.h5" --transforms "$TF/qm-both-C2R4.h5" \
    "${tok[@]}" --threads "$J" -o "$out/table.h5"
  echo "# ablation: QuantMLA content transform only (RoPE identity), no protection"
  "$Q" ppl models/tiny-mla "${texts[@]}" --config C4R4,C2R4 \
    --transforms "$TF/qm-content-C4R4.h5" --transforms "$TF/qm-content-C2R4.h5" --transforms-only \
    "${tok[@]}" --threads "$J" -o "$out/table-ablation.h5"
} 2>&1 | tee "$out/table.txt"
