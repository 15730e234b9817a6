"""A declare whose policy matching is expensive parks its connection and keeps AMQP's order.

In memory, with the server's end of turn called by hand.  The vhost has policies whose
patterns have exponential DFAs (each 255-character name costs milliseconds per policy, the
bounded cache thrashes): a queue.declare used to match them all inside the method.  Now it
parks its connection: nothing after it is processed until its search is done, each end of turn
advances the search by a bounded slice, and the declare-ok (or the error) comes once it is done,
in order, with the policy that is the best match.
"""

import random

from hutch_broker.dispatch import declares, turns
from hutch_broker.dispatch.context import Context
from hutch_broker.dispatch.sessions import Session
from hutch_broker.model import automata, vhosts
from hutch_broker.model.broker import Broker
from hutch_broker.model.policies import Policy
from hutch_broker.protocol import connection as proto_connection
from hutch_testing import inmemory
from pamqp import commands, frame

# Each matches no name below (none has a 'c'...'f'), after a search that thrashes its DFA cache.
EXPENSIVE = [
    f"(a|b)*a(a|b){{{240 - i}}}c|(a|b)*b(a|b){{{240 - i}}}d|(a|b)*a(a|b){{{230 - i}}}e"
    for i in range(4)
]


def long_name(seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("ab") for _ in range(255))


class Client:
    def __init__(self, context: Context, vhost: str = "/") -> None:
        self.context = context
        self.proto = proto_connection.Connection(server_properties={"product": "Hutch"})
        self.session = Session(context, self.proto, peer_host="127.0.0.1")
        self.session.handle_data(inmemory.handshake_frames(vhost=vhost))
        self.send(commands.Channel.Open())
        self.replies()

    def send(self, method: object, channel: int = 1) -> None:
        self.session.handle_data(frame.marshal(method, channel))

    def replies(self) -> list[object]:
        return inmemory.decode_frames(b"".join(self.proto.data_to_send()))


def setup() -> tuple[Broker, Context]:
    broker = Broker()
    broker.create_defaults()
    broker.add_vhost("quiet")
    broker.set_permission("quiet", "guest", ".*", ".*", ".*")
    context = Context(broker, clock=lambda: 0, request_flush=lambda: None)
    vhost = broker.vhosts["/"]
    for index, pattern in enumerate(EXPENSIVE):
        policy = Policy("/", f"slow{index}", pattern, {"max-length": 1}, priority=10 + index)
        vhost.set_policy(policy, operator=False)
    vhost.set_policy(Policy("/", "cheap", "^[ab]", {"max-length": 7}), operator=False)
    vhost.set_policy(Policy("/", "slow-op", EXPENSIVE[0], {"max-length": 2}), operator=True)
    vhost.set_policy(Policy("/", "op", "b", {"max-length": 5}), operator=True)
    return broker, context


def run_turns(context: Context, session: Session) -> int:
    taken = 0
    while session.parked:
        context.turns.end_of_turn()
        taken += 1
        assert taken < 10_000
    return taken


def test_an_expensive_declare_parks_and_completes_over_turns_in_order():
    broker, context = setup()
    client = Client(context)
    quiet = Client(context, "quiet")
    vhost = broker.vhosts["/"]
    first, second = long_name(1), long_name(2)

    client.session.handle_data(
        frame.marshal(commands.Queue.Declare(queue=first), 1)
        + frame.marshal(commands.Queue.Declare(queue=second), 1)
        + frame.marshal(commands.Exchange.Declare(exchange=first[:127], exchange_type="fanout"), 1)
    )

    assert client.session.parked
    assert client.replies() == [], "no declare-ok before the search is done"
    assert first not in vhost.queues
    assert second not in vhost.queues, "the declare after the parked one waits its turn"
    job = context.turns.parked[0]
    assert isinstance(job, declares.ParkedDeclare)

    # Another connection, in another vhost, runs between the slices.
    quiet.send(commands.Queue.Declare(queue="canary"))
    assert [type(r).__name__ for r in quiet.replies()] == ["DeclareOk"]

    # Each slice is bounded: the turn's allowance, plus at most one uncached DFA step.
    one_step = automata.STEP_UNITS + automata.INSTRUCTION_UNITS * 3 * 1000 + 100
    bound = turns.TURN_STEPS * declares.UNITS_PER_STEP + one_step
    slices = 0
    while isinstance(job, declares.ParkedDeclare) and job in context.turns.parked:
        match = job.match
        assert match is not None
        before = match.taken
        context.turns.end_of_turn()
        assert match.taken - before <= bound
        slices += 1
        assert slices < 10_000
    assert slices >= 10, "the search was spread over many turns"
    taken = run_turns(context, client.session)
    assert taken >= 10

    replies = client.replies()
    assert [type(r).__name__ for r in replies] == ["DeclareOk", "DeclareOk", "DeclareOk"]
    assert [replies[0].queue, replies[1].queue] == [first, second]
    for name in (first, second):
        queue = vhost.queues[name]
        assert queue.policy is not None and queue.policy.name == "cheap"
        assert queue.operator_policy is not None and queue.operator_policy.name == "op"
        assert queue.settings.max_length == 5  # the lower of the two limits
    assert vhost.exchanges[first[:127]].policy_name == "cheap"
    assert not context.turns.parked


