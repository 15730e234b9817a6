"""A lean AMQP 0-9-1 load generator on asyncio + pamqp: the project's second opinion to PerfTest.

Why: pika and aio-pika spend more CPU per message than a broker does, so with them the benchmark
would measure the client (IMPL-7 in docs/contracts/broker.md: the pika baseline is
client-bound). This client does the minimum per message: publish frames are encoded once with pamqp
and written as pre-joined batches; deliveries and publisher confirms are parsed with `struct` from
one receive buffer (IMPL-5 style); acks are written with `multiple=True` every K deliveries. pamqp
handles only the control methods (handshake, declare, qos, consume).

It runs N producers and M consumers (one connection each, like PerfTest), with or without publisher
confirms (a window of outstanding publishes), persistent or transient messages, for a duration or a
message count, and prints one JSON object: messages published, confirmed, consumed and the rates.
Every loop is bounded by a deadline. It also declares and deletes the scenario's topology, for
itself and for PerfTest (`--setup-only`, `--teardown-only`). In a pairs scenario (4, 5) producer
i publishes only to queue i, each connection counts on its own and the JSON gives each pair's
figures; a queue split into another vhost is declared, fed and consumed through connections to
that vhost.

    python bench/loadgen.py --url amqp://guest:guest@127.0.0.1:5672/%2F --scenario 1 --duration 10
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import math
import struct
import sys
import time
import typing
import urllib.parse
from collections.abc import Callable
from typing import Any

import scenarios
from pamqp import body as pamqp_body
from pamqp import commands, frame
from pamqp import header as pamqp_header

log = logging.getLogger("loadgen")

FRAME_END = 0xCE
FRAME_METHOD = 1
BASIC_CLASS = 60
BASIC_DELIVER = 60
BASIC_ACK = 80
BASIC_NACK = 120
PUBLISH_BATCH = 50  # publish frames written per transport.write
RPC_TIMEOUT = 30.0
CLOSE_TIMEOUT = 2.0
DEFAULT_DURATION = 10.0
COUNT_MODE_CAP = 600.0
_FRAME_HEADER = struct.Struct("!BHI")
_METHOD_IDS = struct.Struct("!HH")
_DELIVERY_TAG = struct.Struct("!Q")
_ACK_FRAME = struct.Struct("!BHIHHQBB")


class AmqpError(Exception):
    """The broker closed the connection or a channel, or did not answer in time."""


@dataclasses.dataclass
class Counters:
    published: int = 0
    confirmed: int = 0
    nacked: int = 0
    consumed: int = 0


@dataclasses.dataclass
class ConnectParams:
    host: str
    port: int
    username: str
    password: str
    vhost: str

    @classmethod
    def from_url(cls, url: str) -> ConnectParams:
        parts = urllib.parse.urlsplit(url)
        vhost = urllib.parse.unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 5672,
            username=urllib.parse.unquote(parts.username or "guest"),
            password=urllib.parse.unquote(parts.password or "guest"),
            vhost=vhost,
        )

    def in_vhost(self, vhost: str | None) -> ConnectParams:
        """The same broker and user in ``vhost`` (None: this one's)."""
        return self if vhost is None else dataclasses.replace(self, vhost=vhost)


class Channel:
    """One channel's state: replies to RPCs, and the hot-path callbacks."""

    def __init__(self, connection: Connection, number: int) -> None:
        self.connection = connection
        self.number = number
        self.replies: asyncio.Queue[Any] = asyncio.Queue()
        self.on_deliver: Callable[[int], None] | None = None
        self.on_confirm: Callable[[int, bool, bool], None] | None = None

    async def call(self, method: Any, reply: type | None = None) -> Any:
        """Send a synchronous method and wait (bounded) for its reply, checking its type."""
        self.connection.send(frame.marshal(method, self.number))
        if reply is None:
            return None
        try:
            answer = await asyncio.wait_for(self.replies.get(), RPC_TIMEOUT)
        except TimeoutError as error:
            raise AmqpError(f"no {reply.__name__} within {RPC_TIMEOUT}s") from error
        if isinstance(answer, AmqpError):
            raise answer
        if not isinstance(answer, reply):
            raise AmqpError(f"expected {reply.__name__}, got {answer!r}")
        return answer

    def ack(self, delivery_tag: int, *, multiple: bool) -> None:
        self.connection.send(
            _ACK_FRAME.pack(
                FRAME_METHOD,
                self.number,
                13,
                BASIC_CLASS,
                BASIC_ACK,
                delivery_tag,
                int(multiple),
                FRAME_END,
            )
        )


class Connection(asyncio.Protocol):
    """An AMQP connection: frame parsing from one buffer, write flow control, channels."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.channels: dict[int, Channel] = {0: Channel(self, 0)}
        self.error: AmqpError | None = None
        self.closed = asyncio.get_running_loop().create_future()
        self._buffer = bytearray()
        self._offset = 0
        self._writable = asyncio.Event()
        self._writable.set()

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = typing.cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        self._parse_frames()
        if self._offset > len(self._buffer) // 2:
            del self._buffer[: self._offset]
            self._offset = 0

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.error is None:
            self._fail(AmqpError(f"connection lost: {exc}"))
        self._writable.set()
        if not self.closed.done():
            self.closed.set_result(None)

    # -- API ---------------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        if self.error is not None:
            raise self.error
        assert self.transport is not None
        self.transport.write(data)

    async def writable(self) -> None:
        await self._writable.wait()
        if self.error is not None:
            raise self.error

    async def open_channel(self) -> Channel:
        number = len(self.channels)
        channel = Channel(self, number)
        self.channels[number] = channel
        await channel.call(commands.Channel.Open(), commands.Channel.OpenOk)
        return channel

    async def close(self) -> None:
        """Connection.Close, then wait (bounded) for CloseOk and the socket to close."""
        if self.transport is None or self.transport.is_closing():
            return
        if self.error is None:
            self.send(
                frame.marshal(
                    commands.Connection.Close(
                        reply_code=200, reply_text="bye", class_id=0, method_id=0
                    ),
                    0,
                )
            )
            try:
                await asyncio.wait_for(asyncio.shield(self.closed), CLOSE_TIMEOUT)
            except TimeoutError:
                log.debug("no Connection.CloseOk within %ss", CLOSE_TIMEOUT)
        self.transport.abort()

    # -- frames ------------------------------------------------------------------------------

    def _parse_frames(self) -> None:
        buffer, offset, end = self._buffer, self._offset, len(self._buffer)
        while end - offset >= 8:
            frame_type, channel, size = _FRAME_HEADER.unpack_from(buffer, offset)
            frame_end = offset + 8 + size
            if frame_end > end:
                break
            if frame_type == FRAME_METHOD:
                self._method(channel, buffer, offset + 7, frame_end)
            offset = frame_end  # content header/body and heartbeat frames are skipped
        self._offset = offset

    def _method(self, channel_number: int, buffer: bytearray, start: int, frame_end: int) -> None:
        class_id, method_id = _METHOD_IDS.unpack_from(buffer, start)
        channel = self.channels.get(channel_number)
        if channel is None:
            return
        if class_id == BASIC_CLASS and method_id == BASIC_DELIVER and channel.on_deliver:
            tag_at = start + 5 + buffer[start + 4]  # after the consumer tag (short string)
            channel.on_deliver(_DELIVERY_TAG.unpack_from(buffer, tag_at)[0])
        elif class_id == BASIC_CLASS and method_id in (BASIC_ACK, BASIC_NACK):
            if channel.on_confirm:
                tag = _DELIVERY_TAG.unpack_from(buffer, start + 4)[0]
                multiple = bool(buffer[start + 12] & 1)
                channel.on_confirm(tag, multiple, method_id == BASIC_ACK)
        else:
            self._control(channel, bytes(buffer[start - 7 : frame_end]))

    def _control(self, channel: Channel, raw: bytes) -> None:
        _, _, method = frame.unmarshal(raw)
        if isinstance(method, commands.Connection.Close | commands.Channel.Close):
            self._closed_by_broker(channel, method)
        elif isinstance(method, commands.Connection.CloseOk):
            assert self.transport is not None
            self.transport.close()
        else:
            channel.replies.put_nowait(method)

    def _closed_by_broker(self, channel: Channel, method: Any) -> None:
        error = AmqpError(
            f"broker closed {type(method).__name__.split('.')[0]} "
            f"{channel.number}: {method.reply_code} {method.reply_text}"
        )
        if isinstance(method, commands.Connection.Close):
            self.send(frame.marshal(commands.Connection.CloseOk(), 0))
        else:
            self.send(frame.marshal(commands.Channel.CloseOk(), channel.number))
        self._fail(error)

    def _fail(self, error: AmqpError) -> None:
        self.error = error
        for channel in self.channels.values():
            channel.replies.put_nowait(error)


async def connect(params: ConnectParams, name: str) -> Connection:
    """Open a connection: protocol header, Start/StartOk (PLAIN), Tune/TuneOk, Open/OpenOk."""
    loop = asyncio.get_running_loop()
    _, connection = await loop.create_connection(Connection, params.host, params.port)
    control = connection.channels[0]
    connection.send(pamqp_header.ProtocolHeader().marshal())
    start = await _reply(control, commands.Connection.Start)
    if "PLAIN" not in str(start.mechanisms).split():
        raise AmqpError(f"broker offers no PLAIN: {start.mechanisms}")
    response = f"\0{params.username}\0{params.password}"
    properties: dict[str, Any] = {"product": "hutch-loadgen", "connection_name": name}
    await control.call(
        commands.Connection.StartOk(
            client_properties=properties, mechanism="PLAIN", response=response, locale="en_US"
        )
    )
    tune = await _reply(control, commands.Connection.Tune)
    await control.call(
        commands.Connection.TuneOk(
            channel_max=tune.channel_max or 2047, frame_max=tune.frame_max, heartbeat=0
        )
    )
    await control.call(
        commands.Connection.Open(virtual_host=params.vhost), commands.Connection.OpenOk
    )
    return connection


async def _reply(channel: Channel, reply: type) -> Any:
    try:
        answer = await asyncio.wait_for(channel.replies.get(), RPC_TIMEOUT)
    except TimeoutError as error:
        raise AmqpError(f"no {reply.__name__} within {RPC_TIMEOUT}s") from error
    if isinstance(answer, AmqpError):
        raise answer
    if not isinstance(answer, reply):
        raise AmqpError(f"expected {reply.__name__}, got {answer!r}")
    return answer


# -- topology ----------------------------------------------------------------------------------


async def declare_topology(params: ConnectParams, scenario: scenarios.Scenario) -> None:
    """Declare (and purge) the scenario's queues, exchange and bindings, each queue in its
    vhost (which must exist: bench/run.py creates a scenario's vhosts)."""
    for vhost, queues in scenario.queues_by_vhost().items():
        connection = await connect(params.in_vhost(vhost), "loadgen-setup")
        try:
            channel = await connection.open_channel()
            for queue in queues:
                await channel.call(
                    commands.Queue.Declare(queue=queue, durable=scenario.persistent),
                    commands.Queue.DeclareOk,
                )
                await channel.call(commands.Queue.Purge(queue=queue), commands.Queue.PurgeOk)
        finally:
            await connection.close()
    if scenario.exchange:
        await _declare_exchange(params, scenario)


async def _declare_exchange(params: ConnectParams, scenario: scenarios.Scenario) -> None:
    """The exchange and its bindings, in the URL's vhost (a scenario with an exchange has no
    vhosts of its own)."""
    connection = await connect(params, "loadgen-setup")
    try:
        channel = await connection.open_channel()
        await channel.call(
            commands.Exchange.Declare(
                exchange=scenario.exchange,
                exchange_type=scenario.exchange_type,
                durable=scenario.persistent,
            ),
            commands.Exchange.DeclareOk,
        )
        for queue, key in scenario.bindings:
            await channel.call(
                commands.Queue.Bind(queue=queue, exchange=scenario.exchange, routing_key=key),
                commands.Queue.BindOk,
            )
    finally:
        await connection.close()


async def delete_topology(params: ConnectParams, scenario: scenarios.Scenario) -> None:
    for vhost, queues in scenario.queues_by_vhost().items():
        connection = await connect(params.in_vhost(vhost), "loadgen-teardown")
        try:
            channel = await connection.open_channel()
            for queue in queues:
                await channel.call(commands.Queue.Delete(queue=queue), commands.Queue.DeleteOk)
            if scenario.exchange and vhost is None:
                await channel.call(
                    commands.Exchange.Delete(exchange=scenario.exchange),
                    commands.Exchange.DeleteOk,
                )
        finally:
            await connection.close()


# -- producers ---------------------------------------------------------------------------------


def publish_frames(
    channel: int, exchange: str, routing_key: str, body: bytes, persistent: bool
) -> bytes:
    """Basic.Publish + content header + body, encoded once with pamqp."""
    properties = commands.Basic.Properties(delivery_mode=2 if persistent else 1)
    return b"".join(
        [
            frame.marshal(
                commands.Basic.Publish(exchange=exchange, routing_key=routing_key), channel
            ),
            frame.marshal(pamqp_header.ContentHeader(0, len(body), properties), channel),
            frame.marshal(pamqp_body.ContentBody(body), channel),
        ]
    )


def publish_batches(
    channel: int, scenario: scenarios.Scenario, routing_keys: tuple[str, ...] | None = None
) -> list[bytes]:
    """Pre-joined batches of PUBLISH_BATCH messages, cycling through the routing keys (the
    scenario's, or one producer's own)."""
    body = bytes(scenario.body_size)
    messages = [
        publish_frames(channel, scenario.exchange, key, body, scenario.persistent)
        for key in routing_keys or scenario.routing_keys
    ]
    total = math.lcm(len(messages), PUBLISH_BATCH)
    return [
        b"".join(messages[index % len(messages)] for index in range(start, start + PUBLISH_BATCH))
        for start in range(0, total, PUBLISH_BATCH)
    ]


class ConfirmWindow:
    """Outstanding publisher confirms, with acks that may be single or multiple."""

    def __init__(self, size: int, counters: Counters) -> None:
        self.size = size
        self.counters = counters
        self.outstanding = 0
        self._confirmed_upto = 0
        self._single: set[int] = set()
        self._room = asyncio.Event()
        self._room.set()

    def sent(self, count: int) -> None:
        self.outstanding += count
        if self.outstanding > self.size - PUBLISH_BATCH:
            self._room.clear()

    async def wait_for_room(self, deadline: float) -> bool:
        try:
            await asyncio.wait_for(self._room.wait(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            return False
        return True

    def on_confirm(self, tag: int, multiple: bool, ack: bool) -> None:
        if multiple:
            below = {single for single in self._single if single <= tag}
            count = tag - self._confirmed_upto - len(below)
            self._single -= below
            self._confirmed_upto = max(self._confirmed_upto, tag)
        else:
            count = 1
            self._single.add(tag)
        self.outstanding -= count
        if ack:
            self.counters.confirmed += count
        else:
            self.counters.nacked += count
        if self.outstanding <= self.size - PUBLISH_BATCH:
            self._room.set()


async def produce(
    connection: Connection,
    scenario: scenarios.Scenario,
    counters: Counters,
    *,
    deadline: float,
    limit: int | None,
    routing_keys: tuple[str, ...] | None = None,
) -> None:
    """Publish as fast as the broker takes it until the deadline or `limit` messages."""
    channel = await connection.open_channel()
    window = None
    if scenario.confirms:
        window = ConfirmWindow(scenario.confirm_window, counters)
        channel.on_confirm = window.on_confirm
        await channel.call(commands.Confirm.Select(), commands.Confirm.SelectOk)
    batches = publish_batches(channel.number, scenario, routing_keys)
    sent = 0
    while time.monotonic() < deadline and (limit is None or sent < limit):
        if window is not None and not await window.wait_for_room(deadline):
            break
        await connection.writable()
        batch = batches[(sent // PUBLISH_BATCH) % len(batches)]
        connection.send(batch)
        sent += PUBLISH_BATCH
        counters.published += PUBLISH_BATCH
        if window is not None:
            window.sent(PUBLISH_BATCH)
        await asyncio.sleep(0)  # let deliveries and confirms in


# -- consumers ---------------------------------------------------------------------------------


async def start_consumer(
    connection: Connection,
    scenario: scenarios.Scenario,
    queue: str,
    counters: Counters,
    *,
    tag: str,
) -> None:
    """Consume with manual acks, multiple=True every `ack_every`; returns once ConsumeOk came.

    Deliveries are handled in the connection's data_received, so there is no loop to run.
    """
    channel = await connection.open_channel()
    ack_every = max(1, min(scenario.ack_every, scenario.prefetch))
    unacked = 0

    def on_deliver(delivery_tag: int) -> None:
        nonlocal unacked
        counters.consumed += 1
        unacked += 1
        if unacked >= ack_every:
            channel.ack(delivery_tag, multiple=True)
            unacked = 0

    channel.on_deliver = on_deliver
    await channel.call(commands.Basic.Qos(prefetch_count=scenario.prefetch), commands.Basic.QosOk)
    await channel.call(
        commands.Basic.Consume(queue=queue, consumer_tag=tag), commands.Basic.ConsumeOk
    )


# -- a run -------------------------------------------------------------------------------------


@dataclasses.dataclass
class RunOptions:
    duration: float
    count: int | None = None
    # Count mode: stop consuming once no delivery came for drain_idle seconds (or every message
    # did), at the latest drain_timeout seconds after publishing ends.
    drain_timeout: float = 30.0
    drain_idle: float = 1.0


@dataclasses.dataclass(frozen=True)
class Role:
    """One connection's part in a run: a consumer of ``queue`` or a producer of ``routing_keys``,
    in ``vhost`` (None: the URL's)."""

    vhost: str | None
    queue: str | None = None
    routing_keys: tuple[str, ...] = ()


def roles(scenario: scenarios.Scenario) -> tuple[list[Role], list[Role]]:
    """The consumers' roles (consumers_per_queue on each queue) and the producers'."""
    consumers = [
        Role(scenario.vhost_of(index), queue=queue)
        for index, queue in enumerate(scenario.queues)
        for _ in range(scenario.consumers_per_queue)
    ]
    producers = [Role(vhost, routing_keys=keys) for vhost, keys in scenario.producer_routing_keys()]
    return consumers, producers


async def run(
    params: ConnectParams, scenario: scenarios.Scenario, options: RunOptions
) -> dict[str, Any]:
    """Consumers first, then producers; all stop at the deadline. Returns the counts and rates."""
    consumer_roles, producer_roles = roles(scenario)
    connections = []
    try:
        for index, role in enumerate(consumer_roles + producer_roles):
            connections.append(await connect(params.in_vhost(role.vhost), f"loadgen-{index}"))
        return await _timed(connections, scenario, options)
    finally:
        await asyncio.gather(
            *(connection.close() for connection in connections), return_exceptions=True
        )


async def _timed(
    connections: list[Connection], scenario: scenarios.Scenario, options: RunOptions
) -> dict[str, Any]:
    """Each connection counts on its own (one `Counters` each), summed in the report: a pair's
    own figures show whether every pair delivered."""
    consumer_roles, producer_roles = roles(scenario)
    consumer_connections = connections[: len(consumer_roles)]
    consumed = [Counters() for _ in consumer_roles]
    produced = [Counters() for _ in producer_roles]
    await asyncio.gather(
        *(
            start_consumer(connection, scenario, role.queue or "", counters, tag=f"loadgen-{index}")
            for index, (connection, role, counters) in enumerate(
                zip(consumer_connections, consumer_roles, consumed, strict=True)
            )
        )
    )
    began = time.monotonic()
    limit = None if options.count is None else math.ceil(options.count / scenario.producers)
    await asyncio.gather(
        *(
            produce(
                connection,
                scenario,
                counters,
                deadline=began + options.duration,
                limit=limit,
                routing_keys=role.routing_keys,
            )
            for connection, role, counters in zip(
                connections[len(consumer_roles) :], producer_roles, produced, strict=True
            )
        )
    )
    published_in = time.monotonic() - began
    consumed_until = time.monotonic()
    if options.count is not None:
        # Every message reaches one queue: the drain is over once all of them came.
        one_each = scenarios.fan_out(scenario) == 1.0
        consumed_until = await _drain(
            lambda: sum(counters.consumed for counters in consumed),
            consumer_connections,
            time.monotonic() + options.drain_timeout,
            idle=options.drain_idle,
            expected=sum(counters.published for counters in produced) if one_each else None,
        )
    _raise_connection_errors(consumer_connections)
    elapsed = consumed_until - began
    total = _sum(consumed + produced)
    result = _report(scenario, total, published_in=published_in, elapsed=elapsed)
    if scenario.pairs:
        result["pairs"] = _pairs(scenario, consumed, produced, elapsed)
    return result


def _sum(counters: list[Counters]) -> Counters:
    total = Counters()
    for one in counters:
        total.published += one.published
        total.confirmed += one.confirmed
        total.nacked += one.nacked
        total.consumed += one.consumed
    return total


def _pairs(
    scenario: scenarios.Scenario,
    consumed: list[Counters],
    produced: list[Counters],
    elapsed: float,
) -> list[dict[str, Any]]:
    """Pair i: queue i, its consumer and producer i (the one publishing to it)."""
    return [
        {
            "vhost": scenario.vhost_of(index),
            "queue": queue,
            "published": produced[index].published,
            "consumed": consumed[index].consumed,
            "consume_rate": round(consumed[index].consumed / elapsed, 1) if elapsed else 0.0,
        }
        for index, queue in enumerate(scenario.queues)
    ]


def _raise_connection_errors(connections: list[Connection]) -> None:
    for connection in connections:
        if connection.error is not None:
            raise connection.error


async def _drain(
    consumed: Callable[[], int],
    connections: list[Connection],
    hard_stop: float,
    *,
    idle: float = 1.0,
    expected: int | None = None,
) -> float:
    """Count mode: wait until the consumers got ``expected`` messages (when known) or have been
    idle for ``idle`` seconds, bounded by hard_stop.

    Returns when the last delivery arrived (to 50 ms), the end of the consuming time.
    """
    last, last_at = consumed(), time.monotonic()
    while time.monotonic() < hard_stop and time.monotonic() - last_at < idle:
        if expected is not None and last >= expected:
            break
        await asyncio.sleep(0.05)
        _raise_connection_errors(connections)
        if consumed() != last:
            last, last_at = consumed(), time.monotonic()
    return last_at


def _report(
    scenario: scenarios.Scenario, counters: Counters, *, published_in: float, elapsed: float
) -> dict[str, Any]:
    published = counters.confirmed if scenario.confirms else counters.published
    return {
        "scenario": scenario.number,
        "published": counters.published,
        "confirmed": counters.confirmed,
        "nacked": counters.nacked,
        "consumed": counters.consumed,
        "publish_seconds": round(published_in, 3),
        "seconds": round(elapsed, 3),
        "publish_rate": round(published / published_in, 1) if published_in else 0.0,
        "consume_rate": round(counters.consumed / elapsed, 1) if elapsed else 0.0,
        "fan_out": scenarios.fan_out(scenario),
    }


# -- command line ------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    parser.add_argument("--scenario", type=int, choices=sorted(scenarios.SCENARIOS), default=1)
    parser.add_argument(
        "--duration",
        type=float,
        help="seconds of publishing (default 10; with --count, a cap: 600)",
    )
    parser.add_argument("--count", type=int, help="publish this many messages, then drain")
    parser.add_argument(
        "--drain-idle",
        type=float,
        default=1.0,
        help="with --count: stop draining after this many idle seconds (default 1; it ends "
        "earlier once every message came, when each reaches one queue)",
    )
    parser.add_argument("--producers", type=int)
    parser.add_argument("--consumers-per-queue", type=int)
    parser.add_argument("--confirms", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--confirm-window", type=int)
    parser.add_argument("--persistent", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--prefetch", type=int)
    parser.add_argument("--ack-every", type=int)
    parser.add_argument("--body-size", type=int)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--setup-only", action="store_true", help="declare the topology, exit")
    mode.add_argument("--teardown-only", action="store_true", help="delete the topology, exit")
    parser.add_argument("--keep-topology", action="store_true", help="do not delete it after")
    return parser.parse_args(argv)


def scenario_from_args(args: argparse.Namespace) -> scenarios.Scenario:
    """The scenario with the command line's overrides; ValueError if they break its shape
    (a pairs scenario keeps one producer per queue)."""
    base = scenarios.SCENARIOS[args.scenario]
    overrides = {
        field: getattr(args, field)
        for field in (
            "producers",
            "consumers_per_queue",
            "confirms",
            "confirm_window",
            "persistent",
            "prefetch",
            "ack_every",
            "body_size",
        )
        if getattr(args, field) is not None
    }
    return dataclasses.replace(base, **overrides)


async def main_async(args: argparse.Namespace, scenario: scenarios.Scenario) -> dict[str, Any]:
    params = ConnectParams.from_url(args.url)
    if args.teardown_only:
        await delete_topology(params, scenario)
        return {"scenario": scenario.number, "teardown": True}
    await declare_topology(params, scenario)
    if args.setup_only:
        return {"scenario": scenario.number, "setup": True}
    try:
        duration = args.duration or (COUNT_MODE_CAP if args.count else DEFAULT_DURATION)
        options = RunOptions(
            duration=duration,
            count=args.count,
            drain_idle=args.drain_idle,
            drain_timeout=max(RunOptions.drain_timeout, args.drain_idle),
        )
        return await run(params, scenario, options)
    finally:
        if not args.keep_topology:
            await delete_topology(params, scenario)


def _event_loop_policy() -> None:
    try:
        import uvloop  # noqa: PLC0415 - optional speed-up
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s loadgen %(levelname)s %(message)s",
    )
    args = parse_args(argv)
    try:
        scenario = scenario_from_args(args)
    except ValueError as error:
        print(json.dumps({"scenario": args.scenario, "error": str(error)}))
        return 2
    _event_loop_policy()
    try:
        result = asyncio.run(main_async(args, scenario))
    except (AmqpError, OSError) as error:
        print(json.dumps({"scenario": args.scenario, "error": str(error)}))
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
