"""The local plane's pytest plugin: tier fixtures, the ``k8s`` marker, ordering, skips, summary.

Why: tests ask for a plane by fixture (``apiserver``, ``workloads``, ``node``, ``k8s_namespace``,
``make_pvs``, ``make_local_pvs``, ``spark_image``, ``spark_operator``) and this plugin does the
rest: marks them ``k8s``, runs the tiers in order so two planes never outlive their need, skips
with the build hint when the binaries are missing (fails under ``HUTCH_K8S_REQUIRED=1``), and
reports start times. It also marks the tests that need a control plane and never the real node
(``control_plane_only``: the apiserver and workloads tiers), so scripts/test.sh can run them in a
pytest process of their own beside the real node's tests. The plane itself is hutch_localkube
(localkube/); this is the test suites' face of it, so it lives with the test tooling.
Registered for every pytest run of the venv by the ``pytest11`` entry point in
testing/pyproject.toml; tests/conftest.py and e2e/conftest.py also name it in
``pytest_plugins`` (the same name, so pytest registers it once) for venvs
installed before it.

PYTEST_DONT_REWRITE: pytest may import this module before it knows to rewrite it; nothing here
relies on rewritten asserts.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hutch_localkube import binaries, images, planes

K8S_TEST_TIMEOUT = 180  # seconds; the first k8s test of a run also pays for the plane's start
NODE_TEST_TIMEOUT = 600  # a cold node start also debootstraps and builds images (~2 min)
# The tiers whose tests need no real node (no containerd, kubelet, bridge nor the node's lock):
# marked CONTROL_PLANE_ONLY. A node-level test of no tier (its own plane, as the kept `make run`
# starts one, or a containerd of its own) is not: what it needs is not known, so it stays with
# the real node's tests.
CONTROL_PLANE_TIERS = frozenset({"apiserver", "workloads"})
CONTROL_PLANE_ONLY = "control_plane_only"


@dataclass
class _SessionState:
    """What the plugin remembers across hooks: skips to report, the first binaries problem."""

    skipped: set[str]
    missing: str | None = None
    checked: bool = False


_STATE = _SessionState(skipped=set())


def _item_tier(item: pytest.Item) -> str | None:
    """Which plane a test needs, from its fixture closure (or the ``k8s_node`` marker of a test
    that asks for the node at run time, as e2e's cluster does); node > workloads > apiserver."""
    names = getattr(item, "fixturenames", ())
    if "node" in names or "make_local_pvs" in names or item.get_closest_marker("k8s_node"):
        return "node"
    if "workloads" in names:
        return "workloads"
    if "apiserver" in names or "k8s_namespace" in names:
        return "apiserver"
    return None


def _tier_problem(tier: str | None) -> str | None:
    """Why a tier cannot run here: the shared binaries check, plus the node tier's own."""
    problem = _binaries_problem()
    if problem is None and tier == "node":
        problem = binaries.node_problem(binaries.find_bin_dir())
    return problem


def _binaries_problem() -> str | None:
    """Why k8s tests cannot run here (checked once per session), or None if they can."""
    if not _STATE.checked:
        _STATE.checked = True
        try:
            bin_dir = binaries.find_bin_dir()
            binaries.check_binaries(bin_dir, "workloads")
            binaries.find_kubectl()
        except binaries.BinariesMissingError as exc:
            _STATE.missing = str(exc)
    return _STATE.missing


def pytest_configure(config: pytest.Config) -> None:
    """Declares the markers too, so e2e/ (or any rootdir) can load this plugin as is."""
    config.addinivalue_line("markers", "k8s: needs the local Kubernetes control plane")
    config.addinivalue_line(
        "markers", "k8s_node: asks for the node tier at run time (request.getfixturevalue)"
    )
    config.addinivalue_line(
        "markers",
        f"{CONTROL_PLANE_ONLY}: set by the plane plugin on the apiserver and workloads tiers' "
        "tests: a control plane, never the real node (docs/testing.md#how-the-node-level-runs)",
    )


def pytest_itemcollected(item: pytest.Item) -> None:
    """Marks plane users k8s (and those of the apiserver and workloads tiers
    ``control_plane_only``) and widens their timeout, as each is collected: ``-m "not k8s"``
    deselects in pytest's own collection_modifyitems, which runs before the trylast one below
    (marking there let every plane test through ``make unit``)."""
    tier = _item_tier(item)
    if tier:
        item.add_marker(pytest.mark.k8s)
    if tier in CONTROL_PLANE_TIERS:
        item.add_marker(CONTROL_PLANE_ONLY)
    if (
        item.get_closest_marker("k8s")
        and not item.get_closest_marker("timeout")
        and item.config.pluginmanager.hasplugin("timeout")
    ):
        slow = tier == "node"
        item.add_marker(pytest.mark.timeout(NODE_TEST_TIMEOUT if slow else K8S_TEST_TIMEOUT))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Runs workloads-tier tests after apiserver ones, node-tier tests after them and e2e tests
    last: in one session with the node tier's tests (scripts/test.sh's node+e2e), e2e runs on
    the node plane they started, which stops after the last e2e test."""
    # Stable sort by tier: each plane is stopped before the next tier's starts.
    order = {None: 0, "apiserver": 0, "workloads": 1, "node": 2}
    items.sort(key=lambda it: (it.get_closest_marker("e2e") is not None, order[_item_tier(it)]))
    planes.REGISTRY.pending = collections.Counter(t for t in map(_item_tier, items) if t)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Missing binaries: skip locally (naming the build script), error under REQUIRED."""
    if not item.get_closest_marker("k8s"):
        return
    problem = _tier_problem(_item_tier(item))
    if problem is None:
        return
    if binaries.k8s_required():
        pytest.fail(f"HUTCH_K8S_REQUIRED=1 but {problem}", pytrace=False)
    pytest.skip(f"k8s plane unavailable: {problem}")


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    """After a tier's last test, its plane stops: two planes never outlive their need."""
    try:
        return (yield)
    finally:
        tier = _item_tier(item)
        if tier:
            planes.REGISTRY.pending[tier] -= 1
            if planes.REGISTRY.pending[tier] <= 0:
                planes.REGISTRY.release(tier)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Counts skipped k8s tests (for the summary and REQUIRED) and keeps logs on failure."""
    if "k8s" not in report.keywords:
        return
    if report.skipped:
        _STATE.skipped.add(report.nodeid)
    elif report.failed:
        planes.REGISTRY.mark_failed()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stops whatever is still up; under REQUIRED, any skipped k8s test fails the run."""
    planes.REGISTRY.stop_all()
    if binaries.k8s_required() and _STATE.skipped:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Makes k8s skips impossible to miss, and reports how long each plane took to start."""
    for tier, seconds in planes.REGISTRY.start_times.items():
        terminalreporter.write_line(f"K8S: {tier} plane started in {seconds:.1f}s")
    for step, seconds in planes.REGISTRY.node_seconds.items():
        terminalreporter.write_line(f"K8S: node start step {step}: {seconds:.1f}s")
    count = len(_STATE.skipped)
    if count:
        required = " (HUTCH_K8S_REQUIRED=1: run failed)" if binaries.k8s_required() else ""
        terminalreporter.write_line(
            f"K8S: {count} tests SKIPPED{required}; see localkube/gobuild/build-binaries.sh",
            yellow=True,
            bold=True,
        )


def _plane_fixture(tier: str) -> Iterator[planes.Plane]:
    """Body of both tier fixtures: start lazily; a failed start is an error, never a skip."""
    problem = _tier_problem(tier)
    if problem:
        if binaries.k8s_required():
            pytest.fail(f"HUTCH_K8S_REQUIRED=1 but {problem}", pytrace=False)
        pytest.skip(f"k8s plane unavailable: {problem}")
    try:
        yield planes.REGISTRY.acquire(tier)
    finally:
        planes.REGISTRY.release(tier)


@pytest.fixture(scope="session")
def apiserver() -> Iterator[planes.Plane]:
    """etcd + kube-apiserver: CRD schema/CEL, RBAC, watches, finalizers, KopfRunner tests."""
    yield from _plane_fixture("apiserver")


@pytest.fixture(scope="session")
def workloads() -> Iterator[planes.Plane]:
    """apiserver + controller-manager, scheduler and kwok with 3 fake Nodes: Pods get Ready."""
    yield from _plane_fixture("workloads")


@pytest.fixture(scope="session")
def node() -> Iterator[planes.Plane]:
    """workloads + one real node (containerd, CNI bridge, kubelet) running the broker image."""
    yield from _plane_fixture("node")


@pytest.fixture
def k8s_namespace(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh ``t-<8hex>`` namespace on the test's plane (the highest tier it uses)."""
    tier = _item_tier(request.node) or "apiserver"
    plane: planes.Plane = request.getfixturevalue(tier)
    name = plane.create_namespace()
    yield name
    if plane.tier in binaries.WORKLOAD_TIERS and not plane.stopped:
        plane.delete_namespace(name)


