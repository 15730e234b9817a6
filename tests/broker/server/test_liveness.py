"""A vhost worker that is alive but stuck is killed and restarted: the decision and its wiring.

The decision (``liveness.Watch``) on a clock driven by hand; the question and its answer over
a real Unix socket pair between a ``WorkerLink`` and a ``handover.Receiver``; and the
supervisor with a real child process that answers once and then never again: it is logged,
killed with SIGKILL and started again. The whole broker's case (SIGSTOP, a canary, confirmed
messages kept, a busy worker spared) is in test_vhost_workers.py.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import sys
import time

import pytest
from hutch_broker import __main__ as broker_main
from hutch_broker.config import BrokerConfig
from hutch_broker.protocol import handshakes
from hutch_broker.server import handover, liveness, supervisor, workerlink, workers
from hutch_broker.server.liveness import Verdict

from tests.broker.server import handshake_record

ASK, WAIT, STUCK = Verdict.ASK, Verdict.WAIT, Verdict.STUCK


def run(watch: liveness.Watch, start: float, end: float, answers: int, step: float = 0.25):
    """The verdicts of ticks every ``step`` from ``start`` to ``end`` with no new answer."""
    verdicts = []
    now = start
    while now <= end + 1e-9:
        verdicts.append((now, watch.step(now, answers)))
        now += step
    return verdicts


def test_a_worker_that_never_says_a_byte_is_stuck_past_the_start_bound():
    """It hangs before its first byte (its start beat comes right after its imports)."""
    watch = liveness.Watch(10.0, started_at=0.0)
    assert watch.step(0.0, 0) is ASK
    verdicts = run(watch, 0.25, 40.0, 0)
    assert {verdict for now, verdict in verdicts if now <= 30.0} == {WAIT}
    assert next(now for now, verdict in verdicts if verdict is STUCK) == pytest.approx(30.25)
    assert watch.silent_s(30.25) == pytest.approx(30.25)
    assert liveness.Watch(60.0).start_bound_s == 60.0  # never under the bound itself


def test_a_starting_worker_that_beats_is_heard_however_long_its_start_and_stuck_once_silent():
    """Its store's recovery takes ten minutes, with a beat a second; then the beats stop (the
    recovery hangs): stuck by the usual bound, counted from the question after the last beat."""
    watch = liveness.Watch(10.0, started_at=0.0)
    beats, now = 0, 0.0
    while now < 600.0:
        if now >= beats + 0.5:  # a beat at 0.5, 1.5, 2.5, ...
            beats += 1
        assert watch.step(now, beats) is not STUCK, now
        now += 0.25
    assert beats == 600
    verdicts = run(watch, 600.0, 620.0, beats)
    asked = [now for now, verdict in verdicts if verdict is ASK]
    stuck = [now for now, verdict in verdicts if verdict is STUCK]
    assert asked == [600.5]  # a second after the last beat
    assert stuck[0] == pytest.approx(610.75)  # the first tick past 600.5 + 10 s


def test_a_listener_held_while_a_worker_starts_restarts_the_start_clock():
    watch = liveness.Watch(10.0, started_at=0.0)
    watch.step(0.0, 0)
    assert watch.step(29.0, 0) is WAIT  # 29 s since the listener last looked: its own stall
    assert watch.step(40.0, 0) is WAIT  # 11 s: held again, so the clock starts here
    assert [v for _, v in run(watch, 40.25, 70.0, 0)] == [WAIT] * 120
    assert watch.step(70.25, 0) is STUCK


def test_a_silent_worker_is_stuck_once_a_question_went_unanswered_for_the_bound():
    watch = liveness.Watch(10.0, answers=5)
    watch.step(0.0, 5)
    assert watch.step(0.25, 6) is WAIT  # heard at 0.25
    verdicts = run(watch, 0.5, 30.0, 6)
    asked = [now for now, verdict in verdicts if verdict is ASK]
    assert asked == [1.25]  # a second after the answer, and one question at a time
    stuck = [now for now, verdict in verdicts if verdict is STUCK]
    assert stuck[0] == pytest.approx(11.5)  # the first tick past 1.25 + 10 s
    assert watch.silent_s(11.5) == pytest.approx(11.25)


def test_a_busy_worker_that_answers_within_the_bound_is_never_stuck():
    """Each answer comes 9.75 s after its question (a long sliced operation, a slow turn):
    a whole hour of that and never a kill."""
    watch = liveness.Watch(10.0)
    answers, now, asked_at = 0, 0.0, None
    while now < 3600.0:
        if asked_at is not None and now - asked_at >= 9.75:
            answers, asked_at = answers + 1, None
        verdict = watch.step(now, answers)
        assert verdict is not STUCK, now
        if verdict is ASK:
            asked_at = now
        now += 0.25
    assert answers > 300


def test_a_listener_that_was_held_itself_does_not_blame_the_worker():
    watch = liveness.Watch(10.0)
    watch.step(0.0, 0)
    watch.step(0.25, 1)
    assert watch.step(1.25, 1) is ASK
    assert watch.step(20.0, 1) is WAIT  # 18.75 s since the listener last looked: its own stall
    assert watch.step(20.25, 2) is WAIT  # the answer it read late
    assert watch.step(21.25, 2) is ASK
    assert [v for _, v in run(watch, 21.5, 31.25, 2)] == [WAIT] * 40
    assert watch.step(31.5, 2) is STUCK  # and a real silence still counts


def test_a_short_bound_is_not_restarted_by_each_late_tick_of_a_loaded_listener():
    """With a 1.5 s bound, ticks 0.9 s apart (late, not held) still find the silent worker."""
    watch = liveness.Watch(1.5)
    watch.step(0.0, 0)
    watch.step(0.25, 1)
    verdicts = run(watch, 1.25, 4.0, 1, step=0.9)
    assert [verdict for _, verdict in verdicts] == [ASK, WAIT, STUCK, STUCK]
    assert verdicts[2][0] == pytest.approx(3.05)  # 1.8 s after the question: past 1.5


@pytest.mark.parametrize("bad", [0.0, 0.5, -1.0, math.nan])
def test_a_bound_below_a_second_is_refused_everywhere_with_a_reason(bad):
    with pytest.raises(ValueError, match="--vhost-worker-timeout must be at least 1 s"):
        liveness.Watch(bad)
    with pytest.raises(ValueError, match="--vhost-worker-timeout must be at least 1 s"):
        workers.check(BrokerConfig(vhost_workers=2, vhost_worker_timeout_s=bad))
    with pytest.raises(ValueError, match="--vhost-worker-timeout"):
        supervisor.Supervisor(1, lambda index, fd: [], asyncio.new_event_loop(), timeout_s=bad)


def test_the_timeout_flag_reaches_the_config():
    assert broker_main.parse_args(["--vhost-worker-timeout", "2.5"]).vhost_worker_timeout_s == 2.5
    assert broker_main.parse_args([]).vhost_worker_timeout_s == liveness.TIMEOUT_S == 10.0


RECORD = handshake_record.record()


class Worker:
    """The worker's end of a pair, recording what it adopted."""

    def __init__(self, sock: socket.socket) -> None:
        self.adopted: list[tuple[socket.socket, handshakes.Handshake]] = []
        self.receiver = handover.Receiver(sock, self._adopt, lambda: None)

    def _adopt(self, client: socket.socket, handshake: handshakes.Handshake) -> None:
        self.adopted.append((client, handshake))


