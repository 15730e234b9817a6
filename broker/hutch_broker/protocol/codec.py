"""Frame codec: pamqp for control methods, hand-written ``struct`` code for the hot paths.

IMPL-4: pamqp 4.0.1 encodes a Basic.Deliver with its content at ~110k msg/s and decodes a
Basic.Ack at ~400k/s, far below what the broker must sustain, because it walks every field through
a generic type table.  The messages that flow once per message (Deliver, GetOk, Return, publisher
confirms outbound; Ack, Nack, Reject inbound) are therefore written out by hand here, byte for byte
what pamqp would produce, and the tests hold them to that by decoding with pamqp.  Everything else
goes through pamqp, which is exact and fast enough for the rare control traffic.

All functions are pure (bytes in, bytes or pamqp objects out) apart from a bounded memo of encoded
short strings.  One deliberate difference: delivery tags are unsigned 64-bit as the spec says,
where pamqp packs them signed (identical bytes below 2**63).  Frame layout (AMQP 0-9-1 §4.2.3)::

    type:u8  channel:u16  size:u32  payload[size]  0xCE
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable

from pamqp import base, commands, constants
from pamqp import frame as pamqp_frame

from hutch_broker import native
from hutch_broker.protocol import errors

# pamqp checks queue and exchange names against the 0-9-1 spec's grammar (letters, digits and
# ``-_.:@#,/+ ``) whenever it builds a method, so ``Queue.DeclareOk("café")`` raised and a queue
# RabbitMQ accepts (any UTF-8, over AMQP and HTTP) was created and then answered with 541.  The
# length rule, the only one RabbitMQ applies, lives in model/names.py and the frame encoders.
_ANY_NAME = re.compile(r".*", re.DOTALL)
constants.DOMAIN_REGEX["queue-name"] = _ANY_NAME
constants.DOMAIN_REGEX["exchange-name"] = _ANY_NAME

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_END_BYTE = b"\xce"
FRAME_OVERHEAD = 8  # 7 header bytes + the frame-end octet
HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"
BASIC_CLASS = 60

FRAME_HEADER_STRUCT = struct.Struct(">BHI")
UINT32 = struct.Struct(">I")
CONTENT_PREFIX = struct.Struct(">HHQ")  # class id, weight, body size
CONTENT_HEADER_START = struct.Struct(">BHIHHQ")  # frame header + CONTENT_PREFIX

# Method indexes as pamqp numbers them: class_id << 16 | method_id.
CHANNEL_CLOSE = commands.Channel.Close.index
CHANNEL_CLOSE_OK = commands.Channel.CloseOk.index
BASIC_PUBLISH = commands.Basic.Publish.index
BASIC_ACK = commands.Basic.Ack.index
BASIC_NACK = commands.Basic.Nack.index
BASIC_REJECT = commands.Basic.Reject.index

# "<end of previous frame> <next frame header> ...": one struct call writes both.
_END_CONTENT_HEADER = struct.Struct(">BBHIHHQ")  # 0xCE, 2, channel, size, class, weight, bodysize
_END_BODY_HEADER = struct.Struct(">BBHI")  # 0xCE, 3, channel, size
_GET_OK_HEAD = struct.Struct(">BHIIQB")  # 1, channel, size, class/method, tag, redelivered
_RETURN_HEAD = struct.Struct(">BHIIH")  # 1, channel, size, class/method, reply code
_UINT32_END = struct.Struct(">I")
_ACK_FRAME = struct.Struct(">BHIIQBB")  # 1, channel, 13, class/method, tag, bits, 0xCE
_TAG_AND_BITS = struct.Struct(">QB")

_SHORT_CACHE: dict[str, bytes] = {}
_SHORT_CACHE_LIMIT = 8192


class DeliverHead:
    """The constant part of one consumer's Basic.Deliver frames, prepared once per consumer.

    Per exchange and routing key it delivered from, ``route`` keeps both names encoded as
    shortstrs: a consumer mostly sees the same few routes, so a delivery costs one dictionary
    look-up and one ``deliver_frames`` call, which writes every frame around them.
    """

    __slots__ = ("const", "fixed_size", "packer", "routes")

    def __init__(self, consumer_tag: str | bytes) -> None:
        tag = consumer_tag.encode("utf-8") if isinstance(consumer_tag, str) else consumer_tag
        if len(tag) > 255:
            raise ValueError("consumer tag longer than 255 bytes")
        self.const = UINT32.pack(commands.Basic.Deliver.index) + bytes((len(tag),)) + tag
        self.packer = struct.Struct(f">BHI{len(self.const)}sQB")
        # payload without exchange and routing key: const + tag(8) + bits(1)
        self.fixed_size = len(self.const) + 9
        # (exchange, routing key) -> both names encoded as shortstrs
        self.routes: dict[tuple[str, str], bytes] = {}

    def route(self, exchange: str, routing_key: str) -> bytes:
        """This consumer's deliveries' names from one exchange and routing key, kept. Bounded:
        a consumer of a topic queue can see many keys, and a route not kept is only built
        again."""
        names = short_string(exchange) + short_string(routing_key)
        routes = self.routes
        if len(routes) >= _ROUTES_PER_CONSUMER:
            routes.clear()
        routes[(exchange, routing_key)] = names
        return names


_ROUTES_PER_CONSUMER = 1024
_ROUTE_STRUCTS: dict[tuple[int, int], struct.Struct] = {}


def _route_struct(const_size: int, names_size: int) -> struct.Struct:
    """One ``struct`` per shape (consumer-tag and names lengths), shared by every consumer."""
    packer = _ROUTE_STRUCTS.get((const_size, names_size))
    if packer is None:
        packer = _ROUTE_STRUCTS[(const_size, names_size)] = struct.Struct(
            f">BHI{const_size}sQB{names_size}sBBHIHHQ"
        )
    return packer


def short_string(value: str) -> bytes:
    """A length-prefixed shortstr, memoised: exchange names and routing keys repeat."""
    encoded = _SHORT_CACHE.get(value)
    if encoded is None:
        raw = value.encode("utf-8")
        if len(raw) > 255:
            raise ValueError(f"short string longer than 255 bytes: {value[:32]!r}...")
        encoded = bytes((len(raw),)) + raw
        if len(_SHORT_CACHE) >= _SHORT_CACHE_LIMIT:
            _SHORT_CACHE.clear()
        _SHORT_CACHE[value] = encoded
    return encoded


# -- output ---------------------------------------------------------------------------------


def encode_method(channel: int, method: base.Frame) -> bytes:
    """One method frame; Basic.Ack/Nack (publisher confirms, one per message) by hand."""
    if isinstance(method, commands.Basic.Ack):
        bits = 1 if method.multiple else 0
        return _ACK_FRAME.pack(1, channel, 13, BASIC_ACK, method.delivery_tag, bits, FRAME_END)
    if isinstance(method, commands.Basic.Nack):
        bits = (1 if method.multiple else 0) | (2 if method.requeue else 0)
        return _ACK_FRAME.pack(1, channel, 13, BASIC_NACK, method.delivery_tag, bits, FRAME_END)
    return pamqp_frame.marshal(method, channel)


def _content(channel: int, raw_properties: bytes, body: bytes, frame_max: int) -> list[bytes]:
    """Content header and body frames, starting with the end octet of the method frame."""
    size = len(body)
    parts = [
        _END_CONTENT_HEADER.pack(
            FRAME_END, FRAME_HEADER, channel, 12 + len(raw_properties), BASIC_CLASS, 0, size
        ),
        raw_properties,
    ]
    chunk = frame_max - FRAME_OVERHEAD
    for offset in range(0, size, chunk):
        piece = body[offset : offset + chunk] if size > chunk else body
        parts.append(_END_BODY_HEADER.pack(FRAME_END, FRAME_BODY, channel, len(piece)))
        parts.append(piece)
    parts.append(FRAME_END_BYTE)
    return parts


def deliver_frames_python(
    channel: int,
    const: bytes,
    delivery_tag: int,
    redelivered: bool,
    names: bytes,
    raw_properties: bytes,
    body: bytes,
) -> bytes:
    """A basic.deliver with its content header and one body frame, as one bytes object.

    ``const`` is the consumer's ``DeliverHead.const``, ``names`` the route's exchange and
    routing key as shortstrs; the caller keeps ``body`` within one frame. The twin of the C
    ``deliver`` (``hutch_broker.protocol._content``), which ``deliver_frames`` is when built.
    """
    body_size = len(body)
    return b"".join(
        (
            _route_struct(len(const), len(names)).pack(
                1,
                channel,
                len(const) + 9 + len(names),
                const,
                delivery_tag,
                redelivered,
                names,
                FRAME_END,
                FRAME_HEADER,
                channel,
                12 + len(raw_properties),
                BASIC_CLASS,
                0,
                body_size,
            ),
            raw_properties,
            _END_BODY_HEADER.pack(FRAME_END, FRAME_BODY, channel, body_size),
            body,
            FRAME_END_BYTE,
        )
    )


DeliverFrames = Callable[[int, bytes, int, bool, bytes, bytes, bytes], bytes]
# The C writer, unless it was not built or HUTCH_BROKER_PURE_PYTHON is set (hutch_broker.native).
NATIVE_DELIVER: DeliverFrames | None = native.load("hutch_broker.protocol._content", "deliver")
deliver_frames: DeliverFrames = NATIVE_DELIVER or deliver_frames_python


def encode_deliver(
    head: DeliverHead,
    channel: int,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    raw_properties: bytes,
    body: bytes,
    frame_max: int,
) -> bytes:
    """Basic.Deliver + content header + body frames as one bytes object."""
    names = head.routes.get((exchange, routing_key)) or head.route(exchange, routing_key)
    body_size = len(body)
    if 0 < body_size <= frame_max - FRAME_OVERHEAD:  # the common case: one body frame
        return deliver_frames(
            channel, head.const, delivery_tag, redelivered, names, raw_properties, body
        )
    size = head.fixed_size + len(names)
    first = head.packer.pack(1, channel, size, head.const, delivery_tag, redelivered)
    content = _content(channel, raw_properties, body, frame_max)
    return b"".join([first, names, *content])


def encode_get_ok(
    channel: int,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    message_count: int,
    raw_properties: bytes,
    body: bytes,
    frame_max: int,
) -> bytes:
    """Basic.GetOk + content."""
    exchange_b = short_string(exchange)
    key_b = short_string(routing_key)
    size = 4 + 9 + len(exchange_b) + len(key_b) + 4
    index = commands.Basic.GetOk.index
    first = _GET_OK_HEAD.pack(1, channel, size, index, delivery_tag, redelivered)
    count = _UINT32_END.pack(message_count)
    content = _content(channel, raw_properties, body, frame_max)
    return b"".join([first, exchange_b, key_b, count, *content])


def encode_return(
    channel: int,
    reply_code: int,
    reply_text: str,
    exchange: str,
    routing_key: str,
    raw_properties: bytes,
    body: bytes,
    frame_max: int,
) -> bytes:
    """Basic.Return + content (mandatory messages that found no queue)."""
    text_b = short_string(errors.cap_reply_text(reply_text))
    exchange_b = short_string(exchange)
    key_b = short_string(routing_key)
    size = 4 + 2 + len(text_b) + len(exchange_b) + len(key_b)
    first = _RETURN_HEAD.pack(1, channel, size, commands.Basic.Return.index, reply_code)
    content = _content(channel, raw_properties, body, frame_max)
    return b"".join([first, text_b, exchange_b, key_b, *content])


# -- input ----------------------------------------------------------------------------------


def decode_method(payload: bytes) -> base.Frame:
    """A method frame payload through pamqp; garbage becomes RabbitMQ's 501 'cannot decode'."""
    index = UINT32.unpack_from(payload)[0]
    method_class = commands.INDEX_MAPPING.get(index)
    if method_class is None:
        raise errors.not_implemented(
            f"unknown method class {index >> 16} method {index & 0xFFFF}",
        )
    arguments = payload[4:]
    try:
        method: base.Frame = method_class()
        method.unmarshal(arguments)
        exact = arguments_size(method, arguments) == len(arguments)
    # pamqp's decoders let through whatever the stdlib raises (struct.error, OverflowError from
    # timestamps, RecursionError from nested tables, ...): a hostile frame must only ever
    # produce an AMQP error.
    except Exception as exc:
        raise errors.frame_error(
            f"cannot decode {erlang_binary(arguments, limit=64)}", method=method_class
        ) from exc
    if not exact:  # bytes after the last argument, which pamqp ignores and RabbitMQ refuses
        raise errors.frame_error(
            f"cannot decode {erlang_binary(arguments, limit=64)}", method=method_class
        )
    return method


