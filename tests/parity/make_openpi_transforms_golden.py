#!/usr/bin/env python3
"""Makes the committed openpi transform goldens in tests/parity/openpi_transforms/ (read by
tests/libs/inference/test_transforms.cpp and tests/libs/serve/test_serve_codec.cpp).

openpi's own robot transforms (src/openpi/transforms.py: DeltaActions, AbsoluteActions,
make_bool_mask, Normalize, Unnormalize, PadStatesAndActions; src/openpi/policies/
aloha_policy.py, libero_policy.py, droid_policy.py), run unchanged from a copy of openpi, on
fixed random arrays, in the order openpi's policy runs them (policies/policy_config.py:
data transforms -> Normalize -> model -> Unnormalize -> output data transforms):

    # openpi is not on PyPI: a clone, or the bare git directory of one
    git clone https://github.com/Physical-Intelligence/openpi /tmp/openpi
    .venv/bin/python tests/parity/make_openpi_transforms_golden.py --openpi /tmp/openpi

Needs numpy and openpi-client (the project's .venv has both). openpi's modules import jax,
flax, einops, jaxtyping and its model and tokenizer code at module level, none of which the
transforms use: this script puts small stand-ins for those imports in sys.modules before it
imports openpi's files (flax.traverse_util's flatten/unflatten of nested dicts, a ModelType
enum, a NormStats dataclass with openpi's fields, einops' "c h w -> h w c"). Everything that
computes a number is openpi's code.

Which transforms each checkpoint's config applies is read from openpi's training/config.py
with Python's ast module (config.py itself cannot be imported without JAX): the data config
class, its flags (adapt_to_pi, use_delta_joint_actions, extra_delta_transform, default_prompt,
with the class defaults) and the arguments of its make_bool_mask call. The chain built from
them follows the create() methods of those classes (Group.push is openpi's).

The PyTorch policy keeps the normalized state in float64 and unnormalizes it before
AbsoluteActions adds it (outputs["state"] = inputs["state"]); this is what the goldens hold.
(openpi's JAX policy rounds that state to float32 first.)

Writes golden.json: the openpi commit and file blobs, the configs, and per transform set a few
cases: a robot state (float32 values), norm stats, the model's input state (normalized and
padded to 32), a model output (float32, normalized), the robot's actions openpi makes from it,
and openpi's inverse path for actions (robot actions -> model side before Normalize), used by
real-time chunking's prefix.
"""
import argparse
import ast
import dataclasses
import enum
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import types

import numpy as np

FILES = [
    "src/openpi/transforms.py",
    "src/openpi/policies/aloha_policy.py",
    "src/openpi/policies/libero_policy.py",
    "src/openpi/policies/droid_policy.py",
    "src/openpi/training/config.py",
]
# The pi0 and pi0.5 configs whose transforms the project implements, and the name of that
# transform set in the project (pi0::Transforms, pi0infer's `transforms`). pi0.5's configs
# normalize with quantiles (openpi: use_quantile_norm = model_type != PI0).
CONFIGS = ["pi0_aloha", "pi0_aloha_towel", "pi0_aloha_tupperware", "pi0_aloha_pen_uncap",
           "pi0_aloha_sim", "pi0_droid", "pi0_libero", "pi05_droid", "pi05_libero"]
MODEL_ACTION_DIM = 32  # Pi0Config.action_dim
HORIZON = 3            # rows of the model outputs here (the transforms act per row)


def git(args, **kw):
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True, **kw).stdout


def fetch_sources(openpi: str, dest: pathlib.Path):
    """Copies FILES from a checkout or a bare git directory; returns (commit, {file: blob})."""
    p = pathlib.Path(openpi)
    if (p / "src" / "openpi").is_dir():
        gitargs = ["-C", str(p)]
        dirty = git([*gitargs, "status", "--porcelain", "--", "src/openpi"]).strip()
        if dirty:
            sys.exit(f"{openpi}: src/openpi has local changes:\n{dirty}")
    else:
        gitargs = ["--git-dir", str(p)]
    commit = git([*gitargs, "rev-parse", "HEAD"]).strip()
    blobs = {}
    for f in FILES:
        text = git([*gitargs, "show", f"{commit}:{f}"])
        blobs[f] = git([*gitargs, "rev-parse", f"{commit}:{f}"]).strip()
        out = dest / f
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    return commit, blobs


