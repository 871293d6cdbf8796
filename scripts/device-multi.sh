#!/usr/bin/env bash
# scripts/device-multi.sh — on the accelerator machine: the CUDA engine's
# shards (issue 24; docs/cuda-engine.md "Several GPUs"). Builds qmla with the
# CUDA engine, checks the device selection (--device, --engine cuda:N,
# QMLA_CUDA_DEVICE, the local-rank rule; out-of-range indices refused), then
# for sweep, predict and intervene on each capture (the default capture, a
# DeepSeek-V2-Lite- and a DeepSeek-V3-shaped synth capture):
#   - one process, --engine cuda (the reference);
#   - K shard processes at once, --engine cuda --device 0 (K = $SHARDS,
#     default 2), merged, compared bit for bit with the reference
#     (scripts/same-results.py; engine_device's text is left out: it names
#     the rule that chose the device);
#   - K shard processes at once choosing the device by the local-rank rule
#     (OMPI_COMM_WORLD_LOCAL_RANK=r: r mod the device count), merged and
#     compared the same way;
#   - (default and V2-Lite captures) one process, --engine cpu, compared with
#     the reference within the engine agreement tolerance
#     (scripts/compare-results.py --rtol 1e-4 --atol 1e-9, cross_relative
#     absolute 1e-4: it is already a fraction of the single-path sum);
#   - a CPU part merged with CUDA parts: refused.
# Everything goes to $OUT/multi.log (summary lines start with "=="); wall
# times of the one-process run and of the K concurrent shards are printed
# (on one GPU they share it: not a scaling figure).
# Run (docs/cuda-engine.md "Several GPUs"): device-copy of this branch with
# data/tiny-mla-default.h5 and .deb, then on the machine
#   cd .device/NAME && bash scripts/device-multi.sh
# On a host of K GPUs, SHARDS=K and the rank rule puts shard r on device r.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
LOG=$OUT/multi.log
K=${SHARDS:-2}
[ -n "${NO_DEVICE_ENV:-}" ] || source scripts/device-env.sh
# ENGINE=cpu B=build NO_BUILD=1 NO_DEVICE_ENV=1: a dry run of the script's
# logic on a machine without a GPU (the device flags are then left out)
E=${ENGINE:-cuda}
B=${B:-build-gpu}
DEV=(--device 0)
[ $E = cpu ] && DEV=()
Q=$B/cli/qmla
W=/tmp/multi
rm -rf $W && mkdir -p $W
say() { echo "== $*" | tee -a "$LOG"; }
run() { echo "\$ $*" >>"$LOG"; "$@" >>"$LOG" 2>&1; }
t_start=$(date +%s)
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv 2>&1 | tee -a "$LOG"
say "build ($(date -u +%H:%M:%S))"
if [ -n "${NO_BUILD:-}" ]; then :
elif [ ! -f $B/build.ninja ]; then
  meson setup $B --buildtype=release -Dcuda=enabled -Dgpu_engine=true -Dmpi=disabled >>"$LOG" 2>&1 ||
    { tail -30 $B/meson-logs/meson-log.txt >>"$LOG"; echo "setup failed"; tail -40 "$LOG"; exit 1; }
fi
[ -n "${NO_BUILD:-}" ] || ninja -C $B -j16 cli/qmla >>"$LOG" 2>&1 || { echo "build failed"; grep -E "error|FAILED" "$LOG" | head -40; exit 1; }
say "built in $(( $(date +%s) - t_start )) s"
ndev=$(nvidia-smi -L 2>/dev/null | wc -l)
D=data/tiny-mla-default.h5

devattr() { python3 -c "import h5py,sys; f=h5py.File(sys.argv[1]); g=f[sys.argv[2]] if sys.argv[2] != '/' else f; print(g.attrs.get('engine'), '|', g.attrs.get('engine_device'))" "$@"; }

