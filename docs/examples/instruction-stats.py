#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Change the policy's instruction at a chosen frame, then read pi0infer's and pi0actionsink's stats.

The demo chain (as actions-numpy.py) ends in pi0actionsink, which writes every chunk to a
JSON-lines log (mode=log: no robot needed). A pad probe on the muxer's output sends a
`pi0-instruction` event just before observation --at: being serialized, it takes effect at
exactly that observation. pi0infer's sink pad shows where it arrived, parsed back with
GstPi0.instruction_event_parse(). At the end, both elements' `stats` structures.

    python3 docs/examples/instruction-stats.py [--at 10] [--instruction "stack the cups"]
"""
import argparse
import os
import sys
import tempfile

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstPi0", "1.0")
from gi.repository import Gst, GstPi0  # noqa: E402
import numpy as np  # noqa: E402

CHAIN = """
pi0viewmux name=mux max-staleness=200000000 max-state-age=50000000
  ! cudaprep width=32 height=32
  ! pi0infer name=infer model=builtin:pi0-tiny instruction="pick up the red cube" action-dims=7
  ! pi0actionsink name=sink mode=log target=file://{log}
videotestsrc num-buffers={main} pattern=smpte ! video/x-raw,format=RGB,width=640,height=480,framerate=30/1 ! mux.main
videotestsrc num-buffers={side} pattern=ball ! video/x-raw,format=NV12,width=320,height=240,framerate=15/1 ! mux.side
videotestsrc num-buffers={top} pattern=snow ! video/x-raw,format=I420,width=1280,height=720,framerate=10/1 ! mux.top
appsrc name=state format=time caps=application/x-pi0-state,dim=(int)7 ! mux.state
"""


def push_state(appsrc, seconds):
    for i in range(int(seconds * 100) + 1):
        joints = np.sin(np.arange(7, dtype=np.float32) + i / 100.0).astype(np.float32)
        buf = Gst.Buffer.new_wrapped(joints.tobytes())
        buf.pts = i * 10 * Gst.MSECOND
        buf.duration = 10 * Gst.MSECOND
        appsrc.emit("push-buffer", buf)
    appsrc.emit("end-of-stream")


def switch_at(sequence, instruction):
    """A probe on the muxer's src pad: the instruction event goes out just before the
    observation numbered `sequence`, in stream order."""
    def probe(pad, info):
        obs = GstPi0.buffer_get_pi0_observation_meta(info.get_buffer())
        if obs is not None and obs.sequence == sequence:
            pad.push_event(GstPi0.instruction_event_new(instruction))
            return Gst.PadProbeReturn.REMOVE
        return Gst.PadProbeReturn.OK
    return probe


class InstructionWatch:
    """On pi0infer's sink pad: each instruction event, and the observation that comes next."""

    def __init__(self):
        self.pending = None

    def __call__(self, pad, info):
        if info.type & Gst.PadProbeType.BUFFER:
            obs = GstPi0.buffer_get_pi0_observation_meta(info.get_buffer())
            if self.pending is not None and obs is not None:
                print(f"pi0infer: {self.pending!r} from observation {obs.sequence} on")
                self.pending = None
            return Gst.PadProbeReturn.OK
        ok, instruction = GstPi0.instruction_event_parse(info.get_event())
        if ok:
            self.pending = instruction
        return Gst.PadProbeReturn.OK


def print_stats(name, stats):
    print(f"{name} stats ({stats.get_name()}):")
    for i in range(stats.n_fields()):
        field = stats.nth_field_name(i)
        print(f"  {field} = {stats.get_value(field)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=30, help="main camera frames (30 fps)")
    parser.add_argument("--at", type=int, default=10, help="observation that gets the new instruction")
    parser.add_argument("--instruction", default="stack the cups")
    args = parser.parse_args()

    Gst.init(None)
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "chunks.jsonl")
        pipeline = Gst.parse_launch(CHAIN.format(
            log=log, main=args.frames, side=args.frames // 2, top=args.frames // 3))
        push_state(pipeline.get_by_name("state"), args.frames / 30.0 + 0.1)
        mux_src = pipeline.get_by_name("mux").get_static_pad("src")
        mux_src.add_probe(Gst.PadProbeType.BUFFER, switch_at(args.at, args.instruction))
        infer = pipeline.get_by_name("infer")
        infer.get_static_pad("sink").add_probe(
            Gst.PadProbeType.EVENT_DOWNSTREAM | Gst.PadProbeType.BUFFER, InstructionWatch())

        pipeline.set_state(Gst.State.PLAYING)
        msg = pipeline.get_bus().timed_pop_filtered(
            Gst.CLOCK_TIME_NONE, Gst.MessageType.EOS | Gst.MessageType.ERROR)
        # The stats of an element stay readable after the stream ended, until it stops.
        print_stats("pi0infer", infer.get_property("stats"))
        print_stats("pi0actionsink", pipeline.get_by_name("sink").get_property("stats"))
        pipeline.set_state(Gst.State.NULL)
        if msg.type == Gst.MessageType.ERROR:
            err, debug = msg.parse_error()
            print(f"error: {err.message} ({debug})", file=sys.stderr)
            return 1
        with open(log) as f:
            print(f"{sum(1 for _ in f)} chunks logged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
