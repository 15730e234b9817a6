"""The C ``scan`` and ``scan_publish`` (``hutch_broker.protocol._content``) against their
Python twins.

Why its own tests: the C function reads client-sent bytes at offsets it computes from them, so
it must refuse exactly what the Python twin refuses (a frame that is cut, of another type or
channel, over frame_max, without its end octet, of another class, a body over the limit, body
frames that do not add up) and return the same properties, body and position where it does not;
and the broker must not fall back to the slower twin unnoticed. Publishes are built by pamqp,
then cut at every byte and changed at every byte of their frames' headers. ``scan_publish``
also reads the method frame before the content, and must take it only when it repeats the
given arguments byte for byte.
"""

from __future__ import annotations

import os

import pytest
from hutch_broker.protocol import codec, contentscan
from pamqp import body, commands, frame, header

FRAME_MAX = 4096
MAX_BODY = 50_000
CHANNEL = 3
PROPERTIES = commands.Basic.Properties(
    content_type="application/json", delivery_mode=2, headers={"k": "v"}, message_id="m-1"
)

python_twin = contentscan.scan_python
python_publish_twin = contentscan.scan_publish_python
PUBLISH = commands.Basic.Publish(exchange="amq.direct", routing_key="orders", mandatory=True)


@pytest.fixture(scope="module")
def scan_native():
    try:
        from hutch_broker.protocol import _content
    except ImportError as error:  # pragma: no cover - the message is the point
        pytest.fail(
            f"the broker's C extension is not built ({error}): `make bootstrap` builds it, with "
            "gcc installed (docs/broker.md, 'Native code')"
        )
    return _content.scan


@pytest.fixture(scope="module")
def scan_publish_native(scan_native):
    from hutch_broker.protocol import _content

    return _content.scan_publish


def content(payload: bytes, *, properties=PROPERTIES, split: int = FRAME_MAX - 8) -> bytes:
    """A publish's content frames on CHANNEL: the header, then the body in frames of ``split``."""
    frames = frame.marshal(header.ContentHeader(0, len(payload), properties), CHANNEL)
    for start in range(0, len(payload), split):
        frames += frame.marshal(body.ContentBody(payload[start : start + split]), CHANNEL)
    return frames


def raw_of(frames: bytes) -> bytes:
    """The properties' bytes of the content header at the start of ``frames``."""
    size = int.from_bytes(frames[3:7], "big")
    return frames[19 : 7 + size]


def compare(twin, native, buffer: bytes, pos: int, middle: tuple, last_raw: bytes, limits):
    """A scan and its twin on one input (``middle``: the arguments between max_body and
    last_raw): both results, to be compared, with ``is`` agreeing for the properties, which
    the caller trusts when they are ``last_raw`` itself."""
    args = {"channel": CHANNEL, "frame_max": FRAME_MAX, "max_body": MAX_BODY, **limits}
    found = []
    for scan in (twin, native):
        data = bytearray(buffer)
        result = scan(
            data, pos, args["channel"], args["frame_max"], args["max_body"], *middle, last_raw
        )
        assert data == buffer, "the scan changed its buffer"
        found.append(result)
    python, c = found
    if python is not None and c is not None:
        assert (python[0] is last_raw) == (c[0] is last_raw)
    return python, c


def both(scan_native, buffer: bytes, pos: int = 0, *, last_raw: bytes = b"", **limits):
    """``scan`` and its twin on one input."""
    return compare(python_twin, scan_native, buffer, pos, (), last_raw, limits)


@pytest.mark.parametrize(
    ("owner", "native_name", "public_name", "twin", "c_name"),
    [
        (contentscan, "NATIVE", "scan", contentscan.scan_python, "scan"),
        (
            contentscan,
            "NATIVE_PUBLISH",
            "scan_publish",
            contentscan.scan_publish_python,
            "scan_publish",
        ),
        (codec, "NATIVE_DELIVER", "deliver_frames", codec.deliver_frames_python, "deliver"),
    ],
    ids=["scan", "scan_publish", "deliver"],
)
def test_the_broker_runs_each_c_function_unless_told_not_to(
    scan_native, owner, native_name, public_name, twin, c_name
):
    """Fails loudly where the extension did not build, instead of the broker quietly taking
    the slower twins (the install treats it as optional)."""
    from hutch_broker.protocol import _content

    if os.environ.get("HUTCH_BROKER_PURE_PYTHON"):
        assert getattr(owner, native_name) is None
        assert getattr(owner, public_name) is twin
    else:
        assert getattr(owner, native_name) is getattr(_content, c_name)
        assert getattr(owner, public_name) is getattr(_content, c_name)


