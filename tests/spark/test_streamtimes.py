"""Moments to offsets (streamtimes) against a real hutch-broker, without Spark.

What is at stake: `startingTimestamp`, `startingOffsetsByTimestamp`, `endingTimestamp` and
`endingOffsetsByTimestamp` become each stream's first offset at or after its moment; a stream
with none is told apart (an error, or its end, as Kafka's source does) after one bounded wait
for all the streams, not one per stream; and a message published after the plan read the
bounds is not taken for one that was there.
"""

import json
import time
from typing import Any

import pytest
from hutch_spark import streamoptions, streamtimes
from hutch_spark.errors import HutchOffsetError
from hutch_spark.streamplan import Bounds

pytestmark = pytest.mark.shared_broker

WAIT_S = 1.0  # the test's wait for a stream that has nothing at or after its moment


@pytest.fixture(autouse=True)
def short_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streamtimes, "WAIT_S", WAIT_S)


def declare(channel: Any, name: str) -> str:
    channel.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    return name


def publish(channel: Any, name: str, count: int) -> None:
    for _ in range(count):
        channel.basic_publish("", name, json.dumps({"pad": "x" * 50}).encode())


def next_second() -> int:
    """Sleeps into the next whole second (AMQP timestamps are seconds) and returns its start
    in milliseconds since the epoch."""
    time.sleep(1.05 - time.time() % 1)
    return int(time.time()) * 1000


def settings(broker: Any, **options: str) -> streamoptions.StreamOptions:
    return streamoptions.parse_stream_options(
        {"streams": "unused", "uri": broker.amqp_url, **options}
    )


def test_each_stream_from_its_own_moment_with_one_wait_for_all(
    hutch_broker: Any, channel: Any
) -> None:
    a, b = declare(channel, "a"), declare(channel, "b")
    late = [declare(channel, f"late-{n}") for n in range(5)]
    empty = declare(channel, "empty")
    publish(channel, a, 5)
    publish(channel, b, 3)
    for name in late:
        publish(channel, name, 2)
    first = next_second()
    publish(channel, a, 4)  # offsets 5-8
    publish(channel, b, 6)  # offsets 3-8
    second = next_second()
    publish(channel, b, 2)  # offsets 9-10
    counts = {a: 9, b: 11, empty: 0} | dict.fromkeys(late, 2)
    bounds = {name: Bounds(0, count) for name, count in counts.items()}
    moments = {a: first, b: second, empty: first} | dict.fromkeys(late, second)
    started = time.monotonic()
    found = streamtimes.first_offsets(settings(hutch_broker), moments, bounds)
    took = time.monotonic() - started
    assert found == {a: 5, b: 9, empty: None} | dict.fromkeys(late, None)
    # Five streams with nothing after their moment, found in one wait: one per stream would
    # take five (the 2 s above one wait are room for the set-up on a loaded machine).
    assert WAIT_S <= took < 3 * WAIT_S, took


def test_a_message_published_after_the_plan_is_not_one_it_held(
    hutch_broker: Any, channel: Any
) -> None:
    name = declare(channel, "s")
    publish(channel, name, 4)
    moment = next_second()
    bounds = {name: Bounds(0, 4)}  # what the plan read
    publish(channel, name, 1)  # offset 4: after the moment, but not held when planned
    assert streamtimes.first_offsets(settings(hutch_broker), {name: moment}, bounds) == {name: None}
    assert streamtimes.ends_at(settings(hutch_broker), {name: moment}, bounds) == {name: 4}


def test_a_start_with_nothing_after_its_moment_fails_or_starts_at_the_end(
    hutch_broker: Any, channel: Any
) -> None:
    held, empty = declare(channel, "held"), declare(channel, "nothing")
    publish(channel, held, 3)
    moment = next_second()
    bounds = {held: Bounds(0, 3), empty: Bounds(0, 0)}
    moments = {held: moment, empty: moment}
    with pytest.raises(HutchOffsetError) as caught:
        streamtimes.starts_at(settings(hutch_broker), moments, bounds)
    text = str(caught.value)
    assert text.startswith(
        "hutch: no message was published at or after the starting moment in stream(s) 'held' "
        f"(moment {moment}, "
    ), text
    assert "it holds offsets [0, 3)); 'nothing' (moment" in text
    assert text.endswith(
        "set option 'startingOffsetsByTimestampStrategy' to 'latest' to start such a stream at "
        "its end, as Spark's Kafka source does"
    )
    latest = settings(hutch_broker, startingOffsetsByTimestampStrategy="latest")
    assert streamtimes.starts_at(latest, moments, bounds) == {held: 3, empty: 0}
    # An end with nothing after its moment is the stream's end, whatever the strategy.
    assert streamtimes.ends_at(settings(hutch_broker), moments, bounds) == {held: 3, empty: 0}
