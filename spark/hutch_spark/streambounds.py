r"""Where each stream begins and ends, from the broker's management API (the driver's only I/O).

Why the management API and not AMQP: the driver must plan a batch without consuming anything,
holding no consumer, buffer or acks, so that every message travels from the broker straight to
the executor that reads it. hutch-broker's queue object carries `first_offset` and
`next_offset` for a stream (docs/streams.md); one request per batch is the whole cost:
`GET /api/queues/{vhost}/{name}` for one stream, and for several (a super stream's partitions)
one listing of the vhost's queues cut to the four columns planning reads and filtered to exactly
those streams (`listing_query`), so a trigger costs one round trip however many streams it reads,
and the answer holds their rows only, however many other queues share the vhost. RabbitMQ
3.10.8's queue object has no offsets, so this source needs hutch-broker, and says so.

The filter is the listing's own, RabbitMQ's: `name` with `use_regex=true`, which applies only to
a paged listing (`page`, `page_size`). Its regex is matched case-insensitively (RabbitMQ
compiles it `caseless`, hutch-broker prefixes `(?i)`), so the names are escaped and held to
their case inside `(?-i:...)`, anchored at both ends: `^`, and `\Z` for the end of the name
(`name_filter` says why not `$`). A page holds at most 500 rows on both
brokers, and a request line is cut at 8 KiB (aiohttp, cowboy), so the names go in groups of at
most 500 whose filter stays within `NAME_BUDGET` characters: one request for any query of
ordinary names, one more per group beyond.

The requests go over a `streamhttp.Session`: a reader keeps one for its life, so a query's
plans (and a super stream's partitions, listed again at each plan) share one connection; a
call without one (a batch read's plan, a super stream's partitions when a query starts) opens
one for its request. Credentials, as for AMQP (connections.py), come from the
process that connects: the `managementUri`'s user, else the AMQP URI's, else
`HUTCH_AMQP_USERNAME`/`HUTCH_AMQP_PASSWORD`, else guest/guest (pika's default). The user needs a
management tag (`monitoring` or `management` with access to the vhost) to read the queue object.
"""

from __future__ import annotations

import contextlib
import re
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pika

from hutch_spark.errors import HutchConnectionError
from hutch_spark.options import redact_uri
from hutch_spark.streamhttp import Session
from hutch_spark.streamoptions import StreamOptions
from hutch_spark.streamplan import Bounds

LISTED_COLUMNS = "name,type,first_offset,next_offset"
MAX_PAGE_SIZE = 500  # the largest page RabbitMQ 3.10.8 and hutch-broker serve
NAME_BUDGET = 4000  # characters of one request's encoded name filter: its line stays under 8 KiB


def fetch(
    settings: StreamOptions,
    env: Mapping[str, str] | None = None,
    session: Session | None = None,
) -> dict[str, Bounds]:
    """Every stream's bounds, in option order, in one request (on `session`'s connection, else
    on one of its own); a clear error for a missing or wrong queue."""
    with _using(session, settings, env) as management:
        if len(settings.streams) == 1:
            stream = settings.streams[0]
            return {stream: fetch_one(settings, stream, management)}
        return _fetch_listed(settings, management)


@contextlib.contextmanager
def _using(
    session: Session | None, settings: StreamOptions, env: Mapping[str, str] | None
) -> Iterator[Session]:
    """`session`, or one for this call only, closed after it."""
    if session is not None:
        yield session
        return
    once = Session(settings, env)
    try:
        yield once
    finally:
        once.close()


def _fetch_listed(settings: StreamOptions, session: Session) -> dict[str, Bounds]:
    vhost = pika.URLParameters(settings.uri).virtual_host
    what = f"the queues of vhost {vhost!r}"
    by_name: dict[object, Mapping[str, Any]] = {}
    for rows in _listed_rows(settings, what, session):
        by_name.update((item.get("name"), item) for item in rows if isinstance(item, dict))
    bounds: dict[str, Bounds] = {}
    for stream in settings.streams:
        item = by_name.get(stream)
        if item is None:
            raise HutchConnectionError(
                f"hutch: stream {stream!r} does not exist in vhost {vhost!r} (management API "
                f"at {redact_uri(settings.management_uri)})"
            )
        bounds[stream] = bounds_of(item, stream, vhost, settings.management_uri)
    return bounds


def _listed_rows(settings: StreamOptions, what: str, session: Session) -> Iterator[list[Any]]:
    """The rows of each group's listing, page after page while the answer counts more pages
    (more rows than names only for a name the filter lets through beside another: `$`)."""
    answer = f"list of {what}"
    for group in name_groups(settings.streams):
        page, pages = 1, 1
        while page <= pages:
            found = _queues(session, settings, listing_query(group, page), what, dict, answer)
            rows, count = found.get("items"), found.get("page_count")
            if not isinstance(rows, list) or not isinstance(count, int):
                raise HutchConnectionError(
                    f"hutch: the management API at {redact_uri(settings.management_uri)} "
                    f"answered no {answer}"
                )
            yield rows
            page, pages = page + 1, count


