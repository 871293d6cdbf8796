#!/bin/sh
# experiments/transforms/run.sh — the transforms experiment on the trained
# tiny-mla capture: learn/calibrate on prose-s0, evaluate on code-s0 (and the
# reverse), C4R4. Outputs go to $OUT (default /tmp/qmla-transforms).
# Run from the repository root: sh experiments/transforms/run.sh
set -e
Q=${QMLA:-build/cli/qmla}
CAP=${CAP:-data/tiny-mla-default.h5}
OUT=${OUT:-/tmp/qmla-transforms}
TH=${THREADS:-2}
mkdir -p "$OUT"
for dir in "prose-s0 code-s0" "code-s0 prose-s0"; do
  set -- $dir; tr=$1; ev=$2
  for m in rtn smoothquant quarot; do
    $Q learn "$CAP" -o "$OUT/$m-$tr.h5" --method $m --train-cells $tr
  done
  for p in content both; do
    $Q learn "$CAP" -o "$OUT/qm-$p-$tr.h5" --path $p --config C4R4 --steps 300 --seed 0 \
       --train-cells $tr --heldout-cells none --threads $TH
  done
  for pol in none sink4/local128; do
    tag=$(echo $pol | tr / -)
    $Q eval "$CAP" --config C4R4 --policy $pol --cells $ev --threads $TH \
       --transforms "$OUT/rtn-$tr.h5" --transforms "$OUT/smoothquant-$tr.h5" \
       --transforms "$OUT/quarot-$tr.h5" --transforms "$OUT/qm-content-$tr.h5" \
       --transforms "$OUT/qm-both-$tr.h5" -o "$OUT/eval-$tr-$tag.h5" | tee "$OUT/eval-$tr-$tag.txt"
  done
done
# C2R4 (one direction): QuantMLA learned at C2R4; the baselines do not
# depend on the bit width.
$Q learn "$CAP" -o "$OUT/qm-both-c2-prose-s0.h5" --path both --config C2R4 --steps 300 --seed 0 \
   --train-cells prose-s0 --heldout-cells none --threads $TH
$Q eval "$CAP" --config C2R4 --policy none --cells code-s0 --threads $TH \
   --transforms "$OUT/rtn-prose-s0.h5" --transforms "$OUT/smoothquant-prose-s0.h5" \
   --transforms "$OUT/quarot-prose-s0.h5" --transforms "$OUT/qm-both-c2-prose-s0.h5" \
   -o "$OUT/eval-c2-prose-s0-none.h5" | tee "$OUT/eval-c2-prose-s0-none.txt"
# Objective ablation (paper Table 7): both paths learned against plain cache
# reconstruction instead of the function-aligned objectives.
$Q learn "$CAP" -o "$OUT/qm-recon-prose-s0.h5" --path both --objective recon --config C4R4 --steps 300 \
   --seed 0 --train-cells prose-s0 --heldout-cells none --threads $TH
$Q eval "$CAP" --config C4R4 --policy none --cells code-s0 --threads $TH \
   --transforms "$OUT/rtn-prose-s0.h5" --transforms "$OUT/qm-recon-prose-s0.h5" \
   --transforms "$OUT/qm-both-prose-s0.h5" -o "$OUT/eval-objective-prose-s0-none.h5" \
   | tee "$OUT/eval-objective-prose-s0-none.txt"
