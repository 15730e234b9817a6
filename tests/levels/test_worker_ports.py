"""Each pytest-xdist worker picks broker ports from a shard of its own (hutch_demo.ports).

Why: a free port is only free until its broker binds it, a second or two later; two workers
starting brokers at the same moment could pick the same one, and a broker then fails to bind or
its readiness probe finds the other worker's broker. With ``HUTCH_PORT_SHARD=k/n``, set by
``hutch_testing.pytest_plugin`` on worker k of n, their picks are disjoint.
"""

from __future__ import annotations

import pytest
from hutch_demo import ports
from hutch_testing.pytest_plugin import worker_port_shard

WORKER_1 = {"PYTEST_XDIST_WORKER": "gw1", "PYTEST_XDIST_WORKER_COUNT": "2"}


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "2"}, "0/2"),
        (WORKER_1, "1/2"),
        ({}, None),  # not a worker: every port
        ({**WORKER_1, ports.SHARD_ENV: "0/3"}, None),  # already chosen (a nested run): kept
    ],
)
def test_a_worker_gets_the_shard_of_its_index(environ, expected):
    assert worker_port_shard(environ) == expected


@pytest.mark.parametrize(
    ("value", "expected"), [(None, (0, 1)), ("", (0, 1)), ("0/2", (0, 2)), ("1/2", (1, 2))]
)
def test_a_shard_is_read_as_k_of_n(value, expected):
    assert ports.shard(value) == expected


@pytest.mark.parametrize("value", ["2/2", "-1/2", "1", "a/b", "1/0"])
def test_a_bad_shard_is_refused_by_name(value):
    with pytest.raises(ValueError, match=ports.SHARD_ENV):
        ports.shard(value)


def test_shards_split_odd_and_even_ports_alike():
    # bind() to port 0 hands out odd ports on Linux: a shard by the low bit would be empty.
    for n in (2, 3):
        for port in range(1024, 1100):
            assert sum(ports.in_shard(port, k, n) for k in range(n)) == 1, (port, n)
        odd = range(1025, 1100, 2)
        assert {k for port in odd for k in range(n) if ports.in_shard(port, k, n)} == set(range(n))


@pytest.mark.broker  # binds sockets to ask the kernel for ports
@pytest.mark.parametrize("index", [0, 1])
def test_free_ports_keep_to_the_shard(monkeypatch, index):
    monkeypatch.setenv(ports.SHARD_ENV, f"{index}/2")
    picked = [port for _ in range(50) for port in ports.free_ports(2)]
    assert all(ports.in_shard(port, index, 2) for port in picked), picked
    assert all(ports.in_shard(ports.free_port(), index, 2) for _ in range(20))
