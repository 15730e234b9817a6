"""The windowed_counts job on Kubernetes through ``spark-submit --deploy-mode cluster``.

Why: docs/spark.md promises a spark-submit command that runs the job as a driver Pod and
executor Pods against an operator-managed Broker. This module is that command and the objects
it needs (the driver's ServiceAccount and Role, the PVC, the Pod template), built by pure
functions, so the node test (tests/localkube/test_spark_node.py) runs exactly what the docs show and
the docs can be checked against it. Choices that matter, and why:

- credentials are the job's own User's (examples/spark-user.yaml: read on its queue, nothing
  else), from that User's Secret ``<user>-user-credentials`` through Spark's ``secretKeyRef``
  confs (the kubelet resolves them; they never appear in a conf or a plan), never the Broker's
  administrator Secret; the address is the Broker's Service by cluster DNS;
- only the driver consumes (the source acks on the driver), so only the driver gets the AMQP
  environment; executors get the PVC because the job's dedupe and window state and its
  Parquet files are written by executors, next to the checkpoint the driver keeps;
- the Pod template sets ``fsGroup`` so the image's non-root user (uid 185) can write the
  volume; Spark has no conf for a Pod security context;
- CPU *requests* are fractions (``spark.kubernetes.*.request.cores``) while each executor
  still runs one task at a time (``spark.executor.cores=1``): the driver's and two executors'
  whole cores would not fit beside the broker on a 2-core node;
- executors at a fraction of a core run their JVM with C1 only
  (``spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1``, ``FRACTIONAL_EXECUTOR_JVM``):
  the optimizing compiler, C2, runs on the executor's own quota, took about a third of an
  executor's CPU through a 3-million-message stream read at 0.3 CPU, and each executor compiles
  the same code again, so a second executor added less than 1.6x; with C1 alone one executor
  read faster and two read 1.72x what one reads (docs/bench/report.md). ``extra_confs`` may
  set the option otherwise;
- a TLS Broker (``ca_secret`` set, as the chart's ``broker.tls``): the driver dials
  ``amqps://<broker>.<ns>.svc:5671`` and verifies it against ``ca.crt`` of that Secret, which
  the Pod template projects alone at ``/etc/hutch-ca`` (Spark's ``secrets.*`` confs would mount
  every key, ``tls.key`` too when the CA is the certificate's own Secret);
- executor Pods are kept after the job (``deleteOnTermination=false``) so what ran can be
  shown; they go with the driver Pod, their owner;
- the namespace's objects (ServiceAccount, Role, RoleBinding, the claim) are read from
  examples/spark-job-namespace.yaml, the manifest docs/spark.md gives users, so the tests run
  what users apply and there is one source for it;
- a job of the user's own (``job_configmap``) is a ConfigMap mounted by the Pod template at
  ``USER_JOB_DIR`` in the driver and the executors, run as ``local://`` from there: Spark's
  ``volumes.*`` confs know no ConfigMaps, its Pod templates keep any volume.
"""

from __future__ import annotations

import copy
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hutch_spark import sessionconf

from hutch_demo import clienttls, clusters

IMAGE = "localhost/hutch/hutch-spark:0.1.0"
JOB_FILE = "local:///opt/hutch/jobs/windowed_counts.py"
SERVICE_ACCOUNT = "hutch-spark"
SPARK_UID = 185  # the image's user (spark/jobs/Dockerfile), as in Spark's own images
MOUNT = "/data"
NAMESPACE_MANIFEST = clusters.REPO_ROOT / "examples" / "spark-job-namespace.yaml"
USER_JOB_DIR = "/opt/hutch/user"  # where a user's job ConfigMap is mounted
USER_JOB_VOLUME = "hutch-user-job"
FRACTIONAL_EXECUTOR_JVM = "-XX:TieredStopAtLevel=1"  # executors below a core: C1 only (above)


