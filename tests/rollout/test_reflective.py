"""GRSD's reflective rollout and self-teacher: the rows are the verified trajectories, the
guidance is the policy's contrast of its own reflections, and it moves the self-teacher."""

import dataclasses

import jax
import numpy as np
import pytest

import rlvr_jax.rl.methods  # noqa: F401  (registers the "guidance" signal, "grsd" transform)
from rlvr_jax import tasks
from rlvr_jax.rl import batch as batch_lib
from rlvr_jax.rl import credit, signals
from rlvr_jax.rollout import ROLLOUTS, score
from rlvr_jax.rollout.reflective import GUIDANCE_FIELD, _generate
from rlvr_jax.testing import parity_score_rows, parity_tool_episodes, score_context
from rlvr_jax.tokenizers import cut_at_stop
from tests.rollout.common import TOK, rollout_ctx

HP = dict(ROLLOUTS.get("reflective").defaults, reflection_tokens=12, guidance_tokens=10)


def _ctx(policy, task, counts, max_new_tokens=10):
    return rollout_ctx(policy, task, counts, key=1, max_new_tokens=max_new_tokens)


@pytest.fixture(scope="module")
def reflected(policy):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(score, "score_rows", parity_score_rows)
        ctx = _ctx(policy, tasks.get("arithmetic"), [4, 4, 4])
        out = ROLLOUTS.get("reflective").fn(ctx, **HP)
        plain = ROLLOUTS.get("plain").fn(
            dataclasses.replace(ctx, key=jax.random.split(ctx.key, 3)[0])
        )
    return ctx, out, plain


def test_rows_are_the_verified_trajectories_and_guidance_contrasts_their_reflections(reflected):
    ctx, out, plain = reflected
    for f in ("tokens", "response_mask", "behaviour_logps", "rewards"):
        np.testing.assert_array_equal(getattr(out, f), getattr(plain, f))  # nothing else trained
    ids, ref_len = out.info[GUIDANCE_FIELD], out.info["reflection_len_B"]
    assert ((ref_len >= 1) & (ref_len <= HP["reflection_tokens"])).all()
    mixed = [g for g in range(3) if 0 < out.correct[out.group == g].sum() < 4]
    assert mixed, "parity rewards should give a mixed group"
    has = (ids >= 0).any(-1)
    np.testing.assert_array_equal(has, np.isin(out.group, mixed))
    assert np.isnan(out.info["guidance_len_B"][~has]).all()
    # The guidance is the policy's completion of the contrast prompt built from the policy's
    # reflections on each verified trajectory (success vs failure): regenerated here.
    for g, w in zip(mixed, _regenerated_guidance(ctx, out, mixed, TOK.stop_ids), strict=True):
        row = np.flatnonzero(out.group == g)[0]
        assert ids[row][ids[row] >= 0].tolist() == w


def _regenerated_guidance(ctx, out, mixed, stops):
    """The guidance of each group in `mixed`, regenerated from scratch with the rollout's keys."""
    _, k_reflect, k_guide = jax.random.split(ctx.key, 3)
    after = out.attention_mask & ~out.prompt_mask
    texts = []
    for r in range(len(out.group)):
        response = TOK.decode(cut_at_stop(out.tokens[r][after[r]].tolist(), stops))
        verdict = "correct" if out.correct[r] else "wrong"
        prompt = out.problems[out.group[r]].prompt
        texts.append(
            HP["reflect_template"].format(prompt=prompt, response=response, verdict=verdict)
        )
    notes = [TOK.decode(x) for x in _generate(ctx, texts, HP["reflection_tokens"], k_reflect)]
    guides = []
    for g in mixed:
        rows = np.flatnonzero(out.group == g)
        lines = {c: "\n".join(f"- {notes[r]}" for r in rows if out.correct[r] == c)
                 for c in (True, False)}  # fmt: skip
        assert lines[True] and lines[False]  # a success and a failure to contrast
        fields = dict(prompt=out.problems[g].prompt, successes=lines[True], failures=lines[False])
        guides.append(HP["guide_template"].format(**fields))
    return _generate(ctx, guides, HP["guidance_tokens"], k_guide)


