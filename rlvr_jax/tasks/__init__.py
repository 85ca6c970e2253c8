"""Verifiable tasks: `rlvr_jax.tasks.get(name, **options)` returns a seeded task.

Each task module registers its class with `register`; `get` validates the
options against the task's dataclass fields and lists the valid ones on a typo.
"""

from __future__ import annotations

import dataclasses
import importlib

from rlvr_jax.tasks.base import (
    CORRECT,
    MALFORMED,
    REASONS,
    TIMEOUT,
    WRONG_ANSWER,
    Problem,
    Task,
    Verdict,
    extract_answer,
)

# name -> module that defines and registers it (imported on first use).
_MODULES: dict[str, str] = {
    "countdown": "rlvr_jax.tasks.countdown",
    "arithmetic": "rlvr_jax.tasks.arithmetic",
    "multilingual_arithmetic": "rlvr_jax.tasks.multilingual",
    "multilingual_mix": "rlvr_jax.tasks.multilingual",
    "knights_knaves": "rlvr_jax.tasks.logic",
    "tool_lookup": "rlvr_jax.tasks.tools",
    "spy_describe": "rlvr_jax.tasks.spy",
    "math_file": "rlvr_jax.tasks.math_data",
    "mixture": "rlvr_jax.tasks.mixture",
    "code": "rlvr_jax.tasks.code",
    "code_synth": "rlvr_jax.tasks.code_synth",
}
_REGISTRY: dict[str, type[Task]] = {}


def register(cls: type[Task]) -> type[Task]:
    """Class decorator: makes `cls` available as `get(cls.name)`."""
    _REGISTRY[cls.name] = cls
    return cls


def names() -> list[str]:
    """Every registered task name."""
    for module in set(_MODULES.values()):
        importlib.import_module(module)
    return sorted(_REGISTRY)


def get(name: str, **options) -> Task:
    """Builds task `name` with `options` (its dataclass fields).

    Raises:
      ValueError: unknown task (lists the valid names) or unknown option (lists
        the task's valid options).
    """
    if name in _MODULES:
        importlib.import_module(_MODULES[name])
    if name not in _REGISTRY:
        raise ValueError(f"unknown task {name!r}; valid: {names()}")
    cls = _REGISTRY[name]
    valid = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"task {name!r} has no options {unknown}; valid: {valid}")
    return cls(**options)


__all__ = [
    "CORRECT",
    "MALFORMED",
    "REASONS",
    "TIMEOUT",
    "WRONG_ANSWER",
    "Problem",
    "Task",
    "Verdict",
    "extract_answer",
    "get",
    "names",
    "register",
]