def install_stand_ins():
    """Modules openpi's files import but whose code the transforms never run."""

    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m
        return m

    def flatten_dict(tree, sep="/", prefix=()):
        out = {}
        for k, v in tree.items():
            if isinstance(v, dict) and v:
                out.update(flatten_dict(v, sep, prefix + (k,)))
            elif not isinstance(v, dict):
                out[sep.join(prefix + (k,))] = v
        return out

    def unflatten_dict(flat, sep="/"):
        tree = {}
        for k, v in flat.items():
            node = tree
            *parents, leaf = k.split(sep)
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = v
        return tree

    module("flax")
    sys.modules["flax"].traverse_util = module("flax.traverse_util", flatten_dict=flatten_dict,
                                               unflatten_dict=unflatten_dict)
    module("jax", tree=types.SimpleNamespace(map=lambda f, *t: f(*t)))

    def rearrange(x, pattern):
        assert pattern == "c h w -> h w c", pattern
        return np.transpose(x, (1, 2, 0))

    module("einops", rearrange=rearrange)

    class _Any:
        def __class_getitem__(cls, _):
            return cls

    class ModelType(enum.Enum):  # openpi.models.model.ModelType's members
        PI0 = "pi0"
        PI0_FAST = "pi0_fast"
        PI05 = "pi05"

    @dataclasses.dataclass
    class NormStats:  # openpi.shared.normalize.NormStats' fields
        mean: np.ndarray
        std: np.ndarray
        q01: np.ndarray | None = None
        q99: np.ndarray | None = None

    module("openpi.shared")
    module("openpi.shared.array_typing", PyTree=_Any)
    module("openpi.shared.normalize", NormStats=NormStats)
    module("openpi.models")
    module("openpi.models.model", ModelType=ModelType)
    module("openpi.models.tokenizer", PaligemmaTokenizer=_Any, FASTTokenizer=_Any)


# ---------------------------------------------------------------------------------------------
# What config.py says, read with ast


def literal(node):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)


def read_configs(config_py: str):
    tree = ast.parse(config_py)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}

    def class_defaults(name):
        out = {}
        for n in classes[name].body:
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value is not None:
                v = literal(n.value)
                if v is None or isinstance(v, (bool, str, int, float)):
                    out[n.target.id] = v
        return out

    def masks(name):
        """The make_bool_mask(...) arguments in the class's create()."""
        return [[literal(a) for a in c.args] for c in ast.walk(classes[name])
                if isinstance(c, ast.Call) and ast.unparse(c.func).endswith("make_bool_mask")]

    found = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "TrainConfig"):
            continue
        kw = {k.arg: k.value for k in node.keywords}
        name = literal(kw["name"])
        if name not in CONFIGS:
            continue
        model = kw["model"]
        assert ast.unparse(model.func) == "pi0_config.Pi0Config", (name, ast.unparse(model))
        model_kw = {k.arg: literal(k.value) for k in model.keywords}
        pi05 = model_kw.get("pi05", False) is True
        data = kw["data"]
        cls = ast.unparse(data.func)
        flags = {k.arg: literal(k.value) for k in data.keywords}
        entry = {"name": name, "data_config": cls, "model": ast.unparse(model), "pi05": pi05,
                 "norm": "quantile" if pi05 else "zscore",
                 # openpi's Pi0Config: discrete_state_input defaults to pi05
                 "discrete_state_input": model_kw.get("discrete_state_input", pi05),
                 "action_horizon": model_kw.get("action_horizon", 50)}
        if cls == "LeRobotAlohaDataConfig":
            d = class_defaults(cls)
            entry["adapt_to_pi"] = flags.get("adapt_to_pi", d["adapt_to_pi"])
            entry["use_delta_joint_actions"] = flags.get("use_delta_joint_actions",
                                                         d["use_delta_joint_actions"])
            entry["default_prompt"] = flags.get("default_prompt", d["default_prompt"])
            (mask,) = masks(cls)
            entry["delta_mask_dims"] = mask if entry["use_delta_joint_actions"] else None
        elif cls == "LeRobotLiberoDataConfig":
            d = class_defaults(cls)
            entry["extra_delta_transform"] = flags.get("extra_delta_transform",
                                                       d["extra_delta_transform"])
            entry["default_prompt"] = None  # ModelTransformFactory() without one
            (mask,) = masks(cls)
            entry["delta_mask_dims"] = mask if entry["extra_delta_transform"] else None
        elif cls == "SimpleDataConfig":
            text = ast.unparse(kw["data"])
            kind = "PI05" if pi05 else "PI0"
            assert f"droid_policy.DroidInputs(model_type=ModelType.{kind})" in text, text
            assert "droid_policy.DroidOutputs()" in text and "DeltaActions" not in text, text
            entry["default_prompt"] = None
            entry["delta_mask_dims"] = None
        else:
            raise SystemExit(f"{name}: data config {cls} is not one this script knows")
        found[name] = entry
    missing = set(CONFIGS) - set(found)
    assert not missing, f"configs not in config.py: {missing}"
    return [found[n] for n in CONFIGS]


