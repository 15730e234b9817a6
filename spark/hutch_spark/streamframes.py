"""AMQP frames to stream-row columns, in bulk: the executor reader's parser. Pure: no I/O.

Why not pika: profiling an executor's read of a 200,000-message slice (py-spy) put three
quarters of the task in pika's per-frame machinery (frame objects, callbacks, one decoded
BasicProperties per message) and most of the rest in turning those objects into rows. A stream
read is one consumer on one channel, so this parser walks the received bytes with
`struct.unpack_from`, keeps per message only what is unavoidable (its offset, its body, a
template number) and leaves the rest to whole columns.

Templates: every delivery of a stream carries its offset as the `x-stream-offset` header (a
long, among headers sorted by name, as RabbitMQ 3.10.8 sends them), and otherwise the messages
of one stream tend to repeat their exchange, routing key and properties. The bytes of those
with the offset's 8 bytes cut out key a template that is decoded once per batch
(properties.decode, the same rules as the classic source); each row then points at its
template. A message with properties of its own (a unique message_id) makes a template of its
own: correct, just less shared.

`feed()` parses every complete delivery in the bytes given so far and keeps the incomplete tail
for the next call, so frames may be split anywhere. Offsets go through the slice's cursor
(streamreads.SliceCursor): consecutive offsets take a fast path, anything else (before the
slice's start, a gap left by retention, the end) the cursor's rules. Method frames other than
basic.deliver (handshake replies, a broker's close) are collected in `methods` for the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import pyarrow as pa
from pika import data

from hutch_spark import properties, records, streamrecords
from hutch_spark.amqpframe import (
    BASIC_DELIVER,
    BODY,
    FRAME,
    FRAME_END,
    HEADER,
    HEARTBEAT,
    I64,
    METHOD,
    U16,
    U32,
    U64,
)
from hutch_spark.framescan import scan

OFFSET_HEADER = "x-stream-offset"
_OFFSET_NAME_TYPED = OFFSET_HEADER.encode() + b"l"  # the name, then the long's type 'l'
_OFFSET_NAME_SIZE = len(OFFSET_HEADER)
# Field value sizes (RabbitMQ's field types, as pika and the brokers encode them): fixed ones,
# and those whose size is a long prefix (long string, table, array, byte array).
_FIXED_SIZES = {
    ord(k): v
    for k, v in {
        "t": 1,
        "b": 1,
        "B": 1,
        "s": 2,
        "u": 2,
        "I": 4,
        "i": 4,
        "l": 8,
        "f": 4,
        "d": 8,
        "D": 5,
        "T": 8,
        "V": 0,
    }.items()
}
_SIZED = frozenset(map(ord, "SFAx"))


class FrameError(Exception):
    """The bytes are not the AMQP frames this reader expects."""


@dataclass(frozen=True, slots=True)
class Method:
    """A method frame other than basic.deliver: `payload` starts with its arguments."""

    channel: int
    class_id: int
    method_id: int
    payload: bytes


@dataclass(slots=True)
class _Template:
    exchange: str
    routing_key: str
    props: properties.Properties
    header_keys: list[str]
    before: list[str | None]  # header texts before and after x-stream-offset's
    after: list[str | None]


@dataclass(slots=True)
class Columns:
    """The rows parsed since the last `take()`, column by column."""

    offsets: list[int] = field(default_factory=list)
    templates: list[int] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    received_at_us: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)


class SliceParser:
    """Deliveries of one consumer into `Columns`; see the module doc.

    `accept(offset)` is the slice cursor's decision for an offset that is not the next one
    expected; `expected`/`end` are the cursor's state, updated here on the fast path.
    """

    def __init__(self, stream: str, cursor: Any) -> None:
        self.stream = stream
        self.cursor = cursor
        self.methods: list[Method] = []
        self.deliveries = 0  # every basic.deliver seen, rows or not (credit counts them)
        self.first_offset: int | None = None
        self.last_tag = 0
        self._rest = b""
        self._columns = Columns()
        self._keys: dict[bytes, int] = {}
        self._templates: list[_Template] = []
        # per template, where its offset's 8 bytes start after its properties' start (-1: the
        # slow path decoded it); and the last delivery's, which the next one tries first
        self._offset_at: list[int] = []
        self._last_at = 0

    def feed(self, chunk: bytes, received_at_us: int) -> None:
        """Parse what `chunk` completes; the rest waits for the next call."""
        buf = self._rest + chunk if self._rest else chunk
        cols = self._columns
        rows_before = len(cols)
        pos = 0
        while True:
            pos = self._deliveries(buf, pos)
            after = self._other_frame(buf, pos)
            if after == pos:
                break
            pos = after
        self._rest = buf[pos:]
        cols.received_at_us.extend([received_at_us] * (len(cols) - rows_before))

    def _other_frame(self, buf: bytes, pos: int) -> int:
        """Past the frame at `pos` that is not a delivery (a heartbeat, another method), or
        `pos` when it, or the delivery that starts there, is not complete yet."""
        if pos + 8 > len(buf):
            return pos
        kind, channel, length = FRAME.unpack_from(buf, pos)
        end: int = pos + 7 + length
        if end >= len(buf):
            return pos
        if buf[end] != FRAME_END:
            raise FrameError(f"frame at byte {pos} does not end with 0xCE")
        if kind == HEARTBEAT:
            return end + 1
        if kind != METHOD:
            raise FrameError(f"unexpected frame type {kind} outside a delivery")
        (class_method,) = U32.unpack_from(buf, pos + 7)
        if class_method == BASIC_DELIVER:
            return pos  # its content has not all arrived
        self.methods.append(
            Method(channel, class_method >> 16, class_method & 0xFFFF, buf[pos + 11 : end])
        )
        return end + 1

    def _deliveries(self, buf: bytes, pos: int) -> int:
        """Parse the complete deliveries from `pos` on into the columns; where they stop: at
        a frame of another kind, or one not complete yet (``_other_frame`` tells which).

        The loop of a stream read: per delivery, its frames are walked with `unpack_from`, the
        common content (one header frame, one body frame) taken here and anything else by
        ``_content``; the offset is read where the last delivery had it when the bytes around
        it are a known template's (below), else found by ``_offset_value_at``'s walk. After a
        delivery whose offset is where its template has it, the like deliveries that follow
        go in one call of framescan's loop (in C when built), and this one takes the delivery
        that stopped them."""
        size = len(buf)
        cols = self._columns
        offsets, templates, bodies = cols.offsets, cols.templates, cols.bodies
        keys = self._keys
        cursor = self.cursor
        accept: Callable[[int], bool] = cursor.accept
        expected, done, end_offset = cursor.expected, cursor.done, cursor.slice.end
        first_offset, tag = self.first_offset, self.last_tag
        deliveries = 0
        unpack_frame, unpack_u64 = FRAME.unpack_from, U64.unpack_from
        offset_at, last_at = self._offset_at, self._last_at
        while pos + 8 <= size:
            kind, _, length = unpack_frame(buf, pos)
            end = pos + 7 + length
            if (
                end >= size
                or kind != METHOD
                or buf[end] != FRAME_END
                or U32.unpack_from(buf, pos + 7)[0] != BASIC_DELIVER
            ):
                break
            # basic.deliver: consumer tag, delivery tag, redelivered, exchange, routing key
            p = pos + 12 + buf[pos + 11]
            (delivery_tag,) = unpack_u64(buf, p)
            route = p + 9
            route_end = route + 1 + buf[route]
            route_end += 1 + buf[route_end]
            head = end + 1
            content = None
            if head + 8 <= size:
                kind, _, length = unpack_frame(buf, head)
                head_end = head + 7 + length
                if head_end + 8 < size and kind == HEADER and buf[head_end] == FRAME_END:
                    (body_size,) = unpack_u64(buf, head + 11)
                    kind, _, length = unpack_frame(buf, head_end + 1)
                    nxt = head_end + 8 + length
                    if (
                        0 < length == body_size
                        and kind == BODY
                        and nxt < size
                        and buf[nxt] == FRAME_END
                    ):
                        content = head + 19, head_end, buf[head_end + 8 : nxt], nxt + 1
            if content is None:
                content = _content(buf, head, size, pos)
                if content is None:
                    break
            props, head_end, body, pos = content
            deliveries += 1
            tag = delivery_tag  # only once the delivery is complete: credit counts from it
            # Where the last delivery's offset was, tried first: the key made by cutting the
            # 8 bytes there names a template whose walk found its offset at the same place only
            # if every other byte is that template's, so this walk would find it there too.
            value = props + last_at
            key = buf[route:route_end] + buf[props:value] + buf[value + 8 : head_end]
            number = keys.get(key)
            if number is None or offset_at[number] != last_at or value + 8 > head_end:
                number = None
                value, offset, key = self._walk(buf[route:route_end], buf, props, head_end)
                last_at = value - props if value >= 0 else last_at
            else:
                (offset,) = I64.unpack_from(buf, value)
            if first_offset is None:
                first_offset = offset
            if offset == expected and not done:
                expected = offset + 1
                done = expected >= end_offset
            else:
                cursor.expected, cursor.done = expected, done
                kept = accept(offset)
                expected, done = cursor.expected, cursor.done
                if not kept:
                    continue
            if number is None:
                number = keys.get(key)
                if number is None:
                    number = self._template(key, buf[route:route_end], buf[props:head_end])
                    offset_at.append(value - props if value >= 0 else -1)
            offsets.append(offset)
            templates.append(number)
            bodies.append(body)
            if offset_at[number] == last_at and not done:
                # then the deliveries of its like that follow, as a run (framescan): bodies
                # only, the offsets consecutive from `expected`, the template this one's
                pos, got, last_tag = scan(buf, pos, key, last_at, expected, end_offset)
                count = len(got)
                offsets.extend(range(expected, expected + count))
                templates.extend(repeat(number, count))
                bodies.extend(got)
                deliveries += count
                expected += count
                done = expected >= end_offset
                tag = last_tag or tag
        cursor.expected, cursor.done = expected, done
        self.first_offset, self.last_tag = first_offset, tag
        self._last_at = last_at
        self.deliveries += deliveries
        return pos

    @property
    def rows(self) -> int:
        """Rows parsed and not yet taken."""
        return len(self._columns)

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame kept for the next `feed()`."""
        return len(self._rest)

    def take(self) -> pa.RecordBatch:
        """The rows parsed so far as one record batch in streamrecords.SCHEMA; starts afresh."""
        cols, templates = self._columns, self._templates
        self._columns, self._keys, self._templates = Columns(), {}, []
        self._offset_at = []
        return _record_batch(self.stream, cols, templates)

    def _walk(self, route: bytes, buf: bytes, props: int, head_end: int) -> tuple[int, int, bytes]:
        """For a delivery not of the last one's template: where its offset's 8 bytes are (-1
        when the slow path decoded them), the offset, and its template key."""
        value = _offset_value_at(buf, props, head_end)
        if value < 0:
            return value, self._slow_offset(buf[props:head_end]), route + buf[props:head_end]
        key = route + buf[props:value] + buf[value + 8 : head_end]
        return value, I64.unpack_from(buf, value)[0], key

    def _slow_offset(self, raw_props: bytes) -> int:
        headers = properties.decode(raw_props, 0).headers or {}
        offset = headers.get(OFFSET_HEADER)
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise FrameError(
                f"a delivery from stream {self.stream!r} has no {OFFSET_HEADER} header (got "
                f"{offset!r}); is {self.stream!r} a stream queue?"
            )
        return offset

    def _template(self, key: bytes, route: bytes, raw_props: bytes) -> int:
        exchange, p = data.decode_short_string(route, 0)
        routing_key, _ = data.decode_short_string(route, p)
        props = properties.decode(raw_props, 0)
        entries = records._header_entries(props.headers) or []
        names = [name for name, _ in entries]
        texts = [text for _, text in entries]
        at = names.index(OFFSET_HEADER)
        self._templates.append(
            _Template(exchange, routing_key, props, names, texts[:at], texts[at + 1 :])
        )
        number = len(self._templates) - 1
        self._keys[key] = number
        return number


