"""Per-channel state: consumers, unacked deliveries, prefetch, confirms, transactions.

A ``Channel`` is the queue's ``DeliveryTarget``: queues ask it whether a
consumer has prefetch room and hand it entries to deliver, and it turns them
into protocol output on its session's connection.

Publisher confirms are released strictly in publish order (so one
``basic.ack multiple=true`` covers a run): each publish records the
durability generation it needs (0 = none) and whether it was refused; a
confirm waits for every earlier one on the channel. A transaction's
``tx.commit-ok`` waits the same way for the writes of its publishes.

Delivery-side memory (``memory.DeliveryBudget``): a delivery counts its body against the
connection's output slice (``output_pending``: the connection stops taking deliveries until
the end of the loop turn writes them out) and, while unacked, against the bytes the
connection holds for redelivery (``held_bytes``). A body the store holds is not kept for
redelivery: the encoded frame has its own copy, and a return reads it back from the store.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import groupby, islice, takewhile
from operator import attrgetter, itemgetter
from typing import Any, Protocol

from pamqp import commands

from hutch_broker.dispatch.context import Context, Member
from hutch_broker.dispatch.unacked import RunPiece, Single, Unacked
from hutch_broker.model.access import User
from hutch_broker.model.messages import Entry
from hutch_broker.model.queues import Consumer, Queue
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import errors
from hutch_broker.protocol.connection import DeliverRecord


class ChannelOwner(Member, Protocol):
    """What a channel, and the handlers of the methods on it, need of its connection.

    The connection is a dispatch ``Session``; declaring what is used of it here keeps
    ``channels``, ``publishing`` and ``methods`` below ``sessions``, which creates channels
    and calls the handlers (dispatch's modules import one way only).
    """

    context: Context
    writable: bool
    output_pending: int  # delivery bytes queued since the last write to the socket
    output_slice: int  # ... at which the connection stops taking deliveries until that write
    held_bytes: int  # unacked bodies kept in memory for redelivery, all channels
    held_budget: int  # ... above which no consumer of the connection gets more
    publishes: int
    pressure: list[Any]  # queues over the flow high-water mark after a publish
    parked: bool  # a publish is being routed over later loop turns (dispatch.turns)
    exclusive_queues: set[Any]
    writable_exchanges: set[str]  # exchanges check_write allowed under the current permission
    user: User | None  # set at start-ok: the publisher a user_id property must name

    @property
    def open_vhost(self) -> VirtualHost: ...

    def capability(self, name: str) -> bool: ...

    def check_permission(self, kind: str, resource_kind: str, name: str) -> None: ...

    def check_write(self, exchange: str) -> None: ...

    def park_reading(self) -> None: ...

    def resume_parked(self) -> None: ...

    def fail_channel(self, exc: errors.SoftError) -> None: ...

    def check_topic(self, kind: str, exchange: Any, routing_key: str) -> None: ...

    def remove_consumer(self, channel: Channel, consumer: Consumer, now_ms: int) -> bool: ...

    def resume_deliveries(self, now_ms: int) -> None: ...


# Bodies of stored messages at least this big are dropped once encoded (see the docstring):
# below it, the new body-less Message would cost about what the body does.
DROP_STORED_BODY_FROM = 4096
# What a delivery costs of the output slice besides its body: its frames, its objects, and
# above all its share of the loop turn, so a slice of tiny messages is about a thousand
# deliveries (a few milliseconds of the loop), not ten thousand.
DELIVERY_OVERHEAD = 1024
# A consumer whose prefetch is unlimited (and a channel without a global one): ``credit``.
UNBOUNDED_CREDIT = 1 << 30
# An unacked delivery's (queue, entry, consumer) -> its entry -> the body it holds (empty once
# dropped for the store's copy): C getters, so summing a multiple ack's bodies runs no Python.
_entry_of = itemgetter(1)
_queue_and_consumer = itemgetter(0, 2)
_body_of = attrgetter("message.body")
_NOTHING = (0, 0, 0)  # deliver_from's count, sizes and redeliveries when nothing went
_NO_PIECES: list[RunPiece] = []  # what an ack takes of runs when it takes none: never changed


class Channel:
    def __init__(self, session: ChannelOwner, number: int) -> None:
        self.session = session
        self.number = number
        self.consumers: dict[str, Consumer] = {}
        self.reply_consumer: tuple[str, str] | None = None  # (tag, token): dispatch/replyto.py
        self.unacked = Unacked()  # by tag; a stream's runs as one item each (dispatch/unacked.py)
        self.next_delivery_tag = 1
        self.prefetch_count = 0  # basic.qos global=true: the whole channel
        self.consumer_prefetch = 0  # basic.qos global=false: each new consumer
        self.flow_active = True
        self.confirm_mode = False
        self.publish_seq = 0
        self.pending_confirms: deque[tuple[int, int, bool]] = deque()  # (seq, generation, nack)
        self.pending_commits: deque[int] = deque()  # tx.commit-oks held: their generations
        self.transactional = False
        self.tx_publishes: list[Any] = []
        self.tx_acks: list[tuple[str, int, bool, bool]] = []  # (kind, tag, multiple, requeue)

    # -- DeliveryTarget -----------------------------------------------

    def has_capacity(self, consumer: Consumer) -> bool:
        if not self.flow_active or not self.session.writable:
            return False
        if consumer.no_ack:
            return True
        if consumer.prefetch and consumer.unacked >= consumer.prefetch:
            return False
        if self.prefetch_count and self.unacked.outstanding() >= self.prefetch_count:
            return False
        session = self.session
        return session.held_bytes < session.held_budget

    def deliver(self, consumer: Consumer, queue: Queue, entry: Entry) -> None:
        tag = self.next_delivery_tag
        self.next_delivery_tag = tag + 1
        message = entry.message
        session = self.session
        session.proto.send_deliver(
            self.number,
            consumer.tag,
            tag,
            entry.redelivered,
            message.exchange,
            message.routing_key,
            message.raw_properties,
            message.body,
        )
        size = len(message.body)
        pending = session.output_pending + size + DELIVERY_OVERHEAD
        session.output_pending = pending
        if pending >= session.output_slice:
            session.writable = False  # until the end of the turn writes it (server/amqp.py)
        if not consumer.no_ack:
            self.unacked[tag] = (queue, entry, consumer)
            if entry.store_id is None or size < DROP_STORED_BODY_FROM:  # _hold, inlined
                session.held_bytes += size
            else:
                entry.message = message.with_body(b"")
        stats = session.context.stats
        stats.delivers += 1
        stats.deliveries["deliver_no_ack" if consumer.no_ack else "deliver"] += 1
        if entry.redelivered:
            stats.redelivers += 1
        if not session.dirty:  # once per turn; the deliveries after it need no call
            session.context.mark_dirty(session)

    def deliver_from(
        self, consumer: Consumer, queue: Queue, pop: Callable[[], Entry | None]
    ) -> tuple[int, int, int]:
        """Entries from ``pop`` (the queue's head) to ``consumer``, an acking one, while it has
        room: how many went, the sum of their entries' sizes and how many were redeliveries,
        which the queue adds to its own counters.

        ``deliver`` and ``has_capacity`` for a run: the room's count is ``credit``'s, and the
        output slice and the held bytes are checked after each delivery, as ``has_capacity``
        would before the next, so the delivery that fills either is the last. One protocol
        call encodes the run (``send_deliver_entries``) and the counters are added once; a
        call per delivery through ``deliver`` and ``send_deliver`` was most of the delivery
        stage's Python (docs/bench/profile.md). ``pop`` must deliver nothing itself (the
        channel's tag and the session's bytes are written back after the run), which holds
        for a queue's ``_pop_ready``, not for a head that may expire and be dead-lettered.
        """
        room = self.credit(consumer)
        if not room:
            return _NOTHING
        session = self.session
        pending, output_slice = session.output_pending, session.output_slice
        held, held_budget = session.held_bytes, session.held_budget
        unacked = self.unacked
        first = tag = self.next_delivery_tag
        entries: list[Entry] = []
        append = entries.append
        stored: list[Entry] = []  # bodies the store holds, dropped once encoded
        sizes = redelivers = 0
        while room:
            entry = pop()
            if entry is None:
                break
            append(entry)
            unacked[tag] = (queue, entry, consumer)
            tag += 1
            room -= 1
            sizes += entry.size
            if entry.redelivered:
                redelivers += 1
            size = len(entry.message.body)
            pending += size + DELIVERY_OVERHEAD
            if entry.store_id is None or size < DROP_STORED_BODY_FROM:  # _hold, inlined
                held += size
            else:
                stored.append(entry)
            if pending >= output_slice or held >= held_budget:
                break
        count = tag - first
        if not count:
            return _NOTHING
        session.proto.send_deliver_entries(self.number, consumer.tag, first, entries)
        for entry in stored:
            entry.message = entry.message.with_body(b"")
        self.next_delivery_tag = tag
        session.output_pending = pending
        if pending >= output_slice:
            session.writable = False  # until the end of the turn writes it (server/amqp.py)
        session.held_bytes = held
        stats = session.context.stats
        stats.delivers += count
        stats.deliveries["deliver"] += count
        stats.redelivers += redelivers
        if not session.dirty:
            session.context.mark_dirty(session)
        return count, sizes, redelivers

    def credit(self, consumer: Consumer) -> int:
        """How many deliveries ``consumer`` may take now: ``has_capacity`` as a count (its
        prefetch room and the channel's, 0 when the channel or the connection can take none).
        For a stream's runs (``deliver_run``), whose consumers always ack."""
        session = self.session
        if not self.flow_active or not session.writable:
            return 0
        if session.held_bytes >= session.held_budget:
            return 0
        room = consumer.prefetch - consumer.unacked if consumer.prefetch else UNBOUNDED_CREDIT
        if self.prefetch_count:
            room = min(room, self.prefetch_count - self.unacked.outstanding())
        return room if room > 0 else 0

    def deliver_run(
        self,
        consumer: Consumer,
        queue: Queue,
        run: Sequence[DeliverRecord],
        count: int,
        entries: Iterable[Entry],
    ) -> tuple[int, int]:
        """A stream's next ``count`` records (``run``'s first) to ``consumer``, within its
        ``credit``; returns how many went (fewer when the connection's output slice filled)
        and their bodies' bytes, which the queue adds to its unacked bytes.

        ``deliver`` for a run of records: one protocol call encodes them all
        (``send_deliver_run``) and the channel's bookkeeping is added once. ``entries`` are
        what the acks hand back to the queue, one per record in order (the stream's body-less
        entries: it reads nothing back, so no body is held for redelivery and ``held_bytes``
        does not grow). The queue counts its own side (its consumer's and its unacked)."""
        session = self.session
        tag = self.next_delivery_tag
        pending = session.output_pending
        sent, body_bytes = session.proto.send_deliver_run(
            self.number,
            consumer.tag,
            tag,
            run,
            count,
            session.output_slice - pending,
            DELIVERY_OVERHEAD,
        )
        self.next_delivery_tag = tag + sent
        pending += body_bytes + sent * DELIVERY_OVERHEAD
        session.output_pending = pending
        if pending >= session.output_slice:
            session.writable = False  # until the end of the turn writes it (server/amqp.py)
        if sent:  # ``entries`` may hold more than went: islice takes no more of them
            self.unacked.add_run(tag, queue, consumer, list(islice(entries, sent)))
        stats = session.context.stats
        stats.delivers += sent
        stats.deliveries["deliver"] += sent
        if not session.dirty:
            session.context.mark_dirty(session)
        return sent, body_bytes

    def cancelled_by_broker(self, consumer: Consumer) -> None:
        """The queue went away: tell the client if it understands (consumer_cancel_notify)."""
        if self.consumers.pop(consumer.tag, None) is None:
            return
        session = self.session
        if session.capability("consumer_cancel_notify"):
            session.proto.send_method(self.number, commands.Basic.Cancel(consumer_tag=consumer.tag))
            session.context.mark_dirty(session)

    def deliver_reply(self, routing_key: str, raw_properties: bytes, body: bytes) -> None:
        """Hand a reply straight to this channel's reply consumer (dispatch/replyto.py).

        No-ack, so nothing to track. The delivery tag is the channel's next one, not
        consumed: RabbitMQ 3.10.8 does the same (every reply on a channel that got nothing
        else carries tag 1, observed side by side).
        """
        assert self.reply_consumer is not None  # noqa: S101 - the registry holds live ones only
        session = self.session
        tag = self.next_delivery_tag
        session.proto.send_deliver(
            self.number, self.reply_consumer[0], tag, False, "", routing_key, raw_properties, body
        )
        session.context.stats.delivers += 1
        session.context.stats.deliveries["deliver_no_ack"] += 1  # reply consumers never ack
        session.context.mark_dirty(session)

    # -- basic.get ----------------------------------------------------

    def record_get(self, queue: Queue, entry: Entry, *, no_ack: bool) -> int:
        """Track a basic.get; its body is held (counted) until ``got`` says it is encoded."""
        tag = self.next_delivery_tag
        self.next_delivery_tag = tag + 1
        if not no_ack:
            self.unacked[tag] = (queue, entry, None)
            self.session.held_bytes += len(entry.message.body)
        return tag

    def got(self, entry: Entry, *, no_ack: bool) -> None:
        """The get-ok is encoded: a stored body need not stay in memory any more."""
        size = len(entry.message.body)
        if not no_ack and size:
            self.session.held_bytes -= size
            self._hold(entry, size)

    def _hold(self, entry: Entry, size: int) -> None:
        """Keep an unacked entry's body for redelivery, unless the store already holds it."""
        if entry.store_id is not None and size >= DROP_STORED_BODY_FROM:
            entry.message = entry.message.with_body(b"")  # the queue reads it back if returned
        else:
            self.session.held_bytes += size

    # -- settlement ---------------------------------------------------

    def take_unacked(self, tag: int, multiple: bool) -> tuple[list[Single], list[RunPiece], bool]:
        """Remove the deliveries an ack/nack/reject names (CN-4); their bodies stop being held.

        The one place unacked deliveries give back ``held_bytes``. Returns the single
        deliveries, the pieces of a stream's runs (``dispatch/unacked.py``: their deliveries
        hold no body), and True when that brought the connection back under its budget: then
        all its consumers may deliver again, not only this channel's (once the entries are
        settled or back). The bytes are summed in C (``_body_of``): no Python line per
        delivery on the hot ack path. While no run is outstanding the singles are taken here,
        as before runs existed, so a classic queue's ack costs what it did.
        """
        if multiple:
            unacked = self.unacked
            pieces = _NO_PIECES
            if unacked.live_runs:
                both = unacked.take_through(tag, newest=tag == self.next_delivery_tag - 1)
                if both is None:
                    raise errors.precondition_failed(f"unknown delivery tag {tag}")
                taken, pieces = both
            elif tag == 0:  # multiple with tag 0: everything outstanding
                taken = list(unacked.values())  # type: ignore[arg-type]  # singles only
                unacked.clear()
            elif tag not in unacked:
                raise errors.precondition_failed(f"unknown delivery tag {tag}")
            elif tag == self.next_delivery_tag - 1:  # the newest: all of them, without a loop
                taken = list(unacked.values())  # type: ignore[arg-type]  # singles only
                unacked.clear()
            else:  # the oldest through ``tag``, found and taken in C: tags go up in order
                through = list(takewhile(tag.__ge__, unacked))
                taken = list(map(unacked.pop, through))  # type: ignore[arg-type]  # singles only
        else:
            found = self.unacked.pop(tag, None)  # a single's; a run's items are under -last
            if found is None and (found := self.unacked.take_one(tag)) is None:
                raise errors.precondition_failed(f"unknown delivery tag {tag}")
            taken, pieces = [found], _NO_PIECES  # type: ignore[list-item]  # a single, no run
        session = self.session
        over = session.held_bytes >= session.held_budget
        session.held_bytes -= sum(map(len, map(_body_of, map(_entry_of, taken))))
        return taken, pieces, over and session.held_bytes < session.held_budget

    def settle(self, tag: int, multiple: bool, now_ms: int) -> None:
        """basic.ack: the deliveries it names, settled a run of one queue and consumer at a
        time (``Queue.settle_all``): a multiple ack of a busy consumer's deliveries is mostly
        one group, and a stream reader's a piece of a run or two, its counters changed once."""
        singles, pieces, resume = self.take_unacked(tag, multiple)
        settled: dict[Queue, list[Consumer | None]] = {}
        for (queue, consumer), deliveries in groupby(singles, _queue_and_consumer):
            entries = list(map(_entry_of, deliveries))
            queue.settle_all(entries)
            if consumer is not None:
                consumer.unacked -= len(entries)
            settled.setdefault(queue, []).append(consumer)  # None: a basic.get's
        session = self.session
        for queue, run_consumer, entries in pieces:
            queue.settle_all(entries)
            run_consumer.unacked -= len(entries)
            session.context.stats.acks += len(entries)
            settled.setdefault(queue, []).append(run_consumer)
        session.context.stats.acks += len(singles)
        self._drain(set(settled), now_ms, settled)
        if resume:
            session.resume_deliveries(now_ms)

    def reject(self, tag: int, multiple: bool, requeue: bool, now_ms: int) -> None:
        singles, pieces, resume = self.take_unacked(tag, multiple)
        self._return_entries(singles, pieces, resume, requeue=requeue, now_ms=now_ms)

    def requeue_all(self, now_ms: int) -> None:
        """Channel close or basic.recover: every unacked message goes back (CN-4)."""
        singles, pieces, resume = self.take_unacked(0, True)
        self._return_entries(singles, pieces, resume, requeue=True, now_ms=now_ms)

    def _return_entries(
        self,
        singles: list[Single],
        pieces: list[RunPiece],
        resume: bool,
        *,
        requeue: bool,
        now_ms: int,
    ) -> None:
        touched: set[Queue] = set()
        # Latest delivery first, so a full ring drops the oldest re-added message (RING-4).
        for queue, entry, consumer in reversed(singles) if requeue else singles:
            if consumer is not None:
                consumer.unacked -= 1
            if requeue:
                queue.requeue(entry)
            else:
                queue.reject(entry)
            touched.add(queue)
        # A stream's runs: its messages stay in its log, only the credit comes back (the
        # order is the log's, not the ring's).
        for queue, consumer, entries in pieces:
            consumer.unacked -= len(entries)
            give_back = queue.requeue if requeue else queue.reject
            for entry in entries:
                give_back(entry)
            touched.add(queue)
        for queue in touched:
            if requeue:
                queue.after_requeue()
        self._drain(touched, now_ms)
        if resume:
            self.session.resume_deliveries(now_ms)

    def drain_consumers(self, now_ms: int) -> None:
        """Room appeared (qos, flow on, socket writable): every consumer's queue delivers."""
        self._drain({consumer.queue for consumer in self.consumers.values()}, now_ms)

    def _drain(
        self,
        touched: set[Queue],
        now_ms: int,
        credited: dict[Queue, list[Consumer | None]] | None = None,
    ) -> None:
        """Freed prefetch room: let the affected queues deliver again. With ``credited`` (an
        ack's consumers, by queue) and no channel-wide prefetch, only those consumers have
        more room; otherwise every consumer of this channel may (``Queue.wake``)."""
        queues = set(touched)
        if self.prefetch_count:
            queues.update(consumer.queue for consumer in self.consumers.values())
            credited = None
        for queue in queues:
            if queue.consumers and not queue.deleted:
                if queue.rests_consumers:  # a classic queue has nothing to wake: no call
                    self._wake(queue, None if credited is None else credited[queue])
                queue.drain(now_ms)

    def _wake(self, queue: Queue, credited: list[Consumer | None] | None) -> None:
        """``queue.wake`` for the consumers an ack credited, or for all of this channel's."""
        if credited is None:
            queue.wake(self)
            return
        for consumer in credited:
            if consumer is not None:
                queue.wake(self, consumer)

    # -- replies that wait for the group commit (dispatch/commits.py) ----

    def add_confirm(self, generation: int, *, nack: bool) -> None:
        """Confirm the next publish once ``generation`` is durable (at once for 0).

        Only the first of a run of held confirms registers the channel with the group
        commit: it stays registered until ``release_durable`` has sent them all, and every
        completed sync wakes it (``GroupCommit.wait``), so the rest need not ask again.
        """
        self.publish_seq += 1
        pending = self.pending_confirms
        if not pending:
            self.session.context.commits.wait(self)
        pending.append((self.publish_seq, generation, nack))

    def add_commit(self, generation: int) -> None:
        """Send tx.commit-ok once the commit's writes (``generation``) are durable."""
        self.pending_commits.append(generation)
        self.session.context.commits.wait(self)

    def release_durable(self, durable_generation: int) -> None:
        """Send every leading confirm and commit-ok that ``durable_generation`` covers."""
        if self.pending_confirms:
            self._release_confirms(durable_generation)
        commits = self.pending_commits
        while commits and commits[0] <= durable_generation:
            commits.popleft()
            self.session.proto.send_method(self.number, commands.Tx.CommitOk())
        if not self.pending_confirms and not commits:
            self.session.context.commits.done(self)
        self.session.context.mark_dirty(self.session)

    def _release_confirms(self, durable_generation: int) -> None:
        pending = self.pending_confirms
        proto = self.session.proto
        run_end = 0
        confirmed = 0
        while pending and pending[0][1] <= durable_generation:
            seq, _, nack = pending.popleft()
            confirmed += not nack
            if nack:
                if run_end:
                    proto.send_method(self.number, commands.Basic.Ack(run_end, multiple=True))
                    run_end = 0
                proto.send_method(self.number, commands.Basic.Nack(seq, multiple=False))
            else:
                run_end = seq
        if run_end:
            proto.send_method(self.number, commands.Basic.Ack(run_end, multiple=True))
        self.session.context.stats.confirms += confirmed

    # -- teardown -----------------------------------------------------

    def close(self, now_ms: int) -> None:
        """Release everything the channel holds: consumers, then unacked messages."""
        self.session.context.replies.cancel(self)  # replies to it are unroutable from now on
        handed_over = {
            consumer.queue
            for consumer in list(self.consumers.values())
            if self.session.remove_consumer(self, consumer, now_ms)
        }
        self.requeue_all(now_ms)
        self._drain(handed_over, now_ms)
        self.pending_confirms.clear()
        self.pending_commits.clear()
        self.session.context.commits.done(self)
