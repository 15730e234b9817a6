"""The node Spark benchmark's pure parts: the command it submits, the job's broker URL, the report.

Why: bench/spark_node_bench.py claims to run docs/spark.md's spark-submit command with only the
job swapped, and the job builds its broker URL from the Secret's environment; a drift in either
would measure something other than what a user runs, and nothing else checks it (the benchmark
itself runs outside CI).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest
from hutch_demo import sparksubmit

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import comparison  # noqa: E402
import spark_node_bench  # noqa: E402
import spark_node_job  # noqa: E402
import spark_phases  # noqa: E402


def submission() -> sparksubmit.Submission:
    return sparksubmit.Submission(
        api_server="https://127.0.0.1:6443",
        namespace="spark-bench",
        broker="hutch",
        queue="unused",
        credentials_secret=spark_node_bench.ADMIN_SECRET,
        claim="spark-data",
        pod_template=Path("/tmp/template.json"),
        app_name="spark-bench",
    )


def bench_args(*argv: str) -> argparse.Namespace:
    """The flags as spark_node_bench.py parses them (spark_phases.add_arguments)."""
    parser = argparse.ArgumentParser()
    spark_phases.add_arguments(parser)
    return parser.parse_args(argv)


def test_the_command_is_the_documented_one_with_the_benchmark_job() -> None:
    sub = submission()
    args = bench_args("--messages", "5000", "--repeat", "2", "--latency-seconds", "7.5",
                      "--latency-rate", "300")  # fmt: skip
    command = spark_node_bench.job_command(sub, args)
    documented = sparksubmit.command(sub, str(spark_node_bench.sparkpods.SPARK_SUBMIT))
    cut = documented.index(sparksubmit.JOB_FILE)
    assert command[:cut] == documented[:cut]
    assert command[cut:] == [
        "local:///data/bench/spark_node_job.py",
        *("--messages", "5000", "--repeat", "2", "--latency-seconds", "7.5"),
        *("--latency-rate", "300", "--partitions", "2"),
        *("--output", "/data/bench/results.json"),
    ]


def test_the_warm_up_and_partitions_reach_the_job_in_the_pod() -> None:
    args = bench_args("--partitions", "1", "--warm-up", "700")
    command = spark_node_bench.job_command(submission(), args)
    job = spark_node_job_args(command)
    assert (job.partitions, job.warm_up) == (1, 700)
    assert spark_phases.warm_up_size(job) == 700
    assert spark_phases.warm_up_size(bench_args("--messages", "900")) == 900  # default


def spark_node_job_args(command: list[str]) -> argparse.Namespace:
    """The arguments the job in the driver Pod parses from the submitted command."""
    parser = argparse.ArgumentParser()
    spark_phases.add_arguments(parser, output_required=True)
    return parser.parse_args(command[command.index("local:///data/bench/spark_node_job.py") + 1 :])


def test_every_file_the_job_imports_is_copied_beside_it() -> None:
    for name in spark_node_bench.JOB_FILES:
        assert (BENCH / name).is_file()
    source = (BENCH / "spark_node_job.py").read_text() + (BENCH / "spark_phases.py").read_text()
    local = {p.stem for p in BENCH.glob("*.py")}
    imported = {
        line.split()[1].split(".")[0]
        for line in source.splitlines()
        if line.startswith(("import ", "from "))
    }
    assert imported & local <= {Path(name).stem for name in spark_node_bench.JOB_FILES}
    assert "hutch_testing" not in imported  # the hutch-spark image does not have it


def test_the_job_puts_the_secret_credentials_into_the_broker_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HUTCH_AMQP_URI", "amqp://hutch.apps.svc.cluster.local:5672/%2F")
    monkeypatch.setenv("HUTCH_AMQP_USERNAME", "spark")
    monkeypatch.setenv("HUTCH_AMQP_PASSWORD", "p@ss/w:rd")
    assert spark_node_job.broker_url() == (
        "amqp://spark:p%40ss%2Fw%3Ard@hutch.apps.svc.cluster.local:5672/%2F"
    )


def test_the_report_shows_the_node_figures_with_their_spread() -> None:
    spread = {"n": 3, "median": 20000.0, "low": 18000.0, "high": 21000.0}
    ratio = {"n": 3, "median": 0.8, "low": 0.7, "high": 0.9}
    doc = {
        "messages": 50000,
        "repeat": 3,
        "partitions": 1,
        "machine_load": "1-min load average 1.00-2.00 on 2 CPUs",
        "pods": ["spark-bench-driver on hutch-node: spark-kubernetes-driver containerd://ab"],
        "summary": {
            "plain_rate": spread,
            "source_rate": spread,
            "source_over_plain": ratio,
            "latency_p50_ms": {"n": 3, "median": 300.0, "low": 280.0, "high": 350.0},
            "latency_p95_ms": {"n": 3, "median": 500.0, "low": 450.0, "high": 600.0},
        },
    }
    text = "\n".join(comparison.spark_node_section(doc))
    assert "| Hutch, driver Pod | 20,000 (18,000-21,000, n=3) |" in text
    assert "0.80 (0.70-0.90, n=3)" in text
    assert "300 (280-350, n=3)" in text
    assert "containerd://ab" in text
    assert "50000 messages per throughput run in 1 source partition(s)" in text
    assert "No bench/spark_node_bench.py results" in "\n".join(comparison.spark_node_section(None))
