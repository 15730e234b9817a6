"""SASL responses of connection.start-ok: PLAIN and AMQPLAIN, the two mechanisms we offer (CN-2).

The protocol core only takes the response apart; whether the credentials are good is dispatch's
decision.  Errors follow RabbitMQ: an unknown mechanism is 503 COMMAND_INVALID, a response that
cannot be parsed is 502 SYNTAX_ERROR.  Neither text echoes the password back.
"""

from __future__ import annotations

from pamqp import commands, decode

from hutch_broker.protocol import codec, errors
from hutch_broker.protocol.strings import text as _text

MECHANISMS = "AMQPLAIN PLAIN"
_START_OK = commands.Connection.StartOk


def parse_response(mechanism: str, response: bytes) -> tuple[str, str]:
    """(username, password) from a start-ok response.  Undecodable UTF-8 becomes U+FFFD, which
    simply never matches a stored credential."""
    if mechanism == "PLAIN":
        return _plain(response)
    if mechanism == "AMQPLAIN":
        return _amqplain(response)
    raise errors.command_invalid(
        f"unknown authentication mechanism '{mechanism}'", method=_START_OK
    )


def _plain(response: bytes) -> tuple[str, str]:
    """RFC 4616: ``[authzid] NUL authcid NUL passwd``; the authorisation identity is ignored."""
    parts = response.split(b"\x00")
    if len(parts) != 3:
        raise errors.syntax_error("PLAIN response invalid", method=_START_OK)
    return _text(parts[1]), _text(parts[2])


def _amqplain(response: bytes) -> tuple[str, str]:
    """A field table without its 4-byte length prefix (that is how every client sends it)."""
    try:
        _, table = decode.field_table(codec.UINT32.pack(len(response)) + response)
    except Exception as exc:  # pamqp lets stdlib errors through on garbage
        raise errors.syntax_error("AMQPLAIN response invalid", method=_START_OK) from exc
    login, password = table.get("LOGIN"), table.get("PASSWORD")
    if not isinstance(login, str | bytes) or not isinstance(password, str | bytes):
        raise errors.syntax_error(
            "AMQPLAIN auth info is missing LOGIN or PASSWORD field", method=_START_OK
        )
    return _text(login), _text(password)
