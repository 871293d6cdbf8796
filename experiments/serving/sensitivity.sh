#!/usr/bin/env bash
# experiments/serving/sensitivity.sh — how the simulated BF16/C4R4 throughput
# ratio of the Table 10 scenario depends on the costs the benchmark cannot
# give (the scheduling counts do not depend on them): the prefill cost
# scaled by S (both prefill coefficients) and the fixed decode cost per
# step D (ms). Prints one line per (S, D): elapsed and tok/s of both caches
# and the ratio. Usage: bash experiments/serving/sensitivity.sh [QMLA]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
q=${1:-$here/../../build/cli/qmla}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf "prefill_x\tdecode_fixed_ms\tbf16_s\tc4r4_s\tbf16_tok_s\tc4r4_tok_s\tratio\n"
for S in ${SCALES:-1 2 4 5 6 8}; do
  for D in ${DECODES:-25 50 100}; do
    sed -e "s|^calibrate .*|calibrate $here/../../docs/evidence/final_bench_decode.tsv|" \
        -e "s|^prefill_token_us .*|prefill_token_us $(awk -v s=$S 'BEGIN{print 9.25*s}')|" \
        -e "s|^prefill_attn_us_per_mpair .*|prefill_attn_us_per_mpair $(awk -v s=$S 'BEGIN{print 1250*s}')|" \
        -e "s|^decode_fixed_us .*|decode_fixed_us $((D * 1000))|" \
        "$here/paper-table10.scn" > "$tmp/s.scn"
    "$q" serve-sim "$tmp/s.scn" | awk -v S=$S -v D=$D '
      $1=="BF16"{b=$7; bt=$8} $1=="C4R4"{c=$7; ct=$8; r=$9}
      END{printf "%s\t%s\t%.1f\t%.1f\t%.3f\t%.3f\t%s\n", S, D, b, c, bt, ct, r}'
  done
done
