#!/usr/bin/env bash
# scripts/device-gpu-engine.sh — on the accelerator machine: build qmla with
# the CUDA engine (-Dcuda=enabled -Dgpu_engine=true), run its agreement test against the CPU
# engine (tests/sweep/test_engine_cuda.c), the same test under
# compute-sanitizer memcheck (QMLA_TEST_SMALL=1) and racecheck (=2), and the
# engine benchmark (bench/bench_engine.cu) on DeepSeek-V3- and V2-Lite-
# shaped synth captures. Logs and the benchmark files go to $OUT (or
# ./device-out): engine.log (everything, in order), bench-v3.h5,
# bench-v3-4k.h5, bench-v2lite.h5. docs/cuda-engine.md describes the run.
#
# From a development machine (docs/device.md): carry this branch as a copy
# inside an ignored folder of the sent checkout, with the default capture
# (the copy leaves data/ out; the test reads data/tiny-mla-default.h5):
#   bash scripts/device-prep.sh
#   bash scripts/device-copy.sh /work/main/.device/gpu-engine
#   mkdir -p /work/main/.device/gpu-engine/data
#   cp data/tiny-mla-default.h5 /work/main/.device/gpu-engine/data/
#   device run, carry [".deb", ".device/gpu-engine"], timeout_s 300:
#     cp -r .deb .device/gpu-engine/ && cd .device/gpu-engine &&
#     bash scripts/device-gpu-engine.sh
# Steps can be named (default: build test bench memcheck; also ops, ops4k: the
# jvp/predict/intervene benchmark; tf: the learn/eval benchmark; tfcli: qmla
# learn and eval through the CLI with each engine; before: the ops and eval
# benchmarks on the GPU with QMLA_CUDA_ENGINE_BEFORE=1, the sequences of
# e498e58 (run 8; =2 those of 2026-12-02), for before/after rows of one run;
# run10: the sweep, ops and eval benchmarks on V2-Lite and V3, after and
# before (=1) rows, with the engine's phase profile; docs/cuda-engine.md),
# cli: sweep, jvp, predict, intervene, learn and eval through the CLI with
# each engine, the results files compared (scripts/compare-results.py);
# run11: eval's eigensolver on its own stream against after the passes, V3
# ops at causal query tiles of 256 and 128 tokens, and the V2-Lite intervene
# cross term's conditioning (docs/cuda-engine.md "H200 run 11");
# sanitizers: the test, memcheck and racecheck at once, the sanitizers split
# over sections of the test (QMLA_TEST_SECTIONS), every log into engine.log;
# families: item 4 on synth captures of the remaining family shapes (below);
# run13: run 13's before/after rows and profile (below); run14: learning in
# double (the learn test section, qmla learn f32/f64 on both engines, the V3
# learner's step in f32 and f64);
# run in this order: build test bench ops ops4k tf before run10 run12 run13 run14 run11 tfcli cli sanitizers memcheck. TEST_TIMEOUT (default 240) bounds the
# agreement test.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
LOG=$OUT/engine.log
steps=${*:-build test bench memcheck}
source scripts/device-env.sh
B=build-gpu
say() { echo "== $*" | tee -a "$LOG"; }
# the V2-Lite- and V3-shaped synth captures of one layer-cell, 8 sequences of
# 512 tokens: /tmp/v2l.h5, /tmp/v3.h5
synth512() {
  $B/cli/qmla synth -o /tmp/v2l.h5 --shape deepseek-v2-lite --layers 1 --cells 1 --seqs 8 \
    --tokens 512 --no-pre --force --threads 16 >>"$LOG" 2>&1
  $B/cli/qmla synth -o /tmp/v3.h5 --shape deepseek-v3 --layers 1 --cells 1 --seqs 8 \
    --tokens 512 --no-pre --force --threads 16 >>"$LOG" 2>&1
}
# compare_pairs DIR PREFIX LABEL: DIR/C-cpu.h5 against DIR/C-cuda.h5 for C in
# sweep jvp predict intervene eval learned (scripts/compare-results.py: rtol
# 1e-4, the cross term on its own scale; learned: 1e-3, the transforms' file
# names skipped), verdicts in DIR/compare-PREFIXC.txt, one line each in the log
compare_pairs() {
  local D=$1 pre=$2 label=$3 c tol skip
  for c in sweep jvp predict intervene eval learned; do
    tol=1e-4
    skip=""
    [ $c = learned ] && tol=1e-3 && skip="--skip eval/transforms"
    python3 scripts/compare-results.py $D/$c-cpu.h5 $D/$c-cuda.h5 --rtol $tol --atol 1e-9 \
      --abs cross_relative=1e-4 $skip >$D/compare-$pre$c.txt 2>&1
    say "$label compare $c exit $?: $(tail -1 $D/compare-$pre$c.txt)"
  done
}
t_start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv 2>&1 | tee -a "$LOG"
if [[ " $steps " == *" build "* ]]; then
  say "build ($(date -u +%H:%M:%S))"
  if [ ! -f $B/build.ninja ]; then
    meson setup $B --buildtype=release -Dcuda=enabled -Dgpu_engine=true -Dmpi=disabled >>"$LOG" 2>&1 ||
      { tail -30 $B/meson-logs/meson-log.txt >>"$LOG"; echo "setup failed"; tail -40 "$LOG"; exit 1; }
  fi
  ninja -C $B -j16 tests/test_engine_cuda bench/bench_engine cli/qmla >>"$LOG" 2>&1 ||
    { echo "build failed"; grep -E "error|FAILED" "$LOG" | head -40; exit 1; }
  say "built in $(( $(date +%s) - t_start )) s"
