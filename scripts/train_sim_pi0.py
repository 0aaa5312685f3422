#!/usr/bin/env python3
"""Trains a small pi0 with LeRobot's own classes on a dataset that the chain recorded from the
simulated robot (`pi0-sim run --record`, docs/sim.md), and saves it as LeRobot saves a policy:
`save_pretrained()` of the policy and of its pre/post-processors (the normalization in the
processor files), which `pi0infer model=DIR` opens as it is.

    .lerobot-venv/bin/python scripts/train_sim_pi0.py DATASET [DATASET...] OUT [--steps 3000]
        [--batch 16] [--holdout DATASET] [--eval-every 1000] [--init CHECKPOINT]
        [--type pi0|pi05] [--cameras main,...] [--pos-embed random|sincos] [--cache FILE]

`scripts/sim_close_loop.sh` runs the recipe that works (docs/sim.md): first on the overhead
camera alone (`--cameras main`: a seventh of the step, and the step where the model learns
which block the words name), then from that checkpoint on all three (`--init`; the cameras
share the vision tower). `--type pi05` trains LeRobot's `PI05Policy` instead (the state as
discretized tokens in a 48-token prompt, adaRMS time conditioning). `--pos-embed sincos` starts
the vision tower's position embeddings at 2-D sine-cosine values instead of LeRobot's random
ones (a small tower from scratch learns where things are sooner). `--cache FILE` keeps the
decoded frames of these datasets in FILE and reads them back on a later run (minutes saved).

`--init` goes on from a checkpoint this script saved (its weights; the sizes must be the same
and the datasets those it was trained on, whose statistics it holds): e.g. a run stopped before
its learning rate decayed, given a schedule of its own from `--lr` down (the optimizer's moments
start afresh: give it a short `--warmup`).

Several DATASETs (shards recorded side by side, each its own `pi0-sim run --record`; appending
to one dataset slows as it grows, docs/sim.md) train as one: their frames together, their
statistics merged with LeRobot's own `aggregate_stats`. `--holdout` scores the policy open
loop every `--eval-every` steps on the first frame of each episode of a dataset it does not
train on: the mean distance, in radians per joint, from LeRobot's predicted chunk (through its
pre- and post-processors, the noise seeded) to the recorded expert's; a policy that ignores
the views and the instruction cannot get it low, so a run says whether it learns before it is
deployed.

LeRobot 0.6.1 does the work: `PI0Policy` (its flow-matching loss, `forward`), its
`make_pi0_pre_post_processors` with the dataset's own statistics (LeRobot's normalization and
its tokenizer step), `LeRobotDataset` with the delta timestamps `resolve_delta_timestamps` makes
for the config (action chunks, padded past an episode's end and masked in the loss), and the
config's optimizer and scheduler presets (AdamW, cosine decay with warm-up). The loop is
`lerobot_train.update_policy`'s, without its `accelerate` wrapper (not installed here): forward,
backward, gradient clipping at the config's norm, optimizer and scheduler steps.

LeRobot's configs know only the full-size Gemma variants: the sizes are set as
tests/parity/lerobot_processor_parity.py sets them (lerobot_sizes.py's `patch_lerobot` and `shrink`) and
written into config.json's "gst_pi0" object, with the tokenizer (the test tokenizer, as
transformers' GemmaTokenizer). The decoded frames are held in memory for the run (decoding
videos for every batch would be most of the time).

Deterministic for a given seed, dataset, torch version and thread count.
"""
import argparse
import json
import os
import platform
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "parity"))
import lerobot_processor_parity as parity  # noqa: E402  (the test tokenizer, the gst_pi0 sizes)
import lerobot_sizes as sizes  # noqa: E402  (LeRobot at small sizes)

# Small enough to train on a CPU; 64-pixel views in patches of 8 (64 tokens per view). LeRobot's
# pi0 fixes 8 attention heads in code, so the attention over the prefix (3 x 64 image tokens and
# the prompt) is most of the time: hence the short prompt and the small batch.
SIZES = dict(vision=dict(image_size=64, patch_size=8, width=64, depth=2, mlp_dim=128, num_heads=4),
             text=dict(width=64, depth=2, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=16),
             expert=dict(width=64, depth=2, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=16))


