#!/usr/bin/env bash
# test_learn_cli.sh — `qmla learn` and `qmla eval` end to end on a small
# synth capture (tiny shape, 3 cells of 2 sequences, T 48, 2 layers):
#   baselines written in the transforms format (h5py: datasets, shapes,
#   attributes); QuantMLA learning with a progress line per layer and path;
#   the same seed gives the same file for 1 and 2 threads (datasets equal);
#   resume keeps finished layers (an interrupted run simulated by --layers
#   and settings refused when they differ); eval's /eval group (h5py: one
#   row per method, layer and cell; nmse_out equal to the printed table;
#   bound_ok everywhere); --also-content writes what --path content writes
#   (datasets and settings equal); usage errors exit 2.
# Needs QMLA_BIN, QMLA_SOURCE_ROOT, QMLA_PYTHON (set by meson).
set -uo pipefail
source "$(dirname "$0")/../support/cli_lib.sh"
need_python
cap=$work/cap.h5
expect 0 "synth" -- "$QMLA" synth -o "$cap" --shape tiny --cells 3 --seqs 2 --tokens 48 --layers 2 --seed 5 --threads 1
for m in rtn smoothquant quarot; do
  expect 0 "learn $m" -- "$QMLA" learn "$cap" -o "$work/$m.h5" --method $m --train-cells synth-s0
  containsF "wrote $work/$m.h5: $m, 2 layers" "learn $m summary"
done
expect 0 "format" -- "$PY" - "$work/smoothquant.h5" <<'PY'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
assert f.attrs["format"] == "qmla-transforms" and f.attrs["method"] == "smoothquant"
assert abs(f.attrs["smoothquant_alpha"] - 0.5) < 1e-12
for l in ("0", "1"):
    g = f["layers"][l]
    R = g["content/rotation"][...]
    assert R.shape == (64, 64) and g["content/scale"].shape == (64,)
    assert g["rope/angle"].shape == (8,) and g["rope/scale"].shape == (8,)
    assert np.allclose(R.T @ R, np.eye(64))
    assert g["rope"].attrs["rope_pairing"] == "interleaved"
PY
expect 0 "learn quantmla, 1 thread" -- "$QMLA" learn "$cap" -o "$work/qm1.h5" --train-cells synth-s0 \
  --heldout-cells synth-s1 --steps 12 --seed 3 --threads 1
contains "layer 0 content steps 12" "content progress line"
contains "layer 1 rope .*steps 12" "rope progress line"
expect 0 "learn quantmla, 2 threads" -- "$QMLA" learn "$cap" -o "$work/qm2.h5" --train-cells synth-s0 \
  --heldout-cells synth-s1 --steps 12 --seed 3 --threads 2
expect 0 "same file for 1 and 2 threads" -- "$PY" - "$work/qm1.h5" "$work/qm2.h5" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
def walk(g, out, pre=""):
    for k, v in g.items():
        if isinstance(v, h5py.Dataset): out[pre + k] = v[...]
        else: walk(v, out, pre + k + "/")
da, db = {}, {}
walk(a, da); walk(b, db)
assert da.keys() == db.keys() and len(da) == 10
for k in da: assert np.array_equal(da[k], db[k]), k
assert a.attrs["complete"] == 1
assert not np.allclose(da["layers/0/content/rotation"], np.eye(64)), "rotation not learned"
PY
# resume: layer 0 only, then both layers: layer 0 kept
expect 0 "partial run" -- "$QMLA" learn "$cap" -o "$work/qm3.h5" --train-cells synth-s0 --steps 12 --seed 3 --threads 1 --layers 0
expect 2 "other settings refused" -- "$QMLA" learn "$cap" -o "$work/qm3.h5" --train-cells synth-s0 --steps 13 --seed 3 --threads 1 --layers 0
containsF "exists with other settings" "settings message"
expect 0 "rerun is a no-op" -- "$QMLA" learn "$cap" -o "$work/qm3.h5" --train-cells synth-s0 --steps 12 --seed 3 --threads 1 --layers 0
containsF "layer 0: kept from" "resumed layer"
# --attn-precision f64: recorded in the settings (f32 adds nothing), a float32
# rerun does not resume the double run's file, a bad value and a baseline
# method are usage errors
expect 0 "learn f64" -- "$QMLA" learn "$cap" -o "$work/q64.h5" --path content --train-cells synth-s0 \
  --steps 4 --seed 3 --threads 2 --attn-precision f64
