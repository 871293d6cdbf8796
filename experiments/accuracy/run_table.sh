#!/usr/bin/env bash
# experiments/accuracy/run_table.sh — the BF16 and RTN rows of the accuracy
# table (issue 11; paper Tables 1 and 3 on tiny-mla): bits/byte on held-out
# prose and code for the fp32 and bf16 caches, and RTN at C4R4 and C2R4 with
# and without sink4/local128, on the first WINDOWS windows of 512 bytes of
# each text (the training run's protocol; WINDOWS=0: the whole text).
#   bash experiments/accuracy/run_table.sh [BUILD_DIR=build] [WINDOWS=100] [THREADS=2]
# Writes experiments/accuracy/table.h5 (/ppl, one row_NNN per row) and the
# printed table experiments/accuracy/table.txt.
set -eu
cd "$(dirname "$0")/../.."
B=${1:-build} N=${2:-100} J=${3:-2}
tok=()
[ "$N" != 0 ] && tok=(--tokens $((N * 512)))
out=experiments/accuracy
{
  echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) windows ${N} threads $J"
  "$B/analysis/qmla" ppl models/tiny-mla --text data/heldout/prose.txt.gz \
    --text data/heldout/code.txt.gz --config fp32,bf16,C4R4,C2R4 \
    --policy none,sink4/local128 "${tok[@]}" --threads "$J" -o "$out/table.h5"
} 2>&1 | tee "$out/table.txt"
