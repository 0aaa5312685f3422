#!/usr/bin/env python3
"""Trains a small pi0 with LeRobot's own classes on a dataset that the chain recorded from the
simulated robot (`pi0-sim run --record`, docs/sim.md), and saves it as LeRobot saves a policy:
`save_pretrained()` of the policy and of its pre/post-processors (the normalization in the
processor files), which `pi0infer model=DIR` opens as it is.

    .lerobot-venv/bin/python scripts/train_sim_pi0.py DATASET OUT [--steps 3000] [--batch 16]

LeRobot 0.6.1 does the work: `PI0Policy` (its flow-matching loss, `forward`), its
`make_pi0_pre_post_processors` with the dataset's own statistics (LeRobot's normalization and
its tokenizer step), `LeRobotDataset` with the delta timestamps `resolve_delta_timestamps` makes
for the config (action chunks, padded past an episode's end and masked in the loss), and the
config's optimizer and scheduler presets (AdamW, cosine decay with warm-up). The loop is
`lerobot_train.update_policy`'s, without its `accelerate` wrapper (not installed here): forward,
backward, gradient clipping at the config's norm, optimizer and scheduler steps.

LeRobot's configs know only the full-size Gemma variants: the sizes are set as
tests/parity/lerobot_processor_parity.py sets them (its `patch_lerobot` and `shrink`) and
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
import lerobot_processor_parity as parity  # noqa: E402  (the size patches, the test tokenizer)

# Small enough to train on a CPU; 64-pixel views in patches of 8 (64 tokens per view). LeRobot's
# pi0 fixes 8 attention heads in code, so the attention over the prefix (3 x 64 image tokens and
# the prompt) is most of the time: hence the short prompt and the small batch.
SIZES = dict(vision=dict(image_size=64, patch_size=8, width=64, depth=2, mlp_dim=128, num_heads=4),
             text=dict(width=64, depth=2, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=16),
             expert=dict(width=64, depth=2, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=16))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=3000,
                    help="0 saves the untrained policy (LeRobot's initialization): the control")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (from scratch, not LeRobot's fine-tuning 2.5e-5)")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--chunk", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=16, help="prompt tokens (the instructions take 6)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--name", default="pi0-sim-tiny")
    ap.add_argument("--image", type=int, default=SIZES["vision"]["image_size"],
                    help="the model's image size (record the cameras at it: no resize)")
    ap.add_argument("--patch", type=int, default=SIZES["vision"]["patch_size"],
                    help="the vision patch; image/patch squared tokens per view (64 by default)")
    a = ap.parse_args()
    if a.image % a.patch:
        ap.error("--image must be a multiple of --patch")
    SIZES["vision"].update(image_size=a.image, patch_size=a.patch)

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    import lerobot
    import transformers
    from lerobot.configs.types import FeatureType
    from lerobot.datasets.factory import resolve_delta_timestamps
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata
    from lerobot.utils.feature_utils import dataset_to_policy_features
    from lerobot.policies.pi0 import modeling_pi0 as modeling
    from lerobot.policies.pi0 import processor_pi0 as processor
    from lerobot.policies.pi0.configuration_pi0 import PI0Config

    tokenizer, vocab = parity.gemma_tokenizer()
    parity.patch_lerobot(modeling, processor, SIZES, tokenizer)

    repo = "pi0-sim/expert"
    meta = LeRobotDatasetMetadata(repo, root=a.dataset)
    features = dataset_to_policy_features(meta.features)
    s = SIZES["vision"]["image_size"]
    cfg = PI0Config(device="cpu", dtype="float32", image_resolution=(s, s), chunk_size=a.chunk,
                    n_action_steps=min(5, a.chunk), tokenizer_max_length=a.tokens,
                    input_features={k: f for k, f in features.items() if f.type is not FeatureType.ACTION},
                    output_features={"action": features["action"]},
                    optimizer_lr=a.lr, scheduler_warmup_steps=a.warmup, scheduler_decay_steps=max(1, a.steps),
                    scheduler_decay_lr=a.lr / 20)
    policy = modeling.PI0Policy(cfg)
    parity.shrink(policy, SIZES, vocab)
    pre, post = processor.make_pi0_pre_post_processors(cfg, dataset_stats=meta.stats)

    ds = LeRobotDataset(repo, root=a.dataset, delta_timestamps=resolve_delta_timestamps(cfg, meta))
    t0 = time.time()
    items = [ds[i] for i in range(len(ds))]
    decode_s = time.time() - t0
    print(json.dumps({"frames": len(items), "episodes": meta.total_episodes, "decode_s": round(decode_s, 1),
                      "parameters": sum(p.numel() for p in policy.parameters())}), flush=True)

    def collate(idx):
        batch = {}
        for k in items[0]:
            vals = [items[i][k] for i in idx]
            batch[k] = torch.stack(vals) if isinstance(vals[0], torch.Tensor) else vals
        return batch

    opt = cfg.get_optimizer_preset().build(policy.parameters())
    sched = cfg.get_scheduler_preset().build(opt, max(1, a.steps))
    gen = torch.Generator().manual_seed(a.seed)
    order = torch.randperm(len(items), generator=gen).tolist()
    pos = 0
    t0 = time.time()
    policy.train()
    losses = []
    for step in range(1, a.steps + 1):
        if pos + a.batch > len(order):
            order, pos = torch.randperm(len(items), generator=gen).tolist(), 0
        batch = pre(collate(order[pos:pos + a.batch]))
        pos += a.batch
        loss, _ = policy.forward(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.optimizer_grad_clip_norm)
        opt.step()
        opt.zero_grad()
        sched.step()
        losses.append(loss.item())
        if step % 100 == 0 or step == a.steps:
            print(json.dumps({"step": step, "loss": round(sum(losses[-100:]) / len(losses[-100:]), 5),
                              "lr": sched.get_last_lr()[0], "s": round(time.time() - t0, 1)}), flush=True)
    train_s = time.time() - t0

    policy.eval()
    os.makedirs(a.out, exist_ok=True)
    policy.save_pretrained(a.out)
    pre.save_pretrained(a.out)
    post.save_pretrained(a.out)
    with open(f"{a.out}/config.json") as f:
        config = json.load(f)
    config["gst_pi0"] = {"name": a.name,
                         "tokenizer": os.path.relpath(parity.TOKENIZER, os.path.abspath(a.out)),
                         **parity.gst_pi0_sizes(SIZES, vocab)}
    with open(f"{a.out}/config.json", "w") as f:
        json.dump(config, f, indent=4)
    with open(f"{a.out}/training.json", "w") as f:
        json.dump({"lerobot": lerobot.__version__, "transformers": transformers.__version__,
                   "torch": torch.__version__, "python": platform.python_version(),
                   "machine": platform.machine(), "threads": a.threads, "seed": a.seed, "steps": a.steps,
                   "batch": a.batch, "image": a.image, "patch": a.patch, "lr": a.lr, "chunk": a.chunk, "frames": len(items),
                   "episodes": meta.total_episodes, "decode_s": round(decode_s, 1),
                   "train_s": round(train_s, 1),
                   "final_loss": sum(losses[-100:]) / len(losses[-100:]) if losses else None},
                  f, indent=2)
    print(json.dumps({"saved": a.out, "train_s": round(train_s, 1)}))


if __name__ == "__main__":
    main()
