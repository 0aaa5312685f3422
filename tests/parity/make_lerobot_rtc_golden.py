#!/usr/bin/env python3
"""Makes the committed real-time-chunking goldens tests/parity/lerobot_pi0/rtc.safetensors (read
by tests/libs/inference/test_model_rtc.cpp): LeRobot 0.6.1's RTC (policies/rtc/modeling_rtc.py of the lerobot
package, hooked into PI0Pytorch.sample_actions through policies/common/flow_matching.py:
euler_integrate) on the
same tiny weights, inputs and noise as the plain goldens of make_lerobot_golden.py.

    python3.12 -m venv /tmp/lrvenv && /tmp/lrvenv/bin/pip install lerobot==0.6.1 transformers==5.5.4
    cd tests/parity && /tmp/lrvenv/bin/python make_lerobot_rtc_golden.py lerobot_pi0

The weights are read back from lerobot_pi0/model.safetensors and the inputs from
lerobot_pi0/io.safetensors (the script first checks that plain sample_actions still gives the
committed actions exactly). The prefix is the tail of a "previous chunk": the plain actions for
another seeded noise, as a robot would be executing it.

Two families of cases:
  identity.*  LeRobot's RTCProcessor exactly as it ships. It calls the denoiser *before*
              x_t.requires_grad_(True), so autograd.grad(x1, x_t, err) sees x1 = x_t - t*v with v
              a constant: the correction is err itself (J = I). The script checks that from
              LeRobot's debug tracker (correction == err at every step).
  vjp.*       The paper's / Kinetix's pseudo-inverse guidance, J^T err through the action expert:
              the same RTCProcessor and PI0 denoise_step, with the denoiser wrapped so that it
              marks its input as requiring grad before the forward (the one line the paper's
              reference code has and LeRobot's order loses). Checked: correction != err.

Per case NAME: NAME.prefix [R,32], NAME.actions [50,32], NAME.weights [50] (LeRobot's mask),
NAME.guidance [10] (LeRobot's guidance weight per step), NAME.params int64 [delay, execution
horizon s (ours: the mask ends at 50 - s), R, jacobian (0 vjp, 1 identity), schedule (0 zeros,
1 ones, 2 linear, 3 exp)], NAME.beta float64 []. LeRobot's own `execution_horizon` argument is
50 - s (it names the mask's end; the paper's s is the rows executed before the switch).
"""
import json
import platform
import sys

import torch
from safetensors.torch import load_file, save_file

import lerobot
import transformers
from lerobot.configs import RTCAttentionSchedule
from lerobot.policies.pi0 import modeling_pi0
from lerobot.policies.pi0.configuration_pi0 import PI0Config
from lerobot.policies.rtc.configuration_rtc import RTCConfig
from lerobot.policies.rtc.modeling_rtc import RTCProcessor

import make_lerobot_golden as base  # the tiny model's shapes and LeRobot patches

H, STEPS = 50, 10
SCHEDULES = {RTCAttentionSchedule.ZEROS: 0, RTCAttentionSchedule.ONES: 1, RTCAttentionSchedule.LINEAR: 2,
             RTCAttentionSchedule.EXP: 3}

# name, jacobian, schedule, beta, delay d, execution horizon s, prefix rows R
CASES = [
    ("identity_linear", "identity", RTCAttentionSchedule.LINEAR, 10.0, 4, 10, 40),  # LeRobot's defaults
    ("identity_exp_clamped", "identity", RTCAttentionSchedule.EXP, 5.0, 6, 20, 45),  # end 30 < R
    ("identity_zeros", "identity", RTCAttentionSchedule.ZEROS, 10.0, 5, 10, 40),
    ("identity_ones", "identity", RTCAttentionSchedule.ONES, 3.0, 3, 15, 38),  # R < 50 - s: end R
    ("vjp_exp", "vjp", RTCAttentionSchedule.EXP, 5.0, 4, 10, 40),  # the paper's defaults
    ("vjp_linear", "vjp", RTCAttentionSchedule.LINEAR, 10.0, 7, 25, 40),
]


class PaperVjpRTCProcessor(RTCProcessor):
    """LeRobot's processor with the denoiser differentiated (see the module docstring)."""

    def denoise_step(self, x_t, prev_chunk_left_over, inference_delay, time, original_denoise_step_partial,
                     execution_horizon=None):
        def differentiable(x):
            x.requires_grad_(True)  # the very tensor RTCProcessor differentiates against
            return original_denoise_step_partial(x)

        return super().denoise_step(x_t, prev_chunk_left_over, inference_delay, time, differentiable,
                                    execution_horizon)