@pytest.fixture
def loop():
    """A loop the links register with; every descriptor a test opened is closed after it."""
    before = set(os.listdir("/proc/self/fd"))
    made = asyncio.new_event_loop()
    yield made
    made.close()
    assert set(os.listdir("/proc/self/fd")) <= before


def turn_until(loop: asyncio.AbstractEventLoop, condition) -> None:
    """Run the loop's ready callbacks (the link's reader) until ``condition()`` holds."""
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        loop.run_until_complete(asyncio.sleep(0.005))


def test_the_worker_answers_each_question_and_connections_pair_as_before(loop):
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    link, worker = workerlink.WorkerLink(0, loop), Worker(theirs)
    link.attach(ours)
    record = handshakes.encode(RECORD)
    clients = [socket.socketpair() for _ in range(3)]
    try:
        worker.receiver.ready()
        turn_until(loop, lambda: link.ready)
        assert link.answers == 1  # READY is a byte heard too
        link.submit(clients[0][0].fileno(), record, vhost="v", user="guest", now=0.0)
        assert link.ask(0.0) is True
        link.submit(clients[1][0].fileno(), record, vhost="v", user="guest", now=0.0)
        assert link.waiting() == 0  # all written: the socket had room
        worker.receiver.readable()
        assert len(worker.adopted) == 2
        turn_until(loop, lambda: link.answers == 2)
        assert link.ask(1.0) is True
        link.submit(clients[2][0].fileno(), record, vhost="v", user="guest", now=1.0)
        worker.receiver.readable()
        turn_until(loop, lambda: link.answers == 3)
        assert [handshake for _, handshake in worker.adopted] == [RECORD] * 3
        for (adopted, _), (_, peer) in zip(worker.adopted, clients, strict=True):
            adopted.send(b"x")  # each adopted socket is its client's, in order
            assert peer.recv(1) == b"x"
        assert link.handed_over == 3  # questions are not counted as connections
    finally:
        link.close()
        worker.receiver.close()
        for client, _ in worker.adopted:
            client.close()
        for pair in clients:
            pair[0].close()
            pair[1].close()


