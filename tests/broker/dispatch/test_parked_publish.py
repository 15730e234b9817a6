"""A publish routed over several loop turns keeps AMQP's order, returns and confirms.

In memory, with the server's end of turn called by hand: an expensive, unroutable,
mandatory publish is followed by a cheap one on the same connection.  The first parks; the
connection must not process the second until the first is routed (publish order, and the
basic.return before either ack, exactly as if routing had been instant), and each end of
turn advances the routing by a bounded slice.
"""

import collections
import itertools

from hutch_broker.dispatch import turns
from hutch_broker.dispatch.context import Context
from hutch_broker.dispatch.sessions import Session
from hutch_broker.model import publishes
from hutch_broker.model.broker import Broker
from hutch_broker.protocol import connection as proto_connection
from hutch_testing import inmemory
from pamqp import body, commands, frame, header

# 127 words, none 'z': matches no binding (each ends in 'z'), after ~35,000 trie steps.
EXPENSIVE_KEY = ".".join(["a"] * 127)


class Client:
    def __init__(self) -> None:
        broker = Broker()
        broker.create_defaults()
        self.requests = 0
        self.context = Context(broker, clock=lambda: 0, request_flush=self._requested)
        self.proto = proto_connection.Connection(server_properties={"product": "Hutch"})
        self.session = Session(self.context, self.proto, peer_host="127.0.0.1")
        self.session.handle_data(inmemory.handshake_frames())
        self.send(commands.Channel.Open())
        self.send(commands.Confirm.Select())
        self.send(commands.Exchange.Declare(exchange="t", exchange_type="topic"))
        self.send(commands.Queue.Declare(queue="q"))
        self.send(commands.Queue.Declare(queue="never"))
        vhost = broker.vhosts["/"]
        for words in itertools.product("a*#", repeat=7):  # 2,187 bindings, all ending in 'z'
            vhost.bind("t", vhost.queues["never"], ".".join([*words, "z"]))
        self.replies()

    def _requested(self) -> None:
        self.requests += 1

    def send(self, method: object, channel: int = 1) -> None:
        self.session.handle_data(frame.marshal(method, channel))

    def publish_frames(
        self, exchange: str, key: str, payload: bytes, *, channel: int = 1, mandatory: bool = False
    ) -> bytes:
        method = commands.Basic.Publish(exchange=exchange, routing_key=key, mandatory=mandatory)
        properties = commands.Basic.Properties()
        return (
            frame.marshal(method, channel)
            + frame.marshal(header.ContentHeader(0, len(payload), properties), channel)
            + frame.marshal(body.ContentBody(payload), channel)
        )

    def replies(self) -> list[object]:
        return inmemory.decode_frames(b"".join(self.proto.data_to_send()))


def confirmed(acks: list) -> set[int]:
    """The delivery tags the acks cover (an ack with ``multiple`` covers all before it)."""
    tags: set[int] = set()
    for ack in acks:
        tags |= set(range(1, ack.delivery_tag + 1)) if ack.multiple else {ack.delivery_tag}
    return tags


def test_an_expensive_publish_parks_its_connection_and_keeps_amqp_order():
    client = Client()
    queue = client.context.broker.vhosts["/"].queues["q"]
    data = client.publish_frames("t", EXPENSIVE_KEY, b"first", mandatory=True)
    data += client.publish_frames("", "q", b"second")

    client.session.handle_data(data)

    assert client.session.parked
    assert client.replies() == []  # no return, no ack yet
    assert queue.ready_count == 0, "the publish after the parked one waits its turn"
    turns_taken = 0
    while client.session.parked:
        client.context.turns.end_of_turn()
        turns_taken += 1
        assert turns_taken < 1000
    assert turns_taken >= 2, "the routing was spread over several turns"
    client.context.commits.release()  # what the server does next in the same end of turn
    replies = client.replies()
    kinds = [type(reply).__name__ for reply in replies]
    assert kinds[:3] == ["Return", "ContentHeader", "ContentBody"]  # returned before its ack
    assert replies[0].reply_code == 312
    assert set(kinds[3:]) == {"Ack"}
    assert confirmed(replies[3:]) == {1, 2}
    assert queue.ready_count == 1
    assert client.context.turns.parked == collections.deque()


