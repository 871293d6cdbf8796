#!/usr/bin/env bash
# tests/engine/test_fuse.sh — `qmla fuse` and `qmla ppl --transforms` end to end on
# the trained tiny-mla model (issue 11 item 6), with QuaRot† transforms of all
# layers and QuantMLA transforms learned briefly (5 steps) on layers 1 and 3
# of the default capture:
#   - with the cache unquantized (fp32), the fused checkpoint's NLL equals the
#     original's within 1e-4 nats/token on 1,024 held-out tokens, while its
#     latent norm gains and kv_b_proj have changed;
#   - the fused checkpoint with a plain C4R4 cache reproduces the original
#     model with the transforms applied by `qmla ppl --transforms` exactly,
#     and differs from plain RTN on the original (the transforms act);
#   - --dtype f16 writes float16 tensors whose fp32 NLL stays within 1e-3
#     of the original's (the rounding moves it);
#   - `qmla ppl --transforms` with the identity transforms of `--method rtn`
#     reproduces plain RTN exactly;
#   - the safetensors metadata records the source, transforms file, method,
#     command, tool version and commit; config.json is copied;
#   - refusals (exit 2, message naming the cause): a transforms file whose
#     content/gamma is not the model's (not fusible through the RMSNorm), the
#     model's own folder as output, a missing --transforms;
#   - a failure while writing (a tensor beyond float16, a full tmpfs where
#     mounting is allowed) leaves no new folder and an existing one unchanged.
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT, QMLA_PYTHON.
source "$(dirname "$0")/../support/cli_lib.sh"
need_python
M=$ROOT/models/tiny-mla
CAP=$ROOT/data/tiny-mla-default.h5
TXT=$ROOT/data/heldout/code.txt.gz
# QMLA_TEST_SMALL=1 (a sanitizer build): every check on 512 held-out tokens
# (one window) instead of 1,024
TOK=1024
[ "${QMLA_TEST_SMALL:-0}" = 1 ] && TOK=512
expect 0 "learn quarot" -- "$QMLA" learn "$CAP" -o "$work/qr.h5" --method quarot --train-cells prose-s0
expect 0 "learn rtn" -- "$QMLA" learn "$CAP" -o "$work/rtn.h5" --method rtn --train-cells prose-s0
expect 0 "learn quantmla" -- "$QMLA" learn "$CAP" -o "$work/qm.h5" --steps 5 --layers 1,3 \
  --config C4R4 --train-cells prose-s0 --heldout-cells none --threads 2
for t in qr qm; do
  expect 0 "fuse $t" -- "$QMLA" fuse "$M" --transforms "$work/$t.h5" -o "$work/F$t"
  contains "model.safetensors" "fuse reports the file"
  expect 0 "ppl fused $t" -- "$QMLA" ppl "$work/F$t" --text "$TXT" --config fp32,C4R4 --tokens $TOK \
    --threads 2 -o "$work/f$t.h5"
  expect 0 "ppl --transforms $t" -- "$QMLA" ppl "$M" --text "$TXT" --config C4R4 --tokens $TOK \
    --threads 2 --transforms "$work/$t.h5" -o "$work/t$t.h5"
  contains "folded into the weights" "ppl says the transforms are folded"
  if [ $t = qm ]; then contains "learned for C4R4" "ppl names the config a QuantMLA file was learned for"
  else contains "a baseline, used for every quantized config" "ppl says a baseline serves every config"; fi
  "$PY" - "$work/t$t.h5" <<'PY' && ok || bad "ppl --transforms rows"
import sys, h5py
g = h5py.File(sys.argv[1])["ppl"]
rows = [g[k].attrs for k in sorted(g)]
assert [(str(r["method"]), bool(str(r["transforms"]))) for r in rows] == \
    [("RTN", False), ("QuaRot" if "qr" in sys.argv[1] else "QuantMLA", True)], [dict(r) for r in rows]
assert str(g.attrs["git_commit"]) and str(g.attrs["tool_version"])
PY
done
expect 0 "ppl original" -- "$QMLA" ppl "$M" --text "$TXT" --config fp32,C4R4 --tokens $TOK --threads 2 \
  -o "$work/orig.h5"
cat > "$work/cmp.py" <<'PY'
import sys, h5py, json, struct
import numpy as np
def rows(p):
    g = h5py.File(p)["ppl"]
    return {(str(g[k].attrs["config"]), str(g[k].attrs["method"])): float(g[k].attrs["nll_nats_per_token"]) for k in g}
orig, work, M = rows(sys.argv[1]), sys.argv[2], sys.argv[3]
bad = 0
def check(cond, msg):
    global bad
    print(("ok   " if cond else "FAIL ") + msg)
    bad += not cond
