#!/usr/bin/env bash
# scripts/device-copy.sh DEST — copy this checkout's tracked files (without
# the large data/, models/, plots/ and experiments/ folders, which the
# CUDA build and scripts/device-decode.sh do not need) into DEST for a run
# on the accelerator machine, replacing what DEST held (except DEST/.deb,
# the carried packages of scripts/device-prep.sh), and record the commit in
# DEST/.qmla-commit so that results built there name it
# (scripts/commit-id.sh).
set -euo pipefail
dest=${1:?usage: scripts/device-copy.sh DEST}
cd "$(dirname "$0")/.."
mkdir -p "$dest"
find "$dest" -mindepth 1 -maxdepth 1 ! -name .deb -exec rm -rf {} +
git ls-files -z | grep -zvE '^(data|models|plots|experiments)/' | tar --null -T - -cf - | tar -xf - -C "$dest"
# tests/meson.build names this one file of experiments/
mkdir -p "$dest/experiments/capture"
cp experiments/capture/test_capture.py "$dest/experiments/capture/"
git describe --always --dirty --abbrev=40 --match=NONE >"$dest/.qmla-commit"
echo "copied $(git ls-files | wc -l) tracked files to $dest ($(cat "$dest/.qmla-commit"))"
