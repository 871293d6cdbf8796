#!/usr/bin/env bash
# scripts/setup.sh — install what is missing (Debian/Ubuntu packages) and
# build qmla into build/ (release). Idempotent; used by the two README
# commands and by .ci/run. QMLA_WITH_FUZZ=1 adds clang and libFuzzer.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(gcc pkg-config meson ninja-build libhdf5-dev hdf5-tools libgsl-dev
      libopenblas-dev libssl-dev libjansson-dev python3 python3-numpy python3-h5py gnuplot-nox
      strace fonts-dejavu-core libopenmpi-dev openmpi-bin)
[ "${QMLA_WITH_FUZZ:-0}" = 1 ] && pkgs+=(clang)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for p in "${pkgs[@]}"; do installed "$p" || missing+=("$p"); done
# The browser of qmla report's test (tests/cli/test_report.sh): Debian's
# chromium-headless-shell (/usr/bin/chromium-headless-shell). Where the
# distribution has no such package (Ubuntu ships chromium as a snap) the
# test reports SKIP; a chromium already installed serves as well.
need_browser=0
if ! installed chromium-headless-shell && ! command -v chromium >/dev/null 2>&1; then
  need_browser=1
fi
# libFuzzer's runtime: libclang-rt-dev on Debian 12 / Ubuntu 24.04; older
# Ubuntu releases ship it inside libclang-common-<N>-dev (a clang dependency).
need_rt=0
if [ "${QMLA_WITH_FUZZ:-0}" = 1 ] && ! installed libclang-rt-dev &&
   ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  need_rt=1
fi
if [ ${#missing[@]} -gt 0 ] || [ $need_rt = 1 ] || [ $need_browser = 1 ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  if [ $need_rt = 1 ] && apt-cache show libclang-rt-dev >/dev/null 2>&1; then
    missing+=(libclang-rt-dev)
  fi
  if [ $need_browser = 1 ]; then
    if apt-cache show chromium-headless-shell >/dev/null 2>&1; then
      missing+=(chromium-headless-shell)
    else
      echo "setup: no chromium-headless-shell package here; test_report will SKIP" >&2
    fi
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi
if [ ! -f build/build.ninja ]; then
  bash scripts/meson-setup.sh build --buildtype=release
fi
# The compiler log goes to a file; shown only when the build fails.
if ! ninja -C build >build/last-build.log 2>&1; then
  tail -n 40 build/last-build.log >&2
  echo "setup: the build failed (whole log: build/last-build.log)" >&2
  exit 1
fi
echo "setup: qmla built in build/ (log: build/last-build.log)" >&2
