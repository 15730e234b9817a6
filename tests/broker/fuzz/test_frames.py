"""AMQP frame fuzzer over real sockets, with a canary client timing its round trips beside it.

Each fuzz connection pipelines a valid handshake and ``channel.open`` (or, for some, a mutated
handshake) and then a batch of hostile frames: method frames of every client method with random
arguments, truncated frames, bad frame-end octets, oversized sizes, wrong channel numbers, bad
field tables, content with lying sizes, consumers fed messages with random headers and random
acks, and plain random bytes.  The broker must answer all of
it with protocol errors: no crash, no traceback in its log, never 541 INTERNAL_ERROR, and the
canary's publish + get round trip must never stall beyond ``MAX_STALL_MS`` of the broker's own
time: the round trip less the time the broker's loop thread and the canary waited for a CPU
(canary.py), which is the loaded machine's share, not a stalled loop's.

``HUTCH_FUZZ_SEED=<seed> HUTCH_FUZZ_ONLY=<n,m>`` replays only connections n and m of that run
(a failure names them), one at a time.
"""

import asyncio
import contextlib
import json
import os
import random
import struct
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pamqp import commands, encode
from pamqp import frame as pamqp_frame

BATCH = 20  # hostile frames per connection
CONCURRENCY = 8
IDLE_S = 0.05  # a connection the broker neither answers nor closes for this long is done
MAX_STALL_MS = float(os.environ.get("HUTCH_FUZZ_MAX_STALL_MS", "50"))
HEADER = b"AMQP\x00\x00\x09\x01"
CANARY = Path(__file__).parent / "canary.py"
CONNECTION_CLOSE = struct.pack(">I", commands.Connection.Close.index)
BASIC_DELIVER = struct.pack(">I", commands.Basic.Deliver.index)

# Every method a client may send (and a few it may not), to be filled with random arguments.
CLIENT_METHODS: list[Any] = [
    commands.Connection.StartOk,
    commands.Connection.TuneOk,
    commands.Connection.Open,
    commands.Connection.Close,
    commands.Connection.CloseOk,
    commands.Connection.Blocked,
    commands.Channel.Open,
    commands.Channel.Flow,
    commands.Channel.FlowOk,
    commands.Channel.Close,
    commands.Channel.CloseOk,
    commands.Exchange.Declare,
    commands.Exchange.Delete,
    commands.Exchange.Bind,
    commands.Exchange.Unbind,
    commands.Queue.Declare,
    commands.Queue.Bind,
    commands.Queue.Purge,
    commands.Queue.Delete,
    commands.Queue.Unbind,
    commands.Basic.Qos,
    commands.Basic.Consume,
    commands.Basic.Cancel,
    commands.Basic.Publish,
    commands.Basic.Get,
    commands.Basic.Ack,
    commands.Basic.Reject,
    commands.Basic.RecoverAsync,
    commands.Basic.Recover,
    commands.Basic.Nack,
    commands.Basic.Deliver,
    commands.Tx.Select,
    commands.Tx.Commit,
    commands.Tx.Rollback,
    commands.Confirm.Select,
]
NAMES = ["", "q", "amq.direct", "amq.topic", "x", "café", "q!", "amq.gen-x", "a" * 255]


def method_frame(method: Any, channel: int = 1) -> bytes:
    return pamqp_frame.marshal(method, channel)


def handshake() -> bytes:
    return b"".join(
        [
            HEADER,
            method_frame(commands.Connection.StartOk(response="\0guest\0guest"), 0),
            method_frame(commands.Connection.TuneOk(2047, 131072, 0), 0),
            method_frame(commands.Connection.Open("/"), 0),
            *(method_frame(commands.Channel.Open(), channel) for channel in range(1, BATCH + 1)),
        ]
    )


def raw_frame(kind: int, channel: int, payload: bytes, end: int = 0xCE) -> bytes:
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + bytes((end,))


# -- random values -------------------------------------------------------------------------


def random_text(rng: random.Random) -> str:
    choice = rng.random()
    if choice < 0.4:
        return rng.choice(NAMES)
    if choice < 0.6:
        return "".join(rng.choice("ab.#*é!\0 ") for _ in range(rng.randrange(0, 40)))
    return "x" * rng.choice([0, 1, 127, 128, 255])


