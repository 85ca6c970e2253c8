"""Arms and wording shared by the reproductions, so that shared baselines are one run.

An arm used by several pages (GRPO, OPD, OPSD, dynamic sampling, ...) is
declared once here: every page that lists it resolves to the same config, hence
the same run (`rlvr_jax.repro.runs`). Experiment configs are used as they are
(20 RL steps of 32 prompts × 8 rollouts on the 0.92M-parameter warm-start base)
with one shared change, COMMON: held-out evaluation every 5 steps on 256 test
problems × 8 samples (the files evaluate every 10 steps on 128; evaluation is
~4% of a run's CPU at 128, so denser curves and half the evaluation-sampling
variance cost ~10% more). Pages add overrides only where a comparison needs them.
"""

from __future__ import annotations

import dataclasses

from rlvr_jax.repro.spec import Arm, Metric, Sweep

COMMON = {"eval.every": 5, "eval.num_problems": 256}

GRPO = Arm(
    "grpo",
    "baselines/grpo.py",
    role="baseline",
    note="uniform prompts, GRPO advantages, PPO clip ε = 0.2 (docs/baselines.md)",
)
# The self-teacher pages (DASH, CPO, H²SD, CSCR) run on the Countdown base trained with
# privileged-context examples (role "privileged"), so their GRPO arm does too.
GRPO_PRIVILEGED = Arm(
    "grpo",
    "baselines/grpo.py",
    {"model.role": "privileged"},
    role="baseline",
    note="GRPO on the privileged Countdown base (the self-teacher methods' policy)",
)
GRPO_ARITHMETIC = Arm(
    "grpo",
    "baselines/grpo.py:arithmetic",
    role="baseline",
    note="GRPO on the warm-start arithmetic base",
)
OPD = Arm(
    "opd",
    "opdvr/opdvr.py",
    {"credit.opdvr.gate": "none"},
    role="baseline",
    note="on-policy distillation from the warm-start teacher: A_t = ℓ^T − ℓ^S, no reward",
)
GRPO_OPD = Arm(
    "grpo+opd",
    "saf_opd/saf_opd.py",
    {
        "credit.saf_opd.sparsify": False,
        "credit.saf_opd.compress": False,
        "credit.saf_opd.schedule": False,
        "log.grad_split": True,
    },
    role="baseline",
    note="fixed-coefficient fusion A_t = A_GRPO + w·(ℓ^T − ℓ^S) (SAF with every stage off; "
    "w = `credit.saf_opd.w_max`, chosen on the validation split where the page sweeps it)",
)
# The sweep every arm that adds a dense teacher term to an outcome advantage gets (the
# method and its baseline alike): the dense term's coefficient, chosen on the validation
# split by each value's run at seed 0 (`rlvr_jax.repro.sweeps`).
DENSE_COEFS = (0.03, 0.1, 0.3, 1.0)
GRAD_RATIO = Metric(
    "dense/outcome",
    "grad_split/dense_over_outcome",
    reduce="mean",
    fmt="{:.2f}",
    doc="per-step ratio of the dense term's policy-gradient norm to the outcome "
    "advantages', mean over steps (`log.grad_split`)",
)


def dense_sweep(arm: str, field: str) -> Sweep:
    """The dense-coefficient sweep of `arm` (its coefficient is `field`)."""
    return Sweep(arm, field, DENSE_COEFS)


OPSD = Arm(
    "opsd",
    "dash/dash.py",
    {"credit.dash.h_max": 1},
    role="baseline",
    note="on-policy self-distillation: the policy under the reference-solution view as "
    "teacher, A_t = ℓ^T − ℓ^S (DASH with horizon 1)",
)
DS = Arm(
    "ds",
    "baselines/grpo.py",
    {"select.name": "dynamic_sampling"},
    role="baseline",
    note="GRPO with DAPO's dynamic sampling (keep groups with 0 < #correct < G by the "
    "verifier's verdict, resample until B are kept; ≤ 3 rounds)",
)
DPS = Arm(
    "dps",
    "difficulty/difficulty.py",
    role="baseline",
    note="difficulty-prediction sampling: the B prompts predicted nearest 50% success",
)
SARA = Arm("sara", "sara/sara.py", note="probe, then commit / abandon by SPRT-style thresholds")
VIGOR = Arm("vigor", "vigor/vigor.py", note="variance-guided rollout allocation, GRPO's budget")


def as_role(arm: Arm, role: str, name: str | None = None) -> Arm:
    """The same arm (same config, hence the same runs) under another role or name."""
    return dataclasses.replace(arm, role=role, name=name or arm.name)


def shrunk(task: str = "Countdown", extra: str = "") -> str:
    """What every page's miniature shrinks relative to its paper, plus `extra`."""
    text = (
        f"a 0.92M-parameter policy SFT-trained from scratch on synthetic {task} "
        "(docs/base_models.md) in place of the paper's 1.5B–8B LLMs, and that task's held-out "
        "split in place of the paper's benchmarks; 20 RL steps of 32 prompts × 8 rollouts "
        "(≤ 64 new tokens) in place of hundreds of steps on long chains of thought; "
        "evaluation every 5 steps on 256 held-out problems × 8 samples (pass@1, pass@8)."
    )
    return text + (" " + extra if extra else "")


SWEPT = (
    "the dense term's coefficient of every arm that adds one to the outcome advantage was "
    "chosen on the task's validation split (the sweep below; method and baseline alike); "
    "every other value is the experiment config's, fixed before any run here; nothing was "
    "chosen on the evaluation problems."
)

TUNING = (
    "none tuned for this page: every value is the experiment config's (the paper's where the "
    "abstract gives one, else the default its docstring states), fixed before any run here; "
    "nothing was chosen on the evaluation problems."
)
