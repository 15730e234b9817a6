"""The one home of the rule "nothing is confirmed before it is durable" (P-3).

A persistent message routed to a durable queue is written to that queue's log; the
publisher confirm (``basic.ack``) and a transaction's ``tx.commit-ok`` for it may go out
only once the group commit that followed the write has fsynced it. RabbitMQ states the
contract as "confirmed when it is on disk or acked by its consumers, whichever comes
first"; Hutch always writes such a message, even when it is handed straight to a consumer,
so "on disk" always comes and waiting for it is never wrong.

Generations make that cheap. Every write made while ``writing`` is G becomes durable when
the sync numbered G completes. Starting sync G moves ``writing`` to G+1 first, so a write
made while that sync runs waits for the next one. One sync covers every write of a tick
(group commit): the server asks ``start`` at the end of a tick, runs the fsyncs in a worker
thread and reports ``finished`` or ``failed``; it decides nothing.

Waiters (channels with confirms or commits pending) are told the durable generation after
each completed sync and after every tick, and release what it covers, in order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

NOT_DURABLE = 0  # the generation of a publish that wrote nothing: confirmable at once


class Waiter(Protocol):
    """A channel holding replies until their writes are durable."""

    def release_durable(self, durable_generation: int) -> None: ...


class GroupCommit:
    """Write generations, the running sync and the channels waiting for it."""

    def __init__(self, request_flush: Callable[[], None] = lambda: None) -> None:
        self._request_flush = request_flush
        self._writing = 1
        self._durable = 0
        # A write asked for a sync: the end of a tick starts one only then (read there inline,
        # an attribute and not a call, as every tick asks).
        self.wanted = False
        self._running: int | None = None
        self._waiters: set[Waiter] = set()
        self._told = 0  # the durable generation the waiters were last told
        self._joined = False  # a waiter registered since they were last told
        self._broken = False

    # -- the dispatch side -------------------------------------------------------------

    def wrote(self) -> int:
        """A store write was just buffered: the generation whose sync makes it durable."""
        self.wanted = True
        return self._writing

    def is_durable(self, generation: int) -> bool:
        return generation <= self._durable

    @property
    def durable_generation(self) -> int:
        return self._durable

    def wait(self, waiter: Waiter) -> None:
        """``waiter`` holds replies: tell it the durable generation until ``done``.

        Once is enough while it stays registered: a reply it adds later waits for a write
        made now or later, and the sync covering that write is started at the end of a tick
        that is already due (this call's flush request) or that ``finished`` requests once
        the running sync completes.
        """
        self._waiters.add(waiter)
        self._joined = True
        self._request_flush()

    def done(self, waiter: Waiter) -> None:
        self._waiters.discard(waiter)

    def release(self) -> None:
        """Let every waiter send what the durable generation covers (once per tick).

        Only when there is news: the durable generation moved, or a waiter registered (it
        may hold replies that wait for nothing, ``NOT_DURABLE``). A waiter already told holds
        nothing the same generation covers, as every reply it added since waits for a write
        made after that generation's sync started, or for the replies before it. Telling it
        again at every tick was a fifth of a tick's work with a publisher waiting for
        confirms, and a tick can be one message's whole turn.
        """
        durable = self._durable
        if durable == self._told and not self._joined:
            return
        self._told = durable
        self._joined = False
        for waiter in list(self._waiters):
            waiter.release_durable(durable)

    # -- the server side ----------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._running is not None

    def start(self, *, periodic: bool = False) -> int | None:
        """The generation of a sync to run now, or None: none is wanted, or one is running.

        ``periodic`` starts one even with no confirm waiting (acks and dead-lettered
        records are synced lazily by a timer).
        """
        if self._broken or self._running is not None or not (self.wanted or periodic):
            return None
        self.wanted = False
        generation = self._writing
        self._writing = generation + 1
        self._running = generation
        return generation

    def finished(self, generation: int) -> None:
        """The sync ``generation`` completed: every write made before it started is durable."""
        if generation != self._running:
            raise ValueError(f"sync {generation} finished but {self._running} was running")
        self._running = None
        if self._broken:
            return
        self._durable = generation
        self._request_flush()

    def failed(self, generation: int) -> None:
        """The sync failed: its writes are not durable, and no later sync may say they are.

        The durable generation never moves again, so every held reply stays held; the server
        stops the broker (as after a failed definitions fsync) and recovery starts from what
        is on disk.
        """
        if generation != self._running:
            raise ValueError(f"sync {generation} failed but {self._running} was running")
        self._broken = True

    @property
    def broken(self) -> bool:
        return self._broken
