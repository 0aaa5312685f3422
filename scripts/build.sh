#!/usr/bin/env bash
# Sets up what is missing (scripts/setup.sh), configures the build directory and builds.
# Usage: scripts/build.sh [--demo] [builddir] [meson target...]
#   --demo       sets up only what the demo needs (scripts/setup.sh --demo)
#   builddir     default: build
#   targets      only these (meson compile names: pi0-demo, pi0-robotsim, ...); default: all
set -euo pipefail
cd "$(dirname "$0")/.."
setup_args=()
if [ "${1:-}" = "--demo" ]; then
  setup_args=(--demo)
  shift
fi
BUILD="${1:-build}"
if [ $# -gt 0 ]; then shift; fi

bash scripts/setup.sh "${setup_args[@]}"
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"

if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" -Dpython="$PWD/.venv/bin/python" -Ddebuginfo=lines
fi
if [ $# -gt 0 ]; then
  meson compile -C "$BUILD" "$@"
else
  ninja -C "$BUILD"
fi
