"""Name -> implementation tables for the stages a config chooses between.

A config names one implementation per stage (`config.credit.name = "rloo"`);
each registered implementation carries its default hyperparameters, which
become the stage's sub-config (`config.credit.rloo.*`). Asking for a name that
is not registered is an error listing the valid names, so a typo never falls
back silently to another algorithm.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Entry:
    """One registered implementation: its function, default hyperparameters, the
    batch fields it reads beyond the stage's standard ones (checked before it runs),
    and whether it takes the RL step (`step=`, e.g. a schedule)."""

    name: str
    fn: Callable[..., Any]
    defaults: Mapping[str, Any]
    requires: tuple[str, ...] = ()
    uses_step: bool = False


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
        **defaults: Any,
    ) -> Callable[[Callable], Callable]:
        """Decorator: `@REG.register("grpo", eps=1e-6)` registers fn with its defaults.

        `requires` names the extra batch fields fn reads (e.g. "first_mistake_B");
        `uses_step` says fn takes the RL step as the keyword argument `step`.
        """

        def wrap(fn: Callable) -> Callable:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = Entry(name, fn, dict(defaults), tuple(requires), uses_step)
            return fn

        return wrap

    def get(self, name: str) -> Entry:
        """The entry of `name`; ValueError listing the registered names if unknown."""
        if name not in self._entries:
            raise ValueError(f"unknown {self.kind} {name!r}; valid: {', '.join(self.names())}")
        return self._entries[name]

    def names(self) -> list[str]:
        return sorted(self._entries)

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
