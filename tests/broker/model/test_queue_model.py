"""The classic queue model in memory: a fake delivery target, a fake store, explicit time.

No sockets, no processes, no sleeps: every clock reading is an argument (``now_ms``), so TTL,
length limits, rings, requeue order and dead-lettering are pinned here in milliseconds, below
the process-level suites that exercise the same rules over AMQP. Test names carry the
broker-semantics IDs (ML-3 as ``test_ml_3_``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hutch_broker.model import paging, settings
from hutch_broker.model.messages import Entry, Message
from hutch_broker.model.queues import (
    PUBLISH_OK,
    PUBLISH_REJECTED,
    PUBLISH_SYNC,
    Consumer,
    Queue,
)
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import properties
from hutch_testing.targets import OneAtATime

PLAIN = properties.encode_properties()
PERSISTENT = properties.encode_properties(delivery_mode=2)


def msg(body: str | bytes, *, raw: bytes = PLAIN, expiration: str | None = None) -> Message:
    if expiration is not None:
        raw = properties.encode_properties(expiration=expiration)
    data = body.encode() if isinstance(body, str) else body
    return Message("", "q", raw, data)


def bodies(queue: Queue) -> list[str]:
    return [entry.message.body.decode() for entry in queue.ready_entries()]


class FakeChannel(OneAtATime):
    """A DeliveryTarget: honours per-consumer prefetch and records every delivery."""

    def __init__(self) -> None:
        self.delivered: list[tuple[str, Entry]] = []
        self.cancelled: list[str] = []

    def has_capacity(self, consumer: Consumer) -> bool:
        return consumer.prefetch == 0 or consumer.unacked < consumer.prefetch

    def deliver(self, consumer: Consumer, queue: Queue, entry: Entry) -> None:
        self.delivered.append((consumer.tag, entry))

    def cancelled_by_broker(self, consumer: Consumer) -> None:
        self.cancelled.append(consumer.tag)

    def bodies(self) -> list[str]:
        return [entry.message.body.decode() for _, entry in self.delivered]


def consume(
    queue: Queue, tag: str = "c1", *, prefetch: int = 0, no_ack: bool = False
) -> tuple[Consumer, FakeChannel]:
    channel = FakeChannel()
    consumer = Consumer(tag, queue, channel, no_ack=no_ack, exclusive=False, prefetch=prefetch)
    queue.add_consumer(consumer)
    return consumer, channel


@dataclass
class Stored:
    body: bytes


@dataclass
class FakeStore:
    """The QueueStore calls the queue makes: append, read, ack, purge."""

    records: dict[int, dict[str, Any]] = field(default_factory=dict)
    acked: list[int] = field(default_factory=list)
    purged: int = 0
    next_id: int = 1

    def append(self, **record: Any) -> int:
        msg_id, self.next_id = self.next_id, self.next_id + 1
        self.records[msg_id] = record
        return msg_id

    def read(self, msg_id: int) -> Stored:
        return Stored(self.records[msg_id]["body"])

    def ack(self, msg_id: int) -> None:
        self.acked.append(msg_id)
        self.records.pop(msg_id, None)

    def purge(self) -> None:
        self.purged += 1
        self.records.clear()


class FakeMessageStore:
    """What ``paging.Pager`` needs from the message store: one FakeStore per queue."""

    def __init__(self) -> None:
        self.queues: dict[tuple[str, str], FakeStore] = {}

    def open_queue(self, vhost: str, queue: str) -> FakeStore:
        return self.queues.setdefault((vhost, queue), FakeStore())

    def delete_queue(self, vhost: str, queue: str) -> None:
        self.queues.pop((vhost, queue), None)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def vhost(clock: Clock) -> VirtualHost:
    """A vhost whose ``dlq`` receives dead letters through the default exchange."""
    vh = VirtualHost("/")
    vh.clock = clock
    vh.declare_queue("dlq", now_ms=clock.now)
    return vh


def dl_queue(vhost: VirtualHost, **arguments: Any) -> Queue:
    args = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq", **arguments}
    queue, _ = vhost.declare_queue("q", arguments=args, now_ms=0)
    return queue


def dead(vhost: VirtualHost) -> list[tuple[str, str]]:
    """(body, newest x-death reason) of every message in ``dlq``."""
    result = []
    for entry in vhost.get_queue("dlq").ready_entries():
        reason = entry.message.headers()["x-death"][0]["reason"]
        reason = reason.decode() if isinstance(reason, bytes) else reason
        result.append((entry.message.body.decode(), reason))
    return result


# -- publish, ready, drain ----------------------------------------------------


def test_publish_without_consumers_queues_in_fifo_order() -> None:
    queue = Queue("q")
    outcomes = [queue.publish(msg(b), 0) for b in ("a", "bb", "ccc")]
    assert outcomes == [PUBLISH_OK] * 3
    assert bodies(queue) == ["a", "bb", "ccc"]
    assert (queue.ready_count, queue.ready_bytes, queue.stats_publish) == (3, 6, 3)


def test_drain_delivers_in_order_round_robin_until_prefetch_is_full() -> None:
    queue = Queue("q")
    for b in "abcde":
        queue.publish(msg(b), 0)
    first, channel_1 = consume(queue, "c1", prefetch=2)
    second, channel_2 = consume(queue, "c2", prefetch=1)
    assert queue.drain(0) == 3
    assert channel_1.bodies() == ["a", "c"] and channel_2.bodies() == ["b"]
    assert bodies(queue) == ["d", "e"]
    assert (first.unacked, second.unacked, queue.unacked_count) == (2, 1, 3)


def test_a_consumer_with_room_gets_a_new_message_directly() -> None:
    queue = Queue("q")
    consumer, channel = consume(queue)
    assert queue.publish(msg("a"), 0) == PUBLISH_OK
    assert channel.bodies() == ["a"]
    assert queue.ready_count == 0 and consumer.unacked == 1 and queue.unacked_bytes == 1


def test_a_full_consumer_means_the_message_is_queued_until_settled() -> None:
    queue = Queue("q")
    consumer, channel = consume(queue, prefetch=1)
    queue.publish(msg("a"), 0)
    queue.publish(msg("b"), 0)
    assert channel.bodies() == ["a"] and bodies(queue) == ["b"]
    queue.settle(channel.delivered[0][1])
    consumer.unacked -= 1  # the channel's bookkeeping on basic.ack
    assert queue.drain(0) == 1
    assert channel.bodies() == ["a", "b"] and queue.ready_count == 0


def test_no_direct_delivery_past_a_non_empty_queue() -> None:
    """Q-4: a new message never overtakes ready ones, even when a consumer has room."""
    queue = Queue("q")
    queue.publish(msg("a"), 0)
    _, channel = consume(queue)
    queue.publish(msg("b"), 0)
    assert channel.delivered == [] and bodies(queue) == ["a", "b"]


def test_no_ack_consumer_leaves_nothing_unacked() -> None:
    queue = Queue("q")
    consumer, channel = consume(queue, no_ack=True)
    queue.publish(msg("a"), 0)
    assert channel.bodies() == ["a"]
    assert (consumer.unacked, queue.unacked_count, queue.unacked_bytes) == (0, 0, 0)


# -- requeue order -------------------------------------------------------


def test_q_4_requeue_returns_to_original_position_flagged_redelivered() -> None:
    queue = Queue("q")
    for b in "abc":
        queue.publish(msg(b), 0)
    a, b, c = (queue.get(0, no_ack=False) for _ in range(3))
    assert a is not None and b is not None and c is not None
    queue.publish(msg("d"), 0)
    queue.requeue(c)
    queue.requeue(a)  # out of order on purpose
    assert bodies(queue) == ["a", "c", "d"]
    assert [e.redelivered for e in queue.ready_entries()] == [True, True, False]
    assert (queue.unacked_count, queue.unacked_bytes) == (1, 1)  # b is still out
    got = [queue.get(0, no_ack=True) for _ in range(3)]
    assert [e.message.body for e in got if e] == [b"a", b"c", b"d"]
    assert queue.stats_redeliver == 2  # a and c; basic.get counts redeliveries, as on 3.10.8


def test_q_4_requeued_message_is_redelivered_to_a_consumer_first() -> None:
    queue = Queue("q")
    queue.publish(msg("a"), 0)
    queue.publish(msg("b"), 0)
    entry = queue.get(0, no_ack=False)
    assert entry is not None
    queue.requeue(entry)
    _, channel = consume(queue)
    queue.drain(0)
    assert channel.bodies() == ["a", "b"]
    assert [e.redelivered for _, e in channel.delivered] == [True, False]
    assert queue.stats_redeliver == 1


def test_settle_and_reject_keep_unacked_accounting_exact() -> None:
    queue = Queue("q")
    queue.publish(msg("aaaa"), 0)
    queue.publish(msg("bb"), 0)
    a, b = queue.get(0, no_ack=False), queue.get(0, no_ack=False)
    assert a is not None and b is not None
    assert (queue.unacked_count, queue.unacked_bytes) == (2, 6)
    queue.settle(a)
    assert (queue.unacked_count, queue.unacked_bytes, queue.stats_ack) == (1, 2, 1)
    queue.reject(b)
    assert (queue.unacked_count, queue.unacked_bytes, queue.ready_count) == (0, 0, 0)


# -- TTL ----------------------------------------------------------------------


def test_ttl_1_queue_ttl_is_fixed_at_enqueue() -> None:
    queue = Queue("q", arguments={"x-message-ttl": 100})
    queue.publish(msg("a"), 0)  # expires at 100
    queue.publish(msg("b"), 50)  # expires at 150
    assert queue.get(99, no_ack=True).message.body == b"a"  # type: ignore[union-attr]
    queue.publish(msg("c"), 100)
    assert queue.get(160, no_ack=True).message.body == b"c"  # type: ignore[union-attr]
    assert queue.ready_count == 0


def test_ttl_1_the_lesser_of_queue_ttl_and_expiration_wins() -> None:
    queue = Queue("q", arguments={"x-message-ttl": 1000})
    queue.publish(msg("short", expiration="10"), 0)
    queue.publish(msg("long", expiration="5000"), 0)
    [short, long] = list(queue.ready_entries())
    assert (short.expire_at, long.expire_at) == (10, 1000)
    assert queue.get(11, no_ack=True).message.body == b"long"  # type: ignore[union-attr]


def test_ttl_3_expired_messages_go_only_at_the_head() -> None:
    queue = Queue("q")
    queue.publish(msg("long", expiration="1000"), 0)
    queue.publish(msg("short", expiration="10"), 0)
    assert queue.expire_head(500) == 0
    assert queue.ready_count == 2  # the dead one behind a live one still counts
    assert queue.get(500, no_ack=True).message.body == b"long"  # type: ignore[union-attr]
    assert queue.ready_count == 1
    assert queue.expire_head(500) == 1
    assert queue.ready_count == 0 and queue.ready_bytes == 0


def test_ttl_3_an_expired_head_is_never_delivered_to_a_consumer() -> None:
    queue = Queue("q", arguments={"x-message-ttl": 10})
    queue.publish(msg("old"), 0)
    queue.publish(msg("new"), 20)
    _, channel = consume(queue)
    queue.drain(25)
    assert channel.bodies() == ["new"]


def test_ttl_3_publish_expires_the_head_first() -> None:
    queue = Queue("q", arguments={"x-message-ttl": 10, "x-max-length": 1,
                                  "x-overflow": "reject-publish"})  # fmt: skip
    queue.publish(msg("old"), 0)
    assert queue.publish(msg("new"), 50) == PUBLISH_OK  # room made by expiring "old"
    assert bodies(queue) == ["new"]


def test_ttl_4_ttl_zero_is_delivered_only_to_a_waiting_consumer() -> None:
    now = 1_000  # epoch ms; 0 would read as "no expiry" (expire_at 0 is the sentinel)
    queue = Queue("q", arguments={"x-message-ttl": 0})
    queue.publish(msg("lost"), now)
    assert queue.ready_count == 0
    _, channel = consume(queue)
    queue.publish(msg("taken"), now)
    assert channel.bodies() == ["taken"]


def test_ttl_4_a_requeued_ttl_zero_message_expires(vhost: VirtualHost) -> None:
    queue = dl_queue(vhost, **{"x-message-ttl": 0})
    consumer, channel = consume(queue)
    queue.publish(msg("a"), 1_000)
    queue.remove_consumer(consumer)
    queue.requeue(channel.delivered[0][1])
    assert queue.get(1_000, no_ack=True) is None
    assert dead(vhost) == [("a", "expired")]


def test_ttl_5_requeue_keeps_the_original_expiry() -> None:
    queue = Queue("q", arguments={"x-message-ttl": 100})
    queue.publish(msg("a"), 0)
    entry = queue.get(50, no_ack=False)
    assert entry is not None
    queue.requeue(entry)
    assert queue.get(99, no_ack=False) is entry
    queue.requeue(entry)
    assert queue.get(100, no_ack=False) is None
    assert queue.ready_count == 0


def test_ttl_7_expiry_dead_letters_with_reason_expired(vhost: VirtualHost) -> None:
    queue = dl_queue(vhost, **{"x-message-ttl": 10})
    queue.publish(msg("a"), 0)
    vhost.tick(5)
    assert dead(vhost) == []
    vhost.tick(10)
    assert dead(vhost) == [("a", "expired")]
    assert queue.ready_count == 0


# -- length limits ------------------------------------------------------------


def test_ml_3_drop_head_keeps_the_newest(vhost: VirtualHost) -> None:
    queue = dl_queue(vhost, **{"x-max-length": 1})
    outcomes = [queue.publish(msg(b), 0) for b in "123"]
    assert outcomes == [PUBLISH_OK] * 3  # the publisher is acked
    assert bodies(queue) == ["3"]
    assert dead(vhost) == [("1", "maxlen"), ("2", "maxlen")]


def test_ml_4_reject_publish_refuses_without_dead_lettering(vhost: VirtualHost) -> None:
    queue = dl_queue(vhost, **{"x-max-length": 1, "x-overflow": "reject-publish"})
    assert queue.publish(msg("1"), 0) == PUBLISH_OK
    assert queue.publish(msg("2"), 0) == PUBLISH_REJECTED
    assert bodies(queue) == ["1"] and dead(vhost) == []


def test_ml_4_reject_publish_on_bytes() -> None:
    queue = Queue("q", arguments={"x-max-length-bytes": 5, "x-overflow": "reject-publish"})
    assert queue.publish(msg("abc"), 0) == PUBLISH_OK
    assert queue.publish(msg("def"), 0) == PUBLISH_REJECTED
    assert queue.publish(msg("de"), 0) == PUBLISH_OK
    assert queue.ready_bytes == 5


def test_ml_5_reject_publish_dlx_dead_letters_the_refused_message(vhost: VirtualHost) -> None:
    queue = dl_queue(vhost, **{"x-max-length": 1, "x-overflow": "reject-publish-dlx"})
    queue.publish(msg("1"), 0)
    assert queue.publish(msg("2"), 0) == PUBLISH_REJECTED
    assert bodies(queue) == ["1"]
    assert dead(vhost) == [("2", "maxlen")]


def test_ml_1_byte_limit_counts_body_bytes_only() -> None:
    heavy = properties.encode_properties(headers={"pad": "x" * 5000})
    queue = Queue("q", arguments={"x-max-length-bytes": 10, "x-overflow": "reject-publish"})
    assert queue.publish(msg(b"0123456789", raw=heavy), 0) == PUBLISH_OK
    assert queue.ready_bytes == 10


def test_ml_1_unacked_messages_do_not_count() -> None:
    queue = Queue("q", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    queue.publish(msg("1"), 0)
    assert queue.get(0, no_ack=False) is not None
    assert queue.publish(msg("2"), 0) == PUBLISH_OK


def test_ml_2_drop_head_on_bytes_trims_until_under_the_limit(vhost: VirtualHost) -> None:
    queue = dl_queue(vhost, **{"x-max-length-bytes": 6})
    for b in ("aaa", "bbb", "cccc"):
        queue.publish(msg(b), 0)
    assert bodies(queue) == ["cccc"] and queue.ready_bytes == 4
    assert dead(vhost) == [("aaa", "maxlen"), ("bbb", "maxlen")]


def test_ml_6_drop_head_trims_after_a_requeue_batch(vhost: VirtualHost) -> None:
    queue = dl_queue(vhost, **{"x-max-length": 2})
    for b in "abc":
        queue.publish(msg(b), 0)
    assert bodies(queue) == ["b", "c"]
    entry = queue.get(0, no_ack=False)
    queue.publish(msg("d"), 0)
    assert entry is not None
    queue.requeue(entry)
    assert bodies(queue) == ["b", "c", "d"]  # requeue may exceed the limit ...
    queue.after_requeue()
    assert bodies(queue) == ["c", "d"]  # ... until the batch ends
    assert dead(vhost)[-1] == ("b", "maxlen")


def test_ml_6_reject_publish_keeps_every_requeued_message() -> None:
    queue = Queue("q", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    queue.publish(msg("1"), 0)
    entry = queue.get(0, no_ack=False)
    queue.publish(msg("3"), 0)
    assert entry is not None
    queue.requeue(entry)
    queue.after_requeue()
    assert bodies(queue) == ["1", "3"]


def test_ml_7_limit_zero_drop_head_still_hands_to_a_waiting_consumer() -> None:
    queue = Queue("q", arguments={"x-max-length": 0})
    _, channel = consume(queue)
    assert queue.publish(msg("a"), 0) == PUBLISH_OK
    assert channel.bodies() == ["a"]


def test_ml_7_limit_zero_reject_publish_rejects_even_with_a_consumer() -> None:
    queue = Queue("q", arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    _, channel = consume(queue)
    assert queue.publish(msg("a"), 0) == PUBLISH_REJECTED
    assert channel.delivered == []


def test_ml_9_a_lower_policy_limit_truncates_at_once(vhost: VirtualHost) -> None:
    queue = dl_queue(vhost)
    for b in "012345":
        queue.publish(msg(b), 0)
    queue.apply_settings(settings.effective(queue.arguments, {"max-length": 2}, None))
    assert bodies(queue) == ["4", "5"]
    assert [body for body, _ in dead(vhost)] == ["0", "1", "2", "3"]


# -- ring queues --------------------------------------------------------------


def test_ring_3_publish_into_a_full_ring_drops_exactly_one(vhost: VirtualHost) -> None:
    queue = dl_queue(vhost, **{"x-ring-size": 3})
    for b in "ABCD":
        assert queue.publish(msg(b), 0) == PUBLISH_OK
    assert bodies(queue) == ["B", "C", "D"]
    assert dead(vhost) == [("A", "maxlen")]


def test_ring_6_a_lowered_ring_drops_one_per_publish_not_all_at_once() -> None:
    queue = Queue("q", arguments={"x-ring-size": 10})
    for b in "abcde":
        queue.publish(msg(b), 0)
    queue.apply_settings(settings.QueueSettings(ring_size=2))
    assert queue.ready_count == 5
    queue.publish(msg("f"), 0)
    assert bodies(queue) == ["b", "c", "d", "e", "f"]


def test_ring_2_unacked_messages_do_not_count_towards_the_ring() -> None:
    queue = Queue("q", arguments={"x-ring-size": 1})
    queue.publish(msg("a"), 0)
    assert queue.get(0, no_ack=False) is not None
    queue.publish(msg("b"), 0)
    assert bodies(queue) == ["b"] and queue.unacked_count == 1


def test_ring_3_direct_delivery_removes_nothing() -> None:
    queue = Queue("q", arguments={"x-ring-size": 1})
    _, channel = consume(queue)
    for b in "ABC":
        queue.publish(msg(b), 0)
    assert channel.bodies() == ["A", "B", "C"]


def test_ring_4_requeue_into_a_full_ring_drops_the_returning_message(vhost: VirtualHost) -> None:
    queue = dl_queue(vhost, **{"x-ring-size": 3})
    consumer, channel = consume(queue)
    for b in "ABCD":
        queue.publish(msg(b), 0)
    assert channel.bodies() == ["A", "B", "C", "D"] and queue.ready_count == 0
    queue.remove_consumer(consumer)
    for _, entry in reversed(channel.delivered):  # channel close: latest delivery first
        queue.requeue(entry)
    assert bodies(queue) == ["B", "C", "D"]
    assert dead(vhost) == [("A", "maxlen")]
    assert (queue.unacked_count, queue.unacked_bytes) == (0, 0)


# -- dead-lettering, purge ----------------------------------------------------


def test_dlx_1_reject_without_requeue_dead_letters_with_reason_rejected(
    vhost: VirtualHost,
) -> None:
    queue = dl_queue(vhost)
    queue.publish(msg("a"), 0)
    queue.publish(msg("b"), 0)
    a, b = queue.get(0, no_ack=False), queue.get(0, no_ack=False)
    assert a is not None and b is not None
    queue.requeue(b)  # requeue never dead-letters
    queue.reject(a)
    assert dead(vhost) == [("a", "rejected")]
    assert bodies(queue) == ["b"]


def test_dlx_2_without_a_dlx_a_dropped_message_just_goes(vhost: VirtualHost) -> None:
    queue, _ = vhost.declare_queue("plain", arguments={"x-max-length": 1}, now_ms=0)
    queue.publish(msg("1"), 0)
    queue.publish(msg("2"), 0)
    assert bodies(queue) == ["2"] and dead(vhost) == []


def test_q_4_purge_drops_ready_messages_without_dead_lettering(vhost: VirtualHost) -> None:
    queue = dl_queue(vhost)
    for b in "abc":
        queue.publish(msg(b), 0)
    out = queue.get(0, no_ack=False)
    assert queue.purge() == 2
    assert (queue.ready_count, queue.ready_bytes) == (0, 0)
    assert queue.unacked_count == 1 and out is not None
    assert dead(vhost) == []


# -- persistence and paging ---------------------------------------------------


def test_persistent_message_delivered_directly_is_written_for_a_manual_ack_consumer() -> None:
    """P-3: a confirm follows the write even when no queueing happened."""
    queue = Queue("q", durable=True)
    queue.store = store = FakeStore()  # type: ignore[assignment]
    _, channel = consume(queue)
    assert queue.publish(msg("a", raw=PERSISTENT), 7) == PUBLISH_SYNC
    assert [r["body"] for r in store.records.values()] == [b"a"]
    assert store.records[1]["enqueued_at_ms"] == 7
    queue.settle(channel.delivered[0][1])
    assert store.acked == [1] and store.records == {}


def test_persistent_message_to_a_no_ack_consumer_is_not_written() -> None:
    queue = Queue("q", durable=True)
    queue.store = store = FakeStore()  # type: ignore[assignment]
    _, channel = consume(queue, no_ack=True)
    assert queue.publish(msg("a", raw=PERSISTENT), 0) == PUBLISH_OK
    assert channel.bodies() == ["a"] and store.records == {}


def test_only_persistent_messages_are_written_when_queued() -> None:
    queue = Queue("q", durable=True)
    queue.store = store = FakeStore()  # type: ignore[assignment]
    assert queue.publish(msg("t"), 0) == PUBLISH_OK
    assert queue.publish(msg("p", raw=PERSISTENT), 0) == PUBLISH_SYNC
    assert [r["body"] for r in store.records.values()] == [b"p"]


def test_dropping_a_stored_message_acks_its_record() -> None:
    queue = Queue("q", durable=True, arguments={"x-max-length": 1})
    queue.store = store = FakeStore()  # type: ignore[assignment]
    queue.publish(msg("1", raw=PERSISTENT), 0)
    queue.publish(msg("2", raw=PERSISTENT), 0)
    assert store.acked == [1] and list(store.records) == [2]


def test_purge_with_nothing_unacked_purges_the_store_at_once() -> None:
    queue = Queue("q", durable=True)
    queue.store = store = FakeStore()  # type: ignore[assignment]
    for b in "ab":
        queue.publish(msg(b, raw=PERSISTENT), 0)
    assert queue.purge() == 2
    assert store.purged == 1 and store.records == {}


def test_purge_with_unacked_messages_acks_only_the_ready_records() -> None:
    queue = Queue("q", durable=True)
    queue.store = store = FakeStore()  # type: ignore[assignment]
    for b in "ab":
        queue.publish(msg(b, raw=PERSISTENT), 0)
    assert queue.get(0, no_ack=False) is not None
    queue.purge()
    assert store.purged == 0 and store.acked == [2] and list(store.records) == [1]


def test_paging_moves_bodies_past_the_head_out_and_back_in() -> None:
    pager = paging.Pager(FakeMessageStore())  # type: ignore[arg-type]
    pager.active = True
    queue = Queue("q")
    queue.pager = pager
    big = paging.KEEP_BYTES // 2
    for b in "abc":
        queue.publish(msg(b.encode() * big), 0)
    assert queue.paged_out == (1, big)  # the third is past KEEP_BYTES
    third = list(queue.ready_entries())[2]
    assert third.message.body == b"" and third.page_id is not None
    queue.get(0, no_ack=True)
    queue.get(0, no_ack=True)
    entry = queue.get(0, no_ack=True)
    assert entry is not None and entry.message.body == b"c" * big  # paged back in
    assert queue.ready_bytes == 0


def test_page_out_excess_keeps_the_head_in_memory() -> None:
    pager = paging.Pager(FakeMessageStore())  # type: ignore[arg-type]
    queue = Queue("q")
    queue.pager = pager
    big = paging.KEEP_BYTES // 2
    for b in "abcd":
        queue.publish(msg(b.encode() * big), 0)
    assert queue.paged_out == (0, 0)  # no pressure yet
    pager.active = True
    assert queue.page_out_excess() == 2
    assert [e.paged for e in queue.ready_entries()] == [False, False, True, True]
    assert queue.purge() == 4
