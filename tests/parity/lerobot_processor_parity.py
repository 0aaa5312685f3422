#!/usr/bin/env python3
"""A LeRobot pi0 or pi0.5 checkpoint exactly as LeRobot writes one, and what LeRobot does with a
raw observation through it: run live by tests/libs/inference/test_lerobot_policy.cpp.

    lerobot_processor_parity.py OUT {pi0,pi05} {tiny,mid,full}

LeRobot 0.6.1's own classes do everything: PI0Policy / PI05Policy with seeded random weights
(transformers_parity.randomize: the adaRMSNorm condition layers get non-zero weights), their
make_pi0_pre_post_processors / make_pi05_pre_post_processors with dataset statistics, and
save_pretrained() of the policy and of both processor pipelines into OUT (config.json,
model.safetensors, policy_preprocessor.json, policy_postprocessor.json and the normalizer
steps' .safetensors). Then a raw observation (two cameras as LeRobot gives them, float [0, 1];
a 7-dim state in robot units; an instruction) goes through the preprocessor,
predict_action_chunk() with a given noise, and the postprocessor; OUT/io.safetensors holds the
observation, the noise, the robot-unit actions, and what the preprocessor made (the normalized
state, the tokens) for diagnosis.

Sizes: `tiny` (widths 32-64, every structural feature) and `mid` (pi0.5's real widths: SigLIP
1152/4304/16 heads on 224-pixel views of patch 14, Gemma 2048/16384 and expert 1024/4096 with
8 heads of 256 and one KV head; two Gemma layers, one SigLIP layer; the vocabulary is the test
tokenizer's), and `full` (every real size but the vocabulary: 27 SigLIP layers, 18 Gemma and 18
expert layers; about 11 GB of fp32 weights, for the by-hand run of docs/testing.md).

LeRobot's configs know only the full-size variants, so the Gemma variant table, the PaliGemma
vision config and the modules whose sizes LeRobot fixes in code (SigLIP's MLP, the projector,
the token embedding, the unused lm_heads) are set by lerobot_sizes.py before the weights are
drawn; nothing in the computation changes. Those sizes are added to the saved config.json as a "gst_pi0" object (LeRobot's keys
cannot say them); the rest of every file is LeRobot's as it wrote it. The PaliGemma tokenizer is not downloadable here: LeRobot's tokenizer step gets the
transformers GemmaTokenizer of tests/data/tokenizer/tiny_paligemma.model (the files still name
google/paligemma-3b-pt-224, as LeRobot writes them).
"""
import json
import os
import platform
import shutil
import sys
import tempfile

import torch

from lerobot_sizes import patch_lerobot, shrink

SIZES = {
    "tiny": dict(vision=dict(image_size=32, patch_size=8, width=32, depth=1, mlp_dim=64, num_heads=4),
                 text=dict(width=64, depth=2, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=16),
                 expert=dict(width=32, depth=2, mlp_dim=64, num_heads=8, num_kv_heads=1, head_dim=16)),
    "mid": dict(vision=dict(image_size=224, patch_size=14, width=1152, depth=1, mlp_dim=4304, num_heads=16),
                text=dict(width=2048, depth=2, mlp_dim=16384, num_heads=8, num_kv_heads=1, head_dim=256),
                expert=dict(width=1024, depth=2, mlp_dim=4096, num_heads=8, num_kv_heads=1, head_dim=256)),
    "full": dict(vision=dict(image_size=224, patch_size=14, width=1152, depth=27, mlp_dim=4304, num_heads=16),
                 text=dict(width=2048, depth=18, mlp_dim=16384, num_heads=8, num_kv_heads=1, head_dim=256),
                 expert=dict(width=1024, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1, head_dim=256)),
}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENIZER = os.path.join(ROOT, "tests/data/tokenizer/tiny_paligemma.model")
STATE_DIM, ACTION_DIM = 7, 7
SEED = 777


def gemma_tokenizer():
    """transformers' GemmaTokenizer over the test SentencePiece model, its special tokens named as
    that model names them (it gives SentencePiece's own ids: tests/libs/inference/test_io_tokenizer.cpp)."""
    import sentencepiece
    from transformers import AutoTokenizer

    sp = sentencepiece.SentencePieceProcessor(model_file=TOKENIZER)
    d = tempfile.mkdtemp()
    shutil.copy(TOKENIZER, d + "/tokenizer.model")
    with open(d + "/tokenizer_config.json", "w") as f:
        json.dump({"tokenizer_class": "GemmaTokenizer", "add_bos_token": True, "add_eos_token": False,
                   "bos_token": sp.id_to_piece(sp.bos_id()), "eos_token": sp.id_to_piece(sp.eos_id()),
                   "unk_token": sp.id_to_piece(sp.unk_id()), "pad_token": sp.id_to_piece(0)}, f)
    tok = AutoTokenizer.from_pretrained(d)
    shutil.rmtree(d)
    return tok, sp.get_piece_size()


def gst_pi0_sizes(dims, vocab) -> dict:
    """The sizes LeRobot's config.json cannot say, as gst-pi0's "gst_pi0" object says them."""
    return {"vision": {**dims["vision"], "layer_norm_eps": 1e-6}, "text": dims["text"], "expert": dims["expert"],
            "vocab_size": vocab}


