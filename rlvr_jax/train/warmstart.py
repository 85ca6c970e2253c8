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
temporary name (`<name>.tmp<pid>`) and renamed when complete.

Interrupted and concurrent training: while a model trains, its SFT checkpoints
live in `<name>.sft/` (every tenth of the steps), so a killed run's rerun
resumes there; both it and `<name>.lock` are removed once the model is complete.
The lock lets one process train a model at a time: another process that needs
the same model waits for it and then reuses the cache. Temporary directories
left by dead processes are removed before training.

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

from rlvr_jax.locking import FileLock, pid_alive
from rlvr_jax.models import ModelConfig, init_model, load_pretrained, save_pretrained
from rlvr_jax.models.transformer import Transformer
from rlvr_jax.tokenizers import Tokenizer
from rlvr_jax.train import warmstart_shipped
from rlvr_jax.train.evaluate import evaluate_task
from rlvr_jax.train.judge import evaluate_judge
from rlvr_jax.train.multiturn import episode_example, evaluate_episodes
from rlvr_jax.train.sft import train_sft, train_sft_encoded

# Re-exported: the specs and the tokenizer helpers live in their own modules.
from rlvr_jax.train.warmstart_specs import (  # noqa: F401
    REFERENCE_TURNS,
    ROLES,
    SPECS,
    TASK_OPTIONS,
    WarmStartSpec,
    domains,
    get_spec,
    spec_payload,
)
from rlvr_jax.train.warmstart_tokenizer import (  # noqa: F401
    default_tokenizer,
    load_model_tokenizer,
    save_tokenizer,
    tokenizer_fingerprint,
)

log = logging.getLogger(__name__)

DEFAULT_CACHE_DIR = Path("~/.cache/rlvr_jax/warmstart")
_FORMAT_VERSION = 1  # bump when training code changes what a spec produces
_INFO_FILE = "warmstart.json"


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
    """(prompt, target) pairs of the spec's train problems (`WarmStartSpec.sft_examples`)."""
    return spec.sft_examples()


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

    A model missing from the cache but shipped in the repository
    (`warmstart_shipped`) is installed from there instead of trained, unless `force`.

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
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path.with_name(path.name + ".lock"), what=f"warm start {path.name}")
    lock.acquire(blocking=True)  # another process training this model: wait, then reuse it
    try:
        if (path / _INFO_FILE).is_file() and not force:
            log.info("warm start %s/%s: reusing %s", spec.domain, spec.role, path)
            return json.loads((path / _INFO_FILE).read_text())
        _remove_stale_tmp(path)
        if not force and warmstart_shipped.install(path):
            info = json.loads((path / _INFO_FILE).read_text())
        else:
            info = _train_and_save(spec, tokenizer, path, eval_problems, eval_samples)
        # Safe to unlink while held: a waiter that gets the old file finds the model done.
        lock.path.unlink(missing_ok=True)
        return info
    finally:
        lock.release()


def _remove_stale_tmp(path: Path) -> None:
    """Removes `<name>.tmp<pid>` directories whose process is gone (killed mid-save)."""
    for tmp in path.parent.glob(path.name + ".tmp*"):
        pid = tmp.name[len(path.name) + 4 :]
        if pid.isdigit() and not pid_alive(int(pid)):
            log.info("removing %s, left by a killed warm-start run", tmp)
            shutil.rmtree(tmp, ignore_errors=True)


def _train_and_save(
    spec: WarmStartSpec, tokenizer: Tokenizer, path: Path, eval_problems: int, eval_samples: int
) -> dict[str, Any]:
    """Trains, evaluates and writes the model of `spec` to `path` (resuming its SFT)."""
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
    sft_dir = path.with_name(path.name + ".sft")  # SFT checkpoints: a killed run resumes
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
        checkpoint_dir=sft_dir,
        checkpoint_every=max(1, spec.steps // 10),
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
        if spec.role == "judge":  # agreement with the exact locator, not pass@k
            info["eval"] = evaluate_judge(model, tokenizer, task, seed=spec.seed)
        else:
            info["eval"] = evaluate(model, tokenizer, task, **kw)
        info["eval_seconds"] = round(time.perf_counter() - start, 1)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    save_pretrained(model, config, tmp)
    save_tokenizer(tokenizer, tmp)
    (tmp / _INFO_FILE).write_text(json.dumps(info, indent=2))
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)
    shutil.rmtree(sft_dir, ignore_errors=True)
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
      train_if_missing: else raise FileNotFoundError when the cache lacks the model
        and none is shipped (a shipped one is installed either way).
    Returns:
      WarmStart(model, config, tokenizer (loaded from the model directory), path, info).
    """
    spec = get_spec(domain, role)
    tokenizer = tokenizer or default_tokenizer()
    path = model_dir(spec, tokenizer, cache_dir)
    if not (path / _INFO_FILE).is_file():
        if not train_if_missing and not warmstart_shipped.shipped(path.name):
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
            if (domain, role) not in SPECS:  # judges exist for step-locator tasks only
                continue
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
