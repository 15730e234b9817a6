"""Deliveries go out in slices, one per loop turn, and stop while the socket does not drain.

In memory (the server's ``AMQPConnection`` over a stand-in transport): what a turn queues for
one connection is counted in bytes, so the bound is exact, not a timing. Before the slices,
one basic.consume encoded every ready message of the queue in the same turn.
"""

from __future__ import annotations

import dataclasses

from hutch_broker import memory
from hutch_broker.dispatch import channels
from hutch_broker.dispatch.context import Context
from hutch_broker.model.broker import Broker
from hutch_broker.model.messages import Message
from hutch_broker.server.amqp import AMQPConnection
from hutch_testing import inmemory
from pamqp import commands, frame

OPTIONS = {"server_properties": {"product": "Hutch"}, "heartbeat": 0, "channel_max": 16}
BODY = 256 * 1024
COUNT = 40
NO_PROPERTIES = b"\x00\x00"


class Transport(inmemory.FakeTransport):
    """A socket whose peer has not read ``buffered`` bytes yet, with asyncio's flow control:
    new write marks under the buffer pause the protocol; draining it resumes the protocol."""

    buffered = 0
    paused = False

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def set_write_buffer_limits(self, *, high: int, low: int) -> None:
        if self.buffered > high and not self.paused and isinstance(self.protocol, AMQPConnection):
            self.paused = True
            self.protocol.pause_writing()

    def drain(self) -> None:
        self.buffered = 0
        if self.paused and isinstance(self.protocol, AMQPConnection):
            self.paused = False
            self.protocol.resume_writing()


def consuming(
    *,
    body: int = BODY,
    count: int = COUNT,
    no_ack: bool = True,
    held_budget: int | None = None,
    context: Context | None = None,
    queue_name: str = "q",
) -> tuple[AMQPConnection, Transport, Context]:
    if context is None:
        broker = Broker()
        broker.create_defaults()
        context = Context(broker, clock=lambda: 0)
    broker = context.broker
    connection = AMQPConnection(context, OPTIONS)
    transport = Transport()
    transport.protocol = connection
    connection.connection_made(transport)  # type: ignore[arg-type]
    if held_budget is not None:
        assert connection.session is not None
        connection.session.held_budget = held_budget
    connection.data_received(
        inmemory.handshake_frames()
        + frame.marshal(commands.Channel.Open(), 1)
        + frame.marshal(commands.Queue.Declare(queue=queue_name), 1)
    )
    queue = broker.vhosts["/"].queues[queue_name]
    for n in range(count):
        queue.publish(Message("", queue_name, NO_PROPERTIES, bytes([n % 256]) * body), 0)
    connection.flush()
    transport.written.clear()
    consume = commands.Basic.Consume(queue=queue_name, consumer_tag="c", no_ack=no_ack)
    connection.data_received(frame.marshal(consume, 1))
    return connection, transport, context


def delivered_bodies(transport: Transport) -> int:
    frames = inmemory.decode_frames(b"".join(transport.written))
    transport.written.clear()
    return sum(isinstance(found, commands.Basic.Deliver) for found in frames)


