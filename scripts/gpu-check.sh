#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# GPU check for a machine that has a GPU, the CUDA toolkit (nvcc), a C++ compiler and a Python
# with a CUDA build of torch, but no GStreamer and no package access. It unpacks the offline
# bundle made by scripts/gpu-bundle.sh into a private prefix, builds gst-pi0 against it and
# the machine's torch, runs `meson test --suite gpu` and the benchmarks, and prints one table.
# Nothing is installed system-wide.
#
# usage: scripts/gpu-check.sh BUNDLE_DIR [WORK_DIR]       (WORK_DIR default: ./build-gpu)
# env:   PYTHON=...        Python whose torch is used (default: python3)
#        GPU_ARCHS=90      compute capabilities (default: from nvidia-smi, else 80;90)
#        CONFIGURE_ONLY=1  stop after meson setup (to try the unpack on a machine without a GPU)
#        BENCH_ITERATIONS  iterations per benchmark row (default 200)
set -euo pipefail

if [ $# -lt 1 ]; then
  sed -n '3,16p' "$0"
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
bundle=$(cd "$1" && pwd)
work=${2:-$root/build-gpu}
mkdir -p "$work"
work=$(cd "$work" && pwd)
prefix=$work/prefix
build=$work/build
mkdir -p "$prefix"

say() { printf '== %s\n' "$*" >&2; }

# ---- 1. unpack the bundle (once) ----
if [ ! -f "$prefix/.unpacked" ]; then
  say "unpacking $(ls "$bundle"/debs/*.deb | wc -l) packages into $prefix"
  for d in "$bundle"/debs/*.deb; do
    if command -v dpkg-deb >/dev/null 2>&1; then
      dpkg-deb -x "$d" "$prefix"
    else
      # No dpkg: a .deb is an ar archive holding data.tar.*.
      tmp=$(mktemp -d)
      (cd "$tmp" && ar x "$d" && tar -xf data.tar.* -C "$prefix")
      rm -rf "$tmp"
    fi
  done
  # pkg-config files and a few scripts name /usr: point them at the prefix.
  find "$prefix" -name '*.pc' -print0 | xargs -0 -r sed -i \
    -e "s|^prefix=/usr\$|prefix=$prefix/usr|" -e "s|=/usr/|=$prefix/usr/|g" \
    -e "s|-I/usr/|-I$prefix/usr/|g" -e "s|-L/usr/|-L$prefix/usr/|g"
  touch "$prefix/.unpacked"
fi

multiarch=$( (gcc -print-multiarch 2>/dev/null || true) | head -1)
[ -n "$multiarch" ] || multiarch=$(uname -m)-linux-gnu
lib=$prefix/usr/lib/$multiarch
export PKG_CONFIG_PATH=$lib/pkgconfig:$prefix/usr/share/pkgconfig:$prefix/usr/lib/pkgconfig
if ! command -v pkg-config >/dev/null 2>&1 && [ -x "$prefix/usr/bin/pkgconf" ]; then
  export PKG_CONFIG=$prefix/usr/bin/pkgconf
  mkdir -p "$work/bin"
  ln -sf "$prefix/usr/bin/pkgconf" "$work/bin/pkg-config"
  export PATH=$work/bin:$PATH
fi
export LD_LIBRARY_PATH=$lib:$prefix/usr/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$prefix/usr/bin:$PATH
export CPATH=$prefix/usr/include${CPATH:+:$CPATH}
export LIBRARY_PATH=$lib${LIBRARY_PATH:+:$LIBRARY_PATH}
export GST_PLUGIN_SYSTEM_PATH_1_0=$lib/gstreamer-1.0
export GST_PLUGIN_SCANNER_1_0=$lib/gstreamer1.0/gstreamer-1.0/gst-plugin-scanner
export GST_REGISTRY_1_0=$work/registry.bin

# ---- 2. meson and ninja ----
if ! command -v meson >/dev/null 2>&1 || ! command -v ninja >/dev/null 2>&1; then
  if ls "$bundle"/wheels/*.whl >/dev/null 2>&1; then
    say "installing meson/ninja from the bundle's wheels into $work/py"
    python3 -m pip install --quiet --no-index --find-links "$bundle/wheels" --target "$work/py" \
      meson ninja
    export PYTHONPATH=$work/py${PYTHONPATH:+:$PYTHONPATH}
    export PATH=$work/py/bin:$PATH
  fi
fi
command -v meson >/dev/null || { echo "meson not found (and no wheels in the bundle)" >&2; exit 1; }

# ---- 3. torch and the GPU ----
py=${PYTHON:-python3}
torch_info=$("$py" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())' 2>/dev/null || echo "none")
say "torch: $torch_info ($py)"
torch_opt=auto
[ "$torch_info" != none ] && torch_opt=enabled
if [ -z "${GPU_ARCHS:-}" ]; then
  GPU_ARCHS=$( (nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null || true) |
              head -1 | tr -d '. ')
  [ -n "$GPU_ARCHS" ] || GPU_ARCHS='80;90'
fi
gpu_name=$( (nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true) | head -1)
say "GPU: ${gpu_name:-none found}, archs $GPU_ARCHS"

# ---- 4. configure, build ----
setup_args=(-Dcuda=enabled "-Dtorch=$torch_opt" "-Dpython=$(command -v "$py")" "-Dgpu_archs=$GPU_ARCHS"
            -Dtests=enabled --buildtype=release)
if [ -f "$build/build.ninja" ]; then
  meson setup --reconfigure "$build" "$root" "${setup_args[@]}" >"$work/setup.log" 2>&1 ||
    { tail -30 "$work/setup.log"; exit 1; }
else
  meson setup "$build" "$root" "${setup_args[@]}" >"$work/setup.log" 2>&1 ||
    { tail -30 "$work/setup.log"; exit 1; }
fi
grep -A6 '^  Features' "$work/setup.log" >&2 || true
if [ -n "${CONFIGURE_ONLY:-}" ]; then
  say "configured in $build (CONFIGURE_ONLY set: stopping)"
  exit 0
fi
say "building"
ninja -C "$build" >"$work/build.log" 2>&1 || { tail -40 "$work/build.log"; exit 1; }

# ---- 5. tests and benchmarks ----
say "meson test --suite gpu"
test_rc=0
meson test -C "$build" --suite gpu --print-errorlogs >"$work/test.log" 2>&1 || test_rc=$?
bench_out=$work/bench.txt
: >"$bench_out"
for b in "$build"/bench/*-bench; do
  [ -x "$b" ] || continue
  say "running $(basename "$b")"
  timeout 300 "$b" --iterations "${BENCH_ITERATIONS:-200}" >>"$bench_out" 2>&1 || \
    echo "$(basename "$b") failed or timed out" >>"$bench_out"
done

# The whole chain on the GPU, end to end (issue 7's target: full-size pi0 in bf16, three
# 1080p cameras at 30 fps), then the tiny model for comparison.
if [ -x "$build/bench/e2e" ]; then
  for args in "--model builtin:pi0 --device cuda --precision bf16" \
              "--model builtin:pi0-tiny --device cuda"; do
    say "running e2e $args"
    # shellcheck disable=SC2086
    timeout 240 "$build/bench/e2e" $args --width 1920 --height 1080 --fps 30 \
      --duration "${E2E_SECONDS:-20}" >>"$bench_out" 2>&1 || echo "e2e $args failed or timed out" >>"$bench_out"
  done
fi

# ---- 6. one table ----
{
  echo
  echo "gst-pi0 GPU check: ${gpu_name:-no GPU}; torch $torch_info; $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "| test (suite gpu) | result | seconds |"
  echo "|---|---|---|"
  "$py" - "$build/meson-logs/testlog.json" <<'EOF' || true
import json, sys
for line in open(sys.argv[1]):
    t = json.loads(line)
    print(f"| {t['name']} | {t['result']} | {t['duration']:.1f} |")
EOF
  echo
  cat "$bench_out"
} | tee "$work/summary.md"
exit "$test_rc"
