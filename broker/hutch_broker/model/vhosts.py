"""A virtual host: its exchanges, queues, bindings and policies, the graph they form.

Everything here is synchronous and clock-free (time arrives as ``now_ms``).
Methods raise ``protocol.errors`` with RabbitMQ's texts so that the AMQP
dispatcher and the HTTP API report the same failure the same way.  The
vhost owns the graph and every edit of it (declare, delete, bind, unbind,
expiry); the rules that read it live beside their peers and get the vhost
passed in: routing in ``routing``, the dead-letter republish in
``deadletter``, policy application in ``policies``.
"""

from __future__ import annotations

import base64
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

from hutch_broker.model import arguments as args_mod
from hutch_broker.model import (
    budgets,
    changes,
    deadletter,
    exchangedeclares,
    limits,
    paging,
    policychanges,
    queuedeclares,
    quorum,
    routing,
    streamargs,
    streams,
)
from hutch_broker.model import policies as policies_mod
from hutch_broker.model.changes import Change
from hutch_broker.model.exchanges import Binding, Exchange, binding_identity, make_exchange
from hutch_broker.model.messages import Entry, Message
from hutch_broker.model.policymatch import PolicyMatch
from hutch_broker.model.queues import Queue
from hutch_broker.protocol import errors

if TYPE_CHECKING:
    from hutch_broker.model.storage import LogStore

log = logging.getLogger(__name__)

# What removing one binding costs in ``budgets`` steps: 1-3.5 us measured in memory, about
# 9 us in the broker with durable bindings (the trie removal, the definitions journal record),
# a step being 0.2-0.4 us.
UNLINK_STEPS: Final = 40

DEFAULT_EXCHANGES: Final = (
    ("amq.direct", "direct", False),
    ("amq.fanout", "fanout", False),
    ("amq.topic", "topic", False),
    ("amq.headers", "headers", False),
    ("amq.match", "headers", False),
    ("amq.rabbitmq.trace", "topic", True),
)


