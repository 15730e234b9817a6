"""When a vhost worker that is alive but does not answer is stuck: the decision, without I/O.

Why: the supervisor (server/supervisor.py) restarts a worker that exits, but a worker whose
event loop is blocked, or whose process is stopped, never exits: its vhosts would stay down
while every connection to them waits out the handshake timeout. So the listener asks each
worker a small question over its handover socket (an empty frame, server/handover.py) that
the worker's loop answers with one byte, and judges here from the answers it counted.

The rules, on the listener's clock (``now``, ``time.monotonic``):

* Ask again ``ASK_EVERY_S`` after the last answer, one question at a time: a question costs
  a 4-byte write and a 1-byte read per worker per second, nothing per message.
* A worker is stuck when a question has gone ``timeout_s`` without an answer (10 s unless
  ``--vhost-worker-timeout`` says otherwise). Why 10 s: a worker's loop never holds a turn
  long on purpose: deliveries go out a bounded slice per turn, listings, definitions imports
  and policy changes run in slices of about 2 ms (admin/paced.py, admin/slicing.py), so a
  worker that is merely busy answers within a few turns (an import of 8,000 queues, seconds
  long, answers every question of a 1.5 s bound: tests/broker/server/test_vhost_workers.py).
  10 s is thousands of slices and leaves room for a fsync or a swap-in on a loaded machine,
  while a stuck worker's vhosts are down about as long as the handshake timeout (also 10 s)
  before its restart begins.
* A starting worker's loop does not read yet: it is recovering its store, which takes as long
  as the store is big. So while it starts, the worker speaks for itself: one byte right after
  its imports and one each second while its main thread makes progress (its CPU time or the
  bytes it read grew, server/startbeat.py), on the same socket, counted as answers. A recovery
  that hangs (a read that never returns, a stopped process) goes silent and is stuck by the
  rule above; one that works keeps being heard, however long it takes. The questions asked
  meanwhile wait in the socket and are answered once the loop reads.
* A worker not heard at all ``START_S`` after its start (or ``timeout_s``, if longer) is stuck
  too: it hangs before its first byte, in the interpreter's start or its imports.
* When the listener's own steps come more than ``timeout_s / 2`` apart (and more than
  ``HELD_S``), its own loop was held (it looks four times a second): the question's clock
  starts again, so a listener that stalled never blames a worker for the answer it did not
  read. ``HELD_S`` keeps a short bound's clock from restarting at every late tick of a loaded
  listener.
"""

from __future__ import annotations

import dataclasses
import enum

TIMEOUT_S = 10.0  # --vhost-worker-timeout's default
ASK_EVERY_S = 1.0
MIN_TIMEOUT_S = 1.0  # below it a question a second and a tick of 0.25 s cannot judge
HELD_S = 1.0  # a gap between the listener's steps that is its own stall, at the least
START_S = 30.0  # the longest a worker may take to say its first byte (imports, under load)


class Verdict(enum.Enum):
    WAIT = "wait"  # nothing to do
    ASK = "ask"  # send the worker a question
    STUCK = "stuck"  # kill it: the restart path starts it again


def check_timeout(timeout_s: float) -> None:
    """``ValueError`` for a bound the watch cannot keep."""
    if not timeout_s >= MIN_TIMEOUT_S:  # NaN too
        raise ValueError(
            f"--vhost-worker-timeout must be at least {MIN_TIMEOUT_S:g} s: {timeout_s}"
        )


@dataclasses.dataclass
class Watch:
    """One started worker's answers: ``step`` at each of the listener's ticks with the count
    of answer bytes read so far; a new ``Watch`` for each start."""

    timeout_s: float
    answers: int = 0  # the link's count when last seen
    started_at: float | None = None  # the worker's start; None: the first step's time
    heard_at: float | None = None  # the last answer; None before the first
    asked_at: float | None = None  # the open question, if any
    stepped_at: float | None = None
    ask_every_s: float = ASK_EVERY_S
    start_s: float = START_S

    def __post_init__(self) -> None:
        check_timeout(self.timeout_s)

    @property
    def start_bound_s(self) -> float:
        """How long a worker may be silent from its start until its first byte."""
        return max(self.start_s, self.timeout_s)

    def step(self, now: float, answers: int) -> Verdict:
        gap = 0.0 if self.stepped_at is None else now - self.stepped_at
        held = gap > max(HELD_S, self.timeout_s / 2)
        self.stepped_at = now
        if self.started_at is None or (held and self.heard_at is None):
            self.started_at = now
        if answers != self.answers:
            self.answers = answers
            self.heard_at = now
            self.asked_at = None
        elif held and self.asked_at is not None:
            self.asked_at = now
        if self.heard_at is None:  # not a byte yet: the start bound alone
            if now - self.started_at > self.start_bound_s:
                return Verdict.STUCK
            if self.asked_at is None:
                self.asked_at = now
                return Verdict.ASK
            return Verdict.WAIT
        if self.asked_at is None:
            if now - self.heard_at >= self.ask_every_s:
                self.asked_at = now
                return Verdict.ASK
            return Verdict.WAIT
        if now - self.asked_at > self.timeout_s:
            return Verdict.STUCK
        return Verdict.WAIT

    def silent_s(self, now: float) -> float:
        """How long since the worker's last byte, or since its start before the first."""
        since = self.heard_at if self.heard_at is not None else self.started_at
        return 0.0 if since is None else now - since
