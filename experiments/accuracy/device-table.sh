#!/usr/bin/env bash
# experiments/accuracy/device-table.sh — on the accelerator machine's CPU
# cores (GSL and jansson carried in .deb/, scripts/device-prep.sh), from the
# repository root:  OUT=DIR [WINDOWS=400] bash experiments/accuracy/device-table.sh
# Builds qmla without CUDA, then (1) the engine's BF16 bits/byte on the whole
# held-out texts (the training run's figure: 1.257 prose / 0.839 code) and
# (2) the accuracy table of run_table.sh on the first WINDOWS windows of each
# text, with every core. Results files and printed tables go to $OUT.
set -euo pipefail
OUT=${OUT:?set OUT} N=${WINDOWS:-400} J=$(nproc)
source scripts/device-env.sh
B=/tmp/qmla-table-build
[ -f .qmla-commit ] || echo "${QMLA_COMMIT:-unknown}" > .qmla-commit
meson setup "$B" --buildtype=release -Dcuda=disabled >"$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 1; }
ninja -C "$B" cli/qmla >"$OUT/build.log" 2>&1 || { grep -A3 error "$OUT/build.log" | head -40; exit 1; }
rm -f "$OUT/setup.log" "$OUT/build.log"
echo "== full held-out BF16 at ${SECONDS}s ($J threads)"
"$B/cli/qmla" ppl models/tiny-mla --text data/heldout/prose.txt.gz --text data/heldout/code.txt.gz \
  --config bf16 --threads "$J" -o "$OUT/heldout-bf16.h5" 2>&1 | tee "$OUT/heldout-bf16.txt"
echo "== table, $N windows, at ${SECONDS}s"
QMLA=$B/cli/qmla OUT=$OUT TF=/tmp/qmla-accuracy-transforms \
  bash experiments/accuracy/run_table.sh "$B" "$N" "$J" >/dev/null
tail -50 "$OUT/table.txt"
echo "== done at ${SECONDS}s"
