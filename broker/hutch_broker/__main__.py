"""``hutch-broker`` / ``python -m hutch_broker``: parse flags, wire, run. No logic here.

A broker that cannot start (bad config, port in use, unreadable data directory, definitions it
refuses to recover) says why in one line, ``hutch-broker: <reason>``, on stderr and exits
non-zero: a supervisor's log shows the reason, not a traceback (that goes to the DEBUG log).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from hutch_broker import config as config_mod
from hutch_broker import memory
from hutch_broker.protocol import errors as amqp_errors
from hutch_broker.store import errors as store_errors

EXIT_CONFIG = 2  # as argparse exits on a bad flag
EXIT_START = 1
# What start-up raises when it refuses: the OS (ports, files), the store (locked, corrupt,
# newer format) and the model importing recovered definitions it cannot accept.
START_ERRORS = (
    OSError,
    store_errors.StoreError,
    amqp_errors.AMQPError,
    ValueError,
    KeyError,
    TypeError,
)


def parse_args(argv: list[str] | None = None) -> config_mod.BrokerConfig:
    return _parse(argv)[0]


def _parse(argv: list[str] | None) -> tuple[config_mod.BrokerConfig, argparse.Namespace]:
    parser = argparse.ArgumentParser(prog="hutch-broker", description=__doc__)
    parser.add_argument("--amqp-port", type=int, help="AMQP listener port (default 5672)")
    parser.add_argument("--http-port", type=int, help="management API port (default 15672)")
    parser.add_argument("--data-dir", type=Path, help="durable state (default ./hutch-data)")
    parser.add_argument("--config", type=Path, help="rabbitmq.conf-style config file")
    parser.add_argument("--bind", help="listen address (default 127.0.0.1)")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument(
        "--vhost-workers",
        type=int,
        help="run the vhosts in N worker processes behind one listener (default 0: one process)",
    )
    parser.add_argument(
        "--vhost-worker-timeout",
        type=float,
        metavar="SECONDS",
        help="restart a vhost worker that leaves the listener's liveness question unanswered "
        "this long (default 10)",
    )
    # Set by the listener on the workers it starts (server/workers.py), never by hand.
    parser.add_argument("--vhost-worker-index", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--handover-fd", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    config = config_mod.BrokerConfig()
    if args.config is not None:
        try:
            config = config_mod.load(args.config, config)
        except (OSError, UnicodeDecodeError, config_mod.ConfigError) as exc:
            raise config_mod.ConfigError(f"{args.config}: {exc}") from exc
    # The operator passes the generated default user through the environment (from a Secret),
    # never through the config file, which lives in a ConfigMap.
    config.default_user = os.environ.get("HUTCH_DEFAULT_USER") or config.default_user
    config.default_pass = os.environ.get("HUTCH_DEFAULT_PASS") or config.default_pass
    # Flags beat the file: the operator and tests pick ports per process.
    if args.amqp_port is not None:
        config.amqp_port = args.amqp_port
    if args.http_port is not None:
        config.http_port = args.http_port
    if args.data_dir is not None:
        config.data_dir = args.data_dir
    if args.bind is not None:
        config.bind = args.bind
    if args.vhost_workers is not None:
        config.vhost_workers = args.vhost_workers
    if args.vhost_worker_timeout is not None:
        config.vhost_worker_timeout_s = args.vhost_worker_timeout
    return config, args


async def _serve(config: config_mod.BrokerConfig) -> bool:
    """Runs the broker until it stops; False when it stopped after a failed write."""
    from hutch_broker.server.app import BrokerServer  # noqa: PLC0415

    server = BrokerServer(config)
    server.install_signal_handlers()
    await server.start()
    memory.settle_startup_heap()
    await server.wait_stopped()
    await asyncio.sleep(0)
    return not server.failed


def _refuse(reason: str, code: int) -> int:
    sys.stderr.write(f"hutch-broker: {reason}\n")
    return code


def _reason(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"missing key {exc}"
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.strerror or exc}: {exc.filename}"
    return str(exc) or type(exc).__name__


def _serving(
    config: config_mod.BrokerConfig, args: argparse.Namespace, argv: list[str]
) -> Coroutine[Any, Any, bool]:
    """The one process, a vhost worker, or the listener in front of its workers."""
    if not config.vhost_workers:
        return _serve(config)
    from hutch_broker.server import workers  # noqa: PLC0415 - as _serve imports the server

    if args.handover_fd is not None and args.vhost_worker_index is not None:
        return workers.serve_worker(config, args.vhost_worker_index, args.handover_fd)
    workers.check(config)
    return workers.serve_listener(config, argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        config, args = _parse(argv)
    except config_mod.ConfigError as exc:
        return _refuse(str(exc), EXIT_CONFIG)
    try:
        import uvloop  # noqa: PLC0415
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        runner = asyncio.run
    else:
        runner = uvloop.run
    try:
        clean = runner(_serving(config, args, argv))
    except START_ERRORS as exc:
        logging.getLogger("hutch_broker").debug("start-up refused", exc_info=True)
        return _refuse(_reason(exc), EXIT_START)
    return 0 if clean else 70  # EX_SOFTWARE: stopped after a write failed


if __name__ == "__main__":
    sys.exit(main())