@dataclass(frozen=True)
class Submission:
    """One run of windowed_counts as driver and executor Pods."""

    api_server: str  # https://127.0.0.1:<port>
    namespace: str
    broker: str  # the Broker's name: its Service
    queue: str
    credentials_secret: str  # the job's User's Secret, <user>-user-credentials
    claim: str  # a PVC mounted at MOUNT on the driver and the executors
    pod_template: Path  # written from pod_template() on the submitting machine
    app_name: str = "windowed-counts"
    image: str = IMAGE
    executors: int = 2
    executor_memory: str = "512m"
    driver_memory: str = "1g"
    request_cores: str = "200m"
    max_messages_per_batch: int = 400
    shuffle_partitions: int = 2
    extra_confs: dict[str, str] = field(default_factory=dict)
    ca_secret: str | None = None  # a TLS Broker: the Secret whose ca.crt issued its certificate
    job_file: str = JOB_FILE  # spark-submit's main resource, a local:// path in the Pods
    arguments: tuple[str, ...] | None = None  # the job's own; None: windowed_counts' (job_args)

    @property
    def driver_pod(self) -> str:
        return f"{self.app_name}-driver"

    @property
    def amqp_uri(self) -> str:
        vhost = urllib.parse.quote("/", safe="")
        if self.ca_secret is not None:  # the name its certificate carries, as the chart dials
            return f"amqps://{self.broker}.{self.namespace}.svc:{clienttls.AMQPS_PORT}/{vhost}"
        return f"amqp://{self.broker}.{self.namespace}.svc.cluster.local:5672/{vhost}"

    @property
    def checkpoint(self) -> str:
        return f"{MOUNT}/checkpoint"

    @property
    def output(self) -> str:
        return f"{MOUNT}/counts"


def confs(sub: Submission) -> dict[str, str]:
    """Every ``--conf`` of the submission, in the order the docs list them."""
    secret = sub.credentials_secret
    values = {
        "spark.kubernetes.namespace": sub.namespace,
        "spark.kubernetes.container.image": sub.image,
        "spark.kubernetes.container.image.pullPolicy": "IfNotPresent",
        "spark.kubernetes.authenticate.driver.serviceAccountName": SERVICE_ACCOUNT,
        "spark.kubernetes.driver.pod.name": sub.driver_pod,
        "spark.kubernetes.executor.podNamePrefix": sub.app_name,
        "spark.kubernetes.driver.podTemplateFile": str(sub.pod_template),
        "spark.kubernetes.executor.podTemplateFile": str(sub.pod_template),
        "spark.driver.memory": sub.driver_memory,
        "spark.kubernetes.driver.request.cores": sub.request_cores,
        "spark.executor.instances": str(sub.executors),
        "spark.executor.cores": "1",
        "spark.executor.memory": sub.executor_memory,
        "spark.kubernetes.executor.request.cores": sub.request_cores,
        **(
            {"spark.executor.extraJavaOptions": FRACTIONAL_EXECUTOR_JVM}
            if cores(sub.request_cores) < 1
            else {}
        ),
        "spark.kubernetes.executor.deleteOnTermination": "false",
        "spark.kubernetes.driverEnv.HUTCH_AMQP_URI": sub.amqp_uri,
        "spark.kubernetes.driver.secretKeyRef.HUTCH_AMQP_USERNAME": f"{secret}:username",
        "spark.kubernetes.driver.secretKeyRef.HUTCH_AMQP_PASSWORD": f"{secret}:password",
        "spark.sql.shuffle.partitions": str(sub.shuffle_partitions),
        "spark.ui.enabled": "false",
        sessionconf.PYTHON_SOCKETS: "true",  # no 40 ms stall a Python task (sessionconf)
    }
    for role in ("driver", "executor"):
        prefix = f"spark.kubernetes.{role}.volumes.persistentVolumeClaim.data"
        values[f"{prefix}.options.claimName"] = sub.claim
        values[f"{prefix}.mount.path"] = MOUNT
    if sub.ca_secret is not None:
        ca_file = f"{clienttls.CA_MOUNT}/{clienttls.CA_KEY}"
        values["spark.kubernetes.driverEnv.HUTCH_AMQP_CA_FILE"] = ca_file
    return {**values, **sub.extra_confs}


