"""Where each stream begins and ends, from the broker's management API (the driver's only I/O).

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
their case inside `(?-i:...)`, anchored at both ends. A page holds at most 500 rows on both
brokers, and a request line is cut at 8 KiB (aiohttp, cowboy), so the names go in groups of at
most 500 whose filter stays within `NAME_BUDGET` characters: one request for any query of
ordinary names, one more per group beyond.

Credentials, as for AMQP (connections.py), come from the process that connects: the
`managementUri`'s user, else the AMQP URI's, else `HUTCH_AMQP_USERNAME`/`HUTCH_AMQP_PASSWORD`,
else guest/guest (pika's default). The user needs a management tag (`monitoring` or
`management` with access to the vhost) to read the queue object.
"""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pika

from hutch_spark import connections
from hutch_spark.errors import HutchConnectionError
from hutch_spark.options import redact_uri
from hutch_spark.streamoptions import StreamOptions
from hutch_spark.streamplan import Bounds

TIMEOUT_S = 30.0


LISTED_COLUMNS = "name,type,first_offset,next_offset"
MAX_PAGE_SIZE = 500  # the largest page RabbitMQ 3.10.8 and hutch-broker serve
NAME_BUDGET = 4000  # characters of one request's encoded name filter: its line stays under 8 KiB


def fetch(settings: StreamOptions, env: Mapping[str, str] | None = None) -> dict[str, Bounds]:
    """Every stream's bounds, in option order, in one request; a clear error for a missing or
    wrong queue."""
    if len(settings.streams) == 1:
        return {stream: fetch_one(settings, stream, env) for stream in settings.streams}
    vhost = pika.URLParameters(settings.uri).virtual_host
    what = f"the queues of vhost {vhost!r}"
    by_name: dict[object, Mapping[str, Any]] = {}
    for rows in _listed_rows(settings, what, env):
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


def _listed_rows(
    settings: StreamOptions, what: str, env: Mapping[str, str] | None
) -> Iterator[list[Any]]:
    """The rows of each group's listing, page after page while the answer counts more pages
    (more rows than names only for a name the filter lets through beside another: `$`)."""
    answer = f"list of {what}"
    for group in name_groups(settings.streams):
        page, pages = 1, 1
        while page <= pages:
            found = _queues(settings, listing_query(group, page), what, dict, answer, env)
            rows, count = found.get("items"), found.get("page_count")
            if not isinstance(rows, list) or not isinstance(count, int):
                raise HutchConnectionError(
                    f"hutch: the management API at {redact_uri(settings.management_uri)} "
                    f"answered no {answer}"
                )
            yield rows
            page, pages = page + 1, count


def name_filter(names: Sequence[str]) -> str:
    """A regex the listing's `name` filter matches exactly these names with, and no other
    (`$` also lets through a name with one newline more, as in PCRE and Python alike)."""
    return "^(?-i:" + "|".join(re.escape(name) for name in names) + ")$"


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


def fetch_one(settings: StreamOptions, stream: str, env: Mapping[str, str] | None = None) -> Bounds:
    vhost = pika.URLParameters(settings.uri).virtual_host
    tail = f"/{urllib.parse.quote(stream, safe='')}"
    what = f"stream {stream!r}"
    item = _queues(settings, tail, what, dict, f"queue object for {what}", env)
    return bounds_of(item, stream, vhost, settings.management_uri)


def partitions(settings: StreamOptions, env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The streams of `superStream`: the queues bound to that exchange, in the order of their
    bindings' `x-stream-partition-order` (as RabbitMQ's super streams declare them), then by
    name. Found when a query starts; a partition added later needs a new checkpoint."""
    name = settings.super_stream
    assert name is not None  # noqa: S101 - only called for a superStream
    vhost = pika.URLParameters(settings.uri).virtual_host
    url = (
        f"{_without_user(settings.management_uri)}/api/exchanges/"
        f"{urllib.parse.quote(vhost, safe='')}/{urllib.parse.quote(name, safe='')}"
        "/bindings/source"
    )
    bindings = _get(url, settings, f"super stream (exchange) {name!r}", vhost, env)
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
    settings: StreamOptions,
    tail: str,
    what: str,
    kind: type,
    answer: str,
    env: Mapping[str, str] | None,
) -> Any:
    """`GET /api/queues/{vhost}{tail}`, the one resource both fetches read; an answer that is
    not a `kind` (a proxy's page, another API) fails here, naming the `answer` expected, rather
    than as a KeyError further on."""
    vhost = pika.URLParameters(settings.uri).virtual_host
    url = (
        f"{_without_user(settings.management_uri)}/api/queues/"
        f"{urllib.parse.quote(vhost, safe='')}{tail}"
    )
    found = _get(url, settings, what, vhost, env)
    if not isinstance(found, kind):
        raise HutchConnectionError(
            f"hutch: the management API at {redact_uri(settings.management_uri)} answered no "
            f"{answer}"
        )
    return found


def _get(
    url: str, settings: StreamOptions, what: str, vhost: str, env: Mapping[str, str] | None
) -> Any:
    request = urllib.request.Request(url)  # noqa: S310 - http(s) only (streamoptions)
    user, password = credentials(settings, env)
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    context = None
    if url.startswith("https:"):
        context = ssl.create_default_context(cafile=settings.ca_file)
    where = redact_uri(settings.management_uri)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as reply:  # noqa: S310
            item = json.load(reply)
    except urllib.error.HTTPError as error:
        if error.code == 404:
            raise HutchConnectionError(
                f"hutch: {what} does not exist in vhost {vhost!r} (management API at {where})"
            ) from error
        if error.code in (401, 403):
            raise HutchConnectionError(
                f"hutch: the management API at {where} refused user {user!r} ({error.code}): "
                "reading stream bounds needs a user with a management tag (monitoring, or "
                f"management with access to vhost {vhost!r})"
            ) from error
        raise HutchConnectionError(
            f"hutch: the management API at {where} answered {error.code} {error.reason} for {what}"
        ) from error
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise HutchConnectionError(
            f"hutch: cannot read {what} from the management API at {where}: {reason} (set "
            "option 'managementUri' to the broker's management URL)"
        ) from error
    return item


def _without_user(uri: str) -> str:
    parts = urllib.parse.urlsplit(uri)
    netloc = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=netloc).geturl().rstrip("/")


def credentials(settings: StreamOptions, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The management user: managementUri's, the AMQP URI's, the environment's, or guest."""
    environment = os.environ if env is None else env
    for uri in (settings.management_uri, settings.uri):
        parts = urllib.parse.urlsplit(uri)
        if parts.username is not None:
            return (
                urllib.parse.unquote(parts.username),
                urllib.parse.unquote(parts.password or ""),
            )
    if connections.USERNAME_ENV in environment:
        return (
            environment[connections.USERNAME_ENV],
            environment.get(connections.PASSWORD_ENV, ""),
        )
    return ("guest", "guest")
