"""Scenarios 4 and 5 ("4v"): four independent producer -> queue -> consumer pairs, in one vhost
or split over two, as both load generators are told to run them (bench/scenarios.py).

Why: the scenario is the yardstick for a broker on more than one core (#32), so a pair that
shared a queue, a connection or a routing key with another, or a vhost split that put three
pairs in one vhost, would measure something else without failing. These pin the translation
to loadgen's connections and to PerfTest's arguments; test_pairs_run.py runs it on a broker.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import loadgen  # noqa: E402
import perftest  # noqa: E402
import run  # noqa: E402
import scenarios  # noqa: E402
from hutch_broker.server.listener import worker_for  # noqa: E402
from hutch_demo.processes import Addressed  # noqa: E402
from pamqp import commands, frame  # noqa: E402

URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
FOUR, FOUR_V = scenarios.SCENARIOS[4], scenarios.SCENARIOS[5]


def test_four_pairs_as_scenario_1_otherwise() -> None:
    one = scenarios.SCENARIOS[1]
    for scenario in (FOUR, FOUR_V):
        assert len(set(scenario.queues)) == 4
        assert scenario.routing_keys == scenario.queues
        assert (scenario.producers, scenario.consumers) == (4, 4)
        assert (scenario.body_size, scenario.confirms, scenario.persistent) == (1024, False, False)
        assert (scenario.prefetch, scenario.ack_every, scenario.exchange) == (
            one.prefetch,
            one.ack_every,
            "",
        )
    assert set(FOUR.queues).isdisjoint(FOUR_V.queues)


def test_the_vhost_variant_puts_two_pairs_in_each_of_two_vhosts() -> None:
    assert FOUR.queues_by_vhost() == {None: list(FOUR.queues)}
    assert FOUR_V.queues_by_vhost() == {
        "bench-one": ["bench.s5.q0", "bench.s5.q1"],
        "bench-two": ["bench.s5.q2", "bench.s5.q3"],
    }


@pytest.mark.parametrize("number", [4, 5])
def test_loadgen_gives_each_pair_its_own_connections_key_and_vhost(number: int) -> None:
    scenario = scenarios.SCENARIOS[number]
    consumers, producers = loadgen.roles(scenario)
    assert [role.queue for role in consumers] == list(scenario.queues)
    assert [role.routing_keys for role in producers] == [(queue,) for queue in scenario.queues]
    assert [role.vhost for role in consumers] == [role.vhost for role in producers]
    assert [role.vhost for role in producers] == [scenario.vhost_of(i) for i in range(4)]


def test_a_pair_producer_publishes_to_its_own_queue_only() -> None:
    batches = loadgen.publish_batches(1, FOUR, ("bench.s4.q2",))
    keys = set()
    for batch in batches:
        offset = 0
        while offset < len(batch):
            consumed, _, method = frame.unmarshal(batch[offset:])
            offset += consumed
            if isinstance(method, commands.Basic.Publish):
                keys.add((method.exchange, method.routing_key))
    assert keys == {("", "bench.s4.q2")}


def test_the_other_scenarios_keep_one_vhost_and_their_keys() -> None:
    consumers, producers = loadgen.roles(scenarios.SCENARIOS[3])
    assert {role.vhost for role in consumers + producers} == {None}
    assert [role.routing_keys for role in producers] == [scenarios.SCENARIOS[3].routing_keys]


def test_loadgen_params_switch_vhost_and_keep_the_rest() -> None:
    params = loadgen.ConnectParams.from_url("amqp://u:p@127.0.0.1:5999/%2F")
    moved = params.in_vhost("bench-two")
    assert (moved.vhost, moved.port, moved.username) == ("bench-two", 5999, "u")
    assert params.in_vhost(None) is params


def test_perftest_runs_the_four_pairs_in_one_instance_by_queue_pattern() -> None:
    [command] = perftest.commands(Path("/lib"), URL, FOUR, 10)
    assert _option(command, "--producers") == "4"
    assert _option(command, "--consumers") == "4"
    assert _option(command, "--queue-pattern") == "bench.s4.q%d"
    assert (_option(command, "--queue-pattern-from"), _option(command, "--queue-pattern-to")) == (
        "0",
        "3",
    )
    assert "--routing-key" not in command  # each producer publishes to its queue by name
    assert _option(command, "--uri") == URL


def test_perftest_runs_one_instance_per_vhost_for_the_split_pairs() -> None:
    commands_ = perftest.commands(Path("/lib"), URL, FOUR_V, 10)
    assert [_option(c, "--uri") for c in commands_] == [
        "amqp://guest:guest@127.0.0.1:5672/bench-one",
        "amqp://guest:guest@127.0.0.1:5672/bench-two",
    ]
    assert [
        (_option(c, "--queue-pattern-from"), _option(c, "--queue-pattern-to")) for c in commands_
    ] == [("0", "1"), ("2", "3")]
    assert {(_option(c, "--producers"), _option(c, "--consumers")) for c in commands_} == {
        ("2", "2")
    }


def test_perftest_keeps_the_routing_key_of_the_other_scenarios() -> None:
    [command] = perftest.commands(Path("/lib"), URL, scenarios.SCENARIOS[3], 10)
    assert _option(command, "--routing-key") == "bench.42.3"
    assert _option(command, "--consumers") == "10"


def test_several_perftest_latencies_merge_to_each_percentiles_worst() -> None:
    merged = perftest._worst(
        [
            {"min": 1, "median": 50, "p99": 900, "unit": "µs"},
            {"min": 2, "median": 40, "p99": 1200, "unit": "µs"},
        ]
    )
    assert merged == {"min": 2, "median": 50, "p99": 1200, "unit": "µs"}
    assert perftest._worst([{"median": 1, "unit": "µs"}, {}]) == {}
    assert perftest._worst([{"median": 1, "unit": "µs"}, {"median": 1, "unit": "ms"}]) == {}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"producers": 3}, "pairs need one producer"),
        ({"consumers_per_queue": 2}, "pairs need one producer"),
        ({"exchange": "amq.direct"}, "pairs need one producer"),
        ({"vhosts": ("a", "b", "c")}, "vhosts split pairs evenly"),
    ],
)
def test_a_pairs_scenario_that_is_not_pairs_is_refused(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(FOUR, **overrides)


def test_loadgen_refuses_an_override_that_breaks_the_pairs(capsys) -> None:
    assert loadgen.main(["--scenario", "4", "--producers", "1", "--duration", "1"]) == 2
    assert "pairs need one producer" in capsys.readouterr().out


def test_the_default_run_leaves_the_pairs_out_and_takes_them_when_asked() -> None:
    assert run.parse_args([]).scenarios == [1, 2, 3]
    assert run.parse_args(["--scenarios", "4,5"]).scenarios == [4, 5]


def test_a_count_drain_ends_once_every_message_came_not_after_the_idle_wait(monkeypatch) -> None:
    """With each message reaching one queue, the drain stops at the expected count: a drain that
    waited for the idle window (60 s here) would take its turns of sleep past the third."""
    turns: list[float] = []  # 4 more messages come with every turn of sleep, 10 in all

    async def sleep(seconds: float) -> None:
        assert len(turns) < 3, "still draining after every message came"
        turns.append(seconds)

    monkeypatch.setattr(loadgen.asyncio, "sleep", sleep)
    far = time.monotonic() + 3600
    asyncio.run(loadgen._drain(lambda: min(10, 4 * len(turns)), [], far, idle=60, expected=10))
    assert len(turns) == 3


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


@pytest.mark.parametrize("workers", [2, 4])
def test_the_two_vhosts_land_in_different_vhost_workers(workers: int) -> None:
    """Else scenario 5 on hutch-broker --vhost-workers would run both vhosts on one core."""
    first, second = scenarios.PAIR_VHOSTS
    assert worker_for(first, workers) != worker_for(second, workers)


@dataclasses.dataclass
class _Broker(Addressed):
    host: str = "127.0.0.1"
    amqp_port: int = 5999
    http_port: int = 16000
    username: str = "guest"
    password: str = "guest"


def test_each_vhost_is_created_through_the_api_of_the_worker_that_owns_it() -> None:
    broker = _Broker()
    for vhost in ("bench-one", "bench-two", "/"):
        assert run.api_for(broker, vhost, 0).base == "http://127.0.0.1:16000"
        assert (
            run.api_for(broker, vhost, 2).base == f"http://127.0.0.1:{16000 + worker_for(vhost, 2)}"
        )
    assert {run.api_for(broker, vhost, 2).base for vhost in scenarios.PAIR_VHOSTS} == {
        "http://127.0.0.1:16000",
        "http://127.0.0.1:16001",
    }


def test_only_hutch_takes_vhost_workers() -> None:
    args = run.parse_args(["--vhost-workers", "2", "--brokers", "rabbitmq,hutch"])
    assert [run.workers_of(name, args) for name in ("hutch", "rabbitmq", run.BASELINE)] == [2, 0, 0]
    assert run.parse_args([]).vhost_workers == 0


@pytest.mark.parametrize("text", ["-1", "two", ""])
def test_a_bad_worker_count_is_refused(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run.parse_args(["--vhost-workers", text])
    assert "a number of workers, 0 or more" in capsys.readouterr().err


def test_the_comparing_scripts_take_a_list_of_worker_counts() -> None:
    """cpu_profile's and flush_stats' ``--vhost-workers 0,2``: one parser for both."""
    assert run.worker_counts("0,2") == [0, 2]
    assert run.worker_counts(" 2 ,") == [2]
    for text in ("", ",", "0,-1", "0,two"):
        with pytest.raises(argparse.ArgumentTypeError):
            run.worker_counts(text)
