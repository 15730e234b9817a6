"""Stream queues: an append-only log that keeps messages after delivery, read by cursors.

Why a class of its own (beside the classic queue, not a flag through it): nothing of a classic
queue's ready list applies. A stream holds no messages in memory at all. Each message is one
record in the queue's store log (``store.QueueStore``: the same framing, checksums, group
commit and recovery as every durable queue), published with its offset already in its headers
(``x-stream-offset``, a long, and the headers as 3.10.8 delivers them: ``_with_offset``), so a
delivery is the record as read. The stream keeps a ``SegmentIndex`` (one entry per store
segment) and, per consumer, a ``Cursor``: the next offset and where its record is in the store.

Rules (RabbitMQ 3.10.8's AMQP 0-9-1 surface, see ``model.streamargs`` for the refusals):

- every message is stored, whatever its delivery mode, and gets the next dense offset; a
  publisher confirm follows the group commit's fsync, as for any durable queue (P-3);
- a consumer sees a message only once that fsync is done (``visible_end``): a ``kill -9`` can
  then lose only messages nobody was confirmed or delivered, so after a restart no offset that
  anybody saw names another message (offsets are never reused for what was seen);
- consumers are independent: each starts where its ``x-stream-offset`` says (``first``,
  ``last``, ``next`` by default, an offset, a timestamp, an interval) and reads on; its
  ``basic.qos`` prefetch is its credit, an ack returns one, and nothing else happens on ack;
  at the end of the stream it waits and gets new messages as they become durable;
- delivering is bounded work per loop turn: ``drain`` delivers what the turn's allowance covers
  (``model.budgets``; a delivery reads a record from disk) and leaves the rest to a job parked
  for later turns, so a consumer reading a million messages from ``first`` never holds the loop;
  a consumer that cannot go on waits out of the round-robin (for room on its channel, or for
  new durable records), so thousands of idle consumers cost a publish or an ack nothing;
- retention drops whole segments, oldest first, never the one being written
  (``SegmentIndex.to_drop``): by ``x-max-length-bytes`` after appends, by ``x-max-age`` on the
  vhost's tick; a segment is closed at ``x-stream-max-segment-size-bytes`` (or at the store's
  own segment size, whichever is smaller). A cursor whose offset was dropped moves on to the
  first offset still held, as RabbitMQ's readers do.
"""

from __future__ import annotations

import collections
import logging
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Final, Protocol

from hutch_broker.model import budgets, queues, streamargs
from hutch_broker.model import settings as settings_mod
from hutch_broker.model.messages import Entry, Message
from hutch_broker.model.streamindex import SegmentIndex, SegmentInfo
from hutch_broker.protocol import rewrite
from hutch_broker.store import records
from hutch_broker.store.errors import StoreError

if TYPE_CHECKING:
    from hutch_broker.store.records import RunRecord

log = logging.getLogger(__name__)

# A delivery of a record read ahead (its share of the pread and decode, its frames, the
# bookkeeping of a run: ~5 us in process, bench/inprocess_bench.py; ~7 us of the broker's CPU
# over a socket) costs about what this many routing steps do (``dispatch.turns``): ~100
# deliveries per turn's allowance. It was 160 when a delivery cost ~35 us. Measured when
# deliveries went by the run (a Spark executor's reader taking 100,000 messages of 100 B from
# ``first`` while another connection's ``queue.declare`` round trips are timed, 3 rounds of
# 48 and 160 interleaved): the round trips the same (p50 0.84-1.00 ms against 0.85-1.11), the
# broker's CPU a message 6.5-6.8 us against 7.0-9.4 (fewer turns, fewer and larger writes).
READ_STEPS: Final = 48
# What a cursor reads from its segment in one pread: ~600 records of 200 B, a bounded buffer
# per consumer (a record larger than this is read alone, whole).
READ_AHEAD_BYTES: Final = 128 * 1024
# What all cursors of a broker may hold read ahead together. Without it the memory held grows
# with the number of stream consumers a client opens (10,000 of them, 1.3 GB); past it a
# cursor reads one record at a time, as before runs, and once it is half used a cursor that
# cannot go on (no credit, a socket that does not drain) gives its records back.
READ_AHEAD_TOTAL: Final = 8 * 1024 * 1024
FLOOR: Final = 64  # what an inline drain may always spend, as an inline publish may
# Every this many offsets the stream remembers where the record is (a seek mark), so a consumer
# that starts inside a segment passes over at most this many records, not the segment's start
# up to its offset: a 500 MB segment of 200 B messages is 2.5 million records, and a Spark
# slice at offset 199,000 of one segment cost the broker 60 ms of reading before its first
# delivery. 16 bytes of dict entry per 4,096 messages, built as records are appended or
# restored and dropped with their segments.
SEEK_EVERY: Final = 4096
DEFAULT_MAX_SEGMENT_SIZE: Final = 500_000_000  # RabbitMQ's default