# --- device selection -------------------------------------------------------
if [ $E = cuda ]; then
sel() { # EXPECTED-EXIT DESCRIPTION -- command...
  local want=$1 what=$2; shift 3
  echo "\$ $*" >>"$LOG"
  "$@" >$W/sel.out 2>&1
  local got=$?
  cat $W/sel.out >>"$LOG"
  [ $got = $want ] && say "select ok ($what): exit $got" || say "select FAIL ($what): exit $got, expected $want"
}
sel 2 "--device $ndev out of range" -- $Q sweep $D -o $W/s.h5 --engine cuda --device $ndev --threads 4
grep -o "CUDA device $ndev asked for (--device) but this machine has $ndev CUDA device[s]* ([^)]*)" $W/sel.out | tee -a "$LOG"
sel 2 "QMLA_CUDA_DEVICE=$((ndev + 3)) out of range" -- env QMLA_CUDA_DEVICE=$((ndev + 3)) $Q predict $D -o $W/s.h5 --engine cuda --threads 4
sel 2 "QMLA_CUDA_DEVICE=x malformed" -- env QMLA_CUDA_DEVICE=x $Q predict $D -o $W/s.h5 --engine cuda --threads 4
sel 2 "--engine cuda:$ndev out of range" -- $Q intervene $D -o $W/s.h5 --engine cuda:$ndev --threads 4
sel 0 "--engine cuda:0" -- $Q sweep $D -o $W/s0.h5 --engine cuda:0 --threads 4 --layers 0
echo "engine_device: $(devattr $W/s0.h5 /)" | tee -a "$LOG"
sel 0 "OMPI_COMM_WORLD_LOCAL_RANK=$((ndev + 2)) (mod $ndev)" -- env OMPI_COMM_WORLD_LOCAL_RANK=$((ndev + 2)) $Q sweep $D -o $W/s1.h5 --engine cuda --threads 4 --layers 0
echo "engine_device: $(devattr $W/s1.h5 /)" | tee -a "$LOG"
sel 0 "SLURM_LOCALID=1 (mod $ndev)" -- env SLURM_LOCALID=1 $Q sweep $D -o $W/s2.h5 --engine cuda --threads 4 --layers 0
echo "engine_device: $(devattr $W/s2.h5 /)" | tee -a "$LOG"
fi

