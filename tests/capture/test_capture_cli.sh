#!/usr/bin/env bash
# tests/capture/test_capture_cli.sh — `qmla capture` (the native capture,
# lib/engine/capture_native.c) end to end on models/tiny-mla, small enough for CI
# (a few seconds: 2 layers, 32 or 160 tokens):
#   - 2 layers x 1 cell x 2 sequences x 32 tokens: exit 0, `qmla check`
#     accepts the file, the root attributes say what made it;
#   - the window offsets it prints equal sample_windows of the Python tool
#     (experiments/capture/qmla_capture.py, imported) on the same text and
#     seeds, and the stored positions and shapes are as asked (needs
#     $QMLA_PYTHON with numpy + h5py: these checks are skipped without it);
#   - against the transformers capture data/tiny-mla-default.h5 (cells
#     prose-s0 and code-s0, 1 x 160 tokens, float16, no pre tensors): layers
#     0-1 of the native capture with the same options agree dataset by
#     dataset within a relative Frobenius error of 1e-4
#     (experiments/tiny-mla/compare_captures.py; measured: <= 2.8e-5 over
#     all 6 layers, experiments/tiny-mla/README.md), weights exactly;
#   - 1 and 2 threads give the same datasets and attributes (h5diff);
#     a CRLF copy of the corpus gives the same capture as the LF text
#     (Python's universal newlines);
#   - refused, exit 2, message naming the cause, no output file left: a corpus
#     too short for the windows, a missing corpus file, invalid UTF-8, a bad
#     model directory, an unwritable output, an existing output without
#     --force, --cells naming no corpus, a layer beyond the model, -o one of
#     the corpora (even with --force);
#   - resume after SIGINT and SIGKILL (below).
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT, QMLA_PYTHON.
source "$(dirname "$0")/../support/cli_lib.sh"
M=$ROOT/models/tiny-mla
P=$ROOT/data/heldout/prose.txt.gz
C=$ROOT/data/heldout/code.txt.gz
have_py=0
"$PY" -c 'import numpy, h5py' 2>/dev/null && have_py=1

expect 0 "small capture" -- "$QMLA" capture "$M" --corpus prose=$P --seeds 0 --seqs 2 \
  --tokens 32 --layers 0-1 --threads 2 -o "$work/a.h5"
contains "^cell prose-s0: windows at text offsets [0-9]* [0-9]*$" "offsets printed"
grep "^cell prose-s0" "$work/out" | sed 's/.*offsets //' > "$work/offs-c.txt"
contains "^layer 1 cell prose-s0: N=2 T=32 recompute error" "per layer-cell line"
expect 0 "qmla check accepts it" -- "$QMLA" check "$work/a.h5"
contains "^consistent" "check says consistent"
contains "tol      1e-05" "float32 storage: check_tolerance 1e-5"

if [ $have_py = 1 ]; then
  "$PY" - "$ROOT" "$P" "$work/offs-c.txt" "$work/a.h5" <<'PY' && ok || bad "offsets / layout against Python"
import gzip, sys
import h5py, numpy as np
sys.path.insert(0, sys.argv[1] + "/experiments/capture")
import qmla_capture as q
text = gzip.open(sys.argv[2], "rt", encoding="utf-8").read()
toks = list(text.encode("utf-8"))
seqs, offs = q.sample_windows(toks, 2, 32, 256, 0, "prose")
got = [int(x) for x in open(sys.argv[3]).read().split()]
assert got == offs, (got, offs)
def s(v):
    return v.decode() if isinstance(v, bytes) else str(v)
with h5py.File(sys.argv[4], "r") as f:
    assert s(f.attrs["format"]) == "qmla-capture"
    assert "native C engine" in s(f.attrs["source"]), f.attrs["source"]
    assert sorted(f["layers"]) == ["0", "1"]
    c = f["layers/1/cells/prose-s0"]
    assert s(c.attrs["dataset"]) == "prose" and c.attrs["seed"] == 0
    assert c["c_kv"].shape == (2, 32, 256) and c["q_nope"].shape == (2, 8, 32, 64)
    assert c["k_rope_pre"].shape == (2, 32, 64) and c["rope_cos"].shape == (2, 32, 32)
    assert (c["positions"][()] == np.arange(32)[None, :]).all()
    assert f["config"].attrs["n_layers"] == 6
