"""The code-health numbers of the plug-in redesign (issue 30), from the source alone.

  python scripts/code_health.py            # markdown table and the lists behind it
  python scripts/code_health.py --json     # the same, machine-readable

Counts, over rlvr_jax/ (pure `ast`, nothing is imported):
- module import cycles: strongly connected components of the module graph, whose
  edges are every import of an rlvr_jax module, those inside function bodies too
  (a lazy import is still a dependency). `from rlvr_jax.a import b` is an edge to
  the submodule `rlvr_jax.a.b` when it exists, else to the package `rlvr_jax.a`;
  the implicit import of a parent package is not an edge.
- modules over 400 lines, functions over 80 lines (a def's whole span, docstring
  included; nested defs counted on their own too),
- imports inside function bodies, by package,
- `duplicates` pairs on rlvr_jax/ and tests/ (when the command is on PATH).
tests/test_layering.py uses `module_graph` and `cycles` from here.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rlvr_jax"
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 80


def module_name(path: Path) -> str:
    """rlvr_jax/rl/config.py -> rlvr_jax.rl.config; a package's __init__.py -> the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imported(node: ast.AST, modules: dict[str, Path]) -> list[str]:
    """The rlvr_jax modules an Import / ImportFrom node imports."""
    out = []
    if isinstance(node, ast.Import):
        out = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        for a in node.names:
            sub = f"{node.module}.{a.name}"
            out.append(sub if sub in modules else node.module)
    return [m for m in out if m in modules]


def module_graph() -> dict[str, dict[str, int]]:
    """module -> imported module -> first line of the import, over every import."""
    modules = _modules()
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, {})
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for other in _imported(node, modules):
                if other != name:
                    edges.setdefault(other, node.lineno)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def describe_cycle(graph, component: list[str]) -> str:
    """The component's edges, 'a (line n) -> b', one per line."""
    members = set(component)
    lines = [
        f"  {a}:{graph[a][b]} imports {b}"
        for a in component
        for b in sorted(graph[a])
        if b in members
    ]
    return "\n".join([" <-> ".join(component), *lines])


def _function_lengths():
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{module_name(path)}.{node.name}", node.end_lineno - node.lineno + 1


def _body_imports():
    for path in sorted(PACKAGE.rglob("*.py")):
        seen = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)) and id(inner) not in seen:
                        seen.add(id(inner))
                        yield module_name(path), inner.lineno


def _duplicates() -> int | None:
    if shutil.which("duplicates") is None:
        return None
    total = 0
    for folder in ("rlvr_jax", "tests"):
        out = subprocess.run(
            ["duplicates", "--repo", str(ROOT / folder), "--most", "1", "--seconds", "120"],
            capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip
        first = out.splitlines()[0] if out else ""
        m = re.match(r"(\d+) pairs?", first)
        total += int(m.group(1)) if m else 0
    return total


def measure(with_duplicates: bool = True) -> dict:
    graph = module_graph()
    comps = cycles(graph)
    lines = {module_name(p): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    long_modules = sorted((n, k) for n, k in lines.items() if k > MAX_MODULE_LINES)
    long_functions = sorted((n, k) for n, k in _function_lengths() if k > MAX_FUNCTION_LINES)
    body = list(_body_imports())
    by_package = Counter(".".join(m.split(".")[:2]) for m, _ in body)
    return {
        "module_cycles": [describe_cycle(graph, c) for c in comps],
        "modules_over_400_lines": long_modules,
        "functions_over_80_lines": long_functions,
        "body_imports": len(body),
        "body_imports_by_package": dict(sorted(by_package.items())),
        "duplicates_pairs": _duplicates() if with_duplicates else None,
    }


def markdown(m: dict) -> str:
    dup = "n/a" if m["duplicates_pairs"] is None else m["duplicates_pairs"]
    rows = [
        "| measure | count |",
        "|---|---|",
        f"| module import cycles | {len(m['module_cycles'])} |",
        f"| modules over {MAX_MODULE_LINES} lines | {len(m['modules_over_400_lines'])} |",
        f"| functions over {MAX_FUNCTION_LINES} lines | {len(m['functions_over_80_lines'])} |",
        f"| imports inside function bodies | {m['body_imports']} |",
        f"| `duplicates` pairs (rlvr_jax/ + tests/) | {dup} |",
        "",
        "Module cycles:",
        *(f"```\n{c}\n```" for c in m["module_cycles"]),
        "",
        "Modules over the limit: "
        + ", ".join(f"{n} ({k})" for n, k in m["modules_over_400_lines"]),
        "",
        "Functions over the limit: "
        + ", ".join(f"{n} ({k})" for n, k in m["functions_over_80_lines"]),
        "",
        "Body imports by package: "
        + ", ".join(f"{n} {k}" for n, k in m["body_imports_by_package"].items()),
    ]
    return "\n".join(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-duplicates", action="store_true", help="skip the duplicates count")
    args = p.parse_args(argv)
    m = measure(with_duplicates=not args.no_duplicates)
    print(json.dumps(m, indent=1) if args.json else markdown(m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