def name_filter(names: Sequence[str]) -> str:
    r"""A regex the listing's `name` filter matches exactly these names with, and no other.

    The end anchor is `\Z`, the very end of the name in Python's `re`, whose syntax
    hutch-broker's matcher takes: `$` also matches before a final newline, so a queue named
    like a stream plus a newline took a row of the page. What would mean the very end in PCRE
    (RabbitMQ) too, a lookahead such as `(?![\s\S])`, hutch-broker refuses (its matcher has no
    lookaround, model/patterns.py), and PCRE's `\z` is no escape in Python's `re` before 3.14.
    RabbitMQ 3.10.8 never answers the declare of a name that ends in a newline, so the edge
    cannot occur there (its PCRE would read `\Z` as `$`)."""
    return "^(?-i:" + "|".join(re.escape(name) for name in names) + r")\Z"


def listing_query(names: Sequence[str], page: int = 1) -> str:
    """The query string of one group's listing: its columns, its filter, one page for all."""
    query = {
        "columns": LISTED_COLUMNS,
        "name": name_filter(names),
        "use_regex": "true",
        "page": str(page),
        "page_size": str(len(names)),
    }
    return "?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote)


def name_groups(names: Sequence[str]) -> list[tuple[str, ...]]:
    """The names in order, in groups of at most `MAX_PAGE_SIZE` whose encoded filter stays
    within `NAME_BUDGET` characters (a name longer than that alone makes a group)."""
    groups: list[list[str]] = []
    size = 0
    for name in names:
        cost = len(urllib.parse.quote(re.escape(name) + "|", safe=""))
        group = groups[-1] if groups else []
        if not group or len(group) == MAX_PAGE_SIZE or size + cost > NAME_BUDGET:
            group = []
            groups.append(group)
            size = len(urllib.parse.quote(name_filter([]), safe=""))
        group.append(name)
        size += cost
    return [tuple(group) for group in groups]


def fetch_one(settings: StreamOptions, stream: str, session: Session) -> Bounds:
    vhost = pika.URLParameters(settings.uri).virtual_host
    tail = f"/{urllib.parse.quote(stream, safe='')}"
    what = f"stream {stream!r}"
    item = _queues(session, settings, tail, what, dict, f"queue object for {what}")
    return bounds_of(item, stream, vhost, settings.management_uri)


def partitions(
    settings: StreamOptions,
    env: Mapping[str, str] | None = None,
    session: Session | None = None,
) -> tuple[str, ...]:
    """The streams of `superStream`: the queues bound to that exchange, in the order of their
    bindings' `x-stream-partition-order` (as RabbitMQ's super streams declare them), then by
    name. Found when a query starts, and by a running query at each plan (streamsource.py)."""
    name = settings.super_stream
    assert name is not None  # noqa: S101 - only called for a superStream
    vhost = pika.URLParameters(settings.uri).virtual_host
    path = (
        f"/api/exchanges/{urllib.parse.quote(vhost, safe='')}/{urllib.parse.quote(name, safe='')}"
        "/bindings/source"
    )
    with _using(session, settings, env) as management:
        bindings = management.get(path, f"super stream (exchange) {name!r}", vhost)
    if not isinstance(bindings, list):
        bindings = []
    ranked: dict[str, tuple[int, int, str]] = {}
    for binding in bindings:
        if not isinstance(binding, dict) or binding.get("destination_type") != "queue":
            continue
        queue = str(binding.get("destination"))
        order = (binding.get("arguments") or {}).get("x-stream-partition-order")
        rank = (0, order, queue) if isinstance(order, int) else (1, 0, queue)
        ranked[queue] = min(rank, ranked.get(queue, rank))
    if not ranked:
        raise HutchConnectionError(
            f"hutch: super stream {name!r} has no partitions: no queue is bound to exchange "
            f"{name!r} in vhost {vhost!r}"
        )
    return tuple(sorted(ranked, key=ranked.__getitem__))


def bounds_of(item: Mapping[str, Any], stream: str, vhost: str, where: str) -> Bounds:
    """The bounds in a queue object, or why it cannot be read as a stream."""
    kind = item.get("type")
    if kind != "stream":
        raise HutchConnectionError(
            f"hutch: queue {stream!r} in vhost {vhost!r} is a {kind} queue, not a stream; "
            "declare it with x-queue-type=stream, or read it with option 'queue'"
        )
    first, following = item.get("first_offset"), item.get("next_offset")
    if not isinstance(first, int) or not isinstance(following, int):
        raise HutchConnectionError(
            f"hutch: the management API at {redact_uri(where)} reports no first_offset and "
            f"next_offset for stream {stream!r}: reading streams from the executors needs "
            "hutch-broker (RabbitMQ 3.10.8's queue object has no offsets)"
        )
    return Bounds(first=first, next=following)


def _queues(
    session: Session, settings: StreamOptions, tail: str, what: str, kind: type, answer: str
) -> Any:
    """`GET /api/queues/{vhost}{tail}`, the one resource both fetches read; an answer that is
    not a `kind` (a proxy's page, another API) fails here, naming the `answer` expected, rather
    than as a KeyError further on."""
    vhost = pika.URLParameters(settings.uri).virtual_host
    path = f"/api/queues/{urllib.parse.quote(vhost, safe='')}{tail}"
    found = session.get(path, what, vhost)
    if not isinstance(found, kind):
        raise HutchConnectionError(
            f"hutch: the management API at {redact_uri(settings.management_uri)} answered no "
            f"{answer}"
        )
    return found
