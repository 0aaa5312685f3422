#!/usr/bin/env python3
"""Self-test of the test robot (ros2_robot.py) against a checker node written here with rclpy:
what the pi0ros2 tests rely on the robot for, checked before they rely on it.

    python3 tests/ros2/test_ros2_robot_selftest.py --distro jazzy|kilted [--keep DIR]

Exit 0: passed; 77: skipped (a line "SKIP: why": no ROS venv, no network namespace); 1: failed.
Any Python 3.8+ runs this part; it runs every ROS 2 process in a network namespace with only lo
up (ros2_netns.py), with the venv's Python:

  bad arguments  the robot exits 2 with a message on stderr; beside them, a robot that exits
                 0 after --duration 1, having written its record
  robot          ros2_robot.py (rows padded, sensor cameras of every raw encoding, jpeg, png,
                 /arm_controller/commands) with the checker (--role checker) beside it:
                 joint states (every name, the robot's fixed order, stamps increasing),
                 each camera message's fields and content, a command, a 3-point trajectory
                 stamped 200 ms ahead executed on time (judged by the stamps of /joint_states,
                 within 2 control periods), a stop by an empty trajectory, a refused trajectory
                 with an unknown joint; then the robot's --record against what was sent
  sim time       ros2_robot.py --use-sim-time (unpadded rows, best-effort joint states, no extra
                 joints) with --role simcheck: /clock from 1000 s at real speed, stamps on it,
                 a command and a trajectory stamped on the simulated clock
"""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import ros2_netns  # noqa: E402

S = 1_000_000_000
RATE = 50.0
PERIOD_NS = int(S / RATE)
TOL_NS = 2 * PERIOD_NS
CLOCK_RATE_HZ = 100

ROBOT_ARGS = ["--rate", str(RATE), "--fps", "20", "--pad-rows", "--commands-topic",
              "--cameras", "main:50x40:rgb8,side:40x30:bgr8,gray:30x20:mono8,rgba:20x10:rgba8,"
                           "bgra:20x10:bgra8,yuv:32x8:yuv422_yuy2,top:64x48:jpeg,shot:40x30:png"]
SIM_ARGS = ["--rate", str(RATE), "--fps", "20", "--use-sim-time", "--joints", "a,b,c",
            "--extra-joints", "", "--initial", "0.5,-0.5,1", "--state-qos", "best-effort",
            "--controller", "ctl", "--commands-topic", "/fwd/commands",
            "--cameras", "cam:30x20:rgb8,yuv:16x4:yuv422_yuy2"]


class Checks:
    """Counts checks; prints each failure, and passes when asked to (-v)."""

    def __init__(self, verbose):
        self.passed = self.failed = 0
        self.verbose = verbose

    def add(self, output):
        """Adds the counts of a child's "NAME: N passed, M failed" line; False if none."""
        for line in output.splitlines():
            m = re.match(r"^\w+: (\d+) passed, (\d+) failed$", line)
            if m:
                self.passed += int(m.group(1))
                self.failed += int(m.group(2))
                return True
        return False

    def __call__(self, ok, what):
        if ok:
            self.passed += 1
            if self.verbose:
                print(f"ok: {what}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL: {what}", flush=True)
        return ok


# --- the checker nodes (inside the namespace, with the venv's Python) ----------------------

def interp(knots, t):
    """The position (one per joint) of a piecewise-linear reference at t: knots [(t, [p])],
    held before the first and after the last."""
    import numpy as np
    ts = np.array([k[0] for k in knots], np.float64)
    ps = np.array([k[1] for k in knots], np.float64)
    return np.array([np.interp(t, ts, ps[:, j]) for j in range(ps.shape[1])])


def within_window(knots, t, pos, tol_ns, eps=1e-9):
    """True if pos is what the reference takes somewhere within [t - tol, t + tol]."""
    import numpy as np
    times = [t - tol_ns, t + tol_ns] + [k[0] for k in knots if t - tol_ns < k[0] < t + tol_ns]
    vals = np.array([interp(knots, x) for x in times])
    return bool(np.all(pos >= vals.min(axis=0) - eps) and np.all(pos <= vals.max(axis=0) + eps))