def random_table(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for _ in range(rng.randrange(0, 4)):
        key = rng.choice(
            [
                "x-match",
                "x-max-length",
                "x-message-ttl",
                "x-expires",
                "x-overflow",
                "x-dead-letter-exchange",
                "x-queue-type",
                "alternate-exchange",
                "x-max-priority",
                "k",
                "CC",
                "BCC",
            ]
        )
        table[key] = random_value(rng, depth + 1)
    return table


def random_value(rng: random.Random, depth: int) -> Any:
    kind = rng.randrange(8 if depth < 3 else 6)
    if kind == 0:
        return rng.choice([0, 1, -1, 255, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)])
    if kind == 1:
        return random_text(rng)
    if kind == 2:
        return rng.choice([True, False])
    if kind == 3:
        return rng.choice([0.5, -1.0, 1e30])
    if kind == 4:
        return None
    if kind == 5:
        return rng.choice(["all", "any", "drop-head", "reject-publish", "quorum", "stream"])
    if kind == 6:
        return random_table(rng, depth)
    return [random_value(rng, depth + 1) for _ in range(rng.randrange(0, 3))]


def random_argument(rng: random.Random, amqp_type: str) -> bytes:
    """One encoded argument: usually of its declared type, sometimes of another one."""
    if rng.random() < 0.1:
        amqp_type = rng.choice(["octet", "short", "long", "longlong", "shortstr", "table"])
    if amqp_type == "bit":
        return b""
    if amqp_type == "octet":
        return bytes((rng.randrange(256),))
    if amqp_type == "short":
        return struct.pack(">H", rng.choice([0, 1, 2, 2047, 2048, 65535, rng.randrange(65536)]))
    if amqp_type == "long":
        return struct.pack(">I", rng.choice([0, 1, 4095, 131072, 2**32 - 1, rng.randrange(2**32)]))
    if amqp_type == "longlong":
        return struct.pack(">Q", rng.choice([0, 1, 2, 2**63, 2**64 - 1, rng.randrange(2**64)]))
    if amqp_type == "shortstr":
        raw = random_text(rng).encode("utf-8")[:255]
        if rng.random() < 0.05:
            raw = bytes([0xC3, 0x28, 0xFF])  # not UTF-8
        return bytes((len(raw),)) + raw
    if amqp_type == "longstr":
        raw = random_text(rng).encode("utf-8")
        return struct.pack(">I", len(raw)) + raw
    if amqp_type == "table":
        return bad_table(rng) if rng.random() < 0.3 else encode.field_table(random_table(rng))
    return b""


def bad_table(rng: random.Random) -> bytes:
    """A field table that lies: about its size, a key's length, a value's type or its depth."""
    good = encode.field_table(random_table(rng)) or b"\0\0\0\0"
    choice = rng.randrange(5)
    if choice == 0:
        return struct.pack(">I", len(good) + rng.randrange(1, 1000)) + good[4:]
    if choice == 1:
        return struct.pack(">I", 3) + b"\x05abc"  # key runs past the table
    if choice == 2:
        body = b"\x01k" + bytes((rng.choice(b"QzYw!"),)) + b"\x00" * 8
        return struct.pack(">I", len(body)) + body  # unknown field type
    if choice == 3:
        nested = b"\x00\x00\x00\x00"
        for _ in range(rng.choice([70, 500])):
            body = b"\x01kF" + nested
            nested = struct.pack(">I", len(body)) + body
        return nested
    body = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
    return struct.pack(">I", len(body)) + body


def random_method_payload(rng: random.Random) -> bytes:
    method = rng.choice(CLIENT_METHODS)
    parts = [struct.pack(">I", method.index)]
    bits = 0
    for name in method.__slots__:
        amqp_type = method.amqp_type(name)
        if amqp_type == "bit":
            bits += 1
            continue
        if bits:
            parts.append(bytes((rng.randrange(256),)))
            bits = 0
        parts.append(random_argument(rng, amqp_type))
    if bits:
        parts.append(bytes((rng.randrange(256),)))
    return b"".join(parts)


def content(rng: random.Random, channel: int) -> bytes:
    """A publish with a content header and body whose sizes or properties may lie."""
    publish = raw_frame(1, channel, random_method_payload_of(commands.Basic.Publish, rng))
    body_size = rng.choice([0, 1, 10, 2**24 + 1, 2**63, rng.randrange(100)])
    flags = rng.choice([0, 0x2000, 0x1000, 0xFFFF, 0x0001, rng.randrange(65536)])
    props = struct.pack(">H", flags)
    if flags & 0x2000:
        props += bad_table(rng) if rng.random() < 0.5 else encode.field_table(random_table(rng))
    header = struct.pack(">HHQ", rng.choice([60, 60, 10, 0]), 0, body_size) + props
    frames = [publish, raw_frame(2, channel, header)]
    for _ in range(rng.randrange(0, 3)):
        frames.append(raw_frame(3, channel, bytes(rng.randrange(256) for _ in range(20))))
    return b"".join(frames)


