#!/usr/bin/env bash
# tests/capture/test_write_faults.sh — the capture writer (`qmla synth`) under write
# faults: it must be atomic and fault-safe.
#
# With strace's fault injection, every write(2) and every pwrite64(2) the run
# makes fails in turn with ENOSPC (N = 1 .. the number of such calls a clean
# run makes, plus one that never comes), then the fsync(2) and the rename(2)
# of the temporary file fail. For each run:
#   - the injection hit the capture: exit status 2, a message naming the file
#     and the cause, no output file, no leftover PATH.tmp.*;
#   - it hit standard output (the closing "wrote ..." line): exit status 2
#     with a message naming standard output; the capture, already renamed
#     into place, must be valid;
#   - it did not hit: exit status 0 and a valid file (`qmla check` passes).
# A fault never leaves an existing destination changed (--force over an old
# file), and never crashes (the old writer died with SIGSEGV, exit 139, in
# HDF5's exit handler after a failed close).
# Then, where this container may mount a tmpfs, a nearly full small file
# system: ENOSPC for real, then success once there is room.
#
# Needs strace (exit 77 = skipped without it, or where ptrace is refused).
set -u
Q=${QMLA_BIN:?QMLA_BIN: path of the qmla program}
if ! command -v strace >/dev/null 2>&1; then
    echo "SKIP: strace is not installed (scripts/setup.sh installs it)"
    exit 77
fi
if ! strace -f -qq -o /dev/null true >/dev/null 2>&1; then
    echo "SKIP: strace cannot trace here (ptrace not permitted)"
    exit 77
fi

# LeakSanitizer cannot run under ptrace: off for the traced runs of a
# sanitizer build (the other tests, and the untraced runs below, keep it).
traced_asan="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

dir=$(mktemp -d "${TMPDIR:-/tmp}/qmla-write-faults-XXXXXX")
mnt=""
cleanup() {
    if [ -n "$mnt" ]; then umount "$mnt" 2>/dev/null; rmdir "$mnt" 2>/dev/null; fi
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 143' TERM   # a timeout still unmounts and cleans up
trap 'exit 130' INT

pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
expect() { # expect COND-STATUS MESSAGE
    if [ "$1" = 0 ]; then ok; else bad "$2"; fi
}

# no PATH.tmp.* left next to PATH
no_tmp() {
    local left
    left=$(ls -d "$1".tmp* 2>/dev/null | tr '\n' ' ')
    [ -z "$left" ] || { bad "$2: temporary files left: $left"; return 1; }
    ok
}

valid() { # valid FILE WHAT
    if "$Q" check "$1" >"$dir/check.out" 2>&1; then ok; else
        bad "$2: qmla check fails on $1: $(tail -n 2 "$dir/check.out" | tr '\n' ' ')"
    fi
}

# run_fault NAME INJECT OUT EXTRA-SYNTH-ARGS...: one synth run under strace
# with -e inject=INJECT; judges the outcome as described above.
run_fault() {
    local name=$1 inject=$2 out=$3
    shift 3
    rm -f "$out" "$out".tmp*
    ASAN_OPTIONS=$traced_asan \
    strace -f -qq -o "$dir/strace.log" -e trace=write,pwrite64,fsync,rename \
        -e inject="$inject" "$Q" synth -o "$out" "$@" \
        >"$dir/out.txt" 2>"$dir/err.txt"
    local rc=$? msg
    msg=$(tr '\n' ' ' <"$dir/err.txt")
    local hit
    hit=$(grep 'INJECTED' "$dir/strace.log" | head -n 1)
    if [ -z "$hit" ]; then
        expect $([ $rc = 0 ] && echo 0 || echo 1) "$name: not injected, exit $rc (expected 0): $msg"
        [ -f "$out" ] && valid "$out" "$name" || bad "$name: not injected, but no $out"
    elif echo "$hit" | grep -qE '^[0-9]+ +write\(1,'; then
        expect $([ $rc = 2 ] && echo 0 || echo 1) "$name: standard output failed, exit $rc (expected 2)"
        expect $(echo "$msg" | grep -q 'standard output' && echo 0 || echo 1) \
            "$name: message does not name standard output: $msg"
        [ -f "$out" ] && valid "$out" "$name" || bad "$name: $out missing after a stdout fault"
    else
        expect $([ $rc = 2 ] && echo 0 || echo 1) "$name: fault on the capture, exit $rc (expected 2): $msg"
        local cause
        case $inject in
            *ENOSPC*) cause='No space left on device' ;;
            *EIO*) cause='Input/output error' ;;
            *EACCES*) cause='Permission denied' ;;
        esac
        expect $(echo "$msg" | grep -qF "$out" && echo "$msg" | grep -qF "$cause" && echo 0 || echo 1) \
            "$name: message does not name $out and \"$cause\": $msg"
        expect $([ ! -e "$out" ] && echo 0 || echo 1) "$name: $out exists after a failed write"
    fi
    no_tmp "$out" "$name"
}

