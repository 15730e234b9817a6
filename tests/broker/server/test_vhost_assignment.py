"""The pure parts of ``--vhost-workers``: which worker owns a vhost, each worker's settings, and
the configurations the listener refuses. In memory; the processes are in test_vhost_workers.py."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hutch_broker import __main__ as broker_main
from hutch_broker.config import BrokerConfig
from hutch_broker.server import workers
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
