#!/usr/bin/env bash
# tests/io/test_compare_results.sh — scripts/compare-results.py, the tool the
# device's engine-agreement step (scripts/device-gpu-engine.sh cli) trusts:
# a one-layer, one-cell sweep against itself and a copy made with other
# --threads (equal: exit 0, 0 differ); faults injected into copies with h5py
# — one float moved by 1e-3 relative (exit 1, that dataset named; with
# --rtol 1e-2 it passes), a NaN (exit 1), a dataset removed (exit 1, "only
# in"), another shape (exit 1), a string changed (exit 1), an attribute
# changed (not compared: exit 0); a missing file and a non-HDF5 file (exit
# 2, naming the file); a bad --rtol (exit 2); --abs NAME=TOL (that dataset
# within TOL absolute, a bad spec exit 2).
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT, QMLA_PYTHON.
set -u
. "$(dirname "$0")/../support/cli_lib.sh"
need_python
CAP=$ROOT/data/tiny-mla-default.h5
CMP=$ROOT/scripts/compare-results.py
sub=(--layers 0 --cells prose-s0)
expect 0 "sweep, 1 thread" -- "$QMLA" sweep "$CAP" "${sub[@]}" --threads 1 -o "$work/a.h5"
expect 0 "sweep, 2 threads" -- "$QMLA" sweep "$CAP" "${sub[@]}" --threads 2 -o "$work/b.h5"
expect 0 "equal files" -- "$PY" "$CMP" "$work/a.h5" "$work/b.h5"
contains "dataset(s) compared, 0 differ" "equal: the summary line"
"$PY" - "$work/a.h5" "$work" <<'PY' || bad "h5py: the faulty copies"
import shutil, sys
import h5py, numpy as np
src, d = sys.argv[1], sys.argv[2]
def copy(name, fn):
    p = f"{d}/{name}.h5"
    shutil.copy(src, p)
    with h5py.File(p, "a") as f:
        fn(f)
def scale(f):
    x = f["responses/nmse_cache"][...]; x[0] *= 1.001; f["responses/nmse_cache"][...] = x
def nan(f):
    x = f["responses/nmse_cache"][...]; x[-1] = np.nan; f["responses/nmse_cache"][...] = x
def drop(f):
    del f["responses/nmse_cache"]
def reshape(f):
    x = f["responses/nmse_cache"][...]; del f["responses/nmse_cache"]
    f["responses/nmse_cache"] = x[:-1]
def attr(f):
    f.attrs["command_line"] = "something else"
def string(f):
    names = []
    f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and o.dtype.kind in "SOU" else None)
    assert names, "the sweep file has no string dataset"
    x = f[names[0]][...]
    x.flat[0] = b"changed" if isinstance(x.flat[0], bytes) else "changed"
    f[names[0]][...] = x
for n, fn in [("scale", scale), ("nan", nan), ("drop", drop), ("reshape", reshape),
              ("attr", attr), ("string", string)]:
    copy(n, fn)
PY
expect 1 "one float moved by 1e-3" -- "$PY" "$CMP" "$work/a.h5" "$work/scale.h5" --quiet
contains "DIFF responses/nmse_cache: 1 of" "1e-3: the dataset named"
contains "1 differ" "1e-3: the summary counts it"
expect 0 "the same with --rtol 1e-2" -- "$PY" "$CMP" "$work/a.h5" "$work/scale.h5" --rtol 1e-2
expect 1 "a NaN" -- "$PY" "$CMP" "$work/a.h5" "$work/nan.h5" --quiet
contains "NaN at 1 element" "NaN: named"
expect 1 "a dataset removed" -- "$PY" "$CMP" "$work/a.h5" "$work/drop.h5" --quiet
contains "DIFF responses/nmse_cache: only in" "removed: named"
expect 1 "another shape" -- "$PY" "$CMP" "$work/a.h5" "$work/reshape.h5" --quiet
contains "DIFF responses/nmse_cache: shape" "shape: named"
expect 1 "a string changed" -- "$PY" "$CMP" "$work/a.h5" "$work/string.h5" --quiet
contains "values differ" "string: named"
expect 0 "an attribute changed (not compared)" -- "$PY" "$CMP" "$work/a.h5" "$work/attr.h5"
expect 2 "a missing file" -- "$PY" "$CMP" "$work/a.h5" "$work/nope.h5"
contains "nope.h5: cannot read as HDF5" "missing: the file named"
printf 'not hdf5\n' > "$work/text.h5"
expect 2 "a text file" -- "$PY" "$CMP" "$work/text.h5" "$work/a.h5"
contains "text.h5: cannot read as HDF5" "text: the file named"
expect 2 "--rtol 0" -- "$PY" "$CMP" "$work/a.h5" "$work/b.h5" --rtol 0
# --abs NAME=TOL: that dataset on its own scale (|a - b| <= TOL), the others
# as before: the 1e-3 relative move of nmse_cache (|a| ~ 1e-3 .. 1e-1) is
# within 1e-3 absolute, not within 1e-7; a bad spec is exit 2
expect 0 "--abs nmse_cache=1e-3" -- "$PY" "$CMP" "$work/a.h5" "$work/scale.h5" --abs nmse_cache=1e-3
contains "ok   responses/nmse_cache: largest absolute difference" "--abs: compared absolutely"
contains "nmse_cache absolute 0.001" "--abs: the summary names it"
expect 1 "--abs nmse_cache=1e-9" -- "$PY" "$CMP" "$work/a.h5" "$work/scale.h5" --abs nmse_cache=1e-9 --quiet
contains "beyond the absolute tolerance 1e-09" "--abs: too far, named"
expect 1 "--abs and a NaN" -- "$PY" "$CMP" "$work/a.h5" "$work/nan.h5" --abs nmse_cache=1 --quiet
contains "NaN at 1 element" "--abs: NaN still named"
# an --abs NAME that names no float dataset: the summary says so (it is
# passed for every kind of results file by the device scripts, so no error)
expect 0 "--abs of an absent name" -- "$PY" "$CMP" "$work/a.h5" "$work/b.h5" --abs no_such=1e-4 --quiet
containsF "no_such absolute 0.0001 (no float dataset of that name)" "--abs: an absent name named"
expect 0 "--abs of a present name" -- "$PY" "$CMP" "$work/a.h5" "$work/b.h5" --abs nmse_cache=1e-4 --quiet
lacks "(no float dataset" "--abs: a present name is not flagged"
expect 2 "--abs without TOL" -- "$PY" "$CMP" "$work/a.h5" "$work/b.h5" --abs nmse_cache
expect 2 "--abs negative" -- "$PY" "$CMP" "$work/a.h5" "$work/b.h5" --abs nmse_cache=-1
finish test_compare_results
