#!/usr/bin/env bash
# tests/operator/test_operator.sh — `qmla jvp`, `qmla predict`, `qmla intervene` end to
# end on a small synthetic capture:
#   - every point, sensitivity predictor, allocation, intervention item and
#     headline statistic against the independent NumPy implementation
#     (bench/numpy_operator.py, float64, rtol 2e-3);
#   - 1 and 2 threads give identical groups (every dataset and attribute but
#     the recorded command line), the same seed the same interventions;
#   - the groups are added to an existing results file, keeping the others;
#   - usage errors exit 2.
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT, QMLA_PYTHON.
source "$(dirname "$0")/../support/cli_lib.sh"
need_python
cap=$work/syn.h5
expect 0 "synth" -- "$QMLA" synth -o "$cap" --shape tiny --tokens 33 --seqs 2 --layers 2 --cells 1 --seed 5
for j in 1 2; do
  expect 0 "jvp --threads $j" -- "$QMLA" jvp "$cap" -o "$work/t$j.h5" --threads $j
  contains "Spearman JVP vs finite gain" "jvp prints its table"
  expect 0 "predict --threads $j" -- "$QMLA" predict "$cap" -o "$work/t$j.h5" --threads $j
  contains "operator + allocation" "predict prints the predictors"
  expect 0 "intervene --threads $j" -- "$QMLA" intervene "$cap" -o "$work/t$j.h5" --threads $j --reps 6 --seed 9
  contains "permute" "intervene prints the controls"
done
cat > "$work/same.py" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
for g in ("jvp", "predict", "interventions"):
    assert sorted(a[g]) == sorted(b[g]), g
    for k in a[g]:
        x, y = a[g][k][...], b[g][k][...]
        assert np.array_equal(x, y) or (x.dtype.kind == "f" and np.array_equal(x, y, equal_nan=True)), (g, k)
    run = ("command_line", "created_utc", "elapsed_s", "threads")  # of the run, not the result
    ka = sorted(k for k in a[g].attrs if k not in run)
    assert ka == sorted(k for k in b[g].attrs if k not in run), g
    for k in ka:
        x, y = a[g].attrs[k], b[g].attrs[k]
        assert (x == y) or (isinstance(x, float) and np.isnan(x) and np.isnan(y)), (g, k, x, y)
PY
expect 0 "1 and 2 threads: identical groups" -- "$PY" "$work/same.py" "$work/t1.h5" "$work/t2.h5"
# every control really moves the error: a direction that came back unchanged
# gives a ratio of exactly 1 in every repetition (the identity "control")
expect 0 "each control changes the direction" -- "$PY" -c "
import sys, h5py, numpy as np
g = h5py.File(sys.argv[1], 'r')['interventions']
for c in ('sign', 'permute', 'isotropic'):
    for p in ('content', 'rope'):
        r = g['ratio_%s_%s' % (c, p)][...]
        assert r.size > 0 and np.all(np.isfinite(r)), (c, p)
        assert np.count_nonzero(r != 1.0) > r.size // 2, (c, p, r)
" "$work/t1.h5"
expect 0 "NumPy reference agrees" -- "$PY" "$ROOT/bench/numpy_operator.py" "$cap" --compare "$work/t1.h5"
contains " 0 differ" "no point differs from NumPy"
# the frozen predictor split by cell and by direction (/predict by_cell_*,
# by_direction_*): recomputed here from the per-point columns
expect 0 "synth, 3 cells" -- "$QMLA" synth -o "$work/c3.h5" --shape tiny --tokens 17 --seqs 2 --layers 1 --cells 3 --seed 8
expect 0 "predict, 3 cells" -- "$QMLA" predict "$work/c3.h5" -o "$work/c3r.h5" --threads 2
contains "^frozen operator+allocation predictor by cell" "the split by cell is printed"
contains "^synth-s2 " "a row per cell"
contains "^INT4/G32/nu0.001\\* " "a row per direction, held out marked"
expect 0 "splits = recomputation from the points" -- "$PY" - "$work/c3r.h5" <<'PY'
import sys, h5py, numpy as np
g = h5py.File(sys.argv[1], "r")["predict"]
s = lambda v: v.decode() if isinstance(v, bytes) else str(v)
cell = [s(c) for c in g["cell"][...]]
bits, grp, nmse = g["bits"][...], g["group"][...], g["nmse"][...]
held, deg, path = g["heldout"][...], g["degenerate"][...], g["path"][...]
seq, layer = g["seq"][...], g["layer"][...]
pred, meas = g["pred_alloc"][...], g["g_finite"][...]
dirs = ["INT%d/G%d/nu%g" % (b, gg, n) for b, gg, n in zip(bits, grp, nmse)]
def rank(x):
    o = np.argsort(x, kind="mergesort"); r = np.empty(len(x)); r[o] = np.arange(len(x))
    for v in np.unique(x):
        m = x == v; r[m] = r[m].mean()
    return r
def stats(m):
    if m.sum() == 0: return 0, np.nan, np.nan
    x, y = pred[m], meas[m]
    rho = np.corrcoef(rank(x), rank(y))[0, 1] if m.sum() > 1 else np.nan
    return m.sum(), rho, np.median(np.abs(np.log(x / y)))
