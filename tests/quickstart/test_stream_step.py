"""make run's stream step (hutch_demo/streamjob.py): the count through the sink's log, and
what the summary says of it.

Why: the step's verdict is "each message once, no dedupe", read from the file sink's
``_spark_metadata`` log on the job's volume. Files a killed batch left behind are not in
that log, so a count of the directory would say twice; a row missing or extra must say
MISMATCH. The run itself is exercised on the node by ``make run``; here, the reading and the
verdict on files written as the sink writes them.
"""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hutch_demo import clusters, quickstart, sparkpods, sparksubmit, streamjob, summaries

S0, S1 = streamjob.STREAMS


def _write(volume: Path, name: str, rows: list[tuple[str, int]], *, logged: int | None) -> None:
    """One Parquet file of ``rows`` in the job's output; ``logged``: the batch whose sink log
    entry lists it (None: an orphan a killed batch left)."""
    output = volume / "stream-copy" / "output"
    (output / "_spark_metadata").mkdir(parents=True, exist_ok=True)
    table = pa.table({
        "stream": [s for s, _ in rows], "offset": [o for _, o in rows],
        "message_id": [f"{s}-{o}" for s, o in rows], "body": [b"{}" for _ in rows],
    })  # fmt: skip
    pq.write_table(table, output / name)
    if logged is not None:
        entry = {"path": f"file://{sparksubmit.MOUNT}/stream-copy/output/{name}", "action": "add"}
        (output / "_spark_metadata" / str(logged)).write_text("v1\n" + json.dumps(entry) + "\n")


def test_the_count_reads_the_sinks_log_and_not_the_directory(tmp_path: Path) -> None:
    _write(tmp_path, "part-0.parquet", [(S0, 0), (S1, 0)], logged=0)
    _write(tmp_path, "part-1.parquet", [(S0, 1), (S1, 1)], logged=1)
    _write(tmp_path, "part-x.parquet", [(S0, 1)], logged=None)  # left by a killed batch
    output = streamjob.read_output(tmp_path)
    assert (output.files, output.twice()) == (2, [])
    assert output.exactly_once(per_stream=2)
    assert not output.exactly_once(per_stream=3)  # a message missing


def test_an_offset_committed_twice_is_a_mismatch_in_the_summary(tmp_path: Path) -> None:
    _write(tmp_path, "part-0.parquet", [(S0, 0), (S1, 0)], logged=0)
    _write(tmp_path, "part-1.parquet", [(S0, 0)], logged=1)
    run = streamjob.StreamRun(2, 1, streamjob.read_output(tmp_path), 2, 41.6)
    assert not run.exactly_once
    [title, text] = run.lines()
    assert title.startswith("Spark stream job stream-copy (orders-stream-0 + orders-stream-1;")
    assert text == (
        "  published 2 confirmed; committed 3 rows in 2 Parquet files over 2 micro-batches, "
        "1 offsets twice: MISMATCH; 42s from spark-submit to the driver's end"
    )
    summary = summaries.Summary(
        namespace="quickstart", broker="hutch", kubeconfig="/k", amqp_uri="amqp://a",
        management_url="http://m", watermark_bytes=None, status_watermark_bytes=None,
        queues=[], published=0, duplicates=0, consumed=0, dead_lettered=0,
        expected_events=0, results=[], parquet="", stream_job=run.lines(),
    )  # fmt: skip
    rendered = summary.render().splitlines()
    assert rendered.index(title) > rendered.index("  Parquet output: removed at exit "
                                                  "(--keep keeps it)")  # fmt: skip


def test_the_submission_runs_the_configmap_job_on_both_streams_with_executor_credentials():
    sub = streamjob.submission("https://a:1", "q", Path("t.json"), "img", "u-creds",
                               "stream-copy", broker="hutch", max_offsets=2500)  # fmt: skip
    words = sparksubmit.command(sub)
    assert f"local://{sparksubmit.USER_JOB_DIR}/job.py" in words
    tail = words[words.index(f"local://{sparksubmit.USER_JOB_DIR}/job.py") + 1 :]
    assert tail == ["--streams", f"{S0},{S1}", "--checkpoint", streamjob.CHECKPOINT,
                    "--output", streamjob.OUTPUT, "--max-offsets-per-trigger", "2500",
                    "--num-partitions", "2"]  # fmt: skip
    confs = sparksubmit.confs(sub)
    assert confs["spark.executor.instances"] == "2"
    assert confs["spark.kubernetes.executor.secretKeyRef.HUTCH_AMQP_USERNAME"] == (
        "u-creds:username"
    )


def test_the_stream_step_runs_unless_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[dict[str, object]] = []
    monkeypatch.setattr(quickstart, "run", lambda **kwargs: asked.append(kwargs))
    assert quickstart.main([]) == 0
    assert quickstart.main(["--no-stream-job"]) == 0
    assert [kwargs["stream_job"] for kwargs in asked] == [True, False]
    assert quickstart.Options().stream_job is True