def test_guidance_moves_the_self_teacher_and_grsd_keeps_every_sign(policy, reflected):
    model, _ = policy
    _, out, _ = reflected
    ctx = score_context(model, TOK, tasks.get("arithmetic"))
    mask = out.response_mask & out.valid[:, None]
    old = np.where(mask, ctx.policy.logps(out.tokens, out.attention_mask), 0).astype(np.float32)
    b = batch_lib.from_groups(out, mask, old)
    fn = signals.SIGNALS.get("guidance").fn
    without = fn(ctx, out, b, template="{prompt}")["guidance_logps_BxT"]
    with_g = fn(ctx, out, b, template="{prompt}\nGuidance: {guidance}")["guidance_logps_BxT"]
    guided = (out.info[GUIDANCE_FIELD] >= 0).any(-1)
    np.testing.assert_allclose(without, old, rtol=0, atol=2e-5)  # scored without it: ℓ^S
    shift = np.abs(with_g - old).max(-1)
    assert (shift[guided] > 1e-3).all() and (shift[~guided] == 0).all()
    assert ctx.metrics["grsd/abs_shift"] > 1e-3 and ctx.metrics["grsd/guided_rows"] > 0
    b = b.with_extra({"guidance_logps_BxT": with_g})
    entry = credit.ESTIMATORS.get("grpo")
    a, _ = entry.fn(b.rewards_B, b.group_B, b.valid_B, mask, num_groups=3, values_BxT=None,
                    **entry.defaults)  # fmt: skip
    a = np.asarray(a)
    got = credit.apply_transforms(["grsd"], a, b, {"grsd": credit.TRANSFORMS.get("grsd").defaults})
    got = np.asarray(got)
    nz = mask & (a != 0)
    assert nz.any() and (np.sign(got[nz]) == np.sign(a[nz])).all()
    assert np.abs(got[nz] / a[nz] - 1).max() > 1e-3  # the guidance moved the credit


def test_episodes_are_reflected_on_whole(policy):
    task = tasks.get("tool_lookup", num_lookups=1, max_name_syllables=1, instructions=False)
    ctx = _ctx(policy, task, [2, 2], max_new_tokens=12)
    out = ROLLOUTS.get("reflective").fn(ctx, **HP)
    turns = ROLLOUTS.get("multi_turn").fn(
        dataclasses.replace(ctx, key=jax.random.split(ctx.key, 3)[0]), max_turns=0
    )
    np.testing.assert_array_equal(out.tokens, turns.tokens)
    np.testing.assert_array_equal(out.info["turns_B"], turns.info["turns_B"])
    assert (out.info["reflection_len_B"] >= 1).all()
    # A random policy never solves an episode: no group has a contrast, so no guidance.
    assert not out.correct.any() and (out.info[GUIDANCE_FIELD] < 0).all()
    with pytest.raises(ValueError, match="'reflective' cannot continue prefixes"):
        bad = dataclasses.replace(ctx.request, prefixes=[None] * 4)
        ROLLOUTS.get("reflective").fn(dataclasses.replace(ctx, request=bad), **HP)


@pytest.fixture(scope="module")
def reflected_episodes(policy):
    """Tool episodes with parity rewards: groups with both a success and a failure."""
    task = tasks.get("tool_lookup", num_lookups=1, max_name_syllables=1, instructions=False)
    with pytest.MonkeyPatch.context() as mp:
        parity_tool_episodes(mp)
        ctx = _ctx(policy, task, [4, 4, 4], max_new_tokens=8)
        return ctx, ROLLOUTS.get("reflective").fn(ctx, **HP)


def test_episode_groups_with_a_success_and_a_failure_get_guidance(reflected_episodes):
    ctx, out = reflected_episodes
    assert (out.info["turns_B"] > 1).all()  # episodes, with tool results between turns
    mixed = [g for g in range(3) if 0 < out.correct[out.group == g].sum() < 4]
    assert mixed, "parity episode rewards should give a mixed group"
    ids = out.info[GUIDANCE_FIELD]
    np.testing.assert_array_equal((ids >= 0).any(-1), np.isin(out.group, mixed))
    # An episode is reflected on whole (every turn and tool result: no cut at a stop token).
    for g, w in zip(mixed, _regenerated_guidance(ctx, out, mixed, ()), strict=True):
        rows = np.flatnonzero(out.group == g)
        for r in rows:
            assert ids[r][ids[r] >= 0].tolist() == w