def _offset_value_at(buf: bytes, props: int, head_end: int) -> int:
    """Where the 8 bytes of the top-level `x-stream-offset` long start in the content header
    whose property flags are at `props`, or -1 when the slow path must decide (no headers, a
    second flags word, a value type this walk does not size, the header absent or not a long).

    Why a walk and not a search for the header's bytes: the same bytes can sit inside a header
    value or a property after the headers (a message_id, a nested table), and a search would
    read the publisher's bytes as the offset. The walk visits only the top-level entries, and
    keeps the last one named `x-stream-offset`, as decoding the table into a dict does."""
    (flags,) = U16.unpack_from(buf, props)
    if flags & 1 or not flags & 0x2000:
        return -1
    p = props + 2
    if flags & 0x8000:  # content-type, content-encoding: short strings before the headers
        p += 1 + buf[p]
    if flags & 0x4000:
        p += 1 + buf[p]
    (length,) = U32.unpack_from(buf, p)
    p += 4
    table_end = p + length
    if table_end > head_end:
        raise FrameError("a content header's headers table runs past its frame")
    found = -1
    while p < table_end:
        name = p + 1
        p = name + buf[p]
        kind = buf[p]
        p += 1
        if p - name == _OFFSET_NAME_SIZE + 1 and buf[name:p] == _OFFSET_NAME_TYPED:
            found = p
        size = _FIXED_SIZES.get(kind)
        if size is None:
            if kind not in _SIZED:
                return -1
            (size,) = U32.unpack_from(buf, p)
            size += 4
        p += size
    return found if p == table_end else -1


