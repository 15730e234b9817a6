"""Stream queues without a broker process: offset specs, the segment index, retention, the
durability gate and bounded work per loop turn (issue 28, ST-1..ST-6).

The side-by-side suite (tests/sidebyside/test_streams.py) holds the AMQP surface to RabbitMQ
3.10.8; here the pure parts and the model are pinned with explicit time, a real store log in a
temporary directory and a fake channel.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from hutch_broker.model import arguments, budgets, policies, streamargs, streams
from hutch_broker.model.messages import Entry, Message
from hutch_broker.model.queues import Consumer, Queue
from hutch_broker.model.streamindex import SegmentIndex
from hutch_broker.model.streams import READ_STEPS, StreamHooks, StreamQueue
from hutch_broker.protocol import errors, properties
from hutch_broker.store import MessageStore
from hutch_testing.targets import OneAtATime

STREAM = {"x-queue-type": "stream"}
DAY_MS = 86_400_000


# -- x-stream-offset and x-max-age ------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "spec"),
    [
        ("first", streamargs.OffsetSpec("first")),
        ("last", streamargs.OffsetSpec("last")),
        ("next", streamargs.OffsetSpec("next")),
        (b"next", streamargs.OffsetSpec("next")),
        (7, streamargs.OffsetSpec("offset", 7)),
        (-3, streamargs.OffsetSpec("offset", 0)),  # 3.10.8: a negative offset is the first
        ("1h", streamargs.OffsetSpec("timestamp", since_ms=3_600_000)),
        ("2D", streamargs.OffsetSpec("timestamp", since_ms=2 * DAY_MS)),
        (
            datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC),
            streamargs.OffsetSpec("timestamp", 946_684_800_000),
        ),
    ],
)
def test_st_2_offset_specs(value: Any, spec: streamargs.OffsetSpec) -> None:
    assert streamargs.parse_offset(value) == spec


@pytest.mark.parametrize("value", ["FIRST", "bogus", "", "1x", "h1", True, 1.5, None, [1]])
def test_st_2_a_malformed_offset_is_541(value: Any) -> None:
    with pytest.raises(errors.HardError) as caught:
        streamargs.parse_offset(value)
    assert (caught.value.reply_code, caught.value.reply_text) == (541, "INTERNAL_ERROR")


def test_st_2_an_interval_is_relative_to_now() -> None:
    assert streamargs.parse_offset("10m").timestamp(1_000_000) == 1_000_000 - 600_000


@pytest.mark.parametrize(
    ("text", "millis"),
    [("1Y", 365 * DAY_MS), ("1M", 30 * DAY_MS), ("7D", 7 * DAY_MS), ("3h", 10_800_000),
     ("5m", 300_000), ("9s", 9_000), ("0D", 0), ("1d", None), ("D", None), ("1D2h", None),
     (5, None)],
)  # fmt: skip
def test_st_1_max_age_units(text: Any, millis: int | None) -> None:
    assert streamargs.parse_age(text) == millis


def test_st_1_declare_checks_use_rabbitmqs_texts() -> None:
    def refusal(args: dict[str, Any]) -> str:
        with pytest.raises(errors.AMQPError) as caught:
            arguments.validate_queue_arguments("q", "/", {**STREAM, **args})
        return caught.value.reply_text

    assert refusal({"x-max-length": 1}) == (
        "PRECONDITION_FAILED - invalid arg 'x-max-length' for queue 'q' in vhost '/' of queue "
        "type rabbit_stream_queue"
    )
    assert refusal({"x-max-age": 5}).endswith(": {unacceptable_type,signedint}")
    assert refusal({"x-max-age": "0D"}).endswith(": invalid_max_age")
    assert refusal({"x-max-age": "soon"}) == "INTERNAL_ERROR"
    assert refusal({"x-stream-max-segment-size-bytes": -1}).endswith(": {value_negative,-1}")
    arguments.validate_queue_arguments("q", "/", {**STREAM, "x-max-age": "1D"})


def test_st_1_another_types_argument_is_refused_after_the_streams_own_values() -> None:
    """3.10.8's order: an argument a stream does not take is refused whatever its value (no
    ``routing_key_but_no_dlx_defined``), the first in the client's order, but only after the
    values of the stream's own arguments."""

    def refusal(args: dict[str, Any]) -> str:
        with pytest.raises(errors.AMQPError) as caught:
            arguments.validate_queue_arguments("q", "/", {**STREAM, **args})
        return caught.value.reply_text.removeprefix("PRECONDITION_FAILED - invalid arg ")

    other = "for queue 'q' in vhost '/' of queue type rabbit_stream_queue"
    assert refusal({"x-dead-letter-routing-key": "k"}) == f"'x-dead-letter-routing-key' {other}"
    assert refusal({"x-message-ttl": "abc"}) == f"'x-message-ttl' {other}"
    assert refusal({"x-expires": 1, "x-max-length": 1}) == f"'x-expires' {other}"
    assert refusal({"x-max-length": 1, "x-expires": 1}) == f"'x-max-length' {other}"
    assert refusal({"x-expires": 1, "x-max-length-bytes": -1}).endswith("{value_negative,-1}")
    assert refusal({"x-expires": 1, "x-max-age": "soon"}) == "INTERNAL_ERROR"