class Peer:
    """The checker's node: /joint_states and cameras in, trajectories and commands out."""

    def __init__(self, robot, name, state_qos_reliable, sim):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import (HistoryPolicy, QoSProfile, ReliabilityPolicy,
                               qos_profile_sensor_data)
        from sensor_msgs.msg import CompressedImage, Image, JointState
        from std_msgs.msg import Float64MultiArray
        from trajectory_msgs.msg import JointTrajectory

        self.robot = robot
        self.node = rclpy.create_node(name)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self.states = []   # (stamp_ns, names, positions, velocities, efforts, checker time)
        self.images = {c["name"]: [] for c in robot.cameras}
        self.clock = []    # (clock_ns, checker time)
        state_qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=200,
                               reliability=ReliabilityPolicy.RELIABLE if state_qos_reliable
                               else ReliabilityPolicy.BEST_EFFORT)
        self.node.create_subscription(JointState, "/joint_states", self.on_state, state_qos)
        self.image_subs = []
        for cam in robot.cameras:
            compressed = cam["encoding"] in ("jpeg", "png")
            topic = f"/{cam['name']}/image_raw" + ("/compressed" if compressed else "")
            self.image_subs.append(self.node.create_subscription(
                CompressedImage if compressed else Image, topic,
                lambda m, n=cam["name"]: self.images[n].append(m), qos_profile_sensor_data))
        if sim:
            from rosgraph_msgs.msg import Clock
            self.node.create_subscription(
                Clock, "/clock",
                lambda m: self.clock.append((m.clock.sec * S + m.clock.nanosec,
                                             time.monotonic_ns())), qos_profile_sensor_data)
        reliable10 = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10,
                                reliability=ReliabilityPolicy.RELIABLE)
        self.traj_pub = self.node.create_publisher(
            JointTrajectory, f"/{robot.controller}/joint_trajectory", reliable10)
        self.cmd_pub = self.node.create_publisher(Float64MultiArray, robot.commands_topic,
                                                  reliable10)
        self.JointTrajectory, self.Float64MultiArray = JointTrajectory, Float64MultiArray

    def on_state(self, m):
        self.states.append((m.header.stamp.sec * S + m.header.stamp.nanosec, list(m.name),
                            list(m.position), list(m.velocity), list(m.effort),
                            self.now_ns()))

    def now_ns(self):
        return self.node.get_clock().now().nanoseconds

    def sim_now_ns(self):
        """/clock now, from the message taken with the least delay (the latest may have waited
        in the queue behind others)."""
        mono = time.monotonic_ns()
        return max(c + (mono - m) for c, m in self.clock[-50:])

    def drop_images(self):
        """Ends the camera subscriptions once checked: taking every frame in Python is what
        would make the checker lag on a busy machine."""
        for sub in self.image_subs:
            self.node.destroy_subscription(sub)
        self.image_subs = []

    def spin_for(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=min(0.01, max(0.0, end - time.monotonic())))

    def spin_until(self, pred, timeout):
        end = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > end:
                return False
            self.executor.spin_once(timeout_sec=0.01)
        return True

    def arm(self, state):
        """The arm's positions of a state, in --joints order."""
        import numpy as np
        index = {n: i for i, n in enumerate(state[1])}
        return np.array([state[2][index[j]] for j in self.robot.joints])

    def latest_arm(self):
        return self.arm(self.states[-1])

    def send_trajectory(self, stamp_ns, names, points):
        """points: [(time_from_start_ns, positions)]."""
        from trajectory_msgs.msg import JointTrajectoryPoint
        msg = self.JointTrajectory()
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, S)
        msg.joint_names = list(names)
        for tfs, pos in points:
            pt = JointTrajectoryPoint()
            pt.positions = [float(v) for v in pos]
            pt.time_from_start.sec, pt.time_from_start.nanosec = divmod(tfs, S)
            msg.points.append(pt)
        self.traj_pub.publish(msg)

    def send_command(self, values):
        msg = self.Float64MultiArray()
        msg.data = [float(v) for v in values]
        self.cmd_pub.publish(msg)


