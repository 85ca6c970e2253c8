"""Tiny warm-start policies: SFT "base" and "teacher" models per task domain, cached on disk.

RL needs a base policy that solves some but not all problems; the distillation
methods also need a stronger teacher with the same tokenizer. Here, with no
model hub, both are trained from scratch by SFT on a task's reference
solutions, sized and step-limited so that each trains in minutes on a 2-core
CPU (measured numbers: docs/base_models.md).

  info = train_warm_start(SPECS["countdown", "base"])    # trains, or reuses the cache
  ws = load_warm_start("countdown", "base")              # WarmStart(model, config, tokenizer, ...)

A trained model lives in `<cache_dir>/<domain>-<role>-<hash>/`: Hugging Face
files (`config.json`, `model.safetensors`, loadable by `load_pretrained`), the
tokenizer (`tokenizer.model` for sentencepiece, `char_tokenizer.json` for the
character fallback) and `warmstart.json` (spec, training time, evaluation). The
hash covers the spec and the tokenizer's vocabulary, so changing either trains
a new model and an unchanged one is reused. The directory is written under a
temporary name and renamed when complete.

Tokenizer: by default the shipped sentencepiece model
(`rlvr_jax/assets/rlvr_tasks_sp.model`) if present, else the 128-id character
tokenizer of `rlvr_jax.testing`. The sentencepiece one is preferred: its
sequences are ~2.5x shorter, so training is that much faster.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import jax

from rlvr_jax import tasks
from rlvr_jax.models import ModelConfig, init_model, load_pretrained, save_pretrained
from rlvr_jax.models.transformer import Transformer
from rlvr_jax.tasks import tools
from rlvr_jax.tokenizers import (
    CharTokenizer,
    HFTokenizer,
    SentencePieceTokenizer,
    Tokenizer,
    load_tokenizer,
)
from rlvr_jax.train.evaluate import evaluate_task
from rlvr_jax.train.multiturn import episode_example, evaluate_episodes
from rlvr_jax.train.sft import end_of_turn_id, train_sft, train_sft_encoded

log = logging.getLogger(__name__)

ROLES = ("base", "teacher")
DEFAULT_CACHE_DIR = Path("~/.cache/rlvr_jax/warmstart")
_FORMAT_VERSION = 1  # bump when training code changes what a spec produces
_CHAR_TOKENIZER_FILE = "char_tokenizer.json"
_INFO_FILE = "warmstart.json"
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


# Difficulty options chosen so that the base lands at pass@1 ~10-50% within a few
# minutes of training here (docs/base_models.md). Arithmetic uses + and - only: with
# * the products are not learned in this budget and pass@1 stays ~6%.
TASK_OPTIONS = {
    "countdown": dict(num_numbers=3, max_number=10, target_min=1, target_max=30),
    "arithmetic": dict(num_operands=3, max_operand=9, operators="+-"),
    # The arithmetic options rendered in French: a non-English prompt, step words
    # ("moins", "égale") and answer marker ("Réponse"), at the arithmetic cost per step.
    "multilingual_arithmetic": dict(num_operands=3, max_operand=9, operators="+-", language="fr"),
    # Two people, one connective per statement: ~125-token examples (solution ~50).
    "knights_knaves": dict(num_people=2, max_depth=1),
    # One lookup, then calc, then the answer: 3 model turns, ~175-token episodes.
    "tool_lookup": dict(num_lookups=1),
}
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
    ("knights_knaves", "base"): _spec("knights_knaves", "base", 128, 4, 300, 6400),
    ("knights_knaves", "teacher"): _spec("knights_knaves", "teacher", 128, 4, 600, 8000),
    ("tool_lookup", "base"): _spec(
        "tool_lookup", "base", 128, 4, 250, 6400, max_new_tokens=32, multi_turn=True
    ),
    ("tool_lookup", "teacher"): _spec(
        "tool_lookup", "teacher", 128, 4, 450, 8000, max_new_tokens=32, multi_turn=True
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


# ------------------------------------------------------------------------ tokenizer
def default_tokenizer() -> Tokenizer:
    """The shipped sentencepiece task tokenizer if its file exists, else a char tokenizer."""
    from rlvr_jax.data import vocab  # Lazy: pulls in the data pipeline.

    if vocab.DEFAULT_TOKENIZER_PATH.is_file():
        return vocab.default_tokenizer()
    return CharTokenizer(vocab_size=128)


def tokenizer_fingerprint(tokenizer: Tokenizer) -> str:
    """A hash of the tokenizer's backend and full vocabulary (id -> piece)."""
    h = hashlib.sha256(type(tokenizer).__name__.encode())
    for i in range(tokenizer.vocab_size):
        h.update(tokenizer.id_to_token(i).encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()


def save_tokenizer(tokenizer: Tokenizer, path: str | os.PathLike) -> None:
    """Copies the tokenizer file into model directory `path` (see `load_model_tokenizer`)."""
    path = Path(path)
    if isinstance(tokenizer, SentencePieceTokenizer):
        shutil.copyfile(tokenizer.path, path / "tokenizer.model")
    elif isinstance(tokenizer, HFTokenizer):
        shutil.copyfile(tokenizer.path, path / "tokenizer.json")
    elif isinstance(tokenizer, CharTokenizer):
        n = len(CharTokenizer.SPECIALS)
        pieces = [tokenizer.id_to_token(i) for i in range(n, tokenizer.vocab_size)]
        alphabet = [p for p in pieces if len(p) == 1]
        spec = {"alphabet": alphabet, "vocab_size": tokenizer.vocab_size}
        (path / _CHAR_TOKENIZER_FILE).write_text(json.dumps(spec))
    else:
        raise ValueError(f"cannot save a {type(tokenizer).__name__}")


def load_model_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """The tokenizer saved next to a warm-start model by `save_tokenizer`."""
    char_file = Path(path) / _CHAR_TOKENIZER_FILE
    if char_file.is_file():
        spec = json.loads(char_file.read_text())
        return CharTokenizer(alphabet=spec["alphabet"], vocab_size=spec["vocab_size"])
    return load_tokenizer(path)


# --------------------------------------------------------------------- train / load
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


def model_dir(spec: WarmStartSpec, tokenizer: Tokenizer, cache_dir=None) -> Path:
    """`<cache_dir>/<domain>-<role>-<hash of spec + tokenizer>`."""
    payload = json.dumps(
        [_FORMAT_VERSION, spec_payload(spec), tokenizer_fingerprint(tokenizer)],
        sort_keys=True,
    )
    digest = hashlib.sha256(payload.encode()).hexdigest()[:12]
    root = Path(cache_dir or DEFAULT_CACHE_DIR).expanduser()
    return root / f"{spec.domain}-{spec.role}-{digest}"


def sft_examples(spec: WarmStartSpec) -> list[tuple[str, str]]:
    """(prompt, reference solution) pairs of the first `num_train_problems` train problems."""
    task = spec.task()
    return [(p.prompt, p.solution) for p in task.problems(spec.num_train_problems, "train")]


def train_warm_start(
    spec: WarmStartSpec,
    *,
    tokenizer: Tokenizer | None = None,
    cache_dir=None,
    force: bool = False,
    eval_problems: int = 128,
    eval_samples: int = 8,
) -> dict[str, Any]:
    """Trains (or reuses) the model of `spec`, evaluates it and saves it in the cache.

    Args:
      spec: what to train.
      tokenizer: default `default_tokenizer()`.
      cache_dir: default ~/.cache/rlvr_jax/warmstart.
      force: retrain even if the cache holds the model.
      eval_problems: held-out (test split) problems for pass@k; 0 skips evaluation.
      eval_samples: n samples per problem at temperature 1 (pass@1 and pass@n).
    Returns:
      The model's info dict (also in `warmstart.json`): path, spec, num_params,
      train_seconds, train_cpu_seconds, final_loss, tokenizer, eval (see
      `evaluate_task`; `evaluate_episodes` for multi-turn specs).
    """
    tokenizer = tokenizer or default_tokenizer()
    path = model_dir(spec, tokenizer, cache_dir)
    if (path / _INFO_FILE).is_file() and not force:
        log.info("warm start %s/%s: reusing %s", spec.domain, spec.role, path)
        return json.loads((path / _INFO_FILE).read_text())

    config = spec.model_config(tokenizer)
    model = init_model(config, seed=spec.seed)
    if spec.multi_turn:
        task, turns = spec.task(), REFERENCE_TURNS[spec.domain]
        problems = task.problems(spec.num_train_problems, "train")
        examples = [episode_example(tokenizer, p, task.env(p), turns(p)) for p in problems]
        train = train_sft_encoded
    else:
        examples, train = sft_examples(spec), train_sft
    log.info(
        "warm start %s/%s: %.2fM params, %d steps on %d examples",
        spec.domain,
        spec.role,
        config.num_params() / 1e6,
        spec.steps,
        len(examples),
    )
    start, cpu_start = time.perf_counter(), time.process_time()
    result = train(
        model,
        tokenizer,
        examples,
        steps=spec.steps,
        batch_size=spec.batch_size,
        lr=spec.lr,
        seed=spec.seed,
        log_every=max(1, spec.steps // 10),
    )
    train_seconds = time.perf_counter() - start
    # CPU time of all the process's threads: less sensitive to other jobs on the machine.
    train_cpu_seconds = time.process_time() - cpu_start
    info: dict[str, Any] = {
        "path": str(path),
        "spec": dataclasses.asdict(spec),
        "num_params": config.num_params(),
        "train_seconds": round(train_seconds, 1),
        "train_cpu_seconds": round(train_cpu_seconds, 1),
        "final_loss": result.final_loss,
        "tokenizer": f"{type(tokenizer).__name__} (vocab {tokenizer.vocab_size})",
        "history": result.history,
        "jax_version": jax.__version__,
    }
    if eval_problems:
        start = time.perf_counter()
        task = spec.task()
        kw = dict(
            split="test",
            num_problems=eval_problems,
            n_samples=eval_samples,
            temperature=1.0,
            max_new_tokens=spec.max_new_tokens,
            seed=spec.seed,
        )
        if spec.multi_turn:
            kw.update(env_factory=task.env, max_turns=task.max_turns + 1)
        evaluate = evaluate_episodes if spec.multi_turn else evaluate_task
        info["eval"] = evaluate(model, tokenizer, task, **kw)
        info["eval_seconds"] = round(time.perf_counter() - start, 1)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    save_pretrained(model, config, tmp)
    save_tokenizer(tokenizer, tmp)
    (tmp / _INFO_FILE).write_text(json.dumps(info, indent=2))
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)
    return info


@dataclasses.dataclass
class WarmStart:
    """A loaded warm-start model."""

    model: Transformer
    config: ModelConfig
    tokenizer: Tokenizer
    path: Path
    info: dict[str, Any]


def load_warm_start(
    domain: str,
    role: str = "base",
    *,
    tokenizer: Tokenizer | None = None,
    cache_dir=None,
    train_if_missing: bool = True,
) -> WarmStart:
    """Loads the cached warm-start model of (domain, role), training it first if needed.

    Args:
      domain, role: a key of `SPECS`.
      tokenizer: default `default_tokenizer()`; part of the cache key.
      cache_dir: default ~/.cache/rlvr_jax/warmstart.
      train_if_missing: else raise FileNotFoundError when the cache lacks the model.
    Returns:
      WarmStart(model, config, tokenizer (loaded from the model directory), path, info).
    """
    spec = get_spec(domain, role)
    tokenizer = tokenizer or default_tokenizer()
    path = model_dir(spec, tokenizer, cache_dir)
    if not (path / _INFO_FILE).is_file():
        if not train_if_missing:
            raise FileNotFoundError(
                f"no warm-start model at {path}; run scripts/make_base_models.py"
            )
        train_warm_start(spec, tokenizer=tokenizer, cache_dir=cache_dir)
    model, config = load_pretrained(path)
    info = json.loads((path / _INFO_FILE).read_text())
    return WarmStart(model, config, load_model_tokenizer(path), path, info)


def make_base_models(
    domains_: list[str] | None = None,
    roles: tuple[str, ...] = ROLES,
    *,
    tokenizer: Tokenizer | None = None,
    cache_dir=None,
    force: bool = False,
    eval_problems: int = 128,
    eval_samples: int = 8,
) -> list[dict[str, Any]]:
    """Trains (or reuses) and evaluates every (domain, role) warm-start model.

    Args:
      domains_: default every domain in `SPECS`.
      roles: which roles.
      tokenizer, cache_dir, force, eval_problems, eval_samples: see `train_warm_start`.
    Returns:
      The info dict of each model, in (domain, role) order.
    """
    infos = []
    for domain in domains_ or domains():
        for role in roles:
            spec = get_spec(domain, role)
            infos.append(
                train_warm_start(
                    spec,
                    tokenizer=tokenizer,
                    cache_dir=cache_dir,
                    force=force,
                    eval_problems=eval_problems,
                    eval_samples=eval_samples,
                )
            )
    return infos
