#!/usr/bin/env bash
# bench/run_ppl.sh — the engine benchmark of issue 11 in one run: tokens/s of
# the C engine (bf16, C4R4, C4R4 sink4/local128; context 512; attention in
# the absorbed and in the expanded form) and of the
# NumPy forward (experiments/accuracy/numpy_forward.py, fp32 and C4R4), on the
# same first WINDOWS windows of data/heldout/prose.txt.gz, with THREADS
# threads each (OpenBLAS threads for NumPy), and the ratios. Appends the JSON
# lines and the ratio table to bench/results/ppl.txt (untracked; the run the docs cite is docs/evidence/ppl.txt).
#   bash bench/run_ppl.sh [BUILD_DIR=build] [THREADS=2] [WINDOWS=8]
set -eu
cd "$(dirname "$0")/.."
B=${1:-build} J=${2:-2} N=${3:-8}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$B/bench/bench_ppl" models/tiny-mla data/heldout/prose.txt.gz --windows "$N" --threads "$J" >> "$out"
if [ -n "${BASE:-}" ]; then
  "$BASE" models/tiny-mla data/heldout/prose.txt.gz --windows "$N" --threads "$J" |
    sed 's/"impl": "C"/"impl": "C-base"/' >> "$out"
fi
for c in fp32 C4R4; do
  OPENBLAS_NUM_THREADS=$J /usr/bin/python3 experiments/accuracy/numpy_forward.py models/tiny-mla \
    data/heldout/prose.txt.gz --windows "$N" --config $c --json |
    /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin); r["impl"]="NumPy"; print(json.dumps(r))' >> "$out"
done
{
  echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) threads $J windows $N load $(cut -d' ' -f1-3 /proc/loadavg)${BASE:+ base $BASE}"
  cat "$out"
  /usr/bin/python3 - "$out" <<'PY'
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
np_ = {r["config"]: r for r in rs if r["impl"] == "NumPy"}
absorbed = {(r["config"], r["policy"]): r for r in rs if r.get("form") == "absorbed" and r["impl"] == "C"}
base = {(r["form"], r["config"], r["policy"]): r for r in rs if r["impl"] == "C-base"}
for r in rs:
    if r["impl"] == "C":
        b = base.get((r["form"], r["config"], r["policy"]))
        ref = np_["fp32" if r["config"] == "bf16" else "C4R4"]
        a = absorbed[(r["config"], r["policy"])]
        print("C %-8s %-5s %-15s %8.0f tok/s (%5.0f per CPU-s)   NumPy %-5s %8.0f tok/s   C/NumPy %.2f   vs absorbed %.2f (CPU %.2f)" % (
            r["form"], r["config"], r["policy"], r["tokens_per_s"], r["tokens_per_cpu_s"], ref["config"],
            ref["tokens_per_s"], r["tokens_per_s"] / ref["tokens_per_s"], r["tokens_per_s"] / a["tokens_per_s"],
            r["tokens_per_cpu_s"] / a["tokens_per_cpu_s"]))
        if b:
            print("  %-8s %-5s %-15s vs BASE %.2f (CPU %.2f)   bits/byte %.6f, BASE %.6f" % (
                r["form"], r["config"], r["policy"], r["tokens_per_s"] / b["tokens_per_s"],
                r["tokens_per_cpu_s"] / b["tokens_per_cpu_s"], r["bits_per_byte"], b["bits_per_byte"]))
PY
} | { mkdir -p bench/results; tee -a bench/results/ppl.txt; }
