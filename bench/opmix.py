#!/usr/bin/env python3
"""bench/opmix.py -- executed SASS instructions of one kernel launch by opcode.

Input: the CSV that `ncu --page source --print-source sass --csv` writes
(scripts/device-decode.sh, step opmix): one row per SASS instruction with
its "Instructions Executed" (warp level) and stall samples. Output: a table
of opcodes (modifiers dropped: HMMA.16816.F32.BF16 -> HMMA), executed warp
instructions, their share, per unit (--per N: e.g. the number of 64-token
pages the launch attended to), and the share of the warp stall samples.

Usage: opmix.py FILE.csv[.gz] [--per N --unit page] [--top 30]
"""
import csv
import gzip
import sys


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    path, per, unit, top = argv[1], 0.0, "unit", 30
    i = 2
    while i < len(argv):
        if argv[i] == "--per" and i + 1 < len(argv):
            per = float(argv[i + 1]); i += 2
        elif argv[i] == "--unit" and i + 1 < len(argv):
            unit = argv[i + 1]; i += 2
        elif argv[i] == "--top" and i + 1 < len(argv):
            top = int(argv[i + 1]); i += 2
        else:
            print(f"opmix.py: unknown argument {argv[i]!r}", file=sys.stderr)
            return 2
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", newline="") as f:
            lines = f.read().splitlines()
    except (OSError, EOFError, UnicodeDecodeError) as e:
        print(f"opmix.py: {path}: {getattr(e, 'strerror', None) or e}", file=sys.stderr)
        return 1
    head = next((k for k, l in enumerate(lines) if l.startswith('"Address","Source"')), None)
    if head is None:
        print(f"opmix.py: {path}: no ncu source table (expected a header row "
              f"starting \"Address\",\"Source\")", file=sys.stderr)
        return 1
    kernel = next((l for l in lines[:head] if l.startswith('"Kernel Name"')), "")
    rows = list(csv.reader(lines[head:]))
    cols = rows[0]
    try:
        cx, cs = cols.index("Instructions Executed"), cols.index("Warp Stall Sampling (All Samples)")
    except ValueError as e:
        print(f"opmix.py: {path}: missing column ({e})", file=sys.stderr)
        return 1
    ops, stalls = {}, {}
    for r in rows[1:]:
        if len(r) <= max(cx, cs) or not r[1].strip():
            continue
        toks = r[1].split()
        if toks[0].startswith("@"):
            toks = toks[1:]
        op = toks[0].split(".")[0] if toks else "?"
        n = float(r[cx] or 0)
        ops[op] = ops.get(op, 0.0) + n
        stalls[op] = stalls.get(op, 0.0) + float(r[cs] or 0)
    tot, stot = sum(ops.values()), sum(stalls.values()) or 1.0
    if kernel:
        print(kernel.split(",", 1)[1].strip('"'))
    hdr = f"| opcode | warp instructions | share | per {unit} | stall samples |" if per else \
          "| opcode | warp instructions | share | stall samples |"
    print(hdr)
    print("|---" * (5 if per else 4) + "|")
    for op, n in sorted(ops.items(), key=lambda kv: -kv[1])[:top]:
        cells = [op, f"{n:.0f}", f"{100 * n / tot:.1f} %"]
        if per:
            cells.append(f"{n / per:.1f}")
        cells.append(f"{100 * stalls[op] / stot:.1f} %")
        print("| " + " | ".join(cells) + " |")
    cells = ["all", f"{tot:.0f}", "100 %"] + ([f"{tot / per:.1f}"] if per else []) + ["100 %"]
    print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
