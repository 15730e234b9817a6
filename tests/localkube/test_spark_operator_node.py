"""charts/hutch-spark through a real Kubeflow Spark Operator on the node tier, reading a TLS
Broker verified by the CA the chart mounts, its driver deleted half way.

Why: the chart rendered a SparkApplication that no Spark Operator had ever read, and its TLS
values were only rendered: whether Spark keeps the pod templates' CA volume, whether the
driver's streaming runner sees ``HUTCH_AMQP_CA_FILE``, and whether the Service name resolves
and matches the certificate are things only Pods show. Here the operator's controller (built
from its released Go module, localkube/gobuild/build-spark-operator.sh) runs as a Pod of our
image hutch-spark-operator (docker/spark-operator.Dockerfile, FROM hutch-spark, so its
spark-submit is the jobs' Spark), installed with the operator's own Helm chart, webhook off.
``helm install`` of charts/hutch-spark then hands it windowed_counts against an
operator-managed Broker, as the User of examples/spark-user.yaml (its Secret is the chart's
``broker.credentialsSecret``; its Permission reads the queue and nothing else).

The Broker is examples/broker.yaml plus ``spec.tls``: it serves a certificate made here for
``hutch.<ns>.svc`` by a CA made here, in the ``kubernetes.io/tls`` Secret ``hutch-tls``
(cert-manager's shape, ``ca.crt`` included); its plain listeners stay on only so this test can
publish and inspect as the administrator. The chart names ``hutch-tls`` as its CA Secret: only
``ca.crt`` is projected into the driver, never ``tls.key``.

One Spark job (each costs minutes of CI) covers the chart's Pod path, TLS and the issue's
failure case: once a micro-batch has committed, every process of the driver's container is
killed with SIGKILL (no shutdown hook runs, as in a crash) and the driver Pod is deleted; the
Spark Operator resubmits it (``restartPolicy: OnFailure``), and the new driver resumes from the
checkpoint on the PVC, again over amqps://. A TLS failure is not hidden by the retries: after
``onFailureRetries`` the application ends FAILED, never COMPLETED. The SIGKILL is
e2e/test_spark.py's, folded in (issue 29): that test ran the same job as a local process on
the host, killed its driver's process group and checked what this test checks of the resumed
run (every message confirmed at publish, the counts per window exact, the queue empty with
nothing unacked, one ack per published message, redeliveries).

Asserted: the SparkApplication went RUNNING -> (failure, resubmission) -> RUNNING -> COMPLETED
(SUBMITTED too, but it can pass between two polls), with two execution attempts and a new
driver Pod; the last driver and >= 2 executors ran on hutch-node with ``containerd://`` IDs;
the driver Pod's URI is ``amqps://hutch.<ns>.svc:5671/%2F`` with the CA file set and mounted
from ``ca.crt`` only; while it ran, the broker listed the job's connections as TLS for the
User; the per-window counts read back from the PV are exactly the unique events (none lost,
none twice, duplicates dropped); the queue is empty with nothing unacked, one ack per
published message, and the broker redelivered what the deleted driver held.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from hutch_demo import (
    certs,
    clusters,
    management,
    pipeline,
    pods,
    sparkoperator,
    sparkpods,
    sparksubmit,
    waiting,
)

REPO = clusters.REPO_ROOT
EVENTS = 1200  # plus 48 duplicates and the closing tick
QUEUE = sparkpods.JOB_QUEUE  # the one examples/spark-user.yaml's Permission lets the job read
CLAIM = "spark-data"
DRIVER_CONTAINER = "spark-kubernetes-driver"  # Spark's name for it
RUN_TIMEOUT = 900  # seconds from helm install to COMPLETED, the resubmission included


@pytest.mark.k8s  # explicit: the plugin marks plane users after `-m` selection (make unit)
@pytest.mark.spark
@pytest.mark.timeout(1800)  # cold: the controller's Go build and two image builds
def test_spark_operator_runs_the_chart_over_tls_and_resubmits_a_deleted_driver(
    node: Any, spark_operator: Any, k8s_namespace: str, tmp_path: Path
) -> None:
    with sparkoperator.on_node(node, k8s_namespace, tmp_path) as run:
        _run(node, run, spark_operator, k8s_namespace, tmp_path)


def tls_broker(namespace: str) -> str:
    """examples/broker.yaml with ``spec.tls`` naming the Secret ``hutch-tls``."""
    broker = yaml.safe_load(sparkpods.EXAMPLE_BROKER.read_text())
    broker["spec"]["tls"] = {"secretName": "hutch-tls"}
    broker["metadata"]["namespace"] = namespace
    return clusters.manifest(broker)


def tls_secret(leaf: certs.Leaf) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": "hutch-tls"},
        "data": leaf.secret_data(),  # tls.crt, tls.key, ca.crt
    }


def _run(node: Any, run: sparkoperator.NodeRun, build: Any, ns: str, work: Path) -> None:
    cluster, helm = run.cluster, run.helm
    host = f"hutch.{ns}.svc"
    leaf = certs.Authority().issue(host, hosts=(host, f"{host}.cluster.local"))
    cluster.apply(ns, clusters.manifest(tls_secret(leaf)))
    endpoint = sparkpods.example_broker(cluster, ns, tls_broker(ns))
    stream = pipeline.make_stream(EVENTS, prefix="op", expire_every=0)
    sparkpods.declare_durable(endpoint, QUEUE)
    pipeline.publish(endpoint, stream, exchange="", routing_key=QUEUE, persistent=True)
    assert stream.published == EVENTS + stream.duplicates + 1 and stream.nacked == 0
    secret, controller = sparkoperator.prepare_job(run, ns, build.chart, build.image, CLAIM, work)
    assert controller["spec"]["containers"][0]["image"] == build.image

    values = sparkoperator.job_values("hutch", QUEUE, CLAIM, secret)
    values["broker"]["tls"] = {"enabled": True, "caSecret": "hutch-tls"}
    began = time.monotonic()
    helm.install(sparkoperator.JOB_RELEASE, REPO / "charts" / "hutch-spark", values, work)
    pv_dir = node.node_layout.volumes_dir / run.volume
    mgmt = management.Management(endpoint)
    watched = _watch(cluster, ns, pv_dir, mgmt)
    seconds = time.monotonic() - began
    sys.stderr.write(
        f"helm install to COMPLETED: {seconds:.0f}s; states {watched.states}; driver deleted "
        f"{watched.deleted_at:.0f}s in, after {watched.batches_before} committed batches; "
        f"connections seen: {watched.connections}\n"
    )
    app = watched.app
    assert sparkoperator.state(app) == "COMPLETED", (watched.states, app.get("status"))
    # The happy path, then the deleted driver's failure and a second submission that completes.
    # SUBMITTED can pass within one 0.5 s poll (CI saw RUNNING first), so it is not required;
    # the second submission shows in executionAttempts and in a new driver Pod (below).
    assert "RUNNING" in watched.states, watched.states
    after = watched.states[watched.states.index("RUNNING") + 1 :]
    # The failure's own states last the operator's retry interval (5 s), which a poll held in
    # the driver's kill may miss; the resubmission's SUBMITTED after RUNNING follows them.
    assert set(after) & {"FAILING", "PENDING_RERUN", "FAILED_SUBMISSION", "SUBMITTED"}, (
        watched.states
    )
    assert sparkoperator.in_order(after, ("RUNNING", "COMPLETED")), watched.states
    assert app["status"]["executionAttempts"] >= 2, app["status"]  # submissionAttempts resets

    driver_name = app["status"]["driverInfo"]["podName"]
    # COMPLETED follows the driver container's exit; the Pod's phase can trail it by seconds.
    driver = waiting.wait_for(
        lambda: pods.get_pod(cluster, ns, driver_name),
        lambda pod: pod is None or pod["status"].get("phase") in ("Succeeded", "Failed"),
        timeout=60, interval=0.5, what="the driver Pod's final phase",
    )  # fmt: skip
    assert driver is not None
    assert driver["metadata"]["uid"] != watched.deleted_uid  # a new Pod, not the deleted one
    selector = driver["metadata"]["labels"]["spark-app-selector"]
    executors = pods.list_pods(cluster, ns, f"spark-role=executor,spark-app-selector={selector}")
    ran = [pods.facts(pod) for pod in [driver, *executors]]
    sys.stderr.write("".join(f"  {facts.line()}\n" for facts in ran))
    assert driver["status"]["phase"] == "Succeeded", driver["status"]
    assert driver["spec"]["securityContext"].get("fsGroup") == sparksubmit.SPARK_UID  # template
    assert len(executors) >= 2
    for facts in ran:
        assert facts.node == "hutch-node", facts
        assert facts.containers and all(c.startswith("containerd://") for _, c in facts.containers)
    _assert_reads_over_tls(driver, host, watched.connections)

    rows = pipeline.read_results(pv_dir / "output", root=(sparkoperator.MOUNT, pv_dir))
    assert rows, f"no committed Parquet files under {pv_dir / 'output'}"
    assert pipeline.counted(rows) == stream.expected_counts()  # exactly once after dedupe
    assert sum(r.events for r in rows) == EVENTS
    assert Counter((r.window_start, r.type) for r in rows).most_common(1)[0][1] == 1

    queue = mgmt.queue(QUEUE)
    assert (queue["messages"], queue["messages_unacknowledged"], queue["consumers"]) == (0, 0, 0)
    stats = queue["message_stats"]
    assert stats["publish"] == stats["ack"] == stream.published, stats
    assert stats.get("redeliver", 0) > 0, stats  # the deleted driver's unacked batch came back
    _assert_consumed_as_the_job_user(cluster, ns, driver_name)


def _assert_reads_over_tls(
    driver: dict[str, Any], host: str, connections: set[tuple[str, bool, int]]
) -> None:
    """The driver's URI is amqps:// to the Service name, the CA file is set and mounted from the
    Secret's ``ca.crt`` alone, and every connection the broker listed for the User was TLS."""
    container = next(c for c in driver["spec"]["containers"] if c["name"] == DRIVER_CONTAINER)
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    assert env["HUTCH_AMQP_URI"] == f"amqps://{host}:5671/%2F"
    assert env["HUTCH_AMQP_CA_FILE"] == "/etc/hutch-ca/ca.crt"
    (volume_spec,) = [v for v in driver["spec"]["volumes"] if v["name"] == "hutch-ca"]
    assert volume_spec["secret"]["secretName"] == "hutch-tls"
    assert [item["key"] for item in volume_spec["secret"]["items"]] == ["ca.crt"]  # no tls.key
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["hutch-ca"] == "/etc/hutch-ca"
    # The broker saw the job's connections: TLS, as the User (the port is in the summary line).
    assert connections, "the job's connection was never listed"
    assert all(ssl for _, ssl, _ in connections), connections


