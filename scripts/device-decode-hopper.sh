#!/usr/bin/env bash
# scripts/device-decode-hopper.sh — on the accelerator machine (issue 19):
# build the decode tests and benchmark, then run the named steps; logs and
# results go to $OUT (or ./device-out). Every step has its own time limit,
# so that one call stays within its budget.
#   tests     test_decode_cuda: every kernel variant (decode_cuda.h) against
#             the C twin (NMSE, LSE, token aging, bit-identical reruns)
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck on
#             test_decode_cuda (QMLA_TEST_SMALL=1: four shapes, 12 aging
#             steps; SAN_SMALL= (empty) runs the full-size test; SAN_TOOLS: the
#             tools, default all three; sanitize-TOOL:
#             that one tool)
#   probe     bench/probe_handoff.cu under racecheck and synccheck, modes 0-5
#             (do they accept a bar.arrive / bar.sync / mbarrier hand-off, with
#             and without a consumers-only named barrier; 3 a planted race)
#   quick     bench_decode --variants-quick (H 16 s_q 1 whole; the other
#             shapes at 4K and 128K), 10 samples per point
#   bench     bench_decode --variants (b 1/8/32/64, 4K-1M, H 16/128, s_q 1/2;
#             BENCH_VLIST: bench_decode --vlist, the variants timed, also for
#             quick and fmla)
#   q8        bench_decode --variants-q8 (BF16 and C4R4 / C2R4 with f16 and
#             q8 metadata, H 16, s_q 1, b 8 and 32, 4K-1M; BENCH_VLIST as
#             above, BENCH_SAMPLES: --samples; bench_q8.tsv)
#   writer    bench_decode --writer: copy, qdq (f16, f16 with x^, q8) and the
#             cache writer (BF16; C4R4 / C2R4 / C8R8 with f16 and with q8
#             metadata), BENCH_SAMPLES samples (default 40); bench_writer.tsv
#   sweep     bench_decode --sweep (the default C4R4 plan's pages per block
#             forced to 1-8 beside BF16 at the short points; bench_sweep.tsv)
#   fmla      bench_decode --variants-fmla, then FlashMLA's BF16 dense decode
#             on the same points (bench/bench_flashmla.cu; FMLA_DIR holds the
#             program bench_flashmla built by scripts/build-flashmla.sh, or
#             FlashMLA's source src.tgz to build it here); FMLA_ARGS: its
#             arguments (--full: bench_decode --variants' points, s_q 2 too);
#             FMLA_OURS=0: FlashMLA only (beside a bench step of the same call);
#             FMLA8_ARGS (set: a program built by FP8=1 scripts/build-flashmla.sh):
#             then bench_flashmla --fp8 FMLA8_ARGS, its sparse FP8 decode as a
#             dense one (bench_flashmla_fp8.tsv, limit FMLA8_LIMIT)
#   ncu       Nsight Compute (--set full) of the first launch of NCU_KERNEL
#             (default decode_fast_kernel: C4R4 variant 0's main kernel, the
#             kernel of variants 0, 1, 3 and 4; several regexes: one profile
#             each; NCU_BASE=mangled matches them on mangled names, e.g. one
#             template instance) in bench_decode NCU_ARGS (default
#             --profile-variants: b 32, 64K, H 16 first; --profile-h128: H 128)
#   pack      the logs in $OUT into logs.tgz (at most 8 files come back)
# Usage (from the repository root, carry [".deb"] after scripts/device-prep.sh):
#   OUT=... bash scripts/device-decode-hopper.sh tests quick pack
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source scripts/device-env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw --format=csv
cat .qmla-commit 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || true
if [ ! -f build-dev/build.ninja ]; then
  meson setup build-dev --buildtype=release >/tmp/setup.log 2>&1 ||
    { cp /tmp/setup.log "$OUT/"; tail -40 /tmp/setup.log; exit 1; }
fi
ninja -C build-dev tests/test_decode_cuda bench/bench_decode >/tmp/build.log 2>&1 ||
  { cp /tmp/build.log "$OUT/"; grep -E "error" -A3 /tmp/build.log | head -60; exit 1; }
