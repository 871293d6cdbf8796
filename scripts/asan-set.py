#!/usr/bin/env python3
"""scripts/asan-set.py — choose the tests of the ASan stage by line coverage.

The release stage of scripts/run-tests.sh runs every test. The ASan +
UBSan stage runs again only the tests needed for the sanitizers to execute
every line of lib/ and cli/ that the whole suite executes under them: a
test whose executed lines are all executed by the others adds no code for
the sanitizers to check and is left out of that stage.

This script measures it. It builds the ASan configuration of run-tests.sh
with gcov instrumentation added (-Db_coverage=true; build folder
build-asan-cov/ unless --build), runs every test of that build one by one
(2 at a time, each with its own GCOV_PREFIX, so that each test's counters,
also those of the qmla processes and the libqmla.so a test starts, are its
own), reads the counters with gcov, and chooses:
  1. every C test (cheap; they are the unit tests of the library),
  2. then, greedily, the shell or Python test that adds the most new lines
     per second of its own run time, until the union of the chosen tests'
     lines equals the whole suite's,
  3. then drops any chosen test (dearest first) whose lines the others
     still cover.
It writes tests/asan-set.txt (or --out): one line per test, `run NAME` or
`left NAME`, with the measured seconds and line counts as comments, and a
header with the totals. Not yet used by run-tests.sh (its first full run is
still to be done): the plan is that the ASan stage reads that file and runs
every test marked run and every test the file does not name.

Usage: /usr/bin/python3 scripts/asan-set.py [--build DIR] [--out FILE] [--jobs N]
Takes about 15 minutes on 2 idle cores (the build, then every test under
ASan with coverage counters). Needs gcc's gcov (Debian's gcc package).
"""
import argparse
import concurrent.futures as cf
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def build(b):
    if not os.path.exists(os.path.join(b, "build.ninja")):
        sh(["bash", os.path.join(ROOT, "scripts/meson-setup.sh"), b,
            "--buildtype=debugoptimized", "-Dcuda=disabled",
            "-Db_sanitize=address,undefined", "-Db_lundef=false",
            "-Dc_args=-fno-sanitize-recover=all", "-Db_coverage=true"], cwd=ROOT)
    sh(["ninja", "-C", b], cwd=ROOT, stdout=subprocess.DEVNULL)


def tests_of(b):
    out = subprocess.run(["meson", "introspect", b, "--tests"], check=True, cwd=ROOT,
                         capture_output=True, text=True).stdout
    ts = []
    for t in json.loads(out):
        suites = [s.split(":")[-1] for s in t.get("suite", [])]
        if not {"unit", "ref"} & set(suites):
            continue
        cmd = t["cmd"]
        kind = "c"
        if any(c.endswith(".sh") for c in cmd) or any(c.endswith(".py") for c in cmd):
            kind = "script"
        ts.append({"name": t["name"], "kind": kind})
    return ts