def _assert_consumed_as_the_job_user(cluster: clusters.Cluster, ns: str, driver: str) -> None:
    """The driver read the User's Secret, not the administrator's (the conf names it)."""
    pod = pods.get_pod(cluster, ns, driver)
    assert pod is not None
    refs = {
        env["name"]: env["valueFrom"]["secretKeyRef"]["name"]
        for container in pod["spec"]["containers"]
        for env in container.get("env", [])
        if env.get("valueFrom", {}).get("secretKeyRef")
    }
    secret = f"{sparkpods.JOB_USER}-user-credentials"
    assert refs.get("HUTCH_AMQP_USERNAME") == refs.get("HUTCH_AMQP_PASSWORD") == secret, refs


class Run:
    """What the test saw of the SparkApplication while it ran."""

    def __init__(self) -> None:
        self.states: list[str] = []
        self.app: dict[str, Any] = {}
        self.deleted_uid = ""
        self.deleted_at = 0.0
        self.batches_before = 0
        self.connections: set[tuple[str, bool, int]] = set()  # the User's: (user, ssl, port)


def _watch(cluster: clusters.Cluster, ns: str, pv_dir: Path, mgmt: management.Management) -> Run:
    """Polls the app's state until it ends; deletes the driver Pod once a batch committed;
    records the job User's broker connections as the broker lists them meanwhile."""
    path = sparkoperator.APP_PATH.format(ns=ns, name=sparkoperator.JOB_RELEASE)
    run, seen = Run(), []
    began = time.monotonic()
    while time.monotonic() - began < RUN_TIMEOUT:
        app = cluster.get(path) or {}
        seen.append(sparkoperator.state(app))
        run.app, run.states = app, sparkoperator.collapse(seen)
        if seen[-1] in ("COMPLETED", "FAILED"):
            return run
        batches = _committed_batches(pv_dir)
        if not run.deleted_uid and seen[-1] == "RUNNING" and batches >= 1:
            driver = pods.get_pod(cluster, ns, app["status"]["driverInfo"]["podName"])
            assert driver is not None
            run.deleted_uid = driver["metadata"]["uid"]
            run.deleted_at, run.batches_before = time.monotonic() - began, batches
            _kill_and_delete(cluster, ns, driver["metadata"]["name"], run.deleted_uid)
        _note_connections(mgmt, run.connections)
        time.sleep(0.5)
    raise AssertionError(f"not finished after {RUN_TIMEOUT}s: {run.states}")


