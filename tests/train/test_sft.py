"""SFT loss, the SFT loop, pass@k and task evaluation."""

from __future__ import annotations

import dataclasses
import itertools
import math
from fractions import Fraction
from pathlib import Path
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr_jax.models import init_model, load_pretrained
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.tasks.base import CORRECT, WRONG_ANSWER, Problem, Task, Verdict
from rlvr_jax.testing import tiny_config, toy_tokenizer
from rlvr_jax.train import (
    encode_example,
    encode_prompt,
    evaluate_task,
    pad_batch,
    pass_at_k,
    sft_loss,
    train_sft,
)
from rlvr_jax.train.warmstart import (
    WarmStartSpec,
    get_spec,
    load_model_tokenizer,
    load_warm_start,
    model_dir,
    tokenizer_fingerprint,
    train_warm_start,
)

_loss = nnx.jit(sft_loss)  # jitted: eager op-by-op dispatch is slow on CPU
_logits = nnx.jit(lambda model, tokens, mask: model(tokens, attention_mask=mask))


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


# ------------------------------------------------------------------------ sft_loss
def test_sft_loss_matches_numpy_reference():
    model = init_model(tiny_config(), seed=1)
    rng = np.random.default_rng(0)
    b, t = 3, 12
    tokens = rng.integers(0, 128, (b, t)).astype(np.int32)
    lengths = np.array([12, 9, 5])
    attn = np.arange(t)[None, :] < lengths[:, None]
    loss_mask = rng.random((b, t)) < 0.6
    loss_mask[:, 0] = False
    loss_mask &= attn
    total, count = _loss(model, tokens, attn, loss_mask)

    logits = np.asarray(_logits(model, tokens, attn), np.float64)
    logp = _log_softmax(logits)
    want = 0.0
    for i in range(b):
        for j in range(1, t):
            if loss_mask[i, j]:
                want -= logp[i, j - 1, tokens[i, j]]
    assert float(count) == loss_mask.sum()
    np.testing.assert_allclose(float(total), want, rtol=1e-5)


def test_sft_loss_ignores_padding_and_unmasked_tokens():
    model = init_model(tiny_config(), seed=1)
    tokens = np.arange(8, dtype=np.int32)[None] + 5
    attn = np.array([[1, 1, 1, 1, 1, 0, 0, 0]], bool)
    mask = np.array([[0, 0, 1, 1, 1, 1, 1, 1]], bool)  # the last three are padding
    total, count = _loss(model, tokens, attn, mask)
    changed = tokens.copy()
    changed[0, 1] = 99  # an unmasked context token changes the loss...
    changed[0, 6] = 77  # ...a padding token does not
    assert float(count) == 3
    total_pad, _ = _loss(model, np.where(np.arange(8) >= 5, 42, tokens), attn, mask)
    np.testing.assert_allclose(float(total_pad), float(total), rtol=1e-6)
    assert float(_loss(model, changed, attn, mask)[0]) != pytest.approx(float(total))
    _, none = _loss(model, tokens, attn, np.zeros_like(mask))
    assert float(none) == 0


def test_encode_example_masks_completion_and_end_of_turn():
    tok = toy_tokenizer(128)
    ids, mask = encode_example(tok, "2+3", "5")
    prompt = encode_prompt(tok, "2+3")
    assert ids.tolist() == prompt + tok.encode("5") + [tok.token_to_id("<|im_end|>")]
    assert mask.tolist() == [False] * len(prompt) + [True, True]
    batch = pad_batch([(ids, mask), (ids[:-3], mask[:-3])], 24, tok.pad_id)
    assert batch["tokens_BxT"].shape == (2, 24)
    assert batch["attention_mask_BxT"].sum(1).tolist() == [len(ids), len(ids) - 3]
    assert batch["loss_mask_BxT"].sum() == 2
    with pytest.raises(ValueError, match="tokens"):
        pad_batch([(ids, mask)], 4, 0)


# ----------------------------------------------------------------------- train_sft
_EXAMPLES = [("2+3", "5 ok"), ("7*6", "42 ok"), ("9-4", "5 ok"), ("8+8", "16 ok")]


def _train_tiny(seed=0, steps=30):
    tok = toy_tokenizer(128)
    model = init_model(tiny_config(num_layers=2), seed=0)
    result = train_sft(
        model, tok, _EXAMPLES, steps=steps, batch_size=4, lr=1e-2, seed=seed, log_every=1
    )
    return model, tok, result


def test_sft_has_a_pulse_overfits_and_greedy_reproduces_solution():
    model, tok, result = _train_tiny()
    losses = [h["loss"] for h in result.history]
    assert len(losses) == 30 and all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0] / 20, losses
    assert result.history[-1]["tokens_per_s"] > 0

    prompts = [encode_prompt(tok, p) for p, _ in _EXAMPLES]
    params = SamplingParams(temperature=0.0, max_new_tokens=12, stop_token_ids=tok.stop_ids)
    rollout = Sampler(model, pad_id=tok.pad_id).sample(prompts, params, jax.random.PRNGKey(0))
    for b, (_, completion) in enumerate(_EXAMPLES):
        assert rollout.stopped[b]
        assert tok.decode(rollout.sampled_tokens(b)) == completion


def test_sft_is_deterministic_for_a_seed():
    _, _, a = _train_tiny(seed=3, steps=4)
    _, _, b = _train_tiny(seed=3, steps=4)
    assert [h["loss"] for h in a.history] == [h["loss"] for h in b.history]


