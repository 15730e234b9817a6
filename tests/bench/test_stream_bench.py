"""The stream benchmark's pure parts: its flags, its summaries and table, and Kafka's set-up text.

Why: bench/stream_bench.py compares the Hutch stream source with Spark's Kafka source over
interleaved rounds; a wrong pairing of rounds or a ratio turned upside down would misreport the
figures issue 28 asks for, and a bad flag should fail before a broker or Spark starts. Nothing
here starts Kafka, a broker or Spark.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import comparison  # noqa: E402
import kafka  # noqa: E402
import stream_bench  # noqa: E402
import stream_summary  # noqa: E402


def test_defaults_compare_both_systems_with_the_same_load() -> None:
    args = stream_bench.parse_args([])
    assert args.systems == ["hutch", "kafka"]
    assert args.modes == ["plain", "batch", "available-now"]
    assert (args.messages, args.body_size, args.partitions, args.repeat) == (200_000, 200, 2, 3)
    assert args.warm_up is True
    assert args.prime is True
    assert args.scaling is False
    assert stream_bench.parse_args(["--no-prime"]).prime is False


def test_the_priming_read_takes_the_same_first_offsets_of_each_partition_on_both_systems() -> None:
    each = stream_bench.PRIME_OFFSETS
    assert stream_bench.prime_share(2, 200_000) == each
    # One stream, sliced by numPartitions: [0, 2 * each) is each slice's `each`.
    assert json.loads(stream_bench.Hutch.prime_ends("s", 2, each)) == {"s": 2 * each}
    assert json.loads(stream_bench.Kafka.prime_ends("t", 2, each)) == {"t": {"0": each, "1": each}}
    # A small load: a quarter of each partition's share at most, and never nothing.
    assert stream_bench.prime_share(2, 800) == 100
    assert stream_bench.prime_share(3, 5) == 1


def test_lists_are_parsed_and_deduplicated_in_order() -> None:
    args = stream_bench.parse_args(["--systems", "kafka,hutch,kafka", "--modes", "batch"])
    assert args.systems == ["kafka", "hutch"]
    assert args.modes == ["batch"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--systems", "hutch,pulsar"],
        ["--systems", ""],
        ["--modes", "continuous"],
        ["--messages", "0"],
        ["--repeat", "-1"],
        ["--partitions", "x"],
        ["--latency-seconds", "-1"],
        ["--scaling", "--partitions", "1"],
    ],
)
def test_bad_flags_fail_before_anything_starts(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        stream_bench.parse_args(argv)
    assert exited.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_max_per_trigger_is_capped_at_the_message_count() -> None:
    args = stream_bench.parse_args(["--messages", "1000", "--max-per-trigger", "5000"])
    assert args.max_per_trigger == 1000


def sample(batch: float, now: float, p50: float, cpu: float, one: float | None = None) -> Any:
    data: dict[str, Any] = {
        "messages": 100_000,
        "plain_rate": 2 * batch,
        "batch": {"rate": batch, "broker_cpu_seconds": cpu},
        "available_now": {"rate": now},
        "latency": {"p50_ms": p50, "p95_ms": 2 * p50},
    }
    if one is not None:
        data["batch_1_partition"] = {"rate": one}
    return data


def two_rounds() -> dict[str, list[Any]]:
    """Hutch 1.5x then 1.0x Kafka's batch rate; half its availableNow rate in both rounds."""
    return {
        "hutch": [
            sample(30_000, 20_000, 300, 1.0, 20_000),
            sample(10_000, 10_000, 600, 2.0, 10_000),
        ],
        "kafka": [sample(20_000, 40_000, 600, 2.0), sample(10_000, 20_000, 300, 1.0)],
    }


