"""Deliveries go out in slices, one per loop turn, and stop while the socket does not drain.

In memory (the server's ``AMQPConnection`` over a stand-in transport): what a turn queues for
one connection is counted in bytes, so the bound is exact, not a timing. Before the slices,
one basic.consume encoded every ready message of the queue in the same turn.
"""

from __future__ import annotations

from hutch_broker import memory
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
    def get_write_buffer_size(self) -> int:
        return 0


def consuming(
    *, no_ack: bool = True, held_budget: int | None = None
) -> tuple[AMQPConnection, Transport, Context]:
    broker = Broker()
    broker.create_defaults()
    context = Context(broker, clock=lambda: 0)
    connection = AMQPConnection(context, OPTIONS)
    transport = Transport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    if held_budget is not None:
        assert connection.session is not None
        connection.session.held_budget = held_budget
    connection.data_received(
        inmemory.handshake_frames()
        + frame.marshal(commands.Channel.Open(), 1)
        + frame.marshal(commands.Queue.Declare(queue="q"), 1)
    )
    queue = broker.vhosts["/"].queues["q"]
    for n in range(COUNT):
        queue.publish(Message("", "q", NO_PROPERTIES, bytes([n]) * BODY), 0)
    connection.flush()
    transport.written.clear()
    consume = commands.Basic.Consume(queue="q", consumer_tag="c", no_ack=no_ack)
    connection.data_received(frame.marshal(consume, 1))
    return connection, transport, context


def delivered_bodies(transport: Transport) -> int:
    frames = inmemory.decode_frames(b"".join(transport.written))
    transport.written.clear()
    return sum(isinstance(found, commands.Basic.Deliver) for found in frames)


def test_each_turn_queues_one_slice_of_deliveries():
    connection, transport, context = consuming()
    slice_bytes = context.delivery_budget.output_slice
    per_turn = -(-slice_bytes // BODY)  # the delivery that reaches the slice still goes
    turns = []
    while True:
        connection.flush()  # the end of the loop turn
        delivered = delivered_bodies(transport)
        if not delivered:
            break
        turns.append(delivered)
    assert sum(turns) == COUNT
    assert max(turns) == per_turn, f"{turns}: a turn queued more than a slice"


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