class Durability(Protocol):
    """The group commit (``dispatch.commits.GroupCommit``) as a stream sees it."""

    def wrote(self) -> int: ...

    def wait(self, waiter: Any) -> None: ...

    def done(self, waiter: Any) -> None: ...


class StreamHooks:
    """What the dispatch layer lends the streams of one broker: its group commit (to know when
    appended records are durable) and the scheduler of deferred work (``model.budgets``).
    Left unset (a model on its own, tools, tests) every record is visible at once."""

    def __init__(self, scheduler: budgets.Scheduler | None = None) -> None:
        self.commits: Durability | None = None
        self.scheduler = scheduler or budgets.Scheduler()
        self.read_ahead = 0  # bytes of records held in cursors' read-ahead, over all streams


class Cursor:
    """One consumer's place in the stream."""

    __slots__ = (
        "ahead",
        "ahead_bytes",
        "consumer",
        "msg_id",
        "offset",
        "rest",
        "since_ms",
        "skip_to",
    )

    def __init__(self, consumer: queues.Consumer, offset: int, since_ms: int | None) -> None:
        self.consumer = consumer
        self.offset = offset  # the next offset to deliver
        self.msg_id: int | None = None  # where the record of ``offset`` is, once known
        self.since_ms = since_ms  # a timestamp start: skip records published before it
        self.skip_to = 0  # records below this offset are read for their length only
        # records read ahead from ``msg_id`` on in one pread (``QueueStore.read_run``), a list
        # taken from its front by whole deliveries (``deliver_run``)
        self.ahead: list[RunRecord] = []
        self.ahead_bytes = 0  # their lengths' sum, counted in ``StreamHooks.read_ahead``
        # where the cursor waits while it cannot go on (``StreamQueue._rest``): None when in
        # the round-robin, ``AT_TAIL``, or the channel whose room it waits for
        self.rest: object | None = None