def _kill_and_delete(cluster: clusters.Cluster, ns: str, name: str, uid: str) -> None:
    """SIGKILL to every process of the driver's container but its init (tini), then the Pod's
    deletion, as a node lost under it: the JVM and its Python workers die without a shutdown
    hook, so the dedupe and window state and the checkpoint are left as a crash leaves them
    (e2e/test_spark.py proved this of a local driver; issue 29 folded it into this job). The
    deletion names the killed Pod's uid: the Spark Operator names the resubmitted driver the
    same, and a precondition cannot delete that one.

    The kill must be seen to work before the Pod goes (a deletion alone would pass every later
    check through SIGTERM): with its JVM killed by SIGKILL, tini exits 128 + 9, so the kubelet
    reports the driver container terminated with exit code 137. The Spark Operator waits
    ``onFailureRetryInterval`` (5 s) after the failure before it deletes the Pod itself."""
    cluster.kubectl("exec", "-n", ns, name, "--", "sh", "-c", "kill -9 -1", check=False)
    ended = waiting.wait_for(
        lambda: _driver_terminated(cluster, ns, name, uid), timeout=60, interval=0.2,
        what="the killed driver container's end",
    )  # fmt: skip
    sys.stderr.write(f"  the killed driver container: {ended}\n")
    assert ended.get("exitCode") == 137, ended  # 128 + SIGKILL, through tini
    assert cluster.plane is not None  # the node tier's plane
    status, reply = cluster.plane.api(
        "DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", {"preconditions": {"uid": uid}}
    )
    assert status in (200, 202), f"the killed driver Pod's deletion: {status} {reply}"


