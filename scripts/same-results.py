#!/usr/bin/env python3
"""scripts/same-results.py — are two qmla results files the same, bit for bit?

Usage: python3 scripts/same-results.py A.h5 B.h5 GROUP... [--skip-attr NAME ...]

For each GROUP (e.g. responses summary cells, predict, interventions): the
same datasets with the same shapes and types, every dataset's bytes equal
(numeric data compared as raw bytes, so -0.0 and NaN payloads count;
strings compared as values), the same attributes on every dataset, and
every attribute of the group and of the file's root equal (reals as bytes)
except the run's own provenance: command_line, created_utc, elapsed_s,
threads, and the names given with --skip-attr (e.g. engine_device, whose
text names the rule that chose the device).

Prints one line per group and a verdict; exits 0 when the same, 1 when
something differs (naming it), 2 on bad input. The tolerance comparison of
two engines' files is scripts/compare-results.py.
"""
import argparse
import sys

import numpy as np

try:
    import h5py
except ImportError:  # pragma: no cover - environment problem
    sys.exit("same-results: needs h5py (Debian package python3-h5py)")

PROV = {"command_line", "created_utc", "elapsed_s", "threads"}


def attr_bytes(v):
    a = np.asarray(v)
    if a.dtype.kind in "OSU":
        return repr(a.tolist())
    return (str(a.dtype), a.shape, a.tobytes())


def same_attrs(x, y, skip, where, out):
    kx = sorted(k for k in x.attrs if k not in skip)
    ky = sorted(k for k in y.attrs if k not in skip)
    if kx != ky:
        out.append("%s: other attributes (%s vs %s)" % (where, kx, ky))
        return
    for k in kx:
        if attr_bytes(x.attrs[k]) != attr_bytes(y.attrs[k]):
            out.append("%s: attribute %s differs (%r vs %r)" % (where, k, x.attrs[k], y.attrs[k]))


def same_group(ga, gb, name, skip, out):
    names_a, names_b = {}, {}
    ga.visititems(lambda n, o: names_a.__setitem__(n, o))
    gb.visititems(lambda n, o: names_b.__setitem__(n, o))
    if sorted(names_a) != sorted(names_b):
        out.append("/%s: other members (%s vs %s)" % (name, sorted(set(names_a) ^ set(names_b))[:6], ""))
        return 0
    same_attrs(ga, gb, skip, "/" + name, out)
    n = 0
    for k in sorted(names_a):
        x, y = names_a[k], names_b[k]
        where = "/%s/%s" % (name, k)
        if isinstance(x, h5py.Dataset) != isinstance(y, h5py.Dataset):
            out.append("%s: a dataset in one file only" % where)
            continue
        if isinstance(x, h5py.Group):
            same_attrs(x, y, skip, where, out)
            continue
        n += 1
        if x.shape != y.shape or x.dtype != y.dtype:
            out.append("%s: shape/type %s %s vs %s %s" % (where, x.shape, x.dtype, y.shape, y.dtype))
            continue
        a, b = x[()], y[()]
        if x.dtype.kind in "OSU" or h5py.check_string_dtype(x.dtype):
            if np.asarray(a).tolist() != np.asarray(b).tolist():
                out.append("%s: strings differ" % where)
        elif np.asarray(a).tobytes() != np.asarray(b).tobytes():
            out.append("%s: bytes differ" % where)
        same_attrs(x, y, set(), where, out)
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("groups", nargs="+")
    ap.add_argument("--skip-attr", nargs="*", default=[])
    o = ap.parse_args()
    try:
        fa, fb = h5py.File(o.a, "r"), h5py.File(o.b, "r")
    except OSError as e:
        print("same-results: %s" % e, file=sys.stderr)
        return 2
    skip = PROV | set(o.skip_attr)
    out = []
    same_attrs(fa, fb, skip, "/", out)
    total = 0
    for g in o.groups:
        if g not in fa or g not in fb:
            out.append("/%s: missing in %s" % (g, o.a if g not in fa else o.b))
            continue
        k = same_group(fa[g], fb[g], g, skip, out)
        total += k
        print("/%s: %d datasets compared" % (g, k))
    for line in out:
        print("DIFFERS " + line)
    print("same-results: %s: %d datasets in %s: %s against %s" %
          ("same" if not out else "DIFFERENT", total, ",".join(o.groups), o.a, o.b))
    return 0 if not out else 1


if __name__ == "__main__":
    sys.exit(main())
