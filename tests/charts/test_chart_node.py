"""charts/hutch-operator installed with Helm on the real node, through the life of one install.

Why: ``helm template`` and the apiserver-only tests prove the chart renders and its RBAC is
accepted; they cannot show that the image starts under the chart's security context, that the
ServiceAccount's Role is enough for Kopf, or that the metrics Service answers. Here the chart
runs the operator image built from docker/operator.Dockerfile in containerd on ``hutch-node``
(docs/real-node.md), and the operator creates examples/broker.yaml's children, whose broker Pod
runs too. Every check reads what only a kubelet and a container runtime produce: the runtime's
container ID, ``kubectl exec`` into the container, the local PV mounted for the PVC.

Why one test: each check needs an installed chart, an operator Pod Ready and a Broker whose Pod
runs, and that set-up was most of the time of the three tests that each made their own (issue
#29). So one install walks its life in order, each phase named in whatever fails in it: the
operator runs as a real Pod; it reconciles a Broker; its Pod is replaced mid-way through a
topology and the replacement converges with no duplicate broker writes; the uninstall and the
namespace deletion finish within the chart's documented bound.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import re
import secrets
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hutch_demo import chain, clusters, pods, releases

pytestmark = pytest.mark.timeout(600)

REPO = clusters.REPO_ROOT
log = logging.getLogger(__name__)

# charts/hutch-operator/README.md, "Uninstalling": the documented bound for the three steps.
UNINSTALL_BOUND = 90  # seconds
SWEEP = 3.0  # the operator's sync period: "three sweeps write nothing" waits three of them
# A quarter of a core, as a small production operator might get: the apply of 61 objects
# then outruns the operator, so the Pod is deleted mid-way (unthrottled, it had declared
# all 61 before the first poll saw one Ready). The other phases hold with it too: a slower
# operator only makes the uninstall's bound harder to meet.
RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"},
             "limits": {"cpu": "250m", "memory": "256Mi"}}  # fmt: skip


def exec_in(cluster: clusters.Cluster, namespace: str, pod: str, *command: str) -> Any:
    return cluster.kubectl("exec", "-n", namespace, pod, "--", *command, check=False)


@contextlib.contextmanager
def phase(name: str, seconds: dict[str, float]) -> Iterator[None]:
    """Names the phase in the failure of anything inside it (an assertion or a wait that timed
    out), so the one test's report says which part of the install's life broke; records the
    phase's seconds."""
    log.info("phase: %s", name)
    began = time.monotonic()
    try:
        yield
    except AssertionError as exc:
        raise AssertionError(f"phase {name!r}: {exc}") from exc
    except Exception as exc:
        raise AssertionError(f"phase {name!r}: {type(exc).__name__}: {exc}") from exc
    seconds[name] = round(time.monotonic() - began, 1)


def test_a_failing_phase_names_itself_and_a_passing_one_its_seconds() -> None:
    """What the install's test reports when a phase breaks: the phase's name, then the
    failure (an assertion's own message, or a wait's error with its type)."""
    seconds: dict[str, float] = {}
    with phase("fine", seconds):
        pass
    wanted, got = 1, 2
    with (
        pytest.raises(AssertionError, match=r"^phase 'broker': assert 1 == 2"),
        phase("broker", seconds),
    ):
        assert wanted == got
    with (
        pytest.raises(AssertionError, match=r"^phase 'gone': ClusterError: not reached$"),
        phase("gone", seconds),
    ):
        raise clusters.ClusterError("not reached")
    assert list(seconds) == ["fine"]


