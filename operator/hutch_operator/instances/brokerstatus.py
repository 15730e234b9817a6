"""Broker status: what was applied (memory plan, endpoint) and what runs.

Contract: docs/contracts/operator.md#broker-status.

``Report`` starts from the object's current status, collects changes, and writes only the
top-level keys that differ, so a steady Broker costs no status writes; conditions keep their
``lastTransitionTime`` unless they flip. Warnings become a Warning Event when their reason
changes, not on every pass.
"""

from __future__ import annotations

from typing import Any

import kopf

from hutch_operator.core import brokerclient, conditions, config, errors, kube, references
from hutch_operator.instances import memory, podstate
from hutch_operator.instances.children import meta

ALIVENESS = "/api/aliveness-test/%2F"
TLS_ERRORS = (
    errors.TLSVerificationFailedError,
    errors.TLSHandshakeFailedError,
    errors.TLSSecretInvalidError,
)


def _endpoint(broker: meta.BrokerObject) -> dict[str, str]:
    """Where clients connect: the TLS listeners when ``spec.tls`` is set."""
    if broker.tls is not None:
        return {
            "amqp": f"amqps://{broker.host}:{meta.AMQPS_PORT}",
            "management": f"https://{broker.host}:{meta.MANAGEMENT_TLS_PORT}",
        }
    return {
        "amqp": f"amqp://{broker.host}:{meta.AMQP_PORT}",
        "management": f"http://{broker.host}:{meta.MANAGEMENT_PORT}",
    }


