"""Repeated publishes taken as runs (``events.PublishRun``) do exactly what they did one at a time.

Why: the session takes a read's repeated publishes (the same channel, exchange, routing key and
flags) as one event and ``publishing.publish_run`` makes the exchange's checks once for the run
(docs/bench/profile.md); whatever it does not take goes back to the protocol
(``Connection.unread``) to be read again. Each case runs the same frames through two sessions,
one reading runs and one reading a publish at a time (``Connection.publish_runs`` off), fed
whole and fed in pieces that cut the runs anywhere, and the two must agree on every byte the
client gets (confirms, returns, deliveries, channel closes), every message in every queue and
every counter, at each step: a message refused in the middle of a run (its channel closes and
the rest is dropped, as after any channel error), a run whose exchange is refused, a change of
properties, confirms, mandatory returns, a transaction, reply-to flags and direct replies,
a queue under flow pressure in the middle of a run (the connection stops there), a memory
alarm (the connection blocks on the run's first message), and routing parked over loop turns.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from hutch_broker.dispatch import flow, publishing
from hutch_broker.dispatch.context import Context
from hutch_broker.dispatch.sessions import Session
from hutch_broker.model.broker import Broker
from hutch_broker.protocol import connection as proto_connection
from hutch_broker.protocol import events
from hutch_testing import inmemory
from pamqp import base, body, commands, frame, header

# 127 words, none 'z': matches no binding of "t" (each ends in 'z'), after ~35,000 trie steps.
EXPENSIVE_KEY = ".".join(["a"] * 127)


class Alarms:
    publishing_blocked = False


class World:
    """One connection over a broker with queues "q" and "q2", a direct exchange "d" routing "k"
    to both, an internal exchange "i" and a topic exchange "t" of 2,187 bindings."""

    def __init__(self, *, runs: bool) -> None:
        broker = Broker()
        broker.create_defaults()
        self.alarms = Alarms()
        self.context = Context(broker, clock=lambda: 1_000, alarms=self.alarms)
        self.proto = proto_connection.Connection(server_properties={"product": "Hutch"})
        self.session = Session(self.context, self.proto, peer_host="127.0.0.1")
        self.proto.publish_runs = runs
        self.session.handle_data(inmemory.handshake_frames())
        self.send(commands.Channel.Open())
        self.send(commands.Channel.Open(), 2)
        self.send(commands.Queue.Declare(queue="q"))
        self.send(commands.Queue.Declare(queue="q2"))
        self.send(commands.Exchange.Declare(exchange="d", exchange_type="direct"))
        self.send(commands.Queue.Bind(queue="q", exchange="d", routing_key="k"))
        self.send(commands.Queue.Bind(queue="q2", exchange="d", routing_key="k"))
        self.send(commands.Exchange.Declare(exchange="i", exchange_type="direct", internal=True))
        self.send(commands.Exchange.Declare(exchange="t", exchange_type="topic"))
        vhost = broker.vhosts["/"]
        for words in itertools.product("a*#", repeat=7):
            vhost.bind("t", vhost.queues["q2"], ".".join([*words, "z"]))
        self.proto.data_to_send()

    def send(self, method: base.Frame, channel: int = 1) -> None:
        self.session.handle_data(frame.marshal(method, channel))

    def feed(self, data: bytes, piece: int) -> None:
        for start in range(0, len(data), piece):
            self.session.handle_data(data[start : start + piece])

    def state(self) -> dict[str, Any]:
        self.context.commits.release()  # the turn's end: confirms without a sync go out
        vhost = self.context.broker.vhosts["/"]
        session = self.session
        return {
            "written": b"".join(self.proto.data_to_send()),
            "queues": {
                name: [(e.message.body, e.message.raw_properties) for e in q.ready_entries()]
                for name, q in sorted(vhost.queues.items())
            },
            "session": (
                session.publishes,
                session.closed,
                session.blocked,
                session.throttled,
                session.parked,
                sorted(session.channels),
            ),
            "stats": (self.context.stats.publishes, self.context.ingress_bytes),
        }


def publish(
    exchange: str,
    key: str,
    payload: bytes,
    *,
    mandatory: bool = False,
    channel: int = 1,
    **properties: Any,
) -> bytes:
    method = commands.Basic.Publish(exchange=exchange, routing_key=key, mandatory=mandatory)
    props = commands.Basic.Properties(**properties)
    return (
        frame.marshal(method, channel)
        + frame.marshal(header.ContentHeader(0, len(payload), props), channel)
        + frame.marshal(body.ContentBody(payload), channel)
    )


def repeats(count: int, exchange: str = "", key: str = "q", **kwargs: Any) -> bytes:
    return b"".join(publish(exchange, key, b"m%03d" % n, **kwargs) for n in range(count))


def with_odd_one(count: int, odd: int, **odd_properties: Any) -> bytes:
    """``count`` repeats to "q", message ``odd`` with other properties."""
    return b"".join(
        publish("", "q", b"m%03d" % n, **(odd_properties if n == odd else {})) for n in range(count)
    )


Step = Callable[[World], None]


def confirm(world: World) -> None:
    world.send(commands.Confirm.Select())


def transaction(world: World) -> None:
    world.send(commands.Tx.Select())


def commit(world: World) -> None:
    world.send(commands.Tx.Commit())


def consumer_without_room(world: World) -> None:
    world.send(commands.Basic.Qos(prefetch_count=1), 2)
    world.send(commands.Basic.Consume(queue="q", consumer_tag="c"), 2)


def seen_before(**properties: Any) -> Step:
    """The odd message's properties read once already (on channel 3, which it closes), so
    that in the run on channel 1 it is a repeat the run takes, not the end of the run."""

    def step(world: World) -> None:
        world.send(commands.Channel.Open(), 3)
        world.session.handle_data(publish("", "q", b"x", channel=3, **properties))
        world.send(commands.Channel.CloseOk(), 3)

    return step


def wide_fanout(world: World) -> None:
    """Exchange "f" to 700 queues: each publish is 5,600 steps of enqueueing, past a turn's
    5,000, so each one parks (a topic's expensive route is cached after its first)."""
    world.send(commands.Exchange.Declare(exchange="f", exchange_type="fanout"))
    vhost = world.context.broker.vhosts["/"]
    for n in range(700):
        queue, _ = vhost.declare_queue(f"w{n}", durable=False)
        vhost.bind("f", queue, "")


def topic_write(pattern: str) -> Step:
    """guest may publish to topic exchange "t" with routing keys matching ``pattern`` only."""

    def step(world: World) -> None:
        world.context.broker.set_topic_permission("/", "guest", "t", pattern, ".*")

    return step


def more(data: bytes) -> Step:
    def step(world: World) -> None:
        world.session.handle_data(data)

    return step


def hot(world: World) -> None:
    """One publish like the case's: its channel expects repeats, which then come as a run."""
    world.session.handle_data(publish("", "q", b"first"))


def alarm(world: World) -> None:
    world.alarms.publishing_blocked = True


def alarm_clears(world: World) -> None:
    world.alarms.publishing_blocked = False
    world.session.unblock()


def pressure_ends(world: World) -> None:
    world.session.release()


def turns_end(world: World) -> None:
    for _ in range(2000):
        if not world.context.turns.parked:
            break
        world.context.turns.end_of_turn()


CASES: dict[str, tuple[list[Step], bytes, list[Step]]] = {
    "plain": ([], repeats(60), []),
    "confirms": ([confirm], repeats(60), []),
    "a waiting consumer": ([consumer_without_room], repeats(30), []),
    "mandatory, unroutable": ([confirm], repeats(20, key="nowhere", mandatory=True), []),
    "two queues": ([confirm], repeats(20, "d", "k"), []),
    "properties change": (
        [],
        repeats(10) + repeats(10, expiration="60000") + repeats(10, delivery_mode=2),
        [],
    ),
    "a wrong user_id in the middle": (
        [seen_before(user_id="other"), confirm],
        with_odd_one(30, 12, user_id="other"),
        [],
    ),
    "a bad expiration in the middle": (
        [seen_before(expiration="soon")],
        with_odd_one(30, 7, expiration="soon"),
        [],
    ),
    "a new user_id in the middle": ([confirm], with_odd_one(30, 12, user_id="other"), []),
    "a reply-to in the middle": ([], with_odd_one(30, 5, reply_to="answers"), []),
    "no such exchange": ([], repeats(20, "nope", "k") + repeats(5), []),
    "an internal exchange": ([], repeats(20, "i", "k"), []),
    "direct replies": ([], repeats(20, "", "amq.rabbitmq.reply-to.abc"), []),
    "a transaction": ([transaction], repeats(20) + repeats(5, "d", "k"), [commit]),
    "topic permissions": (
        [topic_write("^ok[.]")],
        repeats(10, "t", "ok.key") + repeats(10, "t", "no.key"),
        [],
    ),
    "topic permission revoked between reads": (
        [topic_write("^ok[.]")],
        repeats(10, "t", "ok.key"),
        [topic_write("^none$"), more(repeats(10, "t", "ok.key"))],
    ),
    "an alarm": ([alarm], repeats(20), [alarm_clears]),
    "an alarm on a hot channel": ([hot, alarm], repeats(20), [alarm_clears]),
    "enqueueing parked": ([wide_fanout, confirm], repeats(5, "f", "x") + repeats(3), [turns_end]),
    "routing parked": (
        [confirm],
        repeats(4, "t", EXPENSIVE_KEY, mandatory=True) + repeats(6),
        [turns_end],
    ),
}


def life(case: str, *, runs: bool, piece: int) -> list[dict[str, Any]]:
    before, data, after = CASES[case]
    world = World(runs=runs)
    for step in before:
        step(world)
    world.proto.data_to_send()
    world.feed(data, piece)
    states = [world.state()]
    for step in after:
        step(world)
        states.append(world.state())
    return states


@pytest.mark.parametrize(
    "piece", [1 << 20, 997, 61], ids=["whole", "997-byte reads", "61-byte reads"]
)
@pytest.mark.parametrize("case", list(CASES))
def test_runs_do_what_one_at_a_time_does(case: str, piece: int) -> None:
    assert life(case, runs=True, piece=piece) == life(case, runs=False, piece=piece)


def test_the_cases_read_runs_and_stop_where_they_should(monkeypatch) -> None:
    """The comparison above proves something only if runs were read, and stopped early."""
    seen: list[tuple[int, int | None]] = []  # (messages in the run, taken; None: refused)
    inner = publishing.publish_run

    def counted(session: Any, channel: Any, run: events.PublishRun, now_ms: int) -> int:
        try:
            taken = inner(session, channel, run, now_ms)
        except Exception:
            seen.append((len(run.raws), None))
            raise
        seen.append((len(run.raws), taken))
        return taken

    monkeypatch.setattr("hutch_broker.dispatch.methods.publish_run", counted)
    life("plain", runs=True, piece=1 << 20)
    assert seen == [(59, 59)], "the first publish sets the channel hot; the 59 after are one run"
    seen.clear()
    life("a wrong user_id in the middle", runs=True, piece=1 << 20)
    assert seen[0] == (29, None), "the odd one was in the run, and refused there"
    seen.clear()
    life("enqueueing parked", runs=True, piece=1 << 20)
    assert seen[:3] == [(4, 1), (3, 1), (2, 1)], "each one parks, the rest given back"
    seen.clear()
    life("an alarm on a hot channel", runs=True, piece=1 << 20)
    assert seen == [(19, 19)], "blocked on the run's first, which is held; the rest read again"


def test_pressure_in_the_middle_of_a_run_stops_it_there(monkeypatch) -> None:
    """A queue over the high-water mark with a consumer throttles the publisher after the
    publish that put it there, as one at a time; the rest are read once it is released."""
    monkeypatch.setattr(flow, "HIGH_WATER", 10)
    monkeypatch.setattr(publishing, "HIGH_WATER", 10)
    flagged = repeats(40, reply_to="answers")  # each through publish itself, in the run
    monkeypatch.setitem(CASES, "pressure", ([consumer_without_room], repeats(40), [pressure_ends]))
    monkeypatch.setitem(CASES, "flagged", ([consumer_without_room], flagged, [pressure_ends]))
    assert life("flagged", runs=True, piece=1 << 20) == life("flagged", runs=False, piece=1 << 20)
    with_runs = life("pressure", runs=True, piece=1 << 20)
    assert with_runs == life("pressure", runs=False, piece=1 << 20)
    throttled, released = with_runs
    assert throttled["session"][3], "throttled"
    # One delivered to the consumer, then the 11th ready one past the mark of 10: the last taken.
    assert throttled["session"][0] == 12 and len(throttled["queues"]["q"]) == 11
    assert released["session"][0] == 13, "released, it reads on: the next one is pressure again"


def test_unread_gives_back_exactly_the_rest() -> None:
    """At every point of a run: what is given back is read again, in order, and nothing else."""
    data = repeats(1) + repeats(12)
    for taken in range(13):
        world = World(runs=True)
        proto = world.proto
        proto.receive_data(data)
        first = proto.next_event()
        assert isinstance(first, events.PublishReceived)
        world.session.handle_event(first)  # the channel's first publish: now it is hot
        run = proto.next_event()
        assert isinstance(run, events.PublishRun) and len(run.raws) == 12
        proto.unread(run, taken)
        rest: list[bytes] = []
        while (event := proto.next_event()) is not proto_connection.NEED_DATA:
            if isinstance(event, events.PublishRun):
                rest.extend(event.bodies)
            else:
                assert isinstance(event, events.PublishReceived)
                rest.append(event.body)
        assert rest == run.bodies[taken:]
        with pytest.raises(RuntimeError):
            proto.unread(run, 0)  # read past it since: too late


def test_a_run_is_refused_where_its_first_publish_would_be() -> None:
    """The exchange's checks are made once a run, and a refusal there is the run's first
    message's: the channel closes with it (403 for a topic permission taken away between
    two reads) and nothing of the run reaches a queue."""
    first, _, refused = life("topic permission revoked between reads", runs=True, piece=1 << 20)
    assert first["session"][0] == 10 and len(first["queues"]["q2"]) == 0  # "t": no match
    assert refused["session"][0] == 10, "no publish of the second read was taken"
    assert 1 not in refused["session"][5], "channel 1 closed"
    closes = [
        reply
        for reply in inmemory.decode_frames(refused["written"])
        if isinstance(reply, commands.Channel.Close)
    ]
    assert [close.reply_code for close in closes] == [403]
