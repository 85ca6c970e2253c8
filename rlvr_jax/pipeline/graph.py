"""A pipeline config's stage graph: the run order, each stage's start, its "stage:<name>" refs.

Read by the stage kinds and the pipeline runner; works on a ConfigDict or its
JSON dict, and imports nothing else of the pipeline (`pipeline.config` builds
and validates pipelines on top of it).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ml_collections

STAGE_REF_PREFIX = "stage:"


def stage_names(c: ml_collections.ConfigDict) -> list[str]:
    """The stages of `c.order`, in run order (`c` a ConfigDict or its JSON dict)."""
    return [n.strip() for n in str(c["order"]).split(",") if n.strip()]


def is_pipeline(c: ml_collections.ConfigDict) -> bool:
    """Whether `c` is a pipeline config (else a single-run RL config)."""
    return "stages" in c and "order" in c


def init_of(c: ml_collections.ConfigDict, name: str) -> str:
    """The stage (or "base") that stage `name` starts from."""
    names = stage_names(c)
    init = c.stages[name].init
    if init:
        return init
    i = names.index(name)
    return names[i - 1] if i else "base"


def stage_refs(value: str) -> list[str]:
    """The stage names a string field refers to with "stage:<name>"."""
    return re.findall(STAGE_REF_PREFIX + r"([A-Za-z0-9_]+)", value)