def test_one_helm_install_runs_reconciles_survives_a_replaced_pod_and_uninstalls_in_bound(
    node: Any, tmp_path: Path
) -> None:
    cluster = clusters.local_cluster(node)
    line = chain.Chain(cluster, f"u-{secrets.token_hex(4)}", tmp_path)
    seconds: dict[str, float] = {}
    try:
        with phase("helm install runs the operator as a real Pod", seconds):
            node.apply_crds(REPO / "crds")
            line.create_namespace(volumes=["2Gi"])  # a local PV in hutch-test, the default
            line.operator = releases.install(cluster, line.namespace, tmp_path,
                                             sync_period=SWEEP,
                                             overrides={"resources": RESOURCES})  # fmt: skip
            _check_operator_pod(cluster, line.namespace, line.operator)
        with phase("the operator reconciles a Broker whose Pod runs on the node", seconds):
            _check_broker(node, line)
        with phase("a replaced operator Pod converges with no duplicate broker writes", seconds):
            _check_replaced_operator(cluster, line.namespace, line.operator, tmp_path)
        with phase("uninstall and namespace deletion finish within the bound", seconds):
            _check_uninstall(cluster, line)
    finally:
        log.info("phases (s): %s", seconds)
        if line.operator is not None:  # a phase before the uninstall failed: strand nothing
            _remove(line)


def _remove(line: chain.Chain) -> None:
    """The order that strands nothing (charts/hutch-operator/README.md): the Hutch objects
    while the operator runs, then the release, then the namespace. A release left behind keeps
    its cluster-wide objects (the next install in this session is refused) and its operator
    Pod, which would reconcile the later node tests' Brokers too. Best effort: the phase's
    failure is the one to report."""
    try:
        line.remove()
    except Exception:
        log.exception("removing %s after a failed phase", line.namespace)


def _check_operator_pod(
    cluster: clusters.Cluster, namespace: str, operator: releases.OperatorRelease
) -> None:
    pod = operator.pod()
    assert pod is not None
    facts = pods.facts(pod)
    assert facts.node == "hutch-node"
    ((_, container_id),) = facts.containers
    assert container_id.startswith("containerd://")
    assert pod["spec"]["containers"][0]["image"] == releases.OPERATOR_IMAGE
    assert pod["spec"]["serviceAccountName"] == releases.FULLNAME

    name = facts.name
    assert exec_in(cluster, namespace, name, "id", "-u").stdout.strip() == "65532"
    touched = exec_in(cluster, namespace, name, "touch", "/probe")
    assert touched.returncode != 0
    assert "Read-only file system" in touched.stderr

    assert "hutch_reconcile_total" in operator.metrics()  # via the Service's ClusterIP


def _check_broker(node: Any, line: chain.Chain) -> None:
    """The chart's Role is enough for the operator to build a Broker's children; its Pod runs
    on the node with its store on the local PV, and the Broker turns Available and Ready."""
    cluster, namespace = line.cluster, line.namespace
    line.create_broker(REPO / "examples" / "broker.yaml")  # waits for its rendered config
    broker_pod = pods.wait_ready(cluster, namespace, "hutch-server-0", timeout=180)
    broker_facts = pods.facts(broker_pod)
    assert broker_facts.node == "hutch-node"
    assert broker_facts.containers[0][1].startswith("containerd://")
    claim = cluster.get(
        f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/data-hutch-server-0"
    )
    assert claim is not None
    assert claim["status"]["phase"] == "Bound"
    assert claim["spec"]["storageClassName"] == clusters.STORAGE_CLASS
    mounted = exec_in(cluster, namespace, "hutch-server-0", "sh", "-c", "ls /var/lib/hutch")
    assert mounted.returncode == 0, mounted.stderr
    volume = node.node_layout.volumes_dir / claim["spec"]["volumeName"]
    assert sorted(p.name for p in volume.iterdir()) == sorted(mounted.stdout.split())
    assert mounted.stdout.split()  # the broker wrote its store onto the node's disk
    line.wait_broker("Available", timeout=120)
    line.wait_broker("Ready", timeout=120)
    assert not _broker_writes(cluster, namespace)  # no topology yet: the next phase's baseline


QUEUES = 30  # with as many Bindings: enough that a Pod deleted after the first few is mid-way
EARLY_QUEUES = 10  # applied before the Pod goes; the rest after it (``_topology``)


