"""Classic queues: ready messages, consumers, unacked accounting (Q-1..Q-4).

Ready messages live in ``model/ready.py``: one FIFO level (Q-4) for a classic
queue, one level per priority for a priority queue (``x-max-priority``).  The
queue only asks it for the head, so limits, TTL and dead-lettering treat both
alike.

The queue never touches a socket.  A consumer points at a ``DeliveryTarget``
(the dispatch layer's channel), which decides whether it has prefetch room and
turns a delivery into protocol output.  Dead-lettering needs the whole vhost,
so the queue reports dropped entries through the ``on_dead_letter`` hook.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol

from hutch_broker.model import consumers as consumers_mod
from hutch_broker.model import paging, quorum, ready
from hutch_broker.model import settings as settings_mod
from hutch_broker.model.messages import Entry, Message

if TYPE_CHECKING:
    from hutch_broker.model.storage import QueueLog
    from hutch_broker.protocol.connection import DeliverRecord


class DeliveryTarget(Protocol):
    """What a queue needs from a consumer's channel."""

    def has_capacity(self, consumer: Consumer) -> bool: ...

    def deliver(self, consumer: Consumer, queue: Queue, entry: Entry) -> None: ...

    def credit(self, consumer: Consumer) -> int:
        """``has_capacity`` as a count: how many deliveries ``consumer`` may take now."""

    def deliver_from(
        self, consumer: Consumer, queue: Queue, pop: Callable[[], Entry | None]
    ) -> tuple[int, int, int]:
        """``deliver`` while ``has_capacity`` for the entries ``pop`` gives (the queue's head,
        which must deliver nothing itself) to an acking ``consumer``: how many went, the sum
        of their ``size`` and how many were redeliveries."""

    def deliver_run(
        self,
        consumer: Consumer,
        queue: Queue,
        run: Sequence[DeliverRecord],
        count: int,
        entries: Iterable[Entry],
    ) -> tuple[int, int]:
        """A stream's next ``count`` records (``run``'s first, within ``credit``), with the
        entries acks return; how many went (fewer when the connection's output filled) and
        their bodies' bytes."""

    def cancelled_by_broker(self, consumer: Consumer) -> None: ...


