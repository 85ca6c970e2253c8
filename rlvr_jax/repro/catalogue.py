"""The 30 seed papers: slug, title, headline claim, and what blocks a reproduction if anything.

`docs/reproductions.md` has one row per entry. A paper whose method does not
run end to end yet names the open work that builds it (`blocked`); one that runs
end to end but not as arms of a single-run comparison (a pipeline, an analysis of
checkpoints, a language matrix) says how it is run instead (`manual`); the others
declare their reproduction in `experiments/<slug>/repro.py`.
"""

from __future__ import annotations

import dataclasses

from rlvr_jax.repro.stats import NOT_RESOLVED, VERDICTS


@dataclasses.dataclass(frozen=True)
class Paper:
    slug: str
    title: str
    claim: str  # the abstract's headline, in a few words
    blocked: str = ""  # the open work that builds the method ("" = end to end today)
    manual: str = ""  # built, but run outside the harness: how ("" = declared in repro.py)
    manual_result: str = ""  # what that run measured, for the summary row (manual only)
    manual_link: str = ""  # its docs page, relative to docs/ (manual only)
    # the verdict of that measurement by the rule of docs/reproductions.md, where it
    # has the seeds for one ("" = no verdict); one of `rlvr_jax.repro.stats.VERDICTS`
    manual_verdict: str = ""

    def __post_init__(self):
        if self.manual_verdict and self.manual_verdict not in VERDICTS:
            raise ValueError(
                f"paper {self.slug!r}: manual_verdict {self.manual_verdict!r}; valid: {VERDICTS}"
            )
        if self.manual_verdict and not self.manual:
            raise ValueError(f"paper {self.slug!r}: a manual_verdict needs `manual`")


