# tests/support/h5group_same.sh — sourced by the operator shard tests:
#   h5group_same A.h5 B.h5 GROUP   exit 0 when GROUP of two results files is
#       the same bit for bit (scripts/same-results.py: the same datasets,
#       shapes and types, every dataset's bytes, every attribute of the
#       datasets, the group and the root) except the run's own provenance
#       (command_line, created_utc, elapsed_s, threads) and the names in
#       H5GROUP_SKIP (space separated; e.g. engine_device, whose text names
#       the rule that chose the device); exit 1 naming what differs. One
#       Python process per comparison: the h5dump-per-dataset form of this
#       function spent most of test_op_shard's minutes in h5dump.
h5group_same() {
  local n args=()
  for n in ${H5GROUP_SKIP:-}; do args+=(--skip-attr "$n"); done
  "$PY" "$ROOT/scripts/same-results.py" "$1" "$2" "$3" "${args[@]}" >"$work/same.txt" 2>&1 ||
    { sed 's/^/h5group_same: /' "$work/same.txt" >&2; return 1; }
}
