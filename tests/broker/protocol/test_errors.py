"""The reply-code error tree and its helpers."""

from __future__ import annotations

import pytest
from hutch_broker.protocol import errors
from pamqp import commands

SOFT_HELPERS = {
    errors.content_too_large: (311, "CONTENT_TOO_LARGE"),
    errors.no_route: (312, "NO_ROUTE"),
    errors.access_refused: (403, "ACCESS_REFUSED"),
    errors.not_found: (404, "NOT_FOUND"),
    errors.resource_locked: (405, "RESOURCE_LOCKED"),
    errors.precondition_failed: (406, "PRECONDITION_FAILED"),
}
HARD_HELPERS = {
    errors.connection_forced: (320, "CONNECTION_FORCED"),
    errors.invalid_path: (402, "INVALID_PATH"),
    errors.frame_error: (501, "FRAME_ERROR"),
    errors.syntax_error: (502, "SYNTAX_ERROR"),
    errors.command_invalid: (503, "COMMAND_INVALID"),
    errors.channel_error: (504, "CHANNEL_ERROR"),
    errors.unexpected_frame: (505, "UNEXPECTED_FRAME"),
    errors.resource_error: (506, "RESOURCE_ERROR"),
    errors.not_allowed: (530, "NOT_ALLOWED"),
    errors.not_implemented: (540, "NOT_IMPLEMENTED"),
    errors.internal_error: (541, "INTERNAL_ERROR"),
}


@pytest.mark.parametrize(("helper", "expected"), SOFT_HELPERS.items())
def test_soft_helpers(helper, expected):
    error = helper("detail", method=commands.Queue.Declare, channel=3)
    assert isinstance(error, errors.SoftError)
    assert isinstance(error, errors.AMQPError)
    assert (error.reply_code, error.reply_text) == (expected[0], f"{expected[1]} - detail")
    assert (error.class_id, error.method_id, error.channel) == (50, 10, 3)


@pytest.mark.parametrize(("helper", "expected"), HARD_HELPERS.items())
def test_hard_helpers(helper, expected):
    error = helper("detail", method=commands.Basic.Publish())
    assert isinstance(error, errors.HardError)
    assert (error.reply_code, error.reply_text) == (expected[0], f"{expected[1]} - detail")
    assert (error.class_id, error.method_id) == (60, 40)


def test_the_code_tables_cover_every_helper():
    # 313 NO_CONSUMERS belongs to immediate=true, which is refused with 540 instead.
    assert {code for code, _ in SOFT_HELPERS.values()} == set(errors.SOFT_CODES) - {313}
    assert {code for code, _ in HARD_HELPERS.values()} == set(errors.HARD_CODES)


def test_soft_error_channel_is_unknown_until_set():
    error = errors.not_found("no queue 'q' in vhost '/'")
    assert error.channel is None
    assert (error.class_id, error.method_id) == (0, 0)
    error.channel, error.class_id, error.method_id = 1, 50, 10  # dispatch fills these in
    assert str(error) == "NOT_FOUND - no queue 'q' in vhost '/'"


@pytest.mark.parametrize(
    ("code", "cls", "name"),
    [
        (404, errors.SoftError, "NOT_FOUND"),
        (530, errors.HardError, "NOT_ALLOWED"),
        (599, errors.HardError, "INTERNAL_ERROR"),
    ],
)
def test_error_for_picks_the_class_by_code(code, cls, name):
    error = errors.error_for(code, "x", class_id=1, method_id=2, channel=4)
    assert type(error) is cls
    assert error.reply_text == f"{name} - x"
    assert (error.class_id, error.method_id) == (1, 2)


def test_reply_text_is_capped_like_rabbitmq():
    error = errors.precondition_failed("\u00e9" * 300)
    encoded = error.reply_text.encode()
    assert len(encoded) <= 255
    assert error.reply_text.endswith("...")
    assert encoded[:-3].decode()  # never a broken UTF-8 sequence
    short = errors.not_found("q")
    assert short.reply_text == "NOT_FOUND - q"


def test_bad_protocol_header_is_a_hard_error():
    assert issubclass(errors.BadProtocolHeaderError, errors.HardError)
    assert not issubclass(errors.LocalProtocolError, errors.AMQPError)
