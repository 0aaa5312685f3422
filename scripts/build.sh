#!/usr/bin/env bash
# Sets up what is missing (scripts/setup.sh), configures the build directory and builds.
# Usage: scripts/build.sh [builddir]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"

bash scripts/setup.sh
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"

if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" -Dpython="$PWD/.venv/bin/python" -Ddebuginfo=lines
fi
ninja -C "$BUILD"
