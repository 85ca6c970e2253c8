"""Every experiment file's `:paper` variant: loads, validates, names a paper-size model.

No network and no checkpoint: the model path is a placeholder, so the architecture
comes from the preset its directory name names (`plan.policy_config`), and any
socket connection fails the test.
"""

import importlib.util
import json
import math
import socket
from pathlib import Path

import pytest

from rlvr_jax import plan
from rlvr_jax.models import presets
from rlvr_jax.rl import paper_scale, signals
from rlvr_jax.rl.config import validate

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
# Pipeline configs (rlvr_jax.pipeline.config, stages of SFT/DPO/OPD/RL/merge), checked
# stage by stage (`_check_pipeline`), and the variant of each that has every stage (the
# one scripts/plan.py plans).
PIPELINES = {
    "seq_opd_rl/pipeline": "all,paper",
    "rstg/rstg_sft": "paper",
    "fusion/fusion": "paper",
    "dpo/dpo": "staged,paper",
}
# Already paper-size configs (their variants are "" and "dapo").
PAPER_SCALE = {"paper_scale/qwen3_8b_grpo", "paper_scale/qwen3_4b_grpo"}
# `:paper` variants that plan but cannot run as they stand, and why (also in their docstring).
NOT_RUNNABLE = {"cliff/cliff": "the judge locator loads warm-start judges only"}
TEACHER_SIGNALS = ("teacher", "teacher_hidden", "teacher_topk")
# `:paper` variants the trainer refuses on a multi-host slice (rl/parts.check_processes),
# as docs/tpu_pods.md lists them: none since LSPO's scaffold runs multi-process.
MULTI_HOST_PENDING: dict[str, str] = {}
V5P_CHIPS_PER_HOST = 4


def _files():
    names = sorted(
        f"{p.parent.name}/{p.stem}"
        for p in EXPERIMENTS.glob("*/*.py")
        if p.stem != "repro" and "def get_config" in p.read_text()
    )
    return [n for n in names if n not in set(PIPELINES) | PAPER_SCALE]


def _module(name):
    path = EXPERIMENTS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name.replace("/", "."), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def offline(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a :paper config touched the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)


def test_every_method_file_is_covered():
    files = _files()
    assert len(files) >= 45 and "gar/gar" in files and "baselines/dapo" in files
    for name in set(PIPELINES) | PAPER_SCALE | set(NOT_RUNNABLE):
        assert (EXPERIMENTS / f"{name}.py").is_file(), name


def _check(name, c):
    validate(c)
    assert c.is_locked
    assert c.model.source == "pretrained" and c.model.path.startswith("/path/to/"), name
    assert not Path(c.model.path).exists()  # a placeholder: nothing is read
    preset = presets.preset_for_path(c.model.path)
    assert preset is not None, (name, c.model.path)
    cfg = plan.policy_config(c)
    assert cfg == presets.preset(preset)
    chips = paper_scale.chips_for(preset)
    shards = c.mesh.shape[0] * c.mesh.shape[1]  # data x fsdp; the rest is tensor
    assert math.prod(c.mesh.shape) == chips and c.train.micro_batch_size == shards
    assert (c.model.param_dtype, c.model.dtype) == ("float32", "bfloat16")
    assert c.model.scan_layers and c.model.remat == "block" and c.model.attention == "pallas"
    assert c.rollout.max_new_tokens + paper_scale.PROMPT_LEN <= cfg.max_position_embeddings
    assert c.rollout.max_new_tokens >= 256 and c.data.group_size >= 8
    if c.task.name == "math_file":
        assert json.loads(c.task.options)["path"] == paper_scale.DATA_PATH
        # The paper benchmarks ride along with the evaluations (placeholder data path).
        assert (c.eval.suite, c.eval.suite_data) == ("math", paper_scale.EVAL_DATA_PATH)
        assert c.eval.suite_n_samples == 16 and c.eval.suite_every % c.eval.every == 0
    used = signals.signal_names(c)
    for signal in TEACHER_SIGNALS:
        if signal in used:  # a warm-start teacher has another tokenizer than the policy
            t = c.score[signal]
            assert t.source in ("pretrained", "hint"), (name, signal, t.source)
            assert t.source == "hint" or t.path.startswith("/path/to/")
    if name not in NOT_RUNNABLE:
        assert not ("first_mistake" in used and c.score.first_mistake.locator == "judge")