class Consumer:
    __slots__ = (
        "arguments",
        "channel",
        "exclusive",
        "no_ack",
        "prefetch",
        "priority",
        "queue",
        "tag",
        "unacked",
    )

    def __init__(
        self,
        tag: str,
        queue: Queue,
        channel: DeliveryTarget,
        *,
        no_ack: bool,
        exclusive: bool,
        prefetch: int,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        self.tag = tag
        self.queue = queue
        self.channel = channel
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch  # 0 = unlimited, per consumer (basic.qos global=false)
        self.unacked = 0
        self.arguments = arguments or {}
        priority = self.arguments.get("x-priority", 0)  # validated by the dispatch layer
        self.priority = priority if isinstance(priority, int) else 0


# (queue, dying entry, reason, settled): ``settled`` is called once the dead letter is in its
# new queues, which may be turns later (``model.deadletter``); only then may the dying
# message's own record be acked, so a crash in between brings it back instead of losing it.
DeadLetterHook = Callable[["Queue", Entry, str, Callable[[], None]], None]

size_of = attrgetter("size")  # an entry's body size, kept apart from its body (``Entry``)

PUBLISH_OK = 0  # enqueued or delivered, nothing written; confirm now
PUBLISH_SYNC = 1  # a store record was written (enqueued or delivered); confirm after its fsync
PUBLISH_REJECTED = 2  # refused by overflow=reject-publish*; nack under confirms


class Queue:
    """A classic queue, complete when constructed: the vhost passes its log and hooks in.

    ``store``: the durable queue's message log (None: nothing is written); ``pager``: where
    bodies go under memory pressure; ``on_dead_letter``: the vhost's republish;
    ``declared_via``: "amqp" or "http" (the equivalence rules of the declare that made it);
    ``last_used_ms``: the declare's time, where an ``x-expires`` lease starts.
    """

    def __init__(
        self,
        name: str,
        *,
        vhost: str = "/",
        durable: bool = False,
        exclusive_owner: object | None = None,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
        store: QueueLog | None = None,
        pager: paging.Pager | None = None,
        on_dead_letter: DeadLetterHook | None = None,
        declared_via: str = "amqp",
        last_used_ms: int = 0,
    ) -> None:
        self.name = name
        self.vhost = vhost
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments: dict[str, Any] = dict(arguments or {})
        self.quorum = quorum.is_quorum(self.arguments)  # one replica: model/quorum.py
        # "amqp" or "http": the management API accepts a few argument spellings AMQP refuses,
        # and redeclare equivalence is judged by the rules of the way it was declared.
        self.declared_via = declared_via
        self.policy: Any = None
        self.operator_policy: Any = None
        self.settings = self._own_settings(settings_mod.effective(self.arguments, None, None))
        self.store = store
        self.pager = pager
        self.may_expire = False  # set once any entry has an expiry: skips head checks until then
        self.on_dead_letter = on_dead_letter
        self.incoming: dict[int, Any] = {}  # bindings that target this queue
        max_priority = self.arguments.get("x-max-priority")
        self._ready = ready.for_arguments(max_priority if isinstance(max_priority, int) else None)
        # A fresh entry to the tail: a classic queue's deque's own append (C), not a call.
        self._append_fresh = self._ready.appender()
        self.ready_count = 0  # len(self._ready), kept here: the hot path asks on every message
        self._seq = itertools.count(1)
        self.ready_bytes = 0
        self.unacked_count = 0
        self.unacked_bytes = 0
        self.consumers: consumers_mod.Consumers[Consumer] = consumers_mod.Consumers(
            single_active=self.arguments.get("x-single-active-consumer") is True
        )
        self.deleted = False
        self.last_used_ms = last_used_ms
        self.stats_publish = 0
        self.stats_deliver = 0
        self.stats_ack = 0
        self.stats_redeliver = 0
        # deliver / deliver_no_ack / get / get_no_ack / get_empty, RabbitMQ's split of deliver_get
        self.stats_deliveries: collections.Counter[str] = collections.Counter()

    # -- inspection ---------------------------------------------------

    def ready_entries(self) -> Iterator[Entry]:
        """Ready entries in delivery order (for tests, export and HTTP peek)."""
        return iter(self._ready)

    def consumer_count(self) -> int:
        return len(self.consumers)

    # -- publishing ---------------------------------------------------

    def publish(self, message: Message, now_ms: int) -> int:
        """Enqueue or deliver ``message`` (ML-8); returns a ``PUBLISH_*`` outcome.

        One call per message and queue, so the checks that a plain queue passes (no TTL, no
        length limit, a transient message) are made here before calling their helpers.
        """
        self.stats_publish += 1
        if self.quorum:
            message = quorum.inbound(message)
        limits = self.settings
        if limits.message_ttl is None and not message.expires:
            expire_at = 0  # _expiry_for's common case
        else:
            expire_at = self._expiry_for(message, now_ms)
        entry = Entry(next(self._seq), message, expire_at)
        if self.ready_count:
            if self.may_expire:
                self.expire_head(now_ms)
            if limits.ring_size is not None and self.ready_count >= limits.ring_size:
                self._drop_head("maxlen")  # RING-3: exactly one
        limited = limits.max_length is not None or limits.max_length_bytes is not None
        refused = (
            limited
            and limits.overflow != "drop-head"
            and (self._over_limit() if self.quorum else self._would_overflow(entry))
        )  # a quorum queue fills one past (3.10.8)
        if refused:
            if limits.overflow == "reject-publish-dlx":
                self._drop(entry, "maxlen")
            return PUBLISH_REJECTED  # ML-4, ML-5: never a basic.return
        durable = self.store is not None and (message.persistent or self.quorum)  # _persist's
        if not self.ready_count and self.consumers:  # _direct_consumer, inlined
            consumer = self.consumers.next_with_room()
            if consumer is not None:
                # Written before it is handed over, unless nobody will ack it: a confirm may
                # only follow the write, and a consumer that never acks (channel closed,
                # broker restarted) must find the message again (P-3).
                wrote = durable and not consumer.no_ack and self._persist(entry, now_ms)
                if consumer.no_ack:
                    self._deliver(consumer, entry)
                else:  # _deliver, inlined for a fresh entry (never redelivered, no count)
                    self.stats_deliver += 1
                    self.stats_deliveries["deliver"] += 1
                    consumer.unacked += 1
                    self.unacked_count += 1
                    self.unacked_bytes += entry.size
                    consumer.channel.deliver(consumer, self, entry)
                return PUBLISH_SYNC if wrote else PUBLISH_OK
        if expire_at and expire_at <= now_ms:
            self._drop(entry, "expired")  # TTL-4: nobody could take it at once
            return PUBLISH_OK
        wrote = durable and self._persist(entry, now_ms)
        pager = self.pager
        if pager is not None and pager.active:
            self._push_fresh(entry)
        else:  # _push_fresh without paging, inline
            self._append_fresh(entry)
            self.ready_count += 1
            self.ready_bytes += entry.size
        if limited and limits.overflow == "drop-head":
            self._enforce_length_limit()
        return PUBLISH_SYNC if wrote else PUBLISH_OK

    def _would_overflow(self, entry: Entry) -> bool:
        limits = self.settings
        if limits.max_length is not None and self.ready_count + 1 > limits.max_length:
            return True
        return (
            limits.max_length_bytes is not None
            and self.ready_bytes + entry.size > limits.max_length_bytes
        )

    def _drop_head(self, reason: str) -> None:
        entry = self._pop_ready()
        if entry is not None:
            self._drop(entry, reason)

    def _expiry_for(self, message: Message, now_ms: int) -> int:
        ttl = self.settings.message_ttl
        if ttl is None and not message.expires:
            return 0  # no queue TTL and no expiration property: the common case
        self.may_expire = True
        per_message = message.expiration()
        sign = per_message is not None and per_message[:1] in ("+", "-")  # "+5", "-0" (TTL-2)
        if per_message is not None and per_message[sign:].isdigit():
            value = int(per_message)
            ttl = value if ttl is None else min(ttl, value)
        return 0 if ttl is None else now_ms + ttl

    def _persist(self, entry: Entry, now_ms: int, record: Message | None = None) -> bool:
        """Writes the entry's message (or ``record``, what the store should keep of it)."""
        message = entry.message if record is None else record
        if self.store is None or not (message.persistent or self.quorum):
            return False  # a quorum queue stores every message, as RabbitMQ's log does
        entry.store_id = self.store.append(
            enqueued_at_ms=now_ms,
            expire_at_ms=entry.expire_at,
            exchange=message.exchange,
            routing_key=message.routing_key,
            raw_properties=message.raw_properties,
            body=message.body,
        )
        return True

    def restore(self, entry: Entry, *, body_size: int | None = None) -> None:
        """Put back a message recovered from the store (at start-up, in order).

        With ``body_size``, the entry's message comes without its body: the body stays in the
        store and is read back when the message reaches the head, as a paged-out body is
        (``_page_in``), so a restart holds no body in memory however much the queues hold.
        """
        if body_size is not None:
            entry.size = body_size
        if self.quorum:
            entry.message, entry.delivery_count = quorum.restored(entry.message)
        entry.seq = next(self._seq)
        if entry.expire_at:
            self.may_expire = True
        self._push_fresh(entry)

    def _push_fresh(self, entry: Entry) -> None:
        """At the tail; its body paged out when paging is on and it is past the head's share.
        ``publish`` writes the common case (no paging) out itself."""
        pager = self.pager
        beyond_head = (
            pager is not None
            and pager.active
            and (
                self._ready.fresh_count() >= paging.KEEP_IN_MEMORY
                or self.ready_bytes >= paging.KEEP_BYTES
            )
        )
        self._append_fresh(entry)
        self.ready_count += 1
        self.ready_bytes += entry.size
        if beyond_head:
            self._page_out(entry)

    # -- paging (model/paging.py) ---------------------------------------

    def page_out_excess(self) -> int:
        """Memory pressure began: page out every ready body past the first few."""
        if self.pager is None or not self.pager.enabled:
            return 0
        paged = 0
        head_bytes = sum(entry.size for entry in self._ready.requeued_entries())
        for index, entry in enumerate(self._ready.fresh_entries()):
            beyond_head = index >= paging.KEEP_IN_MEMORY or head_bytes >= paging.KEEP_BYTES
            head_bytes += entry.size
            if beyond_head and not entry.paged:
                self._page_out(entry)
                paged += 1
        return paged

    def _page_out(self, entry: Entry) -> None:
        message = entry.message
        if not message.body:
            return
        if entry.store_id is None:
            assert self.pager is not None  # noqa: S101
            if self.pager.store is None:
                return
            entry.page_id = self.pager.queue_store(self.vhost, self.name).append(
                enqueued_at_ms=0,
                expire_at_ms=entry.expire_at,
                exchange=message.exchange,
                routing_key=message.routing_key,
                raw_properties=message.raw_properties,
                body=message.body,
            )
        entry.message = message.with_body(b"")

    def _page_in(self, entry: Entry) -> bool:
        """Bring the body back; False if it cannot be read (the entry leaves the queue)."""
        if entry.page_id is not None:
            assert self.pager is not None  # noqa: S101
            store = self.pager.queue_store(self.vhost, self.name)
            body = paging.read_body(store, entry.page_id, self.vhost, self.name)
            if body is not None:
                store.ack(entry.page_id)
            entry.page_id = None
        elif entry.store_id is not None and self.store is not None:
            body = paging.read_body(self.store, entry.store_id, self.vhost, self.name)
        else:
            return True
        if body is None:
            return False
        entry.message = entry.message.with_body(body)
        return True

    def _enforce_length_limit(self) -> None:
        """drop-head overflow: trim from the head while over a limit (ML-3, ML-9)."""
        limits = self.settings
        if limits.overflow != "drop-head":
            return
        if limits.max_length is None and limits.max_length_bytes is None:
            return
        while self.ready_count and self._over_limit():
            entry = self._pop_ready()
            if entry is not None:
                self._drop(entry, "maxlen")

    def _over_limit(self) -> bool:
        limits = self.settings
        if limits.max_length is not None and self.ready_count > limits.max_length:
            return True
        return limits.max_length_bytes is not None and self.ready_bytes > limits.max_length_bytes

    # -- consuming ----------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.add(consumer)

    def remove_consumer(self, consumer: Consumer) -> bool:
        """True when another consumer took over as the single active one: drain it soon."""
        return self.consumers.remove(consumer)

    # Whether ``wake`` does anything: the channel skips the call for a queue whose ``drain``
    # asks every consumer anyway (the single ack's path counts its calls: test_publish_calls).
    rests_consumers = False

    def wake(self, target: DeliveryTarget, consumer: Consumer | None = None) -> None:
        """Room may have appeared on ``target``'s consumers (``consumer``'s alone when given);
        ``drain`` follows. A classic queue asks every consumer at each ``drain``, so there is
        nothing to do; a stream looks again only at the cursors that wait for that room
        (``StreamQueue.wake``)."""

    def drain(self, now_ms: int) -> int:
        """Deliver ready messages to consumers with room; returns how many."""
        delivered = 0
        consumers = self.consumers
        consumers.rescan()
        while self.ready_count and consumers:
            consumer = consumers.next_with_room()  # by priority, round-robin within one
            if consumer is None:
                break
            if len(consumers) == 1 and not consumer.no_ack and not self.quorum:
                return delivered + self._drain_to(consumer, now_ms)
            entry = self._pop_live_head(now_ms)
            if entry is None:
                break
            self._deliver(consumer, entry)
            delivered += 1
        return delivered

    def _drain_to(self, consumer: Consumer, now_ms: int) -> int:
        """``drain`` to a queue's only consumer (acking, of a classic queue), found with room.

        With nobody to take turns with, it takes messages until its channel says it has no
        room, without choosing it again for each (``next_with_room``: a call, a rotation).
        Scenario 1 of the benchmark makes nearly every delivery here (docs/bench/profile.md).
        Without messages that may expire, the channel takes the run in one call
        (``DeliveryTarget.deliver_from``) and the counters are added once; with them, a head
        taken may be dead-lettered, which may deliver to the same channel, so each delivery
        is made on its own, ``_deliver``'s bookkeeping inline.
        """
        channel = consumer.channel
        if not self.may_expire:
            count, sizes, redelivers = channel.deliver_from(consumer, self, self._pop_ready)
            self.stats_deliver += count
            self.stats_deliveries["deliver"] += count
            self.stats_redeliver += redelivers
            consumer.unacked += count
            self.unacked_count += count
            self.unacked_bytes += sizes
            if self.ready_count:
                self.consumers.cursor = -1  # what next_with_room would find: nobody has room
            return count
        has_capacity = channel.has_capacity
        deliver = channel.deliver
        pop = partial(self._pop_live_head, now_ms)
        deliveries = self.stats_deliveries
        delivered = 0
        while self.ready_count:
            entry = pop()
            if entry is None:
                break
            self.stats_deliver += 1
            deliveries["deliver"] += 1
            if entry.redelivered:
                self.stats_redeliver += 1
            consumer.unacked += 1
            self.unacked_count += 1
            self.unacked_bytes += entry.size
            deliver(consumer, self, entry)
            delivered += 1
            if self.ready_count and not has_capacity(consumer):
                self.consumers.cursor = -1  # what next_with_room would find: nobody has room
                break
        return delivered

    def _deliver(self, consumer: Consumer, entry: Entry) -> None:
        self.stats_deliver += 1
        self.stats_deliveries["deliver_no_ack" if consumer.no_ack else "deliver"] += 1
        if self.quorum and entry.delivery_count:  # a first delivery carries none (3.10.8)
            entry.message = quorum.with_delivery_count(entry.message, entry.delivery_count)
        if entry.redelivered:
            self.stats_redeliver += 1
        if consumer.no_ack:
            consumer.channel.deliver(consumer, self, entry)
            self._forget(entry)
            return
        consumer.unacked += 1
        self.unacked_count += 1
        self.unacked_bytes += entry.size
        consumer.channel.deliver(consumer, self, entry)

    def get(self, now_ms: int, *, no_ack: bool) -> Entry | None:
        """basic.get: the head message, or None."""
        self.last_used_ms = now_ms
        entry = self._pop_live_head(now_ms)
        if entry is None:
            self.stats_deliveries["get_empty"] += 1
            return None
        self.stats_deliver += 1
        self.stats_deliveries["get_no_ack" if no_ack else "get"] += 1
        if entry.redelivered:
            self.stats_redeliver += 1  # basic.get counts redeliveries too (3.10.8)
        if self.quorum:
            entry.message = quorum.with_delivery_count(entry.message, entry.delivery_count)
        if no_ack:
            self._forget(entry)
        else:
            self.unacked_count += 1
            self.unacked_bytes += entry.size
        return entry

    def _pop_ready(self) -> Entry | None:
        """The head with its body; a head whose body cannot be read back leaves the queue
        (``paging.read_body``) and the next one is taken. The hot path: kept inline."""
        while True:
            entry = self._ready.pop()
            if entry is None:
                return None
            self.ready_count -= 1
            self.ready_bytes -= entry.size
            if not entry.size or entry.message.body or self._page_in(entry):
                return entry

    def _take_head(self) -> Entry | None:
        """Exactly the head, body or not (``expire_head`` judged this one)."""
        entry = self._ready.pop()
        if entry is not None:
            self.ready_count -= 1
            self.ready_bytes -= entry.size
        return entry

    def _has_body(self, entry: Entry) -> bool:
        """True once a paged-out (or recovered) entry's body is back; False if unreadable."""
        return not entry.size or bool(entry.message.body) or self._page_in(entry)

    def _peek_ready(self) -> Entry | None:
        return self._ready.peek()

    def _pop_live_head(self, now_ms: int) -> Entry | None:
        """Pop the head, expiring dead messages on the way (TTL-3: only at the head)."""
        while True:
            entry = self._pop_ready()
            if entry is None or not entry.expire_at or entry.expire_at > now_ms:
                return entry
            self._drop(entry, "expired")

    def expire_head(self, now_ms: int) -> int:
        """Remove expired messages at the head; returns how many went."""
        expired = 0
        while True:
            entry = self._peek_ready()
            if entry is None or not entry.expire_at or entry.expire_at > now_ms:
                return expired
            self._take_head()  # this entry, not the next one should its body be unreadable
            if self._has_body(entry):
                self._drop(entry, "expired")
                expired += 1

    # -- settling -----------------------------------------------------

    def settle(self, entry: Entry) -> None:
        """An unacked message was acknowledged."""
        self.settle_all([entry])

    def settle_all(self, entries: list[Entry]) -> None:
        """Unacked messages of this queue were acknowledged (one ack's, in delivery order):
        the counters once, the store's records each (a transient entry has none)."""
        self.stats_ack += len(entries)
        self.unacked_count -= len(entries)
        self.unacked_bytes -= sum(map(size_of, entries))
        if self.store is not None:
            ack = self.store.ack
            for entry in entries:
                if entry.store_id is not None:  # ``_forget``, written out
                    ack(entry.store_id)
                    entry.store_id = None

    def requeue(self, entry: Entry) -> None:
        """Back to its original position, flagged redelivered (Q-4).

        A full ring drops the message being re-added instead (RING-4).
        """
        self.unacked_count -= 1
        self.unacked_bytes -= entry.size
        if self.deleted:
            self._forget(entry)
            return
        ring_size = self.settings.ring_size
        if ring_size is not None and self.ready_count >= ring_size:
            self._drop(entry, "maxlen")
            return
        entry.redelivered = True
        if self.quorum:
            self._body_back(entry)  # re-written with its count: the whole message is needed
            self._return_to_back(entry)
            return
        self._ready.push_requeued(entry)
        self.ready_count += 1
        self.ready_bytes += entry.size

    def _return_to_back(self, entry: Entry) -> None:
        """A quorum queue counts the failed attempt and puts the message last (3.10.8)."""
        entry.delivery_count += 1
        if quorum.exceeds_limit(entry.delivery_count, self.settings.delivery_limit):
            self._drop(entry, quorum.DELIVERY_LIMIT_REASON)
            return
        entry.seq = next(self._seq)
        self._store_return(entry)
        self._push_fresh(entry)

    def _store_return(self, entry: Entry) -> None:
        """Re-write a stored message with its delivery count, so a restart keeps the count.

        The new record is the newest, as the message is now last in the queue, so recovery
        finds it in its place. Written before the old record is acked: a crash between the
        two brings the message back twice, never loses it.
        """
        old = entry.store_id
        if old is None or self.store is None:
            return
        entry.message = quorum.with_delivery_count(entry.message, entry.delivery_count)
        entry.store_id = None
        self._persist(entry, 0, quorum.stored_form(entry.message, entry.delivery_count))
        self.store.ack(old)

    def reject(self, entry: Entry) -> None:
        """Rejected without requeue: dead-letter with reason ``rejected``."""
        self.unacked_count -= 1
        self.unacked_bytes -= entry.size
        self._drop(entry, "rejected")

    def _body_back(self, entry: Entry) -> None:
        """An unacked entry may come back without its body (dispatch drops a stored body once
        it is encoded): read it from the store where the whole message is needed at once.
        A requeued entry stays body-less in the queue, like a paged-out one, until delivered."""
        if entry.size and not entry.message.body:
            self._page_in(entry)

    def after_requeue(self) -> None:
        """Called once after a batch of requeues: re-apply the length limit (ML-6)."""
        if self.settings.overflow == "drop-head":
            self._enforce_length_limit()

    def _drop(self, entry: Entry, reason: str) -> None:
        if self.on_dead_letter is not None and self.settings.dead_letter_exchange is not None:
            self._body_back(entry)
            if self.quorum:
                entry.message = quorum.without_delivery_count(entry.message)
            self.on_dead_letter(self, entry, reason, lambda: self._forget(entry))
            return
        self._forget(entry)

    def _forget(self, entry: Entry) -> None:
        if entry.store_id is not None and self.store is not None:
            self.store.ack(entry.store_id)
            entry.store_id = None

    # -- lifecycle ----------------------------------------------------

    def purge(self) -> int:
        """Drop every ready message without dead-lettering (Q-4); returns the count."""
        entries = list(self.ready_entries())
        self._ready.clear()
        self.ready_count = 0
        self.ready_bytes = 0
        if self.store is not None and self.unacked_count == 0:
            self.store.purge()
            for entry in entries:
                entry.store_id = None
        else:
            for entry in entries:
                self._forget(entry)
        if self.pager is not None:
            self.pager.forget(self.vhost, self.name)
        return len(entries)

    def apply_settings(self, settings: settings_mod.QueueSettings) -> None:
        self.settings = self._own_settings(settings)
        self._enforce_length_limit()

    def _own_settings(self, settings: settings_mod.QueueSettings) -> settings_mod.QueueSettings:
        return quorum.settings(settings) if self.quorum else settings

    @property
    def paged_out(self) -> tuple[int, int]:
        """(count, body bytes) of ready messages whose bodies are paged out (model/paging.py).

        Only fresh entries are ever paged out; with no pager nothing is, so the scan is skipped.
        """
        if self.pager is None or (self.pager.store is None and self.store is None):
            return 0, 0
        count = size = 0
        for entry in self._ready.fresh_entries():
            if entry.paged:
                count += 1
                size += entry.size
        return count, size
