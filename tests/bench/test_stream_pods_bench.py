"""The stream scaling benchmark's pure parts: the read window, the CPU between two moments, the
submission's CPU shares and the 2-over-1 ratio.

Why: bench/stream_pods_bench.py runs outside CI (it needs the real node for many minutes), and
its figure is a ratio of two rates and CPU per message read from cgroups sampled by another
process; an off-by-a-batch window or a CPU interpolated at the wrong end would change the figure
without any run failing. These pin the arithmetic and what is submitted.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hutch_demo import sparksubmit

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import stream_pods_bench as bench  # noqa: E402


def batch(start: float, seconds: float, rows: int) -> dict[str, Any]:
    return {"start": start, "seconds": seconds, "rows": rows}


def test_the_read_window_runs_from_the_first_batch_start_to_the_last_batch_end() -> None:
    batches = [batch(105.0, 2.0, 50), batch(100.0, 4.0, 100), batch(104.0, 1.0, 50)]
    assert bench.read_window(batches) == (100.0, 107.0)
    assert bench.read_rate(batches) == pytest.approx(200 / 7.0)
    with pytest.raises(ValueError, match="no batch"):
        bench.read_window([])
    with pytest.raises(ValueError, match="empty read window"):
        bench.read_rate([batch(100.0, 0.0, 10)])


def test_cpu_between_two_moments_is_interpolated_between_the_samples_around_them() -> None:
    samples = [(10.0, 0), (11.0, 1_000_000_000), (12.0, 3_000_000_000)]
    assert bench.usage_at(samples, 10.5) == pytest.approx(500_000_000)
    assert bench.usage_at(samples, 11.0) == 1_000_000_000
    # Outside the samples, the nearest one: a Pod found late has used nothing before.
    assert bench.usage_at(samples, 5.0) == 0
    assert bench.usage_at(samples, 20.0) == 3_000_000_000
    assert bench.cpu_seconds(samples, 10.5, 11.5) == pytest.approx(1.5)
    with pytest.raises(ValueError, match="no samples"):
        bench.usage_at([], 1.0)


def test_a_runs_figures_add_cpu_by_role_over_the_read_window_only() -> None:
    job = {
        "executors": 2,
        "rows": 1_000_000,
        "batches": [batch(100.0, 5.0, 600_000), batch(105.0, 5.0, 400_000)],
        "driver_cpu_seconds": 0.25,
        "registered_seconds": 3.0,
    }
    second = 1_000_000_000
    samples = {
        # 1 CPU before the window (JVM start, warm-up) must not count, 0.1 CPU inside it.
        "sb-driver": [
            (90.0, 0),
            (100.0, 10 * second),
            (110.0, 11 * second),
            (115.0, 11 * second + second // 4),
        ],
        "sb-exec-1": [(100.0, 0), (110.0, 4 * second)],
        "sb-exec-2": [(100.0, 0), (110.0, 4 * second)],
        "hutch-server-0": [(95.0, 0), (115.0, 4 * second)],
    }
    roles = {
        "sb-driver": "driver",
        "sb-exec-1": "executor",
        "sb-exec-2": "executor",
        "hutch-server-0": "broker",
    }
    found = bench.run_figures(job, samples, roles)
    assert (found["seconds"], found["rate"], found["batches"]) == (10.0, 100_000.0, 2)
    assert found["cpu_s_per_million"] == {"broker": 2.0, "driver": 1.0, "executor": 8.0}
    assert found["driver_cpu_s_per_million_own"] == 0.25
    assert found["driver_cpu_per_s_reading"] == 0.1
    assert found["driver_cpu_per_s_idle"] is None  # the job had no idle window
    idle = bench.run_figures(job | {"idle_started": 110.0, "idle_ended": 115.0}, samples, roles)
    assert idle["driver_cpu_per_s_idle"] == 0.05


def test_the_ratio_pairs_each_round_of_two_executors_with_the_same_rounds_one() -> None:
    def run(executors: int, round_: int, rate: float) -> dict[str, Any]:
        return {"executors": executors, "round": round_, "rate": rate,
                "cpu_s_per_million": {"driver": 0.1}}  # fmt: skip

    runs = [run(1, 0, 100), run(2, 0, 180), run(2, 1, 100), run(1, 1, 50), run(1, 2, 100),
            run(2, 2, 170)]  # fmt: skip
    found = bench.summary(runs)
    assert found["ratio_2_over_1"]["median"] == pytest.approx(1.8)
    assert (found["ratio_2_over_1"]["low"], found["ratio_2_over_1"]["high"]) == (1.7, 2.0)
    assert found["1"]["rate"]["median"] == 100
    assert found["2"]["cpu_s_per_million"]["driver"]["median"] == 0.1
    lines = bench.report_lines(found)
    assert lines[-1] == "2 over 1 executor, paired by round: 1.80x (1.70-2.00, n=3)"
    # Written after every run: a round with only its first run pairs nothing yet.
    partial = bench.summary(runs[:3])
    assert partial["ratio_2_over_1"]["n"] == 1
    assert partial["2"]["rate"]["n"] == 2


def test_the_pod_cgroup_is_found_under_its_qos_class(tmp_path: Path) -> None:
    pod = {"metadata": {"uid": "abc"}}
    assert bench.pod_cgroup(tmp_path, pod) is None  # not started yet
    where = tmp_path / "kubepods" / "burstable" / "podabc"
    where.mkdir(parents=True)
    (where / "cpuacct.usage").write_text("12\n")
    assert bench.pod_cgroup(tmp_path, pod) == where
    assert bench.pod_cgroup(tmp_path, {"metadata": {}}) is None


def test_the_submission_sets_each_executors_cpu_share_and_the_jobs_arguments() -> None:
    args = bench.parse_args(["--executor-cpu", "0.5", "--messages", "1000", "--streams", "3"])
    sub = bench.submission(
        "https://127.0.0.1:6443", "template.json", "img", "sb-r0-e2", 2,
        bench.stream_names(args.streams), args,
    )  # fmt: skip
    confs = sparksubmit.confs(sub)
    assert confs["spark.executor.instances"] == "2"
    assert confs["spark.kubernetes.executor.request.cores"] == "0.5"
    assert confs["spark.kubernetes.executor.limit.cores"] == "0.5"
    assert confs["spark.kubernetes.executor.secretKeyRef.HUTCH_AMQP_USERNAME"] == (
        f"{bench.ADMIN_SECRET}:username"
    )
    words = sparksubmit.job_args(sub)
    assert words[words.index("--streams") + 1] == "bench-stream-0,bench-stream-1,bench-stream-2"
    assert words[words.index("--executors") + 1] == "2"
    assert words[words.index("--messages") + 1] == "1000"
    assert words[words.index("--warm-up") + 1] == "333"  # what a stream holds, under 2,000
    assert bench.parse_args([]).warm_up == 2_000
    # At a fraction of a core, the submission's own default: the executors' JIT at C1 only.
    assert confs["spark.executor.extraJavaOptions"] == sparksubmit.FRACTIONAL_EXECUTOR_JVM


def test_extra_confs_reach_the_submission_and_bad_ones_are_refused() -> None:
    option = "spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1 -Da=b=c"
    args = bench.parse_args(["--conf", option, "--conf", "spark.executor.memory=1g"])
    sub = bench.submission("https://127.0.0.1:6443", "t.json", "img", "app", 1, ["s"], args)
    confs = sparksubmit.confs(sub)
    assert confs["spark.executor.extraJavaOptions"] == "-XX:TieredStopAtLevel=1 -Da=b=c"
    assert confs["spark.executor.memory"] == "1g"  # over the submission's default
    for bad in ("spark.executor.memory", "executor.memory=1g"):
        with pytest.raises(SystemExit):
            bench.parse_args(["--conf", bad])


@pytest.mark.parametrize(
    "argv",
    [
        ["--repeat", "0"],
        ["--warm-up", "0"],
        ["--messages", "1000", "--streams", "4", "--warm-up", "251"],
    ],
)
def test_bad_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(argv)


def test_the_brokers_cpu_is_capped_and_its_request_leaves_room_for_two_executors(
    tmp_path: Path,
) -> None:
    """A request of a whole CPU for the broker left the second executor Pod Pending on the
    2-CPU node (operator 100m + broker 1 + driver 200m + 2 x 400m > 2)."""
    import yaml

    doc = yaml.safe_load(bench.broker_manifest(tmp_path, "1").read_text())
    resources = doc["spec"]["resources"]
    assert resources["limits"] == {"cpu": "1", "memory": "1Gi"}
    assert resources["requests"]["cpu"] == "500m"
    args = bench.parse_args([])
    requests = 0.1 + 0.5 + 0.2 + 2 * float(args.executor_cpu)  # operator, broker, driver, 2 x
    assert requests <= 2


def test_the_nodes_cpu_weight_is_set_on_its_own_cgroup_and_the_old_one_returned(
    tmp_path: Path,
) -> None:
    node = tmp_path / "hutch-node-run1"
    node.mkdir()
    (node / "cpu.shares").write_text("1024\n")
    assert bench.set_node_cpu_shares(tmp_path, "hutch-node-run1", 8192) == 1024
    assert (node / "cpu.shares").read_text() == "8192\n"
    assert bench.parse_args([]).node_cpu_shares == 8192
    assert bench.parse_args(["--node-cpu-shares", "0"]).node_cpu_shares == 0
    with pytest.raises(SystemExit):
        bench.parse_args(["--node-cpu-shares", "1"])
