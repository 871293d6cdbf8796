#!/usr/bin/env bash
# experiments/cluster/submit-array.sh — submit a sharded sweep as a Slurm job
# array of N tasks and its merge, which runs only when every task succeeded.
#   bash experiments/cluster/submit-array.sh N CAPTURE.h5 PARTS_DIR RESULTS.h5 [sweep options]
set -euo pipefail
n=${1:?usage: submit-array.sh N CAPTURE.h5 PARTS_DIR RESULTS.h5 [options]}
cap=$2 parts=$3 out=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
array=$(sbatch --parsable --array="0-$((n - 1))" "$here/sweep-array.sbatch" "$cap" "$parts" "$@")
merge=$(sbatch --parsable --dependency="afterok:$array" "$here/merge.sbatch" "$parts" "$out")
echo "array job $array ($n shards), merge job $merge -> $out"