expect 0 "f64 settings" -- "$PY" - "$work/q64.h5" "$work/qm3.h5" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
sa, sb = a.attrs["settings"], b.attrs["settings"]
sa = sa.decode() if isinstance(sa, bytes) else sa
sb = sb.decode() if isinstance(sb, bytes) else sb
assert sa.endswith(" attn_precision=f64"), sa
assert "attn_precision" not in sb, sb
o = [float(a["layers"][l].attrs["objective_content_best"]) for l in ("0", "1")]
assert all(np.isfinite(x) and x > 0 for x in o), o
PY
expect 2 "f32 rerun of an f64 file refused" -- "$QMLA" learn "$cap" -o "$work/q64.h5" --path content \
  --train-cells synth-s0 --steps 4 --seed 3 --threads 2 --attn-precision f32
containsF "exists with other settings" "f32 rerun message"
expect 0 "f64 rerun is a no-op" -- "$QMLA" learn "$cap" -o "$work/q64.h5" --path content \
  --train-cells synth-s0 --steps 4 --seed 3 --threads 2 --attn-precision f64
containsF "complete for this capture and settings" "f64 rerun kept"
expect 2 "bad --attn-precision" -- "$QMLA" learn "$cap" -o "$work/qbad.h5" --attn-precision f16
containsF "--attn-precision" "bad precision names the option"
expect 2 "f64 with a baseline" -- "$QMLA" learn "$cap" -o "$work/qbad.h5" --method rtn --attn-precision f64
containsF "expected --method quantmla" "f64 baseline message"
if [ -e "$work/qbad.h5" ]; then bad "refused f64 baseline left $work/qbad.h5"; else ok; fi
# --path both --also-content: the content-only file equals a --path content run
expect 0 "learn both + also-content" -- "$QMLA" learn "$cap" -o "$work/qb.h5" --path both --also-content "$work/qc1.h5" \
  --train-cells synth-s0 --heldout-cells synth-s1 --steps 6 --seed 2 --threads 2
containsF "(content path only), 2 layers" "also-content summary"
expect 0 "learn content" -- "$QMLA" learn "$cap" -o "$work/qc2.h5" --path content \
  --train-cells synth-s0 --heldout-cells synth-s1 --steps 6 --seed 2 --threads 1
expect 0 "also-content = --path content" -- "$PY" - "$work/qc1.h5" "$work/qc2.h5" "$work/qb.h5" <<'PY'
import sys, h5py, numpy as np
a, b, c = (h5py.File(p, "r") for p in sys.argv[1:4])
assert a.attrs["settings"] == b.attrs["settings"] and "path=content " in a.attrs["settings"]
assert a.attrs["complete"] == 1
for l in ("0", "1"):
    for k in ("content/rotation", "content/scale", "content/gamma", "rope/angle", "rope/scale"):
        assert np.array_equal(a["layers"][l][k][...], b["layers"][l][k][...]), (l, k)
    assert np.array_equal(a["layers"][l]["content/rotation"][...], c["layers"][l]["content/rotation"][...])
    assert not np.array_equal(c["layers"][l]["rope/angle"][...], a["layers"][l]["rope/angle"][...])
    for k in ("objective_content_init", "objective_content_best"):
        assert a["layers"][l].attrs[k] == b["layers"][l].attrs[k], k
PY
expect 2 "also-content needs --path both" -- "$QMLA" learn "$cap" -o "$work/x.h5" --path content --also-content "$work/y.h5"
expect 0 "eval" -- "$QMLA" eval "$cap" --transforms "$work/rtn.h5" --transforms "$work/smoothquant.h5" \
  --transforms "$work/quarot.h5" --transforms "$work/qm1.h5" --config C4R4 --policy sink4/local16 \
  --cells synth-s2 -o "$work/ev.h5" --threads 2
