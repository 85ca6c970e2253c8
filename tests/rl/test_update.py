import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from rlvr_jax.models import init_model
from rlvr_jax.models.scoring import token_logps
from rlvr_jax.rl import objectives
from rlvr_jax.rl.critic import Critic
from rlvr_jax.rl.update import RLState, build_optimizer, make_update
from rlvr_jax.testing import tiny_config

B, T = 8, 10


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(3, 120, (B, T)).astype(np.int32)
    attn = np.ones((B, T), bool)
    attn[: B // 2, :2] = False  # left padding on half the rows
    mask = np.zeros((B, T), bool)
    mask[:, 5:] = True
    mask[1, 7:] = False
    return {
        "tokens_BxT": tokens,
        "attention_mask_BxT": attn,
        "mask_BxT": mask,
        "old_logps_BxT": np.where(mask, rng.normal(-4.0, 0.2, (B, T)), 0).astype(np.float32),
        "adv_BxT": np.where(mask, rng.normal(size=(B, 1)), 0).astype(np.float32),
        "old_values_BxT": np.where(mask, rng.normal(size=(B, T)), 0).astype(np.float32),
        "returns_BxT": np.where(mask, rng.normal(size=(B, T)), 0).astype(np.float32),
    }


def _setup(critic=False):
    model = init_model(tiny_config(), seed=0)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    opt = build_optimizer(1e-2, 10, clip_norm=0.0)
    kw = {}
    state = dict(critic_params=None, critic_opt_state=None)
    critic_rest = None
    if critic:
        c_graphdef, c_params, critic_rest = nnx.split(
            Critic(init_model(tiny_config(), seed=1)), nnx.Param, ...
        )
        c_opt = build_optimizer(1e-2, 10, clip_norm=0.0)
        # A wide value clip: the plain squared error, which must go down.
        kw = dict(critic_graphdef=c_graphdef, critic_optimizer=c_opt, value_clip=100.0)
        state = dict(critic_params=c_params, critic_opt_state=c_opt.init(c_params))
    st = RLState(
        params=params,
        opt_state=opt.init(params),
        step=jnp.zeros((), jnp.int32),
        rng=jax.random.PRNGKey(0),
        **state,
    )
    return graphdef, rest, critic_rest, opt, kw, st


def _stack(batch, n_micro):
    return {k: v.reshape((n_micro, B // n_micro) + v.shape[1:]) for k, v in batch.items()}


def _copy(st):
    return jax.tree.map(jnp.copy, st)


SPEC = objectives.LossSpec(
    name="ppo_clip",
    hparams=(("dual_clip", 0.0), ("eps_high", 0.28), ("eps_low", 0.2)),
    aggregation="seq-mean-token-mean",
)


def test_gradient_accumulation_matches_one_batch():
    graphdef, rest, c_rest, _, kw, st = _setup()
    # Plain SGD: the parameter change is the gradient itself (Adam's first step is
    # ±lr wherever g != 0, which would hide or amplify rounding in tiny gradients).
    opt = optax.sgd(1.0)
    st = st.replace(opt_state=opt.init(st.params))
    update = make_update(graphdef, opt, SPEC)
    batch = _batch()
    one, m1 = update(_copy(st), rest, c_rest, _stack(batch, 1))
    four, m4 = update(_copy(st), rest, c_rest, _stack(batch, 4))
    np.testing.assert_allclose(m1["loss"], m4["loss"], rtol=1e-5)
    np.testing.assert_allclose(m1["grad_norm"], m4["grad_norm"], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(one.params), jax.tree.leaves(four.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert m1["token_sums"]["tokens"] == batch["mask_BxT"].sum()


def test_update_matches_a_hand_written_loss_gradient():
    graphdef, rest, c_rest, opt, kw, st = _setup()
    batch = _batch(1)
    update = make_update(graphdef, opt, SPEC)
    _, metrics = update(_copy(st), rest, c_rest, _stack(batch, 2))

    def loss(params):
        lp = token_logps(
            nnx.merge(graphdef, params, rest), batch["tokens_BxT"], batch["attention_mask_BxT"]
        )
        m = batch["mask_BxT"]
        rho = jnp.exp(lp - batch["old_logps_BxT"])
        a = batch["adv_BxT"]
        obj = jnp.minimum(rho * a, jnp.clip(rho, 0.8, 1.28) * a)
        per_seq = jnp.sum(jnp.where(m, -obj, 0), 1) / m.sum(1)
        return per_seq.mean()

    want_loss, grads = jax.value_and_grad(loss)(st.params)
    np.testing.assert_allclose(metrics["loss"], want_loss, rtol=1e-5)
    gnorm = np.sqrt(sum(float(jnp.sum(g**2)) for g in jax.tree.leaves(grads)))
    np.testing.assert_allclose(metrics["grad_norm"], gnorm, rtol=1e-4)


def test_critic_learns_and_policy_can_be_frozen():
    graphdef, rest, c_rest, opt, kw, st = _setup(critic=True)
    frozen = make_update(graphdef, opt, SPEC, train_policy=False, **kw)
    batch = _stack(_batch(2), 2)
    before = _copy(st.params)
    losses = []
    for _ in range(8):
        st, metrics = frozen(st, rest, c_rest, batch)
        losses.append(float(metrics["value_loss"]))
    assert losses[-1] < 0.5 * losses[0]
    assert "loss" not in metrics
    for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(st.params), strict=True):
        np.testing.assert_array_equal(a, b)


def test_optimizer_schedules():
    params = {"w": jnp.ones((2, 2)), "b": jnp.ones((2,))}
    grads = jax.tree.map(jnp.ones_like, params)
    for schedule, warmup, want in [("constant", 0, [0.1, 0.1]), ("constant", 2, [0.0, 0.05])]:
        opt = build_optimizer(0.1, 10, warmup_steps=warmup, schedule=schedule, clip_norm=0.0)
        s = opt.init(params)
        steps = []
        for _ in range(2):
            upd, s = opt.update(grads, s, params)
            steps.append(float(-upd["b"][0]))  # Adam's first step is ±lr (bias corrected)
        np.testing.assert_allclose(steps, want, rtol=1e-4, atol=1e-7)


def _gapo_spec(name="gapo"):
    hp = dict(objectives.POLICY_LOSSES.get(name).defaults)
    return objectives.LossSpec(name=name, hparams=tuple(sorted(hp.items())))


def test_gapo_gradient_does_not_depend_on_the_micro_batch_split():
    """GAPO's Ā is the whole minibatch's (computed before the micro-batches), so the
    clip bounds and the gradient are the same for 1 or 4 micro-batches."""
    import rlvr_jax.rl.methods  # noqa: F401  (registers gapo)

    graphdef, rest, c_rest, _, kw, st = _setup()
    opt = optax.sgd(1.0)
    st = st.replace(opt_state=opt.init(st.params))
    batch = _batch(3)
    # |A| grows along the rows: each micro-batch's own mean |A| differs from the whole's.
    batch["adv_BxT"] = np.where(batch["mask_BxT"], np.linspace(-2, 3, B)[:, None], 0)
    batch["adv_BxT"] = batch["adv_BxT"].astype(np.float32)
    batch["group_success_B"] = np.full(B, 0.5, np.float32)
    for name in ("gapo", "gapo_gspo"):
        update = make_update(graphdef, opt, _gapo_spec(name))
        one, m1 = update(_copy(st), rest, c_rest, _stack(batch, 1))
        four, m4 = update(_copy(st), rest, c_rest, _stack(batch, 4))
        np.testing.assert_allclose(m1["loss"], m4["loss"], rtol=1e-5, err_msg=name)
        np.testing.assert_allclose(
            m1["token_sums"]["eps_high"], m4["token_sums"]["eps_high"], rtol=1e-5
        )
        for a, b in zip(jax.tree.leaves(one.params), jax.tree.leaves(four.params), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)
    sums = m1["token_sums"]
    assert sums["clip_high"] + sums["clip_low"] > 0  # the bounds matter here


def test_gapo_logs_clip_rates_by_group_success():
    import rlvr_jax.rl.methods  # noqa: F401  (registers gapo)

    spec = _gapo_spec()
    adv_B = np.array([1.0, -1.0, 2.0, -0.5], np.float32)  # Ā = 1.125
    rho_B = np.array([1.3, 0.7, 1.3, 0.95], np.float32)
    # ε_i = clip(0.2·|A_i| / Ā, 0.1, 0.5) = .178, .178, .356, .1: rows 0 (ρ > 1.178) and
    # 1 (ρ < .822) are clipped, rows 2 (ρ < 1.356) and 3 (ρ > .9) are not.
    mb = {
        "mask_BxT": np.ones((4, 3), bool),
        "old_logps_BxT": np.full((4, 3), -2.0, np.float32),
        "adv_BxT": np.repeat(adv_B[:, None], 3, 1),
        "group_success_B": np.array([0.25, 0.25, 0.875, 0.875], np.float32),
    }
    logps = mb["old_logps_BxT"] + np.log(rho_B)[:, None]
    minibatch = objectives.minibatch_stats(spec, mb)
    np.testing.assert_allclose(minibatch["scale"], 1.125, rtol=1e-6)
    _, sums = objectives.policy_loss(spec, logps, mb, 1.0, minibatch=minibatch)
    want = {
        "pos_pass0-25": (3, 3),  # (tokens, clipped): row 0
        "neg_pass0-25": (3, 3),  # row 1
        "pos_pass75-100": (3, 0),  # row 2
        "neg_pass75-100": (3, 0),  # row 3
        "pos_pass25-50": (0, 0),
        "neg_pass50-75": (0, 0),
    }
    for subset, (tokens, clipped) in want.items():
        side = "high" if subset.startswith("pos") else "low"
        assert float(sums[objectives.SUBSETS][subset]["tokens"]) == tokens, subset
        assert float(sums[objectives.SUBSETS][subset][f"clip_{side}_frac"]) == clipped, subset


def test_grad_split_measures_the_outcome_and_dense_directions_by_hand():
    """grad_split: ‖−∇ Σ A^out ℓ / N‖ and ‖−∇ Σ (A − A^out) ℓ / N‖, checked against jax.grad
    on the whole batch; a dense term that is 3 × the outcome advantages gives ratio 3, and
    the update itself is the one without the split."""
    graphdef, rest, c_rest, opt, kw, st = _setup()
    batch = _batch(2)
    rng = np.random.default_rng(5)
    outcome = batch["adv_BxT"]
    dense = np.where(batch["mask_BxT"], rng.normal(size=(B, T)), 0).astype(np.float32)
    split = make_update(graphdef, opt, SPEC, grad_split=True)
    plain = make_update(graphdef, opt, SPEC)

    def norm(adv):
        def loss(params):
            lp = token_logps(
                nnx.merge(graphdef, params, rest), batch["tokens_BxT"], batch["attention_mask_BxT"]
            )
            m = batch["mask_BxT"]
            return -jnp.sum(jnp.where(m, adv * lp, 0)) / m.sum()

        g = jax.grad(loss)(st.params)
        return np.sqrt(sum(float(jnp.sum(x**2)) for x in jax.tree.leaves(g)))

    b = dict(batch, adv_BxT=outcome + dense, outcome_adv_BxT=outcome)
    new, m = split(_copy(st), rest, c_rest, _stack(b, 2))
    np.testing.assert_allclose(m["grad_split/outcome_norm"], norm(outcome), rtol=1e-4)
    np.testing.assert_allclose(m["grad_split/dense_norm"], norm(dense), rtol=1e-4)
    np.testing.assert_allclose(
        m["grad_split/dense_over_outcome"], norm(dense) / norm(outcome), rtol=1e-4
    )
    ref, m0 = plain(_copy(st), rest, c_rest, _stack(b, 2))
    assert not any(k.startswith("grad_split/") for k in m0)
    np.testing.assert_allclose(m["grad_norm"], m0["grad_norm"], rtol=1e-6)
    for x, y in zip(jax.tree.leaves(new.params), jax.tree.leaves(ref.params), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)
    b3 = dict(batch, adv_BxT=4 * outcome, outcome_adv_BxT=outcome)
    _, m3 = split(_copy(st), rest, c_rest, _stack(b3, 1))
    np.testing.assert_allclose(m3["grad_split/dense_over_outcome"], 3.0, rtol=1e-4)
