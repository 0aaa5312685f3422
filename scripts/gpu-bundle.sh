#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Prepares an offline bundle for scripts/gpu-check.sh: the Debian 12 GStreamer packages (and
# what building gst-pi0 needs: -dev packages, gtest, json-glib, sentencepiece, pkgconf) with
# their dependency closure, plus meson and ninja wheels. Run it on a Debian 12 machine with
# package access; copy the folder to the GPU machine.
#
# usage: scripts/gpu-bundle.sh [OUT_DIR]          (default: ./gst-pi0-bundle)
# env:   EXTRA_PACKAGES="pkg ..."  more Debian packages to include (e.g. gstreamer1.0-plugins-bad
#        for nvh264dec); NO_WHEELS=1 to skip the meson/ninja wheels.
set -euo pipefail

out=${1:-gst-pi0-bundle}
mkdir -p "$out/debs" "$out/wheels"
out=$(cd "$out" && pwd)

packages=(
  libgstreamer1.0-0 libgstreamer1.0-dev
  libgstreamer-plugins-base1.0-0 libgstreamer-plugins-base1.0-dev
  libgstreamer-plugins-bad1.0-0 libgstreamer-plugins-bad1.0-dev
  gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-tools
  libgtest-dev libjson-glib-1.0-0 libjson-glib-dev
  libsentencepiece0 libsentencepiece-dev
  libglib2.0-dev libglib2.0-bin pkgconf libpkgconf3
  libgl-dev libegl-dev mesa-common-dev   # gst/cuda/cuda-gst.h includes cudaGL.h -> GL/gl.h
)
# shellcheck disable=SC2206
packages+=(${EXTRA_PACKAGES:-})

echo "resolving the dependency closure of ${#packages[@]} packages..."
mapfile -t closure < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
                         --no-breaks --no-replaces --no-enhances "${packages[@]}" |
                       grep -E '^[a-z0-9]' | sort -u)
# One `apt-cache show` for all of them: real packages (virtual ones print nothing) that are not
# part of the base system (Essential or Priority: required), which the GPU machine has in its
# own versions, nor the C library and toolchain runtime.
mapfile -t wanted < <(apt-cache show --no-all-versions "${closure[@]}" 2>/dev/null | awk '
  /^Package: / { p = $2; base = 0 }
  /^Essential: yes/ || /^Priority: required/ { base = 1 }
  /^$/ { if (p != "" && !base) print p; p = "" }
  END { if (p != "" && !base) print p }' |
  grep -vxE 'libc6|libc6-dev|libc-dev-bin|linux-libc-dev|libgcc-s1|gcc-[0-9]+-base|libstdc\+\+6|debconf.*' |
  sort -u)
echo "downloading ${#wanted[@]} packages into $out/debs"
(cd "$out/debs" && apt-get download "${wanted[@]}")

if [ -z "${NO_WHEELS:-}" ]; then
  # meson and ninja are pure-Python / static wheels: they run on the GPU machine's Python.
  if ! python3 -m pip download --only-binary=:all: --dest "$out/wheels" 'meson==1.0.1' ninja \
       >/dev/null 2>&1; then
    echo "note: could not download meson/ninja wheels; the GPU machine must have them" >&2
  fi
fi

{
  echo "# gst-pi0 GPU bundle, made $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "# glibc: $(ldd --version | head -1)"
  for d in "$out"/debs/*.deb; do dpkg-deb -f "$d" Package Version | paste -sd' '; done
} > "$out/MANIFEST"
echo "bundle ready: $out ($(du -sh "$out" | cut -f1), $(ls "$out"/debs | wc -l) debs)"