fi
export QMLA_SOURCE_ROOT=$PWD
if [[ " $steps " == *" test "* ]]; then
  say "test_engine_cuda ($(date -u +%H:%M:%S))"
  t0=$(date +%s)
  timeout ${TEST_TIMEOUT:-240} $B/tests/test_engine_cuda >>"$LOG" 2>&1
  say "test_engine_cuda exit $? in $(( $(date +%s) - t0 )) s"
fi
if [[ " $steps " == *" bench "* ]]; then
  Q=$B/cli/qmla
  say "bench: synth captures ($(date -u +%H:%M:%S))"
  synth512
  say "bench: DeepSeek-V3 shape, T 512, N 8 (cpu: 1 sequence timed)"
  timeout 60 $B/bench/bench_engine /tmp/v3.h5 --threads 16 --cpu-seqs 1 --out $OUT/bench-v3.h5 >>"$LOG" 2>&1
  say "bench v3 exit $?"
  say "bench: DeepSeek-V2-Lite shape, T 512, N 8 (cpu: 2 sequences timed)"
  timeout 60 $B/bench/bench_engine /tmp/v2l.h5 --threads 16 --cpu-seqs 2 --out $OUT/bench-v2lite.h5 >>"$LOG" 2>&1
  say "bench v2-lite exit $?"
  rm -f /tmp/v2l.h5
  el=$(( $(date +%s) - t_start ))
  if [ $el -lt 150 ]; then
    $Q synth -o /tmp/v3k.h5 --shape deepseek-v3 --layers 1 --cells 1 --seqs 1 --tokens 4096 \
      --no-pre --force --threads 16 >>"$LOG" 2>&1
    say "bench: DeepSeek-V3 shape, T 4096, N 1 (gpu only)"
    timeout 60 $B/bench/bench_engine /tmp/v3k.h5 --threads 16 --no-cpu --out $OUT/bench-v3-4k.h5 >>"$LOG" 2>&1
    say "bench v3 T 4096 exit $?"
  else
    say "bench: T 4096 left out ($el s elapsed)"
  fi
fi
if [[ " $steps " == *" ops "* ]]; then
  # jvp, predict (with the exact sensitivities) and intervene (32 reps) per
  # sequence on the GPU and on the CPU's 16 cores in the same run; the V3
  # shape's CPU side times jvp and the sensitivities only (--cpu-light: its
  # CPU predict is ~8 sweeps of 2.9 s each per sequence, its interventions
  # 194 JVPs)
  Q=$B/cli/qmla
  say "ops bench: synth captures ($(date -u +%H:%M:%S))"
  synth512
  say "ops bench: DeepSeek-V2-Lite shape, T 512, N 8 (gpu 8 seqs, interventions 2; cpu 1)"
  timeout 60 $B/bench/bench_engine /tmp/v2l.h5 --threads 16 --no-sweep --ops --op-seqs 8 \
    --iv-seqs 2 --cpu-op-seqs 1 --out $OUT/bench-ops-v2lite.h5 >>"$LOG" 2>&1
  say "ops bench v2-lite exit $?"
  say "ops bench: DeepSeek-V3 shape, T 512, N 8 (gpu 4 seqs, interventions 1; cpu 1, jvp and sensitivities)"
  timeout 60 $B/bench/bench_engine /tmp/v3.h5 --threads 16 --no-sweep --ops --op-seqs 4 \
    --iv-seqs 1 --cpu-op-seqs 1 --cpu-light --out $OUT/bench-ops-v3.h5 >>"$LOG" 2>&1
  say "ops bench v3 exit $?"
  rm -f /tmp/v2l.h5 /tmp/v3.h5
fi
if [[ " $steps " == *" ops4k "* ]]; then
  Q=$B/cli/qmla
  $Q synth -o /tmp/v3k.h5 --shape deepseek-v3 --layers 1 --cells 1 --seqs 1 --tokens 4096 \
    --no-pre --force --threads 16 >>"$LOG" 2>&1
  say "ops bench: DeepSeek-V3 shape, T 4096, N 1 (gpu only, no interventions)"
  timeout 60 $B/bench/bench_engine /tmp/v3k.h5 --threads 16 --no-sweep --ops --op-seqs 1 \
    --iv-seqs 0 --no-cpu --out $OUT/bench-ops-v3-4k.h5 >>"$LOG" 2>&1
  say "ops bench v3 T 4096 exit $?"
  rm -f /tmp/v3k.h5
