"""A publish's content frames read in one call: the content header and every body frame.

Why a module: ``Connection._publish`` takes a whole publish (method, content header, body) in
one call when it is all in the buffer and sound, and the content part of that was a fifth of
the read stage in scenario 1 of the benchmark, where hutch-broker's one loop is the limit
(docs/bench/profile.md). ``scan`` is that part in C (``hutch_broker.protocol._content``) when
the extension is built; ``scan_python`` is its twin, the same results for every input, used
when it is not (or ``HUTCH_BROKER_PURE_PYTHON`` is set), and the reference the C is tested
against (tests/broker/protocol/test_content_native.py).

``scan(buffer, pos, channel, frame_max, max_body, last_raw)`` looks at the content header
frame at ``pos`` and the body frames after it. When all of them are in ``buffer`` and sound
(frame types, the channel, each size within ``frame_max``, the end octets, class 60, a body
size within ``max_body``, body frames adding up to it exactly) it returns ``(raw_properties,
body, position after the last frame)``, ``raw_properties`` being ``last_raw`` itself when its
bytes are the same (the caller knows that one is valid). Otherwise None: nothing is read, and
the connection takes the frames the general way, which applies every rule and raises every
error.

``scan_publish(buffer, pos, channel, frame_max, max_body, last_payload, last_raw)`` is the
same for a whole publish at ``pos``: its basic.publish method frame on ``channel`` (sound:
within ``frame_max``, its end octet) carrying exactly the argument bytes ``last_payload``,
then ``scan``'s content frames. The connection calls it first for the channel whose last
publish it took whole, with that publish's decoded arguments: a publisher repeats its exchange,
routing key and flags, so the common publish costs the read one call, no frame header of its
own read in Python (docs/bench/profile.md). Anything else is None and goes the general way.
"""

from __future__ import annotations

from collections.abc import Callable

from hutch_broker import native
from hutch_broker.protocol import codec

_unpack_header = codec.CONTENT_HEADER_START.unpack_from  # type, channel, size, class, weight, body
_unpack_frame = codec.FRAME_HEADER_STRUCT.unpack_from  # type, channel, size

Scanned = tuple[bytes, bytes, int]
Scan = Callable[[bytearray, int, int, int, int, bytes], "Scanned | None"]
ScanPublish = Callable[[bytearray, int, int, int, int, bytes, bytes], "Scanned | None"]
_PUBLISH_ID = codec.BASIC_PUBLISH.to_bytes(4, "big")  # class 60, method 40


def scan_python(
    buffer: bytearray, pos: int, channel: int, frame_max: int, max_body: int, last_raw: bytes
) -> Scanned | None:
    """The content frames at ``pos`` (the module docstring); the C extension's twin."""
    length = len(buffer)
    if pos < 0 or length - pos < codec.CONTENT_HEADER_START.size:
        return None
    frame_type, frame_channel, size, class_id, _, body_size = _unpack_header(buffer, pos)
    end = pos + 7 + size
    if (
        frame_type != codec.FRAME_HEADER
        or frame_channel != channel
        or not 14 <= size <= frame_max
        or end >= length
        or buffer[end] != codec.FRAME_END
        or class_id != codec.BASIC_CLASS
        or body_size > max_body
    ):
        return None
    raw_start, raw_end = pos + 19, end
    pos = end + 1
    chunks: list[bytearray] = []
    received = 0
    while received < body_size:
        if length - pos < codec.FRAME_OVERHEAD:
            return None
        frame_type, frame_channel, size = _unpack_frame(buffer, pos)
        end = pos + 7 + size
        if (
            frame_type != codec.FRAME_BODY
            or frame_channel != channel
            or size > frame_max
            or end >= length
            or buffer[end] != codec.FRAME_END
            or received + size > body_size
        ):
            return None
        chunks.append(buffer[pos + 7 : end])
        received += size
        pos = end + 1
    same = len(last_raw) == raw_end - raw_start and buffer.startswith(last_raw, raw_start)
    raw = last_raw if same else bytes(buffer[raw_start:raw_end])
    return raw, b"".join(chunks), pos


def scan_publish_python(
    buffer: bytearray,
    pos: int,
    channel: int,
    frame_max: int,
    max_body: int,
    last_payload: bytes,
    last_raw: bytes,
) -> Scanned | None:
    """A whole publish repeating ``last_payload`` at ``pos`` (the module docstring); the C
    extension's twin."""
    size = 4 + len(last_payload)
    end = pos + 7 + size
    if pos < 0 or end >= len(buffer) or size > frame_max:
        return None
    frame_type, frame_channel, frame_size = _unpack_frame(buffer, pos)
    if (
        frame_type != codec.FRAME_METHOD
        or frame_channel != channel
        or frame_size != size
        or buffer[end] != codec.FRAME_END
        or not buffer.startswith(_PUBLISH_ID, pos + 7)
        or not buffer.startswith(last_payload, pos + 11)
    ):
        return None
    return scan_python(buffer, end + 1, channel, frame_max, max_body, last_raw)


# The C scan, unless it was not built or HUTCH_BROKER_PURE_PYTHON is set (hutch_broker.native).
NATIVE: Scan | None = native.load("hutch_broker.protocol._content", "scan")
scan: Scan = NATIVE or scan_python
NATIVE_PUBLISH: ScanPublish | None = native.load("hutch_broker.protocol._content", "scan_publish")
scan_publish: ScanPublish = NATIVE_PUBLISH or scan_publish_python
