#!/usr/bin/env python3
"""Loads a dataset that pi0lerobotsink wrote with the real lerobot (LeRobotDataset, 0.6.1,
Python 3.12) and holds it against what the chain produced, as tests/elements/pi0lerobotsink/test_pi0lerobotsink.cpp saw it.

    check_dataset.py ROOT EXPECT.json     # everything below; exit 0 when all holds
    check_dataset.py ROOT --episodes N    # only: it loads, N episodes, every frame decodes

EXPECT.json (written by the C++ test): fps, instruction, period_ns, and per episode the frames
the recorder should have kept ({t, seq, state}); the messages the robot was sent ({kind, send,
send_hi, rows}: the recorder read its send time between send and send_hi); dumps of camera frames ({episode, frame, view, format, width, height, file}).

Prints one line per failed check and a summary; exit status 1 when anything failed.
"""
import json
import sys

import numpy as np

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)
    return ok


def load(root, **kw):
    from lerobot.datasets import LeRobotDataset

    return LeRobotDataset("local/pi0-test", root=root, **kw)


def command_at(messages, period, t, send="send"):
    """The command in effect at t under the receiver's rules (docs/protocol.md): the same rule
    as pi0::lerobot::CommandTimeline, written again here plainly, each message sent at its
    @send field."""
    entries = []
    for m in sorted(messages, key=lambda m: m.get(send, m["send"])):
        s = m.get(send, m["send"])
        if s > t:
            break
        entries = [e for e in entries if e[0] <= s]
        rows = m["rows"]
        if m["kind"] == "stop" or not rows:
            continue
        if m["kind"] == "hold":
            rows = rows[:1]
        for j, r in enumerate(rows):
            entries.append((s + j * period, r))
    best = None
    for et, r in entries:
        if et <= t:
            best = r
    return best


def ambiguous_at(messages, period, t):
    """Whether a message's send time, or one of its rows' start, may fall on either side of t:
    the recorder read its send time somewhere in [send, send_hi] (the test's readings just
    before and just after its handler), so between them the test cannot know which."""
    for m in messages:
        lo, hi = m["send"], m.get("send_hi", m["send"])
        for j in range(max(1, len(m["rows"]))):
            if lo + j * period <= t <= hi + j * period:
                return True
    return False


