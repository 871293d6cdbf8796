#!/usr/bin/env python3
"""scripts/compare-results.py — compare two HDF5 files qmla wrote (for
example the same command run with --engine cpu and --engine cuda),
dataset by dataset.

Every dataset present in A must be present in B with the same shape and
kind. Floating-point datasets agree when every element satisfies
|a - b| <= rtol * max(|a|, |b|) + atol (NaN only where the other is NaN;
infinities equal); integer, boolean and string datasets must be equal.
--abs NAME=TOL compares the datasets named NAME (the last path component)
on their own scale instead: |a - b| <= TOL. That is for quantities that are
already relative to something larger, where a relative comparison divides
by a near-cancelled value: `cross_relative` of qmla intervene is
(NMSE_joint - NMSE_C - NMSE_P) / (NMSE_C + NMSE_P), a fraction of the
single-path sum, so `--abs cross_relative=1e-4` asks the cross term within
1e-4 of that sum, which is the joint ratio NMSE_joint / (NMSE_C + NMSE_P)
within about 1e-4 relative (tests/sweep/test_engine_cuda.c checks it so;
docs/cuda-engine.md "H200 run 11" has the numbers). A NAME that matches no
floating-point dataset is no error (the device scripts pass it for every
kind of results file) but the summary says "(no float dataset of that name)".
Attributes (the provenance: command line, time, engine, device, commit,
threads) are not compared. Datasets whose path contains one of --skip's
substrings are left out (named in the output).

Prints one line per compared dataset with its largest relative difference
(over the elements whose magnitude exceeds atol / rtol), then a summary
line; exits 0 when everything agrees, 1 when something differs, 2 on bad
input (a file that cannot be read, naming it).

Usage: /usr/bin/python3 scripts/compare-results.py A.h5 B.h5
           [--rtol 1e-4] [--atol 1e-12] [--abs NAME=TOL ...] [--skip SUBSTR ...]
           [--quiet]
Needs numpy and h5py (Debian: python3-numpy, python3-h5py).
"""
import argparse
import sys

import numpy as np

try:
    import h5py
except ImportError:  # pragma: no cover - environment problem
    sys.exit("compare-results: needs h5py (Debian package python3-h5py)")


def datasets(f):
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            out[name] = obj

    f.visititems(visit)
    return out


def compare_abs(a, b, tol):
    """(ok, largest absolute difference or None, message): |a - b| <= tol"""
    if a.shape != b.shape:
        return False, None, f"shape {a.shape} against {b.shape}"
    x = np.asarray(a[()], dtype=np.float64)
    y = np.asarray(b[()], dtype=np.float64)
    nx, ny = np.isnan(x), np.isnan(y)
    if not np.array_equal(nx, ny):
        return False, None, f"NaN at {int(np.sum(nx != ny))} element(s) in one file only"
    fx = np.isfinite(x)
    if not np.array_equal(fx, np.isfinite(y)) or not np.array_equal(x[~fx & ~nx], y[~fx & ~nx]):
        return False, None, "infinities differ"
    d = np.abs(x[fx] - y[fx])
    worst = float(np.max(d)) if d.size else 0.0
    bad = d > tol
    if np.any(bad):
        i = int(np.argmax(d))
        return (False, worst, f"{int(np.sum(bad))} of {d.size} element(s) beyond the absolute "
                f"tolerance {tol:g}: e.g. {x[fx][i]!r} against {y[fx][i]!r}")
    return True, worst, ""


