#!/usr/bin/env bash
# tests/cli/test_report.sh — `qmla report` in a real browser (Debian's
# chromium-headless-shell, or chromium), offline:
#  - the page for the default capture's sweep (+ /predict on two layers, one
#    cell: the gains and the sink policy) loads with every network request
#    refused (a proxy at a closed port); the page's own load handler checks
#    that every inline SVG figure has a non-empty box and drawn content and
#    that no <img> is broken, and writes its verdict into <html
#    data-render-check>, which --dump-dom shows; the figures in the page are
#    exactly the SVG files `qmla figures --format svg` writes for the file;
#  - every table in the page equals the HDF5 data read by h5py (floats exact,
#    through data-v), every root attribute is in the provenance table, and
#    the ranking, the per-layer widths, the uniform --config and the sink
#    policy equal a NumPy rerun of the rules (check_report.py), also for
#    --budget C2R8 (where the uniform suggestion differs from the budget);
#  - hostile strings in a file (markup in the model name, a table string,
#    an attribute) appear as text: the page's one script, no injected element;
#  - -o refused for an input, a directory, a non-HTML file; bad inputs exit 2;
#    SIGTERM while the figures are drawn: exit 130, no page, no temporary left;
#  - the screenshot (PNG) is kept in the test log folder for a reviewer.
# SKIP (77) only when no chromium is installed (scripts/setup.sh installs
# chromium-headless-shell). Env (meson): QMLA_BIN, QMLA_SOURCE_ROOT,
# QMLA_PYTHON, QMLA_TEST_LOG_DIR (the screenshot's folder).
set -u
. "$(dirname "$0")/../support/cli_lib.sh"
need_python
browser=""
for b in chromium-headless-shell chromium; do
  command -v "$b" >/dev/null && { browser=$(command -v "$b"); break; }
done
if [ -z "$browser" ]; then
  echo "SKIP: no chromium-headless-shell or chromium (apt-get install chromium-headless-shell)"
  exit 77
fi
command -v gnuplot >/dev/null || { echo "FAIL: gnuplot not found (apt-get install gnuplot-nox)"; echo "0 passed, 1 failed"; exit 1; }
logdir=${QMLA_TEST_LOG_DIR:-$work}
mkdir -p "$logdir"
pycheck() {
  local what=$1; shift
  "$PY" "$ROOT/tests/cli/check_report.py" "$@" >"$work/py" 2>&1
  local rc=$?
  local n; n=$(grep -c '^ok' "$work/py")
  pass=$((pass + n))
  if [ $rc != 0 ] || grep -q '^FAIL' "$work/py"; then
    fail=$((fail + 1)); echo "FAIL: $what" >&2; grep -v '^ok' "$work/py" | head -20 | sed 's/^/    /' >&2
  fi
}
# offline: no sandbox (CI runs as root), no GPU, any request to the network
# goes to a closed local port and fails
chrome() {
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --proxy-server=127.0.0.1:9 --proxy-bypass-list='<-loopback>' \
    --user-data-dir="$work/profile" --window-size=1280,2400 "$@" 2>>"$work/chrome.log"
}

cap="$ROOT/data/tiny-mla-default.h5"
res="$work/default-sweep.h5"
expect 0 "sweep of the default capture" -- "$QMLA" sweep "$cap" -o "$res" --threads 2
expect 0 "predict (layers 1,4, cell prose-s0)" -- "$QMLA" predict "$cap" -o "$res" --layers 1,4 --cells prose-s0 --threads 2
expect 0 "report" -- "$QMLA" report "$res" -o "$work/report.html"
contains "^report: wrote .*report.html" "report's closing line"
expect 0 "qmla figures --format svg (the figures the page must hold)" -- \
  "$QMLA" figures "$res" -o "$work/figs" --format svg
# the page loads nothing: no URL of any scheme but its own fragments
if grep -Eq '(src|href)="(https?:|//|file:)' "$work/report.html"; then bad "the page references an outside resource"; else ok; fi