def sincos_2d(side: int, dim: int) -> torch.Tensor:
    """A side x side grid's position table (row-major, as SigLIP numbers its patches): the first
    half of each row codes the patch's row, the second its column, each as sines and cosines of
    geometric frequencies (the fixed embedding of MAE and of the original ViT ablations). Close
    patches get close codes, and a linear read-out gives the place: what a tower trained from
    scratch on a few thousand scenes has to discover from random codes otherwise."""
    if dim % 4:
        raise ValueError("the vision width must be a multiple of 4 for --pos-embed sincos")
    quarter = dim // 4
    freq = 1.0 / 10000 ** (torch.arange(quarter, dtype=torch.float64) / quarter)
    pos = torch.arange(side, dtype=torch.float64)
    row, col = torch.meshgrid(pos, pos, indexing="ij")

    def code(p):
        angle = p.reshape(-1, 1) * freq
        return torch.cat([angle.sin(), angle.cos()], dim=1)

    return torch.cat([code(row), code(col)], dim=1).float()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("datasets", nargs="+", metavar="DATASET... OUT")
    ap.add_argument("--holdout", help="a dataset to score the policy on open loop while it trains")
    ap.add_argument("--eval-every", type=int, default=1000)
    ap.add_argument("--save-every", type=int, default=0,
                    help="also save the policy every N steps, in OUT/step-N (0: only at the end, in OUT)")
    ap.add_argument("--steps", type=int, default=3000,
                    help="0 saves the untrained policy (LeRobot's initialization): the control")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (from scratch, not LeRobot's fine-tuning 2.5e-5)")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--chunk", type=int, default=10)
    ap.add_argument("--type", choices=["pi0", "pi05"], default="pi0",
                    help="LeRobot's PI0Policy or PI05Policy (the state as discrete tokens in the prompt,"
                         " quantile normalization, adaRMSNorm time conditioning)")
    ap.add_argument("--tokens", type=int, help="prompt tokens (16 for pi0: the instructions take 6; 48 for"
                                                " pi0.5, whose prompt holds the state too)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--name", help="the model's name in config.json (pi0-sim-tiny, pi05-sim-tiny)")
    ap.add_argument("--image", type=int, default=SIZES["vision"]["image_size"],
                    help="the model's image size (record the cameras at it: no resize)")
    ap.add_argument("--patch", type=int, default=SIZES["vision"]["patch_size"],
                    help="the vision patch; image/patch squared tokens per view (64 by default)")
    ap.add_argument("--width", type=int, default=SIZES["vision"]["width"],
                    help="the width of the vision tower, the language model and the action expert"
                         " (their MLPs twice it)")
    ap.add_argument("--depth", type=int, default=SIZES["vision"]["depth"], help="layers of each")
    ap.add_argument("--cameras", help="train on these cameras only, e.g. main (a quicker experiment: pi0infer"
                                      " refuses observations with more views than the model takes)")
    ap.add_argument("--init", help="start from this checkpoint's weights (saved by this script, same sizes)")
    ap.add_argument("--cache", help="keep the decoded frames in this file: decoded once, read back on later runs"
                                    " with the same datasets")
    ap.add_argument("--pos-embed", choices=["random", "sincos"], default="random",
                    help="how SigLIP's position embeddings start: LeRobot's random draw, or a 2-D sine-cosine"
                         " table (still trained)")
    a = ap.parse_args()
    a.tokens = a.tokens or (48 if a.type == "pi05" else 16)
    a.name = a.name or ("pi05-sim-tiny" if a.type == "pi05" else "pi0-sim-tiny")
    if len(a.datasets) < 2:
        ap.error("give at least one DATASET and the OUT directory")
    *a.datasets, a.out = a.datasets
    for d in a.datasets + ([a.holdout] if a.holdout else []):
        if not os.path.isfile(os.path.join(d, "meta", "info.json")):
            sys.exit(f"{d}: not a LeRobotDataset (no meta/info.json); record_sim.sh's shards are OUT/shard-*/")
    if a.init and not os.path.isfile(os.path.join(a.init, "model.safetensors")):
        sys.exit(f"--init {a.init}: no model.safetensors there")
    if a.image % a.patch:
        ap.error("--image must be a multiple of --patch")
    SIZES["vision"].update(image_size=a.image, patch_size=a.patch)
    for part in SIZES.values():
        part.update(width=a.width, depth=a.depth, mlp_dim=2 * a.width)

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    import lerobot
    import transformers
    from lerobot.configs.types import FeatureType
    from lerobot.datasets.factory import resolve_delta_timestamps
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata
    from lerobot.utils.feature_utils import dataset_to_policy_features
    if a.type == "pi05":
        from lerobot.policies.pi05 import modeling_pi05 as modeling
        from lerobot.policies.pi05 import processor_pi05 as processor
        from lerobot.policies.pi05.configuration_pi05 import PI05Config as Config
        policy_class, make_processors = modeling.PI05Policy, processor.make_pi05_pre_post_processors
    else:
        from lerobot.policies.pi0 import modeling_pi0 as modeling
        from lerobot.policies.pi0 import processor_pi0 as processor
        from lerobot.policies.pi0.configuration_pi0 import PI0Config as Config
        policy_class, make_processors = modeling.PI0Policy, processor.make_pi0_pre_post_processors

    tokenizer, vocab = parity.gemma_tokenizer()
    sizes.patch_lerobot(modeling, SIZES, processor, tokenizer)

    from lerobot.datasets.compute_stats import aggregate_stats

    repo = "pi0-sim/expert"
    metas = [LeRobotDatasetMetadata(repo, root=d) for d in a.datasets]
    meta = metas[0]
    for d, m in zip(a.datasets[1:], metas[1:]):
        if m.features != meta.features or m.fps != meta.fps:
            sys.exit(f"{d}: its features or fps differ from {a.datasets[0]}'s: the shards must be recorded alike")
    stats = aggregate_stats([m.stats for m in metas]) if len(metas) > 1 else meta.stats
    episodes = sum(m.total_episodes for m in metas)
    features = dataset_to_policy_features(meta.features)
    if a.cameras:
        keep = {f"observation.images.{c}" for c in a.cameras.split(",")}
        missing = keep - set(features)
        if missing:
            sys.exit(f"--cameras: the datasets have no {', '.join(sorted(missing))}")
        features = {k: f for k, f in features.items() if not k.startswith("observation.images.") or k in keep}
    s = SIZES["vision"]["image_size"]
    cfg = Config(device="cpu", dtype="float32", image_resolution=(s, s), chunk_size=a.chunk,
                 n_action_steps=min(5, a.chunk), tokenizer_max_length=a.tokens,
                 input_features={k: f for k, f in features.items() if f.type is not FeatureType.ACTION},
                 output_features={"action": features["action"]},
                 optimizer_lr=a.lr, scheduler_warmup_steps=a.warmup, scheduler_decay_steps=max(1, a.steps),
                 scheduler_decay_lr=a.lr / 20)
    policy = policy_class(cfg)
    sizes.shrink(policy.model, SIZES, vocab, lm_heads=True)
    if a.pos_embed == "sincos":
        emb = policy.model.paligemma_with_expert.paligemma.model.vision_tower.vision_model.embeddings
        side = a.image // a.patch
        with torch.no_grad():
            emb.position_embedding.weight.copy_(sincos_2d(side, emb.position_embedding.weight.shape[1]))
    init_steps = 0
    if a.init:
        from safetensors.torch import load_file
        try:
            policy.load_state_dict(load_file(os.path.join(a.init, "model.safetensors")), strict=True)
        except RuntimeError as e:
            sys.exit(f"--init {a.init}: its weights do not fit these sizes: {str(e).splitlines()[0]}")
        try:
            with open(os.path.join(a.init, "training.json")) as f:
                init_steps = int(json.load(f).get("steps", 0))
        except (OSError, ValueError):
            pass
    pre, post = make_processors(cfg, dataset_stats=stats)
    cameras = [k for k in features if k.startswith("observation.images.")]

    def load(root, first_frames_only=False):
        """The dataset's frames in memory, the views as uint8 (the videos' own values: a quarter
        of float32's memory, and exact: x = round(255 x) / 255 for every decoded value)."""
        ds = LeRobotDataset(repo, root=root, delta_timestamps=resolve_delta_timestamps(cfg, ds_meta(root)))
        out = []
        for i in range(len(ds)):
            if first_frames_only and int(ds.hf_dataset[i]["frame_index"]) != 0:
                continue
            item = ds[i]
            for k in [k for k in item if k.startswith("observation.images.")]:  # all: the cache is shared
                item[k] = (item[k] * 255).round().to(torch.uint8)
            out.append(item)
        return out

    def ds_meta(root):
        return metas[a.datasets.index(root)] if root in a.datasets else LeRobotDatasetMetadata(repo, root=root)

    t0 = time.time()
    key = {"datasets": [os.path.abspath(d) for d in a.datasets],
           "holdout": os.path.abspath(a.holdout) if a.holdout else None, "chunk": a.chunk}
    cached = torch.load(a.cache) if a.cache and os.path.isfile(a.cache) else None
    if cached is not None and cached["key"] == key:
        items, held = cached["items"], cached["held"]
    else:
        items = [item for d in a.datasets for item in load(d)]
        held = load(a.holdout, first_frames_only=True) if a.holdout else []
        if a.cache:
            torch.save({"key": key, "items": items, "held": held}, a.cache)
    decode_s = time.time() - t0
    print(json.dumps({"frames": len(items), "episodes": episodes, "holdout_episodes": len(held),
                      "decode_s": round(decode_s, 1),
                      "parameters": sum(p.numel() for p in policy.parameters())}), flush=True)

    def collate(rows):
        batch = {}
        for k in rows[0]:
            if k.startswith("observation.images.") and k not in cameras:
                continue  # a camera left out by --cameras
            vals = [r[k] for r in rows]
            batch[k] = torch.stack(vals) if isinstance(vals[0], torch.Tensor) else vals
            if k in cameras:
                batch[k] = batch[k].float() / 255
        return batch

    def open_loop_score():
        """Mean |predicted - expert| per joint and row (radians) over the held-out first frames."""
        if not held:
            return None
        policy.eval()
        err, n = 0.0, 0
        with torch.no_grad(), torch.random.fork_rng():
            torch.manual_seed(0)
            for i in range(0, len(held), 16):
                rows = held[i:i + 16]
                batch = collate(rows)
                chunk = post(policy.predict_action_chunk(pre(dict(batch))))
                want = batch["action"]
                keep = ~batch["action_is_pad"]
                err += float((chunk - want).abs().mean(-1)[keep].sum())
                n += int(keep.sum())
        policy.train()
        return round(err / max(1, n), 4)

    def save(out, step):
        """The policy as LeRobot saves it (with its processors), gst-pi0's sizes in config.json
        and how it was trained in training.json."""
        was_training = policy.training
        policy.eval()
        parity.save_checkpoint(out, policy, pre, post, SIZES, vocab,
                               extra={"name": a.name,
                                      "tokenizer": os.path.relpath(parity.TOKENIZER, os.path.abspath(out))})
        with open(f"{out}/training.json", "w") as f:
            json.dump({"lerobot": lerobot.__version__, "transformers": transformers.__version__,
                       "torch": torch.__version__, "python": platform.python_version(),
                       "machine": platform.machine(), "threads": a.threads, "seed": a.seed, "steps": step,
                       "init": os.path.abspath(a.init) if a.init else None, "init_steps": init_steps,
                       "type": a.type, "tokens": a.tokens, "cameras": a.cameras, "batch": a.batch,
                       "image": a.image, "patch": a.patch, "pos_embed": a.pos_embed, "lr": a.lr,
                       "chunk": a.chunk, "frames": len(items),
                       "datasets": [os.path.abspath(d) for d in a.datasets], "episodes": episodes,
                       "holdout": os.path.abspath(a.holdout) if a.holdout else None,
                       "holdout_rad": scores, "decode_s": round(decode_s, 1),
                       "train_s": round(time.time() - t0, 1),
                       "final_loss": sum(losses[-100:]) / len(losses[-100:]) if losses else None},
                      f, indent=2)
        if was_training:
            policy.train()

    opt = cfg.get_optimizer_preset().build(policy.parameters())
    sched = cfg.get_scheduler_preset().build(opt, max(1, a.steps))
    gen = torch.Generator().manual_seed(a.seed)
    order = torch.randperm(len(items), generator=gen).tolist()
    pos = 0
    t0 = time.time()
    policy.train()
    losses = []
    scores = {0: open_loop_score()} if held else {}
    if held:
        print(json.dumps({"step": 0, "holdout_rad": scores[0]}), flush=True)
    for step in range(1, a.steps + 1):
        if pos + a.batch > len(order):
            order, pos = torch.randperm(len(items), generator=gen).tolist(), 0
        batch = pre(collate([items[i] for i in order[pos:pos + a.batch]]))
        pos += a.batch
        loss, _ = policy.forward(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.optimizer_grad_clip_norm)
        opt.step()
        opt.zero_grad()
        sched.step()
        losses.append(loss.item())
        if step % 100 == 0 or step == a.steps:
            line = {"step": step, "loss": round(sum(losses[-100:]) / len(losses[-100:]), 5),
                    "lr": sched.get_last_lr()[0], "s": round(time.time() - t0, 1)}
            if held and (step % a.eval_every == 0 or step == a.steps):
                line["holdout_rad"] = scores[step] = open_loop_score()
            print(json.dumps(line), flush=True)
        if a.save_every and step % a.save_every == 0 and step != a.steps:
            save(f"{a.out}/step-{step}", step)
    train_s = time.time() - t0
    save(a.out, a.steps)

    print(json.dumps({"saved": a.out, "train_s": round(train_s, 1)}))


if __name__ == "__main__":
    main()
