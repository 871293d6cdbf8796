#!/usr/bin/env bash
# tests/sweep/test_engine_cuda_env.sh TEST_ENGINE_CUDA — test_engine_cuda's
# QMLA_TEST_SECTIONS refuses a name that is no section before the device
# (exit 1 naming the variable and the entry), with or without a GPU:
# review11 found that a misspelt section ran nothing and the test passed.
# Known names, unset or empty reach the device check (a SKIP here, 77).
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT.
set -u
. "$(dirname "$0")/../support/cli_lib.sh"
T=${1:?usage: test_engine_cuda_env.sh TEST_ENGINE_CUDA}
for v in evals Rules "rules,," ",heads" "rules heads" "sweep,op,ivv"; do
  expect 1 "QMLA_TEST_SECTIONS=$v refused" -- env "QMLA_TEST_SECTIONS=$v" "$T"
  containsF "FAIL: QMLA_TEST_SECTIONS=\"$v\": " "$v: the variable named"
  containsF "is no section; expected a comma list of rules, sweep" "$v: the names listed"
done
finish test_engine_cuda_env
