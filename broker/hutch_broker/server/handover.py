"""Handing a client's socket from the listener process to a vhost worker, and taking it there.

With vhost workers (server/workers.py) a listener process runs each AMQP handshake up to
connection.open and passes the socket to the worker that owns the vhost, with the handshake's
record (protocol/handshakes.py), over a Unix stream socket pair made at start-up: the file
descriptor travels as SCM_RIGHTS (``socket.send_fds`` / ``socket.recv_fds``), the record as a
4-byte big-endian length and its bytes, the descriptor attached to the first byte of its frame.
The kernel does not join data carrying descriptors with the data before it in one read, so the
worker pairs each whole frame with the next descriptor in arrival order. An empty frame, with
no descriptor, is the listener's liveness question (server/liveness.py): the worker's loop
answers it with one byte (``ANSWER``) on the same socket. The other way go only those answers
(and a starting worker's beats, the same byte, server/startbeat.py) and, once, ``READY``: the
worker's loop reads the socket now, and the listener writes nothing to it before.

The listener's side is server/workerlink.py: a bounded queue per worker, written whenever the
worker's socket is writable, so a worker that reads nothing holds up only its own vhosts. This
module is the frame and the worker's side. Failure rules: a descriptor is closed on every path
that does not adopt it, and nothing else changes. A record the worker cannot decode, or a
connection it cannot adopt, is closed by ``refuse`` with an INTERNAL_ERROR connection.close
saying why.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import socket
import struct
from collections.abc import Callable

from pamqp import commands

from hutch_broker.protocol import codec, errors, handshakes

log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">I")
_READ_SIZE = 256 * 1024
_MAX_FDS_PER_READ = 64


def frame(record: bytes) -> bytes:
    """One handover frame: the record's length, then the record; its socket rides on byte 0."""
    return _LENGTH.pack(len(record)) + record


QUESTION = frame(b"")  # "are you there?": no record, no descriptor
ANSWER = b"\x01"
READY = b"\x02"  # once, when the worker's loop starts reading: frames may come now


class Receiver:
    """The worker's end: reads frames and descriptors, decodes each record and adopts it.

    ``adopt(client, handshake)`` takes ownership of ``client`` (it must close it on its own
    failures); ``on_closed`` runs once when the listener's end is gone, or the stream broke.
    Register ``readable`` with the loop's ``add_reader`` for ``fileno()``.
    """

    def __init__(
        self,
        sock: socket.socket,
        adopt: Callable[[socket.socket, handshakes.Handshake], None],
        on_closed: Callable[[], None],
    ) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._adopt = adopt
        self._on_closed = on_closed
        self._buffer = bytearray()
        self._fds: collections.deque[int] = collections.deque()
        self.closed = False

    def fileno(self) -> int:
        return self._sock.fileno()

    def readable(self) -> None:
        while not self.closed:
            try:
                data, fds, flags, _ = socket.recv_fds(self._sock, _READ_SIZE, _MAX_FDS_PER_READ)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                log.exception("vhost worker: the handover channel failed")
                self.close()
                return
            self._fds.extend(fds)
            if flags & socket.MSG_CTRUNC:
                log.error(
                    "vhost worker: descriptors were cut from a handover; frames may pair badly"
                )
            if not data:
                self.close()
                return
            self._buffer += data
            self._take_frames()

    def _take_frames(self) -> None:
        buffer = self._buffer
        while len(buffer) >= _LENGTH.size and not self.closed:
            (size,) = _LENGTH.unpack_from(buffer)
            if size > handshakes.MAX_RECORD_SIZE:
                log.error("vhost worker: a handover frame of %d bytes; the channel is broken", size)
                self.close()
                return
            end = _LENGTH.size + size
            if len(buffer) < end:
                return
            if size == 0:
                del buffer[:end]
                self._answer()
                continue
            record = bytes(buffer[_LENGTH.size : end])
            del buffer[:end]
            if not self._fds:
                log.error("vhost worker: a handover record came without its socket, dropped")
                continue
            self._take(self._fds.popleft(), record)

    def _take(self, fd: int, record: bytes) -> None:
        client = socket.socket(fileno=fd)
        try:
            handshake = handshakes.decode(record)
        except handshakes.HandshakeRecordError as exc:
            log.error("vhost worker: refused a handed-over connection: %s", exc)
            refuse(client, f"the broker could not take over this connection: {exc}")
            return
        self._adopt(client, handshake)

    def ready(self) -> None:
        """Tell the listener this loop reads now (register ``readable`` first): until this
        byte it holds the worker's connections (server/workerlink.py). Sent blocking: the
        listener always reads its end, and a worker that cannot say it is never handed a
        connection and, never answering a question, is restarted as stuck."""
        with contextlib.suppress(OSError):
            self._sock.setblocking(True)
            try:
                self._sock.sendall(READY)
            finally:
                self._sock.setblocking(False)

    def _answer(self) -> None:
        """One byte back from this loop: the listener counts it (a full socket means the
        listener reads nothing itself; its next question comes when it does)."""
        with contextlib.suppress(OSError):
            self._sock.send(ANSWER)

    def close(self) -> None:
        """Stop reading; every descriptor received and not adopted is closed."""
        if self.closed:
            return
        self.closed = True
        while self._fds:
            refuse(socket.socket(fileno=self._fds.popleft()), "the broker's listener went away")
        self._buffer.clear()
        self._on_closed()  # before the socket closes: the loop stops watching its descriptor
        self._sock.close()


def refuse(client: socket.socket, detail: str) -> None:
    """Close a client whose handshake reached connection.open with connection.close 541."""
    refuse_with(client, errors.internal_error(detail))


def refuse_with(client: socket.socket, error: errors.HardError) -> None:
    """Close a client whose handshake reached connection.open with ``error``'s connection.close
    (the frame goes out without waiting: a fresh connection's send buffer has room), then the
    socket."""
    close = commands.Connection.Close(
        reply_code=error.reply_code,
        reply_text=errors.cap_reply_text(error.reply_text),
        class_id=commands.Connection.Open.index >> 16,
        method_id=commands.Connection.Open.index & 0xFFFF,
    )
    try:
        client.setblocking(False)
        client.send(codec.encode_method(0, close))
        client.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    finally:
        client.close()
