"""tests/support/results_same.py A.h5 B.h5 — exit 0 when the /responses tables of two
qmla results files are identical (every column, bit for bit)."""
import sys
import h5py
import numpy as np

a, b = (h5py.File(p, "r")["responses"] for p in sys.argv[1:3])
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
for k in a:
    x, y = a[k][...], b[k][...]
    assert x.shape == y.shape and np.array_equal(x, y), k
