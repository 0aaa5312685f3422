#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Publishes what a misbehaving ROS 2 robot sends, for tests/ros2/test_ros2_chain.py (rclpy, not
this project's code). One scenario per run; prints "ready" once its publishers exist, then
"done" after the last message. Run inside the test's network namespace.

  ros2_publish.py joints-bad      good and bad JointState samples, each bad kind once per round
  ros2_publish.py images-bad      good and bad Image messages
  ros2_publish.py wrong-type      a std_msgs/String on /joint_states (same name, other type;
                                  a process of its own: one participant cannot hold both types)
  ros2_publish.py good-joints     JointState j1..j3 at 50 Hz
  ros2_publish.py graph           what ROS 2's graph (ros2 node list, ros2 topic info -v) shows
                                  of the pipeline's nodes, as one JSON line, once a node named
                                  --expect-node is there
  ros2_publish.py stamps          JointState stamped 300, 100 or 0 ms before it is published
                                  (j1 = that age in ms)
  ros2_publish.py flood           JointState as fast as it can for --seconds
  ros2_publish.py sim-time        /clock from 1000 s, and JointState stamped on it
  ros2_publish.py camera-stops    one camera that publishes, then stops, then publishes again
"""

import argparse
import math
import sys
import time

import rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy, HistoryPolicy
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String

JOINTS = ["j1", "j2", "j3"]


def stamp_of(ns):
    from builtin_interfaces.msg import Time
    return Time(sec=int(ns // 1_000_000_000), nanosec=int(ns % 1_000_000_000))


def joint_state(node, names, positions, stamp_ns=None):
    m = JointState()
    m.header.stamp = stamp_of(time.time_ns() if stamp_ns is None else stamp_ns)
    m.name = list(names)
    m.position = [float(p) for p in positions]
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--expect-node", default="")
    a = ap.parse_args()
    rclpy.init()
    node = rclpy.create_node("pi0_test_publisher")
    reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                          history=HistoryPolicy.KEEP_LAST)
    if a.scenario == "wrong-type":
        wrong = node.create_publisher(String, "/joint_states", reliable)
    else:
        js = node.create_publisher(JointState, "/joint_states", reliable)
        img = node.create_publisher(Image, "/cam/image_raw", reliable)
    print("ready", flush=True)

    def matched(*pubs, timeout=15.0):
        """Waits until each publisher has a subscriber (the element under test started), so
        that nothing is published into a void before discovery has matched them."""
        end = time.time() + timeout
        while time.time() < end:
            if all(p.get_subscription_count() > 0 for p in pubs):
                time.sleep(0.2)
                return True
            time.sleep(0.02)
        print("no subscriber matched", file=sys.stderr, flush=True)
        return False

    period = 0.02
    if a.scenario in ("joints-bad", "good-joints", "flood", "stamps"):
        matched(js)
    if a.scenario == "joints-bad":
        # Each round: one good sample (extra joints, any order), then every kind of bad one. A
        # good sample's values are round * 0.01 (the test checks nothing else came out).
        for r in range(a.rounds):
            v = r * 0.01
            now = time.time_ns()
            msgs = [
                joint_state(node, ["wheel", "j3", "j1", "gripper", "j2"], [9, v + 3, v + 1, 8, v + 2]),
                joint_state(node, ["j1", "j3"], [100, 100]),                       # missing j2
                joint_state(node, ["j1", "j2", "j3"], [100, math.nan, 100]),      # NaN
                joint_state(node, ["j1", "j2", "j3"], [100, math.inf, 100]),      # Inf
                joint_state(node, ["j1", "j2", "j3"], [100, 100]),                # lengths
                joint_state(node, ["j1", "j2", "j3", "j2"], [100, 100, 100, 100]),  # twice
                joint_state(node, ["j1", "j2", "j3"], [100, 100, 100], now - 5_000_000_000),
                joint_state(node, ["j1", "j2", "j3"], [100, 100, 100], now + 5_000_000_000),
                joint_state(node, ["j1", "j2", "j3"], [100, 100, 100], 0),
            ]
            for m in msgs:
                js.publish(m)
                time.sleep(period / len(msgs))
    elif a.scenario == "images-bad":
        matched(img)

        def image(enc, w, h, step, size):
            m = Image()
            m.header.stamp = stamp_of(time.time_ns())
            m.encoding, m.width, m.height, m.step = enc, w, h, step
            m.data = bytes([(i * 7) % 251 for i in range(size)])
            return m

        for r in range(a.rounds):
            for m in [image("rgb8", 32, 24, 128, 128 * 24),       # good, padded rows
                      image("rgb8", 32, 24, 90, 90 * 24),         # step shorter than a row
                      image("rgb8", 32, 24, 96, 96 * 24 - 1),     # data too short
                      image("bayer_rggb8", 32, 24, 32, 32 * 24),  # encoding not taken
                      image("nv12", 31, 24, 32, 32 * 36)]:        # odd width for 4:2:0
                img.publish(m)
                time.sleep(period / 5)
    elif a.scenario == "wrong-type":
        for r in range(a.rounds):
            wrong.publish(String(data="not a joint state"))
            time.sleep(period)
    elif a.scenario == "stamps":
        for r in range(a.rounds):
            age_ms = (300, 100, 0)[r % 3]
            js.publish(joint_state(node, JOINTS, [age_ms, 0, 0],
                                   time.time_ns() - age_ms * 1_000_000))
            time.sleep(period)
    elif a.scenario == "graph":
        import json
        from rclpy.qos import DurabilityPolicy
        end = time.time() + 20
        while time.time() < end:
            names = node.get_node_names_and_namespaces()
            if any(n == a.expect_node for n, _ in names):
                break
            time.sleep(0.1)
        time.sleep(1.0)  # every endpoint of the pipeline's nodes discovered

        def endpoints(infos):
            return [{"node": i.node_name, "namespace": i.node_namespace, "type": i.topic_type,
                     "reliability": i.qos_profile.reliability.name.lower(),
                     "durability": i.qos_profile.durability.name.lower()} for i in infos]

        topics = dict(node.get_topic_names_and_types())
        out = {"nodes": sorted("%s/%s" % (ns.rstrip("/"), n) for n, ns in
                               node.get_node_names_and_namespaces()),
               "topics": {t: {"types": topics[t],
                              "publishers": endpoints(node.get_publishers_info_by_topic(t)),
                              "subscriptions": endpoints(node.get_subscriptions_info_by_topic(t))}
                          for t in topics}}
        print(json.dumps(out), flush=True)
    elif a.scenario == "good-joints":
        for r in range(a.rounds):
            js.publish(joint_state(node, JOINTS, [0.5, 0.5, 0.5]))
            time.sleep(period)
    elif a.scenario == "flood":
        end = time.time() + a.seconds
        n = 0
        while time.time() < end:
            js.publish(joint_state(node, JOINTS, [0.1, 0.2, 0.3]))
            n += 1
        print("published", n, flush=True)
    elif a.scenario == "sim-time":
        from rosgraph_msgs.msg import Clock
        clock = node.create_publisher(Clock, "/clock", 10)
        matched(clock, js)
        t = 1000 * 1_000_000_000
        for r in range(a.rounds):
            clock.publish(Clock(clock=stamp_of(t)))
            time.sleep(0.005)
            # Stamped on the sim clock; the wall clock is 1.7e9 s away.
            js.publish(joint_state(node, JOINTS, [r, r, r], t - 10_000_000))
            time.sleep(period)
            t += int(period * 1e9)
    elif a.scenario == "camera-stops":
        matched(img)

        def frame():
            m = Image()
            m.header.stamp = stamp_of(time.time_ns())
            m.encoding, m.width, m.height, m.step = "rgb8", 64, 48, 192
            m.data = bytes(192 * 48)
            return m

        for phase, seconds in (("on", 1.5), ("off", 1.5), ("on", 1.5)):
            end = time.time() + seconds
            while time.time() < end:
                if phase == "on":
                    img.publish(frame())
                time.sleep(1 / 15)
    else:
        print("unknown scenario", a.scenario, file=sys.stderr)
        return 2
    time.sleep(0.3)
    print("done", flush=True)
    node.destroy_node()
    rclpy.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