def run_one(b, t, prefix_root):
    pre = os.path.join(prefix_root, t["name"])
    os.makedirs(pre, exist_ok=True)
    env = dict(os.environ, GCOV_PREFIX=pre, GCOV_PREFIX_STRIP="0",
               ASAN_OPTIONS="detect_leaks=1:abort_on_error=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    t0 = time.time()
    r = subprocess.run(["meson", "test", "-C", b, "--no-rebuild", "--timeout-multiplier", "4",
                        "--logbase", "cov-" + t["name"], t["name"]], cwd=ROOT, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t["seconds"] = time.time() - t0
    t["ok"] = r.returncode == 0
    return t


def lines_of(b, pre):
    """the (source, line) pairs of lib/ and cli/ executed in one prefix tree"""
    babs = os.path.abspath(b)
    mirror = pre + babs
    got = set()
    if not os.path.isdir(mirror):
        return got
    for d, _, files in os.walk(mirror):
        gcda = [f for f in files if f.endswith(".gcda")]
        if not gcda:
            continue
        src_dir = babs + d[len(mirror):]
        for f in gcda:
            gcno = f[:-5] + ".gcno"
            if os.path.exists(os.path.join(src_dir, gcno)):
                shutil.copy(os.path.join(src_dir, gcno), os.path.join(d, gcno))
        out = subprocess.run(["gcov", "-j", "-t"] + gcda, cwd=d, capture_output=True,
                             text=True).stdout
        dec = json.JSONDecoder()
        i = 0
        while i < len(out):
            while i < len(out) and out[i].isspace():
                i += 1
            if i >= len(out):
                break
            doc, i = dec.raw_decode(out, i)
            for fobj in doc.get("files", []):
                path = os.path.normpath(os.path.join(doc.get("current_working_directory", d),
                                                     fobj["file"]))
                rel = os.path.relpath(path, ROOT)
                if not (rel.startswith("lib/") or rel.startswith("cli/")):
                    continue
                for ln in fobj["lines"]:
                    if ln["count"] > 0:
                        got.add((rel, ln["line_number"]))
    return got


def choose(tests, cov):
    full = set().union(*(cov[t["name"]] for t in tests))
    chosen = [t for t in tests if t["kind"] == "c"]
    have = set().union(*(cov[t["name"]] for t in chosen)) if chosen else set()
    rest = [t for t in tests if t["kind"] != "c"]
    while have != full:
        best = max(rest, key=lambda t: len(cov[t["name"]] - have) / max(t["seconds"], 0.5))
        if not cov[best["name"]] - have:
            break
        chosen.append(best)
        rest.remove(best)
        have |= cov[best["name"]]
    # drop the dearest scripts the others still cover
    for t in sorted([t for t in chosen if t["kind"] != "c"], key=lambda t: -t["seconds"]):
        others = set().union(*(cov[u["name"]] for u in chosen if u is not t))
        if cov[t["name"]] <= others:
            chosen.remove(t)
    return chosen, full


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build-asan-cov"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/asan-set.txt"))
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    t_start = time.time()
    build(a.build)
    tests = tests_of(a.build)
    prefix_root = tempfile.mkdtemp(prefix="qmla-asan-cov-")
    print("asan-set: %d tests of the unit and ref suites, run one by one under ASan with "
          "coverage counters (%s)" % (len(tests), prefix_root), file=sys.stderr)
    with cf.ThreadPoolExecutor(a.jobs) as ex:
        for k, t in enumerate(ex.map(lambda t: run_one(a.build, t, prefix_root), tests)):
            print("  [%d/%d] %-28s %6.1f s %s" % (k + 1, len(tests), t["name"], t["seconds"],
                                                  "ok" if t["ok"] else "FAILED"),
                  file=sys.stderr)
    bad = [t["name"] for t in tests if not t["ok"]]
    if bad:
        print("asan-set: these tests failed under ASan with coverage: %s; no set written "
              "(logs: %s/meson-logs/cov-*.txt)" % (" ".join(bad), a.build), file=sys.stderr)
        return 1
    cov = {t["name"]: lines_of(a.build, os.path.join(prefix_root, t["name"])) for t in tests}
    shutil.rmtree(prefix_root, ignore_errors=True)
    chosen, full = choose(tests, cov)
    names = {t["name"] for t in chosen}
    have = set().union(*(cov[t["name"]] for t in chosen))
    if have != full:
        print("asan-set: internal error: the chosen set misses %d lines" % len(full - have),
              file=sys.stderr)
        return 1
    commit = subprocess.run(["bash", os.path.join(ROOT, "scripts/commit-id.sh"), ROOT],
                            capture_output=True, text=True).stdout.strip()
    s_all = sum(t["seconds"] for t in tests)
    s_run = sum(t["seconds"] for t in chosen)
    with open(a.out + ".tmp", "w") as f:
        f.write("# tests/asan-set.txt — the tests the ASan + UBSan stage of scripts/run-tests.sh\n"
                "# runs (`run`) and leaves to the release stage (`left`): written by\n"
                "# `/usr/bin/python3 scripts/asan-set.py` (docs/testing.md, \"The ASan set\");\n"
                "# do not edit by hand. A test not named here runs under ASan.\n")
        f.write("# tree %s, %s; %d tests, %d lines of lib/ and cli/ executed by the whole\n"
                "# suite under ASan; the %d tests marked run execute all of them.\n"
                "# Test-seconds under ASan with coverage, one test at a time: %.0f for all,\n"
                "# %.0f for the set.\n" % (commit, time.strftime("%Y-%m-%d"), len(tests),
                                           len(full), len(chosen), s_all, s_run))
        f.write("# kind seconds lines own-lines name\n")
        for t in sorted(tests, key=lambda t: t["name"]):
            n = t["name"]
            own = len(cov[n] - set().union(*(cov[u["name"]] for u in tests if u is not t)))
            f.write("%s %s  # %s %.1f s, %d lines, %d only here\n"
                    % ("run " if n in names else "left", n, t["kind"], t["seconds"],
                       len(cov[n]), own))
    os.replace(a.out + ".tmp", a.out)
    print("asan-set: %d of %d tests run under ASan (%.0f of %.0f test-seconds); %d lines; "
          "written %s in %.0f s" % (len(chosen), len(tests), s_run, s_all, len(full), a.out,
                                    time.time() - t_start), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
