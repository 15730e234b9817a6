"""e2e fixtures: the quickstart's chain (hutch_demo.chain) on a cluster with real Pods.

Why: the e2e suite checks the mission end to end through the very steps the quickstart runs:
CRDs, the operator installed with Helm (its Pod), the Broker from examples/broker.yaml (its
StatefulSet's Pod), the examples' topology, then per-test objects. One plane, one operator
release and two Brokers serve the whole run (``hutch`` from the examples, ``hutch-small`` for
the watermark test), so the suite pays the start-up once.

Where: the local plane's ``node`` tier by default (hutch_localkube: a real kubelet and
containerd; docs/real-node.md). scripts/test.sh runs e2e in the pytest session of the node
level's real-node tests (node+e2e; the control-plane-only tests run beside it, in a process of
their own: docs/testing.md#how-the-node-level-runs): the plane plugin orders the e2e tests
after the node-tier tests (marker ``k8s_node``), so they run on the node plane those started,
and they do not run once a test of that session has failed (the levels fail fast).
``--kubeconfig PATH`` or ``HUTCH_E2E_KUBECONFIG`` targets any cluster instead (kind, with the
images loaded by ``kind load docker-image``). Either way the brokers are reached through
``kubectl port-forward`` on loopback. Under ``HUTCH_K8S_REQUIRED=1`` (CI) a node that cannot
start, or Spark that cannot run, fails the run; locally those tests skip with the reason.
"""

from __future__ import annotations

import datetime
import os
import secrets
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hutch_demo import chain, clusters, summaries

# Also hutch-testing's pytest11 entry point, under this same name: pytest registers it once.
pytest_plugins = ["hutch_testing.localkube_plugin"]

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
E2E_TIMEOUT = 300  # seconds per test on a cluster that is up
# The first local test also pays for the node plane (a cold one debootstraps and builds images).
LOCAL_E2E_TIMEOUT = 600
SMALL_BROKER = "hutch-small"
_FAILED: list[str] = []
E2E_DIR = Path(__file__).resolve().parent
_TIMES: dict[str, float] = {}  # when the first e2e test began and the last one ended
_E2E_IDS: set[str] = set()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--kubeconfig",
        default=os.environ.get("HUTCH_E2E_KUBECONFIG") or None,
        help="run e2e against this cluster (kind) instead of the local plane "
        "(env HUTCH_E2E_KUBECONFIG)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: end to end through operator, broker and Spark")
    config.addinivalue_line("markers", "spark: needs pyspark, pyarrow and Java")


def _is_e2e(item: pytest.Item) -> bool:
    """This folder's tests: in a session with tests/ (scripts/test.sh), the hooks here leave
    the others alone."""
    return item.path.is_relative_to(E2E_DIR)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Local runs are k8s tests on the node (the plane plugin's skip/REQUIRED rules and its
    order: after the node-tier tests, on their plane); all get a timeout."""
    local = config.getoption("--kubeconfig") is None
    for item in filter(_is_e2e, items):
        _E2E_IDS.add(item.nodeid)
        if local:
            item.add_marker(pytest.mark.k8s)
            item.add_marker(pytest.mark.k8s_node)
        if not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(LOCAL_E2E_TIMEOUT if local else E2E_TIMEOUT))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """After a failed node-level test of the same session (not of the control-plane tests'
    process beside it, which fails the level by itself), e2e does not run (skipped, which
    fails the run under HUTCH_K8S_REQUIRED). Spark tests need Java and pyspark: skip locally,
    fail under CI or HUTCH_K8S_REQUIRED."""
    if not _is_e2e(item):
        return
    failed = item.session.testsfailed - len(_FAILED)
    if failed > 0:
        pytest.skip(f"{failed} test(s) of the node level failed before e2e (levels fail fast)")
    _TIMES.setdefault("began", time.monotonic())
    if item.get_closest_marker("spark") is None:
        return
    problems = summaries.prerequisite_problems()
    if not problems:
        return
    required = (
        os.environ.get("CI", "").lower() not in ("", "0", "false", "no")
        or os.environ.get("HUTCH_K8S_REQUIRED") == "1"
    )
    if required:
        pytest.fail(f"Spark e2e must run here but cannot: {problems}", pytrace=False)
    pytest.skip(f"Spark unavailable: {problems}")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Remembers e2e failures (the chain's logs are saved then) and when the last e2e ended."""
    if report.nodeid in _E2E_IDS:
        if "began" in _TIMES:
            _TIMES["ended"] = time.monotonic()
        if report.failed:
            _FAILED.append(report.nodeid)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """e2e's own time, from the first e2e test's setup (the chain's start) to the last one's
    teardown: in the node level's session, the part of that level's time that is e2e's."""
    if "began" in _TIMES and "ended" in _TIMES:
        seconds = _TIMES["ended"] - _TIMES["began"]
        terminalreporter.write_line(f"E2E: the e2e tests took {seconds:.0f}s")


@pytest.fixture(scope="session")
def e2e_cluster(request: pytest.FixtureRequest) -> clusters.Cluster:
    """The cluster under test: an external kubeconfig, else the local plane's real node."""
    kubeconfig = request.config.getoption("--kubeconfig")
    if kubeconfig:
        return clusters.external_cluster(Path(kubeconfig))
    return clusters.local_cluster(request.getfixturevalue("node"))


@pytest.fixture(scope="session")
def hutch(
    e2e_cluster: clusters.Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[chain.Chain]:
    """The chain, up to the examples' topology Ready on the Broker ``hutch``."""
    namespace = f"e2e-{secrets.token_hex(3)}"
    line = chain.Chain(
        e2e_cluster,
        namespace,
        tmp_path_factory.mktemp("chain"),
        broker_names=("hutch", SMALL_BROKER),
    )
    try:
        line.apply_crds()
        line.create_namespace(volumes=["2Gi"])  # one local PV; hutch-small uses an emptyDir
        line.start_operator()
        line.create_broker()
        line.start_broker()
        line.apply_topology(chain.EXAMPLES / "topology.yaml")
        yield line
    finally:
        try:
            if _FAILED:
                _save_logs(line)
        finally:
            line.stop()  # external clusters: helm uninstall and the namespace too


def _save_logs(line: chain.Chain) -> None:
    """The Pods' logs (operator, brokers), port-forward and job logs, for CI to upload."""
    try:
        line.save_logs()
    except clusters.ClusterError as exc:
        sys.stderr.write(f"\ne2e: could not read the Pods' logs: {exc}\n")
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
    target = ARTIFACTS / f"e2e-{stamp}-{os.getpid()}"
    shutil.copytree(line.work_dir, target, dirs_exist_ok=True, ignore=_no_data)
    sys.stderr.write(f"\ne2e: chain logs saved to {target}\n")


def _no_data(_directory: str, names: list[str]) -> list[str]:
    return [n for n in names if n in ("checkpoint", "counts")]


@pytest.fixture
def unique() -> str:
    """A short suffix that keeps each test's broker objects apart on the shared Broker."""
    return secrets.token_hex(3)