def run_cases(model, sample, noise, plain, prev, cases, horizon):
    """LeRobot's RTC on @model for each of @cases (name, jacobian, schedule, beta, delay d,
    execution horizon s, prefix rows R), from @noise, the prefix the last R rows of @prev: the
    tensors of each case (see the module docstring) and a summary of what guidance did against
    @plain. @sample(noise, **rtc) runs sample_actions on the goldens' inputs."""
    tensors, summary = {}, {}
    for name, jac, schedule, beta, delay, s, rows in cases:
        rtc_cfg = RTCConfig(enabled=True, prefix_attention_schedule=schedule, max_guidance_weight=beta,
                            execution_horizon=horizon - s, debug=True, debug_maxlen=4 * STEPS)
        processor = (RTCProcessor if jac == "identity" else PaperVjpRTCProcessor)(rtc_cfg)
        model.config.rtc_config, model.rtc_processor = rtc_cfg, processor
        prefix = prev[:, horizon - rows:].clone()
        actions = sample(noise, inference_delay=delay, prev_chunk_left_over=prefix, execution_horizon=horizon - s)
        steps = [st for st in processor.get_all_debug_steps() if st.correction is not None]
        assert len(steps) == STEPS, len(steps)
        same = all(torch.equal(st.correction, st.err) for st in steps)
        assert same == (jac == "identity"), f"{name}: correction == err is {same}"
        tensors[f"{name}.prefix"] = prefix[0].contiguous()
        tensors[f"{name}.actions"] = actions[0].detach().contiguous()
        tensors[f"{name}.weights"] = steps[0].weights.reshape(horizon).contiguous()
        tensors[f"{name}.guidance"] = torch.stack([torch.as_tensor(st.guidance_weight, dtype=torch.float32)
                                                   for st in steps])
        tensors[f"{name}.params"] = torch.tensor([delay, s, rows, 0 if jac == "vjp" else 1, SCHEDULES[schedule]])
        tensors[f"{name}.beta"] = torch.tensor(beta, dtype=torch.float64)
        head = slice(0, delay)
        summary[name] = {
            "max |guided - plain|": (actions - plain).abs().max().item(),
            "first d rows: max |guided - prefix|": (actions[:, head] - prefix[:, head]).abs().max().item(),
            "first d rows: max |plain - prefix|": (plain[:, head] - prefix[:, head]).abs().max().item(),
        }
    return tensors, summary


def build_model(out: str) -> modeling_pi0.PI0Pytorch:
    base.patch_lerobot()
    torch.manual_seed(base.SEED)
    cfg = PI0Config(device="cpu", dtype="float32", image_resolution=(32, 32), chunk_size=H, n_action_steps=H)
    assert cfg.num_inference_steps == STEPS
    model = modeling_pi0.PI0Pytorch(cfg)
    base.shrink(model)
    weights = {k.removeprefix("model."): v for k, v in load_file(f"{out}/model.safetensors").items()}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not unexpected and all("lm_head" in k for k in missing), (missing, unexpected)
    return model.eval()


def main() -> None:
    out = sys.argv[1]
    model = build_model(out)
    io = load_file(f"{out}/io.safetensors")
    images = [io["images"][i:i + 1] for i in range(io["images"].shape[0])]
    img_masks = [io["image_masks"][i:i + 1] for i in range(io["image_masks"].shape[0])]
    tokens, token_mask = io["tokens"][None], io["token_mask"][None]
    state, noise = io["state"][None], io["noise"][None]

    def sample(noise_, **rtc):
        return model.sample_actions(images, img_masks, tokens, token_mask, state, noise=noise_.clone(), **rtc)

    model.config.rtc_config, model.rtc_processor = None, None
    plain = sample(noise)
    assert torch.equal(plain[0], io["actions"]), "the plain goldens no longer reproduce"
    prev_noise = torch.randn(1, H, 32, generator=torch.Generator().manual_seed(base.SEED + 1))
    prev = sample(prev_noise)

    tensors, summary = run_cases(model, sample, noise, plain, prev, CASES, H)

    meta = {"lerobot": lerobot.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
            "python": platform.python_version(), "machine": platform.platform()}
    save_file(tensors, f"{out}/rtc.safetensors", metadata=meta)
    print(json.dumps(meta))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