def random_method_payload_of(method: Any, rng: random.Random) -> bytes:
    exchange = rng.choice(["", "amq.direct", "amq.fanout", "x", "nope"]).encode()
    key = random_text(rng).encode("utf-8")[:255]
    return (
        struct.pack(">IH", method.index, 0)
        + bytes((len(exchange),))
        + exchange
        + bytes((len(key),))
        + key
        + bytes((rng.randrange(4),))
    )


def consumed(rng: random.Random, channel: int) -> bytes:
    """A consumer on its own queue, then publishes with random properties and random settles:
    the deliver path (raw properties forwarded, tags, requeues) under hostile headers."""
    queue = f"fz.{channel}.{rng.randrange(4)}"
    frames = [
        method_frame(commands.Basic.Qos(prefetch_count=rng.choice([0, 1, 2])), channel),
        method_frame(commands.Queue.Declare(queue=queue, auto_delete=True), channel),
        method_frame(commands.Basic.Consume(queue=queue, consumer_tag=queue), channel),
    ]
    for _ in range(rng.randrange(1, 4)):
        props = struct.pack(">H", 0x2000 | 0x1000) + encode.field_table(random_table(rng))
        props += bytes((rng.choice([1, 2]),))
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 16)))
        publish = struct.pack(">IH", commands.Basic.Publish.index, 0) + b"\x00"
        publish += bytes((len(queue),)) + queue.encode() + b"\x00"
        frames += [
            raw_frame(1, channel, publish),
            raw_frame(2, channel, struct.pack(">HHQ", 60, 0, len(body)) + props),
            raw_frame(3, channel, body),
        ]
    settle = rng.choice([commands.Basic.Ack, commands.Basic.Nack, commands.Basic.Reject])
    tag = rng.choice([1, 2, 3, 0, 99])
    if settle is commands.Basic.Reject:
        frames.append(method_frame(settle(tag, requeue=rng.random() < 0.5), channel))
    else:
        frames.append(method_frame(settle(tag, multiple=rng.random() < 0.5), channel))
    return b"".join(frames)


FATAL_KINDS = frozenset({3, 4, 5, 6, 9})  # framing errors: the broker closes the connection


def hostile_frame(rng: random.Random, own_channel: int, kind: int) -> bytes:
    """One hostile input, mostly on its own open channel: a channel error leaves the others."""
    channel = own_channel if rng.random() < 0.8 else rng.choice([0, 2047, 2048, 65535])
    if kind <= 2:
        return raw_frame(1, channel, random_method_payload(rng))
    if kind == 3:
        frame = raw_frame(1, channel, random_method_payload(rng))
        return frame[: rng.randrange(len(frame))]
    if kind == 4:
        return raw_frame(1, channel, random_method_payload(rng), end=rng.randrange(256))
    if kind == 5:
        return (
            struct.pack(
                ">BHI",
                rng.choice([1, 2, 3]),
                channel,
                rng.choice([2**31, 2**32 - 1, 131065, 131073]),
            )
            + b"\0" * 16
        )
    if kind == 6:
        return raw_frame(
            rng.choice([0, 4, 8, 9, 255]),
            channel,
            bytes(rng.randrange(256) for _ in range(rng.randrange(0, 12))),
        )
    if kind == 7:
        return content(rng, channel)
    if kind == 10:
        return consumed(rng, own_channel)
    if kind == 8:
        return raw_frame(8, channel, b"")  # heartbeat, often on a channel
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))


def hostile_handshake(rng: random.Random) -> bytes:
    """A handshake with one part mutated (header, start-ok, tune-ok or open)."""
    parts = [
        HEADER,
        method_frame(commands.Connection.StartOk(response="\0guest\0guest"), 0),
        method_frame(commands.Connection.TuneOk(2047, 131072, 0), 0),
        method_frame(commands.Connection.Open("/"), 0),
    ]
    index = rng.randrange(len(parts))
    if index == 0:
        parts[0] = rng.choice([b"AMQP\x00\x00\x09\x02", b"HTTP/1.1", b"AMQP\x01\x01\x00\x09", b""])
    else:
        parts[index] = raw_frame(1, rng.choice([0, 0, 1]), random_method_payload(rng))
    return b"".join(parts)


# -- one connection ----------------------------------------------------------------------------


