"""What a pika client received on the wire: frame order and header field-table type tags.

Why: some contract items are about the wire, not about values. `x-death` `count` must be a signed
64-bit `l` (the Java client casts it to Long) and `time` a `T`; a publisher confirm must come after
the `basic.return` or `basic.deliver` of the same publish (ML-8). pika decodes `l`, `I` and `b` to
the same Python int and hides frame order, so `FrameRecorder` wraps pika's frame decoder for the
duration of a `with` block and keeps, per received frame, the method name or the raw content
header, and `typed_headers` decodes a content header's headers table keeping each value's tag.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import pika.frame

_FRAME_METHOD = 1
_FRAME_HEADER = 2
_HEADERS_FLAG = 1 << 13
_SHORTSTR_BEFORE_HEADERS = (1 << 15, 1 << 14)  # content_type, content_encoding

_FIXED = {
    b"t": ">B",
    b"b": ">b",
    b"B": ">B",
    b"s": ">h",
    b"u": ">H",
    b"I": ">i",
    b"i": ">I",
    b"l": ">q",
    b"L": ">Q",
    b"f": ">f",
    b"d": ">d",
    b"T": ">Q",
}

Typed = tuple[str, Any]  # (type tag, value); tables and arrays hold Typed values
# pika.frame.decode_frame: (bytes consumed, the frame or None); pika's frames are untyped.
DecodeFrame = Callable[[bytes], tuple[int, Any]]


@dataclass(frozen=True)
class Received:
    channel: int
    name: str  # "Basic.Ack", ... for methods; "header" for content headers
    method: Any = None
    raw_header: bytes = b""  # the content header payload after class, weight and body size


class FrameRecorder:
    """Records every frame pika decodes inside the block (all connections of the process)."""

    def __init__(self) -> None:
        self.frames: list[Received] = []
        self._original: DecodeFrame | None = None

    def __enter__(self) -> FrameRecorder:
        self._original = original = pika.frame.decode_frame

        def recording(data_in: bytes) -> tuple[int, Any]:
            consumed, frame = original(data_in)
            if frame is not None and consumed >= 8:
                self._record(data_in[:consumed], frame)
            return consumed, frame

        pika.frame.decode_frame = recording
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        pika.frame.decode_frame = self._original

    def _record(self, raw: bytes, frame: Any) -> None:
        kind, channel = raw[0], struct.unpack_from(">H", raw, 1)[0]
        if kind == _FRAME_METHOD:
            self.frames.append(Received(channel, frame.method.NAME, method=frame.method))
        elif kind == _FRAME_HEADER:
            self.frames.append(Received(channel, "header", raw_header=raw[7 + 12 : -1]))

    def names(self, channel: int | None = None) -> list[str]:
        return [frame.name for frame in self.frames if channel is None or frame.channel == channel]

    def headers(self) -> list[dict[str, Typed]]:
        """The typed headers table of every content header received, in order."""
        return [typed_headers(frame.raw_header) for frame in self.frames if frame.name == "header"]


def typed_headers(raw_properties: bytes) -> dict[str, Typed]:
    """The headers table of raw basic properties (flags first), each value as (tag, value)."""
    flags = struct.unpack_from(">H", raw_properties, 0)[0]
    offset = 2
    if not flags & _HEADERS_FLAG:
        return {}
    for bit in _SHORTSTR_BEFORE_HEADERS:
        if flags & bit:
            offset += 1 + raw_properties[offset]
    table, _ = _table(raw_properties, offset)
    return table


def plain(value: Typed) -> Any:
    """Drop the tags: a typed value as plain Python."""
    tag, inner = value
    if tag == "F":
        return {key: plain(item) for key, item in inner.items()}
    if tag == "A":
        return [plain(item) for item in inner]
    return inner


def _table(data: bytes, offset: int) -> tuple[dict[str, Typed], int]:
    (length,) = struct.unpack_from(">I", data, offset)
    offset += 4
    end = offset + length
    table: dict[str, Typed] = {}
    while offset < end:
        name_length = data[offset]
        name = data[offset + 1 : offset + 1 + name_length].decode("utf-8", "replace")
        offset += 1 + name_length
        table[name], offset = _value(data, offset)
    return table, end


def _value(data: bytes, offset: int) -> tuple[Typed, int]:
    tag = data[offset : offset + 1]
    offset += 1
    text = tag.decode("ascii", "replace")
    if tag in _FIXED:
        layout = _FIXED[tag]
        (value,) = struct.unpack_from(layout, data, offset)
        return (text, value), offset + struct.calcsize(layout)
    if tag in (b"S", b"x"):
        (length,) = struct.unpack_from(">I", data, offset)
        raw = data[offset + 4 : offset + 4 + length]
        value = raw.decode("utf-8", "replace") if tag == b"S" else raw
        return (text, value), offset + 4 + length
    if tag == b"F":
        table, offset = _table(data, offset)
        return (text, table), offset
    if tag == b"A":
        (length,) = struct.unpack_from(">I", data, offset)
        end = offset + 4 + length
        offset += 4
        items = []
        while offset < end:
            item, offset = _value(data, offset)
            items.append(item)
        return (text, items), end
    if tag == b"D":
        scale, digits = struct.unpack_from(">Bi", data, offset)
        return (text, (scale, digits)), offset + 5
    if tag == b"V":
        return (text, None), offset
    raise ValueError(f"unknown field type {tag!r} at offset {offset - 1}")