def cores(request: str) -> float:
    """A Kubernetes CPU quantity as Spark's ``request.cores`` takes it (``200m``, ``0.3``,
    ``1``) in cores."""
    text = request.strip()
    try:
        return int(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        raise ValueError(f"not a CPU quantity: {request!r} (e.g. 200m, 0.5 or 1)") from None


def executor_credentials(secret: str) -> dict[str, str]:
    """Confs that give the executors the job's User too, from its Secret through
    ``secretKeyRef``: a job reading stream queues (option ``streams``) consumes on the
    executors, which the default submission (only the driver consumes) leaves without
    credentials. For ``Submission.extra_confs``."""
    prefix = "spark.kubernetes.executor.secretKeyRef"
    return {
        f"{prefix}.HUTCH_AMQP_USERNAME": f"{secret}:username",
        f"{prefix}.HUTCH_AMQP_PASSWORD": f"{secret}:password",
    }


def job_args(sub: Submission) -> list[str]:
    """The job's own arguments: ``sub.arguments`` when given, else windowed_counts' (drain the
    queue with availableNow, then stop)."""
    if sub.arguments is not None:
        return list(sub.arguments)
    return [
        *("--queue", sub.queue),
        *("--checkpoint", sub.checkpoint),
        *("--output", sub.output),
        *("--window", "1 minute"),
        *("--max-messages-per-batch", str(sub.max_messages_per_batch)),
        "--available-now",
    ]


def command(sub: Submission, spark_submit: str = "spark-submit") -> list[str]:
    """``spark-submit --master k8s://... --deploy-mode cluster ... local:///...py <args>``."""
    cmd = [spark_submit, "--master", f"k8s://{sub.api_server}", "--deploy-mode", "cluster"]
    cmd += ["--name", sub.app_name]
    for key, value in confs(sub).items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, sub.job_file, *job_args(sub)]


def pod_template(ca_secret: str | None = None, job_configmap: str | None = None) -> dict[str, Any]:
    """Driver and executor Pods: the volume group-writable for the image's user; with
    ``ca_secret``, its ``ca.crt`` alone mounted read-only; with ``job_configmap``, that
    ConfigMap's files read-only at ``USER_JOB_DIR`` (Spark keeps the template's volumes and its
    first container's mounts). That container has no name: Spark keeps a template's name, and
    the containers must stay ``spark-kubernetes-driver``/``-executor``."""
    spec: dict[str, Any] = {"securityContext": {"fsGroup": SPARK_UID}}
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if ca_secret is not None:
        volume, mount = clienttls.ca_volume(ca_secret)
        volumes.append(volume)
        mounts.append(mount)
    if job_configmap is not None:
        volumes.append({"name": USER_JOB_VOLUME, "configMap": {"name": job_configmap}})
        mounts.append({"name": USER_JOB_VOLUME, "mountPath": USER_JOB_DIR, "readOnly": True})
    if volumes:
        spec["volumes"] = volumes
        spec["containers"] = [{"volumeMounts": mounts}]
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec}


def namespace_objects() -> list[dict[str, Any]]:
    """examples/spark-job-namespace.yaml's objects, as users apply them (no namespace)."""
    return [doc for doc in yaml.safe_load_all(NAMESPACE_MANIFEST.read_text()) if doc]


def _shipped(kind: str) -> list[dict[str, Any]]:
    return [copy.deepcopy(obj) for obj in namespace_objects() if obj["kind"] == kind]


def driver_rbac(namespace: str) -> list[dict[str, Any]]:
    """What the driver needs to run executors (Pods, their headless Service, ConfigMaps and
    PVCs in its namespace; Spark's documented minimum is ``edit``, this is narrower): the
    ServiceAccount, Role and RoleBinding of examples/spark-job-namespace.yaml, in
    ``namespace``."""
    objects = [*_shipped("ServiceAccount"), *_shipped("Role"), *_shipped("RoleBinding")]
    for obj in objects:
        obj["metadata"]["namespace"] = namespace
    return objects


def claim(name: str, namespace: str, volume: str, size: str) -> dict[str, Any]:
    """examples/spark-job-namespace.yaml's claim, here bound to one named PV of class
    ``hutch-test`` (a test that wants to know its volume's directory before the job runs)."""
    (pvc,) = _shipped("PersistentVolumeClaim")
    pvc["metadata"] = {"name": name, "namespace": namespace}
    pvc["spec"]["storageClassName"] = "hutch-test"
    pvc["spec"]["volumeName"] = volume
    pvc["spec"]["resources"]["requests"]["storage"] = size
    return dict(pvc)
