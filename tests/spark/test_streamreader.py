"""The stream source's driver calls, in memory: which of the calls Spark makes on the driver ask
the management API, and what they answer (streamsource.HutchStreamsReader over a fake
streambounds.fetch). The same runs in Spark against a real broker in test_streamdriver.py.

Spark's calls for a new availableNow query, in order: prepareForTriggerAvailableNow,
initialOffset, latestOffset, initialOffset again (to plan the first batch's start), then
latestOffset per batch and once more to find nothing left.
"""

import pytest
from hutch_spark import streambounds, streamoptions
from hutch_spark.errors import HutchDataLossError
from hutch_spark.streamplan import Bounds
from hutch_spark.streamsource import HutchStreamsReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows


class FakeBroker:
    """What the management API reports: each stream's bounds, and how often it was asked."""

    def __init__(self, **held: tuple[int, int]) -> None:
        self.held = {
            stream: Bounds(first, following) for stream, (first, following) in held.items()
        }
        self.requests = 0

    def fetch(self, settings: streamoptions.StreamOptions) -> dict[str, Bounds]:
        self.requests += 1
        return {stream: self.held[stream] for stream in settings.streams}

    def publish(self, stream: str, count: int) -> None:
        held = self.held[stream]
        self.held[stream] = Bounds(held.first, held.next + count)


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> FakeBroker:
    fake = FakeBroker(a=(0, 100), b=(5, 40))
    monkeypatch.setattr(streambounds, "fetch", fake.fetch)
    return fake


def reader(**options: str) -> HutchStreamsReader:
    return HutchStreamsReader(streamoptions.parse_stream_options({"streams": "a,b", **options}))


def test_latest_is_resolved_once_though_spark_asks_twice(broker: FakeBroker) -> None:
    source = reader()
    first = source.initialOffset()
    assert first == {"a": 100, "b": 40}
    assert source.latestOffset(first, ReadAllAvailable()) == first  # the same read: no batch
    broker.publish("a", 7)  # the stream grows; Spark asks again on its next trigger
    assert source.initialOffset() == first
    end = source.latestOffset(first, ReadAllAvailable())
    assert end == {"a": 107, "b": 40}
    assert source.initialOffset() == first  # the first batch is [100, 107), not [107, 107)
    assert broker.requests == 2  # the query's start, then the second trigger


def test_the_query_start_reads_the_bounds_once_and_each_batch_once(broker: FakeBroker) -> None:
    source = reader(startingOffsets="earliest", maxOffsetsPerTrigger="30")
    source.prepareForTriggerAvailableNow()
    start = source.initialOffset()
    assert start == {"a": 0, "b": 5}
    end = source.latestOffset(start, ReadMaxRows(30))
    assert broker.requests == 1  # prepare, initialOffset and the first plan share one read
    assert source.initialOffset() == start
    source.latestOffset(end, ReadMaxRows(30))
    assert broker.requests == 2  # a later trigger asks: the streams move


def test_available_now_asks_nothing_once_it_reached_its_ends(broker: FakeBroker) -> None:
    source = reader(startingOffsets="earliest")
    source.prepareForTriggerAvailableNow()
    end = source.latestOffset(source.initialOffset(), ReadAllAvailable())
    assert end == {"a": 100, "b": 40}
    broker.publish("a", 3)  # published after the availableNow snapshot: not for this query
    assert source.latestOffset(end, ReadAllAvailable()) == end
    assert broker.requests == 1


def test_available_now_past_its_ends_still_asks_and_finds_the_loss(broker: FakeBroker) -> None:
    # A checkpoint beyond what the stream holds (it was deleted and declared again) is data
    # loss, found only by asking the broker: the "nothing left" shortcut must not hide it.
    source = reader()
    source.prepareForTriggerAvailableNow()
    with pytest.raises(HutchDataLossError, match="deleted and declared again"):
        source.latestOffset({"a": 150, "b": 40}, ReadAllAvailable())
    assert broker.requests == 1
