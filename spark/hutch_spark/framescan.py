"""The executor reader's inner loop: a run of deliveries of one template, in C when built.

Why: streamframes.SliceParser walks each delivery's frames in Python, about 6 us of an
executor's CPU a message, more than the broker spends sending it. Most deliveries of a stream
slice are alike: consecutive offsets, one header frame and one body frame, the same exchange,
routing key and properties but for the `x-stream-offset` value. `scan` takes such a run in one
call and returns only what differs, the bodies; the parser fills the offsets (consecutive) and
the template numbers (all one) as whole ranges. Anything else stops the run where it is, and
the parser's own path takes that delivery, so the results are the same with or without a run.

`scan` is the C loop (`hutch_spark._framescan`) unless it was not built (the extension is
optional: no compiler where hutch-spark was installed) or `HUTCH_SPARK_PURE_PYTHON` is set;
`scan_python` is its twin, the same results and stops (tests/spark/test_framescan.py). Pure.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Final

from hutch_spark.amqpframe import BASIC_DELIVER, BODY, FRAME_END, HEADER, I64, METHOD, U32, U64

Scan = Callable[[bytes, int, bytes, int, int, int], tuple[int, list[bytes], int]]


def scan_python(
    buf: bytes, pos: int, key: bytes, at: int, expected: int, end: int
) -> tuple[int, list[bytes], int]:
    """From `pos`, the complete deliveries whose template key (exchange and routing key as
    framed, then the properties without the 8 bytes at `at`) is `key`, whose content is one
    header frame and one non-empty body frame, and whose offsets (the 8 bytes at `at`) are
    `expected`, `expected + 1`, ... below `end`: where the first other one starts, their bodies,
    and the last one's delivery tag (0 for none). Reads nothing outside the buffer, and no
    field outside its frame."""
    if pos < 0 or pos > len(buf):
        raise ValueError("scan: pos outside the buffer")
    bodies: list[bytes] = []
    tag = 0
    while at >= 0 and expected < end:
        found = _like(buf, pos, key, at, expected)
        if found is None:
            break
        body, tag, pos = found
        bodies.append(body)
        expected += 1
    return pos, bodies, tag


def _like(buf: bytes, pos: int, key: bytes, at: int, offset: int) -> tuple[bytes, int, int] | None:
    """The delivery at `pos` if it is one `scan_python` takes: its body, its delivery tag and
    where the next frame starts."""
    size = len(buf)
    if pos + 11 > size or buf[pos] != METHOD:
        return None
    frame_end = pos + 7 + U32.unpack_from(buf, pos + 3)[0]
    if frame_end >= size or buf[frame_end] != FRAME_END or frame_end < pos + 11:
        return None
    q = pos + 11
    if U32.unpack_from(buf, pos + 7)[0] != BASIC_DELIVER or q >= frame_end:
        return None
    q += 1 + buf[q]  # past the consumer tag: the delivery tag, redelivered, the route
    route = q + 9
    if route >= frame_end:
        return None
    route_end = route + 1 + buf[route]
    if route_end >= frame_end:
        return None
    route_end += 1 + buf[route_end]
    head = frame_end + 1
    if route_end > frame_end or head + 7 > size or buf[head] != HEADER:
        return None
    head_end = head + 7 + U32.unpack_from(buf, head + 3)[0]
    if head_end >= size or buf[head_end] != FRAME_END or head_end < head + 21:
        return None
    body_at = head_end + 1
    if body_at + 7 > size or buf[body_at] != BODY:
        return None
    (length,) = U32.unpack_from(buf, body_at + 3)
    nxt = body_at + 7 + length
    if length == 0 or length != U64.unpack_from(buf, head + 11)[0]:
        return None
    value = head + 19 + at  # the properties start after class, weight and body size
    if nxt >= size or buf[nxt] != FRAME_END or value + 8 > head_end:
        return None
    if buf[route:route_end] + buf[head + 19 : value] + buf[value + 8 : head_end] != key:
        return None
    if I64.unpack_from(buf, value)[0] != offset:
        return None
    return buf[body_at + 7 : nxt], U64.unpack_from(buf, q)[0], nxt + 1


def _load_native() -> Scan | None:
    """The C loop, unless it was not built or ``HUTCH_SPARK_PURE_PYTHON`` is set."""
    if os.environ.get("HUTCH_SPARK_PURE_PYTHON"):
        return None
    try:
        # by name: a static import would make the package (whose __init__ imports the
        # sources) this module's dependency for import-linter, wherever the .so is absent
        native: Scan = importlib.import_module("hutch_spark._framescan").scan
    except ImportError:
        return None
    return native


_native = _load_native()
NATIVE: Final = _native is not None
"""True when `scan` runs in C."""
scan: Scan = _native if _native is not None else scan_python
