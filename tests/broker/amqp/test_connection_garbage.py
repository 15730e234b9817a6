"""A closed connection is freed by reference counting, not by the cycle collector.

The fuzzer found it: under connection churn every closed connection left a cycle
(AMQPConnection -> Session -> transport back to AMQPConnection, plus the asyncio transport),
and with the broker's high gc threshold one collection freed ~80,000 objects at once, a
45-140 ms pause for every client. This test fails while any cycle survives a close.
"""

import gc
import weakref

from hutch_broker.dispatch.context import Context
from hutch_broker.model.broker import Broker
from hutch_broker.server.amqp import AMQPConnection
from hutch_testing import inmemory
from pamqp import commands, frame

OPTIONS = {"server_properties": {"product": "Hutch"}, "heartbeat": 0, "channel_max": 16}


def open_and_use(context: Context, lost: list[AMQPConnection]) -> tuple[weakref.ref, weakref.ref]:
    connection = AMQPConnection(context, OPTIONS, on_lost=lost.append)
    transport = inmemory.FakeTransport()
    transport.protocol = connection  # as asyncio's transports hold their protocol
    connection.connection_made(transport)  # type: ignore[arg-type]
    data = inmemory.handshake_frames()
    data += frame.marshal(commands.Channel.Open(), 1)
    data += frame.marshal(commands.Queue.Declare(queue="q"), 1)
    data += frame.marshal(commands.Basic.Consume(queue="q", consumer_tag="c"), 1)
    connection.data_received(data)
    connection.flush()
    assert connection.session is not None
    assert connection.session.channels, "the channel is open"
    refs = weakref.ref(connection), weakref.ref(connection.session)
    connection.connection_lost(None)
    return refs


def test_a_lost_connection_leaves_no_reference_cycle():
    broker = Broker()
    broker.create_defaults()
    context = Context(broker, clock=lambda: 0)
    lost: list[AMQPConnection] = []
    gc.disable()
    try:
        connection_ref, session_ref = open_and_use(context, lost)
        assert len(lost) == 1, "the server is told, so it can forget the connection"
        lost.clear()
        context.take_dirty()
        assert session_ref() is None, "the session is still referenced (a cycle)"
        assert connection_ref() is None, "the connection is still referenced (a cycle)"
    finally:
        gc.enable()