def test_st_2_consume_checks_in_rabbitmqs_order() -> None:
    with pytest.raises(errors.HardError, match="automatic acknowledgement"):
        streamargs.check_consume("q", "/", prefetch=0, no_ack=True, arguments={})
    with pytest.raises(errors.SoftError, match="consumer prefetch count is not set"):
        streamargs.check_consume("q", "/", prefetch=0, no_ack=False, arguments={})
    spec = streamargs.check_consume("q", "/", prefetch=1, no_ack=False, arguments={})
    assert spec == streamargs.OffsetSpec("next")  # the default


# -- the segment index and retention ----------------------------------------------------------


def _index(*segments: tuple[int, int, int]) -> SegmentIndex:
    """Segments of (count, bytes per record, publish time of each record)."""
    index = SegmentIndex()
    for number, (count, size, at_ms) in enumerate(segments, start=1):
        for i in range(count):
            index.add(number, (number << 32) + 80 + i * size, size, at_ms)
    return index


def test_st_4_the_index_is_per_segment_and_offsets_are_dense() -> None:
    index = _index((3, 100, 10), (2, 100, 20), (4, 100, 30))
    assert len(index) == 3
    assert [(s.first_offset, s.count) for s in index.segments] == [(0, 3), (3, 2), (5, 4)]
    assert (index.first_offset, index.next_offset, index.count, index.size) == (0, 9, 9, 900)
    located = [index.locate(o) for o in (0, 2, 3, 8)]
    assert [s.number if s else None for s in located] == [1, 1, 2, 3]
    assert index.locate(9) is None
    found = index.for_timestamp(15)
    assert found is not None and found.number == 2
    assert index.for_timestamp(31) is None


def test_st_4_retention_drops_whole_old_segments_never_the_newest() -> None:
    index = _index((3, 100, 10), (3, 100, 20), (3, 100, 30))
    assert index.to_drop(max_bytes=900, max_age_ms=None, now_ms=0) == 0
    assert index.to_drop(max_bytes=899, max_age_ms=None, now_ms=0) == 1
    assert index.to_drop(max_bytes=0, max_age_ms=None, now_ms=0) == 2  # never the newest
    assert index.to_drop(max_bytes=None, max_age_ms=15, now_ms=40) == 2
    assert index.to_drop(max_bytes=None, max_age_ms=25, now_ms=40) == 1
    dropped = index.drop_first(1)
    assert [s.number for s in dropped] == [1]
    assert (index.first_offset, index.next_offset, index.size) == (3, 9, 600)
    assert index.locate(2) is None
    following = index.following(2)
    assert following is not None and following.first_offset == 3


# -- the stream model with a real store log ---------------------------------------------------