PY
  # the transformers capture, layers 0-1
  expect 0 "capture like the default" -- "$QMLA" capture "$M" --corpus prose=$P --corpus code=$C \
    --seeds 0 --seqs 1 --tokens 160 --no-pre --store float16 --gzip 9 --layers 0-1 \
    --model-name qmla/tiny-mla -o "$work/d.h5"
  contains "tol      5e-03\|recompute error .* (tolerance 0.005)" "float16: tolerance 5e-3"
  expect 0 "native = transformers within 1e-4" -- "$PY" "$ROOT/experiments/tiny-mla/compare_captures.py" \
    "$work/d.h5" "$ROOT/data/tiny-mla-default.h5" --layers 0,1 --tol 1e-4 --quiet
  contains "w_uk  *0.000e+00" "weights exact"
  contains "(32 datasets compared)" "every dataset of layers 0-1 compared"
else
  echo "SKIP: $PY lacks numpy/h5py: offsets against Python and the transformers comparison not run"
fi

expect 0 "1 thread" -- "$QMLA" capture "$M" --corpus prose=$P --seeds 0 --seqs 2 \
  --tokens 32 --layers 0-1 --threads 1 -o "$work/b.h5"
expect 0 "1 and 2 threads: same file content" -- h5diff -q "$work/a.h5" "$work/b.h5"
# CRLF: the same text read as Python reads it
zcat "$P" | head -c 20000 > "$work/lf.txt"
sed 's/$/\r/' "$work/lf.txt" > "$work/crlf.txt"
expect 0 "LF corpus" -- "$QMLA" capture "$M" --corpus p=$work/lf.txt --seeds 3 --seqs 2 \
  --tokens 32 --layers 0 -o "$work/lf.h5"
expect 0 "CRLF corpus" -- "$QMLA" capture "$M" --corpus p=$work/crlf.txt --seeds 3 --seqs 2 \
  --tokens 32 --layers 0 -o "$work/crlf.h5"
expect 0 "CRLF = LF" -- h5diff -q "$work/lf.h5" "$work/crlf.h5"

# refusals
printf 'short text' > "$work/short.txt"
expect 2 "corpus too short" -- "$QMLA" capture "$M" --corpus s=$work/short.txt --seqs 2 \
  --tokens 32 -o "$work/x.h5"
containsF "corpus s ($work/short.txt) is too short: 2 windows of 32 tokens need 62 text tokens, found 10" "too short named"
expect 2 "missing corpus" -- "$QMLA" capture "$M" --corpus s=$work/none.txt -o "$work/x.h5"
containsF "corpus s: $work/none.txt: cannot open" "missing corpus named"
printf 'abc\xff\xfedef' > "$work/bad.txt"
expect 2 "invalid UTF-8" -- "$QMLA" capture "$M" --corpus b=$work/bad.txt --seqs 1 --tokens 2 -o "$work/x.h5"
containsF "expected UTF-8 text, found an invalid byte 0xff at offset 3" "invalid byte named"
mkdir -p "$work/nomodel"
expect 2 "bad model dir" -- "$QMLA" capture "$work/nomodel" --corpus prose=$P --seqs 1 --tokens 8 -o "$work/x.h5"
containsF "$work/nomodel/config.json" "model dir named"
expect 2 "unwritable output" -- "$QMLA" capture "$M" --corpus prose=$P --seqs 1 --tokens 8 \
  --layers 0 -o "$work/no/such/dir/x.h5"
containsF "$work/no/such/dir" "output named"
expect 2 "existing output" -- "$QMLA" capture "$M" --corpus prose=$P --seqs 1 --tokens 8 -o "$work/a.h5"
containsF "exists (use --force" "existing output refused"
expect 2 "cells without corpus" -- "$QMLA" capture "$M" --corpus prose=$P --cells code:1 -o "$work/x.h5"
containsF "--cells code:1: no --corpus code=FILE given" "unknown corpus named"
expect 2 "layer beyond the model" -- "$QMLA" capture "$M" --corpus prose=$P --seqs 1 --tokens 8 \
  --layers 6 -o "$work/x.h5"
