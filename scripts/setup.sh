#!/usr/bin/env bash
# Installs what gst-pi0 needs on Debian 12 (run as root) and the Python virtual environment
# whose torch wheel provides LibTorch and the test oracles. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential pkg-config meson ninja-build python3-venv python3-pip
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev libgstreamer-plugins-bad1.0-dev
  gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good
  gstreamer1.0-plugins-bad gstreamer1.0-plugins-ugly gstreamer1.0-libav libgl-dev
  libgtest-dev libgmock-dev libsentencepiece-dev sentencepiece
  nlohmann-json3-dev
  python3-pil
  clang libclang-rt-14-dev
  libsoup-3.0-dev libmsgpack-cxx-dev
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
  "$VENV/bin/pip" install -q --disable-pip-version-check -r scripts/requirements.txt
  echo "$want" > "$stamp"
fi
