#!/usr/bin/env bash
# test_op_shard.sh — `qmla intervene|predict|jvp --shard I/N` and the merge
# (`... CAPTURE PART... --merge`) against a one-process run of the same
# command (the expectation is the one-process run, not the merge code):
# 3 cost-balanced intervention shards (one with 2 threads, merged in
# shuffled order), 2 predict shards and 2 jvp shards give groups identical
# to the whole run (every dataset byte for byte, every attribute but the
# run's own provenance: tests/support/h5group_same.sh). Faults refused with
# exit 2, a message naming the fault, and nothing written: a missing part,
# a part of another plan (other layers; other shard count), of other
# options, two parts of one shard, a results file as a part, a torn part, a
# part of another engine (its P record rewritten with a valid checksum), a
# shard run onto a results file; --device and --engine cpu:0 with the CPU
# engine, a malformed NAME:DEVICE; a resume journal of a wider layer
# selection resumes only the selected layers (it wrote them all before).
# The capture: `qmla synth --shape tiny`, 2 layers x 2 cells x 3 sequences
# of 64 tokens = 12 items of equal cost (the merge logic does not depend on
# the weights; the embedded 6-layer capture made this test 2-3 minutes).
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT.
set -uo pipefail
. "$(dirname "$0")/../support/cli_lib.sh"
. "$(dirname "$0")/../support/h5group_same.sh"
cd "$work"
C=$work/syn.h5
expect 0 "synthetic capture" -- "$QMLA" synth -o "$C" --shape tiny --layers 2 --cells 2 --seqs 3 --tokens 64 --threads 1
IV="--reps 2 --bootstrap 100 --seed 7"

# --- interventions --------------------------------------------------------
expect 0 "intervene, one process" -- "$QMLA" intervene "$C" -o whole.h5 $IV --threads 1
expect 0 "intervene shard 0/3" -- "$QMLA" intervene "$C" -o i0.part --shard 0/3 $IV --threads 1
containsF "part     i0.part  (shard 0 of 3, engine cpu;" "part line"
expect 0 "intervene shard 1/3, 2 threads" -- "$QMLA" intervene "$C" -o i1.part --shard 1/3 $IV --threads 2
expect 0 "intervene shard 2/3" -- "$QMLA" intervene "$C" -o i2.part --shard 2/3 $IV --threads 1
expect 0 "no shard journal left" -- test ! -e i0.part.interventions.journal
n0=$(grep -c '^I ' i0.part); n1=$(grep -c '^I ' i1.part); n2=$(grep -c '^I ' i2.part)
expect 0 "the shards hold 12 items, 4 each (equal cost)" -- test "$n0 $n1 $n2" = "4 4 4"
expect 0 "merge 3 parts (shuffled)" -- "$QMLA" intervene "$C" i2.part i0.part i1.part --merge -o merged.h5 $IV --threads 1
containsF "merged from parts" "merge line"
expect 0 "merged /interventions equals the one-process run" -- h5group_same whole.h5 merged.h5 interventions
expect 1 "the comparison tells other seeds apart" -- bash -c ". $ROOT/tests/support/h5group_same.sh; work=$work; \"$QMLA\" intervene \"$C\" -o seed8.h5 --reps 2 --bootstrap 100 --seed 8 --threads 1 >/dev/null && h5group_same whole.h5 seed8.h5 interventions"