def _topology(*, first: bool) -> str:
    """The first part (``first``): the Exchange ``events``, every Binding ``b<n>`` and the
    Queues below ``EARLY_QUEUES``; else the other Queues."""
    objects = []
    if first:
        spec = {"brokerRef": {"name": "hutch"}, "type": "topic"}
        objects.append(clusters.cr("Exchange", "events", spec))
    for n in range(EARLY_QUEUES) if first else range(EARLY_QUEUES, QUEUES):
        spec = {"brokerRef": {"name": "hutch"}, "limits": {"maxLength": 1000 + n}}
        objects.append(clusters.cr("Queue", f"q{n:02d}", spec))
    for n in range(QUEUES) if first else ():
        binding = {"brokerRef": {"name": "hutch"}, "source": "events", "destination": f"q{n:02d}",
                   "routingKey": f"events.{n}"}  # fmt: skip
        objects.append(clusters.cr("Binding", f"b{n:02d}", binding))
    return clusters.manifest(*objects)


class Write(NamedTuple):
    """One management write as the broker logged it (broker/hutch_broker/admin/audit.py)."""

    method: str
    path: str
    status: int
    client: str  # the writer's address: which operator Pod


def _broker_writes(cluster: clusters.Cluster, namespace: str) -> list[Write]:
    """Every topology write (queues, exchanges, bindings) the broker logged, in order."""
    logs = cluster.kubectl("logs", "-n", namespace, "hutch-server-0", check=False).stdout
    found = re.findall(r"management (PUT|POST|DELETE) (\S+) -> (\d+) \(user \S+ from (\S+)\)", logs)
    writes = [Write(method, path, int(status), client) for method, path, status, client in found]
    return [w for w in writes if w.path.startswith(("/api/queues/", "/api/exchanges/",
                                                    "/api/bindings/"))]  # fmt: skip


def _writers(writes: list[Write], paths: Iterable[str], pods: dict[str, str]) -> dict[str, Any]:
    """path → [(status, which Pod)] for assertion messages."""
    return {p: [(w.status, pods.get(w.client, w.client)) for w in writes if w.path == p]
            for p in paths}  # fmt: skip


def _object_path(plural: str, name: str) -> str:
    """The management path the operator writes for one of ``_topology``'s objects."""
    if plural == "queues":
        return f"/api/queues/%2F/{name}"
    if plural == "exchanges":
        return f"/api/exchanges/%2F/{name}"
    return f"/api/bindings/%2F/e/events/q/q{name[1:]}"


def _ready_paths(cluster: clusters.Cluster, namespace: str) -> set[str]:
    """The paths of the topology objects whose status says Ready (declared and recorded)."""
    ready = set()
    for plural in ("exchanges", "queues", "bindings"):
        items = (cluster.get(clusters.cr_path(namespace, plural)) or {}).get("items", [])
        ready |= {_object_path(plural, o["metadata"]["name"]) for o in items
                  if clusters.is_true(o, "Ready")}  # fmt: skip
    return ready


def _keep_evidence(cluster: clusters.Cluster, namespace: str, pod: str, tmp_path: Path) -> str:
    """The replacement operator's log and the namespace's events, kept beside the test (the
    namespace and its Pods are gone after teardown); returns where, for assertion messages."""
    log_text = cluster.kubectl("logs", "-n", namespace, pod, check=False).stdout
    (tmp_path / "operator.log").write_text(log_text)
    events = cluster.kubectl("get", "events", "-n", namespace, "-o", "wide", check=False).stdout
    (tmp_path / "events.txt").write_text(events)
    return f"operator log and events in {tmp_path}"


