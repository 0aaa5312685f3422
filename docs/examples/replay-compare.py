#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Replay a recording through the chain and compare its action chunks with the recorded ones.

A recording is what pipelines/record.txt writes in a directory: the cameras losslessly in
cameras.mkv (FFV1, tracks main, side, top), the robot's state in state.gdp, and every chunk
the policy made in actions.jsonl (pi0actionsink mode=log). Without --rec this script first
makes a short one itself (the same files, from synthetic cameras, not live). Then it plays the
recording back through pipelines/replay.txt's chain into an appsink, reads each chunk through
GstPi0-1.0 as numpy, and compares it with the recorded chunk of the same observation: with the
same model, instruction and seed they are bitwise equal.

    python3 docs/examples/replay-compare.py [--rec DIR]
"""
import argparse
import json
import os
import sys
import tempfile

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstPi0", "1.0")
from gi.repository import Gst, GstPi0  # noqa: E402
import numpy as np  # noqa: E402

POLICY = ('pi0infer model=builtin:pi0-tiny instruction="pick up the red cube" action-dims=7 '
          'seed=0')

RECORD = """
pi0viewmux name=mux max-staleness=200000000 max-state-age=50000000
  ! cudaprep width=32 height=32 ! queue ! {policy}
  ! pi0actionsink mode=log target=file://{rec}/actions.jsonl
matroskamux name=mkv timecodescale=1 ! filesink location={rec}/cameras.mkv
videotestsrc num-buffers=30 pattern=smpte ! video/x-raw,format=I420,width=640,height=480,framerate=30/1 ! tee name=main
  main. ! queue ! mux.main    main. ! queue ! avenc_ffv1 ! mkv.video_0
videotestsrc num-buffers=15 pattern=ball ! video/x-raw,format=I420,width=320,height=240,framerate=15/1 ! tee name=side
  side. ! queue ! mux.side    side. ! queue ! avenc_ffv1 ! mkv.video_1
videotestsrc num-buffers=10 pattern=pinwheel ! video/x-raw,format=I420,width=1280,height=720,framerate=10/1 ! tee name=top
  top. ! queue ! mux.top      top. ! queue ! avenc_ffv1 ! mkv.video_2
appsrc name=state format=time caps=application/x-pi0-state,dim=(int)7 ! tee name=state_tee
  state_tee. ! queue ! mux.state  state_tee. ! queue ! gdppay ! filesink location={rec}/state.gdp
"""

# pipelines/replay.txt's chain, with an appsink where it logs.
REPLAY = """
pi0viewmux name=mux max-staleness=200000000 max-state-age=50000000 timestamps=pts
  ! cudaprep width=32 height=32 ! queue ! {policy}
  ! appsink name=chunks sync=false
filesrc location={rec}/cameras.mkv ! matroskademux name=demux
  demux.video_0 ! queue ! avdec_ffv1 ! mux.main
  demux.video_1 ! queue ! avdec_ffv1 ! mux.side
  demux.video_2 ! queue ! avdec_ffv1 ! mux.top
filesrc location={rec}/state.gdp ! gdpdepay ! queue ! mux.state
"""


def run(pipeline):
    pipeline.set_state(Gst.State.PLAYING)
    msg = pipeline.get_bus().timed_pop_filtered(
        Gst.CLOCK_TIME_NONE, Gst.MessageType.EOS | Gst.MessageType.ERROR)
    pipeline.set_state(Gst.State.NULL)
    if msg.type == Gst.MessageType.ERROR:
        err, debug = msg.parse_error()
        raise RuntimeError(f"{err.message} ({debug})")


def record(rec):
    pipeline = Gst.parse_launch(RECORD.format(rec=rec, policy=POLICY))
    state = pipeline.get_by_name("state")
    for i in range(111):  # 100 Hz, a little past the last frame
        joints = np.cos(np.arange(7, dtype=np.float32) * 0.3 + i / 50.0).astype(np.float32)
        buf = Gst.Buffer.new_wrapped(joints.tobytes())
        buf.pts = i * 10 * Gst.MSECOND
        buf.duration = 10 * Gst.MSECOND
        state.emit("push-buffer", buf)
    state.emit("end-of-stream")
    run(pipeline)


def replay(rec):
    """Chunk id (the observation's sequence) -> the replayed chunk, [horizon, dim] float32."""
    pipeline = Gst.parse_launch(REPLAY.format(rec=rec, policy=POLICY))
    sink = pipeline.get_by_name("chunks")
    chunks = {}
    pipeline.set_state(Gst.State.PLAYING)
    while True:
        sample = sink.emit("pull-sample")
        if sample is None:
            break
        buffer = sample.get_buffer()
        meta = GstPi0.buffer_get_pi0_action_meta(buffer)
        if meta is None:
            continue
        with GstPi0.buffer_get_pi0_actions(buffer).map(Gst.MapFlags.READ) as info:
            chunks[meta.sequence] = np.frombuffer(info.data, np.float32).reshape(
                meta.horizon, meta.dim).copy()
    error = pipeline.get_bus().pop_filtered(Gst.MessageType.ERROR)
    pipeline.set_state(Gst.State.NULL)
    if error:
        err, debug = error.parse_error()
        raise RuntimeError(f"{err.message} ({debug})")
    return chunks


def recorded(rec):
    """Chunk id -> the recorded chunk (actions.jsonl: one JSON object per chunk)."""
    out = {}
    with open(os.path.join(rec, "actions.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            values = [[np.nan if v is None else v for v in step] for step in row["values"]]
            out[row["chunk_id"]] = np.array(values, dtype=np.float32)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rec", help="a recording of pipelines/record.txt (default: make one)")
    args = parser.parse_args()

    Gst.init(None)
    with tempfile.TemporaryDirectory() as tmp:
        rec = args.rec
        if rec is None:
            rec = tmp
            record(rec)
            print(f"recorded {rec}")
        want = recorded(rec)
        got = replay(rec)

    same = sum(1 for k in want if k in got and np.array_equal(want[k], got[k], equal_nan=True))
    for k in sorted(want):
        if k not in got:
            print(f"chunk {k}: not replayed")
        elif not np.array_equal(want[k], got[k], equal_nan=True):
            print(f"chunk {k}: differs, largest difference {np.nanmax(np.abs(want[k] - got[k])):g}")
    print(f"{len(want)} recorded chunks, {len(got)} replayed, {same} bitwise equal")
    return 0 if want and same == len(want) == len(got) else 1


if __name__ == "__main__":
    sys.exit(main())
