"""bench/tablelib.py — what the decode table scripts (issue19_table.py,
flashmla_table.py, variants_table.py) share: reading a bench TSV, the
fastest row of a configuration and the variant a row names, the -h / usage
handling, writing the table as TSV and as text, and the exit on an
unreadable or malformed file. The scripts import it from their own folder
(Python puts a script's folder first on sys.path), so they run from any
directory. Standard library only."""
import csv
import sys


def read(path):
    """the rows of a tab-separated file with a header line, as dicts"""
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def best(rows, prefix):
    """fastest row whose config is prefix (variant 0) or 'prefix vN'; None if none"""
    c = [r for r in rows if r["config"] == prefix or r["config"].startswith(prefix + " v")]
    return min(c, key=lambda r: float(r["median_us"])) if c else None


def variant(r):
    """the variant a row's config names: 'C4R4 v7' v7, 'C4R4' v0"""
    return r["config"].split()[-1] if " v" in r["config"] else "v0"


def usage(argv, doc, n_ok):
    """None when n_ok(len(argv)); otherwise the exit status: 0 after -h /
    --help (doc on stdout), else 2 (doc on stderr)"""
    if len(argv) > 1 and argv[1] in ("-h", "--help"):
        sys.stdout.write(doc)
        return 0
    if not n_ok(len(argv)):
        sys.stderr.write(doc)
        return 2
    return None


def write_tsv(path, cols, rows):
    """rows (dicts) under the header cols, tab-separated"""
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, delimiter="\t", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def write_text(lines, path=None):
    """the lines to path (when one is given) and to stdout"""
    text = "\n".join(lines) + "\n"
    if path is not None:
        with open(path, "w") as fh:
            fh.write(text)
    sys.stdout.write(text)


def run(main):
    """exit with main(sys.argv)'s status; 1, naming the error, on a file
    that cannot be read or lacks a column"""
    try:
        sys.exit(main(sys.argv))
    except (OSError, KeyError, ValueError) as e:
        sys.stderr.write("%s: %s: %s\n" % (sys.argv[0], type(e).__name__, e))
        sys.exit(1)
