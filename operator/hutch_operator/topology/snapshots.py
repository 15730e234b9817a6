"""The broker listings one drift-sweep pass judges its objects against (``sweeping``).

Why a pass scope: a pass over 10,000 Queues of one broker must cost one list call, not 10,000,
and finding each object's item must cost O(1), not a scan of the listing (10,000 scans of
10,000 items held the event loop for seconds). So a pass opens a ``scope``; the first
``get`` of a (broker, kind, path) in it lists, later ones reuse the result, and a ``Listing``
indexes its items by the fields an object is looked up by, once per field set.

Freshness is per object, not per broker: a listing is only as fresh as the operator's last
write to the object being judged. Every declare or delete records ``wrote(uid)``, and the sweep
leaves an object whose last write (or handler run) is not older than the listing it would be
judged against. Without that, a user's own change (a Policy edit, a new maxLength, a fresh
Queue) looked like drift to a listing taken just before the write: a false ``DriftCorrected``
and a second write. Per object, because one re-declare in a pass must not make the other 9,999
objects' listing stale (that was a fresh listing per drifted object, O(objects²)).
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from hutch_operator.core import brokerclient, metrics


@dataclass
class Listing:
    """One list call's items, with lookups by field values built on first use."""

    items: list[dict[str, Any]]
    started: float = 0.0  # monotonic time the list call was sent
    _indexes: dict[tuple[str, ...], dict[tuple[Any, ...], list[dict[str, Any]]]] = field(
        default_factory=dict, repr=False
    )

    def all(self, **wanted: Any) -> list[dict[str, Any]]:
        """The items whose fields equal ``wanted`` (``all(vhost="/", user="u")``)."""
        fields = tuple(sorted(wanted))
        index = self._indexes.get(fields)
        if index is None:
            index = {}
            for item in self.items:
                index.setdefault(tuple(_hashable(item.get(f)) for f in fields), []).append(item)
            self._indexes[fields] = index
        return index.get(tuple(_hashable(wanted[f]) for f in fields), [])

    def first(self, **wanted: Any) -> dict[str, Any] | None:
        found = self.all(**wanted)
        return found[0] if found else None

    @property
    def index_builds(self) -> int:
        """How many field sets were indexed (a pass over n objects builds each once)."""
        return len(self._indexes)


def _hashable(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool | None) else repr(value)


_PASS: contextvars.ContextVar[dict[tuple[str, str, str], Listing] | None] = contextvars.ContextVar(
    "hutch_sweep_pass", default=None
)
_written: dict[str, float] = {}  # object uid → monotonic time of the operator's last write


@contextlib.contextmanager
def scope(preloaded: dict[tuple[str, str, str], Listing] | None = None) -> Iterator[None]:
    """One sweep pass: listings are fetched once and shared until the scope closes."""
    token = _PASS.set(dict(preloaded or {}))
    try:
        yield
    finally:
        _PASS.reset(token)


async def get(
    client: brokerclient.BrokerClient, broker_key: str, kind: str, request: brokerclient.Request
) -> Listing:
    """The listed items of ``request`` (``request.path`` carries the vhost), once per pass."""
    key = (broker_key, kind, request.path)
    cache = _PASS.get()
    if cache is not None and key in cache:
        return cache[key]
    started = time.monotonic()
    with metrics.SWEEP_LIST_SECONDS.labels(kind).time():
        items = await client.call(request)
    listing = Listing([item for item in items or () if isinstance(item, dict)], started)
    if cache is not None:
        cache[key] = listing
    return listing


def oldest_listing() -> float | None:
    """When the oldest listing of the current pass was started (None: nothing listed yet)."""
    cache = _PASS.get()
    return min((listing.started for listing in cache.values()), default=None) if cache else None


_handling: set[str] = set()  # uids whose create/update/resume/delete handler is running


@contextlib.contextmanager
def handling(uid: str) -> Iterator[None]:
    """A handler works on this object: the sweep leaves it alone until the handler is done
    and its status has come back through the watch (``sweeping.judgeable``)."""
    _handling.add(uid)
    wrote(uid)
    try:
        yield
    finally:
        _handling.discard(uid)
        wrote(uid)


def busy(uid: str) -> bool:
    return uid in _handling


def wrote(uid: str) -> None:
    """The operator wrote (or may have written) this object's broker object just now."""
    if uid:
        _written[uid] = time.monotonic()


def written(uid: str) -> float:
    return _written.get(uid, -1.0)


def forget_before(moment: float) -> None:
    """Drops write marks older than ``moment`` (no listing that old is still in use)."""
    for uid in [uid for uid, when in _written.items() if when < moment]:
        del _written[uid]


def reset() -> None:
    """Forget everything (operator cleanup)."""
    _written.clear()
    _handling.clear()