echo "== built at ${SECONDS}s"
# DEADLINE (seconds of this script, optional): a step that would start after
# it is skipped, and every time limit is cut to what is left before it.
lim() { local r=$(( ${DEADLINE:-1000000} - SECONDS )); [ "$r" -lt 5 ] && r=5; echo $(( $1 < r ? $1 : r )); }
# A word A+B runs steps A and B at the same time (each printing to its own
# buffer, shown when both are done): for steps whose timing does not
# matter (tests+sanitize+probe), never with bench, quick, fmla or ncu.
run_step() {
  local step=$1
  echo "== step $step at ${SECONDS}s"
  case $step in
  tests)
    timeout $(lim ${TEST_LIMIT:-150}) ./build-dev/tests/test_decode_cuda >"$OUT/test_decode_cuda.log" 2>&1
    echo "rc=$?"; grep -E " v[1-9] " "$OUT/test_decode_cuda.log" | head -80
    grep -E "FAIL|failed|aging|worst" "$OUT/test_decode_cuda.log" | tail -8 ;;
  sanitize | sanitize-*)
    local tools=${SAN_TOOLS:-memcheck racecheck synccheck}
    [ "$step" != sanitize ] && tools=${step#sanitize-}
    for tool in $tools; do
      QMLA_TEST_SMALL=${SAN_SMALL-1} QMLA_TEST_VARIANTS=${SAN_VARIANTS-} QMLA_TEST_SHAPES=${SAN_SHAPES-} \
        QMLA_TEST_CFGS=${SAN_CFGS-} QMLA_TEST_AGING=${SAN_AGING-} timeout $(lim ${SAN_LIMIT:-60}) compute-sanitizer --tool $tool --error-exitcode 9 \
        ./build-dev/tests/test_decode_cuda >"$OUT/sanitize_$tool.log" 2>&1
      echo "== compute-sanitizer $tool rc=$?"; tail -3 "$OUT/sanitize_$tool.log"
    done ;;
  quick | bench)
    a=--variants-quick; [ "$step" = bench ] && a=--variants
    timeout $(lim ${BENCH_LIMIT:-150}) ./build-dev/bench/bench_decode $a ${BENCH_VLIST:+--vlist $BENCH_VLIST} --out "$OUT/bench_variants.tsv" \
      >"$OUT/bench_variants.log" 2>&1
    echo "rc=$?"; cat "$OUT/bench_variants.log" ;;
  q8)
    timeout $(lim ${BENCH_LIMIT:-120}) ./build-dev/bench/bench_decode --variants-q8 ${BENCH_VLIST:+--vlist $BENCH_VLIST} \
      ${BENCH_SAMPLES:+--samples $BENCH_SAMPLES} --out "$OUT/bench_q8.tsv" >"$OUT/bench_q8.log" 2>&1
    echo "rc=$?"; cat "$OUT/bench_q8.log" ;;
  writer)
    timeout $(lim ${WRITER_LIMIT:-30}) ./build-dev/bench/bench_decode --writer ${BENCH_SAMPLES:+--samples $BENCH_SAMPLES} \
      --out "$OUT/bench_writer.tsv" >"$OUT/bench_writer.log" 2>&1
    echo "rc=$?"; cat "$OUT/bench_writer.log" ;;
  sweep)
    timeout $(lim ${SWEEP_LIMIT:-60}) ./build-dev/bench/bench_decode --sweep --out "$OUT/bench_sweep.tsv" \
      >"$OUT/bench_sweep.log" 2>&1
    echo "rc=$?"; cat "$OUT/bench_sweep.log" ;;
  probe)
    pb=${FMLA_DIR:-fmla}/probe_handoff
    [ -x "$pb" ] || { pb=/tmp/probe_handoff; nvcc -O2 -gencode arch=compute_90a,code=sm_90a \
      -o $pb bench/probe_handoff.cu; }
    for m in 0 1 2 3 4 5; do
      for tool in racecheck synccheck; do
        timeout $(lim 30) compute-sanitizer --tool $tool $pb $m >"$OUT/probe_${tool}_mode$m.log" 2>&1
        echo "== probe $tool mode $m rc=$?"; grep -E "probe_handoff|SUMMARY" "$OUT/probe_${tool}_mode$m.log"
      done
    done ;;
  fmla)
    if [ "${FMLA_OURS:-1}" = 1 ]; then
    timeout $(lim ${BENCH_LIMIT:-90}) ./build-dev/bench/bench_decode --variants-fmla ${BENCH_VLIST:+--vlist $BENCH_VLIST} \
      --out "$OUT/bench_variants_fmla.tsv" >"$OUT/bench_variants_fmla.log" 2>&1
    echo "rc=$?"; cat "$OUT/bench_variants_fmla.log"
    fi
    fb=${FMLA_DIR:-fmla}/bench_flashmla
    if [ ! -x "$fb" ] && [ -f "${FMLA_DIR:-fmla}/src.tgz" ]; then
      mkdir -p /tmp/fmla-src && tar xzf "${FMLA_DIR:-fmla}/src.tgz" -C /tmp/fmla-src &&
        JOBS=${FMLA_JOBS:-3} timeout $(lim ${FMLA_BUILD_LIMIT:-200}) bash scripts/build-flashmla.sh /tmp/fmla-src /tmp/fmla-build \
        >"$OUT/flashmla_build.log" 2>&1; echo "== flashmla build rc=$? at ${SECONDS}s"
      fb=/tmp/fmla-build/bench_flashmla
    fi
    timeout $(lim ${FMLA_LIMIT:-60}) "$fb" ${FMLA_ARGS:-} --out "$OUT/bench_flashmla.tsv" >"$OUT/bench_flashmla.log" 2>&1
    echo "== flashmla rc=$?"; cat "$OUT/bench_flashmla.log"
    if [ -n "${FMLA8_ARGS+set}" ]; then
      timeout $(lim ${FMLA8_LIMIT:-60}) "$fb" --fp8 $FMLA8_ARGS --out "$OUT/bench_flashmla_fp8.tsv" \
        >"$OUT/bench_flashmla_fp8.log" 2>&1
      echo "== flashmla fp8 rc=$?"; cat "$OUT/bench_flashmla_fp8.log"
    fi ;;
  ncu)
    for k in ${NCU_KERNEL:-decode_fast_kernel}; do
      f=$(printf %s "$k" | tr -c 'A-Za-z0-9_' _)
      timeout $(lim ${NCU_LIMIT:-90}) ncu --clock-control none --set full \
        --kernel-name-base ${NCU_BASE:-function} -k "regex:$k" -c 1 \
        ./build-dev/bench/bench_decode ${NCU_ARGS:---profile-variants} --out /tmp/p.tsv >"$OUT/ncu_$f.txt" 2>&1
      echo "== ncu $k rc=$?"
      grep -E "decode_|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Cache|Registers Per|Achieved Occupancy|Issue Slots Busy|Executed Instructions  |Warp Cycles Per Issued|highest-utilized|Bank" "$OUT/ncu_$f.txt" | head -24
    done ;;
  pack)
    k=""; while [ -e "$OUT/logs$k.tgz" ]; do k=$(( ${k:-1} + 1 )); done
    (cd "$OUT" && tar czf "logs$k.tgz" --remove-files $(ls | grep -vE '\.(tsv|h5|tgz)$')) ;;
  esac
}
for word in "$@"; do
  if [ "$word" != pack ] && [ "$SECONDS" -ge "${DEADLINE:-1000000}" ]; then
    echo "== step $word skipped at ${SECONDS}s (DEADLINE ${DEADLINE})"; continue
  fi
  if [[ $word == *+* ]]; then
    IFS=+ read -ra parts <<<"$word"
    for p in "${parts[@]}"; do run_step "$p" >"/tmp/step_$p.out" 2>&1 & done
    wait
    for p in "${parts[@]}"; do cat "/tmp/step_$p.out"; done
  else
    run_step "$word"
  fi
done
echo "== done at ${SECONDS}s"