def _content(buf: bytes, head: int, size: int, pos: int) -> tuple[int, int, bytes, int] | None:
    """For the delivery at `pos` whose content header frame starts at `head`: where its
    properties start and end, its body, and where the next frame starts; None while some of it
    has not arrived."""
    if head + 8 > size:
        return None
    kind, _, length = FRAME.unpack_from(buf, head)
    head_end = head + 7 + length
    if head_end >= size:
        return None
    if kind != HEADER or buf[head_end] != FRAME_END:
        raise FrameError(f"basic.deliver at byte {pos} is not followed by its header")
    (body_size,) = U64.unpack_from(buf, head + 11)
    nxt = head_end + 1
    if body_size == 0:
        return head + 19, head_end, b"", nxt
    parts: list[bytes] = []
    got = 0
    while got < body_size:
        if nxt + 8 > size:
            return None
        kind, _, length = FRAME.unpack_from(buf, nxt)
        body_end = nxt + 7 + length
        if body_end >= size:
            return None
        if kind != BODY or buf[body_end] != FRAME_END:
            raise FrameError(f"a body frame of the delivery at byte {pos} is missing")
        parts.append(buf[nxt + 7 : body_end])
        got += length
        nxt = body_end + 1
    if got > body_size:
        raise FrameError(f"the delivery at byte {pos} has more body than it declared")
    body = parts[0] if len(parts) == 1 else b"".join(parts)
    return head + 19, head_end, body, nxt


