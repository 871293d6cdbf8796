#!/usr/bin/env bash
# experiments/operator/device-six-cell.sh — `qmla intervene` over all six
# cells of the six-cell capture on a machine with many cores (run there on the
# accelerator machine's 16 CPU cores; nothing here needs the GPU): builds qmla
# (GSL and jansson from .deb/ when carried, scripts/device-prep.sh), makes the
# capture natively (experiments/tiny-mla/capture-native.sh full), and runs the
# interventions with the committed defaults (32 reps, seed 1). The results do
# not depend on the thread count. From the repository root:
#   OUT=DIR bash experiments/operator/device-six-cell.sh
set -euo pipefail
OUT=${OUT:?set OUT}
[ -d .deb ] && source scripts/device-env.sh
B=/tmp/qmla-op-build
meson setup "$B" --buildtype=release -Dcuda=disabled >"$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 1; }
ninja -C "$B" cli/qmla >"$OUT/build.log" 2>&1 || { grep -A3 error "$OUT/build.log" | head -40; exit 1; }
J=$(nproc)
QMLA=$B/cli/qmla bash experiments/tiny-mla/capture-native.sh full "$J" >"$OUT/capture.log" 2>&1 || { tail -20 "$OUT/capture.log"; exit 1; }
tail -3 "$OUT/capture.log"
TIMEFORMAT="intervene: %R s wall, %U s user on $J threads"
time "$B/cli/qmla" intervene /tmp/tiny-mla-full.h5 -o "$OUT/tiny-mla-full-intervene.h5" \
  --threads "$J" 2>"$OUT/intervene.err" >"$OUT/intervene-full.txt"
cat "$OUT/intervene-full.txt"
