#!/usr/bin/env bash
# tests/engine/test_fuse_commit.sh — the final move of `qmla fuse -o FUSED_DIR`
# is one step (issue 25): the new folder is built beside FUSED_DIR and swapped
# in (renameat2 RENAME_EXCHANGE, or two renames where the kernel lacks it),
# so a failing rename leaves an existing folder exactly as it was, and a
# commit cut short is resolved by the next run into the old or the new
# complete folder. Faults are injected with strace (SKIP without it):
#  1. EIO into each rename() of a fuse into an existing folder, with
#     renameat2 made to fail with ENOSYS (the two-rename fallback): every run
#     exits 0 with the complete new folder or 2 with the folder unchanged
#     and nothing left beside it. before: a fault in the commit left
#     new model.safetensors beside the old config.json, exit 2;
#  2. EIO into the exchange (renameat2): exit 2, the folder unchanged;
#  3. a half commit (the rename of the new folder and its undo both fail):
#     exit 2 naming the old folder left beside it; the next run restores it
#     (a run that then fails leaves the old folder) or completes with the new;
#  4. the folders a killed run left (.NAME.qmla-fuse-old.PID without
#     FUSED_DIR, .NAME.qmla-fuse-new.PID) are named and resolved.
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT, QMLA_PYTHON.
set -u
. "$(dirname "$0")/../support/cli_lib.sh"
need_python
command -v strace >/dev/null || { echo "SKIP: strace not installed"; exit 77; }
M=$ROOT/models/tiny-mla
CAP=$ROOT/data/tiny-mla-default.h5
traced() { ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" strace -f -o /dev/null "$@"; }
# the folder's files and their checksums, one per line
snap() { (cd "$1" && find . -type f | sort | xargs md5sum); }
leftovers() { ls -A "$work/d" | grep -v '^Fold$' | tr '\n' ' '; }

expect 0 "learn quarot" -- "$QMLA" learn "$CAP" -o "$work/qr.h5" --method quarot --train-cells prose-s0
mkdir -p "$work/d"
# the old folder: another fused checkpoint's files and one of the user's
make_old() {
  rm -rf "$work/d/Fold"
  mkdir -p "$work/d/Fold"
  echo old-weights > "$work/d/Fold/model.safetensors"
  echo '{"old": true}' > "$work/d/Fold/config.json"
  echo keep > "$work/d/Fold/keep"
}
# what a successful fuse into it gives: the new files (their metadata holds
# the command line, -o included) and the user's file
expect 0 "fuse into d/Fold" -- "$QMLA" fuse "$M" --transforms "$work/qr.h5" -o "$work/d/Fold"
echo keep > "$work/d/Fold/keep"
cp -r "$work/d/Fold" "$work/want"
snap "$work/want" > "$work/new.snap"
make_old
snap "$work/d/Fold" > "$work/old.snap"

# --- 1. EIO into each rename(), the two-rename commit -----------------------------
n=1 hits=0
while :; do
  make_old
  traced -e trace=rename,renameat2 -e inject=renameat2:error=ENOSYS \
    -e inject=rename:error=EIO:when=$n \
    "$QMLA" fuse "$M" --transforms "$work/qr.h5" -o "$work/d/Fold" >"$work/out" 2>&1
  rc=$?
  if [ $rc = 0 ]; then
    snap "$work/d/Fold" | cmp -s - "$work/new.snap" && ok || bad "rename fault at call $n: exit 0 but not the new folder"
    break
  fi
  hits=$((hits + 1))
  [ $rc = 2 ] && ok || bad "rename fault at call $n: exit $rc, expected 2"
  grep -q "Input/output error" "$work/out" && ok || { bad "rename fault at call $n: cause not named"; tail -2 "$work/out" >&2; }
  if [ -d "$work/d/Fold" ] && snap "$work/d/Fold" | cmp -s - "$work/old.snap"; then ok
  else bad "rename fault at call $n: the existing folder changed: $(ls -A "$work/d/Fold" 2>&1 | tr '\n' ' ')"; fi
  [ -z "$(leftovers)" ] && ok || bad "rename fault at call $n: left beside it: $(leftovers)"
  n=$((n + 1))
  [ $n -gt 30 ] && { bad "more than 30 failing renames"; break; }
done
echo "  rename EIO: $hits injected calls" >&2
[ $hits -ge 2 ] && ok || bad "only $hits rename calls were hit"

# --- 2. EIO into the exchange ------------------------------------------------------
make_old
expect 2 "EIO into renameat2 (the exchange)" -- traced -e trace=renameat2 \
  -e inject=renameat2:error=EIO "$QMLA" fuse "$M" --transforms "$work/qr.h5" -o "$work/d/Fold"
snap "$work/d/Fold" | cmp -s - "$work/old.snap" && ok || bad "exchange fault: the folder changed"
[ -z "$(leftovers)" ] && ok || bad "exchange fault: left beside it: $(leftovers)"
make_old
expect 0 "fuse into an existing folder" -- "$QMLA" fuse "$M" --transforms "$work/qr.h5" -o "$work/d/Fold"
snap "$work/d/Fold" | cmp -s - "$work/new.snap" && ok || bad "fuse into an existing folder: not the new files plus keep"
[ -z "$(leftovers)" ] && ok || bad "fuse: left beside it: $(leftovers)"

# --- 3. a half commit ---------------------------------------------------------------
# the renames of a clean fallback run; the last one moves the new folder in
make_old
ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" strace -f -o "$work/trace" -e trace=rename,renameat2 \
  -e inject=renameat2:error=ENOSYS "$QMLA" fuse "$M" --transforms "$work/qr.h5" -o "$work/d/Fold" >/dev/null 2>&1
last=$(grep -c 'rename(' "$work/trace")
half() {
  make_old
  expect 2 "$1" -- traced -e trace=rename,renameat2 -e inject=renameat2:error=ENOSYS \
    -e inject=rename:error=EIO:when=$last..$((last + 1)) \
    "$QMLA" fuse "$M" --transforms "$work/qr.h5" -o "$work/d/Fold"
  contains "Fold.qmla-fuse-old\." "$1: the old folder named"
  contains "restores it" "$1: the way back named"
}
half "half commit (rename $last and its undo fail)"
cp "$work/qr.h5" "$work/other.h5"
"$PY" -c 'import h5py,sys; f=h5py.File(sys.argv[1],"a"); d=f["layers/2/content/gamma"]; d[5]=d[5]*1.01' "$work/other.h5"
expect 2 "the next run (not fusible) restores the old folder first" -- \
  "$QMLA" fuse "$M" --transforms "$work/other.h5" -o "$work/d/Fold"
contains "interrupted commit .* restored it" "recovery named"
snap "$work/d/Fold" | cmp -s - "$work/old.snap" && ok || bad "after the recovery: not the old folder"
[ -z "$(leftovers)" ] && ok || bad "after the recovery: left beside it: $(leftovers)"
half "half commit again"
expect 0 "the next run restores, then fuses" -- "$QMLA" fuse "$M" --transforms "$work/qr.h5" -o "$work/d/Fold"
contains "restored it" "recovery named"
snap "$work/d/Fold" | cmp -s - "$work/new.snap" && ok || bad "after recovery + fuse: not the new folder"
[ -z "$(leftovers)" ] && ok || bad "after recovery + fuse: left beside it: $(leftovers)"

# --- 4. what a killed run left --------------------------------------------------------
make_old
mv "$work/d/Fold" "$work/d/.Fold.qmla-fuse-old.999999999"
mkdir "$work/d/.Fold.qmla-fuse-new.999999999" && echo part > "$work/d/.Fold.qmla-fuse-new.999999999/model.safetensors"
expect 2 "a run after a kill (no --transforms file)" -- "$QMLA" fuse "$M" --transforms "$work/none.h5" -o "$work/d/Fold"
containsF ".Fold.qmla-fuse-old.999999999: restored it" "killed run: old folder named"
containsF "removed $work/d/.Fold.qmla-fuse-new.999999999" "killed run: staging folder named"
snap "$work/d/Fold" | cmp -s - "$work/old.snap" && ok || bad "after a kill: not the old folder"
[ -z "$(leftovers)" ] && ok || bad "after a kill: left beside it: $(leftovers)"
# a kill after the swap: the old copy beside the new folder is removed
cp -r "$work/want" "$work/d/.Fold.qmla-fuse-old.999999999"
expect 0 "a run after a kill past the swap" -- "$QMLA" fuse "$M" --transforms "$work/qr.h5" -o "$work/d/Fold"
containsF "removed $work/d/.Fold.qmla-fuse-old.999999999, the replaced old folder" "old copy named"
[ -z "$(leftovers)" ] && ok || bad "after a kill past the swap: left beside it: $(leftovers)"
finish test_fuse_commit
