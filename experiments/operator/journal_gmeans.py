#!/usr/bin/env python3
"""experiments/operator/journal_gmeans.py JOURNAL[.gz] — geometric-mean gain
ratios per path and control over the finished items of a `qmla intervene`
journal (RESULTS.h5.interventions.journal; its R records hold, per item,
2 paths x 3 controls x reps ratios, path-major, as lib/operator/intervene.c writes
them), for a run that did not finish: the layers it covers are printed.
A journal kept compressed (gzip, as six-cell-device/ keeps its) is read as is."""
import gzip
import math
import sys

path = sys.argv[1]
with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
    lines = f.read().split("\n")
items = [l.split() for l in lines if l.startswith("I ")]
ratios = [l.split()[1:] for l in lines if l.startswith("R ")]
reps = len(ratios[0]) // 6
print("items %d (layers %s), %d reps each" % (len(items), sorted({int(i[2]) for i in items}), reps))
for p, path in enumerate(("content", "rope")):
    for c, ctrl in enumerate(("sign", "permute", "isotropic")):
        logs = [math.log(float.fromhex(x)) for r in ratios
                for x in r[(p * 3 + c) * reps:(p * 3 + c + 1) * reps]]
        print("%-8s %-10s %.3f  (%d ratios)" % (path, ctrl, math.exp(sum(logs) / len(logs)), len(logs)))