def transform_set(entry):
    """The project's name for a config's transforms."""
    cls = entry["data_config"]
    if cls == "LeRobotAlohaDataConfig":
        assert entry["adapt_to_pi"], entry
        return "aloha" if entry["use_delta_joint_actions"] else "aloha_sim"
    if cls == "LeRobotLiberoDataConfig":
        return "libero" if entry["extra_delta_transform"] else "libero_absolute"
    return "droid"


# ---------------------------------------------------------------------------------------------
# The goldens


def chain(entry, transforms, aloha_policy, libero_policy, droid_policy, model_type):
    """openpi's data transforms Group for a config, as its DataConfigFactory.create() builds it."""
    cls = entry["data_config"]
    kind = model_type.PI05 if entry["pi05"] else model_type.PI0
    if cls == "LeRobotAlohaDataConfig":
        g = transforms.Group(inputs=[aloha_policy.AlohaInputs(adapt_to_pi=entry["adapt_to_pi"])],
                             outputs=[aloha_policy.AlohaOutputs(adapt_to_pi=entry["adapt_to_pi"])])
    elif cls == "LeRobotLiberoDataConfig":
        g = transforms.Group(inputs=[libero_policy.LiberoInputs(model_type=kind)],
                             outputs=[libero_policy.LiberoOutputs()])
    else:
        g = transforms.Group(inputs=[droid_policy.DroidInputs(model_type=kind)],
                             outputs=[droid_policy.DroidOutputs()])
    if entry["delta_mask_dims"]:
        mask = transforms.make_bool_mask(*entry["delta_mask_dims"])
        g = g.push(inputs=[transforms.DeltaActions(mask)], outputs=[transforms.AbsoluteActions(mask)])
    return g


def robot_observation(name, rng, state):
    img = rng.integers(0, 256, size=(3, 4, 6), dtype=np.uint8)
    if name == "droid":
        return {"observation/exterior_image_1_left": img.transpose(1, 2, 0),
                "observation/wrist_image_left": img.transpose(1, 2, 0),
                "observation/joint_position": state[:7], "observation/gripper_position": state[7:]}
    if name.startswith("libero"):
        return {"observation/image": img.transpose(1, 2, 0), "observation/wrist_image": img.transpose(1, 2, 0),
                "observation/state": state}
    return {"images": {"cam_high": img}, "state": state}


def dims(name):
    """(robot state dims, robot action dims) of openpi's examples for a transform set."""
    return {"aloha": (14, 14), "aloha_sim": (14, 14), "libero": (8, 7), "libero_absolute": (8, 7),
            "droid": (8, 8)}[name]


def robot_state(name, rng, case):
    s_dim, _ = dims(name)
    s = rng.uniform(-1.5, 1.5, size=s_dim)
    if name.startswith("aloha"):
        # Grippers: ALOHA's normalized linear position, 0 (closed) .. 1 (open); the last cases
        # go past both ends, where openpi clips arcsin's argument.
        s[[6, 13]] = rng.uniform(0, 1, size=2)
        if case == 3:
            s[[6, 13]] = [0.0, 1.0]
        if case == 4:
            s[[6, 13]] = [-0.3, 1.4]
    return s.astype(np.float32)


