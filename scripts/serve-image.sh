#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The steps of the policy server image (Containerfile; scripts/serve-image-rehearse.sh runs
# the same ones in a bare Debian 12 root without a container engine):
#
#   serve-image.sh build SRC PREFIX   in the build stage: the build dependencies, a Python
#                                     environment with torch (LibTorch) at PREFIX/venv, then
#                                     gst-pi0 built from SRC without tests and installed into
#                                     PREFIX (pi0-serve, the plugin, its data)
#   serve-image.sh runtime PREFIX     in the runtime stage, over PREFIX copied from the build
#                                     stage: only the shared libraries pi0-serve loads
#
# The image serves on the CPU, or on a GPU through LibTorch (torch's wheel brings CUDA's
# libraries). gst-pi0's own CUDA kernels (cudaprep's GPU path) need the CUDA toolkit at build
# time: with /usr/local/cuda in the build stage they are built too (a CUDA base image).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
stage=${1:?usage: serve-image.sh build SRC PREFIX | runtime PREFIX}

apt_install() {
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "$@"
  rm -rf /var/lib/apt/lists/*
}

case "$stage" in
  build)
    src=${2:?SRC}; prefix=${3:?PREFIX}
    apt_install ca-certificates build-essential pkg-config meson ninja-build python3-venv \
      libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev libgstreamer-plugins-bad1.0-dev \
      libsentencepiece-dev nlohmann-json3-dev libsoup-3.0-dev libmsgpack-cxx-dev
    python3 -m venv "$prefix/venv"
    "$prefix/venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir \
      "$(grep '^torch==' "$src/scripts/requirements.txt")" \
      "$(grep '^numpy==' "$src/scripts/requirements.txt")"
    [ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
    build=$(mktemp -d /var/tmp/gst-pi0-build.XXXXXX)
    meson setup "$build" "$src" --prefix "$prefix" --buildtype release \
      -Dpython="$prefix/venv/bin/python" -Dtorch=enabled -Dserve=enabled \
      -Dtests=disabled -Dlerobot=disabled
    ninja -C "$build" -j "${JOBS:-$(nproc)}"
    meson install -C "$build" --quiet
    rm -rf "$build"
    install -D -m 0755 "$src/scripts/serve-image.sh" "$prefix/share/gst-pi0/serve-image.sh"
    ;;
  runtime)
    prefix=${2:?PREFIX}
    # What pi0-serve and the plugin link, besides what PREFIX holds.
    apt_install ca-certificates libgstreamer1.0-0 libgstreamer-plugins-base1.0-0 \
      libgstreamer-plugins-bad1.0-0 libsentencepiece0 libsoup-3.0-0 libgomp1
    # The project's own shared library (libgstpi0) and LibTorch (the torch wheel's lib/) are
    # under PREFIX: meson's install drops the build's rpaths, so the loader is told.
    {
      dirname "$(find "$prefix/lib" -name 'libgstpi0*.so*' | head -1)"
      dirname "$(find "$prefix/venv" -name 'libtorch_cpu.so' | head -1)"
    } > /etc/ld.so.conf.d/gst-pi0.conf
    ldconfig
    # Proof at build time: every library pi0-serve needs is found.
    if ldd "$prefix/bin/pi0-serve" | grep 'not found'; then
      echo "serve-image.sh: pi0-serve lacks the libraries above" >&2
      exit 1
    fi
    ;;
  *)
    echo "serve-image.sh: unknown stage '$stage' (build or runtime)" >&2
    exit 2
    ;;
esac
