#!/usr/bin/env python3
"""A simulated ROS 2 robot written with rclpy, not with this project's code: the peer that the
pi0ros2 elements' tests and the ROS 2 demo run against. Run it inside a network namespace with
only lo up (tests/ros2/ros2_netns.py), with a ROS venv's Python:

    .ros-jazzy-venv/bin/python tests/ros2/ros2_robot.py --duration 10 --record out.json

What it publishes:
  /joint_states         sensor_msgs/JointState at --rate Hz: the arm's executed positions and
                        velocities plus --extra-joints (extra joint i sits at 10 + i), all in a
                        fixed shuffled order (--order-seed), effort empty; header.stamp = the
                        robot's clock when the position was computed. RELIABLE keep-last 10
                        (--state-qos best-effort for BEST_EFFORT).
  /<cam>/image_raw      sensor_msgs/Image for raw --cameras, at --fps, sensor-data QoS
                        (BEST_EFFORT, VOLATILE, keep-last 5); rows padded to 64 bytes with
                        --pad-rows (padding bytes are 0xEE), frame_id "<cam>_optical_frame".
  /<cam>/image_raw/compressed
                        sensor_msgs/CompressedImage for jpeg/png cameras, format "jpeg"/"png":
                        the bytes of --jpeg-file/--png-file, else frame_pixels() encoded here
                        (a PNG by zlib, a baseline JPEG by the small encoder below).
  /clock                rosgraph_msgs/Clock at 100 Hz with --use-sim-time: 1000 s at start,
                        advancing at real speed; every stamp and every trajectory is then on it.

What it executes, as ros2_control's JointTrajectoryController does:
  /<controller>/joint_trajectory  trajectory_msgs/JointTrajectory, RELIABLE keep-last 10.
      header.stamp (zero: on receipt) is when the points' time_from_start count from; a new
      trajectory replaces whatever was planned from its start on; positions are interpolated
      linearly from the position at the start to point 0, then between points, and held after
      the last; a stamp in the past starts now, from where the robot is, towards the first
      point not yet due. joint_names in any order, a subset of the arm's joints (the others
      hold). No points: stop now and hold. Refused (logged, counted, nothing changes): unknown
      or repeated joint names, a point whose positions do not match joint_names, velocities of
      another length, non-finite values, time_from_start not increasing.
  --commands-topic  std_msgs/Float64MultiArray: the position, set at once (and what was planned
      is dropped); a length other than the arm's is refused.

It prints "ready" on stdout once its publishers and subscriptions exist, and exits 0 on SIGINT,
SIGTERM or after --duration, writing --record (see write_record() for the schema). Image content
is frame_pixels(frame, width, height, encoding), so a test can compute what it should receive.
"""
import argparse
import array
import json
import math
import os
import random
import re
import signal
import struct
import sys
import time
import zlib

import numpy as np

ENCODINGS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1, "yuv422_yuy2": 2,
             "jpeg": 0, "png": 0}
PAD_ALIGN = 64
PAD_BYTE = 0xEE
EXTRA_JOINT_BASE = 10.0
SIM_START_NS = 1000 * 1_000_000_000
CLOCK_RATE_HZ = 100.0
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# --- image content --------------------------------------------------------------------------

