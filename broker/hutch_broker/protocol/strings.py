"""One rule for turning an AMQP string value into text.

Why: field-table strings, shortstrs and SASL fields arrive as ``str`` or ``bytes`` depending on
pamqp's path and on whether the broker re-read them from raw properties. Five modules each had
their own two-line copy of this; a change of rule (replacement characters, never an exception on
bad UTF-8) now has one home.
"""

from __future__ import annotations

from typing import Any


def text(value: Any) -> str:
    """``bytes`` decoded as UTF-8 (bad bytes become U+FFFD, never an error); other values
    as ``str()``."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else str(value)
