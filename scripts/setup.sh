#!/usr/bin/env bash
# scripts/setup.sh — install what is missing (Debian/Ubuntu packages) and
# build qmla into build/ (release). Idempotent; used by the two README
# commands and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(gcc pkg-config meson ninja-build libhdf5-dev hdf5-tools libgsl-dev
      libopenblas-dev libssl-dev python3 python3-numpy python3-h5py gnuplot-nox)
[ "${QMLA_WITH_FUZZ:-0}" = 1 ] && pkgs+=(clang libclang-rt-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ! -f build/build.ninja ]; then
  meson setup build --buildtype=release >/dev/null
fi
ninja -C build
