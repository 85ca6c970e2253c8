"""The table of docs/design.md's "Where each plug-in lives": every registered plug-in by module.

  python scripts/plugin_map.py     # prints the markdown table

Read from the registries themselves (the module that defines each entry's
function or scheduler class), so tests/rl/test_plugin_entries.py can check the
docs against it.
"""

from __future__ import annotations

import collections
import sys


def plugin_map() -> str:
    """The markdown table: module -> the plug-ins it registers (stage and name)."""
    import rlvr_jax.rl.config  # noqa: F401  (registers every seed plug-in)
    from rlvr_jax.rl import credit, objectives, signals
    from rlvr_jax.rollout import ROLLOUTS
    from rlvr_jax.scheduling import SCHEDULERS

    by_module = collections.defaultdict(list)
    registries = (
        ("rollout", ROLLOUTS),
        ("signal", signals.SIGNALS),
        ("estimator", credit.ESTIMATORS),
        ("transform", credit.TRANSFORMS),
        ("loss", objectives.POLICY_LOSSES),
    )
    for stage, registry in registries:
        for name in registry.names():
            by_module[registry.get(name).fn.__module__].append(f"{stage} `{name}`")
    for name, cls in SCHEDULERS.items():
        by_module[cls.__module__].append(f"scheduler `{name}`")
    lines = ["| module | registers |", "|---|---|"]
    for module in sorted(by_module):
        path = module.removeprefix("rlvr_jax.").replace(".", "/") + ".py"
        lines.append(f"| `{path}` | {', '.join(by_module[module])} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(plugin_map())
    sys.exit(0)
