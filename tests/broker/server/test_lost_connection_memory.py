"""Nothing in the server keeps a lost connection, or what its client sent, alive.

The once-a-second timer ticked every connection in a loop inside its coroutine, and the loop
variable kept the last connection it ticked for as long as the coroutine slept, which is forever
when no connection comes after it. With it stayed everything its client had sent: a client
that left a 16 MiB message half-sent on each of its channels and dropped the socket held that
memory until the next client came (issue 30, memory after hostile input). In process, with a
real socket, and the timer's ticks counted so the test does not depend on the machine's speed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import time
import weakref
from collections.abc import Callable

from hutch_broker.dispatch.context import Context
from hutch_broker.model.broker import Broker
from hutch_broker.server.amqp import AMQPConnection
from hutch_broker.server.app import BrokerServer
from hutch_testing import inmemory
from pamqp import body, commands, frame, header

OPTIONS = {"server_properties": {"product": "Hutch"}, "heartbeat": 0, "channel_max": 16}
WAIT_S = 20.0  # for any one condition: ticks come once a second, later on a loaded machine


def count_ticks(server: BrokerServer) -> list[int]:
    """The timer samples the resources once per tick: count the samples."""
    ticks = [0]
    sample = server.resources.sample

    def counted() -> None:
        ticks[0] += 1
        sample()

    server.resources.sample = counted  # type: ignore[method-assign]
    return ticks


async def until(condition: Callable[[], bool]) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def half_sent_messages(channels: int) -> bytes:
    """On each channel: open, basic.publish, a header promising 16 MiB, 1 MiB of its body."""
    parts = []
    for channel in range(1, channels + 1):
        parts.append(frame.marshal(commands.Channel.Open(), channel))
        parts.append(frame.marshal(commands.Basic.Publish(routing_key="q"), channel))
        parts.append(frame.marshal(header.ContentHeader(0, 16 * 1024 * 1024), channel))
        parts += [frame.marshal(body.ContentBody(bytes(131064)), channel)] * 8
    return b"".join(parts)


async def test_the_timer_keeps_no_lost_connection(server):
    ticks = count_ticks(server)
    _reader, writer = await asyncio.open_connection("127.0.0.1", server.config.amqp_port)
    writer.write(inmemory.handshake_frames() + half_sent_messages(8))
    await writer.drain()
    await until(lambda: bool(server.connections))
    (connection,) = server.connections
    lost = weakref.ref(connection)
    del connection
    seen = ticks[0]
    await until(lambda: ticks[0] >= seen + 2)  # the timer has ticked the open connection

    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
    await until(lambda: not server.connections)
    gone = ticks[0]
    await until(lambda: ticks[0] >= gone + 2)  # and ticked with no connection since
    gc.collect()
    assert lost() is None, f"still referenced by {[type(r) for r in gc.get_referrers(lost())]}"


class SocketTransport(inmemory.FakeTransport):
    """The fake transport over a real socket, so the tick can ask the kernel about the peer."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self.sock = sock
        self.aborted = False

    def get_extra_info(self, name: str) -> object:
        return self.sock if name == "socket" else super().get_extra_info(name)

    def abort(self) -> None:
        self.aborted = True


def test_a_client_that_leaves_while_not_read_is_let_go():
    """Blocked by the memory alarm with a message half-sent, the socket is not read, so the
    event loop cannot see its client close it: the tick asks the kernel, and lets the
    connection (and the memory its half-sent message holds) go."""
    broker = Broker()
    broker.create_defaults()
    connection = AMQPConnection(Context(broker, clock=lambda: 0), OPTIONS)
    ours, theirs = socket.socketpair()
    transport = SocketTransport(ours)
    connection.connection_made(transport)  # type: ignore[arg-type]
    connection.data_received(inmemory.handshake_frames())
    session = connection.session
    assert session is not None
    session.blocked = True  # as the alarm leaves it: not read

    connection.tick(time.monotonic(), 10.0)
    assert not transport.aborted, "the client is still there"

    theirs.close()
    connection.tick(time.monotonic(), 10.0)
    assert transport.aborted
    ours.close()
