"""A mixture of tasks: each problem is drawn from one domain task by fixed proportions.

Mix RL (Consolidating RLVR across domains) trains one policy on the pooled data
of several domains with domain proportions; MOPD routes each prompt to its
domain's teacher. Both need to know each problem's domain:

  task = tasks.get("mixture", domains=("countdown", "arithmetic"), proportions=(0.7, 0.3))
  p = task.problem(5, "train")
  p.metadata["domain"]          # "countdown" or "arithmetic"
  task.verify(p, response)      # the domain task's verifier

Problem `index` of a split picks its domain with an rng seeded by (options,
split, index), then is that domain's problem `index` of the same split, so
problems of one domain never repeat and train/test stay disjoint. The realised
shares match `proportions` in expectation (ours: i.i.d. draws, not a fixed
interleaving). Evaluation reports per-domain pass@k from `metadata["domain"]`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from rlvr_jax import tasks
from rlvr_jax.tasks import register
from rlvr_jax.tasks.base import Problem, Task, Verdict

DOMAIN_KEY = "domain"  # metadata key naming a problem's domain
_ID_KEY = "domain_problem_id"  # metadata key: the problem's id in its domain task


@register
@dataclasses.dataclass(frozen=True)
class Mixture(Task):
    """Problems of several domain tasks, each drawn by `proportions`.

    Attributes:
      domains: task names (`rlvr_jax.tasks.get`), at least one, no repeats.
      proportions: one share per domain, ≥ 0, normalised to sum 1; () = equal shares.
      domain_options: domain -> that task's options (a dict, or a JSON object
        string); a domain without an entry uses its task's defaults. The
        mixture's `seed` is passed on unless the options set one.
    """

    name: ClassVar[str] = "mixture"
    domains: tuple[str, ...] = ("countdown", "arithmetic")
    proportions: tuple[float, ...] = ()
    domain_options: Any = ()

    def __post_init__(self):
        # JSON configs give lists and dicts: store tuples, so the options hash into
        # the problem seed (Task.rng) the same way however they were written.
        domains = tuple(str(d) for d in self.domains)
        if not domains or len(set(domains)) != len(domains):
            raise ValueError(f"mixture domains must be distinct and non-empty, got {domains}")
        if self.name in domains:
            raise ValueError("a mixture cannot contain itself")
        shares = tuple(float(p) for p in self.proportions) or (1.0,) * len(domains)
        if len(shares) != len(domains) or min(shares) < 0 or sum(shares) <= 0:
            raise ValueError(
                f"mixture proportions {self.proportions} must give one share >= 0 per domain "
                f"of {domains} (not all 0)"
            )
        options = self.domain_options
        if isinstance(options, str):
            options = json.loads(options) if options else {}
        if isinstance(options, Mapping):
            unknown = sorted(set(options) - set(domains))
            if unknown:
                raise ValueError(f"mixture domain_options for {unknown}: not in domains {domains}")
            options = tuple(
                (d, tuple(sorted(dict(options[d]).items()))) for d in domains if d in options
            )
        object.__setattr__(self, "domains", domains)
        object.__setattr__(self, "proportions", tuple(s / sum(shares) for s in shares))
        object.__setattr__(self, "domain_options", tuple(options))
        self.domain_tasks  # noqa: B018 - builds the domain tasks now: bad options fail here

    @functools.cached_property
    def domain_tasks(self) -> dict[str, Task]:
        """domain -> its task."""
        opts = {d: dict(o) for d, o in self.domain_options}
        out = {}
        for d in self.domains:
            kw = {"seed": self.seed, **opts.get(d, {})}
            out[d] = tasks.get(d, **kw)
        return out

    def domain_of(self, problem: Problem) -> str:
        """The domain a mixture problem came from."""
        return problem.metadata[DOMAIN_KEY]

    def domain_at(self, index: int, split: str = "train") -> str:
        """The domain of problem `index` of `split` (without generating the problem)."""
        rng = self.rng(index, split)
        return self.domains[int(rng.choice(len(self.domains), p=np.asarray(self.proportions)))]

    def problem(self, index: int, split: str = "train") -> Problem:
        domain = self.domain_at(index, split)
        sub = self.domain_tasks[domain].problem(index, split)
        clash = {DOMAIN_KEY, _ID_KEY} & set(sub.metadata)
        if clash:
            raise ValueError(f"task {domain!r} metadata already has the mixture's keys {clash}")
        return Problem(
            id=self.problem_id(index, split),
            prompt=sub.prompt,
            answer=sub.answer,
            solution=sub.solution,
            metadata={**sub.metadata, DOMAIN_KEY: domain, _ID_KEY: sub.id},
        )

    def verify(self, problem: Problem, response: str) -> Verdict:
        """The domain task's verdict on the problem as that task generated it."""
        meta = dict(problem.metadata)
        domain, sub_id = meta.pop(DOMAIN_KEY), meta.pop(_ID_KEY)
        if domain not in self.domain_tasks:
            raise ValueError(f"problem {problem.id} is of domain {domain!r}, not in {self.domains}")
        sub = dataclasses.replace(problem, id=sub_id, metadata=meta)
        return self.domain_tasks[domain].verify(sub, response)
