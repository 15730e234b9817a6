"""Messages and queue entries: the objects that flow through routing and queues.

A ``Message`` is immutable once published and may sit in several queues at
once (one body in memory however many queues it reached).  Each queue wraps
it in its own ``Entry``, which carries the per-queue state: position,
redelivered flag, expiry and the store record id.  The content header is
kept as raw bytes (IMPL-1) and only decoded lazily when routing needs the
headers table.
"""

from __future__ import annotations

from typing import Any

from hutch_broker.protocol import properties

_EXPIRATION_FLAG = properties.EXPIRATION_FLAG  # a module global: one look-up, not two


class Message:
    __slots__ = (
        "_headers",
        "body",
        "exchange",
        "expires",
        "foreign_deaths",
        "has_headers",
        "persistent",
        "raw_properties",
        "routing_key",
    )

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        raw_properties: bytes,
        body: bytes,
        *,
        persistent: bool | None = None,
        foreign_deaths: bool = False,
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.raw_properties = raw_properties
        self.body = body
        first = raw_properties[0] if raw_properties else 0
        # Whether a headers table is present (flag 0x2000): CC and BCC live only there, so a
        # message without one skips their byte searches (``model.publishes``), about 0.1 us
        # each even on a three-byte header.
        self.has_headers = bool(first & 0x20)
        if persistent is None:
            # Flag 0x1000 (delivery_mode) lives in the first byte: skip the parse when absent,
            # and read the octet in place when no property comes before it and no second flags
            # word follows (a plain publisher's, loadgen's): the parse was three calls.
            if not first & 0x10:
                persistent = False
            elif not first & 0xE0 and len(raw_properties) > 2 and not raw_properties[1] & 1:
                persistent = raw_properties[2] == 2
            else:
                persistent = properties.delivery_mode(raw_properties) == 2
        self.persistent = persistent
        # Whether it carries an expiration (a per-message TTL), read once here for the
        # publish's TTL-2 check and every queue it reaches (each queue's publish asks), inline
        # as the delivery mode above: a call was one more per publish, stream delivery and
        # recovered message. The flag alone; ``expiration()`` parses the value.
        self.expires = bool(first & _EXPIRATION_FLAG)  # in the first flags byte, read above
        # True when a client published the x-death headers, which the first death then
        # replaces instead of extending (4.x; docs/contracts/broker.md#differences).
        self.foreign_deaths = foreign_deaths
        self._headers: dict[str, Any] | None = None

    def headers(self) -> dict[str, Any]:
        """The headers table, decoded once on first use."""
        if self._headers is None:
            decoded = properties.decode_properties(self.raw_properties).get("headers")
            self._headers = dict(decoded) if isinstance(decoded, dict) else {}
        return self._headers

    def expiration(self) -> str | None:
        return properties.expiration(self.raw_properties) if self.expires else None

    def with_properties(self, raw_properties: bytes) -> Message:
        """The same message with another content header (message-id stamping, BCC removal)."""
        return Message(
            self.exchange,
            self.routing_key,
            raw_properties,
            self.body,
            persistent=self.persistent,
            foreign_deaths=self.foreign_deaths,
        )

    def with_body(self, body: bytes) -> Message:
        """The same message with its body paged out (``b""``) or back in."""
        return Message(
            self.exchange,
            self.routing_key,
            self.raw_properties,
            body,
            persistent=self.persistent,
            foreign_deaths=self.foreign_deaths,
        )


class Entry:
    """One message's place in one queue."""

    __slots__ = (
        "delivery_count",
        "expire_at",
        "message",
        "page_id",
        "redelivered",
        "seq",
        "size",
        "store_id",
    )

    def __init__(
        self,
        seq: int,
        message: Message,
        expire_at: int = 0,  # positional too: a keyword builds a dict for every publish
        *,
        redelivered: bool = False,
        store_id: int | None = None,
    ) -> None:
        self.seq = seq
        self.message = message
        self.expire_at = expire_at
        self.redelivered = redelivered
        self.store_id = store_id
        self.size = len(message.body)  # kept apart: a paged-out entry holds no body
        self.page_id: int | None = None  # record in the paging store while paged out
        self.delivery_count = 0  # returns to a quorum queue so far (model/quorum.py)

    @property
    def paged(self) -> bool:
        return self.page_id is not None or (self.size > 0 and not self.message.body)

    def __lt__(self, other: Entry) -> bool:
        return self.seq < other.seq
