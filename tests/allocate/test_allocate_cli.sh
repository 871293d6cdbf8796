#!/usr/bin/env bash
# test_allocate_cli.sh — `qmla allocate` end to end on the embedded tiny-mla
# capture (data/tiny-mla-default.h5):
#   - the operator model's gain of each width and path (pred / nmse on one
#     cell) equals `qmla predict`'s frozen operator+allocation predictor
#     sum_t w_t sigma_t of the same QDQ direction (an independent run of the
#     predict machinery), for every layer, path and width;
#   - the allocation file (h5py): one chosen candidate per layer, bytes
#     reached <= budget, pred_total the sum, and the optimum equal to a
#     NumPy brute force over every assignment of the candidates table;
#   - --transforms (RTN's identity: the plain numbers) and --policy (less
#     error, the protected tokens' BF16 bytes counted by closed form);
#   - `qmla show` and `qmla export` read it; `qmla figures` renders the
#     allocate-pareto and allocate-strip figures of the committed validation;
#   - bad input exits 2 naming the value: unknown candidate, budget not a
#     number, infeasible budget, missing capture, missing --budget;
#   - `--config ALLOC.h5` of qmla storage: the per-layer bytes and the mean;
#     of qmla eval: each layer's row equals the uniform run of its config;
#     of qmla ppl: a uniform file scores exactly as that config, files with
#     one 2-bit layer (first or last, the rest 8-bit) differ from each other
#     and lie between uniform C8R8 and C2R2; five layers at C2R8 and one at
#     C8R8 cost more than half of uniform C2R8's loss and less than all of it.
# Needs QMLA_BIN, QMLA_SOURCE_ROOT, QMLA_PYTHON (set by meson).
set -uo pipefail
source "$(dirname "$0")/../support/cli_lib.sh"
need_python
cap=$ROOT/data/tiny-mla-default.h5

# the gains against qmla predict (one cell: pred/nmse is the gain exactly)
expect 0 "allocate one cell" -- "$QMLA" allocate "$cap" --budget C4R4 --context 512 --cells code-s0 \
  --threads 1 -o "$work/one.h5"
expect 0 "predict one cell" -- "$QMLA" predict "$cap" --cells code-s0 --threads 1 -o "$work/pred.h5"
expect 0 "gains equal predict's" -- "$PY" - "$work/one.h5" "$work/pred.h5" <<'PY'
import sys, h5py, numpy as np
a = h5py.File(sys.argv[1], "r")["allocate/candidates"]
p = h5py.File(sys.argv[2], "r")["predict"]
n = 0
for path, bcol, ncol, pcol in ((0, "c_bits", "nmse_c", "pred_c"), (1, "r_bits", "nmse_r", "pred_r")):
    for i in range(len(a["layer"])):
        L, b = a["layer"][i], a[bcol][i]
        gain = a[pcol][i] / a[ncol][i]
        sel = ((p["layer"][...] == L) & (p["path"][...] == path) & (p["bits"][...] == b)
               & (p["group"][...] == 64) & (p["heldout"][...] >= 0))
        ref = np.unique(p["pred_alloc"][...][sel])
        assert len(ref) >= 1, (L, path, b)
        # INT4 appears at three NMSEs: the same w_t, so the same predictor
        assert np.allclose(ref, ref[0], rtol=1e-6), ref
        assert abs(gain / ref[0] - 1) < 1e-4, (L, path, b, gain, ref[0])
        n += 1
print("compared", n)
PY

# a small candidate set, brute-forced in NumPy
cands=C2R2,C2R4,C3R4,C4R4,C4R8
expect 0 "allocate 3.5bits" -- "$QMLA" allocate "$cap" --budget 3.5bits --context 512 \
  --candidates $cands --threads 1 -o "$work/a.h5"
containsF "wrote /allocate of $work/a.h5" "summary line"
expect 0 "file and brute force" -- "$PY" - "$work/a.h5" <<'PY'
import sys, h5py, itertools, numpy as np
f = h5py.File(sys.argv[1], "r")
g, c = f["allocate"], f["allocate/candidates"]
L = len(g["layer"]); K = len(c["layer"]) // L
assert L == 6 and K == 5, (L, K)
ctx = int(g.attrs["context"])
cost = np.rint(c["bytes_per_token"][...] * ctx).astype(np.int64).reshape(L, K)
val = c["pred_nmse"][...].reshape(L, K)
cap = np.floor(g.attrs["budget_bytes_per_token"] * L * ctx + 1e-6)
best = None
for ch in itertools.product(range(K), repeat=L):
    s = 0.0; b = 0
    for l, k in enumerate(ch):
        s += val[l, k]; b += cost[l, k]
    if b <= cap and (best is None or s < best[0]):
        best = (s, b, ch)
