#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Run the demo chain from Python and read every action chunk as a numpy array.

Three synthetic cameras and a robot's 7-joint state (pushed from Python, as a driver would)
-> pi0viewmux -> cudaprep -> pi0infer (builtin:pi0-tiny: random weights, the actions mean
nothing) -> appsink. Each chunk is read through GObject introspection (GstPi0-1.0), in place:
numpy maps the action meta's own values, no copy. Runs on the CPU, not live, in seconds.

    python3 docs/examples/actions-numpy.py [--frames 30]

Needs the built tree (or an installed one): GI_TYPELIB_PATH, LD_LIBRARY_PATH and
GST_PLUGIN_PATH as the README's "From Python" says.
"""
import argparse
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstPi0", "1.0")
from gi.repository import Gst, GstPi0  # noqa: E402
import numpy as np  # noqa: E402

CHAIN = """
pi0viewmux name=mux max-staleness=200000000 max-state-age=50000000
  ! cudaprep width=32 height=32
  ! pi0infer model=builtin:pi0-tiny instruction="pick up the red cube" action-dims=7
  ! appsink name=chunks sync=false
videotestsrc num-buffers={main} pattern=smpte ! video/x-raw,format=RGB,width=640,height=480,framerate=30/1 ! mux.main
videotestsrc num-buffers={side} pattern=ball ! video/x-raw,format=NV12,width=320,height=240,framerate=15/1 ! mux.side
videotestsrc num-buffers={top} pattern=snow ! video/x-raw,format=I420,width=1280,height=720,framerate=10/1 ! mux.top
appsrc name=state format=time caps=application/x-pi0-state,dim=(int)7 ! mux.state
"""


def push_state(appsrc, seconds):
    """The robot's joint state at 100 Hz: 7 float32 per buffer, timestamped."""
    for i in range(int(seconds * 100) + 1):
        joints = np.sin(np.arange(7, dtype=np.float32) + i / 100.0).astype(np.float32)
        buf = Gst.Buffer.new_wrapped(joints.tobytes())
        buf.pts = i * 10 * Gst.MSECOND
        buf.duration = 10 * Gst.MSECOND
        appsrc.emit("push-buffer", buf)
    appsrc.emit("end-of-stream")


def action_chunk(buffer):
    """The buffer's action chunk as a [horizon, dim] float32 array, or None."""
    meta = GstPi0.buffer_get_pi0_action_meta(buffer)
    if meta is None:
        return None, None
    values = GstPi0.buffer_get_pi0_actions(buffer)  # holds the buffer: safe to keep
    with values.map(Gst.MapFlags.READ) as info:
        # A view of the meta's values while mapped; .copy() to keep it afterwards.
        chunk = np.frombuffer(info.data, dtype=np.float32).reshape(meta.horizon, meta.dim).copy()
    return meta, chunk


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=30, help="main camera frames (30 fps)")
    args = parser.parse_args()

    Gst.init(None)
    pipeline = Gst.parse_launch(
        CHAIN.format(main=args.frames, side=args.frames // 2, top=args.frames // 3))
    push_state(pipeline.get_by_name("state"), args.frames / 30.0 + 0.1)
    sink = pipeline.get_by_name("chunks")
    pipeline.set_state(Gst.State.PLAYING)

    chunks = 0
    while True:
        sample = sink.emit("pull-sample")  # None at the end of the stream
        if sample is None:
            break
        meta, chunk = action_chunk(sample.get_buffer())
        if chunk is None:
            continue
        if meta.flags & GstPi0.ActionFlags.NON_FINITE:
            print(f"chunk {meta.sequence}: non-finite, never act on it")
            continue
        chunks += 1
        print(f"chunk {meta.sequence}: {chunk.shape[0]}x{chunk.shape[1]} {chunk.dtype}, "
              f"inference {meta.inference_time / 1e6:.1f} ms, step 0: "
              + np.array2string(chunk[0], precision=3, suppress_small=True))

    error = pipeline.get_bus().pop_filtered(Gst.MessageType.ERROR)
    pipeline.set_state(Gst.State.NULL)
    if error:
        err, debug = error.parse_error()
        print(f"error: {err.message} ({debug})", file=sys.stderr)
        return 1
    print(f"{chunks} action chunks")
    return 0 if chunks > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
