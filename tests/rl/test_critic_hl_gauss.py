"""The HL-Gauss categorical critic: head, loss in the update, trainer pulse, checkpoint."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from rlvr_jax.models import init_model
from rlvr_jax.rl import config as config_lib
from rlvr_jax.rl import objectives
from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.rl.critic import Critic
from rlvr_jax.rl.update import RLState, make_update
from rlvr_jax.rollout import score
from rlvr_jax.testing import parity_score_rows, tiny_config

from .test_config import load_experiment

B, T, M, V_MIN, V_MAX = 4, 8, 6, -1.0, 2.0


def _ref_targets(y, ratio=0.75):
    """HL-Gauss target of one scalar y, from math.erf in float64."""
    edges = np.linspace(V_MIN, V_MAX, M + 1)
    y = min(max(y, V_MIN), V_MAX)
    sigma = ratio * (V_MAX - V_MIN) / M
    cdf = np.array([0.5 * (1 + math.erf((e - y) / (math.sqrt(2) * sigma))) for e in edges])
    return np.diff(cdf) / (cdf[-1] - cdf[0])


def _ref_control_targets(y, kind):
    """The HL-Gauss paper's control targets of one scalar y, written out in float64."""
    y = min(max(y, V_MIN), V_MAX)
    if kind == "bernoulli":
        q = (y - V_MIN) / (V_MAX - V_MIN)
        return np.array([1 - q, q])
    width = (V_MAX - V_MIN) / M
    out = np.zeros(M)
    if kind == "one_hot":
        out[min(int((y - V_MIN) // width), M - 1)] = 1.0
        return out
    centres = V_MIN + width * (np.arange(M) + 0.5)
    if y <= centres[0] or y >= centres[-1]:  # outside the centres: all mass on the end bin
        out[0 if y <= centres[0] else -1] = 1.0
        return out
    k = int(np.searchsorted(centres, y, side="right")) - 1
    out[k], out[k + 1] = (centres[k + 1] - y) / width, (y - centres[k]) / width
    return out


def _critic_setup(seed=0, loss="hl_gauss"):
    critic = Critic(
        init_model(tiny_config(), seed=1), seed=seed, loss=loss, num_bins=M, v_min=V_MIN,
        v_max=V_MAX,
    )  # fmt: skip
    return nnx.split(critic, nnx.Param, ...)


def _batch():
    rng = np.random.default_rng(0)
    mask = np.zeros((B, T), bool)
    mask[:, 4:] = True
    mask[2, 6:] = False
    attn = np.ones((B, T), bool)
    attn[1, :2] = False
    return {
        "tokens_BxT": rng.integers(3, 120, (B, T)).astype(np.int32),
        "attention_mask_BxT": attn,
        "mask_BxT": mask,
        "old_logps_BxT": np.zeros((B, T), np.float32),
        "adv_BxT": np.zeros((B, T), np.float32),
        "old_values_BxT": np.zeros((B, T), np.float32),
        # Some returns outside [v_min, v_max]: clipped to it.
        "returns_BxT": np.where(mask, rng.uniform(-1.5, 2.5, (B, T)), 0).astype(np.float32),
    }


def test_categorical_critic_values_are_expected_bin_centres():
    graphdef, params, rest = _critic_setup()
    critic = nnx.merge(graphdef, params, rest)
    b = _batch()
    # A non-uniform head, so the expectation is not just the midpoint.
    critic.head.bias[...] = jnp.arange(M, dtype=jnp.float32)
    logits = np.asarray(critic.logits(b["tokens_BxT"], b["attention_mask_BxT"]), np.float64)
    values = np.asarray(critic(b["tokens_BxT"], b["attention_mask_BxT"]))
    assert logits.shape == (B, T, M) and np.all(logits[:, 0] == 0) and np.all(values[:, 0] == 0)
    centres = np.linspace(V_MIN, V_MAX, M + 1)[:-1] + (V_MAX - V_MIN) / M / 2
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(values[:, 1:], (p @ centres)[:, 1:], rtol=1e-5, atol=1e-6)
    # Row 0 of the shifted logits comes from hidden state t − 1 of the trunk.
    h = critic.trunk.forward(b["tokens_BxT"], b["attention_mask_BxT"], return_hidden=True).hidden
    np.testing.assert_allclose(logits[:, 1:], critic.head(h)[:, :-1], rtol=1e-6)
    with pytest.raises(ValueError, match="mse"):
        Critic(init_model(tiny_config(), seed=1)).logits(b["tokens_BxT"], b["attention_mask_BxT"])
    with pytest.raises(ValueError, match="valid: mse, hl_gauss, two_hot, one_hot, bernoulli"):
        Critic(init_model(tiny_config(), seed=1), loss="two_hots")


@pytest.mark.parametrize("kind", ["hl_gauss", "two_hot", "one_hot", "bernoulli"])
def test_categorical_update_matches_the_reference_loss_and_gradient(kind, n_micro=2):
    """Two micro-batches, each normalised by the whole minibatch's token count."""
    graphdef_p, params_p, rest_p = nnx.split(init_model(tiny_config(), seed=0), nnx.Param, ...)
    c_graphdef, c_params, c_rest = _critic_setup(loss=kind)
    sgd = optax.sgd(1.0)
    state = RLState(
        params=params_p,
        opt_state=sgd.init(params_p),
        critic_params=c_params,
        critic_opt_state=sgd.init(c_params),
        step=jnp.zeros((), jnp.int32),
        rng=jax.random.PRNGKey(0),
    )
    spec = objectives.LossSpec(name="ppo_clip", hparams=(("dual_clip", 0.0), ("eps_high", 0.2),
                                                        ("eps_low", 0.2)))  # fmt: skip
    update = make_update(
        graphdef_p,
        sgd,
        spec,
        critic_graphdef=c_graphdef,
        critic_optimizer=sgd,
        critic_sigma_ratio=0.75,
        train_policy=False,
    )
    b = _batch()
    mb = {k: v.reshape((n_micro, B // n_micro) + v.shape[1:]) for k, v in b.items()}
    before = jax.tree.map(jnp.copy, c_params)
    new, metrics = update(state, rest_p, c_rest, mb)

    # Reference: numpy targets, cross-entropy of log-softmax, token mean.
    m = b["mask_BxT"]
    probs = np.zeros((B, T, 2 if kind == "bernoulli" else M))
    for i, j in zip(*np.nonzero(m), strict=True):
        y = float(b["returns_BxT"][i, j])
        probs[i, j] = _ref_targets(y) if kind == "hl_gauss" else _ref_control_targets(y, kind)

    def ref_loss(params):
        critic = nnx.merge(c_graphdef, params, c_rest)
        logp = jax.nn.log_softmax(critic.logits(b["tokens_BxT"], b["attention_mask_BxT"]), -1)
        ce = -jnp.sum(jnp.asarray(probs, jnp.float32) * logp, -1)
        return jnp.sum(jnp.where(m, ce, 0.0)) / m.sum()

    want, grads = jax.value_and_grad(ref_loss)(before)
    np.testing.assert_allclose(metrics["value_loss"], want, rtol=1e-5)
    got_step = jax.tree.map(jnp.subtract, before, new.critic_params)  # SGD(1): the gradient
    for g, w in zip(jax.tree.leaves(got_step), jax.tree.leaves(grads), strict=True):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=1e-7)
    assert float(jnp.abs(got_step["head"]["kernel"][...]).max()) > 0


def test_bernoulli_critic_value_is_the_success_probability_on_the_range():
    graphdef, params, rest = _critic_setup(loss="bernoulli")
    critic = nnx.merge(graphdef, params, rest)
    b = _batch()
    critic.head.bias[...] = jnp.array([0.3, -0.4], jnp.float32)
    logits = np.asarray(critic.logits(b["tokens_BxT"], b["attention_mask_BxT"]), np.float64)
    values = np.asarray(critic(b["tokens_BxT"], b["attention_mask_BxT"]))
    assert logits.shape == (B, T, 2)
    q = 1 / (1 + np.exp(logits[..., 0] - logits[..., 1]))  # softmax probability of bin 1
    np.testing.assert_allclose(values[:, 1:], (V_MIN + q * (V_MAX - V_MIN))[:, 1:], atol=1e-6)


def test_config_validates_the_critic_loss():
    c = config_lib.default_config()
    c.critic.loss = "hl_gaus"
    with pytest.raises(ValueError, match="critic.loss = 'hl_gaus'; valid: mse, hl_gauss"):
        config_lib.validate(c)
    c.critic.loss = "hl_gauss"
    c.critic.v_min = 1.0
    with pytest.raises(ValueError, match="critic.v_min = 1.0 must be below"):
        config_lib.validate(c)


@pytest.mark.parametrize("loss", ["mse", "hl_gauss", "bernoulli"])
def test_calibration_metrics_hand_computed(loss):
    from rlvr_jax.rl.critic import calibration_metrics

    # Two rows; row 0 correct. Support [-1, 1] maps v to p = (v + 1) / 2 (mse: p = v).
    values = np.array([[0.0, 0.2, 0.6, 9.0], [0.0, -0.6, 0.4, 0.0]], np.float32)
    mask = np.array([[0, 1, 1, 0], [0, 1, 1, 1]], bool)
    correct = np.array([True, False])
    got = calibration_metrics(values, mask, correct, loss=loss, v_min=-1.0, v_max=1.0)
    p = np.clip(values if loss == "mse" else (values + 1) / 2, 0, 1)
    o = np.array([[1.0] * 4, [0.0] * 4])
    sel = [(0, 1), (0, 2), (1, 1), (1, 2), (1, 3)]
    brier = np.mean([(p[i, j] - o[i, j]) ** 2 for i, j in sel])
    assert got["critic/brier"] == pytest.approx(brier, abs=1e-6)
    first = [(0, 1), (1, 1)]
    assert got["critic/brier_first"] == pytest.approx(
        np.mean([(p[i, j] - o[i, j]) ** 2 for i, j in first]), abs=1e-6
    )
    bins = {}
    for i, j in sel:  # ECE over 10 equal-width bins: Σ_b |Σ o − Σ p| / N
        b = min(int(p[i, j] * 10), 9)
        so, sp = bins.get(b, (0.0, 0.0))
        bins[b] = (so + o[i, j], sp + p[i, j])
    ece = sum(abs(a - b) for a, b in bins.values()) / len(sel)
    assert got["critic/ece"] == pytest.approx(ece, abs=1e-6)


@pytest.mark.slow
def test_hl_gauss_critic_trainer_pulse_and_checkpoint(tmp_path, monkeypatch):
    c = load_experiment("ppo", "pulse")
    c.critic.loss = "hl_gauss"
    c.critic.num_bins = 11
    c.critic.v_min, c.critic.v_max = -0.5, 1.5
    c.eval.at_start = False

    # Random models never pass: parity rewards.
    monkeypatch.setattr(score, "score_rows", parity_score_rows)
    t = trainer_lib.Trainer.from_config(c, tmp_path)
    t.run()
    t.io.close()
    head = t.state.critic_params["head"]
    assert head["kernel"][...].shape == (t.parts.model.config.hidden_size, 11)
    assert head["bias"][...].shape == (11,)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    train = [x for x in map(json.loads, lines) if x["split"] == "train"]
    assert [x["step"] for x in train] == [1, 2]
    # Cross-entropy ≥ the targets' entropy > 0; finite on both steps (warm-up then joint).
    assert all(np.isfinite(x["value_loss"]) and x["value_loss"] > 0 for x in train)
    assert "loss" not in train[0] and np.isfinite(train[1]["loss"])
    # The critic's calibration is logged every step and moves as the critic trains.
    for x in train:
        assert 0 <= x["critic/brier"] <= 1 and 0 <= x["critic/ece"] <= 1
        assert 0 <= x["critic/brier_first"] <= 1 and 0 <= x["critic/ece_first"] <= 1
    assert train[0]["critic/brier"] != train[1]["critic/brier"]

    again = trainer_lib.Trainer.from_config(c, tmp_path)
    state, step = again.io.restore(again.state, again.parts.prompts)
    again.io.close()
    assert step == 2
    for a, b in zip(
        jax.tree.leaves(t.state.critic_params), jax.tree.leaves(state.critic_params), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    critic = again.parts.critic
    values = critic.value_fn(state.critic_params, critic.rest, *_rows(again))
    assert np.all((values >= -0.5) & (values <= 1.5))


def _rows(trainer):
    tok = trainer.parts.tokenizer.encode("1 + 2 =")  # 8 rows: they split over the 8-device mesh
    return np.asarray([tok] * 8, np.int32), np.ones((8, len(tok)), bool)