class Report:
    def __init__(self, body: kopf.Body) -> None:
        self.body = body
        self.original = dict(body.status)
        self.status: dict[str, Any] = {k: v for k, v in self.original.items() if k != "conditions"}
        self.conditions = [dict(c) for c in self.original.get("conditions") or ()]
        self.generation = body.metadata.get("generation")
        self.resource_version = body.metadata.get("resourceVersion")

    def condition(self, type_: str, ok: bool, reason: str, message: str = "") -> bool:
        """Sets a condition; True when its status or reason changed."""
        before = conditions.find(self.conditions, type_)
        self.conditions = conditions.upsert(
            self.conditions,
            type_=type_,
            status=ok,
            reason=reason,
            message=message,
            generation=self.generation,
        )
        wanted = ("True" if ok else "False", reason)
        return before is None or (before.get("status"), before.get("reason")) != wanted

    def reconcile_failed(self, error: errors.HutchError) -> None:
        if self.condition("ReconcileSuccess", False, error.reason, str(error)):
            kopf.warn(self.body, reason=error.reason, message=str(error))

    def reconciled(self, broker: meta.BrokerObject) -> None:
        spec = broker.spec
        plan = memory.watermark(spec.resources.model_dump(), spec.memory_high_watermark)
        self.plan = plan
        self.condition("ReconcileSuccess", True, "Applied", "children applied")
        self.status.update(
            observedGeneration=self.generation,
            endpoint=_endpoint(broker),
            defaultUserSecret=broker.secret_name,
            memory=plan.status(),
            diskFreeLimitBytes=memory.disk_free_limit(spec.persistence.size),
        )

    async def observe(self, broker: meta.BrokerObject) -> None:
        spec = broker.spec
        plan = memory.watermark(spec.resources.model_dump(), spec.memory_high_watermark)
        running, pods = await self._pods(broker)
        node = await self._management(broker)
        warnings = list(plan.warnings)
        if node.get("mem_alarm"):
            warnings.insert(0, ("MemoryAlarm", "the broker's memory alarm is in effect"))
        if node.get("disk_free_alarm"):
            warnings.insert(0, ("DiskAlarm", "the broker's disk alarm is in effect"))
        for pod in reversed(pods):  # a Pod that does not run outranks every other warning
            trouble = podstate.trouble(pod)
            if trouble is not None:
                warnings.insert(0, (trouble.reason, trouble.message))
        self._memory(plan, running, node)
        if warnings:
            message = "; ".join(text for _, text in warnings)
            if self.condition("NoWarnings", False, warnings[0][0], message):
                kopf.warn(self.body, reason=warnings[0][0], message=message)
        else:
            self.condition("NoWarnings", True, "NoWarnings")

    def _memory(
        self,
        plan: memory.WatermarkPlan,
        running: dict[str, Any] | None,
        node: dict[str, Any],
    ) -> None:
        """``status.memory`` for what runs: the plan for the broker container's resources as
        the Pod (or, once settled, the StatefulSet) has them, since those are what its cgroup
        enforces; the spec's plan under ``pending`` until a Pod runs it."""
        actual = plan if running is None else memory.watermark(running, float(plan.relative))
        status = actual.status()
        if actual.basis == "Runtime" and node.get("mem_limit"):
            status["highWatermarkBytes"] = node["mem_limit"]
        if actual.status() != plan.status():
            status["pending"] = plan.status()
        elif "pending" in (self.original.get("memory") or {}):
            status["pending"] = None  # a merge patch keeps a nested key unless told to drop it
        self.status["memory"] = status

    async def _pods(
        self, broker: meta.BrokerObject
    ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """``Ready`` from the StatefulSet; the broker container's resources as they run (None
        before there is a StatefulSet); its Pods, read only while it is not settled (then an
        outdated Pod that is not Ready is replaced here)."""
        path = kube.object_path(
            "apps/v1", "statefulsets", broker.namespace, broker.statefulset_name
        )
        try:
            statefulset = await kube.api().get(path)
        except errors.KubeError:
            statefulset = None
        ready = (statefulset or {}).get("status", {}).get("readyReplicas") or 0
        if ready >= broker.spec.replicas:
            self.condition("Ready", True, "PodReady", f"{ready} pod ready")
        else:
            self.condition("Ready", False, "PodNotReady", f"{ready}/{broker.spec.replicas} ready")
        if statefulset is None:
            return None, []
        if podstate.settled(statefulset, broker.spec.replicas):
            template = statefulset.get("spec", {}).get("template", {})
            return podstate.container_resources(template), []
        pods = []
        for ordinal in range(broker.spec.replicas):
            name = f"{broker.statefulset_name}-{ordinal}"
            try:
                pod = await kube.api().get(kube.object_path("v1", "pods", broker.namespace, name))
            except errors.KubeError:
                continue
            if pod is not None:
                pods.append(pod)
                await self._replace_if_stuck(statefulset, pod)
        return (podstate.container_resources(pods[0]) if pods else None), pods

    async def _replace_if_stuck(self, statefulset: dict[str, Any], pod: dict[str, Any]) -> None:
        """Deletes an outdated Pod that is not Ready, once per revision (kubernetes#67250:
        ``OrderedReady`` waits for it to become Ready first, which a crash loop never does)."""
        replaced = dict(self.status.get("podReplaced") or {})
        update = podstate.replacement(statefulset, pod, str(replaced.get("revision") or ""))
        if not update:
            return
        metadata = pod["metadata"]
        path = kube.object_path("v1", "pods", metadata["namespace"], metadata["name"])
        try:  # the uid precondition: never a Pod the StatefulSet made meanwhile
            await kube.api().delete(path, {"preconditions": {"uid": metadata["uid"]}})
        except errors.KubeError as exc:
            kopf.warn(self.body, reason="PodReplaceFailed", message=f"{metadata['name']}: {exc}")
            return
        trouble = podstate.trouble(pod)
        why = trouble.message if trouble is not None else "it is not Ready"
        message = (
            f"deleted Pod {metadata['name']} of revision {podstate.revision(pod)} so the "
            f"StatefulSet recreates it at {update}: {why}"
        )
        kopf.info(self.body, reason="PodReplaced", message=message)
        self.status["podReplaced"] = {
            "pod": metadata["name"],
            "fromRevision": podstate.revision(pod),
            "revision": update,
            "at": conditions.now(),
        }

    async def _management(self, broker: meta.BrokerObject) -> dict[str, Any]:
        """Aliveness → Available; overview → version; nodes → alarms and runtime limit."""
        data = await references.read_secret(broker.namespace, broker.secret_name)
        tls = broker.tls
        base = config.broker_address(broker.namespace, broker.name, tls=tls is not None).management
        if not data:
            self.condition("Available", False, "ManagementUnreachable", "no default user yet")
            return {}
        try:
            trust = references.TLSMaterial()
            if tls is not None:
                trust = await references.tls_material(  # fresh: a fixed CA shows at once
                    broker.namespace, tls.secret_name, tls.ca_secret_name or "", fresh=True
                )
            client = brokerclient.POOL.get(
                base,
                data["username"],
                data["password"],
                ca_pem=trust.ca_pem,
                ca_source=trust.ca_source,
            )
            await client.call(brokerclient.Request("GET", ALIVENESS))
            overview = await client.call(brokerclient.Request("GET", "/api/overview"))
            nodes = await client.call(brokerclient.Request("GET", "/api/nodes"))
        except errors.HutchError as exc:
            if isinstance(exc, errors.AuthenticationFailedError):
                references.forget_secrets()
                await brokerclient.POOL.drop(client)
            # A TLS failure keeps its own reason: "TLSVerificationFailed" says what to fix.
            reason = exc.reason if isinstance(exc, TLS_ERRORS) else "ManagementUnreachable"
            if self.condition("Available", False, reason, str(exc)) and reason != (
                "ManagementUnreachable"
            ):
                kopf.warn(self.body, reason=reason, message=str(exc))
            return {}
        self.condition("Available", True, "AlivenessOk", f"{base} answers")
        version = overview.get("product_version") or overview.get("rabbitmq_version")
        if version:
            self.status["brokerVersion"] = str(version)
        return nodes[0] if isinstance(nodes, list) and nodes else {}

    def changes(self) -> dict[str, Any]:
        """The top-level status keys to write (``conditions`` is one key: the whole list)."""
        desired = {**self.status, "conditions": self.conditions}
        return conditions.status_patch(self.original, desired)

    def flush(self, patch: kopf.Patch) -> None:
        """For the ``apply`` handler, through Kopf's patch: it owns ``ReconcileSuccess``."""
        for key, value in self.changes().items():
            patch.status[key] = value

    async def write_if_unchanged(self, path: str) -> dict[str, Any] | None:
        """For the timer: the changes written, or None when the object changed since it was read.

        Why not Kopf's patch: ``conditions`` is one list, written whole, and the timer runs
        beside the ``apply`` handler. A tick that read the Broker before ``apply`` wrote
        ``ReconcileSuccess=False`` (a refused volume shrink, say) put its old
        ``ReconcileSuccess=True`` back, and nothing reconciled again until the spec changed.
        The write carries the resourceVersion the tick read, so the apiserver refuses it (409)
        after any other write; the next tick observes again from the new state.
        """
        changes = self.changes()
        if not changes:
            return changes
        body = {"metadata": {"resourceVersion": self.resource_version}, "status": changes}
        try:
            await kube.api().merge_patch(f"{path}/status", body)
        except errors.KubeError as error:
            if error.status in (404, 409):
                return None
            raise
        return changes
