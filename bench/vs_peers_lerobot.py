#!/usr/bin/env python3
"""bench/vs-peers: LeRobot's side, one observation at a time on command (.lerobot-venv).

    vs_peers_lerobot.py --checkpoint DIR --obs DIR [--device cpu|cuda] [--dtype float32|bfloat16]
                        [--compile] [--warmup N]

What a LeRobot user runs for a raw observation (lerobot.common.control_utils.predict_action, with
predict_action_chunk for the whole chunk): PI0Policy / PI05Policy.from_pretrained(DIR) and
make_pre_post_processors(config, pretrained_path=DIR), then per observation
prepare_observation_for_inference (uint8 HWC -> float CHW in [0, 1], batch, device), the
preprocessor (tokenizer, normalizer, device), predict_action_chunk(batch, noise=...) (resize
with pad, [-1, 1], state padding, the model's sample_actions, the action dims) and the
postprocessor (unnormalize, to the CPU). The model's forward is timed around
policy.model.sample_actions; everything else is outside the model.

The checkpoint's sizes are not LeRobot's variants (bench/vs_peers_make.py): the model is made at
them as lerobot_sizes.py makes it, and the tokenizer step gets the test SentencePiece model
(the processor files name google/paligemma-3b-pt-224, which is not downloadable here).
"""
import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "parity"))

import vs_peers_common as common  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--obs", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--compile", action="store_true", help="LeRobot's compile_model (torch.compile)")
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    sys.stdout, real_stdout = sys.stderr, sys.stdout  # the peers print; the protocol is ours

    import torch

    from lerobot_processor_parity import gemma_tokenizer
    from lerobot_sizes import patch_lerobot, shrink

    with open(os.path.join(args.checkpoint, "vs_peers.json")) as f:
        spec = json.load(f)
    if spec["kind"] == "pi05":
        from lerobot.policies.pi05 import modeling_pi05 as modeling
        from lerobot.policies.pi05 import processor_pi05 as processor

        policy_class = modeling.PI05Policy
    else:
        from lerobot.policies.pi0 import modeling_pi0 as modeling
        from lerobot.policies.pi0 import processor_pi0 as processor

        policy_class = modeling.PI0Policy
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.policies.utils import prepare_observation_for_inference

    tokenizer, vocab = gemma_tokenizer()
    patch_lerobot(modeling, spec["dims"], processor, tokenizer)
    init = policy_class.__init__

    def init_at_size(self, *a, **k):
        init(self, *a, **k)
        shrink(self.model, spec["dims"], vocab, lm_heads=True)

    policy_class.__init__ = init_at_size
    # config.json carries a "gst_pi0" object with the sizes (LeRobot's keys cannot say them),
    # which LeRobot's config parser refuses: it reads the file without it.
    with open(os.path.join(args.checkpoint, "config.json")) as f:
        lerobot_keys = {k: v for k, v in json.load(f).items() if k != "gst_pi0"}
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(lerobot_keys, f)
        config = PreTrainedConfig.from_pretrained(d)
    config.device = args.device
    config.dtype = args.dtype
    if args.compile:
        config.compile_model = True
    policy = policy_class.from_pretrained(args.checkpoint, config=config)
    policy.to(args.device)
    policy.eval()
    pre, post = make_pre_post_processors(config, pretrained_path=args.checkpoint,
                                         preprocessor_overrides={"device_processor": {"device": args.device}},
                                         postprocessor_overrides={"device_processor": {"device": "cpu"}})
    device = torch.device(args.device)
    cuda = device.type == "cuda"

    forward_ms = []
    sample_actions = policy.model.sample_actions

    def timed_sample_actions(*a, **k):
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        out = sample_actions(*a, **k)
        if cuda:
            torch.cuda.synchronize()
        forward_ms.append((time.perf_counter() - t) * 1e3)
        return out

    policy.model.sample_actions = timed_sample_actions
    m = common.manifest(args.obs)

    def run_one(i: int) -> dict:
        frames, state = common.load_observation(args.obs, m, i)
        raw = {f"observation.images.{k}": v for k, v in frames.items()}
        raw["observation.state"] = state
        noise = common.noise(m, i).unsqueeze(0).to(device)
        forward_ms.clear()
        clock = common.Clock()
        with torch.inference_mode():
            t = time.perf_counter()
            obs = prepare_observation_for_inference(raw, device, m["prompt"])
            t_conv = time.perf_counter()
            batch = pre(obs)
            t_pre = time.perf_counter()
            chunk = policy.predict_action_chunk(batch, noise=noise)
            t_chunk = time.perf_counter()
            actions = post(chunk)[0].cpu().numpy()
            t_post = time.perf_counter()
        whole, cpu = clock.wall_ms(), clock.cpu_ms()
        fwd = forward_ms[0]
        return {"whole_ms": whole, "cpu_ms": cpu, "forward_ms": fwd, "outside_ms": whole - fwd,
                "faults": clock.faults(),
                "parts": {"to_tensors": (t_conv - t) * 1e3, "preprocessor": (t_pre - t_conv) * 1e3,
                          "chunk_around_model": (t_chunk - t_pre) * 1e3 - fwd,
                          "postprocessor": (t_post - t_chunk) * 1e3},
                "actions": actions.astype(float).tolist()}

    sys.stdout = real_stdout
    common.serve(run_one, m, args.warmup)


if __name__ == "__main__":
    main()
