"""validate() refuses out-of-range values before any model is built, naming the field and range.

Each case here was once accepted (and failed late, or silently trained something else):
checkpoint.every=0 divided by zero after step 1, a negative micro-batch broke a reshape,
lr=nan ran until the loss was NaN, group_size=1 gave every group-relative estimator a
zero gradient.
"""

import importlib.util
import math
from pathlib import Path

import pytest

from rlvr_jax.rl.config import default_config, validate

ROOT = Path(__file__).resolve().parents[2]


def _set(c, field, value):
    *path, key = field.split(".")
    node = c
    for p in path:
        node = node[p]
    node[key] = value


CASES = [
    ("checkpoint.every", 0, ">= 1"),
    ("checkpoint.keep", 0, ">= 1"),
    ("train.micro_batch_size", -4, ">= 0"),
    ("eval.n_samples", 0, ">= 1"),
    ("eval.num_problems", 0, ">= 1"),
    ("eval.every", -1, ">= 0"),
    ("eval.temperature", -0.5, ">= 0"),
    ("optimizer.lr", math.nan, "a finite number"),
    ("optimizer.lr", -1.0, "> 0"),
    ("optimizer.lr", 0.0, "> 0"),
    ("optimizer.b1", 1.0, r"in \[0, 1\)"),
    ("optimizer.b2", -0.1, r"in \[0, 1\)"),
    ("optimizer.weight_decay", -0.01, ">= 0"),
    ("optimizer.clip_norm", -1.0, ">= 0"),
    ("optimizer.warmup_steps", -1, ">= 0"),
    ("optimizer.end_lr_fraction", 1.5, r"in \[0, 1\]"),
    ("loss.ppo_clip.eps_low", -0.5, r"in \[0, 1\)"),
    ("loss.ppo_clip.eps_low", 1.0, r"in \[0, 1\)"),
    ("loss.ppo_clip.eps_high", -0.1, ">= 0"),
    ("loss.ppo_clip.dual_clip", 0.5, "0 .off. or > 1"),
    ("loss.kl_coef", -0.1, ">= 0"),
    ("loss.entropy_coef", math.inf, "a finite number"),
    ("loss.tis_cap", -1.0, ">= 0"),
    ("loss.kl_clamp", -1.0, ">= 0"),
    ("data.group_size", 1, ">= 2"),
    ("task.train_size", 0, ">= 1"),
    ("rollout.temperature", -1.0, ">= 0"),
    ("rollout.top_p", 0.0, r"in \(0, 1\]"),
    ("rollout.top_p", 1.5, r"in \(0, 1\]"),
    ("rollout.top_k", -1, ">= 0"),
    ("credit.grpo.eps", math.nan, "a finite number"),
    ("log.progress_every_s", -1.0, ">= 0"),
    ("guard.max_grad_norm", -1.0, ">= 0"),
    ("guard.max_param_abs", math.nan, "a finite number"),
]


@pytest.mark.parametrize("field, value, allowed", CASES)
def test_out_of_range_value_names_field_and_range(field, value, allowed):
    c = default_config()
    _set(c, field, value)
    with pytest.raises(ValueError, match=rf"config\.{field} = .*{allowed}"):
        validate(c)


def test_group_size_one_is_fine_without_a_group_baseline():
    c = default_config()
    c.data.group_size = 1
    c.credit.name, c.critic.enabled = "gae", True
    validate(c)
    c.credit.name, c.credit.reinforce_pp.baseline = "reinforce_pp", "none"
    validate(c)
    c.credit.reinforce_pp.baseline = "group"
    with pytest.raises(ValueError, match="config.data.group_size = 1.*reinforce_pp"):
        validate(c)


def test_every_experiment_config_is_still_valid():
    """The range checks must not reject a shipped experiment (default and pulse variants)."""
    checked = 0
    for path in sorted(ROOT.glob("experiments/*/*.py")):
        if path.name.startswith("_") or path.name == "repro.py":
            continue
        spec = importlib.util.spec_from_file_location(f"exp_{path.parent.name}_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if not hasattr(module, "get_config"):
            continue
        for variant in ("", "pulse"):
            try:
                c = module.get_config(variant)
            except ValueError as err:  # e.g. the paper-scale configs have no pulse
                assert "variant" in str(err)
                continue
            if "stages" in c:  # a multi-stage pipeline config: its stages are checked by it
                continue
            validate(c)
            checked += 1
    assert checked >= 20