class FakeChannel(OneAtATime):
    """A channel whose room is each consumer's prefetch, as a real one's is. It keeps, per
    delivery, (consumer tag, the size its ack entry carries, body, ``x-stream-offset``)."""

    def __init__(self) -> None:
        self.delivered: list[tuple[str, int, bytes, int | None]] = []

    def has_capacity(self, consumer: Consumer) -> bool:
        return consumer.unacked < consumer.prefetch

    def credit(self, consumer: Consumer) -> int:
        return max(consumer.prefetch - consumer.unacked, 0)

    def deliver(self, consumer: Consumer, queue: Queue, entry: Entry) -> None:
        raise AssertionError("a stream delivers in runs (deliver_run)")

    def deliver_run(
        self, consumer: Consumer, queue: Queue, run: list[Any], count: int, entries: Any
    ) -> tuple[int, int]:
        assert 0 < count <= self.credit(consumer)
        for record, entry in zip(run[:count], entries, strict=False):
            headers = properties.decode_properties(record.raw_properties).get("headers") or {}
            offset = headers.get("x-stream-offset")
            assert entry.size == len(record.body)
            self.delivered.append((consumer.tag, entry.size, record.body, offset))
        return count, sum(len(record.body) for record in run[:count])

    def cancelled_by_broker(self, consumer: Consumer) -> None:
        return None


class FakeCommits:
    """The group commit: generation 1 is written until ``sync`` makes it durable."""

    def __init__(self) -> None:
        self.writing, self.waiters = 1, set()

    def wrote(self) -> int:
        return self.writing

    def wait(self, waiter: Any) -> None:
        self.waiters.add(waiter)

    def done(self, waiter: Any) -> None:
        self.waiters.discard(waiter)

    def sync(self) -> None:
        durable, self.writing = self.writing, self.writing + 1
        for waiter in list(self.waiters):
            waiter.release_durable(durable)


@pytest.fixture
def store(tmp_path: Path):
    messages = MessageStore(tmp_path / "data")
    yield messages
    messages.close()


def _stream(store: MessageStore, hooks: StreamHooks | None = None, **args: Any) -> StreamQueue:
    queue = StreamQueue("s", durable=True, arguments={**STREAM, **args}, hooks=hooks)
    queue.store = store.open_queue("/", "s")
    return queue


def _publish(queue: StreamQueue, *bodies: bytes, now_ms: int = 1_000) -> None:
    for body in bodies:
        queue.publish(Message("", "s", properties.encode_properties(), body), now_ms)


def _consumer(
    queue: StreamQueue, channel: FakeChannel, tag: str, spec: Any, prefetch: int = 100
) -> Consumer:
    consumer = Consumer(tag, queue, channel, no_ack=False, exclusive=False, prefetch=prefetch)
    queue.start_cursor(consumer, streamargs.parse_offset(spec), 10_000)
    queue.add_consumer(consumer)
    return consumer


def test_st_3_consumers_read_from_their_offsets_with_their_own_credit(store) -> None:
    queue = _stream(store)
    _publish(queue, *(f"m{i}".encode() for i in range(6)))
    channel = FakeChannel()
    first = _consumer(queue, channel, "a", "first", prefetch=2)
    middle = _consumer(queue, channel, "b", 3)
    last = _consumer(queue, channel, "c", "last")
    queue.drain(0)
    by_tag = {tag: [offset for t, _, _, offset in channel.delivered if t == tag] for tag in "abc"}
    assert by_tag == {"a": [0, 1], "b": [3, 4, 5], "c": [5]}
    queue.settle(Entry(0, Message("", "s", b"", b"")))  # an ack only returns credit
    first.unacked -= 1
    queue.wake(channel)  # as the channel does before ``drain`` when it has room again
    queue.drain(0)
    assert [o for t, _, _, o in channel.delivered if t == "a"] == [0, 1, 2]
    assert queue.ready_count == 6  # nothing left the stream
    assert (middle.unacked, last.unacked) == (3, 1)


def test_st_6_a_message_is_delivered_only_once_durable(store) -> None:
    """A consumer sees nothing the group commit has not fsynced: a crash can then lose only
    what nobody saw, and no offset anybody saw is ever given to another message."""
    commits = FakeCommits()
    hooks = StreamHooks()
    hooks.commits = commits
    queue = _stream(store, hooks)
    channel = FakeChannel()
    _consumer(queue, channel, "a", "first")
    _publish(queue, b"one", b"two")
    queue.drain(0)
    assert channel.delivered == []
    assert queue.last_offset is None
    commits.sync()
    assert [body for _, _, body, _ in channel.delivered] == [b"one", b"two"]
    assert queue.last_offset == 1
    _publish(queue, b"three")
    queue.drain(0)
    assert len(channel.delivered) == 2
    commits.sync()
    assert [body for _, _, body, _ in channel.delivered] == [b"one", b"two", b"three"]
    assert commits.waiters == set()  # nothing left to wait for


