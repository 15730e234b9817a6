"""charts/hutch-spark with ``broker.tls`` on the node tier: the job reads a TLS Broker over
amqps://, verifying its certificate with the CA the chart mounted from a Secret.

Why: the chart's TLS values were only rendered; whether Spark keeps the pod templates' CA
volume, whether the driver's streaming runner sees ``HUTCH_AMQP_CA_FILE``, and whether the
Service name resolves and matches the certificate are things only Pods show. The Broker
(examples/broker.yaml plus ``spec.tls``) serves a certificate made here for
``hutch.<ns>.svc`` by a CA made here, in the ``kubernetes.io/tls`` Secret ``hutch-tls``
(cert-manager's shape, ``ca.crt`` included); its plain listeners stay on only so this test can
publish and inspect as the administrator. The job runs as examples/spark-user.yaml's User,
through the Spark Operator, and the chart names ``hutch-tls`` as its CA Secret: only
``ca.crt`` is projected into the driver, never ``tls.key``.

Asserted: the SparkApplication COMPLETED; the driver Pod's URI is
``amqps://hutch.<ns>.svc:5671/%2F`` with the CA file set and mounted from ``ca.crt`` only;
while it ran, the broker listed the job's connections as TLS for the User; the counts
read back from the PV are exact and the queue ends empty, one ack per message.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from hutch_demo import certs, clusters, management, pipeline, pods, sparkoperator, sparkpods

REPO = clusters.REPO_ROOT
EVENTS = 300
QUEUE = sparkpods.JOB_QUEUE
CLAIM = "spark-data"
RUN_TIMEOUT = 600  # seconds from helm install to the end


@pytest.mark.k8s
@pytest.mark.spark
@pytest.mark.timeout(1800)  # cold: the controller's Go build and two image builds
def test_the_chart_reads_a_tls_broker_verified_by_the_mounted_ca(
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
    authority = certs.Authority()
    leaf = authority.issue(host, hosts=(host, f"{host}.cluster.local"))
    cluster.apply(ns, clusters.manifest(tls_secret(leaf)))
    endpoint = sparkpods.example_broker(cluster, ns, tls_broker(ns))
    stream = pipeline.make_stream(EVENTS, prefix="tls", expire_every=0)
    sparkpods.declare_durable(endpoint, QUEUE)
    pipeline.publish(endpoint, stream, exchange="", routing_key=QUEUE, persistent=True)
    assert stream.nacked == 0
    secret, _ = sparkoperator.prepare_job(run, ns, build.chart, build.image, CLAIM, work)
    values = sparkoperator.job_values(
        "hutch", QUEUE, CLAIM, secret, executors=1, max_messages_per_batch=100
    )
    values["broker"]["tls"] = {"enabled": True, "caSecret": "hutch-tls"}
    values["restartPolicy"] = {"type": "Never"}  # a TLS failure must show, not be retried
    began = time.monotonic()
    helm.install(sparkoperator.JOB_RELEASE, REPO / "charts" / "hutch-spark", values, work)
    mgmt = management.Management(endpoint)
    app, tls_connections = _watch(cluster, ns, mgmt)
    sys.stderr.write(
        f"helm install to {sparkoperator.state(app)}: {time.monotonic() - began:.0f}s; "
        f"connections seen: {tls_connections}\n"
    )
    assert sparkoperator.state(app) == "COMPLETED", app.get("status")

    driver = pods.get_pod(cluster, ns, app["status"]["driverInfo"]["podName"])
    assert driver is not None
    container = next(
        c for c in driver["spec"]["containers"] if c["name"] == "spark-kubernetes-driver"
    )
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    assert env["HUTCH_AMQP_URI"] == f"amqps://{host}:5671/%2F"
    assert env["HUTCH_AMQP_CA_FILE"] == "/etc/hutch-ca/ca.crt"
    (volume_spec,) = [v for v in driver["spec"]["volumes"] if v["name"] == "hutch-ca"]
    assert volume_spec["secret"]["secretName"] == "hutch-tls"
    assert [item["key"] for item in volume_spec["secret"]["items"]] == ["ca.crt"]  # no tls.key
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["hutch-ca"] == "/etc/hutch-ca"
    # The broker saw the job's connections: TLS, as the User (the port is shown in the log line).
    assert tls_connections, "the job's connection was never listed"
    assert all(ssl for _, ssl, _ in tls_connections), tls_connections

    pv_dir = node.node_layout.volumes_dir / run.volume
    rows = pipeline.read_results(pv_dir / "output", root=(sparkoperator.MOUNT, pv_dir))
    assert pipeline.counted(rows) == stream.expected_counts()
    queue = mgmt.queue(QUEUE)
    assert (queue["messages"], queue["messages_unacknowledged"], queue["consumers"]) == (0, 0, 0)
    assert queue["message_stats"]["ack"] == stream.published, queue["message_stats"]


def _watch(
    cluster: clusters.Cluster, ns: str, mgmt: management.Management
) -> tuple[dict[str, Any], set[tuple[str, bool, int]]]:
    """Polls the app until it ends; records (user, ssl, port) of the job's broker connections."""
    path = sparkoperator.APP_PATH.format(ns=ns, name=sparkoperator.JOB_RELEASE)
    seen: set[tuple[str, bool, int]] = set()
    began = time.monotonic()
    while time.monotonic() - began < RUN_TIMEOUT:
        app = cluster.get(path) or {}
        if sparkoperator.state(app) in (
            "COMPLETED",
            "FAILED",
            "SUBMISSION_FAILED",
            "FAILED_SUBMISSION",
        ):
            return app, seen
        listed = mgmt.get("/connections")
        for connection in listed.body if listed.ok and isinstance(listed.body, list) else []:
            if str(connection.get("user")) == sparkpods.JOB_USER:
                seen.add((connection["user"], bool(connection.get("ssl")), int(connection["port"])))
        time.sleep(0.5)
    raise AssertionError(f"not finished after {RUN_TIMEOUT}s: {sparkoperator.state(app)}")
