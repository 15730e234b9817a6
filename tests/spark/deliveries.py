"""Deliveries as a broker sends them from a stream, for the executor parser's tests.

The frames are encoded by pika (an encoder independent of the parser), with `x-stream-offset`
last in the headers as a long, as RabbitMQ 3.10.8 and hutch-broker put it. Shared by the parser's
tests (test_streamframes) and its C run loop's (test_framescan).
"""

from __future__ import annotations

import struct
from typing import Any

from pika import frame, spec

_BIG = 1 << 40  # encodes as 'l' in pika; patched to the real offset below


def delivery(
    offset: int,
    body: bytes = b"hello",
    *,
    tag: int | None = None,
    exchange: str = "",
    routing_key: str = "s",
    frame_max: int = 4096,
    offset_type: str = "l",
    **props: Any,
) -> bytes:
    """One basic.deliver, its content header and body frames, as a broker sends them."""
    headers = {**props.pop("headers", {}), "x-stream-offset": _BIG if offset_type == "l" else 1}
    properties = spec.BasicProperties(headers=headers, **props)
    deliver = spec.Basic.Deliver("ctag", tag or offset + 1, False, exchange, routing_key)
    raw = frame.Method(1, deliver).marshal() + frame.Header(1, len(body), properties).marshal()
    mark = b"\x0fx-stream-offset"
    placeholder = b"l" + struct.pack(">q", _BIG) if offset_type == "l" else b"I" + b"\0\0\0\1"
    at = raw.index(mark + placeholder) + len(mark)  # the broker's header, not a lookalike
    if offset_type == "l":
        raw = raw[: at + 1] + struct.pack(">q", offset) + raw[at + 9 :]
    else:  # a short int, as a client may encode small numbers: the parser's slow path
        assert raw[at : at + 1] == b"I"
        raw = raw[: at + 1] + struct.pack(">i", offset) + raw[at + 5 :]
    size = frame_max - 8
    for low in range(0, len(body), size):
        raw += frame.Body(1, body[low : low + size]).marshal()
    return raw
