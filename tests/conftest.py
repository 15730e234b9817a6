"""Root test configuration: registers the shared pytest plugins.

The Kubernetes control-plane plugin lives in tests/k8s/plane.py. tests/ has no __init__.py and
pytest runs with --import-mode=importlib, so the plugin is loaded by path under a unique module
name and then registered by that name (e2e/conftest.py does the same).
"""

import importlib.util
import sys
from pathlib import Path


def _load_by_path(module_name: str, path: Path) -> None:
    """Imports a plugin file once under ``module_name`` so ``pytest_plugins`` can name it."""
    if module_name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)


_load_by_path("hutch_k8s_plane", Path(__file__).parent / "k8s" / "plane.py")

pytest_plugins = ["hutch_k8s_plane", "hutch_testing.pytest_plugin"]
