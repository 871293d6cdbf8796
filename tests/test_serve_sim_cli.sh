#!/usr/bin/env bash
# test_serve_sim_cli.sh — `qmla serve-sim` on the shipped Table 10 scenario:
# the printed rows carry the paper's counts (BF16: 32 preemptions, 3,996,255
# recomputed tokens; C4R4: none), -o writes /serve_sim with the same counts
# and 5,120 output tokens per configuration; usage and input errors exit 2.
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT.
set -uo pipefail
. "$(dirname "$0")/cli_lib.sh"
S=$ROOT/experiments/serving/paper-table10.scn
expect 0 "paper scenario" -- "$QMLA" serve-sim "$S" -o "$work/serve.h5"
contains "^BF16  *657856  *10279  *32  *3996255 " "BF16 row"
contains "^C4R4  *2360832  *[0-9]*  *0  *0 " "C4R4 row"
expect 0 "preemptions dataset" -- bash -c "h5dump -d /serve_sim/preemptions '$work/serve.h5' | grep -q '(0): 32, 0'"
expect 0 "recomputed dataset" -- bash -c "h5dump -d /serve_sim/recomputed_tokens '$work/serve.h5' | grep -q '(0): 3996255, 0'"
expect 0 "output tokens" -- bash -c "h5dump -d /serve_sim/output_tokens '$work/serve.h5' | grep -q '(0): 5120, 5120'"
expect 2 "no scenario" -- "$QMLA" serve-sim
expect 2 "missing scenario" -- "$QMLA" serve-sim "$work/nope.scn"
containsF "nope.scn: cannot open" "missing file message"
printf 'requests 1\ninput_tokens 10\noutput_tokens 1\npage_tokens 4\nmax_seqs 1\nmax_batched_tokens 8\nconfig A 16\n' > "$work/noattn.scn"
expect 2 "config without its attention cost" -- "$QMLA" serve-sim "$work/noattn.scn"
containsF "config A: expected its decode attention cost" "attention cost message"
expect 2 "-o the scenario itself" -- "$QMLA" serve-sim "$S" -o "$S"
finish test_serve_sim_cli