def save_checkpoint(out: str, policy, pre, post, dims: dict, vocab: int, extra: dict | None = None) -> None:
    """@policy and its processors as LeRobot saves them, in @out. LeRobot's config.json names only
    the full-size variants (gemma_2b, gemma_300m) and fixes SigLIP and the vocabulary in code: the
    sizes go into our "gst_pi0" object, which gst-pi0 reads over LeRobot's keys (everything else,
    the type, chunk size, cameras, prompt length, resolution, is LeRobot's as written). @extra:
    more keys of "gst_pi0" (a name, the tokenizer), before the sizes."""
    os.makedirs(out, exist_ok=True)
    policy.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    with open(f"{out}/config.json") as f:
        config = json.load(f)
    config["gst_pi0"] = {**(extra or {}), **gst_pi0_sizes(dims, vocab)}
    with open(f"{out}/config.json", "w") as f:
        json.dump(config, f, indent=4)


def main() -> None:
    out, kind, size = sys.argv[1], sys.argv[2], sys.argv[3]
    # One thread, as the C++ tests run: the suite runs two tests at a time on two cores, and the
    # real-width model would otherwise take both from the other test. The full size runs by hand,
    # alone, on every core.
    if size != "full":
        torch.set_num_threads(1)
    dims = SIZES[size]
    tokenizer, vocab = gemma_tokenizer()

    import lerobot
    import transformers
    from lerobot.configs.types import FeatureType, PolicyFeature

    from transformers_parity import randomize

    if kind == "pi05":
        from lerobot.policies.pi05 import modeling_pi05 as modeling
        from lerobot.policies.pi05 import processor_pi05 as processor
        from lerobot.policies.pi05.configuration_pi05 import PI05Config as Config
        policy_class, make_processors = modeling.PI05Policy, processor.make_pi05_pre_post_processors
        horizon, tokens = 10, 200
    else:
        from lerobot.policies.pi0 import modeling_pi0 as modeling
        from lerobot.policies.pi0 import processor_pi0 as processor
        from lerobot.policies.pi0.configuration_pi0 import PI0Config as Config
        policy_class, make_processors = modeling.PI0Policy, processor.make_pi0_pre_post_processors
        horizon, tokens = 10, 48

    patch_lerobot(modeling, dims, processor, tokenizer)
    vision = dims["vision"]
    s = vision["image_size"]
    cfg = Config(device="cpu", dtype="float32", image_resolution=(s, s), chunk_size=horizon, n_action_steps=horizon,
                 tokenizer_max_length=tokens, empty_cameras=1,
                 input_features={"observation.images.base_0_rgb": PolicyFeature(FeatureType.VISUAL, (3, s, s)),
                                 "observation.images.left_wrist_0_rgb": PolicyFeature(FeatureType.VISUAL, (3, s, s)),
                                 "observation.state": PolicyFeature(FeatureType.STATE, (STATE_DIM,))},
                 output_features={"action": PolicyFeature(FeatureType.ACTION, (ACTION_DIM,))})
    torch.manual_seed(SEED)
    policy = policy_class(cfg)
    shrink(policy.model, dims, vocab, lm_heads=True)  # LeRobot saves the lm_heads: small ones
    gen = torch.Generator().manual_seed(SEED)
    randomize(policy.model, gen)
    policy.eval()

    # Statistics in robot units, of different scales per dim (a joint in radians, a gripper in mm).
    def stats(dim, scale):
        mean = torch.randn(dim, generator=gen) * scale
        std = (torch.rand(dim, generator=gen) + 0.5) * scale
        return {"mean": mean, "std": std, "min": mean - 3 * std, "max": mean + 3 * std,
                "q01": mean - 2.3 * std, "q99": mean + 2.2 * std, "q10": mean - 1.3 * std,
                "q90": mean + 1.2 * std, "count": torch.tensor([1000])}

    scale = torch.tensor([0.5, 1.0, 0.8, 1.5, 0.3, 2.0, 40.0])
    dataset_stats = {"observation.state": stats(STATE_DIM, scale), "action": stats(ACTION_DIM, scale)}
    pre, post = make_processors(cfg, dataset_stats=dataset_stats)
    save_checkpoint(out, policy, pre, post, dims, vocab)

    images = [torch.rand(1, 3, s, s, generator=gen) for _ in range(2)]
    st = dataset_stats["observation.state"]
    state = (st["mean"] + st["std"] * torch.randn(STATE_DIM, generator=gen)).unsqueeze(0)
    task = "pick up the red block"
    noise = torch.randn(1, horizon, 32, generator=gen)
    obs = {"observation.images.base_0_rgb": images[0], "observation.images.left_wrist_0_rgb": images[1],
           "observation.state": state, "task": [task]}
    with torch.no_grad():
        batch = pre(dict(obs))
        actions = post(policy.predict_action_chunk(batch, noise=noise.clone()))
    from safetensors.torch import save_file

    meta = {"lerobot": lerobot.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
            "python": platform.python_version(), "kind": kind, "size": size, "task": task}
    save_file({"image0": images[0][0].contiguous(), "image1": images[1][0].contiguous(),
               "state": state[0].contiguous(), "noise": noise[0].contiguous(), "actions": actions[0].contiguous(),
               "normalized_state": batch["observation.state"][0].float().contiguous(),
               "tokens": batch["observation.language.tokens"][0].contiguous(),
               "token_mask": batch["observation.language.attention_mask"][0].bool().contiguous()},
              f"{out}/io.safetensors", metadata=meta)
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