def _check_replaced_operator(
    cluster: clusters.Cluster, namespace: str, operator: releases.OperatorRelease, tmp_path: Path
) -> None:
    """The operator Pod is deleted while it declares 61 objects; its replacement finishes them.

    The Exchange, every Binding and the first ``EARLY_QUEUES`` Queues are applied first, the
    Pod is deleted once one object is Ready, and the other Queues are applied after: so the
    old Pod surely has work left when it goes (the Bindings to Queues not yet there), however
    fast it is. Applied all at once, a fast operator had all 61 Ready before the test's next
    read, and nothing was left for the replacement (a fresh-clone CI run on a 2-core EPYC).

    Read from the broker's own log of management writes, across both Pods: every object is
    created once; nothing the old Pod had recorded as declared is written again; the only
    second write allowed is one idempotent re-declare of an object whose declaration was in
    flight when the old Pod stopped (written, not yet recorded); and once converged, three
    sweeps write nothing. Failed attempts (a Binding whose Queue is not there yet gets 404
    and retries) change nothing and are allowed.
    """
    first = operator.wait_ready()
    cluster.apply(namespace, _topology(first=True))
    clusters.wait_for(lambda: _ready_paths(cluster, namespace), "a first object Ready",
                      timeout=60, interval=0.1)  # fmt: skip
    recorded = _ready_paths(cluster, namespace)
    cluster.kubectl("delete", "pod", "-n", namespace, first["metadata"]["name"],
                    "--wait=false")  # fmt: skip
    cluster.apply(namespace, _topology(first=False))
    # Ready then: the Exchange, the early Queues and their Bindings at most.
    assert len(recorded) <= 1 + 2 * EARLY_QUEUES, recorded

    second = clusters.wait_for(
        lambda: (p := operator.pod()) is not None
        and p["metadata"]["uid"] != first["metadata"]["uid"] and pods.is_ready(p) and p,
        "the replacement operator Pod Ready", timeout=180, interval=0.5,
    )  # fmt: skip
    assert pods.facts(second).node == "hutch-node"
    clusters.wait_all_ready(cluster, namespace, ["exchanges", "queues", "bindings"],
                            timeout=180)  # fmt: skip
    converged = _broker_writes(cluster, namespace)
    time.sleep(3 * SWEEP + 2)  # three sweeps of the new operator
    writes = _broker_writes(cluster, namespace)
    why = _keep_evidence(cluster, namespace, second["metadata"]["name"], tmp_path)
    pods_by_ip = {first["status"]["podIP"]: "old Pod", second["status"]["podIP"]: "new Pod"}
    assert writes == converged, f"sweeps wrote: {writes[len(converged) :]}; {why}"

    expected = {_object_path("exchanges", "events")}
    expected |= {_object_path("queues", f"q{n:02d}") for n in range(QUEUES)}
    expected |= {_object_path("bindings", f"b{n:02d}") for n in range(QUEUES)}
    succeeded = collections.Counter(w.path for w in writes if w.status < 300)
    assert set(succeeded) == expected, sorted(set(succeeded) ^ expected)
    created = collections.Counter(w.path for w in writes if w.status == 201)
    assert not [p for p in expected if not p.startswith("/api/bindings/")
                and created[p] != 1], created  # fmt: skip
    again = {path for path, n in succeeded.items() if n > 1}
    told = f"{_writers(writes, sorted(again), pods_by_ip)}; {why}"
    assert not again & recorded, f"recorded as declared, written again: {told}"
    assert all(succeeded[p] == 2 for p in again), f"written more than twice: {told}"
    assert not [w for w in writes if w.method == "DELETE" or w.status >= 500], writes
    log.info(
        "replaced operator: %d of %d objects recorded when the Pod went, %d re-declared "
        "once, %d writes in all",
        len(recorded),
        len(expected),
        len(again),
        len(writes),
    )


def _check_uninstall(cluster: clusters.Cluster, line: chain.Chain) -> None:
    """The three steps of charts/hutch-operator/README.md, "Uninstalling", timed against its
    bound with what it names there: the Broker and the topology of examples/. The previous
    phase's 61 objects go first, untimed: they are not part of that set."""
    kinds = "exchanges.hutch.dev,queues.hutch.dev,bindings.hutch.dev"  # not the core Binding
    cluster.kubectl("delete", kinds, "--all", "-n", line.namespace, "--wait", "--timeout=120s")
    line.apply_topology(REPO / "examples" / "topology.yaml")  # waits for every object Ready
    seconds = line.remove(timeout=UNINSTALL_BOUND)
    assert sum(seconds.values()) < UNINSTALL_BOUND, seconds
    assert cluster.get(f"/api/v1/namespaces/{line.namespace}") is None
    assert not pods.list_pods(cluster, line.namespace)
    assert line.operator is None
    cluster_wide = cluster.kubectl("get", "clusterroles,mutatingadmissionpolicies", "-o", "name")
    assert "hutch-operator" not in cluster_wide.stdout
