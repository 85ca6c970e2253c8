"""The rollout-stage methods' experiments (issues 14, 15): configs, and pulses that log and assert
each method's defining quantity (a plain-rollout GRPO run would fail every one)."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from rlvr_jax.models import lora
from rlvr_jax.rl import credit
from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.rl.config import validate
from rlvr_jax.rollout import score, self_play
from rlvr_jax.rollout.score import Verdicts
from rlvr_jax.testing import parity_score_rows, parity_tool_episodes, parity_vote

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
ROLLOUTS = {
    "oc_grpo/oc_grpo": ("guided", ("", "arithmetic", "pulse", "cliff", "cliff,pulse")),
    "lspo/lspo": ("lora_scaffold", ("", "arithmetic", "pulse")),
    "nc_grpo/nc_grpo": ("latent_noise", ("", "arithmetic", "pulse")),
    "agentic/tool_lookup": ("multi_turn", ("", "pulse")),
    "cbpo/cbpo": ("branching", ("", "arithmetic", "pulse", "tool_lookup", "tool_lookup,pulse")),
    "grsd/grsd": ("reflective", ("", "arithmetic", "countdown", "pulse")),
    "spyrl/spyrl": ("self_play", ("", "pulse", "paper", "spyrl,pulse")),
}
# Rollouts that sample from another context or weights than π_old (the trainer re-scores).
OFF_POLICY = ("guided", "lora_scaffold", "latent_noise")


def load(name, variant):
    spec = importlib.util.spec_from_file_location(
        name.replace("/", "."), EXPERIMENTS / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(variant)


@pytest.mark.parametrize("name", sorted(ROLLOUTS))
def test_rollout_experiment_configs(name):
    rollout, variants = ROLLOUTS[name]
    for variant in variants:
        c = load(name, variant)
        validate(c)
        assert c.rollout.name == rollout and c.is_locked
        assert c.loss.recompute_old_logps == (rollout in OFF_POLICY)
    with pytest.raises(ValueError, match="variant"):
        load(name, "no_such_variant")


def test_spyrl_baseline_arm_is_grpo_on_the_same_task_and_budget():
    spy, base = load("spyrl/spyrl", ""), load("spyrl/spyrl", "grpo")
    validate(base)
    assert base.rollout.name == "plain" and base.task.name == spy.task.name == "spy_describe"
    for f in ("prompts_per_step", "group_size"):  # the same rollouts per step
        assert base.data[f] == spy.data[f]
    assert base.train.steps == spy.train.steps and base.model.domain == spy.model.domain
    assert load("spyrl/spyrl", "grpo,pulse").task.name == "spy_describe"


def _grpo(b):
    """The GRPO advantages of a captured batch (the input of the credit transforms)."""
    entry = credit.ESTIMATORS.get("grpo")
    num_groups = int(b["group_B"].max()) + 1
    adv, _ = entry.fn(b["rewards_B"], b["group_B"], b["valid_B"], b["mask_BxT"],
                      num_groups=num_groups, values_BxT=None, **entry.defaults)  # fmt: skip
    return np.asarray(adv)


def _path(groups, r):
    """(tokens after the prompt, which of them the policy sampled) of row r."""
    after = groups.attention_mask[r] & ~groups.prompt_mask[r]
    return groups.tokens[r][after], groups.response_mask[r][after]


def _lines(workdir):
    lines = [json.loads(x) for x in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]
    return [x for x in lines if x["split"] == "train"]


def _cliffs_then_parity(monkeypatch):
    """Parity rewards, but the plain rows of every other problem all fail: LSPO's and
    OC-GRPO's cliffs (the re-rolls, the next call of a step, are scored by parity)."""
    calls = []

    def score_rows(task, tokenizer, problems_R, sampled_R, stop_ids):
        v = parity_score_rows(task, tokenizer, problems_R, sampled_R, stop_ids)
        calls.append(len(problems_R))
        if len(calls) % 2:  # a step's plain rollout
            cliff = np.array([int(p.id.rsplit("/", 1)[1]) % 2 == 0 for p in problems_R])
            v = Verdicts(np.where(cliff, 0.0, v.rewards), v.correct & ~cliff, v.reasons, v.texts)
        return v

    monkeypatch.setattr(score, "score_rows", score_rows)