# --- shards -----------------------------------------------------------------
# shards CAPTURE TAG CMD GROUPS EXTRA...: reference, two sets of K concurrent
# shards, merges, comparisons
shards() {
  local cap=$1 tag=$2 cmd=$3 groups=$4; shift 4
  local extra=("$@") th=$(( 16 / K )) ref=$W/$tag-$cmd-one.h5 t0 t1 r
  [ $th -lt 1 ] && th=1
  t0=$(date +%s.%N)
  run $Q $cmd $cap -o $ref --engine $E --threads 16 "${extra[@]}"; r=$?
  t1=$(date +%s.%N)
  say "$tag $cmd: one process exit $r, $(awk "BEGIN{printf \"%.2f\", $t1 - $t0}") s"
  for mode in device0 rankrule; do
    local parts=() pids=() ext=part
    [ $cmd = sweep ] && ext=h5
    t0=$(date +%s.%N)
    for ((i = 0; i < K; i++)); do
      local p=$W/$tag-$cmd-$mode-$i.$ext
      parts+=("$p")
      local bal=()
      [ $cmd = sweep ] && bal=(--balance)
      if [ $mode = device0 ]; then
        $Q $cmd $cap -o $p --shard $i/$K "${bal[@]}" --engine $E "${DEV[@]}" --threads $th "${extra[@]}" >$W/$tag-$cmd-$mode-$i.log 2>&1 &
      else
        env OMPI_COMM_WORLD_LOCAL_RANK=$i $Q $cmd $cap -o $p --shard $i/$K "${bal[@]}" --engine $E --threads $th "${extra[@]}" >$W/$tag-$cmd-$mode-$i.log 2>&1 &
      fi
      pids+=($!)
    done
    local bad=0
    for ((i = 0; i < K; i++)); do wait ${pids[$i]} || bad=$((bad + 1)); cat $W/$tag-$cmd-$mode-$i.log >>"$LOG"; done
    t1=$(date +%s.%N)
    say "$tag $cmd $mode: $K concurrent shards, $bad failed, $(awk "BEGIN{printf \"%.2f\", $t1 - $t0}") s"
    [ $cmd != sweep ] && for p in "${parts[@]}"; do echo "part header $(basename $p): $(sed -n 2p $p)" >>"$LOG"; done
    local m=$W/$tag-$cmd-$mode-merged.h5
    if [ $cmd = sweep ]; then
      run $Q merge "${parts[@]}" -o $m; r=$?
    else
      run $Q $cmd $cap "${parts[@]}" --merge -o $m "${extra[@]}"; r=$?
    fi
    say "$tag $cmd $mode: merge exit $r"
    python3 scripts/same-results.py $ref $m $groups --skip-attr engine_device >$W/same.txt 2>&1; r=$?
    cat $W/same.txt >>"$LOG"
    say "$tag $cmd $mode: bit-identical to one process: exit $r: $(tail -1 $W/same.txt)"
    local g=/; [ $cmd != sweep ] && g=$groups
    echo "$tag $cmd $mode merged engine/device: $(devattr $m $g)" | tee -a "$LOG"
  done
}
cpu_compare() { # CAPTURE TAG CMD EXTRA...
  local cap=$1 tag=$2 cmd=$3; shift 3
  run $Q $cmd $cap -o $W/$tag-$cmd-cpu.h5 --engine cpu --threads 16 "$@"
  # cross_relative is a fraction of the single-path sum: compared on that
  # scale (docs/cuda-engine.md "H200 run 11"; the test's definition)
  python3 scripts/compare-results.py $W/$tag-$cmd-cpu.h5 $W/$tag-$cmd-one.h5 --rtol 1e-4 --atol 1e-9 \
    --abs cross_relative=1e-4 >$W/cmp.txt 2>&1
  local r=$?
  cat $W/cmp.txt >>"$LOG"
  say "$tag $cmd: $E one process vs cpu: exit $r: $(tail -1 $W/cmp.txt)"
}
IV=(--reps 4 --bootstrap 200)
CAPS=${CAPS:-default v2lite v3}
say "synth captures ($(date -u +%H:%M:%S))"
[[ " $CAPS " == *" v2lite "* ]] && run $Q synth -o $W/v2lite.h5 --shape deepseek-v2-lite --layers 2 --cells 1 --seqs 2 --tokens 256 --no-pre --force --threads 16
[[ " $CAPS " == *" v3 "* ]] && run $Q synth -o $W/v3.h5 --shape deepseek-v3 --layers 1 --cells 1 --seqs 2 --tokens 256 --no-pre --force --threads 16
ls -la $W/*.h5 >>"$LOG"
for tag in $CAPS; do
  cap=$W/$tag.h5
  [ $tag = default ] && cap=$D
  say "capture $tag ($(date -u +%H:%M:%S), $(( $(date +%s) - t_start )) s)"
  shards $cap $tag sweep "responses summary cells"
  shards $cap $tag predict predict
  shards $cap $tag intervene interventions "${IV[@]}"
  if [ $tag != v3 ]; then
    cpu_compare $cap $tag sweep
    cpu_compare $cap $tag predict
    cpu_compare $cap $tag intervene "${IV[@]}"
  fi
done
# engines are not mixed in a merge
run $Q predict $D -o $W/cpu-1.part --shard 1/$K --engine cpu --threads 16
run $Q predict $D $W/default-predict-device0-0.part $W/cpu-1.part --merge -o $W/mixed.h5
say "predict: a cpu part with a cuda part: exit $? (expected 2)"
run $Q sweep $D -o $W/cpu-1.h5 --shard 1/$K --balance --engine cpu --threads 16
run $Q merge $W/default-sweep-device0-0.h5 $W/cpu-1.h5 -o $W/mixed.h5
say "sweep: a cpu part with a cuda part: exit $? (expected 2)"
say "done in $(( $(date +%s) - t_start )) s"
grep "^== " "$LOG" | tail -60
