#!/usr/bin/env python3
"""bench/vs-peers, step 1: the checkpoint all three systems load, written by LeRobot itself.

    .lerobot-venv/bin/python bench/vs_peers_make.py OUT {pi0,pi05} {mid,full}

LeRobot 0.6.1's PI0Policy / PI05Policy with seeded random weights (the parity scripts' rules,
tests/parity/transformers_parity.randomize), saved with save_pretrained() together with its
make_pi0_pre_post_processors / make_pi05_pre_post_processors pipelines and dataset statistics,
as tests/parity/lerobot_processor_parity.py does; here for a bimanual robot as openpi's ALOHA
policy sees one: three cameras (cam_high, cam_left_wrist, cam_right_wrist), a 14-dim state and
14-dim actions in robot units, 50-row chunks, 10 denoising steps. Sizes: `mid` is the real
widths with 1 SigLIP and 2 Gemma/expert layers (lerobot_processor_parity.py's "mid"), `full` every
real size but the vocabulary (the test tokenizer's). The sizes LeRobot's config.json cannot say
go into its "gst_pi0" object; OUT/vs_peers.json holds the statistics the driver draws states
from, and the sizes the peers' workers make their models at.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "parity"))

import torch  # noqa: E402

from lerobot_processor_parity import SIZES, gemma_tokenizer, save_checkpoint  # noqa: E402
from lerobot_sizes import patch_lerobot, shrink  # noqa: E402

CAMERAS = ["cam_high", "cam_left_wrist", "cam_right_wrist"]
STATE_DIM = ACTION_DIM = 14
HORIZON = 50
SEED = 4343


def main() -> None:
    out, kind, size = sys.argv[1], sys.argv[2], sys.argv[3]
    dims = SIZES[size]
    tokenizer, vocab = gemma_tokenizer()
    from lerobot.configs.types import FeatureType, PolicyFeature

    from transformers_parity import randomize

    if kind == "pi05":
        from lerobot.policies.pi05 import modeling_pi05 as modeling
        from lerobot.policies.pi05 import processor_pi05 as processor
        from lerobot.policies.pi05.configuration_pi05 import PI05Config as Config
        policy_class, make_processors, tokens = modeling.PI05Policy, processor.make_pi05_pre_post_processors, 200
    else:
        from lerobot.policies.pi0 import modeling_pi0 as modeling
        from lerobot.policies.pi0 import processor_pi0 as processor
        from lerobot.policies.pi0.configuration_pi0 import PI0Config as Config
        policy_class, make_processors, tokens = modeling.PI0Policy, processor.make_pi0_pre_post_processors, 48

    patch_lerobot(modeling, dims, processor, tokenizer)
    s = dims["vision"]["image_size"]
    features = {f"observation.images.{c}": PolicyFeature(FeatureType.VISUAL, (3, s, s)) for c in CAMERAS}
    features["observation.state"] = PolicyFeature(FeatureType.STATE, (STATE_DIM,))
    cfg = Config(device="cpu", dtype="float32", image_resolution=(s, s), chunk_size=HORIZON,
                 n_action_steps=HORIZON, num_inference_steps=10, tokenizer_max_length=tokens,
                 input_features=features,
                 output_features={"action": PolicyFeature(FeatureType.ACTION, (ACTION_DIM,))})
    torch.manual_seed(SEED)
    policy = policy_class(cfg)
    shrink(policy.model, dims, vocab, lm_heads=True)
    gen = torch.Generator().manual_seed(SEED)
    randomize(policy.model, gen)
    policy.eval()

    # Robot units: two arms of six joints (rad) and a gripper (mm) each.
    scale = torch.tensor([0.5, 1.0, 0.8, 1.5, 0.3, 2.0, 40.0] * 2)

    def stats(dim):
        mean = torch.randn(dim, generator=gen) * scale
        std = (torch.rand(dim, generator=gen) + 0.5) * scale
        return {"mean": mean, "std": std, "min": mean - 3 * std, "max": mean + 3 * std,
                "q01": mean - 2.3 * std, "q99": mean + 2.2 * std, "q10": mean - 1.3 * std,
                "q90": mean + 1.2 * std, "count": torch.tensor([1000])}

    dataset_stats = {"observation.state": stats(STATE_DIM), "action": stats(ACTION_DIM)}
    pre, post = make_processors(cfg, dataset_stats=dataset_stats)
    save_checkpoint(out, policy, pre, post, dims, vocab)
    with open(f"{out}/vs_peers.json", "w") as f:
        json.dump({"kind": kind, "size": size, "dims": dims, "vocab": vocab, "cameras": CAMERAS,
                   "state_dim": STATE_DIM, "action_dim": ACTION_DIM, "horizon": HORIZON, "max_tokens": tokens,
                   "stats": {k: {n: v.tolist() for n, v in st.items()} for k, st in dataset_stats.items()}},
                  f, indent=1)
    print(f"{out}: LeRobot {kind} ({size}) written")


if __name__ == "__main__":
    main()
