"""The one rule for names and keys that end up in AMQP frames: at most 255 UTF-8 bytes.

Exchange names, queue names, routing keys and field-table keys travel as AMQP ``shortstr``,
whose length is one octet.  Over AMQP a longer one cannot even arrive, but the management API
and definitions import take JSON strings of any length: a 300-byte routing key accepted there
makes a message that no ``basic.deliver`` can carry, so it kills every consumer it reaches.
Every entry point that takes such a name calls this module before it changes anything.

Any other character is fine: RabbitMQ 3.10.8 accepts ``café`` and ``q!`` as queue names both
over AMQP and over HTTP (seen side by side), so only the length is checked.  The refusal text
is RabbitMQ's for an over-long queue name over HTTP, ``queue should be less than 255 bytes,
actually was 256``, with the kind of name in front.
"""

from __future__ import annotations

from typing import Any, Final

MAX_BYTES: Final = 255
MAX_DEPTH: Final = 64  # nested tables and arrays in an arguments or headers table


class InvalidNameError(ValueError):
    """A name or key that cannot be an AMQP shortstr."""


def byte_length(value: str) -> int:
    """UTF-8 length; a lone surrogate (which no UTF-8 encoder accepts) counts 3 bytes."""
    return len(value.encode("utf-8", "surrogatepass"))


def check(kind: str, value: str) -> str:
    """``value`` if it fits a shortstr, else ``InvalidNameError`` naming ``kind``."""
    if value.isascii():
        size = len(value)
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidNameError(f"{kind} is not valid UTF-8") from None
    if size > MAX_BYTES:
        raise InvalidNameError(f"{kind} should be less than 255 bytes, actually was {size}")
    return value


def check_table(kind: str, table: Any) -> None:
    """Every key of a field table (and of tables nested in it) fits a shortstr."""
    pending: list[tuple[Any, int]] = [(table, 1)]
    while pending:
        value, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise InvalidNameError(f"{kind} nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            for key, item in value.items():
                check(f"{kind} key", str(key))
                pending.append((item, depth + 1))
        elif isinstance(value, list | tuple):
            pending.extend((item, depth + 1) for item in value)
