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
import itertools
import json
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar

from hutch_broker.admin import listing

SLICE_S: Final = 0.002  # the most one slice of a listing keeps the loop (checked per item)
RUN_LENGTH: Final = 256  # items per sorted run: one C sort of this size takes well under 1 ms
# Sorted runs are merged pairwise in C up to this length (one linear pass, a fraction of a
# millisecond), and the few runs left by heapq.merge, a piece per step.
MERGE_LENGTH: Final = 8192
RELEASE_LENGTH: Final = 4096  # items of a sort's scratch lists freed per step
MAX_LISTINGS: Final = 2  # listings in progress at once, all users together
MAX_LISTINGS_PER_USER: Final = 1

T = TypeVar("T")
R = TypeVar("R", bound=tuple[Any, ...])
Item = listing.Item
# Top-level item keys a listing can read straight from its model objects, without rendering
# them: ``{"name": lambda queue: queue.name, ...}``. A getter returns exactly the rendered
# item's value for that key, or None when the item has no such key.
Fields = Mapping[str, Callable[[Any], Any]]
_COMPACT: Final = (",", ":")
# One encoder for every item: json.dumps with separators builds a new one per call.
_ENCODER: Final = json.JSONEncoder(separators=_COMPACT)


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
        """A stable sort in bounded steps: the keys, sorted runs of indices, then a merge.

        Each step handles a piece of ``RUN_LENGTH`` items at C speed (keys, one sort, a pair of
        runs merged, or a piece of the final merge) and then ticks: a listing page sorts its
        whole snapshot, and a tick per item cost more than the sort itself. Indices are
        sorted by their stored key, so comparisons compare keys only."""
        size = len(items)
        keys: list[Any] = []
        for start in range(0, size, RUN_LENGTH):
            keys.extend(map(key, items[start : start + RUN_LENGTH]))
            await self.tick()
        key_of = keys.__getitem__
        runs = []
        for start in range(0, size, RUN_LENGTH):
            runs.append(sorted(range(start, min(start + RUN_LENGTH, size)), key=key_of))
            await self.tick()
        while len(runs) > 1 and len(runs[0]) + len(runs[1]) <= MERGE_LENGTH:
            paired = []
            for first in range(0, len(runs) - 1, 2):
                # two sorted runs, the earlier first: Timsort merges them stably in one pass
                paired.append(sorted(runs[first] + runs[first + 1], key=key_of))
                await self.tick()
            runs = paired + runs[len(paired) * 2 :]
        result: list[T] = []
        merged = heapq.merge(*runs, key=key_of)  # stable: ties come from earlier runs first
        while piece := [items[index] for index in itertools.islice(merged, RUN_LENGTH)]:
            result.extend(piece)
            await self.tick()
        del merged
        # Freed in pieces too: dropping 100,000 keys and indices at once took about 10 ms.
        for done in (keys, *runs):
            while done:
                del done[-RELEASE_LENGTH:]
                await self.tick()
        return result


class Admission:
    """A listing let in by the gate: ``done_working`` gives the overall slot back once the body
    is built, while the caller keeps its user's slot until the body is sent."""

    def __init__(self, total: asyncio.Semaphore) -> None:
        self._total: asyncio.Semaphore | None = total

    def done_working(self) -> None:
        if self._total is not None:
            self._total.release()
            self._total = None


class ListingGate:
    """At most ``total`` listings built at once, and ``per_user`` of them for any one user from
    the start of the build to the end of sending (a client that does not read its response
    then holds one body of its own, not everyone's slots)."""

    def __init__(self, *, total: int = MAX_LISTINGS, per_user: int = MAX_LISTINGS_PER_USER):
        self.per_user = per_user
        self._total = asyncio.Semaphore(total)
        self._users: dict[str, tuple[asyncio.Semaphore, int]] = {}

    @asynccontextmanager
    async def admit(self, user: str) -> AsyncIterator[Admission]:
        semaphore, holders = self._users.get(user) or (asyncio.Semaphore(self.per_user), 0)
        self._users[user] = (semaphore, holders + 1)
        try:
            async with semaphore:
                await self._total.acquire()
                admission = Admission(self._total)
                try:
                    yield admission
                finally:
                    admission.done_working()
        finally:
            semaphore, holders = self._users[user]
            if holders == 1:
                del self._users[user]
            else:
                self._users[user] = (semaphore, holders - 1)


class SharedRender:
    """One render at a time, its result served to every caller for ``max_age_s``: for
    ``/metrics``, which anybody may ask for as often as they like, so that many scrapers cost
    one render a second between them and one body in memory."""

    def __init__(
        self, *, max_age_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_age_s = max_age_s
        self.clock = clock
        self.renders = 0
        self._body: bytes | None = None
        self._rendered_at = 0.0
        self._pending: asyncio.Future[bytes] | None = None

    async def get(self, render: Callable[[], Awaitable[bytes]]) -> bytes:
        if self._body is not None and self.clock() - self._rendered_at < self.max_age_s:
            return self._body
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._render(render))
        return await asyncio.shield(self._pending)

    async def _render(self, render: Callable[[], Awaitable[bytes]]) -> bytes:
        try:
            self.renders += 1
            body = await render()
            self._body, self._rendered_at = body, self.clock()
            return body
        finally:
            self._pending = None


