"""One client's handshake record, as the listener hands it to a vhost worker.

The handover tests and the liveness tests both put records on a real handover socket; one
definition keeps them sending the same client (PLAIN as guest, channel-max 2047, frame-max
128 KiB, heartbeat 60, vhost "/"), differing only in the bytes the client sent after its
handshake (``leftover``).
"""

from __future__ import annotations

from hutch_broker.protocol import codec, handshakes
from pamqp import commands


def record(leftover: bytes = b"") -> handshakes.Handshake:
    """The record of a guest's handshake on "/", with ``leftover`` bytes already read past it."""
    return handshakes.Handshake(
        start_ok=codec.encode_method(
            0, commands.Connection.StartOk({"product": "test"}, "PLAIN", "\0guest\0guest", "en_US")
        )[7:-1],
        channel_max=2047,
        frame_max=131072,
        heartbeat=60,
        vhost="/",
        leftover=leftover,
    )