def test_an_error_after_a_parked_search_closes_the_channel_as_before():
    broker, context = setup()
    client = Client(context)
    name = long_name(3)
    bad = commands.Queue.Declare(queue=name, arguments={"x-max-length": "many"})
    client.session.handle_data(
        frame.marshal(bad, 1) + frame.marshal(commands.Queue.Declare(queue="after"), 1)
    )
    assert client.session.parked
    assert client.replies() == []

    run_turns(context, client.session)

    replies = client.replies()
    assert isinstance(replies[0], commands.Channel.Close)
    assert replies[0].reply_code == 406
    assert (replies[0].class_id, replies[0].method_id) == (50, 10)  # queue.declare
    assert name not in broker.vhosts["/"].queues
    assert "after" not in broker.vhosts["/"].queues  # sent on the closed channel: ignored


def test_a_policy_change_installed_while_parked_restarts_the_search():
    broker, context = setup()
    client = Client(context)
    vhost = broker.vhosts["/"]
    name = long_name(4)
    client.send(commands.Queue.Declare(queue=name))
    job = context.turns.parked[0]
    assert isinstance(job, declares.ParkedDeclare)
    context.turns.end_of_turn()
    vhost.set_policy(Policy("/", "best", "a", {"max-length": 3}, priority=99), operator=False)

    run_turns(context, client.session)

    assert job.restarts == 1
    assert vhost.queues[name].policy is not None
    assert vhost.queues[name].policy.name == "best"
    assert [type(r).__name__ for r in client.replies()] == ["DeclareOk"]


def test_a_cheap_declare_never_parks_even_when_the_turn_is_spent():
    broker, context = setup()
    quiet = broker.vhosts["quiet"]
    for index in range(5):
        quiet.set_policy(Policy("quiet", f"p{index}", f"^orders-{index}", {}), operator=False)
    quiet.set_policy(Policy("quiet", "ops", "^orders", {"max-length": 9}), operator=True)
    client = Client(context, "quiet")
    context.turns.meter.left = 0  # another connection spent this turn's allowance
    for index in range(20):
        client.send(commands.Queue.Declare(queue=f"orders-{index % 5}-{index}"))
    assert not client.session.parked
    assert [type(r).__name__ for r in client.replies()] == ["DeclareOk"] * 20
    assert quiet.queues["orders-3-8"].policy is not None
    assert quiet.queues["orders-3-8"].policy.name == "p3"
    # Each was topped up to the floor, and ran over it by at most one plain ``re`` search.
    assert context.turns.meter.left > -turns.FLOOR


def test_a_connection_closed_while_parked_declares_nothing():
    broker, context = setup()
    client = Client(context)
    name = long_name(5)
    client.send(commands.Queue.Declare(queue=name))
    assert client.session.parked
    client.session.connection_lost()

    context.turns.end_of_turn()

    assert not context.turns.parked
    assert name not in broker.vhosts["/"].queues


def bound_client(bindings: int) -> tuple[Broker, Context, Client]:
    broker = Broker()
    broker.create_defaults()
    context = Context(broker, clock=lambda: 0, request_flush=lambda: None)
    client = Client(context)
    client.send(commands.Exchange.Declare(exchange="t", exchange_type="topic"))
    client.send(commands.Queue.Declare(queue="q"))
    vhost = broker.vhosts["/"]
    for index in range(bindings):
        vhost.bind("t", vhost.queues["q"], f"a.{index}.#")
    client.replies()
    return broker, context, client


def test_an_exchange_delete_of_thousands_of_bindings_parks_and_keeps_order():
    broker, context, client = bound_client(3000)
    vhost = broker.vhosts["/"]
    exchange = vhost.exchanges["t"]
    client.session.handle_data(
        frame.marshal(commands.Exchange.Delete(exchange="t"), 1)
        + frame.marshal(commands.Queue.Declare(queue="after"), 1)
    )
    assert client.session.parked
    assert client.replies() == []
    assert "t" in vhost.exchanges, "the exchange stays, and routes, until it is deleted"
    assert "after" not in vhost.queues

    removed = []
    while client.session.parked:
        before = len(exchange.bindings)
        context.turns.end_of_turn()
        removed.append(before - len(exchange.bindings))
        assert len(removed) < 1000
    assert len(removed) >= 5, "the bindings were removed over several turns"
    assert max(removed) <= turns.TURN_STEPS // vhosts.UNLINK_STEPS + 1

    assert [type(r).__name__ for r in client.replies()] == ["DeleteOk", "DeclareOk"]
    assert "t" not in vhost.exchanges
    assert vhost.queues["q"].incoming == {}


def test_a_queue_delete_of_thousands_of_bindings_parks_and_answers_its_count():
    broker, context, client = bound_client(3000)
    vhost = broker.vhosts["/"]
    client.send(commands.Queue.Delete(queue="q"))
    assert client.session.parked
    run_turns(context, client.session)
    replies = client.replies()
    assert [type(r).__name__ for r in replies] == ["DeleteOk"]
    assert replies[0].message_count == 0
    assert "q" not in vhost.queues
    assert vhost.exchanges["t"].bindings == {}


def test_a_refused_queue_delete_changes_nothing():
    broker, _context, client = bound_client(3000)
    vhost = broker.vhosts["/"]
    client.send(commands.Basic.Consume(queue="q"))
    client.replies()
    client.send(commands.Queue.Delete(queue="q", if_unused=True))
    assert not client.session.parked
    replies = client.replies()
    assert isinstance(replies[0], commands.Channel.Close) and replies[0].reply_code == 406
    assert len(vhost.queues["q"].incoming) == 3000
