"""A fake trainer for the harness tests: writes what `rlvr_jax.main` would, instantly."""

from __future__ import annotations

import json

import pytest

from rlvr_jax.repro import Arm, Claim, Reproduction, pass_at, reproduce
from rlvr_jax.repro.metrics import PASS_1, ROLLOUTS


class FakeTrainer:
    """A launcher that writes config.json and metrics.jsonl for a run.

    pass@1 of a finished run is `score(arm, seed)`; `crash` / `stop_early` name
    (arm, seed) pairs whose next launch exits 1 / stops before the end (as a
    preempted run does: exit 0, no final evaluation).
    """

    def __init__(self, score):
        self.score = score
        self.calls: list[tuple[str, int]] = []
        self.crash: set[tuple[str, int]] = set()
        self.stop_early: set[tuple[str, int]] = set()

    def __call__(self, run, log) -> int:
        who = (run.arm.name, run.seed)
        self.calls.append(who)
        log.write(f"fake trainer {who}\n")
        if who in self.crash:
            self.crash.discard(who)
            log.write("Traceback: boom\n")
            return 1
        run.workdir.mkdir(parents=True, exist_ok=True)
        (run.workdir / "config.json").write_text(json.dumps(run.config))
        steps, g = run.steps, run.config["data"]["group_size"]
        p = self.score(*who)
        lines = [{"step": 0, "split": "eval", "pass@1": 0.1, "pass@2": 0.2}]
        last = steps // 2 if who in self.stop_early else steps
        for s in range(1, last + 1):
            lines.append(
                {
                    "step": s,
                    "split": "train",
                    "reward": p * s / steps,
                    "sampled_groups": 4.0,
                    "response_len": 10.0,
                }
            )
        if who in self.stop_early:
            self.stop_early.discard(who)
        else:
            lines.append({"step": steps, "split": "eval", "pass@1": p, "pass@2": min(1, 2 * p)})
        with open(run.workdir / "metrics.jsonl", "w") as f:
            f.write("".join(json.dumps(x) + "\n" for x in lines))
        del g
        return 0


@pytest.fixture
def fake():
    return FakeTrainer(
        lambda arm, seed: {"grpo": 0.30, "sara": 0.40, "vigor": 0.31}[arm] + 0.01 * seed
    )


def pulse_repro(slug: str, method: str, config: str, **overrides) -> Reproduction:
    """GRPO (baseline) vs one method, both on their `:pulse` variants."""
    return Reproduction(
        slug=slug,
        paper=f"{slug} paper",
        arms=(
            Arm("grpo", "baselines/grpo.py:pulse", role="baseline"),
            Arm(method, f"{config}:pulse", dict(overrides)),
        ),
        baseline="grpo",
        metrics=(PASS_1, pass_at(2), ROLLOUTS),
        claims=(Claim(f"{method} beats GRPO", "pass@1", method, "grpo", "higher", "+1"),),
    )


def page_text(repro, tmp_path, launch, seeds=(0, 1), *, root="root", train=True) -> str:
    """`reproduce` quietly into `tmp_path` (runs under `<root>`, pages and records under
    docs/), without the plot; the page's text."""
    return reproduce(
        repro,
        list(seeds),
        tmp_path / root,
        launch=launch,
        train=train,
        docs=tmp_path / "docs",
        echo=lambda *_: None,
        plot=False,
    ).read_text()
