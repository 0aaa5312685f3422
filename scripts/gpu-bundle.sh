#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Makes the offline bundle that scripts/gpu-check.sh builds and tests against on the GPU machine
# (docs/gpu.md): the Debian 12 packages that the build and the GPU checks actually open, listed
# one by one below (not their dependency closure), nothing that machine already has (its own
# glibc and C++ runtime, Python with torch, nvcc, cmake, ninja, meson), at most 40 MiB, so that
# a `run` call can carry it. Run it here (Debian 12 with package access), in the checkout the
# session was started in: the device call sends that checkout, plus the carried .gpu/bundle.
#
# usage: scripts/gpu-bundle.sh [OUT_DIR]        (default: .gpu/bundle, ignored by git)
# env:   GPU_BUNDLE_LIMIT_MIB=40                the size limit (the script fails above it)
#        NO_H264=1                              skip the three H.264 test files
#
# What each package is for was worked out from what the build and the checks open: the
# pkg-config closure (Requires and Requires.private, which pkgconf walks even for --cflags) of
# the .pc files meson.build asks for, `ldd` of the plugin, the tests and the GStreamer plugins
# the GPU checks load, and the headers the compiler reads (`ninja -t deps`).
# scripts/gpu-rehearse.sh proves the list in a bare Debian 12 root: every header, .pc file,
# shared library and plugin used comes from the bundle or from that base system.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/.gpu/bundle}
limit_mib=${GPU_BUNDLE_LIMIT_MIB:-40}

# ---- the list ----
packages=(
  # GStreamer core: libgstreamer/base/check/net/controller, coreelements, coretracers (the
  # leaks tracer of the soak test), gst-plugin-scanner; headers and .pc.
  libgstreamer1.0-0 libgstreamer1.0-dev
  # -base libraries (video, app, audio, pbutils, tag, riff, rtp, allocators) and libgstgl,
  # which libgstcuda links; headers and .pc (gstreamer-video, -app, -gl, -gl-prototypes).
  libgstreamer-plugins-base1.0-0 libgstreamer-gl1.0-0 libgstreamer-plugins-base1.0-dev
  # -bad libraries: libgstcuda (memory:CUDAMemory, GstCudaContext), codecs, codecparsers;
  # the <gst/cuda/...> headers and gstreamer-cuda-1.0.pc.
  libgstreamer-plugins-bad1.0-0 libgstreamer-plugins-bad1.0-dev
  # Plugins, pruned at unpack to plugins.keep (below): videotestsrc, app, videoconvertscale;
  # matroska, udp, rtp, rtpmanager; nvcodec (nvh264dec/enc), videoparsersbad (h264parse), gdp.
  gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad
  # gst-launch-1.0 and gst-inspect-1.0 (the gpu-decode line, the registry check).
  gstreamer1.0-tools
  # GLib (headers, .pc, libglib/gobject/gio/gmodule).
  libglib2.0-0 libglib2.0-dev
  # Header-only JSON (common/pi0json.h), GoogleTest (static), SentencePiece (the tokenizer
  # module), pkgconf (pkg-config is not on the GPU machine).
  nlohmann-json3-dev libgtest-dev libsentencepiece0 libsentencepiece-dev pkgconf-bin libpkgconf3
  # Libraries GStreamer links that a plain glibc system does not have.
  liborc-0.4-0 libunwind8 libdw1 libelf1
  # libgstgl's: GL/EGL dispatch (glvnd), Wayland, X11/xcb, gudev/udev, DRM, GBM.
  libgl1 libglx0 libglvnd0 libegl1 libgles2 libwayland-client0 libwayland-cursor0
  libwayland-egl1 libwayland-server0 libx11-6 libx11-xcb1 libxcb1 libxau6 libxdmcp6 libbsd0
  libmd0 libgudev-1.0-0 libudev1 libdrm2 libgbm1
  # The .pc files of the pkg-config closure above (and their headers): gstreamer-1.0 requires
  # libunwind, libdw; gio zlib, mount, selinux; glib pcre2; gstreamer-gl-1.0 the GL/Wayland/X11
  # set. GL/gl.h (libgl-dev) is also read for real: <gst/cuda/cuda-gst.h> includes cudaGL.h.
  libunwind-dev libdw-dev libelf-dev liborc-0.4-dev zlib1g-dev libmount-dev libblkid-dev
  libselinux1-dev libsepol-dev libpcre2-dev libffi-dev liblzma-dev
  libgl-dev libegl-dev libgles-dev libglx-dev libwayland-dev libx11-dev libx11-xcb-dev
  libgudev-1.0-dev libdrm-dev libgbm-dev x11proto-dev libxcb1-dev libudev-dev libxau-dev
  libxdmcp-dev
)
# Never bundled (written to DEVICE-PROVIDED; gpu-rehearse.sh allows a library from outside the
# bundle only if one of these packages holds it): the GPU machine has its own, newer C library
# and C++ runtime, and a Debian copy first on LD_LIBRARY_PATH would break its programs;
# likewise the base libraries every glibc system carries (dpkg, util-linux and grep need them)
# and the two that its Python needs (libffi for ctypes; libexpat for pyexpat, whose newer
# symbols an older bundled copy would lack).
never=(libc6 libc6-dev libstdc++6 libgcc-s1 zlib1g libselinux1 libmount1 libblkid1
       libpcre2-8-0 liblzma5 libbz2-1.0 libzstd1 libcap2 libffi8 libexpat1)