def check_all(root, exp):
    fps = exp["fps"]
    episodes = exp["episodes"]
    ds = load(root, return_uint8=True)
    n_frames = sum(len(e["frames"]) for e in episodes)
    check(ds.num_episodes == len(episodes), f"episodes: {ds.num_episodes} != {len(episodes)}")
    check(ds.num_frames == n_frames, f"frames: {ds.num_frames} != {n_frames}")
    check(ds.fps == fps, f"fps {ds.fps} != {fps}")
    check(set(ds.meta.video_keys) == {"observation.images." + v for v in exp["views"]},
          f"video keys {ds.meta.video_keys}")
    period = exp["period_ns"]
    messages = sorted(exp["messages"], key=lambda m: m["send"])
    base = 0
    n_action_checked = n_ambiguous = 0
    n_pairs = n_gaps = 0
    for e, ep in enumerate(episodes):
        frames = ep["frames"]
        t0 = frames[0]["t"]
        ep_gaps = 0
        for k, f in enumerate(frames):
            item = ds[base + k]
            check(int(item["episode_index"]) == e, f"ep {e} frame {k}: episode_index {item['episode_index']}")
            check(int(item["frame_index"]) == k, f"ep {e} frame {k}: frame_index {item['frame_index']}")
            check(int(item["index"]) == base + k, f"ep {e} frame {k}: index")
            ts = float(item["timestamp"])
            check(ts == float(np.float32(k / fps)), f"ep {e} frame {k}: timestamp {ts} != {k}/{fps}")
            # The chain's own clock: frame k was captured k base-camera periods after the first,
            # unless the base camera skipped frames upstream (the recorder then warns and counts
            # a gap: LeRobot's timeline is k / fps). Those are counted, not hidden.
            if k > 0:
                delta = (f["t"] - frames[k - 1]["t"]) / 1e9
                n_pairs += 1
                if abs(delta - 1.0 / fps) >= 0.5 / fps:
                    n_gaps += 1
                    ep_gaps += 1
                    print(f"note: ep {e} frame {k} was captured {delta * 1e3:.1f} ms after frame {k - 1}")
            if ep_gaps == 0:
                chain = (f["t"] - t0) / 1e9
                check(abs(chain - ts) < 0.5 / fps,
                      f"ep {e} frame {k}: captured at {chain:.6f} s into the episode, timestamp {ts:.6f}")
            state = item["observation.state"].numpy()
            check(np.array_equal(state, np.array(f["state"], dtype=np.float32)),
                  f"ep {e} frame {k}: state {state} != {f['state']}")
            action = item["action"].numpy()
            want = command_at(messages, period, f["t"])
            if want is None:
                want = f["state"]
            if ambiguous_at(messages, period, f["t"]):
                # The recorder's reading of a send time is within [send, send_hi]: either side
                # of the capture is right.
                n_ambiguous += 1
                late = command_at(messages, period, f["t"], send="send_hi")
                options = [np.array(x if x is not None else f["state"], np.float32) for x in (want, late)]
                check(any(np.array_equal(action, o) for o in options),
                      f"ep {e} frame {k}: action {action} is none of {options}")
            else:
                n_action_checked += 1
                check(np.array_equal(action, np.array(want, np.float32)),
                      f"ep {e} frame {k}: action {action} != commanded {want}")
            check(item["task"] == exp["instruction"], f"ep {e} frame {k}: task {item['task']!r}")
        base += len(frames)
    print(f"actions: {n_action_checked} frames exact, {n_ambiguous} captured while the recorder read a send time")
    print(f"timing: {n_pairs - n_gaps} of {n_pairs} consecutive frames one base period apart")
    check(n_gaps * 5 <= n_pairs, f"the chain skipped base frames {n_gaps} times in {n_pairs}")
    check(n_action_checked > 0, "no frame's action could be checked exactly")

    # Lossless frames: the RGB camera exactly as LeRobot returns it (both decoders); YUV cameras
    # plane for plane from the MP4 (LeRobot returns them converted to RGB by FFmpeg).
    import av

    dumps = exp.get("dumps", [])
    check(len(dumps) > 0, "no camera frame dumped to compare")
    pyav = load(root, return_uint8=True, video_backend="pyav")
    for d in dumps:
        e, k, view = d["episode"], d["frame"], d["view"]
        raw = np.fromfile(d["file"], dtype=np.uint8)
        w, h, fmt = d["width"], d["height"], d["format"]
        index = sum(len(x["frames"]) for x in episodes[:e]) + k
        key = "observation.images." + view
        if fmt == "RGB":
            want = raw.reshape(h, w, 3)
            for name, dset in (("default", ds), ("pyav", pyav)):
                got = dset[index][key].permute(1, 2, 0).numpy()
                check(np.array_equal(got, want),
                      f"{view} ep {e} frame {k} ({name} decoder): max diff "
                      f"{np.abs(got.astype(int) - want).max()}")
        else:
            y = raw[: w * h].reshape(h, w)
            if fmt == "NV12":
                uv = raw[w * h:].reshape(h // 2, w // 2, 2)
                u, v = uv[..., 0], uv[..., 1]
            else:
                u = raw[w * h: w * h + (w // 2) * (h // 2)].reshape(h // 2, w // 2)
                v = raw[w * h + (w // 2) * (h // 2):].reshape(h // 2, w // 2)
            ep_meta = ds.meta.episodes[e]
            path = f"{root}/{ds.meta.get_video_file_path(e, key)}"
            with av.open(path) as c:
                frames = [fr for fr in c.decode(c.streams.video[0])]
            fr = frames[round(ep_meta[f"videos/{key}/from_timestamp"] * fps) + k]
            check(fr.format.name == "yuv420p", f"{view}: decoded as {fr.format.name}")
            planes = [np.frombuffer(fr.planes[i], np.uint8).reshape(-1, fr.planes[i].line_size)
                      for i in range(3)]
            got = [planes[0][:h, :w], planes[1][: h // 2, : w // 2], planes[2][: h // 2, : w // 2]]
            for name, g, wnt in (("Y", got[0], y), ("U", got[1], u), ("V", got[2], v)):
                check(np.array_equal(g, wnt),
                      f"{view} ep {e} frame {k} plane {name}: max diff "
                      f"{np.abs(g.astype(int) - wnt).max()}")
            lr = ds[index][key].permute(1, 2, 0).numpy().astype(int)
            ref = fr.to_ndarray(format="rgb24").astype(int)
            check(lr.shape == ref.shape and np.abs(lr - ref).mean() < 8.0,
                  f"{view} ep {e} frame {k}: LeRobot's RGB is not the decoded frame")

    # Stats: the recorded values' own statistics.
    st = ds.meta.stats
    states = np.array([f["state"] for ep in episodes for f in ep["frames"]], np.float64)
    for key, vals in (("observation.state", states),):
        s = st[key]
        check(int(s["count"][0]) == len(vals), f"stats {key} count {s['count']}")
        for name, fn in (("mean", np.mean), ("std", np.std), ("min", np.min), ("max", np.max)):
            check(np.allclose(s[name], fn(vals, axis=0), rtol=1e-5, atol=1e-6),
                  f"stats {key} {name}: {s[name]} != {fn(vals, axis=0)}")
    actions = np.array([ds[i]["action"].numpy() for i in range(ds.num_frames)], np.float64)
    check(np.allclose(st["action"]["mean"], actions.mean(0), rtol=1e-5, atol=1e-6), "stats action mean")
    for v in exp["views"]:
        s = st["observation.images." + v]
        check(np.array(s["mean"]).shape == (3, 1, 1), f"stats {v} shape {np.array(s['mean']).shape}")
        check(bool(np.all((np.array(s["min"]) >= 0) & (np.array(s["max"]) <= 1))), f"stats {v} range")
    # One episode alone (episode filter, from_timestamp).
    if len(episodes) > 1:
        one = load(root, episodes=[1], return_uint8=True)
        check(one.num_frames == len(episodes[1]["frames"]), "episodes=[1] frame count")
        check(int(one[0]["episode_index"]) == 1, "episodes=[1] first item")


def check_loadable(root, n_episodes):
    ds = load(root)
    check(ds.num_episodes == n_episodes, f"episodes: {ds.num_episodes} != {n_episodes}")
    for i in range(ds.num_frames):
        item = ds[i]  # decodes every camera of every frame
        for k in ds.meta.video_keys:
            check(item[k].ndim == 3, f"frame {i} {k}")
    print(f"{ds.num_episodes} episodes, {ds.num_frames} frames load and decode")


def main():
    root = sys.argv[1]
    if sys.argv[2] == "--episodes":
        check_loadable(root, int(sys.argv[3]))
    else:
        with open(sys.argv[2]) as f:
            check_all(root, json.load(f))
    print(f"{len(failures)} failed checks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
