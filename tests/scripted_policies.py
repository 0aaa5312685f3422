#!/usr/bin/env python3
"""TorchScript policies for tests/elements/pi0infer/test_pi0infer.cpp, scripted by the torch whose LibTorch the
build links (.venv), so that the element tests need no LibTorch headers of their own.

    scripted_policies.py DIR      writes DIR/policy.pt, DIR/raises.pt and DIR/nan.pt

policy.pt: actions = state[0] everywhere (+ 0 * noise), a LibTorch exception (an impossible
view) when state[0] > 100, NaN when state[0] == 7. (Not `assert`: LibTorch 2.11 deadlocks in
GetEventSampledHandler when a scripted assert fires.)
raises.pt: always raises (an impossible view); declares num_views, image_size and state_dim,
not max_tokens, so that pi0infer can run its warm-up at start.
nan.pt: always NaN (tests/tools/test_pi0_sim.cpp: a policy whose chunks must never reach the robot).
All declare the attributes pi0infer reads: horizon 10, action_dim 8, num_views 3,
image_size 32 (pi0-tiny's), state_dim 32; policy.pt also max_tokens 48.
"""
import sys

import torch
from torch import Tensor


class ScriptedPolicy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.horizon = 10
        self.action_dim = 8
        self.num_views = 3
        self.image_size = 32
        self.max_tokens = 48
        self.state_dim = 32

    def forward(self, images: Tensor, image_masks: Tensor, tokens: Tensor, token_mask: Tensor,
                state: Tensor, noise: Tensor) -> Tensor:
        out = noise * 0.0 + state[:, 0].view(1, 1, 1)
        if bool(state[0, 0] > 100.0):
            out = out.view(7, -1)
        if bool(state[0, 0] == 7.0):
            out = out / 0.0 * 0.0
        return out


class AlwaysRaises(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.horizon = 10
        self.action_dim = 8
        self.num_views = 3
        self.image_size = 32
        self.state_dim = 32

    def forward(self, images: Tensor, image_masks: Tensor, tokens: Tensor, token_mask: Tensor,
                state: Tensor, noise: Tensor) -> Tensor:
        return noise.view(7, -1)


class AlwaysNaN(ScriptedPolicy):
    def forward(self, images: Tensor, image_masks: Tensor, tokens: Tensor, token_mask: Tensor,
                state: Tensor, noise: Tensor) -> Tensor:
        return noise / 0.0 * 0.0


def main():
    out = sys.argv[1]
    torch.jit.script(ScriptedPolicy()).save(f"{out}/policy.pt")
    torch.jit.script(AlwaysRaises()).save(f"{out}/raises.pt")
    torch.jit.script(AlwaysNaN()).save(f"{out}/nan.pt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
