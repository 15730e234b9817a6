"""The stream source's driver calls, in memory: which of the calls Spark makes on the driver ask
the management API, and what they answer (streamsource.HutchStreamsReader over a fake
streambounds.fetch). The same runs in Spark against a real broker in test_streamdriver.py.

Spark's calls for a new availableNow query, in order: prepareForTriggerAvailableNow,
initialOffset, latestOffset, initialOffset again (to plan the first batch's start), then
latestOffset per batch and once more to find nothing left. A driver restarted with batch 0 in
the offsets log and not in the commit log makes a new reader and calls initialOffset, then
partitions(initial offset, batch 0's logged end), which carries the start batch 0 resolved.
"""

import logging
from typing import Any

import pytest
from hutch_spark import streambounds, streamoptions, streamsource, streamtimes
from hutch_spark.errors import HutchDataLossError, HutchOffsetError
from hutch_spark.streamplan import Bounds, Slice
from hutch_spark.streamreads import SliceCursor
from hutch_spark.streamsource import HutchStreamsReader, StreamSlice
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows


class FakeBroker:
    """What the management API reports: each stream's bounds, and how often it was asked."""

    def __init__(self, **held: tuple[int, int]) -> None:
        self.held = {
            stream: Bounds(first, following) for stream, (first, following) in held.items()
        }
        self.requests = 0

    def fetch(self, settings: streamoptions.StreamOptions, **_: object) -> dict[str, Bounds]:
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


def ranges(source: HutchStreamsReader, start: Any, end: Any) -> list[tuple[str, int, int]]:
    """The `[start, end)` of each slice Spark would run for the batch `(start, end)`."""
    planned: list[tuple[str, int, int]] = []
    for part in source.partitions(start, end):
        assert isinstance(part, StreamSlice)
        planned.append((part.slice.stream, part.slice.start, part.slice.end))
    return planned


def test_latest_becomes_batch_0s_end_so_its_replay_reads_the_same(broker: FakeBroker) -> None:
    source = reader(maxOffsetsPerTrigger="5")
    initial = source.initialOffset()
    assert initial == {"a": -1, "b": -1}  # unresolved
    assert broker.requests == 0
    broker.publish("a", 7)  # the stream grows while the query starts
    end0 = source.latestOffset(initial, ReadMaxRows(5))
    assert end0 == {"a": 107, "b": 40}  # resolved now; no limit applies to reading nothing
    assert source.initialOffset() == initial
    assert ranges(source, source.initialOffset(), end0) == []  # batch 0 reads nothing
    broker.publish("a", 30)
    end1 = source.latestOffset(end0, ReadMaxRows(5))
    assert ranges(source, end0, end1) == [("a", 107, 112)]
    assert broker.requests == 2

    # The driver died inside batch 0 (logged, not committed); the stream grew; a new driver
    # asks for the initial offset again and plans batch 0 from it and the logged end.
    broker.publish("a", 50)
    restarted = reader(maxOffsetsPerTrigger="5")
    assert ranges(restarted, restarted.initialOffset(), end0) == []
    assert broker.requests == 2  # nothing to ask: the logged end says it all


def test_a_query_with_no_new_messages_still_logs_where_it_starts(broker: FakeBroker) -> None:
    source = reader()
    initial = source.initialOffset()
    end0 = source.latestOffset(initial, ReadAllAvailable())
    assert end0 == {"a": 100, "b": 40}  # never the unresolved offset itself, even with nothing new
    assert source.latestOffset(end0, ReadAllAvailable()) == end0  # then: no batch