def _sliced_stream(store: MessageStore, allowance: int) -> tuple[StreamQueue, list[Any]]:
    """A stream whose deliveries are sliced by a turn's ``allowance``, and the list its
    parked jobs go to (the loop's, as ``dispatch.turns`` keeps them)."""
    scheduler = budgets.Scheduler()
    parked: list[Any] = []
    scheduler.park = parked.append
    scheduler.meter = budgets.Meter(allowance)
    return _stream(store, StreamHooks(scheduler)), parked


def test_st_3_reading_is_sliced_per_loop_turn(store) -> None:
    """A consumer reading 2,000 messages from ``first`` gets them over many turns, each turn
    spending about its allowance, never all at once (docs/isolation/)."""
    allowance = 5_000
    queue, parked = _sliced_stream(store, allowance)
    _publish(queue, *(f"m{i}".encode() for i in range(2_000)))
    channel = FakeChannel()
    _consumer(queue, channel, "a", "first", prefetch=10_000)
    queue.drain(0)  # as basic.consume does
    per_turn = allowance // READ_STEPS + 1
    assert len(channel.delivered) <= per_turn
    assert len(parked) == 1
    turns = 0
    while parked:
        job = parked.pop()
        before = len(channel.delivered)
        if not job.advance(budgets.Meter(allowance)):
            parked.append(job)
        assert len(channel.delivered) - before <= per_turn
        turns += 1
    assert [offset for _, _, _, offset in channel.delivered] == list(range(2_000))
    assert turns >= 2_000 // per_turn
    # counted once a pump (``_pump``), over every turn: each delivery once
    assert (queue.stats_deliver, queue.stats_deliveries["deliver"]) == (2_000, 2_000)
    assert (queue.unacked_count, queue.unacked_bytes) == (
        2_000,
        sum(len(f"m{i}") for i in range(2_000)),
    )


def test_st_3_readers_take_turns_a_turns_allowance_at_a_time(store) -> None:
    """A step delivers a run of records to one consumer (``deliver_run``), as many as the
    meter allows; the next turn begins with the next cursor, so two eager readers of one
    stream alternate and neither gets ahead of the other by more than a turn's deliveries."""
    allowance = 5_000
    queue, parked = _sliced_stream(store, allowance)
    _publish(queue, *(f"m{i}".encode() for i in range(1_500)))
    channel = FakeChannel()
    _consumer(queue, channel, "a", "first", prefetch=10_000)
    _consumer(queue, channel, "b", "first", prefetch=10_000)
    queue.drain(0)
    per_turn = allowance // READ_STEPS + 1
    turns = 0
    while parked:
        job = parked.pop()
        if not job.advance(budgets.Meter(allowance)):
            parked.append(job)
        turns += 1
        got = {tag: sum(1 for t, *_ in channel.delivered if t == tag) for tag in "ab"}
        assert abs(got["a"] - got["b"]) <= per_turn, (turns, got)
        assert 0 < got["a"] + got["b"] <= per_turn * (turns + 1)
    for tag in "ab":
        assert [o for t, _, _, o in channel.delivered if t == tag] == list(range(1_500))
    assert turns >= 3_000 // per_turn


