#!/usr/bin/env bash
# test_mpi.sh — `mpirun -n K qmla sweep` equals the serial sweep byte for
# byte in /responses, /summary and /cells, for K = 2 and 3 (cost-balanced
# assignment, rank 0 merges); a failed rank fails the job with its message,
# keeps the finished items, and a rerun with another K resumes them
# (12 items, 2 ranks of equal-cost items: rank 0 had 6) and again equals the
# serial sweep. SKIP (77) when qmla was built without MPI.
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT, QMLA_MPI (1 when built).
set -uo pipefail
[ "${QMLA_MPI:-0}" = 1 ] && command -v mpirun >/dev/null || { echo "SKIP: built without MPI"; exit 77; }
. "$(dirname "$0")/../support/cli_lib.sh"
. "$(dirname "$0")/../support/h5same.sh"
C=$ROOT/data/tiny-mla-default.h5
cd "$work"
# root in a container with no ssh and two cores
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated \
       OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
# Under ASan: Open MPI keeps memory until exit; suppress leaks whose stack
# passes through its libraries (tests/support/lsan-mpi.supp). The slow unwinder
# gives LSan the whole stack (the fast one stops inside Open MPI's plugins,
# frameless, and the suppressions could not match). Leaks in our own frames
# are still reported. Ignored by a build without sanitizers.
export LSAN_OPTIONS="suppressions=$ROOT/tests/support/lsan-mpi.supp:print_suppressions=0:fast_unwind_on_malloc=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
run() { mpirun --oversubscribe -n "$@"; }

expect 0 "serial sweep" -- "$QMLA" sweep "$C" -o serial.h5 --threads 1
# QMLA_TEST_SMALL=1 (a sanitizer build): K = 2 only (the release build: 2 and 3)
ks="2 3"
[ "${QMLA_TEST_SMALL:-0}" = 1 ] && ks=2
for k in $ks; do
  expect 0 "mpirun -n $k" -- run $k "$QMLA" sweep "$C" -o mpi$k.h5 --threads 1
  containsF "$k MPI ranks; 0 items resumed" "rank count line -n $k"
  expect 0 "-n $k equals serial" -- h5same serial.h5 mpi$k.h5
  expect 0 "-n $k leaves no parts" -- bash -c "! ls mpi$k.h5.part-* 2>/dev/null"
done
expect 2 "existing output refused" -- run 2 "$QMLA" sweep "$C" -o mpi2.h5 --threads 1
containsF "mpi2.h5 exists: an MPI sweep writes a new results file" "refusal message"

mkdir f.h5.part-1-of-2   # rank 1 cannot write its part
expect 2 "failed rank fails the job" -- run 2 "$QMLA" sweep "$C" -o f.h5 --threads 1
containsF "qmla sweep (rank 1 of 2): error (EINVAL): f.h5.part-1-of-2" "rank's own message"
containsF "rank(s) 1 of 2 failed" "rank 0 names the failed rank"
expect 0 "no results file after a failure" -- test ! -e f.h5
expect 0 "rank 0's part kept" -- test -s f.h5.part-0-of-2
rmdir f.h5.part-1-of-2
expect 0 "rerun with -n 3 resumes" -- run 3 "$QMLA" sweep "$C" -o f.h5 --threads 1
containsF "3 MPI ranks; 6 items resumed" "resumed rank 0's 6 items"
expect 0 "resumed run equals serial" -- h5same serial.h5 f.h5
finish test_mpi
