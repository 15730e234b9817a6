"""StatefulSet ``<broker>-server``: one replica, a PVC, restricted security, conservative probes.

Built last (see children/__init__). Probes check TCP only and so ignore alarms: an alarmed broker
must stay Ready so consumers can drain it; the authenticated aliveness check is the operator's
job (``Available``), since a kubelet probe would need credentials in the pod spec.
"""

from __future__ import annotations

from typing import Any

from hutch_operator.instances import memory, overrides
from hutch_operator.instances.children import configmaps, meta, services

CONFIG_HASH_ANNOTATION = "hutch.dev/config-hash"
# No digest of the TLS Secrets' data in the pod template: a renewed certificate reaches the
# broker through the kubelet's refresh of the mounted files, which it reloads for new
# connections (hutch_broker.server.tlsreload), so a renewal is no roll. A changed Secret name or
# TLS turned on or off changes the volumes and the config, and those roll.
SECRET_MODE = 0o440  # owner and group (fsGroup) read; the key is not world-readable
USER_SECRET_UID_ANNOTATION = "hutch.dev/default-user-uid"  # noqa: S105 - a name
DATA_DIR = "/var/lib/hutch"
CONFIG_DIR = "/etc/hutch"
UID = 1000


def _probe(port: str, period: int, timeout: int, failures: int) -> dict[str, Any]:
    return {
        "tcpSocket": {"port": port},
        "periodSeconds": period,
        "timeoutSeconds": timeout,
        "failureThreshold": failures,
    }


def _secret_env(broker: meta.BrokerObject, name: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": broker.secret_name, "key": key}}}


def _command(broker: meta.BrokerObject) -> list[str]:
    listen_everywhere = "0.0.0.0"  # noqa: S104 - the broker listens on all pod interfaces
    # Port flags beat the config file, so a TLS-only broker gets none ("listeners.tcp = none").
    plain = ("--amqp-port", str(meta.AMQP_PORT), "--http-port", str(meta.MANAGEMENT_PORT))
    return [
        "hutch-broker",
        *(plain if broker.plain_listeners else ()),
        *("--data-dir", DATA_DIR, "--config", f"{CONFIG_DIR}/{configmaps.CONFIG_KEY}"),
        *("--bind", listen_everywhere),
    ]


def _tls_mounts(broker: meta.BrokerObject) -> list[dict[str, Any]]:
    if broker.tls is None:
        return []
    mounts = [{"name": "tls", "mountPath": configmaps.TLS_DIR, "readOnly": True}]
    if broker.tls.ca_secret_name:
        mounts.append({"name": "tls-ca", "mountPath": configmaps.TLS_CA_DIR, "readOnly": True})
    return mounts


def _tls_volumes(broker: meta.BrokerObject) -> list[dict[str, Any]]:
    if broker.tls is None:
        return []
    keys = [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]
    secret = {"secretName": broker.tls.secret_name, "items": keys, "defaultMode": SECRET_MODE}
    volumes: list[dict[str, Any]] = [{"name": "tls", "secret": secret}]
    if broker.tls.ca_secret_name:
        ca = {"secretName": broker.tls.ca_secret_name, "defaultMode": SECRET_MODE}
        ca["items"] = [{"key": "ca.crt", "path": "ca.crt"}]
        volumes.append({"name": "tls-ca", "secret": ca})
    return volumes


def container(broker: meta.BrokerObject) -> dict[str, Any]:
    amqp, management = ("amqp", "management") if broker.plain_listeners else services.TLS_NAMES
    return {
        "name": "hutch-broker",
        "image": broker.image,
        "command": _command(broker),
        "env": [
            _secret_env(broker, "HUTCH_DEFAULT_USER", "username"),
            _secret_env(broker, "HUTCH_DEFAULT_PASS", "password"),
        ],
        "ports": [
            {"name": name, "containerPort": number, "protocol": "TCP"}
            for name, number in services.listening(broker)
        ],
        "resources": broker.spec.resources.model_dump(),
        # Startup: every second, up to 3 minutes (recovery replays the store first). Readiness
        # every 2 s: the kubelet's immediate readiness run after startup succeeds can lose a
        # race with its own status, and then Ready waited out a whole period (10 s before).
        # A TCP connect is accepted by the kernel, so a busy broker does not flap.
        "startupProbe": _probe(amqp, period=1, timeout=2, failures=180),
        "readinessProbe": _probe(amqp, period=2, timeout=5, failures=5),
        "livenessProbe": _probe(management, period=30, timeout=10, failures=6),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": UID,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_DIR},
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 - an emptyDir, not the host's
            *_tls_mounts(broker),
        ],
    }


def volume_size(broker: meta.BrokerObject) -> str | None:
    """The PVC size, or None for ``"0"`` (emptyDir)."""
    size = broker.spec.persistence.size
    return None if memory.parse_quantity(size) == 0 else str(size)


def _claim(broker: meta.BrokerObject, size: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": size}},
    }
    if broker.spec.persistence.storage_class_name:
        spec["storageClassName"] = broker.spec.persistence.storage_class_name
    return {"metadata": {"name": "data", "labels": meta.selector(broker)}, "spec": spec}


def build(broker: meta.BrokerObject, *, config_hash: str, secret_uid: str) -> dict[str, Any]:
    size = volume_size(broker)
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": broker.config_name}},
        {"name": "tmp", "emptyDir": {}},
        *_tls_volumes(broker),
    ]
    annotations = {CONFIG_HASH_ANNOTATION: config_hash, USER_SECRET_UID_ANNOTATION: secret_uid}
    if size is None:
        volumes.insert(0, {"name": "data", "emptyDir": {}})
    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": broker.spec.termination_grace_period_seconds,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": UID,
            "runAsGroup": UID,
            "fsGroup": UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "automountServiceAccountToken": False,
        "containers": [container(broker)],
        "volumes": volumes,
    }
    if broker.spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [s.model_dump() for s in broker.spec.image_pull_secrets]
    statefulset: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta.metadata(broker, broker.statefulset_name),
        "spec": {
            "replicas": broker.spec.replicas,
            "serviceName": broker.headless_name,
            "selector": {"matchLabels": meta.selector(broker)},
            "podManagementPolicy": "OrderedReady",
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": "Retain",
                "whenScaled": "Retain",
            },
            "template": {
                "metadata": {
                    "labels": meta.labels(broker),
                    "annotations": annotations,
                },
                "spec": pod_spec,
            },
        },
    }
    if size is not None:
        statefulset["spec"]["volumeClaimTemplates"] = [_claim(broker, size)]
    patch = broker.spec.override.stateful_set
    overrides.check_forbidden(patch)
    merged: dict[str, Any] = overrides.merge(statefulset, patch)
    return merged
