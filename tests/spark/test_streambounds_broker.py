"""The plan for several streams on real brokers: one request, and only the streams' rows.

Before, `streambounds.fetch` listed every queue of the vhost to plan several streams: with many
other queues beside them, each trigger read them all. Now it asks the listing's name filter for
exactly its streams (test_streambounds.py holds the URL to the broker's matcher in memory):
here hutch-broker, with 1,000 other queues in the vhost, some a case, a character or a suffix
away from a stream's name, answers the streams' rows and no other, counted as received; and
RabbitMQ 3.10.8, whose listing hutch-broker's follows, lets the same names through, and only them.
"""

import base64
import json
import urllib.parse
import urllib.request
import uuid
from typing import Any

import pika
import pytest
from hutch_spark import streambounds, streamoptions
from hutch_spark.errors import HutchConnectionError
from hutch_spark.streamplan import Bounds

pytestmark = [pytest.mark.broker, pytest.mark.shared_broker]

STREAMS = ["orders-0", "a.b", "a+b*c?", "(x)|[y]", "dir/sub/leaf", "Straße-流", "with space"]
DECOYS = ["ORDERS-0", "orders-00", "xorders-0", "aXb", "a+b*c", "dir/sub", "straße-流"]
STREAM = {"x-queue-type": "stream"}


def declare(channel: Any, names: list[str], **arguments: Any) -> None:
    for name in names:
        channel.queue_declare(name, durable=True, arguments=arguments or None)


def test_several_streams_are_planned_from_their_rows_alone(
    hutch_broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(hutch_broker.amqp_url))
    channel = connection.channel()
    channel.confirm_delivery()
    declare(channel, STREAMS, **STREAM)
    declare(channel, DECOYS[:4], **STREAM)
    declare(channel, DECOYS[4:])
    declare(channel, [f"other-{n:04d}" for n in range(1000)])
    for n, name in enumerate(STREAMS):
        for _ in range(n):
            channel.basic_publish("", name, b"x")
    connection.close()
    answers: list[Any] = []
    original = streambounds._queues

    def counted(*args: Any, **kwargs: Any) -> Any:
        answers.append(original(*args, **kwargs))
        return answers[-1]

    monkeypatch.setattr(streambounds, "_queues", counted)

    def bounds(names: list[str]) -> dict[str, Bounds]:
        settings = streamoptions.parse_stream_options(
            {
                "streams": ",".join(names),
                "uri": hutch_broker.amqp_url,
                "managementUri": hutch_broker.http_url,
            }
        )
        return streambounds.fetch(settings)

    asked = list(reversed(STREAMS))
    assert bounds(asked) == {name: Bounds(0, STREAMS.index(name)) for name in asked}
    assert len(answers) == 1  # one request
    rows = answers[0]["items"]
    assert sorted(row["name"] for row in rows) == sorted(STREAMS)  # 7 rows of 1,014 queues
    assert answers[0]["total_count"] == len(STREAMS) + len(DECOYS) + 1000

    with pytest.raises(HutchConnectionError, match="stream 'nope' does not exist in vhost"):
        bounds(["orders-0", "nope"])
    with pytest.raises(HutchConnectionError, match=r"'dir/sub' in vhost .* is a classic queue"):
        bounds(["orders-0", "dir/sub"])


def listed(broker: Any, vhost: str, names: list[str]) -> list[str]:
    """The names the broker's listing answers for the stream source's query of `names`."""
    path = f"/api/queues/{urllib.parse.quote(vhost, safe='')}{streambounds.listing_query(names)}"
    request = urllib.request.Request(broker.http_url.rstrip("/") + path)  # noqa: S310 - loopback
    token = base64.b64encode(":".join(broker.credentials).encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=30) as reply:  # noqa: S310 - loopback
        return sorted(row["name"] for row in json.load(reply)["items"])


def test_the_filter_lets_through_the_same_names_on_rabbitmq(
    broker: Any, request: pytest.FixtureRequest
) -> None:
    """On hutch-broker a queue named like a stream plus a newline is declared too, and kept out
    by the filter's `\\Z` (`$` matches before a final newline: it let that queue in). RabbitMQ
    3.10.8 never answers the declare of a name that ends in a newline (seen: no declare-ok, no
    error, the channel waits for ever), so there the edge cannot occur, and its PCRE, reading
    `\\Z` as `$`, is not asked about it."""
    on_hutch = request.node.callspec.params["broker"] == "hutch"
    vhost = pika.URLParameters(broker.amqp_url).virtual_host
    run = uuid.uuid4().hex[:8]  # the reference node is shared by the session
    names = [f"{name}-{run}" for name in STREAMS]
    decoys = [f"{name}-{run}" for name in DECOYS] + [f"{run}-{name}" for name in STREAMS]
    decoys += [f"{names[0]}\n"] * on_hutch
    connection = pika.BlockingConnection(pika.URLParameters(broker.amqp_url))
    try:
        declare(connection.channel(), names + decoys)
    finally:
        connection.close()
    assert listed(broker, vhost, names) == sorted(names)