assert best is not None
assert g.attrs["pred_total"] == best[0], (g.attrs["pred_total"], best)
chosen = c["chosen"][...].reshape(L, K)
assert (chosen.sum(axis=1) == 1).all()
cfg = [x.decode() for x in c["config"][...]]
for l in range(L):
    k = int(np.argmax(chosen[l]))
    assert g["config"][l].decode() == cfg[l * K + k]
    assert g["pred_nmse"][l] == val[l, k]
assert abs(g.attrs["bytes_per_token"] - g["bytes_per_token"][...].mean()) < 1e-9
assert g.attrs["bytes_per_token"] <= g.attrs["budget_bytes_per_token"] + 1e-12
assert abs(g.attrs["pred_total"] - g["pred_nmse"][...].sum()) < 1e-12
for k in ("tool", "command_line", "git_commit", "capture_sha256", "created_utc"):
    assert k in g.attrs, k
print("brute force", best[0], best[1] / (L * ctx))
PY
expect 0 "show" -- "$QMLA" show "$work/a.h5"
containsF "group /allocate" "show names the group"
contains "bytes/token reached" "show prints the bytes reached"
expect 0 "export" -- "$QMLA" export "$work/a.h5" --table allocate --format tsv
contains "^layer	config	c_bits" "export header"
expect 0 "export candidates" -- "$QMLA" export "$work/a.h5" --table allocate/candidates --format csv

# storage of the mixed configuration: per-layer rows and their mean
expect 0 "storage --config ALLOC.h5" -- "$QMLA" storage --config "$work/a.h5" --contexts 512 --format tsv
cp "$work/out" "$work/storage.tsv"
expect 0 "storage mean" -- "$PY" - "$work/a.h5" "$work/storage.tsv" <<'PY'
import sys, h5py
g = h5py.File(sys.argv[1], "r")["allocate"]
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[2])]
hdr, rows = rows[0], rows[1:]
i = hdr.index("bytes_per_token")
per = [float(r[i]) for r in rows if r[0].startswith("layer")]
mean = [float(r[i]) for r in rows if r[0] == "mean"]
assert len(per) == 6 and len(mean) == 1, rows
for a, b in zip(per, g["bytes_per_token"][...]):
    assert abs(a - b) < 1e-3, (a, b)
assert abs(mean[0] - g.attrs["bytes_per_token"]) < 1e-3
PY

# --config ALLOC.h5 of eval and ppl: files with chosen bits (h5py)
expect 0 "make mixed files" -- "$PY" - "$work/a.h5" "$work" <<'PY'
import sys, shutil, h5py
src, d = sys.argv[1], sys.argv[2]
def make(name, bits):
    shutil.copy(src, f"{d}/{name}.h5")
    with h5py.File(f"{d}/{name}.h5", "r+") as f:
        f["allocate/c_bits"][...] = [b[0] for b in bits]
        f["allocate/r_bits"][...] = [b[1] for b in bits]
make("alt", [(4, 4), (2, 4)] * 3)   # layers alternate C4R4, C2R4
make("u38", [(3, 8)] * 6)            # uniform C3R8 as a file
make("lo0", [(2, 2)] + [(8, 8)] * 5) # one 2-bit layer first ...
make("lo5", [(8, 8)] * 5 + [(2, 2)]) # ... or last
make("hi0", [(8, 8)] + [(2, 8)] * 5) # five 2-bit content layers
PY
# eval: each layer's row equals the uniform run of that layer's config
expect 0 "rtn transforms" -- "$QMLA" learn "$cap" -o "$work/rtn.h5" --method rtn --train-cells prose-s0
for c in C4R4 C2R4 alt.h5; do
  f=$c; [ $c = alt.h5 ] && f=$work/alt.h5
  expect 0 "eval $c" -- "$QMLA" eval "$cap" --transforms "$work/rtn.h5" --config "$f" --threads 1 -o "$work/ev-$c.h5"
done
expect 0 "eval per layer" -- "$PY" - "$work" <<'PY'
import sys, h5py, numpy as np
d = sys.argv[1]
ev = {c: h5py.File(f"{d}/ev-{c}.h5", "r")["eval"] for c in ("C4R4", "C2R4", "alt.h5")}
m = ev["alt.h5"]
for i in range(len(m["layer"])):
    L, cell = m["layer"][i], m["cell"][i]
    ref = ev["C4R4" if L % 2 == 0 else "C2R4"]
    j = [k for k in range(len(ref["layer"])) if ref["layer"][k] == L and ref["cell"][k] == cell][0]
    assert m["nmse_out"][i] == ref["nmse_out"][j], (L, cell)
assert not np.array_equal(m["nmse_out"][...], ev["C4R4"]["nmse_out"][...])
PY
# --transforms: RTN's identity transform gives the plain allocation's numbers;
# --policy: protected tokens clean (less error) and their BF16 bytes counted
expect 0 "allocate --transforms rtn" -- "$QMLA" allocate "$cap" --budget C4R4 --context 512 --cells code-s0 \
  --transforms "$work/rtn.h5" --threads 1 -o "$work/tf.h5"
