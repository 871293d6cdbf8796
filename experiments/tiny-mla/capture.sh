#!/usr/bin/env bash
# experiments/tiny-mla/capture.sh — on the accelerator machine (torch +
# transformers + h5py; GSL from .deb/ as in docs/device.md), from the
# repository root:
#
#   OUT=/some/dir bash experiments/tiny-mla/capture.sh [default|full|both]
#
# default: the embedded default capture data/tiny-mla-default.h5 — all 6
#   layers of models/tiny-mla, cells prose-s0 and code-s0 from the held-out
#   text (data/heldout), 1 sequence x 160 tokens each (BOS first), float32
#   compute, float16 storage, gzip 9, without the optional _pre tensors: the
#   weights alone take 5.1 MB and the file must stay under 12 MB.
# full: the paper's protocol (App. B.1): two corpora x three seeds = six
#   cells, 8 non-overlapping 512-token sequences each, all layers, written to
#   /tmp (about 0.6 GB, float16), then `qmla check` and `qmla sweep` on it; the
#   sweep results (small) go to $OUT/tiny-mla-full-sweep.h5.
# Without an accelerator: experiments/tiny-mla/capture-native.sh makes the
# same captures with qmla's native engine (`qmla capture`, same windows).
set -euo pipefail
what=${1:-both}
OUT=${OUT:?set OUT to an output directory}
export PYTHONUNBUFFERED=1
zcat data/heldout/prose.txt.gz > /tmp/prose.txt
zcat data/heldout/code.txt.gz > /tmp/code.txt
cap="python3 experiments/capture/qmla_capture.py --model models/tiny-mla --model-name qmla/tiny-mla \
  --corpus prose=/tmp/prose.txt --corpus code=/tmp/code.txt --dtype float32 --store float16 --force"
if [ "$what" != full ]; then
  $cap -o "$OUT/tiny-mla-default.h5" --seeds 0 --seqs 1 --tokens 160 --gzip 9 --no-pre
  ls -l "$OUT/tiny-mla-default.h5"
fi
if [ "$what" != default ]; then
  $cap -o /tmp/tiny-mla-full.h5 --seeds 0,1,2 --seqs 8 --tokens 512 --gzip 0
  ls -l /tmp/tiny-mla-full.h5
  [ -d .deb ] && source scripts/device-env.sh
  [ -f /tmp/qmla-build/build.ninja ] || meson setup /tmp/qmla-build -Dcuda=disabled 2>&1 | tail -25
  ninja -C /tmp/qmla-build cli/qmla | tail -3
  /tmp/qmla-build/cli/qmla check /tmp/tiny-mla-full.h5 -q --threads "$(nproc)"
  /tmp/qmla-build/cli/qmla sweep /tmp/tiny-mla-full.h5 -o "$OUT/tiny-mla-full-sweep.h5" -v --threads "$(nproc)"
fi