def close(a, b):
    return (np.isnan(a) and np.isnan(b)) or abs(a - b) <= 1e-9 * max(1, abs(b))
for by, keys in (("by_cell_", cell), ("by_direction_", dirs)):
    ks = [s(k) for k in g[by + "key"][...]]
    assert len(ks) == len(set(keys)), (ks, set(keys))
    for i, k in enumerate(ks):
        sel = np.array([kk == k for kk in keys]) & (deg == 0)
        for suf, m in (("heldout", sel & (held == 1)), ("all", sel)):
            n, rho, med = stats(m)
            assert g[by + "n_" + suf][i] == n, (by, k, suf)
            assert close(g[by + "spearman_" + suf][i], rho), (by, k, suf, g[by + "spearman_" + suf][i], rho)
            med_name = by + ("median_heldout" if suf == "heldout" else "median_all")
            assert close(g[med_name][i], med), (by, k, suf)
        # pairs: content point + RoPE twin of the same item
        e = []
        for j in np.where(sel & (path == 0))[0]:
            tw = np.where((path == 1) & (deg == 0) & (layer == layer[j]) & (seq == seq[j]) &
                          (bits == bits[j]) & (grp == grp[j]) & (nmse == nmse[j]) &
                          np.array([c == cell[j] for c in cell]))[0]
            if len(tw):
                t = tw[0]
                e.append(abs(np.log(pred[t] / pred[j]) - np.log(meas[t] / meas[j])))
        assert g[by + "n_pairs"][i] == len(e)
        assert close(g[by + "mae_alloc"][i], np.mean(e) if e else np.nan), (by, k)
# the headline frozen-predictor statistics: over the held-out,
# non-degenerate points only (this capture has development points too, so
# a rule that also takes those gives other values)
m = (held == 1) & (deg == 0)
assert 0 < m.sum() < (deg == 0).sum(), (m.sum(), (deg == 0).sum())
n, rho, med = stats(m)
a = g.attrs
assert int(a["n_heldout"]) == n, (int(a["n_heldout"]), n)
assert close(float(a["spearman"]), rho), (float(a["spearman"]), rho)
assert close(float(a["median_abs_log_error"]), med), (float(a["median_abs_log_error"]), med)
print("splits ok")
PY
containsF "splits ok" "splits checked"
# interventions: per-item draws and the headline counts, on a capture whose
# sequence 1 is a copy of sequence 0 (the same inputs: only the item's own
# seed, seed + plan index, makes their control draws differ) and whose
# sequence 2 has no RoPE energy (k_rope zero: a degenerate item, left out of
# n_items and of every headline statistic); the NumPy reference then
# recomputes the medians and the bootstrap intervals draw for draw
expect 0 "synth (interventions)" -- "$QMLA" synth -o "$work/iv.h5" --shape tiny --tokens 17 --seqs 3 --layers 1 --cells 1 --seed 8
expect 0 "copy sequence 0 to 1, zero the RoPE key of 2" -- "$PY" - "$work/iv.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    c = f["layers/0/cells/synth-s0"]
    for k in c:
        d = c[k]; x = d[...]; x[1] = x[0]
        if k in ("k_rope", "k_rope_pre"):
            x[2] = 0
        d[...] = x
PY
expect 0 "intervene (copied and degenerate sequences)" -- "$QMLA" intervene "$work/iv.h5" -o "$work/ivr.h5" --reps 4 --seed 21 --bootstrap 300
expect 0 "item seeds, copied items, degenerate item" -- "$PY" - "$work/ivr.h5" <<'PY'
import sys, h5py, numpy as np
g = h5py.File(sys.argv[1], "r")["interventions"]
seq, deg, seeds = g["seq"][...], g["degenerate"][...], g["item_seed"][...]
assert list(seq) == [0, 1, 2] and list(deg) == [0, 0, 1], (seq, deg)
assert list(seeds) == [21, 22, 23], seeds
assert int(g.attrs["n_items"]) == 2, int(g.attrs["n_items"])
# the copies agree where nothing is drawn and differ in every control draw
assert g["response_joint"][0] == g["response_joint"][1]
for c in ("sign", "permute", "isotropic"):
    for p in ("content", "rope"):
        r = g["ratio_%s_%s" % (c, p)][...].reshape(3, 4)
        assert not np.array_equal(r[0], r[1]), (c, p, r[0], r[1])
