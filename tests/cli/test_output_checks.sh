#!/usr/bin/env bash
# tests/cli/test_output_checks.sh — the outputs of `qmla export`, `qmla merge`,
# `qmla sweep --shard`, `qmla figures` and the --text inputs of `qmla ppl`
# checked like every other writer's and reader's (issue 25, third round).
# Each block says what the code before the fix did ("before:").
#  1. export -o: refused when it is the results file itself, an HDF5 file
#     (capture, results, transforms), a folder, a device or a FIFO; written
#     to a temporary renamed into place, so that a failed write (ENOSPC
#     injected with strace) leaves an existing file as it was;
#  2. merge -o a capture or transforms file is refused, the file unchanged;
#  3. sweep --shard I/N -o the part file of another shard is refused naming
#     both shards (--force replaces it); a full results file written over a
#     part drops /part;
#  4. figures on a full disk names the cause and leaves no empty data file
#     (a 16 KiB tmpfs; SKIP of that block where mounting is not permitted);
#  5. ppl --text FIFO is refused naming it (it blocked).
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT, QMLA_PYTHON.
set -u
. "$(dirname "$0")/../support/cli_lib.sh"
need_python
cd "$work" || exit 1
# a command that may block (a FIFO): killed after 20 s, exit 124
t20() { timeout 20 "$@"; }
is_h5() { "$PY" -c 'import sys, h5py; h5py.File(sys.argv[1], "r")' "$1" 2>/dev/null; }

"$QMLA" synth -o "$work/cap.h5" --seed 3 --tokens 16 --seqs 2 >/dev/null || bad "synth"
"$QMLA" sweep "$work/cap.h5" -o "$work/R.h5" --threads 1 >/dev/null 2>&1 || bad "sweep"
cp "$work/cap.h5" "$work/cap0.h5"
cp "$work/R.h5" "$work/R0.h5"
# each block starts from the pristine files (an unfixed binary destroys them)
fresh() { cp "$work/cap0.h5" "$work/cap.h5"; cp "$work/R0.h5" "$work/R.h5"; cp "$work/tf0.h5" "$work/tf.h5"; }
"$PY" - "$work/tf.h5" <<'EOF' || bad "h5py transforms stand-in"
import sys, h5py
with h5py.File(sys.argv[1], "w") as f:
    f.attrs["format"] = "qmla-transforms"
EOF
cp "$work/tf.h5" "$work/tf0.h5"
fresh

# --- 1. export -o ---------------------------------------------------------------
# before: exit 0, R.h5 replaced by its own TSV
expect 2 "export R.h5 -o R.h5" -- t20 "$QMLA" export "$work/R.h5" -o "$work/R.h5"
contains "R.h5: output file (-o): expected a file other than the input" "export -o input: named"
is_h5 "$work/R.h5" && ok || bad "export -o input: the results file was replaced"
# before: exit 0, the capture turned into text
expect 2 "export -o a capture" -- t20 "$QMLA" export "$work/R.h5" -o "$work/cap.h5"
containsF 'cap.h5: output file (-o): expected a text file or a new name, found an HDF5 file (format "qmla-capture")' "export -o capture: named"
cmp -s "$work/cap.h5" "$work/cap0.h5" && ok || bad "export -o capture: the capture changed"
expect 2 "export -o a transforms file" -- t20 "$QMLA" export "$work/R.h5" -o "$work/tf.h5"
containsF 'format "qmla-transforms"' "export -o transforms: format named"
cmp -s "$work/tf.h5" "$work/tf0.h5" && ok || bad "export -o transforms: the file changed"
cp "$work/R.h5" "$work/R2.h5"
expect 2 "export -o another results file" -- t20 "$QMLA" export "$work/R.h5" -o "$work/R2.h5"
is_h5 "$work/R2.h5" && ok || bad "export -o results: the other results file was replaced"
mkdir "$work/adir"
expect 2 "export -o a folder" -- t20 "$QMLA" export "$work/R.h5" -o "$work/adir"
contains "adir: output file (-o): expected a regular file or a new name, found a directory" "export -o folder: named"
mkfifo "$work/fifo"
expect 2 "export -o a FIFO" -- t20 "$QMLA" export "$work/R.h5" -o "$work/fifo"
contains "found a FIFO" "export -o FIFO: named"
if [ "$(id -u)" = 0 ] && mknod "$work/full" c 1 7 2>/dev/null; then
  # before (as root): /dev/full's node deleted (the write failed, then unlink)
  expect 2 "export -o a device" -- t20 "$QMLA" export "$work/R.h5" -o "$work/full"
  contains "full: output file (-o): expected a regular file or a new name, found a character device" "export -o device: named"
  [ -c "$work/full" ] && ok || bad "export -o device: the device node is gone"
