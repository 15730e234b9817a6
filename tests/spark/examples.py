"""An example job of examples/, loaded as a module by its file's path.

Why: the examples are scripts with dashes in their names (``spark-type-counts.py``), shipped as
they are in a ConfigMap, not a package anyone imports; the tests that check their logic load
them by path, each under a module name of its own.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    """examples/<name> (a file name: ``"spark-type-counts.py"``) as a fresh module."""
    path = EXAMPLES / name
    spec = importlib.util.spec_from_file_location(path.stem.replace("-", "_"), path)
    assert spec is not None and spec.loader is not None, f"no example {path}"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