def make_case(name, entry, mods, rng, case):
    transforms, aloha_policy, libero_policy, droid_policy, model_type = mods
    s_dim, a_dim = dims(name)
    NormStats = sys.modules["openpi.shared.normalize"].NormStats

    def stats_of(dim):
        mean, std = rng.normal(0, 0.5, dim), rng.uniform(0.05, 2.0, dim)
        if not entry["pi05"]:
            return NormStats(mean=mean, std=std)
        return NormStats(mean=mean, std=std, q01=mean - 2.2 * std, q99=mean + 2.4 * std)

    stats = {"state": stats_of(s_dim), "actions": stats_of(a_dim)}
    quantile = entry["norm"] == "quantile"
    g = chain(entry, transforms, aloha_policy, libero_policy, droid_policy, model_type)
    state = robot_state(name, rng, case)
    model_out = rng.normal(0, 1, size=(HORIZON, MODEL_ACTION_DIM)).astype(np.float32)
    robot_actions = rng.uniform(-1.5, 1.5, size=(HORIZON, a_dim)).astype(np.float32)

    # The inference path (policy_config.create_trained_policy), images and prompt aside: the
    # model transforms that touch the state are PadStatesAndActions only.
    data = robot_observation(name, rng, state.copy())
    for t in [*g.inputs, transforms.Normalize(stats, use_quantiles=quantile)]:
        data = t(data)
    model_side_state = data["state"]
    data = transforms.PadStatesAndActions(MODEL_ACTION_DIM)(data)
    model_state = data["state"]
    outputs = {"state": model_state, "actions": model_out.copy()}
    for t in [transforms.Unnormalize(stats, use_quantiles=quantile), *g.outputs]:
        outputs = t(outputs)

    # The same inputs without Normalize: the state the transforms hand to Normalize.
    plain = robot_observation(name, rng, state.copy())
    for t in g.inputs:
        plain = t(plain)

    # The training path on actions (the inverse of the outputs, before Normalize).
    train = robot_observation(name, rng, state.copy())
    train["actions"] = robot_actions.copy()
    for t in g.inputs:
        train = t(train)

    def f64(x):
        return np.asarray(x, dtype=np.float64).tolist()

    return {
        "state": f64(state),
        "norm_stats": {k: {"mean": f64(v.mean), "std": f64(v.std),
                           **({"q01": f64(v.q01), "q99": f64(v.q99)} if quantile else {})}
                       for k, v in stats.items()},
        "transformed_state": f64(plain["state"]),
        "normalized_state": f64(model_side_state),
        "model_state": f64(model_state),
        "model_actions": f64(model_out),
        "actions": f64(outputs["actions"]),
        "robot_actions": f64(robot_actions),
        "transformed_actions": f64(train["actions"]),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--openpi", required=True, help="an openpi clone, or its bare git directory")
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "openpi_transforms"))
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        commit, blobs = fetch_sources(args.openpi, root)
        install_stand_ins()
        pkg = types.ModuleType("openpi")
        pkg.__path__ = [str(root / "src" / "openpi")]
        sys.modules["openpi"] = pkg
        sys.modules["openpi.policies"] = types.ModuleType("openpi.policies")
        sys.modules["openpi.policies"].__path__ = [str(root / "src" / "openpi" / "policies")]
        import openpi.transforms as transforms
        import openpi.policies.aloha_policy as aloha_policy
        import openpi.policies.droid_policy as droid_policy
        import openpi.policies.libero_policy as libero_policy
        model_type = sys.modules["openpi.models.model"].ModelType
        configs = read_configs((root / "src/openpi/training/config.py").read_text())

    mods = (transforms, aloha_policy, libero_policy, droid_policy, model_type)
    for c in configs:
        c["transforms"] = transform_set(c)
    sets = {}
    for c in configs:
        # A set per transforms and normalization: pi05_droid's transforms are pi0_droid's, its
        # normalization is not.
        name = c["transforms"]
        key = name if c["norm"] == "zscore" else f"{name}+{c['norm']}"
        if key in sets:
            continue
        rng = np.random.default_rng(1000 + len(sets))  # sets come in CONFIGS' order
        n_cases = {"aloha": 5, "aloha_sim": 3, "libero": 3, "libero_absolute": 2, "droid": 2}[name]
        sets[key] = {"config": c["name"], "transforms": name, "norm": c["norm"],
                     "cases": [make_case(name, c, mods, rng, i) for i in range(n_cases)]}

    golden = {
        "openpi_commit": commit,
        "openpi_files": blobs,
        "made_by": "tests/parity/make_openpi_transforms_golden.py",
        "numpy": np.__version__,
        "model_action_dim": MODEL_ACTION_DIM,
        "configs": configs,
        "sets": sets,
    }
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # One line per innermost list of numbers: small, and a diff still shows which array changed.
    text = re.sub(r"\[\s*([-0-9.e,\s]+?)\s*\]", lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]",
                  json.dumps(golden, indent=1))
    (out / "golden.json").write_text(text + "\n")
    print(f"{out / 'golden.json'}: openpi {commit}, sets {', '.join(sets)}")


if __name__ == "__main__":
    main()