def test_cheap_publishes_never_park_even_when_the_turn_is_spent():
    client = Client()
    client.context.turns.meter.left = 0  # another connection spent this turn's allowance
    data = b"".join(client.publish_frames("", "q", b"m%d" % index) for index in range(50))

    client.session.handle_data(data)

    assert not client.session.parked
    client.context.commits.release()
    acks = [reply for reply in client.replies() if isinstance(reply, commands.Basic.Ack)]
    assert confirmed(acks) == set(range(1, 51))
    # Each publish was topped up to the floor and spent a key and one queue's enqueue.
    assert client.context.turns.meter.left == turns.FLOOR - 1 - publishes.ENQUEUE_STEPS


def test_a_connection_closed_while_parked_drops_its_publish_unconfirmed():
    client = Client()
    client.session.handle_data(client.publish_frames("t", EXPENSIVE_KEY, b"first"))
    assert client.session.parked
    client.session.connection_lost()

    client.context.turns.end_of_turn()

    assert not client.context.turns.parked
    assert [r for r in client.replies() if isinstance(r, commands.Basic.Ack)] == []


def test_a_transaction_commit_routes_in_slices_and_keeps_its_order():
    """tx.commit used to route all its publishes in one go: a way around the meter."""
    client = Client()
    client.send(commands.Channel.Open(), 2)
    client.send(commands.Tx.Select(), 2)
    client.replies()
    queue = client.context.broker.vhosts["/"].queues["q"]
    client.session.handle_data(
        client.publish_frames("t", EXPENSIVE_KEY, b"first", channel=2, mandatory=True)
    )
    client.session.handle_data(
        client.publish_frames("", "q", b"second", channel=2)
        + frame.marshal(commands.Tx.Commit(), 2)
        + frame.marshal(commands.Queue.Declare(queue="q", passive=True), 2)
    )

    assert client.session.parked
    assert client.replies() == []
    assert queue.ready_count == 0
    turns_taken = 0
    while client.session.parked:
        client.context.turns.end_of_turn()
        turns_taken += 1
        assert turns_taken < 1000
    kinds = [type(reply).__name__ for reply in client.replies()]
    client.context.commits.release()  # commit-ok waits for the end of turn, as before
    later = [type(reply).__name__ for reply in client.replies()]

    assert turns_taken >= 2
    assert kinds == ["Return", "ContentHeader", "ContentBody", "DeclareOk"]
    assert later == ["CommitOk"]
    assert queue.ready_count == 1


def test_dead_letters_too_expensive_for_the_turn_wait_in_their_vhosts_backlog():
    """A DLX with thousands of topic bindings: dead-lettering happens inside a publish (here
    max-length overflow), which cannot wait, so the routing goes to the vhost's backlog and
    is done over later turns, in order; the publisher itself goes on."""
    client = Client()
    vhost = client.context.broker.vhosts["/"]
    client.send(commands.Queue.Declare(queue="dlq"))
    client.send(commands.Queue.Bind(queue="dlq", exchange="t", routing_key="#"))
    arguments = {
        "x-dead-letter-exchange": "t",
        "x-dead-letter-routing-key": EXPENSIVE_KEY,
        "x-max-length": 0,
    }
    client.send(commands.Queue.Declare(queue="src", arguments=arguments))
    client.replies()
    dlq = vhost.queues["dlq"]

    client.session.handle_data(
        client.publish_frames("", "src", b"one") + client.publish_frames("", "src", b"two")
    )

    assert not client.session.parked
    assert dlq.ready_count == 0
    assert len(vhost.backlog.jobs) >= 1
    turns_taken = 0
    while vhost.backlog.jobs:
        client.context.turns.end_of_turn()
        turns_taken += 1
        assert turns_taken < 1000
    assert turns_taken >= 2
    assert not client.context.turns.parked
    client.replies()
    client.send(commands.Basic.Get(queue="dlq", no_ack=True))
    client.send(commands.Basic.Get(queue="dlq", no_ack=True))
    bodies = [reply.value for reply in client.replies() if isinstance(reply, body.ContentBody)]
    assert bodies == [b"one", b"two"]


