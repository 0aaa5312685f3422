#!/usr/bin/env python3
"""What LeRobot's users do next with a dataset pi0lerobotsink recorded (lossy, several episodes):
check its quality against the camera frames, and merge it with LeRobot's own tools.

    merge_and_quality.py ROOT EXPECT.json WORK

EXPECT.json (tests/elements/pi0lerobotsink/test_pi0lerobotsink.cpp): {"fps", "min_psnr", "dumps": [{episode: 0, frame: k,
view, format, width, height, file}]}: camera frames as the recorder received them, k counted
over the whole recording (the dataset's index).

0. info.json carries the encoder keys LeRobot writes (video.g, video.crf, ...), in values
   LeRobot's RGBEncoderConfig accepts.
1. Quality: every dumped I420 frame against the same frame decoded from the MP4 (PyAV, plane
   for plane): the luma PSNR of each must be at least min_psnr.
2. Merging: a copy of the dataset is merged with the dataset by aggregate_datasets,
   merge_datasets and `lerobot-edit-dataset --operation.type merge`. Each result must load in
   LeRobotDataset with both copies' episodes, and each of its episodes' first and last frames
   must equal, for every camera, the source's (the videos are concatenated without re-encoding).

Prints one line per failure and a summary; exit status 1 when anything failed.
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)
    return ok


def load(repo_id, root):
    from lerobot.datasets import LeRobotDataset

    return LeRobotDataset(repo_id, root=root)


def quality(root, exp):
    import av

    ds = load("local/pi0-rec", root)
    worst = None
    for d in exp["dumps"]:
        if d["format"] != "I420":
            continue
        k, view, w, h = d["frame"], d["view"], d["width"], d["height"]
        key = "observation.images." + view
        item = ds.hf_dataset[k]
        e, f = int(item["episode_index"]), int(item["frame_index"])
        ep = ds.meta.episodes[e]
        path = Path(root) / ds.meta.get_video_file_path(e, key)
        with av.open(str(path)) as c:
            frames = [fr for fr in c.decode(c.streams.video[0])]
        fr = frames[round(ep[f"videos/{key}/from_timestamp"] * exp["fps"]) + f]
        y = np.frombuffer(fr.planes[0], np.uint8).reshape(-1, fr.planes[0].line_size)[:h, :w]
        want = np.fromfile(d["file"], np.uint8)[: w * h].reshape(h, w)
        mse = np.mean((y.astype(np.float64) - want) ** 2)
        psnr = 99.0 if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)
        worst = psnr if worst is None else min(worst, psnr)
        check(psnr >= exp["min_psnr"],
              f"{view} frame {k}: luma PSNR {psnr:.1f} dB < {exp['min_psnr']} dB")
    check(worst is not None, "no I420 camera frame dumped")
    if worst is not None:
        print(f"quality: worst luma PSNR {worst:.1f} dB")


def same_frames(merged, sources):
    """Every episode of @merged (the sources' episodes in order) against its source's."""
    src_eps = [(s, e) for s in sources for e in range(s.meta.total_episodes)]
    if not check(merged.meta.total_episodes == len(src_eps),
                 f"{merged.root}: {merged.meta.total_episodes} episodes, "
                 f"the sources have {len(src_eps)}"):
        return
    for me, (s, se) in enumerate(src_eps):
        mep, sep = merged.meta.episodes[me], s.meta.episodes[se]
        check(mep["length"] == sep["length"], f"{merged.root}: episode {me} length")
        for off in (0, sep["length"] - 1):
            a = merged[mep["dataset_from_index"] + off]
            b = s[sep["dataset_from_index"] + off]
            for key in s.meta.video_keys:
                check(np.array_equal(a[key].numpy(), b[key].numpy()),
                      f"{merged.root}: episode {me} frame {off} of {key} differs from its source")
            check(np.array_equal(a["observation.state"].numpy(), b["observation.state"].numpy()),
                  f"{merged.root}: episode {me} frame {off} state differs")


def merging(root, work):
    from lerobot.datasets.aggregate import aggregate_datasets
    from lerobot.datasets.dataset_tools import merge_datasets

    work = Path(work)
    copy = work / "copy"
    shutil.copytree(root, copy)
    a, b = load("local/a", root), load("local/b", copy)
    check(a.meta.total_episodes >= 3, f"only {a.meta.total_episodes} episodes recorded")

    out = work / "aggregated"
    try:
        aggregate_datasets(["local/a", "local/b"], "local/agg", roots=[Path(root), copy],
                           aggr_root=out)
        same_frames(load("local/agg", out), [a, b])
    except Exception as ex:  # noqa: BLE001 - the failure is the result
        check(False, f"aggregate_datasets: {type(ex).__name__}: {ex}")

    out = work / "merged"
    try:
        merge_datasets([a, b], "local/merged", output_dir=out)
        same_frames(load("local/merged", out), [a, b])
    except Exception as ex:  # noqa: BLE001
        check(False, f"merge_datasets: {type(ex).__name__}: {ex}")

    out = work / "edited"
    cli = Path(sys.executable).parent / "lerobot-edit-dataset"
    r = subprocess.run([str(cli), "--new_repo_id", "local/edited", "--new_root", str(out),
                        "--operation.type", "merge",
                        "--operation.repo_ids", '["local/a", "local/b"]',
                        "--operation.roots", json.dumps([str(root), str(copy)]),
                        "--push_to_hub", "false"],
                       capture_output=True, text=True, timeout=600)
    if check(r.returncode == 0, f"lerobot-edit-dataset merge: exit {r.returncode}: "
                                f"{(r.stderr or r.stdout)[-2000:]}"):
        same_frames(load("local/edited", out), [a, b])


def encoder_keys(root):
    """info.json says how each camera was encoded, with the keys LeRobot 0.6.1's writer adds, in
    values LeRobot's own encoder configuration accepts."""
    from lerobot.configs.video import VIDEO_ENCODER_INFO_KEYS, RGBEncoderConfig

    info = json.load(open(Path(root) / "meta" / "info.json"))
    for key, f in info["features"].items():
        if f.get("dtype") != "video":
            continue
        missing = sorted(VIDEO_ENCODER_INFO_KEYS - set(f["info"]))
        check(not missing, f"{key}: info lacks {missing}")
        try:
            RGBEncoderConfig.from_video_info(f["info"])
        except Exception as ex:  # noqa: BLE001
            check(False, f"{key}: LeRobot refuses its encoder info: {ex}")


def main():
    root, expect, work = sys.argv[1], sys.argv[2], sys.argv[3]
    exp = json.load(open(expect))
    encoder_keys(root)
    quality(root, exp)
    merging(root, work)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
