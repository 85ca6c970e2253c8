"""Warm-start specs: what determines each (domain, role) model, and the registered specs.

A `WarmStartSpec` holds everything that determines a trained model (task
options, architecture, SFT schedule, seeds) and nothing else: its fields, as
`spec_payload` gives them, are hashed into the model's cache directory
(`rlvr_jax.train.warmstart.model_dir`). `SPECS` registers the base and teacher
of every domain; measured numbers are in docs/base_models.md.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from typing import Any

from rlvr_jax import tasks
from rlvr_jax.models import ModelConfig
from rlvr_jax.tasks import spy, tools
from rlvr_jax.tasks.options import WARM_START_OPTIONS
from rlvr_jax.tokenizers import Tokenizer
from rlvr_jax.train import judge, privileged
from rlvr_jax.train.sft import end_of_turn_id

# "judge": Cliff's first-mistake judge (`rlvr_jax.train.judge`), for tasks with a step locator.
ROLES = ("base", "teacher", "judge", "privileged")
# Spec fields added after models were cached -> the default left out of the hash.
_LATE_FIELDS = {
    "multi_turn": False,
    "privileged_share": 0.0,
    "privileged_views": (),
    "hash_examples": False,
}
# Multi-turn domains -> the model turns of a problem's reference episode. The
# task must have `env(problem)` and `max_turns` (ToolEnv ends an episode itself
# after max_turns + 1 model turns).
REFERENCE_TURNS = {"tool_lookup": tools.reference_turns}
# Domains whose SFT examples are more than (prompt, solution): problems -> (prompt, target)
# pairs (the "who is the spy" base learns both the describe and the vote turn).
TURN_EXAMPLES = {"spy_describe": spy.turn_examples}


@dataclasses.dataclass(frozen=True)
class WarmStartSpec:
    """Everything that determines a warm-start model (and nothing that does not).

    Attributes:
      domain: task name for `rlvr_jax.tasks.get`.
      role: "base", "teacher", "judge" (Cliff's first-mistake judge) or "privileged"
        (a base with a privileged share where the domain's base has none).
      task_options: the task's difficulty options, as sorted (name, value) pairs.
      hidden_size, intermediate_size, num_layers, num_heads, num_kv_heads, head_dim:
        the Qwen3 architecture (tied embeddings; vocab from the tokenizer).
      steps, batch_size, lr: SFT schedule (AdamW, warmup + cosine, clip 1).
      num_train_problems: distinct train-split problems (reused across epochs).
      seed: model init and batch order seed.
      max_new_tokens: decode budget when evaluating (responses are ~30-70 tokens;
        per turn for multi-turn domains).
      multi_turn: the domain is an episode against the task's environment
        (`task.env(problem)`): SFT on reference episodes with the observations
        masked out of the loss, evaluation with real episodes
        (`rlvr_jax.train.multiturn`). Left out of the cache hash when False, so
        specs written before the field existed keep their directories.
      privileged_share: fraction of the SFT examples written in a self-teacher's
        privileged-context view (`rlvr_jax.train.privileged`), so the policy
        scored under that context (DASH, CPO, H²SD, CSCR) is in distribution.
      privileged_views: the view names (`privileged.VIEWS`) those examples cycle
        through. Both fields are left out of the hash at their defaults (0, ()).
      hash_examples: the SFT examples' text (`sft_examples`) is hashed into the cache
        directory as well as the fields, so a change to the task's generator trains a
        new model instead of reusing one trained on other text. Off (and left out of
        the hash) for the specs cached before the field existed, whose models would
        otherwise change directory.
    """

    domain: str
    role: str
    task_options: tuple[tuple[str, Any], ...]
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    steps: int
    batch_size: int
    lr: float
    num_train_problems: int
    seed: int = 0
    max_new_tokens: int = 64
    multi_turn: bool = False
    privileged_share: float = 0.0
    privileged_views: tuple[str, ...] = ()
    hash_examples: bool = False

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"role {self.role!r}; valid: {ROLES}")
        if self.multi_turn and self.domain not in REFERENCE_TURNS:
            raise ValueError(
                f"multi_turn domain {self.domain!r} has no reference turns; "
                f"valid: {sorted(REFERENCE_TURNS)}"
            )
        bad_views = [v for v in self.privileged_views if v not in privileged.VIEWS]
        if not 0.0 <= self.privileged_share <= 1.0 or bad_views:
            raise ValueError(
                f"{self.domain}/{self.role}: privileged_share {self.privileged_share!r} "
                f"(must be in [0, 1]), privileged_views {self.privileged_views!r} "
                f"(valid: {sorted(privileged.VIEWS)})"
            )
        if self.privileged_share > 0 and (self.multi_turn or not self.privileged_views):
            raise ValueError(
                f"{self.domain}/{self.role}: privileged_share > 0 needs privileged_views "
                "and a single-turn domain"
            )

    def task(self) -> tasks.Task:
        return tasks.get(self.domain, **dict(self.task_options))

    def sft_examples(self) -> list[tuple[str, str]]:
        """(prompt, target) pairs of the first `num_train_problems` train problems.

        A `privileged_share` of them in the privileged views (`privileged.privileged_examples`);
        a judge's are judgements of candidate solutions (`judge.judge_examples`).
        """
        task = self.task()
        problems = task.problems(self.num_train_problems, "train")
        if self.role == "judge":
            return judge.judge_examples(task, problems, seed=self.seed)
        if self.domain in TURN_EXAMPLES:
            return TURN_EXAMPLES[self.domain](problems, seed=self.seed)
        if not self.privileged_share:
            return [(p.prompt, p.solution) for p in problems]
        return privileged.privileged_examples(
            problems, share=self.privileged_share, views=self.privileged_views, seed=self.seed
        )

    def model_config(self, tokenizer: Tokenizer) -> ModelConfig:
        """The Qwen3 config for this spec and tokenizer (EOS = the end-of-turn token)."""
        return ModelConfig(
            model_type="qwen3",
            vocab_size=tokenizer.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            qk_norm=True,
            tie_word_embeddings=True,
            max_position_embeddings=1024,
            bos_token_id=tokenizer.bos_id,
            eos_token_id=end_of_turn_id(tokenizer),
            pad_token_id=tokenizer.pad_id,
        )


def _spec(domain, role, d, layers, steps, problems, *, batch=16, lr=3e-3, options=None, **extra):
    options = TASK_OPTIONS[domain] if options is None else options
    return WarmStartSpec(
        domain=domain,
        role=role,
        task_options=tuple(sorted(options.items())),
        hidden_size=d,
        intermediate_size=3 * d,
        num_layers=layers,
        num_heads=d // 32,
        num_kv_heads=max(1, d // 64),
        head_dim=32,
        steps=steps,
        batch_size=batch,
        lr=lr,
        num_train_problems=problems,
        **extra,
    )


TASK_OPTIONS = WARM_START_OPTIONS  # per domain (in tasks: SFT and RL both read them)
# The bases' share of SFT examples in the self-teachers' privileged views
# (`privileged.VIEWS`; "solution", the view of DASH / CPO / H²SD's failed rows,
# counted three times): their self-teachers are then in distribution (a 30% share
# at 500 steps did not teach the copy: hinted pass@1 0.17 < plain 0.27). docs/base_models.md
# has the measured effect (hinted vs plain pass@1, sign agreement with the first mistake).
PRIVILEGED = dict(
    privileged_share=0.5,
    privileged_views=(
        "solution",
        "solution",
        "solution",
        "rephrase",
        "asserted_correct",
        "asserted_incorrect",
    ),
)
# The teachers have the base's architecture and ~2x its steps: the loss is still
# falling steeply at the base's budget, and a wider model would not fit 10 minutes.
SPECS: dict[tuple[str, str], WarmStartSpec] = {
    ("countdown", "base"): _spec("countdown", "base", 128, 4, 800, 8000),
    ("countdown", "teacher"): _spec("countdown", "teacher", 128, 4, 1500, 12000),
    # The Countdown base with the privileged share: the policy of the self-teacher
    # methods on Countdown (a role of its own: the base keeps the hash every measured
    # Countdown run is keyed by).
    ("countdown", "privileged"): _spec("countdown", "privileged", 128, 4, 800, 8000, **PRIVILEGED),
    ("arithmetic", "base"): _spec("arithmetic", "base", 128, 4, 800, 6400, **PRIVILEGED),
    ("arithmetic", "teacher"): _spec("arithmetic", "teacher", 128, 4, 1000, 8000),
    ("arithmetic", "judge"): _spec("arithmetic", "judge", 128, 4, 1000, 8000),
    ("multilingual_arithmetic", "base"): _spec(
        "multilingual_arithmetic", "base", 128, 4, 400, 6400
    ),
    ("multilingual_arithmetic", "teacher"): _spec(
        "multilingual_arithmetic", "teacher", 128, 4, 650, 8000
    ),
    ("multilingual_mix", "base"): _spec("multilingual_mix", "base", 128, 4, 600, 9600),
    ("multilingual_mix", "teacher"): _spec("multilingual_mix", "teacher", 128, 4, 1000, 12800),
    ("knights_knaves", "base"): _spec("knights_knaves", "base", 128, 4, 300, 6400),
    ("knights_knaves", "teacher"): _spec("knights_knaves", "teacher", 128, 4, 600, 8000),
    ("tool_lookup", "base"): _spec(
        "tool_lookup", "base", 128, 4, 390, 6400, max_new_tokens=32, multi_turn=True
    ),
    ("tool_lookup", "teacher"): _spec(
        "tool_lookup", "teacher", 128, 4, 800, 6400, max_new_tokens=32, multi_turn=True
    ),
    # Both turns of the game (TURN_EXAMPLES: 2 examples per problem); the base of SpyRL.
    ("spy_describe", "base"): _spec("spy_describe", "base", 128, 4, 300, 2400),
    # The synthetic code task at its defaults (its defaults are the miniature's settings,
    # so RL's `resolve_options` gives the same task). Held-out pass@1 / pass@8 by SFT
    # budget (docs/base_models.md): 650 steps 0.045 / 0.26, 800 steps 0.096 / 0.48,
    # 1000 steps 0.913 / 1.0 (no RL headroom). The base has 800, the Countdown base's
    # budget and near its pass@1; the teacher the Countdown teacher's budget. Both hash
    # their examples' text (the generator is new). Trained on first use, not shipped.
    ("code_synth", "base"): _spec(
        "code_synth", "base", 128, 4, 800, 8000, options={}, hash_examples=True
    ),
    ("code_synth", "teacher"): _spec(
        "code_synth", "teacher", 128, 4, 1500, 12000, options={}, hash_examples=True
    ),
}


def domains() -> list[str]:
    """The domains with registered specs."""
    return sorted({d for d, _ in SPECS})


def get_spec(domain: str, role: str = "base") -> WarmStartSpec:
    """The registered spec; ValueError listing the valid (domain, role) pairs."""
    if (domain, role) not in SPECS:
        raise ValueError(f"no warm-start spec for {(domain, role)}; valid: {sorted(SPECS)}")
    return SPECS[domain, role]


def spec_payload(spec: WarmStartSpec) -> dict[str, Any]:
    """The spec's fields as hashed into its cache directory name.

    Fields added after the first models were cached (`_LATE_FIELDS`) are left out
    while they hold their default, so those models keep their hash.
    """
    payload = dataclasses.asdict(spec)
    for name, default in _LATE_FIELDS.items():
        if payload[name] == default:
            del payload[name]
    if spec.hash_examples:
        payload["examples_sha256"] = _examples_digest(spec)
    return payload


@functools.cache
def _examples_digest(spec: WarmStartSpec) -> str:
    """sha256 of the spec's SFT (prompt, target) pairs, in order (computed once per spec)."""
    text = json.dumps(spec.sft_examples(), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()