# Plugins kept after unpacking (the rest of each plugin package is removed: their libraries
# are not bundled, and the registry would try to load them).
plugins_keep=(
  coreelements coretracers                      # core: queue, tee, filesink, identity...; leaks
  app videotestsrc videoconvertscale            # -base
  matroska udp rtp rtpmanager                   # -good
  nvcodec videoparsersbad gdp                   # -bad
)

for p in "${packages[@]}"; do
  for n in "${never[@]}"; do
    [ "$p" != "$n" ] || { echo "gpu-bundle: $p must not be bundled (the GPU machine has its own)" >&2; exit 1; }
  done
done

mkdir -p "$out/debs"
out=$(cd "$out" && pwd)
echo "gpu-bundle: ${#packages[@]} packages into $out"
cd "$out/debs"
# The file names apt would download (one call), then drop what an earlier list had and fetch
# only what is not here yet in the same version (asked from /: apt prints nothing for a file
# already in the current folder).
mapfile -t wanted_files < <(cd / && apt-get download --print-uris "${packages[@]}" | awk '{print $2}')
if [ ${#wanted_files[@]} -ne ${#packages[@]} ]; then
  echo "gpu-bundle: apt knows ${#wanted_files[@]} of ${#packages[@]} packages (run apt-get update)" >&2
  exit 1
fi
for f in *.deb; do
  [ -e "$f" ] || continue
  keep=0
  for w in "${wanted_files[@]}"; do [ "$f" = "$w" ] && keep=1; done
  [ $keep = 1 ] || rm -f "$f"
done
missing=()
for w in "${wanted_files[@]}"; do [ -f "$w" ] || missing+=("${w%%_*}"); done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get download "${missing[@]}" 2>&1 | grep -v 'unsandboxed as root' || true
fi
for w in "${wanted_files[@]}"; do
  [ -f "$w" ] || { echo "gpu-bundle: $w was not downloaded" >&2; exit 1; }
done
cd "$out"

printf '%s\n' "${plugins_keep[@]}" >plugins.keep
printf '%s\n' "${never[@]}" >DEVICE-PROVIDED

# Three short 1080p H.264 files for the gpu-decode stage (nvh264dec), made here with x264enc so
# that the check does not depend on the GPU machine's encoder. Optional.
rm -rf h264
if [ -z "${NO_H264:-}" ] && command -v gst-launch-1.0 >/dev/null &&
   gst-inspect-1.0 x264enc >/dev/null 2>&1 && gst-inspect-1.0 matroskamux >/dev/null 2>&1; then
  mkdir -p h264
  for v in main:smpte side:ball top:pinwheel; do
    gst-launch-1.0 -q videotestsrc num-buffers=90 pattern="${v#*:}" \
      ! video/x-raw,format=I420,width=1920,height=1080,framerate=30/1 \
      ! x264enc tune=zerolatency speed-preset=veryfast bitrate=2000 key-int-max=30 \
      ! h264parse ! matroskamux ! filesink location="h264/${v%%:*}.mkv" >/dev/null
  done
else
  echo "gpu-bundle: no x264enc here: no H.264 files (gpu-check encodes with nvh264enc instead)"
fi

# The newest C library and C++ runtime symbol versions the bundle's binaries need.
tmp=$(mktemp -d)
for d in debs/*.deb; do dpkg-deb -x "$d" "$tmp"; done
needs=$({ find "$tmp" -type f \( -name '*.so*' -o -path '*/bin/*' -o -name gst-plugin-scanner \) \
          -exec readelf -V {} + 2>/dev/null || true; } | grep -oE '(GLIBC|GLIBCXX)_[0-9][0-9.]*' | sort -V -u |
        awk -F_ '{ m[$1] = $0 } END { print m["GLIBC"], m["GLIBCXX"] }' || true)
rm -rf "$tmp"
{
  echo "# gst-pi0 GPU bundle, made $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "# needs: $needs (the GPU machine's C library and C++ runtime)"
  echo "# package version bytes"
  for d in debs/*.deb; do
    echo "$(dpkg-deb --show --showformat='${Package} ${Version}' "$d") $(stat -c %s "$d")"
  done
} >MANIFEST

bytes=$(du -sb "$out" | cut -f1)
limit=$((limit_mib * 1024 * 1024))
awk -v o="$out" -v n="${#packages[@]}" -v b="$bytes" -v l="$limit_mib" \
  'BEGIN { printf "gpu-bundle: %s: %d packages, %.1f MiB (limit %d MiB)\n", o, n, b / 1048576, l }'
if [ "$bytes" -gt "$limit" ]; then
  echo "gpu-bundle: over the limit: it cannot travel with a device call" >&2
  exit 1
fi