expect 0 "allocate --policy" -- "$QMLA" allocate "$cap" --budget C4R4 --context 512 --cells code-s0 \
  --policy sink4/local16 --threads 1 -o "$work/pol.h5"
expect 0 "transforms and policy" -- "$PY" - "$work/one.h5" "$work/tf.h5" "$work/pol.h5" <<'PY'
import sys, h5py, numpy as np
a, t, p = (h5py.File(x, "r")["allocate/candidates"] for x in sys.argv[1:4])
assert np.allclose(a["pred_nmse"][...], t["pred_nmse"][...], rtol=1e-6, atol=0)
assert h5py.File(sys.argv[2], "r")["allocate"].attrs["transforms"].endswith("rtn.h5")
assert (p["nmse_c"][...] < a["nmse_c"][...]).all() and (p["pred_nmse"][...] < a["pred_nmse"][...]).all()
cfg = [x.decode() for x in p["config"][...]]
i = cfg.index("C4R4")
want = ((128 + 32 + 20) * 512 + 32 + (4 + 16) * 320 * 2) / 512
assert abs(p["bytes_per_token"][i] - want) < 1e-12, (p["bytes_per_token"][i], want)
assert h5py.File(sys.argv[3], "r")["allocate"].attrs["policy"] == "sink4/local16"
PY
# ppl: a uniform file scores as the uniform config; mixed files by layer
ppl_cfg=C3R8,C2R2,C8R8,C2R8,$work/u38.h5,$work/lo0.h5,$work/lo5.h5,$work/hi0.h5
expect 0 "ppl --config ALLOC.h5" -- "$QMLA" ppl "$ROOT/models/tiny-mla" --text "$ROOT/data/heldout/prose.txt.gz" \
  --config "$ppl_cfg" --tokens 512 --threads 1 -o "$work/ppl.h5"
contains "mix383838383838" "the uniform file's name lists its layers"
expect 0 "ppl rows" -- "$PY" - "$work/ppl.h5" <<'PY'
import sys, h5py
t = h5py.File(sys.argv[1], "r")["ppl_table"]
v = {c.decode(): x for c, x in zip(t["config"][...], t["nll_nats_per_token"][...])}
assert v["mix383838383838"] == v["C3R8"], v
a, b = v["mix228888888888"], v["mix888888888822"]
assert a != b and a != v["C8R8"] and b != v["C8R8"], v
assert v["C8R8"] < min(a, b) and max(a, b) < v["C2R2"], v
# five of six layers at 2-bit content cost more than half of uniform C2R8's loss
h = v["mix882828282828"]
assert h - v["C8R8"] > 0.5 * (v["C2R8"] - v["C8R8"]) and h < v["C2R8"], v
PY

# bad input: exit 2, the value named
expect 2 "unknown candidate" -- "$QMLA" allocate "$cap" --budget C4R4 --candidates C4R4,C5R4 -o "$work/x.h5"
containsF "C5R4" "unknown candidate named"
expect 2 "budget not a number" -- "$QMLA" allocate "$cap" --budget 12abc -o "$work/x.h5"
containsF '"12abc"' "bad budget named"
expect 2 "infeasible budget" -- "$QMLA" allocate "$cap" --budget 50 --context 512 -o "$work/x.h5"
contains "below the cheapest" "infeasible budget explained"
containsF -- "--budget 50" "infeasible budget named"
expect 2 "missing capture" -- "$QMLA" allocate "$work/nope.h5" --budget C4R4 -o "$work/x.h5"
containsF "$work/nope.h5" "missing capture named"
expect 2 "missing --budget" -- "$QMLA" allocate "$cap" -o "$work/x.h5"
containsF -- "--budget" "missing budget named"
expect 2 "bad policy" -- "$QMLA" allocate "$cap" --budget C4R4 --policy sink4 -o "$work/x.h5"
[ ! -e "$work/x.h5" ] && ok || bad "a refused run left $work/x.h5"
# the figures of the committed validation (gnuplot: skipped without it)
if command -v gnuplot >/dev/null; then
  expect 0 "figures" -- "$QMLA" figures "$ROOT/docs/evidence/allocate-validation/pareto.h5" -o "$work/figs" \
    --only allocate-pareto,allocate-strip
  expect 0 "figure sizes" -- "$PY" - "$work/figs" <<'PY'
import struct, sys
for name, size in (("allocate-pareto", (720, 520)), ("allocate-strip", (620, 360))):
    b = open(f"{sys.argv[1]}/{name}.png", "rb").read()
    assert b[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", b[16:24]) == size, name
PY
fi
expect 0 "figures --list" -- "$QMLA" figures --list
containsF "allocate-pareto" "figures --list names allocate-pareto"
expect 0 "help" -- "$QMLA" allocate --help
containsF "--budget B" "help lists --budget"
finish test_allocate_cli
