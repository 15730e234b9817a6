"""Scenarios 4 and 5 ("4v") run end to end on a hutch-broker, as bench/run.py runs them.

Why: it proves the scenario runs and that every one of the four pairs delivers, in the vhost
it belongs to; it measures no speed. The vhosts are created by the bench itself, through the
management API, as on RabbitMQ.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hutch_demo.management import Management, quote

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import run  # noqa: E402
import scenarios  # noqa: E402

pytestmark = pytest.mark.broker  # starts a broker and load generator processes

COUNT = 4000  # published in all, a quarter by each producer


def test_the_split_pairs_run_as_the_bench_runs_them_and_every_pair_delivers(
    hutch_broker_factory,
) -> None:
    broker = hutch_broker_factory()
    scenario = scenarios.SCENARIOS[5]
    record = run.one_run(broker, "hutch", scenario, "loadgen", duration=2, perftest_lib=None)
    assert "error" not in record, record
    assert [(pair["vhost"], pair["queue"]) for pair in record["pairs"]] == [
        ("bench-v0", "bench.s5.q0"),
        ("bench-v0", "bench.s5.q1"),
        ("bench-v1", "bench.s5.q2"),
        ("bench-v1", "bench.s5.q3"),
    ]
    assert all(pair["consumed"] > 0 for pair in record["pairs"]), record["pairs"]
    assert sum(pair["consumed"] for pair in record["pairs"]) == record["consumed"]
    assert record["broker_cores"] > 0
    assert record["cpu_us_per_message"] > 0


@pytest.mark.parametrize("number", [4, 5])
def test_each_pair_receives_exactly_what_its_producer_sent_to_its_own_queue(
    hutch_broker_factory, number: int
) -> None:
    broker = hutch_broker_factory()
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