def test_a_question_skips_ahead_of_waiting_connections_and_never_expires_or_counts(loop):
    """A worker that reads nothing: the question goes to the head (not inside a frame that went
    out in part), is not a waiting connection, is not refused by expire, and goes with detach."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    link = workerlink.WorkerLink(0, loop, max_waiting=100_000)
    link.attach(ours)
    theirs.send(handover.READY)  # its loop said it reads, then read nothing
    link.read_answers()
    record = handshakes.encode(RECORD)
    client, peer = socket.socketpair()
    try:
        while link.waiting() == 0:  # fill the socket until one waits
            link.submit(client.fileno(), record, vhost="v", user="guest", now=0.0)
        link.submit(client.fileno(), record, vhost="v", user="guest", now=0.0)
        waiting = link.waiting()
        assert link.ask(5.0) is True
        assert link.ask(6.0) is True  # still queued: not a second one
        assert link.waiting() == waiting
        queue = link._queue
        at = 1 if queue[0].sent else 0
        assert queue[at].question and not any(item.question for item in list(queue)[at + 1 :])
        assert link.expire(100.0, 10.0) == waiting - at  # every connection but one going out
        assert [item.question for item in queue][at:] == [True]  # one question, kept
        link.detach()
        assert not any(item.question for item in link._queue)
        assert link.ask(6.0) is False  # no worker to hear it
    finally:
        link.close()
        theirs.close()
        client.close()
        peer.close()


def test_an_answer_is_one_byte_and_a_question_carries_no_descriptor():
    assert handover.QUESTION == b"\x00\x00\x00\x00"
    assert handover.ANSWER == b"\x01"
    assert handover.READY == b"\x02"  # not an answer's byte: the link tells them apart


def test_a_worker_not_ready_is_asked_nothing_until_it_is(loop):
    """A starting worker's loop reads nothing yet: the question waits in the link, its start
    beats count meanwhile, and it goes out behind READY."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    theirs.setblocking(False)
    link = workerlink.WorkerLink(0, loop)
    link.attach(ours)
    try:
        assert link.ask(0.0) is True
        with pytest.raises(BlockingIOError):
            theirs.recv(4)
        theirs.send(handover.ANSWER)  # a start beat
        link.read_answers()
        assert (link.answers, link.ready) == (1, False)
        with pytest.raises(BlockingIOError):
            theirs.recv(4)
        theirs.send(handover.READY)
        link.read_answers()
        assert (link.answers, link.ready) == (2, True)
        assert theirs.recv(4) == handover.QUESTION
    finally:
        link.close()
        theirs.close()


