#!/usr/bin/env bash
# scripts/build-flashmla.sh SRC OUT — build bench/bench_flashmla.cu (issue 19:
# FlashMLA side by side) against a FlashMLA snapshot, never committed.
#   SRC  a folder holding FlashMLA's csrc/ (github.com/deepseek-ai/FlashMLA)
#        with CUTLASS's include/ (github.com/NVIDIA/cutlass, the commit of
#        FlashMLA's csrc/cutlass submodule) at SRC/csrc/cutlass/include;
#        how this session made it (from the fetched mirrors, in an ignored
#        folder):
#          git --git-dir=FLASHMLA.git archive HEAD csrc | tar x -C SRC
#          git --git-dir=CUTLASS.git archive <submodule commit>:include |
#              tar x -C SRC/csrc/cutlass/include
#   OUT  the folder for the objects and the program OUT/bench_flashmla
# Compiles only FlashMLA's SM90 BF16 dense decode (splitkv_mla bf16, the
# combine, the scheduler metadata) with the nvcc flags of its setup.py
# (sm_90a, -O3, fast math, register-usage level 10; FP16 disabled), then
# links bench_flashmla (static CUDA runtime, libcuda for the TMA
# descriptors). FP8=1 also compiles its SM90 sparse FP8 decode for V3.2's
# 656-byte tokens at 64 and 128 heads (sparse_fp8 v32_persistent_h64 and
# _h128) and builds bench_flashmla with -DQMLA_FMLA_FP8=1 (its --fp8 mode).
# Objects already in OUT are reused. JOBS (default 3) compiles in parallel;
# NICE=1 runs nvcc under nice -n 19.
set -euo pipefail
src=${1:?usage: scripts/build-flashmla.sh SRC OUT}
out=${2:?usage: scripts/build-flashmla.sh SRC OUT}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
src=$(cd "$src" && pwd)
out=$(cd "$out" && pwd)
nice=()
[ "${NICE:-0}" = 1 ] && nice=(nice -n 19)
F=(-O3 -std=c++20 -DNDEBUG -D_USE_MATH_DEFINES -Wno-deprecated-declarations
   -U__CUDA_NO_HALF_OPERATORS__ -U__CUDA_NO_HALF_CONVERSIONS__ -U__CUDA_NO_HALF2_OPERATORS__
   -U__CUDA_NO_BFLOAT16_CONVERSIONS__ --expt-relaxed-constexpr --expt-extended-lambda
   --use_fast_math --ptxas-options=--register-usage-level=10 -DFLASH_MLA_DISABLE_FP16
   -gencode arch=compute_90a,code=sm_90a
   -I"$src/csrc" -I"$src/csrc/kerutils/include" -I"$src/csrc/sm90" -I"$src/csrc/cutlass/include")
srcs=(sm90/decode/dense/instantiations/bf16.cu smxx/decode/combine/combine.cu
      smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu)
defs=()
if [ "${FP8:-0}" = 1 ]; then
  srcs+=(sm90/decode/sparse_fp8/instantiations/v32_persistent_h128.cu
         sm90/decode/sparse_fp8/instantiations/v32_persistent_h64.cu)
  defs=(-DQMLA_FMLA_FP8=1)
fi
pids=()
objs=()
for f in "${srcs[@]}"; do
  o="$out/$(basename "$f" .cu).o"
  objs+=("$o")
  [ -s "$o" ] && continue
  "${nice[@]}" nvcc "${F[@]}" -c "$src/csrc/$f" -o "$o" &
  pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-3}" ]; do sleep 1; done
done
for p in "${pids[@]}"; do wait "$p"; done
"${nice[@]}" nvcc "${F[@]}" "${defs[@]}" -o "$out/bench_flashmla" "$here/bench/bench_flashmla.cu" "${objs[@]}" \
  -L"$(dirname "$(command -v nvcc)")/../lib64/stubs" -lcuda
echo "built $out/bench_flashmla"
