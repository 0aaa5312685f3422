#!/usr/bin/env python3
"""Datasets written by the real lerobot (0.6.1, Python 3.12), and what LeRobot's own decoder
gives for each of their frames: the peer that `pi0lerobotsrc` must equal (tests/elements/pi0lerobotsrc/test_pi0lerobotsrc.cpp).

    lerobot_made.py make ROOT --codec h264|libsvtav1 [--fps F] [--size WxH] [--lengths 7,12,9]
        LeRobotDataset.create + add_frame + save_episode, as a LeRobot user records: every
        episode of a camera goes into one MP4 (LeRobot concatenates them), with LeRobot's
        encoder settings for that codec. Frame k of episode e shows a pattern of its own (a
        block whose place and colour change every frame); its state is [e, k, e + k / 100, ...].

    lerobot_made.py check ROOT DUMPS
        DUMPS/<episode>/ holds what pi0lerobotsrc played of each episode given: <camera>.yuv
        (I420 frames, one after the other) and state.f32 (float32 rows). Every frame must be, byte for byte, the frame that
        lerobot's decode_video_frames (its pyav backend) selects for that frame's query
        timestamp, in the decoder's own I420, and torchcodec (LeRobot's default backend) must
        select the same frames; the state rows must be the dataset's. Prints one line per
        failure; exit 1 when anything failed.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

STATE_DIM = 6


def frame_image(e, k, w, h):
    """Frame k of episode e: a smooth background and a block that moves one step per frame."""
    y, x = np.mgrid[0:h, 0:w]
    img = np.empty((h, w, 3), np.uint8)
    img[..., 0] = (x * 255 // max(w - 1, 1) + 40 * e) % 256
    img[..., 1] = (y * 255 // max(h - 1, 1) + 7 * k) % 256
    img[..., 2] = 128
    bs = max(8, w // 8)
    bx = (k * 5) % max(w - bs, 1)
    by = ((k * 3) + 11 * e) % max(h - bs, 1)
    img[by:by + bs, bx:bx + bs] = [(60 * k) % 256, 255 - (30 * e) % 256, (90 * k + 17) % 256]
    return img


def state_row(e, k):
    return np.array([e, k, e + k / 100.0] + [0.25 * i for i in range(STATE_DIM - 3)], np.float32)


def make(args):
    from lerobot.configs.video import RGBEncoderConfig
    from lerobot.datasets import LeRobotDataset

    w, h = (int(v) for v in args.size.split("x"))
    lengths = [int(v) for v in args.lengths.split(",")]
    features = {
        "observation.images.main": {"dtype": "video", "shape": [h, w, 3],
                                    "names": ["height", "width", "channels"]},
        "observation.state": {"dtype": "float32", "shape": [STATE_DIM],
                              "names": [f"j{i}" for i in range(STATE_DIM)]},
        "action": {"dtype": "float32", "shape": [STATE_DIM],
                   "names": [f"j{i}" for i in range(STATE_DIM)]},
    }
    ds = LeRobotDataset.create("local/lerobot-made", fps=args.fps, features=features,
                               root=args.root, robot_type="sim",
                               rgb_encoder=RGBEncoderConfig(vcodec=args.codec))
    for e, n in enumerate(lengths):
        for k in range(n):
            s = state_row(e, k)
            # With --task-change, episode 2 is told something else from its frame 5 on.
            task = "task 2" if args.task_change and e == 2 and k >= 5 else f"task {e % 2}"
            ds.add_frame({"observation.images.main": frame_image(e, k, w, h),
                          "observation.state": s, "action": s * 2, "task": task})
        ds.save_episode()
    ds.finalize()
    info = json.load(open(Path(args.root) / "meta" / "info.json"))
    vids = sorted((Path(args.root) / "videos").rglob("*.mp4"))
    print(json.dumps({"episodes": info["total_episodes"], "frames": info["total_frames"],
                      "videos": [str(v.relative_to(args.root)) for v in vids]}))


def yuv_planes(frame):
    """An av.VideoFrame as its I420 bytes (Y, then U, then V, rows without padding)."""
    out = []
    for i, p in enumerate(frame.planes):
        pw, ph = (frame.width, frame.height) if i == 0 else ((frame.width + 1) // 2,
                                                            (frame.height + 1) // 2)
        a = np.frombuffer(p, np.uint8).reshape(-1, p.line_size)[:ph, :pw]
        out.append(a.tobytes())
    return b"".join(out)


def check(args):
    from lerobot.datasets import LeRobotDataset

    ds = LeRobotDataset("local/lerobot-made", root=args.root)
    episodes = sorted(int(p.name) for p in Path(args.dumps).iterdir() if p.name.isdigit())
    if not episodes:
        print("FAIL: nothing played")
        return 1
    failed = 0
    for e in episodes:
        failed += check_episode(ds, args.root, e, Path(args.dumps) / str(e))
    return 1 if failed else 0


def check_episode(ds, root, episode, dump):
    import av
    import torch
    from lerobot.datasets.video_utils import decode_video_frames

    failures = []

    def fail(msg):
        failures.append(msg)
        print(f"FAIL: episode {episode}:", msg)

    meta = ds.meta
    ep = meta.episodes[episode]
    lo, hi = ep["dataset_from_index"], ep["dataset_to_index"]
    frames = ds.hf_dataset.select(range(lo, hi))
    ts = [float(t) for t in frames["timestamp"]]
    state = np.stack([np.asarray(s, np.float32) for s in frames["observation.state"]])
    got_state = np.fromfile(dump / "state.f32", np.float32)
    # The instruction in effect at each state played (pi0-instruction events) is the task
    # LeRobot gives the frame.
    tasks_file = dump / "task.txt"
    if tasks_file.exists():
        got_tasks = tasks_file.read_text().splitlines()
        want_tasks = [ds[i]["task"] for i in range(lo, hi)]
        if got_tasks != want_tasks:
            fail(f"tasks: played {got_tasks}, LeRobot gives {want_tasks}")
    if got_state.size != state.size:
        fail(f"state: {got_state.size // STATE_DIM} rows played, the episode has {len(state)}")
    elif not np.array_equal(got_state.reshape(state.shape), state):
        fail("state: the rows played are not the dataset's")

    for key in meta.video_keys:
        cam = key.split(".")[-1]
        path = Path(root) / meta.get_video_file_path(episode, key)
        query = [ep[f"videos/{key}/from_timestamp"] + t for t in ts]
        # Every frame of the file, as PyAV decodes it: its time and its I420 and RGB images.
        decoded = []
        with av.open(str(path)) as c:
            st = c.streams.video[0]
            for f in c.decode(st):
                if f.pts is None:
                    continue
                decoded.append((float(f.pts * st.time_base), yuv_planes(f),
                                f.to_ndarray(format="rgb24")))
        # What LeRobot selects: its pyav backend (RGB images, same conversion as above, so
        # each is identified exactly), and its default, torchcodec.
        sel = decode_video_frames(path, query, ds.tolerance_s, backend="pyav")
        sel = (sel * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
        tc = decode_video_frames(path, query, ds.tolerance_s, backend="torchcodec")
        tc = (tc * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy().astype(np.int32)
        want = []
        for k, img in enumerate(sel):
            idx = [i for i, d in enumerate(decoded) if np.array_equal(d[2], img)]
            if not idx:
                fail(f"{cam} frame {k}: LeRobot's pyav frame is none of the file's frames")
                want.append(None)
                continue
            i = idx[0]
            want.append(decoded[i][1])
            # torchcodec converts to RGB its own way: its frame is the nearest of the file's.
            diffs = [np.abs(d[2].astype(np.int32) - tc[k]).mean() for d in decoded]
            if int(np.argmin(diffs)) != i:
                fail(f"{cam} frame {k}: torchcodec selects file frame {int(np.argmin(diffs))}, "
                     f"pyav file frame {i}")
        w, h = decoded[0][2].shape[1], decoded[0][2].shape[0]
        size = w * h + 2 * ((w + 1) // 2) * ((h + 1) // 2)
        got = (dump / f"{cam}.yuv").read_bytes()
        if len(got) != size * len(ts):
            fail(f"{cam}: {len(got) / size:g} frames played, the episode has {len(ts)}")
            continue
        for k, wnt in enumerate(want):
            if wnt is not None and got[k * size:(k + 1) * size] != wnt:
                near = [j for j, d in enumerate(decoded) if d[1] == got[k * size:(k + 1) * size]]
                fail(f"{cam} frame {k}: played file frame {near[0] if near else '?'}, "
                     f"LeRobot gives the one at {query[k]:.4f} s")
    print(f"episode {episode}: {len(ts)} frames, "
          f"{'OK' if not failures else str(len(failures)) + ' failures'}")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("root")
    m.add_argument("--codec", default="h264")
    m.add_argument("--fps", type=int, default=30)
    m.add_argument("--size", default="96x64")
    m.add_argument("--lengths", default="7,12,9")
    m.add_argument("--task-change", action="store_true")
    c = sub.add_parser("check")
    c.add_argument("root")
    c.add_argument("dumps")
    args = ap.parse_args()
    if args.cmd == "make":
        make(args)
        return 0
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
