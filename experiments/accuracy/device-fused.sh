#!/usr/bin/env bash
# experiments/accuracy/device-fused.sh — on the accelerator machine (torch +
# transformers; GSL and jansson carried in .deb/, scripts/device-prep.sh),
# from the repository root:  OUT=DIR bash experiments/accuracy/device-fused.sh
# Builds qmla, makes the QuaRot† transforms and the QuantMLA C4R4 transforms
# of the accuracy table (run_table.sh's commands), fuses each into a copy of
# models/tiny-mla with `qmla fuse`, and has transformers load the fused
# checkpoints (hf_fused.py): with the cache unquantized the NLL must not move.
set -euo pipefail
OUT=${OUT:?set OUT}
source scripts/device-env.sh
B=/tmp/qmla-fused-build TF=/tmp/qmla-fused-tf
meson setup "$B" --buildtype=release -Dcuda=disabled >"$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 1; }
ninja -C "$B" cli/qmla >"$OUT/build.log" 2>&1 || { grep -A3 error "$OUT/build.log" | head -40; exit 1; }
Q=$B/cli/qmla
mkdir -p "$TF"
CAP=data/tiny-mla-default.h5 CELLS=prose-s0,code-s0
"$Q" learn $CAP -o "$TF/quarot.h5" --method quarot --train-cells $CELLS
"$Q" learn $CAP -o "$TF/qm-both-C4R4.h5" --path both --config C4R4 --steps 300 --seed 0 \
  --train-cells $CELLS --heldout-cells none --threads "$(nproc)" >"$OUT/learn.log" 2>&1
for t in quarot qm-both-C4R4; do
  "$Q" fuse models/tiny-mla --transforms "$TF/$t.h5" -o "/tmp/fused-$t"
  mkdir -p "$OUT/$t"
  python3 experiments/accuracy/hf_fused.py "/tmp/fused-$t" --out "$OUT/$t" --windows 4
done
