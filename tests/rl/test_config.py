import importlib.util
from pathlib import Path

import ml_collections
import pytest

from rlvr_jax.registry import Registry
from rlvr_jax.rl import credit, objectives
from rlvr_jax.rl.config import apply_variant, default_config, validate

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments" / "baselines"
# repro.py declares the baselines' reproduction (rlvr_jax.repro), not a config.
BASELINES = sorted(p.stem for p in EXPERIMENTS.glob("*.py") if p.name != "repro.py")


def load_experiment(name: str, variant: str = "") -> ml_collections.ConfigDict:
    spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(variant)


def test_registry_unknown_name_lists_choices():
    reg = Registry("thing")
    reg.register("b", x=1)(lambda: None)
    reg.register("a")(lambda: None)
    assert reg.names() == ["a", "b"]
    assert reg.get("b").defaults == {"x": 1}
    with pytest.raises(ValueError, match="unknown thing 'c'; valid: a, b"):
        reg.get("c")
    with pytest.raises(ValueError, match="already registered"):
        reg.register("a")(lambda: None)


def test_default_config_holds_every_registered_stage():
    c = default_config()
    for name in credit.ESTIMATORS.names():
        assert c.credit[name].to_dict() == dict(credit.ESTIMATORS.get(name).defaults)
    for name in objectives.POLICY_LOSSES.names():
        assert c.loss[name].to_dict() == dict(objectives.POLICY_LOSSES.get(name).defaults)
    validate(c)


def test_config_is_locked_against_typos():
    c = default_config()
    with pytest.raises(AttributeError, match="eps_hgih"):
        c.loss.ppo_clip.eps_hgih = 0.3
    with pytest.raises(AttributeError):
        c.optimizer.learning_rate = 1.0


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("credit.name", "grpoo", "config.credit.name = 'grpoo'; valid: dr_grpo, gae, grpo"),
        ("loss.name", "ppo", "config.loss.name = 'ppo'; valid: "),
        ("select.name", "sarah", "valid: uniform, dynamic_sampling, difficulty, sara"),
        ("loss.aggregation", "mean", "valid: token-mean"),
        ("task.name", "chess", "config.task.name = 'chess'"),
        ("train.num_minibatches", 3, "must divide config.data.prompts_per_step = 32"),
        ("reward.overlong_cache", 65, "exceeds config.rollout.max_new_tokens = 64"),
        ("credit.name", "gae", "needs a critic"),
        ("loss.tis_cap", 2.0, "recompute_old_logps"),
    ],
)
def test_validate_names_the_field(field, value, message):
    c = default_config()
    section, key = field.split(".")
    c[section][key] = value
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate(c)


def test_unknown_variant_lists_choices():
    with pytest.raises(ValueError, match="valid: countdown, arithmetic, pulse"):
        apply_variant(default_config(), "chess")


def test_baselines_are_all_present_and_valid():
    assert BASELINES == ["dapo", "dr_grpo", "grpo", "gspo", "ppo", "reinforce_pp", "rloo"]
    for name in BASELINES:
        for variant in ("", "arithmetic", "pulse"):
            c = load_experiment(name, variant)
            validate(c)
            assert c.is_locked


def test_baselines_set_their_papers_choices():
    assert load_experiment("dapo").loss.ppo_clip.eps_high == 0.28
    assert load_experiment("dapo").select.name == "dynamic_sampling"
    assert load_experiment("dr_grpo").loss.aggregation == "constant"
    assert load_experiment("gspo").loss.name == "gspo"
    assert load_experiment("ppo").critic.enabled
    assert load_experiment("rloo").credit.name == "rloo"
    assert load_experiment("reinforce_pp").credit.name == "reinforce_pp"
    assert load_experiment("grpo", "arithmetic").model.domain == "arithmetic"