def arguments_size(method: base.Frame, arguments: bytes) -> int:
    """How many bytes of ``arguments`` the method's fields take, in their order (a run of bit
    fields shares one octet: no 0-9-1 method has more than five in a run). RabbitMQ's decoder
    matches a method's arguments exactly and closes the connection with 501 "cannot decode"
    for a byte more; pamqp's ``unmarshal`` reads the fields and ignores the rest, so
    ``decode_method`` asks. Sizes only, from each field's length prefix (the values were
    decoded already): one call, not one per field, as a consume's drain is counted with it."""
    kinds = _FIELD_KINDS.get(type(method))
    if kinds is None:
        kinds = _FIELD_KINDS[type(method)] = tuple(
            method.amqp_type(name) for name in method.__slots__
        )
    size, in_bits = 0, False
    for kind in kinds:
        if kind == "bit":
            if not in_bits:  # the first of a run takes the octet
                size += 1
                in_bits = True
            continue
        in_bits = False
        fixed = _FIXED_SIZES.get(kind)
        if fixed is not None:
            size += fixed
        elif kind == "shortstr":
            size += 1 + arguments[size]
        else:  # longstr, table: a 32-bit length, then that many bytes
            size += 4 + int.from_bytes(arguments[size : size + 4], "big")
    return size