def test_sft_eval_fn_is_called_and_input_model_survives_donation():
    tok = toy_tokenizer(128)
    model = init_model(tiny_config(num_layers=2), seed=0)
    seen = []
    result = train_sft(
        model,
        tok,
        _EXAMPLES,
        steps=4,  # the step of test_sft_is_deterministic_for_a_seed: compiled once
        batch_size=4,
        lr=1e-2,
        eval_fn=lambda m, step: seen.append(step) or float(m(jnp.ones((1, 3), jnp.int32)).sum()),
        eval_every=2,
    )
    assert seen == [2, 4] and [s for s, _ in result.evals] == [2, 4]
    assert np.isfinite(np.asarray(model(jnp.ones((1, 3), jnp.int32)))).all()


# ------------------------------------------------------------------------- pass@k
def _brute_force(n, c, k):
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(outcomes, k))
    return sum(any(s) for s in subsets) / len(subsets)


def test_pass_at_k_hand_computed():
    assert pass_at_k(2, 1, 1) == pytest.approx(0.5)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(8, 0, 8) == 0.0
    assert pass_at_k(8, 1, 8) == 1.0
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)
    np.testing.assert_allclose(pass_at_k(4, np.array([0, 1, 4]), 2), [0.0, 0.5, 1.0])


@pytest.mark.parametrize("n", range(1, 8))
def test_pass_at_k_matches_brute_force(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(_brute_force(n, c, k), abs=1e-12)


def test_pass_at_k_is_stable_for_large_n():
    n, c, k = 2000, 37, 500
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12)
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


# ---------------------------------------------------------------------- evaluate
@dataclasses.dataclass(frozen=True)
class _EvenLengthTask(Task):
    """Stub task: a response is correct iff it has an even number of characters."""

    name: ClassVar[str] = "stub_even"
    seen: list = dataclasses.field(default_factory=list, compare=False, hash=False)

    def problem(self, index: int, split: str = "train") -> Problem:
        return Problem(self.problem_id(index, split), f"q{index}", "", "")

    def verify(self, problem: Problem, response: str) -> Verdict:
        self.seen.append((problem.id, response))
        if len(response) % 2 == 0:
            return Verdict(1.0, CORRECT)
        return Verdict(0.0, WRONG_ANSWER)


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_evaluate_task_counts_are_consistent(temperature):
    tok = toy_tokenizer(128)
    model = init_model(tiny_config(), seed=0)
    task = _EvenLengthTask()
    kw = dict(num_problems=5, n_samples=4, temperature=temperature, max_new_tokens=6)
    out = evaluate_task(model, tok, task, prompts_per_batch=2, seed=1, **kw)
    num_correct = np.asarray(out["num_correct"])
    assert len(task.seen) == 20 and sum(out["reasons"].values()) == 20
    assert out["reasons"].get(CORRECT, 0) == num_correct.sum()
    want = [sum(len(r) % 2 == 0 for pid, r in task.seen if pid.endswith(f"/{i}")) for i in range(5)]
    assert num_correct.tolist() == want
    assert out["mean_reward"] == pytest.approx(num_correct.sum() / 20)
    assert out["pass@1"] == pytest.approx(num_correct.mean() / 4)
    assert out["pass@4"] == pytest.approx((num_correct > 0).mean())
    assert all("<|im_end|>" not in r and len(r) <= 6 for _, r in task.seen)
    if temperature == 0.0:  # greedy: every sample of a prompt is the same
        assert set(num_correct.tolist()) <= {0, 4}
    again = evaluate_task(model, tok, _EvenLengthTask(), prompts_per_batch=2, seed=1, **kw)
    assert again["num_correct"] == out["num_correct"]


# --------------------------------------------------------------------- warm start
def test_warm_start_trains_once_saves_and_reloads(tmp_path):
    tok = toy_tokenizer(128)
    spec = WarmStartSpec(
        domain="arithmetic",
        role="base",
        task_options=(("max_operand", 5), ("num_operands", 2)),
        hidden_size=32,
        intermediate_size=64,
        num_layers=1,
        num_heads=1,
        num_kv_heads=1,
        head_dim=32,
        steps=2,
        batch_size=2,
        lr=1e-3,
        num_train_problems=4,
        max_new_tokens=8,
    )
    info = train_warm_start(spec, tokenizer=tok, cache_dir=tmp_path, eval_problems=2)
    path = Path(info["path"])
    assert path.parent == tmp_path and path.name.startswith("arithmetic-base-")
    assert info["eval"]["num_problems"] == 2 and 0 <= info["eval"]["pass@8"] <= 1
    again = train_warm_start(spec, tokenizer=tok, cache_dir=tmp_path)  # from the cache
    assert again["train_seconds"] == info["train_seconds"] and again["path"] == info["path"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temporary leftovers

    model, config = load_pretrained(path)
    assert config.num_params() == info["num_params"] and config.eos_token_id == 4
    assert tokenizer_fingerprint(load_model_tokenizer(path)) == tokenizer_fingerprint(tok)
    assert model_dir(dataclasses.replace(spec, seed=1), tok, tmp_path) != path


@pytest.mark.slow
@pytest.mark.parametrize("domain", ["countdown", "arithmetic"])
def test_warm_start_models_are_in_range(domain):
    """Trains the real models into the default cache if missing (minutes each)."""
    results = {}
    for role in ("base", "teacher"):
        ws = load_warm_start(domain, role)
        task = get_spec(domain, role).task()
        results[role] = evaluate_task(ws.model, ws.tokenizer, task, num_problems=64, seed=1)
    base, teacher = results["base"], results["teacher"]
    assert 0.05 <= base["pass@1"] <= 0.6, base
    assert base["pass@8"] >= base["pass@1"] + 0.15, base
    assert teacher["pass@1"] >= base["pass@1"] + 0.1, (base, teacher)
