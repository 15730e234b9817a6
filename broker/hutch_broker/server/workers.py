"""A broker of several processes, ``--vhost-workers N``: one listener and N vhost workers.

The decided design for the second core (docs/bench/profile.md, "The second core: the
decision"): each worker is today's broker (``BrokerServer``: one loop, the same budgets, its own
store under ``<data-dir>/worker-<i>``) for the vhosts ``listener.worker_for`` gives it; the
listener process accepts AMQP connections, runs their handshakes to connection.open and hands
each socket to its vhost's worker (server/handover.py). Off by default: without the option the
broker is the one process it always was.

Step 1, what this wires and what it does not: workers are started by the listener as
``python -m hutch_broker <the same flags> --vhost-worker-index I --handover-fd FD``, FD one end
of a Unix socket pair the listener made; worker I serves its own management API on
``http-port + I`` (and HTTPS on ``management-ssl-port + I``) and listens for no AMQP itself.
Nothing crosses workers yet: each worker's management API shows its own vhosts, connections and
statistics, each worker creates the default user and vhost "/" on first boot as a broker does,
and the listener knows the users from the same configuration (the default user) only. The
listener never waits for a worker: each has a bounded queue of connections
(server/workerlink.py), and a worker that exits, or is stuck (server/liveness.py; a starting
one beats for itself, server/startbeat.py), is restarted with a backoff (server/supervisor.py).
TLS listeners are refused with this option (a TLS session cannot move between processes).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import socket
import sys
import time
from collections.abc import Coroutine
from typing import Any

from hutch_broker import __version__, memory
from hutch_broker.config import BrokerConfig
from hutch_broker.model.broker import Broker
from hutch_broker.protocol import handshakes, identity
from hutch_broker.server import handover, liveness, startbeat, supervisor
from hutch_broker.server.app import BrokerServer
from hutch_broker.server.listener import Listener

log = logging.getLogger(__name__)

TICK_S = 0.25  # how often the listener looks for handshake timeouts and exited workers


def worker_config(config: BrokerConfig, index: int) -> BrokerConfig:
    """Worker ``index``'s configuration: its own store and management port, no AMQP port."""
    return dataclasses.replace(
        config,
        amqp_port=None,
        ssl_port=None,
        http_port=None if config.http_port is None else config.http_port + index,
        management_ssl_port=(
            None if config.management_ssl_port is None else config.management_ssl_port + index
        ),
        data_dir=config.data_dir / f"worker-{index}",
    )


def check(config: BrokerConfig) -> None:
    """``ValueError`` for a configuration the listener cannot serve."""
    if config.vhost_workers < 0:
        raise ValueError(f"--vhost-workers must be 0 or more: {config.vhost_workers}")
    if config.vhost_workers and config.ssl_port is not None:
        raise ValueError("--vhost-workers takes plain AMQP only: an AMQPS listener is configured")
    if config.vhost_workers and config.amqp_port is None:
        raise ValueError("--vhost-workers needs an AMQP port")
    liveness.check_timeout(config.vhost_worker_timeout_s)


async def serve_worker(config: BrokerConfig, index: int, handover_fd: int) -> bool:
    """Run worker ``index`` until it stops (or the listener goes); False after a failed write."""
    channel = socket.socket(fileno=handover_fd)
    # Until the loop reads the socket, a thread tells the listener the start goes on
    # (server/startbeat.py): the store's recovery runs on this thread, as long as it takes.
    beat = startbeat.StartBeat(channel).start()
    try:
        server = BrokerServer(worker_config(config, index))
        server.install_signal_handlers()
        await server.start()
    finally:
        beat.stop()
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()  # held until done, as asyncio asks

    def run(coroutine: Coroutine[Any, Any, None]) -> None:
        task = loop.create_task(coroutine)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def adopt(client: socket.socket, handshake: handshakes.Handshake) -> None:
        run(_adopt(server, client, handshake))

    stopped = False  # by a signal or a failed write, before the listener went

    def listener_gone() -> None:
        loop.remove_reader(receiver.fileno())
        if not stopped:
            log.info("vhost worker %d: the listener is gone, stopping", index)
            run(server.stop())

    receiver = handover.Receiver(channel, adopt, listener_gone)
    loop.add_reader(receiver.fileno(), receiver.readable)
    receiver.ready()  # the listener hands connections over from now on
    log.info("vhost worker %d ready (management port %s)", index, server.config.http_port)
    memory.settle_startup_heap()
    await server.wait_stopped()
    stopped = True
    receiver.close()
    return not server.failed


async def _adopt(
    server: BrokerServer, client: socket.socket, handshake: handshakes.Handshake
) -> None:
    try:
        await server.adopt(client, handshake)
    except Exception as exc:  # any failure refuses this connection alone
        log.exception("vhost worker: could not adopt a connection")
        handover.refuse(client, f"the broker could not take over this connection: {exc}")


async def serve_listener(config: BrokerConfig, argv: list[str]) -> bool:
    """Start the workers with ``argv`` (this process's flags), then listen until stopped."""
    check(config)
    loop = asyncio.get_running_loop()

    def command(index: int, handover_fd: int) -> list[str]:
        return [
            sys.executable, "-m", "hutch_broker", *argv,
            "--vhost-worker-index", str(index), "--handover-fd", str(handover_fd),
        ]  # fmt: skip

    workers = supervisor.Supervisor(
        config.vhost_workers, command, loop, timeout_s=config.vhost_worker_timeout_s
    )
    workers.start(time.monotonic())
    users = Broker(
        cluster_name=config.cluster_name or f"hutch@{socket.gethostname()}",
        loopback_users=config.loopback_users,
    )
    users.create_defaults(user=config.default_user, password=config.default_pass)
    options = {
        "server_properties": identity.server_properties(
            version=__version__,
            cluster_name=users.display_cluster_name,
            configured=config.server_properties,
        ),
        "channel_max": config.channel_max,
        "frame_max": config.frame_max,
        "heartbeat": config.heartbeat,
        "max_body_size": config.max_message_size,
    }
    links = workers.links
    listener = Listener(options, users, links, handshake_timeout_s=config.handshake_timeout_s)
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    try:
        assert config.amqp_port is not None  # noqa: S101 - check() refused None
        await listener.start(config.bind, config.amqp_port)
        while not stopping.is_set():
            try:
                await asyncio.wait_for(stopping.wait(), timeout=TICK_S)
            except TimeoutError:
                now = time.monotonic()
                listener.tick(now)
                workers.tick(now)
    finally:
        listener.close()
        workers.close_links()  # each worker reads the end and stops
        clean = await asyncio.to_thread(workers.stop_processes)
    return clean
