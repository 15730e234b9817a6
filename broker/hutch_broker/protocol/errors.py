"""AMQP 0-9-1 reply-code errors: the one error tree of the broker side.

Every refusal the broker sends to a client is one of these exceptions, raised where the problem is
found (the frame parser, the model, dispatch) and turned into ``channel.close`` or
``connection.close`` in exactly one place (dispatch).  The scope is the class, so no caller has
to remember which codes are channel errors::

    Exception
    ├── AMQPError                   reply_code, reply_text ("NAME - detail"), class_id, method_id
    │   ├── SoftError               closes the channel: 311-313, 403-406; carries .channel
    │   └── HardError               closes the connection: 320, 402, 501-506, 530, 540, 541
    │       └── BadProtocolHeaderError   the peer does not speak AMQP 0-9-1: no close, drop
    └── LocalProtocolError          our own caller misused the state machine (a bug, not a peer)

``reply_text`` is the full ``NAME - detail`` string RabbitMQ sends, capped like RabbitMQ at 255
bytes (252 + ``...``) because it travels as a short string.  The helpers below build the common
errors with RabbitMQ's names; pass ``method=`` (a pamqp method or method class) or ``class_id`` /
``method_id`` to name the failing method in the close frame.
"""

from __future__ import annotations

from typing import Final

from pamqp import base

_MAX_REPLY_TEXT = 255

SOFT_CODES: dict[int, str] = {
    311: "CONTENT_TOO_LARGE",
    312: "NO_ROUTE",
    313: "NO_CONSUMERS",
    403: "ACCESS_REFUSED",
    404: "NOT_FOUND",
    405: "RESOURCE_LOCKED",
    406: "PRECONDITION_FAILED",
}
HARD_CODES: dict[int, str] = {
    320: "CONNECTION_FORCED",
    402: "INVALID_PATH",
    501: "FRAME_ERROR",
    502: "SYNTAX_ERROR",
    503: "COMMAND_INVALID",
    504: "CHANNEL_ERROR",
    505: "UNEXPECTED_FRAME",
    506: "RESOURCE_ERROR",
    530: "NOT_ALLOWED",
    540: "NOT_IMPLEMENTED",
    541: "INTERNAL_ERROR",
}

MethodRef = base.Frame | type[base.Frame] | None


class AMQPError(Exception):
    """A refusal with an AMQP reply code; ``reply_text`` already has the ``NAME - `` prefix."""

    def __init__(
        self, reply_code: int, reply_text: str, class_id: int = 0, method_id: int = 0
    ) -> None:
        self.reply_code = reply_code
        self.reply_text = cap_reply_text(reply_text)
        self.class_id = class_id
        self.method_id = method_id
        super().__init__(self.reply_text)


class SoftError(AMQPError):
    """Closes one channel; ``channel`` is filled in by whoever knows it (None = not yet known)."""

    def __init__(
        self,
        reply_code: int,
        reply_text: str,
        class_id: int = 0,
        method_id: int = 0,
        *,
        channel: int | None = None,
    ) -> None:
        super().__init__(reply_code, reply_text, class_id, method_id)
        self.channel = channel


class HardError(AMQPError):
    """Closes the whole connection."""


class BadProtocolHeaderError(HardError):
    """The peer's first 8 bytes were not ``AMQP\\x00\\x00\\x09\\x01``.

    Our own protocol header is already queued for sending; the server writes it and drops the
    socket.  No ``connection.close`` is ever sent for this error.
    """


class LocalProtocolError(RuntimeError):
    """The broker itself called the state machine at the wrong time (for example
    ``accept_login`` twice, or a delivery on a channel that is not open)."""


def cap_reply_text(text: str) -> str:
    """Cut a reply text to 255 UTF-8 bytes the way RabbitMQ does (252 bytes and ``...``)."""
    encoded = text.encode("utf-8", "surrogateescape")
    if len(encoded) <= _MAX_REPLY_TEXT:
        return text
    return encoded[: _MAX_REPLY_TEXT - 3].decode("utf-8", "ignore") + "..."


def method_ids(method: MethodRef) -> tuple[int, int]:
    """(class_id, method_id) of a pamqp method instance or class; (0, 0) for None."""
    if method is None:
        return 0, 0
    return method.index >> 16, method.index & 0xFFFF


def error_for(
    reply_code: int,
    detail: str,
    *,
    method: MethodRef = None,
    class_id: int = 0,
    method_id: int = 0,
    channel: int | None = None,
) -> AMQPError:
    """The right error class for any reply code, text prefixed with the code's name."""
    if method is not None:
        class_id, method_id = method_ids(method)
    if reply_code in SOFT_CODES:
        text = f"{SOFT_CODES[reply_code]} - {detail}"
        return SoftError(reply_code, text, class_id, method_id, channel=channel)
    name = HARD_CODES.get(reply_code, "INTERNAL_ERROR")
    return HardError(reply_code, f"{name} - {detail}", class_id, method_id)


