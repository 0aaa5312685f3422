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
#
#   scripts/demo.sh --ros2
#
# runs the chain for a ROS 2 robot (pipelines/ros2.txt, docs/ros2.md) against a simulated ROS 2
# robot written with rclpy (tests/ros2/ros2_robot.py: three camera topics, /joint_states, a
# JointTrajectory controller), both in a network namespace with only lo up (as root), for
# DURATION seconds (8), and prints what the robot received.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the demo runs (the program, the robot simulator, the tokenizer's module): the tests
# and fuzzers are scripts/test.sh's to build.
targets=(pi0-demo pi0-robotsim)
demo_args=(--demo)
[ "${1:-}" = "--sim" ] && targets=(pi0-sim)
if [ "${1:-}" = "--ros2" ]; then
  targets=(gst/gstpi0 gst/ros2/gstpi0ros2)
  demo_args=(--demo --ros2)
fi
bash scripts/build.sh "${demo_args[@]}" build "${targets[@]}" >/tmp/gst-pi0-build.log 2>&1 || {
  tail -50 /tmp/gst-pi0-build.log; echo "build failed (full log: /tmp/gst-pi0-build.log)"; exit 1; }
# The SentencePiece module (tokenizer) is loaded at run time, so no target depends on it.
if ninja -C build -t targets all 2>/dev/null | grep -q '^inference/io/libpi0spm.so:'; then
  ninja -C build inference/io/libpi0spm.so >>/tmp/gst-pi0-build.log 2>&1
fi
if [ "${1:-}" = "--ros2" ]; then
  if [ "$(id -u)" != 0 ] || ! unshare -n true 2>/dev/null; then
    echo "scripts/demo.sh --ros2 runs ROS 2 in a network namespace of its own (DDS discovery"
    echo "must not reach your network): run it as root"; exit 1
  fi
  tmp=$(mktemp -d -t pi0-ros2-demo-XXXXXX)
  gst-launch-1.0 -q videotestsrc num-buffers=1 pattern=ball ! video/x-raw,width=160,height=120 \
    ! jpegenc ! filesink location="$tmp/top.jpg"
  echo "== a ROS 2 robot (rclpy, Jazzy): /main/image_raw (RGB), /side/image_raw (BGR, padded rows),"
  echo "   /top/image_raw/compressed (JPEG), /joint_states; JointTrajectory on /arm_controller"
  echo "== the chain (pipelines/ros2.txt) for ${DURATION:-8} s, both in a network namespace"
  export TMP_DEMO="$tmp"
  unshare -n bash -c '
    set -euo pipefail
    ip link set lo up
    source scripts/ros2-env.sh jazzy
    export GST_PLUGIN_PATH="$PWD/build/gst/ros2"
    "$PI0_ROS_PYTHON" tests/ros2/ros2_robot.py --joints j1,j2,j3,j4,j5,j6,gripper \
      --cameras main:320x240:rgb8,side:320x240:bgr8,top:160x120:jpeg --jpeg-file "$TMP_DEMO/top.jpg" \
      --pad-rows --record "$TMP_DEMO/robot.json" --duration 120 >"$TMP_DEMO/robot.out" 2>"$TMP_DEMO/robot.log" &
    robot=$!
    for _ in $(seq 100); do grep -q ready "$TMP_DEMO/robot.out" && break; sleep 0.1; done
    DURATION=${DURATION:-8} pipelines/run.sh ros2 2>&1 | grep -v "^Setting\|^Redistribute\|^New clock\|^Pipeline is" || true
    kill -INT $robot; wait $robot || true'
  python3 - "$tmp/robot.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["trajectories"]
moves = [x for x in t if len(x["points"]) > 1]
print("== the robot received %d JointTrajectory messages (%d chunks, %d HOLD/STOP), refused %d"
      % (len(t), len(moves), len(t) - len(moves), r["counters"]["refused"]))
if moves:
    m = moves[-1]
    print("   last chunk: %d points, joints %s, first point %s" % (
        len(m["points"]), ",".join(m["joint_names"]),
        " ".join("%.3f" % v for v in m["points"][0]["positions"])))
PY
  rm -rf "$tmp"
  exit 0
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
