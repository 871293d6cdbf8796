#!/usr/bin/env bash
# test_op_mpi.sh — `mpirun -n K qmla intervene|predict` (rank r computes
# shard r of K, rank 0 merges: cli/mpi_sweep.c cli_mpi_op_shards) equals the
# one-process run in every dataset and attribute but the provenance
# (tests/support/h5group_same.sh), for K = 2 and 3, and leaves no parts; a
# failed rank fails the job naming it, keeps the other rank's part and the
# failed rank's journal, and a rerun with another K (3) resumes them (a
# doctored value in the earlier part reaches the merged file) and again
# equals the one-process run, removing every part and journal; --merge and
# --shard are refused under mpirun.
# SKIP (77) when qmla was built without MPI.
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT, QMLA_MPI (1 when built).
set -uo pipefail
[ "${QMLA_MPI:-0}" = 1 ] && command -v mpirun >/dev/null || { echo "SKIP: built without MPI"; exit 77; }
. "$(dirname "$0")/../support/cli_lib.sh"
. "$(dirname "$0")/../support/h5group_same.sh"
cd "$work"
# 2 layers x 2 cells x 3 sequences of 64 tokens (test_op_shard.sh says why synthetic)
C=$work/syn.h5
expect 0 "synthetic capture" -- "$QMLA" synth -o "$C" --shape tiny --layers 2 --cells 2 --seqs 3 --tokens 64 --threads 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated \
       OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export LSAN_OPTIONS="suppressions=$ROOT/tests/support/lsan-mpi.supp:print_suppressions=0:fast_unwind_on_malloc=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
run() { mpirun --oversubscribe -n "$@"; }
IV="--reps 2 --bootstrap 100"

expect 0 "intervene, one process" -- "$QMLA" intervene "$C" -o iw.h5 $IV --threads 1
expect 0 "predict, one process" -- "$QMLA" predict "$C" -o pw.h5 --threads 1
ks="2 3"
[ "${QMLA_TEST_SMALL:-0}" = 1 ] && ks=2
for k in $ks; do
  expect 0 "mpirun -n $k intervene" -- run $k "$QMLA" intervene "$C" -o iv$k.h5 $IV --threads 1
  containsF "($k MPI ranks, one shard each, merged by rank 0)" "rank line -n $k"
  expect 0 "-n $k intervene equals one process" -- h5group_same iw.h5 iv$k.h5 interventions
  expect 0 "-n $k leaves no parts" -- bash -c "! ls iv$k.h5.* 2>/dev/null"
done
expect 0 "mpirun -n 2 predict" -- run 2 "$QMLA" predict "$C" -o p2.h5 --threads 1
expect 0 "-n 2 predict equals one process" -- h5group_same pw.h5 p2.h5 predict

mkdir f.h5.interventions.part-1-of-2   # rank 1 cannot write its part
expect 2 "a failed rank fails the job" -- run 2 "$QMLA" intervene "$C" -o f.h5 $IV --threads 1
containsF "qmla intervene (rank 1 of 2): error" "the rank's own message"
containsF "rank(s) 1 of 2 failed" "rank 0 names it"
expect 0 "rank 0's part kept" -- test -s f.h5.interventions.part-0-of-2
expect 0 "rank 1's journal kept" -- test -s f.h5.interventions.part-1-of-2.interventions.journal
rmdir f.h5.interventions.part-1-of-2
expect 0 "rerun with -n 3 resumes" -- run 3 "$QMLA" intervene "$C" -o f.h5 $IV --threads 1
expect 0 "and equals one process" -- h5group_same iw.h5 f.h5 interventions
expect 0 "the merge removed the parts and journals of both K" -- bash -c "! ls f.h5.* 2>/dev/null"
# proof that a rerun takes the items of an earlier run's part (any K): a
# doctored value in rank 0's part (valid checksum) reaches the merged file
mkdir d.h5.interventions.part-1-of-2
expect 2 "a failed rank again" -- run 2 "$QMLA" intervene "$C" -o d.h5 $IV --threads 1
"$PY" - d.h5.interventions.part-0-of-2 <<'PYEOF'
import sys
path = sys.argv[1]
lines = open(path).read().split("\n")
def fnv(b):
    h = 1469598103934665603
    for c in b:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h
# records after the header: [P, trailer, I, R, E, trailer, ...]; item 0 is the first I
i = next(k for k, l in enumerate(lines) if l.startswith("I 0 "))
j = next(k for k in range(i, len(lines)) if lines[k].startswith("#"))
f = lines[i].split(" ")
f[6] = (1234.5).hex()  # g_jvp content of plan item 0
lines[i] = " ".join(f)
rec = ("\n".join(lines[i:j]) + "\n").encode()
lines[j] = "#%016x %d" % (fnv(rec), len(rec))
open(path, "w").write("\n".join(lines))
PYEOF
rmdir d.h5.interventions.part-1-of-2
expect 0 "rerun with -n 3 after the doctoring" -- run 3 "$QMLA" intervene "$C" -o d.h5 $IV --threads 1
expect 0 "the doctored value came from the earlier part" -- bash -c "h5dump -m %a -d /interventions/g_jvp_content d.h5 | grep -q '(0): 0x1.34a'"
expect 2 "--merge under mpirun refused" -- run 2 "$QMLA" intervene "$C" f.h5 --merge -o g.h5 $IV
containsF "--merge under mpirun" "merge message"
expect 2 "--shard under mpirun refused" -- run 2 "$QMLA" predict "$C" -o g.h5 --shard 0/2
containsF "--shard and mpirun do not combine" "shard message"
finish test_op_mpi
