"""Scenarios 4 and 5 ("4v") run end to end on a hutch-broker, as bench/run.py runs them.

Why: it proves the scenario runs and that every one of the four pairs delivers, in the vhost
it belongs to; it measures no speed. The vhosts are created by the bench itself, through the
management API, as on RabbitMQ.

The first three runs share one broker (a hutch-broker start is 1.4-2.1 s on a loaded CI machine):
after each, what the scenarios make (their vhosts, scenario 4's queues in "/") is deleted and
checked gone, so every run creates its vhosts and queues itself and a queue the next one finds
is its own.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hutch_demo.management import Management, quote
from hutch_testing import vhosts
from hutch_testing.brokers import HutchBroker

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import run  # noqa: E402
import scenarios  # noqa: E402

pytestmark = pytest.mark.broker  # starts a broker and load generator processes

COUNT = 4000  # published in all, a quarter by each producer


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HutchBroker]:
    broker = vhosts.start_module_broker(tmp_path_factory)
    yield broker
    broker.stop(graceful=False)  # a clean shutdown is not under test here


@pytest.fixture
def broker(module_broker: HutchBroker) -> Iterator[HutchBroker]:
    """The module's broker, without the scenarios' vhosts and queues after the test."""
    yield module_broker
    api = Management(module_broker)
    paths = [
        f"/vhosts/{quote(vhost)}"
        for number in (4, 5)
        for vhost in scenarios.SCENARIOS[number].vhosts
    ]
    paths += [
        f"/queues/%2F/{quote(queue)}"
        for number in (4, 5)
        for index, queue in enumerate(scenarios.SCENARIOS[number].queues)
        if scenarios.SCENARIOS[number].vhost_of(index) is None
    ]
    for path in paths:
        api.delete(path)
        assert api.get(path).status == 404, path


def test_the_split_pairs_run_as_the_bench_runs_them_and_every_pair_delivers(broker) -> None:
    scenario = scenarios.SCENARIOS[5]
    record = run.one_run(broker, "hutch", scenario, "loadgen", duration=2, perftest_lib=None)
    assert "error" not in record, record
    assert [(pair["vhost"], pair["queue"]) for pair in record["pairs"]] == [
        ("bench-one", "bench.s5.q0"),
        ("bench-one", "bench.s5.q1"),
        ("bench-two", "bench.s5.q2"),
        ("bench-two", "bench.s5.q3"),
    ]
    assert all(pair["consumed"] > 0 for pair in record["pairs"]), record["pairs"]
    assert sum(pair["consumed"] for pair in record["pairs"]) == record["consumed"]
    assert record["broker_cores"] > 0
    assert record["cpu_us_per_message"] > 0


@pytest.mark.parametrize("number", [4, 5])
def test_each_pair_receives_exactly_what_its_producer_sent_to_its_own_queue(
    broker, number: int
) -> None:
    scenario = scenarios.SCENARIOS[number]
    run.create_vhosts(broker, scenario)
    # The drain ends once every message came; a broker starved by its neighbours gets 60 s.
    result = run.loadgen(
        broker.amqp_url,
        scenario,
        "--count",
        str(COUNT),
        "--drain-idle",
        "60",
        "--keep-topology",
        timeout=240,
    )
    pairs = result["pairs"]
    assert [pair["published"] for pair in pairs] == [COUNT // 4] * 4
    assert [pair["consumed"] for pair in pairs] == [COUNT // 4] * 4
    api = Management(broker)
    for index, queue in enumerate(scenario.queues):
        vhost = scenario.vhost_of(index) or "/"
        assert api.get(f"/queues/{quote(vhost)}/{quote(queue)}").status == 200, (vhost, queue)
        if vhost != "/":
            assert api.get(f"/queues/%2F/{quote(queue)}").status == 404, queue


def test_the_split_pairs_run_on_two_vhost_workers_as_the_bench_runs_them() -> None:
    """``bench/run.py --vhost-workers 2``: its own broker of a listener and two workers, the
    vhosts created through each owner's API (with both through worker 0's, ``bench-one``
    would not exist in worker 1 and its pairs' connections would be refused)."""
    args = run.parse_args(
        [
            *("--scenarios", "5", "--tools", "loadgen", "--brokers", "hutch"),
            *("--duration", "2", "--settle", "0", "--vhost-workers", "2"),
        ]
    )
    info, records = run.bench_broker("hutch", args, perftest_lib=None)
    assert "error" not in info, info
    [record] = records
    assert "error" not in record, record
    assert {pair["vhost"] for pair in record["pairs"]} == set(scenarios.PAIR_VHOSTS)
    assert all(pair["consumed"] > 0 for pair in record["pairs"]), record["pairs"]
    assert record["broker_cores"] > 0
