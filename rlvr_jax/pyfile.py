"""Loads a Python file by path as a module: experiment configs, reproduction declarations.

Experiment files live outside the package (`experiments/<slug>/*.py`), so they are
loaded by path, not imported: `--config=` files, a page's `repro.py`, and one
experiment file built from another (`experiments/cliff/cliff_noisy.py`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load(path: str | Path, name: str | None = None) -> ModuleType:
    """The module of the file at `path` (run fresh on every call; not in sys.modules).

    Args:
      path: a .py file.
      name: the module's __name__ (default: "_file_" + the file's stem).

    Raises:
      FileNotFoundError naming the path.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    spec = importlib.util.spec_from_file_location(name or f"_file_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
