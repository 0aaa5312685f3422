#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Rehearses the GPU check here, without a GPU (docs/gpu.md): a bare Debian 12 root
# (debootstrap --variant=minbase, plus g++ and python3, which the GPU machine has too) with no
# GStreamer, GLib or any other bundled package in it, /usr/local/cuda and the .venv's torch
# bound in (the GPU machine has torch 2.11+cu130 too, under Python 3.12), meson and ninja from
# PyPI wheels (as there). Inside it, scripts/gpu-check.sh unpacks the bundle, configures with
# CUDA on, builds everything, then runs the gpu suite (which skips itself: no device) and the
# CPU suite with LD_DEBUG=libs; scripts/gpu_rehearse_proof.py then proves that every header,
# pkg-config file, shared library and GStreamer plugin used came from the bundle (or from the
# toolchain, CUDA, torch, or a package the bundle names as the GPU machine's own).
# Passes only if the root had none of the bundle's packages, the build and both suites pass,
# and the proof holds. Not part of .ci/run: it takes long (docs/gpu.md has its run time).
#
# usage: sudo scripts/gpu-rehearse.sh        (as root: debootstrap, chroot and bind mounts)
# env:   REHEARSE_FRESH=1   debootstrap the base root again (else reused from .gpu/rehearse)
#        REHEARSE_JOBS=N    build jobs (default 2: the development machine is shared)
#        BUNDLE=DIR         the bundle (default .gpu/bundle; made with gpu-bundle.sh if absent)
#        CONFIGURE_ONLY=1   stop after the proof of the bare root and meson setup (a quick try)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)

