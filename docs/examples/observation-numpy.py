#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Read an observation's views, mask and state, and the model input tensor, as numpy.

A pad probe on cudaprep's output sees each observation with its GstPi0ObservationMeta (the
views: name, valid or masked, layout; the robot state) and its GstPi0TensorMeta (the
preprocessed `[V, 3, H, W]` input and its image masks). The pixels of a view and the tensor's
data are read through GstPi0-1.0 in place: numpy arrays over the mapped memory, with the
view's own strides. The top camera stops after --top-frames frames, so its view is masked
(never zero-filled) in later observations.

    python3 docs/examples/observation-numpy.py [--frames 30] [--every 5]
"""
import argparse
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstVideo", "1.0")
gi.require_version("GstPi0", "1.0")
from gi.repository import Gst, GstPi0, GstVideo  # noqa: E402
import numpy as np  # noqa: E402

CHAIN = """
pi0viewmux name=mux max-staleness=200000000 max-state-age=50000000
  ! cudaprep name=prep device=cpu width=32 height=32 ! fakesink sync=false
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


def first_plane(obs, buffer, index, view):
    """Plane 0 of a valid view (all of RGB; the luma of NV12 and I420) as a 2-D uint8 array
    [rows, bytes per row], and its mean: read in place, with the view's own stride."""
    info = view.info
    pixel_bytes = info.finfo.pixel_stride[0]
    frame = obs.get_view_buffer(buffer, index)  # the view's memories, no copy
    with frame.map(Gst.MapFlags.READ) as m:
        plane = np.ndarray(shape=(info.height, info.width * pixel_bytes), dtype=np.uint8,
                           buffer=m.data, offset=info.offset[0], strides=(info.stride[0], 1))
        return plane.shape, float(plane.mean())


def on_observation(every):
    def probe(pad, info):
        buffer = info.get_buffer()
        obs = GstPi0.buffer_get_pi0_observation_meta(buffer)
        tensor = GstPi0.buffer_get_pi0_tensor_meta(buffer)
        if obs is None or obs.sequence % every:
            return Gst.PadProbeReturn.OK
        print(f"observation {obs.sequence} at {obs.observation_time / Gst.SECOND:.3f} s")
        for i in range(obs.get_n_views()):
            view = obs.get_view(i)  # valid while the buffer lives
            name = view.get_name()
            if not view.flags & GstPi0.ViewFlags.VALID:
                print(f"  {name:5} MASKED")
                continue
            shape, mean = first_plane(obs, buffer, i, view)
            fmt = GstVideo.VideoFormat.to_string(view.info.finfo.format)
            print(f"  {name:5} {fmt:4} {view.info.width}x{view.info.height}, "
                  f"stride {view.info.stride[0]}, plane 0 {shape} mean {mean:.1f}")
        state = obs.get_state()
        if state is not None:
            stale = " (stale)" if obs.state_flags & GstPi0.StateFlags.STALE else ""
            print("  state " + np.array2string(np.array(state, np.float32), precision=3) + stale)
        if tensor is not None:
            shape = tensor.get_shape()
            with tensor.get_data_buffer().map(Gst.MapFlags.READ) as m:
                # cudaprep device=cpu gives host float32; float16 would be np.float16.
                data = np.frombuffer(m.data, dtype=np.float32).reshape(shape)
                means = data.mean(axis=(1, 2, 3))
            print(f"  tensor {tensor.dtype.value_nick} {shape}, masks {tensor.get_masks()}, "
                  "per-view mean " + np.array2string(means, precision=3))
        return Gst.PadProbeReturn.OK
    return probe


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=30, help="main camera frames (30 fps)")
    parser.add_argument("--top-frames", type=int, default=5, help="top camera frames (10 fps)")
    parser.add_argument("--every", type=int, default=5, help="print every Nth observation")
    args = parser.parse_args()

    Gst.init(None)
    pipeline = Gst.parse_launch(
        CHAIN.format(main=args.frames, side=args.frames // 2, top=args.top_frames))
    push_state(pipeline.get_by_name("state"), args.frames / 30.0 + 0.1)
    prep_src = pipeline.get_by_name("prep").get_static_pad("src")
    prep_src.add_probe(Gst.PadProbeType.BUFFER, on_observation(args.every))
    pipeline.set_state(Gst.State.PLAYING)
    msg = pipeline.get_bus().timed_pop_filtered(
        Gst.CLOCK_TIME_NONE, Gst.MessageType.EOS | Gst.MessageType.ERROR)
    pipeline.set_state(Gst.State.NULL)
    if msg.type == Gst.MessageType.ERROR:
        err, debug = msg.parse_error()
        print(f"error: {err.message} ({debug})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
