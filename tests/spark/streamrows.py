"""The rows a stream read gives, as the stream tests compare them.

A test publishes ``<stream>-<n>`` as the message id of offset n of each stream; a read is right
when its (stream, offset, message id) rows, sorted, are exactly ``expected`` for each range.
Shared by the source's tests and the stream driver's kill cases, so both read a range alike.
"""

from __future__ import annotations

from typing import Any


def offsets_and_ids(frame: Any) -> list[tuple[str, int, str]]:
    """A DataFrame's (stream, offset, message id) rows, sorted."""
    rows = frame.select("stream", "offset", "message_id").collect()
    return sorted((row.stream, row.offset, row.message_id) for row in rows)


def expected(stream: str, start: int, end: int) -> list[tuple[str, int, str]]:
    """What offsets ``start`` to ``end`` (excluded) of ``stream`` hold, as published."""
    return [(stream, n, f"{stream}-{n}") for n in range(start, end)]