def frame_rgb(frame, width, height):
    """RGB planes (height, width, 3) uint8 of frame `frame`: a diagonal gradient that shifts by
    one level a frame, and a white bar moving right 4 columns a frame. Column 0 is never under
    the bar, so pixel (0, 0)'s red is frame % 256."""
    x = np.arange(width, dtype=np.int64)[None, :]
    y = np.arange(height, dtype=np.int64)[:, None]
    base = (x + 2 * y + frame) & 0xFF
    rgb = np.stack([base, (base + 85) & 0xFF, (base + 170) & 0xFF], axis=-1).astype(np.uint8)
    if width > 1:
        bar_x = 1 + (frame * 4) % (width - 1)
        rgb[:, bar_x:bar_x + max(1, width // 16), :] = 255
    return rgb


def frame_pixels(frame, width, height, encoding):
    """The unpadded rows (height, width * bytes per pixel) uint8 that frame `frame` of a raw
    camera carries; for jpeg/png, the RGB image that was encoded."""
    rgb = frame_rgb(frame, width, height)
    if encoding in ("rgb8", "jpeg", "png"):
        out = rgb
    elif encoding == "bgr8":
        out = rgb[:, :, ::-1]
    elif encoding in ("rgba8", "bgra8"):
        alpha = np.full((height, width, 1), 255, np.uint8)
        out = np.concatenate([rgb if encoding == "rgba8" else rgb[:, :, ::-1], alpha], axis=-1)
    elif encoding == "mono8":
        out = rgb[:, :, 0]
    elif encoding == "yuv422_yuy2":
        # Y from the red plane; U and V per pixel pair, from the frame so that they move too.
        yuy2 = np.empty((height, width // 2, 4), np.uint8)
        yuy2[:, :, 0] = rgb[:, 0::2, 0]
        yuy2[:, :, 1] = (64 + frame) & 0xFF
        yuy2[:, :, 2] = rgb[:, 1::2, 0]
        yuy2[:, :, 3] = (192 + frame) & 0xFF
        out = yuy2
    else:
        raise ValueError(f"unknown encoding {encoding}")
    return np.ascontiguousarray(out).reshape(height, -1)


def row_step(width, encoding, pad_rows):
    step = width * ENCODINGS[encoding]
    return (step + PAD_ALIGN - 1) // PAD_ALIGN * PAD_ALIGN if pad_rows else step


def image_bytes(frame, width, height, encoding, pad_rows):
    rows = frame_pixels(frame, width, height, encoding)
    step = row_step(width, encoding, pad_rows)
    if step == rows.shape[1]:
        return rows.tobytes(), step
    padded = np.full((height, step), PAD_BYTE, np.uint8)
    padded[:, :rows.shape[1]] = rows
    return padded.tobytes(), step


def encode_png(rgb):
    """An 8-bit RGB PNG, filter 0 on every row."""
    height, width, _ = rgb.shape

    def chunk(kind, payload):
        return (struct.pack(">I", len(payload)) + kind + payload
                + struct.pack(">I", zlib.crc32(kind + payload) & 0xFFFFFFFF))

    raw = np.concatenate([np.zeros((height, 1), np.uint8), rgb.reshape(height, -1)], axis=1)
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw.tobytes(), 1))
            + chunk(b"IEND", b""))


# Baseline JPEG, YCbCr 4:4:4. The Huffman tables are not the standard's: every DC category has
# a 4-bit code and every AC symbol an 8-bit code (both canonical, declared in DHT), which any
# baseline decoder reads and which needs no table written down here.
_ZIGZAG = np.array(sorted(range(64), key=lambda n: (n // 8 + n % 8,  # diagonal, then along it
                                                     (n // 8) * (-1) ** (n // 8 + n % 8 + 1))))
_DCT = np.array([[math.sqrt((1 if u == 0 else 2) / 8) * math.cos((2 * x + 1) * u * math.pi / 16)
                  for x in range(8)] for u in range(8)])
_Q_LUMA = np.array([16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55,
                    14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29, 51, 87, 80, 62,
                    18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
                    49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99])
_Q = [np.maximum(1, _Q_LUMA // 2), np.maximum(1, _Q_LUMA)]  # luma, chroma (natural order)
_AC_SYMBOLS = [0x00, 0xF0] + [(run << 4) | size for run in range(16) for size in range(1, 11)]
_AC_CODE = np.zeros(256, np.int64)
_AC_CODE[_AC_SYMBOLS] = np.arange(len(_AC_SYMBOLS))


def _size(v):
    """JPEG's magnitude category: the bit length of |v|."""
    return np.frexp(np.abs(v).astype(np.float64))[1].astype(np.int64)


def _bits(v, size):
    """The `size` low bits that follow a category: v, or v - 1 in ones' complement if v < 0."""
    return np.where(v >= 0, v, v + (1 << size) - 1)


def encode_jpeg(rgb):
    height, width, _ = rgb.shape
    ph, pw = -height % 8, -width % 8
    img = np.pad(rgb, ((0, ph), (0, pw), (0, 0)), mode="edge").astype(np.float64)
    r, g, b = img[:, :, 0], img[:, :, 1], img[:, :, 2]
    planes = [0.299 * r + 0.587 * g + 0.114 * b - 128,
              -0.168736 * r - 0.331264 * g + 0.5 * b,
              0.5 * r - 0.418688 * g - 0.081312 * b]
    by, bx = img.shape[0] // 8, img.shape[1] // 8
    per_comp = []
    for i, plane in enumerate(planes):
        blocks = plane.reshape(by, 8, bx, 8).transpose(0, 2, 1, 3).reshape(-1, 8, 8)
        dct = (_DCT @ blocks @ _DCT.T).reshape(-1, 64)
        per_comp.append(np.rint(dct / _Q[min(i, 1)].reshape(1, 64))[:, _ZIGZAG].astype(np.int64))
    coefs = np.stack(per_comp, axis=1).reshape(-1, 64)  # MCU order: Y, Cb, Cr of each block
    nblocks = coefs.shape[0]

    # Every code and its bits as (block, order in block, value, length), sorted, then packed.
    dc = coefs[:, 0].reshape(-1, 3)
    diff = np.diff(dc, axis=0, prepend=np.zeros((1, 3), np.int64)).reshape(-1)
    dc_size = _size(diff)
    blk = np.arange(nblocks)
    keys = [blk * 256, blk * 256 + 1]
    vals = [dc_size, _bits(diff, dc_size)]
    lens = [np.full(nblocks, 4), dc_size]
    nb, nk = np.nonzero(coefs[:, 1:])
    nk = nk + 1
    prev = np.where(np.r_[True, nb[1:] != nb[:-1]], 0, np.r_[0, nk[:-1]])
    run = nk - prev - 1
    zrl = run // 16
    v = coefs[nb, nk]
    ac_size = _size(v)
    zb = np.repeat(nb, zrl)
    zk = np.repeat(nk, zrl)
    keys += [zb * 256 + 2 + 3 * zk, nb * 256 + 3 + 3 * nk, nb * 256 + 4 + 3 * nk]
    vals += [np.full(zb.size, _AC_CODE[0xF0]), _AC_CODE[((run % 16) << 4) | ac_size],
             _bits(v, ac_size)]
    lens += [np.full(zb.size, 8), np.full(nb.size, 8), ac_size]
    last = np.zeros(nblocks, np.int64)
    last[nb] = nk  # nonzero() lists a block's coefficients in order: the last write wins
    eob = np.flatnonzero(last != 63)
    keys.append(eob * 256 + 255)
    vals.append(np.full(eob.size, _AC_CODE[0x00]))
    lens.append(np.full(eob.size, 8))
    order = np.argsort(np.concatenate(keys), kind="stable")
    val = np.concatenate(vals)[order]
    ln = np.concatenate(lens)[order]
    item = np.repeat(np.arange(ln.size), ln)
    pos = np.arange(item.size) - np.repeat(np.cumsum(ln) - ln, ln)
    bitstream = (val[item] >> (ln[item] - 1 - pos)) & 1
    bitstream = np.concatenate([bitstream, np.ones(-bitstream.size % 8, np.int64)])
    data = np.packbits(bitstream.astype(np.uint8)).tobytes().replace(b"\xff", b"\xff\x00")

    def segment(marker, payload):
        return struct.pack(">BBH", 0xFF, marker, len(payload) + 2) + payload

    dqt = b"".join(bytes([t]) + bytes(_Q[t][_ZIGZAG].astype(np.uint8)) for t in (0, 1))
    dc_counts = bytes(3) + bytes([12]) + bytes(12)  # 12 codes of length 4
    ac_counts = bytes(7) + bytes([len(_AC_SYMBOLS)]) + bytes(8)  # 162 codes of length 8
    dht = (b"\x00" + dc_counts + bytes(range(12)) + b"\x10" + ac_counts + bytes(_AC_SYMBOLS))
    sof = struct.pack(">BHHB", 8, height, width, 3) + b"\x01\x11\x00\x02\x11\x01\x03\x11\x01"
    sos = b"\x03\x01\x00\x02\x00\x03\x00\x00\x3f\x00"
    return (b"\xff\xd8" + segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
            + segment(0xDB, dqt) + segment(0xC0, sof) + segment(0xC4, dht)
            + segment(0xDA, sos) + data + b"\xff\xd9")


# --- trajectory execution (no ROS here: a pure function of the messages and the time) ------

class Plan:
    """What the arm does from `act_ns` on (until the next plan's act_ns): from `start` (the
    position at act_ns) towards the points at absolute times `times`, holding after the last.
    No points: hold `start`."""

    def __init__(self, act_ns, start, times=(), points=()):
        self.act_ns = act_ns
        self.start = np.asarray(start, np.float64)
        self.times = list(times)
        self.points = [np.asarray(p, np.float64) for p in points]

    def sample(self, t_ns):
        """(position, velocity in units per second) at t_ns >= act_ns."""
        if not self.points or t_ns >= self.times[-1]:
            return (self.points[-1] if self.points else self.start), np.zeros_like(self.start)
        k = next(i for i, tk in enumerate(self.times) if tk > t_ns)
        if k > 0 and self.times[k - 1] >= self.act_ns:
            t0, p0 = self.times[k - 1], self.points[k - 1]
        else:
            t0, p0 = self.act_ns, self.start
        t1, p1 = self.times[k], self.points[k]
        if t1 <= t0:
            return p1, np.zeros_like(p1)
        a = (t_ns - t0) / (t1 - t0)
        return p0 + (p1 - p0) * a, (p1 - p0) / ((t1 - t0) * 1e-9)


class Executor:
    """The arm's timeline: plans in order of act_ns, the last active one first."""

    def __init__(self, joints, initial, t_ns):
        self.joints = list(joints)
        self.plans = [Plan(t_ns, initial)]

    def sample(self, t_ns):
        plan = self.plans[0]
        for p in self.plans:
            if p.act_ns <= t_ns:
                plan = p
        return plan.sample(max(t_ns, plan.act_ns))

    def _splice(self, act_ns, make_plan):
        """Drop what was planned from act_ns on and append make_plan(position at act_ns)."""
        self.plans = [p for p in self.plans if p.act_ns < act_ns] or self.plans[:1]
        self.plans.append(make_plan(self.sample(act_ns)[0]))

    def prune(self, now_ns):
        while len(self.plans) > 1 and self.plans[1].act_ns <= now_ns:
            self.plans.pop(0)

    def trajectory(self, now_ns, start_ns, names, points):
        """points: [(time_from_start_ns, positions in `names` order)]; checked by the caller."""
        index = [self.joints.index(n) for n in names]

        def make_plan(here):
            full = []
            for _, pos in points:
                p = here.copy()
                p[index] = pos
                full.append(p)
            return Plan(max(start_ns, now_ns), here, [start_ns + t for t, _ in points], full)

        self._splice(max(start_ns, now_ns), make_plan)

    def hold(self, now_ns, position=None):
        self._splice(now_ns, lambda here: Plan(
            now_ns, here if position is None else np.asarray(position, np.float64)))


def check_trajectory(arm, names, points):
    """None if a JointTrajectory with these joint_names and points may run, else why not.
    points: [(positions, velocities, time_from_start_ns)]."""
    unknown = [n for n in names if n not in arm]
    if unknown:
        return f"unknown joints {unknown} (the arm has {arm})"
    if len(set(names)) != len(names):
        return f"repeated joint names {names}"
    if points and not names:
        return "points without joint_names"
    last = -1
    for i, (pos, vel, tfs) in enumerate(points):
        if len(pos) != len(names):
            return f"point {i}: {len(pos)} positions for {len(names)} joints"
        if vel and len(vel) != len(names):
            return f"point {i}: {len(vel)} velocities for {len(names)} joints"
        if not all(math.isfinite(v) for v in list(pos) + list(vel)):
            return f"point {i}: a value is not finite"
        if tfs < 0 or tfs <= last:
            return f"point {i}: time_from_start {tfs} ns does not increase"
        last = tfs
    return None


# --- arguments ------------------------------------------------------------------------------

def parse_names(parser, text, what, allow_empty):
    names = [n.strip() for n in text.split(",")] if text.strip() else []
    if not names and not allow_empty:
        parser.error(f"{what}: no joint names")
    for n in names:
        if not NAME_RE.match(n):
            parser.error(f"{what}: bad joint name {n!r}")
    if len(set(names)) != len(names):
        parser.error(f"{what}: repeated joint names in {text!r}")
    return names


def parse_cameras(parser, text):
    cams = []
    for spec in filter(None, (s.strip() for s in text.split(","))):
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*):(\d+)x(\d+):([a-z0-9_]+)$", spec)
        if not m:
            parser.error(f"--cameras: {spec!r} is not NAME:WIDTHxHEIGHT:ENCODING")
        name, w, h, enc = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        if enc not in ENCODINGS:
            parser.error(f"--cameras: {name}: encoding {enc!r} is not one of "
                         f"{', '.join(ENCODINGS)}")
        if not (1 <= w <= 8192 and 1 <= h <= 8192):
            parser.error(f"--cameras: {name}: size {w}x{h} is not within 1..8192")
        if enc == "yuv422_yuy2" and w % 2:
            parser.error(f"--cameras: {name}: yuv422_yuy2 needs an even width, not {w}")
        if any(c["name"] == name for c in cams):
            parser.error(f"--cameras: camera {name!r} named twice")
        cams.append({"name": name, "width": w, "height": h, "encoding": enc})
    return cams


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="A simulated ROS 2 robot (rclpy): cameras, /joint_states, and a controller "
                    "that executes JointTrajectory messages on time. Run it in a network "
                    "namespace with only lo up.")
    p.add_argument("--joints", default="joint1,joint2,joint3,joint4,joint5,joint6",
                   help="the arm's joints, comma-separated (what trajectories may name)")
    p.add_argument("--extra-joints", default="gripper_left,wheel",
                   help="joints also published but not in the arm (\"\" for none)")
    p.add_argument("--rate", type=float, default=50.0, help="joint state rate, Hz")
    p.add_argument("--state-qos", choices=("reliable", "best-effort"), default="reliable")
    p.add_argument("--initial", default=None, help="initial arm positions (default zeros)")
    p.add_argument("--order-seed", type=int, default=7,
                   help="seed of the fixed shuffled joint order in /joint_states")
    p.add_argument("--cameras", default="main:640x480:rgb8,side:320x240:bgr8,top:160x120:jpeg",
                   help="NAME:WxH:ENCODING,... (encodings: " + ", ".join(ENCODINGS) + "; \"\" "
                        "for none)")
    p.add_argument("--fps", type=float, default=15.0, help="camera frame rate, Hz")
    p.add_argument("--pad-rows", action="store_true",
                   help="pad each raw image row (step) to a multiple of 64 bytes")
    p.add_argument("--jpeg-file", help="publish this file's bytes as every jpeg frame")
    p.add_argument("--png-file", help="publish this file's bytes as every png frame")
    p.add_argument("--controller", default="arm_controller",
                   help="subscribe /<controller>/joint_trajectory (\"\" for none)")
    p.add_argument("--commands-topic", nargs="?", const="", default=None, metavar="TOPIC",
                   help="subscribe Float64MultiArray commands on TOPIC (alone: "
                        "/<controller>/commands)")
    p.add_argument("--use-sim-time", action="store_true",
                   help="publish /clock from 1000 s at real speed and stamp with it")
    p.add_argument("--duration", type=float, default=None, help="exit 0 after this many seconds")
    p.add_argument("--record", help="write what was received and executed here as JSON at exit")
    p.add_argument("--trace-cap", type=int, default=20000,
                   help="most samples of the executed positions kept for --record")
    p.add_argument("--node-name", default="sim_robot")
    a = p.parse_args(argv)

    a.joints = parse_names(p, a.joints, "--joints", allow_empty=False)
    a.extra_joints = parse_names(p, a.extra_joints, "--extra-joints", allow_empty=True)
    both = set(a.joints) & set(a.extra_joints)
    if both:
        p.error(f"--extra-joints: {sorted(both)} are arm joints already")
    for opt, v in (("--rate", a.rate), ("--fps", a.fps)):
        if not (math.isfinite(v) and 0 < v <= 1000):
            p.error(f"{opt}: {v} is not within (0, 1000] Hz")
    if a.initial is None:
        a.initial = [0.0] * len(a.joints)
    else:
        try:
            a.initial = [float(v) for v in a.initial.split(",")]
        except ValueError:
            p.error(f"--initial: {a.initial!r} is not comma-separated numbers")
        if len(a.initial) != len(a.joints) or not all(map(math.isfinite, a.initial)):
            p.error(f"--initial: needs {len(a.joints)} finite numbers, one per arm joint")
    a.cameras = parse_cameras(p, a.cameras)
    for opt, path in (("--jpeg-file", a.jpeg_file), ("--png-file", a.png_file)):
        if path is not None and not os.path.isfile(path):
            p.error(f"{opt}: no file {path}")
    if a.controller and not re.match(r"^[A-Za-z_][A-Za-z0-9_/]*$", a.controller):
        p.error(f"--controller: bad name {a.controller!r}")
    if a.commands_topic == "":
        if not a.controller:
            p.error("--commands-topic without a topic needs --controller")
        a.commands_topic = f"/{a.controller}/commands"
    if a.commands_topic is not None and not re.match(r"^/?[A-Za-z_][A-Za-z0-9_/]*$",
                                                     a.commands_topic):
        p.error(f"--commands-topic: bad topic {a.commands_topic!r}")
    if a.duration is not None and not (math.isfinite(a.duration) and a.duration > 0):
        p.error(f"--duration: {a.duration} is not a positive number of seconds")
    if a.record and not os.path.isdir(os.path.dirname(os.path.abspath(a.record))):
        p.error(f"--record: no directory for {a.record}")
    if a.trace_cap < 0:
        p.error("--trace-cap: must be >= 0")
    return a


def published_order(arm, extra, seed):
    """All joints, shuffled by `seed`, the arm's not in their configured order (when it has
    more than one) and an extra joint between two of the arm's (when there is room)."""
    rng = random.Random(seed)
    names = arm + extra
    for _ in range(1000):
        rng.shuffle(names)
        arm_order = [n for n in names if n in arm]
        at = [i for i, n in enumerate(names) if n in arm]
        mixed = not extra or any(at[0] < i < at[-1] for i, n in enumerate(names) if n in extra)
        if (len(arm) < 2 or arm_order != arm) and mixed:
            break
    return names


# --- the node -------------------------------------------------------------------------------

class Robot:
    def __init__(self, args):
        import rclpy
        from rclpy.clock import Clock, ClockType
        from rclpy.qos import (HistoryPolicy, QoSProfile, ReliabilityPolicy,
                               qos_profile_sensor_data)
        from sensor_msgs.msg import CompressedImage, Image, JointState

        self.args = args
        self.node = rclpy.create_node(args.node_name)
        self.log = self.node.get_logger()
        self.Image, self.CompressedImage, self.JointState = Image, CompressedImage, JointState
        self.sim = args.use_sim_time
        self.mono0 = time.monotonic_ns()
        steady = Clock(clock_type=ClockType.STEADY_TIME)

        self.arm = list(args.joints)
        self.order = published_order(self.arm, list(args.extra_joints), args.order_seed)
        self.executor = Executor(self.arm, args.initial, self.now_ns())
        self.rec = {"trajectories": [], "commands": [], "trace": [], "trace_dropped": 0}
        self.counters = {"trajectories": 0, "trajectories_refused": 0, "commands": 0,
                         "commands_refused": 0, "refused": 0, "joint_state_msgs_published": 0,
                         "images_published": {c["name"]: 0 for c in args.cameras},
                         "clock_msgs_published": 0}

        reliable10 = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10,
                                reliability=ReliabilityPolicy.RELIABLE)
        state_qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10,
                               reliability=ReliabilityPolicy.RELIABLE
                               if args.state_qos == "reliable" else ReliabilityPolicy.BEST_EFFORT)
        self.state_pub = self.node.create_publisher(JointState, "/joint_states", state_qos)
        self.node.create_timer(1.0 / args.rate, self.publish_state, clock=steady)

        self.cams = []
        for cam in args.cameras:
            compressed = cam["encoding"] in ("jpeg", "png")
            topic = f"/{cam['name']}/image_raw" + ("/compressed" if compressed else "")
            pub = self.node.create_publisher(CompressedImage if compressed else Image, topic,
                                             qos_profile_sensor_data)
            fixed = None
            path = {"jpeg": args.jpeg_file, "png": args.png_file}.get(cam["encoding"])
            if path:
                with open(path, "rb") as f:
                    fixed = array.array("B", f.read())
            state = dict(cam, pub=pub, frame=0, fixed=fixed, topic=topic)
            self.cams.append(state)
            self.node.create_timer(1.0 / args.fps, lambda s=state: self.publish_image(s),
                                   clock=steady)

        if self.sim:
            from rosgraph_msgs.msg import Clock as ClockMsg
            self.ClockMsg = ClockMsg
            self.clock_pub = self.node.create_publisher(ClockMsg, "/clock", reliable10)
            self.node.create_timer(1.0 / CLOCK_RATE_HZ, self.publish_clock, clock=steady)

        if args.controller:
            from trajectory_msgs.msg import JointTrajectory
            self.node.create_subscription(JointTrajectory,
                                          f"/{args.controller}/joint_trajectory",
                                          self.on_trajectory, reliable10)
        if args.commands_topic:
            from std_msgs.msg import Float64MultiArray
            self.node.create_subscription(Float64MultiArray, args.commands_topic,
                                          self.on_commands, reliable10)

    def now_ns(self):
        if self.sim:
            return SIM_START_NS + (time.monotonic_ns() - self.mono0)
        return self.node.get_clock().now().nanoseconds

    def stamp(self, msg, t_ns):
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(t_ns, 1_000_000_000)

    def publish_clock(self):
        msg = self.ClockMsg()
        msg.clock.sec, msg.clock.nanosec = divmod(self.now_ns(), 1_000_000_000)
        self.clock_pub.publish(msg)
        self.counters["clock_msgs_published"] += 1

    def publish_state(self):
        t = self.now_ns()
        self.executor.prune(t)
        pos, vel = self.executor.sample(t)
        msg = self.JointState()
        self.stamp(msg, t)
        msg.name = self.order
        extra = {n: EXTRA_JOINT_BASE + i for i, n in enumerate(self.args.extra_joints)}
        arm = {n: (float(pos[i]), float(vel[i])) for i, n in enumerate(self.arm)}
        msg.position = [arm[n][0] if n in arm else extra[n] for n in self.order]
        msg.velocity = [arm[n][1] if n in arm else 0.0 for n in self.order]
        self.state_pub.publish(msg)
        self.counters["joint_state_msgs_published"] += 1
        if len(self.rec["trace"]) < self.args.trace_cap:
            self.rec["trace"].append([t, [float(v) for v in pos]])
        else:
            self.rec["trace_dropped"] += 1

    def publish_image(self, cam):
        t = self.now_ns()
        frame = cam["frame"]
        cam["frame"] += 1
        enc, w, h = cam["encoding"], cam["width"], cam["height"]
        if enc in ("jpeg", "png"):
            msg = self.CompressedImage()
            msg.format = enc
            if cam["fixed"] is not None:
                msg.data = cam["fixed"]
            else:
                rgb = frame_rgb(frame, w, h)
                msg.data = array.array("B", encode_png(rgb) if enc == "png" else encode_jpeg(rgb))
        else:
            msg = self.Image()
            msg.width, msg.height, msg.encoding, msg.is_bigendian = w, h, enc, 0
            data, msg.step = image_bytes(frame, w, h, enc, self.args.pad_rows)
            msg.data = array.array("B", data)
        self.stamp(msg, t)
        msg.header.frame_id = f"{cam['name']}_optical_frame"
        cam["pub"].publish(msg)
        self.counters["images_published"][cam["name"]] += 1

    def refuse(self, kind, entry, why):
        entry["accepted"], entry["error"] = False, why
        self.counters[f"{kind}_refused"] += 1
        self.counters["refused"] += 1
        self.log.error(f"refused a {'trajectory' if kind == 'trajectories' else 'command'}: "
                       f"{why}")

    def on_trajectory(self, msg):
        now = self.now_ns()
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        names = list(msg.joint_names)
        points = [([float(v) for v in pt.positions], [float(v) for v in pt.velocities],
                   pt.time_from_start.sec * 1_000_000_000 + pt.time_from_start.nanosec)
                  for pt in msg.points]
        entry = {"recv_time_ns": now, "stamp_ns": stamp, "joint_names": names,
                 "points": [{"positions": p, "velocities": v, "time_from_start_ns": t}
                            for p, v, t in points],
                 "accepted": True, "error": None}
        self.rec["trajectories"].append(entry)
        self.counters["trajectories"] += 1
        why = check_trajectory(self.arm, names, points)
        if why:
            self.refuse("trajectories", entry, why)
        elif not points:
            self.executor.hold(now)
            self.log.info("empty trajectory: stopped")
        else:
            self.executor.trajectory(now, stamp or now, names, [(t, p) for p, _, t in points])

    def on_commands(self, msg):
        now = self.now_ns()
        data = [float(v) for v in msg.data]
        entry = {"recv_time_ns": now, "data": data, "accepted": True, "error": None}
        self.rec["commands"].append(entry)
        self.counters["commands"] += 1
        if len(data) != len(self.arm):
            self.refuse("commands", entry, f"{len(data)} values for {len(self.arm)} joints")
        elif not all(map(math.isfinite, data)):
            self.refuse("commands", entry, "a value is not finite")
        else:
            self.executor.hold(now, data)

    def write_record(self, path):
        """The JSON --record writes; times are on the robot's clock (ROS time, or /clock's):
        {"schema": "ros2_robot-record/1", "clock": "ros"|"sim", "node": str,
         "arm_joints": [str], "extra_joints": [str], "published_order": [str],
         "initial": [float], "trajectory_topic": str|null, "commands_topic": str|null,
         "cameras": [{"name", "topic", "width", "height", "encoding"}],
         "trajectories": [{"recv_time_ns": int, "stamp_ns": int, "joint_names": [str],
                           "points": [{"positions": [float], "velocities": [float],
                                       "time_from_start_ns": int}],
                           "accepted": bool, "error": str|null}],
         "commands": [{"recv_time_ns": int, "data": [float], "accepted": bool,
                       "error": str|null}],
         "counters": {"trajectories", "trajectories_refused", "commands", "commands_refused",
                      "refused", "joint_state_msgs_published", "clock_msgs_published": int,
                      "images_published": {camera: int}},
         "trace": [[t_ns, [arm positions in --joints order]]] (one per joint state published,
                   the first --trace-cap), "trace_dropped": int}"""
        a = self.args
        doc = {"schema": "ros2_robot-record/1", "clock": "sim" if self.sim else "ros",
               "node": a.node_name, "arm_joints": self.arm, "extra_joints": a.extra_joints,
               "published_order": self.order, "initial": a.initial,
               "trajectory_topic": f"/{a.controller}/joint_trajectory" if a.controller else None,
               "commands_topic": a.commands_topic,
               "cameras": [{k: c[k] for k in ("name", "topic", "width", "height", "encoding")}
                           for c in self.cams],
               "trajectories": self.rec["trajectories"], "commands": self.rec["commands"],
               "counters": self.counters, "trace": self.rec["trace"],
               "trace_dropped": self.rec["trace_dropped"]}
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        os.replace(tmp, path)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.use_sim_time:
        try:
            import rosgraph_msgs.msg  # noqa: F401
        except ImportError:
            print("ros2_robot.py: --use-sim-time needs rosgraph_msgs, which this Python lacks",
                  file=sys.stderr)
            return 1
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    try:
        from rclpy.signals import SignalHandlerOptions
        rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    except ImportError:  # before Iron: rclpy keeps its handler, which our own replaces below
        rclpy.init()
    stop = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.append(1))

    robot = Robot(args)
    executor = SingleThreadedExecutor()
    executor.add_node(robot.node)
    print("ready", flush=True)
    deadline = None if args.duration is None else time.monotonic() + args.duration
    try:
        while not stop and (deadline is None or time.monotonic() < deadline):
            executor.spin_once(timeout_sec=0.05)
    finally:
        if args.record:
            robot.write_record(args.record)
        executor.remove_node(robot.node)
        robot.node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
