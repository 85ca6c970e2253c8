"""The package layering the README declares: no package imports one above it, no cycles.

Every import in rlvr_jax/ counts, including those inside functions (a lazy
import is still a dependency). A new package must be added to LAYERS and to the
README's layering line. Cycles are checked between packages and between modules
(scripts/code_health.py's module graph): a loop inside one package counts too.
"""

import ast
import importlib.util
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rlvr_jax"

# Bottom -> top. A package may import from its own layer (without a cycle) or below.
LAYERS = (
    ("registry", "pyfile", "locking", "sandbox", "tasks", "tokenizers", "sharding", "distributed"),
    ("models", "data"),
    ("core", "optim"),
    ("sampling",),
    ("rollout",),
    ("scheduling",),
    ("train",),
    ("eval",),
    ("run",),
    ("rl",),
    ("pipeline",),
    ("main", "plan", "plan_engine", "testing", "analysis", "repro"),
)
LEVEL = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _unit(module: str) -> str | None:
    """The layering unit of a dotted module name: rlvr_jax.<unit>[...]; None outside."""
    parts = module.split(".")
    if parts[0] != "rlvr_jax" or len(parts) < 2:
        return None
    return parts[1]


def _imports(path: Path) -> set[str]:
    """Every rlvr_jax unit the file at `path` imports (any nesting level)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(_unit(a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "rlvr_jax":  # from rlvr_jax import sharding, tasks
                out.update(a.name for a in node.names if a.name != "__version__")
            else:
                out.add(_unit(node.module))
    return out - {None}


def _edges() -> dict[str, dict[str, list[str]]]:
    """unit -> imported unit -> the files that import it."""
    edges: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts == ("__init__.py",):
            continue
        unit = rel.parts[0].removesuffix(".py")
        for other in _imports(path) - {unit}:
            edges[unit][other].append(str(path.relative_to(ROOT)))
    return edges


def test_every_unit_is_in_a_layer():
    units = {p.name.removesuffix(".py") for p in PACKAGE.iterdir()}
    units = {u for u in units if not u.startswith("__") and u != "assets"}
    missing = sorted(units - set(LEVEL))
    assert not missing, f"add {missing} to LAYERS (tests/test_layering.py) and the README"


def test_no_package_imports_one_above_it():
    upward = [
        f"{unit} (layer {LEVEL[unit]}) imports {other} (layer {LEVEL[other]}): {files}"
        for unit, deps in _edges().items()
        for other, files in deps.items()
        if LEVEL.get(other, -1) > LEVEL.get(unit, len(LAYERS))  # unknown: the test above
    ]
    assert not upward, "\n".join(upward)


def test_no_import_cycle_between_packages():
    edges = _edges()
    cycles = []

    def visit(unit, path):
        for other in edges.get(unit, {}):
            if other == path[0]:
                cycles.append(" -> ".join([*path, other]))
            elif other not in path and other > path[0]:  # each cycle once, from its least unit
                visit(other, [*path, other])

    for unit in sorted(edges):
        visit(unit, [unit])
    assert not cycles, "\n".join(cycles)


def test_the_readme_declares_this_layering():
    line = " → ".join(", ".join(layer) for layer in LAYERS)
    readme = re.sub(r"\s+", " ", (ROOT / "README.md").read_text())
    assert line in readme, f"README.md must state the layering: {line}"


def _code_health():
    spec = importlib.util.spec_from_file_location("code_health", ROOT / "scripts/code_health.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cycles_finds_each_loop_once():
    health = _code_health()
    graph = {
        "a": {"b": 1},
        "b": {"c": 2},
        "c": {"a": 3, "d": 4},
        "d": {},
        "e": {"f": 1},
        "f": {"e": 1},
    }
    assert health.cycles(graph) == [["a", "b", "c"], ["e", "f"]]
    assert health.cycles({"a": {"b": 1}, "b": {}}) == []


def test_no_import_cycle_between_modules():
    health = _code_health()
    graph = health.module_graph()
    assert "rlvr_jax.rl.trainer" in graph["rlvr_jax.pipeline.rl_stage"]  # the graph sees imports
    found = health.cycles(graph)
    assert not found, "\n".join(health.describe_cycle(graph, c) for c in found)
