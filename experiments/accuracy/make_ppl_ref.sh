#!/bin/sh
# experiments/accuracy/make_ppl_ref.sh — regenerate tests/data/tiny_mla_ppl_ref.jsonl,
# the CI reference of tests/engine/test_ppl.sh: the independent NumPy forward
# (numpy_forward.py, float32, naive MLA form) on the first 4 windows of 512
# bytes (2,048 tokens) of each held-out text, for each cache configuration.
#   sh experiments/accuracy/make_ppl_ref.sh     (about 1 minute on 2 cores)
set -eu
cd "$(dirname "$0")/../.."
out=tests/data/tiny_mla_ppl_ref.jsonl
: > "$out.tmp"
for text in prose code; do
  for cp in "fp32 none" "bf16 none" "C4R4 none" "C2R4 none" "C4R4-q8 none" \
            "C4R4 sink4/local128" "C2R4 sink4/local128"; do
    set -- $cp
    /usr/bin/python3 experiments/accuracy/numpy_forward.py models/tiny-mla \
      data/heldout/$text.txt.gz --windows 4 --config "$1" --policy "$2" --json >> "$out.tmp"
  done
done
mv "$out.tmp" "$out"
