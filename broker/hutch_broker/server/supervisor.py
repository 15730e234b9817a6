"""The listener's vhost workers as processes: started, watched, restarted with a backoff.

Why restart here: a worker is a whole broker for its vhosts, and only the listener knows it is
one. When a worker exits for any reason but the broker's own stop, the listener logs which
worker, its exit status and when it starts it again, and starts a fresh process on the same
data directory (``<data-dir>/worker-<i>``): it recovers what was durable as a broker does after
a crash. Meanwhile the worker's connections wait in its queue (server/workerlink.py) or are
refused there as RabbitMQ refuses a vhost that is down. A worker that keeps dying is started
again after 0.5, 1, 2, 4 ... up to 30 s (``restart_delay_s``), so it cannot spin a core; one
that ran ``STABLE_S`` before it exited starts again at the first delay.

A worker that is alive but stuck (its loop blocked, its process stopped) never exits, so
``tick`` also asks each worker a liveness question over its link and judges the answers
(server/liveness.py): one silent for ``timeout_s`` is logged (which worker, how long silent),
killed with SIGKILL and then restarted as after any exit, on its own data directory.

Each start makes a new Unix socket pair: the worker gets one end as ``--handover-fd``, its
queue the other (``WorkerLink.attach``); the old worker's end died with it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import signal
import socket
import subprocess
import time
from collections.abc import Callable

from hutch_broker.server import liveness, workerlink

log = logging.getLogger(__name__)

FIRST_DELAY_S = 0.5
MAX_DELAY_S = 30.0
STABLE_S = 60.0  # a worker that ran this long before it exited was not crash-looping
STOP_WAIT_S = 30.0  # how long the listener waits for its workers' clean stop

Command = Callable[[int, int], list[str]]  # (worker index, handover fd) -> argv


def restart_delay_s(quick_exits: int) -> float:
    """The wait before a worker's next start after ``quick_exits`` exits in a row, each
    within ``STABLE_S`` of its start: doubling from ``FIRST_DELAY_S``, at most ``MAX_DELAY_S``."""
    if quick_exits < 1:
        return FIRST_DELAY_S
    return min(MAX_DELAY_S, FIRST_DELAY_S * 2.0 ** min(quick_exits - 1, 32))


def describe_exit(code: int) -> str:
    """``Popen.returncode`` in words: a status, or the signal that ended it."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


@dataclasses.dataclass
class _Slot:
    link: workerlink.WorkerLink
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    quick_exits: int = 0
    restart_at: float | None = None
    watch: liveness.Watch | None = None  # None: not started, or killed and not yet reaped


class Supervisor:
    """``count`` workers started by ``command``; ``tick`` notices exits and restarts."""

    def __init__(
        self,
        count: int,
        command: Command,
        loop: asyncio.AbstractEventLoop,
        *,
        max_waiting: int = workerlink.MAX_WAITING,
        timeout_s: float = liveness.TIMEOUT_S,
        start_s: float = liveness.START_S,
    ) -> None:
        liveness.check_timeout(timeout_s)
        self._timeout_s = timeout_s
        self._start_s = start_s
        self._command = command
        self._slots = [
            _Slot(workerlink.WorkerLink(index, loop, max_waiting=max_waiting))
            for index in range(count)
        ]
        self.stopping = False

    @property
    def links(self) -> list[workerlink.WorkerLink]:
        return [slot.link for slot in self._slots]

    def pids(self) -> list[int | None]:
        return [None if slot.process is None else slot.process.pid for slot in self._slots]

    def start(self, now: float) -> None:
        for slot in self._slots:
            self._spawn(slot, now)

    def tick(self, now: float) -> None:
        """Notice each worker's exit once, and start those whose delay has passed."""
        if self.stopping:
            return
        for slot in self._slots:
            if slot.process is not None:
                code = slot.process.poll()
                if code is not None:
                    self._exited(slot, code, now)
                else:
                    self._watch(slot, now)
            elif slot.restart_at is not None and now >= slot.restart_at:
                self._spawn(slot, now)

    def _spawn(self, slot: _Slot, now: float) -> None:
        index = slot.link.index
        slot.restart_at = None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            command = self._command(index, theirs.fileno())
            slot.process = subprocess.Popen(command, pass_fds=(theirs.fileno(),))  # noqa: S603
        except OSError as exc:
            ours.close()
            slot.quick_exits += 1
            delay = restart_delay_s(slot.quick_exits)
            slot.restart_at = now + delay
            log.error("vhost worker %d could not start: %s; trying again in %.1f s",
                      index, exc, delay)  # fmt: skip
            return
        finally:
            theirs.close()
        slot.started_at = now
        slot.link.attach(ours)
        slot.watch = liveness.Watch(
            self._timeout_s, answers=slot.link.answers, started_at=now, start_s=self._start_s
        )
        log.info("vhost worker %d started, pid %d", index, slot.process.pid)

    def _watch(self, slot: _Slot, now: float) -> None:
        watch, process = slot.watch, slot.process
        if watch is None or process is None:
            return
        verdict = watch.step(now, slot.link.answers)
        if verdict is liveness.Verdict.ASK:
            slot.link.ask(now)
        elif verdict is liveness.Verdict.STUCK:
            slot.watch = None  # the next tick reaps it and starts the restart
            if watch.heard_at is None:
                why = (f"not a byte in {watch.silent_s(now):.1f} s since its start "
                       f"(bound {watch.start_bound_s:.1f} s)")  # fmt: skip
            else:
                why = (f"silent for {watch.silent_s(now):.1f} s, no answer within "
                       f"{self._timeout_s:.1f} s")  # fmt: skip
            log.error(
                "vhost worker %d (pid %d) is stuck: %s; killing it (SIGKILL) to restart it "
                "(%d waiting connections)",
                slot.link.index, process.pid, why, slot.link.waiting(),
            )  # fmt: skip
            process.kill()

    def _exited(self, slot: _Slot, code: int, now: float) -> None:
        assert slot.process is not None  # noqa: S101 - called for a started process only
        pid, ran = slot.process.pid, now - slot.started_at
        slot.process = None
        slot.watch = None
        slot.link.detach()
        slot.quick_exits = slot.quick_exits + 1 if ran < STABLE_S else 1
        delay = restart_delay_s(slot.quick_exits)
        slot.restart_at = now + delay
        at = datetime.datetime.now(tz=datetime.UTC) + datetime.timedelta(seconds=delay)
        log.error(
            "vhost worker %d (pid %d) exited, %s, after %.1f s; restarting it in %.1f s, at "
            "%s UTC (%d waiting connections)",
            slot.link.index, pid, describe_exit(code), ran, delay,
            at.strftime("%H:%M:%S.%f")[:-3], slot.link.waiting(),
        )  # fmt: skip

    def close_links(self) -> None:
        """On the loop, first of the stop: each worker reads the end of its socket and stops;
        connections still waiting are refused."""
        self.stopping = True
        for slot in self._slots:
            slot.link.close()

    def stop_processes(self) -> bool:
        """Blocking (run it in a thread): SIGTERM each worker, wait for its clean stop, kill
        what is left after ``STOP_WAIT_S``; True if each stopped with status 0."""
        processes = [slot.process for slot in self._slots if slot.process is not None]
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        clean = True
        for process in processes:
            try:
                code = process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait()
            clean = clean and code == 0
        return clean