def tensors(d):
    import os
    out = {}
    for fn in sorted(os.listdir(d)):
        if not fn.endswith(".safetensors"):
            continue
        b = open(os.path.join(d, fn), "rb").read()
        n = struct.unpack("<Q", b[:8])[0]
        h = json.loads(b[8:8 + n])
        for k, v in h.items():
            if k == "__metadata__":
                out[k] = v
                continue
            a, e = v["data_offsets"]
            dt = {"F32": "<f4", "F16": "<f2"}[v["dtype"]]
            out[k] = np.frombuffer(b[8 + n + a:8 + n + e], dt).reshape(v["shape"]).astype(np.float64)
    return out
T0 = tensors(M)
for t, method in (("qr", "QuaRot"), ("qm", "QuantMLA")):
    fused, tr = rows(f"{work}/f{t}.h5"), rows(f"{work}/t{t}.h5")
    d = abs(fused[("fp32", "none")] - orig[("fp32", "none")])
    check(d < 1e-4, f"{t}: fp32 NLL fused {fused[('fp32', 'none')]:.8f} original {orig[('fp32', 'none')]:.8f} |d| {d:.1e} < 1e-4")
    check(fused[("C4R4", "RTN")] == tr[("C4R4", method)],
          f"{t}: C4R4 fused+plain {fused[('C4R4', 'RTN')]:.8f} == original+transforms {tr[('C4R4', method)]:.8f}")
    check(abs(fused[("C4R4", "RTN")] - orig[("C4R4", "RTN")]) > 1e-4,
          f"{t}: C4R4 fused {fused[('C4R4', 'RTN')]:.6f} differs from plain RTN {orig[('C4R4', 'RTN')]:.6f}")
    T1 = tensors(f"{work}/F{t}")
    md = T1["__metadata__"]
    check(all(md.get(k) for k in ("qmla_fused_from", "qmla_transforms", "qmla_method", "qmla_command",
                                  "qmla_tool_version", "qmla_git_commit")), f"{t}: metadata {sorted(md)}")
    changed = [l for l in range(6) if np.abs(T1[f"model.layers.{l}.self_attn.kv_b_proj.weight"]
                                             - T0[f"model.layers.{l}.self_attn.kv_b_proj.weight"]).max() > 1e-3]
    check(changed == ([0, 1, 2, 3, 4, 5] if t == "qr" else [1, 3]), f"{t}: kv_b_proj changed in layers {changed}")
    same = all(np.array_equal(T1[k], T0[k]) for k in T0 if k != "__metadata__" and "self_attn" not in k and "layernorm" not in k.split(".")[-2])
    check(same and len(T1) == len(T0), f"{t}: the other tensors are unchanged ({len(T1)} tensors)")
sys.exit(1 if bad else 0)
PY
"$PY" "$work/cmp.py" "$work/orig.h5" "$work" "$M" && ok || bad "fused vs original"
# --dtype f16: the folded weights rounded to float16 still give the original NLL
# closely (measured 1.3e-5 nats/token on prose with learned transforms)
expect 0 "fuse f16" -- "$QMLA" fuse "$M" --transforms "$work/qr.h5" -o "$work/F16" --dtype f16
contains "(F16)" "fuse names the dtype"
expect 0 "ppl fused f16" -- "$QMLA" ppl "$work/F16" --text "$TXT" --config fp32 --tokens $TOK --threads 2 \
  -o "$work/f16.h5"
"$PY" - "$work/f16.h5" "$work/orig.h5" "$work/F16/model.safetensors" <<'PY' && ok || bad "f16 fused checkpoint"
import sys, h5py, json, struct
a, b = (h5py.File(p)["ppl"] for p in sys.argv[1:3])
fa = [float(a[k].attrs["nll_nats_per_token"]) for k in a if str(a[k].attrs["config"]) == "fp32"][0]
fb = [float(b[k].attrs["nll_nats_per_token"]) for k in b if str(b[k].attrs["config"]) == "fp32"][0]
h = open(sys.argv[3], "rb").read()
hdr = json.loads(h[8:8 + struct.unpack("<Q", h[:8])[0]])
assert all(v["dtype"] == "F16" for k, v in hdr.items() if k != "__metadata__")
print("f16 fused fp32 NLL %.8f original %.8f" % (fa, fb))
assert 0 < abs(fa - fb) < 1e-3, (fa, fb)
PY
expect 2 "bad dtype" -- "$QMLA" fuse "$M" --transforms "$work/qr.h5" -o "$work/Fz" --dtype f8
contains "f32, f16 or bf16" "bad dtype named"
expect 0 "ppl rtn transforms" -- "$QMLA" ppl "$M" --text "$TXT" --config C4R4 --tokens $TOK --threads 2 \
  --transforms "$work/rtn.h5" -o "$work/rtn_ppl.h5"