@pytest.mark.parametrize(
    "payload",
    [b"", b"x", b"y" * 1024, bytes(range(256)) * 16, os.urandom(FRAME_MAX * 3 + 17)],
    ids=["empty", "one", "1KiB", "4KiB", "four-frames"],
)
def test_a_sound_publish_reads_to_the_same_properties_body_and_end(scan_native, payload):
    frames = content(payload)
    tail = frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), CHANNEL)
    for last_raw in (b"", raw_of(frames), raw_of(frames)[:-1] + b"?"):
        python, c = both(scan_native, b"junk" + frames + tail, 4, last_raw=last_raw)
        assert c == python == (raw_of(frames), payload, 4 + len(frames))
        assert (c[0] is last_raw) == (last_raw == raw_of(frames))


def test_a_body_split_into_frames_of_any_size_is_joined(scan_native):
    payload = os.urandom(3000)
    for split in (1, 7, 999, 1500, 2999, 3000):
        python, c = both(scan_native, content(payload, split=split))
        assert c == python
        assert c is not None and c[1] == payload


def test_a_cut_anywhere_reads_nothing(scan_native):
    frames = content(os.urandom(2 * FRAME_MAX), properties=commands.Basic.Properties())
    for cut in range(len(frames)):  # the end octet of the last frame is the last byte
        python, c = both(scan_native, frames[:cut])
        assert c is None and python is None, cut
    assert both(scan_native, frames)[1] is not None


def test_every_changed_header_byte_reads_the_same_in_both(scan_native):
    """Every byte of every frame header and end octet, and of the content header's class,
    weight and body size, set to a few values: both refuse the same, accept the same."""
    frames = content(b"z" * 5000, split=2000)
    header_size = int.from_bytes(frames[3:7], "big")
    spots = [*range(19), 7 + header_size]  # frame header, class..body size, end octet
    at = 8 + header_size
    while at < len(frames):
        size = int.from_bytes(frames[at + 3 : at + 7], "big")
        spots += [*range(at, at + 7), at + 7 + size]
        at += 8 + size
    accepted = 0
    for spot in spots:
        for value in (0x00, 0x01, 0x02, 0x03, 0x3C, 0x7F, 0xCE, 0xFF):
            damaged = bytearray(frames)
            damaged[spot] = value
            python, c = both(scan_native, bytes(damaged) + b"\xce" * 64)
            assert c == python, (spot, value)
            accepted += c is not None
    assert accepted, "no change left a readable publish: the comparison proved nothing"


@pytest.mark.parametrize(
    ("limits", "why"),
    [
        ({"channel": CHANNEL + 1}, "another channel"),
        ({"frame_max": 2000}, "a frame over frame_max"),
        ({"max_body": 4999}, "a body over the limit"),
        ({"max_body": -1}, "a negative limit"),
    ],
)
def test_limits_refuse_in_both(scan_native, limits, why):
    frames = content(b"z" * 5000, split=3000)
    python, c = both(scan_native, frames, **limits)
    assert c is None and python is None, why
    assert both(scan_native, frames)[1] is not None


def test_a_position_outside_the_buffer_or_a_header_too_short_reads_nothing(scan_native):
    frames = content(b"abc")
    for pos in (-1, len(frames), len(frames) + 5, 2**40):
        assert both(scan_native, frames, pos) == (None, None)
    short = bytearray(frames)
    short[3:7] = (13).to_bytes(4, "big")  # a content header of 13 bytes: under its fixed 14
    short[7 + 13] = 0xCE
    assert both(scan_native, bytes(short)) == (None, None)


def test_wrong_argument_types_raise_in_c(scan_native):
    with pytest.raises(TypeError):
        scan_native(b"bytes, not a bytearray", 0, 1, 1, 1, b"")
    with pytest.raises(TypeError):
        scan_native(bytearray(), 0, 1, 1, 1, "not bytes")
    with pytest.raises(TypeError):
        scan_native(bytearray(), 0, 1, 1, 1)


# -- scan_publish: the method frame too ------------------------------------------------------


def method_frame(method=PUBLISH, channel: int = CHANNEL) -> bytes:
    return frame.marshal(method, channel)


def arguments_of(method_bytes: bytes) -> bytes:
    """A method frame's argument bytes (after class and method ids): ``last_payload``."""
    size = int.from_bytes(method_bytes[3:7], "big")
    return method_bytes[11 : 7 + size]