chrome --dump-dom "file://$work/report.html" >"$work/dom.html"
if grep -q 'data-render-check="ok' "$work/dom.html"; then ok; else
  bad "render verdict: $(grep -o 'data-render-check="[^"]*"' "$work/dom.html" | head -1)"; tail -5 "$work/chrome.log" >&2; fi
pycheck "the page against the HDF5 file" dom "$work/dom.html" "$work/figs" "$res"
chrome --screenshot="$work/shot.png" "file://$work/report.html" >/dev/null
if "$PY" - "$work/shot.png" <<'EOF'
import struct, sys
b = open(sys.argv[1], "rb").read()
w, h = struct.unpack(">II", b[16:24])
sys.exit(0 if b[:8] == b"\x89PNG\r\n\x1a\n" and (w, h) == (1280, 2400) and len(b) > 20000 else 1)
EOF
then ok; cp "$work/shot.png" "$logdir/test_report-screenshot.png"; cp "$work/dom.html" "$logdir/test_report-dom.html"
  echo "screenshot: $logdir/test_report-screenshot.png"
else bad "screenshot: not a 1280x2400 PNG with content"; fi

# --budget C2R8: the uniform suggestion (C3R4) is not the budget; and
# sensitivities made so that the sink rule's answer hangs on its details:
# every series 1 but sigma_0 = 30, sigma_1 = 6 and sigma_2 = 20 (about 25, 5
# and 16 times the mean): 8x the mean and contiguous from the start gives 1
# sink; 4x would give 3, any flagged position (not contiguous) 2
cp "$res" "$work/sinks.h5"
"$PY" - "$work/sinks.h5" <<'EOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    p = f["predict"]
    s = np.ones(p["sensitivity"].shape)
    for o, T in zip(p["sens_offset"][()], p["sens_T"][()]):
        for q in (0, 1):
            s[o + q * T:o + q * T + 3] = [30.0, 6.0, 20.0]
    p["sensitivity"][...] = s
EOF
expect 0 "report --budget C2R8 --no-figures" -- "$QMLA" report "$work/sinks.h5" -o "$work/c2r8.html" --budget C2R8 --no-figures
pycheck "ranking and suggestion at --budget C2R8" rank "$work/c2r8.html" "$work/sinks.h5"
if grep -q 'data-policy>sink1/local128<' "$work/c2r8.html"; then ok; else bad "designed sensitivities: policy $(grep -o 'data-policy>[^<]*' "$work/c2r8.html"), expected sink1/local128"; fi

# hostile strings: markup in the model name, a table string and an attribute
cp "$res" "$work/hostile.h5"
"$PY" - "$work/hostile.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    f.attrs["model"] = '<script>alert(1)</script>'
    f.attrs["note"] = '"><img src=x onerror=alert(2)>'
    g = f.create_group("extra")
    g.create_dataset("s", data=["<iframe src=x></iframe>", "a & b", "bad \xff byte"], dtype=h5py.string_dtype())
EOF
expect 0 "report of a file with markup in its strings" -- "$QMLA" report "$work/hostile.h5" -o "$work/hostile.html"
pycheck "hostile strings escaped" escape "$work/hostile.html" '<script>alert(1)</script>' \
  '"><img src=x onerror=alert(2)>' '<iframe src=x></iframe>' 'a & b'

# two results files, one without /summary: the figures they cannot share are
# drawn for each alone, so the page holds every figure of each file
"$PY" - "$res" "$work/oponly.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "w") as b:
    b.attrs["format"] = "qmla-results"
    b.attrs["format_version"] = 1
    a.copy("predict", b)
EOF
expect 0 "figures of the /predict-only file" -- "$QMLA" figures "$work/oponly.h5" -o "$work/figs-op" --format svg
expect 0 "figures of both files together" -- "$QMLA" figures "$res" "$work/oponly.h5" -o "$work/figs-both" --format svg
expect 0 "report of two results files" -- "$QMLA" report "$res" "$work/oponly.h5" -o "$work/two.html"
containsF "2 inputs" "two inputs: closing line"
# the page: those drawn together, then each file's others (names, sorted)
stems() { ls "$1" | sed -n 's/\.svg$//p'; }
want=$( { stems "$work/figs-both"; stems "$work/figs" | grep -vxF -f <(stems "$work/figs-both"; echo /);
          stems "$work/figs-op" | grep -vxF -f <(stems "$work/figs-both"; echo /); } | sort | tr '\n' ' ')
got=$(grep -o 'data-figure="[^"]*"' "$work/two.html" | sed 's/data-figure="//; s/"$//' | sort | tr '\n' ' ')
if [ -n "$got" ] && [ "$got" = "$want" ]; then ok; else bad "two inputs: figures [$got], expected [$want]"; fi
if grep -q '<h3>Alone: ' "$work/two.html"; then ok; else bad "two inputs: no per-input figure section"; fi

# --exclude (scripts/run-main.sh passes the figures' exclusion): the figures
# named are neither drawn nor listed as not drawn, and the page says they were
# left out; without it the same figures are listed as not drawn
skipped_list() { sed -n '/<ul class=skipped>/,/<\/ul>/p' "$1"; }
if skipped_list "$work/report.html" | grep -q 'allocate-pareto: needs'; then ok; else
  bad "without --exclude: allocate-pareto not listed as not drawn"; fi
expect 0 "report --exclude" -- "$QMLA" report "$res" -o "$work/excl.html" \
  --exclude allocate-pareto,allocate-strip,table10
if skipped_list "$work/excl.html" | grep -Eq '(allocate-pareto|allocate-strip|table10): needs'; then
  bad "--exclude: an excluded figure is listed as not drawn"; else ok; fi
if skipped_list "$work/excl.html" | grep -q 'fig5a-storage: needs'; then ok; else
  bad "--exclude: the figures not excluded are still listed (fig5a-storage)"; fi
if grep -q 'class=excluded>.*<code>allocate-pareto,allocate-strip,table10</code>' "$work/excl.html"; then ok; else
  bad "--exclude: the page does not name the figures left out"; fi
a=$(grep -o 'data-figure="[^"]*"' "$work/report.html" | sort); b=$(grep -o 'data-figure="[^"]*"' "$work/excl.html" | sort)
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok; else bad "--exclude of undrawable figures changed the drawn ones"; fi
# files of two formats (a sweep and a qmla storage file): a figure drawn for
# one input is not listed as not drawn for the other
expect 0 "storage -o" -- "$QMLA" storage --contexts 4096,131072 --config BF16,C4R4 -o "$work/storage.h5"
expect 0 "report of a sweep and a storage file" -- "$QMLA" report "$res" "$work/storage.h5" -o "$work/mixed.html"
if grep -q 'data-figure="fig5a-storage"' "$work/mixed.html" && grep -q 'data-figure="fig2-responses"' "$work/mixed.html"; then ok; else
  bad "sweep + storage: fig2-responses and fig5a-storage both drawn"; fi
if skipped_list "$work/mixed.html" | grep -Eq '(fig5a-storage|fig2-responses|table4): needs'; then
  bad "sweep + storage: a figure drawn for one input listed as not drawn for the other"; else ok; fi
if skipped_list "$work/mixed.html" | grep -q 'fig5c-serving: needs'; then ok; else
  bad "sweep + storage: fig5c-serving (no input has its data) not listed"; fi
expect 2 "report --exclude of an unknown figure" -- "$QMLA" report "$res" -o "$work/x.html" --exclude fig99
containsF 'no figure "fig99"' "--exclude unknown: message names it"

# output paths and bad inputs
expect 2 "-o the input" -- "$QMLA" report "$res" -o "$res"
contains "report (-o)" "-o the input: message"
mkdir -p "$work/dir"
expect 2 "-o a directory" -- "$QMLA" report "$res" -o "$work/dir"
cp "$work/shot.png" "$work/not-html.png" 2>/dev/null || printf 'PNG' >"$work/not-html.png"
expect 2 "-o an existing non-HTML file" -- "$QMLA" report "$res" -o "$work/not-html.png"
containsF "found a file of another kind" "-o non-HTML: message"
if cmp -s "$work/shot.png" "$work/not-html.png"; then ok; else bad "the non-HTML file was changed"; fi
expect 0 "-o an existing report is replaced" -- "$QMLA" report "$res" -o "$work/c2r8.html" --no-figures
expect 2 "no -o" -- "$QMLA" report "$res"
containsF "missing -o" "no -o: message"
expect 2 "missing input" -- "$QMLA" report "$work/nope.h5" -o "$work/x.html"
containsF "nope.h5" "missing input: message names the file"
printf 'not hdf5\n' >"$work/text.h5"
expect 2 "a text file as input" -- "$QMLA" report "$work/text.h5" -o "$work/x.html"
containsF "text.h5" "text input: message names the file"
if [ -e "$work/x.html" ]; then bad "a failed report left an output"; else ok; fi
expect 2 "--budget C5R4" -- "$QMLA" report "$res" -o "$work/x.html" --budget C5R4
containsF "--budget" "bad budget: message"
expect 2 "--gnuplot missing" -- "$QMLA" report "$res" -o "$work/x.html" --gnuplot "$work/no-gnuplot"
containsF "no-figures" "missing gnuplot: the message says --no-figures"
# SIGTERM to the process group while the figures are drawn (a gnuplot that
# waits first): exit 130, no page, the temporary folder removed
printf '#!/bin/sh\nsleep 30\nexec gnuplot "$@"\n' >"$work/slowgp"; chmod +x "$work/slowgp"
mkdir -p "$work/tmp"
TMPDIR="$work/tmp" setsid "$QMLA" report "$res" -o "$work/int.html" --gnuplot "$work/slowgp" \
  >"$work/out" 2>&1 &
pid=$!
for _ in $(seq 50); do ls "$work/tmp"/qmla-report.*/g0/data >/dev/null 2>&1 && break; sleep 0.1; done
kill -TERM -- -"$pid" 2>/dev/null
wait "$pid"; got=$?
if [ "$got" = 130 ]; then ok; else bad "SIGTERM during the figures: exit $got, expected 130"; fi
containsF "interrupted (SIGTERM)" "SIGTERM: message"
if [ -e "$work/int.html" ] || [ -n "$(ls -A "$work/tmp")" ]; then bad "SIGTERM left a page or a temporary folder"; else ok; fi
expect 0 "--help" -- "$QMLA" report --help
containsF "usage: qmla report" "--help: usage"
finish test_report
