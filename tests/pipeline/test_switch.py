"""The in-run stage switch: a validation plateau ends a training run at the hand-computed step."""

import json

import pytest

from rlvr_jax.pipeline.rl_stage import PlateauSwitch
from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.rl.config import apply_variant, default_config

# Validation pass@1 at steps 0, 1, 2, ... With δ = 0.02 and k = 2 (no score of the last 2
# evaluations beats the best before them by more than δ):
#   step 2: last 2 = (.20, .30), best before .10: gain .20 > δ
#   step 3: (.30, .31) vs .20: .11 > δ
#   step 4: (.31, .305) vs .30: .01 <= δ  -> switch after the evaluation at step 4.
SERIES = [0.10, 0.20, 0.30, 0.31, 0.305, 0.5, 0.6, 0.7, 0.8]
DELTA, K, SWITCH_STEP = 0.02, 2, 4


def _write_evals(path, scores, steps=None):
    steps = range(len(scores)) if steps is None else steps
    lines = [
        json.dumps({"step": s, "split": "eval", "time": 0.0, "pass@1": v, "avg@2": 0.0})
        for s, v in zip(steps, scores, strict=True)
    ]
    train = json.dumps({"step": 1, "split": "train", "time": 0.0, "loss": 1.0})
    path.write_text("\n".join([train, *lines]) + "\n")


def test_plateau_switch_reads_the_eval_series(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rule = PlateauSwitch(path, "pass@1", DELTA, K)
    assert rule.scores() == [] and not rule()  # no file yet
    for n in range(1, len(SERIES) + 1):
        _write_evals(path, SERIES[:n])
        assert rule() == (n - 1 >= SWITCH_STEP), n
        if n - 1 == SWITCH_STEP:
            break
    # A step evaluated twice counts once (its last record).
    _write_evals(path, [0.1, 0.1, 0.5], steps=[0, 1, 1])
    assert rule.scores() == [0.1, 0.5]
    with pytest.raises(
        ValueError, match="switch.metric = 'pass@9'.*valid: \\['avg@2', 'pass@1'\\]"
    ):
        PlateauSwitch(path, "pass@9", DELTA, K).scores()


def _config(steps):
    c = apply_variant(default_config(), "pulse")
    c.train.steps = steps
    c.eval.every = 1
    c.eval.at_start = True
    c.checkpoint.every = 100  # only the switch and the end checkpoint
    return c


@pytest.mark.slow
def test_trainer_ends_at_the_switch_step_and_resumes_ended(tmp_path, monkeypatch):
    calls = []

    def scripted_evaluate(self):
        calls.append(1)
        return {"pass@1": SERIES[len(calls) - 1], "pass@2": 0.0, "mean_reward": 0.0}

    monkeypatch.setattr(trainer_lib.Trainer, "evaluate", scripted_evaluate)
    c = _config(steps=8)
    trainer = trainer_lib.Trainer.from_config(c, tmp_path)
    rule = PlateauSwitch(trainer.io.logger.path, "pass@1", DELTA, K)
    try:
        result = trainer.run(stop_rule=rule)
    finally:
        trainer.io.close()
    assert result["pass@1"] == SERIES[SWITCH_STEP]  # the final result is the switch eval
    assert trainer.io.latest_step() == SWITCH_STEP
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines if x["split"] == "train"] == list(range(1, SWITCH_STEP + 1))
    evals = [x["step"] for x in lines if x["split"] == "eval"]
    assert evals == list(range(SWITCH_STEP + 1))  # no second record of the last evaluation
    assert (tmp_path / "export" / "model.safetensors").is_file()
    assert len(calls) == SWITCH_STEP + 1

    # A rerun finds the plateau in its history and trains no further.
    trainer = trainer_lib.Trainer.from_config(c, tmp_path)
    try:
        trainer.run(stop_rule=PlateauSwitch(trainer.io.logger.path, "pass@1", DELTA, K))
    finally:
        trainer.io.close()
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert max(x["step"] for x in lines if x["split"] == "train") == SWITCH_STEP
