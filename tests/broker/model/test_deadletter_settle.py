"""A dead letter deferred to later loop turns keeps its original until it is delivered.

Routing a dead letter to an expensive dead-letter exchange is metered: what does not fit in
the turn waits in the vhost's backlog (``model.deadletter``).  The durability contract says
dead-lettering is at least once across a crash, never lost: the group commit writes a moved
message's copy before the ack of its original.  A deferred dead letter has no copy yet, so
the original's record must stay live until the dead letter is in its new queue.  Here the
store is real (segments on disk), the session and the turns are driven in memory, and a
"crash" is the store closed after a group commit and opened again from its files.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from hutch_broker.dispatch.context import Context
from hutch_broker.dispatch.sessions import Session
from hutch_broker.model.broker import Broker
from hutch_broker.protocol import connection as proto_connection
from hutch_broker.store.messages import MessageStore
from hutch_testing import inmemory
from pamqp import body, commands, frame, header

# 127 words, none 'z': matches no binding of 't' but '#' (each other one ends in 'z'), after
# tens of thousands of trie steps, far more than one loop turn allows.
EXPENSIVE_KEY = ".".join(["a"] * 127)


class Client:
    """One in-memory AMQP connection to an in-memory broker whose 'src' queue has a real log."""

    def __init__(self, data_dir: Path) -> None:
        self.broker = Broker()
        self.broker.create_defaults()
        self.context = Context(self.broker, clock=lambda: 0, request_flush=lambda: None)
        self.proto = proto_connection.Connection(server_properties={"product": "Hutch"})
        self.session = Session(self.context, self.proto, peer_host="127.0.0.1")
        self.session.handle_data(inmemory.handshake_frames())
        self.send(commands.Channel.Open())
        self.send(commands.Exchange.Declare(exchange="t", exchange_type="topic"))
        self.send(commands.Queue.Declare(queue="never"))
        self.send(commands.Queue.Declare(queue="dlq", durable=True))
        self.send(commands.Queue.Bind(queue="dlq", exchange="t", routing_key="#"))
        arguments = {"x-dead-letter-exchange": "t", "x-dead-letter-routing-key": EXPENSIVE_KEY}
        self.send(commands.Queue.Declare(queue="src", durable=True, arguments=arguments))
        self.vhost = self.broker.vhosts["/"]
        for words in itertools.product("a*#", repeat=7):  # 2,187 bindings, all ending in 'z'
            self.vhost.bind("t", self.vhost.queues["never"], ".".join([*words, "z"]))
        self.store = MessageStore(data_dir)
        for name in ("src", "dlq"):
            self.vhost.queues[name].store = self.store.open_queue("/", name)
        self.replies()

    def send(self, method: object) -> None:
        self.session.handle_data(frame.marshal(method, 1))

    def publish_persistent(self, queue: str, payload: bytes) -> None:
        method = commands.Basic.Publish(exchange="", routing_key=queue)
        properties = commands.Basic.Properties(delivery_mode=2)
        self.session.handle_data(
            frame.marshal(method, 1)
            + frame.marshal(header.ContentHeader(0, len(payload), properties), 1)
            + frame.marshal(body.ContentBody(payload), 1)
        )

    def replies(self) -> list[object]:
        return inmemory.decode_frames(b"".join(self.proto.data_to_send()))


def recovered(data_dir: Path) -> dict[str, int]:
    """How many live records each queue's log holds, as a restart would find them."""
    store = MessageStore(data_dir)
    try:
        return {name: len(store.open_queue("/", name).recover()) for name in ("src", "dlq")}
    finally:
        store.close()


def test_a_deferred_dead_letter_keeps_its_original_until_it_is_delivered(tmp_path: Path) -> None:
    client = Client(tmp_path)
    client.publish_persistent("src", b"dying")
    client.send(commands.Basic.Get(queue="src"))
    client.replies()
    client.send(commands.Basic.Reject(delivery_tag=1, requeue=False))
    assert client.vhost.backlog.jobs, "the dead letter should not fit in one turn"

    client.store.sync()  # a group commit while the dead letter waits for its turn
    client.store.close()  # ... then the broker dies
    assert recovered(tmp_path) == {"src": 1, "dlq": 0}  # back in its queue, not lost


def test_the_original_is_acked_once_the_deferred_dead_letter_is_delivered(tmp_path: Path) -> None:
    client = Client(tmp_path)
    client.publish_persistent("src", b"dying")
    client.send(commands.Basic.Get(queue="src"))
    client.replies()
    client.send(commands.Basic.Reject(delivery_tag=1, requeue=False))
    turns = 0
    while client.vhost.backlog.jobs:
        client.context.turns.end_of_turn()
        turns += 1
        assert turns < 1000
    assert turns >= 2
    assert client.vhost.queues["dlq"].ready_count == 1

    client.store.sync()
    client.store.close()
    assert recovered(tmp_path) == {"src": 0, "dlq": 1}