def test_a_fanout_to_thousands_of_queues_is_enqueued_over_several_turns():
    """Handing one message to 3,000 queues took tens of milliseconds in one go."""
    client = Client()
    vhost = client.context.broker.vhosts["/"]
    client.send(commands.Exchange.Declare(exchange="f", exchange_type="fanout"))
    queues = [vhost.declare_queue(f"wide{index}")[0] for index in range(3000)]
    for queue in queues:
        vhost.bind("f", queue, "")
    client.replies()

    client.session.handle_data(client.publish_frames("f", "", b"wide"))

    assert client.session.parked
    turns_taken = 0
    while client.session.parked:
        assert sum(queue.ready_count for queue in queues) < 3000
        client.context.turns.end_of_turn()
        turns_taken += 1
        assert turns_taken < 1000
    client.context.commits.release()
    assert turns_taken >= 3
    assert all(queue.ready_count == 1 for queue in queues)
    acks = [reply for reply in client.replies() if isinstance(reply, commands.Basic.Ack)]
    assert confirmed(acks) == {1}


def test_a_dead_letter_to_thousands_of_queues_is_delivered_over_several_turns():
    client = Client()
    vhost = client.context.broker.vhosts["/"]
    client.send(commands.Exchange.Declare(exchange="dlx", exchange_type="fanout"))
    queues = [vhost.declare_queue(f"dead{index}")[0] for index in range(3000)]
    for queue in queues:
        vhost.bind("dlx", queue, "")
    arguments = {"x-dead-letter-exchange": "dlx", "x-max-length": 0}
    client.send(commands.Queue.Declare(queue="src", arguments=arguments))
    client.replies()

    client.session.handle_data(client.publish_frames("", "src", b"gone"))

    assert not client.session.parked
    turns_taken = 0
    while vhost.backlog.jobs:
        assert sum(queue.ready_count for queue in queues) < 3000
        client.context.turns.end_of_turn()
        turns_taken += 1
        assert turns_taken < 1000
    assert turns_taken >= 3
    assert all(queue.ready_count == 1 for queue in queues)


def test_an_error_while_finishing_a_parked_publish_closes_only_its_connection(monkeypatch):
    """As for a publish routed at once: 541 on that connection, the turns go on."""
    client = Client()
    other = Client.__new__(Client)  # a second connection on the same broker and turns
    other.context, other.requests = client.context, 0
    other.proto = proto_connection.Connection(server_properties={"product": "Hutch"})
    other.session = Session(client.context, other.proto, peer_host="127.0.0.1")
    other.session.handle_data(inmemory.handshake_frames())
    other.send(commands.Channel.Open())
    other.replies()
    vhost = client.context.broker.vhosts["/"]
    client.send(commands.Queue.Bind(queue="q", exchange="t", routing_key="#"))
    client.replies()

    def broken(message, now_ms):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(vhost.queues["q"], "publish", broken)
    client.session.handle_data(client.publish_frames("t", EXPENSIVE_KEY, b"first"))
    assert client.session.parked
    while client.session.parked:
        client.context.turns.end_of_turn()

    closes = [r for r in client.replies() if isinstance(r, commands.Connection.Close)]
    assert [close.reply_code for close in closes] == [541]
    other.session.handle_data(other.publish_frames("", "never", b"fine"))
    assert vhost.queues["never"].ready_count == 1
