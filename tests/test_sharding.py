"""Sharding on 8 fake CPU devices: rules give the expected layouts, and sharded = unsharded.

The equality tests run the RL update and the sampler on meshes (data, fsdp,
tensor) = (8,1,1), (1,8,1), (2,2,2), (1,4,2) under the "fsdp_tp" rules and
compare with the same programs on one device. Gradients are read exactly by a
test "optimizer" that stores them as its state (and leaves params unchanged).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from rlvr_jax import sharding
from rlvr_jax.models import init_model, sharded_init
from rlvr_jax.models.lora import add_lora
from rlvr_jax.models.transformer import Transformer
from rlvr_jax.rl import objectives
from rlvr_jax.rl.critic import Critic
from rlvr_jax.rl.update import (
    RLState,
    build_optimizer,
    make_scorer,
    make_update,
    make_value_fn,
)
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.testing import tiny_config

# D=64, F=128, V=128, N*H=96, K*H=48: every sharded dim divides the mesh axes used.
CFG = tiny_config(num_layers=1)
MESHES = [(8, 1, 1), (1, 8, 1), (2, 2, 2), (1, 4, 2)]
RULES = "fsdp_tp"
SPEC = objectives.LossSpec(
    name="ppo_clip",
    hparams=(("dual_clip", 0.0), ("eps_high", 0.28), ("eps_low", 0.2)),
    aggregation="seq-mean-token-mean",
)
ROWS, T = 8, 12
PROMPTS = [[1, 5, 6, 7], [1, 9, 10], [1, 20, 21, 22, 23], [1, 30]]
SAMPLING = SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=6, n=2, stop_token_ids=(2,))

# A test "optimizer" whose state is the last gradient: exact gradients, sharded like params.
CAPTURE = optax.GradientTransformation(
    lambda p: jax.tree.map(jnp.zeros_like, p),
    lambda g, s, p=None: (jax.tree.map(jnp.zeros_like, g), g),
)


def _abstract(build=lambda: Transformer(CFG, rngs=nnx.Rngs(0))):
    return nnx.state(nnx.eval_shape(build))


def _flat(tree):
    return {sharding._path_str(p): x for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _device0_bytes(tree):
    dev = jax.devices()[0]
    shards = [s for x in jax.tree.leaves(tree) for s in x.addressable_shards]
    return sum(s.data.nbytes for s in shards if s.device == dev)


def _nbytes(tree):
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))


def _batch():
    rng = np.random.default_rng(0)
    mask = np.zeros((ROWS, T), bool)
    mask[:, 6:] = True
    mask[3, 9:] = False
    attn = np.ones((ROWS, T), bool)
    attn[::2, :3] = False  # left padding on half the rows
    b = {
        "tokens_BxT": rng.integers(3, 120, (ROWS, T)).astype(np.int32),
        "attention_mask_BxT": attn,
        "mask_BxT": mask,
        "old_logps_BxT": np.where(mask, rng.normal(-4.0, 0.2, (ROWS, T)), 0).astype(np.float32),
        "adv_BxT": np.where(mask, rng.normal(size=(ROWS, 1)), 0).astype(np.float32),
    }
    return {k: v[None] for k, v in b.items()}  # one micro-batch: [1, rows, T]


def _state(params, opt):
    return RLState(
        params=jax.tree.map(jnp.copy, params),
        opt_state=opt.init(params),
        critic_params=None,
        critic_opt_state=None,
        step=jnp.zeros((), jnp.int32),
        rng=jax.random.PRNGKey(0),
    )


# ---------------------------------------------------------------- layouts (no compiles)
def test_make_mesh_resolves_the_rest_and_rejects_bad_shapes():
    mesh = sharding.make_mesh((2, -1, 1))
    assert dict(mesh.shape) == {"data": 2, "fsdp": 4, "tensor": 1}
    assert sharding.MeshConfig(shape=(1, 1, -1)).make_mesh().shape["tensor"] == 8
    for bad in [(3, -1, 1), (2, 2, 1), (-1, -1, 1), (8, 1)]:
        with pytest.raises(ValueError, match="mesh shape"):
            sharding.make_mesh(bad)
    with pytest.raises(ValueError, match="presets"):
        sharding.resolve_rules("zero3")
    with pytest.raises(ValueError, match="unknown mesh axes"):
        sharding.resolve_rules((("embed", "model"),))


def test_rule_presets_give_the_expected_parameter_specs():
    mesh = sharding.make_mesh((2, 2, 2))
    want = {
        "dp": dict(q=P(), down=P(), emb=P(), head=P()),
        "fsdp": dict(q=P("fsdp"), down=P(None, "fsdp"), emb=P(None, "fsdp"), head=P("fsdp")),
        "tp": dict(q=P(None, "tensor"), down=P("tensor"), emb=P("tensor"), head=P(None, "tensor")),
        "fsdp_tp": dict(
            q=P("fsdp", "tensor"),
            down=P("tensor", "fsdp"),
            emb=P("tensor", "fsdp"),
            head=P("fsdp", "tensor"),
        ),
    }
    for name, specs in want.items():
        sh = _flat(sharding.param_shardings(_abstract(), mesh, name))
        assert sh["layers/0/self_attn/q_proj/kernel"].spec == specs["q"], name
        assert sh["layers/0/mlp/down_proj/kernel"].spec == specs["down"], name
        assert sh["embed_tokens"].spec == specs["emb"], name
        assert sh["lm_head"].spec == specs["head"], name
        assert sh["norm/weight"].spec == P() and sh["layers/0/self_attn/q_norm/weight"].spec == P()


def test_specs_skip_indivisible_dims_and_use_each_mesh_axis_once():
    mesh = sharding.make_mesh((2, 1, 4))
    # 6 kv-head columns do not split over tensor=4: left whole.
    assert sharding.logical_to_spec(("embed", "kv_heads"), (64, 6), mesh, "tp") == P()
    assert sharding.logical_to_spec(("embed", "kv_heads"), (64, 8), mesh, "tp") == P(None, "tensor")
    # Activations: batch takes fsdp first, so embed (also -> fsdp) stays whole.
    mesh = sharding.make_mesh((2, 2, 2))
    spec = sharding.logical_to_spec(("batch", "length", "embed"), (8, 5, 64), mesh, "fsdp")
    assert spec == P(("data", "fsdp"))
    # 2 rows over data x fsdp = 4: only the axes that divide are used.
    assert sharding.logical_to_spec(("batch", None), (2, 3), mesh, "fsdp") == P("data")


def test_every_parameter_has_logical_axes_and_unknown_ones_are_errors():
    def adapted():
        model = Transformer(tiny_config("qwen2", num_layers=1), rngs=nnx.Rngs(0))
        add_lora(model, rank=4, alpha=8.0, rngs=nnx.Rngs(1))
        return Critic(model)

    mesh = sharding.make_mesh((1, 2, 4))
    sh = _flat(sharding.param_shardings(_abstract(adapted), mesh, RULES))
    assert sh["trunk/layers/0/self_attn/q_proj/lora/a"].spec == P("fsdp")
    assert sh["trunk/layers/0/self_attn/q_proj/lora/b"].spec == P(None, "tensor")
    assert sh["trunk/layers/0/self_attn/k_proj/bias"].spec == P("tensor")
    assert sh["trunk/layers/0/mlp/down_proj/lora/b"].spec == P(None, "fsdp")
    assert sh["head/kernel"].spec == P("fsdp") and sh["head/bias"].spec == P()
    with pytest.raises(ValueError, match="mystery/w"):
        sharding.param_shardings({"mystery": {"w": jnp.zeros((4, 4))}}, mesh, RULES)


def test_rl_state_with_adamw_and_critic_is_sharded_like_its_params():
    def build():
        policy = Transformer(CFG, rngs=nnx.Rngs(0))
        return policy, Critic(Transformer(CFG, rngs=nnx.Rngs(1)))

    mesh = sharding.make_mesh((2, 2, 2))
    opt = build_optimizer(1e-3, 10, weight_decay=0.1)

    def state():
        policy, critic = build()
        params, cparams = nnx.state(policy, nnx.Param), nnx.state(critic, nnx.Param)
        st = _state(params, opt)
        return st.replace(critic_params=cparams, critic_opt_state=opt.init(cparams))

    sh = sharding.rl_state_shardings(jax.eval_shape(state), mesh, RULES)
    flat = _flat(sh)
    q = P("fsdp", "tensor")
    assert flat["params/layers/0/self_attn/q_proj/kernel"].spec == q
    moments = [k for k in flat if k.endswith("q_proj/kernel") and ("mu/" in k or "nu/" in k)]
    assert len(moments) == 4  # policy and critic, mu and nu
    assert all(flat[k].spec == q for k in moments)
    assert flat["critic_params/head/kernel"].spec == P("fsdp")
    counts = [k for k in flat if k.endswith("count")]
    assert counts and all(flat[k].spec == P() for k in counts)
    assert flat["step"].spec == P() and flat["rng"].spec == P()


# ------------------------------------------------------------------- sharded = unsharded
@pytest.fixture(scope="module")
def reference():
    model = init_model(CFG, seed=0)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    mb = _batch()
    new, metrics = make_update(graphdef, CAPTURE, SPEC)(_state(params, CAPTURE), rest, None, mb)
    rollout = Sampler(model).sample(PROMPTS, SAMPLING, jax.random.PRNGKey(3))
    return dict(
        model=model,
        graphdef=graphdef,
        params=params,
        rest=rest,
        mb=mb,
        grads=jax.device_get(new.opt_state),
        loss=float(metrics["loss"]),
        grad_norm=float(metrics["grad_norm"]),
        rollout=rollout,
    )


@pytest.mark.parametrize("shape", MESHES, ids=str)
def test_update_matches_single_device_and_state_is_sharded(reference, shape):
    ref = reference
    mesh = sharding.make_mesh(shape)
    state = sharding.shard_rl_state(_state(ref["params"], CAPTURE), mesh, RULES)
    update = make_update(ref["graphdef"], CAPTURE, SPEC, mesh=mesh, rules=RULES)
    new, metrics = update(state, ref["rest"], None, ref["mb"])

    np.testing.assert_allclose(float(metrics["loss"]), ref["loss"], rtol=1e-5)
    np.testing.assert_allclose(float(metrics["grad_norm"]), ref["grad_norm"], rtol=1e-5)
    got, want = _flat(new.opt_state), _flat(ref["grads"])
    assert got.keys() == want.keys()
    for k in want:
        # rtol 1e-5, plus 1e-5 of the tensor's largest |g| so entries that cancel
        # to ~0 compare at the tensor's scale (observed: < 1e-6 of it).
        scale = np.abs(want[k]).max()
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5 * scale, err_msg=k)
    assert jax.tree.leaves(state.params)[0].is_deleted()  # the input state was donated

    # Params and optimizer state keep their shardings and really are split.
    q = "layers/0/self_attn/q_proj/kernel"
    want_q = sharding.logical_to_spec(("embed", "heads"), (64, 96), mesh, RULES)
    assert _flat(new.params)[q].sharding.spec == want_q == _flat(new.opt_state)[q].sharding.spec
    split = shape[1] * shape[2]  # fsdp x tensor: what params are split over
    total = _nbytes(new.params)
    for tree in (new.params, new.opt_state):
        if split == 1:  # pure data parallel: every device holds everything
            assert _device0_bytes(tree) == total
        else:  # norms stay whole: ~3% over 1/split at this tiny size
            assert _device0_bytes(tree) <= 1.05 * total / split


@pytest.mark.parametrize("shape", MESHES, ids=str)
def test_sampler_matches_single_device(reference, shape):
    ref = reference
    mesh = sharding.make_mesh(shape)
    params = sharding.shard_state(ref["params"], mesh, RULES)
    model = nnx.merge(ref["graphdef"], params, ref["rest"])
    got = Sampler(model, mesh=mesh, rules=RULES).sample(PROMPTS, SAMPLING, jax.random.PRNGKey(3))
    want = ref["rollout"]
    np.testing.assert_array_equal(got.tokens, want.tokens)
    np.testing.assert_array_equal(got.response_mask, want.response_mask)
    np.testing.assert_allclose(got.logps, want.logps, rtol=1e-5, atol=1e-5)
    assert want.response_mask.sum() > len(want.tokens)  # it sampled more than one token a row


def test_init_sharded_builds_params_in_their_shards(reference):
    mesh = sharding.make_mesh((1, 8, 1))
    graphdef, init = sharded_init.sharded_initializer(CFG, mesh, RULES, seed=0)
    total = _nbytes(_abstract())
    # XLA's plan for the initialiser: each device's outputs and scratch are a
    # fraction of the model, so no device ever holds the whole thing.
    mem = init.lower().compile().memory_analysis()
    assert mem.output_size_in_bytes < total / 4
    assert mem.temp_size_in_bytes < total / 2
    model = sharded_init.init_sharded(CFG, mesh, RULES, seed=0)
    got, want = _flat(nnx.state(model)), _flat(nnx.state(reference["model"]))
    assert got.keys() == want.keys()
    for k in want:
        # jit vs eager initialisers differ by float rounding only (a few ulp).
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-8, err_msg=k)
    emb = got["embed_tokens"]
    assert emb.sharding.spec == P(None, "fsdp")
    assert {s.data.shape for s in emb.addressable_shards} == {(128, 8)}
    assert math.isclose(_device0_bytes(nnx.state(model)), total / 8, rel_tol=0.05)


@pytest.mark.slow
def test_adamw_update_with_critic_and_scorers_match_single_device(reference):
    ref = reference
    cg, cparams, crest = nnx.split(Critic(init_model(CFG, seed=1)), nnx.Param, ...)
    opt = build_optimizer(1e-3, 10, weight_decay=0.1)
    mb = dict(ref["mb"])
    rng = np.random.default_rng(1)
    mb["old_values_BxT"] = rng.normal(size=mb["mask_BxT"].shape).astype(np.float32)
    mb["returns_BxT"] = rng.normal(size=mb["mask_BxT"].shape).astype(np.float32)

    def state():
        st = _state(ref["params"], opt)
        return st.replace(
            critic_params=jax.tree.map(jnp.copy, cparams), critic_opt_state=opt.init(cparams)
        )

    kw = dict(critic_graphdef=cg, critic_optimizer=opt, value_clip=0.2)
    want, want_m = make_update(ref["graphdef"], opt, SPEC, **kw)(state(), ref["rest"], crest, mb)
    mesh = sharding.make_mesh((1, 4, 2))
    update = make_update(ref["graphdef"], opt, SPEC, mesh=mesh, rules=RULES, **kw)
    got, got_m = update(sharding.shard_rl_state(state(), mesh, RULES), ref["rest"], crest, mb)
    for name in ("loss", "grad_norm", "value_loss", "critic_grad_norm"):
        np.testing.assert_allclose(float(got_m[name]), float(want_m[name]), rtol=1e-5, err_msg=name)
    # Adam's moments after one step are (1-b1) g and (1-b2) g^2: compare them at the
    # gradients' tolerance; they must be split like their params.
    got_o = _flat(got.opt_state) | _flat(got.critic_opt_state)
    want_o = _flat(want.opt_state) | _flat(want.critic_opt_state)
    for k in want_o:
        scale = np.abs(want_o[k]).max()
        np.testing.assert_allclose(got_o[k], want_o[k], rtol=1e-5, atol=1e-5 * scale, err_msg=k)
    q = [k for k in got_o if k.endswith("q_proj/kernel")]
    assert len(q) == 4 and all(got_o[k].sharding.spec == P("fsdp", "tensor") for k in q)
    assert _device0_bytes(got.critic_opt_state) <= 1.05 * _nbytes(got.critic_opt_state) / 8

    # Reference scoring and critic values, sharded.
    tokens, attn = ref["mb"]["tokens_BxT"][0], ref["mb"]["attention_mask_BxT"][0]
    for make, g, p, r in [
        (make_scorer, ref["graphdef"], ref["params"], ref["rest"]),
        (make_value_fn, cg, cparams, crest),
    ]:
        want_v = make(g)(p, r, tokens, attn)
        got_v = make(g, mesh=mesh, rules=RULES)(
            sharding.shard_state(p, mesh, RULES), r, tokens, attn
        )
        assert got_v.sharding.spec == P(("data", "fsdp"))  # rows split 4 ways
        assert got_v.addressable_shards[0].data.shape == (ROWS // 4, T)
        np.testing.assert_allclose(got_v, want_v, rtol=1e-5, atol=1e-6)


def test_sharded_update_rejects_rows_that_do_not_split_over_the_mesh(reference):
    ref = reference
    mesh = sharding.make_mesh((2, 2, 2))
    update = make_update(ref["graphdef"], CAPTURE, SPEC, mesh=mesh, rules=RULES)
    mb = {k: v[:, :6] for k, v in ref["mb"].items()}  # 6 rows over 4 batch shards
    with pytest.raises(ValueError, match="6 rows per micro-batch"):
        update(_state(ref["params"], CAPTURE), ref["rest"], None, mb)
