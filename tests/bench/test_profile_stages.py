"""bench/cpu_profile.py's classification of sampled stacks into a message's stages (pure)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import cpu_profile as broker_profile

ROOT = (
    "_run_module_as_main (<frozen runpy>:198);main (hutch_broker/__main__.py:112);"
    "Runner.run (asyncio/runners.py:118);"
    "AMQPConnection.data_received (hutch_broker/server/amqp.py:111);"
    "Session._process (hutch_broker/dispatch/sessions.py:115)"
)


@pytest.mark.parametrize(
    ("tail", "stage"),
    [
        ("Connection.next_event (hutch_broker/protocol/connection.py:300)", "read"),
        ("publish (hutch_broker/dispatch/publishing.py:70)", "publish"),
        (
            "publish (hutch_broker/dispatch/publishing.py:70);"
            "publish_within (hutch_broker/model/publishes.py:90)",
            "route",
        ),
        (
            "publish (hutch_broker/dispatch/publishing.py:70);"
            "publish_within (hutch_broker/model/publishes.py:90);"
            "Queue.publish (hutch_broker/model/queues.py:162)",
            "enqueue",
        ),
        # A consumer was waiting: the delivery made inside the publish counts as delivery.
        (
            "publish (hutch_broker/dispatch/publishing.py:70);"
            "Queue.publish (hutch_broker/model/queues.py:162);"
            "Channel.deliver (hutch_broker/dispatch/channels.py:142);"
            "encode_deliver (hutch_broker/protocol/codec.py:154)",
            "deliver",
        ),
        (
            "handle (hutch_broker/dispatch/methods.py:10);basic_ack (hutch_broker/dispatch/methods.py:421)",
            "ack",
        ),
        ("GroupCommit.release (hutch_broker/dispatch/commits.py:50)", "confirm"),
        # send_deliver lives in protocol/connection.py, which read claims file-wide: the marker
        # that names it wins, so its own samples are delivery's, inside a publish or a drain.
        (
            "publish (hutch_broker/dispatch/publishing.py:70);"
            "Queue.publish (hutch_broker/model/queues.py:162);"
            "Channel.deliver (hutch_broker/dispatch/channels.py:142);"
            "Connection.send_deliver (hutch_broker/protocol/connection.py:915)",
            "deliver",
        ),
        (
            "Connection.next_event (hutch_broker/protocol/connection.py:300);"
            "Connection.send_deliver (hutch_broker/protocol/connection.py:915)",
            "deliver",
        ),
        # A confirm's basic.ack goes out through send_method: the caller's stage, not read.
        (
            "GroupCommit.release (hutch_broker/dispatch/commits.py:50);"
            "Channel.release_durable (hutch_broker/dispatch/channels.py:290);"
            "Connection.send_method (hutch_broker/protocol/connection.py:900);"
            "encode_method (hutch_broker/protocol/codec.py:110)",
            "confirm",
        ),
    ],
)
def test_a_sample_belongs_to_its_deepest_stage(tail: str, stage: str) -> None:
    frames = [broker_profile.Frame.parse(part) for part in f"{ROOT};{tail}".split(";")]
    found = broker_profile.stage_of(frames)
    assert found == stage or found.startswith(stage + ":")


def test_the_loop_and_its_timers_are_the_rest() -> None:
    stack = "main (hutch_broker/__main__.py:112);Runner.run (asyncio/runners.py:118)"
    timers = stack + ";BrokerServer._timers (hutch_broker/server/app.py:400)"
    for text in (stack, timers):
        frames = [broker_profile.Frame.parse(part) for part in text.split(";")]
        assert broker_profile.stage_of(frames) == broker_profile.OTHER


def test_a_function_of_the_same_name_in_another_file_is_not_a_marker() -> None:
    frames = [broker_profile.Frame.parse("publish (somewhere/else.py:1)")]
    assert broker_profile.stage_of(frames) == broker_profile.OTHER


def test_collapsed_lines_are_counted_and_shares_become_microseconds() -> None:
    lines = [
        f"{ROOT};Connection.next_event (hutch_broker/protocol/connection.py:300) 30",
        f"{ROOT};publish (hutch_broker/dispatch/publishing.py:70) 10",
        "main (hutch_broker/__main__.py:112);Runner.run (asyncio/runners.py:118) 10",
        "",
        "not a sample line",
    ]
    counts = broker_profile.stage_samples(lines)
    assert sum(counts.values()) == 50
    rows = {row["stage"].split(":")[0]: row for row in broker_profile.breakdown(counts, 10.0)}
    assert rows["read"]["share"] == 0.6
    assert rows["read"]["us_per_message"] == 6.0
    assert rows["publish"]["us_per_message"] == 2.0
    assert rows[broker_profile.OTHER.split(":")[0]]["us_per_message"] == 2.0
    assert rows["deliver"]["samples"] == 0
    assert sum(row["us_per_message"] for row in rows.values()) == pytest.approx(10.0)


def test_no_samples_gives_no_rows() -> None:
    assert broker_profile.breakdown(Counter(), 12.0) == []


def test_the_table_has_a_row_per_stage_and_the_totals() -> None:
    counts = Counter({broker_profile.STAGES[0][0]: 3, broker_profile.OTHER: 1})
    result = {
        "scenario": 1,
        "cpu_us_per_message": 8.0,
        "consumed_per_s": 1000,
        "stages": broker_profile.breakdown(counts, 8.0),
    }
    text = broker_profile.markdown([result])
    assert "| read: socket and frame parsing | 6.00 µs (75%) |" in text
    assert "**8.00 µs**" in text
    assert len(text.splitlines()) == 2 + len(broker_profile.STAGES) + 1 + 2


def test_a_vhost_worker_is_known_by_its_index_flag() -> None:
    worker = [b"python", b"-m", b"hutch_broker", b"--vhost-workers", b"2",
              b"--vhost-worker-index", b"1", b"--handover-fd", b"5", b""]  # fmt: skip
    listener = [b"python", b"-m", b"hutch_broker", b"--vhost-workers", b"2", b""]
    assert broker_profile.is_vhost_worker(worker)
    assert not broker_profile.is_vhost_worker(listener)
    assert not broker_profile.is_vhost_worker([b"--vhost-worker-index"])  # no index after it


def test_a_workers_column_is_titled_and_shows_what_was_not_sampled() -> None:
    counts = Counter({broker_profile.STAGES[0][0]: 1})
    one = {"scenario": 5, "cpu_us_per_message": 4.0, "consumed_per_s": 1000,
           "unsampled_us_per_message": 0.0, "stages": broker_profile.breakdown(counts, 4.0)}  # fmt: skip
    workers = {**one, "vhost_workers": 2, "cpu_us_per_message": 5.0,
               "unsampled_us_per_message": 0.5, "stages": broker_profile.breakdown(counts, 4.5)}  # fmt: skip
    text = broker_profile.markdown([one, workers])
    assert text.splitlines()[0] == "| stage | scenario 5 | scenario 5, 2 vhost workers |"
    assert "| read: socket and frame parsing | 4.00 µs (100%) | 4.50 µs (100%) |" in text
    assert "| not sampled: the workers' listener | 0.00 µs | 0.50 µs |" in text
    assert "| **broker CPU per consumed message** | **4.00 µs** | **5.00 µs** |" in text


@pytest.mark.parametrize("given", ["x", "2,-1", ","])
def test_worker_counts_that_are_not_counts_are_refused(given: str, capsys) -> None:
    with pytest.raises(SystemExit):
        broker_profile.main(["--vhost-workers", given])
    assert "--vhost-workers:" in capsys.readouterr().err


def test_system_calls_come_from_the_io_file_and_show_as_rows() -> None:
    text = "rchar: 10\nwchar: 20\nsyscr: 7\nsyscw: 9\nread_bytes: 0\n"
    assert broker_profile.io_calls(text) == (7, 9)
    counts = Counter({broker_profile.OTHER: 1})
    result = {"scenario": 5, "cpu_us_per_message": 4.0, "consumed_per_s": 1000,
              "read_calls_per_message": 0.25, "write_calls_per_message": 0.125,
              "stages": broker_profile.breakdown(counts, 4.0)}  # fmt: skip
    text = broker_profile.markdown([result])
    assert "| read system calls per consumed message | 0.250 |" in text
    assert "| write system calls per consumed message | 0.125 |" in text
