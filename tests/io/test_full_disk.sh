#!/usr/bin/env bash
# tests/io/test_full_disk.sh — writing onto a nearly full filesystem (a 16 KiB
# tmpfs, mounted here; SKIP where mounting is not permitted): `qmla sweep`
# and `qmla synth` exit 2 naming the file and "No space left on device",
# leave no results/capture file and no temporary, never crash (no exit 139
# from HDF5's exit handler), and the sweep keeps its journal so that a rerun
# on a roomy disk completes it.
set -u
. "$(dirname "$0")/../support/cli_lib.sh"
need_python
[ "$(id -u)" = 0 ] || { echo "SKIP: mounting a tmpfs needs root"; exit 77; }
mnt="$work/small"
mkdir -p "$mnt"
mount -t tmpfs -o size=16k tmpfs "$mnt" 2>/dev/null || { echo "SKIP: cannot mount a tmpfs here"; exit 77; }
trap 'umount "$mnt" 2>/dev/null; rm -rf "$work"' EXIT

"$QMLA" synth -o "$work/tiny.h5" --seed 3 --tokens 48 --seqs 3 >/dev/null || bad "synth"
"$QMLA" sweep "$work/tiny.h5" -o "$work/clean.h5" >/dev/null 2>&1 || bad "clean sweep"

# the journal fits, the 20 KB results file does not
expect 2 "sweep onto a full disk" -- "$QMLA" sweep "$work/tiny.h5" -o "$mnt/r.h5"
contains "No space left on device" "full disk: cause named"
contains "$mnt/r.h5" "full disk: file named"
[ ! -e "$mnt/r.h5" ] && ok || bad "full disk: a results file exists"
if ls "$mnt"/r.h5.tmp.* >/dev/null 2>&1; then bad "full disk: temporary left"; else ok; fi
[ -s "$mnt/r.h5.journal" ] && ok || bad "full disk: journal not kept"
grep -c '^R ' "$mnt/r.h5.journal" | grep -qx 24 && ok || bad "full disk: journal lacks the 24 finished rows"
# move the journal to a roomy disk: the rerun resumes every item
cp "$mnt/r.h5.journal" "$work/moved.h5.journal"
expect 0 "resume from the journal kept on the full disk" -- "$QMLA" sweep "$work/tiny.h5" -o "$work/moved.h5"
contains "resumed" "resume summary"
expect 0 "... equals the clean run" -- "$PY" "$ROOT/tests/support/results_same.py" "$work/clean.h5" "$work/moved.h5"

expect 2 "synth onto a full disk" -- "$QMLA" synth -o "$mnt/cap.h5" --seed 3 --tokens 48 --seqs 3
contains "No space left on device" "synth full disk: cause named"
[ ! -e "$mnt/cap.h5" ] && ok || bad "synth full disk: a capture file exists"
if ls "$mnt"/cap.h5.tmp* >/dev/null 2>&1; then bad "synth full disk: temporary left"; else ok; fi

finish test_full_disk