class StreamQueue(queues.Queue):
    """An ``x-queue-type: stream`` queue: always durable, so its vhost passes it a ``store``."""

    rests_consumers = True  # cursors that cannot go on wait for ``wake`` (``_rest``)

    def __init__(self, name: str, *, hooks: StreamHooks | None = None, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.hooks = hooks or StreamHooks()
        self.index = SegmentIndex()
        self.visible_end = 0  # offsets below it are durable and may be delivered
        self._marks: collections.deque[tuple[int, int]] = collections.deque()  # (gen, end)
        self._waiting = False  # registered with the group commit
        self._cursors: dict[queues.Consumer, Cursor] = {}
        self._order: collections.deque[Cursor] = collections.deque()  # round-robin
        # cursors that cannot go on, out of the round-robin until what they wait for changes:
        # new durable records (``_at_tail``), room on their consumer's channel (``_resting``)
        self._at_tail: list[Cursor] = []
        self._resting: dict[object, dict[queues.Consumer, Cursor]] = {}
        self._parked = False
        self._tail: tuple[int, int] | None = None  # (offset, msg_id) of the newest record
        self._tail_next: int | None = None  # where a record after it would start, same segment
        self._tail_times_due = False  # restored: the newest segment's times are still to read
        self._seek: dict[int, int] = {}  # offset // SEEK_EVERY -> msg_id of that offset's record
        self._seek_low = 0  # no mark below this key (retention dropped their segments)

    # -- inspection -----------------------------------------------------

    @property
    def first_offset(self) -> int:
        return self.index.first_offset

    @property
    def last_offset(self) -> int | None:
        """The newest offset a consumer may read (durable), None while there is none."""
        last = self.visible_end - 1
        return last if last >= self.index.first_offset else None

    def limits(self) -> tuple[int | None, int | None, int]:
        """(max bytes, max age ms, segment size): from the declare's arguments and the
        policies (``max-length-bytes``, ``max-age``, ``stream-max-segment-size-bytes``); where
        both set one, the smaller wins, as for a classic queue's limits (ML-2)."""
        args = self.arguments
        merged = settings_mod.merge_policies(
            self.policy.definition if self.policy is not None else None,
            self.operator_policy.definition if self.operator_policy is not None else None,
        )
        max_bytes = self.settings.max_length_bytes  # argument and policies, the smaller
        ages = [
            streamargs.parse_age(args.get("x-max-age")),
            streamargs.parse_age(merged.get("max-age")),
        ]
        sizes = [
            args.get("x-stream-max-segment-size-bytes"),
            merged.get("stream-max-segment-size-bytes"),
        ]
        age = min((a for a in ages if a), default=None)
        segment_size = min(
            (s for s in sizes if isinstance(s, int) and not isinstance(s, bool) and s > 0),
            default=DEFAULT_MAX_SEGMENT_SIZE,
        )
        return max_bytes, age, segment_size

    # -- publishing -----------------------------------------------------

    def publish(self, message: Message, now_ms: int) -> int:
        """Append ``message`` with the next offset in its headers; confirm after the fsync."""
        self.stats_publish += 1
        self._finish_restore()
        store = self.store
        if store is None:
            return queues.PUBLISH_OK  # a model without a store (tests of other parts) keeps none
        offset = self.index.next_offset
        raw = _with_offset(message.raw_properties, offset)
        msg_id = store.append(
            enqueued_at_ms=now_ms,
            expire_at_ms=0,
            exchange=message.exchange,
            routing_key=message.routing_key,
            raw_properties=raw,
            body=message.body,
        )
        size = _record_size(message.exchange, message.routing_key, raw, len(message.body))
        self._appended(msg_id, size, now_ms)
        self._wrote()
        return queues.PUBLISH_SYNC

    def _appended(self, msg_id: int, size: int, now_ms: int) -> None:
        number = records.split_msg_id(msg_id)[0]
        rotated = bool(self.index.segments) and self.index.segments[-1].number != number
        offset = self.index.add(number, msg_id, size, now_ms)
        if not offset % SEEK_EVERY:
            self._seek[offset // SEEK_EVERY] = msg_id
        self.ready_count += 1
        self.ready_bytes += size
        self._tail = (offset, msg_id)
        self._tail_next = msg_id + size
        max_bytes, _, segment_size = self.limits()
        current = self.index.segments[-1]
        if current.size >= segment_size and self.store is not None:
            self.store.rotate()
        if rotated or max_bytes is not None:
            self._retain(now_ms)

    def _wrote(self) -> None:
        commits = self.hooks.commits
        end = self.index.next_offset
        if commits is None:
            self.visible_end = end
            self._wake_tail()
            return
        generation = commits.wrote()
        marks = self._marks
        if marks and marks[-1][0] == generation:
            marks[-1] = (generation, end)
        else:
            marks.append((generation, end))
        if not self._waiting:
            self._waiting = True
            commits.wait(self)

    def release_durable(self, durable_generation: int) -> None:
        """``commits.Waiter``: records appended before that sync are durable; deliver them."""
        marks = self._marks
        moved = False
        while marks and marks[0][0] <= durable_generation:
            self.visible_end = marks.popleft()[1]
            moved = True
        if moved:
            self._wake_tail()
        if not marks and self._waiting and self.hooks.commits is not None:
            self._waiting = False
            self.hooks.commits.done(self)
        if moved and self._cursors and not self.deleted:
            self.drain(0)

    # -- retention ------------------------------------------------------

    def _retain(self, now_ms: int) -> int:
        max_bytes, max_age, _ = self.limits()
        if max_bytes is None and max_age is None:
            return 0
        count = self.index.to_drop(max_bytes=max_bytes, max_age_ms=max_age, now_ms=now_ms)
        if not count:
            return 0
        for segment in self.index.drop_first(count):
            self.ready_count -= segment.count
            self.ready_bytes -= segment.size
            if self.store is not None:
                self.store.drop_segment(segment.number)
        first = self.index.first_offset
        low = first // SEEK_EVERY
        for key in range(self._seek_low, low):  # marks in dropped segments: as many as dropped
            self._seek.pop(key, None)
        self._seek_low = max(self._seek_low, low)
        for cursor in self._cursors.values():  # what was read ahead from a dropped segment
            if cursor.offset < first:
                self._drop_ahead(cursor)
        return count

    def expire_head(self, now_ms: int) -> int:
        """The vhost's tick: ``x-max-age`` retention (a stream has no message TTL)."""
        self._finish_restore()
        self._retain(now_ms)
        return 0

    def apply_settings(self, settings: settings_mod.QueueSettings) -> None:
        """A policy changed: its limits (``limits``) apply from the next append or tick."""
        self.settings = settings

    # -- consuming ------------------------------------------------------

    def start_cursor(
        self, consumer: queues.Consumer, spec: streamargs.OffsetSpec, now_ms: int
    ) -> None:
        """Where a new consumer starts (``x-stream-offset``), before ``add_consumer``."""
        self._finish_restore()
        index = self.index
        since_ms = None
        if spec.kind == "first":
            offset = index.first_offset
        elif spec.kind == "last":
            offset = self.last_offset if self.last_offset is not None else self.visible_end
        elif spec.kind == "offset":
            offset = max(spec.value, index.first_offset)
        elif spec.kind == "timestamp":
            since_ms = spec.timestamp(now_ms)
            segment = index.for_timestamp(since_ms)
            offset = segment.first_offset if segment is not None else index.next_offset
        else:  # next
            offset = index.next_offset
        cursor = Cursor(consumer, offset, since_ms)
        if offset == index.next_offset and self._tail_next is not None:
            cursor.msg_id = self._tail_next  # at the end: the next record lands there
        self._cursors[consumer] = cursor
        self._order.append(cursor)

    def add_consumer(self, consumer: queues.Consumer) -> None:
        if consumer not in self._cursors:  # no spec given (a model-level caller): next
            self.start_cursor(consumer, streamargs.OffsetSpec("next"), 0)
        super().add_consumer(consumer)

    def remove_consumer(self, consumer: queues.Consumer) -> bool:
        cursor = self._cursors.pop(consumer, None)
        if cursor is not None:
            rest = cursor.rest
            if rest is None:
                self._order.remove(cursor)
            elif rest is AT_TAIL:
                self._at_tail.remove(cursor)
            else:
                resting = self._resting[rest]
                del resting[consumer]
                if not resting:
                    del self._resting[rest]
            self._drop_ahead(cursor)
        return super().remove_consumer(consumer)

    def drain(self, now_ms: int) -> int:
        """Deliver what this turn's allowance covers; park the rest for later turns."""
        if not self._cursors or self.deleted:
            return 0
        scheduler = self.hooks.scheduler
        if scheduler.park is None:
            delivered, _ = self._pump(budgets.unlimited())
            return delivered
        if self._parked:
            return 0  # the parked job goes on at the end of this turn
        meter = scheduler.meter
        meter.left = max(meter.left, FLOOR)
        delivered, finished = self._pump(meter)
        if not finished:
            self._parked = True
            scheduler.park(_Pump(self))
        return delivered

    def _pump(self, meter: budgets.Meter) -> tuple[int, bool]:
        """Deliver round-robin while ``meter`` lasts: (delivered, True once nobody can go on).

        Each step takes the cursor's next records: those read ahead are taken as they are (the
        first is the cursor's next, same msg_id, in a segment still held: retention clears
        what it drops, ``_retain``); otherwise ``_refill`` reads a run from the cursor. Records
        are passed over on the way to a start inside a segment (``skip_to``: as many a step as
        the meter allows) and, one a step, when published before a timestamp start. Otherwise
        the step delivers as many of the records read ahead as the consumer's ``credit``, the
        durable end and the meter allow, in one ``deliver_run``: a stream's deliveries are the
        broker's hot loop when Spark reads (docs/bench/profile.md), and a call or an object
        per delivery was most of its Python work
        (tests/broker/dispatch/test_stream_deliveries.py). A step's records go to one
        consumer; the turn's first step is the next cursor's, so consumers still take turns.
        A cursor that cannot go on (at the durable end, no credit) leaves the round-robin
        (``_rest``) until what it waits for changes, so a pass costs what can be delivered,
        not the number of consumers a client opened."""
        delivered = 0
        try:
            order = self._order
            hooks = self.hooks
            idle = 0  # cursors in a row that could not go on
            while order and idle < len(order):
                if meter.left <= 0:
                    return delivered, False
                cursor = order[0]
                order.rotate(-1)
                consumer = cursor.consumer
                channel = consumer.channel
                offset = cursor.offset
                if offset >= self.visible_end:
                    self._rest(cursor, AT_TAIL)
                    continue
                credit = channel.credit(consumer)
                if not credit:
                    if cursor.ahead_bytes and hooks.read_ahead > READ_AHEAD_TOTAL // 2:
                        self._drop_ahead(cursor)  # cursors that can go on need the room more
                    self._rest(cursor, channel)
                    continue
                ahead = cursor.ahead
                if not ahead or ahead[0].msg_id != cursor.msg_id:
                    refilled = self._refill(cursor, meter)
                    if refilled is None:
                        idle += 1
                        continue
                    if not refilled:
                        idle = 0
                        continue
                    ahead = cursor.ahead
                    offset = cursor.offset  # placed by the read: a seek mark, a segment's start
                    if offset >= self.visible_end:
                        self._rest(cursor, AT_TAIL)
                        continue
                idle = 0
                since = cursor.since_ms
                if offset < cursor.skip_to:  # on the way to a start inside a segment
                    passed = min(cursor.skip_to - offset, len(ahead), -(-meter.left // READ_STEPS))
                    meter.left -= passed * READ_STEPS
                    last = ahead[passed - 1]
                    first_msg_id = ahead[0].msg_id
                    del ahead[:passed]
                    self._passed(
                        cursor, first_msg_id, last.msg_id + last.length - first_msg_id, passed
                    )
                    continue
                if since is not None:  # a timestamp start: records published before it
                    record = ahead[0]
                    if record.enqueued_at_ms < since:
                        meter.left -= READ_STEPS
                        del ahead[0]
                        self._passed(cursor, record.msg_id, record.length, 1)
                        continue
                    cursor.since_ms = None  # this one and every later one is delivered
                count = min(
                    credit,
                    len(ahead),
                    self.visible_end - offset,
                    -(-meter.left // READ_STEPS),  # a delivery while any step is left
                )
                sent, body_bytes = channel.deliver_run(
                    consumer, self, ahead, count, map(_entry_for, map(len, map(_body, ahead)))
                )
                if not sent:  # a channel that took none after all: it has no room
                    self._rest(cursor, channel)
                    continue
                meter.left -= sent * READ_STEPS
                last = ahead[sent - 1]
                first_msg_id = ahead[0].msg_id
                del ahead[:sent]
                self._passed(cursor, first_msg_id, last.msg_id + last.length - first_msg_id, sent)
                consumer.unacked += sent
                self.unacked_count += sent
                self.unacked_bytes += body_bytes
                delivered += sent
            return delivered, True
        finally:
            if delivered:
                self.stats_deliver += delivered
                self.stats_deliveries["deliver"] += delivered

    def _rest(self, cursor: Cursor, where: object) -> None:
        """Take ``cursor`` out of the round-robin (``_pump`` just moved it to its end) until
        ``where`` changes: ``AT_TAIL``, new durable records (``_wake_tail``); a channel, room
        on it (``wake``). A pass of ``_pump`` thus looks only at cursors that may go on, not at
        every consumer a client opened and left without credit or at the end."""
        popped = self._order.pop()
        assert popped is cursor  # noqa: S101 - the pump rotated it last
        cursor.rest = where
        if where is AT_TAIL:
            self._at_tail.append(cursor)
        else:
            self._resting.setdefault(where, {})[cursor.consumer] = cursor

    def _wake_tail(self) -> None:
        """New durable records: the cursors at the end go back into the round-robin."""
        at_tail = self._at_tail
        if at_tail:
            for cursor in at_tail:
                cursor.rest = None
            self._order.extend(at_tail)
            self._at_tail = []

    def wake(self, target: queues.DeliveryTarget, consumer: queues.Consumer | None = None) -> None:
        """Room appeared on ``target`` (the channel calls this before ``drain``): for one of
        its consumers (an ack of that consumer's deliveries), or for all of them (a qos, a
        written socket, held bodies released): their cursors go back into the round-robin."""
        resting = self._resting.get(target)
        if not resting:
            return
        if consumer is not None:
            cursor = resting.pop(consumer, None)
            if cursor is None:
                return
            woken = [cursor]
            if not resting:
                del self._resting[target]
        else:
            woken = list(resting.values())
            del self._resting[target]
        for cursor in woken:
            cursor.rest = None
        self._order.extend(woken)

    def _passed(self, cursor: Cursor, first_msg_id: int, span: int, count: int) -> None:
        """``count`` records from ``first_msg_id``, ``span`` bytes in their segment, were taken
        from the cursor's read-ahead: it is past them. The next record's place; past the
        segment's end ``_position`` sees another segment number there and goes to that
        segment's first record."""
        cursor.ahead_bytes -= span
        self.hooks.read_ahead -= span
        cursor.offset += count
        cursor.msg_id = first_msg_id + span

    def _refill(self, cursor: Cursor, meter: budgets.Meter) -> bool | None:
        """Read a run of records from the cursor's place into its read-ahead: True if read,
        False if its segment was unreadable (the cursor skipped to the next one), None if it
        cannot go on now."""
        if cursor.ahead_bytes:  # a new segment, or a start: read a run from the cursor
            self._drop_ahead(cursor)
        store = self.store
        segment = self._position(cursor)
        if store is None or segment is None or cursor.msg_id is None:
            return None
        hooks = self.hooks
        room = READ_AHEAD_TOTAL - hooks.read_ahead  # 0 or less: one record
        try:
            run = store.read_run(
                cursor.msg_id, room if room < READ_AHEAD_BYTES else READ_AHEAD_BYTES
            )
        except StoreError as exc:  # unreadable: skip to the next segment rather than stall
            log.error("stream '%s' in vhost '%s': %s", self.name, self.vhost, exc)
            cursor.offset, cursor.msg_id = segment.end, None
            meter.left -= READ_STEPS
            return False
        cursor.ahead = run
        last = run[-1]  # consecutive records: their lengths add up to this span
        held = last.msg_id + last.length - run[0].msg_id
        cursor.ahead_bytes = held
        hooks.read_ahead += held
        return True

    def _drop_ahead(self, cursor: Cursor) -> None:
        """Give back what ``cursor`` read ahead (``READ_AHEAD_TOTAL``)."""
        cursor.ahead = []
        self.hooks.read_ahead -= cursor.ahead_bytes
        cursor.ahead_bytes = 0

    def _position(self, cursor: Cursor) -> SegmentInfo | None:
        """The cursor's segment, with ``msg_id`` set to a record the cursor reads next.

        Starting inside a segment, the cursor goes back to the nearest seek mark at or before
        its offset in that segment (``SEEK_EVERY``), or the segment's first record, and reads
        forward, passing over records until ``skip_to`` (one record per step, over as many
        turns as it takes): the index has no entry per message to jump with."""
        index = self.index
        if cursor.offset < index.first_offset:
            cursor.offset, cursor.msg_id = index.first_offset, None  # retention passed it
        segment = index.locate(cursor.offset)
        if segment is None:
            following = index.following(cursor.offset)
            if following is None:
                return None
            cursor.offset, cursor.msg_id = following.first_offset, None  # a gap recovery left
            segment = following
        msg_id = cursor.msg_id
        if msg_id is not None and records.split_msg_id(msg_id)[0] != segment.number:
            msg_id = None  # the store started a new segment after the one the cursor was in
        if msg_id is None:
            if cursor.offset == segment.first_offset:
                msg_id = segment.first_msg_id
            elif self._tail is not None and cursor.offset == self._tail[0]:
                msg_id = self._tail[1]
            else:
                cursor.skip_to = max(cursor.skip_to, cursor.offset)
                cursor.offset, msg_id = self._seek_mark(cursor.offset, segment)
        cursor.msg_id = msg_id
        return segment

    def _seek_mark(self, offset: int, segment: SegmentInfo) -> tuple[int, int]:
        """The nearest record at or before ``offset`` in ``segment`` whose place is known: a
        seek mark's, or the segment's first."""
        key = offset // SEEK_EVERY
        marked = self._seek.get(key)
        at = key * SEEK_EVERY
        if (
            marked is not None
            and at >= segment.first_offset
            and records.split_msg_id(marked)[0] == segment.number
        ):
            return at, marked
        return segment.first_offset, segment.first_msg_id

    def get(self, now_ms: int, *, no_ack: bool) -> Entry | None:
        raise streamargs.unsupported("basic.get", self.name, self.vhost)

    # -- settling: an ack only returns credit ---------------------------

    def settle_all(self, entries: list[Entry]) -> None:
        self.stats_ack += len(entries)
        self.unacked_count -= len(entries)
        self.unacked_bytes -= sum(map(queues.size_of, entries))

    def requeue(self, entry: Entry) -> None:
        """A channel closed (or basic.recover) with deliveries unacked: the messages stay in
        the log, as every message does; only the credit comes back."""
        self._returned(entry)

    def reject(self, entry: Entry) -> None:
        self._returned(entry)

    def _returned(self, entry: Entry) -> None:
        self.unacked_count -= 1
        self.unacked_bytes -= entry.size

    def after_requeue(self) -> None:
        return

    def purge(self) -> int:
        raise streamargs.unsupported("queue.purge", self.name, self.vhost)

    # -- recovery -------------------------------------------------------

    def restore(self, entry: Entry, *, body_size: int | None = None) -> None:
        """A record found at start-up (in append order, without its body; the server calls
        this for every durable queue). It carries its offset in its headers: a segment's first
        record places the segment, the others follow densely. Publish times are read back per
        segment, from its first and last records (two reads a segment, none a message).
        Recovered records are durable, so visible."""
        message, msg_id = entry.message, entry.store_id
        if msg_id is None:
            return
        number = records.split_msg_id(msg_id)[0]
        size = _record_size(
            message.exchange, message.routing_key, message.raw_properties, body_size or 0
        )
        index = self.index
        last = index.segments[-1] if index.segments else None
        offset = None
        if last is None or last.number != number:
            if last is not None:
                self._restore_times(last)
            previous = index.next_offset - 1
            offset = _stored_offset(message.raw_properties)
            if offset is None or offset <= previous:
                offset = previous + 1
        offset = index.add(number, msg_id, size, 0, offset)
        if not offset % SEEK_EVERY:
            self._seek[offset // SEEK_EVERY] = msg_id
        self._tail = (offset, msg_id)
        self._tail_next = msg_id + size
        self._tail_times_due = True
        self.ready_count += 1
        self.ready_bytes += size
        self.visible_end = index.next_offset

    def _restore_times(self, segment: SegmentInfo) -> None:
        store = self.store
        if store is None or self._tail is None:
            return
        try:
            segment.first_ms = store.read(segment.first_msg_id).enqueued_at_ms
            segment.last_ms = store.read(self._tail[1]).enqueued_at_ms
        except StoreError as exc:
            log.error("stream '%s' in vhost '%s': %s", self.name, self.vhost, exc)

    def _finish_restore(self) -> None:
        """The newest segment's times, once every record is restored (first use after)."""
        if self._tail_times_due and self.index.segments:
            self._tail_times_due = False
            self._restore_times(self.index.segments[-1])

    def page_out_excess(self) -> int:
        return 0


AT_TAIL: Final = object()  # ``Cursor.rest`` of a cursor waiting for new durable records
_NO_BODY: Final = Message("", "", b"", b"", persistent=True)
_body = itemgetter(records.RunRecord._fields.index("body"))


class _AckEntries(dict[int, Entry]):
    """The entries a stream's deliveries are acked with, shared: one per body size.

    What an ack, a close or a cancel does with a stream's delivery is return its consumer's
    credit and take its size off the queue's unacked bytes (``_returned``); the message stays
    in the log, so nothing is read back and no body is held. Such an entry is never changed
    after it is made, so deliveries of one size can share it, and taking them for a run of
    records (``deliver_run``) runs no Python while the sizes are known: at most
    ``ACK_ENTRY_SIZES`` are kept (a stream of every size only makes entries again)."""

    def __missing__(self, size: int) -> Entry:
        if len(self) >= ACK_ENTRY_SIZES:
            self.clear()
        entry = self[size] = Entry(0, _NO_BODY)
        entry.size = size
        return entry


ACK_ENTRY_SIZES: Final = 4096
_entry_for = _AckEntries().__getitem__


class _Pump:
    """A stream's deliveries that did not fit in a turn (``budgets.Job``)."""

    __slots__ = ("stream",)

    def __init__(self, stream: StreamQueue) -> None:
        self.stream = stream

    def advance(self, meter: budgets.Meter) -> bool:
        stream = self.stream
        if stream.deleted or not stream._cursors:
            stream._parked = False
            return True
        _, finished = stream._pump(meter)
        if finished:
            stream._parked = False
        return finished


def _record_size(exchange: str, routing_key: str, raw_properties: bytes, body_size: int) -> int:
    return (
        records.record_size(
            exchange=records.encode_name(exchange, what="exchange name"),
            routing_key=records.encode_name(routing_key, what="routing key"),
            raw_properties=raw_properties,
            body=b"",
        )
        + body_size
    )


def _with_offset(raw_properties: bytes, offset: int) -> bytes:
    """The properties with the headers a 3.10.8 stream delivers (observed side by side,
    tests/sidebyside/test_stream_headers.py): ``x-stream-offset`` set to a long, in place of a
    publisher's own (the first, if several); every header sorted by name, stably (3.10.8 sets
    it with ``rabbit_misc:set_table_value``, which sorts the table); and no header whose value
    is a table or an array (3.10.8 keeps a stream's messages as AMQP 1.0, whose application
    properties hold simple values only, so those never come back). Every other value keeps its
    type tag and bytes."""
    spans = rewrite.property_spans(raw_properties)
    entries = rewrite.split_table(spans["headers"]) if "headers" in spans else []
    kept = [(key, value) for key, value in entries if value[:1] not in _COMPOUND]
    tagged = (streamargs.OFFSET_HEADER, rewrite.encode_value(offset))
    at = next((i for i, (key, _) in enumerate(kept) if key == streamargs.OFFSET_HEADER), None)
    if at is None:
        kept.append(tagged)
    else:
        kept[at] = tagged
    kept.sort(key=itemgetter(0))  # by name: code point order is UTF-8 byte order, as Erlang's
    spans["headers"] = rewrite.join_table(kept)
    return rewrite.join_properties(spans)


_COMPOUND = (b"F", b"A")  # a field table's and a field array's type tags


def _stored_offset(raw_properties: bytes) -> int | None:
    tagged = rewrite.header_value(raw_properties, streamargs.OFFSET_HEADER)
    if tagged is None:
        return None
    value = rewrite.decode_value(tagged)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
