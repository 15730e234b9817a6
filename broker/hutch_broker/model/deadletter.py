"""Dead-lettering (DLX-1..DLX-4): the rewritten message, the cycle rule, the republish.

The rules are pure functions: given a dying message, produce the message that goes to the
dead-letter exchange (with ``x-death`` and the first/last-death headers, and without
``expiration``), the routing keys to use, and whether delivering it to a given queue would
close a cycle.  ``republish`` applies them: it routes the new message through the vhost's
graph (``routing``) and enqueues it; a queue's ``on_dead_letter`` hook lands there through
its vhost.

Routing a dead letter can be as expensive as routing a publish (a DLX with thousands of
topic bindings), and it happens inside a publish (overflow), an ack or a TTL sweep, none of
which can wait.  So it is metered like a publish (``budgets``): what does not fit in the
loop turn goes to the vhost's backlog and is routed over later turns, in order behind the
vhost's earlier dead letters.  The dying message's own record is acked only when its dead
letter is in its new queues (``settled``), so a broker that stops before a deferred dead
letter's turn finds the message back in its source queue on restart: dead-lettering stays
at least once across a crash, as the durability contract says.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import Any

from hutch_broker.model import budgets, routing
from hutch_broker.model.messages import Entry, Message
from hutch_broker.model.queues import Queue
from hutch_broker.protocol import properties, rewrite
from hutch_broker.protocol.strings import text as _text

log = logging.getLogger(__name__)


def existing_deaths(message: Message) -> list[dict[str, Any]]:
    tagged = rewrite.header_value(message.raw_properties, "x-death")
    if tagged is None or tagged[:1] != b"A":
        return []
    value = rewrite.decode_value(tagged)
    return [dict(item) for item in value if isinstance(item, dict)]


def original_routing_keys(message: Message) -> list[str]:
    """The key plus CC (never BCC, which was stripped at publish) (DLX-2)."""
    keys = [message.routing_key]
    cc = message.headers().get("CC") if b"CC" in message.raw_properties else None
    if isinstance(cc, list):
        keys.extend(_text(key) for key in cc)
    return keys


def dead_letter(
    message: Message,
    *,
    queue: str,
    reason: str,
    now_s: int,
    dead_letter_exchange: str,
    dead_letter_routing_key: str | None,
) -> tuple[Message, list[str]]:
    """The message to publish to the DLX and the routing keys to use."""
    deaths = [] if message.foreign_deaths else existing_deaths(message)
    keys = original_routing_keys(message)
    expiration = properties.expiration(message.raw_properties)
    found = next(
        (
            death
            for death in deaths
            if _text(death.get("queue")) == queue and _text(death.get("reason")) == reason
        ),
        None,
    )
    if found is not None:
        deaths.remove(found)
        found["count"] = int(found.get("count", 0)) + 1
        death = found
    else:
        death = {
            "count": 1,
            "reason": reason,
            "queue": queue,
            "time": datetime.datetime.fromtimestamp(now_s, tz=datetime.UTC),
            "exchange": message.exchange,
            "routing-keys": keys,
        }
        if expiration is not None:
            death["original-expiration"] = expiration
    deaths.insert(0, death)
    updates: dict[str, bytes] = {"x-death": rewrite.encode_value(deaths)}
    first_death_set = not message.foreign_deaths and b"x-first-death" in message.raw_properties
    if not first_death_set or "x-first-death-reason" not in message.headers():
        updates["x-first-death-reason"] = rewrite.encode_value(reason)
        updates["x-first-death-queue"] = rewrite.encode_value(queue)
        updates["x-first-death-exchange"] = rewrite.encode_value(message.exchange)
    updates["x-last-death-reason"] = rewrite.encode_value(reason)
    updates["x-last-death-queue"] = rewrite.encode_value(queue)
    updates["x-last-death-exchange"] = rewrite.encode_value(message.exchange)
    raw = rewrite.edit_headers(
        message.raw_properties, set_values=updates, drop_properties=("expiration",)
    )
    routing_key = dead_letter_routing_key if dead_letter_routing_key is not None else None
    new_keys = [routing_key] if routing_key is not None else keys
    new_message = Message(
        dead_letter_exchange,
        routing_key if routing_key is not None else message.routing_key,
        raw,
        message.body,
        persistent=message.persistent,
    )
    return new_message, new_keys


def is_cycle(message: Message, target_queue: str) -> bool:
    """DLX-4: the target already saw this message and no death in between was a reject."""
    deaths = existing_deaths(message)
    queues = [_text(death.get("queue")) for death in deaths]
    if target_queue not in queues:
        return False
    return all(_text(death.get("reason")) != "rejected" for death in deaths)


def republish(
    graph: routing.Graph,
    queue: Queue,
    entry: Entry,
    reason: str,
    settled: Callable[[], None],
    *,
    clock: Callable[[], int],
) -> None:
    """Republish a message dying in ``queue`` to its DLX (DLX-1..DLX-4).

    ``settled`` is called once the dead letter is in every target queue (at once, or when a
    deferred one finishes): the caller acks the dying message's own record only then, so the
    group commit still writes the copy before the removal of its original and a crash in
    between dead-letters it again rather than losing it (at least once).

    The clock is read only when there is a DLX to publish to: an overflowing queue without
    one drops a message on every publish.
    """
    settings = queue.settings
    name = settings.dead_letter_exchange
    exchange = graph.exchanges.get(name) if name is not None else None
    if name is None or exchange is None:
        settled()
        return  # a missing DLX drops the message silently (DLX-2)
    now_ms = clock()
    message, keys = dead_letter(
        entry.message,
        queue=queue.name,
        reason=reason,
        now_s=now_ms // 1000,
        dead_letter_exchange=name,
        dead_letter_routing_key=settings.dead_letter_routing_key,
    )
    backlog = graph.backlog
    if not backlog.jobs:  # else behind the vhost's earlier dead letters, in order
        try:
            targets = routing.route(graph, exchange, keys, message, backlog.meter)
            backlog.meter.charge(DELIVER_STEPS * len(targets))
        except budgets.OverBudgetError:
            pass
        else:
            for _ in _deliver(message, queue, targets, now_ms):
                pass
            settled()
            return
    steps = routing.route_steps(graph, exchange, keys, message)
    job = DeferredDeadLetter(message, queue, budgets.Resumable(steps), now_ms, settled)
    backlog.defer(job)


class DeferredDeadLetter:
    """A dead letter routed, then delivered, over later loop turns (``budgets.Job``)."""

    def __init__(
        self,
        message: Message,
        source: Queue,
        routing_run: budgets.Resumable[list[Queue]],
        now_ms: int,
        settled: Callable[[], None],
    ) -> None:
        self.message = message
        self.source = source
        self.routing = routing_run
        self.now_ms = now_ms  # when it died: its new queues' TTLs count from then
        self.settled = settled  # acks the source's record: only once delivered
        self._delivering: budgets.Resumable[None] | None = None

    def advance(self, meter: budgets.Meter) -> bool:
        delivering = self._delivering
        if delivering is None:
            if not self.routing.advance(meter):
                return False
            steps = _deliver(self.message, self.source, self.routing.result, self.now_ms)
            delivering = self._delivering = budgets.Resumable(steps)
        if not delivering.advance(meter):
            return False
        self.settled()
        return True


DELIVER_STEPS = 8  # steps charged per target queue, as for a publish's enqueue


def _deliver(
    message: Message, source: Queue, targets: list[Queue], now_ms: int
) -> budgets.Steps[None]:
    """Hand the dead letter to its targets, yielding every few (deleted ones are skipped)."""
    done = 0
    for target in targets:
        if target.deleted:
            continue
        done += DELIVER_STEPS
        if done >= budgets.CHUNK:
            yield done
            done = 0
        if is_cycle(message, target.name):
            log.warning(
                "dead-letter cycle: message from queue '%s' not delivered to '%s' in vhost '%s'",
                source.name,
                target.name,
                source.vhost,
            )
            continue
        target.publish(message, now_ms)
        if target.consumers:
            target.drain(now_ms)
