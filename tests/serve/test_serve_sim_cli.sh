#!/usr/bin/env bash
# test_serve_sim_cli.sh — `qmla serve-sim` on the shipped Table 10 scenario:
# the printed rows carry the paper's counts (BF16: 32 preemptions, 3,996,255
# recomputed tokens; C4R4: none), -o writes /serve_sim with the same counts
# and 5,120 output tokens per configuration; usage and input errors exit 2,
# and nonsense numbers (NaN/inf/negative costs, counts beyond 2^40) are
# refused naming the cause, with no results file.
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT.
set -uo pipefail
. "$(dirname "$0")/../support/cli_lib.sh"
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
# -o replaces the whole file: an earlier serve-sim file is replaced, a file
# of another kind refused and left as it was (a capture or a sweep's
# results were replaced with exit 0)
expect 0 "-o an earlier serve-sim file" -- "$QMLA" serve-sim "$S" -o "$work/serve.h5"
"$QMLA" synth -o "$work/cap.h5" --seqs 1 --tokens 8 >/dev/null || bad "synth"
sum0=$(sha256sum <"$work/cap.h5")
expect 2 "-o a capture" -- "$QMLA" serve-sim "$S" -o "$work/cap.h5"
containsF 'of format "qmla-capture"' "-o a capture: format named"
[ "$(sha256sum <"$work/cap.h5")" = "$sum0" ] && ok || bad "-o a capture: the capture changed"
# ... refused before the simulation, whose table would go to standard output
so=$("$QMLA" serve-sim "$S" -o "$work/cap.h5" 2>/dev/null)
[ -z "$so" ] && ok || bad "-o a capture: refused before simulating (printed: ${so:0:80})"
# nonsense numbers: refused with the line or the cost named, no results file
# (before: NaN, negative or infinite times and a capacity of 0 blocks, exit 0)
scn() { # EDIT: a small valid scenario with one sed edit
  printf '%s\n' 'requests 3' 'input_tokens 100' 'output_tokens 10' 'page_tokens 16' 'max_seqs 2' \
    'max_batched_tokens 64' 'n_layers 2' 'step_fixed_us 1' 'prefill_token_us 1' \
    'prefill_attn_us_per_mpair 1' 'decode_fixed_us 1' 'config A 1024' 'attn A 10 20' | sed "$1" > "$work/f.scn"
}
scn 's/^x//'
expect 0 "small scenario" -- "$QMLA" serve-sim "$work/f.scn" -o "$work/f.h5"
rm -f "$work/f.h5"
for fault in 's/attn A 10 20/attn A nan 20/|expected two finite numbers' \
             's/attn A 10 20/attn A 10 inf/|expected two finite numbers' \
             's/attn A 10 20/attn A -1000 -20/|expected a finite non-negative time' \
             's/^prefill_attn_us_per_mpair 1/prefill_attn_us_per_mpair 1e308/|costs inf us' \
             's/_us 1$/_us 0/; s/attn A 10 20/attn A 0 0/; s/_mpair 1/_mpair 0/|whole run 0 us' \
             's/^page_tokens 16/page_tokens 9223372036854775807/|page_tokens: expected an integer in' \
             's/^config A 1024/config A 99999999999999999999/|expected a slot count in' \
             's/^output_tokens 10/output_tokens 9223372036854775807/|output_tokens: expected an integer in'; do
  scn "${fault%%|*}"
  rm -f "$work/f.h5"
  expect 2 "scenario ${fault%%|*}" -- "$QMLA" serve-sim "$work/f.scn" -o "$work/f.h5"
  containsF "${fault#*|}" "scenario ${fault%%|*}: cause named"
  [ ! -e "$work/f.h5" ] && ok || bad "scenario ${fault%%|*}: results written"
done
finish test_serve_sim_cli