_FIELD_KINDS: dict[type, tuple[str, ...]] = {}
_FIXED_SIZES = {"octet": 1, "short": 2, "long": 4, "longlong": 8, "timestamp": 8}


def decode_ack(buffer: bytearray, start: int, end: int) -> base.Frame | None:
    """Basic.Ack / Nack / Reject without pamqp (one per consumed message); None if not one."""
    if end - start != 13:
        return None
    index = UINT32.unpack_from(buffer, start)[0]
    delivery_tag, bits = _TAG_AND_BITS.unpack_from(buffer, start + 4)
    if index == BASIC_ACK:
        return commands.Basic.Ack(delivery_tag, bool(bits & 1))
    if index == BASIC_NACK:
        return commands.Basic.Nack(delivery_tag, bool(bits & 1), bool(bits & 2))
    if index == BASIC_REJECT:
        return commands.Basic.Reject(delivery_tag, bool(bits & 1))
    return None


def erlang_binary(data: bytes | bytearray, limit: int | None = None) -> str:
    """Format bytes the way RabbitMQ's ``~tp`` prints a binary, for familiar error texts."""
    snippet = bytes(data if limit is None else data[:limit])
    more = "..." if limit is not None and len(data) > limit else ""
    if snippet and all(32 <= byte < 127 for byte in snippet):
        text = snippet.decode("ascii").replace("\\", "\\\\").replace('"', '\\"')
        return f'<<"{text}"{more}>>'
    return "<<" + ",".join(str(byte) for byte in snippet) + more + ">>"
