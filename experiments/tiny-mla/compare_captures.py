#!/usr/bin/env python3
"""compare_captures.py A.h5 B.h5 [--tol X] [--layers 0,1] [--max-per-layer]

Compare two qmla-capture files dataset by dataset (docs/capture-format.md):
for every dataset present in both (weights of each layer, tensors of each cell
both files hold), the relative Frobenius error ||A - B|| / ||B|| in float64
(B is the reference) and the largest absolute difference. Shapes must agree;
datasets only in one file are listed. Exit status 1 when a relative error
exceeds --tol (default: no limit), 2 on a structural mismatch.

Used to validate the native capture (`qmla capture`) against the transformers
capture data/tiny-mla-default.h5 (experiments/tiny-mla/README.md)."""
import argparse
import sys

import h5py
import numpy as np


def walk(f):
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            out[name] = obj
    f.visititems(visit)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a")
    p.add_argument("b", help="reference")
    p.add_argument("--tol", type=float, default=None)
    p.add_argument("--layers", default=None, help="only these layer indices (comma list)")
    p.add_argument("--quiet", action="store_true", help="print only the summary by dataset name")
    args = p.parse_args(argv)
    keep = None if args.layers is None else {int(x) for x in args.layers.split(",")}
    with h5py.File(args.a, "r") as fa, h5py.File(args.b, "r") as fb:
        da, db = walk(fa), walk(fb)
        names = sorted(set(da) & set(db))
        if keep is not None:
            names = [n for n in names if int(n.split("/")[1]) in keep]
        only = sorted((set(da) ^ set(db)))
        if keep is not None:
            only = [n for n in only if int(n.split("/")[1]) in keep]
        worst = {}
        bad = 0
        for n in names:
            a = da[n][()]
            b = db[n][()]
            if a.shape != b.shape:
                print("%s: shape %s versus %s" % (n, a.shape, b.shape))
                return 2
            if n.endswith("positions"):
                e = 0.0 if np.array_equal(a, b) else float("inf")
                m = float(np.max(np.abs(a.astype(np.int64) - b.astype(np.int64))))
            else:
                a64, b64 = a.astype(np.float64), b.astype(np.float64)
                nb = np.linalg.norm(b64)
                e = float(np.linalg.norm(a64 - b64) / nb) if nb > 0 else float(np.linalg.norm(a64))
                m = float(np.max(np.abs(a64 - b64)))
            key = n.split("/")[-1]
            if key not in worst or e > worst[key][0]:
                worst[key] = (e, n, m)
            if not args.quiet:
                print("%-45s rel_fro %.3e  max_abs %.3e" % (n, e, m))
            if args.tol is not None and not e <= args.tol:
                bad += 1
        print("largest relative Frobenius error by dataset (%d datasets compared):" % len(names))
        for k in sorted(worst):
            e, n, m = worst[k]
            print("  %-16s %.3e  (%s; max |diff| %.3e)" % (k, e, n, m))
        for n in only:
            print("only in %s: %s" % (args.a if n in da else args.b, n))
        if only and keep is None:
            return 2
        if bad:
            print("%d datasets beyond --tol %g" % (bad, args.tol))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
