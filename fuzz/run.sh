#!/bin/sh
# fuzz/run.sh SECONDS [BUILD_DIR] — build the capture-reader fuzzer (clang,
# -Dfuzz=true) if needed and run it for SECONDS. The corpus grows in
# BUILD_DIR/fuzz-corpus (seeded from tests/fuzz-regress/), crashing inputs
# land in BUILD_DIR/fuzz-artifacts/. Exits non-zero on a crash.
# QMLA_FUZZ_WORKERS=N (default 1) fuzzes in N processes for the same
# SECONDS of wall time (libFuzzer's -fork=N; the test command uses 2).
# Example: timeout 660 fuzz/run.sh 600 > /tmp/fuzz.log 2>&1 &
set -eu
secs=${1:?usage: fuzz/run.sh SECONDS [BUILD_DIR]}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${2:-$root/build-fuzz}
case $build in /*) ;; *) build=$(pwd)/$build ;; esac
if [ ! -f "$build/build.ninja" ]; then
    (cd "$root" && CC=clang meson setup "$build" -Dfuzz=true \
        -Db_lundef=false -Dcuda=disabled)
fi
ninja -C "$build" fuzz/fuzz_capture
mkdir -p "$build/fuzz-corpus" "$build/fuzz-artifacts"
workers=${QMLA_FUZZ_WORKERS:-1}
fork=""
[ "$workers" -gt 1 ] && fork="-fork=$workers"
exec "$build/fuzz/fuzz_capture" $fork \
    -max_total_time="$secs" -max_len=4096 -len_control=0 -timeout=20 \
    -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/" \
    "$build/fuzz-corpus" "$root/tests/fuzz-regress"
