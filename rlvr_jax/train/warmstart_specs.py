"""Warm-start specs: what determines each (domain, role) model, and the registered specs.

A `WarmStartSpec` holds everything that determines a trained model (task
options, architecture, SFT schedule, seeds) and nothing else: its fields, as
`spec_payload` gives them, are hashed into the model's cache directory
(`rlvr_jax.train.warmstart.model_dir`). `SPECS` registers the base and teacher
of every domain; measured numbers are in docs/base_models.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rlvr_jax import tasks
from rlvr_jax.models import ModelConfig
from rlvr_jax.tasks import tools
from rlvr_jax.tasks.options import WARM_START_OPTIONS
from rlvr_jax.tokenizers import Tokenizer
from rlvr_jax.train.sft import end_of_turn_id

ROLES = ("base", "teacher")
# Spec fields added after models were cached -> the default left out of the hash.
_LATE_FIELDS = {"multi_turn": False}
# Multi-turn domains -> the model turns of a problem's reference episode. The
# task must have `env(problem)` and `max_turns` (ToolEnv ends an episode itself
# after max_turns + 1 model turns).
REFERENCE_TURNS = {"tool_lookup": tools.reference_turns}


@dataclasses.dataclass(frozen=True)
class WarmStartSpec:
    """Everything that determines a warm-start model (and nothing that does not).

    Attributes:
      domain: task name for `rlvr_jax.tasks.get`.
      role: "base" or "teacher".
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

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"role {self.role!r}; valid: {ROLES}")
        if self.multi_turn and self.domain not in REFERENCE_TURNS:
            raise ValueError(
                f"multi_turn domain {self.domain!r} has no reference turns; "
                f"valid: {sorted(REFERENCE_TURNS)}"
            )

    def task(self) -> tasks.Task:
        return tasks.get(self.domain, **dict(self.task_options))

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


def _spec(domain, role, d, layers, steps, problems, *, batch=16, lr=3e-3, **extra):
    return WarmStartSpec(
        domain=domain,
        role=role,
        task_options=tuple(sorted(TASK_OPTIONS[domain].items())),
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
# The teachers have the base's architecture and ~2x its steps: the loss is still
# falling steeply at the base's budget, and a wider model would not fit 10 minutes.
SPECS: dict[tuple[str, str], WarmStartSpec] = {
    ("countdown", "base"): _spec("countdown", "base", 128, 4, 800, 8000),
    ("countdown", "teacher"): _spec("countdown", "teacher", 128, 4, 1500, 12000),
    ("arithmetic", "base"): _spec("arithmetic", "base", 128, 4, 400, 6400),
    ("arithmetic", "teacher"): _spec("arithmetic", "teacher", 128, 4, 1000, 8000),
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
    return payload
