"""What a listener process learned in a connection's handshake, for the vhost worker it hands
the socket to (docs/bench/profile.md, "The second core"): a record and its exact bytes.

The listener runs the AMQP handshake up to ``connection.open``, which names the vhost, then
passes the socket and this record to the worker process that owns the vhost; the worker's
``protocol.connection.Connection`` starts from the record (``Connection(handshake=...)``) and
continues as if it had read those frames itself. Sans-I/O: no sockets here, only the record,
``encode`` and ``decode``.

What the record holds, and why so:

- ``start_ok``: the client's connection.start-ok method payload, byte for byte. It carries the
  client properties, the SASL mechanism and response and the locale; kept raw, the worker
  decodes it with the very code the listener used, and no field-table value is lost in a
  re-encoding (pamqp cannot encode every value it decodes, raw byte strings among them).
- ``channel_max``, ``frame_max``, ``heartbeat``: what tune-ok negotiated.
- ``vhost``: connection.open's virtual host, which chose the worker.
- ``leftover``: bytes the listener had read past connection.open (a pipelining client may send
  channel.open behind it); the worker parses them first, before anything from the socket.

Where authentication runs: **in both, and the worker decides.** The listener checks the
credentials at start-ok, because RabbitMQ refuses bad ones there, before tune, and the vhost
is not known until connection.open, after tune: the client must see ``ACCESS_REFUSED`` at the
same point of the handshake whichever process reads it. The worker checks them again from
``start_ok`` as if it had read it (its dispatch ``Session`` logs in on the replayed
``StartOkReceived``), then the vhost, the user's permission there and the connection limits,
exactly as a single-process broker does: users and permissions are broker-wide, but only the
worker enforces them for its vhosts, so the listener's copy of the users is never the authority
for anything but refusing early. That costs one password hash per connection. The record holds
the password inside ``start_ok``; it only travels over the Unix socket pair between the broker's
own processes, which is never on the filesystem.

The encoding, version 1: a JSON object with exactly the keys of ``_FIELDS`` plus ``version``,
byte strings in standard base64, keys sorted, no spaces, UTF-8. ``decode`` refuses anything
else (unknown or missing keys, wrong types, values out of AMQP's ranges, a ``start_ok`` that is
not a start-ok) with ``HandshakeRecordError`` naming what is wrong.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any, Final

from pamqp import commands

from hutch_broker.protocol import codec, errors

VERSION: Final = 1
# A record is at most this long: start-ok is bounded by the frame_max offered before tune-ok
# (at most what a broker offers, 128 KiB by default, 4/3 of it in base64) and the leftover by
# one read of the listener's.
MAX_RECORD_SIZE: Final = 4 * 1024 * 1024
_FIELDS: Final = ("channel_max", "frame_max", "heartbeat", "leftover", "start_ok", "vhost")
_MAX_VHOST_BYTES: Final = 255  # a shortstr
_START_OK_INDEX: Final = commands.Connection.StartOk.index


class HandshakeRecordError(ValueError):
    """A record that cannot be what a listener sent: the connection it came with is refused."""


@dataclass(frozen=True, slots=True)
class Handshake:
    """One connection's handshake, as the listener ran it (see the module docstring)."""

    start_ok: bytes
    channel_max: int
    frame_max: int
    heartbeat: int
    vhost: str
    leftover: bytes = b""

    def start_ok_method(self) -> commands.Connection.StartOk:
        """The client's start-ok, decoded (``HardError`` 501 if it does not decode)."""
        if len(self.start_ok) < 4:
            raise errors.frame_error("handshake record: start_ok is shorter than a method id")
        method = codec.decode_method(self.start_ok)
        if not isinstance(method, commands.Connection.StartOk):
            raise errors.frame_error("handshake record: start_ok is not connection.start-ok")
        return method


def encode(handshake: Handshake) -> bytes:
    """The record's bytes, version 1 (the module docstring says what they are)."""
    document = {
        "version": VERSION,
        "start_ok": _b64(handshake.start_ok),
        "channel_max": handshake.channel_max,
        "frame_max": handshake.frame_max,
        "heartbeat": handshake.heartbeat,
        "vhost": handshake.vhost,
        "leftover": _b64(handshake.leftover),
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def decode(data: bytes) -> Handshake:
    """The record from its bytes; ``HandshakeRecordError`` for anything ``encode`` cannot make."""
    if len(data) > MAX_RECORD_SIZE:
        raise HandshakeRecordError(f"record of {len(data)} bytes, above {MAX_RECORD_SIZE}")
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise HandshakeRecordError(f"not a JSON document: {exc}") from exc
    if not isinstance(document, dict):
        raise HandshakeRecordError("not a JSON object")
    version = document.get("version")
    if version != VERSION or isinstance(version, bool):
        raise HandshakeRecordError(f"unknown record version {version!r} (this broker reads 1)")
    keys = set(document) - {"version"}
    if keys != set(_FIELDS):
        missing, unknown = sorted(set(_FIELDS) - keys), sorted(keys - set(_FIELDS))
        raise HandshakeRecordError(f"keys missing {missing}, unknown {unknown}")
    handshake = Handshake(
        start_ok=_bytes(document, "start_ok"),
        channel_max=_integer(document, "channel_max", 1, 0xFFFF),
        frame_max=_integer(document, "frame_max", 4096, 0xFFFFFFFF),
        heartbeat=_integer(document, "heartbeat", 0, 0xFFFF),
        vhost=_vhost(document),
        leftover=_bytes(document, "leftover"),
    )
    try:
        handshake.start_ok_method()
    except errors.AMQPError as exc:
        raise HandshakeRecordError(f"start_ok: {exc.reply_text}") from exc
    return handshake


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _bytes(document: dict[str, Any], key: str) -> bytes:
    value = document[key]
    if not isinstance(value, str):
        raise HandshakeRecordError(f"{key} must be a base64 string, not {type(value).__name__}")
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error) as exc:
        raise HandshakeRecordError(f"{key} is not base64: {exc}") from exc


def _integer(document: dict[str, Any], key: str, low: int, high: int) -> int:
    value = document[key]
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise HandshakeRecordError(f"{key} must be an integer from {low} to {high}: {value!r}")
    return value


def _vhost(document: dict[str, Any]) -> str:
    value = document["vhost"]
    if not isinstance(value, str) or len(value.encode("utf-8", "surrogatepass")) > _MAX_VHOST_BYTES:
        raise HandshakeRecordError(f"vhost must be a string of at most 255 bytes: {value!r:.80}")
    return value
