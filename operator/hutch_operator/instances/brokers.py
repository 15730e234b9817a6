"""Broker CR → running hutch-broker: apply the children, then report what runs.

Contract: docs/contracts/operator.md#broker.

Why separate from the handler: the order of children, the volume rules and the status
conditions are the substance of a Broker; the handler module only wires Kopf to them. Children
are written with server-side apply (field manager ``hutch-operator``) and never watched; a timer
(``refresh``) reads the StatefulSet and the management API instead.
"""

from __future__ import annotations

import base64
from typing import Any

import kopf
import pydantic

from hutch_operator.core import brokerclient, conditions, config, errors, kube, references
from hutch_operator.instances import brokerstatus, memory
from hutch_operator.instances.children import configmaps, credentials, disruption, meta, services
from hutch_operator.instances.children import statefulsets as sts_builder
from hutch_operator.models import brokers, common

PLURALS = {
    "ConfigMap": "configmaps",
    "Service": "services",
    "Secret": "secrets",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "StatefulSet": "statefulsets",
}


class UnsupportedOperationError(errors.SpecError):
    reason = "UnsupportedOperation"


def broker_object(body: kopf.Body) -> meta.BrokerObject:
    try:
        spec = brokers.BrokerSpec.model_validate(dict(body.spec))
    except pydantic.ValidationError as exc:
        raise errors.SpecError(f"invalid spec: {exc.errors(include_url=False)}") from exc
    return meta.BrokerObject(
        name=str(body.metadata.name),
        namespace=str(body.metadata.namespace),
        uid=str(body.metadata.uid),
        spec=spec,
        image=spec.image or config.default_broker_image(),
    )


def path_of(obj: dict[str, Any]) -> str:
    metadata = obj["metadata"]
    plural = PLURALS[obj["kind"]]
    return kube.object_path(obj["apiVersion"], plural, metadata["namespace"], metadata["name"])


async def ensure_secret(broker: meta.BrokerObject) -> dict[str, Any]:
    """The default-user Secret, created once with a random password that is never overwritten;
    its address keys follow ``spec.tls``."""
    api = kube.api()
    secret = credentials.build(broker)
    existing = await api.get(path_of(secret))
    if existing is not None:
        data = {k: base64.b64decode(v).decode() for k, v in (existing.get("data") or {}).items()}
        update = credentials.address_update(broker, data)
        if update:  # spec.tls added or removed: the addresses follow, the password stays
            return await api.merge_patch(path_of(secret), {"stringData": update})
        return existing
    collection = kube.object_path("v1", "secrets", broker.namespace)
    try:
        return await api.create(collection, secret)
    except errors.KubeError as exc:
        if exc.status == 409:  # created meanwhile by another worker
            return await api.request("GET", path_of(secret))
        raise


def _template_size(statefulset: dict[str, Any]) -> str | None:
    templates = statefulset.get("spec", {}).get("volumeClaimTemplates") or []
    if not templates:
        return None
    return str(templates[0]["spec"]["resources"]["requests"]["storage"])


async def _volume_change(broker: meta.BrokerObject, desired: dict[str, Any]) -> bool:
    """True when the volume grows (the StatefulSet must be re-created); refuses the rest."""
    existing = await kube.api().get(path_of(desired))
    if existing is None:
        return False
    current, wanted = _template_size(existing), _template_size(desired)
    if current == wanted:
        return False
    if current is None or wanted is None:
        raise UnsupportedOperationError(
            f"persistence.size cannot change from {current or '0'} to {wanted or '0'}"
        )
    if memory.parse_quantity(wanted) < memory.parse_quantity(current):
        raise UnsupportedOperationError(f"volumes cannot shrink ({current} → {wanted})")
    return memory.parse_quantity(wanted) > memory.parse_quantity(current)


async def _grow(broker: meta.BrokerObject, statefulset: dict[str, Any], size: str) -> None:
    """Patch the PVC, then orphan-delete the StatefulSet so the apply re-creates it."""
    api = kube.api()
    for ordinal in range(broker.spec.replicas):
        claim = f"data-{broker.statefulset_name}-{ordinal}"
        path = kube.object_path("v1", "persistentvolumeclaims", broker.namespace, claim)
        if await api.get(path) is not None:
            await api.merge_patch(path, {"spec": {"resources": {"requests": {"storage": size}}}})
    await api.delete(path_of(statefulset), {"propagationPolicy": "Orphan"})


async def check_tls_secrets(broker: meta.BrokerObject) -> None:
    """Raise ``TLSSecretInvalidError`` when a ``spec.tls`` Secret is missing or lacks a key.

    Their content is not rendered into the pod template: the broker reloads renewed files for
    new connections, so a renewal does not roll the pod (docs/operator.md#tls).
    """
    if broker.tls is None:
        return
    await references.tls_material(
        broker.namespace, broker.tls.secret_name, broker.tls.ca_secret_name or "", fresh=True
    )


async def apply_children(broker: meta.BrokerObject) -> None:
    configmap = configmaps.build(broker)
    headless, client = services.build_headless(broker), services.build_client(broker)
    await check_tls_secrets(broker)  # before any write: a missing Secret changes nothing
    secret = await ensure_secret(broker)
    statefulset = sts_builder.build(
        broker,
        config_hash=configmaps.data_hash(configmap),
        secret_uid=str(secret["metadata"].get("uid", "")),
    )
    grow = await _volume_change(broker, statefulset)
    ordered = [configmap, headless, client]
    if broker.spec.pod_disruption_budget.enabled:
        ordered.append(disruption.build(broker))
    api = kube.api()
    for child in ordered:
        await api.apply(path_of(child), child)
    if grow:
        await _grow(broker, statefulset, str(_template_size(statefulset)))
    await api.apply(path_of(statefulset), statefulset)  # last: its config now exists


def note_pause(report: brokerstatus.Report, body: kopf.Body) -> bool:
    """Whether the Broker is paused: then its children are neither applied nor rolled."""
    paused = conditions.is_paused(body.metadata)
    updated = conditions.pause_update(report.conditions, paused, report.generation)
    if updated is not None:
        report.conditions = updated
    return paused


async def reconcile(body: kopf.Body, patch: kopf.Patch, retry: int) -> None:
    report = brokerstatus.Report(body)
    if note_pause(report, body):
        report.flush(patch)
        return
    try:
        broker = broker_object(body)
        await apply_children(broker)
    except errors.HutchError as error:
        report.reconcile_failed(error)
        report.flush(patch)
        if error.delay is None and not error.backoff:
            raise kopf.PermanentError(str(error)) from error
        raise kopf.TemporaryError(str(error), delay=min(300, 5 * 2**retry)) from error
    report.reconciled(broker)
    await report.observe(broker)
    report.flush(patch)


async def refresh(body: kopf.Body) -> dict[str, Any] | None:
    """The Broker timer: StatefulSet readiness, aliveness, alarms (a renewed TLS Secret needs
    nothing here: the broker reloads the files the kubelet refreshes). Returns the status
    changes written ({} for none), or None when the Broker changed meanwhile (written next tick).
    """
    try:
        broker = broker_object(body)
    except errors.SpecError:
        return {}
    report = brokerstatus.Report(body)
    note_pause(report, body)
    await report.observe(broker)
    path = kube.object_path(common.API_VERSION, "brokers", broker.namespace, broker.name)
    written = await report.write_if_unchanged(path)
    await brokerclient.POOL.close_idle()  # the timer doubles as the pool's janitor
    return written
