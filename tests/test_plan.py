"""Memory plans (rlvr_jax.plan) on 8 fake CPU devices, and the model presets' sizes."""

import importlib.util
import json
import math
from pathlib import Path

import jax
import pytest

from rlvr_jax import plan, sharding
from rlvr_jax.models import presets
from rlvr_jax.rl.build import loss_spec
from rlvr_jax.rl.config import default_config, validate
from rlvr_jax.rl.update import build_optimizer
from rlvr_jax.testing import tiny_config

PAPER_SCALE = Path(__file__).resolve().parents[1] / "experiments" / "paper_scale"

# Published totals (model cards / HF safetensors metadata), in billions.
PUBLISHED_B = {
    "qwen3-0.6b": 0.596,
    "qwen3-1.7b": 1.721,
    "qwen3-4b": 4.022,
    "qwen3-8b": 8.191,
    "qwen2.5-3b": 3.086,
    "qwen2.5-7b": 7.616,
    "qwen2.5-32b": 32.764,
    "qwen2.5-math-1.5b": 1.544,
    "qwen2.5-math-7b": 7.616,
    "deepseek-r1-distill-qwen-1.5b": 1.777,
    "llama-3.1-8b": 8.030,
}


@pytest.mark.parametrize("name", presets.NAMES)
def test_preset_parameter_counts_match_published(name):
    assert presets.preset(name).num_params() / 1e9 == pytest.approx(PUBLISHED_B[name], abs=2e-3)


def test_qwen3_8b_count_by_hand():
    # 36 x (attention 4096·128·(32+32+8+8) + q/k norms 2·128 + MLP 3·4096·12288 + 2 norms 2·4096)
    # + untied embedding and head 2·151936·4096 + final norm 4096.
    layer = 4096 * 128 * 80 + 2 * 128 + 3 * 4096 * 12288 + 2 * 4096
    assert presets.preset("qwen3-8b").num_params() == 36 * layer + 2 * 151936 * 4096 + 4096


def test_preset_names_and_paths():
    assert presets.preset("Qwen3-4B").tie_word_embeddings
    assert presets.preset_for_path("gs://bucket/models/Qwen3-8B/") == "qwen3-8b"
    assert presets.preset_for_path("/m/Qwen2.5-7B-Instruct") == "qwen2.5-7b"
    assert presets.preset_for_path("/m/my-model") is None
    with pytest.raises(ValueError, match="qwen3-8b"):
        presets.preset("qwen4-8b")


def _plan(shape, rules, config=None):
    c = default_config()
    cfg = config or tiny_config()
    optimizer = build_optimizer(1e-6, 10)
    return plan.memory_plan(
        cfg,
        sharding.make_mesh(shape),
        rules,
        optimizer=optimizer,
        spec=loss_spec(c),
        train_rows=8,
        sample_rows=8,
        prompt_len=16,
        max_new_tokens=16,
        layers=None,
    )


@pytest.mark.slow
def test_fsdp_shards_params_and_optimizer_state():
    assert len(jax.devices()) == 8
    cfg = tiny_config(vocab_size=256, hidden_size=128, intermediate_size=256)
    dp, fsdp = _plan((8, 1, 1), "dp", cfg), _plan((1, 8, 1), "fsdp", cfg)
    # Analytic: dp replicates every param (whole model per device, f32); fsdp splits the
    # embed dim of every matrix 8 ways (norm weights and q/k norms stay whole).
    whole = cfg.num_params() * 4
    norms = cfg.num_layers * (2 * cfg.hidden_size + 2 * cfg.head_dim) + cfg.hidden_size
    assert dp.params_bytes == whole
    assert fsdp.params_bytes == ((cfg.num_params() - norms) / 8 + norms) * 4
    assert dp.opt_state_bytes >= 2 * whole  # mu + nu (+ counts)
    assert fsdp.opt_state_bytes < dp.opt_state_bytes / 4
    # XLA: the train step's arguments are the state + batch; they shrink with sharding.
    assert fsdp.train.argument < dp.train.argument / 3
    assert dp.train.argument >= 3 * whole  # params, mu, nu
    assert fsdp.sample.argument < dp.sample.argument
    # KV cache: 8 rows over 8 devices either way: 1 row x 2 layers x (k + v).
    kv = 1 * 2 * 2 * cfg.num_kv_heads * cfg.head_dim * 32 * 4
    assert dp.kv_cache_bytes == fsdp.kv_cache_bytes == kv


def test_extrapolation_is_linear():
    a = plan.Memory(10.0, 2.0, 1.0, 100.0, 5.0)
    b = plan.Memory(20.0, 4.0, 2.0, 160.0, 5.0)
    m = a.extrapolate(b, (2, 4), 36)
    assert (m.argument, m.output, m.alias, m.temp, m.generated_code) == (
        180.0,
        36.0,
        18.0,
        1120.0,
        5.0,
    )
    assert m.peak == 180 + 36 - 18 + 1120 + 5