def check_image(check, robot_mod, robot, cam, msgs):
    """Fields and content of the first messages of one camera."""
    import zlib
    import numpy as np
    name, w, h, enc = cam["name"], cam["width"], cam["height"], cam["encoding"]
    frames = []
    for m in msgs[:3]:
        if enc in ("jpeg", "png"):
            data = bytes(m.data)
            check(m.format == enc, f"{name}: format {m.format!r} == {enc!r}")
            if enc == "jpeg":
                sof = data.find(b"\xff\xc0")
                dims = (int.from_bytes(data[sof + 5:sof + 7], "big"),
                        int.from_bytes(data[sof + 7:sof + 9], "big")) if sof > 0 else None
                check(data[:2] == b"\xff\xd8" and data[-2:] == b"\xff\xd9" and dims == (h, w),
                      f"{name}: a baseline JPEG of {w}x{h} (SOF0 says {dims})")
            else:
                ok = data[:8] == b"\x89PNG\r\n\x1a\n"
                if ok:
                    # IHDR then one IDAT, as ros2_robot.encode_png writes: lossless, so exact.
                    pw, ph = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
                    idat = data.find(b"IDAT")
                    n = int.from_bytes(data[idat - 4:idat], "big")
                    raw = np.frombuffer(zlib.decompress(data[idat + 4:idat + 4 + n]), np.uint8)
                    rgb = raw.reshape(ph, 1 + pw * 3)[:, 1:].reshape(ph, pw, 3)
                    k = int(rgb[0, 0, 0])
                    frame = next((k + 256 * j for j in range(64) if np.array_equal(
                        rgb, robot_mod.frame_rgb(k + 256 * j, w, h))), None)
                    ok = (pw, ph) == (w, h) and frame is not None
                    frames.append(frame)
                check(ok, f"{name}: a PNG of {w}x{h} holding frame_rgb(some frame)")
            continue
        bpp = robot_mod.ENCODINGS[enc]
        step = robot_mod.row_step(w, enc, robot.pad_rows)
        check((m.width, m.height, m.encoding, m.is_bigendian) == (w, h, enc, 0),
              f"{name}: {m.width}x{m.height} {m.encoding} big-endian {m.is_bigendian}")
        check(m.step >= w * bpp and m.step == step
              and (m.step % 64 == 0 if robot.pad_rows else m.step == w * bpp),
              f"{name}: step {m.step} (width {w} x {bpp} B, padded: {robot.pad_rows})")
        check(len(m.data) == m.step * h, f"{name}: {len(m.data)} bytes == step x height")
        check(m.header.frame_id == f"{name}_optical_frame", f"{name}: frame_id")
        if len(m.data) != m.step * h:
            continue
        rows = np.frombuffer(bytes(m.data), np.uint8).reshape(h, m.step)
        red0 = {"bgr8": 2, "bgra8": 2}.get(enc, 0)  # byte of pixel (0, 0) that is frame % 256
        k = int(rows[0, red0])
        frame = next((k + 256 * j for j in range(64) if np.array_equal(
            rows[:, :w * bpp], robot_mod.frame_pixels(k + 256 * j, w, h, enc))), None)
        check(frame is not None, f"{name}: content is frame_pixels(some frame)")
        check(bool(np.all(rows[:, w * bpp:] == robot_mod.PAD_BYTE)), f"{name}: padding bytes")
        frames.append(frame)
    if frames and None not in frames:
        check(all(b > a for a, b in zip(frames, frames[1:])),
              f"{name}: frames differ and count up {frames}")
    if enc == "jpeg" and len(msgs) > 1:
        check(bytes(msgs[0].data) != bytes(msgs[1].data), f"{name}: JPEG frames differ")


def check_states(check, robot_mod, robot, states, rate):
    """Names, order, arrays and stamps of a run of joint states."""
    import numpy as np
    expected = robot_mod.published_order(robot.joints, robot.extra_joints, robot.order_seed)
    names = states[0][1]
    check(sorted(names) == sorted(robot.joints + robot.extra_joints),
          f"joint states name every joint once: {names}")
    check(all(s[1] == names for s in states), "every joint state has the same order")
    check(names == expected, f"the order is the robot's fixed one {expected}")
    arm_order = [n for n in names if n in robot.joints]
    check(len(robot.joints) < 2 or arm_order != robot.joints,
          f"the arm's joints are not in their configured order: {arm_order}")
    check(all(len(s[2]) == len(s[1]) == len(s[3]) and s[4] == [] for s in states),
          "position and velocity for every joint, effort empty")
    stamps = [s[0] for s in states]
    check(all(b > a for a, b in zip(stamps, stamps[1:])), "stamps increase")
    gaps = np.diff(stamps)
    check(abs(np.median(gaps) - S / rate) < 0.3 * S / rate,
          f"stamps {np.median(gaps) / 1e6:.1f} ms apart (rate {rate} Hz)")
    extra_ok = all(s[2][s[1].index(n)] == robot_mod.EXTRA_JOINT_BASE + i
                   for s in states for i, n in enumerate(robot.extra_joints))
    check(extra_ok, "extra joints at 10 + i")


