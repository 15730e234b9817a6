"""Moments: the first offset of each stream published at or after a timestamp.

`startingTimestamp` and `startingOffsetsByTimestamp` (where a new query or a batch read starts)
and `endingTimestamp` and `endingOffsetsByTimestamp` (where a batch read ends) give moments,
not offsets. Why a consumer: the management API gives a stream's offsets but not its publish
times, while the broker itself finds the first message at or after a timestamp given as
`x-stream-offset` (docs/streams.md). So when a new query plans its first batch (there is no
checkpoint yet; the offset found becomes that batch's end, streamplan.initial) or a batch read
is planned, the driver consumes once, prefetch 1, and takes each stream's first delivery;
every later batch is planned from the management API alone. AMQP timestamps are whole seconds,
so a moment is rounded down to its second, as RabbitMQ does.

Why one connection and one wait for all the streams: a stream with nothing at or after its
moment delivers nothing, and only a wait can tell. The consumers of every stream are opened on
one channel at once and the wait (`WAIT_S`) is paid once, not once per stream (256 streams
would have waited up to 21 minutes).

A stream holds no message at or after its moment when it is empty, when nothing arrives within
the wait, or when what arrives was published after the plan read the stream's bounds (its
offset is at or past the end the plan holds). Then, as in Kafka's source: an end is the
stream's end (latest); a start fails the query naming the stream
(`startingOffsetsByTimestampStrategy` `error`, the default) or is the stream's end (`latest`).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Mapping
from typing import Any

import pika
import pika.exceptions

from hutch_spark import connections, failures
from hutch_spark.errors import HutchConnectionError, HutchOffsetError
from hutch_spark.streamoptions import StreamOptions
from hutch_spark.streamplan import Bounds

OFFSET_HEADER = "x-stream-offset"
WAIT_S = 5.0  # no delivery this long: nothing was published at or after the moment
TURN_S = 0.2  # how long one wait for frames lasts before the deadline is looked at again


def starts_at(
    settings: StreamOptions, moments: Mapping[str, int], bounds: Mapping[str, Bounds]
) -> dict[str, int]:
    """Where each stream starts for its moment: its first offset at or after it. A stream
    with none: the stream's end with `startingOffsetsByTimestampStrategy` `latest`, else a
    HutchOffsetError naming every such stream and the way out (Kafka's default, `error`)."""
    found = first_offsets(settings, moments, bounds)
    missing = [stream for stream, offset in found.items() if offset is None]
    if missing and settings.timestamp_strategy == "error":
        raise HutchOffsetError(no_message_error(missing, moments, bounds))
    return _or_end(found, bounds)


def ends_at(
    settings: StreamOptions, moments: Mapping[str, int], bounds: Mapping[str, Bounds]
) -> dict[str, int]:
    """Where each stream's batch read ends for its moment: its first offset at or after it
    (excluded, as `endingOffsets` is), or its end when it has none (as Kafka's source)."""
    return _or_end(first_offsets(settings, moments, bounds), bounds)


def _or_end(found: Mapping[str, int | None], bounds: Mapping[str, Bounds]) -> dict[str, int]:
    """Each offset found, or its stream's end where none was."""
    return {
        stream: bounds[stream].next if offset is None else offset
        for stream, offset in found.items()
    }


def no_message_error(
    missing: list[str], moments: Mapping[str, int], bounds: Mapping[str, Bounds]
) -> str:
    described = "; ".join(
        f"{stream!r} (moment {moments[stream]}, {_utc(moments[stream])}; it holds offsets "
        f"[{bounds[stream].first}, {bounds[stream].next}))"
        for stream in missing[:5]
    )
    more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
    return (
        f"hutch: no message was published at or after the starting moment in stream(s) "
        f"{described}{more}; set option 'startingOffsetsByTimestampStrategy' to 'latest' to "
        "start such a stream at its end, as Spark's Kafka source does"
    )


def first_offsets(
    settings: StreamOptions, moments: Mapping[str, int], bounds: Mapping[str, Bounds]
) -> dict[str, int | None]:
    """Each stream's first offset held at or after its moment (milliseconds since the epoch),
    or None when it holds none (module doc)."""
    found: dict[str, int | None] = dict.fromkeys(moments)
    asked = {
        stream: moment
        for stream, moment in moments.items()
        if bounds[stream].first < bounds[stream].next  # an empty stream holds none
    }
    if asked:
        for stream, offset in _first_deliveries(settings, asked).items():
            if offset < bounds[stream].next:
                found[stream] = offset
    return found


def _first_deliveries(settings: StreamOptions, moments: Mapping[str, int]) -> dict[str, int]:
    """The offset of each stream's first delivery from its moment, for those that deliver
    within WAIT_S: one connection, one channel, a consumer per stream."""
    params = connections.parameters(
        settings.uri,
        connection_name="hutch-spark stream timestamps",
        ca_file=settings.ca_file,
    )
    try:
        connection = pika.BlockingConnection(params)
    except (pika.exceptions.AMQPError, OSError) as error:
        description = failures.connect_failure(error, connections.endpoint(params))
        raise HutchConnectionError(
            f"hutch: cannot find the streams' offsets at a timestamp: {description}"
        ) from error
    found: dict[str, int] = {}
    try:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=1)  # per consumer: each stream's first delivery only
        streams: dict[str, str] = {}

        def first(_channel: Any, method: Any, properties: Any, _body: bytes) -> None:
            stream = streams.get(method.consumer_tag)
            offset = (properties.headers or {}).get(OFFSET_HEADER)
            if stream is not None and stream not in found and isinstance(offset, int):
                found[stream] = offset

        for stream, moment in moments.items():
            at = datetime.datetime.fromtimestamp(moment // 1000, tz=datetime.UTC)
            tag = channel.basic_consume(stream, first, arguments={OFFSET_HEADER: at})
            streams[tag] = stream
        deadline = time.monotonic() + WAIT_S
        while len(found) < len(moments):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            connection.process_data_events(time_limit=min(left, TURN_S))
    except pika.exceptions.AMQPError as error:
        raise HutchConnectionError(
            f"hutch: cannot find the offsets of streams {sorted(moments)[:5]!r} at a "
            f"timestamp: {error!r}"
        ) from error
    finally:
        if connection.is_open:
            connection.close()
    return found


def _utc(moment_ms: int) -> str:
    return datetime.datetime.fromtimestamp(moment_ms / 1000, tz=datetime.UTC).isoformat(
        timespec="milliseconds"
    )