if [ "${1:-}" = --inside ]; then
  # ---- inside the root ----
  bundle=$2 venv=$3 jobs=$4 configure_only=$5
  work=/var/tmp/gpu-work
  lddebug=/var/tmp/lddebug
  say() { printf '== [rehearse %s] %s\n' "$(date +%T)" "$*"; }
  cd "$src"

  say "the root before: none of the bundle's $(grep -c '^[a-z0-9]' "$bundle/MANIFEST") packages, no GStreamer files"
  # Two small base libraries of a minbase root are in the bundle too, since the GPU machine
  # may lack them; the proof below shows that the bundle's copies are the ones loaded.
  base_overlap=" libmd0 libudev1 "
  installed=()
  for p in $(awk '!/^#/ {print $1}' "$bundle/MANIFEST"); do
    dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || continue
    [[ "$base_overlap" == *" $p "* ]] && echo "(the root has the base library $p too)" && continue
    installed+=("$p")
  done
  [ ${#installed[@]} = 0 ] || { echo "FAIL: the root already has ${installed[*]}"; exit 1; }
  found=$(find / \( -path /proc -o -path /sys -o -path /dev -o -path /work -o -path /usr/local/cuda \
                    -o -path "$venv" -o -path /opt/pytools \) -prune -o \
               \( -name 'libgst*' -o -name 'gstreamer-1.0*' -o -name 'glib-2.0*' -o -name 'libglib-2.0*' \
                  -o -name gtest -o -name nlohmann -o -name 'sentencepiece*' -o -name pkgconf \
                  -o -name 'libpkgconf*' -o -name pkg-config -o -name gl.h -o -name 'libGL*' \
                  -o -name 'gstreamer-*.pc' -o -name 'glib-2.0.pc' -o -name gtest.pc \) -print)
  [ -z "$found" ] || { echo "FAIL: the root already has:"; echo "$found"; exit 1; }
  for t in pkg-config gst-launch-1.0 gst-inspect-1.0; do
    ! command -v $t >/dev/null || { echo "FAIL: the root has $t"; exit 1; }
  done
  echo "ok: none"

  export GPU_ARCHS=90 GPU_CHECK_JOBS=$jobs GPU_CHECK_BUDGET=36000 PYTHON=$src/.venv/bin/python
  if [ -n "$configure_only" ]; then
    say "unpack, configure (CUDA on): scripts/gpu-check.sh, CONFIGURE_ONLY"
    CONFIGURE_ONLY=1 OUT=$work/out-build scripts/gpu-check.sh "$bundle" "$work"
    exit $?
  fi
  say "unpack, configure (CUDA on), build everything: scripts/gpu-check.sh"
  t0=$(date +%s)
  GPU_CHECK_STAGES=none GPU_CHECK_BUILD=all OUT=$work/out-build scripts/gpu-check.sh "$bundle" "$work" ||
    { echo "FAIL: the build"; exit 1; }
  grep -q 'CUDA kernels *: \(YES\|true\)' "$work/logs/configure.log" ||
    { echo "FAIL: configured without CUDA"; grep -A5 Features "$work/logs/configure.log"; exit 1; }
  echo "built in $(($(date +%s) - t0)) s (configure and build $(sed -n 's/^| \(configure\|build\) | PASS | \([0-9]*\) .*/\1 \2 s/p' "$work/out-build/gpu-summary.md" | paste -sd' '))"

  say "the gpu suite (skips itself: no device) and the CPU suite, under LD_DEBUG=libs"
  rm -rf "$lddebug" && mkdir -p "$lddebug"
  t0=$(date +%s)
  rc=0
  LD_DEBUG=libs LD_DEBUG_OUTPUT=$lddebug/ld GPU_CHECK_STAGES="gpu-suite cpu-suite" \
    OUT=$work/out-tests scripts/gpu-check.sh "$bundle" "$work" || rc=$?
  echo "tests ran in $(($(date +%s) - t0)) s"
  sed -n '/^| stage/,/^$/p' "$work/out-tests/gpu-summary.md"
  if [ $rc != 0 ]; then
    echo "FAIL: a suite failed:"
    grep -E '^\| .* \| (FAIL|TIMEOUT|ERROR)' "$work/out-tests/gpu-summary.md" || true
    exit 1
  fi

  say "proof: where every header, .pc, library and plugin came from"
  # shellcheck disable=SC1091
  . "$work/env.sh"
  python3 scripts/gpu_rehearse_proof.py --source "$src" --work "$work" --bundle "$bundle" \
    --venv "$venv" --cuda /usr/local/cuda --lddebug "$lddebug"
  exit $?
fi

# ---- outside: make the root, bind what it needs, enter it ----
[ "$(id -u)" = 0 ] || { echo "gpu-rehearse: run as root (debootstrap, chroot, mount)" >&2; exit 2; }
t_start=$(date +%s)
dir=$src/.gpu/rehearse
bundle=${BUNDLE:-$src/.gpu/bundle}
jobs=${REHEARSE_JOBS:-2}
venv=$(readlink -f "$src/.venv")
cuda=$(readlink -f /usr/local/cuda)
[ -x "$venv/bin/python" ] || { echo "gpu-rehearse: no .venv (scripts/setup.sh)" >&2; exit 2; }
[ -x "$cuda/bin/nvcc" ] || { echo "gpu-rehearse: no CUDA toolkit at /usr/local/cuda" >&2; exit 2; }
[ -f "$bundle/MANIFEST" ] || nice "$src/scripts/gpu-bundle.sh" "$bundle"
bundle=$(cd "$bundle" && pwd)
case $bundle in "$src"/*) ;; *) echo "gpu-rehearse: the bundle must be inside $src" >&2; exit 2 ;; esac
mkdir -p "$dir"

# What the GPU machine has besides its base system: a C++ compiler and Python. ccache only
# speeds up a second rehearsal (its cache stays in .gpu/rehearse/ccache); it changes nothing
# the compiler reads. It wraps gcc and g++ only, and stays off PATH: meson would wrap nvcc in
# it too, and kernels/meson.build takes the CUDA root from the CUDA compiler's first word.
includes=g++,python3,ccache
if [ ! -f "$dir/base.tar" ] || [ "$(cat "$dir/base.includes" 2>/dev/null)" != "$includes" ] ||
   [ -n "${REHEARSE_FRESH:-}" ]; then
  command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap
  echo "== debootstrap --variant=minbase --include=$includes bookworm into $dir/base"
  rm -rf "$dir/base"
  mkdir -p "$dir/cache"
  nice debootstrap --variant=minbase --include=$includes --cache-dir="$dir/cache" \
    bookworm "$dir/base" http://deb.debian.org/debian >"$dir/debootstrap.log" 2>&1 ||
    { tail -20 "$dir/debootstrap.log"; exit 1; }
  tar -C "$dir/base" -cf "$dir/base.tar.part" . && mv "$dir/base.tar.part" "$dir/base.tar"
  echo "$includes" >"$dir/base.includes"
  rm -rf "$dir/base"
fi
echo "== a fresh root from $dir/base.tar"
R=$dir/root
# Never delete through a bind mount (they live in the rehearsal's own mount namespace, but a
# root left mounted by hand would take the worktree or the .venv with it).
if grep -q " $R[/ ]" /proc/self/mountinfo; then
  echo "gpu-rehearse: something is mounted under $R: unmount it first" >&2
  exit 1
fi
rm -rf "$R"
mkdir -p "$R"
tar -C "$R" -xf "$dir/base.tar"
mkdir -p "$R/opt/ccache" && mv "$R/usr/bin/ccache" "$R/opt/ccache/"

# meson and ninja as the GPU machine has them: from PyPI, not Debian.
if ! ls "$dir"/wheels/meson-*.whl "$dir"/wheels/ninja-*.whl >/dev/null 2>&1; then
  "$venv/bin/python" -m pip download -q --only-binary=:all: -d "$dir/wheels" meson ninja
fi
"$venv/bin/python" -m pip install -q --no-index --find-links "$dir/wheels" --target "$R/opt/pytools" \
  meson ninja

mkdir -p "$R$src" "$R$venv" "$R/usr/local/cuda" "$R/var/cache/ccache" "$dir/ccache"
echo "== entering the root (private mount namespace: the binds end with it)"
rc=0
unshare --mount --propagation private -- bash -euc '
  R=$1 src=$2 venv=$3 cuda=$4
  mount --bind "$src" "$R$src"
  mount --bind "$venv" "$R$venv" && mount -o remount,bind,ro "$R$venv"
  mount --bind "$cuda" "$R/usr/local/cuda" && mount -o remount,bind,ro "$R/usr/local/cuda"
  mount --bind "$R/../ccache" "$R/var/cache/ccache"
  mount -t proc proc "$R/proc"
  mount --rbind /dev "$R/dev"
  mount --rbind /sys "$R/sys"
  exec chroot "$R" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/opt/pytools/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONPATH=/opt/pytools CCACHE_DIR=/var/cache/ccache CC="/opt/ccache/ccache gcc" \
    CXX="/opt/ccache/ccache g++" \
    nice -n 10 bash "$src/scripts/gpu-rehearse.sh" --inside "$5" "$venv" "$6" "$7"
' _ "$R" "$src" "$venv" "$cuda" "$bundle" "$jobs" "${CONFIGURE_ONLY:-}" || rc=$?
secs=$(($(date +%s) - t_start))
printf '== rehearsal %s in %dm%02ds (bundle %s)\n' "$([ $rc = 0 ] && echo PASSED || echo FAILED)" \
  $((secs / 60)) $((secs % 60)) "$(du -sh "$bundle" | cut -f1)"
exit $rc