def test_explicit_offsets_and_latest_in_one_query(broker: FakeBroker) -> None:
    # {"a": 90, "b": -1}: a is read from 90 in batch 0, b from its end when batch 0 is planned.
    source = reader(startingOffsets='{"a": 90, "b": -1}')
    initial = source.initialOffset()
    assert initial == {"a": 90, "b": -1}
    broker.publish("b", 4)
    end0 = source.latestOffset(initial, ReadMaxRows(3))
    assert end0 == {"a": 93, "b": 44}  # the limit is a's alone: b has nothing in batch 0
    assert ranges(source, initial, end0) == [("a", 90, 93)]
    restarted = reader(startingOffsets='{"a": 90, "b": -1}')
    assert ranges(restarted, restarted.initialOffset(), end0) == [("a", 90, 93)]


def test_earliest_is_resolved_into_batch_0s_end_so_its_replay_reads_the_same(
    broker: FakeBroker,
) -> None:
    source = reader(startingOffsets="earliest")
    initial = source.initialOffset()
    assert initial == {"a": -2, "b": -2}  # unresolved, no request
    assert broker.requests == 0
    end0 = source.latestOffset(initial, ReadMaxRows(10))
    # Batch 0 reads from the first offsets held now (0 and 5), and its end carries them.
    assert end0 == {"a": [8, 0], "b": [7, 5]}
    assert ranges(source, initial, end0) == [("a", 0, 8), ("b", 5, 7)]
    end1 = source.latestOffset(end0, ReadMaxRows(10))
    assert ranges(source, end0, end1) == [("a", 8, 16), ("b", 7, 9)]
    # The driver died inside batch 0; retention and publishers moved the stream on; a new
    # driver plans batch 0 from the initial offset and the logged end: the same range.
    broker.held["b"] = Bounds(6, 40)
    broker.publish("a", 9)
    restarted = reader(startingOffsets="earliest")
    assert ranges(restarted, restarted.initialOffset(), end0) == [("a", 0, 8), ("b", 5, 7)]
    assert ranges(restarted, end0, end1) == [("a", 8, 16), ("b", 7, 9)]
    assert broker.requests == 2  # the replay asks nothing