else
  echo "SKIP (device part): mknod needs root"
fi
fresh
expect 0 "export -o a new file" -- "$QMLA" export "$work/R.h5" -o "$work/out.tsv"
"$QMLA" export "$work/R.h5" >"$work/stdout.tsv" 2>/dev/null
cmp -s "$work/out.tsv" "$work/stdout.tsv" && ok || bad "export -o differs from standard output"
expect 0 "export -o replaces an earlier export" -- "$QMLA" export "$work/R.h5" --table summary -o "$work/out.tsv"
grep -q "table summary" "$work/out.tsv" && ok || bad "export -o: the earlier text not replaced"
cp "$work/out.tsv" "$work/out0.tsv"
if command -v strace >/dev/null; then
  # the first write() is the file's: ENOSPC there. before: exit 2, "write
  # failed" without the cause, and the existing out.tsv deleted
  expect 2 "export -o with ENOSPC on the write" -- env ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
    strace -f -o /dev/null -e trace=write -e inject=write:error=ENOSPC:when=1 \
    "$QMLA" export "$work/R.h5" -o "$work/out.tsv"
  contains "out.tsv: cannot write .*No space left on device" "export ENOSPC: file and cause named"
  cmp -s "$work/out.tsv" "$work/out0.tsv" && ok || bad "export ENOSPC: the existing file was changed or deleted"
  if ls "$work"/out.tsv.tmp.* >/dev/null 2>&1; then bad "export ENOSPC: temporary left"; else ok; fi
  expect 2 "export -o with EIO on the rename" -- env ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
    strace -f -o /dev/null -e trace=rename -e inject=rename:error=EIO:when=1 \
    "$QMLA" export "$work/R.h5" -o "$work/out.tsv"
  cmp -s "$work/out.tsv" "$work/out0.tsv" && ok || bad "export rename EIO: the existing file was changed"
else
  echo "SKIP (write faults): strace not installed"
fi

fresh
# --- 2. merge -o a file of another kind -------------------------------------------
"$QMLA" sweep "$work/cap.h5" -o "$work/p0.h5" --shard 0/2 --threads 1 >/dev/null 2>&1 || bad "shard 0/2"
"$QMLA" sweep "$work/cap.h5" -o "$work/p1.h5" --shard 1/2 --threads 1 >/dev/null 2>&1 || bad "shard 1/2"
# before: exit 0, the capture (and the transforms file) replaced by results
expect 2 "merge -o a capture" -- "$QMLA" merge "$work/p0.h5" "$work/p1.h5" -o "$work/cap.h5"
containsF 'cap.h5: exists and is of format "qmla-capture"' "merge -o capture: named"
cmp -s "$work/cap.h5" "$work/cap0.h5" && ok || bad "merge -o capture: the capture changed"
expect 2 "merge -o a transforms file" -- "$QMLA" merge "$work/p0.h5" "$work/p1.h5" -o "$work/tf.h5"
containsF 'format "qmla-transforms"' "merge -o transforms: named"
cmp -s "$work/tf.h5" "$work/tf0.h5" && ok || bad "merge -o transforms: the file changed"
expect 0 "merge -o an earlier results file" -- "$QMLA" merge "$work/p0.h5" "$work/p1.h5" -o "$work/R2.h5"