fi
if [[ " $steps " == *" tf "* ]]; then
  # qmla learn's learner (both paths, 300 steps projected from the timed
  # ones; one train cell of 8 sequences, no held-out bank, C4R4: the
  # experiments' settings, experiments/transforms/run.sh) and qmla eval of
  # one layer-cell; V2-Lite on both engines, V3 on the GPU only (its CPU
  # learner takes minutes per step at 16 threads)
  Q=$B/cli/qmla
  say "tf bench: synth captures ($(date -u +%H:%M:%S))"
  synth512
  say "tf bench: DeepSeek-V2-Lite shape, T 512, N 8 (gpu 20 steps, cpu 2)"
  timeout 90 $B/bench/bench_engine /tmp/v2l.h5 --threads 16 --no-sweep --learn 20 \
    --cpu-learn-steps 2 --eval --out $OUT/bench-tf-v2lite.h5 >>"$LOG" 2>&1
  say "tf bench v2-lite exit $?"
  say "tf bench: DeepSeek-V3 shape, T 512, N 8 (gpu only, 20 steps)"
  timeout 90 $B/bench/bench_engine /tmp/v3.h5 --threads 16 --no-sweep --no-cpu --learn 20 \
    --eval --out $OUT/bench-tf-v3.h5 >>"$LOG" 2>&1
  say "tf bench v3 exit $?"
  rm -f /tmp/v2l.h5 /tmp/v3.h5
fi
if [[ " $steps " == *" before "* ]]; then
  # the before rows in the same run: the GPU-only ops and eval benchmarks
  # with QMLA_CUDA_ENGINE_BEFORE=1 (since run 10 the engine's sequences as
  # of e498e58, run 8; until run 10 =1 meant what =2 means now: the
  # operator, intervention and eval sequences as of 2026-12-02, f8d3d79:
  # full five-route finite sweeps, weights and inputs copied with every
  # sweep, sensitivity chunks of 1024 / H rows, ||C||_2 by GSL on the host;
  # kernels/engine_cuda.cu)
  Q=$B/cli/qmla
  say "before bench: synth captures ($(date -u +%H:%M:%S))"
  synth512
  say "before bench: DeepSeek-V2-Lite shape, T 512, N 8 (gpu only, QMLA_CUDA_ENGINE_BEFORE=1)"
  QMLA_CUDA_ENGINE_BEFORE=1 timeout 60 $B/bench/bench_engine /tmp/v2l.h5 --threads 16 --no-sweep \
    --no-cpu --ops --op-seqs 8 --iv-seqs 2 --eval --out $OUT/bench-before-v2lite.h5 >>"$LOG" 2>&1
  say "before bench v2-lite exit $?"
  say "before bench: DeepSeek-V3 shape, T 512, N 8 (gpu only, 4 seqs, interventions 1)"
  QMLA_CUDA_ENGINE_BEFORE=1 timeout 60 $B/bench/bench_engine /tmp/v3.h5 --threads 16 --no-sweep \
    --no-cpu --ops --op-seqs 4 --iv-seqs 1 --eval --out $OUT/bench-before-v3.h5 >>"$LOG" 2>&1
  say "before bench v3 exit $?"
  rm -f /tmp/v2l.h5 /tmp/v3.h5
fi
if [[ " $steps " == *" run10 "* ]]; then
  # docs/cuda-engine.md, "H200 run 10": before and after rows in one call,
  # every GPU row with the engine's phase profile (QMLA_CUDA_ENGINE_PROFILE=1;
  # the before rows QMLA_CUDA_ENGINE_BEFORE=1, the sequences of e498e58)
  say "run10: synth captures ($(date -u +%H:%M:%S))"
  synth512
  export QMLA_CUDA_ENGINE_PROFILE=1
  say "run10: V2-Lite after (sweep: gpu 8, cpu 2; ops: gpu 8, interventions 2, cpu 1; eval on both)"
  timeout 120 $B/bench/bench_engine /tmp/v2l.h5 --threads 16 --cpu-seqs 2 --ops --op-seqs 8 \
    --iv-seqs 2 --cpu-op-seqs 1 --eval --out $OUT/r10-after-v2lite.h5 >>"$LOG" 2>&1
  say "run10 v2-lite after exit $?"
  say "run10: V2-Lite before (QMLA_CUDA_ENGINE_BEFORE=1, gpu only)"
  QMLA_CUDA_ENGINE_BEFORE=1 timeout 60 $B/bench/bench_engine /tmp/v2l.h5 --threads 16 --no-cpu \
    --ops --op-seqs 8 --iv-seqs 2 --eval --out $OUT/r10-before-v2lite.h5 >>"$LOG" 2>&1
  say "run10 v2-lite before exit $?"
  say "run10: V3 after (gpu only: sweep 8, ops 4, interventions 1, eval)"
  timeout 90 $B/bench/bench_engine /tmp/v3.h5 --threads 16 --no-cpu --ops --op-seqs 4 \
    --iv-seqs 1 --eval --out $OUT/r10-after-v3.h5 >>"$LOG" 2>&1
  say "run10 v3 after exit $?"
  say "run10: V3 before (QMLA_CUDA_ENGINE_BEFORE=1)"
  QMLA_CUDA_ENGINE_BEFORE=1 timeout 90 $B/bench/bench_engine /tmp/v3.h5 --threads 16 --no-cpu \
    --ops --op-seqs 4 --iv-seqs 1 --eval --out $OUT/r10-before-v3.h5 >>"$LOG" 2>&1
  say "run10 v3 before exit $?"
  unset QMLA_CUDA_ENGINE_PROFILE
  rm -f /tmp/v2l.h5 /tmp/v3.h5