print("interventions ok")
PY
containsF "interventions ok" "interventions checked"
expect 0 "NumPy reference: medians and bootstrap intervals draw for draw" -- "$PY" "$ROOT/bench/numpy_operator.py" "$work/iv.h5" --compare "$work/ivr.h5"
contains " 0 differ" "no intervention statistic differs from NumPy"
# the groups join an existing sweep results file
expect 0 "sweep" -- "$QMLA" sweep "$cap" -o "$work/s.h5" --threads 2
expect 0 "jvp into the sweep's file" -- "$QMLA" jvp "$cap" -o "$work/s.h5" --threads 2 --bits 4,8
expect 0 "sweep rows kept" -- "$PY" -c "import h5py,sys; f=h5py.File(sys.argv[1]); assert 'responses' in f and 'jvp' in f and len(f['jvp/g_jvp']) == 16" "$work/s.h5"
expect 0 "the sweep reads its file back" -- "$QMLA" sweep "$cap" -o "$work/s.h5" --threads 2
# resume: interrupt `qmla predict` (SIGINT) once the journal holds a finished
# item, rerun; the group equals that of an uninterrupted run bit for bit
big=$work/big.h5
expect 0 "synth (resume)" -- "$QMLA" synth -o "$big" --shape tiny --tokens 200 --seqs 6 --layers 1 --cells 1 --seed 6
expect 0 "predict uninterrupted" -- "$QMLA" predict "$big" -o "$work/full.h5" --threads 1
"$QMLA" predict "$big" -o "$work/res.h5" --threads 1 >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  grep -q '^E$' "$work/res.h5.predict.journal" 2>/dev/null && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.05
done
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
if [ $rc = 130 ] && [ -f "$work/res.h5.predict.journal" ]; then
  ok
  expect 0 "predict resumed" -- "$QMLA" predict "$big" -o "$work/res.h5" --threads 2
  expect 0 "journal removed after the write" -- test ! -e "$work/res.h5.predict.journal"
  expect 0 "resumed group = uninterrupted group" -- "$PY" -c "
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1])['predict'], h5py.File(sys.argv[2])['predict']
assert sorted(a) == sorted(b)
eq = lambda x, y: np.array_equal(x, y) or (x.dtype.kind == 'f' and np.array_equal(x, y, equal_nan=True))
for k in a: assert eq(a[k][...], b[k][...]), k
for k in a.attrs:
    if k not in ('command_line', 'created_utc', 'elapsed_s', 'threads'): assert a.attrs[k] == b.attrs[k], k
" "$work/full.h5" "$work/res.h5"
else
  echo "note: the run finished (exit $rc) before it could be interrupted; resume not exercised"
fi
# the same for `qmla intervene`
expect 0 "intervene uninterrupted" -- "$QMLA" intervene "$big" -o "$work/full.h5" --threads 1 --reps 4
"$QMLA" intervene "$big" -o "$work/res.h5" --threads 1 --reps 4 >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  grep -q '^E$' "$work/res.h5.interventions.journal" 2>/dev/null && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.05
done
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
if [ $rc = 130 ] && [ -f "$work/res.h5.interventions.journal" ]; then
  ok
  expect 0 "intervene resumed" -- "$QMLA" intervene "$big" -o "$work/res.h5" --threads 2 --reps 4
  expect 0 "interventions resumed = uninterrupted" -- "$PY" -c "
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1])['interventions'], h5py.File(sys.argv[2])['interventions']
assert sorted(a) == sorted(b)
eq = lambda x, y: np.array_equal(x, y) or (x.dtype.kind == 'f' and np.array_equal(x, y, equal_nan=True))
for k in a: assert eq(a[k][...], b[k][...]), k
for k in a.attrs:
    if k not in ('command_line', 'created_utc', 'elapsed_s', 'threads'): assert a.attrs[k] == b.attrs[k], k
" "$work/full.h5" "$work/res.h5"
else
  echo "note: intervene finished (exit $rc) before it could be interrupted; resume not exercised"
fi
# a journal of other options is refused, --force discards it; so is a
# journal of an earlier qmla (lib/io/journal.h: not converted)
echo "qmla-journal 1 predict sha256=other sens=1" > "$work/j.h5.predict.journal"
expect 2 "predict refuses a foreign journal" -- "$QMLA" predict "$cap" -o "$work/j.h5" --threads 2
contains "--force" "the refusal names --force"
contains "sha256=other" "the refusal names the journal's key"
echo "qmla-op-journal 1 sha256=other" > "$work/j.h5.predict.journal"
expect 2 "predict refuses an older journal format" -- "$QMLA" predict "$cap" -o "$work/j.h5" --threads 2
contains "older journal format" "the refusal says it is an older journal"
expect 0 "predict --force discards it" -- "$QMLA" predict "$cap" -o "$work/j.h5" --threads 2 --force
echo "qmla-journal 1 interventions sha256=other" > "$work/j.h5.interventions.journal"
expect 2 "intervene refuses a foreign journal" -- "$QMLA" intervene "$cap" -o "$work/j.h5" --reps 2
expect 0 "intervene --force discards it" -- "$QMLA" intervene "$cap" -o "$work/j.h5" --reps 2 --force
: > "$work/e.h5.predict.journal"
expect 0 "an empty journal is no foreign journal" -- "$QMLA" predict "$cap" -o "$work/e.h5" --threads 2
# usage
expect 2 "missing -o" -- "$QMLA" predict "$cap"
expect 2 "bad --bits" -- "$QMLA" jvp "$cap" -o "$work/x.h5" --bits 5
expect 2 "bad --reps" -- "$QMLA" intervene "$cap" -o "$work/x.h5" --reps 0
finish test_operator
