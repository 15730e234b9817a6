"""Two objects naming the same broker object: the oldest wins (the Strimzi rule, design §5.6).

Claims live in one Kopf index per kind, keyed by (BrokerKey, vhost, identity); Kopf fills
indexes before the first handler runs, so the decision needs no API call. Objects being deleted
leave the index at once, so a claimant nudged by the departing winner sees itself as the winner.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, order=True)
class Claim:
    created: str
    namespace: str
    name: str
    uid: str

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
