"""What the production wheel and images carry: the Hutch packages and hutchctl, no test tooling.

Why: hutch_testing (launchers, the plane's chain, side-by-side harnesses) shipped in the hutch
wheel and so in the broker, operator and Spark images, and spark/jobs/ slipped in as a stray
top-level ``jobs`` package. Users install that wheel; the images are what runs in their
clusters. hutch_testing is now its own distribution (testing/pyproject.toml) and the Dockerfiles
copy only what the wheel is built from.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from hutch_demo import clusters

REPO = clusters.REPO_ROOT
# *.so: the development install's in-place build of the C extension; the wheel must build its own.
IGNORED = (".git", ".venv", "__pycache__", "*.egg-info", "build", "test-artifacts", ".*cache",
           "*.so")  # fmt: skip
DOCKERFILES = [
    "docker/broker.Dockerfile",
    "docker/operator.Dockerfile",
    "docker/spark-operator.Dockerfile",
    "spark/jobs/Dockerfile",
]


@pytest.mark.broker  # starts processes (hutch_testing.levels)
@pytest.mark.timeout(180)  # pip fetches setuptools for the isolated build the first time
def test_the_hutch_wheel_holds_the_product_packages_and_no_test_tooling(tmp_path: Path) -> None:
    """Built from a copy of the whole tree (testing/ included), so setuptools' build/ stays out
    of the checkout and a package found by accident would show."""
    source = tmp_path / "src"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*IGNORED))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path),
         str(source)],
        check=True, capture_output=True, timeout=170,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("hutch-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.startswith("hutch-")}
    assert tops == {"hutch_broker", "hutch_operator", "hutch_spark", "hutch_cli"}
    # hutchctl is a console script of the product wheel, not of the test tooling
    entry_points = zipfile.ZipFile(wheel).read("hutch-0.1.0.dist-info/entry_points.txt").decode()
    assert "hutchctl = hutch_cli.hutchctl:main" in entry_points
    # kubectl finds the plugin as kubectl-hutch on PATH (docs/kubectl-hutch.md)
    assert "kubectl-hutch = hutch_cli.kubectl_hutch:main" in entry_points
    assert "hutch_cli/perftest.py" in names  # the perf-test Job runs it from the broker image
    assert "hutch_spark/jobs/windowed_counts.py" in names  # the job's module is in it
    # the broker's C extensions, compiled by the build (setup.py; optional only without a compiler)
    assert [n for n in names if n.startswith("hutch_broker/store/_runs.") and n.endswith(".so")]
    assert [
        n for n in names if n.startswith("hutch_broker/protocol/_content.") and n.endswith(".so")
    ]
    # the Web UI's files are package data (pyproject's [tool.setuptools.package-data])
    assert {
        "hutch_broker/admin/ui/static/index.html",
        "hutch_broker/admin/ui/static/style.css",
        "hutch_broker/admin/ui/static/js/app.js",
        "hutch_broker/admin/ui/static/js/pages/queues.js",
    } <= set(names)


def test_no_image_copies_the_test_tooling() -> None:
    for rel in DOCKERFILES:
        copies = [
            line.split()[1:-1]
            for line in (REPO / rel).read_text().splitlines()
            if line.startswith("COPY ") and "--from=" not in line
        ]
        sources = {source.rstrip("/") for words in copies for source in words}
        assert "testing" not in sources, rel
        assert "tests" not in sources, rel
        assert "localkube" not in sources, rel


def test_each_image_copies_the_packages_its_console_scripts_run() -> None:
    """Each image builds the distributions of the directories it copies (broker/pyproject.toml
    and so on); a console script they declare must run a package the image also copies. The
    broker image carries hutchctl (cli/), which the perf-test Job runs in it."""
    for rel in ("docker/broker.Dockerfile", "docker/operator.Dockerfile", "spark/jobs/Dockerfile"):
        copied = {
            line.split()[1].rstrip("/")
            for line in (REPO / rel).read_text().splitlines()
            if line.startswith("COPY ") and "--from=" not in line and line.split()[1].endswith("/")
        }
        packages = {f"hutch_{part}" for part in copied}
        for part in copied:
            project = tomllib.loads((REPO / part / "pyproject.toml").read_text())["project"]
            for script, target in project.get("scripts", {}).items():
                assert target.split(".")[0] in packages, f"{rel}: {script} = {target}"
    assert "cli" in {
        line.split()[1].rstrip("/")
        for line in (REPO / "docker/broker.Dockerfile").read_text().splitlines()
        if line.startswith("COPY ")
    }