def _check_pipeline(name, c):
    """A pipeline's `:paper`: a paper-size base, every trainable stage on the paper mesh."""
    from rlvr_jax.pipeline import execution
    from rlvr_jax.pipeline.config import stage_names
    from rlvr_jax.pipeline.config import validate as validate_pipeline

    validate_pipeline(c)
    assert c.is_locked and c.model.source == "pretrained", name
    preset = presets.preset_for_path(c.model.path)
    assert preset is not None and not Path(c.model.path).exists(), (name, c.model.path)
    chips = paper_scale.chips_for(preset)
    kinds = set()
    for stage in stage_names(c):
        s = c.stages[stage]
        kinds.add(s.kind)
        if s.kind == "merge":
            continue
        run = s.run
        if s.kind == "sft":
            assert execution.has_execution(run), (name, stage)
            assert run.train.batch_size % (run.mesh.shape[0] * run.mesh.shape[1]) == 0
            t = run.data.teacher
            assert run.data.source != "teacher" or t.source == "pretrained", (name, stage)
        else:
            _check(f"{name}[{stage}]", run)  # an RL config at paper scale
            assert presets.preset_for_path(run.model.path) == preset
        assert math.prod(run.mesh.shape) == chips, (name, stage, run.mesh.shape)
        assert (run.model.param_dtype, run.model.dtype) == ("float32", "bfloat16")
        assert run.model.scan_layers and run.model.remat == "block"
    assert (
        c.eval.max_new_tokens + paper_scale.PROMPT_LEN
        <= presets.preset(preset).max_position_embeddings
    )
    return kinds


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_pipeline_paper_variant_validates_at_paper_scale(name, offline):
    module = _module(name)
    kinds = _check_pipeline(name, module.get_config("paper"))
    kinds |= _check_pipeline(name, module.get_config(PIPELINES[name]))
    assert "sft" in kinds or name == "dpo/dpo", name  # every file's SFT stage is covered
    for arm in getattr(module, "ARMS", ()):  # composes with the file's arms
        _check_pipeline(name, module.get_config(f"{arm},paper"))
    smaller = module.get_config(PIPELINES[name].replace("paper", "").strip(","))
    assert smaller.to_dict() != module.get_config(PIPELINES[name]).to_dict()


def test_pipeline_paper_models():
    def get(name, variant="paper"):
        return _module(name).get_config(variant)

    assert presets.preset_for_path(get("dpo/dpo").model.path) == "qwen2.5-3b"
    staged = get("dpo/dpo", "staged,paper")
    assert staged.stages.sft.run.data.teacher.path == "/path/to/Qwen2.5-32B"
    assert staged.stages.dpo.run.data.prompts_per_step == 32  # 2 rows per chip
    seq = get("seq_opd_rl/pipeline", "sequential,paper")
    assert seq.stages.opd.run.score.teacher.path == "/path/to/Qwen3-32B"
    assert seq.stages.opd.run.eval.split == "validation" and seq.stages.opd.switch.patience == 2
    assert (seq.stages.opd.run.train.steps, seq.stages.rl.run.train.steps) == (200, 300)
    rstg = get("rstg/rstg_sft")
    assert rstg.stages.rstg_1.run.credit.transforms == "rstg"
    assert rstg.stages.sft_1.run.data.teacher.path == "/path/to/Qwen3-32B"
    fusion = get("fusion/fusion")
    assert fusion.stages.rl_countdown.run.task.name == "countdown"  # the domains stay
    assert fusion.stages.merge_avg.run.lambdas == "0.5,0.5"


CODE_PAPERS = ("gapo/gapo", "vigor/vigor", "rstg/rstg", "saf_opd/saf_opd", "iso/iso")


@pytest.mark.parametrize("name", CODE_PAPERS)
def test_code_paper_variant_trains_on_the_code_task_with_the_code_suite(name, offline):
    """The coding papers' `:code,paper`: the paper scale of `:paper`, on the user's code
    file (sandbox rewards) with the code suite instead of the math file and suite."""
    module = _module(name)
    code, paper = module.get_config("code,paper"), module.get_config("paper")
    _check(name, code)
    assert (code.task.name, json.loads(code.task.options)) == (
        "code",
        {"path": paper_scale.CODE_DATA_PATH},
    )
    assert (code.eval.suite, code.eval.suite_data) == ("code", paper_scale.EVAL_DATA_PATH)
    differ = {k for k in paper.to_dict() if paper.to_dict()[k] != code.to_dict()[k]}
    assert differ == {"task", "eval"}, differ  # the model, batch, method: as :paper
    assert module.get_config("code").task.name == "code_synth"


@pytest.mark.parametrize("name", _files())
def test_paper_variant_validates_at_paper_scale(name, offline):
    module = _module(name)
    _check(name, module.get_config("paper"))
    for arm in getattr(module, "ARMS", ()):  # composes with the file's arms
        c = module.get_config(f"{arm},paper")
        _check(name, c)
        assert c.to_dict() != module.get_config(f"{arm}").to_dict()


def test_paper_variants_compose_with_language_tools_and_test_time_training(offline):
    c = _module("multilingual/multilingual").get_config("de,paper")
    _check("multilingual/multilingual", c)
    assert json.loads(c.task.options)["language"] == "de"
    c = _module("om_grpo/om_grpo").get_config("paper+ttt")
    _check("om_grpo/om_grpo", c)
    assert c.task.train_split == "test" and c.task.train_size == c.eval.num_problems == 500
    c = _module("cbpo/cbpo").get_config("tool_lookup,paper")
    _check("cbpo/cbpo", c)
    assert c.task.name == "tool_lookup" and c.rollout.max_new_tokens == 1024


