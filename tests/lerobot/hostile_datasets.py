#!/usr/bin/env python3
"""Damaged and hostile copies of a dataset LeRobot wrote (tests/lerobot/lerobot_made.py make),
each with what pi0lerobotsrc must say about it (tests/elements/pi0lerobotsrc/test_pi0lerobotsrc.cpp plays every one).

    hostile_datasets.py GOOD OUT     writes OUT/<case>/ and OUT/cases.json:
        [{"name", "episode", "expect": text the element's error must contain, or "" when the
          episode must play to its end}]

The cases are those of the 2026-12-01 report (shapes and fps of the wrong type or size, tasks as
large_string, windows shortened, reversed or NaN, counts that do not match) and a few more.
"""
import json
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

CAM = "observation.images.main"


def episodes_file(root):
    return sorted((root / "meta" / "episodes").rglob("*.parquet"))[0]


def edit_info(root, f):
    p = root / "meta" / "info.json"
    info = json.loads(p.read_text())
    f(info)
    p.write_text(json.dumps(info))


def edit_episodes(root, f):
    p = episodes_file(root)
    t = pq.read_table(p)
    t = f(t)
    pq.write_table(t, p)


def set_column(t, name, values, type=None):
    i = t.schema.get_field_index(name)
    return t.set_column(i, pa.field(name, type or t.schema.field(name).type),
                        pa.array(values, type=type or t.schema.field(name).type))


def state_shape(v):
    return lambda i: i["features"]["observation.state"].__setitem__("shape", v)