class CountingChannel(FakeChannel):
    """A ``FakeChannel`` that counts the credit questions a stream asks it."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def credit(self, consumer: Consumer) -> int:
        self.asked += 1
        return super().credit(consumer)


def test_st_3_cursors_that_cannot_go_on_are_not_asked_again_until_their_wait_ends(store) -> None:
    """A client opening thousands of consumers that never ack (or that wait at the end) must
    not make every later publish and ack cost a pass over all of them: a cursor without credit
    waits out of the round-robin until its channel has room (``wake``), one at the end until
    new records are durable. Two channels of 1,000 consumers of prefetch 1 each."""
    queue = _stream(store)
    _publish(queue, b"m0")
    channels = [CountingChannel(), CountingChannel()]
    consumers = [
        _consumer(queue, channels[n % 2], f"c{n}", "first", prefetch=1) for n in range(2_000)
    ]
    queue.drain(0)
    assert len(channels[0].delivered) + len(channels[1].delivered) == 2_000  # offset 0 each
    _publish(queue, b"m1")  # new records: every cursor at the end is looked at once ...
    queue.drain(0)
    asked = channels[0].asked + channels[1].asked
    for n in range(2, 102):  # ... and then not again: they wait for room on their channel
        _publish(queue, f"m{n}".encode())
        queue.drain(0)
    assert channels[0].asked + channels[1].asked == asked
    assert len(channels[0].delivered) + len(channels[1].delivered) == 2_000

    for consumer in consumers[0::2]:  # channel 0's consumers ack
        consumer.unacked = 0
    queue.wake(channels[0])
    queue.drain(0)
    assert len(channels[0].delivered) == 2 * 1_000  # offset 1 each, then prefetch full again
    assert len(channels[1].delivered) == 1_000  # channel 1 had no room: not woken, not asked
    assert [o for t, _, _, o in channels[0].delivered if t == "c0"] == [0, 1]
    asked = channels[1].asked
    consumers[1].unacked = 0  # one consumer's ack: its cursor alone is woken and asked
    queue.wake(channels[1], consumers[1])
    queue.drain(0)
    assert [o for t, _, _, o in channels[1].delivered if t == "c1"] == [0, 1]
    assert len(channels[1].delivered) == 1_001
    assert channels[1].asked - asked <= 3  # its delivery, the fake's own check, then none

    for consumer in consumers:  # a cursor leaves whichever wait it is in
        queue.remove_consumer(consumer)
    assert (list(queue._order), queue._at_tail, queue._resting) == ([], [], {})
    assert queue.hooks.read_ahead == 0


def test_st_2_a_start_inside_a_segment_reads_forward_from_its_first_record(store) -> None:
    queue = _stream(store, **{"x-stream-max-segment-size-bytes": 2_000})
    _publish(queue, *(bytes([i]) * 300 for i in range(20)))
    assert len(queue.index) > 2
    channel = FakeChannel()
    for offset in (0, 5, 13, 19):
        _consumer(queue, channel, f"c{offset}", offset, prefetch=1)
    queue.drain(0)
    assert sorted((t, o, body[:1]) for t, _, body, o in channel.delivered) == sorted(
        (f"c{o}", o, bytes([o])) for o in (0, 5, 13, 19)
    )
    assert queue.stats_deliver == 4  # the records passed over on the way are not deliveries
    assert queue.unacked_count == 4


def test_st_4_retention_removes_segment_files(store, tmp_path: Path) -> None:
    queue = _stream(
        store, **{"x-max-length-bytes": 3_000, "x-stream-max-segment-size-bytes": 1_000}
    )
    _publish(queue, *(bytes(200) for _ in range(40)))
    store.sync()
    store.sync()  # the unlink of a dropped segment ends the sync after it was dropped
    kept = sum(segment.size for segment in queue.index.segments)
    assert queue.index.size == kept <= 3_000
    assert queue.first_offset > 0
    numbers = {int(p.name.split(".")[1]) for p in (tmp_path / "data" / "msgs").rglob("msgs.*")}
    held = {segment.number for segment in queue.index.segments}
    assert held <= numbers <= held | {max(held) + 1}  # the dropped ones are gone; the newest
    # may be a segment just started, still empty
    channel = FakeChannel()
    _consumer(queue, channel, "a", "first")
    queue.drain(0)
    assert [o for _, _, _, o in channel.delivered] == list(range(queue.first_offset, 40))


def test_st_4_records_read_ahead_from_a_dropped_segment_are_not_delivered(store) -> None:
    """A cursor reads its segment in runs (``QueueStore.read_run``) and keeps what it has not
    delivered yet; when retention drops that segment, those records go with it and the
    cursor moves on to the first offset still held, as without the read-ahead."""
    queue = _stream(store, **{"x-max-age": "1h", "x-stream-max-segment-size-bytes": 2_000})
    _publish(queue, *(bytes([i]) * 200 for i in range(20)), now_ms=0)
    store.sync()  # handed to the kernel: read in runs, not one record at a time
    channel = FakeChannel()
    consumer = _consumer(queue, channel, "a", "first", prefetch=1)
    queue.drain(0)
    assert [o for _, _, _, o in channel.delivered] == [0]
    assert queue._cursors[consumer].ahead, "the rest of the segment was read ahead"
    _publish(queue, *(bytes([100 + i]) * 200 for i in range(4)), now_ms=3_000_000)
    queue.expire_head(3_700_000)
    first = queue.first_offset
    assert first > 1
    consumer.unacked = 0
    queue.wake(channel)
    queue.drain(0)
    assert [(o, body[:1]) for _, _, body, o in channel.delivered[1:]] == [
        (first, bytes([first if first < 20 else 100 + first - 20]))
    ]


def test_st_4_max_age_drops_old_segments_on_the_tick(store) -> None:
    queue = _stream(store, **{"x-max-age": "1h", "x-stream-max-segment-size-bytes": 500})
    _publish(queue, *(bytes(200) for _ in range(6)), now_ms=0)
    _publish(queue, *(bytes(200) for _ in range(6)), now_ms=3_000_000)
    assert (queue.first_offset, len(queue.index)) == (0, 6)
    queue.expire_head(3_700_000)  # the vhost's tick: the first three segments are over 1h old
    assert (queue.first_offset, len(queue.index)) == (6, 3)
    queue.expire_head(9_000_000)
    assert (queue.first_offset, len(queue.index)) == (10, 1)  # never the newest segment


def test_st_6_recovery_rebuilds_the_index_from_the_log(tmp_path: Path) -> None:
    first = MessageStore(tmp_path / "data")
    queue = StreamQueue("s", durable=True, arguments=STREAM)
    queue.store = first.open_queue("/", "s")
    _publish(queue, *(f"m{i}".encode() for i in range(5)), now_ms=42)
    first.close()

    again = MessageStore(tmp_path / "data")
    restored = StreamQueue("s", durable=True, arguments=STREAM)
    restored.store = again.open_queue("/", "s")
    for stored in restored.store.recover():  # as the server's start-up does
        message = Message(stored.exchange, stored.routing_key, stored.raw_properties, b"")
        restored.restore(Entry(0, message, store_id=stored.msg_id), body_size=stored.body_size)
    channel = FakeChannel()
    _consumer(restored, channel, "a", 2)
    restored.drain(0)
    assert [(o, body) for _, _, body, o in channel.delivered] == [
        (2, b"m2"),
        (3, b"m3"),
        (4, b"m4"),
    ]
    assert (restored.first_offset, restored.last_offset, restored.index.segments[0].first_ms) == (
        0,
        4,
        42,
    )
    _publish(restored, b"m5")
    assert restored.index.next_offset == 6
    again.close()


def test_st_5_policies_set_retention_and_apply_to_streams(store) -> None:
    def policy(apply_to: str, definition: dict[str, Any]) -> policies.Policy:
        body = {"pattern": "^s$", "apply-to": apply_to, "definition": definition}
        made, problem = policies.validate(body, operator=False)
        assert problem is None and made is not None
        return made

    kind = policies.queue_kind(False, streamargs.is_stream(STREAM))
    assert kind == "stream"
    ttl = {"max-age": "1D"}
    assert policy("streams", ttl).applies_to(kind)
    assert policy("queues", ttl).applies_to(kind)
    assert not policy("classic_queues", ttl).applies_to(kind)
    assert not policy("quorum_queues", ttl).applies_to(kind)

    queue = _stream(store, **{"x-max-age": "2h"})
    queue.policy = policy("streams", {"max-age": "1h", "stream-max-segment-size-bytes": 500})
    assert queue.limits() == (None, 3_600_000, 500)  # the smaller of argument and policy
    queue.policy = policy("streams", {"max-age": "3h"})
    assert queue.limits()[1] == 7_200_000


def _held_ahead(queue: StreamQueue) -> int:
    return sum(length for cursor in queue._order for _, length in cursor.ahead)


def test_st_4_read_ahead_over_all_cursors_stays_under_the_broker_wide_bound(
    store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each cursor reads its segment in runs, but what all of them hold together is bounded
    (``READ_AHEAD_TOTAL``): a client that opens many consumers which take one message and
    never ack does not make the broker hold a run for each. Past the bound a cursor reads one
    record at a time, and the records are still delivered in order; what is held is given
    back when the consumers go."""
    monkeypatch.setattr(streams, "READ_AHEAD_TOTAL", 8 * 1024)
    queue = _stream(store)
    _publish(queue, *(bytes([i]) * 200 for i in range(40)), now_ms=0)
    store.sync()  # handed to the kernel: read in runs
    channel = FakeChannel()
    consumers = [_consumer(queue, channel, f"c{n}", "first", prefetch=1) for n in range(60)]
    queue.drain(0)
    assert len(channel.delivered) == 60  # each took offset 0, then its prefetch was full
    assert {o for _, _, _, o in channel.delivered} == {0}
    held = _held_ahead(queue)
    assert held == queue.hooks.read_ahead
    assert held <= 8 * 1024 + 300, held  # the bound, plus the one record a run may pass it by
    eager = _consumer(queue, channel, "eager", "first", prefetch=1000)
    queue.drain(0)
    assert [o for tag, _, _, o in channel.delivered if tag == "eager"] == list(range(40))
    for consumer in [*consumers, eager]:
        queue.remove_consumer(consumer)
    assert queue.hooks.read_ahead == 0