def role_checker(args):
    import numpy as np
    import rclpy
    import ros2_robot
    robot = ros2_robot.parse_args(json.loads(args.robot_args))
    check = Checks(args.verbose)
    rclpy.init()
    peer = Peer(robot, "selftest_checker", state_qos_reliable=True, sim=False)
    report = {}
    try:
        up = peer.spin_until(lambda: (len(peer.states) > 0
                                      and peer.traj_pub.get_subscription_count() > 0
                                      and peer.cmd_pub.get_subscription_count() > 0
                                      and all(len(v) >= 3 for v in peer.images.values())), 15)
        if not check(up, f"robot discovered: states {len(peer.states)}, trajectory subscribers "
                         f"{peer.traj_pub.get_subscription_count()}, images "
                         f"{ {k: len(v) for k, v in peer.images.items()} }"):
            return 1
        t_seen = peer.now_ns()
        peer.spin_until(lambda: len(peer.states) >= 30, 5)
        check_states(check, ros2_robot, robot, peer.states, RATE)
        check(all(abs(s[5] - s[0]) < S // 2 for s in peer.states),
              "stamps are the robot's ROS time now (within 0.5 s of the checker's)")
        check(bool(np.all(peer.latest_arm() == robot.initial)), "the arm starts at --initial")
        for cam in robot.cameras:
            check_image(check, ros2_robot, robot, cam, peer.images[cam["name"]])
        peer.drop_images()

        # A command of the wrong length is refused; a right one sets the position at once.
        n = len(robot.joints)
        peer.send_command([0.1] * (n - 1))
        cmd = [0.1 * (i + 1) for i in range(n)]
        peer.send_command(cmd)
        check(peer.spin_until(lambda: np.allclose(peer.latest_arm(), cmd, atol=0, rtol=0), 2),
              f"the command {cmd} is executed")
        peer.spin_for(0.1)
        check(bool(np.all(peer.latest_arm() == cmd)), "and held")

        # Three points, joint names reversed, stamped 200 ms ahead.
        names = list(reversed(robot.joints))
        p_before = np.array(cmd)
        goals = [p_before + d for d in (0.3, -0.2, 0.5)]
        tfs = [300_000_000, 600_000_000, 900_000_000]
        t0 = peer.now_ns() + 200_000_000
        first = len(peer.states)
        peer.send_trajectory(t0, names, [(t, g[::-1]) for t, g in zip(tfs, goals)])
        end = t0 + tfs[-1]
        peer.spin_until(lambda: peer.states[-1][0] > end + 400_000_000, 5)
        knots = [(t0, p_before)] + [(t0 + t, g) for t, g in zip(tfs, goals)]
        run = peer.states[first:]
        off = [(s[0], peer.arm(s)) for s in run if not within_window(knots, s[0], peer.arm(s),
                                                                    TOL_NS)]
        check(not off and len(run) > 40,
              f"{len(run)} states follow the trajectory within {TOL_NS / 1e6:.0f} ms"
              + (f"; off: {[(t - t0, list(p)) for t, p in off[:3]]}" if off else ""))
        held = [s for s in run if s[0] < t0 - TOL_NS]
        check(held and all(np.array_equal(peer.arm(s), p_before) for s in held),
              f"{len(held)} states before the start hold the position")
        moving = [s for s in run if t0 + TOL_NS < s[0] < end - TOL_NS]
        check(len(moving) >= 0.8 * (end - t0) / PERIOD_NS - 2 * 2,
              f"{len(moving)} states while it moves")
        after = [s for s in run if s[0] > end + TOL_NS]
        check(after and all(np.array_equal(peer.arm(s), goals[-1]) for s in after),
              f"{len(after)} states after the end hold the last point")
        report["timed"] = {"stamp_ns": t0, "joint_names": names,
                           "tfs": tfs, "positions": [list(g[::-1]) for g in goals]}

        # Two joints towards far goals over 2 s (stamp 0: now), stopped by an empty trajectory.
        p_start = peer.latest_arm()
        sub = robot.joints[1::-1] if n > 1 else robot.joints[:1]
        sent = peer.now_ns()
        peer.send_trajectory(0, sub, [(2 * S, [5.0] * len(sub))])
        peer.spin_for(0.5)
        stop_at = peer.now_ns()
        peer.send_trajectory(0, [], [])
        peer.spin_until(lambda: peer.states[-1][0] > stop_at + 500_000_000, 3)
        after = [s for s in peer.states if s[0] > stop_at + 100_000_000]
        stopped = peer.arm(after[0]) if after else None
        check(after and all(np.array_equal(peer.arm(s), stopped) for s in after),
              f"{len(after)} states after the empty trajectory hold still")
        idx = [robot.joints.index(j) for j in sub]
        if stopped is not None:
            frac = (stopped[idx] - p_start[idx]) / (5.0 - p_start[idx])
            expect = (stop_at - sent) / (2 * S)
            check(bool(np.all(np.abs(frac - expect) < 0.06)),
                  f"it stopped where it was: {np.round(frac, 3)} of the way, sent "
                  f"{expect:.3f} of the way")
            others = [i for i in range(n) if i not in idx]
            check(bool(np.all(stopped[others] == p_start[others])),
                  "joints the trajectory did not name held")

        # Unknown joint: refused, nothing moves.
        before = peer.latest_arm()
        mark = len(peer.states)
        peer.send_trajectory(0, [robot.joints[0], "no_such_joint"], [(100_000_000, [9.0, 9.0])])
        peer.spin_for(0.4)
        check(len(peer.states) > mark and all(np.array_equal(peer.arm(s), before)
                                              for s in peer.states[mark:]),
              "a trajectory naming an unknown joint changes nothing")
        report.update(first_state_ns=t_seen, command=cmd)
    finally:
        print("REPORT " + json.dumps(report), flush=True)
        print(f"checker: {check.passed} passed, {check.failed} failed", flush=True)
        peer.node.destroy_node()
        rclpy.try_shutdown()
    return 1 if check.failed else 0


def role_simcheck(args):
    import numpy as np
    import rclpy
    import ros2_robot
    robot = ros2_robot.parse_args(json.loads(args.robot_args))
    check = Checks(args.verbose)
    rclpy.init()
    peer = Peer(robot, "selftest_simcheck", state_qos_reliable=False, sim=True)
    try:
        up = peer.spin_until(lambda: (len(peer.states) >= 10 and len(peer.clock) >= 10
                                      and peer.traj_pub.get_subscription_count() > 0
                                      and peer.cmd_pub.get_subscription_count() > 0
                                      and all(len(v) >= 3 for v in peer.images.values())), 15)
        if not check(up, f"robot discovered: states {len(peer.states)}, clock "
                         f"{len(peer.clock)}"):
            return 1
        clock = [c for c, _ in peer.clock]
        check(ros2_robot.SIM_START_NS <= clock[0] < ros2_robot.SIM_START_NS + 30 * S
              and all(b > a for a, b in zip(clock, clock[1:])),
              f"/clock counts up from 1000 s: {clock[0] / S:.3f} s")
        (c0, m0), (c1, m1) = peer.clock[0], peer.clock[-1]
        check(abs((c1 - c0) - (m1 - m0)) < 50_000_000, "/clock runs at real speed")
        check_states(check, ros2_robot, robot, peer.states, RATE)
        check(all(ros2_robot.SIM_START_NS <= s[0] <= peer.clock[-1][0] + 100_000_000
                  for s in peer.states), "joint states are stamped on /clock")
        check(bool(np.all(peer.latest_arm() == robot.initial)), "the arm starts at --initial")
        for cam in robot.cameras:
            check_image(check, ros2_robot, robot, cam, peer.images[cam["name"]])
        peer.drop_images()

        peer.send_command([1.0, 2.0, 3.0])
        check(peer.spin_until(lambda: np.array_equal(peer.latest_arm(), [1, 2, 3]), 2),
              "a command on --commands-topic is executed")
        t0 = peer.sim_now_ns() + 200_000_000
        goal = np.array([1.5, 2.5, 2.0])
        peer.send_trajectory(t0, robot.joints, [(200_000_000, goal)])
        first = len(peer.states)
        peer.spin_until(lambda: peer.states[-1][0] > t0 + 600_000_000, 4)
        knots = [(t0, np.array([1.0, 2.0, 3.0])), (t0 + 200_000_000, goal)]
        run = peer.states[first:]
        check(len(run) > 20 and all(within_window(knots, s[0], peer.arm(s), TOL_NS)
                                    for s in run),
              f"{len(run)} states follow a trajectory stamped on /clock")
    finally:
        print(f"simcheck: {check.passed} passed, {check.failed} failed", flush=True)
        peer.node.destroy_node()
        rclpy.try_shutdown()
    return 1 if check.failed else 0


# --- the orchestrator (outside the namespace, no ROS) --------------------------------------

def check_record(check, rec, report, robot_args):
    traj = rec["trajectories"]
    c = rec["counters"]
    check([t["accepted"] for t in traj] == [True, True, True, False],
          f"record: 4 trajectories, the last refused: {[t['accepted'] for t in traj]}")
    check((c["trajectories"], c["trajectories_refused"], c["commands"], c["commands_refused"],
           c["refused"]) == (4, 1, 2, 1, 2), f"record: counters {c}")
    cams = [s.split(":")[0] for s in robot_args[robot_args.index("--cameras") + 1].split(",")]
    check(sorted(c["images_published"]) == sorted(cams)
          and all(v > 10 for v in c["images_published"].values()),
          f"record: images published {c['images_published']}")
    check(c["joint_state_msgs_published"] == len(rec["trace"]) > 100,
          f"record: a trace sample per joint state ({len(rec['trace'])})")
    timed = report.get("timed")
    if timed and traj:
        t = traj[0]
        check(t["stamp_ns"] == timed["stamp_ns"] and t["joint_names"] == timed["joint_names"]
              and [p["time_from_start_ns"] for p in t["points"]] == timed["tfs"]
              and [p["positions"] for p in t["points"]] == timed["positions"]
              and all(p["velocities"] == [] for p in t["points"])
              and 0 < timed["stamp_ns"] - t["recv_time_ns"] < 200_000_000,
              "record: the timed trajectory as sent, received before its start")
    if len(traj) >= 3:
        check(traj[2]["points"] == [] and traj[2]["stamp_ns"] == 0,
              "record: the empty trajectory")
        check("no_such_joint" in (traj[3]["error"] or ""),
              f"record: why refused: {traj[3]['error']}")
    cmds = rec["commands"]
    check(len(cmds) == 2 and not cmds[0]["accepted"] and cmds[1]["data"] == report.get("command"),
          "record: the refused command and the executed one")
    check(list(rec) == ["schema", "clock", "node", "arm_joints", "extra_joints",
                        "published_order", "initial", "trajectory_topic", "commands_topic",
                        "cameras", "trajectories", "commands", "counters", "trace",
                        "trace_dropped"], "record: the documented keys")


def show(results):
    for r in results:
        print(f"--- {r.name}: exit {r.returncode}{' (timed out)' if r.timed_out else ''}"
              f"{' (' + r.error + ')' if r.error else ''}")
        for key in ("stdout", "stderr"):
            text = getattr(r, key).strip()
            if text:
                print(f"  {key}:\n" + "\n".join("    " + line for line in text.splitlines()[-40:]))


def orchestrate(args):
    py = ros2_netns.venv_python(args.distro)
    if not os.path.exists(py):
        print(f"SKIP: no {ros2_netns.venv_dir(args.distro)} (scripts/setup.sh installs it)")
        return 77
    ok, why = ros2_netns.can_make_netns()
    if not ok:
        print(f"SKIP: {why}")
        return 77
    check = Checks(args.verbose)
    robot_py = os.path.join(HERE, "ros2_robot.py")
    me = os.path.abspath(__file__)
    tmp = args.keep or tempfile.mkdtemp(prefix=f"pi0-ros2-selftest-{args.distro}-")
    os.makedirs(tmp, exist_ok=True)
    # A domain of its own: a second fence beside the namespace, for runs side by side.
    env = ros2_netns.ros_env(args.distro, domain_id=1 + os.getpid() % 100,
                             log_dir=os.path.join(tmp, "ros-log"))
    t_start = time.monotonic()

    bad = [["--cameras", "x:10x10:foo"], ["--joints", "a,a"], ["--rate", "0"],
           ["--initial", "1,2"], ["--cameras", "y:33x4:yuv422_yuy2"], ["--extra-joints",
                                                                      "joint1"]]
    # Beside them, a robot that stops by itself after --duration.
    short = os.path.join(tmp, "duration.json")
    results = ros2_netns.run_in_netns(
        [[py, robot_py] + b for b in bad]
        + [[py, robot_py, "--duration", "1", "--cameras", "", "--record", short]],
        env=env, timeout=30)
    for b, r in zip(bad, results):
        check(r.returncode == 2 and "error:" in r.stderr, f"bad arguments {b}: exit 2 "
              f"(got {r.returncode}) with a message")
    r = results[-1]
    trace = []
    if os.path.exists(short):
        with open(short, encoding="utf-8") as f:
            trace = json.load(f)["trace"]
    check(r.returncode == 0 and not r.timed_out and r.stdout == "ready\n"
          and 0.9 * S < trace[-1][0] - trace[0][0] < 1.1 * S if trace else False,
          f"--duration 1: exit {r.returncode}, \"ready\", a record of "
          f"{(trace[-1][0] - trace[0][0]) / S if trace else 0:.2f} s")

    phases = [("bad arguments", time.monotonic() - t_start)]
    record = os.path.join(tmp, "robot.json")
    results = ros2_netns.run_in_netns([
        ros2_netns.Command([py, robot_py, "--record", record] + ROBOT_ARGS, daemon=True,
                           ready="ready", name="robot"),
        ros2_netns.Command([py, me, "--role", "checker", "--robot-args", json.dumps(ROBOT_ARGS)]
                           + (["-v"] if args.verbose else []), name="checker")],
        env=env, timeout=60)
    robot, checker = results
    if args.verbose or robot.returncode != 0 or checker.returncode != 0:
        show(results)
    check(robot.returncode == 0 and not robot.timed_out, "robot: exit 0 on SIGINT")
    counted = check.add(checker.stdout)
    check(checker.returncode == 0 and counted, "checker: passed")
    report = next((json.loads(line[7:]) for line in checker.stdout.splitlines()
                   if line.startswith("REPORT ")), {})
    if check(os.path.exists(record), "robot: --record written"):
        with open(record, encoding="utf-8") as f:
            check_record(check, json.load(f), report, ROBOT_ARGS)

    phases.append(("robot", time.monotonic() - t_start - sum(t for _, t in phases)))
    record = os.path.join(tmp, "sim.json")
    results = ros2_netns.run_in_netns([
        ros2_netns.Command([py, robot_py, "--record", record] + SIM_ARGS, daemon=True,
                           ready="ready", name="robot"),
        ros2_netns.Command([py, me, "--role", "simcheck", "--robot-args", json.dumps(SIM_ARGS)]
                           + (["-v"] if args.verbose else []), name="simcheck")],
        env=env, timeout=60)
    if args.verbose or any(r.returncode != 0 for r in results):
        show(results)
    check(results[0].returncode == 0 and not results[0].timed_out, "sim robot: exit 0")
    counted = check.add(results[1].stdout)
    check(results[1].returncode == 0 and counted, "simcheck: passed")
    if check(os.path.exists(record), "sim robot: --record written"):
        with open(record, encoding="utf-8") as f:
            rec = json.load(f)
        ran = (rec["trace"][-1][0] - rec["trace"][0][0]) / S
        check(rec["clock"] == "sim"
              and rec["counters"]["clock_msgs_published"] > 0.7 * ran * CLOCK_RATE_HZ
              and rec["trace"][0][0] >= 1000 * S and rec["commands_topic"] == "/fwd/commands",
              "sim record: on the simulated clock")

    phases.append(("sim time", time.monotonic() - t_start - sum(t for _, t in phases)))
    kept = check.failed or args.keep
    if not kept:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"ros2 robot selftest ({args.distro}, "
          + ", ".join(f"{name} {t:.1f} s" for name, t in phases)
          + (f", files in {tmp}" if kept else "") + "):")
    print(f"{check.passed} passed, {check.failed} failed")
    return 1 if check.failed else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--distro", choices=ros2_netns.DISTROS, default="jazzy")
    p.add_argument("--keep", metavar="DIR", help="write the robot's records and logs here")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--role", choices=("checker", "simcheck"), help=argparse.SUPPRESS)
    p.add_argument("--robot-args", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.role == "checker":
        return role_checker(args)
    if args.role == "simcheck":
        return role_simcheck(args)
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
