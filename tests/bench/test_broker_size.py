"""bench/broker_size.py at a tiny size against a real hutch-broker, so the script cannot rot.

Why: the broker-size benchmark runs by hand (minutes at 10,000 queues, with RabbitMQ); nothing
else would notice when a launcher, the canary or the management API it pages through changes
under it. Here it runs every phase (--quick: 200 queues, 2,000 bindings) on hutch-broker only,
and the checks are the benchmark's own bookkeeping: every phase timed under a canary that did
send, the listings paged at 500 and complete, the export and import carrying every object, the
restarted broker listing every queue, memory read at both sizes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import broker_size  # noqa: E402


def test_the_topology_spreads_bindings_over_the_exchanges() -> None:
    assert broker_size.binding(7, 12) == ("size.x2", "size.q000007", "k.7.12")
    frames = broker_size.bind_frames(range(3), 4)
    assert len(frames) == 12
    moved = broker_size._on_channel(frames[0], 5)
    assert moved[1:3] == (5).to_bytes(2, "big")
    assert moved[3:] == frames[0][3:]


def test_the_import_leaves_out_the_canary_tenant() -> None:
    export = {
        "users": [{"name": "guest"}, {"name": broker_size.CANARY_TENANT}],
        "vhosts": [{"name": "size"}, {"name": broker_size.CANARY_TENANT}],
        "permissions": [{"vhost": "size"}, {"vhost": broker_size.CANARY_TENANT}],
        "queues": [{"name": "q"}],
    }
    kept = broker_size.importable(export)
    assert kept["users"] == [{"name": "guest"}]
    assert kept["vhosts"] == [{"name": "size"}]
    assert kept["permissions"] == [{"vhost": "size"}]
    assert kept["queues"] == export["queues"]


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(SystemExit):
        broker_size.parse_args(["--queues", "5"])
    with pytest.raises(SystemExit):
        broker_size.parse_args(["--brokers", "hutch,activemq"])


@pytest.mark.broker  # starts processes (hutch_testing.levels)
@pytest.mark.timeout(60)
def test_quick_run_on_hutch_broker_measures_every_phase(tmp_path: Path) -> None:
    output = tmp_path / "size.json"
    code = broker_size.main(["--quick", "--brokers", "hutch", "--output", str(output)])
    document = json.loads(output.read_text())
    (result,) = document["results"]
    assert code == 0, result.get("error")
    phases = result["phases"]
    assert list(phases) == list(broker_size.PHASES)
    for name, record in phases.items():
        assert record["seconds"] > 0, name
        assert record["rss_bytes"] > 0, name
        if name != "recover":  # the canary's broker is down while it recovers
            assert record["canary"]["count"] > 0, name
            assert record["canary"]["misses"] == 0, name
    assert phases["list_queues"].items() >= {"items": 200, "requests": 1, "paged": True}.items()
    # 2,000 bindings and one default-exchange binding per queue, 500 a page
    assert phases["list_bindings"]["items"] == 2_200
    assert phases["list_bindings"]["requests"] == 5
    assert (phases["export"]["queues"], phases["export"]["bindings"]) == (200, 2_000)
    assert phases["import"]["post_seconds"] > 0
    assert phases["recover"]["seconds"] >= phases["recover"]["answering_seconds"] > 0
    memory = result["memory"]
    for key in ("idle_rss_bytes", "rss_small_queues", "rss_all_queues", "rss_all_bindings"):
        assert memory[key] > 0, key
    assert {"bytes_per_queue", "bytes_per_binding"} <= set(memory)