def _driver_terminated(cluster: clusters.Cluster, ns: str, name: str, uid: str) -> dict[str, Any]:
    """The driver container's ``state.terminated`` (exit code, reason, signal) once the
    kubelet reports it, {} before; fails if the Pod went or was replaced meanwhile."""
    pod = pods.get_pod(cluster, ns, name)
    assert pod is not None and pod["metadata"]["uid"] == uid, "the driver Pod went before its end"
    statuses = pod["status"].get("containerStatuses") or []
    state = next((c["state"] for c in statuses if c["name"] == DRIVER_CONTAINER), {})
    return dict(state.get("terminated") or {})


def _note_connections(mgmt: management.Management, seen: set[tuple[str, bool, int]]) -> None:
    listed = mgmt.get("/connections")
    for connection in listed.body if listed.ok and isinstance(listed.body, list) else []:
        if str(connection.get("user")) == sparkpods.JOB_USER:
            seen.add((connection["user"], bool(connection.get("ssl")), int(connection["port"])))


def _committed_batches(pv_dir: Path) -> int:
    commits = pv_dir / "checkpoint" / "commits"
    return sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.is_dir() else 0


def test_docs_show_the_values_this_test_installs() -> None:
    """docs/spark.md's two values files are ``operator_values`` and ``job_values`` above (the
    node test adds ``broker.tls`` to the latter, as docs/spark.md's TLS section does)."""
    text = (REPO / "docs" / "spark.md").read_text()
    section = text.split("### The chart `charts/hutch-spark`", 1)[1].split("\n### ", 1)[0]
    blocks = [chunk.split("```", 1)[0] for chunk in section.split("```yaml\n")[1:]]
    operator_block, job_block = (yaml.safe_load(block) for block in blocks)
    assert operator_block == sparkoperator.operator_values("<ns>")
    assert job_block == sparkoperator.job_values(
        "hutch", QUEUE, CLAIM, f"{sparkpods.JOB_USER}-user-credentials"
    )
    role, binding = sparkoperator.controller_rbac("<ns>", "<ns>")
    verbs = ",".join(role["rules"][0]["verbs"])
    assert f"create role {role['metadata']['name']} -n <ns> \\\n  --verb={verbs} " in section
    account = binding["subjects"][0]
    assert f"--serviceaccount=<ns>:{account['name']}\n" in section
