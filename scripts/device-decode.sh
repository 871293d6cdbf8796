#!/usr/bin/env bash
# scripts/device-decode.sh — on the accelerator machine: build qmla, then run
# the named steps of the decode module's GPU work; logs and results go to
# $OUT (or ./device-out).
#   tests     test_qdq_cuda, test_decode_cuda
#   bench     bench/bench_decode (full table)        quick: its --quick subset
#   ncu       Nsight Compute summary of one launch of each kernel
#   ncu-decode / ncu-writer: only the C4R4 decode (b 32 64K, b 8 4K) / the
#             C4R4, C8R8 and BF16 writer and qdq (f16 metadata, codes + metadata)
#   ncu-short only the C4R4 decode at b 8, 4K, with its store sectors
#   variant   test_decode_cuda and the --quick benchmark of a build with other
#             -D flags (VARIANT / VARIANT_ARGS; default: loops unrolled by 2;
#             VARIANT_BENCH=full: the full benchmark), in build-var-$VARIANT,
#             so that several variants can run in one call
#   opmix     SASS with executed counts per instruction (ncu source page) of the
#             C4R4 decode and writer; cuobjdump -sass of the kernel objects
#   pack      the logs and profiles in $OUT into logs.tgz (logs2.tgz, ... when
#             given again)
#   sanitize  compute-sanitizer memcheck + racecheck on test_decode_cuda (small)
# Usage: bash scripts/device-decode.sh tests bench ncu sanitize
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source scripts/device-env.sh
# (at most 8 files come back from $OUT: the setup and build logs go there
# only when they fail)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw --format=csv
if [ ! -f build-dev/build.ninja ]; then
  meson setup build-dev --buildtype=release >/tmp/setup.log 2>&1 ||
    { cp /tmp/setup.log "$OUT/"; tail -40 /tmp/setup.log; exit 1; }
fi
ninja -C build-dev tests/test_qdq_cuda tests/test_decode_cuda bench/bench_decode >/tmp/build.log 2>&1 ||
  { cp /tmp/build.log "$OUT/"; grep -E "error" -A3 /tmp/build.log | head -60; exit 1; }