def _headers(
    cols: Columns, templates: list[_Template], offsets: pa.Array, kind: pa.DataType
) -> pa.Array:
    """The `headers` map column: each row's template headers with its own offset's text.

    When no template has a header but x-stream-offset (messages published without headers),
    the column is built from whole arrays; otherwise one list step per row."""
    rows = len(cols)
    if all(not t.before and not t.after for t in templates):
        names = pa.repeat(pa.scalar(OFFSET_HEADER, type=pa.string()), rows)
        texts = offsets.cast(pa.string())
        ends = pa.array(range(rows + 1), type=pa.int32())
        return pa.MapArray.from_arrays(ends, names, texts, type=kind)
    flat_names: list[str] = []
    flat_texts: list[str | None] = []
    row_ends = [0]
    for offset, number in zip(cols.offsets, cols.templates, strict=True):
        template = templates[number]
        flat_names += template.header_keys
        flat_texts += template.before
        flat_texts.append(str(offset))
        flat_texts += template.after
        row_ends.append(len(flat_names))
    return pa.MapArray.from_arrays(
        pa.array(row_ends, type=pa.int32()),
        pa.array(flat_names, type=pa.string()),
        pa.array(flat_texts, type=pa.string()),
        type=kind,
    )


def _record_batch(stream: str, cols: Columns, templates: list[_Template]) -> pa.RecordBatch:
    schema = streamrecords.arrow_schema()
    rows = len(cols)
    index = pa.array(cols.templates, type=pa.int32())
    props = [t.props for t in templates]

    def shared(values: list[Any], name: str) -> pa.Array:
        return pa.array(values, type=schema.field(name).type).take(index)

    offsets = pa.array(cols.offsets, type=pa.int64())
    headers = _headers(cols, templates, offsets, schema.field("headers").type)
    timestamps = [None if p.timestamp is None else int(p.timestamp) * 1_000_000 for p in props]
    arrays = [
        pa.array([stream] * rows, type=pa.string()),
        offsets,
        shared([p.message_id for p in props], "message_id"),
        shared([t.exchange for t in templates], "exchange"),
        shared([t.routing_key for t in templates], "routing_key"),
        headers,
        shared([records._property_entries(p) for p in props], "properties"),
        shared([p.content_type for p in props], "content_type"),
        shared([p.correlation_id for p in props], "correlation_id"),
        shared(timestamps, "timestamp"),
        pa.array(cols.received_at_us, type=schema.field("received_at").type),
        pa.array(cols.bodies, type=pa.binary()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