async def render_list(
    objects: Sequence[T],
    render: Callable[[T], Item],
    query: listing.ListQuery,
    *,
    default_sort: Sequence[str] = listing.DEFAULT_SORT,
    pacer: Pacer,
    fields: Fields | None = None,
) -> bytes:
    """The JSON body of a list response; ``objects`` must be a snapshot (a list), not a view
    of a dict the model may change while the listing waits for its next slice.

    A rendered item lives only as long as one step: its sort key and its JSON (or, when
    paging, its name) are kept and the item is dropped, so a big listing leaves few objects
    behind for the garbage collector to walk. A page's items are rendered again, once sorted.

    When a page is asked for and ``fields`` can read every sort key (and, for ``?name=``, the
    name) from the model objects, nothing is rendered but the page: paging through n objects
    a page at a time then costs n cheap key reads per page, not n renders, and leaves no
    rendered items alive for the collector to walk.
    """
    keys = listing.sort_keys(query, default_sort)
    paging = query.paging
    if paging is None:
        rows = await pacer.map(lambda obj: _row(render(obj), keys, query.columns), objects)
        encoded = [row[1] for row in await _ordered(rows, keys, query.sort_reverse, pacer)]
        return b"[" + b",".join(encoded) + b"]"
    matcher = listing.name_matcher(paging) if paging.name else None
    offset = (paging.page - 1) * paging.page_size
    cheap = fields is not None and all(key in fields for key in keys)
    if cheap and matcher is None and not keys:  # the snapshot's own order: no key to read
        envelope = listing.page_envelope(paging, filtered=len(objects), total=len(objects))
        indices = range(len(objects))[:: -1 if query.sort_reverse else 1]
        span = indices[offset : offset + paging.page_size]
        page = await pacer.map(lambda index: _encoded(render(objects[index]), query), span)
        return _encode_envelope(envelope, b"[" + b",".join(page) + b"]")
    probe = (
        _cheap_probe(objects, fields, keys, matcher)
        if fields is not None and cheap and (matcher is None or "name" in fields)
        else _render_probe(objects, render, keys, matcher)
    )
    probes = await pacer.map(probe, range(len(objects)))
    matched = [found for found in probes if found is not None]
    del probes
    envelope = listing.page_envelope(paging, filtered=len(matched), total=len(objects))
    ordered = await _ordered(matched, keys, query.sort_reverse, pacer)
    window = ordered[offset : offset + paging.page_size]
    del matched, ordered
    page = await pacer.map(lambda row: _encoded(render(objects[row[1]]), query), window)
    return _encode_envelope(envelope, b"[" + b",".join(page) + b"]")


Probe = Callable[[int], tuple[Any, int] | None]


def _render_probe(
    objects: Sequence[T],
    render: Callable[[T], Item],
    keys: Sequence[str],
    matcher: listing.NameMatcher | None,
) -> Probe:
    """(sort key, index) of a matching object, read from its rendered item (then dropped)."""

    def probe(index: int) -> tuple[Any, int] | None:
        item = render(objects[index])
        if matcher is not None and not matcher.search(str(item.get("name", ""))):
            return None
        return (listing.sort_key(item, keys) if keys else None, index)

    return probe


def _cheap_probe(
    objects: Sequence[T], fields: Fields, keys: Sequence[str], matcher: listing.NameMatcher | None
) -> Probe:
    """The same (sort key, index) as ``_render_probe``, read from the model object itself.

    The key is a tuple of ``(rank, str or number)`` tuples: it compares as the rendered key's
    list does, and the collector stops tracking it after one pass, holding only atoms."""
    getters = [fields[key] for key in keys]
    name_of = fields.get("name")

    def probe(index: int) -> tuple[Any, int] | None:
        obj = objects[index]
        if matcher is not None and name_of is not None:
            name = name_of(obj)
            if not matcher.search("" if name is None else str(name)):
                return None
        key = tuple(listing.key_value(getter(obj)) for getter in getters) if keys else None
        return (key, index)

    return probe


def _encoded(item: Item, query: listing.ListQuery) -> bytes:
    return _ENCODER.encode(listing.select_columns(item, query.columns)).encode()


def _row(item: Item, keys: Sequence[str], columns: listing.Columns | None) -> tuple[Any, bytes]:
    selected = listing.select_columns(item, columns)
    encoded = _ENCODER.encode(selected).encode()
    return (listing.sort_key(item, keys) if keys else None, encoded)


async def _ordered(rows: list[R], keys: Sequence[str], reverse: bool, pacer: Pacer) -> list[R]:
    """``rows`` (sort key first) in RabbitMQ's order: stable by key, then reversed if asked."""
    if keys:
        rows = await pacer.sorted(rows, key=lambda row: row[0])
    return rows[::-1] if reverse else rows


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
            else _ENCODER.encode(member).encode()
        )
        parts.append(json.dumps(str(key)).encode() + b":" + encoded)
        await pacer.tick()
    return b"{" + b",".join(parts) + b"}"


async def _encode_list(
    items: Sequence[Item], columns: listing.Columns | None, pacer: Pacer
) -> bytes:
    def one(item: Item) -> bytes:
        return _ENCODER.encode(listing.select_columns(item, columns)).encode()

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