def test_a_head_removed_before_batch_0s_replay_is_data_loss(
    broker: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    # A driver from earliest dies inside batch 0 (logged, not committed); retention then
    # removes the stream's head. Resolved again at the restart, earliest would be the new
    # first offset and the replay would skip the removed head without an error. The replay
    # reads the range batch 0's logged end carries, so the executor reading it finds the loss
    # as in any batch (streamreads.SliceCursor, whose first delivery is then offset 30).
    first = reader(startingOffsets="earliest")
    end0 = first.latestOffset(first.initialOffset(), ReadAllAvailable())
    broker.held["a"] = Bounds(30, 100)  # retention dropped [0, 30)

    def replay(**options: str) -> list[Slice]:
        restarted = reader(startingOffsets="earliest", **options)
        planned = restarted.partitions(restarted.initialOffset(), end0)
        assert restarted.latestOffset(end0, ReadAllAvailable()) == end0  # then: no batch
        return [part.slice for part in planned if isinstance(part, StreamSlice)]

    slices = replay()
    assert [(part.stream, part.start, part.end) for part in slices] == [
        ("a", 0, 100),
        ("b", 5, 40),
    ]
    with pytest.raises(HutchDataLossError) as caught:
        SliceCursor(slices[0], fail_on_data_loss=True).accept(30)
    assert str(caught.value).startswith(
        "hutch: stream 'a' no longer holds offsets [0, 30) of the slice [0, 100) being read: "
        "retention removed them"
    )
    # failOnDataLoss=false: a warning, and the executor reads on from what is held.
    with caplog.at_level(logging.WARNING, logger="hutch_spark.streamreads"):
        cursor = SliceCursor(replay(failOnDataLoss="false")[0], fail_on_data_loss=False)
        assert cursor.accept(30)
    assert cursor.lost == [(0, 30)]
    assert "offsets [0, 30) of the slice [0, 100)" in caplog.text


@pytest.mark.parametrize(
    ("option", "value", "moments"),
    [
        ("startingTimestamp", "1700000000000", {"a": 1_700_000_000_000, "b": 1_700_000_000_000}),
        ("startingOffsetsByTimestamp", '{"b": 7, "a": 5}', {"a": 5, "b": 7}),
    ],
)
def test_a_timestamp_is_resolved_when_batch_0_is_planned(
    broker: FakeBroker,
    monkeypatch: pytest.MonkeyPatch,
    option: str,
    value: str,
    moments: dict[str, int],
) -> None:
    asked: list[dict[str, Bounds]] = []

    def starts_at(
        _settings: Any, given: dict[str, int], bounds: dict[str, Bounds]
    ) -> dict[str, int]:
        assert given == moments
        asked.append(dict(bounds))
        return {stream: held.next - 10 for stream, held in bounds.items()}

    monkeypatch.setattr(streamtimes, "starts_at", starts_at)
    source = reader(**{option: value})
    initial = source.initialOffset()
    assert initial == {"a": -1, "b": -1}
    assert asked == []  # no consumer when Spark merely asks where the query starts
    end0 = source.latestOffset(initial, ReadAllAvailable())
    assert end0 == {"a": [100, 90], "b": [40, 30]}  # read from the moments' offsets
    assert ranges(source, initial, end0) == [("a", 90, 100), ("b", 30, 40)]
    assert len(asked) == 1
    broker.publish("a", 5)
    end1 = source.latestOffset(end0, ReadAllAvailable())
    assert ranges(source, end0, end1) == [("a", 100, 105)]
    restarted = reader(**{option: value})
    assert ranges(restarted, restarted.initialOffset(), end0) == [("a", 90, 100), ("b", 30, 40)]
    assert len(asked) == 1  # the replay resolves nothing again


def test_the_query_start_reads_the_bounds_once_and_each_batch_once(broker: FakeBroker) -> None:
    source = reader(startingOffsets="earliest", maxOffsetsPerTrigger="30")
    source.prepareForTriggerAvailableNow()
    start = source.initialOffset()
    assert start == {"a": -2, "b": -2}
    end = source.latestOffset(start, ReadMaxRows(30))
    assert end == {"a": [23, 0], "b": [12, 5]}  # 30 shared as a's 100 and b's 35 wait
    assert broker.requests == 1  # prepare and the first plan share one read
    assert source.initialOffset() == start
    source.latestOffset(end, ReadMaxRows(30))
    assert broker.requests == 2  # a later trigger asks: the streams move


def test_available_now_asks_nothing_once_it_reached_its_ends(broker: FakeBroker) -> None:
    source = reader(startingOffsets="earliest")
    source.prepareForTriggerAvailableNow()
    end0 = source.latestOffset(source.initialOffset(), ReadAllAvailable())
    assert end0 == {"a": [100, 0], "b": [40, 5]}  # batch 0 reads all, from the snapshot's look
    broker.publish("a", 3)  # published after the availableNow snapshot: not for this query
    assert source.latestOffset(end0, ReadAllAvailable()) == end0  # as logged: no batch
    assert broker.requests == 1


def test_available_now_past_its_ends_still_asks_and_finds_the_loss(broker: FakeBroker) -> None:
    # A checkpoint beyond what the stream holds (it was deleted and declared again) is data
    # loss, found only by asking the broker: the "nothing left" shortcut must not hide it.
    source = reader()
    source.prepareForTriggerAvailableNow()
    with pytest.raises(HutchDataLossError, match="deleted and declared again"):
        source.latestOffset({"a": 150, "b": 40}, ReadAllAvailable())
    assert broker.requests == 1


class Clock:
    """streamsource's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(streamsource, "monotonic", fake)
    return fake


def test_an_idle_query_asks_at_most_every_idle_interval(broker: FakeBroker, clock: Clock) -> None:
    source = reader()
    end0 = source.latestOffset(source.initialOffset(), ReadAllAvailable())
    assert broker.requests == 1
    assert source.latestOffset(end0, ReadAllAvailable()) == end0  # nothing new: asked
    assert broker.requests == 2
    looked = clock.now
    broker.publish("a", 3)
    for _ in range(9):  # the default trigger's 10 ms polls within IDLE_S: answered, not asked
        clock.now += streamsource.IDLE_S / 10
        assert source.latestOffset(end0, ReadAllAvailable()) == end0
    assert broker.requests == 2
    clock.now = looked + streamsource.IDLE_S  # IDLE_S after the last look
    end1 = source.latestOffset(end0, ReadAllAvailable())
    assert end1 == {"a": 103, "b": 40}
    assert broker.requests == 3
    broker.publish("a", 2)  # the call found something: the next one asks at once
    assert source.latestOffset(end1, ReadAllAvailable()) == {"a": 105, "b": 40}
    assert broker.requests == 4


def test_the_idle_answer_is_for_the_start_it_was_found_at(broker: FakeBroker, clock: Clock) -> None:
    # A start Spark has not asked about (another offset) is asked about, idle or not.
    source = reader()
    assert source.latestOffset({"a": 100, "b": 40}, ReadAllAvailable()) == {"a": 100, "b": 40}
    assert source.latestOffset({"a": 90, "b": 40}, ReadAllAvailable()) == {"a": 100, "b": 40}
    assert broker.requests == 2


def test_available_now_is_never_answered_from_an_idle_look(
    broker: FakeBroker, clock: Clock
) -> None:
    source = reader(startingOffsets="earliest", maxOffsetsPerTrigger="200")
    source.prepareForTriggerAvailableNow()
    end0 = source.latestOffset(source.initialOffset(), ReadMaxRows(100))
    end = source.latestOffset(end0, ReadMaxRows(100))
    assert end == {"a": 100, "b": 40}
    assert source.latestOffset(end, ReadAllAvailable()) == end  # its ends: no request
    assert broker.requests == 2


class FakeSuperStream:
    """The partitions the management API lists for a super stream, and how often it was asked."""

    def __init__(self, *partitions: str) -> None:
        self.partitions = list(partitions)
        self.requests = 0

    def list(self, settings: streamoptions.StreamOptions, **_: object) -> tuple[str, ...]:
        assert settings.super_stream == "o"
        self.requests += 1
        return tuple(self.partitions)


@pytest.fixture
def super_stream(monkeypatch: pytest.MonkeyPatch) -> FakeSuperStream:
    fake = FakeSuperStream("a", "b")
    monkeypatch.setattr(streambounds, "partitions", fake.list)
    return fake


def super_reader(streams: tuple[str, ...], **options: str) -> HutchStreamsReader:
    """A superStream reader as streamsource.resolved makes it: its partitions listed then."""
    settings = streamoptions.parse_stream_options({"superStream": "o", **options})
    return HutchStreamsReader(streamoptions.with_streams(settings, streams))


def test_a_partition_added_to_a_running_super_stream_is_read_from_offset_0(
    broker: FakeBroker, super_stream: FakeSuperStream, caplog: pytest.LogCaptureFixture
) -> None:
    source = super_reader(("a", "b"), startingOffsets="latest")
    start = source.initialOffset()
    end0 = source.latestOffset(start, ReadAllAvailable())
    assert end0 == {"a": 100, "b": 40}
    assert super_stream.requests == 1  # each plan lists the partitions once
    broker.held["c"] = Bounds(0, 7)  # bound since, with 7 messages
    super_stream.partitions.append("c")
    broker.publish("a", 3)
    with caplog.at_level(logging.INFO, logger="hutch_spark.streamsource"):
        end1 = source.latestOffset(end0, ReadAllAvailable())
    assert end1 == {"a": 103, "b": 40, "c": 7}
    assert "super stream 'o' has new partition(s) ['c']: read from offset 0" in caplog.text
    assert ranges(source, end0, end1) == [("a", 100, 103), ("c", 0, 7)]
    # A driver restarted on that checkpoint lists c among the partitions and replays the
    # batch with the same ranges; the next plan starts c where the batch ended.
    restarted = super_reader(("a", "b", "c"))
    assert ranges(restarted, end0, end1) == [("a", 100, 103), ("c", 0, 7)]
    broker.publish("c", 2)
    assert restarted.latestOffset(end1, ReadAllAvailable()) == {"a": 103, "b": 40, "c": 9}


def test_an_empty_partition_added_makes_no_batch_until_it_holds_messages(
    broker: FakeBroker, super_stream: FakeSuperStream, clock: Clock
) -> None:
    source = super_reader(("a", "b"), startingOffsets="latest")
    end0 = source.latestOffset(source.initialOffset(), ReadAllAvailable())
    broker.held["c"] = Bounds(0, 0)
    super_stream.partitions.append("c")
    assert source.latestOffset(end0, ReadAllAvailable()) == end0  # nothing new: no batch
    assert super_stream.requests == 2
    broker.publish("c", 4)
    clock.now += streamsource.IDLE_S  # the idle look is over: the next call asks
    end1 = source.latestOffset(end0, ReadAllAvailable())
    assert end1 == {"a": 100, "b": 40, "c": 4}
    assert ranges(source, end0, end1) == [("c", 0, 4)]


def test_a_partition_added_after_retention_removed_its_head_is_data_loss(
    broker: FakeBroker, super_stream: FakeSuperStream, caplog: pytest.LogCaptureFixture
) -> None:
    end0 = {"a": 100, "b": 40}
    broker.held["c"] = Bounds(5, 9)
    super_stream.partitions.append("c")
    with pytest.raises(HutchDataLossError, match=r"removed offsets \[0, 5\) of stream 'c'"):
        super_reader(("a", "b")).latestOffset(end0, ReadAllAvailable())
    with caplog.at_level(logging.WARNING, logger="hutch_spark.streamsource"):
        lenient = super_reader(("a", "b"), failOnDataLoss="false")
        end1 = lenient.latestOffset(end0, ReadAllAvailable())
    assert end1 == {"a": 100, "b": 40, "c": 9}
    assert "stream 'c': offsets from 0 are no longer held (it holds [5, 9))" in caplog.text


def test_a_partition_no_longer_bound_fails_the_query(
    broker: FakeBroker, super_stream: FakeSuperStream
) -> None:
    source = super_reader(("a", "b"), startingOffsets="latest")
    end0 = source.latestOffset(source.initialOffset(), ReadAllAvailable())
    super_stream.partitions.remove("b")
    with pytest.raises(HutchOffsetError, match=r"partition\(s\) \['b'\] are no longer bound"):
        source.latestOffset(end0, ReadAllAvailable())
    # And a driver restarted without it finds the checkpoint's offsets of b.
    with pytest.raises(HutchOffsetError, match=r"partition\(s\) \['b'\] are no longer bound"):
        super_reader(("a",)).latestOffset(end0, ReadAllAvailable())


def test_a_streams_query_is_not_listed_and_keeps_its_exact_streams(
    broker: FakeBroker, super_stream: FakeSuperStream
) -> None:
    source = reader()
    with pytest.raises(HutchOffsetError, match="this source reads streams"):
        source.latestOffset({"a": 1}, ReadAllAvailable())
    source.latestOffset({"a": 1, "b": 5}, ReadAllAvailable())
    assert super_stream.requests == 0


def test_available_now_reads_the_partitions_it_started_with(
    broker: FakeBroker, super_stream: FakeSuperStream
) -> None:
    source = super_reader(("a", "b"), startingOffsets="earliest")
    source.prepareForTriggerAvailableNow()
    super_stream.partitions.append("c")
    end0 = source.latestOffset(source.initialOffset(), ReadAllAvailable())
    assert end0 == {"a": [100, 0], "b": [40, 5]}
    assert source.latestOffset(end0, ReadAllAvailable()) == end0
    assert super_stream.requests == 0
