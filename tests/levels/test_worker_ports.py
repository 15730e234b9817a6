"""Each pytest-xdist worker picks broker ports from a shard of its own (hutch_demo.ports).

Why: a free port is only free until its broker binds it, a second or two later; two workers
starting brokers at the same moment could pick the same one, and a broker then fails to bind or
its readiness probe finds the other worker's broker. With ``HUTCH_PORT_SHARD=k/n``, set by
``hutch_testing.pytest_plugin`` on worker k of n, their picks are disjoint.
"""

from __future__ import annotations

import socket
import types

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


class ScriptedSocket:
    """Stands in for ``socket.socket``: each bind to port 0 gets the next scripted port, as the
    kernel may hand a port out again once the socket that held it is closed."""

    script: list[int] = []

    def __init__(self, *_args: object) -> None:
        self.port = 0

    def __enter__(self) -> ScriptedSocket:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def bind(self, _address: object) -> None:
        self.port = ScriptedSocket.script.pop(0)

    def getsockname(self) -> tuple[str, int]:
        return ports.LOOPBACK, self.port


def scripted_socket_module() -> types.SimpleNamespace:
    """The ``socket`` module as ports.py sees it, with ``ScriptedSocket`` for ``socket``."""
    return types.SimpleNamespace(
        socket=ScriptedSocket, AF_INET=socket.AF_INET, SOCK_STREAM=socket.SOCK_STREAM
    )


def test_a_port_handed_out_is_not_handed_out_again_by_the_next_call(monkeypatch):
    """A broker's two ports, then a TLS broker's two more before either binds (CI: RabbitMQ's
    HTTPS port came out equal to its HTTP port, and it refused to start)."""
    monkeypatch.delenv(ports.SHARD_ENV, raising=False)
    monkeypatch.setattr(ports, "_recent", ports.collections.deque(maxlen=ports.RECENT))
    monkeypatch.setattr(ports, "socket", scripted_socket_module())
    monkeypatch.setattr(ports, "_pickable_here", list)  # the kernel picks (bind to port 0)
    ScriptedSocket.script = [40001, 40003, 40003, 40001, 40005, 40007]
    assert ports.free_ports(2) == [40001, 40003]
    assert ports.free_ports(2) == [40005, 40007]  # the kernel offered 40003 and 40001 again
    assert ScriptedSocket.script == []


def test_the_ports_kept_back_are_only_the_last_ones(monkeypatch):
    monkeypatch.delenv(ports.SHARD_ENV, raising=False)
    monkeypatch.setattr(ports, "_recent", ports.collections.deque(maxlen=2))
    monkeypatch.setattr(ports, "socket", scripted_socket_module())
    monkeypatch.setattr(ports, "_pickable_here", list)
    ScriptedSocket.script = [40001, 40003, 40005, 40001]
    assert [ports.free_port() for _ in range(4)] == [40001, 40003, 40005, 40001]


def test_the_ephemeral_range_is_read_from_the_kernel_s_text():
    assert ports.ephemeral_range("32768\t60999\n") == range(32768, 61000)
    with pytest.raises(ValueError, match="values to unpack"):
        ports.ephemeral_range("32768")


@pytest.mark.parametrize(
    ("ephemeral", "expected"),
    [
        (
            range(32768, 61000),  # Linux's default
            [range(10300, 15670), range(15693, 25672), range(25673, 30000), range(61000, 65536)],
        ),
        (range(1024, 65536), []),  # nothing left: the kernel picks
        (range(20000, 65536), [range(10300, 15670), range(15693, 20000)]),
        (range(5000, 12000), [range(12000, 15670), range(15693, 25672), range(25673, 30000),
                              range(32768, 65536)]),
    ],
)  # fmt: skip
def test_ports_are_picked_outside_the_ephemeral_range_and_what_is_avoided(ephemeral, expected):
    assert ports.pickable(ephemeral) == expected


def test_candidates_keep_to_their_ranges_and_shard():
    ranges = [range(10300, 10310), range(61000, 61004)]
    drawn = ports.candidates(ranges, 1, 2, ports.random.Random(7))
    picked = [next(drawn) for _ in range(200)]
    assert all(ports.in_shard(port, 1, 2) for port in picked)
    assert set(picked) == {port for r in ranges for port in r if ports.in_shard(port, 1, 2)}
    assert list(ports.candidates([], 0, 1, ports.random.Random(7))) == []


@pytest.mark.broker  # binds sockets
def test_free_ports_are_outside_this_machine_s_ephemeral_range(monkeypatch):
    """Where any process's bind to port 0 or connect could take them before the broker binds
    (a CI run: "address already in use" on a port handed out a moment before)."""
    monkeypatch.setenv(ports.SHARD_ENV, "1/2")
    ephemeral = ports.ephemeral_range(ports.EPHEMERAL.read_text())
    assert ports.pickable(ephemeral), "this machine leaves no port outside its ephemeral range"
    picked = [port for _ in range(50) for port in ports.free_ports(2)]
    assert not [port for port in picked if port in ephemeral or port < ports.LOWEST], picked
    assert not [port for port in picked for avoided in ports.AVOID if port in avoided]
    assert all(ports.in_shard(port, 1, 2) for port in picked)