def both_publish(
    scan_publish_native,
    buffer: bytes,
    pos: int = 0,
    *,
    last_payload: bytes,
    last_raw: bytes = b"",
    **limits,
):
    """``scan_publish`` and its twin on one input."""
    return compare(
        python_publish_twin, scan_publish_native, buffer, pos, (last_payload,), last_raw, limits
    )


@pytest.mark.parametrize("payload", [b"", b"y" * 1024, os.urandom(FRAME_MAX * 2 + 5)])
def test_a_repeated_publish_reads_to_the_same_properties_body_and_end(scan_publish_native, payload):
    method = method_frame()
    frames = method + content(payload)
    arguments = arguments_of(method)
    tail = method_frame()
    for last_raw in (b"", raw_of(frames[len(method) :])):
        python, c = both_publish(
            scan_publish_native,
            b"junk" + frames + tail,
            4,
            last_payload=arguments,
            last_raw=last_raw,
        )
        assert c == python == (raw_of(frames[len(method) :]), payload, 4 + len(frames))


@pytest.mark.parametrize(
    "other",
    [
        commands.Basic.Publish(exchange="amq.direct", routing_key="order"),
        commands.Basic.Publish(exchange="amq.direct", routing_key="orders", mandatory=False),
        commands.Basic.Publish(exchange="amq.topic", routing_key="orders", mandatory=True),
        commands.Basic.Publish(exchange="", routing_key="amq.directorders", mandatory=True),
        commands.Basic.Ack(delivery_tag=1),
    ],
    ids=["another-key", "another-flag", "another-exchange", "same-bytes-cut-elsewhere", "ack"],
)
def test_other_arguments_or_another_method_read_nothing(scan_publish_native, other):
    frames = method_frame(other) + content(b"abc")
    python, c = both_publish(scan_publish_native, frames, last_payload=arguments_of(method_frame()))
    assert c is None and python is None
    # ...and each reads as a repeat of itself, so the refusal above is the arguments'.
    if isinstance(other, commands.Basic.Publish):
        python, c = both_publish(
            scan_publish_native, frames, last_payload=arguments_of(method_frame(other))
        )
        assert c is not None and c == python


def test_arguments_with_bytes_after_them_read_nothing(scan_publish_native):
    """The arguments must be the method frame's whole payload, not only its start."""
    method = method_frame()
    arguments = arguments_of(method)
    longer = bytearray(method[:-1] + b"!" + method[-1:])
    longer[3:7] = (int.from_bytes(method[3:7], "big") + 1).to_bytes(4, "big")
    frames = bytes(longer) + content(b"abc")
    python, c = both_publish(scan_publish_native, frames, last_payload=arguments)
    assert c is None and python is None
    python, c = both_publish(scan_publish_native, frames, last_payload=arguments + b"!")
    assert c is not None and c == python


def test_a_whole_publish_cut_anywhere_reads_nothing(scan_publish_native):
    method = method_frame()
    frames = method + content(os.urandom(FRAME_MAX + 3), properties=commands.Basic.Properties())
    arguments = arguments_of(method)
    for cut in range(len(frames)):
        python, c = both_publish(scan_publish_native, frames[:cut], last_payload=arguments)
        assert c is None and python is None, cut
    assert both_publish(scan_publish_native, frames, last_payload=arguments)[1] is not None


def test_every_changed_method_frame_byte_reads_the_same_in_both(scan_publish_native):
    """Every byte of the method frame (header, class and method ids, arguments, end octet):
    both refuse the same, and no change to the ids or the arguments is taken."""
    method = method_frame()
    frames = method + content(b"q" * 300)
    arguments = arguments_of(method)
    accepted = set()
    for spot in range(len(method)):
        for value in (0x00, 0x01, 0x03, 0x28, 0x3C, 0x7F, 0xCE, 0xFF):
            damaged = bytearray(frames)
            damaged[spot] = value
            python, c = both_publish(
                scan_publish_native, bytes(damaged) + b"\xce" * 64, last_payload=arguments
            )
            assert c == python, (spot, value)
            if c is not None:
                accepted.add((spot, value))
    # Only a byte set to the value it already had reads: every other change is refused.
    assert all(frames[spot] == value for spot, value in accepted), accepted
    assert accepted, "no byte left a readable publish: the comparison proved nothing"


