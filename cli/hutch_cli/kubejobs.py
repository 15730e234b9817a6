"""The Job ``kubectl hutch perf-test`` runs against a Broker, and how to read its state, pure.

Why a Job in the Broker's own image: that image is on the node already (no pull from the
internet, no image of our own to publish) and holds Python, the Hutch wheel and pamqp, which
is all ``hutch_cli.perftest`` needs. The Job reads the Broker's credentials from its Secret
(``secretKeyRef``), so the password is never in the Job's spec or in ``ps``, unlike
``kubectl rabbitmq perf-test``, which writes it into the Job's arguments. A TLS-only Broker is
reached over AMQPS with its CA mounted from the Secret its ``spec.tls`` names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hutch_cli import kubeplans, perffigures

GENERATOR = ["python", "-m", "hutch_cli.perftest"]
SLACK_SECONDS = 180  # image start, connections, the drain: past -z, the Job is stuck


def validate(args: Sequence[str]) -> perffigures.Options:
    """The generator's options, checked here so bad input changes nothing in the cluster."""
    try:
        return perffigures.parse(["--uri", "amqp://placeholder", *args])
    except perffigures.OptionsError as error:
        raise kubeplans.PlanError(f"perf-test: {error}") from error


def broker_container(statefulset: Mapping[str, Any]) -> Mapping[str, Any]:
    pod = statefulset.get("spec", {}).get("template", {}).get("spec", {})
    for container in pod.get("containers") or ():
        if container.get("name") == kubeplans.CONTAINER:
            return dict(container)
    raise kubeplans.PlanError(
        f"StatefulSet {statefulset.get('metadata', {}).get('name')} has no "
        f"{kubeplans.CONTAINER} container"
    )


def perf_test_job(
    broker: Mapping[str, Any],
    statefulset: Mapping[str, Any],
    service: Mapping[str, Any],
    args: Sequence[str],
) -> dict[str, Any]:
    options = validate(args)
    meta = broker["metadata"]
    name, namespace = str(meta["name"]), str(meta["namespace"])
    container = broker_container(statefulset)
    ports = kubeplans.service_ports(service)
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if kubeplans.AMQP[0] in ports:
        target = ["--uri", f"amqp://{name}:{ports[kubeplans.AMQP[0]]}/%2F"]
    elif kubeplans.AMQPS[0] in ports:
        tls = broker.get("spec", {}).get("tls") or {}
        ca_secret = tls.get("caSecretName") or tls.get("secretName")
        host = f"{name}.{namespace}.svc"
        target = ["--uri", f"amqps://{host}:{ports[kubeplans.AMQPS[0]]}/%2F",
                  "--cacert", f"{kubeplans.PERF_TEST_CA}/ca.crt"]  # fmt: skip
        only_ca = [{"key": "ca.crt", "path": "ca.crt"}]
        volumes.append({"name": "ca", "secret": {"secretName": ca_secret, "items": only_ca}})
        mounts.append({"name": "ca", "mountPath": kubeplans.PERF_TEST_CA, "readOnly": True})
    else:
        raise kubeplans.PlanError(f"Service {name} exposes no AMQP port (amqp or amqps)")
    secret = kubeplans.default_user_secret(broker)
    env = [
        {"name": f"HUTCH_PERF_TEST_{key.upper()}",
         "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
        for key in ("username", "password")
    ]  # fmt: skip
    labels = {"app.kubernetes.io/name": "hutch-perf-test", "app.kubernetes.io/instance": name,
              "app.kubernetes.io/part-of": "hutch"}  # fmt: skip
    generator: dict[str, Any] = {
        "name": "perf-test",
        "image": container["image"],
        "command": [*GENERATOR, *target, *args],
        "env": env,
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                      "limits": {"memory": "256Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": mounts,
    }  # fmt: skip
    if container.get("imagePullPolicy"):
        generator["imagePullPolicy"] = container["imagePullPolicy"]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [generator],
        "volumes": volumes,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
    }
    pulls = statefulset.get("spec", {}).get("template", {}).get("spec", {}).get("imagePullSecrets")
    if pulls:
        pod_spec["imagePullSecrets"] = pulls
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"generateName": f"{name}-perf-test-", "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 600,
            "activeDeadlineSeconds": int(options.seconds) + SLACK_SECONDS,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def job_state(job: Mapping[str, Any]) -> str:
    """``running``, ``succeeded`` or ``failed`` (with the reason when Kubernetes gives one)."""
    status = job.get("status") or {}
    for condition in status.get("conditions") or ():
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return "succeeded"
        if condition.get("type") == "Failed":
            return f"failed: {condition.get('reason', '')} {condition.get('message', '')}".strip()
    return "running"
