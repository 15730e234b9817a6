"""The listener's end of one vhost worker: a bounded queue of connections waiting for it.

Why a queue and not a send: the listener's one loop accepts every vhost's connections, so it
must never wait for one worker. A connection that reached connection.open is put in its
worker's queue (the listener keeps a duplicate of its descriptor, the asyncio transport lets
its own go) and the queue is written to the worker's handover socket whenever that socket is
writable and the worker said it is ready (server/handover.py has the frame). A worker that
reads nothing, or is down while the listener restarts it (server/supervisor.py), only lets its
own queue grow; the other workers' connections go on at once. The queue is bounded
(``max_waiting``): past it, ``submit`` raises ``QueueFullError`` and the listener refuses the
connection (``vhost_down``); a connection that waits longer than the listener's handshake
timeout is refused the same way (``expire``).

Every descriptor the queue holds is closed on every path: after its frame's first byte went
(the worker then holds its own copy), or with a refusal. A frame that went out in part when
the worker died is lost with it; the frames behind it wait for the next worker, whose socket
starts a fresh stream.

Why wait for the worker's ``READY`` byte (sent once its loop reads the socket) before writing
anything: a starting worker recovers its store first, as long as that takes, and one whose
recovery hangs is killed as stuck (server/liveness.py). A connection written into its socket
before then would die unread with it, and its client would see its stream end instead of
RabbitMQ's answer for a vhost that is down. Held here, it goes to the next worker that is
ready, or is refused with that answer after the handshake timeout.

The link also carries the supervisor's liveness question (``ask``, server/liveness.py): an
empty frame put at the head of the queue (behind a frame that went out in part, so frames stay
whole), and counts the worker's one-byte answers (``answers``), read whenever they come.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import os
import socket

from hutch_broker.protocol import errors
from hutch_broker.server import handover

log = logging.getLogger(__name__)

MAX_WAITING = 256  # connections one worker may have waiting before new ones are refused


class QueueFullError(Exception):
    """The worker's queue holds ``max_waiting`` connections: refuse this one."""


def vhost_down(vhost: str, user: str) -> errors.HardError:
    """What a client hears when its vhost's worker cannot take it: RabbitMQ's own answer to a
    connection.open for a vhost that is down (rabbit_reader's ``is_vhost_alive``: 541
    INTERNAL_ERROR, "access to vhost ... refused for user ...: vhost ... is down"), so a client
    or an operator that knows RabbitMQ reads it as it would there: retry later, nothing of
    the client's is wrong."""
    return errors.internal_error(
        f"access to vhost '{vhost}' refused for user '{user}': vhost '{vhost}' is down"
    )


@dataclasses.dataclass
class _Waiting:
    """One connection in the queue: the listener's duplicate of its socket and its frame."""

    fd: int  # -1 once the first byte went: the worker holds the socket then
    frame: bytes
    since: float
    vhost: str
    user: str
    sent: int = 0
    question: bool = False  # the liveness question, not a connection


