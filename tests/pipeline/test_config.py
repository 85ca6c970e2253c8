"""Pipeline configs: the stage graph and each stage's fields are checked before anything runs."""

import pytest

from rlvr_jax.pipeline import merge, rl_stage, stages
from rlvr_jax.pipeline.config import (
    add_stage,
    init_of,
    is_pipeline,
    pipeline_config,
    stage_names,
    validate,
)
from rlvr_jax.rl.config import default_config


def _pipeline():
    c = pipeline_config()
    add_stage(c, "sft", "sft")
    add_stage(c, "opd", "opd")
    add_stage(c, "rl", "rl")
    m = add_stage(c, "merge", "merge", init="sft")
    m.run.specialists = "opd,rl"
    return c


def test_stages_in_order_and_their_starts():
    c = _pipeline()
    validate(c)
    assert stage_names(c) == ["sft", "opd", "rl", "merge"]
    assert [init_of(c, n) for n in stage_names(c)] == ["base", "sft", "opd", "sft"]
    assert is_pipeline(c) and not is_pipeline(default_config())
    assert c.stages.opd.run.credit.transforms == "opdvr"  # the opd kind's defaults
    assert c.stages.opd.run.credit.opdvr.gate == "none"
    assert merge.merge_lambdas(c.stages.merge.run) == (0.5, 0.5)
    with pytest.raises(AttributeError):
        c.stages.rl.run.train.stepz = 3  # locked


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda c: setattr(c.stages.opd, "init", "rl"), r"stages.opd.init = 'rl'; valid: "),
        (lambda c: setattr(c.stages.opd, "kind", "ppo"), r"stages.opd.kind = 'ppo'; valid: dpo"),
        (lambda c: setattr(c.stages.sft.switch, "patience", 2), "kind 'sft' has no in-run"),
        (lambda c: setattr(c.stages.merge.run, "specialists", "opd,nosuch"), "specialists"),
        (lambda c: setattr(c.stages.merge.run, "lambdas", "1,0,0"), "one λ per specialist"),
        (lambda c: setattr(c.stages.merge.run, "method", "ties"), "method = 'ties'; valid"),
        (lambda c: setattr(c.stages.rl.run.data, "group_size", 0), "stages.rl.run: config.data"),
        (lambda c: setattr(c.stages.sft.run.data, "source", "web"), "sft.run.data.source"),
        (lambda c: setattr(c.stages.sft.run.train, "steps", 0), "sft.run.train.steps = 0"),
        (lambda c: setattr(c.stages.rl.run.score.teacher, "path", "stage:rl"), "earlier stage"),
        (
            lambda c: (
                setattr(c.stages.rl, "init", "opd"),
                setattr(c, "order", "sft,rl,opd,merge"),
            ),
            r"stages.rl.init = 'opd'; valid: '', base, sft",
        ),
        (lambda c: setattr(c, "order", "sft,opd,rl"), "disagree"),
        (lambda c: setattr(c.eval, "n_samples", 0), "eval.n_samples = 0"),
    ],
)
def test_bad_pipelines_name_the_field(edit, match):
    c = _pipeline()
    edit(c)
    with pytest.raises(ValueError, match=match):
        validate(c)


def test_add_stage_rejects_duplicates_and_bad_names():
    c = _pipeline()
    with pytest.raises(ValueError, match="already"):
        add_stage(c, "rl", "rl")
    with pytest.raises(ValueError, match="stage name"):
        add_stage(c, "base", "rl")
    with pytest.raises(ValueError, match="valid: dpo, merge, opd, rl, sft"):
        add_stage(c, "x", "grpo")


def test_stage_refs_resolve_to_exports():
    c = _pipeline()
    c.stages.rl.run.score.teacher.path = "stage:opd"
    validate(c)
    k = stages.kind("rl")
    run = stages.resolve(
        c.stages.rl.run, k, "/w/opd/export", {"base": "/b", "opd": "/w/opd/export"}, c.model
    )
    assert run.score.teacher.path == "/w/opd/export"
    assert (run.model.source, run.model.path) == ("pretrained", "/w/opd/export")
    assert '"num_numbers": 3' in run.task.options  # the base's warm-start task options
    assert c.stages.rl.run.model.source == "warm_start"  # the stage config is unchanged


def test_a_warm_start_teacher_of_the_policys_domain_gets_the_bases_domain():
    """A stage's model is a pretrained export: "" (the policy's domain) must become the base's."""
    c = _pipeline()
    c.model.domain = "arithmetic"
    k = stages.kind("opd")
    run = rl_stage.opd_defaults()
    assert (run.score.teacher.source, run.score.teacher.domain) == ("warm_start", "")
    out = stages.resolve(run, k, "/w/sft/export", {"base": "/b"}, c.model)
    assert out.score.teacher.domain == "arithmetic"
    run.score.teacher.domain = "countdown"  # an explicit domain is kept
    assert stages.resolve(run, k, "/x", {"base": "/b"}, c.model).score.teacher.domain == (
        "countdown"
    )


def test_a_rerun_may_append_stages_but_not_change_the_old_ones(tmp_path):
    from rlvr_jax.pipeline.run import _check_config

    c = _pipeline()
    _check_config(tmp_path, c)  # writes config.json
    _check_config(tmp_path, _pipeline())  # the same pipeline: fine
    longer = _pipeline()
    m = add_stage(longer, "merge2", "merge", init="sft")
    m.run.specialists = "opd"
    _check_config(tmp_path, longer)  # appended: fine (and now saved)
    again = _pipeline()
    add_stage(again, "merge2", "merge", init="sft").run.specialists = "opd"
    again.stages.rl.run.train.steps = 99  # a resumable field of a stage's run
    again.eval.n_samples = 8  # the pipeline's evaluation
    _check_config(tmp_path, again)
    changed = _pipeline()
    add_stage(changed, "merge2", "merge", init="sft").run.specialists = "opd"
    changed.stages.opd.run.credit.opdvr.gate = "relu"
    with pytest.raises(ValueError, match="stages.opd.run.credit.opdvr.gate"):
        _check_config(tmp_path, changed)
    with pytest.raises(ValueError, match="order"):
        _check_config(tmp_path, _pipeline())  # a stage dropped
