#!/usr/bin/env bash
# scripts/meson-setup.sh DIR [MESON ARGS...] — `meson setup DIR ARGS` quietly,
# unless it fails: then the end of what meson printed (its ERROR line names
# the meson.build line and what was not found) goes to stderr, and the exit
# status is non-zero. Used by scripts/setup.sh and scripts/run-tests.sh.
set -uo pipefail
dir=${1:?usage: scripts/meson-setup.sh DIR [MESON ARGS...]}
shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! meson setup "$dir" "$@" >"$log" 2>&1; then
  tail -n 25 "$log" >&2
  echo "setup: meson setup $dir failed (whole log: $dir/meson-logs/meson-log.txt)" >&2
  exit 1
fi
