#!/usr/bin/env python3
"""Writes tests/data/lerobot_config/config.json with the real LeRobot, as LeRobot saves a Pi0
policy whose dataset has two cameras and which was trained with `empty_cameras=1` (read by
tests/libs/inference/test_model.cpp, issue 16 item 11):

    python3.12 -m venv /tmp/lrvenv && /tmp/lrvenv/bin/pip install lerobot==0.6.1
    /tmp/lrvenv/bin/python tests/parity/make_lerobot_config.py tests/data/lerobot_config

PI0Policy.__init__ calls config.validate_features(), which adds
`observation.images.empty_camera_0` to input_features; save_pretrained() then writes both that
entry and `empty_cameras: 1`. Building the policy itself would allocate the 3.2 B parameters, so
the script calls validate_features() and _save_pretrained() directly, as PI0Policy does.

Also writes expected.json: the number of image slots LeRobot itself uses for the saved file
(PI0Config.from_pretrained + validate_features, then len(image_features), which is what
PI0Policy.prepare_images pads to), so the test compares with LeRobot's count, not ours.
"""
import json
import platform
import sys
from pathlib import Path

import lerobot
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.policies.pi0.configuration_pi0 import PI0Config


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    cfg = PI0Config(
        device="cpu",
        empty_cameras=1,
        input_features={
            "observation.images.base_0_rgb": PolicyFeature(type=FeatureType.VISUAL, shape=(3, 224, 224)),
            "observation.images.left_wrist_0_rgb": PolicyFeature(type=FeatureType.VISUAL, shape=(3, 224, 224)),
            "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(14,)),
        },
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(14,))},
    )
    cfg.validate_features()  # what PI0Policy.__init__ does
    cfg._save_pretrained(out)  # what PI0Policy.save_pretrained writes as config.json

    back = PI0Config.from_pretrained(out)
    back.validate_features()  # what PI0Policy.__init__ does on load
    views = len(back.image_features)
    expected = {
        "num_views": views,
        "image_features": list(back.image_features),
        "lerobot": lerobot.__version__,
        "python": platform.python_version(),
    }
    with open(out / "expected.json", "w") as f:
        json.dump(expected, f, indent=2)
        f.write("\n")
    print(json.dumps(expected))


if __name__ == "__main__":
    main()