contains "layer *rtn *smoothquant *quarot *quantmla" "table header"
cp "$work/out" "$work/evtxt"
expect 0 "/eval group" -- "$PY" - "$work/ev.h5" "$work/evtxt" <<'PY'
import sys, h5py, numpy as np
g = h5py.File(sys.argv[1], "r")["eval"]
m = [x.decode() for x in g["method"][...]]
assert len(m) == 8 and sorted(set(m)) == ["quantmla", "quarot", "rtn", "smoothquant"]
assert set(g["layer"][...]) == {0, 1} and all(c == b"synth-s2" for c in g["cell"][...])
assert g["bound_ok"][...].all() and (g["rope_bound_nmse"][...] >= g["nmse_out_rope"][...]).all()
assert g.attrs["config"] == "C4R4" and g.attrs["policy"] == "sink4/local16"
rows = [l.split() for l in open(sys.argv[2]) if l.split() and l.split()[0] in ("0", "1")]
for r in rows:
    for k, name in enumerate(["rtn", "smoothquant", "quarot", "quantmla"]):
        v = [x for x, mm, l in zip(g["nmse_out"][...], m, g["layer"][...]) if mm == name and l == int(r[0])][0]
        assert abs(v - float(r[1 + k])) <= 1e-4 * v, (r, name, v)
PY
if command -v gnuplot >/dev/null; then
  expect 0 "figure" -- "$QMLA" figures "$work/ev.h5" -o "$work/figs" --only transforms-nmse
  expect 0 "figure size" -- "$PY" -c 'import struct,sys; b=open(sys.argv[1],"rb").read(); assert struct.unpack(">II", b[16:24]) == (540, 460)' "$work/figs/transforms-nmse.png"
fi
expect 2 "eval without --config" -- "$QMLA" eval "$cap" --transforms "$work/rtn.h5" -o "$work/x.h5"
expect 2 "bad config" -- "$QMLA" learn "$cap" -o "$work/x.h5" --method rtn --config C3R4
expect 2 "bad path" -- "$QMLA" learn "$cap" -o "$work/x.h5" --path all
expect 2 "train = held-out" -- "$QMLA" learn "$cap" -o "$work/x.h5" --train-cells synth-s0 --heldout-cells synth-s0
expect 2 "missing cell" -- "$QMLA" learn "$cap" -o "$work/x.h5" --method rtn --train-cells nope
expect 2 "not a transforms file" -- "$QMLA" eval "$cap" --transforms "$cap" --config C4R4 -o "$work/x.h5"
containsF "attribute format" "format message"
# -o an existing results file (eval's): refused and left as it was (learn
# replaced it with the transforms, exit 0); an earlier transforms file is replaced
sum0=$(sha256sum <"$work/ev.h5")
expect 2 "learn -o a results file" -- "$QMLA" learn "$cap" -o "$work/ev.h5" --method rtn --train-cells synth-s0
containsF "expected a new name or an earlier qmla-transforms file" "learn -o results: refusal"
[ "$(sha256sum <"$work/ev.h5")" = "$sum0" ] && ok || bad "learn -o a results file: it changed"
# ... and refused before any learning (it was refused only when writing)
expect 2 "learn quantmla -o a results file" -- "$QMLA" learn "$cap" -o "$work/ev.h5" --train-cells synth-s0 --steps 5
lacks "qmla learn: layer" "learn quantmla -o a results file: refused before learning"
cp "$cap" "$work/cap2.h5"
expect 2 "learn --also-content a capture" -- "$QMLA" learn "$cap" -o "$work/qa.h5" --train-cells synth-s0 --steps 5 --also-content "$work/cap2.h5"
lacks "qmla learn: layer" "learn --also-content a capture: refused before learning"
containsF 'of format "qmla-capture"' "learn --also-content a capture: format named"
[ ! -e "$work/qa.h5" ] && cmp -s "$cap" "$work/cap2.h5" && ok || bad "learn --also-content a capture: a file was written or changed"
expect 0 "learn -o an earlier transforms file" -- "$QMLA" learn "$cap" -o "$work/rtn.h5" --method rtn --train-cells synth-s0
finish test_learn_cli