@pytest.mark.parametrize(
    ("limits", "why"),
    [
        ({"channel": CHANNEL + 1}, "another channel"),
        ({"frame_max": 20}, "a method frame over frame_max"),
        ({"max_body": 2}, "a body over the limit"),
    ],
)
def test_scan_publish_limits_refuse_in_both(scan_publish_native, limits, why):
    method = method_frame()
    frames = method + content(b"abc")
    arguments = arguments_of(method)
    python, c = both_publish(scan_publish_native, frames, last_payload=arguments, **limits)
    assert c is None and python is None, why
    assert both_publish(scan_publish_native, frames, last_payload=arguments)[1] is not None


def test_scan_publish_outside_the_buffer_reads_nothing(scan_publish_native):
    frames = method_frame() + content(b"abc")
    arguments = arguments_of(method_frame())
    for pos in (-1, len(frames), len(frames) + 5, 2**40):
        assert both_publish(scan_publish_native, frames, pos, last_payload=arguments) == (
            None,
            None,
        )


def test_scan_publish_wrong_argument_types_raise_in_c(scan_publish_native):
    with pytest.raises(TypeError):
        scan_publish_native(b"bytes", 0, 1, 1, 1, b"", b"")
    with pytest.raises(TypeError):
        scan_publish_native(bytearray(), 0, 1, 1, 1, "str", b"")
    with pytest.raises(TypeError):
        scan_publish_native(bytearray(), 0, 1, 1, 1, b"", "str")
    with pytest.raises(TypeError):
        scan_publish_native(bytearray(), 0, 1, 1, 1, b"")


# -- deliver: a delivery's three frames written in C -----------------------------------------


@pytest.fixture(scope="module")
def deliver_native(scan_native):
    from hutch_broker.protocol import _content

    return _content.deliver


@pytest.mark.parametrize(
    ("channel", "consumer_tag", "tag", "redelivered", "exchange", "key", "properties", "payload"),
    [
        (1, "ctag", 1, False, "", "q", commands.Basic.Properties(), b"x"),
        (65535, "c" * 255, 2**63 - 1, True, "e" * 255, "k" * 255, PROPERTIES, b"y" * 4000),
        (7, "amq.ctag-Zx1", 2**32 + 5, 1, "amq.topic", "ключ.é", PROPERTIES, bytes(range(256))),
        (0, "", 0, 0, "", "", commands.Basic.Properties(app_id="a"), b"\xce"),
    ],
    ids=["small", "every-limit", "utf8-key", "zeroes"],
)
def test_a_delivery_is_written_as_the_python_twin_writes_it_and_pamqp_reads_it(
    deliver_native, channel, consumer_tag, tag, redelivered, exchange, key, properties, payload
):
    head = codec.DeliverHead(consumer_tag)
    names = codec.short_string(exchange) + codec.short_string(key)
    raw = properties.marshal()
    args = (channel, head.const, tag, redelivered, names, raw, payload)
    written = deliver_native(*args)
    assert written == codec.deliver_frames_python(*args)
    frames = []
    data = written
    while data:
        used, on, read = frame.unmarshal(data)
        frames.append((on, read))
        data = data[used:]
    (c1, method), (c2, content_header), (c3, content) = frames
    assert c1 == c2 == c3 == channel
    assert isinstance(method, commands.Basic.Deliver)
    assert (method.consumer_tag, method.delivery_tag, method.redelivered) == (
        consumer_tag,
        tag,
        bool(redelivered),
    )
    assert (method.exchange, method.routing_key) == (exchange, key)
    assert content_header.body_size == len(payload)
    assert content_header.properties.marshal() == raw
    assert content.value == payload


def test_deliver_refuses_what_no_frame_can_carry(deliver_native):
    const = codec.DeliverHead("c").const
    good = (1, const, 1, False, b"\x00\x01q", b"\x00\x00", b"x")
    assert deliver_native(*good)
    largest = (1, const, 2**64 - 1, False, b"\x00\x01q", b"\x00\x00", b"x")
    assert deliver_native(*largest) == codec.deliver_frames_python(
        *largest
    )  # pamqp reads it signed
    for position, value, error in [
        (0, 65536, ValueError),
        (0, -1, ValueError),
        (2, -1, OverflowError),
        (2, 2**64, OverflowError),
        (1, "str", TypeError),
        (4, bytearray(b"\x00\x01q"), TypeError),
        (6, memoryview(b"x"), TypeError),
    ]:
        args = list(good)
        args[position] = value
        with pytest.raises(error):
            deliver_native(*args)
    with pytest.raises(TypeError):
        deliver_native(*good[:6])