class WorkerLink:
    """One worker's queue and handover socket, on the listener's loop.

    ``attach`` a started worker's socket, ``detach`` when it is gone (the queue stays for the
    next one), ``submit`` each connection, ``expire`` from the listener's tick, ``close`` at
    the end. ``handed_over`` counts frames written whole, for logs and tests; ``answers`` the
    bytes the workers answered to ``ask``, over every attach.
    """

    def __init__(
        self, index: int, loop: asyncio.AbstractEventLoop, *, max_waiting: int = MAX_WAITING
    ) -> None:
        if max_waiting < 1:
            raise ValueError(f"max_waiting must be 1 or more: {max_waiting}")
        self.index = index
        self.max_waiting = max_waiting
        self.handed_over = 0
        self.answers = 0
        self._asking = False  # a question is in the queue
        self._loop = loop
        self._queue: collections.deque[_Waiting] = collections.deque()
        self._sock: socket.socket | None = None
        self._ready = False  # the attached worker said READY: its loop reads the socket
        self._writing = False

    @property
    def attached(self) -> bool:
        return self._sock is not None

    @property
    def ready(self) -> bool:
        return self._ready

    def waiting(self) -> int:
        """Connections in the queue (not the question)."""
        return len(self._queue) - self._asking

    def attach(self, sock: socket.socket) -> None:
        """A (re)started worker's end of the handover pair: the queue drains into it once the
        worker says it is ready."""
        self.detach()
        sock.setblocking(False)
        self._sock = sock
        self._loop.add_reader(sock.fileno(), self.read_answers)

    def detach(self) -> None:
        """The worker is gone: close its socket; a frame it got in part is lost with it."""
        if self._sock is None:
            return
        self._want_write(False)
        self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        self._sock = None
        self._ready = False
        if self._asking:  # the next worker is asked afresh
            self._asking = False
            self._queue = collections.deque(item for item in self._queue if not item.question)
        if self._queue and self._queue[0].sent:
            lost = self._queue.popleft()
            log.warning("vhost worker %d: a connection for %r was lost with its worker",
                        self.index, lost.vhost)  # fmt: skip

    def submit(self, client_fd: int, record: bytes, *, vhost: str, user: str, now: float) -> None:
        """Queue the client's socket and record; ``QueueFullError`` (or ``OSError`` if no descriptor
        is left) and nothing changed when it cannot wait. On return the caller lets its own
        descriptor go without a shutdown, which would end the connection for the worker too."""
        if len(self._queue) >= self.max_waiting:
            raise QueueFullError(f"vhost worker {self.index} has {len(self._queue)} waiting")
        fd = os.dup(client_fd)
        self._queue.append(_Waiting(fd, handover.frame(record), now, vhost, user))
        if self._ready and not self._writing:
            self._flush()

    def ask(self, now: float) -> bool:
        """Put the liveness question at the head of the queue, once; False when no worker is
        attached to hear it. A worker not ready yet hears it once it is (its start beats
        answer meanwhile, server/startbeat.py)."""
        if self._sock is None:
            return False
        if not self._asking:
            queue = self._queue
            at = 1 if queue and queue[0].sent else 0
            queue.insert(at, _Waiting(-1, handover.QUESTION, now, "", "", question=True))
            self._asking = True
            if self._ready and not self._writing:
                self._flush()
        return True

    def expire(self, now: float, max_wait_s: float) -> int:
        """Refuse the connections that waited more than ``max_wait_s``; how many were."""
        expired = 0
        queue = self._queue
        at = 1 if queue and queue[0].sent else 0  # one going out now is left to finish
        while len(queue) > at:
            waiting = queue[at]
            if waiting.question:
                at += 1
                continue
            if now - waiting.since <= max_wait_s:
                break
            del queue[at]
            _refuse(waiting)
            expired += 1
        if expired:
            log.warning("vhost worker %d: refused %d connections that waited more than %.0f s",
                        self.index, expired, max_wait_s)  # fmt: skip
        return expired

    def close(self) -> None:
        """Detach and refuse everything still waiting."""
        self.detach()
        while self._queue:
            _refuse(self._queue.popleft())

    def _flush(self) -> None:
        sock = self._sock
        queue = self._queue
        while queue and sock is not None:
            head = queue[0]
            try:
                if head.sent == 0 and head.fd >= 0:
                    sent = socket.send_fds(sock, [head.frame], [head.fd])
                else:
                    sent = sock.send(memoryview(head.frame)[head.sent :])
            except (BlockingIOError, InterruptedError):
                self._want_write(True)
                return
            except OSError as exc:
                log.warning("vhost worker %d: its handover socket failed: %s", self.index, exc)
                self.detach()
                return
            if head.fd >= 0 and sent:
                os.close(head.fd)  # the worker has its own descriptor now
                head.fd = -1
            head.sent += sent
            if head.sent == len(head.frame):
                queue.popleft()
                if head.question:
                    self._asking = False
                else:
                    self.handed_over += 1
        self._want_write(False)

    def read_answers(self) -> None:
        """The loop's reader: count the worker's bytes; its ``READY`` starts the queue's flow."""
        sock = self._sock
        if sock is None:
            return
        while True:
            try:
                data = sock.recv(4096)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:  # the worker's end is gone: the supervisor notices its exit
                self._loop.remove_reader(sock.fileno())
                return
            self.answers += len(data)
            if not self._ready and handover.READY in data:
                self._ready = True
                if not self._writing:
                    self._flush()
                if self._sock is not sock:  # the flush found the worker gone
                    return

    def _want_write(self, wanted: bool) -> None:
        if wanted == self._writing or self._sock is None:
            return
        if wanted:
            self._loop.add_writer(self._sock.fileno(), self._flush)
        else:
            self._loop.remove_writer(self._sock.fileno())
        self._writing = wanted


def _refuse(waiting: _Waiting) -> None:
    if waiting.fd >= 0:
        error = vhost_down(waiting.vhost, waiting.user)
        handover.refuse_with(socket.socket(fileno=waiting.fd), error)