PAPERS = (
    Paper(
        "seq_opd_rl",
        "Sequential Beats Joint (OPD then RL)",
        "OPD-then-RL beats pure OPD, pure RLVR and joint fusion",
    ),
    Paper(
        "gar", "Gradient-Aligned Rewards (GAR)", "GAR improves over GRPO; < 9% wall-clock overhead"
    ),
    Paper(
        "cliff",
        "Cliff: process rewards from the first mistake",
        "Cliff beats GRPO by 7% and OPD by 15%",
    ),
    Paper(
        "gapo",
        "Group Adaptive Clipping Policy Optimization (GAPO)",
        "adaptive clipping improves pass@1 and pass@k over fixed clipping",
    ),
    Paper(
        "opsa",
        "On-Policy Self-Adaptation (OPSA)",
        "teacher-free OPSA beats OPD (+16.8 Avg@32 on AIME24)",
    ),
    Paper(
        "ebl",
        "Locked at the Entrance (early branch locking)",
        "late-layer interpolation +37% solution coverage at no pass@1 loss",
        manual="an analysis of checkpoints (rlvr_jax.analysis, docs/entrance.md)",
        manual_result="3 GRPO seeds, last two of four layers moved toward the step-4 "
        "checkpoint: coverage +0.4 ± 0.9% (s.e.) relative at α = 0.5 (pass@1 −0.5 ± 0.4), "
        "+3.6 ± 2.1% at α = 1 (pass@1 −2.0 ± 0.5); the entrance shift itself holds in every "
        "seed (likelihood shift 4.9x at the entrance, forced low-access completion "
        "0.004 → 0.28)",
        manual_link="entrance.md",
        manual_verdict=NOT_RESOLVED,
    ),
    Paper(
        "fusion",
        "Consolidating RLVR across domains (Merge / Mix RL / MOPD)",
        "the three fusion paradigms differ by at most 1.4 points on average",
    ),
    Paper(
        "opdvr",
        "On-policy Distillation with Verifiable Reward (OPDVR)",
        "OPDVR consistently beats standard OPD",
    ),
    Paper(
        "cbpo",
        "Contrastive Branch Policy Optimization (CBPO)",
        "branch-contrastive credit beats policy-optimization and branch baselines",
    ),
    Paper(
        "nc_grpo",
        "Perturb the Thought (NC-GRPO)",
        "latent-noise rollouts improve OOD reasoning over GRPO",
    ),
    Paper(
        "graph_difficulty",
        "Graph-structured online difficulty estimation",
        "the graph estimator improves schedulers over per-prompt estimates",
    ),
    Paper(
        "multilingual",
        "GRPO Beyond English",
        "native-language reasoning leaves a small gap; strong cross-lingual transfer",
        manual="a train × evaluation language matrix (docs/multilingual.md)",
        manual_result="3 seeds of the 4-language matrix: transfer gain (train in one "
        "language, evaluate in another) −2.2 ± 1.1 points (s.e.), native gain −1.9 ± 1.4: "
        "GRPO did not raise pass@1 on this base in 12 steps; native − transfer +0.3 ± 0.4; "
        "language consistency ≥ 0.996; the native-language gap is not testable here (the "
        "reasoning language does not move)",
        manual_link="multilingual.md",
        manual_verdict=NOT_RESOLVED,
    ),
    Paper(
        "pair",
        "PAIR: pairwise-aware inclusion reweighting",
        "+1.2 accuracy with 51% fewer generated tokens than full-group GRPO",
    ),
    Paper(
        "dash",
        "DASH: divergence-adaptive supervision horizons",
        "DASH beats matched vanilla OPSD on every benchmark",
    ),
    Paper(
        "cue_grpo",
        "Rarity-aware credit redistribution (Cue-GRPO)",
        "better repeated-sampling (pass@k) performance than GRPO; 6% overhead",
    ),
    Paper(
        "om_grpo",
        "Outcome-Masked GRPO (label-free)",
        "OM-GRPO beats label-free voting RLVR and matches GT-reward training",
    ),
    Paper(
        "hl_gauss",
        "Categorical critics (HL-Gauss PPO)",
        "HL-Gauss critics beat MSE-critic PPO and are better calibrated",
    ),
    Paper("rstg", "Distill Where You Fail (RSTG)", "RSTG beats naive GRPO+OPD (+4.0 math)"),
    Paper(
        "saf_opd",
        "Stable Advantage Fusion (SAF-OPD)",
        "SAF beats fixed-coefficient GRPO+OPD fusion (+0.5 to +2.7)",
    ),
    Paper(
        "leeps",
        "LEEPS: latent-guided explore-exploit prompt sampling",
        "LEEPS beats the strongest prompt-selection baseline (+2.6-3.7% relative)",
    ),
    Paper(
        "grsd",
        "Group-Reflective Self-Distillation (GRSD)",
        "GRSD beats agentic RL baselines",
    ),
    Paper(
        "cscr",
        "Counterfactual Sensitivity Credit Reallocation (CSCR)",
        "CSCR beats GRPO at the same number of updates",
    ),
    Paper(
        "lspo",
        "LoRA Scaffolded Policy Optimization (LSPO)",
        "LSPO beats DAPO (+3.8 points averaged over 16 cells)",
    ),
    Paper(
        "sara",
        "Sequential Adaptive Rollout Allocation (SARA)",
        "SARA matches difficulty prediction at 22% fewer rollouts than dynamic sampling",
    ),
    Paper(
        "spyrl",
        "RLSVR / SpyRL self-play",
        "self-play vote rewards beat self-improvement baselines",
    ),
    Paper(
        "vigor",
        "VIGOR: variance-guided rollout allocation",
        "reaches target accuracy with up to 2.3x fewer rollouts than GRPO",
    ),
    Paper(
        "iso",
        "ISO: isospectral optimization",
        "ISO-AdamW reaches AdamW's accuracy in fewer steps",
    ),
    Paper(
        "oc_grpo",
        "Off-Context GRPO (privileged guidance)",
        "+3.9 points over vanilla GRPO",
    ),
    Paper(
        "h2sd",
        "Hybrid Hindsight Self-Distillation (H2SD)",
        "H2SD beats RLVR, OPSD and RLSD baselines",
    ),
    Paper(
        "cpo", "Contrastive Policy Optimization (CPO)", "CPO beats entropy-based advantage shaping"
    ),
)


def paper(slug: str) -> Paper:
    """The catalogue entry of `slug`; ValueError listing the slugs."""
    for p in PAPERS:
        if p.slug == slug:
            return p
    raise ValueError(f"{slug!r} is not a seed paper; valid: {', '.join(p.slug for p in PAPERS)}")
