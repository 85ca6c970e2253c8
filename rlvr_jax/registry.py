"""Name -> implementation tables for the stages a config chooses between.

A config names one implementation per stage (`config.credit.name = "rloo"`);
each registered implementation carries its default hyperparameters, which
become the stage's sub-config (`config.credit.rloo.*`). Asking for a name that
is not registered is an error listing the valid names, so a typo never falls
back silently to another algorithm.

An entry is the single home of what a plug-in knows: besides its function and
options it carries its own config `check` and its declared facts (the batch
fields it reads and adds, whether its rows are off-policy, whether it is
label-free, ...). `rl.config.validate` loops over the chosen entries; no
central file names a plug-in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

# A fact that may depend on the plug-in's options: a value, or fn(options) -> value.
Fact = Any


@dataclasses.dataclass(frozen=True)
class Entry:
    """One registered implementation and what it declares about itself.

    Attributes:
      name, fn, defaults: the registry name, the implementation and its default
        hyperparameters (the sub-config `config.<stage>.<name>.*`).
      requires: batch fields it reads beyond the stage's standard ones (checked
        before it runs and by `validate`).
      uses_step: fn takes the RL step (`step=`, e.g. a schedule).
      provides: batch (or per-row info) fields it adds.
      check: `check(config)`, its own fields' ranges and cross-field constraints;
        raises ValueError naming the field.
      label_free: never reads the verifier's labels (may train on test prompts).
      off_policy: its rows were sampled from another context or weights than
        π_old (the trainer must score π_old itself); a bool or fn(options).
      group_relative: its baseline is the group's other rollouts (G = 1 gives a
        zero advantage); a bool or fn(options).
      minibatch_stats: fn(mb, **hparams) -> {name: scalar}, statistics over the
        whole minibatch a loss needs before its micro-batches run (`minibatch=`).
      asynchronous: a rollout plug-in that may run in the asynchronous rollout
        worker (`rl.async_loop`): it samples only with the sampler it is given and
        keeps no state across steps.
    """

    name: str
    fn: Callable[..., Any]
    defaults: Mapping[str, Any]
    requires: tuple[str, ...] = ()
    uses_step: bool = False
    provides: tuple[str, ...] = ()
    check: Callable[[Any], None] | None = None
    label_free: bool = False
    off_policy: Fact = False
    group_relative: Fact = False
    minibatch_stats: Callable[..., dict] | None = None
    asynchronous: bool = False

    def fact(self, name: str, options: Mapping[str, Any]) -> Any:
        """The declared fact `name` for these options (calls it if it is a function)."""
        value = getattr(self, name)
        return value(options) if callable(value) else value


class Registry:
    """A table of implementations of one stage (e.g. "advantage estimator")."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry] = {}

    def register(
        self,
        name: str,
        *,
        requires: tuple[str, ...] = (),
        uses_step: bool = False,
        provides: tuple[str, ...] = (),
        check: Callable[[Any], None] | None = None,
        label_free: bool = False,
        off_policy: Fact = False,
        group_relative: Fact = False,
        minibatch_stats: Callable[..., dict] | None = None,
        asynchronous: bool = False,
        **defaults: Any,
    ) -> Callable[[Callable], Callable]:
        """Decorator: `@REG.register("grpo", eps=1e-6)` registers fn with its defaults.

        `requires` names the extra batch fields fn reads (e.g. "first_mistake_B");
        `uses_step` says fn takes the RL step as the keyword argument `step`; the
        other keywords are the facts of `Entry`; the rest are fn's defaults.
        """

        def wrap(fn: Callable) -> Callable:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = Entry(
                name, fn, dict(defaults), tuple(requires), uses_step, tuple(provides),
                check, label_free, off_policy, group_relative, minibatch_stats, asynchronous,
            )  # fmt: skip
            return fn

        return wrap

    def get(self, name: str) -> Entry:
        """The entry of `name`; ValueError listing the registered names if unknown."""
        if name not in self._entries:
            raise ValueError(f"unknown {self.kind} {name!r}; valid: {', '.join(self.names())}")
        return self._entries[name]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def entries(self) -> list[Entry]:
        """Every entry, by name."""
        return [self._entries[n] for n in self.names()]

    def providers(self, field: str) -> list[str]:
        """The entries that declare they provide batch field `field`, in registration order."""
        return [e.name for e in self._entries.values() if field in e.provides]

    def check_requires(self, name: str, available) -> None:
        """ValueError naming the fields `name` needs that `available` lacks."""
        missing = [f for f in self.get(name).requires if f not in available]
        if missing:
            raise ValueError(
                f"{self.kind} {name!r} needs batch fields {missing}; the batch has "
                f"{sorted(available)} (configure a scorer that provides them)"
            )

    def __contains__(self, name: str) -> bool:
        return name in self._entries


# Checks a plug-in's `check(config)` uses for its own options; the errors name the field.


def one_of(field: str, value: Any, valid) -> None:
    """ValueError "config.<field> = value; valid: ..." unless value is in `valid`."""
    if value not in valid:
        raise ValueError(f"config.{field} = {value!r}; valid: {', '.join(map(str, valid))}")


def in_range(section: str, options: Mapping[str, Any], field: str, lo, hi, lo_open=False) -> None:
    """ValueError naming config.<section>.<field> unless its value is in [lo, hi] ((lo, hi])."""
    v = options[field]
    if v < lo or v > hi or (lo_open and v == lo):
        bound = f"({lo}, {hi}]" if lo_open else f"[{lo}, {hi}]"
        raise ValueError(f"config.{section}.{field} = {v!r}; must be in {bound}")
