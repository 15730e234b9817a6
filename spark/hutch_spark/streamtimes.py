"""`startingTimestamp`: the first offset of each stream published at or after a moment.

Why a consumer, once: the management API gives a stream's offsets but not its publish times,
while the broker itself finds the first message at or after a timestamp given as
`x-stream-offset` (docs/streams.md). So when a new query plans its first batch (there is no
checkpoint yet; the offset found becomes that batch's end, streamplan.initial) or a batch read
is planned, the driver opens one short consumer per stream with prefetch 1, takes the
offset of the first delivery and closes; every later batch is planned from the management API
alone. AMQP timestamps are whole seconds, so the moment is rounded down to its second, as
RabbitMQ does.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping

import pika
import pika.exceptions

from hutch_spark import connections, failures
from hutch_spark.errors import HutchConnectionError
from hutch_spark.streamoptions import StreamOptions
from hutch_spark.streamplan import Bounds

OFFSET_HEADER = "x-stream-offset"
WAIT_S = 5.0  # no delivery this long: nothing was published at or after the moment


def offsets_at(
    settings: StreamOptions, timestamp_ms: int, bounds: Mapping[str, Bounds]
) -> dict[str, int]:
    """Each stream's first offset at or after `timestamp_ms`; its next offset if none."""
    return {
        stream: offset_at(settings, stream, timestamp_ms, held) for stream, held in bounds.items()
    }


def offset_at(settings: StreamOptions, stream: str, timestamp_ms: int, held: Bounds) -> int:
    if held.first == held.next:
        return held.next  # empty: whatever comes is after the moment
    moment = datetime.datetime.fromtimestamp(timestamp_ms // 1000, tz=datetime.UTC)
    params = connections.parameters(
        settings.uri,
        connection_name=f"hutch-spark stream timestamp {stream}",
        ca_file=settings.ca_file,
    )
    try:
        connection = pika.BlockingConnection(params)
    except (pika.exceptions.AMQPError, OSError) as error:
        description = failures.connect_failure(error, connections.endpoint(params))
        raise HutchConnectionError(
            f"hutch: cannot find stream {stream!r}'s offset at startingTimestamp: {description}"
        ) from error
    try:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=1)  # one delivery in flight, taken: cancel rejects none
        found = held.next
        for method, properties, _body in channel.consume(
            stream, arguments={OFFSET_HEADER: moment}, inactivity_timeout=WAIT_S
        ):
            if method is not None:
                offset = (properties.headers or {}).get(OFFSET_HEADER)
                if isinstance(offset, int):
                    found = offset
            break
        channel.cancel()
    except pika.exceptions.AMQPError as error:
        raise HutchConnectionError(
            f"hutch: cannot find stream {stream!r}'s offset at startingTimestamp "
            f"{timestamp_ms}: {error!r}"
        ) from error
    finally:
        if connection.is_open:
            connection.close()
    return found