@pytest.fixture
def make_pvs(workloads: planes.Plane) -> Callable[..., list[str]]:
    """``make_pvs(n, size="1Gi")``: pre-created PVs of class hutch-test for StatefulSets."""
    return workloads.make_pvs


@pytest.fixture(scope="session")
def spark_image(node: planes.Plane) -> str:
    """hutch-spark (spark/jobs/Dockerfile) in the node's containerd: built on first use (minutes
    cold, then cached) and imported once per node; not part of every node start."""
    name = node.add_image("spark")
    planes.REGISTRY.node_seconds.update(node.node_seconds)
    return name


@dataclass(frozen=True)
class SparkOperatorBuild:
    """The Kubeflow Spark Operator as the node runs it: our image of its controller (imported)
    and its own Helm chart, from the released module (localkube/gobuild/build-spark-operator.sh).
    """

    image: str
    chart: Path


@pytest.fixture(scope="session")
def spark_operator(node: planes.Plane, spark_image: str) -> SparkOperatorBuild:
    """hutch-spark-operator (docker/spark-operator.Dockerfile, FROM hutch-spark) in the node's
    containerd, and the operator's chart: the controller is built from the Go module proxy on
    first use (minutes cold, then cached), so only the Spark Operator tests pay for it."""
    name = node.add_image("spark-operator")
    planes.REGISTRY.node_seconds.update(node.node_seconds)
    return SparkOperatorBuild(image=name, chart=images.spark_operator_bin().parent / "chart")


@pytest.fixture
def make_local_pvs(node: planes.Plane) -> Callable[..., list[str]]:
    """``make_local_pvs(n, size="1Gi")``: local PVs on the real node's disk (really mounted)."""
    return node.make_local_pvs