def test_rows_must_split_over_batch_shards():
    with pytest.raises(ValueError, match="multiple of 8"):
        plan.memory_plan(
            tiny_config(),
            sharding.make_mesh((1, 8, 1)),
            "fsdp",
            optimizer=build_optimizer(1e-6, 10),
            spec=loss_spec(default_config()),
            train_rows=4,
            sample_rows=8,
            prompt_len=16,
            max_new_tokens=16,
        )


def _experiment(name):
    spec = importlib.util.spec_from_file_location(name, PAPER_SCALE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "name, preset, chips", [("qwen3_8b_grpo", "qwen3-8b", 64), ("qwen3_4b_grpo", "qwen3-4b", 32)]
)
@pytest.mark.parametrize("variant", ["", "dapo"])
def test_paper_scale_configs_validate_and_name_their_model(name, preset, chips, variant):
    c = _experiment(name).get_config(variant)
    validate(c)
    assert plan.policy_config(c) == presets.preset(preset)
    assert math.prod(c.mesh.shape) == chips
    rows = c.data.prompts_per_step * c.data.group_size // c.train.num_minibatches
    assert rows == 512 and c.train.micro_batch_size % chips == 0
    assert json.loads(c.task.options)["path"]


def _spec(loss):
    c = default_config()
    c.loss.name = loss
    return loss_spec(c)


def test_loss_inputs_beyond_the_standard_fields():
    cfg = tiny_config()
    make = lambda shape, dtype: (shape, dtype)  # noqa: E731
    assert plan._loss_inputs(_spec("ppo_clip"), cfg, 8, 32, 16, make) == {}
    topk = plan._loss_inputs(_spec("opd_topk_kl"), cfg, 8, 32, 16, make)
    assert topk == {
        "teacher_topk_logps_BxTxK": ((1, 8, 32, 16), jax.numpy.float32),
        "teacher_topk_ids_BxTxK": ((1, 8, 32, 16), jax.numpy.int32),
        "correct_B": ((1, 8), jax.numpy.bool_),
    }
    full = plan._loss_inputs(_spec("opd_full_kl"), cfg, 8, 32, 16, make)
    # hidden_BxTxD and the kernels are the update's own; the teacher's hidden states are input
    assert full["teacher_hidden_BxTxD"] == ((1, 8, 32, cfg.hidden_size), jax.numpy.float32)
    assert set(full) == {"teacher_hidden_BxTxD", "correct_B"}


@pytest.mark.slow
def test_plan_of_a_top_k_distillation_loss_holds_its_teacher_inputs():
    cfg = tiny_config()
    mesh = sharding.make_mesh((1, 8, 1))
    kw = dict(
        optimizer=build_optimizer(1e-6, 10),
        train_rows=8,
        sample_rows=8,
        prompt_len=16,
        max_new_tokens=16,
        layers=None,
        topk=16,
    )
    base = plan.memory_plan(cfg, mesh, "fsdp", spec=_spec("ppo_clip"), **kw)
    topk = plan.memory_plan(cfg, mesh, "fsdp", spec=_spec("opd_topk_kl"), **kw)
    # one row per device: 32 tokens x 16 (f32 log-probs + int32 ids) + one bool verdict
    extra = topk.train.argument - base.train.argument
    assert 32 * 16 * 8 <= extra <= 32 * 16 * 8 + 64


@pytest.mark.slow
def test_sft_stage_plan_is_its_train_step_sharded_on_the_stage_mesh():
    from rlvr_jax.pipeline import execution
    from rlvr_jax.pipeline.config import add_stage, pipeline_config

    c = pipeline_config()
    c.model.source = "random"  # plan.policy_config: the tiny test model
    run = execution.add_execution(add_stage(c, "sft", "sft").run)
    run.train.batch_size, run.data.max_new_tokens = 8, 16
    plans = {}
    for shape in ((1, 1, 1), (1, 8, 1)):
        run.mesh.shape = shape
        plans[shape] = plan.sft_plan_from_config(run, c, prompt_len=16, layers=None)
    one, eight = plans[(1, 1, 1)], plans[(1, 8, 1)]
    assert (eight.train_rows, eight.train_length, eight.sample_rows) == (8, 32, 0)
    assert eight.sample.peak == 0 and eight.kv_cache_bytes == 0
    assert eight.params_bytes < one.params_bytes / 4  # fsdp splits the matrices 8 ways
    assert 0 < eight.train.argument < one.train.argument / 3  # params, mu, nu and rows