fi
# run12: the GEMM precision (QMLA_CUDA_ENGINE_GEMM=fp32|3xtf32): V3 predict
# (GPU only, 4 sequences) in both modes, then the agreement test's sweep,
# op and iv sections in both modes at once (RUN12_SECTIONS, RUN12_TIMEOUT)
if [[ " $steps " == *" run12 "* ]]; then
  say "run12: synth V3 ($(date -u +%H:%M:%S))"
  $B/cli/qmla synth -o /tmp/v3.h5 --shape deepseek-v3 --layers 1 --cells 1 --seqs 8 \
    --tokens 512 --no-pre --force --threads 16 >>"$LOG" 2>&1
  rep=0
  for gm in fp32 3xtf32 fp32 3xtf32; do
    rep=$((rep + 1))
    say "run12: V3 ops, QMLA_CUDA_ENGINE_GEMM=$gm ($(date -u +%H:%M:%S))"
    QMLA_CUDA_ENGINE_GEMM=$gm timeout 60 $B/bench/bench_engine /tmp/v3.h5 --threads 16 --no-sweep \
      --no-cpu --ops --op-seqs 4 --iv-seqs 0 --out $OUT/r12-ops-$gm-$(( (rep + 1) / 2 )).h5 >>"$LOG" 2>&1
    say "run12 v3 ops $gm exit $?"
  done
  say "run12: malformed QMLA_CUDA_ENGINE_GEMM"
  QMLA_CUDA_ENGINE_GEMM=tf32 timeout 30 $B/bench/bench_engine /tmp/v3.h5 --threads 16 --no-sweep \
    --no-cpu --ops --op-seqs 1 --iv-seqs 0 --out /tmp/r12-bad.h5 >>"$LOG" 2>&1
  say "run12 malformed exit $? (expected non-zero)"
  rm -f /tmp/r12-bad.h5
  rm -f /tmp/v3.h5
  say "run12: test_engine_cuda sections ${RUN12_SECTIONS:-sweep,op,iv}, both modes ($(date -u +%H:%M:%S))"
  for gm in fp32 3xtf32; do
    ( QMLA_TEST_SECTIONS=${RUN12_SECTIONS:-sweep,op,iv} QMLA_CUDA_ENGINE_GEMM=$gm \
        timeout ${RUN12_TIMEOUT:-150} $B/tests/test_engine_cuda >$OUT/test-$gm.log 2>&1;
      echo "== exit $? ($gm)" >>$OUT/test-$gm.log ) &
  done
  wait
  for gm in fp32 3xtf32; do tail -3 $OUT/test-$gm.log | tee -a "$LOG"; done
fi
# run13 (docs/cuda-engine.md "H200 run 13"): V3 T 512, the sweep (8 sequences)
# and the ops (predict 4 sequences, interventions 1) on the GPU, run 13's
# forms against run 12's (QMLA_CUDA_ENGINE_R12=1: whole-range tile products,
# thread-per-value row constants and key Grams), alternated twice; then the
# phase and stage profile of predict in both forms (QMLA_CUDA_ENGINE_PROFILE=1,
# 2 sequences) next to the agreement test's sections RUN13_SECTIONS (default
# sweep,op,iv) on the same GPU (the test's log: $OUT/test-run13.log;
# RUN13_TEST=0: no test, the profile alone on the GPU)
if [[ " $steps " == *" run13 "* ]]; then
  say "run13: synth V3 ($(date -u +%H:%M:%S))"
  $B/cli/qmla synth -o /tmp/v3.h5 --shape deepseek-v3 --layers 1 --cells 1 --seqs 8 \
    --tokens 512 --no-pre --force --threads 16 >>"$LOG" 2>&1
  for rep in 1 2; do
    for r in 1 0; do
      say "run13: V3 sweep and ops, QMLA_CUDA_ENGINE_R12=$r (rep $rep, $(date -u +%H:%M:%S))"
      QMLA_CUDA_ENGINE_R12=$r timeout 60 $B/bench/bench_engine /tmp/v3.h5 --threads 16 --no-cpu \
        --ops --op-seqs 4 --iv-seqs 1 --out $OUT/r13-v3-r12_$r-$rep.h5 >>"$LOG" 2>&1
      say "run13 v3 R12=$r exit $?"
    done
  done
  tpid=
  if [ "${RUN13_TEST:-1}" != 0 ]; then
    say "run13: test_engine_cuda sections ${RUN13_SECTIONS:-sweep,op,iv} ($(date -u +%H:%M:%S))"
    ( QMLA_TEST_SECTIONS=${RUN13_SECTIONS:-sweep,op,iv} timeout ${RUN13_TIMEOUT:-150} \
        $B/tests/test_engine_cuda >$OUT/test-run13.log 2>&1; echo "== exit $?" >>$OUT/test-run13.log ) &
    tpid=$!
  fi
  for r in 1 0; do
    say "run13: V3 predict profile, QMLA_CUDA_ENGINE_R12=$r${tpid:+ (next to the test)}"
    QMLA_CUDA_ENGINE_PROFILE=1 QMLA_CUDA_ENGINE_R12=$r timeout 60 $B/bench/bench_engine /tmp/v3.h5 \
      --threads 16 --no-cpu --no-sweep --ops --op-seqs 2 --iv-seqs 0 \
      --out /tmp/r13-prof.h5 >>"$LOG" 2>&1
    say "run13 profile R12=$r exit $?"
  done
  rm -f /tmp/v3.h5 /tmp/r13-prof.h5
  if [ -n "$tpid" ]; then
    wait $tpid
    tail -3 $OUT/test-run13.log | tee -a "$LOG"
  fi