# count_calls SYSCALL ARGS...: how many SYSCALL calls a clean synth run makes
count_calls() {
    local sc=$1
    shift
    rm -f "$dir/count.h5"
    ASAN_OPTIONS=$traced_asan \
    strace -f -qq -o "$dir/count.log" -e trace=write,pwrite64,fsync,rename \
        "$Q" synth -o "$dir/count.h5" "$@" >/dev/null 2>&1
    grep -cE "^[0-9]+ +$sc\(" "$dir/count.log"
}

variants=("--seqs 2 --tokens 16 --layers 2 --cells 2"
          "--seqs 2 --tokens 16 --layers 2 --cells 2 --f16 --gzip 6")
for v in "${variants[@]}"; do
    # shellcheck disable=SC2206
    args=($v)
    for sc in write pwrite64; do
        n=$(count_calls $sc "${args[@]}")
        echo "synth $v: $n $sc calls in a clean run"
        for N in $(seq 1 $((n + 1))); do
            run_fault "[$v] $sc ENOSPC at call $N" "$sc:error=ENOSPC:when=$N" \
                "$dir/cap.h5" "${args[@]}"
        done
    done
    run_fault "[$v] fsync EIO" "fsync:error=EIO:when=1" "$dir/cap.h5" "${args[@]}"
    run_fault "[$v] rename EACCES" "rename:error=EACCES:when=1" "$dir/cap.h5" "${args[@]}"
done

# an existing destination is left as it was when the new capture fails
printf 'old contents\n' >"$dir/old.h5"
ASAN_OPTIONS=$traced_asan \
strace -f -qq -o /dev/null -e trace=write -e inject=write:error=ENOSPC:when=1 \
    "$Q" synth -o "$dir/old.h5" --force --seqs 1 --tokens 8 >/dev/null 2>&1
rc=$?
expect $([ $rc = 2 ] && echo 0 || echo 1) "--force over an old file, write fault: exit $rc (expected 2)"
printf 'old contents\n' >"$dir/old.expected"
expect $(cmp -s "$dir/old.h5" "$dir/old.expected" && echo 0 || echo 1) \
    "--force over an old file, write fault: the old file changed"
no_tmp "$dir/old.h5" "--force over an old file"

# a nearly full small file system (tmpfs; needs root and mount permission)
mnt=$(mktemp -d "${TMPDIR:-/tmp}/qmla-tmpfs-XXXXXX")
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=1m tmpfs "$mnt" 2>"$dir/mount.err"; then
    # leave about 16 KiB free: far less than the capture
    dd if=/dev/zero of="$mnt/filler" bs=4k count=252 status=none 2>/dev/null
    "$Q" synth -o "$mnt/cap.h5" --seqs 2 --tokens 16 >"$dir/out.txt" 2>"$dir/err.txt"
    rc=$?
    msg=$(tr '\n' ' ' <"$dir/err.txt")
    expect $([ $rc = 2 ] && echo 0 || echo 1) "tmpfs nearly full: exit $rc (expected 2): $msg"
    expect $(echo "$msg" | grep -qF "$mnt/cap.h5" && echo "$msg" | grep -q 'No space left on device' && echo 0 || echo 1) \
        "tmpfs nearly full: message does not name the file and ENOSPC: $msg"
    expect $([ ! -e "$mnt/cap.h5" ] && echo 0 || echo 1) "tmpfs nearly full: $mnt/cap.h5 exists"
    no_tmp "$mnt/cap.h5" "tmpfs nearly full"
    rm -f "$mnt/filler"
    "$Q" synth -o "$mnt/cap.h5" --seqs 2 --tokens 16 >/dev/null 2>"$dir/err.txt"
    rc=$?
    expect $([ $rc = 0 ] && echo 0 || echo 1) "tmpfs with room: exit $rc: $(cat "$dir/err.txt")"
    [ -f "$mnt/cap.h5" ] && valid "$mnt/cap.h5" "tmpfs with room"
    no_tmp "$mnt/cap.h5" "tmpfs with room"
else
    echo "SKIP (tmpfs part): cannot mount a small tmpfs here ($( [ "$(id -u)" = 0 ] && tr '\n' ' ' <"$dir/mount.err" || echo "not root")); the strace faults above cover ENOSPC"
    rmdir "$mnt" 2>/dev/null
    mnt=""
fi

echo "test_write_faults: $pass passed, $fail failed"
[ "$fail" = 0 ]
