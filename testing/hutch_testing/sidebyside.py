"""One broker under a side-by-side scenario: names, connections, HTTP and clean-up.

Why: the side-by-side suite runs the same pika steps on the session's RabbitMQ 3.10.8 node (shared
by every test) and on a fresh hutch-broker. A `Target` gives each test names of its own (so tests
never see each other's queues on the shared node), tracks the connections it opens, and removes its
queues, exchanges and policies afterwards, so the shared node stays clean.
"""

from __future__ import annotations

import contextlib
import re
import secrets
from typing import Protocol, TypeVar, Unpack

from hutch_demo.management import Management, quote
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import AMQPError

from hutch_testing import differences
from hutch_testing.clients import ConnectOptions, connect

T = TypeVar("T")


class SideBroker(Protocol):
    """A broker a Target drives: over AMQP on loopback and over its management API."""

    @property
    def amqp_port(self) -> int: ...

    @property
    def http_url(self) -> str: ...

    @property
    def credentials(self) -> tuple[str, str]: ...


class Target:
    def __init__(self, kind: str, broker: SideBroker, test_name: str) -> None:
        self.kind = kind
        self.broker = broker
        self.api = Management(broker)
        slug = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")[-24:]
        self.prefix = f"sbs-{slug}-{secrets.token_hex(3)}-"
        self._connections: list[BlockingConnection] = []
        self._connection: BlockingConnection | None = None

    def __repr__(self) -> str:
        return f"<Target {self.kind} {self.prefix}*>"

    def name(self, suffix: str) -> str:
        """A queue, exchange or policy name private to this test."""
        return self.prefix + suffix

    def anchored(self, *suffixes: str) -> str:
        """A policy pattern matching exactly these names."""
        return "^(" + "|".join(re.escape(self.name(suffix)) for suffix in suffixes) + ")$"

    # -- AMQP --------------------------------------------------------------------------------

    def connect(self, **kwargs: Unpack[ConnectOptions]) -> BlockingConnection:
        connection = connect(self.broker, **kwargs)
        self._connections.append(connection)
        return connection

    @property
    def connection(self) -> BlockingConnection:
        """One connection shared by the test's plain channels."""
        if self._connection is None or not self._connection.is_open:
            self._connection = self.connect()
        return self._connection

    def channel(self, *, confirm: bool = True) -> BlockingChannel:
        """A channel on the shared connection, in confirm mode unless ``confirm=False``.

        Confirms make "published" mean "enqueued" on both brokers: RabbitMQ answers a passive
        queue.declare (a prioritised `stat` call) before it has processed earlier unconfirmed
        publishes, so counts read right after them would race.
        """
        channel = self.connection.channel()
        if confirm:
            channel.confirm_delivery()
        return channel

    # -- differences ---------------------------------------------------------------------------

    def expect(self, key: str, *, hutch: T, rabbitmq: T) -> T:
        """This broker's value for a documented difference (see `differences.DIFFERENCES`)."""
        return differences.expect(self.kind, key, hutch=hutch, rabbitmq=rabbitmq)

    @property
    def is_hutch(self) -> bool:
        return self.kind == differences.HUTCH

    # -- clean-up ------------------------------------------------------------------------------

    def cleanup(self) -> None:
        for connection in self._connections:
            with contextlib.suppress(AMQPError):  # the broker may have closed it meanwhile
                if connection.is_open:
                    connection.close()
        for kind in ("policies", "operator-policies"):
            self._delete_matching(f"/{kind}/%2F", f"/{kind}/%2F/")
        self._delete_matching("/queues/%2F", "/queues/%2F/")
        self._delete_matching("/exchanges/%2F", "/exchanges/%2F/")

    def _delete_matching(self, listing: str, item: str) -> None:
        response = self.api.get(listing)
        for entry in response.body if isinstance(response.body, list) else []:
            name = entry.get("name", "")
            if name.startswith(self.prefix):
                self.api.delete(item + quote(name))