def test_papers_models_and_numbers():
    def get(name):
        return _module(name).get_config("paper")

    expect = {
        "opsa/opsa": "qwen3-1.7b",
        "pair/pair": "qwen3-4b",
        "gar/gar": "qwen3-8b",
        "lspo/lspo": "deepseek-r1-distill-qwen-1.5b",
        "cue_grpo/cue_grpo": "qwen2.5-math-7b",
        "leeps/leeps": "qwen2.5-math-7b",
        "baselines/dapo": "qwen2.5-32b",
        "ebl/ebl": "qwen2.5-3b",
    }
    for name, preset in expect.items():
        assert presets.preset_for_path(get(name).model.path) == preset, name
    dapo = get("baselines/dapo")
    assert (dapo.rollout.max_new_tokens, dapo.reward.overlong_cache) == (20480, 4096)
    assert (dapo.data.prompts_per_step, dapo.data.group_size, dapo.optimizer.lr) == (512, 16, 1e-6)
    assert tuple(dapo.mesh.shape) == (1, 32, 4) and dapo.mesh.rules == "fsdp_tp"
    assert get("opsa/opsa").eval.n_samples == 32
    lspo = get("lspo/lspo")
    assert (lspo.train.steps, lspo.task.train_size) == (1000, 103_000)
    assert get("leeps/leeps").rollout.max_new_tokens == 4096 - paper_scale.PROMPT_LEN
    assert get("iso/iso").model.path.endswith("Qwen3-8B-Base") and get("iso/iso").train.steps == 270
    assert get("saf_opd/saf_opd").score.teacher.path == "/path/to/Qwen3-32B"
    # the file's method survives the scale-up
    assert get("gapo/gapo").loss.name == "gapo" and get("sara/sara").select.name == "sara"


def test_teacher_experiment_without_a_teacher_checkpoint_is_refused():
    from rlvr_jax.rl.config import apply_teacher, apply_variant, default_config

    c = default_config()
    c.score.signals = "teacher"
    with pytest.raises(ValueError, match="teacher checkpoint"):
        apply_teacher(apply_variant(c, "paper"), "paper")


def test_which_paper_variants_a_multi_host_slice_refuses(monkeypatch):
    from rlvr_jax.rl import parts as parts_lib

    monkeypatch.setattr(parts_lib.distributed, "check_rows_split", lambda mesh: None)
    from rlvr_jax.pipeline.execution import TRAINER_KINDS

    runs = [(name, _module(name).get_config("paper")) for name in _files()]
    for name, variant in PIPELINES.items():  # every RL-kind stage of every pipeline
        c = _module(name).get_config(variant)
        runs += [(name, s.run) for s in c.stages.values() if s.kind in TRAINER_KINDS]
    refused = set()
    for name, c in runs:
        hosts = math.prod(c.mesh.shape) // V5P_CHIPS_PER_HOST
        assert hosts > 1, name  # every :paper slice is multi-host
        monkeypatch.setattr(parts_lib.jax, "process_count", lambda hosts=hosts: hosts)
        try:
            parts_lib.check_processes(c, None)  # the prompt split must work for all
        except NotImplementedError:
            refused.add(name)
    assert refused == set(MULTI_HOST_PENDING)


def test_every_paper_variant_has_a_plan_row_that_fits():
    """docs/tpu_pods.md's plan table (scripts/plan.py --all-paper) names every `:paper`
    file, and every row fits a v5p chip with the 10 % margin."""
    doc = (EXPERIMENTS.parent / "docs" / "tpu_pods.md").read_text()
    table = doc.split("<!-- plan.py --all-paper: begin -->")[1].split(
        "<!-- plan.py --all-paper: end -->"
    )[0]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| `")][
        1:
    ]  # not the header
    named = {n.strip("`| ") for row in rows for n in row[0].split(", ")}
    assert set(_files()) <= named, sorted(set(_files()) - named)
    from rlvr_jax.pipeline.config import stage_names

    for name, variant in PIPELINES.items():  # every trainable stage: `file[stage]`
        c = _module(name).get_config(variant)
        want = {f"{name}[{s}]" for s in stage_names(c) if c.stages[s].kind != "merge"}
        assert want <= named, sorted(want - named)
    assert [row[0] for row in rows if row[10] != "yes"] == []


def test_pipeline_sft_teacher_without_a_checkpoint_is_refused():
    from rlvr_jax.pipeline import paper
    from rlvr_jax.pipeline.config import add_stage, pipeline_config

    c = pipeline_config()
    add_stage(c, "sft", "sft").run.data.source = "teacher"  # the warm-start teacher
    with pytest.raises(ValueError, match="teacher checkpoint"):
        paper.apply(c, "qwen3-8b")