def _soft(code: int, detail: str, method: MethodRef, channel: int | None) -> SoftError:
    class_id, method_id = method_ids(method)
    text = f"{SOFT_CODES[code]} - {detail}"
    return SoftError(code, text, class_id, method_id, channel=channel)


def _hard(code: int, detail: str, method: MethodRef) -> HardError:
    class_id, method_id = method_ids(method)
    return HardError(code, f"{HARD_CODES[code]} - {detail}", class_id, method_id)


# -- channel errors (soft) ----------------------------------------------------------------------


def content_too_large(
    detail: str, *, method: MethodRef = None, channel: int | None = None
) -> SoftError:
    return _soft(311, detail, method, channel)


def no_route(detail: str, *, method: MethodRef = None, channel: int | None = None) -> SoftError:
    return _soft(312, detail, method, channel)


DEFAULT_EXCHANGE_REFUSAL: Final = "operation not permitted on the default exchange"


def default_exchange_refused() -> SoftError:
    """403 for anything but publishing to the default exchange (AMQP and HTTP say the same)."""
    return access_refused(DEFAULT_EXCHANGE_REFUSAL)


def access_refused(
    detail: str, *, method: MethodRef = None, channel: int | None = None
) -> SoftError:
    return _soft(403, detail, method, channel)


def not_found(detail: str, *, method: MethodRef = None, channel: int | None = None) -> SoftError:
    return _soft(404, detail, method, channel)


def resource_locked(
    detail: str, *, method: MethodRef = None, channel: int | None = None
) -> SoftError:
    return _soft(405, detail, method, channel)


def precondition_failed(
    detail: str, *, method: MethodRef = None, channel: int | None = None
) -> SoftError:
    return _soft(406, detail, method, channel)


# -- connection errors (hard) -------------------------------------------------------------------


def connection_forced(detail: str, *, method: MethodRef = None) -> HardError:
    return _hard(320, detail, method)


def invalid_path(detail: str, *, method: MethodRef = None) -> HardError:
    return _hard(402, detail, method)


def frame_error(detail: str, *, method: MethodRef = None) -> HardError:
    return _hard(501, detail, method)


def syntax_error(detail: str, *, method: MethodRef = None) -> HardError:
    return _hard(502, detail, method)


def command_invalid(detail: str, *, method: MethodRef = None) -> HardError:
    return _hard(503, detail, method)


def channel_error(detail: str, *, method: MethodRef = None) -> HardError:
    return _hard(504, detail, method)


def unexpected_frame(detail: str, *, method: MethodRef = None) -> HardError:
    return _hard(505, detail, method)


def resource_error(detail: str, *, method: MethodRef = None) -> HardError:
    return _hard(506, detail, method)


def not_allowed(detail: str, *, method: MethodRef = None) -> HardError:
    return _hard(530, detail, method)


def not_implemented(detail: str, *, method: MethodRef = None) -> HardError:
    return _hard(540, detail, method)


def internal_error(detail: str, *, method: MethodRef = None) -> HardError:
    return _hard(541, detail, method)


# -- the handshake refusals with RabbitMQ's exact texts (CN-2) ----------------------------------


def login_refused(mechanism: str) -> HardError:
    """403 sent as a connection error, without naming the user (authentication_failure_close)."""
    return HardError(
        403,
        f"ACCESS_REFUSED - Login was refused using authentication mechanism {mechanism}. "
        "For details see the broker logfile.",
    )


def vhost_not_found(vhost: str) -> HardError:
    return HardError(530, f"NOT_ALLOWED - vhost {vhost} not found", 10, 40)


def vhost_connection_limit(vhost: str, username: str, limit: int) -> HardError:
    detail = (
        f"access to vhost '{vhost}' refused for user '{username}': connection limit ({limit}) "
        "is reached"
    )
    return HardError(530, f"NOT_ALLOWED - {detail}", 10, 40)


def user_connection_limit(username: str, limit: int) -> HardError:
    detail = f"connection refused for user '{username}': user connection limit ({limit}) is reached"
    return HardError(530, f"NOT_ALLOWED - {detail}", 10, 40)


def vhost_access_refused(vhost: str, username: str) -> HardError:
    detail = f"access to vhost '{vhost}' refused for user '{username}'"
    return HardError(530, f"NOT_ALLOWED - {detail}", 10, 40)
