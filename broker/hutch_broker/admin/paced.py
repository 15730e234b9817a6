"""Listings built, sorted, paged and serialised in slices that give the event loop back.

Why: the broker runs every tenant on one asyncio loop, and a listing grows with the objects it
lists. Built in one go, ``GET /api/queues/{vhost}`` over 5,000 queues held the loop for about
half a second, and eight pollers froze every AMQP connection of every vhost for seconds. Here
each step (render a view per object, filter by name, sort, cut the page and columns, encode
JSON) runs over a snapshot of the objects and calls ``Pacer.tick`` after each unit of work; once
a slice has used its budget (a few milliseconds), the listing yields and the loop serves
everyone else before it resumes. The caller waits longer for a big listing; nobody else does.

The output is byte for byte what ``listing.render_list`` plus ``json.dumps`` give (a test
holds the two together), so RabbitMQ's paging, sorting and ``?columns=`` are unchanged. Sorting
is a merge of small sorted runs: each run is one bounded C sort, and the merge hands out one
item per step. ``ListingGate`` bounds how many listings run at once, overall and per user, so
eight pollers queue behind each other instead of taking eight slices per loop turn.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar

from hutch_broker.admin import listing

SLICE_S: Final = 0.002  # the most one slice of a listing keeps the loop (checked per item)
RUN_LENGTH: Final = 256  # items per sorted run: one C sort of this size takes well under 1 ms
MAX_LISTINGS: Final = 2  # listings in progress at once, all users together
MAX_LISTINGS_PER_USER: Final = 1

T = TypeVar("T")
Item = listing.Item
_COMPACT: Final = (",", ":")


class Pacer:
    """Counts work against a time budget and yields to the loop when a slice is spent.

    ``clock`` is injectable so the slicing can be tested without timing anything.
    """

    def __init__(
        self, *, slice_s: float = SLICE_S, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.slice_s = slice_s
        self.clock = clock
        self.slices = 1
        self.longest_s = 0.0
        self._slice_started = clock()

    async def tick(self) -> None:
        elapsed = self.clock() - self._slice_started
        if elapsed < self.slice_s:
            return
        self.longest_s = max(self.longest_s, elapsed)
        await asyncio.sleep(0)
        self.slices += 1
        self._slice_started = self.clock()

    async def map(self, render: Callable[[T], Any], objects: Iterable[T]) -> list[Any]:
        result = []
        for obj in objects:
            result.append(render(obj))
            await self.tick()
        return result

    async def sorted(self, items: Sequence[T], key: Callable[[T], Any]) -> list[T]:
        """A stable sort in bounded steps: keys, then sorted runs, then a merge."""
        decorated = await self.map(lambda index: (key(items[index]), index), range(len(items)))
        runs = []
        for start in range(0, len(decorated), RUN_LENGTH):
            runs.append(sorted(decorated[start : start + RUN_LENGTH]))
            await self.tick()
        return await self.map(lambda pair: items[pair[1]], heapq.merge(*runs))


class ListingGate:
    """At most ``total`` listings at once, and ``per_user`` of them for any one user."""

    def __init__(self, *, total: int = MAX_LISTINGS, per_user: int = MAX_LISTINGS_PER_USER):
        self.per_user = per_user
        self._total = asyncio.Semaphore(total)
        self._users: dict[str, tuple[asyncio.Semaphore, int]] = {}

    @asynccontextmanager
    async def admit(self, user: str) -> Any:
        semaphore, holders = self._users.get(user) or (asyncio.Semaphore(self.per_user), 0)
        self._users[user] = (semaphore, holders + 1)
        try:
            async with semaphore, self._total:
                yield
        finally:
            semaphore, holders = self._users[user]
            if holders == 1:
                del self._users[user]
            else:
                self._users[user] = (semaphore, holders - 1)


async def render_list(
    objects: Iterable[T],
    render: Callable[[T], Item],
    query: listing.ListQuery,
    *,
    default_sort: Sequence[str] = listing.DEFAULT_SORT,
    pacer: Pacer,
) -> bytes:
    """The JSON body of a list response; ``objects`` must be a snapshot (a list), not a view
    of a dict the model may change while the listing waits for its next slice."""
    items = await pacer.map(render, objects)
    keys = listing.sort_keys(query, default_sort)
    if keys:
        items = await pacer.sorted(items, key=lambda item: listing.sort_key(item, keys))
    if query.sort_reverse:
        items.reverse()
    if query.paging is None:
        return await _encode_list(items, query.columns, pacer)
    paging, total = query.paging, len(items)
    if paging.name:
        matcher = listing.name_matcher(paging)
        matched = await pacer.map(lambda item: matcher.search(str(item.get("name", ""))), items)
        items = [item for item, match in zip(items, matched, strict=True) if match]
    envelope = listing.page_envelope(paging, filtered=len(items), total=total)
    offset = (paging.page - 1) * paging.page_size
    encoded = await _encode_list(items[offset : offset + paging.page_size], query.columns, pacer)
    return _encode_envelope(envelope, encoded)


async def encode(value: Any, pacer: Pacer) -> bytes:
    """``json.dumps(value, separators=(",", ":"))`` with the lists of a top-level object (or a
    top-level list) encoded an element per step: a definitions export holds every object."""
    if isinstance(value, list):
        return await _encode_list(value, None, pacer)
    if not isinstance(value, dict):
        return json.dumps(value, separators=_COMPACT).encode()
    parts = []
    for key, member in value.items():
        encoded = (
            await _encode_list(member, None, pacer)
            if isinstance(member, list)
            else json.dumps(member, separators=_COMPACT).encode()
        )
        parts.append(json.dumps(str(key)).encode() + b":" + encoded)
        await pacer.tick()
    return b"{" + b",".join(parts) + b"}"


async def _encode_list(
    items: Sequence[Item], columns: listing.Columns | None, pacer: Pacer
) -> bytes:
    def one(item: Item) -> bytes:
        return json.dumps(listing.select_columns(item, columns), separators=_COMPACT).encode()

    return b"[" + b",".join(await pacer.map(one, items)) + b"]"


def _encode_envelope(envelope: dict[str, Any], items: bytes) -> bytes:
    """The paged object with ``items`` spliced in, in the key order ``listing.page`` uses."""
    parts: Iterator[bytes] = (
        json.dumps(key).encode()
        + b":"
        + (items if key == "items" else json.dumps(value, separators=_COMPACT).encode())
        for key, value in envelope.items()
    )
    return b"{" + b",".join(parts) + b"}"