for step in "$@"; do
  echo "== step $step at ${SECONDS}s"
  case $step in
  tests)
    echo "== test_qdq_cuda"
    ./build-dev/tests/test_qdq_cuda 2>&1 | tail -8 | tee "$OUT/test_qdq_cuda.log"
    echo "== test_decode_cuda"
    timeout 300 ./build-dev/tests/test_decode_cuda 2>&1 | tee "$OUT/test_decode_cuda.log" | tail -45 ;;
  bench | quick)
    echo "== bench_decode"
    q=""; [ "$step" = quick ] && q=--quick
    ./build-dev/bench/bench_decode $q --out "$OUT/bench_decode.tsv" 2>&1 | tee "$OUT/bench_decode.log" ;;
  bench2)
    echo "== bench_decode, second run (spread)"
    ./build-dev/bench/bench_decode --out "$OUT/bench_decode_2.tsv" >"$OUT/bench_decode_2.log" 2>&1
    echo "rc=$?"; grep -E "^\| (8|32) " "$OUT/bench_decode_2.log" ;;
  ncu)
    # one launch of each kernel, full section set; key lines printed
    n() { timeout 150 ncu --clock-control none --set full \
            --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" -k "regex:$1" --launch-skip "$2" -c 1 \
            ./build-dev/bench/bench_decode --profile --out /tmp/p.tsv >"$OUT/ncu_$3.txt" 2>&1
          echo "== ncu $3 rc=$?"
          grep -E "Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Issue Slots Busy|Executed Ipc Active|Shared Memory.*%|Bank Conflicts|L1/TEX Hit|Max Bandwidth|Pipe|Stall|est\. speedup" "$OUT/ncu_$3.txt" | head -40; }
    n decode_fast 0 decode_c4r4
    n decode_bf16 0 decode_bf16
    n qdq_tile 0 qdq
    n kv_write 0 writer_c4r4 ;;
  ncu-decode)
    # C4R4 decode at b 32, 64K (--profile) and at b 8, 4K (--profile-short)
    n() { timeout 150 ncu --clock-control none --set full \
            --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" -k "regex:$1" --launch-skip "$2" -c 1 \
            ./build-dev/bench/bench_decode $4 --out /tmp/p.tsv >"$OUT/ncu_$3.txt" 2>&1
          echo "== ncu $3 rc=$?"
          grep -E "Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Issue Slots Busy|Executed Instructions  |Local Memory Spilling Requests  |highest-utilized|way bank|issue_stalled" "$OUT/ncu_$3.txt" | head -40; }
    n decode_fast 0 decode_c4r4 --profile
    n decode_fast 0 decode_c4r4_b8_4k --profile-short ;;
  ncu-short)
    # only the C4R4 decode at b 8, 4K (--profile-short), with the global
    # store sectors (L1) and the L2 write sectors: the epilogue's traffic
    timeout 150 ncu --clock-control none --set full \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,lts__t_sectors_op_write.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum" \
      -k "regex:decode_fast" -c 1 ./build-dev/bench/bench_decode --profile-short --out /tmp/p.tsv \
      >"$OUT/ncu_decode_c4r4_b8_4k.txt" 2>&1
    echo "== ncu decode_c4r4_b8_4k rc=$?"
    grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Issue Slots Busy|Executed Instructions  |Warp Cycles Per Issued|sectors_op_write|global_op_st|lg_throttle|short_scoreboard|mio_throttle|drain" \
      "$OUT/ncu_decode_c4r4_b8_4k.txt" | head -30 ;;
  variant)
    # build-time experiment (VARIANT, VARIANT_ARGS: name and nvcc -D flags;
    # default the run-19 one, QK / PV loops unrolled by 2): test_decode_cuda
    # and the --quick benchmark of that build, beside the default build's.
    # E.g. VARIANT=scalarepi VARIANT_ARGS=-DQMLA_DECODE_VEC_EPILOGUE=0
    v=${VARIANT:-unroll2}
    va=${VARIANT_ARGS:--DQMLA_DECODE_QK_UNROLL=2 -DQMLA_DECODE_PV_UNROLL=2}
    echo "variant $v: $va"
    bv=build-var-$v
    if [ ! -f $bv/build.ninja ]; then
      meson setup $bv --buildtype=release "-Dcuda_args=$va" >/tmp/setup-var.log 2>&1 ||
        { tail -20 /tmp/setup-var.log; continue; }
    fi
    ninja -C $bv tests/test_decode_cuda bench/bench_decode >/tmp/build-var.log 2>&1 ||
      { tail -20 /tmp/build-var.log; continue; }
    timeout 300 ./$bv/tests/test_decode_cuda 2>&1 |
      tee "$OUT/variant_${v}_test_decode_cuda.log" | tail -3
    q=--quick; [ "${VARIANT_BENCH:-}" = full ] && q=""
    ./$bv/bench/bench_decode $q --out "$OUT/variant_${v}_bench_decode.tsv" 2>&1 |
      tee "$OUT/variant_${v}_bench_decode.log" ;;
  ncu-writer)
    n() { timeout 150 ncu --clock-control none --set full -k "regex:$1" --launch-skip "$2" -c 1 \
            ./build-dev/bench/bench_decode --profile --out /tmp/p.tsv >"$OUT/ncu_$3.txt" 2>&1
          echo "== ncu $3 rc=$?"
          grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|Executed Instructions  |highest-utilized" "$OUT/ncu_$3.txt" | head -20; }
    # (--profile: 5 launches per configuration; the BF16 layout has its own
    # copy kernel, so kv_write's launches are C4R4, C2R4, C8R8)
    n kv_write 0 writer_c4r4
    n kv_write 10 writer_c8r8
    n kv_copy_bf16 0 writer_bf16
    n qdq_fast 0 qdq_f16 ;;
  pack)
    # at most 8 files come back: the logs and profiles so far in one archive
    # (logs.tgz, then logs2.tgz, ... when packed again)
    k=""; while [ -e "$OUT/logs$k.tgz" ]; do k=$(( ${k:-1} + 1 )); done
    (cd "$OUT" && tar czf "logs$k.tgz" --remove-files $(ls | grep -vE '\.(tsv|h5|tgz)$')) ;;
  opmix)
    # executed instructions by SASS opcode: the per-instruction source page
    # (SASS, with executed-instruction counts) of one launch of the C4R4
    # decode (b 32, 64K) and of the C4R4 writer, and the static SASS of the
    # kernel objects (cuobjdump)
    for kk in "decode_fast 0 decode_c4r4" "kv_write 0 writer_c4r4"; do
      read -r kn ks kf <<<"$kk"
      timeout 150 ncu --clock-control none --section SourceCounters --section InstructionStats \
        -k "regex:$kn" --launch-skip "$ks" -c 1 --page source --print-source sass --csv \
        ./build-dev/bench/bench_decode --profile --out /tmp/p.tsv >"$OUT/opmix_$kf.csv" 2>&1
      echo "== opmix $kf rc=$? $(wc -l <"$OUT/opmix_$kf.csv") lines"
    done
    for o in $(find build-dev/kernels -name '*.cu.o'); do
      cuobjdump -sass "$o" >"$OUT/sass_$(basename "$o" .cu.o).txt" 2>&1
      echo "== sass $o rc=$? $(wc -l <"$OUT/sass_$(basename "$o" .cu.o).txt") lines"
    done ;;
  sanitize)
    for tool in memcheck racecheck; do
      echo "== compute-sanitizer $tool (test_decode_cuda, QMLA_TEST_SMALL=1)"
      QMLA_TEST_SMALL=1 timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 \
        ./build-dev/tests/test_decode_cuda >"$OUT/sanitize_$tool.log" 2>&1
      echo "rc=$?"; tail -4 "$OUT/sanitize_$tool.log"
    done ;;
  esac
done
