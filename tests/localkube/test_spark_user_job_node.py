"""A Spark job of the user's own, in a namespace of the user's own, as Pods on the real node
(issue 31 item 7).

Why: everything a Spark job needed existed only because ``make run`` made it in
``quickstart``: the driver's ServiceAccount, Role and claim were YAML inside the test tooling,
and the image held only windowed_counts.py, while a ``local://`` path must exist in the Pod.
docs/spark.md ("Run your own job") now gives the user a manifest for any namespace
(examples/spark-job-namespace.yaml) and one way to get a job file into the Pods: a ConfigMap,
mounted by the Pod template at /opt/hutch/user in the driver and the executors. This test does
what that section says, word for word, in namespace ``team-spark``, with a job that is not the
bundled one (examples/spark-type-counts.py: counts a queue's events by type).

First, the same submission before the namespace's objects exist is refused at once
(``serviceaccount "hutch-spark" not found``): the shipped manifest is what makes it run. Then
``kubectl apply -n team-spark -f examples/spark-job-namespace.yaml``, ``kubectl create
configmap ... --from-file=job.py=...`` and the documented spark-submit. Asserted: the driver Pod
Succeeded and an executor Pod ran, both on ``hutch-node`` in containerd with the ConfigMap
mounted; the claim, which names no class, was bound by the node's provisioner; the counts the
job wrote to it are exactly the messages published per type; the queue is empty with one ack
per message, all by the job's own User.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pika
import pyarrow.parquet as pq
import pytest
from hutch_demo import (
    clusters,
    launchers,
    localnode,
    management,
    pods,
    releases,
    sparkpods,
    sparksubmit,
)
from hutch_localkube import provisioner

REPO = clusters.REPO_ROOT
NAMESPACE = "team-spark"  # not make run's quickstart, not a test's t-<hex>: a team's own
JOB = REPO / "examples" / "spark-type-counts.py"
CONFIGMAP = "type-counts-job"
QUEUE = sparkpods.JOB_QUEUE  # what examples/spark-user.yaml's Permission lets the job read
COUNTS = {"buy": 137, "click": 251, "view": 62}
SUBMIT_TIMEOUT = 600


def user_submission(
    api_server: str, namespace: str, pod_template: Path, image: str = sparksubmit.IMAGE
) -> sparksubmit.Submission:
    """docs/spark.md's "Run your own job" command: the ConfigMap's job.py, one executor."""
    return sparksubmit.Submission(
        api_server=api_server, namespace=namespace, broker="hutch", queue=QUEUE,
        credentials_secret=f"{sparkpods.JOB_USER}-user-credentials", claim="spark-data",
        pod_template=pod_template, image=image, app_name="type-counts", executors=1,
        job_file=f"local://{sparksubmit.USER_JOB_DIR}/job.py",
        arguments=("--queue", QUEUE, "--checkpoint", "/data/type-counts/checkpoint",
                   "--output", "/data/type-counts/output", "--max-messages-per-batch", "200"),
    )  # fmt: skip


@pytest.mark.k8s
@pytest.mark.spark
@pytest.mark.timeout(1500)  # a cold hutch-spark build is minutes
def test_a_job_file_from_a_configmap_runs_as_pods_in_team_spark(
    node: Any, spark_image: str, tmp_path: Path
) -> None:
    cluster = clusters.local_cluster(node)
    node.apply_crds(REPO / "crds")
    # The claims name no class: the provisioner's is the default, as the node starts (an
    # earlier test on this plane may have made the pre-made PVs' class the default).
    localnode.make_default(cluster, provisioner.STORAGE_CLASS)
    cluster.create_namespace(NAMESPACE)
    operator = releases.install(cluster, NAMESPACE, tmp_path)
    try:
        _run(node, cluster, spark_image, tmp_path)
    except BaseException:
        pods.save_logs(cluster, NAMESPACE, tmp_path / "pod-logs")
        sys.stderr.write(f"pod logs: {tmp_path / 'pod-logs'}\n")
        raise
    finally:
        cluster.kubectl("delete", "hutch", "--all", "-n", NAMESPACE, "--wait",
                        "--timeout=120s", check=False)  # fmt: skip
        operator.uninstall()
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


def _run(node: Any, cluster: clusters.Cluster, image: str, work: Path) -> None:
    endpoint = sparkpods.example_broker(cluster, NAMESPACE)
    sparkpods.declare_durable(endpoint, QUEUE)
    published = _publish(endpoint)
    sparkpods.job_user(cluster, NAMESPACE)  # examples/spark-user.yaml: read on orders-eu

    template = work / "spark-pod-template.json"
    template.write_text(json.dumps(sparksubmit.pod_template(job_configmap=CONFIGMAP)))
    sub = user_submission(node.server, NAMESPACE, template, image)
    env = sparkpods.environment(node.kubeconfig)

    # Before the namespace's objects exist: the driver's ServiceAccount is missing, and the
    # apiserver refuses the driver Pod, so nothing runs.
    refused = _spark_submit(sub, env, work / "spark-submit-refused.log", timeout=300)
    assert refused.returncode != 0, refused.output[-3000:]
    assert 'serviceaccount "hutch-spark" not found' in refused.output, refused.output[-3000:]
    assert pods.get_pod(cluster, NAMESPACE, sub.driver_pod) is None

    # docs/spark.md, "Run your own job": the two commands, then the same spark-submit.
    manifest = REPO / "examples" / "spark-job-namespace.yaml"
    cluster.kubectl("apply", "-n", NAMESPACE, "-f", str(manifest))
    cluster.kubectl("create", "configmap", CONFIGMAP, "-n", NAMESPACE,
                    f"--from-file=job.py={JOB}")  # fmt: skip
    # The documented limit: a job file over 1 MiB does not fit a ConfigMap.
    too_big = work / "too-big.py"
    too_big.write_text("#" * (1024 * 1024 + 1))
    refused_map = cluster.kubectl("create", "configmap", "too-big", "-n", NAMESPACE,
                                  f"--from-file=job.py={too_big}", check=False)  # fmt: skip
    sys.stderr.write(f"  a 1 MiB + 1 byte job file: {refused_map.stderr.strip()}\n")
    assert refused_map.returncode != 0 and "1048576" in refused_map.stderr, refused_map

    # The namespace's objects without the Pod template's volume: the driver starts, and there
    # is no job file in it.
    bare = work / "spark-pod-template-bare.json"
    bare.write_text(json.dumps(sparksubmit.pod_template()))
    unmounted = dataclasses.replace(sub, pod_template=bare, app_name="type-counts-unmounted")
    missed = _spark_submit(unmounted, env, work / "spark-submit-unmounted.log", timeout=300)
    lost = pods.get_pod(cluster, NAMESPACE, unmounted.driver_pod)
    assert lost is not None, missed.output[-3000:]
    log = cluster.kubectl("logs", "-n", NAMESPACE, unmounted.driver_pod, check=False).stdout
    sys.stderr.write(f"  without the volume: spark-submit {missed.returncode}, driver "
                     f"{lost['status']['phase']}: {_mentions(log, sparksubmit.USER_JOB_DIR)}\n")  # fmt: skip
    assert lost["status"]["phase"] == "Failed", (lost["status"], log[-3000:])
    assert f"{sparksubmit.USER_JOB_DIR}/job.py" in log, log[-3000:]

    began = time.monotonic()
    ran = _spark_submit(sub, env, work / "spark-submit.log", timeout=SUBMIT_TIMEOUT)
    seconds = time.monotonic() - began
    sys.stderr.write(f"spark-submit to the driver Pod's end: {seconds:.0f}s\n")
    assert ran.returncode == 0, ran.output[-3000:]

    driver = pods.get_pod(cluster, NAMESPACE, sub.driver_pod)
    assert driver is not None, ran.output[-3000:]
    executors = pods.list_pods(cluster, NAMESPACE, "spark-role=executor")
    pods.save_logs(cluster, NAMESPACE, work / "pod-logs")
    sys.stderr.write("".join(f"  {pods.facts(p).line()}\n" for p in [driver, *executors]))
    assert driver["status"]["phase"] == "Succeeded", driver["status"]
    assert executors, "no executor Pod ran"
    for pod in [driver, *executors]:
        facts = pods.facts(pod)
        assert facts.node == "hutch-node", facts
        assert facts.containers and all(c.startswith("containerd://") for _, c in facts.containers)
        assert _mounts_job(pod), pod["spec"]
    assert driver["spec"]["serviceAccountName"] == sparksubmit.SERVICE_ACCOUNT

    volume_dir = _claimed_directory(cluster)
    totals, batches = _read_counts(volume_dir / "type-counts" / "output")
    sys.stderr.write(f"  counts {dict(totals)} over {len(batches)} micro-batches\n")
    assert totals == Counter(COUNTS)
    assert len(batches) >= 3, batches  # 450 messages in batches of at most 200

    mgmt = management.Management(endpoint)
    queue = mgmt.queue(QUEUE)
    assert (queue["messages"], queue["messages_unacknowledged"], queue["consumers"]) == (0, 0, 0)
    assert queue["message_stats"]["ack"] == published, queue["message_stats"]


def _publish(endpoint: launchers.Endpoint) -> int:
    """COUNTS events, persistent, with confirms, the types interleaved."""
    connection = pika.BlockingConnection(pika.URLParameters(endpoint.amqp_url))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        left = dict(COUNTS)
        sent = 0
        while any(left.values()):
            for kind in sorted(left):
                if left[kind]:
                    left[kind] -= 1
                    body = json.dumps({"type": kind, "n": sent}).encode()
                    props = pika.BasicProperties(delivery_mode=2, message_id=f"e-{sent}")
                    channel.basic_publish("", QUEUE, body, props, mandatory=True)
                    sent += 1
        return sent
    finally:
        connection.close()


class _Ran:
    def __init__(self, returncode: int, output: str) -> None:
        self.returncode = returncode
        self.output = output


def _spark_submit(
    sub: sparksubmit.Submission, env: dict[str, str], log_path: Path, *, timeout: float
) -> _Ran:
    """The host's spark-submit (the pyspark wheel's), logged; it waits for the driver Pod."""
    command = sparksubmit.command(sub, str(sparkpods.SPARK_SUBMIT))
    log_path.write_text(shlex.join(command) + "\n")
    with log_path.open("a") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            proc.wait(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return _Ran(proc.returncode, log_path.read_text(errors="replace"))


def _mentions(text: str, needle: str) -> str:
    """The first line of ``text`` that holds ``needle`` (or a note that none does)."""
    return next((line for line in text.splitlines() if needle in line), f"(no {needle!r})")


def _mounts_job(pod: dict[str, Any]) -> bool:
    """The Pod has the ConfigMap as a volume, mounted at USER_JOB_DIR in its Spark container."""
    volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    volume = volumes.get(sparksubmit.USER_JOB_VOLUME, {})
    if volume.get("configMap", {}).get("name") != CONFIGMAP:
        return False
    container = pod["spec"]["containers"][0]
    return any(
        m["name"] == sparksubmit.USER_JOB_VOLUME and m["mountPath"] == sparksubmit.USER_JOB_DIR
        for m in container.get("volumeMounts", [])
    )


def _claimed_directory(cluster: clusters.Cluster) -> Path:
    """Where the claim spark-data lives on this machine: the provisioner's PV for it."""
    pvc = cluster.get(f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims/spark-data")
    assert pvc is not None and pvc["status"]["phase"] == "Bound", pvc
    pv = cluster.get(f"/api/v1/persistentvolumes/{pvc['spec']['volumeName']}")
    assert pv is not None
    assert pv["metadata"]["annotations"][provisioner.PROVISIONED_BY] == provisioner.PROVISIONER
    return Path(pv["spec"]["local"]["path"])


def _read_counts(output: Path) -> tuple[Counter[str], list[str]]:
    """The job's per-batch counts summed over its batch directories."""
    assert output.is_dir(), f"no output at {output}"
    totals: Counter[str] = Counter()
    batches = sorted(p.name for p in output.iterdir() if p.name.startswith("batch="))
    for part in output.glob("batch=*/*.parquet"):
        for row in pq.read_table(part).to_pylist():
            totals[row["type"]] += row["count"]
    return totals, batches


def test_docs_show_the_commands_this_test_runs() -> None:
    """docs/spark.md's "Run your own job": the ConfigMap command, the Pod template and the
    spark-submit command are the ones above, for namespace ``team-spark``."""
    text = (REPO / "docs" / "spark.md").read_text()
    section = text.split("### Run your own job", 1)[1].split("\n### ", 1)[0]
    blocks = [b.split("```", 1)[0] for b in section.split("```sh\n")[1:]]
    commands = [shlex.split(b.replace("\\\n", " "), comments=True) for b in blocks]
    assert [
        "kubectl", "apply", "-n", NAMESPACE, "-f", "examples/spark-job-namespace.yaml",
    ] in _split_lines(blocks)  # fmt: skip
    assert [
        "kubectl", "create", "configmap", CONFIGMAP, "-n", NAMESPACE,
        "--from-file=job.py=examples/spark-type-counts.py",
    ] in _split_lines(blocks)  # fmt: skip
    sub = user_submission("https://127.0.0.1:<port>", NAMESPACE, Path("job-pod-template.json"))
    assert sparksubmit.command(sub) in commands
    template = section.split("```json\n", 1)[1].split("```", 1)[0]
    assert json.loads(template) == sparksubmit.pod_template(job_configmap=CONFIGMAP)


def _split_lines(blocks: list[str]) -> list[list[str]]:
    """Every command of the shell blocks, one per logical line."""
    lines: list[list[str]] = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                lines.append(words)
    return lines


def test_the_tooling_applies_the_shipped_namespace_objects() -> None:
    """make run and the node tests apply examples/spark-job-namespace.yaml's objects, not a
    copy: the driver's identity and rights, and the claim (pinned to a pre-made PV there)."""
    objects = sparksubmit.driver_rbac("team-x")
    assert [o["kind"] for o in objects] == ["ServiceAccount", "Role", "RoleBinding"]
    assert {o["metadata"]["name"] for o in objects} == {sparksubmit.SERVICE_ACCOUNT}
    assert {o["metadata"]["namespace"] for o in objects} == {"team-x"}
    (rule,) = objects[1]["rules"]
    assert set(rule["resources"]) == {"pods", "services", "configmaps", "persistentvolumeclaims"}
    assert {"create", "get", "list", "watch", "delete"} <= set(rule["verbs"])
    binding = objects[2]
    assert binding["roleRef"]["name"] == objects[1]["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sparksubmit.SERVICE_ACCOUNT}]
    # The shipped objects name no namespace, so `kubectl apply -n <any>` places them.
    shipped = sparksubmit.namespace_objects()
    assert all("namespace" not in o["metadata"] for o in shipped)
    (pvc,) = [o for o in shipped if o["kind"] == "PersistentVolumeClaim"]
    assert "storageClassName" not in pvc["spec"]  # the cluster's default class
    pinned = sparksubmit.claim(pvc["metadata"]["name"], "team-x", "pv-1", "2Gi")
    assert pinned["metadata"] == {"name": "spark-data", "namespace": "team-x"}
    assert pinned["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "hutch-test",
        "volumeName": "pv-1",
        "resources": {"requests": {"storage": "2Gi"}},
    }
    assert pvc["spec"]["resources"]["requests"]["storage"] == "1Gi"  # the copy was changed