CASES = [
    # name, episode, expect, edit(root)
    ("state-shape-string", 0, "observation.state' size is \"7\", not a number",
     lambda r: edit_info(r, state_shape(["7"]))),
    ("state-shape-negative", 0, "observation.state' size is -1, outside 1..4096",
     lambda r: edit_info(r, state_shape([-1]))),
    ("state-shape-int-max", 0, "size is 2147483647, outside",
     lambda r: edit_info(r, state_shape([2147483647]))),
    ("state-shape-1e12", 0, "size is 1000000000000.0, outside",
     lambda r: edit_info(r, state_shape([1e12]))),
    ("state-shape-two", 0, "is not a vector",
     lambda r: edit_info(r, state_shape([3, 2]))),
    ("video-shape-strings", 0, "height is \"64\", not a number",
     lambda r: edit_info(r, lambda i: i["features"][CAM].__setitem__("shape", ["64", "96", "3"]))),
    ("video-huge", 0, "height is 1000000000, outside 1..16384",
     lambda r: edit_info(r, lambda i: i["features"][CAM].__setitem__("shape",
                                                                      [1000000000, 1000000000, 3]))),
    ("video-one-channel", 0, "only RGB (3-channel) cameras",
     lambda r: edit_info(r, lambda i: i["features"][CAM].__setitem__("shape", [64, 96, 1]))),
    ("fps-string", 0, "fps is \"30\", not a number",
     lambda r: edit_info(r, lambda i: i.__setitem__("fps", "30"))),
    ("fps-29.97", 0, "fps is 29.97, not a whole number",
     lambda r: edit_info(r, lambda i: i.__setitem__("fps", 29.97))),
    ("fps-2e9", 0, "fps is 2000000000, outside 1..1000",
     lambda r: edit_info(r, lambda i: i.__setitem__("fps", 2000000000))),
    ("fps-wrong", 1, "fps",
     lambda r: edit_info(r, lambda i: i.__setitem__("fps", 15))),
    ("total-episodes-1e6", 0, "total_episodes is 1000000, meta/episodes has 3",
     lambda r: edit_info(r, lambda i: i.__setitem__("total_episodes", 1000000))),
    ("total-frames-wrong", 0, "total_frames is 99",
     lambda r: edit_info(r, lambda i: i.__setitem__("total_frames", 99))),
    ("features-not-object", 0, "info.json has no features",
     lambda r: edit_info(r, lambda i: i.__setitem__("features", [1, 2]))),
    ("info-not-json", 0, "info.json",
     lambda r: (r / "meta" / "info.json").write_text("{\"fps\": 30,")),
    ("version-number", 0, "is not a LeRobotDataset v3.0",
     lambda r: edit_info(r, lambda i: i.__setitem__("codebase_version", 3.0))),
    # Valid Arrow that polars writes: list<large_string>. Plays.
    ("tasks-large-string", 1, "",
     lambda r: edit_episodes(r, lambda t: t.set_column(
         t.schema.get_field_index("tasks"), pa.field("tasks", pa.list_(pa.large_string())),
         t.column("tasks").cast(pa.list_(pa.large_string()))))),
    ("tasks-numbers", 0, "'tasks' of row 0 is not a list of strings",
     lambda r: edit_episodes(r, lambda t: set_column(t, "tasks", [[1], [2], [3]],
                                                     pa.list_(pa.int64())))),
    ("to-timestamp-short", 1, "too short for its 12 frames",
     lambda r: edit_episodes(r, lambda t: set_column(
         t, f"videos/{CAM}/to_timestamp",
         [v if i != 1 else t.column(f"videos/{CAM}/from_timestamp")[1].as_py() + 0.1
          for i, v in enumerate(t.column(f"videos/{CAM}/to_timestamp").to_pylist())]))),
    ("timestamps-reversed", 1, "to_timestamp is not after from_timestamp",
     lambda r: edit_episodes(r, lambda t: t.set_column(
         t.schema.get_field_index(f"videos/{CAM}/from_timestamp"),
         t.schema.field(f"videos/{CAM}/from_timestamp"), t.column(f"videos/{CAM}/to_timestamp"))
         .set_column(t.schema.get_field_index(f"videos/{CAM}/to_timestamp"),
                     t.schema.field(f"videos/{CAM}/to_timestamp"),
                     t.column(f"videos/{CAM}/from_timestamp")))),
    ("timestamps-nan", 0, "must be finite",
     lambda r: edit_episodes(r, lambda t: set_column(
         t, f"videos/{CAM}/from_timestamp", [float("nan")] * t.num_rows))),
    ("length-wrong", 1, "do not span its length",
     lambda r: edit_episodes(r, lambda t: set_column(t, "length", [7, 11, 9]))),
    ("episode-twice", 0, "episode 1 twice",
     lambda r: edit_episodes(r, lambda t: set_column(t, "episode_index", [0, 1, 1]))),
    ("data-missing", 1, "cannot open",
     lambda r: [p.unlink() for p in (r / "data").rglob("*.parquet")]),
    ("video-missing", 1, "no such file",
     lambda r: [p.unlink() for p in (r / "videos").rglob("*.mp4")]),
    # Files that are not (whole) MP4s: refused before anything decodes them (a decoder finding
    # them while the pipeline starts could leave gst-launch-1.0 hanging).
    ("video-empty", 1, "an empty file",
     lambda r: [p.write_bytes(b"") for p in (r / "videos").rglob("*.mp4")]),
    ("video-cut-in-half", 1, "truncated",
     lambda r: [p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
                for p in (r / "videos").rglob("*.mp4")]),
    ("video-not-mp4", 1, "not an MP4 file",
     lambda r: [p.write_text("this is not a video\n") for p in (r / "videos").rglob("*.mp4")]),
    # Tasks as LeRobot finds them: tasks.parquet is required, a frame's task is the row at its
    # task_index (tasks.iloc), and a task_index past the rows raises.
    ("tasks-missing", 0, "tasks.parquet is missing",
     lambda r: (r / "meta" / "tasks.parquet").unlink()),
    ("tasks-reordered", 0, "the rows must be in task_index order",
     lambda r: pq.write_table(pq.read_table(r / "meta" / "tasks.parquet").take([1, 0]),
                              r / "meta" / "tasks.parquet")),
    ("task-index-past-tasks", 1, "has task_index 9, meta/tasks.parquet has 2 tasks",
     lambda r: [pq.write_table(set_column(pq.read_table(p), "task_index",
                                          [9] * pq.read_table(p).num_rows), p)
                for p in (r / "data").rglob("*.parquet")]),
    # The video is shorter than the episodes say: a warning, the episode's frames up to there.
    ("video-truncated", 2, "",
     lambda r: truncate_video(r)),
]


def truncate_video(root):
    import av

    src = sorted((root / "videos").rglob("*.mp4"))[0]
    tmp = src.with_suffix(".cut.mp4")
    with av.open(str(src)) as i, av.open(str(tmp), "w") as o:
        s = i.streams.video[0]
        os_ = o.add_stream_from_template(s)
        for n, pkt in enumerate(i.demux(s)):
            if pkt.dts is None or n >= 23:
                continue
            pkt.stream = os_
            o.mux(pkt)
    tmp.replace(src)


def main():
    good, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    cases = []
    for name, episode, expect, edit in CASES:
        d = out / name
        shutil.copytree(good, d)
        edit(d)
        cases.append({"name": name, "episode": episode, "expect": expect})
    (out / "cases.json").write_text(json.dumps(cases, indent=1))
    print(f"{len(cases)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