# -- seek marks: a consumer inside a segment ----------------------------------------------------


class CountingLog:
    """A queue log that counts the records its reads return (what a cursor passes over)."""

    def __init__(self, log: Any) -> None:
        self.log = log
        self.records_read = 0

    def read_run(self, msg_id: int, max_bytes: int) -> Any:
        run = self.log.read_run(msg_id, max_bytes)
        self.records_read += len(run)
        return run

    def __getattr__(self, name: str) -> Any:
        return getattr(self.log, name)


@pytest.mark.parametrize("restarted", [False, True], ids=["appended", "restored"])
def test_a_consumer_inside_a_segment_passes_over_at_most_a_seek_interval(
    tmp_path: Path, restarted: bool
) -> None:
    """20,000 messages in one segment and a consumer at offset 19,990: before seek marks its
    cursor read the segment from its first record, 19,990 records passed over before the
    first delivery (and a Spark slice at offset 199,000 cost the broker 60 ms). Now it starts
    at the mark at or before its offset, whether the records were appended or restored."""
    first = MessageStore(tmp_path / "data")
    queue = StreamQueue("s", durable=True, arguments=STREAM)
    queue.store = first.open_queue("/", "s")
    _publish(queue, *(i.to_bytes(4, "big") for i in range(20_000)))
    first.sync()
    if restarted:
        first.close()
        first = MessageStore(tmp_path / "data")
        queue = StreamQueue("s", durable=True, arguments=STREAM)
        queue.store = first.open_queue("/", "s")
        for stored in queue.store.recover():
            message = Message(stored.exchange, stored.routing_key, stored.raw_properties, b"")
            queue.restore(Entry(0, message, store_id=stored.msg_id), body_size=stored.body_size)
    assert len(queue.index) == 1
    counting = CountingLog(queue.store)
    queue.store = counting
    channel = FakeChannel()
    _consumer(queue, channel, "a", 19_990)
    for _ in range(200):
        if len(channel.delivered) == 10:
            break
        queue.drain(0)
    assert [(o, int.from_bytes(body, "big")) for _, _, body, o in channel.delivered] == [
        (o, o) for o in range(19_990, 20_000)
    ]
    passed_over = 19_990 - 16_384  # from the mark at 4 x 4,096
    assert passed_over + 10 <= counting.records_read < passed_over + 10 + 2_000, (
        counting.records_read
    )
    first.close()


def test_retention_drops_the_seek_marks_of_dropped_segments(store) -> None:
    queue = _stream(
        store, **{"x-max-length-bytes": 400_000, "x-stream-max-segment-size-bytes": 100_000}
    )
    # 17,000 keep the shape of the 30,000 this published before (#29): three marks dropped, and
    # two kept, one before the first offset (15,132) and one after it
    _publish(queue, *(bytes(90) for _ in range(17_000)))
    first = queue.first_offset
    assert first > 2 * streams.SEEK_EVERY  # whole segments went, with their marks
    assert sorted(queue._seek) == list(
        range(first // streams.SEEK_EVERY, 17_000 // streams.SEEK_EVERY + 1)
    )
    channel = FakeChannel()
    _consumer(queue, channel, "a", first + 5)
    for _ in range(100):
        queue.drain(0)
    assert channel.delivered[0][3] == first + 5