def test_ratios_pair_the_rounds_and_put_hutch_on_top() -> None:
    samples = two_rounds()
    summary = stream_summary.summarize(samples)
    hutch = summary["systems"]["hutch"]
    assert hutch["batch_rate"]["median"] == 20_000
    assert (hutch["batch_rate"]["low"], hutch["batch_rate"]["high"]) == (10_000, 30_000)
    # CPU per million messages: 1.0 s for 100,000 messages is 10 s per million.
    assert hutch["batch_cpu_s_per_million"]["low"] == pytest.approx(10.0)
    ratios = summary["hutch_over_kafka"]
    # Round 1: 30k/20k = 1.5, round 2: 10k/10k = 1.0; median of the per-round ratios, not of
    # the medians (20k / 15k would be 1.33).
    assert ratios["batch_rate"]["median"] == pytest.approx(1.25)
    assert (ratios["batch_rate"]["low"], ratios["batch_rate"]["high"]) == (1.0, 1.5)
    assert ratios["available_now_rate"]["median"] == pytest.approx(0.5)
    assert ratios["latency_p50_ms"]["low"] == pytest.approx(0.5)
    assert ratios["latency_p50_ms"]["high"] == pytest.approx(2.0)
    assert "batch_rate_1_partition" not in ratios  # Kafka has no such figure
    assert summary["hutch_scaling"]["median"] == pytest.approx(1.25)  # 1.5 and 1.0


def test_one_system_alone_has_no_ratio_column() -> None:
    summary = stream_summary.summarize({"hutch": [sample(10_000, 9_000, 250, 1.0)]})
    assert summary["hutch_over_kafka"] == {}
    lines = stream_summary.report_lines(summary)
    assert lines[0].split() == ["metric", "hutch"]
    assert "Hutch/Kafka" not in "\n".join(lines)
    assert any(line.startswith("batch read") and "10,000 msg/s (n=1)" in line for line in lines)


def test_the_table_shows_medians_ranges_and_ratios() -> None:
    samples = two_rounds()
    lines = stream_summary.report_lines(stream_summary.summarize(samples), partitions=2)
    table = "\n".join(lines)
    assert "Hutch/Kafka (per round)" in lines[0]
    batch = next(line for line in lines if line.startswith("batch read "))
    assert "20,000 msg/s (10,000-30,000, n=2)" in batch
    assert batch.endswith("1.25 (1.00-1.50, n=2)")
    assert "numPartitions 2 / 1 on local[2], per round: 1.25 (1.00-1.50, n=2)" in table
    assert "broker CPU, batch read" in table
    plain = next(line for line in lines if line.startswith("plain client"))
    assert plain.endswith("1.25 (1.00-1.50, n=2)")  # twice the batch rates, the same ratios


def test_percentile_is_the_nearest_rank_below() -> None:
    assert stream_bench.percentile([5, 1, 4, 2, 3], 0.5) == 3
    assert stream_bench.percentile(list(range(101)), 0.95) == 95


