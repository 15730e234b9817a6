"""Scenario 1's whole path in Python calls per message, as the server runs it.

Why: the benchmark's scenario 1 (one publisher, one queue, one consumer, 1 KiB, no confirms,
a multiple ack every 100 deliveries; bench/scenarios.py) saturates the broker's one loop
thread, so its rate is the reciprocal of this path's CPU (docs/bench/profile.md, "The one-flow
path"). test_publish_calls.py pins the publish on one connection with the test's own stand-ins
for the clock and the alarms; this pins the flow as the server wires it: publisher and consumer
on their own connections, the server's wall clock and its ``ResourceMonitor`` as the alarms
(whose ``publishing_blocked`` every publish reads), and the consumer's acks. Counted, not
timed, so the bar holds on any machine. A change that adds a call per message fails here: win
it back or raise the bar with the reason in this docstring.

The bars (calls per message, 200 publishes in one read, then two acks of 100). Before the
one-flow work: 27.05 for a publish delivered to the waiting consumer, 2.19 for an acked
message. Taken off since: the alarm flag read as a plain attribute (it was a property),
``Session.handle_event``, ``Session.open_vhost``, ``check_permission`` (a set of exchanges
already allowed), ``stamp_reply_to`` (its flag tested first), the delivery mode's three
parser calls (read in place), ``_settle`` and ``FlowControl.under_pressure`` (its first test
inline), ``Queue._deliver`` (inlined for a fresh entry), ``codec.encode_deliver`` (its one
body frame case written out in ``Connection.send_deliver``) and, per acked message,
``Queue._forget`` (called only for an entry with a store record): 15.05 and 1.19; the wall
clock read once a read, at its first publish (``Session._process``): 14.05 and 1.19; a
repeated publish read by one C call from its method frame on (``contentscan.scan_publish``):
13.05 and 1.19; a read's repeated publishes taken as one run (``events.PublishRun``, no
``next_event``, event, ``publish`` or exchange checks a message) and, per acked message, the
drain its ack starts handed to the channel as one run (``Channel.deliver_from``): 10.11 and
0.2, the bars.
"""

from __future__ import annotations

from pathlib import Path

from hutch_broker import memory
from hutch_broker.dispatch.context import Context, wall_clock_ms
from hutch_broker.dispatch.sessions import Session
from hutch_broker.model.broker import Broker
from hutch_broker.protocol import connection as proto_connection
from hutch_broker.server.resources import ResourceMonitor
from hutch_testing import inmemory
from pamqp import body, commands, frame, header

from tests.broker.dispatch.test_publish_calls import Counted

MESSAGES = 200
ACK_EVERY = 100
PAYLOAD = bytes(range(256)) * 4  # 1 KiB, every byte value
PUBLISH_BAR = 10.11
ACK_BAR = 0.2


def connect(context: Context) -> Session:
    """An open connection with channel 1 open, as a client makes it."""
    proto = proto_connection.Connection(server_properties={"product": "Hutch"})
    session = Session(context, proto, peer_host="127.0.0.1")
    session.handle_data(inmemory.handshake_frames() + frame.marshal(commands.Channel.Open(), 1))
    proto.data_to_send()
    return session


class Flow:
    """A broker wired as the server wires it, a publisher and a consumer of queue "q"."""

    def __init__(self, data_dir: Path) -> None:
        broker = Broker(clock=wall_clock_ms)
        broker.create_defaults()
        alarms = ResourceMonitor(
            watermark=memory.Watermark(relative=0.4, absolute=None),
            total_memory=8 << 30,
            data_dir=data_dir,
            disk_free_limit=0,
        )
        self.context = Context(broker, clock=wall_clock_ms, alarms=alarms)
        self.alarms = alarms
        self.publisher = connect(self.context)
        self.consumer = connect(self.context)
        self.publisher.handle_data(frame.marshal(commands.Queue.Declare(queue="q"), 1))
        self.consumer.handle_data(
            frame.marshal(commands.Basic.Qos(prefetch_count=1000), 1)
            + frame.marshal(commands.Basic.Consume(queue="q", consumer_tag="c"), 1)
        )
        self.publisher.proto.data_to_send()
        self.consumer.proto.data_to_send()
        properties = commands.Basic.Properties(delivery_mode=1)  # loadgen's (bench/loadgen.py)
        self.one = (
            frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
            + frame.marshal(header.ContentHeader(0, len(PAYLOAD), properties), 1)
            + frame.marshal(body.ContentBody(PAYLOAD), 1)
        )
        self.queue = broker.vhosts["/"].queues["q"]

    def ack(self, tag: int) -> bytes:
        return frame.marshal(commands.Basic.Ack(delivery_tag=tag, multiple=True), 1)

    def delivered(self) -> list[tuple[int, bytes]]:
        """The consumer's deliveries since the last call: (delivery tag, body)."""
        frames = inmemory.decode_frames(b"".join(self.consumer.proto.data_to_send()))
        found: list[tuple[int, bytes]] = []
        for one in frames:
            if isinstance(one, commands.Basic.Deliver):
                found.append((one.delivery_tag, b""))
            elif isinstance(one, body.ContentBody):
                found[-1] = (found[-1][0], found[-1][1] + one.value)
        return found


def test_the_one_flow_path_makes_no_more_calls_than_pinned(tmp_path: Path) -> None:
    flow = Flow(tmp_path)
    flow.publisher.handle_data(flow.one)  # warm: first-use paths (caches, the deliver's head)
    flow.consumer.handle_data(flow.ack(1))
    assert flow.delivered() == [(1, PAYLOAD)]
    acks = b"".join(flow.ack(tag) for tag in range(1 + ACK_EVERY, MESSAGES + 2, ACK_EVERY))

    with Counted() as published:
        flow.publisher.handle_data(flow.one * MESSAGES)
    assert flow.delivered() == [(tag, PAYLOAD) for tag in range(2, MESSAGES + 2)]
    assert flow.queue.unacked_count == MESSAGES
    with Counted() as acked:
        flow.consumer.handle_data(acks)

    assert flow.queue.unacked_count == flow.queue.ready_count == 0
    assert flow.consumer.held_bytes == 0
    assert flow.context.stats.acks == MESSAGES + 1
    assert flow.publisher.proto.data_to_send() == [], "no confirms, no returns, no errors"
    assert published.calls / MESSAGES <= PUBLISH_BAR
    assert acked.calls / MESSAGES <= ACK_BAR


def test_the_memory_alarm_still_holds_the_publish_it_reads_inline(tmp_path: Path) -> None:
    """``publishing_blocked`` is an attribute the alarms' setters keep in step: a set alarm
    holds the next publish (nothing delivered) and its clearing lets it through."""
    flow = Flow(tmp_path)
    flow.alarms.memory_alarm = True
    assert flow.alarms.publishing_blocked
    flow.publisher.handle_data(flow.one)
    assert flow.publisher.blocked and flow.delivered() == []
    flow.alarms.disk_alarm = True
    flow.alarms.memory_alarm = False
    assert flow.alarms.publishing_blocked, "the disk alarm still blocks"
    flow.alarms.disk_alarm = False
    assert not flow.alarms.publishing_blocked
    flow.publisher.unblock()
    assert flow.delivered() == [(1, PAYLOAD)]
