"""A consumer that reads its socket only when told, and the delivery-memory tests' set-up.

Why: a broker's delivery-side memory bounds are about a client that stops reading; a library
reads for you, so ``RawConsumer`` speaks just enough AMQP 0-9-1 over a socket with a small
receive buffer that the test decides exactly when bytes are read. The bodies are numbered
(``body_for``) so a test sees which message came, whole and in order. Shared by
tests/broker/amqp/test_delivery_memory.py (the memory figures, serial) and
test_delivery_budget.py (what is delivered, beside the other worker).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pika
from hutch_demo.management import Management
from pamqp import commands
from pamqp import frame as pamqp_frame

MiB = 1024 * 1024
_M = TypeVar("_M")
_FRAME_HEADER = struct.Struct(">BHI")


def body_for(n: int, size: int) -> bytes:
    """Message ``n``'s body: its number, then a byte that depends on it, ``size`` bytes in all."""
    stamp = n.to_bytes(4, "big")
    return stamp + bytes([n % 251]) * (size - len(stamp))


class RawConsumer:
    """Just enough AMQP 0-9-1 to consume from one queue and then read only when told to."""

    def __init__(self, port: int, *, vhost: str = "/") -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        self.sock.connect(("127.0.0.1", port))
        self.sock.settimeout(30)
        self._buffer = bytearray()
        self._pos = 0
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self._expect(commands.Connection.Start)
        self._send(
            commands.Connection.StartOk(
                client_properties={"product": "raw"},
                mechanism="PLAIN",
                response="\x00guest\x00guest",
                locale="en_US",
            )
        )
        tune = self._expect(commands.Connection.Tune)
        self._send(commands.Connection.TuneOk(tune.channel_max, tune.frame_max, 0))
        self._send(commands.Connection.Open(virtual_host=vhost))
        self._expect(commands.Connection.OpenOk)
        self._send(commands.Channel.Open(), channel=1)
        self._expect(commands.Channel.OpenOk)

    def consume(self, queue: str, *, prefetch: int = 0) -> None:
        if prefetch:
            self._send(commands.Basic.Qos(prefetch_count=prefetch), channel=1)
            self._expect(commands.Basic.QosOk)
        self._send(commands.Basic.Consume(queue=queue, consumer_tag="raw"), channel=1)
        self._expect(commands.Basic.ConsumeOk)

    def ack(self, delivery_tag: int, *, multiple: bool = False) -> None:
        self._send(commands.Basic.Ack(delivery_tag, multiple=multiple), channel=1)

    def deliveries(self, count: int) -> Iterator[tuple[int, bool, bytes]]:
        """(delivery tag, redelivered, body) of the next ``count`` deliveries."""
        for _ in range(count):
            deliver = self._expect(commands.Basic.Deliver)
            kind, payload = self._frame()
            if kind != 2:
                raise AssertionError(f"content header expected, got frame type {kind}")
            size = struct.unpack_from(">Q", payload, 4)[0]
            parts: list[bytes] = []
            while size > sum(map(len, parts)):
                kind, payload = self._frame()
                if kind != 3:
                    raise AssertionError(f"body frame expected, got frame type {kind}")
                parts.append(payload)
            yield deliver.delivery_tag or 0, bool(deliver.redelivered), b"".join(parts)

    def nothing_more(self, wait: float) -> bool:
        """True when no byte arrives within ``wait`` seconds."""
        if len(self._buffer) > self._pos:
            return False
        self.sock.settimeout(wait)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            return True
        finally:
            self.sock.settimeout(30)
        self._buffer += chunk
        return False

    def close(self) -> None:
        self.sock.close()

    # -- framing --------------------------------------------------------

    def _send(self, method: object, channel: int = 0) -> None:
        self.sock.sendall(pamqp_frame.marshal(method, channel))  # type: ignore[arg-type]

    def _expect(self, kind: type[_M]) -> _M:
        while True:
            frame_type, payload = self._frame()
            if frame_type == 8:  # heartbeat
                continue
            if frame_type != 1:
                raise AssertionError(f"method frame expected, got frame type {frame_type}")
            raw = _FRAME_HEADER.pack(1, 0, len(payload)) + payload + b"\xce"
            method = pamqp_frame.unmarshal(raw)[2]
            if not isinstance(method, kind):
                raise AssertionError(f"{kind.__name__} expected, got {method}")
            return method

    def _frame(self) -> tuple[int, bytes]:
        self._fill(7)
        frame_type, _, size = _FRAME_HEADER.unpack_from(self._buffer, self._pos)
        self._fill(7 + size + 1)
        start = self._pos + 7
        payload = bytes(self._buffer[start : start + size])
        self._pos = start + size + 1
        if self._pos > 4 * MiB:
            del self._buffer[: self._pos]
            self._pos = 0
        return frame_type, payload

    def _fill(self, wanted: int) -> None:
        while len(self._buffer) - self._pos < wanted:
            chunk = self.sock.recv(1024 * 1024)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            self._buffer += chunk


def start_broker(factory: Callable[..., Any], tmp_path: Path, watermark: int) -> Any:
    """A hutch-broker of its own at ``watermark`` bytes, with vhost "other" for guest (another
    tenant's publisher)."""
    config = tmp_path / "broker.conf"
    config.write_text(f"vm_memory_high_watermark.absolute = {watermark}\n")
    broker = factory(extra_args=["--config", str(config)])
    api = Management(broker)
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    for path, body in (("/vhosts/other", {}), ("/permissions/other/guest", everything)):
        response = api.put(path, body)
        if response.status not in (201, 204):
            raise AssertionError(f"PUT {path}: {response}")
    return broker


def publish(broker: Any, queue: str, count: int, size: int, *, persistent: bool) -> None:
    """``count`` numbered bodies (``body_for``) into durable ``queue``, with confirms."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.amqp_port))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare(queue, durable=True)
    properties = pika.BasicProperties(delivery_mode=2 if persistent else 1)
    for n in range(count):
        ch.basic_publish("", queue, body_for(n, size), properties)
    conn.close()
