"""The message store's sync starts only when a write needs one, and every write still gets one.

Two paths start a sync: the end of a tick, for the writes a confirm or a commit waits for
(``GroupCommit.wanted``), and the once-a-second timer, for acks and dead-lettered records, which
nobody waits for. Both used to run on every turn whatever had been written: each tick asked the
group commit for a sync, and an idle broker ran an empty sync in a worker thread every second
(and a tick to hear that it finished). The broker here runs in the test's event loop, with its
own timer; the store's ``sync`` is counted where it runs, in the worker thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from hutch_broker.server.app import BrokerServer
from hutch_broker.store import segments

from tests.broker.store.appends import FIELDS

WAIT_S = 30.0  # a bound for a loaded machine; each wait returns as soon as its condition holds


class Counted:
    """Wraps a method of an object and counts its calls, from any thread."""

    def __init__(self, owner: Any, name: str) -> None:
        self.real = getattr(owner, name)
        self.calls = 0
        self._lock = threading.Lock()
        setattr(owner, name, self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self.calls += 1
        return self.real(*args, **kwargs)


async def wait_until(condition: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not condition():
        assert loop.time() < deadline, f"not within {WAIT_S:.0f} s: {what}"
        await asyncio.sleep(0.01)


def count_sync_work(server: BrokerServer) -> tuple[Counted, Counted, Counted]:
    """The store's syncs, the group commit's start requests and the timer's turns, counted."""
    return (
        Counted(server.store, "sync"),
        Counted(server.context.commits, "start"),
        Counted(server, "_tick_connections"),  # once per turn of the one-second timer
    )


async def test_idle_ticks_and_timer_turns_do_no_sync_work(server: BrokerServer) -> None:
    syncs, starts, timer_turns = count_sync_work(server)
    for _ in range(1000):
        server._end_of_tick()
    await wait_until(lambda: timer_turns.calls >= 2, "two turns of the broker's timer")
    assert (starts.calls, syncs.calls) == (0, 0), "idle turns asked for or ran a sync"


async def test_a_write_a_confirm_waits_for_is_synced_at_the_end_of_its_tick(
    server: BrokerServer,
) -> None:
    log = server.store.open_queue("/", "q")
    syncs, _, _ = count_sync_work(server)
    log.append(body=b"kept", **FIELDS)
    generation = server.context.commits.wrote()
    server.request_flush()
    await wait_until(lambda: server.context.commits.is_durable(generation), "the write durable")
    assert syncs.calls >= 1
    assert not server.store.dirty


async def test_an_ack_nobody_waits_for_is_synced_by_the_timer(server: BrokerServer) -> None:
    log = server.store.open_queue("/", "q")
    msg_id = log.append(body=b"acked", **FIELDS)
    generation = server.context.commits.wrote()
    server.request_flush()
    await wait_until(lambda: server.context.commits.is_durable(generation), "the append durable")
    syncs, starts, _ = count_sync_work(server)
    log.ack(msg_id)  # no wrote(): nothing is confirmed after an ack
    assert not server.context.commits.wanted
    ack_file = log.directory / segments.ack_name(msg_id >> 32)
    commits = server.context.commits
    await wait_until(
        lambda: not server.store.dirty and not commits.running and ack_file.exists(),
        "the timer syncing the ack",
    )
    assert syncs.calls == starts.calls >= 1
    assert ack_file.stat().st_size == 8
