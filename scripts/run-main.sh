#!/usr/bin/env bash
# scripts/run-main.sh — the main job: set up, build, then run the embedded
# default end to end, every result in results/default-sweep.h5:
#   1. qmla check     the default capture reproduces its attention outputs;
#   2. qmla sweep     matched-NMSE per-layer content/RoPE responses (Table 4
#                     style, printed);
#   3. qmla predict   token sensitivities and the operator-error predictors
#                     (/predict; the layer gains of Fig. 7);
#   4. qmla intervene equal-energy interventions, 8 repetitions (/interventions);
#   5. qmla learn + qmla eval   the RTN, SmoothQuant† and QuaRot† cache
#                     transforms (results/transforms/) calibrated on code-s0,
#                     their output NMSE at C4R4 on prose-s0 (/eval);
#   6. qmla ppl       bits/byte of the tiny-mla checkpoint (models/tiny-mla)
#                     on 2048 bytes of each held-out text, BF16 against C4R4
#                     and C2R4 with and without the sink4/local128 policy
#                     (/ppl, /ppl_table);
#   7. qmla storage   persistent cache bytes per token of BF16, C4R4, C2R4
#                     and C8R8 with and without sink4/local128, 1K..1M tokens
#                     (results/storage.h5; Fig. 5a; printed at 4K and 128K);
#   8. qmla serve-sim the paper's serving scenario under cache pressure
#                     (experiments/serving/paper-table10.scn,
#                     results/serve-sim.h5; Fig. 5c and Table 10);
#   9. qmla figures   every figure and table these support (results/figures/,
#                     results/figures/storage/, results/figures/serve-sim/;
#                     gnuplot scripts in plots/); left out (--exclude) are the
#                     figures whose data no step of this job makes: the
#                     allocate figures (scripts/allocate-validate.sh), the
#                     serving benchmark's (scripts/serving-table.py) and the
#                     decode latency's, Fig. 5b and Table 9 (the GPU benchmark,
#                     bench/bench_decode.cu), so the job would only report
#                     them skipped;
#  10. qmla report    results/report.html: one self-contained page with the
#                     provenance, the ranked sensitivities and suggestion, the
#                     figures and every table of the three results files (open
#                     it in a browser), with the same --exclude.
# CAPTURE (the first argument) replaces the default capture; steps 5 and 6
# then still use the default held-out texts and checkpoint. The last line
# (stderr) gives the wall time of the job after the setup and of each step.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cap=${1:-data/tiny-mla-default.h5}
q=./build/cli/qmla
res=results/default-sweep.h5
mkdir -p results/transforms
threads=$(nproc)
# wall time per step: lap NAME after each (bash's EPOCHREALTIME, in seconds)
t_start=$EPOCHREALTIME t_last=$EPOCHREALTIME laps=""
lap() {
  local now=$EPOCHREALTIME
  laps+="${laps:+, }$1 $(awk -v a="$t_last" -v b="$now" 'BEGIN { printf "%.1f", b - a }')"
  t_last=$now
}
$q check "$cap" -q --threads "$threads"; lap check
$q sweep "$cap" -o "$res" -v --threads "$threads"; lap sweep
# the headline of each step (sed reads on: no SIGPIPE under pipefail)
$q predict "$cap" -o "$res" --threads "$threads" | sed -n '1,11p'; lap predict
$q intervene "$cap" -o "$res" --reps 8 --threads "$threads"; lap intervene
tf=()
for m in rtn smoothquant quarot; do
  # its per-layer "calibrated on" notes left out; errors still shown
  $q learn "$cap" -o "results/transforms/$m.h5" --method "$m" --train-cells code-s0 \
    --threads "$threads" 2> >(grep -v ' calibrated on ' >&2)
  tf+=(--transforms "results/transforms/$m.h5")
done
lap learn
$q eval "$cap" "${tf[@]}" --config C4R4 --cells prose-s0 -o "$res" --threads "$threads" |
  tail -n 5
lap eval
$q ppl models/tiny-mla --text data/heldout/prose.txt.gz --text data/heldout/code.txt.gz \
  --config bf16,C4R4,C2R4 --policy none,sink4/local128 --tokens 2048 -o "$res" \
  --threads "$threads"
lap ppl
$q storage --contexts 1024,2048,4096,8192,16384,32768,65536,131072,262144,524288,1048576 \
  --config BF16,C4R4,C2R4,C8R8 --policy sink4/local128,none -o results/storage.h5 |
  awk 'NR == 1 || $4 == 4096 || $4 == 131072'
lap storage
$q serve-sim experiments/serving/paper-table10.scn -o results/serve-sim.h5; lap serve-sim
ex=allocate-pareto,allocate-strip,serving-bench,fig5b-latency,table9
# the figures of storage.h5 and serve-sim.h5 drawn from those files, not
# reported skipped for the sweep's
$q figures "$res" -o results/figures --exclude "$ex,fig5a-storage,fig5c-serving,table10"
$q figures results/storage.h5 -o results/figures/storage --only fig5a-storage
$q figures results/serve-sim.h5 -o results/figures/serve-sim --only fig5c-serving,table10
lap figures
$q report "$res" results/storage.h5 results/serve-sim.h5 -o results/report.html --exclude "$ex"
lap report
echo "main: $(awk -v a="$t_start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }') s after the setup ($laps s)" >&2
