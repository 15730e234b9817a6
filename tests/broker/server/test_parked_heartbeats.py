"""A connection parked behind its own expensive publish is not dropped for missed heartbeats.

While a publish is routed over later loop turns its connection is deliberately not read
(dispatch/turns.py), as while the memory alarm blocks it, so the client's heartbeats sit
unread in the socket: that is no sign of a dead peer.
"""

import itertools
import time

from hutch_broker.dispatch.context import Context
from hutch_broker.model.broker import Broker
from hutch_broker.server.amqp import AMQPConnection
from hutch_testing import inmemory
from pamqp import body, commands, frame, header

OPTIONS = {"server_properties": {"product": "Hutch"}, "heartbeat": 5, "channel_max": 16}


def test_a_parked_connection_is_not_closed_for_missed_heartbeats():
    broker = Broker()
    broker.create_defaults()
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("t", "topic")
    never, _ = vhost.declare_queue("never")
    for words in itertools.product("a*#", repeat=7):
        vhost.bind("t", never, ".".join([*words, "z"]))
    connection = AMQPConnection(Context(broker, clock=lambda: 0), OPTIONS)
    transport = inmemory.FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    tune_ok = commands.Connection.TuneOk(channel_max=16, frame_max=131072, heartbeat=5)
    connection.data_received(
        inmemory.PROTOCOL_HEADER
        + inmemory.login_frames()
        + frame.marshal(tune_ok, 0)
        + frame.marshal(commands.Connection.Open(virtual_host="/"), 0)
        + frame.marshal(commands.Channel.Open(), 1)
    )
    key = ".".join(["a"] * 127)  # about 35,000 trie steps: several turns
    connection.data_received(
        frame.marshal(commands.Basic.Publish(exchange="t", routing_key=key), 1)
        + frame.marshal(header.ContentHeader(0, 1, commands.Basic.Properties()), 1)
        + frame.marshal(body.ContentBody(b"x"), 1)
    )
    session = connection.session
    assert session is not None and session.parked

    connection.tick(time.monotonic() + 11, handshake_timeout=10)  # over 2 heartbeats

    assert not transport.closed
