"""Who may touch a broker object: claims (oldest wins, the Strimzi rule) and ownership.

Contract: docs/contracts/operator.md#conflicts.

Claims live in one Kopf index per kind, keyed by (broker endpoint, vhost, identity), so a
Queue reached through a ``brokerRef`` and one reached through a ``connectionSecret`` naming the
same broker claim the same key. Kopf fills indexes before the first handler runs, so the
decision needs no API call. The index function returns an empty mapping (not None) for objects
being deleted or unparseable: Kopf 1.45 ignores a None result and would keep the object's last
claim, so a departed winner would go on blocking its successor.

A claim counts only if its object may use the broker at all: a ``brokerRef`` from a namespace
the Broker does not admit (``NamespaceNotAllowed``) never touches the broker, so it must not
block an admitted tenant either.

Ownership is separate from claims: winning a claim lets an object declare; only a successful
declare (recorded as ``status.declared`` with the ``status.brokerEndpoint`` it went to) lets
it delete, or change a queue's limits in place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

READY = "Ready"


@dataclass(frozen=True, order=True)
class Claim:
    created: str
    namespace: str
    name: str
    uid: str
    broker: str = ""  # "<ns>/<name>" of the Broker a brokerRef names; "" for connectionSecret

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def claims(index: Mapping[Any, Any], key: tuple[str, ...]) -> list[Claim]:
    return sorted(index.get(key) or ())


def winner(claimants: Iterable[Claim]) -> Claim | None:
    """Oldest creationTimestamp wins; ties go to ``namespace/name`` order."""
    return min(claimants, default=None)


def others(claimants: Iterable[Claim], uid: str) -> list[Claim]:
    return [claim for claim in claimants if claim.uid != uid]


def counted(claimants: Iterable[Claim], admits: Callable[[Claim], bool]) -> list[Claim]:
    """The claims that count: those whose object may use the broker (``admits``)."""
    return [claim for claim in claimants if admits(claim)]


def owner(index_claims: Iterable[Claim], me: Claim, admits: Callable[[Claim], bool]) -> Claim:
    """The object that manages the broker object, ``me`` included.

    ``me`` is added because an object reached through a connection Secret claims only once its
    endpoint is in its status: before that the index does not hold it, and a younger claimant
    found there must not win by default.
    """
    return min([*counted(others(index_claims, me.uid), admits), me])


def owns(status: Mapping[str, Any], endpoint: str | None = None) -> bool:
    """Whether deleting this object may delete its broker object (defect: deleting a CR whose
    declare was refused deleted the application's exchange of the same name).

    True only when a declare into this broker succeeded: ``status.declared`` is written with
    Ready=True and cleared when the endpoint changes, so it survives operator restarts.
    A pre-existing object the broker found *equivalent* counts as declared (the declare
    succeeded; RabbitMQ's topology operator does the same): protect those with
    ``deletionPolicy: retain``. ``endpoint`` None answers from status alone, before the broker
    is resolved; given, it must be the endpoint the declare went to. Objects reconciled before
    ownership was recorded have no ``declared``: Ready=True meant their last declare succeeded.
    """
    declared = status.get("declared")
    recorded = status.get("brokerEndpoint")
    if endpoint is not None and recorded is not None and recorded != endpoint:
        return False
    if declared is None:
        return any(
            c.get("type") == READY and c.get("status") == "True"
            for c in status.get("conditions") or ()
        )
    return bool(declared)
