#!/bin/sh
# experiments/transforms/run-six-cell.sh — the issue-10 protocol on a
# six-cell capture: learn/calibrate on TRAIN, choose QuantMLA's best step on
# HELD (--heldout-cells), evaluate on EVAL, which no method ever sees.
#
#   sh experiments/transforms/run-six-cell.sh            # the trained model
#   CAP=syn.h5 TRAIN=synth-s0,synth-s1 HELD=synth-s2,synth-s3 \
#     EVAL=synth-s4,synth-s5 STEPS=20 sh experiments/transforms/run-six-cell.sh
#
# Outputs in $OUT (default /tmp/qmla-six-cell): the transforms files, the
# /eval files (eval-*.h5), their printed tables (eval-*.txt) and the learning
# lines (learn-*.txt), the tables (tables.md, tabulate-six-cell.py) and the
# figure (figs/transforms-nmse.png). Run from the repository root. Steps, in the order of
# what the issue's Done-when needs first:
#   1. baselines RTN, SmoothQuant† (α 0.5), QuaRot† calibrated on TRAIN;
#   2. QuantMLA C4R4, both paths (content-only file from the same run,
#      qmla learn --also-content);
#   3. eval C4R4 on EVAL, policy none and sink4/local128;
#   4. objective ablation: both paths against plain reconstruction
#      (--objective recon), eval C4R4 none;
#   5. C2R4 (skipped with C2=0): QuantMLA learned at C2R4, eval C2R4 none.
set -e
Q=${QMLA:-build/cli/qmla}
CAP=${CAP:-/tmp/tiny-mla-full.h5}
OUT=${OUT:-/tmp/qmla-six-cell}
TH=${THREADS:-2}
STEPS=${STEPS:-300}
TRAIN=${TRAIN:-prose-s0,code-s0}
HELD=${HELD:-prose-s1,code-s1}
EVAL=${EVAL:-prose-s2,code-s2}
C2=${C2:-1}
mkdir -p "$OUT"
echo "run-six-cell: $CAP train $TRAIN held-out $HELD eval $EVAL steps $STEPS threads $TH ($(date -u +%H:%M:%S))"
[ "${CHECK:-1}" = 0 ] || $Q check "$CAP" -q   # CHECK=0: already checked
for m in rtn smoothquant quarot; do
  $Q learn "$CAP" -o "$OUT/$m.h5" --method $m --train-cells "$TRAIN" --force 2> "$OUT/learn-$m.txt"
done
learn() { # learn OUTFILE LOG ARGS...: stderr (the progress lines) to LOG
  o=$1; lg=$2; shift 2
  $Q learn "$CAP" -o "$o" --steps "$STEPS" --seed 0 --train-cells "$TRAIN" --heldout-cells "$HELD" \
     --threads "$TH" "$@" 2> "$lg" || { cat "$lg" >&2; exit 1; }
  cat "$lg"
}
learn "$OUT/qm-both.h5" "$OUT/learn-qm-both.txt" --path both --config C4R4 --also-content "$OUT/qm-content.h5"
echo "run-six-cell: C4R4 learned ($(date -u +%H:%M:%S))"
evaluate() { # evaluate CONFIG POLICY TAG TRANSFORMS...
  cfg=$1; pol=$2; tag=$3; shift 3
  args=""
  for t in "$@"; do args="$args --transforms $OUT/$t.h5"; done
  # shellcheck disable=SC2086
  $Q eval "$CAP" --config "$cfg" --policy "$pol" --cells "$EVAL" --threads "$TH" $args \
     -o "$OUT/eval-$tag.h5" > "$OUT/eval-$tag.txt"
  cat "$OUT/eval-$tag.txt"
}
evaluate C4R4 none c4-none rtn smoothquant quarot qm-content qm-both
evaluate C4R4 sink4/local128 c4-sink4-local128 rtn smoothquant quarot qm-content qm-both
learn "$OUT/qm-recon.h5" "$OUT/learn-qm-recon.txt" --path both --config C4R4 --objective recon
evaluate C4R4 none objective-c4-none rtn qm-recon qm-both
echo "run-six-cell: C4R4 done ($(date -u +%H:%M:%S))"
if [ "$C2" != 0 ]; then
  learn "$OUT/qm-both-c2.h5" "$OUT/learn-qm-both-c2.txt" --path both --config C2R4 \
        --also-content "$OUT/qm-content-c2.h5"
  evaluate C2R4 none c2-none rtn smoothquant quarot qm-content-c2 qm-both-c2
fi
# the tables of the README and the figure of per-layer output NMSE
/usr/bin/python3 experiments/transforms/tabulate-six-cell.py "$OUT" > "$OUT/tables.md"
figs="$OUT/eval-c4-none.h5"
labs="C4R4 - learn $(echo "$TRAIN" | tr , +) / eval $(echo "$EVAL" | tr , +)"
if [ -f "$OUT/eval-c2-none.h5" ]; then figs="$figs $OUT/eval-c2-none.h5"; labs="$labs,C2R4"; fi
# shellcheck disable=SC2086
$Q figures $figs --labels "$labs" -o "$OUT/figs" --only transforms-nmse
echo "run-six-cell: done ($(date -u +%H:%M:%S))"
