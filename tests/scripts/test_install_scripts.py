"""`make test` without root: the install steps check before they ask for root.

Why: `make test` runs scripts/install-rabbitmq.sh and scripts/install-node-deps.sh first. A
developer without root must get through them when the packages are already there, and, when
they are not, get a warning (the tests that need them skip, naming the script) rather than a
stopped run; only where those tests may not skip (CI, HUTCH_*_REQUIRED) does a missing package
fail the step. The scripts run here against stand-ins for id, dpkg-query and apt on PATH, so
no package is installed and nothing needs root; the root path (apt, policy-rc.d) is not run.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hutch_localkube import binaries

pytestmark = pytest.mark.broker  # level broker: runs the install scripts

SCRIPTS = binaries.REPO_ROOT / "scripts"
STUBS = {
    "id": 'echo "${STUB_UID}"',
    "dpkg-query": (
        'if [ -e "${STUB_DIR}/installed" ]; then echo "install ok installed 3.10.8-1.1"; '
        "else exit 1; fi"
    ),
    "apt-get": 'echo "apt-get $*" >> "${STUB_DIR}/apt.log"',
    "apt-cache": 'echo "apt-cache $*" >> "${STUB_DIR}/apt.log"',
    "pgrep": "exit 1",
}
# The variable that makes each script's missing package an error, as the tests see it.
REQUIRED = {"install-rabbitmq.sh": "CI", "install-node-deps.sh": "HUTCH_K8S_REQUIRED"}


def run(tmp_path: Path, script: str, *, installed: bool, **env: str) -> tuple[int, str, str]:
    """The script as uid 1000; returns its exit status, its stderr and the apt calls it made."""
    stub_bin = tmp_path / "bin"
    stub_bin.mkdir(exist_ok=True)
    for name, body in STUBS.items():
        (stub_bin / name).write_text(f"#!/bin/sh\n{body}\n")
        (stub_bin / name).chmod(0o755)
    if installed:
        (tmp_path / "installed").touch()
    done = subprocess.run(
        ["bash", str(SCRIPTS / script)],
        env={"PATH": f"{stub_bin}:/usr/bin:/bin", "STUB_DIR": str(tmp_path), "STUB_UID": "1000",
             **env},
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    apt_log = tmp_path / "apt.log"
    return done.returncode, done.stderr, apt_log.read_text() if apt_log.exists() else ""


@pytest.mark.parametrize("script", sorted(REQUIRED))
def test_installed_packages_need_no_root_and_no_apt(tmp_path: Path, script: str) -> None:
    code, stderr, apt = run(tmp_path, script, installed=True)
    assert (code, apt) == (0, ""), stderr


@pytest.mark.parametrize("script", sorted(REQUIRED))
def test_a_missing_package_without_root_is_a_warning_locally(tmp_path: Path, script: str) -> None:
    code, stderr, apt = run(tmp_path, script, installed=False)
    assert (code, apt) == (0, ""), stderr
    assert "root" in stderr
    assert "skip" in stderr


@pytest.mark.parametrize("script", sorted(REQUIRED))
def test_a_missing_package_without_root_fails_where_tests_may_not_skip(
    tmp_path: Path, script: str
) -> None:
    code, stderr, apt = run(tmp_path, script, installed=False, **{REQUIRED[script]: "1"})
    assert code != 0
    assert apt == ""
    assert "root" in stderr
