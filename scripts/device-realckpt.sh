#!/usr/bin/env bash
# scripts/device-realckpt.sh — on the accelerator machine (transformers and
# torch in its Python): the native engine on real-checkpoint families
# against transformers' own classes (issue 20). Builds qmla (CPU only),
# writes the random-weight checkpoints of tests/engine/make_family_ckpt.py
# (DeepseekV2/V3, Glm4MoeLite, LongcatFlash, MoE and dense layers, YaRN /
# default / linear / llama3 RoPE, both pairings, F32 / BF16 / FP8), scores
# each with `qmla ppl --config fp32`, then tests/engine/hf_family_nll.py
# computes transformers' NLL of the same windows (DeepseekV2ForCausalLM,
# DeepseekV3ForCausalLM, Glm4MoeLiteForCausalLM, LongcatFlashForCausalLM)
# and compares (1e-5 relative); last, `qmla capture` against the Python
# capture tool (experiments/capture/qmla_capture.py, float32 on the CPU) on
# three YaRN checkpoints and LongcatFlash, compared dataset by dataset
# (experiments/tiny-mla/compare_captures.py). transformers 5.17's
# from_pretrained refuses LongcatFlash checkpoints (the fused
# experts.gate_up_proj has rows for the zero experts too, [E + Z, 2I, D],
# the per-expert tensors give [E, 2I, D];
# docs/evidence/h200-realckpt-longcat-2026-12-02.log): hf_family_nll.py and
# the Python capture tool build those from config.json and fill them by name
# (experiments/capture/hf_by_name.py). Logs in $OUT (realckpt.log).
# QMLA_REALCKPT_FAMS="name ..." limits the run to those checkpoints (all
# when unset), QMLA_REALCKPT_CAPS="name ..." the capture comparisons (the
# four below when unset). The copy needs experiments/capture/qmla_capture*.py and
# experiments/tiny-mla/compare_captures.py (scripts/device-copy.sh leaves
# experiments/ out: copy them in).
# Usage (device call, carry [".deb"] or the copy's .deb):
#   bash scripts/device-realckpt.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
LOG=$OUT/realckpt.log
exec > >(tee "$LOG") 2>&1
source scripts/device-env.sh
PY=${QMLA_DEVICE_PY:-/opt/torch/.venv/bin/python3}
[ -x "$PY" ] || PY=$(command -v python3)
echo "== $(date -u +%FT%TZ) commit $(cat .qmla-commit 2>/dev/null || git describe --always --dirty 2>/dev/null)"
"$PY" -c 'import torch, transformers; print("python", __import__("sys").version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)'
B=${QMLA_REALCKPT_BUILD:-/tmp/build-realckpt}
if [ ! -f $B/build.ninja ]; then
  meson setup $B --buildtype=release -Dcuda=disabled -Dpython="$PY" >/tmp/setup.log 2>&1 ||
    { cp /tmp/setup.log "$OUT/"; tail -30 /tmp/setup.log; exit 1; }
fi
ninja -C $B cli/qmla >/tmp/build.log 2>&1 || { cp /tmp/build.log "$OUT/"; grep -A3 error /tmp/build.log | head -40; exit 1; }
echo "== built at ${SECONDS}s"
QMLA=$B/cli/qmla
W=/tmp/realckpt
rm -rf $W
"$PY" tests/engine/make_family_ckpt.py write $W || exit 1
rc=0
FAMS=${QMLA_REALCKPT_FAMS:-}
want() { [ -z "$FAMS" ] || [[ " $FAMS " == *" $1 "* ]]; }
for d in $W/*/; do
  fam=$(basename "$d")
  case $fam in *-deq) continue ;; esac
  want "$fam" || continue
  "$QMLA" ppl "$W/$fam" --text $W/text.txt --config fp32 --context 32 --tokens 96 --threads 1 \
    -o "$W/$fam.h5" >"$W/$fam.ppl.log" 2>&1 || { echo "qmla ppl $fam failed"; cat "$W/$fam.ppl.log"; rc=1; }
  grep -h "peak resident" "$W/$fam.ppl.log" | sed "s|^|$fam: |"
done
echo "== transformers at ${SECONDS}s"
"$PY" tests/engine/hf_family_nll.py $W $FAMS || rc=1
echo "== captures at ${SECONDS}s"
for fam in ${QMLA_REALCKPT_CAPS:-v3-yarn-interleaved-bf16 v2-greedy-yarn-f32 v3-noaux-yarn-half-fp8 longcat-flash-bf16}; do
  want "$fam" || continue
  src=$W/$fam
  [ -d "$W/$fam-deq" ] && src=$W/$fam-deq
  "$QMLA" capture "$W/$fam" --corpus t=$W/text.txt --seqs 2 --tokens 32 --threads 1 \
    -o "$W/$fam.q.h5" >"$W/$fam.qcap.log" 2>&1 || { echo "qmla capture $fam failed"; tail -5 "$W/$fam.qcap.log"; rc=1; }
  timeout 120 "$PY" experiments/capture/qmla_capture.py --model "$src" -o "$W/$fam.t.h5" \
    --corpus t=$W/text.txt --seqs 2 --tokens 32 --dtype float32 --store float32 --device cpu \
    >"$W/$fam.tcap.log" 2>&1 || { echo "qmla_capture.py $fam failed"; tail -8 "$W/$fam.tcap.log"; rc=1; continue; }
  grep -h "softmax scale" "$W/$fam.tcap.log" | sed "s|^|$fam: |"
  # transformers' V3 path returns the rotated channels de-interleaved, and the
  # Python tool stores them so (rope_pairing half); qmla capture keeps the
  # checkpoint's interleaved order: compare in the reference's layout
  "$PY" - "$W/$fam.q.h5" "$W/$fam.t.h5" <<'PYX'
import sys, shutil, h5py, numpy as np
q, t = sys.argv[1:]
pq = h5py.File(q)["config"].attrs["rope_pairing"]; pt = h5py.File(t)["config"].attrs["rope_pairing"]
pq, pt = [x.decode() if isinstance(x, bytes) else str(x) for x in (pq, pt)]
print(f"rope_pairing: qmla {pq}, qmla_capture.py {pt}")
if pq == "interleaved" and pt == "half":
    shutil.copy(q, q + ".tmp")
    with h5py.File(q + ".tmp", "r+") as f:
        for l in f["layers"]:
            for c in f["layers"][l]["cells"].values():
                for k in ("k_rope", "q_rope", "k_rope_pre", "q_rope_pre"):
                    if k in c:
                        a = c[k][...]
                        d = a.shape[-1]
                        perm = list(range(0, d, 2)) + list(range(1, d, 2))
                        del c[k]
                        c[k] = a[..., perm]
        f["config"].attrs["rope_pairing"] = "half"
    shutil.move(q + ".tmp", q)
    print("qmla's RoPE tensors de-interleaved for the comparison")
PYX
  echo "-- $fam: qmla capture vs qmla_capture.py (reference)"
  "$PY" experiments/tiny-mla/compare_captures.py "$W/$fam.q.h5" "$W/$fam.t.h5" --tol 1e-4 2>&1 | tail -25 || rc=1
done
echo "== done at ${SECONDS}s rc=$rc"
exit $rc
