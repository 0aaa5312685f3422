#!/usr/bin/env bash
# The README's second command (and CI's): installs what is missing, builds, runs every test
# that needs no GPU. With a GPU, add: meson test -C build --suite gpu
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh build
status=0
meson test -C build --no-suite gpu --print-errorlogs --num-processes 2 || status=$?
# One closing line that any CI reader understands.
.venv/bin/python - <<'PY2'
import json
passed = failed = skipped = 0
for line in open("build/meson-logs/testlog.json"):
    r = json.loads(line).get("result")
    if r in ("OK", "EXPECTEDFAIL"): passed += 1
    elif r == "SKIP": skipped += 1
    else: failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY2
exit $status