def test_the_kafka_node_is_broker_and_controller_on_loopback() -> None:
    text = kafka.server_properties(19092, 19093, Path("/data/logs"))
    lines = dict(line.split("=", 1) for line in text.splitlines() if line)
    assert lines["process.roles"] == "broker,controller"
    assert lines["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert lines["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert lines["log.dirs"] == "/data/logs"
    assert lines["offsets.topic.replication.factor"] == "1"
    assert "zookeeper.connect" not in lines


def test_cluster_id_is_kafkas_22_character_uuid() -> None:
    seed = uuid.UUID("00000000-0000-0000-0000-000000000001")
    assert kafka.cluster_id(seed) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert len(kafka.cluster_id()) == 22


def test_a_cluster_id_beginning_with_a_dash_stays_the_options_value() -> None:
    seed = uuid.UUID(bytes=bytes([0xF8]) + bytes(15))  # base64url "-A..."
    cluster = kafka.cluster_id(seed)
    assert cluster.startswith("-")
    args = kafka.format_args(cluster, Path("/w/server.properties"))
    assert args == ["format", f"--cluster-id={cluster}", "--config", "/w/server.properties"]


def test_the_pom_lists_each_dependency() -> None:
    text = kafka.pom("x", [("org.apache.kafka", "kafka_2.13", "4.1.1")])
    assert "<artifactId>kafka_2.13</artifactId><version>4.1.1</version>" in text
    assert "<artifactId>x</artifactId>" in text


def test_the_connector_matches_pyspark_or_falls_back_within_the_major_version() -> None:
    served = ("4.2.0", "4.1.1", "4.0.0", "3.5.1")
    assert kafka.connector_version("4.1.1", served) == "4.1.1"
    assert kafka.connector_version("4.3.0", served) == "4.2.0"
    assert kafka.connector_version("4.1.3", served) == "4.1.1"
    assert kafka.connector_version("3.5.4", served) == "3.5.1"
    with pytest.raises(kafka.KafkaError, match=r"no Kafka connector for pyspark 5\.0\.0"):
        kafka.connector_version("5.0.0", served)


def test_the_report_section_renders_the_newest_results_file() -> None:
    samples = two_rounds()
    doc = {
        "summary": stream_summary.summarize(samples),
        "args": {"messages": 200_000, "body_size": 200, "partitions": 2, "repeat": 2},
        "pyspark": "4.3.0",
        "spark_sql_kafka": "4.2.0",
        "kafka": "4.1.1",
        "machine_load": "1-min load average 1.00-2.00 on 2 CPUs",
    }
    headline: list[str] = []
    text = "\n".join(comparison.stream_section(doc, headline))
    assert "| figure | Hutch stream source | Spark Kafka source | Hutch/Kafka (per round) |" in text
    assert "| batch read | 20,000 msg/s (10,000-30,000, n=2) |" in text
    assert "numPartitions 2 over 1, per round: 1.25 (1.00-1.50, n=2)" in text
    assert "spark-sql-kafka-0-10 4.2.0, Kafka 4.1.1" in text
    assert "1-min load average 1.00-2.00" in text
    assert headline == [
        "Stream source vs Spark's Kafka source, batch read: 1.25x (per-round range 1.00-1.50, n=2)"
    ]
    assert "No bench/stream_bench.py results" in "\n".join(comparison.stream_section(None, []))


def test_consumer_performance_summary_gives_the_message_rate() -> None:
    output = (
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n"
        "2026-11-28 11:20:00:123, 2026-11-28 11:20:03:456, 38.1470, 11.4466, 200000, "
        "60012.0024, 512, 2821, 13.5225, 70896.8451\n"
    )
    # fetch.nMsg.sec: the rate without the consumer group's join (512 ms here).
    assert kafka.consumer_rate(output) == pytest.approx(70896.8451)
    with pytest.raises(kafka.KafkaError, match="no summary"):
        kafka.consumer_rate("WARN something went wrong\n")


def test_the_progress_breakdown_sums_each_part_and_times_the_start() -> None:
    # Two reports as Spark writes them: batch 0 (a Python source's empty one) and batch 1.
    progress = [
        {
            "timestamp": "2026-11-29T06:00:01.500Z",
            "numInputRows": 0,
            "durationMs": {"latestOffset": 18, "addBatch": 48, "triggerExecution": 83},
        },
        {
            "timestamp": "2026-11-29T06:00:01.600Z",
            "numInputRows": 50_000,
            "durationMs": {
                "latestOffset": 2,
                "walCommit": 8,
                "addBatch": 970,
                "triggerExecution": 1009,
            },
        },
    ]
    started = 1_795_932_000.25  # 2026-11-29T06:00:00.250Z
    breakdown = stream_bench.progress_breakdown(progress, started)
    assert breakdown["first_trigger_s"] == 1.25
    assert breakdown["duration_ms"] == {
        "latestOffset": 20,
        "queryPlanning": 0,
        "walCommit": 8,
        "addBatch": 1018,
        "commitOffsets": 0,
        "triggerExecution": 1092,
    }
    assert breakdown["batch_rows"] == [0, 50_000]
    assert breakdown["trigger_ms"] == [83, 1009]
    assert stream_bench.progress_breakdown([], started)["first_trigger_s"] is None


def test_the_priming_reads_seconds_are_reported_beside_the_timed_figures() -> None:
    samples = two_rounds()
    for seconds, row in zip((1.6, 0.5), samples["hutch"], strict=True):
        row["prime_seconds"] = seconds
    for row in samples["kafka"]:
        row["prime_seconds"] = 0.4
    summary = stream_summary.summarize(samples)
    assert summary["systems"]["hutch"]["prime_s"]["high"] == pytest.approx(1.6)
    assert summary["hutch_over_kafka"]["prime_s"]["high"] == pytest.approx(4.0)
    line = next(line for line in stream_summary.report_lines(summary) if "priming" in line)
    assert "1.05 s (0.50-1.60, n=2)" in line
    # A sample without it (an older results file) has no such row.
    assert "prime_s" not in stream_summary.flatten(two_rounds()["hutch"][0])