fresh
# --- 3. sweep --shard over another shard's part; /part of a full file ------------
cp "$work/p0.h5" "$work/p0keep.h5"
# before: exit 0, shard 0's part replaced by shard 1's
expect 2 "sweep --shard 1/2 -o shard 0's part" -- "$QMLA" sweep "$work/cap.h5" -o "$work/p0.h5" --shard 1/2 --threads 1
containsF "p0.h5: expected the part file of shard 1/2 (this sweep's --shard) or a new name, found the part file of shard 0/2" "other shard's part: both shards named"
cmp -s "$work/p0.h5" "$work/p0keep.h5" && ok || bad "other shard's part: the part changed"
expect 0 "... with --force it is replaced" -- "$QMLA" sweep "$work/cap.h5" -o "$work/p0.h5" --shard 1/2 --threads 1 --force
"$PY" -c 'import sys, h5py; assert int(h5py.File(sys.argv[1])["part"].attrs["shard"]) == 1' "$work/p0.h5" && ok ||
  bad "--force: the part is not shard 1's"
expect 0 "the same shard's part is resumed" -- "$QMLA" sweep "$work/cap.h5" -o "$work/p1.h5" --shard 1/2 --threads 1
# before: the full results file kept the part's /part (merge then took it for a part)
cp "$work/p0keep.h5" "$work/full.h5"
expect 0 "a full sweep over a part" -- "$QMLA" sweep "$work/cap.h5" -o "$work/full.h5" --threads 1
"$PY" -c 'import sys, h5py; assert "part" not in h5py.File(sys.argv[1])' "$work/full.h5" && ok ||
  bad "full results over a part: /part kept"
expect 0 "... equals the direct full sweep" -- "$PY" "$ROOT/tests/support/results_same.py" "$work/R.h5" "$work/full.h5"

fresh
# --- 4. figures on a full disk ----------------------------------------------------
mnt="$work/small"
mkdir -p "$mnt"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=16k tmpfs "$mnt" 2>/dev/null; then
  cleanup_extra() { umount "$mnt" 2>/dev/null; }
  # before: "inputs.gp: write failed" (no cause) and an empty inputs.gp left
  expect 2 "figures onto a full disk" -- "$QMLA" figures "$work/R.h5" -o "$mnt/F"
  contains "No space left on device" "figures full disk: cause named"
  contains "$mnt/F/data/" "figures full disk: file named"
  empty=$(find "$mnt" -type f -size 0 \( -name '*.tsv' -o -name '*.gp' \) | tr '\n' ' ')
  [ -z "$empty" ] && ok || bad "figures full disk: empty data files left: $empty"
  [ -z "$(find "$mnt" -name '*.tmp.*')" ] && ok || bad "figures full disk: temporaries left"
  umount "$mnt"
else
  echo "SKIP (figures full-disk part): cannot mount a small tmpfs here"
fi

fresh
# --- 5. ppl --text FIFO -------------------------------------------------------------
# before: blocked in open() waiting for a writer (killed by the timeout: 124)
expect 2 "ppl --text FIFO" -- t20 "$QMLA" ppl "$ROOT/models/tiny-mla" --text "$work/fifo" --tokens 64 -o "$work/ppl.h5"
containsF "fifo: --text: expected a regular file (plain or gzip text), found a FIFO (named pipe)" "ppl --text FIFO: named"
[ ! -e "$work/ppl.h5" ] && ok || bad "ppl --text FIFO: results written"
expect 2 "ppl --text a folder" -- t20 "$QMLA" ppl "$ROOT/models/tiny-mla" --text "$work/adir" --tokens 64 -o "$work/ppl.h5"
containsF "adir: --text: expected a regular file (plain or gzip text), found a directory" "ppl --text folder: named"

finish test_output_checks
