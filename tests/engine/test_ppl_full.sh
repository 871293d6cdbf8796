#!/usr/bin/env bash
# tests/engine/test_ppl_full.sh — `qmla ppl` with the BF16 cache on the whole
# held-out set (data/heldout/prose.txt.gz and code.txt.gz: 3,905 windows of
# 512 bytes each, 2 x 1,999,360 tokens) reproduces the training run's
# reported bits/byte within 0.005: the "final" event of
# experiments/tiny-mla/train-log.jsonl, heldout_bpb_saved_fp32 (the committed
# float16 weights run in float32: 1.2567 prose, 0.8391 code; the README's
# 1.257 / 0.839), read from the log, not copied here. Also the window and
# token counts of the full set.
# Suite "full" (tests/meson.build): the release build only, about 12 minutes
# on 2 free cores (4 M tokens at ~5,800 tokens/s); scripts/run-tests.sh skips
# it under ASan (--no-suite full).
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT, QMLA_PYTHON.
source "$(dirname "$0")/../support/cli_lib.sh"
need_python
M=$ROOT/models/tiny-mla
H=$ROOT/data/heldout
expect 0 "ppl bf16, full held-out set" -- "$QMLA" ppl "$M" --text "$H/prose.txt.gz" \
  --text "$H/code.txt.gz" --config bf16 --threads "${QMLA_TEST_THREADS:-2}" -o "$work/full.h5"
cat "$work/out"
"$PY" - "$ROOT/experiments/tiny-mla/train-log.jsonl" "$work/full.h5" <<'PY' && ok || bad "full held-out bits/byte against the training log"
import json, sys, h5py
final = [json.loads(l) for l in open(sys.argv[1]) if '"final"' in l]
assert len(final) == 1, "train-log.jsonl: expected one final event, found %d" % len(final)
ref = final[0]["heldout_bpb_saved_fp32"]
g = h5py.File(sys.argv[2], "r")["ppl"]
seen = set()
bad = 0
for k in g:
    a = g[k].attrs
    text = str(a["text"]).split("/")[-1].split(".")[0]
    d = abs(float(a["bits_per_byte"]) - ref[text])
    full = int(a["windows"]) == 3905 and int(a["tokens"]) == 3905 * 512
    ok = d <= 0.005 and full and str(a["config"]) == "bf16"
    print("%-6s bf16 %.5f  training log %.5f  |d| %.1e  windows %d  %s" % (
        text, float(a["bits_per_byte"]), ref[text], d, int(a["windows"]), "ok" if ok else "FAIL"))
    bad += not ok
    seen.add(text)
assert seen == {"prose", "code"}, seen
sys.exit(1 if bad else 0)
PY
finish test_ppl_full
