"""Broker handlers: apply children on create/update/resume; a timer refreshes status.

The status timer also wakes the topology objects that wait for this Broker
(``BrokerNotReady``/``BrokerUnavailable``) once it is Available again, instead of leaving them
to their own retry or sweep tick, and deletes what deleted CRs left behind while it was
unreachable (``status.abandoned``, see ``abandoned``). No delete handler and so no finalizer:
every child carries an owner reference, and garbage collection removes them with the Broker.
The ``broker_facts`` index lets topology handlers check a Broker's availability and allowed
namespaces without an API call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from hutch_operator.core import conditions, config, references
from hutch_operator.instances import brokers as instances
from hutch_operator.models import common
from hutch_operator.topology import abandoned, reconciling
from hutch_operator.topology.handlers import registration

RESOURCE = (common.GROUP, common.VERSION, "brokers")


@kopf.index(*RESOURCE, id="broker_facts")
async def broker_facts(body: kopf.Body, **_: Any) -> dict[tuple[str, str], references.BrokerFacts]:
    meta, spec = body.metadata, body.spec
    available = conditions.find(list(body.status.get("conditions") or ()), "Available") or {}
    tls = spec.get("tls") or {}
    facts = references.BrokerFacts(
        namespace=str(meta.namespace),
        name=str(meta.name),
        available=available.get("status") == "True",
        deleting=bool(meta.get("deletionTimestamp")),
        allowed_namespaces=tuple(spec.get("topologyAllowedNamespaces") or ()),
        tls_secret=str(tls.get("secretName") or ""),
        tls_ca_secret=str(tls.get("caSecretName") or ""),
        unavailable_reason=str(available.get("reason") or "")
        if available.get("status") != "True"
        else "",
    )
    return {(facts.namespace, facts.name): facts}


@kopf.on.resume(*RESOURCE, id="apply")
@kopf.on.create(*RESOURCE, id="apply")
@kopf.on.update(*RESOURCE, id="apply")
async def apply(body: kopf.Body, patch: kopf.Patch, retry: int, **_: Any) -> None:
    await instances.reconcile(body, patch, retry)


@kopf.timer(*RESOURCE, id="refresh", interval=config.broker_status_period(), initial_delay=1)
async def refresh(body: kopf.Body, **kwargs: Any) -> None:
    stored = body.status.get("conditions")
    written = await instances.refresh(body)
    if written is None or not reconciling.wakes(stored, written.get("conditions", stored)):
        return
    namespace, name = str(body.metadata.namespace), str(body.metadata.name)
    indices = registration.views(kwargs)
    waiting = [item for index in registration.WAITING_INDEXES
               for item in indices.get(index, {}).get((namespace, name), ())]  # fmt: skip
    await reconciling.wake(waiting)
    listed = list(body.status.get("abandoned") or ())
    if listed:

        async def cleaner(item: Mapping[str, Any]) -> str:
            ops = registration.REGISTRY.get(str(item.get("kind")))
            if ops is None:
                return "left in the broker: unknown kind"
            claims = indices.get(registration.claims_index(ops), {})
            brokers = kwargs[registration.BROKER_INDEX]
            return await reconciling.clean_abandoned(ops, item, brokers, claims)

        for message in await abandoned.clean(namespace, name, listed, cleaner):
            kopf.info(body, reason="AbandonedCleaned", message=message)