def methods_received(data: bytes) -> list[bytes]:
    """The payloads of the method frames the broker sent."""
    found, offset = [], 0
    while offset + 7 <= len(data):
        kind, _, size = struct.unpack_from(">BHI", data, offset)
        if kind == 1:
            found.append(data[offset + 7 : offset + 7 + size])
        offset += size + 8
    return found


def close_code(methods: list[bytes]) -> int | None:
    """The reply code of the broker's connection.close, if it sent one."""
    for payload in methods:
        if payload[:4] == CONNECTION_CLOSE and len(payload) >= 6:
            return int(struct.unpack_from(">H", payload, 4)[0])
    return None


async def one_connection(port: int, inputs: bytes) -> tuple[int | None, int]:
    """Send ``inputs``, read until closed or idle; (connection.close code, deliveries seen)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    received = bytearray()
    try:
        writer.write(inputs)
        await writer.drain()
        while True:
            chunk = await asyncio.wait_for(reader.read(65536), IDLE_S)
            if not chunk:
                break
            received += chunk
    except (TimeoutError, ConnectionError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    methods = methods_received(bytes(received))
    return close_code(methods), sum(payload[:4] == BASIC_DELIVER for payload in methods)


def connection_inputs(fuzz: Any, index: int) -> tuple[bytes, int]:
    rng = fuzz.rng("frames", index)
    if rng.random() < 0.05:
        return hostile_handshake(rng), 1
    # Framing errors end the connection, so they go last: every input before them is parsed.
    kinds = sorted(
        (rng.choice([0, 0, 1, 1, 2, 2, 7, 7, 10, 10, 3, 4, 5, 6, 8, 9]) for _ in range(BATCH)),
        key=lambda kind: kind in FATAL_KINDS,
    )
    frames = [hostile_frame(rng, channel, kind) for channel, kind in enumerate(kinds, start=1)]
    return handshake() + b"".join(frames), len(frames)


# -- the run -----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_frame_fuzzer(hutch_broker, fuzz, tracebacks, tmp_path):
    stop, report = tmp_path / "stop", tmp_path / "canary.json"
    canary = await asyncio.create_subprocess_exec(
        sys.executable,
        str(CANARY),
        str(hutch_broker.amqp_port),
        str(stop),
        str(report),
        str(hutch_broker.pid),
    )
    codes: Counter[int | None] = Counter()
    internal: list[str] = []
    deliveries = [0]
    spans: list[tuple[float, float, int]] = []  # (opened, closed, connection number)
    sent = 0
    started = time.monotonic()
    try:
        await asyncio.sleep(0.5)  # the canary connects first
        semaphore = asyncio.Semaphore(CONCURRENCY)
        index = 0

        async def run(number: int) -> None:
            nonlocal sent
            data, count = connection_inputs(fuzz, number)
            async with semaphore:
                opened = time.time()
                code, delivered = await one_connection(hutch_broker.amqp_port, data)
                deliveries[0] += delivered
                spans.append((opened, time.time(), number))
            sent += count
            codes[code] += 1
            if code == 541:
                internal.append(f"connection {number}: {data.hex()}")

        only = os.environ.get("HUTCH_FUZZ_ONLY")  # "12,57": replay just those connections
        if only:
            for number in map(int, only.split(",")):
                await run(number)
                index += 1
        while sent < fuzz.inputs and not only:
            wave = max(1, (fuzz.inputs - sent) // BATCH)
            await asyncio.gather(*(run(index + n) for n in range(min(wave, 200))))
            index += min(wave, 200)
    finally:
        stop.touch()
        await asyncio.wait_for(canary.wait(), 30)
    elapsed = time.monotonic() - started
    canary_report = json.loads(report.read_text())
    sys.stderr.write(
        f"frame fuzzer: {sent} inputs over {index} connections in {elapsed:.1f} s; "
        f"{deliveries[0]} deliveries; close codes {dict(codes)}; canary {canary_report}\n"
    )
    assert hutch_broker.running, "the broker died"
    assert internal == [], f"541 INTERNAL_ERROR for (replay with the seed): {internal[:3]}"
    found = tracebacks(hutch_broker)
    assert found == [], "\n\n".join(found[:3])
    assert canary_report["errors"] == []
    assert canary_report["round_trips"] > 100
    _, round_trip_ms, began = canary_report["worst"][0] if canary_report["worst"] else (0, 0, 0)
    suspects = [
        n
        for opened, closed, n in spans
        if opened <= began + round_trip_ms / 1000 and closed >= began
    ]
    assert canary_report["stall_max_ms"] <= MAX_STALL_MS, (
        f"{canary_report}; fuzz connections open during the worst stall: {suspects}"
    )
