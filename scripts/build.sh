#!/usr/bin/env bash
# Sets up what is missing (scripts/setup.sh), configures the build directory and builds.
# Usage: scripts/build.sh [--demo [--ros2]] [builddir] [meson target...]
#   --demo       sets up only what the demo needs (scripts/setup.sh --demo)
#   --ros2       with --demo: and ROS 2 Jazzy's wheels (scripts/demo.sh --ros2)
#   builddir     default: build
#   targets      only these (meson compile names: pi0-demo, pi0-robotsim, ...); default: all
set -euo pipefail
cd "$(dirname "$0")/.."
setup_args=()
if [ "${1:-}" = "--demo" ]; then
  setup_args=(--demo)
  shift
  if [ "${1:-}" = "--ros2" ]; then
    setup_args+=(--ros2)
    shift
  fi
fi
BUILD="${1:-build}"
if [ $# -gt 0 ]; then shift; fi

bash scripts/setup.sh "${setup_args[@]}"
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"

# ROS 2 from the wheels setup.sh installed (docs/ros2.md): Jazzy for the plugin, Kilted for a
# second copy that the tests run too. A sourced /opt/ros is found without them.
ros2_args=()
[ -d .ros-jazzy-venv/lib ] && ros2_args+=(-Dros2_prefix="$PWD/.ros-jazzy-venv")
[ -d .ros-kilted-venv/lib ] && ros2_args+=(-Dros2_second_prefix="$PWD/.ros-kilted-venv")
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" -Dpython="$PWD/.venv/bin/python" -Ddebuginfo=lines "${ros2_args[@]}"
fi
if [ $# -gt 0 ]; then
  meson compile -C "$BUILD" "$@"
else
  ninja -C "$BUILD"
fi
