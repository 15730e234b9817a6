"""The pure parts of ``--vhost-workers``: which worker owns a vhost, each worker's settings, the
configurations the listener refuses, and the restart backoff. In memory, but for two tests with
processes: the broker's refusal of TLS, and the supervisor restarting a worker that exits at
once; the broker's processes are in test_vhost_workers.py."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from hutch_broker import __main__ as broker_main
from hutch_broker.config import BrokerConfig
from hutch_broker.server import supervisor, workers
from hutch_broker.server.listener import worker_for


def test_a_vhost_has_one_owner_the_same_in_every_process():
    assert worker_for("/", 2) == worker_for("/", 2)
    assert [worker_for("/", 2), worker_for("tenant-0", 2)] == [0, 1]  # CRC-32, not hash()
    assert worker_for("anything", 1) == 0


def test_owners_spread_over_the_workers():
    owners = Counter(worker_for(f"team-{n}", 4) for n in range(400))
    assert set(owners) == {0, 1, 2, 3}
    assert min(owners.values()) > 60


def test_a_worker_has_its_own_store_and_management_port_and_no_amqp_listener(tmp_path):
    config = BrokerConfig(
        amqp_port=5672,
        http_port=15672,
        management_ssl_port=15671,
        data_dir=tmp_path,
        vhost_workers=2,
    )
    second = workers.worker_config(config, 1)
    assert (second.amqp_port, second.ssl_port) == (None, None)
    assert (second.http_port, second.management_ssl_port) == (15673, 15672)
    assert second.data_dir == tmp_path / "worker-1"
    assert config.data_dir == tmp_path  # the listener's own settings are left alone
    assert workers.worker_config(BrokerConfig(http_port=None), 1).http_port is None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"vhost_workers": -1}, "must be 0 or more"),
        ({"vhost_workers": 2, "ssl_port": 5671}, "plain AMQP only"),
        ({"vhost_workers": 2, "amqp_port": None}, "needs an AMQP port"),
    ],
)
def test_configurations_the_listener_refuses(changes, message):
    with pytest.raises(ValueError, match=message):
        workers.check(BrokerConfig(**changes))


def test_the_flag_reaches_the_config():
    assert broker_main.parse_args(["--vhost-workers", "3"]).vhost_workers == 3
    assert broker_main.parse_args([]).vhost_workers == 0


@pytest.mark.broker
def test_the_broker_refuses_vhost_workers_with_tls_and_says_why(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("listeners.ssl.default = 5671\n")
    done = subprocess.run(
        [sys.executable, "-m", "hutch_broker", "--vhost-workers", "2", "--config", str(conf),
         "--data-dir", str(tmp_path / "data")],
        capture_output=True, text=True, timeout=60, check=False, cwd=Path(tmp_path),
    )  # fmt: skip
    assert done.returncode != 0
    assert "--vhost-workers takes plain AMQP only" in done.stderr


def test_a_worker_that_keeps_dying_waits_longer_each_time_up_to_a_bound():
    delays = [supervisor.restart_delay_s(exits) for exits in range(1, 10)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert supervisor.restart_delay_s(10**6) == supervisor.MAX_DELAY_S  # no overflow


def test_an_exit_is_told_as_a_status_or_a_signal():
    assert supervisor.describe_exit(3) == "exit status 3"
    assert supervisor.describe_exit(-9) == "killed by SIGKILL"
    assert supervisor.describe_exit(-200) == "killed by signal 200"


@pytest.mark.broker
def test_the_supervisor_restarts_a_dying_worker_with_a_growing_delay(caplog):
    """Real processes that exit at once, and a clock driven by hand: each exit is logged with
    its worker, status and restart time, and no start comes before its delay."""
    loop = asyncio.new_event_loop()
    started: list[int] = []

    def command(index: int, handover_fd: int) -> list[str]:
        started.append(index)
        return [sys.executable, "-c", "raise SystemExit(3)"]

    workers = supervisor.Supervisor(1, command, loop)
    caplog.set_level(logging.INFO, logger="hutch_broker.server.supervisor")
    now = 100.0
    workers.start(now)
    delays = []
    for _ in range(3):
        pid = workers.pids()[0]
        assert pid is not None
        while workers.pids()[0] is not None:  # the process exits; the tick notices it
            workers.tick(now)
            time.sleep(0.01)
        exited = [r.getMessage() for r in caplog.records if f"(pid {pid}) exited" in r.getMessage()]
        assert len(exited) == 1
        assert exited[0].startswith(f"vhost worker 0 (pid {pid}) exited, exit status 3, after")
        delay = float(exited[0].split("restarting it in ")[1].split(" s")[0])
        delays.append(delay)
        workers.tick(now + delay - 0.01)
        assert workers.pids() == [None]  # not before its time
        now += delay
        workers.tick(now)
    assert delays == [0.5, 1.0, 2.0]
    assert started == [0, 0, 0, 0]
    workers.close_links()
    assert workers.stop_processes() is False  # the last one exited with 3
    loop.close()