fi
if [[ " $steps " == *" run11 "* ]]; then
  # docs/cuda-engine.md, "H200 run 11": (1) eval's ||C||_2 eigensolver on its
  # own stream ahead of the passes (run 10's order, the default) against the
  # same solver after the passes on their stream (QMLA_CUDA_EVAL_SOLVER_AFTER=1,
  # everything else the same build), alternated, with the phase profile;
  # (2) V2-Lite intervene on both engines (multi10's capture and options):
  # per item the cross term's conditioning, and the comparison with
  # cross_relative on its own scale
  say "run11: synth captures ($(date -u +%H:%M:%S))"
  synth512
  export QMLA_CUDA_ENGINE_PROFILE=1
  for rep in 1 2 3; do
    for sa in 0 1; do
      say "run11: V2-Lite eval, solver after the passes = $sa (rep $rep)"
      QMLA_CUDA_EVAL_SOLVER_AFTER=$sa timeout 40 $B/bench/bench_engine /tmp/v2l.h5 --threads 16 \
        --no-sweep --no-cpu --eval --out /tmp/r11-eval.h5 >>"$LOG" 2>&1
      say "run11 v2-lite eval after=$sa exit $?"
    done
  done
  for sa in 0 1; do
    say "run11: V3 eval, solver after the passes = $sa"
    QMLA_CUDA_EVAL_SOLVER_AFTER=$sa timeout 60 $B/bench/bench_engine /tmp/v3.h5 --threads 16 \
      --no-sweep --no-cpu --eval --out /tmp/r11-eval.h5 >>"$LOG" 2>&1
    say "run11 v3 eval after=$sa exit $?"
  done
  # causal tiles at V3 (T 512): query tiles of 128 and 256 tokens (the
  # products of tile k span keys < (k+1) B: 62.5 % / 75 % of the full
  # [T, T] products, but the attention is recomputed per JVP when the
  # sequence has more than one tile) against the automatic single tile
  for tl in 0 256 128; do
    say "run11: V3 ops, QMLA_CUDA_ENGINE_TILE=$tl (0: automatic)"
    QMLA_CUDA_ENGINE_TILE=$tl timeout 60 $B/bench/bench_engine /tmp/v3.h5 --threads 16 --no-sweep \
      --no-cpu --ops --op-seqs 4 --iv-seqs 0 --out /tmp/r11-ops.h5 >>"$LOG" 2>&1
    say "run11 v3 ops tile $tl exit $?"
  done
  unset QMLA_CUDA_ENGINE_PROFILE
  rm -f /tmp/v2l.h5 /tmp/v3.h5 /tmp/r11-eval.h5 /tmp/r11-ops.h5
  Q=$B/cli/qmla
  W=/tmp/r11iv
  mkdir -p $W
  $Q synth -o $W/v2lite.h5 --shape deepseek-v2-lite --layers 2 --cells 1 --seqs 2 --tokens 256 \
    --no-pre --force --threads 16 >>"$LOG" 2>&1
  for e in cpu cuda; do
    $Q intervene $W/v2lite.h5 -o $W/iv-$e.h5 --engine $e --threads 16 --reps 4 --bootstrap 200 \
      --force >>"$LOG" 2>&1
    say "run11 v2-lite intervene $e exit $?"
  done
  python3 - $W/iv-cpu.h5 $W/iv-cuda.h5 <<'PY' 2>&1 | tee -a "$LOG"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["interventions"] for p in sys.argv[1:3])
g = lambda f, k: np.asarray(f[k][()], dtype=np.float64)
print("run11 cross term per item: cross_relative cpu, cuda, |diff|, rel diff; joint ratio "
      "q = r_joint/(r_content+r_rope) rel diff; conditioning (1+cr)/|cr|; predicted rel diff")
for i in range(len(g(a, "cross_relative"))):
    ca, cb = g(a, "cross_relative")[i], g(b, "cross_relative")[i]
    qa = g(a, "response_joint")[i] / (g(a, "response_content")[i] + g(a, "response_rope")[i])
    qb = g(b, "response_joint")[i] / (g(b, "response_content")[i] + g(b, "response_rope")[i])
    k = abs(1 + ca) / abs(ca) if ca else float("inf")
    rq = abs(qa - qb) / abs(qa)
    print(f"run11 item {i}: cr {ca:.9g} {cb:.9g} |d| {abs(ca-cb):.3g} rel {abs(ca-cb)/max(abs(ca),abs(cb)):.3g}; "
          f"q rel diff {rq:.3g}; kappa {k:.1f}; kappa*q {k*rq:.3g}; q_cpu-1 {qa-1:.9g}")
