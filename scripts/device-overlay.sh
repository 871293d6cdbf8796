#!/usr/bin/env bash
# scripts/device-overlay.sh DEST [BASE] — for a device call from a worktree
# whose sent checkout (the main checkout, which the run tool copies) is
# already close to the 64 MiB carry limit: put only the files this branch
# changed against BASE (default main) into DEST/o, with the GSL / jansson
# packages (.deb, scripts/device-prep.sh) and DEST/o/.qmla-commit (the
# commit, for the results' provenance; scripts/commit-id.sh). DEST must be
# an ignored folder of the sent checkout (e.g. /work/main/.device/dh); carry
# it and, on the device, lay the overlay over a copy of the sent tree:
#   mkdir -p /tmp/w && tar --exclude=./.device --exclude=./.git --exclude='./build*' -cf - . |
#     tar -xf - -C /tmp/w && cp -r .device/dh/o/. /tmp/w/ && cd /tmp/w &&
#     OUT=$OUT bash scripts/device-decode-hopper.sh tests sanitize quick ncu pack
# (that assumes the sent checkout is at BASE; a deleted file is not removed).
set -euo pipefail
dest=${1:?usage: scripts/device-overlay.sh DEST [BASE]}
base=${2:-main}
cd "$(dirname "$0")/.."
rm -rf "$dest/o"
mkdir -p "$dest/o"
git diff --name-only --diff-filter=d "$base" HEAD | tar -cf - -T - | tar -xf - -C "$dest/o"
[ -d .deb ] && cp -r .deb "$dest/o/"
git describe --always --dirty --abbrev=40 --match=NONE >"$dest/o/.qmla-commit"
echo "overlay of $(git diff --name-only --diff-filter=d "$base" HEAD | wc -l) files ($(cat "$dest/o/.qmla-commit")) in $dest/o, $(du -sh "$dest" | cut -f1)"
