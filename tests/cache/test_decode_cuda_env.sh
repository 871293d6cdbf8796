#!/usr/bin/env bash
# tests/cache/test_decode_cuda_env.sh TEST_DECODE_CUDA — the selection knobs of
# test_decode_cuda (QMLA_TEST_VARIANTS / SHAPES / CFGS comma lists,
# QMLA_TEST_AGING steps) refuse a malformed value before the device (exit 1
# naming the variable), with or without a GPU: review11 found that a
# malformed list selected nothing and the test then passed having checked
# no decode variant. Unset or empty means all (device-decode-hopper.sh
# passes SAN_*= through as empty values), so those reach the device check
# (a SKIP here, 77, or the run on a GPU: not run here).
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT.
set -u
. "$(dirname "$0")/../support/cli_lib.sh"
T=${1:?usage: test_decode_cuda_env.sh TEST_DECODE_CUDA}
for spec in QMLA_TEST_VARIANTS=x QMLA_TEST_VARIANTS=3, QMLA_TEST_VARIANTS=,3 \
            QMLA_TEST_SHAPES=1,,2 QMLA_TEST_CFGS=40 QMLA_TEST_CFGS=-1 \
            "QMLA_TEST_VARIANTS=7 8" QMLA_TEST_AGING=abc QMLA_TEST_AGING=12x \
            QMLA_TEST_AGING=-3; do
  name=${spec%%=*}
  expect 1 "$spec refused" -- env "$spec" "$T"
  containsF "FAIL: $name=\"${spec#*=}\": expected" "$spec: the variable and its value named"
done
finish test_decode_cuda_env
