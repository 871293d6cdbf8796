#!/usr/bin/env bash
# experiments/tiny-mla/capture-native.sh — the captures of capture.sh made by
# qmla's native engine (`qmla capture`, lib/engine/capture_native.c) on any machine,
# no torch or GPU needed; same windows, same options, same file format
# (experiments/tiny-mla/README.md, "The native capture"). From the
# repository root, after `ninja -C build`:
#
#   bash experiments/tiny-mla/capture-native.sh [default|full|both] [THREADS]
#
# default: the embedded default's options into /tmp/tiny-mla-default-native.h5,
#   then compared dataset by dataset with data/tiny-mla-default.h5 (the
#   transformers capture; compare_captures.py, /usr/bin/python3 + h5py).
# full: the six-cell capture /tmp/tiny-mla-full.h5 (two corpora x seeds 0, 1,
#   2, 8 x 512 tokens, all 6 layers, float16, about 686 MB; 34 s of CPU),
#   then `qmla check` and its SHA-256.
set -euo pipefail
what=${1:-full}
threads=${2:-2}
Q=${QMLA:-build/cli/qmla}
cap="$Q capture models/tiny-mla --model-name qmla/tiny-mla --corpus prose=data/heldout/prose.txt.gz
  --corpus code=data/heldout/code.txt.gz --store float16 --threads $threads --force"
if [ "$what" != full ]; then
  $cap -o /tmp/tiny-mla-default-native.h5 --seeds 0 --seqs 1 --tokens 160 --gzip 9 --no-pre
  /usr/bin/python3 experiments/tiny-mla/compare_captures.py /tmp/tiny-mla-default-native.h5 \
    data/tiny-mla-default.h5 --quiet
fi
if [ "$what" != default ]; then
  $cap -o /tmp/tiny-mla-full.h5 --seeds 0,1,2 --seqs 8 --tokens 512 --gzip 0
  $Q check /tmp/tiny-mla-full.h5 -q --threads "$threads"
  sha256sum /tmp/tiny-mla-full.h5
fi