ANSWER_ONCE = """
import socket, sys, time
channel = socket.socket(fileno=int(sys.argv[1]))
channel.send(b"\\2")  # ready
assert channel.recv(4) == b"\\0\\0\\0\\0"
channel.send(b"\\1")
time.sleep(600)  # alive, and never answers again
"""


@pytest.mark.broker
def test_the_supervisor_kills_a_worker_that_stops_answering_and_restarts_it(caplog):
    loop = asyncio.new_event_loop()

    def command(index: int, handover_fd: int) -> list[str]:
        return [sys.executable, "-c", ANSWER_ONCE, str(handover_fd)]

    watched = supervisor.Supervisor(1, command, loop, timeout_s=1.0)
    caplog.set_level(logging.INFO, logger="hutch_broker.server.supervisor")
    now = 100.0
    watched.start(now)
    first = watched.pids()[0]
    assert first is not None
    link = watched.links[0]
    try:
        watched.tick(now)  # the first question
        turn_until(loop, lambda: link.answers == 2)  # READY and its answer
        while watched.pids()[0] == first:  # ticks four a second on the hand-driven clock
            now += 0.25
            watched.tick(now)
            loop.run_until_complete(asyncio.sleep(0.005))
        stuck = [r.getMessage() for r in caplog.records if "is stuck" in r.getMessage()]
        assert len(stuck) == 1
        assert stuck[0].startswith(f"vhost worker 0 (pid {first}) is stuck: silent for ")
        assert "no answer within 1.0 s; killing it (SIGKILL)" in stuck[0]
        assert now - 100.0 > 2.0  # asked a second after the answer, then a second unanswered
        assert watched.pids() == [None]
        exited = [
            r.getMessage() for r in caplog.records if f"(pid {first}) exited" in r.getMessage()
        ]
        assert len(exited) == 1
        assert "killed by SIGKILL" in exited[0]
        now += 0.5
        watched.tick(now)
        second = watched.pids()[0]
        assert second is not None and second != first
        watched.tick(now)  # the new worker is asked afresh and answers
        turn_until(loop, lambda: link.answers == 4)
    finally:
        _stop(watched, loop)


def _stop(watched: supervisor.Supervisor, loop: asyncio.AbstractEventLoop) -> None:
    """The test's workers killed and reaped, its links and loop closed."""
    watched.close_links()
    for pid in watched.pids():
        if pid is not None:
            os.kill(pid, 9)
    watched.stop_processes()
    loop.close()


NEVER_SPEAKS = "import time; time.sleep(600)"  # hangs before its first byte


@pytest.mark.broker
def test_the_supervisor_kills_a_worker_that_never_says_a_byte_past_the_start_bound(caplog):
    loop = asyncio.new_event_loop()
    watched = supervisor.Supervisor(
        1, lambda index, fd: [sys.executable, "-c", NEVER_SPEAKS], loop, timeout_s=1.0, start_s=2.0
    )
    caplog.set_level(logging.INFO, logger="hutch_broker.server.supervisor")
    now = 100.0
    watched.start(now)
    first = watched.pids()[0]
    try:
        while watched.pids()[0] == first:
            now += 0.25
            watched.tick(now)
            loop.run_until_complete(asyncio.sleep(0.005))
        stuck = [r.getMessage() for r in caplog.records if "is stuck" in r.getMessage()]
        assert len(stuck) == 1
        # Judged at the first tick past the 2 s start bound, 2.25 s after the start.
        assert stuck[0] == (
            f"vhost worker 0 (pid {first}) is stuck: not a byte in 2.2 s since its start "
            "(bound 2.0 s); killing it (SIGKILL) to restart it (0 waiting connections)"
        )
    finally:
        _stop(watched, loop)