def generated_queue_name() -> str:
    token = base64.urlsafe_b64encode(os.urandom(16)).decode("ascii").rstrip("=")
    return f"amq.gen-{token}"


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class VirtualHost:
    """One vhost, complete when constructed: the broker passes in what it shares with it.

    ``on_definitions_changed``: told of every durable definition change (the server journals
    it); ``clock``: the time of declares that give none (None: the wall clock); ``pager``: the
    paging of bodies under memory pressure; ``message_logs``: where durable queues keep their
    messages (None: in memory only, as in model tests); ``backlog`` and ``streams_hooks``: the
    broker's scheduler of deferred routing and what stream queues borrow from dispatch (alone,
    a vhost runs both at once).
    """

    def __init__(
        self,
        name: str,
        *,
        description: str = "",
        tags: Iterable[str] = (),
        default_queue_type: str = "classic",
        on_definitions_changed: changes.ChangeListener = changes.ignore,
        clock: Callable[[], int] | None = None,
        pager: paging.Pager | None = None,
        message_logs: LogStore | None = None,
        backlog: budgets.Backlog | None = None,
        streams_hooks: streams.StreamHooks | None = None,
    ) -> None:
        self.name = name
        self.description = description
        self.tags = list(tags)
        self.default_queue_type = default_queue_type
        self.limits: dict[str, int] = {}  # max-connections, max-queues (model/limits.py)
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, Queue] = {}
        self.policies: dict[str, policies_mod.Policy] = {}
        self.operator_policies: dict[str, policies_mod.Policy] = {}
        # Policy changes not yet completely applied, oldest first (model/policychanges.py).
        self.policy_changes: deque[policychanges.PolicyChange] = deque()
        # An import in progress: policies are stored but matched once, at the end (resume).
        self.policies_paused = False
        self.on_definitions_changed = on_definitions_changed
        self.clock = clock or _wall_clock_ms
        self.pager = pager
        self.message_logs = message_logs
        # Dead letters waiting for a later loop turn (model/budgets.py).
        self.backlog = backlog if backlog is not None else budgets.Backlog()
        self.streams = (
            streams_hooks
            if streams_hooks is not None
            else streams.StreamHooks(self.backlog.scheduler)
        )
        self.default_exchange = make_exchange("", "direct", durable=True, vhost=name)
        for exchange_name, kind, internal in DEFAULT_EXCHANGES:
            self.exchanges[exchange_name] = make_exchange(
                exchange_name, kind, durable=True, internal=internal, vhost=name
            )
        self.exchanges[""] = self.default_exchange

    # -- exchanges ----------------------------------------------------

    def get_exchange(self, name: str) -> Exchange:
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise errors.not_found(f"no exchange '{name}' in vhost '{self.name}'")
        return exchange

    def declare_exchange(
        self,
        name: str,
        exchange_type: str,
        *,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: dict[str, Any] | None = None,
        matched: PolicyMatch | None = None,
    ) -> tuple[Exchange, bool]:
        """Create or check an exchange; returns (exchange, created) (EX-3).

        ``matched``: its policy, found beforehand in slices (``begin_exchange_match``); used
        if it is finished and still current, else the policies are matched here.
        """
        arguments = dict(arguments or {})
        existing = self.exchanges.get(name)
        if existing is not None:
            exchangedeclares.check_equivalent(
                self.name, existing, exchange_type=exchange_type, durable=durable,
                auto_delete=auto_delete, internal=internal, arguments=arguments,
            )  # fmt: skip
            return existing, False
        exchangedeclares.check_new(self.name, name, arguments)
        exchange = make_exchange(
            name,
            exchange_type,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=arguments,
            vhost=self.name,
        )
        self.exchanges[name] = exchange
        self._apply_exchange_policy(exchange, matched)
        self._include_in_policy_changes(exchange)
        if changes.exchange_persisted(exchange):
            self.on_definitions_changed(
                Change("exchanges", changes.exchange_item(self.name, exchange))
            )
        return exchange, True

    def delete_exchange(self, name: str, *, if_unused: bool = False) -> None:
        exchange = self.exchanges.get(name)
        if exchange is None:
            return
        if if_unused and (exchange.bindings or exchange.incoming):
            raise errors.precondition_failed(f"exchange '{name}' in vhost '{self.name}' in use")
        # Out of the table first: unlinking the last binding of an auto-delete exchange
        # deletes it (``_unlink``), which must not happen a second time here.
        del self.exchanges[name]
        for binding in list(exchange.bindings.values()):
            self._unlink(binding)
        for binding in list(exchange.incoming.values()):
            self._unlink(binding)
        if changes.exchange_persisted(exchange):
            item = changes.exchange_item(self.name, exchange)
            self.on_definitions_changed(Change("exchanges", item, deleted=True))

    # -- queues -------------------------------------------------------

    def get_queue(self, name: str) -> Queue:
        queue = self.queues.get(name)
        if queue is None:
            raise errors.not_found(f"no queue '{name}' in vhost '{self.name}'")
        return queue

    def declare_queue(
        self,
        name: str,
        *,
        durable: bool = False,
        exclusive_owner: object | None = None,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
        now_ms: int | None = None,
        source: str = "amqp",
        check_limits: bool = True,
        default_type: bool = False,
        matched: PolicyMatch | None = None,
    ) -> tuple[Queue, bool]:
        """Create or check a queue; returns (queue, created) (Q-1..Q-3).

        Its steps: the type (``default_type``), then either the equivalence check against the
        queue it meets or the new queue's checks (both pure, in ``queuedeclares``), the
        vhost's max-queues, the creation with its log and the journal record, and policies.

        ``default_type``: a client's declare (AMQP, HTTP PUT) without ``x-queue-type`` takes
        the vhost's default queue type, as RabbitMQ 4.x does (``queuedeclares.typed_arguments``);
        definitions imports and recovery keep what was written.

        The declare counts as a use (EXP-1): a queue with ``x-expires`` starts its lease now,
        the vhost's clock when no time is given (a definitions import), never at 0.
        ``check_limits=False`` (definitions import and recovery) skips the vhost's
        max-queues: queues that exist on disk are never refused for a limit set later.
        ``matched``: its policies, found beforehand in slices (``begin_queue_match``, which
        also chose a generated name); used if finished and still current, else matched here.
        """
        if now_ms is None:
            now_ms = self.clock()
        arguments = dict(arguments or {})
        generated = not name
        if generated:
            name = matched.name if matched is not None else generated_queue_name()
        existing = self.queues.get(name)
        if default_type:
            arguments = queuedeclares.typed_arguments(
                self.default_queue_type, arguments, existing, durable=durable,
                exclusive=exclusive_owner is not None, auto_delete=auto_delete,
                generated=generated,
            )  # fmt: skip
        if existing is not None:
            queuedeclares.check_equivalent(
                self.name, existing, exclusive_owner=exclusive_owner, durable=durable,
                auto_delete=auto_delete, arguments=arguments,
            )  # fmt: skip
            existing.last_used_ms = now_ms
            return existing, False
        stream = queuedeclares.check_new(
            self.name, name, arguments, durable=durable, exclusive=exclusive_owner is not None,
            auto_delete=auto_delete, generated=generated,
        )  # fmt: skip
        if check_limits:
            self._check_queue_limit(name)
        queue = self._create_queue(
            name, stream=stream, durable=durable, exclusive_owner=exclusive_owner,
            auto_delete=auto_delete, arguments=arguments, source=source, now_ms=now_ms,
        )  # fmt: skip
        self._place_under_policies(queue, matched)
        self._queue_changed(queue)
        return queue, True

    def _check_queue_limit(self, name: str) -> None:
        """The vhost's max-queues (model/limits.py): a client's declare of a new queue only;
        an import or recovery passes ``check_limits=False``, so a limit set later never
        refuses a queue that exists on disk."""
        limit = limits.reached(self.limits, "max-queues", len(self.queues))
        if limit is not None:
            raise errors.precondition_failed(
                f"cannot declare queue '{name}': queue limit in vhost '{self.name}' ({limit}) "
                "is reached"
            )

    def _create_queue(
        self,
        name: str,
        *,
        stream: bool,
        durable: bool,
        exclusive_owner: object | None,
        auto_delete: bool,
        arguments: dict[str, Any],
        source: str,
        now_ms: int,
    ) -> Queue:
        """A valid new queue, complete at construction and registered in the vhost.

        A durable queue's log is opened first (``message_logs``), so no queue exists without
        the log its persistent messages go to; a failure to open it leaves the vhost as it was.
        """
        store = None
        if durable and self.message_logs is not None:
            store = self.message_logs.open_queue(self.name, name)
        common: dict[str, Any] = {
            "vhost": self.name,
            "durable": durable,
            "exclusive_owner": exclusive_owner,
            "auto_delete": auto_delete,
            "arguments": arguments,
            "store": store,
            "pager": self.pager,
            "on_dead_letter": self.dead_letter,
            "declared_via": source,
            "last_used_ms": now_ms,
        }
        queue = (
            streams.StreamQueue(name, hooks=self.streams, **common)
            if stream
            else Queue(name, **common)
        )
        self.queues[name] = queue
        return queue

    def _place_under_policies(self, queue: Queue, matched: PolicyMatch | None) -> None:
        """A new queue takes its policies now (the match found in slices beforehand, when it
        is still current) and joins the policy changes in flight, which re-evaluate it when
        they are installed (POL-7)."""
        self._apply_queue_policy(queue, matched)
        self._include_in_policy_changes(queue)

    def update_queue_limits(self, name: str, limits: dict[str, Any]) -> Queue:
        """Replace a live queue's limit arguments, keeping its messages (Hutch extension).

        Same effects as a policy change (POL-7): a lowered max-length truncates at once,
        a lower ring size only stops growth, a new TTL applies to new messages.
        """
        queue = self.get_queue(name)
        fixed = sorted(key for key in limits if key not in args_mod.LIMIT_ARGUMENTS)
        if fixed:
            raise errors.precondition_failed(
                f"arguments {', '.join(fixed)} of queue '{name}' in vhost '{self.name}' "
                "cannot be changed in place"
            )
        arguments = {
            key: value
            for key, value in queue.arguments.items()
            if key not in args_mod.LIMIT_ARGUMENTS
        }
        arguments.update(limits)
        args_mod.validate_queue_arguments(name, self.name, arguments)
        queue.arguments = arguments
        queue.declared_via = "http"
        self._apply_queue_policy(queue)
        self._queue_changed(queue)
        return queue

    def _queue_changed(self, queue: Queue, *, deleted: bool = False) -> None:
        if changes.queue_persisted(queue):
            item = changes.queue_item(self.name, queue)
            self.on_definitions_changed(Change("queues", item, deleted=deleted))

    def check_exclusive(self, queue: Queue, owner: object | None) -> None:
        queuedeclares.check_exclusive(self.name, queue, owner)

    def delete_queue(self, name: str, *, if_unused: bool = False, if_empty: bool = False) -> int:
        """Delete a queue; returns its ready message count. Missing is OK."""
        queue = self.queues.get(name)
        if queue is None:
            return 0
        if if_unused and queue.consumers:
            raise errors.precondition_failed(f"queue '{name}' in vhost '{self.name}' in use")
        if if_empty and queue.ready_count:  # unacked messages do not count, as in RabbitMQ
            raise errors.precondition_failed(f"queue '{name}' in vhost '{self.name}' is not empty")
        return self.remove_queue(queue)

    def remove_queue(self, queue: Queue) -> int:
        count = queue.ready_count
        for binding in list(queue.incoming.values()):
            self._unlink(binding)
        queue.deleted = True
        self.queues.pop(queue.name, None)
        for consumer in list(queue.consumers):
            queue.remove_consumer(consumer)
            consumer.channel.cancelled_by_broker(consumer)
        self._drop_logs(queue)
        self._queue_changed(queue, deleted=True)
        return count

    def _drop_logs(self, queue: Queue) -> None:
        """A deleted queue's paged bodies and durable log go with it."""
        if self.pager is not None:
            self.pager.forget(self.name, queue.name)
        if queue.store is not None and self.message_logs is not None:
            queue.store = None
            self.message_logs.delete_queue(self.name, queue.name)

    # -- bindings -----------------------------------------------------

    def destination(self, kind: str, name: str) -> Queue | Exchange:
        return self.get_exchange(name) if kind == "exchange" else self.get_queue(name)

    def bind(
        self,
        source_name: str,
        destination: Queue | Exchange,
        routing_key: str,
        arguments: dict[str, Any] | None = None,
    ) -> Binding:
        if source_name == "":
            raise errors.default_exchange_refused()
        source = self.get_exchange(source_name)
        binding = Binding(source, destination, routing_key, dict(arguments or {}))
        existing = source.bindings.get(binding.identity)
        if existing is not None:
            return existing
        source.add_binding(binding)
        destination.incoming[id(binding)] = binding
        self._binding_changed(binding)
        return binding

    def unbind(
        self,
        source_name: str,
        destination: Queue | Exchange,
        routing_key: str,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        if source_name == "":
            raise errors.default_exchange_refused()
        source = self.get_exchange(source_name)
        binding = source.bindings.get(binding_identity(destination, routing_key, arguments))
        if binding is not None:
            self._unlink(binding)

    def unlink_within(self, entity: Queue | Exchange, meter: budgets.Meter) -> bool:
        """Remove ``entity``'s bindings (both ways) while ``meter`` lasts; True once none is left.

        The first part of a delete of an entity with thousands of bindings, spread over loop
        turns by the AMQP layer (``dispatch.declares``): the entity stays in its table, and
        routes, until the delete itself, which then has few or no bindings left to remove.
        Bindings are removed one at a time, each persisted as it goes, so a stop midway leaves
        the entity with the bindings not yet removed, never a binding to a deleted entity.
        """
        outgoing = entity.bindings if isinstance(entity, Exchange) else None
        incoming = entity.incoming
        while True:
            binding = next(iter(incoming.values()), None)
            if binding is None and outgoing:
                binding = next(iter(outgoing.values()), None)
            if binding is None:
                return True
            if meter.left <= 0:
                return False
            meter.left -= UNLINK_STEPS
            self._unlink(binding)

    def _unlink(self, binding: Binding) -> None:
        source = binding.source
        source.remove_binding(binding.identity)
        binding.destination.incoming.pop(id(binding), None)
        self._binding_changed(binding, deleted=True)
        if source.auto_delete and not source.bindings and source.name in self.exchanges:
            self.delete_exchange(source.name)

    def _binding_changed(self, binding: Binding, *, deleted: bool = False) -> None:
        if changes.binding_persisted(binding):
            item = changes.binding_item(self.name, binding)
            self.on_definitions_changed(Change("bindings", item, deleted=deleted))

    def bindings(self) -> list[Binding]:
        return [
            binding
            for exchange in self.exchanges.values()
            for binding in exchange.bindings.values()
        ]

    # -- routing (model/routing.py) ------------------------------------

    def route(
        self, exchange: Exchange, routing_keys: Iterable[str], message: Message
    ) -> list[Queue]:
        """Every queue the message reaches, once each (EX-4, EX-5, AE-2)."""
        return routing.route(self, exchange, routing_keys, message)

    # -- dead-lettering (model/deadletter.py) ---------------------------

    def dead_letter(
        self, queue: Queue, entry: Entry, reason: str, settled: Callable[[], None]
    ) -> None:
        """Republish a dying message to the queue's DLX (DLX-1..DLX-4); then ``settled()``."""
        deadletter.republish(self, queue, entry, reason, settled, clock=self.clock)

    # -- policies -----------------------------------------------------

    def set_policy(self, policy: policies_mod.Policy, *, operator: bool) -> None:
        """Put a policy and apply it to every entity now (imports, recovery)."""
        if self.policies_paused:
            (self.operator_policies if operator else self.policies)[policy.name] = policy
            self.on_definitions_changed(changes.policy_change(self.name, policy, operator=operator))
            return
        self.change_policy(policy.name, policy, operator=operator).run()

    def delete_policy(self, name: str, *, operator: bool) -> bool:
        """Delete a policy and apply that now; False if there was none."""
        if name not in (self.operator_policies if operator else self.policies):
            return False
        self.change_policy(name, None, operator=operator).run()
        return True

    def pause_policies(self) -> None:
        """Store policies without matching them, and declare entities without policies, until
        ``resume_policies``: an import matches every entity once, not once per policy."""
        self.policies_paused = True

    def resume_policies(self) -> policychanges.PolicyChange:
        """Queue the re-evaluation of every entity against both tables; ``run`` it."""
        self.policies_paused = False
        change = policychanges.PolicyChange(self, name="", policy=None, operator=False)
        change.everything = True
        self.policy_changes.append(change)
        change = policychanges.PolicyChange(self, name="", policy=None, operator=True)
        change.everything = True
        self.policy_changes.append(change)
        return change

    def change_policy(
        self, name: str, policy: policies_mod.Policy | None, *, operator: bool
    ) -> policychanges.PolicyChange:
        """A put (or, with ``policy`` None, a delete), queued: ``run`` it, in slices or not.

        POL-7: every entity is re-evaluated; the change is installed when all are.
        """
        change = policychanges.PolicyChange(self, name=name, policy=policy, operator=operator)
        self.policy_changes.append(change)
        return change

    def begin_queue_match(
        self,
        name: str,
        *,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
        default_type: bool = False,
    ) -> PolicyMatch | None:
        """The policy search a ``declare_queue`` of a new queue would run, to be advanced in
        slices and passed back as ``matched``; None when there is nothing to search (the queue
        exists, the vhost has no policy, or an import has paused matching).

        An empty ``name`` gets its generated name here, so the search is of the name the queue
        will have.
        """
        if self.policies_paused or name in self.queues:
            return None
        if not self.policies and not self.operator_policies:
            return None
        generated = not name
        arguments = dict(arguments or {})
        if default_type:
            arguments = queuedeclares.typed_arguments(
                self.default_queue_type, arguments, None, durable=durable, exclusive=exclusive,
                auto_delete=auto_delete, generated=generated,
            )  # fmt: skip
        kind = policies_mod.queue_kind(quorum.is_quorum(arguments), streamargs.is_stream(arguments))
        if generated:
            name = generated_queue_name()
        return PolicyMatch(name, kind, self.policies, self.operator_policies)

    def begin_exchange_match(self, name: str) -> PolicyMatch | None:
        """As ``begin_queue_match``, for ``declare_exchange`` (user policies only)."""
        if self.policies_paused or not self.policies or name in self.exchanges:
            return None
        if not name or name.startswith("amq."):
            return None  # refused by the declare, or the default exchange: nothing to match
        return PolicyMatch(name, "exchange", self.policies, None)

    def _include_in_policy_changes(self, entity: Queue | Exchange) -> None:
        for change in self.policy_changes:
            change.include(entity)

    def _apply_queue_policy(self, queue: Queue, matched: PolicyMatch | None = None) -> None:
        if self.policies_paused:
            return
        kind = policies_mod.queue_kind(queue.quorum, streamargs.is_stream(queue.arguments))
        if matched is not None and matched.done and matched.current(kind):
            queue.policy, queue.operator_policy = matched.policy, matched.operator_policy
            policies_mod.settle_queue(queue, clock=self.clock)
            return
        policies_mod.apply_to_queue(
            queue,
            policies=self.policies.values(),
            operator_policies=self.operator_policies.values(),
            clock=self.clock,
        )

    def _apply_exchange_policy(
        self, exchange: Exchange, matched: PolicyMatch | None = None
    ) -> None:
        if self.policies_paused:
            return
        if matched is not None and matched.done and matched.current("exchange"):
            policies_mod.install_on_exchange(exchange, matched.policy)
            return
        policies_mod.apply_to_exchange(exchange, policies=self.policies.values())

    # -- timers -------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Head expiry (TTL-3) and queue expiry (EXP-2); the server calls this often."""
        for queue in list(self.queues.values()):
            if queue.ready_count and queue.expire_head(now_ms) and queue.consumers:
                queue.drain(now_ms)
            expires = queue.settings.expires
            if (
                expires is not None
                and not queue.consumers
                and now_ms - queue.last_used_ms >= expires
            ):
                log.info("queue '%s' in vhost '%s' expired", queue.name, self.name)
                self.remove_queue(queue)