def test_guidance_on_episodes_moves_the_self_teacher_per_turn_and_keeps_every_sign(
    policy, reflected_episodes
):
    model, _ = policy
    _, out = reflected_episodes
    ctx = score_context(model, TOK, tasks.get("tool_lookup"))
    mask = out.response_mask & out.valid[:, None]
    old = np.where(mask, ctx.policy.logps(out.tokens, out.attention_mask), 0).astype(np.float32)
    np.testing.assert_allclose(old[mask], out.behaviour_logps[mask], atol=2e-4)
    b = batch_lib.from_groups(out, mask, old)
    fn = signals.SIGNALS.get("guidance").fn
    without = fn(ctx, out, b, template="{prompt}")["guidance_logps_BxT"]
    with_g = fn(ctx, out, b, template="{prompt}\nGuidance: {guidance}")["guidance_logps_BxT"]
    guided = (out.info[GUIDANCE_FIELD] >= 0).any(-1)
    np.testing.assert_allclose(without, old, rtol=0, atol=2e-5)  # scored without it: ℓ^S
    shift = np.abs(with_g - old)
    assert (shift.max(-1)[guided] > 1e-3).all() and (shift[~guided] == 0).all()
    assert (with_g[~mask] == 0).all()  # tool results and prompts are never scored
    # GRPO advantages, then GRSD's turn weights: every sign kept, magnitudes moved, and the
    # weight constant within a model turn but not across the turns of an episode.
    entry = credit.ESTIMATORS.get("grpo")
    a, _ = entry.fn(b.rewards_B, b.group_B, b.valid_B, mask, num_groups=3, values_BxT=None,
                    **entry.defaults)  # fmt: skip
    a = np.asarray(a)
    b = b.with_extra({"guidance_logps_BxT": with_g})
    got = np.asarray(
        credit.apply_transforms(["grsd"], a, b, {"grsd": credit.TRANSFORMS.get("grsd").defaults})
    )
    nz = mask & (a != 0)
    assert nz.any() and (np.sign(got[nz]) == np.sign(a[nz])).all()
    assert (got[~mask] == 0).all()
    w = np.where(nz, got / np.where(nz, a, 1), np.nan)
    assert np.nanmax(np.abs(w - 1)) > 1e-3  # the guidance moved the credit
    varies = 0
    for r in np.flatnonzero(nz.any(-1)):
        turn_w = [np.unique(w[r, lo:hi]) for lo, hi in _runs(nz[r])]
        assert all(len(x) == 1 for x in turn_w)  # one weight per turn
        varies += len({float(x[0]) for x in turn_w}) > 1
    assert varies > 0  # turn-level credit: some episode's turns are weighted differently


def _runs(mask_L):
    """[start, end) of each maximal run of True (a model turn)."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask_L.astype(int), [0]])))
    return list(zip(edges[::2], edges[1::2], strict=True))


def test_an_empty_guidance_generation_is_no_guidance(policy, monkeypatch):
    from rlvr_jax.rollout import reflective

    monkeypatch.setattr(score, "score_rows", parity_score_rows)
    generate = reflective._generate

    def no_guidance(ctx, texts, max_tokens, key):
        out = generate(ctx, texts, max_tokens, key)
        return [[] for _ in out] if max_tokens == HP["guidance_tokens"] else out

    monkeypatch.setattr(reflective, "_generate", no_guidance)
    out = ROLLOUTS.get("reflective").fn(_ctx(policy, tasks.get("arithmetic"), [4, 4, 4]), **HP)
    assert any(0 < out.correct[out.group == g].sum() < 4 for g in range(3))  # a contrast
    assert (out.info[GUIDANCE_FIELD] < 0).all() and np.isnan(out.info["guidance_len_B"]).all()