PY
  python3 scripts/compare-results.py $W/iv-cpu.h5 $W/iv-cuda.h5 --rtol 1e-4 --atol 1e-9 --quiet \
    >$W/c1.txt 2>&1
  say "run11 intervene compare, everything relative: exit $?: $(tail -1 $W/c1.txt)"
  grep DIFF $W/c1.txt | tee -a "$LOG"
  python3 scripts/compare-results.py $W/iv-cpu.h5 $W/iv-cuda.h5 --rtol 1e-4 --atol 1e-9 \
    --abs cross_relative=1e-4 >$W/c2.txt 2>&1
  say "run11 intervene compare, cross_relative on its scale: exit $?: $(tail -1 $W/c2.txt)"
  grep -E "cross|DIFF" $W/c2.txt | tee -a "$LOG"
  rm -rf $W
fi
if [[ " $steps " == *" tfcli "* ]]; then
  # qmla learn and qmla eval through the CLI with each engine on the
  # default capture: the printed tables side by side
  Q=$B/cli/qmla
  C=data/tiny-mla-default.h5
  for e in cpu cuda; do
    say "tfcli: qmla learn --engine $e ($(date -u +%H:%M:%S))"
    $Q learn $C -o /tmp/qm-$e.h5 --path both --config C4R4 --steps 100 --seed 0 \
      --train-cells prose-s0 --heldout-cells none --layers 0-1 --threads 16 --engine $e --force \
      2>&1 | tee -a "$LOG" | tail -4
    say "tfcli: qmla eval --engine $e"
    $Q eval $C --config C4R4 --policy none --cells code-s0 --threads 16 --engine $e \
      --transforms /tmp/qm-$e.h5 -o /tmp/ev-$e.h5 2>&1 | tee -a "$LOG" | tail -8
  done