def test_each_turn_queues_one_slice_of_deliveries():
    connection, transport, context = consuming()
    slice_bytes = context.delivery_budget.output_slice
    cost = BODY + channels.DELIVERY_OVERHEAD
    per_turn = -(-slice_bytes // cost)  # the delivery that reaches the slice still goes
    turns = []
    while True:
        connection.flush()  # the end of the loop turn
        delivered = delivered_bodies(transport)
        if not delivered:
            break
        turns.append(delivered)
    assert sum(turns) == COUNT
    assert max(turns) == per_turn, f"{turns}: a turn queued more than a slice"


def test_a_turn_of_tiny_messages_is_about_a_thousand_deliveries_not_a_slice_of_bytes():
    """Counted by body bytes alone, a 1 MiB slice of 100-byte bodies was 10,000 deliveries in
    one turn (25-80 ms of the loop on a busy machine); each delivery also costs
    ``DELIVERY_OVERHEAD`` of the slice."""
    connection, transport, context = consuming(body=100, count=5000)
    slice_bytes = context.delivery_budget.output_slice
    per_turn = -(-slice_bytes // (100 + channels.DELIVERY_OVERHEAD))
    turns = []
    while True:
        connection.flush()
        delivered = delivered_bodies(transport)
        if not delivered:
            break
        turns.append(delivered)
    assert sum(turns) == 5000
    assert max(turns) == per_turn <= 1024


def test_no_deliveries_while_the_transport_is_over_its_high_water_mark():
    connection, transport, _ = consuming()
    connection.pause_writing()  # what asyncio calls once its buffer passes the high mark
    connection.flush()
    first = delivered_bodies(transport)
    for _ in range(5):
        connection.flush()
    assert delivered_bodies(transport) == 0, "delivered while the socket was not draining"
    connection.resume_writing()
    connection.flush()
    assert delivered_bodies(transport) > 0, "deliveries did not resume once it drained"
    assert first < COUNT


def test_unacked_bodies_in_memory_stop_at_the_connection_budget():
    connection, transport, _ = consuming(no_ack=False, held_budget=1024 * 1024)  # 4 bodies
    session = connection.session
    assert session is not None
    drained = 0
    for _ in range(10):
        connection.flush()
        drained += delivered_bodies(transport)
    assert drained == 4
    assert session.held_bytes == 4 * BODY
    connection.data_received(frame.marshal(commands.Basic.Ack(2, multiple=True), 1))
    for _ in range(10):
        connection.flush()
        drained += delivered_bodies(transport)
    assert drained == 6, "two acked bodies let exactly two more through"
    assert session.held_bytes == 4 * BODY


def test_budget_follows_the_watermark():
    small = memory.delivery_budget(64 * 1024 * 1024)
    large = memory.delivery_budget(8 * 1024**3)
    assert small.write_high == 1024 * 1024
    assert small.output_slice == small.write_low == 256 * 1024
    assert small.held_per_connection == 8 * 1024 * 1024
    assert large.write_high == memory.MAX_WRITE_HIGH  # what full speed on loopback needs
    assert memory.delivery_budget(1).write_high == memory.MIN_WRITE_HIGH
    assert memory.delivery_budget(1).held_per_connection == memory.MIN_HELD
    assert memory.delivery_budget(0) == memory.delivery_budget(0)  # disabled: a fixed default
    assert small.output_total == small.held_total == 16 * 1024 * 1024


def test_only_a_connection_holding_much_of_an_over_total_waits():
    budget = memory.delivery_budget(64 * 1024 * 1024)
    over = memory.DeliveryTotals(output=budget.output_total + 1, held=budget.held_total + 1)
    under = memory.DeliveryTotals(output=budget.output_total, held=budget.held_total)
    much_output, little_output = budget.write_low + 1, budget.write_low
    much_held, little_held = budget.held_per_connection // 4 + 1, budget.held_per_connection // 4
    assert memory.output_must_wait(budget, over, output=much_output)
    assert not memory.output_must_wait(budget, over, output=little_output)
    assert not memory.output_must_wait(budget, under, output=much_output)
    assert memory.held_must_wait(budget, over, held=much_held)
    assert not memory.held_must_wait(budget, over, held=little_held)
    assert not memory.held_must_wait(budget, under, held=much_held)


def test_over_the_broker_wide_output_total_the_connections_holding_much_of_it_pause():
    """Each stuck consumer is within its own bounds; together they are over the total. Those
    holding more than ``write_low`` get their marks lowered and pause; one whose socket drains
    is not slowed down; a drained one resumes at once, with its marks back."""
    broker = Broker()
    broker.create_defaults()
    context = Context(broker, clock=lambda: 0)
    budget = memory.delivery_budget(0)
    context.delivery_budget = dataclasses.replace(budget, output_total=2 * budget.write_low)
    stuck = [consuming(context=context, queue_name=name) for name in ("a", "b")]
    live, live_transport, _ = consuming(context=context, queue_name="c")
    for _ in range(2):  # the first sees the total over at its next write
        for connection, transport, _ in stuck:
            transport.buffered = budget.write_low + 1  # under its own mark, but not draining
            connection.flush()
    live_transport.buffered = budget.write_low // 2  # its peer reads as it goes
    live.flush()
    assert context.delivery_totals.output == 2 * (budget.write_low + 1) + budget.write_low // 2
    assert all(transport.paused and connection.lowered for connection, transport, _ in stuck)
    for connection, transport, _ in stuck:
        delivered_bodies(transport)
        connection.flush()
        assert delivered_bodies(transport) == 0, "delivered to a paused connection"
    assert not live.lowered and not live_transport.paused
    live.flush()
    assert delivered_bodies(live_transport) > 0, "the live consumer was slowed down"
    first, first_transport, _ = stuck[0]
    first_transport.drain()  # its peer read everything: asyncio's resume_writing
    assert not first.lowered
    first.flush()
    assert delivered_bodies(first_transport) > 0
    for connection, _, _ in [*stuck, (live, None, None)]:
        connection.connection_lost(None)
    assert context.delivery_totals == memory.DeliveryTotals()


def test_over_the_broker_wide_held_total_a_connection_holding_much_waits_for_a_tick():
    broker = Broker()
    broker.create_defaults()
    context = Context(broker, clock=lambda: 0)
    budget = memory.delivery_budget(0)
    context.delivery_budget = dataclasses.replace(
        budget, held_total=2 * BODY, held_per_connection=4 * BODY
    )
    # Its own budget is not the bound here: it would let 16 through.
    connection, transport, _ = consuming(no_ack=False, context=context, held_budget=16 * BODY)
    connection.flush()
    first = delivered_bodies(transport)
    assert connection.waiting
    connection.flush()
    assert delivered_bodies(transport) == 0
    connection.data_received(frame.marshal(commands.Basic.Ack(0, multiple=True), 1))
    connection.tick(0.0, handshake_timeout=10)  # the next check finds the total under
    assert not connection.waiting
    connection.flush()
    assert delivered_bodies(transport) > 0
    assert first < COUNT
