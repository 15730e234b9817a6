"""The C ``scan`` (``hutch_broker.protocol._content``) against its Python twin.

Why its own tests: the C function reads client-sent bytes at offsets it computes from them, so
it must refuse exactly what the Python twin refuses (a frame that is cut, of another type or
channel, over frame_max, without its end octet, of another class, a body over the limit, body
frames that do not add up) and return the same properties, body and position where it does not;
and the broker must not fall back to the slower twin unnoticed. Publishes are built by pamqp,
then cut at every byte and changed at every byte of their frames' headers.
"""

from __future__ import annotations

import os

import pytest
from hutch_broker.protocol import contentscan
from pamqp import body, commands, frame, header

FRAME_MAX = 4096
MAX_BODY = 50_000
CHANNEL = 3
PROPERTIES = commands.Basic.Properties(
    content_type="application/json", delivery_mode=2, headers={"k": "v"}, message_id="m-1"
)

python_twin = contentscan.scan_python


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


def both(scan_native, buffer: bytes, pos: int = 0, *, last_raw: bytes = b"", **limits):
    """Both functions' results for one input: they must be equal (``is`` for the properties,
    which the caller trusts when they are ``last_raw`` itself)."""
    args = {"channel": CHANNEL, "frame_max": FRAME_MAX, "max_body": MAX_BODY, **limits}
    found = []
    for scan in (python_twin, scan_native):
        data = bytearray(buffer)
        result = scan(data, pos, args["channel"], args["frame_max"], args["max_body"], last_raw)
        assert data == buffer, "the scan changed its buffer"
        found.append(result)
    python, c = found
    if python is not None and c is not None:
        assert (python[0] is last_raw) == (c[0] is last_raw)
    return python, c


def test_the_broker_runs_the_c_scan_unless_told_not_to(scan_native):
    """Fails loudly where the extension did not build, instead of the broker quietly taking
    the slower twin (the install treats it as optional)."""
    if os.environ.get("HUTCH_BROKER_PURE_PYTHON"):
        assert contentscan.NATIVE is None
        assert contentscan.scan is python_twin
    else:
        assert contentscan.NATIVE is scan_native
        assert contentscan.scan is scan_native


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