# faults
expect 2 "missing part refused" -- "$QMLA" intervene "$C" i0.part i2.part --merge -o x.h5 $IV
containsF "incomplete: 4 of the plan's items are missing; no part for shard(s) 1 of 3" "missing shard named"
containsF "first missing: (layer 0, cell \"synth-s1\", sequence 1: shard 1)" "first missing item named"
expect 0 "nothing written when refused" -- test ! -e x.h5
expect 0 "intervene shard 1/3 of layer 0" -- "$QMLA" intervene "$C" -o l1.part --shard 1/3 --layers 0 $IV --threads 1
expect 2 "part of another plan (layers) refused" -- "$QMLA" intervene "$C" i0.part l1.part i2.part --merge -o x.h5 $IV
containsF "l1.part is a part of another plan (plan hash" "plan message"
expect 0 "intervene shard 1/2" -- "$QMLA" intervene "$C" -o h1.part --shard 1/2 $IV --threads 1
expect 2 "part of another shard count refused" -- "$QMLA" intervene "$C" i0.part h1.part i2.part --merge -o x.h5 $IV
containsF "h1.part is a part of another plan than i0.part (shard 1 of 2; expected shards of 3)" "shard count message"
expect 0 "intervene shard 1/3, seed 8" -- "$QMLA" intervene "$C" -o f1.part --shard 1/3 --reps 2 --bootstrap 100 --seed 8 --threads 1
expect 2 "part of other options refused" -- "$QMLA" intervene "$C" i0.part f1.part i2.part --merge -o x.h5 $IV
containsF "f1.part: journal of another run" "options message"
cp i1.part i1-copy.part
expect 2 "two parts of one shard refused" -- "$QMLA" intervene "$C" i0.part i1.part i1-copy.part i2.part --merge -o x.h5 $IV
containsF "i1.part and i1-copy.part are both shard 1 of 3: overlapping parts" "overlap message"
expect 2 "a results file is no part" -- "$QMLA" intervene "$C" i0.part whole.h5 i2.part --merge -o x.h5 $IV
containsF "whole.h5: expected a journal header" "not-a-part message"
head -c $(( $(stat -c %s i1.part) - 40 )) i1.part > torn.part
expect 2 "a torn part: its last item missing" -- "$QMLA" intervene "$C" i0.part torn.part i2.part --merge -o x.h5 $IV
containsF "incomplete: 1 of the plan's items are missing; no part for shard(s) (none: a part is incomplete)" "torn message"
# the P record rewritten to engine cuda, with a valid trailer (FNV-1a 64)
"$PY" - i1.part cuda.part <<'PYEOF'
import sys
src, dst = sys.argv[1:3]
lines = open(src).read().split("\n")
def fnv(b):
    h = 1469598103934665603
    for c in b:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h
p = lines[1].split(" ")
p[4], p[5], p[6] = "cuda", "1", "Fake%20GPU%2C%20device%201%20of%202"
rec = (" ".join(p) + "\n").encode()
lines[1], lines[2] = rec.decode().rstrip("\n"), "#%016x %d" % (fnv(rec), len(rec))
open(dst, "w").write("\n".join(lines))
PYEOF
expect 2 "a part of another engine refused" -- "$QMLA" intervene "$C" i0.part cuda.part i2.part --merge -o x.h5 $IV
containsF "cuda.part was computed by engine \"cuda\" and i0.part by engine \"cpu\"" "engine message"
expect 0 "nothing written by any refusal" -- test ! -e x.h5
expect 2 "a shard run does not replace a results file" -- "$QMLA" intervene "$C" -o whole.h5 --shard 0/3 $IV
containsF "whole.h5: exists and is not a part file" "target message"
expect 0 "whole.h5 still a results file" -- h5group_same whole.h5 merged.h5 interventions
expect 2 "--merge without parts" -- "$QMLA" intervene "$C" --merge -o x.h5
containsF "--merge: expected CAPTURE.h5 and at least one PART" "merge usage"
expect 2 "--device with the cpu engine" -- "$QMLA" intervene "$C" -o x.h5 --device 0
containsF "--device: engine \"cpu\" has no devices" "device message"
expect 2 "--engine cpu:0" -- "$QMLA" predict "$C" -o x.h5 --engine cpu:0
containsF "engine \"cpu\" has no devices: device 0 asked for" "cpu:0 message"
expect 2 "--engine cuda:x" -- "$QMLA" sweep "$C" -o x.h5 --engine cuda:x
containsF "expected NAME or NAME:DEVICE (e.g. cuda:1)" "NAME:DEVICE message"
expect 2 "--engine auto:1" -- "$QMLA" sweep "$C" -o x.h5 --engine auto:1
containsF "auto takes no device" "auto:N message"
expect 2 "bad --shard" -- "$QMLA" intervene "$C" -o x.h5 --shard 3/3
containsF "--shard: expected I/N with 0 <= I < N" "shard usage"
# an empty shard: 3 items (layer 0, one cell) in 4 shards leave shard 1
# without items; a merge of the other three parts is complete (it read the
# missing shard's part header out of bounds before; CI's ASan stage sees it)
E3="$IV --layers 0 --cells synth-s1 --threads 1"
expect 0 "intervene, 3 items, one process" -- "$QMLA" intervene "$C" -o e.h5 $E3
for s in 0 1 2 3; do
    expect 0 "intervene 3 items, shard $s/4" -- "$QMLA" intervene "$C" -o e$s.part --shard $s/4 $E3
done
expect 0 "shard 1 of 4 is empty" -- test "$(grep -c '^I ' e1.part)" = 0
expect 0 "merge without the empty shard's part" -- "$QMLA" intervene "$C" e3.part e0.part e2.part --merge -o em.h5 $E3
expect 0 "it equals the one-process run" -- h5group_same e.h5 em.h5 interventions