fi
if [[ " $steps " == *" cli "* ]]; then
  # the six analysis commands through the CLI with each engine on the
  # default capture, each pair of results files compared dataset by dataset
  # (scripts/compare-results.py: rtol 1e-4; learn, 4 steps, through its
  # transforms' eval, 1e-3; CLI_LEARN_ARGS="--attn-precision f64" learns in
  # double, run 14): $OUT/cli/compare-*.txt, one verdict line each
  Q=$B/cli/qmla
  C=data/tiny-mla-default.h5
  D=$OUT/cli
  mkdir -p $D
  for e in cpu cuda; do
    say "cli: --engine $e ($(date -u +%H:%M:%S))"
    a="--threads 16 --engine $e --force"
    $Q sweep $C -o $D/sweep-$e.h5 $a >>"$LOG" 2>&1; say "cli sweep $e exit $?"
    $Q jvp $C -o $D/jvp-$e.h5 $a >>"$LOG" 2>&1; say "cli jvp $e exit $?"
    $Q predict $C -o $D/predict-$e.h5 $a >>"$LOG" 2>&1; say "cli predict $e exit $?"
    $Q intervene $C -o $D/intervene-$e.h5 --layers 0-1 --reps 8 $a >>"$LOG" 2>&1
    say "cli intervene $e exit $?"
    $Q learn $C -o $D/learn-$e.h5 --path both --config C4R4 --steps 4 --seed 0 \
      --train-cells prose-s0 --heldout-cells none --layers 0-1 ${CLI_LEARN_ARGS:-} $a >>"$LOG" 2>&1
    say "cli learn $e exit $?"
  done
  # eval: the same (CPU-learned) transforms on both engines; learn: the
  # transforms each engine learned, evaluated on the CPU engine (their
  # objective, not their parameters: 4 Adam steps from one seed move
  # near-zero rotation entries by +-lr whatever the gradient's last digits)
  for e in cpu cuda; do
    $Q eval $C --config C4R4 --policy none --cells code-s0 --layers 0-1 --threads 16 \
      --engine $e --transforms $D/learn-cpu.h5 -o $D/eval-$e.h5 >>"$LOG" 2>&1
    say "cli eval $e exit $?"
  done
  $Q eval $C --config C4R4 --policy none --cells code-s0 --layers 0-1 --threads 16 \
    --engine cpu --transforms $D/learn-cuda.h5 -o $D/learned-cuda.h5 >>"$LOG" 2>&1
  say "cli eval of the cuda-learned transforms exit $?"
  cp $D/eval-cpu.h5 $D/learned-cpu.h5
  compare_pairs $D "" cli
  rm -f $D/*.h5 # the verdicts and per-dataset lines stay (compare-*.txt)
fi
if [[ " $steps " == *" run14 "* ]]; then
  # learning in double (qmla learn --attn-precision f64, issue 18 item 4;
  # docs/cuda-engine.md "H200 run 14"): the learn section of the agreement
  # test (its float32 rows and the double rows: the same parameters, then
  # 100 steps on each engine); qmla learn through the CLI (content path, 100
  # steps, seed 0, layers 0-1 of the default capture) in f32 and f64 on each
  # engine, the transforms' objectives compared and each file evaluated on
  # the CPU engine (compare-results.py, rtol 1e-3); the V3 learner's GPU step
  # in f32 and f64. Logs and verdicts in $OUT/run14/.
  Q=$B/cli/qmla
  C=data/tiny-mla-default.h5
  D=$OUT/run14
  mkdir -p $D
  say "run14: test_engine_cuda, learn section ($(date -u +%H:%M:%S))"
  t0=$(date +%s)
  QMLA_TEST_ONLY=learn timeout ${TEST_TIMEOUT:-240} $B/tests/test_engine_cuda >$D/test-learn.log 2>&1
  say "run14 test learn exit $? in $(( $(date +%s) - t0 )) s: $(tail -1 $D/test-learn.log)"
  grep -E "^learn|largest" $D/test-learn.log | tee -a "$LOG"
  for p in f32 f64; do
    for e in cpu cuda; do
      t0=$(date +%s)
      $Q learn $C -o $D/learn-$p-$e.h5 --path content --config C4R4 --steps 100 --seed 0 \
        --train-cells prose-s0 --heldout-cells none --layers 0-1 --threads 16 --engine $e \
        --attn-precision $p --force >$D/learn-$p-$e.log 2>&1
      say "run14 learn $p $e exit $? in $(( $(date +%s) - t0 )) s"
      $Q eval $C --config C4R4 --policy none --cells code-s0 --layers 0-1 --threads 16 \
        --engine cpu --transforms $D/learn-$p-$e.h5 -o $D/eval-$p-$e.h5 >>"$LOG" 2>&1
      say "run14 eval of the $p $e transforms (cpu engine) exit $?"
    done
    python3 - $D/learn-$p-cpu.h5 $D/learn-$p-cuda.h5 <<'PY' 2>&1 | tee $D/objectives-$p.txt | tee -a "$LOG"
import sys, h5py
a, b = (h5py.File(f, "r") for f in sys.argv[1:3])
worst = 0.0
for l in sorted(a["layers"], key=int):
    for k in ("objective_content_init", "objective_content_best"):
        x, y = float(a["layers"][l].attrs[k]), float(b["layers"][l].attrs[k])
        r = abs(x - y) / max(abs(x), abs(y))
        worst = max(worst, r)
        print(f"layer {l} {k}: cpu {x:.12g} cuda {y:.12g} rel {r:.3g}")
print(f"largest relative difference of the learned objectives: {worst:.3g} "
      f"({'within' if worst <= 1e-3 else 'beyond'} 1e-3)")
PY
    python3 scripts/compare-results.py $D/eval-$p-cpu.h5 $D/eval-$p-cuda.h5 --rtol 1e-3 --atol 1e-9 \
      --skip eval/transforms >$D/compare-eval-$p.txt 2>&1
    say "run14 compare eval $p exit $?: $(tail -1 $D/compare-eval-$p.txt)"
  done
  say "run14: the V3 learner on the GPU, 20 steps, f32 then f64 ($(date -u +%H:%M:%S))"
  synth512
  for p in f32 f64; do
    timeout 150 $B/bench/bench_engine /tmp/v3.h5 --threads 16 --no-sweep --no-cpu --learn 20 \
      --attn-precision $p --out $D/bench-learn-v3-$p.h5 >$D/bench-learn-v3-$p.log 2>&1
    say "run14 bench v3 learn $p exit $?: $(grep -E '^learn one layer' $D/bench-learn-v3-$p.log)"
  done
  rm -f /tmp/v2l.h5 /tmp/v3.h5 $D/*.h5.tmp
fi
if [[ " $steps " == *" families "* ]]; then
  # item 4 on synth captures of the family shapes docs/models.md lists that
  # the test's table does not (FAMILY_SHAPES, default kimi-k2 moonlight
  # longcat-flash-lite): one layer, two cells of two sequences of
  # FAMILY_TOKENS (128) tokens; sweep, jvp, predict, intervene (4
  # repetitions), learn (content path, 10 steps, --attn-precision f64) and
  # eval (the CPU-learned transforms; and each engine's learned transforms
  # on the CPU engine) with each engine, every pair of files compared as in
  # step cli. Verdicts in $OUT/families/compare-SHAPE-*.txt.
  Q=$B/cli/qmla
  D=$OUT/families
  mkdir -p $D
  for sh in ${FAMILY_SHAPES:-kimi-k2 moonlight longcat-flash-lite}; do
    C=/tmp/fam-$sh.h5
    $Q synth -o $C --shape $sh --layers 1 --cells 2 --seqs 2 --tokens ${FAMILY_TOKENS:-128} \
      --no-pre --force --threads 16 >>"$LOG" 2>&1
    say "families: $sh synth exit $? ($(date -u +%H:%M:%S))"
    for e in cpu cuda; do
      a="--threads 16 --engine $e --force"
      $Q sweep $C -o $D/sweep-$e.h5 $a >>"$LOG" 2>&1 || say "families $sh sweep $e exit $?"
      $Q jvp $C -o $D/jvp-$e.h5 $a >>"$LOG" 2>&1 || say "families $sh jvp $e exit $?"
      $Q predict $C -o $D/predict-$e.h5 $a >>"$LOG" 2>&1 || say "families $sh predict $e exit $?"
      $Q intervene $C -o $D/intervene-$e.h5 --reps 4 $a >>"$LOG" 2>&1 ||
        say "families $sh intervene $e exit $?"
      $Q learn $C -o $D/learn-$e.h5 --path content --config C4R4 --steps 10 --seed 0 \
        --train-cells synth-s0 --heldout-cells synth-s1 --attn-precision f64 $a >>"$LOG" 2>&1 ||
        say "families $sh learn $e exit $?"
    done
    for e in cpu cuda; do
      $Q eval $C --config C4R4 --policy none --cells synth-s1 --threads 16 --engine $e \
        --transforms $D/learn-cpu.h5 -o $D/eval-$e.h5 >>"$LOG" 2>&1 || say "families $sh eval $e exit $?"
    done
    $Q eval $C --config C4R4 --policy none --cells synth-s1 --threads 16 --engine cpu \
      --transforms $D/learn-cuda.h5 -o $D/learned-cuda.h5 >>"$LOG" 2>&1
    cp $D/eval-cpu.h5 $D/learned-cpu.h5
    compare_pairs $D "$sh-" "families $sh"
    rm -f $D/*.h5 $C
  done
fi
if [[ " $steps " == *" sanitizers "* ]]; then
  # since run 11: the agreement test and both sanitizers at once on the one
  # GPU (correctness runs, not timed), each sanitizer split by sections of
  # the test (QMLA_TEST_SECTIONS; run 11 ran each whole and neither finished
  # in 220 s): memcheck over QMLA_TEST_SMALL=1 (every kernel and path:
  # sweep, op, iv, learn, eval with the Gram head norms and the eigensolver's
  # stream, QDQ, the device rules), racecheck over =2 (the small shapes and,
  # since run 11, eval on one layer of the default capture). Logs:
  # $OUT/test.log, $OUT/memcheck-N.log, $OUT/racecheck-N.log, appended to
  # engine.log afterwards; MEMCHECK_GROUPS / RACECHECK_GROUPS (space-
  # separated section lists) choose the split.
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  MG=${MEMCHECK_GROUPS:-"rules,sweep,layer,qdq,heads op iv learn drivers eval"}
  RG=${RACECHECK_GROUPS:-"rules,sweep,layer,qdq,heads op iv learn eval"}
  say "test_engine_cuda + memcheck ($MG) + racecheck ($RG) at once ($(date -u +%H:%M:%S))"
  t0=$(date +%s)
  ( timeout ${TEST_TIMEOUT:-240} $B/tests/test_engine_cuda >$OUT/test.log 2>&1
    echo "== test_engine_cuda exit $? in $(( $(date +%s) - t0 )) s" >>$OUT/test.log ) &
  i=0
  for g in $MG; do
    i=$((i + 1))
    ( QMLA_TEST_SECTIONS=$g QMLA_TEST_SMALL=1 timeout ${MEMCHECK_TIMEOUT:-200} "$CS" --tool memcheck \
        --leak-check full --error-exitcode 9 $B/tests/test_engine_cuda >$OUT/memcheck-$i.log 2>&1
      echo "== memcheck [$g] exit $? in $(( $(date +%s) - t0 )) s" >>$OUT/memcheck-$i.log ) &
  done
  i=0
  for g in $RG; do
    i=$((i + 1))
    ( QMLA_TEST_SECTIONS=$g QMLA_TEST_SMALL=2 timeout ${RACECHECK_TIMEOUT:-200} "$CS" --tool racecheck \
        --error-exitcode 9 $B/tests/test_engine_cuda >$OUT/racecheck-$i.log 2>&1
      echo "== racecheck [$g] exit $? in $(( $(date +%s) - t0 )) s" >>$OUT/racecheck-$i.log ) &
  done
  wait
  for f in $OUT/test.log $OUT/memcheck-*.log $OUT/racecheck-*.log; do
    say "---- $(basename $f)"
    cat $f >>"$LOG"
  done
  grep -h -E "^== |ERROR SUMMARY|RACECHECK SUMMARY|passed, " $OUT/test.log $OUT/memcheck-*.log \
    $OUT/racecheck-*.log | tee -a "$LOG"
  rm -f $OUT/test.log $OUT/memcheck-*.log $OUT/racecheck-*.log
fi
if [[ " $steps " == *" memcheck "* ]]; then
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  say "compute-sanitizer memcheck, QMLA_TEST_SMALL=1 ($(date -u +%H:%M:%S))"
  t0=$(date +%s)
  QMLA_TEST_SMALL=1 timeout ${MEMCHECK_TIMEOUT:-60} "$CS" --tool memcheck --leak-check full --error-exitcode 9 \
    $B/tests/test_engine_cuda >>"$LOG" 2>&1
  say "memcheck exit $? in $(( $(date +%s) - t0 )) s"
  if [ -z "${RACECHECK_TIMEOUT:-}" ] && [ $(( $(date +%s) - t_start )) -gt 230 ]; then
    say "racecheck left out (time)"
  else
  t0=$(date +%s)
  QMLA_TEST_SMALL=2 timeout ${RACECHECK_TIMEOUT:-40} "$CS" --tool racecheck --error-exitcode 9 \
    $B/tests/test_engine_cuda >>"$LOG" 2>&1
  say "racecheck exit $? in $(( $(date +%s) - t0 )) s"
  fi
fi
say "done in $(( $(date +%s) - t_start )) s"
# the summary lines last (the reply carries the end of the output)
grep -E "^== |passed|largest relative|^learn one layer|^eval |^(eval|learn_)|SKIP|ERROR SUMMARY|RACECHECK SUMMARY|s/layercell|^[0-9]+ +synth|speedup|extrapolated|cublas_sgemm|openblas_sgemm|device |^(jvp|predict|sensitivities|interventions) " "$LOG" | tail -60
