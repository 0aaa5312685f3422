#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and runs the demo.
# Extra arguments go to pi0-demo (try --help).
#
#   scripts/demo.sh --sim [pi0-sim run options]
#
# runs the closed loop on the simulated arm instead (docs/sim.md): a trained policy (or
# SIM_POLICY=DIR, or SIM_POLICY=expert) through the whole chain, lock-step, ten held-out scenes,
# one line per episode with its outcome, then the totals; --overlay DIR also writes the overhead
# camera with the planned path drawn by pi0overlay.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the demo runs (the program, the robot simulator, the tokenizer's module): the tests
# and fuzzers are scripts/test.sh's to build.
targets=(pi0-demo pi0-robotsim)
[ "${1:-}" = "--sim" ] && targets=(pi0-sim)
bash scripts/build.sh --demo build "${targets[@]}" >/tmp/gst-pi0-build.log 2>&1 || {
  tail -50 /tmp/gst-pi0-build.log; echo "build failed (full log: /tmp/gst-pi0-build.log)"; exit 1; }
# The SentencePiece module (tokenizer) is loaded at run time, so no target depends on it.
if ninja -C build -t targets all 2>/dev/null | grep -q '^inference/io/libpi0spm.so:'; then
  ninja -C build inference/io/libpi0spm.so >>/tmp/gst-pi0-build.log 2>&1
fi
if [ "${1:-}" != "--sim" ]; then
  exec build/tools/pi0-demo "$@"
fi
shift
policy=${SIM_POLICY:-models/pi0-sim-tiny}
size=96
if [ "$policy" != expert ] && [ ! -f "$policy/config.json" ]; then
  echo "no policy at $policy: SIM_POLICY=DIR (a LeRobot pi0 checkpoint) or SIM_POLICY=expert"; exit 1
fi
echo "== pi0-sim: policy $policy, scenes 5000-5009 (held out from training), lock-step"
PI0_SOURCE_ROOT=$PWD build/tools/pi0-sim run --policy "$policy" --prep-size $size --width $size \
    --height $size --episodes 10 --seed 5000 "$@" |
  python3 -c '
import json, sys
for line in sys.stdin:
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if "seed" in r:
        print("scene {seed}: {instruction:22} {outcome:8} after {ticks:2} ticks"
              " ({chunks} chunks, {rejected} frames refused by the robot)".format(**r))
    else:
        print("== {success} of {episodes} succeeded ({wrong} touched another block,"
              " {timeout} ran out of time)".format(**r))
'