# --- predict and jvp -------------------------------------------------------
expect 0 "predict, one process" -- "$QMLA" predict "$C" -o pw.h5 --threads 2
expect 0 "predict shard 0/2" -- "$QMLA" predict "$C" -o q0.part --shard 0/2 --threads 1
expect 0 "predict shard 1/2" -- "$QMLA" predict "$C" -o q1.part --shard 1/2 --threads 2
expect 0 "predict merge" -- "$QMLA" predict "$C" q1.part q0.part --merge -o pm.h5
expect 0 "merged /predict equals the one-process run" -- h5group_same pw.h5 pm.h5 predict
expect 2 "predict: missing part refused" -- "$QMLA" predict "$C" q1.part --merge -o x.h5
containsF "no part for shard(s) 0 of 2" "predict missing shard"
expect 2 "predict: an interventions part refused" -- "$QMLA" predict "$C" q0.part i1.part --merge -o x.h5
containsF "i1.part: journal of another run" "kind message"
# a resume journal of a wider selection (both shards' items, layers 0-1, as
# the journal of an interrupted run) resumes only the selected layer's items
"$PY" - q0.part q1.part r.h5.predict.journal <<'PYEOF'
import sys
a = open(sys.argv[1]).read().rstrip("\n").split("\n")
b = open(sys.argv[2]).read().rstrip("\n").split("\n")
open(sys.argv[3], "w").write("\n".join([a[0].replace("predict-part", "predict", 1)] + a[3:] + b[3:]) + "\n")
PYEOF
expect 0 "predict --layers 0 over a wider journal" -- "$QMLA" predict "$C" -o r.h5 --layers 0 --threads 1
containsF "(84 points;" "only layer 0's points"
expect 0 "predict --layers 0, fresh" -- "$QMLA" predict "$C" -o r0.h5 --layers 0 --threads 1
expect 0 "the resumed group equals the fresh one" -- h5group_same r0.h5 r.h5 predict
# a resume across engines (the resume key has no engine): a predict journal
# whose items an engine "cuda" wrote ("@engine cuda" mark, valid trailer)
# resumed by the CPU engine; the file names both engines, and a shard whose
# items all came from that journal is a "cuda" part, refused beside "cpu"
# parts (review10: the part header used to say cpu)
"$PY" - q0.part rx.h5.predict.journal m0.part.predict.journal <<'PYEOF'
import sys
def fnv(b):
    h = 1469598103934665603
    for c in b:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h
a = open(sys.argv[1]).read().rstrip("\n").split("\n")
mark = b"@engine cuda\n"
head = a[0].replace("predict-part", "predict", 1)
body = [head, mark.decode().rstrip("\n"), "#%016x %d" % (fnv(mark), len(mark))] + a[3:]
for out in sys.argv[2:]:
    open(out, "w").write("\n".join(body) + "\n")
PYEOF
expect 0 "predict resumed across engines" -- "$QMLA" predict "$C" -o rx.h5 --threads 1
expect 1 "it differs from the one-process run in the engine only" -- h5group_same pw.h5 rx.h5 predict
containsF "attribute engine differs ('cpu' vs 'cuda+cpu')" "the engine attribute"
containsF "42 datasets compared" "every dataset compared"
lacks "DIFFERS /predict/" "no dataset differs"
expect 0 "its engine attribute" -- h5dump -a /predict/engine rx.h5
containsF '"cuda+cpu"' "the resumed file names both engines"
expect 0 "a shard resumed wholly from the cuda journal" -- "$QMLA" predict "$C" -o m0.part --shard 0/2 --threads 1
expect 2 "its part refused beside a cpu part" -- "$QMLA" predict "$C" m0.part q1.part --merge -o x.h5
containsF "and m0.part by engine \"cuda\"" "cross-engine part message"
expect 0 "jvp, one process" -- "$QMLA" jvp "$C" -o jw.h5 --threads 1
expect 0 "jvp shard 0/2" -- "$QMLA" jvp "$C" -o j0.part --shard 0/2 --threads 1
expect 0 "jvp shard 1/2" -- "$QMLA" jvp "$C" -o j1.part --shard 1/2 --threads 1
expect 0 "jvp merge into the predict file (a second group)" -- "$QMLA" jvp "$C" j0.part j1.part --merge -o pm.h5
expect 0 "merged /jvp equals the one-process run" -- h5group_same jw.h5 pm.h5 jvp
expect 0 "and /predict is kept" -- h5group_same pw.h5 pm.h5 predict
expect 0 "nothing written by the refusals" -- test ! -e x.h5
finish test_op_shard
