#!/usr/bin/env bash
# scripts/device-prep.sh — on a development machine: fetch the GSL and jansson packages
# that the accelerator machine lacks into .deb/ (git-ignored), so that a
# device call can carry them (carry [".deb"]) and build qmla there.
# In the device command, before `meson setup`, run:
#   source scripts/device-env.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deb
cd .deb
ls libgsl-dev_*.deb libgsl27_*.deb libgslcblas0_*.deb >/dev/null 2>&1 ||
  apt-get download libgsl-dev libgsl27 libgslcblas0
ls libjansson-dev_*.deb libjansson4_*.deb >/dev/null 2>&1 ||
  apt-get download libjansson-dev libjansson4
ls -l
