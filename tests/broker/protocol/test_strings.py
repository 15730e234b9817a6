"""protocol/strings.py: the one rule for AMQP string values (issue 15, duplicate helpers)."""

from hutch_broker.protocol.strings import text


def test_bytes_decode_as_utf8_and_bad_bytes_never_raise():
    assert text("café".encode()) == "café"
    assert text(b"\xed\xa0\x80 q") == "\ufffd\ufffd\ufffd q"


def test_strings_stay_and_other_values_become_their_str():
    assert text("x") == "x"
    assert text(5) == "5"
