#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and runs the demo.
# Extra arguments go to pi0-demo (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh build >/tmp/gst-pi0-build.log 2>&1 || {
  tail -50 /tmp/gst-pi0-build.log; echo "build failed (full log: /tmp/gst-pi0-build.log)"; exit 1; }
exec build/tools/pi0-demo "$@"