"$PY" -c 'import h5py,sys; g=h5py.File(sys.argv[1])["ppl"]; v=[float(g[k].attrs["nll_nats_per_token"]) for k in sorted(g)]; assert len(v)==2 and v[0]==v[1], v' \
  "$work/rtn_ppl.h5" && ok || bad "identity (rtn) transforms == plain RTN exactly"
test -f "$work/Fqr/config.json" && cmp -s "$work/Fqr/config.json" "$M/config.json" && ok || bad "config.json copied"
# refusals
cp "$work/qr.h5" "$work/other.h5"
"$PY" -c 'import h5py,sys; f=h5py.File(sys.argv[1],"a"); d=f["layers/2/content/gamma"]; d[5]=d[5]*1.01' "$work/other.h5"
expect 2 "gain of another model" -- "$QMLA" fuse "$M" --transforms "$work/other.h5" -o "$work/Fx"
contains "Not fusible" "refusal explains why it cannot be folded"
contains "layer 2" "refusal names the layer"
expect 2 "ppl refuses it too" -- "$QMLA" ppl "$M" --text "$TXT" --tokens 512 --config C4R4 \
  --transforms "$work/other.h5" -o "$work/x.h5"
contains "kv_a_layernorm" "ppl refusal names the norm"
expect 2 "own folder" -- "$QMLA" fuse "$M" --transforms "$work/qr.h5" -o "$M"
contains "own folder" "own folder refused"
expect 2 "no transforms" -- "$QMLA" fuse "$M" -o "$work/Fy"
contains "--transforms" "missing --transforms named"
# the output folder is checked before the model is read (a long load for a
# real checkpoint): a file, or a folder under a missing parent, is refused
# even with a model folder that does not exist
echo x > "$work/afile"
expect 2 "-o a file" -- "$QMLA" fuse "$work/nomodel" --transforms "$work/qr.h5" -o "$work/afile"
contains "afile: output folder: expected a folder" "-o a file refused first"
expect 2 "-o under a missing folder" -- "$QMLA" fuse "$work/nomodel" --transforms "$work/qr.h5" -o "$work/nodir/F"
contains "nodir/F: output folder" "-o under a missing folder refused first"
# a failed fuse leaves no folder behind (it left the new folder, empty or
# with model.safetensors and no config.json) and an existing folder as it was:
# a tensor beyond float16 (lm_head filled with 3e38), a full file system
"$PY" "$ROOT/tests/support/st_fault.py" "$M" "$work/minf" --fill lm_head.weight=3e38 && ok || bad "st_fault fill"
expect 2 "f16 overflow" -- "$QMLA" fuse "$work/minf" --transforms "$work/qr.h5" -o "$work/Fnew" --dtype f16
contains "Fnew/model.safetensors: tensor lm_head.weight: .*does not fit float16" "overflow names file and tensor"
[ ! -e "$work/Fnew" ] && ok || bad "f16 overflow left $work/Fnew"
mkdir "$work/Fold" && echo keep > "$work/Fold/keep"
expect 2 "f16 overflow into an existing folder" -- "$QMLA" fuse "$work/minf" --transforms "$work/qr.h5" \
  -o "$work/Fold" --dtype f16
[ "$(ls -A "$work/Fold")" = keep ] && ok || bad "existing folder changed: $(ls -A "$work/Fold" | tr '\n' ' ')"
# the staging folder of a run that died (no such pid) is removed by the next
mkdir "$work/Fold/.qmla-fuse.tmp.999999999" && echo part > "$work/Fold/.qmla-fuse.tmp.999999999/model.safetensors"
expect 0 "fuse into a folder with a dead run's staging" -- "$QMLA" fuse "$M" --transforms "$work/qr.h5" -o "$work/Fold"
[ "$(ls -A "$work/Fold" | tr '\n' ' ')" = "config.json generation_config.json keep model.safetensors qmla_tokenizer.json " ] \
  && ok || bad "after fuse: $(ls -A "$work/Fold" | tr '\n' ' ')"
mnt="$work/small"
mkdir -p "$mnt"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=4m tmpfs "$mnt" 2>/dev/null; then
  cleanup_extra() { umount "$mnt" 2>/dev/null; }
  expect 2 "fuse onto a full disk" -- "$QMLA" fuse "$M" --transforms "$work/qr.h5" -o "$mnt/F"
  contains "No space left on device" "full disk: cause named"
  [ -z "$(ls -A "$mnt")" ] && ok || bad "full disk: left $(ls -A "$mnt" | tr '\n' ' ')"
  umount "$mnt"
else
  echo "SKIP (full-disk part): cannot mount a small tmpfs here"
fi
finish test_fuse
