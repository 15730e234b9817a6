"""A clean stop never looks like a failed write, and a failed write still does.

The broker syncs the message store in a worker thread. A SIGTERM used to close the store while
such a sync was still running (or about to start): the sync then failed on the closed store,
and that failure took the path of a failed fsync, CRITICAL "stopped after a failed write" (5 of
70 clean stops in the torture suite, exit 0). The race is made deterministic here by holding the
background sync in its thread until the store is closed (or, with the fix, until ``stop`` is
seen waiting for it); a real-process loop of SIGTERMs under load checks the log too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from pathlib import Path

import pika
from hutch_broker.server.app import BrokerServer
from hutch_broker.store import MessageStore, syncing

from tests.broker.store.appends import FIELDS


class HeldSync:
    """``server.store.sync`` that, in a worker thread, waits for ``release`` first."""

    def __init__(self, server: BrokerServer, *, fail: bool = False) -> None:
        self.real = server.store.sync
        self.fail = fail
        self.entered = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()
        self.releaser: asyncio.Task[None] | None = None

    def __call__(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self.real()  # stop()'s own sync, on the event loop
            return
        self.entered.set()
        try:
            self.release.wait(10)
            if self.fail:
                raise OSError(5, "Input/output error")
            self.real()
        finally:
            self.finished.set()


async def start_held_sync(server: BrokerServer, held: HeldSync) -> None:
    """A background sync in a worker thread, held before it touches the store; then release it
    when the store is closed, or when stop() waits for it (``_store_closing``)."""
    server.store.sync = held  # type: ignore[method-assign]
    real_close = server.store.close

    def close() -> None:
        real_close()
        held.release.set()

    server.store.close = close  # type: ignore[method-assign]
    server._maybe_start_sync(periodic=True)
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(None, held.entered.wait, 5)

    async def release_when_waited_for() -> None:
        deadline = loop.time() + 5
        while not held.release.is_set() and loop.time() < deadline:
            if getattr(server, "_store_closing", False):
                await asyncio.sleep(0.05)  # stop() is waiting, not closing
                held.release.set()
            await asyncio.sleep(0.01)
        held.release.set()

    held.releaser = loop.create_task(release_when_waited_for())


async def settle(held: HeldSync) -> None:
    """Until the held sync ended and the loop ran its callbacks."""
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(None, held.finished.wait, 10)
    for _ in range(20):
        await asyncio.sleep(0.01)


async def test_a_clean_stop_waits_for_the_running_sync(server, caplog) -> None:
    log = server.store.open_queue("/", "q")
    msg_id = log.append(body=b"kept", **FIELDS)
    held = HeldSync(server)
    await start_held_sync(server, held)
    with caplog.at_level(logging.INFO):
        await asyncio.wait_for(server.stop(), 10)
        await settle(held)
    loud = [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]
    assert loud == [], "a clean stop logged a failed write"
    assert not server.failed
    assert any(record.getMessage() == "stopped" for record in caplog.records)
    reopened = MessageStore(server.config.data_dir / "msgs")
    try:
        assert [m.msg_id for m in reopened.open_queue("/", "q").recover()] == [msg_id]
    finally:
        reopened.close()


async def test_a_sync_that_fails_while_stop_waits_still_stops_as_a_failed_write(
    server, caplog
) -> None:
    server.store.open_queue("/", "q").append(body=b"x", **FIELDS)
    held = HeldSync(server, fail=True)
    await start_held_sync(server, held)
    with caplog.at_level(logging.INFO):
        await asyncio.wait_for(server.stop(), 10)
        await settle(held)
        await asyncio.wait_for(server.wait_stopped(), 10)
    critical = [r.getMessage() for r in caplog.records if r.levelno >= logging.CRITICAL]
    assert "stopped after a failed write" in critical
    assert server.failed
    assert not any(record.getMessage() == "stopped" for record in caplog.records)


async def test_a_failed_fsync_in_the_final_sync_of_a_stop_is_a_failed_write(
    server, caplog, monkeypatch
) -> None:
    server.store.open_queue("/", "q").append(body=b"x", **FIELDS)

    def failing_fdatasync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(syncing, "_fdatasync", failing_fdatasync)
    with caplog.at_level(logging.INFO):
        await asyncio.wait_for(server.stop(), 10)
        await asyncio.wait_for(server.wait_stopped(), 10)
    critical = [r.getMessage() for r in caplog.records if r.levelno >= logging.CRITICAL]
    assert "stopped after a failed write" in critical
    assert server.failed


def load(url: str, stop: threading.Event) -> None:
    """Publish persistent messages with confirms and consume half of them, and let others
    expire into a dead-letter queue (store writes made by the broker's own timer, up to the
    stop), until the broker goes away (the connection error is the end, not a failure)."""
    with contextlib.suppress(Exception):
        connection = pika.BlockingConnection(pika.URLParameters(url))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("stop-load", durable=True)
        channel.queue_declare("stop-dead", durable=True)
        expiring = {
            "x-message-ttl": 30,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "stop-dead",
        }
        channel.queue_declare("stop-ttl", durable=True, arguments=expiring)
        properties = pika.BasicProperties(delivery_mode=2)
        sent = 0
        while not stop.is_set():
            channel.basic_publish("", "stop-load", b"m" * 200, properties)
            channel.basic_publish("", "stop-ttl", b"t" * 200, properties)
            sent += 1
            if sent % 2 == 0:
                method, _, _ = channel.basic_get("stop-load")
                if method is not None:
                    channel.basic_ack(method.delivery_tag)


def test_sigterm_under_load_never_logs_a_failed_write(hutch_broker_factory) -> None:
    """Real processes: each SIGTERM under a confirm publisher and a consumer exits 0 with no
    ERROR or CRITICAL line in the broker's output."""
    broker = hutch_broker_factory()
    console = Path(broker.console_log)
    for cycle in range(8):
        start = console.stat().st_size
        stop = threading.Event()
        worker = threading.Thread(target=load, args=(broker.amqp_url, stop), daemon=True)
        worker.start()
        time.sleep(0.3 + 0.15 * (cycle % 4))  # stops land at different points of the syncs
        code = broker.kill(signal.SIGTERM)
        stop.set()
        worker.join(10)
        with console.open("rb") as output:
            output.seek(start)
            lines = output.read().decode(errors="replace").splitlines()
        loud = [line for line in lines if "CRITICAL" in line or "ERROR" in line]
        assert code == 0, f"cycle {cycle}: exit {code}: {lines[-20:]}"
        assert loud == [], f"cycle {cycle}: {loud}"
        broker.restart()
