#!/usr/bin/env bash
# experiments/eval/device-eval.sh — on the accelerator machine (torch +
# transformers; GSL and jansson carried in .deb/, scripts/device-prep.sh),
# from the repository root:  OUT=DIR bash experiments/eval/device-eval.sh
# Builds qmla with the CUDA kernels (libqmla.so then holds the CUDA launcher),
# runs the binding's tests there (qdq_cuda against the CPU quantizer), scores
# the first W windows of both held-out texts with the C engine (`qmla ppl`,
# plain and with QuaRot† transforms folded in), then the same windows through
# transformers with the binding's cache hook (eval_hook.py tiny), and the hook
# on the four MLA families' random configurations (eval_hook.py families).
set -uo pipefail
OUT=${OUT:?set OUT}
W=${W:-64}
source scripts/device-env.sh
B=/tmp/qmla-eval-build TF=/tmp/qmla-eval-tf G=/tmp/qmla-eval-logs
mkdir -p "$G"
meson setup "$B" --buildtype=release -Dcuda=enabled >"$G/setup.log" 2>&1 || { tail -30 "$G/setup.log"; exit 1; }
ninja -C "$B" cli/qmla python/libqmla.so >"$G/build.log" 2>&1 || { grep -A3 error "$G/build.log" | head -40; exit 1; }
Q=$B/cli/qmla
export QMLA_LIB=$B/python/libqmla.so QMLA_SOURCE_ROOT=$PWD
rc=0
python3 python/test_qmla_files.py >"$G/test_python_files.log" 2>&1 || rc=1
tail -1 "$G/test_python_files.log"
python3 python/test_qmla.py >"$G/test_python.log" 2>&1 || rc=1
tail -1 "$G/test_python.log"
mkdir -p "$TF"
"$Q" learn data/tiny-mla-default.h5 -o "$TF/quarot.h5" --method quarot --train-cells prose-s0,code-s0 >"$G/learn.log" 2>&1
TEXTS="--text data/heldout/prose.txt.gz --text data/heldout/code.txt.gz"
"$Q" ppl models/tiny-mla $TEXTS --config fp32,bf16,C4R4,C2R4 --tokens $((W * 512)) \
  -o "$OUT/engine.h5" >"$G/engine.log" 2>&1 || rc=1
"$Q" ppl models/tiny-mla $TEXTS --config C4R4 --transforms "$TF/quarot.h5" --transforms-only \
  --tokens $((W * 512)) -o "$OUT/engine-quarot.h5" >"$G/engine-quarot.log" 2>&1 || rc=1
cat "$G/engine.log" "$G/engine-quarot.log"
python3 experiments/eval/eval_hook.py tiny --out "$OUT" --windows "$W" --engine "$OUT/engine.h5" \
  --transforms "$TF/quarot.h5" --engine-transforms "$OUT/engine-quarot.h5" >"$G/eval_tiny.log" 2>&1 || rc=1
tail -3 "$G/eval_tiny.log"
python3 experiments/eval/eval_hook.py families --out "$OUT" >"$G/eval_families.log" 2>&1 || rc=1
tail -3 "$G/eval_families.log"
# one log (the device returns few files): the tests, the engine, the hook runs
for f in test_python_files test_python learn engine engine-quarot eval_tiny eval_families; do
  echo "=== $f.log"; grep -v "^.Loading weights" "$G/$f.log"
done >"$OUT/device-eval.log"
exit $rc
