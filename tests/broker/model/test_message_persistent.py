"""``Message.persistent`` read in place agrees with the property parser on every shape.

Why: a publish's ``Message`` reads the delivery mode itself when no property comes before it
(the plain publisher's case, three calls fewer a message; docs/bench/profile.md), and parses
otherwise. Both ways must give the same answer for every header a client may send, including
the odd ones (a delivery mode other than 1 or 2, a second flags word, a header cut short).
"""

from __future__ import annotations

import itertools

from hutch_broker.model.messages import Message
from hutch_broker.protocol import properties
from pamqp import commands, header


def raw_of(**fields: object) -> bytes:
    """The content header's bytes from the property flags on, as pamqp encodes them."""
    return header.ContentHeader(0, 1, commands.Basic.Properties(**fields)).marshal()[12:]


def parsed(raw: bytes) -> bool:
    return properties.delivery_mode(raw) == 2


def test_the_inline_read_matches_the_parser_for_encoded_properties() -> None:
    before = [
        {},
        {"content_type": "text/plain"},
        {"content_encoding": "gzip"},
        {"headers": {"a": 1}},
        {"content_type": "application/json", "headers": {"x-death": []}},
    ]
    after = [{}, {"priority": 5}, {"message_id": "m", "expiration": "100"}, {"app_id": "a"}]
    seen = set()
    for first, last, mode in itertools.product(before, after, (None, 1, 2)):
        fields = {**first, **last}
        if mode is not None:
            fields["delivery_mode"] = mode
        raw = raw_of(**fields)
        message = Message("", "q", raw, b"x")
        assert message.persistent == parsed(raw) == (mode == 2), fields
        seen.add(message.persistent)
    assert seen == {True, False}


def test_the_inline_read_matches_the_parser_for_odd_bytes() -> None:
    """Delivery modes other than 1 and 2, a continuation bit, short headers, no header."""
    shapes = [b"", b"\x10", b"\x10\x00", b"\x00\x00", b"\x10\x01\x02"]
    shapes += [bytes((0x10, 0x00, mode)) for mode in (0, 1, 2, 3, 255)]
    shapes += [bytes((0x10, second, 2)) + b"\x00\x00" for second in (0x00, 0x01, 0x10, 0x11)]
    shapes += [bytes((flag, 0x00, 2)) for flag in (0x30, 0x50, 0x90, 0x11, 0x18, 0x1F)]
    for raw in shapes:
        assert Message("", "q", raw, b"").persistent == parsed(raw), raw
    assert Message("", "q", b"\x10\x00\x02", b"").persistent
    assert not Message("", "q", b"\x10\x01\x02\x00\x00", b"").persistent  # a second flags word


def test_an_explicit_flag_is_kept() -> None:
    raw = raw_of(delivery_mode=2)
    assert not Message("", "q", raw, b"", persistent=False).persistent
    assert Message("", "q", raw_of(), b"", persistent=True).persistent
