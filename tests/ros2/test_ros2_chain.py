#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The pi0ros2 plugin against real ROS 2 (issue 41, docs/ros2.md): the whole chain against a
robot written with rclpy (tests/ros2/ros2_robot.py), and each element against what a
misbehaving robot publishes (tests/ros2/ros2_publish.py), on one distro per run.

  test_ros2_chain.py --distro jazzy --plugin-dir build/gst/ros2 --pi0-plugin-dir build/gst

Every ROS 2 process runs in a network namespace this script makes with only lo up (it re-runs
itself under `unshare -n`), so that DDS discovery never leaves the test; without root it
skips (exit 77). The pipelines run in this process through PyGObject (Debian's python3-gi), so
that the sinks' `action` signals and every element's stats can be read; the ROS 2 peers run in
the distro's venv. Exit 0 when every case passes, 1 otherwise."""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import ros2_netns  # noqa: E402

SKIP = 77
CONFIG = os.path.join(ROOT, "pipelines", "robot-7dof.json")
ARM = ["j1", "j2", "j3", "j4", "j5", "j6", "gripper"]

Gst = None
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("  FAIL:", what, flush=True)
    return cond


class Peer:
    """A ROS 2 process in the distro's venv (this namespace), waited for until it says ready."""

    def __init__(self, args, python, log):
        self.log = open(log, "w+")
        self.p = subprocess.Popen([python] + args, stdout=subprocess.PIPE, stderr=self.log,
                                  text=True)
        self.lines = []
        deadline = time.time() + 30
        while time.time() < deadline:
            line = self.p.stdout.readline()
            if not line:
                break
            self.lines.append(line.strip())
            if line.strip() == "ready":
                return
        raise RuntimeError("%s did not become ready: %s" % (args[0], self.stderr()))

    def stderr(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-3000:]

    def wait_for(self, word, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            line = self.p.stdout.readline()
            if not line:
                return False
            self.lines.append(line.strip())
            if line.strip().startswith(word):
                return True
        return False

    def stop(self, timeout=20):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
        try:
            out, _ = self.p.communicate(timeout=timeout)
            self.lines += out.splitlines()
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.communicate()
        return self.p.returncode


def run_pipeline(desc, seconds, on_start=None, eos=True):
    """Runs @desc for @seconds in PLAYING, then EOS (up to 5 s; @eos) and NULL. Returns the
    pipeline (in NULL) and the bus's warnings and errors. Without @eos straight to NULL: a sink
    whose source never had data never prerolls, and an EOS event then never completes
    (GStreamer's preroll, the same with udpsrc: docs/ros2.md, "Known problems")."""
    pipe = Gst.parse_launch(desc)
    if on_start:
        on_start(pipe)
    bus = pipe.get_bus()
    msgs = {"warning": [], "error": []}
    check(pipe.set_state(Gst.State.PLAYING) != Gst.StateChangeReturn.FAILURE, "PLAYING")
    end = time.time() + seconds
    eos_sent = not eos
    while True:
        left = end - time.time()
        if left <= 0 and not eos_sent:
            pipe.send_event(Gst.Event.new_eos())
            eos_sent = True
            end = time.time() + 5
            continue
        if left <= 0:
            break
        # Polled, with the GIL released in between: the sinks' `action` callbacks (Python, on
        # the streaming thread) must not wait for it, or the second sink of a tee runs late.
        m = bus.pop_filtered(Gst.MessageType.ERROR | Gst.MessageType.WARNING |
                             Gst.MessageType.EOS)
        if not m:
            time.sleep(0.002)
            continue
        if m.type == Gst.MessageType.EOS:
            break
        err, dbg = m.parse_error() if m.type == Gst.MessageType.ERROR else m.parse_warning()
        msgs["error" if m.type == Gst.MessageType.ERROR else "warning"].append(
            "%s: %s" % (m.src.get_name(), err.message))
        if m.type == Gst.MessageType.ERROR:
            break
    t0 = time.time()
    pipe.set_state(Gst.State.NULL)
    check(time.time() - t0 < 10, "the pipeline reached NULL (took %.1f s)" % (time.time() - t0))
    return pipe, msgs


def stats(pipe, name):
    s = pipe.get_by_name(name).get_property("stats")
    return {s.nth_field_name(i): s.get_value(s.nth_field_name(i)) for i in range(s.n_fields())}


def float32s(data):
    """Native float32 values from bytes (a state buffer, an action signal's GBytes)."""
    import array
    v = array.array("f")
    v.frombytes(data)
    return list(v)


def on_sample(pipe, name, take):
    """Calls take(buffer, running time now or None) with each buffer appsink @name gets."""
    def pull(sink):
        buf = sink.emit("pull-sample").get_buffer()
        clock = pipe.get_clock()
        take(buf, clock.get_time() - pipe.get_base_time() if clock else None)
        return Gst.FlowReturn.OK
    sink = pipe.get_by_name(name)
    sink.set_property("emit-signals", True)
    sink.connect("new-sample", pull)


def on_action(pipe, name, take):
    """Calls take(kind, chunk, step, rows) with each message pi0actionsink @name signals, rows as
    lists of floats exactly as sent."""
    def cb(sink, kind, chunk, step, steps, dim, values):
        v = float32s(values.get_data())
        take(kind, chunk, step, [v[i * dim:(i + 1) * dim] for i in range(steps)])
    pipe.get_by_name(name).connect("action", cb)


def load_config():
    with open(CONFIG) as f:
        return json.load(f)


# ---- cases ----------------------------------------------------------------------------------

def case_chain(a, tmp, py):
    """The whole chain against an rclpy robot: three camera topics (raw RGB with padded rows,
    raw BGR, JPEG) and /joint_states (extra joints, its own order) in, JointTrajectory out; the
    trajectories it receives carry what the same sink sends over UDP for the same chunks."""
    # Limits the untrained model's rows stay within, so that no row is clamped: each sink
    # decides a chunk's first row (and bounds it) from the time it sends it, which differs
    # between the two sinks by how long the first took; unclamped, the rows at a given place
    # are the model's, and the two sinks' chunks compare wherever they start at the same row.
    # (Clamping itself is the sink's, tested in tests/elements/pi0actionsink/.)
    cfg = dict(load_config(), lower=[-50.0] * 7, upper=[50.0] * 7, max_step=[50.0] * 7)
    config = os.path.join(tmp, "robot-wide.json")
    with open(config, "w") as f:
        json.dump(cfg, f)
    jpeg = os.path.join(tmp, "top.jpg")
    subprocess.run(["gst-launch-1.0", "-q", "videotestsrc", "num-buffers=1", "pattern=ball", "!",
                    "video/x-raw,width=160,height=120", "!", "jpegenc", "!", "filesink",
                    "location=" + jpeg], check=True)
    rec = os.path.join(tmp, "robot.json")
    robot = Peer([os.path.join(HERE, "ros2_robot.py"), "--joints", ",".join(ARM),
                  "--cameras", "main:320x240:rgb8,side:160x120:bgr8,top:160x120:jpeg",
                  "--jpeg-file", jpeg, "--pad-rows", "--fps", "15", "--rate", "50",
                  "--controller", "arm_controller", "--record", rec, "--duration", "60"],
                 py, os.path.join(tmp, "robot.log"))
    udp_port = 20000 + os.getpid() % 20000
    desc = (
        "pi0viewmux name=mux max-staleness=300000000 max-state-age=100000000 "
        "! cudaprep width=32 height=32 ! queue max-size-buffers=1 leaky=downstream "
        "! pi0infer name=infer model=builtin:pi0-tiny instruction=\"pick up the red cube\" "
        "action-dims=7 seed=1 "
        "! tee name=t "
        "t. ! pi0actionsink name=ros async=false mode=chunk max-action-age=500000000 robot-feedback=false "
        "robot-config=%s target=ros2:///arm_controller/joint_trajectory "
        "t. ! pi0actionsink name=udp async=false mode=chunk max-action-age=500000000 robot-feedback=false "
        "robot-config=%s target=udp://127.0.0.1:%d "
        "pi0rosimagesrc name=cam_main topic=/main/image_raw ! queue ! mux.main "
        "pi0rosimagesrc name=cam_side topic=/side/image_raw ! queue ! mux.side "
        "pi0rosimagesrc name=cam_top topic=/top/image_raw/compressed compressed=true "
        "! jpegdec ! queue ! mux.top "
        "pi0rosjointsrc name=state robot-config=%s ! queue ! mux.state"
        % (config, config, udp_port, config))
    sent = {"ros": [], "udp": []}

    def on_start(pipe):
        for name in ("ros", "udp"):
            on_action(pipe, name, lambda kind, chunk, step, rows, name=name: sent[name].append(
                {"kind": kind, "chunk": chunk, "step": step, "values": rows}))

    pipe, msgs = run_pipeline(desc, 6.0, on_start)
    robot.stop()
    check(not msgs["error"], "no error: %s" % msgs["error"])
    with open(rec) as f:
        got = json.load(f)
    trajs = got["trajectories"]
    ros = [s for s in sent["ros"]]
    print("  %d trajectories received; the ros2 sink signalled %d messages, the UDP sink %d"
          % (len(trajs), len(ros), len(sent["udp"])))
    check(len([s for s in ros if s["kind"] == "action"]) >= 5, "at least 5 chunks sent")
    # What is published before the robot's subscription is matched (the greeting HOLD, as the
    # node is made at start) is lost, as for any ROS publisher with volatile durability; from
    # then on, one trajectory per message the sink sent, in order.
    check(0 <= len(ros) - len(trajs) <= 2, "one trajectory per message the sink sent, but for "
          "the first before discovery (%d, %d)" % (len(trajs), len(ros)))
    ros = ros[len(ros) - len(trajs):]
    period = int(1e9 / 50)
    for i, (t, s) in enumerate(zip(trajs, ros)):
        where = "trajectory %d (%s)" % (i, s["kind"])
        check(t["joint_names"] == cfg["joints"], where + ": joint names are the configuration's")
        if s["kind"] == "stop":
            check(t["points"] == [], where + ": STOP is an empty trajectory")
            continue
        pts = [p["positions"] for p in t["points"]]
        if s["kind"] == "action":
            # float32 -> float64 is exact: the same numbers, bit for bit.
            check(pts == [[float(x) for x in row] for row in s["values"]],
                  where + ": the positions the sink sent")
            check([p["time_from_start_ns"] for p in t["points"]] ==
                  [k * period for k in range(len(pts))], where + ": one point per row period")
            # The stamp is when the first row is due: when it was sent (ROS time = system time),
            # so the controller has it just after its stamp.
            lag = t["recv_time_ns"] - t["stamp_ns"]
            check(0 <= lag < 100_000_000, where + ": received %.1f ms after its stamp" % (lag / 1e6))
        else:
            check(len(pts) == 1, where + ": HOLD is one point")
        for row in pts:
            check(all(lo - 1e-6 <= x <= hi + 1e-6
                      for x, lo, hi in zip(row, cfg["lower"], cfg["upper"])),
                  where + ": within the robot's limits")
        for r0, r1 in zip(pts, pts[1:]):
            check(all(abs(y - x) <= m + 1e-6 for x, y, m in zip(r0, r1, cfg["max_step"])),
                  where + ": within the robot's step bound")
    # The same chunks over UDP: same rows at the same places, bit for bit.
    udp = {(s["chunk"], s["step"]): s for s in sent["udp"] if s["kind"] == "action"}
    same = 0
    for s in ros:
        u = udp.get((s["chunk"], s["step"])) if s["kind"] == "action" else None
        if u and check(u["values"] == s["values"],
                       "chunk %d: the rows sent to ROS are the rows sent over UDP" % s["chunk"]):
            same += 1
    n = len([s for s in ros if s["kind"] == "action"])
    print("  %d of %d chunks started at the same row in both sinks: all bit for bit equal"
          % (same, n))
    check(same >= max(1, n // 2), "most chunks compared with UDP's (%d of %d)" % (same, n))
    st = stats(pipe, "state")
    check(st["pushed"] > 0 and all(v == 0 for k, v in st.items() if k.startswith("dropped")),
          "the robot's joint states all taken: %s" % st)
    for cam in ("cam_main", "cam_side", "cam_top"):
        c = stats(pipe, cam)
        print("  %s: %s" % (cam, c))
        check(c["pushed"] > 0 and not any(v for k, v in c.items() if k.startswith("dropped")),
              "%s pushed every frame" % cam)
    # Rows the robot pads (side: 480 bytes to 512) are repacked for pi0viewmux, which takes
    # GStreamer's own strides; rows that need no padding (main: 960 bytes) and JPEG go without
    # a copy.
    check(stats(pipe, "cam_main")["copied"] == 0 and stats(pipe, "cam_top")["copied"] == 0,
          "unpadded frames were not copied")
    c = stats(pipe, "cam_side")
    check(c["copied"] == c["pushed"], "padded rows repacked for pi0viewmux")
    sk, su = stats(pipe, "ros"), stats(pipe, "udp")
    check(sk["sent"] > 0 and sk["clamped"] == su["clamped"] == 0 and
          sk["rejected"] == su["rejected"] and sk["stale"] == su["stale"],
          "both sinks sent, clamped nothing, rejected the same: %s / %s"
          % ({k: sk[k] for k in ("sent", "rejected", "clamped", "stale")},
             {k: su[k] for k in ("sent", "rejected", "clamped", "stale")}))
    check(got["counters"]["refused"] == 0, "the robot refused nothing")


def case_feedback(a, tmp, py):
    """Real-time chunking over ROS: the link reports what the controller executes, the sink
    takes the reports (stats.feedback) and refuses none."""
    rec = os.path.join(tmp, "robot-fb.json")
    robot = Peer([os.path.join(HERE, "ros2_robot.py"), "--joints", ",".join(ARM),
                  "--cameras", "main:160x120:rgb8", "--fps", "15", "--rate", "50",
                  "--controller", "arm_controller", "--record", rec, "--duration", "60"],
                 py, os.path.join(tmp, "robot-fb.log"))
    desc = ("pi0viewmux name=mux max-staleness=300000000 max-state-age=100000000 "
            "! cudaprep width=32 height=32 ! queue max-size-buffers=1 leaky=downstream "
            "! pi0infer name=infer model=builtin:pi0-tiny instruction=\"pick\" action-dims=7 "
            "rtc=guided-identity "
            "! pi0actionsink name=sink mode=chunk max-action-age=500000000 robot-config=%s "
            "target=ros2:///arm_controller/joint_trajectory "
            "pi0rosimagesrc topic=/main/image_raw ! queue ! mux.main "
            "pi0rosjointsrc robot-config=%s ! queue ! mux.state" % (CONFIG, CONFIG))
    pipe, msgs = run_pipeline(desc, 5.0)
    robot.stop()
    check(not msgs["error"], "no error: %s" % msgs["error"])
    sk = stats(pipe, "sink")
    print("  sink: feedback %d, feedback-dropped %d" % (sk["feedback"], sk["feedback-dropped"]))
    check(sk["feedback"] > 0, "the sink took the link's reports of what executes")
    check(sk["feedback-dropped"] == 0, "and refused none")
    # pipelines/robot-7dof.json's limits bind here (the untrained model's rows exceed them):
    # what the controller got is within them, and within the step bound from row to row.
    cfg = load_config()
    with open(rec) as f:
        trajs = json.load(f)["trajectories"]
    check(len(trajs) > 5 and sk["clamped"] > 0, "trajectories received, rows clamped")
    for i, t in enumerate(trajs):
        pts = [p["positions"] for p in t["points"]]
        check(all(lo - 1e-6 <= x <= hi + 1e-6 for row in pts
                  for x, lo, hi in zip(row, cfg["lower"], cfg["upper"])),
              "trajectory %d within the robot's limits" % i)
        check(all(abs(y - x) <= m + 1e-6 for r0, r1 in zip(pts, pts[1:])
                  for x, y, m in zip(r0, r1, cfg["max_step"])),
              "trajectory %d within the step bound" % i)


def case_joints_bad(a, tmp, py):
    """Every bad JointState is dropped with its reason counted; only the good samples come out,
    exactly, in the configuration's order."""
    pub = Peer([os.path.join(HERE, "ros2_publish.py"), "joints-bad", "--rounds", "25"], py,
               os.path.join(tmp, "pub.log"))
    desc = ("pi0rosjointsrc name=state joints=j1,j2,j3 qos=reliable depth=100 "
            "! appsink name=out sync=false max-buffers=0 emit-signals=false")
    out = []

    pipe, msgs = run_pipeline(desc, 4.0, lambda pipe: on_sample(
        pipe, "out", lambda b, now: out.append(float32s(b.extract_dup(0, b.get_size())))))
    pub.stop()
    st = stats(pipe, "state")
    print("  ", st)
    for k in ("missing-joint", "non-finite", "lengths", "duplicate-joint", "stamp-past",
              "stamp-future", "no-stamp"):
        check(st["dropped-" + k] > 0, "dropped-%s counted" % k)
    check(st["pushed"] == len(out) and len(out) >= 10, "the good samples came out (%d)" % len(out))
    check(all(abs(s[1] - s[0] - 1) < 1e-5 and abs(s[2] - s[0] - 2) < 1e-5 and s[0] < 10
              for s in out), "only good samples, in the configuration's order: %s" % out[:3])
    warns = [w for w in msgs["warning"] if w.startswith("state")]
    check(0 < len(warns) <= 7 * 5, "warned, at most once a second per reason (%d)" % len(warns))


def case_commands(a, tmp, py):
    """type=commands for a forward command controller: in stream mode each row the sink sends
    on its control clock is one Float64MultiArray on /<controller>/commands, the row as sent."""
    rec = os.path.join(tmp, "robot-cmd.json")
    robot = Peer([os.path.join(HERE, "ros2_robot.py"), "--joints", ",".join(ARM),
                  "--cameras", "main:160x120:rgb8", "--fps", "15", "--rate", "50",
                  "--controller", "fwd_controller", "--commands-topic", "--record", rec,
                  "--duration", "60"], py, os.path.join(tmp, "robot-cmd.log"))
    desc = ("pi0viewmux name=mux max-staleness=300000000 max-state-age=100000000 "
            "! cudaprep width=32 height=32 ! queue max-size-buffers=1 leaky=downstream "
            "! pi0infer model=builtin:pi0-tiny instruction=pick action-dims=7 "
            "! pi0actionsink name=sink mode=stream control-rate=50 robot-config=%s "
            "target=ros2:///fwd_controller/commands?type=commands "
            "pi0rosimagesrc topic=/main/image_raw ! queue ! mux.main "
            "pi0rosjointsrc robot-config=%s ! queue ! mux.state" % (CONFIG, CONFIG))
    sent = []

    # Stream mode: one row per message.
    pipe, msgs = run_pipeline(desc, 4.0, lambda pipe: on_action(
        pipe, "sink", lambda kind, chunk, step, rows: sent.append((kind, rows[0] if rows else []))))
    robot.stop()
    with open(rec) as f:
        got = json.load(f)
    cmds = got["commands"]
    rows = [v for k, v in sent if k == "action"]
    print("   %d commands received, %d rows sent, %d refused"
          % (len(cmds), len(rows), got["counters"]["commands_refused"]))
    check(not msgs["error"], "no error: %s" % msgs["error"])
    check(len(rows) > 20 and got["counters"]["commands_refused"] == 0,
          "rows on the control clock, none refused")
    # The messages in the order sent, as the commands in the order received (the first may
    # have gone out before discovery matched the controller). A row is the row the sink sent;
    # a HOLD is the position the robot measured (docs/ros2.md), so only its size is checked.
    datas = [c["data"] for c in cmds]
    check(all(len(d) == len(ARM) for d in datas), "every command has one value per joint")
    n = len(datas)
    published = [(k, v) for k, v in sent if k in ("action", "hold")]
    check(0 < n and len(published) - n <= 2, "every message arrived, but for the first")
    pairs = list(zip(published[len(published) - n:], datas))
    same = sum(1 for (k, v), d in pairs if k == "action" and d == v)
    acted = sum(1 for (k, _), _d in pairs if k == "action")
    print("   %d of %d rows arrived as commands bit for bit" % (same, acted))
    check(acted > 20 and same == acted, "each command is the row the sink sent, bit for bit")


def case_stamps(a, tmp, py):
    """A message's header stamp is its buffer's time: PTS = running time now minus how long ago
    it was stamped (ROS time), so samples stamped 300 and 100 ms before they were sent come out
    that much earlier on the pipeline's clock than their arrival."""
    pub = Peer([os.path.join(HERE, "ros2_publish.py"), "stamps", "--rounds", "90"], py,
               os.path.join(tmp, "pub-stamps.log"))
    got = []

    pipe, msgs = run_pipeline(
        "pi0rosjointsrc joints=j1,j2,j3 max-age=1000000000 ! appsink name=out sync=false", 3.5,
        lambda pipe: on_sample(pipe, "out", lambda b, now: got.append(
            (now, b.pts, float32s(b.extract_dup(0, b.get_size()))[0]))))
    pub.stop()
    ages = {}
    for now, pts, age_ms in got:
        if now is not None:
            ages.setdefault(int(age_ms), []).append((now - pts) / 1e6)
    for age_ms, seen in sorted(ages.items()):
        seen.sort()
        med = seen[len(seen) // 2]
        print("   stamped %3d ms before sending: PTS %.1f ms before arrival (median of %d)"
              % (age_ms, med, len(seen)))
        # Transport and the pull add a few ms; the stamp's age is what must show.
        check(age_ms <= med < age_ms + 25, "a stamp %d ms old maps %d ms back" % (age_ms, age_ms))
    check(len(ages) == 3, "all three ages seen")


def case_robot_vanishes(a, tmp, py):
    """The robot (the controller subscribing, the joint states publishing) goes away mid-run:
    the sink goes on publishing to nobody, reports no more FEEDBACK (a controller whose robot is
    gone executes nothing), no error, and the pipeline stops at once."""
    rec = os.path.join(tmp, "robot-gone.json")
    robot = Peer([os.path.join(HERE, "ros2_robot.py"), "--joints", ",".join(ARM),
                  "--cameras", "main:160x120:rgb8", "--fps", "15", "--rate", "50",
                  "--controller", "arm_controller", "--record", rec, "--duration", "2.5"],
                 py, os.path.join(tmp, "robot-gone.log"))
    desc = ("pi0viewmux name=mux max-staleness=300000000 max-state-age=100000000 "
            "! cudaprep width=32 height=32 ! queue max-size-buffers=1 leaky=downstream "
            "! pi0infer model=builtin:pi0-tiny instruction=pick action-dims=7 "
            "! pi0actionsink name=sink mode=chunk robot-config=%s "
            "target=ros2:///arm_controller/joint_trajectory "
            "pi0rosimagesrc topic=/main/image_raw ! queue ! mux.main "
            "pi0rosjointsrc robot-config=%s ! queue ! mux.state" % (CONFIG, CONFIG))
    pipe, msgs = run_pipeline(desc, 5.5)
    robot.stop()
    sk = stats(pipe, "sink")
    print("   sink:", {k: sk[k] for k in ("sent", "feedback", "holds", "stops", "dropped")})
    check(not msgs["error"], "no error when the robot goes: %s" % msgs["error"])
    check(sk["sent"] > 0 and sk["feedback"] > 0, "chunks and reports while it was there")
    # No camera, no state, no chunk: the sink's watchdog says STOP (an empty trajectory).
    check(sk["stops"] >= 1, "the watchdog's STOP once it was gone")


def case_graph(a, tmp, py):
    """The elements are ROS 2 nodes as any other: ROS 2's graph (what `ros2 node list` and
    `ros2 topic info -v` show) lists them with their names and namespaces, remapped topics, each
    endpoint's type and QoS (sources best effort by default, the sink reliable)."""
    graph = Peer([os.path.join(HERE, "ros2_publish.py"), "graph", "--expect-node", "arm_sink"],
                 py, os.path.join(tmp, "graph.log"))
    desc = ("pi0rosjointsrc name=state joints=j1,j2 node-name=robot_state namespace=/robot1 "
            "ros-args=\"-r joint_states:=measured_joints\" topic=joint_states ! fakesink "
            "pi0rosimagesrc name=cam topic=/cam_high/image_raw ! fakesink "
            "videotestsrc is-live=true ! video/x-raw,width=32,height=24,framerate=10/1 "
            "! pi0viewmux ! cudaprep width=32 height=32 ! pi0infer model=builtin:pi0-tiny action-dims=2 "
            "! pi0actionsink mode=chunk robot-config=%s "
            "target=\"ros2:///arm/joint_trajectory?node=arm_sink&namespace=/robot1&qos=reliable\""
            % os.path.join(tmp, "robot2.json"))
    with open(os.path.join(tmp, "robot2.json"), "w") as f:
        json.dump({"joints": ["j1", "j2"], "lower": [-1, -1], "upper": [1, 1],
                   "max_step": [0.1, 0.1]}, f)
    pipe, msgs = run_pipeline(desc, 4.0, eos=False)
    graph.stop()
    line = next((l for l in graph.lines if l.startswith("{")), None)
    if not check(line is not None, "the graph was read: %s" % graph.stderr()):
        return
    g = json.loads(line)
    print("   nodes:", g["nodes"])
    check("/robot1/robot_state" in g["nodes"], "the joint source's node, named and namespaced")
    check("/cam" in g["nodes"], "the camera's node, named after the element")
    check("/robot1/arm_sink" in g["nodes"], "the sink's node, named in its target")
    t = g["topics"]
    js = t.get("/robot1/measured_joints", {})
    check(js.get("types") == ["sensor_msgs/msg/JointState"] and
          [e["reliability"] for e in js.get("subscriptions", [])] == ["best_effort"],
          "the remapped joint-state topic, best effort: %s" % js)
    cam = t.get("/cam_high/image_raw", {})
    check(cam.get("types") == ["sensor_msgs/msg/Image"] and
          [e["reliability"] for e in cam.get("subscriptions", [])] == ["best_effort"],
          "the camera topic, best effort: %s" % cam)
    arm = t.get("/arm/joint_trajectory", {})
    check(arm.get("types") == ["trajectory_msgs/msg/JointTrajectory"] and
          [(e["node"], e["reliability"]) for e in arm.get("publishers", [])] ==
          [("arm_sink", "reliable")], "the trajectory topic, published reliably: %s" % arm)
    check(not msgs["error"], "no error: %s" % msgs["error"])


def case_images_bad(a, tmp, py):
    """Bad Image messages are dropped before any byte is read; the good ones (padded rows) come
    out with their stride."""
    pub = Peer([os.path.join(HERE, "ros2_publish.py"), "images-bad", "--rounds", "25"], py,
               os.path.join(tmp, "pub-img.log"))
    # videoconvert to another format reads a GstVideoMeta: the padded rows go on as they are.
    # A fakesink reads none: they are repacked.
    desc = ("pi0rosimagesrc name=cam topic=/cam/image_raw qos=reliable depth=100 "
            "! videoconvert ! video/x-raw,format=BGR ! fakesink name=out "
            "pi0rosimagesrc name=cam2 topic=/cam/image_raw qos=reliable depth=100 ! fakesink")
    pipe, msgs = run_pipeline(desc, 3.5)
    pub.stop()
    c, c2 = stats(pipe, "cam"), stats(pipe, "cam2")
    print("  ", c, "\n   ", c2)
    check(c["pushed"] >= 10, "the good frames came out")
    check(c["copied"] == 0, "without a copy where downstream reads the stride")
    check(c2["copied"] == c2["pushed"] > 0, "repacked where it does not")
    check(c["dropped-geometry"] >= 30 and c["dropped-encoding"] >= 10,
          "short steps, short data, odd NV12 and Bayer dropped")
    check(not msgs["error"], "no error: %s" % msgs["error"])


def case_wrong_type(a, tmp, py):
    """A publisher of another type on the same topic name (std_msgs/String on /joint_states):
    ROS 2 never matches it with the subscription, nothing of it is read, and the joint states of
    a publisher of the right type still arrive."""
    wrong = Peer([os.path.join(HERE, "ros2_publish.py"), "wrong-type", "--rounds", "150"], py,
                 os.path.join(tmp, "pub-wrong.log"))
    good = Peer([os.path.join(HERE, "ros2_publish.py"), "good-joints", "--rounds", "100"], py,
                os.path.join(tmp, "pub-good.log"))
    pipe, msgs = run_pipeline("pi0rosjointsrc name=state joints=j1,j2,j3 ! fakesink", 3.0)
    wrong.stop()
    good.stop()
    st = stats(pipe, "state")
    print("  ", st)
    check(st["pushed"] > 20 and st["pushed"] == st["received"] and not msgs["error"],
          "only the right type arrives, all of it usable")


def case_flood(a, tmp, py):
    """A flood of joint states: taken as they come, never more memory than the depth, no
    error; the pipeline stops at once afterwards."""
    pub = Peer([os.path.join(HERE, "ros2_publish.py"), "flood", "--seconds", "2"], py,
               os.path.join(tmp, "pub-flood.log"))
    pipe, msgs = run_pipeline("pi0rosjointsrc name=state joints=j1,j2,j3 ! fakesink sync=false",
                              2.5)
    pub.stop()
    st = stats(pipe, "state")
    print("  ", st, [l for l in pub.lines if l.startswith("published")])
    check(st["pushed"] > 100 and not msgs["error"], "flood taken")


def case_sim_time(a, tmp, py):
    """use-sim-time: ROS time from /clock; stamps on the sim clock are taken (on the system
    clock they would be 55 years old)."""
    pub = Peer([os.path.join(HERE, "ros2_publish.py"), "sim-time", "--rounds", "100"], py,
               os.path.join(tmp, "pub-sim.log"))
    pipe, msgs = run_pipeline("pi0rosjointsrc name=state joints=j1,j2,j3 use-sim-time=true "
                              "! fakesink", 3.0)
    pub.stop()
    st = stats(pipe, "state")
    print("  ", st)
    check(st["pushed"] > 20, "sim-time stamps taken")
    pipe, msgs = run_pipeline("pi0rosjointsrc name=state joints=j1,j2,j3 ! fakesink", 0.5)
    # Without use-sim-time nothing of the sim run would be taken: checked by the stamp rule
    # (tests/libs/ros2/test_rosconvert.cpp), here only that the element stops cleanly.


def dds_threads():
    """This process's Fast DDS threads (named dds.*), but for the shared-memory watchdog that
    Fast DDS keeps for the process's life whatever runs."""
    names = []
    for t in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/comm" % t) as f:
                names.append(f.read().strip())
        except OSError:
            pass
    return [n for n in names if n.startswith("dds.") and n != "dds.shm.wdog"]


def case_nobody(a, tmp, py):
    """A domain with no one in it: the sources wait, the sink publishes to nobody; PLAYING and
    back to NULL without a hang, many times over; and once the pipeline is in NULL nothing of
    ROS 2 runs in the process any more (the rcl context was shut down with the last node: its
    DDS participant's threads are gone)."""
    desc = ("pi0rosimagesrc name=cam topic=/nobody/image_raw ! fakesink "
            "pi0rosjointsrc name=state joints=a,b ! fakesink")
    for i in range(5):
        pipe, msgs = run_pipeline(desc, 0.3)
        check(not msgs["error"], "no error with nobody there: %s" % msgs["error"])
    check(stats(pipe, "cam")["received"] == 0, "nothing received")
    pipe = Gst.parse_launch(desc)
    pipe.set_state(Gst.State.PLAYING)
    time.sleep(0.5)
    running = dds_threads()
    pipe.set_state(Gst.State.NULL)
    time.sleep(0.2)
    left = dds_threads()
    print("   DDS threads in PLAYING: %d, after NULL: %s" % (len(running), left))
    check(len(running) > 0 and not left, "no DDS thread left after NULL")


def case_camera_stops(a, tmp, py):
    """A camera topic that stops publishing is a stalled camera to pi0viewmux (masked), not the
    end of the stream; when it comes back, its frames are used again."""
    pub = Peer([os.path.join(HERE, "ros2_publish.py"), "camera-stops"], py,
               os.path.join(tmp, "pub-stop.log"))
    desc = ("pi0viewmux name=mux max-staleness=200000000 "
            "! fakesink "
            "videotestsrc is-live=true ! video/x-raw,format=RGB,width=64,height=48,framerate=15/1 "
            "! mux.main "
            "pi0rosimagesrc name=cam topic=/cam/image_raw qos=reliable ! queue ! mux.side")
    pipe, msgs = run_pipeline(desc, 4.5)
    pub.stop()
    s = pipe.get_by_name("mux").get_property("stats")
    side = s.get_value("side")
    print("  side:", side.to_string() if side else None)
    used, masked = side.get_value("used"), side.get_value("masked")
    check(used > 10 and masked > 5, "used, then masked while stopped (used %d, masked %d)"
          % (used, masked))
    check(not msgs["error"], "no error: %s" % msgs["error"])


CASES = {"chain": case_chain, "feedback": case_feedback, "commands": case_commands,
         "stamps": case_stamps,
         "robot-vanishes": case_robot_vanishes, "graph": case_graph, "joints-bad": case_joints_bad,
         "images-bad": case_images_bad, "wrong-type": case_wrong_type, "flood": case_flood,
         "sim-time": case_sim_time, "nobody": case_nobody, "camera-stops": case_camera_stops}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--distro", required=True, help="jazzy, kilted: its peers run from .ros-<distro>-venv")
    ap.add_argument("--plugin-dir", required=True, help="where libgstpi0ros2.so is")
    ap.add_argument("--pi0-plugin-dir", required=True, help="where libgstpi0.so is")
    ap.add_argument("--cases", default=",".join(CASES))
    a = ap.parse_args()
    venv = os.path.join(ROOT, ".ros-%s-venv" % a.distro)
    py = os.path.join(venv, "bin", "python")
    if os.environ.get("PI0_ROS2_IN_NETNS") != "1":
        if not os.path.exists(py):
            print("SKIP: no %s (scripts/setup.sh installs it)" % venv)
            return SKIP
        if not os.path.exists(os.path.join(a.plugin_dir, "libgstpi0ros2.so")):
            print("SKIP: no pi0ros2 plugin in %s (-Dros2)" % a.plugin_dir)
            return SKIP
        ok, why = ros2_netns.can_make_netns()
        if not ok:
            print("SKIP: every DDS test runs in a network namespace of its own, and %s" % why)
            return SKIP
        # A domain of the test's own and logs out of ~/.ros: Fast DDS also moves data through
        # /dev/shm, which network namespaces do not separate (tests/ros2/ros2_netns.py).
        log_dir = tempfile.mkdtemp(prefix="pi0-ros2-log-")
        env = ros2_netns.ros_env(a.distro, domain_id=1 + os.getpid() % 100, log_dir=log_dir)
        env["PI0_ROS2_IN_NETNS"] = "1"
        env["GST_PLUGIN_PATH_1_0"] = "%s:%s" % (a.plugin_dir, a.pi0_plugin_dir)
        env["GST_REGISTRY"] = os.path.join(tempfile.gettempdir(),
                                           "pi0-ros2-%s-%d.registry" % (a.distro, os.getpid()))
        # Debian's Python, which has PyGObject (the venvs do not).
        cmd = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh",
               "/usr/bin/python3", os.path.abspath(__file__)] + sys.argv[1:]
        r = subprocess.call(cmd, env=env)
        try:
            os.unlink(env["GST_REGISTRY"])
        except OSError:
            pass
        shutil.rmtree(log_dir, ignore_errors=True)
        return r
    global Gst
    import gi
    gi.require_version("Gst", "1.0")
    from gi.repository import Gst as G
    Gst = G
    Gst.init(None)
    if not Gst.ElementFactory.find("pi0rosjointsrc") or not Gst.ElementFactory.find("pi0infer"):
        print("FAIL: the plugins did not load from %s" % os.environ["GST_PLUGIN_PATH_1_0"])
        return 1
    with tempfile.TemporaryDirectory(prefix="pi0-ros2-") as tmp:
        for name in a.cases.split(","):
            print("== %s (%s)" % (name, a.distro), flush=True)
            before = len(failures)
            try:
                CASES[name](a, tmp, py)
            except Exception:
                traceback.print_exc()
                failures.append(name + ": exception")
            print("   %s" % ("ok" if len(failures) == before else "FAILED"), flush=True)
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