containsF "found 6" "layer named"
# -o the corpus it reads, even with --force (before: replaced the text)
cp "$P" "$work/corpus.gz"
expect 2 "-o the corpus --force" -- "$QMLA" capture "$M" --corpus prose="$work/corpus.gz" --seqs 1 \
  --tokens 8 --layers 0 --force -o "$work/corpus.gz"
containsF "found the input $work/corpus.gz itself" "the corpus named"
cmp -s "$work/corpus.gz" "$P" && ok || bad "-o the corpus: the corpus changed"
if [ -e "$work/x.h5" ] || ls "$work"/x.h5.tmp* >/dev/null 2>&1; then bad "a refused run left an output"; else ok; fi
# Resume (lib/io/journal.h, kind "capture"): SIGINT exits 130 and keeps the
# finished windows in OUT.journal (+ .data), no OUT; a foreign journal is
# refused; SIGKILL mid-run loses at most the window in flight; the rerun
# restores every journaled window (it says how many: not started over) and
# the capture equals an uninterrupted run's (h5diff of every dataset and
# attribute); journal and data are removed. QMLA_TEST_SMALL=1 (set by
# tests/meson.build in a sanitizer build): 2 x 4 windows instead of 2 x 6.
sq=6
[ "${QMLA_TEST_SMALL:-0}" = 1 ] && sq=4
cw=$((2 * sq))   # windows of the capture
R="--corpus prose=$P --seeds 0,1 --seqs $sq --tokens 256 --layers 0-2 --threads 1"
expect 0 "uninterrupted capture (resume reference)" -- "$QMLA" capture "$M" $R -o "$work/clean.h5"
[ ! -e "$work/clean.h5.journal" ] && [ ! -e "$work/clean.h5.journal.data" ] && ok || bad "journal left after an uninterrupted run"
jrecs() { grep -c '^W ' "$work/int.h5.journal" 2>/dev/null || echo 0; }
run_until() { # SIGNAL MIN_RECORDS: run the capture, send SIGNAL once the journal holds MIN_RECORDS
  "$QMLA" capture "$M" $R -o "$work/int.h5" > "$work/out" 2>&1 &
  cpid=$!
  for _ in $(seq 1 1200); do
    [ "$(jrecs)" -ge "$2" ] && break
    kill -0 $cpid 2>/dev/null || break
    sleep 0.05
  done
  kill -"$1" $cpid 2>/dev/null
  wait $cpid
  rc=$?
}
run_until INT 2
if [ $rc = 130 ]; then ok; else bad "SIGINT: exit $rc, expected 130"; fi
containsF "interrupted (SIGINT); finished windows are kept in $work/int.h5.journal" "interruption reported"
n1=$(jrecs)
[ ! -e "$work/int.h5" ] && [ "$n1" -ge 2 ] && [ "$n1" -lt $cw ] && ok || bad "SIGINT: output $(ls "$work"/int.h5 2>&1), journal of $n1 of $cw windows (expected a partial journal, no output)"
expect 2 "a journal of other options refused" -- "$QMLA" capture "$M" ${R/--seqs $sq/--seqs $((sq - 1))} -o "$work/int.h5"
contains "--force" "the refusal names --force"
[ "$(jrecs)" = "$n1" ] && ok || bad "the refused run changed the journal"
run_until KILL $((n1 + 2))
if [ $rc = 137 ]; then ok; else bad "SIGKILL: exit $rc, expected 137"; fi
containsF "resumed $n1 of $cw windows" "the SIGKILLed run resumed the SIGINT's windows"
n2=$(jrecs)
[ ! -e "$work/int.h5" ] && [ "$n2" -gt "$n1" ] && ok || bad "SIGKILL: output left or journal not grown ($n1 -> $n2)"
expect 0 "resumed capture" -- "$QMLA" capture "$M" $R -o "$work/int.h5"
containsF "resumed $n2 of $cw windows" "the rerun restored the $n2 journaled windows"
expect 0 "resumed capture = uninterrupted capture" -- h5diff -q "$work/clean.h5" "$work/int.h5"
[ ! -e "$work/int.h5.journal" ] && [ ! -e "$work/int.h5.journal.data" ] && ok || bad "journal left after the resumed run"
finish test_capture_cli