def compare(name, a, b, rtol, atol):
    """(ok, largest relative difference or None, message)"""
    if a.shape != b.shape:
        return False, None, f"shape {a.shape} against {b.shape}"
    x, y = a[()], b[()]
    if a.dtype.kind in "fc" and b.dtype.kind in "fc":
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        nx, ny = np.isnan(x), np.isnan(y)
        if not np.array_equal(nx, ny):
            return False, None, f"NaN at {int(np.sum(nx != ny))} element(s) in one file only"
        fx, fy = np.isfinite(x), np.isfinite(y)
        inf = ~fx & ~nx
        if not np.array_equal(fx, fy) or not np.array_equal(x[inf], y[inf]):
            return False, None, "infinities differ"
        xs, ys = x[fx], y[fx]
        if xs.size == 0:
            return True, 0.0, ""
        mag = np.maximum(np.abs(xs), np.abs(ys))
        diff = np.abs(xs - ys)
        bad = diff > rtol * mag + atol
        sig = mag > atol / rtol
        worst = float(np.max(diff[sig] / mag[sig])) if np.any(sig) else 0.0
        if np.any(bad):
            i = int(np.argmax(np.where(bad, diff / np.maximum(mag, 1e-300), -1.0)))
            return (False, worst,
                    f"{int(np.sum(bad))} of {xs.size} element(s) beyond rtol {rtol:g}: "
                    f"e.g. {xs[i]!r} against {ys[i]!r}")
        return True, worst, ""
    if a.dtype.kind != b.dtype.kind:
        return False, None, f"kind {a.dtype} against {b.dtype}"
    if not np.array_equal(np.asarray(x), np.asarray(y)):
        return False, None, "values differ"
    return True, 0.0, ""


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="example: scripts/compare-results.py sweep-cpu.h5 sweep-cuda.h5 --rtol 1e-4; "
        "exit 0 all agree, 1 something differs, 2 bad input")
    ap.add_argument("a", help="first results file (HDF5)")
    ap.add_argument("b", help="second results file (HDF5)")
    ap.add_argument("--rtol", type=float, default=1e-4,
                    help="relative tolerance for floats (default 1e-4)")
    ap.add_argument("--atol", type=float, default=1e-12,
                    help="absolute tolerance added to rtol*max(|a|,|b|) (default 1e-12)")
    ap.add_argument("--abs", action="append", default=[], metavar="NAME=TOL",
                    help="compare datasets named NAME (last path component) with the "
                    "absolute tolerance TOL, on their own scale (e.g. cross_relative=1e-4)")
    ap.add_argument("--skip", nargs="*", default=[], metavar="SUBSTR",
                    help="leave out datasets whose path contains one of these")
    ap.add_argument("--quiet", action="store_true",
                    help="print only differing datasets and the summary line")
    o = ap.parse_args()
    if not (o.rtol > 0 and o.atol >= 0):
        print("compare-results: --rtol must be > 0 and --atol >= 0", file=sys.stderr)
        return 2
    absol = {}
    for spec in o.abs:
        k, _, v = spec.partition("=")
        try:
            t = float(v)
        except ValueError:
            t = -1.0
        if not k or not t >= 0:
            print(f"compare-results: --abs {spec}: expected NAME=TOL with TOL >= 0",
                  file=sys.stderr)
            return 2
        absol[k] = t
    files = []
    for p in (o.a, o.b):
        try:
            files.append(h5py.File(p, "r"))
        except OSError as e:
            print(f"compare-results: {p}: cannot read as HDF5 ({e})", file=sys.stderr)
            return 2
    da, db = datasets(files[0]), datasets(files[1])
    bad, worst, n = 0, 0.0, 0
    nabs = {k: 0 for k in absol}  # datasets compared under each --abs
    for name in sorted(set(da) | set(db)):
        if any(s in name for s in o.skip):
            print(f"skipped {name}")
            continue
        if name not in db or name not in da:
            print(f"DIFF {name}: only in {o.a if name in da else o.b}")
            bad += 1
            continue
        leaf = name.rsplit("/", 1)[-1]
        if leaf in absol and da[name].dtype.kind in "fc" and db[name].dtype.kind in "fc":
            ok, w, msg = compare_abs(da[name], db[name], absol[leaf])
            n += 1
            nabs[leaf] += 1
            if not ok:
                bad += 1
                print(f"DIFF {name}: {msg}")
            elif not o.quiet:
                print(f"ok   {name}: largest absolute difference {w:.3g} (tolerance "
                      f"{absol[leaf]:g} on its own scale)")
            continue
        ok, w, msg = compare(name, da[name], db[name], o.rtol, o.atol)
        n += 1
        if w is not None:
            worst = max(worst, w)
        if not ok:
            bad += 1
            print(f"DIFF {name}: {msg}")
        elif not o.quiet:
            print(f"ok   {name}: largest relative difference {w:.3g}")
    # an --abs NAME that matched no floating-point dataset says so: the
    # summary must not read as if that quantity had been compared absolutely
    ab = "".join(f", {k} absolute {v:g}" + ("" if nabs[k] else " (no float dataset of that name)")
                 for k, v in sorted(absol.items()))
    print(f"compare-results: {n} dataset(s) compared, {bad} differ, largest relative "
          f"difference {worst:.3g} (rtol {o.rtol:g}, atol {o.atol:g}{ab}): {o.a} against {o.b}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
