"""A small AMQP 0-9-1 load generator: ``python -m hutch_cli.perftest --uri amqp://... -z 10``.

Why this and not RabbitMQ PerfTest or pika: ``kubectl hutch perf-test`` runs it as a Job in the
Broker's own image, which holds Python, the Hutch wheel and its base dependencies only: no Java
for PerfTest, and pika is an extra of the Spark part, not in the image. pamqp is a base
dependency (the broker's codec for control methods), so the generator needs nothing the image
does not already have, and no image pull from the internet. It is a smoke-and-figures tool, not
the project's benchmark (bench/ measures with PerfTest and a leaner client).

Shape: one connection per producer and per consumer, as PerfTest opens them. Producers publish
to one queue through the default exchange, each message stamped with its send time; with
``-c N`` they wait for publisher confirms with at most N outstanding. Consumers ack with
``multiple`` every half prefetch and measure latency from the stamp. After ``-z`` seconds the
producers stop, the consumers get up to ``DRAIN_SECONDS`` to receive what was sent, and the
summary (``perffigures``) is printed. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import ssl
import struct
import sys
import time
from typing import Any

from pamqp import body as pamqp_body
from pamqp import commands, frame
from pamqp import header as pamqp_header

from hutch_cli import perffigures
from hutch_cli.perffigures import Figures, Options

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_MAX = 131072
STAMP = struct.Struct(">Q")  # the send time in microseconds, the body's first 8 bytes
DRAIN_SECONDS = 5.0
STEP_TIMEOUT = 15.0  # one handshake step, one declare
BATCH = 64  # publishes written between two drains


class AmqpError(Exception):
    """The broker closed the connection or channel, or spoke out of turn."""


def now_us() -> int:
    return time.monotonic_ns() // 1000


class Link:
    """One connection with channel 1 open."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.frame_max = FRAME_MAX

    @classmethod
    async def open(cls, options: Options, name: str) -> Link:
        host, port, tls = options.address
        context = ssl.create_default_context(cafile=options.cacert) if tls else None
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                host, port, ssl=context,
                server_hostname=(options.server_name or host) if tls else None,
            ),
            STEP_TIMEOUT,
        )  # fmt: skip
        link = cls(reader, writer)
        writer.write(PROTOCOL_HEADER)
        await link.expect(commands.Connection.Start, channel=0)
        user, password = options.credentials
        properties: dict[str, Any] = {"product": "hutch perf-test", "connection_name": name}
        link.send(0, commands.Connection.StartOk(properties, "PLAIN", f"\0{user}\0{password}"))
        tune = await link.expect(commands.Connection.Tune, channel=0)
        link.frame_max = min(tune.frame_max or FRAME_MAX, FRAME_MAX)
        link.send(0, commands.Connection.TuneOk(tune.channel_max, link.frame_max, 0))
        link.send(0, commands.Connection.Open(options.vhost))
        await link.expect(commands.Connection.OpenOk, channel=0)
        link.send(1, commands.Channel.Open())
        await link.expect(commands.Channel.OpenOk)
        return link

    def send(self, channel: int, value: Any) -> None:
        self.writer.write(frame.marshal(value, channel))

    async def read(self) -> tuple[int, Any]:
        head = await self.reader.readexactly(7)
        kind, channel, size = struct.unpack(">BHI", head)
        payload = await self.reader.readexactly(size + 1)
        if kind == 3:  # a body: no need for pamqp's copy
            return channel, pamqp_body.ContentBody(payload[:-1])
        return channel, frame.unmarshal(head + payload)[2]

    async def expect(self, kind: type, channel: int = 1) -> Any:
        """The next frame of ``kind``, skipping heartbeats; a close is an AmqpError."""
        while True:
            got_channel, value = await asyncio.wait_for(self.read(), STEP_TIMEOUT)
            check_close(value)
            if isinstance(value, kind) and got_channel == channel:
                return value

    async def close(self) -> None:
        try:
            self.send(0, commands.Connection.Close(200, "perf-test done", 0, 0))
            await asyncio.wait_for(self.expect(commands.Connection.CloseOk, channel=0), 2.0)
        except (AmqpError, OSError, TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            self.writer.close()


def check_close(value: Any) -> None:
    if isinstance(value, commands.Connection.Close | commands.Channel.Close):
        raise AmqpError(f"the broker closed the {value.name.split('.')[0].lower()}: "
                        f"{value.reply_code} {value.reply_text}")  # fmt: skip


def body_frames(size: int, frame_max: int, stamp: int) -> bytes:
    """The body frames of one message of ``size`` bytes starting with its stamp."""
    payload = STAMP.pack(stamp) + b"x" * (size - STAMP.size)
    room = frame_max - 8
    return b"".join(
        struct.pack(">BHI", 3, 1, len(chunk)) + chunk + b"\xce"
        for chunk in (payload[at : at + room] for at in range(0, len(payload), room))
    )


async def produce(link: Link, options: Options, queue: str, figures: Figures, until: float) -> None:
    outstanding: collections.deque[int] = collections.deque()
    window = asyncio.Semaphore(options.confirm or 1)
    if options.confirm:
        link.send(1, commands.Confirm.Select())
        await link.expect(commands.Confirm.SelectOk)
    settled = asyncio.Event()  # set whenever no publish awaits its confirm
    listener = asyncio.create_task(_confirms(link, figures, outstanding, window, settled))
    properties = commands.Basic.Properties(delivery_mode=2 if options.persistent else 1)
    head = frame.marshal(commands.Basic.Publish(exchange="", routing_key=queue), 1) + frame.marshal(
        pamqp_header.ContentHeader(0, options.size, properties), 1
    )
    tag = 0
    try:
        while time.monotonic() < until and not (options.messages and tag >= options.messages):
            if options.confirm and not await _acquire(window, until):
                break  # the confirm window stayed full until the end of the run
            tag += 1
            if options.confirm:
                outstanding.append(tag)
            link.writer.write(head + body_frames(options.size, link.frame_max, now_us()))
            figures.sent += 1
            if tag % BATCH == 0:
                await link.writer.drain()
                await asyncio.sleep(0)  # drain() does not yield below its high-water mark
                if listener.done():
                    break
        await link.writer.drain()
        if outstanding and not listener.done():  # the last confirms, briefly
            settled.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(settled.wait(), DRAIN_SECONDS)
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
    if listener.done() and not listener.cancelled() and listener.exception() is not None:
        raise listener.exception()  # type: ignore[misc]


async def _acquire(window: asyncio.Semaphore, until: float) -> bool:
    try:
        await asyncio.wait_for(window.acquire(), max(until - time.monotonic(), 0.001))
    except TimeoutError:
        return False
    return True


async def _confirms(
    link: Link,
    figures: Figures,
    outstanding: collections.deque[int],
    window: asyncio.Semaphore,
    settled: asyncio.Event,
) -> None:
    """Reads what the broker sends a producer: confirms, returns, a close."""
    while True:
        _channel, value = await link.read()
        check_close(value)
        if isinstance(value, commands.Basic.Ack | commands.Basic.Nack):
            done = _settle(outstanding, value.delivery_tag, value.multiple)
            if isinstance(value, commands.Basic.Ack):
                figures.confirmed += done
            else:
                figures.nacked += done
            for _ in range(done):
                window.release()
            if not outstanding:
                settled.set()
        elif isinstance(value, commands.Basic.Return):
            figures.returned += 1


def _settle(outstanding: collections.deque[int], tag: int, multiple: bool) -> int:
    if multiple:
        done = 0
        while outstanding and outstanding[0] <= tag:
            outstanding.popleft()
            done += 1
        return done
    if tag in outstanding:
        outstanding.remove(tag)
        return 1
    return 0


async def consume(link: Link, options: Options, queue: str, figures: Figures) -> None:
    link.send(1, commands.Basic.Qos(prefetch_count=options.prefetch))
    await link.expect(commands.Basic.QosOk)
    link.send(1, commands.Basic.Consume(queue=queue))
    await link.expect(commands.Basic.ConsumeOk)
    every = max(1, options.prefetch // 2)
    unacked, tag, expected, parts = 0, 0, 0, bytearray()
    while True:
        _channel, value = await link.read()
        if isinstance(value, commands.Basic.Deliver):
            tag, parts = value.delivery_tag or 0, bytearray()
        elif isinstance(value, pamqp_header.ContentHeader):
            expected = value.body_size or 0
        elif isinstance(value, pamqp_body.ContentBody):
            parts += value.value
            if len(parts) < expected:
                continue
            figures.received += 1
            if len(parts) >= STAMP.size:
                figures.latencies.append(now_us() - STAMP.unpack_from(parts)[0])
            unacked += 1
            if unacked >= every:
                link.send(1, commands.Basic.Ack(tag, multiple=True))
                unacked = 0
        else:
            check_close(value)


async def report(figures: Figures, started: float, until: float) -> None:
    """A line a second while the producers run."""
    sent, received, seen = 0, 0, 0
    while time.monotonic() < until:
        await asyncio.sleep(1.0)
        latencies = figures.latencies[seen:]
        line = perffigures.tick_line(time.monotonic() - started, figures.sent - sent,
                                     figures.received - received, latencies)  # fmt: skip
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        sent, received, seen = figures.sent, figures.received, len(figures.latencies)


async def run(options: Options) -> Figures:
    queue = options.queue or perffigures.default_queue()
    setup = await Link.open(options, "perf-test setup")
    setup.send(1, commands.Queue.Declare(queue=queue, durable=options.persistent))
    await setup.expect(commands.Queue.DeclareOk)
    figures = Figures()
    producers = [await Link.open(options, f"perf-test producer {n}")
                 for n in range(options.producers)]  # fmt: skip
    consumers = [await Link.open(options, f"perf-test consumer {n}")
                 for n in range(options.consumers)]  # fmt: skip
    started = time.monotonic()
    until = started + options.seconds
    consuming = [asyncio.create_task(consume(link, options, queue, figures)) for link in consumers]
    ticker = asyncio.create_task(report(figures, started, until))
    try:
        await asyncio.gather(*(produce(link, options, queue, figures, until) for link in producers))
        stopped = time.monotonic()
        deadline = stopped + DRAIN_SECONDS
        while consumers and figures.received < figures.sent and time.monotonic() < deadline:
            if any(task.done() for task in consuming):
                break
            await asyncio.sleep(0.05)
        for task in consuming:
            if task.done() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
    finally:
        ticker.cancel()
        for task in consuming:
            task.cancel()
        await asyncio.gather(ticker, *consuming, return_exceptions=True)
        for link in (*producers, *consumers):
            await link.close()
    if not options.queue:
        setup.send(1, commands.Queue.Delete(queue=queue))
        await setup.expect(commands.Queue.DeleteOk)
    await setup.close()
    for line in perffigures.summary_lines(options, figures, stopped - started):
        sys.stdout.write(line + "\n")
    return figures


def main(argv: list[str] | None = None) -> int:
    try:
        options = perffigures.parse(sys.argv[1:] if argv is None else argv, dict(os.environ))
    except perffigures.OptionsError as error:
        sys.stderr.write(f"perf-test: {error}\n")
        return 2
    try:
        asyncio.run(run(options))
    except (AmqpError, OSError, TimeoutError, asyncio.IncompleteReadError) as error:
        sys.stderr.write(f"perf-test: {type(error).__name__}: {error}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