PULSES = [(n, "pulse", "grpo") for n in sorted(ROLLOUTS)]
PULSES += [("agentic/tool_lookup", "pulse", "gae"), ("cbpo/cbpo", "tool_lookup,pulse", "grpo")]
PULSES += [("oc_grpo/oc_grpo", "cliff,pulse", "grpo")]


@pytest.mark.slow
@pytest.mark.parametrize("name, variant, credit", PULSES)
def test_rollout_experiment_pulse_logs_its_defining_quantity(
    name, variant, credit, tmp_path, monkeypatch
):
    """(Episodes with PPO's critic and GAE too: GAE skips the environment-token gaps.)"""
    rollout, _ = ROLLOUTS[name]
    if rollout == "lora_scaffold" or "cliff" in variant:
        _cliffs_then_parity(monkeypatch)
    elif rollout == "self_play":  # a random policy writes no "Vote: k": parity votes
        monkeypatch.setattr(self_play, "parse_vote", parity_vote)
    else:
        monkeypatch.setattr(score, "score_rows", parity_score_rows)
        parity_tool_episodes(monkeypatch)  # tool episodes: parity rewards too
    c = load(name, variant)
    c.eval.at_start = False
    batches, rollouts = [], []
    original, original_rollout = trainer_lib.Trainer.credit, trainer_lib.Trainer.rollout

    def keep_batch(self, batch, step, num_groups):
        b = original(self, batch, step, num_groups)
        batches.append({k: np.asarray(b[k]) for k in b.names()})
        return b

    def keep_rollout(self, request, key):
        rollouts.append(original_rollout(self, request, key))
        return rollouts[-1]

    monkeypatch.setattr(trainer_lib.Trainer, "credit", keep_batch)
    monkeypatch.setattr(trainer_lib.Trainer, "rollout", keep_rollout)
    if credit == "gae":
        c.credit.name, c.critic.enabled = "gae", True
    trainer = trainer_lib.Trainer.from_config(c, tmp_path)
    try:
        trainer.run()
    finally:
        trainer.io.close()
    train = _lines(tmp_path)
    bg = c.data.prompts_per_step * c.data.group_size
    assert [x["step"] for x in train] == [1, 2]
    assert all(np.isfinite(x["loss"]) for x in train)
    if credit == "gae":
        assert all(np.isfinite(x["value_loss"]) for x in train)
    if rollout == "guided" and "cliff" in variant:  # guided only on cliff groups
        # Parity rewards: some groups are all-fail; their first half is re-sampled guided,
        # and those guided rows pass where every unguided row of the group failed.
        assert all(x["rollout/cliff_groups"] > 0 for x in train)
        assert all(0 < x["rollout/guided"] < 0.5 for x in train)
        assert any(x["rollout/guided_pass_rate"] > 0 for x in train)
        assert all(x["select/off_batch_rollouts"] == x["rollout/guided"] * bg for x in train)
        assert any(abs(x["is_weight@guided"] - 1) > 1e-4 for x in train)
        for g in rollouts:
            cliff, guided = g.info["cliff_B"], g.info["guided_B"]
            assert not (guided & ~cliff).any()  # never a group that had a correct row
    elif rollout == "guided":  # half of each group guided; their weights are not 1
        assert all(x["rollout/guided"] == 0.5 for x in train)
        assert all(abs(x["is_weight@guided"] - 1) > 1e-4 for x in train)
        assert all(0 <= x["is_truncated@guided"] <= 1 for x in train)
        assert all("rollout/not_guided_reward" in x for x in train)
    if rollout == "latent_noise":
        assert all(x["rollout/noise"] == 0.5 and "rollout/noise_reward" in x for x in train)
    if rollout == "lora_scaffold":  # cliffs found, some rescued, and the base never adapted
        assert all(x["rollout/cliff_groups"] > 0 for x in train)
        assert any(x["rollout/scaffold_groups"] > 0 for x in train)
        assert any(abs(x.get("is_weight@scaffold", 1.0) - 1) > 1e-4 for x in train)
        assert not lora.has_lora(trainer.parts.model)
        assert not lora.has_lora(trainer.parts.sampler.model)
        # Every re-roll is generated work: the budget counts it (G re-rolls per cliff
        # group), on top of the batch's B·G rows.
        for x, g in zip(train, rollouts, strict=True):
            assert x["select/off_batch_rollouts"] == x["rollout/cliff_groups"] * c.data.group_size
            assert x["select/off_batch_rollouts"] == g.off_batch[0] > 0 and g.off_batch[1] > 0
            assert x["select/rollouts"] == bg + x["select/off_batch_rollouts"]
            assert x["select/off_batch_tokens"] == g.off_batch[1]
    if rollout == "branching":  # real branches on every root, CBV logged, tree credit used
        assert all(x["rollout/branches_per_root"] > 1 for x in train)
        assert all(x["rollout/branched"] == 0.75 for x in train)  # 6 of G = 8 rows
        assert all(0 <= x["rollout/node_cbv"] <= 0.5 for x in train)
        assert any(x["rollout/node_cbv"] > 0 and 0 < x["rollout/node_contrast"] for x in train)
        for b in batches:
            tree = b["branch_parent_B"] >= 0
            assert (b["branch_offset_B"][tree] >= 1).all() and b["branch_shared_BxB"].any()
            assert (b["branch_pos_K"] >= 0).sum() == 3 * c.data.prompts_per_step
    if rollout == "branching" and "tool_lookup" in variant:  # branches inside model turns
        after_tool = 0
        for g in rollouts:
            assert (g.info["turns_B"] >= 1).all() and (g.info["turns_B"] > 1).any()
            first = {int(x): int(np.flatnonzero(g.group == x)[0]) for x in np.unique(g.group)}
            for r in np.flatnonzero(g.info["branch_parent_B"] >= 0):
                a = first[int(g.group[r])] + int(g.info["branch_parent_B"][r])
                path, sampled = _path(g, r)
                parent_path, parent_sampled = _path(g, a)
                at = int(np.flatnonzero(parent_sampled)[g.info["branch_pos_B"][r]])
                assert parent_sampled[at] and sampled[at]  # a sampled token, never a tool's
                np.testing.assert_array_equal(path[:at], parent_path[:at])  # the exact path
                assert not sampled[:at].any()  # the copy is context
                after_tool += bool((~parent_sampled[:at]).any())
        assert after_tool > 0  # some branches resumed after a tool result
    if rollout == "reflective":  # reflections written, guidance moves ℓ^T and the credit
        assert all(x["rollout/reflection_len"] >= 1 for x in train)
        assert any(x["grsd/guided_rows"] > 0 and x["grsd/abs_shift"] > 1e-4 for x in train)
        moved = False
        for b in batches:
            a, m = _grpo(b), b["mask_BxT"] & (_grpo(b) != 0)
            assert (np.sign(b["adv_BxT"][m]) == np.sign(a[m])).all()  # sign kept
            moved |= bool(np.abs(b["adv_BxT"][m] / a[m] - 1).max() > 1e-4) if m.any() else False
        assert moved
    if rollout == "self_play":  # games played: both roles, both turns, votes that decide
        assert all(x["rollout/spy"] == pytest.approx(1 / 3) for x in train)  # 1 of 3 players
        assert all(x["rollout/vote"] == 0.5 and x["rollout/vote_parsed"] == 1 for x in train)
        assert all(0 <= x["rollout/civilian_voted_spy"] <= 1 for x in train)
        for b in batches:
            spy, vote, g = b["spy_B"], b["vote_B"], b["group_B"]
            assert g.max() + 1 == 4 * c.data.prompts_per_step  # 4 role groups per prompt
            for k in np.unique(g):  # like rows only
                assert len(set(zip(spy[g == k], vote[g == k], strict=True))) == 1
            # Both roles rewarded, differently: in a game one side wins.
            games = b["game_player_Bx2"][:, 0]
            assert any(b["rewards_B"][(games == k) & spy].mean()
                       != b["rewards_B"][(games == k) & ~spy].mean()
                       for k in np.unique(games))  # fmt: skip
            assert np.abs(b["adv_BxT"]).max() > 0
        evals = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
        evals = [x for x in evals if x["split"] == "eval"]  # games vs the frozen initial policy
        assert evals and all(0 <= evals[-1][f"game/{k}"] <= 1 for k in (
            "detection_rate", "spy_survival", "leak_rate", "description_valid"))  # fmt: skip
    if rollout == "multi_turn":
        assert all(1 <= x["rollout/turns"] <= 5 for x in train)
        assert any(x["rollout/turns"] > 1 for x in train)
        evals = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
        evals = [x for x in evals if x["split"] == "eval"]  # whole episodes, turns logged
        assert evals and all(1 <= x["mean_turns"] <= 5 for x in evals)
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
