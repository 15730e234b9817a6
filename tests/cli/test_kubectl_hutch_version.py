"""``kubectl hutch version`` and ``--version`` print the CLI's own version, installed any way.

It looked up the distribution ``hutch`` by name, which only the development install has: from
the hutch-cli distribution (cli/pyproject.toml, the broker image's) it died with
PackageNotFoundError. Here the package runs in a real interpreter that sees hutch_cli's files
and the standard library only (``-S``: no site-packages, so no distribution's metadata at all).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import hutch_cli
import pytest

pytestmark = pytest.mark.broker  # starts an interpreter (docs/testing.md#test-levels)

CLI = Path(hutch_cli.__file__).resolve().parents[1]


@pytest.mark.parametrize("argv", [["version"], ["--version"]])
def test_the_version_is_the_clis_own_without_any_distribution(
    argv: list[str], tmp_path: Path
) -> None:
    script = (
        "import sys; sys.path[:0] = [sys.argv[1]]; "
        "from hutch_cli.kubectl_hutch import main; sys.exit(main(sys.argv[2:]))"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", script, str(CLI), *argv],
        cwd=tmp_path,  # not the checkout: its hutch.egg-info would be found from there
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"kubectl-hutch {hutch_cli.__version__}\n"


def test_the_clis_version_is_the_one_its_distribution_is_built_with() -> None:
    project = tomllib.loads((CLI / "pyproject.toml").read_text())["project"]
    assert project["name"] == "hutch-cli"
    assert hutch_cli.__version__ == project["version"]
