"""A plug-in is its registry entry: options, `check(config)` and facts reach `validate` from it.

Each test registers a new plug-in in a scratch copy of a stage registry (the
real tables are restored afterwards) and shows that the config and the checks
pick it up with no edit anywhere else: its sub-config appears in
`default_config()`, its own check runs, and its declared facts (off-policy,
label-free, group-relative, provided fields) decide the checks between stages.
The seed plug-ins' own facts are checked against what their papers need.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from rlvr_jax.registry import in_range
from rlvr_jax.rl import credit, objectives, signals
from rlvr_jax.rl.config import default_config, validate
from rlvr_jax.rollout import ROLLOUTS
from rlvr_jax.scheduling import SCHEDULERS

PACKAGE = Path(__file__).resolve().parents[2] / "rlvr_jax"


@pytest.fixture
def scratch(monkeypatch):
    """The stage registries, each a copy for the test (new entries vanish after it)."""
    for registry in (ROLLOUTS, credit.ESTIMATORS, credit.TRANSFORMS, signals.SIGNALS):
        monkeypatch.setattr(registry, "_entries", dict(registry._entries))


def _small(c):
    c.data.prompts_per_step, c.data.group_size = 4, 4
    c.train.num_minibatches, c.train.micro_batch_size = 1, 0
    return c


def _check_width(c):
    in_range("rollout.echo", c.rollout.echo, "width", 1, 8)


def _register_echo(**facts):
    ROLLOUTS.register("echo", check=_check_width, width=2, **facts)(lambda ctx, **kw: None)


def test_a_new_rollout_brings_its_options_and_its_check(scratch):
    _register_echo()
    c = _small(default_config())
    assert c.rollout.echo.to_dict() == {"width": 2}  # its options, from its entry
    c.rollout.name = "echo"
    validate(c)
    c.rollout.echo.width = 9
    with pytest.raises(ValueError, match=r"config.rollout.echo.width = 9; must be in \[1, 8\]"):
        validate(c)


def test_an_off_policy_fact_needs_pi_old_rescored(scratch):
    _register_echo(off_policy=lambda options: options["width"] > 1)
    c = _small(default_config())
    c.rollout.name = "echo"
    with pytest.raises(ValueError, match="config.rollout.name = 'echo' samples from another"):
        validate(c)
    c.rollout.echo.width = 1  # the fact depends on the options: now on-policy
    validate(c)
    c.rollout.echo.width = 2
    c.loss.recompute_old_logps = True
    validate(c)


def test_a_label_free_signal_may_train_on_test_prompts(scratch):
    c = _small(default_config())
    c.task.train_split = "test"
    with pytest.raises(ValueError, match="only a label-free reward may"):
        validate(c)

    def constant(ctx, groups, batch):
        return {"rewards_B": batch["rewards_B"] * 0}

    signals.register("constant_reward", provides=("rewards_B",), label_free=True)(constant)
    with pytest.raises(ValueError, match="'constant_reward'"):  # the message lists it
        validate(c)
    c = _small(default_config())
    c.task.train_split = "test"
    c.score.signals = "constant_reward"
    validate(c)
    c.select.name = "dynamic_sampling"  # reads the verifier's rewards
    with pytest.raises(ValueError, match="needs select.name = 'uniform'"):
        validate(c)


def test_a_group_relative_estimator_refuses_one_rollout_per_group(scratch):
    def lone(rewards_B, group_B, valid_B, mask_BxT, *, num_groups, values_BxT, baseline):
        raise AssertionError("validate never runs an estimator")

    relative = lambda options: options["baseline"] == "group"  # noqa: E731
    credit.ESTIMATORS.register("lone", group_relative=relative, baseline="group")(lone)
    c = default_config()
    c.credit.name = "lone"
    c.data.group_size, c.data.prompts_per_step, c.train.micro_batch_size = 1, 4, 0
    with pytest.raises(ValueError, match="config.data.group_size = 1; must be >= 2"):
        validate(c)
    c.credit.lone.baseline = "none"
    validate(c)


def test_a_rollouts_provided_field_feeds_a_transform(scratch):
    ROLLOUTS.register("tagged", provides=("tag_B",))(lambda ctx: None)
    credit.TRANSFORMS.register("use_tag", requires=("tag_B",))(lambda adv, batch: adv)
    c = _small(default_config())
    c.credit.transforms = "use_tag"
    with pytest.raises(ValueError, match=r"needs batch fields \['tag_B'\]"):
        validate(c)  # the plain rollout does not provide it
    c.rollout.name = "tagged"
    validate(c)


def test_seed_plugins_declare_their_facts():
    clean, noisy = dict(old_logps="clean"), dict(old_logps="noisy")
    assert ROLLOUTS.get("guided").fact("off_policy", {})
    assert ROLLOUTS.get("lora_scaffold").fact("off_policy", {})
    assert ROLLOUTS.get("latent_noise").fact("off_policy", clean)
    assert not ROLLOUTS.get("latent_noise").fact("off_policy", noisy)
    assert not ROLLOUTS.get("plain").fact("off_policy", {})
    assert ROLLOUTS.get("branching").provides == ("branch_id_B", "branch_parent_B", "branch_pos_B")
    assert signals.SIGNALS.get("majority_vote").label_free
    assert not signals.SIGNALS.get("teacher").label_free
    assert {e.name for e in credit.TRANSFORMS.entries() if e.label_free} == {
        "om_grpo",
        "om_grpo_contrast",
    }
    relative = {n for n in credit.ESTIMATORS.names() if credit.ESTIMATORS.get(n).fact(
        "group_relative", default_config().credit[n])}  # fmt: skip
    assert relative == {"grpo", "dr_grpo", "rloo", "reinforce_pp"}
    assert objectives.POLICY_LOSSES.get("gapo").minibatch_stats is not None
    assert objectives.POLICY_LOSSES.get("ppo_clip").minibatch_stats is None
    assert [n for n, s in SCHEDULERS.items() if s.needs_embeddings] == ["leeps"]
    assert [n for n, s in SCHEDULERS.items() if s.label_free] == ["uniform"]


def _string_literals(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def test_no_central_module_names_a_plugin():
    """validate, the select stage, signals and the update stage name no plug-in."""
    names = set(ROLLOUTS.names()) | set(credit.ESTIMATORS.names()) | set(SCHEDULERS)
    names |= set(credit.TRANSFORMS.names()) | set(objectives.POLICY_LOSSES.names())
    names |= set(signals.SIGNALS.names())
    central = ("rl/validate.py", "scheduling/select.py", "rl/signals.py", "rl/update.py")
    for module in (*central, "rl/steps.py", "rl/trainer.py", "rl/parts.py"):
        named = _string_literals(PACKAGE / module) & names
        assert not named, f"rlvr_jax/{module} names plug-ins {sorted(named)}"


def test_a_provided_per_row_field_must_have_the_batchs_rows():
    from rlvr_jax.rl.batch import Batch

    b = Batch(*[np.zeros((3, 2))] * 6, *[np.zeros(3)] * 4)
    assert b.with_extra({"tag_B": np.ones(3), "member_KxB": np.ones((5, 3))})["tag_B"].sum() == 3
    with pytest.raises(ValueError, match="batch field 'tag_B' has 2 rows; the batch has 3"):
        b.with_extra({"tag_B": np.ones(2)})


def test_the_design_doc_maps_every_plugin_to_its_module():
    import importlib.util

    root = PACKAGE.parent
    spec = importlib.util.spec_from_file_location("plugin_map", root / "scripts/plugin_map.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    table = module.plugin_map()
    gapo = "| `rl/methods/gapo.py` | signal `group_success`, loss `gapo`, loss `gapo_gspo` |"
    assert gapo in table  # the module that defines an entry, not the one that imports it
    design = (root / "docs/design.md").read_text()
    assert table in design, "docs/design.md's plug-in table is stale: python scripts/plugin_map.py"
