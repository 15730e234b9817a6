"""How pytest finds the plane's plugin: hutch-testing's pytest11 entry point, named as its module.

Why: every pytest run of the dev venv gets the plane's fixtures from the entry point, while
tests/conftest.py and e2e/conftest.py still name the module in ``pytest_plugins`` for venvs
installed before it. Both load it once only because the entry point's name is the module's own
dotted name; under any other name pytest stops with "Plugin already registered under a different
name". And an existing venv gets the entry point only if scripts/bootstrap.sh reinstalls
hutch-testing when testing/pyproject.toml changes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from hutch_localkube import binaries

REPO = binaries.REPO_ROOT
PLUGIN = "hutch_testing.localkube_plugin"
PROBE = """
def test_the_plane_plugin_is_registered_once(request):
    plugins = request.config.pluginmanager.get_plugins()
    ours = [p for p in plugins if getattr(p, "__name__", "") == "hutch_testing.localkube_plugin"]
    assert len(ours) == 1
    assert callable(ours[0].apiserver)
"""


def entry_points() -> dict[str, str]:
    project = tomllib.loads((REPO / "testing" / "pyproject.toml").read_text())["project"]
    return dict(project["entry-points"]["pytest11"])


def test_the_entry_point_is_named_as_the_module_the_conftests_list() -> None:
    assert entry_points() == {PLUGIN: PLUGIN}
    for conftest in ("tests/conftest.py", "e2e/conftest.py"):
        assert f'"{PLUGIN}"' in (REPO / conftest).read_text(), conftest


def test_bootstrap_reinstalls_when_the_testing_or_localkube_pyproject_changes() -> None:
    """The plugin imports hutch_localkube, its own distribution (localkube/pyproject.toml)."""
    text = (REPO / "scripts" / "bootstrap.sh").read_text()
    (stamp_line,) = [line for line in text.splitlines() if line.startswith("want=")]
    assert "testing/pyproject.toml" in stamp_line
    assert "localkube/pyproject.toml" in stamp_line
    assert "-e localkube" in text


def run_probe(tmp_path: Path, entry_point_name: str, *, conftest: bool) -> str:
    """pytest in a fresh dir whose sys.path holds a dist-info declaring the entry point."""
    site = tmp_path / "site"
    dist_info = site / "hutch_testing_probe-0.0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: hutch-testing-probe\n")
    (dist_info / "entry_points.txt").write_text(f"[pytest11]\n{entry_point_name} = {PLUGIN}\n")
    tests = tmp_path / "probe"
    tests.mkdir()
    (tests / "test_probe.py").write_text(PROBE)
    if conftest:
        (tests / "conftest.py").write_text(f"pytest_plugins = [{PLUGIN!r}]\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--rootdir={tests}",
         str(tests)],
        capture_output=True, text=True, env=env, cwd=tests, timeout=50, check=False,
    )  # fmt: skip
    return done.stdout + done.stderr


@pytest.mark.broker  # starts processes (hutch_testing.levels)
@pytest.mark.timeout(120)
@pytest.mark.parametrize("conftest", [False, True], ids=["entry-point-alone", "with-conftest"])
def test_the_entry_point_loads_the_plugin_once(tmp_path: Path, conftest: bool) -> None:
    output = run_probe(tmp_path, PLUGIN, conftest=conftest)
    assert "1 passed" in output, output


@pytest.mark.broker  # starts processes (hutch_testing.levels)
@pytest.mark.timeout(120)
def test_another_entry_point_name_beside_the_conftest_fails(tmp_path: Path) -> None:
    """The failure the module-named entry point avoids (pins the reason it is named so)."""
    output = run_probe(tmp_path, "hutch_plane", conftest=True)
    assert "already registered under a different name" in output, output