# --- streamjob.run, make run's stream step, without a cluster -----------------------------
# The kept run of tests/quickstart/test_keep.py leaves the stream job out (its Pod path runs in
# tests/localkube/test_spark_stream_node.py, with the kills), so the step's own logic is shown
# here: it follows the submitting process, then judges by its exit code and the driver Pod.

DRIVER = "stream-copy-driver"


class FakeNodeCluster:
    """The Pods the API would list after the job: a driver in ``phase``, two executors and
    another application's executor."""

    def __init__(self, phase: str) -> None:
        self.phase = phase

    def get(self, path: str) -> dict[str, object] | None:
        if path.endswith(f"/pods/{DRIVER}"):
            return {"metadata": {"name": DRIVER}, "spec": {"nodeName": "hutch-node"},
                    "status": {"phase": self.phase}}  # fmt: skip
        executors = [f"stream-copy-exec-{n}" for n in (1, 2)] + ["other-app-exec-1"]
        return {"items": [{"metadata": {"name": name}, "spec": {"nodeName": "hutch-node"}}
                          for name in executors]}  # fmt: skip


class FakeSubmit:
    """spark-submit: runs for three polls, committing a batch at each, then exits ``code``."""

    def __init__(self, commits: Path, code: int) -> None:
        self.commits, self.polls = commits, 0
        self.proc = type("Proc", (), {"returncode": code})()

    @property
    def running(self) -> bool:
        if self.polls == 3:
            return False
        self.commits.mkdir(parents=True, exist_ok=True)
        (self.commits / str(self.polls)).write_text("v1")
        self.polls += 1
        return True

    def log_tail(self) -> str:
        return "(its log)"


class FakeClock:
    """``time`` for streamjob: each sleep moves the clock on, so the test takes no time."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _run_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, phase: str, code: int) -> object:
    """``streamjob.run`` with the cluster's calls and spark-submit faked."""
    volume = tmp_path / "volume"
    commits = volume / "stream-copy" / "checkpoint" / "commits"
    monkeypatch.setattr(streamjob, "publish", lambda endpoint, per_stream: 2 * per_stream)
    monkeypatch.setattr(streamjob, "stream_user", lambda cluster, ns, broker: "u-creds")
    monkeypatch.setattr(streamjob, "install_job", lambda cluster, ns, work: work / "t.json")
    monkeypatch.setattr(sparkpods, "environment", lambda kubeconfig: {"KUBECONFIG": "k"})
    monkeypatch.setattr(streamjob, "time", FakeClock())
    submitted: list[list[str]] = []

    def spawn(name: str, command: list[str], log: Path, env: dict[str, str]) -> FakeSubmit:
        submitted.append(command)
        return FakeSubmit(commits, code)

    monkeypatch.setattr(streamjob.launchers, "spawn", spawn)
    plane = type("Plane", (), {"server": "https://127.0.0.1:6443", "kubeconfig": Path("k")})()
    where = streamjob.NodeJob(
        cluster=FakeNodeCluster(phase), plane=plane, namespace="quickstart",  # type: ignore[arg-type]
        broker="hutch", endpoint=None, volume_dir=volume, work=tmp_path,  # type: ignore[arg-type]
    )  # fmt: skip
    ticks: list[str] = []
    started: list[object] = []
    try:
        return streamjob.run(where, "img", per_stream=3, max_offsets=2, started=started.append,
                             tick=lambda share, label: ticks.append(label))  # fmt: skip
    finally:
        assert len(submitted) == 1 and len(started) == 1
        words = submitted[0]
        assert words[words.index("--max-offsets-per-trigger") + 1] == "2"
        # 6 messages at 2 a batch, batch 0 the first: 3 batches
        assert ticks == ["0s: 1/3 batches committed", "1s: 2/3 batches committed",
                         "2s: 3/3 batches committed"], ticks  # fmt: skip


def test_the_stream_step_returns_what_the_job_committed_once_the_driver_succeeded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _run_step(tmp_path, monkeypatch, phase="Succeeded", code=0)
    assert isinstance(run, streamjob.StreamRun)
    assert (run.published, run.per_stream, run.batches, run.seconds) == (6, 3, 3, 3.0)
    # The driver and the job's own executors (their name prefix), not another app's Pods.
    assert [p.name for p in run.pods_ran] == [DRIVER, "stream-copy-exec-1", "stream-copy-exec-2"]
    assert not run.exactly_once  # no Parquet was committed: the verdict reads the sink's log


@pytest.mark.parametrize(("phase", "code"), [("Failed", 0), ("Succeeded", 1)])
def test_the_stream_step_fails_on_a_failed_driver_or_spark_submit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, phase: str, code: int
) -> None:
    with pytest.raises(clusters.ClusterError) as failed:
        _run_step(tmp_path, monkeypatch, phase=phase, code=code)
    assert f"spark-submit exited {code}, driver Pod {phase}:\n(its log)" in str(failed.value)
